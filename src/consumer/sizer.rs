//! The batch sizer: how many records the next `poll()` may hand out, and when a batch must stop.
//!
//! Why it exists: a handler slower than expected keeps the consumer from polling, the
//! member is evicted after `max.poll.interval.ms`, its partitions move, and the batch it is still
//! working through becomes zombie work processed twice. Java leaves this to the user
//! (`max.poll.records` is a fixed count, blind to how long records take). Here the count follows
//! measured processing time, and every batch carries a deadline, so a batch can never run past
//! the interval even when the measurement is wrong.
//!
//! Two layers of protection:
//! 1. **Size** (soft): the next batch holds `budget / per_record_estimate` records, at least 1 and
//!    at most `max.poll.records`, where `budget = batch.safety.factor * max.poll.interval.ms`
//!    (never more than the interval minus a [margin](MARGIN_FRACTION)). So a planned batch's
//!    expected duration fits the budget.
//! 2. **Deadline** (hard): the batch started at `t` must stop handing out records at
//!    `t + budget`, and also as soon as the next record is expected to finish after that (see
//!    [`BatchSizer::records_fitting`]). The consumer then commits what finished and lets the rest
//!    be fetched again.
//!
//! The estimate is asymmetric on purpose, "fast attack, slow decay":
//! - a record slower than the estimate replaces it at once, so a single very slow record (a
//!   downstream timeout, a lock wait) shrinks the very next batch; being wrong in that direction
//!   costs a few extra polls;
//! - a record faster than the estimate moves it by [`DECAY_ALPHA`] (an exponentially weighted
//!   moving average), and the batch size may at most [double](MAX_GROWTH_FACTOR) per batch, so a
//!   speed-up is trusted only gradually; being wrong in that direction costs an eviction.
//!
//! I/O-free and deterministic: time is passed in (`Instant`s and `Duration`s measured by the
//! caller), so the behaviour is pinned by unit tests without sleeping.

use std::time::{Duration, Instant};

use log::{debug, info, warn};

use super::config::{ConfigError, ConsumerConfig};

/// Weight of a new, faster sample in the per-record estimate (an exponentially weighted moving
/// average with `alpha = 0.2`). Why 0.2: the estimate follows a lasting speed-up within about ten
/// records (0.8^10 ≈ 0.11 of the old value left), while one fast record among slow ones barely
/// moves it. Slower samples bypass the average (fast attack).
pub(crate) const DECAY_ALPHA: f64 = 0.2;

/// The most the batch size may grow from one batch to the next. Why 2: a speed-up may be
/// transient (a warm cache, an idle downstream), and overshooting is what gets a member evicted,
/// while shrinking is immediate and costs only extra polls. Doubling still reaches
/// `max.poll.records = 500` from 1 in nine batches.
pub(crate) const MAX_GROWTH_FACTOR: usize = 2;

/// Fraction of `max.poll.interval.ms` always kept free after a batch's deadline, for committing,
/// the next fetch and rebalance callbacks. It binds only when `batch.safety.factor` exceeds 0.9.
pub(crate) const MARGIN_FRACTION: f64 = 0.1;

/// One planned batch: how many records it may hold and until when records may be handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchPlan {
    /// The most records this batch may hand out (at least 1).
    pub size: usize,
    /// When the batch started.
    pub started: Instant,
    /// When the batch must stop handing out records: `started + budget`.
    pub deadline: Instant,
}

impl BatchPlan {
    /// Time left before the deadline (zero once it has passed).
    pub fn remaining(&self, now: Instant) -> Duration {
        self.deadline.saturating_duration_since(now)
    }

    /// Whether the deadline has arrived.
    pub(crate) fn is_past_deadline(&self, now: Instant) -> bool {
        now >= self.deadline
    }
}

/// Sizes batches from measured per-record processing time so that each finishes well within
/// `max.poll.interval.ms`; see the module documentation for the rules.
///
/// Use: [`begin_batch`](Self::begin_batch) before handing out records; whenever the clock is
/// read, [`window_processed`](Self::window_processed) with what finished since the last reading,
/// then [`records_fitting`](Self::records_fitting): how many more records may go before the
/// next reading; then [`end_batch`](Self::end_batch).
#[derive(Debug, Clone)]
pub(crate) struct BatchSizer {
    max_poll_interval: Duration,
    safety_factor: f64,
    max_records: usize,
    budget: Duration,
    /// Per-record processing time estimate, in nanoseconds; `None` until the first sample.
    estimate_ns: Option<f64>,
    /// The most recent per-record sample, in nanoseconds.
    last_ns: Option<f64>,
    /// The size of the most recently planned batch (initially `max_records`).
    planned: usize,
    current: Option<BatchPlan>,
    /// Set while the estimate exceeds the whole interval, so that warning is logged once per
    /// episode rather than once per batch.
    warned_over_interval: bool,
}

