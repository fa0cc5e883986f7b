//! The librdkafka reader of `scripts/bench`: reads `--count` records of a topic through
//! rust-rdkafka's `BaseConsumer` and prints one line,
//! `reader=NAME records=N join_s=J first_to_last_s=T peak_rss_kb=R`.
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

use std::fs::File;
use std::io::Write;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext};
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
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
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
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if a.bootstrap.is_empty() || a.topic.is_empty() || a.count == 0 {
        return Err(
            "usage: rdkafka-peer --bootstrap B --topic T --group G --count N \
                    --partitions P --mode group-sync|group-async|assign \
                    [--set NAME=VALUE ...] [--stats FILE]"
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
    let outcome = args().and_then(|a| run(&a));
    if let Err(e) = outcome {
        eprintln!("rdkafka-peer: {e}");
        std::process::exit(1);
    }
}
