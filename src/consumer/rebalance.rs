//! Routes the group's rebalance events into the guard. This is where the commit ordering of a
//! handoff lives, read it top to bottom:
//!
//! - **revoked**: drop the fetched records nobody was handed yet; let the guard fence every
//!   revoked partition, flush, and commit `last + 1` synchronously *in the generation that owned
//!   the partitions*; forget their positions.
//! - **lost**: the heartbeat thread already fenced them through the lost hook; drop their records
//!   and positions. Nothing is flushed or committed.
//! - **assigned**: activate in the guard, then start from the committed offset (or
//!   `auto.offset.reset`).
//!
//! Each runs on the poll thread, inside `GroupMember::poll`, before the next record is handed out.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::group::{GroupContext, LostReason, RebalanceListener};
use crate::guard::{
    BoxError, CommitFailure, CommitOffset, FlushBatch, HandoffStage, RebalanceGuard, StormStatus,
};
use crate::wire::{self, Record};
use crate::TopicPartition;

use super::config::ConsumerConfig;
use super::error::ConsumerError;
use super::positions::{PendingPositions, Start};

/// The guard as the consumer uses it: idempotency keys are bytes, nothing stays buffered in it.
pub(crate) type Guard = RebalanceGuard<Vec<u8>, ()>;

/// Called when the guard reports a rebalance storm.
pub type StormHook = Box<dyn FnMut(&StormStatus) + Send>;

/// Fetch state of the partitions this member owns: where to fetch next, and the records fetched
/// but not handed out yet.
#[derive(Default)]
pub(crate) struct Intake {
    pub(crate) positions: HashMap<TopicPartition, i64>,
    /// Owned partitions still waiting for a starting position (not fetched until found).
    pub(crate) pending: PendingPositions,
    pub(crate) buffers: HashMap<TopicPartition, VecDeque<Record>>,
    pub(crate) paused: HashMap<TopicPartition, Instant>,
    /// Fetch errors per owned partition (the fetch is retried at the same offset).
    pub(crate) fetch_errors: HashMap<TopicPartition, FetchErrors>,
}

/// The fetch errors of one partition: a partition refetching the same failing offset makes no
/// progress, and that must be visible at the default log level and in its stats.
#[derive(Debug, Clone)]
pub(crate) struct FetchErrors {
    /// Errors since the partition was assigned.
    pub(crate) count: u64,
    /// The last one, as text.
    pub(crate) last: String,
    /// When a warning was last logged, and how many errors were not logged since.
    warned_at: Instant,
    unlogged: u64,
}

/// Why 10 s: a partition failing on every fetch would otherwise log several lines a second.
const FETCH_ERROR_LOG_INTERVAL: Duration = Duration::from_secs(10);

impl Intake {
    /// Counts a fetch error of `tp` and warns about it, at most once per
    /// [`FETCH_ERROR_LOG_INTERVAL`] per partition (saying how many were not logged).
    pub(crate) fn fetch_failed(&mut self, tp: &TopicPartition, error: &wire::WireError) {
        let now = Instant::now();
        let at = self.positions.get(tp).copied().unwrap_or(-1);
        match self.fetch_errors.get_mut(tp) {
            None => {
                log::warn!("{tp}: fetch at offset {at} failed: {error}; retrying");
                self.fetch_errors.insert(
                    tp.clone(),
                    FetchErrors {
                        count: 1,
                        last: error.to_string(),
                        warned_at: now,
                        unlogged: 0,
                    },
                );
            }
            Some(errors) => {
                errors.count += 1;
                errors.last = error.to_string();
                if now.saturating_duration_since(errors.warned_at) >= FETCH_ERROR_LOG_INTERVAL {
                    log::warn!(
                        "{tp}: fetch at offset {at} failed: {error}; retrying ({} more failure(s) \
                         since the last warning, {} in all)",
                        errors.unlogged,
                        errors.count
                    );
                    errors.warned_at = now;
                    errors.unlogged = 0;
                } else {
                    errors.unlogged += 1;
                }
            }
        }
    }

    /// Forgets a partition that is no longer ours: its unhanded records are never processed.
    fn drop_partition(&mut self, tp: &TopicPartition) -> usize {
        self.positions.remove(tp);
        self.fetch_errors.remove(tp);
        self.pending.remove(tp);
        self.paused.remove(tp);
        self.buffers.remove(tp).map_or(0, |b| b.len())
    }

