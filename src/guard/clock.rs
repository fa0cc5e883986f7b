//! The clocks the guards measure time with.
//!
//! Storm windows and in-flight ages must never come from the wall clock: an NTP step or a VM
//! resume would fabricate or suppress storm alerts. The clock is a trait so tests can drive time
//! by hand instead of sleeping.
//!
//! Leases are a different matter: they end when the *broker's* clock says so (a session
//! timeout, a record lock), and the broker's clock keeps running while this host or VM is
//! suspended. `std::time::Instant` (CLOCK_MONOTONIC on Linux) stops during a suspend, so a
//! lease read on it would still look current after a suspend longer than its remainder. Lease
//! deadlines are therefore read on [`BootClock`], which counts suspended time (CLOCK_BOOTTIME
//! on Linux and Android) yet hands out plain `Instant`s, so every deadline computed from an
//! `Instant` reading stays comparable with it (docs/DESIGN.md, "Clocks", has the argument
//! that such a deadline can only end early, never late).

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// A source of monotonic instants.
pub trait Clock: Send + Sync {
    /// The current instant; never goes backwards.
    fn now(&self) -> Instant;
}

/// The real monotonic clock (`std::time::Instant`): stops while the machine is suspended, so it
/// is for durations that only this process experiences (batch deadlines, backoffs, storm
/// windows), not for leases the broker ends.
#[derive(Debug, Default, Clone, Copy)]
pub struct MonotonicClock;

impl Clock for MonotonicClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// Reads a clock that counts suspended time, as a duration since some fixed origin; `None` when
/// the platform has none (or the read failed).
type BootSource = Box<dyn Fn() -> Option<Duration> + Send + Sync>;

/// The clock that lease deadlines are read on: an `Instant` that also advances while the host
/// or VM is suspended, as the broker's session and lock clocks do.
///
/// `now()` is `base + (boottime_now - boottime_base)`, with `boottime_base` read just before
/// `base = Instant::now()`: it runs ahead of `Instant::now()` by exactly the time the machine
/// was suspended since the clock was made (never behind it), so a deadline computed from an
/// `Instant` reading and checked against this clock ends early by a suspend, never late.
///
/// On Linux and Android it reads CLOCK_BOOTTIME (the standard library offers no boot-time
/// clock: its `Instant` is CLOCK_MONOTONIC). Elsewhere it is `Instant::now()`, what the guards
/// read before: a suspend there still goes unnoticed by the leases.
pub struct BootClock {
    base: Instant,
    /// The source's reading taken just before `base`; `None` when it has no reading.
    boot_base: Option<Duration>,
    source: BootSource,
}

impl std::fmt::Debug for BootClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BootClock")
            .field("base", &self.base)
            .field("boot_base", &self.boot_base)
            .finish_non_exhaustive()
    }
}

impl Default for BootClock {
    fn default() -> Self {
        Self::new()
    }
}

impl BootClock {
    /// A clock on the platform's boot-time clock, counting from now. Prefer
    /// [`BootClock::shared`]: one clock for the whole process, made before any lease is.
    pub fn new() -> Self {
        Self::with_source(Box::new(boottime))
    }

    /// The process's one boot clock, made on first use. The guards' default constructors use
    /// it, so it exists before the first deadline it will be checked against is read.
    pub fn shared() -> Arc<dyn Clock> {
        shared().clone()
    }

    /// A clock on another source of suspend-counting time: tests simulate a suspend by making
    /// it jump.
    pub(crate) fn with_source(source: BootSource) -> Self {
        // The boot-time reading first, then the `Instant`: whatever elapses between the two
        // reads can only put this clock ahead of `Instant`, never behind it.
        let boot_base = source();
        BootClock {
            base: Instant::now(),
            boot_base,
            source,
        }
    }
}

impl Clock for BootClock {
    fn now(&self) -> Instant {
        let since = self
            .boot_base
            .zip((self.source)())
            .map(|(base, now)| now.saturating_sub(base));
        match since.and_then(|since| self.base.checked_add(since)) {
            Some(now) => now,
            None => Instant::now(),
        }
    }
}

/// The process's one boot clock.
fn shared() -> &'static Arc<BootClock> {
    static SHARED: OnceLock<Arc<BootClock>> = OnceLock::new();
    SHARED.get_or_init(|| Arc::new(BootClock::new()))
}

/// Now on the process's [`BootClock`]: the stamp of every instant a lease deadline is counted
/// from (a request's send time) and of every check against it, so that both ends of a lease
/// are on the clock the broker's end of it runs on.
pub(crate) fn lease_now() -> Instant {
    shared().now()
}

/// The kernel's coarse monotonic clock (CLOCK_MONOTONIC_COARSE: the time of the last timer
/// tick, 1 to 10 ms old), or `None` where there is none.
///
/// Why: a precise clock read costs tens of nanoseconds on a virtual machine, as much as the
/// rest of handing out a record, while this one is a few (no counter is read, only the
/// kernel's last tick). A caller that holds a precise reading and only needs to know whether
/// time may have moved on since reads this instead, and reads the precise clocks again when it
/// changed: its reading is then never more than about one tick of running time old (a suspend
/// included: the coarse clock moves on with the first tick after the resume, and the precise
/// boot clock read then counts the suspend). Where it is `None` the caller reads precisely
/// every time.
#[cfg(any(target_os = "linux", target_os = "android"))]
#[inline]
pub(crate) fn coarse_now() -> Option<Duration> {
    // CLOCK_MONOTONIC_COARSE: every supported kernel (2.6.32 or later) knows it.
    read_clock(libc::CLOCK_MONOTONIC_COARSE, Reading::Time)
}

/// No coarse clock here: callers read the precise clocks every time (see the Linux version).
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(crate) fn coarse_now() -> Option<Duration> {
    None
}

