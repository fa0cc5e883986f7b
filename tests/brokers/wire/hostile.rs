//! A hostile broker: the consumer survives every attack of issue 13 with bounded memory, and
//! commits nothing for it.
//!
//! A tampering proxy on 127.0.0.1 stands in front of the shared Apache Kafka broker. It forwards
//! the real handshake and group traffic (ApiVersions, Metadata, FindCoordinator, JoinGroup,
//! SyncGroup, OffsetFetch, ...), rewriting the broker addresses in Metadata and FindCoordinator
//! answers to its own so that every connection of the consumer (the heartbeat thread's too)
//! passes through it. Armed with one attack, it replaces the next answer of the attacked API
//! with hostile bytes (correct frame, header and correlation id), once.
//!
//! Each test then requires, in order: the consumer reports an error (from `poll`/`subscribe`,
//! or as a fetch error in its stats); the tier's counting allocator (`counting_alloc`) saw the live
//! heap grow by less than [`HEAP_BOUND`] from the moment the attack was armed; and once real
//! records are produced, the consumer (reconnected) processes exactly those and commits exactly
//! their count: no offset comes from the hostile answer. Each peak is printed
//! (`--no-capture` shows it). The attack that needs no broker (a 5-byte array bomb handed to
//! the decoder directly) is `offline::wire::hostile`.

use crate::support;

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    self as msg, fetch_response, metadata_response, ApiKey, BrokerId, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use rebalance_guard::consumer::{Consumer, ConsumerError};
use rebalance_guard::wire::{
    Client, ClientConfig, DecodeBudget, ProduceRecord, MAX_METADATA_BROKERS,
};
use rebalance_guard::TopicPartition;
use support::consumer::{committed, config};
use support::{unique_name, BrokerKind};

// The tier's counting allocator: live bytes and their peak, over all threads.
use crate::counting_alloc::{LIVE, PEAK};

/// How much the live heap may grow over an attack. The hostile answers are at most a few
/// hundred KiB; what the client may add on top is its fixed buffers (1 MiB read chunks) and the
/// decode of a bounded frame (a decompression bomb may also use the per-response decode budget).
/// Without the bounds, each attack asks for hundreds of MiB or more, or aborts the process.
const HEAP_BOUND: usize = 64 * 1024 * 1024;

// ---------------------------------------------------------------------------
// The tampering proxy.
// ---------------------------------------------------------------------------

/// What the proxy does to the next answer of one API.
#[derive(Clone)]
enum Attack {
    /// Replace the answer's body (after the response header) with these bytes, built from the
    /// request's version.
    Body(ApiKey, Arc<dyn Fn(i16) -> Vec<u8> + Send + Sync>),
    /// Forward the real answer, one byte per `every`.
    Trickle(ApiKey, Duration),
}

impl Attack {
    fn api(&self) -> ApiKey {
        match self {
            Attack::Body(api, _) | Attack::Trickle(api, _) => *api,
        }
    }
}

#[derive(Default)]
struct State {
    armed: Mutex<Option<Attack>>,
    delivered: AtomicBool,
    /// For a trickle: whether the client hung up before the whole frame was sent.
    cut_short: AtomicBool,
    /// For a trickle: whether the whole frame was sent.
    trickle_done: AtomicBool,
    /// Connections accepted so far.
    accepted: AtomicUsize,
}

struct Proxy {
    addr: String,
    state: Arc<State>,
}

impl Proxy {
    fn start(upstream: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let state = Arc::new(State::default());
        let shared = state.clone();
        let upstream = upstream.to_string();
        thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                shared.accepted.fetch_add(1, Ordering::SeqCst);
                let Ok(server) = TcpStream::connect(&upstream) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
                    continue;
                };
                let asked: Arc<Mutex<VecDeque<(i16, i16)>>> = Arc::default();
                let asked2 = asked.clone();
                thread::spawn(move || {
                    let _ = pump_requests(client, server, &asked);
                });
                let state = shared.clone();
                thread::spawn(move || {
                    let _ = pump_responses(s2, c2, &asked2, &state, port);
                });
            }
        });
        Proxy {
            addr: format!("127.0.0.1:{port}"),
            state,
        }
    }

    fn arm(&self, attack: Attack) {
        self.state.delivered.store(false, Ordering::SeqCst);
        *self.state.armed.lock().unwrap() = Some(attack);
    }

    fn delivered(&self) -> bool {
        self.state.delivered.load(Ordering::SeqCst)
    }

    fn accepted(&self) -> usize {
        self.state.accepted.load(Ordering::SeqCst)
    }
}

