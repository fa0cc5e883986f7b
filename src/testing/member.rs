//! What every in-memory member shares, whatever its protocol: the [`Membership`] the consumer
//! drives (the real hand-out of changes, the real commit checks, a paced commit a test may hold
//! in flight, a [`Journal`] of what the member did), over a protocol's [`Steps`] (its membership
//! thread's turn, its OffsetCommit, its leave) against an in-memory coordinator.

use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::memory_log::InMemoryLog;
use crate::group::assignor::RebalanceProtocol;
use crate::group::commit::{commit_offsets, OffsetCommitSend};
use crate::group::member::Handout;
use crate::group::requests::MemberIdentity;
use crate::group::session::{GroupThread, Shared};
use crate::group::{
    Change, CommitError, CommitKind, CommitResults, FenceHook, GroupConfig, GroupError, Membership,
    MembershipView,
};
use crate::guard::SessionBound;
use crate::wire::{CommitIdentity, OffsetCommitEntry, RecordSource, WireError};
use crate::TopicPartition;

/// What a member did, in order, as the coordinator and the membership thread would see it: the
/// commits it sent and the changes the poll thread acknowledged. A test reads it to check the
/// handoff's order (a revocation is acknowledged, which lets the membership give the partitions
/// away, only after its commit was answered).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Journal {
    /// An OffsetCommit answered: the generation (or member epoch) it carried, and each
    /// partition's offset with whether it was accepted.
    Committed {
        /// The generation the commit carried.
        generation_id: i32,
        /// Each partition, its offset, and whether it was stored.
        offsets: Vec<(TopicPartition, i64, bool)>,
    },
    /// The poll thread acknowledged the revocation of these partitions (an empty list: of
    /// everything, before an eager JoinGroup or when closing).
    RevocationAcknowledged(Vec<TopicPartition>),
    /// The poll thread acknowledged an assignment.
    AssignmentAcknowledged,
}

impl Journal {
    fn committed(
        who: &CommitIdentity<'_>,
        offsets: &[OffsetCommitEntry],
        results: &CommitResults,
    ) -> Journal {
        Journal::Committed {
            generation_id: who.generation_id_or_member_epoch,
            offsets: offsets
                .iter()
                .map(|o| {
                    let stored = results.iter().any(|(tp, r)| *tp == o.tp && r.is_ok());
                    (o.tp.clone(), o.offset, stored)
                })
                .collect(),
        }
    }

    fn acknowledged(change: &Change) -> Journal {
        match change.revoked() {
            Some(partitions) => Journal::RevocationAcknowledged(partitions),
            None => Journal::AssignmentAcknowledged,
        }
    }
}

/// What the poll thread's own turn did (see [`Steps::poll_turn`]).
pub(crate) enum PollTurn {
    /// A change to hand out now (an eager member's revocation before its JoinGroup).
    Hand(Change),
    /// The member moved on (an eager round advanced): look for changes again.
    Progressed,
    /// Nothing for the poll thread to do itself.
    Idle,
}

/// One protocol's side of an in-memory member: the session it drives, its membership thread's
/// turn, and its requests to the in-memory coordinator.
pub(crate) trait Steps: Send + 'static {
    /// The session the member shares with the poll thread.
    fn shared(&self) -> &Arc<Shared>;

    /// The group's settings.
    fn config(&self) -> &GroupConfig;

    /// Eager or incremental.
    fn rebalance_protocol(&self) -> RebalanceProtocol;

    /// The membership thread's turn: heartbeats, rounds beside the poll loop, the machine.
    fn step(&mut self);

    /// What the poll thread does itself before the membership thread's turn (the classic
    /// eager protocol runs its rounds there).
    fn poll_turn(&mut self, _handout: &mut Handout) -> Result<PollTurn, GroupError> {
        Ok(PollTurn::Idle)
    }

    /// One OffsetCommit as the coordinator answers it (stored in the log where accepted).
    fn send_commit(
        &self,
        who: &CommitIdentity<'_>,
        offsets: &[OffsetCommitEntry],
    ) -> Result<CommitResults, WireError>;

    /// Leaves the group, once the session was closed.
    fn leave(&mut self);
}

