//! The blocking poll-process-commit loop.
//!
//! `poll` drives the group (rebalance events reach the guard before anything else), fetches when
//! the intake is empty, and returns a [`Batch`] sized by the [`BatchSizer`] against
//! `max.poll.interval.ms`. Each record is admitted through the guard at the moment it is handed
//! out, so a partition fenced mid-batch (lost on the heartbeat thread) stops yielding records at
//! once. `commit` commits the contiguous completed prefix, synchronously, in the current
//! generation.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::group::{GroupConfig, GroupMember, LostHook};
use crate::guard::{AdmitError, CommitOffset, Lease, RebalanceGuard, StormStatus};
use crate::wire::{FetchConfig, FetchPosition, KafkaCode, Record};
use crate::TopicPartition;

use super::batch::{BatchPlan, BatchSizer};
use super::config::{ConsumerConfig, GroupProtocol};
use super::error::ConsumerError;
use super::positions::Start;
use super::rebalance::{
    commit_through, Bridge, Drain, Guard, HandoffFailure, Intake, RebalanceCounters, StormHook,
};
use super::stats::{ConsumerStats, PartitionStats};
use super::workers::WorkContext;

/// Derives the idempotency key of a record (an order id, an event id), or `None` when the record
/// has none. Never derive it from the Kafka record key alone unless that key identifies the
/// event: many distinct events share an entity key, and they would be refused as duplicates.
pub type KeyFn = Box<dyn Fn(&Record) -> Option<Vec<u8>> + Send>;

/// A record handed out by a [`Batch`], with the lease that proves it was admitted under the
/// current assignment of its partition.
#[derive(Debug)]
pub struct Delivery {
    /// The record.
    pub record: Record,
    lease: Lease,
    handed_at: Instant,
}

impl Delivery {
    /// The lease: check [`Consumer::is_current`] with it right before an external side effect
    /// of a long handler.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }
}

/// Read-only access to a consumer's guard from another thread.
#[derive(Clone)]
pub struct GuardView(Arc<Guard>);

impl GuardView {
    /// A consistent snapshot of every partition's state.
    pub fn snapshot(&self) -> crate::guard::GuardSnapshot {
        self.0.snapshot()
    }
}

impl std::fmt::Debug for GuardView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardView").finish_non_exhaustive()
    }
}

/// Whether a fetch may wait at the broker for data (`fetch.max.wait.ms`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FetchWait {
    /// Nothing is buffered: waiting for data is what the poll is for.
    Block,
    /// Other partitions have records to hand out: take what is there now.
    DontWait,
}

/// A synchronous, rebalance-safe Kafka consumer.
pub struct Consumer {
    config: ConsumerConfig,
    member: GroupMember,
    pub(super) guard: Arc<Guard>,
    intake: Intake,
    sizer: BatchSizer,
    fetch: FetchConfig,
    key_fn: Option<KeyFn>,
    storm_hook: Option<StormHook>,
    counters: RebalanceCounters,
    commits_refused: u64,
    next_partition: usize,
    stats_interval: Duration,
    last_stats: Instant,
    /// Set while `run_with_workers` runs.
    pub(super) drain: Option<Drain>,
    handoff_failures: Vec<HandoffFailure>,
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("group_id", &self.config.group_id())
            .finish_non_exhaustive()
    }
}

