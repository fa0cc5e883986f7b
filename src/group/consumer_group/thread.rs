//! The membership thread under the consumer group protocol (KIP-848, `group.protocol=consumer`):
//! the sans-I/O [`ConsumerGroupMembership`], mirrored into the consumer's session, run by the
//! membership-thread shell both heartbeat protocols share (`group/membership_thread.rs`: the
//! loop, the coordinator look-ups and their pacing, the heartbeat and its answer, the wait).
//! This file is what the consumer group protocol supplies to it.
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
use super::wire::{send_heartbeat, HEARTBEAT_VERSIONS};
use super::TopicId;
use super::{ConsumerGroupConfig, ConsumerGroupMembership, HeartbeatRequest, HeartbeatResponse};
use crate::group::membership_thread::{
    membership_client, run, AfterTransportError, HeartbeatProtocol, Round,
};
use crate::group::outcome::GroupApi;
use crate::group::session::{GroupThread, Phase, Shared};
use kafka_protocol::messages::ApiKey;

use crate::wire::{ClientConfig, Connection, KafkaCode, VersionRange, WireError};

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
                let (protocol, client_config) = Kip848::new(shared, client_config, config);
                run(protocol, client_config);
            })
        })
}

/// The consumer group protocol as the membership-thread shell runs it: the machine and what it
/// decided, mirrored into the session.
struct Kip848 {
    mirror: Mirror,
}

impl Kip848 {
    /// The protocol, and the settings of the thread's own client.
    fn new(
        shared: Arc<Shared>,
        client_config: ClientConfig,
        config: ConsumerGroupConfig,
    ) -> (Self, ClientConfig) {
        let mut client_config = client_config;
        // A heartbeat stuck for seconds is as good as none: bound each round trip as the classic
        // heartbeat thread does (the broker's heartbeat interval is not known before the join).
        client_config.connection.request_timeout = client_config
            .connection
            .request_timeout
            .min(Duration::from_secs(5));
        let client_config = membership_client(client_config);
        let mut config = config;
        // The machine's retries after a failed heartbeat (transport error, the coordinator
        // loading the group) are coordinator conditions too: paced like the look-ups, so the
        // first heartbeat to a coordinator that has just taken the group over is not held back
        // by a backoff that grew while the old one was gone.
        config.retry_backoff_max = config
            .retry_backoff_max
            .min(client_config.retry_backoff_max)
            .max(config.retry_backoff.min(client_config.retry_backoff_max));
        let mirror = Mirror::new(
            shared,
            config.group_id.clone(),
            ConsumerGroupMembership::new(config),
        );
        (Kip848 { mirror }, client_config)
    }
}

impl HeartbeatProtocol for Kip848 {
    type Request = HeartbeatRequest;
    type Answer = HeartbeatResponse;
    const API: GroupApi = GroupApi::ConsumerGroupHeartbeat;
    const API_KEY: ApiKey = ApiKey::ConsumerGroupHeartbeat;
    const VERSIONS: VersionRange = HEARTBEAT_VERSIONS;
    const AFTER_TRANSPORT_ERROR: AfterTransportError = AfterTransportError {
        pace_lookup: false,
        fresh_client: false,
    };

    fn group_id(&self) -> &str {
        &self.mirror.group_id
    }

    /// What the poll thread did goes into the machine, time passes, and what the machine
    /// decided goes into the session; the thread ends once left, or once the leave heartbeat
    /// could not be sent within [`LEAVE_BOUND`].
    fn before_io(&mut self, now: Instant) -> Round {
        let mirror = &mut self.mirror;
        mirror.shared.panic_if_requested(GroupThread::Membership);
        if !mirror.turn(now) {
            return Round::Exit;
        }
        if mirror.done_leaving() {
            log::debug!("membership thread for {} exits", mirror.group_id);
            return Round::Exit;
        }
        if mirror
            .leave_started
            .is_some_and(|at| now.saturating_duration_since(at) > LEAVE_BOUND)
        {
            log::warn!(
                "group {}: the leave heartbeat could not be sent within {LEAVE_BOUND:?}; the \
                 broker expires the member by its session",
                mirror.group_id
            );
            return Round::Exit;
        }
        Round::Io
    }

    fn after_io(&mut self, _now: Instant) -> bool {
        self.mirror.hand_over();
        false
    }

    fn wait(&self, timeout: Duration) {
        let state = self.mirror.shared.lock();
        if state.phase() == Phase::Closed && !self.mirror.leaving {
            return;
        }
        drop(self.mirror.shared.wait(state, timeout));
    }

    fn needs_coordinator(&self) -> bool {
        self.mirror.machine.needs_coordinator()
    }

    fn coordinator_found(&mut self, version: i16) {
        self.mirror.machine.coordinator_found(version);
    }

    fn on_unsupported(&mut self, detail: &str) {
        self.mirror.machine.on_unsupported(detail);
    }

    fn poll_metadata(&mut self, now: Instant) -> Option<Vec<TopicId>> {
        self.mirror.machine.poll_metadata(now)
    }

    /// A failed look-up changes nothing: the machine asks again.
    fn on_metadata(&mut self, now: Instant, named: Option<&[(TopicId, String)]>) {
        if let Some(named) = named {
            self.mirror
                .machine
                .on_metadata(now, named.iter().map(|(id, name)| (*id, name.as_str())));
        }
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<HeartbeatRequest> {
        self.mirror.machine.poll_transmit(now)
    }

    /// The answer, then the session bound it renews (only a renewal from this round's
    /// heartbeat: an older one was applied when it came).
    fn on_response(&mut self, round: Instant, answer: HeartbeatResponse) {
        self.mirror.machine.on_response(lease_now(), answer);
        if let Some((at, bound)) = self.mirror.machine.session_renewal() {
            if at >= round {
                self.mirror.shared.lock().renew_bound(at, bound);
            }
        }
    }

    fn on_transport_error(&mut self, now: Instant) {
        self.mirror.machine.on_transport_error(now);
    }

    fn wake_at(&self) -> Option<Instant> {
        self.mirror.machine.poll_timeout()
    }

    fn send(
        conn: &mut Connection,
        request: &HeartbeatRequest,
    ) -> Result<HeartbeatResponse, WireError> {
        send_heartbeat(conn, request).map(|(_, answer)| answer)
    }

    fn code(answer: &HeartbeatResponse) -> KafkaCode {
        answer.error
    }
}
