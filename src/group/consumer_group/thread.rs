//! The membership thread under the consumer group protocol (KIP-848, `group.protocol=consumer`):
//! the I/O shell around the sans-I/O [`ConsumerGroupMembership`].
//!
//! It plays the part the heartbeat thread (`classic/heartbeat.rs`) and the rounds (`classic/round.rs`) play under
//! the classic protocol, in the same order a reviewer reads there, and hands its decisions to
//! the poll thread through the same seam (`changes.rs`):
//!
//! 1. **Heartbeat** at the machine's `poll_timeout` on its own client and coordinator connection
//!    (a long Fetch or a handler never delays it), find the coordinator again when the machine
//!    says so, and name the target's topic ids through Metadata (`poll_metadata`).
//! 2. **Decided → fenced**: each `Revoke` is posted as one pending change, its partitions fenced
//!    in the guard at once through the `FenceHook`; each `Assign` is posted the same way; one at
//!    a time, in the machine's order.
//! 3. **Applied** by the poll thread at its next batch boundary (`Membership::next_change`, applied by the consumer's handoff driver): a
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

use crate::guard::lease_now;

use super::mirror::Mirror;
use super::wire::{heartbeat_unsupported, heartbeat_version, resolve_topic_ids, send_heartbeat};
use super::{ConsumerGroupConfig, ConsumerGroupMembership};
use crate::group::failover::{bound_membership_client, Failover};
use crate::group::session::{GroupThread, Phase, Shared};
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
            guard.run_thread(GroupThread::Membership, || {
                Driver::new(shared, client_config, config).run()
            })
        })
}

