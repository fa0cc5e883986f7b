//! The decoupled mode against real brokers: worker threads run the handler, the poll thread keeps
//! the membership, and only the contiguous completed prefix is committed. Includes the
//! held-open rebalance test.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use bytes::Bytes;
use rebalance_guard::consumer::{Consumer, ConsumerConfig, ConsumerStats, GuardView, WorkContext};
use rebalance_guard::guard::{HandoffStage, OwnerStatus};
use rebalance_guard::wire::{Client, ClientConfig, ProduceRecord, Record};
use rebalance_guard::TopicPartition;
use support::consumer::{
    broker_with_topic, committed, committed_with_metadata, produce_to_each_partition, wait_until,
};
use support::{unique_name, BrokerKind};

const WAIT: Duration = Duration::from_secs(60);

/// The shared test configuration with a 3 s session: these tests go through several mock
/// rebalances, each waiting session - 1 s (Kafka's wait for the members' rejoin, a heartbeat
/// interval or so).
fn config(bootstrap: &str, group: &str, extra: &[(&str, &str)]) -> ConsumerConfig {
    let mut all = vec![("session.timeout.ms", "3000")];
    all.extend_from_slice(extra);
    support::consumer::config(bootstrap, group, &all)
}

/// One attempt to apply a record's effect: by whom, and whether it was applied (the handler
/// checks its lease right before the effect).
#[derive(Clone, Debug)]
struct Attempt {
    member: &'static str,
    partition: i32,
    offset: i64,
    applied: bool,
}

type Attempts = Arc<Mutex<Vec<Attempt>>>;

/// Waits until every offset `0..count` of every partition `0..partitions` has an applied effect.
fn wait_until_all_applied(attempts: &Attempts, partitions: i32, count: i64) {
    let everything: BTreeSet<(i32, i64)> = (0..partitions)
        .flat_map(|p| (0..count).map(move |o| (p, o)))
        .collect();
    wait_until("every effect applied", WAIT, || {
        let applied: BTreeSet<(i32, i64)> = attempts
            .lock()
            .unwrap()
            .iter()
            .filter(|a| a.applied)
            .map(|a| (a.partition, a.offset))
            .collect();
        applied == everything
    });
}

/// The (partition, offset) pairs whose effect was applied more than once.
fn repeated_effects(attempts: &[Attempt]) -> Vec<(i32, i64)> {
    let mut effects: BTreeMap<(i32, i64), usize> = BTreeMap::new();
    for x in attempts.iter().filter(|x| x.applied) {
        *effects.entry((x.partition, x.offset)).or_default() += 1;
    }
    effects
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(k, _)| k)
        .collect()
}

/// The partition B took over from A: the one of B's first attempt.
fn moved_partition(attempts: &[Attempt]) -> i32 {
    attempts
        .iter()
        .find(|x| x.member == "b")
        .map(|x| x.partition)
        .expect("B got a partition")
}

/// `member`'s attempt at the highest offset of `partition`.
fn last_attempt<'a>(attempts: &'a [Attempt], member: &str, partition: i32) -> &'a Attempt {
    attempts
        .iter()
        .filter(|x| x.member == member && x.partition == partition)
        .max_by_key(|x| x.offset)
        .unwrap_or_else(|| panic!("{member} attempted nothing of {partition}: {attempts:?}"))
}

/// The lowest offset of `partition` that `member` attempted.
fn first_offset(attempts: &[Attempt], member: &str, partition: i32) -> Option<i64> {
    attempts
        .iter()
        .filter(|x| x.member == member && x.partition == partition)
        .map(|x| x.offset)
        .min()
}

