//! Callbacks instead of changes: a [`RebalanceListener`] driven by [`poll_with`] and
//! [`close_with`] over any [`Membership`], for the group-level tests and tools that join a group
//! without a consumer (the consumer itself applies [`Change`]s through its handoff driver).

use std::time::{Duration, Instant};

use super::changes::{Change, CommitKind, CommitResults};
use super::error::{CommitError, GroupError};
use super::membership::Membership;
use super::outcome::LostReason;
use super::requests::MemberIdentity;
use crate::wire::{self, RecordSource};
use crate::TopicPartition;

/// Receives the membership's changes on the poll thread, as callbacks.
///
/// Revocation callbacks get a [`GroupContext`] whose `commit` carries the generation the
/// partitions were owned in, so a synchronous commit there is fenced correctly by the broker.
pub trait RebalanceListener {
    /// These partitions are handed back: flush and commit them now, synchronously.
    fn on_partitions_revoked(&mut self, ctx: &mut GroupContext<'_>, partitions: &[TopicPartition]);
    /// These partitions are ours from now on (under cooperative rebalancing: only the new ones).
    fn on_partitions_assigned(&mut self, ctx: &mut GroupContext<'_>, partitions: &[TopicPartition]);
    /// These partitions were taken away without a handoff: do not commit them. They were already
    /// fenced through the lost hook when the loss was detected.
    fn on_partitions_lost(&mut self, partitions: &[TopicPartition], reason: &LostReason);
}

/// The group as seen from inside a listener callback: the client and a commit bound to the
/// generation of the change.
pub struct GroupContext<'a> {
    member: &'a mut dyn Membership,
    identity: MemberIdentity,
    leader: bool,
}

impl GroupContext<'_> {
    /// True when this member computed the group's assignment in this generation.
    pub fn is_leader(&self) -> bool {
        self.leader
    }

    /// Where records and positions are read, e.g. the committed offsets of newly assigned
    /// partitions.
    pub fn records(&mut self) -> &mut dyn RecordSource {
        self.member.records()
    }

    /// The generation this context commits in.
    pub fn generation_id(&self) -> i32 {
        self.identity.generation_id
    }

    /// Our member id.
    pub fn member_id(&self) -> &str {
        &self.identity.member_id
    }

    /// Commits synchronously with this generation and member id, after the background commit
    /// in flight (if any) was answered: a handoff's commit is the last word on its partitions.
    pub fn commit(
        &mut self,
        offsets: &[wire::OffsetCommitEntry],
    ) -> Result<CommitResults, CommitError> {
        self.member
            .commit_as(&self.identity, offsets, CommitKind::Handoff)
    }
}

/// Applies every change the membership has until it is stable or `timeout` passed, through
/// `listener`'s callbacks (each acknowledged right after its callback).
pub fn poll_with(
    member: &mut dyn Membership,
    listener: &mut dyn RebalanceListener,
    timeout: Duration,
) -> Result<(), GroupError> {
    member.enter_poll();
    let deadline = Instant::now().checked_add(timeout);
    let result = (|| loop {
        let left = deadline.map_or(Duration::MAX, |d| {
            d.saturating_duration_since(Instant::now())
        });
        match member.next_change(left)? {
            None => return Ok(()),
            Some(change) => apply(member, listener, change),
        }
    })();
    member.leave_poll();
    result
}

/// Hands everything back through `listener` while the generation is still ours, then leaves
/// the group (unless static) and stops the membership's threads.
pub fn close_with(
    member: &mut dyn Membership,
    listener: &mut dyn RebalanceListener,
) -> Result<(), GroupError> {
    for change in member.closing() {
        apply(member, listener, change);
    }
    member.leave()
}

fn apply(member: &mut dyn Membership, listener: &mut dyn RebalanceListener, change: Change) {
    let (identity, leader) = match &change {
        Change::Revoke { identity, .. } => (identity.clone(), false),
        Change::Assign {
            identity, leader, ..
        } => (identity.clone(), *leader),
        Change::Lost { partitions, reason } => {
            return listener.on_partitions_lost(partitions, reason);
        }
    };
    let mut ctx = GroupContext {
        member,
        identity,
        leader,
    };
    match &change {
        Change::Revoke { partitions, .. } => listener.on_partitions_revoked(&mut ctx, partitions),
        Change::Assign { partitions, .. } => listener.on_partitions_assigned(&mut ctx, partitions),
        Change::Lost { .. } => {}
    }
    ctx.member.acknowledge(change);
}
