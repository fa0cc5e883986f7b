//! The sender thread: takes ready batches out of the accumulator, stamps them with the producer
//! id, epoch and each partition's next sequence, groups them into one Produce request per leader,
//! hands the requests to the per-broker lanes, and settles every batch from the answers.
//!
//! The rules that keep every record once and in order (idempotence, KIP-98 and KIP-360):
//!
//! 1. A batch gets its sequence when it is first sent and keeps it on every retry, so the leader
//!    recognises a retry of a batch it already wrote and answers with the first write's offset.
//! 2. A partition's batches are sent in sequence order, at most five unanswered (the leader
//!    remembers a producer's last five batches per partition), and only one while the partition
//!    has not acknowledged a batch of this producer id yet, or is recovering from a failure.
//!    Why: a leader that has no state for a producer on a partition accepts any sequence as its
//!    first (Kafka does, so that a producer whose records retention deleted can go on), so with
//!    two batches on the wire a refused first one (a leader not yet ready on a new topic answers
//!    NOT_LEADER_OR_FOLLOWER) would let the second be written first. Measured on Kafka 4.4: a new
//!    topic's first batch refused, the second written at offset 0. Once the leader acknowledged
//!    one batch it checks every later sequence.
//! 3. When a batch of a partition fails and will be retried, nothing more of that partition is
//!    sent until every batch of it still on the wire has answered; then the failed ones go again,
//!    in sequence order, before anything newer. (The later ones failed too: the leader refuses a
//!    sequence after a gap with OUT_OF_ORDER_SEQUENCE_NUMBER.)
//! 4. A batch whose request got no answer (a lost connection, a timeout) may have been written:
//!    it is retried under the same epoch and sequence until the leader says what became of it.
//! 5. A new producer id is taken (KIP-360's reset; InitProducerId answers an idempotent
//!    producer with a fresh id) only when a partition's sequence can no longer continue: the
//!    leader lost the producer's state (UNKNOWN_PRODUCER_ID), the oldest batch of a partition was
//!    refused as out of order (OUT_OF_ORDER_SEQUENCE_NUMBER with no earlier batch on the wire or
//!    waiting), or a batch failed for good and left a gap. The reset waits until no request is
//!    unanswered and no batch's fate is unknown (rule 4), so no copy of a batch under the old id
//!    can still arrive; then every partition starts again at sequence 0 and the batches not
//!    written yet are re-stamped, in order.
//! 6. A batch not acknowledged within `delivery.timeout.ms` of its first record's `send` fails
//!    with [`ProduceError::DeliveryTimeout`] (while it is on the wire, once its request answers
//!    or fails), which also takes a new producer id (rule 5): the partition has a gap. The
//!    bound is `delivery.timeout.ms`, plus the request on the wire when it ran out, plus a
//!    metadata request the sender is waiting for then (one attempt per address, each bounded by
//!    `request.timeout.ms`).
//! 7. A broker whose last request got no answer (a lost connection, a timeout) gets one request
//!    at a time until one is answered, as Java's sender sends nothing to a node that is not
//!    ready. Requests queued on a dead or hung broker's lane would each wait out a connect and a
//!    request timeout of their own, one after the other, and their partitions could not move to
//!    a new leader before the last of them failed (rule 3). The producer's own client is told
//!    too, so that its next metadata request goes to another broker first: asked on this
//!    thread, a metadata request to a hung broker would hold every partition for a request
//!    timeout.
//!
//! A transactional producer (`transactional.id`, [`super::transaction`]) follows two more:
//!
//! 8. The caller's thread owns the producer id and epoch (InitProducerId, EndTxn); the sender
//!    adopts a new epoch only when nothing of the old one is pending, and never takes a new id
//!    itself (rule 5 does not apply: a sequence that cannot continue, a batch refused or
//!    expired, makes the transaction abortable instead). With transaction version 1 no batch
//!    of a partition goes before AddPartitionsToTxn added the partition. PRODUCER_FENCED or
//!    INVALID_PRODUCER_EPOCH ends the producer: a newer one with the same id took over.
//! 9. An abort fails every batch not yet on the wire; those on the wire are answered first
//!    (the caller waits for them before EndTxn), so nothing of the aborted transaction is
//!    written after its abort marker.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use kafka_protocol::records::Compression;
use log::{debug, info, trace, warn};

