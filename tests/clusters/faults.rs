//! Broker failures on a three-node Kafka 4.x cluster (replication 3, `min.insync.replicas=2`).
//!
//! A single broker cannot show what production sees when one broker of three dies: its
//! partitions get new leaders only after the controller fences it (`broker.session.timeout.ms`,
//! 9 s), `acks=all` writes and the coordinator's `__consumer_offsets` writes wait that long, and
//! the consumer must find the new leaders and go on. Each test here gets a cluster of its own
//! ([`KafkaCluster`]) and asserts what the product promises its users: no record lost, the
//! committed offsets at the log end, and processing that goes on after the fault.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rebalance_guard::wire::{Client, ClientConfig, IsolationLevel, OffsetSpec};
use rebalance_guard::TopicPartition;
use support::cluster::KafkaCluster;
use support::consumer::{committed, config, consumer_protocol_config, wait_until};
use support::fault_member::{produce_live, FaultMember};
use support::unique_name;

const PARTITIONS: i32 = 6;
/// Live production: 150 records/s for 20 s, keyed `k-<i>` (spread over the partitions by the
/// Java partitioner), `acks=all`.
const RECORDS: usize = 3000;
const RATE: u32 = 150;
/// Bound on each wait: well above the 9 s Kafka takes to fence a dead broker.
const WAIT: Duration = Duration::from_secs(60);

/// The members' session (`session.timeout.ms`, `session.bound.ms` and the cluster's
/// `group.consumer.session.timeout.ms`): above the ~9-10 s for which the coordinator's writes and
/// heartbeat answers wait while a dead follower of the offsets topic is not fenced yet, so that
/// no member fences its partitions (README: the values that survive a broker failure).
const SESSION_MS: &str = "20000";

