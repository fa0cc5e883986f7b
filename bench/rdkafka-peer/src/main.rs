//! The librdkafka peer of `scripts/bench`: reads `--count` records of a topic through
//! rust-rdkafka's `BaseConsumer` and prints one line,
//! `reader=NAME records=N join_s=J first_to_last_s=T peak_rss_kb=R`; or, in the produce modes,
//! writes records through its `BaseProducer` (see "Produce modes" below).
//!
//! Modes (`--mode`):
//!   group-sync    in a group; a synchronous commit of the consumed positions every 500 records
//!   group-async   in a group; offsets stored per record and committed asynchronously every 500
//!                 records (what a tuned librdkafka user writes)
//!   assign        no group: every partition assigned from the beginning, nothing committed
//!
//! `join_s` is from subscribe (or assign) to the first record; `first_to_last_s` from the first
//! record to the last, the number the benchmark compares.
//!
//! `--set NAME=VALUE` (repeatable) passes any librdkafka setting (the bench gives every reader
//! the same fetch settings this way). Before its result the peer prints the fetch settings
//! librdkafka will use, read back from librdkafka's own configuration (defaults included):
//! `bench consume settings reader=NAME fetch.min.bytes=.. fetch.wait.max.ms=.. ...`.
//! `--stats FILE` turns on `statistics.interval.ms` (1000 unless set) and appends every
//! statistics JSON to FILE, one per line, each prefixed by the milliseconds since subscribe.
//! librdkafka's own log goes to stderr (with `--set debug=fetch`: every fetch decision).
//!
//! Produce modes, for `scripts/bench --produce` (no `--group`; `--size BYTES`, default 100, the
//! value of every record, one buffer shared by all; `--keyed` gives record `i` the key `key-<i>`,
//! else keyless: librdkafka's sticky partitioning). Delivery reports are served by a thread of
//! their own blocked in `poll` without a deadline (what rust-rdkafka's `ThreadedProducer` does,
//! minus its 100 ms poll steps: rust-rdkafka's `poll` with a deadline turns the timeout into
//! whole milliseconds rounded down and polls again until the deadline, so its last millisecond
//! is a busy loop, a core taken from librdkafka's own threads and the broker on a small
//! machine), the way ours has its sender thread and Java its I/O thread:
//!   produce          `--count N` records as fast as the producer takes them; on a full queue
//!                    (`queue.buffering.max.kbytes`, far more than a millisecond of work) the
//!                    sending thread sleeps 1 ms and sends again. Timed from the first send to
//!                    the last delivery report, noted in its callback (rust-rdkafka's `flush`
//!                    polls in steps of up to 100 ms, which would add up to 100 ms):
//!                    `producer=rdkafka mode=throughput records=N errors=E
//!                    first_send_to_last_ack_s=T warmup=1`.
//!   produce-latency  `--rate R --seconds D`: record `i` sent at `i / R` s after the start (a
//!                    missed slot sent at once; the sending thread sleeps until the slot), each
//!                    record's latency from just before its send to its delivery report's
//!                    callback: `producer=rdkafka mode=latency records=N errors=E p50_ms=..
//!                    p99_ms=.. max_ms=.. late_sends=L warmup=1` (L: sends more than 1 ms
//!                    behind their slot).
//! Before the clock starts, in both: the topic's metadata, then one keyless record sent and its
//! report waited for (`warmup=1`: the topic holds N + 1 records), as ours and Java's do. Why:
//! librdkafka's idempotent producer asks for its producer id at start; when no broker connection
//! is up yet ("No brokers available for Idempotent producer", with `--set debug=eos`), or the
//! broker answers COORDINATOR_LOAD_IN_PROGRESS, it asks again after 500 ms, and the records sent
//! meanwhile wait: in some runs the first ~300-500 records of the latency mode waited up to
//! 500 ms (p99 300 ms), in others none. That is librdkafka's start, not its work.
//! Before the result, the producer settings in force read back from librdkafka's configuration,
//! under Kafka's names where librdkafka has an alias (acks is request.required.acks, linger.ms
//! queue.buffering.max.ms, compression.type compression.codec):
//! `bench produce settings producer=rdkafka acks=.. enable.idempotence=.. linger.ms=.. ...`.

