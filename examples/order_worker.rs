//! An order worker: consumes `orders` in a consumer group and applies each order's effect once
//! to an effect log, safely across rebalances.
//!
//! ```text
//! cargo run --release --example order_worker -- --bootstrap 127.0.0.1:9092 --group order-workers \
//!     --topic orders --strategy cooperative-sticky --process-ms 5 --effects effects.log
//! ```
//!
//! Flags (std-only parsing; `scripts/demo` drives them):
//!
//! ```text
//! --bootstrap ADDR            bootstrap list, host:port[,host:port...]
//! --group G                   consumer group
//! --topic T                   topic to consume
//! --strategy S                range | roundrobin | cooperative-sticky
//! [--instance-id ID]          static membership (group.instance.id): a restart keeps the partitions
//! [--process-ms N]            simulated processing time per order (default 0)
//! [--effects FILE]            append one line per applied effect (default: no effect log)
//! [--stop-after-idle-ms N]    exit after N ms without a new record (default 0: never)
//! [--max-poll-interval-ms N]  max.poll.interval.ms (default 300000)
//! [--session-timeout-ms N]    session.timeout.ms (default 45000)
//! [--heartbeat-interval-ms N] heartbeat.interval.ms (default 3000)
//! [--name NAME]               name in this worker's output lines (default: instance id or pid)
//! [--workers N]               decoupled mode (`run_with_workers`) with N worker threads
//!                             (default 0: the poll-process-commit loop on one thread)
//! [--processing-order O]      processing.order in decoupled mode: partition | key | unordered
//! [--protocol P]              group.protocol: classic (default) | consumer (KIP-848: the broker
//!                             assigns and owns the session and heartbeat timings, so --strategy,
//!                             --session-timeout-ms and --heartbeat-interval-ms are not sent)
//! [--set NAME=VALUE]          any other consumer setting (repeatable), e.g.
//!                             commit.interval.ms=3600000 commit.metadata.max.bytes=0
//! [--fills TOPIC]             exactly-once mode: write one fill per order to TOPIC in
//!                             transactions (`with_transactions`, `run_transactional` or, with
//!                             --workers, `run_transactional_with_workers`) instead of applying
//!                             an effect; see below
//! [--transactional-id ID]     the fills producer's transactional.id (default
//!                             `order-fills-<instance id>`, else `order-fills-<name>`)
//! [--transaction-timeout-ms N] transaction.timeout.ms (default: --session-timeout-ms, the
//!                             longest the library accepts)
//! ```
//!
//! **Decoupled mode.** With `--workers N` the handler runs on N threads while the poll thread
//! stays inside `run_with_workers`; an observer thread reads the membership and the guard from
//! the side (every 50 ms) to print the `assignment`, `commit` and `skipped` lines, and each
//! applied effect prints its own `applied` line (count=1, start_ms the handler's start).
//!
//! **The effect.** An order's value is `order_id=<id>;...`. The order id is the idempotency key
//! (so a redelivery inside this process is refused by the guard), and the effect key is derived
//! from group, topic, partition, offset and operation, so that an idempotent sink
//! could recognise a repeat by another worker. Each applied effect appends one line,
//! `effect_key order_id partition offset at_ms` (`at_ms`: wall-clock ms when the effect was
//! written, so that the demo can measure how long partitions stood still during broker faults),
//! to `--effects` with `O_APPEND`, written straight to
//! the file (no user-space buffer) *before* the record is completed: a crash after the effect and
//! before the commit gives a duplicate the log explains, never a loss. Right before the effect,
//! the record's lease is checked, so work whose partition was taken away meanwhile (lost on the
//! heartbeat thread) is not applied.
//!
//! **Output.** Besides `log` lines on stderr (`RUST_LOG`, default `info`), stdout carries one
//! line per event, which the demo's checker reads:
//!
//! ```text
//! start name=N pid=P group=G topic=T strategy=S instance=ID|-
//! assignment name=N gen=G owned=0,1,2 at_ms=T  whenever the generation or the ownership changes
//!                                              (T: wall-clock ms when this worker saw it)
//! commit name=N gen=G partition=P next=O       every committed position (loop and revocation)
//! applied name=N gen=G partition=P from=O to=O count=K start_ms=T end_ms=T
//!                                              effects of one batch, per partition, with the
//!                                              batch's wall-clock start and end
//! stale name=N partition=P offset=O            effect skipped: the partition moved meanwhile
//! skipped name=N completed=S                   records skipped so far because the committed
//!                                              completed-offsets map said an earlier owner
//!                                              finished them (the guard's skipped_completed,
//!                                              summed over partitions)
//! stop name=N reason=signal|idle applied=K
//! commit-refused name=N error=E               a commit the coordinator refused (not retried)
//! handoff-failed name=N gen=G partition=P stage=S error=E
//!                                               a revocation whose flush or commit failed: the
//!                                               partition's uncommitted records will be redone
//! closed name=N [final-commit-refused error=E] after close (left the group unless static)
//! failed name=N error=E                        the worker gave up (exit status 1)
//! ```
//!
//! **Exactly-once mode.** With `--fills TOPIC` the worker is a consume-transform-produce loop:
//! for each order it sends `fill:<order value>;by=<name>` (the order's key) to TOPIC inside the
//! open transaction, and the order's offset is committed in that same transaction
//! (`scripts/demo --exactly-once`). Nothing outside Kafka is written, so there is no idempotency
//! key (an aborted transaction's orders must be done again). The `--effects` log then lists
//! *attempts*: one line per handler call, written before the fill is handed to the transaction,
//! so an attempt whose transaction aborts is in the log and not in the topic. Two more stdout
//! lines: `transactional name=N id=ID timeout_ms=T` after `start`, and, before `closed`,
//! `transactions name=N committed=C aborted=A` (the consumer's counters: the transactions its
//! commits ended and those that aborted; `close` commits one more). A worker whose transactional
//! loop fails (fenced, say) prints `failed` and exits 1.
//!
//! **Shutdown.** SIGINT or SIGTERM (or `--stop-after-idle-ms`) stops intake after the current
//! record, commits, and closes the consumer, which revokes its partitions with a final commit and
//! leaves the group, unless it is a static member (then the partitions wait for its return).

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rebalance_guard::guard::PartitionSnapshot;
use rebalance_guard::stats::{GuardView, MembershipView};
use rebalance_guard::{
    Consumer, ConsumerConfig, ConsumerError, ErrorChain, IdempotencyKey, Producer, ProducerConfig,
    ProducerRecord, Record, TransactionContext, WorkContext,
};

