//! Exactly once into a database: an order book in PostgreSQL that applies every order of a
//! Kafka topic once, through rebalances, crashes and members that stall between their lease
//! check and their write.
//!
//! ```text
//! cargo run --release -p order-book-pg -- BOOTSTRAP GROUP TOPIC PG_URL [--workers N] \
//!     [--protocol classic|consumer] [--instance-id ID] [--name NAME] [--set K=V]... \
//!     [--count N] [--idle-ms N] [--first-order-ms N] [--process-ms N] \
//!     [--hold-before-write DIR] [--pause-before-write-ms N [--pause-every K]]
//! ```
//!
//! The lease check (`ctx.is_current()`) makes a write after a rebalance rare, not impossible: a
//! member that checked its lease and then stalled (a pause, a page-fault storm, SIGSTOP) still
//! writes once it runs again, after its partition moved; and a member killed after its write and
//! before its offset reached the group is redone by the next owner. The pattern below closes
//! both, with the database as the judge. Each step, and why it is there:
//!
//! 1. **A fencing token per assignment.** The consumer gives every assignment of a partition a
//!    token larger than any earlier assignment's of that partition (in whichever member), and
//!    hands it with each record (`ctx.fencing_token()`) and to the rebalance listener
//!    (`AssignedContext::fencing_token`).
//! 2. **`on_assigned` claims the partition and seeks.** One statement stores the token in
//!    `partition_state` (`token = GREATEST(token, mine)`) and returns the partition's stored
//!    next offset; the listener seeks there. From the claim on, a write carrying an older token
//!    is refused, even before this member wrote anything; and reading starts where the database
//!    says the effects end, not where the group's commit says (the group's commit becomes
//!    advisory: it may lag, it is never ahead, and nothing reads it while the database has the
//!    partition). A partition the database has never seen starts at offset 0.
//! 3. **One transaction per order.** Right before it, `ctx.is_current()` (a record whose
//!    partition moved while it waited is skipped: its next owner applies it). Then, in the
//!    transaction: the partition's row, locked (the same claim statement: `FOR UPDATE` in
//!    effect), and its token compared with the record's: a larger stored token means the
//!    partition moved on, so the transaction rolls back and the refusal is counted (in
//!    `fenced_writes`, so that it survives a SIGKILL); else the order is inserted under its
//!    idempotency key (the order id; `ON CONFLICT DO NOTHING`: a record delivered again after
//!    its effect is absorbed, counted as `already_applied`, never applied twice), one line goes
//!    to the append-only `applications` log (no key at all: the independent count of
//!    duplicates), and the partition's next offset moves, all committed together. The effect
//!    and the position cannot part: a crash before the commit leaves neither, after it both.
//! 4. **The next offset is a contiguous prefix.** One record at a time per partition (`run`,
//!    or `--workers` with `processing.order=partition`, the default): the next offset is the
//!    record's offset plus one. With `--workers` and `processing.order=key` or `unordered`,
//!    records of one partition finish out of order, and storing offset + 1 of a record whose
//!    predecessor is still running would skip that one after a restart (a loss): the next
//!    offset then moves only over offsets present in `orders` (a gap in the partition, such as
//!    a transaction marker or a record that is no order, holds it back: what follows comes again
//!    after a move and is absorbed by the idempotency key; never a loss).
//!
//! Tables (created at start if missing): `orders(idempotency_key primary key, topic,
//! partition, offset, token, payload, applied_by, applied_at)`, unique on (topic, partition,
//! offset) too; `partition_state(topic, partition, token, next_offset)`; `applications` (one row
//! per committed application, no key: `inserted` false for a redelivery the key absorbed);
//! `fenced_writes` (one row per refused write).
//!
//! Arguments:
//!
//! - `BOOTSTRAP GROUP TOPIC PG_URL`: the brokers, the consumer group, the topic of orders (values
//!   `order_id=<id>;...`, as examples/produce_orders.rs writes them) and the database
//!   (`postgresql://user@host:port/db`).
//! - `--workers N`: the decoupled mode (`run_with_workers`) with N threads (0, the default: `run`
//!   on the poll thread). A thread takes a connection of its own from the member's pool for
//!   each transaction.
//! - `--protocol`: `group.protocol` (classic by default); `--instance-id ID`: static membership
//!   (`group.instance.id`); `--name NAME`: the `applied_by` of this member's rows (default: the
//!   instance id, else `member-<pid>`); `--set K=V`: any consumer setting.
//! - `--count N`: stop after N orders were applied (or found applied); `--idle-ms N`: stop after
//!   N ms without an order (`--first-order-ms N`: before the first one, wait that long instead).
//!   0 (the default): never.
//! - `--process-ms N`: N ms of work per order before its lease check.
//! - Fault hooks, between the lease check and the write (the window the token closes):
//!   `--hold-before-write DIR`: create `DIR/held-<topic>-<partition>-<offset>` and wait until
//!   `DIR/release` exists (a test holds a member exactly there while its partition moves);
//!   `--pause-before-write-ms N --pause-every K`: sleep N ms before every K-th write (K: 1 unless
//!   given), printing `pausing ...` first (the demo freezes a member in such a pause).
//!
//! Output (stdout), what the tests and `scripts/demo --database` read:
//!
//! ```text
//! started pid=P name=N group=G topic=T protocol=P workers=W next_offset=in-order|prefix
//! claim name=N partition=P token=T stored=S next=O        on_assigned (stale=1: newer claim)
//! revoked name=N partitions=P,...   lost name=N partitions=P,...
//! held name=N partition=P offset=O   released name=N partition=P offset=O
//! pausing name=N partition=P offset=O ms=M
//! fenced name=N partition=P offset=O token=T stored=S     a write the database refused
//! order_book applied=A already_applied=K fenced_writes=F stale=S elapsed_ms=E
//! ```

