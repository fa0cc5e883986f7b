//! Which worker runs a record, by `processing.order`, and the queues between the poll thread and
//! the workers.
//!
//! - `partition`: each partition has its own worker for an assignment of it (its epoch), chosen
//!   in turn when the assignment is first seen, an idle worker first (a hash could put two busy
//!   partitions on one worker while another idles), with a bounded queue per worker: a
//!   partition's records run one at a time, in offset order.
//! - `unordered`: one queue shared by every worker, so a record waits only for a free worker,
//!   never behind a slow record that happened to be queued before it.
//! - `key`: the shared queue too, but a record whose key (within its partition) already has a
//!   record queued or running is parked until that one is done, then released to the queue by
//!   the worker that finished it: the records of one key run one at a time in offset order, and
//!   a slow key holds up only its own later records.
//!
//! Outside partition order, `processing.max.in.flight.per.partition` bounds what one partition
//! has queued, parked or running, and the shared queue holds at most `workers × queue` records;
//! either limit turns into backpressure on the poll thread (the record goes back to the intake).
//!
//! Everything is accounted per assignment epoch (the lease's): a handler that never returns
//! keeps its worker, but nothing of a later assignment of its partition. Without that, a
//! partition that came back (revoked or lost, then assigned again) while a handler of it hung
//! stayed at its in-flight bound, or parked its key behind the hung record, or stayed bound to
//! the hung worker whose queue never drains: Busy forever. The records of an earlier epoch are
//! never started (the guard refuses them), so a new epoch owes them no order.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use crate::guard::Lease;
use crate::wire::Record;
use crate::TopicPartition;

use super::config::ProcessingOrder;

/// A record handed to the workers, with the lease it was admitted under.
pub(crate) type Job = (Record, Lease);

/// A record's ordering unit in key order: its partition, the assignment epoch it was admitted
/// under, and its Kafka key (no key is a key too: records without one are ordered with each
/// other).
type KeySlot = (TopicPartition, u64, Option<Bytes>);

fn key_slot(record: &Record, lease: &Lease) -> KeySlot {
    (lease.tp.clone(), lease.epoch, record.key.clone())
}

/// Why a record could not be handed to a worker now; the record comes back with it.
pub(crate) enum Refused {
    /// The worker's queue (or the shared queue) is full, or the record's partition has its
    /// bound in flight: put it back and wait a little.
    Busy(Box<Job>),
    /// The worker (or every worker) is gone.
    Gone(Box<Job>, usize),
}

/// Where a worker takes its records from.
pub(crate) enum Inbox {
    /// Partition order: the worker's own queue, and its load (records queued to it or running
    /// on it), which the poll thread reads to prefer an idle worker for a new assignment.
    Own(Receiver<Job>, Arc<AtomicUsize>),
    /// Key order and unordered: the queue shared by every worker.
    Shared(Arc<Mutex<Receiver<Job>>>),
}

impl Inbox {
    /// The next record, or `None` once the poll thread closed the queues and they are empty.
    pub(crate) fn recv(&self, parking: &Parking) -> Option<Job> {
        match self {
            Inbox::Own(rx, _) => rx.recv().ok(),
            Inbox::Shared(rx) => {
                let job = rx.lock().unwrap_or_else(|p| p.into_inner()).recv().ok();
                if job.is_some() {
                    parking.queued.fetch_sub(1, Ordering::Relaxed);
                }
                job
            }
        }
    }

    /// The worker is done with a record it took from this inbox (whatever happened to it):
    /// the partition's in-flight count and key slot, or the worker's load, are given back.
    pub(crate) fn done(
        &self,
        parking: &Parking,
        order: ProcessingOrder,
        lease: &Lease,
        record: &Record,
    ) {
        match self {
            Inbox::Own(_, load) => {
                load.fetch_sub(1, Ordering::Relaxed);
            }
            Inbox::Shared(_) => parking.done(order, lease, record),
        }
    }
}

/// One partition's records in flight under one assignment epoch.
#[derive(Clone, Copy, Debug, Default)]
struct Slots {
    epoch: u64,
    count: usize,
}

/// What is in flight outside partition order, shared by the poll thread and the workers.
#[derive(Default)]
struct InFlight {
    /// Per partition: records queued, parked or running under its latest epoch seen. Entries
    /// stay at zero (one per partition ever seen), so that an epoch is never forgotten.
    partitions: HashMap<TopicPartition, Slots>,
    /// Key order: the keys with a record queued or running, each with its parked successors.
    keys: HashMap<KeySlot, VecDeque<Job>>,
}

