//! Apache Kafka for the tests: a single-node KRaft broker started by `scripts/kafka_broker.py`
//! from the jars that `scripts/setup-test-env` resolved from Maven Central.
//!
//! # One broker per run, shared safely
//!
//! A JVM broker takes seconds of CPU to start, and two cores cannot afford one per test. So a
//! run shares one broker per version:
//!
//! * `scripts/test` starts the newest 4.x and the last 3.x before the tests, and hands their
//!   addresses over in `RG_TEST_KAFKA_4_BOOTSTRAP` and `RG_TEST_KAFKA_3_BOOTSTRAP` (nextest
//!   runs every test in a process of its own, so the broker must live outside them);
//! * without those variables (a plain `cargo test --test brokers consumer::loop_`), the first test that
//!   asks starts the broker for its whole test binary; it stops when the test process exits
//!   (the launcher sees its stdin close).
//!
//! Sharing is safe because nothing a test does on the broker is visible to another test: every
//! test uses topics, groups and static instance ids made by [`super::unique_name`] (the pid,
//! the time and a counter), never a fixed name, and no test changes broker-wide settings or
//! stops the shared broker. A test that needs a broker of its own (to stop it, or with other
//! settings) starts one with [`Kafka::start`], which is stopped when the handle drops.
//!
//! # The version matrix
//!
//! `scripts/test --versions` runs a subset of the suite (`scripts/version-matrix.list`) against
//! older Kafka lines, one at a time. It names the line under test in `RG_TEST_KAFKA_MATRIX_VERSION`
//! (e.g. `3.0.2`) and hands over its broker in `RG_TEST_KAFKA_MATRIX_BOOTSTRAP`. While the version
//! is set, every Kafka a test asks for, the newest and the last 3.x alike, shared or its own, is
//! that version: the tests run unchanged, and a test whose feature the old line lacks is excluded
//! by the matrix list with its reason or calls [`require_kafka`], which fails it loudly. With the
//! version set and no bootstrap (`RG_TEST_KAFKA_MATRIX_VERSION=3.0.2 cargo test --test brokers
//! wire::offsets`), the first test starts that broker for its test binary, as for the shared ones.
//!
//! The broker settings (fast first join, one offsets partition, replication 1, no automatic
//! topic creation, short minimum session timeouts) are listed in `scripts/kafka_broker.py`.

use std::collections::HashMap;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use super::{kill_and_reap, log_tail, peer, repo_root, scratch_dir, unique_name, venv_python};
use super::{spawn_launcher, wait_exit, Broker, BrokerKind, SETUP_HINT};

/// Bound on one broker's start-up, format included: generous, since several JVMs and a build
/// may share the two cores.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(120);

/// Which pinned Kafka release (see `scripts/versions.env`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KafkaVersion {
    /// The newest 4.x: the reference broker of every behaviour test.
    Newest,
    /// The last 3.x: the version-negotiation tests check the highest common versions on it.
    Last3,
}

impl KafkaVersion {
    /// The pinned version string, e.g. `4.4.0`; the matrix's version under
    /// `scripts/test --versions` (see the module documentation).
    pub fn version(self) -> String {
        if let Some(version) = matrix_version() {
            return version;
        }
        let key = match self {
            KafkaVersion::Newest => "KAFKA_4_VERSION",
            KafkaVersion::Last3 => "KAFKA_3_VERSION",
        };
        pinned(key)
    }

    /// The variable in which `scripts/test` hands over the run's shared broker.
    pub fn env_var(self) -> &'static str {
        if matrix_version().is_some() {
            return "RG_TEST_KAFKA_MATRIX_BOOTSTRAP";
        }
        match self {
            KafkaVersion::Newest => "RG_TEST_KAFKA_4_BOOTSTRAP",
            KafkaVersion::Last3 => "RG_TEST_KAFKA_3_BOOTSTRAP",
        }
    }

    fn kind(self) -> BrokerKind {
        match self {
            KafkaVersion::Newest => BrokerKind::Kafka,
            KafkaVersion::Last3 => BrokerKind::Kafka3,
        }
    }
}