use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::util::Timeout;
use rdkafka::{Offset, TopicPartitionList};

/// The fetch settings printed in the settings line, in the bench's order.
const FETCH_SETTINGS: [&str; 7] = [
    "fetch.min.bytes",
    "fetch.wait.max.ms",
    "fetch.message.max.bytes",
    "fetch.max.bytes",
    "queued.min.messages",
    "queued.max.messages.kbytes",
    "fetch.queue.backoff.ms",
];

/// Writes librdkafka's statistics JSON to the `--stats` file, if any.
struct Stats {
    out: Option<Mutex<File>>,
    started: Instant,
}

impl ClientContext for Stats {
    /// librdkafka's log (warnings, and what `--set debug=fetch` asks for) to stderr, each line
    /// prefixed by the milliseconds since subscribe.
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        let ms = self.started.elapsed().as_millis();
        eprintln!("{ms} librdkafka {level:?} {fac} {message}");
    }

    fn stats_raw(&self, statistics: &[u8]) {
        if let Some(out) = &self.out {
            let mut f = out.lock().unwrap_or_else(|e| e.into_inner());
            let ms = self.started.elapsed().as_millis();
            let _ = write!(f, "{ms} ");
            let _ = f.write_all(statistics);
            let _ = f.write_all(b"\n");
        }
    }
}

impl ConsumerContext for Stats {}

struct Args {
    bootstrap: String,
    topic: String,
    group: String,
    count: u64,
    partitions: i32,
    mode: String,
    settings: Vec<(String, String)>,
    stats: Option<String>,
    size: usize,
    keyed: bool,
    rate: u64,
    seconds: u64,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        bootstrap: String::new(),
        topic: String::new(),
        group: String::new(),
        count: 0,
        partitions: 0,
        mode: String::new(),
        settings: Vec::new(),
        stats: None,
        size: 100,
        keyed: false,
        rate: 0,
        seconds: 20,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--keyed" {
            a.keyed = true;
            continue;
        }
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--bootstrap" => a.bootstrap = value,
            "--topic" => a.topic = value,
            "--group" => a.group = value,
            "--count" => a.count = value.parse().map_err(|e| format!("--count: {e}"))?,
            "--partitions" => {
                a.partitions = value.parse().map_err(|e| format!("--partitions: {e}"))?
            }
            "--mode" => a.mode = value,
            "--set" => {
                let (name, v) = value
                    .split_once('=')
                    .ok_or_else(|| format!("--set {value}: expected NAME=VALUE"))?;
                a.settings.push((name.to_string(), v.to_string()));
            }
            "--stats" => a.stats = Some(value),
            "--size" => a.size = value.parse().map_err(|e| format!("--size: {e}"))?,
            "--rate" => a.rate = value.parse().map_err(|e| format!("--rate: {e}"))?,
            "--seconds" => a.seconds = value.parse().map_err(|e| format!("--seconds: {e}"))?,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if a.mode == "produce-latency" {
        a.count = a.rate * a.seconds;
    }
    if a.bootstrap.is_empty() || a.topic.is_empty() || a.count == 0 {
        return Err(
            "usage: rdkafka-peer --bootstrap B --topic T --group G --count N \
                    --partitions P --mode group-sync|group-async|assign \
                    [--set NAME=VALUE ...] [--stats FILE]\n\
             or:    rdkafka-peer --bootstrap B --topic T --mode produce --count N \
                    [--size BYTES] [--keyed] [--set NAME=VALUE ...]\n\
             or:    rdkafka-peer --bootstrap B --topic T --mode produce-latency --rate R \
                    --seconds D [--size BYTES] [--keyed] [--set NAME=VALUE ...]"
                .to_string(),
        );
    }
    Ok(a)
}

