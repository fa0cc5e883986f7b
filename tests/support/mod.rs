//! Real Kafka brokers and peer clients for the integration tests.
//!
//! The design notes ("Real brokers in tests") rule out mocks of our own: every
//! wire test talks to a real, independent implementation of the protocol. This
//! module starts them and drives the peer clients:
//!
//! * [`Kafka`]: Apache Kafka itself (`scripts/kafka_broker.py`), the newest 4.x and the last
//!   3.x, pinned in `scripts/versions.env`. The truth: a behaviour is right when it is right here.
//! * [`cluster::KafkaCluster`]: three Kafka nodes of a test's own (`scripts/kafka_cluster.py`),
//!   replication 3, for tests that kill, stop, pause and restart brokers.
//! * [`MockCluster`]: librdkafka's mock cluster (`scripts/mock_cluster.py`),
//!   with fault injection through [`MockCluster::command`]; the run's shared one
//!   ([`MockCluster::shared`], [`shared::SharedMock`]) takes no faults.
//! * [`Tansu`]: the tansu broker binary (`scripts/tansu_broker.py`), memory storage, a second
//!   independent implementation; one of a test's own or the run's shared one ([`Tansu::shared`]).
//! * [`fetch::fetch_answered`]: one fetch whose every partition the leader answered, for tests
//!   that check what one answer holds on a busy machine.
//! * [`share`]: a share group on the shared Kafka 4.4 broker (its group configuration set) and
//!   our share worker example as a process of its own, to kill or freeze.
//! * [`process::ChildProcess`]: an example run as a process of its own (a share worker, a
//!   transactional worker, a database member), to kill, freeze or stop mid-work.
//! * [`peer`] / [`peer_consume`]: `scripts/peer.py`, confluent-kafka and
//!   kafka-python helpers that produce and read records with no code of ours
//!   on the wire.
//! * [`share_peer::SharePeer`]: Apache Kafka's share consumer (`scripts/SharePeer.java`), a
//!   member of a share group beside ours, and the share group's configuration.
//! * [`java`]: how the Java programs start, from the classes `scripts/setup-test-env` compiled
//!   (`scripts/ProducerPeer.java`, Java's producer and consumer judging ours, is driven by
//!   `tests/brokers/producer/java.rs`).
//!
//! Everything here needs `scripts/setup-test-env` to have run; a missing piece
//! is a panic that says so, never a silent skip. Every broker listens on
//! 127.0.0.1 only. A test's own broker is killed (by its own PID) when its handle
//! drops; the run's shared brokers (Kafka, the mock, tansu: [`BrokerKind::start`]) are
//! started once by `scripts/test`, or once per test process without it.
//!
//! Each tier binary (`tests/offline`, `tests/brokers`, `tests/clusters`) includes it with
//! `#[path = "../support/mod.rs"] mod support;` (and `tests/metrics_prometheus.rs` with
//! `mod support;`); beside it, `counting_alloc.rs` (the tiers' global allocator) and
//! `on_brokers.rs` (a test's broker as a module of its name) are declared by the tiers' `main.rs`.
//! Each binary uses a subset, hence the `dead_code` allowance. Beyond std it uses only serde_json
//! (a dev-dependency) to read the peers' JSON lines, and libc's `clock_gettime` to stamp our
//! members' ownership on the peers' clock ([`tenure`]).
#![allow(dead_code)]

pub mod certs;
pub mod cluster;
pub mod consumer;
pub mod fault_member;
pub mod fetch;
pub mod java;
pub mod kafka;
pub mod log_capture;
pub mod log_lines;
pub mod members;
pub mod ours;
pub mod process;
pub mod proxy;
pub mod share;
pub mod share_peer;
pub mod shared;
pub mod tenure;

pub use kafka::{Kafka, KafkaVersion};