use super::accumulator::{Accumulator, DrainedBatch, TopicState};
use super::error::ProduceError;
use super::handle::BatchOutcome;
use super::transaction::TxnLink;
use crate::config::{CompressionType, ProducerSettings};
use crate::wire::records::encode::{Codec, ProducerStamp, SealedBatch};
use crate::wire::{
    Client, KafkaCode, PartitionAnswer, ProduceDone, ProduceJob, ProduceLanes, ProducerIdentity,
    TopicBatches, TransactionVersion,
};
use crate::TopicPartition;

mod transactional;

/// A batch on its way: sealed, with the sequence it was first sent with.
#[derive(Debug)]
struct Batch {
    sealed: SealedBatch,
    outcome: Arc<BatchOutcome>,
    charged: usize,
    created: Instant,
    /// The sequence of its first record, once it was first sent under the current epoch.
    sequence: Option<i32>,
    attempts: u32,
    /// Sent and not answered: it may have been written (rule 4).
    fate_unknown: bool,
    last_error: Option<String>,
}

/// One partition's flow (rules 2 and 3).
#[derive(Debug, Default)]
struct Flow {
    /// Batches to send, in sequence order (retries first).
    queue: VecDeque<Batch>,
    /// Batches on the wire.
    in_flight: usize,
    /// The sequences of the batches on the wire (to tell an earlier one from a later one).
    on_wire: Vec<i32>,
    /// Set by a retriable failure: nothing is sent until `in_flight` is 0 and this time passed.
    retry_at: Option<Instant>,
    /// A failure this flow is waiting out (rule 3).
    retrying: bool,
    /// A batch of this producer id was acknowledged here: the leader checks our sequences now
    /// (rule 2).
    confirmed: bool,
    /// Retried since the last acknowledgement: one batch at a time until the next (rule 2).
    recovering: bool,
    next_sequence: i32,
}

/// What a job carried, to settle it from its answer.
#[derive(Debug)]
struct Sent {
    batches: Vec<(TopicPartition, Batch)>,
}

pub(crate) struct Sender {
    acc: Arc<Accumulator>,
    settings: ProducerSettings,
    client: Client,
    lanes: ProduceLanes,
    codec: Codec,
    identity: Option<ProducerIdentity>,
    reset_needed: bool,
    flows: HashMap<TopicPartition, Flow>,
    jobs: HashMap<u64, Sent>,
    /// Requests unanswered per broker (at most `max.in.flight.requests.per.connection`).
    broker_in_flight: HashMap<i32, usize>,
    /// Brokers whose last request got no answer: one request at a time (rule 7).
    troubled: HashSet<i32>,
    metadata_at: Option<Instant>,
    metadata_due: bool,
    /// A transactional producer's link to its caller (rules 8 and 9); `None` otherwise.
    txn: Option<Arc<TxnLink>>,
    /// The aborts of the link already applied (rule 9).
    aborts_seen: u64,
    /// Version 1: when the next AddPartitionsToTxn may go (after a retriable refusal).
    add_partitions_at: Option<Instant>,
}

impl Sender {
    pub(crate) fn new(
        acc: Arc<Accumulator>,
        settings: ProducerSettings,
        client: Client,
        txn: Option<Arc<TxnLink>>,
    ) -> Self {
        let lanes = ProduceLanes::new(client.config(), settings.max_in_flight);
        acc.set_wake(lanes.nudge());
        let codec = Codec {
            compression: match settings.compression {
                CompressionType::None => Compression::None,
                CompressionType::Gzip => Compression::Gzip,
                CompressionType::Snappy => Compression::Snappy,
                CompressionType::Lz4 => Compression::Lz4,
                CompressionType::Zstd => Compression::Zstd,
            },
            level: settings.compression_level,
        };
        Sender {
            acc,
            settings,
            client,
            lanes,
            codec,
            identity: None,
            reset_needed: false,
            flows: HashMap::new(),
            jobs: HashMap::new(),
            broker_in_flight: HashMap::new(),
            troubled: HashSet::new(),
            metadata_at: None,
            metadata_due: true,
            txn,
            aborts_seen: 0,
            add_partitions_at: None,
        }
    }

