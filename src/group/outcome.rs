//! What a coordinator's answer means for the membership, in the terms both group protocols
//! share: which request it answered ([`GroupApi`]), what the member must do about its error code
//! ([`ErrorAction`]), why the membership cannot go on ([`FatalError`]) and why an assignment was
//! lost ([`LostReason`]).
//!
//! Why one place: the classic protocol (`membership::classify`, JoinGroup/SyncGroup/Heartbeat/
//! OffsetCommit) and the heartbeat protocols (`heartbeat_errors::classify`, ConsumerGroupHeartbeat
//! and ShareGroupHeartbeat) each keep their own table of codes, because Kafka gives the same code
//! different meanings under each; but what the tables decide, and what reaches the consumer and
//! its listener, is one vocabulary, so a caller handles a fatal error or a loss the same way
//! whichever protocol the group runs.

use std::fmt;

use crate::wire::KafkaCode;

/// The group requests whose error codes the protocols' tables classify.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GroupApi {
    /// JoinGroup (classic).
    JoinGroup,
    /// SyncGroup (classic).
    SyncGroup,
    /// Heartbeat (classic).
    Heartbeat,
    /// LeaveGroup (classic).
    LeaveGroup,
    /// OffsetCommit (a per-partition error code).
    OffsetCommit,
    /// ConsumerGroupHeartbeat (the consumer group protocol, KIP-848).
    ConsumerGroupHeartbeat,
    /// ShareGroupHeartbeat (share groups, KIP-932).
    ShareGroupHeartbeat,
}

impl fmt::Display for GroupApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GroupApi::JoinGroup => "JoinGroup",
            GroupApi::SyncGroup => "SyncGroup",
            GroupApi::Heartbeat => "Heartbeat",
            GroupApi::LeaveGroup => "LeaveGroup",
            GroupApi::OffsetCommit => "OffsetCommit",
            GroupApi::ConsumerGroupHeartbeat => "ConsumerGroupHeartbeat",
            GroupApi::ShareGroupHeartbeat => "ShareGroupHeartbeat",
        })
    }
}

/// What the member must do about a group response's error code: the one shape of both
/// protocols' tables (`membership::classify` for the classic protocol,
/// `heartbeat_errors::classify` for ConsumerGroupHeartbeat and ShareGroupHeartbeat).
///
/// The classic table gives every variant. The consumer group table never gives
/// [`Proceed`](ErrorAction::Proceed) (it classifies errors only) nor
/// [`Rejoin`](ErrorAction::Rejoin) (a KIP-848 member does not rejoin without losing: the next
/// heartbeat brings the new target).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ErrorAction {
    /// No error, or one that changes nothing (LeaveGroup errors: we are leaving either way).
    Proceed,
    /// Send the same request again after the retry backoff, to the same coordinator.
    Retry,
    /// The coordinator moved or is unavailable: find it again (FindCoordinator), then carry on
    /// (the consumer group protocol resends its full heartbeat). Not a reason to give up the
    /// assignment.
    RediscoverCoordinator,
    /// The group is rebalancing (or, for MEMBER_ID_REQUIRED, the broker gave us a member id to
    /// join with): rejoin. Under the cooperative protocol we keep our partitions meanwhile.
    Rejoin,
    /// Our membership is gone: report every owned partition as *lost* (fence, no commit), reset
    /// the generation (classic) or the epoch to 0 (consumer group protocol), then join again.
    ResetAndRejoin {
        /// The broker no longer knows the member at all (UNKNOWN_MEMBER_ID), not only its
        /// generation or epoch (ILLEGAL_GENERATION, FENCED_MEMBER_EPOCH keep it). The classic
        /// member then drops its member id too (the broker assigns a new one); the consumer
        /// group member keeps its own, client-generated id.
        member_unknown: bool,
    },
    /// Nothing the member can fix: surface this to the caller.
    Fatal(FatalError),
}

/// Why the assignment was lost rather than handed off, under either protocol: the partitions
/// were fenced and nothing was committed for them, since another member may own them already.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LostReason {
    /// The poll thread did not poll within `max.poll.interval.ms`; we left the group.
    PollTimeout,
    /// No successful heartbeat for `session.timeout.ms` (the consumer group protocol: for the
    /// session bound): the coordinator has very likely evicted us, so we stop processing before
    /// it hands the partitions to someone else.
    SessionExpired,
    /// The coordinator answered with this error code: classic ILLEGAL_GENERATION,
    /// UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID; consumer group protocol FENCED_MEMBER_EPOCH,
    /// UNKNOWN_MEMBER_ID. Also a code that ended the membership for good, under either protocol:
    /// the [`FatalError`] follows.
    Fenced(KafkaCode),
    /// The consumer group protocol: a revocation was not finished within the rebalance timeout
    /// (`max.poll.interval.ms`), after which the broker fences the member.
    RevocationTimedOut,
    /// The membership thread died: nothing renews the session or follows the group any more,
    /// so the coordinator will give the partitions to someone else.
    MembershipThreadDied,
    /// The consumer group protocol: the consumer held partitions its membership does not own
    /// (the broker did not assign them to this member) for several heartbeat intervals; found
    /// by the membership's ownership check, which fences them rather than let two members
    /// work on one partition.
    NotOwnedByTheMembership,
    /// The commit thread died: nothing this member does could be committed any more.
    CommitThreadDied,
}

/// An error code that ends the membership until the caller intervenes (the configuration, the
/// ACLs or the cluster must change), under either protocol, with a reason that says what to
/// check.
///
/// Displayed as `<api> failed with <code name> (<code>): <reason>`, e.g. `JoinGroup failed with
/// FencedInstanceId (82): group.instance.id "w-7" is registered by another member ...`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FatalError {
    /// The request that failed.
    pub api: GroupApi,
    /// The Kafka error code.
    pub code: KafkaCode,
    /// What it means and what to change (with the broker's own message, when it sent one).
    pub reason: String,
}

impl fmt::Display for FatalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `code` shows as Kafka's name and the number, e.g. "FencedInstanceId (82)".
        write!(f, "{} failed with {}: {}", self.api, self.code, self.reason)
    }
}

/// A leaf: the code and the reason are the whole story.
impl std::error::Error for FatalError {}

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
            Self::NotOwnedByTheMembership => {
                f.write_str("held by the consumer but not owned by the membership")
            }
            Self::CommitThreadDied => f.write_str("the commit thread died"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fatal_error_names_the_request_the_code_and_the_reason() {
        let e = FatalError {
            api: GroupApi::ConsumerGroupHeartbeat,
            code: KafkaCode(111),
            reason: "another member holds the instance id".to_string(),
        };
        assert_eq!(
            e.to_string(),
            "ConsumerGroupHeartbeat failed with UnreleasedInstanceId (111): another member \
             holds the instance id"
        );
    }
}
