//! The decoupled mode when handlers fail, panic or hang: a failure stops its partition and the
//! record comes again, a panic ends the run with an error naming the record, and stopping or
//! revoking is bounded by `revoke.drain.timeout.ms` once, however many handlers hang. Real Kafka
//! 4.x (the run's shared broker).

use crate::support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use rebalance_guard::consumer::{Consumer, ConsumerConfig, ConsumerError};
use rebalance_guard::guard::OwnerStatus;
use rebalance_guard::wire::{Client, ClientConfig, Record};
use rebalance_guard::TopicPartition;
use support::consumer::{
    committed, config, produce_to_each_partition, produce_until_accepted, value_records,
    wait_until, within,
};
use support::{unique_name, Broker, BrokerKind};

const WAIT: Duration = Duration::from_secs(30);

type Processed = Arc<Mutex<Vec<(i32, i64)>>>;

struct Setup {
    broker: Box<dyn Broker>,
    topic: String,
    group: String,
}

fn setup(partitions: i32, records: usize) -> Setup {
    let _ = env_logger::builder().is_test(true).try_init();
    let broker = BrokerKind::Kafka.start();
    let topic = unique_name("workers");
    broker.create_topic(&topic, partitions as u32);
    produce_to_each_partition(&broker.bootstrap(), &topic, partitions, records);
    Setup {
        broker,
        topic,
        group: unique_name("workers-group"),
    }
}

impl Setup {
    fn config(&self, extra: &[(&str, &str)]) -> ConsumerConfig {
        config(&self.broker.bootstrap(), &self.group, extra)
    }

    fn committed(&self, partitions: i32) -> BTreeMap<i32, Option<i64>> {
        committed(
            &self.broker.bootstrap(),
            &self.group,
            &self.topic,
            partitions,
        )
    }
}

/// A handler that never returns (released only at the end of the test).
#[derive(Default)]
struct Hang {
    released: Mutex<bool>,
    changed: Condvar,
    hung: Mutex<usize>,
}

impl Hang {
    fn hang(&self) {
        *self.hung.lock().unwrap() += 1;
        self.changed.notify_all();
        let mut released = self.released.lock().unwrap();
        while !*released {
            released = self.changed.wait(released).unwrap();
        }
    }

    fn hung(&self) -> usize {
        *self.hung.lock().unwrap()
    }

    fn release(&self) {
        *self.released.lock().unwrap() = true;
        self.changed.notify_all();
    }
}

mod kafka {
    use super::*;

