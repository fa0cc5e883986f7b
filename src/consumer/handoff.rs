//! The handoff driver: applies the membership's changes to the consumer on the poll thread,
//! before the next record is handed out. With the guard's `handoff.rs` (the steps and their
//! states) this is where the commit ordering of a revocation reads top to bottom:
//!
//! - **revoke** ([`Driver::hand_off`]): drop the fetched records nobody was handed yet; drain
//!   the guard's fence token (taken when the revocation was decided); the one state check reads
//!   `last + 1`; commit it synchronously *in the generation that owned the partitions*; the
//!   guard hands the partitions back; the membership is acknowledged (its next request may go).
//! - **lost**: the lost hook fenced them when the loss was detected; drop their records and
//!   positions. Nothing is flushed or committed.
//! - **assign**: activate in the guard; raise each partition's fencing token (`fencing.rs`:
//!   read, commit one more as the identity assigned, only then is the partition fetched); the
//!   listener's `on_assigned`; then start from the committed offset (or `auto.offset.reset`).
//!
//! Besides the driver this file owns what a handoff leaves behind: the [`HandoffFailure`]s the
//! application collects, and the [`Drain`] through which a revocation waits for worker threads.
//! The commit's translation between the guard's positions and the group's OffsetCommit (one
//! definition for every commit) is the group's: `group/commit.rs`.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::group::{
    commit_entries, commit_outcome, Change, CommitKind, FenceHook, LostHook, LostReason,
    MemberIdentity, Membership,
};
use crate::guard::{AwaitingCommit, BoxError, Fenced, FlushBatch, StormStatus};
use crate::metrics::{self, ConsumerMetrics};
use crate::wire::ErrorChain;
use crate::TopicPartition;

use super::config::ConsumerConfig;
use super::context::Guard;
use super::error::{ConsumerError, HandoffFailure};
use super::fencing;
use super::intake::Intake;
use super::listener::{
    listener_error, AssignedContext, ConsumerRebalanceListener, RevokedPartition,
};
use super::stats::RebalanceCounters;
use super::transactions::{self, SharedTransactional};

/// Called when the guard reports a rebalance storm.
pub type StormHook = Box<dyn FnMut(&StormStatus) + Send>;

/// What the handoff driver keeps across rebalances, owned by the consumer and lent to each
/// [`Driver`].
pub(crate) struct Handoffs {
    /// Called when the guard reports a rebalance storm.
    pub(crate) storm_hook: Option<StormHook>,
    /// What rebalances did, for the stats line.
    pub(crate) counters: RebalanceCounters,
    /// Set while worker threads process records: how a revocation waits for them.
    pub(crate) drain: Option<Drain>,
    /// Failed handoffs, kept for the application to report.
    pub(crate) failures: Vec<HandoffFailure>,
    /// The application's rebalance listener, if it set one.
    pub(crate) listener: Option<Box<dyn ConsumerRebalanceListener>>,
    /// The rebalance signals of the `metrics` feature (nothing without it).
    pub(crate) metrics: ConsumerMetrics,
    /// Set by `with_transactions`: every commit travels in the producer's transactions.
    pub(crate) transactional: Option<SharedTransactional>,
    /// When owned partitions whose fencing token could not be raised are tried again.
    pub(crate) fencing_retry: fencing::RetryClock,
}

impl Handoffs {
    /// Nothing handed off yet, in `group`.
    pub(crate) fn new(group: &str) -> Self {
        Handoffs {
            storm_hook: None,
            counters: RebalanceCounters::default(),
            drain: None,
            failures: Vec::new(),
            listener: None,
            metrics: ConsumerMetrics::new(group),
            transactional: None,
            fencing_retry: fencing::RetryClock::default(),
        }
    }
}

/// Applies the membership's changes to the consumer's parts, borrowed for one call: the one
/// driver of every handoff.
pub(crate) struct Driver<'a> {
    pub(crate) config: &'a ConsumerConfig,
    pub(crate) guard: &'a Guard,
    pub(crate) intake: &'a mut Intake,
    pub(crate) handoffs: &'a mut Handoffs,
    pub(crate) member: &'a mut dyn Membership,
}

