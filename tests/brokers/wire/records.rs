//! The wire client against real brokers: records written by confluent-kafka (every codec, with
//! headers) are fetched and decoded exactly, records we produce are read by confluent-kafka,
//! fetches that start inside a batch, empty partitions and earliest/latest offsets.
//!
//! Every test runs against real Apache Kafka 4.x (the run's shared broker, unique topic names),
//! librdkafka's mock cluster and tansu (a broker of its own per test; see `support`). Where the
//! mock or tansu answer differently from Kafka, the test says so and Kafka's answer is the one
//! asserted strictly. Needs `scripts/setup-test-env`.

use crate::support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::{self as msg, fetch_request, ApiKey, BrokerId, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{Compression, RecordBatchDecoder};
use rebalance_guard::wire::{
    Client, ClientConfig, FetchConfig, FetchPosition, IsolationLevel, OffsetSpec, ProduceRecord,
    Record,
};
use rebalance_guard::TopicPartition;
use support::fetch::fetch_answered;
use support::{peer_consume, peer_key, peer_produce, peer_value, unique_name, Broker, BrokerKind};

fn client(broker: &dyn Broker) -> Client {
    let mut cfg = ClientConfig::from_bootstrap_str(&broker.bootstrap());
    cfg.connection.request_timeout = Duration::from_secs(10);
    Client::connect(cfg).unwrap_or_else(|e| panic!("{:?}: connect: {e}", broker.kind()))
}

fn fetch_cfg() -> FetchConfig {
    FetchConfig {
        max_wait: Duration::from_millis(100),
        ..FetchConfig::default()
    }
}

/// Reads every partition of `topic` from `start` (per partition) up to its latest offset.
fn read_to_end(
    c: &mut Client,
    topic: &str,
    start: &BTreeMap<i32, i64>,
) -> BTreeMap<i32, Vec<Record>> {
    let partitions = c.partitions(topic).expect("partitions");
    let tps: Vec<TopicPartition> = partitions
        .iter()
        .map(|&p| TopicPartition::new(topic, p))
        .collect();
    // The end is ListOffsets(latest), raised to the high watermark that Fetch reports: tansu's
    // ListOffsets answers the last batch's base offset + 1 rather than the log end offset
    // (confluent-kafka's get_watermark_offsets sees the same), while its Fetch high watermark
    // is right.
    let mut end = c
        .list_offsets(&tps, OffsetSpec::Latest, IsolationLevel::ReadUncommitted)
        .expect("latest offsets");
    let mut positions: Vec<FetchPosition> = tps
        .iter()
        .map(|tp| FetchPosition {
            tp: tp.clone(),
            offset: start.get(&tp.partition).copied().unwrap_or(0),
        })
        .collect();
    let mut out: BTreeMap<i32, Vec<Record>> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut first = true;
    loop {
        if !first {
            positions.retain(|p| p.offset < end[&p.tp]);
        }
        first = false;
        if positions.is_empty() {
            return out;
        }
        assert!(
            Instant::now() < deadline,
            "timed out; still at {positions:?}"
        );
        let fetched = c.fetch(&positions, &fetch_cfg()).expect("fetch");
        for f in fetched {
            if let Some(e) = &f.error {
                panic!("fetch error for {}: {e}", f.tp);
            }
            let pos = positions
                .iter_mut()
                .find(|p| p.tp == f.tp)
                .expect("position");
            pos.offset = f.next_offset;
            if let Some(e) = end.get_mut(&f.tp) {
                *e = (*e).max(f.high_watermark);
            }
            out.entry(f.tp.partition).or_default().extend(f.records);
        }
    }
}

fn check_peer_records(
    kind: BrokerKind,
    got: &BTreeMap<i32, Vec<Record>>,
    count: usize,
    size: usize,
    headers: bool,
) {
    let mut seen = vec![false; count];
    for (p, records) in got {
        for (i, r) in records.iter().enumerate() {
            assert_eq!(
                r.offset, i as i64,
                "{kind:?}: offsets dense in partition {p}"
            );
            assert_eq!(r.partition, *p);
            let key = std::str::from_utf8(r.key.as_deref().expect("key")).expect("utf8 key");
            let n: usize = key
                .strip_prefix("k-")
                .and_then(|s| s.parse().ok())
                .expect("key index");
            assert_eq!(key, peer_key("k", n));
            assert!(!seen[n], "{kind:?}: record {n} twice");
            seen[n] = true;
            assert_eq!(
                r.value.as_deref(),
                Some(&peer_value(n, size)[..]),
                "{kind:?}: value {n}"
            );
            if headers {
                assert_eq!(
                    r.headers,
                    vec![
                        ("h1".to_string(), Some(Bytes::from(n.to_string()))),
                        ("h2".to_string(), Some(Bytes::new())),
                    ],
                    "{kind:?}: headers of {n}"
                );
            } else {
                assert!(r.headers.is_empty());
            }
            assert!(r.timestamp > 0);
        }
    }
    assert!(seen.iter().all(|s| *s), "{kind:?}: missing records");
}

fn codecs_and_headers(kind: BrokerKind) {
    let broker = kind.start();
    let mut c = client(&*broker);
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let topic = unique_name(&format!("codec-{codec}"));
        broker.create_topic(&topic, 3);
        peer_produce(
            &broker.bootstrap(),
            &topic,
            200,
            &[
                "--headers",
                "--compression",
                codec,
                "--size",
                "100",
                "--batch",
            ],
        );
        let got = read_to_end(&mut c, &topic, &BTreeMap::new());
        check_peer_records(kind, &got, 200, 100, true);
        // The broker really stored batches with this codec (attributes of the raw batches).
        let want = match codec {
            "gzip" => Compression::Gzip,
            "snappy" => Compression::Snappy,
            "lz4" => Compression::Lz4,
            "zstd" => Compression::Zstd,
            _ => Compression::None,
        };
        for p in 0..3 {
            let tp = TopicPartition::new(topic.as_str(), p);
            let mut data = raw_fetch(&mut c, &tp, 0, 0).records.unwrap_or_default();
            let batches = RecordBatchDecoder::decode_batch_info(&mut data).expect("batch headers");
            assert!(!batches.is_empty(), "{kind:?} {codec}: no batches in {tp}");
            assert!(
                batches.iter().all(|b| b.compression == want),
                "{kind:?} {codec}: {batches:?}"
            );
        }
    }
}

