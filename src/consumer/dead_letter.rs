//! A dead-letter topic for [`Consumer::on_dead_letter`](super::Consumer::on_dead_letter): the
//! failed record copied there with why and where from in its headers, written synchronously
//! through the crate's idempotent [`Producer`].
//!
//! Why a ready-made one: the callback must not return `Ok` before the copy is acknowledged (the
//! record's offset is committed past right after), and every user would otherwise rebuild the
//! same headers. Why these headers: whoever drains the dead-letter topic needs the error, how
//! often it was tried, and the source topic, partition and offset to find, replay or skip it.
//!
//! The copy keeps the record's key, value, timestamp and headers (the dead-letter headers come
//! after them). It goes to the dead-letter topic's partition `source partition % its partition
//! count`, so one source partition's dead letters stay in order. The producer is idempotent, so a
//! retry after a lost answer does not write a copy twice; a consumer restarted after a crash
//! between the copy and its commit may still copy a record again, so readers of the topic key
//! on the source coordinates (the `dead-letter.*` headers).

use std::error::Error;

use bytes::Bytes;

use crate::config::ConsumerConfig;
use crate::producer::{ProduceError, Producer, ProducerConfig, ProducerRecord};
use crate::wire::{ErrorChain, ProduceRecord, Record};

/// Header: the handler's last error, with its causes (`error: cause: cause`).
pub const HEADER_ERROR: &str = "dead-letter.error";
/// Header: how many times the handler ran on the record, in decimal.
pub const HEADER_ATTEMPTS: &str = "dead-letter.attempts";
/// Header: the topic the record was read from.
pub const HEADER_TOPIC: &str = "dead-letter.topic";
/// Header: the partition it was read from, in decimal.
pub const HEADER_PARTITION: &str = "dead-letter.partition";
/// Header: its offset there, in decimal.
pub const HEADER_OFFSET: &str = "dead-letter.offset";

/// The copy of `record` that goes to a dead-letter topic: its key, value, timestamp and headers,
/// then the dead-letter headers ([`HEADER_ERROR`], [`HEADER_ATTEMPTS`], [`HEADER_TOPIC`],
/// [`HEADER_PARTITION`], [`HEADER_OFFSET`]).
pub fn dead_letter_record(
    record: &Record,
    error: &(dyn Error + 'static),
    attempts: u32,
) -> ProduceRecord {
    let text = |s: String| Some(Bytes::from(s));
    let mut headers = record.headers.clone();
    headers.extend([
        (
            HEADER_ERROR.to_string(),
            text(ErrorChain(error).to_string()),
        ),
        (HEADER_ATTEMPTS.to_string(), text(attempts.to_string())),
        (HEADER_TOPIC.to_string(), text(record.topic.to_string())),
        (
            HEADER_PARTITION.to_string(),
            text(record.partition.to_string()),
        ),
        (HEADER_OFFSET.to_string(), text(record.offset.to_string())),
    ]);
    ProduceRecord {
        key: record.key.clone(),
        value: record.value.clone(),
        headers,
        timestamp: Some(record.timestamp),
    }
}

/// A dead-letter topic written through its own idempotent [`Producer`] (shared by the workers).
/// Its [`send`](Self::send) is what an `on_dead_letter` callback calls.
///
/// A record that failed `processing.retries + 1` times is copied here (with the error, the
/// attempts and where it came from in `dead-letter.*` headers) and then counts as finished, so
/// one poison record does not stop the partition:
///
/// ```no_run
/// use std::sync::atomic::AtomicBool;
/// use rebalance_guard::{Consumer, ConsumerConfig, DeadLetterTopic, Record};
/// # fn submit_order(_record: &Record) -> std::io::Result<()> { Ok(()) }
///
/// let config = ConsumerConfig::builder()
///     .bootstrap_servers(["127.0.0.1:9092"])
///     .group_id("order-workers")
///     .set("processing.retries", "3")
///     .build()?;
/// let dlq = DeadLetterTopic::connect(&config, "orders.dlq")?; // the consumer's brokers, credentials
/// let mut consumer = Consumer::subscribe(config, &["orders"])?
///     // Synchronous: Ok only once the copy is acknowledged (acks=all).
///     .on_dead_letter(move |record, error, attempts| dlq.send(record, error, attempts).map(drop));
/// consumer.run(&AtomicBool::new(false), |record, _ctx| submit_order(record))?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct DeadLetterTopic {
    topic: String,
    partitions: i32,
    producer: Producer,
}

impl std::fmt::Debug for DeadLetterTopic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeadLetterTopic")
            .field("topic", &self.topic)
            .field("partitions", &self.partitions)
            .finish_non_exhaustive()
    }
}

impl DeadLetterTopic {
    /// Connects with the consumer's own settings (`config`: the same brokers, credentials and
    /// TLS, so a dead-letter topic needs no second configuration; the producer's own settings at
    /// their defaults, idempotent with acks=all, and `linger.ms=0`: a dead letter waits for
    /// nothing) and reads how many partitions `topic` has; the topic must exist.
    pub fn connect(config: &ConsumerConfig, topic: &str) -> Result<DeadLetterTopic, ProduceError> {
        let producer = Producer::new(ProducerConfig::for_dead_letters(config))?;
        let partitions = producer.partition_count(topic)?;
        Ok(DeadLetterTopic {
            topic: topic.to_string(),
            partitions,
            producer,
        })
    }

    /// Writes the dead-letter record of `record` (its key, value and headers, plus headers
    /// naming the error, the attempts and where it came from) and waits for the
    /// acknowledgement (acks=all, idempotent); returns the offset it got in the dead-letter
    /// topic.
    pub fn send(
        &self,
        record: &Record,
        error: &(dyn Error + 'static),
        attempts: u32,
    ) -> Result<i64, ProduceError> {
        let copy = dead_letter_record(record, error, attempts);
        let partition = record.partition.rem_euclid(self.partitions);
        let written = self.producer.send_and_wait(ProducerRecord::from_parts(
            &self.topic,
            Some(partition),
            copy,
        ))?;
        Ok(written.offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::TimestampType;

    #[test]
    fn the_copy_keeps_the_record_and_says_why_and_where_from() {
        let record = Record {
            topic: "orders".into(),
            partition: 3,
            offset: 42,
            timestamp: 1_700_000_000_000,
            timestamp_type: TimestampType::CreateTime,
            key: Some(Bytes::from_static(b"acct-7")),
            value: Some(Bytes::from_static(b"buy 10")),
            headers: vec![("trace".to_string(), Some(Bytes::from_static(b"t1")))],
        };
        let error = std::io::Error::other("the exchange said no");
        let copy = dead_letter_record(&record, &error, 4);
        assert_eq!(copy.key, record.key);
        assert_eq!(copy.value, record.value);
        assert_eq!(copy.timestamp, Some(record.timestamp));
        let headers: Vec<(&str, &[u8])> = copy
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_deref().unwrap_or_default()))
            .collect();
        assert_eq!(
            headers,
            [
                ("trace", &b"t1"[..]),
                (HEADER_ERROR, b"the exchange said no"),
                (HEADER_ATTEMPTS, b"4"),
                (HEADER_TOPIC, b"orders"),
                (HEADER_PARTITION, b"3"),
                (HEADER_OFFSET, b"42"),
            ]
        );
    }
}
