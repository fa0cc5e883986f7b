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
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::classic::{Coordinator, JoinReply, JoinRequest};
use super::memory_log::InMemoryLog;
use crate::group::assignor::{
    assign_and_encode, assignor_for, select_protocol, MemberSubscription, RebalanceProtocol,
    Strategy,
};
use crate::group::commit::commit_offsets;
use crate::group::handout::Handout;
use crate::group::membership::ErrorContext;
use crate::group::requests::MemberIdentity;
use crate::group::session::{HeartbeatDue, JoinAnswer, NextStep, Shared, Timeouts};
use crate::group::subscription::{decode_assignment, decode_subscription, Subscription};
use crate::group::GroupConfig;
use crate::group::{
    Ack, Change, CommitError, CommitKind, CommitResults, FenceHook, GroupError, LostHook,
    Membership, MembershipView,
};
use crate::guard::SessionBound;
use kafka_protocol::messages::ApiKey;

use crate::wire::{CommitIdentity, KafkaCode, OffsetCommitEntry, RecordSource, WireError};
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
        self.coordinator
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A member of this group for a consumer built with `Consumer::with_membership`, and the
    /// handle through which the test reaches it while the consumer owns it.
    pub fn member(
        &self,
        strategy: Strategy,
        config: GroupConfig,
        hook: LostHook,
    ) -> (Box<dyn Membership>, ClassicHandle) {
        let protocol = assignor_for(strategy.name())
            .map(|a| a.protocol())
            .unwrap_or(RebalanceProtocol::Eager);
        let shared = Arc::new(Shared::new(
            hook,
            Timeouts {
                session_timeout: config.session_timeout,
                max_poll_interval: config.max_poll_interval,
            },
        ));
        if protocol == RebalanceProtocol::Cooperative {
            shared.lock().run_rounds_beside();
        }
        let inner = Arc::new(Mutex::new(Inner {
            group: self.clone(),
            config,
            strategy,
            protocol,
            shared,
            handout: Handout::default(),
            round: None,
            paced: Paced::default(),
            journal: Arc::default(),
        }));
        let member = InMemoryClassicMember {
            inner: inner.clone(),
            log: self.log.clone(),
        };
        (Box::new(member), ClassicHandle(inner))
    }
}

/// What a test holds of a member the consumer owns: its identity, and the paced commit.
#[derive(Clone)]
pub struct ClassicHandle(Arc<Mutex<Inner>>);

impl ClassicHandle {
    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One step of the membership (heartbeat, round), as the membership thread would take it
    /// while the poll thread is inside a batch.
    pub fn step(&self) {
        let _ = self.inner().step();
    }

    /// The member's identity now.
    pub fn identity(&self) -> MemberIdentity {
        self.inner().shared.lock().identity().clone()
    }

    /// Holds paced commits in flight (the commit thread's request not answered) until
    /// [`release_paced`](Self::release_paced).
    pub fn hold_paced(&self) {
        self.inner().paced.hold = true;
    }

    /// Answers the paced commit in flight now (checked against the coordinator as it is now).
    pub fn release_paced(&self) {
        let mut inner = self.inner();
        inner.paced.hold = false;
        inner.answer_paced();
    }

    /// Everything the member did so far, in order (see [`Journal`]).
    pub fn journal(&self) -> Vec<Journal> {
        self.inner()
            .journal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// True while a paced commit was sent and not answered.
    pub fn paced_in_flight(&self) -> bool {
        self.inner().paced.sent.is_some()
    }
}

/// What a member did, in order, as the coordinator and the membership thread would see it: the
/// commits it sent and the changes the poll thread acknowledged. A test reads it to check the
/// handoff's order (a revocation is acknowledged, which lets the membership give the partitions
/// away, only after its commit was answered).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Journal {
    /// An OffsetCommit answered: the generation it carried, and each partition's offset with
    /// whether it was accepted.
    Committed {
        /// The generation the commit carried.
        generation_id: i32,
        /// Each partition, its offset, and whether it was stored.
        offsets: Vec<(TopicPartition, i64, bool)>,
    },
    /// The poll thread acknowledged the revocation of these partitions (or all of them, before
    /// an eager JoinGroup, or when closing).
    RevocationAcknowledged(Vec<TopicPartition>),
    /// The poll thread acknowledged an assignment.
    AssignmentAcknowledged,
}

