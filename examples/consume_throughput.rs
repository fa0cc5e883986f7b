//! Reads `--count` records of a topic with the whole consumer (`Consumer::run` in a group, a
//! no-op handler, paced commits on the commit thread) and prints one line for `scripts/bench`:
//! `reader=NAME records=N join_s=J first_to_last_s=T bytes_by_node=ID:BYTES,...
//! from_replicas=R` (the record bytes each broker sent, and the partitions read from a preferred
//! read replica at the end: where the data came from, for `scripts/bench --rack`).
//!
//! ```text
//! cargo run --release --example consume_throughput -- --bootstrap 127.0.0.1:9092 \
//!     --topic T --group G --count 1000000 [--keyed] [--workers N] [--set NAME=VALUE ...]
//! ```
//!
//! Why it exists: users choose a consumer by what the whole loop costs (group membership, the
//! guard, batch commits), not by the fetch path alone. `--keyed` derives a unique idempotency key
//! per record, so every admission also goes through the guard's bounded key set. `join_s` is
//! from subscribe to the first record, `first_to_last_s` from the first record to the last.
//! `--set` overrides or adds a consumer setting (repeatable), to see what one setting costs
//! (`--set max.poll.records=5000`: a tenth of the commits). `--workers N` reads with
//! `Consumer::run_with_workers` (N worker threads, queues of 64) instead, to see what the
//! decoupled mode costs per record (`reader=ours-workers`).

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rebalance_guard::{Consumer, ConsumerConfig, ErrorChain};

struct Args {
    bootstrap: String,
    topic: String,
    group: String,
    count: u64,
    keyed: bool,
    workers: Option<usize>,
    settings: Vec<(String, String)>,
}

fn usage() -> String {
    "usage: consume_throughput --bootstrap HOST:PORT --topic TOPIC --group GROUP --count N \
     [--keyed] [--workers N] [--set NAME=VALUE ...]"
        .to_string()
}

fn parse_args() -> Result<Args, String> {
    let (mut bootstrap, mut topic, mut group, mut count, mut keyed, mut workers) =
        (None, None, None, None, false, None);
    let mut settings = Vec::new();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| format!("{flag} needs a value\n{}", usage()))
        };
        match flag.as_str() {
            "--bootstrap" => bootstrap = Some(value()?),
            "--topic" => topic = Some(value()?),
            "--group" => group = Some(value()?),
            "--count" => count = Some(value()?.parse().map_err(|e| format!("--count: {e}"))?),
            "--keyed" => keyed = true,
            "--workers" => workers = Some(value()?.parse().map_err(|e| format!("--workers: {e}"))?),
            "--set" => {
                let pair = value()?;
                let (name, v) = pair
                    .split_once('=')
                    .ok_or_else(|| format!("--set {pair}: expected NAME=VALUE"))?;
                settings.push((name.to_string(), v.to_string()));
            }
            other => return Err(format!("unknown argument {other}\n{}", usage())),
        }
    }
    Ok(Args {
        bootstrap: bootstrap.ok_or_else(usage)?,
        topic: topic.ok_or_else(usage)?,
        group: group.ok_or_else(usage)?,
        count: count.ok_or_else(usage)?,
        keyed,
        workers,
        settings,
    })
}

