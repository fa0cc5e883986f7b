//! Fetch: one request per partition leader, all sent before any answer is awaited, with each
//! partition's result (records or error) reported on its own.
//!
//! Fetch returns per-partition results rather than failing as a whole: one moved partition must
//! not stop the others, and the consumer needs each partition's error to decide what to do. With
//! [`FetchConfig::prefetch`] the next Fetch is sent as soon as an answer arrives, and used only if
//! the caller then asks for exactly those positions.
//!
//! The fetch lanes, one per broker, that send these requests and read the answers are this
//! module's child `fetcher.rs` (on the request-lane machine of `wire/lane.rs`); which replica each partition is read from (the leader, or the
//! preferred read replica the leader named for `client.rack`, KIP-392) and the bytes each broker
//! sent are kept by the child `replicas.rs`; this file builds the requests and decodes the
//! answers (`tests.rs`: fetching from a preferred replica against fake brokers).

pub(in crate::wire) mod fetcher;
pub(in crate::wire) mod replicas;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kafka_protocol::messages::{
    self as msg, fetch_request, fetch_response, ApiKey, BrokerId, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use log::{debug, info, warn};

use super::cluster::BrokerInfo;
use super::Client;
use crate::wire::connection::Pending;
use crate::wire::error::{KafkaCode, Result, WireError};
use crate::wire::records::{self, AbortedTxn, Allowance, PartitionDecoder, PartitionInput, Record};
use crate::TopicPartition;
use fetcher::{Answer, Job};
use replicas::FetchStats;

/// Kafka's `isolation.level`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IsolationLevel {
    /// See every record, including those of open and aborted transactions.
    #[default]
    ReadUncommitted,
    /// See only committed transactional records, up to the last stable offset.
    ReadCommitted,
}

impl IsolationLevel {
    pub(super) fn code(self) -> i8 {
        match self {
            IsolationLevel::ReadUncommitted => 0,
            IsolationLevel::ReadCommitted => 1,
        }
    }
}

/// Fetch tuning, named after the Java consumer settings they mirror.
#[derive(Clone, Debug)]
pub struct FetchConfig {
    /// `fetch.max.wait.ms`: how long the broker may wait for `min_bytes` to accumulate.
    pub max_wait: Duration,
    /// `fetch.min.bytes`.
    pub min_bytes: i32,
    /// `fetch.max.bytes`: limit for the whole response (per broker).
    pub max_bytes: i32,
    /// `max.partition.fetch.bytes`.
    pub max_partition_bytes: i32,
    /// `isolation.level`.
    pub isolation: IsolationLevel,
    /// Send the next Fetch for the same partitions as soon as an answer arrives, before
    /// decoding it, so the broker works while we decode (librdkafka gets the same overlap from
    /// its background threads). It changes nothing the caller sees: an answer is used only if
    /// it was asked for exactly the positions the next `fetch` call wants (extra partitions are
    /// ignored); otherwise it is discarded by dropping the fetch connection. A caller whose
    /// calls keep asking for different positions (not the `next_offset`s it was given) pays a
    /// reconnect each time and should turn this off.
    pub prefetch: bool,
    /// `client.rack`: the rack (zone) this consumer runs in, sent in every Fetch (v11+) so that
    /// a leader with a rack-aware replica selector can name a replica in the same rack to read
    /// from (KIP-392); the client then follows that preference (see `replicas.rs`). `None`:
    /// every partition is read from its leader.
    pub client_rack: Option<String>,
}

impl Default for FetchConfig {
    fn default() -> Self {
        FetchConfig {
            max_wait: Duration::from_millis(500),
            min_bytes: 1,
            max_bytes: 50 * 1024 * 1024,
            max_partition_bytes: 1024 * 1024,
            isolation: IsolationLevel::ReadUncommitted,
            prefetch: true,
            client_rack: None,
        }
    }
}

/// A partition to fetch and the offset to fetch from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchPosition {
    /// The partition.
    pub tp: TopicPartition,
    /// First offset wanted.
    pub offset: i64,
}

