//! Per-partition operational signals: aggregate lag does not reveal a worker
//! finishing revoked work, these do.
//!
//! Also the [`RebalanceCounters`] the handoff driver and the batch count into, so the stats line can say
//! what rebalances cost.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::basics::partition::PartitionMap;
use crate::guard::{PartitionSnapshot, StormStatus};
use crate::metrics::ConsumerMetrics;
use crate::wire::FetchStats;
use crate::TopicPartition;

use super::context::Guard;

/// Counters of what rebalances did, for the stats line.
#[derive(Debug, Default, Clone)]
pub struct RebalanceCounters {
    /// Partitions assigned, over all rebalances.
    pub assigned: u64,
    /// Partitions revoked with a handoff.
    pub revoked: u64,
    /// Partitions lost without a handoff.
    pub lost: u64,
    /// Revocations whose flush or commit failed for some partition.
    pub failed_handoffs: u64,
    /// Fetched records dropped unprocessed because their partition left.
    pub dropped_records: u64,
}

/// One partition's signals.
#[derive(Debug, Clone)]
pub struct PartitionStats {
    /// The guard's view: epoch, owner status, highest admitted, contiguous completed, last
    /// committed next-offset, in-flight count and oldest age, duplicates and regressions refused,
    /// work completed after revocation, rebalance count.
    pub guard: PartitionSnapshot,
    /// Where the next fetch starts (the highest fetched offset + 1), if owned.
    pub next_fetch_offset: Option<i64>,
    /// Records fetched and not handed out yet.
    pub buffered: usize,
    /// How long the partition has been paused, if it is.
    pub paused_for: Option<Duration>,
    /// Why the partition has no fetch position yet, with the failed attempts so far: owned,
    /// but not fetched until a lookup succeeds (it is retried on later polls).
    pub position_error: Option<(String, u32)>,
    /// Fetch errors since the partition was assigned, with the last one: a partition that keeps
    /// failing at the same offset makes no progress.
    pub fetch_errors: Option<(u64, String)>,
    /// The high watermark (the offset after the last replicated record) the partition's last
    /// fetch answer reported; `None` before the first one.
    pub high_watermark: Option<i64>,
    /// The last stable offset (the first offset of a transaction still open) of the same answer.
    pub last_stable_offset: Option<i64>,
    /// Records between the committed position and the log end: what this group has not durably
    /// finished (the LAG column of `kafka-consumer-groups.sh`). The log end is the high
    /// watermark, or the last stable offset under `isolation.level=read_committed`; the
    /// committed position is this member's last commit, or where reading started (the group's
    /// committed offset, else `auto.offset.reset`) before its first. `None` until both are
    /// known.
    pub lag: Option<i64>,
    /// Records between where the next fetch starts and the log end: how far fetching trails.
    /// Java's `records-lag` (the log end minus the next record the application gets) lies
    /// between this and [`lag`](Self::lag): it counts the buffered records, not the ones
    /// processed and not committed yet.
    pub fetch_lag: Option<i64>,
}

impl PartitionStats {
    /// Fills the log-end fields and both lags from `marks` (the fetch answers' watermarks) and
    /// the guard's committed position: one definition for the consumer's own stats and for a
    /// [`StatsHandle`](super::StatsHandle) snapshot taken on another thread.
    pub(crate) fn with_marks(mut self, marks: &SharedMarks) -> Self {
        let Some(mark) = marks.get(&self.guard.tp) else {
            return self;
        };
        self.high_watermark = mark.high_watermark;
        self.last_stable_offset = mark.last_stable_offset;
        let committed = self.guard.last_committed.or(mark.started_at);
        self.lag = mark.end.zip(committed).map(|(end, at)| end - at);
        self.fetch_lag = mark
            .end
            .zip(self.next_fetch_offset)
            .map(|(end, at)| end - at);
        self
    }
}

/// What fetch answers said about one partition's log end, and where this member started
/// reading it: the inputs of its lag.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Marks {
    high_watermark: Option<i64>,
    last_stable_offset: Option<i64>,
    /// The log end lag is measured against: the high watermark, or the last stable offset
    /// under `read_committed` (what the consumer can see).
    end: Option<i64>,
    started_at: Option<i64>,
}

/// Every owned partition's [`Marks`], written by the intake as fetch answers arrive (one lock
/// per fetch) and read by the stats, on the poll thread or another one.
#[derive(Debug, Clone, Default)]
pub(crate) struct SharedMarks(Arc<Mutex<PartitionMap<Marks>>>);

