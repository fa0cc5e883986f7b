//! Consume, transform, produce, exactly once: reads orders from an input topic in a consumer
//! group and writes one `fill:<order>` record per order (same key) to an output topic, each
//! order's fill and its offset commit in one transaction (`Consumer::run_transactional`).
//!
//! ```text
//! cargo run --release --example transform_orders -- BOOTSTRAP GROUP INPUT OUTPUT TXN_ID \
//!     INTERVAL_MS COUNT [--workers N] [--protocol classic|consumer] [--idle-ms N] \
//!     [--process-ms N] [--set K=V]... [--producer-set K=V]...
//! ```
//!
//! - `TXN_ID`: the producer's `transactional.id` (one per worker process; a restart with the
//!   same id fences the previous process and aborts what it left open).
//! - `INTERVAL_MS`: `transaction.interval.ms`.
//! - `COUNT`: stop after this many orders were transformed (0: never; see `--idle-ms`).
//! - `--workers N`: the decoupled mode (`run_transactional_with_workers`) with N threads.
//! - `--protocol`: `group.protocol` (classic by default).
//! - `--idle-ms N`: stop after N ms without a new order (0, the default: never).
//! - `--first-order-ms N`: with `--idle-ms`, how long to wait for the first order instead.
//! - `--process-ms N`: sleep N ms in the handler of every order (0, the default: none), so that
//!   a transaction stays open long enough for the fault tests (`tests/brokers/producer/
//!   txn_faults.rs`) to kill or freeze the process in the middle of one.
//! - `--set K=V`: any consumer setting; `--producer-set K=V`: any producer setting
//!   (`transaction.timeout.ms` is 10000 unless given: Kafka's 60 s default exceeds the default
//!   session of 45 s, which `with_transactions` refuses).
//!
//! Output (stdout), what `scripts/bench --exactly-once` and the tests read:
//!
//! ```text
//! bench exactly-once settings impl=ours interval_ms=.. isolation=read_committed ...
//! started pid=P transactional_id=ID
//! transform consumed=N produced=N transactions=T aborted=A elapsed_ms=E
//! ```
//!
//! `elapsed_ms` runs from the first order received to the return of `close` (the last
//! transaction committed), as the Java benchmark program measures it.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rebalance_guard::{
    Consumer, ConsumerConfig, Producer, ProducerConfig, ProducerRecord, Record, TransactionContext,
};

struct Args {
    bootstrap: String,
    group: String,
    input: String,
    output: String,
    transactional_id: String,
    interval_ms: u64,
    count: u64,
    workers: usize,
    protocol: String,
    idle_ms: u64,
    first_order_ms: Option<u64>,
    process_ms: u64,
    consumer_settings: Vec<(String, String)>,
    producer_settings: Vec<(String, String)>,
}

