//! [`InMemoryLog`]: partitions of records and the groups' committed offsets, answering a
//! consumer's fetches and position lookups from memory.
//!
//! Why real encoded batches rather than records handed over as values: the consumer's intake
//! decodes what it fetched a batch at a time and moves its position by what the batch headers
//! say, so a log that skipped the encoding would skip the very code whose positions tests check.
//! Each produce call is one batch (as a producer's request is), and a fetch from the middle of a
//! batch returns the whole batch, as a broker does, leaving the decoder to drop the records
//! before the fetch offset.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;

use crate::fuzzing::batch_writer::{batch_of, RawBatch, RawRecord};
use crate::wire::records::PartitionInput;
use crate::wire::{
    CommittedOffset, DecodeBudget, FetchConfig, FetchPosition, IsolationLevel, KafkaCode,
    LazyPartition, LazyRecords, OffsetCommitEntry, OffsetSpec, ProduceRecord, Record, RecordSource,
    Result, TimestampType, WireError,
};
use crate::TopicPartition;

/// Records one fetch returns per partition unless [`InMemoryLog::set_max_fetch_records`] says
/// otherwise: enough for a batch of the consumer's default `max.poll.records`, few enough that a
/// long partition takes several fetches, as on a broker.
pub const DEFAULT_MAX_FETCH_RECORDS: usize = 500;

/// One record as stored.
#[derive(Clone, Debug)]
struct Stored {
    timestamp: i64,
    key: Option<Bytes>,
    value: Option<Bytes>,
    headers: Vec<(String, Option<Bytes>)>,
    /// Whether it is the first record of the batch it was produced in.
    batch_start: bool,
}

/// One partition's log: `records[i]` is at offset `log_start + i`.
#[derive(Debug, Default)]
struct PartitionLog {
    log_start: i64,
    records: Vec<Stored>,
}

impl PartitionLog {
    fn high_watermark(&self) -> i64 {
        self.log_start + self.records.len() as i64
    }
}

/// A fault armed for the next `times` requests of one kind.
#[derive(Debug)]
struct Armed<T> {
    times: usize,
    what: T,
}

/// Takes one use of an armed fault, disarming it after its last.
fn take<T: Clone>(armed: &mut Option<Armed<T>>) -> Option<T> {
    let fault = armed.as_mut()?;
    let what = fault.what.clone();
    fault.times -= 1;
    if fault.times == 0 {
        *armed = None;
    }
    Some(what)
}

fn arm<T>(times: usize, what: T) -> Option<Armed<T>> {
    (times > 0).then_some(Armed { times, what })
}

#[derive(Debug)]
struct State {
    topics: BTreeMap<Arc<str>, Vec<PartitionLog>>,
    /// What each group committed, per partition.
    committed: HashMap<(String, TopicPartition), CommittedOffset>,
    /// Every stored commit, in order.
    history: Vec<(String, OffsetCommitEntry)>,
    fetch_failures: Option<Armed<WireError>>,
    offset_fetch_failures: Option<Armed<WireError>>,
    list_offsets_failures: Option<Armed<WireError>>,
    commit_refusals: HashMap<TopicPartition, Armed<KafkaCode>>,
    max_fetch_records: usize,
    fetch_wait: Duration,
    fetch_calls: u64,
    /// `max.partition.fetch.bytes` of the last fetch asked for, as the consumer sent it.
    last_partition_max_bytes: Option<i32>,
    /// Rotates the order partitions are filled in, so that `fetch.max.bytes` starves none.
    rotation: usize,
}

impl State {
    fn partition(&self, tp: &TopicPartition) -> Option<&PartitionLog> {
        let index = usize::try_from(tp.partition).ok()?;
        self.topics.get(&tp.topic)?.get(index)
    }

    #[track_caller]
    fn partition_mut(&mut self, tp: &TopicPartition) -> &mut PartitionLog {
        let index = usize::try_from(tp.partition).ok();
        match (self.topics.get_mut(&tp.topic), index) {
            (Some(partitions), Some(index)) if index < partitions.len() => &mut partitions[index],
            _ => panic!("the in-memory log has no partition {tp}"),
        }
    }

