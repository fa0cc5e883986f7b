//! Transactions on Kafka 4.4 (transaction version 2: partitions join with their first Produce,
//! every EndTxn bumps the epoch) and 3.9 (version 1: AddPartitionsToTxn, AddOffsetsToTxn): what
//! a `read_committed` reader sees of committed and aborted transactions, fencing by a newer
//! producer with the same `transactional.id`, and `Consumer::run_transactional` from an input
//! topic to an output topic, each input's output once, alone and across a rebalance.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use rebalance_guard::wire::{IsolationLevel, Record};
use rebalance_guard::{
    Consumer, ErrorKind, ProduceError, Producer, ProducerRecord, TransactionContext,
};

use super::producer;
use crate::support::consumer::{config, consumer_protocol_config, wait_until};
use crate::support::fetch::read_topic_as;
use crate::support::{unique_name, BrokerKind};

fn values(records: &BTreeMap<i32, Vec<Record>>) -> Vec<String> {
    records
        .values()
        .flatten()
        .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
        .collect()
}

fn committed_view(bootstrap: &str, topic: &str) -> Vec<String> {
    values(&read_topic_as(
        bootstrap,
        topic,
        Duration::from_secs(60),
        IsolationLevel::ReadCommitted,
    ))
}

fn uncommitted_view(bootstrap: &str, topic: &str) -> Vec<String> {
    values(&read_topic_as(
        bootstrap,
        topic,
        Duration::from_secs(60),
        IsolationLevel::ReadUncommitted,
    ))
}

fn transactional(bootstrap: &str, id: &str) -> Producer {
    producer(
        bootstrap,
        &[
            ("transactional.id", id),
            ("transaction.timeout.ms", "6000"),
            ("linger.ms", "2"),
        ],
    )
}

/// Committed, aborted, committed: a `read_committed` reader sees the two committed
/// transactions' records once each, in order per partition, and nothing of the aborted one,
/// which a `read_uncommitted` reader does see.
fn committed_and_aborted(kind: BrokerKind) {
    let broker = kind.start();
    let topic = unique_name("txn-visible");
    broker.create_topic(&topic, 3);
    let bootstrap = broker.bootstrap();
    let bootstrap = bootstrap.as_str();
    let p = transactional(bootstrap, &unique_name("txn-id"));
    p.init_transactions().expect("init_transactions");
    for (round, commit) in [("c1", true), ("a", false), ("c2", true)] {
        p.begin_transaction().expect("begin");
        let handles: Vec<_> = (0..120)
            .map(|i| {
                p.send(
                    ProducerRecord::new(&topic, format!("{round}:{i}")).key(format!("k{}", i % 7)),
                )
                .expect("send")
            })
            .collect();
        if commit {
            p.commit_transaction().expect("commit");
            for h in handles {
                h.wait()
                    .expect("a committed transaction's record was written");
            }
        } else {
            p.abort_transaction().expect("abort");
        }
    }
    p.close().expect("close");
    let seen = committed_view(bootstrap, &topic);
    assert_eq!(seen.len(), 240, "read_committed: {seen:?}");
    assert!(
        seen.iter().all(|v| !v.starts_with("a:")),
        "aborted records visible: {seen:?}"
    );
    let unique: BTreeSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), 240, "a committed record twice");
    let all = uncommitted_view(bootstrap, &topic);
    let aborted = all.iter().filter(|v| v.starts_with("a:")).count();
    // The aborted transaction's batches that reached the leaders before the abort are in the
    // log (marked aborted); those still waiting were never sent.
    assert!(aborted <= 120, "{aborted} aborted records in the log");
}

/// A second producer with the same `transactional.id` fences the first: the first's commit is
/// refused as fenced (fatal), nothing of its transaction is visible, and the second commits.
fn a_newer_producer_fences_the_older(kind: BrokerKind) {
    let broker = kind.start();
    let topic = unique_name("txn-fence");
    broker.create_topic(&topic, 1);
    let bootstrap = broker.bootstrap();
    let bootstrap = bootstrap.as_str();
    let id = unique_name("txn-fenced");
    let old = transactional(bootstrap, &id);
    old.init_transactions().expect("init old");
    old.begin_transaction().expect("begin old");
    old.send(ProducerRecord::new(&topic, "zombie"))
        .expect("send");
    old.flush().expect("flush");
    let new = transactional(bootstrap, &id);
    new.init_transactions()
        .expect("init new (aborts the old one's open transaction)");
    let refused = old
        .commit_transaction()
        .expect_err("the fenced producer committed");
    assert!(
        matches!(refused, ProduceError::Fenced { .. })
            || refused.kind() == ErrorKind::GenerationOver,
        "expected fenced, got {refused:?}"
    );
    new.begin_transaction().expect("begin new");
    new.send(ProducerRecord::new(&topic, "owner"))
        .expect("send");
    new.commit_transaction().expect("commit new");
    new.close().expect("close");
    drop(old);
    assert_eq!(committed_view(bootstrap, &topic), vec!["owner".to_string()]);
}

