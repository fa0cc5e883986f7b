//! Fetching survives a hung or unreachable partition leader (issue 21, item 4), on a three-node
//! Kafka 4.x cluster.
//!
//! A leader that stops answering (SIGSTOP: its sockets open, nothing answered) or that the
//! consumer cannot reach (while the cluster sees it alive) must stop only its own partitions:
//! every broker is fetched from by its own thread, and the poll thread never waits on one
//! broker longer than `fetch.max.wait.ms` plus a margin. Each test asserts what the product
//! promises (no record lost, none repeated without a kill, committed offsets at the log end)
//! and prints the longest pause in processing on the partitions whose leader did not fail.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use rebalance_guard::wire::{
    Client, ClientConfig, CommitIdentity, IsolationLevel, OffsetCommitEntry, OffsetSpec,
};
use rebalance_guard::TopicPartition;
use support::cluster::{KafkaCluster, NodeId};
use support::consumer::{committed, config, consumer_protocol_config, wait_until};
use support::fault_member::{produce_live, FaultMember, Processed};
use support::proxy::Proxy;
use support::{unique_name, venv_python_run};

const PARTITIONS: i32 = 6;
/// Live production: 150 records/s for 20 s, keyed `k-<i>`, `acks=all`.
const RECORDS: usize = 3000;
const RATE: u32 = 150;
const WAIT: Duration = Duration::from_secs(60);
/// The consumer's `request.timeout.ms`: the faults below last longer than one of it.
const REQUEST_TIMEOUT_MS: &str = "5000";
/// How long the fault lasts: past one request timeout, and past Kafka's 9 s
/// `broker.session.timeout.ms` (a paused broker is fenced and its partitions get new leaders).
const FAULT: Duration = Duration::from_secs(12);
/// The members' session (`session.timeout.ms`, `session.bound.ms`, and the cluster's
/// `group.consumer.session.timeout.ms`): above the ~9-10 s for which the coordinator's writes
/// and heartbeat answers wait while a follower of the offsets topic is stopped and not fenced.
const SESSION_MS: &str = "20000";
/// Bound on the longest gap on partitions whose leader and replicas are all alive.
const HEALTHY_GAP_BOUND_MS: u128 = 3_000;

fn consumer_settings<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut settings = vec![("request.timeout.ms", REQUEST_TIMEOUT_MS)];
    settings.extend_from_slice(extra);
    settings
}

fn start_producer(bootstrap: &str, topic: &str) -> thread::JoinHandle<String> {
    produce_live(bootstrap, topic, RECORDS, RATE, 80)
}

/// Creates `topic` with the given replicas per partition (the first one leads), through the
/// Admin API, and waits until every partition has a leader.
pub(crate) fn create_topic_with_replicas(
    cluster: &KafkaCluster,
    topic: &str,
    replicas: &[Vec<NodeId>],
) {
    let assignment = format!(
        "[{}]",
        replicas
            .iter()
            .map(|r| format!(
                "[{}]",
                r.iter()
                    .map(|n| n.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            ))
            .collect::<Vec<_>>()
            .join(",")
    );
    let code = r#"
import json, sys
from confluent_kafka.admin import AdminClient, NewTopic
bootstrap, topic, assignment = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "cluster-leaders-admin"})
futures = admin.create_topics([NewTopic(topic, num_partitions=len(assignment), replica_assignment=assignment)], operation_timeout=30, request_timeout=30)
futures[topic].result(timeout=30)
print("created")
"#;
    venv_python_run(code, &[cluster.bootstrap(), topic, &assignment]);
    wait_until("every partition of the new topic led", WAIT, || {
        let leaders = cluster.leaders(topic);
        leaders.len() == replicas.len() && leaders.values().all(|&l| l >= 0)
    });
}

/// The longest pause in processing on `partition` within `[from, to]` (both ends count as
/// events, so a partition that processed nothing in the window shows the whole window).
fn longest_gap(processed: &[Processed], partition: i32, from: Instant, to: Instant) -> Duration {
    let times: Vec<Instant> = std::iter::once(from)
        .chain(
            processed
                .iter()
                .filter(|r| r.partition == partition && r.at >= from && r.at <= to)
                .map(|r| r.at),
        )
        .chain(std::iter::once(to))
        .collect();
    times
        .windows(2)
        .map(|w| w[1].saturating_duration_since(w[0]))
        .max()
        .unwrap_or_default()
}

