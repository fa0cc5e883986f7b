//! One rebalance round of the classic protocol: JoinGroup, (as leader) the assignment, SyncGroup,
//! and the session's decision on its answer, posted for the poll thread (see [`super::changes`]).
//!
//! The same round runs on the thread that owns it: the poll thread under the eager protocol
//! (`Membership::next_change` of the classic member, which hands out the revocation of
//! everything first and the change right after), the
//! membership thread under the cooperative protocol (`heartbeat.rs`), beside the poll loop, which
//! keeps processing the partitions it keeps. Each step sends one request and feeds its answer to
//! the session, which decides what comes next; the round itself keeps no state.

use std::collections::{BTreeMap, BTreeSet};

use crate::guard::lease_now;

use crate::group::assignor::{
    assign_and_encode, assignor_for, MemberSubscription, RebalanceProtocol,
};
use crate::group::config::GroupConfig;
use crate::group::error::GroupError;
use crate::group::member::Step;
use crate::group::membership::ErrorContext;
use crate::group::requests::{self, JoinParams, MemberIdentity};
use crate::group::session::{JoinAnswer, JoinStart, Phase, Refusal, Shared};
use crate::group::subscription::{decode_assignment, decode_subscription, Subscription};
use crate::wire::ErrorChain;
use crate::wire::{self, Client, WireError};
use crate::TopicPartition;

/// A completed JoinGroup, with what the leader needs to assign.
struct JoinedRound {
    identity: MemberIdentity,
    leader: bool,
    protocol_name: Option<String>,
    members: Vec<(String, Option<String>, bytes::Bytes)>,
    /// The topics the JoinGroup subscribed to.
    topics: Vec<String>,
}

/// What leading a round produced: each member's encoded assignment, and the partition count of
/// every topic of the group's subscription it used (0: not assignable), which the leader then
/// watches (`group/watch.rs`).
struct Led {
    assignments: Vec<(String, bytes::Bytes)>,
    counts: BTreeMap<String, i32>,
}

/// The parts a round works with, borrowed from the thread that runs it.
pub(crate) struct Round<'a> {
    pub(crate) client: &'a mut Client,
    pub(crate) shared: &'a Shared,
    pub(crate) config: &'a GroupConfig,
    pub(crate) protocol: RebalanceProtocol,
}

