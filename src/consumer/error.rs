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
            ConsumerError::Commit(e) => write!(f, "{e} (not retried)"),
            ConsumerError::Handler {
                tp: partition,
                offset,
                error,
            } => write!(
                f,
                "handler failed on {partition} offset {offset}: {error}; it will be redelivered"
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
            ConsumerError::Guard(e) => write!(f, "{e}"),
            ConsumerError::Unsupported(what) => write!(f, "not supported: {what}"),
            ConsumerError::Thread(e) => write!(f, "cannot start a worker thread: {e}"),
        }
    }
}

impl Error for ConsumerError {}

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
