//! The session's transitions under the consumer group protocol (KIP-848), for the membership
//! thread that drives `ConsumerGroupMembership` (`group/consumer_group/thread.rs`, through
//! `consumer_group/mirror.rs`).
//!
//! The same state serves both protocols so that the poll thread reads one story: a decided
//! change waits as one [`Pending`] and is handed to the poll thread at a batch boundary by the member (`Membership::next_change`), a
//! loss goes through [`SessionState::lose`], commits are checked by
//! [`SessionState::may_commit`]. What differs is who decides: here the broker's target
//! assignment, reconciled by the machine, instead of a JoinGroup/SyncGroup round. The identity's
//! generation is the member epoch (OffsetCommit v9 carries it in the same field).

use std::time::{Duration, Instant};

use super::{Pending, Phase, SessionState};
use crate::group::membership::{RebalanceEvent, RebalancePlan};
use crate::group::outcome::LostReason;
use crate::group::requests::MemberIdentity;
use crate::TopicPartition;

impl SessionState {
    /// The machine is in the group as `identity` (its member epoch and member id): commits and
    /// decided changes carry it from now on. Only while no change waits for the poll thread, so
    /// a change is applied with the identity it was decided in; the caller retries later.
    /// False when a change is pending or the member is closed.
    pub(crate) fn member_epoch_is(&mut self, identity: &MemberIdentity) -> bool {
        if self.phase == Phase::Closed || self.pending.is_some() {
            return false;
        }
        if self.identity != *identity || self.phase != Phase::Stable {
            self.identity = identity.clone();
            self.phase = Phase::Stable;
        }
        self.rejoin = None;
        true
    }

    /// Posts one change the machine decided (a revocation, with its id for the acknowledgement,
    /// or an assignment) for the poll thread, fencing what it revokes at once. False while
    /// another change still waits (changes go one at a time, in the machine's order) or the
    /// member is not in the group as `identity`.
    pub(crate) fn post_change(
        &mut self,
        identity: &MemberIdentity,
        event: RebalanceEvent,
        ack: Option<u64>,
    ) -> bool {
        if self.pending.is_some() || self.phase != Phase::Stable || self.identity != *identity {
            return false;
        }
        let mut owned_after: Vec<TopicPartition> = self.owned.clone();
        let mut fenced = None;
        match &event {
            RebalanceEvent::Revoke(partitions) => {
                owned_after.retain(|tp| !partitions.contains(tp));
                if let Some(fence) = &self.fence_hook {
                    log::info!(
                        "member epoch {} revokes {} partition(s): fenced now, handed off at the \
                         next batch boundary",
                        identity.generation_id,
                        partitions.len()
                    );
                    fenced = Some(fence(partitions));
                }
            }
            RebalanceEvent::Assign(partitions) => {
                owned_after.extend(partitions.iter().cloned());
                owned_after.sort();
                owned_after.dedup();
            }
            RebalanceEvent::Lost(_) => return false,
        }
        // An assignment is applied through `assigning`, which sets the owned partitions to the
        // plan's; a revocation through `revoked`. Neither asks for a round.
        self.pending = Some(Pending {
            identity: identity.clone(),
            leader: false,
            plan: RebalancePlan {
                events: vec![event],
                owned_after,
                rejoin: false,
            },
            ack,
            fenced,
            id: self.next_change_id(),
        });
        true
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