impl BatchSizer {
    /// A sizer for the given `max.poll.interval.ms`, `batch.safety.factor` (strictly between 0
    /// and 1) and `max.poll.records` (at least 1). Errors name the setting as
    /// [`ConsumerConfig`] would.
    ///
    /// Before any measurement the first batch may hold `max_records`, as Java's consumer would:
    /// its deadline, and the per-record estimate formed from its first record, still stop it in
    /// time, and a fast handler does not pay a slow start.
    pub(crate) fn new(
        max_poll_interval: Duration,
        safety_factor: f64,
        max_records: usize,
    ) -> Result<BatchSizer, ConfigError> {
        if max_poll_interval.is_zero() || max_poll_interval.as_millis() > i32::MAX as u128 {
            return Err(ConfigError::OutOfRange {
                name: "max.poll.interval.ms",
                value: max_poll_interval.as_millis().to_string(),
                rule: "must be between 1 and 2147483647",
            });
        }
        if !(safety_factor > 0.0 && safety_factor < 1.0) {
            return Err(ConfigError::OutOfRange {
                name: "batch.safety.factor",
                value: safety_factor.to_string(),
                rule: "must be greater than 0 and less than 1 (a fraction of max.poll.interval.ms)",
            });
        }
        if max_records == 0 {
            return Err(ConfigError::OutOfRange {
                name: "max.poll.records",
                value: "0".to_string(),
                rule: "must be between 1 and 2147483647",
            });
        }
        // Both factors are in (0, 1) and the interval is bounded, so these cannot panic.
        let share = max_poll_interval.mul_f64(safety_factor);
        let hard_limit = max_poll_interval.mul_f64(1.0 - MARGIN_FRACTION);
        Ok(BatchSizer {
            max_poll_interval,
            safety_factor,
            max_records,
            budget: share.min(hard_limit),
            estimate_ns: None,
            last_ns: None,
            planned: max_records,
            current: None,
            warned_over_interval: false,
        })
    }

    /// A sizer for a validated configuration (`max.poll.interval.ms`, `batch.safety.factor`,
    /// `max.poll.records`).
    pub(crate) fn from_config(config: &ConsumerConfig) -> BatchSizer {
        let fallback = || BatchSizer {
            max_poll_interval: config.max_poll_interval(),
            safety_factor: 0.5,
            max_records: config.max_poll_records().max(1),
            budget: config.max_poll_interval() / 2,
            estimate_ns: None,
            last_ns: None,
            planned: config.max_poll_records().max(1),
            current: None,
            warned_over_interval: false,
        };
        // A validated configuration always satisfies `new`'s rules; the fallback only keeps
        // this infallible without an unwrap.
        BatchSizer::new(
            config.max_poll_interval(),
            config.batch_safety_factor(),
            config.max_poll_records(),
        )
        .unwrap_or_else(|_| fallback())
    }

    /// The time a batch may take: `batch.safety.factor * max.poll.interval.ms`, never more than
    /// the interval minus the margin.
    #[cfg(test)]
    pub(crate) fn budget(&self) -> Duration {
        self.budget
    }

    /// `max.poll.records`.
    #[cfg(test)]
    pub(crate) fn max_records(&self) -> usize {
        self.max_records
    }

    /// The current per-record processing time estimate; `None` before the first measurement.
    pub(crate) fn estimate(&self) -> Option<Duration> {
        self.estimate_ns.map(nanos_to_duration)
    }

    /// The most recent per-record measurement.
    pub(crate) fn last_sample(&self) -> Option<Duration> {
        self.last_ns.map(nanos_to_duration)
    }

    /// The batch in progress, if any.
    #[cfg(test)]
    pub(crate) fn current(&self) -> Option<&BatchPlan> {
        self.current.as_ref()
    }

    /// The size the next batch would get, without planning it: the most records whose expected
    /// time fits the budget, between 1 and `max.poll.records`, and at most
    /// [`MAX_GROWTH_FACTOR`] times the previous batch's size.
    pub(crate) fn next_size(&self) -> usize {
        let target = self.fitting_size();
        if target > self.planned {
            target.min(self.planned.saturating_mul(MAX_GROWTH_FACTOR))
        } else {
            target
        }
    }