fn read_frame(s: &mut TcpStream) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let mut frame = vec![0u8; i32::from_be_bytes(len).max(0) as usize];
    s.read_exact(&mut frame)?;
    Ok(frame)
}

fn framed(frame: &[u8]) -> Vec<u8> {
    let mut out = (frame.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(frame);
    out
}

fn pump_requests(
    mut client: TcpStream,
    mut server: TcpStream,
    asked: &Mutex<VecDeque<(i16, i16)>>,
) -> io::Result<()> {
    let result = (|| loop {
        let frame = read_frame(&mut client)?;
        if frame.len() >= 4 {
            let api = i16::from_be_bytes([frame[0], frame[1]]);
            let version = i16::from_be_bytes([frame[2], frame[3]]);
            asked.lock().unwrap().push_back((api, version));
        }
        server.write_all(&framed(&frame))?;
    })();
    let _ = server.shutdown(Shutdown::Both);
    let _ = client.shutdown(Shutdown::Both);
    result
}

fn pump_responses(
    mut server: TcpStream,
    mut client: TcpStream,
    asked: &Mutex<VecDeque<(i16, i16)>>,
    state: &State,
    port: u16,
) -> io::Result<()> {
    let result = (|| loop {
        let frame = read_frame(&mut server)?;
        let Some((api, version)) = asked.lock().unwrap().pop_front() else {
            return Err(io::Error::other("an answer nobody asked for"));
        };
        let Ok(api) = ApiKey::try_from(api) else {
            client.write_all(&framed(&frame))?;
            continue;
        };
        let attack = {
            let mut armed = state.armed.lock().unwrap();
            if armed.as_ref().is_some_and(|a| a.api() == api) {
                armed.take()
            } else {
                None
            }
        };
        let header_version = api.response_header_version(version);
        let mut rest = Bytes::from(frame.clone());
        let header = ResponseHeader::decode(&mut rest, header_version).map_err(io::Error::other)?;
        let with_header = |body: &[u8]| {
            let mut out = BytesMut::new();
            header.encode(&mut out, header_version).expect("header");
            out.extend_from_slice(body);
            out.to_vec()
        };
        match attack {
            Some(Attack::Body(_, build)) => {
                state.delivered.store(true, Ordering::SeqCst);
                client.write_all(&framed(&with_header(&build(version))))?;
            }
            Some(Attack::Trickle(_, every)) => {
                state.delivered.store(true, Ordering::SeqCst);
                for b in framed(&frame) {
                    if client
                        .write_all(&[b])
                        .and_then(|()| client.flush())
                        .is_err()
                    {
                        state.cut_short.store(true, Ordering::SeqCst);
                        return Ok(());
                    }
                    thread::sleep(every);
                }
                state.trickle_done.store(true, Ordering::SeqCst);
            }
            None => {
                let body = rewrite_addresses(api, version, rest, port);
                client.write_all(&framed(&with_header(&body)))?;
            }
        }
    })();
    let _ = server.shutdown(Shutdown::Both);
    let _ = client.shutdown(Shutdown::Both);
    result
}

/// Points the broker addresses in Metadata and FindCoordinator answers at the proxy.
fn rewrite_addresses(api: ApiKey, version: i16, mut body: Bytes, port: u16) -> Vec<u8> {
    let host = || StrBytes::from_static_str("127.0.0.1");
    let mut out = BytesMut::new();
    match api {
        ApiKey::Metadata => {
            let mut m = msg::MetadataResponse::decode(&mut body, version).expect("metadata");
            for b in &mut m.brokers {
                b.host = host();
                b.port = i32::from(port);
            }
            m.encode(&mut out, version).expect("metadata");
        }
        ApiKey::FindCoordinator => {
            let mut f = msg::FindCoordinatorResponse::decode(&mut body, version).expect("fc");
            if version < 4 {
                f.host = host();
                f.port = i32::from(port);
            }
            for c in &mut f.coordinators {
                c.host = host();
                c.port = i32::from(port);
            }
            f.encode(&mut out, version).expect("fc");
        }
        _ => return body.to_vec(),
    }
    out.to_vec()
}

// ---------------------------------------------------------------------------
// Hostile bodies.
// ---------------------------------------------------------------------------

/// CRC-32C (Castagnoli), as record batches carry it.
fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn zigzag(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// One record (offset delta 0, value "x") whose header count is `headers`, with no headers.
fn record_claiming_headers(headers: i64) -> Vec<u8> {
    let mut body = vec![0u8]; // attributes
    zigzag(&mut body, 0); // timestamp delta
    zigzag(&mut body, 0); // offset delta
    zigzag(&mut body, -1); // null key
    zigzag(&mut body, 1);
    body.push(b'x');
    zigzag(&mut body, headers);
    let mut out = Vec::new();
    zigzag(&mut out, body.len() as i64);
    out.extend_from_slice(&body);
    out
}

/// A v2 record batch at offset 0 with one record, `payload` being its (compressed) records.
fn batch(codec: i16, payload: &[u8]) -> Vec<u8> {
    let mut tail = Vec::new(); // from attributes to the end: what the CRC covers
    tail.put_i16(codec);
    tail.put_i32(0); // last offset delta
    tail.put_i64(1_700_000_000_000);
    tail.put_i64(1_700_000_000_000);
    tail.put_i64(-1); // producer id
    tail.put_i16(-1);
    tail.put_i32(-1);
    tail.put_i32(1); // records
    tail.extend_from_slice(payload);
    let mut out = Vec::new();
    out.put_i64(0);
    out.put_i32((4 + 1 + 4 + tail.len()) as i32);
    out.put_i32(0); // partition leader epoch
    out.put_i8(2);
    out.put_u32(crc32c(&tail));
    out.extend_from_slice(&tail);
    out
}

/// A Fetch answer for partition 0 of `topic` carrying `records`.
fn fetch_answer(topic: &str, records: Vec<u8>) -> impl Fn(i16) -> Vec<u8> + Send + Sync {
    let topic = topic.to_string();
    move |version| {
        let resp = msg::FetchResponse::default().with_responses(vec![
            fetch_response::FetchableTopicResponse::default()
                .with_topic(TopicName(StrBytes::from_string(topic.clone())))
                .with_partitions(vec![fetch_response::PartitionData::default()
                    .with_partition_index(0)
                    .with_high_watermark(1)
                    .with_last_stable_offset(1)
                    .with_records(Some(Bytes::from(records.clone())))]),
        ]);
        let mut out = BytesMut::new();
        resp.encode(&mut out, version).expect("fetch answer");
        out.to_vec()
    }
}

/// A Fetch answer whose topic array claims 2^31 - 16 entries and carries none.
fn fetch_array_bomb(version: i16) -> Vec<u8> {
    let mut out = Vec::new();
    out.put_i32(0); // throttle
    out.put_i16(0); // error
    out.put_i32(0); // session
    if version >= 12 {
        out.extend_from_slice(&[0xf0, 0xff, 0xff, 0xff, 0x07]);
    } else {
        out.put_i32(0x7fff_fff0);
    }
    out
}

/// A Metadata answer listing one broker more than the client accepts (real bytes for each).
fn metadata_over_the_cap(version: i16) -> Vec<u8> {
    let brokers = (0..=MAX_METADATA_BROKERS as i32)
        .map(|i| {
            metadata_response::MetadataResponseBroker::default()
                .with_node_id(BrokerId(i))
                .with_host(StrBytes::from_static_str("h"))
                .with_port(9092)
        })
        .collect();
    let mut out = BytesMut::new();
    msg::MetadataResponse::default()
        .with_brokers(brokers)
        .encode(&mut out, version)
        .expect("metadata");
    out.to_vec()
}

// ---------------------------------------------------------------------------
// The scenario.
// ---------------------------------------------------------------------------

const WAIT: Duration = Duration::from_secs(90);
const REAL_RECORDS: usize = 5;

/// What one attack cost.
struct Outcome {
    /// For a trickle: whether the client hung up before the whole frame was sent.
    cut_short: bool,
}

/// Runs one attack against a consumer of a fresh one-partition topic and checks the rules in
/// the module docs (printing the peak heap growth).
fn survive(
    name: &str,
    attack: impl FnOnce(&str) -> Attack,
    arm_before_subscribe: bool,
    bound: usize,
) -> Outcome {
    let _ = env_logger::builder().is_test(true).try_init();
    let broker = BrokerKind::Kafka.start();
    let topic = unique_name(&format!("hostile-{name}"));
    broker.create_topic(&topic, 1);
    let group = unique_name(&format!("hostile-{name}"));
    let proxy = Proxy::start(&broker.bootstrap());
    let cfg = config(
        proxy.addr.as_str(),
        &group,
        &[
            ("request.timeout.ms", "3000"),
            ("enable.auto.commit", "false"),
        ],
    );
    let attack = attack(&topic);
    let trickle = matches!(attack, Attack::Trickle(..));
    let baseline = LIVE.load(Ordering::SeqCst);
    PEAK.store(baseline, Ordering::SeqCst);
    let mut errors: Vec<String> = Vec::new();
    let started = Instant::now();
    let mut accepted_at_arm = 0;
    if arm_before_subscribe {
        proxy.arm(attack.clone());
    }
    let mut consumer = loop {
        match Consumer::subscribe(cfg.clone(), &[&topic]) {
            Ok(c) => break c,
            Err(e) => errors.push(e.to_string()),
        }
        assert!(started.elapsed() < WAIT, "no consumer: {errors:?}");
        thread::sleep(Duration::from_millis(200));
    };
    if !arm_before_subscribe {
        // Armed once the consumer owns the partition, so the fetch path takes it.
        while consumer.assignment().is_empty() {
            match consumer.poll(Duration::from_millis(100)) {
                Ok(mut batch) => {
                    assert!(batch.next().is_none(), "records before any were produced")
                }
                Err(e) => errors.push(e.to_string()),
            }
            assert!(started.elapsed() < WAIT, "no assignment: {errors:?}");
        }
        let baseline = LIVE.load(Ordering::SeqCst);
        PEAK.store(baseline, Ordering::SeqCst);
        accepted_at_arm = proxy.accepted();
        proxy.arm(attack);
    }
    let mut processed: Vec<(i64, Bytes)> = Vec::new();
    let fetch_errors = |c: &Consumer| {
        c.stats()
            .partitions
            .iter()
            .filter_map(|p| p.fetch_errors.as_ref().map(|e| e.1.clone()))
            .collect::<Vec<_>>()
    };
    // 1. The attack lands, and the consumer reports it or drops the connection it came on
    // (a metadata request that fails on one connection is retried on another, not reported).
    let mut delivered_with = None;
    loop {
        if delivered_with.is_none() && proxy.delivered() {
            delivered_with = Some(proxy.accepted().max(accepted_at_arm));
        }
        let reported = !errors.is_empty() || !fetch_errors(&consumer).is_empty();
        let reconnected = delivered_with.is_some_and(|n| proxy.accepted() > n);
        if delivered_with.is_some() && (reported || reconnected) {
            break;
        }
        match consumer.poll(Duration::from_millis(100)) {
            Ok(mut batch) => {
                while let Some(d) = batch.next() {
                    processed.push((d.record.offset, d.record.value.clone().unwrap_or_default()));
                    batch.complete(d);
                }
            }
            Err(e) => errors.push(e.to_string()),
        }
        assert!(
            started.elapsed() < WAIT,
            "{name}: delivered={} but no error reported",
            proxy.delivered()
        );
    }
    errors.extend(fetch_errors(&consumer));
    let reconnects = proxy.accepted() - delivered_with.unwrap_or_default();
    let peak = PEAK.load(Ordering::SeqCst).saturating_sub(baseline);
    eprintln!(
        "{name}: peak heap growth {:.1} MiB; {reconnects} new connection(s); errors: {:?}",
        peak as f64 / (1024.0 * 1024.0),
        errors.iter().take(2).collect::<Vec<_>>()
    );
    assert!(
        processed.is_empty(),
        "{name}: hostile records were processed: {processed:?}"
    );

    // 2. Real records flow again, through a new connection, and only they are committed.
    let mut producer =
        Client::connect(ClientConfig::from_bootstrap_str(&broker.bootstrap())).expect("producer");
    let tp = TopicPartition::new(topic.as_str(), 0);
    let records: Vec<ProduceRecord> = (0..REAL_RECORDS)
        .map(|i| ProduceRecord {
            key: None,
            value: Some(Bytes::from(format!("real-{i}"))),
            headers: Vec::new(),
            timestamp: None,
        })
        .collect();
    producer.produce(&tp, &records).expect("produce");
    while processed.len() < REAL_RECORDS {
        match consumer.poll(Duration::from_millis(100)) {
            Ok(mut batch) => {
                while let Some(d) = batch.next() {
                    processed.push((d.record.offset, d.record.value.clone().unwrap_or_default()));
                    batch.complete(d);
                }
            }
            Err(ConsumerError::Commit(_)) => {}
            Err(e) => errors.push(e.to_string()),
        }
        assert!(
            started.elapsed() < WAIT,
            "{name}: real records stuck: {processed:?}"
        );
    }
    let expected: Vec<(i64, Bytes)> = (0..REAL_RECORDS)
        .map(|i| (i as i64, Bytes::from(format!("real-{i}"))))
        .collect();
    assert_eq!(
        processed, expected,
        "{name}: exactly the real records, in order"
    );
    consumer.commit().expect("commit");
    consumer.close().expect("close");
    let stored = committed(&broker.bootstrap(), &group, &topic, 1);
    assert_eq!(
        stored.get(&0).copied().flatten(),
        Some(REAL_RECORDS as i64),
        "{name}: only the real records are committed"
    );
    assert!(
        peak < bound,
        "{name}: the heap grew by {peak} bytes (bound {bound})"
    );
    // A trickle ends one way or the other: the client hangs up (seen at the proxy's next write)
    // or the last byte goes out.
    if trickle {
        let state = &proxy.state;
        while !state.cut_short.load(Ordering::SeqCst) && !state.trickle_done.load(Ordering::SeqCst)
        {
            assert!(
                started.elapsed() < 2 * WAIT,
                "{name}: the trickle neither ended nor was cut"
            );
            thread::sleep(Duration::from_millis(50));
        }
    }
    Outcome {
        cut_short: proxy.state.cut_short.load(Ordering::SeqCst),
    }
}

#[test]
fn a_fetch_answer_claiming_two_billion_topics_costs_an_error_not_the_heap() {
    survive(
        "array-count",
        |_| Attack::Body(ApiKey::Fetch, Arc::new(fetch_array_bomb)),
        false,
        HEAP_BOUND,
    );
}

#[test]
fn a_metadata_answer_listing_too_many_brokers_is_refused_and_the_consumer_recovers() {
    survive(
        "metadata-list",
        |_| Attack::Body(ApiKey::Metadata, Arc::new(metadata_over_the_cap)),
        true,
        HEAP_BOUND,
    );
}

#[test]
fn a_record_claiming_two_billion_headers_costs_an_error_not_the_heap() {
    survive(
        "header-count",
        |topic| {
            let records = batch(0, &record_claiming_headers(i64::from(i32::MAX)));
            Attack::Body(ApiKey::Fetch, Arc::new(fetch_answer(topic, records)))
        },
        false,
        HEAP_BOUND,
    );
}

#[test]
fn a_snappy_batch_claiming_a_huge_length_costs_an_error_not_a_memset() {
    survive(
        "snappy-claim",
        |topic| {
            // Raw snappy: the uncompressed length (varint 250 MiB), then a 1-byte literal.
            let mut payload = Vec::new();
            let mut n: u64 = 250 << 20;
            while n >= 0x80 {
                payload.push((n as u8) | 0x80);
                n >>= 7;
            }
            payload.push(n as u8);
            payload.extend_from_slice(&[0x00, b'x']);
            Attack::Body(
                ApiKey::Fetch,
                Arc::new(fetch_answer(topic, batch(2, &payload))),
            )
        },
        false,
        HEAP_BOUND,
    );
}

#[test]
fn a_gzip_bomb_costs_an_error_within_the_decode_budget() {
    survive(
        "gzip-bomb",
        |topic| {
            // 300 MiB of zeros (more than the 256 MiB decode budget), compressed to ~300 KiB.
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            let zeros = vec![0u8; 1 << 20];
            for _ in 0..300 {
                gz.write_all(&zeros).expect("gzip");
            }
            let payload = gz.finish().expect("gzip");
            Attack::Body(
                ApiKey::Fetch,
                Arc::new(fetch_answer(topic, batch(1, &payload))),
            )
        },
        false,
        // Decompression may use the response's decode budget, and no more.
        DecodeBudget::default().max_decompressed_bytes + HEAP_BOUND,
    );
}

#[test]
fn a_trickled_fetch_answer_is_cut_off_at_the_read_deadline() {
    // 250 ms per byte: an answer of ~100 bytes would take ~25 s, against a 3 s request timeout.
    // Whether the client gave up first is causal, not timed: the proxy saw it hang up mid-frame.
    let outcome = survive(
        "trickle",
        |_| Attack::Trickle(ApiKey::Fetch, Duration::from_millis(250)),
        false,
        HEAP_BOUND,
    );
    assert!(
        outcome.cut_short,
        "the client read the trickled frame to its end instead of giving up at its deadline"
    );
}
