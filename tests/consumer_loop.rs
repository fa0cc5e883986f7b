//! The consumer end to end against real brokers: what it commits, what it refuses to process
//! after a loss, how it sizes batches against max.poll.interval.ms, and handoffs between members.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use rebalance_guard::consumer::{Consumer, ConsumerConfig, ConsumerError};
use rebalance_guard::guard::OwnerStatus;
use rebalance_guard::TopicPartition;
use support::consumer::{committed, config, produce_to_each_partition, wait_until};
use support::{peer_produce, unique_name, BrokerKind, MockCluster, MockOptions};

const WAIT: Duration = Duration::from_secs(60);

/// A processed record: who processed it, where, and whether its lease was still current when
/// the handler finished.
#[derive(Clone, Debug)]
struct Processed {
    member: String,
    partition: i32,
    offset: i64,
    current_after: bool,
}

type Log = Arc<Mutex<Vec<Processed>>>;

/// Runs a consumer on its own thread with the Batch API, logging every processed record, until
/// `stop` is set. `slow(partition, offset)` gives the handler's processing time per record.
fn spawn_member(
    name: &str,
    config: ConsumerConfig,
    topic: &str,
    log: Log,
    stop: Arc<AtomicBool>,
    slow: impl Fn(i32, i64) -> Duration + Send + 'static,
) -> JoinHandle<Consumer> {
    let _ = env_logger::builder().is_test(true).try_init();
    let name = name.to_string();
    let topic = topic.to_string();
    thread::spawn(move || {
        let mut consumer = Consumer::subscribe(config, &[&topic]).expect("subscribe");
        while !stop.load(Ordering::SeqCst) {
            {
                let mut batch = consumer.poll(Duration::from_millis(100)).expect("poll");
                while let Some(delivery) = batch.next() {
                    let (p, o) = (delivery.record.partition, delivery.record.offset);
                    let pause = slow(p, o);
                    if !pause.is_zero() {
                        thread::sleep(pause);
                    }
                    let current_after = batch.is_current(&delivery);
                    log.lock().unwrap().push(Processed {
                        member: name.clone(),
                        partition: p,
                        offset: o,
                        current_after,
                    });
                    batch.complete(delivery);
                }
            }
            match consumer.commit() {
                Ok(_) | Err(ConsumerError::Commit(_)) => {}
                Err(e) => panic!("{name}: {e}"),
            }
        }
        consumer
    })
}

/// After processing offsets 0..=9 of a partition, the committed offset is 10 (last + 1), on both
/// brokers, and it stays 10 after a clean close.
#[test]
fn commit_after_a_batch_is_last_plus_one_on_both_brokers() {
    for kind in BrokerKind::ALL {
        let broker = kind.start();
        let topic = unique_name("orders");
        broker.create_topic(&topic, 1);
        peer_produce(&broker.bootstrap(), &topic, 10, &["--partition", "0"]);
        let group = unique_name("group");
        let log: Log = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let member = spawn_member(
            "a",
            config(&broker.bootstrap(), &group, &[]),
            &topic,
            log.clone(),
            stop.clone(),
            |_, _| Duration::ZERO,
        );
        wait_until("10 records processed", WAIT, || {
            log.lock().unwrap().len() == 10
        });
        wait_until("commit of 10", WAIT, || {
            committed(&broker.bootstrap(), &group, &topic, 1)[&0] == Some(10)
        });
        stop.store(true, Ordering::SeqCst);
        member.join().unwrap().close().unwrap();
        assert_eq!(
            committed(&broker.bootstrap(), &group, &topic, 1)[&0],
            Some(10),
            "{kind:?}"
        );
        let offsets: Vec<i64> = log.lock().unwrap().iter().map(|p| p.offset).collect();
        assert_eq!(offsets, (0..10).collect::<Vec<_>>(), "{kind:?}");
    }
}