/// The Kafka line under test when `scripts/test --versions` runs the matrix
/// (`RG_TEST_KAFKA_MATRIX_VERSION`), else `None`.
pub fn matrix_version() -> Option<String> {
    std::env::var("RG_TEST_KAFKA_MATRIX_VERSION")
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// `(major, minor)` of a version string such as `3.0.2`.
pub fn major_minor(version: &str) -> (u32, u32) {
    let mut parts = version.split('.').map(|p| p.parse::<u32>());
    match (parts.next(), parts.next()) {
        (Some(Ok(major)), Some(Ok(minor))) => (major, minor),
        _ => panic!("not a Kafka version: {version:?}"),
    }
}

/// Fails the test at once, naming `feature`, when the Kafka under test (`version`'s pin, or the
/// matrix's line) is older than `min`: a test of a feature an old broker lacks must never pass
/// there by accident, nor be skipped silently. The matrix list excludes such tests with the
/// same reason; this catches one it forgot.
pub fn require_kafka(version: KafkaVersion, min: (u32, u32), feature: &str) {
    let under_test = version.version();
    assert!(
        major_minor(&under_test) >= min,
        "this test needs Kafka {}.{} or newer ({feature}), and runs on Kafka {under_test}: \
         exclude it for this version in scripts/version-matrix.list",
        min.0,
        min.1
    );
}

/// A value of `scripts/versions.env`, the one place where every pin is written.
pub fn pinned(key: &str) -> String {
    static PINS: OnceLock<HashMap<String, String>> = OnceLock::new();
    let pins = PINS.get_or_init(|| {
        let path = repo_root().join("scripts/versions.env");
        let text =
            fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect()
    });
    pins.get(key)
        .cloned()
        .unwrap_or_else(|| panic!("scripts/versions.env has no {key}"))
}

struct Launcher {
    child: Child,
    /// Held open while the broker should run: the launcher stops the broker on EOF.
    stdin: Option<ChildStdin>,
}

/// A running Apache Kafka broker: either the run's shared one ([`Kafka::shared`]) or one of the
/// test's own ([`Kafka::start`], stopped on drop).
pub struct Kafka {
    version: KafkaVersion,
    bootstrap: String,
    log: Option<PathBuf>,
    launcher: Mutex<Option<Launcher>>,
    startup: Duration,
}

impl Kafka {
    /// The run's shared broker of `version`: the one `scripts/test` handed over, or else one
    /// started on first use for this test process.
    pub fn shared(version: KafkaVersion) -> &'static Kafka {
        static NEWEST: OnceLock<Kafka> = OnceLock::new();
        static LAST3: OnceLock<Kafka> = OnceLock::new();
        static MATRIX: OnceLock<Kafka> = OnceLock::new();
        let cell = match version {
            _ if matrix_version().is_some() => &MATRIX,
            KafkaVersion::Newest => &NEWEST,
            KafkaVersion::Last3 => &LAST3,
        };
        cell.get_or_init(|| match std::env::var(version.env_var()) {
            Ok(bootstrap) if !bootstrap.trim().is_empty() => Kafka {
                version,
                bootstrap: bootstrap.trim().to_string(),
                log: None,
                launcher: Mutex::new(None),
                startup: Duration::ZERO,
            },
            _ => Kafka::launch(version, &[]),
        })
    }

    /// A broker of the test's own, with extra broker settings (`key=value`); stopped when
    /// dropped, its log kept if the test failed.
    pub fn start(version: KafkaVersion, settings: &[&str]) -> Kafka {
        Kafka::launch(version, settings)
    }

    fn launch(version: KafkaVersion, settings: &[&str]) -> Kafka {
        let started = Instant::now();
        let v = version.version();
        let log = scratch_dir().join(format!("{}.log", unique_name(&format!("kafka-{v}"))));
        let stderr_path = log.with_extension("launcher.log");
        let stderr = File::create(&stderr_path)
            .unwrap_or_else(|e| panic!("create {}: {e}", stderr_path.display()));
        let mut cmd = Command::new(venv_python());
        cmd.arg(repo_root().join("scripts/kafka_broker.py"))
            .arg("--version")
            .arg(&v)
            .arg("--log")
            .arg(&log)
            .arg("--stop-on-stdin-eof")
            .arg("--stop-grace-s")
            .arg("2");
        for setting in settings {
            cmd.arg("--set").arg(setting);
        }
        let (mut child, rx) = spawn_launcher(&mut cmd, "scripts/kafka_broker.py", stderr);
        let bootstrap = match rx.recv_timeout(STARTUP_TIMEOUT) {
            Ok(line) if !line.trim().is_empty() => line.trim().to_string(),
            other => {
                kill_and_reap(&mut child);
                panic!(
                    "Kafka {v} did not start ({other:?}); launcher: {}\nbroker log {}:\n{}",
                    log_tail(&stderr_path, 6000),
                    log.display(),
                    log_tail(&log, 6000)
                );
            }
        };
        let stdin = child.stdin.take();
        Kafka {
            version,
            bootstrap,
            log: Some(log),
            launcher: Mutex::new(Some(Launcher { child, stdin })),
            startup: started.elapsed(),
        }
    }

    /// Which release this is (under the matrix, both stand for the matrix's line).
    pub fn version(&self) -> KafkaVersion {
        self.version
    }

    /// The bootstrap address, `127.0.0.1:PORT`.
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// The broker's log, when this process started the broker (`scripts/test` prints the shared
    /// brokers' logs itself when a run fails).
    pub fn log_path(&self) -> Option<&Path> {
        self.log.as_deref()
    }

    /// How long the start took (zero for a broker handed over by `scripts/test`).
    pub fn startup_time(&self) -> Duration {
        self.startup
    }
}