/// The process's peak resident set (VmHWM), in KiB.
fn peak_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn run(a: &Args) -> Result<(), String> {
    let store_offsets = a.mode == "group-async";
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &a.bootstrap)
        .set("group.id", &a.group)
        .set("enable.auto.commit", "false")
        .set(
            "enable.auto.offset.store",
            if store_offsets { "false" } else { "true" },
        )
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", "10000")
        .set("fetch.wait.max.ms", "100");
    if a.stats.is_some() && config.get("statistics.interval.ms").is_none() {
        config.set("statistics.interval.ms", "1000");
    }
    for (name, value) in &a.settings {
        config.set(name, value);
    }
    if config.get("debug").is_some() {
        // rust-rdkafka sets librdkafka's log level from the `log` crate's, off here.
        config.set_log_level(RDKafkaLogLevel::Debug);
    }
    // What librdkafka will use, defaults included, read back from its own configuration.
    let native = config
        .create_native_config()
        .map_err(|e| format!("config: {e}"))?;
    let mut line = format!("bench consume settings reader=rdkafka-{}", a.mode);
    for name in FETCH_SETTINGS {
        let value = native
            .get(name)
            .map_err(|e| format!("config {name}: {e}"))?;
        line.push_str(&format!(" {name}={value}"));
    }
    println!("{line}");
    let out = match &a.stats {
        Some(path) => Some(Mutex::new(
            File::create(path).map_err(|e| format!("--stats {path}: {e}"))?,
        )),
        None => None,
    };
    let consumer: BaseConsumer<Stats> = config
        .create_with_context(Stats {
            out,
            started: Instant::now(),
        })
        .map_err(|e| format!("create consumer: {e}"))?;
    let started = Instant::now();
    match a.mode.as_str() {
        "group-sync" | "group-async" => consumer
            .subscribe(&[&a.topic])
            .map_err(|e| format!("subscribe: {e}"))?,
        "assign" => {
            let mut tpl = TopicPartitionList::new();
            for p in 0..a.partitions {
                tpl.add_partition_offset(&a.topic, p, Offset::Beginning)
                    .map_err(|e| format!("assign: {e}"))?;
            }
            consumer.assign(&tpl).map_err(|e| format!("assign: {e}"))?;
        }
        other => return Err(format!("unknown mode {other}")),
    }
    let mut seen = 0u64;
    let mut first: Option<Instant> = None;
    let deadline = started + Duration::from_secs(300);
    while seen < a.count {
        if Instant::now() > deadline {
            return Err(format!("only {seen} of {} records within 300 s", a.count));
        }
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Err(e)) => return Err(format!("poll: {e}")),
            Some(Ok(message)) => {
                first.get_or_insert_with(Instant::now);
                seen += 1;
                if store_offsets {
                    consumer
                        .store_offset_from_message(&message)
                        .map_err(|e| format!("store offset: {e}"))?;
                }
                if seen.is_multiple_of(500) || seen == a.count {
                    match a.mode.as_str() {
                        "group-sync" => consumer
                            .commit_consumer_state(CommitMode::Sync)
                            .map_err(|e| format!("commit: {e}"))?,
                        "group-async" => consumer
                            .commit_consumer_state(CommitMode::Async)
                            .map_err(|e| format!("commit: {e}"))?,
                        _ => {}
                    }
                }
            }
        }
    }
    let last = Instant::now();
    let first = first.unwrap_or(last);
    println!(
        "reader=rdkafka-{} records={seen} join_s={:.3} first_to_last_s={:.3} peak_rss_kb={}",
        a.mode,
        first.duration_since(started).as_secs_f64(),
        last.duration_since(first).as_secs_f64(),
        peak_rss_kb()
    );
    Ok(())
}

fn main() {
    let outcome = args().and_then(|a| {
        if a.mode.starts_with("produce") {
            produce(&a)
        } else {
            run(&a)
        }
    });
    if let Err(e) = outcome {
        eprintln!("rdkafka-peer: {e}");
        std::process::exit(1);
    }
}