    /// Starts the thread.
    pub(crate) fn spawn(self) -> std::io::Result<thread::JoinHandle<()>> {
        thread::Builder::new()
            .name("rg-producer".to_string())
            .spawn(move || self.run())
    }

    fn run(mut self) {
        loop {
            // Overdue batches first, then the requests that may block this thread (metadata,
            // a producer id: one attempt each, bounded by the request timeout), then the clock
            // read again for everything after them.
            self.expire(Instant::now());
            self.refresh_metadata(Instant::now());
            if let Err(e) = self.ensure_identity() {
                self.fail_everything(e);
                return;
            }
            let now = Instant::now();
            let (drained, next_linger) = self.acc.drain(now);
            for b in drained {
                self.admit(b);
            }
            self.apply_aborts();
            self.expire(now);
            if let Err(e) = self.add_partitions(now) {
                self.fail_everything(e);
                return;
            }
            self.send_ready(now);
            if self.acc.is_closed_and_empty() && self.jobs.is_empty() {
                break;
            }
            let until = self.next_wake(now, next_linger);
            for done in self.lanes.collect(until) {
                self.answered(done);
            }
        }
        debug!("producer: the sender thread ends");
    }

    /// Seals a batch from the accumulator and queues it on its partition's flow.
    fn admit(&mut self, b: DrainedBatch) {
        let count = b.records.count() as u64;
        match b.records.seal(self.codec) {
            Ok(sealed) => {
                let flow = self.flows.entry(b.tp.clone()).or_default();
                flow.queue.push_back(Batch {
                    sealed,
                    outcome: b.outcome,
                    charged: b.charged,
                    created: b.created,
                    sequence: None,
                    attempts: 0,
                    fate_unknown: false,
                    last_error: None,
                });
            }
            Err(e) => {
                b.outcome.settle(Err(ProduceError::Fatal {
                    reason: format!("cannot compress a batch: {e}"),
                }));
                self.acc.settled(count, b.charged);
            }
        }
    }

    /// Metadata for every topic in use: when a `send` waits for a topic, when a leader is
    /// unknown or moved, and every `metadata.max.age.ms`.
    fn refresh_metadata(&mut self, now: Instant) {
        let aged = self
            .metadata_at
            .is_none_or(|at| now >= at + self.settings.metadata_max_age);
        let recent = self
            .metadata_at
            .is_some_and(|at| now < at + self.settings.retry_backoff);
        let wanted = self.acc.wants_metadata();
        if !(aged || (self.metadata_due && !recent) || (wanted && !recent)) {
            return;
        }
        let topics = self.acc.topics_wanted();
        if topics.is_empty() {
            // Nothing to ask about (no record sent yet): nothing is due either. Left due, it
            // would make `next_wake` answer "now" on every turn, and an idle producer (one made
            // before its first record, as a transactional consumer's is while the group joins)
            // would spin a core until its first `send`.
            self.metadata_due = false;
            return;
        }
        self.metadata_at = Some(now);
        let names: Vec<&str> = topics.iter().map(|t| &**t).collect();
        match self.client.metadata_single(&names) {
            Ok(md) => {
                self.metadata_due = false;
                for t in md {
                    let state = match t.error {
                        Some(code) => TopicState::Failed(code.name()),
                        None if t.partitions.is_empty() => {
                            TopicState::Failed("no partitions".to_string())
                        }
                        None => TopicState::Known(t.partitions.len() as i32),
                    };
                    self.acc.learned(Arc::clone(&t.name), state);
                }
            }
            Err(e) => {
                warn!("producer: metadata failed: {e}");
                for t in topics {
                    self.acc.learned(t, TopicState::Failed(e.to_string()));
                }
            }
        }
    }

