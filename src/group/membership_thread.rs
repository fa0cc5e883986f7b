//! The membership thread, written once for both heartbeat protocols: the consumer group
//! protocol's (KIP-848, ConsumerGroupHeartbeat, `consumer_group/thread.rs`) and share groups'
//! (KIP-932, ShareGroupHeartbeat, `share/thread.rs`). Each protocol supplies its sans-I/O
//! machine, its two requests and its side of the state it shares with the caller
//! ([`HeartbeatProtocol`]); the loop around them is here.
//!
//! One round of [`run`], read top to bottom:
//! 1. **Look at the caller** ([`HeartbeatProtocol::before_io`]): a close or a stop, what the
//!    poll thread did, time passing; the thread may end here.
//! 2. **Find the coordinator** when the machine needs one, paced by `failover.rs` (short,
//!    capped retries; one warning per outage); a coordinator that does not speak the heartbeat
//!    at all ends the membership (fatal), it is not an outage.
//! 3. **Name topic ids** the machine asks for (Metadata on the coordinator connection,
//!    `ids.rs`).
//! 4. **Send the heartbeat** that is due, and **classify the answer** with the heartbeat error
//!    table (`heartbeat_errors.rs`): a moved coordinator is looked up again at the paced delay,
//!    a coordinator still loading the group starts the outage's clock; the machine decides the
//!    rest. A lost request is an outage too.
//! 5. **Hand the decisions to the caller** ([`HeartbeatProtocol::after_io`]): changes, a fatal
//!    error; the thread may end here (left, fatal).
//! 6. **Wait** until the machine has something due, a paced look-up is due, the caller woke the
//!    thread, or [`IDLE`], whichever comes first.
//!
//! Time is read on the lease clock (`lease_now`), so the instants the machines stamp (a
//! heartbeat's send time, which renews the consumer's session bound) are on the clock the
//! leases read.
//!
//! A dead thread is reported where its caller looks: the consumer's session (its
//! `run_thread`, shared with the classic heartbeat and commit threads) for KIP-848, the share
//! membership's state for share groups (`share/thread.rs`).

use std::time::{Duration, Instant};

use super::failover::{bound_membership_client, Failover};
use super::heartbeat_errors::classify;
use super::ids::{resolve_topic_ids, TopicId};
use super::outcome::{ErrorAction, GroupApi};
use crate::guard::lease_now;
use kafka_protocol::messages::ApiKey;

use crate::wire::{
    Client, ClientConfig, Connection, ErrorChain, KafkaCode, VersionRange, WireError,
};

/// How long the thread sleeps at most between looks at the caller (a close, a stop, new
/// topics, a poll past `max.poll.interval.ms`): the caller's condvar wakes it earlier.
pub(crate) const IDLE: Duration = Duration::from_millis(100);

/// How a protocol's thread treats a heartbeat request lost on the connection (a timeout, a
/// closed socket). The one place the two protocols' threads differ, kept as each was built
/// and tested: both count it as an outage and look the coordinator up again.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AfterTransportError {
    /// Wait the outage's paced delay before the look-up (else the next round looks it up).
    pub(crate) pace_lookup: bool,
    /// Start over on a fresh client: the connection may be half-used.
    pub(crate) fresh_client: bool,
}

/// What a round does after looking at the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Round {
    /// The coordinator look-up, the metadata and the heartbeat, as due.
    Io,
    /// No requests this round (paused by a test, or the machine is done).
    Idle,
    /// The thread ends now.
    Exit,
}

/// What a heartbeat protocol supplies to the membership thread: its machine's inputs and
/// outputs (all sans-I/O, time passed in), its requests on a coordinator connection, and its
/// side of the state shared with the caller.
pub(crate) trait HeartbeatProtocol {
    /// The heartbeat the machine asks to send, free of the wire encoding.
    type Request;
    /// The broker's answer in the machine's form.
    type Answer;
    /// The heartbeat request: the error table's column, and the log lines.
    const API: GroupApi;
    /// The heartbeat request's API key, and the versions of it this crate speaks.
    const API_KEY: ApiKey;
    /// See [`Self::API_KEY`].
    const VERSIONS: VersionRange;
    /// What a lost heartbeat request does besides the outage (see [`AfterTransportError`]).
    const AFTER_TRANSPORT_ERROR: AfterTransportError;

    /// The group's id (the coordinator's key).
    fn group_id(&self) -> &str;

