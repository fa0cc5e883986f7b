//! The consumer group machine driven through whole group lives against an in-memory coordinator
//! that applies the broker's KIP-848 rules (`crate::testing::consumer_group`), with time passed in: joins
//! and leaves of three members, revocation before acknowledgement, fencing, static members,
//! unresolvable topic ids, every error class, poll timeout, session bound, stale-epoch commits.
//!
//! [`TestMember`] plays the shell and the poll thread: it finds the coordinator, sends what the
//! machine asks, feeds the answers, resolves topic ids, and applies the events as the guard
//! would (a revocation fences at once, commits with the member epoch, and is acknowledged,
//! immediately or when the test says; a loss fences and commits nothing). After every step the
//! harness checks that no partition is worked on by two members at once.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use super::*;
use crate::testing::consumer_group::{Coordinator, Partition};
use crate::wire::KafkaCode;
use crate::TopicPartition;

const GROUP: &str = "payments";
const REBALANCE_TIMEOUT: Duration = Duration::from_secs(5);
const TICK: Duration = Duration::from_millis(100);

fn config(topics: &[&str], instance: Option<&str>) -> ConsumerGroupConfig {
    ConsumerGroupConfig {
        group_id: GROUP.to_string(),
        instance_id: instance.map(str::to_string),
        topics: topics.iter().map(|t| t.to_string()).collect(),
        topic_regex: None,
        rebalance_timeout: REBALANCE_TIMEOUT,
        remote_assignor: None,
        rack: None,
        session_bound: None,
        retry_backoff: Duration::from_millis(100),
        retry_backoff_max: Duration::from_secs(1),
    }
}

/// One member: the machine, and what its poll thread works on.
struct TestMember {
    m: ConsumerGroupMembership,
    /// Partitions the poll thread works on (not fenced).
    working: BTreeSet<TopicPartition>,
    /// Revocations fenced and committed but not acknowledged yet (when `auto_ack` is off).
    unacked: Vec<(RevocationId, Vec<TopicPartition>)>,
    auto_ack: bool,
    /// Stops sending (a frozen or partitioned process) when false.
    connected: bool,
    /// Heartbeats reach the coordinator but their answers wait in `held` (a coordinator whose
    /// writes are stuck) while true; they are read, in order, once it is false again.
    hold: bool,
    held: Vec<HeartbeatResponse>,
    version: i16,
    events: Vec<Event>,
    sent: Vec<HeartbeatRequest>,
    metadata_lookups: usize,
}

impl TestMember {
    fn new(cfg: ConsumerGroupConfig, id: &str) -> Self {
        TestMember {
            m: ConsumerGroupMembership::with_member_id(cfg, id.to_string()),
            working: BTreeSet::new(),
            unacked: Vec::new(),
            auto_ack: true,
            connected: true,
            hold: false,
            held: Vec::new(),
            version: 1,
            events: Vec::new(),
            sent: Vec::new(),
            metadata_lookups: 0,
        }
    }

    fn lost(&self) -> Vec<&Event> {
        self.events
            .iter()
            .filter(|e| matches!(e, Event::Lost { .. }))
            .collect()
    }

    fn fatal(&self) -> Option<&FatalError> {
        self.events.iter().find_map(|e| match e {
            Event::Fatal(f) => Some(f),
            _ => None,
        })
    }
}

struct Harness {
    now: Instant,
    coord: Coordinator,
    members: Vec<TestMember>,
    all: BTreeSet<TopicPartition>,
}

impl Harness {
    fn new(topics: &[(&str, i32)]) -> Self {
        let all = topics
            .iter()
            .flat_map(|(t, n)| (0..*n).map(move |p| TopicPartition::new(*t, p)))
            .collect();
        Harness {
            now: Instant::now(),
            coord: Coordinator::new(topics),
            members: Vec::new(),
            all,
        }
    }

    fn add(&mut self, cfg: ConsumerGroupConfig, id: &str) -> usize {
        self.members.push(TestMember::new(cfg, id));
        self.members.len() - 1
    }

    fn id_of(&self, tp: &TopicPartition) -> Partition {
        (self.coord.topic_id(&tp.topic), tp.partition)
    }

    fn ack(&mut self, i: usize) {
        let now = self.now;
        let unacked = std::mem::take(&mut self.members[i].unacked);
        for (id, _) in unacked {
            self.members[i].m.revocation_done(now, id);
        }
        self.drain(i);
    }

    /// Applies the machine's events as the poll thread and the guard would.
    fn drain(&mut self, i: usize) {
        let now = self.now;
        while let Some(event) = self.members[i].m.poll_event() {
            match &event {
                Event::Revoke {
                    id,
                    partitions,
                    epoch,
                } => {
                    // Fence all first, then commit with the member epoch.
                    for tp in partitions {
                        self.members[i].working.remove(tp);
                    }
                    let ids: Vec<Partition> = partitions.iter().map(|tp| self.id_of(tp)).collect();
                    let member_id = self.members[i].m.member_id().to_string();
                    let results = self.coord.commit(&member_id, *epoch, &ids);
                    assert!(
                        results.iter().all(|(_, code)| *code == KafkaCode::NONE),
                        "revocation commit of {partitions:?}: {results:?}"
                    );
                    if self.members[i].auto_ack {
                        self.members[i].m.revocation_done(now, *id);
                    } else {
                        self.members[i].unacked.push((*id, partitions.clone()));
                    }
                }
                Event::Assign { partitions, .. } => {
                    for tp in partitions {
                        for (j, other) in self.members.iter().enumerate() {
                            assert!(
                                j == i || !other.working.contains(tp),
                                "{tp} assigned to member {i} while member {j} works on it"
                            );
                        }
                        self.members[i].working.insert(tp.clone());
                    }
                }
                Event::Lost { partitions, .. } => {
                    for tp in partitions {
                        self.members[i].working.remove(tp);
                    }
                }
                Event::Fatal(_) | Event::Left => {}
            }
            self.members[i].events.push(event);
        }
    }

