//! Runs a consumer with the `metrics` feature and serves its signals at
//! `http://127.0.0.1:9464/metrics` in Prometheus's text format, through a small recorder of its
//! own (`recorder.rs`: `std::net`, no HTTP framework, no exporter crate).
//!
//! ```text
//! cargo run --example prometheus_metrics --features metrics -- --bootstrap 127.0.0.1:9092 \
//!     --topic orders --group order-workers [--listen 127.0.0.1:9464] [--count N]
//! curl -s http://127.0.0.1:9464/metrics | grep rebalance_guard_lag
//! ```
//!
//! With `--count N` it stops after N records, closes the consumer (its partitions are handed
//! back: a handoff is recorded) and prints the final rendering; without, it runs until killed.

mod recorder;

use std::net::TcpListener;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rebalance_guard::{Consumer, ConsumerConfig, ErrorChain};

use recorder::TextRecorder;

struct Args {
    bootstrap: String,
    topic: String,
    group: String,
    listen: String,
    count: Option<u64>,
}

fn parse_args() -> Result<Args, String> {
    let usage = "usage: prometheus_metrics --bootstrap HOST:PORT --topic TOPIC --group GROUP \
                 [--listen ADDR] [--count N]";
    let (mut bootstrap, mut topic, mut group, mut count) = (None, None, None, None);
    let mut listen = "127.0.0.1:9464".to_string();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{usage}"))?;
        match flag.as_str() {
            "--bootstrap" => bootstrap = Some(value),
            "--topic" => topic = Some(value),
            "--group" => group = Some(value),
            "--listen" => listen = value,
            "--count" => count = Some(value.parse().map_err(|e| format!("--count: {e}"))?),
            other => return Err(format!("unknown argument {other}\n{usage}")),
        }
    }
    Ok(Args {
        bootstrap: bootstrap.ok_or(usage)?,
        topic: topic.ok_or(usage)?,
        group: group.ok_or(usage)?,
        listen,
        count,
    })
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    // The recorder goes in before the consumer exists: the facade binds its handles to the
    // recorder installed when they are made.
    let recorder = TextRecorder::default();
    metrics::set_global_recorder(recorder.clone())?;
    rebalance_guard::metrics::describe();
    let listener = TcpListener::bind(&args.listen)?;
    println!("serving http://{}/metrics", listener.local_addr()?);
    recorder.serve(listener);

    let config = ConsumerConfig::builder()
        .bootstrap_servers([args.bootstrap.as_str()])
        .group_id(&args.group)
        .set("auto.offset.reset", "earliest")
        .build()?;
    let mut consumer = Consumer::subscribe(config, &[&args.topic])?;
    let stop = AtomicBool::new(false);
    let seen = AtomicU64::new(0);
    consumer.run(&stop, |_record, _ctx| {
        let seen = seen.fetch_add(1, Ordering::Relaxed) + 1;
        if args.count.is_some_and(|count| seen >= count) {
            stop.store(true, Ordering::Relaxed);
        }
        Ok::<(), std::io::Error>(())
    })?;
    consumer.close()?;
    print!("{}", recorder.render());
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(usage) => {
            eprintln!("{usage}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("prometheus_metrics: {}", ErrorChain(error.as_ref()));
            ExitCode::FAILURE
        }
    }
}
