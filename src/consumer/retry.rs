//! The failure policy of `run` and the decoupled mode: a record whose handler fails is tried
//! again up to `processing.retries` times, with a doubling backoff capped at
//! `processing.retry.backoff.max.ms`, then handed to the dead-letter callback
//! ([`Consumer::on_dead_letter`](super::Consumer::on_dead_letter)) or, without one, stops the
//! run as a failure always did.
//!
//! Why retries go back through the intake instead of sleeping where the handler ran: a sleep on
//! the poll thread (`run`) would stop the polls and, past `max.poll.interval.ms`, get the member
//! evicted; a sleep on a worker would hold up every other partition that worker serves. So a
//! failed record that has retries left is released in the guard (nothing is committed past it,
//! and the intake reads its partition again from it), its partition is paused in the intake
//! until the backoff has passed ([`Retries::hold_back`], on the poll thread at every poll), and
//! the record is handed out again first; the other partitions go on meanwhile and the poll loop
//! keeps polling. Later records of its partition already handed to a worker never overtake it:
//! the guard starts nothing behind a released record (it gives them back too), and in key order
//! they are parked behind it.
//!
//! What the guard says comes first: a record whose partition is no longer owned under its lease
//! (revoked, lost, being handed back, or the session may have expired) is neither retried nor
//! dead-lettered here; it is released, and the partition's next owner reads it, while the run
//! goes on (without a policy, no retries and no callback, the failure stops the run as any
//! failure always did). A record handed out again after a rebalance starts counting from one.
//!
//! A dead-lettered record counts as finished (its offset may be committed) only once the
//! callback returned `Ok`; if the callback fails, the run stops with
//! [`ConsumerError::DeadLetter`] and nothing is committed past the record.

use std::collections::{HashMap, HashSet};
use std::error::Error;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::guard::Lease;
use crate::wire::{ErrorChain, Record};
use crate::TopicPartition;

use super::config::ConsumerConfig;
use super::context::{Guard, WorkContext};
use super::error::ConsumerError;
use super::intake::Intake;

/// A handler's or a callback's error, boxed.
pub(crate) type BoxError = Box<dyn Error + Send + Sync>;

/// The dead-letter callback as the consumer keeps it: shared with the workers, called with the
/// record, its handler's last error and how many times the handler ran on it.
pub(crate) type DeadLetterFn = Arc<
    dyn Fn(&Record, &(dyn Error + Send + Sync + 'static), u32) -> Result<(), BoxError>
        + Send
        + Sync,
>;

/// `processing.retries` and its backoff.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RetryPolicy {
    retries: u32,
    backoff: Duration,
    backoff_max: Duration,
}

impl RetryPolicy {
    /// The policy the configuration sets.
    pub(crate) fn from_config(config: &ConsumerConfig) -> Self {
        RetryPolicy {
            retries: u32::try_from(config.processing_retries()).unwrap_or(u32::MAX),
            backoff: config.processing_retry_backoff(),
            backoff_max: config.processing_retry_backoff_max(),
        }
    }

    /// The wait after the `failures`-th failure of a record: the backoff doubled per earlier
    /// failure, capped.
    pub(crate) fn backoff(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(31);
        self.backoff
            .saturating_mul(1u32 << doublings)
            .min(self.backoff_max)
    }
}

/// A record waiting for its retry: the lease of its last try, its failures so far, and when it
/// may run again.
#[derive(Debug)]
struct Waiting {
    lease: Lease,
    failures: u32,
    due: Instant,
}

#[derive(Default)]
struct State {
    /// At most one waiting record per partition (the lowest: later ones wait behind it).
    waiting: HashMap<TopicPartition, Waiting>,
    /// The partitions [`Retries::hold_back`] paused in the intake (and only those are resumed).
    paused: HashSet<TopicPartition>,
}

/// Whether a record admitted by the guard may run its handler now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Yes, as this attempt (1 the first time).
    Run(u32),
    /// Not now: it is a waiting record whose backoff has not passed (handed out before its
    /// partition was paused). The caller releases it; it comes again once the backoff passed.
    Wait,
}