/// Seed 001's scenario (mock): a handler slower than max.poll.interval.ms gets the member evicted
/// mid-batch. The slow record's lease is stale when it finishes, and not one further record of
/// the lost partitions is processed by the evicted member, although its batch held more; the
/// other member takes over and every record is processed.
#[test]
fn a_handler_slower_than_max_poll_interval_processes_nothing_after_the_loss_mock() {
    let topic = unique_name("orders");
    let mock = MockCluster::start(MockOptions {
        topics: vec![(topic.clone(), 2)],
        ..MockOptions::default()
    });
    produce_to_each_partition(mock.bootstrap(), &topic, 2, 100);
    let group = unique_name("group");
    let settings = [
        ("session.timeout.ms", "6000"),
        ("max.poll.interval.ms", "6000"),
        ("max.poll.records", "50"),
    ];
    let log: Log = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    // `a` hangs 8 s on the first offset 10 it meets: longer than max.poll.interval.ms.
    let slowed = AtomicBool::new(false);
    let a = spawn_member(
        "a",
        config(mock.bootstrap(), &group, &settings),
        &topic,
        log.clone(),
        stop.clone(),
        move |_, offset| {
            if offset == 10 && !slowed.swap(true, Ordering::SeqCst) {
                Duration::from_secs(8)
            } else {
                Duration::from_millis(5)
            }
        },
    );
    let b = spawn_member(
        "b",
        config(mock.bootstrap(), &group, &settings),
        &topic,
        log.clone(),
        stop.clone(),
        |_, _| Duration::from_millis(5),
    );
    wait_until("every record processed", WAIT, || {
        let done: BTreeSet<(i32, i64)> = log
            .lock()
            .unwrap()
            .iter()
            .map(|p| (p.partition, p.offset))
            .collect();
        done.len() == 200
    });
    stop.store(true, Ordering::SeqCst);
    let (a, b) = (a.join().unwrap(), b.join().unwrap());
    let log = log.lock().unwrap().clone();
    let slow: Vec<_> = log
        .iter()
        .filter(|p| p.member == "a" && p.offset == 10)
        .collect();
    assert!(!slow.is_empty(), "a never hit its slow record: {log:?}");
    assert!(
        !slow[0].current_after,
        "the 8 s record should have finished after the loss"
    );
    // Not one record processed by `a` after the slow one until its rejoin: the next record `a`
    // processed (if any) must come from a later assignment, i.e. must not be the slow
    // partition's offset 11 handed out of the same batch.
    let first_slow = log
        .iter()
        .position(|p| p.member == "a" && p.offset == 10)
        .unwrap();
    let after: Vec<_> = log[first_slow + 1..]
        .iter()
        .filter(|p| p.member == "a")
        .collect();
    assert!(
        after.iter().all(|p| p.current_after),
        "a processed work under a stale lease after the loss: {after:?}"
    );
    // `a` lost its partition while records of it were still fetched and unprocessed: they were
    // never handed out (they are dropped at its next poll), and the slow record's completion was
    // refused as stale rather than counted as progress.
    let a_stats = a.stats();
    let slow_partition = a_stats
        .partitions
        .iter()
        .find(|p| p.guard.completed_after_revocation >= 1)
        .unwrap_or_else(|| panic!("the slow record's completion was not refused: {a_stats}"));
    assert!(
        a_stats.counters.lost >= 1 || slow_partition.guard.status == OwnerStatus::Lost,
        "a never lost its partition: {a_stats}"
    );
    assert!(
        slow_partition.buffered > 0 || a_stats.counters.dropped_records > 0,
        "the batch had more records: {a_stats}"
    );
    a.close().unwrap();
    b.close().unwrap();
}

/// A steady 50 ms/record handler with max.poll.interval.ms=2000 (mock) stays in the group for a
/// whole run: the batch sizer shrinks batches to fit, so the member is never evicted.
#[test]
fn batch_sizing_keeps_a_slow_handler_in_the_group_mock() {
    let topic = unique_name("orders");
    let mock = MockCluster::start(MockOptions {
        topics: vec![(topic.clone(), 1)],
        ..MockOptions::default()
    });
    peer_produce(mock.bootstrap(), &topic, 120, &["--partition", "0"]);
    let group = unique_name("group");
    let settings = [
        ("session.timeout.ms", "2000"),
        ("heartbeat.interval.ms", "500"),
        ("max.poll.interval.ms", "2000"),
    ];
    let log: Log = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let a = spawn_member(
        "a",
        config(mock.bootstrap(), &group, &settings),
        &topic,
        log.clone(),
        stop.clone(),
        |_, _| Duration::from_millis(50),
    );
    wait_until("120 records processed", WAIT, || {
        log.lock().unwrap().len() >= 120
    });
    stop.store(true, Ordering::SeqCst);
    let a = a.join().unwrap();
    let stats = a.stats();
    assert_eq!(stats.counters.lost, 0, "evicted: {stats}");
    assert_eq!(stats.rebalances, 1, "only the initial join: {stats}");
    assert!(stats.next_batch_size <= 20, "{stats}");
    let offsets: Vec<i64> = log.lock().unwrap().iter().map(|p| p.offset).collect();
    assert_eq!(offsets, (0..120).collect::<Vec<_>>());
    a.close().unwrap();
}

