//! The sender's part of a transactional producer (rules 8 and 9 of the parent's docs): the
//! partitions it adds to the transaction (version 1) before their first batch, and the abort
//! that fails what it has queued.

use std::time::{Duration, Instant};

use log::debug;

use super::{Batch, Sender};
use crate::producer::error::ProduceError;
use crate::wire::KafkaCode;
use crate::TopicPartition;

impl Sender {
    /// Rule 9: an abort was asked for: every batch not on the wire fails (the caller has
    /// failed those still in the accumulator and waits for the ones on the wire).
    pub(super) fn apply_aborts(&mut self) {
        let Some(aborts) = self.txn.as_ref().map(|l| l.aborts()) else {
            return;
        };
        if aborts == self.aborts_seen {
            return;
        }
        self.aborts_seen = aborts;
        let queued: Vec<Batch> = self
            .flows
            .values_mut()
            .flat_map(|f| {
                f.retrying = false;
                f.retry_at = None;
                f.queue.drain(..).collect::<Vec<_>>()
            })
            .collect();
        if !queued.is_empty() {
            debug!(
                "producer: transaction aborted: {} batch(es) not sent",
                queued.len()
            );
        }
        for b in queued {
            self.settle(b, Err(ProduceError::TransactionAborted));
        }
        if let Some(link) = &self.txn {
            link.aborts_applied(aborts);
        }
    }

    /// Rule 8 (version 1): one AddPartitionsToTxn for every partition with a batch to send that
    /// is not in the transaction yet. Blocks this thread for one request at most (bounded by
    /// `request.timeout.ms`), like a metadata request; a retriable refusal waits a backoff.
    pub(super) fn add_partitions(&mut self, now: Instant) -> Result<(), ProduceError> {
        let Some(link) = self.txn.clone() else {
            return Ok(());
        };
        if !link.adds_partitions() || self.add_partitions_at.is_some_and(|at| now < at) {
            return Ok(());
        }
        let Some(identity) = self.identity else {
            return Ok(());
        };
        let waiting: Vec<TopicPartition> = self
            .flows
            .iter()
            .filter(|(_, f)| !f.queue.is_empty())
            .map(|(tp, _)| tp.clone())
            .collect();
        let mut wanted = link.not_added(&waiting);
        if wanted.is_empty() {
            return Ok(());
        }
        wanted.sort();
        let id = link.transactional_id().to_string();
        let fenced = |code| ProduceError::Fenced {
            transactional_id: id.clone(),
            code,
        };
        let answers = match self.client.add_partitions_to_txn(&id, identity, &wanted) {
            Ok(answers) => answers,
            Err(e) => {
                if let Some(
                    code @ (KafkaCode::PRODUCER_FENCED
                    | KafkaCode::INVALID_PRODUCER_EPOCH
                    | KafkaCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                    | KafkaCode::INVALID_PRODUCER_ID_MAPPING
                    | KafkaCode::INVALID_TXN_STATE),
                ) = e.kafka_code()
                {
                    link.fatal(fenced(code));
                    return Err(fenced(code));
                }
                debug!("producer: AddPartitionsToTxn failed, will retry: {e}");
                self.client.invalidate_transaction_coordinator(&id);
                self.add_partitions_at = Some(now + self.settings.retry_backoff);
                return Ok(());
            }
        };
        let mut retry = false;
        for (tp, code) in answers {
            match code {
                None => link.added(tp),
                Some(
                    code @ (KafkaCode::PRODUCER_FENCED
                    | KafkaCode::INVALID_PRODUCER_EPOCH
                    | KafkaCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                    | KafkaCode::INVALID_PRODUCER_ID_MAPPING
                    | KafkaCode::INVALID_TXN_STATE),
                ) => {
                    link.fatal(fenced(code));
                    return Err(fenced(code));
                }
                Some(code)
                    if code.retriable()
                        || matches!(
                            code,
                            KafkaCode::CONCURRENT_TRANSACTIONS
                                | KafkaCode::OPERATION_NOT_ATTEMPTED
                                | KafkaCode::COORDINATOR_LOAD_IN_PROGRESS
                                | KafkaCode::NOT_COORDINATOR
                                | KafkaCode::COORDINATOR_NOT_AVAILABLE
                        ) =>
                {
                    if matches!(
                        code,
                        KafkaCode::NOT_COORDINATOR | KafkaCode::COORDINATOR_NOT_AVAILABLE
                    ) {
                        self.client.invalidate_transaction_coordinator(&id);
                    }
                    retry = true;
                }
                Some(code) => {
                    // The partition cannot join (authorization, a topic gone): its records fail
                    // and the transaction can only abort.
                    let queued: Vec<Batch> = self
                        .flows
                        .get_mut(&tp)
                        .map(|f| f.queue.drain(..).collect())
                        .unwrap_or_default();
                    for b in queued {
                        let error = ProduceError::Refused {
                            topic: tp.topic.to_string(),
                            partition: tp.partition,
                            code,
                            message: "AddPartitionsToTxn refused the partition".to_string(),
                        };
                        self.settle(b, Err(error));
                    }
                }
            }
        }
        self.add_partitions_at = retry.then(|| {
            // CONCURRENT_TRANSACTIONS clears within milliseconds (Java retries after 20 ms).
            now + Duration::from_millis(20).min(self.settings.retry_backoff)
        });
        Ok(())
    }
}