use std::fs;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use postgres::{Client, NoTls};
use rebalance_guard::guard::BoxError;
use rebalance_guard::{
    AssignedContext, Consumer, ConsumerConfig, ConsumerError, ConsumerRebalanceListener, Record,
    RevokedPartition, TopicPartition, WorkContext,
};

/// The tables, created if missing (under an advisory lock: members start side by side, and two
/// `CREATE TABLE IF NOT EXISTS` at once can still collide in PostgreSQL's catalog).
const SCHEMA: &str = r#"
SELECT pg_advisory_xact_lock(37);
CREATE TABLE IF NOT EXISTS orders (
    idempotency_key text PRIMARY KEY,
    topic text NOT NULL,
    partition integer NOT NULL,
    "offset" bigint NOT NULL,
    token bigint NOT NULL,
    payload text NOT NULL,
    applied_by text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (topic, partition, "offset")
);
CREATE TABLE IF NOT EXISTS partition_state (
    topic text NOT NULL,
    partition integer NOT NULL,
    token bigint NOT NULL,
    next_offset bigint NOT NULL,
    PRIMARY KEY (topic, partition)
);
CREATE TABLE IF NOT EXISTS applications (
    order_id text NOT NULL,
    topic text NOT NULL,
    partition integer NOT NULL,
    "offset" bigint NOT NULL,
    token bigint NOT NULL,
    applied_by text NOT NULL,
    inserted boolean NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS fenced_writes (
    order_id text NOT NULL,
    topic text NOT NULL,
    partition integer NOT NULL,
    "offset" bigint NOT NULL,
    token bigint NOT NULL,
    stored_token bigint NOT NULL,
    applied_by text NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
);
"#;

/// The claim: the partition's row with the larger of its token and ours, locked until the
/// transaction ends, and what it holds now. A partition never seen starts at offset 0.
const CLAIM: &str = "INSERT INTO partition_state AS s (topic, partition, token, next_offset) \
     VALUES ($1, $2, $3, 0) \
     ON CONFLICT (topic, partition) DO UPDATE SET token = GREATEST(s.token, EXCLUDED.token) \
     RETURNING token, next_offset";

const INSERT_ORDER: &str = "INSERT INTO orders \
     (idempotency_key, topic, partition, \"offset\", token, payload, applied_by) \
     VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING";

const LOG_APPLICATION: &str = "INSERT INTO applications \
     (order_id, topic, partition, \"offset\", token, applied_by, inserted) \
     VALUES ($1, $2, $3, $4, $5, $6, $7)";

const LOG_FENCED: &str = "INSERT INTO fenced_writes \
     (order_id, topic, partition, \"offset\", token, stored_token, applied_by) \
     VALUES ($1, $2, $3, $4, $5, $6, $7)";

/// One record at a time per partition: the next offset is the last record's plus one.
const NEXT_IN_ORDER: &str = "UPDATE partition_state \
     SET next_offset = GREATEST(next_offset, $3) WHERE topic = $1 AND partition = $2";

/// Out of order: the end of the run of offsets present in `orders` from the stored next offset
/// on (the stored one when it is absent).
const NEXT_PREFIX: &str = "UPDATE partition_state s SET next_offset = COALESCE(( \
         SELECT o.\"offset\" + 1 FROM orders o \
         WHERE o.topic = s.topic AND o.partition = s.partition AND o.\"offset\" >= s.next_offset \
           AND NOT EXISTS (SELECT 1 FROM orders n WHERE n.topic = o.topic \
               AND n.partition = o.partition AND n.\"offset\" = o.\"offset\" + 1) \
         ORDER BY o.\"offset\" LIMIT 1), s.next_offset) \
     WHERE s.topic = $1 AND s.partition = $2 AND EXISTS (SELECT 1 FROM orders f \
         WHERE f.topic = s.topic AND f.partition = s.partition AND f.\"offset\" = s.next_offset)";

/// How the next offset moves (step 4 of the header).
#[derive(Clone, Copy, PartialEq, Eq)]
enum NextOffset {
    InOrder,
    Prefix,
}

struct Args {
    bootstrap: String,
    group: String,
    topic: String,
    url: String,
    workers: usize,
    protocol: String,
    instance_id: Option<String>,
    name: String,
    settings: Vec<(String, String)>,
    count: u64,
    idle_ms: u64,
    first_order_ms: Option<u64>,
    process_ms: u64,
    hold: Option<PathBuf>,
    pause_ms: u64,
    pause_every: u64,
}

fn usage() -> &'static str {
    "usage: order_book_pg BOOTSTRAP GROUP TOPIC PG_URL [--workers N] \
     [--protocol classic|consumer] [--instance-id ID] [--name NAME] [--set K=V]... [--count N] \
     [--idle-ms N] [--first-order-ms N] [--process-ms N] [--hold-before-write DIR] \
     [--pause-before-write-ms N [--pause-every K]]"
}