impl InFlight {
    /// What the partition has in flight for a record admitted under `epoch`, `None` for a record
    /// of an earlier epoch than the latest seen (it is never started, and counts for nothing). A
    /// later epoch starts from nothing: what a handler of an earlier one still holds (it may
    /// never return) is forgotten, and so are its parked records (never started, and no longer
    /// startable: the guard refuses to start a lease of an earlier epoch).
    fn in_flight(&mut self, tp: &TopicPartition, epoch: u64) -> Option<usize> {
        let slots = self.partitions.entry(tp.clone()).or_default();
        if epoch < slots.epoch {
            return None;
        }
        if epoch > slots.epoch {
            *slots = Slots { epoch, count: 0 };
            self.keys
                .retain(|(partition, slot_epoch, _), _| partition != tp || *slot_epoch >= epoch);
        }
        Some(slots.count)
    }

    /// One more in flight for the partition, under the epoch [`in_flight`](Self::in_flight)
    /// just accepted (under the same lock).
    fn add(&mut self, tp: &TopicPartition) {
        if let Some(slots) = self.partitions.get_mut(tp) {
            slots.count += 1;
        }
    }
}

/// The state the workers share with the poll thread outside partition order.
#[derive(Default)]
pub(crate) struct Parking {
    in_flight: Mutex<InFlight>,
    /// Records in the shared queue.
    queued: AtomicUsize,
    /// The shared queue's sender, for a worker releasing a parked record; taken at the stop so
    /// that the queue closes.
    release: Mutex<Option<Sender<Job>>>,
}

impl Parking {
    /// A worker is done with a record of the shared queue (whatever happened to it): the
    /// partition has one less in flight under the record's epoch, and in key order the key's
    /// next parked record goes to the shared queue. A record of an earlier epoch than its
    /// partition's latest gives back nothing: the later epoch never counted it.
    pub(crate) fn done(&self, order: ProcessingOrder, lease: &Lease, record: &Record) {
        if order == ProcessingOrder::Partition {
            return;
        }
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        match in_flight.partitions.get_mut(&lease.tp) {
            Some(slots) if slots.epoch == lease.epoch => {
                slots.count = slots.count.saturating_sub(1);
            }
            _ => return,
        }
        if order != ProcessingOrder::Key {
            return;
        }
        let slot = key_slot(record, lease);
        let Some(parked) = in_flight.keys.get_mut(&slot) else {
            return;
        };
        let Some(next) = parked.pop_front() else {
            in_flight.keys.remove(&slot);
            return;
        };
        let release = self.release.lock().unwrap_or_else(|p| p.into_inner());
        match release.as_ref() {
            Some(tx) => {
                self.queued.fetch_add(1, Ordering::Relaxed);
                if let Err(mpsc::SendError(job)) = tx.send(next) {
                    self.queued.fetch_sub(1, Ordering::Relaxed);
                    parked.push_front(job);
                }
            }
            // Stopping: it stays parked, and the stop takes it back as not started.
            None => parked.push_front(next),
        }
    }

    /// Stopping: every parked record, never started (they come again on the next run).
    pub(crate) fn take_parked(&self) -> Vec<Job> {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        in_flight
            .keys
            .drain()
            .flat_map(|(_, parked)| parked)
            .collect()
    }
}

/// The poll thread's end of the queues.
pub(crate) struct Dispatch {
    order: ProcessingOrder,
    per_partition: usize,
    capacity: usize,
    queues: Queues,
    parking: Arc<Parking>,
    /// Partition order: which worker works which partition, and for which epoch of it.
    workers: HashMap<TopicPartition, (u64, usize)>,
    next: usize,
}

enum Queues {
    /// Partition order: each worker's queue and load (see [`Inbox::Own`]).
    PerWorker(Vec<(SyncSender<Job>, Arc<AtomicUsize>)>),
    Shared(Option<Sender<Job>>),
}

/// The worker for a new assignment of a partition: the first idle one from `next` on (in turn,
/// so that partitions spread), else the least loaded (a hung handler keeps its worker's load
/// above zero, so a partition coming back avoids it while another worker can take it).
fn choose_worker(loads: &[(SyncSender<Job>, Arc<AtomicUsize>)], next: usize) -> usize {
    let n = loads.len().max(1);
    (0..n)
        .map(|i| (next + i) % n)
        .min_by_key(|&w| loads.get(w).map_or(0, |(_, l)| l.load(Ordering::Relaxed)))
        .unwrap_or(0)
}

