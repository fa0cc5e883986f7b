//! The handoff of revoked partitions, and the commits of owned ones: every step that decides
//! what is committed when ownership moves, in the order it happens, each step a value the next
//! one consumes (as a TLS handshake gives each of its states a type).
//!
//! ```text
//!             decision taken                 batch boundary (poll thread)
//!  Owned ──fence──▶ Fenced ──drain──▶ Drained ──prepare_commit──▶ AwaitingCommit ──hand_back──▶ HandedBack
//!                     │                  │          (explicit state check)  │ the commit is sent
//!                     └──lose──▶ Lost    └── a loss meanwhile: the check drops the partition,
//!                                            hand_back leaves it to the loss
//! ```
//!
//! 1. [`fence`](RebalanceGuard::fence), where the decision to revoke is taken (on the membership
//!    thread for a cooperative round or KIP-848, on the poll thread for an eager round or a
//!    close): the partitions stop admitting and no queued record of theirs starts; work already
//!    running may still finish and count. The [`Fenced`] token remembers each partition's epoch.
//! 2. [`drain`](RebalanceGuard::drain), on the thread that can wait for the work: the token is
//!    consumed, the buffered and running work of each partition still fenced under the token's
//!    epoch goes to the caller's flush, which returns once that work finished (or fails).
//! 3. [`prepare_commit`](RebalanceGuard::prepare_commit) on the [`Drained`] value: under each
//!    partition's lock, *the one state check*: a partition lost since it was fenced (its epoch
//!    moved) is dropped here; for the others the work is complete and the position `last + 1`
//!    (with the completed-offsets map) is read. What comes back is the request to send
//!    synchronously in the generation that owned the partitions, and an [`AwaitingCommit`].
//! 4. [`hand_back`](RebalanceGuard::hand_back) with the commit's answer: accepted positions
//!    become the last commit, every partition still fenced under its epoch is pruned and marked
//!    revoked; the [`HandedBack`] value says what was committed and what failed, for the
//!    membership's acknowledgement (the cooperative follow-up JoinGroup, the KIP-848 heartbeat
//!    that acknowledges the revocation, the eager JoinGroup).
//!
//! A loss takes the partitions away at any point ([`lost_because`](RebalanceGuard::lost_because)):
//! it moves their epoch, so no later step of the handoff touches them. Commits of owned partitions outside a handoff (the paced
//! commit on the commit thread, the application's `commit`) use the same two halves:
//! [`commit_request`](RebalanceGuard::commit_request) reads the positions with their epochs, and
//! [`commit_answered`](RebalanceGuard::commit_answered) records only what is still owned under
//! the epoch it was read at.

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Instant;

use super::error::{BoxError, CommitFailure, HandoffError, HandoffStage, PartitionFailure};
use super::types::{
    CommitFn, CommitOffset, CommitRequest, FlushBatch, FlushFn, LostReport, OwnerStatus,
    RevokeReport,
};
use super::{lock, RebalanceGuard};
use crate::TopicPartition;

/// Partitions fenced for a handoff, each with the epoch it was fenced at: created where the
/// decision to revoke is taken, consumed by [`RebalanceGuard::drain`] (or dropped with the
/// voided change when the membership ends first: the loss moved its epochs). Carrying the epochs
/// is what lets a later step tell "still the handoff I fenced" from "lost and perhaps assigned
/// back since".
#[must_use = "a fenced partition admits nothing until it is drained and handed back, or lost"]
#[derive(Debug, PartialEq, Eq)]
pub struct Fenced {
    partitions: Vec<(TopicPartition, u64)>,
}

impl Fenced {
    /// The fenced partitions (those that were owned here when the fence was taken).
    pub fn partitions(&self) -> Vec<TopicPartition> {
        self.partitions.iter().map(|(tp, _)| tp.clone()).collect()
    }

    /// True when none of the partitions was owned here: nothing to hand off.
    pub fn is_empty(&self) -> bool {
        self.partitions.is_empty()
    }

    /// The token of a fence that found nothing to fence.
    pub fn none() -> Self {
        Fenced {
            partitions: Vec::new(),
        }
    }
}

