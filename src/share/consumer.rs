//! The [`ShareConsumer`]: one poll thread that turns the share group's parts into a blocking
//! poll-process-acknowledge loop.
//!
//! One turn of the poll thread, in this order (`turn`): the outcomes the handlers reported are
//! turned into acknowledgements by the lock guard (accept only what finished inside its lease);
//! the membership's latest assignment goes to the fetcher; records still running at half their
//! lock are renewed; then one ShareFetch round to every leader, carrying the acknowledgements,
//! whose acquired records enter the lock guard (a record whose idempotency key this member
//! already applied is accepted at once, never run again) and the buffer. Records whose lease ran
//! out in the buffer are released, never handed out.
//!
//! An outcome is decided at the instant its handler finished (the finish stamps it), so a late
//! drain never turns an effect applied inside its lease into a release. `run` acknowledges each
//! outcome before the next record of the batch, `poll` before it hands out buffered records,
//! and the decoupled mode's workers wake the poll thread as they finish.
//!
//! `poll` keeps the broker busy while this thread and the application work: as soon as a
//! fetch's answer is in (before its records are leased and handed out), or as it hands out
//! the records that leave too few for the next poll, it sends the next ShareFetch ahead
//! (`fetch_ahead`, carrying what was decided so far), so the next poll finds its records
//! acquired, or nearly; the acknowledgements decided meanwhile ride on the fetch after that
//! one. Only when the application came back for this poll within a quarter of the lock
//! ([`PREFETCH_LOCK_SHARE`]): a record acquired ahead waits in the buffer about as long as the
//! application took, and the buffer releases it, unseen, if its lease ran out there. `run`
//! never fetches ahead: a fetch out to a leader would hold that leader's acknowledgements,
//! which `run` sends between records.
//!
//! A fetch round that fails with what the network may let through later (a timeout, a refused
//! or broken connection) is retried after the consumers' backoff; only what can never succeed
//! (a refused authentication, a broker without share groups, a fatal member error) ends `poll`,
//! `run` or `run_with_workers`.
//!
//! Nothing here waits for an acknowledgement's answer, neither before the next fetch nor before
//! the next record: an acknowledgement is *sent* before the next record runs (or rides on the
//! next fetch when its leader has a fetch out, see `ShareFetcher::send_acks_now`), and its
//! outcome is taken in at a later turn. The broker's answer only says whether the lock was
//! still held, and a failed one is counted (the record comes back after its lock and the
//! idempotency key refuses it), never resent as ACCEPT. So a leader that stops answering holds
//! neither `poll` past its fetch wait nor `run`'s next record.
//!
//! A fence (the membership tells that Kafka removed the member, which rejoins at epoch 0) ends
//! every share session's leases: a member the group removed may have lost its share sessions,
//! and their records, too. Before the member hears of it, the session bound its answered
//! heartbeats renew ends every lease the same way (`LockGuard::session_bound`, handed to the
//! membership by `with_parts`): past it, the group may already have removed the member.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use log::{debug, info, warn};

use super::config::ShareConfig;
use super::context::{Finished, ShareDelivery, ShareFailure};
use super::seam::{ShareMember, ShareSource};
use super::stats::ShareStats;
use super::ShareContext;
use crate::group::{ShareMembership, ShareMembershipConfig};
use crate::guard::{
    AckType, Acquired, BootClock, Clock, IdempotencyKey, LockGuard, LockGuardConfig, LockLease,
    Outcome,
};
use crate::wire::share::{AckResult, ShareAck, ShareFetchSettings, ShareFetcher};
use crate::wire::{ErrorChain, KeyFn, Record, WireError};
use crate::TopicPartition;

use super::error::ShareError;

/// Told of every acknowledgement the broker refused or that was lost with its request: the
/// partition, the offset, what was sent and why it failed.
pub type AckFailureHook = Box<dyn FnMut(&TopicPartition, i64, AckType, &str) + Send>;