/// What the caller does with a record once its handler returned.
#[derive(Debug)]
pub(crate) enum Settled {
    /// It finished (the handler succeeded, or the dead-letter callback took it): complete it.
    Complete,
    /// Give it back without its effect (its retry is due later, or its partition moved):
    /// release it.
    Release,
    /// Stop the run with this error (release the record: nothing is committed past it).
    Stop(ConsumerError),
}

/// The failure policy's state, shared by the poll thread and the workers, and its counters.
pub(crate) struct Retries {
    policy: RetryPolicy,
    dead_letter: Mutex<Option<DeadLetterFn>>,
    state: Mutex<State>,
    /// How many records wait (`State::waiting`'s length, written under its lock): while none
    /// does, the handlers' threads never take the lock, so partitions on different workers do
    /// not wait for each other here (as in the guard).
    waiting: AtomicUsize,
    retried: AtomicU64,
    dead_lettered: AtomicU64,
}

impl Retries {
    /// The policy, without a dead-letter callback yet.
    pub(crate) fn new(policy: RetryPolicy) -> Self {
        Retries {
            policy,
            dead_letter: Mutex::new(None),
            state: Mutex::new(State::default()),
            waiting: AtomicUsize::new(0),
            retried: AtomicU64::new(0),
            dead_lettered: AtomicU64::new(0),
        }
    }

    /// Sets (or replaces) the dead-letter callback.
    pub(crate) fn set_dead_letter(&self, callback: DeadLetterFn) {
        *self.dead_letter.lock().unwrap_or_else(|p| p.into_inner()) = Some(callback);
    }

    /// Retries scheduled so far.
    pub(crate) fn retried(&self) -> u64 {
        self.retried.load(Ordering::Relaxed)
    }

