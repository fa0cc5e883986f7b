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
//! (the sender thread and its numbered rules; `sender/transactional.rs` its part of a
//! transaction), `transaction` (transactions: the calls to the transaction coordinator, the
//! state the caller's thread and the sender share, [`ConsumerGroupMetadata`]).
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
mod transaction;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use log::warn;

pub use config::{ProducerConfig, ProducerConfigBuilder};
pub use error::ProduceError;
pub use handle::{DeliveryHandle, RecordMetadata};
pub use transaction::ConsumerGroupMetadata;

use crate::wire::{Client, CommitIdentity, OffsetCommitEntry, ProduceRecord};
use crate::TopicPartition;
use accumulator::Accumulator;
use sender::Sender;
use transaction::{OffsetResults, Transactions, TxnLink};

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
    /// `Some` with `transactional.id`: the transaction calls, one at a time.
    transactions: Option<Mutex<Transactions>>,
    transaction_timeout: Duration,
    max_block: Duration,
}

impl Producer {
    /// Connects (the bootstrap metadata) and starts the sender thread. No producer id is asked
    /// for until the first record goes out.
    pub fn new(config: ProducerConfig) -> Result<Producer, ProduceError> {
        let client = Client::connect(config.client_config())?;
        let settings = config.settings().clone();
        let acc = Accumulator::new(settings.clone());
        let delivery_timeout = settings.delivery_timeout;
        let transaction_timeout = settings.transaction_timeout;
        let max_block = settings.max_block;
        // A transactional producer talks to its coordinators on the caller's thread, over a
        // client of its own: the sender's requests never wait behind an EndTxn.
        let (link, transactions) = match &settings.transactional_id {
            Some(id) => {
                let link = Arc::new(TxnLink::new(id.clone()));
                let coordinator_client = Client::connect(config.client_config())?;
                let transactions =
                    Transactions::new(Arc::clone(&link), coordinator_client, &settings);
                (Some(link), Some(Mutex::new(transactions)))
            }
            None => (None, None),
        };
        let sender = Sender::new(Arc::clone(&acc), settings, client, link);
        let thread = sender.spawn().map_err(|e| ProduceError::Fatal {
            reason: format!("cannot start the sender thread: {e}"),
        })?;
        Ok(Producer {
            acc,
            thread: Mutex::new(Some(thread)),
            delivery_timeout,
            transactions,
            transaction_timeout,
            max_block,
        })
    }

    /// Queues `record` and returns its handle at once; blocks only for the topic's first
    /// metadata or for room in `buffer.memory`, each up to `max.block.ms`. A transactional
    /// producer sends only inside a transaction.
    pub fn send(&self, record: ProducerRecord) -> Result<DeliveryHandle, ProduceError> {
        if let Some(transactions) = &self.transactions {
            lock(transactions).may_send()?;
        }
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

    /// `transaction.timeout.ms`: how long the coordinator lets a transaction stay open.
    pub fn transaction_timeout(&self) -> Duration {
        self.transaction_timeout
    }

    /// Whether this producer has a `transactional.id`.
    pub fn is_transactional(&self) -> bool {
        self.transactions.is_some()
    }

    fn transactions(
        &self,
        operation: &'static str,
    ) -> Result<MutexGuard<'_, Transactions>, ProduceError> {
        self.transactions
            .as_ref()
            .map(lock)
            .ok_or(ProduceError::TransactionState {
                operation,
                state: "not transactional (set transactional.id)",
            })
    }

    /// Registers the `transactional.id` with its coordinator: fences every older producer of
    /// the same id and aborts the transaction it left open. Once, before the first
    /// transaction; retried until `max.block.ms` while the coordinator moves or loads.
    pub fn init_transactions(&self) -> Result<(), ProduceError> {
        self.transactions("init_transactions")?.init()
    }

    /// Opens a transaction: the records sent from now on, and the offsets given to
    /// [`send_offsets_to_transaction`](Self::send_offsets_to_transaction), become visible
    /// together at [`commit_transaction`](Self::commit_transaction), or never.
    pub fn begin_transaction(&self) -> Result<(), ProduceError> {
        self.transactions("begin_transaction")?.begin()
    }

    /// Puts a consumer's positions (`(partition, next offset)`) into the open transaction, for
    /// the member `group` describes: the group coordinator refuses them if the member is no
    /// longer in the generation it names (KIP-447), which makes the transaction abortable.
    pub fn send_offsets_to_transaction(
        &self,
        offsets: &[(TopicPartition, i64)],
        group: &ConsumerGroupMetadata,
    ) -> Result<(), ProduceError> {
        let entries: Vec<OffsetCommitEntry> = offsets
            .iter()
            .map(|(tp, offset)| OffsetCommitEntry {
                tp: tp.clone(),
                offset: *offset,
                leader_epoch: None,
                metadata: None,
            })
            .collect();
        self.transactions("send_offsets_to_transaction")?
            .send_group_offsets(&entries, group)
    }

    /// The consumer's commit through the open transaction: each partition's own answer, so
    /// that the group layer judges a refusal as it judges an OffsetCommit's.
    pub(crate) fn send_offsets_as(
        &self,
        who: &CommitIdentity<'_>,
        offsets: &[OffsetCommitEntry],
    ) -> Result<OffsetResults, ProduceError> {
        self.transactions("send_offsets_to_transaction")?
            .send_offsets(who, offsets)
    }

    /// Waits until every record of the transaction was acknowledged, then commits it: its
    /// records and offsets become visible to `read_committed` readers together. A record
    /// that failed makes it [`ProduceError::TransactionAbortable`]: abort it then.
    pub fn commit_transaction(&self) -> Result<(), ProduceError> {
        let mut transactions = self.transactions("commit_transaction")?;
        self.acc.flush()?;
        transactions.commit()
    }

    /// Aborts the open transaction: records not sent yet fail with
    /// [`ProduceError::TransactionAborted`], those on the wire are waited for (they are
    /// written, and never visible to `read_committed` readers), then the coordinator writes the
    /// abort markers.
    pub fn abort_transaction(&self) -> Result<(), ProduceError> {
        let mut transactions = self.transactions("abort_transaction")?;
        // Nothing buffered goes out any more; the sender fails what it queued (and says so
        // before anything of the next transaction can reach it); what is on the wire is
        // answered before EndTxn.
        self.acc.fail_buffered(&ProduceError::TransactionAborted);
        let acc = &self.acc;
        if !transactions
            .link()
            .abort_queued(|| acc.wake_sender(), self.max_block)
        {
            return Err(ProduceError::TransactionTimeout {
                operation: "abort_transaction",
                waited: self.max_block,
                last: "the sender did not fail its queued batches".to_string(),
            });
        }
        self.acc.flush()?;
        transactions.abort()
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

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