/// How long `close` waits for the last acknowledgements and the leave.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// How many acquired ranges (in-flight batches at the broker) a poll should be able to hand out
/// whole: the ShareFetch `BatchSize` is `max.poll.records` divided by this. With
/// `batch_optimized` the broker cuts its acquisitions into in-flight batches of whole producer
/// batches, merged until they reach `BatchSize`; `poll` hands out whole ranges when they fit
/// (`hand_out`), and Kafka settles a batch acknowledged whole as one instead of offset by
/// offset. A `BatchSize` of a whole poll made every in-flight batch larger than a poll (500
/// asked, about 650 acquired), acknowledged in two parts, at about twice the broker's CPU per
/// record (Kafka 4.4, measured). `record_limit` acquisitions do not use it.
const RANGES_PER_POLL: usize = 4;

/// `poll` sends the next ShareFetch ahead only when the application came back for it within
/// this share of the broker's lock (1/4): a record acquired ahead waits about one poll in the
/// buffer, then has the rest of its lease for its handler. Why a quarter: with the lease's
/// margin (at most half the lock) a record still has a quarter of the lock at the least when
/// it is handed out; an application slower than that gets no record acquired ahead, as before.
const PREFETCH_LOCK_SHARE: u32 = 4;

/// A record acquired and not handed out yet.
struct Buffered {
    record: Record,
    lease: LockLease,
    /// The last offset of the acquired range the record belongs to (one in-flight batch at the
    /// broker): `poll` hands a range out whole when it fits, so that its acknowledgements leave
    /// together and the broker settles the range as one batch.
    range_last: i64,
}

/// A member of a share group (KIP-932): records of the subscribed topics are acquired under a
/// lock, handed out in bounded batches, and acknowledged one by one by what their handler did
/// and whether their lock could still be held.
///
/// Each record runs under a lease that ends before the broker's lock can; a handler that finds
/// it not current skips its effect, and the record is released, never accepted:
///
/// ```no_run
/// use std::sync::atomic::AtomicBool;
/// use rebalance_guard::{Record, ShareConfig, ShareConsumer, ShareFailure};
/// # fn submit_order(_record: &Record) -> std::io::Result<()> { Ok(()) }
///
/// let config = ShareConfig::builder()
///     .bootstrap_servers(["127.0.0.1:9092"])
///     .group_id("order-workers") // the share group
///     .build()?;
/// let stop = AtomicBool::new(false);
/// let mut consumer = ShareConsumer::subscribe(config, &["orders"])?;
/// consumer.run_with_workers(&stop, 16, |record, ctx| {
///     if !ctx.is_current() {
///         return Ok(()); // the lock may have ended: released, another member may have it
///     }
///     // Released for another delivery while processing.retries allow, then rejected.
///     submit_order(record).map_err(ShareFailure::retryable)
/// })?;
/// consumer.close()?; // release what is held, the last acknowledgements, leave the group
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct ShareConsumer {
    pub(super) config: ShareConfig,
    membership: Option<Box<dyn ShareMember>>,
    pub(super) fetcher: Option<Box<dyn ShareSource>>,
    pub(super) locks: LockGuard,
    key_fn: Option<KeyFn>,
    on_ack_failure: Option<AckFailureHook>,
    assignment_epoch: Option<i32>,
    buffer: VecDeque<Buffered>,
    done_tx: Sender<Finished>,
    done_rx: Receiver<Finished>,
    pub(super) stats: ShareStats,
    /// Handed out and not yet reported back.
    pub(super) outstanding: usize,
    /// Acknowledgements queued since the last request that could carry them.
    acks_pending: bool,
    /// When `poll` last handed records out (on the leases' clock): how long the application
    /// takes with a poll's records, which decides whether the next fetch may go out ahead.
    last_hand_out: Option<Instant>,
    /// The poll under way may send the next ShareFetch ahead (see `poll_with`).
    ahead: bool,
    /// The lock the broker last granted (`AcquisitionLockTimeoutMs`).
    lock_seen: Option<Duration>,
    /// Fetch rounds in a row that failed with an error the network may let through later.
    network_failures: u32,
    /// The membership's fence count last followed ([`crate::group::ShareAssignment::fenced`]).
    fences_seen: u64,
}