/// The outcome of fetching one partition.
#[derive(Debug)]
pub struct FetchedPartition {
    /// The partition.
    pub tp: TopicPartition,
    /// The offset that was asked for.
    pub fetch_offset: i64,
    /// Visible records at or after `fetch_offset`, in offset order.
    pub records: Vec<Record>,
    /// Where the next fetch should start: after the last complete batch returned (which may lie
    /// beyond the last visible record when control or aborted batches were skipped), or
    /// `fetch_offset` when nothing was returned or on error.
    pub next_offset: i64,
    /// High watermark reported by the replica fetched from (-1 if unknown): the leader's, or a
    /// preferred read replica's, which may trail the leader's by what it has not learnt yet.
    pub high_watermark: i64,
    /// Last stable offset (-1 if unknown).
    pub last_stable_offset: i64,
    /// Log start offset (-1 if unknown).
    pub log_start_offset: i64,
    /// Error for this partition; `records` is empty when set. Stale-metadata errors have already
    /// scheduled a metadata refresh, so simply fetching again is the right reaction to them.
    pub error: Option<WireError>,
}

/// The outcome of fetching one partition, its records not decoded yet (see
/// [`Client::fetch_lazy`]).
#[derive(Debug)]
pub struct LazyPartition {
    /// The partition.
    pub tp: TopicPartition,
    /// The offset that was asked for.
    pub fetch_offset: i64,
    /// The records at or after `fetch_offset`, decoded as they are wanted (nothing on error).
    pub records: LazyRecords,
    /// High watermark reported by the replica fetched from (-1 if unknown; see
    /// [`FetchedPartition::high_watermark`]).
    pub high_watermark: i64,
    /// Last stable offset (-1 if unknown).
    pub last_stable_offset: i64,
    /// Log start offset (-1 if unknown).
    pub log_start_offset: i64,
    /// Error for this partition, as in [`FetchedPartition::error`]; `records` is empty when set.
    pub error: Option<WireError>,
}

/// One partition's record set of a Fetch response, decoded a batch at a time, under the decode
/// budget of the whole response it came in.
///
/// Why: records decoded only when wanted keep one decoded batch per partition alive, not a
/// whole response's worth. The budget stays one per response (shared by its partitions, as
/// when it is decoded at once), so a hostile response expands no further this way.
#[derive(Debug)]
pub struct LazyRecords {
    decoder: PartitionDecoder,
    allowance: Arc<Mutex<Allowance>>,
}

impl LazyRecords {
    fn new(decoder: PartitionDecoder, allowance: &Arc<Mutex<Allowance>>) -> Self {
        LazyRecords {
            decoder,
            allowance: Arc::clone(allowance),
        }
    }

    /// Records of `data` under a budget of their own: for the intake's tests, and for the
    /// in-memory log of the hidden `testing` module, which answers fetches with real encoded batches.
    pub(crate) fn standalone(
        input: &PartitionInput<'_>,
        data: bytes::Bytes,
        budget: crate::wire::DecodeBudget,
    ) -> Self {
        LazyRecords {
            decoder: PartitionDecoder::new(input, data),
            allowance: Arc::new(Mutex::new(Allowance::new(budget))),
        }
    }

    /// No records (a failed or empty partition).
    fn none(pos: &FetchPosition) -> Self {
        let input = PartitionInput {
            topic: &pos.tp.topic,
            partition: pos.tp.partition,
            fetch_offset: pos.offset,
            aborted: None,
        };
        LazyRecords {
            decoder: PartitionDecoder::new(&input, bytes::Bytes::new()),
            allowance: Arc::new(Mutex::new(Allowance::new(Default::default()))),
        }
    }

    /// Decodes batches until one appends a record to `out` or nothing more comes. A batch that
    /// fails its checks is a [`WireError::CorruptBatch`]; records of earlier batches stay
    /// valid, and [`LazyRecords::next_offset`] points at the failed batch.
    pub fn fill(&mut self, out: &mut Vec<Record>) -> Result<()> {
        // The lock is only ever contended by nothing: one response's partitions are decoded by
        // whoever holds them, one at a time. A poisoned lock still holds a valid allowance.
        let mut allowance = self
            .allowance
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.decoder.fill(out, &mut allowance)
    }