    /// A producer id before the first batch goes out, and a new one when rule 5 asks for it and
    /// nothing is unanswered or of unknown fate.
    fn ensure_identity(&mut self) -> Result<(), ProduceError> {
        if !self.settings.idempotence {
            return Ok(());
        }
        if let Some(link) = &self.txn {
            // Rule 8: the caller's thread owns the id and epoch; a new one (after an abort, or
            // every EndTxn of version 2) comes only when nothing of the old epoch is pending.
            let id = link.identity();
            if id.is_some() && id != self.identity {
                debug!("producer: transactional id epoch {:?}", id.map(|i| i.epoch));
                self.identity = id;
                self.reset_needed = false;
                for flow in self.flows.values_mut() {
                    flow.next_sequence = 0;
                    flow.confirmed = false;
                    for b in &mut flow.queue {
                        b.sequence = None;
                    }
                }
            }
            return Ok(());
        }
        let nothing_to_send = self.flows.values().all(|f| f.queue.is_empty());
        if self.identity.is_none() {
            if nothing_to_send {
                return Ok(());
            }
        } else if !self.reset_needed || !self.jobs.is_empty() || self.any_fate_unknown() {
            return Ok(());
        }
        let current = self.identity;
        match self.client.init_producer_id() {
            Ok(id) => {
                if let Some(old) = current {
                    info!(
                        "producer: new producer id {} (was {}); every partition's sequence \
                         starts again",
                        id.producer_id, old.producer_id
                    );
                } else {
                    debug!("producer: id {} epoch {}", id.producer_id, id.epoch);
                }
                self.identity = Some(id);
                self.reset_needed = false;
                for flow in self.flows.values_mut() {
                    flow.next_sequence = 0;
                    flow.confirmed = false;
                    for b in &mut flow.queue {
                        b.sequence = None;
                    }
                }
                Ok(())
            }
            Err(e) if e.retriable() => {
                warn!("producer: InitProducerId failed, will retry: {e}");
                Ok(())
            }
            Err(e) => Err(ProduceError::Fatal {
                reason: format!("InitProducerId refused: {e}"),
            }),
        }
    }

    fn any_fate_unknown(&self) -> bool {
        self.flows
            .values()
            .any(|f| f.queue.iter().any(|b| b.fate_unknown))
    }

    /// Fails batches past `delivery.timeout.ms` that are not on the wire (rule 6).
    fn expire(&mut self, now: Instant) {
        let timeout = self.settings.delivery_timeout;
        let mut expired = Vec::new();
        for (tp, flow) in self.flows.iter_mut() {
            let mut keep = VecDeque::with_capacity(flow.queue.len());
            for b in flow.queue.drain(..) {
                if now >= b.created + timeout {
                    expired.push((tp.clone(), b));
                } else {
                    keep.push_back(b);
                }
            }
            flow.queue = keep;
        }
        for (tp, b) in expired {
            if b.sequence.is_some() {
                // A sequence the leader may never see: the partition cannot continue (rule 5).
                self.reset_needed = true;
            }
            let error = ProduceError::DeliveryTimeout {
                topic: tp.topic.to_string(),
                partition: tp.partition,
                attempts: b.attempts,
                last: b.last_error.clone(),
            };
            self.settle(b, Err(error));
        }
    }

