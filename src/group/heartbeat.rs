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

use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::membership::ErrorContext;
use super::requests::{self, MemberIdentity};
use super::session::{HeartbeatDue, HeartbeatVerdict, Phase, Shared};
use crate::wire::{Client, ClientConfig, KafkaCode, WireError};

/// What the heartbeat thread needs to know about the group.
#[derive(Clone, Debug)]
pub(crate) struct HeartbeatSettings {
    pub(crate) group_id: String,
    pub(crate) instance_id: Option<String>,
    pub(crate) interval: Duration,
    pub(crate) session_timeout: Duration,
    pub(crate) max_poll_interval: Duration,
}

pub(crate) fn spawn(
    shared: Arc<Shared>,
    client_config: ClientConfig,
    settings: HeartbeatSettings,
) -> std::io::Result<JoinHandle<()>> {
    thread::Builder::new()
        .name(format!("heartbeat-{}", settings.group_id))
        .spawn(move || Heartbeater::new(shared, client_config, settings).run())
}

struct Heartbeater {
    shared: Arc<Shared>,
    client_config: ClientConfig,
    client: Option<Client>,
    settings: HeartbeatSettings,
}

impl Heartbeater {
    fn new(
        shared: Arc<Shared>,
        mut client_config: ClientConfig,
        settings: HeartbeatSettings,
    ) -> Self {
        // A heartbeat stuck for most of a session is as good as none: bound each round trip.
        let bound = (settings.session_timeout / 3).max(Duration::from_millis(200));
        client_config.connection.request_timeout =
            client_config.connection.request_timeout.min(bound);
        client_config.max_retries = 1;
        Heartbeater {
            shared,
            client_config,
            client: None,
            settings,
        }
    }

    fn run(mut self) {
        let mut next = Instant::now();
        loop {
            let mut state = self.shared.lock();
            loop {
                if state.phase() == Phase::Closed {
                    log::debug!("heartbeat thread for {} exits", self.settings.group_id);
                    return;
                }
                let now = Instant::now();
                if now >= next {
                    break;
                }
                state = self
                    .shared
                    .wake
                    .wait_timeout(state, next - now)
                    .map(|(s, _)| s)
                    .unwrap_or_else(|p| p.into_inner().0);
            }
            let now = Instant::now();
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
                    if let Err(error) = &result {
                        log::warn!(
                            "heartbeat to group {} failed: {error}",
                            self.settings.group_id
                        );
                    }
                    self.forget_coordinator();
                }
                HeartbeatVerdict::Rebalancing { first: true } => log::info!(
                    "group {} is rebalancing: rejoining at the next poll",
                    self.settings.group_id
                ),
                HeartbeatVerdict::Stale
                | HeartbeatVerdict::Renewed
                | HeartbeatVerdict::Retry
                | HeartbeatVerdict::Rebalancing { first: false }
                | HeartbeatVerdict::Lost
                | HeartbeatVerdict::Fatal(_) => {}
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

    fn send_heartbeat(&mut self, me: &MemberIdentity) -> Result<KafkaCode, WireError> {
        let group = self.settings.group_id.clone();
        let instance = self.settings.instance_id.clone();
        let client = self.client()?;
        let node = client.find_coordinator(&group)?.node_id;
        let conn = client.connection(node)?;
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
            Err(error) => log::warn!("LeaveGroup after a poll timeout failed: {error}"),
        }
    }
}