fn spawn_workers<H>(
    member: &'static str,
    config: ConsumerConfig,
    topic: &str,
    stop: Arc<AtomicBool>,
    handler: H,
) -> JoinHandle<Consumer>
where
    H: Fn(&Record, &WorkContext<'_>) -> Result<(), std::io::Error> + Send + Sync + 'static,
{
    spawn_workers_with_view(member, config, topic, stop, handler).0
}

/// Like `spawn_workers`, also returning a view of the member's guard, to watch its partitions'
/// states from the test thread.
fn spawn_workers_with_view<H>(
    member: &'static str,
    config: ConsumerConfig,
    topic: &str,
    stop: Arc<AtomicBool>,
    handler: H,
) -> (JoinHandle<Consumer>, GuardView)
where
    H: Fn(&Record, &WorkContext<'_>) -> Result<(), std::io::Error> + Send + Sync + 'static,
{
    let _ = env_logger::builder().is_test(true).try_init();
    let topic = topic.to_string();
    let (view_tx, view_rx) = std::sync::mpsc::channel();
    let handle = thread::spawn(move || {
        let mut consumer = Consumer::subscribe(config, &[&topic]).expect("subscribe");
        let _ = view_tx.send(consumer.guard_view());
        consumer
            .run_with_workers(&stop, 3, 16, handler)
            .unwrap_or_else(|e| panic!("{member}: {e}"));
        consumer
    });
    let view = view_rx.recv().expect("the member started");
    (handle, view)
}

/// Every record processed once, in offset order within its partition, by three workers; the
/// final commit is the end of every partition.
fn workers_process_everything_once_in_partition_order(kind: BrokerKind) {
    let (broker, topic) = broker_with_topic(kind, "orders", 4);
    produce_to_each_partition(&broker.bootstrap(), &topic, 4, 100);
    let group = unique_name("group");
    let attempts: Attempts = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let log = attempts.clone();
    let member = spawn_workers(
        "a",
        config(&broker.bootstrap(), &group, &[]),
        &topic,
        stop.clone(),
        move |record, _ctx| {
            thread::sleep(Duration::from_micros((record.offset as u64 % 7) * 300));
            log.lock().unwrap().push(Attempt {
                member: "a",
                partition: record.partition,
                offset: record.offset,
                applied: true,
            });
            Ok(())
        },
    );
    wait_until("400 records", WAIT, || {
        attempts.lock().unwrap().len() >= 400
    });
    stop.store(true, Ordering::SeqCst);
    let consumer = member.join().unwrap();
    assert_eq!(
        committed(&broker.bootstrap(), &group, &topic, 4),
        (0..4).map(|p| (p, Some(100))).collect(),
        "{kind:?}"
    );
    consumer.close().unwrap();
    let attempts = attempts.lock().unwrap().clone();
    assert_eq!(attempts.len(), 400, "{kind:?}: each record exactly once");
    for p in 0..4 {
        let offsets: Vec<i64> = attempts
            .iter()
            .filter(|a| a.partition == p)
            .map(|a| a.offset)
            .collect();
        assert_eq!(
            offsets,
            (0..100).collect::<Vec<_>>(),
            "{kind:?} partition {p}"
        );
    }
}

/// A latch that holds every handler that reaches it until it is released.
#[derive(Default)]
struct Latch {
    state: Mutex<(usize, bool)>,
    changed: Condvar,
}

impl Latch {
    fn hold(&self) {
        let mut state = self.state.lock().unwrap();
        state.0 += 1;
        self.changed.notify_all();
        while !state.1 {
            state = self.changed.wait(state).unwrap();
        }
    }

    fn held(&self) -> usize {
        self.state.lock().unwrap().0
    }

    fn release(&self) {
        self.state.lock().unwrap().1 = true;
        self.changed.notify_all();
    }
}

/// The held-open rebalance test (cooperative-sticky): consumer A works partitions
/// 0 and 1 and holds offset 101 of each before its effect, with 100 complete; consumer B joins and
/// one partition moves to it while A's 101 is still held past the drain timeout. Then:
/// - no offset before the incomplete one was skipped: B starts the moved partition at 101;
/// - the old owner could not apply its stale work: released after the revocation, A's 101 sees
///   its lease is no longer current and applies nothing, and its completion is refused;
/// - every business effect exists exactly once;
/// - A's stats name the work completed after revocation.
fn held_open_rebalance(kind: BrokerKind) {
    held_open_rebalance_with(kind, |bootstrap, group| {
        config(
            bootstrap,
            group,
            &[
                ("partition.assignment.strategy", "cooperative-sticky"),
                ("revoke.drain.timeout.ms", "1000"),
            ],
        )
    });
}

/// The held-open rebalance with the configuration `config` builds (the group protocol is a
/// parameter: classic cooperative-sticky, or the consumer group protocol of KIP-848).
fn held_open_rebalance_with(kind: BrokerKind, config: impl Fn(&str, &str) -> ConsumerConfig) {
    let (broker, topic) = broker_with_topic(kind, "orders", 2);
    let bootstrap = broker.bootstrap();
    produce_to_each_partition(&bootstrap, &topic, 2, 200);
    let group = unique_name("group");
    let attempts: Attempts = Arc::default();
    let latch = Arc::new(Latch::default());
    let stop = Arc::new(AtomicBool::new(false));

    let handler = |member: &'static str, latch: Option<Arc<Latch>>, log: Attempts| {
        move |record: &Record, ctx: &WorkContext<'_>| -> Result<(), std::io::Error> {
            if let Some(latch) = &latch {
                if record.offset == 101 {
                    latch.hold();
                }
            }
            // The effect is applied only under a current lease (the value of fencing).
            let applied = ctx.is_current();
            log.lock().unwrap().push(Attempt {
                member,
                partition: record.partition,
                offset: record.offset,
                applied,
            });
            Ok(())
        }
    };
    let a = spawn_workers(
        "a",
        config(&bootstrap, &group),
        &topic,
        stop.clone(),
        handler("a", Some(latch.clone()), attempts.clone()),
    );
    wait_until("A holds 101 of both partitions", WAIT, || latch.held() == 2);
    wait_until("A committed 101 on both partitions", WAIT, || {
        committed(&bootstrap, &group, &topic, 2)
            .values()
            .all(|c| *c == Some(101))
    });
    let b = spawn_workers(
        "b",
        config(&bootstrap, &group),
        &topic,
        stop.clone(),
        handler("b", None, attempts.clone()),
    );
    wait_until("B works the moved partition", WAIT, || {
        attempts.lock().unwrap().iter().any(|a| a.member == "b")
    });
    latch.release();
    wait_until_all_applied(&attempts, 2, 200);
    stop.store(true, Ordering::SeqCst);
    let (mut a, b) = (a.join().unwrap(), b.join().unwrap());
    let a_stats = a.stats();
    let a_failures = a.take_handoff_failures();
    a.close().unwrap();
    b.close().unwrap();

    let attempts = attempts.lock().unwrap().clone();
    let moved = moved_partition(&attempts);
    let b_first = first_offset(&attempts, "b", moved);
    assert_eq!(
        b_first,
        Some(101),
        "B must start at the incomplete offset: {attempts:?}"
    );
    let stale: Vec<_> = attempts
        .iter()
        .filter(|x| x.member == "a" && x.partition == moved && x.offset == 101)
        .collect();
    assert_eq!(stale.len(), 1);
    assert!(!stale[0].applied, "A applied revoked work: {stale:?}");
    let repeated = repeated_effects(&attempts);
    assert!(repeated.is_empty(), "effects applied twice: {repeated:?}");
    let moved_stats = a_stats
        .partitions
        .iter()
        .find(|p| p.guard.tp.partition == moved)
        .unwrap();
    assert_eq!(moved_stats.guard.completed_after_revocation, 1, "{a_stats}");
    assert!(
        a_stats.counters.failed_handoffs >= 1,
        "the drain timed out: {a_stats}"
    );
    // The failed handoff is reported to the application, naming the partition and the flush.
    assert!(
        a_failures
            .iter()
            .any(|f| f.tp.partition == moved && f.stage == HandoffStage::Flush),
        "{a_failures:?}"
    );
}