/// The paced commit: answered at once, or (held) in flight on a thread of its own as on the
/// commit thread: checked against the session when sent, answered by the coordinator when
/// released.
#[derive(Default)]
struct Paced {
    /// The held commit's thread, and what lets its request reach the coordinator (dropped to
    /// release it).
    in_flight: Option<(JoinHandle<()>, Sender<()>)>,
    answer: Option<Result<CommitResults, CommitError>>,
    hold: bool,
}

/// Lets the held paced commit reach the coordinator and waits for its answer.
fn release_paced<P>(shell: &Mutex<Shell<P>>) {
    let in_flight = lock(shell).paced.in_flight.take();
    if let Some((thread, release)) = in_flight {
        drop(release);
        let _ = thread.join();
    }
}

/// A member's state behind the lock the consumer's member and the test's handle share.
pub(crate) struct Shell<P> {
    steps: P,
    handout: Handout,
    paced: Paced,
    journal: Vec<Journal>,
}

impl<P: Steps> Shell<P> {
    /// A member over `steps`, and the test's handle on it.
    pub(crate) fn member(steps: P, log: InMemoryLog) -> (Box<dyn Membership>, MemberHandle) {
        let shell = Arc::new(Mutex::new(Shell {
            steps,
            handout: Handout::default(),
            paced: Paced::default(),
            journal: Vec::new(),
        }));
        let member = InMemoryMember {
            shell: shell.clone(),
            log,
        };
        (Box::new(member), MemberHandle(shell))
    }

    fn shared(&self) -> Arc<Shared> {
        self.steps.shared().clone()
    }

    /// One OffsetCommit sent to the coordinator by the protocol, and journaled.
    fn send_and_journal(
        &mut self,
        who: &CommitIdentity<'_>,
        offsets: &[OffsetCommitEntry],
    ) -> Result<CommitResults, WireError> {
        let results = self.steps.send_commit(who, offsets)?;
        self.journal
            .push(Journal::committed(who, offsets, &results));
        Ok(results)
    }

    /// A commit through the real checks (`commit_offsets`), sent by [`send_and_journal`].
    ///
    /// [`send_and_journal`]: Self::send_and_journal
    fn commit_as(
        &mut self,
        identity: &MemberIdentity,
        offsets: &[OffsetCommitEntry],
        kind: CommitKind,
    ) -> Result<CommitResults, CommitError> {
        let (shared, config) = (self.shared(), self.steps.config().clone());
        commit_offsets(
            &mut |who: &CommitIdentity<'_>, offsets: &[OffsetCommitEntry]| {
                self.send_and_journal(who, offsets)
                    .map_err(CommitError::Wire)
            },
            &shared,
            &config.group_id,
            config.group_instance_id.as_deref(),
            identity,
            offsets,
            kind,
        )
    }

    fn commit_through(
        &mut self,
        identity: &MemberIdentity,
        offsets: &[OffsetCommitEntry],
        kind: CommitKind,
        send: &mut OffsetCommitSend<'_>,
    ) -> Result<CommitResults, CommitError> {
        let (shared, config) = (self.shared(), self.steps.config().clone());
        commit_offsets(
            send,
            &shared,
            &config.group_id,
            config.group_instance_id.as_deref(),
            identity,
            offsets,
            kind,
        )
    }
}

/// What a test holds of a member the consumer owns, whatever its protocol.
#[derive(Clone)]
pub struct MemberHandle(Arc<dyn Handled>);

/// The handle's view of a member's state (one implementation per protocol's shell).
trait Handled: Send + Sync {
    fn step(&self);
    fn identity(&self) -> MemberIdentity;
    fn journal(&self) -> Vec<Journal>;
    fn hold_paced(&self, hold: bool);
    fn paced_in_flight(&self) -> bool;
}

impl<P: Steps> Handled for Mutex<Shell<P>> {
    fn step(&self) {
        lock(self).steps.step();
    }

    fn identity(&self) -> MemberIdentity {
        lock(self).shared().lock().identity().clone()
    }

    fn journal(&self) -> Vec<Journal> {
        lock(self).journal.clone()
    }

