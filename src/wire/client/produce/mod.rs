//! Produce on the wire: the producer's per-broker lanes ([`lane`]), the producer id it writes
//! under ([`Client::init_producer_id`]), the transaction requests ([`txn`]), and a one-shot
//! append to one partition for tests and tools that need exact batches (uncompressed, acks=all,
//! one batch per call, not idempotent: an application writes through the crate's `Producer`).

pub(crate) mod lane;
pub(crate) mod txn;

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use kafka_protocol::messages::{self as msg, produce_request, ApiKey, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::Client;
use crate::wire::error::{broker_text, KafkaCode, Result, WireError};
use crate::wire::records::{self, ProduceRecord};
use crate::TopicPartition;

impl Client {
    /// Appends `records` to `tp` as one uncompressed batch with acks=all; returns the base offset
    /// the leader assigned. For tests and tools that need one exact batch; it is not idempotent
    /// (a retry after a lost answer writes the batch twice): applications use `Producer`.
    pub fn produce(&mut self, tp: &TopicPartition, records: &[ProduceRecord]) -> Result<i64> {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let batch = records::encode_batch(records, now_ms)?;
        self.retrying("Produce", |c| c.produce_once(tp, batch.clone()))
    }

    fn produce_once(&mut self, tp: &TopicPartition, batch: Bytes) -> Result<i64> {
        self.produce_one_batch(tp, batch, None)
    }

    /// One Produce of one sealed batch to `tp`'s leader with acks=all, in the transaction
    /// `transaction` names (its id and protocol, which decides the Produce version) when given;
    /// the base offset the leader assigned. The one request behind the one-shot appends of
    /// tests and tools.
    pub(super) fn produce_one_batch(
        &mut self,
        tp: &TopicPartition,
        batch: Bytes,
        transaction: Option<(&str, txn::TransactionVersion)>,
    ) -> Result<i64> {
        let leader = self.leader(tp)?;
        let timeout_ms =
            i32::try_from(self.config.connection.request_timeout.as_millis()).unwrap_or(i32::MAX);
        let conn = self.leader_connection(leader)?;
        let version = match transaction {
            Some((_, tv)) => conn.version_within(ApiKey::Produce, tv.produce_versions())?,
            None => conn.version_for(ApiKey::Produce)?,
        };
        let req = msg::ProduceRequest::default()
            .with_transactional_id(
                transaction
                    .map(|(id, _)| msg::TransactionalId(StrBytes::from_string(id.to_string()))),
            )
            .with_acks(-1)
            .with_timeout_ms(timeout_ms)
            .with_topic_data(vec![produce_request::TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_string(tp.topic.to_string())))
                .with_partition_data(vec![
                    produce_request::PartitionProduceData::default()
                        .with_index(tp.partition)
                        .with_records(Some(batch)),
                ])]);
        let resp = conn.send(&req, version);
        let resp = self.failed_if_broken(leader, resp)?;
        let p = resp
            .responses
            .into_iter()
            .flat_map(|t| t.partition_responses)
            .find(|p| p.index == tp.partition)
            .ok_or_else(|| WireError::Protocol(format!("Produce response lacks {tp}")))?;
        if let Some(code) = KafkaCode::from_code(p.error_code) {
            if code.is_stale_metadata() {
                self.metadata_stale = true;
            }
            let msg = p
                .error_message
                .map(|m| broker_text(m.as_str()))
                .unwrap_or_default();
            return Err(WireError::kafka(
                ApiKey::Produce,
                code,
                format!("{tp} v{version} {msg}"),
            ));
        }
        Ok(p.base_offset)
    }
}

/// The producer id and epoch InitProducerId gave, or bumped. Public within the wire layer's
/// internals (as the transaction requests are) so that the integration tests can drive a
/// transaction by hand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducerIdentity {
    /// The id the leaders deduplicate by.
    pub producer_id: i64,
    /// Its epoch (0 for an idempotent producer's fresh id).
    pub epoch: i16,
}

impl Client {
    /// A new producer id for an idempotent producer (no transactional id), from any broker:
    /// epoch 0, every partition's sequence starting at 0. Kafka answers a request without a
    /// transactional id with a fresh id whatever id it names, so a producer whose sequence
    /// cannot continue asks for a new one (what Java does once its local epoch bump runs out).
    /// One attempt, bounded by the request timeout: the producer's sender asks again in its own
    /// loop, where batches for other brokers keep going meanwhile.
    pub(crate) fn init_producer_id(&mut self) -> Result<ProducerIdentity> {
        let timeout_ms =
            i32::try_from(self.config.connection.request_timeout.as_millis()).unwrap_or(i32::MAX);
        let resp = self.any_broker(|conn| {
            let version = conn.version_for(ApiKey::InitProducerId)?;
            let req = msg::InitProducerIdRequest::default()
                .with_transactional_id(None)
                .with_transaction_timeout_ms(timeout_ms.max(1))
                .with_producer_id(msg::ProducerId(-1))
                .with_producer_epoch(-1);
            conn.send(&req, version)
        })?;
        if let Some(code) = KafkaCode::from_code(resp.error_code) {
            return Err(WireError::kafka(
                ApiKey::InitProducerId,
                code,
                "idempotent producer".to_string(),
            ));
        }
        Ok(ProducerIdentity {
            producer_id: resp.producer_id.0,
            epoch: resp.producer_epoch,
        })
    }
}
