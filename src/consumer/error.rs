//! What the consumer reports to its caller.

use std::error::Error;
use std::fmt;

use crate::group::GroupError;
use crate::guard::{CommitFailure, GuardConfigError};
use crate::wire::WireError;
use crate::TopicPartition;

/// Why a consumer call failed. Every variant says what happened to the offsets involved, because
/// that is what the operator of an order or payment worker must know first.
#[derive(Debug)]
#[non_exhaustive]
pub enum ConsumerError {
    /// The group membership failed for good (fenced static member, authorization, ...). Nothing
    /// was committed for the partitions it owned; they are fenced.
    Group(GroupError),
    /// The network failed beyond the client's retries.
    Wire(WireError),
    /// A partition has no committed offset and `auto.offset.reset=none`.
    NoOffset {
        /// The partition without a starting position.
        tp: TopicPartition,
    },
    /// A partition's starting position could not be looked up (the lookup is retried on later
    /// polls; until then the partition is owned but not fetched).
    PositionUnknown {
        /// The partition without a position.
        tp: TopicPartition,
        /// Why the lookup failed.
        reason: String,
    },
    /// An offset commit was refused or failed. The positions were *not* committed and will not
    /// be retried into success: the partitions may belong to another member now, which resumes
    /// from the last committed position (the idempotent sink absorbs the repeat).
    Commit(CommitFailure),
    /// The handler failed on a record. Everything before it was committed; the record and the
    /// rest of its partition will be delivered again.
    Handler {
        /// The record's partition.
        tp: TopicPartition,
        /// The record's offset.
        offset: i64,
        /// The handler's error.
        error: Box<dyn Error + Send + Sync>,
    },
    /// The handler panicked on a record (decoupled mode). Everything before it was committed;
    /// the record and the rest of its partition will be delivered again.
    HandlerPanicked {
        /// The record's partition.
        tp: TopicPartition,
        /// The record's offset.
        offset: i64,
        /// The panic's message, when it had one.
        message: String,
    },
    /// A worker thread is gone without reporting why (decoupled mode).
    WorkerGone {
        /// The worker's index.
        worker: usize,
    },
    /// The guard's settings are invalid.
    Guard(GuardConfigError),
    /// A feature that this version does not implement.
    Unsupported(&'static str),
    /// A worker thread could not be started.
    Thread(std::io::Error),
}

impl fmt::Display for ConsumerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // Transparent: the group's or the wire's error is the message.
            ConsumerError::Group(e) => write!(f, "{e}"),
            ConsumerError::Wire(e) => write!(f, "{e}"),
            ConsumerError::NoOffset { tp: partition } => write!(
                f,
                "{partition} has no committed offset and auto.offset.reset=none"
            ),
            ConsumerError::PositionUnknown {
                tp: partition,
                reason,
            } => {
                write!(f, "no starting position for {partition}: {reason}")
            }
            // The wrapped errors below are the source, not repeated here.
            ConsumerError::Commit(_) => write!(f, "the offsets were not committed (not retried)"),
            ConsumerError::Handler {
                tp: partition,
                offset,
                ..
            } => write!(
                f,
                "handler failed on {partition} offset {offset}; it will be redelivered"
            ),
            ConsumerError::HandlerPanicked {
                tp: partition,
                offset,
                message,
            } => write!(
                f,
                "handler panicked on {partition} offset {offset}: {message}; it will be redelivered"
            ),
            ConsumerError::WorkerGone { worker } => {
                write!(f, "worker thread {worker} exited without reporting why")
            }
            // Transparent, as Group and Wire.
            ConsumerError::Guard(e) => write!(f, "{e}"),
            ConsumerError::Unsupported(what) => write!(f, "not supported: {what}"),
            ConsumerError::Thread(_) => write!(f, "cannot start a worker thread"),
        }
    }
}

/// The commit failure, the handler's error and the thread error are returned here and not
/// repeated by `Display` (print the chain with [`ErrorChain`](crate::ErrorChain)). The group,
/// wire and guard variants are transparent: they display the wrapped error as their own message
/// and return its source.
impl Error for ConsumerError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            ConsumerError::Group(e) => e.source(),
            ConsumerError::Wire(e) => e.source(),
            ConsumerError::Guard(e) => e.source(),
            ConsumerError::Commit(e) => Some(e),
            ConsumerError::Handler { error, .. } => Some(error.as_ref()),
            ConsumerError::Thread(e) => Some(e),
            ConsumerError::NoOffset { .. }
            | ConsumerError::PositionUnknown { .. }
            | ConsumerError::HandlerPanicked { .. }
            | ConsumerError::WorkerGone { .. }
            | ConsumerError::Unsupported(_) => None,
        }
    }
}

impl From<GroupError> for ConsumerError {
    fn from(e: GroupError) -> Self {
        ConsumerError::Group(e)
    }
}

impl From<WireError> for ConsumerError {
    fn from(e: WireError) -> Self {
        ConsumerError::Wire(e)
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;
    use crate::group::{FatalError, GroupApi};
    use crate::wire::error::tests::{assert_chain_shows_each_cause_once, layers};
    use crate::wire::KafkaCode;

    fn tp() -> TopicPartition {
        TopicPartition::new("orders", 3)
    }

    #[test]
    fn every_wrapped_error_is_in_the_chain_once() {
        let wire = || WireError::RetriesExhausted {
            what: "Fetch".to_string(),
            attempts: 2,
            last: Box::new(WireError::Timeout {
                what: "Fetch response".to_string(),
            }),
        };
        let errors = [
            ConsumerError::Wire(wire()),
            ConsumerError::Group(GroupError::Wire(wire())),
            ConsumerError::Group(GroupError::Fatal(FatalError {
                api: GroupApi::Heartbeat,
                code: KafkaCode::GROUP_AUTHORIZATION_FAILED,
                reason: "not authorized to use group \"g\"".to_string(),
            })),
            ConsumerError::Commit(CommitFailure::Request("refused".into())),
            ConsumerError::Handler {
                tp: tp(),
                offset: 7,
                error: "order book corrupt".into(),
            },
            ConsumerError::Thread(io::Error::other("no threads left")),
            ConsumerError::Guard(GuardConfigError {
                setting: "storm_window",
                rule: "must be positive",
            }),
        ];
        for e in &errors {
            assert_chain_shows_each_cause_once(e);
        }
        // Wire and Group are transparent: the wrapped error's layers, no extra one.
        assert_eq!(
            layers(&errors[0]),
            ["Fetch failed after 2 attempts", "timed out: Fetch response"]
        );
        assert_eq!(
            layers(&errors[1]),
            [
                "group coordination failed",
                "Fetch failed after 2 attempts",
                "timed out: Fetch response"
            ]
        );
        assert_eq!(
            layers(&errors[4]),
            [
                "handler failed on orders-3 offset 7; it will be redelivered",
                "order book corrupt"
            ]
        );
        assert_eq!(layers(&errors[5])[1], "no threads left");
    }
}