/// The operation part of the effect key: what this worker does to an order.
const OPERATION: &str = "apply-order";

struct Args {
    bootstrap: String,
    group: String,
    topic: String,
    strategy: String,
    /// `group.protocol`: "classic" or "consumer".
    protocol: String,
    instance_id: Option<String>,
    process: Duration,
    effects: Option<String>,
    stop_after_idle: Option<Duration>,
    max_poll_interval_ms: u64,
    session_timeout_ms: u64,
    heartbeat_interval_ms: u64,
    name: String,
    workers: usize,
    processing_order: Option<String>,
    settings: Vec<(String, String)>,
    /// Exactly-once mode: the topic of the fills.
    fills: Option<String>,
    transactional_id: String,
    transaction_timeout_ms: u64,
}

fn usage() -> String {
    "usage: order_worker --bootstrap ADDR --group G --topic T \
     --strategy range|roundrobin|cooperative-sticky [--instance-id ID] [--process-ms N] \
     [--effects FILE] [--stop-after-idle-ms N] [--max-poll-interval-ms N] \
     [--session-timeout-ms N] [--heartbeat-interval-ms N] [--name NAME] [--workers N] \
     [--processing-order partition|key|unordered] [--protocol classic|consumer] \
     [--set NAME=VALUE ...] [--fills TOPIC [--transactional-id ID] \
     [--transaction-timeout-ms N]]"
        .to_string()
}