    /// Step 1: reads what the caller asked and applies time. What the round does next.
    fn before_io(&mut self, now: Instant) -> Round;
    /// Step 5: hands what the machine decided to the caller. True when the thread ends.
    fn after_io(&mut self, now: Instant) -> bool;
    /// Step 6: waits at most `timeout` for the caller to change something, unless it already
    /// has.
    fn wait(&self, timeout: Duration);

    /// The machine needs a coordinator looked up before it can send.
    fn needs_coordinator(&self) -> bool;
    /// A coordinator speaks the heartbeat at `version`.
    fn coordinator_found(&mut self, version: i16);
    /// The coordinator does not speak the heartbeat at all (`detail` says why): fatal.
    fn on_unsupported(&mut self, detail: &str);
    /// The topic ids to name now, if any.
    fn poll_metadata(&mut self, now: Instant) -> Option<Vec<TopicId>>;
    /// Names for the ids asked for; `None` when the look-up failed.
    fn on_metadata(&mut self, now: Instant, named: Option<&[(TopicId, String)]>);
    /// The heartbeat to send now, if one is due.
    fn poll_transmit(&mut self, now: Instant) -> Option<Self::Request>;
    /// The answer to the heartbeat of the round that began at `round` (no later than the
    /// request was sent).
    fn on_response(&mut self, round: Instant, answer: Self::Answer);
    /// The heartbeat request was lost on the connection.
    fn on_transport_error(&mut self, now: Instant);
    /// When the machine next has something to do, a coordinator look-up aside.
    fn wake_at(&self) -> Option<Instant>;

    /// Sends `request` on `conn` and returns the answer.
    fn send(conn: &mut Connection, request: &Self::Request) -> Result<Self::Answer, WireError>;
    /// The answer's error code.
    fn code(answer: &Self::Answer) -> KafkaCode;
}

/// The settings a membership thread's own client runs with: one attempt per request (the
/// machine and the failover pacing retry), and bounded connects and backoffs
/// (`failover.rs`).
pub(crate) fn membership_client(mut config: ClientConfig) -> ClientConfig {
    config.max_retries = 1;
    bound_membership_client(&mut config);
    config
}

/// Runs the membership thread of `protocol` on a client of its own built from `client_config`
/// (see [`membership_client`]) until the protocol ends it.
pub(crate) fn run<P: HeartbeatProtocol>(protocol: P, client_config: ClientConfig) {
    let client_config = membership_client(client_config);
    let failover = Failover::new(protocol.group_id(), client_config.retry_backoff);
    let mut shell = Shell {
        protocol,
        client_config,
        client: None,
        connect_retry: None,
        failover,
        coordinator: None,
    };
    loop {
        let now = lease_now();
        match shell.protocol.before_io(now) {
            Round::Exit => return,
            Round::Io => shell.io(now),
            Round::Idle => {}
        }
        if shell.protocol.after_io(now) {
            return;
        }
        shell.wait();
    }
}

/// The thread's I/O state around the protocol.
struct Shell<P> {
    protocol: P,
    client_config: ClientConfig,
    client: Option<Client>,
    /// The coordinator cannot be reached: no look-up before this.
    connect_retry: Option<Instant>,
    /// A coordinator outage under way, and the pacing of the look-ups until it ends.
    failover: Failover,
    /// The node the last request went to (None: no coordinator was found for it).
    coordinator: Option<i32>,
}