    /// Builds and submits one request per leader with room, one batch per partition that may
    /// send (rules 2 and 3).
    fn send_ready(&mut self, now: Instant) {
        if self.settings.idempotence && (self.identity.is_none() || self.reset_needed) {
            // Before the id, nothing can be stamped; while a reset waits, only batches of unknown
            // fate go (under the old epoch), to learn their fate.
            if self.identity.is_none() {
                return;
            }
        }
        let max_per_partition = if self.settings.idempotence {
            self.settings.max_in_flight.min(5)
        } else {
            self.settings.max_in_flight
        };
        let mut by_leader: HashMap<i32, Vec<TopicPartition>> = HashMap::new();
        for (tp, flow) in &self.flows {
            let Some(next) = flow.queue.front() else {
                continue;
            };
            if flow.retrying && flow.in_flight > 0 {
                continue;
            }
            if flow.retry_at.is_some_and(|at| now < at) {
                continue;
            }
            let limit = if flow.confirmed && !flow.recovering {
                max_per_partition
            } else {
                1
            };
            if flow.in_flight >= limit {
                continue;
            }
            if self.reset_needed && !next.fate_unknown {
                continue;
            }
            if self.txn.as_ref().is_some_and(|l| !l.is_added(tp)) {
                // Rule 8 (version 1): not before the coordinator added the partition.
                continue;
            }
            match self.client.cached_leader(tp) {
                Some(leader) if leader >= 0 => {
                    by_leader.entry(leader).or_default().push(tp.clone())
                }
                _ => self.metadata_due = true,
            }
        }
        for (leader, mut tps) in by_leader {
            let busy = self.broker_in_flight.get(&leader).copied().unwrap_or(0);
            let room = if self.troubled.contains(&leader) {
                1
            } else {
                self.settings.max_in_flight
            };
            if busy >= room {
                continue;
            }
            let Some(addr) = self.client.broker(leader).map(|b| b.addr()) else {
                self.metadata_due = true;
                continue;
            };
            tps.sort();
            let mut size = 0usize;
            let mut batches = Vec::new();
            for tp in tps {
                let Some(flow) = self.flows.get_mut(&tp) else {
                    continue;
                };
                let Some(len) = flow.queue.front().map(|b| b.sealed.wire_len()) else {
                    continue;
                };
                if !batches.is_empty() && size + len > self.settings.max_request_size {
                    break;
                }
                let Some(mut b) = flow.queue.pop_front() else {
                    continue;
                };
                size += len;
                if b.sequence.is_none() && self.settings.idempotence {
                    b.sequence = Some(flow.next_sequence);
                    flow.next_sequence = flow.next_sequence.wrapping_add(b.sealed.count());
                }
                flow.in_flight += 1;
                if let Some(seq) = b.sequence {
                    flow.on_wire.push(seq);
                }
                flow.retrying = false;
                flow.retry_at = None;
                b.attempts += 1;
                batches.push((tp, b));
            }
            if batches.is_empty() {
                continue;
            }
            let stamp_of = |b: &Batch| match (self.identity, b.sequence) {
                (Some(id), Some(seq)) if self.settings.idempotence => ProducerStamp {
                    producer_id: id.producer_id,
                    epoch: id.epoch,
                    base_sequence: seq,
                    transactional: self.txn.is_some(),
                },
                _ => ProducerStamp::NONE,
            };
            let mut topics: Vec<TopicBatches> = Vec::new();
            for (tp, b) in &batches {
                let stamp = stamp_of(b);
                trace!(
                    "producer: {tp} to broker {leader}: sequence {} epoch {} ({} records, attempt {})",
                    stamp.base_sequence,
                    stamp.epoch,
                    b.sealed.count(),
                    b.attempts
                );
                let bytes = b.sealed.stamp(stamp);
                match topics.last_mut() {
                    Some((t, parts)) if *t == tp.topic => parts.push((tp.partition, bytes)),
                    _ => topics.push((Arc::clone(&tp.topic), vec![(tp.partition, bytes)])),
                }
            }
            let job = ProduceJob {
                acks: self.settings.acks.wire_value(),
                timeout: self.settings.request_timeout,
                transactional_id: self.txn.as_ref().map(|l| Arc::clone(l.transactional_id())),
                transaction_version: self
                    .txn
                    .as_ref()
                    .map_or(TransactionVersion::V1, |l| l.version()),
                topics,
            };
            match self.lanes.submit(leader, &addr, job) {
                Ok(id) => {
                    if let Some(link) = &self.txn {
                        link.wrote();
                    }
                    *self.broker_in_flight.entry(leader).or_default() += 1;
                    self.jobs.insert(id, Sent { batches });
                }
                Err(e) => {
                    warn!("producer: cannot reach broker {leader}: {e}");
                    for (tp, b) in batches {
                        self.retry(tp, b, e.to_string(), false, now);
                    }
                }
            }
        }
    }