impl Round<'_> {
    /// JoinGroup, (leader) assign, SyncGroup; then the session completes the generation and
    /// posts the change for the poll thread (revocations fenced at once). On failure the session
    /// is back to unjoined with the rejoin still pending.
    pub(crate) fn run(&mut self, reason: &str) -> Result<(), Step> {
        let result = self.run_held(reason);
        // After the answers renewed the session (or the round failed): not before, or the bound
        // could lapse for an instant between the two.
        self.shared.lock().release_session();
        result
    }

    /// [`run`](Self::run), with the session held from the JoinGroup's send on.
    fn run_held(&mut self, reason: &str) -> Result<(), Step> {
        let start = self.shared.lock().join();
        self.still_open()?;
        let joined = self.send_join(&start, reason)?;
        self.still_open()?;
        let me = joined.identity.clone();
        let (assignments, counts) = if joined.leader {
            let led = self
                .lead(&joined.members, joined.protocol_name.as_deref())
                .inspect_err(|_| self.shared.lock().round_failed(reason))?;
            (led.assignments, Some(led.counts))
        } else {
            (Vec::new(), None)
        };
        let assigned = self.send_sync(&me, joined.protocol_name.as_deref(), assignments, reason)?;
        let assigned = only_subscribed(assigned, &joined.topics);
        // The leader watches the partition counts its assignment used (see `watch.rs`).
        self.shared.topics().led(counts);
        let follow_up = self.shared.lock().post_assignment(
            self.protocol,
            &me,
            joined.leader,
            &start.owned,
            &assigned,
        );
        self.shared.wake.notify_all();
        log::info!(
            "group {}: generation {} assigns {} partition(s){}",
            self.config.group_id,
            me.generation_id,
            assigned.len(),
            if follow_up {
                ", follow-up rebalance needed"
            } else {
                ""
            }
        );
        Ok(())
    }

    /// The member was closed (from the poll thread) while this round ran on the membership
    /// thread: the round stops; nothing more is sent for it.
    fn still_open(&self) -> Result<(), Step> {
        if self.shared.lock().phase() == Phase::Closed {
            return Err(Step::Retry("the member was closed".to_string()));
        }
        Ok(())
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
            Err(e) => {
                let why = format!("cannot find the coordinator: {}", ErrorChain(&e));
                return Err(Step::Retry(why));
            }
        };
        if let Err(e) = self.client.connection(node) {
            self.client.invalidate_coordinator(group);
            let why = format!("cannot reach the coordinator: {}", ErrorChain(&e));
            return Err(Step::Retry(why));
        }
        Ok(node)
    }

    /// Sends one request to the coordinator; on failure the coordinator is looked up again next
    /// time and the member goes back to unjoined (the rebalance must be retried).
    pub(crate) fn with_coordinator<T>(
        &mut self,
        reason: &str,
        what: &str,
        send: impl FnOnce(&mut wire::Connection) -> Result<T, WireError>,
    ) -> Result<T, Step> {
        let result = self.coordinator().and_then(|node| {
            self.client
                .connection(node)
                .map_err(|e| {
                    Step::Retry(format!("cannot reach the coordinator: {}", ErrorChain(&e)))
                })
                .and_then(|conn| {
                    send(conn)
                        .map_err(|e| Step::Retry(format!("{what} failed: {}", ErrorChain(&e))))
                })
        });
        if result.is_err() {
            self.client.invalidate_coordinator(&self.config.group_id);
            self.shared.lock().round_failed(reason);
        }
        result
    }

    /// Sends JoinGroup with our subscription (and, cooperative, what we still own).
    fn send_join(&mut self, start: &JoinStart, reason: &str) -> Result<JoinedRound, Step> {
        let topics = self.shared.topics().joining();
        let mut subscription = Subscription::new(topics.clone());
        subscription.owned_partitions = start.owned.clone();
        subscription.generation_id = start.identity.generation_id;
        subscription.rack_id = self.config.rack.clone();
        let protocols = super::join_protocols(self.config, &subscription)
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
        let sent = lease_now();
        // The coordinator keeps a member it holds in the join (and then in the sync) alive.
        self.shared.lock().hold_session(sent);
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
            topics,
        })
    }

    /// Sends SyncGroup (with the assignment when we lead) and returns our decoded assignment.
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
        let sent = lease_now();
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
        Ok(assignment.partitions)
    }

    /// As leader: decode every member's subscription, learn the partition counts, run the
    /// assignor the coordinator selected, and encode each member's assignment.
    fn lead(
        &mut self,
        members: &[(String, Option<String>, bytes::Bytes)],
        protocol_name: Option<&str>,
    ) -> Result<Led, Step> {
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
        let counts = topics
            .iter()
            .map(|t| (t.clone(), partitions_per_topic.get(t).copied().unwrap_or(0)))
            .collect();
        Ok(Led {
            assignments: encoded.into_iter().collect(),
            counts,
        })
    }
}

/// Our assignment without the topics our JoinGroup did not subscribe to (a leader that read an
/// older subscription of ours, or a broken one).
fn only_subscribed(assigned: Vec<TopicPartition>, topics: &[String]) -> Vec<TopicPartition> {
    let subscribed: BTreeSet<&str> = topics.iter().map(String::as_str).collect();
    assigned
        .into_iter()
        .filter(|tp| {
            let ok = subscribed.contains(&*tp.topic);
            if !ok {
                log::warn!("assigned {tp}, which we did not subscribe to: ignored");
            }
            ok
        })
        .collect()
}