impl Consumer {
    /// Connects and subscribes to `topics`. The group is joined on the first [`poll`].
    ///
    /// [`poll`]: Consumer::poll
    pub fn subscribe(config: ConsumerConfig, topics: &[&str]) -> Result<Consumer, ConsumerError> {
        if config.group_protocol() == GroupProtocol::Consumer {
            return Err(ConsumerError::Unsupported(
                "group.protocol=consumer (KIP-848) is not implemented yet; use classic",
            ));
        }
        let guard =
            Arc::new(RebalanceGuard::new(config.guard_config()).map_err(ConsumerError::Guard)?);
        // The heartbeat thread fences lost partitions through the guard the moment it detects
        // the loss, before the poll thread can hand out another of their records.
        let fence = guard.clone();
        let hook: LostHook = Arc::new(move |partitions: &[TopicPartition]| {
            fence.lost(partitions);
        });
        let group = GroupConfig {
            group_id: config.group_id().to_string(),
            group_instance_id: config.group_instance_id().map(str::to_string),
            topics: topics.iter().map(|t| t.to_string()).collect(),
            strategies: config
                .assignment_strategies()
                .iter()
                .map(|s| s.name().to_string())
                .collect(),
            session_timeout: config.session_timeout(),
            heartbeat_interval: config.heartbeat_interval(),
            max_poll_interval: config.max_poll_interval(),
        };
        let member = GroupMember::new(group, config.client_config(), hook)?;
        // Leases also expire by time: past the last answered heartbeat's send time plus
        // session.timeout.ms the coordinator may have evicted us, and the thread that asks
        // must see that without waiting for the heartbeat thread.
        member.bound_session(guard.session_bound());
        Ok(Consumer {
            sizer: BatchSizer::from_config(&config),
            fetch: config.fetch_config(),
            config,
            member,
            guard,
            intake: Intake::default(),
            key_fn: None,
            storm_hook: None,
            counters: RebalanceCounters::default(),
            commits_refused: 0,
            next_partition: 0,
            stats_interval: Duration::from_secs(30),
            last_stats: Instant::now(),
            drain: None,
            handoff_failures: Vec::new(),
        })
    }

    /// Sets how each record's idempotency key is derived (see [`KeyFn`]). Without it, only the
    /// fence and offset monotonicity are checked.
    pub fn with_idempotency_key(
        mut self,
        key: impl Fn(&Record) -> Option<Vec<u8>> + Send + 'static,
    ) -> Self {
        self.key_fn = Some(Box::new(key));
        self
    }

    /// Calls `hook` whenever the guard detects a rebalance storm, so the application can degrade
    /// (pause intake, widen quotes, page someone) instead of scraping logs.
    pub fn on_storm(mut self, hook: impl FnMut(&StormStatus) + Send + 'static) -> Self {
        self.storm_hook = Some(Box::new(hook));
        self
    }

    /// How often `poll` logs the per-partition stats line (zero disables it).
    pub fn with_stats_interval(mut self, interval: Duration) -> Self {
        self.stats_interval = interval;
        self
    }

    /// The configuration.
    pub fn config(&self) -> &ConsumerConfig {
        &self.config
    }

    /// Partitions owned now.
    pub fn assignment(&self) -> Vec<TopicPartition> {
        self.guard.owned()
    }

    /// The group generation and member id.
    pub fn generation(&self) -> crate::group::MemberIdentity {
        self.member.identity()
    }

    /// True while the lease's partition is still ours under the lease's assignment.
    pub fn is_current(&self, lease: &Lease) -> bool {
        self.guard.is_current(lease)
    }

    /// A handle that reads the guard's per-partition state from any thread (a metrics
    /// endpoint, a watchdog), while this consumer is busy in `run` or a batch.
    pub fn guard_view(&self) -> GuardView {
        GuardView(self.guard.clone())
    }

    /// The revocations whose flush or commit failed since the last call: each one's records
    /// since its last commit will be processed again by the partition's next owner.
    pub fn take_handoff_failures(&mut self) -> Vec<HandoffFailure> {
        std::mem::take(&mut self.handoff_failures)
    }

    /// The storm detector's view now.
    pub fn storm_status(&self) -> StormStatus {
        self.guard.storm_status()
    }

    /// Stops fetching and handing out records of these partitions (backpressure). Pausing does
    /// not freeze ownership: a paused partition can still be revoked.
    pub fn pause(&mut self, partitions: &[TopicPartition]) {
        let now = Instant::now();
        for tp in partitions {
            self.intake.paused.entry(tp.clone()).or_insert(now);
        }
    }

    /// Resumes paused partitions.
    pub fn resume(&mut self, partitions: &[TopicPartition]) {
        for tp in partitions {
            self.intake.paused.remove(tp);
        }
    }

