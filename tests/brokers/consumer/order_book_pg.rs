//! Exactly once into a database (issue 37), on real Kafka and a real PostgreSQL: member
//! processes of `examples/order_book_pg` (its own package) apply orders to a table, each order
//! in one transaction that checks the partition's fencing token, inserts the order under its
//! idempotency key and stores the partition's next offset; `on_assigned` claims each partition
//! with its token and seeks to the stored offset.
//!
//! * [`zombie`]: a member held between its lease check and its write (`--hold-before-write`)
//!   while its partition moves (frozen with SIGSTOP past its session) writes only after the new
//!   owner wrote that very order: the database refuses the write by the token, not by luck of
//!   timing, and keeps the refusal in `fenced_writes`.
//! * [`killed`]: a member killed (SIGKILL) after its transactions committed and before any of
//!   its progress reached the group (`commit.interval.ms` of an hour): its successor starts
//!   where the database says, so nothing it applied is applied again.
//!
//! Both judge the table the same way: every produced order once in `orders`, and the
//! append-only `applications` log (no key: the independent count) holding one application per
//! order. With one record at a time per partition (`run`, or `--workers` with
//! `processing.order=partition`), nothing reaches the write twice at all; with
//! `processing.order=key` a record beyond the stored prefix may come again and be absorbed by
//! the idempotency key, never below it.
//!
//! The run's PostgreSQL is `scripts/test`'s (`RG_TEST_POSTGRES`, started by
//! `scripts/postgres.sh`); each test makes a database of its own in it. Without the variable
//! (a test run by hand) the test starts a server of its own with the same script.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use rebalance_guard::ProducerRecord;

use crate::producer::producer;
use crate::support::consumer::committed;
use crate::support::process::{logs_of, ChildProcess};
use crate::support::{repo_root, scratch_dir, unique_name, BrokerKind};

/// Orders produced, spread evenly over [`PARTITIONS`] partitions.
const ORDERS: usize = 300;
const PARTITIONS: u32 = 3;
/// The classic members' session (the broker's own floor is 1 s on the test brokers); KIP-848
/// members get the broker's, 6 s (`group.consumer.session.timeout.ms` of scripts/kafka_broker.py).
const SESSION_MS: u64 = 3000;
/// A member stops after this long without an order (or, before its first one, [`FIRST_MS`]).
const IDLE_MS: u64 = 4000;
/// How long a successor may wait for its first order: the dead or frozen member's session, the
/// rebalance, the fencing token's commit.
const FIRST_MS: u64 = 40_000;
/// Bound on each condition the tests wait for.
const BOUND: Duration = Duration::from_secs(90);

/// How the members run the handler.
#[derive(Clone, Copy, Debug)]
enum Mode {
    /// `run`, on the poll thread.
    Run,
    /// `run_with_workers`, 2 threads, `processing.order=partition` (the default).
    Workers,
    /// `run_with_workers`, 3 threads, `processing.order=key`: records of one partition finish
    /// out of order, the next offset is the contiguous prefix.
    WorkersByKey,
}

impl Mode {
    fn args(self) -> Vec<String> {
        let args: &[&str] = match self {
            Mode::Run => &[],
            Mode::Workers => &["--workers", "2"],
            Mode::WorkersByKey => &["--workers", "3", "--set", "processing.order=key"],
        };
        args.iter().map(|s| s.to_string()).collect()
    }

    /// One record at a time per partition: nothing may reach the write twice.
    fn in_order(self) -> bool {
        !matches!(self, Mode::WorkersByKey)
    }
}

/// The example's binary: built by `scripts/test` with the workspace, else built here once per
/// test process.
fn binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        let root = repo_root();
        if std::env::var_os("RG_TEST_EXAMPLES_BUILT").is_none() {
            let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
                .args(["build", "--quiet", "-p", "order-book-pg"])
                .current_dir(&root)
                .status()
                .expect("run cargo build -p order-book-pg");
            assert!(status.success(), "building order-book-pg failed");
        }
        let binary = root.join("target/debug/order_book_pg");
        assert!(
            binary.exists(),
            "{} missing (scripts/test builds it with the workspace)",
            binary.display()
        );
        binary
    })
}

