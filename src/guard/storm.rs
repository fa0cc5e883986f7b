//! Rebalance storm detection.
//!
//! A storm is usually poll starvation feeding on itself: a slow handler gets the member
//! evicted, its batch is reassigned and reprocessed, the external API gets slower, more members
//! are evicted. The detector returns a value so the caller can degrade (pause intake, widen quotes,
//! page someone) rather than scrape logs.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// What the detector saw in its window, returned whenever a rebalance is recorded or asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StormStatus {
    /// Rebalances counted within the window ending now.
    pub rebalances_in_window: usize,
    /// The count at which the guard calls it a storm.
    pub threshold: usize,
    /// The window length.
    pub window: Duration,
}

impl StormStatus {
    /// True when the rebalance rate reached the threshold: time to degrade.
    pub fn is_storm(&self) -> bool {
        self.threshold > 0 && self.rebalances_in_window >= self.threshold
    }
}

/// Counts rebalances in a sliding window, pairing a revoke with the assign that follows it.
#[derive(Debug)]
pub(crate) struct StormDetector {
    window: Duration,
    threshold: usize,
    events: VecDeque<Instant>,
    /// A revoke or loss was counted and its assign has not arrived yet. Under the eager protocol a
    /// single rebalance fires both callbacks; counting both would double the apparent rate.
    awaiting_assign: bool,
    total: u64,
}

impl StormDetector {
    pub(crate) fn new(window: Duration, threshold: usize) -> Self {
        Self {
            window,
            threshold,
            events: VecDeque::new(),
            awaiting_assign: false,
            total: 0,
        }
    }

    /// A revoke or a loss starts a rebalance.
    pub(crate) fn record_revoke(&mut self, now: Instant) {
        if !self.awaiting_assign {
            self.count(now);
            self.awaiting_assign = true;
        }
    }

    /// An assign either completes the rebalance a revoke started, or is a rebalance of its own.
    pub(crate) fn record_assign(&mut self, now: Instant) {
        if self.awaiting_assign {
            self.awaiting_assign = false;
        } else {
            self.count(now);
        }
    }

    pub(crate) fn status(&mut self, now: Instant) -> StormStatus {
        self.expire(now);
        StormStatus {
            rebalances_in_window: self.events.len(),
            threshold: self.threshold,
            window: self.window,
        }
    }

    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    fn count(&mut self, now: Instant) {
        self.total += 1;
        self.events.push_back(now);
        self.expire(now);
    }

    fn expire(&mut self, now: Instant) {
        while let Some(&oldest) = self.events.front() {
            if now.saturating_duration_since(oldest) >= self.window {
                self.events.pop_front();
            } else {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revoke_then_assign_counts_once() {
        let start = Instant::now();
        let mut detector = StormDetector::new(Duration::from_secs(60), 3);
        detector.record_revoke(start);
        detector.record_assign(start);
        assert_eq!(detector.status(start).rebalances_in_window, 1);
        assert_eq!(detector.total(), 1);
        // A lone assign (first join, or a cooperative round that only adds) counts by itself.
        detector.record_assign(start);
        assert_eq!(detector.status(start).rebalances_in_window, 2);
    }

    #[test]
    fn window_slides_on_the_given_instants() {
        let start = Instant::now();
        let mut detector = StormDetector::new(Duration::from_secs(10), 2);
        detector.record_assign(start);
        detector.record_assign(start + Duration::from_secs(5));
        assert!(detector.status(start + Duration::from_secs(5)).is_storm());
        assert!(!detector.status(start + Duration::from_secs(10)).is_storm());
        assert_eq!(
            detector
                .status(start + Duration::from_secs(16))
                .rebalances_in_window,
            0
        );
    }
}