fn parse() -> Result<Args, String> {
    let mut raw = std::env::args().skip(1);
    let mut positional = Vec::new();
    let mut workers = 0usize;
    let mut protocol = "classic".to_string();
    let mut instance_id = None;
    let mut name = None;
    let mut settings = Vec::new();
    let (mut count, mut idle_ms, mut first_order_ms, mut process_ms) = (0, 0, None, 0);
    let mut hold = None;
    let (mut pause_ms, mut pause_every) = (0, 1);
    while let Some(arg) = raw.next() {
        let mut value = || raw.next().ok_or_else(|| format!("{arg} needs a value"));
        let number = |v: String| -> Result<u64, String> {
            v.parse().map_err(|e| format!("{arg}: {e} ({v:?})"))
        };
        match arg.as_str() {
            "--workers" => workers = number(value()?)? as usize,
            "--protocol" => protocol = value()?,
            "--instance-id" => instance_id = Some(value()?),
            "--name" => name = Some(value()?),
            "--set" => {
                let pair = value()?;
                let (k, v) = pair
                    .split_once('=')
                    .ok_or_else(|| format!("--set {pair}: expected NAME=VALUE"))?;
                settings.push((k.to_string(), v.to_string()));
            }
            "--count" => count = number(value()?)?,
            "--idle-ms" => idle_ms = number(value()?)?,
            "--first-order-ms" => first_order_ms = Some(number(value()?)?),
            "--process-ms" => process_ms = number(value()?)?,
            "--hold-before-write" => hold = Some(PathBuf::from(value()?)),
            "--pause-before-write-ms" => pause_ms = number(value()?)?,
            "--pause-every" => pause_every = number(value()?)?.max(1),
            "-h" | "--help" => return Err(usage().to_string()),
            other if other.starts_with("--") => {
                return Err(format!("unknown flag {other}\n{}", usage()))
            }
            _ => positional.push(arg),
        }
    }
    let [bootstrap, group, topic, url] = <[String; 4]>::try_from(positional).map_err(|p| {
        format!(
            "expected BOOTSTRAP GROUP TOPIC PG_URL, got {p:?}\n{}",
            usage()
        )
    })?;
    if protocol != "classic" && protocol != "consumer" {
        return Err(format!(
            "--protocol must be classic or consumer, not {protocol:?}"
        ));
    }
    let name = name
        .or_else(|| instance_id.clone())
        .unwrap_or_else(|| format!("member-{}", std::process::id()));
    Ok(Args {
        bootstrap,
        group,
        topic,
        url,
        workers,
        protocol,
        instance_id,
        name,
        settings,
        count,
        idle_ms,
        first_order_ms,
        process_ms,
        hold,
        pause_ms,
        pause_every,
    })
}

