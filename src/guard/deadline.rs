//! The one renewable deadline both kinds of lease hold, and the one rule both keep: a lease ends
//! the moment ownership *could* have moved.
//!
//! Two leases guard an effect against a second copy of it. The rebalance guard's [`Lease`]
//! (a partition owned under an assignment epoch) trusts ownership only until the
//! [`SessionBound`]: the coordinator may evict a member it has not heard from. The share
//! group's [`LockLease`] (one acquired record) trusts it only until the broker's record lock
//! may have ended, or the member's own [`SessionBound`] passed, whichever is first: a member no
//! longer heard from may lose its share sessions, and Kafka then gives their records to
//! others (`locks/lease.rs` says where Kafka does it). Each is a deadline on the lease clock (the [`BootClock`], which counts the
//! time the machine was suspended, as the broker's clocks do), moved forward by the broker's
//! answers and never back, read lock-free by any thread about to act. [`Deadline`] is that
//! deadline, written once: before it the two leases kept one encoding each, and copies drift
//! (the share lease once learned a rule the consumer's already kept, one round late).
//!
//! The rule ([`lease_end`]): a lease holds while none of these is true, checked in this order:
//! 1. its **deadline passed** (the session bound; the record lock's margin or, earlier, the
//!    member's session bound): the broker may already have handed the work to another member
//!    without telling us;
//! 2. the **scope it was granted under ended** (the partition's assignment moved on or was
//!    lost; the share session that acquired the record ended, which releases the record at
//!    once);
//! 3. it was **voided** (the guard took the record back: a seek past it, a new acquisition of
//!    the same record).
//!
//! Each lease says how to read the three for itself; the order and the conclusion are here.
//!
//! [`Lease`]: super::Lease
//! [`SessionBound`]: super::SessionBound
//! [`LockLease`]: super::LockLease
//! [`BootClock`]: super::BootClock

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::clock::Clock;

/// The encoded state of a deadline with no instant yet (a session not bounded yet, no request
/// held).
const OPEN: u64 = 0;
/// The encoded state of a deadline ended for good: passed at every instant, never extended.
const ENDED: u64 = u64::MAX;

/// The clock a family of deadlines is read on and the instant they count from: cheap to clone
/// (one reference count), so every lease of a guard reads the guard's clock.
#[derive(Clone)]
pub(crate) struct Timebase {
    clock: Arc<dyn Clock>,
    base: Instant,
}

impl Timebase {
    /// Deadlines on `clock`, counted from `base`; an instant before `base` reads as `base`.
    pub(crate) fn new(clock: Arc<dyn Clock>, base: Instant) -> Self {
        Timebase { clock, base }
    }

    /// Now on this clock.
    pub(crate) fn now(&self) -> Instant {
        self.clock.now()
    }

    /// The clock itself, for a test that checks which clock a guard reads.
    #[cfg(test)]
    pub(crate) fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Nanoseconds from `base` to `at`, plus one, saturating below [`ENDED`]; an instant before
    /// `base` encodes as `base` itself.
    #[inline]
    fn encode(&self, at: Instant) -> u64 {
        let since = at.saturating_duration_since(self.base);
        // In u64 arithmetic: `as_nanos` is a u128, and every admission checks a deadline.
        since
            .as_secs()
            .checked_mul(1_000_000_000)
            .and_then(|nanos| nanos.checked_add(u64::from(since.subsec_nanos())))
            .unwrap_or(u64::MAX)
            .min(ENDED - 2)
            .saturating_add(1)
    }

    fn decode(&self, encoded: u64) -> Option<Instant> {
        self.base
            .checked_add(Duration::from_nanos(encoded.saturating_sub(1)))
    }
}

/// A deadline on the lease clock: open (no instant yet), an instant, or ended for good. One
/// atomic, so it can be moved by the thread that hears the broker and read by every thread that
/// is about to act, under any lock or none, without ordering locks.
pub(crate) struct Deadline {
    time: Timebase,
    at: AtomicU64,
}

impl Deadline {
    /// A deadline with no instant yet: it has not passed, whatever the time.
    pub(crate) fn open(time: Timebase) -> Self {
        Deadline {
            time,
            at: AtomicU64::new(OPEN),
        }
    }

    /// A deadline at `at`.
    pub(crate) fn at(time: Timebase, at: Instant) -> Self {
        let encoded = time.encode(at);
        Deadline {
            time,
            at: AtomicU64::new(encoded),
        }
    }

    /// Now on the deadline's clock.
    pub(crate) fn now(&self) -> Instant {
        self.time.now()
    }