/// A graceful handoff produces zero duplicates: a second member joins mid-stream, the first
/// revokes and commits last + 1, and the second starts exactly there.
///
/// On tansu with eager `range`. On the librdkafka mock with `cooperative-sticky` only: the mock
/// refuses every offset commit while its group is rebalancing (REBALANCE_IN_PROGRESS), and an
/// eager member must commit its revoked partitions exactly then, before rejoining; real Kafka
/// accepts those commits from members of the current generation. Under cooperative rebalancing
/// the revocation commit happens in the new, stable generation, which the mock accepts.
fn graceful_handoff_has_no_duplicates(kind: BrokerKind, strategy: &str) {
    let settings = [("partition.assignment.strategy", strategy)];
    let broker = kind.start();
    let topic = unique_name("orders");
    broker.create_topic(&topic, 4);
    produce_to_each_partition(&broker.bootstrap(), &topic, 4, 150);
    let group = unique_name("group");
    let log: Log = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let a = spawn_member(
        "a",
        config(&broker.bootstrap(), &group, &settings),
        &topic,
        log.clone(),
        stop.clone(),
        |_, _| Duration::from_millis(10),
    );
    wait_until("a is under way", WAIT, || log.lock().unwrap().len() >= 50);
    let b = spawn_member(
        "b",
        config(&broker.bootstrap(), &group, &settings),
        &topic,
        log.clone(),
        stop.clone(),
        |_, _| Duration::from_millis(10),
    );
    wait_until("every record processed", WAIT, || {
        let done: BTreeSet<(i32, i64)> = log
            .lock()
            .unwrap()
            .iter()
            .map(|p| (p.partition, p.offset))
            .collect();
        done.len() == 600
    });
    // Let the last commits land, then close both (each close commits and leaves).
    stop.store(true, Ordering::SeqCst);
    let (a, b) = (a.join().unwrap(), b.join().unwrap());
    let (a_stats, b_stats) = (a.stats(), b.stats());
    a.close().unwrap();
    b.close().unwrap();
    let log = log.lock().unwrap().clone();
    let mut seen: BTreeMap<(i32, i64), Vec<String>> = BTreeMap::new();
    for p in &log {
        seen.entry((p.partition, p.offset))
            .or_default()
            .push(p.member.clone());
    }
    let duplicates: Vec<_> = seen.iter().filter(|(_, who)| who.len() > 1).collect();
    assert!(
        duplicates.is_empty(),
        "{kind:?}: duplicates {duplicates:?}\na: {a_stats}\nb: {b_stats}"
    );
    assert!(
        log.iter().any(|p| p.member == "b"),
        "{kind:?}: b never processed anything"
    );
}

#[test]
fn graceful_handoff_has_no_duplicates_tansu_range() {
    graceful_handoff_has_no_duplicates(BrokerKind::Tansu, "range");
}

#[test]
fn graceful_handoff_has_no_duplicates_mock_cooperative_sticky() {
    graceful_handoff_has_no_duplicates(BrokerKind::Mock, "cooperative-sticky");
}

