//! The run's shared librdkafka mock and tansu: one of each for every test of a run, as for the
//! shared Kafka brokers ([`super::kafka`]).
//!
//! # Why shared, and why that is safe
//!
//! Each start costs a Python interpreter loading librdkafka (the mock) or a tansu process, and a
//! run has dozens of tests on each. So `scripts/test` starts one mock (`scripts/mock_cluster.py
//! --serve`) and one tansu (`scripts/tansu_broker.py`) before the tests and hands them over in
//! `RG_TEST_MOCK_BOOTSTRAP` with `RG_TEST_MOCK_CONTROL` (the mock's command port) and
//! `RG_TEST_TANSU_BOOTSTRAP`. Without those variables (a test run by hand) the first test that
//! asks starts one for its process, with the same launchers, stopped when the process exits.
//!
//! Nothing a test does on a shared broker is visible to another, because every test uses topics
//! and groups of [`super::unique_name`] and takes only the mock commands that act on the topic
//! or group they name (creating a topic, pinning its leader or its group's coordinator:
//! `scripts/mock_cluster.py`'s list). The mock's fault injection is cluster-wide (errors pushed
//! for an API key answer whichever client sends the next request of that key; a broker down, or
//! slow, is down or slow for everyone), so [`SharedMock`] does not offer it and the shared mock
//! refuses it: a test that injects faults, needs several brokers or another initial rebalance
//! delay starts a [`MockCluster`] of its own. No test stops or restarts tansu, so every tansu
//! test can share it; [`Tansu::start`] remains for the test of the launcher itself.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use super::{kill_and_reap, log_path, log_tail, repo_root, spawn_launcher, venv_python};
use super::{Broker, BrokerKind, MockCluster, Tansu, COMMAND_TIMEOUT, STARTUP_TIMEOUT};

/// The variable naming the shared mock's bootstrap list.
const MOCK_BOOTSTRAP_VAR: &str = "RG_TEST_MOCK_BOOTSTRAP";
/// The variable naming the shared mock's command port (`127.0.0.1:PORT`).
const MOCK_CONTROL_VAR: &str = "RG_TEST_MOCK_CONTROL";
/// The variable naming the shared tansu's bootstrap address.
const TANSU_BOOTSTRAP_VAR: &str = "RG_TEST_TANSU_BOOTSTRAP";

/// A variable's value, `None` when it is unset or blank.
fn handed_over(var: &str) -> Option<String> {
    std::env::var(var)
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// The run's shared mock (one broker, no initial rebalance delay): topics of the test's own
/// ([`Broker::create_topic`]) and the other commands `scripts/mock_cluster.py --serve` takes,
/// no fault injection (see the module documentation).
pub struct SharedMock {
    bootstrap: String,
    /// The mock's command port.
    control: SocketAddr,
}

impl MockCluster {
    /// The run's shared mock: the one `scripts/test` handed over, or else one started on first
    /// use for this test process (`scripts/mock_cluster.py --serve` as well, so that it takes
    /// exactly the commands the run's takes; it stops when this process exits).
    pub fn shared() -> &'static SharedMock {
        static CELL: OnceLock<SharedMock> = OnceLock::new();
        CELL.get_or_init(|| match handed_over(MOCK_BOOTSTRAP_VAR) {
            Some(bootstrap) => {
                let control = handed_over(MOCK_CONTROL_VAR).unwrap_or_else(|| {
                    panic!("{MOCK_BOOTSTRAP_VAR} is set without {MOCK_CONTROL_VAR}")
                });
                SharedMock {
                    bootstrap,
                    control: control.parse().unwrap_or_else(|e| {
                        panic!("{MOCK_CONTROL_VAR}={control:?} is not an address: {e}")
                    }),
                }
            }
            None => serve_mock_for_this_process(),
        })
    }
}

