//! The consumer: the blocking poll-process-commit loop.
//!
//! `poll` drives the group (its changes reach the guard, through the handoff [`Driver`], before
//! anything else), fetches through the [`Intake`] when a partition ran dry, and returns a
//! [`Batch`] sized by the [`BatchSizer`] against `max.poll.interval.ms`. `commit` commits the
//! contiguous completed prefix, synchronously, in the current generation. `run` is the loop on
//! this thread; `run_with_workers` hands the records to the worker pool (`workers.rs`), which
//! sees the consumer only through the [`WorkSource`] interface implemented at the end of this
//! file.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::group::{
    ClassicMember, ConsumerGroupMember, GroupConfig, GroupError, LostHook, ManualAssignment,
    Membership, RebalanceProtocol, TopicPattern,
};
use crate::guard::{CommitOffset, IdempotencyKey, Lease, RebalanceGuard, StormStatus};
use crate::wire::{BrokerFailureDetection, FetchConfig, KeyFn, Record};
use crate::TopicPartition;

use super::batch::{consumer_stats, Batch};
use super::config::{ConsumerConfig, GroupProtocol};
use super::context::{Guard, GuardView, WorkContext};
use super::error::{ConsumerError, HandoffFailure};
use super::failure_detection;
use super::handoff::{self, Drain, Driver, Handoffs};
use super::intake::{FetchWait, Intake};
use super::listener::ConsumerRebalanceListener;
use super::pacer::CommitPacer;
use super::retry::{self, DeadLetterFn, Retries, RetryPolicy, Settled};
use super::sizer::BatchSizer;
use super::stats::{ConsumerStats, StatsHandle, StatsPublisher};
use super::wake::Waker;
use super::workers::{self, WorkSource};

