//! A share-group order worker: consumes `orders` as a member of a share group (KIP-932) and
//! applies each order's effect to an effect log, never once the record's lock may have expired.
//!
//! ```text
//! cargo run --release --example share_worker -- --bootstrap 127.0.0.1:9092 --group order-share \
//!     --topic orders --workers 4 --process-ms 5 --effects effects.log
//! ```
//!
//! Flags (std-only parsing; `scripts/demo --share` drives them):
//!
//! ```text
//! --bootstrap ADDR            bootstrap list, host:port[,host:port...]
//! --group G                   share group
//! --topic T                   topic to consume
//! [--workers N]               worker threads (`run_with_workers`); 0 (default): `run` on one thread
//! [--process-ms N]            simulated processing time per order (default 0), before the lease check
//! [--effects FILE]            append one line per applied effect (default: no effect log)
//! [--stop-after-idle-ms N]    exit after N ms without a new record (default 0: never)
//! [--name NAME]               name in this worker's output lines (default: pid)
//! [--set NAME=VALUE]          any other share consumer setting (repeatable)
//! ```
//!
//! **The effect.** An order's value is `order_id=<id>;...`; the order id is the idempotency key
//! (a record delivered again after this member applied it is accepted without running). The
//! handler sleeps `--process-ms`, then checks the record's lease (`ShareContext::is_current`)
//! and only if it is current appends one line to `--effects` (`O_APPEND`, one `write(2)`):
//!
//! ```text
//! effect_key order_id partition offset at_ms delivery_count lease_deadline_mono_ns applied_mono_ns
//! ```
//!
//! `lease_deadline_mono_ns` is the lease's end and `applied_mono_ns` the time right before the
//! write (after the lease check), both on CLOCK_MONOTONIC (the clock of every process on the
//! machine), so that the demo's checker can verify that no effect was applied after its lease
//! ended.
//!
//! **Output** (stdout, one line per event):
//!
//! ```text
//! start name=N pid=P group=G topic=T member=M
//! lease_expired name=N partition=P offset=O delivery=D   effect skipped: the lock may have expired
//! ack_failed name=N partition=P offset=O kind=K error=E  an acknowledgement the broker refused
//! stats name=N ...                                       at the end
//! stop name=N reason=signal|idle applied=K
//! closed name=N
//! failed name=N error=E                                  the worker gave up (exit status 1)
//! ```

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rebalance_guard::guard::BootClock;
use rebalance_guard::{
    ErrorChain, IdempotencyKey, Record, ShareConfig, ShareConsumer, ShareContext, ShareFailure,
};

const OPERATION: &str = "apply-order";

struct Args {
    bootstrap: String,
    group: String,
    topic: String,
    workers: usize,
    process: Duration,
    effects: Option<String>,
    stop_after_idle: Option<Duration>,
    name: String,
    settings: Vec<(String, String)>,
}

fn usage() -> String {
    "usage: share_worker --bootstrap ADDR --group G --topic T [--workers N] [--process-ms N] \
     [--effects FILE] [--stop-after-idle-ms N] [--name NAME] [--set NAME=VALUE ...]"
        .to_string()
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        bootstrap: String::new(),
        group: String::new(),
        topic: String::new(),
        workers: 0,
        process: Duration::ZERO,
        effects: None,
        stop_after_idle: None,
        name: std::process::id().to_string(),
        settings: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| format!("{flag} needs a value\n{}", usage()))
        };
        let number = |v: String| {
            v.parse::<u64>()
                .map_err(|_| format!("{flag}: not a number: {v}"))
        };
        match flag.as_str() {
            "--bootstrap" => args.bootstrap = value()?,
            "--group" => args.group = value()?,
            "--topic" => args.topic = value()?,
            "--workers" => args.workers = number(value()?)? as usize,
            "--process-ms" => args.process = Duration::from_millis(number(value()?)?),
            "--effects" => args.effects = Some(value()?),
            "--stop-after-idle-ms" => {
                let ms = number(value()?)?;
                args.stop_after_idle = (ms > 0).then(|| Duration::from_millis(ms));
            }
            "--name" => args.name = value()?,
            "--set" => {
                let item = value()?;
                let (k, v) = item
                    .split_once('=')
                    .ok_or_else(|| format!("--set {item}: expected NAME=VALUE"))?;
                args.settings
                    .push((k.trim().to_string(), v.trim().to_string()));
            }
            _ => return Err(format!("unknown flag {flag}\n{}", usage())),
        }
    }
    if args.bootstrap.is_empty() || args.group.is_empty() || args.topic.is_empty() {
        return Err(usage());
    }
    Ok(args)
}

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
        // SAFETY: `signal` is the C library's; the handler only performs an atomic store, which
        // is async-signal-safe.
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

/// CLOCK_MONOTONIC in nanoseconds: the clock the demo's checker and the Java peer
/// (`System.nanoTime`) share.
fn mono_ns() -> u128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u128 * 1_000_000_000 + ts.tv_nsec as u128
}