    /// Looks up the starting positions that are due (see [`PendingPositions`]) and starts
    /// fetching the partitions found. A reset that moves a partition backwards (the log was
    /// truncated below what this member read) moves the guard's monotonicity mark with it, or
    /// every record read again would be refused as a regression.
    pub(crate) fn resolve_positions(
        &mut self,
        client: &mut wire::Client,
        config: &ConsumerConfig,
        guard: &Guard,
    ) -> Result<(), ConsumerError> {
        let (found, error) = self.pending.resolve(client, config, Instant::now());
        for (tp, offset, start) in found {
            if start == Start::Reset {
                if let Some(previous) = guard.reposition(&tp, offset) {
                    log::warn!(
                        "{tp}: fetch position reset from {previous} back to {offset} \
                         (auto.offset.reset={}); records from {offset} on are read again",
                        config.auto_offset_reset().as_str()
                    );
                }
            }
            self.buffers.remove(&tp);
            self.positions.insert(tp, offset);
        }
        error.map_or(Ok(()), Err)
    }
}

/// One revoked partition whose handoff failed: its flush or its commit. The records processed
/// since its last commit will be processed again by its next owner; an operator (or a checker)
/// uses this to explain those repeats.
#[derive(Debug, Clone)]
pub struct HandoffFailure {
    /// The partition.
    pub partition: TopicPartition,
    /// The generation the revocation committed in.
    pub generation_id: i32,
    /// Whether the flush or the commit failed.
    pub stage: HandoffStage,
    /// The error, as text.
    pub error: String,
}

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

/// The listener handed to `GroupMember::poll`: borrows the consumer's parts for one call.
pub(crate) struct Bridge<'a> {
    pub(crate) config: &'a ConsumerConfig,
    pub(crate) guard: &'a Arc<Guard>,
    pub(crate) intake: &'a mut Intake,
    pub(crate) storm_hook: &'a mut Option<StormHook>,
    pub(crate) counters: &'a mut RebalanceCounters,
    /// A failure the poll must report once the group call returns.
    pub(crate) error: Option<ConsumerError>,
    /// Set while worker threads process records: how a revocation waits for them.
    pub(crate) drain: Option<Drain>,
    /// Failed handoffs, kept for the application to report.
    pub(crate) handoff_failures: &'a mut Vec<HandoffFailure>,
}

/// How a revocation drains work handed to worker threads: workers signal every finished record
/// on `finished`, and the drain waits for the partition's started records up to `timeout`.
#[derive(Clone)]
pub(crate) struct Drain {
    pub(crate) finished: Arc<(Mutex<u64>, Condvar)>,
    pub(crate) timeout: Duration,
}

impl Drain {
    /// Cancels the partition's queued, unstarted records, then waits for its started ones until
    /// `deadline`: one deadline for the whole revocation, so k hung handlers cost one
    /// `revoke.drain.timeout.ms`, not k. A drain that times out fails the flush: nothing is
    /// committed for the partition, and the late completions are refused as stale when they
    /// come.
    pub(crate) fn drain(
        &self,
        guard: &Guard,
        partition: &TopicPartition,
        deadline: Instant,
    ) -> Result<(), BoxError> {
        let cancelled = guard.cancel_unstarted(partition);
        if cancelled > 0 {
            log::info!("{partition}: {cancelled} queued record(s) cancelled by the revocation");
        }
        let (lock, signal) = &*self.finished;
        let mut seen = lock.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let running = guard.unfinished(partition);
            if running == 0 {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(format!(
                    "{running} record(s) still running after revoke.drain.timeout.ms ({:?})",
                    self.timeout
                )
                .into());
            }
            seen = signal
                .wait_timeout(seen, deadline - now)
                .map(|(s, _)| s)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }
}

impl Bridge<'_> {
    fn storm(&mut self, status: Option<StormStatus>) {
        if let (Some(status), Some(hook)) = (status, self.storm_hook.as_mut()) {
            if status.is_storm() {
                hook(&status);
            }
        }
    }
}

/// Turns the group's per-partition commit results into the guard's failure type.
pub(crate) fn commit_through(
    commit: impl FnOnce(
        &[wire::OffsetCommitEntry],
    ) -> Result<crate::group::member::CommitResults, crate::group::CommitError>,
    offsets: &[CommitOffset],
) -> Result<(), CommitFailure> {
    let request: Vec<wire::OffsetCommitEntry> = offsets
        .iter()
        .map(|o| wire::OffsetCommitEntry {
            tp: o.partition.clone(),
            offset: o.next_offset,
            leader_epoch: None,
            metadata: None,
        })
        .collect();
    let results = commit(&request).map_err(|e| CommitFailure::Request(Box::new(e)))?;
    let refused = refused_partitions(offsets, results);
    if refused.is_empty() {
        Ok(())
    } else {
        Err(CommitFailure::Partitions(refused))
    }
}