fn parse() -> Result<Args, String> {
    let mut raw = std::env::args().skip(1);
    let mut positional = Vec::new();
    let mut args = Args {
        bootstrap: String::new(),
        group: String::new(),
        input: String::new(),
        output: String::new(),
        transactional_id: String::new(),
        interval_ms: 100,
        count: 0,
        workers: 0,
        protocol: "classic".to_string(),
        idle_ms: 0,
        first_order_ms: None,
        process_ms: 0,
        consumer_settings: Vec::new(),
        producer_settings: Vec::new(),
    };
    let setting = |text: String| {
        text.split_once('=')
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .ok_or_else(|| format!("expected NAME=VALUE, got {text}"))
    };
    while let Some(arg) = raw.next() {
        let mut value = || raw.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--workers" => {
                args.workers = value()?.parse().map_err(|e| format!("--workers: {e}"))?
            }
            "--protocol" => args.protocol = value()?,
            "--first-order-ms" => {
                args.first_order_ms = Some(
                    value()?
                        .parse()
                        .map_err(|e| format!("--first-order-ms: {e}"))?,
                )
            }
            "--idle-ms" => {
                args.idle_ms = value()?.parse().map_err(|e| format!("--idle-ms: {e}"))?
            }
            "--process-ms" => {
                args.process_ms = value()?.parse().map_err(|e| format!("--process-ms: {e}"))?
            }
            "--set" => args.consumer_settings.push(setting(value()?)?),
            "--producer-set" => args.producer_settings.push(setting(value()?)?),
            _ => positional.push(arg),
        }
    }
    let [bootstrap, group, input, output, transactional_id, interval_ms, count] =
        <[String; 7]>::try_from(positional).map_err(|p| {
            format!("expected BOOTSTRAP GROUP INPUT OUTPUT TXN_ID INTERVAL_MS COUNT, got {p:?}")
        })?;
    args.bootstrap = bootstrap;
    args.group = group;
    args.input = input;
    args.output = output;
    args.transactional_id = transactional_id;
    args.interval_ms = interval_ms
        .parse()
        .map_err(|e| format!("INTERVAL_MS: {e}"))?;
    args.count = count.parse().map_err(|e| format!("COUNT: {e}"))?;
    Ok(args)
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
        .format_timestamp_millis()
        .init();
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("transform_orders: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse()?;
    // The producer's default `transaction.timeout.ms` (60 s, Kafka's) exceeds the consumer's
    // default session (45 s), which `with_transactions` refuses: unless given, 10 s (a frozen
    // worker's open transaction holds its partitions' next owner back at most that long).
    let mut producer = ProducerConfig::builder()
        .bootstrap_servers([args.bootstrap.as_str()])
        .set("transactional.id", &args.transactional_id)
        .set("transaction.timeout.ms", "10000");
    for (k, v) in &args.producer_settings {
        producer = producer.set(k, v);
    }
    let producer_config = producer.build()?;
    let producer = Producer::new(producer_config.clone())?;
    let mut consumer = ConsumerConfig::builder()
        .bootstrap_servers([args.bootstrap.as_str()])
        .group_id(&args.group)
        .set("auto.offset.reset", "earliest")
        .set("group.protocol", &args.protocol)
        .set("transaction.interval.ms", &args.interval_ms.to_string());
    for (k, v) in &args.consumer_settings {
        consumer = consumer.set(k, v);
    }
    let consumer_config = consumer.build()?;
    println!(
        "bench exactly-once settings impl=ours interval_ms={} isolation=read_committed \
         protocol={} workers={} acks={:?} linger_ms={} batch_size={} max_in_flight={} \
         compression={:?} fetch_min_bytes={} fetch_max_wait_ms={} max_partition_fetch_bytes={} \
         max_poll_records={} session_timeout_ms={} transaction_timeout_ms={}",
        consumer_config.transaction_interval().as_millis(),
        args.protocol,
        args.workers,
        producer_config.acks(),
        producer_config.linger().as_millis(),
        producer_config.batch_size(),
        producer_config.max_in_flight_requests_per_connection(),
        producer_config.compression_type(),
        consumer_config.fetch_config().min_bytes,
        consumer_config.fetch_config().max_wait.as_millis(),
        consumer_config.fetch_config().max_partition_bytes,
        consumer_config.max_poll_records(),
        consumer_config.session_timeout().as_millis(),
        producer.transaction_timeout().as_millis(),
    );
    let mut consumer =
        Consumer::subscribe(consumer_config, &[&args.input])?.with_transactions(producer)?;
    println!(
        "started pid={} transactional_id={}",
        std::process::id(),
        args.transactional_id
    );
    let stop = Arc::new(AtomicBool::new(false));
    let consumed = Arc::new(AtomicU64::new(0));
    let first: Arc<Mutex<Option<Instant>>> = Arc::default();
    let last = Arc::new(Mutex::new(Instant::now()));
    if args.idle_ms > 0 {
        // A watcher ends the run after `--idle-ms` without a new order (before the first one:
        // `--first-order-ms`, when given).
        let (stop, last, waker) = (stop.clone(), last.clone(), consumer.waker());
        let idle = Duration::from_millis(args.idle_ms);
        let before_first = Duration::from_millis(args.first_order_ms.unwrap_or(args.idle_ms));
        let done = consumed.clone();
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(50));
            let bound = if done.load(Ordering::SeqCst) == 0 {
                before_first
            } else {
                idle
            };
            let quiet = last.lock().map(|at| at.elapsed() >= bound).unwrap_or(true);
            if quiet {
                stop.store(true, Ordering::SeqCst);
                waker.wake();
                return;
            }
        });
    }
    let output = args.output.clone();
    let count = args.count;
    let process = Duration::from_millis(args.process_ms);
    let (done, started, seen, halt) = (consumed.clone(), first.clone(), last.clone(), stop.clone());
    let handle = move |order: &Record, tx: &mut TransactionContext<'_>| {
        if let Ok(mut at) = started.lock() {
            at.get_or_insert_with(Instant::now);
        }
        if let Ok(mut at) = seen.lock() {
            *at = Instant::now();
        }
        if !process.is_zero() {
            std::thread::sleep(process);
        }
        let mut fill = b"fill:".to_vec();
        fill.extend_from_slice(order.value.as_deref().unwrap_or_default());
        let mut record = ProducerRecord::new(output.as_str(), fill);
        if let Some(key) = &order.key {
            record = record.key(key.clone());
        }
        tx.send(record);
        if done.fetch_add(1, Ordering::SeqCst) + 1 >= count && count > 0 {
            halt.store(true, Ordering::SeqCst);
        }
        Ok::<(), std::io::Error>(())
    };
    if args.workers > 0 {
        consumer.run_transactional_with_workers(&stop, args.workers, 256, handle)?;
    } else {
        consumer.run_transactional(&stop, handle)?;
    }
    let stats = consumer.stats();
    consumer.close()?;
    let elapsed = first
        .lock()
        .ok()
        .and_then(|at| *at)
        .map_or(0, |at| at.elapsed().as_millis());
    let n = consumed.load(Ordering::SeqCst);
    println!(
        "transform consumed={n} produced={n} transactions={} aborted={} elapsed_ms={elapsed}",
        stats.transactions_committed + 1,
        stats.transactions_aborted
    );
    Ok(())
}
