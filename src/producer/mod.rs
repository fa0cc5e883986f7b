//! The producer: a synchronous, idempotent Kafka producer on OS threads, for workers whose side
//! effects are records (the fill an order worker publishes, the settlement a payment worker
//! writes) and for the dead-letter policy.
//!
//! The story of one record:
//!
//! 1. [`Producer::send`] partitions it as Java does (an explicit partition; else
//!    `murmur2(key) % partitions`; else the sticky partition, [`partitioner`]), waiting up to
//!    `max.block.ms` for the topic's metadata, and appends it to the partition's open batch in the
//!    accumulator ([`accumulator`]), waiting up to `max.block.ms` for room in `buffer.memory`. It
//!    returns a [`DeliveryHandle`] at once.
//! 2. The sender thread ([`sender`]) takes the batch out when it is full (`batch.size`) or has
//!    waited `linger.ms`, seals and compresses it, stamps it with the producer id, epoch and the
//!    partition's next sequence, and puts it in one Produce request per leader, which the
//!    leader's lane (one OS thread per broker, up to `max.in.flight.requests.per.connection`
//!    requests on the wire) writes.
//! 3. The answer settles the batch: every record's handle gets its offset. A retriable error
//!    (a leader that moved, a lost connection) puts the batch back in its partition's order and
//!    it goes again with the same sequence, so the leader drops a copy it already has; the
//!    sender's module docs give the rules. `delivery.timeout.ms` bounds the whole story.
//!
//! Files: `accumulator` (the batches waiting, per partition, and the buffer's bound), `config`
//! (`ProducerConfig`, rows of the one settings table), `error` (`ProduceError`), `handle`
//! (`DeliveryHandle`, one outcome per batch), `partitioner` (murmur2 as Java, sticky), `sender`
//! (the sender thread and its numbered rules).
//!
//! No async runtime: `send` is a short critical section, the sender and the lanes are threads.
//! The sender's rules are the ones Java's producer follows (KIP-98 idempotence, KIP-360 epoch
//! bumps, KIP-480 and KIP-794 partitioning), so that a record written by this producer and one
//! written by Java's are indistinguishable to a consumer.

mod accumulator;
mod config;
mod error;
mod handle;
pub mod partitioner;
mod sender;

use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use log::warn;

pub use config::{ProducerConfig, ProducerConfigBuilder};
pub use error::ProduceError;
pub use handle::{DeliveryHandle, RecordMetadata};

use crate::wire::{Client, ProduceRecord};
use accumulator::Accumulator;
use sender::Sender;

/// A record to send: its topic, and optionally its partition, key, headers and timestamp.
///
/// ```
/// use rebalance_guard::ProducerRecord;
///
/// let fill = ProducerRecord::new("fills", "filled 100 @ 42.17")
///     .key("acct-17")
///     .header("trace-id", "7f3a");
/// assert_eq!(fill.topic(), "fills");
/// ```
#[derive(Clone, Debug)]
pub struct ProducerRecord {
    topic: String,
    partition: Option<i32>,
    record: ProduceRecord,
}

impl ProducerRecord {
    /// A record with `value` for `topic`, no key (sticky partitioning), the send time as its
    /// timestamp.
    pub fn new(topic: impl Into<String>, value: impl Into<Bytes>) -> Self {
        ProducerRecord {
            topic: topic.into(),
            partition: None,
            record: ProduceRecord {
                key: None,
                value: Some(value.into()),
                headers: Vec::new(),
                timestamp: None,
            },
        }
    }

    /// A record with no value (a tombstone, for compacted topics).
    pub fn tombstone(topic: impl Into<String>, key: impl Into<Bytes>) -> Self {
        let mut r = ProducerRecord::new(topic, Bytes::new());
        r.record.value = None;
        r.key(key)
    }

    /// The key: a keyed record lands on `murmur2(key) % partitions`, as from Java's producer.
    pub fn key(mut self, key: impl Into<Bytes>) -> Self {
        self.record.key = Some(key.into());
        self
    }

    /// Sends to this partition, whatever the key.
    pub fn partition(mut self, partition: i32) -> Self {
        self.partition = Some(partition);
        self
    }

    /// Adds a header (headers keep their order; a key may repeat).
    pub fn header(mut self, key: impl Into<String>, value: impl Into<Bytes>) -> Self {
        self.record.headers.push((key.into(), Some(value.into())));
        self
    }

    /// Adds a header with no value (a null value, as Java's `headers.add(key, null)`), which a
    /// consumer tells apart from an empty one: a flag whose presence is the message.
    pub fn null_header(mut self, key: impl Into<String>) -> Self {
        self.record.headers.push((key.into(), None));
        self
    }