/// The scenario of the held-open handoff both drain tests share: 200 records on each of two
/// partitions, member A (cooperative-sticky, a 20 s drain) holding 101 of both partitions,
/// `before_b` (given the group) run before member B joins, and the test thread back once A's
/// revocation is draining. The caller releases the held record with
/// [`HeldHandoff::release_and_finish`].
struct HeldHandoff {
    attempts: Attempts,
    latch: Arc<Latch>,
    stop: Arc<AtomicBool>,
    a: JoinHandle<Consumer>,
    b: JoinHandle<Consumer>,
}

impl HeldHandoff {
    fn until_draining(bootstrap: &str, topic: &str, before_b: impl FnOnce(&str)) -> Self {
        produce_to_each_partition(bootstrap, topic, 2, 200);
        let group = unique_name("group");
        let settings = [
            ("partition.assignment.strategy", "cooperative-sticky"),
            ("revoke.drain.timeout.ms", "20000"),
        ];
        let attempts: Attempts = Arc::default();
        let latch = Arc::new(Latch::default());
        let stop = Arc::new(AtomicBool::new(false));
        let held_once = Arc::new(AtomicUsize::new(0));
        let (log_a, latch_a, held) = (attempts.clone(), latch.clone(), held_once.clone());
        let (a, a_view) = spawn_workers_with_view(
            "a",
            config(bootstrap, &group, &settings),
            topic,
            stop.clone(),
            move |record, ctx| {
                if record.offset == 101 && held.fetch_add(1, Ordering::SeqCst) < 2 {
                    latch_a.hold();
                }
                log_a.lock().unwrap().push(Attempt {
                    member: "a",
                    partition: record.partition,
                    offset: record.offset,
                    applied: ctx.is_current(),
                });
                Ok(())
            },
        );
        wait_until("A holds 101 of both partitions", WAIT, || latch.held() == 2);
        before_b(&group);
        let log_b = attempts.clone();
        let b = spawn_workers(
            "b",
            config(bootstrap, &group, &settings),
            topic,
            stop.clone(),
            move |record, ctx| {
                log_b.lock().unwrap().push(Attempt {
                    member: "b",
                    partition: record.partition,
                    offset: record.offset,
                    applied: ctx.is_current(),
                });
                Ok(())
            },
        );
        // B's join makes A revoke one partition, and A's revocation waits on the held record.
        wait_until("A's revocation is draining", WAIT, || {
            a_view
                .snapshot()
                .partitions
                .iter()
                .any(|p| p.status == OwnerStatus::Draining)
        });
        HeldHandoff {
            attempts,
            latch,
            stop,
            a,
            b,
        }
    }