    /// Records the dead-letter callback took so far.
    pub(crate) fn dead_lettered(&self) -> u64 {
        self.dead_lettered.load(Ordering::Relaxed)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// True when no record waits for a retry. A record's own wait is always seen: it was
    /// recorded (under the lock, with a release store) before the record was given back, and
    /// the record comes again only after that.
    #[inline]
    fn none_waiting(&self) -> bool {
        self.waiting.load(Ordering::Acquire) == 0
    }

    /// Publishes the number of waiting records; called with the lock held after a change.
    fn count_waiting(&self, state: &State) {
        self.waiting.store(state.waiting.len(), Ordering::Release);
    }

    /// Whether the record admitted under `lease` may run now, and as which attempt. `now` is
    /// read only when some record waits (a record costs no clock read here otherwise).
    #[inline]
    pub(crate) fn admit(&self, lease: &Lease, now: impl FnOnce() -> Instant) -> Admission {
        if self.none_waiting() {
            return Admission::Run(1);
        }
        self.admit_waiting(lease, now)
    }

    /// [`Retries::admit`] while some record waits.
    fn admit_waiting(&self, lease: &Lease, now: impl FnOnce() -> Instant) -> Admission {
        let mut state = self.state();
        let Some(waiting) = state.waiting.get(&lease.tp) else {
            return Admission::Run(1);
        };
        if waiting.lease.epoch != lease.epoch {
            // A new assignment of the partition starts afresh (a lease of an earlier one is
            // refused by the guard anyway).
            if lease.epoch > waiting.lease.epoch {
                state.waiting.remove(&lease.tp);
                self.count_waiting(&state);
            }
            return Admission::Run(1);
        }
        if lease.offset != waiting.lease.offset {
            // Another record of the partition: the guard orders it (nothing starts behind a
            // released record; the parked keys wait for theirs).
            return Admission::Run(1);
        }
        if now() >= waiting.due {
            Admission::Run(waiting.failures.saturating_add(1))
        } else {
            Admission::Wait
        }
    }

    /// Applies the policy to the handler's `result` on the `attempt`-th try of `record`.
    #[inline]
    pub(crate) fn settle(
        &self,
        guard: &Guard,
        record: &Record,
        lease: &Lease,
        attempt: u32,
        result: Result<(), BoxError>,
    ) -> Settled {
        match result {
            Ok(()) => {
                self.forget(lease);
                Settled::Complete
            }
            Err(error) => self.settle_failure(guard, record, lease, attempt, error),
        }
    }

    /// [`Retries::settle`] of a failure: out of line, so that a success (every record's path)
    /// costs an atomic load.
    #[cold]
    fn settle_failure(
        &self,
        guard: &Guard,
        record: &Record,
        lease: &Lease,
        attempt: u32,
        error: BoxError,
    ) -> Settled {
        let callback = self
            .dead_letter
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if !(guard.owns(lease) && guard.is_current(lease)) {
            self.forget(lease);
            if self.policy.retries == 0 && callback.is_none() {
                // No policy: every failure stops the run, as before retries existed.
                return Settled::Stop(ConsumerError::Handler {
                    tp: lease.tp.clone(),
                    offset: lease.offset,
                    error,
                });
            }
            log::info!(
                "{} offset {}: the handler failed (attempt {attempt}) after the partition moved; \
                 neither retried nor dead-lettered here, its next owner reads it: {}",
                lease.tp,
                lease.offset,
                ErrorChain(&*error)
            );
            return Settled::Release;
        }
        if attempt <= self.policy.retries {
            let delay = self.policy.backoff(attempt);
            let mut state = self.state();
            if let Some(earlier) = state.waiting.get(&lease.tp) {
                if earlier.lease.epoch == lease.epoch && earlier.lease.offset < lease.offset {
                    // An earlier record waits: this one comes again after it, and this failure
                    // is not counted (it may have failed only because the earlier one did not
                    // happen).
                    return Settled::Release;
                }
            }
            state.waiting.insert(
                lease.tp.clone(),
                Waiting {
                    lease: lease.clone(),
                    failures: attempt,
                    due: Instant::now() + delay,
                },
            );
            self.count_waiting(&state);
            drop(state);
            self.retried.fetch_add(1, Ordering::Relaxed);
            log::warn!(
                "{} offset {}: the handler failed (attempt {attempt} of {}); retried in {delay:?}: {}",
                lease.tp,
                lease.offset,
                self.policy.retries + 1,
                ErrorChain(&*error)
            );
            return Settled::Release;
        }
        self.forget(lease);
        let Some(callback) = callback else {
            return Settled::Stop(ConsumerError::Handler {
                tp: lease.tp.clone(),
                offset: lease.offset,
                error,
            });
        };
        match callback(record, &*error, attempt) {
            Ok(()) => {
                self.dead_lettered.fetch_add(1, Ordering::Relaxed);
                log::warn!(
                    "{} offset {}: dead-lettered after {attempt} attempt(s): {}",
                    lease.tp,
                    lease.offset,
                    ErrorChain(&*error)
                );
                Settled::Complete
            }
            Err(callback_error) => Settled::Stop(ConsumerError::DeadLetter {
                tp: lease.tp.clone(),
                offset: lease.offset,
                attempts: attempt,
                handler_error: error,
                error: callback_error,
            }),
        }
    }

    /// The record under `lease` is done with (finished, stopped, or its partition moved): its
    /// partition's wait ends if it was the waiting one.
    #[inline]
    fn forget(&self, lease: &Lease) {
        if !self.none_waiting() {
            self.forget_waiting(lease);
        }
    }

    /// [`Retries::forget`] while some record waits.
    fn forget_waiting(&self, lease: &Lease) {
        let mut state = self.state();
        if state
            .waiting
            .get(&lease.tp)
            .is_some_and(|w| w.lease.epoch == lease.epoch && w.lease.offset == lease.offset)
        {
            state.waiting.remove(&lease.tp);
            self.count_waiting(&state);
        }
    }

    /// On the poll thread, at every poll (after the released records were sought back to):
    /// pauses in the intake each partition whose waiting record's backoff has not passed,
    /// resumes those whose backoff has passed, and forgets the waits of partitions no longer
    /// owned under their lease. Returns when the next backoff ends, if any.
    pub(crate) fn hold_back(
        &self,
        intake: &mut Intake,
        guard: &Guard,
        now: Instant,
    ) -> Option<Instant> {
        let mut state = self.state();
        if state.waiting.is_empty() && state.paused.is_empty() {
            return None;
        }
        let State { waiting, paused } = &mut *state;
        waiting.retain(|_, w| guard.owns(&w.lease));
        self.waiting.store(waiting.len(), Ordering::Release);
        let mut next_due: Option<Instant> = None;
        for (tp, w) in waiting.iter() {
            if now < w.due {
                next_due = Some(next_due.map_or(w.due, |d| d.min(w.due)));
                // A partition the application paused stays the application's to resume.
                if !paused.contains(tp) && !intake.is_paused(tp) {
                    paused.insert(tp.clone());
                    intake.pause(std::slice::from_ref(tp));
                }
            }
        }
        paused.retain(|tp| {
            let holding = waiting.get(tp).is_some_and(|w| now < w.due);
            if !holding {
                intake.resume(std::slice::from_ref(tp));
            }
            holding
        });
        next_due
    }
}

/// One record through the policy, for `run` and the workers alike: asks whether it may run now
/// ([`Retries::admit`]; not now is [`Settled::Release`]), then `start` (the workers' last check
/// with the guard; `None` when it refuses: the record was not started and the guard already
/// dealt with it), then the handler with the attempt in its [`WorkContext`], and returns what
/// [`Retries::settle`] makes of the outcome.
#[inline]
pub(crate) fn handle<E>(
    retries: &Retries,
    guard: &Guard,
    record: &Record,
    lease: &Lease,
    start: impl FnOnce() -> bool,
    handler: impl FnOnce(&Record, &WorkContext<'_>) -> Result<(), E>,
) -> Option<Settled>
where
    E: Into<BoxError>,
{
    let attempt = match retries.admit(lease, Instant::now) {
        Admission::Run(attempt) => attempt,
        Admission::Wait => return Some(Settled::Release),
    };
    if !start() {
        return None;
    }
    let ctx = WorkContext::new(guard, lease).on_attempt(attempt);
    let result = handler(record, &ctx).map_err(Into::into);
    Some(retries.settle(guard, record, lease, attempt, result))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(retries: u32, backoff_ms: u64, max_ms: u64) -> RetryPolicy {
        RetryPolicy {
            retries,
            backoff: Duration::from_millis(backoff_ms),
            backoff_max: Duration::from_millis(max_ms),
        }
    }

    #[test]
    fn the_backoff_doubles_per_failure_up_to_its_cap() {
        let p = policy(10, 100, 1000);
        let waits: Vec<u128> = (1..=6).map(|n| p.backoff(n).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(p.backoff(u32::MAX), Duration::from_millis(1000));
    }

    fn lease(offset: i64, epoch: u64) -> Lease {
        Lease {
            tp: TopicPartition::new("orders", 0),
            offset,
            epoch,
            fencing_token: epoch,
        }
    }

    #[test]
    fn a_waiting_record_runs_again_once_due_as_its_next_attempt() {
        let retries = Retries::new(policy(3, 100, 1000));
        let now = Instant::now();
        let mut state = retries.state();
        state.waiting.insert(
            lease(5, 1).tp,
            Waiting {
                lease: lease(5, 1),
                failures: 2,
                due: now + Duration::from_millis(100),
            },
        );
        retries.count_waiting(&state);
        drop(state);
        assert_eq!(retries.admit(&lease(5, 1), || now), Admission::Wait);
        assert_eq!(retries.admit(&lease(4, 1), || now), Admission::Run(1));
        let later = now + Duration::from_millis(100);
        assert_eq!(retries.admit(&lease(5, 1), || later), Admission::Run(3));
        assert_eq!(
            retries.admit(&lease(6, 2), || later),
            Admission::Run(1),
            "a new assignment starts afresh"
        );
        assert_eq!(retries.admit(&lease(5, 2), || later), Admission::Run(1));
    }
}