impl ShareConsumer {
    /// Joins the share group `config.group_id()` subscribed to `topics` and opens the fetcher;
    /// returns once the broker answered the first heartbeat. Records start flowing with the
    /// first [`poll`](Self::poll).
    pub fn subscribe(config: ShareConfig, topics: &[&str]) -> Result<ShareConsumer, ShareError> {
        let base = config.consumer();
        let mut membership_config =
            ShareMembershipConfig::new(config.client_config(), config.group_id(), topics);
        membership_config.rack = base.client_rack().map(str::to_string);
        membership_config.request_timeout = base.request_timeout();
        let membership = ShareMembership::join(membership_config)?;
        let settings = ShareFetchSettings {
            max_wait: base.fetch_max_wait(),
            min_bytes: base.fetch_min_bytes(),
            max_bytes: base.fetch_max_bytes(),
            max_records: base.max_poll_records().min(i32::MAX as usize) as i32,
            batch_size: (base.max_poll_records() / RANGES_PER_POLL).clamp(1, i32::MAX as usize)
                as i32,
            acquire_mode: config.acquire_mode().wire_value(),
        };
        let fetcher = ShareFetcher::new(
            config.client_config(),
            config.group_id(),
            membership.member_id(),
            settings,
        )?;
        info!(
            "share consumer: member {} of share group {} subscribed to {:?}",
            membership.member_id(),
            config.group_id(),
            topics
        );
        // The leases read the process's boot clock, which the fetcher's send stamps read too.
        Self::with_parts(
            config,
            Box::new(membership),
            Box::new(fetcher),
            BootClock::shared(),
        )
    }

    internal_pub! {
    /// A share consumer over `membership` and `fetcher`, whose leases read `clock` (the clock
    /// the fetcher stamps its requests' send times on). [`subscribe`](Self::subscribe) passes
    /// the broker's; tests pass the in-memory share coordinator's members and its manual clock,
    /// which drive the whole share consumer (turns, leases, acknowledgements, renewals, the
    /// close) without a broker.
    fn with_parts(
        config: ShareConfig,
        membership: Box<dyn ShareMember>,
        fetcher: Box<dyn ShareSource>,
        clock: Arc<dyn Clock>,
    ) -> Result<ShareConsumer, ShareError> {
        let base = config.consumer();
        let defaults = LockGuardConfig::default();
        let locks = LockGuard::with_clock(LockGuardConfig {
            // A margin set by the operator is the margin (at most half the lock); otherwise the
            // guard's: a tenth of the lock, at least a second.
            margin_floor: config.lock_safety_margin().unwrap_or(defaults.margin_floor),
            margin_percent: if config.lock_safety_margin().is_some() {
                0
            } else {
                defaults.margin_percent
            },
            retries: base.processing_retries(),
            applied_keys: base.idempotency_cache_size(),
            renewal: config.lock_renew() && fetcher.supports_renew(),
        }, clock)?;
        // The membership's answered heartbeats bound every lease: past the bound the group may
        // have removed this member and given its records to another.
        membership.bound_session(locks.session_bound());
        let (done_tx, done_rx) = channel();
        Ok(ShareConsumer {
            config,
            membership: Some(membership),
            fetcher: Some(fetcher),
            locks,
            key_fn: None,
            on_ack_failure: None,
            assignment_epoch: None,
            buffer: VecDeque::new(),
            done_tx,
            done_rx,
            stats: ShareStats::default(),
            outstanding: 0,
            acks_pending: false,
            last_hand_out: None,
            ahead: false,
            lock_seen: None,
            network_failures: 0,
            fences_seen: 0,
        })
    }
    }

    /// Derives each record's idempotency key (an order id): a redelivered record whose effect
    /// this member already applied is accepted without running again.
    pub fn with_idempotency_key(
        mut self,
        key: impl Fn(&Record) -> Option<IdempotencyKey> + Send + 'static,
    ) -> Self {
        self.key_fn = Some(Box::new(key));
        self
    }

    /// Calls `hook` for every acknowledgement that failed (the lock was lost, the session or the
    /// connection with it): an operator's record of which effects may repeat elsewhere.
    pub fn on_ack_failure(
        mut self,
        hook: impl FnMut(&TopicPartition, i64, AckType, &str) + Send + 'static,
    ) -> Self {
        self.on_ack_failure = Some(Box::new(hook));
        self
    }

    /// The member id this consumer generated (KIP-932 members name themselves).
    pub fn member_id(&self) -> &str {
        self.membership.as_ref().map_or("", |m| m.member_id())
    }

