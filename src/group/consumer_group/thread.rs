//! The membership thread under the consumer group protocol (KIP-848, `group.protocol=consumer`):
//! the I/O shell around the sans-I/O [`ConsumerGroupMembership`].
//!
//! It plays the part the heartbeat thread (`heartbeat.rs`) and the rounds (`round.rs`) play under
//! the classic protocol, in the same order a reviewer reads there, and hands its decisions to
//! the poll thread through the same seam (`changes.rs`):
//!
//! 1. **Heartbeat** at the machine's `poll_timeout` on its own client and coordinator connection
//!    (a long Fetch or a handler never delays it), find the coordinator again when the machine
//!    says so, and name the target's topic ids through Metadata (`poll_metadata`).
//! 2. **Decided → fenced**: each `Revoke` is posted as one pending change, its partitions fenced
//!    in the guard at once through the `FenceHook`; each `Assign` is posted the same way; one at
//!    a time, in the machine's order.
//! 3. **Applied** by the poll thread at its next batch boundary (`GroupMember::poll`): a
//!    revocation drains and commits synchronously with the member epoch (OffsetCommit v9+), an
//!    assignment starts its partitions.
//! 4. **Acknowledged**: only once the poll thread applied the revocation does this thread call
//!    `revocation_done`, and only then goes out the heartbeat that gives the partitions up.
//!
//! Losses (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID, a revocation past the rebalance timeout, the
//! session bound passed) fence everything at once through `SessionState::lose` (no commit) and
//! the machine rejoins with epoch 0 (a static member first releases the incarnation the broker
//! may still hold with epoch -2, or Kafka refuses the join). `max.poll.interval.ms` still applies: past it the member
//! leaves (its assignment lost) and joins again at the application's next poll. Closing leaves
//! with epoch -1 (a static member: -2, so its partitions wait for it) after the poll thread
//! revoked and committed everything.

use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::wire::{heartbeat_version, resolve_topic_ids, send_heartbeat};
use super::{ConsumerGroupConfig, ConsumerGroupMembership, Event, MemberState, RevocationId};
use crate::group::error::GroupError;
use crate::group::failover::{bound_membership_client, Failover};
use crate::group::membership::RebalanceEvent;
use crate::group::outcome::LostReason;
use crate::group::requests::MemberIdentity;
use crate::group::session::{Phase, Shared};
use crate::wire::ErrorChain;
use crate::wire::{Client, ClientConfig, KafkaCode, WireError};

/// How long the thread sleeps at most between looks at the session (a closed member, a change
/// applied, a poll past `max.poll.interval.ms`): the condvar wakes it earlier for the first two.
const IDLE: Duration = Duration::from_millis(100);

/// How long a closing member tries to send its leave heartbeat: past it (the coordinator cannot
/// be found or does not answer) the thread exits, and the broker expires the member by its
/// session instead. Two round trips of the heartbeat client's request timeout.
const LEAVE_BOUND: Duration = Duration::from_secs(10);

/// Starts the membership thread of a consumer-protocol member.
pub(crate) fn spawn(
    shared: Arc<Shared>,
    client_config: ClientConfig,
    config: ConsumerGroupConfig,
) -> std::io::Result<JoinHandle<()>> {
    thread::Builder::new()
        .name(format!("membership-{}", config.group_id))
        .spawn(move || {
            let guard = shared.clone();
            guard.run_membership_thread(|| Driver::new(shared, client_config, config).run())
        })
}

struct Driver {
    shared: Arc<Shared>,
    client_config: ClientConfig,
    client: Option<Client>,
    machine: ConsumerGroupMembership,
    group_id: String,
    /// Decided changes not posted yet: the seam holds one at a time.
    queue: std::collections::VecDeque<(RebalanceEvent, Option<u64>)>,
    /// The machine was told to leave: the member was closed, or its poll overran
    /// `max.poll.interval.ms`.
    leaving: bool,
    leave_started: Option<Instant>,
    /// The coordinator cannot be reached: no look-up before this.
    connect_retry: Option<Instant>,
    /// A coordinator outage under way, and the pacing of the look-ups until it ends.
    failover: Failover,
    /// The node the last heartbeat went to (None: no coordinator was found for it).
    coordinator: Option<i32>,
}

