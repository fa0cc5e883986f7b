//! Our reader of `scripts/bench --faults`: one group member that notes when each record arrived,
//! while brokers of a three-node cluster are killed and paused under it.
//!
//! ```text
//! cargo run --release --example fault_reader -- --bootstrap 127.0.0.1:9092,127.0.0.1:9093 \
//!     --topic T --group G --out records.txt --stop-file STOP [--set NAME=VALUE ...] [--max-s 900]
//! ```
//!
//! It reads the way the product's loop does: `Consumer::run` with a no-op handler that notes
//! each record. No synchronous commit per poll: what finished is committed every
//! `commit.interval.ms` (the library's default, 100 ms, unless `--set` changes it) on the
//! consumer's commit thread, inside and between batches, so the poll thread never waits for the
//! coordinator's write; `close` commits the rest. (The Java readers of `scripts/BenchConsumer.java
//! --faults-out` commit after every poll, synchronously or asynchronously: their own product
//! loops.) A thread sets the loop's stop flag once the file `--stop-file` exists (checked every
//! 50 ms) or `--max-s` passed. When `run` returns an error (a poll failed: a broker is down), it
//! is reported on stderr and `run` is called again. Then it closes (LeaveGroup) and writes one
//! line per record received to `--out`,
//! `unix_ms partition offset`, in the order received. `--set` passes any consumer setting (the
//! bench passes the fetch and group settings it gives the Java reader too); the effective fetch
//! settings are printed first, as
//! `settings fetch.min.bytes=.. fetch.max.wait.ms=.. max.partition.fetch.bytes=.. fetch.max.bytes=..
//! session.timeout.ms=.. heartbeat.interval.ms=.. commit.interval.ms=..`, and
//! `first-record UNIX_MS` once the first record arrived (the bench starts its faults once every
//! reader printed it). The library's log goes to stderr (warnings by default; `RUST_LOG`, e.g.
//! `RUST_LOG=rebalance_guard=debug scripts/bench --faults`, says more), each line stamped with
//! unix milliseconds and its thread, to be read beside the records and the fault times.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rebalance_guard::{Consumer, ConsumerConfig, ErrorChain};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

struct Args {
    bootstrap: String,
    topic: String,
    group: String,
    out: PathBuf,
    stop_file: PathBuf,
    max: Duration,
    settings: Vec<(String, String)>,
}

fn usage() -> String {
    "usage: fault_reader --bootstrap HOST:PORT[,..] --topic T --group G --out FILE \
     --stop-file FILE [--set NAME=VALUE ...] [--max-s S]"
        .to_string()
}

fn parse_args() -> Result<Args, String> {
    let (mut bootstrap, mut topic, mut group, mut out, mut stop_file) =
        (None, None, None, None, None);
    let mut max = Duration::from_secs(900);
    let mut settings = Vec::new();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{}", usage()))?;
        match flag.as_str() {
            "--bootstrap" => bootstrap = Some(value),
            "--topic" => topic = Some(value),
            "--group" => group = Some(value),
            "--out" => out = Some(PathBuf::from(value)),
            "--stop-file" => stop_file = Some(PathBuf::from(value)),
            "--max-s" => {
                max = Duration::from_secs(value.parse().map_err(|e| format!("{flag}: {e}"))?)
            }
            "--set" => {
                let (k, v) = value
                    .split_once('=')
                    .ok_or_else(|| format!("--set {value}: expected NAME=VALUE"))?;
                settings.push((k.to_string(), v.to_string()));
            }
            other => return Err(format!("unknown argument {other}\n{}", usage())),
        }
    }
    let missing = |f: &str| format!("{f} is required\n{}", usage());
    Ok(Args {
        bootstrap: bootstrap.ok_or_else(|| missing("--bootstrap"))?,
        topic: topic.ok_or_else(|| missing("--topic"))?,
        group: group.ok_or_else(|| missing("--group"))?,
        out: out.ok_or_else(|| missing("--out"))?,
        stop_file: stop_file.ok_or_else(|| missing("--stop-file"))?,
        max,
        settings,
    })
}

/// Wall-clock milliseconds, comparable with the fault times of `scripts/faults.py`.
fn unix_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn run(args: &Args) -> Result<(), BoxError> {
    let props = [
        ("bootstrap.servers".to_string(), args.bootstrap.clone()),
        ("group.id".to_string(), args.group.clone()),
        ("client.id".to_string(), "fault-reader".to_string()),
        ("auto.offset.reset".to_string(), "earliest".to_string()),
    ]
    .into_iter()
    .chain(args.settings.iter().cloned());
    let config = ConsumerConfig::from_properties(props)?;
    println!(
        "settings fetch.min.bytes={} fetch.max.wait.ms={} max.partition.fetch.bytes={} \
         fetch.max.bytes={} session.timeout.ms={} heartbeat.interval.ms={} commit.interval.ms={}",
        config.fetch_min_bytes(),
        config.fetch_max_wait().as_millis(),
        config.max_partition_fetch_bytes(),
        config.fetch_max_bytes(),
        config.session_timeout().as_millis(),
        config.heartbeat_interval().as_millis(),
        config.commit_interval().as_millis()
    );
    let mut consumer = Consumer::subscribe(config, &[&args.topic])?;
    let stop = AtomicBool::new(false);
    let mut received: Vec<(u64, i32, i64)> = Vec::new();
    let mut failures = 0u64;
    std::thread::scope(|scope| {
        // The stop flag: the stop file, or --max-s.
        scope.spawn(|| {
            let started = Instant::now();
            while !args.stop_file.exists() && started.elapsed() < args.max {
                std::thread::sleep(Duration::from_millis(50));
            }
            stop.store(true, Ordering::SeqCst);
        });
        while !stop.load(Ordering::SeqCst) {
            let noted = consumer.run(&stop, |record, _ctx| {
                if received.is_empty() {
                    // The bench starts its faults once every reader is reading.
                    println!("first-record {}", unix_millis());
                }
                received.push((unix_millis(), record.partition, record.offset));
                Ok::<(), std::convert::Infallible>(())
            });
            if let Err(e) = noted {
                failures += 1;
                eprintln!(
                    "fault_reader: {} run returned: {}",
                    unix_millis(),
                    ErrorChain(&e)
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    });
    if let Err(e) = consumer.close() {
        eprintln!("fault_reader: close: {}", ErrorChain(&e));
    }
    let mut out = BufWriter::new(File::create(&args.out)?);
    for (t, p, o) in &received {
        writeln!(out, "{t} {p} {o}")?;
    }
    out.flush()?;
    println!(
        "fault_reader: records={} run_failures={failures} out={}",
        received.len(),
        args.out.display()
    );
    Ok(())
}

fn main() -> ExitCode {
    // The library's log on stderr, each line stamped with wall-clock milliseconds like the
    // records and the bench's fault times, and with its thread's name (RUST_LOG=rebalance_guard=debug shows what the poll
    // thread waited for during a fault); warnings only by default.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
        .format(|buf, record| {
            writeln!(
                buf,
                "{} {:<5} [{}] {}: {}",
                unix_millis(),
                record.level(),
                std::thread::current().name().unwrap_or("?"),
                record.target(),
                record.args()
            )
        })
        .init();
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fault_reader: {}", ErrorChain(&*e));
            ExitCode::FAILURE
        }
    }
}
