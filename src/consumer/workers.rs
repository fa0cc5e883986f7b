//! The decoupled mode: the poll thread keeps the membership alive and admits records;
//! worker threads run the handler; the guard's completion tracking commits only the contiguous
//! completed prefix of each partition.
//!
//! Which worker runs a record depends on `processing.order`:
//! - `partition` (the default): each partition is worked by one worker, in offset order (orders
//!   for one account must not overtake each other); partitions are spread over the workers. The
//!   worker is chosen again when the partition is assigned again, so a handler that never
//!   returns holds up only its own assignment, not the next one.
//! - `key`: records of one partition with the same Kafka key go to the same worker while any of
//!   them is in flight (so they run in offset order); a key with nothing in flight goes to the
//!   least loaded worker, so one slow key holds up only its own later records, not the other
//!   keys of its partition.
//! - `unordered`: every record goes to the least loaded worker.
//!
//! Outside partition order, `processing.max.in.flight.per.partition` bounds one partition's
//! records queued or running at once. Whatever the order, the guard commits only the contiguous
//! completed prefix, and what finished beyond it travels in the commit's completed-offsets map.
//! Queues are bounded: when a worker's queue is full (or a partition has its bound in flight),
//! its record goes back to the intake and the poll thread waits a little, so slow work turns into
//! backpressure, never into an unbounded buffer or a missed poll.
//!
//! The poll thread commits what finished at most every `commit.interval.ms` while records flow
//! (handed to the commit thread between hand-offs, one in flight at a time, never waited for),
//! so a crash or a freeze of this member redoes about that much work plus one commit round
//! trip; a refused commit is logged and counted, and the next one retries.
//!
//! On revocation the partition is fenced, its queued records that have not started are
//! cancelled (they are the next owner's), and its started records are waited for, up to
//! `revoke.drain.timeout.ms` for the whole revocation; only then is the processed prefix
//! committed. A worker asks the guard before starting each record, so nothing of a revoked or
//! lost partition starts afterwards.
//!
//! A handler error goes through the failure policy first (`retry.rs`): with retries left the
//! record is released and comes again after its backoff (its partition held back on the poll
//! thread, no worker waiting), and past them the dead-letter callback may take it. A handler
//! that fails for good (a panic, caught on the worker, or an error the policy gives up on)
//! stops its partition: the
//! record is released in the guard at once (so neither a commit nor a drain waits for it, and
//! the position can never pass it, whatever enters the guard after it), nothing later of that
//! partition starts (each is released too), and the run ends with the error naming the
//! partition and offset. Stopping (the stop flag, or a failure) releases what has not started
//! and waits for what has, once, for at most `revoke.drain.timeout.ms`. Released records come
//! again: the next poll reads their partitions again from the lowest of them.

use std::collections::HashSet;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::basics::panic::panic_message;
use crate::guard::Lease;
use crate::producer::ProducerRecord;
use crate::wire::ErrorChain;
use crate::wire::Record;
use crate::TopicPartition;

use super::batch::Batch;
use super::config::{ConsumerConfig, ProcessingOrder};
use super::context::{Guard, WorkContext};
use super::dispatch::{Dispatch, Inbox, Parking, Refused};
use super::error::ConsumerError;
use super::handoff::{Drain, Finished};
use super::retry::{self, Retries, Settled};
use super::wake::Waker;

