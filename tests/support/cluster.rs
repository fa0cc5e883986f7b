//! A three-node Apache Kafka cluster of the test's own, for tests that fail brokers: started by
//! `scripts/kafka_cluster.py` from the same jars as the single broker ([`super::Kafka`]).
//!
//! Every node is broker and controller (static quorum, node ids `1..=N`), `__consumer_offsets`
//! and new topics have replication 3 and `min.insync.replicas=2`, and the group settings are the
//! single broker's (fast first join, short session minimums). A test gets one with
//! [`KafkaCluster::start`] and fails nodes through it: [`kill`](KafkaCluster::kill) (kill -9),
//! [`stop`](KafkaCluster::stop) (SIGTERM, a controlled shutdown),
//! [`pause`](KafkaCluster::pause) / [`resume`](KafkaCluster::resume) (SIGSTOP / SIGCONT: a hung
//! broker whose sockets stay open) and [`restart`](KafkaCluster::restart) (back with its data, at
//! the same address). [`leader_of`](KafkaCluster::leader_of) and
//! [`coordinator_of`](KafkaCluster::coordinator_of) say which node to fail.
//!
//! Why never shared: a fault changes the cluster for everyone on it (leaders move, writes wait
//! for the ISR to shrink), so a test that fails brokers would disturb any other test there.
//! Dropping the handle closes the script's stdin; it kills every node by PID and removes the
//! data. The nodes' logs stay in the scratch directory when the test panicked.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command};
use std::sync::mpsc::Receiver;
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use rebalance_guard::wire::{Client, ClientConfig};
use rebalance_guard::TopicPartition;

use super::{kill_and_reap, log_tail, peer, repo_root, scratch_dir, unique_name, venv_python};
use super::{spawn_launcher, wait_exit, KafkaVersion};

/// Bound on the cluster's start: three JVMs formatting and electing on two shared cores take
/// 11-25 s; the margin is for a loaded CI machine.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(150);
/// Bound on one command's answer: `start` waits for the node to rejoin, `stop` for a
/// controlled shutdown (the script gives up on it after 60 s).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(150);

/// The node ids of a cluster are `1..=N`.
pub type NodeId = i32;

struct Control {
    stdin: ChildStdin,
    answers: Receiver<String>,
}

/// A running cluster of the test's own (see the module documentation).
pub struct KafkaCluster {
    child: Child,
    control: Mutex<Option<Control>>,
    bootstrap: String,
    dir: PathBuf,
    startup: Duration,
}

impl KafkaCluster {
    /// Starts `nodes` Kafka nodes of the newest pinned 4.x and returns once every one answers
    /// and the cluster lists all of them (a topic with replication 3 can be created).
    pub fn start(nodes: u32) -> KafkaCluster {
        KafkaCluster::start_with(nodes, &[])
    }

    /// [`start`](Self::start) with extra node settings (`--set key=value` on every node), for a
    /// test that needs faster failure detection or longer group sessions than the defaults.
    pub fn start_with(nodes: u32, settings: &[(&str, &str)]) -> KafkaCluster {
        KafkaCluster::launch(nodes, settings, false)
    }

    /// [`start_with`](Self::start_with) with every node in a rack of its own, node `id` in
    /// [`rack_of(id)`](Self::rack_of), and leaders that point a consumer sending that rack as
    /// its `client.rack` at node `id`'s replica (`RackAwareReplicaSelector`, KIP-392).
    pub fn start_with_racks(nodes: u32, settings: &[(&str, &str)]) -> KafkaCluster {
        KafkaCluster::launch(nodes, settings, true)
    }

    /// The `broker.rack` of node `id` in a cluster started by
    /// [`start_with_racks`](Self::start_with_racks).
    pub fn rack_of(id: NodeId) -> String {
        format!("rack-{id}")
    }

    fn launch(nodes: u32, settings: &[(&str, &str)], racks: bool) -> KafkaCluster {
        let started = Instant::now();
        let version = KafkaVersion::Newest.version();
        let dir = scratch_dir().join(unique_name("kafka-cluster"));
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        let stderr_path = dir.join("launcher.log");
        let stderr = File::create(&stderr_path)
            .unwrap_or_else(|e| panic!("create {}: {e}", stderr_path.display()));
        let mut cmd = Command::new(venv_python());
        cmd.arg(repo_root().join("scripts/kafka_cluster.py"))
            .arg("--version")
            .arg(&version)
            .arg("--nodes")
            .arg(nodes.to_string())
            .arg("--dir")
            .arg(&dir);
        for (key, value) in settings {
            cmd.arg("--set").arg(format!("{key}={value}"));
        }
        if racks {
            cmd.arg("--racks");
        }
        let (mut child, answers) = spawn_launcher(&mut cmd, "scripts/kafka_cluster.py", stderr);
        let bootstrap = match answers.recv_timeout(STARTUP_TIMEOUT) {
            Ok(line) if !line.trim().is_empty() => line.trim().to_string(),
            other => {
                kill_and_reap(&mut child);
                panic!(
                    "the Kafka {version} cluster did not start ({other:?}); launcher:\n{}\n{}",
                    log_tail(&stderr_path, 8000),
                    node_logs(&dir, nodes)
                );
            }
        };
        let stdin = child.stdin.take().expect("piped stdin");
        let cluster = KafkaCluster {
            child,
            control: Mutex::new(Some(Control { stdin, answers })),
            bootstrap,
            dir,
            startup: started.elapsed(),
        };
        eprintln!(
            "Kafka {version} cluster of {nodes} up in {:?}: {}",
            cluster.startup, cluster.bootstrap
        );
        cluster
    }