/// The partitions of a commit that did not succeed: those the broker refused, and those its
/// answer did not mention at all (absent is not done).
fn refused_partitions(
    asked: &[CommitOffset],
    results: crate::group::member::CommitResults,
) -> Vec<(TopicPartition, BoxError)> {
    let answered: HashSet<TopicPartition> = results.iter().map(|(tp, _)| tp.clone()).collect();
    let mut refused: Vec<(TopicPartition, BoxError)> = results
        .into_iter()
        .filter_map(|(tp, r)| r.err().map(|e| (tp, Box::new(e) as BoxError)))
        .collect();
    for offset in asked {
        if !answered.contains(&offset.partition) {
            refused.push((
                offset.partition.clone(),
                "absent from the OffsetCommit response".into(),
            ));
        }
    }
    refused
}

impl RebalanceListener for Bridge<'_> {
    fn on_partitions_revoked(&mut self, ctx: &mut GroupContext<'_>, partitions: &[TopicPartition]) {
        // Fetched records of these partitions were never handed out: they are the next owner's.
        for tp in partitions {
            self.counters.dropped_records += self.intake.drop_partition(tp) as u64;
        }
        let generation = ctx.generation_id();
        let guard = self.guard;
        let drain = self.drain.as_ref();
        let drain_deadline = drain.map(|d| Instant::now() + d.timeout);
        let mut flush = |batch: FlushBatch<()>| -> Result<(), BoxError> {
            match drain {
                // Synchronous loop: every admitted record was completed or rewound before the
                // poll that brought this revocation; anything still pending never finished, so
                // the partition must not be committed past it.
                None => match batch.buffered.len() + batch.running.len() {
                    0 => Ok(()),
                    unfinished => {
                        Err(format!("{unfinished} admitted record(s) never finished").into())
                    }
                },
                // Worker threads: cancel what has not started, wait (boundedly) for the rest.
                Some(drain) => drain.drain(
                    guard,
                    &batch.partition,
                    drain_deadline.unwrap_or_else(Instant::now),
                ),
            }
        };
        let mut commit = |offsets: &[CommitOffset]| commit_through(|o| ctx.commit(o), offsets);
        match self.guard.revoke(partitions, &mut flush, Some(&mut commit)) {
            Ok(report) => {
                for c in &report.committed {
                    log::info!(
                        "{}: revoked, committed next offset {} in generation {generation}",
                        c.partition,
                        c.next_offset
                    );
                }
                self.storm(report.storm);
            }
            Err(error) => {
                // Log the attempted positions, the generation and the error; never
                // pretend a commit can undo work. The next owner resumes from the last durable
                // position and the idempotent sink absorbs the repeat.
                self.counters.failed_handoffs += 1;
                log::error!("revocation in generation {generation}: {error}");
                for failure in &error.failures {
                    self.handoff_failures.push(HandoffFailure {
                        partition: failure.partition.clone(),
                        generation_id: generation,
                        stage: failure.stage,
                        error: failure.error.to_string(),
                    });
                }
            }
        }
        self.counters.revoked += partitions.len() as u64;
    }

    fn on_partitions_assigned(
        &mut self,
        ctx: &mut GroupContext<'_>,
        partitions: &[TopicPartition],
    ) {
        let status = self.guard.assign(partitions);
        self.storm(status);
        self.counters.assigned += partitions.len() as u64;
        if partitions.is_empty() {
            return;
        }
        log::info!(
            "assigned {} partition(s) in generation {}",
            partitions.len(),
            ctx.generation_id()
        );
        self.intake
            .pending
            .add(partitions, Start::Committed, Instant::now());
        if let Err(error) = self
            .intake
            .resolve_positions(ctx.client(), self.config, self.guard)
        {
            self.error = Some(error);
        }
    }

    fn on_partitions_lost(&mut self, partitions: &[TopicPartition], reason: &LostReason) {
        // Already fenced by the lost hook when the loss was detected; this is idempotent.
        let report = self.guard.lost(partitions);
        for tp in partitions {
            self.counters.dropped_records += self.intake.drop_partition(tp) as u64;
        }
        self.counters.lost += partitions.len() as u64;
        log::warn!(
            "lost {} partition(s) ({reason:?}) without commit; {} admitted record(s) discarded",
            partitions.len(),
            report.discarded
        );
        self.storm(report.storm);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_absent_from_the_commit_answer_is_not_committed() {
        let tp = |p| TopicPartition::new("orders", p);
        let asked = [
            CommitOffset {
                partition: tp(0),
                next_offset: 5,
            },
            CommitOffset {
                partition: tp(1),
                next_offset: 9,
            },
        ];
        let refused = refused_partitions(&asked, vec![(tp(0), Ok(()))]);
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].0, tp(1));
        assert!(refused[0].1.to_string().contains("absent"));
    }
}