/// One Fetch sent directly through our connection to the leader (no decoding of records), to
/// look at what the broker really returns.
fn raw_fetch(c: &mut Client, tp: &TopicPartition, offset: i64, isolation: i8) -> PartitionData {
    let leader = c.leader(tp).expect("leader");
    let conn = c.connection(leader).expect("connection");
    let version = conn.version_for(ApiKey::Fetch).expect("fetch version");
    let req = msg::FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(500)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_isolation_level(isolation)
        .with_topics(vec![fetch_request::FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_string(tp.topic.to_string())))
            .with_partitions(vec![fetch_request::FetchPartition::default()
                .with_partition(tp.partition)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1 << 20)])]);
    let resp = conn.send(&req, version).expect("raw fetch");
    resp.responses
        .into_iter()
        .flat_map(|t| t.partitions)
        .next()
        .expect("partition in response")
}

fn single_partition_offsets(c: &mut Client, tp: &TopicPartition) -> (i64, i64) {
    let tps = [tp.clone()];
    let e = c
        .list_offsets(&tps, OffsetSpec::Earliest, IsolationLevel::ReadUncommitted)
        .expect("earliest");
    let l = c
        .list_offsets(&tps, OffsetSpec::Latest, IsolationLevel::ReadUncommitted)
        .expect("latest");
    (e[tp], l[tp])
}