    /// A handler error at partition 0 offset 4: nothing later of partition 0 is processed in that
    /// run, the committed position of partition 0 is 4, the run ends with the error, and the next
    /// run starts partition 0 at 4 again. It used to leave the record's lease running forever,
    /// process later records of the partition anyway, and fetch on from where the intake was, so 4
    /// never came back.
    #[test]
    fn a_handler_error_stops_its_partition_and_the_record_comes_again() {
        let s = setup(2, 10);
        let processed: Processed = Arc::default();
        let failed_once = Arc::new(AtomicBool::new(false));
        let mut consumer = Consumer::subscribe(s.config(&[]), &[&s.topic]).expect("subscribe");
        let (log, fail) = (processed.clone(), failed_once.clone());
        let (mut consumer, result) = within(WAIT, move || {
            let stop = AtomicBool::new(false);
            let result = consumer.run_with_workers(&stop, 2, 16, move |record, _ctx| {
                if (record.partition, record.offset) == (0, 4) && !fail.swap(true, Ordering::SeqCst)
                {
                    return Err(std::io::Error::other("the exchange said no"));
                }
                log.lock().unwrap().push((record.partition, record.offset));
                Ok(())
            });
            (consumer, result)
        });
        match result {
            Err(ConsumerError::Handler {
                tp: partition,
                offset,
                ..
            }) => assert_eq!((partition.partition, offset), (0, 4)),
            other => panic!("the run must end with the handler's error, got {other:?}"),
        }
        let first_run = processed.lock().unwrap().clone();
        assert!(
            !first_run.iter().any(|&(p, o)| p == 0 && o > 4),
            "records of partition 0 after the failed one were processed: {first_run:?}"
        );
        assert_eq!(
            s.committed(2)[&0],
            Some(4),
            "committed up to the failed record"
        );

        // The next run: partition 0 starts again at 4.
        let log = processed.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let stopper = stop.clone();
        let watcher = processed.clone();
        thread::spawn(move || {
            wait_until("every record processed", WAIT, || {
                let seen = watcher.lock().unwrap();
                (0..2).all(|p| (0..10).all(|o| seen.contains(&(p, o))))
            });
            stopper.store(true, Ordering::SeqCst);
        });
        let result = within(WAIT, move || {
            let result = consumer.run_with_workers(&stop, 2, 16, move |record, _ctx| {
                log.lock().unwrap().push((record.partition, record.offset));
                Ok::<(), std::io::Error>(())
            });
            consumer.close().expect("close");
            result
        });
        result.expect("second run");
        let second_run: Vec<i64> = processed.lock().unwrap()[first_run.len()..]
            .iter()
            .filter(|(p, _)| *p == 0)
            .map(|(_, o)| *o)
            .collect();
        assert_eq!(
            second_run,
            (4..10).collect::<Vec<_>>(),
            "partition 0 again from 4"
        );
        assert_eq!(s.committed(2)[&0], Some(10));
    }
    /// A handler panic at partition 0 offset 3 ends the run with an error naming the partition and
    /// the offset, after committing what completed before it. The panic used to kill the worker
    /// thread, and the poll loop then spun forever on the closed queue.
    #[test]
    fn a_handler_panic_ends_the_run_with_an_error_naming_the_record() {
        let s = setup(1, 10);
        let mut consumer = Consumer::subscribe(s.config(&[]), &[&s.topic]).expect("subscribe");
        let result = within(WAIT, move || {
            let stop = AtomicBool::new(false);
            let result = consumer.run_with_workers(&stop, 2, 16, |record, _ctx| {
                if record.offset == 3 {
                    panic!("order book corrupt");
                }
                Ok::<(), std::io::Error>(())
            });
            drop(consumer.close());
            result
        });
        match result {
            Err(ConsumerError::HandlerPanicked {
                tp: partition,
                offset,
                message,
            }) => {
                assert_eq!((partition.partition, offset), (0, 3));
                assert!(message.contains("order book corrupt"), "{message}");
            }
            other => panic!("the run must end with the panic, got {other:?}"),
        }
        assert_eq!(s.committed(1)[&0], Some(3));
    }
    /// Stopping with a handler hung on partition 0 offset 0: the queued records after it are
    /// cancelled (not run), the run returns after about `revoke.drain.timeout.ms` (1 s here), and
    /// nothing from the hung record on is committed. Stopping used to wait, without a bound, for
    /// the hung handler and then run every queued record.
    #[test]
    fn stopping_cancels_queued_records_and_waits_at_most_the_drain_timeout() {
        let s = setup(1, 10);
        let hang = Arc::new(Hang::default());
        let processed: Processed = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let mut consumer = Consumer::subscribe(
            s.config(&[("revoke.drain.timeout.ms", "1000")]),
            &[&s.topic],
        )
        .expect("subscribe");
        let (h, log, run_stop) = (hang.clone(), processed.clone(), stop.clone());
        let runner = thread::spawn(move || {
            let result = consumer.run_with_workers(&run_stop, 1, 16, move |record, _ctx| {
                if record.offset == 0 {
                    h.hang();
                }
                log.lock().unwrap().push((record.partition, record.offset));
                Ok::<(), std::io::Error>(())
            });
            (consumer, result)
        });
        wait_until("the handler hangs", WAIT, || hang.hung() == 1);
        let stopped = Instant::now();
        stop.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + Duration::from_secs(5);
        while !runner.is_finished() {
            assert!(
                Instant::now() < deadline,
                "stopping did not return within 5 s of a 1 s drain timeout"
            );
            thread::sleep(Duration::from_millis(20));
        }
        let took = stopped.elapsed();
        let (consumer, result) = runner.join().expect("runner");
        result.expect("run");
        assert!(
            took >= Duration::from_millis(900),
            "returned before the drain timeout: {took:?}"
        );
        assert_eq!(
            processed.lock().unwrap().clone(),
            Vec::<(i32, i64)>::new(),
            "queued records after the hung one must be cancelled, not run"
        );
        assert_eq!(s.committed(1)[&0], None, "nothing from the hung record on");
        hang.release();
        drop(consumer);
    }
    /// A revocation with handlers hung on two partitions costs one `revoke.drain.timeout.ms` (2 s
    /// here), not one per partition: a second member joining (eager `range`, so everything is
    /// revoked) gets its partitions about 2 s later, not 4 s.
    #[test]
    fn hung_handlers_on_several_partitions_cost_one_drain_timeout() {
        let s = setup(2, 5);
        let hang = Arc::new(Hang::default());
        let stop = Arc::new(AtomicBool::new(false));
        let settings = [("revoke.drain.timeout.ms", "2000")];
        let mut a = Consumer::subscribe(s.config(&settings), &[&s.topic]).expect("subscribe");
        let (h, run_stop) = (hang.clone(), stop.clone());
        let runner = thread::spawn(move || {
            let result = a.run_with_workers(&run_stop, 2, 16, move |record, _ctx| {
                if record.offset == 0 {
                    h.hang();
                }
                Ok::<(), std::io::Error>(())
            });
            (a, result)
        });
        wait_until("both handlers hang", WAIT, || hang.hung() == 2);
        let mut b = Consumer::subscribe(s.config(&settings), &[&s.topic]).expect("subscribe");
        let joined = Instant::now();
        while b.assignment().is_empty() {
            assert!(joined.elapsed() < WAIT, "b never got partitions");
            drop(b.poll(Duration::from_millis(100)).expect("poll"));
        }
        let took = joined.elapsed();
        assert!(
            took < Duration::from_millis(3600),
            "two hung partitions cost {took:?}: more than one drain timeout of 2 s"
        );
        stop.store(true, Ordering::SeqCst);
        hang.release();
        let (a, result) = runner.join().expect("runner");
        result.expect("run");
        drop(a.close());
        drop(b.close());
    }
    /// A failed record comes again even when a later record of its partition enters the guard as
    /// already finished after the failure (here a refused duplicate: its order id was applied at an
    /// earlier offset). The failure used to take the record out of the guard (a rewind), the poll
    /// thread went on admitting the partition's later records, the duplicate moved the position
    /// past the failed offset as if it had been compacted away, the intake's rewind at the end of
    /// the run was then refused, and the failed order was never applied while the group committed
    /// past it.
    #[test]
    fn a_failed_record_comes_again_when_a_later_record_enters_as_finished_after_the_failure() {
        let _ = env_logger::builder().is_test(true).try_init();
        let broker = BrokerKind::Kafka.start();
        let topic = unique_name("fail-dup");
        let group = unique_name("fail-dup-group");
        broker.create_topic(&topic, 1);
        let tp = TopicPartition::new(topic.as_str(), 0);
        let mut client =
            Client::connect(ClientConfig::from_bootstrap_str(&broker.bootstrap())).expect("client");
        let orders = |ids: &[&str]| value_records(ids.iter().map(|id| id.to_string()));
        produce_until_accepted(
            &mut client,
            &tp,
            &orders(&["ord-0", "ord-1", "ord-2", "ord-3", "ord-4", "ord-5"]),
            "orders 0..5",
        );
        // The fetch waits long at the broker, so the records produced after the failure arrive in
        // a fetch that was already waiting when the record failed.
        let settings = [("fetch.max.wait.ms", "3000")];
        let order_id = |record: &Record| -> Option<String> {
            record
                .value
                .as_ref()
                .map(|v| String::from_utf8_lossy(v).into_owned())
        };
        let mut consumer =
            Consumer::subscribe(config(&broker.bootstrap(), &group, &settings), &[&topic])
                .expect("subscribe")
                .with_idempotency_key(order_id);
        let view = consumer.guard_view();
        let applied: Arc<Mutex<Vec<String>>> = Arc::default();
        let failed = Arc::new(AtomicBool::new(false));
        let (log, fail) = (applied.clone(), failed.clone());
        let run = thread::spawn(move || {
            let stop = AtomicBool::new(false);
            let result = consumer.run_with_workers(&stop, 1, 16, move |record, _ctx| {
                if record.offset == 5 && !fail.load(Ordering::SeqCst) {
                    // Long enough for the poll thread to be waiting in its next fetch.
                    thread::sleep(Duration::from_millis(300));
                    fail.store(true, Ordering::SeqCst);
                    return Err(std::io::Error::other("the exchange said no"));
                }
                log.lock()
                    .unwrap()
                    .push(order_id(record).expect("an order id"));
                Ok(())
            });
            (consumer, result)
        });
        wait_until("offset 5 failed and was taken back", WAIT, || {
            failed.load(Ordering::SeqCst)
                && view
                    .snapshot()
                    .partitions
                    .iter()
                    .any(|p| p.released > 0 || p.highest_admitted == Some(4))
        });
        // After the failure: a repeat of ord-1 (refused as a duplicate, so finished at once) and a
        // new order.
        produce_until_accepted(
            &mut client,
            &tp,
            &orders(&["ord-1", "ord-7"]),
            "orders 6, 7",
        );
        let (mut consumer, result) = run.join().expect("first run");
        assert!(
            matches!(result, Err(ConsumerError::Handler { offset: 5, .. })),
            "the run ends with the handler's error: {result:?}"
        );
        // The next run applies ord-5 and ord-7 and commits the end of the partition.
        let log = applied.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let stopper = stop.clone();
        let (bootstrap, watch_group, watch_topic) =
            (broker.bootstrap(), group.clone(), topic.clone());
        thread::spawn(move || {
            wait_until("the partition committed to its end", WAIT, || {
                committed(&bootstrap, &watch_group, &watch_topic, 1)[&0] == Some(8)
            });
            stopper.store(true, Ordering::SeqCst);
        });
        let result = within(WAIT + Duration::from_secs(5), move || {
            let result = consumer.run_with_workers(&stop, 1, 16, move |record, _ctx| {
                log.lock()
                    .unwrap()
                    .push(order_id(record).expect("an order id"));
                Ok::<(), std::io::Error>(())
            });
            consumer.close().expect("close");
            result
        });
        result.expect("second run");
        let applied = applied.lock().unwrap().clone();
        for id in [
            "ord-0", "ord-1", "ord-2", "ord-3", "ord-4", "ord-5", "ord-7",
        ] {
            assert_eq!(
                applied.iter().filter(|a| *a == id).count(),
                1,
                "{id} applied exactly once: {applied:?}"
            );
        }
    }
    /// A handler that fails on a partition whose revocation has already fenced it (cooperative,
    /// fenced on the membership thread while the record runs) does not hold the revocation: the
    /// record is given back at once, the handoff commits the position below it and the next owner
    /// starts there. The failure used to be refused (a rewind needs an owned partition), the record
    /// stayed running, and the revocation waited the whole `revoke.drain.timeout.ms` and then
    /// committed nothing.
    #[test]
    fn a_handler_failing_on_a_fenced_partition_does_not_hold_its_revocation() {
        const FAIL_AT: i64 = 5;
        let s = setup(2, 20);
        let settings = [
            ("partition.assignment.strategy", "cooperative-sticky"),
            ("revoke.drain.timeout.ms", "20000"),
        ];
        let consumer = Consumer::subscribe(s.config(&settings), &[&s.topic]).expect("subscribe");
        let view = consumer.guard_view();
        let waiting = Arc::new(Mutex::new(0usize));
        let failed_at: Arc<Mutex<Option<(i32, Instant)>>> = Arc::default();
        let a = {
            let (waiting, failed_at) = (waiting.clone(), failed_at.clone());
            let mut consumer = consumer;
            thread::spawn(move || {
                let stop = AtomicBool::new(false);
                let result = consumer.run_with_workers(&stop, 2, 16, move |record, _ctx| {
                    if record.offset != FAIL_AT {
                        return Ok(());
                    }
                    *waiting.lock().unwrap() += 1;
                    let deadline = Instant::now() + WAIT;
                    loop {
                        let draining: Vec<i32> = view
                            .snapshot()
                            .partitions
                            .iter()
                            .filter(|p| p.status == OwnerStatus::Draining)
                            .map(|p| p.tp.partition)
                            .collect();
                        if draining.contains(&record.partition) {
                            // Fenced; by now the poll thread is in the revocation's drain, waiting
                            // for this record. It fails.
                            thread::sleep(Duration::from_secs(1));
                            *failed_at.lock().unwrap() = Some((record.partition, Instant::now()));
                            return Err(std::io::Error::other("the exchange is closed"));
                        }
                        // The kept partition's record goes on once the other one is fenced.
                        if !draining.is_empty() || Instant::now() > deadline {
                            return Ok(());
                        }
                        thread::sleep(Duration::from_millis(10));
                    }
                });
                drop(consumer.close());
                result
            })
        };
        wait_until("both partitions' record 5 running on A", WAIT, || {
            *waiting.lock().unwrap() == 2
        });
        // B joins: one partition moves, and A's record 5 on it fails while it is fenced.
        let processed: Processed = Arc::default();
        let stop_b = Arc::new(AtomicBool::new(false));
        let b = {
            let (config, topic) = (s.config(&settings), s.topic.clone());
            let (log, stop) = (processed.clone(), stop_b.clone());
            thread::spawn(move || {
                let mut consumer = Consumer::subscribe(config, &[&topic]).expect("subscribe");
                let result = consumer.run_with_workers(&stop, 1, 16, move |record, _ctx| {
                    log.lock().unwrap().push((record.partition, record.offset));
                    Ok::<(), std::io::Error>(())
                });
                drop(consumer.close());
                result
            })
        };
        wait_until("B processed a record", WAIT, || {
            !processed.lock().unwrap().is_empty()
        });
        let b_started = Instant::now();
        let (moved, failed) = failed_at
            .lock()
            .unwrap()
            .expect("A's record on the moved partition failed while fenced");
        let handoff = b_started.saturating_duration_since(failed);
        assert!(
            handoff < Duration::from_secs(6),
            "the handoff took {handoff:?} after the failure: the revocation waited for a record that \
             had already failed"
        );
        wait_until("B processed the moved partition to its end", WAIT, || {
            processed.lock().unwrap().contains(&(moved, 19))
        });
        let first_on_moved = processed
            .lock()
            .unwrap()
            .iter()
            .find(|(p, _)| *p == moved)
            .map(|(_, o)| *o);
        assert_eq!(
            first_on_moved,
            Some(FAIL_AT),
            "B starts the moved partition at the failed record"
        );
        stop_b.store(true, Ordering::SeqCst);
        b.join().expect("B").expect("B's run");
        // A's run ends with its handler's error.
        assert!(matches!(
            a.join().expect("A"),
            Err(ConsumerError::Handler {
                offset: FAIL_AT,
                ..
            })
        ));
    }
    /// A partition that comes back while a handler of its earlier assignment hangs flows again: a
    /// handler hangs on partition 0 offset 3 (the first time only), a second member joins (eager
    /// `range`, so both partitions are revoked and assigned again, each under a new epoch) and
    /// leaves again, and the first member, with the handler still hung, processes and commits both
    /// partitions to their end. In partition order the partition used to stay bound to the worker
    /// chosen when it was first seen: the hung one, whose queue (full of the earlier assignment's
    /// records, which it never takes) refused every record of the new assignment as Busy, forever.
    #[test]
    fn a_partition_assigned_back_flows_while_a_handler_of_its_earlier_assignment_hangs() {
        const RECORDS: i64 = 20;
        let s = setup(2, RECORDS as usize);
        let hang = Arc::new(Hang::default());
        let processed: Processed = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let settings = [("revoke.drain.timeout.ms", "500")];
        let mut a = Consumer::subscribe(s.config(&settings), &[&s.topic]).expect("subscribe");
        let (h, log, run_stop) = (hang.clone(), processed.clone(), stop.clone());
        let hung_once = AtomicBool::new(false);
        let runner = thread::spawn(move || {
            // 2 workers, queues of 4: the hung worker's queue fills with the records after 3.
            let result = a.run_with_workers(&run_stop, 2, 4, move |record, _ctx| {
                if (record.partition, record.offset) == (0, 3)
                    && !hung_once.swap(true, Ordering::SeqCst)
                {
                    h.hang();
                }
                log.lock().unwrap().push((record.partition, record.offset));
                Ok::<(), std::io::Error>(())
            });
            (a, result)
        });
        wait_until("the handler hangs", WAIT, || hang.hung() == 1);

        // Revoked and assigned again, twice: when the second member joins and when it leaves. It
        // completes nothing (a dropped batch releases its records), so every commit is the first
        // member's.
        let mut b = Consumer::subscribe(s.config(&settings), &[&s.topic]).expect("subscribe");
        let joined = Instant::now();
        while b.assignment().is_empty() {
            assert!(joined.elapsed() < WAIT, "b never got a partition");
            drop(b.poll(Duration::from_millis(100)).expect("poll"));
        }
        drop(b.close());

        let log_end: BTreeMap<i32, Option<i64>> = [(0, Some(RECORDS)), (1, Some(RECORDS))].into();
        let reached = {
            let deadline = Instant::now() + WAIT;
            loop {
                let committed = s.committed(2);
                if committed == log_end || Instant::now() >= deadline {
                    break committed;
                }
                thread::sleep(Duration::from_millis(100));
            }
        };
        stop.store(true, Ordering::SeqCst);
        hang.release();
        let (a, result) = runner.join().expect("runner");
        drop(a.close());
        assert_eq!(
            reached, log_end,
            "with a handler of the earlier assignment of partition 0 hung, the partition assigned \
             back did not flow to its end"
        );
        result.expect("run");
        let processed = processed.lock().unwrap().clone();
        for offset in 0..RECORDS {
            assert!(
                processed.contains(&(0, offset)),
                "partition 0 offset {offset} was never processed: {processed:?}"
            );
        }
    }
}
