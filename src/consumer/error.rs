//! What the consumer reports to its caller.

use std::error::Error;
use std::fmt;

use crate::basics::error_kind::ErrorKind;
use crate::group::{CommitError, GroupError};
use crate::guard::{CommitFailure, GuardConfigError, PartitionFailure, SeekError};
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
    /// The handler failed on a record `attempts` times (`processing.retries` exhausted) and the
    /// dead-letter callback failed too. Everything before the record was committed; the record
    /// and the rest of its partition will be delivered again.
    DeadLetter {
        /// The record's partition.
        tp: TopicPartition,
        /// The record's offset.
        offset: i64,
        /// How many times the handler ran on it.
        attempts: u32,
        /// The handler's last error.
        handler_error: Box<dyn Error + Send + Sync>,
        /// The dead-letter callback's error (the source).
        error: Box<dyn Error + Send + Sync>,
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
    /// The close's handoff could not commit (or flush) these partitions: their records
    /// finished since the last commit will be processed again by their next owner.
    Handoff(Vec<HandoffFailure>),
    /// A seek was refused (the partition is not this member's, or the offset is negative);
    /// nothing moved.
    Seek(SeekError),
    /// The transactional producer of [`Consumer::run_transactional`](crate::Consumer::run_transactional)
    /// failed for good (fenced by a newer producer with the same `transactional.id`, or a
    /// transaction that could neither commit nor abort), or was refused at
    /// `with_transactions`. Nothing of its open transaction became visible; close the consumer.
    Transaction(crate::producer::ProduceError),
    /// The rebalance listener failed. The rebalance it was told about happened all the same
    /// (a revocation's finished work was committed, an assignment started): the error reports
    /// the listener's own failure, returned from the poll that ran it.
    Listener {
        /// Which call failed: `on_assigned`, `on_revoked` or `on_lost`.
        callback: &'static str,
        /// The listener's error.
        error: Box<dyn Error + Send + Sync>,
    },
}

impl ConsumerError {
    /// The situation this error reports, so that a caller can tell a generation that is over
    /// from a network failure or a broker's refusal without downcasting (see [`ErrorKind`]).
    ///
    /// Group and wire errors are their own kind. A failed commit is
    /// [`ErrorKind::GenerationOver`] when the commit was not sent because the generation ended,
    /// or when the broker refused the request or any partition with a code that
    /// ends the generation (`KafkaCode::ends_generation`); otherwise the kind of the
    /// request's error ([`ErrorKind::Refused`] for a partition's refusal). A starting position
    /// that could not be looked up is [`ErrorKind::Network`]: transient, retried on later polls.
    pub fn kind(&self) -> ErrorKind {
        match self {
            ConsumerError::Group(e) => e.kind(),
            ConsumerError::Wire(e) => e.kind(),
            ConsumerError::Seek(e) => e.kind(),
            ConsumerError::NoOffset { .. }
            | ConsumerError::Guard(_)
            | ConsumerError::Unsupported(_) => ErrorKind::Config,
            ConsumerError::Listener { .. } => ErrorKind::Handler,
            ConsumerError::Transaction(e) => e.kind(),
            ConsumerError::PositionUnknown { .. } => ErrorKind::Network,
            ConsumerError::Commit(failure) => commit_failure_kind(failure),
            ConsumerError::Handoff(failures) => {
                let over = failures
                    .iter()
                    .any(|f| kind_of(f.error.as_ref()) == Some(ErrorKind::GenerationOver));
                if over {
                    ErrorKind::GenerationOver
                } else {
                    ErrorKind::Refused
                }
            }
            ConsumerError::Handler { .. }
            | ConsumerError::HandlerPanicked { .. }
            | ConsumerError::DeadLetter { .. } => ErrorKind::Handler,
            ConsumerError::WorkerGone { .. } | ConsumerError::Thread(_) => ErrorKind::Internal,
        }
    }
}