fn parse_args() -> Result<Args, String> {
    let mut bootstrap = None;
    let mut group = None;
    let mut topic = None;
    let mut strategy = None;
    let mut protocol = "classic".to_string();
    let mut instance_id = None;
    let mut process_ms = 0u64;
    let mut effects = None;
    let mut stop_after_idle_ms = 0u64;
    let mut max_poll_interval_ms = 300_000u64;
    let mut session_timeout_ms = 45_000u64;
    let mut heartbeat_interval_ms = 3_000u64;
    let mut name = None;
    let mut workers = 0usize;
    let mut processing_order = None;
    let mut settings = Vec::new();
    let mut fills = None;
    let mut transactional_id = None;
    let mut transaction_timeout_ms = None;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| format!("{flag} needs a value\n{}", usage()))
        };
        let number = |v: String| -> Result<u64, String> {
            v.parse().map_err(|e| format!("{flag}: {e} ({v:?})"))
        };
        match flag.as_str() {
            "--bootstrap" => bootstrap = Some(value()?),
            "--group" => group = Some(value()?),
            "--topic" => topic = Some(value()?),
            "--strategy" => strategy = Some(value()?),
            "--protocol" => protocol = value()?,
            "--instance-id" => instance_id = Some(value()?),
            "--process-ms" => process_ms = number(value()?)?,
            "--effects" => effects = Some(value()?),
            "--stop-after-idle-ms" => stop_after_idle_ms = number(value()?)?,
            "--max-poll-interval-ms" => max_poll_interval_ms = number(value()?)?,
            "--session-timeout-ms" => session_timeout_ms = number(value()?)?,
            "--heartbeat-interval-ms" => heartbeat_interval_ms = number(value()?)?,
            "--name" => name = Some(value()?),
            "--workers" => workers = number(value()?)? as usize,
            "--processing-order" => processing_order = Some(value()?),
            "--fills" => fills = Some(value()?),
            "--transactional-id" => transactional_id = Some(value()?),
            "--transaction-timeout-ms" => transaction_timeout_ms = Some(number(value()?)?),
            "--set" => {
                let pair = value()?;
                let (key, v) = pair
                    .split_once('=')
                    .ok_or_else(|| format!("--set {pair}: expected NAME=VALUE"))?;
                settings.push((key.to_string(), v.to_string()));
            }
            "-h" | "--help" => return Err(usage()),
            other => return Err(format!("unknown argument {other}\n{}", usage())),
        }
    }
    let missing = |flag: &str| format!("{flag} is required\n{}", usage());
    let strategy = strategy.ok_or_else(|| missing("--strategy"))?;
    if !["range", "roundrobin", "cooperative-sticky"].contains(&strategy.as_str()) {
        return Err(format!(
            "--strategy must be range, roundrobin or cooperative-sticky, not {strategy:?}"
        ));
    }
    if protocol != "classic" && protocol != "consumer" {
        return Err(format!(
            "--protocol must be classic or consumer, not {protocol:?}"
        ));
    }
    let name = name
        .or_else(|| instance_id.clone())
        .unwrap_or_else(|| format!("worker-{}", std::process::id()));
    // One transactional.id per worker; a static member's restart keeps it (derived from the
    // instance id), so that the new process fences the old one and aborts what it left open.
    let transactional_id = transactional_id.unwrap_or_else(|| {
        format!(
            "order-fills-{}",
            instance_id.as_deref().unwrap_or(name.as_str())
        )
    });
    Ok(Args {
        bootstrap: bootstrap.ok_or_else(|| missing("--bootstrap"))?,
        group: group.ok_or_else(|| missing("--group"))?,
        topic: topic.ok_or_else(|| missing("--topic"))?,
        strategy,
        protocol,
        instance_id,
        process: Duration::from_millis(process_ms),
        effects,
        stop_after_idle: (stop_after_idle_ms > 0)
            .then(|| Duration::from_millis(stop_after_idle_ms)),
        max_poll_interval_ms,
        session_timeout_ms,
        heartbeat_interval_ms,
        name,
        workers,
        processing_order,
        settings,
        fills,
        transactional_id,
        transaction_timeout_ms: transaction_timeout_ms.unwrap_or(session_timeout_ms),
    })
}

