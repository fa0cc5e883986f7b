//! The failure policy on real Kafka 4.x (the run's shared broker, unique topics and groups):
//! `processing.retries` in `run` and in the decoupled mode (a record failing a few times is
//! retried, then committed, nothing lost or repeated beyond the retries), a poison record
//! dead-lettered once to a dead-letter topic with its headers and committed past, a failing
//! dead-letter callback stopping the run with nothing committed past the record, and a revoked
//! partition's failing record left to its next owner instead of being dead-lettered.

use crate::support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use rebalance_guard::consumer::dead_letter::{
    HEADER_ATTEMPTS, HEADER_ERROR, HEADER_OFFSET, HEADER_PARTITION, HEADER_TOPIC,
};
use rebalance_guard::consumer::{Consumer, ConsumerConfig, ConsumerError, DeadLetterTopic};
use rebalance_guard::wire::{Client, ClientConfig, FetchConfig, FetchPosition, Record};
use rebalance_guard::{TopicPartition, WorkContext};
use support::consumer::{
    broker_with_topic, committed, config, produce_to_each_partition, wait_until, within,
};
use support::{unique_name, Broker, BrokerKind};

const WAIT: Duration = Duration::from_secs(60);
const RECORDS: usize = 10;

/// Every handler call: partition, offset, attempt, whether it succeeded.
type Calls = Arc<Mutex<Vec<(i32, i64, u32, bool)>>>;
/// Every dead-letter callback call: partition, offset, attempts, the error's text.
type Letters = Arc<Mutex<Vec<(i32, i64, u32, String)>>>;

struct Setup {
    broker: Box<dyn Broker>,
    topic: String,
    group: String,
    partitions: i32,
}

fn setup(partitions: i32) -> Setup {
    let _ = env_logger::builder().is_test(true).try_init();
    let (broker, topic) = broker_with_topic(BrokerKind::Kafka, "retries", partitions as u32);
    produce_to_each_partition(&broker.bootstrap(), &topic, partitions, RECORDS);
    Setup {
        broker,
        topic,
        group: unique_name("retries-group"),
        partitions,
    }
}

impl Setup {
    fn config(&self, extra: &[(&str, &str)]) -> ConsumerConfig {
        config(&self.broker.bootstrap(), &self.group, extra)
    }

    fn consumer(&self, extra: &[(&str, &str)]) -> Consumer {
        Consumer::subscribe(self.config(extra), &[&self.topic]).expect("subscribe")
    }

    fn committed(&self) -> BTreeMap<i32, Option<i64>> {
        committed(
            &self.broker.bootstrap(),
            &self.group,
            &self.topic,
            self.partitions,
        )
    }

    fn all(&self) -> usize {
        self.partitions as usize * RECORDS
    }
}

