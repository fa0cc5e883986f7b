//! [`ManualAssignment`]: the member of no group, for a consumer that reads partitions it chose
//! itself (Java's `assign`; tools, replays, a single-owner reader).
//!
//! Nothing is joined and nothing can take the partitions away, so the guard's leases never go
//! stale by a rebalance and there is no session to renew: the one change it hands out is the
//! assignment, at the first poll, and at close it hands the partitions back without a commit.
//! A commit is made only when the application asks for one, and is sent as Kafka's commits
//! from outside any group are: generation -1, no member id. The coordinator accepts that for
//! a group that has no members (and refuses it, per partition, while a group of that id is
//! running: a reader of the same group's partitions must not overwrite its commits).

use std::sync::Arc;
use std::time::Duration;

use super::assignor::RebalanceProtocol;
use super::changes::{Change, CommitKind, CommitResults, Decision, FenceHook, MembershipView};
use super::commit::OffsetCommitSend;
use super::error::{CommitError, GroupError};
use super::membership::Membership;
use super::requests::MemberIdentity;
use crate::guard::SessionBound;
use crate::wire::{Client, ClientConfig, CommitIdentity, Nudge, OffsetCommitEntry, RecordSource};
use crate::TopicPartition;

/// The member of no group: it owns the partitions it was given, for as long as it runs.
pub struct ManualAssignment {
    client: Client,
    group_id: String,
    partitions: Vec<TopicPartition>,
    /// The assignment is handed out at the first poll, once.
    handed_out: bool,
}

impl ManualAssignment {
    /// Connects, to read `partitions` and (when asked) commit them as `group_id`.
    pub fn new(
        client_config: ClientConfig,
        group_id: &str,
        partitions: &[TopicPartition],
    ) -> Result<Self, GroupError> {
        Ok(ManualAssignment {
            client: Client::connect(client_config)?,
            group_id: group_id.to_string(),
            partitions: partitions.to_vec(),
            handed_out: false,
        })
    }
}

impl Membership for ManualAssignment {
    fn next_change(&mut self, _timeout: Duration) -> Result<Option<Change>, GroupError> {
        if self.handed_out {
            return Ok(None);
        }
        self.handed_out = true;
        Ok(Some(Change::Assign {
            identity: MemberIdentity::unjoined(),
            partitions: self.partitions.clone(),
            leader: false,
            decision: Decision::manual(),
        }))
    }

    fn acknowledge(&mut self, _change: Change) {}

    /// Nothing to hand back through a revocation: a reader outside a group commits only when
    /// asked, and nobody waits for its partitions.
    fn closing(&mut self) -> Vec<Change> {
        Vec::new()
    }

    fn leave(&mut self) -> Result<(), GroupError> {
        Ok(())
    }

    fn commit_as(
        &mut self,
        _identity: &MemberIdentity,
        offsets: &[OffsetCommitEntry],
        _kind: CommitKind,
    ) -> Result<CommitResults, CommitError> {
        let who = CommitIdentity {
            group_id: &self.group_id,
            generation_id_or_member_epoch: -1,
            member_id: "",
            group_instance_id: None,
        };
        self.client
            .offset_commit(&who, offsets)
            .map_err(CommitError::Wire)
    }

    /// Outside a group: generation -1 and no member id, which only a group without members
    /// accepts.
    fn commit_through(
        &mut self,
        _identity: &MemberIdentity,
        offsets: &[OffsetCommitEntry],
        _kind: CommitKind,
        send: &mut OffsetCommitSend<'_>,
    ) -> Result<CommitResults, CommitError> {
        let who = CommitIdentity {
            group_id: &self.group_id,
            generation_id_or_member_epoch: -1,
            member_id: "",
            group_instance_id: None,
        };
        send(&who, offsets)
    }

    /// No paced commits outside a group: they would be commits nobody asked for.
    fn commit_in_background(
        &mut self,
        offsets: Vec<OffsetCommitEntry>,
    ) -> Result<(), Vec<OffsetCommitEntry>> {
        Err(offsets)
    }

    fn commit_answer(&mut self) -> Option<Result<CommitResults, CommitError>> {
        None
    }

    fn settle_commit(&mut self) {}

    fn commit_in_flight(&self) -> bool {
        false
    }

    /// Outside a group nobody else is given these partitions, and a commit is made only when
    /// the application asks for one: no token is raised (leases carry 0).
    fn fences_assignments(&self) -> bool {
        false
    }

    fn records(&mut self) -> &mut dyn RecordSource {
        &mut self.client
    }

    fn identity(&self) -> MemberIdentity {
        MemberIdentity::unjoined()
    }

    fn owned(&self) -> Vec<TopicPartition> {
        if self.handed_out {
            self.partitions.clone()
        } else {
            Vec::new()
        }
    }

    fn rebalance_protocol(&self) -> RebalanceProtocol {
        RebalanceProtocol::Eager
    }

    fn may_fetch(&self) -> bool {
        true
    }

    fn batch_boundary_due(&self) -> bool {
        false
    }

    fn enter_poll(&self) {}

    fn leave_poll(&self) {}

    fn wait_while_session_lapsed(&self, _bound: &SessionBound, _timeout: Duration) {}

    fn nudge(&self) -> Nudge {
        // The poll never waits on this member.
        Arc::new(|| {})
    }

    fn view(&self) -> MembershipView {
        let partitions = self.partitions.clone();
        MembershipView::new(move || (MemberIdentity::unjoined(), partitions.clone()))
    }

    /// No session: the bound is never armed, and leases go stale only by the guard's own events.
    fn bound_session(&self, _bound: Arc<SessionBound>) {}

    /// Nothing is ever revoked.
    fn fence_revocations_with(&self, _hook: FenceHook) {}

    fn panic_membership_thread(&self) {}
}
