//! The consumer's operational signals through the `metrics` crate's facade (cargo feature
//! `metrics`): lag per partition, commit latency and failures, rebalances and how long their
//! steps took, guard refusals by kind, fetched bytes and records. Whatever recorder the
//! application installs (a Prometheus exporter, StatsD, its own) receives them; without one
//! they cost a few atomic loads.
//!
//! Every name starts with `rebalance_guard_`; the labels are `group`, `topic`, `partition` and a
//! small fixed set of `kind`/`reason` values, never an offset or a member id, so the number of
//! series stays that of the partitions. Install the recorder before `Consumer::subscribe`
//! (the facade hands out no-op handles before that) and call [`describe`] once for the help
//! texts and units. Java users know these as the consumer's `metrics()` (`records-lag`,
//! `commit-latency-avg`, `rebalance-latency-avg`, `fetch-size-avg`); librdkafka's as its
//! statistics JSON (`consumer_lag`, `rebalance_cnt`).
//!
//! Without the feature the same hooks exist as empty inline functions over zero-sized types:
//! nothing of this is compiled in, the callers' lines stay the same.

#[cfg(feature = "metrics")]
pub(crate) use on::*;

#[cfg(not(feature = "metrics"))]
pub(crate) use off::*;

/// The metric names, one constant each, for dashboards and tests.
#[cfg(feature = "metrics")]
pub mod names {
    /// Gauge per `group`/`topic`/`partition`: the log end (high watermark, or the last stable
    /// offset under `read_committed`) minus the committed position, as `PartitionStats::lag`.
    /// Set while the partition is owned, at most every 100 ms.
    pub const LAG: &str = "rebalance_guard_lag";
    /// Gauge per `group`/`topic`/`partition`: the log end minus the next fetch position, as
    /// `PartitionStats::fetch_lag` (Java's `records-lag` lies between the two).
    pub const FETCH_LAG: &str = "rebalance_guard_fetch_lag";
    /// Gauge per `group`/`topic`/`partition`: 1 while this consumer owns the partition, 0 once
    /// it was revoked or lost (its lag gauges then keep their last value; filter on this).
    pub const OWNED: &str = "rebalance_guard_partition_owned";
    /// Histogram per `group`/`kind` (`application`, `handoff`, `paced`), in seconds: one
    /// OffsetCommit's round trip to the coordinator.
    pub const COMMIT_SECONDS: &str = "rebalance_guard_commit_seconds";
    /// Counter per `group`/`kind`: commits that failed or that the coordinator refused for some
    /// partition.
    pub const COMMIT_FAILURES: &str = "rebalance_guard_commit_failures_total";
    /// Counter per `group`: assignments received (each rebalance that ends in one counts once,
    /// as in the stats' `rebalances`).
    pub const REBALANCES: &str = "rebalance_guard_rebalances_total";
    /// Counter per `group`: partitions assigned, revoked with a handoff, lost without one.
    pub const PARTITIONS_ASSIGNED: &str = "rebalance_guard_partitions_assigned_total";
    /// See [`PARTITIONS_ASSIGNED`].
    pub const PARTITIONS_REVOKED: &str = "rebalance_guard_partitions_revoked_total";
    /// See [`PARTITIONS_ASSIGNED`].
    pub const PARTITIONS_LOST: &str = "rebalance_guard_partitions_lost_total";
    /// Histogram per `group`, in seconds: a revocation's handoff, from the fence (where the
    /// revocation was decided) to the hand-back after its commit: how long the next owner waits.
    pub const HANDOFF_SECONDS: &str = "rebalance_guard_handoff_seconds";
    /// Histogram per `group`, in seconds: the drain step of a handoff (the admitted work of the
    /// revoked partitions finishing, bounded by `revoke.drain.timeout.ms` with workers).
    pub const DRAIN_SECONDS: &str = "rebalance_guard_drain_seconds";
    /// Histogram per `group`, in seconds: from a revocation or a loss to the next assignment
    /// (the time the member processed less than it may again).
    pub const REBALANCE_SECONDS: &str = "rebalance_guard_rebalance_seconds";
    /// Counter per `group`/`topic`/`reason`: records the guard refused to hand out, by the
    /// refusal (`fenced`, `session_expired`, `already_completed`, `completed_map_full`,
    /// `seeked_while_running`, `already_admitted`, `duplicate`, `offset_regression`).
    pub const REFUSALS: &str = "rebalance_guard_refusals_total";
    /// Counter per `group`/`topic`: record data fetched, in bytes.
    pub const FETCH_BYTES: &str = "rebalance_guard_fetch_bytes_total";
    /// Counter per `group`/`topic`: records fetched, as their batch headers count them.
    pub const FETCH_RECORDS: &str = "rebalance_guard_fetch_records_total";
}

