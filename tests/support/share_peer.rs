//! The Java share-group member (`scripts/SharePeer.java`: Apache Kafka's
//! `KafkaShareConsumer`, explicit acknowledgement) that share-group tests run
//! beside our own share consumers, and the share group's configuration
//! (`scripts/share_group.py`).
//!
//! A [`SharePeer`] prints one JSON line per event (the script's header lists
//! them); a reader thread parses them into [`ShareEvent`]s that a test waits
//! on ([`SharePeer::wait_for`]) and reads back ([`SharePeer::events`]). Times
//! are `mono_ns`, `System.nanoTime()`: CLOCK_MONOTONIC on Linux, the clock of
//! `std::time::Instant`, so a test can order the peer's events against its own.

use std::fs::{self, File};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::java::java_program;
use super::{repo_root, run_with_timeout, scratch_dir, unique_name, venv_python, wait_exit};

/// How long [`SharePeer::close`] waits for the `closed` event and the exit.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(40);

/// What a [`SharePeer`] is started with (the script's flags).
#[derive(Clone, Debug)]
pub struct SharePeerSpec {
    pub bootstrap: String,
    pub group: String,
    pub topics: Vec<String>,
    /// The member's name in its events and its client id.
    pub name: String,
    /// Simulated work per record before its event and acknowledgement.
    pub process_ms: u64,
    /// Keys acknowledged RELEASE on every delivery to this member.
    pub release: Vec<String>,
    /// Keys acknowledged RELEASE on their first delivery (delivery count 1).
    pub release_first: Vec<String>,
    /// Keys acknowledged REJECT.
    pub reject: Vec<String>,
    /// Consumer settings, `--set NAME=VALUE`.
    pub settings: Vec<(String, String)>,
}

impl SharePeerSpec {
    /// A member of `group` reading `topic`, with no delay and ACCEPT for every record.
    pub fn new(bootstrap: &str, group: &str, topic: &str, name: &str) -> SharePeerSpec {
        SharePeerSpec {
            bootstrap: bootstrap.to_string(),
            group: group.to_string(),
            topics: vec![topic.to_string()],
            name: name.to_string(),
            process_ms: 0,
            release: Vec::new(),
            release_first: Vec::new(),
            reject: Vec::new(),
            settings: Vec::new(),
        }
    }
}

/// One event line of the peer.
#[derive(Clone, Debug)]
pub struct ShareEvent {
    /// `ready`, `applied`, `released`, `rejected`, `lock_timeout`, `commit`, `ack_failed`,
    /// `error`, `closed`, `group_config`.
    pub event: String,
    pub topic: Option<String>,
    pub partition: Option<i32>,
    pub offset: Option<i64>,
    /// The record key as UTF-8 text.
    pub key: Option<String>,
    pub delivery_count: Option<i64>,
    /// CLOCK_MONOTONIC nanoseconds when the line was printed.
    pub mono_ns: u64,
    /// The whole line, for the fields above do not cover.
    pub json: Value,
}

impl ShareEvent {
    fn parse(line: &str) -> Result<ShareEvent, String> {
        let json: Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
        let event = json["event"]
            .as_str()
            .ok_or("no \"event\" field")?
            .to_string();
        Ok(ShareEvent {
            event,
            topic: json["topic"].as_str().map(str::to_string),
            partition: json["partition"]
                .as_i64()
                .and_then(|p| i32::try_from(p).ok()),
            offset: json["offset"].as_i64(),
            key: json["key"].as_str().map(str::to_string),
            delivery_count: json["delivery_count"].as_i64(),
            mono_ns: json["mono_ns"].as_u64().unwrap_or(0),
            json,
        })
    }
}

#[derive(Default)]
struct State {
    events: Vec<ShareEvent>,
    bad_lines: Vec<String>,
    eof: bool,
}

type Shared = Arc<(Mutex<State>, Condvar)>;

/// A running `scripts/SharePeer.java`; killed (by its PID) when dropped.
pub struct SharePeer {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    shared: Shared,
    reader: Option<JoinHandle<()>>,
    log: PathBuf,
}