/// SIGINT and SIGTERM set a flag the poll loop checks between records. Std has no signal API,
/// and one flag does not justify a dependency: C's `signal` (in the C library std already links)
/// installs a handler that only stores to an atomic, which is async-signal-safe.
#[cfg(unix)]
mod shutdown {
    use std::sync::atomic::{AtomicBool, Ordering};

    pub static REQUESTED: AtomicBool = AtomicBool::new(false);

    const SIGINT: i32 = 2;
    const SIGTERM: i32 = 15;

    extern "C" {
        fn signal(signum: i32, handler: extern "C" fn(i32)) -> usize;
    }

    extern "C" fn on_signal(_signum: i32) {
        REQUESTED.store(true, Ordering::SeqCst);
    }

    pub fn install() {
        // SAFETY: `signal` is the C library's; the handler is a plain `extern "C"` function that
        // only performs an atomic store, which is async-signal-safe. Same numbers on Linux and
        // the BSDs/macOS.
        unsafe {
            signal(SIGINT, on_signal);
            signal(SIGTERM, on_signal);
        }
    }
}

#[cfg(not(unix))]
mod shutdown {
    use std::sync::atomic::AtomicBool;

    pub static REQUESTED: AtomicBool = AtomicBool::new(false);

    pub fn install() {}
}

/// The order id inside a value `order_id=<id>;...`.
fn order_id(record: &Record) -> Option<&str> {
    let value = std::str::from_utf8(record.value.as_deref()?).ok()?;
    value
        .split(';')
        .find_map(|field| field.strip_prefix("order_id="))
        .filter(|id| !id.is_empty() && !id.contains(char::is_whitespace))
}

/// `order_id`, logging the record a worker skips when it has none.
fn order_id_or_warn(record: &Record) -> Option<&str> {
    let order = order_id(record);
    if order.is_none() {
        log::warn!(
            "{}-{} offset {}: no order id, skipped",
            record.topic,
            record.partition,
            record.offset
        );
    }
    order
}

/// A stable effect key: consumer group + topic + partition + offset + operation.
fn effect_key(group: &str, record: &Record) -> String {
    format!(
        "{group}/{}/{}/{}/{OPERATION}",
        record.topic, record.partition, record.offset
    )
}

/// What this worker last printed, to print only changes.
#[derive(Default)]
struct Printed {
    generation: Option<i32>,
    owned: Vec<i32>,
    committed: BTreeMap<i32, i64>,
    skipped: u64,
}

/// Prints the assignment when the generation or ownership changed, every committed position
/// that moved (those of the loop's commits and those of revocations inside `poll`), and the
/// records skipped by the completed-offsets map when that count grew.
fn report(name: &str, consumer: &Consumer, printed: &mut Printed) {
    let stats = consumer.stats();
    let owned: Vec<i32> = consumer
        .assignment()
        .iter()
        .map(|tp| tp.partition)
        .collect();
    let guard: Vec<PartitionSnapshot> = stats.partitions.into_iter().map(|p| p.guard).collect();
    print_changes(name, stats.generation_id, owned, &guard, printed);
}

fn print_changes(
    name: &str,
    generation: i32,
    mut owned: Vec<i32>,
    partitions: &[PartitionSnapshot],
    printed: &mut Printed,
) {
    owned.sort_unstable();
    if printed.generation != Some(generation) || printed.owned != owned {
        let list: Vec<String> = owned.iter().map(i32::to_string).collect();
        println!(
            "assignment name={name} gen={generation} owned={} at_ms={}",
            list.join(","),
            unix_millis()
        );
        printed.generation = Some(generation);
        printed.owned = owned;
    }
    for p in partitions {
        let Some(next) = p.last_committed else {
            continue;
        };
        let partition = p.tp.partition;
        if printed.committed.get(&partition) != Some(&next) {
            println!("commit name={name} gen={generation} partition={partition} next={next}");
            printed.committed.insert(partition, next);
        }
    }
    let skipped: u64 = partitions.iter().map(|p| p.skipped_completed).sum();
    if skipped != printed.skipped {
        println!("skipped name={name} completed={skipped}");
        printed.skipped = skipped;
    }
}

/// Wall-clock milliseconds, comparable across the demo's processes.
fn unix_millis() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