struct Driver {
    /// The machine and what it decided, mirrored into the session.
    mirror: Mirror,
    client_config: ClientConfig,
    client: Option<Client>,
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
            mirror: Mirror::new(
                shared,
                config.group_id.clone(),
                ConsumerGroupMembership::new(config),
            ),
            client_config,
            client: None,
            connect_retry: None,
            failover,
            coordinator: None,
        }
    }

    fn run(mut self) {
        loop {
            self.mirror
                .shared
                .panic_if_requested(GroupThread::Membership);
            let now = lease_now();
            if !self.mirror.look_at_the_session(now) {
                return;
            }
            self.mirror.machine.handle_timeout(now);
            self.mirror.take_events();
            self.mirror.check_ownership(now);
            self.mirror.sync_session();
            if self.mirror.done_leaving() {
                log::debug!("membership thread for {} exits", self.mirror.group_id);
                return;
            }
            if self
                .mirror
                .leave_started
                .is_some_and(|at| now.saturating_duration_since(at) > LEAVE_BOUND)
            {
                log::warn!(
                    "group {}: the leave heartbeat could not be sent within {LEAVE_BOUND:?}; the \
                     broker expires the member by its session",
                    self.mirror.group_id
                );
                return;
            }
            self.io(now);
            self.mirror.take_events();
            self.mirror.sync_session();
            self.wait();
        }
    }

    /// Finds the coordinator, names topic ids, and sends the heartbeat that is due, if any.
    fn io(&mut self, now: Instant) {
        if self.mirror.machine.needs_coordinator() {
            if self.connect_retry.is_some_and(|at| now < at) {
                return;
            }
            match self.find_coordinator() {
                Ok(version) => {
                    self.mirror.machine.coordinator_found(version);
                    self.connect_retry = None;
                }
                Err(error) if heartbeat_unsupported(&error) => {
                    // Not an outage: this coordinator will never take the heartbeat.
                    self.mirror
                        .machine
                        .on_unsupported(&ErrorChain(&error).to_string());
                    return;
                }
                Err(error) => {
                    // One line per outage, not one per look-up: the look-ups are fast.
                    if self.failover.in_outage() {
                        log::debug!(
                            "group {}: cannot reach the coordinator: {}",
                            self.mirror.group_id,
                            ErrorChain(&error)
                        );
                    } else {
                        log::warn!(
                            "group {}: cannot reach the coordinator: {}",
                            self.mirror.group_id,
                            ErrorChain(&error)
                        );
                    }
                    self.forget_coordinator();
                    self.connect_retry = Some(now + self.failover.lost(now, self.coordinator));
                    return;
                }
            }
        }
        if let Some(ids) = self.mirror.machine.poll_metadata(now) {
            match self.with_coordinator(|conn| resolve_topic_ids(conn, &ids)) {
                Ok(named) => self
                    .mirror
                    .machine
                    .on_metadata(now, named.iter().map(|(id, name)| (*id, name.as_str()))),
                Err(error) => log::debug!(
                    "group {}: metadata for topic ids {ids:?} failed: {}",
                    self.mirror.group_id,
                    ErrorChain(&error)
                ),
            }
        }
        let Some(request) = self.mirror.machine.poll_transmit(now) else {
            return;
        };
        match self.with_coordinator(|conn| send_heartbeat(conn, &request)) {
            Ok((_, answer)) => {
                let code = answer.error;
                if code != KafkaCode::NONE {
                    log::debug!(
                        "group {}: heartbeat answered {}",
                        self.mirror.group_id,
                        code.name()
                    );
                }
                if code == KafkaCode::NONE {
                    self.failover.accepted(lease_now(), self.coordinator);
                } else if matches!(
                    code,
                    KafkaCode::NOT_COORDINATOR | KafkaCode::COORDINATOR_NOT_AVAILABLE
                ) {
                    // The machine wants the coordinator looked up again: paced, or a broker
                    // whose metadata still names the old coordinator would be asked in a loop.
                    let delay = self.failover.lost(now, self.coordinator);
                    self.connect_retry = Some(lease_now() + delay);
                } else if code == KafkaCode::COORDINATOR_LOAD_IN_PROGRESS {
                    // The machine retries after its (capped) backoff; this starts the outage's
                    // clock.
                    self.failover.lost(now, self.coordinator);
                }
                self.mirror.machine.on_response(lease_now(), answer);
                if let Some((at, bound)) = self.mirror.machine.session_renewal() {
                    if at >= now {
                        self.mirror.shared.lock().renew_bound(at, bound);
                    }
                }
                if self.mirror.machine.needs_coordinator() {
                    self.forget_coordinator();
                }
            }
            Err(error) => {
                if self.failover.in_outage() {
                    log::debug!(
                        "group {}: heartbeat failed: {}",
                        self.mirror.group_id,
                        ErrorChain(&error)
                    );
                } else {
                    log::warn!(
                        "group {}: heartbeat failed: {}",
                        self.mirror.group_id,
                        ErrorChain(&error)
                    );
                }
                self.failover.lost(now, self.coordinator);
                self.forget_coordinator();
                self.mirror.machine.on_transport_error(lease_now());
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
        let group = self.mirror.group_id.clone();
        self.coordinator = None;
        let node = self.client()?.find_coordinator(&group)?.node_id;
        self.coordinator = Some(node);
        op(self.client()?.connection(node)?)
    }

    fn find_coordinator(&mut self) -> Result<i16, WireError> {
        self.with_coordinator(|conn| heartbeat_version(conn))
    }

    fn forget_coordinator(&mut self) {
        let group = self.mirror.group_id.clone();
        if let Some(client) = self.client.as_mut() {
            client.invalidate_coordinator(&group);
        }
    }

    /// Sleeps until the machine has something to do, the poll thread woke us, or [`IDLE`].
    fn wait(&mut self) {
        let now = lease_now();
        let until = self
            .mirror
            .machine
            .poll_timeout()
            .map_or(now + IDLE, |t| t.min(now + IDLE));
        if until <= now {
            return;
        }
        let state = self.mirror.shared.lock();
        if state.phase() == Phase::Closed && !self.mirror.leaving {
            return;
        }
        drop(self.mirror.shared.wait(state, until - now));
    }
}
