//! Exactly once across broker failures on a three-node Kafka 4.4 cluster (issue 35): two
//! transactional workers (`Consumer::run_transactional`, and `run_transactional_with_workers`
//! with two threads; classic protocol, one group) turn a live stream of inputs `in:<i>` into
//! outputs `fill:in:<i>`, while, one after the other, the nodes that matter to them are killed
//! (kill -9) and started again: the transaction coordinator of the first worker's
//! `transactional.id`, the group coordinator, and the leader of an output partition.
//!
//! After each kill the test waits until both workers commit transactions again (their
//! `ConsumerStats::transactions_committed` moves: the open transaction of the moment was
//! committed on the new coordinator or aborted and done again) and prints how long that took.
//! At the end, with the inputs stopped, a `read_committed` reader of the output sees each input's
//! output exactly once: nothing twice (an aborted transaction's outputs are never visible, a
//! commit is never applied twice), nothing lost (an aborted transaction's inputs are read again
//! from the committed offsets).
//!
//! One cluster for the three faults (a cluster start is 15-25 s of three JVMs on two cores, and
//! the tier must stay short). Settings, and why:
//!
//! - `broker.session.timeout.ms=6000`, `broker.heartbeat.interval.ms=1000`: a killed node is
//!   fenced, and its partitions and coordinators move, 6 s after its last heartbeat (Kafka: 9 s).
//! - the workers' `session.timeout.ms` and `transaction.timeout.ms` 20 s: above the failover
//!   (6 s and the new coordinator's load), so a failover alone need not cost a member its
//!   partitions; a transaction that does time out is aborted and its inputs done again, which the
//!   exactly-once check covers as well.

use crate::support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use rebalance_guard::stats::StatsHandle;
use rebalance_guard::wire::{Client, ClientConfig, IsolationLevel, Record};
use rebalance_guard::{
    Consumer, Producer, ProducerConfig, ProducerRecord, TopicPartition, TransactionContext,
};
use support::cluster::{KafkaCluster, NodeId};
use support::consumer::config;
use support::fetch::read_topic_as;
use support::unique_name;

const PARTITIONS: u32 = 4;
/// Inputs per second, fed while the faults happen.
const RATE: u64 = 100;
/// Session and transaction timeout of the workers (see the module documentation).
const SESSION_MS: &str = "20000";
/// Bound on transactions flowing again after a kill, and on each wait for the cluster.
const RECOVERY: Duration = Duration::from_secs(90);
/// Bound on every output being visible once the inputs stopped.
const ALL_VISIBLE: Duration = Duration::from_secs(120);

/// A producer writing `in:<i>` keyed `k<i>` to `topic` at [`RATE`] per second until `stop`;
/// returns how many it wrote (every one acknowledged).
fn feed(bootstrap: &str, topic: &str, stop: Arc<AtomicBool>) -> thread::JoinHandle<usize> {
    let config = ProducerConfig::builder()
        .bootstrap_servers([bootstrap])
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("request.timeout.ms", "5000")
        .set("delivery.timeout.ms", "120000")
        .build()
        .expect("feeder config");
    let topic = topic.to_string();
    thread::spawn(move || {
        let producer = Producer::new(config).expect("feeder");
        let started = Instant::now();
        let mut handles = Vec::new();
        let mut i = 0u64;
        while !stop.load(Ordering::SeqCst) {
            let due = started + Duration::from_millis(i * 1000 / RATE);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                thread::sleep(wait);
            }
            let record = ProducerRecord::new(&topic, format!("in:{i}")).key(format!("k{i}"));
            handles.push(producer.send(record).expect("send input"));
            i += 1;
        }
        producer.flush().expect("flush inputs");
        for h in handles {
            h.wait().expect("an input was not written");
        }
        producer.close().expect("close feeder");
        i as usize
    })
}

/// A transactional worker thread of `group`: `threads` 0 is `run_transactional`, else
/// `run_transactional_with_workers` with that many threads.
struct Worker {
    stats: StatsHandle,
    thread: thread::JoinHandle<Result<(), String>>,
}

/// Where the workers read and write.
struct Topics {
    bootstrap: String,
    group: String,
    input: String,
    output: String,
}