fn open_effects(path: &str) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let name = args.name.as_str();
    let mut properties = vec![
        ("bootstrap.servers", args.bootstrap.clone()),
        ("group.id", args.group.clone()),
        ("client.id", name.to_string()),
        ("auto.offset.reset", "earliest".to_string()),
        (
            "max.poll.interval.ms",
            args.max_poll_interval_ms.to_string(),
        ),
    ];
    if args.protocol == "consumer" {
        // KIP-848: the broker assigns and owns the session and heartbeat timings
        // (group.consumer.*); the client refuses these three settings with it.
        properties.push(("group.protocol", "consumer".to_string()));
    } else {
        properties.push(("partition.assignment.strategy", args.strategy.clone()));
        properties.push(("session.timeout.ms", args.session_timeout_ms.to_string()));
        properties.push((
            "heartbeat.interval.ms",
            args.heartbeat_interval_ms.to_string(),
        ));
    }
    if let Some(id) = &args.instance_id {
        properties.push(("group.instance.id", id.clone()));
    }
    if let Some(order) = &args.processing_order {
        properties.push(("processing.order", order.clone()));
    }
    let properties = properties
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .chain(args.settings.iter().cloned());
    let config = ConsumerConfig::from_properties(properties)?;
    let group = args.group.clone();
    let consumer = Consumer::subscribe(config, &[&args.topic])?
        .with_stats_interval(Duration::from_secs(15))
        .on_storm(|status| log::warn!("rebalance storm: {status:?}; intake goes on (demo)"));
    let mut effects = match &args.effects {
        Some(path) => Some(open_effects(path).map_err(|e| format!("open {path}: {e}"))?),
        None => None,
    };
    println!(
        "start name={name} pid={} group={} topic={} strategy={} instance={}",
        std::process::id(),
        args.group,
        args.topic,
        args.strategy,
        args.instance_id.as_deref().unwrap_or("-")
    );
    if let Some(fills) = &args.fills {
        return run_fills(args, consumer, fills, effects);
    }
    let mut consumer =
        consumer.with_idempotency_key(|record| order_id(record).map(IdempotencyKey::from));

    let mut printed = Printed::default();
    if args.workers > 0 {
        let (reason, applied) = run_decoupled(args, &mut consumer, effects)?;
        return finish(args, consumer, &mut printed, reason, applied);
    }
    let mut applied = 0u64;
    let mut last_record = Instant::now();
    let mut poll_failures = 0u32;
    let reason = loop {
        if shutdown::REQUESTED.load(Ordering::SeqCst) {
            break "signal";
        }
        if let Some(idle) = args.stop_after_idle {
            if last_record.elapsed() >= idle {
                break "idle";
            }
        }
        let mut handled = 0u64;
        let batch_started = unix_millis();
        // Per partition: first and last offset applied in this batch, and how many.
        let mut ranges: BTreeMap<i32, (i64, i64, u64)> = BTreeMap::new();
        {
            let mut batch = match consumer.poll(Duration::from_millis(100)) {
                Ok(batch) => {
                    poll_failures = 0;
                    batch
                }
                Err(ConsumerError::Group(e)) => return Err(e.into()),
                Err(e) => {
                    // Anything else (network, a start position) is retried by the next poll;
                    // give up only when it keeps failing.
                    poll_failures += 1;
                    eprintln!(
                        "order_worker {name}: poll failed ({poll_failures}): {}",
                        ErrorChain(&e)
                    );
                    if poll_failures >= 20 {
                        return Err(e.into());
                    }
                    std::thread::sleep(Duration::from_millis(200));
                    continue;
                }
            };
            while let Some(delivery) = batch.next() {
                let record = &delivery.record;
                let Some(order) = order_id_or_warn(record) else {
                    batch.complete(delivery);
                    continue;
                };
                if !args.process.is_zero() {
                    std::thread::sleep(args.process);
                }
                // Assignment is a lease: check it right before the external effect.
                if batch.is_current(&delivery) {
                    if let Some(file) = effects.as_mut() {
                        let line = format!(
                            "{} {order} {} {} {}\n",
                            effect_key(&group, record),
                            record.partition,
                            record.offset,
                            unix_millis()
                        );
                        // One write(2) on an O_APPEND file: the line is in the file before the
                        // record counts as complete.
                        file.write_all(line.as_bytes())?;
                    }
                    applied += 1;
                    handled += 1;
                    let range =
                        ranges
                            .entry(record.partition)
                            .or_insert((record.offset, record.offset, 0));
                    range.1 = record.offset;
                    range.2 += 1;
                } else {
                    println!(
                        "stale name={name} partition={} offset={}",
                        record.partition, record.offset
                    );
                }
                batch.complete(delivery);
                if shutdown::REQUESTED.load(Ordering::SeqCst) {
                    break;
                }
            }
        }
        if handled > 0 {
            last_record = Instant::now();
            let generation = consumer.generation().generation_id;
            for (partition, (from, to, count)) in ranges {
                println!(
                    "applied name={name} gen={generation} partition={partition} from={from} \
                     to={to} count={count} start_ms={batch_started} end_ms={}",
                    unix_millis()
                );
            }
        }
        match consumer.commit() {
            Ok(_) => {}
            Err(ConsumerError::Commit(e)) => {
                println!("commit-refused name={name} error={}", ErrorChain(&e));
            }
            Err(e) => eprintln!("order_worker {name}: commit failed: {}", ErrorChain(&e)),
        }
        print_handoff_failures(name, &mut consumer);
        report(name, &consumer, &mut printed);
    };
    finish(args, consumer, &mut printed, reason, applied)
}

