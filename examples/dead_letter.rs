//! Retries and a dead-letter topic: a handler that refuses some records is retried
//! (`processing.retries`, with a doubling backoff), and a record still failing after its retries
//! is copied to a dead-letter topic, with the error, the attempt count and its source topic,
//! partition and offset in headers, before its offset is committed past it.
//!
//! ```text
//! cargo run --example dead_letter -- --bootstrap 127.0.0.1:9092 --topic orders \
//!     --group order-workers --dead-letter-topic orders.dlq [--retries 2] [--idle-ms 5000]
//! ```
//!
//! The demo handler refuses every record whose value starts with `poison` (a stand-in for an
//! order the exchange rejects for good) and accepts the rest. Both topics must exist. It stops
//! after `--idle-ms` without a new record, then commits and leaves the group.
//!
//! The copy is written synchronously through the crate's wire client
//! ([`DeadLetterTopic::send`] waits for acks=all): the callback returns `Ok` only once the copy
//! is stored, and only then may the consumer commit past the record. If the dead-letter write
//! fails, the run stops with nothing committed past the record, which comes again on restart.
//!
//! Arguments are parsed with std only.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use rebalance_guard::{Consumer, ConsumerConfig, DeadLetterTopic};

struct Args {
    bootstrap: String,
    topic: String,
    group: String,
    dead_letter_topic: String,
    retries: String,
    idle: Duration,
}

fn usage() -> String {
    "usage: dead_letter --bootstrap HOST:PORT --topic TOPIC --group GROUP \
     --dead-letter-topic TOPIC [--retries N] [--idle-ms N]"
        .to_string()
}

fn parse_args() -> Result<Args, String> {
    let (mut bootstrap, mut topic, mut group, mut dead_letter_topic) = (None, None, None, None);
    let (mut retries, mut idle_ms) = ("2".to_string(), 5000u64);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{}", usage()))?;
        match flag.as_str() {
            "--bootstrap" => bootstrap = Some(value),
            "--topic" => topic = Some(value),
            "--group" => group = Some(value),
            "--dead-letter-topic" => dead_letter_topic = Some(value),
            "--retries" => retries = value,
            "--idle-ms" => {
                idle_ms = value
                    .parse()
                    .map_err(|_| format!("--idle-ms: not a number: {value}"))?
            }
            other => return Err(format!("unknown argument {other}\n{}", usage())),
        }
    }
    let missing = |name: &str| format!("{name} is required\n{}", usage());
    Ok(Args {
        bootstrap: bootstrap.ok_or_else(|| missing("--bootstrap"))?,
        topic: topic.ok_or_else(|| missing("--topic"))?,
        group: group.ok_or_else(|| missing("--group"))?,
        dead_letter_topic: dead_letter_topic.ok_or_else(|| missing("--dead-letter-topic"))?,
        retries,
        idle: Duration::from_millis(idle_ms),
    })
}

fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let config = ConsumerConfig::from_properties([
        ("bootstrap.servers", args.bootstrap.as_str()),
        ("group.id", args.group.as_str()),
        ("auto.offset.reset", "earliest"),
        ("processing.retries", args.retries.as_str()),
        ("processing.retry.backoff.ms", "200"),
        ("processing.retry.backoff.max.ms", "2000"),
    ])?;
    // Its own idempotent producer, with the consumer's client settings (credentials, TLS).
    let dead_letters = DeadLetterTopic::connect(&config, &args.dead_letter_topic)?;
    let mut consumer = Consumer::subscribe(config, &[&args.topic])?.on_dead_letter(
        move |record, error, attempts| {
            let at = dead_letters.send(record, error, attempts)?;
            println!(
                "dead-lettered {}-{} offset {} after {attempts} attempt(s) at {} offset {at}: {error}",
                record.topic, record.partition, record.offset, args.dead_letter_topic
            );
            Ok::<(), rebalance_guard::ProduceError>(())
        },
    );

    let stop = Arc::new(AtomicBool::new(false));
    let last_record = Arc::new(Mutex::new(Instant::now()));
    let (watch_stop, watch_last) = (stop.clone(), last_record.clone());
    thread::spawn(move || {
        while !watch_stop.load(Ordering::SeqCst) {
            let idle = watch_last.lock().map(|at| at.elapsed()).unwrap_or_default();
            if idle >= args.idle {
                watch_stop.store(true, Ordering::SeqCst);
            }
            thread::sleep(Duration::from_millis(100));
        }
    });
    consumer.run(&stop, |record, ctx| {
        if let Ok(mut at) = last_record.lock() {
            *at = Instant::now();
        }
        let value = record.value.as_deref().unwrap_or_default();
        if value.starts_with(b"poison") {
            return Err(format!(
                "the exchange refused the order (attempt {})",
                ctx.attempt()
            ));
        }
        println!(
            "processed {}-{} offset {}",
            record.topic, record.partition, record.offset
        );
        Ok(())
    })?;
    let stats = consumer.stats();
    println!(
        "retries={} dead_lettered={}",
        stats.retries, stats.dead_lettered
    );
    consumer.close()?;
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{}", rebalance_guard::ErrorChain(error.as_ref()));
            ExitCode::FAILURE
        }
    }
}
