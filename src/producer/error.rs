//! What the producer reports: why a `send` was refused, or why a record was not written.

use std::error::Error;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::basics::error_kind::ErrorKind;
use crate::config::ConfigError;
use crate::wire::{KafkaCode, WireError};

/// Why a producer call failed or a record was not written.
///
/// A record whose handle reports an error was not acknowledged: with idempotence it was written
/// at most once, and whether it was written at all is unknown only for
/// [`ProduceError::DeliveryTimeout`] (its last request may have been executed). Every record of
/// one batch reports the same error, which is why the type is cheap to clone.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum ProduceError {
    /// The configuration was refused (the setting is named).
    Config(ConfigError),
    /// `buffer.memory` stayed full for `max.block.ms`: the brokers take records slower than
    /// they are sent. Nothing of this record was buffered.
    BufferFull {
        /// How long `send` waited.
        waited: Duration,
        /// `buffer.memory`.
        buffer_memory: usize,
    },
    /// The topic's metadata did not arrive within `max.block.ms` (the topic does not exist and
    /// is not created automatically, or no broker answered).
    MetadataTimeout {
        /// The topic.
        topic: String,
        /// How long `send` waited.
        waited: Duration,
        /// What the last metadata said of the topic, if it said anything.
        last: Option<String>,
    },
    /// The record names a partition the topic does not have.
    UnknownPartition {
        /// The topic.
        topic: String,
        /// The partition asked for.
        partition: i32,
        /// How many the topic has.
        partitions: i32,
    },
    /// The record is larger than `max.request.size` or `buffer.memory` (as encoded, bounded
    /// from above).
    RecordTooLarge {
        /// Its encoded size.
        size: usize,
        /// The smaller of `max.request.size` and `buffer.memory`.
        max_request_size: usize,
    },
    /// The leader refused the record's batch with an error no retry fixes (authorization, a
    /// record too large for the topic, a corrupt or invalid record).
    Refused {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The error code.
        code: KafkaCode,
        /// The broker's message, if any.
        message: String,
    },
    /// The record was not acknowledged within `delivery.timeout.ms`, retries included. Its last
    /// request may have been written: read the partition to know.
    DeliveryTimeout {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// Requests sent for its batch.
        attempts: u32,
        /// The last error, if a request failed.
        last: Option<String>,
    },
    /// The producer cannot go on (its producer id was refused, its sender thread is gone): close
    /// it and start a new one.
    Fatal {
        /// Why.
        reason: String,
    },
    /// Another producer started with the same `transactional.id` (its InitProducerId bumped
    /// the epoch), or the coordinator no longer knows this producer's epoch: this one is a
    /// zombie and nothing it sends can commit. Close it; the newer producer goes on.
    Fenced {
        /// The `transactional.id`.
        transactional_id: String,
        /// What the broker answered (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH, ...).
        code: KafkaCode,
    },
    /// The open transaction cannot commit: a record of it was not written, the broker answered
    /// TRANSACTION_ABORTABLE, or the group refused its offsets. Abort it (nothing of it becomes
    /// visible to `read_committed` readers), then begin a new one.
    TransactionAbortable {
        /// Why.
        reason: String,
    },
    /// The record's transaction was aborted before the record was acknowledged: it was never
    /// visible to `read_committed` readers.
    TransactionAborted,
    /// A transaction call out of order: `begin_transaction` twice, a `send` or a commit
    /// outside a transaction, a commit after an abortable error, any transaction call on a
    /// producer without `transactional.id`.
    TransactionState {
        /// The call.
        operation: &'static str,
        /// The state the producer was in.
        state: &'static str,
    },
    /// A transaction request did not succeed within `max.block.ms` (the coordinator kept
    /// moving, loading, or answering CONCURRENT_TRANSACTIONS). The call may be made again.
    TransactionTimeout {
        /// The call.
        operation: &'static str,
        /// How long it tried.
        waited: Duration,
        /// The last failure.
        last: String,
    },
    /// A wire error while starting (no broker reachable, refused credentials).
    Wire(Arc<WireError>),
    /// The producer was closed before the record was written (or the call came after close).
    Closed,
}