    /// The partitions the broker assigned to this member (others may be assigned the same ones:
    /// a share group shares partitions).
    pub fn assignment(&self) -> Vec<TopicPartition> {
        self.membership
            .as_ref()
            .map(|m| m.assignment().partitions.into_iter().collect())
            .unwrap_or_default()
    }

    /// The counters so far: acquired, accepted, released, rejected, acknowledgement failures,
    /// renewals, effects refused by their key.
    pub fn stats(&self) -> ShareStats {
        let mut stats = self.stats.clone();
        stats.locks = self.locks.stats();
        stats.buffered = self.buffer.len();
        stats.outstanding = self.outstanding;
        if let Some(fetcher) = &self.fetcher {
            stats.fetch = fetcher.fetch_stats();
        }
        stats
    }

    /// Up to `max.poll.records` acquired records, waiting up to `timeout` for the first (a
    /// fetch round in progress may add up to `fetch.max.wait.ms` and the fetch margin; no
    /// acknowledgement's answer is waited for; a zero `timeout` still makes one round). Each
    /// [`ShareDelivery`] must be finished (or dropped: released); what it reports is decided at
    /// the instant it was finished and acknowledged by the next poll, before that poll hands
    /// out anything (records already buffered included): sent then, or, while the next
    /// ShareFetch is already out to the record's leader, queued for the fetch after it, which
    /// that poll sends once the answer is in.
    ///
    /// The next ShareFetch goes out before this poll returns (it acquires the next records
    /// while the application works on these) when the buffer will not serve the next poll and
    /// the application came back for this poll within a quarter of the broker's lock: a record
    /// acquired ahead waits about one poll before it is handed out, and one whose lease ran
    /// out meanwhile is released, never handed out.
    pub fn poll(&mut self, timeout: Duration) -> Result<Vec<ShareDelivery>, ShareError> {
        self.poll_with(timeout, true)
    }

    /// [`poll`](Self::poll), sending the next fetch ahead when `ahead` allows it and the
    /// application came back for this poll within [`PREFETCH_LOCK_SHARE`] of the lock.
    fn poll_with(
        &mut self,
        timeout: Duration,
        ahead: bool,
    ) -> Result<Vec<ShareDelivery>, ShareError> {
        let now = self.locks.now();
        self.ahead = ahead
            && match (self.last_hand_out, self.lock_seen) {
                (Some(last), Some(lock)) => {
                    now.saturating_duration_since(last) <= lock / PREFETCH_LOCK_SHARE
                }
                _ => false,
            };
        let polled = self.poll_records(timeout);
        self.ahead = false;
        polled
    }

    /// The body of [`poll_with`](Self::poll_with).
    fn poll_records(&mut self, timeout: Duration) -> Result<Vec<ShareDelivery>, ShareError> {
        let until = Instant::now() + timeout;
        if self.buffered() > 0 {
            // Records wait in the buffer: no fetch, but what finished since the last poll is
            // acknowledged now, not after the records about to be handed out.
            self.turn(false)?;
        }
        // At least one fetch round per poll, however short its timeout: a poll with no time
        // to wait (`run` with `fetch.max.wait.ms` 0) must still take in what is there, or it
        // would never fetch at all.
        let mut fetched = false;
        loop {
            let want = self.config.consumer().max_poll_records();
            let out = self.hand_out(want);
            if !out.is_empty() {
                self.last_hand_out = Some(self.locks.now());
                if self.ahead && self.buffer.len() < want {
                    // The round that filled the buffer did not send it (records served from
                    // the buffer, or a leader still busy then).
                    self.fetch_ahead();
                }
                return Ok(out);
            }
            if fetched && Instant::now() >= until {
                return Ok(Vec::new());
            }
            self.turn(true)?;
            fetched = true;
        }
    }