    /// One step of member `i`: time, coordinator, metadata, heartbeats, events.
    fn step(&mut self, i: usize) {
        let now = self.now;
        self.members[i].m.handle_timeout(now);
        self.drain(i);
        if !self.members[i].connected {
            if let Some(req) = self.members[i].m.poll_transmit(now) {
                self.members[i].sent.push(req);
                self.members[i].m.on_transport_error(now);
            }
            self.drain(i);
            return;
        }
        if self.members[i].m.needs_coordinator() {
            let v = self.members[i].version;
            self.members[i].m.coordinator_found(v);
        }
        if let Some(ids) = self.members[i].m.poll_metadata(now) {
            self.members[i].metadata_lookups += 1;
            let names = self.coord.resolve(&ids);
            self.members[i]
                .m
                .on_metadata(now, names.iter().map(|(id, n)| (*id, n.as_str())));
            self.drain(i);
        }
        if !self.members[i].hold {
            for resp in std::mem::take(&mut self.members[i].held) {
                self.members[i].m.on_response(now, resp);
                self.drain(i);
            }
        }
        for _ in 0..10 {
            let Some(req) = self.members[i].m.poll_transmit(now) else {
                break;
            };
            let resp = self.coord.heartbeat(now, &req);
            self.members[i].sent.push(req);
            if self.members[i].hold {
                self.members[i].held.push(resp);
                break;
            }
            self.members[i].m.on_response(now, resp);
            self.drain(i);
        }
        self.check_disjoint();
    }

    fn check_disjoint(&self) {
        let mut seen = BTreeSet::new();
        for (i, m) in self.members.iter().enumerate() {
            for tp in &m.working {
                assert!(seen.insert(tp.clone()), "{tp} worked on twice (member {i})");
            }
        }
    }

    fn round(&mut self) {
        for i in 0..self.members.len() {
            self.step(i);
        }
        self.now += TICK;
        self.coord.expire(self.now);
    }

    /// Runs rounds until `done`, at most `max` of them.
    fn run_until(&mut self, max: usize, done: impl Fn(&Harness) -> bool) {
        for _ in 0..max {
            if done(self) {
                return;
            }
            self.round();
        }
        assert!(
            done(self),
            "not reached within {max} rounds: {}",
            self.describe()
        );
    }

    fn describe(&self) -> String {
        self.members
            .iter()
            .map(|m| {
                format!(
                    "{} {:?} epoch {} working {:?}; ",
                    m.m.member_id(),
                    m.m.state(),
                    m.m.member_epoch(),
                    m.working
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                )
            })
            .collect()
    }

    /// Every partition worked on exactly once by the `active` members, each stable, each
    /// machine reporting what its poll thread works on.
    fn converged(&self, active: &[usize]) -> bool {
        let mut union = BTreeSet::new();
        for &i in active {
            let m = &self.members[i];
            if m.m.state() != MemberState::Stable
                || !self.coord.settled(m.m.member_id())
                || m.m.owned().into_iter().collect::<BTreeSet<_>>() != m.working
            {
                return false;
            }
            union.extend(m.working.iter().cloned());
        }
        union == self.all
            && active
                .iter()
                .map(|i| self.members[*i].working.len())
                .sum::<usize>()
                == self.all.len()
    }

    fn last_sent(&self, i: usize) -> &HeartbeatRequest {
        self.members[i].sent.last().expect("a heartbeat was sent")
    }
}

/// A group of one, "member-a", owning both partitions of "orders" after converging.
fn one_member_on_orders() -> (Harness, usize) {
    let mut h = Harness::new(&[("orders", 2)]);
    let a = h.add(config(&["orders"], None), "member-a");
    h.run_until(50, |h| h.converged(&[a]));
    (h, a)
}

fn tps(topic: &str, ps: &[i32]) -> BTreeSet<TopicPartition> {
    ps.iter().map(|p| TopicPartition::new(topic, *p)).collect()
}

#[test]
fn three_members_join_and_leave_with_every_partition_owned_once() {
    let mut h = Harness::new(&[("orders", 6)]);
    let a = h.add(config(&["orders"], None), "member-a");
    h.run_until(50, |h| h.converged(&[a]));
    assert_eq!(h.members[a].working.len(), 6);
    let first = &h.members[a].sent[0];
    assert_eq!(first.member_epoch, JOIN_EPOCH);
    assert!(first.is_full());
    assert_eq!(first.rebalance_timeout_ms, 5000);
    assert_eq!(
        first.owned,
        Some(IdAssignment::new()),
        "a join reports no partitions"
    );
    assert_eq!(
        first.subscribed_topic_names,
        Some(vec!["orders".to_string()])
    );

    let b = h.add(config(&["orders"], None), "member-b");
    h.run_until(100, |h| h.converged(&[a, b]));
    assert_eq!(h.members[a].working.len(), 3);
    let c = h.add(config(&["orders"], None), "member-c");
    h.run_until(100, |h| h.converged(&[a, b, c]));
    for i in [a, b, c] {
        assert_eq!(h.members[i].working.len(), 2, "{}", h.describe());
    }

    // b leaves: it revokes (and commits) everything, then sends epoch -1.
    let b_owned = h.members[b].working.clone();
    let commits_before = h.coord.commits.len();
    let now = h.now;
    h.members[b].m.leave(now);
    h.run_until(100, |h| {
        h.members[b].m.state() == MemberState::Left && h.converged(&[a, c])
    });
    let leave = h.members[b]
        .sent
        .iter()
        .find(|r| r.is_leave())
        .expect("a leave heartbeat");
    assert_eq!(leave.member_epoch, LEAVE_EPOCH);
    assert!(h.members[b].events.contains(&Event::Left));
    let committed: BTreeSet<Partition> = h.coord.commits[commits_before..]
        .iter()
        .filter(|(m, _, _)| m == "member-b")
        .map(|(_, p, _)| *p)
        .collect();
    let expected: BTreeSet<Partition> = b_owned.iter().map(|tp| h.id_of(tp)).collect();
    assert_eq!(
        committed, expected,
        "b committed what it gave up before leaving"
    );
    assert!(!h.coord.is_member("member-b"));
    assert!(
        h.members[b].lost().is_empty(),
        "a graceful leave loses nothing"
    );

    let now = h.now;
    h.members[c].m.leave(now);
    h.run_until(100, |h| h.converged(&[a]));
    assert_eq!(h.members[a].working, tps("orders", &[0, 1, 2, 3, 4, 5]));
}