    /// Whether a fetch of `positions` would answer something (records or an error) now.
    fn has_answer(&self, positions: &[FetchPosition]) -> bool {
        positions.iter().any(|pos| match self.partition(&pos.tp) {
            None => true,
            Some(log) => pos.offset != log.high_watermark(),
        })
    }

    fn answer(&mut self, positions: &[FetchPosition], cfg: &FetchConfig) -> Vec<LazyPartition> {
        self.rotation = self.rotation.wrapping_add(1);
        let start = self.rotation % positions.len().max(1);
        let max_records = self.max_fetch_records.max(1);
        let max_bytes = usize::try_from(cfg.max_bytes).unwrap_or(0);
        let max_partition_bytes = usize::try_from(cfg.max_partition_bytes).unwrap_or(0);
        let mut total = 0usize;
        let mut out = Vec::with_capacity(positions.len());
        for pos in positions[start..].iter().chain(&positions[..start]) {
            let Some(log) = self.partition(&pos.tp) else {
                out.push(failed(pos, unknown(ApiKey::Fetch, &pos.tp), -1, -1));
                continue;
            };
            let (log_start, end) = (log.log_start, log.high_watermark());
            if pos.offset < log_start || pos.offset > end {
                let error = WireError::kafka(
                    ApiKey::Fetch,
                    KafkaCode::OFFSET_OUT_OF_RANGE,
                    pos.tp.to_string(),
                );
                out.push(failed(pos, error, end, log_start));
                continue;
            }
            let mut data = Vec::new();
            if total == 0 || total < max_bytes {
                data = encode_from(log, pos.offset, max_records, max_partition_bytes);
            }
            total += data.len();
            out.push(LazyPartition {
                tp: pos.tp.clone(),
                fetch_offset: pos.offset,
                records: records_of(pos, Bytes::from(data)),
                high_watermark: end,
                last_stable_offset: end,
                log_start_offset: log_start,
                error: None,
            });
        }
        out
    }
}

/// The batches of `log` from the one holding `offset`, whole, until `max_records` records or
/// `max_bytes` bytes are reached (at least one batch when there is one, as KIP-74 has it).
fn encode_from(log: &PartitionLog, offset: i64, max_records: usize, max_bytes: usize) -> Vec<u8> {
    let Ok(mut at) = usize::try_from(offset - log.log_start) else {
        return Vec::new();
    };
    while at > 0 && at < log.records.len() && !log.records[at].batch_start {
        at -= 1;
    }
    let mut data = Vec::new();
    let mut count = 0usize;
    while at < log.records.len() && (count == 0 || (count < max_records && data.len() < max_bytes))
    {
        let end = (at + 1..log.records.len())
            .find(|&i| log.records[i].batch_start)
            .unwrap_or(log.records.len());
        data.extend(encode_batch(
            log.log_start + at as i64,
            &log.records[at..end],
        ));
        count += end - at;
        at = end;
    }
    data
}

/// One record batch (format v2, uncompressed, create time) of `records` at `base_offset`.
fn encode_batch(base_offset: i64, records: &[Stored]) -> Vec<u8> {
    let first = records.first().map_or(0, |r| r.timestamp);
    let max = records.iter().map(|r| r.timestamp).max().unwrap_or(first);
    let count = i32::try_from(records.len()).unwrap_or(i32::MAX);
    let header = RawBatch {
        base_offset,
        attributes: 0,
        last_offset_delta: count - 1,
        first_timestamp: first,
        max_timestamp: max,
        producer_id: -1,
        record_count: count,
    };
    let raw: Vec<RawRecord> = records
        .iter()
        .enumerate()
        .map(|(i, r)| RawRecord {
            offset_delta: i32::try_from(i).unwrap_or(i32::MAX),
            timestamp_delta: r.timestamp - first,
            key: r.key.as_ref().map(|b| b.to_vec()),
            value: r.value.as_ref().map(|b| b.to_vec()),
            headers: r
                .headers
                .iter()
                .map(|(k, v)| (k.as_bytes().to_vec(), v.as_ref().map(|b| b.to_vec())))
                .collect(),
        })
        .collect();
    batch_of(&header, &raw)
}

