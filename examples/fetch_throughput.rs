//! Reads every partition of a topic from its earliest to its latest offset (no consumer group)
//! and prints the throughput, timed from the first record received to the last.
//!
//! ```text
//! cargo run --release --example fetch_throughput -- --bootstrap 127.0.0.1:9092 --topic T
//! ```
//!
//! Why it exists: the wire layer's fetch path (one pipelined Fetch per leader with many
//! partitions, zero-copy record payloads) is meant to beat librdkafka; `scripts/bench-fetch`
//! runs this against `kcat` on the same topic. Arguments are parsed with std only.

use std::collections::HashMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use rebalance_guard::wire::{
    Client, ClientConfig, FetchConfig, FetchPosition, IsolationLevel, OffsetSpec,
};
use rebalance_guard::ErrorChain;
use rebalance_guard::TopicPartition;

struct Args {
    bootstrap: String,
    topic: String,
    max_partition_bytes: i32,
    max_bytes: i32,
    min_bytes: i32,
    max_wait_ms: u64,
    prefetch: bool,
}

fn usage() -> String {
    "usage: fetch_throughput --bootstrap HOST:PORT[,HOST:PORT...] --topic TOPIC \
     [--max-partition-bytes N] [--max-bytes N] [--min-bytes N] [--max-wait-ms N] \
     [--no-prefetch]"
        .to_string()
}

fn parse_args() -> Result<Args, String> {
    let mut bootstrap = None;
    let mut topic = None;
    let mut max_partition_bytes = 8 * 1024 * 1024;
    let mut max_bytes = 50 * 1024 * 1024;
    let mut min_bytes = 1;
    let mut max_wait_ms = 100;
    let mut prefetch = true;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| format!("{flag} needs a value\n{}", usage()))
        };
        match flag.as_str() {
            "--bootstrap" => bootstrap = Some(value()?),
            "--topic" => topic = Some(value()?),
            "--max-partition-bytes" => {
                max_partition_bytes = value()?.parse().map_err(|e| format!("{flag}: {e}"))?
            }
            "--max-bytes" => max_bytes = value()?.parse().map_err(|e| format!("{flag}: {e}"))?,
            "--min-bytes" => min_bytes = value()?.parse().map_err(|e| format!("{flag}: {e}"))?,
            "--max-wait-ms" => {
                max_wait_ms = value()?.parse().map_err(|e| format!("{flag}: {e}"))?
            }
            "--no-prefetch" => prefetch = false,
            "-h" | "--help" => return Err(usage()),
            other => return Err(format!("unknown argument {other}\n{}", usage())),
        }
    }
    Ok(Args {
        bootstrap: bootstrap.ok_or_else(usage)?,
        topic: topic.ok_or_else(usage)?,
        max_partition_bytes,
        max_bytes,
        min_bytes,
        max_wait_ms,
        prefetch,
    })
}

fn run(args: &Args) -> Result<String, Box<dyn std::error::Error>> {
    let mut client = Client::connect(ClientConfig::from_bootstrap_str(&args.bootstrap))?;
    let partitions = client.partitions(&args.topic)?;
    let tps: Vec<TopicPartition> = partitions
        .iter()
        .map(|&p| TopicPartition::new(args.topic.as_str(), p))
        .collect();
    let earliest =
        client.list_offsets(&tps, OffsetSpec::Earliest, IsolationLevel::ReadUncommitted)?;
    let mut end: HashMap<TopicPartition, i64> =
        client.list_offsets(&tps, OffsetSpec::Latest, IsolationLevel::ReadUncommitted)?;
    let mut positions: Vec<FetchPosition> = tps
        .iter()
        .filter(|tp| earliest[tp] < end[tp])
        .map(|tp| FetchPosition {
            tp: tp.clone(),
            offset: earliest[tp],
        })
        .collect();
    let cfg = FetchConfig {
        max_wait: Duration::from_millis(args.max_wait_ms),
        min_bytes: args.min_bytes,
        max_bytes: args.max_bytes,
        max_partition_bytes: args.max_partition_bytes,
        isolation: IsolationLevel::ReadUncommitted,
        prefetch: args.prefetch,
        client_rack: None,
    };
    // The settings in force, for scripts/bench to print beside its table.
    println!(
        "bench consume settings reader=ours-fetch fetch.min.bytes={} fetch.max.wait.ms={} \
         max.partition.fetch.bytes={} fetch.max.bytes={} prefetch={}",
        cfg.min_bytes,
        cfg.max_wait.as_millis(),
        cfg.max_partition_bytes,
        cfg.max_bytes,
        if cfg.prefetch {
            "one-fetch-ahead"
        } else {
            "none"
        }
    );
    let mut records = 0u64;
    let mut bytes = 0u64;
    let mut first: Option<Instant> = None;
    let mut last = Instant::now();
    let mut seen_hw = false;
    while !positions.is_empty() {
        let fetched = client.fetch(&positions, &cfg)?;
        for f in fetched {
            if let Some(e) = &f.error {
                if e.retriable() {
                    eprintln!("fetch_throughput: {}: {} (retrying)", f.tp, ErrorChain(e));
                    continue;
                }
                return Err(format!("{}: {}", f.tp, ErrorChain(e)).into());
            }
            if !f.records.is_empty() {
                let now = Instant::now();
                first.get_or_insert(now);
                last = now;
                records += f.records.len() as u64;
                for r in &f.records {
                    bytes += r.key.as_ref().map_or(0, |k| k.len()) as u64
                        + r.value.as_ref().map_or(0, |v| v.len()) as u64;
                }
            }
            if let Some(pos) = positions.iter_mut().find(|p| p.tp == f.tp) {
                pos.offset = f.next_offset;
            }
            // Some brokers (tansu) answer ListOffsets(latest) with less than the log end;
            // the high watermark of the first fetch response is authoritative.
            if !seen_hw {
                if let Some(e) = end.get_mut(&f.tp) {
                    *e = (*e).max(f.high_watermark);
                }
            }
        }
        seen_hw = true;
        positions.retain(|p| p.offset < end[&p.tp]);
    }
    let secs = first
        .map(|f| last.duration_since(f).as_secs_f64())
        .unwrap_or(0.0)
        .max(1e-9);
    Ok(format!(
        "fetch_throughput: {records} records, {:.1} MB (keys+values) from {} partitions in {secs:.3} s: {:.0} records/s {:.1} MB/s",
        bytes as f64 / 1e6,
        tps.len(),
        records as f64 / secs,
        bytes as f64 / 1e6 / secs
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
            eprintln!("fetch_throughput: {}", ErrorChain(&*e));
            ExitCode::FAILURE
        }
    }
}
