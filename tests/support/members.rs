//! Peer consumer-group members (`scripts/peer_member.py`, `scripts/Peer.java`)
//! that interop tests run next to our own member, and the ownership checks that
//! judge a group.
//!
//! A [`PeerMember`] is one long-running confluent-kafka, kafka-python or Java
//! (kafka-clients, the reference client) consumer in a group. Both programs
//! speak the same flags and print one JSON line per rebalance event; a
//! reader thread parses them into [`MemberEvent`]s that tests can wait on
//! ([`PeerMember::wait_for`]) and read back ([`PeerMember::events`],
//! [`PeerMember::owned`]). [`check_exactly_once_ownership`] and
//! [`wait_until_stable`] judge a whole group; [`check_no_double_ownership`]
//! replays the peers' merged event timeline and fails if two members ever
//! owned a partition at the same time.
//!
//! Broker and peer limitations that decide how a test must be set up (leader
//! choice, which broker, which client) are listed in the docs of
//! `tests/brokers/group/peers.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::java::java_program;
use serde_json::Value;

use super::{repo_root, scratch_dir, unique_name, venv_python, wait_exit};

/// A topic-partition as the peers report it: `(topic, partition)`.
pub type Tp = (String, i32);

/// Every member's name and ownership, in member order.
pub type Ownership = Vec<(String, BTreeSet<Tp>)>;

/// How long [`PeerMember::close`] waits for a graceful close before it kills.
/// tansu can take a few seconds to answer a LeaveGroup.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `Drop` waits after closing stdin before it kills.
const DROP_GRACE: Duration = Duration::from_secs(1);
/// The least time [`PeerMember::wait_ready`] gives a Java member: the JVM starts and loads
/// kafka-clients first (the classes `scripts/setup-test-env` compiled, see [`super::java`]),
/// under a second on an idle 2-core machine and several times that while cargo and other JVMs
/// run.
const JAVA_READY_TIMEOUT: Duration = Duration::from_secs(120);

/// Which peer client library runs the member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerClient {
    /// confluent-kafka's `Consumer` (librdkafka 2.16): eager and cooperative.
    Confluent,
    /// kafka-python 2.3.3's `KafkaConsumer`: eager assignors only (it has no
    /// cooperative rebalance protocol).
    KafkaPython,
    /// Apache Kafka's own `KafkaConsumer` (kafka-clients, the version pinned as
    /// `KAFKA_CLIENTS_VERSION`), run by `scripts/Peer.java`: eager and
    /// cooperative classic groups, and the consumer protocol (KIP-848). It also
    /// reports the rebalances it led ([`MemberEventKind::Led`]).
    Java,
}

impl PeerClient {
    /// The script's `--client` value.
    pub fn arg(self) -> &'static str {
        match self {
            PeerClient::Confluent => "confluent",
            PeerClient::KafkaPython => "kafka-python",
            PeerClient::Java => "java",
        }
    }
}

/// The group protocol a peer member speaks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerGroupProtocol {
    /// The classic protocol (JoinGroup/SyncGroup), with the spec's strategy,
    /// session timeout and heartbeat interval.
    Classic,
    /// `group.protocol=consumer` (KIP-848), Java only: the broker assigns
    /// (with `group.remote.assignor` when set: `uniform` or `range`) and its
    /// `group.consumer.*` settings decide session and heartbeat, so the
    /// spec's strategy and timeouts are not passed (Java 4.x refuses them).
    Consumer { remote_assignor: Option<String> },
}

/// The assignment strategy a peer member asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerStrategy {
    Range,
    RoundRobin,
    /// Confluent and Java: kafka-python 2.3.3 cannot run it (the script refuses).
    CooperativeSticky,
}

impl PeerStrategy {
    /// The protocol name, as in `partition.assignment.strategy`.
    pub fn name(self) -> &'static str {
        match self {
            PeerStrategy::Range => "range",
            PeerStrategy::RoundRobin => "roundrobin",
            PeerStrategy::CooperativeSticky => "cooperative-sticky",
        }
    }

    /// Whether the strategy uses the incremental (cooperative) protocol.
    pub fn is_cooperative(self) -> bool {
        self == PeerStrategy::CooperativeSticky
    }
}

