//! A classic-protocol member in memory: the real session (`SessionState`), the real hand-out of
//! changes and the real commit checks, with the in-memory [`Coordinator`] in place of the broker
//! and the membership thread's work (heartbeats, cooperative rounds) stepped from the poll
//! thread, so a test drives several whole consumers on one thread, deterministically, the way
//! quinn-proto's tests drive both ends of a connection.
//!
//! Every call of [`Membership::next_change`] takes one step of the membership: a heartbeat, then
//! the round when one is due (JoinGroup, and, once every member joined, SyncGroup, led with the
//! real assignor). A held JoinGroup or SyncGroup returns at once: the next poll collects the
//! answer, after the other members had their turn.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;

use super::classic::{Coordinator, JoinReply, JoinRequest};
use super::member::{lock, MemberHandle, PollTurn, Shell, Steps};
use super::memory_log::InMemoryLog;
use crate::group::assignor::{
    assign_and_encode, assignor_for, select_protocol, MemberSubscription, RebalanceProtocol,
    Strategy,
};
use crate::group::member::Handout;
use crate::group::membership::ErrorContext;
use crate::group::requests::MemberIdentity;
use crate::group::session::{HeartbeatDue, JoinAnswer, NextStep, Shared, Timeouts};
use crate::group::subscription::{decode_assignment, decode_subscription, Subscription};
use crate::group::{CommitResults, GroupConfig, GroupError, LostHook, Membership};
use crate::wire::{CommitIdentity, KafkaCode, OffsetCommitEntry, WireError};
use crate::TopicPartition;

/// The in-memory group a test's members share: one coordinator and one log.
#[derive(Clone)]
pub struct ClassicGroup {
    coordinator: Arc<Mutex<Coordinator>>,
    log: InMemoryLog,
}

impl ClassicGroup {
    /// A group whose coordinator expires members after `session_timeout`, over `log`.
    pub fn new(log: InMemoryLog, session_timeout: Duration) -> Self {
        ClassicGroup {
            coordinator: Arc::new(Mutex::new(Coordinator::new(
                Instant::now(),
                session_timeout,
            ))),
            log,
        }
    }

    /// The coordinator, for a test that injects what only it can (a rebalance, a clock jump).
    pub fn coordinator(&self) -> MutexGuard<'_, Coordinator> {
        lock(&self.coordinator)
    }

    /// A member of this group for a consumer built with `Consumer::with_membership`, and the
    /// handle through which the test reaches it while the consumer owns it.
    pub fn member(
        &self,
        strategy: Strategy,
        config: GroupConfig,
        hook: LostHook,
    ) -> (Box<dyn Membership>, MemberHandle) {
        let protocol = assignor_for(strategy.name())
            .map(|a| a.protocol())
            .unwrap_or(RebalanceProtocol::Eager);
        let shared = Arc::new(Shared::new(hook, Timeouts::of(&config)));
        if protocol == RebalanceProtocol::Cooperative {
            shared.lock().run_rounds_beside();
        }
        let steps = ClassicSteps {
            group: self.clone(),
            config,
            strategy,
            protocol,
            shared,
            round: None,
        };
        Shell::member(steps, self.log.clone())
    }
}

/// A JoinGroup answered: who we are in the generation, whether we lead, the assignor chosen,
/// and (for the leader) every member's subscription.
type JoinedRound = (
    MemberIdentity,
    bool,
    Option<String>,
    Vec<(String, Option<String>, Bytes)>,
);

/// One round in flight: the JoinGroup sent, then the SyncGroup.
struct RoundInFlight {
    reason: String,
    owned: Vec<TopicPartition>,
    join_identity: MemberIdentity,
    sent: Instant,
    joined: Option<JoinedRound>,
    synced_sent: Option<Instant>,
}

/// The classic protocol's side of an in-memory member.
pub(crate) struct ClassicSteps {
    group: ClassicGroup,
    config: GroupConfig,
    strategy: Strategy,
    protocol: RebalanceProtocol,
    shared: Arc<Shared>,
    round: Option<RoundInFlight>,
}