/// The group timings that keep rebalances short in tests: the one definition every helper that
/// configures one of our members takes its session timeout, heartbeat interval and
/// `max.poll.interval.ms` from (our consumer's [`consumer::config`], [`ours::OurMemberSpec::new`],
/// [`ours::direct_member`]), whichever broker runs the group.
/// A test that needs other values says so where it sets them.
///
/// Why one set suits every broker kind:
/// - **Kafka** (4.x and 3.9): `scripts/kafka_broker.py` lowers `group.min.session.timeout.ms` to
///   1 s, so 6 s is accepted, and a member killed without LeaveGroup is replaced within 6 s.
/// - **librdkafka's mock** waits `session.timeout.ms - 1 s` in every rebalance before completing
///   the join: 6 s keeps those waits at 5 s, while a shorter session lets a heartbeat round trip
///   on a loaded two-core machine (bounded at a third of the session) run out.
/// - **tansu** keeps a member for its session timeout like Kafka; 6 s is well above its own
///   heartbeat handling latency.
///
/// Heartbeats every 500 ms: a rebalance is heard within half a second.
///
/// The peer clients ([`members::PeerMemberSpec::new`]) are the one exception, with
/// [`PEER_FAST_REBALANCE`]'s shorter session.
pub const FAST_REBALANCE: FastRebalance = FastRebalance {
    session_timeout_ms: 6000,
    heartbeat_interval_ms: 500,
    max_poll_interval_ms: 30_000,
};

/// [`FAST_REBALANCE`] for the peer clients (Java, confluent-kafka, kafka-python), with a 3 s
/// session. Why: with confluent-kafka members at 6 s on librdkafka's mock, the mixed groups of
/// `brokers::group::interop` (`mock::cooperative_sticky_{ours,peer}_leads`,
/// `mock::roundrobin_peer_leads`) do not settle within 90 s: the mock holds JoinGroups past our
/// join wait and answers the late SyncGroups INVALID_REQUEST (`group/quirks.rs`), with the old
/// poll-thread membership as with the current one. At 3 s they settle; on Kafka and tansu either
/// value works.
pub const PEER_FAST_REBALANCE: FastRebalance = FastRebalance {
    session_timeout_ms: 3000,
    ..FAST_REBALANCE
};

/// A set of group timings (see [`FAST_REBALANCE`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FastRebalance {
    /// `session.timeout.ms`.
    pub session_timeout_ms: u32,
    /// `heartbeat.interval.ms`.
    pub heartbeat_interval_ms: u32,
    /// `max.poll.interval.ms`.
    pub max_poll_interval_ms: u32,
}

use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

/// How long a broker may take to come up before the test fails.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(20);
/// How long one mock-cluster command may take to be answered.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);
/// Wall-clock guard around one `peer.py` run (it has its own, shorter deadlines).
const PEER_TIMEOUT: Duration = Duration::from_secs(120);

const SETUP_HINT: &str = "run scripts/setup-test-env first";

// ---------------------------------------------------------------------------
// Paths
// ---------------------------------------------------------------------------

/// The repository root (where `Cargo.toml` is).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The virtualenv's interpreter, `.venv/bin/python`.
///
/// Panics with a hint to run `scripts/setup-test-env` if it is missing.
pub fn venv_python() -> PathBuf {
    let path = repo_root().join(".venv/bin/python");
    if !path.exists() {
        panic!("{} is missing: {SETUP_HINT}", path.display());
    }
    path
}

/// The directory for broker logs (`target/tmp/test-brokers`). A log is removed
/// when its broker is dropped normally and kept when the test panicked.
pub fn scratch_dir() -> PathBuf {
    let base = option_env!("CARGO_TARGET_TMPDIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/tmp"));
    let dir = base.join("test-brokers");
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    dir
}

static SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// Logs (`RUST_LOG`) stamped with the time since the first call, to line them up with a
/// fault test's own timings (the cluster tests print when each node was killed).
pub fn init_stamped_logs() {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let start = *START.get_or_init(Instant::now);
    let _ = env_logger::builder()
        .is_test(true)
        .format(move |buf, record| {
            use std::io::Write;
            writeln!(
                buf,
                "[{:>9.3}s {} {}] {}",
                start.elapsed().as_secs_f64(),
                record.level(),
                record.target(),
                record.args()
            )
        })
        .try_init();
}

/// A name unique across processes and runs: `<prefix>-<pid>-<nanos>-<seq>`.
///
/// Use it for topics and groups so that tests never share state by accident.
pub fn unique_name(prefix: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let seq = SEQUENCE.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{}-{nanos}-{seq}", std::process::id())
}

fn log_path(kind: &str) -> PathBuf {
    scratch_dir().join(format!("{}.log", unique_name(kind)))
}

/// The last `max` bytes of a log file, for panic messages.
fn log_tail(path: &Path, max: usize) -> String {
    let text = fs::read(path).unwrap_or_default();
    let start = text.len().saturating_sub(max);
    String::from_utf8_lossy(&text[start..]).into_owned()
}

