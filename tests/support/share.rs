//! Share groups for the tests: a fresh topic and share group on the shared Kafka 4.4 broker, with
//! the group's configuration set (where it starts, how long a lock lasts), records produced with
//! one order id each, and our share worker run as a process of its own (to be killed or frozen).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use rebalance_guard::share::{ShareConfig, ShareConsumer};
use rebalance_guard::wire::{Client, ClientConfig, ProduceRecord};
use rebalance_guard::TopicPartition;

use super::consumer::produce_until_accepted;
use super::process::ChildProcess;
use super::{repo_root, unique_name, BrokerKind};

/// A share group on a fresh topic of the shared Kafka 4.4 broker.
pub struct ShareSetup {
    /// The broker's bootstrap address.
    pub bootstrap: String,
    /// The topic (fresh, `partitions` partitions).
    pub topic: String,
    /// The share group (fresh), reading from the earliest offset.
    pub group: String,
    rounds: std::sync::atomic::AtomicUsize,
    _broker: Option<Box<dyn super::Broker>>,
}

impl ShareSetup {
    /// A topic of `partitions` partitions and a share group that starts at the earliest offset
    /// and locks records for `lock_ms`.
    pub fn new(prefix: &str, partitions: u32, lock_ms: u64) -> ShareSetup {
        let broker = BrokerKind::Kafka.start();
        let topic = unique_name(prefix);
        broker.create_topic(&topic, partitions);
        ShareSetup::on(broker.bootstrap(), topic, prefix, lock_ms, Some(broker))
    }

    /// A share group for `topic` (created by the caller) on the cluster at `bootstrap`,
    /// starting at the earliest offset, locking records for `lock_ms`.
    pub fn on(
        bootstrap: String,
        topic: String,
        prefix: &str,
        lock_ms: u64,
        broker: Option<Box<dyn super::Broker>>,
    ) -> ShareSetup {
        let group = unique_name(&format!("{prefix}-share"));
        let mut client = Client::connect(ClientConfig::from_bootstrap_str(&bootstrap))
            .expect("connect to the broker");
        set_group_configs(
            &mut client,
            &group,
            &[
                ("share.auto.offset.reset", "earliest"),
                ("share.record.lock.duration.ms", &lock_ms.to_string()),
            ],
        );
        ShareSetup {
            bootstrap,
            topic,
            group,
            rounds: Default::default(),
            _broker: broker,
        }
    }

    /// A share consumer configuration for this group, with `extra` settings.
    pub fn config(&self, extra: &[(&str, &str)]) -> ShareConfig {
        self.config_via(&self.bootstrap, extra)
    }

    /// [`config`](Self::config) bootstrapping through `bootstrap` (a proxy in front of the
    /// broker, which then carries every connection of the consumer).
    pub fn config_via(&self, bootstrap: &str, extra: &[(&str, &str)]) -> ShareConfig {
        let mut builder = ShareConfig::builder()
            .bootstrap_servers([bootstrap])
            .group_id(&self.group);
        for (k, v) in extra {
            builder = builder.set(k, v);
        }
        builder.build().expect("valid share configuration")
    }

    /// A share consumer of this group subscribed to the topic.
    pub fn consumer(&self, extra: &[(&str, &str)]) -> ShareConsumer {
        ShareConsumer::subscribe(self.config(extra), &[&self.topic]).expect("subscribe")
    }