/// One partition along the handoff: its epoch at the fence and whether its flush succeeded.
#[derive(Debug)]
struct Step {
    tp: TopicPartition,
    epoch: u64,
    flushed: bool,
}

/// The work of fenced partitions went through the caller's flush: what remains is to read the
/// positions to commit ([`RebalanceGuard::prepare_commit`]).
#[must_use = "the drained partitions are handed back only through prepare_commit and hand_back"]
#[derive(Debug)]
pub struct Drained {
    steps: Vec<Step>,
    failures: Vec<PartitionFailure>,
    started: Instant,
}

/// The positions of a handoff, read and checked, waiting for the commit's answer.
#[must_use = "a handoff ends with hand_back, which prunes the partitions and reports the commit"]
#[derive(Debug)]
pub struct AwaitingCommit {
    steps: Vec<Step>,
    offsets: Vec<CommitOffset>,
    unchanged: Vec<TopicPartition>,
    failures: Vec<PartitionFailure>,
    started: Instant,
}

impl AwaitingCommit {
    /// The positions to commit (`last + 1` of each drained partition that moved), synchronously,
    /// in the generation that owned the partitions. Empty when nothing moved.
    pub fn offsets(&self) -> &[CommitOffset] {
        &self.offsets
    }

    /// Whether some partition's drain failed (its work did not all finish in time): a
    /// transaction holding outputs of that work must not commit.
    pub(crate) fn any_drain_failed(&self) -> bool {
        !self.failures.is_empty()
    }
}

/// The end of a handoff: the partitions are revoked in the guard, and this says what was
/// committed and what failed, for the membership's acknowledgement and for the log.
#[derive(Debug)]
pub struct HandedBack {
    /// The partitions handed back (the fenced ones not lost meanwhile).
    pub partitions: Vec<TopicPartition>,
    /// What the handoff committed, or the partitions whose flush or commit failed.
    pub result: Result<RevokeReport, HandoffError>,
}

/// A loss reason the guard did not get (the caller used [`RebalanceGuard::lost`]).
struct Unspecified;

impl fmt::Display for Unspecified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("reason not given")
    }
}

impl<K: Eq + Hash, M> RebalanceGuard<K, M> {
    /// Step 1, where the decision to revoke is taken: from now on no message of these owned
    /// partitions is admitted and no queued one starts, while work already running may still
    /// complete and count. Nothing is flushed, committed or pruned: [`drain`](Self::drain) does
    /// that with the returned token, on the thread that can wait.
    ///
    /// A partition fenced earlier and not drained yet is fenced again under the same epoch, so
    /// a token taken twice (a decision repeated) drains it once.
    pub fn fence(&self, partitions: &[TopicPartition]) -> Fenced {
        let mut fenced = Fenced::none();
        for tp in partitions {
            let Some(mut state) = self.partition(tp) else {
                continue;
            };
            let fenced_before = state.status == OwnerStatus::Draining && state.fenced_ahead;
            if state.status == OwnerStatus::Owned || fenced_before {
                state.status = OwnerStatus::Draining;
                state.fenced_ahead = true;
                fenced.partitions.push((tp.clone(), state.epoch));
            } else {
                log::debug!("{tp} revoked but not owned here: nothing to hand off");
            }
        }
        if !fenced.is_empty() {
            log::info!(
                "fenced {} partition(s) for a handoff",
                fenced.partitions.len()
            );
        }
        fenced
    }

