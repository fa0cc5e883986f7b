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
//! asks starts one for its process, stopped when the process exits (the launcher sees its stdin
//! close).
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

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::OnceLock;
use std::time::Duration;

use super::{Broker, BrokerKind, MockCluster, MockOptions, Tansu, COMMAND_TIMEOUT};

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

/// The run's shared mock (one broker, no initial rebalance delay): a topic of the test's own is
/// all it offers ([`Broker::create_topic`]), no fault injection (see the module documentation).
pub struct SharedMock {
    bootstrap: String,
    control: MockControl,
}

enum MockControl {
    /// The mock `scripts/test` started, steered over its command port.
    Remote(SocketAddr),
    /// A mock this process started, for lack of one handed over.
    Own(MockCluster),
}

impl MockCluster {
    /// The run's shared mock: the one `scripts/test` handed over, or else one started on first
    /// use for this test process.
    pub fn shared() -> &'static SharedMock {
        static CELL: OnceLock<SharedMock> = OnceLock::new();
        CELL.get_or_init(|| match handed_over(MOCK_BOOTSTRAP_VAR) {
            Some(bootstrap) => {
                let control = handed_over(MOCK_CONTROL_VAR).unwrap_or_else(|| {
                    panic!("{MOCK_BOOTSTRAP_VAR} is set without {MOCK_CONTROL_VAR}")
                });
                let control = control.parse().unwrap_or_else(|e| {
                    panic!("{MOCK_CONTROL_VAR}={control:?} is not an address: {e}")
                });
                SharedMock {
                    bootstrap,
                    control: MockControl::Remote(control),
                }
            }
            None => {
                let mock = MockCluster::start(MockOptions::default());
                SharedMock {
                    bootstrap: mock.bootstrap().to_string(),
                    control: MockControl::Own(mock),
                }
            }
        })
    }
}

impl SharedMock {
    /// The shared mock with new topics `(name, partitions)` on it: what
    /// [`MockOptions::topics`] does for a mock of a test's own.
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

    /// One command (of those the shared mock takes) and its answer.
    fn command(&self, line: &str) -> Result<(), String> {
        match &self.control {
            MockControl::Own(mock) => mock.command(line),
            MockControl::Remote(addr) => remote_command(*addr, line),
        }
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
