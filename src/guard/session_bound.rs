//! A lease that expires by time: ownership is only as good as the member's session.
//!
//! The coordinator evicts a member it has not heard from for `session.timeout.ms` and hands its
//! partitions to someone else, without telling the evicted member. A member learns of it only
//! when its next heartbeat is answered with an error, and a member whose process was frozen
//! (SIGSTOP, a debugger, a long stall) has not sent that heartbeat: when it resumes, every lease
//! it holds still reads current, and a handler that was in the middle of an order applies it
//! although the order already belongs to another member.
//!
//! So ownership also ends by time. Each answered heartbeat (and each successful join or sync)
//! renews the bound to *its send time* plus `session.timeout.ms`: the coordinator received the
//! request after it was sent, so its own deadline for this member is at least that late. Past
//! the bound the coordinator may already have evicted the member, and the thread that asks
//! ([`RebalanceGuard::is_current`](super::RebalanceGuard::is_current), a worker about to start,
//! an admission) reads the clock itself and gets "no": it does not wait for the heartbeat
//! thread, which may not have run since the process resumed.
//!
//! The bound is read on the guard's clock, by default the [`BootClock`](super::BootClock): it
//! keeps counting while the process is stopped or starved of CPU *and* while the whole machine
//! is suspended (a VM paused by its host, a laptop asleep), as the coordinator's session clock
//! does. Renewals are stamped on the same clock (the send times read with `lease_now`); a stamp
//! read on `Instant` by mistake could only end the bound early, never late, since the boot clock
//! never runs behind `Instant` (docs/DESIGN.md, "Clocks"). Off Linux and Android the boot clock is `Instant` and a suspend
//! goes undetected.
//!
//! Lock-free (two [`Deadline`]s, one atomic each), so it can be read under the guard's lock and
//! written by the heartbeat thread under the membership's lock without ordering the two locks.
//! Whether a lease of the guard still holds once the bound is read is decided by the rule every
//! lease keeps (`deadline.rs`, `lease_end`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::clock::{BootClock, Clock};
use super::deadline::{Deadline, Timebase};

/// An instant encoded on a [`SessionBound`]'s timebase ([`SessionBound::stamp`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SessionStamp(u64);

/// How long ownership can be trusted: renewed by the membership, read by whoever is about to
/// act on a lease. Starts unbounded (a guard used without a group membership).
pub struct SessionBound {
    /// The instant the session may have expired by; open while unbounded.
    until: Deadline,
    /// While a request of ours is held at the coordinator (a JoinGroup waiting for the group),
    /// which does not expire a member it holds, the session lasts at least until here whatever
    /// the renewals say; open when nothing is held.
    held: Deadline,
}

impl std::fmt::Debug for SessionBound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionBound")
            .field("valid_until", &self.valid_until())
            .finish_non_exhaustive()
    }
}

impl Default for SessionBound {
    fn default() -> Self {
        Self::unbounded()
    }
}

impl SessionBound {
    /// No bound yet, read on the process's [`BootClock`]: leases expire only when their
    /// partition moves.
    pub fn unbounded() -> Self {
        Self::on_clock(BootClock::shared())
    }

    /// No bound yet, read on `clock` (the guard's): leases expire only when their partition
    /// moves.
    pub fn on_clock(clock: Arc<dyn Clock>) -> Self {
        // The earlier of the two, so that neither a renewal's `Instant` send time nor a
        // reading of the clock comes before it (either would be clamped to it).
        let base = clock.now().min(Instant::now());
        let time = Timebase::new(clock, base);
        SessionBound {
            until: Deadline::open(time.clone()),
            held: Deadline::open(time),
        }
    }

    /// The coordinator answered a request sent at `sent`: the session lasts at least until
    /// `sent + session_timeout`. Never moves the bound back (an older answer arriving late).
    pub fn renew(&self, sent: Instant, session_timeout: Duration) {
        let until = sent.checked_add(session_timeout).unwrap_or(sent);
        self.until.extend(until);
    }

    /// The coordinator holds a request of ours and keeps the member meanwhile, at most until
    /// `until` (the request's send time plus the rebalance timeout): the bound does not lapse
    /// before then, until [`release`](Self::release).
    pub fn hold(&self, until: Instant) {
        self.held.set(Some(until));
    }

    /// The held request came back (answered, which renewed the bound first, or failed): the
    /// bound is the renewals' again.
    pub fn release(&self) {
        self.held.set(None);
    }

    /// True once `now` is past the bound: the coordinator may have evicted the member.
    #[inline]
    pub fn is_expired(&self, now: Instant) -> bool {
        self.until.passed(now) && (self.held.is_open() || self.held.passed(now))
    }

    /// `now` encoded once for [`is_expired_at`](Self::is_expired_at): an admission instant read
    /// once and checked for many records (the consumer's batch) costs each check two atomic
    /// loads and a comparison instead of an instant's subtraction.
    #[inline]
    pub(crate) fn stamp(&self, now: Instant) -> SessionStamp {
        // Both deadlines count from the one timebase they were made with (`on_clock`).
        SessionStamp(self.until.stamp(now))
    }

    /// [`is_expired`](Self::is_expired) at the instant `stamp` encodes.
    #[inline]
    pub(crate) fn is_expired_at(&self, stamp: SessionStamp) -> bool {
        self.until.passed_stamp(stamp.0) && (self.held.is_open() || self.held.passed_stamp(stamp.0))
    }

    /// [`is_expired`](Self::is_expired) now, on the bound's clock (which counts a suspend of
    /// the machine as the coordinator does); the clock is read only when there is a bound (an
    /// unbounded guard pays no clock read).
    pub fn is_expired_now(&self) -> bool {
        !self.until.is_open() && self.is_expired(self.until.now())
    }

    /// The instant past which the session may have expired, if bounded.
    pub fn valid_until(&self) -> Option<Instant> {
        let until = self.until.instant()?;
        Some(self.held.instant().map_or(until, |held| held.max(until)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_renewal_holds_for_the_session_timeout_from_its_send_time() {
        let bound = SessionBound::unbounded();
        let t0 = Instant::now();
        assert!(
            !bound.is_expired(t0 + Duration::from_secs(3600)),
            "unbounded"
        );
        bound.renew(t0, Duration::from_secs(6));
        assert!(!bound.is_expired(t0 + Duration::from_millis(5999)));
        assert!(bound.is_expired(t0 + Duration::from_secs(6)));
        // A late answer to an older heartbeat does not shorten the session.
        bound.renew(t0 - Duration::from_secs(1), Duration::from_secs(6));
        assert!(!bound.is_expired(t0 + Duration::from_millis(5999)));
        bound.renew(t0 + Duration::from_secs(2), Duration::from_secs(6));
        assert!(!bound.is_expired(t0 + Duration::from_millis(7999)));
        assert_eq!(bound.valid_until(), Some(t0 + Duration::from_secs(8)));
    }

    #[test]
    fn a_hold_keeps_the_bound_until_its_limit_and_a_release_gives_it_back_to_the_renewals() {
        let bound = SessionBound::unbounded();
        let t0 = Instant::now();
        bound.renew(t0, Duration::from_secs(6));
        bound.hold(t0 + Duration::from_secs(30));
        assert!(!bound.is_expired(t0 + Duration::from_secs(29)));
        assert!(bound.is_expired(t0 + Duration::from_secs(30)));
        assert_eq!(bound.valid_until(), Some(t0 + Duration::from_secs(30)));
        bound.release();
        assert!(bound.is_expired(t0 + Duration::from_secs(6)));
        assert_eq!(bound.valid_until(), Some(t0 + Duration::from_secs(6)));
    }
}
