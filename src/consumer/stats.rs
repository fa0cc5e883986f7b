//! Per-partition operational signals: aggregate lag does not reveal a worker
//! finishing revoked work, these do.
//!
//! Also the [`RebalanceCounters`] the handoff driver and the batch count into, so the stats line can say
//! what rebalances cost.

use std::fmt;
use std::time::Duration;

use crate::guard::{PartitionSnapshot, StormStatus};

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
        for p in &self.partitions {
            let g = &p.guard;
            write!(
                f,
                "\n  {} {} epoch={} fetched_next={:?} admitted={:?} completed={:?} committed={:?} \
                 in_flight={} oldest={:?} buffered={} paused={:?} dups={} regressions={} \
                 after_revoke={} skipped_by_map={} rebalances={}",
                g.tp,
                g.status,
                g.epoch,
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
                g.rebalances
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