impl Journal {
    /// The entry of an answered OffsetCommit.
    pub(crate) fn committed(
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

    /// The entry of an acknowledged change.
    pub(crate) fn acknowledged(ack: &Ack) -> Journal {
        match ack.revoked() {
            Some(partitions) => Journal::RevocationAcknowledged(partitions),
            None => Journal::AssignmentAcknowledged,
        }
    }
}

/// A paced commit: sent (identity and offsets), then answered.
#[derive(Default)]
struct Paced {
    sent: Option<(MemberIdentity, Vec<OffsetCommitEntry>)>,
    answer: Option<Result<CommitResults, CommitError>>,
    hold: bool,
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

struct Inner {
    group: ClassicGroup,
    config: GroupConfig,
    strategy: Strategy,
    protocol: RebalanceProtocol,
    shared: Arc<Shared>,
    handout: Handout,
    round: Option<RoundInFlight>,
    paced: Paced,
    journal: Arc<Mutex<Vec<Journal>>>,
}

/// The member the consumer owns (see [`ClassicGroup::member`]), and its record source.
struct InMemoryClassicMember {
    inner: Arc<Mutex<Inner>>,
    log: InMemoryLog,
}

impl InMemoryClassicMember {
    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Inner {
    fn ctx(&self) -> ErrorContext<'_> {
        ErrorContext {
            group_id: &self.config.group_id,
            group_instance_id: self.config.group_instance_id.as_deref(),
        }
    }

    fn now(&self) -> Instant {
        self.group.coordinator().now()
    }