/// A synchronous, rebalance-safe Kafka consumer.
///
/// Subscribe, then [`run`](Self::run) a handler that checks its lease right before its side
/// effect, and [`close`](Self::close) when `stop` was set. What finished is committed (`last + 1`
/// of the contiguous completed prefix) every `commit.interval.ms` and at every revocation, which
/// fences, drains and commits before the partition is handed back (the guard's rules,
/// [`guard`](crate::guard)). A broker is needed to run this:
///
/// ```no_run
/// use std::sync::atomic::AtomicBool;
/// use rebalance_guard::{Consumer, ConsumerConfig, IdempotencyKey, Record};
/// # fn submit_order(_record: &Record) -> std::io::Result<()> { Ok(()) }
///
/// let config = ConsumerConfig::builder()
///     .bootstrap_servers(["127.0.0.1:9092"])
///     .group_id("order-workers")
///     .build()?;
/// let stop = AtomicBool::new(false); // set from a SIGTERM handler, then wake the consumer
/// let mut consumer = Consumer::subscribe(config, &["orders"])?
///     .with_idempotency_key(|record| record.key.as_deref().map(IdempotencyKey::from));
/// consumer.run(&stop, |record, ctx| {
///     // Right before the side effect: is this partition still ours?
///     if ctx.is_current() { submit_order(record) } else { Ok(()) }
/// })?;
/// consumer.close()?; // the last commit, the partitions handed back, the group left
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Consumer {
    pub(super) config: ConsumerConfig,
    pub(super) member: Box<dyn Membership>,
    pub(super) guard: Arc<Guard>,
    pub(super) intake: Intake,
    pub(super) sizer: BatchSizer,
    pub(super) fetch: FetchConfig,
    pub(super) key_fn: Option<KeyFn>,
    /// The handoff driver's state: storm hook, rebalance counters, the workers' drain, failed handoffs.
    pub(super) handoffs: Handoffs,
    /// `commit.interval.ms`: commits during a batch and between hand-offs to the workers.
    pub(super) pacer: CommitPacer,
    pub(super) stats_interval: Duration,
    pub(super) last_stats: Instant,
    /// What [`StatsHandle`]s read, published by `poll`.
    pub(super) published: StatsPublisher,
    /// What the cluster reported at subscribe about its failure detection (`None`: refused or
    /// failed; the consumer runs without the check).
    pub(super) failure_detection: Option<BrokerFailureDetection>,
    /// Ends a blocked poll from another thread ([`Consumer::waker`]).
    pub(super) waker: Waker,
    /// False for a consumer made by [`Consumer::assign`]: it commits only when the application
    /// calls `commit` (not at close, not after a handler's failure, never paced).
    pub(super) in_group: bool,
    /// `processing.retries`: the waiting retries, the dead-letter callback, their counters.
    pub(super) retries: Arc<Retries>,
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
        Consumer::subscribe_to(config, topics, None)
    }

    /// Connects and subscribes to every topic whose whole name matches the regular expression
    /// `pattern` (Java: `subscribe(Pattern)`; rust-rdkafka: a topic name starting with `^`),
    /// following topics created and deleted later. An invalid pattern is refused here. Classic
    /// protocol: matched in the client, against the cluster's topics every
    /// `metadata.max.age.ms`, internal topics left out (`exclude.internal.topics`); under
    /// `group.protocol=consumer` the broker matches it (Kafka 4.0+). The syntax is Rust's
    /// `regex-lite`, anchored at both ends as Java's `Pattern.matches` is.
    pub fn subscribe_pattern(
        config: ConsumerConfig,
        pattern: &str,
    ) -> Result<Consumer, ConsumerError> {
        let pattern = TopicPattern::new(pattern).map_err(GroupError::Pattern)?;
        Consumer::subscribe_to(config, &[], Some(pattern))
    }

    /// [`subscribe`](Self::subscribe) to `topics`, or to what `pattern` matches.
    fn subscribe_to(
        config: ConsumerConfig,
        topics: &[&str],
        pattern: Option<TopicPattern>,
    ) -> Result<Consumer, ConsumerError> {
        let mut protocol_config = config.consumer_group_config(topics);
        protocol_config.topic_regex = pattern.as_ref().map(|p| p.as_str().to_string());
        let client_config = config.client_config();
        let detection_config = config.clone();
        let mut failure_detection = None;
        let mut consumer = Consumer::with_membership(config, topics, |mut group, hook| {
            group.pattern = pattern;
            // group.protocol=consumer (KIP-848): the broker assigns, the membership thread
            // reconciles beside this loop; everything else reads the same for both protocols.
            // One request on the connection just opened warns if a broker failure would outlast
            // every member's lease (see `failure_detection.rs`).
            Ok(match detection_config.group_protocol() {
                GroupProtocol::Consumer => {
                    let mut member =
                        ConsumerGroupMember::new(group, protocol_config, client_config, hook)?;
                    failure_detection =
                        failure_detection::check(&detection_config, member.wire_client());
                    Box::new(member)
                }
                GroupProtocol::Classic => {
                    let mut member = ClassicMember::new(group, client_config, hook)?;
                    failure_detection =
                        failure_detection::check(&detection_config, member.wire_client());
                    Box::new(member)
                }
            })
        })?;
        consumer.failure_detection = failure_detection;
        Ok(consumer)
    }

    internal_pub! {
    /// A consumer over the membership `membership` builds from the group's settings and the
    /// lost hook (wired to this consumer's guard). [`subscribe`](Self::subscribe) builds the
    /// member of the configured protocol; tests pass an in-memory member, which drives the
    /// whole consumer (batches, the guard, the handoff driver, commits, workers) without a
    /// broker.
    fn with_membership(
        config: ConsumerConfig,
        topics: &[&str],
        membership: impl FnOnce(GroupConfig, LostHook) -> Result<Box<dyn Membership>, ConsumerError>,
    ) -> Result<Consumer, ConsumerError> {
        let guard =
            Arc::new(RebalanceGuard::new(config.guard_config()).map_err(ConsumerError::Guard)?);
        let group = GroupConfig {
            group_id: config.group_id().to_string(),
            group_instance_id: config.group_instance_id().map(str::to_string),
            topics: topics.iter().map(|t| t.to_string()).collect(),
            pattern: None,
            exclude_internal_topics: config.exclude_internal_topics(),
            metadata_max_age: config.metadata_max_age(),
            strategies: config.assignment_strategies().to_vec(),
            session_timeout: config.session_timeout(),
            heartbeat_interval: config.heartbeat_interval(),
            max_poll_interval: config.max_poll_interval(),
            rack: config.client_rack().map(str::to_string),
        };
        let mut member = membership(group, handoff::lost_hook(&guard))?;
        // The waker ends each wait of a poll: the membership's and the fetch's.
        let mut nudges = vec![member.nudge()];
        nudges.extend(member.records().nudge());
        // Leases also expire by time: past the last answered heartbeat's send time plus
        // session.timeout.ms the coordinator may have evicted us, and the thread that asks
        // must see that without waiting for the heartbeat thread.
        member.bound_session(guard.session_bound());
        let handoffs = Handoffs::new(config.group_id());
        member.fence_revocations_with(handoff::fence_hook(&guard, &handoffs));
        Ok(Consumer {
            published: StatsPublisher::new(guard.storm_status()),
            sizer: BatchSizer::from_config(&config),
            retries: Arc::new(Retries::new(RetryPolicy::from_config(&config))),
            pacer: CommitPacer::new(config.commit_interval()),
            fetch: config.fetch_config(),
            config,
            member,
            guard,
            intake: Intake::default(),
            key_fn: None,
            handoffs,
            stats_interval: Duration::from_secs(30),
            last_stats: Instant::now(),
            failure_detection: None,
            waker: Waker::new(nudges),
            in_group: true,
        })
    }
    }

    /// Reads `partitions` without joining a group (Java: `assign`; rust-rdkafka: `assign` with
    /// a `TopicPartitionList`): for tools, replays and a reader that owns its partitions by
    /// design. Nothing can take them away, so no lease goes stale by a rebalance and there is
    /// no session to renew; the guard's other rules hold (offset order, idempotency keys,
    /// seeks). Reading starts at `group.id`'s committed offsets (else `auto.offset.reset`), or
    /// wherever [`seek`](Self::seek) says. Nothing is committed unless the application calls
    /// [`commit`](Self::commit) (not at close, not paced); that commit is sent from outside any
    /// group (generation -1), which the coordinator accepts only while no group of that
    /// `group.id` is running.
    pub fn assign(
        config: ConsumerConfig,
        partitions: &[TopicPartition],
    ) -> Result<Consumer, ConsumerError> {
        let client_config = config.client_config();
        let group_id = config.group_id().to_string();
        let mut topics: Vec<&str> = partitions.iter().map(|tp| &*tp.topic).collect();
        topics.sort_unstable();
        topics.dedup();
        let mut consumer = Consumer::with_membership(config, &topics, |_, _| {
            Ok(Box::new(ManualAssignment::new(
                client_config,
                &group_id,
                partitions,
            )?))
        })?;
        consumer.in_group = false;
        consumer.pacer = CommitPacer::new(Duration::MAX);
        Ok(consumer)
    }

    /// Sets how each record's idempotency key is derived (a `KeyFn`). Without it, only the
    /// fence and offset monotonicity are checked. The function returns anything that converts
    /// into an [`IdempotencyKey`] (`&str`, `&[u8]`, `String`, `Vec<u8>`, `u64`, or the key
    /// itself); returning an `IdempotencyKey` built from borrowed bytes allocates nothing for
    /// keys up to [`IdempotencyKey::INLINE`] bytes.
    pub fn with_idempotency_key<Key: Into<IdempotencyKey>>(
        mut self,
        key: impl Fn(&Record) -> Option<Key> + Send + 'static,
    ) -> Self {
        self.key_fn = Some(Box::new(move |record| key(record).map(Into::into)));
        self
    }

    /// Calls `hook` whenever the guard detects a rebalance storm, so the application can degrade
    /// (pause intake, widen quotes, page someone) instead of scraping logs.
    pub fn on_storm(mut self, hook: impl FnMut(&StormStatus) + Send + 'static) -> Self {
        self.handoffs.storm_hook = Some(Box::new(hook));
        self
    }

    /// Calls `listener` at each rebalance, on the poll thread (Java:
    /// `subscribe(topics, ConsumerRebalanceListener)`; rust-rdkafka: a `ConsumerContext`'s
    /// `pre_rebalance`/`post_rebalance`). See [`ConsumerRebalanceListener`] for when each call
    /// runs and what holds then.
    pub fn with_rebalance_listener(
        mut self,
        listener: impl ConsumerRebalanceListener + 'static,
    ) -> Self {
        self.handoffs.listener = Some(Box::new(listener));
        self
    }

    /// Calls `callback` with a record whose handler failed `processing.retries + 1` times in
    /// [`run`](Self::run) or [`run_with_workers`](Self::run_with_workers), with the handler's
    /// last error and the number of attempts, so the record can be parked (a dead-letter topic,
    /// a table) instead of stopping the run. Once it returns `Ok`, the record counts as finished
    /// and its offset may be committed; if it fails, the run stops as a handler failure did
    /// (nothing committed past the record, which comes again). It runs where the handler ran
    /// (the poll thread or a worker), before anything later of the record's partition; make it
    /// synchronous (wait for the dead-letter write to be acknowledged). It is not called for a
    /// record whose partition was revoked or lost meanwhile (its next owner handles it), and may
    /// be called again for the same record if the partition moves right after it returned,
    /// before the commit.
    ///
    /// What Spring Kafka's `DeadLetterPublishingRecoverer` is to its `DefaultErrorHandler`; the
    /// Java and librdkafka consumers have no built-in equivalent.
    pub fn on_dead_letter<E>(
        self,
        callback: impl Fn(&Record, &(dyn std::error::Error + Send + Sync + 'static), u32) -> Result<(), E>
            + Send
            + Sync
            + 'static,
    ) -> Self
    where
        E: Into<retry::BoxError>,
    {
        let callback: DeadLetterFn = Arc::new(move |record, error, attempts| {
            callback(record, error, attempts).map_err(Into::into)
        });
        self.retries.set_dead_letter(callback);
        self
    }

    /// How often `poll` logs the per-partition stats line (zero disables it).
    pub fn with_stats_interval(mut self, interval: Duration) -> Self {
        self.stats_interval = interval;
        self
    }

    internal_pub! {
    /// The cluster's failure detection as one broker reported it at subscribe
    /// (`broker.session.timeout.ms` and the KIP-848 group settings), against which the lease
    /// bound was checked; `None` when the broker refused DescribeConfigs (no DESCRIBE_CONFIGS
    /// permission on the cluster) or the request failed, and the check was skipped.
    fn broker_failure_detection(&self) -> Option<&BrokerFailureDetection> {
        self.failure_detection.as_ref()
    }
    }

    /// The configuration.
    pub fn config(&self) -> &ConsumerConfig {
        &self.config
    }

    /// Partitions owned now.
    pub fn assignment(&self) -> Vec<TopicPartition> {
        self.guard.owned()
    }

    /// The group generation (KIP-848: the member epoch) and member id this member holds its
    /// partitions under (Java: `groupMetadata()`), for an audit line that says which assignment
    /// applied an effect.
    pub fn generation(&self) -> crate::group::MemberIdentity {
        self.member.identity()
    }

    /// True while the lease's partition is still ours under the lease's assignment.
    pub fn is_current(&self, lease: &Lease) -> bool {
        self.guard.is_current(lease)
    }

    /// A handle that reads the generation and the owned partitions from any thread, while this
    /// consumer is busy in `run_with_workers` (the guard view says what each partition did, this
    /// one which generation owns it).
    pub fn membership_view(&self) -> crate::group::MembershipView {
        self.member.view()
    }

    /// A handle that ends a blocked [`poll`](Self::poll) or [`run`](Self::run) at once from
    /// another thread (Java: `KafkaConsumer::wakeup`). See [`Waker`].
    pub fn waker(&self) -> Waker {
        self.waker.clone()
    }

    /// A handle that reads the guard's per-partition state from any thread (a metrics
    /// endpoint, a watchdog), while this consumer is busy in `run` or a batch.
    pub fn guard_view(&self) -> GuardView {
        GuardView::new(self.guard.clone())
    }

    /// The revocations whose flush or commit failed since the last call: each one's records
    /// since its last commit will be processed again by the partition's next owner.
    pub fn take_handoff_failures(&mut self) -> Vec<HandoffFailure> {
        std::mem::take(&mut self.handoffs.failures)
    }

    /// The storm detector's view now.
    pub fn storm_status(&self) -> StormStatus {
        self.guard.storm_status()
    }

    /// Stops fetching and handing out records of these partitions (backpressure). Pausing does
    /// not freeze ownership: a paused partition can still be revoked.
    pub fn pause(&mut self, partitions: &[TopicPartition]) {
        self.intake.pause(partitions);
    }

    /// Resumes paused partitions.
    pub fn resume(&mut self, partitions: &[TopicPartition]) {
        self.intake.resume(partitions);
    }

    /// The handoff driver over this consumer's parts, for one call.
    fn driver(&mut self) -> Driver<'_> {
        Driver {
            config: &self.config,
            guard: &self.guard,
            intake: &mut self.intake,
            handoffs: &mut self.handoffs,
            member: &mut *self.member,
        }
    }

    fn drive_group(&mut self, timeout: Duration) -> Result<(), ConsumerError> {
        // Cooperative: with partitions to process, do not wait for a rebalance in progress
        // (it runs on the membership thread); apply what it decided and go on fetching.
        let timeout = if self.member.rebalance_protocol() == RebalanceProtocol::Cooperative
            && !self.member.owned().is_empty()
        {
            Duration::ZERO
        } else {
            timeout
        };
        self.driver().drive(timeout)
    }

    /// Drives the group, fetches if nothing is buffered, and returns the next batch. Rebalance
    /// events are applied to the guard before this returns, so no record of a revoked or lost
    /// partition can be handed out.
    ///
    /// Under the cooperative protocol a rebalance does not stop the loop: the round runs on the
    /// membership thread, this keeps fetching and handing out the partitions it keeps, and what
    /// the round decided (hand these back, start these) is applied here, between batches. Under
    /// the eager protocol everything stops: the revocation of every partition, the join and the
    /// sync run inside this call.
    pub fn poll(&mut self, timeout: Duration) -> Result<Batch<'_>, ConsumerError> {
        self.maybe_log_stats();
        self.publish_stats();
        // Woken before this poll began: the group's changes are applied all the same, without
        // waiting for more.
        let timeout = if self.waker.is_woken() {
            Duration::ZERO
        } else {
            timeout
        };
        self.drive_group(timeout)?;
        let bound = self.guard.session_bound();
        if bound.is_expired_now() && !self.waker.is_woken() {
            // Every admission would be refused (SessionExpired) until a heartbeat is answered:
            // wait for that, or for the membership's news, as long as the caller allows, instead
            // of handing out a batch that stops at once and polling again in a spin.
            self.member.wait_while_session_lapsed(&bound, timeout);
            self.drive_group(Duration::ZERO)?;
        }
        // Records released without their effect are read again before anything new of their
        // partitions is fetched.
        self.intake.redeliver_released(&self.guard);
        // A record waiting for its retry holds its partition back until its backoff passed.
        self.retries
            .hold_back(&mut self.intake, &self.guard, Instant::now());
        if self.member.may_fetch() {
            self.intake
                .resolve_positions(self.member.records(), &self.config, &self.guard)?;
            // Fetch whenever some partition ran dry, not only when all did: a partition with
            // new data must not wait behind another one's large buffer. With records still
            // buffered elsewhere (or a wake to answer) the fetch must not hold the batch up, so
            // it does not wait.
            if !self.intake.has_buffered() && !self.waker.is_woken() {
                self.fetch_once(FetchWait::Block)?;
            } else if self.intake.has_dry_partition() {
                self.fetch_once(FetchWait::DontWait)?;
            }
        }
        // A wake ends at most this poll; one that comes later ends the next.
        self.waker.take();
        Ok(Batch::begin(
            &mut self.intake,
            &mut self.sizer,
            &self.guard,
            &mut *self.member,
            self.key_fn.as_ref(),
            &mut self.handoffs,
            &mut self.pacer,
            &self.retries,
        ))
    }

    fn fetch_once(&mut self, wait: FetchWait) -> Result<(), ConsumerError> {
        self.intake.fetch(
            self.member.records(),
            &self.fetch,
            wait,
            &self.config,
            &self.guard,
            &self.waker,
        )
    }

    /// Commits the contiguous completed prefix of every owned partition, synchronously, with
    /// the current generation, after the paced commit in flight (if any) was answered. A refusal (the generation moved on) is returned, never retried;
    /// when the broker says the membership is over (the member was removed, the group moved on
    /// without it, its `group.instance.id` was taken), its partitions are fenced as lost at once.
    pub fn commit(&mut self) -> Result<Vec<CommitOffset>, ConsumerError> {
        if let Some(transactional) = self.handoffs.transactional.clone() {
            // With transactions, the progress commits in the open transaction with its outputs.
            return self.commit_transactional(&transactional);
        }
        self.pacer.commit_now(&self.guard, &mut *self.member)
    }

    /// Runs poll-process-commit until `stop` is set or an error occurs, then returns (call
    /// [`close`](Self::close) afterwards). The handler runs on this thread, with a
    /// [`WorkContext`] to check its lease right before an external effect. What finished is
    /// committed every `commit.interval.ms`, during and after batches, on the commit thread
    /// (the loop never waits for a paced commit; [`close`](Self::close) commits the rest). A
    /// handler error is tried again up to `processing.retries` times (its partition waits out
    /// the backoff while the others and the polls go on; [`WorkContext::attempt`] says which
    /// try it is), then goes to the [`on_dead_letter`](Self::on_dead_letter) callback; without
    /// one (and by default, with no retries) it stops the loop after committing everything
    /// before the failed record (synchronously), which will be delivered again. Refused
    /// commits are logged and the loop goes on: the next poll rejoins.
    pub fn run<E>(
        &mut self,
        stop: &AtomicBool,
        mut handler: impl FnMut(&Record, &WorkContext<'_>) -> Result<(), E>,
    ) -> Result<(), ConsumerError>
    where
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let (guard, retries) = (self.guard.clone(), self.retries.clone());
        while !stop.load(Ordering::SeqCst) {
            let mut failure = None;
            {
                // No periodic check: the poll blocks until records, a change or a wake
                // (`Waker`); `stop` is read when it returns, after each record and each batch.
                let mut batch = self.poll(self.fetch.max_wait)?;
                // Each record is handled in place and settled (completed, or released) by the
                // batch before the next one is taken.
                while let Some(settled) = batch.run_next(|record, lease| {
                    retry::handle(&retries, &guard, record, lease, || true, &mut handler)
                        .unwrap_or(Settled::Release)
                }) {
                    match settled {
                        Settled::Complete => {}
                        // Its retry is due later (the next polls hold its partition back until
                        // then), or its partition moved: read again from it.
                        Settled::Release => break,
                        Settled::Stop(error) => {
                            failure = Some(error);
                            break;
                        }
                    }
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                }
            }
            let Some(failure) = failure else {
                // What the batch finished is committed at the pacer's next turn, on the commit
                // thread: the next batch does not wait for the coordinator's write.
                let now = Instant::now();
                if self.pacer.due(now) {
                    self.pacer.tick(&self.guard, &mut *self.member, now);
                }
                continue;
            };
            // Everything before the failed record is committed before the error is returned
            // (in a group; a reader outside one commits only when asked).
            if !self.in_group {
                return Err(failure);
            }
            match self.commit() {
                Ok(_) | Err(ConsumerError::Commit(_)) => {}
                Err(other) => return Err(other),
            }
            return Err(failure);
        }
        Ok(())
    }

    /// Runs the decoupled mode with `workers` threads until `stop` is set or a handler fails,
    /// then stops (bounded), commits, and returns (call [`close`](Consumer::close) afterwards).
    ///
    /// `queue` bounds each worker's queue. A handler error is tried again and dead-lettered as
    /// in [`run`](Self::run) (the backoff holds back only the record's partition, no worker
    /// waits it out). A panic, or an error past the retries without a dead-letter callback (or
    /// whose callback failed), stops the run: the failed record and the rest of its partition
    /// are not started, everything before it that finished is committed, and the error (naming
    /// the partition and offset) is returned; the failed record comes again on the next run.
    /// Stopping cancels the queued records that have not started (they come again too) and
    /// waits for the started ones for at most `revoke.drain.timeout.ms`; a handler still
    /// running then is left to finish on its own thread, and its record is not committed.
    ///
    /// Which records may run at once is `processing.order`: `partition` (the default: one at a
    /// time per partition, in offset order), `key` (in order per record key) or `unordered`.
    ///
    /// ```no_run
    /// use std::sync::atomic::AtomicBool;
    /// use rebalance_guard::{Consumer, ConsumerConfig, Record};
    /// # fn submit_order(_record: &Record) -> std::io::Result<()> { Ok(()) }
    ///
    /// let config = ConsumerConfig::builder()
    ///     .bootstrap_servers(["127.0.0.1:9092"])
    ///     .group_id("order-workers")
    ///     .set("processing.order", "key") // one account's orders in order, accounts in parallel
    ///     .build()?;
    /// let stop = AtomicBool::new(false);
    /// let mut consumer = Consumer::subscribe(config, &["orders"])?;
    /// consumer.run_with_workers(&stop, 8, 64, |record, ctx| {
    ///     if !ctx.is_current() {
    ///         return Ok(()); // it waited in a queue while its partition moved: released
    ///     }
    ///     submit_order(record)
    /// })?;
    /// consumer.close()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn run_with_workers<E, H>(
        &mut self,
        stop: &AtomicBool,
        workers: usize,
        queue: usize,
        handler: H,
    ) -> Result<(), ConsumerError>
    where
        H: Fn(&Record, &WorkContext<'_>) -> Result<(), E> + Send + Sync + 'static,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        workers::run(
            self,
            stop,
            workers,
            queue,
            move |record: &Record, context: &WorkContext<'_>, _outputs: &mut Vec<_>| {
                handler(record, context)
            },
            None,
        )
    }

    /// Graceful shutdown: stops intake, hands every partition back through a revocation (its
    /// drain, then its commit of the completed prefix in the current generation), and leaves
    /// the group unless the member is static. [`ConsumerError::Handoff`] names the partitions
    /// whose finished work could not be committed.
    pub fn close(mut self) -> Result<(), ConsumerError> {
        self.intake.clear_buffers();
        // One commit: the revocation's, in the current generation (a commit before it would
        // add nothing, and its refusal by a group that began to re-form would report a failure
        // the revocation then repairs). A reader outside a group commits nothing here.
        let before = self.handoffs.failures.len();
        if !self.in_group && self.handoffs.transactional.is_some() {
            // Outside a group no handoff commits at the close: the last transaction commits
            // here, or its outputs would be aborted with it.
            if let Err(e) = self.commit() {
                log::warn!("the last transaction did not commit at close: {e}");
            }
        }
        let closed = self.driver().close();
        // The close's handoff committed the last transaction; the producer goes with it.
        self.close_transactions()?;
        closed?;
        let failed = self.handoffs.failures.split_off(before);
        if failed.is_empty() {
            Ok(())
        } else {
            Err(ConsumerError::Handoff(failed))
        }
    }

    internal_pub! {
    /// Makes the membership thread panic. Hidden: it exists only so that tests can check what a
    /// dead membership thread does to the consumer; never call it otherwise.
    fn panic_membership_thread(&self) {
        self.member.panic_membership_thread();
    }
    }

    internal_pub! {
    /// Makes the commit thread panic at its next commit. Hidden: it exists only so that tests
    /// can check what a dead commit thread does to the consumer; never call it otherwise.
    fn panic_commit_thread(&self) {
        self.member.panic_commit_thread();
    }
    }

    /// A snapshot of per-partition signals (what an operator needs to see a stuck partition) and
    /// counters.
    pub fn stats(&self) -> ConsumerStats {
        let mut stats = consumer_stats(
            &self.guard,
            &self.intake,
            &*self.member,
            &self.handoffs.counters,
            &self.pacer,
            &self.sizer,
            &self.retries,
        );
        if let Some(transactional) = &self.handoffs.transactional {
            let open = super::transactions::lock(transactional);
            stats.transactions_committed = open.committed;
            stats.transactions_aborted = open.aborted;
        }
        stats
    }

    /// A handle that reads this consumer's [`stats`](Self::stats) from any thread, while this
    /// consumer is busy in `run`, `run_with_workers` or a batch (Java: `metrics()`; librdkafka:
    /// the statistics callback).
    pub fn stats_handle(&self) -> StatsHandle {
        self.published
            .handle(self.guard.clone(), self.intake.marks())
    }

    /// Publishes the stats for the [`StatsHandle`]s when due (at most every 100 ms).
    fn publish_stats(&mut self) {
        let now = Instant::now();
        if self.published.due(now) {
            let stats = self.stats();
            stats.export_lags(&self.handoffs.metrics);
            self.published.publish(stats, now);
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

/// The worker pool's view of the consumer (see [`WorkSource`] for why each part exists).
impl WorkSource for Consumer {
    fn poll(&mut self, timeout: Duration) -> Result<Batch<'_>, ConsumerError> {
        Consumer::poll(self, timeout)
    }

    fn commit(&mut self) -> Result<(), ConsumerError> {
        if !self.in_group {
            // Outside a group, only the application's own `commit` commits.
            return Ok(());
        }
        Consumer::commit(self).map(|_| ())
    }

    fn commit_if_due(&mut self) {
        let now = Instant::now();
        if let Some(transactional) = self.handoffs.transactional.clone() {
            // The transactional mode paces its own commits (`transaction.interval.ms`); a
            // failure is logged by the commit and the next interval commits again.
            if super::transactions::lock(&transactional).due(now) {
                let _ = self.commit_transactional(&transactional);
            }
            return;
        }
        if self.pacer.due(now) {
            self.pacer.tick(&self.guard, &mut *self.member, now);
        }
    }

    fn drain_timeout(&self) -> Duration {
        self.config.revoke_drain_timeout()
    }

    fn guard(&self) -> Arc<Guard> {
        self.guard.clone()
    }

    fn set_drain(&mut self, drain: Option<Drain>) {
        self.handoffs.drain = drain;
    }

    fn settings(&self) -> &ConsumerConfig {
        &self.config
    }

    fn waker(&self) -> Waker {
        self.waker.clone()
    }

    fn retries(&self) -> Arc<Retries> {
        self.retries.clone()
    }
}
