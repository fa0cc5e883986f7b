//! The session driven through whole group life cycles against an in-memory coordinator, with
//! time passed in: joins, syncs, fenced generations, rebalances in progress, cooperative
//! two-round revocations, session expiry, poll timeout, commits and losses, without a broker.
//!
//! [`TestMember`] plays the I/O shell around the session alone: it feeds the session's
//! transitions in the order the membership threads do (report losses, revoke before join, join,
//! lead, sync, stabilise; tick, heartbeat, feed the answer), with requests answered by the
//! [`Coordinator`] instead of a socket, and the changes recorded as callbacks. These tests pin
//! the session's decisions one transition at a time; the order in which a member hands the
//! changes to the poll thread (`group/member.rs`'s `Handout`) and the consumer applies them is run for real,
//! with this coordinator, by the whole-consumer tests in `tests/offline/consumer/in_memory.rs`.

use std::collections::BTreeMap;
use std::sync::Mutex as StdMutex;

use bytes::Bytes;

use super::*;
use crate::group::assignor::MemberSubscription;
use crate::group::assignor::{assign_and_encode, assignor_for, select_protocol, Strategy};
use crate::group::commit::membership_refusal;
use crate::group::subscription::{decode_assignment, decode_subscription, Subscription};
use crate::testing::classic::{Coordinator, GroupState, JoinReply, JoinRequest};

const GROUP: &str = "orders";
const TOPIC: &str = "trades";
const SESSION: Duration = Duration::from_secs(10);
const MAX_POLL: Duration = Duration::from_secs(30);
const TICK: Duration = Duration::from_secs(3);

fn tp(partition: i32) -> TopicPartition {
    TopicPartition::new(TOPIC, partition)
}

fn tps(partitions: &[i32]) -> Vec<TopicPartition> {
    partitions.iter().map(|&p| tp(p)).collect()
}

fn four_partitions() -> BTreeMap<String, i32> {
    BTreeMap::from([(TOPIC.to_string(), 4)])
}

/// A listener callback as the application saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Callback {
    Revoked {
        generation: i32,
        partitions: Vec<TopicPartition>,
    },
    Assigned {
        generation: i32,
        partitions: Vec<TopicPartition>,
    },
    Lost {
        partitions: Vec<TopicPartition>,
        reason: LostReason,
    },
}

struct Round {
    reason: String,
    start: JoinStart,
    sent: Instant,
    joined: Option<Joined>,
    protocol_name: Option<String>,
    members: Vec<(String, Option<String>, Bytes)>,
    sync_sent: Option<Instant>,
}

struct TestMember {
    session: SessionState,
    protocol: RebalanceProtocol,
    strategy: Strategy,
    instance: Option<String>,
    /// Every call of the lost hook, in order.
    fenced: Arc<StdMutex<Vec<Vec<TopicPartition>>>>,
    callbacks: Vec<Callback>,
    round: Option<Round>,
    bound: Arc<SessionBound>,
    /// Every call of the fence hook (revocations fenced when decided), in order.
    fenced_ahead: Arc<StdMutex<Vec<Vec<TopicPartition>>>>,
    /// Plays the cooperative shell: rounds on the membership thread, their decisions applied by
    /// [`apply_pending`](Self::apply_pending) at the poll thread's batch boundary.
    beside: bool,
}

fn ctx(instance: &Option<String>) -> ErrorContext<'_> {
    ErrorContext {
        group_id: GROUP,
        group_instance_id: instance.as_deref(),
    }
}

impl TestMember {
    fn new(strategy: Strategy, instance: Option<&str>, now: Instant) -> Self {
        let fenced = Arc::new(StdMutex::new(Vec::new()));
        let record = fenced.clone();
        let hook: LostHook = Arc::new(move |parts: &[TopicPartition], _: &LostReason| {
            record
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(parts.to_vec());
        });
        let mut session = SessionState::new(
            hook,
            Timeouts {
                session_timeout: SESSION,
                max_poll_interval: MAX_POLL,
            },
            now,
        );
        let bound = Arc::new(SessionBound::unbounded());
        session.bound_session(bound.clone());
        let fenced_ahead = Arc::new(StdMutex::new(Vec::new()));
        let record_ahead = fenced_ahead.clone();
        session.fence_revocations_with(Arc::new(move |parts: &[TopicPartition]| {
            record_ahead
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(parts.to_vec());
            crate::guard::Fenced::none()
        }));
        TestMember {
            session,
            protocol: assignor_for(strategy.name())
                .map(|a| a.protocol())
                .unwrap_or(RebalanceProtocol::Eager),
            strategy,
            instance: instance.map(str::to_string),
            fenced,
            callbacks: Vec::new(),
            round: None,
            bound,
            fenced_ahead,
            beside: false,
        }
    }

    /// The same member with its rounds beside the poll loop (as the classic member sets up a
    /// cooperative member), after the application's first poll.
    fn beside(mut self, now: Instant) -> Self {
        self.session.run_rounds_beside();
        self.session.enter_poll();
        self.session.leave_poll(now);
        self.beside = true;
        self
    }

