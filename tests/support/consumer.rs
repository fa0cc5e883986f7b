//! Helpers shared by the consumer tests: a configuration with fast-rebalance settings, a bounded
//! wait, and the committed offsets as the broker reports them.

use std::collections::BTreeMap;
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rebalance_guard::consumer::ConsumerConfig;
use rebalance_guard::wire::{Client, ClientConfig, ProduceRecord};
use rebalance_guard::{Producer, ProducerConfig, ProducerRecord, TopicPartition};

use super::{unique_name, Broker, BrokerKind, FAST_REBALANCE};

/// A consumer configuration for tests: earliest reset, the group timings of [`FAST_REBALANCE`],
/// short fetch waits, `range`; `extra` overrides any of it.
pub fn config(bootstrap: &str, group: &str, extra: &[(&str, &str)]) -> ConsumerConfig {
    let mut props: Vec<(String, String)> = vec![
        ("bootstrap.servers".into(), bootstrap.into()),
        ("group.id".into(), group.into()),
        ("auto.offset.reset".into(), "earliest".into()),
        (
            "session.timeout.ms".into(),
            FAST_REBALANCE.session_timeout_ms.to_string(),
        ),
        (
            "heartbeat.interval.ms".into(),
            FAST_REBALANCE.heartbeat_interval_ms.to_string(),
        ),
        (
            "max.poll.interval.ms".into(),
            FAST_REBALANCE.max_poll_interval_ms.to_string(),
        ),
        ("fetch.max.wait.ms".into(), "100".into()),
        ("partition.assignment.strategy".into(), "range".into()),
    ];
    for (k, v) in extra {
        props.retain(|(name, _)| name != k);
        props.push((k.to_string(), v.to_string()));
    }
    ConsumerConfig::from_properties(props).expect("valid test configuration")
}

/// A consumer configuration for `group.protocol=consumer` (KIP-848) tests: earliest reset,
/// short fetch waits, and none of the settings the broker owns under that protocol
/// (`session.timeout.ms`, `heartbeat.interval.ms`, `partition.assignment.strategy` are refused
/// with it; the shared broker runs `group.consumer.heartbeat.interval.ms=500` and
/// `group.consumer.session.timeout.ms=6000`); `extra` overrides any of it.
pub fn consumer_protocol_config(
    bootstrap: &str,
    group: &str,
    extra: &[(&str, &str)],
) -> ConsumerConfig {
    let mut props: Vec<(String, String)> = vec![
        ("bootstrap.servers".into(), bootstrap.into()),
        ("group.id".into(), group.into()),
        ("group.protocol".into(), "consumer".into()),
        ("auto.offset.reset".into(), "earliest".into()),
        (
            "max.poll.interval.ms".into(),
            FAST_REBALANCE.max_poll_interval_ms.to_string(),
        ),
        ("fetch.max.wait.ms".into(), "100".into()),
    ];
    for (k, v) in extra {
        props.retain(|(name, _)| name != k);
        props.push((k.to_string(), v.to_string()));
    }
    ConsumerConfig::from_properties(props).expect("valid test configuration")
}

/// Polls `done` until it holds; panics naming `what` after `timeout`.
pub fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(50));
    }
}

/// The group's committed offset of each partition `0..partitions` of `topic`, read back with
/// OffsetFetch on a client of its own.
pub fn committed(
    bootstrap: &str,
    group: &str,
    topic: &str,
    partitions: i32,
) -> BTreeMap<i32, Option<i64>> {
    committed_with_metadata(bootstrap, group, topic, partitions)
        .into_iter()
        .map(|(partition, (offset, _))| (partition, offset))
        .collect()
}

/// The committed offset and metadata of each partition `0..partitions`, read back with
/// OffsetFetch on a client of its own.
pub fn committed_with_metadata(
    bootstrap: &str,
    group: &str,
    topic: &str,
    partitions: i32,
) -> BTreeMap<i32, (Option<i64>, Option<String>)> {
    let mut client = Client::connect(ClientConfig::from_bootstrap_str(bootstrap)).unwrap();
    let tps: Vec<_> = (0..partitions)
        .map(|p| TopicPartition::new(topic, p))
        .collect();
    client
        .offset_fetch(group, &tps)
        .unwrap()
        .into_iter()
        .map(|c| (c.tp.partition, (c.offset, c.metadata)))
        .collect()
}

