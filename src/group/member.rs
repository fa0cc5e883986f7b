//! A group member as the poll thread sees it, for either protocol: [`Member`] implements
//! [`Membership`] over the session the membership thread shares with it, and `P` says what
//! differs between the protocols ([`Protocol`]: who runs the rounds, how the member leaves).
//! `ClassicMember` and `ConsumerGroupMember` are the two instances.
//!
//! Read it as one story (as franz-go's group consumer reads): [`Member::next_change`] reports
//! losses the other thread detected, hands out the change the membership decided (revoked, then
//! assigned) one event at a time, and, under the eager protocol, runs the round itself when the
//! group asks for it: revoke everything, join, (lead), sync (`round.rs`), hand out. Under the
//! cooperative protocol and KIP-848 the rounds run on the membership thread and this thread only
//! applies their decisions at its batch boundaries, so the partitions it keeps are processed
//! while the group rebalances.
//!
//! Every decision is the session's (`session::SessionState`): this file sends the requests,
//! feeds their answers in, and hands the poll thread the changes the session decided.
//!
//! # The hand-out
//!
//! [`Handout`] is how a member hands the poll thread what the session decided, one [`Change`]
//! at a time, and takes the acknowledgements back: the poll-thread half of the seam in
//! `changes.rs`, shared by every member type (both protocols, and the in-memory members of the
//! tests), so the order in which a change is handed out and acknowledged is written once.
//!
//! The order: losses first (a change may reassign the same partitions, and a loss reported
//! after it would mark them lost in the guard again), then the decided change's steps
//! (revocations before the assignment); an assignment whose generation ended while a revocation
//! ran is not handed out (the loss is, instead). Once the change's last step is acknowledged
//! the session clears it, which lets the membership send its next request (the cooperative
//! follow-up JoinGroup, KIP-848's acknowledging heartbeat).

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::assignor::RebalanceProtocol;
use super::changes::{
    Change, CommitKind, CommitResults, Decision, FenceHook, LostHook, MembershipView, Origin,
};
use super::commit::{commit_offsets, Committer, OffsetCommitSend};
use super::config::GroupConfig;
use super::error::{CommitError, GroupError};
use super::listener::{close_with, poll_with, RebalanceListener};
use super::membership::Membership;
use super::outcome::LostReason;
use super::requests::MemberIdentity;
use super::session::{GroupThread, NextStep, Phase, Shared, Timeouts};
use crate::guard::{lease_now, SessionBound};
use crate::wire::{self, Client, ClientConfig, FetchStats, Nudge, RecordSource};
use crate::TopicPartition;

/// What differs between the group protocols for the poll thread: whether it runs the rounds
/// (the classic eager protocol) and what leaving takes. Implemented by the two protocols only.
pub trait Protocol: fmt::Debug + Send + 'static {
    /// Eager or incremental.
    fn rebalance_protocol(&self) -> RebalanceProtocol;

    /// Eager only: one JoinGroup/SyncGroup round on the poll thread, whose decided change the
    /// session keeps for [`Member::next_change`] to hand out.
    #[doc(hidden)]
    fn run_round(&self, io: MemberIo<'_>, reason: &str) -> Result<(), Step>;

    /// Sends what leaving the group takes from the poll thread, once everything was handed
    /// back and the session closed.
    #[doc(hidden)]
    fn leave_group(&self, io: MemberIo<'_>, identity: &MemberIdentity) -> Result<(), GroupError>;
}

/// What the poll thread lends a protocol for one round or the LeaveGroup.
#[doc(hidden)]
pub struct MemberIo<'a> {
    pub(crate) client: &'a mut Client,
    pub(crate) shared: &'a Shared,
    pub(crate) config: &'a GroupConfig,
}

/// The outcome of a failed step of the membership (a round, a leave).
#[doc(hidden)]
#[derive(Debug)]
pub enum Step {
    /// Try again after a backoff (coordinator moved, rebalance in progress, member id required).
    Retry(String),
    /// Give up: the poll thread's caller gets the error.
    Fail(GroupError),
}

/// A consumer-group member with its membership thread, driven by the poll thread through
/// [`Membership`].
pub struct Member<P: Protocol> {
    config: GroupConfig,
    client: Client,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    protocol: P,
    /// The commit thread of paced commits; every synchronous commit waits for its commit in
    /// flight first (`committer.rs`).
    committer: Committer,
    /// What the session decided, handed out one change at a time.
    handout: Handout,
}

impl<P: Protocol> fmt::Debug for Member<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Member")
            .field("group_id", &self.config.group_id)
            .field("protocol", &self.protocol)
            .finish_non_exhaustive()
    }
}