    /// The timestamp (ms since the epoch) instead of the send time.
    pub fn timestamp(mut self, ms: i64) -> Self {
        self.record.timestamp = Some(ms);
        self
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Builds from the fields of a wire record (the dead-letter copy of a consumed record).
    pub(crate) fn from_parts(topic: &str, partition: Option<i32>, record: ProduceRecord) -> Self {
        ProducerRecord {
            topic: topic.to_string(),
            partition,
            record,
        }
    }
}

/// A Kafka producer: idempotent by default, batching per partition, compressing with pure-Rust
/// codecs, partitioning as Java does. `send` takes `&self`: share one producer between threads
/// (an `Arc<Producer>`), as Java applications share one `KafkaProducer`.
///
/// ```no_run
/// use rebalance_guard::{Producer, ProducerConfig, ProducerRecord};
///
/// let producer = Producer::new(
///     ProducerConfig::builder()
///         .bootstrap_servers(["127.0.0.1:9092"])
///         .build()?,
/// )?;
/// let handle = producer.send(ProducerRecord::new("fills", "filled 100 @ 42.17").key("acct-17"))?;
/// let written = handle.wait()?; // or keep sending and wait later, or flush()
/// println!("fill at {}-{} offset {}", written.topic, written.partition, written.offset);
/// producer.close()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Producer {
    acc: Arc<Accumulator>,
    thread: Mutex<Option<JoinHandle<()>>>,
    delivery_timeout: Duration,
}

impl Producer {
    /// Connects (the bootstrap metadata) and starts the sender thread. No producer id is asked
    /// for until the first record goes out.
    pub fn new(config: ProducerConfig) -> Result<Producer, ProduceError> {
        let client = Client::connect(config.client_config())?;
        let settings = config.settings().clone();
        let acc = Accumulator::new(settings.clone());
        let delivery_timeout = settings.delivery_timeout;
        let sender = Sender::new(Arc::clone(&acc), settings, client);
        let thread = sender.spawn().map_err(|e| ProduceError::Fatal {
            reason: format!("cannot start the sender thread: {e}"),
        })?;
        Ok(Producer {
            acc,
            thread: Mutex::new(Some(thread)),
            delivery_timeout,
        })
    }

    /// Queues `record` and returns its handle at once; blocks only for the topic's first
    /// metadata or for room in `buffer.memory`, each up to `max.block.ms`.
    pub fn send(&self, record: ProducerRecord) -> Result<DeliveryHandle, ProduceError> {
        let now_ms = record.record.timestamp.unwrap_or_else(now_ms);
        self.acc
            .append(&record.topic, record.partition, &record.record, now_ms)
    }

    /// Sends `record` and waits for its acknowledgement: the simple case, one record at a time
    /// (each waits `linger.ms` at most before it goes: set `linger.ms=0` for the lowest latency).
    pub fn send_and_wait(&self, record: ProducerRecord) -> Result<RecordMetadata, ProduceError> {
        self.send(record)?.wait()
    }

    /// How many partitions `topic` has, waiting for its metadata up to `max.block.ms`.
    pub fn partition_count(&self, topic: &str) -> Result<i32, ProduceError> {
        self.acc.partition_count(topic)
    }

    /// Sends every record queued so far at once (not waiting for `linger.ms`) and blocks until
    /// each is acknowledged or failed (look at their handles for which).
    pub fn flush(&self) -> Result<(), ProduceError> {
        self.acc.flush()
    }

    /// Flushes, then stops the sender and its lanes. Records sent after `close` fail with
    /// [`ProduceError::Closed`].
    pub fn close(self) -> Result<(), ProduceError> {
        self.shut_down()
    }

    fn shut_down(&self) -> Result<(), ProduceError> {
        let flushed = self.acc.flush();
        self.acc.close();
        let thread = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(thread) = thread {
            if thread.join().is_err() {
                return Err(ProduceError::Fatal {
                    reason: "the sender thread panicked".to_string(),
                });
            }
        }
        flushed
    }
}

impl Drop for Producer {
    /// Closes as [`Producer::close`] does: every record sent is acknowledged or failed (within
    /// `delivery.timeout.ms`) before the producer is gone.
    fn drop(&mut self) {
        let pending = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some();
        if pending {
            if let Err(e) = self.shut_down() {
                warn!(
                    "producer dropped: {e} (records are settled within {:?})",
                    self.delivery_timeout
                );
            }
        }
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