/// Produces `count` records to each partition `0..partitions` of `topic` with confluent-kafka.
pub fn produce_to_each_partition(bootstrap: &str, topic: &str, partitions: i32, count: usize) {
    for p in 0..partitions {
        super::peer_produce(bootstrap, topic, count, &["--partition", &p.to_string()]);
    }
}

/// The run's shared broker of `kind` with a new topic of `partitions` partitions, named after
/// `prefix`.
pub fn broker_with_topic(
    kind: BrokerKind,
    prefix: &str,
    partitions: u32,
) -> (Box<dyn Broker>, String) {
    let topic = unique_name(prefix);
    let broker = kind.start();
    broker.create_topic(&topic, partitions);
    (broker, topic)
}

/// Records of the given values, without keys, headers or timestamps.
pub fn value_records(values: impl IntoIterator<Item = String>) -> Vec<ProduceRecord> {
    values
        .into_iter()
        .map(|value| ProduceRecord {
            key: None,
            value: Some(Bytes::from(value)),
            headers: Vec::new(),
            timestamp: None,
        })
        .collect()
}

/// Produces `records` to `tp` with the crate's idempotent producer (on `client`'s brokers), in
/// order, waiting up to 20 s for a new topic's leader; panics with `context: error` after. The
/// offset of the first record (the others follow it: one writer, one partition, in order).
pub fn produce_until_accepted(
    client: &mut Client,
    tp: &TopicPartition,
    records: &[ProduceRecord],
    context: &str,
) -> i64 {
    let bootstrap = client.config().bootstrap.join(",");
    let producer = Producer::new(
        ProducerConfig::builder()
            .bootstrap_servers([bootstrap.as_str()])
            .set("linger.ms", "50")
            .set("request.timeout.ms", "10000")
            .set("delivery.timeout.ms", "20000")
            .set("max.block.ms", "20000")
            .set("retry.backoff.ms", "200")
            .build()
            .unwrap_or_else(|e| panic!("{context}: {e}")),
    )
    .unwrap_or_else(|e| panic!("{context}: {e}"));
    let handles: Vec<_> = records
        .iter()
        .map(|r| {
            let mut record =
                ProducerRecord::new(tp.topic.to_string(), r.value.clone().unwrap_or_default())
                    .partition(tp.partition);
            if let Some(key) = &r.key {
                record = record.key(key.clone());
            }
            for (k, v) in &r.headers {
                record = record.header(k.clone(), v.clone().unwrap_or_default());
            }
            if let Some(ts) = r.timestamp {
                record = record.timestamp(ts);
            }
            producer
                .send(record)
                .unwrap_or_else(|e| panic!("{context}: {e}"))
        })
        .collect();
    producer
        .flush()
        .unwrap_or_else(|e| panic!("{context}: {e}"));
    let offsets: Vec<i64> = handles
        .iter()
        .map(|h| h.wait().unwrap_or_else(|e| panic!("{context}: {e}")).offset)
        .collect();
    producer
        .close()
        .unwrap_or_else(|e| panic!("{context}: {e}"));
    offsets.first().copied().unwrap_or(-1)
}

/// Produces `records` to `tp` as one batch through `client`'s own one-shot produce (its
/// connection, credentials and TLS: the wire tests of secured listeners), retrying for up to
/// 20 s while a new topic's leader is still electing; panics with `context: error` after. The
/// base offset the broker assigned. Not idempotent: a retry after a lost answer could write the
/// batch twice, which these tests would see as offsets they did not expect.
pub fn produce_through_client(
    client: &mut Client,
    tp: &TopicPartition,
    records: &[ProduceRecord],
    context: &str,
) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match client.produce(tp, records) {
            Ok(base) => break base,
            Err(e) if Instant::now() < deadline => {
                eprintln!("produce not yet possible: {e}");
                thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("{context}: {e}"),
        }
    }
}

/// Runs `f` on a thread and waits for it at most `bound`: a run that never returns fails the test
/// instead of hanging it.
pub fn within<T: Send + 'static>(bound: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(bound)
        .unwrap_or_else(|_| panic!("did not return within {bound:?}"))
}