/// The parts both protocols' constructors start from: a connected client, the shared session
/// whose clocks use `config`'s timeouts, and the commit thread.
pub(crate) struct Parts {
    pub(crate) client: Client,
    pub(crate) shared: Arc<Shared>,
    pub(crate) committer: Committer,
}

impl Parts {
    /// Connects and creates the session and the commit thread.
    pub(crate) fn connect(
        config: &GroupConfig,
        client_config: &ClientConfig,
        hook: LostHook,
    ) -> Result<Parts, GroupError> {
        let client = Client::connect(client_config.clone())?;
        let shared = Arc::new(Shared::new(hook, Timeouts::of(config)));
        let committer = Committer::new(
            shared.clone(),
            client_config,
            &config.group_id,
            config.group_instance_id.as_deref(),
        );
        Ok(Parts {
            client,
            shared,
            committer,
        })
    }
}

impl<P: Protocol> Member<P> {
    /// A member over `parts` whose membership thread is `thread`.
    pub(crate) fn from_parts(
        config: GroupConfig,
        parts: Parts,
        thread: JoinHandle<()>,
        protocol: P,
    ) -> Self {
        Member {
            config,
            client: parts.client,
            shared: parts.shared,
            thread: Some(thread),
            protocol,
            committer: parts.committer,
            handout: Handout::default(),
        }
    }

    /// The group's configuration.
    pub fn config(&self) -> &GroupConfig {
        &self.config
    }

    /// The poll thread's wire client (the one every broker request of this thread uses).
    pub fn wire_client(&mut self) -> &mut Client {
        &mut self.client
    }

    /// True while we are in a generation with nothing pending.
    pub fn is_stable(&self) -> bool {
        self.shared.lock().is_stable()
    }

    /// Applies every change through `listener`'s callbacks until the member is stable or
    /// `timeout` passed (see [`poll_with`]): for group-level tests and tools without a consumer.
    pub fn poll(
        &mut self,
        listener: &mut dyn RebalanceListener,
        timeout: Duration,
    ) -> Result<(), GroupError> {
        poll_with(self, listener, timeout)
    }

    /// Hands everything back through `listener`, then leaves (see [`close_with`]).
    pub fn close(&mut self, listener: &mut dyn RebalanceListener) -> Result<(), GroupError> {
        close_with(self, listener)
    }

    /// True when the group wants us to rejoin (a rebalance is in progress).
    pub fn rejoin_pending(&self) -> bool {
        self.shared.lock().rejoin_reason().is_some()
    }

    /// Cooperative and KIP-848: waits until the membership thread has something for this
    /// thread (a decided change, a loss, a failure) or the member is stable, closed, or
    /// `deadline` passed. False when the deadline passed first.
    fn wait_for_the_membership(&mut self, deadline: Option<Instant>) -> bool {
        let mut state = self.shared.lock();
        loop {
            if state.pending().is_some()
                || state.has_reports()
                || self.shared.has_failure()
                || !matches!(state.next_step(), NextStep::Join(_))
            {
                return true;
            }
            if self.shared.take_nudge() {
                return false;
            }
            let wait = match deadline {
                None => Duration::from_secs(1),
                Some(deadline) => match deadline.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => left,
                    _ => return false,
                },
            };
            state = self.shared.wait(state, wait);
        }
    }

    /// Fails once the membership thread or the commit thread is gone while the member is open:
    /// a panic was turned into a loss of everything owned when it happened
    /// (`Shared::run_thread`); a thread that ended without one is treated the same way here.
    /// The poll loop must not go on with a membership nobody maintains, or with work nobody
    /// can commit.
    fn threads_alive(&mut self) -> Result<(), GroupError> {
        let mut state = self.shared.lock();
        if state.died().is_none() && state.phase() != Phase::Closed {
            let ended = "the thread ended while the member was open".to_string();
            if self.thread.as_ref().is_some_and(JoinHandle::is_finished) {
                state.thread_died(GroupThread::Membership, ended);
            } else if self.committer.ended() {
                state.thread_died(GroupThread::Commit, ended);
            }
        }
        match state.died() {
            Some(death) => Err(death.error()),
            None => Ok(()),
        }
    }

    fn stop_membership_thread(&mut self) {
        if let Some(handle) = self.thread.take() {
            let _ = handle.join();
        }
    }
}