impl Broker for Kafka {
    fn kind(&self) -> BrokerKind {
        self.version.kind()
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

impl Broker for &'static Kafka {
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

impl Drop for Kafka {
    fn drop(&mut self) {
        let launcher = self
            .launcher
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(mut launcher) = launcher {
            // EOF on stdin: the launcher stops the broker by its PID and removes its data.
            drop(launcher.stdin.take());
            if !wait_exit(&mut launcher.child, Duration::from_secs(10)) {
                kill_and_reap(&mut launcher.child);
            }
            if !thread::panicking() {
                if let Some(log) = &self.log {
                    let _ = fs::remove_file(log);
                    let _ = fs::remove_file(log.with_extension("launcher.log"));
                }
            }
        }
    }
}

/// The run's Kafka 4.x with a SASL_PLAINTEXT listener (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) and
/// one user, for the `brokers::wire::sasl` tests.
///
/// Why its own broker: the shared brokers have a PLAINTEXT listener only, and SASL settings are
/// broker-wide. Why shared across processes: nextest runs every test in a process of its own,
/// and a JVM per test is too much for two cores. So the first test process of a run (a run is
/// identified by the parent process: nextest, or cargo for `cargo test`) creates a directory
/// named after that parent, starts `scripts/kafka_broker.py --watch-pid PARENT` detached (its
/// own process group, no pipes to the test), and writes the addresses and credentials to
/// `ready` in that directory; the other test processes wait for that file. The broker stops
/// when the run's parent process exits. `RG_TEST_KAFKA_SASL` (`PLAINTEXT_ADDR,SASL_ADDR,USER,
/// PASSWORD`) hands over a broker started elsewhere instead.
///
/// The listener re-authenticates sessions after [`SASL_REAUTH`] (`connections.max.reauth.ms`),
/// so long-lived connections in these tests must renew their sessions (KIP-368).
///
/// The same JVM also serves the `brokers::wire::tls` tests (one broker for every security test, not
/// one more JVM): certificates made at run time ([`super::certs`]) in `tls_dir`, and the TLS
/// listeners `SSL`, `MTLS` (client certificate required), `SASL_SSL` (PLAIN, SCRAM, OAUTHBEARER)
/// and `WRONGHOST` (a certificate for another host name), in `tls`. `RG_TEST_KAFKA_SASL` may carry
/// a fifth field, the directory of such a broker's certificates and its `tls.bootstrap`.
pub struct SaslKafka {
    /// The PLAINTEXT listener (topic creation by the peers; no authentication).
    pub plaintext: String,
    /// The SASL_PLAINTEXT listener.
    pub sasl: String,
    /// A user known to every mechanism.
    pub user: String,
    /// Its password (the same for PLAIN and both SCRAM hashes).
    pub password: String,
    /// The certificates' directory (see [`super::certs::generate`]).
    pub tls_dir: PathBuf,
    /// TLS listener name (`SSL`, `MTLS`, `SASL_SSL`, `WRONGHOST`) to its address.
    pub tls: HashMap<String, String>,
}

fn tls_listeners(tls_dir: &Path) -> HashMap<String, String> {
    let path = tls_dir.join("tls.bootstrap");
    let text = fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (a broker without TLS listeners?)", path.display()));
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

/// `connections.max.reauth.ms` of the SASL broker.
pub const SASL_REAUTH: Duration = Duration::from_secs(5);

impl SaslKafka {
    /// The run's SASL broker (see the type's documentation).
    pub fn shared() -> &'static SaslKafka {
        static CELL: OnceLock<SaslKafka> = OnceLock::new();
        CELL.get_or_init(|| {
            if let Ok(handed) = std::env::var("RG_TEST_KAFKA_SASL") {
                let parts: Vec<&str> = handed.trim().split(',').collect();
                if let [plaintext, sasl, user, password, ref rest @ ..] = parts[..] {
                    if rest.len() <= 1 {
                        let tls_dir = PathBuf::from(rest.first().copied().unwrap_or_default());
                        let tls = if rest.is_empty() {
                            HashMap::new()
                        } else {
                            tls_listeners(&tls_dir)
                        };
                        return SaslKafka {
                            plaintext: plaintext.into(),
                            sasl: sasl.into(),
                            user: user.into(),
                            password: password.into(),
                            tls_dir,
                            tls,
                        };
                    }
                }
                panic!(
                    "RG_TEST_KAFKA_SASL must be PLAINTEXT_ADDR,SASL_ADDR,USER,PASSWORD[,TLS_DIR]"
                );
            }
            SaslKafka::for_this_run()
        })
    }

    fn for_this_run() -> SaslKafka {
        let parent = std::os::unix::process::parent_id();
        let dir = scratch_dir().join(format!("sasl-kafka-run-{parent}"));
        let ready = dir.join("ready");
        match fs::create_dir(&dir) {
            Ok(()) => SaslKafka::launch_detached(&dir, parent),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => panic!("create {}: {e}", dir.display()),
        }
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            if let Ok(text) = fs::read_to_string(&ready) {
                let field = |key: &str| {
                    text.lines()
                        .find_map(|l| l.strip_prefix(&format!("{key}=")))
                        .map(str::to_string)
                        .unwrap_or_else(|| panic!("{} lacks {key}", ready.display()))
                };
                let tls_dir = dir.join("tls");
                return SaslKafka {
                    plaintext: field("plaintext"),
                    sasl: field("sasl"),
                    user: field("user"),
                    password: field("password"),
                    tls: tls_listeners(&tls_dir),
                    tls_dir,
                };
            }
            if let Ok(why) = fs::read_to_string(dir.join("failed")) {
                panic!("the run's SASL broker did not start: {why}");
            }
            assert!(
                Instant::now() < deadline,
                "the run's SASL broker ({}) was not ready within {STARTUP_TIMEOUT:?}",
                dir.display()
            );
            thread::sleep(Duration::from_millis(100));
        }
    }

    fn launch_detached(dir: &Path, parent: u32) {
        use std::os::unix::process::CommandExt;
        let v = KafkaVersion::Newest.version();
        let user = "rg-sasl-user".to_string();
        // Unique per run, so a test that looks for the password in output cannot match a
        // constant from the code.
        let password = unique_name("pw").replace('-', "x");
        let plain_file = dir.join("plaintext.bootstrap");
        let sasl_file = dir.join("sasl.bootstrap");
        let tls_dir = dir.join("tls");
        let tls_file = tls_dir.join("tls.bootstrap");
        super::certs::generate(&tls_dir);
        let launcher_log = dir.join("launcher.log");
        let out = File::create(dir.join("launcher.out")).expect("launcher.out");
        let err = File::create(&launcher_log).expect("launcher.log");
        let mut cmd = Command::new(venv_python());
        cmd.arg(repo_root().join("scripts/kafka_broker.py"))
            .arg("--version")
            .arg(&v)
            .arg("--log")
            .arg(dir.join("broker.log"))
            .arg("--watch-pid")
            .arg(parent.to_string())
            .arg("--stop-grace-s")
            .arg("2")
            .arg("--sasl-user")
            .arg(format!("{user}={password}"))
            .arg("--set")
            .arg(format!(
                "connections.max.reauth.ms={}",
                SASL_REAUTH.as_millis()
            ))
            .arg("--bootstrap-file")
            .arg(&plain_file)
            .arg("--sasl-bootstrap-file")
            .arg(&sasl_file)
            .arg("--tls-dir")
            .arg(&tls_dir)
            .arg("--tls-bootstrap-file")
            .arg(&tls_file)
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .process_group(0);
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn scripts/kafka_broker.py: {e} ({SETUP_HINT}?)"));
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            if let (Ok(plain), Ok(sasl), true) = (
                fs::read_to_string(&plain_file),
                fs::read_to_string(&sasl_file),
                tls_file.exists(),
            ) {
                let text = format!(
                    "plaintext={}\nsasl={}\nuser={user}\npassword={password}\n",
                    plain.trim(),
                    sasl.trim()
                );
                let tmp = dir.join("ready.tmp");
                fs::write(&tmp, text).expect("write ready");
                fs::rename(&tmp, dir.join("ready")).expect("rename ready");
                // The launcher outlives this process by design (see the type's doc): it is
                // reaped by init and stops with the run's parent.
                drop(child);
                return;
            }
            if let Ok(Some(status)) = child.try_wait() {
                let why = format!("exit {status}: {}", log_tail(&launcher_log, 6000));
                let _ = fs::write(dir.join("failed"), &why);
                panic!("the SASL broker exited during start-up: {why}");
            }
            if Instant::now() > deadline {
                kill_and_reap(&mut child);
                let why = format!(
                    "no bootstrap within {STARTUP_TIMEOUT:?}: {}",
                    log_tail(&launcher_log, 6000)
                );
                let _ = fs::write(dir.join("failed"), &why);
                panic!("{why}");
            }
            thread::sleep(Duration::from_millis(100));
        }
    }
}