    /// True when nothing more comes out (all decoded, the budget stopped it, or an error).
    pub fn is_finished(&self) -> bool {
        self.decoder.is_finished()
    }

    /// Where the next fetch starts after what was decoded so far (final once finished).
    pub fn next_offset(&self) -> i64 {
        self.decoder.next_offset()
    }

    /// Where the next fetch starts if every complete batch decodes (from batch headers only).
    pub fn end_offset(&self) -> i64 {
        self.decoder.end_offset()
    }

    /// At most this many records are still to come (their batch headers' counts).
    pub fn remaining_records(&self) -> usize {
        self.decoder.remaining_records()
    }

    /// Record data not decoded yet, in bytes (all of it before the first decode).
    pub fn remaining_bytes(&self) -> usize {
        self.decoder.remaining_bytes()
    }

    /// Whether the response's decode budget stopped decoding before the data ended.
    pub fn stopped_by_budget(&self) -> bool {
        self.decoder.summary().stopped_by_budget
    }
}

/// A Fetch sent ahead of the caller's next `fetch` (see [`FetchConfig::prefetch`]), held by the
/// broker's fetch thread.
#[derive(Debug)]
pub(super) struct InFlightFetch {
    /// The positions asked for, sorted, to check that the caller still wants exactly these.
    pub(super) key: Vec<(TopicPartition, i64)>,
    pub(super) settings: FetchSettingsKey,
    pub(super) pending: Pending<msg::FetchRequest>,
    /// When it was sent and how long the broker may hold it: when its answer is due.
    pub(super) sent_at: Instant,
    pub(super) max_wait: Duration,
}

/// The fetch settings a prefetched request was made with; a change invalidates it. Not
/// `max_wait`: a prefetch made with a longer wait still serves a call that waits less (the
/// call returns without it if it is late, and the answer serves the next call).
pub(super) type FetchSettingsKey = (i32, i32, i32, IsolationLevel);

pub(super) fn settings_key(cfg: &FetchConfig) -> FetchSettingsKey {
    (
        cfg.min_bytes,
        cfg.max_bytes,
        cfg.max_partition_bytes,
        cfg.isolation,
    )
}

/// Whether every element of the sorted `small` is in the sorted `big`.
pub(super) fn is_subset(small: &[(TopicPartition, i64)], big: &[(TopicPartition, i64)]) -> bool {
    small.iter().all(|k| big.binary_search(k).is_ok())
}

/// The positions to prefetch after `resp`: each partition moved past its complete batches, in
/// a rotated order (so that every partition gets to be first). `None` when the response had an
/// error: the caller must see it and metadata may need a refresh first.
pub(super) fn continuation(
    group: &[FetchPosition],
    resp: &msg::FetchResponse,
) -> Option<Vec<FetchPosition>> {
    if resp.error_code != 0 {
        return None;
    }
    let mut next: Vec<FetchPosition> = group.to_vec();
    // Index the positions once: a linear search per answered partition would make a response
    // with many partitions quadratic.
    let mut index: HashMap<(&str, i32), usize> = HashMap::with_capacity(group.len());
    for (i, n) in group.iter().enumerate() {
        index.entry((&*n.tp.topic, n.tp.partition)).or_insert(i);
    }
    for topic in &resp.responses {
        for p in &topic.partitions {
            if p.error_code != 0 {
                return None;
            }
            let at = index.get(&(topic.topic.as_str(), p.partition_index));
            if let Some(pos) = at.and_then(|&i| next.get_mut(i)) {
                if let Some(data) = &p.records {
                    pos.offset = records::next_offset_after(data, pos.offset);
                }
            }
        }
    }
    if !next.is_empty() {
        next.rotate_left(1);
    }
    Some(next)
}

