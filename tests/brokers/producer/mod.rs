//! The producer on single brokers: every record once and in order per partition, read back by
//! our fetch and by librdkafka (every codec), offsets in the handles that match the log, keys on
//! the partition Java's partitioner picks, a full buffer that blocks and then fails after
//! `max.block.ms` (librdkafka's mock slows the broker down on demand), and settings refused by
//! name. [`java`]: Java's producer and consumer as the judges of ours (the partition of 10,000
//! keys, every field of what we wrote with every codec).
//!
//! Where a broker answers differently from Kafka, the test says so; Kafka's answer is asserted
//! strictly.

mod faults;

use crate::support;

mod java;
mod transactions;
mod txn_faults;
mod txn_matrix;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rebalance_guard::wire::Record;
use rebalance_guard::{
    partitioner, ErrorKind, ProduceError, Producer, ProducerConfig, ProducerRecord,
};
use support::{peer_consume, unique_name, BrokerKind, MockCluster, MockOptions};

/// A producer for `bootstrap` with `settings` on top of short test timeouts.
pub(crate) fn producer(bootstrap: &str, settings: &[(&str, &str)]) -> Producer {
    // The sender's trace (`RUST_LOG=rebalance_guard::producer=trace`) when a test is looked at.
    let _ = env_logger::builder()
        .is_test(true)
        .format_timestamp_millis()
        .try_init();
    let mut b = ProducerConfig::builder()
        .bootstrap_servers([bootstrap])
        .set("request.timeout.ms", "10000")
        .set("delivery.timeout.ms", "60000")
        .set("max.block.ms", "20000")
        .set("retry.backoff.ms", "50");
    for (k, v) in settings {
        b = b.set(k, v);
    }
    Producer::new(b.build().expect("producer config")).expect("producer")
}

/// Every partition of `topic` from offset 0 to its end, with our fetch.
pub(crate) fn read_all(bootstrap: &str, topic: &str) -> BTreeMap<i32, Vec<Record>> {
    support::fetch::read_topic(bootstrap, topic, Duration::from_secs(60))
}

/// Checks that `records` hold every `(key index, sequence)` of `expected` once, and that each
/// key's sequences appear in increasing order (a key stays on one partition, so this is the
/// partition's order for that key).
pub(crate) fn assert_once_in_order(
    what: &str,
    records: &BTreeMap<i32, Vec<Record>>,
    keys: usize,
    per_key: usize,
) {
    let mut next = vec![0usize; keys];
    let mut total = 0;
    for (p, rs) in records {
        for r in rs {
            let value = std::str::from_utf8(r.value.as_deref().unwrap_or_default()).expect("utf8");
            let (k, s) = value
                .split_once(':')
                .and_then(|(k, s)| Some((k.parse::<usize>().ok()?, s.parse::<usize>().ok()?)))
                .unwrap_or_else(|| panic!("{what}: unexpected value {value:?}"));
            assert_eq!(
                s, next[k],
                "{what}: key {k} in partition {p}: sequence {s} where {} was next \
                 (a duplicate or a reordering)",
                next[k]
            );
            next[k] += 1;
            total += 1;
        }
    }
    assert_eq!(total, keys * per_key, "{what}: records read back");
    assert!(
        next.iter().all(|n| *n == per_key),
        "{what}: every key complete"
    );
}

/// `keys * per_key` records, value `key:sequence`, keyed `acct-<key>`, in rounds over the keys.
pub(crate) fn send_keyed(
    producer: &Producer,
    topic: &str,
    keys: usize,
    per_key: usize,
) -> Vec<(usize, rebalance_guard::DeliveryHandle)> {
    let mut handles = Vec::with_capacity(keys * per_key);
    for s in 0..per_key {
        for k in 0..keys {
            let record = ProducerRecord::new(topic, format!("{k}:{s}")).key(format!("acct-{k}"));
            handles.push((k, producer.send(record).expect("send")));
        }
    }
    handles
}

fn every_record_once_in_order(kind: BrokerKind, codec: &str) {
    let broker = kind.start();
    let topic = unique_name(&format!("produce-{codec}"));
    broker.create_topic(&topic, 6);
    let bootstrap = broker.bootstrap();
    let producer = producer(
        &bootstrap,
        &[("compression.type", codec), ("batch.size", "4096")],
    );
    let handles = send_keyed(&producer, &topic, 50, 100);
    producer.flush().expect("flush");
    let records = read_all(&bootstrap, &topic);
    assert_once_in_order(&format!("{kind:?} {codec}"), &records, 50, 100);
    // The handles' offsets are the log's: record i of a partition at offset i.
    for (k, h) in &handles {
        let m = h.try_result().expect("settled").expect("acknowledged");
        assert_eq!(
            m.partition,
            partitioner::partition_for_key(format!("acct-{k}").as_bytes(), 6)
        );
        let stored = &records[&m.partition][m.offset as usize];
        assert_eq!(stored.offset, m.offset);
        assert_eq!(stored.key.as_deref(), Some(format!("acct-{k}").as_bytes()));
    }
    producer.close().expect("close");
}

