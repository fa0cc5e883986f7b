//! The lock guard's vocabulary: how a record is acknowledged, what a handler reports, what an
//! acquisition gives the caller, the guard's settings and its counters.

use std::time::Duration;

use super::lease::LockLease;
use crate::guard::GuardConfigError;

/// How a record is acknowledged to the share group, with the protocol's byte values (the
/// `AcknowledgeTypes` of ShareFetch and ShareAcknowledge), so the wire layer sends
/// [`as_i8`](Self::as_i8) as it is. Defined here, below the wire layer, because the guard is
/// what decides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(i8)]
pub enum AckType {
    /// The offset holds no record (a compacted gap or a control record): nothing to process.
    Gap = 0,
    /// The record was processed: the broker never delivers it again.
    Accept = 1,
    /// The record was not processed: the broker delivers it again (its delivery count grows).
    Release = 2,
    /// The record cannot be processed (poison, or out of retries): the broker archives it.
    Reject = 3,
    /// The record is still being processed: the broker extends its lock.
    Renew = 4,
}

impl AckType {
    /// The byte sent on the wire.
    pub fn as_i8(self) -> i8 {
        self as i8
    }

    /// The type of a byte read from the wire; `None` for a value the protocol does not define.
    pub fn from_i8(value: i8) -> Option<Self> {
        Some(match value {
            0 => Self::Gap,
            1 => Self::Accept,
            2 => Self::Release,
            3 => Self::Reject,
            4 => Self::Renew,
            _ => return None,
        })
    }
}

/// What a record's handler did, as the caller reports it to
/// [`LockGuard::finished`](super::LockGuard::finished).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The effect happened.
    Applied,
    /// The handler found the lease not current and did nothing: the record is given back.
    Skipped,
    /// The handler failed without applying the effect. A retryable failure (a timeout, a
    /// dependency down) gives the record back while retries remain; one that is not (a record
    /// that can never be processed) rejects it at once.
    Failed {
        /// Whether trying the record again could succeed.
        retryable: bool,
    },
}

/// What the guard says about a record the broker just handed this member.
#[derive(Debug, Clone)]
pub enum Acquired {
    /// Run the handler under this lease.
    Run(LockLease),
    /// This member already applied the record's idempotency key (its earlier ACCEPT was lost,
    /// or the key came again on another record): acknowledge [`AckType::Accept`] without
    /// running the handler.
    AlreadyApplied,
    /// Another record with the same idempotency key is being processed by this member right
    /// now: acknowledge [`AckType::Release`] without running the handler, so the record comes
    /// back once that one finished (and is then refused as already applied, or run if that one
    /// did not apply its effect). Running both could apply one key's effect twice.
    KeyInFlight,
}

impl Acquired {
    /// The acknowledgement the caller sends at once for a record it must not run; `None` for
    /// [`Acquired::Run`].
    pub fn ack(&self) -> Option<AckType> {
        match self {
            Self::Run(_) => None,
            Self::AlreadyApplied => Some(AckType::Accept),
            Self::KeyInFlight => Some(AckType::Release),
        }
    }
}

/// The lock guard's settings.
#[derive(Debug, Clone)]
pub struct LockGuardConfig {
    /// The safety margin's least value: a lease ends at least this long before the broker's
    /// lock can. See [`LockGuardConfig::margin`] for why.
    pub margin_floor: Duration,
    /// The safety margin as a percentage of the lock's duration, when that is more than the
    /// floor (at most 50).
    pub margin_percent: u8,
    /// `processing.retries`: a record whose handler failed with a retryable error is released
    /// (delivered again) while its delivery count is at most this, and rejected after.
    pub retries: usize,
    /// How many applied idempotency keys to remember, the oldest forgotten first. Bounded
    /// because a consumer runs for weeks. Zero remembers none (no refusals).
    pub applied_keys: usize,
    /// Whether records still running past half their lock are renewed: set it when the broker
    /// supports RENEW (ShareFetch / ShareAcknowledge v2).
    pub renewal: bool,
}

impl Default for LockGuardConfig {
    fn default() -> Self {
        Self {
            margin_floor: Duration::from_secs(1),
            margin_percent: 10,
            retries: 0,
            applied_keys: 100_000,
            renewal: false,
        }
    }
}