/// Everything [`PeerMember::start`] needs. [`PeerMemberSpec::new`] fills in
/// the group timings of [`PEER_FAST_REBALANCE`](super::PEER_FAST_REBALANCE) and dynamic
/// membership.
#[derive(Clone, Debug)]
pub struct PeerMemberSpec {
    pub client: PeerClient,
    pub bootstrap: String,
    pub group: String,
    pub topics: Vec<String>,
    pub strategy: PeerStrategy,
    /// `group.instance.id`: static membership when set.
    pub instance_id: Option<String>,
    pub session_timeout_ms: u32,
    pub heartbeat_interval_ms: u32,
    pub max_poll_interval_ms: u32,
    /// Names the member in events and messages; unique within a test.
    pub name: String,
    /// Print a `record` event per consumed record.
    pub consume: bool,
    /// Client debug logging (group protocol) into the member's log file.
    pub debug: bool,
    /// Classic unless set with [`PeerMemberSpec::consumer_protocol`].
    pub group_protocol: PeerGroupProtocol,
}

impl PeerMemberSpec {
    /// A spec with the defaults described on the type.
    pub fn new(
        client: PeerClient,
        bootstrap: &str,
        group: &str,
        topics: &[&str],
        strategy: PeerStrategy,
        name: &str,
    ) -> PeerMemberSpec {
        PeerMemberSpec {
            client,
            bootstrap: bootstrap.to_string(),
            group: group.to_string(),
            topics: topics.iter().map(|t| t.to_string()).collect(),
            strategy,
            instance_id: None,
            session_timeout_ms: super::PEER_FAST_REBALANCE.session_timeout_ms,
            heartbeat_interval_ms: super::PEER_FAST_REBALANCE.heartbeat_interval_ms,
            max_poll_interval_ms: super::PEER_FAST_REBALANCE.max_poll_interval_ms,
            name: name.to_string(),
            consume: false,
            debug: false,
            group_protocol: PeerGroupProtocol::Classic,
        }
    }

    /// Speak the consumer protocol (KIP-848), Java members only; `remote_assignor`
    /// is `group.remote.assignor` (`uniform` or `range`; the broker's default
    /// when `None`).
    pub fn consumer_protocol(mut self, remote_assignor: Option<&str>) -> Self {
        self.group_protocol = PeerGroupProtocol::Consumer {
            remote_assignor: remote_assignor.map(str::to_string),
        };
        self
    }

    /// Set `group.instance.id`.
    pub fn instance_id(mut self, id: &str) -> Self {
        self.instance_id = Some(id.to_string());
        self
    }

    /// Set the session timeout and heartbeat interval.
    pub fn timeouts(mut self, session_timeout_ms: u32, heartbeat_interval_ms: u32) -> Self {
        self.session_timeout_ms = session_timeout_ms;
        self.heartbeat_interval_ms = heartbeat_interval_ms;
        self
    }
}

/// What happened, as reported by the peer script.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberEventKind {
    /// Subscribed; polling starts.
    Ready,
    /// Partitions assigned (for cooperative members only the increment).
    Assigned,
    /// Partitions revoked (eager members: everything they owned).
    Revoked,
    /// Partitions lost (confluent and Java; kafka-python reports a revoke instead).
    Lost,
    /// Java only: this member's assignor computed the group's assignment, which
    /// in the classic protocol only the leader does (once per rebalance round).
    Led,
    /// A client error; `fatal` says whether the member gave up.
    Error,
    /// A consumed record (only with `consume`).
    Record,
    /// The client was closed and the script is about to exit.
    Closed,
    /// Synthetic: [`PeerMember::kill`] killed the process.
    Killed,
    /// An event name this module does not know.
    Other(String),
}