    fn drive_group(&mut self, timeout: Duration) -> Result<(), ConsumerError> {
        let mut bridge = Bridge {
            config: &self.config,
            guard: &self.guard,
            intake: &mut self.intake,
            storm_hook: &mut self.storm_hook,
            counters: &mut self.counters,
            error: None,
            drain: self.drain.clone(),
            handoff_failures: &mut self.handoff_failures,
        };
        let result = self.member.poll(&mut bridge, timeout);
        let error = bridge.error.take();
        result?;
        match error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Drives the group, fetches if nothing is buffered, and returns the next batch. Rebalance
    /// events are applied to the guard before this returns, so no record of a revoked or lost
    /// partition can be handed out.
    pub fn poll(&mut self, timeout: Duration) -> Result<Batch<'_>, ConsumerError> {
        self.maybe_log_stats();
        self.drive_group(timeout)?;
        if self.member.is_stable() {
            self.intake
                .resolve_positions(self.member.client(), &self.config, &self.guard)?;
            // Fetch whenever some partition ran dry, not only when all did: a partition with
            // new data must not wait behind another one's large buffer. With records still
            // buffered elsewhere the fetch must not hold the batch up, so it does not wait.
            if !self.has_buffered() {
                self.fetch_once(FetchWait::Block)?;
            } else if self.has_dry_partition() {
                self.fetch_once(FetchWait::DontWait)?;
            }
        }
        let plan = self.sizer.begin_batch(Instant::now());
        Ok(Batch {
            now: self.guard.now(),
            consumer: self,
            plan,
            handed: 0,
            outstanding: HashMap::new(),
        })
    }

    fn has_buffered(&self) -> bool {
        self.intake
            .buffers
            .iter()
            .any(|(tp, b)| !b.is_empty() && !self.intake.paused.contains_key(tp))
    }

    /// True when an owned, unpaused partition with a fetch position has nothing buffered.
    fn has_dry_partition(&self) -> bool {
        self.intake.positions.keys().any(|tp| {
            !self.intake.paused.contains_key(tp)
                && self.intake.buffers.get(tp).map_or(true, VecDeque::is_empty)
        })
    }

    fn fetch_once(&mut self, wait: FetchWait) -> Result<(), ConsumerError> {
        let positions: Vec<FetchPosition> = self
            .intake
            .positions
            .iter()
            .filter(|(tp, _)| !self.intake.paused.contains_key(*tp))
            .filter(|(tp, _)| {
                self.intake
                    .buffers
                    .get(*tp)
                    .map_or(true, VecDeque::is_empty)
            })
            .map(|(tp, &offset)| FetchPosition {
                tp: tp.clone(),
                offset,
            })
            .collect();
        if positions.is_empty() {
            // Nothing to fetch: wait a little instead of spinning (the group keeps running on
            // the heartbeat thread).
            std::thread::sleep(self.fetch.max_wait.min(Duration::from_millis(100)));
            return Ok(());
        }
        let fetched = match wait {
            FetchWait::Block => self.member.client().fetch(&positions, &self.fetch)?,
            FetchWait::DontWait => {
                // No prefetch after this one: the set of dry partitions changes from call to
                // call, and a prefetch for a set the next call does not ask for costs a
                // reconnect. An earlier prefetch of every partition still serves this call.
                let config = FetchConfig {
                    max_wait: Duration::ZERO,
                    prefetch: false,
                    ..self.fetch.clone()
                };
                self.member.client().fetch(&positions, &config)?
            }
        };
        let mut reset: Vec<TopicPartition> = Vec::new();
        for part in fetched {
            // Only keep data for the position we still want (a rebalance may have moved it).
            if self.intake.positions.get(&part.tp) != Some(&part.fetch_offset) {
                continue;
            }
            if let Some(error) = &part.error {
                if error.kafka_code() == Some(KafkaCode::OFFSET_OUT_OF_RANGE) {
                    log::warn!("{}: offset {} out of range", part.tp, part.fetch_offset);
                    reset.push(part.tp.clone());
                } else {
                    self.intake.fetch_failed(&part.tp, error);
                }
                continue;
            }
            self.intake
                .positions
                .insert(part.tp.clone(), part.next_offset);
            if !part.records.is_empty() {
                self.intake
                    .buffers
                    .entry(part.tp)
                    .or_default()
                    .extend(part.records);
            }
        }
        if !reset.is_empty() {
            // Not fetched until the reset position is known (looked up now, retried if it fails).
            for tp in &reset {
                self.intake.positions.remove(tp);
            }
            self.intake
                .pending
                .add(&reset, Start::Reset, Instant::now());
            self.intake
                .resolve_positions(self.member.client(), &self.config, &self.guard)?;
        }
        Ok(())
    }