impl SharePeer {
    /// Spawns the member; panics if java cannot be spawned (run `scripts/setup-test-env`).
    pub fn start(spec: SharePeerSpec) -> SharePeer {
        let log = scratch_dir().join(format!(
            "{}.log",
            unique_name(&format!("share-peer-{}", spec.name))
        ));
        let log_file =
            File::create(&log).unwrap_or_else(|e| panic!("create {}: {e}", log.display()));
        let mut cmd = java_program("SharePeer");
        cmd.args(["--bootstrap", &spec.bootstrap])
            .args(["--group", &spec.group])
            .args(["--name", &spec.name])
            .args(["--process-ms", &spec.process_ms.to_string()]);
        for topic in &spec.topics {
            cmd.args(["--topic", topic]);
        }
        for (flag, keys) in [
            ("--release", &spec.release),
            ("--release-first", &spec.release_first),
            ("--reject", &spec.reject),
        ] {
            for key in keys {
                cmd.args([flag, key]);
            }
        }
        for (k, v) in &spec.settings {
            cmd.arg("--set").arg(format!("{k}={v}"));
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_file))
            .spawn()
            .unwrap_or_else(|e| panic!("spawn java SharePeer (scripts/SharePeer.java): {e}"));
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let shared: Shared = Arc::default();
        let state = Arc::clone(&shared);
        let reader = thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let (lock, cond) = &*state;
                let mut s = lock.lock().unwrap_or_else(|e| e.into_inner());
                match ShareEvent::parse(&line) {
                    Ok(event) => s.events.push(event),
                    Err(e) => s.bad_lines.push(format!("{line:?}: {e}")),
                }
                cond.notify_all();
            }
            let (lock, cond) = &*state;
            lock.lock().unwrap_or_else(|e| e.into_inner()).eof = true;
            cond.notify_all();
        });
        SharePeer {
            name: spec.name,
            child,
            stdin,
            shared,
            reader: Some(reader),
            log,
        }
    }

    /// Every event so far.
    pub fn events(&self) -> Vec<ShareEvent> {
        let (lock, _) = &*self.shared;
        lock.lock()
            .unwrap_or_else(|e| e.into_inner())
            .events
            .clone()
    }

    /// The events of one kind so far (`applied`, `released`, ...).
    pub fn events_of(&self, kind: &str) -> Vec<ShareEvent> {
        self.events()
            .into_iter()
            .filter(|e| e.event == kind)
            .collect()
    }

    /// Waits until `done` holds for the events so far; panics after `timeout`, or when the peer's
    /// output ended first, with its events and the tail of its log.
    pub fn wait_for(&self, what: &str, timeout: Duration, done: impl Fn(&[ShareEvent]) -> bool) {
        let deadline = Instant::now() + timeout;
        let (lock, cond) = &*self.shared;
        let mut s = lock.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if done(&s.events) {
                return;
            }
            let now = Instant::now();
            if s.eof || now >= deadline {
                let why = if s.eof {
                    "its output ended"
                } else {
                    "timed out"
                };
                let summary = self.describe(&s);
                drop(s);
                panic!(
                    "share peer {}: {why} waiting for {what}\n{summary}",
                    self.name
                );
            }
            s = cond
                .wait_timeout(s, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Closes the member gracefully ("close" on stdin) and returns every event; panics unless
    /// it printed `closed` and exited 0 within the bound.
    pub fn close(mut self) -> Vec<ShareEvent> {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = writeln!(stdin, "close");
        }
        self.wait_for("closed", CLOSE_TIMEOUT, |events| {
            events.iter().any(|e| e.event == "closed")
        });
        let exited = wait_exit(&mut self.child, CLOSE_TIMEOUT);
        let status = self.child.try_wait().ok().flatten();
        assert!(
            exited && status.is_some_and(|s| s.success()),
            "share peer {} did not exit 0 after closing: {status:?}",
            self.name
        );
        self.join_reader();
        self.events()
    }

    /// Kills the member (SIGKILL, by its PID) with whatever locks it holds, and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.join_reader();
    }

    fn describe(&self, s: &State) -> String {
        let mut out = format!("--- {} events of {} ---\n", s.events.len(), self.name);
        for e in s.events.iter().rev().take(40).rev() {
            out.push_str(&format!("  {}\n", e.json));
        }
        for bad in &s.bad_lines {
            out.push_str(&format!("  unparsed line {bad}\n"));
        }
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let tail = &text[text.len().saturating_sub(4000)..];
        out.push_str(&format!("--- log {} ---\n{tail}", self.log.display()));
        out
    }

    fn join_reader(&mut self) {
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

impl Drop for SharePeer {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        self.join_reader();
        if !thread::panicking() {
            let _ = fs::remove_file(&self.log);
        }
    }
}

/// Sets a share group's configuration (`share.auto.offset.reset=earliest`,
/// `share.record.lock.duration.ms=...`) through `scripts/share_group.py`, which waits until the
/// broker reads the values back; panics when the broker refuses one.
pub fn set_share_group_config(bootstrap: &str, group: &str, settings: &[(&str, &str)]) {
    let mut cmd = Command::new(venv_python());
    cmd.arg(repo_root().join("scripts/share_group.py")).args([
        "set-config",
        "--bootstrap",
        bootstrap,
        "--group",
        group,
    ]);
    for (k, v) in settings {
        cmd.arg(format!("{k}={v}"));
    }
    match run_with_timeout(cmd, Duration::from_secs(60)) {
        Ok((true, _, _)) => {}
        Ok((false, stdout, stderr)) => {
            panic!("share_group.py set-config {group} {settings:?} failed: {stderr}{stdout}")
        }
        Err(e) => panic!("share_group.py set-config {group}: {e}"),
    }
}
