//! A member of a consumer group under the classic protocol, as the poll thread sees it.
//!
//! Read it as one story (as franz-go's group consumer reads): [`GroupMember::poll`] reports
//! losses the other thread detected, applies the change the membership decided (revoked, then
//! assigned, through the listener), and, under the eager protocol, runs the round itself when
//! the group asks for it: revoke everything, join, (lead), sync (`round.rs`), apply. Under the
//! cooperative protocol the rounds run on the membership thread (`heartbeat.rs`) and this thread
//! only applies their decisions at its batch boundaries (`changes.rs`), so the partitions it
//! keeps are processed while the group rebalances. Listener callbacks run on the poll thread,
//! one at a time; revoked and lost are separate callbacks and never run concurrently.
//!
//! Every decision is the session's (`session::SessionState`): this file sends the
//! requests, feeds their answers in, and runs the callbacks the session returns.

use std::fmt;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::assignor::{select_protocol, RebalanceProtocol, Strategy};
use super::changes::FenceHook;
pub(crate) use super::commit::CommitResults;
pub use super::commit::GroupContext;
use super::commit::{commit_offsets, CommitKind};
use super::committer::{CommitAnswer, Committer};
use super::consumer_protocol::Subscription;
pub use super::error::{CommitError, GroupError};
use super::heartbeat::{self, HeartbeatSettings};
use super::membership::{on_lost, RebalanceEvent};
use super::requests::{self, MemberIdentity};
use super::round::{Round, Step};
use super::session::{LostHook, LostReason, NextStep, Phase, Shared, Timeouts};
use crate::wire::{self, Client, ClientConfig, KafkaCode};
use crate::TopicPartition;

/// What a group member needs to know beyond the connection settings.
#[derive(Clone, Debug)]
pub struct GroupConfig {
    /// `group.id`.
    pub group_id: String,
    /// `group.instance.id`: static membership (KIP-345).
    pub group_instance_id: Option<String>,
    /// The subscribed topics.
    pub topics: Vec<String>,
    /// `partition.assignment.strategy`, in preference order; checked against the list rules
    /// (`check_strategies`) by [`GroupMember::new`].
    pub strategies: Vec<Strategy>,
    /// `session.timeout.ms`.
    pub session_timeout: Duration,
    /// `heartbeat.interval.ms`.
    pub heartbeat_interval: Duration,
    /// `max.poll.interval.ms`, also the rebalance timeout (as in Java).
    pub max_poll_interval: Duration,
}
/// Receives the membership's events on the poll thread.
///
/// Revocation callbacks get a [`GroupContext`] whose `commit` carries the generation the
/// partitions were owned in, so a synchronous commit there is fenced correctly by the broker.
pub trait RebalanceListener {
    /// These partitions are handed back: flush and commit them now, synchronously.
    fn on_partitions_revoked(&mut self, ctx: &mut GroupContext<'_>, partitions: &[TopicPartition]);
    /// These partitions are ours from now on (under cooperative rebalancing: only the new ones).
    fn on_partitions_assigned(&mut self, ctx: &mut GroupContext<'_>, partitions: &[TopicPartition]);
    /// These partitions were taken away without a handoff: do not commit them. They were already
    /// fenced through the [`LostHook`] when the loss was detected.
    fn on_partitions_lost(&mut self, partitions: &[TopicPartition], reason: &LostReason);
}

/// A consumer-group member (classic protocol) with its background heartbeat thread.
pub struct GroupMember {
    config: GroupConfig,
    client: Client,
    shared: Arc<Shared>,
    heartbeat: Option<JoinHandle<()>>,
    protocol: RebalanceProtocol,
    /// `group.protocol=consumer` (KIP-848): the membership thread runs the consumer group
    /// protocol (`consumer_member.rs`) and leaves the group itself when closed.
    consumer_protocol: bool,
    /// The commit thread of paced commits; every synchronous commit waits for its commit in
    /// flight first (`committer.rs`).
    committer: Committer,
}

impl fmt::Debug for GroupMember {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupMember")
            .field("group_id", &self.config.group_id)
            .field("protocol", &self.protocol)
            .finish_non_exhaustive()
    }
}

impl GroupMember {
    /// Connects, checks the assignment strategies, and starts the heartbeat thread. The first
    /// [`poll`](Self::poll) joins the group.
    ///
    /// `hook` is called with partitions whose ownership ended without a handoff, from whichever
    /// thread detected it, before anything else happens: wire it to the guard's `lost`.
    pub fn new(
        config: GroupConfig,
        client_config: ClientConfig,
        hook: LostHook,
    ) -> Result<GroupMember, GroupError> {
        let protocol = select_protocol(
            &config.strategies,
            &Subscription::new(config.topics.clone()),
        )
        .map_err(GroupError::Strategy)?
        .rebalance_protocol;
        let (client, shared) = connect_shared(&config, &client_config, hook)?;
        let committer = committer_for(&config, &client_config, &shared);
        // Cooperative: the partitions a member keeps must flow on while the group rebalances, so
        // the rounds run on the membership thread, beside the poll loop. Eager: every partition
        // is revoked before the join anyway, so the poll thread runs the round itself.
        let beside = protocol == RebalanceProtocol::Cooperative;
        if beside {
            shared.lock().run_rounds_beside();
        }
        let heartbeat = heartbeat::spawn(
            shared.clone(),
            client_config,
            HeartbeatSettings {
                group_id: config.group_id.clone(),
                instance_id: config.group_instance_id.clone(),
                interval: config.heartbeat_interval,
                session_timeout: config.session_timeout,
                max_poll_interval: config.max_poll_interval,
                rounds: beside.then(|| config.clone()),
            },
        )
        .map_err(GroupError::Thread)?;
        Ok(GroupMember {
            config,
            client,
            shared,
            heartbeat: Some(heartbeat),
            protocol,
            consumer_protocol: false,
            committer,
        })
    }