    /// Every node's client listener, `127.0.0.1:P1,127.0.0.1:P2,...`.
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// How long the start took.
    pub fn startup_time(&self) -> Duration {
        self.startup
    }

    /// The directory of the nodes' logs (`node-ID.log`) and the launcher's (`launcher.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Sends one command to the script and returns the value of its `ok` answer; panics on an
    /// `error` answer or none within [`COMMAND_TIMEOUT`].
    fn command(&self, line: &str) -> String {
        let mut control = self.control.lock().unwrap_or_else(|e| e.into_inner());
        let control = control.as_mut().expect("the cluster is running");
        writeln!(control.stdin, "{line}")
            .and_then(|()| control.stdin.flush())
            .unwrap_or_else(|e| panic!("cluster command {line:?}: {e}"));
        match control.answers.recv_timeout(COMMAND_TIMEOUT) {
            Ok(answer) if answer == "ok" => String::new(),
            Ok(answer) if answer.starts_with("ok ") => answer[3..].to_string(),
            other => panic!(
                "cluster command {line:?} answered {other:?}; launcher:\n{}",
                log_tail(&self.dir.join("launcher.log"), 4000)
            ),
        }
    }

    /// kill -9 of node `id`: no controlled shutdown, its sockets reset.
    pub fn kill(&self, id: NodeId) {
        self.command(&format!("kill {id}"));
    }

    /// SIGTERM of node `id`, returning once it has exited (a controlled shutdown: it hands
    /// its leaderships over first).
    pub fn stop(&self, id: NodeId) {
        self.command(&format!("stop {id}"));
    }

    /// SIGSTOP of node `id`: a hang, its connections open and nothing answered.
    pub fn pause(&self, id: NodeId) {
        self.command(&format!("pause {id}"));
    }

    /// SIGCONT of a paused node.
    pub fn resume(&self, id: NodeId) {
        self.command(&format!("resume {id}"));
    }

    /// Starts a killed or stopped node again with its data, at the same address; returns once
    /// it answers and lists itself in its metadata.
    pub fn restart(&self, id: NodeId) {
        self.command(&format!("start {id}"));
    }

    /// Starts every stopped or killed node at once and returns once all of them answer and list
    /// each other: after all nodes went down, one node started alone waits for a quorum that
    /// only the others can give, so [`restart`](Self::restart) one at a time would hang.
    pub fn restart_all(&self) {
        self.command("start-all");
    }

    /// Node `id`'s client address.
    pub fn addr(&self, id: NodeId) -> String {
        self.command(&format!("addr {id}"))
    }

    /// Node `id`'s JVM process id, `None` when it is not running.
    pub fn pid(&self, id: NodeId) -> Option<u32> {
        let pid: u32 = self.command(&format!("pid {id}")).parse().expect("a pid");
        (pid != 0).then_some(pid)
    }

    fn client(&self) -> Client {
        Client::connect(ClientConfig::from_bootstrap_str(&self.bootstrap))
            .unwrap_or_else(|e| panic!("connect to the cluster {}: {e}", self.bootstrap))
    }

    /// Creates `name` with `partitions` partitions and replication 3 (through the peer admin
    /// client), and returns once every partition has a leader.
    pub fn create_topic(&self, name: &str, partitions: u32) {
        peer(&[
            "create-topic",
            "--bootstrap",
            &self.bootstrap,
            "--topic",
            name,
            "--partitions",
            &partitions.to_string(),
            "--replication-factor",
            "3",
        ]);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let leaders = self.leaders(name);
            if leaders.len() == partitions as usize && leaders.values().all(|&l| l >= 0) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{name}: partitions without a leader 30 s after creation: {leaders:?}"
            );
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// Partition to leader of `topic`, from fresh metadata (-1: no leader now).
    pub fn leaders(&self, topic: &str) -> BTreeMap<i32, NodeId> {
        let metadata = self
            .client()
            .metadata(&[topic])
            .unwrap_or_else(|e| panic!("metadata of {topic}: {e}"));
        metadata
            .into_iter()
            .filter(|t| &*t.name == topic)
            .flat_map(|t| t.partitions)
            .map(|p| (p.partition, p.leader))
            .collect()
    }

    /// The leader of `tp` in fresh metadata (-1: none now).
    pub fn leader_of(&self, tp: &TopicPartition) -> NodeId {
        self.leaders(&tp.topic)
            .get(&tp.partition)
            .copied()
            .unwrap_or_else(|| panic!("{tp} is not in the metadata"))
    }

    /// The coordinator of `group`, through FindCoordinator on a fresh client.
    pub fn coordinator_of(&self, group: &str) -> NodeId {
        self.client()
            .find_coordinator(group)
            .unwrap_or_else(|e| panic!("FindCoordinator for {group}: {e}"))
            .node_id
    }
}

fn node_logs(dir: &Path, nodes: u32) -> String {
    (1..=nodes)
        .map(|id| {
            let log = dir.join(format!("node-{id}.log"));
            format!("--- {} ---\n{}\n", log.display(), log_tail(&log, 3000))
        })
        .collect()
}

impl Drop for KafkaCluster {
    fn drop(&mut self) {
        // EOF on stdin: the script kills every node by PID, removes the data and exits.
        drop(
            self.control
                .get_mut()
                .unwrap_or_else(|e| e.into_inner())
                .take(),
        );
        if !wait_exit(&mut self.child, Duration::from_secs(20)) {
            kill_and_reap(&mut self.child);
        }
        if thread::panicking() {
            eprintln!("the cluster's logs are kept in {}", self.dir.display());
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}
