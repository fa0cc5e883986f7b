//! [`ConsumerGroupMember`]: the generic poll-thread member over the consumer group protocol
//! (KIP-848), whose membership thread (`thread.rs`) heartbeats, resolves topic ids and
//! reconciles the broker's target assignment beside the poll loop.

use crate::group::assignor::RebalanceProtocol;
use crate::group::changes::LostHook;
use crate::group::config::GroupConfig;
use crate::group::error::GroupError;
use crate::group::member::{Member, MemberIo, Parts, Protocol, Step};
use crate::group::requests::MemberIdentity;
use crate::wire::ClientConfig;

use super::thread;
use super::ConsumerGroupConfig;

/// The consumer group protocol (KIP-848, `group.protocol=consumer`): the broker assigns, the
/// membership thread reconciles, and only what moves is revoked (incremental, as cooperative).
#[derive(Debug, Clone, Copy)]
pub struct ConsumerGroup;

/// A member of a consumer group under the consumer group protocol (KIP-848).
pub type ConsumerGroupMember = Member<ConsumerGroup>;

impl Member<ConsumerGroup> {
    /// Connects and starts the membership thread. Decided changes reach the poll thread
    /// through the same seam as cooperative rounds, so the consumer reads the same for both
    /// protocols: the generation is the member epoch. `config.strategies`, `session_timeout`
    /// and `heartbeat_interval` are not used (the broker owns them); `session_timeout` bounds
    /// only the classic session clock, which this protocol replaces with the machine's bound.
    pub fn new(
        config: GroupConfig,
        protocol_config: ConsumerGroupConfig,
        client_config: ClientConfig,
        hook: LostHook,
    ) -> Result<ConsumerGroupMember, GroupError> {
        let mut parts = Parts::connect(&config, &client_config, hook)?;
        if let Some(regex) = &protocol_config.topic_regex {
            super::wire::check_regex_support(&mut parts.client, regex)?;
        }
        parts.shared.lock().run_rounds_beside();
        let thread = thread::spawn(parts.shared.clone(), client_config, protocol_config)
            .map_err(GroupError::Thread)?;
        Ok(Member::from_parts(config, parts, thread, ConsumerGroup))
    }
}

impl Protocol for ConsumerGroup {
    fn rebalance_protocol(&self) -> RebalanceProtocol {
        RebalanceProtocol::Cooperative
    }

    /// Never called: the membership thread runs this protocol's "rounds" (heartbeats).
    fn run_round(&self, _: MemberIo<'_>, _: &str) -> Result<(), Step> {
        Ok(())
    }

    /// The membership thread leaves itself (epoch -1, static -2) with the member id only it
    /// holds, once it sees the session closed; the poll thread waits for it to end.
    fn leave_group(&self, _: MemberIo<'_>, _: &MemberIdentity) -> Result<(), GroupError> {
        Ok(())
    }
}