    /// Releases the held record, waits for every record to be applied, stops and closes both
    /// members: A's statistics and every attempt.
    fn release_and_finish(self) -> (ConsumerStats, Vec<Attempt>) {
        self.latch.release();
        wait_until_all_applied(&self.attempts, 2, 200);
        self.stop.store(true, Ordering::SeqCst);
        let (a, b) = (self.a.join().unwrap(), self.b.join().unwrap());
        let a_stats = a.stats();
        a.close().unwrap();
        b.close().unwrap();
        let attempts = self.attempts.lock().unwrap().clone();
        (a_stats, attempts)
    }
}

/// The other outcome of the same race: the held record is released while the revocation is
/// still draining. The drain succeeds, A applies 101 under a still-current lease, the revocation
/// commits 102... whatever A finished, and B starts exactly after it: nothing is applied twice.
fn a_drain_that_finishes_in_time_hands_off_without_duplicates(kind: BrokerKind) {
    let (broker, topic) = broker_with_topic(kind, "orders", 2);
    let bootstrap = broker.bootstrap();
    let handoff = HeldHandoff::until_draining(&bootstrap, &topic, |_| {});
    assert!(
        handoff
            .attempts
            .lock()
            .unwrap()
            .iter()
            .all(|x| x.member == "a"),
        "B started before A's revocation finished draining"
    );
    let (a_stats, attempts) = handoff.release_and_finish();
    // The handoff went through the drain: A's last record of the moved partition is the held
    // 101 (its queued successors were cancelled, not started), applied under a lease that was
    // still current while draining.
    let moved = moved_partition(&attempts);
    let a_last = last_attempt(&attempts, "a", moved);
    assert_eq!((a_last.offset, a_last.applied), (101, true), "{attempts:?}");
    // Then the revocation committed 102 and B starts there, with no effect applied twice.
    // Kafka accepts the revocation's commit of the current generation: always so there. The
    // mock may refuse it (it refuses every commit while its group re-forms, which a late
    // SyncGroup of B's can cause at any moment): then B starts at the partition's last commit
    // (101 when a paced commit carried it before the revocation, 0 when none had yet), and
    // what A applied from there to 101 is repeated once each, for the idempotent sink to absorb.
    let b_first = first_offset(&attempts, "b", moved);
    let repeated = repeated_effects(&attempts);
    if kind.is_kafka() || a_stats.counters.failed_handoffs == 0 {
        assert_eq!(a_stats.counters.failed_handoffs, 0, "{kind:?}: {a_stats}");
        assert_eq!(b_first, Some(102), "{kind:?}: {attempts:?}");
        assert!(
            repeated.is_empty(),
            "{kind:?}: effects applied twice: {repeated:?}"
        );
    } else {
        let from = b_first.unwrap_or_else(|| panic!("B never read the moved partition: {a_stats}"));
        assert!(
            from <= 101,
            "B started past what A applied: {from}, {a_stats}"
        );
        let expected: Vec<_> = (from..=101).map(|offset| (moved, offset)).collect();
        assert_eq!(repeated, expected, "{a_stats}");
    }
}