impl SharedMarks {
    fn lock(&self) -> std::sync::MutexGuard<'_, PartitionMap<Marks>> {
        // A poisoned lock still holds valid marks (each write is one assignment).
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One fetch answer's watermarks, as `(partition, high watermark, last stable offset)`;
    /// unknown ones (-1, a failed partition) leave the previous marks.
    pub(crate) fn fetched<'a>(
        &self,
        answers: impl IntoIterator<Item = (&'a TopicPartition, i64, i64)>,
        read_committed: bool,
    ) {
        let mut marks = self.lock();
        for (tp, high, stable) in answers {
            if high < 0 {
                continue;
            }
            let mark = marks.entry(tp.clone()).or_default();
            mark.high_watermark = Some(high);
            mark.last_stable_offset = (stable >= 0).then_some(stable);
            mark.end = if read_committed {
                mark.last_stable_offset
            } else {
                Some(high)
            };
        }
    }

    /// Reading `tp` starts at `offset` (its committed offset or the reset position).
    pub(crate) fn started(&self, tp: &TopicPartition, offset: i64) {
        self.lock().entry(tp.clone()).or_default().started_at = Some(offset);
    }

    /// `tp` is no longer this member's: its marks would only go stale.
    pub(crate) fn forget(&self, tp: &TopicPartition) {
        self.lock().remove(tp);
    }

    fn get(&self, tp: &TopicPartition) -> Option<Marks> {
        self.lock().get(tp).copied()
    }
}

/// A snapshot of the consumer.
#[derive(Debug, Clone)]
pub struct ConsumerStats {
    /// The current group generation (-1 outside one).
    pub generation_id: i32,
    /// Every partition this consumer has owned.
    pub partitions: Vec<PartitionStats>,
    /// Rebalances seen (a revoke and its assign count once).
    pub rebalances: u64,
    /// The storm detector's view.
    pub storm: StormStatus,
    /// What rebalances did.
    pub counters: RebalanceCounters,
    /// Offset commits refused outside revocations.
    pub commits_refused: u64,
    /// Retries of failed records scheduled (`processing.retries`).
    pub retries: u64,
    /// Records the dead-letter callback took after their retries ran out.
    pub dead_lettered: u64,
    /// The size the next batch will have.
    pub next_batch_size: usize,
    /// The measured processing time per record.
    pub per_record_estimate: Option<Duration>,
    /// Where fetched bytes came from: per broker, and how many partitions are read from a
    /// preferred read replica (`client.rack`, KIP-392) rather than their leader.
    pub fetch: FetchStats,
    /// Transactions committed by `run_transactional` (0 outside the transactional mode).
    pub transactions_committed: u64,
    /// Transactions aborted (a loss, a refusal by the group, a record not written): their
    /// records were done again.
    pub transactions_aborted: u64,
}

impl ConsumerStats {
    /// Sets every partition's lag gauges (`metrics` feature; nothing without it).
    pub(crate) fn export_lags(&self, metrics: &ConsumerMetrics) {
        for p in &self.partitions {
            metrics.lags(&p.guard.tp, p.guard.status, p.lag, p.fetch_lag);
        }
    }
}

impl fmt::Display for ConsumerStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "stats gen={} rebalances={} storm={}/{} assigned={} revoked={} lost={} \
             failed_handoffs={} dropped={} commits_refused={} retries={} dead_lettered={} \
             next_batch={} per_record={:?}",
            self.generation_id,
            self.rebalances,
            self.storm.rebalances_in_window,
            self.storm.threshold,
            self.counters.assigned,
            self.counters.revoked,
            self.counters.lost,
            self.counters.failed_handoffs,
            self.counters.dropped_records,
            self.commits_refused,
            self.retries,
            self.dead_lettered,
            self.next_batch_size,
            self.per_record_estimate,
        )?;
        write!(
            f,
            " from_replicas={} replica_fallbacks={} fetched_bytes=",
            self.fetch.from_replicas, self.fetch.fallbacks
        )?;
        self.fetch.write_bytes(f)?;
        for p in &self.partitions {
            let g = &p.guard;
            write!(
                f,
                "\n  {} {} epoch={} token={} fetched_next={:?} admitted={:?} completed={:?} committed={:?} \
                 in_flight={} oldest={:?} buffered={} paused={:?} dups={} regressions={} \
                 after_revoke={} skipped_by_map={} rebalances={} high_watermark={:?} \
                 last_stable={:?} lag={:?} fetch_lag={:?}",
                g.tp,
                g.status,
                g.epoch,
                g.fencing_token,
                p.next_fetch_offset,
                g.highest_admitted,
                g.contiguous_completed,
                g.last_committed,
                g.in_flight,
                g.oldest_in_flight_age,
                p.buffered,
                p.paused_for,
                g.duplicates_rejected,
                g.regressions_rejected,
                g.completed_after_revocation,
                g.skipped_completed,
                g.rebalances,
                p.high_watermark,
                p.last_stable_offset,
                p.lag,
                p.fetch_lag,
            )?;
            if let Some((error, attempts)) = &p.position_error {
                write!(f, " position_error=({attempts} attempts) {error}")?;
            }
            if let Some((count, last)) = &p.fetch_errors {
                write!(f, " fetch_errors={count} (last: {last})")?;
            }
        }
        Ok(())
    }
}