    /// Commits the contiguous completed prefix of every owned partition, synchronously, with
    /// the current generation. A refusal (the generation moved on) is returned, never retried;
    /// when the broker says the membership is over (the member was removed, the group moved on
    /// without it, its `group.instance.id` was taken), its partitions are fenced as lost at once.
    pub fn commit(&mut self) -> Result<Vec<CommitOffset>, ConsumerError> {
        let member = &mut self.member;
        let mut commit = |offsets: &[CommitOffset]| commit_through(|o| member.commit(o), offsets);
        match self.guard.commit_progress(&mut commit) {
            Ok(committed) => {
                for c in &committed {
                    log::debug!("{}: committed next offset {}", c.partition, c.next_offset);
                }
                Ok(committed)
            }
            Err(failure) => {
                self.commits_refused += 1;
                log::error!(
                    "offset commit in generation {} failed: {failure}",
                    self.member.identity().generation_id
                );
                Err(ConsumerError::Commit(failure))
            }
        }
    }

    /// Runs poll-process-commit until `stop` is set or an error occurs, then returns (call
    /// [`close`](Self::close) afterwards). The handler runs on this thread, with a
    /// [`WorkContext`] to check its lease right before an external effect; a handler error
    /// stops the loop after committing everything before the failed record, which will be
    /// delivered again. Refused commits are logged and the loop goes on: the next poll rejoins.
    pub fn run<E>(
        &mut self,
        stop: &AtomicBool,
        mut handler: impl FnMut(&Record, &WorkContext<'_>) -> Result<(), E>,
    ) -> Result<(), ConsumerError>
    where
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let guard = self.guard.clone();
        while !stop.load(Ordering::SeqCst) {
            let mut failure = None;
            {
                let mut batch = self.poll(Duration::from_millis(100))?;
                while let Some(delivery) = batch.next() {
                    let ctx = WorkContext::new(&guard, &delivery.lease);
                    match handler(&delivery.record, &ctx) {
                        Ok(()) => batch.complete(delivery),
                        Err(error) => {
                            let (partition, offset) =
                                (delivery.lease.partition.clone(), delivery.record.offset);
                            batch.fail(delivery);
                            failure = Some(ConsumerError::Handler {
                                partition,
                                offset,
                                error: error.into(),
                            });
                            break;
                        }
                    }
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                }
            }
            match self.commit() {
                Ok(_) | Err(ConsumerError::Commit(_)) => {}
                Err(other) => return Err(other),
            }
            if let Some(failure) = failure {
                return Err(failure);
            }
        }
        Ok(())
    }

    /// Forgets everything of `tp` from `offset` on, in the guard and in the intake, and fetches
    /// it again from there: the record at `offset` and everything after it come again. Returns
    /// false (and logs why) when the guard refuses: the partition is not owned, or `offset` is
    /// inside its completed prefix.
    pub(super) fn rewind_partition(&mut self, tp: &TopicPartition, offset: i64) -> bool {
        if let Err(error) = self.guard.rewind(tp, offset) {
            log::warn!("{error}");
            return false;
        }
        self.intake.buffers.remove(tp);
        if self.intake.positions.contains_key(tp) {
            self.intake.positions.insert(tp.clone(), offset);
        }
        true
    }

    /// Graceful shutdown: stops intake, commits the completed prefix, hands every partition back
    /// through a revocation (which commits again in the current generation), and leaves the
    /// group unless the member is static.
    pub fn close(mut self) -> Result<(), ConsumerError> {
        self.intake.buffers.clear();
        let committed = self.commit();
        let mut bridge = Bridge {
            config: &self.config,
            guard: &self.guard,
            intake: &mut self.intake,
            storm_hook: &mut self.storm_hook,
            counters: &mut self.counters,
            error: None,
            drain: self.drain.clone(),
            handoff_failures: &mut self.handoff_failures,
        };
        self.member.close(&mut bridge)?;
        committed.map(|_| ())
    }

