//! A record's delivery: one outcome per batch, shared by the handles of its records.
//!
//! Why per batch: every record of a batch is acknowledged (or refused) together, at consecutive
//! offsets from the batch's base offset, so one allocation and one lock per batch serve all of its
//! records; a handle is an index into it.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::error::ProduceError;

/// Where a record was written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordMetadata {
    /// The topic.
    pub topic: Arc<str>,
    /// The partition.
    pub partition: i32,
    /// The record's offset; -1 when the broker did not say (acks=0, or a retry that older brokers
    /// answer with DUPLICATE_SEQUENCE_NUMBER).
    pub offset: i64,
    /// The record's timestamp as sent (ms since the epoch).
    pub timestamp: i64,
}

/// The outcome of one batch: the base offset, or the error every record of it reports.
#[derive(Debug)]
pub(crate) struct BatchOutcome {
    topic: Arc<str>,
    partition: i32,
    result: Mutex<Option<Result<i64, ProduceError>>>,
    done: Condvar,
}

impl BatchOutcome {
    /// An outcome not known yet.
    pub(crate) fn new(topic: Arc<str>, partition: i32) -> Arc<Self> {
        Arc::new(BatchOutcome {
            topic,
            partition,
            result: Mutex::new(None),
            done: Condvar::new(),
        })
    }

    /// Settles the batch (once: a later call changes nothing) and wakes its waiters.
    pub(crate) fn settle(&self, result: Result<i64, ProduceError>) {
        let mut slot = self.result.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.is_none() {
            *slot = Some(result);
            self.done.notify_all();
        }
    }
}

/// What [`Producer::send`](super::Producer::send) returns: the record's acknowledgement, to wait
/// for or to look at later. Dropping it changes nothing: the record is still written.
#[derive(Debug, Clone)]
pub struct DeliveryHandle {
    outcome: Arc<BatchOutcome>,
    index: u32,
    timestamp: i64,
}

impl DeliveryHandle {
    pub(crate) fn new(outcome: Arc<BatchOutcome>, index: u32, timestamp: i64) -> Self {
        DeliveryHandle {
            outcome,
            index,
            timestamp,
        }
    }

    /// The partition the record was put in.
    pub fn partition(&self) -> i32 {
        self.outcome.partition
    }

    /// Blocks until the record is acknowledged or has failed. Bounded: every record settles
    /// within `delivery.timeout.ms` of its `send`.
    pub fn wait(&self) -> Result<RecordMetadata, ProduceError> {
        let mut slot = self
            .outcome
            .result
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(result) = slot.as_ref() {
                return self.metadata(result);
            }
            slot = self
                .outcome
                .done
                .wait(slot)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Like [`wait`](Self::wait) for at most `timeout`; `None` when the record is not settled
    /// by then.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<Result<RecordMetadata, ProduceError>> {
        let until = Instant::now() + timeout;
        let mut slot = self
            .outcome
            .result
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(result) = slot.as_ref() {
                return Some(self.metadata(result));
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            slot = self
                .outcome
                .done
                .wait_timeout(slot, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// The outcome if the record is settled, without waiting.
    pub fn try_result(&self) -> Option<Result<RecordMetadata, ProduceError>> {
        self.wait_timeout(Duration::ZERO)
    }

    fn metadata(&self, result: &Result<i64, ProduceError>) -> Result<RecordMetadata, ProduceError> {
        match result {
            Ok(base) => Ok(RecordMetadata {
                topic: Arc::clone(&self.outcome.topic),
                partition: self.outcome.partition,
                offset: if *base < 0 {
                    -1
                } else {
                    base + i64::from(self.index)
                },
                timestamp: self.timestamp,
            }),
            Err(e) => Err(e.clone()),
        }
    }
}
