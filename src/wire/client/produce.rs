//! Produce: appending records to one partition, for tests, examples and demos that need data in
//! a topic (uncompressed, acks=all, one batch per call, not idempotent).

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
    /// the leader assigned. Meant for tests, examples and demos, not for high-volume producing.
    pub fn produce(&mut self, tp: &TopicPartition, records: &[ProduceRecord]) -> Result<i64> {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let batch = records::encode_batch(records, now_ms)?;
        self.retrying("Produce", |c| c.produce_once(tp, batch.clone()))
    }

    fn produce_once(&mut self, tp: &TopicPartition, batch: Bytes) -> Result<i64> {
        let leader = self.leader(tp)?;
        let timeout_ms =
            i32::try_from(self.config.connection.request_timeout.as_millis()).unwrap_or(i32::MAX);
        let conn = self.leader_connection(leader)?;
        let version = conn.version_for(ApiKey::Produce)?;
        let req = msg::ProduceRequest::default()
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
                format!("{tp} {msg}"),
            ));
        }
        Ok(p.base_offset)
    }
}