fn worker(
    topics: &Topics,
    txn_id: &str,
    threads: usize,
    stop: Arc<AtomicBool>,
    handled: Arc<AtomicUsize>,
) -> Worker {
    let Topics {
        bootstrap,
        group,
        input,
        output,
    } = topics;
    let cfg = config(
        bootstrap,
        group,
        &[
            ("transaction.interval.ms", "200"),
            ("session.timeout.ms", SESSION_MS),
            ("heartbeat.interval.ms", "1000"),
            ("max.poll.records", "50"),
        ],
    );
    let producer = Producer::new(
        ProducerConfig::builder()
            .bootstrap_servers([bootstrap.as_str()])
            .set("transactional.id", txn_id)
            .set("transaction.timeout.ms", SESSION_MS)
            .set("request.timeout.ms", "5000")
            .set("delivery.timeout.ms", "60000")
            .set("max.block.ms", "60000")
            .build()
            .expect("producer config"),
    )
    .expect("producer");
    let consumer = Consumer::subscribe(cfg, &[input.as_str()]).expect("subscribe");
    let stats = consumer.stats_handle();
    let output = output.to_string();
    let thread = thread::spawn(move || {
        let mut consumer = consumer
            .with_transactions(producer)
            .map_err(|e| e.to_string())?;
        let transform = move |record: &Record, tx: &mut TransactionContext<'_>| {
            // About 5 ms per input: a transaction (every 200 ms) is open most of the time.
            thread::sleep(Duration::from_millis(5));
            let mut fill = b"fill:".to_vec();
            fill.extend_from_slice(record.value.as_deref().unwrap_or_default());
            tx.send(
                ProducerRecord::new(output.as_str(), fill)
                    .key(record.key.clone().unwrap_or_default()),
            );
            handled.fetch_add(1, Ordering::SeqCst);
            Ok::<(), std::io::Error>(())
        };
        let run = if threads == 0 {
            consumer.run_transactional(&stop, transform)
        } else {
            consumer.run_transactional_with_workers(&stop, threads, 256, transform)
        };
        let closed = consumer.close();
        run.map_err(|e| format!("run: {e}"))?;
        closed.map_err(|e| format!("close: {e}"))
    });
    Worker { stats, thread }
}

impl Worker {
    fn committed(&self) -> u64 {
        self.stats.snapshot().transactions_committed
    }
}

/// Waits until every worker committed `more` transactions beyond what it had committed at the
/// call; returns how long that took.
fn wait_commits(what: &str, workers: &[&Worker], more: u64) -> Duration {
    let start = Instant::now();
    let from: Vec<u64> = workers.iter().map(|w| w.committed()).collect();
    loop {
        let now: Vec<u64> = workers.iter().map(|w| w.committed()).collect();
        if now.iter().zip(&from).all(|(n, f)| *n >= f + more) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < RECOVERY,
            "{what}: transactions committed {from:?} -> {now:?} in {RECOVERY:?}; a worker ended? \
             {:?}",
            workers
                .iter()
                .map(|w| w.thread.is_finished())
                .collect::<Vec<_>>()
        );
        thread::sleep(Duration::from_millis(100));
    }
}

/// The node coordinating `txn_id`'s transactions (FindCoordinator, key type transaction).
fn transaction_coordinator(cluster: &KafkaCluster, txn_id: &str) -> NodeId {
    let mut client =
        Client::connect(ClientConfig::from_bootstrap_str(cluster.bootstrap())).expect("connect");
    client
        .find_transaction_coordinator(txn_id)
        .unwrap_or_else(|e| panic!("FindCoordinator for transactional id {txn_id}: {e}"))
        .node_id
}

fn values(records: &BTreeMap<i32, Vec<Record>>) -> Vec<String> {
    records
        .values()
        .flatten()
        .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
        .collect()
}

/// Kills `node`, waits for both workers to commit again, starts it again.
fn kill_and_recover(cluster: &KafkaCluster, node: NodeId, what: &str, workers: &[&Worker]) {
    let at = Instant::now();
    cluster.kill(node);
    let recovered = wait_commits(&format!("after killing {what} (node {node})"), workers, 3);
    eprintln!("{what} (node {node}) killed: both workers committed again {recovered:?} later");
    cluster.restart(node);
    eprintln!("node {node} back {:?} after its kill", at.elapsed());
}

