//! The consumer group protocol (KIP-848) on real Apache Kafka 4.x, with the sans-I/O machine
//! (`group::consumer_group`) driven directly by the wire functions, no consumer loop: joins,
//! revocation before acknowledgement with the revoking member's commit visible in the broker
//! before the partition is assigned elsewhere, convergence with each partition owned once,
//! leaving with -1; a fenced epoch; a static member's -2 and return; a revocation past the
//! rebalance timeout; and OffsetCommit v9+ carrying the member epoch through the existing commit
//! path. Needs `scripts/setup-test-env`.
//!
//! Where Kafka 4.4 differs from KIP-848's text, the test says so: the first answer to a join
//! may carry an empty assignment (the target comes with a later heartbeat); a member that does
//! not revoke in time is removed (UNKNOWN_MEMBER_ID) rather than answered FENCED_MEMBER_EPOCH;
//! OffsetCommit follows KIP-1251 (an older epoch is accepted for a partition held since then,
//! a newer one is STALE_MEMBER_EPOCH like a too old one, and the current epoch commits even a
//! partition that moved away).
//!
//! librdkafka's mock cluster is not used here, although it speaks KIP-848: its
//! ConsumerGroupHeartbeat handler aborts the whole mock on a full request with topic names and a
//! null regex (what Kafka's schema allows and the Java client sends), and reads v0 requests as
//! v1. Sending an empty regex would change what Kafka is sent, so the error classes are covered
//! against the in-memory coordinator (`group::consumer_group` tests) and, where Kafka can be
//! made to produce them, here.
//!
//! The shell here is the smallest one that is faithful: each member has its own client and
//! coordinator connection, finds the coordinator when the machine asks, sends what the machine
//! returns, feeds answers and connection errors back, resolves topic ids through Metadata, and
//! applies events as the poll thread would (a revocation fences, commits with the member epoch,
//! then acknowledges).

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use rebalance_guard::group::consumer_group::{
    wire, ConsumerGroupConfig, ConsumerGroupMembership, Event, HeartbeatRequest, MemberState,
    LEAVE_EPOCH,
};
use rebalance_guard::wire::{Client, ClientConfig, CommitIdentity, KafkaCode, OffsetCommitEntry};
use rebalance_guard::TopicPartition;
use support::kafka::{major_minor, require_kafka};
use support::{unique_name, Kafka, KafkaVersion};

/// Bound on each convergence: the broker's heartbeat interval is 500 ms in the test settings,
/// and a handover takes a few heartbeats of each member.
const CONVERGE: Duration = Duration::from_secs(60);

/// The run's Kafka 4.x; fails at once, naming KIP-848, on an older line of the version matrix
/// (`scripts/version-matrix.list` excludes these tests there).
fn kip848_kafka() -> &'static Kafka {
    require_kafka(
        KafkaVersion::Newest,
        (4, 0),
        "KIP-848, the consumer group protocol",
    );
    Kafka::shared(KafkaVersion::Newest)
}

fn config(group: &str, topic: &str) -> ConsumerGroupConfig {
    ConsumerGroupConfig {
        group_id: group.to_string(),
        instance_id: None,
        topics: vec![topic.to_string()],
        topic_regex: None,
        rebalance_timeout: Duration::from_secs(30),
        remote_assignor: None,
        rack: None,
        session_bound: None,
        retry_backoff: Duration::from_millis(100),
        retry_backoff_max: Duration::from_secs(1),
    }
}

/// The offset the next revocation commits: increasing, so each commit is told apart.
static NEXT_OFFSET: AtomicI64 = AtomicI64::new(100);

/// What the revoking member committed (partition, offset, epoch) before acknowledging.
type Commit = (TopicPartition, i64, i32);

struct Driven {
    name: &'static str,
    m: ConsumerGroupMembership,
    client: Client,
    coordinator: Option<i32>,
    working: BTreeSet<TopicPartition>,
    events: Vec<Event>,
    sent: Vec<HeartbeatRequest>,
    commits: Vec<Commit>,
    /// The committed offsets the broker returned for each partition when it was assigned here.
    seen_at_assign: BTreeMap<TopicPartition, Option<i64>>,
    /// Acknowledge revocations at once (the poll thread finished); else they wait in `unacked`.
    auto_ack: bool,
    unacked: Vec<rebalance_guard::group::consumer_group::RevocationId>,
    /// Send the next heartbeat with an epoch one above the machine's (a member that believes in
    /// an epoch the broker never gave), once.
    tamper_epoch_once: bool,
    /// Every error code the broker answered a heartbeat with.
    errors: Vec<KafkaCode>,
    instance: Option<String>,
    fatal_expected: bool,
}

