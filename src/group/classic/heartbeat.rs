//! The background heartbeat thread (KIP-62).
//!
//! It keeps the session alive while the user's thread processes a batch, learns of rebalances
//! (REBALANCE_IN_PROGRESS) and tells the poll thread, and enforces `max.poll.interval.ms`: when the
//! poll thread has not polled in time, the member leaves the group proactively and its partitions
//! are reported lost, so the guard fences them before another record of theirs can be processed.
//! It also treats a session that could not be renewed for `session.timeout.ms` as lost: by then
//! the coordinator has very likely given the partitions to someone else, and a trading worker must
//! stop before that, not after it hears about it.
//!
//! It has its own [`Client`] (its own connection to the coordinator), so a long Fetch or a
//! blocking JoinGroup on the poll thread never delays a heartbeat.
//!
//! Under the cooperative protocol it is the membership thread: it also runs the rebalance rounds
//! (`round.rs`: JoinGroup, assign, SyncGroup), with a second client of its own, whenever the
//! session says one is due (`SessionState::round_due`), so the poll thread keeps fetching and
//! processing the partitions it keeps while the group rebalances. A round's decision waits for
//! the poll thread as a pending change (`changes.rs`); the next round waits until it was applied.
//! Heartbeats pause while a round of ours is at the coordinator (it holds us in the join), and
//! resume as soon as the SyncGroup is answered, also while the poll thread drains a revocation.

use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::guard::lease_now;

use super::refresh;
use super::round::Round;
use crate::group::assignor::RebalanceProtocol;
use crate::group::config::GroupConfig;
use crate::group::failover::{bound_membership_client, Failover};
use crate::group::member::Step;
use crate::group::membership::ErrorContext;
use crate::group::requests::{self, MemberIdentity};
use crate::group::session::{GroupThread, HeartbeatDue, HeartbeatVerdict, Phase, Shared};
use crate::wire::ErrorChain;
use crate::wire::{Client, ClientConfig, KafkaCode, WireError};

/// What the heartbeat thread needs to know about the group.
#[derive(Clone, Debug)]
pub(crate) struct HeartbeatSettings {
    pub(crate) group_id: String,
    pub(crate) instance_id: Option<String>,
    pub(crate) interval: Duration,
    pub(crate) session_timeout: Duration,
    pub(crate) max_poll_interval: Duration,
    /// `metadata.max.age.ms`: how often the subscription's metadata is refreshed (`refresh.rs`).
    pub(crate) metadata_max_age: Duration,
    /// Set when this thread runs the rebalance rounds (cooperative): the group's configuration.
    pub(crate) rounds: Option<GroupConfig>,
}

pub(crate) fn spawn(
    shared: Arc<Shared>,
    client_config: ClientConfig,
    settings: HeartbeatSettings,
) -> std::io::Result<JoinHandle<()>> {
    thread::Builder::new()
        .name(format!("heartbeat-{}", settings.group_id))
        .spawn(move || {
            let guard = shared.clone();
            guard.run_thread(GroupThread::Membership, || {
                Heartbeater::new(shared, client_config, settings).run()
            })
        })
}

/// The first retry of a failed round waits this long, doubling up to [`ROUND_BACKOFF_MAX`].
/// Why 50 ms and 1 s: the poll thread's own rounds (eager) back off the same way.
const ROUND_BACKOFF_MIN: Duration = Duration::from_millis(50);
const ROUND_BACKOFF_MAX: Duration = Duration::from_secs(1);

struct Heartbeater {
    shared: Arc<Shared>,
    client_config: ClientConfig,
    client: Option<Client>,
    /// The rounds' own client: unbounded request timeout (JoinGroup waits for the group), and a
    /// metadata cache for leading.
    round_client_config: ClientConfig,
    round_client: Option<Client>,
    settings: HeartbeatSettings,
    /// A coordinator outage under way, and the pacing of the look-ups until it ends.
    failover: Failover,
    /// The node the last heartbeat went to (None: no coordinator was found for it).
    coordinator: Option<i32>,
}

