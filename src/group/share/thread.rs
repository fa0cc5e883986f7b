//! The heartbeat thread of a share-group member: the I/O shell around
//! [`ShareGroupMachine`]. It finds the coordinator (FindCoordinator, key type 0: the group),
//! sends the heartbeat the machine asks for on its own client, names topic ids through
//! Metadata, and publishes what changed into the [`Shared`] state that
//! [`ShareMembership`](super::ShareMembership) reads.
//!
//! Coordinator outages are paced the way the consumer group member's are (`group/failover.rs`:
//! short, capped retries of the look-up, bounded connects, one warning per outage and one info
//! line with its length when a heartbeat is accepted again).

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::machine::{ShareAssignment, ShareGroupMachine, ShareState};
use super::wire::{send_share_heartbeat, share_heartbeat_unsupported, share_heartbeat_version};
use crate::group::consumer_group::wire::resolve_topic_ids;
use crate::group::failover::{bound_membership_client, Failover};
use crate::group::outcome::FatalError;
use crate::wire::{Client, ClientConfig, Connection, ErrorChain, KafkaCode, Nudge, WireError};

/// The longest the thread sleeps between looks at the shared state (a stop, new topics).
const IDLE: Duration = Duration::from_millis(100);

/// How the caller wants the thread to end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    /// Keep going.
    No,
    /// Send the leave heartbeat (epoch -1), for at most until this instant.
    Leave(Instant),
    /// Stop without a word to the broker (as a crashed process would).
    Abandon,
}

/// What the thread publishes and the caller asks, under one lock.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) assignment: ShareAssignment,
    pub(crate) fatal: Option<FatalError>,
    /// The first heartbeat was answered.
    pub(crate) joined: bool,
    /// A new subscription, not yet taken by the thread.
    pub(crate) topics: Option<Vec<String>>,
    pub(crate) stop: Stop,
    /// Send nothing before this (a test's stand-in for a stalled process).
    pub(crate) paused_until: Option<Instant>,
    /// The leave heartbeat was answered.
    pub(crate) left: bool,
    /// The thread ended; with the panic's message if it died.
    pub(crate) exited: bool,
    pub(crate) died: Option<String>,
}

/// The state shared between the heartbeat thread and the caller's threads.
#[derive(Debug)]
pub(crate) struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

impl Shared {
    pub(crate) fn new() -> Self {
        Shared {
            state: Mutex::new(State {
                assignment: ShareAssignment::default(),
                fatal: None,
                joined: false,
                topics: None,
                stop: Stop::No,
                paused_until: None,
                left: false,
                exited: false,
                died: None,
            }),
            changed: Condvar::new(),
        }
    }

    /// The state; a poisoned lock (a panic while held) is taken over, since every field stays
    /// meaningful on its own.
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for a change at most `timeout`.
    pub(crate) fn wait<'a>(
        &self,
        guard: MutexGuard<'a, State>,
        timeout: Duration,
    ) -> MutexGuard<'a, State> {
        match self.changed.wait_timeout(guard, timeout) {
            Ok((g, _)) => g,
            Err(e) => e.into_inner().0,
        }
    }

    pub(crate) fn notify(&self) {
        self.changed.notify_all();
    }
}

/// Marks the thread's end in the shared state, a panic included.
struct ExitMark(Arc<Shared>);

impl Drop for ExitMark {
    fn drop(&mut self) {
        let mut s = self.0.lock();
        s.exited = true;
        if thread::panicking() {
            s.died = Some("the share heartbeat thread panicked".to_string());
        }
        drop(s);
        self.0.notify();
    }
}

/// Starts the heartbeat thread.
pub(crate) fn spawn(
    shared: Arc<Shared>,
    client_config: ClientConfig,
    machine: ShareGroupMachine,
    group_id: String,
    on_change: Option<Nudge>,
) -> std::io::Result<JoinHandle<()>> {
    thread::Builder::new()
        .name(format!("share-heartbeat-{group_id}"))
        .spawn(move || {
            let _mark = ExitMark(shared.clone());
            Driver::new(shared, client_config, machine, group_id, on_change).run();
        })
}

