//! Why the membership, or one of its commits, cannot go on: the errors the group layer hands to
//! the consumer.

use std::fmt;

use super::assignor::{JoinProtocolError, LeaderError};
use super::outcome::FatalError;
use super::pattern::PatternError;
use super::subscription::DecodeError;
use crate::basics::error_kind::ErrorKind;
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
    /// The subscription pattern (`Consumer::subscribe_pattern`) is not a valid regular
    /// expression; refused at subscribe.
    Pattern(PatternError),
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
    /// The commit thread (which sends every offset commit of the member) died, with this panic
    /// message: nothing could be committed any more, so the assignment was fenced as lost at
    /// once, and every later poll returns this. Close the consumer and start a new one.
    CommitThreadDied(String),
    /// The member was closed.
    Closed,
}

impl GroupError {
    /// The situation this error reports, so that a caller can tell a membership that is over
    /// from a network failure or a broker's refusal without matching the wrapped errors (see
    /// [`ErrorKind`]): a fatal code that [ends the generation](crate::error::KafkaCode::ends_generation)
    /// (FENCED_INSTANCE_ID) is [`ErrorKind::GenerationOver`], any other fatal code
    /// [`ErrorKind::Refused`]; a wire error is its own kind.
    pub fn kind(&self) -> ErrorKind {
        match self {
            GroupError::Fatal(e) => e.code.kind(),
            GroupError::Wire(e) => e.kind(),
            GroupError::Strategy(_) | GroupError::Pattern(_) => ErrorKind::Config,
            GroupError::Leader(_) | GroupError::UnknownAssignor(_) | GroupError::Assignment(_) => {
                ErrorKind::Protocol
            }
            GroupError::Thread(_)
            | GroupError::MembershipThreadDied(_)
            | GroupError::CommitThreadDied(_) => ErrorKind::Internal,
            GroupError::Closed => ErrorKind::Closed,
        }
    }
}

impl fmt::Display for GroupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // Transparent: the fatal error's message is the message.
            GroupError::Fatal(e) => write!(f, "{e}"),
            // The wrapped errors below are the source, not repeated here.
            GroupError::Wire(_) => write!(f, "group coordination failed"),
            GroupError::Strategy(_) => {
                write!(f, "partition.assignment.strategy cannot be used")
            }
            GroupError::Pattern(_) => write!(f, "the subscription pattern cannot be used"),
            GroupError::Leader(_) => write!(f, "as group leader, the assignment failed"),
            GroupError::UnknownAssignor(name) => {
                write!(
                    f,
                    "the coordinator selected assignor {name:?}, which we did not offer"
                )
            }
            GroupError::Assignment(_) => {
                write!(f, "malformed assignment from the coordinator")
            }
            GroupError::Thread(_) => write!(f, "cannot start the heartbeat thread"),
            GroupError::MembershipThreadDied(message) => write!(
                f,
                "the membership thread died ({message}); its partitions are fenced"
            ),
            GroupError::CommitThreadDied(message) => write!(
                f,
                "the commit thread died ({message}); its partitions are fenced"
            ),
            GroupError::Closed => write!(f, "the group member is closed"),
        }
    }
}

/// Every variant that wraps an error returns it here, and its `Display` does not repeat it
/// (print the chain with [`ErrorChain`](crate::ErrorChain)); except [`GroupError::Fatal`], which
/// is transparent: it displays the [`FatalError`] (a leaf) as its own message.
impl std::error::Error for GroupError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            GroupError::Fatal(e) => e.source(),
            GroupError::Wire(e) => Some(e),
            GroupError::Strategy(e) => Some(e),
            GroupError::Pattern(e) => Some(e),
            GroupError::Leader(e) => Some(e),
            GroupError::Assignment(e) => Some(e),
            GroupError::Thread(e) => Some(e),
            GroupError::UnknownAssignor(_)
            | GroupError::MembershipThreadDied(_)
            | GroupError::CommitThreadDied(_)
            | GroupError::Closed => None,
        }
    }
}

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
    /// The commit thread, which sends every commit of the member, is gone (it panicked, or
    /// could not be started): nothing was sent. The member's next poll fails with
    /// [`GroupError::CommitThreadDied`].
    ThreadGone,
    /// The offsets travel in a transaction (`Consumer::run_transactional`), and the producer
    /// could not put them in it: fenced by a newer producer, the coordinator unreachable for
    /// `max.block.ms`, the transaction already doomed. Nothing of it commits.
    Transaction {
        /// The situation, as the producer's error names it.
        kind: ErrorKind,
        /// The producer's error.
        error: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl CommitError {
    /// The situation this error reports (see [`ErrorKind`]): a commit not sent because the
    /// member is outside the generation is [`ErrorKind::GenerationOver`]; a wire error is its
    /// own kind.
    pub fn kind(&self) -> ErrorKind {
        match self {
            CommitError::NotInGeneration { .. } | CommitError::GenerationOver { .. } => {
                ErrorKind::GenerationOver
            }
            CommitError::Wire(e) => e.kind(),
            CommitError::ThreadGone => ErrorKind::Internal,
            CommitError::Transaction { kind, .. } => *kind,
        }
    }
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
            // Transparent: the wire error names the request (OffsetCommit) and what went wrong.
            CommitError::Wire(e) => write!(f, "{e}"),
            CommitError::ThreadGone => {
                write!(f, "not committing: the commit thread is gone")
            }
            CommitError::Transaction { error, .. } => {
                write!(f, "the transaction carrying the offsets failed: {error}")
            }
        }
    }
}