    /// A snapshot of per-partition signals (what an operator needs to see a stuck partition) and
    /// counters.
    pub fn stats(&self) -> ConsumerStats {
        let guard = self.guard.snapshot();
        let now = Instant::now();
        let partitions = guard
            .partitions
            .iter()
            .map(|p| PartitionStats {
                guard: p.clone(),
                next_fetch_offset: self.intake.positions.get(&p.partition).copied(),
                buffered: self
                    .intake
                    .buffers
                    .get(&p.partition)
                    .map_or(0, VecDeque::len),
                paused_for: self
                    .intake
                    .paused
                    .get(&p.partition)
                    .map(|since| now.saturating_duration_since(*since)),
                fetch_errors: self
                    .intake
                    .fetch_errors
                    .get(&p.partition)
                    .map(|e| (e.count, e.last.clone())),
                position_error: self.intake.pending.get(&p.partition).and_then(|lookup| {
                    lookup
                        .last_error
                        .clone()
                        .map(|error| (error, lookup.failures))
                }),
            })
            .collect();
        ConsumerStats {
            generation_id: self.member.identity().generation_id,
            partitions,
            rebalances: guard.rebalances,
            storm: guard.storm,
            counters: self.counters.clone(),
            commits_refused: self.commits_refused,
            next_batch_size: self.sizer.next_size(),
            per_record_estimate: self.sizer.estimate(),
        }
    }

    fn maybe_log_stats(&mut self) {
        if self.stats_interval.is_zero() || self.last_stats.elapsed() < self.stats_interval {
            return;
        }
        self.last_stats = Instant::now();
        log::info!("{}", self.stats());
    }
}

/// One bounded batch: hands out records until its size or its deadline is reached.
///
/// Dropping a batch with records handed out but neither completed nor failed rewinds their
/// partitions, so they are fetched and delivered again; nothing is committed past them.
pub struct Batch<'a> {
    consumer: &'a mut Consumer,
    plan: BatchPlan,
    now: Instant,
    handed: usize,
    /// Handed-out records not completed yet, per partition: the lowest offset of each.
    outstanding: HashMap<TopicPartition, Vec<i64>>,
}

