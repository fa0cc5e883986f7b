//! Fetching from followers (KIP-392, issue 23 item 9) on a three-node Kafka 4.x cluster whose
//! nodes are in racks of their own (`broker.rack=rack-ID`) and whose leaders choose a consumer's
//! read replica by rack (`RackAwareReplicaSelector`).
//!
//! A consumer with `client.rack` set to a follower's rack must read (nearly) every byte from that
//! follower, one without `client.rack` every byte from the leader; and when the follower it reads
//! from dies, it must go back to the leader without losing or repeating a record. The bytes per
//! broker come from the consumer's own stats (`ConsumerStats::fetch`), and each test prints them.

use crate::support;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use bytes::Buf;
use kafka_protocol::messages::{
    ApiKey, ConsumerProtocolSubscription, DescribeGroupsRequest, GroupId,
};
use kafka_protocol::protocol::{Decodable, StrBytes};
use rebalance_guard::consumer::{Consumer, ConsumerConfig, ConsumerStats};
use rebalance_guard::wire::{Client, ClientConfig, FetchStats};
use support::cluster::{KafkaCluster, NodeId};
use support::consumer::{config, consumer_protocol_config, wait_until};
use support::fault_member::produce_live;
use support::{peer, unique_name};

/// Bound on reading everything, and on each wait below.
const WAIT: Duration = Duration::from_secs(90);
/// The members' session: above the ~9 s for which the coordinator's `__consumer_offsets` writes
/// (and, on Kafka 4.x, its heartbeat answers) wait while a replica of the offsets topic is dead
/// and not fenced yet.
const SESSION_MS: &str = "20000";

/// One consumer on a thread of its own, `poll`-ing until told to stop (paced commits, the rest
/// on close), with what it processed (partition, offset, key) and its stats after every batch.
struct Reader {
    processed: Arc<Mutex<Vec<(i32, i64, String)>>>,
    stats: Arc<Mutex<Option<ConsumerStats>>>,
    stop: Arc<AtomicBool>,
    thread: thread::JoinHandle<Result<(), String>>,
}

impl Reader {
    fn start(config: ConsumerConfig, topic: &str) -> Reader {
        let processed: Arc<Mutex<Vec<(i32, i64, String)>>> = Arc::default();
        let stats: Arc<Mutex<Option<ConsumerStats>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (log, seen, halt, topic) = (
            processed.clone(),
            stats.clone(),
            stop.clone(),
            topic.to_string(),
        );
        let thread = thread::spawn(move || {
            let mut consumer = Consumer::subscribe(config, &[&topic]).map_err(|e| e.to_string())?;
            while !halt.load(Ordering::SeqCst) {
                let mut batch = consumer
                    .poll(Duration::from_millis(200))
                    .map_err(|e| format!("poll: {e}"))?;
                while let Some(delivery) = batch.next() {
                    let r = &delivery.record;
                    let key = String::from_utf8_lossy(r.key.as_deref().unwrap_or_default());
                    log.lock()
                        .unwrap()
                        .push((r.partition, r.offset, key.into_owned()));
                    batch.complete(delivery);
                }
                // No commit here: the batch's paced commits go on the commit thread, as in
                // `run`, so a coordinator write held up by the fault does not stop the polls.
                drop(batch);
                *seen.lock().unwrap() = Some(consumer.stats());
            }
            consumer.close().map_err(|e| format!("close: {e}"))
        });
        Reader {
            processed,
            stats,
            stop,
            thread,
        }
    }

    fn fetch(&self) -> FetchStats {
        self.stats
            .lock()
            .unwrap()
            .as_ref()
            .map(|s| s.fetch.clone())
            .unwrap_or_default()
    }

    fn keys(&self) -> BTreeSet<String> {
        let processed = self.processed.lock().unwrap();
        processed.iter().map(|(_, _, k)| k.clone()).collect()
    }

    /// Stops and closes it; returns its last stats and how many records it processed more than
    /// once (by partition and offset).
    fn finish(self, name: &str) -> (ConsumerStats, usize) {
        self.stop.store(true, Ordering::SeqCst);
        match self.thread.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("{name}: {e}"),
            Err(_) => panic!("{name}: the reader panicked"),
        }
        let processed = self.processed.lock().unwrap();
        let distinct: BTreeSet<(i32, i64)> = processed.iter().map(|(p, o, _)| (*p, *o)).collect();
        let stats = self
            .stats
            .lock()
            .unwrap()
            .clone()
            .expect("stats after a poll");
        (stats, processed.len() - distinct.len())
    }
}

fn settings(rack: Option<&str>) -> Vec<(&str, &str)> {
    let mut s = vec![
        ("session.timeout.ms", SESSION_MS),
        ("heartbeat.interval.ms", "1000"),
        ("max.poll.interval.ms", "60000"),
        ("request.timeout.ms", "5000"),
    ];
    if let Some(rack) = rack {
        s.push(("client.rack", rack));
    }
    s
}

