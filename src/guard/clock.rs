//! The monotonic clock the guard measures time with.
//!
//! Storm windows and in-flight ages must never come from the wall clock: an NTP step or a VM
//! resume would fabricate or suppress storm alerts. The clock is a trait so tests can drive time
//! by hand instead of sleeping.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A source of monotonic instants.
pub trait Clock: Send + Sync {
    /// The current instant; never goes backwards.
    fn now(&self) -> Instant;
}

/// The real monotonic clock (`std::time::Instant`).
#[derive(Debug, Default, Clone, Copy)]
pub struct MonotonicClock;

impl Clock for MonotonicClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that only moves when told to, so tests of time windows are exact and instant.
#[derive(Debug)]
pub struct ManualClock {
    start: Instant,
    elapsed: Mutex<Duration>,
}

impl ManualClock {
    /// A clock standing still at the moment of creation.
    pub fn new() -> Self {
        Self {
            start: Instant::now(),
            elapsed: Mutex::new(Duration::ZERO),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut elapsed = self.elapsed.lock().unwrap_or_else(|p| p.into_inner());
        *elapsed += by;
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.start + *self.elapsed.lock().unwrap_or_else(|p| p.into_inner())
    }
}