/// The run's PostgreSQL server URL (`.../postgres`): `RG_TEST_POSTGRES`, else a server of this
/// test process's own (stopped by scripts/postgres.sh's watcher once the process is gone).
fn server() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        if let Ok(url) = std::env::var("RG_TEST_POSTGRES") {
            if !url.trim().is_empty() {
                return url.trim().to_string();
            }
        }
        let dir = scratch_dir().join(unique_name("postgres"));
        let out = Command::new("bash")
            .arg(repo_root().join("scripts/postgres.sh"))
            .arg("start")
            .arg(&dir)
            .args(["--watch-pid", &std::process::id().to_string()])
            .stderr(Stdio::inherit())
            .output()
            .expect("run scripts/postgres.sh");
        assert!(
            out.status.success(),
            "scripts/postgres.sh start failed: a database test needs PostgreSQL"
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    })
}

/// psql: the newest server's own, else the PATH's.
fn psql_binary() -> PathBuf {
    let mut found: Vec<PathBuf> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin/psql"))
        .filter(|p| p.exists())
        .collect();
    found.sort_by_key(|p| {
        p.iter()
            .nth(4)
            .and_then(|v| v.to_str()?.parse::<u32>().ok())
            .unwrap_or(0)
    });
    found.pop().unwrap_or_else(|| PathBuf::from("psql"))
}