/// SIGINT and SIGTERM set a flag (C's `signal`, in the C library std already links: one flag
/// does not justify a dependency); a watcher thread turns it into a stop and a wake.
#[cfg(unix)]
mod shutdown {
    use std::sync::atomic::{AtomicBool, Ordering};

    pub static REQUESTED: AtomicBool = AtomicBool::new(false);

    extern "C" {
        fn signal(signum: i32, handler: extern "C" fn(i32)) -> usize;
    }

    extern "C" fn on_signal(_signum: i32) {
        REQUESTED.store(true, Ordering::SeqCst);
    }

    pub fn install() {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe; SIGINT (2)
        // and SIGTERM (15) have these numbers on Linux, the BSDs and macOS.
        unsafe {
            signal(2, on_signal);
            signal(15, on_signal);
        }
    }
}

#[cfg(not(unix))]
mod shutdown {
    use std::sync::atomic::AtomicBool;

    pub static REQUESTED: AtomicBool = AtomicBool::new(false);

    pub fn install() {}
}

/// What every thread of the member shares: the settings of the write and its counters.
struct Book {
    db: Pool,
    name: String,
    next_offset: NextOffset,
    process: Duration,
    hold: Option<PathBuf>,
    pause: Duration,
    pause_every: u64,
    count: u64,
    applied: AtomicU64,
    already_applied: AtomicU64,
    fenced: AtomicU64,
    stale: AtomicU64,
    /// Orders applied or found applied (for `--count`).
    handled: AtomicU64,
    pauses: AtomicU64,
    /// When the first order came and the last one did (the idle stop reads it).
    first: Mutex<Option<Instant>>,
    last: Mutex<Instant>,
    stop: AtomicBool,
}

/// What one write did.
enum Outcome {
    Applied,
    AlreadyApplied,
    /// Refused: the partition's stored token is larger than the record's.
    Fenced {
        stored: i64,
    },
}

/// The member's database connections: a thread takes one for a statement or a transaction and
/// puts it back (the poll thread for the listener and `run`'s handler, each worker thread for
/// its own), so there are as many as threads write at once. A connection a failure closed is
/// dropped, and the next use opens a new one. (Not thread-locals: a connection owns a small
/// runtime of its own, which must not be dropped while its thread is being torn down.)
struct Pool {
    url: String,
    idle: Mutex<Vec<Client>>,
}

impl Pool {
    fn with<T>(
        &self,
        f: impl FnOnce(&mut Client) -> Result<T, postgres::Error>,
    ) -> Result<T, postgres::Error> {
        let taken = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        let mut client = match taken {
            Some(client) => client,
            None => Client::connect(&self.url, NoTls)?,
        };
        let result = f(&mut client);
        if !client.is_closed() {
            if let Ok(mut idle) = self.idle.lock() {
                idle.push(client);
            }
        }
        result
    }
}

