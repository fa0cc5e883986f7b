//! Fetch intake: the fetch state of the partitions this member owns. Where each partition is
//! fetched next, the records fetched but not handed out yet, which partitions are paused, their
//! fetch errors, and (in [`positions`]) the partitions still waiting for a starting position.
//! One partition's fetched records not handed out yet are a buffer (`buffer.rs`): a few decoded
//! records in line, the rest of the fetched data decoded a batch at a time as the line runs out.
//!
//! The intake never decides ownership: the handoff driver (`handoff.rs`) tells it when partitions arrive
//! ([`Intake::assigned`]) and leave ([`Intake::drop_partition`]), the batch tells it when a
//! partition is fenced under it ([`Intake::drop_fenced`]) or must be read again from an offset
//! ([`Intake::rewind`]).
//!
//! It reads records and starting positions only through a [`RecordSource`] (the member's
//! `wire::Client` in production, an in-memory log in tests), so the whole poll path can be driven
//! without a broker.

mod buffer;
mod positions;
pub(crate) use positions::committed_or_reset;

use std::collections::{HashSet, VecDeque};
use std::time::{Duration, Instant};

use crate::basics::partition::{PartitionMap, PartitionSet};
use crate::guard::PartitionSnapshot;
use crate::metrics;
use crate::wire::{
    self, ErrorChain, FetchConfig, FetchPosition, IsolationLevel, KafkaCode, Record, RecordSource,
};
use crate::TopicPartition;

use super::config::ConsumerConfig;
use super::context::Guard;
use super::error::ConsumerError;
use super::stats::{PartitionStats, SharedMarks};
use super::wake::Waker;

use buffer::{PartitionBuffer, Refill};
use positions::{PendingPositions, Start};

/// Whether a fetch may wait at the broker for data (`fetch.max.wait.ms`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FetchWait {
    /// Nothing is buffered: waiting for data is what the poll is for.
    Block,
    /// Other partitions have records to hand out: take what is there now.
    DontWait,
}

/// Fetch state of the partitions this member owns: where to fetch next, and the records fetched
/// but not handed out yet.
#[derive(Default)]
pub(crate) struct Intake {
    positions: PartitionMap<i64>,
    /// Owned partitions still waiting for a starting position (not fetched until found).
    pending: PendingPositions,
    /// Per partition, the records fetched and not handed out yet, decoded a batch at a time.
    buffers: PartitionMap<PartitionBuffer>,
    paused: PartitionMap<Instant>,
    /// Fetch errors per owned partition (the fetch is retried at the same offset).
    fetch_errors: PartitionMap<FetchErrors>,
    /// Partitions that may have records to hand out, in round-robin order, each at most once
    /// (`in_ring` holds the same set). Entries of partitions that ran dry, were paused or
    /// dropped are discarded lazily when they reach the front, so that every operation of the
    /// hot path is O(1) whatever the partition count. Every partition with records to hand
    /// out is in the ring.
    ring: VecDeque<TopicPartition>,
    in_ring: PartitionSet,
    /// How many records the front of the ring has handed out in its current turn.
    turn: usize,
    /// Partitions whose next record the guard held back (its completed-offsets map is full):
    /// out of the ring until the next batch.
    held: HashSet<TopicPartition>,
    /// Owned partitions whose assignment has no fencing token yet (`fencing.rs`): not fetched,
    /// so no record of them is handed out, until the coordinator accepted their token.
    unfenced: PartitionSet,
    /// Every partition that has a position and nothing buffered (the ones to fetch), and maybe
    /// some that no longer qualify (discarded when next looked at): kept as buffers run dry and
    /// positions are set, so that a poll costs O(dry partitions), not O(owned partitions).
    dry: PartitionSet,
    /// The watermarks of the fetch answers and where reading started, per owned partition: the
    /// inputs of the lag, shared with the stats handle.
    marks: SharedMarks,
}

/// How many consecutive records one partition hands out before the next partition's turn.
///
/// Why not one: the loop commits after every batch, and a commit lists every partition the
/// batch touched. Alternating per record made a 500-record batch over 480 partitions touch all
/// of them, so each commit (and the guard's bookkeeping around it) grew with the partition
/// count. Why not a whole fetch (Java's and librdkafka's order): one partition's large buffer
/// would then hold every other partition back for a whole batch or more. 64 keeps a batch to
/// about eight partitions and delays any partition by at most 64 records per other partition
/// with records.
pub(crate) const TURN_RECORDS: usize = 64;

