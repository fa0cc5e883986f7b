//! Records how long partitions stop flowing while a group rebalances, for `scripts/bench --gap`.
//!
//! ```text
//! cargo run --release --example rebalance_gap -- --bootstrap 127.0.0.1:9092 --topic T \
//!     --protocol cooperative-sticky --out DIR [--partitions 12] [--rate 400] \
//!     [--join-at-s 6] [--leave-at-s 14] [--end-s 22]
//! ```
//!
//! Why it exists: what a rebalance costs a trading or payment worker is the time its partitions
//! deliver nothing, and the cost differs by protocol: eager range stops every partition, a
//! cooperative one should stop only the partitions that move. This runs a steady producer over
//! a fresh topic (`--rate` records/s per partition), three members of one group from the start
//! (`Consumer::run`, a handler that only notes each record), a fourth that joins at `--join-at-s`
//! and the first one leaving (`close`, so LeaveGroup) at `--leave-at-s`. It writes every record
//! received as `t_ms,member,partition,offset` to `DIR/records.csv` and the two events as
//! `event,t_ms,member` to `DIR/events.csv`; `scripts/bench_gap.py` turns them into the numbers
//! and the plot.
//!
//! `--protocol` is `range` or `cooperative-sticky` (classic group protocol, that assignor), or
//! `consumer` (KIP-848, the broker assigns).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rebalance_guard::consumer::{Consumer, ConsumerConfig};
use rebalance_guard::wire::{Client, ClientConfig};
use rebalance_guard::{Producer, ProducerConfig, ProducerRecord};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

struct Args {
    bootstrap: String,
    topic: String,
    protocol: String,
    out: PathBuf,
    partitions: i32,
    rate: u32,
    join_at: Duration,
    leave_at: Duration,
    end: Duration,
}

fn usage() -> String {
    "usage: rebalance_gap --bootstrap HOST:PORT --topic TOPIC --protocol \
     range|cooperative-sticky|consumer --out DIR [--partitions N] [--rate PER_PARTITION_PER_S] \
     [--join-at-s S] [--leave-at-s S] [--end-s S]"
        .to_string()
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        bootstrap: String::new(),
        topic: String::new(),
        protocol: String::new(),
        out: PathBuf::new(),
        partitions: 12,
        rate: 400,
        join_at: Duration::from_secs(6),
        leave_at: Duration::from_secs(14),
        end: Duration::from_secs(22),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{}", usage()))?;
        let secs = |v: &str| {
            v.parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s > 0.0)
                .map(Duration::from_secs_f64)
                .ok_or_else(|| format!("{flag}: not a positive number of seconds: {v}"))
        };
        match flag.as_str() {
            "--bootstrap" => a.bootstrap = value,
            "--topic" => a.topic = value,
            "--protocol" => a.protocol = value,
            "--out" => a.out = PathBuf::from(value),
            "--partitions" => a.partitions = value.parse().map_err(|e| format!("{flag}: {e}"))?,
            "--rate" => a.rate = value.parse().map_err(|e| format!("{flag}: {e}"))?,
            "--join-at-s" => a.join_at = secs(&value)?,
            "--leave-at-s" => a.leave_at = secs(&value)?,
            "--end-s" => a.end = secs(&value)?,
            other => return Err(format!("unknown argument {other}\n{}", usage())),
        }
    }
    if a.bootstrap.is_empty() || a.topic.is_empty() || a.protocol.is_empty() {
        return Err(usage());
    }
    if a.out.as_os_str().is_empty() || a.partitions < 1 || a.rate < 1 {
        return Err(usage());
    }
    if !(a.join_at < a.leave_at && a.leave_at < a.end) {
        return Err("need --join-at-s < --leave-at-s < --end-s".to_string());
    }
    Ok(a)
}

/// The group settings of one protocol: the classic protocol with one assignor, or KIP-848.
fn protocol_settings(protocol: &str) -> Result<Vec<(&'static str, &'static str)>, String> {
    match protocol {
        // Short enough that a rebalance is noticed within half a second, as a latency-minded
        // deployment would set it; the same as the broker's group.consumer.* settings for the
        // consumer protocol (scripts/kafka_broker.py: session 6000 ms, heartbeat 500 ms), which
        // refuses these two client settings because the broker owns them.
        "range" => Ok(vec![
            ("partition.assignment.strategy", "range"),
            ("session.timeout.ms", "6000"),
            ("heartbeat.interval.ms", "500"),
        ]),
        "cooperative-sticky" => Ok(vec![
            ("partition.assignment.strategy", "cooperative-sticky"),
            ("session.timeout.ms", "6000"),
            ("heartbeat.interval.ms", "500"),
        ]),
        "consumer" => Ok(vec![("group.protocol", "consumer")]),
        other => Err(format!(
            "--protocol {other}: expected range, cooperative-sticky or consumer"
        )),
    }
}

/// What one member received: (ms since the start, partition, offset) per record.
type Received = Vec<(f64, i32, i64)>;

