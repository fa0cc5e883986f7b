//! Why the membership, or one of its commits, cannot go on: the errors the group layer hands to
//! the consumer.

use std::fmt;

use super::assignor::{JoinProtocolError, LeaderError};
use super::consumer_protocol::DecodeError;
use super::outcome::FatalError;
use crate::wire::WireError;

/// Why the membership cannot go on.
#[derive(Debug)]
pub enum GroupError {
    /// The coordinator refused us for good, under either protocol (FENCED_INSTANCE_ID,
    /// authorization; under the consumer group protocol also UNRELEASED_INSTANCE_ID,
    /// UNSUPPORTED_ASSIGNOR, ...): [`FatalError::api`] names the request, and the reason what to
    /// change.
    Fatal(FatalError),
    /// The network or the broker failed beyond the client's retries.
    Wire(WireError),
    /// `partition.assignment.strategy` cannot be used with this subscription.
    Strategy(JoinProtocolError),
    /// As leader, we could not compute or encode the assignment.
    Leader(LeaderError),
    /// The coordinator picked an assignor we did not offer.
    UnknownAssignor(String),
    /// The assignment bytes the coordinator relayed are malformed.
    Assignment(DecodeError),
    /// The heartbeat thread could not be started.
    Thread(std::io::Error),
    /// The membership thread (the heartbeat thread, or the consumer group protocol's) died,
    /// with this panic message: nothing keeps the session alive or follows the group any more,
    /// so the assignment was fenced as lost at once, and every later poll returns this. Close
    /// the consumer and start a new one.
    MembershipThreadDied(String),
    /// The member was closed.
    Closed,
}

impl fmt::Display for GroupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GroupError::Fatal(e) => write!(f, "{e}"),
            GroupError::Wire(e) => write!(f, "group coordination failed: {e}"),
            GroupError::Strategy(e) => write!(f, "partition.assignment.strategy: {e}"),
            GroupError::Leader(e) => write!(f, "as group leader: {e}"),
            GroupError::UnknownAssignor(name) => {
                write!(
                    f,
                    "the coordinator selected assignor {name:?}, which we did not offer"
                )
            }
            GroupError::Assignment(e) => {
                write!(f, "malformed assignment from the coordinator: {e}")
            }
            GroupError::Thread(e) => write!(f, "cannot start the heartbeat thread: {e}"),
            GroupError::MembershipThreadDied(message) => write!(
                f,
                "the membership thread died ({message}); its partitions are fenced"
            ),
            GroupError::Closed => write!(f, "the group member is closed"),
        }
    }
}

impl std::error::Error for GroupError {}

impl From<WireError> for GroupError {
    fn from(e: WireError) -> Self {
        GroupError::Wire(e)
    }
}

/// Why a group commit was not made.
#[derive(Debug)]
pub enum CommitError {
    /// The member is not in a generation (it lost its assignment, or has not joined yet). A
    /// commit now would carry generation -1 and no member id, which Kafka accepts for an empty
    /// group as if it came from outside any group: so none is sent.
    NotInGeneration {
        /// The group.
        group_id: String,
    },
    /// The generation this commit was made for is over: the member lost its assignment or
    /// rejoined since, and the partitions may be another member's now. Nothing was sent.
    GenerationOver {
        /// The generation the commit was made for.
        generation_id: i32,
        /// The member's generation now (-1 when it has none).
        current_generation_id: i32,
    },
    /// The request failed.
    Wire(WireError),
}

impl fmt::Display for CommitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CommitError::NotInGeneration { group_id } => write!(
                f,
                "not committing: not in a generation of group {group_id:?} (the assignment was \
                 lost or not received yet)"
            ),
            CommitError::GenerationOver {
                generation_id,
                current_generation_id,
            } => write!(
                f,
                "not committing: generation {generation_id} is over (now {current_generation_id})"
            ),
            CommitError::Wire(e) => write!(f, "offset commit failed: {e}"),
        }
    }
}

impl std::error::Error for CommitError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CommitError::Wire(e) => Some(e),
            _ => None,
        }
    }
}