impl ClassicSteps {
    fn ctx(&self) -> ErrorContext<'_> {
        ErrorContext {
            group_id: &self.config.group_id,
            group_instance_id: self.config.group_instance_id.as_deref(),
        }
    }

    fn now(&self) -> Instant {
        self.group.coordinator().now()
    }

    fn heartbeat(&mut self) {
        let now = self.now();
        let me = match self.shared.lock().heartbeat_due(now) {
            HeartbeatDue::Send(me) => me,
            HeartbeatDue::LeaveAfterPollTimeout(me) => {
                self.group.coordinator().leave(&me.member_id);
                return;
            }
            HeartbeatDue::Skip => return,
        };
        let code = self
            .group
            .coordinator()
            .heartbeat(&me.member_id, me.generation_id);
        let ctx = self.ctx();
        let verdict = self
            .shared
            .lock()
            .heartbeat_answered(now, &me, Some(code), &ctx);
        let _ = verdict;
    }

    /// JoinGroup, then (every member joined) SyncGroup; the decided change is posted to the
    /// session for the hand-out.
    fn advance_round(&mut self, reason: String) {
        if self.round.is_none() {
            let start = self.shared.lock().join();
            let mut subscription = Subscription::new(self.config.topics.clone());
            subscription.owned_partitions = start.owned.clone();
            subscription.generation_id = start.identity.generation_id;
            let protocols = select_protocol(&[self.strategy], &subscription)
                .map(|p| p.protocols)
                .unwrap_or_default()
                .into_iter()
                .map(|p| (p.name.to_string(), p.metadata))
                .collect();
            let sent = self.now();
            self.shared.lock().hold_session(sent);
            let request = JoinRequest {
                member_id: start.identity.member_id.clone(),
                instance_id: self.config.group_instance_id.clone(),
                protocols,
            };
            self.round = Some(RoundInFlight {
                reason,
                owned: start.owned,
                join_identity: start.identity,
                sent,
                joined: None,
                synced_sent: None,
            });
            let reply = self.group.coordinator().join(request);
            if let Some(reply) = reply {
                self.join_answered(reply);
            }
            return;
        }
        let Some(round) = self.round.as_ref() else {
            return;
        };
        if round.joined.is_none() {
            let reply = self
                .group
                .coordinator()
                .join_reply(&round.join_identity.member_id);
            if let Some(reply) = reply {
                self.join_answered(reply);
            }
            return;
        }
        self.sync();
    }

    fn join_answered(&mut self, reply: JoinReply) {
        let Some(round) = self.round.as_mut() else {
            return;
        };
        let answer = JoinAnswer {
            error_code: reply.error_code,
            generation_id: reply.generation_id,
            member_id: &reply.member_id,
            leader: &reply.leader,
        };
        let ctx = ErrorContext {
            group_id: &self.config.group_id,
            group_instance_id: self.config.group_instance_id.as_deref(),
        };
        let joined = self
            .shared
            .lock()
            .joined(round.sent, &answer, &round.reason, &ctx);
        match joined {
            Ok(joined) => {
                round.joined = Some((
                    joined.identity,
                    joined.leader,
                    reply.protocol_name,
                    reply.members,
                ));
            }
            Err(_) => {
                self.round = None;
                self.shared.lock().release_session();
            }
        }
    }

    fn sync(&mut self) {
        let Some(round) = self.round.as_mut() else {
            return;
        };
        let Some((me, leader, protocol_name, members)) = round.joined.clone() else {
            return;
        };
        let first = round.synced_sent.is_none();
        let sent = *round
            .synced_sent
            .get_or_insert(self.group.coordinator().now());
        let answer = if first {
            let assignments = if leader {
                lead(&self.group.log, protocol_name.as_deref(), &members)
            } else {
                Vec::new()
            };
            self.group
                .coordinator()
                .sync(&me.member_id, me.generation_id, assignments)
        } else {
            self.group.coordinator().sync_reply(&me.member_id)
        };
        let Some((code, bytes)) = answer else {
            return;
        };
        let Some(round) = self.round.take() else {
            return;
        };
        let ctx = ErrorContext {
            group_id: &self.config.group_id,
            group_instance_id: self.config.group_instance_id.as_deref(),
        };
        let synced = self
            .shared
            .lock()
            .synced(sent, &me, code, &round.reason, &ctx);
        self.shared.lock().release_session();
        if synced.is_err() {
            return;
        }
        let assigned = decode_assignment(&bytes)
            .map(|a| a.partitions)
            .unwrap_or_default();
        self.shared
            .lock()
            .post_assignment(self.protocol, &me, leader, &round.owned, &assigned);
    }
}

