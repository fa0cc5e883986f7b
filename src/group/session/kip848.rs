//! The session's transitions under the consumer group protocol (KIP-848), for the membership
//! thread that drives `ConsumerGroupMembership` (`group/consumer_group/thread.rs`, through
//! `consumer_group/mirror.rs`).
//!
//! The same state serves both protocols so that the poll thread reads one story: a decided
//! change waits as [`Change`]s and is handed to the poll thread at a batch boundary by the member (`Membership::next_change`), a
//! loss goes through [`SessionState::lose`], commits are checked by
//! [`SessionState::may_commit`]. What differs is who decides: here the broker's target
//! assignment, reconciled by the machine, instead of a JoinGroup/SyncGroup round. The identity's
//! generation is the member epoch (OffsetCommit v9 carries it in the same field).

use std::time::{Duration, Instant};

use super::{Phase, SessionState};
use crate::group::changes::{Change, Decision, Origin};
use crate::group::outcome::LostReason;
use crate::group::requests::MemberIdentity;
use crate::TopicPartition;

impl SessionState {
    /// The machine is in the group as `identity` (its member epoch and member id): commits and
    /// decided changes carry it from now on. Only while no change waits for the poll thread, so
    /// a change is applied with the identity it was decided in; the caller retries later.
    /// False when a change is pending or the member is closed.
    pub(crate) fn member_epoch_is(&mut self, identity: &MemberIdentity) -> bool {
        if self.phase == Phase::Closed || self.decided.is_some() {
            return false;
        }
        if self.identity != *identity || self.phase != Phase::Stable {
            self.identity = identity.clone();
            self.phase = Phase::Stable;
        }
        self.rejoin = None;
        true
    }

    /// Posts the machine's revocation `machine` of `partitions` for the poll thread, fencing
    /// them at once. False while another change still waits (changes go one at a time, in the
    /// machine's order) or the member is not in the group as `identity`.
    pub(crate) fn post_revoke(
        &mut self,
        identity: &MemberIdentity,
        partitions: Vec<TopicPartition>,
        machine: u64,
    ) -> bool {
        if !self.may_post(identity) {
            return false;
        }
        let mut owned_after = self.owned.clone();
        owned_after.retain(|tp| !partitions.contains(tp));
        let decision = self.machine_decision(owned_after, Some(machine));
        let change = Change::Revoke {
            identity: identity.clone(),
            partitions,
            fenced: None,
            decision,
        };
        self.decide(vec![change], "member epoch");
        true
    }

    /// Posts the machine's assignment of `partitions` (the new ones) for the poll thread; false
    /// as for [`post_revoke`](Self::post_revoke).
    pub(crate) fn post_assign(
        &mut self,
        identity: &MemberIdentity,
        partitions: Vec<TopicPartition>,
    ) -> bool {
        if !self.may_post(identity) {
            return false;
        }
        let mut owned_after = self.owned.clone();
        owned_after.extend(partitions.iter().cloned());
        owned_after.sort();
        owned_after.dedup();
        let decision = self.machine_decision(owned_after, None);
        let change = Change::Assign {
            identity: identity.clone(),
            partitions,
            leader: false,
            decision,
        };
        self.decide(vec![change], "member epoch");
        true
    }

    /// True when a change of `identity` may be posted: none waits, and the member is in the
    /// group as `identity`.
    fn may_post(&self, identity: &MemberIdentity) -> bool {
        self.decided.is_none() && self.phase == Phase::Stable && self.identity == *identity
    }

    /// A decision of the machine's: an assignment sets the owned partitions to `owned_after`
    /// (`assigning`), a revocation takes its partitions out (`revoked`); neither asks for a
    /// round.
    fn machine_decision(
        &mut self,
        owned_after: Vec<TopicPartition>,
        machine: Option<u64>,
    ) -> Decision {
        Decision(Origin::Session {
            id: self.next_change_id(),
            owned_after,
            rejoin: false,
            machine,
        })
    }

    /// The revocations the poll thread finished since the last call, for the machine's
    /// `revocation_done`.
    pub(crate) fn take_acknowledged(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.acknowledged)
    }

    /// True when the application has stayed outside `poll` for longer than
    /// `max.poll.interval.ms` while the member is in the group.
    pub(crate) fn poll_overdue(&self, now: Instant) -> bool {
        self.phase == Phase::Stable
            && self.polled
            && !self.in_poll
            && now.saturating_duration_since(self.last_poll) > self.timeouts.max_poll_interval
    }

    /// True while the application's thread is inside `poll`, or once it polled at all
    /// (`ever`): the membership starts joining only then, as the classic one does.
    pub(crate) fn polling(&self, ever: bool) -> bool {
        if ever {
            self.polled
        } else {
            self.in_poll
        }
    }

    /// A heartbeat sent at `sent` was answered: leases are trusted for `bound` from there (the
    /// machine's `session_renewal`, derived from the broker's heartbeat interval).
    pub(crate) fn renew_bound(&mut self, sent: Instant, bound: Duration) {
        self.last_heartbeat_ok = self.last_heartbeat_ok.max(sent);
        if let Some(session_bound) = &self.session_bound {
            session_bound.renew(sent, bound);
        }
    }

    /// Ends the ownership of `partitions` only, without a handoff (the membership does not own
    /// them: see `consumer_group/mirror.rs`'s ownership check): fenced through the lost hook
    /// under this lock, reported to the poll thread's listener, and no longer owned; the rest
    /// of the assignment and the identity stay.
    pub(crate) fn lose_partitions(&mut self, partitions: &[TopicPartition], reason: LostReason) {
        let (gone, kept): (Vec<TopicPartition>, Vec<TopicPartition>) =
            std::mem::take(&mut self.owned)
                .into_iter()
                .partition(|tp| partitions.contains(tp));
        self.owned = kept;
        if gone.is_empty() {
            return;
        }
        (self.hook)(&gone, &reason);
        self.lost.push((gone, reason));
    }

    /// The member is out of the group (left after a poll timeout, or waiting to rejoin after a
    /// loss): nothing may be committed until the machine joins again.
    pub(crate) fn out_of_group(&mut self, reason: &str) {
        if self.phase == Phase::Stable {
            self.phase = Phase::Unjoined;
            self.identity.generation_id = -1;
        }
        if self.phase != Phase::Closed {
            self.rejoin.get_or_insert_with(|| reason.to_string());
        }
    }
}