/// Records we produce (several batches, headers, null key and value) are read back exactly by
/// confluent-kafka.
fn our_records_read_by_confluent_kafka(kind: BrokerKind) {
    let broker = kind.start();
    let mut c = client(&*broker);
    let topic = unique_name("ours");
    broker.create_topic(&topic, 2);
    let mut expected = Vec::new();
    for p in 0..2 {
        let tp = TopicPartition::new(topic.as_str(), p);
        for chunk in 0..3 {
            let records: Vec<ProduceRecord> = (0..5)
                .map(|i| {
                    let n = chunk * 5 + i;
                    ProduceRecord {
                        key: (n != 3).then(|| Bytes::from(format!("key-{p}-{n}"))),
                        value: (n != 4).then(|| Bytes::from(format!("value-{p}-{n}"))),
                        headers: vec![
                            ("trace".to_string(), Some(Bytes::from(format!("t{n}")))),
                            ("empty".to_string(), None),
                        ],
                        timestamp: Some(1_700_000_000_000 + n as i64),
                    }
                })
                .collect();
            let base = c.produce(&tp, &records).expect("produce");
            assert_eq!(base, chunk as i64 * 5, "{kind:?}: base offset");
            expected.extend(
                records
                    .into_iter()
                    .enumerate()
                    .map(|(i, r)| (p, chunk as i64 * 5 + i as i64, r)),
            );
        }
    }
    let got = peer_consume(
        &broker.bootstrap(),
        &topic,
        expected.len(),
        &["--timeout-s", "30"],
    );
    assert_eq!(got.len(), expected.len(), "{kind:?}");
    for (p, off, r) in &expected {
        let g = got
            .iter()
            .find(|g| g.partition == *p && g.offset == *off)
            .unwrap_or_else(|| panic!("{kind:?}: {p}/{off} missing"));
        assert_eq!(
            g.key.as_deref().map(str::as_bytes),
            r.key.as_deref(),
            "{kind:?}: key"
        );
        assert_eq!(g.value.as_deref(), r.value.as_deref(), "{kind:?}: value");
        assert_eq!(
            g.timestamp,
            r.timestamp.unwrap_or_default(),
            "{kind:?}: timestamp"
        );
        let headers: Vec<(String, Option<Vec<u8>>)> = r
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), v.as_ref().map(|b| b.to_vec())))
            .collect();
        assert_eq!(g.headers, headers, "{kind:?}: headers");
    }
}

/// One large batch from confluent-kafka; fetching from an offset inside it returns exactly the
/// records from that offset on.
fn fetch_from_middle_of_batch(kind: BrokerKind) {
    let broker = kind.start();
    let mut c = client(&*broker);
    let topic = unique_name("middle");
    broker.create_topic(&topic, 1);
    peer_produce(
        &broker.bootstrap(),
        &topic,
        100,
        &["--batch", "--partition", "0"],
    );
    let tp = TopicPartition::new(topic.as_str(), 0);
    for start in [37, 99, 0] {
        let got = read_to_end(&mut c, &topic, &BTreeMap::from([(0, start)]));
        let offsets: Vec<i64> = got
            .get(&0)
            .map(|r| r.iter().map(|r| r.offset).collect())
            .unwrap_or_default();
        assert_eq!(
            offsets,
            (start..100).collect::<Vec<_>>(),
            "{kind:?}: from {start}"
        );
        let first = &got[&0][0];
        assert_eq!(
            first.value.as_deref(),
            Some(&peer_value(start as usize, 32)[..])
        );
    }
    // The records really share a batch: ask the leader directly (raw Fetch through our
    // connection) and look at the batch headers: one batch spans offset 37.
    let mut data = raw_fetch(&mut c, &tp, 37, 0).records.expect("records");
    let batches = RecordBatchDecoder::decode_batch_info(&mut data).expect("batch headers");
    let spanning = batches
        .iter()
        .any(|b| b.min_offset < 37 && b.min_offset + i64::from(b.record_count) > 37);
    assert!(spanning, "{kind:?}: no batch spans offset 37: {batches:?}");
    // And our fetch from 37 drops the batch's earlier records.
    let f = fetch_answered(
        &mut c,
        &[FetchPosition {
            tp: tp.clone(),
            offset: 37,
        }],
        &fetch_cfg(),
    );
    assert_eq!(f.len(), 1);
    assert!(f[0].error.is_none(), "{:?}", f[0].error);
    assert_eq!(f[0].records.first().map(|r| r.offset), Some(37));
    assert_eq!(f[0].next_offset, 100);
}