/// Starts a launcher script (`cmd`, named `script` in errors) with its stdin piped (its end is
/// how the script knows its caller is gone) and its stderr to `stderr`, and returns it with its
/// stdout as lines on a channel, so that every read can time out.
fn spawn_launcher(cmd: &mut Command, script: &str, stderr: File) -> (Child, Receiver<String>) {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(stderr))
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {script}: {e} ({SETUP_HINT}?)"));
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, lines) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, lines)
}

/// Kill a child we started (by its PID, through `Child::kill`) and reap it.
fn kill_and_reap(child: &mut Child) {
    if let Ok(None) = child.try_wait() {
        let _ = child.kill();
    }
    let _ = child.wait();
}

/// Broker logs are kept only when the test failed (the thread is panicking).
fn discard_log_unless_panicking(log: &Path) {
    if !thread::panicking() {
        let _ = fs::remove_file(log);
    }
}

/// Wait up to `timeout` for the child to exit by itself.
pub fn wait_exit(child: &mut Child, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return true,
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(10)),
            _ => return false,
        }
    }
}

// ---------------------------------------------------------------------------
// The broker abstraction
// ---------------------------------------------------------------------------

/// A running Kafka-compatible broker (or cluster) that a test can talk to.
///
/// Write a test once against `&dyn Broker` and run it on every [`BrokerKind`].
pub trait Broker {
    /// Which implementation this is, for messages.
    fn kind(&self) -> BrokerKind;
    /// The bootstrap list, `host:port[,host:port...]`.
    fn bootstrap(&self) -> String;
    /// Create a topic with replication factor 1 and wait until it is usable.
    /// Panics on failure.
    fn create_topic(&self, name: &str, partitions: u32);
}

/// The broker implementations the tests run against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BrokerKind {
    /// Apache Kafka, the newest 4.x: the shared broker of the run (see [`kafka`]).
    Kafka,
    /// Apache Kafka, the last 3.x, for version negotiation: shared like [`BrokerKind::Kafka`].
    Kafka3,
    /// librdkafka's mock cluster, one broker, no initial rebalance delay.
    Mock,
    /// tansu with memory storage.
    Tansu,
}

impl BrokerKind {
    /// Every kind a behaviour is checked on: real Kafka 4.x first (the truth), then the two
    /// independent implementations. Kafka 3.x is left to the tests that are about versions.
    pub const ALL: [BrokerKind; 3] = [BrokerKind::Kafka, BrokerKind::Mock, BrokerKind::Tansu];

    /// The run's shared broker of this kind (unique topic and group names keep tests apart; see
    /// [`kafka`] and [`shared`]). A test that injects faults into the mock, or needs a broker
    /// with other options, starts one of its own: [`MockCluster::start`], [`Tansu::start`],
    /// [`Kafka::start`].
    pub fn start(self) -> Box<dyn Broker> {
        match self {
            BrokerKind::Kafka => Box::new(Kafka::shared(KafkaVersion::Newest)),
            BrokerKind::Kafka3 => Box::new(Kafka::shared(KafkaVersion::Last3)),
            BrokerKind::Mock => Box::new(MockCluster::shared()),
            BrokerKind::Tansu => Box::new(Tansu::shared()),
        }
    }

    /// True for Apache Kafka of any version.
    pub fn is_kafka(self) -> bool {
        matches!(self, BrokerKind::Kafka | BrokerKind::Kafka3)
    }
}

// ---------------------------------------------------------------------------
// librdkafka's mock cluster
// ---------------------------------------------------------------------------

/// Options for [`MockCluster::start`].
#[derive(Clone, Debug)]
pub struct MockOptions {
    /// Number of brokers, ids `1..=brokers`.
    pub brokers: u32,
    /// Topics to create before the cluster is handed out: `(name, partitions)`,
    /// replication factor 1.
    pub topics: Vec<(String, u32)>,
    /// The group coordinator's `group.initial.rebalance.delay.ms`. librdkafka's
    /// default is 3000; 0 (our default) makes the first assignment immediate.
    pub initial_rebalance_delay_ms: u32,
}

impl Default for MockOptions {
    fn default() -> Self {
        MockOptions {
            brokers: 1,
            topics: Vec::new(),
            initial_rebalance_delay_ms: 0,
        }
    }
}

struct MockControl {
    stdin: ChildStdin,
    lines: Receiver<String>,
}