impl<P: HeartbeatProtocol> Shell<P> {
    /// Steps 2 to 4: finds the coordinator, names topic ids, and sends the heartbeat that is
    /// due, if any.
    fn io(&mut self, now: Instant) {
        if self.protocol.needs_coordinator() {
            if self.connect_retry.is_some_and(|at| now < at) {
                return;
            }
            match self.with_coordinator(|conn| conn.version_within(P::API_KEY, P::VERSIONS)) {
                Ok(version) => {
                    self.protocol.coordinator_found(version);
                    self.connect_retry = None;
                }
                Err(error) if unsupported::<P>(&error) => {
                    // Not an outage: this coordinator will never take the heartbeat.
                    self.protocol
                        .on_unsupported(&ErrorChain(&error).to_string());
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
        if let Some(ids) = self.protocol.poll_metadata(now) {
            match self.with_coordinator(|conn| resolve_topic_ids(conn, &ids)) {
                Ok(named) => self.protocol.on_metadata(now, Some(&named)),
                Err(error) => {
                    log::debug!(
                        "{} {}: metadata for topic ids {ids:?} failed: {}",
                        label(P::API),
                        self.protocol.group_id(),
                        ErrorChain(&error)
                    );
                    self.protocol.on_metadata(now, None);
                }
            }
        }
        let Some(request) = self.protocol.poll_transmit(now) else {
            return;
        };
        match self.with_coordinator(|conn| P::send(conn, &request)) {
            Ok(answer) => {
                self.pace(now, P::code(&answer));
                self.protocol.on_response(now, answer);
                if self.protocol.needs_coordinator() {
                    self.forget_coordinator();
                }
            }
            Err(error) if unsupported::<P>(&error) => {
                self.protocol
                    .on_unsupported(&ErrorChain(&error).to_string());
            }
            Err(error) => {
                self.outage_line("heartbeat failed", &error);
                let delay = self.failover.lost(now, self.coordinator);
                if P::AFTER_TRANSPORT_ERROR.pace_lookup {
                    self.connect_retry = Some(lease_now() + delay);
                }
                self.forget_coordinator();
                if P::AFTER_TRANSPORT_ERROR.fresh_client {
                    self.client = None;
                }
                self.protocol.on_transport_error(lease_now());
            }
        }
    }

    /// What an answer's code means for the outage: accepted ends it; a moved or unavailable
    /// coordinator is looked up again at the paced delay (or a broker whose metadata still
    /// names the old coordinator would be asked in a loop); a coordinator still loading the
    /// group, where the table says to retry it, starts the outage's clock (the machine retries
    /// after its capped backoff).
    fn pace(&mut self, now: Instant, code: KafkaCode) {
        if code == KafkaCode::NONE {
            self.failover.accepted(lease_now(), self.coordinator);
            return;
        }
        log::debug!(
            "{} {}: heartbeat answered {}",
            label(P::API),
            self.protocol.group_id(),
            code.name()
        );
        match classify(P::API, code, None) {
            ErrorAction::RediscoverCoordinator => {
                let delay = self.failover.lost(now, self.coordinator);
                self.connect_retry = Some(lease_now() + delay);
            }
            ErrorAction::Retry if code == KafkaCode::COORDINATOR_LOAD_IN_PROGRESS => {
                self.failover.lost(now, self.coordinator);
            }
            _ => {}
        }
    }

    /// One warning per outage, debug lines for the retries inside it (the look-ups are fast).
    fn outage_line(&self, what: &str, error: &WireError) {
        let group = self.protocol.group_id();
        if self.failover.in_outage() {
            log::debug!("{} {group}: {what}: {}", label(P::API), ErrorChain(error));
        } else {
            log::warn!("{} {group}: {what}: {}", label(P::API), ErrorChain(error));
        }
    }

    fn client(&mut self) -> Result<&mut Client, WireError> {
        if self.client.is_none() {
            self.client = Some(Client::connect(self.client_config.clone())?);
        }
        self.client
            .as_mut()
            .ok_or_else(|| WireError::Config("membership client unavailable".to_string()))
    }

    fn with_coordinator<T>(
        &mut self,
        op: impl FnOnce(&mut Connection) -> Result<T, WireError>,
    ) -> Result<T, WireError> {
        let group = self.protocol.group_id().to_string();
        self.coordinator = None;
        let node = self.client()?.find_coordinator(&group)?.node_id;
        self.coordinator = Some(node);
        op(self.client()?.connection(node)?)
    }

    fn forget_coordinator(&mut self) {
        let group = self.protocol.group_id().to_string();
        if let Some(client) = self.client.as_mut() {
            client.invalidate_coordinator(&group);
        }
    }

    /// Step 6: sleeps until the machine has something due, a paced look-up is due, the caller
    /// woke the thread, or [`IDLE`].
    fn wait(&self) {
        let now = lease_now();
        let lookup = self
            .connect_retry
            .filter(|_| self.protocol.needs_coordinator());
        let due = [self.protocol.wake_at(), lookup]
            .into_iter()
            .flatten()
            .min();
        let until = due.map_or(now + IDLE, |t| t.min(now + IDLE));
        if until <= now {
            return;
        }
        self.protocol.wait(until - now);
    }
}

/// Whether `error` says the coordinator speaks no version of `P`'s heartbeat (a broker too old,
/// or the group type switched off, does not advertise the API at all): no retry can make it
/// appear.
fn unsupported<P: HeartbeatProtocol>(error: &WireError) -> bool {
    matches!(error, WireError::UnsupportedVersion { api, .. } if *api == P::API_KEY as i16)
}

/// How the log lines name the group.
fn label(api: GroupApi) -> &'static str {
    match api {
        GroupApi::ShareGroupHeartbeat => "share group",
        _ => "group",
    }
}