    fn hold_paced(&self, hold: bool) {
        lock(self).paced.hold = hold;
        if !hold {
            release_paced(self);
        }
    }

    fn paced_in_flight(&self) -> bool {
        lock(self).paced.in_flight.is_some()
    }
}

/// Locks what a test and its members share (a coordinator, a member's shell): nothing runs
/// under these locks that can leave them half-changed, so a poisoned one is still sound.
pub(crate) fn lock<T>(shared: &Mutex<T>) -> MutexGuard<'_, T> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

impl MemberHandle {
    /// One turn of the membership thread, as it would take it while the poll thread is inside
    /// a batch.
    pub fn step(&self) {
        self.0.step();
    }

    /// The member's identity now.
    pub fn identity(&self) -> MemberIdentity {
        self.0.identity()
    }

    /// Everything the member did so far, in order (see [`Journal`]).
    pub fn journal(&self) -> Vec<Journal> {
        self.0.journal()
    }

    /// Holds paced commits in flight (the commit thread's request not answered) until
    /// [`release_paced`](Self::release_paced) or a synchronous commit, which waits for it.
    pub fn hold_paced(&self) {
        self.0.hold_paced(true);
    }

    /// Answers the paced commit in flight now (checked against the coordinator as it is now).
    pub fn release_paced(&self) {
        self.0.hold_paced(false);
    }

    /// True while a paced commit was sent and not answered.
    pub fn paced_in_flight(&self) -> bool {
        self.0.paced_in_flight()
    }
}

/// The member the consumer owns, and its record source.
struct InMemoryMember<P> {
    shell: Arc<Mutex<Shell<P>>>,
    log: InMemoryLog,
}

impl<P: Steps> InMemoryMember<P> {
    fn shell(&self) -> MutexGuard<'_, Shell<P>> {
        lock(&self.shell)
    }

    fn shared(&self) -> Arc<Shared> {
        self.shell().shared()
    }
}

impl<P: Steps> Membership for InMemoryMember<P> {
    /// Losses, then the decided change, as the real member hands them out; then the poll
    /// thread's own turn (an eager round), then one turn of the membership thread, and what it
    /// decided is handed out at once.
    fn next_change(&mut self, _timeout: Duration) -> Result<Option<Change>, GroupError> {
        let mut shell = self.shell();
        let shell = &mut *shell;
        let shared = shell.shared();
        let (mut turned, mut stepped) = (false, false);
        loop {
            shell.handout.take_reports(&shared)?;
            if let Some(loss) = shell.handout.next_loss() {
                return Ok(Some(loss));
            }
            if let Some(fatal) = shell.handout.take_fatal() {
                return Err(fatal);
            }
            if let Some(change) = shell.handout.next(&shared) {
                return Ok(Some(change));
            }
            if !turned {
                turned = true;
                match shell.steps.poll_turn(&mut shell.handout)? {
                    PollTurn::Hand(change) => return Ok(Some(change)),
                    PollTurn::Progressed => continue,
                    PollTurn::Idle => {}
                }
            }
            if stepped {
                return Ok(None);
            }
            shell.steps.step();
            stepped = true;
        }
    }

    fn acknowledge(&mut self, change: Change) {
        let mut shell = self.shell();
        let shared = shell.shared();
        shell.journal.push(Journal::acknowledged(&change));
        shell.handout.acknowledge(&shared, change);
    }

    fn closing(&mut self) -> Vec<Change> {
        let mut shell = self.shell();
        let shared = shell.shared();
        shell.handout.closing(&shared)
    }

    fn leave(&mut self) -> Result<(), GroupError> {
        let mut shell = self.shell();
        shell.shared().lock().close();
        shell.steps.leave();
        Ok(())
    }

    fn commit_as(
        &mut self,
        identity: &MemberIdentity,
        offsets: &[OffsetCommitEntry],
        kind: CommitKind,
    ) -> Result<CommitResults, CommitError> {
        // A synchronous commit waits for the paced one in flight: it is answered first.
        release_paced(&self.shell);
        self.shell().commit_as(identity, offsets, kind)
    }