    /// A member under the consumer group protocol (KIP-848, `group.protocol=consumer`): the
    /// broker computes the assignment, and the membership thread reconciles it beside the poll
    /// loop. Decided changes reach this thread through the same seam as cooperative rounds
    /// (`changes.rs`), so `poll`, `commit` and `close` read the same for both protocols: the
    /// generation is the member epoch. `config.strategies`, `session_timeout` and
    /// `heartbeat_interval` are not used (the broker owns them); `session_timeout` bounds only
    /// the classic session clock, which this protocol replaces with the machine's bound.
    pub fn with_consumer_protocol(
        config: GroupConfig,
        protocol_config: super::consumer_group::ConsumerGroupConfig,
        client_config: ClientConfig,
        hook: LostHook,
    ) -> Result<GroupMember, GroupError> {
        let (client, shared) = connect_shared(&config, &client_config, hook)?;
        let committer = committer_for(&config, &client_config, &shared);
        shared.lock().run_rounds_beside();
        let heartbeat =
            super::consumer_member::spawn(shared.clone(), client_config, protocol_config)
                .map_err(GroupError::Thread)?;
        Ok(GroupMember {
            config,
            client,
            shared,
            heartbeat: Some(heartbeat),
            // Incremental, as cooperative: only what moves is revoked, the rest flows on.
            protocol: RebalanceProtocol::Cooperative,
            consumer_protocol: true,
            committer,
        })
    }

    /// The wire client of the poll thread, for fetching and offset look-ups.
    pub fn client(&mut self) -> &mut Client {
        &mut self.client
    }

    /// The group's configuration.
    pub fn config(&self) -> &GroupConfig {
        &self.config
    }

    /// Eager or cooperative, as implied by `partition.assignment.strategy`.
    pub fn rebalance_protocol(&self) -> RebalanceProtocol {
        self.protocol
    }

    /// The partitions we own now.
    pub fn owned(&self) -> Vec<TopicPartition> {
        self.shared.lock().owned().to_vec()
    }

    /// Our generation id and member id.
    pub fn identity(&self) -> MemberIdentity {
        self.shared.lock().identity().clone()
    }

    /// A handle that reads the generation and the owned partitions from any thread: while the
    /// poll thread is inside a long call (the decoupled mode's run), an observer (a metrics
    /// endpoint, the demo's worker) still needs to say which generation owns what.
    pub fn view(&self) -> MembershipView {
        MembershipView(self.shared.clone())
    }

    /// Lets the membership bound ownership in time: every answered heartbeat, JoinGroup and
    /// SyncGroup renews `bound` to its send time plus `session.timeout.ms`, so that leases read
    /// stale once the coordinator could have evicted this member, even before the heartbeat
    /// thread finds out (see [`SessionBound`](crate::guard::SessionBound)).
    pub fn bound_session(&self, bound: Arc<crate::guard::SessionBound>) {
        self.shared.lock().bound_session(bound);
    }