/// librdkafka's mock Kafka cluster of a test's own, run by `scripts/mock_cluster.py` in a
/// child process and steered with line commands on its stdin: for the tests that inject
/// faults (the run's shared mock, [`MockCluster::shared`], takes none).
///
/// See the docstring of `scripts/mock_cluster.py` for the command grammar, e.g.
/// `push_errors JoinGroup REBALANCE_IN_PROGRESS`, `broker_down 1`,
/// `coordinator group my-group 2`. Dropping it closes stdin (the script then
/// destroys the cluster), kills the child if it is still there, and reaps it.
pub struct MockCluster {
    child: Child,
    control: Mutex<Option<MockControl>>,
    bootstrap: String,
    log: PathBuf,
    startup: Duration,
}

impl MockCluster {
    /// Start a mock cluster; panics (with the script's log) if it is not up
    /// within 20 seconds.
    pub fn start(options: MockOptions) -> MockCluster {
        let started = Instant::now();
        let log = log_path("mock-cluster");
        let log_file =
            File::create(&log).unwrap_or_else(|e| panic!("create {}: {e}", log.display()));
        let mut cmd = Command::new(venv_python());
        cmd.arg(repo_root().join("scripts/mock_cluster.py"))
            .arg("--brokers")
            .arg(options.brokers.to_string())
            .arg("--initial-rebalance-delay-ms")
            .arg(options.initial_rebalance_delay_ms.to_string());
        for (name, partitions) in &options.topics {
            cmd.arg("--topic").arg(format!("{name}:{partitions}"));
        }
        let (mut child, lines) = spawn_launcher(&mut cmd, "scripts/mock_cluster.py", log_file);
        let stdin = child.stdin.take().expect("piped stdin");

        let bootstrap = match lines.recv_timeout(STARTUP_TIMEOUT) {
            Ok(line) if !line.trim().is_empty() => line.trim().to_string(),
            other => {
                kill_and_reap(&mut child);
                panic!(
                    "mock cluster did not print its bootstrap list ({other:?}); log {}:\n{}",
                    log.display(),
                    log_tail(&log, 4000)
                );
            }
        };
        MockCluster {
            child,
            control: Mutex::new(Some(MockControl { stdin, lines })),
            bootstrap,
            log,
            startup: started.elapsed(),
        }
    }

    /// The bootstrap list, e.g. `127.0.0.1:40123,127.0.0.1:40125`.
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// Send one command line and wait for its answer: `Ok(())` for `ok`,
    /// `Err(message)` for `err message`, a closed script or a timeout.
    pub fn command(&self, line: &str) -> Result<(), String> {
        let mut guard = self.control.lock().unwrap_or_else(|e| e.into_inner());
        let control = guard
            .as_mut()
            .ok_or_else(|| "mock cluster control channel is closed".to_string())?;
        writeln!(control.stdin, "{}", line.trim())
            .and_then(|_| control.stdin.flush())
            .map_err(|e| format!("write command to mock cluster: {e}"))?;
        match control.lines.recv_timeout(COMMAND_TIMEOUT) {
            Ok(answer) if answer == "ok" => Ok(()),
            Ok(answer) => Err(answer
                .strip_prefix("err ")
                .map(str::to_string)
                .unwrap_or_else(|| format!("unexpected answer {answer:?}"))),
            Err(RecvTimeoutError::Timeout) => Err(format!(
                "no answer to {line:?} within {COMMAND_TIMEOUT:?}; log {}",
                self.log.display()
            )),
            Err(RecvTimeoutError::Disconnected) => Err(format!(
                "mock cluster exited; log {}:\n{}",
                self.log.display(),
                log_tail(&self.log, 4000)
            )),
        }
    }

    /// Like [`command`](Self::command), but panics on `err`.
    pub fn must(&self, line: &str) {
        if let Err(e) = self.command(line) {
            panic!("mock cluster command {line:?} failed: {e}");
        }
    }

    /// The child's PID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The file that receives the script's (and librdkafka's) stderr.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// How long start-up took, up to the bootstrap line.
    pub fn startup_time(&self) -> Duration {
        self.startup
    }
}

impl Broker for MockCluster {
    fn kind(&self) -> BrokerKind {
        BrokerKind::Mock
    }

    fn bootstrap(&self) -> String {
        self.bootstrap.clone()
    }