impl Driver {
    fn new(shared: Arc<Shared>, client_config: ClientConfig, config: ConsumerGroupConfig) -> Self {
        let mut client_config = client_config;
        // A heartbeat stuck for seconds is as good as none: bound each round trip as the classic
        // heartbeat thread does (the broker's heartbeat interval is not known before the join).
        client_config.connection.request_timeout = client_config
            .connection
            .request_timeout
            .min(Duration::from_secs(5));
        client_config.max_retries = 1;
        bound_membership_client(&mut client_config);
        let failover = Failover::new(&config.group_id, client_config.retry_backoff);
        let mut config = config;
        // The machine's retries after a failed heartbeat (transport error, the coordinator
        // loading the group) are coordinator conditions too: paced like the look-ups, so the
        // first heartbeat to a coordinator that has just taken the group over is not held back
        // by a backoff that grew while the old one was gone.
        config.retry_backoff_max = config
            .retry_backoff_max
            .min(client_config.retry_backoff_max)
            .max(config.retry_backoff.min(client_config.retry_backoff_max));
        Driver {
            shared,
            client_config,
            client: None,
            group_id: config.group_id.clone(),
            machine: ConsumerGroupMembership::new(config),
            queue: Default::default(),
            leaving: false,
            leave_started: None,
            connect_retry: None,
            failover,
            coordinator: None,
        }
    }

    fn identity(&self) -> Option<MemberIdentity> {
        self.machine.commit_epoch().map(|epoch| MemberIdentity {
            generation_id: epoch,
            member_id: self.machine.member_id().to_string(),
        })
    }

    fn run(mut self) {
        loop {
            self.shared.panic_if_requested();
            let now = Instant::now();
            if !self.look_at_the_session(now) {
                return;
            }
            self.machine.handle_timeout(now);
            self.take_events();
            self.sync_session();
            if self.leaving
                && matches!(
                    self.machine.state(),
                    MemberState::Left | MemberState::Stale | MemberState::Fatal
                )
            {
                log::debug!("membership thread for {} exits", self.group_id);
                return;
            }
            if self
                .leave_started
                .is_some_and(|at| now.saturating_duration_since(at) > LEAVE_BOUND)
            {
                log::warn!(
                    "group {}: the leave heartbeat could not be sent within {LEAVE_BOUND:?}; the \
                     broker expires the member by its session",
                    self.group_id
                );
                return;
            }
            self.io(now);
            self.take_events();
            self.sync_session();
            self.wait();
        }
    }

    /// Reads what the poll thread did: closed (leave), revocations applied (acknowledge), a poll
    /// past `max.poll.interval.ms` (leave, lost), polling again after that (rejoin). False when
    /// the thread should exit at once (closed before ever joining).
    fn look_at_the_session(&mut self, now: Instant) -> bool {
        let mut state = self.shared.lock();
        if state.phase() == Phase::Closed && !self.leaving {
            self.leaving = true;
            self.leave_started = Some(now);
            self.queue.clear();
            drop(state);
            self.machine.leave(now);
            // The poll thread revoked and committed everything the session owned before it
            // closed it, a revocation still waiting for its acknowledgement included (closing
            // dropped the pending change without applying it): acknowledged here, or the machine
            // would wait for it and never send the leave heartbeat.
            if let Some(id) = self.machine.pending_revocation() {
                self.machine.revocation_done(now, id);
            }
            return true;
        }
        if !state.polling(true) {
            return true;
        }
        let acknowledged = state.take_acknowledged();
        let overdue = state.poll_overdue(now);
        let polling = state.polling(false);
        drop(state);
        for id in acknowledged {
            self.machine.revocation_done(now, RevocationId(id));
        }
        if overdue && !self.leaving {
            log::warn!(
                "no poll for more than max.poll.interval.ms: the assignment is fenced and the \
                 member leaves group {}; the handler is too slow for its batch",
                self.group_id
            );
            self.machine.poll_timed_out();
        }
        if polling && self.machine.state() == MemberState::Stale {
            self.machine.rejoin();
        }
        true
    }

    /// Moves the machine's events into the queue (losses and failures act at once).
    fn take_events(&mut self) {
        while let Some(event) = self.machine.poll_event() {
            match event {
                Event::Revoke { id, partitions, .. } => {
                    if self.leaving {
                        // Closing: the poll thread revoked and committed everything before it
                        // closed the session; the machine only needs to hear it is done.
                        self.machine.revocation_done(Instant::now(), id);
                    } else {
                        self.queue
                            .push_back((RebalanceEvent::Revoke(partitions), Some(id.0)));
                    }
                }
                Event::Assign { partitions, .. } => {
                    if !self.leaving {
                        self.queue
                            .push_back((RebalanceEvent::Assign(partitions), None));
                    }
                }
                Event::Lost { partitions, cause } => {
                    log::warn!(
                        "group {}: {} partition(s) lost ({cause:?})",
                        self.group_id,
                        partitions.len()
                    );
                    self.queue.clear();
                    self.shared.lock().lose(cause, false);
                    self.shared.wake.notify_all();
                }
                Event::Fatal(fatal) => {
                    log::error!("group {}: {fatal}", self.group_id);
                    self.queue.clear();
                    self.shared
                        .lock()
                        .lose(LostReason::Fenced(fatal.code), false);
                    self.shared.set_failure(GroupError::Fatal(fatal));
                }
                Event::Left => {}
            }
        }
    }