    /// Step 2: the token's partitions, still fenced under its epochs, hand their buffered and
    /// running work to `flush`, one partition at a time, without any lock held (workers must be
    /// able to complete while the caller waits for them). A flush that fails means the
    /// partition's work did not all finish: it is not committed.
    pub fn drain(&self, fenced: Fenced, flush: &mut FlushFn<'_, M>) -> Drained {
        let started = self.clock.now();
        let mut batches = Vec::with_capacity(fenced.partitions.len());
        for (tp, epoch) in fenced.partitions {
            let Some(mut state) = self.partition(&tp) else {
                continue;
            };
            if state.epoch != epoch || state.status != OwnerStatus::Draining {
                log::info!("{tp} lost before its handoff was drained: nothing to hand off");
                continue;
            }
            state.fenced_ahead = false;
            // Running first: taking the buffered ones marks them running.
            let running = state.progress.running_offsets();
            let buffered = state.progress.take_buffered();
            batches.push((
                epoch,
                FlushBatch {
                    tp,
                    buffered,
                    running,
                },
            ));
        }
        lock(&self.storm).record_revoke(started);
        let mut drained = Drained {
            steps: Vec::with_capacity(batches.len()),
            failures: Vec::new(),
            started,
        };
        for (epoch, batch) in batches {
            let tp = batch.tp.clone();
            let flushed = match flush(batch) {
                Ok(()) => true,
                Err(error) => {
                    log::warn!("{tp}: flush failed during revocation, not committing: {error}");
                    drained.failures.push(PartitionFailure {
                        tp: tp.clone(),
                        stage: HandoffStage::Flush,
                        error: error.into(),
                    });
                    false
                }
            };
            drained.steps.push(Step { tp, epoch, flushed });
        }
        drained
    }

    /// Step 3, the one state check: under each partition's lock, a partition lost since it was
    /// fenced (its epoch moved, or it is no longer draining) leaves the handoff here, so nothing
    /// of it is sent; for each other partition whose flush succeeded the drained work counts as
    /// finished and the position `last + 1`, with its completed-offsets map, is read.
    pub fn prepare_commit(&self, drained: Drained) -> AwaitingCommit {
        let mut awaiting = AwaitingCommit {
            steps: Vec::with_capacity(drained.steps.len()),
            offsets: Vec::new(),
            unchanged: Vec::new(),
            failures: drained.failures,
            started: drained.started,
        };
        for step in drained.steps {
            let Some(mut state) = self.partition(&step.tp) else {
                continue;
            };
            if state.epoch != step.epoch || state.status != OwnerStatus::Draining {
                log::info!("{} lost during its handoff: not committed here", step.tp);
                continue;
            }
            if step.flushed {
                state.progress.complete_all();
                match state.commit_due(&step.tp, self.map_limit) {
                    Some(offset) => awaiting.offsets.push(offset),
                    None => awaiting.unchanged.push(step.tp.clone()),
                }
            }
            awaiting.steps.push(step);
        }
        awaiting
    }

    /// Step 4: records the commit's answer (`None` when no commit was sent: nothing moved, or
    /// the caller has no way to commit) and prunes every partition still fenced under its
    /// epoch: its pending work is dropped, it is revoked, and its epoch moves, so a lease of the
    /// handed-back assignment reads stale from here on.
    pub fn hand_back(
        &self,
        awaiting: AwaitingCommit,
        answer: Option<Result<(), CommitFailure>>,
    ) -> HandedBack {
        let AwaitingCommit {
            steps,
            offsets,
            unchanged,
            mut failures,
            started,
        } = awaiting;
        let mut committed = Vec::new();
        match answer {
            None if !offsets.is_empty() => log::warn!(
                "revoked {} partition(s) without a commit: progress fenced and drained but NOT \
                 committed; the next owner will reprocess it",
                offsets.len()
            ),
            None => {}
            Some(Ok(())) => committed = offsets,
            Some(Err(CommitFailure::Request(error))) => {
                log::warn!("revocation commit failed for every partition: {error}");
                let shared: Arc<dyn std::error::Error + Send + Sync> =
                    Arc::new(SharedFailure(error.to_string()));
                for offset in offsets {
                    failures.push(PartitionFailure {
                        tp: offset.tp,
                        stage: HandoffStage::Commit,
                        error: shared.clone(),
                    });
                }
            }
            Some(Err(CommitFailure::Partitions(refused))) => {
                let mut refused: HashMap<TopicPartition, BoxError> = refused.into_iter().collect();
                for offset in offsets {
                    match refused.remove(&offset.tp) {
                        Some(error) => failures.push(PartitionFailure {
                            tp: offset.tp,
                            stage: HandoffStage::Commit,
                            error: error.into(),
                        }),
                        None => committed.push(offset),
                    }
                }
            }
        }
        let mut partitions = Vec::with_capacity(steps.len());
        for step in &steps {
            let Some(mut state) = self.partition(&step.tp) else {
                continue;
            };
            if state.epoch != step.epoch || state.status != OwnerStatus::Draining {
                // Lost while the commit was in flight; the loss already pruned it.
                continue;
            }
            if let Some(offset) = committed.iter().find(|c| c.tp == step.tp) {
                state.committed(offset);
            }
            let discarded = state.progress.clear();
            state.status = OwnerStatus::Revoked;
            state.epoch += 1;
            state.rebalances += 1;
            log::info!(
                "{} revoked (epoch {}), committed {:?}",
                step.tp,
                state.epoch,
                state.last_committed
            );
            self.keys.forget_unfinished(discarded);
            partitions.push(step.tp.clone());
        }
        // The revocation was counted when the drain began; reported now it is done.
        let storm = self.storm_after(started, |_| {});
        let order = |tp: &TopicPartition| steps.iter().position(|s| &s.tp == tp);
        failures.sort_by_key(|f| order(&f.tp).unwrap_or(usize::MAX));
        let result = if failures.is_empty() {
            Ok(RevokeReport {
                committed,
                unchanged,
                storm,
            })
        } else {
            Err(HandoffError { failures })
        };
        HandedBack { partitions, result }
    }

