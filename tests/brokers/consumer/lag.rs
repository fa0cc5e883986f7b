//! Lag on real Kafka: the high watermark each fetch answer reports reaches the consumer's stats,
//! and the lag (log end minus the committed position) counts exactly the records produced and
//! not yet finished, per partition, through `Consumer::stats` and through a `StatsHandle` read
//! on another thread while the consumer runs.

use crate::support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use rebalance_guard::consumer::{Consumer, ConsumerStats, StatsHandle};
use rebalance_guard::wire::{Client, ClientConfig};
use rebalance_guard::TopicPartition;
use support::consumer::{broker_with_topic, config, produce_until_accepted, value_records};
use support::consumer::{committed, wait_until};
use support::{unique_name, BrokerKind};

const WAIT: Duration = Duration::from_secs(60);

/// Records produced to each partition of the topic.
const PRODUCED: [i64; 2] = [30, 50];
/// Records finished (and committed) per partition before the first look at the lag.
const FINISHED: [i64; 2] = [10, 20];

fn produce(bootstrap: &str, topic: &str) {
    let mut client = Client::connect(ClientConfig::from_bootstrap_str(bootstrap)).unwrap();
    for (partition, count) in PRODUCED.iter().enumerate() {
        let tp = TopicPartition::new(topic, partition as i32);
        let records = value_records((0..*count).map(|i| format!("v{i}")));
        produce_until_accepted(&mut client, &tp, &records, "produce");
    }
}

/// Per partition: (high watermark, last stable offset, lag, fetch lag).
type Lags = BTreeMap<i32, (Option<i64>, Option<i64>, Option<i64>, Option<i64>)>;

fn lags(stats: &ConsumerStats) -> Lags {
    stats
        .partitions
        .iter()
        .map(|p| {
            (
                p.guard.tp.partition,
                (p.high_watermark, p.last_stable_offset, p.lag, p.fetch_lag),
            )
        })
        .collect()
}

/// Finishes exactly `FINISHED[p]` records of each partition through the Batch API (a record
/// past that is failed, so it comes again and nothing is committed past it), then commits.
fn finish_some(consumer: &mut Consumer) {
    let mut done = [0i64; 2];
    wait_until("the first records of each partition finished", WAIT, || {
        let mut batch = consumer.poll(Duration::from_millis(100)).expect("poll");
        while let Some(delivery) = batch.next() {
            let p = delivery.record.partition as usize;
            if done[p] < FINISHED[p] {
                assert_eq!(delivery.record.offset, done[p], "in order, from the start");
                done[p] += 1;
                batch.complete(delivery);
            } else {
                batch.fail(delivery);
            }
        }
        done == FINISHED
    });
    consumer.commit().expect("commit");
}

/// Produce N per partition, finish k: the lag is N - k on each partition (the high watermark
/// N, the last stable offset N without transactions), through the consumer's stats and a
/// handle's snapshot alike; then, with everything finished by `run` on another thread, the
/// handle sees the lag reach 0 while the consumer is still inside `run`.
#[test]
fn lag_is_produced_minus_finished_per_partition_then_zero() {
    let (broker, topic) = broker_with_topic(BrokerKind::Kafka, "lag", 2);
    let bootstrap = broker.bootstrap();
    produce(&bootstrap, &topic);
    let group = unique_name("lag-group");
    let settings = config(&bootstrap, &group, &[("commit.interval.ms", "100")]);
    let mut consumer = Consumer::subscribe(settings, &[&topic]).expect("subscribe");
    let handle = consumer.stats_handle();

    finish_some(&mut consumer);
    let committed_now = committed(&bootstrap, &group, &topic, 2);
    assert_eq!(committed_now[&0], Some(FINISHED[0]));
    assert_eq!(committed_now[&1], Some(FINISHED[1]));
    // The handle's fetch positions are as of a poll up to 100 ms old (maybe none yet); the
    // watermarks and the committed positions, and so the lag, are live.
    for (stats, positions_published) in [(consumer.stats(), true), (handle.snapshot(), false)] {
        let lags = lags(&stats);
        assert_eq!(lags.len(), 2, "{stats}");
        for (p, (high, stable, lag, fetch_lag)) in &lags {
            let p = *p as usize;
            assert_eq!(*high, Some(PRODUCED[p]), "high watermark of {p}: {stats}");
            assert_eq!(
                *stable,
                Some(PRODUCED[p]),
                "last stable offset of {p}: {stats}"
            );
            assert_eq!(*lag, Some(PRODUCED[p] - FINISHED[p]), "lag of {p}: {stats}");
            let Some(fetch_lag) = fetch_lag.or((!positions_published).then_some(0)) else {
                panic!("no fetch lag of {p}: {stats}");
            };
            assert!(
                (0..=PRODUCED[p] - FINISHED[p]).contains(&fetch_lag),
                "fetch lag of {p} ({fetch_lag}) lies between 0 and the lag: {stats}"
            );
        }
        let line = stats.to_string();
        assert!(
            line.contains(&format!("lag=Some({})", PRODUCED[1] - FINISHED[1])),
            "the stats line shows the lag: {line}"
        );
    }

    let stop = Arc::new(AtomicBool::new(false));
    let runner = {
        let stop = stop.clone();
        thread::spawn(move || {
            consumer
                .run(&stop, |_, _| Ok::<(), std::io::Error>(()))
                .expect("run");
            consumer
        })
    };
    let caught_up = |handle: &StatsHandle| {
        let lags = lags(&handle.snapshot());
        lags.len() == 2
            && lags.iter().all(|(p, (high, _, lag, fetch_lag))| {
                *high == Some(PRODUCED[*p as usize]) && *lag == Some(0) && *fetch_lag == Some(0)
            })
    };
    wait_until("lag 0 on every partition, seen while running", WAIT, || {
        caught_up(&handle)
    });
    assert!(!runner.is_finished(), "read while the consumer runs");
    stop.store(true, Ordering::SeqCst);
    let consumer = runner.join().expect("the run thread");
    let committed_now = committed(&bootstrap, &group, &topic, 2);
    assert_eq!(committed_now[&0], Some(PRODUCED[0]));
    assert_eq!(committed_now[&1], Some(PRODUCED[1]));
    consumer.close().expect("close");
}

/// A handle is what another thread holds: it must be sendable, shareable and cloneable.
#[test]
fn a_stats_handle_is_send_sync_and_clone() {
    fn shareable<T: Send + Sync + Clone + 'static>() {}
    shareable::<StatsHandle>();
}