fn uncompressed(kind: BrokerKind) {
    every_record_once_in_order(kind, "none");
}

crate::on_brokers! {
    kafka { uncompressed }
    kafka3 { uncompressed }
    mock { uncompressed }
    tansu { uncompressed }
}

/// Every codec, written by us and read by us and by librdkafka (confluent-kafka).
mod codecs {
    use super::*;

    fn read_by_librdkafka(codec: &str) {
        let broker = BrokerKind::Kafka.start();
        let topic = unique_name(&format!("produce-read-{codec}"));
        broker.create_topic(&topic, 3);
        let bootstrap = broker.bootstrap();
        every_record_once_in_order(BrokerKind::Kafka, codec);
        let producer = producer(&bootstrap, &[("compression.type", codec)]);
        for i in 0..300 {
            let r = ProducerRecord::new(&topic, format!("v-{i}"))
                .key(format!("k-{i}"))
                .header("h", format!("{i}"));
            producer.send(r).expect("send");
        }
        producer.close().expect("close");
        let read = peer_consume(&bootstrap, &topic, 300, &[]);
        assert_eq!(read.len(), 300, "{codec}: librdkafka read them all");
        for r in &read {
            let i = r
                .key
                .as_deref()
                .and_then(|k| k.strip_prefix("k-"))
                .expect("key");
            assert_eq!(r.value.as_deref(), Some(format!("v-{i}").as_bytes()));
            assert_eq!(
                r.headers,
                vec![("h".to_string(), Some(i.as_bytes().to_vec()))]
            );
        }
    }

    #[test]
    fn gzip() {
        read_by_librdkafka("gzip");
    }

    #[test]
    fn snappy() {
        read_by_librdkafka("snappy");
    }

    #[test]
    fn lz4() {
        read_by_librdkafka("lz4");
    }

    #[test]
    fn zstd() {
        read_by_librdkafka("zstd");
    }
}

/// `send` blocks while `buffer.memory` is full and fails after `max.block.ms`, with nothing of
/// the refused record buffered; once the broker answers again every record sent is written. The
/// mock's round-trip time (a fault only it injects on demand) holds the Produce answers.
#[test]
fn a_full_buffer_blocks_then_fails_after_max_block() {
    let mock = MockCluster::start(MockOptions::default());
    let topic = unique_name("produce-full");
    mock.must(&format!("create_topic {topic} 1 1"));
    let producer = producer(
        mock.bootstrap(),
        &[
            ("buffer.memory", "16384"),
            ("batch.size", "2048"),
            ("linger.ms", "0"),
            ("max.block.ms", "500"),
        ],
    );
    producer
        .send_and_wait(ProducerRecord::new(&topic, "warm-up"))
        .expect("warm-up");
    mock.must("rtt 1 3000");
    let started = Instant::now();
    let mut handles = Vec::new();
    let refused = loop {
        assert!(started.elapsed() < Duration::from_secs(10), "never blocked");
        match producer.send(ProducerRecord::new(&topic, vec![b'x'; 900])) {
            Ok(h) => handles.push(h),
            Err(e) => break e,
        }
    };
    assert!(
        matches!(refused, ProduceError::BufferFull { .. }),
        "{refused}"
    );
    assert_eq!(refused.kind(), ErrorKind::Network);
    assert!(refused.to_string().contains("max.block.ms"), "{refused}");
    let blocked = started.elapsed();
    assert!(blocked >= Duration::from_millis(500), "blocked {blocked:?}");
    mock.must("rtt 1 0");
    producer.flush().expect("flush");
    for h in &handles {
        h.wait().expect("written once the broker answers");
    }
    let read = read_all(mock.bootstrap(), &topic);
    assert_eq!(
        read[&0].len(),
        handles.len() + 1,
        "every accepted record, none refused"
    );
    producer.close().expect("close");
}