fn everything(count: usize) -> BTreeSet<String> {
    (0..count).map(|i| format!("k-{i}")).collect()
}

fn describe(fetch: &FetchStats) -> String {
    let per: Vec<String> = fetch
        .brokers
        .iter()
        .map(|(b, s)| format!("node {b}: {} B in {} answers", s.bytes, s.answers))
        .collect();
    format!(
        "{} (total {} B, partitions on a replica now {}, fallbacks {})",
        per.join(", "),
        fetch.total_bytes(),
        fetch.from_replicas,
        fetch.fallbacks
    )
}

/// One partition (leader L) with records already written, read three times in three groups:
/// without `client.rack` (every byte from L), and with the rack of a follower F under the classic
/// protocol and under KIP-848 (at least 90% of the bytes from F: the first fetch of the partition
/// goes to L, which answers with no records and names F). Each reads every record once.
#[test]
fn a_consumer_in_a_followers_rack_reads_from_that_follower() {
    let _ = env_logger::builder().is_test(true).try_init();
    let cluster = KafkaCluster::start_with_racks(3, &[]);
    let bootstrap = cluster.bootstrap().to_string();
    let topic = unique_name("rack");
    cluster.create_topic(&topic, 1);
    const COUNT: usize = 20_000;
    let produced = peer(&[
        "produce",
        "--bootstrap",
        &bootstrap,
        "--topic",
        &topic,
        "--count",
        &COUNT.to_string(),
        "--size",
        "200",
    ]);
    assert!(
        produced.contains(&format!("produced {COUNT}")),
        "{produced}"
    );
    let leader = cluster.leaders(&topic)[&0];
    let follower: NodeId = (1..=3).find(|&n| n != leader).expect("a follower");
    let rack = KafkaCluster::rack_of(follower);
    eprintln!("partition 0: leader node {leader}; follower read from: node {follower} ({rack})");

    let readers: [(&str, ConsumerConfig); 3] = [
        (
            "no client.rack (classic)",
            config(&bootstrap, &unique_name("rack-none"), &settings(None)),
        ),
        (
            "client.rack of the follower (classic)",
            config(
                &bootstrap,
                &unique_name("rack-classic"),
                &settings(Some(&rack)),
            ),
        ),
        (
            "client.rack of the follower (KIP-848)",
            consumer_protocol_config(&bootstrap, &unique_name("rack-848"), &{
                let mut s = settings(Some(&rack));
                s.retain(|(k, _)| !matches!(*k, "session.timeout.ms" | "heartbeat.interval.ms"));
                s
            }),
        ),
    ];
    let all = everything(COUNT);
    let mut results = Vec::new();
    for (name, config) in readers {
        let classic_rack = (name.contains("classic") && config.client_rack().is_some())
            .then(|| config.group_id().to_string());
        let reader = Reader::start(config, &topic);
        wait_until(&format!("{name}: every record read"), WAIT, || {
            reader.keys().len() == COUNT
        });
        assert_eq!(reader.keys(), all, "{name}");
        if let Some(group) = classic_rack {
            // The classic member's JoinGroup subscription (v3) carries the rack too.
            assert_eq!(subscribed_racks(&cluster, &group), vec![Some(rack.clone())]);
        }
        let (stats, repeats) = reader.finish(name);
        eprintln!("{name}: {}; repeats {repeats}", describe(&stats.fetch));
        assert_eq!(repeats, 0, "{name}: records processed twice");
        results.push((name, stats.fetch));
    }
    let (name, none) = &results[0];
    assert!(
        none.total_bytes() >= (COUNT * 200) as u64,
        "{name}: {none:?}"
    );
    assert_eq!(
        none.bytes_from(leader),
        none.total_bytes(),
        "{name}: {none:?}"
    );
    assert_eq!(none.from_replicas, 0, "{name}");
    for (name, fetch) in &results[1..] {
        assert!(
            fetch.total_bytes() >= (COUNT * 200) as u64,
            "{name}: {fetch:?}"
        );
        assert!(
            fetch.bytes_from(follower) * 10 >= fetch.total_bytes() * 9,
            "{name}: less than 90% of the bytes from the follower in its rack: {}",
            describe(fetch)
        );
        assert_eq!(fetch.from_replicas, 1, "{name}: {}", describe(fetch));
        assert_eq!(fetch.fallbacks, 0, "{name}: {}", describe(fetch));
    }
}