    /// Produces `per_partition` orders to each of `partitions` partitions, values
    /// `order_id=<partition>-<n>;...` (`<round>.<partition>-<n>` from the second call on, so
    /// that every order id is new); returns every order id.
    pub fn produce_orders(&self, partitions: i32, per_partition: usize) -> Vec<String> {
        let round = self
            .rounds
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let tag = if round == 0 {
            String::new()
        } else {
            format!("{round}.")
        };
        let mut client = Client::connect(ClientConfig::from_bootstrap_str(&self.bootstrap))
            .expect("connect to the shared broker");
        let mut ids = Vec::new();
        for p in 0..partitions {
            let tp = TopicPartition::new(self.topic.as_str(), p);
            let records: Vec<ProduceRecord> = (0..per_partition)
                .map(|n| {
                    let id = format!("{tag}{p}-{n}");
                    ids.push(id.clone());
                    ProduceRecord {
                        key: Some(id.clone().into()),
                        value: Some(format!("order_id={id};amount=1").into()),
                        headers: Vec::new(),
                        timestamp: None,
                    }
                })
                .collect();
            produce_until_accepted(&mut client, &tp, &records, "produce orders");
        }
        ids
    }
}

/// Sets `group`'s configuration and waits (bounded) until the broker reads every value back.
/// Kafka applies a group config through its metadata log, so a DescribeConfigs (and a share
/// partition initialised by a member's join) right after the IncrementalAlterConfigs may still
/// see the old value: a share group meant to start at the earliest offset would start at the
/// latest and skip the records produced before.
pub fn set_group_configs(client: &mut Client, group: &str, settings: &[(&str, &str)]) {
    client
        .alter_group_configs(group, settings)
        .unwrap_or_else(|e| panic!("set the configuration of {group}: {e}"));
    let until = Instant::now() + Duration::from_secs(15);
    loop {
        let read = client
            .describe_group_configs(group)
            .unwrap_or_else(|e| panic!("describe the configuration of {group}: {e}"));
        let pending: Vec<_> = settings
            .iter()
            .filter(|(k, v)| read.get(*k).cloned().flatten().as_deref() != Some(*v))
            .collect();
        if pending.is_empty() {
            return;
        }
        assert!(
            Instant::now() < until,
            "{group}: the broker still reads {pending:?} differently: {read:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The order id of a value `order_id=<id>;...`.
pub fn order_id(value: Option<&[u8]>) -> Option<String> {
    let text = std::str::from_utf8(value?).ok()?;
    text.split(';')
        .find_map(|f| f.strip_prefix("order_id="))
        .map(str::to_string)
}

/// The share worker example. `scripts/test` builds every target with `tls` before the tests
/// and says so (`RG_TEST_EXAMPLES_BUILT=1`): the binary is used as it is, since a `cargo build`
/// of one example in the middle of the run resolves features anew and rebuilds the crate and
/// its TLS dependencies for every later test binary. A plain `cargo test` builds it once per
/// test binary (the test's own profile and features).
pub fn share_worker_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        let root = repo_root();
        let binary = root.join("target/debug/examples/share_worker");
        if std::env::var_os("RG_TEST_EXAMPLES_BUILT").is_none() {
            let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
                .args([
                    "build",
                    "--quiet",
                    "--features",
                    "tls",
                    "--example",
                    "share_worker",
                ])
                .current_dir(&root)
                .status()
                .expect("run cargo build --example share_worker");
            assert!(status.success(), "building the share worker failed");
        }
        assert!(
            binary.exists(),
            "{} missing (scripts/test builds it with every target)",
            binary.display()
        );
        binary
    })
}

/// One effect line of the share worker's effect log.
#[derive(Clone, Debug)]
pub struct Effect {
    /// The order id.
    pub order: String,
    /// The record's partition.
    pub partition: i32,
    /// The record's offset.
    pub offset: i64,
    /// The delivery count the broker gave.
    pub delivery_count: u32,
    /// The lease's end on CLOCK_MONOTONIC (ns).
    pub deadline_ns: u128,
    /// When the effect was applied, on CLOCK_MONOTONIC (ns).
    pub applied_ns: u128,
    /// Which worker applied it.
    pub worker: String,
}

/// A share worker process (the example), with its effect log; the process handle
/// ([`ChildProcess`]: its signals, its end, its logs) is reached through it.
pub struct WorkerProcess {
    process: ChildProcess,
    /// Its effect log.
    pub effects: PathBuf,
}

