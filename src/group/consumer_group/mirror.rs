//! The KIP-848 machine mirrored into the shared session, for whichever thread drives it: the
//! membership thread (`thread.rs`, with a client) and the in-memory members of the tests (with
//! an in-memory coordinator). What the poll thread did (closed, acknowledged a revocation,
//! overran `max.poll.interval.ms`, polled again) goes into the machine; what the machine decided
//! (a revocation, an assignment, a loss, a fatal error) goes into the session, one change at a
//! time, its revocations fenced at once.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use crate::guard::lease_now;

use super::{ConsumerGroupMembership, Event, MemberState, RevocationId, SESSION_BOUND_INTERVALS};
use crate::group::error::GroupError;
use crate::group::outcome::LostReason;
use crate::group::requests::MemberIdentity;
use crate::group::session::{Phase, Shared};
use crate::TopicPartition;

/// The machine, the session it is mirrored into, and the decided changes not posted yet.
pub(crate) struct Mirror {
    pub(crate) shared: Arc<Shared>,
    pub(crate) machine: ConsumerGroupMembership,
    pub(crate) group_id: String,
    /// Decided changes not posted yet (the seam holds one at a time): a revocation of the
    /// partitions with the machine's id for its acknowledgement, or (`None`) an assignment.
    queue: VecDeque<(Vec<TopicPartition>, Option<u64>)>,
    /// The machine was told to leave: the member was closed, or its poll overran
    /// `max.poll.interval.ms`.
    pub(crate) leaving: bool,
    pub(crate) leave_started: Option<Instant>,
    /// Since when the session's owned partitions differ from the machine's with nothing on
    /// the way between them (see [`Mirror::check_ownership`]).
    diverged_since: Option<Instant>,
}

impl Mirror {
    /// The machine `machine` over the session `shared`.
    pub(crate) fn new(
        shared: Arc<Shared>,
        group_id: String,
        machine: ConsumerGroupMembership,
    ) -> Self {
        Mirror {
            shared,
            group_id,
            machine,
            queue: VecDeque::new(),
            leaving: false,
            leave_started: None,
            diverged_since: None,
        }
    }

    /// The driving thread's turn before its requests, the same on the membership thread and in
    /// the in-memory members of the tests, so that those tests run the thread's order: what
    /// the poll thread did goes into the machine, time passes, and what the machine decided
    /// goes into the session. False when the thread should exit at once.
    pub(crate) fn turn(&mut self, now: Instant) -> bool {
        if !self.look_at_the_session(now) {
            return false;
        }
        self.machine.handle_timeout(now);
        self.take_events();
        self.check_ownership(now);
        self.sync_session();
        true
    }

    /// After a request was answered (or lost): what the machine decided goes into the session.
    pub(crate) fn hand_over(&mut self) {
        self.take_events();
        self.sync_session();
    }

    /// Left (or out for good) after being told to leave: the driving thread may stop.
    pub(crate) fn done_leaving(&self) -> bool {
        self.leaving
            && matches!(
                self.machine.state(),
                MemberState::Left | MemberState::Stale | MemberState::Fatal
            )
    }

    pub(crate) fn identity(&self) -> Option<MemberIdentity> {
        self.machine.commit_epoch().map(|epoch| MemberIdentity {
            generation_id: epoch,
            member_id: self.machine.member_id().to_string(),
        })
    }

    /// Reads what the poll thread did: closed (leave), revocations applied (acknowledge), a poll
    /// past `max.poll.interval.ms` (leave, lost), polling again after that (rejoin). False when
    /// the thread should exit at once (closed before ever joining).
    pub(crate) fn look_at_the_session(&mut self, now: Instant) -> bool {
        let mut state = self.shared.lock();
        if state.phase() == Phase::Closed && !self.leaving {
            self.leaving = true;
            self.leave_started = Some(now);
            self.queue.clear();
            drop(state);
            self.machine.leave(now);
            // The poll thread revoked and committed everything the session owned before it
            // closed it, a revocation still waiting for its acknowledgement included (closing
            // dropped the pending change without applying it): acknowledged here, or the machine
            // would wait for it and never send the leave heartbeat.
            if let Some(id) = self.machine.pending_revocation() {
                self.machine.revocation_done(now, id);
            }
            return true;
        }
        if !state.polling(true) {
            return true;
        }
        let acknowledged = state.take_acknowledged();
        let overdue = state.poll_overdue(now);
        let polling = state.polling(false);
        drop(state);
        for id in acknowledged {
            self.machine.revocation_done(now, RevocationId(id));
        }
        if overdue && !self.leaving {
            log::warn!(
                "no poll for more than max.poll.interval.ms: the assignment is fenced and the \
                 member leaves group {}; the handler is too slow for its batch",
                self.group_id
            );
            self.machine.poll_timed_out();
        }
        if polling && self.machine.state() == MemberState::Stale {
            self.machine.rejoin();
        }
        true
    }