    /// Lets the membership fence the partitions a rebalance revokes the moment it decides so
    /// (wire it to the guard's `fence`): under the cooperative protocol the decision is taken on
    /// the membership thread, while the poll thread may be in the middle of a batch, and the
    /// handoff itself (drain, commit) waits for that batch's end.
    pub fn fence_revocations_with(&self, hook: FenceHook) {
        self.shared.lock().fence_revocations_with(hook);
    }

    /// True while we are in a generation with nothing pending.
    pub fn is_stable(&self) -> bool {
        self.shared.lock().is_stable()
    }

    /// True when records of what we own may be fetched and handed out: eager, only while
    /// stable; cooperative, also while the group rebalances (the round runs beside the poll
    /// loop; what moves was fenced when the round decided it).
    pub fn may_fetch(&self) -> bool {
        self.shared.lock().may_fetch()
    }

    /// True when the poll loop should end its batch and poll: eager, a rebalance is waiting
    /// (everything stops for it); cooperative, a decided change waits to be applied (a handoff to
    /// commit, new partitions to start).
    pub fn batch_boundary_due(&self) -> bool {
        self.shared.lock().boundary_due()
    }

    /// True when the group wants us to rejoin (a rebalance is in progress): the poll loop should
    /// finish its batch quickly and poll.
    pub fn rejoin_pending(&self) -> bool {
        self.shared.lock().rejoin_reason().is_some()
    }

    /// Commits with the current generation and member id, synchronously, after the paced
    /// commit in flight (if any) was answered. If the coordinator answers that the
    /// membership is over (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID), the
    /// assignment is lost at once (fenced through the lost hook, reported at the next poll), as
    /// when a heartbeat gets that answer: another member may own the partitions already.
    pub fn commit(
        &mut self,
        offsets: &[wire::OffsetCommitEntry],
    ) -> Result<CommitResults, CommitError> {
        self.committer.settle();
        let identity = self.identity();
        commit_offsets(
            &mut self.client,
            &self.shared,
            &self.config.group_id,
            self.config.group_instance_id.as_deref(),
            &identity,
            offsets,
            CommitKind::Application,
        )
    }

    /// Sends a commit of `offsets` with the current generation and member id on the commit
    /// thread and returns at once: a paced commit, which must not stop the poll thread while
    /// the coordinator's write waits for its replicas. Refused (the offsets come back) while
    /// the previous one is in flight or its answer was not taken with
    /// [`commit_answer`](Self::commit_answer). Its answer is handled as every commit's: a
    /// refusal that ends the membership ends the assignment as lost.
    pub fn commit_in_background(
        &mut self,
        offsets: Vec<wire::OffsetCommitEntry>,
    ) -> Result<(), Vec<wire::OffsetCommitEntry>> {
        let identity = self.identity();
        self.committer.send(identity, offsets)
    }

    /// The answer to the commit sent with [`commit_in_background`](Self::commit_in_background),
    /// once it arrived; never waits.
    pub fn commit_answer(&mut self) -> Option<Result<CommitResults, CommitError>> {
        let answer: Option<CommitAnswer> = self.committer.answer();
        answer
    }

    /// Waits until the commit sent in the background (if any) was answered; its answer stays
    /// for [`commit_answer`](Self::commit_answer). Every synchronous commit does this first.
    pub fn settle_commit(&mut self) {
        self.committer.settle();
    }

    /// True while a commit sent in the background was not answered, or its answer not taken.
    pub fn commit_in_flight(&self) -> bool {
        self.committer.in_flight()
    }

    fn context(&mut self, identity: MemberIdentity, leader: bool) -> GroupContext<'_> {
        GroupContext::new(
            &mut self.client,
            &mut self.committer,
            &self.shared,
            &self.config.group_id,
            self.config.group_instance_id.as_deref(),
            identity,
            leader,
        )
    }