/// How a revocation drains work handed to worker threads: workers signal every finished record
/// on `finished`, and the drain waits for the partition's started records up to `timeout`.
#[derive(Clone)]
pub(crate) struct Drain {
    pub(crate) finished: Arc<Finished>,
    pub(crate) timeout: Duration,
}

/// The workers' word that a record finished (or a worker exited), for the threads that wait for
/// that: a revocation's drain and the end of a run.
///
/// Why not a bare condition variable: a notification is a system call even when nobody waits
/// (std's futex condition variable does not count its waiters), and workers signal after every
/// record, while someone waits only during a revocation or a stop. So waiters count themselves,
/// under the same lock as their check, and a signal wakes only when one does: a record costs an
/// uncontended lock here, no system call.
#[derive(Default)]
pub(crate) struct Finished {
    /// Threads waiting now. Changed only under this lock, held from a waiter's check to its
    /// wait, so a signal (which takes the lock after its change) cannot fall between the two.
    waiting: Mutex<usize>,
    signal: Condvar,
}

impl Finished {
    /// Something finished: wakes the waiters, if any. Call it after the change they check.
    pub(crate) fn signal(&self) {
        let waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        if *waiting > 0 {
            self.signal.notify_all();
        }
    }

    /// Waits until `done()` holds (true) or `deadline` passed (false). `done` is checked under
    /// the lock, first at once and again after every signal.
    pub(crate) fn wait_until(&self, deadline: Instant, mut done: impl FnMut() -> bool) -> bool {
        let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if done() {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            *waiting += 1;
            waiting = self
                .signal
                .wait_timeout(waiting, deadline - now)
                .map(|(w, _)| w)
                .unwrap_or_else(|p| p.into_inner().0);
            *waiting -= 1;
        }
    }
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
        let mut running = 0;
        if self.finished.wait_until(deadline, || {
            running = guard.unfinished(partition);
            running == 0
        }) {
            return Ok(());
        }
        Err(format!(
            "{running} record(s) still running after revoke.drain.timeout.ms ({:?})",
            self.timeout
        )
        .into())
    }
}

impl Driver<'_> {
    fn storm(&mut self, status: Option<StormStatus>) {
        if let (Some(status), Some(hook)) = (status, self.handoffs.storm_hook.as_mut()) {
            if status.is_storm() {
                hook(&status);
            }
        }
    }
}

/// The lost hook the membership calls, on whichever thread detects a loss (the heartbeat
/// thread, a refused commit): the guard fences the partitions at that moment, with the reason,
/// before the poll thread can hand out another of their records. Nothing is committed.
pub(crate) fn lost_hook(guard: &Arc<Guard>) -> LostHook {
    let guard = guard.clone();
    Arc::new(move |partitions: &[TopicPartition], why: &LostReason| {
        guard.lost_because(partitions, why);
    })
}

/// The fence hook the membership calls where it decides a revocation (a cooperative round's
/// SyncGroup answer, KIP-848's reconciliation, on the membership thread): the partitions stop
/// there and then, and the token travels with the change to [`Driver::hand_off`] at the poll
/// thread's next batch boundary.
pub(crate) fn fence_hook(guard: &Arc<Guard>, handoffs: &Handoffs) -> FenceHook {
    let guard = guard.clone();
    let metrics = handoffs.metrics.clone();
    Arc::new(move |partitions: &[TopicPartition]| {
        metrics.fenced();
        guard.fence(partitions)
    })
}