/// The Fetch request for `group` (in its order: the rotation decides which partition is first),
/// with each partition's leader epoch (KIP-320) so that a broker with another view of the
/// leadership refuses it (FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH) instead of serving it.
pub(super) fn build_request(
    group: &[FetchPosition],
    epochs: &HashMap<TopicPartition, i32>,
    cfg: &FetchConfig,
    max_bytes: i32,
) -> msg::FetchRequest {
    // Keep the partition order (rotation) while grouping by topic: consecutive runs of the
    // same topic become one FetchTopic.
    let mut topics: Vec<fetch_request::FetchTopic> = Vec::new();
    for pos in group {
        let part = fetch_request::FetchPartition::default()
            .with_partition(pos.tp.partition)
            .with_current_leader_epoch(epochs.get(&pos.tp).copied().unwrap_or(-1))
            .with_fetch_offset(pos.offset)
            .with_partition_max_bytes(cfg.max_partition_bytes);
        match topics.last_mut() {
            Some(t) if t.topic.as_str() == &*pos.tp.topic => t.partitions.push(part),
            _ => topics.push(
                fetch_request::FetchTopic::default()
                    .with_topic(TopicName(StrBytes::from_string(pos.tp.topic.to_string())))
                    .with_partitions(vec![part]),
            ),
        }
    }
    let max_wait = i32::try_from(cfg.max_wait.as_millis()).unwrap_or(i32::MAX);
    msg::FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(max_wait)
        .with_min_bytes(cfg.min_bytes)
        .with_max_bytes(max_bytes)
        .with_isolation_level(cfg.isolation.code())
        .with_topics(topics)
        .with_rack_id(StrBytes::from_string(
            cfg.client_rack.clone().unwrap_or_default(),
        ))
}

pub(super) fn position_key(group: &[FetchPosition]) -> Vec<(TopicPartition, i64)> {
    let mut key: Vec<(TopicPartition, i64)> =
        group.iter().map(|p| (p.tp.clone(), p.offset)).collect();
    key.sort();
    key
}

impl Client {
    /// Fetches from every partition in `positions`, one request per leader, all requests sent
    /// before any response is awaited so the brokers wait for data in parallel.
    ///
    /// Returns one [`FetchedPartition`] per position (in no particular order). Per-partition
    /// failures (leader moved, offset out of range, broker down, corrupt batch) are reported in
    /// that partition's `error`; the call itself fails only if no metadata can be had.
    pub fn fetch(
        &mut self,
        positions: &[FetchPosition],
        cfg: &FetchConfig,
    ) -> Result<Vec<FetchedPartition>> {
        let lazy = self.fetch_lazy(positions, cfg)?;
        let mut results = Vec::with_capacity(lazy.len());
        let mut cut_short = false;
        for part in lazy {
            let mut lazy_records = part.records;
            let mut records = Vec::new();
            let mut error = part.error;
            while error.is_none() && !lazy_records.is_finished() {
                if let Err(e) = lazy_records.fill(&mut records) {
                    error = Some(e);
                }
            }
            cut_short |= lazy_records.stopped_by_budget();
            let next_offset = if error.is_some() {
                records.clear();
                part.fetch_offset
            } else {
                lazy_records.next_offset()
            };
            results.push(FetchedPartition {
                tp: part.tp,
                fetch_offset: part.fetch_offset,
                records,
                next_offset,
                high_watermark: part.high_watermark,
                last_stable_offset: part.last_stable_offset,
                log_start_offset: part.log_start_offset,
                error,
            });
        }
        if cut_short {
            // The prefetch sent for this response assumed every complete batch was decoded;
            // the caller will ask for earlier positions, so it would only be discarded later.
            debug!("fetch: decode budget spent; partitions resume at the first batch not decoded");
        }
        Ok(results)
    }