/// The order id inside a value `order_id=<id>;...`: the idempotency key.
fn order_id(record: &Record) -> Option<&str> {
    std::str::from_utf8(record.value.as_deref()?)
        .ok()?
        .split(';')
        .find_map(|field| field.strip_prefix("order_id="))
        .filter(|id| !id.is_empty())
}

/// An i64 for PostgreSQL's bigint (a token beyond it would be a broken metadata, not a number
/// any group reaches).
fn bigint(token: u64) -> Result<i64, BoxError> {
    i64::try_from(token).map_err(|_| format!("fencing token {token} exceeds a bigint").into())
}

impl Book {
    /// Marks an order seen (for `--idle-ms`).
    fn touch(&self) {
        let now = Instant::now();
        if let Ok(mut first) = self.first.lock() {
            first.get_or_insert(now);
        }
        if let Ok(mut last) = self.last.lock() {
            *last = now;
        }
    }

    /// Step 3 of the header: the handler of one record, in `run` and `run_with_workers` alike.
    fn handle(&self, record: &Record, ctx: &WorkContext<'_>) -> Result<(), BoxError> {
        self.touch();
        let Some(order) = order_id(record) else {
            log::warn!(
                "{}-{} offset {}: no order id, skipped",
                record.topic,
                record.partition,
                record.offset
            );
            return Ok(());
        };
        if !self.process.is_zero() {
            std::thread::sleep(self.process);
        }
        // The lease, right before the transaction: a record whose partition moved meanwhile
        // is its next owner's.
        if !ctx.is_current() {
            self.stale.fetch_add(1, Ordering::SeqCst);
            return Ok(());
        }
        self.fault_hooks(record);
        let token = bigint(ctx.fencing_token())?;
        let outcome = self.db.with(|db| self.write(db, record, order, token))?;
        match outcome {
            Outcome::Applied => self.applied.fetch_add(1, Ordering::SeqCst),
            Outcome::AlreadyApplied => self.already_applied.fetch_add(1, Ordering::SeqCst),
            Outcome::Fenced { stored } => {
                self.fenced.fetch_add(1, Ordering::SeqCst);
                println!(
                    "fenced name={} partition={} offset={} token={token} stored={stored}",
                    self.name, record.partition, record.offset
                );
                // The lease is stale anyway: the record is its next owner's.
                return Ok(());
            }
        };
        if self.count > 0 && self.handled.fetch_add(1, Ordering::SeqCst) + 1 >= self.count {
            self.stop.store(true, Ordering::SeqCst);
        }
        Ok(())
    }

    /// The order's transaction: token check under the partition's lock, the effect under its
    /// idempotency key, the application log, the next offset; one commit.
    fn write(
        &self,
        db: &mut Client,
        record: &Record,
        order: &str,
        token: i64,
    ) -> Result<Outcome, postgres::Error> {
        let (topic, partition, offset) = (&*record.topic, record.partition, record.offset);
        let mut tx = db.transaction()?;
        let row = tx.query_one(CLAIM, &[&topic, &partition, &token])?;
        let stored: i64 = row.get(0);
        if stored > token {
            // The partition was claimed since by a newer assignment: nothing of ours is kept.
            tx.rollback()?;
            db.execute(
                LOG_FENCED,
                &[
                    &order, &topic, &partition, &offset, &token, &stored, &self.name,
                ],
            )?;
            return Ok(Outcome::Fenced { stored });
        }
        let payload = String::from_utf8_lossy(record.value.as_deref().unwrap_or_default());
        let inserted = tx.execute(
            INSERT_ORDER,
            &[
                &order,
                &topic,
                &partition,
                &offset,
                &token,
                &payload.as_ref(),
                &self.name,
            ],
        )? == 1;
        tx.execute(
            LOG_APPLICATION,
            &[
                &order, &topic, &partition, &offset, &token, &self.name, &inserted,
            ],
        )?;
        match self.next_offset {
            NextOffset::InOrder => {
                tx.execute(NEXT_IN_ORDER, &[&topic, &partition, &(offset + 1)])?
            }
            NextOffset::Prefix => tx.execute(NEXT_PREFIX, &[&topic, &partition])?,
        };
        tx.commit()?;
        Ok(if inserted {
            Outcome::Applied
        } else {
            Outcome::AlreadyApplied
        })
    }

