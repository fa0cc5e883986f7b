//! The decoupled mode of the share consumer: handlers on worker threads, the poll thread
//! fetching, acknowledging and renewing beside them.
//!
//! Why simpler than the consumer group's workers: a share group promises no order, so any
//! worker may take any record, and a record's lease is its own (its lock), not its partition's,
//! so nothing waits for a drain. What stays bounded: the records this member holds
//! (`max.poll.records`, at least one per worker), because every one of them is a lock ticking at
//! the broker.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::sync_channel;
use std::sync::Mutex;
use std::time::Duration;

use log::error;

use super::consumer::ShareConsumer;
use super::context::{ShareContext, ShareDelivery, ShareFailure};
use super::error::ShareError;
use crate::basics::panic::panic_message;
use crate::wire::Record;

/// How long the poll thread waits for a worker's outcome when it holds as many records as it
/// may (it then neither fetches nor hands out).
const FULL_WAIT: Duration = Duration::from_millis(20);

impl ShareConsumer {
    /// Runs `handler` on `threads` worker threads until `stop` is set (or a fatal error, or a
    /// handler's panic), with the same outcomes as [`run`](Self::run). Records queued for a
    /// worker when `stop` is set are released, not run. Call [`close`](Self::close) after.
    pub fn run_with_workers<F>(
        &mut self,
        stop: &AtomicBool,
        threads: usize,
        handler: F,
    ) -> Result<(), ShareError>
    where
        F: Fn(&Record, &ShareContext) -> Result<(), ShareFailure> + Sync,
    {
        let threads = threads.max(1);
        // How many records this member holds (acquired, queued or running): every one is a
        // lock ticking at the broker.
        let cap = self.config.consumer().max_poll_records().max(threads);
        // How many of them wait in the workers' queue: two per worker keeps every worker busy,
        // and the rest stay in the buffer, where a record whose lease ran out is released
        // without a worker ever seeing it.
        let queued_cap = (threads * 2).min(cap);
        // Each fetch acquires about what the workers start next; every record acquired and not
        // started is a lock running out (and a delivery spent when it does).
        self.set_records_per_fetch(queued_cap);
        let (work_tx, work_rx) = sync_channel::<ShareDelivery>(cap);
        let work_rx = Mutex::new(work_rx);
        let panicked: Mutex<Option<String>> = Mutex::new(None);
        // A finished record wakes the poll thread out of its fetch wait: the outcome is drained
        // and the worker fed at once, not after the broker's long poll.
        let wake = self.fetcher.as_ref().and_then(|fetcher| fetcher.nudge());
        let result = std::thread::scope(|scope| {
            // Owned by this closure, so that every way out of it (an early error included)
            // closes the queue before the scope joins the workers.
            let work_tx = work_tx;
            for index in 0..threads {
                let (work_rx, panicked, handler, wake) = (&work_rx, &panicked, &handler, &wake);
                let spawned = std::thread::Builder::new()
                    .name(format!("share-worker-{index}"))
                    .spawn_scoped(scope, move || loop {
                        let next = match work_rx.lock() {
                            Ok(rx) => rx.recv(),
                            Err(_) => return,
                        };
                        let Ok(delivery) = next else { return };
                        if stop.load(Ordering::Relaxed) {
                            delivery.skipped();
                            continue;
                        }
                        let run = catch_unwind(AssertUnwindSafe(|| {
                            handler(delivery.record(), delivery.context())
                        }));
                        match run {
                            Ok(result) => delivery.finish_with(&result),
                            Err(panic) => {
                                let message = panic_message(panic.as_ref())
                                    .unwrap_or_else(|| "(no message)".to_string());
                                error!("share worker {index}: handler panicked: {message}");
                                delivery.skipped();
                                if let Ok(mut slot) = panicked.lock() {
                                    slot.get_or_insert(message);
                                }
                            }
                        }
                        if let Some(wake) = wake {
                            wake();
                        }
                    });
                if let Err(e) = spawned {
                    return Err(ShareError::Group(crate::group::GroupError::Thread(e)));
                }
            }
            let result = loop {
                if stop.load(Ordering::Relaxed) {
                    break Ok(());
                }
                if let Some(message) = panicked.lock().ok().and_then(|mut s| s.take()) {
                    break Err(ShareError::HandlerPanicked { message });
                }
                while self.outstanding < queued_cap && self.buffered() > 0 {
                    for delivery in self.hand_out(1) {
                        // The channel holds `cap` and at most `queued_cap` are outstanding:
                        // never full.
                        if work_tx.try_send(delivery).is_err() {
                            break;
                        }
                    }
                }
                let room = self.buffered() < threads && self.outstanding + self.buffered() < cap;
                if let Err(e) = self.turn(room) {
                    break Err(e);
                }
                if !room {
                    // Everything this member may hold is held: wait for a worker's outcome.
                    self.wait_finished(FULL_WAIT);
                }
            };
            drop(work_tx);
            result
        });
        self.drain_finished();
        let per_poll = self.config.consumer().max_poll_records();
        self.set_records_per_fetch(per_poll);
        result
    }
}