    /// [`Client::fetch`] with each partition's records left undecoded until they are wanted
    /// (see [`LazyRecords`]): a caller handing records out one at a time then holds one decoded
    /// batch per partition, not the whole response decoded. `next_offset` is only known as
    /// decoding goes ([`LazyRecords::next_offset`]).
    ///
    /// Each leader is fetched from by its own thread (see `fetcher.rs`): this call waits for
    /// the answers at most `max_wait` plus [`FETCH_ANSWER_MARGIN`](crate::wire::FETCH_ANSWER_MARGIN)
    /// once any broker has answered, so a hung or unreachable leader delays no other leader's
    /// partitions. The partitions of a leader that has not answered come back with no records
    /// and no error (their request stays in flight and serves a later call); they fail only
    /// when that request does (after `request_timeout + max_wait`, or at once if the broker
    /// refuses connections).
    pub fn fetch_lazy(
        &mut self,
        positions: &[FetchPosition],
        cfg: &FetchConfig,
    ) -> Result<Vec<LazyPartition>> {
        let mut results = Vec::with_capacity(positions.len());
        if positions.is_empty() {
            return Ok(results);
        }
        if self.metadata_stale || positions.iter().any(|p| !self.leaders.contains_key(&p.tp)) {
            let mut names: Vec<String> = positions.iter().map(|p| p.tp.topic.to_string()).collect();
            names.sort();
            names.dedup();
            if let Err(e) = self.metadata_once(Some(&names)) {
                if self.leaders.is_empty() {
                    return Err(e);
                }
                warn!("fetch: metadata refresh failed, using cached leaders: {e}");
            }
        }
        // Rotate the order so that every partition is regularly first in its request: brokers
        // only guarantee progress (KIP-74) for the first partition when a batch exceeds limits.
        self.fetch_rotation = self.fetch_rotation.wrapping_add(1);
        let start = self.fetch_rotation % positions.len();
        // Each partition goes to its leader, or to the replica the leader named (KIP-392) while
        // that broker is known and not overdue: a replica hung on an earlier request sends its
        // partitions back to their leaders rather than hold them.
        let now = Instant::now();
        let (brokers, fetchers) = (&self.brokers, &self.fetchers);
        let usable =
            |b: i32| brokers.contains_key(&b) && !(fetchers.is_busy(b) && fetchers.is_troubled(b));
        let mut by_leader: BTreeMap<i32, Vec<&FetchPosition>> = BTreeMap::new();
        for pos in positions[start..].iter().chain(&positions[..start]) {
            match self.leaders.get(&pos.tp) {
                Some(&leader) if leader >= 0 => {
                    let broker = self.read_replicas.route(&pos.tp, leader, now, usable);
                    by_leader.entry(broker).or_default().push(pos)
                }
                Some(_) => results.push(failed(
                    pos,
                    WireError::kafka(
                        ApiKey::Fetch,
                        KafkaCode::LEADER_NOT_AVAILABLE,
                        pos.tp.to_string(),
                    ),
                )),
                None => results.push(failed(
                    pos,
                    WireError::kafka(
                        ApiKey::Fetch,
                        KafkaCode::UNKNOWN_TOPIC_OR_PARTITION,
                        pos.tp.to_string(),
                    ),
                )),
            }
        }
        if by_leader.is_empty() {
            self.metadata_stale = true;
        }
        // What this call answers for: every position with a leader, once each.
        let mut wanted: HashMap<TopicPartition, FetchPosition> = HashMap::new();
        for pos in by_leader.values().flatten() {
            wanted
                .entry(pos.tp.clone())
                .or_insert_with(|| (*pos).clone());
        }

        // A response larger than the connection accepts would break the connection on every
        // attempt; leave room for the response's own fields.
        let ceiling = self
            .config
            .connection
            .max_response_size
            .saturating_sub(1024 * 1024)
            .max(1024 * 1024);
        let max_bytes = cfg
            .max_bytes
            .min(i32::try_from(ceiling).unwrap_or(i32::MAX));
        // Hand each idle leader its job; a busy one (an earlier request not answered yet)
        // answers that request first.
        let mut fresh = Vec::with_capacity(by_leader.len());
        for (leader, group) in by_leader {
            if self.fetchers.is_busy(leader) {
                continue;
            }
            let group: Vec<FetchPosition> = group.into_iter().cloned().collect();
            let Some(addr) = self.brokers.get(&leader).map(BrokerInfo::addr) else {
                self.metadata_stale = true;
                for pos in &group {
                    wanted.remove(&pos.tp);
                    results.push(failed(pos, WireError::UnknownBroker { node_id: leader }));
                }
                continue;
            };
            let epochs = group
                .iter()
                .filter_map(|p| Some((p.tp.clone(), *self.leader_epochs.get(&p.tp)?)))
                .collect();
            let mut job_cfg = cfg.clone();
            let now = Instant::now();
            if group
                .iter()
                .any(|p| self.read_replicas.falling_back(&p.tp, now))
            {
                // A partition back from a failed replica: the leader must serve it itself.
                job_cfg.client_rack = None;
            }
            let job = Job {
                positions: group,
                epochs,
                cfg: job_cfg,
                max_bytes,
            };
            let positions = job.positions.clone();
            match self.fetchers.submit(leader, &addr, job) {
                Ok(()) => fresh.push(leader),
                Err(e) => {
                    for pos in &positions {
                        wanted.remove(&pos.tp);
                        results.push(failed(pos, e.clone()));
                    }
                }
            }
        }
        let answers = self.fetchers.collect(&fresh, cfg.max_wait);
        for Answer {
            broker,
            positions: asked,
            result,
        } in answers
        {
            match result {
                Ok(resp) => self.absorb_fetch(resp, broker, &asked, cfg, &mut wanted, &mut results),
                Err(e) => {
                    warn!("fetch from broker {broker} failed: {e}");
                    self.metadata_stale = true;
                    let now = Instant::now();
                    for asked in &asked {
                        if self.is_follower(&asked.tp, broker, cfg) {
                            // Read from the leader next time; the partition just has nothing
                            // new now (it stays in `wanted`).
                            self.read_replicas.avoid(broker, now);
                            self.read_replicas.fall_back(
                                &asked.tp,
                                broker,
                                now,
                                "its answer failed",
                            );
                            continue;
                        }
                        if wanted
                            .get(&asked.tp)
                            .is_some_and(|w| w.offset == asked.offset)
                        {
                            wanted.remove(&asked.tp);
                            results.push(failed(asked, e.clone()));
                        }
                    }
                }
            }
        }
        // A partition no answer covered (its leader is late, or did not return it): nothing
        // new, fetch it again next time.
        for pos in wanted.into_values() {
            results.push(untouched(&pos));
        }
        Ok(results)
    }

