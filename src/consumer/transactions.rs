//! Exactly once from Kafka to Kafka: the consumer's commits travel in a producer's transactions
//! (KIP-98), fenced by the group (KIP-447), and the guard decides when a transaction ends.
//!
//! The story of one transaction, in [`Consumer::run_transactional`](super::Consumer::run_transactional):
//!
//! 1. A record's handler puts its outputs in its [`TransactionContext`]; nothing is sent while
//!    it runs. When it finished (after its retries, if it needed some), its outputs go into
//!    the open transaction (opened by the first of them) and only then does the record count
//!    as finished in the guard. A handler that failed, or whose lease went stale, sent nothing.
//! 2. Every `transaction.interval.ms`, between records, the guard's progress (the contiguous
//!    completed prefix, `last + 1`, of every owned partition that moved) goes into the
//!    transaction through TxnOffsetCommit, as the member's current generation, and EndTxn
//!    commits it: outputs and offsets become visible to `read_committed` readers together.
//!    One function does this for every commit ([`Transactional::commit`]): the paced one, the
//!    application's `commit`, a revocation's and the close's.
//! 3. A revocation fences and drains the revoked partitions (guard rules 1 to 4), then commits
//!    the transaction with their positions and the progress of every partition kept: the
//!    transaction holds outputs of both, so its offsets must cover both. Then the revoked
//!    partitions are handed back.
//! 4. Nothing of an aborted transaction is visible, so every record it covered must be done
//!    again: partitions still owned read again from what the group has committed
//!    ([`rewind_owned`]); lost and revoked ones are their next owner's. A transaction aborts
//!    when the group refuses its offsets (the generation moved: a zombie), when a record of it
//!    was not written, when the session bound lapsed (ownership could have moved: the lease
//!    rule), and at a loss, where nothing is committed.
//!
//! The transaction coordinator aborts a transaction left open longer than
//! `transaction.timeout.ms`, which is why it must not exceed the session: a frozen member's
//! open transaction ends no later than its membership, and its partitions' next owner, whose
//! OffsetFetch waits for stable offsets (KIP-447), is held back no longer than that.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::basics::error_kind::ErrorKind;
use crate::group::{CommitError, CommitKind, CommitResults, MemberIdentity, Membership};
use crate::guard::{AwaitingCommit, CommitFailure, CommitRequest, Lease};
use crate::producer::{ProduceError, Producer, ProducerRecord};
use crate::wire::{CommitIdentity, OffsetCommitEntry};

use super::context::{Guard, WorkContext};
use super::error::ConsumerError;
use super::intake::Intake;
use super::pacer::CommitPacer;
use super::ConsumerConfig;
use crate::group::commit::{commit_entries, commit_outcome};

/// What a handler of [`Consumer::run_transactional`](super::Consumer::run_transactional) may do with the record it processes: put
/// output records in the transaction, and ask whether the record's partition is still its own.
pub struct TransactionContext<'a> {
    pub(crate) work: &'a WorkContext<'a>,
    pub(crate) outputs: &'a mut Vec<ProducerRecord>,
}

impl TransactionContext<'_> {
    /// Puts `record` among this record's outputs. They are sent into the open transaction once
    /// the handler returned `Ok` (not before: a handler that fails and is tried again must not
    /// leave the first try's outputs behind), and become visible to `read_committed` readers
    /// with the commit of the record's offset, or never.
    pub fn send(&mut self, record: ProducerRecord) {
        self.outputs.push(record);
    }

    /// True while the record's partition is still this member's (see
    /// [`WorkContext::is_current`]). Outputs of a record whose lease went stale are not sent.
    pub fn is_current(&self) -> bool {
        self.work.is_current()
    }

    /// The record's lease.
    pub fn lease(&self) -> &Lease {
        self.work.lease()
    }

    /// The fencing token of the record's assignment (see [`WorkContext::fencing_token`]), for
    /// an effect outside Kafka beside the transaction's outputs.
    pub fn fencing_token(&self) -> u64 {
        self.work.fencing_token()
    }

    /// Which try of the record this is (see [`WorkContext::attempt`]).
    pub fn attempt(&self) -> u32 {
        self.work.attempt()
    }
}