#[test]
fn a_join_answered_before_the_target_is_computed_converges_on_a_later_heartbeat() {
    // Kafka 4.4's behaviour: the first answer has an epoch and an empty assignment.
    let mut h = Harness::new(&[("orders", 4)]);
    h.coord.lazy_targets = true;
    let a = h.add(config(&["orders"], None), "member-a");
    h.round();
    assert_eq!(h.members[a].m.state(), MemberState::Stable);
    assert!(h.members[a].working.is_empty(), "nothing yet");
    let joined_in = h.members[a].m.member_epoch();
    assert!(joined_in > 0);
    h.run_until(50, |h| h.converged(&[a]));
    assert!(h.members[a].m.member_epoch() > joined_in);
    let b = h.add(config(&["orders"], None), "member-b");
    let c = h.add(config(&["orders"], None), "member-c");
    h.run_until(100, |h| h.converged(&[a, b, c]));
}

#[test]
fn a_revocation_is_acknowledged_only_after_the_poll_thread_finished_it() {
    let mut h = Harness::new(&[("orders", 4)]);
    let a = h.add(config(&["orders"], None), "member-a");
    h.run_until(50, |h| h.converged(&[a]));
    let epoch_before = h.members[a].m.member_epoch();
    h.members[a].auto_ack = false;
    let b = h.add(config(&["orders"], None), "member-b");
    h.run_until(50, |h| !h.members[a].unacked.is_empty());
    let revoking: BTreeSet<TopicPartition> = h.members[a].unacked[0].1.iter().cloned().collect();
    assert_eq!(revoking.len(), 2);
    let sent_at_revoke = h.members[a].sent.len();

    // While the poll thread has not acknowledged, the partitions stay reported as owned, the
    // broker keeps them with a, and b does not get them, however long it takes.
    for _ in 0..20 {
        h.round();
        assert!(
            h.members[a]
                .m
                .owned()
                .iter()
                .any(|tp| revoking.contains(tp)),
            "still owned until acknowledged"
        );
        assert!(h.members[b].working.is_disjoint(&revoking));
        let held = &h.coord.held()["member-a"];
        assert!(revoking.iter().all(|tp| held.contains(&h.id_of(tp))));
    }
    for req in &h.members[a].sent[sent_at_revoke..] {
        assert_eq!(
            req.owned, None,
            "no change of owned partitions is reported early"
        );
        assert_eq!(
            req.member_epoch, epoch_before,
            "no new epoch before the revocation"
        );
    }
    // The revocation's commit reached the broker before the acknowledgement.
    let committed: BTreeSet<Partition> = h
        .coord
        .commits
        .iter()
        .filter(|(m, _, e)| m == "member-a" && *e == epoch_before)
        .map(|(_, p, _)| *p)
        .collect();
    assert!(revoking.iter().all(|tp| committed.contains(&h.id_of(tp))));

    h.ack(a);
    let now = h.now;
    let ack = h.members[a]
        .m
        .poll_transmit(now)
        .expect("the ack goes out at once");
    let owned = ack
        .owned
        .clone()
        .expect("the ack reports the owned partitions");
    let reported: BTreeSet<i32> = owned.values().flatten().copied().collect();
    assert_eq!(reported.len(), 2);
    assert!(revoking.iter().all(|tp| !reported.contains(&tp.partition)));
    let resp = h.coord.heartbeat(now, &ack);
    h.members[a].sent.push(ack);
    h.members[a].m.on_response(now, resp);
    h.drain(a);
    h.run_until(50, |h| h.converged(&[a, b]));
    assert_eq!(h.members[b].working, revoking);
    assert!(h.members[a].m.member_epoch() > epoch_before);
}

#[test]
fn a_fenced_epoch_loses_the_assignment_without_a_commit_and_rejoins_with_epoch_0() {
    for code in [KafkaCode::FENCED_MEMBER_EPOCH, KafkaCode::UNKNOWN_MEMBER_ID] {
        let mut h = Harness::new(&[("orders", 3)]);
        let a = h.add(config(&["orders"], None), "member-a");
        h.run_until(50, |h| h.converged(&[a]));
        let commits = h.coord.commits.len();
        h.coord.inject("member-a", code);
        h.now += Duration::from_millis(500);
        let now = h.now;
        let req = h.members[a].m.poll_transmit(now).expect("due");
        let resp = h.coord.heartbeat(now, &req);
        h.members[a].m.on_response(now, resp);
        h.drain(a);
        assert_eq!(
            h.members[a].m.commit_epoch(),
            None,
            "no commit may leave now"
        );
        assert_eq!(h.members[a].m.state(), MemberState::Joining);
        let sent_before = h.members[a].sent.len();
        h.step(a);
        let lost = h.members[a].lost();
        assert_eq!(lost.len(), 1, "{code:?}");
        match lost[0] {
            Event::Lost { partitions, cause } => {
                assert_eq!(partitions.len(), 3);
                assert_eq!(*cause, LostReason::Fenced(code));
            }
            _ => unreachable!(),
        }
        assert_eq!(h.coord.commits.len(), commits, "a loss commits nothing");
        // The rejoin: epoch 0, same member id, full, no partitions.
        let rejoin = &h.members[a].sent[sent_before];
        assert_eq!(rejoin.member_epoch, JOIN_EPOCH);
        assert_eq!(rejoin.member_id, "member-a");
        assert_eq!(rejoin.owned, Some(IdAssignment::new()));
        h.run_until(50, |h| h.converged(&[a]));
    }
}