/// What the pool needs from the consumer that feeds it: its public `poll` and `commit`, and
/// three things the public API deliberately cannot express. The consumer implements it; the pool
/// depends on this trait, never on the consumer's fields, so the dependency points one way
/// (the consumer calls [`run`], this file never names the consumer).
///
/// The crate-internal part, and why each is not public:
/// - [`guard`](WorkSource::guard): workers start, complete and release records through the
///   guard itself; the public [`GuardView`](super::GuardView) only reads it.
/// - [`set_drain`](WorkSource::set_drain): a revocation on the poll thread must wait for the
///   records running on the workers; only the pool knows how to wait for them.
/// - [`Batch::hand_off`] and [`Batch::put_back`]: a record leaves the batch's tracking for a
///   worker and, when the worker's queue is full, comes back.
pub(crate) trait WorkSource {
    /// The consumer's [`poll`](super::Consumer::poll).
    fn poll(&mut self, timeout: Duration) -> Result<Batch<'_>, ConsumerError>;
    /// The consumer's [`commit`](super::Consumer::commit), its answer reduced to success.
    fn commit(&mut self) -> Result<(), ConsumerError>;
    /// A commit of what finished when `commit.interval.ms` has passed since the last one (a
    /// refusal is logged and counted, and the next interval commits again).
    fn commit_if_due(&mut self);
    /// `revoke.drain.timeout.ms`: the bound on every wait for the workers.
    fn drain_timeout(&self) -> Duration;
    /// The guard the workers start, complete and release their records through.
    fn guard(&self) -> Arc<Guard>;
    /// How a revocation waits for the workers (set for the run, cleared after it).
    fn set_drain(&mut self, drain: Option<Drain>);
    /// The consumer's configuration: `processing.order` and its per-partition bound.
    fn settings(&self) -> &ConsumerConfig;
    /// The failure policy the workers apply to a failed record (`processing.retries`, the
    /// dead-letter callback), shared with the poll thread, which holds back the partitions of
    /// the records waiting for a retry.
    fn retries(&self) -> Arc<Retries>;
    /// The consumer's [`Waker`]: a worker's failure ends the poll thread's blocked poll, so the
    /// run stops at once instead of after the fetch's wait.
    fn waker(&self) -> Waker;
}

/// What the workers tell the poll thread, and what they share with it.
struct Pool {
    /// Set when the run stops: a worker cancels every record it has not started yet.
    stopping: AtomicBool,
    /// The first failure (a handler error or panic); the run stops on it.
    failure: Mutex<Option<ConsumerError>>,
    /// Workers still running.
    alive: Mutex<usize>,
    /// Signalled whenever a record finished or a worker exited.
    finished: Arc<Finished>,
    /// Outside partition order: what is in flight per partition, and the parked records.
    parking: Arc<Parking>,
    /// Partitions whose handler failed: no worker starts any later record of them (outside
    /// partition order their records are spread over several workers).
    failed_partitions: Mutex<HashSet<TopicPartition>>,
    /// Set once `failed_partitions` is not empty, so the common case reads one atomic.
    any_failed: AtomicBool,
    /// Ends the poll thread's blocked poll when the run must stop (a failure).
    waker: Waker,
}

impl Pool {
    fn partition_failed(&self, partition: &TopicPartition) -> bool {
        self.any_failed.load(Ordering::Acquire)
            && self
                .failed_partitions
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(partition)
    }

    fn signal(&self) {
        self.finished.signal();
    }

    /// A record no worker will start (the run is stopping, or its partition failed): released,
    /// so it comes again and the position never passes it. A lease of an earlier assignment
    /// changes nothing (the partition moved; its next owner reads it).
    fn not_started(guard: &Guard, lease: &Lease) {
        if let Err(e) = guard.release(lease) {
            log::debug!("not started, and not released: {e}");
        }
    }

    fn fail(&self, guard: &Guard, lease: &Lease, error: ConsumerError) {
        self.failed_partitions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(lease.tp.clone());
        self.any_failed.store(true, Ordering::Release);
        // The failed record must come again, and nothing from it on may be committed: release
        // it at once (neither the commit nor a drain waits for it, and the position stays below
        // it whatever enters the guard after it). Tied to the lease's assignment: a stale
        // worker's failure cannot touch a later one.
        if let Err(e) = guard.release(lease) {
            log::warn!("{e}");
        }
        log::error!("{}", ErrorChain(&error));
        self.failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(error);
        // The poll thread may be blocked in a fetch: the run stops now, not after it.
        self.waker.wake();
    }

    fn failed(&self) -> bool {
        self.failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }
}

/// How a finished record counts as finished: by default the guard's `complete`; in the
/// transactional mode its outputs go into the open transaction and the record completes under
/// one lock, so that no commit can fall between the two (`transactions.rs`). A record that
/// cannot finish this way fails the run with the error.
pub(crate) type Finish =
    Arc<dyn Fn(&Lease, &mut Vec<ProducerRecord>) -> Result<(), ConsumerError> + Send + Sync>;

/// What one worker needs to run records.
struct Worker<H> {
    order: ProcessingOrder,
    guard: Arc<Guard>,
    retries: Arc<Retries>,
    pool: Arc<Pool>,
    handler: Arc<H>,
    finish: Option<Finish>,
}