fn records_of(pos: &FetchPosition, data: Bytes) -> LazyRecords {
    let input = PartitionInput {
        topic: &pos.tp.topic,
        partition: pos.tp.partition,
        fetch_offset: pos.offset,
        aborted: None,
    };
    LazyRecords::standalone(&input, data, DecodeBudget::default())
}

fn failed(pos: &FetchPosition, error: WireError, end: i64, log_start: i64) -> LazyPartition {
    LazyPartition {
        tp: pos.tp.clone(),
        fetch_offset: pos.offset,
        records: records_of(pos, Bytes::new()),
        high_watermark: end,
        last_stable_offset: end,
        log_start_offset: log_start,
        error: Some(error),
    }
}

fn unknown(api: ApiKey, tp: &TopicPartition) -> WireError {
    WireError::kafka(api, KafkaCode::UNKNOWN_TOPIC_OR_PARTITION, tp.to_string())
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    /// Signalled on every produce, for a fetch waiting for records.
    produced: Condvar,
}

/// Topics of partitions of records, and the committed offsets of consumer groups, in memory:
/// the broker side of a consumer driven by a test.
///
/// Every clone is a handle on the same log, so the test producing records, the consumer
/// fetching them (as its [`RecordSource`]) and a group coordinator storing commits all see one
/// state, from any thread. Nothing here waits unless asked: an empty fetch returns at once
/// (see [`InMemoryLog::set_fetch_wait`]).
///
/// ```
/// use rebalance_guard::testing::InMemoryLog;
/// use rebalance_guard::wire::OffsetCommitEntry;
/// use rebalance_guard::TopicPartition;
///
/// let log = InMemoryLog::new();
/// log.create_topic("orders", 2);
/// assert_eq!(log.produce("orders", 0, "k", "v"), 0);
/// let tp = TopicPartition::new("orders", 0);
/// let entry = OffsetCommitEntry { tp: tp.clone(), offset: 1, leader_epoch: None, metadata: None };
/// log.commit("group", &[entry]);
/// assert_eq!(log.committed("group", &tp), Some(1));
/// ```
#[derive(Clone, Debug)]
pub struct InMemoryLog {
    shared: Arc<Shared>,
}

impl Default for InMemoryLog {
    fn default() -> Self {
        InMemoryLog::new()
    }
}