impl Driven {
    fn new(bootstrap: &str, name: &'static str, cfg: ConsumerGroupConfig) -> Self {
        let cfg_instance = cfg.instance_id.clone();
        Driven {
            name,
            m: ConsumerGroupMembership::new(cfg),
            client: Client::connect(ClientConfig::from_bootstrap_str(bootstrap)).expect("connect"),
            coordinator: None,
            working: BTreeSet::new(),
            events: Vec::new(),
            sent: Vec::new(),
            commits: Vec::new(),
            seen_at_assign: BTreeMap::new(),
            auto_ack: true,
            unacked: Vec::new(),
            tamper_epoch_once: false,
            errors: Vec::new(),
            instance: cfg_instance,
            fatal_expected: false,
        }
    }

    /// One step of the shell: coordinator, metadata, the due heartbeat, events.
    fn step(&mut self, group: &str) {
        let now = Instant::now();
        self.m.handle_timeout(now);
        if self.m.needs_coordinator() {
            self.client.invalidate_coordinator(group);
            let node = self
                .client
                .find_coordinator(group)
                .expect("FindCoordinator")
                .node_id;
            let conn = self
                .client
                .connection(node)
                .expect("coordinator connection");
            let v = wire::heartbeat_version(conn).expect("ConsumerGroupHeartbeat version");
            self.coordinator = Some(node);
            self.m.coordinator_found(v);
        }
        let node = self.coordinator.expect("coordinator known");
        if let Some(ids) = self.m.poll_metadata(now) {
            let conn = self.client.connection(node).expect("connection");
            let names = wire::resolve_topic_ids(conn, &ids).expect("Metadata by topic id");
            self.m
                .on_metadata(now, names.iter().map(|(id, n)| (*id, n.as_str())));
        }
        if let Some(mut req) = self.m.poll_transmit(now) {
            if self.tamper_epoch_once && req.member_epoch > 0 {
                self.tamper_epoch_once = false;
                req.member_epoch += 1;
            }
            let conn = self.client.connection(node).expect("connection");
            match wire::send_heartbeat(conn, &req) {
                Ok((_, resp)) => {
                    if resp.error != KafkaCode::NONE {
                        eprintln!("{}: heartbeat answered {resp:?}", self.name);
                        self.errors.push(resp.error);
                    }
                    self.sent.push(req);
                    self.m.on_response(Instant::now(), resp);
                }
                Err(e) => {
                    eprintln!("{}: heartbeat failed: {e}", self.name);
                    self.sent.push(req);
                    self.m.on_transport_error(Instant::now());
                }
            }
        }
        self.drain(group);
    }

    fn drain(&mut self, group: &str) {
        while let Some(event) = self.m.poll_event() {
            eprintln!("{}: {event:?}", self.name);
            match &event {
                Event::Revoke {
                    id,
                    partitions,
                    epoch,
                } => {
                    for tp in partitions {
                        self.working.remove(tp);
                    }
                    // The guard's revoke path: commit synchronously with the member epoch. Each
                    // commit's offset is new, so a later owner seeing it proves this commit.
                    let offset = NEXT_OFFSET.fetch_add(1, Ordering::Relaxed);
                    let offsets: Vec<OffsetCommitEntry> = partitions
                        .iter()
                        .map(|tp| OffsetCommitEntry {
                            tp: tp.clone(),
                            offset,
                            leader_epoch: None,
                            metadata: None,
                        })
                        .collect();
                    let instance = self.instance.clone();
                    let who = CommitIdentity {
                        group_id: group,
                        generation_id_or_member_epoch: *epoch,
                        member_id: self.m.member_id(),
                        group_instance_id: instance.as_deref(),
                    };
                    let results = self.client.offset_commit(&who, &offsets).expect("commit");
                    for (tp, r) in results {
                        assert!(r.is_ok(), "{}: revocation commit of {tp}: {r:?}", self.name);
                        self.commits.push((tp.clone(), offset, *epoch));
                    }
                    if self.auto_ack {
                        self.m.revocation_done(Instant::now(), *id);
                    } else {
                        self.unacked.push(*id);
                    }
                }
                Event::Assign { partitions, .. } => {
                    let committed = self
                        .client
                        .offset_fetch(group, partitions)
                        .expect("OffsetFetch");
                    for c in committed {
                        self.seen_at_assign.insert(c.tp.clone(), c.offset);
                    }
                    self.working.extend(partitions.iter().cloned());
                }
                Event::Lost { partitions, .. } => {
                    for tp in partitions {
                        self.working.remove(tp);
                    }
                }
                Event::Fatal(f) if !self.fatal_expected => panic!("{}: fatal {f}", self.name),
                Event::Fatal(_) => {}
                Event::Left => {}
            }
            self.events.push(event);
        }
    }
}