/// Starts `scripts/mock_cluster.py --serve`, watching this process, and reads its two lines:
/// the bootstrap list and the command port. Its child handle is let go: the script stops by
/// itself when this process exits.
fn serve_mock_for_this_process() -> SharedMock {
    let log = log_path("mock-shared");
    let stderr = File::create(&log).unwrap_or_else(|e| panic!("create {}: {e}", log.display()));
    let mut cmd = Command::new(venv_python());
    cmd.arg(repo_root().join("scripts/mock_cluster.py"))
        .arg("--serve")
        .arg("--watch-pid")
        .arg(std::process::id().to_string());
    let (mut child, lines) = spawn_launcher(&mut cmd, "scripts/mock_cluster.py --serve", stderr);
    let mut next_line = || match lines.recv_timeout(STARTUP_TIMEOUT) {
        Ok(line) if !line.trim().is_empty() => line.trim().to_string(),
        other => {
            kill_and_reap(&mut child);
            panic!(
                "the shared mock did not start ({other:?}); log {}:\n{}",
                log.display(),
                log_tail(&log, 4000)
            );
        }
    };
    let bootstrap = next_line();
    let control = next_line();
    SharedMock {
        bootstrap,
        control: control
            .parse()
            .unwrap_or_else(|e| panic!("the shared mock's command port {control:?}: {e}")),
    }
}

impl SharedMock {
    /// The shared mock with new topics `(name, partitions)` on it: what
    /// [`MockOptions::topics`](super::MockOptions::topics) does for a mock of a test's own.
    pub fn with_topics(topics: &[(&str, u32)]) -> &'static SharedMock {
        let mock = MockCluster::shared();
        for (name, partitions) in topics {
            mock.create_topic(name, *partitions);
        }
        mock
    }

    /// The bootstrap list, `127.0.0.1:PORT`.
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// Sends one command (the grammar of `scripts/mock_cluster.py`) and waits for its answer:
    /// `Err` with the mock's message when it fails, or when it is one the shared mock refuses
    /// (everything that is not confined to the topic or group it names).
    pub fn command(&self, line: &str) -> Result<(), String> {
        remote_command(self.control, line)
    }
}

/// Sends one command line to a `--serve` mock's command port and reads its one-line answer.
fn remote_command(addr: SocketAddr, line: &str) -> Result<(), String> {
    let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|e| format!("connect to the shared mock's command port {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(COMMAND_TIMEOUT))
        .and_then(|()| stream.set_write_timeout(Some(COMMAND_TIMEOUT)))
        .map_err(|e| format!("set timeouts on {addr}: {e}"))?;
    let mut writer = &stream;
    writeln!(writer, "{}", line.trim())
        .and_then(|()| writer.flush())
        .map_err(|e| format!("send {line:?} to the shared mock: {e}"))?;
    let mut answer = String::new();
    BufReader::new(&stream)
        .read_line(&mut answer)
        .map_err(|e| format!("no answer to {line:?} from the shared mock: {e}"))?;
    match answer.trim() {
        "ok" => Ok(()),
        "" => Err(format!("the shared mock closed the connection on {line:?}")),
        other => Err(other.strip_prefix("err ").unwrap_or(other).to_string()),
    }
}

impl Broker for SharedMock {
    fn kind(&self) -> BrokerKind {
        BrokerKind::Mock
    }

    fn bootstrap(&self) -> String {
        self.bootstrap.clone()
    }

    fn create_topic(&self, name: &str, partitions: u32) {
        // The mock does not implement the CreateTopics API; its own call does.
        let line = format!("create_topic {name} {partitions} 1");
        if let Err(e) = self.command(&line) {
            panic!("shared mock: {line:?} failed: {e}");
        }
    }
}

impl Broker for &'static SharedMock {
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

impl Tansu {
    /// The run's shared tansu: the one `scripts/test` handed over, or else one started on first
    /// use for this test process.
    pub fn shared() -> &'static Tansu {
        static CELL: OnceLock<Tansu> = OnceLock::new();
        CELL.get_or_init(|| match handed_over(TANSU_BOOTSTRAP_VAR) {
            Some(bootstrap) => Tansu {
                launcher: None,
                bootstrap,
                log: None,
                startup: Duration::ZERO,
            },
            None => Tansu::start(),
        })
    }
}
