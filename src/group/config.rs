//! What a group member needs to know beyond the connection settings, under either protocol.

use std::time::Duration;

use super::assignor::Strategy;
use super::pattern::TopicPattern;

/// What a group member needs to know beyond the connection settings.
#[derive(Clone, Debug)]
pub struct GroupConfig {
    /// `group.id`.
    pub group_id: String,
    /// `group.instance.id`: static membership (KIP-345).
    pub group_instance_id: Option<String>,
    /// The subscribed topics (empty with a [`pattern`](Self::pattern)).
    pub topics: Vec<String>,
    /// A subscription by regular expression instead of `topics`: the classic member matches it
    /// against the cluster's topics at every metadata refresh.
    pub pattern: Option<TopicPattern>,
    /// `exclude.internal.topics`: a pattern never selects Kafka's internal topics.
    pub exclude_internal_topics: bool,
    /// `metadata.max.age.ms`: how often a classic member refreshes the metadata of its
    /// subscription (a pattern's: of every topic) to follow created and deleted topics and
    /// added partitions.
    pub metadata_max_age: Duration,
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
