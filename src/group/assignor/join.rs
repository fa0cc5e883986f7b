//! The JoinGroup protocol list: which assignors this member offers, under which names, with
//! which subscription bytes, and the rebalance protocol (eager or cooperative) they imply. Apart
//! from the assignors themselves (`mod.rs`), because it is what a member says when it joins, not
//! how a leader divides partitions.

use std::error::Error;
use std::fmt;

use bytes::Bytes;

use super::{check_strategies, RebalanceProtocol, Strategy, StrategyError};
use crate::group::subscription::{
    encode_subscription, EncodeError, Subscription, SUBSCRIPTION_VERSION,
};

/// One entry of the JoinGroup `protocols` list: an assignor name and our subscription bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct JoinProtocol {
    /// The assignor's protocol name.
    pub name: &'static str,
    /// Our subscription, encoded for that assignor.
    pub metadata: Bytes,
}

/// What we send in JoinGroup, and the rebalance protocol those assignors imply for us.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct JoinProtocols {
    /// Eager or cooperative; the same for every listed assignor.
    pub rebalance_protocol: RebalanceProtocol,
    /// In our order of preference; the broker picks the first one every member supports.
    pub protocols: Vec<JoinProtocol>,
}

/// Why the JoinGroup protocol list could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JoinProtocolError {
    /// The strategy list breaks a list rule (the rules `partition.assignment.strategy` documents).
    Strategies(StrategyError),
    /// A subscription topic list is empty: a librdkafka leader drops such a member from the group's
    /// assignment without telling anyone.
    NoTopics,
    /// The subscription could not be encoded.
    Encode(EncodeError),
}

impl From<StrategyError> for JoinProtocolError {
    fn from(e: StrategyError) -> Self {
        JoinProtocolError::Strategies(e)
    }
}

impl fmt::Display for JoinProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JoinProtocolError::Strategies(e) => write!(f, "{e}"),
            JoinProtocolError::NoTopics => {
                write!(f, "cannot join a group with no subscribed topic")
            }
            JoinProtocolError::Encode(e) => write!(f, "{e}"),
        }
    }
}

/// Transparent: a wrapped error is the message (displayed, so not returned again here).
impl Error for JoinProtocolError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            JoinProtocolError::Strategies(e) => e.source(),
            JoinProtocolError::NoTopics => None,
            JoinProtocolError::Encode(e) => e.source(),
        }
    }
}

/// Builds the JoinGroup protocol list from the strategies (in preference order, checked by
/// [`check_strategies`]) and our current subscription, encoded once at [`SUBSCRIPTION_VERSION`]
/// and offered under every strategy's name.
pub(crate) fn select_protocol(
    strategies: &[Strategy],
    subscription: &Subscription,
) -> Result<JoinProtocols, JoinProtocolError> {
    if subscription.topics.is_empty() {
        return Err(JoinProtocolError::NoTopics);
    }
    protocols_for(strategies, subscription)
}

/// [`select_protocol`] for a pattern that may match no topic yet (Java joins with no topic then).
pub(crate) fn protocols_for(
    strategies: &[Strategy],
    subscription: &Subscription,
) -> Result<JoinProtocols, JoinProtocolError> {
    let rebalance_protocol = check_strategies(strategies)?;
    let metadata = encode_subscription(subscription, SUBSCRIPTION_VERSION)
        .map_err(JoinProtocolError::Encode)?;
    Ok(JoinProtocols {
        rebalance_protocol,
        protocols: strategies
            .iter()
            .map(|s| JoinProtocol {
                name: s.name(),
                metadata: metadata.clone(),
            })
            .collect(),
    })
}
