//! The classic group protocol (JoinGroup, SyncGroup, Heartbeat) as the poll thread and the
//! membership thread run it: [`ClassicMember`], its heartbeat thread, and one rebalance round.
//!
//! - `mod.rs` (this file): the [`Classic`] protocol for the generic member: an eager round runs
//!   on the poll thread, a cooperative one on the heartbeat thread; leaving sends LeaveGroup.
//! - `heartbeat.rs`: the heartbeat thread: keeps the session alive, learns of rebalances, and
//!   under the cooperative protocol runs the rounds beside the poll loop.
//! - `round.rs`: one JoinGroup/SyncGroup round (leading it when elected), on whichever thread
//!   owns it, posting its decided change to the session.
//! - `refresh.rs`: the periodic metadata refresh (`metadata.max.age.ms`) on the heartbeat
//!   thread, which follows a pattern's topics and moved partition counts (`group/watch.rs`).

mod heartbeat;
mod refresh;
mod round;

use heartbeat::HeartbeatSettings;
use round::Round;

use super::assignor::{
    protocols_for, select_protocol, JoinProtocolError, JoinProtocols, RebalanceProtocol,
};
use super::changes::LostHook;
use super::config::GroupConfig;
use super::error::GroupError;
use super::member::{Member, MemberIo, Parts, Protocol, Step};
use super::requests::{self, MemberIdentity};
use super::subscription::Subscription;
use crate::wire::{ClientConfig, KafkaCode};

/// The classic protocol, eager or cooperative as `partition.assignment.strategy` implies.
#[derive(Debug, Clone, Copy)]
pub struct Classic(RebalanceProtocol);

/// A member of a consumer group under the classic protocol.
pub type ClassicMember = Member<Classic>;

impl Member<Classic> {
    /// Connects, checks the assignment strategies, and starts the heartbeat thread. The first
    /// [`next_change`](super::Membership::next_change) joins the group.
    ///
    /// `hook` is called with partitions whose ownership ended without a handoff, from whichever
    /// thread detected it, before anything else happens: wire it to the guard's `lost_because`.
    pub fn new(
        config: GroupConfig,
        client_config: ClientConfig,
        hook: LostHook,
    ) -> Result<ClassicMember, GroupError> {
        let mut parts = Parts::connect(&config, &client_config, hook)?;
        // A pattern is matched once before the first join, as Java does, so that the first
        // JoinGroup already carries the topics that exist.
        let topics = refresh::first_watch(&config, &mut parts.client)?;
        let protocol = join_protocols(&config, &Subscription::new(topics.subscription().to_vec()))
            .map_err(GroupError::Strategy)?
            .rebalance_protocol;
        *parts.shared.topics() = topics;
        // Cooperative: the partitions a member keeps must flow on while the group rebalances, so
        // the rounds run on the membership thread, beside the poll loop. Eager: every partition
        // is revoked before the join anyway, so the poll thread runs the round itself.
        let beside = protocol == RebalanceProtocol::Cooperative;
        if beside {
            parts.shared.lock().run_rounds_beside();
        }
        let thread = heartbeat::spawn(
            parts.shared.clone(),
            client_config,
            HeartbeatSettings {
                group_id: config.group_id.clone(),
                instance_id: config.group_instance_id.clone(),
                interval: config.heartbeat_interval,
                session_timeout: config.session_timeout,
                max_poll_interval: config.max_poll_interval,
                metadata_max_age: config.metadata_max_age,
                rounds: beside.then(|| config.clone()),
            },
        )
        .map_err(GroupError::Thread)?;
        Ok(Member::from_parts(config, parts, thread, Classic(protocol)))
    }
}

/// The JoinGroup protocol list for `subscription`; a pattern member may have no topic yet.
fn join_protocols(
    config: &GroupConfig,
    subscription: &Subscription,
) -> Result<JoinProtocols, JoinProtocolError> {
    if config.pattern.is_some() {
        protocols_for(&config.strategies, subscription)
    } else {
        select_protocol(&config.strategies, subscription)
    }
}

impl Protocol for Classic {
    fn rebalance_protocol(&self) -> RebalanceProtocol {
        self.0
    }

    fn run_round(&self, io: MemberIo<'_>, reason: &str) -> Result<(), Step> {
        Round {
            client: io.client,
            shared: io.shared,
            config: io.config,
            protocol: self.0,
        }
        .run(reason)
    }

    /// Sends LeaveGroup unless the member is static (a static member keeps its partitions
    /// across a restart within the session timeout) or never joined.
    fn leave_group(&self, io: MemberIo<'_>, identity: &MemberIdentity) -> Result<(), GroupError> {
        if io.config.group_instance_id.is_some() || identity.member_id.is_empty() {
            return Ok(());
        }
        let group_id = io.config.group_id.clone();
        let mut round = Round {
            client: io.client,
            shared: io.shared,
            config: io.config,
            protocol: self.0,
        };
        match round.with_coordinator("closing", "LeaveGroup", |conn| {
            requests::leave_group(
                conn,
                &group_id,
                None,
                &identity.member_id,
                "consumer closed",
            )
        }) {
            Ok(KafkaCode::NONE) => log::info!("left group {group_id}"),
            Ok(code) => log::warn!("LeaveGroup answered error {code}"),
            Err(Step::Retry(why)) => log::warn!("cannot leave group {group_id}: {why}"),
            Err(Step::Fail(e)) => return Err(e),
        }
        Ok(())
    }
}