impl<P: Protocol> Membership for Member<P> {
    fn next_change(&mut self, timeout: Duration) -> Result<Option<Change>, GroupError> {
        // No deadline when the timeout reaches past what an Instant can hold (Duration::MAX).
        let deadline = Instant::now().checked_add(timeout);
        let passed = |deadline: Option<Instant>, after: Duration| {
            deadline.is_some_and(|d| Instant::now().checked_add(after).is_none_or(|t| t >= d))
        };
        let mut backoff = Duration::from_millis(50);
        loop {
            self.handout.take_reports(&self.shared)?;
            if let Some(loss) = self.handout.next_loss() {
                return Ok(Some(loss));
            }
            if let Some(fatal) = self.handout.take_fatal() {
                return Err(fatal);
            }
            self.threads_alive()?;
            if let Some(change) = self.handout.next(&self.shared) {
                return Ok(Some(change));
            }
            let reason = match self.shared.lock().next_step() {
                NextStep::Closed => return Err(GroupError::Closed),
                NextStep::Stable => return Ok(None),
                NextStep::Join(reason) => reason,
            };
            if self.shared.lock().rounds_beside() {
                if !self.wait_for_the_membership(deadline) {
                    return Ok(None);
                }
                continue;
            }
            // Eager: hand everything back first, then run the round on this thread.
            let protocol = self.protocol.rebalance_protocol();
            let group_id = &self.config.group_id;
            if let Some(revoke) =
                self.handout
                    .revoke_before_join(&self.shared, protocol, group_id, &reason)
            {
                return Ok(Some(revoke));
            }
            let round = self.protocol.run_round(
                MemberIo {
                    client: &mut self.client,
                    shared: &self.shared,
                    config: &self.config,
                },
                &reason,
            );
            match round {
                Ok(()) => {
                    backoff = Duration::from_millis(50);
                    continue;
                }
                Err(Step::Retry(why)) => {
                    log::info!("group {}: {why}; retrying", self.config.group_id);
                }
                Err(Step::Fail(error)) => return Err(error),
            }
            if passed(deadline, backoff) {
                return Ok(None);
            }
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }

    fn acknowledge(&mut self, change: Change) {
        self.handout.acknowledge(&self.shared, change);
    }

    fn closing(&mut self) -> Vec<Change> {
        self.handout.closing(&self.shared)
    }

    fn leave(&mut self) -> Result<(), GroupError> {
        let identity = self.identity();
        let beside = self.shared.lock().rounds_beside();
        self.shared.lock().close();
        self.shared.wake.notify_all();
        // Rounds beside the poll loop: the membership thread may be inside a JoinGroup the
        // coordinator holds until the group re-forms; leaving first ends that wait (the
        // coordinator answers it) instead of making close wait for the whole rebalance. Eager:
        // no round can be running (this thread runs them), and no heartbeat goes out after the
        // LeaveGroup.
        if !beside {
            self.stop_membership_thread();
        }
        let io = MemberIo {
            client: &mut self.client,
            shared: &self.shared,
            config: &self.config,
        };
        let left = self.protocol.leave_group(io, &identity);
        self.stop_membership_thread();
        left
    }

    fn commit_as(
        &mut self,
        identity: &MemberIdentity,
        offsets: &[wire::OffsetCommitEntry],
        kind: CommitKind,
    ) -> Result<CommitResults, CommitError> {
        // On the commit thread, behind the paced commit in flight (if any): see `commit.rs`.
        self.committer.commit(identity, offsets, kind)
    }

    fn commit_through(
        &mut self,
        identity: &MemberIdentity,
        offsets: &[wire::OffsetCommitEntry],
        kind: CommitKind,
        send: &mut OffsetCommitSend<'_>,
    ) -> Result<CommitResults, CommitError> {
        self.committer.settle();
        commit_offsets(
            send,
            &self.shared,
            &self.config.group_id,
            self.config.group_instance_id.as_deref(),
            identity,
            offsets,
            kind,
        )
    }

    fn commit_in_background(
        &mut self,
        offsets: Vec<wire::OffsetCommitEntry>,
    ) -> Result<(), Vec<wire::OffsetCommitEntry>> {
        let identity = self.identity();
        self.committer.send(identity, offsets)
    }

    fn commit_answer(&mut self) -> Option<Result<CommitResults, CommitError>> {
        self.committer.answer()
    }

    fn settle_commit(&mut self) {
        self.committer.settle();
    }

    fn commit_in_flight(&self) -> bool {
        self.committer.in_flight()
    }

    fn records(&mut self) -> &mut dyn RecordSource {
        &mut self.client
    }

    fn fetch_stats(&self) -> FetchStats {
        self.client.fetch_stats()
    }

    fn identity(&self) -> MemberIdentity {
        self.shared.lock().identity().clone()
    }

    fn owned(&self) -> Vec<TopicPartition> {
        self.shared.lock().owned().to_vec()
    }

    fn rebalance_protocol(&self) -> RebalanceProtocol {
        self.protocol.rebalance_protocol()
    }

    fn may_fetch(&self) -> bool {
        self.shared.lock().may_fetch()
    }

    fn batch_boundary_due(&self) -> bool {
        self.shared.lock().boundary_due()
    }

    fn enter_poll(&self) {
        let first = self.shared.lock().enter_poll();
        if first {
            // The first round waits for the first poll (`round_due`); the membership thread
            // may be asleep until its next heartbeat tick (`heartbeat.interval.ms`), which
            // would hold the join back that long when the application polls late (a
            // transactional consumer polls after `init_transactions`).
            self.shared.wake.notify_all();
        }
    }

    fn leave_poll(&self) {
        self.shared.lock().leave_poll(lease_now());
    }

    fn wait_while_session_lapsed(&self, bound: &SessionBound, timeout: Duration) {
        let deadline = Instant::now().checked_add(timeout);
        let mut state = self.shared.lock();
        loop {
            let now = Instant::now();
            if !bound.is_expired_now()
                || state.has_reports()
                || state.pending().is_some()
                || state.died().is_some()
                || state.phase() == Phase::Closed
                || self.shared.has_failure()
                || self.shared.take_nudge()
            {
                return;
            }
            let left = match deadline {
                Some(deadline) => deadline.saturating_duration_since(now),
                None => Duration::from_secs(1),
            };
            if left.is_zero() {
                return;
            }
            // A renewal does not wake the condvar: check the bound at least every 50 ms.
            state = self.shared.wait(state, left.min(Duration::from_millis(50)));
        }
    }

    fn nudge(&self) -> Nudge {
        let shared = self.shared.clone();
        Arc::new(move || shared.nudge())
    }

    fn view(&self) -> MembershipView {
        let shared = self.shared.clone();
        MembershipView::new(move || {
            let state = shared.lock();
            (state.identity().clone(), state.owned().to_vec())
        })
    }

    fn bound_session(&self, bound: Arc<SessionBound>) {
        self.shared.lock().bound_session(bound);
    }

    fn fence_revocations_with(&self, hook: FenceHook) {
        self.shared.lock().fence_revocations_with(hook);
    }

    fn panic_membership_thread(&self) {
        self.shared.request_panic(GroupThread::Membership);
    }

    fn panic_commit_thread(&self) {
        self.shared.request_panic(GroupThread::Commit);
    }
}

impl<P: Protocol> Drop for Member<P> {
    fn drop(&mut self) {
        let beside = {
            let mut state = self.shared.lock();
            state.close();
            state.rounds_beside()
        };
        self.shared.wake.notify_all();
        if let Some(handle) = self.thread.take() {
            // Rounds beside: the membership thread may be in a JoinGroup the coordinator holds
            // for up to the rebalance timeout; it sees the member closed when the answer comes
            // and exits then, sending nothing more. Dropping does not wait for that.
            if !beside {
                let _ = handle.join();
            }
        }
    }
}

/// The changes waiting for the poll thread, and the one being handed out.
#[derive(Debug, Default)]
pub(crate) struct Handout {
    /// Losses taken from the session, not handed out yet.
    losses: VecDeque<Change>,
    /// The decision being handed out: an acknowledgement applies to it only while the session
    /// still has it pending (a loss voids it, even if the same identity is decided again).
    decision: Option<Decision>,
    /// Its steps not handed out yet, in order.
    applying: VecDeque<Change>,
    /// Eager: the revocation before the join was handed out and not acknowledged yet.
    revoking_before_join: bool,
    /// A fatal error the session recorded: returned once the losses before it were handed out.
    fatal: Option<GroupError>,
}

impl Handout {
    /// Takes the losses and the fatal error the session recorded; a failure of the membership
    /// thread is returned at once. The losses wait to be handed out, and the fatal error for
    /// [`take_fatal`](Self::take_fatal) after them (the partitions are reported lost first).
    pub(crate) fn take_reports(&mut self, shared: &Shared) -> Result<(), GroupError> {
        if let Some(failure) = shared.take_failure() {
            return Err(failure);
        }
        let (lost, fatal) = shared.lock().take_reports();
        self.queue_losses(lost);
        if let Some(fatal) = fatal {
            self.fatal.get_or_insert(GroupError::Fatal(fatal));
        }
        Ok(())
    }