    /// Mirrors the machine into the session: its epoch (while nothing is pending), the next
    /// queued change, or that it is out of the group.
    fn sync_session(&mut self) {
        let identity = self.identity();
        let mut state = self.shared.lock();
        let Some(identity) = identity else {
            if !self.leaving {
                state.out_of_group("the consumer group member is joining");
            }
            return;
        };
        if !state.member_epoch_is(&identity) {
            return;
        }
        if let Some((event, ack)) = self.queue.front().cloned() {
            if state.post_change(&identity, event, ack) {
                self.queue.pop_front();
                drop(state);
                self.shared.wake.notify_all();
            }
        }
    }

    /// Finds the coordinator, names topic ids, and sends the heartbeat that is due, if any.
    fn io(&mut self, now: Instant) {
        if self.machine.needs_coordinator() {
            if self.connect_retry.is_some_and(|at| now < at) {
                return;
            }
            match self.find_coordinator() {
                Ok(version) => {
                    self.machine.coordinator_found(version);
                    self.connect_retry = None;
                }
                Err(error) => {
                    // One line per outage, not one per look-up: the look-ups are fast.
                    if self.failover.in_outage() {
                        log::debug!(
                            "group {}: cannot reach the coordinator: {}",
                            self.group_id,
                            ErrorChain(&error)
                        );
                    } else {
                        log::warn!(
                            "group {}: cannot reach the coordinator: {}",
                            self.group_id,
                            ErrorChain(&error)
                        );
                    }
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
                Err(error) => log::debug!(
                    "group {}: metadata for topic ids {ids:?} failed: {}",
                    self.group_id,
                    ErrorChain(&error)
                ),
            }
        }
        let Some(request) = self.machine.poll_transmit(now) else {
            return;
        };
        match self.with_coordinator(|conn| send_heartbeat(conn, &request)) {
            Ok((_, answer)) => {
                let code = answer.error;
                if code != KafkaCode::NONE {
                    log::debug!(
                        "group {}: heartbeat answered {}",
                        self.group_id,
                        code.name()
                    );
                }
                if code == KafkaCode::NONE {
                    self.failover.accepted(Instant::now(), self.coordinator);
                } else if matches!(
                    code,
                    KafkaCode::NOT_COORDINATOR | KafkaCode::COORDINATOR_NOT_AVAILABLE
                ) {
                    // The machine wants the coordinator looked up again: paced, or a broker
                    // whose metadata still names the old coordinator would be asked in a loop.
                    let delay = self.failover.lost(now, self.coordinator);
                    self.connect_retry = Some(Instant::now() + delay);
                } else if code == KafkaCode::COORDINATOR_LOAD_IN_PROGRESS {
                    // The machine retries after its (capped) backoff; this starts the outage's
                    // clock.
                    self.failover.lost(now, self.coordinator);
                }
                self.machine.on_response(Instant::now(), answer);
                if let Some((at, bound)) = self.machine.session_renewal() {
                    if at >= now {
                        self.shared.lock().renew_bound(at, bound);
                    }
                }
                if self.machine.needs_coordinator() {
                    self.forget_coordinator();
                }
            }
            Err(error) => {
                if self.failover.in_outage() {
                    log::debug!(
                        "group {}: heartbeat failed: {}",
                        self.group_id,
                        ErrorChain(&error)
                    );
                } else {
                    log::warn!(
                        "group {}: heartbeat failed: {}",
                        self.group_id,
                        ErrorChain(&error)
                    );
                }
                self.failover.lost(now, self.coordinator);
                self.forget_coordinator();
                self.machine.on_transport_error(Instant::now());
            }
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
        op: impl FnOnce(&mut crate::wire::Connection) -> Result<T, WireError>,
    ) -> Result<T, WireError> {
        let group = self.group_id.clone();
        self.coordinator = None;
        let node = self.client()?.find_coordinator(&group)?.node_id;
        self.coordinator = Some(node);
        op(self.client()?.connection(node)?)
    }

    fn find_coordinator(&mut self) -> Result<i16, WireError> {
        self.with_coordinator(|conn| heartbeat_version(conn))
    }

    fn forget_coordinator(&mut self) {
        let group = self.group_id.clone();
        if let Some(client) = self.client.as_mut() {
            client.invalidate_coordinator(&group);
        }
    }

    /// Sleeps until the machine has something to do, the poll thread woke us, or [`IDLE`].
    fn wait(&mut self) {
        let now = Instant::now();
        let until = self
            .machine
            .poll_timeout()
            .map_or(now + IDLE, |t| t.min(now + IDLE));
        if until <= now {
            return;
        }
        let state = self.shared.lock();
        if state.phase() == Phase::Closed && !self.leaving {
            return;
        }
        drop(self.shared.wait(state, until - now));
    }
}