    fn create_topic(&self, name: &str, partitions: u32) {
        // The mock does not implement the CreateTopics API; its own call does.
        self.must(&format!("create_topic {name} {partitions} 1"));
    }
}

impl Drop for MockCluster {
    fn drop(&mut self) {
        // Closing stdin is EOF for the script: it destroys the cluster and exits.
        let control = self
            .control
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        drop(control);
        if !wait_exit(&mut self.child, Duration::from_secs(2)) {
            kill_and_reap(&mut self.child);
        }
        discard_log_unless_panicking(&self.log);
    }
}

// ---------------------------------------------------------------------------
// tansu
// ---------------------------------------------------------------------------

/// A tansu broker (memory storage) on a free loopback port, run by `scripts/tansu_broker.py`,
/// the one place its command line is written: either one of this process's own
/// ([`Tansu::start`], stopped when the handle drops) or the run's shared one ([`Tansu::shared`]).
pub struct Tansu {
    /// The launcher of a broker this process started (its stdin open while the broker should
    /// run); `None` for the shared broker `scripts/test` handed over.
    launcher: Option<Child>,
    bootstrap: String,
    /// tansu's own output, when this process started it.
    log: Option<PathBuf>,
    startup: Duration,
}

impl Tansu {
    /// Start a tansu of this test's own and wait until it answers an ApiVersions request; panics
    /// (with its logs) if that does not happen within 20 seconds.
    pub fn start() -> Tansu {
        let started = Instant::now();
        let log = log_path("tansu");
        let launcher_log = log.with_extension("launcher.log");
        let stderr = File::create(&launcher_log)
            .unwrap_or_else(|e| panic!("create {}: {e}", launcher_log.display()));
        let mut cmd = Command::new(venv_python());
        cmd.arg(repo_root().join("scripts/tansu_broker.py"))
            .arg("--log")
            .arg(&log)
            .arg("--stop-on-stdin-eof")
            .arg("--timeout-s")
            .arg(STARTUP_TIMEOUT.as_secs().to_string());
        let (mut child, lines) = spawn_launcher(&mut cmd, "scripts/tansu_broker.py", stderr);
        // The launcher's own bound, plus its interpreter's start.
        match lines.recv_timeout(STARTUP_TIMEOUT + Duration::from_secs(10)) {
            Ok(line) if !line.trim().is_empty() => Tansu {
                launcher: Some(child),
                bootstrap: line.trim().to_string(),
                log: Some(log),
                startup: started.elapsed(),
            },
            other => {
                kill_and_reap(&mut child);
                panic!(
                    "tansu did not start ({other:?}); launcher {}:\n{}\ntansu log {}:\n{}",
                    launcher_log.display(),
                    log_tail(&launcher_log, 4000),
                    log.display(),
                    log_tail(&log, 4000)
                );
            }
        }
    }

    /// The file that receives tansu's stdout and stderr, when this process started it.
    pub fn log_path(&self) -> Option<&Path> {
        self.log.as_deref()
    }

    /// How long start-up took, up to the first ApiVersions answer (zero for a broker handed
    /// over by `scripts/test`).
    pub fn startup_time(&self) -> Duration {
        self.startup
    }
}

impl Broker for Tansu {
    fn kind(&self) -> BrokerKind {
        BrokerKind::Tansu
    }

    fn bootstrap(&self) -> String {
        self.bootstrap.clone()
    }

    fn create_topic(&self, name: &str, partitions: u32) {
        peer(&[
            "create-topic",
            "--bootstrap",
            &self.bootstrap,
            "--topic",
            name,
            "--partitions",
            &partitions.to_string(),
        ]);
    }
}

impl Broker for &'static Tansu {
    fn kind(&self) -> BrokerKind {
        Broker::kind(*self)
    }

    fn bootstrap(&self) -> String {
        Broker::bootstrap(*self)
    }

    fn create_topic(&self, name: &str, partitions: u32) {
        Broker::create_topic(*self, name, partitions)
    }
}

impl Drop for Tansu {
    fn drop(&mut self) {
        if let Some(launcher) = &mut self.launcher {
            // EOF on stdin: the launcher stops tansu by its PID.
            drop(launcher.stdin.take());
            if !wait_exit(launcher, Duration::from_secs(5)) {
                kill_and_reap(launcher);
            }
            if let Some(log) = &self.log {
                discard_log_unless_panicking(log);
                discard_log_unless_panicking(&log.with_extension("launcher.log"));
            }
        }
    }
}