/// What one member did: lost keys, repeats, committed offsets at the log end, and the longest
/// gap per partition in the fault window.
struct Outcome {
    group: String,
    lost: Vec<String>,
    repeats: usize,
    commits_at_end: bool,
    gaps: BTreeMap<i32, u128>,
    /// Per partition: records produced in the fault window (by their timestamp), and the most
    /// any record of the partition waited from its timestamp to its processing.
    produced_in_window: BTreeMap<i32, usize>,
    latest: BTreeMap<i32, i64>,
}

fn outcome(
    member: &FaultMember,
    bootstrap: &str,
    topic: &str,
    log_end: &BTreeMap<i32, i64>,
    window: (Instant, Instant),
) -> Outcome {
    let everything: BTreeSet<String> = (0..RECORDS).map(|i| format!("k-{i}")).collect();
    let all = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_until(
            &format!("{}: every produced record processed", member.name),
            WAIT,
            || member.has_every_key(&everything),
        )
    }))
    .is_ok();
    let commits_at_end = all
        && std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            wait_until(
                &format!("{}: committed offsets at the log end", member.name),
                WAIT,
                || {
                    let c = committed(bootstrap, &member.group, topic, PARTITIONS);
                    log_end
                        .iter()
                        .all(|(p, end)| c.get(p).copied().flatten() == Some(*end))
                },
            )
        }))
        .is_ok();
    let processed = member.processed.lock().unwrap();
    let keys: BTreeSet<&str> = processed.iter().map(|p| p.key.as_str()).collect();
    let lost = everything
        .iter()
        .filter(|k| !keys.contains(k.as_str()))
        .cloned()
        .collect();
    let gaps = (0..PARTITIONS)
        .map(|p| {
            (
                p,
                longest_gap(&processed, p, window.0, window.1).as_millis(),
            )
        })
        .collect();
    let wall = |at: Instant| {
        let now_wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        now_wall - Instant::now().saturating_duration_since(at).as_millis() as i64
    };
    let (from_ms, to_ms) = (wall(window.0), wall(window.1));
    let produced_in_window = (0..PARTITIONS)
        .map(|p| {
            let n = processed
                .iter()
                .filter(|r| r.partition == p && r.timestamp >= from_ms && r.timestamp <= to_ms)
                .count();
            (p, n)
        })
        .collect();
    let latest = (0..PARTITIONS)
        .map(|p| {
            let l = processed
                .iter()
                .filter(|r| r.partition == p)
                .map(|r| r.wall_ms - r.timestamp)
                .max()
                .unwrap_or_default();
            (p, l)
        })
        .collect();
    Outcome {
        produced_in_window,
        latest,
        group: member.group.clone(),
        lost,
        repeats: processed.len() - keys.len(),
        commits_at_end,
        gaps,
    }
}

fn log_end(bootstrap: &str, topic: &str) -> BTreeMap<i32, i64> {
    let tps: Vec<TopicPartition> = (0..PARTITIONS)
        .map(|p| TopicPartition::new(topic, p))
        .collect();
    let mut client = Client::connect(ClientConfig::from_bootstrap_str(bootstrap)).expect("client");
    client
        .list_offsets(&tps, OffsetSpec::Latest, IsolationLevel::ReadUncommitted)
        .expect("log end offsets")
        .into_iter()
        .map(|(tp, offset)| (tp.partition, offset))
        .collect()
}

