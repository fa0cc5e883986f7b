//! One bounded batch and its deliveries: records leave the intake here, one at a time, each
//! admitted through the guard at the moment it is handed out, so a partition fenced mid-batch
//! (lost on the heartbeat thread) stops yielding records at once.
//!
//! A batch borrows the consumer's parts for its lifetime (the intake, the sizer, the guard, the
//! membership's rejoin flag) instead of the consumer itself, so this file depends on those parts
//! and not on the consumer.

use std::collections::VecDeque;
use std::time::Instant;

use crate::group::Membership;
use crate::guard::{AdmitError, CommitOffset, CompleteError, Lease};
use crate::wire::{KeyFn, Record};
use crate::TopicPartition;

use super::batch_clock::BatchClock;
use super::context::Guard;
use super::error::ConsumerError;
use super::handoff::Handoffs;
use super::intake::Intake;
use super::pacer::CommitPacer;
use super::retry::{Retries, Settled};
use super::sizer::{BatchPlan, BatchSizer};
use super::stats::{ConsumerStats, RebalanceCounters};

/// A record handed out by a [`Batch`], with the lease that proves it was admitted under the
/// current assignment of its partition.
#[derive(Debug)]
pub struct Delivery {
    /// The record.
    pub record: Record,
    lease: Lease,
}

impl Delivery {
    /// The lease it was admitted under. A long handler checks
    /// [`Batch::is_current`] with the delivery right before an external side effect (the batch
    /// borrows the consumer, so the consumer itself cannot be asked mid-batch).
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// The fencing token of the assignment it was admitted in (see
    /// [`WorkContext::fencing_token`](crate::WorkContext::fencing_token)): write it with the
    /// effect, and have the sink refuse a smaller one than it stored.
    pub fn fencing_token(&self) -> u64 {
        self.lease.fencing_token
    }
}

/// One bounded batch: hands out records until its size or its deadline is reached.
///
/// The batch holds the consumer's parts while it lives, and offers the calls a handler needs
/// in the middle of it (Java's "commit in the middle of a big batch"): [`commit`](Self::commit),
/// [`stats`](Self::stats), [`pause`](Self::pause)/[`resume`](Self::resume),
/// [`seek`](Self::seek), [`position`](Self::position), [`assignment`](Self::assignment) and
/// [`is_current`](Self::is_current).
///
/// Dropping a batch with records handed out but neither completed nor failed rewinds their
/// partitions, so they are fetched and delivered again; nothing is committed past them.
pub struct Batch<'a> {
    intake: &'a mut Intake,
    sizer: &'a mut BatchSizer,
    guard: &'a Guard,
    member: &'a mut dyn Membership,
    key_fn: Option<&'a KeyFn>,
    /// Where the dropped records are counted (and, with the `metrics` feature, the guard's
    /// refusals by kind).
    handoffs: &'a mut Handoffs,
    /// `commit.interval.ms`: what finished is committed during the batch too.
    pacer: &'a mut CommitPacer,
    /// The failure policy's counters, for [`Batch::stats`].
    retries: &'a Retries,
    plan: BatchPlan,
    handed: usize,
    /// Handed-out records not completed yet, in the order handed out. Few at a time (one in
    /// `run`), and usually settled first in, first out, so a queue searched from the front
    /// costs O(1) per record where a map rebuilt per batch grew with the partition count.
    outstanding: VecDeque<Lease>,
    /// The record `run` is processing in place ([`Batch::run_next`]), so that a handler's panic
    /// still releases it when the batch is dropped.
    in_hand: Option<Lease>,
    /// The readings of time, taken again only when time may have moved on (`batch_clock.rs`).
    clock: BatchClock,
}