/// The smallest share of a fetch answer one partition is asked for: a few default-sized
/// producer batches (16 KiB), so that a partition with records makes progress in every answer.
const MIN_PARTITION_SHARE: i32 = 64 * 1024;

/// What each partition may return in one fetch answer when the answer's bound (`max_bytes`,
/// half of `fetch.buffer.bytes` at most) cannot hold `max.partition.fetch.bytes` for every one
/// of the `owned` partitions: an even share (never below [`MIN_PARTITION_SHARE`]); `None` when
/// it can.
///
/// Why: the broker fills an answer in request order and stops at `max_bytes`, so the first few
/// partitions would take all of it, and a partition asked for alone (the others still had
/// records) would take the whole bound. An answer stays in memory while any of its
/// partitions has records left to hand out, so answers filled that way stay pinned one per
/// partition: six partitions held six 2 MiB answers (17 MB peak RSS in the bench) where an
/// even share held about two (11 MB). Shared by the partitions owned, not by those in one
/// request, so that a partition asked for alone takes only its share. A batch larger than a
/// share still comes whole when its partition is first in a request (KIP-74), and the fetch's
/// rotation makes every partition first in turn.
fn partition_share(fetch: &FetchConfig, owned: usize) -> Option<i32> {
    let owned = i32::try_from(owned.max(1)).unwrap_or(i32::MAX);
    let even = (fetch.max_bytes / owned).max(MIN_PARTITION_SHARE);
    (even < fetch.max_partition_bytes).then_some(even)
}

/// The fetch errors of one partition: a partition refetching the same failing offset makes no
/// progress, and that must be visible at the default log level and in its stats.
#[derive(Debug, Clone)]
struct FetchErrors {
    /// Errors since the partition was assigned.
    count: u64,
    /// The last one, as text.
    last: String,
    /// When a warning was last logged, and how many errors were not logged since.
    warned_at: Instant,
    unlogged: u64,
}

/// Why 10 s: a partition failing on every fetch would otherwise log several lines a second.
const FETCH_ERROR_LOG_INTERVAL: Duration = Duration::from_secs(10);

impl Intake {
    /// Stops fetching and handing out records of these partitions (backpressure).
    pub(crate) fn pause(&mut self, partitions: &[TopicPartition]) {
        let now = Instant::now();
        for tp in partitions {
            self.paused.entry(tp.clone()).or_insert(now);
        }
    }

    /// True while `tp` is paused.
    pub(crate) fn is_paused(&self, tp: &TopicPartition) -> bool {
        self.paused.contains_key(tp)
    }

    /// Resumes paused partitions.
    pub(crate) fn resume(&mut self, partitions: &[TopicPartition]) {
        for tp in partitions {
            self.paused.remove(tp);
            self.mark_ready(tp);
        }
    }

    /// `tp` has buffered records (or may have): make sure it is in the round-robin ring.
    fn mark_ready(&mut self, tp: &TopicPartition) {
        if !self.in_ring.contains(tp) && self.buffers.get(tp).is_some_and(|b| !b.is_empty()) {
            self.in_ring.insert(tp.clone());
            self.ring.push_back(tp.clone());
        }
    }

    /// True when some unpaused partition has records to hand out. O(1) but for the stale ring
    /// entries it discards (each at most once): every partition with records is in the ring.
    pub(crate) fn has_buffered(&mut self) -> bool {
        while let Some(tp) = self.ring.front() {
            if self.is_ready(tp) {
                return true;
            }
            self.discard_front();
        }
        false
    }

    #[inline]
    fn is_ready(&self, tp: &TopicPartition) -> bool {
        (self.paused.is_empty() || !self.paused.contains_key(tp))
            && self.buffers.get(tp).is_some_and(|b| !b.is_empty())
    }

    /// The front of the ring has nothing to hand out: it leaves the ring.
    fn discard_front(&mut self) {
        if let Some(tp) = self.ring.pop_front() {
            self.in_ring.remove(&tp);
        }
        self.turn = 0;
    }