/// A commit the coordinator refuses for a fenced generation (mock, ILLEGAL_GENERATION injected
/// through the mock's own error stack) is reported to the caller and not retried into success:
/// the broker's committed offset does not move, although a retry would have gone through.
#[test]
fn a_refused_commit_is_reported_not_retried_mock() {
    let topic = unique_name("orders");
    let mock = MockCluster::start(MockOptions {
        topics: vec![(topic.clone(), 1)],
        ..MockOptions::default()
    });
    peer_produce(mock.bootstrap(), &topic, 20, &["--partition", "0"]);
    let group = unique_name("group");
    let _ = env_logger::builder().is_test(true).try_init();
    let mut consumer =
        Consumer::subscribe(config(mock.bootstrap(), &group, &[]), &[&topic]).unwrap();
    let mut processed = 0;
    let deadline = Instant::now() + WAIT;
    while processed < 5 {
        assert!(Instant::now() < deadline, "no records");
        let mut batch = consumer.poll(Duration::from_millis(100)).unwrap();
        while processed < 5 {
            let Some(delivery) = batch.next() else { break };
            batch.complete(delivery);
            processed += 1;
        }
    }
    mock.must("push_errors OffsetCommit ILLEGAL_GENERATION");
    match consumer.commit() {
        Err(ConsumerError::Commit(failure)) => {
            let text = failure.to_string();
            assert!(
                text.contains("ILLEGAL_GENERATION") || text.contains("IllegalGeneration"),
                "{text}"
            );
        }
        other => panic!("expected a refused commit, got {other:?}"),
    }
    assert_eq!(
        committed(mock.bootstrap(), &group, &topic, 1)[&0],
        None,
        "the refused position must not reach the broker by a retry"
    );
    assert_eq!(consumer.stats().commits_refused, 1);
    consumer.close().unwrap();
}

/// Rebalances past the storm threshold call the storm hook with the detector's status (mock,
/// rebalances forced through the heartbeat error stack).
#[test]
fn a_rebalance_storm_calls_the_hook_mock() {
    let topic = unique_name("orders");
    let mock = MockCluster::start(MockOptions {
        topics: vec![(topic.clone(), 1)],
        ..MockOptions::default()
    });
    let settings = [
        ("rebalance.storm.threshold", "3"),
        ("rebalance.storm.window.ms", "60000"),
    ];
    let storms = Arc::new(Mutex::new(Vec::new()));
    let seen = storms.clone();
    let mut consumer = Consumer::subscribe(
        config(mock.bootstrap(), &unique_name("group"), &settings),
        &[&topic],
    )
    .unwrap()
    .on_storm(move |status| seen.lock().unwrap().push(status.rebalances_in_window));
    let deadline = Instant::now() + WAIT;
    let mut pushed = 0;
    while storms.lock().unwrap().is_empty() {
        assert!(Instant::now() < deadline, "no storm: {}", consumer.stats());
        let generation = consumer.generation().generation_id;
        drop(consumer.poll(Duration::from_millis(100)).unwrap());
        if generation >= 0 && consumer.generation().generation_id == generation && pushed < 4 {
            // One forced rebalance per generation.
            mock.must("push_errors Heartbeat REBALANCE_IN_PROGRESS");
            pushed += 1;
            wait_until("the forced rebalance", WAIT, || {
                drop(consumer.poll(Duration::from_millis(100)).unwrap());
                consumer.generation().generation_id > generation
            });
        }
    }
    assert!(consumer.storm_status().is_storm());
    assert_eq!(
        storms.lock().unwrap()[0],
        3,
        "the hook fires at the threshold"
    );
    consumer.close().unwrap();
}

/// A paused partition yields nothing while paused and everything after resume (tansu and mock).
#[test]
fn pause_and_resume_on_both_brokers() {
    for kind in BrokerKind::ALL {
        let broker = kind.start();
        let topic = unique_name("orders");
        broker.create_topic(&topic, 2);
        produce_to_each_partition(&broker.bootstrap(), &topic, 2, 10);
        let mut consumer = Consumer::subscribe(
            config(&broker.bootstrap(), &unique_name("group"), &[]),
            &[&topic],
        )
        .unwrap();
        let paused = TopicPartition::new(topic.as_str(), 1);
        consumer.pause(std::slice::from_ref(&paused));
        let mut seen: BTreeMap<i32, usize> = BTreeMap::new();
        let deadline = Instant::now() + WAIT;
        while seen.get(&0).copied().unwrap_or(0) < 10 {
            assert!(Instant::now() < deadline, "{kind:?}: {seen:?}");
            let mut batch = consumer.poll(Duration::from_millis(100)).unwrap();
            while let Some(d) = batch.next() {
                *seen.entry(d.record.partition).or_default() += 1;
                batch.complete(d);
            }
        }
        assert_eq!(
            seen.get(&1),
            None,
            "{kind:?}: a paused partition yielded records"
        );
        assert!(consumer
            .stats()
            .partitions
            .iter()
            .any(|p| p.paused_for.is_some()));
        consumer.resume(std::slice::from_ref(&paused));
        while seen.get(&1).copied().unwrap_or(0) < 10 {
            assert!(Instant::now() < deadline, "{kind:?}: {seen:?}");
            let mut batch = consumer.poll(Duration::from_millis(100)).unwrap();
            while let Some(d) = batch.next() {
                *seen.entry(d.record.partition).or_default() += 1;
                batch.complete(d);
            }
        }
        consumer.close().unwrap();
    }
}