/// One member: subscribes, runs until `stop`, closes (LeaveGroup), returns what it received.
fn member(
    args: &Args,
    group: &str,
    started: Instant,
    stop: &AtomicBool,
) -> Result<Received, BoxError> {
    let mut props = vec![
        ("bootstrap.servers", args.bootstrap.as_str()),
        ("group.id", group),
        ("auto.offset.reset", "earliest"),
        ("fetch.max.wait.ms", "100"),
    ];
    props.extend(protocol_settings(&args.protocol)?);
    let config = ConsumerConfig::from_properties(props)?;
    let mut consumer = Consumer::subscribe(config, &[&args.topic])?;
    let mut received: Received = Vec::new();
    consumer.run(stop, |record, _ctx| {
        let t = started.elapsed().as_secs_f64() * 1000.0;
        received.push((t, record.partition, record.offset));
        Ok::<(), std::convert::Infallible>(())
    })?;
    consumer.close()?;
    Ok(received)
}

/// Produces `rate` records/s to every partition, in 20 ms ticks, until `stop`, through the
/// crate's producer (`linger.ms=0`: each tick's records go at once).
fn produce(args: &Args, stop: &AtomicBool) -> Result<u64, BoxError> {
    let producer = Producer::new(
        ProducerConfig::builder()
            .bootstrap_servers([args.bootstrap.as_str()])
            .set("linger.ms", "0")
            .build()?,
    )?;
    let tick = Duration::from_millis(20);
    let per_tick = (args.rate as usize / 50).max(1);
    let value = Bytes::from(vec![b'x'; 100]);
    let mut next = Instant::now();
    let mut sent = 0u64;
    while !stop.load(Ordering::SeqCst) {
        for p in 0..args.partitions {
            for _ in 0..per_tick {
                producer
                    .send(ProducerRecord::new(args.topic.as_str(), value.clone()).partition(p))?;
                sent += 1;
            }
        }
        next += tick;
        let now = Instant::now();
        if next > now {
            thread::sleep(next - now);
        } else {
            // Behind: catch up from now instead of bursting.
            next = now;
        }
    }
    producer.close()?;
    Ok(sent)
}

fn create_topic(args: &Args) -> Result<(), BoxError> {
    let mut client = Client::connect(ClientConfig::from_bootstrap_str(&args.bootstrap))?;
    client.create_topics(&[(&args.topic, args.partitions, 1)])?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match client.partitions(&args.topic) {
            Ok(p) if p.len() == args.partitions as usize => return Ok(()),
            _ if Instant::now() >= deadline => {
                return Err(format!("topic {} did not appear in 30 s", args.topic).into())
            }
            _ => thread::sleep(Duration::from_millis(100)),
        }
    }
}

fn run(args: &Args) -> Result<(), BoxError> {
    protocol_settings(&args.protocol)?;
    create_topic(args)?;
    std::fs::create_dir_all(&args.out)?;
    let group = format!("{}-group", args.topic);
    let started = Instant::now();
    let stop_producer = AtomicBool::new(false);
    let stops: Vec<AtomicBool> = (0..4).map(|_| AtomicBool::new(false)).collect();
    let mut events: Vec<(&str, f64, usize)> = Vec::new();
    let ms = |at: Instant| at.duration_since(started).as_secs_f64() * 1000.0;
    let received = thread::scope(|s| -> Result<Vec<Received>, BoxError> {
        let producer = s.spawn(|| produce(args, &stop_producer));
        let spawn = |i: usize| {
            let (group, stop) = (group.as_str(), &stops[i]);
            s.spawn(move || member(args, group, started, stop))
        };
        let mut members: Vec<_> = (0..3).map(spawn).collect();
        thread::sleep(args.join_at.saturating_sub(started.elapsed()));
        events.push(("join", ms(Instant::now()), 3));
        members.push(spawn(3));
        thread::sleep(args.leave_at.saturating_sub(started.elapsed()));
        events.push(("leave", ms(Instant::now()), 0));
        stops[0].store(true, Ordering::SeqCst);
        thread::sleep(args.end.saturating_sub(started.elapsed()));
        for stop in &stops {
            stop.store(true, Ordering::SeqCst);
        }
        let mut received = Vec::new();
        for (i, m) in members.into_iter().enumerate() {
            let r = m
                .join()
                .map_err(|_| format!("member {i} panicked"))?
                .map_err(|e| format!("member {i}: {e}"))?;
            received.push(r);
        }
        stop_producer.store(true, Ordering::SeqCst);
        let sent = producer
            .join()
            .map_err(|_| "the producer panicked")?
            .map_err(|e| format!("producer: {e}"))?;
        eprintln!("rebalance_gap: produced {sent} records");
        Ok(received)
    })?;
    let mut out = BufWriter::new(File::create(args.out.join("records.csv"))?);
    writeln!(out, "t_ms,member,partition,offset")?;
    for (member, records) in received.iter().enumerate() {
        for (t, partition, offset) in records {
            writeln!(out, "{t:.3},{member},{partition},{offset}")?;
        }
    }
    out.flush()?;
    let mut out = BufWriter::new(File::create(args.out.join("events.csv"))?);
    writeln!(out, "event,t_ms,member")?;
    for (event, t, member) in &events {
        writeln!(out, "{event},{t:.3},{member}")?;
    }
    out.flush()?;
    println!(
        "rebalance_gap: protocol={} records={} out={}",
        args.protocol,
        received.iter().map(Vec::len).sum::<usize>(),
        args.out.display()
    );
    Ok(())
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
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rebalance_gap: {e}");
            ExitCode::FAILURE
        }
    }
}
