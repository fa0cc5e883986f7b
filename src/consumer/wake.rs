//! The consumer's [`Waker`]: ends a blocked `poll` (or `run`) from another thread at once.
//!
//! Why not a flag the loop looks at every so often: a poll blocks in three places (the wait
//! for the membership's news, the fetch waiting for its brokers, the pause when there is
//! nothing to fetch), each up to its own timeout, and a check every 100 ms costs a wake-up of
//! the poll thread ten times a second for nothing. Each place that waits hands out a nudge
//! (`wire::Nudge`) that ends its wait; the waker sets its flag and calls them all. The flag
//! stays set until a poll takes it (as with the Java client's `wakeup()`, a wake before the
//! poll is not lost).

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use crate::wire::Nudge;

/// Ends a blocked [`Consumer::poll`](super::Consumer::poll) or
/// [`Consumer::run`](super::Consumer::run) at once, from any thread (the Java client's
/// `wakeup()`). Cheap to clone.
///
/// The poll in progress (or, if none is, the next one) returns at once with what it has (a
/// batch that may be empty), after applying the group's changes as every poll does; `run`
/// then reads its stop flag. Set the flag first, then wake: `run` returns without waiting for
/// the fetch or the group. A handler in the middle of a record finishes it first, and an eager
/// rebalance running on the poll thread (its requests on the wire) completes first.
#[derive(Clone)]
pub struct Waker {
    state: Arc<WakeState>,
}

impl std::fmt::Debug for Waker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waker").finish_non_exhaustive()
    }
}

struct WakeState {
    woken: Mutex<bool>,
    signal: Condvar,
    /// The waits of the layers below: the membership's, the fetch's.
    nudges: Vec<Nudge>,
}

impl Waker {
    /// A waker over the waits of the layers below.
    pub(crate) fn new(nudges: Vec<Nudge>) -> Self {
        Waker {
            state: Arc::new(WakeState {
                woken: Mutex::new(false),
                signal: Condvar::new(),
                nudges,
            }),
        }
    }

    /// Ends the blocked poll (or the next one) at once.
    pub fn wake(&self) {
        *self.lock() = true;
        self.state.signal.notify_all();
        for nudge in &self.state.nudges {
            nudge();
        }
    }

    /// True once after each [`wake`](Self::wake): the poll that takes it returns at once.
    pub(crate) fn take(&self) -> bool {
        std::mem::take(&mut *self.lock())
    }

    /// Waits up to `timeout` (the poll has nothing to fetch), or until woken. Leaves the flag
    /// set for the poll to take.
    pub(crate) fn pause(&self, timeout: Duration) {
        let woken = self.lock();
        let _woken = self
            .state
            .signal
            .wait_timeout_while(woken, timeout, |woken| !*woken)
            .unwrap_or_else(PoisonError::into_inner);
    }

    /// True when a wake is waiting for a poll to take it.
    pub(crate) fn is_woken(&self) -> bool {
        *self.lock()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, bool> {
        self.state
            .woken
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    #[test]
    fn a_wake_ends_a_pause_at_once_calls_every_nudge_and_is_taken_once() {
        let nudged = Arc::new(AtomicUsize::new(0));
        let counter = nudged.clone();
        let waker = Waker::new(vec![Arc::new(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        })]);
        let other = waker.clone();
        let started = Instant::now();
        let thread = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            other.wake();
        });
        waker.pause(Duration::from_secs(30));
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "woken, not timed out"
        );
        thread.join().expect("the waking thread");
        assert_eq!(nudged.load(Ordering::SeqCst), 1);
        assert!(waker.take());
        assert!(!waker.take(), "a wake ends one poll");
    }

    #[test]
    fn a_wake_before_the_pause_is_not_lost() {
        let waker = Waker::new(Vec::new());
        waker.wake();
        let started = Instant::now();
        waker.pause(Duration::from_secs(30));
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(waker.is_woken());
    }
}
