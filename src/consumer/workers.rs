//! The decoupled mode: the poll thread keeps the membership alive and admits records;
//! worker threads run the handler; the guard's completion tracking commits only the contiguous
//! completed prefix of each partition.
//!
//! Each partition is worked by one worker, in offset order (orders for one account must not
//! overtake each other); partitions are spread over the workers. Queues are bounded: when a
//! worker's queue is full, its record goes back to the intake and the poll thread waits a little,
//! so slow work turns into backpressure, never into an unbounded buffer or a missed poll.
//!
//! On revocation the partition is fenced, its queued records that have not started are
//! cancelled (they are the next owner's), and its started records are waited for, up to
//! `revoke.drain.timeout.ms` for the whole revocation; only then is the processed prefix
//! committed. A worker asks the guard before starting each record, so nothing of a revoked or
//! lost partition starts afterwards.
//!
//! A handler that fails (an error or a panic, caught on the worker) stops its partition: the
//! record is taken back out of the guard at once (so neither a commit nor a drain waits for it),
//! nothing later of that partition starts, and the run ends with the error naming the partition
//! and offset. Stopping (the stop flag, or a failure) cancels what has not started and waits for
//! what has, once, for at most `revoke.drain.timeout.ms`; cancelled and failed records come again
//! on the next run.

use std::collections::{HashMap, HashSet};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::guard::Lease;
use crate::wire::Record;
use crate::TopicPartition;

use super::batch::Batch;
use super::bridge::Drain;
use super::context::{Guard, WorkContext};
use super::error::ConsumerError;

/// What the pool needs from the consumer that feeds it: its public `poll` and `commit`, and
/// four things the public API deliberately cannot express. The consumer implements it; the pool
/// depends on this trait, never on the consumer's fields, so the dependency points one way
/// (the consumer calls [`run`], this file never names the consumer).
///
/// The crate-internal part, and why each is not public:
/// - [`guard`](WorkSource::guard): workers start, complete and rewind records through the
///   guard itself; the public [`GuardView`](super::GuardView) only reads it.
/// - [`set_drain`](WorkSource::set_drain): a revocation on the poll thread must wait for the
///   records running on the workers; only the pool knows how to wait for them.
/// - [`rewind`](WorkSource::rewind): records a worker never started must come again, in the
///   guard and in the intake at once.
/// - [`Batch::hand_off`] and [`Batch::put_back`]: a record leaves the batch's tracking for a
///   worker and, when the worker's queue is full, comes back.
pub(crate) trait WorkSource {
    /// The consumer's [`poll`](super::Consumer::poll).
    fn poll(&mut self, timeout: Duration) -> Result<Batch<'_>, ConsumerError>;
    /// The consumer's [`commit`](super::Consumer::commit), its answer reduced to success.
    fn commit(&mut self) -> Result<(), ConsumerError>;
    /// `revoke.drain.timeout.ms`: the bound on every wait for the workers.
    fn drain_timeout(&self) -> Duration;
    /// The guard the workers admit, complete and rewind their records through.
    fn guard(&self) -> Arc<Guard>;
    /// How a revocation waits for the workers (set for the run, cleared after it).
    fn set_drain(&mut self, drain: Option<Drain>);
    /// Forgets everything of `tp` from `offset` on (guard and intake) so it is fetched again.
    fn rewind(&mut self, tp: &TopicPartition, offset: i64) -> bool;
}

type Job = (Record, Lease);

/// Which worker works which partition: each partition gets the next worker in turn when first
/// seen, so partitions spread evenly (a hash could put two busy partitions on one worker while
/// another idles) and a partition always goes to the same worker (its records stay in order).
#[derive(Default)]
struct Routing {
    workers: HashMap<TopicPartition, usize>,
    next: usize,
}

impl Routing {
    fn worker_for(&mut self, partition: &TopicPartition, workers: usize) -> usize {
        if let Some(&worker) = self.workers.get(partition) {
            return worker;
        }
        let worker = self.next % workers;
        self.next += 1;
        self.workers.insert(partition.clone(), worker);
        worker
    }
}