impl InMemoryLog {
    /// An empty log: no topics, no commits, no faults.
    pub fn new() -> Self {
        InMemoryLog {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    topics: BTreeMap::new(),
                    committed: HashMap::new(),
                    history: Vec::new(),
                    fetch_failures: None,
                    offset_fetch_failures: None,
                    list_offsets_failures: None,
                    commit_refusals: HashMap::new(),
                    max_fetch_records: DEFAULT_MAX_FETCH_RECORDS,
                    fetch_wait: Duration::ZERO,
                    fetch_calls: 0,
                    last_partition_max_bytes: None,
                    rotation: 0,
                }),
                produced: Condvar::new(),
            }),
        }
    }

    /// A panicking test thread must not hide the log from the others: a poisoned lock still
    /// holds a consistent state (every change is made whole under it).
    fn state(&self) -> MutexGuard<'_, State> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Creates `topic` with `partitions` empty partitions, or grows it to that many (existing
    /// partitions keep their records).
    pub fn create_topic(&self, topic: &str, partitions: i32) {
        let mut state = self.state();
        let logs = state.topics.entry(Arc::from(topic)).or_default();
        let wanted = usize::try_from(partitions).unwrap_or(0);
        if logs.len() < wanted {
            logs.resize_with(wanted, PartitionLog::default);
        }
    }

    /// How many partitions `topic` has, `None` if it does not exist.
    pub fn partition_count(&self, topic: &str) -> Option<i32> {
        let state = self.state();
        let logs = state.topics.get(topic)?;
        Some(i32::try_from(logs.len()).unwrap_or(i32::MAX))
    }

    /// Appends one record (a batch of its own, timestamped now) and returns its offset. Panics
    /// if the partition does not exist: a test that produces to nowhere is wrong.
    #[track_caller]
    pub fn produce(
        &self,
        topic: &str,
        partition: i32,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> i64 {
        let record = ProduceRecord {
            key: Some(Bytes::copy_from_slice(key.as_ref())),
            value: Some(Bytes::copy_from_slice(value.as_ref())),
            ..ProduceRecord::default()
        };
        self.produce_batch(&TopicPartition::new(topic, partition), &[record])
    }

    /// Appends `records` as one batch (null keys, tombstones, headers and timestamps as given;
    /// no timestamp means now) and returns the offset of the first. Panics if the partition does
    /// not exist.
    #[track_caller]
    pub fn produce_batch(&self, tp: &TopicPartition, records: &[ProduceRecord]) -> i64 {
        let now = now_ms();
        let mut state = self.state();
        let log = state.partition_mut(tp);
        let base = log.high_watermark();
        log.records
            .extend(records.iter().enumerate().map(|(i, r)| Stored {
                timestamp: r.timestamp.unwrap_or(now),
                key: r.key.clone(),
                value: r.value.clone(),
                headers: r.headers.clone(),
                batch_start: i == 0,
            }));
        drop(state);
        self.shared.produced.notify_all();
        base
    }

    /// The offset the next record of `tp` will get (its log end offset). Panics if the
    /// partition does not exist.
    #[track_caller]
    pub fn high_watermark(&self, tp: &TopicPartition) -> i64 {
        self.state().partition_mut(tp).high_watermark()
    }

    /// The first offset `tp` still holds. Panics if the partition does not exist.
    #[track_caller]
    pub fn log_start(&self, tp: &TopicPartition) -> i64 {
        self.state().partition_mut(tp).log_start
    }

    /// The offset after the last record of the produced batch holding `offset` of `tp` (the
    /// log end when `offset` is at or past it, or the partition does not exist): how far a
    /// broker acquiring whole batches goes.
    pub(crate) fn batch_end(&self, tp: &TopicPartition, offset: i64) -> i64 {
        let state = self.state();
        let Some(log) = state.partition(tp) else {
            return offset;
        };
        let Ok(at) = usize::try_from(offset - log.log_start) else {
            return log.log_start;
        };
        let end = (at + 1..log.records.len())
            .find(|&i| log.records[i].batch_start)
            .unwrap_or(log.records.len());
        log.log_start + end as i64
    }

    /// Up to `max` records of `tp` from `offset` on (from the log start when `offset` is below
    /// it), decoded: what the share coordinator hands out, which acquires records one by one
    /// rather than returning whole batches. Empty for a partition that does not exist.
    pub(crate) fn records_from(&self, tp: &TopicPartition, offset: i64, max: usize) -> Vec<Record> {
        let state = self.state();
        let Some(log) = state.partition(tp) else {
            return Vec::new();
        };
        let from = offset.max(log.log_start);
        let skip = usize::try_from(from - log.log_start).unwrap_or(usize::MAX);
        log.records
            .iter()
            .enumerate()
            .skip(skip)
            .take(max)
            .map(|(index, stored)| Record {
                topic: tp.topic.clone(),
                partition: tp.partition,
                offset: log.log_start + index as i64,
                timestamp: stored.timestamp,
                timestamp_type: TimestampType::CreateTime,
                key: stored.key.clone(),
                value: stored.value.clone(),
                headers: stored.headers.clone(),
            })
            .collect()
    }

    /// Deletes the records of `tp` below `offset` (retention, or DeleteRecords): a consumer
    /// positioned below it is answered OFFSET_OUT_OF_RANGE. Capped at the high watermark.
    #[track_caller]
    pub fn delete_records(&self, tp: &TopicPartition, offset: i64) {
        let mut state = self.state();
        let log = state.partition_mut(tp);
        let offset = offset.min(log.high_watermark());
        if let Ok(gone) = usize::try_from(offset - log.log_start) {
            log.records.drain(..gone);
            log.log_start = offset;
            if let Some(first) = log.records.first_mut() {
                first.batch_start = true;
            }
        }
    }

    /// Cuts the log of `tp` back to end at `offset` (a new leader that lacked the tail: unclean
    /// election): a consumer positioned past it is answered OFFSET_OUT_OF_RANGE, and the next
    /// records produced reuse the offsets. Never below the log start.
    #[track_caller]
    pub fn truncate(&self, tp: &TopicPartition, offset: i64) {
        let mut state = self.state();
        let log = state.partition_mut(tp);
        if let Ok(keep) = usize::try_from(offset - log.log_start) {
            log.records.truncate(keep);
        } else {
            log.records.clear();
        }
    }

    /// Stores offsets `group_id` commits, as the group coordinator's log does once it accepted
    /// them: each partition's result, refused where [`InMemoryLog::refuse_commits`] says so
    /// (nothing stored for it) or UNKNOWN_TOPIC_OR_PARTITION for a partition that does not
    /// exist. Coordinators call this after their own membership checks; a test may call it
    /// directly for a commit made outside any generation.
    pub fn commit(
        &self,
        group_id: &str,
        entries: &[OffsetCommitEntry],
    ) -> Vec<(TopicPartition, KafkaCode)> {
        let mut state = self.state();
        let mut out = Vec::with_capacity(entries.len());
        for entry in entries {
            let refused = match state.commit_refusals.get_mut(&entry.tp) {
                Some(armed) => {
                    armed.times -= 1;
                    let code = armed.what;
                    if armed.times == 0 {
                        state.commit_refusals.remove(&entry.tp);
                    }
                    Some(code)
                }
                None => None,
            };
            let code = match refused {
                Some(code) => code,
                None if state.partition(&entry.tp).is_none() => {
                    KafkaCode::UNKNOWN_TOPIC_OR_PARTITION
                }
                None => {
                    // As Kafka answers it: a negative position (a fencing token's commit for a
                    // partition without one) reads back as none, its metadata kept.
                    let committed = CommittedOffset {
                        tp: entry.tp.clone(),
                        offset: (entry.offset >= 0).then_some(entry.offset),
                        leader_epoch: entry.leader_epoch,
                        metadata: entry.metadata.clone(),
                    };
                    state
                        .committed
                        .insert((group_id.to_string(), entry.tp.clone()), committed);
                    state.history.push((group_id.to_string(), entry.clone()));
                    KafkaCode::NONE
                }
            };
            out.push((entry.tp.clone(), code));
        }
        out
    }

    /// The offset `group_id` last committed for `tp`, if any.
    pub fn committed(&self, group_id: &str, tp: &TopicPartition) -> Option<i64> {
        self.committed_offset(group_id, tp)?.offset
    }

    /// What `group_id` last committed for `tp`, with its leader epoch and metadata (where this
    /// library keeps a partition's completed-offsets map).
    pub fn committed_offset(&self, group_id: &str, tp: &TopicPartition) -> Option<CommittedOffset> {
        let key = (group_id.to_string(), tp.clone());
        self.state().committed.get(&key).cloned()
    }

    /// Every commit of `group_id` the log stored, in order: for tests that check commits never
    /// went backwards or that a refused one was not stored.
    pub fn commit_history(&self, group_id: &str) -> Vec<OffsetCommitEntry> {
        self.state()
            .history
            .iter()
            .filter(|(group, _)| group == group_id)
            .map(|(_, entry)| entry.clone())
            .collect()
    }

    /// The next `times` fetches answer `error` for every partition they ask for (records
    /// none), as a broker that failed mid-request does.
    pub fn fail_next_fetches(&self, times: usize, error: WireError) {
        self.state().fetch_failures = arm(times, error);
    }

    /// The next `times` committed-offset lookups fail with `error` as a whole, as the client's
    /// do once its retries are spent (the coordinator unreachable).
    pub fn fail_next_offset_fetches(&self, times: usize, error: WireError) {
        self.state().offset_fetch_failures = arm(times, error);
    }

    /// The next `times` ListOffsets lookups (the `auto.offset.reset` positions) fail with
    /// `error` as a whole.
    pub fn fail_next_list_offsets(&self, times: usize, error: WireError) {
        self.state().list_offsets_failures = arm(times, error);
    }

    /// The next `times` commits of `tp` (by any group) are refused with `code` and not stored;
    /// the other partitions of the same commit are stored as usual.
    pub fn refuse_commits(&self, tp: &TopicPartition, code: KafkaCode, times: usize) {
        let mut state = self.state();
        match arm(times, code) {
            Some(armed) => state.commit_refusals.insert(tp.clone(), armed),
            None => state.commit_refusals.remove(tp),
        };
    }

    /// How many records a fetch returns per partition at most (whole batches: a batch produced
    /// larger is returned whole, as a broker never splits one).
    pub fn set_max_fetch_records(&self, records: usize) {
        self.state().max_fetch_records = records;
    }

    /// How long a fetch with nothing to answer waits for a produce, at most (and never longer
    /// than the fetch's own `max_wait`). Zero, the default, answers at once: deterministic, but
    /// a consumer polling an idle log spins; a few milliseconds spare the CPU of a test whose
    /// producer runs on another thread.
    pub fn set_fetch_wait(&self, wait: Duration) {
        self.state().fetch_wait = wait;
    }

    /// How many fetches were answered (failed ones included).
    pub fn fetch_calls(&self) -> u64 {
        self.state().fetch_calls
    }

    /// What the last fetch allowed each partition (`max.partition.fetch.bytes` as sent), so
    /// that a test can check how the consumer shares its fetch bound among partitions.
    pub fn last_partition_max_bytes(&self) -> Option<i32> {
        self.state().last_partition_max_bytes
    }
}