    /// Drives the membership: reports losses, applies the change the membership decided, and
    /// (eager) joins or rejoins when needed, calling the listener on this thread. Returns once
    /// the member is stable or `timeout` has passed (an eager JoinGroup in flight may take up to
    /// the rebalance timeout). Under the cooperative protocol the rounds run on the membership
    /// thread: this waits for their decisions, up to `timeout`, and applies them.
    pub fn poll(
        &mut self,
        listener: &mut dyn RebalanceListener,
        timeout: Duration,
    ) -> Result<(), GroupError> {
        let _inside = PollScope::enter(&self.shared);
        // No deadline when the timeout reaches past what an Instant can hold (Duration::MAX).
        let deadline = Instant::now().checked_add(timeout);
        let passed = |deadline: Option<Instant>, after: Duration| {
            deadline.is_some_and(|d| Instant::now().checked_add(after).map_or(true, |t| t >= d))
        };
        let mut backoff = Duration::from_millis(50);
        loop {
            self.report_losses(listener)?;
            self.membership_thread_alive()?;
            self.apply_pending(listener);
            let reason = match self.shared.lock().next_step() {
                NextStep::Closed => return Err(GroupError::Closed),
                NextStep::Stable => return Ok(()),
                NextStep::Join(reason) => reason,
            };
            if self.shared.lock().rounds_beside() {
                if !self.wait_for_the_membership(deadline) {
                    return Ok(());
                }
                continue;
            }
            match self.rebalance(listener, &reason) {
                Ok(()) => {
                    backoff = Duration::from_millis(50);
                    // Joined; stable unless another rebalance began meanwhile. In a storm that
                    // would be another join, and another: the caller's timeout still holds.
                    if passed(deadline, Duration::ZERO) {
                        return Ok(());
                    }
                    continue;
                }
                Err(Step::Retry(why)) => {
                    log::info!("group {}: {why}; retrying", self.config.group_id);
                }
                Err(Step::Fail(error)) => return Err(error),
            }
            if passed(deadline, backoff) {
                return Ok(());
            }
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }

    /// Waits, for at most `timeout`, while `bound` says the session may have expired: until an
    /// answer renews it, or the membership has something for the poll thread (a loss, a change,
    /// a failure, a death, a close). While the bound has lapsed every admission is refused, so
    /// the poll loop calls this instead of returning at once into another refused batch, which
    /// would spin. Checks the bound at least every 50 ms (a renewal does not wake the condvar).
    pub fn wait_while_session_lapsed(&self, bound: &crate::guard::SessionBound, timeout: Duration) {
        let deadline = Instant::now().checked_add(timeout);
        let mut state = self.shared.lock();
        loop {
            let now = Instant::now();
            if !bound.is_expired(now)
                || state.has_reports()
                || state.pending().is_some()
                || state.died().is_some()
                || state.phase() == Phase::Closed
                || self.shared.has_failure()
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
            state = self.shared.wait(state, left.min(Duration::from_millis(50)));
        }
    }

    /// Cooperative: waits until the membership thread has something for this thread (a decided
    /// change, a loss, a failure) or the member is stable, closed, or `deadline` passed. False
    /// when the deadline passed first.
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

    /// Fails once the membership thread is gone while the member is open: its panic was turned
    /// into a loss of everything owned when it happened (`Shared::run_membership_thread`); a
    /// thread that ended without one is treated the same way here. The poll loop must not go
    /// on with a membership nobody maintains.
    fn membership_thread_alive(&mut self) -> Result<(), GroupError> {
        let mut state = self.shared.lock();
        let ended = self.heartbeat.as_ref().is_some_and(JoinHandle::is_finished);
        if ended && state.died().is_none() && state.phase() != Phase::Closed {
            state.membership_died("the thread ended while the member was open".to_string());
        }
        match state.died() {
            Some(message) => Err(GroupError::MembershipThreadDied(message.to_string())),
            None => Ok(()),
        }
    }

    fn report_losses(&mut self, listener: &mut dyn RebalanceListener) -> Result<(), GroupError> {
        if let Some(failure) = self.shared.take_failure() {
            return Err(failure);
        }
        let (lost, fatal) = self.shared.lock().take_reports();
        report_lost(listener, lost);
        match fatal {
            Some(fatal) => Err(GroupError::Fatal(fatal)),
            None => Ok(()),
        }
    }

    /// The round the poll thread runs (eager), with its own client.
    fn round(&mut self) -> Round<'_> {
        Round {
            client: &mut self.client,
            shared: &self.shared,
            config: &self.config,
            protocol: self.protocol,
        }
    }