    /// Moves the deadline to `to` if that is later (an open one takes it); never moves it back
    /// (an older answer arriving late) and never revives an ended one. True when it moved.
    pub(crate) fn extend(&self, to: Instant) -> bool {
        let to = self.time.encode(to);
        self.at
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |at| {
                (at != ENDED && to > at).then_some(to)
            })
            .is_ok()
    }

    /// Sets the deadline to `to`, earlier or later, or opens it again (`None`): for a bound that
    /// lasts only while something lasts (a request held at the coordinator).
    pub(crate) fn set(&self, to: Option<Instant>) {
        let encoded = to.map_or(OPEN, |to| self.time.encode(to));
        self.at.store(encoded, Ordering::Release);
    }

    /// Ends the deadline for good: it reads passed from now on.
    pub(crate) fn end(&self) {
        self.at.store(ENDED, Ordering::Release);
    }

    /// True while the deadline has no instant (and was not ended).
    pub(crate) fn is_open(&self) -> bool {
        self.at.load(Ordering::Acquire) == OPEN
    }

    /// Whether `now` is at or past the deadline: never for an open one, always for an ended one.
    #[inline]
    pub(crate) fn passed(&self, now: Instant) -> bool {
        match self.at.load(Ordering::Acquire) {
            OPEN => false,
            ENDED => true,
            // Encoded only when there is an instant to compare with.
            at => self.time.encode(now) >= at,
        }
    }

    /// `now` as this deadline's timebase encodes it, for [`passed_stamp`](Self::passed_stamp):
    /// one instant checked against many deadlines (or one deadline many times) is encoded once.
    #[inline]
    pub(crate) fn stamp(&self, now: Instant) -> u64 {
        self.time.encode(now)
    }

    /// [`passed`](Self::passed) at the instant `stamp` encodes (from [`stamp`](Self::stamp) on
    /// a deadline of the same timebase): an atomic load and a comparison.
    #[inline]
    pub(crate) fn passed_stamp(&self, stamp: u64) -> bool {
        match self.at.load(Ordering::Acquire) {
            OPEN => false,
            ENDED => true,
            at => stamp >= at,
        }
    }

    /// The deadline's instant; `None` while open or once ended.
    pub(crate) fn instant(&self) -> Option<Instant> {
        match self.at.load(Ordering::Acquire) {
            OPEN | ENDED => None,
            at => self.time.decode(at),
        }
    }

    /// The instant deadlines on this timebase count from (what an instant before it reads as).
    pub(crate) fn origin(&self) -> Instant {
        self.time.base
    }
}

/// Why a lease ended: the ways ownership could have moved, in the order [`lease_end`] asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LeaseEnd {
    /// Its deadline passed: the broker may have given the work to another member.
    DeadlinePassed,
    /// The scope it was granted under ended (an assignment, a share session).
    ScopeEnded,
    /// The guard took it back (a seek past the record, a new acquisition of it).
    Voided,
}

/// The rule every lease keeps: it ends when ownership could have moved, whichever way. `None`
/// while the lease holds. The deadline is asked first (it needs no lock), the scope and the
/// voiding only while it has not passed, in that order, so a caller that must remember why
/// (the rebalance guard marks a record whose handler was told its session may have lapsed)
/// learns the first reason that holds.
pub(crate) fn lease_end(
    deadline_passed: bool,
    scope_ended: impl FnOnce() -> bool,
    voided: impl FnOnce() -> bool,
) -> Option<LeaseEnd> {
    if deadline_passed {
        Some(LeaseEnd::DeadlinePassed)
    } else if scope_ended() {
        Some(LeaseEnd::ScopeEnded)
    } else if voided() {
        Some(LeaseEnd::Voided)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guard::ManualClock;

    fn timebase() -> (Arc<ManualClock>, Timebase) {
        let clock = Arc::new(ManualClock::new());
        let base = clock.now();
        (clock.clone(), Timebase::new(clock, base))
    }

    #[test]
    fn a_deadline_moves_forward_only_and_an_ended_one_stays_ended() {
        let (clock, time) = timebase();
        let t0 = clock.now();
        let deadline = Deadline::open(time);
        assert!(!deadline.passed(t0 + Duration::from_secs(3600)), "open");
        assert!(deadline.extend(t0 + Duration::from_secs(5)));
        assert!(!deadline.extend(t0 + Duration::from_secs(4)), "never back");
        assert!(!deadline.passed(t0 + Duration::from_millis(4999)));
        assert!(deadline.passed(t0 + Duration::from_secs(5)));
        assert_eq!(deadline.instant(), Some(t0 + Duration::from_secs(5)));
        deadline.end();
        assert!(deadline.passed(t0), "ended: passed at every instant");
        assert!(
            !deadline.extend(t0 + Duration::from_secs(60)),
            "never revived"
        );
        assert_eq!(deadline.instant(), None);
    }

    #[test]
    fn set_moves_either_way_and_opens_again() {
        let (clock, time) = timebase();
        let t0 = clock.now();
        let deadline = Deadline::at(time, t0 + Duration::from_secs(30));
        deadline.set(Some(t0 + Duration::from_secs(10)));
        assert!(deadline.passed(t0 + Duration::from_secs(10)));
        deadline.set(None);
        assert!(deadline.is_open());
        assert!(!deadline.passed(t0 + Duration::from_secs(3600)));
    }

    #[test]
    fn the_rule_asks_the_deadline_first_and_the_rest_only_while_it_holds() {
        let never = || -> bool { panic!("asked after the deadline passed") };
        assert_eq!(
            lease_end(true, never, never),
            Some(LeaseEnd::DeadlinePassed)
        );
        assert_eq!(lease_end(false, || true, never), Some(LeaseEnd::ScopeEnded));
        assert_eq!(lease_end(false, || false, || true), Some(LeaseEnd::Voided));
        assert_eq!(lease_end(false, || false, || false), None);
    }
}
