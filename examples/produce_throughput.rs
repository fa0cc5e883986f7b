//! Writes records to a topic with the crate's `Producer` and prints what it took, for
//! `scripts/bench --produce`: either as fast as it can (throughput) or at a fixed rate
//! (send-to-acknowledgement latency).
//!
//! ```text
//! cargo run --release --example produce_throughput -- --bootstrap 127.0.0.1:9092 --topic T \
//!     --count 1000000 [--size 100] [--keyed] [--set NAME=VALUE ...]
//! cargo run --release --example produce_throughput -- --bootstrap 127.0.0.1:9092 --topic T \
//!     --rate 1000 --seconds 20 [--size 100] [--keyed] [--set NAME=VALUE ...]
//! ```
//!
//! Why it exists: users choose a producer by what it sustains and by how long a record waits
//! for its acknowledgement; the bench runs this beside librdkafka and Java's `KafkaProducer`
//! with the same settings. Every value is the same `--size` bytes (one buffer shared by every
//! record, as an application sending one payload would); keyless records go to the sticky
//! partition, `--keyed` gives record `i` the key `key-<i>` (murmur2 partitioning).
//!
//! First it prints the settings in force, read back from `ProducerConfig`'s getters (defaults
//! included): `bench produce settings producer=ours acks=.. enable.idempotence=.. linger.ms=..
//! batch.size=.. ...`. Before the clock starts it waits for the topic's metadata and writes one
//! keyless record, waited for (`warmup=1`: the topic holds N + 1 records), so that what is
//! measured is the producer at work, not its connection and producer id. Then one line:
//!
//! - throughput (`--count N`): `producer=ours mode=throughput records=N errors=E
//!   first_send_to_last_ack_s=T warmup=1`, timed from the first `send` to the end of the `flush`
//!   that waited for the last acknowledgement. Handles are checked as they settle (a queue of the
//!   unsettled ones, bounded by what `buffer.memory` holds) and the rest after the flush.
//! - latency (`--rate R --seconds D`): record `i` is sent at `i / R` s after the start (a missed
//!   slot is sent at once, never skipped); a second thread waits on the handles in send order and
//!   notes when each returns. `producer=ours mode=latency records=N errors=E p50_ms=.. p99_ms=..
//!   max_ms=.. late_sends=L warmup=1`: L sends that started more than 1 ms after their slot (the
//!   pacing fell behind). A record acknowledged before an earlier one is counted at the earlier
//!   one's acknowledgement, which can only make ours look slower.

use std::collections::VecDeque;
use std::process::ExitCode;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use rebalance_guard::{
    DeliveryHandle, ErrorChain, ProduceError, Producer, ProducerConfig, ProducerRecord,
};

struct Args {
    bootstrap: String,
    topic: String,
    count: Option<u64>,
    rate: Option<u64>,
    seconds: u64,
    size: usize,
    keyed: bool,
    settings: Vec<(String, String)>,
}

fn usage() -> String {
    "usage: produce_throughput --bootstrap HOST:PORT --topic TOPIC \
     (--count N | --rate R --seconds D) [--size BYTES] [--keyed] [--set NAME=VALUE ...]"
        .to_string()
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        bootstrap: String::new(),
        topic: String::new(),
        count: None,
        rate: None,
        seconds: 20,
        size: 100,
        keyed: false,
        settings: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| format!("{flag} needs a value\n{}", usage()))
        };
        match flag.as_str() {
            "--bootstrap" => a.bootstrap = value()?,
            "--topic" => a.topic = value()?,
            "--count" => a.count = Some(value()?.parse().map_err(|e| format!("--count: {e}"))?),
            "--rate" => a.rate = Some(value()?.parse().map_err(|e| format!("--rate: {e}"))?),
            "--seconds" => a.seconds = value()?.parse().map_err(|e| format!("--seconds: {e}"))?,
            "--size" => a.size = value()?.parse().map_err(|e| format!("--size: {e}"))?,
            "--keyed" => a.keyed = true,
            "--set" => {
                let pair = value()?;
                let (name, v) = pair
                    .split_once('=')
                    .ok_or_else(|| format!("--set {pair}: expected NAME=VALUE"))?;
                a.settings.push((name.to_string(), v.to_string()));
            }
            other => return Err(format!("unknown argument {other}\n{}", usage())),
        }
    }
    let one_mode = a.count.is_some() != a.rate.is_some();
    if a.bootstrap.is_empty() || a.topic.is_empty() || !one_mode || a.rate == Some(0) {
        return Err(usage());
    }
    Ok(a)
}

/// The record `i`: the shared value, and its key with `--keyed`.
fn record(args: &Args, value: &'static [u8], i: u64) -> ProducerRecord {
    let r = ProducerRecord::new(args.topic.as_str(), value);
    if args.keyed {
        r.key(format!("key-{i}").into_bytes())
    } else {
        r
    }
}