    /// True when an owned, unpaused partition with a fetch position has nothing buffered.
    pub(crate) fn has_dry_partition(&mut self) -> bool {
        self.prune_dry();
        self.dry
            .iter()
            .any(|tp| !self.paused.contains_key(tp) && !self.unfenced.contains(tp))
    }

    /// Newly assigned partitions whose fencing token is being raised: not fetched until
    /// [`Intake::fenced`] says they have it.
    pub(crate) fn hold_unfenced(&mut self, partitions: &[TopicPartition]) {
        self.unfenced.extend(partitions.iter().cloned());
    }

    /// `tp`'s assignment has its fencing token: it is fetched from now on.
    pub(crate) fn fenced(&mut self, tp: &TopicPartition) {
        self.unfenced.remove(tp);
    }

    /// The owned partitions still waiting for their fencing token, in order.
    pub(crate) fn unfenced(&self) -> Vec<TopicPartition> {
        let mut unfenced: Vec<TopicPartition> = self.unfenced.iter().cloned().collect();
        unfenced.sort();
        unfenced
    }

    /// Drops the entries of [`Intake::dry`] that no longer qualify (no position, or records
    /// buffered); paused partitions stay, they are dry again when resumed.
    fn prune_dry(&mut self) {
        let (positions, buffers) = (&self.positions, &self.buffers);
        self.dry.retain(|tp| {
            positions.contains_key(tp) && buffers.get(tp).is_none_or(PartitionBuffer::is_empty)
        });
    }

    /// Newly assigned partitions: each starts at its committed offset (else
    /// `auto.offset.reset`), looked up at the next [`Intake::resolve_positions`].
    pub(crate) fn assigned(&mut self, partitions: &[TopicPartition], now: Instant) {
        self.pending.add(partitions, Start::Committed, now);
    }

    /// Fetches every owned, unpaused partition that has a position and nothing buffered, and
    /// buffers what comes back. A partition whose position fell out of the log
    /// (OFFSET_OUT_OF_RANGE) is not fetched again until its `auto.offset.reset` position is
    /// known (looked up at once, retried if that fails).
    pub(crate) fn fetch(
        &mut self,
        client: &mut dyn RecordSource,
        fetch: &FetchConfig,
        wait: FetchWait,
        config: &ConsumerConfig,
        guard: &Guard,
        waker: &Waker,
    ) -> Result<(), ConsumerError> {
        self.prune_dry();
        let positions: Vec<FetchPosition> = self
            .dry
            .iter()
            .filter(|tp| !self.paused.contains_key(*tp) && !self.unfenced.contains(*tp))
            .filter_map(|tp| {
                let offset = *self.positions.get(tp)?;
                Some(FetchPosition {
                    tp: tp.clone(),
                    offset,
                })
            })
            .collect();
        if positions.is_empty() {
            // Nothing to fetch: wait a little instead of spinning (the group keeps running on
            // the heartbeat thread), unless woken.
            if wait == FetchWait::Block {
                waker.pause(fetch.max_wait.min(Duration::from_millis(100)));
            }
            return Ok(());
        }
        let shared;
        let fetch = match partition_share(fetch, self.positions.len()) {
            Some(share) => {
                shared = FetchConfig {
                    max_partition_bytes: share,
                    ..fetch.clone()
                };
                &shared
            }
            None => fetch,
        };
        let fetched = match wait {
            FetchWait::Block => client.fetch_lazy(&positions, fetch)?,
            FetchWait::DontWait => {
                // No prefetch after this one: the set of dry partitions changes from call to
                // call, and a prefetch for a set the next call does not ask for costs a
                // reconnect. An earlier prefetch of every partition still serves this call
                // (`max_wait` is not part of what a prefetch must match).
                let config = FetchConfig {
                    max_wait: Duration::ZERO,
                    prefetch: false,
                    ..fetch.clone()
                };
                client.fetch_lazy(&positions, &config)?
            }
        };
        let read_committed = config.isolation_level() == IsolationLevel::ReadCommitted;
        self.marks.fetched(
            fetched
                .iter()
                .map(|p| (&p.tp, p.high_watermark, p.last_stable_offset)),
            read_committed,
        );
        let mut reset: Vec<TopicPartition> = Vec::new();
        for part in fetched {
            // Only keep data for the position we still want (a rebalance may have moved it).
            if self.positions.get(&part.tp) != Some(&part.fetch_offset) {
                continue;
            }
            if let Some(error) = &part.error {
                if error.kafka_code() == Some(KafkaCode::OFFSET_OUT_OF_RANGE) {
                    // The log no longer holds this position (retention, or a new leader's log
                    // ends below it: truncation); never skipped silently.
                    log::warn!(
                        "{}: fetch offset {} out of range (log start {}, high watermark {}); \
                         resetting the position (auto.offset.reset={})",
                        part.tp,
                        part.fetch_offset,
                        part.log_start_offset,
                        part.high_watermark,
                        config.auto_offset_reset().as_str()
                    );
                    reset.push(part.tp.clone());
                } else {
                    self.fetch_failed(&part.tp, error);
                }
                continue;
            }
            if self.buffers.get(&part.tp).is_some_and(|b| !b.is_empty()) {
                // Only partitions with nothing buffered are fetched; data for one that has
                // records would have to go behind them, so it is left to be fetched again.
                log::debug!("{}: fetched while records are buffered; dropped", part.tp);
                continue;
            }
            let (bytes, records) = (
                part.records.remaining_bytes(),
                part.records.remaining_records(),
            );
            metrics::fetched(config.group_id(), &part.tp.topic, bytes, records);
            self.buffer_fetched(&part.tp, part.records);
        }
        if !reset.is_empty() {
            // Not fetched until the reset position is known (looked up now, retried if it fails).
            for tp in &reset {
                self.positions.remove(tp);
            }
            self.pending.add(&reset, Start::Reset, Instant::now());
            self.resolve_positions(client, config, guard)?;
        }
        Ok(())
    }