    /// The most records whose expected time fits the budget, clamped to `1..=max_records`.
    fn fitting_size(&self) -> usize {
        match self.estimate_ns {
            Some(per_record) if per_record > 0.0 => {
                let fits = (self.budget.as_nanos() as f64 / per_record).floor();
                if fits < 1.0 {
                    1
                } else if fits >= self.max_records as f64 {
                    self.max_records
                } else {
                    fits as usize
                }
            }
            // No measurement yet, or records too fast for the clock to see.
            _ => self.max_records,
        }
    }

    /// Plans a batch starting at `now`: fixes its size and deadline and logs a size change
    /// (`info` when it shrinks, with the measurement that caused it; `debug` when it grows).
    pub(crate) fn begin_batch(&mut self, now: Instant) -> BatchPlan {
        let size = self.next_size();
        let old = self.planned;
        if size < old {
            info!(
                "batch size {old} -> {size}: records measured at {:?} each (last {:?}); a batch \
                 may take {:?} ({} x max.poll.interval.ms {:?})",
                self.estimate().unwrap_or_default(),
                self.last_sample().unwrap_or_default(),
                self.budget,
                self.safety_factor,
                self.max_poll_interval
            );
        } else if size > old {
            debug!(
                "batch size {old} -> {size}: records measured at {:?} each; budget {:?}",
                self.estimate().unwrap_or_default(),
                self.budget
            );
        }
        self.warn_if_one_record_is_too_slow();
        self.planned = size;
        let plan = BatchPlan {
            size,
            started: now,
            // The budget is at most ~24 days; an overflow would need an Instant near the end of
            // time. Falling back to `now` stops the batch at once, the safe side.
            deadline: now.checked_add(self.budget).unwrap_or(now),
        };
        self.current = Some(plan);
        plan
    }

    fn warn_if_one_record_is_too_slow(&mut self) {
        let Some(estimate) = self.estimate() else {
            return;
        };
        if estimate >= self.max_poll_interval {
            if !self.warned_over_interval {
                warn!(
                    "one record takes about {estimate:?}, at least max.poll.interval.ms \
                     ({:?}): batches are down to one record, and the member will still be \
                     evicted while processing it; raise max.poll.interval.ms or speed up the \
                     handler",
                    self.max_poll_interval
                );
                self.warned_over_interval = true;
            }
        } else {
            self.warned_over_interval = false;
        }
    }

    /// Whether the batch in progress must stop handing out records at `now`: its deadline has
    /// arrived, or the next record, at the current estimate, would finish after it. Also `true`
    /// when no batch is in progress, since nothing was planned that could be handed out.
    #[cfg(test)]
    pub(crate) fn should_stop(&self, now: Instant) -> bool {
        self.records_fitting(now) == 0
    }

    /// How many more records the batch in progress may hand out from `now`, each taking the
    /// current estimate, so that the last one finishes by the deadline: zero once the deadline
    /// has arrived or the next record would finish after it (the batch stops), and zero when no
    /// batch is in progress (nothing was planned that could be handed out). Without an estimate
    /// (or with records too fast to measure) only the deadline bounds it.
    ///
    /// The batch reads its clock only every few records (`batch_clock.rs`); it reads it again
    /// before handing out more than this many, so the deadline holds as it would if the clock
    /// were read before every record.
    pub(crate) fn records_fitting(&self, now: Instant) -> usize {
        let Some(plan) = &self.current else {
            return 0;
        };
        if plan.is_past_deadline(now) {
            return 0;
        }
        match self.estimate_ns {
            Some(per_record) if per_record >= 1.0 => {
                let left = plan.deadline.saturating_duration_since(now).as_secs_f64() * 1e9;
                // `as` saturates: a huge quotient is simply "many".
                (left / per_record) as usize
            }
            _ => usize::MAX,
        }
    }

    /// Records how long one record took to process.
    #[cfg(test)]
    pub(crate) fn record_processed(&mut self, elapsed: Duration) {
        self.window_processed(1, elapsed);
    }

