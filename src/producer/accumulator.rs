//! The records waiting to be sent: one queue of batches per partition, filled by the threads
//! that call `send` and drained by the sender thread, under one lock, with the memory they hold
//! bounded by `buffer.memory`.
//!
//! Why one lock: a `send` appends a few dozen bytes to its partition's open batch; the sender
//! takes whole batches out. Both are short, and one lock keeps the accounting (bytes buffered,
//! records unfinished, metadata wanted) exact, which is what `flush` and `max.block.ms` rely on.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::error::ProduceError;
use super::handle::{BatchOutcome, DeliveryHandle};
use super::partitioner::{partition_for_key, Sticky};
use crate::config::ProducerSettings;
use crate::wire::records::encode::{record_size_bound, OpenBatch};
use crate::wire::{Nudge, ProduceRecord};
use crate::TopicPartition;

/// A batch taken out of the accumulator by the sender: its records, its outcome and what it
/// holds of the buffer.
#[derive(Debug)]
pub(crate) struct DrainedBatch {
    pub(crate) tp: TopicPartition,
    pub(crate) records: OpenBatch,
    pub(crate) outcome: Arc<BatchOutcome>,
    /// Bytes charged to `buffer.memory`, released when the batch settles.
    pub(crate) charged: usize,
    /// When its first record was sent: `delivery.timeout.ms` counts from here.
    pub(crate) created: Instant,
}

#[derive(Debug)]
struct Filling {
    records: OpenBatch,
    outcome: Arc<BatchOutcome>,
    charged: usize,
    created: Instant,
}

#[derive(Debug, Default)]
struct PartitionQueue {
    /// Full batches, oldest first, then the one being filled (`open`).
    full: VecDeque<Filling>,
    open: Option<Filling>,
}

/// What the sender learned of a topic, for `send` to partition by.
#[derive(Debug, Clone)]
pub(crate) enum TopicState {
    /// The partition count.
    Known(i32),
    /// The last metadata's error for it (the topic may not exist yet).
    Failed(String),
}

#[derive(Debug)]
struct State {
    queues: HashMap<TopicPartition, PartitionQueue>,
    topics: HashMap<Arc<str>, TopicState>,
    wanted: HashSet<Arc<str>>,
    sticky: Sticky,
    buffered: usize,
    /// Records sent and not settled.
    unfinished: u64,
    /// Flushes waiting: while any, every batch is ready at once.
    flushing: usize,
    closed: bool,
    fatal: Option<ProduceError>,
}

/// The state `send`, `flush` and the sender share.
pub(crate) struct Accumulator {
    state: Mutex<State>,
    /// Wakes `send` waiting for room or metadata, and `flush` waiting for the last record.
    changed: Condvar,
    settings: ProducerSettings,
    wake_sender: Mutex<Option<Nudge>>,
}

impl std::fmt::Debug for Accumulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Accumulator").finish_non_exhaustive()
    }
}

