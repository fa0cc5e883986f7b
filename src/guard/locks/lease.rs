//! The handle a worker holds on one acquired record: its lock's deadline as this member may
//! trust it, read against the monotonic clock by whoever asks.
//!
//! The deadline is the guard's one lease [`Deadline`] (`guard/deadline.rs`), shared by every
//! clone of the handle, so that a renewal the poll thread records (the broker answered a RENEW)
//! reaches the worker already holding the record, and a voided lease (the broker gave the
//! record to us again, under a new acquisition) reads "not current" everywhere at once. No lock
//! is taken to ask; whether it holds is the rule every lease keeps (`lease_end`).

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::scope::SessionScope;
use crate::guard::deadline::{lease_end, Deadline, Timebase};
use crate::guard::IdempotencyKey;
use crate::TopicPartition;

/// The lock the broker granted the records of one answer, as the guard needs it to lease them
/// (see [`LockGuard::acquired_in`](super::LockGuard::acquired_in)).
#[derive(Debug, Clone)]
pub struct Grant {
    /// When the request that acquired them was sent: the lock runs from no earlier than here,
    /// so the lease counts from it.
    pub sent_at: Instant,
    /// `AcquisitionLockTimeoutMs`.
    pub lock: Duration,
    /// No earlier than the answer's arrival, plus the lock: the broker's lock has certainly
    /// ended by then, and an acknowledgement sent later is certainly refused.
    pub lock_ends_by: Instant,
    /// The share session (and partition) that acquired them: its end ends their leases.
    pub scope: SessionScope,
}

/// A handle on the lock of one acquired record: cheap to clone (one reference count), shared
/// with the worker that runs the record's handler.
///
/// A handler asks [`is_current`](Self::is_current) right before it applies the record's effect
/// and skips the effect when the answer is no: past the deadline the broker may already have
/// given the record to another member. The deadline moves forward when a renewal of the lock is
/// answered, and the lease is voided for good when the broker hands the same record to this
/// member again under a new acquisition, or when the share session that acquired it ends (its
/// [`SessionScope`]: the broker then releases the record at once).
#[derive(Clone)]
pub struct LockLease(Arc<Cell>);

struct Cell {
    tp: TopicPartition,
    offset: i64,
    delivery_count: i16,
    /// Which acquisition of the record this is, unique within its guard: a voided lease's late
    /// finish is told apart from the finish of the acquisition that replaced it.
    acquisition: u64,
    key: Option<IdempotencyKey>,
    /// When the lease ends, on the guard's clock; ended for good once voided.
    deadline: Deadline,
    /// The share session (and partition) that acquired the record: once it ended, the lease
    /// is not current whatever its deadline.
    scope: SessionScope,
    /// By when the broker's lock has certainly ended: the answer's arrival (or a later
    /// instant) plus the lock; moved forward by renewals. An acknowledgement sent after it is
    /// certainly refused.
    lock_ends_by: Deadline,
    /// Set by the first finish, so that a second one (a caller's mistake) produces no second
    /// acknowledgement.
    finished: AtomicBool,
}

impl LockLease {
    /// The lease of acquisition `acquisition` of the record at `offset` of `tp`, ending at
    /// `deadline`, under `grant`'s session and lock end.
    pub(super) fn new(
        acquisition: u64,
        (tp, offset): (TopicPartition, i64),
        delivery_count: i16,
        key: Option<IdempotencyKey>,
        time: &Timebase,
        deadline: Instant,
        grant: &Grant,
    ) -> Self {
        let (scope, lock_ends_by) = (grant.scope.clone(), grant.lock_ends_by);
        LockLease(Arc::new(Cell {
            tp,
            offset,
            delivery_count,
            acquisition,
            key,
            deadline: Deadline::at(time.clone(), deadline),
            scope,
            lock_ends_by: Deadline::at(time.clone(), lock_ends_by),
            finished: AtomicBool::new(false),
        }))
    }