    fn fenced_ahead(&self) -> Vec<Vec<TopicPartition>> {
        self.fenced_ahead
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The decided change at a batch boundary, as the hand-out gives it: the change's
    /// revocations (committing as its generation through `commit`), then its assignment, each
    /// acknowledged; the change cleared last.
    fn apply_pending(&mut self, mut commit: impl FnMut(&mut SessionState, &MemberIdentity)) {
        let (lost, pending) = self.session.take_change();
        for (partitions, reason) in lost {
            if !partitions.is_empty() {
                self.callbacks.push(Callback::Lost { partitions, reason });
            }
        }
        let Some(decision) = pending.first().and_then(Change::decision).cloned() else {
            return;
        };
        for change in pending {
            match change {
                Change::Revoke {
                    identity: me,
                    partitions,
                    ..
                } => {
                    commit(&mut self.session, &me);
                    self.callbacks.push(Callback::Revoked {
                        generation: me.generation_id,
                        partitions: partitions.clone(),
                    });
                    self.session.revoked(&me, &partitions);
                }
                Change::Assign {
                    identity: me,
                    partitions,
                    ..
                } => {
                    if !self.session.assigning(&me, &decision) {
                        break;
                    }
                    self.callbacks.push(Callback::Assigned {
                        generation: me.generation_id,
                        partitions,
                    });
                }
                Change::Lost { partitions, reason } => {
                    self.callbacks.push(Callback::Lost { partitions, reason })
                }
            }
        }
        self.session.changes_applied(&decision);
    }

    fn fenced(&self) -> Vec<Vec<TopicPartition>> {
        self.fenced
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn member_id(&self) -> String {
        self.session.identity().member_id.clone()
    }

    fn generation(&self) -> i32 {
        self.session.identity().generation_id
    }

    fn take_callbacks(&mut self) -> Vec<Callback> {
        std::mem::take(&mut self.callbacks)
    }

    /// What `poll` does first: report the losses (already fenced) to the listener.
    fn report(&mut self) -> Option<FatalError> {
        let (lost, fatal) = self.session.take_reports();
        for (partitions, reason) in lost {
            if !partitions.is_empty() {
                self.callbacks.push(Callback::Lost { partitions, reason });
            }
        }
        fatal
    }

    /// `poll`'s rebalance, up to JoinGroup: eager revocation, then the request. Returns the
    /// join's outcome when the coordinator answered at once, `Ok(None)` while it holds it.
    fn start_join(&mut self, c: &mut Coordinator) -> Result<Option<Joined>, Refusal> {
        assert!(self.report().is_none(), "no fatal error pending");
        let NextStep::Join(reason) = self.session.next_step() else {
            panic!("start_join while {:?}", self.session.next_step());
        };
        let revoke = self.session.revoke_before_join(self.protocol);
        if !revoke.partitions.is_empty() {
            self.callbacks.push(Callback::Revoked {
                generation: revoke.identity.generation_id,
                partitions: revoke.partitions,
            });
            self.session.revoked_before_join();
        }
        let start = self.session.join();
        let mut subscription = Subscription::new([TOPIC]);
        subscription.owned_partitions = start.owned.clone();
        subscription.generation_id = start.identity.generation_id;
        let protocols = select_protocol(&[self.strategy], &subscription)
            .map(|p| p.protocols)
            .unwrap_or_default()
            .into_iter()
            .map(|p| (p.name.to_string(), p.metadata))
            .collect();
        let request = JoinRequest {
            member_id: start.identity.member_id.clone(),
            instance_id: self.instance.clone(),
            protocols,
        };
        let sent = c.now();
        self.session.hold_session(sent);
        self.round = Some(Round {
            reason,
            start,
            sent,
            joined: None,
            protocol_name: None,
            members: Vec::new(),
            sync_sent: None,
        });
        match c.join(request) {
            Some(reply) => self.join_answered(reply),
            None => Ok(None),
        }
    }

    /// The held JoinGroup came back.
    fn collect_join(&mut self, c: &mut Coordinator) -> Result<Option<Joined>, Refusal> {
        let round = self.round.as_ref().expect("a join in flight");
        match c.join_reply(&round.start.identity.member_id) {
            Some(reply) => self.join_answered(reply),
            None => Ok(None),
        }
    }

    fn join_answered(&mut self, reply: JoinReply) -> Result<Option<Joined>, Refusal> {
        let round = self.round.as_mut().expect("a join in flight");
        let answer = JoinAnswer {
            error_code: reply.error_code,
            generation_id: reply.generation_id,
            member_id: &reply.member_id,
            leader: &reply.leader,
        };
        match self
            .session
            .joined(round.sent, &answer, &round.reason, &ctx(&self.instance))
        {
            Ok(joined) => {
                round.joined = Some(joined.clone());
                round.protocol_name = reply.protocol_name;
                round.members = reply.members;
                Ok(Some(joined))
            }
            Err(refusal) => {
                self.round = None;
                self.session.release_session();
                Err(refusal)
            }
        }
    }

    /// As leader: the real assignor over the members' real subscription bytes.
    fn lead(&self, partitions: &BTreeMap<String, i32>) -> Vec<(String, Bytes)> {
        let round = self.round.as_ref().expect("a joined round");
        let name = round.protocol_name.clone().unwrap_or_default();
        let assignor = assignor_for(&name).expect("an assignor we offered");
        let subscriptions: Vec<MemberSubscription> = round
            .members
            .iter()
            .map(|(id, instance, metadata)| {
                let decoded = decode_subscription(metadata).expect("our own subscription bytes");
                MemberSubscription::new(id.clone(), instance.clone(), decoded)
            })
            .collect();
        assign_and_encode(assignor, &subscriptions, partitions)
            .expect("an assignment")
            .into_iter()
            .collect()
    }

    /// SyncGroup (the leader's carries the assignment). `Ok(false)` while it is held.
    fn sync(
        &mut self,
        c: &mut Coordinator,
        partitions: &BTreeMap<String, i32>,
    ) -> Result<bool, Refusal> {
        self.sync_with(c, partitions, |_| {})
    }

    /// [`sync`](Self::sync), with `during_revoke` run inside each revocation callback of an
    /// answer that comes at once.
    fn sync_with(
        &mut self,
        c: &mut Coordinator,
        partitions: &BTreeMap<String, i32>,
        during_revoke: impl FnMut(&mut SessionState),
    ) -> Result<bool, Refusal> {
        let joined = self
            .round
            .as_ref()
            .and_then(|r| r.joined.clone())
            .expect("a joined round");
        let assignments = if joined.leader {
            self.lead(partitions)
        } else {
            Vec::new()
        };
        let sent = c.now();
        if let Some(round) = self.round.as_mut() {
            round.sync_sent = Some(sent);
        }
        match c.sync(
            &joined.identity.member_id,
            joined.identity.generation_id,
            assignments,
        ) {
            Some((code, bytes)) => self.sync_answered(code, &bytes, during_revoke),
            None => Ok(false),
        }
    }

    /// The held SyncGroup came back.
    fn collect_sync(&mut self, c: &mut Coordinator) -> Result<bool, Refusal> {
        let member_id = self.member_id();
        match c.sync_reply(&member_id) {
            Some((code, bytes)) => self.sync_answered(code, &bytes, |_| {}),
            None => Ok(false),
        }
    }

    /// The SyncGroup answer, then the plan's callbacks; `during_revoke` runs inside each
    /// revocation callback (where the heartbeat thread may act meanwhile).
    fn sync_answered(
        &mut self,
        code: KafkaCode,
        bytes: &[u8],
        mut during_revoke: impl FnMut(&mut SessionState),
    ) -> Result<bool, Refusal> {
        let round = self.round.take().expect("a sync in flight");
        let me = round.joined.clone().expect("joined").identity;
        let sent = round.sync_sent.expect("sync sent");
        let synced = self
            .session
            .synced(sent, &me, code, &round.reason, &ctx(&self.instance));
        // The round is over: released after the answer renewed the session, as `Round::run`.
        self.session.release_session();
        synced?;
        let assigned = decode_assignment(bytes).expect("our own assignment bytes");
        if self.beside {
            // The membership thread: the decision waits for the poll thread.
            let leader = round.joined.as_ref().is_some_and(|j| j.leader);
            self.session.post_assignment(
                self.protocol,
                &me,
                leader,
                &round.start.owned,
                &assigned.partitions,
            );
            return Ok(true);
        }
        let leader = round.joined.as_ref().is_some_and(|j| j.leader);
        let changes = self.session.stabilise(
            self.protocol,
            &me,
            leader,
            &round.start.owned,
            &assigned.partitions,
        );
        let Some(decision) = changes.first().and_then(Change::decision).cloned() else {
            return Ok(true);
        };
        for change in changes {
            match change {
                Change::Revoke { partitions, .. } => {
                    during_revoke(&mut self.session);
                    self.callbacks.push(Callback::Revoked {
                        generation: me.generation_id,
                        partitions: partitions.clone(),
                    });
                    self.session.revoked(&me, &partitions);
                }
                Change::Assign { partitions, .. } => {
                    if !self.session.assigning(&me, &decision) {
                        return Ok(true);
                    }
                    self.callbacks.push(Callback::Assigned {
                        generation: me.generation_id,
                        partitions,
                    });
                }
                Change::Lost { partitions, reason } => {
                    self.callbacks.push(Callback::Lost { partitions, reason })
                }
            }
        }
        Ok(true)
    }

    /// One tick of the heartbeat thread at the coordinator's time: the due check, and the
    /// heartbeat's answer when one was sent.
    fn tick(&mut self, c: &mut Coordinator) -> (HeartbeatDue, Option<HeartbeatVerdict>) {
        let now = c.now();
        let due = self.session.heartbeat_due(now);
        let verdict = match &due {
            HeartbeatDue::Send(me) => {
                let code = c.heartbeat(&me.member_id, me.generation_id);
                Some(
                    self.session
                        .heartbeat_answered(now, me, Some(code), &ctx(&self.instance)),
                )
            }
            HeartbeatDue::LeaveAfterPollTimeout(left) => {
                if self.instance.is_none() {
                    c.leave(&left.member_id);
                }
                None
            }
            HeartbeatDue::Skip => None,
        };
        (due, verdict)
    }

    /// A heartbeat whose request failed (no answer).
    fn tick_unanswered(&mut self, now: Instant) -> (HeartbeatDue, Option<HeartbeatVerdict>) {
        let due = self.session.heartbeat_due(now);
        let verdict = match &due {
            HeartbeatDue::Send(me) => {
                Some(
                    self.session
                        .heartbeat_answered(now, me, None, &ctx(&self.instance)),
                )
            }
            _ => None,
        };
        (due, verdict)
    }

    /// A commit with the current identity, as `Membership::commit` (between polls) or a
    /// revocation's commit makes it.
    fn commit(
        &mut self,
        c: &mut Coordinator,
        between_polls: bool,
    ) -> Result<KafkaCode, CommitRefusal> {
        let identity = self.session.identity().clone();
        self.commit_as(c, &identity, between_polls)
    }

    fn commit_as(
        &mut self,
        c: &mut Coordinator,
        identity: &MemberIdentity,
        between_polls: bool,
    ) -> Result<KafkaCode, CommitRefusal> {
        self.session.may_commit(identity)?;
        let code = c.commit(&identity.member_id, identity.generation_id);
        if let Some(refusal) = membership_refusal([code]) {
            self.session
                .commit_refused(identity, refusal, between_polls, &ctx(&self.instance));
        }
        Ok(code)
    }
}

/// Runs join rounds for every member until all are stable, the way their poll threads would
/// (each retrying after a refusal), with the coordinator holding requests as a broker does.
/// Returns how many rounds it took.
fn settle(
    c: &mut Coordinator,
    members: &mut [&mut TestMember],
    partitions: &BTreeMap<String, i32>,
) -> usize {
    for round in 1..=6 {
        if members
            .iter()
            .all(|m| m.session.next_step() == NextStep::Stable)
        {
            return round - 1;
        }
        // JoinGroup from each member that wants to join; MEMBER_ID_REQUIRED is retried at once.
        for m in members.iter_mut() {
            if m.round.is_none() && matches!(m.session.next_step(), NextStep::Join(_)) {
                for _ in 0..3 {
                    match m.start_join(c) {
                        Err(Refusal::Retry { .. }) => continue,
                        Err(Refusal::Fatal(f)) => panic!("fatal join: {f}"),
                        Ok(_) => break,
                    }
                }
            }
        }
        // Members that are stable see the rebalance through their heartbeat.
        for m in members.iter_mut() {
            if m.round.is_none() && m.session.next_step() == NextStep::Stable {
                m.tick(c);
                if matches!(m.session.next_step(), NextStep::Join(_)) {
                    m.start_join(c).expect("join");
                }
            }
        }
        for m in members.iter_mut() {
            if m.round.as_ref().is_some_and(|r| r.joined.is_none()) {
                m.collect_join(c).expect("join answered");
            }
        }
        // Followers sync first and are held; the leader's sync releases them.
        let mut order: Vec<usize> = (0..members.len()).collect();
        order.sort_by_key(|&i| {
            members[i]
                .round
                .as_ref()
                .and_then(|r| r.joined.as_ref())
                .is_some_and(|j| j.leader)
        });
        for i in order {
            if members[i]
                .round
                .as_ref()
                .is_some_and(|r| r.joined.is_some())
            {
                members[i].sync(c, partitions).expect("sync");
            }
        }
        for m in members.iter_mut() {
            if m.round.is_some() {
                m.collect_sync(c).expect("sync answered");
            }
        }
    }
    panic!("the group did not settle");
}

fn start(strategy: Strategy) -> (Coordinator, TestMember) {
    let now = Instant::now();
    (
        Coordinator::new(now, SESSION),
        TestMember::new(strategy, None, now),
    )
}

fn assigned(generation: i32, partitions: &[i32]) -> Callback {
    Callback::Assigned {
        generation,
        partitions: tps(partitions),
    }
}

fn revoked(generation: i32, partitions: &[i32]) -> Callback {
    Callback::Revoked {
        generation,
        partitions: tps(partitions),
    }
}

fn lost(partitions: &[i32], reason: LostReason) -> Callback {
    Callback::Lost {
        partitions: tps(partitions),
        reason,
    }
}

/// `a.report()`, checking that it told the listener all four partitions were lost for
/// `reason` and nothing else; returns what `report` returned.
fn report_every_partition_lost(a: &mut TestMember, reason: LostReason) -> Option<FatalError> {
    let fatal = a.report();
    assert_eq!(a.take_callbacks(), vec![lost(&[0, 1, 2, 3], reason)]);
    fatal
}

/// One member, alone in the group, owning all four partitions in generation 1.
fn alone(strategy: Strategy) -> (Coordinator, TestMember) {
    let (mut c, mut a) = start(strategy);
    settle(&mut c, &mut [&mut a], &four_partitions());
    assert_eq!(a.take_callbacks(), vec![assigned(1, &[0, 1, 2, 3])]);
    (c, a)
}

#[test]
fn a_new_member_joins_with_the_id_the_coordinator_gave_it_and_gets_every_partition() {
    let (mut c, mut a) = start(Strategy::Range);
    assert_eq!(
        a.session.next_step(),
        NextStep::Join("initial join".to_string())
    );
    assert!(!a.session.is_stable());
    // KIP-394: the first JoinGroup only gets a member id; the retry joins with it.
    let Err(Refusal::Retry { why, rediscover }) = a.start_join(&mut c) else {
        panic!("MEMBER_ID_REQUIRED must be retried");
    };
    assert!(why.contains("MemberIdRequired"), "{why}");
    assert!(!rediscover);
    assert_eq!(a.member_id(), "member-1");
    assert_eq!(a.generation(), -1);
    assert_eq!(a.session.phase(), Phase::Unjoined);

    let joined = a
        .start_join(&mut c)
        .expect("join")
        .expect("answered at once");
    assert!(joined.leader);
    assert_eq!(joined.identity.generation_id, 1);
    assert_eq!(a.session.phase(), Phase::Joining);
    assert!(a.sync(&mut c, &four_partitions()).expect("sync"));
    assert_eq!(a.session.phase(), Phase::Stable);
    assert!(a.session.is_stable());
    assert_eq!(a.session.owned(), tps(&[0, 1, 2, 3]).as_slice());
    assert_eq!(a.take_callbacks(), vec![assigned(1, &[0, 1, 2, 3])]);
    assert_eq!(c.state, GroupState::Stable);
    assert!(a.fenced().is_empty());
}

#[test]
fn eager_members_revoke_everything_before_rejoining_then_split_the_partitions() {
    let (mut c, mut a) = alone(Strategy::Range);
    let mut b = TestMember::new(Strategy::Range, None, c.now());
    // B's join starts a rebalance; A hears of it through its heartbeat and keeps its partitions
    // until its own poll rejoins.
    assert!(matches!(b.start_join(&mut c), Err(Refusal::Retry { .. })));
    assert!(
        b.start_join(&mut c).expect("join").is_none(),
        "held until A joins"
    );
    let (_, verdict) = a.tick(&mut c);
    assert_eq!(verdict, Some(HeartbeatVerdict::Rebalancing { first: true }));
    assert_eq!(a.session.rejoin_reason(), Some("the group is rebalancing"));
    assert_eq!(a.session.owned().len(), 4);
    assert!(!a.session.is_stable());

    settle(&mut c, &mut [&mut a, &mut b], &four_partitions());
    // Everything handed back in generation 1, before the join; then the new generation.
    assert_eq!(
        a.take_callbacks(),
        vec![revoked(1, &[0, 1, 2, 3]), assigned(2, &[0, 1])]
    );
    assert_eq!(b.take_callbacks(), vec![assigned(2, &[2, 3])]);
    assert!(a.fenced().is_empty() && b.fenced().is_empty());
}

#[test]
fn cooperative_members_keep_what_stays_and_hand_over_the_rest_in_two_rounds() {
    let (mut c, mut a) = alone(Strategy::CooperativeSticky);
    let mut b = TestMember::new(Strategy::CooperativeSticky, None, c.now());
    assert!(matches!(b.start_join(&mut c), Err(Refusal::Retry { .. })));
    assert!(b.start_join(&mut c).expect("join").is_none());
    a.tick(&mut c);
    // Nothing is revoked before the join: A still owns all four while it rejoins.
    a.start_join(&mut c).expect("join");
    assert_eq!(a.session.phase(), Phase::Joining);
    assert_eq!(a.session.owned().len(), 4);
    assert!(a.take_callbacks().is_empty());
    b.collect_join(&mut c).expect("join");

    // Round one: the leader gives B nothing yet; A revokes only what moves and asks for the
    // follow-up round.
    let partitions = four_partitions();
    // Whoever leads, B syncs first: A's answer comes at once.
    b.sync(&mut c, &partitions).expect("sync");
    assert!(a.sync(&mut c, &partitions).expect("sync"));
    if b.round.is_some() {
        b.collect_sync(&mut c).expect("sync");
    }
    let first = a.take_callbacks();
    let [Callback::Revoked {
        generation: 2,
        partitions: moving,
    }, Callback::Assigned {
        generation: 2,
        partitions: added,
    }] = first.as_slice()
    else {
        panic!("round one: {first:?}");
    };
    assert_eq!(moving.len(), 2);
    assert!(added.is_empty());
    let kept: Vec<TopicPartition> = tps(&[0, 1, 2, 3])
        .into_iter()
        .filter(|p| !moving.contains(p))
        .collect();
    assert_eq!(a.session.owned(), kept.as_slice());
    assert_eq!(a.session.rejoin_reason(), Some("cooperative follow-up"));
    assert_eq!(b.take_callbacks(), vec![assigned(2, &[])]);

    // Round two: the revoked partitions reach B; A's kept partitions were never revoked.
    settle(&mut c, &mut [&mut a, &mut b], &partitions);
    assert_eq!(
        a.take_callbacks(),
        vec![Callback::Assigned {
            generation: 3,
            partitions: vec![]
        }]
    );
    assert_eq!(
        b.take_callbacks(),
        vec![Callback::Assigned {
            generation: 3,
            partitions: moving.clone()
        }]
    );
    assert_eq!(a.session.owned(), kept.as_slice());
    assert!(a.fenced().is_empty());
}

#[test]
fn a_cooperative_member_owns_what_it_hands_back_until_the_revocation_ran() {
    let (mut c, mut a) = alone(Strategy::CooperativeSticky);
    let mut b = TestMember::new(Strategy::CooperativeSticky, None, c.now());
    assert!(matches!(b.start_join(&mut c), Err(Refusal::Retry { .. })));
    b.start_join(&mut c).expect("join");
    a.tick(&mut c);
    a.start_join(&mut c).expect("join");
    b.collect_join(&mut c).expect("join");
    b.sync(&mut c, &four_partitions()).expect("sync");
    let mut seen_inside = Vec::new();
    let answered = a
        .sync_with(&mut c, &four_partitions(), |session| {
            seen_inside.push((session.phase(), session.owned().len()))
        })
        .expect("synced");
    assert!(answered, "B synced first: A's answer comes at once");
    // Inside the revocation the member is stable (heartbeats run) and still owns all four.
    assert_eq!(seen_inside, vec![(Phase::Stable, 4)]);
    assert_eq!(a.session.owned().len(), 2);
}

#[test]
fn an_assignment_lost_while_its_revocation_ran_is_not_handed_out() {
    let (mut c, mut a) = alone(Strategy::CooperativeSticky);
    let mut b = TestMember::new(Strategy::CooperativeSticky, None, c.now());
    assert!(matches!(b.start_join(&mut c), Err(Refusal::Retry { .. })));
    b.start_join(&mut c).expect("join");
    a.tick(&mut c);
    a.start_join(&mut c).expect("join");
    b.collect_join(&mut c).expect("join");
    b.sync(&mut c, &four_partitions()).expect("sync");
    // The heartbeat thread hears ILLEGAL_GENERATION while the revocation drains.
    let answered = a
        .sync_with(&mut c, &four_partitions(), |session| {
            session.lose(LostReason::Fenced(KafkaCode::ILLEGAL_GENERATION), false)
        })
        .expect("synced");
    assert!(answered, "B synced first: A's answer comes at once");
    let callbacks = a.take_callbacks();
    assert!(
        matches!(
            callbacks.as_slice(),
            [Callback::Revoked { generation: 2, .. }]
        ),
        "no assignment after the loss: {callbacks:?}"
    );
    assert_eq!(a.fenced(), vec![tps(&[0, 1, 2, 3])]);
    assert!(a.session.owned().is_empty());
    report_every_partition_lost(&mut a, LostReason::Fenced(KafkaCode::ILLEGAL_GENERATION));
}

#[test]
fn a_heartbeat_answered_illegal_generation_fences_at_once_and_keeps_the_member_id() {
    let (mut c, mut a) = alone(Strategy::Range);
    let me = a.session.identity().clone();
    // The group moved on without A (another member's join completed a round A missed).
    c.generation += 1;
    let (due, verdict) = a.tick(&mut c);
    assert_eq!(due, HeartbeatDue::Send(me.clone()));
    assert_eq!(verdict, Some(HeartbeatVerdict::Lost));
    // Fenced by the thread that heard it, before the poll thread knows.
    assert_eq!(a.fenced(), vec![tps(&[0, 1, 2, 3])]);
    assert!(a.session.owned().is_empty());
    assert_eq!(a.session.phase(), Phase::Unjoined);
    assert_eq!(a.generation(), -1);
    assert_eq!(a.member_id(), me.member_id);
    assert!(
        report_every_partition_lost(&mut a, LostReason::Fenced(KafkaCode::ILLEGAL_GENERATION))
            .is_none()
    );
    assert_eq!(
        a.session.next_step(),
        NextStep::Join("assignment lost: Fenced(KafkaCode(22))".to_string())
    );
}

#[test]
fn unknown_member_id_on_sync_loses_the_assignment_and_the_member_id() {
    let (mut c, mut a) = alone(Strategy::CooperativeSticky);
    c.begin_rebalance();
    a.tick(&mut c);
    a.start_join(&mut c).expect("join").expect("answered");
    // The coordinator forgets A between its join and its sync.
    let member_id = a.member_id();
    c.leave(&member_id);
    let refusal = a.sync(&mut c, &four_partitions()).expect_err("refused");
    assert!(
        matches!(refusal, Refusal::Retry { ref why, rediscover: false } if why.contains("membership reset"))
    );
    assert_eq!(a.fenced(), vec![tps(&[0, 1, 2, 3])]);
    assert_eq!(a.session.identity(), &MemberIdentity::unjoined());
    assert_eq!(a.session.phase(), Phase::Unjoined);
    // The round's reason is kept for the retry.
    assert_eq!(
        a.session.next_step(),
        NextStep::Join("the group is rebalancing".to_string())
    );
    report_every_partition_lost(&mut a, LostReason::Fenced(KafkaCode::UNKNOWN_MEMBER_ID));
    // It joins again as a new member.
    settle(&mut c, &mut [&mut a], &four_partitions());
    assert_eq!(a.member_id(), "member-2");
    assert_eq!(a.take_callbacks(), vec![assigned(3, &[0, 1, 2, 3])]);
}

#[test]
fn a_static_member_fenced_by_its_twin_loses_everything_and_stops() {
    let now = Instant::now();
    let mut c = Coordinator::new(now, SESSION);
    let mut a = TestMember::new(Strategy::Range, Some("worker-7"), now);
    settle(&mut c, &mut [&mut a], &four_partitions());
    a.take_callbacks();
    // A second process starts with the same group.instance.id.
    let mut twin = TestMember::new(Strategy::Range, Some("worker-7"), now);
    twin.start_join(&mut c).expect("join");
    let (_, verdict) = a.tick(&mut c);
    let Some(HeartbeatVerdict::Fatal(fatal)) = verdict else {
        panic!("FENCED_INSTANCE_ID must be fatal: {verdict:?}");
    };
    assert_eq!(fatal.code, KafkaCode::FENCED_INSTANCE_ID);
    assert!(fatal.reason.contains("\"worker-7\""), "{}", fatal.reason);
    assert_eq!(a.fenced(), vec![tps(&[0, 1, 2, 3])]);
    assert_eq!(a.session.identity(), &MemberIdentity::unjoined());
    // The poll thread reports the loss, then returns the fatal error.
    assert_eq!(
        report_every_partition_lost(&mut a, LostReason::Fenced(KafkaCode::FENCED_INSTANCE_ID))
            .map(|f| f.code),
        Some(KafkaCode::FENCED_INSTANCE_ID)
    );
}

#[test]
fn a_sync_refused_by_a_new_rebalance_retries_and_a_cooperative_member_keeps_its_partitions() {
    let (mut c, mut a) = alone(Strategy::CooperativeSticky);
    c.begin_rebalance();
    a.tick(&mut c);
    a.start_join(&mut c).expect("join").expect("answered");
    // Another rebalance begins before A syncs.
    c.begin_rebalance();
    let refusal = a.sync(&mut c, &four_partitions()).expect_err("refused");
    assert!(matches!(refusal, Refusal::Retry { ref why, .. } if why.contains("rejoin")));
    assert_eq!(a.session.phase(), Phase::Unjoined);
    assert_eq!(a.session.owned(), tps(&[0, 1, 2, 3]).as_slice());
    assert!(a.fenced().is_empty());
    assert_eq!(
        a.session.next_step(),
        NextStep::Join("the group is rebalancing".to_string())
    );
    settle(&mut c, &mut [&mut a], &four_partitions());
    assert_eq!(a.take_callbacks(), vec![assigned(3, &[])]);
    assert_eq!(a.session.owned(), tps(&[0, 1, 2, 3]).as_slice());
}

#[test]
fn a_coordinator_that_moved_is_looked_up_again_without_losing_anything() {
    let (_c, mut a) = alone(Strategy::Range);
    let me = a.session.identity().clone();
    let now = Instant::now();
    let ctx = ctx(&None);
    for code in [
        KafkaCode::NOT_COORDINATOR,
        KafkaCode::COORDINATOR_NOT_AVAILABLE,
    ] {
        assert_eq!(
            a.session.heartbeat_answered(now, &me, Some(code), &ctx),
            HeartbeatVerdict::RediscoverCoordinator
        );
    }
    assert_eq!(
        a.session.heartbeat_answered(
            now,
            &me,
            Some(KafkaCode::COORDINATOR_LOAD_IN_PROGRESS),
            &ctx
        ),
        HeartbeatVerdict::Retry
    );
    assert!(a.session.is_stable());
    assert_eq!(a.session.owned().len(), 4);
    assert!(a.fenced().is_empty());
}

#[test]
fn a_session_not_renewed_for_the_session_timeout_is_lost_while_stable() {
    let (mut c, mut a) = alone(Strategy::Range);
    let joined_at = c.now();
    // Heartbeats go unanswered (the coordinator is unreachable).
    for _ in 0..3 {
        c.advance(TICK);
        let (_, verdict) = a.tick_unanswered(c.now());
        assert_eq!(verdict, Some(HeartbeatVerdict::RediscoverCoordinator));
    }
    assert!(
        a.fenced().is_empty(),
        "9 s without an answer is within the 10 s session"
    );
    c.advance(TICK);
    let (due, verdict) = a.tick_unanswered(c.now());
    assert_eq!((due, verdict), (HeartbeatDue::Skip, None));
    assert_eq!(a.fenced(), vec![tps(&[0, 1, 2, 3])]);
    // The member id is kept: the coordinator may still know it.
    assert_eq!(a.member_id(), "member-1");
    assert!(a
        .bound
        .is_expired(joined_at + SESSION + Duration::from_millis(1)));
    report_every_partition_lost(&mut a, LostReason::SessionExpired);
    // The coordinator evicted it too: the rejoin with the old id is refused, then it joins anew.
    settle(&mut c, &mut [&mut a], &four_partitions());
    assert_ne!(a.member_id(), "member-1");
    assert_eq!(a.take_callbacks(), vec![assigned(2, &[0, 1, 2, 3])]);
}

#[test]
fn a_cooperative_member_rejoining_loses_its_partitions_when_the_session_runs_out_but_not_while_its_join_is_held(
) {
    let (mut c, mut a) = alone(Strategy::CooperativeSticky);
    let mut b = TestMember::new(Strategy::CooperativeSticky, None, c.now());
    assert!(matches!(b.start_join(&mut c), Err(Refusal::Retry { .. })));
    b.start_join(&mut c).expect("join");
    a.tick(&mut c);
    // A's JoinGroup is held at the coordinator (it waits for nobody here, but say it is slow):
    // the session cannot expire meanwhile.
    a.session.join();
    a.session.hold_session(c.now());
    c.advance(SESSION * 2);
    assert_eq!(a.session.heartbeat_due(c.now()), HeartbeatDue::Skip);
    assert!(a.fenced().is_empty());
    // The request came back without an answer and nothing renewed the session: lost.
    a.session.round_failed("the group is rebalancing");
    a.session.release_session();
    assert_eq!(a.session.heartbeat_due(c.now()), HeartbeatDue::Skip);
    assert_eq!(a.fenced(), vec![tps(&[0, 1, 2, 3])]);
    assert_eq!(a.member_id(), "member-1");
    report_every_partition_lost(&mut a, LostReason::SessionExpired);
}

#[test]
fn time_inside_poll_does_not_count_against_max_poll_interval_but_time_outside_does() {
    let (mut c, mut a) = alone(Strategy::Range);
    a.session.leave_poll(c.now());
    // Inside poll (joining, running callbacks) for longer than max.poll.interval.ms: fine.
    a.session.enter_poll();
    for _ in 0..12 {
        c.advance(TICK);
        assert!(matches!(a.tick(&mut c).0, HeartbeatDue::Send(_)));
    }
    a.session.leave_poll(c.now());
    // Then the handler holds the thread for longer than max.poll.interval.ms.
    for _ in 0..10 {
        c.advance(TICK);
        assert!(matches!(a.tick(&mut c).0, HeartbeatDue::Send(_)));
    }
    c.advance(TICK);
    let me = a.session.identity().clone();
    let (due, _) = a.tick(&mut c);
    assert_eq!(due, HeartbeatDue::LeaveAfterPollTimeout(me));
    assert_eq!(a.fenced(), vec![tps(&[0, 1, 2, 3])]);
    // It left: a dynamic member's id is gone, here and at the coordinator.
    assert_eq!(a.session.identity(), &MemberIdentity::unjoined());
    assert!(c.member_ids().is_empty());
    report_every_partition_lost(&mut a, LostReason::PollTimeout);
}

#[test]
fn a_heartbeat_answer_for_an_earlier_generation_changes_nothing() {
    let (mut c, mut a) = alone(Strategy::Range);
    let old = a.session.identity().clone();
    c.begin_rebalance();
    a.tick(&mut c);
    settle(&mut c, &mut [&mut a], &four_partitions());
    a.take_callbacks();
    // A heartbeat sent in generation 1 comes back after the rejoin.
    let verdict = a.session.heartbeat_answered(
        c.now(),
        &old,
        Some(KafkaCode::ILLEGAL_GENERATION),
        &ctx(&None),
    );
    assert_eq!(verdict, HeartbeatVerdict::Stale);
    assert!(a.session.is_stable());
    assert!(a.fenced().is_empty());
}

#[test]
fn every_answered_request_renews_the_session_bound_from_its_send_time() {
    let (mut c, mut a) = start(Strategy::Range);
    assert_eq!(a.bound.valid_until(), None);
    let _ = a.start_join(&mut c);
    // MEMBER_ID_REQUIRED is a refusal: no renewal.
    assert_eq!(a.bound.valid_until(), None);
    let join_sent = c.now();
    a.start_join(&mut c).expect("join");
    // Renewed from the join's send; held, while the round is at the coordinator, for the
    // rebalance timeout from there.
    assert_eq!(a.bound.valid_until(), Some(join_sent + MAX_POLL));
    c.advance(Duration::from_secs(1));
    a.sync(&mut c, &four_partitions()).expect("sync");
    assert_eq!(
        a.bound.valid_until(),
        Some(join_sent + Duration::from_secs(1) + SESSION)
    );
    c.advance(TICK);
    a.tick(&mut c);
    assert_eq!(a.bound.valid_until(), Some(c.now() + SESSION));
    // A heartbeat that says "rebalancing" also proves the session alive.
    c.begin_rebalance();
    c.advance(TICK);
    a.tick(&mut c);
    assert_eq!(a.bound.valid_until(), Some(c.now() + SESSION));
}

#[test]
fn commits_are_sent_only_inside_the_generation_they_were_made_for() {
    let (mut c, mut a) = start(Strategy::Range);
    assert_eq!(a.commit(&mut c, true), Err(CommitRefusal::NotInGeneration));
    settle(&mut c, &mut [&mut a], &four_partitions());
    let gen1 = a.session.identity().clone();
    assert_eq!(a.commit(&mut c, true), Ok(KafkaCode::NONE));
    c.begin_rebalance();
    a.tick(&mut c);
    settle(&mut c, &mut [&mut a], &four_partitions());
    assert_eq!(
        a.commit_as(&mut c, &gen1, true),
        Err(CommitRefusal::GenerationOver {
            current_generation_id: 2
        })
    );
    assert_eq!(c.commits, vec![("member-1".to_string(), 1)]);
}

#[test]
fn an_application_commit_refused_for_a_dead_membership_loses_the_assignment_at_once() {
    let (mut c, mut a) = alone(Strategy::Range);
    let member_id = a.member_id();
    c.leave(&member_id);
    // The coordinator rebalanced without A; A's commit between polls learns it first.
    assert_eq!(a.commit(&mut c, true), Ok(KafkaCode::UNKNOWN_MEMBER_ID));
    assert_eq!(a.fenced(), vec![tps(&[0, 1, 2, 3])]);
    assert_eq!(a.session.identity(), &MemberIdentity::unjoined());
    report_every_partition_lost(&mut a, LostReason::Fenced(KafkaCode::UNKNOWN_MEMBER_ID));
}

#[test]
fn a_revocation_commit_refused_asks_for_a_rejoin_and_a_rebalancing_group_too() {
    let (mut c, mut a) = alone(Strategy::Range);
    c.generation += 1;
    // Inside a revocation the partitions are fenced by the revocation already.
    assert_eq!(a.commit(&mut c, false), Ok(KafkaCode::ILLEGAL_GENERATION));
    assert!(a.fenced().is_empty());
    assert_eq!(
        a.session.rejoin_reason(),
        Some("offset commit refused for this generation")
    );
    assert_eq!(a.session.owned().len(), 4);

    let (mut c, mut a) = alone(Strategy::Range);
    // A round waits for its leader's assignment (Kafka refuses commits then, and accepts them
    // while the group only prepares the rebalance).
    c.state = GroupState::CompletingRebalance;
    // The generation is ending, not over: rejoin, keep the partitions for the handoff.
    assert_eq!(a.commit(&mut c, true), Ok(KafkaCode::REBALANCE_IN_PROGRESS));
    assert!(a.fenced().is_empty());
    assert_eq!(a.session.owned().len(), 4);
    assert!(a.session.rejoin_reason().is_some());
}

#[test]
fn a_commit_refusal_heard_after_a_reset_changes_nothing_more() {
    let (mut c, mut a) = alone(Strategy::Range);
    let gen1 = a.session.identity().clone();
    c.generation += 1;
    a.tick(&mut c);
    assert_eq!(a.fenced().len(), 1);
    // The commit was made for generation 1 before the reset; its refusal arrives after.
    a.session
        .commit_refused(&gen1, KafkaCode::ILLEGAL_GENERATION, true, &ctx(&None));
    assert_eq!(a.fenced().len(), 1, "fenced once");
    a.report();
    assert_eq!(a.take_callbacks().len(), 1, "reported lost once");
}

#[test]
fn closing_hands_back_everything_once_and_stops_the_heartbeats() {
    let (mut c, mut a) = alone(Strategy::CooperativeSticky);
    let me = a.session.identity().clone();
    let (identity, partitions) = a.session.leave().expect("not closed yet");
    assert_eq!(identity, me);
    assert_eq!(partitions, tps(&[0, 1, 2, 3]));
    a.session.close();
    assert_eq!(a.session.phase(), Phase::Closed);
    assert_eq!(a.session.next_step(), NextStep::Closed);
    assert!(a.session.owned().is_empty());
    assert!(a.session.leave().is_none(), "a second close does nothing");
    c.advance(SESSION * 2);
    assert_eq!(a.session.heartbeat_due(c.now()), HeartbeatDue::Skip);
    assert!(a.fenced().is_empty(), "closing is a handoff, not a loss");
}

#[test]
fn a_loss_after_close_keeps_the_member_closed() {
    let (_c, mut a) = alone(Strategy::Range);
    a.session.close();
    a.session.lose(LostReason::SessionExpired, false);
    assert_eq!(a.session.phase(), Phase::Closed);
}

#[test]
fn a_member_that_missed_a_round_rejoins_the_group_and_it_settles() {
    let (mut c, mut a) = alone(Strategy::Range);
    let mut b = TestMember::new(Strategy::Range, None, c.now());
    settle(&mut c, &mut [&mut a, &mut b], &four_partitions());
    a.take_callbacks();
    b.take_callbacks();
    // B stalls past the session: the coordinator evicts it and A gets everything back.
    for _ in 0..4 {
        c.advance(TICK);
        a.tick(&mut c);
    }
    assert_eq!(c.member_ids(), vec![a.member_id()]);
    settle(&mut c, &mut [&mut a], &four_partitions());
    assert_eq!(
        a.take_callbacks(),
        vec![revoked(2, &[0, 1]), assigned(3, &[0, 1, 2, 3])]
    );
    // B's own heartbeat thread found its session gone (no answer for 12 s) and fenced first.
    assert_eq!(b.session.heartbeat_due(c.now()), HeartbeatDue::Skip);
    assert_eq!(b.fenced(), vec![tps(&[2, 3])]);
    b.report();
    assert_eq!(
        b.take_callbacks(),
        vec![lost(&[2, 3], LostReason::SessionExpired)]
    );
}

#[test]
fn a_member_with_no_assignor_in_common_fails_for_good_and_owns_nothing() {
    let (mut c, _a) = alone(Strategy::CooperativeSticky);
    let mut b = TestMember::new(Strategy::Range, None, c.now());
    let refusal = b.start_join(&mut c).expect_err("refused");
    let Refusal::Fatal(fatal) = refusal else {
        panic!("INCONSISTENT_GROUP_PROTOCOL must be fatal: {refusal:?}");
    };
    assert_eq!(fatal.code, KafkaCode::INCONSISTENT_GROUP_PROTOCOL);
    assert!(fatal.reason.contains("orders"), "{}", fatal.reason);
    assert_eq!(b.session.identity(), &MemberIdentity::unjoined());
    assert_eq!(b.session.phase(), Phase::Unjoined);
    assert!(b.fenced().is_empty(), "it owned nothing to fence");
}

#[test]
fn a_coordinator_that_moved_during_a_join_is_looked_up_again_and_the_round_retried() {
    let (mut c, mut a) = alone(Strategy::CooperativeSticky);
    c.begin_rebalance();
    a.tick(&mut c);
    c.moved = true;
    let refusal = a.start_join(&mut c).expect_err("refused");
    assert!(
        matches!(refusal, Refusal::Retry { rediscover: true, ref why } if why.contains("coordinator moved")),
        "{refusal:?}"
    );
    // Nothing is lost: a cooperative member keeps its partitions, and the round is retried.
    assert_eq!(a.session.phase(), Phase::Unjoined);
    assert_eq!(a.session.owned().len(), 4);
    assert!(a.fenced().is_empty());
    assert_eq!(
        a.session.next_step(),
        NextStep::Join("the group is rebalancing".to_string())
    );
    c.moved = false;
    settle(&mut c, &mut [&mut a], &four_partitions());
    assert_eq!(a.take_callbacks(), vec![assigned(2, &[])]);
}

#[test]
fn a_heartbeat_that_hears_of_a_moved_coordinator_keeps_the_session_running_from_its_last_answer() {
    let (mut c, mut a) = alone(Strategy::Range);
    c.moved = true;
    for _ in 0..3 {
        c.advance(TICK);
        let (_, verdict) = a.tick(&mut c);
        assert_eq!(verdict, Some(HeartbeatVerdict::RediscoverCoordinator));
    }
    assert!(a.fenced().is_empty());
    c.advance(TICK);
    a.tick(&mut c);
    assert_eq!(a.fenced(), vec![tps(&[0, 1, 2, 3])]);
    report_every_partition_lost(&mut a, LostReason::SessionExpired);
}

#[test]
fn a_static_member_past_max_poll_interval_is_fenced_but_does_not_leave_the_group() {
    let now = Instant::now();
    let mut c = Coordinator::new(now, SESSION);
    let mut a = TestMember::new(Strategy::Range, Some("worker-7"), now);
    settle(&mut c, &mut [&mut a], &four_partitions());
    a.take_callbacks();
    a.session.leave_poll(c.now());
    let mut dues = Vec::new();
    for _ in 0..11 {
        c.advance(TICK);
        dues.push(a.tick(&mut c).0);
    }
    // 30 s is not past max.poll.interval.ms; 33 s is.
    assert!(dues[..10]
        .iter()
        .all(|d| matches!(d, HeartbeatDue::Send(_))));
    assert!(matches!(dues[10], HeartbeatDue::LeaveAfterPollTimeout(_)));
    assert_eq!(a.fenced(), vec![tps(&[0, 1, 2, 3])]);
    // A static member keeps its place at the coordinator (it may come back within the
    // session), so no LeaveGroup was sent.
    assert_eq!(c.member_ids(), vec!["member-1".to_string()]);
    report_every_partition_lost(&mut a, LostReason::PollTimeout);
}

#[test]
fn a_rebalance_heard_twice_asks_for_one_rejoin() {
    let (mut c, mut a) = alone(Strategy::CooperativeSticky);
    c.begin_rebalance();
    assert_eq!(
        a.tick(&mut c).1,
        Some(HeartbeatVerdict::Rebalancing { first: true })
    );
    c.advance(TICK);
    assert_eq!(
        a.tick(&mut c).1,
        Some(HeartbeatVerdict::Rebalancing { first: false })
    );
    assert_eq!(a.session.rejoin_reason(), Some("the group is rebalancing"));
    // Heartbeats go on while a rejoin is pending, and keep the partitions.
    assert_eq!(a.session.owned().len(), 4);
    assert!(a.fenced().is_empty());
}

// ----------------------------------------------------------------------------------------------
// Rounds beside the poll loop (cooperative): decisions wait for the poll thread's batch boundary

/// A and B, cooperative, A beside its poll loop and alone with all four partitions: B joins, A
/// hears of it, joins and syncs. Returns after A's SyncGroup answer was posted.
fn cooperative_round_decided_beside() -> (Coordinator, TestMember, TestMember) {
    let (mut c, a) = alone(Strategy::CooperativeSticky);
    let mut a = a.beside(c.now());
    let mut b = TestMember::new(Strategy::CooperativeSticky, None, c.now());
    assert!(matches!(b.start_join(&mut c), Err(Refusal::Retry { .. })));
    assert!(b.start_join(&mut c).expect("join").is_none());
    a.tick(&mut c);
    assert_eq!(
        a.session.round_due().as_deref(),
        Some("the group is rebalancing")
    );
    a.start_join(&mut c).expect("join");
    // The round is at the coordinator: A's batch goes on, and it may fetch what it owns.
    assert_eq!(a.session.phase(), Phase::Joining);
    assert!(a.session.may_fetch());
    assert!(!a.session.boundary_due());
    b.collect_join(&mut c).expect("join");
    b.sync(&mut c, &four_partitions()).expect("sync");
    assert!(a.sync(&mut c, &four_partitions()).expect("sync"));
    if b.round.is_some() {
        b.collect_sync(&mut c).expect("sync");
    }
    (c, a, b)
}

#[test]
fn a_cooperative_revocation_is_fenced_when_decided_and_the_follow_up_waits_for_its_handoff() {
    let (mut c, mut a, _b) = cooperative_round_decided_beside();
    assert!(a.session.pending().is_some(), "a decided change");
    let moving: Vec<TopicPartition> = a
        .session
        .waiting()
        .iter()
        .filter_map(|change| match change {
            Change::Revoke { partitions, .. } => Some(partitions.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(moving.len(), 2);
    // Fenced at once, as a revocation (the lost hook stays silent); nothing applied yet.
    assert_eq!(a.fenced_ahead(), vec![moving.clone()]);
    assert!(a.fenced().is_empty());
    assert!(a.take_callbacks().is_empty());
    assert!(a.session.boundary_due(), "the batch ends for the handoff");
    assert_eq!(a.session.phase(), Phase::Stable, "heartbeats run meanwhile");
    // Another rebalance heard now must not start a round before the handoff committed: the
    // second JoinGroup would still list the partitions being handed back.
    a.session.request_rejoin("the group is rebalancing");
    assert_eq!(a.session.round_due(), None);

    // The batch boundary: the revocation commits with the generation the change belongs to,
    // which the coordinator accepts; then the (empty) assignment.
    let mut commits = Vec::new();
    a.apply_pending(|session, me| {
        session.may_commit(me).expect("inside the generation");
        commits.push(c.commit(&me.member_id, me.generation_id));
    });
    assert_eq!(commits, vec![KafkaCode::NONE]);
    assert_eq!(
        a.take_callbacks(),
        vec![
            Callback::Revoked {
                generation: 2,
                partitions: moving.clone()
            },
            assigned(2, &[])
        ]
    );
    assert!(a.session.pending().is_none());
    assert!(!a.session.boundary_due());
    assert!(a.session.round_due().is_some(), "now the follow-up may go");
    assert!(a.session.owned().iter().all(|tp| !moving.contains(tp)));
}

#[test]
fn a_loss_before_the_poll_thread_applied_a_decided_change_voids_it() {
    let (_c, mut a, _b) = cooperative_round_decided_beside();
    let me = a.session.identity().clone();
    // The heartbeat thread hears ILLEGAL_GENERATION before the batch boundary.
    a.session
        .lose(LostReason::Fenced(KafkaCode::ILLEGAL_GENERATION), false);
    assert!(a.session.pending().is_none());
    assert_eq!(a.fenced(), vec![tps(&[0, 1, 2, 3])]);
    assert!(matches!(
        a.session.may_commit(&me),
        Err(CommitRefusal::GenerationOver { .. })
    ));
    a.apply_pending(|_, _| panic!("nothing of a void change is committed"));
    // Nothing of the change ran; the loss reached the listener, once.
    assert_eq!(
        a.take_callbacks(),
        vec![lost(
            &[0, 1, 2, 3],
            LostReason::Fenced(KafkaCode::ILLEGAL_GENERATION)
        )]
    );
    assert!(a.report().is_none());
    assert!(a.take_callbacks().is_empty());
}

#[test]
fn a_change_applied_late_does_not_clear_the_next_generations_change() {
    let (_c, mut a, _b) = cooperative_round_decided_beside();
    let old_identity = a.session.identity().clone();
    let old_change = a.session.waiting()[0]
        .decision()
        .cloned()
        .expect("a decided change");
    a.session
        .lose(LostReason::Fenced(KafkaCode::ILLEGAL_GENERATION), false);
    // A new round completed (generation 9) before the old change's application returned.
    a.session.join();
    let next = MemberIdentity {
        generation_id: 9,
        member_id: old_identity.member_id.clone(),
    };
    a.session.post_assignment(
        RebalanceProtocol::Cooperative,
        &next,
        false,
        &[],
        &tps(&[1]),
    );
    a.session.changes_applied(&old_change);
    assert!(
        a.session.pending().is_some(),
        "the next generation's change stays"
    );
    assert!(a.session.waiting().iter().all(|change| matches!(
        change,
        Change::Revoke { identity, .. } | Change::Assign { identity, .. }
            if identity.generation_id == 9
    )));
}

#[test]
fn an_application_commit_refused_while_a_round_is_at_the_coordinator_asks_for_no_second_round() {
    let (_c, a) = alone(Strategy::CooperativeSticky);
    let mut a = a.beside(Instant::now());
    a.session.request_rejoin("the group is rebalancing");
    let me = a.session.identity().clone();
    a.session.join();
    a.session.commit_refused(
        &me,
        KafkaCode::REBALANCE_IN_PROGRESS,
        true,
        &ctx(&a.instance),
    );
    assert_eq!(a.session.rejoin_reason(), None);
    assert_eq!(a.session.owned().len(), 4, "nothing is lost either");
}

#[test]
fn an_eager_rebalance_ends_the_batch_and_stops_fetching_but_a_cooperative_one_does_neither() {
    let (_c, mut eager) = alone(Strategy::Range);
    eager.session.request_rejoin("the group is rebalancing");
    assert!(eager.session.boundary_due());
    assert!(!eager.session.may_fetch());
    assert_eq!(
        eager.session.round_due(),
        None,
        "its poll thread runs the round"
    );

    let (_c, cooperative) = alone(Strategy::CooperativeSticky);
    let mut cooperative = cooperative.beside(Instant::now());
    cooperative
        .session
        .request_rejoin("the group is rebalancing");
    assert!(!cooperative.session.boundary_due());
    assert!(cooperative.session.may_fetch());
    assert!(cooperative.session.round_due().is_some());
}

#[test]
fn the_membership_thread_waits_for_the_first_poll_before_joining() {
    let now = Instant::now();
    let mut member = TestMember::new(Strategy::CooperativeSticky, None, now);
    member.session.run_rounds_beside();
    assert_eq!(member.session.round_due(), None);
    member.session.enter_poll();
    assert_eq!(member.session.round_due().as_deref(), Some("initial join"));
}

#[test]
fn a_loss_detected_before_a_reassignment_of_the_same_partitions_is_reported_before_it() {
    let (_c, mut a) = alone(Strategy::CooperativeSticky);
    // The poll thread has just reported losses (none) and is about to apply the pending change.
    assert!(a.report().is_none());
    assert!(a.take_callbacks().is_empty());
    // Meanwhile, on the membership thread: the session expires (fenced at once), the member
    // rejoins (KIP-848: a new epoch) and gets the same partitions back as a pending change.
    a.session.lose(LostReason::SessionExpired, false);
    let again = MemberIdentity {
        generation_id: 7,
        member_id: "member-1".to_string(),
    };
    assert!(a.session.member_epoch_is(&again));
    assert!(a.session.post_assign(&again, tps(&[0, 1, 2, 3])));
    // The poll thread applies the change: the loss, detected before the reassignment, must reach
    // the listener (and the guard) before it, never after, or the guard would mark the
    // partitions lost again while the membership owns them.
    a.apply_pending(|_, _| {});
    a.report();
    assert_eq!(
        a.take_callbacks(),
        vec![
            lost(&[0, 1, 2, 3], LostReason::SessionExpired),
            assigned(7, &[0, 1, 2, 3])
        ]
    );
    assert_eq!(a.session.owned(), tps(&[0, 1, 2, 3]).as_slice());
}

#[test]
fn a_join_held_at_the_coordinator_keeps_the_session_bound_for_at_most_the_rebalance_timeout() {
    let (mut c, mut a) = alone(Strategy::CooperativeSticky);
    let mut b = TestMember::new(Strategy::CooperativeSticky, None, c.now());
    settle(&mut c, &mut [&mut a, &mut b], &four_partitions());
    a.take_callbacks();
    b.take_callbacks();
    assert!(!a.session.owned().is_empty());
    // A rebalance begins. A rejoins at once; B is slow to (its poll thread has not applied its
    // last change yet) but keeps heartbeating: the coordinator holds A's JoinGroup meanwhile.
    c.begin_rebalance();
    a.tick(&mut c);
    let join_sent = c.now();
    assert!(matches!(a.start_join(&mut c), Ok(None)), "the join is held");
    for _ in 0..5 {
        c.advance(TICK);
        b.tick(&mut c);
        assert_eq!(a.session.heartbeat_due(c.now()), HeartbeatDue::Skip);
    }
    // Longer than a session: the coordinator does not expire a member it holds in a join, so
    // the partitions A keeps stay trusted (their records are admitted, not refused).
    assert!(c.now() > join_sent + SESSION);
    assert!(a.fenced().is_empty());
    assert!(
        !a.bound.is_expired(c.now()),
        "the bound lapsed while the join was held"
    );
    // Never past the rebalance timeout from the send: by then the coordinator ended the join.
    assert!(a.bound.is_expired(join_sent + MAX_POLL));
}

/// A commit refused with ILLEGAL_GENERATION while our own JoinGroup is at the coordinator (a
/// paced commit sent just before the round's generation formed at the broker) defers to the
/// round's answer: nothing is lost, no second round is asked for.
#[test]
fn a_commit_refused_illegal_generation_while_our_join_is_at_the_coordinator_loses_nothing() {
    let (_c, a) = alone(Strategy::CooperativeSticky);
    let mut a = a.beside(Instant::now());
    a.session.request_rejoin("the group is rebalancing");
    let me = a.session.identity().clone();
    a.session.join();
    a.session
        .commit_refused(&me, KafkaCode::ILLEGAL_GENERATION, true, &ctx(&a.instance));
    assert_eq!(a.session.owned().len(), 4, "nothing is lost");
    assert!(a.fenced().is_empty(), "nothing is fenced");
    assert_eq!(a.session.rejoin_reason(), None);
    // Outside a round the same refusal still ends the membership.
    let (_c, b) = alone(Strategy::CooperativeSticky);
    let mut b = b.beside(Instant::now());
    let me = b.session.identity().clone();
    b.session
        .commit_refused(&me, KafkaCode::ILLEGAL_GENERATION, true, &ctx(&b.instance));
    assert!(b.session.owned().is_empty());
    assert_eq!(b.fenced(), vec![tps(&[0, 1, 2, 3])]);
}

/// A loss while a round runs on the membership thread (the round started owning 0..3): when the
/// round's generation assigns the same partitions again, they are new to this member (fenced and
/// reported lost meanwhile), so the change assigns them, instead of counting them as kept and
/// leaving them fenced and never fetched.
#[test]
fn partitions_lost_while_a_round_ran_are_assigned_anew_by_its_generation() {
    let (_c, a) = alone(Strategy::CooperativeSticky);
    let mut a = a.beside(Instant::now());
    a.session.request_rejoin("the group is rebalancing");
    let start = a.session.join();
    assert_eq!(start.owned, tps(&[0, 1, 2, 3]));
    a.session
        .lose(LostReason::Fenced(KafkaCode::ILLEGAL_GENERATION), false);
    // The round's JoinGroup is answered with the next generation, then its SyncGroup.
    let member_id = start.identity.member_id.clone();
    let joined = a
        .session
        .joined(
            Instant::now(),
            &JoinAnswer {
                error_code: KafkaCode::NONE,
                generation_id: start.identity.generation_id + 1,
                member_id: &member_id,
                leader: "someone-else",
            },
            "test",
            &ctx(&a.instance),
        )
        .expect("joined");
    let next = joined.identity;
    a.session.post_assignment(
        RebalanceProtocol::Cooperative,
        &next,
        false,
        &start.owned,
        &tps(&[0, 1, 2, 3]),
    );
    a.apply_pending(|_, _| panic!("nothing to revoke"));
    let callbacks = a.take_callbacks();
    assert!(
        callbacks.contains(&assigned(next.generation_id, &[0, 1, 2, 3])),
        "every partition assigned anew: {callbacks:?}"
    );
}
