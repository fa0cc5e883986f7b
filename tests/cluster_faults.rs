//! Broker failures on a three-node Kafka 4.x cluster (replication 3, `min.insync.replicas=2`).
//!
//! A single broker cannot show what production sees when one broker of three dies: its
//! partitions get new leaders only after the controller fences it (`broker.session.timeout.ms`,
//! 9 s), `acks=all` writes and the coordinator's `__consumer_offsets` writes wait that long, and
//! the consumer must find the new leaders and go on. Each test here gets a cluster of its own
//! ([`KafkaCluster`]) and asserts what the product promises its users: no record lost, the
//! committed offsets at the log end, and processing that goes on after the fault.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use rebalance_guard::consumer::Consumer;
use rebalance_guard::wire::{Client, ClientConfig, IsolationLevel, OffsetSpec};
use rebalance_guard::TopicPartition;
use support::cluster::KafkaCluster;
use support::consumer::{committed, config, wait_until};
use support::{peer, unique_name};

const PARTITIONS: i32 = 6;
/// Live production: 150 records/s for 20 s, keyed `k-<i>` (spread over the partitions by the
/// Java partitioner), `acks=all`.
const RECORDS: usize = 3000;
const RATE: &str = "150";
/// Bound on each wait: well above the 9 s Kafka takes to fence a dead broker.
const WAIT: Duration = Duration::from_secs(60);

/// One record our handler processed, and when.
struct Processed {
    at: Instant,
    partition: i32,
    key: String,
}

/// kill -9 of the leader of a partition while records are produced and consumed; the victim
/// is not the group's coordinator (the coordinator's failure is another scenario). Classic
/// protocol, cooperative-sticky, run mode.
#[test]
fn a_killed_partition_leader_loses_nothing_and_consumption_goes_on_kafka_cluster() {
    let _ = env_logger::builder().is_test(true).try_init();
    let cluster = KafkaCluster::start(3);
    let bootstrap = cluster.bootstrap().to_string();
    let topic = unique_name("leader-kill");
    let group = unique_name("leader-kill-group");
    cluster.create_topic(&topic, PARTITIONS as u32);

    let processed: Arc<Mutex<Vec<Processed>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let member = {
        let config = config(
            &bootstrap,
            &group,
            &[("partition.assignment.strategy", "cooperative-sticky")],
        );
        let (topic, processed, stop) = (topic.clone(), processed.clone(), stop.clone());
        thread::spawn(move || {
            let mut consumer = Consumer::subscribe(config, &[&topic]).map_err(|e| e.to_string())?;
            let ran = consumer.run(&stop, |record, _ctx| {
                let key = record.key.as_deref().unwrap_or_default();
                processed.lock().unwrap().push(Processed {
                    at: Instant::now(),
                    partition: record.partition,
                    key: String::from_utf8_lossy(key).into_owned(),
                });
                Ok::<(), std::io::Error>(())
            });
            let closed = consumer.close();
            ran.map_err(|e| format!("run: {e}"))?;
            closed.map_err(|e| format!("close: {e}"))
        })
    };
    let producer = {
        let bootstrap = bootstrap.clone();
        let topic = topic.clone();
        thread::spawn(move || {
            peer(&[
                "produce",
                "--bootstrap",
                &bootstrap,
                "--topic",
                &topic,
                "--count",
                &RECORDS.to_string(),
                "--rate",
                RATE,
                "--timeout-s",
                "60",
            ])
        })
    };
    let partitions_seen = |processed: &[Processed]| -> BTreeSet<i32> {
        processed.iter().map(|p| p.partition).collect()
    };
    wait_until("records of every partition processed", WAIT, || {
        partitions_seen(&processed.lock().unwrap()).len() == PARTITIONS as usize
    });

    let coordinator = cluster.coordinator_of(&group);
    let leaders = cluster.leaders(&topic);
    let victim = *leaders
        .values()
        .find(|&&leader| leader != coordinator)
        .expect("a partition led by a node that does not coordinate the group");
    let victim_partitions: Vec<i32> = leaders
        .iter()
        .filter(|(_, &leader)| leader == victim)
        .map(|(&p, _)| p)
        .collect();
    let killed_at = Instant::now();
    cluster.kill(victim);
    eprintln!(
        "killed node {victim}, leader of {victim_partitions:?} (coordinator: node {coordinator})"
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
    // The consumer goes on with the new leaders: records of each of the killed node's
    // partitions processed after the new leaders were elected.
    let resumed = std::panic::catch_unwind(|| {
        wait_until(
            "records of the killed leader's partitions after the new leaders",
            WAIT,
            || {
                let processed = processed.lock().unwrap();
                victim_partitions.iter().all(|p| {
                    processed
                        .iter()
                        .any(|r| r.partition == *p && r.at > new_leaders_at)
                })
            },
        )
    });
    if resumed.is_ok() {
        // Back with its data while the consumer goes on: the cluster whole again.
        cluster.restart(victim);
    }

    let produced = producer.join().expect("producer thread");
    let everything: BTreeSet<String> = (0..RECORDS).map(|i| format!("k-{i}")).collect();
    let all_processed = resumed.is_ok()
        && std::panic::catch_unwind(|| {
            wait_until("every produced record processed", WAIT, || {
                let processed = processed.lock().unwrap();
                let keys: BTreeSet<&str> = processed.iter().map(|p| p.key.as_str()).collect();
                everything.iter().all(|k| keys.contains(k.as_str()))
            })
        })
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
    let commits_at_end = all_processed
        && std::panic::catch_unwind(|| {
            wait_until("committed offsets at the log end", WAIT, || {
                caught_up(&committed(&bootstrap, &group, &topic, PARTITIONS))
            })
        })
        .is_ok();
    stop.store(true, Ordering::SeqCst);
    let ended = member.join().expect("member thread");

    let processed = processed.lock().unwrap();
    let keys: BTreeSet<&str> = processed.iter().map(|p| p.key.as_str()).collect();
    let lost: Vec<&String> = everything
        .iter()
        .filter(|k| !keys.contains(k.as_str()))
        .collect();
    // The longest pause in processing on each partition from the kill (included) to its last record
    // (a measurement for the report, not asserted: issue 21's goals are not reached yet).
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
    eprintln!(
        "produced: {}; processed {} ({} repeats); longest gap per partition after the kill (ms): \
         {gaps:?}; killed node {victim} led {victim_partitions:?}",
        produced.trim(),
        processed.len(),
        processed.len() - keys.len()
    );
    assert_eq!(produced.trim(), format!("produced {RECORDS}"));
    assert!(
        resumed.is_ok(),
        "no record of {victim_partitions:?} processed within {WAIT:?} of their new leaders"
    );
    assert!(
        lost.is_empty(),
        "{} produced records never processed, first {:?}",
        lost.len(),
        lost.iter().take(10).collect::<Vec<_>>()
    );
    let last_committed = committed(&bootstrap, &group, &topic, PARTITIONS);
    assert!(
        commits_at_end,
        "committed {last_committed:?}, log end {log_end:?}"
    );
    ended.expect("the consumer ran to the stop and closed");
}
