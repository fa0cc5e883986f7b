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
//!
//! Besides the three callbacks this file owns what a handoff leaves behind: the
//! [`HandoffFailure`]s the application collects, the [`Drain`] through which a revocation waits
//! for worker threads, and [`commit_through`], the one way any commit (a revocation's or the
//! application's) reaches the group.

use crate::partition::PartitionSet;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::group::{GroupContext, LostReason, RebalanceListener};
use crate::guard::{BoxError, CommitFailure, CommitOffset, FlushBatch, HandoffStage, StormStatus};
use crate::wire;
use crate::TopicPartition;

use super::config::ConsumerConfig;
use super::context::Guard;
use super::error::ConsumerError;
use super::intake::Intake;
use super::stats::RebalanceCounters;

/// Called when the guard reports a rebalance storm.
pub type StormHook = Box<dyn FnMut(&StormStatus) + Send>;

/// One revoked partition whose handoff failed: its flush or its commit. The records processed
/// since its last commit will be processed again by its next owner; an operator (or a checker)
/// uses this to explain those repeats.
#[derive(Debug, Clone)]
pub struct HandoffFailure {
    /// The partition.
    pub tp: TopicPartition,
    /// The generation the revocation committed in.
    pub generation_id: i32,
    /// Whether the flush or the commit failed.
    pub stage: HandoffStage,
    /// The error, as text.
    pub error: String,
}

/// What the bridge keeps across rebalances, owned by the consumer and lent to each [`Bridge`].
#[derive(Default)]
pub(crate) struct Handoffs {
    /// Called when the guard reports a rebalance storm.
    pub(crate) storm_hook: Option<StormHook>,
    /// What rebalances did, for the stats line.
    pub(crate) counters: RebalanceCounters,
    /// Set while worker threads process records: how a revocation waits for them.
    pub(crate) drain: Option<Drain>,
    /// Failed handoffs, kept for the application to report.
    pub(crate) failures: Vec<HandoffFailure>,
}

/// The listener handed to `GroupMember::poll` and `GroupMember::close`: borrows the consumer's
/// parts for one call.
pub(crate) struct Bridge<'a> {
    config: &'a ConsumerConfig,
    guard: &'a Guard,
    intake: &'a mut Intake,
    handoffs: &'a mut Handoffs,
    /// A failure the poll must report once the group call returns.
    error: Option<ConsumerError>,
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

impl<'a> Bridge<'a> {
    /// A bridge for one group call.
    pub(crate) fn new(
        config: &'a ConsumerConfig,
        guard: &'a Guard,
        intake: &'a mut Intake,
        handoffs: &'a mut Handoffs,
    ) -> Self {
        Bridge {
            config,
            guard,
            intake,
            handoffs,
            error: None,
        }
    }

    /// The failure a callback could not return through the group (a starting position that
    /// cannot be found with `auto.offset.reset=none`), to report once the group call is over.
    pub(crate) fn into_error(self) -> Option<ConsumerError> {
        self.error
    }

    fn storm(&mut self, status: Option<StormStatus>) {
        if let (Some(status), Some(hook)) = (status, self.handoffs.storm_hook.as_mut()) {
            if status.is_storm() {
                hook(&status);
            }
        }
    }
}

/// Sends a commit of `offsets` through `commit` (the group's synchronous commit) and turns the
/// group's per-partition results into the guard's failure type.
pub(crate) fn commit_through(
    commit: impl FnOnce(
        &[wire::OffsetCommitEntry],
    ) -> Result<crate::group::member::CommitResults, crate::group::CommitError>,
    offsets: &[CommitOffset],
) -> Result<(), CommitFailure> {
    commit_outcome(offsets, commit(&commit_entries(offsets)))
}

/// The OffsetCommit entries of the guard's positions.
pub(crate) fn commit_entries(offsets: &[CommitOffset]) -> Vec<wire::OffsetCommitEntry> {
    offsets
        .iter()
        .map(|o| wire::OffsetCommitEntry {
            tp: o.tp.clone(),
            offset: o.next_offset,
            leader_epoch: None,
            metadata: o.metadata.clone(),
        })
        .collect()
}

/// The group's answer to a commit of `offsets`, in the guard's terms: every partition accepted,
/// or the request failed, or these partitions were refused (absent from the answer counts as
/// refused).
pub(crate) fn commit_outcome(
    offsets: &[CommitOffset],
    answer: Result<crate::group::member::CommitResults, crate::group::CommitError>,
) -> Result<(), CommitFailure> {
    let results = answer.map_err(|e| CommitFailure::Request(Box::new(e)))?;
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
    let answered: PartitionSet = results.iter().map(|(tp, _)| tp.clone()).collect();
    let mut refused: Vec<(TopicPartition, BoxError)> = results
        .into_iter()
        .filter_map(|(tp, r)| r.err().map(|e| (tp, Box::new(e) as BoxError)))
        .collect();
    for offset in asked {
        if !answered.contains(&offset.tp) {
            refused.push((
                offset.tp.clone(),
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
            self.handoffs.counters.dropped_records += self.intake.drop_partition(tp) as u64;
        }
        let generation = ctx.generation_id();
        let guard = self.guard;
        let drain = self.handoffs.drain.as_ref();
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
                    &batch.tp,
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
                        c.tp,
                        c.next_offset
                    );
                }
                self.storm(report.storm);
            }
            Err(error) => {
                // Log the attempted positions, the generation and the error; never
                // pretend a commit can undo work. The next owner resumes from the last durable
                // position and the idempotent sink absorbs the repeat.
                self.handoffs.counters.failed_handoffs += 1;
                log::error!("revocation in generation {generation}: {error}");
                for failure in &error.failures {
                    self.handoffs.failures.push(HandoffFailure {
                        tp: failure.tp.clone(),
                        generation_id: generation,
                        stage: failure.stage,
                        error: failure.error.to_string(),
                    });
                }
            }
        }
        self.handoffs.counters.revoked += partitions.len() as u64;
    }

    fn on_partitions_assigned(
        &mut self,
        ctx: &mut GroupContext<'_>,
        partitions: &[TopicPartition],
    ) {
        let status = self.guard.assign(partitions);
        self.storm(status);
        self.handoffs.counters.assigned += partitions.len() as u64;
        if partitions.is_empty() {
            return;
        }
        log::info!(
            "assigned {} partition(s) in generation {}",
            partitions.len(),
            ctx.generation_id()
        );
        self.intake.assigned(partitions, Instant::now());
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
            self.handoffs.counters.dropped_records += self.intake.drop_partition(tp) as u64;
        }
        self.handoffs.counters.lost += partitions.len() as u64;
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
                tp: tp(0),
                next_offset: 5,
                metadata: None,
            },
            CommitOffset {
                tp: tp(1),
                next_offset: 9,
                metadata: None,
            },
        ];
        let refused = refused_partitions(&asked, vec![(tp(0), Ok(()))]);
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].0, tp(1));
        assert!(refused[0].1.to_string().contains("absent"));
    }
}