/// The kind of one commit's error, when it is the group's or the wire's.
fn kind_of(error: &(dyn Error + 'static)) -> Option<ErrorKind> {
    if let Some(e) = error.downcast_ref::<CommitError>() {
        Some(e.kind())
    } else {
        error.downcast_ref::<WireError>().map(WireError::kind)
    }
}

/// The kind of a commit failure, from the group's or the wire's error inside it (the guard's
/// failure type holds them boxed, as the caller's commit function returned them).
fn commit_failure_kind(failure: &CommitFailure) -> ErrorKind {
    let of = kind_of;
    match failure {
        CommitFailure::Request(e) => of(e.as_ref()).unwrap_or(ErrorKind::Refused),
        CommitFailure::Partitions(refused) => {
            let over = refused
                .iter()
                .any(|(_, e)| of(e.as_ref()) == Some(ErrorKind::GenerationOver));
            if over {
                ErrorKind::GenerationOver
            } else {
                ErrorKind::Refused
            }
        }
    }
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
            ConsumerError::Transaction(e) => write!(f, "{e}"),
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
            ConsumerError::DeadLetter {
                tp: partition,
                offset,
                attempts,
                handler_error,
                ..
            } => write!(
                f,
                "the dead-letter callback failed on {partition} offset {offset} after the \
                 handler failed {attempts} time(s) (last: {handler_error}); it will be \
                 redelivered"
            ),
            ConsumerError::WorkerGone { worker } => {
                write!(f, "worker thread {worker} exited without reporting why")
            }
            // Transparent, as Group and Wire.
            ConsumerError::Guard(e) => write!(f, "{e}"),
            ConsumerError::Unsupported(what) => write!(f, "not supported: {what}"),
            ConsumerError::Thread(_) => write!(f, "cannot start a worker thread"),
            ConsumerError::Seek(e) => write!(f, "{e}"),
            ConsumerError::Handoff(failures) => {
                write!(f, "the close could not commit")?;
                for (i, failure) in failures.iter().enumerate() {
                    let sep = if i == 0 { " " } else { ", " };
                    write!(
                        f,
                        "{sep}{} ({:?}: {})",
                        failure.tp,
                        failure.stage,
                        crate::wire::ErrorChain(failure.error.as_ref())
                    )?;
                }
                Ok(())
            }
            ConsumerError::Listener { callback, .. } => {
                write!(f, "the rebalance listener's {callback} failed")
            }
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
            ConsumerError::Handler { error, .. } | ConsumerError::DeadLetter { error, .. } => {
                Some(error.as_ref())
            }
            ConsumerError::Thread(e) => Some(e),
            ConsumerError::Listener { error, .. } => Some(error.as_ref()),
            ConsumerError::Transaction(e) => e.source(),
            ConsumerError::NoOffset { .. }
            | ConsumerError::Seek(_)
            | ConsumerError::Handoff(_)
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

/// One revoked partition whose handoff failed: its flush or its commit. The records processed
/// since its last commit will be processed again by its next owner; an operator (or a checker)
/// uses this to explain those repeats.
#[derive(Debug, Clone)]
pub struct HandoffFailure {
    /// The generation the revocation committed in.
    pub generation_id: i32,
    /// The guard's account of it: the partition, whether the flush or the commit failed, and
    /// the error (the caller's flush error, or the commit's: its `source()` chain reaches the
    /// broker's code or the transport failure; `rebalance_guard::ErrorChain` prints it whole).
    /// Its fields read through this value (`failure.tp`, `failure.stage`, `failure.error`).
    pub failure: PartitionFailure,
}

/// A handoff failure reads as the guard's partition failure it carries, plus its generation.
impl std::ops::Deref for HandoffFailure {
    type Target = PartitionFailure;

    fn deref(&self) -> &PartitionFailure {
        &self.failure
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

    #[test]
    fn kinds_tell_an_ended_generation_the_network_and_a_refusal_apart() {
        let commit_refused =
            |code| WireError::kafka(kafka_protocol::messages::ApiKey::OffsetCommit, code, "");
        let fenced = ConsumerError::Group(GroupError::Fatal(FatalError {
            api: GroupApi::JoinGroup,
            code: KafkaCode::FENCED_INSTANCE_ID,
            reason: String::new(),
        }));
        assert_eq!(fenced.kind(), ErrorKind::GenerationOver);
        let not_sent = ConsumerError::Commit(CommitFailure::Request(Box::new(
            CommitError::GenerationOver {
                generation_id: 3,
                current_generation_id: -1,
            },
        )));
        assert_eq!(not_sent.kind(), ErrorKind::GenerationOver);
        let stale = ConsumerError::Commit(CommitFailure::Partitions(vec![
            (
                tp(),
                Box::new(commit_refused(KafkaCode::STALE_MEMBER_EPOCH)),
            ),
            (
                TopicPartition::new("orders", 4),
                "absent from the OffsetCommit response".into(),
            ),
        ]));
        assert_eq!(stale.kind(), ErrorKind::GenerationOver);
        let too_large = ConsumerError::Commit(CommitFailure::Partitions(vec![(
            tp(),
            Box::new(commit_refused(KafkaCode::OFFSET_METADATA_TOO_LARGE)),
        )]));
        assert_eq!(too_large.kind(), ErrorKind::Refused);
        let lost_connection = ConsumerError::Commit(CommitFailure::Request(Box::new(
            CommitError::Wire(WireError::io(io::Error::from(io::ErrorKind::BrokenPipe))),
        )));
        assert_eq!(lost_connection.kind(), ErrorKind::Network);
        let unreachable = ConsumerError::Group(GroupError::Wire(WireError::NoBrokerAvailable {
            tried: vec!["a:9092: refused".to_string()],
        }));
        assert_eq!(unreachable.kind(), ErrorKind::Network);
        let denied = ConsumerError::Wire(WireError::kafka(
            kafka_protocol::messages::ApiKey::Fetch,
            KafkaCode::TOPIC_AUTHORIZATION_FAILED,
            "",
        ));
        assert_eq!(denied.kind(), ErrorKind::Refused);
        let handler = ConsumerError::HandlerPanicked {
            tp: tp(),
            offset: 1,
            message: String::new(),
        };
        assert_eq!(handler.kind(), ErrorKind::Handler);
        let dead_letter = ConsumerError::DeadLetter {
            tp: tp(),
            offset: 7,
            attempts: 3,
            handler_error: "the exchange said no".into(),
            error: "the dead-letter topic is down".into(),
        };
        assert_eq!(dead_letter.kind(), ErrorKind::Handler);
        let text = dead_letter.to_string();
        assert!(
            text.contains("offset 7") && text.contains("3 time(s)") && text.contains("said no"),
            "{text}"
        );
        assert_eq!(
            dead_letter.source().map(|e| e.to_string()).as_deref(),
            Some("the dead-letter topic is down"),
            "the callback's error is the source"
        );
        assert_eq!(
            ConsumerError::NoOffset { tp: tp() }.kind(),
            ErrorKind::Config
        );
        assert_eq!(
            ConsumerError::WorkerGone { worker: 2 }.kind(),
            ErrorKind::Internal
        );
        assert_eq!(
            ConsumerError::Group(GroupError::Closed).kind(),
            ErrorKind::Closed
        );
    }
}