    /// The membership thread's turn: a heartbeat, then (cooperative) the round if one is due.
    /// An eager member's rounds are the poll thread's (see `next_change`).
    fn step(&mut self) -> Result<(), GroupError> {
        self.heartbeat();
        if self.protocol != RebalanceProtocol::Cooperative {
            return Ok(());
        }
        let due = self.shared.lock().round_due();
        if due.is_some() || self.round.is_some() {
            self.advance_round(due.unwrap_or_default());
        }
        Ok(())
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

    /// The commit function of this member: the coordinator's generation check, then the log.
    fn send_commit(
        group: &ClassicGroup,
        journal: &Mutex<Vec<Journal>>,
        who: &CommitIdentity<'_>,
        offsets: &[OffsetCommitEntry],
    ) -> Result<CommitResults, WireError> {
        let results = Inner::commit_at_coordinator(group, who, offsets)?;
        let entry = Journal::Committed {
            generation_id: who.generation_id_or_member_epoch,
            offsets: offsets
                .iter()
                .map(|o| {
                    let stored = results.iter().any(|(tp, r)| *tp == o.tp && r.is_ok());
                    (o.tp.clone(), o.offset, stored)
                })
                .collect(),
        };
        journal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(entry);
        Ok(results)
    }

    /// The coordinator's generation check, then the log.
    fn commit_at_coordinator(
        group: &ClassicGroup,
        who: &CommitIdentity<'_>,
        offsets: &[OffsetCommitEntry],
    ) -> Result<CommitResults, WireError> {
        let code = group
            .coordinator()
            .commit(who.member_id, who.generation_id_or_member_epoch);
        let refused = |code| Err(WireError::kafka(ApiKey::OffsetCommit, code, ""));
        if code != KafkaCode::NONE {
            return Ok(offsets
                .iter()
                .map(|o| (o.tp.clone(), refused(code)))
                .collect());
        }
        Ok(group
            .log
            .commit(who.group_id, offsets)
            .into_iter()
            .map(|(tp, code)| match code {
                KafkaCode::NONE => (tp, Ok(())),
                code => (tp, refused(code)),
            })
            .collect())
    }

    fn commit_as(
        &mut self,
        identity: &MemberIdentity,
        offsets: &[OffsetCommitEntry],
        kind: CommitKind,
    ) -> Result<CommitResults, CommitError> {
        let group = self.group.clone();
        let journal = self.journal.clone();
        commit_offsets(
            &mut |who, offsets| Inner::send_commit(&group, &journal, who, offsets),
            &self.shared,
            &self.config.group_id,
            self.config.group_instance_id.as_deref(),
            identity,
            offsets,
            kind,
        )
    }

    fn answer_paced(&mut self) {
        if let Some((identity, offsets)) = self.paced.sent.take() {
            let answer = self.commit_as(&identity, &offsets, CommitKind::Paced);
            self.paced.answer = Some(answer);
        }
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

impl Membership for InMemoryClassicMember {
    fn next_change(&mut self, _timeout: Duration) -> Result<Option<Change>, GroupError> {
        let mut inner = self.inner();
        let inner = &mut *inner;
        let mut stepped = false;
        let mut rounded = false;
        loop {
            inner.handout.take_reports(&inner.shared)?;
            if let Some(loss) = inner.handout.next_loss() {
                return Ok(Some(loss));
            }
            if let Some(fatal) = inner.handout.take_fatal() {
                return Err(fatal);
            }
            if let Some(change) = inner.handout.next(&inner.shared) {
                return Ok(Some(change));
            }
            if inner.protocol == RebalanceProtocol::Eager && !rounded {
                let step = inner.shared.lock().next_step();
                match step {
                    NextStep::Closed => return Err(GroupError::Closed),
                    NextStep::Stable => {}
                    NextStep::Join(reason) => {
                        // Everything is handed back before the JoinGroup, in the old
                        // generation; then this thread runs the round (held: the next poll
                        // collects it).
                        let group_id = inner.config.group_id.clone();
                        if let Some(revoke) = inner.handout.revoke_before_join(
                            &inner.shared,
                            inner.protocol,
                            &group_id,
                            &reason,
                        ) {
                            return Ok(Some(revoke));
                        }
                        inner.advance_round(reason);
                        rounded = true;
                        continue;
                    }
                }
            }
            // One step of the membership per poll; what it decided is handed out at once.
            if stepped {
                return Ok(None);
            }
            inner.step()?;
            stepped = true;
        }
    }

    fn acknowledge(&mut self, ack: Ack) {
        let mut inner = self.inner();
        let inner = &mut *inner;
        let entry = match ack.revoked() {
            Some(partitions) => Journal::RevocationAcknowledged(partitions),
            None => Journal::AssignmentAcknowledged,
        };
        inner
            .journal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(entry);
        inner.handout.acknowledge(&inner.shared, ack);
    }

    fn closing(&mut self) -> Vec<Change> {
        let mut inner = self.inner();
        let inner = &mut *inner;
        inner.handout.closing(&inner.shared)
    }

    fn leave(&mut self) -> Result<(), GroupError> {
        let inner = self.inner();
        let identity = inner.shared.lock().identity().clone();
        inner.shared.lock().close();
        if inner.config.group_instance_id.is_none() && !identity.member_id.is_empty() {
            inner.group.coordinator().leave(&identity.member_id);
        }
        Ok(())
    }

    fn commit_as(
        &mut self,
        identity: &MemberIdentity,
        offsets: &[OffsetCommitEntry],
        kind: CommitKind,
    ) -> Result<CommitResults, CommitError> {
        let mut inner = self.inner();
        // A synchronous commit waits for the paced one in flight: it is answered first.
        inner.answer_paced();
        inner.commit_as(identity, offsets, kind)
    }

    fn commit_in_background(
        &mut self,
        offsets: Vec<OffsetCommitEntry>,
    ) -> Result<(), Vec<OffsetCommitEntry>> {
        let mut inner = self.inner();
        if inner.paced.sent.is_some() || inner.paced.answer.is_some() {
            return Err(offsets);
        }
        let identity = inner.shared.lock().identity().clone();
        inner.paced.sent = Some((identity, offsets));
        if !inner.paced.hold {
            inner.answer_paced();
        }
        Ok(())
    }

    fn commit_answer(&mut self) -> Option<Result<CommitResults, CommitError>> {
        self.inner().paced.answer.take()
    }

    fn settle_commit(&mut self) {
        self.inner().answer_paced();
    }

    fn commit_in_flight(&self) -> bool {
        let inner = self.inner();
        inner.paced.sent.is_some() || inner.paced.answer.is_some()
    }

    fn records(&mut self) -> &mut dyn RecordSource {
        &mut self.log
    }

    fn identity(&self) -> MemberIdentity {
        self.inner().shared.lock().identity().clone()
    }

    fn owned(&self) -> Vec<TopicPartition> {
        self.inner().shared.lock().owned().to_vec()
    }

    fn rebalance_protocol(&self) -> RebalanceProtocol {
        self.inner().protocol
    }

    fn may_fetch(&self) -> bool {
        self.inner().shared.lock().may_fetch()
    }

    fn batch_boundary_due(&self) -> bool {
        self.inner().shared.lock().boundary_due()
    }

    fn enter_poll(&self) {
        self.inner().shared.lock().enter_poll();
    }

    fn leave_poll(&self) {
        self.inner().shared.lock().leave_poll(Instant::now());
    }

    fn wait_while_session_lapsed(&self, _bound: &SessionBound, _timeout: Duration) {}

    fn view(&self) -> MembershipView {
        let shared = self.inner().shared.clone();
        MembershipView::new(move || {
            let state = shared.lock();
            (state.identity().clone(), state.owned().to_vec())
        })
    }

    fn bound_session(&self, bound: Arc<SessionBound>) {
        self.inner().shared.lock().bound_session(bound);
    }

    fn fence_revocations_with(&self, hook: FenceHook) {
        self.inner().shared.lock().fence_revocations_with(hook);
    }

    fn panic_membership_thread(&self) {
        self.inner().shared.request_panic();
    }
}