/// The held-open rebalance with the partition worked out of order (`processing.order =
/// unordered`): A holds 101 of each partition before its effect while 102..110 (the end of the
/// partition) finish beside it; then B joins and one partition moves while A still holds 101
/// past the drain timeout. Returns, for the moved partition, the offsets B attempted, with every
/// attempt, B's stats line of the moved partition and its skip count.
///
/// Which brokers keep the completed-offsets map: Apache Kafka stores the OffsetCommit metadata
/// and returns it from OffsetFetch (up to `offset.metadata.max.bytes`), and so does librdkafka's
/// mock cluster; tansu does not store it (the next owner then redoes everything from the
/// position, as without a map), so this test runs on Kafka and the mock only.
fn held_open_out_of_order(kind: BrokerKind, map_bytes: &str) -> (Vec<i64>, Vec<Attempt>, u64) {
    let (broker, topic) = broker_with_topic(kind, "orders", 2);
    let bootstrap = broker.bootstrap();
    produce_to_each_partition(&bootstrap, &topic, 2, 111);
    let group = unique_name("group");
    let settings = [
        ("partition.assignment.strategy", "cooperative-sticky"),
        ("revoke.drain.timeout.ms", "1000"),
        ("processing.order", "unordered"),
        ("commit.metadata.max.bytes", map_bytes),
    ];
    let attempts: Attempts = Arc::default();
    let latch = Arc::new(Latch::default());
    let stop = Arc::new(AtomicBool::new(false));
    let handler = |member: &'static str, latch: Option<Arc<Latch>>, log: Attempts| {
        move |record: &Record, ctx: &WorkContext<'_>| -> Result<(), std::io::Error> {
            if let Some(latch) = &latch {
                if record.offset == 101 {
                    latch.hold();
                }
            }
            let applied = ctx.is_current();
            log.lock().unwrap().push(Attempt {
                member,
                partition: record.partition,
                offset: record.offset,
                applied,
            });
            Ok(())
        }
    };
    let (a, a_view) = spawn_workers_with_view(
        "a",
        config(&bootstrap, &group, &settings),
        &topic,
        stop.clone(),
        handler("a", Some(latch.clone()), attempts.clone()),
    );
    wait_until("A holds 101 of both partitions", WAIT, || latch.held() == 2);
    wait_until("A finished 102..110 beside the held 101", WAIT, || {
        a_view
            .snapshot()
            .partitions
            .iter()
            .all(|p| p.in_flight == 1 && p.highest_admitted == Some(110))
    });
    wait_until("A committed 101 (with its map, when on)", WAIT, || {
        committed_with_metadata(&bootstrap, &group, &topic, 2)
            .values()
            .all(|(offset, metadata)| {
                *offset == Some(101)
                    && (map_bytes == "0"
                        || metadata
                            .as_deref()
                            .is_some_and(|m| m.starts_with("rgc2;") && !m.ends_with(";101;r")))
            })
    });
    let (b, b_view) = spawn_workers_with_view(
        "b",
        config(&bootstrap, &group, &settings),
        &topic,
        stop.clone(),
        handler("b", None, attempts.clone()),
    );
    wait_until("B works the moved partition", WAIT, || {
        attempts.lock().unwrap().iter().any(|a| a.member == "b")
    });
    latch.release();
    wait_until_all_applied(&attempts, 2, 111);
    // B has nothing more to do when the map is on; without it, it redoes up to 110.
    let moved = moved_partition(&attempts.lock().unwrap());
    wait_until("B reached the end of the moved partition", WAIT, || {
        b_view
            .snapshot()
            .partitions
            .iter()
            .any(|p| p.tp.partition == moved && p.contiguous_completed == Some(110))
    });
    stop.store(true, Ordering::SeqCst);
    let (a, b) = (a.join().unwrap(), b.join().unwrap());
    let b_stats = b.stats();
    a.close().unwrap();
    b.close().unwrap();
    let attempts = attempts.lock().unwrap().clone();
    let b_offsets: Vec<i64> = attempts
        .iter()
        .filter(|x| x.member == "b" && x.partition == moved)
        .map(|x| x.offset)
        .collect();
    let skipped = b_stats
        .partitions
        .iter()
        .find(|p| p.guard.tp.partition == moved)
        .map_or(0, |p| p.guard.skipped_completed);
    eprintln!(
        "{kind:?} commit.metadata.max.bytes={map_bytes}: B redid {} record(s) of the moved \
         partition ({b_offsets:?}), skipped {skipped} by the map",
        b_offsets.len()
    );
    (b_offsets, attempts, skipped)
}