#[test]
fn a_static_member_leaves_with_minus_2_and_its_return_gets_the_same_partitions() {
    let mut h = Harness::new(&[("orders", 4)]);
    let s = h.add(config(&["orders"], Some("static-1")), "static-first");
    let d = h.add(config(&["orders"], None), "dynamic");
    h.run_until(100, |h| h.converged(&[s, d]));
    let kept = h.members[s].working.clone();
    assert_eq!(kept.len(), 2);
    assert!(h.members[s]
        .sent
        .iter()
        .all(|r| r.instance_id.as_deref() == Some("static-1")));

    let now = h.now;
    h.members[s].m.leave(now);
    h.run_until(50, |h| h.members[s].m.state() == MemberState::Left);
    assert_eq!(h.last_sent(s).member_epoch, STATIC_LEAVE_EPOCH);
    // Its partitions wait for it: the dynamic member does not get them.
    for _ in 0..20 {
        h.round();
    }
    assert!(h.members[d].working.is_disjoint(&kept));

    // It returns (a new process, a new member id) within the session timeout.
    let back = h.add(config(&["orders"], Some("static-1")), "static-second");
    h.run_until(50, |h| h.converged(&[back, d]));
    assert_eq!(
        h.members[back].working, kept,
        "the same partitions come back"
    );
}

#[test]
fn a_second_member_with_an_instance_id_in_use_is_fatal_and_the_first_keeps_its_partitions() {
    let mut h = Harness::new(&[("orders", 2)]);
    let s = h.add(config(&["orders"], Some("static-1")), "first");
    h.run_until(50, |h| h.converged(&[s]));
    let twin = h.add(config(&["orders"], Some("static-1")), "twin");
    h.run_until(10, |h| h.members[twin].fatal().is_some());
    let fatal = h.members[twin].fatal().cloned().expect("fatal");
    assert_eq!(fatal.code, KafkaCode(111));
    assert!(fatal.reason.contains("group.instance.id"), "{fatal}");
    assert_eq!(h.members[twin].m.state(), MemberState::Fatal);
    let now = h.now;
    assert_eq!(
        h.members[twin].m.poll_transmit(now),
        None,
        "nothing more is sent"
    );
    for _ in 0..10 {
        h.round();
    }
    assert!(h.converged(&[s]));
}

#[test]
fn an_unresolvable_topic_id_is_retried_and_never_reported_as_owned() {
    let mut h = Harness::new(&[("orders", 2), ("fills", 2)]);
    let fills = h.coord.topic_id("fills");
    h.coord.hidden.insert(fills);
    let a = h.add(config(&["orders", "fills"], None), "member-a");
    h.run_until(50, |h| h.members[a].working.len() == 2);
    for _ in 0..10 {
        h.round();
    }
    assert_eq!(h.members[a].working, tps("orders", &[0, 1]));
    assert_eq!(h.members[a].m.state(), MemberState::Reconciling);
    assert!(h.members[a].m.unresolved_topic_ids().contains(&fills));
    assert!(
        h.members[a].metadata_lookups >= 3,
        "looked up again and again"
    );
    assert_eq!(
        h.members[a].m.target()[&fills],
        vec![0, 1],
        "kept in the target"
    );
    for req in &h.members[a].sent {
        if let Some(owned) = &req.owned {
            assert!(
                !owned.contains_key(&fills),
                "never reported before it resolved"
            );
        }
    }
    h.coord.hidden.clear();
    h.run_until(50, |h| h.converged(&[a]));
    let reported = h.members[a]
        .sent
        .iter()
        .rev()
        .find_map(|r| r.owned.clone())
        .expect("owned reported");
    assert_eq!(reported[&fills], vec![0, 1]);
}

#[test]
fn coordinator_errors_find_the_coordinator_again_and_resend_the_full_heartbeat() {
    for code in [
        KafkaCode::NOT_COORDINATOR,
        KafkaCode::COORDINATOR_NOT_AVAILABLE,
    ] {
        let (mut h, a) = one_member_on_orders();
        h.now += Duration::from_secs(1);
        let periodic = h.members[a].m.poll_transmit(h.now).expect("due");
        assert!(!periodic.is_full(), "a periodic heartbeat is the short one");
        assert_eq!(periodic.rebalance_timeout_ms, -1);
        assert_eq!(periodic.subscribed_topic_names, None);
        let now = h.now;
        h.members[a]
            .m
            .on_response(now, HeartbeatResponse::error(code, "moved"));
        assert!(h.members[a].m.needs_coordinator());
        assert_eq!(h.members[a].m.poll_transmit(now), None);
        h.members[a].m.coordinator_found(1);
        let again = h.members[a].m.poll_transmit(now).expect("resent at once");
        assert!(again.is_full(), "{again:?}");
        assert_eq!(again.member_epoch, h.members[a].m.member_epoch());
        assert!(
            h.members[a].lost().is_empty(),
            "a coordinator move loses nothing"
        );
    }
}

#[test]
fn a_loading_coordinator_is_retried_after_the_backoff_with_the_full_heartbeat() {
    let (mut h, a) = one_member_on_orders();
    h.coord
        .inject("member-a", KafkaCode::COORDINATOR_LOAD_IN_PROGRESS);
    h.now += Duration::from_millis(500);
    let now = h.now;
    let req = h.members[a].m.poll_transmit(now).expect("due");
    let resp = h.coord.heartbeat(now, &req);
    h.members[a].m.on_response(now, resp);
    assert_eq!(h.members[a].m.poll_transmit(now), None, "backs off");
    let backoff = Duration::from_millis(100);
    assert_eq!(
        h.members[a]
            .m
            .poll_transmit(now + backoff - Duration::from_millis(1)),
        None
    );
    let again = h.members[a]
        .m
        .poll_transmit(now + backoff)
        .expect("retried");
    assert!(again.is_full());
    assert!(h.members[a].lost().is_empty());
}

