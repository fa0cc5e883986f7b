//! Exactly once through process faults (issue 35): worker processes of
//! `examples/transform_orders` (consume `in:<i>`, produce `fill:in:<i>` with the same key, each
//! order's output and its offset in one transaction) killed with SIGKILL in the middle of a
//! transaction, or frozen with SIGSTOP past their session and woken again, on Kafka 4.4
//! (transaction version 2; both group protocols) and 3.9 (version 1; classic), in the run mode
//! and the decoupled one (`--workers`).
//!
//! What every test asserts is the promise to the application: once the faults are over, a
//! `read_committed` reader of the output sees each input's output exactly once (nothing twice,
//! nothing lost), and the surviving workers end cleanly.
//!
//! Why processes: SIGKILL leaves a transaction open at the coordinator and a member in the group
//! without LeaveGroup or EndTxn, which no in-process stop can imitate; SIGSTOP is a member whose
//! sockets stay open and whose threads resume later with everything they held (a zombie).
//!
//! Each worker sleeps `--process-ms` per order, so that a transaction (paced every
//! [`INTERVAL_MS`]) is open most of the time: the kill or freeze lands inside one. Each test
//! prints how many aborted records the log holds at the end (records written by a transaction
//! that never became visible), the trace of the fault having hit an open transaction.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use rebalance_guard::wire::{IsolationLevel, Record};
use rebalance_guard::ProducerRecord;

use super::producer;
use crate::support::fetch::read_topic_as;
use crate::support::process::{logs_of, ChildProcess};
use crate::support::{repo_root, scratch_dir, unique_name, BrokerKind};

/// Input records, keyed, over [`PARTITIONS`] partitions.
const INPUTS: usize = 600;
/// Partitions of the input and of the output topic.
const PARTITIONS: u32 = 4;
/// `transaction.interval.ms` of every worker.
const INTERVAL_MS: u64 = 200;
/// Per order, in the run mode; the decoupled mode's threads sleep this times their number, so
/// that a worker goes at about 50 orders a second in both modes.
const PROCESS_MS: u64 = 20;
/// A worker stops (and closes: its last transaction committed) after this long without an order
/// (counted from its start until its first order): a replacement gets its first orders after the
/// dead member's session (6 s) and a rebalance.
const IDLE_MS: u64 = 12_000;
/// The idle time of a worker that starts while another is frozen: its first orders come after
/// the frozen one's session and the coordinator's abort of its transaction, which Kafka checks
/// every 10 s (`transaction.abort.timed.out.transaction.cleanup.interval.ms`): up to 16 s.
const IDLE_BEHIND_ZOMBIE_MS: u64 = 30_000;
/// How long the worker that took everything over stays after its last order.
const IDLE_AFTER_TAKEOVER_MS: u64 = 3000;
/// Session and transaction timeout of every worker.
const SESSION_MS: u64 = 6000;
/// Bound on every output being visible once the fault happened.
const ALL_VISIBLE: Duration = Duration::from_secs(120);
/// Bound on a worker's exit after the last order (its idle time and its close).
const EXIT_BOUND: Duration = Duration::from_secs(60);

/// The example's binary: built by `scripts/test` with every target (`RG_TEST_EXAMPLES_BUILT`),
/// else built here once per test process.
fn transform_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        let root = repo_root();
        if std::env::var_os("RG_TEST_EXAMPLES_BUILT").is_none() {
            let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
                .args([
                    "build",
                    "--quiet",
                    "--features",
                    "tls",
                    "--example",
                    "transform_orders",
                ])
                .current_dir(&root)
                .status()
                .expect("run cargo build --example transform_orders");
            assert!(status.success(), "building transform_orders failed");
        }
        let binary = root.join("target/debug/examples/transform_orders");
        assert!(
            binary.exists(),
            "{} missing (scripts/test builds it with every target)",
            binary.display()
        );
        binary
    })
}

