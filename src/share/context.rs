//! What a handler holds while it works on a share-group record: the record's lock lease (through
//! [`ShareContext`]), the [`ShareDelivery`] that reports how it ended, and the [`ShareFailure`]
//! a handler returns to have a record released or rejected.
//!
//! Why a delivery reports through a channel: a record may finish on the poll thread (`poll`,
//! `run`), on a worker thread (`run_with_workers`) or on a thread of the application's own; the
//! acknowledgement is decided and sent by the poll thread (the lock guard and the share sessions
//! live there), so each delivery carries a sender and the poll thread drains the outcomes on its
//! next turn. A delivery dropped without an outcome is released, never accepted.

use std::error::Error;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::time::Instant;

use crate::guard::{LockLease, Outcome};
use crate::wire::Record;

/// How one record ended, on its way from the handler's thread to the poll thread.
pub(crate) struct Finished {
    /// The lease it ran under: names this acquisition, not an earlier one of the same offset.
    pub(crate) lease: LockLease,
    pub(crate) outcome: Outcome,
    pub(crate) at: Instant,
}

/// What a handler may ask about the record it works on. Its one question that matters is
/// [`is_current`](Self::is_current): ask it right before the side effect.
pub struct ShareContext {
    lease: LockLease,
    saw_expiry: AtomicBool,
}

impl ShareContext {
    pub(crate) fn new(lease: LockLease) -> Self {
        ShareContext {
            lease,
            saw_expiry: AtomicBool::new(false),
        }
    }

    /// True while the record's lock is certainly still this member's: its lease (the lock the
    /// broker granted, measured from when the ShareFetch was sent, minus the safety margin) has
    /// not run out. Once false, the broker may already have handed the record to another member:
    /// skip the effect and return `Ok`; the record is then released, not accepted, and the
    /// answer stays false.
    pub fn is_current(&self) -> bool {
        let current = self.lease.is_current();
        if !current {
            self.saw_expiry.store(true, Ordering::Relaxed);
        }
        current
    }

    /// How many times the broker has delivered this record, this time included (1 the first
    /// time). A failure policy reads it: the broker archives a record after the group's
    /// `share.delivery.count.limit` deliveries.
    pub fn delivery_count(&self) -> i16 {
        self.lease.delivery_count()
    }

    /// When the lease ends (later once the lock is renewed); `None` once it was voided (the
    /// broker delivered the record again while this handler still ran).
    pub fn deadline(&self) -> Option<Instant> {
        self.lease.deadline()
    }

    /// The lease itself: clone it to check from another thread the handler starts.
    pub fn lease(&self) -> &LockLease {
        &self.lease
    }

    /// True when the handler was told the lease ran out: its `Ok` then means "skipped".
    pub(crate) fn saw_expiry(&self) -> bool {
        self.saw_expiry.load(Ordering::Relaxed)
    }
}

/// Why a handler did not finish a record, and whether trying again can help.
///
/// Any error converts into a retryable failure (so `?` works in a handler); build a poison
/// failure with [`ShareFailure::poison`] for a record no retry can fix (it is rejected at once).
/// A retryable failure releases the record while its delivery count is at most
/// `processing.retries`, and rejects it after that.
pub struct ShareFailure {
    poison: bool,
    error: Box<dyn Error + Send + Sync>,
}

impl ShareFailure {
    /// A failure another delivery may not repeat (a timeout, a service down).
    pub fn retryable(error: impl Into<Box<dyn Error + Send + Sync>>) -> Self {
        ShareFailure {
            poison: false,
            error: error.into(),
        }
    }

    /// A failure no delivery can fix (the record cannot be parsed): rejected at once.
    pub fn poison(error: impl Into<Box<dyn Error + Send + Sync>>) -> Self {
        ShareFailure {
            poison: true,
            error: error.into(),
        }
    }

    /// True for [`poison`](Self::poison) failures.
    pub fn is_poison(&self) -> bool {
        self.poison
    }

    /// The handler's error.
    pub fn error(&self) -> &(dyn Error + Send + Sync + 'static) {
        self.error.as_ref()
    }
}

impl<E: Error + Send + Sync + 'static> From<E> for ShareFailure {
    fn from(error: E) -> Self {
        ShareFailure::retryable(error)
    }
}

impl fmt::Debug for ShareFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShareFailure")
            .field("poison", &self.poison)
            .field("error", &self.error)
            .finish()
    }
}

/// One acquired record handed to the application by [`ShareConsumer::poll`]. Report how it
/// ended with [`applied`](Self::applied), [`skipped`](Self::skipped) or
/// [`failed`](Self::failed); dropped without a report it is released. It is `Send`: it may be
/// finished on any thread.
///
/// [`ShareConsumer::poll`]: super::ShareConsumer::poll
pub struct ShareDelivery {
    record: Record,
    context: ShareContext,
    done: Option<Sender<Finished>>,
}

impl ShareDelivery {
    pub(crate) fn new(record: Record, lease: LockLease, done: Sender<Finished>) -> Self {
        ShareDelivery {
            record,
            context: ShareContext::new(lease),
            done: Some(done),
        }
    }

    /// The record.
    pub fn record(&self) -> &Record {
        &self.record
    }

    /// The record's context (its lease, its delivery count).
    pub fn context(&self) -> &ShareContext {
        &self.context
    }

    /// [`ShareContext::is_current`]: ask right before the side effect.
    pub fn is_current(&self) -> bool {
        self.context.is_current()
    }

    /// The effect was applied: accepted if the lease was still current now, released (and
    /// counted) if not.
    pub fn applied(mut self) {
        self.finish(Outcome::Applied);
    }

    /// The effect was not applied (the lease ran out, or the application chose not to): the
    /// record is released for another delivery.
    pub fn skipped(mut self) {
        self.finish(Outcome::Skipped);
    }

    /// The handler failed: released or rejected by the failure policy (see [`ShareFailure`]).
    pub fn failed(mut self, failure: &ShareFailure) {
        self.finish(Outcome::Failed {
            retryable: !failure.is_poison(),
        });
    }

    /// Finishes by what `run` saw: `Ok` after the handler was told the lease ran out is a skip.
    pub(crate) fn finish_with(mut self, result: &Result<(), ShareFailure>) {
        let outcome = match result {
            Ok(()) if self.context.saw_expiry() => Outcome::Skipped,
            Ok(()) => Outcome::Applied,
            Err(failure) => Outcome::Failed {
                retryable: !failure.is_poison(),
            },
        };
        self.finish(outcome);
    }

    fn finish(&mut self, outcome: Outcome) {
        if let Some(done) = self.done.take() {
            // The consumer gone means nothing can be acknowledged any more; the lock simply
            // runs out and the broker redelivers the record.
            // Stamped now, after the handler returned: the guard decides at this instant, however
            // long the poll thread takes to drain it.
            let _ = done.send(Finished {
                at: self.context.lease.now(),
                lease: self.context.lease.clone(),
                outcome,
            });
        }
    }
}

impl Drop for ShareDelivery {
    fn drop(&mut self) {
        self.finish(Outcome::Skipped);
    }
}

impl fmt::Debug for ShareDelivery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShareDelivery")
            .field("topic", &self.record.topic)
            .field("partition", &self.record.partition)
            .field("offset", &self.record.offset)
            .field("delivery_count", &self.context.delivery_count())
            .finish()
    }
}