/// How often the poll loop publishes its stats for [`StatsHandle`]s at most: often enough for a
/// scrape or a watchdog, rare enough that building them (a pass over every partition) never
/// shows in the loop's cost.
pub(crate) const PUBLISH_INTERVAL: Duration = Duration::from_millis(100);

/// Reads a consumer's [`ConsumerStats`] from any thread (a metrics endpoint, a watchdog, a
/// health check) while the consumer is busy in `run`, `run_with_workers` or a batch; what
/// Java's `KafkaConsumer::metrics()` and librdkafka's statistics callback are for.
///
/// The guard's part of each partition (epochs, admitted, completed, committed, in flight), the
/// high watermarks and the lags are read live; what only the poll thread knows (fetch
/// positions, buffered records, pauses, errors, counters, the batch size) is as of its last
/// poll, published at most every 100 ms.
#[derive(Clone)]
pub struct StatsHandle {
    guard: Arc<Guard>,
    marks: SharedMarks,
    published: Arc<Mutex<ConsumerStats>>,
}

impl StatsHandle {
    /// The consumer's stats now (see the type's documentation for how fresh each part is).
    pub fn snapshot(&self) -> ConsumerStats {
        let mut stats = self
            .published
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let live = self.guard.snapshot();
        let mut polled: HashMap<TopicPartition, PartitionStats> = stats
            .partitions
            .drain(..)
            .map(|p| (p.guard.tp.clone(), p))
            .collect();
        stats.partitions = live
            .partitions
            .into_iter()
            .map(|guard| {
                let intake = polled.remove(&guard.tp);
                PartitionStats {
                    next_fetch_offset: intake.as_ref().and_then(|p| p.next_fetch_offset),
                    buffered: intake.as_ref().map_or(0, |p| p.buffered),
                    paused_for: intake.as_ref().and_then(|p| p.paused_for),
                    position_error: intake.as_ref().and_then(|p| p.position_error.clone()),
                    fetch_errors: intake.and_then(|p| p.fetch_errors),
                    guard,
                    high_watermark: None,
                    last_stable_offset: None,
                    lag: None,
                    fetch_lag: None,
                }
                .with_marks(&self.marks)
            })
            .collect();
        stats.rebalances = live.rebalances;
        stats.storm = live.storm;
        stats
    }
}

impl fmt::Debug for StatsHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StatsHandle").finish_non_exhaustive()
    }
}

/// The poll loop's side of the [`StatsHandle`]s: the stats it published last, and when the
/// next publication is due.
pub(crate) struct StatsPublisher {
    published: Arc<Mutex<ConsumerStats>>,
    next: Instant,
}

impl StatsPublisher {
    /// A publisher whose first publication is due at once (the first poll); until then handles
    /// read a consumer outside any generation, with nothing counted yet.
    pub(crate) fn new(storm: StormStatus) -> Self {
        let empty = ConsumerStats {
            generation_id: -1,
            partitions: Vec::new(),
            rebalances: 0,
            storm,
            counters: RebalanceCounters::default(),
            commits_refused: 0,
            retries: 0,
            dead_lettered: 0,
            next_batch_size: 0,
            per_record_estimate: None,
            fetch: FetchStats::default(),
            transactions_committed: 0,
            transactions_aborted: 0,
        };
        StatsPublisher {
            published: Arc::new(Mutex::new(empty)),
            next: Instant::now(),
        }
    }

    /// True when the stats should be published again at `now`.
    #[inline]
    pub(crate) fn due(&self, now: Instant) -> bool {
        now >= self.next
    }

    /// Publishes `stats`, built at `now`, for every handle.
    pub(crate) fn publish(&mut self, stats: ConsumerStats, now: Instant) {
        self.next = now + PUBLISH_INTERVAL;
        *self
            .published
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = stats;
    }

    /// A handle over the consumer's guard and intake marks.
    pub(crate) fn handle(&self, guard: Arc<Guard>, marks: SharedMarks) -> StatsHandle {
        StatsHandle {
            guard,
            marks,
            published: self.published.clone(),
        }
    }
}