/// One test's topics, group and worker settings.
struct Setup {
    bootstrap: String,
    group: String,
    input: String,
    output: String,
    protocol: &'static str,
    /// 0: the run mode; else the decoupled mode's threads.
    workers: usize,
    dir: PathBuf,
}

impl Setup {
    /// Topics of [`PARTITIONS`] partitions on `kind`'s shared broker, the input filled with
    /// [`INPUTS`] records `in:<i>` keyed `k<i>`.
    fn new(kind: BrokerKind, protocol: &'static str, workers: usize) -> Setup {
        let broker = kind.start();
        let bootstrap = broker.bootstrap();
        let (input, output) = (unique_name("txnf-in"), unique_name("txnf-out"));
        broker.create_topic(&input, PARTITIONS);
        broker.create_topic(&output, PARTITIONS);
        let p = producer(&bootstrap, &[]);
        for i in 0..INPUTS {
            p.send(ProducerRecord::new(&input, format!("in:{i}")).key(format!("k{i}")))
                .expect("send input");
        }
        p.close().expect("inputs written");
        let dir = scratch_dir().join(unique_name("txn-faults"));
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        Setup {
            bootstrap,
            group: unique_name("txnf-group"),
            input,
            output,
            protocol,
            workers,
            dir,
        }
    }

    /// Starts a worker process named `name` with `transactional.id` `txn_id`.
    fn start(&self, name: &str, txn_id: &str) -> Worker {
        self.start_idle(name, txn_id, IDLE_MS, IDLE_MS)
    }

    /// [`start`](Self::start) waiting `first_ms` for its first order and stopping `idle_ms`
    /// after its last.
    fn start_idle(&self, name: &str, txn_id: &str, first_ms: u64, idle_ms: u64) -> Worker {
        let process_ms = PROCESS_MS * self.workers.max(1) as u64;
        let mut cmd = Command::new(transform_binary());
        cmd.args([
            self.bootstrap.as_str(),
            &self.group,
            &self.input,
            &self.output,
            txn_id,
            &INTERVAL_MS.to_string(),
            "0",
        ])
        .args(["--protocol", self.protocol])
        .args(["--idle-ms", &idle_ms.to_string()])
        .args(["--first-order-ms", &first_ms.to_string()])
        .args(["--process-ms", &process_ms.to_string()])
        .args(["--set", "max.poll.records=20"])
        .args([
            "--producer-set",
            &format!("transaction.timeout.ms={SESSION_MS}"),
        ])
        .env("RUST_LOG", "rebalance_guard=info");
        if self.protocol == "classic" {
            cmd.args(["--set", &format!("session.timeout.ms={SESSION_MS}")])
                .args(["--set", "heartbeat.interval.ms=500"]);
        }
        if self.workers > 0 {
            cmd.args(["--workers", &self.workers.to_string()]);
        }
        let worker = ChildProcess::spawn(name, &self.dir, &mut cmd);
        eprintln!("{name}: pid {} transactional.id {txn_id}", worker.pid());
        worker
    }

    /// The output's values as a `read_committed` reader sees them.
    fn committed(&self) -> Vec<String> {
        values(&self.read(IsolationLevel::ReadCommitted))
    }

    fn read(&self, isolation: IsolationLevel) -> BTreeMap<i32, Vec<Record>> {
        read_topic_as(
            &self.bootstrap,
            &self.output,
            Duration::from_secs(60),
            isolation,
        )
    }

    /// Records in the output's log that a `read_committed` reader does not see (of aborted or
    /// still open transactions).
    fn invisible(&self) -> usize {
        let all = self.read(IsolationLevel::ReadUncommitted);
        let all: usize = all.values().map(Vec::len).sum();
        all.saturating_sub(self.committed().len())
    }