    /// The fault hooks between the lease check and the write (see the header).
    fn fault_hooks(&self, record: &Record) {
        let (name, p, o) = (&self.name, record.partition, record.offset);
        if let Some(dir) = &self.hold {
            let release = dir.join("release");
            if !release.exists() {
                let held = dir.join(format!("held-{}-{p}-{o}", record.topic));
                if let Err(e) = fs::write(&held, b"") {
                    log::error!("create {}: {e}", held.display());
                }
                println!("held name={name} partition={p} offset={o}");
                while !release.exists() {
                    std::thread::sleep(Duration::from_millis(20));
                }
                println!("released name={name} partition={p} offset={o}");
            }
        }
        if !self.pause.is_zero()
            && self.pauses.fetch_add(1, Ordering::SeqCst) % self.pause_every == self.pause_every - 1
        {
            println!(
                "pausing name={name} partition={p} offset={o} ms={}",
                self.pause.as_millis()
            );
            std::thread::sleep(self.pause);
        }
    }
}

/// Step 2 of the header: the rebalance listener claims each assigned partition with its token
/// and seeks to the partition's stored next offset.
struct Claims {
    book: Arc<Book>,
}

impl ConsumerRebalanceListener for Claims {
    fn on_assigned(
        &mut self,
        partitions: &[TopicPartition],
        context: &mut AssignedContext<'_>,
    ) -> Result<(), BoxError> {
        let name = &self.book.name;
        for tp in partitions {
            // No token yet (the consumer could not raise it; it tries again before fetching
            // anything of the partition): the first write claims the partition instead, and
            // reading starts at the group's commit (the idempotency key absorbs what comes
            // again).
            let Some(token) = context.fencing_token(tp).filter(|t| *t > 0) else {
                log::warn!("{tp}: assigned without a fencing token yet; not claimed here");
                println!("claim name={name} partition={} token=none", tp.partition);
                continue;
            };
            let token = bigint(token)?;
            let row = self
                .book
                .db
                .with(|db| db.query_one(CLAIM, &[&&*tp.topic, &tp.partition, &token]))?;
            let (stored, next): (i64, i64) = (row.get(0), row.get(1));
            if stored > token {
                // A newer assignment claimed it already: ours is over, every write of it will be
                // refused; no seek.
                println!(
                    "claim name={name} partition={} token={token} stored={stored} stale=1",
                    tp.partition
                );
                continue;
            }
            context.seek(tp, next)?;
            println!(
                "claim name={name} partition={} token={token} stored={stored} next={next}",
                tp.partition
            );
        }
        Ok(())
    }

    fn on_revoked(&mut self, partitions: &[RevokedPartition]) -> Result<(), BoxError> {
        let list: Vec<String> = partitions
            .iter()
            .map(|p| p.tp.partition.to_string())
            .collect();
        println!(
            "revoked name={} partitions={}",
            self.book.name,
            list.join(",")
        );
        Ok(())
    }