/// A record for a partition the topic lacks, or larger than `max.request.size`, is refused at
/// `send` with the reason; the producer goes on.
#[test]
fn impossible_records_are_refused_at_send() {
    let broker = BrokerKind::Kafka.start();
    let topic = unique_name("produce-refused");
    broker.create_topic(&topic, 2);
    let producer = producer(&broker.bootstrap(), &[("max.request.size", "10000")]);
    let e = producer
        .send(ProducerRecord::new(&topic, "v").partition(7))
        .expect_err("no partition 7");
    assert!(
        matches!(e, ProduceError::UnknownPartition { partitions: 2, .. }),
        "{e}"
    );
    let e = producer
        .send(ProducerRecord::new(&topic, vec![0u8; 20_000]))
        .expect_err("too large");
    assert!(matches!(e, ProduceError::RecordTooLarge { .. }), "{e}");
    let m = producer
        .send_and_wait(ProducerRecord::new(&topic, "v").partition(1))
        .expect("a good record");
    assert_eq!((m.partition, m.offset), (1, 0));
    producer.close().expect("close");
    let e = ProducerConfig::builder()
        .bootstrap_servers([broker.bootstrap()])
        .set("session.timeout.ms", "10000")
        .build()
        .expect_err("a consumer setting");
    assert_eq!(e.setting(), Some("session.timeout.ms"));
}

/// Without idempotence the other acknowledgements work as Java's: `acks=1` answers with
/// offsets, `acks=0` gets no answer at all (offset -1 in every handle) and the records are
/// there all the same.
#[test]
fn acks_one_and_zero_without_idempotence() {
    let broker = BrokerKind::Kafka.start();
    let bootstrap = broker.bootstrap();
    for acks in ["1", "0"] {
        let topic = unique_name(&format!("produce-acks{acks}"));
        broker.create_topic(&topic, 2);
        let producer = producer(
            &bootstrap,
            &[("enable.idempotence", "false"), ("acks", acks)],
        );
        // Metadata first: acks=0 would not notice a partition that is not ready yet.
        producer
            .send_and_wait(
                ProducerRecord::new(&topic, "0:0")
                    .key("acct-0")
                    .partition(0),
            )
            .ok();
        let records = read_all(&bootstrap, &topic);
        let warm = records.values().map(Vec::len).sum::<usize>();
        let handles: Vec<_> = (0..200)
            .map(|i| {
                producer
                    .send(ProducerRecord::new(&topic, format!("v{i}")).partition(i % 2))
                    .expect("send")
            })
            .collect();
        producer.flush().expect("flush");
        for h in &handles {
            let m = h.wait().expect("acknowledged");
            if acks == "0" {
                assert_eq!(m.offset, -1, "acks=0 learns no offset");
            } else {
                assert!(m.offset >= 0);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let n: usize = read_all(&bootstrap, &topic).values().map(Vec::len).sum();
            if n == warm + 200 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "acks={acks}: {n} of {} records",
                warm + 200
            );
        }
        producer.close().expect("close");
    }
}

