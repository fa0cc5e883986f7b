//! The vocabulary of the consumer group protocol machine: its configuration, the heartbeat it
//! asks to send and the answer it is fed (both free of the wire encoding, so the machine and its
//! tests need no socket and no `kafka-protocol` types), and the events it hands the consumer.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use crate::group::ids::TopicId;
use crate::group::outcome::{FatalError, LostReason};
use crate::wire::KafkaCode;
use crate::TopicPartition;

/// The epoch a member sends to join (or rejoin after a loss).
pub const JOIN_EPOCH: i32 = 0;
/// The epoch a member sends to leave the group for good.
pub const LEAVE_EPOCH: i32 = -1;
/// The epoch a static member (`group.instance.id`) sends to leave while keeping its partitions
/// reserved for its return within the session timeout.
pub const STATIC_LEAVE_EPOCH: i32 = -2;

/// The broker's default `group.consumer.session.timeout.ms`; the session bound never exceeds it.
pub const BROKER_DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(45);

/// How many heartbeat intervals the derived session bound spans (see
/// `liveness.rs`, `session_bound`).
pub const SESSION_BOUND_INTERVALS: u32 = 3;

/// The server-side assignor a member asks for (`group.remote.assignor`). Kafka ships these two;
/// without one the broker uses its first configured assignor (`uniform` by default).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RemoteAssignor {
    /// Spreads partitions of all subscribed topics evenly, sticky across rebalances.
    Uniform,
    /// Co-partitions topics: partition `n` of every topic goes to the same member.
    Range,
}

impl RemoteAssignor {
    /// The name the broker knows it by.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RemoteAssignor::Uniform => "uniform",
            RemoteAssignor::Range => "range",
        }
    }

    /// Parses the broker's name, ignoring case.
    pub(crate) fn from_name(name: &str) -> Option<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "uniform" => Some(RemoteAssignor::Uniform),
            "range" => Some(RemoteAssignor::Range),
            _ => None,
        }
    }

    /// Every assignor, for documentation and error messages.
    pub fn all() -> [RemoteAssignor; 2] {
        [RemoteAssignor::Uniform, RemoteAssignor::Range]
    }
}

impl fmt::Display for RemoteAssignor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the machine needs to know about the member, fixed for its life.
#[derive(Clone, Debug)]
pub struct ConsumerGroupConfig {
    /// `group.id`.
    pub group_id: String,
    /// `group.instance.id`: a static member leaves with epoch -2.
    pub instance_id: Option<String>,
    /// The subscribed topic names (empty with a [`topic_regex`](Self::topic_regex)).
    pub topics: Vec<String>,
    /// A subscription by regular expression (`Consumer::subscribe_pattern`), sent as
    /// `SubscribedTopicRegex` (ConsumerGroupHeartbeat v1+, Kafka 4.0+) instead of topic names: the
    /// broker resolves it (RE2/J syntax, whole names) and follows topics created or deleted later.
    pub topic_regex: Option<String>,
    /// `max.poll.interval.ms`: how long the broker waits for a revocation before fencing us.
    pub rebalance_timeout: Duration,
    /// `group.remote.assignor`, if set.
    pub remote_assignor: Option<RemoteAssignor>,
    /// `client.rack`, sent as the member's `rack_id` on joining, for rack-aware broker-side
    /// assignors.
    pub rack: Option<String>,
    /// A user-set session bound; `None` derives it from the broker's heartbeat interval.
    pub session_bound: Option<Duration>,
    /// First delay before resending after a retriable error; doubles per failure.
    pub retry_backoff: Duration,
    /// Cap on that delay.
    pub retry_backoff_max: Duration,
}

/// Partitions by topic id, each topic's partitions sorted: the form of both the target
/// assignment the broker sends and the owned partitions the member reports.
pub type IdAssignment = BTreeMap<TopicId, Vec<i32>>;