impl Batch<'_> {
    /// The plan: how many records at most, and the deadline.
    pub fn plan(&self) -> &BatchPlan {
        &self.plan
    }

    /// The next record, admitted through the guard, or `None` when the batch is over (size
    /// reached, deadline reached, a rebalance waiting, or nothing buffered).
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<Delivery> {
        loop {
            if self.handed >= self.plan.size {
                return None;
            }
            let now = Instant::now();
            // Every batch hands out at least one record: an estimate inflated by one very slow
            // record must not stop batches before they start, or the consumer would livelock.
            if self.handed > 0 && self.consumer.sizer.should_stop(now) {
                log::info!(
                    "batch stopped at its deadline after {} record(s); the rest stays for the \
                     next poll",
                    self.handed
                );
                return None;
            }
            if self.consumer.member.rejoin_pending() {
                return None;
            }
            let tp = self.next_partition()?;
            let intake = &mut self.consumer.intake;
            let record = intake.buffers.get_mut(&tp)?.pop_front()?;
            let key = self.consumer.key_fn.as_ref().and_then(|f| f(&record));
            match self
                .consumer
                .guard
                .process_message_at(self.now, &tp, record.offset, key, ())
            {
                Ok(lease) => {
                    self.handed += 1;
                    self.outstanding.entry(tp).or_default().push(record.offset);
                    return Some(Delivery {
                        record,
                        lease,
                        handed_at: now,
                    });
                }
                Err(AdmitError::Fenced { .. }) => {
                    // Revoked or lost under us: none of its records may be processed.
                    let dropped = intake.buffers.remove(&tp).map_or(0, |b| b.len()) + 1;
                    intake.positions.remove(&tp);
                    self.consumer.counters.dropped_records += dropped as u64;
                    log::warn!("{tp} is fenced: {dropped} fetched record(s) dropped unprocessed");
                }
                Err(error @ AdmitError::SessionExpired { .. }) => {
                    // Not ours to process until a heartbeat is answered again (or the loss is
                    // detected): the record stays first in line, and the batch ends here.
                    log::warn!("{error}: the batch stops until the session is renewed");
                    intake.buffers.entry(tp).or_default().push_front(record);
                    return None;
                }
                Err(error @ AdmitError::Duplicate { .. }) => log::info!("skipped: {error}"),
                Err(error @ AdmitError::OffsetRegression { .. }) => log::error!("skipped: {error}"),
            }
        }
    }

    /// Round-robin over partitions with buffered, unpaused records, so one busy partition does
    /// not starve the others within a batch.
    fn next_partition(&mut self) -> Option<TopicPartition> {
        let intake = &self.consumer.intake;
        let mut ready: Vec<&TopicPartition> = intake
            .buffers
            .iter()
            .filter(|(tp, b)| !b.is_empty() && !intake.paused.contains_key(*tp))
            .map(|(tp, _)| tp)
            .collect();
        if ready.is_empty() {
            return None;
        }
        ready.sort();
        self.consumer.next_partition = self.consumer.next_partition.wrapping_add(1);
        Some(ready[self.consumer.next_partition % ready.len()].clone())
    }

    /// True while the delivery's partition is still ours under the assignment it was handed out
    /// in. A long handler checks it right before its external side effect.
    pub fn is_current(&self, delivery: &Delivery) -> bool {
        self.consumer.guard.is_current(&delivery.lease)
    }

    /// The record's side effect happened: it counts towards the committed position.
    pub fn complete(&mut self, delivery: Delivery) {
        self.consumer
            .sizer
            .record_processed(delivery.handed_at.elapsed());
        self.settle(&delivery);
        if let Err(error) = self.consumer.guard.complete(&delivery.lease) {
            // Its partition moved while the handler ran: the work is not our progress.
            log::warn!("{error}");
        }
    }

    /// Hands the record to another thread: it stays pending in the guard (the batch no longer
    /// tracks it) until that thread completes it through the guard.
    pub(crate) fn hand_off(&mut self, delivery: Delivery) -> (Record, Lease) {
        self.settle(&delivery);
        (delivery.record, delivery.lease)
    }

    /// Takes back a record that could not be handed off (its worker's queue was full): it is
    /// un-admitted and becomes the next record of its partition again.
    pub(crate) fn put_back(&mut self, record: Record, lease: Lease) {
        match self.consumer.guard.rewind(&lease.partition, lease.offset) {
            Ok(()) => self
                .consumer
                .intake
                .buffers
                .entry(lease.partition)
                .or_default()
                .push_front(record),
            Err(error) => log::warn!("{error}"),
        }
    }

    /// The handler failed: the record (and the rest of its partition) will be delivered again.
    pub fn fail(&mut self, delivery: Delivery) {
        self.settle(&delivery);
        let tp = delivery.lease.partition.clone();
        self.rewind(&tp, delivery.record.offset);
    }

    fn settle(&mut self, delivery: &Delivery) {
        if let Some(offsets) = self.outstanding.get_mut(&delivery.lease.partition) {
            offsets.retain(|&o| o != delivery.record.offset);
        }
    }

    /// Forgets everything of `tp` from `offset` on and fetches it again from there.
    fn rewind(&mut self, tp: &TopicPartition, offset: i64) {
        if self.consumer.rewind_partition(tp, offset) {
            if let Some(offsets) = self.outstanding.get_mut(tp) {
                offsets.retain(|&o| o < offset);
            }
        }
    }
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        let abandoned: Vec<(TopicPartition, i64)> = self
            .outstanding
            .iter()
            .filter_map(|(tp, offsets)| offsets.iter().min().map(|&o| (tp.clone(), o)))
            .collect();
        for (tp, offset) in abandoned {
            log::warn!("{tp}: record {offset} was handed out but never completed; rewinding");
            self.rewind(&tp, offset);
        }
        self.consumer.sizer.end_batch();
    }
}