    /// Turns `broker`'s answer into results for the positions still `wanted` at the offset the
    /// answer was asked for (removing them from `wanted`); data for anything else is ignored.
    fn absorb_fetch(
        &mut self,
        resp: msg::FetchResponse,
        broker: i32,
        positions: &[FetchPosition],
        cfg: &FetchConfig,
        wanted: &mut HashMap<TopicPartition, FetchPosition>,
        results: &mut Vec<LazyPartition>,
    ) {
        let asked: HashMap<&TopicPartition, i64> =
            positions.iter().map(|p| (&p.tp, p.offset)).collect();
        let mut take = |tp: &TopicPartition| -> Option<FetchPosition> {
            let offset = *asked.get(tp)?;
            if wanted.get(tp).is_some_and(|w| w.offset == offset) {
                wanted.remove(tp)
            } else {
                None
            }
        };
        // One decode budget for the whole response, however many partitions and batches it
        // holds (see `DecodeBudget`).
        let allowance = Arc::new(Mutex::new(Allowance::new(self.config.fetch_decode_budget)));
        let bytes: usize = resp
            .responses
            .iter()
            .flat_map(|t| &t.partitions)
            .filter_map(|p| p.records.as_ref().map(bytes::Bytes::len))
            .sum();
        self.read_replicas
            .count(broker, u64::try_from(bytes).unwrap_or(u64::MAX));
        let now = Instant::now();
        if let Some(code) = KafkaCode::from_code(resp.error_code) {
            for pos in positions {
                if self.is_follower(&pos.tp, broker, cfg) {
                    // A follower's refusal is never the caller's: the leader is asked next.
                    let why = format!("{code} for the whole request");
                    self.read_replicas.fall_back(&pos.tp, broker, now, &why);
                    continue;
                }
                if let Some(pos) = take(&pos.tp) {
                    results.push(failed(
                        &pos,
                        WireError::kafka(ApiKey::Fetch, code, "whole fetch request"),
                    ));
                }
            }
            return;
        }
        // KIP-951 (Fetch v16+): the brokers named as new leaders, so that a partition can move
        // to one without a Metadata round trip.
        for node in &resp.node_endpoints {
            self.brokers
                .entry(node.node_id.0)
                .or_insert_with(|| BrokerInfo {
                    node_id: node.node_id.0,
                    host: node.host.to_string(),
                    port: node.port,
                    rack: node.rack.as_ref().map(|r| r.to_string()),
                });
        }
        for topic in resp.responses {
            let name = self.intern(topic.topic.as_str());
            for p in topic.partitions {
                let key = TopicPartition::new(Arc::clone(&name), p.partition_index);
                let from_follower = self.is_follower(&key, broker, cfg);
                let Some(pos) = take(&key) else {
                    // A prefetched answer for a partition the caller no longer asks for.
                    debug!("fetch: ignoring data of unrequested partition {key}");
                    continue;
                };
                let diverged = p.diverging_epoch.epoch >= 0 || p.diverging_epoch.end_offset >= 0;
                if from_follower {
                    if p.error_code != 0 || diverged {
                        // Whatever the follower says (it left the replica set, it lags behind
                        // this position, its epoch differs), the leader decides: no error for
                        // the caller, nothing new now, the leader next time.
                        let code = KafkaCode(p.error_code);
                        if code.is_stale_metadata() {
                            self.metadata_stale = true;
                        }
                        let why = format!("{code} at offset {}", pos.offset);
                        self.read_replicas.fall_back(&pos.tp, broker, now, &why);
                        results.push(untouched(&pos));
                        continue;
                    }
                    self.read_replicas
                        .follower_named(&pos.tp, broker, p.preferred_read_replica.0);
                } else if p.error_code == 0 {
                    let brokers = &self.brokers;
                    let unknown = self.read_replicas.leader_named(
                        &pos.tp,
                        broker,
                        p.preferred_read_replica.0,
                        now,
                        |b| brokers.contains_key(&b),
                    );
                    self.metadata_stale |= unknown;
                }
                if let Some(code) = KafkaCode::from_code(p.error_code) {
                    if code.is_stale_metadata() {
                        self.leader_moved(&pos.tp, broker, code, &p.current_leader);
                    }
                    if code == KafkaCode::OFFSET_OUT_OF_RANGE {
                        warn!(
                            "fetch: {} offset {} out of range on broker {broker} (log start {},                              high watermark {}): the log was truncated or deleted under this                              position",
                            pos.tp, pos.offset, p.log_start_offset, p.high_watermark
                        );
                    }
                    let mut r = failed(
                        &pos,
                        WireError::kafka(ApiKey::Fetch, code, pos.tp.to_string()),
                    );
                    r.high_watermark = p.high_watermark;
                    r.log_start_offset = p.log_start_offset;
                    results.push(r);
                    continue;
                }
                if diverged {
                    // KIP-320 truncation: only sent when the request carries the last fetched
                    // epoch (this client does not), but never skipped silently: the partition
                    // goes through the caller's out-of-range path.
                    log::error!(
                        "fetch: {} diverged at offset {} on broker {broker}: the leader's log                          ends epoch {} at offset {} (truncated below this position)",
                        pos.tp,
                        pos.offset,
                        p.diverging_epoch.epoch,
                        p.diverging_epoch.end_offset
                    );
                    let mut r = failed(
                        &pos,
                        WireError::kafka(
                            ApiKey::Fetch,
                            KafkaCode::OFFSET_OUT_OF_RANGE,
                            format!(
                                "{} diverging epoch {} ends at {}",
                                pos.tp, p.diverging_epoch.epoch, p.diverging_epoch.end_offset
                            ),
                        ),
                    );
                    r.high_watermark = p.high_watermark;
                    r.log_start_offset = p.log_start_offset;
                    results.push(r);
                    continue;
                }
                let aborted: Option<Vec<AbortedTxn>> = match cfg.isolation {
                    IsolationLevel::ReadCommitted => Some(
                        p.aborted_transactions
                            .iter()
                            .flatten()
                            .map(|t| AbortedTxn {
                                producer_id: t.producer_id.0,
                                first_offset: t.first_offset,
                            })
                            .collect(),
                    ),
                    IsolationLevel::ReadUncommitted => None,
                };
                let input = PartitionInput {
                    topic: &pos.tp.topic,
                    partition: pos.tp.partition,
                    fetch_offset: pos.offset,
                    aborted: aborted.as_deref(),
                };
                let data = p.records.unwrap_or_default();
                results.push(LazyPartition {
                    tp: pos.tp.clone(),
                    fetch_offset: pos.offset,
                    records: LazyRecords::new(PartitionDecoder::new(&input, data), &allowance),
                    high_watermark: p.high_watermark,
                    last_stable_offset: p.last_stable_offset,
                    log_start_offset: p.log_start_offset,
                    error: None,
                });
            }
        }
    }