    /// The next loss to hand out, if any.
    pub(crate) fn next_loss(&mut self) -> Option<Change> {
        self.losses.pop_front()
    }

    /// The fatal error, once every loss before it was handed out.
    pub(crate) fn take_fatal(&mut self) -> Option<GroupError> {
        if self.losses.is_empty() {
            self.fatal.take()
        } else {
            None
        }
    }

    fn queue_losses(&mut self, lost: Vec<(Vec<TopicPartition>, LostReason)>) {
        // Each loss is reported sorted (`SessionState::lose`); an empty one (nothing was owned)
        // is not reported.
        for (partitions, reason) in lost {
            if !partitions.is_empty() {
                self.losses.push_back(Change::Lost { partitions, reason });
            }
        }
    }

    /// The next loss or step of the decided change (taking it from the session when none is
    /// being handed out), or `None` when there is none.
    pub(crate) fn next(&mut self, shared: &Shared) -> Option<Change> {
        if self.decision.is_none() {
            let (lost, decided) = shared.lock().take_change();
            self.queue_losses(lost);
            self.decision = decided.first().and_then(Change::decision).cloned();
            self.applying = decided.into();
        }
        if let Some(loss) = self.losses.pop_front() {
            return Some(loss);
        }
        let decision = self.decision.as_ref()?;
        match self.applying.pop_front() {
            Some(assign @ Change::Assign { .. }) => {
                let assigning = match (&assign, decision.id()) {
                    (Change::Assign { identity, .. }, Some(id)) => {
                        let mut state = shared.lock();
                        state.still_pending(id) && state.assigning(identity, decision)
                    }
                    _ => false,
                };
                if !assigning {
                    // Lost while the revocation ran: the loss is handed out instead.
                    self.applying.clear();
                    self.finish(shared);
                    return self.next(shared);
                }
                Some(assign)
            }
            Some(change) => Some(change),
            None => {
                self.finish(shared);
                None
            }
        }
    }