/// How far the coarse clock can lag the precise one: its resolution, the length of a timer
/// tick (CLOCK_MONOTONIC_COARSE's `clock_getres`), asked once. A reading kept while the coarse
/// clock stood still is at most about this old, so a check that must not pass late (the
/// session bound at admission) counts it as this much later. Zero where there is no coarse
/// clock (readings are then fresh).
pub(crate) fn coarse_lag() -> Duration {
    static LAG: OnceLock<Duration> = OnceLock::new();
    *LAG.get_or_init(coarse_resolution)
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn coarse_resolution() -> Duration {
    let Some(tick) = read_clock(libc::CLOCK_MONOTONIC_COARSE, Reading::Resolution) else {
        return FALLBACK_TICK;
    };
    // A tick and a half: the reading is taken at most one tick after the coarse clock last
    // moved, and the kernel may run a tick late under load.
    let tick = tick.max(Duration::from_millis(1));
    tick + tick / 2
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn coarse_resolution() -> Duration {
    Duration::ZERO
}

/// The lag assumed when the kernel does not say: a tick and a half of the longest usual tick
/// (10 ms, `HZ=100`).
#[cfg(any(target_os = "linux", target_os = "android"))]
const FALLBACK_TICK: Duration = Duration::from_millis(15);

/// CLOCK_BOOTTIME: CLOCK_MONOTONIC plus the time the system spent suspended.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn boottime() -> Option<Duration> {
    // CLOCK_BOOTTIME: every supported kernel (2.6.39 or later) knows it.
    read_clock(libc::CLOCK_BOOTTIME, Reading::Time)
}

/// What [`read_clock`] asks the kernel for.
#[cfg(any(target_os = "linux", target_os = "android"))]
#[derive(Clone, Copy)]
enum Reading {
    /// `clock_gettime`: the clock's time.
    Time,
    /// `clock_getres`: its resolution.
    Resolution,
}

/// One kernel clock's time or resolution, `None` when the kernel refuses it: the one place the
/// guard's clocks call into libc.
#[cfg(any(target_os = "linux", target_os = "android"))]
#[inline]
fn read_clock(clock: libc::clockid_t, reading: Reading) -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call; an id the kernel
    // does not know makes it return an error, which is handled.
    let rc = unsafe {
        match reading {
            Reading::Time => libc::clock_gettime(clock, &mut ts),
            Reading::Resolution => libc::clock_getres(clock, &mut ts),
        }
    };
    if rc != 0 {
        return None;
    }
    let secs = u64::try_from(ts.tv_sec).ok()?;
    let nanos = u32::try_from(ts.tv_nsec).ok()?;
    Some(Duration::new(secs, nanos))
}

/// No boot-time clock here: the boot clock is `Instant` (see [`BootClock`]).
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn boottime() -> Option<Duration> {
    None
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

/// A stand-in for CLOCK_BOOTTIME that tests can suspend: CLOCK_MONOTONIC's progress (this
/// process's `Instant`) plus the suspended time, which is how the kernel defines it.
#[cfg(test)]
#[derive(Debug, Clone)]
pub(crate) struct Suspender {
    origin: Instant,
    slept: Arc<Mutex<Duration>>,
}

#[cfg(test)]
impl Suspender {
    pub(crate) fn new() -> Self {
        Suspender {
            origin: Instant::now(),
            slept: Arc::new(Mutex::new(Duration::ZERO)),
        }
    }

    /// A boot clock on this source.
    pub(crate) fn clock(&self) -> Arc<BootClock> {
        let me = self.clone();
        Arc::new(BootClock::with_source(Box::new(move || {
            let slept = *me.slept.lock().unwrap_or_else(|p| p.into_inner());
            Some(me.origin.elapsed() + slept)
        })))
    }

    /// The machine was suspended for `d`: the boot-time source jumps, `Instant` does not.
    pub(crate) fn suspend(&self, d: Duration) {
        *self.slept.lock().unwrap_or_else(|p| p.into_inner()) += d;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boot_clock_never_runs_behind_instant() {
        let clock = BootClock::new();
        let shared = BootClock::shared();
        for _ in 0..10_000 {
            let before = Instant::now();
            let boot = clock.now();
            let shared_boot = shared.now();
            assert!(boot >= before, "{boot:?} behind {before:?}");
            assert!(shared_boot >= before, "{shared_boot:?} behind {before:?}");
        }
        #[cfg(any(target_os = "linux", target_os = "android"))]
        assert!(
            boottime().is_some(),
            "CLOCK_BOOTTIME must be readable on Linux"
        );
    }

    #[test]
    fn a_suspend_puts_the_boot_clock_ahead_of_instant_by_the_suspended_time() {
        let suspender = Suspender::new();
        let making = Instant::now();
        let clock = suspender.clock();
        // The clock is ahead of `Instant` by the suspend plus at most the time between its two
        // base readings, which lie within this window.
        let made_within = making.elapsed();
        let before = Instant::now();
        assert!(clock.now() >= before);
        suspender.suspend(Duration::from_secs(3600));
        let boot = clock.now();
        let after = Instant::now();
        assert!(
            boot >= before + Duration::from_secs(3600),
            "the suspend is counted: {:?} after {before:?}",
            boot - before
        );
        assert!(
            boot <= after + Duration::from_secs(3600) + made_within,
            "and nothing more: {:?} ahead",
            boot.saturating_duration_since(after)
        );
    }

    #[test]
    fn a_boot_clock_without_a_source_is_instant() {
        let clock = BootClock::with_source(Box::new(|| None));
        let before = Instant::now();
        let now = clock.now();
        assert!(now >= before && now <= Instant::now());
    }
}