/// One worker thread: runs the handler on its queue's records, in order, while their partition
/// is still this member's, and stops starting records of a partition whose handler failed.
fn work<E, H>(inbox: Inbox, worker: Worker<H>)
where
    H: WorkerHandler<E>,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let Worker {
        order,
        guard,
        retries,
        pool,
        handler,
        finish,
    } = worker;
    let mut outputs = Vec::new();
    while let Some((record, lease)) = inbox.recv(&pool.parking) {
        let ran = Ran {
            guard: &guard,
            retries: &retries,
            pool: &pool,
            finish: finish.as_ref(),
        };
        run_one(&record, &lease, &ran, &*handler, &mut outputs);
        inbox.done(&pool.parking, order, &lease, &record);
        pool.signal();
    }
    *pool.alive.lock().unwrap_or_else(|p| p.into_inner()) -= 1;
    pool.signal();
}

/// Runs one record's handler, if its partition is still ours and nothing of it failed, under
/// the failure policy (`retry.rs`): a failure with retries left releases the record (it comes
/// again after its backoff), a record past its retries is dead-lettered or stops the run.
fn run_one<E, H>(
    record: &Record,
    lease: &Lease,
    ran: &Ran<'_>,
    handler: &H,
    outputs: &mut Vec<ProducerRecord>,
) where
    H: WorkerHandler<E>,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (guard, pool) = (ran.guard, ran.pool);
    if pool.stopping.load(Ordering::SeqCst) || pool.partition_failed(&lease.tp) {
        Pool::not_started(guard, lease);
        return;
    }
    outputs.clear();
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
        retry::handle(
            ran.retries,
            guard,
            record,
            lease,
            || guard.start(lease),
            |record: &Record, context: &WorkContext<'_>| {
                // A try that failed leaves no outputs for the next one.
                outputs.clear();
                handler(record, context, &mut *outputs)
            },
        )
    }));
    match outcome {
        Ok(Some(Settled::Complete)) => match ran.finish {
            None => {
                if let Err(error) = guard.complete(lease) {
                    log::warn!("{error}");
                }
            }
            Some(finish) => {
                if let Err(error) = finish(lease, outputs) {
                    pool.fail(guard, lease, error);
                }
            }
        },
        Ok(Some(Settled::Release)) => Pool::not_started(guard, lease),
        Ok(Some(Settled::Stop(error))) => pool.fail(guard, lease, error),
        Ok(None) => log::debug!(
            "{} offset {}: not started, its partition was revoked or lost",
            lease.tp,
            lease.offset
        ),
        Err(payload) => pool.fail(
            guard,
            lease,
            ConsumerError::HandlerPanicked {
                tp: lease.tp.clone(),
                offset: lease.offset,
                message: panic_message(payload.as_ref())
                    .unwrap_or_else(|| "(no message)".to_string()),
            },
        ),
    }
}