/// One event line of a peer member.
#[derive(Clone, Debug)]
pub struct MemberEvent {
    /// The member's name.
    pub name: String,
    pub kind: MemberEventKind,
    /// What the event is about (empty for ready/error/record).
    pub partitions: BTreeSet<Tp>,
    /// The member's whole ownership after the event, when the event carries
    /// it (assigned, revoked, lost, closed, killed).
    pub owned: Option<BTreeSet<Tp>>,
    /// `time.monotonic()` in the peer process (CLOCK_MONOTONIC on Linux, so
    /// comparable across peer processes). A synthetic `Killed` event carries
    /// the member's last reported `t`.
    pub t: f64,
    /// When this process read the line.
    pub received: Instant,
    /// The error text of an `error` event.
    pub error: Option<String>,
    /// Whether an `error` event was fatal.
    pub fatal: bool,
    /// For `record` events: (topic, partition, offset).
    pub record: Option<(String, i32, i64)>,
    /// The raw line (or a description of a synthetic event).
    pub raw: String,
}

impl MemberEvent {
    fn parse(line: &str, received: Instant) -> Result<MemberEvent, String> {
        let v: Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
        let name = v
            .get("name")
            .and_then(Value::as_str)
            .ok_or("missing name")?
            .to_string();
        let kind = match v.get("event").and_then(Value::as_str) {
            Some("ready") => MemberEventKind::Ready,
            Some("assigned") => MemberEventKind::Assigned,
            Some("revoked") => MemberEventKind::Revoked,
            Some("lost") => MemberEventKind::Lost,
            Some("led") => MemberEventKind::Led,
            Some("error") => MemberEventKind::Error,
            Some("record") => MemberEventKind::Record,
            Some("closed") => MemberEventKind::Closed,
            Some(other) => MemberEventKind::Other(other.to_string()),
            None => return Err("missing event".into()),
        };
        let t = v.get("t").and_then(Value::as_f64).ok_or("missing t")?;
        let partitions = match v.get("partitions") {
            Some(p) => parse_tps(p)?,
            None => BTreeSet::new(),
        };
        let owned = v.get("owned").map(parse_tps).transpose()?;
        let record = if kind == MemberEventKind::Record {
            let topic = v.get("topic").and_then(Value::as_str);
            let partition = v.get("partition").and_then(Value::as_i64);
            let offset = v.get("offset").and_then(Value::as_i64);
            match (topic, partition, offset) {
                (Some(t), Some(p), Some(o)) => Some((t.to_string(), p as i32, o)),
                _ => return Err("record event without topic/partition/offset".into()),
            }
        } else {
            None
        };
        Ok(MemberEvent {
            name,
            kind,
            partitions,
            owned,
            t,
            received,
            error: v.get("error").and_then(Value::as_str).map(str::to_string),
            fatal: v.get("fatal").and_then(Value::as_bool) == Some(true),
            record,
            raw: line.to_string(),
        })
    }

    /// A one-line summary for logs: `t name kind partitions -> owned`.
    pub fn summary(&self) -> String {
        let mut s = format!("{:.3} {} {:?}", self.t, self.name, self.kind);
        if !self.partitions.is_empty() || self.owned.is_some() {
            let _ = write!(s, " {}", fmt_tps(&self.partitions));
        }
        if let Some(owned) = &self.owned {
            let _ = write!(s, " -> owned {}", fmt_tps(owned));
        }
        if let Some(e) = &self.error {
            let _ = write!(s, " error={e:?} fatal={}", self.fatal);
        }
        s
    }
}

fn parse_tps(v: &Value) -> Result<BTreeSet<Tp>, String> {
    let items = v.as_array().ok_or("partition list is not an array")?;
    items
        .iter()
        .map(|pair| {
            let pair = pair.as_array().ok_or("partition is not a pair")?;
            match (
                pair.first().and_then(Value::as_str),
                pair.get(1).and_then(Value::as_i64),
            ) {
                (Some(topic), Some(p)) => Ok((topic.to_string(), p as i32)),
                _ => Err(format!("bad partition {pair:?}")),
            }
        })
        .collect()
}