/// Fills `topic` with `count` keyed records "in:<i>" (plain, idempotent producer).
fn fill(bootstrap: &str, topic: &str, count: usize) {
    let p = producer(bootstrap, &[]);
    for i in 0..count {
        p.send(ProducerRecord::new(topic, format!("in:{i}")).key(format!("k{i}")))
            .expect("send input");
    }
    p.close().expect("inputs written");
}

/// How a test's transactional worker runs.
#[derive(Clone, Copy)]
struct Mode {
    /// `group.protocol=consumer` (KIP-848) rather than classic.
    kip848: bool,
    /// `run_transactional_with_workers` with this many threads rather than `run_transactional`.
    workers: Option<usize>,
    /// Time each record's handler takes, so that transactions stay open across a rebalance.
    per_record: Duration,
}

const ALONE: Mode = Mode {
    kip848: false,
    workers: None,
    per_record: Duration::ZERO,
};

/// A transactional worker of `group` that writes "out:<i>" to `output` for each input until
/// `stop`; counts what its handler finished in `done`.
fn worker(
    bootstrap: &str,
    group: &str,
    topics: (&str, &str),
    mode: Mode,
    stop: Arc<AtomicBool>,
    done: Arc<AtomicUsize>,
) -> thread::JoinHandle<Result<(), String>> {
    let mut settings = vec![
        ("transaction.interval.ms", "50"),
        ("max.poll.records", "20"),
    ];
    let cfg = if mode.kip848 {
        consumer_protocol_config(bootstrap, group, &settings)
    } else {
        settings.push(("partition.assignment.strategy", "cooperative-sticky"));
        config(bootstrap, group, &settings)
    };
    let producer = transactional(bootstrap, &unique_name("txn-worker"));
    let (input, output) = (topics.0.to_string(), topics.1.to_string());
    thread::spawn(move || {
        let consumer = Consumer::subscribe(cfg, &[&input]).map_err(|e| e.to_string())?;
        let mut consumer = consumer
            .with_transactions(producer)
            .map_err(|e| e.to_string())?;
        let handle = move |record: &Record, tx: &mut TransactionContext<'_>| {
            thread::sleep(mode.per_record);
            let value = String::from_utf8_lossy(record.value.as_deref().unwrap_or_default());
            let out = value.replacen("in:", "out:", 1);
            tx.send(ProducerRecord::new(&output, out).key(record.key.clone().unwrap_or_default()));
            done.fetch_add(1, Ordering::SeqCst);
            Ok::<(), std::io::Error>(())
        };
        let run = match mode.workers {
            Some(n) => consumer.run_transactional_with_workers(&stop, n, 16, handle),
            None => consumer.run_transactional(&stop, handle),
        };
        let stats = consumer.stats();
        let closed = consumer.close();
        log::info!(
            "worker: {} transactions committed, {} aborted",
            stats.transactions_committed,
            stats.transactions_aborted
        );
        run.map_err(|e| e.to_string())?;
        closed.map_err(|e| e.to_string())
    })
}

/// Each input's output once in the `read_committed` view of `output`.
///
/// The view is read again (for at most 30 s) until every output is in it: a committed
/// transaction's markers are written by its coordinator after EndTxn is answered (in Java
/// too), so the last stable offset can trail a `commit_transaction` that returned, and a view
/// read at once may end before the last transaction. Duplicates are checked on the final view.
fn assert_each_output_once(bootstrap: &str, output: &str, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let seen = loop {
        let seen = committed_view(bootstrap, output);
        let visible: BTreeSet<&String> = seen.iter().collect();
        if visible.len() >= count || Instant::now() >= deadline {
            break seen;
        }
        thread::sleep(Duration::from_millis(100));
    };
    let mut per: BTreeMap<String, usize> = BTreeMap::new();
    for v in &seen {
        *per.entry(v.clone()).or_default() += 1;
    }
    let duplicates: Vec<_> = per.iter().filter(|(_, n)| **n > 1).collect();
    assert!(duplicates.is_empty(), "outputs seen twice: {duplicates:?}");
    let missing: Vec<usize> = (0..count)
        .filter(|i| !per.contains_key(&format!("out:{i}")))
        .collect();
    assert!(
        missing.is_empty(),
        "{} inputs without output: {missing:?}",
        missing.len()
    );
    assert_eq!(seen.len(), count);
}