fn run(args: &Args) -> Result<String, Box<dyn std::error::Error>> {
    let mut props: Vec<(&str, &str)> = vec![("bootstrap.servers", args.bootstrap.as_str())];
    for (name, value) in &args.settings {
        props.retain(|(n, _)| n != name);
        props.push((name.as_str(), value.as_str()));
    }
    let config = ProducerConfig::from_properties(props)?;
    println!(
        "bench produce settings producer=ours acks={} enable.idempotence={} linger.ms={} \
         batch.size={} compression.type={} max.in.flight.requests.per.connection={} \
         buffer.memory={} delivery.timeout.ms={} partitioner={}",
        match config.acks().wire_value() {
            -1 => "all".to_string(),
            n => n.to_string(),
        },
        config.idempotence(),
        config.linger().as_millis(),
        config.batch_size(),
        config.compression_type().as_str(),
        config.max_in_flight_requests_per_connection(),
        config.buffer_memory(),
        config.delivery_timeout().as_millis(),
        if args.keyed {
            "murmur2"
        } else {
            "sticky-per-batch"
        },
    );
    // One value for every record: a buffer that lives as long as the process.
    let value: &'static [u8] = Vec::leak(vec![b'x'; args.size]);
    let producer = Producer::new(config)?;
    // Before the clock starts: the topic's metadata, and one record written and acknowledged,
    // so that the connection and the producer id are in place (the other producers get the same
    // warm-up; librdkafka's idempotent producer may otherwise hold its first records up to
    // 500 ms, the retry timer of its producer-id request).
    producer.partition_count(&args.topic)?;
    producer
        .send(ProducerRecord::new(args.topic.as_str(), value))?
        .wait()?;
    let line = match (args.count, args.rate) {
        (Some(count), _) => throughput(args, &producer, value, count)?,
        (None, Some(rate)) => latency(args, &producer, value, rate)?,
        (None, None) => return Err(usage().into()),
    };
    producer.close()?;
    Ok(line)
}

fn throughput(
    args: &Args,
    producer: &Producer,
    value: &'static [u8],
    count: u64,
) -> Result<String, Box<dyn std::error::Error>> {
    let mut unsettled: VecDeque<DeliveryHandle> = VecDeque::new();
    // Failed records, and the first failure.
    let mut failed: (u64, Option<ProduceError>) = (0, None);
    let settled =
        |h: &DeliveryHandle, failed: &mut (u64, Option<ProduceError>)| match h.try_result() {
            None => false,
            Some(Ok(_)) => true,
            Some(Err(e)) => {
                failed.0 += 1;
                failed.1.get_or_insert(e);
                true
            }
        };
    let started = Instant::now();
    for i in 0..count {
        unsettled.push_back(producer.send(record(args, value, i))?);
        if i % 1024 == 1023 {
            while unsettled.front().is_some_and(|h| settled(h, &mut failed)) {
                unsettled.pop_front();
            }
        }
    }
    producer.flush()?;
    let elapsed = started.elapsed();
    let mut unsettled_after_flush = 0u64;
    for h in &unsettled {
        if !settled(h, &mut failed) {
            unsettled_after_flush += 1;
        }
    }
    if unsettled_after_flush > 0 {
        // flush() promises every record settled: a record still open is the producer's bug.
        return Err(format!("{unsettled_after_flush} records unsettled after flush()").into());
    }
    let errors = failed.0;
    if let Some(e) = failed.1 {
        eprintln!("produce_throughput: {errors} records failed, the first: {e}");
    }
    Ok(format!(
        "producer=ours mode=throughput records={count} errors={errors} \
         first_send_to_last_ack_s={:.3} warmup=1",
        elapsed.as_secs_f64()
    ))
}

fn latency(
    args: &Args,
    producer: &Producer,
    value: &'static [u8],
    rate: u64,
) -> Result<String, Box<dyn std::error::Error>> {
    let count = rate * args.seconds;
    let (tx, rx) = mpsc::channel::<(Instant, DeliveryHandle)>();
    let waiter = thread::spawn(move || {
        let mut micros = Vec::with_capacity(count as usize);
        let mut errors = 0u64;
        for (sent, handle) in rx {
            let outcome = handle.wait();
            micros.push(sent.elapsed().as_micros() as u64);
            if let Err(e) = outcome {
                if errors == 0 {
                    eprintln!("produce_throughput: a record failed: {e}");
                }
                errors += 1;
            }
        }
        (micros, errors)
    });
    let start = Instant::now();
    let mut late = 0u64;
    for i in 0..count {
        let slot = start + Duration::from_nanos(i * 1_000_000_000 / rate);
        let now = Instant::now();
        if slot > now {
            thread::sleep(slot - now);
        } else if now - slot > Duration::from_millis(1) {
            late += 1;
        }
        let sent = Instant::now();
        let handle = producer.send(record(args, value, i))?;
        tx.send((sent, handle))?;
    }
    drop(tx);
    let (mut micros, errors) = waiter
        .join()
        .map_err(|_| "the latency thread panicked".to_string())?;
    micros.sort_unstable();
    let pct = |p: f64| {
        let i = ((micros.len() as f64 * p).ceil() as usize).clamp(1, micros.len().max(1)) - 1;
        micros.get(i).copied().unwrap_or(0) as f64 / 1000.0
    };
    Ok(format!(
        "producer=ours mode=latency records={} errors={errors} p50_ms={:.3} p99_ms={:.3} \
         max_ms={:.3} late_sends={late} warmup=1",
        micros.len(),
        pct(0.50),
        pct(0.99),
        pct(1.0)
    ))
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("produce_throughput: {}", ErrorChain(&*e));
            ExitCode::FAILURE
        }
    }
}
