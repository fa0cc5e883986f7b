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

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::group::{GroupContext, LostReason, RebalanceListener};
use crate::guard::{
    BoxError, CommitFailure, CommitOffset, FlushBatch, HandoffStage, RebalanceGuard, StormStatus,
};
use crate::wire::{self, OffsetSpec, Record};
use crate::TopicPartition;

use super::config::{AutoOffsetReset, ConsumerConfig};
use super::error::ConsumerError;

/// The guard as the consumer uses it: idempotency keys are bytes, nothing stays buffered in it.
pub(crate) type Guard = RebalanceGuard<Vec<u8>, ()>;

/// Called when the guard reports a rebalance storm.
pub type StormHook = Box<dyn FnMut(&StormStatus) + Send>;

/// Fetch state of the partitions this member owns: where to fetch next, and the records fetched
/// but not handed out yet.
#[derive(Default)]
pub(crate) struct Intake {
    pub(crate) positions: HashMap<TopicPartition, i64>,
    pub(crate) buffers: HashMap<TopicPartition, VecDeque<Record>>,
    pub(crate) paused: HashMap<TopicPartition, Instant>,
}

impl Intake {
    /// Forgets a partition that is no longer ours: its unhanded records are never processed.
    fn drop_partition(&mut self, tp: &TopicPartition) -> usize {
        self.positions.remove(tp);
        self.paused.remove(tp);
        self.buffers.remove(tp).map_or(0, |b| b.len())
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
    /// Cancels the partition's queued, unstarted records, then waits for its started ones. A
    /// drain that times out fails the flush: nothing is committed for the partition, and the
    /// late completions are refused as stale when they come.
    pub(crate) fn drain(&self, guard: &Guard, partition: &TopicPartition) -> Result<(), BoxError> {
        let cancelled = guard.cancel_unstarted(partition);
        if cancelled > 0 {
            log::info!("{partition}: {cancelled} queued record(s) cancelled by the revocation");
        }
        let deadline = Instant::now() + self.timeout;
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

    /// The starting position of newly assigned partitions: their committed offsets, or
    /// `auto.offset.reset` for those without one.
    fn starting_positions(
        &mut self,
        ctx: &mut GroupContext<'_>,
        partitions: &[TopicPartition],
    ) -> Result<Vec<(TopicPartition, i64)>, ConsumerError> {
        let group_id = self.config.group_id().to_string();
        let committed = ctx.client().offset_fetch(&group_id, partitions)?;
        let mut positions = Vec::with_capacity(partitions.len());
        let mut missing = Vec::new();
        for c in committed {
            match c.offset {
                Some(offset) if offset >= 0 => positions.push((c.tp, offset)),
                _ => missing.push(c.tp),
            }
        }
        if !missing.is_empty() {
            positions.extend(reset_positions(ctx.client(), self.config, &missing)?);
        }
        Ok(positions)
    }
}

/// Positions chosen by `auto.offset.reset` for partitions without a usable offset.
pub(crate) fn reset_positions(
    client: &mut wire::Client,
    config: &ConsumerConfig,
    partitions: &[TopicPartition],
) -> Result<Vec<(TopicPartition, i64)>, ConsumerError> {
    let spec = match config.auto_offset_reset() {
        AutoOffsetReset::Earliest => OffsetSpec::Earliest,
        AutoOffsetReset::Latest => OffsetSpec::Latest,
        AutoOffsetReset::None => {
            return Err(ConsumerError::NoOffset {
                partition: partitions[0].clone(),
            })
        }
    };
    let offsets = client.list_offsets(partitions, spec, config.isolation_level())?;
    let mut out = Vec::with_capacity(partitions.len());
    for tp in partitions {
        match offsets.get(tp) {
            Some(&offset) => {
                log::info!(
                    "{tp}: no committed offset, starting at {offset} (auto.offset.reset={})",
                    config.auto_offset_reset().as_str()
                );
                out.push((tp.clone(), offset));
            }
            None => {
                return Err(ConsumerError::NoOffset {
                    partition: tp.clone(),
                })
            }
        }
    }
    Ok(out)
}

/// Turns the group's per-partition commit results into the guard's failure type.
pub(crate) fn commit_through(
    commit: impl FnOnce(
        &[wire::CommitOffset],
    ) -> Result<crate::group::member::CommitResults, crate::group::CommitError>,
    offsets: &[CommitOffset],
) -> Result<(), CommitFailure> {
    let request: Vec<wire::CommitOffset> = offsets
        .iter()
        .map(|o| wire::CommitOffset {
            tp: o.partition.clone(),
            offset: o.next_offset,
            leader_epoch: None,
            metadata: None,
        })
        .collect();
    let results = commit(&request).map_err(|e| CommitFailure::Request(Box::new(e)))?;
    let refused: Vec<(TopicPartition, BoxError)> = results
        .into_iter()
        .filter_map(|(tp, r)| r.err().map(|e| (tp, Box::new(e) as BoxError)))
        .collect();
    if refused.is_empty() {
        Ok(())
    } else {
        Err(CommitFailure::Partitions(refused))
    }
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
                Some(drain) => drain.drain(guard, &batch.partition),
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
                // Seed 004: log the attempted positions, the generation and the error; never
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
        match self.starting_positions(ctx, partitions) {
            Ok(positions) => {
                for (tp, offset) in positions {
                    log::info!(
                        "{tp}: assigned in generation {}, starting at offset {offset}",
                        ctx.generation_id()
                    );
                    self.intake.positions.insert(tp, offset);
                }
            }
            Err(error) => {
                log::error!("cannot start newly assigned partitions: {error}");
                self.error = Some(error);
            }
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