impl WorkerProcess {
    /// Starts a share worker of `setup`'s group, `threads` worker threads, `process_ms` per
    /// order, effects and output under `dir`.
    pub fn start(
        setup: &ShareSetup,
        dir: &Path,
        name: &str,
        threads: usize,
        process_ms: u64,
        settings: &[&str],
    ) -> WorkerProcess {
        let effects = dir.join(format!("{name}.effects"));
        let mut command = Command::new(share_worker_binary());
        command
            .args(["--bootstrap", &setup.bootstrap, "--group", &setup.group])
            .args(["--topic", &setup.topic, "--name", name])
            .args(["--workers", &threads.to_string()])
            .args(["--process-ms", &process_ms.to_string()])
            .arg("--effects")
            .arg(&effects)
            .env("RUST_LOG", "info");
        for s in settings {
            command.args(["--set", s]);
        }
        WorkerProcess {
            process: ChildProcess::spawn(name, dir, &mut command),
            effects,
        }
    }

    /// Its effects so far.
    pub fn effects(&self) -> Vec<Effect> {
        read_effects(&self.effects, &self.process.name)
    }
}

impl std::ops::Deref for WorkerProcess {
    type Target = ChildProcess;

    fn deref(&self) -> &ChildProcess {
        &self.process
    }
}

impl std::ops::DerefMut for WorkerProcess {
    fn deref_mut(&mut self) -> &mut ChildProcess {
        &mut self.process
    }
}

/// Reads an effect log (`effect_key order partition offset at_ms delivery deadline_ns
/// applied_ns`).
pub fn read_effects(path: &Path, worker: &str) -> Vec<Effect> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 8 {
                return None;
            }
            Some(Effect {
                order: f[1].to_string(),
                partition: f[2].parse().ok()?,
                offset: f[3].parse().ok()?,
                delivery_count: f[5].parse().ok()?,
                deadline_ns: f[6].parse().ok()?,
                applied_ns: f[7].parse().ok()?,
                worker: worker.to_string(),
            })
        })
        .collect()
}

/// How many times each order was applied, over every worker's effects.
pub fn applications(effects: &[Effect]) -> BTreeMap<String, Vec<Effect>> {
    let mut out: BTreeMap<String, Vec<Effect>> = BTreeMap::new();
    for e in effects {
        out.entry(e.order.clone()).or_default().push(e.clone());
    }
    out
}

/// A scratch directory for one test's worker files.
pub fn worker_dir(test: &str) -> PathBuf {
    let dir = super::scratch_dir().join(unique_name(test));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// Every effect of `workers` so far.
pub fn all_effects(workers: &[&WorkerProcess]) -> Vec<Effect> {
    workers.iter().flat_map(|w| w.effects()).collect()
}

/// Waits (up to `bound`) until every order in `ids` was applied by one of `workers`.
pub fn wait_all_applied(
    workers: &[&WorkerProcess],
    ids: &std::collections::BTreeSet<String>,
    bound: Duration,
    what: &str,
) {
    let until = Instant::now() + bound;
    loop {
        let applied: std::collections::BTreeSet<String> =
            all_effects(workers).into_iter().map(|e| e.order).collect();
        let missing = ids.difference(&applied).count();
        if missing == 0 {
            return;
        }
        assert!(
            Instant::now() < until,
            "{what}: {missing} order(s) never applied within {bound:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Polls for `window` and fails if any record comes: after every record was accepted or
/// rejected, nothing may be delivered again.
pub fn assert_nothing_comes_back(consumer: &mut ShareConsumer, window: Duration) {
    let until = Instant::now() + window;
    while Instant::now() < until {
        let batch = consumer.poll(Duration::from_millis(300)).expect("poll");
        assert!(batch.is_empty(), "records came back: {batch:?}");
    }
}