/// With the map, B redoes the one record that never finished and skips the nine that did: every
/// effect exactly once, and the skips counted in B's stats.
fn the_next_owner_redoes_only_the_blocked_record(kind: BrokerKind) {
    let (b_offsets, attempts, skipped) = held_open_out_of_order(kind, "4096");
    assert_eq!(b_offsets, vec![101], "{kind:?}: {attempts:?}");
    assert_eq!(skipped, 9, "{kind:?}: 102..110 skipped by the map");
    let repeated = repeated_effects(&attempts);
    assert!(
        repeated.is_empty(),
        "{kind:?}: effects applied twice: {repeated:?}"
    );
}

/// `processing.order = key` on one partition: one slow record of one key; the other keys of the
/// same partition flow past it, the slow key's later records wait for it, every key's records
/// run in offset order, each exactly once, and the commit reaches the end.
fn one_slow_key_holds_up_only_its_own_records(kind: BrokerKind) {
    let (broker, topic) = broker_with_topic(kind, "orders", 1);
    let bootstrap = broker.bootstrap();
    let key_of = |i: i64| format!("acct-{}", i % 4);
    let mut producer = Client::connect(ClientConfig::from_bootstrap_str(&bootstrap)).unwrap();
    let records: Vec<ProduceRecord> = (0..60)
        .map(|i| ProduceRecord {
            key: Some(Bytes::from(key_of(i))),
            value: Some(Bytes::from(format!("order-{i}"))),
            headers: Vec::new(),
            timestamp: None,
        })
        .collect();
    producer
        .produce(&TopicPartition::new(topic.as_str(), 0), &records)
        .unwrap();
    let group = unique_name("group");
    const SLOW: i64 = 4; // key acct-0
                         // (offset, key, started, finished) in the order they finished.
    type Log = Arc<Mutex<Vec<(i64, String, usize, usize)>>>;
    let log: Log = Arc::default();
    let clock = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (record_log, tick) = (log.clone(), clock.clone());
    let member = spawn_workers(
        "a",
        config(&bootstrap, &group, &[("processing.order", "key")]),
        &topic,
        stop.clone(),
        move |record, _ctx| {
            let started = tick.fetch_add(1, Ordering::SeqCst);
            if record.offset == SLOW {
                thread::sleep(Duration::from_millis(1500));
            }
            let key = String::from_utf8_lossy(record.key.as_deref().unwrap_or_default()).into();
            let finished = tick.fetch_add(1, Ordering::SeqCst);
            record_log
                .lock()
                .unwrap()
                .push((record.offset, key, started, finished));
            Ok(())
        },
    );
    wait_until("60 records", WAIT, || log.lock().unwrap().len() >= 60);
    wait_until("the end committed", WAIT, || {
        committed(&bootstrap, &group, &topic, 1)[&0] == Some(60)
    });
    stop.store(true, Ordering::SeqCst);
    member.join().unwrap().close().unwrap();
    let log = log.lock().unwrap().clone();
    let offsets: BTreeSet<i64> = log.iter().map(|x| x.0).collect();
    assert_eq!(log.len(), 60, "{kind:?}: each record exactly once");
    assert_eq!(offsets, (0..60).collect());
    let slow = log.iter().find(|x| x.0 == SLOW).unwrap().clone();
    let past: Vec<i64> = log
        .iter()
        .filter(|x| x.0 > SLOW && x.1 != slow.1 && x.3 < slow.3)
        .map(|x| x.0)
        .collect();
    assert!(
        past.len() >= 30,
        "{kind:?}: other keys of the partition must flow past the slow record; only {past:?}"
    );
    for key in (0..4).map(key_of) {
        let mut of_key: Vec<&(i64, String, usize, usize)> =
            log.iter().filter(|x| x.1 == key).collect();
        of_key.sort_by_key(|x| x.2);
        let by_start: Vec<i64> = of_key.iter().map(|x| x.0).collect();
        let mut sorted = by_start.clone();
        sorted.sort();
        assert_eq!(by_start, sorted, "{kind:?}: {key} started out of order");
        for pair in of_key.windows(2) {
            assert!(
                pair[0].3 < pair[1].2,
                "{kind:?}: {key}: {} started before {} finished",
                pair[1].0,
                pair[0].0
            );
        }
    }
}