    /// One rebalance round on the poll thread (eager): revoke everything while the old
    /// generation is still valid for commits, join, sync, and apply the assignment at once.
    fn rebalance(
        &mut self,
        listener: &mut dyn RebalanceListener,
        reason: &str,
    ) -> Result<(), Step> {
        self.revoke_before_join(listener, reason);
        self.round().run(reason)?;
        self.apply_pending(listener);
        Ok(())
    }

    /// Eager: hands back everything while the old generation is still valid for commits.
    fn revoke_before_join(&mut self, listener: &mut dyn RebalanceListener, reason: &str) {
        let revoke = self.shared.lock().revoke_before_join(self.protocol);
        for event in revoke.events {
            if let RebalanceEvent::Revoke(partitions) = event {
                log::info!(
                    "group {}: revoking {} partition(s) before rejoining ({reason})",
                    self.config.group_id,
                    partitions.len()
                );
                listener.on_partitions_revoked(
                    &mut self.context(revoke.identity.clone(), false),
                    &partitions,
                );
                self.shared.lock().revoked_before_join();
            }
        }
    }

    /// Applies the change the membership decided (the seam of [`super::changes`]), on this
    /// thread, at a batch boundary: revocations first, committed with the generation the change
    /// belongs to, then the assignment; each acknowledged to the session, and the change cleared
    /// last, which lets the membership go on (the cooperative follow-up round). A loss detected
    /// meanwhile stops the rest; the next poll reports it.
    fn apply_pending(&mut self, listener: &mut dyn RebalanceListener) {
        // Losses detected since `report_losses` ran go first: the change may reassign the same
        // partitions, and a loss reported after it would mark them lost in the guard again.
        let (lost, pending) = self.shared.lock().take_change();
        report_lost(listener, lost);
        let Some(pending) = pending else {
            return;
        };
        let me = pending.identity.clone();
        for event in pending.plan.events.iter().cloned() {
            match event {
                RebalanceEvent::Revoke(partitions) => {
                    listener.on_partitions_revoked(
                        &mut self.context(me.clone(), pending.leader),
                        &partitions,
                    );
                    self.shared.lock().revoked(&me, &partitions);
                }
                RebalanceEvent::Assign(partitions) => {
                    if !self.shared.lock().assigning(&me, &pending.plan) {
                        // Lost while the revocation ran: the next poll reports it.
                        break;
                    }
                    listener.on_partitions_assigned(
                        &mut self.context(me.clone(), pending.leader),
                        &partitions,
                    );
                }
                RebalanceEvent::Lost(partitions) => {
                    listener.on_partitions_lost(&partitions, &LostReason::Fenced(KafkaCode::NONE));
                }
            }
        }
        self.shared.lock().changes_applied(&me);
        self.shared.wake.notify_all();
    }

    /// Makes the membership thread panic at its next look at the session. Hidden: it exists so
    /// that the consumer's handling of a dead membership thread (an error from every later
    /// poll, the partitions fenced at once) can be tested end to end; never call it otherwise.
    #[doc(hidden)]
    pub fn panic_membership_thread(&self) {
        self.shared.request_panic();
    }

    /// Leaves the group: revokes (and so commits) everything through the listener while the
    /// generation is still ours, then sends LeaveGroup unless the member is static (a static
    /// member keeps its partitions across a restart within the session timeout), and stops the
    /// heartbeat thread.
    pub fn close(&mut self, listener: &mut dyn RebalanceListener) -> Result<(), GroupError> {
        let _ = self.report_losses(listener);
        let Some((identity, events)) = self.shared.lock().leave() else {
            return Ok(());
        };
        let leader = self
            .shared
            .lock()
            .pending()
            .is_some_and(|p| p.leader && p.identity == identity);
        for event in events {
            if let RebalanceEvent::Revoke(partitions) = event {
                listener.on_partitions_revoked(
                    &mut self.context(identity.clone(), leader),
                    &partitions,
                );
            }
        }
        let beside = self.shared.lock().rounds_beside();
        self.shared.lock().close();
        self.shared.wake.notify_all();
        // Cooperative: the membership thread may be inside a JoinGroup the coordinator holds
        // until the group re-forms; leaving first ends that wait (the coordinator answers it)
        // instead of making close wait for the whole rebalance. Eager: no round can be running
        // (this thread runs them), and no heartbeat goes out after the LeaveGroup.
        if !beside {
            self.stop_membership_thread();
        }
        let left = self.leave_group(&identity);
        self.stop_membership_thread();
        left
    }