/// Registers the help text and unit of every signal with the installed recorder (call it once,
/// after installing the recorder; recorders that ignore descriptions lose nothing without it).
#[cfg(feature = "metrics")]
pub fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    use names::*;
    describe_gauge!(LAG, Unit::Count, "log end minus the committed position");
    describe_gauge!(
        FETCH_LAG,
        Unit::Count,
        "log end minus the next fetch position"
    );
    describe_gauge!(OWNED, "1 while this consumer owns the partition");
    describe_histogram!(COMMIT_SECONDS, Unit::Seconds, "offset commit round trip");
    describe_counter!(COMMIT_FAILURES, "offset commits failed or refused");
    describe_counter!(REBALANCES, "assignments received");
    describe_counter!(PARTITIONS_ASSIGNED, "partitions assigned");
    describe_counter!(PARTITIONS_REVOKED, "partitions revoked with a handoff");
    describe_counter!(PARTITIONS_LOST, "partitions lost without a handoff");
    describe_histogram!(HANDOFF_SECONDS, Unit::Seconds, "fence to hand-back");
    describe_histogram!(DRAIN_SECONDS, Unit::Seconds, "handoff drain");
    describe_histogram!(
        REBALANCE_SECONDS,
        Unit::Seconds,
        "revocation to next assignment"
    );
    describe_counter!(REFUSALS, "records the guard refused to hand out");
    describe_counter!(FETCH_BYTES, Unit::Bytes, "record data fetched");
    describe_counter!(FETCH_RECORDS, "records fetched");
}

#[cfg(feature = "metrics")]
mod on {
    use std::sync::{Arc, Mutex, PoisonError};
    use std::time::{Duration, Instant};

    use metrics::{counter, gauge, histogram};

    use super::names::*;
    use crate::group::commit::COMMIT_OBSERVER;
    use crate::group::CommitKind;
    use crate::guard::{AdmitError, OwnerStatus};
    use crate::TopicPartition;

    /// A start time, taken only when the feature is on.
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct Timer(Instant);

    impl Timer {
        #[inline]
        pub(crate) fn start() -> Self {
            Timer(Instant::now())
        }
    }

    /// One OffsetCommit was answered (or failed) after `took`: the group layer's
    /// [`CommitObserver`](crate::group::commit::CommitObserver), installed by
    /// [`ConsumerMetrics::new`].
    fn commit_answered(group: &str, kind: CommitKind, took: Duration, failed: bool) {
        let kind = match kind {
            CommitKind::Handoff => "handoff",
            CommitKind::Application => "application",
            CommitKind::Paced => "paced",
            CommitKind::Fencing => "fencing",
        };
        let labels = [("group", group.to_string()), ("kind", kind.to_string())];
        histogram!(COMMIT_SECONDS, &labels).record(took);
        if failed {
            counter!(COMMIT_FAILURES, &labels).increment(1);
        }
    }

    /// One fetch answer of `topic` brought `bytes` of record data holding `records` records.
    pub(crate) fn fetched(group: &str, topic: &Arc<str>, bytes: usize, records: usize) {
        let labels = [
            ("group", group.to_string()),
            ("topic", topic.as_ref().to_string()),
        ];
        counter!(FETCH_BYTES, &labels).increment(bytes as u64);
        counter!(FETCH_RECORDS, &labels).increment(records as u64);
    }

    /// The consumer's signals that need state between two events (when the fence was taken,
    /// when a revocation began) or its group's name.
    #[derive(Debug, Clone)]
    pub(crate) struct ConsumerMetrics {
        group: Arc<str>,
        /// When the earliest fence not handed back yet was taken (on the membership thread).
        fenced_at: Arc<Mutex<Option<Instant>>>,
        /// When the last revocation or loss happened, until the next assignment.
        unassigned_at: Option<Instant>,
    }

    impl ConsumerMetrics {
        pub(crate) fn new(group: &str) -> Self {
            COMMIT_OBSERVER.get_or_init(|| commit_answered);
            ConsumerMetrics {
                group: Arc::from(group),
                fenced_at: Arc::default(),
                unassigned_at: None,
            }
        }

