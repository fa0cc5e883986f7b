//! The decoupled mode (seed 004): the poll thread keeps the membership alive and admits records;
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
//! `revoke.drain.timeout.ms`; only then is the processed prefix committed. A worker asks the guard
//! before starting each record, so nothing of a revoked or lost partition starts afterwards.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::guard::Lease;
use crate::wire::Record;
use crate::TopicPartition;

use super::error::ConsumerError;
use super::poll_loop::Consumer;
use super::rebalance::{Drain, Guard};

/// What a worker's handler may ask about the record it is processing.
pub struct WorkContext<'a> {
    guard: &'a Guard,
    lease: &'a Lease,
}

impl<'a> WorkContext<'a> {
    pub(super) fn new(guard: &'a Guard, lease: &'a Lease) -> Self {
        WorkContext { guard, lease }
    }

    /// True while the record's partition is still this member's under the assignment the record
    /// was admitted in. Check it right before an external side effect of a long handler: once it
    /// is false, another member may be processing the same record.
    pub fn is_current(&self) -> bool {
        self.guard.is_current(self.lease)
    }

    /// The record's lease.
    pub fn lease(&self) -> &'a Lease {
        self.lease
    }
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

impl Consumer {
    /// Runs the decoupled mode with `workers` threads until `stop` is set or a handler fails,
    /// then drains the queues, commits, and returns (call [`close`](Consumer::close) afterwards).
    ///
    /// `queue` bounds each worker's queue. A handler error stops the run after committing the
    /// prefix before the failed record, which will be delivered again.
    pub fn run_with_workers<E, H>(
        &mut self,
        stop: &AtomicBool,
        workers: usize,
        queue: usize,
        handler: H,
    ) -> Result<(), ConsumerError>
    where
        H: Fn(&Record, &WorkContext<'_>) -> Result<(), E> + Sync,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let workers = workers.max(1);
        let finished = Arc::new((Mutex::new(0u64), Condvar::new()));
        self.drain = Some(Drain {
            finished: finished.clone(),
            timeout: self.config().revoke_drain_timeout(),
        });
        let (failed_tx, failed_rx) = mpsc::channel::<ConsumerError>();
        let guard = self.guard.clone();
        let result = std::thread::scope(|scope| {
            let mut queues: Vec<SyncSender<Job>> = Vec::with_capacity(workers);
            for index in 0..workers {
                let (tx, rx) = mpsc::sync_channel::<Job>(queue.max(1));
                queues.push(tx);
                let (guard, finished, failed_tx, handler) =
                    (guard.clone(), finished.clone(), failed_tx.clone(), &handler);
                std::thread::Builder::new()
                    .name(format!("worker-{index}"))
                    .spawn_scoped(scope, move || {
                        for (record, lease) in rx {
                            if guard.start(&lease) {
                                let ctx = WorkContext {
                                    guard: &guard,
                                    lease: &lease,
                                };
                                match handler(&record, &ctx) {
                                    Ok(()) => {
                                        if let Err(error) = guard.complete(&lease) {
                                            log::warn!("{error}");
                                        }
                                    }
                                    Err(error) => {
                                        let _ = failed_tx.send(ConsumerError::Handler {
                                            partition: lease.partition.clone(),
                                            offset: lease.offset,
                                            error: error.into(),
                                        });
                                    }
                                }
                            } else {
                                log::debug!(
                                    "{} offset {}: not started, its partition was revoked or lost",
                                    lease.partition,
                                    lease.offset
                                );
                            }
                            let (count, signal) = &*finished;
                            *count.lock().unwrap_or_else(|p| p.into_inner()) += 1;
                            signal.notify_all();
                        }
                    })
                    .map_err(ConsumerError::Thread)?;
            }
            drop(failed_tx);
            let outcome = self.feed_workers(stop, &queues, &failed_rx);
            // Stop intake; let the workers finish what is queued.
            drop(queues);
            outcome
        });
        self.drain = None;
        // Everything the workers finished is committed, whatever stopped the run.
        let committed = self.commit();
        let failure = failed_rx.try_recv().ok();
        result?;
        if let Some(failure) = failure {
            return Err(failure);
        }
        match committed {
            Ok(_) | Err(ConsumerError::Commit(_)) => Ok(()),
            Err(other) => Err(other),
        }
    }

    fn feed_workers(
        &mut self,
        stop: &AtomicBool,
        queues: &[SyncSender<Job>],
        failed: &mpsc::Receiver<ConsumerError>,
    ) -> Result<(), ConsumerError> {
        let mut routing = Routing::default();
        while !stop.load(Ordering::SeqCst) {
            if let Ok(failure) = failed.try_recv() {
                return Err(failure);
            }
            let mut backpressure = false;
            {
                let mut batch = self.poll(Duration::from_millis(100))?;
                while let Some(delivery) = batch.next() {
                    let (record, lease) = batch.hand_off(delivery);
                    let worker = routing.worker_for(&lease.partition, queues.len());
                    match queues[worker].try_send((record, lease)) {
                        Ok(()) => {}
                        Err(TrySendError::Full((record, lease)))
                        | Err(TrySendError::Disconnected((record, lease))) => {
                            batch.put_back(record, lease);
                            backpressure = true;
                            break;
                        }
                    }
                }
            }
            match self.commit() {
                Ok(_) | Err(ConsumerError::Commit(_)) => {}
                Err(other) => return Err(other),
            }
            if backpressure {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        Ok(())
    }
}