/// kill -9 of the leader of a partition while records are produced and consumed; the victim
/// is not the group's coordinator (the coordinator's failure is another scenario). Classic
/// protocol, cooperative-sticky, run mode.
#[test]
fn a_killed_partition_leader_loses_nothing_and_consumption_goes_on() {
    let _ = env_logger::builder().is_test(true).try_init();
    let cluster = KafkaCluster::start_with(3, &[("group.consumer.session.timeout.ms", SESSION_MS)]);
    let bootstrap = cluster.bootstrap().to_string();
    let topic = unique_name("leader-kill");
    let group = unique_name("leader-kill-group");
    let kip848_group = unique_name("leader-kill-kip848");
    cluster.create_topic(&topic, PARTITIONS as u32);

    // Two groups read the topic at once, so one cluster covers both protocols and both modes:
    // classic cooperative-sticky in `run`, and KIP-848 in `run_with_workers` (keyed order).
    let stop = Arc::new(AtomicBool::new(false));
    let classic = FaultMember::start(
        "classic run",
        config(
            &bootstrap,
            &group,
            &[
                ("partition.assignment.strategy", "cooperative-sticky"),
                ("session.timeout.ms", SESSION_MS),
            ],
        ),
        &topic,
        None,
        stop.clone(),
    );
    let kip848 = FaultMember::start(
        "kip848 run_with_workers",
        consumer_protocol_config(
            &bootstrap,
            &kip848_group,
            &[
                ("processing.order", "key"),
                ("session.bound.ms", SESSION_MS),
            ],
        ),
        &topic,
        Some(4),
        stop.clone(),
    );
    let producer = produce_live(&bootstrap, &topic, RECORDS, RATE, 60);
    wait_until("records of every partition processed by both", WAIT, || {
        [&classic, &kip848]
            .iter()
            .all(|m| m.partitions_seen() == PARTITIONS as usize)
    });

    let coordinators = [
        cluster.coordinator_of(&group),
        cluster.coordinator_of(&kip848_group),
    ];
    let leaders = cluster.leaders(&topic);
    let victim = *leaders
        .values()
        .find(|&&leader| !coordinators.contains(&leader))
        .expect("a partition led by a node that coordinates neither group");
    let victim_partitions: Vec<i32> = leaders
        .iter()
        .filter(|(_, &leader)| leader == victim)
        .map(|(&p, _)| p)
        .collect();
    let killed_at = Instant::now();
    cluster.kill(victim);
    eprintln!(
        "killed node {victim}, leader of {victim_partitions:?} (coordinators: {coordinators:?})"
    );
    wait_until("new leaders for the killed node's partitions", WAIT, || {
        let leaders = cluster.leaders(&topic);
        victim_partitions
            .iter()
            .all(|p| leaders.get(p).is_some_and(|&l| l >= 0 && l != victim))
    });
    let new_leaders_at = Instant::now();
    eprintln!(
        "new leaders {:?} after {:?}",
        cluster.leaders(&topic),
        new_leaders_at - killed_at
    );
    // Each consumer goes on with the new leaders: records of each of the killed node's
    // partitions processed after the new leaders were elected.
    let members = [&classic, &kip848];
    let resumed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_until(
            "records of the killed leader's partitions after the new leaders, by both",
            WAIT,
            || {
                members.iter().all(|m| {
                    let processed = m.processed.lock().unwrap();
                    victim_partitions.iter().all(|p| {
                        processed
                            .iter()
                            .any(|r| r.partition == *p && r.at > new_leaders_at)
                    })
                })
            },
        )
    }));
    if resumed.is_ok() {
        // Back with its data while the consumers go on: the cluster whole again.
        cluster.restart(victim);
    }

    let produced = producer.join().expect("producer thread");
    let everything: BTreeSet<String> = (0..RECORDS).map(|i| format!("k-{i}")).collect();
    let all_processed = resumed.is_ok()
        && std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            wait_until("every produced record processed by both", WAIT, || {
                members.iter().all(|m| m.has_every_key(&everything))
            })
        }))
        .is_ok();
    let tps: Vec<TopicPartition> = (0..PARTITIONS)
        .map(|p| TopicPartition::new(&*topic, p))
        .collect();
    let mut client = Client::connect(ClientConfig::from_bootstrap_str(&bootstrap)).expect("client");
    let log_end: BTreeMap<i32, i64> = client
        .list_offsets(&tps, OffsetSpec::Latest, IsolationLevel::ReadUncommitted)
        .expect("log end offsets")
        .into_iter()
        .map(|(tp, offset)| (tp.partition, offset))
        .collect();
    let caught_up = |c: &BTreeMap<i32, Option<i64>>| {
        log_end
            .iter()
            .all(|(p, end)| c.get(p).copied().flatten() == Some(*end))
    };
    let groups = [group.as_str(), kip848_group.as_str()];
    let commits_at_end = all_processed
        && std::panic::catch_unwind(|| {
            wait_until(
                "committed offsets at the log end, both groups",
                WAIT,
                || {
                    groups
                        .iter()
                        .all(|g| caught_up(&committed(&bootstrap, g, &topic, PARTITIONS)))
                },
            )
        })
        .is_ok();
    stop.store(true, Ordering::SeqCst);
    let (classic_log, kip848_log) = (classic.processed.clone(), kip848.processed.clone());
    let ended: Vec<(&str, Result<(), String>)> = [classic, kip848]
        .into_iter()
        .map(|m| (m.name, m.thread.join().expect("member thread")))
        .collect();

    assert_eq!(produced.trim(), format!("produced {RECORDS}"));
    assert!(
        resumed.is_ok(),
        "no record of {victim_partitions:?} processed within {WAIT:?} of their new leaders"
    );
    for ((name, processed), g) in [
        ("classic run", &classic_log),
        ("kip848 run_with_workers", &kip848_log),
    ]
    .into_iter()
    .zip(groups)
    {
        let processed = processed.lock().unwrap();
        let keys: BTreeSet<&str> = processed.iter().map(|p| p.key.as_str()).collect();
        let lost: Vec<&String> = everything
            .iter()
            .filter(|k| !keys.contains(k.as_str()))
            .collect();
        let records: BTreeSet<(i32, i64)> =
            processed.iter().map(|p| (p.partition, p.offset)).collect();
        // The longest pause in processing on each partition from the kill (included) to its
        // last record. Not asserted: every partition here has the killed node as a replica, so
        // acks=all production itself waits until the node is fenced (the producer's floor);
        // tests/clusters/leaders.rs measures what the consumer adds.
        let mut gaps = BTreeMap::new();
        for p in 0..PARTITIONS {
            let times: Vec<Instant> = std::iter::once(killed_at)
                .chain(
                    processed
                        .iter()
                        .filter(|r| r.partition == p && r.at >= killed_at)
                        .map(|r| r.at),
                )
                .collect();
            let gap = times.windows(2).map(|w| w[1] - w[0]).max();
            gaps.insert(p, gap.map(|g| g.as_millis()));
        }
        let repeats = processed.len() - records.len();
        eprintln!(
            "{name}: produced: {}; processed {} ({repeats} repeats); longest gap per partition \
             after the kill (ms): {gaps:?}; killed node {victim} led {victim_partitions:?}",
            produced.trim(),
            processed.len(),
        );
        assert!(
            lost.is_empty(),
            "{name}: {} produced records never processed, first {:?}",
            lost.len(),
            lost.iter().take(10).collect::<Vec<_>>()
        );
        // No member died and every session outlasts the fault: not one record of the log may
        // be processed twice.
        assert_eq!(repeats, 0, "{name}: records processed twice without a kill");
        let last_committed = committed(&bootstrap, g, &topic, PARTITIONS);
        assert!(
            commits_at_end,
            "{name}: committed {last_committed:?}, log end {log_end:?}"
        );
    }
    for (name, ended) in ended {
        if let Err(e) = ended {
            panic!("{name} did not run to the stop and close: {e}");
        }
    }
}