/// An empty partition fetches as no records, no error, position unchanged; earliest and latest
/// offsets follow what was produced.
fn empty_partition_and_offsets(kind: BrokerKind) {
    let broker = kind.start();
    let mut c = client(&*broker);
    let topic = unique_name("offsets");
    broker.create_topic(&topic, 2);
    let p0 = TopicPartition::new(topic.as_str(), 0);
    let p1 = TopicPartition::new(topic.as_str(), 1);
    assert_eq!(single_partition_offsets(&mut c, &p0), (0, 0), "{kind:?}");
    // One record per batch: tansu's ListOffsets(latest) is the last batch's base offset + 1,
    // which is only the log end offset when batches hold one record (see `read_to_end`).
    peer_produce(
        &broker.bootstrap(),
        &topic,
        30,
        &["--partition", "0", "--flush-every", "1"],
    );
    assert_eq!(single_partition_offsets(&mut c, &p0), (0, 30), "{kind:?}");
    assert_eq!(single_partition_offsets(&mut c, &p1), (0, 0), "{kind:?}");

    let started = Instant::now();
    let f = fetch_answered(
        &mut c,
        &[
            FetchPosition {
                tp: p1.clone(),
                offset: 0,
            },
            FetchPosition {
                tp: p0.clone(),
                offset: 29,
            },
        ],
        &fetch_cfg(),
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    let r1 = f.iter().find(|f| f.tp == p1).expect("p1 result");
    assert!(r1.error.is_none(), "{kind:?}: {:?}", r1.error);
    assert!(r1.records.is_empty());
    assert_eq!(r1.next_offset, 0);
    assert_eq!(r1.high_watermark, 0);
    let r0 = f.iter().find(|f| f.tp == p0).expect("p0 result");
    assert_eq!(
        r0.records.iter().map(|r| r.offset).collect::<Vec<_>>(),
        [29]
    );
    assert_eq!(r0.high_watermark, 30);

    // Latest is the log end offset, also when the last batch holds many records. True on Kafka
    // and the mock; tansu differs (it answers the last batch's base offset + 1, here 1).
    peer_produce(
        &broker.bootstrap(),
        &topic,
        20,
        &["--partition", "1", "--batch"],
    );
    let raw = raw_fetch(&mut c, &p1, 0, 0).records.unwrap_or_default();
    let batches = RecordBatchDecoder::decode_batch_info(&mut raw.clone()).expect("batch headers");
    assert_eq!(batches.len(), 1, "{kind:?}: one batch of 20: {batches:?}");
    let (earliest, latest) = single_partition_offsets(&mut c, &p1);
    assert_eq!(earliest, 0, "{kind:?}");
    if kind == BrokerKind::Tansu {
        assert_eq!(latest, 1, "{kind:?}: tansu's latest after one batch of 20");
    } else {
        assert_eq!(latest, 20, "{kind:?}: latest after one batch of 20");
    }
}

/// With prefetch on (the default), a fetch that asks for other positions than the previous one
/// (a seek, a dropped partition) never sees data for positions it did not ask for.
fn prefetch_follows_the_callers_positions(kind: BrokerKind) {
    let broker = kind.start();
    let mut c = client(&*broker);
    let topic = unique_name("prefetch");
    broker.create_topic(&topic, 3);
    for p in 0..3 {
        peer_produce(
            &broker.bootstrap(),
            &topic,
            50,
            &["--partition", &p.to_string(), "--flush-every", "10"],
        );
    }
    let tp = |p: i32| TopicPartition::new(topic.as_str(), p);
    // One batch (10 records) per partition per fetch. The mock returns one batch however small
    // the limit; Kafka differs: it returns a batch larger than the partition limit only for the
    // first partition of the response (KIP-74) and the others empty, so on Kafka the limit is
    // the largest whole batch. (tansu ignores the limit.)
    let max_partition_bytes = if kind.is_kafka() {
        largest_batch(&mut c, &tp(0))
    } else {
        1
    };
    let cfg = FetchConfig {
        max_partition_bytes,
        ..fetch_cfg()
    };
    assert!(cfg.prefetch);
    let pos = |p: i32, o: i64| FetchPosition {
        tp: tp(p),
        offset: o,
    };
    let check = |f: &[rebalance_guard::wire::FetchedPartition], want: &[(i32, i64)]| {
        assert_eq!(f.len(), want.len(), "{kind:?}: {f:?}");
        for (p, o) in want {
            let r = f.iter().find(|r| r.tp.partition == *p).expect("partition");
            assert!(r.error.is_none(), "{kind:?}: {:?}", r.error);
            assert_eq!(r.fetch_offset, *o);
            // tansu ignores partition_max_bytes, so a partition may already be at its end (50).
            let want_first = (*o < 50).then_some(*o);
            assert_eq!(
                r.records.first().map(|r| r.offset),
                want_first,
                "{kind:?}: p{p}"
            );
            assert!(r.records.iter().all(|r| r.partition == *p));
        }
    };
    let f = c
        .fetch(&[pos(0, 0), pos(1, 0), pos(2, 0)], &cfg)
        .expect("fetch");
    check(&f, &[(0, 0), (1, 0), (2, 0)]);
    let next = |p: i32| {
        f.iter()
            .find(|r| r.tp.partition == p)
            .map(|r| r.next_offset)
            .unwrap_or(0)
    };
    assert!(next(1) > 0);
    // Seek partition 0 back, drop partition 2, continue partition 1.
    let n1 = next(1);
    let f = c.fetch(&[pos(0, 3), pos(1, n1)], &cfg).expect("fetch");
    check(&f, &[(0, 3), (1, n1)]);
    // Continue both: the prefetch for exactly these positions is used.
    let n0 = f
        .iter()
        .find(|r| r.tp.partition == 0)
        .map(|r| r.next_offset)
        .unwrap_or(0);
    let n1 = f
        .iter()
        .find(|r| r.tp.partition == 1)
        .map(|r| r.next_offset)
        .unwrap_or(0);
    let f = c.fetch(&[pos(0, n0), pos(1, n1)], &cfg).expect("fetch");
    check(&f, &[(0, n0), (1, n1)]);
    // A subset of the prefetched positions: only the asked-for partition comes back.
    let n1 = f
        .iter()
        .find(|r| r.tp.partition == 1)
        .map(|r| r.next_offset)
        .unwrap_or(0);
    let f = c.fetch(&[pos(1, n1)], &cfg).expect("fetch");
    check(&f, &[(1, n1)]);
}

/// The size in bytes of the largest record batch stored in `tp` (from a raw Fetch): the batch
/// length field at byte 8 of each batch, plus the 12 bytes before it.
fn largest_batch(c: &mut Client, tp: &TopicPartition) -> i32 {
    let data = raw_fetch(c, tp, 0, 0).records.expect("records");
    let mut at = 0;
    let mut largest = 0;
    while at + 12 <= data.len() {
        let len = i32::from_be_bytes(data[at + 8..at + 12].try_into().expect("4 bytes"));
        largest = largest.max(12 + len);
        at += 12 + len as usize;
    }
    assert!(largest > 0, "{tp}: no batch");
    largest
}

/// A transactional producer (confluent-kafka) writes a committed, an aborted and another
/// committed transaction. Transaction markers are never returned as records and positions move
/// past them. read_committed drops the aborted records when the broker lists aborted
/// transactions in its Fetch response.
///
/// Real Kafka lists them (one entry, first offset 4: the aborted transaction "b"), so on Kafka
/// the abort filtering is checked end to end: read_committed reads "aaacc". Neither the mock
/// nor tansu lists aborted transactions (confluent-kafka with `isolation.level=read_committed`
/// also reads the aborted records from both), so there the test checks that we deliver exactly
/// what the broker reports; the filtering is also unit-tested in `src/wire/records/mod.rs`
/// (`read_committed_drops_aborted_transactions`).
const TXN_PRODUCER: &str = r#"
import sys
from confluent_kafka import Producer
bootstrap, topic = sys.argv[1], sys.argv[2]
p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "txn-" + topic,
              "transaction.timeout.ms": 10000})
