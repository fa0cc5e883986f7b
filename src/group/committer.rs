//! The commit thread: paced commits leave the poll thread.
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
//!   the one in flight ([`Committer::settle`]): commits reach the coordinator one after another,
//!   in the order they were made, so a paced commit can never land after (and below) the
//!   handoff commit of the same partition.
//!
//! The thread carries the identity the poll thread read when it sent the commit, and commits
//! through [`commit_offsets`], the same check against the session and the same handling of a
//! refusal that ends the membership as every other commit.

use std::sync::Arc;
use std::thread::{self, JoinHandle};

use std::sync::mpsc::{sync_channel, Receiver, RecvError, SendError, SyncSender, TryRecvError};

use super::commit::{commit_offsets, CommitKind, CommitResults};
use super::error::CommitError;
use super::requests::MemberIdentity;
use super::session::Shared;
use crate::wire::{self, Client, ClientConfig, WireError};

/// Attempts per paced commit on the commit thread (the first included): one more than a single
/// try, so a coordinator that moved is found again at once; anything longer waits for the next
/// interval, which sends the progress made by then.
const ATTEMPTS: u32 = 2;

/// One commit for the thread: what to send, as whom.
struct Job {
    identity: MemberIdentity,
    offsets: Vec<wire::OffsetCommitEntry>,
}

/// The broker's answer to a paced commit (or why none was had).
pub(crate) type CommitAnswer = Result<CommitResults, CommitError>;

/// What the thread does with one job: send it and wait for the answer. The product's sends an
/// OffsetCommit ([`offset_commit_sender`]); tests put a scripted coordinator in its place.
type Sender = Box<dyn FnMut(&MemberIdentity, &[wire::OffsetCommitEntry]) -> CommitAnswer + Send>;

/// The poll thread's handle on the commit thread, which starts with the first paced commit.
pub(crate) struct Committer {
    /// The thread's name, and what it will run (taken when the thread starts).
    name: String,
    sender: Option<Sender>,
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
        let mut client_config = client_config.clone();
        client_config.max_retries = ATTEMPTS;
        let sender = offset_commit_sender(
            shared,
            client_config,
            group_id.to_string(),
            instance_id.map(str::to_string),
        );
        Committer::with_sender(format!("commit-{group_id}"), sender)
    }

    fn with_sender(name: String, sender: Sender) -> Self {
        Committer {
            name,
            sender: Some(sender),
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
        let Some(jobs) = self.start() else {
            return Err(offsets);
        };
        match jobs.send(Job { identity, offsets }) {
            Ok(()) => {
                self.in_flight = true;
                Ok(())
            }
            Err(SendError(job)) => {
                log::error!("the commit thread is gone; the next synchronous commit commits");
                self.jobs = None;
                Err(job.offsets)
            }
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
                Some(Err(thread_gone()))
            }
        }
    }

    /// Waits until the commit in flight (if any) was answered, and keeps the answer for
    /// [`answer`](Self::answer). Bounded by the thread's own request deadlines
    /// (`request.timeout.ms` per attempt, [`ATTEMPTS`] attempts).
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
            Err(RecvError) => Err(thread_gone()),
        });
        self.in_flight = false;
    }

    /// The job channel, starting the thread on first use. `None` when it cannot be started
    /// (the commit is then left to the next synchronous one).
    fn start(&mut self) -> Option<&SyncSender<Job>> {
        if self.jobs.is_none() {
            let sender = self.sender.take()?;
            let (jobs, job_queue) = sync_channel::<Job>(1);
            let (answer_queue, answers) = sync_channel::<CommitAnswer>(1);
            let spawned = thread::Builder::new()
                .name(self.name.clone())
                .spawn(move || run(sender, job_queue, answer_queue));
            match spawned {
                Ok(handle) => {
                    self.thread = Some(handle);
                    self.jobs = Some(jobs);
                    self.answers = Some(answers);
                }
                Err(error) => {
                    log::error!("cannot start the commit thread: {error}");
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

fn thread_gone() -> CommitError {
    CommitError::Wire(WireError::Config(
        "the commit thread ended before answering".to_string(),
    ))
}

/// The commit thread: one job at a time, each answered.
fn run(mut send: Sender, jobs: Receiver<Job>, answers: SyncSender<CommitAnswer>) {
    while let Ok(job) = jobs.recv() {
        let answer = send(&job.identity, &job.offsets);
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
    Box::new(move |identity, offsets| {
        if client.is_none() {
            client = Some(Client::connect(client_config.clone()).map_err(CommitError::Wire)?);
        }
        let Some(connected) = client.as_mut() else {
            return Err(thread_gone());
        };
        let answer = commit_offsets(
            &mut |who, offsets| connected.offset_commit(who, offsets),
            &shared,
            &group_id,
            instance_id.as_deref(),
            identity,
            offsets,
            CommitKind::Paced,
        );
        if let Err(CommitError::Wire(_)) = &answer {
            // Timed out or refused as a whole: the next one asks who coordinates first.
            connected.invalidate_coordinator(&group_id);
        }
        answer
    })
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

    /// A coordinator that writes each commit it is given into `log` once the test lets it
    /// (one permit per commit), the way a coordinator answers only once its write is replicated.
    fn held_coordinator(log: Arc<Mutex<Vec<i64>>>) -> (Sender, std::sync::mpsc::Sender<()>) {
        let (permit, permits) = channel::<()>();
        let permits = Mutex::new(permits);
        let sender: Sender = Box::new(move |_, offsets| {
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
        let mut committer = Committer::with_sender("commit-test".into(), sender);
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
        let mut committer = Committer::with_sender("commit-test".into(), sender);
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
}