/// What the workers tell the poll thread, and what they share with it.
struct Pool {
    /// Set when the run stops: a worker cancels every record it has not started yet.
    stopping: AtomicBool,
    /// The first failure (a handler error or panic); the run stops on it.
    failure: Mutex<Option<ConsumerError>>,
    /// Per partition, the lowest offset a worker did not start (cancelled at a stop, or after a
    /// failure of its partition): fetching resumes there.
    not_started: Mutex<HashMap<TopicPartition, i64>>,
    /// Workers still running.
    alive: Mutex<usize>,
    /// Signalled whenever a record finished or a worker exited.
    finished: Arc<(Mutex<u64>, Condvar)>,
}

impl Pool {
    fn signal(&self) {
        let (count, signal) = &*self.finished;
        *count.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        signal.notify_all();
    }

    fn not_started(&self, lease: &Lease) {
        let mut map = self.not_started.lock().unwrap_or_else(|p| p.into_inner());
        let entry = map.entry(lease.partition.clone()).or_insert(lease.offset);
        *entry = (*entry).min(lease.offset);
    }

    fn fail(&self, guard: &Guard, lease: &Lease, error: ConsumerError) {
        // The failed record and everything after it in its partition must come again, and
        // nothing from it on may be committed: take it out of the guard at once, so neither
        // the commit nor a drain waits for it.
        if let Err(e) = guard.rewind(&lease.partition, lease.offset) {
            log::warn!("{e}");
        }
        self.not_started(lease);
        log::error!("{error}");
        let mut failure = self.failure.lock().unwrap_or_else(|p| p.into_inner());
        failure.get_or_insert(error);
    }

    fn failed(&self) -> bool {
        self.failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }
}

/// The text of a panic's payload, when it is a string.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_string())
}

/// One worker thread: runs the handler on its queue's records, in order, while their partition
/// is still this member's, and stops starting records of a partition whose handler failed.
fn work<E, H>(rx: Receiver<Job>, guard: Arc<Guard>, pool: Arc<Pool>, handler: Arc<H>)
where
    H: Fn(&Record, &WorkContext<'_>) -> Result<(), E> + Send + Sync + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut failed_partitions: HashSet<TopicPartition> = HashSet::new();
    for (record, lease) in rx {
        if pool.stopping.load(Ordering::SeqCst) || failed_partitions.contains(&lease.partition) {
            pool.not_started(&lease);
        } else if guard.start(&lease) {
            let ctx = WorkContext::new(&guard, &lease);
            let outcome = panic::catch_unwind(AssertUnwindSafe(|| handler(&record, &ctx)));
            let failure = match outcome {
                Ok(Ok(())) => {
                    if let Err(error) = guard.complete(&lease) {
                        log::warn!("{error}");
                    }
                    None
                }
                Ok(Err(error)) => Some(ConsumerError::Handler {
                    partition: lease.partition.clone(),
                    offset: lease.offset,
                    error: error.into(),
                }),
                Err(payload) => Some(ConsumerError::HandlerPanicked {
                    partition: lease.partition.clone(),
                    offset: lease.offset,
                    message: panic_message(payload.as_ref()),
                }),
            };
            if let Some(error) = failure {
                failed_partitions.insert(lease.partition.clone());
                pool.fail(&guard, &lease, error);
            }
        } else {
            log::debug!(
                "{} offset {}: not started, its partition was revoked or lost",
                lease.partition,
                lease.offset
            );
        }
        pool.signal();
    }
    *pool.alive.lock().unwrap_or_else(|p| p.into_inner()) -= 1;
    pool.signal();
}