/// The producer settings printed in the settings line: (Kafka's name, librdkafka's name).
const PRODUCE_SETTINGS: [(&str, &str); 12] = [
    ("acks", "request.required.acks"),
    ("enable.idempotence", "enable.idempotence"),
    ("linger.ms", "queue.buffering.max.ms"),
    ("batch.size", "batch.size"),
    ("batch.num.messages", "batch.num.messages"),
    ("compression.type", "compression.codec"),
    (
        "max.in.flight.requests.per.connection",
        "max.in.flight.requests.per.connection",
    ),
    ("queue.buffering.max.kbytes", "queue.buffering.max.kbytes"),
    (
        "queue.buffering.max.messages",
        "queue.buffering.max.messages",
    ),
    ("delivery.timeout.ms", "message.timeout.ms"),
    ("partitioner", "partitioner"),
    (
        "sticky.partitioning.linger.ms",
        "sticky.partitioning.linger.ms",
    ),
];

/// What the delivery reports said, noted by the callback (on the polling thread).
struct Deliveries {
    started: Instant,
    /// Per record of the latency mode, when its send began (the opaque is its index).
    sent: Mutex<Vec<Instant>>,
    /// Per record of the latency mode, send to report, in microseconds.
    latencies: Mutex<Vec<u64>>,
    errors: AtomicU64,
    first_error: Mutex<Option<String>>,
    /// Reports received and the time of the last one; `all_in` wakes the sending thread once
    /// `expected` have come.
    delivered: Mutex<(u64, Option<Instant>)>,
    expected: AtomicU64,
    all_in: Condvar,
}

impl ClientContext for Deliveries {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        let ms = self.started.elapsed().as_millis();
        eprintln!("{ms} librdkafka {level:?} {fac} {message}");
    }
}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, index: usize) {
        let now = Instant::now();
        if let Err((e, _)) = result {
            if self.errors.fetch_add(1, Ordering::Relaxed) == 0 {
                *self.first_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.to_string());
            }
        }
        let sent = self
            .sent
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(index)
            .copied();
        if let Some(at) = sent {
            let micros = now.duration_since(at).as_micros() as u64;
            self.latencies
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(micros);
        }
        let mut delivered = self.delivered.lock().unwrap_or_else(|e| e.into_inner());
        delivered.0 += 1;
        delivered.1 = Some(now);
        if delivered.0 == self.expected.load(Ordering::Relaxed) {
            self.all_in.notify_all();
        }
    }
}