    /// The next time the loop must look again: an open batch's linger, a flow's backoff, the
    /// oldest batch's delivery timeout, the metadata's age; at most a second away.
    fn next_wake(&self, now: Instant, next_linger: Option<Instant>) -> Instant {
        let mut until = now + Duration::from_secs(1);
        if let Some(at) = next_linger {
            until = until.min(at);
        }
        for flow in self.flows.values() {
            if let Some(at) = flow.retry_at {
                until = until.min(at);
            }
            if let Some(b) = flow.queue.front() {
                until = until.min(b.created + self.settings.delivery_timeout);
            }
        }
        if let Some(at) = self.add_partitions_at {
            until = until.min(at);
        }
        if self.metadata_due || self.acc.wants_metadata() {
            let at = self
                .metadata_at
                .map_or(now, |at| at + self.settings.retry_backoff);
            until = until.min(at);
        }
        if self.identity.is_none()
            && self.settings.idempotence
            && self.flows.values().any(|f| !f.queue.is_empty())
        {
            until = until.min(now + self.settings.retry_backoff);
        }
        until.max(now)
    }

    /// Settles what a request's answer (or failure) says of each of its batches.
    fn answered(&mut self, done: ProduceDone) {
        let Some(sent) = self.jobs.remove(&done.id) else {
            return;
        };
        if let Some(n) = self.broker_in_flight.get_mut(&done.broker) {
            *n = n.saturating_sub(1);
        }
        let now = Instant::now();
        match done.result {
            Err(e) => {
                // No answer: each batch may have been written (rule 4).
                let why = e.to_string();
                debug!("producer: broker {} request failed: {why}", done.broker);
                self.metadata_due = true;
                self.troubled.insert(done.broker);
                self.client.set_troubled_elsewhere(done.broker, true);
                for (tp, b) in sent.batches {
                    self.landed(&tp, &b);
                    self.retry(tp, b, why.clone(), true, now);
                }
            }
            Ok(answer) => {
                if self.troubled.remove(&done.broker) {
                    self.client.set_troubled_elsewhere(done.broker, false);
                }
                let mut by_tp: HashMap<(Arc<str>, i32), PartitionAnswer> = answer
                    .partitions
                    .into_iter()
                    .map(|p| ((Arc::clone(&p.topic), p.partition), p))
                    .collect();
                for (tp, b) in sent.batches {
                    self.landed(&tp, &b);
                    match by_tp.remove(&(Arc::clone(&tp.topic), tp.partition)) {
                        None if self.settings.acks.wire_value() == 0 => self.settle(b, Ok(-1)),
                        None => self.retry(
                            tp,
                            b,
                            "the answer did not mention the partition".to_string(),
                            true,
                            now,
                        ),
                        Some(p) => self.partition_answered(tp, b, p, now),
                    }
                }
            }
        }
    }

    fn landed(&mut self, tp: &TopicPartition, b: &Batch) {
        if let Some(flow) = self.flows.get_mut(tp) {
            flow.in_flight = flow.in_flight.saturating_sub(1);
            if let Some(seq) = b.sequence {
                flow.on_wire.retain(|s| *s != seq);
            }
        }
    }

