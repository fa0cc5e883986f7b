//! A member of a consumer group under the classic protocol, driven from the poll thread.
//!
//! Read it as one story (as franz-go's group consumer reads): [`GroupMember::poll`] reports
//! losses the heartbeat thread detected, then, when the group asks for it, revokes (eager), joins,
//! assigns partitions if we lead, syncs, and hands the listener the partitions revoked and
//! assigned, in that order. Listener callbacks run on the poll thread, one at a time; revoked and
//! lost are separate callbacks and never run concurrently.
//!
//! Every decision is the session's (`session::SessionState`): this file sends the
//! requests, feeds their answers in, and runs the callbacks the session returns.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::assignor::{
    assign_and_encode, assignor_for, select_protocol, MemberSubscription, RebalanceProtocol,
    Strategy,
};
use super::commit::commit_offsets;
pub use super::commit::{CommitResults, GroupContext};
use super::consumer_protocol::{decode_assignment, decode_subscription, Subscription};
pub use super::error::{CommitError, GroupError};
use super::heartbeat::{self, HeartbeatSettings};
use super::membership::{on_lost, ErrorContext, RebalanceEvent};
use super::requests::{self, JoinParams, MemberIdentity};
use super::session::{
    JoinAnswer, JoinStart, LostHook, LostReason, NextStep, Refusal, Shared, Timeouts,
};
use crate::wire::{self, Client, ClientConfig, KafkaCode, WireError};
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
    /// ([`check_strategies`](super::check_strategies)) by [`GroupMember::new`].
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
    /// Whether we led the last completed join.
    leader: bool,
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
        let client = Client::connect(client_config.clone())?;
        let shared = Arc::new(Shared::new(
            hook,
            Timeouts {
                session_timeout: config.session_timeout,
                max_poll_interval: config.max_poll_interval,
            },
        ));
        let heartbeat = heartbeat::spawn(
            shared.clone(),
            client_config,
            HeartbeatSettings {
                group_id: config.group_id.clone(),
                instance_id: config.group_instance_id.clone(),
                interval: config.heartbeat_interval,
                session_timeout: config.session_timeout,
                max_poll_interval: config.max_poll_interval,
            },
        )
        .map_err(GroupError::Thread)?;
        Ok(GroupMember {
            config,
            client,
            shared,
            heartbeat: Some(heartbeat),
            protocol,
            leader: false,
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

    /// Lets the membership bound ownership in time: every answered heartbeat, JoinGroup and
    /// SyncGroup renews `bound` to its send time plus `session.timeout.ms`, so that leases read
    /// stale once the coordinator could have evicted this member, even before the heartbeat
    /// thread finds out (see [`SessionBound`](crate::guard::SessionBound)).
    pub fn bound_session(&self, bound: Arc<crate::guard::SessionBound>) {
        self.shared.lock().bound_session(bound);
    }

    /// True while we are in a generation with nothing pending: records may be processed.
    pub fn is_stable(&self) -> bool {
        self.shared.lock().is_stable()
    }

    /// True when the group wants us to rejoin (a rebalance is in progress): the poll loop should
    /// finish its batch quickly and poll.
    pub fn rejoin_pending(&self) -> bool {
        self.shared.lock().rejoin_reason().is_some()
    }

    /// Commits with the current generation and member id. If the coordinator answers that the
    /// membership is over (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID), the
    /// assignment is lost at once (fenced through the lost hook, reported at the next poll), as
    /// when a heartbeat gets that answer: another member may own the partitions already.
    pub fn commit(
        &mut self,
        offsets: &[wire::OffsetCommitEntry],
    ) -> Result<CommitResults, CommitError> {
        let identity = self.identity();
        commit_offsets(
            &mut self.client,
            &self.shared,
            &self.config.group_id,
            self.config.group_instance_id.as_deref(),
            &identity,
            offsets,
            true,
        )
    }

    fn context(&mut self, identity: MemberIdentity) -> GroupContext<'_> {
        GroupContext::new(
            &mut self.client,
            &self.shared,
            &self.config.group_id,
            self.config.group_instance_id.as_deref(),
            identity,
            self.leader,
        )
    }

    /// Drives the membership: reports losses, and joins or rejoins when needed, calling the
    /// listener on this thread. Returns once the member is stable or `timeout` has passed (a
    /// JoinGroup in flight may take up to the rebalance timeout).
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
            let reason = match self.shared.lock().next_step() {
                NextStep::Closed => return Err(GroupError::Closed),
                NextStep::Stable => return Ok(()),
                NextStep::Join(reason) => reason,
            };
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

    fn report_losses(&mut self, listener: &mut dyn RebalanceListener) -> Result<(), GroupError> {
        let (lost, fatal) = self.shared.lock().take_reports();
        for (partitions, reason) in lost {
            for event in on_lost(&partitions) {
                if let RebalanceEvent::Lost(partitions) = event {
                    listener.on_partitions_lost(&partitions, &reason);
                }
            }
        }
        match fatal {
            Some(fatal) => Err(GroupError::Fatal(fatal)),
            None => Ok(()),
        }
    }

    fn error_context(&self) -> ErrorContext<'_> {
        ErrorContext {
            group_id: &self.config.group_id,
            group_instance_id: self.config.group_instance_id.as_deref(),
        }
    }

    /// Applies the session's answer to a refused JoinGroup or SyncGroup.
    fn refused(&mut self, refusal: Refusal) -> Step {
        match refusal {
            Refusal::Retry { why, rediscover } => {
                if rediscover {
                    self.client.invalidate_coordinator(&self.config.group_id);
                }
                Step::Retry(why)
            }
            Refusal::Fatal(fatal) => Step::Fail(GroupError::Fatal(fatal)),
        }
    }

    /// The coordinator's node id, with a live connection to it.
    fn coordinator(&mut self) -> Result<i32, Step> {
        let group = &self.config.group_id;
        let node = match self.client.find_coordinator(group) {
            Ok(info) => info.node_id,
            Err(e) => return Err(Step::Retry(format!("cannot find the coordinator: {e}"))),
        };
        if let Err(e) = self.client.connection(node) {
            self.client.invalidate_coordinator(group);
            return Err(Step::Retry(format!("cannot reach the coordinator: {e}")));
        }
        Ok(node)
    }

    /// Sends one request to the coordinator; on failure the coordinator is looked up again next
    /// time and the member goes back to unjoined (the rebalance must be retried).
    fn with_coordinator<T>(
        &mut self,
        reason: &str,
        what: &str,
        send: impl FnOnce(&mut wire::Connection) -> Result<T, WireError>,
    ) -> Result<T, Step> {
        let shared = self.shared.clone();
        let result = self.coordinator().and_then(|node| {
            self.client
                .connection(node)
                .map_err(|e| Step::Retry(format!("cannot reach the coordinator: {e}")))
                .and_then(|conn| {
                    // While the request is at the coordinator, our session cannot expire.
                    shared.lock().request_sent();
                    let sent = send(conn);
                    shared.lock().request_done();
                    sent.map_err(|e| Step::Retry(format!("{what} failed: {e}")))
                })
        });
        if result.is_err() {
            self.client.invalidate_coordinator(&self.config.group_id);
            self.shared.lock().round_failed(reason);
        }
        result
    }

    /// One rebalance round: (eager) revoke, JoinGroup, (leader) assign, SyncGroup, then revoked
    /// and assigned callbacks. Each step sends a request or runs callbacks and feeds the outcome
    /// to the session, which decides what comes next.
    fn rebalance(
        &mut self,
        listener: &mut dyn RebalanceListener,
        reason: &str,
    ) -> Result<(), Step> {
        self.revoke_before_join(listener, reason);
        let start = self.shared.lock().join();
        let joined = self.send_join(&start, reason)?;
        let me = joined.identity.clone();
        let assignments = if joined.leader {
            self.lead(&joined.members, joined.protocol_name.as_deref())
                .inspect_err(|_| self.shared.lock().round_failed(reason))?
        } else {
            Vec::new()
        };
        let assigned = self.send_sync(&me, joined.protocol_name.as_deref(), assignments, reason)?;
        self.apply_assignment(listener, &me, &start.owned, &assigned);
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
                listener
                    .on_partitions_revoked(&mut self.context(revoke.identity.clone()), &partitions);
                self.shared.lock().revoked_before_join();
            }
        }
    }

    /// Sends JoinGroup with our subscription (and, cooperative, what we still own).
    fn send_join(&mut self, start: &JoinStart, reason: &str) -> Result<JoinedRound, Step> {
        let mut subscription = Subscription::new(self.config.topics.clone());
        subscription.owned_partitions = start.owned.clone();
        subscription.generation_id = start.identity.generation_id;
        let protocols = select_protocol(&self.config.strategies, &subscription)
            .map_err(|e| Step::Fail(GroupError::Strategy(e)))?
            .protocols;
        let group_id = self.config.group_id.clone();
        let instance_id = self.config.group_instance_id.clone();
        let params = JoinParams {
            group_id: &group_id,
            instance_id: instance_id.as_deref(),
            session_timeout: self.config.session_timeout,
            rebalance_timeout: self.config.max_poll_interval,
            protocols: &protocols,
            reason,
        };
        let identity = &start.identity;
        let sent = Instant::now();
        let outcome = self.with_coordinator(reason, "JoinGroup", |conn| {
            requests::join_group(conn, identity, &params)
        })?;
        let answer = JoinAnswer {
            error_code: outcome.error_code,
            generation_id: outcome.generation_id,
            member_id: &outcome.member_id,
            leader: &outcome.leader,
        };
        let ctx = self.error_context();
        let decided = self.shared.lock().joined(sent, &answer, reason, &ctx);
        let joined = decided.map_err(|refusal| self.refused(refusal))?;
        self.leader = joined.leader;
        log::info!(
            "group {group_id}: joined generation {} as {} ({}), assignor {:?}",
            joined.identity.generation_id,
            joined.identity.member_id,
            if joined.leader { "leader" } else { "follower" },
            outcome.protocol_name
        );
        Ok(JoinedRound {
            identity: joined.identity,
            leader: joined.leader,
            protocol_name: outcome.protocol_name,
            members: outcome.members,
        })
    }

    /// Sends SyncGroup (with the assignment when we lead) and returns our decoded assignment,
    /// without the topics we did not subscribe to.
    fn send_sync(
        &mut self,
        me: &MemberIdentity,
        protocol_name: Option<&str>,
        assignments: Vec<(String, bytes::Bytes)>,
        reason: &str,
    ) -> Result<Vec<TopicPartition>, Step> {
        let group_id = self.config.group_id.clone();
        let instance_id = self.config.group_instance_id.clone();
        let rebalance_timeout = self.config.max_poll_interval;
        let sent = Instant::now();
        let (code, bytes) = self.with_coordinator(reason, "SyncGroup", |conn| {
            requests::sync_group(
                conn,
                &group_id,
                instance_id.as_deref(),
                me,
                protocol_name,
                assignments,
                rebalance_timeout,
            )
        })?;
        let ctx = self.error_context();
        let decided = self.shared.lock().synced(sent, me, code, reason, &ctx);
        decided.map_err(|refusal| self.refused(refusal))?;
        let assignment = decode_assignment(&bytes).map_err(|e| {
            self.shared.lock().round_failed(reason);
            Step::Fail(GroupError::Assignment(e))
        })?;
        let subscribed: BTreeSet<&str> = self.config.topics.iter().map(String::as_str).collect();
        Ok(assignment
            .partitions
            .into_iter()
            .filter(|tp| {
                let ok = subscribed.contains(&*tp.topic);
                if !ok {
                    log::warn!("assigned {tp}, which we did not subscribe to: ignored");
                }
                ok
            })
            .collect())
    }

    /// The generation is complete: the session becomes stable (heartbeats resume) and says which
    /// callbacks run, in order; a loss detected meanwhile stops the rest.
    fn apply_assignment(
        &mut self,
        listener: &mut dyn RebalanceListener,
        me: &MemberIdentity,
        owned_before: &[TopicPartition],
        assigned: &[TopicPartition],
    ) {
        let plan = self
            .shared
            .lock()
            .stabilise(self.protocol, owned_before, assigned);
        self.shared.wake.notify_all();
        log::info!(
            "group {}: generation {} assigns {} partition(s){}",
            self.config.group_id,
            me.generation_id,
            plan.owned_after.len(),
            if plan.rejoin {
                ", follow-up rebalance needed"
            } else {
                ""
            }
        );
        for event in plan.events.iter().cloned() {
            match event {
                RebalanceEvent::Revoke(partitions) => {
                    listener.on_partitions_revoked(&mut self.context(me.clone()), &partitions);
                    self.shared.lock().revoked(me, &partitions);
                }
                RebalanceEvent::Assign(partitions) => {
                    if !self.shared.lock().assigning(me, &plan) {
                        // Lost while the revocation ran: the next poll reports it.
                        return;
                    }
                    listener.on_partitions_assigned(&mut self.context(me.clone()), &partitions);
                }
                RebalanceEvent::Lost(partitions) => {
                    listener.on_partitions_lost(&partitions, &LostReason::Fenced(KafkaCode::NONE));
                }
            }
        }
    }

    /// As leader: decode every member's subscription, learn the partition counts, run the
    /// assignor the coordinator selected, and encode each member's assignment.
    fn lead(
        &mut self,
        members: &[(String, Option<String>, bytes::Bytes)],
        protocol_name: Option<&str>,
    ) -> Result<Vec<(String, bytes::Bytes)>, Step> {
        let name = protocol_name.unwrap_or_default();
        let assignor = assignor_for(name)
            .ok_or_else(|| Step::Fail(GroupError::UnknownAssignor(name.to_string())))?;
        let mut subscriptions = Vec::with_capacity(members.len());
        for (member_id, instance_id, metadata) in members {
            match decode_subscription(metadata) {
                Ok(decoded) => subscriptions.push(MemberSubscription::new(
                    member_id.clone(),
                    instance_id.clone(),
                    decoded,
                )),
                Err(e) => log::warn!(
                    "member {member_id} sent a malformed subscription ({e}); it gets no partitions"
                ),
            }
        }
        let topics: BTreeSet<String> = subscriptions
            .iter()
            .flat_map(|m| m.subscription.topics.iter().cloned())
            .collect();
        // Fresh metadata, not the cache: partitions added since the last refresh must be
        // assigned too. One request for every subscribed topic, not one per topic: a topic that
        // does not exist (yet) is skipped and reported, as Java does, instead of being retried
        // until the group's session runs out. (The request also gives the followers' SyncGroup
        // time to reach librdkafka's mock first, which refuses those that come after the
        // leader's: see `quirks::LATE_SYNC_GROUP_REFUSAL`.)
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        let mut partitions_per_topic = BTreeMap::new();
        match self.client.metadata(&names) {
            Ok(metadata) => {
                for topic in metadata {
                    match topic.error {
                        None if !topic.partitions.is_empty() => {
                            partitions_per_topic
                                .insert(topic.name.to_string(), topic.partitions.len() as i32);
                        }
                        error => log::warn!(
                            "group {}: subscribed topic {} is not assignable ({}): it gets no \
                             partitions until it exists and the group rebalances",
                            self.config.group_id,
                            topic.name,
                            error.map_or("no partitions".to_string(), |e| format!("{e:?}"))
                        ),
                    }
                }
            }
            Err(e) => {
                log::warn!(
                    "metadata refresh before assigning failed ({e}); using cached partition counts"
                );
                for topic in &topics {
                    if let Some(count) = self.client.cached_partition_count(topic) {
                        partitions_per_topic.insert(topic.clone(), count as i32);
                    }
                }
            }
        }
        for topic in &topics {
            if !partitions_per_topic.contains_key(topic) {
                log::warn!("no metadata for subscribed topic {topic}: it gets no partitions");
            }
        }
        let encoded = assign_and_encode(assignor, &subscriptions, &partitions_per_topic)
            .map_err(|e| Step::Fail(GroupError::Leader(e)))?;
        Ok(encoded.into_iter().collect())
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
        for event in events {
            if let RebalanceEvent::Revoke(partitions) = event {
                listener.on_partitions_revoked(&mut self.context(identity.clone()), &partitions);
            }
        }
        self.shared.lock().close();
        self.shared.wake.notify_all();
        if let Some(handle) = self.heartbeat.take() {
            let _ = handle.join();
        }
        if self.config.group_instance_id.is_some() || identity.member_id.is_empty() {
            return Ok(());
        }
        let group_id = self.config.group_id.clone();
        match self.with_coordinator("closing", "LeaveGroup", |conn| {
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
        self.shared.lock().close();
        self.shared.wake.notify_all();
        if let Some(handle) = self.heartbeat.take() {
            let _ = handle.join();
        }
    }
}

/// A completed JoinGroup, with what the leader needs to assign.
struct JoinedRound {
    identity: MemberIdentity,
    leader: bool,
    protocol_name: Option<String>,
    members: Vec<(String, Option<String>, bytes::Bytes)>,
}

/// The outcome of a failed rebalance step.
enum Step {
    /// Try again after a backoff (coordinator moved, rebalance in progress, member id required).
    Retry(String),
    /// Give up: the caller gets the error.
    Fail(GroupError),
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