/// As leader: the real assignor over the members' real subscription bytes, with the partition
/// counts the log knows.
fn lead(
    log: &InMemoryLog,
    protocol_name: Option<&str>,
    members: &[(String, Option<String>, Bytes)],
) -> Vec<(String, Bytes)> {
    let Some(assignor) = protocol_name.and_then(assignor_for) else {
        return Vec::new();
    };
    let mut partitions = BTreeMap::new();
    let mut subscriptions = Vec::with_capacity(members.len());
    for (id, instance, metadata) in members {
        let Ok(decoded) = decode_subscription(metadata) else {
            continue;
        };
        for topic in &decoded.subscription.topics {
            if let Some(count) = log.partition_count(topic) {
                partitions.insert(topic.to_string(), count);
            }
        }
        subscriptions.push(MemberSubscription::new(
            id.clone(),
            instance.clone(),
            decoded,
        ));
    }
    assign_and_encode(assignor, &subscriptions, &partitions)
        .map(|assigned| assigned.into_iter().collect())
        .unwrap_or_default()
}

impl Steps for ClassicSteps {
    fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    fn config(&self) -> &GroupConfig {
        &self.config
    }

    fn rebalance_protocol(&self) -> RebalanceProtocol {
        self.protocol
    }

    /// A heartbeat, then (cooperative: the rounds run beside the poll loop) the round if one is
    /// due. An eager member's rounds are the poll thread's ([`Steps::poll_turn`]).
    fn step(&mut self) {
        self.heartbeat();
        if self.protocol != RebalanceProtocol::Cooperative {
            return;
        }
        let due = self.shared.lock().round_due();
        if due.is_some() || self.round.is_some() {
            self.advance_round(due.unwrap_or_default());
        }
    }

    /// Eager: everything is handed back before the JoinGroup, in the old generation; then this
    /// thread runs the round (held: the next poll collects it).
    fn poll_turn(&mut self, handout: &mut Handout) -> Result<PollTurn, GroupError> {
        if self.protocol != RebalanceProtocol::Eager {
            return Ok(PollTurn::Idle);
        }
        let step = self.shared.lock().next_step();
        match step {
            NextStep::Closed => Err(GroupError::Closed),
            NextStep::Stable => Ok(PollTurn::Idle),
            NextStep::Join(reason) => {
                let group_id = self.config.group_id.clone();
                if let Some(revoke) =
                    handout.revoke_before_join(&self.shared, self.protocol, &group_id, &reason)
                {
                    return Ok(PollTurn::Hand(revoke));
                }
                self.advance_round(reason);
                Ok(PollTurn::Progressed)
            }
        }
    }

    /// The coordinator's generation check, then the log.
    fn send_commit(
        &self,
        who: &CommitIdentity<'_>,
        offsets: &[OffsetCommitEntry],
    ) -> Result<CommitResults, WireError> {
        let code = self
            .group
            .coordinator()
            .commit(who.member_id, who.generation_id_or_member_epoch);
        let refused = |code| Err(WireError::kafka(ApiKey::OffsetCommit, code, ""));
        if code != KafkaCode::NONE {
            return Ok(offsets
                .iter()
                .map(|o| (o.tp.clone(), refused(code)))
                .collect());
        }
        Ok(self
            .group
            .log
            .commit(who.group_id, offsets)
            .into_iter()
            .map(|(tp, code)| match code {
                KafkaCode::NONE => (tp, Ok(())),
                code => (tp, refused(code)),
            })
            .collect())
    }

    /// LeaveGroup, unless the member is static or never joined.
    fn leave(&mut self) {
        let identity = self.shared.lock().identity().clone();
        if self.config.group_instance_id.is_none() && !identity.member_id.is_empty() {
            self.group.coordinator().leave(&identity.member_id);
        }
    }
}