    fn partition_answered(
        &mut self,
        tp: TopicPartition,
        mut b: Batch,
        p: PartitionAnswer,
        now: Instant,
    ) {
        b.fate_unknown = false;
        trace!(
            "producer: {tp} sequence {:?}: {:?} at offset {}",
            b.sequence,
            p.error.map(KafkaCode::name),
            p.base_offset
        );
        let Some(code) = p.error else {
            if let Some(flow) = self.flows.get_mut(&tp) {
                flow.confirmed = true;
                flow.recovering = false;
            }
            self.settle(b, Ok(p.base_offset));
            return;
        };
        let why = format!("{} {}", code.name(), p.message.clone().unwrap_or_default());
        match code {
            // Written by an earlier attempt (brokers before 2.x say so instead of the offset).
            KafkaCode::DUPLICATE_SEQUENCE_NUMBER => {
                if let Some(flow) = self.flows.get_mut(&tp) {
                    flow.confirmed = true;
                    flow.recovering = false;
                }
                self.settle(b, Ok(-1));
            }
            KafkaCode::OUT_OF_ORDER_SEQUENCE_NUMBER | KafkaCode::UNKNOWN_PRODUCER_ID => {
                // An earlier batch of the partition is still to be retried or on the wire: this
                // one follows it (rule 3). Otherwise the sequence cannot continue (rule 5).
                let earlier = |s: &i32| Some(*s) < b.sequence;
                let earlier_pending = self.flows.get(&tp).is_some_and(|f| {
                    f.on_wire.iter().any(earlier)
                        || f.queue
                            .iter()
                            .any(|q| q.sequence.as_ref().is_some_and(earlier))
                });
                if !earlier_pending || code == KafkaCode::UNKNOWN_PRODUCER_ID {
                    if self.txn.is_some() {
                        // Rule 8: inside a transaction the sequence cannot restart; the
                        // transaction aborts (and the abort moves the epoch).
                        warn!("producer: {tp}: {why}; the transaction must abort");
                        let error = ProduceError::Refused {
                            topic: tp.topic.to_string(),
                            partition: tp.partition,
                            code,
                            message: p.message.unwrap_or_default(),
                        };
                        self.settle(b, Err(error));
                        return;
                    }
                    warn!("producer: {tp}: {why}; a new producer id will be taken");
                    self.reset_needed = true;
                }
                self.retry(tp, b, why, false, now);
            }
            KafkaCode::PRODUCER_FENCED
            | KafkaCode::INVALID_PRODUCER_EPOCH
            | KafkaCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            | KafkaCode::INVALID_TXN_STATE
                if self.txn.is_some() =>
            {
                // Rule 8: a newer producer of the same transactional id took over.
                let error = ProduceError::Fenced {
                    transactional_id: self
                        .txn
                        .as_ref()
                        .map(|l| l.transactional_id().to_string())
                        .unwrap_or_default(),
                    code,
                };
                if let Some(link) = &self.txn {
                    link.fatal(error.clone());
                }
                self.settle(b, Err(error.clone()));
                self.fail_everything(error);
            }
            code if code.retriable() || code == KafkaCode::NOT_ENOUGH_REPLICAS => {
                if code.is_stale_metadata() {
                    self.metadata_due = true;
                }
                self.retry(tp, b, why, false, now);
            }
            code => {
                if b.sequence.is_some() {
                    self.reset_needed = true;
                }
                let error = ProduceError::Refused {
                    topic: tp.topic.to_string(),
                    partition: tp.partition,
                    code,
                    message: p.message.unwrap_or_default(),
                };
                self.settle(b, Err(error));
            }
        }
    }

    /// Puts `b` back at its place in its partition's flow (sequence order) after a failure.
    fn retry(
        &mut self,
        tp: TopicPartition,
        mut b: Batch,
        why: String,
        unknown: bool,
        now: Instant,
    ) {
        b.fate_unknown |= unknown;
        b.last_error = Some(why);
        let backoff = self.settings.retry_backoff;
        let flow = self.flows.entry(tp).or_default();
        let at = flow
            .queue
            .iter()
            .position(|q| match (q.sequence, b.sequence) {
                (Some(qs), Some(bs)) => qs > bs,
                (None, _) => true,
                (Some(_), None) => false,
            })
            .unwrap_or(flow.queue.len());
        flow.queue.insert(at, b);
        flow.retrying = true;
        flow.recovering = true;
        flow.retry_at = Some(now + backoff);
    }

    fn settle(&mut self, b: Batch, result: Result<i64, ProduceError>) {
        if let (Some(link), Err(error)) = (&self.txn, &result) {
            // Rule 8: a record of the transaction was not written; it can only abort.
            link.record_failed(error);
        }
        let count = b.sealed.count() as u64;
        b.outcome.settle(result);
        self.acc.settled(count, b.charged);
    }

    /// The producer cannot go on: every batch fails with `error`, and so does every later call.
    fn fail_everything(&mut self, error: ProduceError) {
        warn!("producer: {error}");
        self.acc.fail(error.clone());
        let flows: Vec<Batch> = self
            .flows
            .drain()
            .flat_map(|(_, f)| f.queue.into_iter())
            .collect();
        for b in flows {
            self.settle(b, Err(error.clone()));
        }
        let jobs: Vec<Batch> = self
            .jobs
            .drain()
            .flat_map(|(_, s)| s.batches.into_iter().map(|(_, b)| b))
            .collect();
        for b in jobs {
            self.settle(b, Err(error.clone()));
        }
        self.acc.abort_all(&error);
    }
}