/// The producer is shared between threads as Java's is.
#[test]
fn a_producer_is_shared_between_threads() {
    fn shareable<T: Send + Sync>() {}
    shareable::<Producer>();
    let broker = BrokerKind::Kafka.start();
    let topic = unique_name("produce-threads");
    broker.create_topic(&topic, 3);
    let producer = std::sync::Arc::new(producer(&broker.bootstrap(), &[]));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let producer = std::sync::Arc::clone(&producer);
            let topic = topic.clone();
            std::thread::spawn(move || {
                for s in 0..250 {
                    let r =
                        ProducerRecord::new(&topic, format!("{t}:{s}")).key(format!("acct-{t}"));
                    producer.send(r).expect("send");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("sender thread");
    }
    producer.flush().expect("flush");
    assert_once_in_order("4 threads", &read_all(&broker.bootstrap(), &topic), 4, 250);
}

/// This process's CPU time (user + system, in clock ticks), from `/proc/self/stat` (fields
/// 14 and 15; the name in parentheses may hold spaces, so counted from its end).
#[cfg(target_os = "linux")]
fn process_cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    let after = stat
        .rfind(')')
        .and_then(|at| stat.get(at + 2..))
        .expect("/proc/self/stat: the fields after the name");
    let fields: Vec<&str> = after.split_whitespace().collect();
    // After the name the state is field 3, so utime (14) and stime (15) are at 11 and 12.
    let field = |i: usize| -> u64 {
        fields
            .get(i)
            .and_then(|f| f.parse().ok())
            .expect("/proc/self/stat: utime and stime")
    };
    field(11) + field(12)
}

/// A producer that has sent nothing yet (a transactional consumer's, while its group joins;
/// a service's, waiting for its first request) must sleep, not spin: its sender thread once
/// woke at once on every turn (a metadata refresh due with no topic to ask about) and burnt a
/// core until the first `send`. Measured: the process's CPU time over one idle second (the
/// test thread asleep, the producer's threads the only others), before the first record and
/// after it.
#[cfg(target_os = "linux")]
#[test]
fn an_idle_producer_does_not_spin() {
    let broker = BrokerKind::Kafka.start();
    let topic = unique_name("produce-idle");
    broker.create_topic(&topic, 1);
    let idle_second = |producer: &Producer, when: &str| {
        let before = process_cpu_ticks();
        std::thread::sleep(Duration::from_secs(1));
        let after = process_cpu_ticks();
        // A spinning thread takes about 100 ticks a second (less on a loaded machine, never
        // near 10); a sleeping one, 0 or 1.
        assert!(
            after - before < 10,
            "{when}: an idle producer used {} ticks of CPU in one second (its sender thread spins)",
            after - before
        );
        producer.flush().expect("flush");
    };
    let plain = producer(&broker.bootstrap(), &[]);
    idle_second(&plain, "before the first send");
    plain
        .send(ProducerRecord::new(&topic, "one"))
        .expect("send")
        .wait()
        .expect("delivered");
    idle_second(&plain, "after the first record");
}

/// The dead-letter topic writes through the producer, but a missing dead-letter topic is an
/// error within one request timeout (a typo must not create a topic, whatever the broker's
/// `auto.create.topics.enable`), while a producer of its own may create one where the broker
/// allows, as Java's does.
#[test]
fn a_missing_dead_letter_topic_is_an_error_not_a_new_topic() {
    use rebalance_guard::{ConsumerConfig, DeadLetterTopic};
    let broker = BrokerKind::Kafka.start();
    let bootstrap = broker.bootstrap();
    let missing = unique_name("dlq-typo");
    let config = ConsumerConfig::builder()
        .bootstrap_servers([bootstrap.as_str()])
        .group_id(unique_name("dlq-group"))
        .set("request.timeout.ms", "2000")
        .build()
        .expect("config");
    let started = Instant::now();
    let e = DeadLetterTopic::connect(&config, &missing).expect_err("no such topic");
    assert!(matches!(e, ProduceError::MetadataTimeout { .. }), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let mut client = rebalance_guard::wire::Client::connect(
        rebalance_guard::wire::ClientConfig::from_bootstrap_str(&bootstrap),
    )
    .expect("connect");
    let md = client.metadata(&[missing.as_str()]).expect("metadata");
    assert!(
        md.iter()
            .all(|t| t.name.as_ref() != missing || t.error.is_some()),
        "the dead-letter producer created {missing}"
    );
}

/// Rule 2 of the sender: a partition gets one batch at a time until its leader acknowledged one.
/// A topic created an instant earlier is where it matters: its leaders refuse the first batches
/// (NOT_LEADER_OR_FOLLOWER) while they are not ready, and a leader with no state for a producer
/// takes any sequence as the first, so a second batch already on the wire would be written
/// before the refused first (seen on Kafka 4.4: the second batch at offset 0). Every record of
/// each partition must sit at the offset of its place in the send order.
#[test]
fn a_new_topics_first_batches_keep_their_order() {
    let broker = BrokerKind::Kafka.start();
    let bootstrap = broker.bootstrap();
    let mut admin = rebalance_guard::wire::Client::connect(
        rebalance_guard::wire::ClientConfig::from_bootstrap_str(&bootstrap),
    )
    .expect("connect");
    for round in 0..3 {
        let topic = unique_name(&format!("produce-fresh-{round}"));
        admin
            .create_topics(&[(topic.as_str(), 12, 1)])
            .expect("create");
        let producer = producer(&bootstrap, &[("batch.size", "2048")]);
        let handles: Vec<_> = (0..12_000)
            .map(|i| {
                let p = i % 12;
                let r = ProducerRecord::new(&topic, format!("{i}")).partition(p);
                (i, producer.send(r).expect("send"))
            })
            .collect();
        producer.flush().expect("flush");
        let mut next = [0i64; 12];
        for (i, h) in &handles {
            let m = h.wait().expect("acknowledged");
            assert_eq!(
                m.offset, next[m.partition as usize],
                "round {round}: record {i} of partition {} out of its send order",
                m.partition
            );
            next[m.partition as usize] += 1;
        }
        producer.close().expect("close");
    }
}
