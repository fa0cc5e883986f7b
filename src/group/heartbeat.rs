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

use super::membership::{classify, ErrorAction, ErrorContext, GroupApi};
use super::requests::{self, MemberIdentity};
use super::session::{LostReason, Phase, SessionState, Shared};
use crate::wire::{Client, ClientConfig, KafkaCode, WireError};
use crate::TopicPartition;

/// Called with partitions whose ownership ended without a handoff. The consumer fences them in
/// the guard; it runs on the heartbeat thread (or the poll thread) and must not block.
pub type LostHook = Arc<dyn Fn(&[TopicPartition]) + Send + Sync>;

/// What the heartbeat thread needs to know about the group.
#[derive(Clone, Debug)]
pub(crate) struct HeartbeatSettings {
    pub(crate) group_id: String,
    pub(crate) instance_id: Option<String>,
    pub(crate) interval: Duration,
    pub(crate) session_timeout: Duration,
    pub(crate) max_poll_interval: Duration,
}

/// Ends the member's ownership without a handoff: fences through the hook while the session lock
/// is held (so no rejoin can interleave), records the loss for the poll thread's listener, and
/// resets the identity as the error demands.
pub(crate) fn lose_assignment(
    state: &mut SessionState,
    hook: &LostHook,
    reason: LostReason,
    reset_member_id: bool,
) {
    let owned = std::mem::take(&mut state.owned);
    if !owned.is_empty() {
        log::warn!(
            "assignment lost ({reason:?}): fencing {} partition(s) without commit",
            owned.len()
        );
        hook(&owned);
    }
    state.lost.push((owned, reason.clone()));
    state.identity.generation_id = -1;
    if reset_member_id {
        state.identity.member_id.clear();
    }
    if state.phase != Phase::Closed {
        state.phase = Phase::Unjoined;
    }
    state
        .rejoin
        .get_or_insert_with(|| format!("assignment lost: {reason:?}"));
}

pub(crate) fn spawn(
    shared: Arc<Shared>,
    client_config: ClientConfig,
    settings: HeartbeatSettings,
    hook: LostHook,
) -> std::io::Result<JoinHandle<()>> {
    thread::Builder::new()
        .name(format!("heartbeat-{}", settings.group_id))
        .spawn(move || Heartbeater::new(shared, client_config, settings, hook).run())
}

struct Heartbeater {
    shared: Arc<Shared>,
    client_config: ClientConfig,
    client: Option<Client>,
    settings: HeartbeatSettings,
    hook: LostHook,
}

impl Heartbeater {
    fn new(
        shared: Arc<Shared>,
        mut client_config: ClientConfig,
        settings: HeartbeatSettings,
        hook: LostHook,
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
            hook,
        }
    }

    fn run(mut self) {
        let mut next = Instant::now();
        loop {
            let mut state = self.shared.lock();
            loop {
                if state.phase == Phase::Closed {
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
            if state.phase != Phase::Stable {
                // Rejoining, a cooperative member still holds the partitions it keeps. If the
                // coordinator has not heard from it for a session (no request of ours is there
                // now, and none succeeded for session.timeout.ms), it has very likely evicted
                // us and handed them on: fence them, as when stable.
                if !state.owned.is_empty()
                    && !state.request_in_flight
                    && now.saturating_duration_since(state.last_heartbeat_ok)
                        > self.settings.session_timeout
                {
                    lose_assignment(&mut state, &self.hook, LostReason::SessionExpired, false);
                }
                continue;
            }
            if !state.in_poll
                && now.saturating_duration_since(state.last_poll) > self.settings.max_poll_interval
            {
                let left = state.identity.clone();
                log::warn!(
                    "no poll for more than max.poll.interval.ms ({:?}): leaving group {} and \
                     fencing the assignment; the handler is too slow for its batch",
                    self.settings.max_poll_interval,
                    self.settings.group_id
                );
                lose_assignment(&mut state, &self.hook, LostReason::PollTimeout, true);
                drop(state);
                if self.settings.instance_id.is_none() {
                    self.leave(&left);
                }
                continue;
            }
            if now.saturating_duration_since(state.last_heartbeat_ok)
                > self.settings.session_timeout
            {
                lose_assignment(&mut state, &self.hook, LostReason::SessionExpired, false);
                continue;
            }
            let me = state.identity.clone();
            drop(state);

            let result = self.send_heartbeat(&me);

            let shared = self.shared.clone();
            let mut state = shared.lock();
            if state.phase != Phase::Stable || state.identity != me {
                // The poll thread rejoined (or we were reset) while the heartbeat was in flight;
                // its answer is about a generation that no longer matters.
                continue;
            }
            match result {
                Ok(KafkaCode::NONE) => state.session_renewed(now, self.settings.session_timeout),
                Ok(code) => {
                    let ctx = ErrorContext {
                        group_id: &self.settings.group_id,
                        group_instance_id: self.settings.instance_id.as_deref(),
                    };
                    match classify(GroupApi::Heartbeat, code, &ctx) {
                        ErrorAction::Proceed => {
                            state.session_renewed(now, self.settings.session_timeout)
                        }
                        ErrorAction::Retry => {}
                        ErrorAction::RediscoverCoordinator => self.forget_coordinator(),
                        ErrorAction::Rejoin => {
                            // The member is alive; the group wants it to rejoin.
                            state.session_renewed(now, self.settings.session_timeout);
                            if state.rejoin.is_none() {
                                log::info!(
                                    "group {} is rebalancing: rejoining at the next poll",
                                    self.settings.group_id
                                );
                                state.rejoin = Some("the group is rebalancing".to_string());
                            }
                        }
                        ErrorAction::ResetAndRejoin { reset_member_id } => lose_assignment(
                            &mut state,
                            &self.hook,
                            LostReason::Fenced(code),
                            reset_member_id,
                        ),
                        ErrorAction::Fatal(fatal) => {
                            log::error!("heartbeat: {fatal}");
                            lose_assignment(&mut state, &self.hook, LostReason::Fenced(code), true);
                            state.fatal = Some(fatal);
                        }
                    }
                }
                Err(error) => {
                    log::warn!(
                        "heartbeat to group {} failed: {error}",
                        self.settings.group_id
                    );
                    self.forget_coordinator();
                }
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