    fn on_lost(&mut self, partitions: &[TopicPartition]) -> Result<(), BoxError> {
        let list: Vec<String> = partitions
            .iter()
            .map(|tp| tp.partition.to_string())
            .collect();
        println!("lost name={} partitions={}", self.book.name, list.join(","));
        Ok(())
    }
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
        .format_timestamp_millis()
        .init();
    shutdown::install();
    match parse().map_err(BoxError::from).and_then(|args| run(&args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("order_book_pg: {}", rebalance_guard::ErrorChain(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), BoxError> {
    let ordered = args
        .settings
        .iter()
        .rev()
        .find(|(k, _)| k == "processing.order");
    let next_offset = match ordered.map(|(_, v)| v.as_str()) {
        Some("key" | "unordered") if args.workers > 0 => NextOffset::Prefix,
        _ => NextOffset::InOrder,
    };
    let book = Arc::new(Book {
        db: Pool {
            url: args.url.clone(),
            idle: Mutex::new(Vec::new()),
        },
        name: args.name.clone(),
        next_offset,
        process: Duration::from_millis(args.process_ms),
        hold: args.hold.clone(),
        pause: Duration::from_millis(args.pause_ms),
        pause_every: args.pause_every,
        count: args.count,
        applied: AtomicU64::new(0),
        already_applied: AtomicU64::new(0),
        fenced: AtomicU64::new(0),
        stale: AtomicU64::new(0),
        handled: AtomicU64::new(0),
        pauses: AtomicU64::new(0),
        first: Mutex::new(None),
        last: Mutex::new(Instant::now()),
        stop: AtomicBool::new(false),
    });
    book.db
        .with(|db| db.batch_execute(&format!("BEGIN;{SCHEMA}COMMIT;")))?;

    let mut config = ConsumerConfig::builder()
        .bootstrap_servers(args.bootstrap.split(','))
        .group_id(&args.group)
        .set("client.id", &args.name)
        .set("auto.offset.reset", "earliest")
        .set("group.protocol", &args.protocol);
    if let Some(id) = &args.instance_id {
        config = config.set("group.instance.id", id);
    }
    for (k, v) in &args.settings {
        config = config.set(k, v);
    }
    let mut consumer = Consumer::subscribe(config.build()?, &[&args.topic])?
        .with_rebalance_listener(Claims { book: book.clone() });
    println!(
        "started pid={} name={} group={} topic={} protocol={} workers={} next_offset={}",
        std::process::id(),
        args.name,
        args.group,
        args.topic,
        args.protocol,
        args.workers,
        match next_offset {
            NextOffset::InOrder => "in-order",
            NextOffset::Prefix => "prefix",
        }
    );

    // The watcher: SIGTERM, `--count` and `--idle-ms` end the run (the poll blocks until
    // records or a wake, so it wakes the consumer too).
    let stop = Arc::new(AtomicBool::new(false));
    {
        let (stop, book, waker) = (stop.clone(), book.clone(), consumer.waker());
        let idle = Duration::from_millis(args.idle_ms);
        let before_first = Duration::from_millis(args.first_order_ms.unwrap_or(args.idle_ms));
        std::thread::Builder::new()
            .name("watcher".to_string())
            .spawn(move || loop {
                std::thread::sleep(Duration::from_millis(50));
                let seen = book.first.lock().map(|f| f.is_some()).unwrap_or(true);
                let bound = if seen { idle } else { before_first };
                let quiet = !bound.is_zero()
                    && book
                        .last
                        .lock()
                        .map(|at| at.elapsed() >= bound)
                        .unwrap_or(true);
                if quiet || book.stop.load(Ordering::SeqCst) {
                    stop.store(true, Ordering::SeqCst);
                }
                if shutdown::REQUESTED.load(Ordering::SeqCst) {
                    stop.store(true, Ordering::SeqCst);
                }
                if stop.load(Ordering::SeqCst) {
                    waker.wake();
                    return;
                }
            })?;
    }

    let outcome = if args.workers > 0 {
        let book = book.clone();
        consumer.run_with_workers(&stop, args.workers, 64, move |record, ctx| {
            book.handle(record, ctx)
        })
    } else {
        consumer.run(&stop, |record, ctx| book.handle(record, ctx))
    };
    // Stopping, for any reason: the close hands the partitions back (its commit is advisory).
    let closed = consumer.close();
    let elapsed = book
        .first
        .lock()
        .ok()
        .and_then(|f| *f)
        .map_or(0, |at| at.elapsed().as_millis());
    println!(
        "order_book applied={} already_applied={} fenced_writes={} stale={} elapsed_ms={elapsed}",
        book.applied.load(Ordering::SeqCst),
        book.already_applied.load(Ordering::SeqCst),
        book.fenced.load(Ordering::SeqCst),
        book.stale.load(Ordering::SeqCst),
    );
    outcome?;
    match closed {
        // The close's commit is advisory here: the database holds the offsets with the effects.
        Err(ConsumerError::Handoff(failures)) => {
            log::warn!(
                "the close's commit of {} partition(s) failed; harmless, the database holds \
                 where they stand",
                failures.len()
            );
            Ok(())
        }
        other => Ok(other?),
    }
}
