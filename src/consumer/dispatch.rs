//! Which worker runs a record, by `processing.order`, and the queues between the poll thread and
//! the workers.
//!
//! - `partition`: each partition has its own worker, chosen in turn when the partition is first
//!   seen (a hash could put two busy partitions on one worker while another idles), with a
//!   bounded queue per worker: a partition's records run one at a time, in offset order.
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

/// A record's ordering unit in key order: its partition and Kafka key (no key is a key too:
/// records without one are ordered with each other).
type KeySlot = (TopicPartition, Option<Bytes>);

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
    /// Partition order: the worker's own queue.
    Own(Receiver<Job>),
    /// Key order and unordered: the queue shared by every worker.
    Shared(Arc<Mutex<Receiver<Job>>>),
}

impl Inbox {
    /// The next record, or `None` once the poll thread closed the queues and they are empty.
    pub(crate) fn recv(&self, parking: &Parking) -> Option<Job> {
        match self {
            Inbox::Own(rx) => rx.recv().ok(),
            Inbox::Shared(rx) => {
                let job = rx.lock().unwrap_or_else(|p| p.into_inner()).recv().ok();
                if job.is_some() {
                    parking.queued.fetch_sub(1, Ordering::Relaxed);
                }
                job
            }
        }
    }
}

/// What is in flight outside partition order, shared by the poll thread and the workers.
#[derive(Default)]
struct InFlight {
    /// Per partition: records queued, parked or running.
    partitions: HashMap<TopicPartition, usize>,
    /// Key order: the keys with a record queued or running, each with its parked successors.
    keys: HashMap<KeySlot, VecDeque<Job>>,
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
    /// A worker is done with a record (whatever happened to it): the partition has one less in
    /// flight, and in key order the key's next parked record goes to the shared queue.
    pub(crate) fn done(&self, order: ProcessingOrder, lease: &Lease, record: &Record) {
        if order == ProcessingOrder::Partition {
            return;
        }
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = in_flight.partitions.get_mut(&lease.tp) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                in_flight.partitions.remove(&lease.tp);
            }
        }
        if order != ProcessingOrder::Key {
            return;
        }
        let slot = (lease.tp.clone(), record.key.clone());
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
    /// Partition order: which worker works which partition.
    workers: HashMap<TopicPartition, usize>,
    next: usize,
}

enum Queues {
    PerWorker(Vec<SyncSender<Job>>),
    Shared(Option<Sender<Job>>),
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
                    (tx, Inbox::Own(rx))
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
                let tp = &job.1.tp;
                let worker = match self.workers.get(tp) {
                    Some(&worker) => worker,
                    None => {
                        let worker = self.next % senders.len().max(1);
                        self.next += 1;
                        self.workers.insert(tp.clone(), worker);
                        worker
                    }
                };
                let Some(tx) = senders.get(worker) else {
                    return Err(Refused::Gone(Box::new(job), worker));
                };
                tx.try_send(job).map_err(|e| match e {
                    TrySendError::Full(job) => Refused::Busy(Box::new(job)),
                    TrySendError::Disconnected(job) => Refused::Gone(Box::new(job), worker),
                })
            }
            Queues::Shared(None) => Err(Refused::Gone(Box::new(job), 0)),
            Queues::Shared(Some(tx)) => {
                let parking = &*self.parking;
                let mut in_flight = parking.in_flight.lock().unwrap_or_else(|p| p.into_inner());
                let count = in_flight.partitions.get(&job.1.tp).copied().unwrap_or(0);
                if count >= self.per_partition {
                    return Err(Refused::Busy(Box::new(job)));
                }
                if self.order == ProcessingOrder::Key {
                    let slot = (job.1.tp.clone(), job.0.key.clone());
                    if let Some(parked) = in_flight.keys.get_mut(&slot) {
                        parked.push_back(job);
                        *in_flight.partitions.entry(slot.0).or_default() += 1;
                        return Ok(());
                    }
                }
                if parking.queued.load(Ordering::Relaxed) >= self.capacity {
                    return Err(Refused::Busy(Box::new(job)));
                }
                let tp = job.1.tp.clone();
                let slot =
                    (self.order == ProcessingOrder::Key).then(|| (tp.clone(), job.0.key.clone()));
                parking.queued.fetch_add(1, Ordering::Relaxed);
                if let Err(mpsc::SendError(job)) = tx.send(job) {
                    parking.queued.fetch_sub(1, Ordering::Relaxed);
                    return Err(Refused::Gone(Box::new(job), 0));
                }
                *in_flight.partitions.entry(tp).or_default() += 1;
                if let Some(slot) = slot {
                    in_flight.keys.insert(slot, VecDeque::new());
                }
                Ok(())
            }
        }
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
        };
        (record, lease)
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
}