/// The consumer's transactional producer and the pacing of its transactions.
pub(crate) struct Transactional {
    producer: Producer,
    /// `begin_transaction` was called and the transaction not ended yet.
    open: bool,
    /// `transaction.interval.ms`.
    pacer: CommitPacer,
    /// Since the last abort, the partitions still owned must read again from the group's
    /// committed offsets before anything else of them is handed out.
    rewind_due: bool,
    /// The producer cannot go on (fenced, or an abort that failed): every run returns this.
    broken: Option<ProduceError>,
    /// Transactions committed and aborted, for the log and the tests.
    pub(crate) committed: u64,
    pub(crate) aborted: u64,
}

/// How the consumer holds its [`Transactional`]: the poll thread and the handoff driver take
/// turns (never nested), and the lock is where the decoupled mode's workers will wait.
pub(crate) type SharedTransactional = Arc<Mutex<Transactional>>;

pub(crate) fn lock(shared: &SharedTransactional) -> MutexGuard<'_, Transactional> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

fn transaction_error(error: ProduceError) -> CommitError {
    CommitError::Transaction {
        kind: error.kind(),
        error: Box::new(error),
    }
}

impl Transactional {
    pub(crate) fn new(producer: Producer, interval: Duration) -> Self {
        Transactional {
            producer,
            open: false,
            pacer: CommitPacer::new(interval),
            rewind_due: false,
            broken: None,
            committed: 0,
            aborted: 0,
        }
    }

    /// The producer's error when it cannot go on.
    pub(crate) fn broken(&self) -> Option<ProduceError> {
        self.broken.clone()
    }

    fn begin_if_needed(&mut self) -> Result<(), ProduceError> {
        if let Some(broken) = &self.broken {
            return Err(broken.clone());
        }
        if !self.open {
            self.producer.begin_transaction()?;
            self.open = true;
        }
        Ok(())
    }