p.init_transactions(30)
for name, n, commit in (("a", 3, True), ("b", 4, False), ("c", 2, True)):
    p.begin_transaction()
    for i in range(n):
        p.produce(topic, key=b"%s%d" % (name.encode(), i), value=name.encode(), partition=0)
    p.flush(30)
    if commit:
        p.commit_transaction(30)
    else:
        p.abort_transaction(30)
print("done")
"#;

fn transaction_markers_are_skipped(kind: BrokerKind) {
    let broker = kind.start();
    let mut c = client(&*broker);
    let topic = unique_name("txn");
    broker.create_topic(&topic, 1);
    let out = support::venv_python_run(TXN_PRODUCER, &[&broker.bootstrap(), &topic]);
    assert_eq!(out.trim(), "done");
    let tp = TopicPartition::new(topic.as_str(), 0);
    let read = |c: &mut Client, isolation: IsolationLevel| -> (String, i64) {
        let cfg = FetchConfig {
            isolation,
            ..fetch_cfg()
        };
        let mut values = String::new();
        let mut offset = 0;
        let deadline = Instant::now() + Duration::from_secs(20);
        // 9 records + 3 markers = offsets 0..12.
        while offset < 12 && Instant::now() < deadline {
            let f = c
                .fetch(
                    &[FetchPosition {
                        tp: tp.clone(),
                        offset,
                    }],
                    &cfg,
                )
                .expect("fetch");
            assert!(f[0].error.is_none(), "{kind:?}: {:?}", f[0].error);
            for r in &f[0].records {
                values.push_str(
                    std::str::from_utf8(r.value.as_deref().unwrap_or_default()).unwrap_or("?"),
                );
            }
            offset = f[0].next_offset;
        }
        (values, offset)
    };
    let (committed, end) = read(&mut c, IsolationLevel::ReadCommitted);
    assert_eq!(end, 12, "{kind:?}: 9 records and 3 markers");
    let aborted = aborted_transactions(&mut c, &tp);
    let expected = if kind.is_kafka() {
        // Kafka: "a" at 0..=2, its marker at 3, the aborted "b" at 4..=7, its marker at 8.
        assert_eq!(
            aborted.iter().map(|a| a.first_offset).collect::<Vec<_>>(),
            [4],
            "{kind:?}: aborted transactions listed by the broker"
        );
        "aaacc"
    } else {
        // The mock and tansu differ from Kafka here: no aborted transaction is listed.
        assert!(aborted.is_empty(), "{kind:?}: now lists {aborted:?}");
        "aaabbbbcc"
    };
    assert_eq!(committed, expected, "{kind:?}");
    let (all, end) = read(&mut c, IsolationLevel::ReadUncommitted);
    assert_eq!(all, "aaabbbbcc", "{kind:?}");
    assert_eq!(end, 12, "{kind:?}");
}