/// Runs the decoupled mode for [`Consumer::run_with_workers`](super::Consumer::run_with_workers)
/// (whose documentation says what the caller sees): starts `workers` threads, feeds them from
/// `source`'s batches until `stop` is set or a handler fails, then stops (bounded), rewinds what
/// was not started, and commits what finished.
pub(crate) fn run<S, E, H>(
    source: &mut S,
    stop: &AtomicBool,
    workers: usize,
    queue: usize,
    handler: H,
) -> Result<(), ConsumerError>
where
    S: WorkSource,
    H: Fn(&Record, &WorkContext<'_>) -> Result<(), E> + Send + Sync + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let workers = workers.max(1);
    let drain_timeout = source.drain_timeout();
    let pool = Arc::new(Pool {
        stopping: AtomicBool::new(false),
        failure: Mutex::new(None),
        not_started: Mutex::new(HashMap::new()),
        alive: Mutex::new(0),
        finished: Arc::new((Mutex::new(0u64), Condvar::new())),
    });
    source.set_drain(Some(Drain {
        finished: pool.finished.clone(),
        timeout: drain_timeout,
    }));
    let handler = Arc::new(handler);
    let mut queues: Vec<SyncSender<Job>> = Vec::with_capacity(workers);
    let mut started = Ok(());
    for index in 0..workers {
        let (tx, rx) = mpsc::sync_channel::<Job>(queue.max(1));
        let (guard, pool_ref, handler) = (source.guard(), pool.clone(), handler.clone());
        *pool.alive.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        let spawned = std::thread::Builder::new()
            .name(format!("worker-{index}"))
            .spawn(move || work(rx, guard, pool_ref, handler));
        match spawned {
            Ok(_) => queues.push(tx),
            Err(e) => {
                *pool.alive.lock().unwrap_or_else(|p| p.into_inner()) -= 1;
                started = Err(ConsumerError::Thread(e));
                break;
            }
        }
    }
    let outcome = started.and_then(|()| feed_workers(source, stop, &queues, &pool));
    // Stop: nothing more starts; wait for what is running, once, for a bounded time.
    pool.stopping.store(true, Ordering::SeqCst);
    drop(queues);
    wait_for_workers(&pool, Instant::now() + drain_timeout);
    source.set_drain(None);
    let not_started =
        std::mem::take(&mut *pool.not_started.lock().unwrap_or_else(|p| p.into_inner()));
    for (tp, offset) in not_started {
        source.rewind(&tp, offset);
    }
    // Everything the workers finished is committed, whatever stopped the run.
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
    let (lock, signal) = &*pool.finished;
    let mut seen = lock.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        let alive = *pool.alive.lock().unwrap_or_else(|p| p.into_inner());
        if alive == 0 {
            return;
        }
        let now = Instant::now();
        if now >= deadline {
            log::warn!(
                "{alive} worker(s) still running a handler after revoke.drain.timeout.ms: \
                 left to finish on their own; their records are not committed"
            );
            return;
        }
        seen = signal
            .wait_timeout(seen, deadline - now)
            .map(|(s, _)| s)
            .unwrap_or_else(|p| p.into_inner().0);
    }
}

/// The poll thread's part of the run: poll, hand each record to its partition's worker, commit;
/// a full queue puts the record back and waits a little (backpressure).
fn feed_workers<S: WorkSource>(
    source: &mut S,
    stop: &AtomicBool,
    queues: &[SyncSender<Job>],
    pool: &Pool,
) -> Result<(), ConsumerError> {
    let mut routing = Routing::default();
    while !stop.load(Ordering::SeqCst) && !pool.failed() {
        let mut backpressure = false;
        {
            let mut batch = source.poll(Duration::from_millis(100))?;
            while let Some(delivery) = batch.next() {
                let (record, lease) = batch.hand_off(delivery);
                let worker = routing.worker_for(&lease.partition, queues.len());
                match queues[worker].try_send((record, lease)) {
                    Ok(()) => {}
                    Err(TrySendError::Full((record, lease))) => {
                        batch.put_back(record, lease);
                        backpressure = true;
                        break;
                    }
                    Err(TrySendError::Disconnected((record, lease))) => {
                        batch.put_back(record, lease);
                        return Err(ConsumerError::WorkerGone { worker });
                    }
                }
            }
        }
        match source.commit() {
            Ok(()) | Err(ConsumerError::Commit(_)) => {}
            Err(other) => return Err(other),
        }
        if backpressure {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    Ok(())
}
