//! The reader behind the verdict of `scripts/demo --exactly-once`: reads a topic to its end
//! twice, once as a `read_committed` reader sees it and once as a `read_uncommitted` one does,
//! so that the demo can count what the transactions made visible and what they aborted.
//!
//! ```text
//! cargo run --release --example fills_reader -- --bootstrap 127.0.0.1:9092 --topic fills \
//!     --partitions 12 --committed committed.txt --uncommitted uncommitted.txt [--stable-timeout-s 60]
//! ```
//!
//! It reads without a group (`Consumer::assign`, every partition from its first offset). First
//! it waits (bounded by `--stable-timeout-s`) until no transaction is open on the topic: until
//! every partition's last stable offset (`end_offsets` under `isolation.level=read_committed`)
//! equals its high watermark (`end_offsets` under `read_uncommitted`). A worker killed with
//! SIGKILL leaves its transaction open until the broker aborts it (`transaction.timeout.ms`);
//! reading before that would count its records as neither visible nor aborted. Then each reader
//! reads every partition up to that end (its position, which moves past transaction markers and,
//! under `read_committed`, past aborted records, reaches it) and writes one line per record,
//! `partition offset key value` (key and value as UTF-8, lossy; `-` for none), to its file.
//!
//! stdout: `ends partition=end,...` once the topic is stable (or `unstable ...` with both ends of
//! the partitions still open, exit status 1, at the timeout), then
//! `read isolation=read_committed records=N` and `read isolation=read_uncommitted records=N`.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use rebalance_guard::{Consumer, ConsumerConfig, TopicPartition};

type BoxError = Box<dyn std::error::Error>;

struct Args {
    bootstrap: String,
    topic: String,
    partitions: i32,
    committed: String,
    uncommitted: String,
    stable_timeout: Duration,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        bootstrap: String::new(),
        topic: String::new(),
        partitions: 0,
        committed: String::new(),
        uncommitted: String::new(),
        stable_timeout: Duration::from_secs(60),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--bootstrap" => args.bootstrap = value,
            "--topic" => args.topic = value,
            "--partitions" => {
                args.partitions = value.parse().map_err(|e| format!("--partitions: {e}"))?
            }
            "--committed" => args.committed = value,
            "--uncommitted" => args.uncommitted = value,
            "--stable-timeout-s" => {
                args.stable_timeout = Duration::from_secs(
                    value
                        .parse()
                        .map_err(|e| format!("--stable-timeout-s: {e}"))?,
                )
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if args.bootstrap.is_empty()
        || args.topic.is_empty()
        || args.partitions <= 0
        || args.committed.is_empty()
        || args.uncommitted.is_empty()
    {
        return Err(
            "usage: fills_reader --bootstrap B --topic T --partitions N \
                    --committed FILE --uncommitted FILE [--stable-timeout-s S]"
                .to_string(),
        );
    }
    Ok(args)
}

/// A group-less reader of `partitions` from their first offsets, under `isolation`.
fn reader(
    args: &Args,
    isolation: &str,
    partitions: &[TopicPartition],
) -> Result<Consumer, BoxError> {
    let config = ConsumerConfig::builder()
        .bootstrap_servers(args.bootstrap.split(','))
        // Never joined, never committed to: only where reading starts would be looked up there.
        .group_id(format!("fills-reader-{}-{isolation}", std::process::id()))
        .set("client.id", &format!("fills-reader-{isolation}"))
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", isolation)
        .build()?;
    Ok(Consumer::assign(config, partitions)?)
}

/// Reads every partition up to `ends` and writes its records to `path`; returns how many.
fn read_to(
    consumer: &mut Consumer,
    ends: &HashMap<TopicPartition, i64>,
    path: &str,
    deadline: Instant,
) -> Result<u64, BoxError> {
    let mut out = BufWriter::new(File::create(path).map_err(|e| format!("create {path}: {e}"))?);
    let text = |bytes: Option<&[u8]>| match bytes {
        Some(b) => String::from_utf8_lossy(b).replace(char::is_whitespace, "_"),
        None => "-".to_string(),
    };
    let mut count = 0u64;
    loop {
        let behind: Vec<&TopicPartition> = ends
            .iter()
            .filter(|(tp, end)| consumer.position(tp).is_none_or(|at| at < **end))
            .map(|(tp, _)| tp)
            .collect();
        if behind.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            let list: Vec<String> = behind
                .iter()
                .map(|tp| format!("{}@{:?}<{}", tp.partition, consumer.position(tp), ends[*tp]))
                .collect();
            return Err(format!("{path}: not at the end in time: {}", list.join(" ")).into());
        }
        let mut batch = consumer.poll(Duration::from_millis(200))?;
        while let Some(delivery) = batch.next() {
            let r = &delivery.record;
            if r.offset
                < ends
                    .get(&TopicPartition::new(r.topic.clone(), r.partition))
                    .copied()
                    .unwrap_or(i64::MAX)
            {
                writeln!(
                    out,
                    "{} {} {} {}",
                    r.partition,
                    r.offset,
                    text(r.key.as_deref()),
                    text(r.value.as_deref())
                )?;
                count += 1;
            }
            batch.complete(delivery);
        }
    }
    out.flush()?;
    Ok(count)
}

fn run() -> Result<bool, BoxError> {
    let args = parse()?;
    let partitions: Vec<TopicPartition> = (0..args.partitions)
        .map(|p| TopicPartition::new(args.topic.as_str(), p))
        .collect();
    let mut committed = reader(&args, "read_committed", &partitions)?;
    let mut uncommitted = reader(&args, "read_uncommitted", &partitions)?;
    let deadline = Instant::now() + args.stable_timeout;
    let ends = loop {
        let high = uncommitted.end_offsets(&partitions)?;
        let stable = committed.end_offsets(&partitions)?;
        let open: Vec<String> = partitions
            .iter()
            .filter(|tp| high.get(tp) != stable.get(tp))
            .map(|tp| {
                format!(
                    "{}:lso={:?},hw={:?}",
                    tp.partition,
                    stable.get(tp),
                    high.get(tp)
                )
            })
            .collect();
        if open.is_empty() {
            break high;
        }
        if Instant::now() >= deadline {
            println!("unstable {}", open.join(" "));
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    let mut list: Vec<(i32, i64)> = ends.iter().map(|(tp, end)| (tp.partition, *end)).collect();
    list.sort_unstable();
    let list: Vec<String> = list.iter().map(|(p, end)| format!("{p}={end}")).collect();
    println!("ends {}", list.join(","));
    let deadline = Instant::now() + Duration::from_secs(120);
    let n = read_to(&mut committed, &ends, &args.committed, deadline)?;
    println!("read isolation=read_committed records={n}");
    let n = read_to(&mut uncommitted, &ends, &args.uncommitted, deadline)?;
    println!("read isolation=read_uncommitted records={n}");
    committed.close()?;
    uncommitted.close()?;
    Ok(true)
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
        .format_timestamp_millis()
        .init();
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("fills_reader: {e}");
            ExitCode::FAILURE
        }
    }
}