/// A handler that fails the first `failures` tries of `poison` (every try with `u32::MAX`),
/// records each call, and sets `stop` once `all` records succeeded or were dead-lettered.
fn handler(
    poison: (i32, i64),
    failures: u32,
    all: usize,
    calls: &Calls,
    letters: &Letters,
    stop: &Arc<AtomicBool>,
) -> impl Fn(&Record, &WorkContext<'_>) -> Result<(), std::io::Error> + Send + Sync + 'static {
    let (calls, letters, stop) = (calls.clone(), letters.clone(), stop.clone());
    move |record, ctx| {
        let fail = (record.partition, record.offset) == poison && ctx.attempt() <= failures;
        let mut seen = calls.lock().unwrap();
        seen.push((record.partition, record.offset, ctx.attempt(), !fail));
        if seen.iter().filter(|c| c.3).count() + letters.lock().unwrap().len() >= all {
            stop.store(true, Ordering::SeqCst);
        }
        if fail {
            return Err(std::io::Error::other(format!(
                "the exchange said no (try {})",
                ctx.attempt()
            )));
        }
        Ok(())
    }
}

/// A dead-letter callback that records its calls and then does `then`.
fn letter_box<E>(
    letters: &Letters,
    then: impl Fn(&Record, &(dyn std::error::Error + Send + Sync + 'static), u32) -> Result<(), E>
        + Send
        + Sync
        + 'static,
) -> impl Fn(&Record, &(dyn std::error::Error + Send + Sync + 'static), u32) -> Result<(), E>
       + Send
       + Sync
       + 'static {
    let letters = letters.clone();
    move |record, error, attempts| {
        let outcome = then(record, error, attempts);
        letters.lock().unwrap().push((
            record.partition,
            record.offset,
            attempts,
            error.to_string(),
        ));
        outcome
    }
}

/// The successful calls per record.
fn successes(calls: &Calls) -> BTreeMap<(i32, i64), usize> {
    let mut seen = BTreeMap::new();
    for (p, o, _, ok) in calls.lock().unwrap().iter() {
        if *ok {
            *seen.entry((*p, *o)).or_insert(0) += 1;
        }
    }
    seen
}

fn attempts_of(calls: &Calls, record: (i32, i64)) -> Vec<u32> {
    calls
        .lock()
        .unwrap()
        .iter()
        .filter(|c| (c.0, c.1) == record)
        .map(|c| c.2)
        .collect()
}

const RETRY_TWICE: &[(&str, &str)] = &[
    ("processing.retries", "2"),
    ("processing.retry.backoff.ms", "100"),
    ("processing.retry.backoff.max.ms", "400"),
    ("commit.interval.ms", "50"),
];

/// Checks a run in which (0, 4) failed twice and then succeeded: told attempts 1, 2, 3, every
/// record succeeded exactly once, and everything is committed.
fn assert_retried_and_committed(s: &Setup, calls: &Calls, stats: &rebalance_guard::ConsumerStats) {
    assert_eq!(attempts_of(calls, (0, 4)), [1, 2, 3]);
    let seen = successes(calls);
    assert_eq!(seen.len(), s.all(), "a record was lost: {seen:?}");
    assert!(
        seen.values().all(|n| *n == 1),
        "a record repeated: {seen:?}"
    );
    let calls_made = calls.lock().unwrap().len();
    assert_eq!(calls_made, s.all() + 2, "only the two retries were repeats");
    assert_eq!((stats.retries, stats.dead_lettered), (2, 0), "{stats}");
    let committed = s.committed();
    assert!(
        committed.values().all(|c| *c == Some(RECORDS as i64)),
        "{committed:?}"
    );
}

/// A consumer with `RETRY_TWICE` runs until every record succeeded, with `run` or with two
/// workers, while (0, 4) fails twice.
fn retried_and_committed(workers: bool) {
    let s = setup(2);
    let (calls, letters, stop) = (Calls::default(), Letters::default(), Arc::default());
    let handler = handler((0, 4), 2, s.all(), &calls, &letters, &stop);
    let mut consumer = s.consumer(RETRY_TWICE);
    let stats = within(WAIT, move || {
        let result = if workers {
            consumer.run_with_workers(&stop, 2, 4, handler)
        } else {
            consumer.run(&stop, handler)
        };
        result.expect("run");
        let stats = consumer.stats();
        consumer.close().expect("close");
        stats
    });
    assert_retried_and_committed(&s, &calls, &stats);
}

/// The record at `offset` of `topic`'s `partition`, read until it is there (bounded).
fn record_at(bootstrap: &str, topic: &str, partition: i32, offset: i64) -> Record {
    let mut client = Client::connect(ClientConfig::new([bootstrap])).expect("connect");
    let fetch = FetchConfig {
        max_wait: Duration::from_millis(100),
        ..FetchConfig::default()
    };
    let deadline = Instant::now() + WAIT;
    loop {
        assert!(
            Instant::now() < deadline,
            "nothing at {topic}-{partition} {offset}"
        );
        let position = FetchPosition {
            tp: TopicPartition::new(topic, partition),
            offset,
        };
        let fetched = client.fetch(&[position], &fetch).expect("fetch");
        let mut records = fetched.into_iter().flat_map(|f| f.records);
        if let Some(record) = records.find(|r| r.offset == offset) {
            return record;
        }
    }
}

fn header<'r>(record: &'r Record, name: &str) -> &'r str {
    record
        .headers
        .iter()
        .find(|(k, _)| k == name)
        .and_then(|(_, v)| v.as_deref())
        .map(|v| std::str::from_utf8(v).expect("utf-8 header"))
        .unwrap_or_else(|| panic!("no header {name}: {:?}", record.headers))
}

mod kafka {
    use super::*;

    crate::on_brokers!(
        kafka:
        run_retries_a_failing_record_then_commits_it => retried_and_committed(false),
        workers_retry_a_failing_record_then_commit_it => retried_and_committed(true),
    );

    /// A poison record in the decoupled mode: after `processing.retries + 1` failures the callback
    /// (the dead-letter topic's `send`) is called once with attempts = 2; the record lands in the
    /// dead-letter topic with its value and the error, attempts and source headers; the offset is
    /// committed past it; every other record succeeded once.
    #[test]
    fn a_poison_record_is_dead_lettered_once_to_a_topic_and_committed_past() {
        let s = setup(2);
        let dlq = unique_name("retries-dlq");
        s.broker.create_topic(&dlq, 1);
        let (calls, letters, stop) = (Calls::default(), Letters::default(), Arc::default());
        let handler = handler((1, 6), u32::MAX, s.all(), &calls, &letters, &stop);
        let config = s.config(&[
            ("processing.retries", "1"),
            ("processing.retry.backoff.ms", "50"),
            ("processing.retry.backoff.max.ms", "50"),
        ]);
        let dead_letters = DeadLetterTopic::connect(&config, &dlq).expect("dlq");
        let mut consumer = Consumer::subscribe(config, &[&s.topic])
            .expect("subscribe")
            .on_dead_letter(letter_box(&letters, move |record, error, attempts| {
                dead_letters.send(record, error, attempts).map(drop)
            }));
        let stats = within(WAIT, move || {
            consumer
                .run_with_workers(&stop, 2, 4, handler)
                .expect("run with workers");
            let stats = consumer.stats();
            consumer.close().expect("close");
            stats
        });
        assert_eq!(
            *letters.lock().unwrap(),
            [(1, 6, 2, "the exchange said no (try 2)".to_string())]
        );
        assert_eq!(attempts_of(&calls, (1, 6)), [1, 2]);
        let seen = successes(&calls);
        assert_eq!(seen.len(), s.all() - 1, "{seen:?}");
        assert!(
            seen.values().all(|n| *n == 1),
            "a record repeated: {seen:?}"
        );
        assert_eq!((stats.retries, stats.dead_lettered), (1, 1), "{stats}");
        assert_eq!(s.committed()[&1], Some(RECORDS as i64), "committed past it");
        let copy = record_at(&s.broker.bootstrap(), &dlq, 0, 0);
        let source = record_at(&s.broker.bootstrap(), &s.topic, 1, 6);
        assert_eq!((&copy.key, &copy.value), (&source.key, &source.value));
        assert_eq!(header(&copy, HEADER_ERROR), "the exchange said no (try 2)");
        assert_eq!(header(&copy, HEADER_ATTEMPTS), "2");
        assert_eq!(header(&copy, HEADER_TOPIC), s.topic);
        assert_eq!(header(&copy, HEADER_PARTITION), "1");
        assert_eq!(header(&copy, HEADER_OFFSET), "6");
    }
    /// The dead-letter callback fails: the run stops with the error naming the record and its
    /// attempts, and nothing is committed past the record (the records before it are).
    #[test]
    fn a_failing_dead_letter_callback_stops_the_run_with_nothing_committed_past_the_record() {
        for workers in [false, true] {
            let s = setup(1);
            let (calls, letters, stop) = (Calls::default(), Letters::default(), Arc::default());
            let handler = handler((0, 4), u32::MAX, s.all(), &calls, &letters, &stop);
            let mut consumer = s
                .consumer(&[
                    ("processing.retries", "1"),
                    ("processing.retry.backoff.ms", "50"),
                    ("processing.retry.backoff.max.ms", "50"),
                ])
                .on_dead_letter(letter_box(&letters, |_, _, _| {
                    Err(std::io::Error::other("the dead-letter topic is down"))
                }));
            let (result, stats) = within(WAIT, move || {
                let result = if workers {
                    consumer.run_with_workers(&stop, 2, 4, handler)
                } else {
                    consumer.run(&stop, handler)
                };
                (result, consumer.stats())
            });
            match result {
                Err(ConsumerError::DeadLetter {
                    tp,
                    offset,
                    attempts,
                    ..
                }) => assert_eq!((tp.partition, offset, attempts), (0, 4, 2)),
                other => {
                    panic!("workers={workers}: expected the callback's failure, got {other:?}")
                }
            }
            assert_eq!(letters.lock().unwrap().len(), 1, "workers={workers}");
            assert_eq!(stats.dead_lettered, 0, "workers={workers}: {stats}");
            assert_eq!(
                s.committed()[&0],
                Some(4),
                "workers={workers}: committed up to the record, not past it"
            );
        }
    }
    /// The old owner's handler fails on a record after its partition was revoked (it held on past
    /// `revoke.drain.timeout.ms`, so the revocation went on without it): with a dead-letter
    /// callback and no retries the record would be dead-lettered at once if it were still this
    /// member's; it is not, and the partition's next owner (either member, after an eager
    /// rebalance) processes it.
    #[test]
    fn a_revoked_partitions_failing_record_is_not_dead_lettered_by_the_old_owner() {
        let s = setup(1);
        let letters = Letters::default();
        let processed: Arc<Mutex<Vec<(String, i64)>>> = Arc::default();
        let failed_after_revocation = Arc::new(AtomicBool::new(false));
        let (started_tx, started_rx) = mpsc::channel();
        let extra = [
            ("processing.retries", "0"),
            ("revoke.drain.timeout.ms", "1000"),
            ("commit.interval.ms", "50"),
        ];
        let a = s
            .consumer(&extra)
            .on_dead_letter(letter_box(&letters, |_, _, _| Ok::<(), std::io::Error>(())));
        let stop = Arc::new(AtomicBool::new(false));
        let first_try = Arc::new(AtomicUsize::new(0));
        let (a_stop, a_log, a_failed, a_first) = (
            stop.clone(),
            processed.clone(),
            failed_after_revocation.clone(),
            first_try.clone(),
        );
        let runner_a = thread::spawn(move || {
            let mut a = a;
            let started_tx = Mutex::new(started_tx);
            let result = a.run_with_workers(&a_stop, 1, 4, move |record, ctx| {
                if record.offset == 0 && a_first.fetch_add(1, Ordering::SeqCst) == 0 {
                    let _ = started_tx.lock().unwrap().send(());
                    let deadline = Instant::now() + WAIT;
                    while ctx.is_current() && Instant::now() < deadline {
                        thread::sleep(Duration::from_millis(10));
                    }
                    a_failed.store(!ctx.is_current(), Ordering::SeqCst);
                    return Err(std::io::Error::other("failed after the revocation"));
                }
                a_log.lock().unwrap().push(("a".to_string(), record.offset));
                Ok(())
            });
            let stats = a.stats();
            a.close().expect("close a");
            (result, stats)
        });
        started_rx
            .recv_timeout(WAIT)
            .expect("a started the first record");
        let b = s.consumer(&extra);
        let (b_stop, b_log) = (stop.clone(), processed.clone());
        let runner_b = thread::spawn(move || {
            let mut b = b;
            let result = b.run(&b_stop, move |record, _ctx| {
                b_log.lock().unwrap().push(("b".to_string(), record.offset));
                Ok::<(), std::io::Error>(())
            });
            b.close().expect("close b");
            result
        });
        wait_until("offset 0 processed by its next owner", WAIT, || {
            processed.lock().unwrap().iter().any(|(_, o)| *o == 0)
        });
        stop.store(true, Ordering::SeqCst);
        let (result_a, stats_a) = runner_a.join().expect("a");
        result_a.expect("a's run");
        runner_b.join().expect("b").expect("b's run");
        assert!(
            failed_after_revocation.load(Ordering::SeqCst),
            "the handler was to fail only once its partition was revoked"
        );
        assert_eq!(
            *letters.lock().unwrap(),
            [],
            "the old owner dead-lettered a record of a revoked partition"
        );
        assert_eq!(stats_a.dead_lettered, 0, "{stats_a}");
    }
}