crate::on_brokers! {
    tansu {
        workers_process_everything_once_in_partition_order,
        one_slow_key_holds_up_only_its_own_records,
    }
}

mod kafka {
    use super::*;

    crate::on_brokers!(
        kafka:
        workers_process_everything_once_in_partition_order,
        held_open_rebalance,
        a_drain_that_finishes_in_time_hands_off_without_duplicates,
        held_open_rebalance_out_of_order_the_next_owner_redoes_only_the_blocked_record =>
            the_next_owner_redoes_only_the_blocked_record(BrokerKind::Kafka),
        one_slow_key_holds_up_only_its_own_records,
    );

    /// The same under `group.protocol=consumer` (KIP-848) on Kafka 4.x: the broker moves one
    /// partition to B; A's revocation fences it, drains (the held record times out the drain),
    /// commits the completed prefix with the member epoch, and only then acknowledges, so B starts
    /// at the held offset and nothing is applied twice.
    #[test]
    fn held_open_rebalance_consumer_protocol() {
        held_open_rebalance_with(BrokerKind::Kafka, |bootstrap, group| {
            support::consumer::consumer_protocol_config(
                bootstrap,
                group,
                &[("revoke.drain.timeout.ms", "1000")],
            )
        });
    }
    /// The same handoff without the map (`commit.metadata.max.bytes = 0`, or a broker that does not
    /// keep metadata): the position alone makes B redo 101..110, nine of them already applied. This
    /// is what the map saves, measured in the same scenario.
    #[test]
    fn held_open_rebalance_out_of_order_without_the_map_redoes_everything_beyond_the_gap() {
        let (mut b_offsets, attempts, skipped) = held_open_out_of_order(BrokerKind::Kafka, "0");
        // `processing.order = unordered`: B's workers may finish 101..110 in any order; each of
        // them exactly once is the claim.
        b_offsets.sort_unstable();
        assert_eq!(b_offsets, (101..=110).collect::<Vec<_>>(), "{attempts:?}");
        assert_eq!(skipped, 0);
        assert_eq!(repeated_effects(&attempts).len(), 9);
    }
}