/// Send a hand-encoded ApiVersions v0 request and check the response header
/// and error code. Independent of the crate under test on purpose.
pub fn api_versions_probe(addr: SocketAddr) -> Result<(), String> {
    const CORRELATION_ID: i32 = 0x5eed;
    let timeout = Duration::from_secs(2);
    let mut stream = TcpStream::connect_timeout(&addr, timeout).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|_| stream.set_write_timeout(Some(timeout)))
        .map_err(|e| e.to_string())?;
    let client_id = b"support-probe";
    let mut body = Vec::new();
    body.extend_from_slice(&18i16.to_be_bytes()); // api_key: ApiVersions
    body.extend_from_slice(&0i16.to_be_bytes()); // api_version 0
    body.extend_from_slice(&CORRELATION_ID.to_be_bytes());
    body.extend_from_slice(&(client_id.len() as i16).to_be_bytes());
    body.extend_from_slice(client_id);
    let mut request = (body.len() as i32).to_be_bytes().to_vec();
    request.extend_from_slice(&body);
    stream
        .write_all(&request)
        .map_err(|e| format!("write: {e}"))?;
    let mut size = [0u8; 4];
    stream
        .read_exact(&mut size)
        .map_err(|e| format!("read size: {e}"))?;
    let size = i32::from_be_bytes(size);
    if !(6..=1 << 20).contains(&size) {
        return Err(format!("implausible response size {size}"));
    }
    let mut response = vec![0u8; size as usize];
    stream
        .read_exact(&mut response)
        .map_err(|e| format!("read body: {e}"))?;
    let _ = stream.shutdown(Shutdown::Both);
    let correlation = i32::from_be_bytes([response[0], response[1], response[2], response[3]]);
    let error_code = i16::from_be_bytes([response[4], response[5]]);
    if correlation != CORRELATION_ID {
        return Err(format!(
            "correlation id {correlation}, sent {CORRELATION_ID}"
        ));
    }
    if error_code != 0 {
        return Err(format!("ApiVersions error code {error_code}"));
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Peer clients (scripts/peer.py)
// ---------------------------------------------------------------------------

/// Run `scripts/peer.py ARGS...` with the virtualenv's Python and return its
/// stdout. Panics with its stderr if it fails or runs longer than 120 s.
pub fn peer(args: &[&str]) -> String {
    let mut cmd = Command::new(venv_python());
    cmd.arg(repo_root().join("scripts/peer.py")).args(args);
    match run_with_timeout(cmd, PEER_TIMEOUT) {
        Ok((true, stdout, _)) => stdout,
        Ok((false, stdout, stderr)) => panic!(
            "peer.py {} failed\n--- stderr ---\n{}\n--- stdout ---\n{}",
            args.join(" "),
            tail_str(&stderr, 6000),
            tail_str(&stdout, 2000)
        ),
        Err(e) => panic!("peer.py {}: {e}", args.join(" ")),
    }
}

/// Run `scripts/peer.py ARGS...` and return (success, stdout, stderr) instead of
/// panicking: for tests that expect a peer to fail.
pub fn peer_try(args: &[&str]) -> (bool, String, String) {
    let mut cmd = Command::new(venv_python());
    cmd.arg(repo_root().join("scripts/peer.py")).args(args);
    run_with_timeout(cmd, PEER_TIMEOUT)
        .unwrap_or_else(|e| panic!("peer.py {}: {e}", args.join(" ")))
}

/// Run a Python snippet with the virtualenv's interpreter (`python -c CODE
/// ARGS...`) and return its stdout; panics with stderr on failure.
pub fn venv_python_run(code: &str, args: &[&str]) -> String {
    let mut cmd = Command::new(venv_python());
    cmd.arg("-c").arg(code).args(args);
    match run_with_timeout(cmd, PEER_TIMEOUT) {
        Ok((true, stdout, _)) => stdout,
        Ok((false, _, stderr)) => {
            panic!(
                "python -c failed\n--- stderr ---\n{}",
                tail_str(&stderr, 6000)
            )
        }
        Err(e) => panic!("python -c: {e}"),
    }
}

fn tail_str(s: &str, max: usize) -> &str {
    let mut start = s.len().saturating_sub(max);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// Run a command to completion with piped output, killing it (by PID) if it
/// outlives `timeout`. Returns (success, stdout, stderr).
pub fn run_with_timeout(
    mut cmd: Command,
    timeout: Duration,
) -> Result<(bool, String, String), String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawn: {e}"))?;
    let mut out = child.stdout.take().expect("piped stdout");
    let mut err = child.stderr.take().expect("piped stderr");
    let out_reader = thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = out.read_to_end(&mut buf);
        buf
    });
    let err_reader = thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = err.read_to_end(&mut buf);
        buf
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                kill_and_reap(&mut child);
                let stderr =
                    String::from_utf8_lossy(&err_reader.join().unwrap_or_default()).into_owned();
                return Err(format!(
                    "timed out after {timeout:?}; stderr:\n{}",
                    tail_str(&stderr, 6000)
                ));
            }
            Err(e) => return Err(format!("wait: {e}")),
        }
    };
    let stdout = String::from_utf8_lossy(&out_reader.join().unwrap_or_default()).into_owned();
    let stderr = String::from_utf8_lossy(&err_reader.join().unwrap_or_default()).into_owned();
    Ok((status.success(), stdout, stderr))
}