    /// Moves the machine's events into the queue (losses and failures act at once).
    pub(crate) fn take_events(&mut self) {
        while let Some(event) = self.machine.poll_event() {
            match event {
                Event::Revoke { id, partitions, .. } => {
                    if self.leaving {
                        // Closing: the poll thread revoked and committed everything before it
                        // closed the session; the machine only needs to hear it is done.
                        self.machine.revocation_done(lease_now(), id);
                    } else {
                        self.queue.push_back((partitions, Some(id.0)));
                    }
                }
                Event::Assign { partitions, .. } => {
                    if !self.leaving {
                        self.queue.push_back((partitions, None));
                    }
                }
                Event::Lost { partitions, cause } => {
                    log::warn!(
                        "group {}: {} partition(s) lost ({cause:?})",
                        self.group_id,
                        partitions.len()
                    );
                    self.queue.clear();
                    self.shared.lock().lose(cause, false);
                    self.shared.wake.notify_all();
                }
                Event::Fatal(fatal) => {
                    log::error!("group {}: {fatal}", self.group_id);
                    self.queue.clear();
                    self.shared
                        .lock()
                        .lose(LostReason::Fenced(fatal.code), false);
                    self.shared.set_failure(GroupError::Fatal(fatal));
                }
                Event::Left => {}
            }
        }
    }

    /// The ownership check. The machine's owned set is the member's, the one its heartbeats
    /// report to the broker; the session's (and the guard's, which follows it) is that set as
    /// the poll thread has applied it, so the two differ only while a change is on its way
    /// (queued here, pending in the session, a revocation not acknowledged yet). If they still
    /// differ with nothing on the way for [`SESSION_BOUND_INTERVALS`] heartbeat intervals, a
    /// change went missing: the session is corrected toward the machine, with a warning, so
    /// that no partition stays assigned by the broker and consumed by nobody (the machine owns
    /// it: it is assigned through the normal path) or worked on by a member that does not own
    /// it (the session holds it: fenced as lost, nothing committed).
    pub(crate) fn check_ownership(&mut self, now: Instant) {
        let settled = !self.leaving
            && self.queue.is_empty()
            && self.machine.pending_revocation().is_none()
            && self.machine.commit_epoch().is_some();
        let mut state = self.shared.lock();
        let machine: BTreeSet<TopicPartition> = self.machine.owned().into_iter().collect();
        let session: BTreeSet<TopicPartition> = state.owned().iter().cloned().collect();
        if !settled || state.pending().is_some() || machine == session {
            self.diverged_since = None;
            return;
        }
        let since = *self.diverged_since.get_or_insert(now);
        let allowed = self
            .machine
            .heartbeat_interval()
            .unwrap_or_default()
            .saturating_mul(SESSION_BOUND_INTERVALS);
        if now.saturating_duration_since(since) < allowed {
            return;
        }
        self.diverged_since = None;
        let missing: Vec<TopicPartition> = machine.difference(&session).cloned().collect();
        let extra: Vec<TopicPartition> = session.difference(&machine).cloned().collect();
        log::warn!(
            "group {}: the consumer's partitions {:?} differ from the membership's {:?} (what \
             the broker assigned) for {:?} with no change on the way; correcting: taking {:?}, \
             fencing {:?} as lost",
            self.group_id,
            session.iter().map(ToString::to_string).collect::<Vec<_>>(),
            machine.iter().map(ToString::to_string).collect::<Vec<_>>(),
            now.saturating_duration_since(since),
            missing.iter().map(ToString::to_string).collect::<Vec<_>>(),
            extra.iter().map(ToString::to_string).collect::<Vec<_>>(),
        );
        if !extra.is_empty() {
            state.lose_partitions(&extra, LostReason::NotOwnedByTheMembership);
        }
        if !missing.is_empty() {
            self.queue.push_back((missing, None));
        }
        drop(state);
        self.shared.wake.notify_all();
    }

    /// Mirrors the machine into the session: its epoch (while nothing is pending), the next
    /// queued change, or that it is out of the group.
    pub(crate) fn sync_session(&mut self) {
        let identity = self.identity();
        let mut state = self.shared.lock();
        let Some(identity) = identity else {
            if !self.leaving {
                state.out_of_group("the consumer group member is joining");
            }
            return;
        };
        if !state.member_epoch_is(&identity) {
            return;
        }
        if let Some((partitions, revocation)) = self.queue.front().cloned() {
            let posted = match revocation {
                Some(id) => state.post_revoke(&identity, partitions, id),
                None => state.post_assign(&identity, partitions),
            };
            if posted {
                self.queue.pop_front();
                drop(state);
                self.shared.wake.notify_all();
            }
        }
    }
}