    /// Processes records on this thread until `stop` is set: each record runs `handler`, whose
    /// `Ok` accepts it (or releases it, when the handler was told its lease ran out: check
    /// [`ShareContext::is_current`] right before the effect) and whose `Err` releases or rejects
    /// it (see [`ShareFailure`]). Returns on `stop` or on a fatal error; call
    /// [`close`](Self::close) after.
    ///
    /// Each record's outcome is acknowledged before the next record of the batch runs (a
    /// ShareAcknowledge when it cannot ride on a fetch): an ACCEPT held until the batch ends
    /// could reach the broker after the lock did, and the broker would deliver the applied
    /// record again. What that costs: a round trip per record; the decoupled mode
    /// ([`run_with_workers`](Self::run_with_workers)) sends its outcomes with its fetches.
    pub fn run<F>(&mut self, stop: &AtomicBool, mut handler: F) -> Result<(), ShareError>
    where
        F: FnMut(&Record, &ShareContext) -> Result<(), ShareFailure>,
    {
        let wait = self.config.consumer().fetch_max_wait();
        while !stop.load(Ordering::Relaxed) {
            // No fetch ahead: a fetch out to a leader would hold that leader's acknowledgements
            // until its answer, where `run` sends each before the next record.
            for delivery in self.poll_with(wait, false)? {
                let result = handler(delivery.record(), delivery.context());
                if let Err(failure) = &result {
                    debug!(
                        "share consumer: handler failed on {}-{}@{} (delivery {}): {}",
                        delivery.record().topic,
                        delivery.record().partition,
                        delivery.record().offset,
                        delivery.context().delivery_count(),
                        failure.error()
                    );
                }
                delivery.finish_with(&result);
                // Between records: this outcome is decided and acknowledged now, and the
                // records still waiting in the batch are renewed when half their lock has
                // passed, not only between batches.
                self.turn(false)?;
            }
        }
        Ok(())
    }