impl LockGuardConfig {
    /// Checks the settings, naming the one at fault.
    pub fn validate(&self) -> Result<(), GuardConfigError> {
        if self.margin_percent > 50 {
            return Err(GuardConfigError {
                setting: "margin_percent",
                rule: "must be at most 50",
            });
        }
        Ok(())
    }

    /// The safety margin for a lock of `lock`: `max(margin_floor, margin_percent of lock)`,
    /// capped at half the lock.
    ///
    /// The lease is counted from the ShareFetch request's *send* time, and the broker starts the
    /// lock when it acquires the records, after it received the request: the request's trip and
    /// the broker's queueing are already on the safe side, and the broker's timer fires at or
    /// after its deadline. What the margin covers is what happens after the handler's last
    /// "current?" check: the effect becoming final (a database commit, a call answered), the
    /// acknowledgement waiting for the next request to the broker (a ShareFetch in its long
    /// poll holds piggybacked acknowledgements for up to its max wait, 500 ms by default) and
    /// its trip, and a thread descheduled in between. One second covers those on a healthy
    /// host. A longer lock is chosen for slower handlers, whose effects take longer and vary
    /// more, so the margin grows with it (10 %: 3 s of the default 30 s lock, 6 s of the
    /// broker's longest default, 60 s). The cap keeps a short lock (a test's) usable: a lock
    /// shorter than twice the floor gets less margin than the floor.
    pub fn margin(&self, lock: Duration) -> Duration {
        let scaled = lock.saturating_mul(u32::from(self.margin_percent)) / 100;
        self.margin_floor.max(scaled).min(lock / 2)
    }
}

/// Acknowledgements the broker refused, by type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AckFailures {
    /// ACCEPTs refused: the lock was lost before the broker got it. Never sent again as
    /// ACCEPT; the record may come back, and its idempotency key then refuses it.
    pub accept: u64,
    /// RELEASEs refused (the lock had already run out: the record comes back anyway).
    pub release: u64,
    /// REJECTs refused (the lock had run out: the record comes back and fails again).
    pub reject: u64,
}

impl AckFailures {
    /// Every refused acknowledgement.
    pub fn total(&self) -> u64 {
        self.accept + self.release + self.reject
    }
}

/// The lock guard's counters, for stats lines and dashboards.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LockStats {
    /// Records tracked now: running, or finished and waiting for their acknowledgement's answer.
    pub held: usize,
    /// Records whose handler has not finished.
    pub running: usize,
    /// ACCEPTs decided (handlers that applied their effect under a current lease, and records
    /// refused as already applied).
    pub accepted: u64,
    /// RELEASEs decided (skipped, expired, retryable failures, keys in flight).
    pub released: u64,
    /// REJECTs decided (poison records, retries exhausted).
    pub rejected: u64,
    /// Effects a handler applied after the lease had ended (it did not ask, or asked too
    /// early): released, and the effect may be applied again by another member. Should be 0.
    pub applied_after_expiry: u64,
    /// Of the RELEASEs, those decided because the lease had ended by the finish.
    pub released_expired: u64,
    /// Acknowledgements the broker refused, by type.
    pub ack_failures: AckFailures,
    /// Lock renewals the broker granted.
    pub renewals: u64,
    /// Lock renewals the broker refused (those leases run out as they were).
    pub renew_failures: u64,
    /// Records refused because this member had already applied their key.
    pub refused_already_applied: u64,
    /// Records refused because a record with the same key was being processed.
    pub refused_key_in_flight: u64,
    /// Leases voided: the broker gave their record to this member again, the partition was
    /// forgotten, or the share session that acquired the record ended, while the handler had
    /// not finished.
    pub voided: u64,
    /// Effects applied whose share session ended before their finish: no acknowledgement could
    /// be sent (the broker had released the record), so another member may apply them again.
    pub applied_session_ended: u64,
    /// Of the RELEASEs for an ended lease, those whose lease ended because the member's session
    /// bound passed first (its share-group heartbeats went unanswered for too long): it may have
    /// lost its connections, and Kafka then gives its records to others.
    pub released_session_lapsed: u64,
}
