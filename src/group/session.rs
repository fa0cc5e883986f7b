//! The membership state shared by the poll thread and the heartbeat thread.
//!
//! One mutex, held only for reads and writes of this struct (never across I/O), and one condvar
//! that wakes the heartbeat thread when the phase changes or the consumer closes.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::membership::FatalError;
use super::requests::MemberIdentity;
use crate::guard::SessionBound;
use crate::wire::KafkaCode;
use crate::TopicPartition;

/// Where the member is in the classic protocol's life cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Not in a generation: before the first join, or after a reset.
    Unjoined,
    /// The poll thread is inside JoinGroup/SyncGroup; heartbeats pause.
    Joining,
    /// In a generation with an assignment; the heartbeat thread keeps the session alive.
    Stable,
    /// Closed; the heartbeat thread exits.
    Closed,
}

/// Why the assignment was lost rather than handed off.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LostReason {
    /// The poll thread did not poll within `max.poll.interval.ms`; we left the group.
    PollTimeout,
    /// No successful heartbeat for `session.timeout.ms`: the coordinator has very likely evicted
    /// us, so we stop processing before it hands the partitions to someone else.
    SessionExpired,
    /// The coordinator answered with this error code (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
    /// FENCED_INSTANCE_ID).
    Fenced(KafkaCode),
}

pub(crate) struct SessionState {
    pub(crate) phase: Phase,
    pub(crate) identity: MemberIdentity,
    pub(crate) owned: Vec<TopicPartition>,
    /// Set when a rejoin is needed, with the reason for the logs and the JoinGroup request.
    pub(crate) rejoin: Option<String>,
    /// Partitions the heartbeat thread already fenced (through the lost hook) and that the poll
    /// thread must still report to its listener.
    pub(crate) lost: Vec<(Vec<TopicPartition>, LostReason)>,
    pub(crate) fatal: Option<FatalError>,
    /// When the application last got control back from `poll`: `max.poll.interval.ms` runs from
    /// here while `in_poll` is false.
    pub(crate) last_poll: Instant,
    /// True while the application's thread is inside the library's `poll` (joining, syncing,
    /// running the rebalance callbacks): that time is the library's, not the handler's, so it
    /// does not count against `max.poll.interval.ms`.
    pub(crate) in_poll: bool,
    /// True while a JoinGroup or SyncGroup of ours is at the coordinator: it does not expire a
    /// member it holds in a join, so the session clock cannot run out meanwhile.
    pub(crate) request_in_flight: bool,
    pub(crate) last_heartbeat_ok: Instant,
    /// Shared with the guard: renewed here, read by whoever is about to act on a lease.
    pub(crate) session_bound: Option<Arc<SessionBound>>,
}

impl SessionState {
    /// The coordinator answered a request of ours sent at `sent` (a heartbeat, a JoinGroup, a
    /// SyncGroup): the session runs for `session_timeout` from there.
    pub(crate) fn session_renewed(&mut self, sent: Instant, session_timeout: Duration) {
        self.last_heartbeat_ok = self.last_heartbeat_ok.max(sent);
        if let Some(bound) = &self.session_bound {
            bound.renew(sent, session_timeout);
        }
    }
}

pub(crate) struct Shared {
    state: Mutex<SessionState>,
    pub(crate) wake: Condvar,
}

impl Shared {
    pub(crate) fn new() -> Self {
        let now = Instant::now();
        Shared {
            state: Mutex::new(SessionState {
                phase: Phase::Unjoined,
                identity: MemberIdentity::unjoined(),
                owned: Vec::new(),
                rejoin: Some("initial join".to_string()),
                lost: Vec::new(),
                fatal: None,
                last_poll: now,
                in_poll: false,
                request_in_flight: false,
                last_heartbeat_ok: now,
                session_bound: None,
            }),
            wake: Condvar::new(),
        }
    }

    /// No code that can panic runs while the lock is held, so a poisoned lock still guards a
    /// consistent state.
    pub(crate) fn lock(&self) -> MutexGuard<'_, SessionState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