/// The produce modes (see the header).
fn produce(a: &Args) -> Result<(), String> {
    let latency = match a.mode.as_str() {
        "produce" => false,
        "produce-latency" => true,
        other => return Err(format!("unknown mode {other}")),
    };
    if latency && a.rate == 0 {
        return Err("produce-latency needs --rate".to_string());
    }
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", &a.bootstrap);
    for (name, value) in &a.settings {
        config.set(name, value);
    }
    if config.get("debug").is_some() {
        // rust-rdkafka sets librdkafka's log level from the `log` crate's, off here.
        config.set_log_level(RDKafkaLogLevel::Debug);
    }
    let native = config
        .create_native_config()
        .map_err(|e| format!("config: {e}"))?;
    let mut line = "bench produce settings producer=rdkafka".to_string();
    for (kafka_name, name) in PRODUCE_SETTINGS {
        let value = native
            .get(name)
            .map_err(|e| format!("config {name}: {e}"))?;
        let value = match (kafka_name, value.as_str()) {
            ("acks", "-1") => "all".to_string(),
            _ => value,
        };
        line.push_str(&format!(" {kafka_name}={value}"));
    }
    println!("{line}");
    let context = Deliveries {
        started: Instant::now(),
        sent: Mutex::new(Vec::with_capacity(if latency {
            a.count as usize
        } else {
            0
        })),
        latencies: Mutex::new(Vec::with_capacity(if latency {
            a.count as usize
        } else {
            0
        })),
        errors: AtomicU64::new(0),
        first_error: Mutex::new(None),
        delivered: Mutex::new((0, None)),
        expected: AtomicU64::new(1),
        all_in: Condvar::new(),
    };
    let producer: Arc<BaseProducer<Deliveries>> = Arc::new(
        config
            .create_with_context(context)
            .map_err(|e| format!("create producer: {e}"))?,
    );
    // The topic's metadata before the clock starts (ours and Java's wait for it outside their
    // timing too).
    producer
        .client()
        .fetch_metadata(Some(&a.topic), Duration::from_secs(30))
        .map_err(|e| format!("metadata: {e}"))?;
    // The delivery reports' thread: blocked in poll until an event comes, for the life of the
    // process (it ends with it).
    let poller = Arc::clone(&producer);
    std::thread::Builder::new()
        .name("rdkafka-poll".to_string())
        .spawn(move || loop {
            poller.poll(Timeout::Never);
        })
        .map_err(|e| format!("poll thread: {e}"))?;
    let value = vec![b'x'; a.size];
    // The warm-up (see the header): one keyless record, waited for.
    producer
        .send(
            BaseRecord::<str, [u8], usize>::with_opaque_to(&a.topic, usize::MAX)
                .payload(&value[..]),
        )
        .map_err(|(e, _)| format!("send: {e}"))?;
    wait_for_reports(&producer, 1)?;
    producer
        .context()
        .expected
        .store(a.count + 1, Ordering::Relaxed);
    let mut key = String::new();
    let mut late = 0u64;
    let started = Instant::now();
    for i in 0..a.count {
        if latency {
            let slot = started + Duration::from_nanos(i * 1_000_000_000 / a.rate);
            let now = Instant::now();
            if slot > now {
                std::thread::sleep(slot - now);
            } else if now - slot > Duration::from_millis(1) {
                late += 1;
            }
            producer
                .context()
                .sent
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(Instant::now());
        }
        let index = if latency { i as usize } else { usize::MAX };
        if a.keyed {
            key.clear();
            key.push_str("key-");
            key.push_str(&i.to_string());
        }
        loop {
            let mut record =
                BaseRecord::<str, [u8], usize>::with_opaque_to(&a.topic, index).payload(&value[..]);
            if a.keyed {
                record = record.key(key.as_str());
            }
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err((e, _)) => return Err(format!("send: {e}")),
            }
        }
    }
    let last = wait_for_reports(&producer, a.count + 1)?;
    let ctx = producer.context();
    let errors = ctx.errors.load(Ordering::Relaxed);
    if let Some(e) = ctx
        .first_error
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
    {
        eprintln!("rdkafka-peer: {errors} records failed, the first: {e}");
    }
    if latency {
        let mut micros = ctx
            .latencies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        micros.sort_unstable();
        let pct = |p: f64| {
            let i = ((micros.len() as f64 * p).ceil() as usize).clamp(1, micros.len().max(1)) - 1;
            micros.get(i).copied().unwrap_or(0) as f64 / 1000.0
        };
        println!(
            "producer=rdkafka mode=latency records={} errors={errors} p50_ms={:.3} p99_ms={:.3} \
             max_ms={:.3} late_sends={late} warmup=1",
            micros.len(),
            pct(0.50),
            pct(0.99),
            pct(1.0)
        );
    } else {
        println!(
            "producer=rdkafka mode=throughput records={} errors={errors} \
             first_send_to_last_ack_s={:.3} warmup=1",
            a.count,
            last.duration_since(started).as_secs_f64()
        );
    }
    Ok(())
}

/// Waits (up to 300 s) until `count` delivery reports have come, counting the warm-up's; returns
/// when the last one came.
fn wait_for_reports(producer: &BaseProducer<Deliveries>, count: u64) -> Result<Instant, String> {
    let ctx = producer.context();
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut delivered = ctx.delivered.lock().unwrap_or_else(|e| e.into_inner());
    while delivered.0 < count {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "only {} of {count} delivery reports within 300 s",
                delivered.0
            ));
        }
        delivered = ctx
            .all_in
            .wait_timeout(delivered, left)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
    Ok(delivered.1.unwrap_or_else(Instant::now))
}