    /// The decided change was applied (or stopped by a loss): the session clears it, and the
    /// membership thread is woken for its next request.
    fn finish(&mut self, shared: &Shared) {
        if let Some(decision) = self.decision.take() {
            shared.lock().changes_applied(&decision);
            shared.wake.notify_all();
        }
    }

    /// A change handed out was applied and comes back: the session records a revocation, and
    /// the decided change is cleared once its last step was acknowledged.
    pub(crate) fn acknowledge(&mut self, shared: &Shared, change: Change) {
        if let Change::Revoke {
            identity,
            partitions,
            decision,
            ..
        } = &change
        {
            match &decision.0 {
                Origin::Session { id, .. } => {
                    let mut state = shared.lock();
                    // Voided by a loss since: the loss took everything, and what the session
                    // owns now was decided after it.
                    if state.still_pending(*id) {
                        state.revoked(identity, partitions);
                    }
                }
                Origin::BeforeJoin => {
                    self.revoking_before_join = false;
                    shared.lock().revoked_before_join();
                }
                Origin::Closing | Origin::Manual => {}
            }
        }
        if self.decision.is_some() && self.applying.is_empty() {
            self.finish(shared);
        }
    }

    /// Eager: the revocation of everything before the JoinGroup, while the old generation is
    /// still valid for commits, fenced now; `None` when nothing is owned or it was handed out
    /// already (the round runs once it is acknowledged).
    pub(crate) fn revoke_before_join(
        &mut self,
        shared: &Shared,
        protocol: RebalanceProtocol,
        group_id: &str,
        reason: &str,
    ) -> Option<Change> {
        if self.revoking_before_join {
            return None;
        }
        let revoke = shared.lock().revoke_before_join(protocol);
        if revoke.partitions.is_empty() {
            return None;
        }
        log::info!(
            "group {group_id}: revoking {} partition(s) before rejoining ({reason})",
            revoke.partitions.len()
        );
        self.revoking_before_join = true;
        let fenced = shared.lock().fence_now(&revoke.partitions);
        Some(Change::Revoke {
            identity: revoke.identity,
            partitions: revoke.partitions,
            fenced,
            decision: Decision(Origin::BeforeJoin),
        })
    }

    /// Closing: the losses not handed out, then the revocation of everything still owned, in
    /// the current generation, fenced now.
    pub(crate) fn closing(&mut self, shared: &Shared) -> Vec<Change> {
        let _ = self.take_reports(shared);
        let mut changes: Vec<Change> = self.losses.drain(..).collect();
        let Some((identity, partitions)) = shared.lock().leave() else {
            return changes;
        };
        if !partitions.is_empty() {
            let fenced = shared.lock().fence_now(&partitions);
            changes.push(Change::Revoke {
                identity,
                partitions,
                fenced,
                decision: Decision(Origin::Closing),
            });
        }
        changes
    }
}
