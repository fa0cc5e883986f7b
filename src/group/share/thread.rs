//! The heartbeat thread of a share-group member: [`ShareGroupMachine`] run by the
//! membership-thread shell both heartbeat protocols share (`group/membership_thread.rs`: the
//! loop, the coordinator look-ups and their pacing, as the consumer group member's, the
//! heartbeat and its answer, the wait). This file is what share groups supply to it: the
//! [`Shared`] state that [`ShareMembership`](super::ShareMembership) reads (the assignment, a
//! fatal error, a dead thread) and asks through (a stop, new topics), and the machine's side of
//! each step.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::machine::{
    ShareAssignment, ShareGroupMachine, ShareHeartbeat, ShareHeartbeatAnswer, ShareState,
};
use super::wire::{send_share_heartbeat, SHARE_HEARTBEAT_VERSIONS};
use crate::group::ids::TopicId;
use crate::group::membership_thread::{run, AfterTransportError, HeartbeatProtocol, Round};
use crate::group::outcome::{FatalError, GroupApi};
use crate::guard::{lease_now, SessionBound};
use kafka_protocol::messages::ApiKey;

use crate::wire::{ClientConfig, Connection, KafkaCode, Nudge, VersionRange, WireError};

/// How the caller wants the thread to end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    /// Keep going.
    No,
    /// Send the leave heartbeat (epoch -1), for at most until this instant (on the lease
    /// clock, `lease_now`, which the thread reads).
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
    /// Send nothing before this, on the lease clock (a test's stand-in for a stalled process).
    pub(crate) paused_until: Option<Instant>,
    /// The leave heartbeat was answered.
    pub(crate) left: bool,
    /// The thread ended; with the panic's message if it died.
    pub(crate) exited: bool,
    pub(crate) died: Option<String>,
    /// The session bound the share consumer's leases read, once it handed it over
    /// ([`ShareMembership::bound_session`](super::ShareMembership::bound_session)).
    pub(crate) bound: Option<Arc<SessionBound>>,
    /// The latest renewal (an answered heartbeat's send time and how long it holds), kept so
    /// that a bound handed over after the join starts from it.
    pub(crate) renewal: Option<(Instant, Duration)>,
}

impl State {
    /// An answered heartbeat sent at `sent` renews the session for `holds`: kept, and applied
    /// to the bound if one was handed over.
    pub(crate) fn renew_bound(&mut self, sent: Instant, holds: Duration) {
        if self.renewal.is_none_or(|(at, _)| at <= sent) {
            self.renewal = Some((sent, holds));
        }
        if let Some(bound) = &self.bound {
            bound.renew(sent, holds);
        }
    }
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
                bound: None,
                renewal: None,
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
            let protocol = Share {
                shared,
                machine,
                group_id,
                on_change,
                leave_until: None,
            };
            run(protocol, client_config);
        })
}

/// Share groups as the membership-thread shell runs them: the machine, and the state shared
/// with the caller.
struct Share {
    shared: Arc<Shared>,
    machine: ShareGroupMachine,
    group_id: String,
    on_change: Option<Nudge>,
    /// The leave was asked for, to be answered by this instant.
    leave_until: Option<Instant>,
}

impl Share {
    /// Whether the machine is done (left, or failed for good).
    fn is_over(&self) -> bool {
        matches!(self.machine.state(), ShareState::Left | ShareState::Fatal)
    }

    /// Whether the leave ended with an answer (not by giving up at the deadline).
    fn left_answered(&self) -> bool {
        self.leave_until.is_some_and(|until| lease_now() < until)
    }
}

impl HeartbeatProtocol for Share {
    type Request = ShareHeartbeat;
    type Answer = ShareHeartbeatAnswer;
    const API: GroupApi = GroupApi::ShareGroupHeartbeat;
    const API_KEY: ApiKey = ApiKey::ShareGroupHeartbeat;
    const VERSIONS: VersionRange = SHARE_HEARTBEAT_VERSIONS;
    const AFTER_TRANSPORT_ERROR: AfterTransportError = AfterTransportError {
        pace_lookup: true,
        fresh_client: true,
    };

    fn group_id(&self) -> &str {
        &self.group_id
    }

    /// Takes a stop (abandon: at once; leave: start the leave heartbeat) and new topics; gives
    /// up a leave past its deadline. No requests while paused or once the machine is done.
    fn before_io(&mut self, now: Instant) -> Round {
        let paused;
        {
            let mut s = self.shared.lock();
            match s.stop {
                Stop::Abandon => return Round::Exit,
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
        if paused || self.is_over() {
            Round::Idle
        } else {
            Round::Io
        }
    }

    /// Hands what changed to the shared state and wakes whoever waits; ends the thread once
    /// the machine is done.
    fn after_io(&mut self, _now: Instant) -> bool {
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
        self.is_over()
    }

    fn wait(&self, timeout: Duration) {
        let s = self.shared.lock();
        if s.topics.is_some() || (s.stop != Stop::No && self.leave_until.is_none()) {
            return;
        }
        drop(self.shared.wait(s, timeout));
    }

    fn needs_coordinator(&self) -> bool {
        self.machine.needs_coordinator()
    }

    fn coordinator_found(&mut self, _version: i16) {
        self.machine.coordinator_found();
    }

    fn on_unsupported(&mut self, detail: &str) {
        self.machine.on_unsupported(detail);
    }

    fn poll_metadata(&mut self, now: Instant) -> Option<Vec<TopicId>> {
        self.machine.poll_metadata(now)
    }

    /// A failed look-up counts as one that named nothing: the machine paces its next try.
    fn on_metadata(&mut self, now: Instant, named: Option<&[(TopicId, String)]>) {
        let named = named.unwrap_or_default();
        self.machine
            .on_metadata(now, named.iter().map(|(id, name)| (*id, name.as_str())));
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<ShareHeartbeat> {
        self.machine.poll_transmit(now)
    }

    /// The answer, then the session bound it renews (only a renewal from this round's
    /// heartbeat: an older one was applied when it came).
    fn on_response(&mut self, round: Instant, answer: ShareHeartbeatAnswer) {
        self.machine.on_response(lease_now(), answer);
        if let Some((at, holds)) = self.machine.session_renewal() {
            if at >= round {
                self.shared.lock().renew_bound(at, holds);
            }
        }
    }

    fn on_transport_error(&mut self, now: Instant) {
        self.machine.on_transport_error(now);
    }

    /// While the coordinator is lost, the look-up's pacing decides (the shell's); else the
    /// machine's.
    fn wake_at(&self) -> Option<Instant> {
        if self.machine.needs_coordinator() {
            None
        } else {
            self.machine.poll_timeout()
        }
    }

    fn send(
        conn: &mut Connection,
        request: &ShareHeartbeat,
    ) -> Result<ShareHeartbeatAnswer, WireError> {
        send_share_heartbeat(conn, request)
    }

    fn code(answer: &ShareHeartbeatAnswer) -> KafkaCode {
        answer.error
    }
}