    fn stop_membership_thread(&mut self) {
        if let Some(handle) = self.heartbeat.take() {
            let _ = handle.join();
        }
    }

    /// Sends LeaveGroup for `identity` unless the member is static (a static member keeps its
    /// partitions across a restart within the session timeout) or never joined.
    fn leave_group(&mut self, identity: &MemberIdentity) -> Result<(), GroupError> {
        // KIP-848: the membership thread leaves itself (epoch -1, static -2), with the member id
        // only it holds, once it sees the session closed; `stop_membership_thread` waits for it.
        if self.consumer_protocol
            || self.config.group_instance_id.is_some()
            || identity.member_id.is_empty()
        {
            return Ok(());
        }
        let group_id = self.config.group_id.clone();
        match self
            .round()
            .with_coordinator("closing", "LeaveGroup", |conn| {
                requests::leave_group(
                    conn,
                    &group_id,
                    None,
                    &identity.member_id,
                    "consumer closed",
                )
            }) {
            Ok(KafkaCode::NONE) => log::info!("left group {group_id}"),
            Ok(code) => log::warn!("LeaveGroup answered error {code}"),
            Err(Step::Retry(why)) => log::warn!("cannot leave group {group_id}: {why}"),
            Err(Step::Fail(e)) => return Err(e),
        }
        Ok(())
    }
}

impl Drop for GroupMember {
    fn drop(&mut self) {
        let beside = {
            let mut state = self.shared.lock();
            state.close();
            state.rounds_beside()
        };
        self.shared.wake.notify_all();
        if let Some(handle) = self.heartbeat.take() {
            // Cooperative: the membership thread may be in a JoinGroup the coordinator holds for
            // up to the rebalance timeout; it sees the member closed when the answer comes and
            // exits then, sending nothing more. Dropping does not wait for that.
            if !beside {
                let _ = handle.join();
            }
        }
    }
}

/// Tells the listener about losses the session recorded (already fenced through the lost hook).
fn report_lost(listener: &mut dyn RebalanceListener, lost: Vec<(Vec<TopicPartition>, LostReason)>) {
    for (partitions, reason) in lost {
        for event in on_lost(&partitions) {
            if let RebalanceEvent::Lost(partitions) = event {
                listener.on_partitions_lost(&partitions, &reason);
            }
        }
    }
}

/// Read-only access to a member's generation and ownership from another thread (see
/// [`GroupMember::view`]); it keeps no membership alive and changes nothing.
#[derive(Clone)]
pub struct MembershipView(Arc<Shared>);

impl MembershipView {
    /// The generation id and member id, and the partitions owned, read together (two separate
    /// reads could pair a new generation with the previous assignment).
    pub fn read(&self) -> (MemberIdentity, Vec<TopicPartition>) {
        let state = self.0.lock();
        (state.identity().clone(), state.owned().to_vec())
    }
}

impl fmt::Debug for MembershipView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MembershipView").finish_non_exhaustive()
    }
}

/// The span of one `poll` call: while it lives, `max.poll.interval.ms` does not run (joining,
/// syncing and the rebalance callbacks are the library's time); when it ends, on any return
/// path, the application has control again and the interval starts from that instant.
struct PollScope(Arc<Shared>);

impl PollScope {
    fn enter(shared: &Arc<Shared>) -> Self {
        shared.lock().enter_poll();
        PollScope(shared.clone())
    }
}

impl Drop for PollScope {
    fn drop(&mut self) {
        self.0.lock().leave_poll(Instant::now());
    }
}

/// The commit thread's handle, with the member's group, instance id and connection settings.
fn committer_for(
    config: &GroupConfig,
    client_config: &ClientConfig,
    shared: &Arc<Shared>,
) -> Committer {
    Committer::new(
        shared.clone(),
        client_config,
        &config.group_id,
        config.group_instance_id.as_deref(),
    )
}

/// The client and the session state both constructors start from: a connected client and a
/// session whose clocks use `config`'s timeouts.
fn connect_shared(
    config: &GroupConfig,
    client_config: &ClientConfig,
    hook: LostHook,
) -> Result<(Client, Arc<Shared>), GroupError> {
    let client = Client::connect(client_config.clone())?;
    let shared = Arc::new(Shared::new(
        hook,
        Timeouts {
            session_timeout: config.session_timeout,
            max_poll_interval: config.max_poll_interval,
        },
    ));
    Ok((client, shared))
}