/// A lease's deadline (an `Instant` on the lease clock, `BootClock`, which runs ahead of
/// `Instant` by the time the machine was suspended) on CLOCK_MONOTONIC in nanoseconds: the
/// time left until it, read on the lease clock, is carried over to a CLOCK_MONOTONIC reading.
fn instant_mono_ns(at: Instant) -> u128 {
    let (now, now_ns) = (BootClock::shared().now(), mono_ns());
    match at.checked_duration_since(now) {
        Some(ahead) => now_ns + ahead.as_nanos(),
        None => now_ns.saturating_sub(now.duration_since(at).as_nanos()),
    }
}

fn order_id(record: &Record) -> Option<&str> {
    let value = std::str::from_utf8(record.value.as_deref()?).ok()?;
    value
        .split(';')
        .find_map(|field| field.strip_prefix("order_id="))
        .filter(|id| !id.is_empty() && !id.contains(char::is_whitespace))
}

fn unix_millis() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

/// What every handler thread shares: the effect log and the counters.
struct Effects {
    name: String,
    group: String,
    process: Duration,
    file: Option<Mutex<File>>,
    applied: AtomicU64,
    last_record: Mutex<Instant>,
}

impl Effects {
    fn handle(&self, record: &Record, ctx: &ShareContext) -> Result<(), ShareFailure> {
        if let Ok(mut last) = self.last_record.lock() {
            *last = Instant::now();
        }
        let Some(order) = order_id(record) else {
            // Not an order: nothing to apply, nothing to redo.
            return Ok(());
        };
        if !self.process.is_zero() {
            std::thread::sleep(self.process);
        }
        // The lock is a lease: check it right before the external effect.
        if !ctx.is_current() {
            println!(
                "lease_expired name={} partition={} offset={} delivery={}",
                self.name,
                record.partition,
                record.offset,
                ctx.delivery_count()
            );
            return Ok(());
        }
        let deadline_ns = ctx.deadline().map_or(0, instant_mono_ns);
        if let Some(file) = &self.file {
            let mut file = file
                .lock()
                .map_err(|_| ShareFailure::retryable("effect log lock poisoned"))?;
            let key = format!(
                "{}/{}/{}/{}/{OPERATION}",
                self.group, record.topic, record.partition, record.offset
            );
            let effect = format!(
                "{key} {order} {} {} {} {} {deadline_ns}",
                record.partition,
                record.offset,
                unix_millis(),
                ctx.delivery_count()
            );
            let applied_ns = mono_ns();
            file.write_all(format!("{effect} {applied_ns}\n").as_bytes())?;
        }
        self.applied.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let name = args.name.as_str();
    let properties = [
        ("bootstrap.servers".to_string(), args.bootstrap.clone()),
        ("group.id".to_string(), args.group.clone()),
        ("client.id".to_string(), name.to_string()),
    ]
    .into_iter()
    .chain(args.settings.iter().cloned());
    let config = ShareConfig::from_properties(properties)?;
    let printer = name.to_string();
    let mut consumer = ShareConsumer::subscribe(config, &[&args.topic])?
        .with_idempotency_key(|record| order_id(record).map(IdempotencyKey::from))
        .on_ack_failure(move |tp, offset, kind, error| {
            println!(
                "ack_failed name={printer} partition={} offset={offset} kind={} error={error}",
                tp.partition,
                format!("{kind:?}").to_ascii_lowercase()
            );
        });
    let file = match &args.effects {
        Some(path) => Some(Mutex::new(
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| format!("open {path}: {e}"))?,
        )),
        None => None,
    };
    println!(
        "start name={name} pid={} group={} topic={} member={}",
        std::process::id(),
        args.group,
        args.topic,
        consumer.member_id()
    );
    let effects = Arc::new(Effects {
        name: name.to_string(),
        group: args.group.clone(),
        process: args.process,
        file,
        applied: AtomicU64::new(0),
        last_record: Mutex::new(Instant::now()),
    });
    // `stop` is set by a signal or by the idle timer, both watched from a side thread.
    let stop = Arc::new(AtomicBool::new(false));
    let reason = Arc::new(Mutex::new("signal"));
    let watcher = {
        let (stop, reason, effects) = (stop.clone(), reason.clone(), effects.clone());
        let idle = args.stop_after_idle;
        std::thread::spawn(move || loop {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            if shutdown::REQUESTED.load(Ordering::SeqCst) {
                stop.store(true, Ordering::SeqCst);
                return;
            }
            if let (Some(idle), Ok(last)) = (idle, effects.last_record.lock()) {
                if last.elapsed() >= idle {
                    if let Ok(mut r) = reason.lock() {
                        *r = "idle";
                    }
                    stop.store(true, Ordering::SeqCst);
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        })
    };
    let started = Instant::now();
    let handler = |record: &Record, ctx: &ShareContext| effects.handle(record, ctx);
    let result = if args.workers > 0 {
        consumer.run_with_workers(&stop, args.workers, handler)
    } else {
        consumer.run(&stop, handler)
    };
    stop.store(true, Ordering::SeqCst);
    let _ = watcher.join();
    let reason = reason.lock().map(|r| *r).unwrap_or("signal");
    println!(
        "stop name={name} reason={reason} applied={} after_ms={}",
        effects.applied.load(Ordering::Relaxed),
        started.elapsed().as_millis()
    );
    println!("stats name={name} {}", consumer.stats());
    result?;
    consumer.close()?;
    println!("closed name={name}");
    Ok(())
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    shutdown::install();
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            println!("failed name={} error={}", args.name, ErrorChain(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}