/// Prints the handoff failures of revocations (the partition's uncommitted records will be
/// redone by its next owner).
fn print_handoff_failures(name: &str, consumer: &mut Consumer) {
    for failure in consumer.take_handoff_failures() {
        println!(
            "handoff-failed name={name} gen={} partition={} stage={:?} error={}",
            failure.generation_id,
            failure.tp.partition,
            failure.stage,
            rebalance_guard::ErrorChain(failure.error.as_ref())
                .to_string()
                .replace(' ', "_")
        );
    }
}

/// The decoupled mode: `--workers` threads run the handler, the poll thread stays inside
/// `run_with_workers` until SIGTERM (or idleness), and an observer thread prints what the
/// membership and the guard say, since the poll thread cannot. Returns why it stopped and how
/// many effects were applied.
fn run_decoupled(
    args: &Args,
    consumer: &mut Consumer,
    effects: Option<File>,
) -> Result<(&'static str, u64), Box<dyn std::error::Error>> {
    let membership = consumer.membership_view();
    let guard = consumer.guard_view();
    let applied = Arc::new(AtomicU64::new(0));
    let last_effect_ms = Arc::new(AtomicU64::new(unix_millis() as u64));
    let idle_stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    let observer = spawn_observer(
        args,
        membership.clone(),
        guard,
        done.clone(),
        idle_stop.clone(),
        last_effect_ms.clone(),
    )?;
    let handler = {
        let name = args.name.clone();
        let group = args.group.clone();
        let process = args.process;
        let effects = effects.map(Arc::new);
        let (applied, last) = (applied.clone(), last_effect_ms.clone());
        move |record: &Record, ctx: &WorkContext<'_>| -> Result<(), std::io::Error> {
            let Some(order) = order_id_or_warn(record) else {
                return Ok(());
            };
            let start = unix_millis();
            if !process.is_zero() {
                std::thread::sleep(process);
            }
            // Assignment is a lease: check it right before the external effect.
            if !ctx.is_current() {
                println!(
                    "stale name={name} partition={} offset={}",
                    record.partition, record.offset
                );
                return Ok(());
            }
            if let Some(file) = &effects {
                let line = format!(
                    "{} {order} {} {} {}\n",
                    effect_key(&group, record),
                    record.partition,
                    record.offset,
                    unix_millis()
                );
                // One write(2) on an O_APPEND file: the line is in the file before the record
                // counts as complete.
                (&**file).write_all(line.as_bytes())?;
            }
            applied.fetch_add(1, Ordering::SeqCst);
            let end = unix_millis();
            last.store(end as u64, Ordering::SeqCst);
            let generation = membership.read().0.generation_id;
            println!(
                "applied name={name} gen={generation} partition={} from={} to={} count=1 \
                 start_ms={start} end_ms={end}",
                record.partition, record.offset, record.offset
            );
            Ok(())
        }
    };
    let outcome = consumer.run_with_workers(&shutdown::REQUESTED, args.workers, 64, handler);
    done.store(true, Ordering::SeqCst);
    if observer.join().is_err() {
        eprintln!("order_worker {}: the observer thread panicked", args.name);
    }
    print_handoff_failures(&args.name, consumer);
    outcome?;
    let reason = if idle_stop.load(Ordering::SeqCst) {
        "idle"
    } else {
        "signal"
    };
    Ok((reason, applied.load(Ordering::SeqCst)))
}