    /// Records that the `count` records completed since the batch last read its clock took
    /// `elapsed` together (the batch reads it only every few records, `batch_clock.rs`).
    ///
    /// It counts as one sample, the slowest record the window allows at the current estimate:
    /// the others took the estimate, the last one the rest (at least the window's average). So
    /// one slow record among fast ones still replaces the estimate at once (fast attack), as if
    /// it had been measured alone, and a fast window moves the estimate by one decay step, not
    /// by `count` (a speed-up is trusted more slowly still). A window of one record is that
    /// record's own time.
    pub(crate) fn window_processed(&mut self, count: usize, elapsed: Duration) {
        if count == 0 {
            return;
        }
        // Via seconds: `as_nanos` is a u128, and its float conversion is a library call.
        let total = elapsed.as_secs_f64() * 1e9;
        let average = total / count as f64;
        let sample = match self.estimate_ns {
            Some(estimate) => (total - (count - 1) as f64 * estimate).max(average),
            None => average,
        };
        self.observe(sample, 1);
    }

    /// Records that `count` records took `elapsed` together, for handlers that process a batch
    /// in one call. Counts as `count` samples of the average; a zero count is ignored.
    #[cfg(test)]
    pub(crate) fn batch_processed(&mut self, count: usize, elapsed: Duration) {
        if count == 0 {
            return;
        }
        self.observe(elapsed.as_secs_f64() * 1e9 / count as f64, count);
    }

    fn observe(&mut self, sample: f64, count: usize) {
        self.last_ns = Some(sample);
        self.estimate_ns = Some(match self.estimate_ns {
            // Fast attack: a slower record is believed at once.
            Some(estimate) if sample < estimate => {
                // `count` samples of the same value: the average keeps (1 - alpha)^count of
                // the old estimate.
                let exponent = i32::try_from(count).unwrap_or(i32::MAX);
                let kept = (1.0 - DECAY_ALPHA).powi(exponent);
                sample + kept * (estimate - sample)
            }
            _ => sample,
        });
    }

    /// Ends the batch in progress; [`records_fitting`](Self::records_fitting) answers zero until
    /// the next [`begin_batch`](Self::begin_batch).
    pub(crate) fn end_batch(&mut self) {
        self.current = None;
    }
}