fn step_all(members: &mut [&mut Driven], group: &str) {
    for m in members.iter_mut() {
        m.step(group);
    }
    let mut seen = BTreeSet::new();
    for m in members.iter() {
        for tp in &m.working {
            assert!(
                seen.insert(tp.clone()),
                "{tp} worked on by two members at once"
            );
        }
    }
    thread::sleep(Duration::from_millis(20));
}

fn run_until(
    members: &mut [&mut Driven],
    group: &str,
    what: &str,
    done: impl Fn(&[&mut Driven]) -> bool,
) {
    let deadline = Instant::now() + CONVERGE;
    while !done(members) {
        assert!(
            Instant::now() < deadline,
            "{what}: not reached within {CONVERGE:?}: {}",
            members
                .iter()
                .map(|m| format!(
                    "{} {:?} epoch {} working {:?}",
                    m.name,
                    m.m.state(),
                    m.m.member_epoch(),
                    m.working
                ))
                .collect::<Vec<_>>()
                .join("; ")
        );
        step_all(members, group);
    }
}

/// Every member of `members` leaves (all at one instant), and the members are driven until
/// each is `Left`; `what` names the wait.
fn leave_all(members: &mut [&mut Driven], group: &str, what: &str) {
    let now = Instant::now();
    for m in members.iter_mut() {
        m.m.leave(now);
    }
    run_until(members, group, what, |ms| {
        ms.iter().all(|m| m.m.state() == MemberState::Left)
    });
}

fn converged(members: &[&mut Driven], all: &BTreeSet<TopicPartition>) -> bool {
    let mut union = BTreeSet::new();
    let mut count = 0;
    for m in members {
        if m.m.state() != MemberState::Stable
            || m.m.owned().into_iter().collect::<BTreeSet<_>>() != m.working
            || m.working.is_empty()
        {
            return false;
        }
        count += m.working.len();
        union.extend(m.working.iter().cloned());
    }
    &union == all && count == all.len()
}

fn new_topic(kafka: &Kafka, prefix: &str, partitions: i32) -> (String, BTreeSet<TopicPartition>) {
    let topic = unique_name(prefix);
    let mut admin =
        Client::connect(ClientConfig::from_bootstrap_str(kafka.bootstrap())).expect("connect");
    admin
        .create_topics(&[(&topic, partitions, 1)])
        .expect("create topic");
    let all = (0..partitions)
        .map(|p| TopicPartition::new(topic.as_str(), p))
        .collect();
    (topic, all)
}

fn lost_causes(m: &Driven) -> Vec<rebalance_guard::LostReason> {
    m.events
        .iter()
        .filter_map(|e| match e {
            Event::Lost { cause, .. } => Some(cause.clone()),
            _ => None,
        })
        .collect()
}

mod kafka {
    use super::*;

