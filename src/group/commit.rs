//! Offset commits bound to a generation: the one place that sends a group commit, checks it
//! against the session right before the request, and feeds a refusal back to the session.
//!
//! # The commit thread
//!
//! Paced commits leave the poll thread.
//!
//! A commit waits for the coordinator's `__consumer_offsets` write, and that write waits for
//! every in-sync replica. When one broker of a cluster dies, it stays in the ISR until the
//! controller fences it (`broker.session.timeout.ms`, 9 s by default), so a commit sent then
//! waits that long and ends in `COORDINATOR_NOT_AVAILABLE` or a timeout. A poll thread that
//! waits for it stops every partition, including those whose leaders are alive. So the commits
//! made at `commit.interval.ms` while records flow travel on a thread of their own, over a
//! client (and a coordinator connection) of their own:
//!
//! - at most one is in flight: [`Committer::send`] refuses a second one;
//! - its answer waits here until the poll thread takes it ([`Committer::answer`]) and applies
//!   it to the guard, which counts nothing as committed before the broker said so;
//! - every synchronous commit (a revocation's, the application's, the close's) first waits for
//!   the one in flight ([`Committer::settle`]), then travels on the same thread, over the same
//!   connection ([`Committer::commit`]).
//!
//! # Why every commit takes the same connection
//!
//! A paced commit must never be executed after (and below) the handoff commit of the same
//! partition: the next owner would start from the paced position and redo what was committed
//! after it. Waiting for the paced commit's answer is not enough: when the answer does not come
//! within `request.timeout.ms`, the request may still be in the network or in the broker's
//! queue, and Kafka executes a request it received even after the client gave up on it, or
//! closed the connection; in the same generation, it is accepted. Kafka keeps the order of
//! requests on one connection (it reads the next request of a connection only after answering
//! the previous one), and keeps none across connections. So:
//!
//! - every commit of the member is sent by this thread, on its client's connection to the
//!   coordinator, one after another;
//! - an OffsetCommit whose answer did not come keeps that connection open, its answer owed
//!   (`wire/connection/ordered.rs`), and the coordinator is not looked up again: the next
//!   commit, and the retry of the same one, go behind it and are executed after it, however
//!   late it arrives.
//!
//! A read-back (OffsetFetch after the handoff, committing again when a late commit moved the
//! offset back) was weighed and not taken: the late request can arrive after the read-back too,
//! and the partition is no longer ours to commit for by then.
//!
//! What remains: when the connection itself breaks (an I/O error, a timeout in the middle of an
//! answer, or four answers owed), a request the broker had read on it may
//! still be executed after a commit sent on the new connection. The offset can then move back
//! to an older commit of this member, at most to the one sent before the break; the next owner
//! redoes what lies between (at most what was finished since that commit), and nothing is
//! lost. A coordinator that moved refuses a late commit (NOT_COORDINATOR), as a group that
//! moved to a new generation does.
//!
//! The thread carries the identity the poll thread read when it sent the commit, and commits
//! through [`commit_offsets`], the same check against the session and the same handling of a
//! refusal that ends the membership as every other commit.