    /// Buffers the records fetched for `tp` (which has nothing buffered), decoding the first
    /// batch now: a fetch with nothing visible leaves it dry at once.
    fn buffer_fetched(&mut self, tp: &TopicPartition, records: wire::LazyRecords) {
        // Where the next fetch starts if every batch decodes; corrected when decoding stops
        // early (decode budget, a corrupt batch).
        self.positions.insert(tp.clone(), records.end_offset());
        let mut buffer = PartitionBuffer::lazy(records);
        let refill = buffer.refill();
        let empty = buffer.is_empty();
        self.buffers.insert(tp.clone(), buffer);
        self.settle(tp, refill);
        if empty {
            // Nothing (visible) yet: still dry (a prefetch may also answer for a partition that
            // was not asked; then the set drops it when pruned).
            self.dry.insert(tp.clone());
        } else {
            self.mark_ready(tp);
        }
    }

    /// Applies what decoding `tp`'s buffer found: when its fetched data is used up, the next
    /// fetch starts where decoding ended; a corrupt batch counts as a fetch error (the next
    /// fetch starts at that batch, as a failed fetch would be retried).
    fn settle(&mut self, tp: &TopicPartition, refill: Refill) {
        let at = match &refill {
            Refill::Ok => return,
            Refill::Finished(at) | Refill::Failed(at, _) => *at,
        };
        if let Some(position) = self.positions.get_mut(tp) {
            *position = at;
        }
        if let Refill::Failed(_, error) = refill {
            self.fetch_failed(tp, &error);
        }
    }

    /// Counts a fetch error of `tp` and warns about it, at most once per
    /// [`FETCH_ERROR_LOG_INTERVAL`] per partition (saying how many were not logged).
    fn fetch_failed(&mut self, tp: &TopicPartition, error: &wire::WireError) {
        let now = Instant::now();
        let at = self.positions.get(tp).copied().unwrap_or(-1);
        match self.fetch_errors.get_mut(tp) {
            None => {
                let error = ErrorChain(error);
                log::warn!("{tp}: fetch at offset {at} failed: {error}; retrying");
                self.fetch_errors.insert(
                    tp.clone(),
                    FetchErrors {
                        count: 1,
                        last: error.to_string(),
                        warned_at: now,
                        unlogged: 0,
                    },
                );
            }
            Some(errors) => {
                let error = ErrorChain(error);
                errors.count += 1;
                errors.last = error.to_string();
                if now.saturating_duration_since(errors.warned_at) >= FETCH_ERROR_LOG_INTERVAL {
                    log::warn!(
                        "{tp}: fetch at offset {at} failed: {error}; retrying ({} more failure(s) \
                         since the last warning, {} in all)",
                        errors.unlogged,
                        errors.count
                    );
                    errors.warned_at = now;
                    errors.unlogged = 0;
                } else {
                    errors.unlogged += 1;
                }
            }
        }
    }