/// The aborted transactions the leader reports for `tp` from offset 0 (a raw read_committed
/// Fetch, no decoding of ours).
fn aborted_transactions(
    c: &mut Client,
    tp: &TopicPartition,
) -> Vec<kafka_protocol::messages::fetch_response::AbortedTransaction> {
    raw_fetch(c, tp, 0, 1)
        .aborted_transactions
        .unwrap_or_default()
}

/// Kafka's counterpart of the mock's retention test: confluent-kafka's admin client deletes the
/// records below offset 45 (DeleteRecords, which moves the log start offset the way retention
/// does), so earliest is 45 and fetching below it is OFFSET_OUT_OF_RANGE for that partition
/// only, with the new log start offset in the answer. The mock has no DeleteRecords and tansu
/// keeps everything, so this one is Kafka only.
const DELETE_RECORDS: &str = r#"
import sys
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
bootstrap, topic, before = sys.argv[1], sys.argv[2], int(sys.argv[3])
admin = AdminClient({"bootstrap.servers": bootstrap})
for tp, fut in admin.delete_records([TopicPartition(topic, 0, before)]).items():
    print("low", fut.result(30).low_watermark)
"#;

crate::on_brokers! {
    tansu {
        codecs_and_headers,
        our_records_read_by_confluent_kafka,
        fetch_from_middle_of_batch,
        empty_partition_and_offsets,
        prefetch_follows_the_callers_positions,
        transaction_markers_are_skipped,
    }
}

mod kafka {
    use super::*;

    crate::on_brokers!(
        kafka:
        codecs_and_headers,
        our_records_read_by_confluent_kafka,
        fetch_from_middle_of_batch,
        empty_partition_and_offsets,
        prefetch_follows_the_callers_positions,
        transaction_markers_are_skipped,
    );