#[test]
fn fatal_errors_end_the_membership_with_their_reason_and_commit_nothing() {
    // INVALID_REQUEST and GROUP_AUTHORIZATION_FAILED injected on a member that owns partitions.
    for code in [
        KafkaCode::INVALID_REQUEST,
        KafkaCode::GROUP_AUTHORIZATION_FAILED,
    ] {
        let (mut h, a) = one_member_on_orders();
        let commits = h.coord.commits.len();
        h.coord.inject("member-a", code);
        h.now += Duration::from_secs(1);
        h.step(a);
        assert_eq!(h.members[a].fatal().map(|f| f.code), Some(code));
        assert_eq!(h.members[a].lost().len(), 1);
        assert!(h.members[a].working.is_empty());
        assert_eq!(h.coord.commits.len(), commits);
        assert_eq!(h.members[a].m.poll_timeout(), None, "nothing more to do");
    }
    // UNSUPPORTED_ASSIGNOR: the broker does not offer the assignor asked for.
    let mut h = Harness::new(&[("orders", 2)]);
    h.coord.assignors = vec!["uniform"];
    let mut cfg = config(&["orders"], None);
    cfg.remote_assignor = Some(RemoteAssignor::Range);
    let a = h.add(cfg, "member-a");
    h.run_until(5, |h| h.members[a].fatal().is_some());
    assert_eq!(
        h.members[0].sent[0].server_assignor.as_deref(),
        Some("range")
    );
    let f = h.members[a].fatal().expect("fatal");
    assert_eq!(f.code, KafkaCode(112));
    assert!(f.reason.contains("group.remote.assignor"), "{f}");
    // GROUP_MAX_SIZE_REACHED: the second member does not fit.
    let mut h = Harness::new(&[("orders", 2)]);
    h.coord.max_size = Some(1);
    let a = h.add(config(&["orders"], None), "member-a");
    let b = h.add(config(&["orders"], None), "member-b");
    h.run_until(50, |h| h.members[b].fatal().is_some() && h.converged(&[a]));
    assert_eq!(
        h.members[b].fatal().map(|f| f.code),
        Some(KafkaCode::GROUP_MAX_SIZE_REACHED)
    );
}

#[test]
fn a_member_stuck_revoking_past_the_rebalance_timeout_treats_its_assignment_as_lost() {
    let mut h = Harness::new(&[("orders", 4)]);
    let a = h.add(config(&["orders"], None), "member-a");
    h.run_until(50, |h| h.converged(&[a]));
    h.members[a].auto_ack = false;
    let b = h.add(config(&["orders"], None), "member-b");
    h.run_until(50, |h| !h.members[a].unacked.is_empty());
    // The poll thread never finishes; the broker fences a at its rebalance timeout, and a
    // itself gives everything up as lost by then.
    h.run_until(100, |h| !h.members[a].lost().is_empty());
    match h.members[a].lost()[0] {
        Event::Lost { cause, partitions } => {
            assert_eq!(*cause, LostReason::RevocationTimedOut);
            assert_eq!(partitions.len(), 4, "everything, the revoking ones too");
        }
        _ => unreachable!(),
    }
    // The late acknowledgement changes nothing.
    let owned = h.members[a].m.owned();
    h.ack(a);
    assert_eq!(h.members[a].m.owned(), owned);
    h.run_until(100, |h| h.converged(&[a, b]));
}

#[test]
fn a_poll_timeout_loses_the_assignment_leaves_and_rejoins_only_when_asked() {
    let (mut h, a) = one_member_on_orders();
    let commits = h.coord.commits.len();
    h.members[a].m.poll_timed_out();
    h.drain(a);
    assert!(matches!(
        h.members[a].lost()[0],
        Event::Lost {
            cause: LostReason::PollTimeout,
            ..
        }
    ));
    h.step(a);
    assert_eq!(h.last_sent(a).member_epoch, LEAVE_EPOCH);
    assert_eq!(h.members[a].m.state(), MemberState::Stale);
    assert!(!h.coord.is_member("member-a"));
    assert_eq!(h.coord.commits.len(), commits);
    for _ in 0..5 {
        h.round();
    }
    assert_eq!(
        h.members[a].m.state(),
        MemberState::Stale,
        "waits for the next poll"
    );
    h.members[a].m.rejoin();
    h.run_until(50, |h| h.converged(&[a]));
    assert_eq!(
        h.members[a]
            .sent
            .iter()
            .filter(|r| r.member_epoch == 0)
            .count(),
        2
    );
}