impl Dispatch {
    /// The queues for `workers` workers of `queue` records each, and each worker's inbox.
    pub(crate) fn new(
        order: ProcessingOrder,
        per_partition: usize,
        workers: usize,
        queue: usize,
    ) -> (Self, Vec<Inbox>, Arc<Parking>) {
        let parking = Arc::new(Parking::default());
        let (queues, inboxes) = if order == ProcessingOrder::Partition {
            let (senders, inboxes) = (0..workers)
                .map(|_| {
                    let (tx, rx) = mpsc::sync_channel::<Job>(queue);
                    let load = Arc::new(AtomicUsize::new(0));
                    ((tx, load.clone()), Inbox::Own(rx, load))
                })
                .unzip();
            (Queues::PerWorker(senders), inboxes)
        } else {
            let (tx, rx) = mpsc::channel::<Job>();
            *parking.release.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx.clone());
            let rx = Arc::new(Mutex::new(rx));
            let inboxes = (0..workers).map(|_| Inbox::Shared(rx.clone())).collect();
            (Queues::Shared(Some(tx)), inboxes)
        };
        let dispatch = Dispatch {
            order,
            per_partition,
            capacity: workers.saturating_mul(queue),
            queues,
            parking: parking.clone(),
            workers: HashMap::new(),
            next: 0,
        };
        (dispatch, inboxes, parking)
    }

    /// Hands a record to its worker (or parks it behind its key), or gives it back.
    pub(crate) fn send(&mut self, job: Job) -> Result<(), Refused> {
        match &self.queues {
            Queues::PerWorker(senders) => {
                let (tp, epoch) = (&job.1.tp, job.1.epoch);
                let worker = match self.workers.get(tp) {
                    // This assignment's worker (a record of an earlier one, never started, goes
                    // there too).
                    Some(&(seen, worker)) if seen >= epoch => worker,
                    // A new assignment: its worker is chosen anew, so a handler of the previous
                    // one that never returns does not hold this one up.
                    _ => {
                        let worker = choose_worker(senders, self.next);
                        self.next = worker + 1;
                        self.workers.insert(tp.clone(), (epoch, worker));
                        worker
                    }
                };
                let Some((tx, load)) = senders.get(worker) else {
                    return Err(Refused::Gone(Box::new(job), worker));
                };
                // Counted before the send: the worker may finish it before `try_send` returns.
                load.fetch_add(1, Ordering::Relaxed);
                tx.try_send(job).map_err(|e| {
                    load.fetch_sub(1, Ordering::Relaxed);
                    match e {
                        TrySendError::Full(job) => Refused::Busy(Box::new(job)),
                        TrySendError::Disconnected(job) => Refused::Gone(Box::new(job), worker),
                    }
                })
            }
            Queues::Shared(None) => Err(Refused::Gone(Box::new(job), 0)),
            Queues::Shared(Some(tx)) => {
                let parking = &*self.parking;
                let mut in_flight = parking.in_flight.lock().unwrap_or_else(|p| p.into_inner());
                let tp = job.1.tp.clone();
                let Some(count) = in_flight.in_flight(&tp, job.1.epoch) else {
                    // Of an earlier epoch: never started, so it counts for nothing and parks
                    // behind nothing; the worker that takes it gives it back as not started.
                    return Self::enqueue(parking, tx, self.capacity, job);
                };
                if count >= self.per_partition {
                    return Err(Refused::Busy(Box::new(job)));
                }
                let slot = (self.order == ProcessingOrder::Key).then(|| key_slot(&job.0, &job.1));
                if let Some(parked) = slot.as_ref().and_then(|s| in_flight.keys.get_mut(s)) {
                    parked.push_back(job);
                } else {
                    Self::enqueue(parking, tx, self.capacity, job)?;
                    if let Some(slot) = slot {
                        in_flight.keys.insert(slot, VecDeque::new());
                    }
                }
                in_flight.add(&tp);
                Ok(())
            }
        }
    }

    /// Into the shared queue, unless it holds its capacity.
    fn enqueue(
        parking: &Parking,
        tx: &Sender<Job>,
        capacity: usize,
        job: Job,
    ) -> Result<(), Refused> {
        if parking.queued.load(Ordering::Relaxed) >= capacity {
            return Err(Refused::Busy(Box::new(job)));
        }
        parking.queued.fetch_add(1, Ordering::Relaxed);
        tx.send(job).map_err(|mpsc::SendError(job)| {
            parking.queued.fetch_sub(1, Ordering::Relaxed);
            Refused::Gone(Box::new(job), 0)
        })
    }

    /// Closes the queues: the workers finish (or cancel) what is queued and exit.
    pub(crate) fn close(&mut self) {
        match &mut self.queues {
            Queues::PerWorker(senders) => senders.clear(),
            Queues::Shared(tx) => {
                tx.take();
                self.parking
                    .release
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(offset: i64, key: &'static [u8]) -> Job {
        let tp = TopicPartition::new("orders", 0);
        let record = Record {
            topic: "orders".into(),
            partition: 0,
            offset,
            timestamp: 0,
            timestamp_type: crate::wire::TimestampType::CreateTime,
            key: Some(Bytes::from_static(key)),
            value: None,
            headers: Vec::new(),
        };
        let lease = Lease {
            tp,
            offset,
            epoch: 1,
            fencing_token: 1,
        };
        (record, lease)
    }

    /// `job` of partition `partition`, admitted under assignment `epoch`.
    fn job_at(partition: i32, epoch: u64, offset: i64, key: &'static [u8]) -> Job {
        let (mut record, mut lease) = job(offset, key);
        record.partition = partition;
        lease.tp = TopicPartition::new("orders", partition);
        lease.epoch = epoch;
        (record, lease)
    }

    /// The offsets waiting in a worker's own queue (partition order), taken out.
    fn own_offsets(inbox: &Inbox) -> Vec<i64> {
        let Inbox::Own(rx, ..) = inbox else {
            panic!("own")
        };
        rx.try_iter().map(|job| job.1.offset).collect()
    }

    fn offsets(inbox: &Inbox, parking: &Parking) -> Vec<i64> {
        let Inbox::Shared(rx) = inbox else {
            panic!("shared")
        };
        let mut out = Vec::new();
        while let Ok(job) = rx.lock().unwrap().try_recv() {
            parking.queued.fetch_sub(1, Ordering::Relaxed);
            out.push(job.1.offset);
        }
        out
    }

    #[test]
    fn in_key_order_a_key_with_a_record_in_flight_waits_and_other_keys_go_past_it() {
        let (mut dispatch, inboxes, parking) = Dispatch::new(ProcessingOrder::Key, 64, 2, 8);
        for (offset, key) in [(1, b"slow"), (2, b"slow"), (3, b"fast"), (4, b"slow")] {
            assert!(dispatch.send(job(offset, key)).is_ok());
        }
        assert_eq!(offsets(&inboxes[0], &parking), [1, 3], "2 and 4 wait for 1");
        let (record, lease) = job(1, b"slow");
        parking.done(ProcessingOrder::Key, &lease, &record);
        assert_eq!(offsets(&inboxes[0], &parking), [2], "released in order");
        parking.done(ProcessingOrder::Key, &job(2, b"slow").1, &job(2, b"slow").0);
        assert_eq!(offsets(&inboxes[0], &parking), [4]);
    }

    #[test]
    fn a_partition_at_its_bound_in_flight_is_refused_until_a_record_is_done() {
        let (mut dispatch, inboxes, parking) = Dispatch::new(ProcessingOrder::Unordered, 2, 2, 8);
        assert!(dispatch.send(job(1, b"a")).is_ok());
        assert!(dispatch.send(job(2, b"b")).is_ok());
        assert!(matches!(dispatch.send(job(3, b"c")), Err(Refused::Busy(_))));
        assert_eq!(offsets(&inboxes[1], &parking), [1, 2]);
        parking.done(ProcessingOrder::Unordered, &job(1, b"a").1, &job(1, b"a").0);
        assert!(dispatch.send(job(3, b"c")).is_ok());
    }

    #[test]
    fn stopping_takes_back_the_parked_records() {
        let (mut dispatch, _inboxes, parking) = Dispatch::new(ProcessingOrder::Key, 64, 1, 8);
        for offset in 1..=3 {
            assert!(dispatch.send(job(offset, b"k")).is_ok());
        }
        dispatch.close();
        parking.done(ProcessingOrder::Key, &job(1, b"k").1, &job(1, b"k").0);
        let mut parked: Vec<i64> = parking.take_parked().iter().map(|j| j.1.offset).collect();
        parked.sort();
        assert_eq!(parked, [2, 3], "closed: 2 was not released");
    }

    /// A handler of partition 0 under epoch 1 never returns (never `done`), holding the
    /// partition's only in-flight slot; the partition is revoked and assigned again (epoch 2):
    /// its records go to the workers again, and when the hung handler finally returns it gives
    /// back nothing of epoch 2. The count used to be one per partition whatever the epoch, so the
    /// partition stayed Busy for as long as the handler hung.
    #[test]
    fn a_hung_handler_of_an_earlier_assignment_keeps_no_in_flight_slot_of_the_next() {
        let (mut dispatch, inboxes, parking) = Dispatch::new(ProcessingOrder::Unordered, 1, 2, 8);
        let hung = job_at(0, 1, 5, b"a");
        assert!(dispatch.send(hung.clone()).is_ok());
        assert_eq!(
            offsets(&inboxes[0], &parking),
            [5],
            "taken by a worker, which hangs"
        );
        assert!(
            dispatch.send(job_at(0, 2, 5, b"a")).is_ok(),
            "epoch 2 of the partition was refused as Busy by the hung handler of epoch 1"
        );
        assert_eq!(offsets(&inboxes[0], &parking), [5]);
        parking.done(ProcessingOrder::Unordered, &hung.1, &hung.0);
        assert!(
            matches!(dispatch.send(job_at(0, 2, 6, b"b")), Err(Refused::Busy(_))),
            "the hung handler's return gave back epoch 2's slot: its bound of 1 was exceeded"
        );
    }

    /// In key order the hung handler's key slot is its epoch's: the same key under the next
    /// assignment is queued at once, not parked behind the record that never finishes.
    #[test]
    fn in_key_order_a_hung_handler_of_an_earlier_assignment_holds_no_key_of_the_next() {
        let (mut dispatch, inboxes, parking) = Dispatch::new(ProcessingOrder::Key, 64, 2, 8);
        assert!(dispatch.send(job_at(0, 1, 5, b"acct")).is_ok());
        assert!(dispatch.send(job_at(0, 1, 6, b"acct")).is_ok());
        assert_eq!(
            offsets(&inboxes[0], &parking),
            [5],
            "6 parks behind the hung 5"
        );
        assert!(dispatch.send(job_at(0, 2, 5, b"acct")).is_ok());
        assert_eq!(
            offsets(&inboxes[0], &parking),
            [5],
            "epoch 2's record of the key was parked behind epoch 1's hung handler"
        );
        assert!(dispatch.send(job_at(0, 2, 6, b"acct")).is_ok());
        assert_eq!(
            offsets(&inboxes[0], &parking),
            Vec::<i64>::new(),
            "within epoch 2 the key's records still run one at a time"
        );
        assert!(
            parking
                .take_parked()
                .iter()
                .all(|(_, lease)| lease.epoch == 2),
            "epoch 1's parked record was kept after epoch 2 began"
        );
    }

    /// In partition order the partition's worker is chosen anew for a new assignment: its
    /// records do not queue behind a handler of the previous one that never returns. It used to
    /// be chosen once per partition, so the partition stayed bound to the hung worker.
    #[test]
    fn in_partition_order_a_new_assignment_does_not_queue_behind_a_hung_worker() {
        let (mut dispatch, inboxes, _parking) = Dispatch::new(ProcessingOrder::Partition, 64, 2, 8);
        assert!(dispatch.send(job_at(0, 1, 5, b"a")).is_ok());
        assert_eq!(own_offsets(&inboxes[0]), [5], "worker 0 takes it and hangs");
        assert!(dispatch.send(job_at(0, 2, 5, b"a")).is_ok());
        assert_eq!(
            (own_offsets(&inboxes[0]), own_offsets(&inboxes[1])),
            (vec![], vec![5]),
            "epoch 2 of the partition was queued to the worker hung in epoch 1"
        );
    }

    /// A new assignment prefers an idle worker to the next one in turn: here the turn would give
    /// the hung worker 0 (partition 1 went to worker 1, which finished it).
    #[test]
    fn in_partition_order_a_new_assignment_prefers_an_idle_worker_to_the_hung_one() {
        let (mut dispatch, inboxes, parking) = Dispatch::new(ProcessingOrder::Partition, 64, 2, 8);
        assert!(dispatch.send(job_at(0, 1, 5, b"a")).is_ok());
        let finished = job_at(1, 1, 7, b"b");
        assert!(dispatch.send(finished.clone()).is_ok());
        assert_eq!(
            own_offsets(&inboxes[0]),
            [5],
            "worker 0 hangs on partition 0"
        );
        assert_eq!(own_offsets(&inboxes[1]), [7]);
        inboxes[1].done(
            &parking,
            ProcessingOrder::Partition,
            &finished.1,
            &finished.0,
        );
        assert!(dispatch.send(job_at(0, 2, 5, b"a")).is_ok());
        assert_eq!(
            (own_offsets(&inboxes[0]), own_offsets(&inboxes[1])),
            (vec![], vec![5]),
            "the new assignment went to the hung worker while another was idle"
        );
        // Within an assignment the worker stays, busy or not (offset order).
        assert!(dispatch.send(job_at(0, 2, 6, b"a")).is_ok());
        assert_eq!(own_offsets(&inboxes[1]), [6]);
    }
}