        fn group(&self) -> [(&'static str, Arc<str>); 1] {
            [("group", self.group.clone())]
        }

        /// A fence was taken where a revocation was decided.
        pub(crate) fn fenced(&self) {
            let mut at = self
                .fenced_at
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            at.get_or_insert_with(Instant::now);
        }

        /// `partitions` were handed back; the handoff began at `began` (or at the fence before
        /// it).
        pub(crate) fn handed_back(&mut self, partitions: &[TopicPartition], began: Timer) {
            let fenced = self
                .fenced_at
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            let from = fenced.map_or(began.0, |at| at.min(began.0));
            histogram!(HANDOFF_SECONDS, &self.group()).record(from.elapsed());
            counter!(PARTITIONS_REVOKED, &self.group()).increment(partitions.len() as u64);
            self.unassigned_at.get_or_insert(from);
            self.disowned(partitions);
        }

        /// A handoff's drain, begun at `began`, is over.
        pub(crate) fn drained(&self, began: Timer) {
            histogram!(DRAIN_SECONDS, &self.group()).record(began.0.elapsed());
        }

        /// An assignment of `partitions` arrived.
        pub(crate) fn assigned(&mut self, partitions: usize) {
            counter!(REBALANCES, &self.group()).increment(1);
            counter!(PARTITIONS_ASSIGNED, &self.group()).increment(partitions as u64);
            if let Some(at) = self.unassigned_at.take() {
                histogram!(REBALANCE_SECONDS, &self.group()).record(at.elapsed());
            }
        }

        /// `partitions` were lost without a handoff (a fence not handed back yet is void: its
        /// change goes with the membership).
        pub(crate) fn lost(&mut self, partitions: &[TopicPartition]) {
            counter!(PARTITIONS_LOST, &self.group()).increment(partitions.len() as u64);
            self.disowned(partitions);
            self.fenced_at
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            self.unassigned_at.get_or_insert_with(Instant::now);
        }

        /// `partitions` are no longer this consumer's: their owned gauges drop to 0 at once
        /// (the stats are published only at the next poll).
        fn disowned(&self, partitions: &[TopicPartition]) {
            for tp in partitions {
                gauge!(OWNED, &self.partition_labels(tp)).set(0.0);
            }
        }

        fn partition_labels(&self, tp: &TopicPartition) -> [(&'static str, Arc<str>); 3] {
            [
                ("group", self.group.clone()),
                ("topic", tp.topic.clone()),
                ("partition", Arc::from(tp.partition.to_string())),
            ]
        }

        /// The guard refused a record of `tp`.
        pub(crate) fn refused(&self, tp: &TopicPartition, error: &AdmitError) {
            let reason = match error {
                AdmitError::Fenced { .. } => "fenced",
                AdmitError::SessionExpired { .. } => "session_expired",
                AdmitError::AlreadyCompleted { .. } => "already_completed",
                AdmitError::CompletedMapFull { .. } => "completed_map_full",
                AdmitError::SeekedWhileRunning { .. } => "seeked_while_running",
                AdmitError::AlreadyAdmitted { .. } => "already_admitted",
                AdmitError::Duplicate { .. } => "duplicate",
                AdmitError::OffsetRegression { .. } => "offset_regression",
            };
            let labels = [
                ("group", self.group.clone()),
                ("topic", tp.topic.clone()),
                ("reason", Arc::from(reason)),
            ];
            counter!(REFUSALS, &labels).increment(1);
        }

        /// One partition's lag gauges, as the stats were published: its lags are set while it
        /// is owned (`status`), left as they were after.
        pub(crate) fn lags(
            &self,
            tp: &TopicPartition,
            status: OwnerStatus,
            lag: Option<i64>,
            fetch_lag: Option<i64>,
        ) {
            let labels = self.partition_labels(tp);
            let owned = status == OwnerStatus::Owned;
            gauge!(OWNED, &labels).set(if owned { 1.0 } else { 0.0 });
            if !owned {
                return;
            }
            if let Some(lag) = lag {
                gauge!(LAG, &labels).set(lag as f64);
            }
            if let Some(lag) = fetch_lag {
                gauge!(FETCH_LAG, &labels).set(lag as f64);
            }
        }
    }
}

#[cfg(not(feature = "metrics"))]
mod off {
    //! The same hooks as `on`, empty: callers need no `cfg` of their own.

    use std::sync::Arc;

    use crate::guard::{AdmitError, OwnerStatus};
    use crate::TopicPartition;

    #[derive(Debug, Clone, Copy)]
    pub(crate) struct Timer;

    impl Timer {
        #[inline(always)]
        pub(crate) fn start() -> Self {
            Timer
        }
    }

    #[inline(always)]
    pub(crate) fn fetched(_: &str, _: &Arc<str>, _: usize, _: usize) {}

    #[derive(Debug, Clone)]
    pub(crate) struct ConsumerMetrics;

    impl ConsumerMetrics {
        #[inline(always)]
        pub(crate) fn new(_: &str) -> Self {
            ConsumerMetrics
        }
        #[inline(always)]
        pub(crate) fn fenced(&self) {}
        #[inline(always)]
        pub(crate) fn handed_back(&mut self, _: &[TopicPartition], _: Timer) {}
        #[inline(always)]
        pub(crate) fn drained(&self, _: Timer) {}
        #[inline(always)]
        pub(crate) fn assigned(&mut self, _: usize) {}
        #[inline(always)]
        pub(crate) fn lost(&mut self, _: &[TopicPartition]) {}
        #[inline(always)]
        pub(crate) fn refused(&self, _: &TopicPartition, _: &AdmitError) {}
        #[inline(always)]
        pub(crate) fn lags(
            &self,
            _: &TopicPartition,
            _: OwnerStatus,
            _: Option<i64>,
            _: Option<i64>,
        ) {
        }
    }
}