/// `t1[0,1] t2[3]`, compact for messages.
pub fn fmt_tps(tps: &BTreeSet<Tp>) -> String {
    if tps.is_empty() {
        return "{}".to_string();
    }
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (t, p) in tps {
        by_topic.entry(t).or_default().push(*p);
    }
    by_topic
        .iter()
        .map(|(t, ps)| {
            let ps: Vec<String> = ps.iter().map(i32::to_string).collect();
            format!("{t}[{}]", ps.join(","))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[derive(Default)]
struct State {
    events: Vec<MemberEvent>,
    /// The script's stdout reached EOF (the process exited or was killed).
    eof: bool,
    /// Lines that were not event JSON, with the parse error.
    bad_lines: Vec<String>,
}

type Shared = Arc<(Mutex<State>, Condvar)>;

fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    shared.0.lock().unwrap_or_else(|e| e.into_inner())
}

/// A running peer group member (`scripts/peer_member.py`, or
/// `scripts/Peer.java` for [`PeerClient::Java`]).
///
/// Its stderr (client logs, tracebacks) goes to a file under
/// `target/tmp/test-brokers`, kept only if the test panicked. Dropping it
/// closes stdin (which the script treats as `close`), waits a second, then
/// kills the process by its PID if it is still there.
pub struct PeerMember {
    name: String,
    client: PeerClient,
    child: Child,
    stdin: Option<ChildStdin>,
    shared: Shared,
    reader: Option<JoinHandle<()>>,
    log: PathBuf,
}

impl PeerMember {
    /// Spawn the member. Panics if the program cannot be spawned (run
    /// `scripts/setup-test-env`) or the spec asks a Python client for the
    /// consumer protocol; everything later is reported through events.
    pub fn start(spec: PeerMemberSpec) -> PeerMember {
        let log = scratch_dir().join(format!(
            "{}.log",
            unique_name(&format!("peer-{}", spec.name))
        ));
        let log_file =
            File::create(&log).unwrap_or_else(|e| panic!("create {}: {e}", log.display()));
        let (mut cmd, program) = match spec.client {
            PeerClient::Java => (java_program("Peer"), "scripts/Peer.java"),
            PeerClient::Confluent | PeerClient::KafkaPython => {
                let mut cmd = Command::new(venv_python());
                cmd.arg(repo_root().join("scripts/peer_member.py"))
                    .args(["--client", spec.client.arg()]);
                (cmd, "scripts/peer_member.py")
            }
        };
        cmd.args(["--bootstrap", &spec.bootstrap])
            .args(["--group", &spec.group])
            .args(["--name", &spec.name])
            .args([
                "--max-poll-interval-ms",
                &spec.max_poll_interval_ms.to_string(),
            ]);
        match &spec.group_protocol {
            PeerGroupProtocol::Classic => {
                cmd.args(["--strategy", spec.strategy.name()])
                    .args(["--session-timeout-ms", &spec.session_timeout_ms.to_string()])
                    .args([
                        "--heartbeat-interval-ms",
                        &spec.heartbeat_interval_ms.to_string(),
                    ]);
            }
            PeerGroupProtocol::Consumer { remote_assignor } => {
                assert_eq!(
                    spec.client,
                    PeerClient::Java,
                    "{}: only the Java peer speaks the consumer protocol",
                    spec.name
                );
                cmd.args(["--group-protocol", "consumer"]);
                if let Some(assignor) = remote_assignor {
                    cmd.args(["--remote-assignor", assignor]);
                }
            }
        }
        for topic in &spec.topics {
            cmd.args(["--topic", topic]);
        }
        if let Some(id) = &spec.instance_id {
            cmd.args(["--instance-id", id]);
        }
        if spec.consume {
            cmd.arg("--consume");
        }
        if spec.debug {
            cmd.arg("--debug");
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_file))
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {program}: {e} (run scripts/setup-test-env first?)"));
        let stdout = child.stdout.take().expect("piped stdout");
        let stdin = child.stdin.take();
        let shared: Shared = Arc::new((Mutex::new(State::default()), Condvar::new()));
        let reader_shared = Arc::clone(&shared);
        let reader = thread::Builder::new()
            .name(format!("peer-{}", spec.name))
            .spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if line.trim().is_empty() {
                        continue;
                    }
                    let parsed = MemberEvent::parse(&line, Instant::now());
                    let mut state = lock(&reader_shared);
                    match parsed {
                        Ok(ev) => state.events.push(ev),
                        Err(e) => state.bad_lines.push(format!("{line:?}: {e}")),
                    }
                    drop(state);
                    reader_shared.1.notify_all();
                }
                lock(&reader_shared).eof = true;
                reader_shared.1.notify_all();
            })
            .expect("spawn reader thread");
        PeerMember {
            name: spec.name,
            client: spec.client,
            child,
            stdin,
            shared,
            reader: Some(reader),
            log,
        }
    }

    /// The member's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Which client library runs it.
    pub fn client(&self) -> PeerClient {
        self.client
    }

    /// The script's PID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The file that receives the script's stderr.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// A copy of every event so far.
    pub fn events(&self) -> Vec<MemberEvent> {
        lock(&self.shared).events.clone()
    }

    /// The ownership reported by the latest event that carries one (empty
    /// before the first assignment and after `closed` or a kill).
    pub fn owned(&self) -> BTreeSet<Tp> {
        latest_owned(&lock(&self.shared).events)
    }

    /// Whether the script's stdout is still open (the process is alive).
    pub fn is_running(&self) -> bool {
        !lock(&self.shared).eof
    }

    /// Wait until `pred` holds for the event list; on timeout (or if the
    /// process exits first without satisfying it) return an error that names
    /// the member and includes its event log and the tail of its stderr.
    pub fn wait_for<F>(&self, mut pred: F, timeout: Duration) -> Result<(), String>
    where
        F: FnMut(&[MemberEvent]) -> bool,
    {
        let deadline = Instant::now() + timeout;
        let mut state = lock(&self.shared);
        loop {
            if pred(&state.events) {
                return Ok(());
            }
            let now = Instant::now();
            if state.eof || now >= deadline {
                let why = if state.eof {
                    "the member exited".to_string()
                } else {
                    format!("timed out after {timeout:?}")
                };
                let log = format_state(&self.name, &state);
                drop(state);
                return Err(format!("{why}\n{log}{}", self.stderr_tail()));
            }
            state = self
                .shared
                .1
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Wait for the `ready` event (subscribed). A Java member gets at least
    /// [`JAVA_READY_TIMEOUT`] whatever `timeout` says: its JVM starts and
    /// loads kafka-clients first.
    pub fn wait_ready(&self, timeout: Duration) -> Result<(), String> {
        let timeout = match self.client {
            PeerClient::Java => timeout.max(JAVA_READY_TIMEOUT),
            PeerClient::Confluent | PeerClient::KafkaPython => timeout,
        };
        self.wait_for(
            |evs| evs.iter().any(|e| e.kind == MemberEventKind::Ready),
            timeout,
        )
        .map_err(|e| format!("{} never became ready: {e}", self.name))
    }

    /// Wait until the latest ownership satisfies `pred`.
    pub fn wait_owned<F>(&self, mut pred: F, timeout: Duration) -> Result<(), String>
    where
        F: FnMut(&BTreeSet<Tp>) -> bool,
    {
        self.wait_for(|evs| pred(&latest_owned(evs)), timeout)
    }

    /// How many rebalance rounds this member led so far (Java members report
    /// it; always 0 for the Python clients).
    pub fn led_count(&self) -> usize {
        lock(&self.shared)
            .events
            .iter()
            .filter(|e| e.kind == MemberEventKind::Led)
            .count()
    }

    /// The event log as text, one summary per line (for assertion messages).
    pub fn event_log(&self) -> String {
        format_state(&self.name, &lock(&self.shared))
    }

    /// Close gracefully: send `close` (LeaveGroup unless static), wait for the
    /// process to exit (30 s at most, then kill) and for its last events.
    pub fn close(&mut self) -> Result<(), String> {
        if let Some(mut stdin) = self.stdin.take() {
            // A write error means the script is already gone; waiting tells.
            let _ = writeln!(stdin, "close").and_then(|_| stdin.flush());
        }
        let exited = wait_exit(&mut self.child, CLOSE_TIMEOUT);
        if !exited {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        self.join_reader();
        if !exited {
            return Err(format!(
                "{} did not exit within {CLOSE_TIMEOUT:?} of close; killed\n{}{}",
                self.name,
                self.event_log(),
                self.stderr_tail()
            ));
        }
        let state = lock(&self.shared);
        if !state
            .events
            .iter()
            .any(|e| e.kind == MemberEventKind::Closed)
        {
            let log = format_state(&self.name, &state);
            drop(state);
            return Err(format!(
                "{} exited without a closed event\n{log}{}",
                self.name,
                self.stderr_tail()
            ));
        }
        Ok(())
    }

    /// Kill the process (SIGKILL through `Child::kill`, by its PID): a crash,
    /// no LeaveGroup. Appends a synthetic `Killed` event that ends the
    /// member's ownership at its last reported `t`.
    pub fn kill(&mut self) {
        self.stdin.take();
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.join_reader();
        let mut state = lock(&self.shared);
        let t = state.events.last().map(|e| e.t).unwrap_or(0.0);
        let owned = latest_owned(&state.events);
        state.events.push(MemberEvent {
            name: self.name.clone(),
            kind: MemberEventKind::Killed,
            partitions: owned,
            owned: Some(BTreeSet::new()),
            t,
            received: Instant::now(),
            error: None,
            fatal: false,
            record: None,
            raw: "(killed by the test)".to_string(),
        });
        drop(state);
        self.shared.1.notify_all();
    }

    fn join_reader(&mut self) {
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }

    fn stderr_tail(&self) -> String {
        let text = fs::read(&self.log).unwrap_or_default();
        let start = text.len().saturating_sub(3000);
        format!(
            "--- stderr of {} ({}) ---\n{}",
            self.name,
            self.log.display(),
            String::from_utf8_lossy(&text[start..])
        )
    }
}

impl Drop for PeerMember {
    fn drop(&mut self) {
        // EOF on stdin is `close` for the script.
        self.stdin.take();
        if !wait_exit(&mut self.child, DROP_GRACE) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        self.join_reader();
        if !thread::panicking() {
            let _ = fs::remove_file(&self.log);
        }
    }
}

fn latest_owned(events: &[MemberEvent]) -> BTreeSet<Tp> {
    events
        .iter()
        .rev()
        .find_map(|e| e.owned.clone())
        .unwrap_or_default()
}

fn format_state(name: &str, state: &State) -> String {
    let mut s = format!("--- events of {name} ({}) ---\n", state.events.len());
    for e in &state.events {
        let _ = writeln!(s, "  {}", e.summary());
    }
    for bad in &state.bad_lines {
        let _ = writeln!(s, "  unparsed line {bad}");
    }
    s
}

// ---------------------------------------------------------------------------
// Group-wide checks
// ---------------------------------------------------------------------------

/// Every partition of `topic_partitions` (topic -> partition count) must be
/// owned by exactly one of `members`, and no member may own anything else.
/// The error lists every partition owned by nobody, by several members (with
/// their names) or outside the topics.
pub fn check_exactly_once_ownership(
    topic_partitions: &BTreeMap<String, i32>,
    members: &[(&str, BTreeSet<Tp>)],
) -> Result<(), String> {
    let mut owners: BTreeMap<Tp, Vec<&str>> = BTreeMap::new();
    for (topic, count) in topic_partitions {
        for p in 0..*count {
            owners.insert((topic.clone(), p), Vec::new());
        }
    }
    let mut unknown = Vec::new();
    for (name, owned) in members {
        for tp in owned {
            match owners.get_mut(tp) {
                Some(names) => names.push(name),
                None => unknown.push(format!("{}-{} (owned by {name})", tp.0, tp.1)),
            }
        }
    }
    let unowned: Vec<String> = owners
        .iter()
        .filter(|(_, names)| names.is_empty())
        .map(|(tp, _)| format!("{}-{}", tp.0, tp.1))
        .collect();
    let shared: Vec<String> = owners
        .iter()
        .filter(|(_, names)| names.len() > 1)
        .map(|(tp, names)| format!("{}-{} (owned by {})", tp.0, tp.1, names.join(", ")))
        .collect();
    if unowned.is_empty() && shared.is_empty() && unknown.is_empty() {
        return Ok(());
    }
    let mut msg = String::from("ownership is not exactly-once:");
    if !unowned.is_empty() {
        let _ = write!(msg, " owned by nobody: {};", unowned.join(" "));
    }
    if !shared.is_empty() {
        let _ = write!(msg, " owned by several: {};", shared.join(" "));
    }
    if !unknown.is_empty() {
        let _ = write!(msg, " not in the subscribed topics: {};", unknown.join(" "));
    }
    let _ = write!(msg, " members: {}", fmt_ownership(members));
    Err(msg)
}

/// `A=t[0,1] B=t[2]`, for messages.
pub fn fmt_ownership(members: &[(&str, BTreeSet<Tp>)]) -> String {
    members
        .iter()
        .map(|(name, owned)| format!("{name}={}", fmt_tps(owned)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Options for [`wait_until_stable`].
#[derive(Clone, Debug)]
pub struct Stability {
    /// How long the ownership must stay unchanged (and exactly-once).
    pub settle: Duration,
    /// Give up after this long.
    pub timeout: Duration,
    /// Also require every member to own at least one partition. Right when
    /// there are at least as many partitions as members and the assignor
    /// balances (range over one topic, roundrobin, cooperative-sticky); it
    /// keeps a member that has not joined yet from passing as "stable".
    pub every_member_owns: bool,
    /// Also require member sizes to differ by one at most: the final assignment of an
    /// assignor that balances, for members with equal subscriptions. Under a cooperative
    /// assignor it tells the final assignment from an intermediate one, which is exactly-once
    /// too but leaves the members that gain partitions short until the follow-up round, for
    /// as long as the members that give them up take to revoke and rejoin.
    pub balanced: bool,
    /// How often to poll.
    pub poll_every: Duration,
}

impl Default for Stability {
    fn default() -> Self {
        Stability {
            settle: Duration::from_secs(1),
            timeout: Duration::from_secs(60),
            every_member_owns: true,
            balanced: false,
            poll_every: Duration::from_millis(50),
        }
    }
}

impl Stability {
    /// The defaults with another timeout.
    pub fn within(timeout: Duration) -> Stability {
        Stability {
            timeout,
            ..Stability::default()
        }
    }
}

/// Poll `ownership` (every member's name and current ownership) until it is
/// exactly-once over `topic_partitions` (see [`check_exactly_once_ownership`]),
/// every member owns something if `opts.every_member_owns`, member sizes differ
/// by one at most if `opts.balanced`, and it stays
/// unchanged for `opts.settle`. Returns the stable ownership and how long it
/// took to reach it (not counting the settle period). The timeout error
/// carries the last violation seen.
pub fn wait_until_stable<F>(
    topic_partitions: &BTreeMap<String, i32>,
    opts: &Stability,
    mut ownership: F,
) -> Result<(Ownership, Duration), String>
where
    F: FnMut() -> Ownership,
{
    let start = Instant::now();
    let mut candidate: Option<(Ownership, Instant)> = None;
    let mut last_problem = String::from("never polled");
    loop {
        let now_owned = ownership();
        let view: Vec<(&str, BTreeSet<Tp>)> = now_owned
            .iter()
            .map(|(n, o)| (n.as_str(), o.clone()))
            .collect();
        let verdict = check_exactly_once_ownership(topic_partitions, &view)
            .and_then(|()| {
                match view
                    .iter()
                    .find(|(_, o)| opts.every_member_owns && o.is_empty())
                {
                    Some((name, _)) => {
                        Err(format!("{name} owns nothing: {}", fmt_ownership(&view)))
                    }
                    None => Ok(()),
                }
            })
            .and_then(|()| {
                let sizes = view.iter().map(|(_, o)| o.len());
                match (sizes.clone().min(), sizes.max()) {
                    (Some(lo), Some(hi)) if opts.balanced && hi > lo + 1 => {
                        Err(format!("not balanced: {}", fmt_ownership(&view)))
                    }
                    _ => Ok(()),
                }
            });
        match verdict {
            Ok(()) => match &candidate {
                Some((seen, since)) if *seen == now_owned => {
                    if since.elapsed() >= opts.settle {
                        return Ok((now_owned, *since - start));
                    }
                }
                _ => candidate = Some((now_owned, Instant::now())),
            },
            Err(problem) => {
                candidate = None;
                last_problem = problem;
            }
        }
        if start.elapsed() >= opts.timeout {
            return Err(format!(
                "group not stable within {:?}; last problem: {last_problem}",
                opts.timeout
            ));
        }
        thread::sleep(opts.poll_every);
    }
}

/// `wait_until_stable` over peer members; on timeout the error carries every
/// member's event log.
pub fn wait_peers_stable(
    topic_partitions: &BTreeMap<String, i32>,
    members: &[&PeerMember],
    opts: &Stability,
) -> Result<(Ownership, Duration), String> {
    wait_until_stable(topic_partitions, opts, || peer_ownership(members)).map_err(|e| {
        let mut msg = e;
        for m in members {
            msg.push('\n');
            msg.push_str(&m.event_log());
        }
        msg
    })
}

/// Every member's name and current ownership.
pub fn peer_ownership(members: &[&PeerMember]) -> Ownership {
    members
        .iter()
        .map(|m| (m.name().to_string(), m.owned()))
        .collect()
}

/// `{topic: partitions}` for one topic.
pub fn one_topic(topic: &str, partitions: i32) -> BTreeMap<String, i32> {
    BTreeMap::from([(topic.to_string(), partitions)])
}

/// Replay the peers' events merged by `t` (their shared monotonic clock) and
/// fail if a partition was ever owned by two members at once. Events with
/// equal `t` are applied revokes first, then assignments, then the synthetic
/// `Killed` (which carries the `t` of the member's last event, often an
/// assignment: it must end that ownership, not precede it). Only meaningful
/// for peer processes on one host; a killed member's ownership ends at its last
/// reported event.
pub fn check_no_double_ownership(events: &[MemberEvent]) -> Result<(), String> {
    let mut merged: Vec<&MemberEvent> = events.iter().filter(|e| e.owned.is_some()).collect();
    merged.sort_by(|a, b| {
        let rank = |e: &MemberEvent| match e.kind {
            MemberEventKind::Assigned => 1u8,
            MemberEventKind::Killed => 2,
            _ => 0,
        };
        a.t.total_cmp(&b.t).then_with(|| rank(a).cmp(&rank(b)))
    });
    let mut owned: BTreeMap<&str, BTreeSet<Tp>> = BTreeMap::new();
    for ev in merged {
        let now = ev.owned.clone().unwrap_or_default();
        for tp in &now {
            if let Some((other, _)) = owned
                .iter()
                .find(|(name, set)| **name != ev.name.as_str() && set.contains(tp))
            {
                return Err(format!(
                    "{}-{} owned by {} and {} at once (at t={:.3}: {})",
                    tp.0,
                    tp.1,
                    other,
                    ev.name,
                    ev.t,
                    ev.summary()
                ));
            }
        }
        owned.insert(ev.name.as_str(), now);
    }
    Ok(())
}

/// Every event of every member, merged by `t`, as text (for messages).
pub fn merged_log(members: &[&PeerMember]) -> String {
    let mut all: Vec<MemberEvent> = members.iter().flat_map(|m| m.events()).collect();
    all.sort_by(|a, b| a.t.total_cmp(&b.t));
    let mut s = String::from("--- merged events ---\n");
    for e in &all {
        let _ = writeln!(s, "  {}", e.summary());
    }
    s
}