impl Heartbeater {
    fn new(shared: Arc<Shared>, client_config: ClientConfig, settings: HeartbeatSettings) -> Self {
        let mut round_client_config = client_config.clone();
        // A round's FindCoordinator is tried twice, never with a long sleep between: the round
        // loop retries the whole round after its own short backoff, with a fresh look-up, and no
        // heartbeat goes out while this thread waits inside a round.
        bound_membership_client(&mut round_client_config);
        round_client_config.max_retries = round_client_config.max_retries.min(2);
        let mut client_config = client_config;
        // A heartbeat stuck for most of a session is as good as none: bound each round trip.
        let bound = (settings.session_timeout / 3).max(Duration::from_millis(200));
        client_config.connection.request_timeout =
            client_config.connection.request_timeout.min(bound);
        client_config.max_retries = 1;
        bound_membership_client(&mut client_config);
        let failover = Failover::new(&settings.group_id, client_config.retry_backoff);
        Heartbeater {
            shared,
            client_config,
            client: None,
            round_client_config,
            round_client: None,
            settings,
            failover,
            coordinator: None,
        }
    }

    fn run(mut self) {
        let mut next = lease_now();
        let mut round_backoff = ROUND_BACKOFF_MIN;
        let mut next_round = lease_now();
        let mut next_refresh = lease_now() + self.settings.metadata_max_age;
        loop {
            let mut state = self.shared.lock();
            let mut round = None;
            loop {
                if state.phase() == Phase::Closed {
                    log::debug!("heartbeat thread for {} exits", self.settings.group_id);
                    return;
                }
                self.shared.panic_if_requested(GroupThread::Membership);
                let now = lease_now();
                let due = match state.round_due() {
                    Some(_) if self.shared.has_failure() => None,
                    due => due,
                };
                if let Some(reason) = &due {
                    if now >= next_round {
                        round = Some(reason.clone());
                        break;
                    }
                }
                if now >= next || now >= next_refresh {
                    break;
                }
                let until = match due {
                    Some(_) => next.min(next_round),
                    None => next,
                }
                .min(next_refresh);
                state = self
                    .shared
                    .wait(state, until.saturating_duration_since(now));
            }
            if let Some(reason) = round {
                drop(state);
                let outcome = self.run_round(&reason);
                // The heartbeat schedule restarts when the round ends (as the poll thread's
                // rounds never stopped it): a retry within the backoff goes out before the next
                // tick, and the session checks resume one interval later.
                next = lease_now() + self.settings.interval;
                match outcome {
                    None => round_backoff = ROUND_BACKOFF_MIN,
                    Some(why) => {
                        log::info!("group {}: {why}; retrying", self.settings.group_id);
                        next_round = lease_now() + round_backoff;
                        round_backoff = (round_backoff * 2).min(ROUND_BACKOFF_MAX);
                    }
                }
                continue;
            }
            let now = lease_now();
            if now >= next_refresh {
                drop(state);
                next_refresh = now + self.settings.metadata_max_age;
                let (group, shared) = (self.settings.group_id.clone(), self.shared.clone());
                match self.client() {
                    Ok(client) => refresh::refresh(&shared, client, &group),
                    Err(e) => log::debug!(
                        "group {group}: no client for the metadata refresh: {}",
                        ErrorChain(&e)
                    ),
                }
                continue;
            }
            next = now + self.settings.interval;
            let me = match state.heartbeat_due(now) {
                HeartbeatDue::Skip => continue,
                HeartbeatDue::LeaveAfterPollTimeout(left) => {
                    drop(state);
                    log::warn!(
                        "no poll for more than max.poll.interval.ms ({:?}): the assignment is fenced \
                         and the member leaves group {}; the handler is too slow for its batch",
                        self.settings.max_poll_interval,
                        self.settings.group_id
                    );
                    if self.settings.instance_id.is_none() {
                        self.leave(&left);
                    }
                    continue;
                }
                HeartbeatDue::Send(me) => me,
            };
            drop(state);

            let result = self.send_heartbeat(&me);

            let mut state = self.shared.lock();
            let ctx = ErrorContext {
                group_id: &self.settings.group_id,
                group_instance_id: self.settings.instance_id.as_deref(),
            };
            let verdict = state.heartbeat_answered(now, &me, result.as_ref().ok().copied(), &ctx);
            drop(state);
            match verdict {
                HeartbeatVerdict::RediscoverCoordinator => {
                    match &result {
                        // One line per outage, not one per retry: the retries are fast.
                        Err(error) if !self.failover.in_outage() => log::warn!(
                            "heartbeat to group {} failed: {}; finding the coordinator again",
                            self.settings.group_id,
                            ErrorChain(error)
                        ),
                        Err(error) => log::debug!(
                            "heartbeat to group {} failed: {}",
                            self.settings.group_id,
                            ErrorChain(error)
                        ),
                        Ok(code) => log::info!(
                            "heartbeat to group {} answered {}; finding the coordinator again",
                            self.settings.group_id,
                            code.name()
                        ),
                    }
                    self.forget_coordinator();
                    // Looked up again (FindCoordinator to any live broker) after a short
                    // backoff, not a whole heartbeat interval later.
                    next = lease_now() + self.failover.lost(now, self.coordinator);
                }
                HeartbeatVerdict::Retry => {
                    // COORDINATOR_LOAD_IN_PROGRESS: the coordinator is there, loading the group;
                    // ask again soon rather than an interval later.
                    next = lease_now() + self.failover.lost(now, self.coordinator);
                }
                HeartbeatVerdict::Renewed | HeartbeatVerdict::Rebalancing { .. } => {
                    self.failover.accepted(lease_now(), self.coordinator);
                    if let HeartbeatVerdict::Rebalancing { first: true } = verdict {
                        log::info!(
                            "group {} is rebalancing: rejoining at the next poll",
                            self.settings.group_id
                        );
                    }
                }
                HeartbeatVerdict::Stale | HeartbeatVerdict::Lost | HeartbeatVerdict::Fatal(_) => {}
            }
        }
    }