    /// True while the record's lock is certainly still this member's: the handler may apply its
    /// effect. Reads the monotonic clock itself, so a worker that was stalled (a frozen process,
    /// a starved thread) gets "no" as soon as it asks, whatever the poll thread has done since.
    pub fn is_current(&self) -> bool {
        self.is_current_at(self.0.deadline.now())
    }

    /// [`is_current`](Self::is_current) at an instant the caller read from the guard's clock.
    /// Never current once its share session ended. A voided lease's deadline is ended, so it
    /// reads as passed.
    pub fn is_current_at(&self, now: Instant) -> bool {
        lease_end(
            self.0.deadline.passed(now),
            || self.0.scope.has_ended(),
            || false,
        )
        .is_none()
    }

    /// The share session (and partition) that acquired the record: an acknowledgement decided
    /// for this lease belongs to it and is never sent once it ended.
    pub fn scope(&self) -> &SessionScope {
        &self.0.scope
    }

    /// The instant by which the broker's lock of this acquisition has certainly ended (the
    /// answer's arrival plus the lock, or the latest renewal's): an acknowledgement sent later
    /// is certainly refused, so it is not sent.
    pub fn lock_ends_by(&self) -> Instant {
        self.0
            .lock_ends_by
            .instant()
            .unwrap_or_else(|| self.0.lock_ends_by.origin())
    }

    /// The current instant on the clock this lease reads (its guard's). A finish is stamped
    /// with it right after the handler returned: the guard decides the outcome at that
    /// instant, not at whatever later instant the poll thread gets to it.
    pub fn now(&self) -> Instant {
        self.0.deadline.now()
    }

    /// How long the lease has left now (zero once it is not current), for a handler that bounds
    /// its own work (a call's timeout) by the lock.
    pub fn time_left(&self) -> Duration {
        let now = self.now();
        match self.deadline() {
            Some(deadline) if self.is_current_at(now) => deadline.saturating_duration_since(now),
            _ => Duration::ZERO,
        }
    }

    /// The instant the lease ends (moved forward by renewals); `None` once voided or once its
    /// share session ended. An instant
    /// before the guard was created reads as the guard's creation.
    pub fn deadline(&self) -> Option<Instant> {
        if self.0.scope.has_ended() {
            return None;
        }
        self.0.deadline.instant()
    }

    /// How many times the broker has delivered this record (1 on its first delivery), for the
    /// failure policy and for a handler that treats a repeated delivery with suspicion.
    pub fn delivery_count(&self) -> i16 {
        self.0.delivery_count
    }

    /// The record's partition.
    pub fn tp(&self) -> &TopicPartition {
        &self.0.tp
    }

    /// The record's offset.
    pub fn offset(&self) -> i64 {
        self.0.offset
    }

    pub(super) fn acquisition(&self) -> u64 {
        self.0.acquisition
    }

    pub(super) fn key(&self) -> Option<&IdempotencyKey> {
        self.0.key.as_ref()
    }

    /// Moves the latest end of the broker's lock to `to` if that is later (a renewal granted).
    pub(super) fn extend_lock_end(&self, to: Instant) {
        self.0.lock_ends_by.extend(to);
    }

    /// Moves the deadline to `to` if that is later; never moves it back and never revives a
    /// voided lease. True when it moved.
    pub(super) fn extend(&self, to: Instant) -> bool {
        self.0.deadline.extend(to)
    }

    /// Ends the lease for good: it never reads current again.
    pub(super) fn void(&self) {
        self.0.deadline.end();
    }

    /// Marks the lease finished; false when it already was.
    pub(super) fn finish(&self) -> bool {
        !self.0.finished.swap(true, Ordering::AcqRel)
    }
}

impl fmt::Debug for LockLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockLease")
            .field("tp", &self.0.tp)
            .field("offset", &self.0.offset)
            .field("delivery_count", &self.0.delivery_count)
            .field("acquisition", &self.0.acquisition)
            .field("deadline", &self.deadline())
            .finish_non_exhaustive()
    }
}
