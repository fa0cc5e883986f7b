//! What a group member needs to know beyond the connection settings, under either protocol.

use std::time::Duration;

use super::assignor::Strategy;

/// What a group member needs to know beyond the connection settings.
#[derive(Clone, Debug)]
pub struct GroupConfig {
    /// `group.id`.
    pub group_id: String,
    /// `group.instance.id`: static membership (KIP-345).
    pub group_instance_id: Option<String>,
    /// The subscribed topics.
    pub topics: Vec<String>,
    /// `partition.assignment.strategy`, in preference order; checked against the list rules
    /// (`check_strategies`) when a classic member is created.
    pub strategies: Vec<Strategy>,
    /// `session.timeout.ms`.
    pub session_timeout: Duration,
    /// `heartbeat.interval.ms`.
    pub heartbeat_interval: Duration,
    /// `max.poll.interval.ms`, also the rebalance timeout (as in Java).
    pub max_poll_interval: Duration,
    /// `client.rack`: sent in the JoinGroup subscription (v3+) for rack-aware assignors.
    pub rack: Option<String>,
}
