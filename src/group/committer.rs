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

use super::commit::{commit_offsets, CommitResults};
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

/// What the thread needs to commit for the group.
struct Settings {
    shared: Arc<Shared>,
    client_config: ClientConfig,
    group_id: String,
    instance_id: Option<String>,
}

/// The poll thread's handle on the commit thread, which starts with the first paced commit.
pub(crate) struct Committer {
    settings: Option<Settings>,
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
        Committer {
            settings: Some(Settings {
                shared,
                client_config,
                group_id: group_id.to_string(),
                instance_id: instance_id.map(str::to_string),
            }),
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
            let settings = self.settings.take()?;
            let (jobs, job_queue) = sync_channel::<Job>(1);
            let (answer_queue, answers) = sync_channel::<CommitAnswer>(1);
            let spawned = thread::Builder::new()
                .name(format!("commit-{}", settings.group_id))
                .spawn(move || run(settings, job_queue, answer_queue));
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
fn run(settings: Settings, jobs: Receiver<Job>, answers: SyncSender<CommitAnswer>) {
    let mut client: Option<Client> = None;
    while let Ok(job) = jobs.recv() {
        if client.is_none() {
            match Client::connect(settings.client_config.clone()) {
                Ok(connected) => client = Some(connected),
                Err(error) => {
                    if answers.send(Err(CommitError::Wire(error))).is_err() {
                        return;
                    }
                    continue;
                }
            }
        }
        let Some(client) = client.as_mut() else {
            continue;
        };
        let answer = commit_offsets(
            client,
            &settings.shared,
            &settings.group_id,
            settings.instance_id.as_deref(),
            &job.identity,
            &job.offsets,
            true,
        );
        if let Err(CommitError::Wire(_)) = &answer {
            // Timed out or refused as a whole: the next one asks who coordinates first.
            client.invalidate_coordinator(&settings.group_id);
        }
        if answers.send(answer).is_err() {
            return;
        }
    }
}