/// One ConsumerGroupHeartbeat to send, with every field as the protocol means it: `None` (or -1
/// for the rebalance timeout) is "unchanged since the last heartbeat".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeartbeatRequest {
    /// `group.id`.
    pub group_id: String,
    /// Our member id; empty only on a v0 join, where the broker assigns it.
    pub member_id: String,
    /// 0 to join, -1 or -2 to leave, the current epoch otherwise.
    pub member_epoch: i32,
    /// `group.instance.id`, sent with every request of a static member.
    pub instance_id: Option<String>,
    /// `max.poll.interval.ms` in milliseconds, or -1 when unchanged.
    pub rebalance_timeout_ms: i32,
    /// The subscription, or `None` when unchanged (or subscribed by regular expression).
    pub subscribed_topic_names: Option<Vec<String>>,
    /// The subscription's regular expression (v1+), or `None` when unchanged or subscribed by
    /// names.
    pub subscribed_topic_regex: Option<String>,
    /// `group.remote.assignor`, or `None` when unset or unchanged.
    pub server_assignor: Option<String>,
    /// `client.rack`, or `None` when unset or unchanged.
    pub rack_id: Option<String>,
    /// The partitions the member owns right now, or `None` when unchanged.
    pub owned: Option<IdAssignment>,
}

impl HeartbeatRequest {
    /// A heartbeat of `member_id` at `member_epoch` that changes nothing else (every optional
    /// field "unchanged"): a leave, or a probe of the epoch.
    pub fn unchanged(group_id: &str, member_id: &str, member_epoch: i32) -> Self {
        HeartbeatRequest {
            group_id: group_id.to_string(),
            member_id: member_id.to_string(),
            member_epoch,
            instance_id: None,
            rebalance_timeout_ms: -1,
            subscribed_topic_names: None,
            subscribed_topic_regex: None,
            server_assignor: None,
            rack_id: None,
            owned: None,
        }
    }

    /// Whether this is the full form: the broker answers it with the whole assignment.
    pub fn is_full(&self) -> bool {
        self.member_epoch == JOIN_EPOCH
            || (self.rebalance_timeout_ms != -1
                && (self.subscribed_topic_names.is_some() || self.subscribed_topic_regex.is_some())
                && self.owned.is_some())
    }

    /// Whether this heartbeat leaves the group.
    pub(crate) fn is_leave(&self) -> bool {
        self.member_epoch == LEAVE_EPOCH || self.member_epoch == STATIC_LEAVE_EPOCH
    }
}

/// A ConsumerGroupHeartbeat answer, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeartbeatResponse {
    /// [`KafkaCode::NONE`] on success.
    pub error: KafkaCode,
    /// The broker's explanation of an error.
    pub error_message: Option<String>,
    /// The member id (the one the broker assigned on a v0 join; ours echoed on v1).
    pub member_id: Option<String>,
    /// The member's epoch as the broker knows it.
    pub member_epoch: i32,
    /// How long until the next heartbeat, in milliseconds.
    pub heartbeat_interval_ms: i32,
    /// The partitions the member may own now, when they changed (or after a full request).
    pub assignment: Option<IdAssignment>,
}

impl HeartbeatResponse {
    /// An error answer with nothing else, as a broker writes one.
    pub fn error(code: KafkaCode, message: &str) -> Self {
        HeartbeatResponse {
            error: code,
            error_message: Some(message.to_string()),
            member_id: None,
            member_epoch: -1,
            heartbeat_interval_ms: 0,
            assignment: None,
        }
    }
}

/// Identifies one revocation handed to the poll thread, so that its acknowledgement is matched
/// to it (a late acknowledgement of a revocation overtaken by a loss changes nothing).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RevocationId(pub u64);

/// What the consumer must do, in the order the machine emits it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Fence, drain and commit these partitions (with [`epoch`](Event::Revoke::epoch)), then
    /// acknowledge with [`ConsumerGroupMembership::revocation_done`](super::ConsumerGroupMembership::revocation_done).
    /// They stay reported as owned until then; the heartbeat that gives them up follows the
    /// acknowledgement.
    Revoke {
        /// Matches the acknowledgement to this revocation.
        id: RevocationId,
        /// The partitions to give up.
        partitions: Vec<TopicPartition>,
        /// The member epoch to commit with.
        epoch: i32,
    },
    /// Start working on these partitions (from their committed offsets).
    Assign {
        /// The new partitions.
        partitions: Vec<TopicPartition>,
        /// The member epoch they were assigned in.
        epoch: i32,
    },
    /// Fence and discard these partitions; commit nothing: another member may own them already.
    Lost {
        /// Every partition the member owned.
        partitions: Vec<TopicPartition>,
        /// Why.
        cause: LostReason,
    },
    /// The membership ended for good; no more requests are sent.
    Fatal(FatalError),
    /// The leave heartbeat was answered (or could not be sent): the member is out of the group.
    Left,
}