    /// The whole handoff in one call, for a caller that decides, drains and commits on one
    /// thread: [`fence`](Self::fence), [`drain`](Self::drain),
    /// [`prepare_commit`](Self::prepare_commit), `commit` (which must be synchronous and carry
    /// the generation that owned the partitions; without it nothing is committed and a warning
    /// says so), [`hand_back`](Self::hand_back).
    ///
    /// Returns an [`HandoffError`] naming only the partitions whose flush or commit failed,
    /// after every revoked partition was fenced and pruned.
    pub fn revoke(
        &self,
        partitions: &[TopicPartition],
        flush: &mut FlushFn<'_, M>,
        commit: Option<&mut CommitFn<'_>>,
    ) -> Result<RevokeReport, HandoffError> {
        let fenced = self.fence(partitions);
        let awaiting = self.prepare_commit(self.drain(fenced, flush));
        let answer = match commit {
            Some(commit) if !awaiting.offsets().is_empty() => Some(commit(awaiting.offsets())),
            _ => None,
        };
        self.hand_back(awaiting, answer).result
    }

    /// Fences partitions taken away without a handoff, and discards their pending work; never
    /// flushes, never commits: another member may already own them, and a commit would at best
    /// be rejected and at worst overwrite the new owner's progress. The loss moves each
    /// partition's epoch, which also takes it out of any handoff under way (see the module's
    /// steps 3 and 4). `reason` goes into the log line.
    pub fn lost_because(
        &self,
        partitions: &[TopicPartition],
        reason: &dyn fmt::Display,
    ) -> LostReport {
        let now = self.clock.now();
        let mut report = LostReport::default();
        for tp in partitions {
            let Some(mut state) = self.partition(tp) else {
                continue;
            };
            if !matches!(state.status, OwnerStatus::Owned | OwnerStatus::Draining) {
                continue;
            }
            state.status = OwnerStatus::Lost;
            state.fenced_ahead = false;
            state.epoch += 1;
            state.rebalances += 1;
            let discarded = state.progress.clear();
            report.discarded += self.keys.forget_unfinished(discarded);
            report.fenced.push(tp.clone());
            log::warn!(
                "{tp} lost (epoch {}, {reason}): pending work discarded, nothing committed",
                state.epoch
            );
        }
        report.storm = self.storm_after(now, |storm| storm.record_revoke(now));
        report
    }

    /// [`lost_because`](Self::lost_because) without a reason.
    pub fn lost(&self, partitions: &[TopicPartition]) -> LostReport {
        self.lost_because(partitions, &Unspecified)
    }