    #[test]
    fn earliest_offset_after_records_are_deleted() {
        let broker = BrokerKind::Kafka.start();
        let mut c = client(&*broker);
        let topic = unique_name("deleted");
        broker.create_topic(&topic, 2);
        peer_produce(
            &broker.bootstrap(),
            &topic,
            100,
            &["--partition", "0", "--flush-every", "10"],
        );
        let p0 = TopicPartition::new(topic.as_str(), 0);
        let p1 = TopicPartition::new(topic.as_str(), 1);
        assert_eq!(single_partition_offsets(&mut c, &p0), (0, 100));
        let out = support::venv_python_run(DELETE_RECORDS, &[&broker.bootstrap(), &topic, "45"]);
        assert_eq!(out.trim(), "low 45");
        assert_eq!(single_partition_offsets(&mut c, &p0), (45, 100));
        let f = c
            .fetch(
                &[
                    FetchPosition {
                        tp: p0.clone(),
                        offset: 0,
                    },
                    FetchPosition {
                        tp: p1.clone(),
                        offset: 0,
                    },
                ],
                &fetch_cfg(),
            )
            .expect("fetch");
        let r0 = f.iter().find(|r| r.tp == p0).expect("p0");
        assert_eq!(
            r0.error.as_ref().and_then(|e| e.kafka_code()),
            Some(rebalance_guard::wire::KafkaCode::OFFSET_OUT_OF_RANGE),
            "{:?}",
            r0.error
        );
        assert!(r0.records.is_empty());
        // Kafka answers an errored partition with log_start_offset -1 (unknown); the mock differs
        // and reports its earliest offset there. Our consumer resets with ListOffsets, not this.
        assert_eq!(r0.log_start_offset, -1);
        let r1 = f.iter().find(|r| r.tp == p1).expect("p1");
        assert!(r1.error.is_none(), "{:?}", r1.error);
        // The deletion split a batch (batches of 10, one flush each): the broker still returns the
        // whole batch from 40 for a fetch at 45...
        let mut data = raw_fetch(&mut c, &p0, 45, 0).records.expect("records");
        let batches = RecordBatchDecoder::decode_batch_info(&mut data).expect("batch headers");
        assert_eq!(
            batches.first().map(|b| b.min_offset),
            Some(40),
            "{batches:?}"
        );
        // ...and reading from the new earliest offset starts exactly there.
        let got = read_to_end(&mut c, &topic, &BTreeMap::from([(0, 45), (1, 0)]));
        assert_eq!(
            got.get(&0)
                .map(|r| r.iter().map(|r| r.offset).collect::<Vec<_>>())
                .unwrap_or_default(),
            (45..100).collect::<Vec<_>>()
        );
        assert_eq!(got[&0][0].value.as_deref(), Some(&peer_value(45, 32)[..]));
    }
}

mod mock {
    use super::*;

    crate::on_brokers!(
        mock:
        codecs_and_headers,
        our_records_read_by_confluent_kafka,
        fetch_from_middle_of_batch,
        empty_partition_and_offsets,
        prefetch_follows_the_callers_positions,
        transaction_markers_are_skipped,
    );

    /// The mock keeps about 45,000 records of 100 bytes per partition and drops older segments, so
    /// after 60,000 records the earliest offset is above 0 and fetching below it is
    /// OFFSET_OUT_OF_RANGE, reported for that partition only. Mock only: tansu keeps everything.
    #[test]
    fn earliest_offset_after_old_segments_are_dropped() {
        let broker = BrokerKind::Mock.start();
        let mut c = client(&*broker);
        let topic = unique_name("retention");
        broker.create_topic(&topic, 2);
        peer_produce(
            &broker.bootstrap(),
            &topic,
            60_000,
            &["--partition", "0", "--size", "100", "--timeout-s", "90"],
        );
        let p0 = TopicPartition::new(topic.as_str(), 0);
        let p1 = TopicPartition::new(topic.as_str(), 1);
        let (earliest, latest) = single_partition_offsets(&mut c, &p0);
        assert_eq!(latest, 60_000);
        assert!(earliest > 0 && earliest < latest, "earliest {earliest}");
        let f = c
            .fetch(
                &[
                    FetchPosition {
                        tp: p0.clone(),
                        offset: 0,
                    },
                    FetchPosition {
                        tp: p1.clone(),
                        offset: 0,
                    },
                ],
                &fetch_cfg(),
            )
            .expect("fetch");
        let r0 = f.iter().find(|r| r.tp == p0).expect("p0");
        assert_eq!(
            r0.error.as_ref().and_then(|e| e.kafka_code()),
            Some(rebalance_guard::wire::KafkaCode::OFFSET_OUT_OF_RANGE),
            "{:?}",
            r0.error
        );
        assert_eq!(r0.log_start_offset, earliest);
        let r1 = f.iter().find(|r| r.tp == p1).expect("p1");
        assert!(r1.error.is_none(), "{:?}", r1.error);
        // Fetching from the earliest offset works.
        let f = c
            .fetch(
                &[FetchPosition {
                    tp: p0.clone(),
                    offset: earliest,
                }],
                &fetch_cfg(),
            )
            .expect("fetch");
        assert_eq!(f[0].records.first().map(|r| r.offset), Some(earliest));
    }
}