    /// Sends a finished record's outputs into the open transaction (opening it if needed).
    pub(crate) fn send_outputs(
        &mut self,
        outputs: impl IntoIterator<Item = ProducerRecord>,
    ) -> Result<(), ProduceError> {
        let mut outputs = outputs.into_iter().peekable();
        if outputs.peek().is_none() {
            return Ok(());
        }
        self.begin_if_needed()?;
        for output in outputs {
            // The handle is not kept: a record that fails makes the transaction abortable, and
            // the commit reports it.
            if let Err(e) = self.producer.send(output) {
                self.note_fatal(&e);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Whether the paced commit is due at `now`.
    pub(crate) fn due(&self, now: Instant) -> bool {
        self.pacer.due(now)
    }

    fn note_fatal(&mut self, error: &ProduceError) {
        if matches!(
            error,
            ProduceError::Fenced { .. } | ProduceError::Fatal { .. }
        ) {
            self.broken.get_or_insert_with(|| error.clone());
        }
    }

    /// The one commit of the transactional mode: `offsets` go into the open transaction as
    /// `identity` (TxnOffsetCommit, through the group's commit path: the same check against the
    /// session, the same judgement of a refusal), and EndTxn commits it. When the group refuses
    /// any partition, the session bound has lapsed, or the producer fails, the transaction is
    /// aborted instead and nothing of it becomes visible. The answer is the group's, in the
    /// shape of a plain commit's.
    pub(crate) fn commit(
        &mut self,
        guard: &Guard,
        member: &mut dyn Membership,
        identity: &MemberIdentity,
        offsets: &[OffsetCommitEntry],
        kind: CommitKind,
    ) -> Result<CommitResults, CommitError> {
        self.pacer.committed_at(Instant::now());
        if offsets.is_empty() {
            // Nothing moved: the outputs sent so far wait for their offsets.
            return Ok(Vec::new());
        }
        if guard.session_bound().is_expired_now() {
            // The lease rule: ownership could have moved; nothing of this transaction may
            // become visible under it.
            self.abort("the session bound lapsed: the partitions may be another member's");
            return Err(CommitError::Transaction {
                kind: ErrorKind::GenerationOver,
                error: "the session bound lapsed before the transaction could commit".into(),
            });
        }
        if let Err(e) = self.begin_if_needed() {
            return Err(transaction_error(e));
        }
        let producer = &self.producer;
        let mut send = |who: &CommitIdentity<'_>, entries: &[OffsetCommitEntry]| {
            producer
                .send_offsets_as(who, entries)
                .map_err(transaction_error)
        };
        let answer = member.commit_through(identity, offsets, kind, &mut send);
        match answer {
            Ok(results) if accepted_all(offsets, &results) => {
                match self.producer.commit_transaction() {
                    Ok(()) => {
                        self.open = false;
                        self.committed += 1;
                        Ok(results)
                    }
                    Err(e) => {
                        log::warn!("transaction commit failed, aborting: {e}");
                        self.note_fatal(&e);
                        self.abort(&e.to_string());
                        Err(transaction_error(e))
                    }
                }
            }
            Ok(results) => {
                // Nothing of an aborted transaction counts, not even the partitions the group
                // accepted: their offsets went with the abort.
                self.abort("the group refused offsets of the transaction");
                let refused: Vec<String> = results
                    .iter()
                    .filter_map(|(tp, r)| r.as_ref().err().map(|e| format!("{tp}: {e}")))
                    .collect();
                let over = results.iter().any(|(_, r)| {
                    r.as_ref()
                        .err()
                        .and_then(|e| e.kafka_code())
                        .is_some_and(|c| crate::group::commit::membership_refusal([c]).is_some())
                });
                Err(CommitError::Transaction {
                    kind: if over {
                        ErrorKind::GenerationOver
                    } else {
                        ErrorKind::Refused
                    },
                    error: format!(
                        "the group refused offsets of the transaction, which was aborted: {}",
                        refused.join("; ")
                    )
                    .into(),
                })
            }
            Err(e) => {
                self.abort(&e.to_string());
                Err(e)
            }
        }
    }

    /// Aborts the open transaction (if any): its outputs never become visible, and the
    /// partitions still owned read again from the group's committed offsets.
    pub(crate) fn abort(&mut self, why: &str) {
        if !self.open {
            return;
        }
        self.open = false;
        self.aborted += 1;
        self.rewind_due = true;
        log::warn!("aborting the open transaction: {why}");
        if let Err(e) = self.producer.abort_transaction() {
            log::error!("the transaction could not be aborted: {e}");
            self.broken.get_or_insert(e);
        }
    }

    /// Whether partitions must read again from the committed offsets (after an abort); clears it.
    pub(crate) fn take_rewind(&mut self) -> bool {
        std::mem::take(&mut self.rewind_due)
    }

    /// Closes the producer (after the close's handoff committed or aborted the last
    /// transaction).
    pub(crate) fn close(self) -> Result<(), ProduceError> {
        self.producer.close()
    }
}

/// Whether every partition of `offsets` was accepted (absent counts as refused).
fn accepted_all(offsets: &[OffsetCommitEntry], results: &CommitResults) -> bool {
    offsets.iter().all(|o| {
        results
            .iter()
            .any(|(tp, result)| *tp == o.tp && result.is_ok())
    })
}

/// After an abort: every partition in hand (owned, or draining toward a revocation) goes back
/// to what the group has committed (the position of the last transaction that did commit), so
/// that the records the aborted transaction covered are done again (owned), or left to the next
/// owner and not committed past by the handoff (draining). When the committed positions cannot
/// be read, the consumer cannot tell how far to go back: the error is returned, and the
/// caller stops (what is not rewound must not be committed).
pub(crate) fn rewind_owned(
    guard: &Guard,
    intake: &mut Intake,
    member: &mut dyn Membership,
    config: &ConsumerConfig,
) -> Result<(), ConsumerError> {
    let held = guard.in_hand();
    if held.is_empty() {
        return Ok(());
    }
    let found = super::intake::committed_or_reset(member.records(), config, &held)?;
    for (tp, position) in found {
        let (offset, metadata) = position?;
        guard
            .rewind_aborted(&tp, offset, metadata.as_deref())
            .map_err(ConsumerError::Seek)?;
        intake.seek(&tp, offset);
        log::info!("{tp}: read again from {offset} after the abort");
    }
    Ok(())
}

/// After an abort (if there was one since the last call): [`rewind_owned`]. When that fails
/// the transactional mode cannot go on (the guard still counts work the abort took away, and
/// committing it would lose outputs): every later commit is refused and the error returned.
///
/// Called with the transaction's lock held since the abort: a worker whose record finished
/// meanwhile would otherwise send its outputs into the next transaction and count the record
/// as finished, and the rewind would then take the record away and have it done again: its
/// output twice.
pub(crate) fn rewind_if_aborted(
    open: &mut Transactional,
    guard: &Guard,
    intake: &mut Intake,
    member: &mut dyn Membership,
    config: &ConsumerConfig,
) -> Result<(), ConsumerError> {
    if !open.take_rewind() {
        return Ok(());
    }
    rewind_owned(guard, intake, member, config).inspect_err(|e| {
        open.broken.get_or_insert_with(|| ProduceError::Fatal {
            reason: format!(
                "after an aborted transaction, no way back to the committed offsets: {e}"
            ),
        });
    })
}

/// A revocation's transactional commit, answered for each of its two parts.
pub(crate) struct HandoffAnswers {
    /// For the guard's hand-back of the revoked partitions (`None`: nothing of them moved).
    pub(crate) revoked: Option<Result<(), CommitFailure>>,
    /// The kept partitions' request with its outcome (`None`: nothing of them moved).
    pub(crate) kept: Option<(CommitRequest, Result<(), CommitFailure>)>,
    /// After an abort, the way back to the committed offsets (done under the same lock).
    pub(crate) rewound: Result<(), ConsumerError>,
}

/// What a revocation's transactional commit needs of the consumer besides the guard.
pub(crate) struct HandoffParts<'a> {
    pub(crate) member: &'a mut dyn Membership,
    pub(crate) intake: &'a mut Intake,
    pub(crate) config: &'a ConsumerConfig,
}

/// The transactional commit of a revocation: the revoked partitions' drained positions and the
/// kept partitions' progress in one transaction, answered for each part.
pub(crate) fn commit_handoff(
    transactional: &SharedTransactional,
    guard: &Guard,
    parts: HandoffParts<'_>,
    identity: &MemberIdentity,
    revoking: &[crate::TopicPartition],
    awaiting: &AwaitingCommit,
) -> HandoffAnswers {
    let HandoffParts {
        member,
        intake,
        config,
    } = parts;
    let revoked = awaiting.offsets();
    // The lock first: no worker's record finishes (outputs sent, completion counted) between
    // reading the kept partitions' progress and the commit that carries it.
    let mut open = lock(transactional);
    if awaiting.any_drain_failed() {
        // Work of a revoked partition did not finish in time: it may still send outputs into
        // this transaction, and its offset is not committed. Nothing of it may become visible.
        open.abort("a revoked partition's drain did not finish");
        let rewound = rewind_if_aborted(&mut open, guard, intake, member, config);
        return HandoffAnswers {
            revoked: None,
            kept: None,
            rewound,
        };
    }
    let kept = guard.transaction_request(revoking);
    let mut entries = commit_entries(revoked);
    if let Some(kept) = &kept {
        entries.extend(commit_entries(kept.offsets()));
    }
    if entries.is_empty() {
        return HandoffAnswers {
            revoked: None,
            kept: None,
            rewound: Ok(()),
        };
    }
    let answer = open.commit(guard, member, identity, &entries, CommitKind::Handoff);
    let rewound = rewind_if_aborted(&mut open, guard, intake, member, config);
    drop(open);
    let (for_revoked, for_kept) = split_answer(answer, revoked);
    let revoked_answer = (!revoked.is_empty()).then(|| commit_outcome(revoked, for_revoked));
    let kept_answer = kept.map(|request| {
        let outcome = commit_outcome(request.offsets(), for_kept);
        (request, outcome)
    });
    HandoffAnswers {
        revoked: revoked_answer,
        kept: kept_answer,
        rewound,
    }
}

/// One answer for two sets of partitions: each gets its own partitions' results, or a copy of
/// the request's failure.
fn split_answer(
    answer: Result<CommitResults, CommitError>,
    first: &[crate::guard::CommitOffset],
) -> (
    Result<CommitResults, CommitError>,
    Result<CommitResults, CommitError>,
) {
    match answer {
        Ok(results) => {
            let (a, b): (CommitResults, CommitResults) = results
                .into_iter()
                .partition(|(tp, _)| first.iter().any(|o| o.tp == *tp));
            (Ok(a), Ok(b))
        }
        Err(e) => {
            let copy = CommitError::Transaction {
                kind: e.kind(),
                error: e.to_string().into(),
            };
            (Err(e), Err(copy))
        }
    }
}