impl Accumulator {
    pub(crate) fn new(settings: ProducerSettings) -> Arc<Self> {
        Arc::new(Accumulator {
            state: Mutex::new(State {
                queues: HashMap::new(),
                topics: HashMap::new(),
                wanted: HashSet::new(),
                sticky: Sticky::new(settings.batch_size),
                buffered: 0,
                unfinished: 0,
                flushing: 0,
                closed: false,
                fatal: None,
            }),
            changed: Condvar::new(),
            settings,
            wake_sender: Mutex::new(None),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How the sender is woken (set once its lanes exist).
    pub(crate) fn set_wake(&self, nudge: Nudge) {
        *self
            .wake_sender
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(nudge);
    }

    pub(crate) fn wake_sender(&self) {
        let nudge = self
            .wake_sender
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(nudge) = nudge {
            nudge();
        }
    }

    /// Appends `record` to `topic`'s partition (its own, the key's, or the sticky one),
    /// waiting up to `max.block.ms` for the topic's metadata and for room in the buffer.
    pub(crate) fn append(
        &self,
        topic: &str,
        partition: Option<i32>,
        record: &ProduceRecord,
        now_ms: i64,
    ) -> Result<DeliveryHandle, ProduceError> {
        let size = record_size_bound(record);
        // As Java: a record larger than a request, or than the whole buffer, can never go.
        let limit = self
            .settings
            .max_request_size
            .min(self.settings.buffer_memory);
        if size > limit {
            return Err(ProduceError::RecordTooLarge {
                size,
                max_request_size: limit,
            });
        }
        let started = Instant::now();
        let deadline = started + self.settings.max_block;
        let (mut state, topic, partitions) = self.topic_partitions(topic, started, deadline)?;
        let partition = match partition {
            Some(p) if p < 0 || p >= partitions => {
                return Err(ProduceError::UnknownPartition {
                    topic: topic.to_string(),
                    partition: p,
                    partitions,
                })
            }
            Some(p) => p,
            None => match (&record.key, self.settings.ignore_keys) {
                (Some(key), false) => partition_for_key(key, partitions),
                _ => state.sticky.partition(&topic, partitions, size),
            },
        };
        // Room in the buffer.
        while state.buffered + size > self.settings.buffer_memory {
            if state.closed {
                return Err(ProduceError::Closed);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ProduceError::BufferFull {
                    waited: started.elapsed(),
                    buffer_memory: self.settings.buffer_memory,
                });
            }
            state = self.wait(state, left);
        }
        state.buffered += size;
        state.unfinished += 1;
        let batch_size = self.settings.batch_size;
        let tp = TopicPartition::new(Arc::clone(&topic), partition);
        let queue = state.queues.entry(tp.clone()).or_default();
        let mut wake = false;
        let fits = queue
            .open
            .as_ref()
            .is_some_and(|f| f.records.records_len() + size <= batch_size);
        if !fits {
            if let Some(full) = queue.open.take() {
                queue.full.push_back(full);
            }
            queue.open = Some(Filling {
                records: OpenBatch::with_capacity(batch_size.max(size).min(1 << 20)),
                outcome: BatchOutcome::new(Arc::clone(&topic), partition),
                charged: 0,
                created: Instant::now(),
            });
            // A new batch: the sender's next wake-up (its linger) or a full one to send.
            wake = true;
        }
        let Some(filling) = queue.open.as_mut() else {
            return Err(ProduceError::Fatal {
                reason: "no open batch after opening one".to_string(),
            });
        };
        let index = filling.records.count() as u32;
        filling.records.append(record, now_ms);
        filling.charged += size;
        let handle = DeliveryHandle::new(Arc::clone(&filling.outcome), index, now_ms);
        if filling.records.records_len() >= batch_size {
            if let Some(full) = queue.open.take() {
                queue.full.push_back(full);
            }
            wake = true;
        }
        drop(state);
        if wake {
            self.wake_sender();
        }
        Ok(handle)
    }

    /// How many partitions `topic` has, waiting up to `max.block.ms` for its metadata.
    pub(crate) fn partition_count(&self, topic: &str) -> Result<i32, ProduceError> {
        let started = Instant::now();
        let deadline = started + self.settings.max_block;
        self.topic_partitions(topic, started, deadline)
            .map(|(_, _, partitions)| partitions)
    }

    /// The topic's partition count from the sender's metadata, asking the sender for it and
    /// waiting until `deadline`; returns the lock still held, and the topic's shared name.
    fn topic_partitions(
        &self,
        topic: &str,
        started: Instant,
        deadline: Instant,
    ) -> Result<(MutexGuard<'_, State>, Arc<str>, i32), ProduceError> {
        let mut state = self.lock();
        let topic: Arc<str> = match state.topics.get_key_value(topic) {
            Some((name, _)) => Arc::clone(name),
            None => Arc::from(topic),
        };
        loop {
            if let Some(fatal) = &state.fatal {
                return Err(fatal.clone());
            }
            if state.closed {
                return Err(ProduceError::Closed);
            }
            let last = match state.topics.get(&topic) {
                Some(TopicState::Known(n)) => {
                    let n = *n;
                    return Ok((state, topic, n));
                }
                Some(TopicState::Failed(why)) => Some(why.clone()),
                None => None,
            };
            if state.wanted.insert(Arc::clone(&topic)) {
                drop(state);
                self.wake_sender();
                state = self.lock();
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ProduceError::MetadataTimeout {
                    topic: topic.to_string(),
                    waited: started.elapsed(),
                    last,
                });
            }
            state = self.wait(state, left);
        }
    }

    fn wait<'a>(&self, state: MutexGuard<'a, State>, left: Duration) -> MutexGuard<'a, State> {
        self.changed
            .wait_timeout(state, left)
            .unwrap_or_else(PoisonError::into_inner)
            .0
    }

    /// The topics `send` waits for metadata of, and every topic known (the sender refreshes
    /// them all).
    pub(crate) fn topics_wanted(&self) -> Vec<Arc<str>> {
        let state = self.lock();
        let mut all: Vec<Arc<str>> = state.wanted.iter().cloned().collect();
        all.extend(
            state
                .topics
                .keys()
                .filter(|t| !state.wanted.contains(*t))
                .cloned(),
        );
        all
    }

    /// Whether a `send` waits for a topic's metadata.
    pub(crate) fn wants_metadata(&self) -> bool {
        let state = self.lock();
        state
            .wanted
            .iter()
            .any(|t| !matches!(state.topics.get(t), Some(TopicState::Known(_))))
    }

    /// What the sender learned of `topic`.
    pub(crate) fn learned(&self, topic: Arc<str>, what: TopicState) {
        let mut state = self.lock();
        // A partition count that shrank is not Kafka's (partitions are only ever added); keep
        // the larger, so that a stale answer does not send records to fewer partitions.
        let what = match (&what, state.topics.get(&topic)) {
            (TopicState::Failed(_), Some(TopicState::Known(n))) => TopicState::Known(*n),
            (TopicState::Known(new), Some(TopicState::Known(old))) if old > new => {
                TopicState::Known(*old)
            }
            _ => what,
        };
        state.topics.insert(topic, what);
        drop(state);
        self.changed.notify_all();
    }

    /// Takes out every batch ready at `now`: full ones, and open ones older than `linger.ms`
    /// (all of them while a flush waits or the producer closes). Returns them and the next time
    /// an open batch becomes ready.
    pub(crate) fn drain(&self, now: Instant) -> (Vec<DrainedBatch>, Option<Instant>) {
        let linger = self.settings.linger;
        let mut state = self.lock();
        let all = state.flushing > 0 || state.closed;
        let mut out = Vec::new();
        let mut next: Option<Instant> = None;
        for (tp, queue) in state.queues.iter_mut() {
            for f in queue.full.drain(..) {
                out.push(drained(tp, f));
            }
            if let Some(open) = &queue.open {
                let ready_at = open.created + linger;
                if all || ready_at <= now {
                    if let Some(f) = queue.open.take() {
                        out.push(drained(tp, f));
                    }
                } else {
                    next = Some(next.map_or(ready_at, |n| n.min(ready_at)));
                }
            }
        }
        state
            .queues
            .retain(|_, q| q.open.is_some() || !q.full.is_empty());
        (out, next)
    }

    /// A batch settled: its records are finished and its bytes free.
    pub(crate) fn settled(&self, records: u64, charged: usize) {
        let mut state = self.lock();
        state.buffered = state.buffered.saturating_sub(charged);
        state.unfinished = state.unfinished.saturating_sub(records);
        drop(state);
        self.changed.notify_all();
    }

    /// Blocks until every record sent before the call has settled.
    pub(crate) fn flush(&self) -> Result<(), ProduceError> {
        let mut state = self.lock();
        if state.unfinished == 0 {
            return Ok(());
        }
        state.flushing += 1;
        drop(state);
        self.wake_sender();
        let mut state = self.lock();
        // Records sent by other threads during the flush are waited for too: simpler, and
        // bounded by delivery.timeout.ms like every record.
        while state.unfinished > 0 && state.fatal.is_none() {
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        state.flushing -= 1;
        match &state.fatal {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// Refuses further `send`s and makes every batch ready.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.changed.notify_all();
        self.wake_sender();
    }

    /// Whether `close` was called and nothing is left to send or settle.
    pub(crate) fn is_closed_and_empty(&self) -> bool {
        let state = self.lock();
        state.closed && state.unfinished == 0
    }

    /// The producer cannot go on: every waiting call returns `error`, and so does every later
    /// `send`.
    pub(crate) fn fail(&self, error: ProduceError) {
        let mut state = self.lock();
        if state.fatal.is_none() {
            state.fatal = Some(error);
        }
        drop(state);
        self.changed.notify_all();
    }

    /// Settles every batch still in the accumulator with `error` (the sender is ending).
    pub(crate) fn abort_all(&self, error: &ProduceError) {
        self.lock().closed = true;
        self.fail_buffered(error);
    }

    /// Settles every batch still in the accumulator with `error` and takes more (a transaction
    /// is being aborted: what was not sent never will be).
    pub(crate) fn fail_buffered(&self, error: &ProduceError) {
        let (batches, _) = {
            let mut state = self.lock();
            // Every batch is ready now, whatever its linger: drain takes them all.
            state.flushing += 1;
            drop(state);
            let drained = self.drain(Instant::now());
            self.lock().flushing -= 1;
            drained
        };
        for b in batches {
            b.outcome.settle(Err(error.clone()));
            self.settled(b.records.count() as u64, b.charged);
        }
    }
}

fn drained(tp: &TopicPartition, f: Filling) -> DrainedBatch {
    DrainedBatch {
        tp: tp.clone(),
        records: f.records,
        outcome: f.outcome,
        charged: f.charged,
        created: f.created,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::producer::ProducerConfig;
    use bytes::Bytes;

    fn accumulator(settings: &[(&str, &str)]) -> Arc<Accumulator> {
        let mut b = ProducerConfig::builder().bootstrap_servers(["127.0.0.1:9092"]);
        for (k, v) in settings {
            b = b.set(k, v);
        }
        let acc = Accumulator::new(b.build().expect("config").settings().clone());
        acc.learned(Arc::from("t"), TopicState::Known(2));
        acc
    }

    fn record(value: &str) -> ProduceRecord {
        ProduceRecord {
            key: None,
            value: Some(Bytes::copy_from_slice(value.as_bytes())),
            headers: Vec::new(),
            timestamp: None,
        }
    }

    /// A batch goes when it is full or has waited `linger.ms`, and not before; a flush or a
    /// close makes every batch ready at once.
    #[test]
    fn batches_are_ready_when_full_or_lingered() {
        let acc = accumulator(&[("linger.ms", "1000"), ("batch.size", "200")]);
        let t0 = Instant::now();
        acc.append("t", Some(0), &record("a"), 1).expect("append");
        let (ready, next) = acc.drain(t0);
        assert!(ready.is_empty(), "a fresh batch lingers");
        assert!(next.is_some_and(|at| at > t0 + Duration::from_millis(900)));
        for _ in 0..10 {
            acc.append("t", Some(0), &record(&"x".repeat(40)), 1)
                .expect("append");
        }
        let (ready, _) = acc.drain(Instant::now());
        assert!(!ready.is_empty(), "full batches go at once");
        assert!(ready.iter().all(|b| b.tp.partition == 0));
        let (later, _) = acc.drain(Instant::now() + Duration::from_secs(2));
        assert_eq!(
            later.len(),
            1,
            "the last, partly filled batch after its linger"
        );
        acc.append("t", Some(1), &record("b"), 1).expect("append");
        acc.close();
        let (closing, _) = acc.drain(Instant::now());
        assert_eq!(closing.len(), 1, "close makes it ready");
        assert!(matches!(
            acc.append("t", Some(1), &record("c"), 1),
            Err(ProduceError::Closed)
        ));
    }

    /// `buffer.memory` bounds what waits: a send that does not fit blocks for `max.block.ms` and
    /// fails without buffering anything; a settled batch frees its bytes.
    #[test]
    fn a_full_buffer_blocks_for_max_block_then_refuses() {
        let acc = accumulator(&[
            ("buffer.memory", "4096"),
            ("batch.size", "1024"),
            ("max.block.ms", "200"),
        ]);
        let mut sent = 0;
        let refused = loop {
            match acc.append("t", Some(0), &record(&"x".repeat(300)), 1) {
                Ok(_) => sent += 1,
                Err(e) => break e,
            }
            assert!(sent < 100, "never full");
        };
        assert!(
            matches!(refused, ProduceError::BufferFull { waited, .. } if waited >= Duration::from_millis(200))
        );
        let (ready, _) = acc.drain(Instant::now() + Duration::from_secs(1));
        let records: u64 = ready.iter().map(|b| b.records.count() as u64).sum();
        assert_eq!(records, sent, "the refused record was not buffered");
        for b in ready {
            acc.settled(b.records.count() as u64, b.charged);
        }
        acc.append("t", Some(0), &record(&"x".repeat(300)), 1)
            .expect("room again");
    }

    /// A topic whose metadata never comes fails the send after `max.block.ms` with what the
    /// last metadata said.
    #[test]
    fn a_topic_without_metadata_fails_after_max_block() {
        let acc = accumulator(&[("max.block.ms", "100")]);
        acc.learned(
            Arc::from("missing"),
            TopicState::Failed("UnknownTopicOrPartition".to_string()),
        );
        let e = acc
            .append("missing", None, &record("v"), 1)
            .expect_err("no metadata");
        match e {
            ProduceError::MetadataTimeout { topic, last, .. } => {
                assert_eq!(topic, "missing");
                assert_eq!(last.as_deref(), Some("UnknownTopicOrPartition"));
            }
            other => panic!("{other}"),
        }
    }
}