    /// Forgets a partition that is no longer ours: its unhanded records are never processed.
    /// Returns how many records were dropped.
    pub(crate) fn drop_partition(&mut self, tp: &TopicPartition) -> usize {
        self.held.remove(tp);
        self.unfenced.remove(tp);
        self.positions.remove(tp);
        self.fetch_errors.remove(tp);
        self.pending.remove(tp);
        self.paused.remove(tp);
        self.dry.remove(tp);
        self.marks.forget(tp);
        self.buffers.remove(tp).map_or(0, |b| b.len())
    }

    /// A partition found fenced while its records were handed out: its buffered records and its
    /// position go (the handoff driver forgets the rest when the revocation or loss is reported).
    /// Returns how many buffered records were dropped.
    pub(crate) fn drop_fenced(&mut self, tp: &TopicPartition) -> usize {
        let dropped = self.buffers.remove(tp).map_or(0, |b| b.len());
        self.positions.remove(tp);
        dropped
    }

    /// Drops every buffered record (closing: nothing more is handed out).
    pub(crate) fn clear_buffers(&mut self) {
        self.buffers.clear();
        self.dry.extend(self.positions.keys().cloned());
    }

    /// Looks up the starting positions that are due (see [`PendingPositions`]) and starts
    /// fetching the partitions found. A reset that moves a partition backwards (the log was
    /// truncated below what this member read) moves the guard's monotonicity mark with it, or
    /// every record read again would be refused as a regression.
    pub(crate) fn resolve_positions(
        &mut self,
        client: &mut dyn RecordSource,
        config: &ConsumerConfig,
        guard: &Guard,
    ) -> Result<(), ConsumerError> {
        let (found, error) = self.pending.resolve(client, config, Instant::now());
        for (tp, offset, metadata, start) in found {
            if start == Start::Reset {
                if let Some(previous) = guard.reposition(&tp, offset) {
                    log::warn!(
                        "{tp}: fetch position reset from {previous} back to {offset} \
                         (auto.offset.reset={}); records from {offset} on are read again",
                        config.auto_offset_reset().as_str()
                    );
                }
            } else {
                // Reading starts here; what the committed map says finished above it is skipped.
                guard.resume_at(&tp, offset, metadata.as_deref());
            }
            self.buffers.remove(&tp);
            self.dry.insert(tp.clone());
            self.marks.started(&tp, offset);
            self.positions.insert(tp, offset);
        }
        error.map_or(Ok(()), Err)
    }

    /// Reads `tp` again from `offset`: its buffered records go, and the next fetch starts
    /// there. For records the guard released (see `RebalanceGuard::take_redeliveries`); the
    /// guard itself is not touched.
    pub(crate) fn seek(&mut self, tp: &TopicPartition, offset: i64) {
        self.buffers.remove(tp);
        if self.positions.contains_key(tp) {
            self.dry.insert(tp.clone());
            self.positions.insert(tp.clone(), offset);
        }
    }

    /// The application's seek of `tp` to `offset`: the guard first (it refuses a partition not
    /// owned, and takes the work at or after `offset` away), then the fetch position. Shared
    /// by the consumer, the batch and the rebalance listener's context.
    pub(crate) fn seek_owned(
        &mut self,
        guard: &Guard,
        tp: &TopicPartition,
        offset: i64,
    ) -> Result<(), ConsumerError> {
        guard.seek(tp, offset).map_err(ConsumerError::Seek)?;
        self.place(tp, offset);
        Ok(())
    }

    /// The seek's fetch position: `tp` is read from `offset` next. Its buffered records go,
    /// and a lookup of its starting position still pending is dropped: the seek is its
    /// position.
    fn place(&mut self, tp: &TopicPartition, offset: i64) {
        self.pending.remove(tp);
        self.buffers.remove(tp);
        self.fetch_errors.remove(tp);
        self.positions.insert(tp.clone(), offset);
        self.dry.insert(tp.clone());
    }

    /// The offset of the next record of `tp` to hand out: the first one buffered, else where
    /// the next fetch starts (Java's `position`). `None` while its starting position is not
    /// known.
    pub(crate) fn position(&self, tp: &TopicPartition) -> Option<i64> {
        self.buffers
            .get(tp)
            .and_then(PartitionBuffer::front_offset)
            .or_else(|| self.positions.get(tp).copied())
    }