/// Time spent joining inside `poll` does not count against max.poll.interval.ms (mock): a member
/// whose JoinGroup is held up longer than its 2 s poll interval (the coordinator waits for an
/// existing member that is busy for 3.5 s) stays in the group when its handler then takes most
/// of the interval. A timer started at poll entry evicted it, and in the demo fed a storm of 34
/// generations in 4 minutes.
#[test]
fn joining_does_not_count_against_max_poll_interval_mock() {
    let topic = unique_name("orders");
    let mock = MockCluster::start(MockOptions {
        topics: vec![(topic.clone(), 2)],
        ..MockOptions::default()
    });
    let group = unique_name("group");
    let mut busy = support::ours::OurMemberSpec::new(mock.bootstrap(), &group, &topic, "range");
    busy.session_timeout_ms = 2000;
    let busy = support::ours::OurMember::start(busy);
    busy.wait_for("the busy member joined", WAIT, |_, owned| owned.len() == 2)
        .unwrap();
    let settings = [
        ("session.timeout.ms", "2000"),
        ("heartbeat.interval.ms", "500"),
        ("max.poll.interval.ms", "2000"),
    ];
    let mut consumer =
        Consumer::subscribe(config(mock.bootstrap(), &group, &settings), &[&topic]).unwrap();
    // The existing member stops polling: the rebalance our consumer starts must wait for it.
    busy.stall(Duration::from_millis(3500));
    let started = Instant::now();
    while consumer.assignment().is_empty() {
        assert!(started.elapsed() < WAIT, "never joined");
        drop(consumer.poll(Duration::from_secs(10)).unwrap());
    }
    assert!(
        started.elapsed() > Duration::from_millis(2000),
        "the join should have outlasted max.poll.interval.ms ({:?})",
        started.elapsed()
    );
    // Most of the interval in the "handler", then poll again.
    thread::sleep(Duration::from_millis(1500));
    drop(consumer.poll(Duration::from_millis(100)).unwrap());
    let stats = consumer.stats();
    assert_eq!(
        stats.counters.lost, 0,
        "evicted for time spent joining: {stats}"
    );
    assert_eq!(consumer.assignment().len(), 1, "{stats}");
    consumer.close().unwrap();
}

/// After one record slower than the whole poll interval, the next batches still hand out records
/// (at least one each) and the estimate comes down as fast records follow (mock). An estimate
/// that stopped every batch before its first record would livelock the consumer.
#[test]
fn one_very_slow_record_does_not_stall_later_batches_mock() {
    let topic = unique_name("orders");
    let mock = MockCluster::start(MockOptions {
        topics: vec![(topic.clone(), 1)],
        ..MockOptions::default()
    });
    peer_produce(mock.bootstrap(), &topic, 30, &["--partition", "0"]);
    let settings = [
        ("session.timeout.ms", "2000"),
        ("heartbeat.interval.ms", "500"),
        ("max.poll.interval.ms", "4000"),
    ];
    let log: Log = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    // 2.5 s on offset 0: more than the 2 s batch budget, less than the poll interval.
    let a = spawn_member(
        "a",
        config(mock.bootstrap(), &unique_name("group"), &settings),
        &topic,
        log.clone(),
        stop.clone(),
        |_, offset| {
            if offset == 0 {
                Duration::from_millis(2500)
            } else {
                Duration::from_millis(1)
            }
        },
    );
    wait_until("all 30 records", WAIT, || log.lock().unwrap().len() >= 30);
    stop.store(true, Ordering::SeqCst);
    let a = a.join().unwrap();
    let stats = a.stats();
    assert_eq!(stats.counters.lost, 0, "{stats}");
    a.close().unwrap();
}