    /// What a commit of the progress of every owned partition that moved since its last commit
    /// would carry now, or `None` when nothing moved. Each position and its map are read under
    /// the partition's own lock (rule 6), with the partition's epoch, so that the answer can be
    /// applied later, from any thread, only to the assignment it was made for.
    ///
    /// This is the first half of a commit outside a handoff (a paced commit on the commit
    /// thread, the application's `commit`): nothing counts as committed until
    /// [`commit_answered`](Self::commit_answered) is given the broker's answer.
    pub fn commit_request(&self) -> Option<CommitRequest> {
        let mut request = CommitRequest::default();
        for (tp, entry) in self.partitions.iter() {
            let state = lock(entry);
            if state.status != OwnerStatus::Owned {
                continue;
            }
            if let Some(offset) = state.commit_due(tp, self.map_limit) {
                request.offsets.push(offset);
                request.epochs.push(state.epoch);
            }
        }
        (!request.offsets.is_empty()).then_some(request)
    }

    /// What a commit inside a transaction must carry now: the progress of every partition in
    /// hand that moved, owned *or draining toward a revocation* (the transaction holds outputs
    /// of both, so its offsets must cover both), except `except` (the revocation's own
    /// partitions, whose positions the handoff reads). Answered with
    /// [`commit_answered`](Self::commit_answered), which records only the owned ones (a draining
    /// partition's handoff commits its position again).
    pub(crate) fn transaction_request(&self, except: &[TopicPartition]) -> Option<CommitRequest> {
        let mut request = CommitRequest::default();
        for (tp, entry) in self.partitions.iter() {
            if except.contains(tp) {
                continue;
            }
            let state = lock(entry);
            if !matches!(state.status, OwnerStatus::Owned | OwnerStatus::Draining) {
                continue;
            }
            if let Some(offset) = state.commit_due(tp, self.map_limit) {
                request.offsets.push(offset);
                request.epochs.push(state.epoch);
            }
        }
        (!request.offsets.is_empty()).then_some(request)
    }

    /// Applies the broker's answer to a [`commit_request`](Self::commit_request): every position
    /// the broker accepted becomes the partition's last commit, if the partition is still owned
    /// under the epoch the request was read at (a partition revoked or lost meanwhile keeps the
    /// bookkeeping its handoff left). A request that failed as a whole changes nothing; refused
    /// partitions keep their last commit, so the next request carries them again.
    ///
    /// Returns the positions the broker accepted.
    pub fn commit_answered(
        &self,
        request: CommitRequest,
        outcome: &Result<(), CommitFailure>,
    ) -> Vec<CommitOffset> {
        let refused: Vec<&TopicPartition> = match outcome {
            Ok(()) => Vec::new(),
            Err(CommitFailure::Request(_)) => return Vec::new(),
            Err(CommitFailure::Partitions(failed)) => failed.iter().map(|(tp, _)| tp).collect(),
        };
        let mut committed = Vec::with_capacity(request.offsets.len());
        for (offset, epoch) in request.offsets.into_iter().zip(request.epochs) {
            if refused.contains(&&offset.tp) {
                continue;
            }
            if let Some(mut state) = self.partition(&offset.tp) {
                if state.epoch == epoch && state.status == OwnerStatus::Owned {
                    state.committed(&offset);
                }
            }
            committed.push(offset);
        }
        committed
    }

    /// Commits the progress of owned partitions that moved since their last commit, through the
    /// caller's synchronous commit function: [`commit_request`](Self::commit_request), the commit,
    /// then [`commit_answered`](Self::commit_answered), in one call.
    ///
    /// Returns the positions that were committed. A partition revoked or lost while the commit
    /// was in flight does not get its bookkeeping updated.
    pub fn commit_progress(
        &self,
        commit: &mut CommitFn<'_>,
    ) -> Result<Vec<CommitOffset>, CommitFailure> {
        let Some(request) = self.commit_request() else {
            return Ok(Vec::new());
        };
        let outcome = commit(request.offsets());
        let committed = self.commit_answered(request, &outcome);
        outcome.map(|()| committed)
    }
}

/// One failed commit request, named for every partition it carried.
#[derive(Debug)]
struct SharedFailure(String);

impl fmt::Display for SharedFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SharedFailure {}