    #[test]
    fn two_members_converge_through_a_revocation_committed_before_it_is_acknowledged() {
        let kafka = kip848_kafka();
        let topic = unique_name("kip848-topic");
        let group = unique_name("kip848-group");
        let mut admin =
            Client::connect(ClientConfig::from_bootstrap_str(kafka.bootstrap())).expect("connect");
        admin
            .create_topics(&[(&topic, 3, 1)])
            .expect("create topic");
        let all: BTreeSet<TopicPartition> = (0..3)
            .map(|p| TopicPartition::new(topic.as_str(), p))
            .collect();

        let mut a = Driven::new(kafka.bootstrap(), "a", config(&group, &topic));
        run_until(&mut [&mut a], &group, "a owns all three", |ms| {
            converged(ms, &all)
        });
        let first = &a.sent[0];
        assert_eq!(first.member_epoch, 0);
        assert!(first.is_full());
        assert_eq!(
            first.member_id,
            a.m.member_id(),
            "v1: the client's own member id"
        );
        assert_eq!(a.m.member_id().len(), 22);
        let epoch_alone = a.m.member_epoch();
        assert!(epoch_alone > 0);

        let mut b = Driven::new(kafka.bootstrap(), "b", config(&group, &topic));
        run_until(&mut [&mut a, &mut b], &group, "a and b converge", |ms| {
            converged(ms, &all)
        });
        assert_eq!(a.working.len() + b.working.len(), 3);
        assert!(!b.working.is_empty() && !a.working.is_empty());

        // a revoked what b got, committed it with its epoch, and only then acknowledged; the broker
        // handed each such partition to b after the commit was stored.
        let revoked: BTreeSet<TopicPartition> = a
            .events
            .iter()
            .filter_map(|e| match e {
                Event::Revoke { partitions, .. } => Some(partitions.clone()),
                _ => None,
            })
            .flatten()
            .collect();
        assert_eq!(revoked, b.working, "exactly what moved was revoked");
        for tp in &b.working {
            let committed = a
                .commits
                .iter()
                .find(|(p, _, _)| p == tp)
                .expect("committed");
            assert_eq!(
                b.seen_at_assign.get(tp).copied().flatten(),
                Some(committed.1),
                "{tp}: the revocation's commit was visible when b was assigned it"
            );
            assert_eq!(
                committed.2, epoch_alone,
                "committed with a's epoch before the handover"
            );
        }
        // The acknowledging heartbeat reported a's owned partitions without the revoked ones.
        let ack = a
            .sent
            .iter()
            .filter_map(|r| r.owned.as_ref())
            .find(|o| o.values().map(Vec::len).sum::<usize>() == a.working.len())
            .expect("an acknowledgement reporting what a kept");
        assert!(!ack.is_empty());

        // Both leave with -1; the broker forgets them.
        leave_all(&mut [&mut a, &mut b], &group, "both left");
        for m in [&a, &b] {
            assert!(
                m.sent.iter().any(|r| r.member_epoch == LEAVE_EPOCH),
                "{} sent -1",
                m.name
            );
            assert!(m.events.contains(&Event::Left));
            assert!(m.events.iter().all(|e| !matches!(e, Event::Lost { .. })));
        }
        // A heartbeat in a's old name is now refused: the broker no longer knows the member.
        let probe = HeartbeatRequest::unchanged(&group, a.m.member_id(), epoch_alone + 1);
        let node = a
            .client
            .find_coordinator(&group)
            .expect("coordinator")
            .node_id;
        let conn = a.client.connection(node).expect("connection");
        let (_, resp) = wire::send_heartbeat(conn, &probe).expect("heartbeat");
        assert_eq!(resp.error, KafkaCode::UNKNOWN_MEMBER_ID, "{resp:?}");
    }
    #[test]
    fn offset_commit_carries_the_member_epoch_and_refuses_epochs_outside_the_assignment() {
        let kafka = kip848_kafka();
        let topic = unique_name("kip848-commit");
        let group = unique_name("kip848-commit-group");
        let mut admin =
            Client::connect(ClientConfig::from_bootstrap_str(kafka.bootstrap())).expect("connect");
        admin
            .create_topics(&[(&topic, 1, 1)])
            .expect("create topic");
        let all: BTreeSet<TopicPartition> = [TopicPartition::new(topic.as_str(), 0)].into();
        let mut a = Driven::new(kafka.bootstrap(), "a", config(&group, &topic));
        run_until(&mut [&mut a], &group, "a owns the partition", |ms| {
            converged(ms, &all)
        });
        let epoch = a.m.commit_epoch().expect("in the group");
        let tp = TopicPartition::new(topic.as_str(), 0);
        let commit = |client: &mut Client, member_id: &str, epoch: i32, offset: i64| {
            let who = CommitIdentity {
                group_id: &group,
                generation_id_or_member_epoch: epoch,
                member_id,
                group_instance_id: None,
            };
            let entry = OffsetCommitEntry {
                tp: tp.clone(),
                offset,
                leader_epoch: None,
                metadata: None,
            };
            let mut results = client.offset_commit(&who, &[entry]).expect("OffsetCommit");
            assert_eq!(results.len(), 1);
            results.remove(0).1.err().and_then(|e| e.kafka_code())
        };
        let member_id = a.m.member_id().to_string();
        assert_eq!(
            commit(&mut a.client, &member_id, epoch, 7),
            None,
            "the member epoch commits"
        );
        let stored = a
            .client
            .offset_fetch(&group, std::slice::from_ref(&tp))
            .expect("OffsetFetch");
        assert_eq!(stored[0].offset, Some(7));
        // An epoch older than the partition's assignment and one newer than the member's are both
        // STALE_MEMBER_EPOCH (not FENCED_MEMBER_EPOCH, which a heartbeat with a newer epoch gets).
        assert_eq!(
            commit(&mut a.client, &member_id, epoch - 1, 8),
            Some(KafkaCode::STALE_MEMBER_EPOCH)
        );
        assert_eq!(
            commit(&mut a.client, &member_id, epoch + 1, 8),
            Some(KafkaCode::STALE_MEMBER_EPOCH)
        );
        assert_eq!(
            commit(&mut a.client, "not-a-member", epoch, 8),
            Some(KafkaCode::UNKNOWN_MEMBER_ID)
        );
        let stored = a
            .client
            .offset_fetch(&group, std::slice::from_ref(&tp))
            .expect("OffsetFetch");
        assert_eq!(stored[0].offset, Some(7), "no refused commit was stored");
        // The decision for STALE_MEMBER_EPOCH: retried with the current epoch, the partition being
        // still owned; the retry commits.
        match a.m.stale_epoch_retry(epoch - 1, std::slice::from_ref(&tp)) {
            rebalance_guard::group::consumer_group::StaleEpochRetry::Retry {
                epoch: retry,
                partitions,
                dropped,
            } => {
                assert_eq!(retry, epoch);
                assert_eq!(partitions, vec![tp.clone()]);
                assert!(dropped.is_empty());
                assert_eq!(commit(&mut a.client, &member_id, retry, 9), None);
            }
            other => panic!("{other:?}"),
        }
        let now = Instant::now();
        a.m.leave(now);
        run_until(&mut [&mut a], &group, "a left", |ms| {
            ms[0].m.state() == MemberState::Left
        });
    }
    #[test]
    fn a_static_member_leaves_with_minus_2_and_its_return_gets_the_same_partitions() {
        let kafka = kip848_kafka();
        let (topic, all) = new_topic(kafka, "kip848-static", 4);
        let group = unique_name("kip848-static-group");
        let instance = unique_name("static");
        let mut cfg = config(&group, &topic);
        cfg.instance_id = Some(instance.clone());
        let mut s = Driven::new(kafka.bootstrap(), "s", cfg.clone());
        let mut d = Driven::new(kafka.bootstrap(), "d", config(&group, &topic));
        run_until(&mut [&mut s, &mut d], &group, "s and d converge", |ms| {
            converged(ms, &all)
        });
        let kept = s.working.clone();
        let d_owned = d.working.clone();
        // From here on, the static leave and return must not move anything of d's (before it, d may
        // have revoked in the first convergence, when it joined a moment before s).
        let d_events_before = d.events.len();
        s.m.leave(Instant::now());
        run_until(&mut [&mut s, &mut d], &group, "s left", |ms| {
            ms[0].m.state() == MemberState::Left
        });
        assert_eq!(
            s.sent.last().map(|r| r.member_epoch),
            Some(rebalance_guard::group::consumer_group::STATIC_LEAVE_EPOCH)
        );
        // Within the broker's session timeout (6 s here) its partitions wait for it.
        let until = Instant::now() + Duration::from_secs(2);
        while Instant::now() < until {
            step_all(&mut [&mut d], &group);
        }
        assert_eq!(
            d.working, d_owned,
            "d did not get the static member's partitions"
        );
        // The static member returns: a new process, a new member id, the same instance id.
        let mut back = Driven::new(kafka.bootstrap(), "back", cfg);
        assert_ne!(back.m.member_id(), s.m.member_id());
        run_until(
            &mut [&mut back, &mut d],
            &group,
            "back and d converge",
            |ms| converged(ms, &all),
        );
        assert_eq!(back.working, kept, "the same partitions came back");
        assert!(
            d.events[d_events_before..]
                .iter()
                .all(|e| !matches!(e, Event::Revoke { .. })),
            "d revoked nothing: no rebalance"
        );
        // A second process with the same instance id while `back` is active is refused.
        let mut twin_cfg = config(&group, &topic);
        twin_cfg.instance_id = Some(instance);
        let mut twin = Driven::new(kafka.bootstrap(), "twin", twin_cfg);
        twin.fatal_expected = true;
        run_until(&mut [&mut twin], &group, "the twin is refused", |ms| {
            ms[0].m.state() == MemberState::Fatal
        });
        assert_eq!(twin.errors, vec![KafkaCode(111)], "UNRELEASED_INSTANCE_ID");
        leave_all(&mut [&mut back, &mut d], &group, "both left");
    }
    #[test]
    fn a_member_that_does_not_revoke_within_its_rebalance_timeout_loses_its_partitions() {
        let kafka = kip848_kafka();
        let (topic, all) = new_topic(kafka, "kip848-stuck", 2);
        let group = unique_name("kip848-stuck-group");
        let mut cfg = config(&group, &topic);
        cfg.rebalance_timeout = Duration::from_secs(3);
        let mut a = Driven::new(kafka.bootstrap(), "a", cfg);
        run_until(&mut [&mut a], &group, "a owns both", |ms| {
            converged(ms, &all)
        });
        a.auto_ack = false;
        let mut b = Driven::new(kafka.bootstrap(), "b", config(&group, &topic));
        run_until(
            &mut [&mut a, &mut b],
            &group,
            "a is asked to revoke",
            |ms| !ms[0].unacked.is_empty(),
        );
        let asked = Instant::now();
        run_until(
            &mut [&mut a, &mut b],
            &group,
            "a loses its partitions",
            |ms| !lost_causes(ms[0]).is_empty(),
        );
        let waited = asked.elapsed();
        eprintln!(
            "a lost after {waited:?}: {:?}; heartbeat errors {:?}",
            lost_causes(&a),
            a.errors
        );
        assert!(
            waited >= Duration::from_secs(2),
            "not before the rebalance timeout: {waited:?}"
        );
        let cause = lost_causes(&a)[0].clone();
        assert!(
            matches!(
                cause,
                rebalance_guard::LostReason::RevocationTimedOut
                    | rebalance_guard::LostReason::Fenced(_)
            ),
            "{cause:?}"
        );
        // Late, the poll thread finishes: nothing changes, and the group converges with a rejoined.
        for id in std::mem::take(&mut a.unacked) {
            a.m.revocation_done(Instant::now(), id);
        }
        a.auto_ack = true;
        run_until(&mut [&mut a, &mut b], &group, "a and b converge", |ms| {
            converged(ms, &all)
        });
        leave_all(&mut [&mut a, &mut b], &group, "both left");
    }
    /// What the machine's own revocation deadline stands for, pinned on the broker itself: a member
    /// that keeps heartbeating but never reports its revocation is removed at its rebalance
    /// timeout, and its next heartbeat is refused. `a` here is raw requests only, no machine.
    #[test]
    fn the_broker_fences_a_member_that_heartbeats_but_never_revokes_at_its_rebalance_timeout() {
        let kafka = kip848_kafka();
        let (topic, all) = new_topic(kafka, "kip848-raw", 2);
        let group = unique_name("kip848-raw-group");
        let mut client =
            Client::connect(ClientConfig::from_bootstrap_str(kafka.bootstrap())).expect("connect");
        let member_id = rebalance_guard::group::consumer_group::generate_member_id();
        let send = |client: &mut Client, req: &HeartbeatRequest| {
            let node = client
                .find_coordinator(&group)
                .expect("coordinator")
                .node_id;
            let conn = client.connection(node).expect("connection");
            wire::send_heartbeat(conn, req).expect("heartbeat").1
        };
        let join = HeartbeatRequest {
            group_id: group.clone(),
            member_id: member_id.clone(),
            member_epoch: 0,
            instance_id: None,
            rebalance_timeout_ms: 3000,
            subscribed_topic_names: Some(vec![topic.clone()]),
            subscribed_topic_regex: None,
            server_assignor: None,
            rack_id: None,
            owned: Some(Default::default()),
        };
        let resp = send(&mut client, &join);
        assert_eq!(resp.error, KafkaCode::NONE, "{resp:?}");
        eprintln!(
            "join answered: epoch {}, assignment {:?}",
            resp.member_epoch, resp.assignment
        );
        let mut epoch = resp.member_epoch;
        let mut assigned = resp
            .assignment
            .expect("a full request is answered with an assignment");
        let mut hb = HeartbeatRequest {
            member_epoch: epoch,
            rebalance_timeout_ms: -1,
            subscribed_topic_names: None,
            subscribed_topic_regex: None,
            owned: Some(assigned.clone()),
            ..join
        };
        // Kafka 4.4 may answer the join before the target assignment is computed (an empty
        // assignment); the partitions come with a later heartbeat.
        let deadline = Instant::now() + CONVERGE;
        while assigned.values().map(Vec::len).sum::<usize>() < 2 {
            assert!(Instant::now() < deadline, "a never got both partitions");
            thread::sleep(Duration::from_millis(100));
            let resp = send(&mut client, &hb);
            assert_eq!(resp.error, KafkaCode::NONE, "{resp:?}");
            epoch = resp.member_epoch;
            if let Some(a) = resp.assignment {
                assigned = a;
            }
            hb.member_epoch = epoch;
            hb.owned = Some(assigned.clone());
        }
        eprintln!("a owns {assigned:?} in epoch {epoch}");
        // Report them owned (what a member does once it took them).
        assert_eq!(send(&mut client, &hb).error, KafkaCode::NONE);
        hb.owned = None;

        let mut b = Driven::new(kafka.bootstrap(), "b", config(&group, &topic));
        let started = Instant::now();
        let mut refused = None;
        while started.elapsed() < Duration::from_secs(20) {
            b.step(&group);
            let resp = send(&mut client, &hb);
            if resp.error != KafkaCode::NONE {
                refused = Some((resp.error, started.elapsed()));
                break;
            }
            assert_eq!(
                resp.member_epoch, epoch,
                "no new epoch while the revocation is pending"
            );
            thread::sleep(Duration::from_millis(250));
        }
        let (code, after) = refused.expect("the broker refused a's heartbeat");
        eprintln!("a refused with {} after {after:?}", code.name());
        // KIP-848 says the member is fenced; Kafka 4.4 removes it, so the next heartbeat reads
        // UNKNOWN_MEMBER_ID rather than FENCED_MEMBER_EPOCH (the machine loses on either).
        assert_eq!(code, KafkaCode::UNKNOWN_MEMBER_ID);
        assert!(after >= Duration::from_secs(2), "{after:?}");
        run_until(&mut [&mut b], &group, "b owns both", |ms| {
            converged(ms, &all)
        });
        b.m.leave(Instant::now());
        run_until(&mut [&mut b], &group, "b left", |ms| {
            ms[0].m.state() == MemberState::Left
        });
    }
    #[test]
    fn three_members_join_and_leave_one_by_one_with_every_partition_owned_once() {
        let kafka = kip848_kafka();
        let (topic, all) = new_topic(kafka, "kip848-three", 6);
        let group = unique_name("kip848-three-group");
        let mut a = Driven::new(kafka.bootstrap(), "a", config(&group, &topic));
        let mut b = Driven::new(kafka.bootstrap(), "b", config(&group, &topic));
        let mut c = Driven::new(kafka.bootstrap(), "c", config(&group, &topic));
        run_until(&mut [&mut a], &group, "a alone", |ms| converged(ms, &all));
        run_until(&mut [&mut a, &mut b], &group, "a and b", |ms| {
            converged(ms, &all)
        });
        run_until(&mut [&mut a, &mut b, &mut c], &group, "a, b and c", |ms| {
            converged(ms, &all)
        });
        for m in [&a, &b, &c] {
            assert_eq!(m.working.len(), 2, "{} owns {:?}", m.name, m.working);
        }
        // Every partition a member gave up was committed before its next owner was assigned it.
        for (giver, taker) in [(&a, &b), (&a, &c), (&b, &c)] {
            for (tp, offset, _) in &giver.commits {
                if let Some(seen) = taker.seen_at_assign.get(tp) {
                    assert!(
                        seen.is_some_and(|s| s >= *offset),
                        "{tp}: {} saw {seen:?} when assigned, {} had committed {offset}",
                        taker.name,
                        giver.name
                    );
                }
            }
        }
        b.m.leave(Instant::now());
        run_until(&mut [&mut a, &mut b, &mut c], &group, "b left", |ms| {
            let (a, b, c) = (&ms[0], &ms[1], &ms[2]);
            let n = a.working.len() + c.working.len();
            let union: BTreeSet<TopicPartition> = a.working.union(&c.working).cloned().collect();
            b.m.state() == MemberState::Left
                && [a, c].iter().all(|m| m.m.state() == MemberState::Stable)
                && union == all
                && n == all.len()
        });
        assert!(b.working.is_empty());
        c.m.leave(Instant::now());
        run_until(&mut [&mut a, &mut c], &group, "c left, a owns all", |ms| {
            ms[1].m.state() == MemberState::Left
                && ms[0].working == all
                && ms[0].m.state() == MemberState::Stable
        });
        a.m.leave(Instant::now());
        run_until(&mut [&mut a], &group, "a left", |ms| {
            ms[0].m.state() == MemberState::Left
        });
        for m in [&a, &b, &c] {
            assert!(
                m.events.iter().all(|e| !matches!(e, Event::Lost { .. })),
                "{} lost nothing",
                m.name
            );
        }
    }
    /// What Kafka 4.4 checks on OffsetCommit v9 from a consumer-protocol member, pinned: not the
    /// exact member epoch KIP-848 describes, but KIP-1251's per-partition rule. A partition the
    /// member has held since an older epoch may be committed with that epoch; the member's current
    /// epoch is accepted even for a partition that moved to another member. So the broker does not
    /// stop a member from committing what it no longer owns: the client must (the guard commits
    /// only owned partitions, and `stale_epoch_retry` retries only those).
    ///
    /// KIP-1251 came with Kafka 4.3; before it (4.0 to 4.2, the version matrix's 4.0.2) the broker
    /// takes the member's exact current epoch only, so the older epoch is refused there. Every
    /// other check below holds on both.
    #[test]
    fn offset_commit_epochs_are_checked_per_partition_assignment_not_against_ownership() {
        let kafka = kip848_kafka();
        let (topic, all) = new_topic(kafka, "kip848-epochs", 2);
        let group = unique_name("kip848-epochs-group");
        let mut a = Driven::new(kafka.bootstrap(), "a", config(&group, &topic));
        run_until(&mut [&mut a], &group, "a alone", |ms| converged(ms, &all));
        let e1 = a.m.member_epoch();
        let mut b = Driven::new(kafka.bootstrap(), "b", config(&group, &topic));
        run_until(&mut [&mut a, &mut b], &group, "a and b", |ms| {
            converged(ms, &all)
        });
        let e2 = a.m.member_epoch();
        assert!(e2 > e1);
        let kept = a.working.iter().next().expect("a kept one").clone();
        let moved = b.working.iter().next().expect("b got one").clone();
        let member_id = a.m.member_id().to_string();
        let mut commit = |tp: &TopicPartition, epoch: i32, offset: i64| {
            let who = CommitIdentity {
                group_id: &group,
                generation_id_or_member_epoch: epoch,
                member_id: &member_id,
                group_instance_id: None,
            };
            let entry = OffsetCommitEntry {
                tp: tp.clone(),
                offset,
                leader_epoch: None,
                metadata: None,
            };
            let mut r = a
                .client
                .offset_commit(&who, &[entry])
                .expect("OffsetCommit");
            r.remove(0).1.err().and_then(|e| e.kafka_code())
        };
        let version = KafkaVersion::Newest.version();
        if major_minor(&version) >= (4, 3) {
            assert_eq!(commit(&kept, e1, 11), None, "held since e1: e1 is accepted");
        } else {
            assert_eq!(
                commit(&kept, e1, 11),
                Some(KafkaCode::STALE_MEMBER_EPOCH),
                "Kafka {version} (before KIP-1251): only the current epoch is accepted"
            );
        }
        assert_eq!(commit(&kept, e2, 12), None);
        assert_eq!(
            commit(&kept, e2 + 1, 13),
            Some(KafkaCode::STALE_MEMBER_EPOCH)
        );
        assert_eq!(
            commit(&moved, e1, 14),
            Some(KafkaCode::STALE_MEMBER_EPOCH),
            "assigned elsewhere since e1"
        );
        assert_eq!(
            commit(&moved, e2, 15),
            None,
            "the current epoch commits even a partition another member owns"
        );
        let stored = b
            .client
            .offset_fetch(&group, std::slice::from_ref(&moved))
            .expect("OffsetFetch");
        assert_eq!(stored[0].offset, Some(15), "a overwrote b's partition");
        leave_all(&mut [&mut a, &mut b], &group, "both left");
    }
    #[test]
    fn a_heartbeat_with_an_epoch_the_broker_never_gave_is_fenced_and_the_member_rejoins_with_epoch_0(
    ) {
        let kafka = kip848_kafka();
        let (topic, all) = new_topic(kafka, "kip848-fence", 2);
        let group = unique_name("kip848-fence-group");
        let mut a = Driven::new(kafka.bootstrap(), "a", config(&group, &topic));
        run_until(&mut [&mut a], &group, "a owns both", |ms| {
            converged(ms, &all)
        });
        let commits = a.commits.len();
        // Only the answers to the tampered heartbeat and after it: a broker started moments ago may
        // answer the first join with COORDINATOR_LOAD_IN_PROGRESS, which is not what this test is
        // about.
        let errors_before = a.errors.len();
        a.tamper_epoch_once = true;
        run_until(&mut [&mut a], &group, "a is fenced", |ms| {
            !lost_causes(ms[0]).is_empty()
        });
        assert_eq!(a.errors[errors_before..], [KafkaCode::FENCED_MEMBER_EPOCH]);
        assert_eq!(
            lost_causes(&a),
            vec![rebalance_guard::LostReason::Fenced(
                KafkaCode::FENCED_MEMBER_EPOCH
            )]
        );
        assert_eq!(a.commits.len(), commits, "a loss commits nothing");
        run_until(&mut [&mut a], &group, "a owns both again", |ms| {
            converged(ms, &all)
        });
        let rejoin = a
            .sent
            .iter()
            .rev()
            .find(|r| r.member_epoch == 0)
            .expect("a rejoin with epoch 0");
        assert_eq!(
            rejoin.member_id,
            a.m.member_id(),
            "the member id is kept for life"
        );
        assert_eq!(rejoin.owned.as_ref().map(|o| o.len()), Some(0));
        a.m.leave(Instant::now());
        run_until(&mut [&mut a], &group, "a left", |ms| {
            ms[0].m.state() == MemberState::Left
        });
    }
}