    /// Waits (at most `bound`) until at least `n` distinct inputs have their output visible.
    fn wait_visible(&self, n: usize, bound: Duration, workers: &[&Worker]) {
        let deadline = Instant::now() + bound;
        loop {
            let seen = self.committed();
            let distinct = count_per_value(&seen).len();
            if distinct >= n {
                return;
            }
            if Instant::now() >= deadline {
                panic!(
                    "{distinct} of the {n} outputs awaited visible after {bound:?}; missing: \
                     {:?}\n{}",
                    missing(&seen),
                    logs_of(workers)
                );
            }
            thread::sleep(Duration::from_millis(300));
        }
    }

    /// The judgement: each input's output exactly once in the `read_committed` view.
    fn assert_each_output_once(&self, workers: &[&Worker]) {
        let seen = self.committed();
        let per = count_per_value(&seen);
        let twice: Vec<_> = per.iter().filter(|(_, n)| **n > 1).collect();
        let lost = missing(&seen);
        let strange: Vec<_> = per
            .keys()
            .filter(|v| {
                v.strip_prefix("fill:in:")
                    .and_then(|i| i.parse::<usize>().ok())
                    .is_none_or(|i| i >= INPUTS)
            })
            .collect();
        assert!(
            twice.is_empty() && lost.is_empty() && strange.is_empty() && seen.len() == INPUTS,
            "read_committed view of {}: {} records; seen more than once: {twice:?}; missing: \
             {lost:?}; unexpected: {strange:?}\n{}",
            self.output,
            seen.len(),
            logs_of(workers)
        );
        eprintln!(
            "each of {INPUTS} outputs visible once; {} records in the log of aborted \
             transactions",
            self.invisible()
        );
    }
}

fn values(records: &BTreeMap<i32, Vec<Record>>) -> Vec<String> {
    records
        .values()
        .flatten()
        .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
        .collect()
}

fn count_per_value(seen: &[String]) -> BTreeMap<&str, usize> {
    let mut per: BTreeMap<&str, usize> = BTreeMap::new();
    for v in seen {
        *per.entry(v.as_str()).or_default() += 1;
    }
    per
}

/// The inputs whose output is not in `seen`.
fn missing(seen: &[String]) -> Vec<usize> {
    let per = count_per_value(seen);
    (0..INPUTS)
        .filter(|i| !per.contains_key(format!("fill:in:{i}").as_str()))
        .collect()
}

/// A worker process (the example), killed (SIGKILL) when dropped if still running.
type Worker = ChildProcess;

/// The line a worker prints as it ends cleanly.
const SUMMARY: &str = "transform consumed=";

/// Two workers share the input; one of them is killed with SIGKILL while both are busy (a
/// quarter of the outputs visible, records in the log past what is visible: a transaction
/// open), and a replacement starts with the dead one's `transactional.id` (its
/// InitProducerId aborts what the dead one left open). The survivor and the replacement finish;
/// each output once.
fn sigkill(kind: BrokerKind, protocol: &'static str, workers: usize) {
    let setup = Setup::new(kind, protocol, workers);
    let (id_a, id_b) = (unique_name("txnf-a"), unique_name("txnf-b"));
    let mut a = setup.start("a", &id_a);
    let mut b = setup.start("b", &id_b);
    setup.wait_visible(INPUTS / 4, ALL_VISIBLE, &[&a, &b]);
    // Records past the visible ones: a transaction is open (the kill lands inside it).
    let open_by = Instant::now() + Duration::from_secs(5);
    let mut open = setup.invisible();
    while open == 0 && Instant::now() < open_by {
        thread::sleep(Duration::from_millis(20));
        open = setup.invisible();
    }
    a.kill();
    eprintln!(
        "{} of {INPUTS} visible when a was killed; {open} records of an open transaction",
        count_per_value(&setup.committed()).len()
    );
    let mut replacement = setup.start("a2", &id_a);
    setup.wait_visible(INPUTS, ALL_VISIBLE, &[&a, &b, &replacement]);
    b.assert_clean_exit(EXIT_BOUND, SUMMARY, &[&a, &replacement]);
    replacement.assert_clean_exit(EXIT_BOUND, SUMMARY, &[&a, &b]);
    setup.assert_each_output_once(&[&a, &b, &replacement]);
}