/// What a worker runs a record with: the application's handler, given where its outputs go
/// (ignored outside the transactional mode).
pub(crate) trait WorkerHandler<E>:
    Fn(&Record, &WorkContext<'_>, &mut Vec<ProducerRecord>) -> Result<(), E> + Send + Sync + 'static
{
}

impl<E, H> WorkerHandler<E> for H where
    H: Fn(&Record, &WorkContext<'_>, &mut Vec<ProducerRecord>) -> Result<(), E>
        + Send
        + Sync
        + 'static
{
}

/// What `run_one` needs besides the record and the handler.
struct Ran<'a> {
    guard: &'a Guard,
    retries: &'a Retries,
    pool: &'a Pool,
    finish: Option<&'a Finish>,
}

/// Runs the decoupled mode for [`Consumer::run_with_workers`](super::Consumer::run_with_workers)
/// (whose documentation says what the caller sees): starts `workers` threads, feeds them from
/// `source`'s batches until `stop` is set or a handler fails, then stops (bounded), releases
/// what was not started, and commits what finished.
pub(crate) fn run<S, E, H>(
    source: &mut S,
    stop: &AtomicBool,
    workers: usize,
    queue: usize,
    handler: H,
    finish: Option<Finish>,
) -> Result<(), ConsumerError>
where
    S: WorkSource,
    H: WorkerHandler<E>,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let workers = workers.max(1);
    let drain_timeout = source.drain_timeout();
    let settings = source.settings();
    let order = settings.processing_order();
    let (mut dispatch, inboxes, parking) = Dispatch::new(
        order,
        settings.max_in_flight_per_partition(),
        workers,
        queue.max(1),
    );
    let pool = Arc::new(Pool {
        stopping: AtomicBool::new(false),
        failure: Mutex::new(None),
        alive: Mutex::new(0),
        finished: Arc::new(Finished::default()),
        parking,
        failed_partitions: Mutex::new(HashSet::new()),
        any_failed: AtomicBool::new(false),
        waker: source.waker(),
    });
    source.set_drain(Some(Drain {
        finished: pool.finished.clone(),
        timeout: drain_timeout,
    }));
    let handler = Arc::new(handler);
    let mut started = Ok(());
    for (index, inbox) in inboxes.into_iter().enumerate() {
        let worker = Worker {
            order,
            guard: source.guard(),
            retries: source.retries(),
            pool: pool.clone(),
            handler: handler.clone(),
            finish: finish.clone(),
        };
        *pool.alive.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        let spawned = std::thread::Builder::new()
            .name(format!("worker-{index}"))
            .spawn(move || work(inbox, worker));
        if let Err(e) = spawned {
            *pool.alive.lock().unwrap_or_else(|p| p.into_inner()) -= 1;
            started = Err(ConsumerError::Thread(e));
            break;
        }
    }
    let outcome = started.and_then(|()| feed_workers(source, stop, &mut dispatch, &pool));
    // Stop: nothing more starts; wait for what is running, once, for a bounded time.
    pool.stopping.store(true, Ordering::SeqCst);
    dispatch.close();
    wait_for_workers(&pool, Instant::now() + drain_timeout);
    let guard = source.guard();
    for (_, lease) in pool.parking.take_parked() {
        Pool::not_started(&guard, &lease);
    }
    source.set_drain(None);
    // Everything the workers finished is committed, whatever stopped the run; what they did not
    // start was released and is read again by the next poll.
    let committed = source.commit();
    let failure = pool
        .failure
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
    outcome?;
    if let Some(failure) = failure {
        return Err(failure);
    }
    match committed {
        Ok(()) | Err(ConsumerError::Commit(_)) => Ok(()),
        Err(other) => Err(other),
    }
}

/// Waits until every worker exited or `deadline` passed.
fn wait_for_workers(pool: &Pool, deadline: Instant) {
    let mut alive = 0;
    if !pool.finished.wait_until(deadline, || {
        alive = *pool.alive.lock().unwrap_or_else(|p| p.into_inner());
        alive == 0
    }) {
        log::warn!(
            "{alive} worker(s) still running a handler after revoke.drain.timeout.ms: \
             left to finish on their own; their records are not committed"
        );
    }
}

/// The poll thread's part of the run: poll, hand each record to its worker, commit at most every
/// `commit.interval.ms` (during the hand-offs as well as between polls); a full queue or a
/// partition at its in-flight bound puts the record back and waits a little (backpressure).
fn feed_workers<S: WorkSource>(
    source: &mut S,
    stop: &AtomicBool,
    dispatch: &mut Dispatch,
    pool: &Pool,
) -> Result<(), ConsumerError> {
    let poll_wait = source.settings().fetch_config().max_wait;
    while !stop.load(Ordering::SeqCst) && !pool.failed() {
        let mut backpressure = false;
        {
            // No periodic check: a worker's failure wakes this poll (as the application's
            // `Waker` does after setting `stop`); otherwise it returns within the fetch's wait.
            let mut batch = source.poll(poll_wait)?;
            while let Some(delivery) = batch.next() {
                match dispatch.send(batch.hand_off(delivery)) {
                    Ok(()) => {}
                    Err(Refused::Busy(job)) => {
                        let (record, lease) = *job;
                        batch.put_back(record, lease);
                        backpressure = true;
                        break;
                    }
                    Err(Refused::Gone(job, worker)) => {
                        let (record, lease) = *job;
                        batch.put_back(record, lease);
                        return Err(ConsumerError::WorkerGone { worker });
                    }
                }
            }
        }
        source.commit_if_due();
        if backpressure {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    Ok(())
}