    fn commit_through(
        &mut self,
        identity: &MemberIdentity,
        offsets: &[OffsetCommitEntry],
        kind: CommitKind,
        send: &mut OffsetCommitSend<'_>,
    ) -> Result<CommitResults, CommitError> {
        release_paced(&self.shell);
        self.shell().commit_through(identity, offsets, kind, send)
    }

    fn commit_in_background(
        &mut self,
        offsets: Vec<OffsetCommitEntry>,
    ) -> Result<(), Vec<OffsetCommitEntry>> {
        let mut shell = self.shell();
        if shell.paced.in_flight.is_some() || shell.paced.answer.is_some() {
            return Err(offsets);
        }
        let identity = shell.shared().lock().identity().clone();
        if !shell.paced.hold {
            let answer = shell.commit_as(&identity, &offsets, CommitKind::Paced);
            shell.paced.answer = Some(answer);
            return Ok(());
        }
        // Held: sent now on a thread of its own, as the commit thread sends it (the session's
        // check passes or refuses it now); its request reaches the coordinator when released.
        let (shared, config) = (shell.shared(), shell.steps.config().clone());
        drop(shell);
        let (sent_tx, sent_rx) = mpsc::channel::<()>();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let member = self.shell.clone();
        let thread = thread::spawn(move || {
            let answer = commit_offsets(
                &mut |who: &CommitIdentity<'_>, offsets: &[OffsetCommitEntry]| {
                    let _ = sent_tx.send(());
                    let _ = release_rx.recv();
                    lock(&member)
                        .send_and_journal(who, offsets)
                        .map_err(CommitError::Wire)
                },
                &shared,
                &config.group_id,
                config.group_instance_id.as_deref(),
                &identity,
                &offsets,
                CommitKind::Paced,
            );
            lock(&member).paced.answer = Some(answer);
        });
        // On its way (or refused by the session at once) before this returns.
        let _ = sent_rx.recv();
        self.shell().paced.in_flight = Some((thread, release_tx));
        Ok(())
    }

    fn commit_answer(&mut self) -> Option<Result<CommitResults, CommitError>> {
        self.shell().paced.answer.take()
    }

    fn settle_commit(&mut self) {
        release_paced(&self.shell);
    }

    fn commit_in_flight(&self) -> bool {
        let shell = self.shell();
        shell.paced.in_flight.is_some() || shell.paced.answer.is_some()
    }

    fn records(&mut self) -> &mut dyn RecordSource {
        &mut self.log
    }

    fn identity(&self) -> MemberIdentity {
        self.shared().lock().identity().clone()
    }

    fn owned(&self) -> Vec<TopicPartition> {
        self.shared().lock().owned().to_vec()
    }

    fn rebalance_protocol(&self) -> RebalanceProtocol {
        self.shell().steps.rebalance_protocol()
    }

    fn may_fetch(&self) -> bool {
        self.shared().lock().may_fetch()
    }

    fn batch_boundary_due(&self) -> bool {
        self.shared().lock().boundary_due()
    }

    fn enter_poll(&self) {
        self.shared().lock().enter_poll();
    }

    fn leave_poll(&self) {
        self.shared().lock().leave_poll(Instant::now());
    }

    /// Nothing to wait for: the test drives every member's turns itself.
    fn wait_while_session_lapsed(&self, _bound: &SessionBound, _timeout: Duration) {}

    fn nudge(&self) -> crate::wire::Nudge {
        // Driven turn by turn: the poll thread never waits on an in-memory member.
        std::sync::Arc::new(|| {})
    }

    fn view(&self) -> MembershipView {
        let shared = self.shared();
        MembershipView::new(move || {
            let state = shared.lock();
            (state.identity().clone(), state.owned().to_vec())
        })
    }

    fn bound_session(&self, bound: Arc<SessionBound>) {
        self.shared().lock().bound_session(bound);
    }

    fn fence_revocations_with(&self, hook: FenceHook) {
        self.shared().lock().fence_revocations_with(hook);
    }

    fn panic_membership_thread(&self) {
        self.shared().request_panic(GroupThread::Membership);
    }
}
