//! Why a member's partitions were taken away without a handoff: one reason type for both group
//! protocols, carried from the thread that detected the loss into the guard's log line and the
//! consumer's report.

use std::fmt;

use crate::wire::KafkaCode;

/// Why the assignment was lost rather than handed off.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LostReason {
    /// The poll thread did not poll within `max.poll.interval.ms`; we left the group.
    PollTimeout,
    /// No successful heartbeat for `session.timeout.ms`: the coordinator has very likely evicted
    /// us, so we stop processing before it hands the partitions to someone else.
    SessionExpired,
    /// The coordinator answered with this error code (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
    /// FENCED_INSTANCE_ID; under KIP-848 FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID).
    Fenced(KafkaCode),
    /// KIP-848: a revocation was not finished within the rebalance timeout
    /// (`max.poll.interval.ms`), after which the broker fences the member.
    RevocationTimedOut,
    /// The membership thread died: nothing renews the session or follows the group any more,
    /// so the coordinator will give the partitions to someone else.
    MembershipThreadDied,
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PollTimeout => f.write_str("max.poll.interval.ms passed without a poll"),
            Self::SessionExpired => f.write_str("no answered heartbeat for session.timeout.ms"),
            Self::Fenced(code) => write!(f, "the coordinator answered {code}"),
            Self::RevocationTimedOut => {
                f.write_str("a revocation was not finished within the rebalance timeout")
            }
            Self::MembershipThreadDied => f.write_str("the membership thread died"),
        }
    }
}