fn run(args: &Args) -> Result<String, Box<dyn std::error::Error>> {
    let mut props: Vec<(&str, &str)> = vec![
        ("bootstrap.servers", args.bootstrap.as_str()),
        ("group.id", args.group.as_str()),
        ("auto.offset.reset", "earliest"),
        ("session.timeout.ms", "10000"),
        ("heartbeat.interval.ms", "1000"),
        ("fetch.max.wait.ms", "100"),
    ];
    for (name, value) in &args.settings {
        props.retain(|(n, _)| n != name);
        props.push((name.as_str(), value.as_str()));
    }
    let config = ConsumerConfig::from_properties(props)?;
    // The fetch settings in force, from the config's own getters, for the bench to print beside
    // its table. Each broker's fetch thread keeps one fetch ahead, both answers within
    // fetch.buffer.bytes.
    println!(
        "bench consume settings reader=ours-{} fetch.min.bytes={} fetch.max.wait.ms={} \
         max.partition.fetch.bytes={} fetch.max.bytes={} max.poll.records={} \
         commit.interval.ms={} fetch.buffer.bytes={} prefetch=one-fetch-ahead-per-broker",
        if args.keyed { "keyed" } else { "run" },
        config.fetch_min_bytes(),
        config.fetch_max_wait().as_millis(),
        config.max_partition_fetch_bytes(),
        config.fetch_max_bytes(),
        config.max_poll_records(),
        config.commit_interval().as_millis(),
        config.fetch_buffer_bytes()
    );
    let started = Instant::now();
    let mut consumer = Consumer::subscribe(config, &[&args.topic])?;
    if args.keyed {
        consumer = consumer.with_idempotency_key(|record| {
            // Unique per record: partition and offset, 12 bytes, held inline (no allocation).
            let mut key = [0u8; 12];
            key[..4].copy_from_slice(&record.partition.to_be_bytes());
            key[4..].copy_from_slice(&record.offset.to_be_bytes());
            Some(key)
        });
    }
    if let Some(workers) = args.workers {
        return run_with_workers(args, consumer, started, workers);
    }
    let stop = AtomicBool::new(false);
    let mut seen = 0u64;
    let mut first: Option<Instant> = None;
    let mut last = started;
    consumer.run(&stop, |_record, _ctx| {
        // The clock is read at the first and the last record only: a read per record would be
        // the bench's cost, not the consumer's (the other readers read it as rarely).
        if first.is_none() {
            first = Some(Instant::now());
        }
        seen += 1;
        if seen >= args.count {
            last = Instant::now();
            stop.store(true, Ordering::SeqCst);
        }
        Ok::<(), std::convert::Infallible>(())
    })?;
    let fetch = consumer.stats().fetch;
    consumer.close()?;
    let first = first.unwrap_or(last);
    let by_node: Vec<String> = fetch
        .brokers
        .iter()
        .map(|(node, b)| format!("{node}:{}", b.bytes))
        .collect();
    Ok(format!(
        "reader=ours-{} records={seen} join_s={:.3} first_to_last_s={:.3} bytes_by_node={} \
         from_replicas={}",
        if args.keyed { "keyed" } else { "run" },
        first.duration_since(started).as_secs_f64(),
        last.duration_since(first).as_secs_f64(),
        by_node.join(","),
        fetch.from_replicas
    ))
}

/// The same read through `run_with_workers`: the handler counts on the workers, and the one that
/// sees the last record stops the run.
fn run_with_workers(
    args: &Args,
    mut consumer: Consumer,
    started: Instant,
    workers: usize,
) -> Result<String, Box<dyn std::error::Error>> {
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(AtomicU64::new(0));
    let times: Arc<Mutex<(Option<Instant>, Instant)>> = Arc::new(Mutex::new((None, started)));
    let (count, handler_stop, handler_seen, handler_times) =
        (args.count, stop.clone(), seen.clone(), times.clone());
    consumer.run_with_workers(&stop, workers, 64, move |_record, _ctx| {
        let n = handler_seen.fetch_add(1, Ordering::Relaxed) + 1;
        if n == 1 || n == count {
            let mut times = handler_times.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            times.0.get_or_insert(now);
            if n == count {
                times.1 = now;
                handler_stop.store(true, Ordering::SeqCst);
            }
        }
        Ok::<(), std::convert::Infallible>(())
    })?;
    consumer.close()?;
    let (first, last) = *times.lock().unwrap_or_else(|p| p.into_inner());
    let first = first.unwrap_or(last);
    Ok(format!(
        "reader=ours-workers records={} join_s={:.3} first_to_last_s={:.3}",
        seen.load(Ordering::Relaxed),
        first.duration_since(started).as_secs_f64(),
        last.duration_since(first).as_secs_f64(),
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
            eprintln!("consume_throughput: {}", ErrorChain(&*e));
            ExitCode::FAILURE
        }
    }
}