#[test]
fn a_commit_refused_for_a_stale_epoch_is_retried_with_the_new_epoch_for_owned_partitions_only() {
    let mut h = Harness::new(&[("orders", 4)]);
    let a = h.add(config(&["orders"], None), "member-a");
    h.run_until(50, |h| h.converged(&[a]));
    let b = h.add(config(&["orders"], None), "member-b");
    h.run_until(100, |h| h.converged(&[a, b]));
    let kept = h.members[a].working.clone();
    let moved = h.members[b].working.clone();
    // The poll thread starts a commit in this epoch...
    let started_in = h.members[a].m.member_epoch();
    // ...while b leaves and a gets b's partitions back in a newer epoch.
    let now = h.now;
    h.members[b].m.leave(now);
    h.run_until(100, |h| {
        h.members[b].m.state() == MemberState::Left && h.converged(&[a])
    });
    let current = h.members[a].m.member_epoch();
    assert!(current > started_in);
    let all: Vec<TopicPartition> = h.all.iter().cloned().collect();
    let ids: Vec<Partition> = all.iter().map(|tp| h.id_of(tp)).collect();
    let results = h.coord.commit("member-a", started_in, &ids);
    // Kafka 4.4 (KIP-1251): the partitions held since then are accepted with the older epoch,
    // the ones assigned in a newer epoch are refused.
    let refused: Vec<TopicPartition> = all
        .iter()
        .zip(&results)
        .filter(|(_, (_, code))| *code == KafkaCode::STALE_MEMBER_EPOCH)
        .map(|(tp, _)| tp.clone())
        .collect();
    assert_eq!(refused.iter().cloned().collect::<BTreeSet<_>>(), moved);
    assert!(kept.iter().all(|tp| !refused.contains(tp)));
    match h.members[a].m.stale_epoch_retry(started_in, &refused) {
        StaleEpochRetry::Retry {
            epoch,
            partitions,
            dropped,
        } => {
            assert_eq!(epoch, current);
            assert_eq!(partitions, refused, "still owned: retried");
            assert!(dropped.is_empty());
            let ids: Vec<Partition> = partitions.iter().map(|tp| h.id_of(tp)).collect();
            let again = h.coord.commit("member-a", epoch, &ids);
            assert!(
                again.iter().all(|(_, c)| *c == KafkaCode::NONE),
                "{again:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    // A refused partition the member no longer owns is dropped, never retried.
    let stranger = TopicPartition::new("elsewhere", 0);
    match h.members[a]
        .m
        .stale_epoch_retry(started_in, std::slice::from_ref(&stranger))
    {
        StaleEpochRetry::Retry {
            partitions,
            dropped,
            ..
        } => {
            assert!(partitions.is_empty());
            assert_eq!(dropped, vec![stranger.clone()]);
        }
        other => panic!("{other:?}"),
    }
    // Outside the group nothing is retried.
    h.coord.inject("member-a", KafkaCode::FENCED_MEMBER_EPOCH);
    h.now += Duration::from_millis(500);
    let now = h.now;
    let req = h.members[a].m.poll_transmit(now).expect("due");
    let resp = h.coord.heartbeat(now, &req);
    h.members[a].m.on_response(now, resp);
    assert!(matches!(
        h.members[a].m.stale_epoch_retry(current, &refused),
        StaleEpochRetry::Drop { .. }
    ));
}

#[test]
fn a_negative_epoch_in_an_answer_is_never_adopted() {
    let mut h = Harness::new(&[("orders", 1)]);
    let a = h.add(config(&["orders"], None), "member-a");
    h.run_until(50, |h| h.converged(&[a]));
    let epoch = h.members[a].m.member_epoch();
    h.now += Duration::from_secs(1);
    let now = h.now;
    h.members[a].m.poll_transmit(now).expect("due");
    h.members[a].m.on_response(
        now,
        HeartbeatResponse {
            error: KafkaCode::NONE,
            error_message: None,
            member_id: None,
            member_epoch: -1,
            heartbeat_interval_ms: 500,
            assignment: None,
        },
    );
    assert_eq!(h.members[a].m.member_epoch(), epoch);
    // Nor when joining: the join is sent again.
    let mut fresh = ConsumerGroupMembership::with_member_id(config(&["orders"], None), "x".into());
    fresh.coordinator_found(1);
    fresh.poll_transmit(now).expect("join");
    fresh.on_response(
        now,
        HeartbeatResponse {
            error: KafkaCode::NONE,
            error_message: None,
            member_id: None,
            member_epoch: -2,
            heartbeat_interval_ms: 500,
            assignment: None,
        },
    );
    assert_eq!(fresh.state(), MemberState::Joining);
    assert_eq!(fresh.member_epoch(), JOIN_EPOCH);
}

#[test]
fn a_lost_connection_resends_the_full_heartbeat_and_does_not_retry_a_leave() {
    let (mut h, a) = one_member_on_orders();
    h.now += Duration::from_secs(1);
    let now = h.now;
    h.members[a].m.poll_transmit(now).expect("due");
    h.members[a].m.on_transport_error(now);
    assert!(h.members[a].m.needs_coordinator());
    h.members[a].m.coordinator_found(1);
    let later = now + Duration::from_millis(100);
    let again = h.members[a]
        .m
        .poll_transmit(later)
        .expect("resent after the backoff");
    assert!(again.is_full());
    let resp = h.coord.heartbeat(later, &again);
    h.members[a].m.on_response(later, resp);

    h.members[a].m.leave(later);
    h.drain(a);
    let leave = h.members[a].m.poll_transmit(later).expect("leave");
    assert!(leave.is_leave());
    h.members[a].m.on_transport_error(later);
    assert_eq!(h.members[a].m.state(), MemberState::Left);
    h.members[a].m.coordinator_found(1);
    assert_eq!(
        h.members[a].m.poll_transmit(later + Duration::from_secs(5)),
        None
    );
}

#[test]
fn version_0_joins_without_a_member_id_and_adopts_the_brokers() {
    let mut h = Harness::new(&[("orders", 2)]);
    let a = h.add(config(&["orders"], None), "client-generated");
    h.members[a].version = 0;
    let now = h.now;
    h.members[a].m.coordinator_found(0);
    let join = h.members[a].m.poll_transmit(now).expect("join");
    assert_eq!(join.member_id, "");
    let mut resp = h.coord.heartbeat(
        now,
        &HeartbeatRequest {
            member_id: "broker-given".into(),
            ..join
        },
    );
    resp.member_id = Some("broker-given".into());
    h.members[a].m.on_response(now, resp);
    assert_eq!(h.members[a].m.member_id(), "broker-given");
    h.drain(a);
    h.run_until(50, |h| h.converged(&[a]));
    assert!(h.members[a]
        .sent
        .iter()
        .all(|r| r.member_id == "broker-given"));
}

#[test]
fn the_session_bound_is_renewed_from_each_answered_send_and_its_expiry_loses_the_assignment() {
    let (mut h, a) = one_member_on_orders();
    let (sent, bound) = h.members[a].m.session_renewal().expect("renewed");
    assert_eq!(bound, Duration::from_millis(1500), "three 500 ms intervals");
    assert!(sent <= h.now);
    // The network goes away: no answer renews it, and once the bound passed the member gives
    // its partitions up as lost (the broker may have expired it).
    h.members[a].connected = false;
    let deadline = sent + bound;
    h.run_until(40, |h| !h.members[a].lost().is_empty());
    assert!(h.now >= deadline);
    assert!(matches!(
        h.members[a].lost()[0],
        Event::Lost {
            cause: LostReason::SessionExpired,
            ..
        }
    ));
    h.members[a].connected = true;
    h.run_until(100, |h| h.converged(&[a]));
    // A user-set bound wins, capped at the broker's default session timeout.
    let mut cfg = config(&["orders"], None);
    cfg.session_bound = Some(Duration::from_secs(90));
    let mut h = Harness::new(&[("orders", 1)]);
    let b = h.add(cfg, "member-b");
    h.run_until(50, |h| h.converged(&[b]));
    assert_eq!(
        h.members[b].m.session_renewal().map(|(_, d)| d),
        Some(BROKER_DEFAULT_SESSION_TIMEOUT)
    );
}

#[test]
fn leaving_while_a_revocation_runs_revokes_the_rest_after_it_then_leaves() {
    let mut h = Harness::new(&[("orders", 4)]);
    let a = h.add(config(&["orders"], None), "member-a");
    h.run_until(50, |h| h.converged(&[a]));
    h.members[a].auto_ack = false;
    let b = h.add(config(&["orders"], None), "member-b");
    h.run_until(50, |h| !h.members[a].unacked.is_empty());
    let now = h.now;
    h.members[a].m.leave(now);
    assert_eq!(h.members[a].m.state(), MemberState::PrepareLeaving);
    h.ack(a);
    assert_eq!(h.members[a].unacked.len(), 1, "the rest is revoked next");
    h.ack(a);
    h.run_until(50, |h| {
        h.members[a].m.state() == MemberState::Left && h.converged(&[b])
    });
    assert!(h.members[a].lost().is_empty());
}

#[test]
fn a_coordinator_that_cannot_be_reached_is_looked_up_again_after_the_backoff() {
    let now = Instant::now();
    let mut m = ConsumerGroupMembership::with_member_id(config(&["orders"], None), "m".into());
    assert!(m.needs_coordinator());
    m.coordinator_found(1);
    m.on_transport_error(now); // the connection could not be opened
    assert!(m.needs_coordinator());
    m.coordinator_found(1);
    assert_eq!(m.poll_transmit(now), None, "backs off");
    let join = m
        .poll_transmit(now + Duration::from_millis(100))
        .expect("the join after the backoff");
    assert_eq!(join.member_epoch, JOIN_EPOCH);
    assert!(join.is_full());
}

#[test]
fn the_revocation_deadline_runs_from_the_send_time_of_the_heartbeat_that_carried_it() {
    let mut h = Harness::new(&[("orders", 4)]);
    let a = h.add(config(&["orders"], None), "member-a");
    h.run_until(50, |h| h.converged(&[a]));
    h.members[a].auto_ack = false;
    let b = h.add(config(&["orders"], None), "member-b");
    h.step(b);
    // A's next heartbeat is sent now; the broker decides the revocation (and starts its
    // rebalance timer) while handling it, but the answer is slow to come back.
    let sent = loop {
        h.now += TICK;
        if let Some(req) = h.members[a].m.poll_transmit(h.now) {
            break (h.now, h.coord.heartbeat(h.now, &req));
        }
    };
    let (sent_at, answer) = sent;
    // Slow, but within the session bound (1.5 s), which the later heartbeats keep renewing.
    h.now += Duration::from_millis(800);
    h.members[a].m.on_response(h.now, answer);
    h.drain(a);
    assert_eq!(h.members[a].unacked.len(), 1, "the revocation is pending");
    // The poll thread never finishes it. The broker fences A at sent + rebalance timeout at the
    // latest; A must give everything up by then, not when the answer came plus that timeout.
    h.run_until(100, |h| !h.members[a].lost().is_empty());
    match h.members[a].lost()[0] {
        Event::Lost { cause, .. } => assert_eq!(*cause, LostReason::RevocationTimedOut),
        _ => unreachable!(),
    }
    assert!(
        h.now <= sent_at + REBALANCE_TIMEOUT + TICK,
        "lost {:?} after the send",
        h.now - sent_at
    );
}

#[test]
fn a_static_member_whose_answers_were_held_past_its_session_bound_releases_and_gets_back_in() {
    let mut h = Harness::new(&[("orders", 2)]);
    let s = h.add(config(&["orders"], Some("static-1")), "static-a");
    let d = h.add(config(&["orders"], None), "dynamic");
    h.run_until(100, |h| h.converged(&[s, d]));
    let kept = h.members[s].working.clone();
    assert_eq!(kept.len(), 1);
    let commits = h.coord.commits.len();
    // The coordinator's writes are stuck: the heartbeats arrive (the broker's session of the
    // member is renewed) but no answer comes back, and the member's own session bound passes.
    h.members[s].hold = true;
    h.run_until(40, |h| !h.members[s].lost().is_empty());
    assert!(matches!(
        h.members[s].lost()[0],
        Event::Lost {
            cause: LostReason::SessionExpired,
            ..
        }
    ));
    assert!(h.members[s].working.is_empty(), "fenced at once");
    assert_eq!(h.members[s].m.commit_epoch(), None, "no commit may leave");
    for _ in 0..15 {
        h.round();
        assert!(h.members[s].working.is_empty());
    }
    assert!(
        h.coord.is_member("static-a"),
        "the broker still holds the member: its session ({:?}) has not ended",
        h.coord.session_timeout
    );
    let sent_before = h.members[s].sent.len();
    h.members[s].hold = false;
    h.run_until(100, |h| h.converged(&[s, d]));
    assert_eq!(h.members[s].fatal(), None);
    assert_eq!(h.members[s].working, kept, "its partitions come back");
    assert_eq!(h.members[s].m.member_id(), "static-a");
    assert_eq!(
        h.coord.commits.len(),
        commits,
        "the lost assignment is never committed"
    );
    // Released under its own member id with -2, then joined with epoch 0 under it: Kafka
    // refuses an epoch-0 join while the instance id's member has not left with -2.
    let after = &h.members[s].sent[sent_before..];
    let release = after
        .iter()
        .position(|r| r.member_epoch == STATIC_LEAVE_EPOCH)
        .expect("a release was sent");
    assert_eq!(after[release].member_id, "static-a");
    assert_eq!(after[release].instance_id.as_deref(), Some("static-1"));
    assert_eq!(after[release + 1].member_epoch, JOIN_EPOCH);
    assert_eq!(after[release + 1].member_id, "static-a");
    assert!(
        after[..release]
            .iter()
            .all(|r| r.member_epoch != JOIN_EPOCH),
        "no join before the release"
    );
}

#[test]
fn a_static_join_whose_answer_was_lost_is_released_when_the_retry_is_unreleased() {
    let mut h = Harness::new(&[("orders", 2)]);
    let s = h.add(config(&["orders"], Some("static-1")), "static-a");
    // The join reaches the broker, which admits the member; its answer never comes back.
    h.members[s].hold = true;
    h.step(s);
    assert!(h.coord.is_member("static-a"));
    let now = h.now;
    h.members[s].held.clear();
    h.members[s].m.on_transport_error(now);
    h.members[s].hold = false;
    h.run_until(100, |h| h.converged(&[s]));
    assert_eq!(h.members[s].fatal(), None);
    let epochs: Vec<i32> = h.members[s].sent.iter().map(|r| r.member_epoch).collect();
    assert_eq!(
        epochs[..4],
        [JOIN_EPOCH, JOIN_EPOCH, STATIC_LEAVE_EPOCH, JOIN_EPOCH],
        "join (lost), join (UNRELEASED_INSTANCE_ID), release, join: {epochs:?}"
    );
}

#[test]
fn a_release_answered_fenced_instance_id_is_fatal_and_never_touches_the_holder() {
    // The holder of the instance id is another process: our join is refused, and so is our
    // release (another member id), which ends our membership and leaves the holder alone.
    let mut h = Harness::new(&[("orders", 2)]);
    let first = h.add(config(&["orders"], Some("static-1")), "first");
    h.run_until(50, |h| h.converged(&[first]));
    let twin = h.add(config(&["orders"], Some("static-1")), "twin");
    h.members[twin].hold = true;
    h.step(twin);
    let now = h.now;
    h.members[twin].held.clear();
    h.members[twin].m.on_transport_error(now);
    h.members[twin].hold = false;
    h.run_until(20, |h| h.members[twin].fatal().is_some());
    let fatal = h.members[twin].fatal().cloned().expect("fatal");
    assert_eq!(fatal.code, KafkaCode(111), "{fatal}");
    assert!(fatal.reason.contains("group.instance.id"), "{fatal}");
    assert!(h.members[twin]
        .sent
        .iter()
        .any(|r| r.member_epoch == STATIC_LEAVE_EPOCH));
    for _ in 0..10 {
        h.round();
    }
    assert!(h.converged(&[first]));
}

#[test]
fn a_pattern_member_sends_its_regex_instead_of_names_and_only_when_it_changed() {
    let mut c = config(&[], None);
    c.topic_regex = Some("orders-.*".to_string());
    let mut m = ConsumerGroupMembership::new(c);
    let now = Instant::now();
    m.coordinator_found(1);
    let join = m.poll_transmit(now).expect("join");
    assert_eq!(join.subscribed_topic_regex.as_deref(), Some("orders-.*"));
    assert_eq!(join.subscribed_topic_names, None);
    assert!(join.is_full());
}

#[test]
fn a_pattern_member_on_a_coordinator_without_regex_support_ends_with_a_clear_error() {
    let mut c = config(&[], None);
    c.topic_regex = Some("orders-.*".to_string());
    let mut m = ConsumerGroupMembership::new(c);
    m.coordinator_found(0);
    assert_eq!(m.state(), MemberState::Fatal);
    assert!(m.poll_transmit(Instant::now()).is_none(), "nothing is sent");
    match m.poll_event() {
        Some(Event::Fatal(f)) => {
            assert_eq!(f.code, KafkaCode::UNSUPPORTED_VERSION);
            assert!(f.reason.contains("orders-.*"), "{}", f.reason);
            assert!(f.reason.contains("Kafka 4.0"), "{}", f.reason);
        }
        other => panic!("expected a fatal event, got {other:?}"),
    }
}

#[test]
fn a_coordinator_without_the_heartbeat_api_ends_the_membership_instead_of_a_lookup_loop() {
    // A broker before Kafka 4.0 does not advertise ConsumerGroupHeartbeat: the shell reports it
    // (`on_unsupported`) and the membership ends, as on an UNSUPPORTED_VERSION answer.
    let now = Instant::now();
    let mut m = ConsumerGroupMembership::with_member_id(config(&["orders"], None), "m".into());
    assert!(m.needs_coordinator());
    m.on_unsupported("no common version for ConsumerGroupHeartbeat");
    let mut events = Vec::new();
    while let Some(e) = m.poll_event() {
        events.push(e);
    }
    let fatal = events
        .iter()
        .find_map(|e| match e {
            Event::Fatal(f) => Some(f),
            _ => None,
        })
        .expect("a fatal event");
    assert_eq!(fatal.code, KafkaCode::UNSUPPORTED_VERSION);
    assert!(fatal.reason.contains("group.protocol=classic"), "{fatal}");
    assert!(fatal.reason.contains("no common version"), "{fatal}");
    assert_eq!(m.poll_transmit(now + Duration::from_secs(5)), None);
    assert_eq!(m.poll_timeout(), None, "nothing more to do");
    // Reported once: a second report changes nothing.
    m.on_unsupported("again");
    assert!(m.poll_event().is_none());
}

/// `client.rack` goes with the join and again only after the member starts over (a later
/// heartbeat says "unchanged" with null), as the other full-heartbeat fields do.
#[test]
fn the_rack_is_sent_on_joining_and_null_while_unchanged() {
    let mut h = Harness::new(&[("orders", 2)]);
    let mut cfg = config(&["orders"], None);
    cfg.rack = Some("zone-b".to_string());
    let a = h.add(cfg, "member-a");
    h.run_until(50, |h| h.converged(&[a]) && h.members[a].sent.len() > 2);
    let sent = &h.members[a].sent;
    assert_eq!(sent[0].rack_id.as_deref(), Some("zone-b"));
    assert!(sent[1..].iter().all(|r| r.rack_id.is_none()), "{sent:?}");
    let mut h = Harness::new(&[("orders", 2)]);
    let b = h.add(config(&["orders"], None), "member-b");
    h.run_until(10, |h| h.converged(&[b]));
    assert!(h.members[b].sent.iter().all(|r| r.rack_id.is_none()));
}