impl Driver<'_> {
    /// Applies the membership's changes until it is stable or `timeout` passed (an eager
    /// round runs inside), each before the next record is handed out. The time is the
    /// library's: `max.poll.interval.ms` does not run meanwhile.
    pub(crate) fn drive(&mut self, timeout: Duration) -> Result<(), ConsumerError> {
        self.member.enter_poll();
        let deadline = Instant::now().checked_add(timeout);
        let result = loop {
            let left = deadline.map_or(Duration::MAX, |d| {
                d.saturating_duration_since(Instant::now())
            });
            let applied = match self.member.next_change(left) {
                Ok(None) => break Ok(()),
                Ok(Some(change)) => self.apply(change),
                Err(error) => Err(error.into()),
            };
            if let Err(error) = applied {
                break Err(error);
            }
        };
        if result.is_ok() {
            self.retry_fencing();
        }
        self.member.leave_poll();
        result
    }

    /// Raises the fencing token of `partitions` (assigned as `identity`, none yet): the ones
    /// accepted are fetched from now on, the others stay held and are tried again later.
    fn raise_tokens(&mut self, identity: &MemberIdentity, partitions: &[TopicPartition]) {
        let raised = fencing::raise(
            &mut *self.member,
            self.guard,
            self.config.group_id(),
            identity,
            partitions,
        );
        for (tp, _) in &raised.fenced {
            self.intake.fenced(tp);
        }
        for (tp, why) in &raised.failed {
            log::warn!("{tp}: no fencing token yet, not fetched: {why}");
        }
        if raised.failed.is_empty() {
            self.handoffs.fencing_retry.settled();
        } else {
            let config = self.config;
            self.handoffs
                .fencing_retry
                .failed(Instant::now(), |n| config.retry_backoff_after(n));
        }
    }

    /// Tries again to raise the token of the owned partitions that have none, as the member's
    /// identity now, once their backoff passed. A partition no longer owned leaves the wait.
    fn retry_fencing(&mut self) {
        let waiting = self.intake.unfenced();
        if waiting.is_empty() || !self.handoffs.fencing_retry.due(Instant::now()) {
            return;
        }
        let mut owned = Vec::with_capacity(waiting.len());
        for tp in waiting {
            // Given a token meanwhile, or not owned any more: nothing to wait for.
            match self.guard.fencing_token(&tp) {
                Some(0) => owned.push(tp),
                _ => self.intake.fenced(&tp),
            }
        }
        let identity = self.member.identity();
        self.raise_tokens(&identity, &owned);
    }

    /// Hands back everything the member still owns, in the current generation, before it
    /// leaves the group.
    pub(crate) fn close(&mut self) -> Result<(), ConsumerError> {
        let mut first_error = None;
        for change in self.member.closing() {
            if let Err(error) = self.apply(change) {
                first_error.get_or_insert(error);
            }
        }
        self.member.leave()?;
        first_error.map_or(Ok(()), Err)
    }

    /// Applies one change: a revocation's handoff, an assignment, a loss; then hands the
    /// change back to the membership as its acknowledgement (a loss has none).
    pub(crate) fn apply(&mut self, mut change: Change) -> Result<(), ConsumerError> {
        let applied = match &mut change {
            Change::Revoke {
                identity,
                partitions,
                fenced,
                ..
            } => self.hand_off(identity, partitions, fenced.take()),
            Change::Assign {
                identity,
                partitions,
                ..
            } => self.start(identity, partitions),
            Change::Lost { partitions, reason } => return self.lose(partitions, reason),
        };
        // The hand-back each protocol needs: the cooperative follow-up JoinGroup, the KIP-848
        // heartbeat that acknowledges the revocation, the eager JoinGroup.
        self.member.acknowledge(change);
        applied
    }

    /// The handoff of revoked partitions, in order: the fetched records nobody was handed go
    /// back, the guard's fence (taken when the revocation was decided) is drained, the one state
    /// check reads the positions, the commit goes out synchronously in the generation that owned
    /// the partitions, and the guard hands them back with the commit's answer. The listener's
    /// `on_revoked` runs between the state check and the commit; its error is returned after
    /// the handoff completed.
    fn hand_off(
        &mut self,
        identity: &MemberIdentity,
        partitions: &[TopicPartition],
        fenced: Option<Fenced>,
    ) -> Result<(), ConsumerError> {
        let began = metrics::Timer::start();
        // 1. Fetched records of these partitions were never handed out: they are the next
        //    owner's.
        for tp in partitions {
            self.handoffs.counters.dropped_records += self.intake.drop_partition(tp) as u64;
        }
        // 2. The fence, taken where the revocation was decided (or now, when none was).
        let fenced = fenced.unwrap_or_else(|| self.guard.fence(partitions));
        // 3. The drain: every admitted record finishes (or the flush fails and nothing of the
        //    partition is committed).
        let draining = metrics::Timer::start();
        let drained = self.guard.drain(fenced, &mut self.flush());
        self.handoffs.metrics.drained(draining);
        // 4. The state check: a partition lost since its fence leaves the handoff here.
        let awaiting = self.guard.prepare_commit(drained);
        //    The application's listener: drained, not committed, not acknowledged.
        let listened = self.tell_revoked(partitions, &awaiting);
        // 5. The commit of `last + 1`, synchronously, as the identity that owns the partitions.
        let generation = identity.generation_id;
        let mut rewound = Ok(());
        let answer = match self.handoffs.transactional.clone() {
            // Exactly once: the open transaction holds outputs of the kept partitions too, so
            // their progress commits in it with the revoked partitions' positions.
            Some(transactional) => {
                let parts = transactions::HandoffParts {
                    member: &mut *self.member,
                    intake: &mut *self.intake,
                    config: self.config,
                };
                let answers = transactions::commit_handoff(
                    &transactional,
                    self.guard,
                    parts,
                    identity,
                    partitions,
                    &awaiting,
                );
                if let Some((request, outcome)) = answers.kept {
                    self.guard.commit_answered(request, &outcome);
                }
                rewound = answers.rewound;
                answers.revoked
            }
            None => (!awaiting.offsets().is_empty()).then(|| {
                let offsets = awaiting.offsets();
                commit_outcome(
                    offsets,
                    self.member
                        .commit_as(identity, &commit_entries(offsets), CommitKind::Handoff),
                )
            }),
        };
        // 6. The guard hands the partitions back with the answer.
        let handed = self.guard.hand_back(awaiting, answer);
        self.handoffs.counters.revoked += partitions.len() as u64;
        self.handoffs.metrics.handed_back(partitions, began);
        match handed.result {
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
                // Log the attempted positions, the generation and the error; never pretend a
                // commit can undo work. The next owner resumes from the last durable position
                // and the idempotent sink absorbs the repeat.
                self.handoffs.counters.failed_handoffs += 1;
                log::error!(
                    "revocation in generation {generation}: {}",
                    ErrorChain(&error)
                );
                self.handoffs
                    .failures
                    .extend(error.failures.into_iter().map(|failure| HandoffFailure {
                        generation_id: generation,
                        failure,
                    }));
            }
        }
        rewound.and(listened)
    }

    /// The listener's `on_revoked`, with each partition's last finished offset and the
    /// position the commit about to be sent carries.
    fn tell_revoked(
        &mut self,
        partitions: &[TopicPartition],
        awaiting: &AwaitingCommit,
    ) -> Result<(), ConsumerError> {
        let Some(listener) = self.handoffs.listener.as_mut() else {
            return Ok(());
        };
        let snapshot = self.guard.snapshot();
        let revoked: Vec<RevokedPartition> = partitions
            .iter()
            .map(|tp| RevokedPartition {
                tp: tp.clone(),
                last_finished: snapshot
                    .partitions
                    .iter()
                    .find(|p| &p.tp == tp)
                    .and_then(|p| p.contiguous_completed),
                committing: awaiting
                    .offsets()
                    .iter()
                    .find(|o| &o.tp == tp)
                    .map(|o| o.next_offset),
            })
            .collect();
        listener
            .on_revoked(&revoked)
            .map_err(|error| listener_error("on_revoked", error))
    }

    /// How the drain waits for a revoked partition's admitted work. Synchronous loop: every
    /// admitted record was completed or rewound before the poll that brought the revocation;
    /// anything still pending never finished, so the partition must not be committed past it.
    /// Worker threads: cancel what has not started, wait (boundedly, one deadline for the whole
    /// revocation) for the rest.
    fn flush(&self) -> impl FnMut(FlushBatch<()>) -> Result<(), BoxError> + '_ {
        let drain = self.handoffs.drain.as_ref();
        let deadline = drain.map(|d| Instant::now() + d.timeout);
        let guard = self.guard;
        move |batch: FlushBatch<()>| match drain {
            None => match batch.buffered.len() + batch.running.len() {
                0 => Ok(()),
                unfinished => Err(format!("{unfinished} admitted record(s) never finished").into()),
            },
            Some(drain) => drain.drain(guard, &batch.tp, deadline.unwrap_or_else(Instant::now)),
        }
    }

    /// Newly assigned partitions: active in the guard, their fencing token raised, then
    /// started from the committed offset (or `auto.offset.reset`).
    fn start(
        &mut self,
        identity: &MemberIdentity,
        partitions: &[TopicPartition],
    ) -> Result<(), ConsumerError> {
        let status = self.guard.assign(partitions);
        self.storm(status);
        self.handoffs.counters.assigned += partitions.len() as u64;
        self.handoffs.metrics.assigned(partitions.len());
        if partitions.is_empty() {
            return Ok(());
        }
        log::info!(
            "assigned {} partition(s) in generation {}",
            partitions.len(),
            identity.generation_id
        );
        self.intake.assigned(partitions, Instant::now());
        // The token before anything else of the assignment: the listener sees it, and no
        // record is fetched without it.
        if self.member.fences_assignments() {
            let fresh: Vec<TopicPartition> = partitions
                .iter()
                .filter(|tp| self.guard.fencing_token(tp) == Some(0))
                .cloned()
                .collect();
            self.intake.hold_unfenced(&fresh);
            self.raise_tokens(identity, &fresh);
        }
        // The listener sees them owned and not started: a seek there is where reading starts.
        let listened = match self.handoffs.listener.as_mut() {
            None => Ok(()),
            Some(listener) => {
                let mut context = AssignedContext {
                    guard: self.guard,
                    intake: self.intake,
                };
                listener
                    .on_assigned(partitions, &mut context)
                    .map_err(|error| listener_error("on_assigned", error))
            }
        };
        self.intake
            .resolve_positions(self.member.records(), self.config, self.guard)?;
        listened
    }

    /// Partitions taken away without a handoff: fenced already by the lost hook when the loss
    /// was detected, which also discarded their admitted work and counted the rebalance; their
    /// fetched records and positions are dropped here. Nothing is flushed or committed; the
    /// listener's `on_lost` is told after.
    fn lose(
        &mut self,
        partitions: &[TopicPartition],
        reason: &LostReason,
    ) -> Result<(), ConsumerError> {
        for tp in partitions {
            self.handoffs.counters.dropped_records += self.intake.drop_partition(tp) as u64;
        }
        self.handoffs.counters.lost += partitions.len() as u64;
        self.handoffs.metrics.lost(partitions);
        log::warn!(
            "lost {} partition(s) ({reason}) without commit",
            partitions.len()
        );
        if let Some(transactional) = self.handoffs.transactional.clone() {
            // Nothing commits at a loss: the open transaction's outputs never become visible,
            // and the partitions still in hand go back to what committed, under one lock.
            let mut open = transactions::lock(&transactional);
            open.abort("partitions lost");
            transactions::rewind_if_aborted(
                &mut open,
                self.guard,
                self.intake,
                &mut *self.member,
                self.config,
            )?;
        }
        self.storm(Some(self.guard.storm_status()));
        match self.handoffs.listener.as_mut() {
            Some(listener) => listener
                .on_lost(partitions)
                .map_err(|error| listener_error("on_lost", error)),
            None => Ok(()),
        }
    }
}