impl ProduceError {
    /// The situation this error reports, named as every error of the crate names it.
    pub fn kind(&self) -> ErrorKind {
        match self {
            ProduceError::Config(e) => e.kind(),
            ProduceError::BufferFull { .. }
            | ProduceError::MetadataTimeout { .. }
            | ProduceError::DeliveryTimeout { .. } => ErrorKind::Network,
            ProduceError::UnknownPartition { .. } | ProduceError::RecordTooLarge { .. } => {
                ErrorKind::Config
            }
            ProduceError::Refused { .. } => ErrorKind::Refused,
            ProduceError::Fenced { .. } | ProduceError::TransactionAborted => {
                ErrorKind::GenerationOver
            }
            ProduceError::TransactionAbortable { .. } => ErrorKind::Refused,
            ProduceError::TransactionState { .. } => ErrorKind::Config,
            ProduceError::TransactionTimeout { .. } => ErrorKind::Network,
            ProduceError::Fatal { .. } => ErrorKind::Internal,
            ProduceError::Wire(e) => e.kind(),
            ProduceError::Closed => ErrorKind::Closed,
        }
    }
}

impl fmt::Display for ProduceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProduceError::Config(e) => write!(f, "{e}"),
            ProduceError::BufferFull {
                waited,
                buffer_memory,
            } => write!(
                f,
                "buffer.memory ({buffer_memory} bytes) stayed full for {waited:?} \
                 (max.block.ms): the brokers take records slower than they are sent"
            ),
            ProduceError::MetadataTimeout {
                topic,
                waited,
                last,
            } => {
                write!(
                    f,
                    "no metadata for topic {topic} within {waited:?} (max.block.ms)"
                )?;
                match last {
                    Some(last) => write!(f, ": {last}"),
                    None => Ok(()),
                }
            }
            ProduceError::UnknownPartition {
                topic,
                partition,
                partitions,
            } => write!(
                f,
                "topic {topic} has {partitions} partitions; partition {partition} does not exist"
            ),
            ProduceError::RecordTooLarge {
                size,
                max_request_size,
            } => write!(
                f,
                "a record of {size} bytes exceeds max.request.size or buffer.memory \
                 ({max_request_size})"
            ),
            ProduceError::Refused {
                topic,
                partition,
                code,
                message,
            } => write!(
                f,
                "{topic}-{partition}: the leader refused the batch: {} {message}",
                code.name()
            ),
            ProduceError::DeliveryTimeout {
                topic,
                partition,
                attempts,
                last,
            } => {
                write!(
                    f,
                    "{topic}-{partition}: not acknowledged within delivery.timeout.ms \
                     ({attempts} requests sent)"
                )?;
                match last {
                    Some(last) => write!(f, "; last error: {last}"),
                    None => Ok(()),
                }
            }
            ProduceError::Fatal { reason } => write!(f, "the producer cannot go on: {reason}"),
            ProduceError::Fenced {
                transactional_id,
                code,
            } => write!(
                f,
                "transactional.id {transactional_id}: fenced ({}): a newer producer with the \
                 same id took over, or this one's epoch is no longer valid; close this producer",
                code.name()
            ),
            ProduceError::TransactionAbortable { reason } => write!(
                f,
                "the open transaction cannot commit and must be aborted: {reason}"
            ),
            ProduceError::TransactionAborted => {
                f.write_str("the record's transaction was aborted before it was acknowledged")
            }
            ProduceError::TransactionState { operation, state } => {
                write!(f, "{operation} is not allowed now: the producer is {state}")
            }
            ProduceError::TransactionTimeout {
                operation,
                waited,
                last,
            } => write!(
                f,
                "{operation} did not succeed within {waited:?} (max.block.ms); last: {last}"
            ),
            ProduceError::Wire(e) => write!(f, "{e}"),
            ProduceError::Closed => f.write_str("the producer is closed"),
        }
    }
}

impl Error for ProduceError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            ProduceError::Config(e) => Some(e),
            ProduceError::Wire(e) => Some(e.as_ref()),
            _ => None,
        }
    }
}

impl From<ConfigError> for ProduceError {
    fn from(e: ConfigError) -> Self {
        ProduceError::Config(e)
    }
}

impl From<WireError> for ProduceError {
    fn from(e: WireError) -> Self {
        ProduceError::Wire(Arc::new(e))
    }
}