struct Driver {
    shared: Arc<Shared>,
    machine: ShareGroupMachine,
    group_id: String,
    client_config: ClientConfig,
    client: Option<Client>,
    connect_retry: Option<Instant>,
    failover: Failover,
    coordinator: Option<i32>,
    on_change: Option<Nudge>,
    leave_until: Option<Instant>,
}

impl Driver {
    fn new(
        shared: Arc<Shared>,
        client_config: ClientConfig,
        machine: ShareGroupMachine,
        group_id: String,
        on_change: Option<Nudge>,
    ) -> Self {
        let mut client_config = client_config;
        client_config.max_retries = 1;
        bound_membership_client(&mut client_config);
        let failover = Failover::new(&group_id, client_config.retry_backoff);
        Driver {
            shared,
            machine,
            group_id,
            client_config,
            client: None,
            connect_retry: None,
            failover,
            coordinator: None,
            on_change,
            leave_until: None,
        }
    }

    fn run(mut self) {
        loop {
            let now = Instant::now();
            let paused;
            {
                let mut s = self.shared.lock();
                match s.stop {
                    Stop::Abandon => return,
                    Stop::Leave(until) if self.leave_until.is_none() => {
                        self.leave_until = Some(until);
                        self.machine.leave();
                    }
                    _ => {}
                }
                if let Some(topics) = s.topics.take() {
                    self.machine.set_topics(topics);
                }
                paused = s.paused_until.is_some_and(|until| now < until);
            }
            if self.leave_until.is_some_and(|until| now >= until) {
                log::warn!(
                    "share group {}: the leave heartbeat was not answered in time; the broker \
                     removes member {} after its session timeout",
                    self.group_id,
                    self.machine.member_id()
                );
                self.machine.give_up_leaving();
            }
            if !paused && !matches!(self.machine.state(), ShareState::Left | ShareState::Fatal) {
                self.io(now);
            }
            self.publish();
            if matches!(self.machine.state(), ShareState::Left | ShareState::Fatal) {
                return;
            }
            self.wait();
        }
    }

    /// Hands what changed to the shared state, and wakes whoever waits.
    fn publish(&mut self) {
        let change = self.machine.take_assignment_change();
        let mut s = self.shared.lock();
        let mut news = false;
        if let Some(a) = change {
            log::info!(
                "share group {}: member {} assigned {} partition(s) at epoch {}",
                self.group_id,
                self.machine.member_id(),
                a.partitions.len(),
                a.epoch
            );
            s.assignment = a;
            news = true;
        }
        if !s.joined && self.machine.has_joined() {
            s.joined = true;
            news = true;
        }
        if s.fatal.is_none() {
            if let Some(f) = self.machine.fatal() {
                s.fatal = Some(f.clone());
                news = true;
            }
        }
        if self.machine.state() == ShareState::Left && self.leave_until.is_some() && !s.left {
            s.left = self.machine.fatal().is_none() && self.left_answered();
            news = true;
        }
        drop(s);
        if news {
            self.shared.notify();
            if let Some(nudge) = &self.on_change {
                nudge();
            }
        }
    }

    /// Whether the leave ended with an answer (not by giving up at the deadline).
    fn left_answered(&self) -> bool {
        self.leave_until.is_some_and(|until| Instant::now() < until)
    }