/// Stops every member, then checks and reports each one's outcome.
fn finish(
    members: Vec<FaultMember>,
    bootstrap: &str,
    topic: &str,
    window: (Instant, Instant),
    healthy: &[i32],
) {
    let log_end = log_end(bootstrap, topic);
    let outcomes: Vec<(&'static str, Outcome)> = members
        .iter()
        .map(|m| (m.name, outcome(m, bootstrap, topic, &log_end, window)))
        .collect();
    for m in &members {
        m.stop.store(true, Ordering::SeqCst);
    }
    let mut ended = Vec::new();
    for m in members {
        ended.push((m.name, m.thread.join().expect("member thread")));
    }
    for (name, o) in &outcomes {
        let worst_healthy = healthy
            .iter()
            .filter_map(|p| o.gaps.get(p))
            .max()
            .copied()
            .unwrap_or_default();
        eprintln!(
            "{name}: lost {}, repeats {}, commits at the log end: {}; longest gap per partition \
             in the fault window (ms): {:?}; worst on partitions whose leader did not fail \
             ({healthy:?}): {worst_healthy} ms; records produced in the window per partition: \
             {:?}; longest wait from a record's timestamp to its processing per partition (ms): \
             {:?}",
            o.lost.len(),
            o.repeats,
            o.commits_at_end,
            o.gaps,
            o.produced_in_window,
            o.latest
        );
    }
    for (name, o) in &outcomes {
        assert!(
            o.lost.is_empty(),
            "{name}: {} produced records never processed, first {:?}",
            o.lost.len(),
            o.lost.iter().take(10).collect::<Vec<_>>()
        );
        assert_eq!(
            o.repeats, 0,
            "{name}: records processed twice without a kill"
        );
        assert!(
            o.commits_at_end,
            "{name}: committed {:?}, log end {log_end:?}",
            committed(bootstrap, &o.group, topic, PARTITIONS)
        );
        // The product's part: partitions whose leader (and data) stayed reachable keep being
        // processed while the fault lasts, even while the coordinator's writes (and so every
        // paced commit) wait for a stopped follower to be fenced. The goal is a longest gap of
        // 1 s; the bound leaves room for a loaded machine, and is far below the ~9-12 s a commit
        // waited for on the poll thread used to cost.
        let worst = healthy.iter().filter_map(|p| o.gaps.get(p)).max().copied();
        assert!(
            worst.is_some_and(|w| w <= HEALTHY_GAP_BOUND_MS),
            "{name}: longest gap on the partitions of live leaders {healthy:?}: {worst:?} ms \
             (bound {HEALTHY_GAP_BOUND_MS} ms): {:?}",
            o.gaps
        );
    }
    for (name, ended) in ended {
        if let Err(e) = ended {
            panic!("{name} did not run to the stop and close: {e}");
        }
    }
}

/// Commits offset 1 of `topic`'s partition 0 for `group` (without members) outside any
/// generation; returns how long the answer took and what it was.
fn commit_probe(
    client: &mut Client,
    group: &str,
    topic: &str,
) -> (Duration, Result<String, String>) {
    let entry = OffsetCommitEntry {
        tp: TopicPartition::new(topic, 0),
        offset: 1,
        leader_epoch: None,
        metadata: None,
    };
    let who = CommitIdentity {
        group_id: group,
        generation_id_or_member_epoch: -1,
        member_id: "",
        group_instance_id: None,
    };
    let started = Instant::now();
    let result = client
        .offset_commit(&who, std::slice::from_ref(&entry))
        .map(|r| {
            format!(
                "{:?}",
                r.into_iter().map(|(_, r)| r.is_ok()).collect::<Vec<_>>()
            )
        })
        .map_err(|e| e.to_string());
    (started.elapsed(), result)
}

/// SIGSTOP of a partition leader that coordinates neither group, for longer than the
/// consumers' request timeout and Kafka's broker session, while records are produced live and
/// consumed by a classic cooperative-sticky member (`run`) and a KIP-848 member
/// (`run_with_workers`) in two groups. Every partition has two replicas (Kafka wants the same
/// count for all in a manual assignment): those it leads have a healthy follower that takes over
/// when it is fenced (their writes wait for it to come back: `min.insync.replicas=2`); the
/// others are on the two healthy nodes only, so that their high watermark never waits for the
/// stopped node and any pause in processing them is the consumer's own (or a commit's: the
/// offsets topic is replicated on all three nodes).
#[test]
fn a_paused_partition_leader_stops_only_its_partitions() {
    let _ = env_logger::builder().is_test(true).try_init();
    let cluster = KafkaCluster::start_with(3, &[("group.consumer.session.timeout.ms", SESSION_MS)]);
    let bootstrap = cluster.bootstrap().to_string();
    let topic = unique_name("leader-pause");
    let classic_group = unique_name("leader-pause-classic");
    let kip848_group = unique_name("leader-pause-kip848");
    let coordinators = [
        cluster.coordinator_of(&classic_group),
        cluster.coordinator_of(&kip848_group),
    ];
    let victim = (1..=3)
        .find(|n| !coordinators.contains(n))
        .expect("a node that coordinates neither group");
    let healthy_nodes: Vec<NodeId> = (1..=3).filter(|&n| n != victim).collect();
    let (a, b) = (healthy_nodes[0], healthy_nodes[1]);
    let replicas = vec![
        vec![victim, a],
        vec![victim, b],
        vec![a, b],
        vec![b, a],
        vec![a, b],
        vec![b, a],
    ];
    create_topic_with_replicas(&cluster, &topic, &replicas);
    let leaders = cluster.leaders(&topic);
    let victim_partitions: Vec<i32> = leaders
        .iter()
        .filter(|(_, &l)| l == victim)
        .map(|(&p, _)| p)
        .collect();
    let healthy: Vec<i32> = (0..PARTITIONS)
        .filter(|p| !victim_partitions.contains(p))
        .collect();
    assert!(!victim_partitions.is_empty(), "leaders {leaders:?}");

    // Both leases outlast the stall below (the README's rule: a session above the cluster's
    // broker.session.timeout.ms plus a margin), so no member fences anything.
    let classic = FaultMember::start(
        "classic run",
        config(
            &bootstrap,
            &classic_group,
            &consumer_settings(&[
                ("partition.assignment.strategy", "cooperative-sticky"),
                ("session.timeout.ms", SESSION_MS),
            ]),
        ),
        &topic,
        None,
        Arc::default(),
    );
    let kip848 = FaultMember::start(
        "kip848 run_with_workers",
        consumer_protocol_config(
            &bootstrap,
            &kip848_group,
            &consumer_settings(&[("session.bound.ms", SESSION_MS)]),
        ),
        &topic,
        Some(2),
        Arc::default(),
    );
    let producer = start_producer(&bootstrap, &topic);
    wait_until("records of every partition processed by both", WAIT, || {
        classic.partitions_seen() == PARTITIONS as usize
            && kip848.partitions_seen() == PARTITIONS as usize
    });

    // A probe of what the group coordinators do meanwhile: a commit outside any group to a
    // coordinator that is not the paused node, on a client connected before the pause.
    let probe_group = (0..50)
        .map(|_| unique_name("leader-pause-probe"))
        .find(|g| cluster.coordinator_of(g) != victim)
        .expect("a group coordinated by a healthy node");
    let mut probe = {
        let mut cfg = ClientConfig::from_bootstrap_str(&bootstrap);
        cfg.max_retries = 1;
        Client::connect(cfg).expect("probe client")
    };
    let probe_topic = topic.clone();
    let warm = commit_probe(&mut probe, &probe_group, &probe_topic);
    eprintln!("probe commit before the pause: {warm:?}");

    let paused_at = Instant::now();
    cluster.pause(victim);
    let probe_thread = thread::spawn(move || commit_probe(&mut probe, &probe_group, &probe_topic));
    eprintln!(
        "paused node {victim}, leader of {victim_partitions:?} (coordinators {coordinators:?})"
    );
    thread::sleep(FAULT);
    cluster.resume(victim);
    let resumed_at = Instant::now();
    eprintln!("resumed node {victim} after {:?}", resumed_at - paused_at);

    let (probe_took, probe_result) = probe_thread.join().expect("probe thread");
    eprintln!(
        "a commit to healthy coordinator sent at the pause answered after {probe_took:?}: \
         {probe_result:?}"
    );
    let produced = producer.join().expect("producer thread");
    assert_eq!(produced.trim(), format!("produced {RECORDS}"));
    eprintln!("leaders after the pause: {:?}", cluster.leaders(&topic));
    // Kafka's behaviour, not ours: a group coordinator on a healthy node cannot complete a
    // write to its offsets partition while a follower of it (replicated on all three nodes) is
    // stopped and still in its ISR, until the controller fences the stopped node (9 s). Every
    // commit, and with Kafka 4's coordinator the group's heartbeats, wait meanwhile: that, not
    // fetching, is what pauses the healthy partitions' processing in this test.
    assert!(
        probe_took >= Duration::from_secs(3),
        "a commit to a healthy coordinator answered in {probe_took:?} while a follower of the \
         offsets topic was stopped: {probe_result:?}"
    );
    finish(
        vec![classic, kip848],
        &bootstrap,
        &topic,
        (paused_at, resumed_at),
        &healthy,
    );
}

/// One broker unreachable from the consumer only: the consumer reaches every node through a
/// loopback proxy of its own (each proxy rewrites the advertised addresses to the proxies, so
/// the consumer sees the proxies as the brokers), and the proxy of a partition leader that does
/// not coordinate the group stops forwarding (connections accepted, nothing answered) for
/// longer than the request timeout. The cluster sees that node alive, so its partitions keep
/// their leader and wait; every other partition must keep flowing.
#[test]
fn a_leader_unreachable_from_the_consumer_only_stops_only_its_partitions() {
    let _ = env_logger::builder().is_test(true).try_init();
    let cluster = KafkaCluster::start(3);
    let bootstrap = cluster.bootstrap().to_string();
    let upstreams: Vec<String> = (1..=3).map(|n| cluster.addr(n)).collect();
    let proxies = Proxy::start_cluster(&upstreams);
    let through_proxies = proxies
        .iter()
        .map(|p| p.addr().to_string())
        .collect::<Vec<_>>()
        .join(",");
    let topic = unique_name("leader-cut");
    let group = unique_name("leader-cut-group");
    let kip848_group = unique_name("leader-cut-kip848");
    cluster.create_topic(&topic, PARTITIONS as u32);
    let coordinators = [
        cluster.coordinator_of(&group),
        cluster.coordinator_of(&kip848_group),
    ];
    let coordinator = coordinators[0];
    let leaders = cluster.leaders(&topic);
    let victim = *leaders
        .values()
        .find(|&&l| !coordinators.contains(&l))
        .expect("a partition led by a node that coordinates neither group");
    let victim_partitions: Vec<i32> = leaders
        .iter()
        .filter(|(_, &l)| l == victim)
        .map(|(&p, _)| p)
        .collect();
    let healthy: Vec<i32> = (0..PARTITIONS)
        .filter(|p| !victim_partitions.contains(p))
        .collect();

    let member = FaultMember::start(
        "classic run through proxies",
        config(
            &through_proxies,
            &group,
            &consumer_settings(&[("partition.assignment.strategy", "cooperative-sticky")]),
        ),
        &topic,
        None,
        Arc::default(),
    );
    let kip848 = FaultMember::start(
        "kip848 run_with_workers through proxies",
        consumer_protocol_config(&through_proxies, &kip848_group, &consumer_settings(&[])),
        &topic,
        Some(2),
        Arc::default(),
    );
    let producer = start_producer(&bootstrap, &topic);
    wait_until("records of every partition processed by both", WAIT, || {
        member.partitions_seen() == PARTITIONS as usize
            && kip848.partitions_seen() == PARTITIONS as usize
    });

    let victim_proxy = &proxies[(victim - 1) as usize];
    let cut_at = Instant::now();
    victim_proxy.hold();
    eprintln!(
        "cut node {victim} (leader of {victim_partitions:?}) off from the consumer \
         (coordinators: {coordinators:?}, classic group's: node {coordinator})"
    );
    thread::sleep(FAULT);
    victim_proxy.release();
    let healed_at = Instant::now();
    eprintln!(
        "node {victim} reachable again after {:?}",
        healed_at - cut_at
    );

    let produced = producer.join().expect("producer thread");
    assert_eq!(produced.trim(), format!("produced {RECORDS}"));
    finish(
        vec![member, kip848],
        &bootstrap,
        &topic,
        (cut_at, healed_at),
        &healthy,
    );
}