    /// One round on this thread (cooperative). None when it completed (or failed for good: the
    /// failure waits for the poll thread); otherwise why it is retried after a backoff.
    fn run_round(&mut self, reason: &str) -> Option<String> {
        let config = self.settings.rounds.clone()?;
        if self.round_client.is_none() {
            match Client::connect(self.round_client_config.clone()) {
                Ok(client) => self.round_client = Some(client),
                Err(e) => {
                    self.shared.lock().round_failed(reason);
                    return Some(format!(
                        "cannot connect for the rebalance: {}",
                        ErrorChain(&e)
                    ));
                }
            }
        }
        let client = self.round_client.as_mut()?;
        let mut round = Round {
            client,
            shared: &self.shared,
            config: &config,
            protocol: RebalanceProtocol::Cooperative,
        };
        match round.run(reason) {
            Ok(_) => None,
            Err(Step::Retry(why)) => Some(why),
            Err(Step::Fail(error)) => {
                log::error!(
                    "group {}: rebalance failed: {}",
                    config.group_id,
                    ErrorChain(&error)
                );
                self.shared.set_failure(error);
                None
            }
        }
    }

    fn client(&mut self) -> Result<&mut Client, WireError> {
        if self.client.is_none() {
            self.client = Some(Client::connect(self.client_config.clone())?);
        }
        self.client
            .as_mut()
            .ok_or_else(|| WireError::Config("heartbeat client unavailable".to_string()))
    }

    fn forget_coordinator(&mut self) {
        if let Some(client) = self.client.as_mut() {
            client.invalidate_coordinator(&self.settings.group_id);
        }
    }

    /// Sends one heartbeat to the coordinator, looked up first when it is not known; remembers
    /// the node it went to (for the failover log line).
    fn send_heartbeat(&mut self, me: &MemberIdentity) -> Result<KafkaCode, WireError> {
        let group = self.settings.group_id.clone();
        let instance = self.settings.instance_id.clone();
        self.coordinator = None;
        let node = self.client()?.find_coordinator(&group)?.node_id;
        self.coordinator = Some(node);
        let conn = self.client()?.connection(node)?;
        requests::heartbeat(conn, &group, instance.as_deref(), me)
    }

    fn leave(&mut self, me: &MemberIdentity) {
        if me.member_id.is_empty() {
            return;
        }
        let group = self.settings.group_id.clone();
        let result = self.client().and_then(|client| {
            let node = client.find_coordinator(&group)?.node_id;
            let conn = client.connection(node)?;
            requests::leave_group(conn, &group, None, &me.member_id, "consumer poll timeout")
        });
        match result {
            Ok(KafkaCode::NONE) => log::info!("left group {group} after a poll timeout"),
            Ok(code) => log::warn!("LeaveGroup after a poll timeout answered error {code}"),
            Err(error) => log::warn!(
                "LeaveGroup after a poll timeout failed: {}",
                ErrorChain(&error)
            ),
        }
    }
}