    /// Seeks every partition the guard released records of back to the lowest of them, so
    /// that each is delivered again before its partition's later records are handed out anew.
    pub(crate) fn redeliver_released(&mut self, guard: &Guard) {
        for (tp, offset) in guard.take_redeliveries() {
            log::info!("{tp}: reading again from {offset}, a record released without its effect");
            self.seek(&tp, offset);
        }
    }

    /// Takes the next record to hand out, with its partition: round-robin over partitions with
    /// buffered, unpaused records, [`TURN_RECORDS`] consecutive records per turn, so one busy
    /// partition does not starve the others and a batch touches few partitions. The partition
    /// is lent, not cloned: a record costs no reference count of its topic here.
    pub(crate) fn next_record(&mut self) -> Option<(&TopicPartition, Record)> {
        loop {
            let tp = self.ring.front()?;
            if self.turn >= TURN_RECORDS {
                // Its turn is over: to the back, the next partition's turn begins.
                self.ring.rotate_left(1);
                self.turn = 0;
                continue;
            }
            if self.paused.is_empty() || !self.paused.contains_key(tp) {
                if let Some(buffer) = self.buffers.get_mut(tp) {
                    if let Some(record) = buffer.pop_front() {
                        self.turn += 1;
                        // The next batch is decoded when the line runs out, so that an
                        // empty line always means nothing is left (once per record batch).
                        let refill = buffer.needs_refill().then(|| buffer.refill());
                        if refill.is_some() || buffer.is_empty() {
                            let empty = buffer.is_empty();
                            let tp = tp.clone();
                            if let Some(refill) = refill {
                                self.settle(&tp, refill);
                            }
                            if empty {
                                // Ran dry: the next poll fetches it.
                                self.dry.insert(tp);
                            }
                        }
                        return Some((self.ring.front()?, record));
                    }
                }
            }
            self.discard_front();
        }
    }

    /// Holds `tp` back until the next batch (the guard refused its next record for now, which
    /// [`Intake::push_front`] put back): it leaves the ring, so this batch goes on with the
    /// other partitions and a poll with only held partitions waits for data instead of spinning.
    pub(crate) fn hold(&mut self, tp: &TopicPartition) {
        if self.ring.front() == Some(tp) {
            self.discard_front();
        } else if let Some(at) = self.ring.iter().position(|t| t == tp) {
            self.ring.remove(at);
            self.in_ring.remove(tp);
        }
        self.held.insert(tp.clone());
    }

    /// A new batch: the held partitions are tried again.
    pub(crate) fn release_held(&mut self) {
        if !self.held.is_empty() {
            for tp in std::mem::take(&mut self.held) {
                self.mark_ready(&tp);
            }
        }
    }

    /// Puts a record back first in line of its partition (it was taken but not handed out).
    pub(crate) fn push_front(&mut self, tp: TopicPartition, record: Record) {
        self.buffers
            .entry(tp.clone())
            .or_default()
            .push_front(record);
        self.mark_ready(&tp);
    }

    /// One partition's line in the stats: the guard's view with the intake's.
    pub(crate) fn partition_stats(
        &self,
        guard: &PartitionSnapshot,
        now: Instant,
    ) -> PartitionStats {
        let tp = &guard.tp;
        PartitionStats {
            guard: guard.clone(),
            next_fetch_offset: self.positions.get(tp).copied(),
            buffered: self.buffers.get(tp).map_or(0, PartitionBuffer::len),
            paused_for: self
                .paused
                .get(tp)
                .map(|since| now.saturating_duration_since(*since)),
            fetch_errors: self.fetch_errors.get(tp).map(|e| (e.count, e.last.clone())),
            position_error: self.pending.get(tp).and_then(|lookup| {
                lookup
                    .last_error
                    .clone()
                    .map(|error| (error, lookup.failures))
            }),
            high_watermark: None,
            last_stable_offset: None,
            lag: None,
            fetch_lag: None,
        }
        .with_marks(&self.marks)
    }

    /// The lag's inputs, for a stats handle read on another thread.
    pub(crate) fn marks(&self) -> SharedMarks {
        self.marks.clone()
    }
}

#[cfg(test)]
mod tests;