    fn io(&mut self, now: Instant) {
        if self.machine.needs_coordinator() {
            if self.connect_retry.is_some_and(|at| now < at) {
                return;
            }
            match self.with_coordinator(|conn| share_heartbeat_version(conn)) {
                Ok(_) => {
                    self.machine.coordinator_found();
                    self.connect_retry = None;
                }
                Err(error) if share_heartbeat_unsupported(&error) => {
                    self.machine.on_unsupported(&ErrorChain(&error).to_string());
                    return;
                }
                Err(error) => {
                    self.outage_line("cannot reach the coordinator", &error);
                    self.forget_coordinator();
                    self.connect_retry = Some(now + self.failover.lost(now, self.coordinator));
                    return;
                }
            }
        }
        if let Some(ids) = self.machine.poll_metadata(now) {
            match self.with_coordinator(|conn| resolve_topic_ids(conn, &ids)) {
                Ok(named) => self
                    .machine
                    .on_metadata(now, named.iter().map(|(id, name)| (*id, name.as_str()))),
                Err(error) => {
                    log::debug!(
                        "share group {}: metadata for topic ids {ids:?} failed: {}",
                        self.group_id,
                        ErrorChain(&error)
                    );
                    self.machine.on_metadata(now, std::iter::empty());
                }
            }
        }
        let Some(hb) = self.machine.poll_transmit(now) else {
            return;
        };
        match self.with_coordinator(|conn| send_share_heartbeat(conn, &hb)) {
            Ok(answer) => {
                let code = answer.error;
                if code == KafkaCode::NONE {
                    self.failover.accepted(Instant::now(), self.coordinator);
                } else {
                    log::debug!(
                        "share group {}: heartbeat at epoch {} answered {}",
                        self.group_id,
                        hb.member_epoch,
                        code.name()
                    );
                }
                self.machine.on_response(Instant::now(), answer);
                if self.machine.needs_coordinator() {
                    // NOT_COORDINATOR and friends: paced like a lost connection.
                    let delay = self.failover.lost(now, self.coordinator);
                    self.connect_retry = Some(Instant::now() + delay);
                    self.forget_coordinator();
                }
            }
            Err(error) if share_heartbeat_unsupported(&error) => {
                self.machine.on_unsupported(&ErrorChain(&error).to_string());
            }
            Err(error) => {
                self.outage_line("heartbeat failed", &error);
                let delay = self.failover.lost(now, self.coordinator);
                self.connect_retry = Some(Instant::now() + delay);
                self.forget_coordinator();
                // The connection may be half-used: start over with a fresh client.
                self.client = None;
                self.machine.on_transport_error(Instant::now());
            }
        }
    }

    /// One warning per outage, debug lines for the retries inside it.
    fn outage_line(&self, what: &str, error: &WireError) {
        if self.failover.in_outage() {
            log::debug!(
                "share group {}: {what}: {}",
                self.group_id,
                ErrorChain(error)
            );
        } else {
            log::warn!(
                "share group {}: {what}: {}",
                self.group_id,
                ErrorChain(error)
            );
        }
    }

    fn client(&mut self) -> Result<&mut Client, WireError> {
        if self.client.is_none() {
            self.client = Some(Client::connect(self.client_config.clone())?);
        }
        self.client
            .as_mut()
            .ok_or_else(|| WireError::Config("share heartbeat client unavailable".to_string()))
    }

    fn with_coordinator<T>(
        &mut self,
        op: impl FnOnce(&mut Connection) -> Result<T, WireError>,
    ) -> Result<T, WireError> {
        let group = self.group_id.clone();
        self.coordinator = None;
        let node = self.client()?.find_coordinator(&group)?.node_id;
        self.coordinator = Some(node);
        op(self.client()?.connection(node)?)
    }

    fn forget_coordinator(&mut self) {
        let group = self.group_id.clone();
        if let Some(client) = self.client.as_mut() {
            client.invalidate_coordinator(&group);
        }
    }

    /// Sleeps until the machine has something due, the caller changed something, or [`IDLE`].
    fn wait(&self) {
        let now = Instant::now();
        // While the coordinator is lost, the look-up's pacing decides; else the machine's.
        let due = if self.machine.needs_coordinator() {
            self.connect_retry
        } else {
            self.machine.poll_timeout()
        };
        let until = due.map_or(now + IDLE, |t| t.min(now + IDLE));
        if until <= now {
            return;
        }
        let s = self.shared.lock();
        if s.topics.is_some() || (s.stop != Stop::No && self.leave_until.is_none()) {
            return;
        }
        drop(self.shared.wait(s, until - now));
    }
}
