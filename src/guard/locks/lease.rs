//! The handle a worker holds on one acquired record: its lock's deadline as this member may
//! trust it, read against the monotonic clock by whoever asks.
//!
//! The deadline is the guard's one lease [`Deadline`] (`guard/deadline.rs`), shared by every
//! clone of the handle, so that a renewal the poll thread records (the broker answered a RENEW)
//! reaches the worker already holding the record, and a voided lease (the broker gave the
//! record to us again, under a new acquisition) reads "not current" everywhere at once. No lock
//! is taken to ask; whether it holds is the rule every lease keeps (`lease_end`).
//!
//! The deadline the rule asks is the earlier of two: the record lock's (minus the margin) and
//! the member's [`SessionBound`], which the share membership renews with every answered
//! ShareGroupHeartbeat, as the consumer's heartbeats renew the rebalance guard's. Why the
//! second: Kafka gives a member's acquired records to others before their lock ends when its
//! share session ends, and a member that is no longer heard from loses it without being told.
//! In Kafka (4.1 on, KAFKA-19116/KAFKA-19258) the share-partition leader's `ShareSessionCache`
//! drops the session of a connection that closed (`ClientConnectionDisconnectListener`, which
//! also fires when the broker reaps a connection idle for `connections.max.idle.ms`) and calls
//! `ShareGroupListener.onMemberLeave`, whose implementation in `SharePartitionManager` runs
//! `releaseSession`, and that releases every record the member acquired
//! (`SharePartition.releaseAcquiredRecords`). The group coordinator's own fence on
//! `group.share.session.timeout.ms` (`GroupMetadataManager`'s share session timeout, which
//! removes the member and reassigns its partitions) does not itself reach the partition leader;
//! but a member whose heartbeats stopped is a member whose connections go silent too, and
//! `group.share.record.lock.duration.ms` may be up to an hour. So the lease trusts the record no
//! longer than it trusts the membership: past the session bound it reads not current, and stays
//! so (a renewal that arrives later cannot say the record was not given away meanwhile).

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::scope::SessionScope;
use crate::guard::deadline::{lease_end, Deadline, Timebase};
use crate::guard::{IdempotencyKey, SessionBound};
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
/// [`SessionScope`]: the broker then releases the record at once). It also ends, for good, once
/// the member's [`SessionBound`] passed: the group may have removed the member, and its records
/// with it, without a word that could reach it (see the module notes).
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
    /// When the lock's lease ends, on the guard's clock; ended for good once voided or once the
    /// session bound was found passed.
    deadline: Deadline,
    /// The member's session bound (the guard's, renewed by the share membership): the lease
    /// ends when it passes, if that comes before `deadline`.
    session: Arc<SessionBound>,
    /// Set when the lease found the session bound passed before its lock's deadline (and
    /// ended that deadline for it): why it ended, for the guard's count.
    lapsed: AtomicBool,
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
    /// `deadline` or when `session` passes, whichever is first, under `grant`'s session and
    /// lock end.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        acquisition: u64,
        (tp, offset): (TopicPartition, i64),
        delivery_count: i16,
        key: Option<IdempotencyKey>,
        time: &Timebase,
        deadline: Instant,
        session: Arc<SessionBound>,
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
            session,
            lapsed: AtomicBool::new(false),
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
    /// reads as passed; so does a lease that found the session bound passed (it ends its
    /// deadline then, so that a later renewal of the bound does not revive it).
    pub fn is_current_at(&self, now: Instant) -> bool {
        lease_end(
            self.deadline_passed(now),
            || self.0.scope.has_ended(),
            || false,
        )
        .is_none()
    }

    /// The lease's deadline as the rule asks it: the lock's, or the session bound's if that
    /// passed first (which ends the lock's deadline for good).
    fn deadline_passed(&self, now: Instant) -> bool {
        if self.0.deadline.passed(now) {
            return true;
        }
        if self.0.session.is_expired(now) {
            self.0.lapsed.store(true, Ordering::Release);
            self.0.deadline.end();
            return true;
        }
        false
    }

    /// Whether the lease ended because the member's session bound passed while the lock's
    /// deadline had not (the group may have removed the member), as a reading of it found.
    pub(super) fn session_lapsed(&self) -> bool {
        self.0.lapsed.load(Ordering::Acquire)
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

    /// How long the lease has left by its lock now (zero once it is not current), for a handler
    /// that bounds its own work (a call's timeout) by the lock. The session bound can end it
    /// sooner, if the membership stops hearing from the group (see [`deadline`](Self::deadline)).
    pub fn time_left(&self) -> Duration {
        let now = self.now();
        match self.deadline() {
            Some(deadline) if self.is_current_at(now) => deadline.saturating_duration_since(now),
            _ => Duration::ZERO,
        }
    }

    /// The instant the lease ends by its lock (moved forward by renewals); `None` once voided,
    /// once its share session ended, or once the member's session bound was found passed. The
    /// session bound is not in it: the membership moves it forward every heartbeat interval, so
    /// it ends the lease only if it passes (as [`is_current`](Self::is_current) reads), and a
    /// handler that bounds its work by the lock, or an acknowledgement judged late against it,
    /// would otherwise see a deadline seconds away that is never reached. An instant before the
    /// guard was created reads as the guard's creation.
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
