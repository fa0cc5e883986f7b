//! The batch's readings of time, taken again only when time may have moved on.
//!
//! Why: a batch needs the time before each record for four things (its deadline and size
//! estimate, the commit pacer, the guard's session bound at admission), and a precise clock
//! read costs tens of nanoseconds on a virtual machine: two per record (`Instant` and the
//! guard's boot clock) were a seventh of the whole consumer's time per record. What each needs
//! is a reading that is not older than a tick of the kernel's timer (the deadline and the
//! session bound are seconds, the pacer's interval a tenth of one at least), so the batch keeps
//! one pair of readings and reads both clocks again only when
//!
//! - the kernel's coarse clock moved (`guard::coarse_now`: a few nanoseconds, no counter read):
//!   about one timer tick (1 to 10 ms) of running time passed since the last reading, or
//! - as many records went out since as the sizer allows before its deadline at the current
//!   estimate (`BatchSizer::records_fitting`, at most [`MAX_STRIDE`]), so the deadline is kept
//!   as if the clock were read before every record.
//!
//! A slow handler (a tick or more per record) thus still gets a reading per record, and a fast
//! one about one per tick. Where there is no coarse clock every record reads both clocks, as
//! before. The admission instant handed to the guard is the boot-clock reading: never more than
//! about one tick of running time old (a suspend counted, see `coarse_now`), and the session
//! bound is checked against it as if it were a tick and a half later (`coarse_lag`): a reused
//! reading ends a lease early, never late.

use std::time::{Duration, Instant};

use crate::guard::{coarse_lag, coarse_now, AdmissionTime};

use super::context::Guard;

/// The most records handed out on one reading. A bound in records beside the coarse clock's
/// bound in time, in case a kernel's coarse clock stands still: 64 records at the fastest
/// handler's tens of nanoseconds each are microseconds.
pub(crate) const MAX_STRIDE: usize = 64;

/// One batch's readings of the clocks and what happened since.
#[derive(Debug)]
pub(crate) struct BatchClock {
    /// `Instant::now()` at the last reading: the batch deadline, pacing and sizing.
    now: Instant,
    /// The guard's clock at the last reading, prepared for admissions (the session bound).
    admission: AdmissionTime,
    /// The coarse clock at the last reading (`None`: there is none; read every time).
    coarse: Option<Duration>,
    /// Records handed out since the last reading.
    handed: usize,
    /// Records completed since the last reading: what the sizer's next sample covers.
    completed: usize,
    /// How many records may go out on this reading.
    stride: usize,
}

impl BatchClock {
    /// Readings of a batch that begins at `now`; the first record reads the clocks again (its
    /// checks run before it, as they do after every reading).
    pub(crate) fn new(now: Instant, guard: &Guard) -> Self {
        BatchClock {
            now,
            admission: guard.admission_time(guard.now(), coarse_lag()),
            coarse: None,
            handed: 0,
            completed: 0,
            stride: 0,
        }
    }

    /// True when the clocks must be read again before the next record goes out.
    #[inline]
    pub(crate) fn due(&self) -> bool {
        self.handed >= self.stride || self.coarse.is_none() || coarse_now() != self.coarse
    }

    /// Reads both clocks again. Returns how many records were completed since the last reading
    /// and how long since it took.
    pub(crate) fn read(&mut self, guard: &Guard) -> (usize, Duration) {
        self.coarse = coarse_now();
        let now = Instant::now();
        self.admission = guard.admission_time(guard.now(), coarse_lag());
        let since = (
            std::mem::take(&mut self.completed),
            now.saturating_duration_since(self.now),
        );
        self.now = now;
        self.handed = 0;
        since
    }

    /// Records may go out on this reading until `stride` did (at least one: the caller stops the
    /// batch instead when none may).
    pub(crate) fn allow(&mut self, stride: usize) {
        self.stride = stride.clamp(1, MAX_STRIDE);
    }

    /// The `Instant` of the last reading.
    #[inline]
    pub(crate) fn now(&self) -> Instant {
        self.now
    }

    /// The guard's clock at the last reading: the admission instant.
    #[inline]
    pub(crate) fn admission(&self) -> &AdmissionTime {
        &self.admission
    }

    /// A record went out.
    #[inline]
    pub(crate) fn handed_out(&mut self) {
        self.handed += 1;
    }

    /// A record was completed.
    #[inline]
    pub(crate) fn completed(&mut self) {
        self.completed += 1;
    }

    /// The batch ends: the records completed since the last reading and how long they took
    /// (`Instant` alone is read: nothing is admitted any more).
    pub(crate) fn close(&mut self) -> (usize, Duration) {
        (std::mem::take(&mut self.completed), self.now.elapsed())
    }
}