/// Samples are finite and non-negative; `as` saturates (at 584 years) where
/// `Duration::try_from_secs_f64` would cost a float decomposition per record.
fn nanos_to_duration(nanos: f64) -> Duration {
    Duration::from_nanos(nanos.max(0.0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn sizer(interval_ms: u64, factor: f64, max: usize) -> BatchSizer {
        BatchSizer::new(Duration::from_millis(interval_ms), factor, max).unwrap()
    }

    /// Runs one batch of a handler that takes `per_record` for each record, stopping when the
    /// sizer says so; returns the plan and how many records were processed.
    fn run_batch(
        s: &mut BatchSizer,
        now: &mut Instant,
        per_record: Duration,
    ) -> (BatchPlan, usize) {
        let plan = s.begin_batch(*now);
        let mut done = 0;
        while done < plan.size && !s.should_stop(*now) {
            *now += per_record;
            s.record_processed(per_record);
            done += 1;
        }
        // The batch never ran past its deadline.
        assert!(*now <= plan.deadline, "batch overran its deadline");
        s.end_batch();
        (plan, done)
    }

    #[test]
    fn steady_handler_converges_within_the_budget() {
        // The scenario: 50 ms per record, max.poll.interval.ms = 2000, safety 0.5.
        let mut s = sizer(2000, 0.5, 500);
        assert_eq!(s.budget(), Duration::from_millis(1000));
        let mut now = Instant::now();
        let (first, done) = run_batch(&mut s, &mut now, 50 * MS);
        // Unmeasured, the first batch may hold max.poll.records, but the deadline stops it.
        assert_eq!(first.size, 500);
        assert_eq!(done, 20);
        for _ in 0..50 {
            let estimate = s.estimate().unwrap();
            let (plan, done) = run_batch(&mut s, &mut now, 50 * MS);
            assert!(plan.size <= 20, "planned {}", plan.size);
            assert!(
                estimate * plan.size as u32 <= s.budget(),
                "planned {} x {estimate:?} over the budget",
                plan.size
            );
            assert_eq!(done, plan.size, "a well-sized batch is never cut short");
        }
        assert_eq!(s.next_size(), 20);
    }

    #[test]
    fn planned_batches_never_exceed_the_budget_under_varying_speed() {
        let mut s = sizer(2000, 0.5, 500);
        let mut now = Instant::now();
        // A deterministic mix of speeds, including outliers.
        let speeds = [5u32, 50, 7, 300, 20, 20, 2, 900, 1, 40];
        for round in 0..200 {
            let per_record = speeds[round % speeds.len()] * MS;
            let before = s.estimate();
            let (plan, _) = run_batch(&mut s, &mut now, per_record);
            if let Some(estimate) = before {
                assert!(
                    plan.size == 1 || estimate * plan.size as u32 <= s.budget(),
                    "round {round}: {} x {estimate:?}",
                    plan.size
                );
            }
            assert!(plan.size >= 1 && plan.size <= 500);
        }
    }

    #[test]
    fn one_slow_record_shrinks_the_very_next_batch() {
        let mut s = sizer(2000, 0.5, 500);
        let mut now = Instant::now();
        for _ in 0..5 {
            run_batch(&mut s, &mut now, 10 * MS);
        }
        assert_eq!(s.next_size(), 100);
        // Next batch: the first record hits a 400 ms downstream stall, the rest are fast.
        let plan = s.begin_batch(now);
        assert_eq!(plan.size, 100);
        now += 400 * MS;
        s.record_processed(400 * MS);
        assert_eq!(s.last_sample(), Some(400 * MS));
        // Predictive stop: at 400 ms per record, another one would not finish by the deadline
        // (at 400 ms elapsed, 400 + 400 <= 1000 still fits; at 800 it would not).
        assert!(!s.should_stop(now));
        now += 10 * MS;
        s.record_processed(10 * MS);
        s.end_batch();
        let next = s.begin_batch(now);
        assert!(
            next.size <= 1000 / 300,
            "one slow record must shrink the next batch at once, got {}",
            next.size
        );
    }

    #[test]
    fn speedup_grows_the_batch_back_gradually() {
        let mut s = sizer(2000, 0.5, 500);
        let mut now = Instant::now();
        for _ in 0..5 {
            run_batch(&mut s, &mut now, 50 * MS);
        }
        assert_eq!(s.next_size(), 20);
        let mut sizes = vec![20];
        for _ in 0..12 {
            let (plan, _) = run_batch(&mut s, &mut now, 5 * MS);
            sizes.push(plan.size);
        }
        for pair in sizes.windows(2) {
            assert!(
                pair[1] >= pair[0],
                "no shrinking while speeding up: {sizes:?}"
            );
            assert!(
                pair[1] <= pair[0] * MAX_GROWTH_FACTOR,
                "growth at most x{MAX_GROWTH_FACTOR} per batch: {sizes:?}"
            );
        }
        // The first batch after the speed-up did not jump straight to the new fit (200).
        assert_eq!(sizes[1], 20);
        assert_eq!(sizes[2], 40);
        let last = *sizes.last().unwrap();
        assert!((190..=200).contains(&last), "{sizes:?}");
    }

    #[test]
    fn deadline_is_the_budget_and_never_past_the_margin() {
        let start = Instant::now();
        let mut s = sizer(2000, 0.5, 500);
        let plan = s.begin_batch(start);
        assert_eq!(plan.deadline, start + Duration::from_millis(1000));
        assert_eq!(plan.remaining(start + 400 * MS), 600 * MS);
        assert_eq!(plan.remaining(start + 2000 * MS), Duration::ZERO);
        assert!(!s.should_stop(start + 999 * MS));
        assert!(s.should_stop(start + 1000 * MS));

        // A greedy safety factor is capped by the margin (10% of the interval).
        let mut greedy = sizer(2000, 0.99, 500);
        assert_eq!(greedy.budget(), Duration::from_millis(1800));
        let plan = greedy.begin_batch(start);
        assert_eq!(plan.deadline, start + Duration::from_millis(1800));

        // Predictive stop: with 300 ms records, stop once the next would end past the deadline.
        s.record_processed(300 * MS);
        assert!(!s.should_stop(start + 700 * MS));
        assert!(s.should_stop(start + 701 * MS));

        // No batch in progress: nothing may be handed out.
        s.end_batch();
        assert!(s.should_stop(start));
        assert!(s.current().is_none());
    }

    #[test]
    fn size_is_at_least_one_and_at_most_max_poll_records() {
        let mut s = sizer(2000, 0.5, 50);
        s.record_processed(Duration::ZERO);
        assert_eq!(
            s.next_size(),
            50,
            "records too fast to measure: the cap applies"
        );
        s.record_processed(Duration::from_nanos(10));
        assert_eq!(s.next_size(), 50);
        s.record_processed(Duration::from_secs(5));
        assert_eq!(
            s.next_size(),
            1,
            "a record slower than the budget still gets a batch of one"
        );
        let plan = s.begin_batch(Instant::now());
        assert_eq!(plan.size, 1);
    }

    #[test]
    fn whole_batch_measurements_count_as_their_average() {
        let mut s = sizer(2000, 0.5, 500);
        s.batch_processed(0, Duration::from_secs(1));
        assert_eq!(s.estimate(), None, "an empty batch measures nothing");
        s.batch_processed(10, Duration::from_millis(500));
        assert_eq!(s.estimate(), Some(50 * MS));
        // Ten faster samples decay the estimate as ten single samples would.
        let mut single = s.clone();
        for _ in 0..10 {
            single.record_processed(10 * MS);
        }
        s.batch_processed(10, Duration::from_millis(100));
        let (a, b) = (s.estimate().unwrap(), single.estimate().unwrap());
        let diff = a.abs_diff(b);
        assert!(diff < Duration::from_micros(1), "{a:?} vs {b:?}");
        // A slower batch average is believed at once.
        s.batch_processed(2, Duration::from_millis(400));
        assert_eq!(s.estimate(), Some(200 * MS));
    }

    #[test]
    fn a_window_of_records_is_one_sample_and_a_slow_record_in_it_is_believed_at_once() {
        let mut s = sizer(2000, 0.5, 500);
        s.window_processed(0, Duration::from_secs(1));
        assert_eq!(s.estimate(), None, "an empty window measures nothing");
        s.window_processed(10, 100 * MS);
        assert_eq!(s.estimate(), Some(10 * MS), "no estimate yet: the average");
        // Nine records at the estimate and one that took the rest: the rest is believed.
        s.window_processed(10, 9 * 10 * MS + 400 * MS);
        assert_eq!(s.estimate(), Some(400 * MS));
        // A faster window moves the estimate by one decay step, not by ten.
        let mut single = s.clone();
        single.record_processed(10 * MS);
        s.window_processed(10, 100 * MS);
        let (a, b) = (s.estimate().unwrap(), single.estimate().unwrap());
        assert!(a >= b, "{a:?} decayed faster than one sample's {b:?}");
    }

    #[test]
    fn records_fitting_is_how_many_more_finish_by_the_deadline_at_the_estimate() {
        let mut s = sizer(2000, 0.5, 500);
        let start = Instant::now();
        assert_eq!(s.records_fitting(start), 0, "no batch planned");
        s.begin_batch(start);
        assert_eq!(
            s.records_fitting(start),
            usize::MAX,
            "no estimate: the deadline only"
        );
        assert_eq!(s.records_fitting(start + 1000 * MS), 0, "the deadline");
        s.record_processed(100 * MS);
        s.begin_batch(start);
        assert_eq!(s.records_fitting(start), 10);
        assert_eq!(s.records_fitting(start + 850 * MS), 1);
        assert_eq!(s.records_fitting(start + 901 * MS), 0);
        assert_eq!(
            s.should_stop(start + 901 * MS),
            s.records_fitting(start + 901 * MS) == 0
        );
    }

    #[test]
    fn invalid_parameters_name_the_setting() {
        let err = BatchSizer::new(Duration::ZERO, 0.5, 10).unwrap_err();
        assert_eq!(err.setting(), Some("max.poll.interval.ms"));
        for factor in [0.0, 1.0, -1.0, f64::NAN] {
            let err = BatchSizer::new(Duration::from_secs(1), factor, 10).unwrap_err();
            assert_eq!(err.setting(), Some("batch.safety.factor"));
        }
        let err = BatchSizer::new(Duration::from_secs(1), 0.5, 0).unwrap_err();
        assert_eq!(err.setting(), Some("max.poll.records"));
    }

    #[test]
    fn from_config_uses_the_consumer_settings() {
        let config = ConsumerConfig::builder()
            .bootstrap_servers(["127.0.0.1:9092"])
            .group_id("g")
            .session_timeout(Duration::from_millis(2000))
            .heartbeat_interval(Duration::from_millis(500))
            .max_poll_interval(Duration::from_millis(2000))
            .max_poll_records(200)
            .batch_safety_factor(0.25)
            .build()
            .unwrap();
        let s = BatchSizer::from_config(&config);
        assert_eq!(s.budget(), Duration::from_millis(500));
        assert_eq!(s.max_records(), 200);
        assert_eq!(s.next_size(), 200);
    }
}