mod mock {
    use super::*;

    crate::on_brokers!(
        mock:
        workers_process_everything_once_in_partition_order,
        held_open_rebalance,
        a_drain_that_finishes_in_time_hands_off_without_duplicates,
        held_open_rebalance_out_of_order_the_next_owner_redoes_only_the_blocked_record =>
            the_next_owner_redoes_only_the_blocked_record(BrokerKind::Mock),
    );

    /// The held-open rebalance with the revocation's own commit refused (issue: a handoff whose
    /// commit fails must lose nothing and cost the next owner only what was not recorded). A holds
    /// 101 of both partitions with 0..100 committed by its paced commits; B joins; while A's
    /// revocation drains, the next OffsetCommit is made to fail; the held 101 is released and
    /// applied under a still-current lease, and the revocation's commit of 102 is refused. B then
    /// starts the moved partition at the last committed 101: the one record A finished whose commit
    /// was refused comes again (the repeat an idempotent sink absorbs), nothing is lost, and the
    /// failure is counted as a failed handoff.
    ///
    /// On librdkafka's mock only: it is the one broker here that refuses a chosen request on demand
    /// (`push_errors`); REBALANCE_IN_PROGRESS is what Kafka answers a commit racing a rebalance.
    #[test]
    fn a_refused_revocation_commit_costs_the_next_owner_only_the_unrecorded_record() {
        let topic = unique_name("orders");
        let mock = support::MockCluster::start(support::MockOptions {
            topics: vec![(topic.clone(), 2)],
            ..support::MockOptions::default()
        });
        let bootstrap = mock.bootstrap().to_string();
        let handoff = HeldHandoff::until_draining(&bootstrap, &topic, |group| {
            wait_until("A's paced commits recorded 0..100", WAIT, || {
                committed(&bootstrap, group, &topic, 2)
                    .values()
                    .all(|offset| *offset == Some(101))
            });
        });
        // A's poll thread is inside the drain, so the next OffsetCommit is the revocation's.
        mock.must("push_errors OffsetCommit REBALANCE_IN_PROGRESS");
        let (a_stats, attempts) = handoff.release_and_finish();
        let moved = moved_partition(&attempts);
        assert!(
            a_stats.counters.failed_handoffs >= 1,
            "the refused revocation commit is a failed handoff: {a_stats}"
        );
        let a_last = last_attempt(&attempts, "a", moved);
        assert_eq!((a_last.offset, a_last.applied), (101, true), "{attempts:?}");
        assert_eq!(
            first_offset(&attempts, "b", moved),
            Some(101),
            "B starts at the last recorded position: {attempts:?}"
        );
        assert_eq!(
            repeated_effects(&attempts),
            vec![(moved, 101)],
            "the one repeat is the record whose commit was refused: {a_stats}"
        );
    }
}
