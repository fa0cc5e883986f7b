//! Our share consumer's reader for `scripts/bench --share`: reads `--count` records of a topic as
//! a member of a share group (whose config already says `share.auto.offset.reset=earliest`),
//! accepts each, closes, and prints what it measured.
//!
//! ```text
//! share_throughput --bootstrap B --topic T --group G --count N [--set NAME=VALUE ...]
//! ```
//!
//! Output (stdout, the result line last):
//!
//! ```text
//! bench consume settings reader=ours-share NAME=VALUE ...
//! reader=ours-share records=N join_s=J first_to_last_s=T ack_round_trips=R fetches=F acks=A ack_failures=X
//! ```
//!
//! `join_s`: from subscribe to the first record; `first_to_last_s`: from the first record to the
//! last; `ack_round_trips`: requests that carried acknowledgements (each ShareFetch round after
//! the first carries the acknowledgements of what finished before it, the close one
//! ShareAcknowledge); exit status 0 only when `--count` records were read.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use rebalance_guard::{ErrorChain, ShareConfig, ShareConsumer};

struct Args {
    bootstrap: String,
    topic: String,
    group: String,
    count: u64,
    settings: Vec<(String, String)>,
}

fn parse_args() -> Result<Args, String> {
    let usage = "usage: share_throughput --bootstrap B --topic T --group G --count N \
                 [--set NAME=VALUE ...]";
    let (mut bootstrap, mut topic, mut group, mut count) = (None, None, None, None);
    let mut settings = Vec::new();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{usage}"))?;
        match flag.as_str() {
            "--bootstrap" => bootstrap = Some(value),
            "--topic" => topic = Some(value),
            "--group" => group = Some(value),
            "--count" => count = Some(value.parse().map_err(|_| format!("--count {value}"))?),
            "--set" => {
                let (k, v) = value
                    .split_once('=')
                    .ok_or_else(|| format!("--set {value}: expected NAME=VALUE"))?;
                settings.push((k.trim().to_string(), v.trim().to_string()));
            }
            _ => return Err(format!("unknown flag {flag}\n{usage}")),
        }
    }
    match (bootstrap, topic, group, count) {
        (Some(bootstrap), Some(topic), Some(group), Some(count)) => Ok(Args {
            bootstrap,
            topic,
            group,
            count,
            settings,
        }),
        _ => Err(usage.to_string()),
    }
}

fn run(args: &Args) -> Result<String, Box<dyn std::error::Error>> {
    let properties = [
        ("bootstrap.servers".to_string(), args.bootstrap.clone()),
        ("group.id".to_string(), args.group.clone()),
    ]
    .into_iter()
    .chain(args.settings.iter().cloned());
    let config = ShareConfig::from_properties(properties)?;
    println!(
        "bench consume settings reader=ours-share {}",
        args.settings
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let started = Instant::now();
    let mut consumer = ShareConsumer::subscribe(config, &[&args.topic])?;
    let mut read = 0u64;
    let mut first = None;
    let mut last = started;
    let deadline = started + Duration::from_secs(600);
    while read < args.count {
        if Instant::now() > deadline {
            return Err(format!("read {read} of {} records in 600 s", args.count).into());
        }
        for delivery in consumer.poll(Duration::from_millis(500))? {
            first.get_or_insert_with(Instant::now);
            read += 1;
            delivery.applied();
        }
        last = Instant::now();
    }
    let first = first.unwrap_or(last);
    let stats = consumer.stats();
    consumer.close()?;
    // The close sent the last ones (counted only after close, so counted here).
    let ack_round_trips = stats.ack_round_trips + 1;
    Ok(format!(
        "reader=ours-share records={read} join_s={:.3} first_to_last_s={:.3} \
         ack_round_trips={ack_round_trips} fetches={} acks={} ack_failures={}",
        first.duration_since(started).as_secs_f64(),
        last.duration_since(first).as_secs_f64(),
        stats.fetch_round_trips,
        stats.acknowledgements,
        stats.locks.ack_failures.total()
    ))
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
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
            eprintln!("share_throughput: {}", ErrorChain(&*e));
            ExitCode::FAILURE
        }
    }
}