/// One worker alone owns every input partition, with a transaction open, when it is frozen
/// (SIGSTOP); a second worker joins, gets the partitions once the frozen one's session is over
/// and its transaction aborted by the coordinator's timeout, and finishes every output. Then the
/// frozen one is woken (SIGCONT): its threads go on with the partitions and the transaction they
/// held, and it tries to commit (its idle timer has run out, so it closes: the close commits).
/// The group refuses its offsets, the coordinator its transaction: nothing it does becomes
/// visible, the view stays each output once.
fn frozen(kind: BrokerKind, protocol: &'static str, workers: usize) {
    let setup = Setup::new(kind, protocol, workers);
    let mut a = setup.start("a", &unique_name("txnf-a"));
    setup.wait_visible(INPUTS / 4, ALL_VISIBLE, &[&a]);
    let open_by = Instant::now() + Duration::from_secs(5);
    let mut open = setup.invisible();
    while open == 0 && Instant::now() < open_by {
        thread::sleep(Duration::from_millis(20));
        open = setup.invisible();
    }
    a.signal("STOP");
    let frozen_at = Instant::now();
    eprintln!(
        "a frozen with {} of {INPUTS} visible and {open} records of an open transaction",
        count_per_value(&setup.committed()).len()
    );
    // b owns every partition from its first order on (a is frozen, then fenced): a short idle
    // after its last order ends the test soon after the outputs are visible.
    let mut b = setup.start_idle(
        "b",
        &unique_name("txnf-b"),
        IDLE_BEHIND_ZOMBIE_MS,
        IDLE_AFTER_TAKEOVER_MS,
    );
    setup.wait_visible(INPUTS, ALL_VISIBLE, &[&a, &b]);
    let frozen_for = frozen_at.elapsed();
    assert!(
        frozen_for >= Duration::from_millis(SESSION_MS),
        "b finished {frozen_for:?} after a froze, within a's session: did a own nothing?"
    );
    let before = setup.committed();
    a.signal("CONT");
    eprintln!("a woken after {frozen_for:?}");
    let woken = a.wait_exit(EXIT_BOUND);
    eprintln!("a (woken) ended: {woken:?}\n{}", a.logs());
    assert!(woken.is_some(), "a did not end after waking\n{}", a.logs());
    b.assert_clean_exit(EXIT_BOUND, SUMMARY, &[&a]);
    let after = setup.committed();
    assert_eq!(
        count_per_value(&after),
        count_per_value(&before),
        "the woken zombie changed the read_committed view\n{}",
        logs_of(&[&a, &b])
    );
    setup.assert_each_output_once(&[&a, &b]);
}

crate::on_brokers! {
    kafka {
        sigkill_classic_run => sigkill(BrokerKind::Kafka, "classic", 0),
        sigkill_classic_decoupled => sigkill(BrokerKind::Kafka, "classic", 3),
        sigkill_consumer_run => sigkill(BrokerKind::Kafka, "consumer", 0),
        sigkill_consumer_decoupled => sigkill(BrokerKind::Kafka, "consumer", 3),
        frozen_classic_run => frozen(BrokerKind::Kafka, "classic", 0),
        frozen_classic_decoupled => frozen(BrokerKind::Kafka, "classic", 3),
        frozen_consumer_run => frozen(BrokerKind::Kafka, "consumer", 0),
    }
    kafka3 {
        sigkill_classic_run => sigkill(BrokerKind::Kafka3, "classic", 0),
        sigkill_classic_decoupled => sigkill(BrokerKind::Kafka3, "classic", 3),
        frozen_classic_run => frozen(BrokerKind::Kafka3, "classic", 0),
    }
}