/// Runs `sql` with psql against `url`; its unaligned, tuples-only output.
fn psql(url: &str, sql: &str) -> String {
    let out = Command::new(psql_binary())
        .args([
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-d",
            url,
            "-c",
            sql,
        ])
        .output()
        .expect("run psql");
    assert!(
        out.status.success(),
        "psql {sql:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// One test's topic (filled with [`ORDERS`] orders), group, database and scratch directory.
struct Setup {
    bootstrap: String,
    group: String,
    topic: String,
    db: String,
    protocol: &'static str,
    mode: Mode,
    dir: PathBuf,
}

impl Setup {
    fn new(kind: BrokerKind, protocol: &'static str, mode: Mode) -> Setup {
        let broker = kind.start();
        let bootstrap = broker.bootstrap();
        let topic = unique_name("book-orders");
        broker.create_topic(&topic, PARTITIONS);
        let p = producer(&bootstrap, &[]);
        for i in 0..ORDERS {
            let value = format!(
                "order_id={};account=acct-{};qty={}",
                order(i),
                i % 7,
                i % 50
            );
            p.send(
                ProducerRecord::new(&topic, value)
                    .key(format!("acct-{}", i % 7))
                    .partition((i % PARTITIONS as usize) as i32),
            )
            .expect("send order");
        }
        p.close().expect("orders written");
        // A database of the test's own (names: lower case, no dashes).
        let name = unique_name("book").replace('-', "_");
        psql(server(), &format!("CREATE DATABASE {name}"));
        let (base, _) = server().rsplit_once('/').expect("URL .../postgres");
        let dir = scratch_dir().join(unique_name("order-book"));
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        eprintln!("topic {topic}, database {name}, files in {}", dir.display());
        Setup {
            bootstrap,
            group: unique_name("book-group"),
            topic,
            db: format!("{base}/{name}"),
            protocol,
            mode,
            dir,
        }
    }

    /// Starts member `name` with `extra` flags.
    fn start(&self, name: &str, extra: &[&str]) -> Member {
        let mut cmd = Command::new(binary());
        cmd.args([&self.bootstrap, &self.group, &self.topic, &self.db])
            .args(["--name", name, "--protocol", self.protocol])
            .args(["--idle-ms", &IDLE_MS.to_string()])
            .args(["--first-order-ms", &FIRST_MS.to_string()])
            .args(["--set", "max.poll.records=20"])
            .args(self.mode.args())
            .args(extra)
            .env("RUST_LOG", "rebalance_guard=info");
        if self.protocol == "classic" {
            cmd.args(["--set", &format!("session.timeout.ms={SESSION_MS}")])
                .args(["--set", "heartbeat.interval.ms=300"]);
        }
        let member = ChildProcess::spawn(name, &self.dir, &mut cmd);
        eprintln!("{name}: pid {}", member.pid());
        member
    }

    fn sql(&self, sql: &str) -> String {
        psql(&self.db, sql)
    }

    fn number(&self, sql: &str) -> i64 {
        let text = self.sql(sql);
        text.parse()
            .unwrap_or_else(|e| panic!("{sql:?} answered {text:?}: {e}"))
    }

    /// Orders in the table (0 before the first member created it).
    fn applied(&self) -> i64 {
        if self.sql("SELECT to_regclass('orders') IS NOT NULL") != "t" {
            return 0;
        }
        self.number("SELECT count(*) FROM orders")
    }

    /// Waits until `done` holds (polling the database), or panics naming `what`.
    fn wait(&self, what: &str, members: &[&Member], mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + BOUND;
        while !done() {
            if Instant::now() >= deadline {
                panic!(
                    "timed out after {BOUND:?} waiting for {what}; {} orders applied\n{}",
                    self.applied(),
                    logs_of(members)
                );
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// The database's next offset per partition.
    fn next_offsets(&self) -> BTreeMap<i32, i64> {
        self.sql("SELECT partition || ' ' || next_offset FROM partition_state ORDER BY partition")
            .lines()
            .filter_map(|l| {
                let (p, o) = l.split_once(' ')?;
                Some((p.parse().ok()?, o.parse().ok()?))
            })
            .collect()
    }

    /// The judgement: every produced order once in `orders` and nothing else there, and in the
    /// append-only log one application that inserted it, never two. `redone_from`: per
    /// partition, the offset from which a record may have reached the write again (beyond the
    /// stored prefix; `None`: nothing may, one record at a time per partition).
    fn assert_each_order_once(
        &self,
        redone_from: Option<&BTreeMap<i32, i64>>,
        members: &[&Member],
    ) {
        let present: BTreeSet<String> = self
            .sql("SELECT idempotency_key FROM orders")
            .lines()
            .map(str::to_string)
            .collect();
        let expected: BTreeSet<String> = (0..ORDERS).map(order).collect();
        let lost: Vec<_> = expected.difference(&present).collect();
        let strange: Vec<_> = present.difference(&expected).collect();
        let twice = self.sql(
            "SELECT order_id || ' x' || count(*) FROM applications WHERE inserted \
             GROUP BY order_id HAVING count(*) > 1",
        );
        let wrong_place = self.number(
            "SELECT count(*) FROM orders WHERE idempotency_key <> \
             'ord-' || lpad(((\"offset\" * 3) + partition)::text, 6, '0')",
        );
        assert!(
            lost.is_empty() && strange.is_empty() && twice.is_empty() && wrong_place == 0,
            "orders of {}: {} rows; lost: {lost:?}; unexpected: {strange:?}; applied twice \
             (applications log): {twice:?}; orders at another offset than produced: \
             {wrong_place}\n{}",
            self.db,
            present.len(),
            logs_of(members)
        );
        let redone = self.sql(
            "SELECT partition || ' ' || \"offset\" || ' ' || applied_by FROM applications \
             WHERE NOT inserted ORDER BY partition, \"offset\"",
        );
        match redone_from {
            None => assert!(
                redone.is_empty(),
                "records that reached the write again (absorbed by the key, but one record at \
                 a time per partition should start where the database says): {redone}\n{}",
                logs_of(members)
            ),
            Some(from) => {
                for line in redone.lines() {
                    let f: Vec<i64> = line
                        .split(' ')
                        .take(2)
                        .map(|v| v.parse().expect("number"))
                        .collect();
                    let prefix = from.get(&(f[0] as i32)).copied().unwrap_or(0);
                    assert!(
                        f[1] >= prefix,
                        "partition {} offset {} reached the write again below the stored \
                         prefix {prefix}: the successor did not start where the database said\n{}",
                        f[0],
                        f[1],
                        logs_of(members)
                    );
                }
            }
        }
        eprintln!(
            "each of {ORDERS} orders once; redone and absorbed by the key: {}; fenced writes: {}",
            redone.lines().count(),
            self.number("SELECT count(*) FROM fenced_writes")
        );
    }
}

/// The id of order `i`, as its value carries it (zero-padded so that it sorts).
fn order(i: usize) -> String {
    format!("ord-{i:06}")
}

/// A member process (the example), killed (SIGKILL) when dropped if still running.
type Member = ChildProcess;

/// The line a member prints as it ends cleanly.
const SUMMARY: &str = "order_book ";

/// The records a `--hold-before-write` member holds: `(partition, offset)` of each
/// `held-<topic>-<partition>-<offset>` file in `dir`.
fn held(dir: &Path, topic: &str) -> BTreeSet<(i32, i64)> {
    let prefix = format!("held-{topic}-");
    fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let (p, o) = name.strip_prefix(&prefix)?.split_once('-')?;
            Some((p.parse().ok()?, o.parse().ok()?))
        })
        .collect()
}

/// The zombie write. Member `a` alone holds its first record(s) between the lease check and
/// the write; it is frozen (SIGSTOP) there, `b` starts and, once `a`'s session is over, gets
/// every partition, claims them with a newer token and applies every order, the held ones
/// included. Only then is `a` released and woken: its held writes reach the database with the
/// old token and are refused (rows in `fenced_writes` naming them, the stored token above
/// theirs), and the table has each order once, the held ones as `b` wrote them.
fn zombie(kind: BrokerKind, protocol: &'static str, mode: Mode) {
    let setup = Setup::new(kind, protocol, mode);
    let hold = setup.dir.join("hold");
    fs::create_dir_all(&hold).expect("hold directory");
    let hold_arg = hold.to_string_lossy().into_owned();
    let mut a = setup.start("a", &["--hold-before-write", &hold_arg]);
    setup.wait(
        "a to hold a record between its lease check and its write",
        &[&a],
        || !held(&hold, &setup.topic).is_empty(),
    );
    // A worker may be right between its check and its file: let it get there.
    thread::sleep(Duration::from_millis(300));
    a.signal("STOP");
    let frozen_at = Instant::now();
    let zombies = held(&hold, &setup.topic);
    eprintln!("a frozen holding {zombies:?}");
    let mut b = setup.start("b", &[]);
    for (p, o) in &zombies {
        setup.wait(
            &format!("b to apply the held order of partition {p} offset {o}"),
            &[&a, &b],
            || {
                setup.number(&format!(
                    "SELECT count(*) FROM orders WHERE partition = {p} AND \"offset\" = {o} \
                     AND applied_by = 'b'"
                )) == 1
            },
        );
    }
    eprintln!(
        "b applied the held orders {:?} after a froze",
        frozen_at.elapsed()
    );
    fs::write(hold.join("release"), b"").expect("release file");
    a.signal("CONT");
    for (p, o) in &zombies {
        setup.wait(
            &format!("a's held write of partition {p} offset {o} to be refused"),
            &[&a, &b],
            || {
                setup.number(&format!(
                    "SELECT count(*) FROM fenced_writes WHERE partition = {p} AND \"offset\" = {o} \
                     AND applied_by = 'a' AND stored_token > token"
                )) >= 1
            },
        );
    }
    setup.wait("every order in the table", &[&a, &b], || {
        setup.applied() >= ORDERS as i64
    });
    b.assert_clean_exit(BOUND, SUMMARY, &[&a]);
    let woken = a.wait_exit(BOUND);
    eprintln!("a (woken) ended: {woken:?}");
    let held_by_b = setup.number(&format!(
        "SELECT count(*) FROM orders o JOIN fenced_writes f USING (partition, \"offset\") \
         WHERE o.applied_by = 'b' AND f.applied_by = 'a' AND o.token > f.token \
         AND ({})",
        zombies
            .iter()
            .map(|(p, o)| format!("(o.partition = {p} AND o.\"offset\" = {o})"))
            .collect::<Vec<_>>()
            .join(" OR ")
    ));
    assert_eq!(
        held_by_b as usize,
        zombies.len(),
        "each held order is b's, with a token above the refused one's\n{}",
        logs_of(&[&a, &b])
    );
    let redone = (!mode.in_order()).then(BTreeMap::new);
    setup.assert_each_order_once(redone.as_ref(), &[&a, &b]);
}

/// Killed after its database commits, before any Kafka commit. Member `a` applies orders with
/// no paced commit to the group (`commit.interval.ms` an hour) and is killed (SIGKILL) once a
/// third of them are in the table: the group's committed offsets are behind the database's
/// (none at all, or older). Its successor `b` claims the partitions, seeks to the database's
/// next offsets and applies the rest: no order reaches the write twice (with
/// `processing.order=key`, none below the prefix stored at the kill), none is lost.
fn killed(kind: BrokerKind, protocol: &'static str, mode: Mode) {
    let setup = Setup::new(kind, protocol, mode);
    let mut a = setup.start(
        "a",
        &["--process-ms", "20", "--set", "commit.interval.ms=3600000"],
    );
    setup.wait("a third of the orders applied by a", &[&a], || {
        setup.applied() >= (ORDERS / 3) as i64
    });
    a.kill();
    let by_a = setup.number("SELECT count(*) FROM orders WHERE applied_by = 'a'");
    let stored = setup.next_offsets();
    let group = committed(
        &setup.bootstrap,
        &setup.group,
        &setup.topic,
        PARTITIONS as i32,
    );
    eprintln!(
        "a killed: {by_a} orders applied; database next offsets {stored:?}; group's {group:?}"
    );
    for (p, next) in &stored {
        let kafka = group.get(p).copied().flatten().unwrap_or(-1);
        assert!(
            kafka < *next || *next == 0,
            "partition {p}: the group's committed offset {kafka} is not behind the database's \
             {next}: the test would not tell where b starts from\n{}",
            a.logs()
        );
    }
    let mut b = setup.start("b", &[]);
    setup.wait("every order in the table", &[&a, &b], || {
        setup.applied() >= ORDERS as i64
    });
    b.assert_clean_exit(BOUND, SUMMARY, &[&a]);
    let by_b = setup.number("SELECT count(*) FROM orders WHERE applied_by = 'b'");
    assert_eq!(
        (by_a + by_b) as usize,
        ORDERS,
        "a applied {by_a} before the kill, b the rest\n{}",
        logs_of(&[&a, &b])
    );
    let redone = (!mode.in_order()).then_some(stored);
    setup.assert_each_order_once(redone.as_ref(), &[&a, &b]);
}

crate::on_brokers! {
    kafka {
        zombie_write_refused_classic_run => zombie(BrokerKind::Kafka, "classic", Mode::Run),
        zombie_write_refused_consumer_workers =>
            zombie(BrokerKind::Kafka, "consumer", Mode::Workers),
        killed_after_commit_consumer_run => killed(BrokerKind::Kafka, "consumer", Mode::Run),
        killed_after_commit_classic_workers_by_key =>
            killed(BrokerKind::Kafka, "classic", Mode::WorkersByKey),
    }
    kafka3 {
        zombie_write_refused_classic_workers =>
            zombie(BrokerKind::Kafka3, "classic", Mode::Workers),
    }
}