use std::collections::BTreeSet;
use std::sync::mpsc::{sync_channel, Receiver, RecvError, SendError, SyncSender, TryRecvError};
use std::sync::{Arc, OnceLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

pub use super::changes::{CommitKind, CommitResults, OffsetCommitSend};
use super::error::CommitError;
use super::membership::ErrorContext;
use super::requests::MemberIdentity;
use super::session::{CommitRefusal, GroupThread, Shared};
use crate::basics::partition::PartitionSet;
use crate::guard::{BoxError, CommitFailure, CommitOffset};
use crate::wire::{self, Client, ClientConfig, CommitIdentity, KafkaCode, WireError};
use crate::TopicPartition;

impl CommitKind {
    /// Between polls, a refusal that ends the membership loses the assignment at once.
    fn between_polls(self) -> bool {
        !matches!(self, CommitKind::Handoff)
    }
}

/// Hears of every OffsetCommit this process sends: its group, kind, round trip and whether it
/// failed or was refused for some partition.
pub(crate) type CommitObserver = fn(group_id: &str, kind: CommitKind, took: Duration, failed: bool);

/// The one [`CommitObserver`], installed by a layer above (the metrics hooks) at most once.
/// Why a hook and not a call: the group layer reports what happened, the layers above decide
/// what to publish, and the group does not reach up to them.
pub(crate) static COMMIT_OBSERVER: OnceLock<CommitObserver> = OnceLock::new();

/// Commits `offsets` carrying `identity`. The caller gets each partition's error, and must not
/// retry it into success: the partitions may belong to someone else now.
///
/// When the coordinator says the membership itself is over (UNKNOWN_MEMBER_ID: we were removed,
/// ILLEGAL_GENERATION: the group moved on without us, FENCED_INSTANCE_ID: another process took
/// our `group.instance.id`) and the commit is made between polls (`kind` is not a handoff), the
/// assignment ends here as lost, the way the heartbeat thread ends it on
/// the same answers: fenced through the hook at once, reported as lost at the next poll, never
/// revoked (a revocation would let in-flight work run on under leases that still look current,
/// and commit again with the dead identity). See [`SessionState::commit_refused`].
pub(crate) fn commit_offsets(
    send: &mut OffsetCommitSend<'_>,
    shared: &Shared,
    group_id: &str,
    instance_id: Option<&str>,
    identity: &MemberIdentity,
    offsets: &[wire::OffsetCommitEntry],
    kind: CommitKind,
) -> Result<CommitResults, CommitError> {
    shared
        .lock()
        .may_commit(identity)
        .map_err(|refusal| match refusal {
            CommitRefusal::NotInGeneration => CommitError::NotInGeneration {
                group_id: group_id.to_string(),
            },
            CommitRefusal::GenerationOver {
                current_generation_id,
            } => CommitError::GenerationOver {
                generation_id: identity.generation_id,
                current_generation_id,
            },
        })?;
    let who = CommitIdentity {
        group_id,
        generation_id_or_member_epoch: identity.generation_id,
        member_id: &identity.member_id,
        group_instance_id: instance_id,
    };
    let began = Instant::now();
    let sent = send(&who, offsets);
    if let Some(observe) = COMMIT_OBSERVER.get() {
        let failed = sent
            .as_ref()
            .map_or(true, |r| r.iter().any(|(_, r)| r.is_err()));
        observe(group_id, kind, began.elapsed(), failed);
    }
    let mut results = sent?;
    if kind != CommitKind::Paced {
        retry_stale_epoch(send, shared, &who, offsets, &mut results)?;
    }
    let refusal = membership_refusal(
        results
            .iter()
            .filter_map(|(_, r)| r.as_ref().err().and_then(WireError::kafka_code)),
    );
    if let Some(code) = refusal {
        let ctx = ErrorContext {
            group_id,
            group_instance_id: instance_id,
        };
        shared
            .lock()
            .commit_refused(identity, code, kind.between_polls(), &ctx);
    }
    Ok(results)
}

/// The first per-partition commit error that speaks about the membership itself (the generation
/// or member id is no longer valid, or the group is rebalancing), if any.
pub(crate) fn membership_refusal(codes: impl IntoIterator<Item = KafkaCode>) -> Option<KafkaCode> {
    codes.into_iter().find(|&c| {
        matches!(
            c,
            KafkaCode::ILLEGAL_GENERATION
                | KafkaCode::UNKNOWN_MEMBER_ID
                | KafkaCode::FENCED_INSTANCE_ID
                | KafkaCode::REBALANCE_IN_PROGRESS
        )
    })
}

/// KIP-848: a commit refused with STALE_MEMBER_EPOCH (the broker moved the member to a newer
/// epoch than the one the commit carried) is sent again with the member's current epoch, only
/// for the partitions the member still owns (`reconcile::stale_epoch_retry_named`): another
/// member may own the rest, and the broker would accept the current epoch even for a partition
/// that moved (KIP-1251), so the client must not send it. When the session has not heard a
/// newer epoch yet, the refusal stands; the next commit carries the new epoch.
fn retry_stale_epoch(
    send: &mut OffsetCommitSend<'_>,
    shared: &Shared,
    who: &CommitIdentity<'_>,
    offsets: &[wire::OffsetCommitEntry],
    results: &mut CommitResults,
) -> Result<(), CommitError> {
    let refused: Vec<TopicPartition> = results
        .iter()
        .filter(|(_, r)| {
            r.as_ref().err().and_then(WireError::kafka_code) == Some(KafkaCode::STALE_MEMBER_EPOCH)
        })
        .map(|(tp, _)| tp.clone())
        .collect();
    if refused.is_empty() {
        return Ok(());
    }
    let (current, owned) = {
        let state = shared.lock();
        let me = state.identity();
        let current = (me.member_id == who.member_id).then_some(me.generation_id);
        (current, state.owned().to_vec())
    };
    let decision =
        stale_epoch_retry_named(who.generation_id_or_member_epoch, current, &owned, &refused);
    let StaleEpochRetry::Retry {
        epoch,
        partitions,
        dropped,
    } = decision
    else {
        log::info!(
            "commit refused with STALE_MEMBER_EPOCH for {} partition(s) at epoch {}: no newer \
             epoch known yet ({decision:?})",
            refused.len(),
            who.generation_id_or_member_epoch
        );
        return Ok(());
    };
    log::info!(
        "commit refused with STALE_MEMBER_EPOCH at epoch {}: retrying {} still-owned \
         partition(s) with epoch {epoch}, not {} moved one(s)",
        who.generation_id_or_member_epoch,
        partitions.len(),
        dropped.len()
    );
    let again: Vec<wire::OffsetCommitEntry> = offsets
        .iter()
        .filter(|o| partitions.contains(&o.tp))
        .cloned()
        .collect();
    if again.is_empty() {
        return Ok(());
    }
    let retry_as = CommitIdentity {
        generation_id_or_member_epoch: epoch,
        ..*who
    };
    let retried = send(&retry_as, &again)?;
    for (tp, result) in retried {
        if let Some(slot) = results.iter_mut().find(|(t, _)| *t == tp) {
            slot.1 = result;
        }
    }
    Ok(())
}

/// What to do with a commit the broker refused with STALE_MEMBER_EPOCH.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StaleEpochRetry {
    /// Send the commit again with `epoch`, for `partitions` only.
    Retry {
        /// The member's current epoch.
        epoch: i32,
        /// The partitions of the refused commit the member still owns.
        partitions: Vec<TopicPartition>,
        /// The ones it no longer owns: never committed (another member may own them).
        dropped: Vec<TopicPartition>,
    },
    /// The broker knows an epoch the member has not heard yet: retry once a heartbeat answered
    /// with it (the machine sends one at once), for `partitions` only.
    AfterHeartbeat {
        /// The partitions of the refused commit the member still owns.
        partitions: Vec<TopicPartition>,
        /// The ones it no longer owns.
        dropped: Vec<TopicPartition>,
    },
    /// The member is not in the group: nothing is committed.
    Drop {
        /// Every partition of the refused commit.
        dropped: Vec<TopicPartition>,
    },
}