/// The `rack_id` of every member's subscription in classic `group`, as its coordinator keeps it
/// (DescribeGroups: the metadata the member sent in JoinGroup).
fn subscribed_racks(cluster: &KafkaCluster, group: &str) -> Vec<Option<String>> {
    let mut client =
        Client::connect(ClientConfig::from_bootstrap_str(cluster.bootstrap())).expect("client");
    let node = client.find_coordinator(group).expect("coordinator").node_id;
    let conn = client.connection(node).expect("connection");
    let version = conn.version_for(ApiKey::DescribeGroups).expect("version");
    let request = DescribeGroupsRequest::default()
        .with_groups(vec![GroupId(StrBytes::from_string(group.to_string()))]);
    let answer = conn.send(&request, version).expect("DescribeGroups");
    answer.groups[0]
        .members
        .iter()
        .map(|m| {
            let mut metadata = m.member_metadata.clone();
            let version = metadata.get_i16();
            ConsumerProtocolSubscription::decode(&mut metadata, version)
                .expect("a consumer subscription")
                .rack_id
                .map(|r| r.to_string())
        })
        .collect()
}

/// How the read replica fails.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// kill -9: its connections reset, the fetch fails at once.
    Kill,
    /// SIGSTOP: its connections stay open and nothing is answered; the fetch is overdue.
    Pause,
}

/// A consumer reading a live-produced partition from the follower F in its rack; F fails while it
/// serves: the consumer must go back to the leader L and read on from there, every record once
/// (none lost, none repeated), no partition lost by the group, and the bytes after the fault from
/// L. F is neither the leader nor the group's coordinator, so that the fault fails only the read
/// replica.
fn the_leader_takes_over_from_a_failed_read_replica(fault: Fault) {
    let _ = env_logger::builder().is_test(true).try_init();
    let cluster = KafkaCluster::start_with_racks(3, &[]);
    let bootstrap = cluster.bootstrap().to_string();
    let topic = unique_name("rack-fail");
    cluster.create_topic(&topic, 1);
    let group = unique_name("rack-fail");
    let leader = cluster.leaders(&topic)[&0];
    let coordinator = cluster.coordinator_of(&group);
    let follower: NodeId = (1..=3)
        .find(|&n| n != leader && n != coordinator)
        .expect("a node that neither leads nor coordinates");
    let rack = KafkaCluster::rack_of(follower);
    eprintln!(
        "partition 0: leader node {leader}, coordinator node {coordinator}; read replica: \
         node {follower} ({rack}), to fail by {fault:?}"
    );
    const COUNT: usize = 3000;
    let producer = produce_live(&bootstrap, &topic, COUNT, 150, 80);
    let reader = Reader::start(config(&bootstrap, &group, &settings(Some(&rack))), &topic);
    wait_until("reading from the follower", WAIT, || {
        let f = reader.fetch();
        f.from_replicas == 1 && f.bytes_from(follower) > 20_000
    });
    let before = reader.fetch();
    let read_before = reader.keys().len();
    eprintln!(
        "before the fault ({read_before} records read): {}",
        describe(&before)
    );
    assert!(
        read_before < COUNT,
        "the fault must come while records are produced"
    );
    let failed_at = Instant::now();
    match fault {
        Fault::Kill => cluster.kill(follower),
        Fault::Pause => cluster.pause(follower),
    }
    wait_until("back on the leader", WAIT, || reader.fetch().fallbacks >= 1);
    let fell_back_after = failed_at.elapsed();
    wait_until("reading from the leader again", WAIT, || {
        reader.fetch().bytes_from(leader) > before.bytes_from(leader)
    });
    let read_after = failed_at.elapsed();
    let produced = producer.join().expect("producer");
    assert!(
        produced.contains(&format!("produced {COUNT}")),
        "{produced}"
    );
    let all = everything(COUNT);
    wait_until("every record read", WAIT, || {
        reader.keys().is_superset(&all)
    });
    let (stats, repeats) = reader.finish("reader");
    if matches!(fault, Fault::Pause) {
        cluster.resume(follower);
    }
    eprintln!(
        "after the fault: {}; back on the leader {fell_back_after:?} after the fault, first \
         bytes from it {read_after:?} after; partitions lost {}, repeats {repeats}",
        describe(&stats.fetch),
        stats.counters.lost
    );
    assert!(stats.fetch.fallbacks >= 1, "{}", describe(&stats.fetch));
    assert_eq!(stats.fetch.from_replicas, 0, "{}", describe(&stats.fetch));
    assert_eq!(stats.counters.lost, 0, "no partition lost by the group");
    assert_eq!(repeats, 0, "records processed twice");
}

#[test]
fn a_killed_read_replica_sends_fetching_back_to_the_leader() {
    the_leader_takes_over_from_a_failed_read_replica(Fault::Kill);
}

#[test]
fn a_hung_read_replica_sends_fetching_back_to_the_leader() {
    the_leader_takes_over_from_a_failed_read_replica(Fault::Pause);
}