    /// Releases whatever is still held, sends the last acknowledgements, closes the share
    /// sessions and leaves the group. Records handed out and never reported are released (a
    /// delivery not yet dropped reports later into nothing: its lock runs out).
    pub fn close(mut self) -> Result<(), ShareError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), ShareError> {
        // Decisions are read on the leases' clock, as every other instant they are checked at.
        let now = self.locks.now();
        while let Some(buffered) = self.buffer.pop_front() {
            self.decide(&buffered.lease, Outcome::Skipped, now);
        }
        self.drain_finished();
        let mut result = Ok(());
        if let Some(fetcher) = self.fetcher.take() {
            // The last count, which `stats` reports once the fetcher is gone.
            self.stats.fetch = fetcher.fetch_stats();
            if self.acks_pending {
                self.stats.ack_round_trips += 1;
            }
            let results = fetcher.close(CLOSE_TIMEOUT);
            self.ack_results(&results);
        }
        if let Some(membership) = self.membership.take() {
            if let Err(e) = membership.leave(CLOSE_TIMEOUT) {
                warn!("share consumer: leaving the group failed: {e}");
                result = Err(ShareError::Group(e));
            }
        }
        info!("share consumer closed: {}", self.stats());
        result
    }

    /// Hands out up to `want` buffered records whose lease is still current (read once, at the
    /// start: a lease that ends meanwhile is the handler's to see); the others are released.
    ///
    /// An acquired range (one in-flight batch at the broker) that does not fit whole in what is
    /// left of `want` waits for the next call, unless nothing was handed out yet: its
    /// acknowledgements then leave in one request, and Kafka settles a batch acknowledged whole
    /// as one, where a batch acknowledged in parts is kept and settled offset by offset (up to
    /// twice the broker's CPU per record, measured on Kafka 4.4 with batch_optimized).
    pub(super) fn hand_out(&mut self, want: usize) -> Vec<ShareDelivery> {
        let mut out = Vec::with_capacity(want.min(self.buffer.len()));
        let now = self.locks.now();
        // The range being handed out: (partition, its last offset).
        let mut open: Option<(i32, i64)> = None;
        while out.len() < want {
            let Some(next) = self.buffer.front() else {
                break;
            };
            let (partition, offset) = (next.record.partition, next.record.offset);
            if open != Some((partition, next.range_last)) {
                // A new range: whole, or not in this call (the offsets bound its size; records
                // already released or refused only make it smaller).
                let size = next.range_last.saturating_sub(offset).saturating_add(1);
                let left = i64::try_from(want - out.len()).unwrap_or(i64::MAX);
                if !out.is_empty() && size > left {
                    break;
                }
                open = Some((partition, next.range_last));
            }
            let Some(Buffered { record, lease, .. }) = self.buffer.pop_front() else {
                break;
            };
            if !lease.is_current_at(now) {
                self.stats.expired_in_buffer += 1;
                self.decide(&lease, Outcome::Skipped, now);
                continue;
            }
            self.outstanding += 1;
            out.push(ShareDelivery::new(record, lease, self.done_tx.clone()));
        }
        out
    }

    /// Records acquired and waiting to be handed out.
    pub(super) fn buffered(&self) -> usize {
        self.buffer.len()
    }

    /// Bounds how many records one ShareFetch may acquire (with `share.acquire.mode`
    /// `record_limit` the broker keeps to it; `batch_optimized` may hand out whole batches).
    pub(super) fn set_records_per_fetch(&mut self, records: usize) {
        if let Some(fetcher) = self.fetcher.as_mut() {
            fetcher.set_max_records(i32::try_from(records).unwrap_or(i32::MAX));
        }
    }

    /// One turn of the poll thread (see the module text). `fetch` false skips the ShareFetch
    /// (the decoupled mode's poll thread when every worker is busy still acknowledges and
    /// renews).
    pub(super) fn turn(&mut self, fetch: bool) -> Result<(), ShareError> {
        if let Some(membership) = &self.membership {
            membership.status()?;
        }
        self.drain_finished();
        self.follow_assignment();
        if let Some(fetcher) = &self.fetcher {
            // Known once a leader answered: the cluster's versions are learnt as it is used.
            let renewal = self.config.lock_renew() && fetcher.supports_renew();
            self.locks.set_renewal(renewal);
        }
        self.renew_due();
        self.release_expired();
        if fetch {
            self.fetch_round()?;
        } else if self.acks_pending {
            // Nothing fetched, but what finished is not kept waiting for the next fetch.
            self.send_acks();
        }
        Ok(())
    }

    /// Sends the queued acknowledgements without waiting for their answers (taken in with a
    /// later turn's outcomes); those of a leader with a fetch out stay queued for its next
    /// fetch.
    fn send_acks(&mut self) {
        let Some(fetcher) = self.fetcher.as_mut() else {
            return;
        };
        let results = fetcher.send_acks_now();
        self.acks_went_out();
        self.ack_results(&results);
    }

    /// After a request that could carry the queued acknowledgements: one round trip more when
    /// they went out (none does while every leader they wait for has a fetch out).
    fn acks_went_out(&mut self) {
        let queued = self.fetcher.as_ref().is_some_and(|f| f.has_queued_acks());
        if self.acks_pending && !queued {
            self.stats.ack_round_trips += 1;
        }
        self.acks_pending = queued;
    }

    /// Sends the next ShareFetch now, to every leader with none out, carrying the
    /// acknowledgements queued so far: the broker acquires the next records while this member
    /// works on the ones it has. `poll` calls it when the poll under way may
    /// ([`poll_with`](Self::poll_with)) and its buffer will not serve the next poll.
    fn fetch_ahead(&mut self) {
        let Some(fetcher) = self.fetcher.as_mut() else {
            return;
        };
        if fetcher.assigned().is_empty() {
            return;
        }
        fetcher.fetch_ahead();
        self.acks_went_out();
    }

    /// Applies every outcome the handlers reported so far.
    pub(super) fn drain_finished(&mut self) {
        while let Ok(done) = self.done_rx.try_recv() {
            self.outstanding = self.outstanding.saturating_sub(1);
            self.decide(&done.lease, done.outcome, done.at);
        }
    }

    /// Waits up to `timeout` for one reported outcome (the decoupled mode's idle wait).
    pub(super) fn wait_finished(&mut self, timeout: Duration) {
        if let Ok(done) = self.done_rx.recv_timeout(timeout) {
            self.outstanding = self.outstanding.saturating_sub(1);
            self.decide(&done.lease, done.outcome, done.at);
        }
    }

    fn decide(&mut self, lease: &LockLease, outcome: Outcome, at: Instant) {
        if let Some(kind) = self.locks.finished(lease, outcome, at) {
            // Tied to this acquisition (its session, its lock), and late when decided at or
            // after the lease's deadline.
            self.queue_ack(ShareAck::for_lease(lease, kind));
        }
    }

    fn queue_ack(&mut self, ack: ShareAck) {
        if let Some(fetcher) = self.fetcher.as_mut() {
            fetcher.acknowledge(vec![ack]);
            self.acks_pending = true;
        }
    }

    fn follow_assignment(&mut self) {
        let (Some(membership), Some(fetcher)) = (&self.membership, self.fetcher.as_mut()) else {
            return;
        };
        let assignment = membership.assignment();
        if assignment.fenced != self.fences_seen {
            // Kafka removed the member, whose records may have been released with its share
            // sessions: no lease of the sessions before the fence may read current.
            warn!(
                "share consumer: member fenced ({} time(s)): the records it held may be \
                 released",
                assignment.fenced
            );
            fetcher.member_fenced();
            self.fences_seen = assignment.fenced;
        }
        if self.assignment_epoch != Some(assignment.epoch) {
            info!(
                "share consumer: assignment epoch {}: {} partition(s)",
                assignment.epoch,
                assignment.partitions.len()
            );
            fetcher.assign(&assignment.partitions);
            self.assignment_epoch = Some(assignment.epoch);
            self.stats.assignment_epoch = assignment.epoch;
            self.stats.assigned = assignment.partitions.len();
        }
    }

    fn renew_due(&mut self) {
        // The locks' clock (it counts a suspend of the machine, as the broker's lock does).
        let now = self.locks.now();
        let due = self.locks.due_for_renewal(now);
        if due.is_empty() {
            return;
        }
        let Some(fetcher) = self.fetcher.as_mut() else {
            return;
        };
        for (tp, offset) in &due {
            self.locks.renew_sent(tp, *offset);
        }
        let renewed = fetcher.renew(&due, self.config.consumer().request_timeout());
        for result in &renewed.results {
            for (offset, _) in &result.acks {
                match (&result.outcome, renewed.lock_duration) {
                    (Ok(()), Some(lock)) => {
                        self.locks
                            .renewed(&result.tp, *offset, renewed.sent_at, lock);
                    }
                    _ => {
                        self.locks.renew_failed(&result.tp, *offset);
                    }
                }
            }
        }
        self.stats.renew_round_trips += 1;
    }

    /// Releases the buffered records whose lease ran out, so that the broker redelivers them
    /// now rather than when their lock ends.
    fn release_expired(&mut self) {
        let now = self.locks.now();
        let before = self.buffer.len();
        let mut kept = VecDeque::with_capacity(before);
        while let Some(buffered) = self.buffer.pop_front() {
            if buffered.lease.is_current_at(now) {
                kept.push_back(buffered);
            } else {
                self.stats.expired_in_buffer += 1;
                self.decide(&buffered.lease, Outcome::Skipped, now);
            }
        }
        self.buffer = kept;
        // Forgets the records whose acknowledgement answer never came once their lock ended.
        let _ = self.locks.expired(now);
    }

    fn fetch_round(&mut self) -> Result<(), ShareError> {
        let Some(fetcher) = self.fetcher.as_mut() else {
            return Ok(());
        };
        if fetcher.assigned().is_empty() {
            // Nothing to fetch (the first heartbeat answer assigns nothing; a member may have
            // more members beside it than there are partitions): wait for the assignment to
            // change instead of spinning, and send what finished meanwhile.
            if self.acks_pending {
                self.send_acks();
            }
            if let Some(membership) = &self.membership {
                let since = self.assignment_epoch.unwrap_or(i32::MIN);
                membership
                    .wait_for_assignment_change(since, self.config.consumer().fetch_max_wait());
            }
            return Ok(());
        }
        let round = match fetcher.fetch() {
            Ok(round) => round,
            Err(error) => return self.fetch_failed(error),
        };
        self.acks_went_out();
        // The next fetch goes out as soon as this answer is in, before its records are leased
        // and handed out, when the poll under way may send it and they will not fill the next
        // poll too: the broker works on it while this thread and the application work on these.
        let want = self.config.consumer().max_poll_records();
        let acquired: usize = round.batches.iter().map(|b| b.records.len()).sum();
        if self.ahead && acquired > 0 && self.buffer.len() + acquired < want.saturating_mul(2) {
            self.fetch_ahead();
        }
        if self.network_failures > 0 {
            info!(
                "share consumer: fetching again after {} failed round(s)",
                self.network_failures
            );
            self.network_failures = 0;
        }
        self.stats.fetch_round_trips += 1;
        for (tp, code) in &round.errors {
            debug!("share consumer: ShareFetch for {tp}: {code}");
            self.stats.fetch_errors += 1;
        }
        for refused in &round.refused {
            warn!("share consumer: ShareFetch answer refused: {refused}");
            self.stats.fetch_errors += 1;
        }
        self.ack_results(&round.ack_results);
        for mut batch in round.batches {
            if batch.scope.has_ended() {
                // The broker released them with their session already.
                debug!(
                    "share consumer: {} record(s) of {} dropped: their share session ended",
                    batch.records.len(),
                    batch.tp
                );
                continue;
            }
            let grant = batch.grant();
            self.lock_seen = Some(batch.lock_duration);
            let tp = batch.tp.clone();
            for acquired in std::mem::take(&mut batch.records) {
                let record = &acquired.record;
                let key = self.key_fn.as_ref().and_then(|f| f(record));
                self.stats.acquired += 1;
                match self.locks.acquired_in(
                    &tp,
                    record.offset,
                    i16::try_from(acquired.delivery_count).unwrap_or(i16::MAX),
                    key,
                    &grant,
                ) {
                    Acquired::Run(lease) => self.buffer.push_back(Buffered {
                        record: acquired.record,
                        lease,
                        range_last: acquired.range_last,
                    }),
                    refused => {
                        debug!(
                            "share consumer: {tp}@{} (delivery {}) not run: {refused:?}",
                            record.offset, acquired.delivery_count
                        );
                        if let Some(kind) = refused.ack() {
                            self.queue_ack(batch.ack(record.offset, kind));
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// A fetch round failed as a whole (the cluster's metadata could not be read). What the
    /// network may let through later (a timeout, a refused or broken connection, no broker
    /// reachable: [`WireError::retriable`], the classification every retry of this crate
    /// uses) is tried again after the consumers' backoff (`retry.backoff.ms` doubled per
    /// failure, capped at `reconnect.backoff.max.ms`), draining finished outcomes meanwhile; the records held stay held (their leases decide). Anything else (a
    /// refused authentication or TLS handshake, a broker too old for share groups) can never
    /// succeed and ends the call.
    fn fetch_failed(&mut self, error: WireError) -> Result<(), ShareError> {
        if !error.retriable() {
            return Err(ShareError::Wire(error));
        }
        self.network_failures = self.network_failures.saturating_add(1);
        self.stats.fetch_errors += 1;
        let backoff = self
            .config
            .consumer()
            .retry_backoff_after(self.network_failures);
        let shown = ErrorChain(&error);
        if self.network_failures == 1 {
            warn!("share consumer: fetch round failed: {shown}; retrying in {backoff:?}");
        } else {
            debug!(
                "share consumer: fetch round failed again ({} in a row): {shown}; retrying in \
                 {backoff:?}",
                self.network_failures
            );
        }
        let until = Instant::now() + backoff;
        loop {
            let now = Instant::now();
            if now >= until {
                return Ok(());
            }
            self.wait_finished(until - now);
        }
    }

    fn ack_results(&mut self, results: &[AckResult]) {
        for result in results {
            let ok = result.outcome.is_ok();
            if !ok {
                warn!(
                    "share consumer: acknowledgement of {} record(s) of {} failed: {:?} (the lock \
                     may be lost: counted, never resent as ACCEPT)",
                    result.acks.len(),
                    result.tp,
                    result.outcome
                );
            }
            for (offset, kind) in &result.acks {
                self.locks.ack_result(&result.tp, *offset, *kind, ok);
                if let (Err(error), Some(hook)) = (&result.outcome, self.on_ack_failure.as_mut()) {
                    hook(&result.tp, *offset, *kind, &error.to_string());
                }
            }
        }
        self.stats.acknowledgements += results.iter().map(|r| r.acks.len() as u64).sum::<u64>();
    }
}

impl Drop for ShareConsumer {
    fn drop(&mut self) {
        if self.membership.is_some() || self.fetcher.is_some() {
            let _ = self.shutdown();
        }
    }
}