#[test]
fn exactly_once_survives_killed_coordinators_and_leader() {
    support::init_stamped_logs();
    let test_start = Instant::now();
    let cluster = KafkaCluster::start_with(
        3,
        &[
            ("broker.session.timeout.ms", "6000"),
            ("broker.heartbeat.interval.ms", "1000"),
        ],
    );
    let bootstrap = cluster.bootstrap().to_string();
    let (input, output) = (unique_name("txnc-in"), unique_name("txnc-out"));
    cluster.create_topic(&input, PARTITIONS);
    cluster.create_topic(&output, PARTITIONS);
    let group = unique_name("txnc-group");
    let (id_a, id_b) = (unique_name("txnc-a"), unique_name("txnc-b"));
    let topics = Topics {
        bootstrap: bootstrap.clone(),
        group: group.clone(),
        input: input.clone(),
        output: output.clone(),
    };

    let feeder_stop = Arc::new(AtomicBool::new(false));
    let feeder = feed(&bootstrap, &input, feeder_stop.clone());
    let stop = Arc::new(AtomicBool::new(false));
    let handled = Arc::new(AtomicUsize::new(0));
    let a = worker(&topics, &id_a, 0, stop.clone(), handled.clone());
    let b = worker(&topics, &id_b, 2, stop.clone(), handled.clone());
    let started = wait_commits("the first transactions", &[&a, &b], 3);
    eprintln!("both workers committing {started:?} after their start");

    let txn_coordinator = transaction_coordinator(&cluster, &id_a);
    kill_and_recover(
        &cluster,
        txn_coordinator,
        "a's transaction coordinator",
        &[&a, &b],
    );

    let group_coordinator = cluster.coordinator_of(&group);
    kill_and_recover(
        &cluster,
        group_coordinator,
        "the group coordinator",
        &[&a, &b],
    );

    let out0 = TopicPartition::new(output.as_str(), 0);
    let leader = cluster.leader_of(&out0);
    let at = Instant::now();
    cluster.kill(leader);
    let recovered = wait_commits(
        &format!("after killing the leader of {out0} (node {leader})"),
        &[&a, &b],
        3,
    );
    eprintln!("the leader of {out0} (node {leader}) killed: committing again {recovered:?} later");

    feeder_stop.store(true, Ordering::SeqCst);
    let count = feeder.join().expect("feeder thread");
    eprintln!(
        "{count} inputs fed over {:?}; {} handler runs so far",
        at.elapsed(),
        handled.load(Ordering::SeqCst)
    );
    let deadline = Instant::now() + ALL_VISIBLE;
    let seen = loop {
        let seen = values(&read_topic_as(
            &bootstrap,
            &output,
            Duration::from_secs(60),
            IsolationLevel::ReadCommitted,
        ));
        let mut distinct: Vec<&String> = seen.iter().collect();
        distinct.sort();
        distinct.dedup();
        if distinct.len() >= count || Instant::now() >= deadline {
            break seen;
        }
        thread::sleep(Duration::from_millis(500));
    };
    for (name, w) in [("a", &a), ("b", &b)] {
        let stats = w.stats.snapshot();
        eprintln!(
            "worker {name}: {} transactions committed, {} aborted",
            stats.transactions_committed, stats.transactions_aborted
        );
    }
    stop.store(true, Ordering::SeqCst);
    a.thread.join().expect("worker a").expect("worker a");
    b.thread.join().expect("worker b").expect("worker b");
    // Read again after both closed: a commit at the close is in the view too.
    let seen_after = values(&read_topic_as(
        &bootstrap,
        &output,
        Duration::from_secs(60),
        IsolationLevel::ReadCommitted,
    ));
    eprintln!(
        "{} outputs visible when the workers were stopped, {} after their close",
        seen.len(),
        seen_after.len()
    );
    let mut per: BTreeMap<&str, usize> = BTreeMap::new();
    for v in &seen_after {
        *per.entry(v.as_str()).or_default() += 1;
    }
    let twice: Vec<_> = per.iter().filter(|(_, n)| **n > 1).collect();
    let missing: Vec<usize> = (0..count)
        .filter(|i| !per.contains_key(format!("fill:in:{i}").as_str()))
        .collect();
    assert!(
        twice.is_empty() && missing.is_empty() && seen_after.len() == count,
        "read_committed view: {} records for {count} inputs; seen more than once: {twice:?}; \
         missing: {missing:?}",
        seen_after.len()
    );
    eprintln!(
        "each of {count} outputs once; the test took {:?} (the cluster's start {:?})",
        test_start.elapsed(),
        cluster.startup_time()
    );
}