/// [`CommitError::Wire`] is transparent: it displays the wire error (which names the request,
/// OffsetCommit) and returns that error's source, so that the commit failures built from it,
/// which display their cause, keep every detail; the other variants are leaves.
impl std::error::Error for CommitError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CommitError::Wire(e) => e.source(),
            CommitError::Transaction { error, .. } => Some(error.as_ref()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error;
    use std::io;

    use super::*;
    use crate::group::assignor::StrategyError;
    use crate::group::outcome::GroupApi;
    use crate::wire::error::tests::{assert_chain_shows_each_cause_once, layers};
    use crate::wire::KafkaCode;

    fn reset() -> WireError {
        WireError::io(io::Error::new(
            io::ErrorKind::ConnectionReset,
            "reset by peer",
        ))
    }

    #[test]
    fn every_wrapped_error_is_in_the_chain_once() {
        let errors = [
            GroupError::Wire(reset()),
            GroupError::Strategy(JoinProtocolError::Strategies(StrategyError::Empty)),
            GroupError::Assignment(DecodeError::NegativeVersion(-1)),
            GroupError::Thread(io::Error::other("no threads left")),
            GroupError::Fatal(FatalError {
                api: GroupApi::JoinGroup,
                code: KafkaCode::FENCED_INSTANCE_ID,
                reason: "group.instance.id \"w-7\" is taken".to_string(),
            }),
        ];
        for e in &errors {
            assert_chain_shows_each_cause_once(e);
        }
        assert_eq!(
            layers(&errors[0]),
            [
                "group coordination failed",
                "I/O error (connection reset)",
                "reset by peer"
            ]
        );
        assert!(layers(&errors[1])[1].contains("names no assignor"));
        // Fatal is transparent: its message is the fatal error's, with nothing under it.
        assert!(errors[4].to_string().contains("\"w-7\""));
        assert!(errors[4].source().is_none());
    }

    #[test]
    fn kinds_follow_the_fatal_code_and_the_wrapped_error() {
        let fatal = |code| {
            GroupError::Fatal(FatalError {
                api: GroupApi::Heartbeat,
                code,
                reason: String::new(),
            })
        };
        assert_eq!(
            fatal(KafkaCode::FENCED_INSTANCE_ID).kind(),
            ErrorKind::GenerationOver
        );
        assert_eq!(
            fatal(KafkaCode::GROUP_AUTHORIZATION_FAILED).kind(),
            ErrorKind::Refused
        );
        assert_eq!(fatal(KafkaCode(111)).kind(), ErrorKind::Refused);
        assert_eq!(GroupError::Wire(reset()).kind(), ErrorKind::Network);
        assert_eq!(
            GroupError::Wire(WireError::Timeout {
                what: "Heartbeat response".to_string()
            })
            .kind(),
            ErrorKind::Network
        );
        assert_eq!(
            GroupError::Strategy(JoinProtocolError::NoTopics).kind(),
            ErrorKind::Config
        );
        assert_eq!(
            GroupError::Assignment(DecodeError::NegativeVersion(-1)).kind(),
            ErrorKind::Protocol
        );
        assert_eq!(
            GroupError::MembershipThreadDied("boom".to_string()).kind(),
            ErrorKind::Internal
        );
        assert_eq!(GroupError::Closed.kind(), ErrorKind::Closed);
    }

    #[test]
    fn a_commit_outside_its_generation_is_a_generation_over() {
        let not_in = CommitError::NotInGeneration {
            group_id: "g".to_string(),
        };
        let over = CommitError::GenerationOver {
            generation_id: 4,
            current_generation_id: 5,
        };
        assert_eq!(not_in.kind(), ErrorKind::GenerationOver);
        assert_eq!(over.kind(), ErrorKind::GenerationOver);
        let refused = WireError::kafka(
            kafka_protocol::messages::ApiKey::OffsetCommit,
            KafkaCode::ILLEGAL_GENERATION,
            "",
        );
        assert_eq!(CommitError::Wire(refused).kind(), ErrorKind::GenerationOver);
        assert_eq!(CommitError::Wire(reset()).kind(), ErrorKind::Network);
    }

    #[test]
    fn a_commit_error_shows_the_wire_error_it_wraps() {
        let e = CommitError::Wire(reset());
        assert_eq!(e.to_string(), "I/O error (connection reset)");
        assert_eq!(
            layers(&e),
            ["I/O error (connection reset)", "reset by peer"]
        );
    }
}