/// The STALE_MEMBER_EPOCH decision (KIP-848): a commit made with `attempted` is retried only for
/// the partitions still `owned` (by name, as the consumer's session keeps them; the machine
/// asks the same through `consumer_group::reconcile::stale_epoch_retry`), with the member's
/// `current` epoch if it is newer, else after the next heartbeat. It lives with the commits it
/// decides, below the KIP-848 machine, so that the commit path does not import the machine.
pub(crate) fn stale_epoch_retry_named(
    attempted: i32,
    current: Option<i32>,
    owned: &[TopicPartition],
    refused: &[TopicPartition],
) -> StaleEpochRetry {
    let Some(current) = current.filter(|e| *e > 0) else {
        return StaleEpochRetry::Drop {
            dropped: refused.to_vec(),
        };
    };
    let still: BTreeSet<&TopicPartition> = owned.iter().collect();
    let (partitions, dropped): (Vec<_>, Vec<_>) =
        refused.iter().cloned().partition(|tp| still.contains(tp));
    if current > attempted {
        StaleEpochRetry::Retry {
            epoch: current,
            partitions,
            dropped,
        }
    } else {
        StaleEpochRetry::AfterHeartbeat {
            partitions,
            dropped,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The commit thread

/// Attempts per paced commit (the first included): one more than a single try, so a
/// coordinator that moved is found again at once; anything longer waits for the next interval,
/// which sends the progress made by then. The synchronous commits (a revocation's, the close's,
/// the application's) get the client's `max_retries` (what they had on the poll thread): each is
/// the last word on its partitions, and giving up early costs the next owner a redo. A retry after
/// a timeout goes behind the unanswered attempt on the same connection
/// (`wire/connection/ordered.rs`).
const PACED_ATTEMPTS: u32 = 2;

/// One commit for the thread: what to send, as whom, and what kind of commit it is.
struct Job {
    identity: MemberIdentity,
    offsets: Vec<wire::OffsetCommitEntry>,
    kind: CommitKind,
}

/// The broker's answer to a commit (or why none was had).
pub(crate) type CommitAnswer = Result<CommitResults, CommitError>;

/// What the thread does with one job: send it and wait for the answer. The product's sends an
/// OffsetCommit ([`offset_commit_sender`]); tests put a scripted coordinator in its place.
type Sender =
    Box<dyn FnMut(&MemberIdentity, &[wire::OffsetCommitEntry], CommitKind) -> CommitAnswer + Send>;

/// The poll thread's handle on the commit thread, which starts with the first commit.
pub(crate) struct Committer {
    /// The thread's name, and what it will run (taken when the thread starts).
    name: String,
    sender: Option<Sender>,
    /// The session: the thread's panic is the member's death there (`session/threads.rs`).
    shared: Arc<Shared>,
    jobs: Option<SyncSender<Job>>,
    answers: Option<Receiver<CommitAnswer>>,
    thread: Option<JoinHandle<()>>,
    in_flight: bool,
    /// An answer taken by [`settle`](Self::settle), kept for [`answer`](Self::answer).
    settled: Option<CommitAnswer>,
}

impl Committer {
    /// A committer for `group_id`; its thread and client start with the first commit.
    pub(crate) fn new(
        shared: Arc<Shared>,
        client_config: &ClientConfig,
        group_id: &str,
        instance_id: Option<&str>,
    ) -> Self {
        let sender = offset_commit_sender(
            shared.clone(),
            client_config.clone(),
            group_id.to_string(),
            instance_id.map(str::to_string),
        );
        Committer::with_sender(format!("commit-{group_id}"), shared, sender)
    }

    fn with_sender(name: String, shared: Arc<Shared>, sender: Sender) -> Self {
        Committer {
            name,
            sender: Some(sender),
            shared,
            jobs: None,
            answers: None,
            thread: None,
            in_flight: false,
            settled: None,
        }
    }

    /// True while a commit was sent and its answer not taken yet.
    pub(crate) fn in_flight(&self) -> bool {
        self.in_flight || self.settled.is_some()
    }

    /// True once the thread was started and has ended (it ends only with the committer, or
    /// by a panic: see `session/threads.rs`).
    pub(crate) fn ended(&self) -> bool {
        self.thread.as_ref().is_some_and(JoinHandle::is_finished)
    }

    /// Sends `offsets` as `identity` on the commit thread, without waiting. Refused (returns
    /// the offsets back) while another commit is in flight or its answer was not taken: one at
    /// a time, so commits land in the order they were made.
    pub(crate) fn send(
        &mut self,
        identity: MemberIdentity,
        offsets: Vec<wire::OffsetCommitEntry>,
    ) -> Result<(), Vec<wire::OffsetCommitEntry>> {
        if self.in_flight() {
            return Err(offsets);
        }
        let job = Job {
            identity,
            offsets,
            kind: CommitKind::Paced,
        };
        match self.submit(job) {
            Ok(()) => {
                self.in_flight = true;
                Ok(())
            }
            Err(job) => Err(job.offsets),
        }
    }

    /// Commits synchronously on the commit thread, after the commit in flight (whose answer
    /// [`settle`](Self::settle) keeps for [`answer`](Self::answer)): both travel on the
    /// thread's connection to the coordinator, one behind the other, so the coordinator
    /// executes them in that order even when the first one's answer never came (see the
    /// module docs). Bounded by the thread's request deadlines.
    pub(crate) fn commit(
        &mut self,
        identity: &MemberIdentity,
        offsets: &[wire::OffsetCommitEntry],
        kind: CommitKind,
    ) -> CommitAnswer {
        self.settle();
        let job = Job {
            identity: identity.clone(),
            offsets: offsets.to_vec(),
            kind,
        };
        if self.submit(job).is_err() {
            return Err(CommitError::ThreadGone);
        }
        match self.answers.as_ref().map(Receiver::recv) {
            Some(Ok(answer)) => answer,
            Some(Err(RecvError)) | None => Err(CommitError::ThreadGone),
        }
    }

    /// The answer of the commit in flight, if it arrived (never waits).
    pub(crate) fn answer(&mut self) -> Option<CommitAnswer> {
        if let Some(answer) = self.settled.take() {
            return Some(answer);
        }
        if !self.in_flight {
            return None;
        }
        let answers = self.answers.as_ref()?;
        match answers.try_recv() {
            Ok(answer) => {
                self.in_flight = false;
                Some(answer)
            }
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => {
                self.in_flight = false;
                Some(Err(CommitError::ThreadGone))
            }
        }
    }

    /// Waits until the commit in flight (if any) was answered, and keeps the answer for
    /// [`answer`](Self::answer). Bounded by the thread's own request deadlines
    /// (`request.timeout.ms` per attempt, [`PACED_ATTEMPTS`] attempts).
    pub(crate) fn settle(&mut self) {
        if !self.in_flight {
            return;
        }
        let Some(answers) = self.answers.as_ref() else {
            self.in_flight = false;
            return;
        };
        log::debug!("waiting for the paced commit in flight before a synchronous commit");
        self.settled = Some(match answers.recv() {
            Ok(answer) => answer,
            Err(RecvError) => Err(CommitError::ThreadGone),
        });
        self.in_flight = false;
    }

    /// Hands `job` to the thread, starting it on first use; the job back when the thread
    /// cannot be started or is gone (its death is the member's: `session/threads.rs`).
    fn submit(&mut self, job: Job) -> Result<(), Job> {
        let Some(jobs) = self.start() else {
            return Err(job);
        };
        jobs.send(job).map_err(|SendError(job)| {
            log::error!("the commit thread is gone: nothing can be committed");
            job
        })
    }

    /// The job channel, starting the thread on first use. `None` when it cannot be started or
    /// was started before and ended.
    fn start(&mut self) -> Option<&SyncSender<Job>> {
        if self.jobs.is_none() {
            let sender = self.sender.take()?;
            let (jobs, job_queue) = sync_channel::<Job>(1);
            let (answer_queue, answers) = sync_channel::<CommitAnswer>(1);
            let shared = self.shared.clone();
            let spawned = thread::Builder::new()
                .name(self.name.clone())
                .spawn(move || {
                    shared.run_thread(GroupThread::Commit, || {
                        run(sender, job_queue, answer_queue, &shared)
                    })
                });
            match spawned {
                Ok(handle) => {
                    self.thread = Some(handle);
                    self.jobs = Some(jobs);
                    self.answers = Some(answers);
                }
                Err(error) => {
                    log::error!("cannot start the commit thread: {error}");
                    self.shared.lock().thread_died(
                        GroupThread::Commit,
                        format!("the thread could not be started: {error}"),
                    );
                    return None;
                }
            }
        }
        self.jobs.as_ref()
    }
}

impl Drop for Committer {
    fn drop(&mut self) {
        // Closing the job channel ends the thread after the commit it may be sending; that can
        // take a request timeout, so it is not waited for (it holds nothing of the poll
        // thread's, and its answer has no one left to apply it).
        self.jobs = None;
        self.thread = None;
    }
}

/// The commit thread: one job at a time, each answered, in the order they came.
fn run(mut send: Sender, jobs: Receiver<Job>, answers: SyncSender<CommitAnswer>, shared: &Shared) {
    while let Ok(job) = jobs.recv() {
        shared.panic_if_requested(GroupThread::Commit);
        let answer = send(&job.identity, &job.offsets, job.kind);
        if answers.send(answer).is_err() {
            return;
        }
    }
}

/// Sends each job as an OffsetCommit through [`commit_offsets`] (checked against the session
/// right before the request, a refusal fed back to it), on a client of its own that connects
/// with the first job.
fn offset_commit_sender(
    shared: Arc<Shared>,
    client_config: ClientConfig,
    group_id: String,
    instance_id: Option<String>,
) -> Sender {
    let mut client: Option<Client> = None;
    let synchronous_attempts = client_config.max_retries;
    Box::new(move |identity, offsets, kind| {
        if client.is_none() {
            client = Some(Client::connect(client_config.clone()).map_err(CommitError::Wire)?);
        }
        let Some(connected) = client.as_mut() else {
            return Err(CommitError::ThreadGone);
        };
        connected.set_max_retries(match kind {
            CommitKind::Paced => PACED_ATTEMPTS,
            CommitKind::Handoff | CommitKind::Application | CommitKind::Fencing => {
                synchronous_attempts
            }
        });
        let answer = commit_offsets(
            &mut |who, offsets| {
                connected
                    .offset_commit(who, offsets)
                    .map_err(CommitError::Wire)
            },
            &shared,
            &group_id,
            instance_id.as_deref(),
            identity,
            offsets,
            kind,
        );
        if let Err(CommitError::Wire(e)) = &answer {
            if !timed_out(e) {
                // Refused as a whole, or the connection broke: the next one asks who
                // coordinates first. Not after a timeout that kept the connection: the next
                // commit must go behind the unanswered one, on the same connection.
                connected.invalidate_coordinator(&group_id);
            }
        }
        answer
    })
}

/// Whether `e` is (or ends in) a request timeout.
fn timed_out(e: &WireError) -> bool {
    match e {
        WireError::Timeout { .. } => true,
        WireError::RetriesExhausted { last, .. } => timed_out(last),
        _ => false,
    }
}

// ----------------------------------------------------------------------------------------------
// The guard's positions and the group's answers: the one translation, for every commit (the
// handoff's, the application's, the paced one).

/// Sends a commit of the guard's positions `offsets` through `commit` (the group's synchronous
/// commit) and turns the group's per-partition results into the guard's failure type: how the
/// application's commit reaches the group.
pub(crate) fn commit_through(
    commit: impl FnOnce(&[wire::OffsetCommitEntry]) -> Result<CommitResults, CommitError>,
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
    answer: Result<CommitResults, CommitError>,
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
    results: CommitResults,
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::channel;
    use std::sync::Mutex;
    use std::time::Duration;

    use crate::TopicPartition;

    fn entry(offset: i64) -> wire::OffsetCommitEntry {
        wire::OffsetCommitEntry {
            tp: TopicPartition::new("orders", 0),
            offset,
            leader_epoch: None,
            metadata: None,
        }
    }

    fn me() -> MemberIdentity {
        MemberIdentity {
            generation_id: 3,
            member_id: "m-1".to_string(),
        }
    }

    fn shared() -> Arc<Shared> {
        let timeouts = crate::group::session::Timeouts {
            session_timeout: Duration::from_secs(10),
            max_poll_interval: Duration::from_secs(300),
        };
        Arc::new(Shared::new(Arc::new(|_, _| {}), timeouts))
    }

    /// A coordinator that writes each commit it is given into `log` once the test lets it
    /// (one permit per commit), the way a coordinator answers only once its write is replicated.
    fn held_coordinator(log: Arc<Mutex<Vec<i64>>>) -> (Sender, std::sync::mpsc::Sender<()>) {
        let (permit, permits) = channel::<()>();
        let permits = Mutex::new(permits);
        let sender: Sender = Box::new(move |_, offsets, _| {
            let _ = permits.lock().map(|p| p.recv());
            log.lock()
                .map(|mut l| l.extend(offsets.iter().map(|o| o.offset)))
                .ok();
            Ok(offsets.iter().map(|o| (o.tp.clone(), Ok(()))).collect())
        });
        (sender, permit)
    }

    #[test]
    fn one_commit_in_flight_at_a_time_and_its_answer_waits_to_be_taken() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let (sender, permit) = held_coordinator(log.clone());
        let mut committer = Committer::with_sender("commit-test".into(), shared(), sender);
        assert!(
            committer.answer().is_none(),
            "nothing sent, nothing answered"
        );
        assert!(committer.send(me(), vec![entry(5)]).is_ok());
        assert!(committer.in_flight());
        // A second commit while the first is held is refused, offsets handed back.
        let refused = committer.send(me(), vec![entry(7)]).unwrap_err();
        assert_eq!(refused[0].offset, 7);
        assert!(committer.answer().is_none(), "held: not answered yet");
        permit.send(()).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let answer = loop {
            if let Some(answer) = committer.answer() {
                break answer;
            }
            assert!(std::time::Instant::now() < deadline, "never answered");
            thread::sleep(Duration::from_millis(5));
        };
        assert!(answer.is_ok());
        assert!(!committer.in_flight());
        assert!(committer.send(me(), vec![entry(7)]).is_ok(), "free again");
        permit.send(()).unwrap();
        committer.settle();
        assert_eq!(*log.lock().unwrap(), vec![5, 7]);
    }

    /// The rule the handoff relies on: a synchronous commit made while a paced one is in flight
    /// reaches the coordinator after it, never before (`settle` returns only once the paced one
    /// was answered), and the paced answer is kept for the pacer.
    #[test]
    fn settle_returns_only_after_the_commit_in_flight_was_answered_and_keeps_its_answer() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let (sender, permit) = held_coordinator(log.clone());
        let mut committer = Committer::with_sender("commit-test".into(), shared(), sender);
        committer.send(me(), vec![entry(5)]).unwrap();
        let releaser = thread::spawn(move || {
            thread::sleep(Duration::from_millis(200));
            permit.send(()).unwrap();
        });
        committer.settle();
        // The synchronous commit goes out now: the paced one is in the log before it.
        log.lock().unwrap().push(9);
        assert_eq!(*log.lock().unwrap(), vec![5, 9]);
        assert!(committer.in_flight(), "the answer waits to be taken");
        assert!(committer.answer().is_some_and(|a| a.is_ok()));
        assert!(!committer.in_flight());
        releaser.join().unwrap();
        // Nothing in flight: settle returns at once.
        committer.settle();
        assert!(committer.answer().is_none());
    }

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