impl RecordSource for InMemoryLog {
    fn fetch_lazy(
        &mut self,
        positions: &[FetchPosition],
        cfg: &FetchConfig,
    ) -> Result<Vec<LazyPartition>> {
        let mut state = self.state();
        state.fetch_calls += 1;
        state.last_partition_max_bytes = Some(cfg.max_partition_bytes);
        if let Some(error) = take(&mut state.fetch_failures) {
            let failed = positions
                .iter()
                .map(|pos| failed(pos, error.clone(), -1, -1))
                .collect();
            return Ok(failed);
        }
        if positions.is_empty() {
            return Ok(Vec::new());
        }
        let deadline = Instant::now() + cfg.max_wait.min(state.fetch_wait);
        while !state.has_answer(positions) {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            state = self
                .shared
                .produced
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        Ok(state.answer(positions, cfg))
    }

    fn offset_fetch(
        &mut self,
        group_id: &str,
        partitions: &[TopicPartition],
    ) -> Result<Vec<CommittedOffset>> {
        let mut state = self.state();
        if let Some(error) = take(&mut state.offset_fetch_failures) {
            return Err(error);
        }
        Ok(partitions
            .iter()
            .map(|tp| {
                let key = (group_id.to_string(), tp.clone());
                state
                    .committed
                    .get(&key)
                    .cloned()
                    .unwrap_or_else(|| CommittedOffset {
                        tp: tp.clone(),
                        offset: None,
                        leader_epoch: None,
                        metadata: None,
                    })
            })
            .collect())
    }

    fn list_offsets(
        &mut self,
        partitions: &[TopicPartition],
        spec: OffsetSpec,
        _isolation: IsolationLevel,
    ) -> Result<HashMap<TopicPartition, i64>> {
        // No transactions here: the last stable offset is the high watermark.
        let mut state = self.state();
        if let Some(error) = take(&mut state.list_offsets_failures) {
            return Err(error);
        }
        let mut out = HashMap::with_capacity(partitions.len());
        for tp in partitions {
            let log = state
                .partition(tp)
                .ok_or_else(|| unknown(ApiKey::ListOffsets, tp))?;
            let offset = match spec {
                OffsetSpec::Earliest => log.log_start,
                OffsetSpec::Latest => log.high_watermark(),
                // The first record at or after the timestamp; -1 when there is none, as Kafka
                // answers.
                OffsetSpec::Timestamp(at) => log
                    .records
                    .iter()
                    .position(|r| r.timestamp >= at)
                    .map_or(-1, |i| log.log_start + i as i64),
            };
            out.insert(tp.clone(), offset);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