/// The observer of the decoupled and the exactly-once modes: every 50 ms it prints what the
/// membership and the guard say (the poll thread is inside the library's loop and cannot), and
/// stops the worker after `--stop-after-idle-ms` without an effect, until `done` is set.
fn spawn_observer(
    args: &Args,
    membership: MembershipView,
    guard: GuardView,
    done: Arc<AtomicBool>,
    idle_stop: Arc<AtomicBool>,
    last: Arc<AtomicU64>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let name = args.name.clone();
    let idle = args.stop_after_idle;
    std::thread::Builder::new()
        .name("observer".to_string())
        .spawn(move || {
            let mut printed = Printed::default();
            loop {
                let finished = done.load(Ordering::SeqCst);
                let (identity, owned) = membership.read();
                let snapshot = guard.snapshot();
                // A member between JoinGroup and SyncGroup already has its new generation
                // and not yet its partitions: such a moment is not an assignment to print.
                if !owned.is_empty() || identity.generation_id < 0 {
                    let owned = owned.iter().map(|tp| tp.partition).collect();
                    print_changes(
                        &name,
                        identity.generation_id,
                        owned,
                        &snapshot.partitions,
                        &mut printed,
                    );
                }
                if finished {
                    break;
                }
                if let Some(idle) = idle {
                    let since = (unix_millis() as u64).saturating_sub(last.load(Ordering::SeqCst));
                    if since >= idle.as_millis() as u64 {
                        idle_stop.store(true, Ordering::SeqCst);
                        shutdown::REQUESTED.store(true, Ordering::SeqCst);
                    }
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
}

/// The exactly-once mode (`--fills`): one fill per order into the open transaction, which
/// commits the order's offset with it; the loop is the library's transactional one (with
/// `--workers`, the decoupled form), watched by the observer thread.
fn run_fills(
    args: &Args,
    consumer: Consumer,
    fills: &str,
    effects: Option<File>,
) -> Result<(), Box<dyn std::error::Error>> {
    let name = args.name.clone();
    let producer = Producer::new(
        ProducerConfig::builder()
            .bootstrap_servers(args.bootstrap.split(','))
            .set("client.id", &format!("{name}-fills"))
            .set("transactional.id", &args.transactional_id)
            .set(
                "transaction.timeout.ms",
                &args.transaction_timeout_ms.to_string(),
            )
            .build()?,
    )?;
    // Fences an older producer with this transactional.id (a static member's previous process)
    // and aborts what it left open.
    let mut consumer = consumer.with_transactions(producer)?;
    println!(
        "transactional name={name} id={} timeout_ms={}",
        args.transactional_id, args.transaction_timeout_ms
    );
    let membership = consumer.membership_view();
    let applied = Arc::new(AtomicU64::new(0));
    let last_effect_ms = Arc::new(AtomicU64::new(unix_millis() as u64));
    let idle_stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    let observer = spawn_observer(
        args,
        membership.clone(),
        consumer.guard_view(),
        done.clone(),
        idle_stop.clone(),
        last_effect_ms.clone(),
    )?;
    let handler = {
        let name = name.clone();
        let group = args.group.clone();
        let topic = fills.to_string();
        let process = args.process;
        let effects = effects.map(Arc::new);
        let (applied, last) = (applied.clone(), last_effect_ms.clone());
        move |record: &Record, tx: &mut TransactionContext<'_>| -> Result<(), std::io::Error> {
            let Some(order) = order_id_or_warn(record) else {
                return Ok(());
            };
            let start = unix_millis();
            if !process.is_zero() {
                std::thread::sleep(process);
            }
            if !tx.is_current() {
                // The library drops the fill of a record whose partition moved; the line says
                // that it happened.
                println!(
                    "stale name={name} partition={} offset={}",
                    record.partition, record.offset
                );
            }
            if let Some(file) = &effects {
                // An attempt: in the log before the fill is handed to the transaction.
                let line = format!(
                    "{} {order} {} {} {}\n",
                    effect_key(&group, record),
                    record.partition,
                    record.offset,
                    unix_millis()
                );
                (&**file).write_all(line.as_bytes())?;
            }
            let mut fill = b"fill:".to_vec();
            fill.extend_from_slice(record.value.as_deref().unwrap_or_default());
            fill.extend_from_slice(format!(";by={name}").as_bytes());
            let mut out = ProducerRecord::new(topic.as_str(), fill);
            if let Some(key) = &record.key {
                out = out.key(key.clone());
            }
            tx.send(out);
            applied.fetch_add(1, Ordering::SeqCst);
            let end = unix_millis();
            last.store(end as u64, Ordering::SeqCst);
            let generation = membership.read().0.generation_id;
            println!(
                "applied name={name} gen={generation} partition={} from={} to={} count=1 \
                 start_ms={start} end_ms={end}",
                record.partition, record.offset, record.offset
            );
            Ok(())
        }
    };
    let outcome = if args.workers > 0 {
        consumer.run_transactional_with_workers(&shutdown::REQUESTED, args.workers, 64, handler)
    } else {
        consumer.run_transactional(&shutdown::REQUESTED, handler)
    };
    done.store(true, Ordering::SeqCst);
    if observer.join().is_err() {
        eprintln!("order_worker {name}: the observer thread panicked");
    }
    print_handoff_failures(&name, &mut consumer);
    let stats = consumer.stats();
    println!(
        "transactions name={name} committed={} aborted={}",
        stats.transactions_committed, stats.transactions_aborted
    );
    outcome?;
    let reason = if idle_stop.load(Ordering::SeqCst) {
        "idle"
    } else {
        "signal"
    };
    println!(
        "stop name={name} reason={reason} applied={}",
        applied.load(Ordering::SeqCst)
    );
    log::info!("{stats}");
    // Commits the last transaction, hands the partitions back (leaves unless static) and
    // closes the producer.
    consumer.close()?;
    println!("closed name={name}");
    Ok(())
}

/// The end of a run in either mode: a last commit, the last changes printed, and a close that
/// hands the partitions back (and leaves the group unless static).
fn finish(
    args: &Args,
    mut consumer: Consumer,
    printed: &mut Printed,
    reason: &str,
    applied: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    let name = args.name.as_str();
    println!("stop name={name} reason={reason} applied={applied}");
    match consumer.commit() {
        Ok(_) | Err(ConsumerError::Commit(_)) => {}
        Err(e) => eprintln!("order_worker {name}: final commit failed: {e}"),
    }
    report(name, &consumer, printed);
    log::info!("{}", consumer.stats());
    match consumer.close() {
        Ok(()) => println!("closed name={name}"),
        // The group was left (or, static, kept); only the final position was not committed, so
        // the next owner redoes the records after the last committed one.
        Err(ConsumerError::Commit(e)) => {
            println!(
                "closed name={name} final-commit-refused error={}",
                ErrorChain(&e)
            )
        }
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(msg) => {
            eprintln!("{msg}");
            return ExitCode::from(2);
        }
    };
    // Wall-clock seconds on every line, so the logs of several workers can be merged by time.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format(|buf, record| {
            let now = unix_millis();
            writeln!(
                buf,
                "{}.{:03} {:<5} {}: {}",
                now / 1000,
                now % 1000,
                record.level(),
                record.target(),
                record.args()
            )
        })
        .init();
    shutdown::install();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let e = ErrorChain(&*e);
            eprintln!("order_worker {}: {e}", args.name);
            println!("failed name={} error={e}", args.name);
            ExitCode::FAILURE
        }
    }
}