/// One transactional worker consumes every input: each output once, and the group's committed
/// offsets are the ends of the input partitions.
fn run_transactional_alone(kind: BrokerKind) {
    let broker = kind.start();
    let (input, output) = (unique_name("txn-in"), unique_name("txn-out"));
    broker.create_topic(&input, 3);
    broker.create_topic(&output, 3);
    let bootstrap = broker.bootstrap();
    let bootstrap = bootstrap.as_str();
    let count = 600;
    fill(bootstrap, &input, count);
    let (stop, done) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicUsize::new(0)),
    );
    let group = unique_name("txn-group");
    let topics = (input.as_str(), output.as_str());
    let w = worker(bootstrap, &group, topics, ALONE, stop.clone(), done.clone());
    wait_until("every input handled", Duration::from_secs(60), || {
        done.load(Ordering::SeqCst) >= count
    });
    stop.store(true, Ordering::SeqCst);
    w.join().expect("worker thread").expect("worker");
    assert_each_output_once(bootstrap, &output, count);
}

/// Two transactional workers, the second joining while the first has a transaction open (a
/// cooperative revocation, or KIP-848's, hands partitions over mid-transaction): each output
/// once, and both workers did part of the work.
fn across_a_rebalance(kind: BrokerKind, mode: Mode) {
    let broker = kind.start();
    let (input, output) = (unique_name("txn-in"), unique_name("txn-out"));
    broker.create_topic(&input, 4);
    broker.create_topic(&output, 2);
    let bootstrap = broker.bootstrap();
    let bootstrap = bootstrap.as_str();
    let count = 1200;
    fill(bootstrap, &input, count);
    let group = unique_name("txn-group");
    let stop = Arc::new(AtomicBool::new(false));
    let (first_done, second_done) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let topics = (input.as_str(), output.as_str());
    let first = worker(
        bootstrap,
        &group,
        topics,
        mode,
        stop.clone(),
        first_done.clone(),
    );
    wait_until("the first worker started", Duration::from_secs(60), || {
        first_done.load(Ordering::SeqCst) >= 50
    });
    let second = worker(
        bootstrap,
        &group,
        topics,
        mode,
        stop.clone(),
        second_done.clone(),
    );
    // Done counts handler runs, which an aborted transaction repeats: wait for the outputs.
    wait_until(
        "every input's output committed",
        Duration::from_secs(120),
        || committed_view(bootstrap, &output).len() >= count,
    );
    stop.store(true, Ordering::SeqCst);
    first.join().expect("first").expect("first worker");
    second.join().expect("second").expect("second worker");
    assert!(
        second_done.load(Ordering::SeqCst) > 0,
        "the second worker never got a partition: no handoff happened"
    );
    assert_each_output_once(bootstrap, &output, count);
}

fn run_across_a_cooperative_rebalance(kind: BrokerKind) {
    let mode = Mode {
        per_record: Duration::from_millis(3),
        ..ALONE
    };
    across_a_rebalance(kind, mode);
}

fn workers_across_a_cooperative_rebalance(kind: BrokerKind) {
    let mode = Mode {
        workers: Some(3),
        per_record: Duration::from_millis(6),
        ..ALONE
    };
    across_a_rebalance(kind, mode);
}

fn run_across_a_kip848_rebalance(kind: BrokerKind) {
    let mode = Mode {
        kip848: true,
        per_record: Duration::from_millis(3),
        ..ALONE
    };
    across_a_rebalance(kind, mode);
}

fn workers_across_a_kip848_rebalance(kind: BrokerKind) {
    let mode = Mode {
        kip848: true,
        workers: Some(3),
        per_record: Duration::from_millis(6),
    };
    across_a_rebalance(kind, mode);
}

crate::on_brokers! {
    kafka {
        committed_and_aborted,
        a_newer_producer_fences_the_older,
        run_transactional_alone,
        run_across_a_cooperative_rebalance,
        workers_across_a_cooperative_rebalance,
        run_across_a_kip848_rebalance,
        workers_across_a_kip848_rebalance,
    }
    kafka3 {
        committed_and_aborted,
        a_newer_producer_fences_the_older,
        run_transactional_alone,
        run_across_a_cooperative_rebalance,
        workers_across_a_cooperative_rebalance,
    }
}