impl<'a> Batch<'a> {
    /// Plans a batch (its size and deadline from the sizer) over the consumer's parts. Each
    /// part is borrowed on its own (not the consumer whole), so that the consumer's other
    /// fields stay usable beside the batch.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn begin(
        intake: &'a mut Intake,
        sizer: &'a mut BatchSizer,
        guard: &'a Guard,
        member: &'a mut dyn Membership,
        key_fn: Option<&'a KeyFn>,
        handoffs: &'a mut Handoffs,
        pacer: &'a mut CommitPacer,
        retries: &'a Retries,
    ) -> Self {
        let now = Instant::now();
        let plan = sizer.begin_batch(now);
        // Partitions held back by their completed-offsets map are tried again in every batch.
        intake.release_held();
        let clock = BatchClock::new(now, guard);
        Batch {
            retries,
            intake,
            sizer,
            guard,
            member,
            key_fn,
            handoffs,
            pacer,
            plan,
            handed: 0,
            outstanding: VecDeque::new(),
            in_hand: None,
            clock,
        }
    }
}

impl Batch<'_> {
    /// The plan: how many records at most, and the deadline.
    pub fn plan(&self) -> &BatchPlan {
        &self.plan
    }

    /// The next record, admitted through the guard, or `None` when the batch is over (size
    /// reached, deadline reached, a rebalance change to apply, or nothing buffered).
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<Delivery> {
        let (record, lease) = self.admit_next()?;
        self.outstanding.push_back(lease.clone());
        Some(Delivery { record, lease })
    }

    /// `run`'s way through the batch: the next record is admitted, handed to `handle` in place
    /// (no [`Delivery`] moved out and back, no lease copied into the outstanding list), then
    /// completed or released as `handle` settled it, which is returned; `None` when the batch
    /// is over, as [`Batch::next`].
    pub(crate) fn run_next(
        &mut self,
        handle: impl FnOnce(&Record, &Lease) -> Settled,
    ) -> Option<Settled> {
        let (record, lease) = self.admit_next()?;
        let settled = handle(&record, self.in_hand.insert(lease));
        let lease = self.in_hand.take()?;
        match settled {
            Settled::Complete => self.complete_lease(&lease),
            Settled::Release | Settled::Stop(_) => self.fail_lease(&lease),
        }
        Some(settled)
    }

    /// Takes the next record from the intake and admits it through the guard, with the batch's
    /// checks (size, deadline, rebalance, paced commit) whenever the clocks are read.
    #[inline(always)]
    fn admit_next(&mut self) -> Option<(Record, Lease)> {
        loop {
            if self.handed >= self.plan.size {
                return None;
            }
            if self.clock.due() && !self.read_clock() {
                return None;
            }
            let (tp, record) = self.intake.next_record()?;
            let key = self.key_fn.and_then(|f| f(&record));
            // Admitted at the guard's own reading, not `now`: the session bound is checked on
            // the lease clock, which counts a suspend of the machine; `now` (the batch's
            // deadline, pacing and sizing, durations of this process only) does not.
            let admitted = self
                .guard
                .admit_at(self.clock.admission(), tp, record.offset, key, ());
            let error = match admitted {
                Ok(lease) => {
                    self.handed += 1;
                    self.clock.handed_out();
                    return Some((record, lease));
                }
                Err(error) => error,
            };
            self.handoffs.metrics.refused(tp, &error);
            let tp = tp.clone();
            match error {
                AdmitError::Fenced { .. } => {
                    // Revoked or lost under us: none of its records may be processed.
                    let dropped = self.intake.drop_fenced(&tp) + 1;
                    self.handoffs.counters.dropped_records += dropped as u64;
                    log::warn!("{tp} is fenced: {dropped} fetched record(s) dropped unprocessed");
                }
                error @ AdmitError::SessionExpired { .. } => {
                    // Not ours to process until a heartbeat is answered again (or the loss is
                    // detected): the record stays first in line, and the batch ends here.
                    log::warn!("{error}: the batch stops until the session is renewed");
                    self.intake.push_front(tp, record);
                    return None;
                }
                error @ (AdmitError::CompletedMapFull { .. }
                | AdmitError::SeekedWhileRunning { .. }) => {
                    // Backpressure: the partition waits (this batch) for its gap to close, or
                    // for the handler a seek overtook; the record stays first in line, the
                    // other partitions go on.
                    log::debug!("{error}");
                    self.intake.push_front(tp.clone(), record);
                    self.intake.hold(&tp);
                }
                error @ (AdmitError::AlreadyCompleted { .. }
                | AdmitError::AlreadyAdmitted { .. }) => log::debug!("{error}"),
                error @ AdmitError::Duplicate { .. } => log::info!("skipped: {error}"),
                error @ AdmitError::OffsetRegression { .. } => log::error!("skipped: {error}"),
            }
        }
    }

    /// Reads the clocks again and runs the checks that need the time: what finished since the
    /// last reading goes to the sizer, the deadline (false: the batch stops), a rebalance that
    /// ends the batch (false), the paced commit; then how many records may go before the next
    /// reading.
    fn read_clock(&mut self) -> bool {
        let (completed, took) = self.clock.read(self.guard);
        self.sizer.window_processed(completed, took);
        let now = self.clock.now();
        let fitting = self.sizer.records_fitting(now);
        // Every batch hands out at least one record: an estimate inflated by one very slow
        // record must not stop batches before they start, or the consumer would livelock.
        if self.handed > 0 && fitting == 0 {
            log::info!(
                "batch stopped at its deadline after {} record(s); the rest stays for the \
                 next poll",
                self.handed
            );
            return false;
        }
        // Eager: a rebalance waits and stops everything. Cooperative: only a decided change
        // ends the batch (its handoff runs at the boundary); a rebalance in progress does not.
        // A partition fenced meanwhile admits nothing whenever this is read.
        if self.member.batch_boundary_due() {
            return false;
        }
        if self.pacer.due(now) {
            // Between two records: what finished so far goes to the commit thread, so a
            // crash from here on repeats about one interval (plus the commit's round trip)
            // of work, not the whole batch. Sending does not wait for the broker: the
            // admission after it still runs against this fresh reading.
            self.pacer.tick(self.guard, self.member, now);
        }
        self.clock.allow(fitting);
        true
    }

    /// Commits what finished so far, synchronously, without ending the batch (Java: a
    /// `commitSync` between records of one `poll`): the contiguous completed prefix of every
    /// owned partition, after the paced commit in flight was answered. As
    /// [`Consumer::commit`](super::Consumer::commit).
    pub fn commit(&mut self) -> Result<Vec<CommitOffset>, ConsumerError> {
        self.pacer.commit_now(self.guard, self.member)
    }

    /// The consumer's stats now, as [`Consumer::stats`](super::Consumer::stats).
    pub fn stats(&self) -> ConsumerStats {
        consumer_stats(
            self.guard,
            self.intake,
            self.member,
            &self.handoffs.counters,
            self.pacer,
            self.sizer,
            self.retries,
        )
    }

    /// Stops handing out records of these partitions, from this batch on (backpressure), as
    /// [`Consumer::pause`](super::Consumer::pause).
    pub fn pause(&mut self, partitions: &[TopicPartition]) {
        self.intake.pause(partitions);
    }

    /// Resumes paused partitions, as [`Consumer::resume`](super::Consumer::resume).
    pub fn resume(&mut self, partitions: &[TopicPartition]) {
        self.intake.resume(partitions);
    }

    /// Reads an owned partition from `offset` next, as [`Consumer::seek`](super::Consumer::seek):
    /// records of it already handed out by this batch at or after `offset` are taken away
    /// (their leases are not current any more; completing them does not count).
    pub fn seek(&mut self, tp: &TopicPartition, offset: i64) -> Result<(), ConsumerError> {
        self.intake.seek_owned(self.guard, tp, offset)
    }

    /// The offset of the next record of `tp` to hand out, as
    /// [`Consumer::position`](super::Consumer::position).
    pub fn position(&self, tp: &TopicPartition) -> Option<i64> {
        if !self.guard.owned().contains(tp) {
            return None;
        }
        self.intake.position(tp)
    }

    /// Partitions owned now.
    pub fn assignment(&self) -> Vec<TopicPartition> {
        self.guard.owned()
    }

    /// True while the delivery's partition is still ours under the assignment it was handed out
    /// in. A long handler checks it right before its external side effect.
    pub fn is_current(&self, delivery: &Delivery) -> bool {
        self.guard.is_current(&delivery.lease)
    }

    /// The record's side effect happened: it counts towards the committed position.
    pub fn complete(&mut self, delivery: Delivery) {
        self.settle(&delivery);
        self.complete_lease(&delivery.lease);
    }

    /// [`Batch::complete`] of a record the batch no longer tracks.
    fn complete_lease(&mut self, lease: &Lease) {
        self.clock.completed();
        match self.guard.complete(lease) {
            Ok(()) => {}
            Err(error @ CompleteError::NotCurrent { .. }) => {
                // Released, not done: it comes again before anything later of its partition.
                log::warn!("{error}");
                self.intake.redeliver_released(self.guard);
            }
            // Its partition moved while the handler ran: the work is not our progress.
            Err(error) => log::warn!("{error}"),
        }
    }

    /// The handler failed: the record will be delivered again, before anything later of its
    /// partition that this batch has not handed out yet. It is released in the guard, so nothing
    /// is committed past it, even while its partition is being revoked.
    pub fn fail(&mut self, delivery: Delivery) {
        self.settle(&delivery);
        self.fail_lease(&delivery.lease);
    }

    /// [`Batch::fail`] of a record the batch no longer tracks.
    fn fail_lease(&mut self, lease: &Lease) {
        self.release(lease);
        self.intake.redeliver_released(self.guard);
    }

    /// Hands the record to another thread (the worker pool): it stays pending in the guard (the
    /// batch no longer tracks it, so dropping the batch does not rewind it) until that thread
    /// completes it through the guard.
    ///
    /// Crate-internal: a user who could take a record out of the batch's tracking could commit
    /// past it; the pool completes or releases every record it takes.
    pub(crate) fn hand_off(&mut self, delivery: Delivery) -> (Record, Lease) {
        self.settle(&delivery);
        (delivery.record, delivery.lease)
    }

    /// Takes back a record that could not be handed off (its worker's queue was full): it is
    /// un-admitted and becomes the next record of its partition again.
    pub(crate) fn put_back(&mut self, record: Record, lease: Lease) {
        match self.guard.rewind(&lease) {
            Ok(()) => self.intake.push_front(lease.tp, record),
            Err(error) => log::warn!("{error}"),
        }
    }

    fn settle(&mut self, delivery: &Delivery) {
        let lease = &delivery.lease;
        if self.outstanding.front() == Some(lease) {
            self.outstanding.pop_front();
            return;
        }
        if let Some(at) = self.outstanding.iter().position(|l| l == lease) {
            self.outstanding.remove(at);
        }
    }

    /// Gives a handed-out record back without its effect (see `RebalanceGuard::release`).
    fn release(&self, lease: &Lease) {
        if let Err(error) = self.guard.release(lease) {
            log::warn!("{error}");
        }
    }
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        // Abandoned records are released: each comes again, and nothing is committed past it.
        let mut abandoned = std::mem::take(&mut self.outstanding);
        // A record `run` was processing when its handler panicked.
        abandoned.extend(self.in_hand.take());
        for lease in &abandoned {
            log::warn!(
                "{}: record {} was handed out but never completed; it comes again",
                lease.tp,
                lease.offset
            );
            self.release(lease);
        }
        if !abandoned.is_empty() {
            self.intake.redeliver_released(self.guard);
        }
        let (completed, took) = self.clock.close();
        self.sizer.window_processed(completed, took);
        self.sizer.end_batch();
    }
}

/// The consumer's stats from its parts: one definition for the consumer and the batch.
pub(crate) fn consumer_stats(
    guard: &Guard,
    intake: &Intake,
    member: &dyn Membership,
    counters: &RebalanceCounters,
    pacer: &CommitPacer,
    sizer: &BatchSizer,
    retries: &Retries,
) -> ConsumerStats {
    let snapshot = guard.snapshot();
    let now = Instant::now();
    ConsumerStats {
        generation_id: member.identity().generation_id,
        partitions: snapshot
            .partitions
            .iter()
            .map(|p| intake.partition_stats(p, now))
            .collect(),
        rebalances: snapshot.rebalances,
        storm: snapshot.storm,
        counters: counters.clone(),
        commits_refused: pacer.refused,
        retries: retries.retried(),
        dead_lettered: retries.dead_lettered(),
        next_batch_size: sizer.next_size(),
        per_record_estimate: sizer.estimate(),
        fetch: member.fetch_stats(),
        transactions_committed: 0,
        transactions_aborted: 0,
    }
}