    /// Whether an answer of `broker` for `tp` comes from a follower (a preferred read replica,
    /// KIP-392): `client.rack` is set and `broker` is not `tp`'s leader as cached. An unknown
    /// leader counts as a follower too, so that the answer of a replica whose partition changed
    /// leader meanwhile is never taken for the leader's word. Without `client.rack` every
    /// answer is handled as a leader's, as it always was.
    fn is_follower(&self, tp: &TopicPartition, broker: i32, cfg: &FetchConfig) -> bool {
        cfg.client_rack.is_some() && self.leaders.get(tp) != Some(&broker)
    }

    /// Bytes received per broker, and how many partitions are read from a preferred read
    /// replica now: where the fetched data came from (see [`FetchStats`]).
    pub fn fetch_stats(&self) -> FetchStats {
        self.read_replicas.stats()
    }

    /// `broker` no longer leads `tp` (or our epoch for it is out of date). When the answer
    /// names the current leader (KIP-951) with a newer epoch and a broker we can reach, the next
    /// fetch goes there directly; otherwise the next fetch refreshes metadata first.
    fn leader_moved(
        &mut self,
        tp: &TopicPartition,
        broker: i32,
        code: KafkaCode,
        current: &fetch_response::LeaderIdAndEpoch,
    ) {
        let known_epoch = self.leader_epochs.get(tp).copied().unwrap_or(-1);
        let named = current.leader_id.0;
        let moves = matches!(
            code,
            KafkaCode::NOT_LEADER_OR_FOLLOWER | KafkaCode::FENCED_LEADER_EPOCH
        ) && named >= 0
            && named != broker
            && current.leader_epoch > known_epoch
            && self.brokers.contains_key(&named);
        if moves {
            info!(
                "fetch: {tp}: broker {broker} says {code}; moving to leader {named} (epoch {}) \
                 as its answer says (KIP-951)",
                current.leader_epoch
            );
            self.leaders.insert(tp.clone(), named);
            self.leader_epochs.insert(tp.clone(), current.leader_epoch);
        } else {
            debug!("fetch: {tp}: broker {broker} says {code}; refreshing metadata");
            self.metadata_stale = true;
            self.leaders.remove(tp);
        }
    }
}

/// A partition result with no records that keeps the position, so the caller simply fetches
/// again.
fn untouched(pos: &FetchPosition) -> LazyPartition {
    LazyPartition {
        tp: pos.tp.clone(),
        fetch_offset: pos.offset,
        records: LazyRecords::none(pos),
        high_watermark: -1,
        last_stable_offset: -1,
        log_start_offset: -1,
        error: None,
    }
}

/// A failed partition result that keeps the position.
fn failed(pos: &FetchPosition, error: WireError) -> LazyPartition {
    LazyPartition {
        error: Some(error),
        ..untouched(pos)
    }
}

#[cfg(test)]
mod tests;