/// Produce `count` records with `peer.py produce` (see its docstring for the
/// record contents; [`peer_key`] and [`peer_value`] reproduce them). `extra`
/// takes further flags, e.g. `["--headers", "--compression", "lz4"]`.
pub fn peer_produce(bootstrap: &str, topic: &str, count: usize, extra: &[&str]) {
    let count_s = count.to_string();
    let mut args = vec![
        "produce",
        "--bootstrap",
        bootstrap,
        "--topic",
        topic,
        "--count",
        &count_s,
    ];
    args.extend_from_slice(extra);
    let out = peer(&args);
    assert_eq!(
        out.trim(),
        format!("produced {count}"),
        "peer.py produce output"
    );
}

/// The key `peer.py produce` writes for record `i` with `--key-prefix prefix`
/// (default `k`).
pub fn peer_key(prefix: &str, i: usize) -> String {
    format!("{prefix}-{i}")
}

/// The value `peer.py produce` writes for record `i` with `--size size`
/// (default 32): the text `v-<i>;` repeated and cut to `size` bytes.
pub fn peer_value(i: usize, size: usize) -> Vec<u8> {
    let unit = format!("v-{i};").into_bytes();
    unit.iter().copied().cycle().take(size).collect()
}

/// One record as printed by `peer.py consume`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerRecord {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<String>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    pub timestamp: i64,
}

/// Read `count` records of `topic` from the beginning with `peer.py consume`
/// (assign, no group), sorted by partition and offset.
pub fn peer_consume(bootstrap: &str, topic: &str, count: usize, extra: &[&str]) -> Vec<PeerRecord> {
    let count_s = count.to_string();
    let mut args = vec![
        "consume",
        "--bootstrap",
        bootstrap,
        "--topic",
        topic,
        "--count",
        &count_s,
    ];
    args.extend_from_slice(extra);
    peer(&args)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| parse_peer_record(l).unwrap_or_else(|e| panic!("bad peer.py line {l:?}: {e}")))
        .collect()
}

fn parse_peer_record(line: &str) -> Result<PeerRecord, String> {
    let value: Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
    let int = |name: &str| {
        value
            .get(name)
            .and_then(Value::as_i64)
            .ok_or_else(|| format!("missing integer {name}"))
    };
    let hex_opt = |v: Option<&Value>| -> Result<Option<Vec<u8>>, String> {
        match v {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => from_hex(s).map(Some),
            Some(other) => Err(format!("expected hex string, got {other:?}")),
        }
    };
    let mut headers = Vec::new();
    for h in value
        .get("headers")
        .and_then(Value::as_array)
        .ok_or("missing headers")?
    {
        let pair = h.as_array().ok_or("header is not a pair")?;
        let name = pair.first().and_then(Value::as_str).ok_or("header name")?;
        headers.push((name.to_string(), hex_opt(pair.get(1))?));
    }
    Ok(PeerRecord {
        partition: int("partition")? as i32,
        offset: int("offset")?,
        key: value.get("key").and_then(Value::as_str).map(str::to_string),
        value: hex_opt(value.get("value"))?,
        headers,
        timestamp: int("timestamp")?,
    })
}

fn from_hex(s: &str) -> Result<Vec<u8>, String> {
    if !s.len().is_multiple_of(2) {
        return Err(format!("odd-length hex {s:?}"));
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|e| format!("hex {s:?}: {e}")))
        .collect()
}
