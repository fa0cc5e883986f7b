//! The share consumer on real Kafka 4.4 (share groups on: a freshly formatted 4.4 node has
//! `share.version=2`; the test broker lowers the minimum lock duration, see
//! `scripts/kafka_broker.py`): batches acknowledged by their outcome, a lease that runs out
//! before the lock is released and never accepted, a renewed lock that keeps a slow record, the
//! failure policy in acknowledgement terms, and more workers than partitions.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rebalance_guard::share::{ShareConsumer, ShareFailure};
use rebalance_guard::IdempotencyKey;
use support::share::{assert_nothing_comes_back, order_id, ShareSetup};

const BOUND: Duration = Duration::from_secs(40);

/// Polls until `done` holds or the bound passes.
fn poll_until(
    consumer: &mut ShareConsumer,
    what: &str,
    mut on_batch: impl FnMut(Vec<rebalance_guard::share::ShareDelivery>),
    mut done: impl FnMut() -> bool,
) {
    let until = Instant::now() + BOUND;
    while !done() {
        assert!(
            Instant::now() < until,
            "{what}: not reached within {BOUND:?}"
        );
        let batch = consumer.poll(Duration::from_millis(500)).expect("poll");
        on_batch(batch);
    }
}

mod kafka {
    use super::*;

    /// Applied records are accepted (never seen again), skipped ones released (back with delivery
    /// count 2), poison ones rejected (never back): one member, one partition, 30 orders.
    #[test]
    fn poll_acknowledges_each_record_by_its_outcome() {
        let _ = env_logger::builder().is_test(true).try_init();
        let setup = ShareSetup::new("share-poll", 1, 15_000);
        let ids = setup.produce_orders(1, 30);
        let mut consumer = setup.consumer(&[("max.poll.records", "10")]);
        // n % 3: 0 applied, 1 skipped the first time, 2 poison.
        let seen: Arc<Mutex<BTreeMap<String, Vec<i16>>>> = Arc::default();
        let applied: Arc<Mutex<BTreeSet<String>>> = Arc::default();
        let (seen2, applied2) = (seen.clone(), applied.clone());
        poll_until(
            &mut consumer,
            "every order applied or rejected, every skipped one back",
            move |batch| {
                for delivery in batch {
                    let id = order_id(delivery.record().value.as_deref()).expect("an order");
                    let n: usize = id.rsplit('-').next().unwrap().parse().unwrap();
                    let count = delivery.context().delivery_count();
                    seen2
                        .lock()
                        .unwrap()
                        .entry(id.clone())
                        .or_default()
                        .push(count);
                    match n % 3 {
                        0 => {
                            assert!(delivery.is_current());
                            applied2.lock().unwrap().insert(id);
                            delivery.applied();
                        }
                        1 if count == 1 => delivery.skipped(),
                        1 => {
                            applied2.lock().unwrap().insert(id);
                            delivery.applied();
                        }
                        _ => delivery.failed(&ShareFailure::poison("cannot parse")),
                    }
                }
            },
            || applied.lock().unwrap().len() == 20,
        );
        assert_nothing_comes_back(&mut consumer, Duration::from_secs(3));
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), ids.len());
        for (id, counts) in seen.iter() {
            let n: usize = id.rsplit('-').next().unwrap().parse().unwrap();
            let expected: &[i16] = if n % 3 == 1 { &[1, 2] } else { &[1] };
            assert_eq!(counts, expected, "deliveries of {id}");
        }
        let stats = consumer.stats();
        assert_eq!(stats.locks.accepted, 20, "{stats}");
        assert_eq!(stats.locks.released, 10, "{stats}");
        assert_eq!(stats.locks.rejected, 10, "{stats}");
        assert_eq!(stats.locks.ack_failures.total(), 0, "{stats}");
        consumer.close().expect("close");
    }
    /// A handler that outlives its lease (renewal off) sees `is_current` false, applies nothing,
    /// and the record is released, not accepted: it comes back with delivery count 2 and is applied
    /// then, once. No effect is ever applied after its lease ended.
    #[test]
    fn a_record_whose_lease_ran_out_is_released_not_accepted() {
        let _ = env_logger::builder().is_test(true).try_init();
        let setup = ShareSetup::new("share-expiry", 1, 2_000);
        setup.produce_orders(1, 1);
        let mut consumer = setup.consumer(&[
            ("share.lock.renew", "false"),
            ("share.lock.safety.margin.ms", "500"),
        ]);
        let stop = AtomicBool::new(false);
        let effects: Mutex<Vec<(i16, Instant, Instant)>> = Mutex::default();
        let skipped = Mutex::new(Vec::new());
        let started = Instant::now();
        consumer
            .run(&stop, |_record, ctx| {
                if ctx.delivery_count() == 1 {
                    // Slower than the lease (2 s lock - 0.5 s margin).
                    std::thread::sleep(Duration::from_millis(1_800));
                }
                if !ctx.is_current() {
                    skipped.lock().unwrap().push(ctx.delivery_count());
                    return Ok(());
                }
                effects.lock().unwrap().push((
                    ctx.delivery_count(),
                    Instant::now(),
                    ctx.deadline().expect("a live lease"),
                ));
                stop.store(true, Ordering::SeqCst);
                Ok(())
            })
            .expect("run");
        assert!(started.elapsed() < BOUND);
        assert_eq!(*skipped.lock().unwrap(), vec![1]);
        let effects = effects.lock().unwrap();
        assert_eq!(effects.len(), 1, "{effects:?}");
        let (delivery, applied_at, deadline) = effects[0];
        assert_eq!(delivery, 2, "applied on the redelivery");
        assert!(applied_at < deadline, "applied after the lease");
        let stats = consumer.stats();
        assert!(stats.locks.released >= 1, "{stats}");
        consumer.close().expect("close");
    }
    /// With renewal on, a record that runs for 1.5 locks stays current (renewed at half its lock)
    /// and is accepted once, never redelivered.
    #[test]
    fn a_slow_record_keeps_its_lock_by_renewal() {
        let _ = env_logger::builder().is_test(true).try_init();
        let setup = ShareSetup::new("share-renew", 1, 2_000);
        setup.produce_orders(1, 1);
        let mut consumer = setup.consumer(&[("share.lock.safety.margin.ms", "500")]);
        let stop = AtomicBool::new(false);
        let deliveries = Mutex::new(Vec::new());
        consumer
            .run_with_workers(&stop, 1, |_record, ctx| {
                deliveries.lock().unwrap().push(ctx.delivery_count());
                let first_deadline = ctx.deadline().expect("a live lease");
                std::thread::sleep(Duration::from_millis(3_000));
                assert!(
                    ctx.deadline().expect("a live lease") > first_deadline,
                    "the lease was not extended"
                );
                assert!(ctx.is_current(), "renewed lease not current");
                stop.store(true, Ordering::SeqCst);
                Ok(())
            })
            .expect("run");
        // Nothing comes back after the accept.
        assert_nothing_comes_back(&mut consumer, Duration::from_secs(3));
        assert_eq!(*deliveries.lock().unwrap(), vec![1]);
        let stats = consumer.stats();
        assert!(stats.locks.renewals >= 1, "{stats}");
        assert_eq!(stats.locks.accepted, 1, "{stats}");
        consumer.close().expect("close");
    }
    /// `processing.retries=2`: a record that always fails is released on deliveries 1 and 2 and
    /// rejected on delivery 3 (the handler sees the count); a poison failure is rejected at once.
    #[test]
    fn failures_release_until_the_retries_then_reject() {
        let _ = env_logger::builder().is_test(true).try_init();
        let setup = ShareSetup::new("share-retries", 1, 15_000);
        setup.produce_orders(1, 2);
        let mut consumer = setup.consumer(&[("processing.retries", "2")]);
        let stop = AtomicBool::new(false);
        let seen: Mutex<BTreeMap<String, Vec<i16>>> = Mutex::default();
        let started = Instant::now();
        consumer
            .run(&stop, |record, ctx| {
                let id = order_id(record.value.as_deref()).unwrap();
                let mut seen = seen.lock().unwrap();
                seen.entry(id.clone())
                    .or_default()
                    .push(ctx.delivery_count());
                let total: usize = seen.values().map(Vec::len).sum();
                if total >= 4 || started.elapsed() > BOUND {
                    stop.store(true, Ordering::SeqCst);
                }
                if id.ends_with("-0") {
                    Err(ShareFailure::retryable("downstream unavailable"))
                } else {
                    Err(ShareFailure::poison("cannot parse"))
                }
            })
            .expect("run");
        // Let anything that would still come back arrive.
        assert_nothing_comes_back(&mut consumer, Duration::from_secs(3));
        let seen = seen.lock().unwrap();
        assert_eq!(seen.get("0-0"), Some(&vec![1, 2, 3]), "{seen:?}");
        assert_eq!(seen.get("0-1"), Some(&vec![1]), "{seen:?}");
        let stats = consumer.stats();
        assert_eq!(stats.locks.rejected, 2, "{stats}");
        assert_eq!(stats.locks.released, 2, "{stats}");
        consumer.close().expect("close");
    }
    /// Three members with four worker threads each on two partitions (six times more workers than
    /// partitions) share the work: every order applied exactly once (no faults), by more than one
    /// member, with no failed acknowledgement.
    #[test]
    fn more_workers_than_partitions_apply_every_order_once() {
        let _ = env_logger::builder().is_test(true).try_init();
        let setup = ShareSetup::new("share-fleet", 2, 15_000);
        let ids: BTreeSet<String> = setup.produce_orders(2, 300).into_iter().collect();
        let applied: Arc<Mutex<Vec<(String, usize)>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let members: Vec<_> = (0..3)
            .map(|m| {
                let (applied, stop) = (applied.clone(), stop.clone());
                let config = setup.config(&[("max.poll.records", "20")]);
                let topic = setup.topic.clone();
                std::thread::spawn(move || {
                    let mut consumer = ShareConsumer::subscribe(config, &[&topic])
                        .expect("subscribe")
                        .with_idempotency_key(|r| {
                            order_id(r.value.as_deref()).map(|id| IdempotencyKey::from(id.as_str()))
                        });
                    consumer
                        .run_with_workers(&stop, 4, |record, ctx| {
                            std::thread::sleep(Duration::from_millis(2));
                            if ctx.is_current() {
                                let id = order_id(record.value.as_deref()).unwrap();
                                applied.lock().unwrap().push((id, m));
                            }
                            Ok(())
                        })
                        .expect("run_with_workers");
                    let stats = consumer.stats();
                    consumer.close().expect("close");
                    stats
                })
            })
            .collect();
        let until = Instant::now() + BOUND;
        while applied.lock().unwrap().len() < ids.len() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(50));
        }
        stop.store(true, Ordering::SeqCst);
        let stats: Vec<_> = members.into_iter().map(|h| h.join().unwrap()).collect();
        let applied = applied.lock().unwrap();
        let mut per_order: BTreeMap<&str, usize> = BTreeMap::new();
        let mut per_member = [0usize; 3];
        for (id, m) in applied.iter() {
            *per_order.entry(id.as_str()).or_default() += 1;
            per_member[*m] += 1;
        }
        let missing: Vec<_> = ids
            .iter()
            .filter(|id| !per_order.contains_key(id.as_str()))
            .collect();
        assert!(missing.is_empty(), "lost: {missing:?}");
        let repeated: Vec<_> = per_order.iter().filter(|(_, n)| **n > 1).collect();
        assert!(
            repeated.is_empty(),
            "applied twice without a fault: {repeated:?}"
        );
        assert!(
            per_member.iter().filter(|n| **n > 0).count() >= 2,
            "the work was not shared: {per_member:?}"
        );
        for s in &stats {
            assert_eq!(s.locks.ack_failures.total(), 0, "{s}");
        }
    }
    /// A record whose effect this member applied and could not accept (the handler finished after
    /// its lease: released, not accepted) comes back to the same member with delivery count 2, and
    /// its idempotency key refuses it: accepted without being handed out again, never applied
    /// twice.
    #[test]
    fn a_redelivered_record_this_member_applied_is_accepted_without_running() {
        let _ = env_logger::builder().is_test(true).try_init();
        let setup = ShareSetup::new("share-keys", 1, 2_000);
        setup.produce_orders(1, 1);
        let mut consumer = setup
            .consumer(&[
                ("share.lock.renew", "false"),
                ("share.lock.safety.margin.ms", "500"),
            ])
            .with_idempotency_key(|r| {
                order_id(r.value.as_deref()).map(|id| IdempotencyKey::from(id.as_str()))
            });
        let until = Instant::now() + BOUND;
        let delivery = loop {
            assert!(Instant::now() < until, "the order never came");
            if let Some(d) = consumer
                .poll(Duration::from_millis(500))
                .expect("poll")
                .pop()
            {
                break d;
            }
        };
        assert_eq!(delivery.context().delivery_count(), 1);
        // The effect is applied inside the lease ...
        assert!(delivery.is_current());
        // ... and the handler reports after it ended: that finish cannot be an ACCEPT.
        std::thread::sleep(Duration::from_millis(2_200));
        delivery.applied();
        // The release brings it back (delivery 2) to this member, the only one: the key refuses it.
        let until = Instant::now() + Duration::from_secs(15);
        while consumer.stats().locks.refused_already_applied == 0 {
            assert!(Instant::now() < until, "not refused: {}", consumer.stats());
            let batch = consumer.poll(Duration::from_millis(300)).expect("poll");
            assert!(batch.is_empty(), "handed out again: {batch:?}");
        }
        assert_nothing_comes_back(&mut consumer, Duration::from_secs(3));
        let stats = consumer.stats();
        assert_eq!(stats.locks.applied_after_expiry, 1, "{stats}");
        assert_eq!(stats.locks.refused_already_applied, 1, "{stats}");
        // The RELEASE came after the broker's lock too (2.2 s on a 2 s lock): refused, counted. The
        // ACCEPT of the refused redelivery went through.
        assert_eq!(stats.locks.ack_failures.accept, 0, "{stats}");
        assert_eq!(stats.locks.accepted, 1, "{stats}");
        consumer.close().expect("close");
    }
    /// Renewal off, a 2 s lock, a 0.5 s margin, six records handed out at once and 400 ms per
    /// record: records 1-3 are applied inside their leases (which end 1.5 s after the fetch was
    /// sent) and 4-6 find their lease ended and skip. Each outcome is decided at the instant its
    /// handler finished and acknowledged before the next record runs, so 1-3 are accepted (not
    /// released by a decision taken at the end of the batch, 2.4 s in) and never come back; 4-6
    /// come back and are applied then. No record is applied twice.
    #[test]
    fn records_applied_inside_their_lease_are_accepted_however_late_the_batch_ends() {
        let _ = env_logger::builder().is_test(true).try_init();
        let setup = ShareSetup::new("share-finish-time", 1, 2_000);
        let ids = setup.produce_orders(1, 6);
        let mut consumer = setup.consumer(&[
            ("share.lock.renew", "false"),
            ("share.lock.safety.margin.ms", "500"),
            ("max.poll.records", "6"),
        ]);
        let stop = AtomicBool::new(false);
        // (order, delivery count, applied at): every effect, with its delivery.
        let effects: Mutex<Vec<(String, i16, Instant)>> = Mutex::default();
        let skipped: Mutex<Vec<(String, i16)>> = Mutex::default();
        let started = Instant::now();
        consumer
            .run(&stop, |record, ctx| {
                let id = order_id(record.value.as_deref()).expect("an order");
                std::thread::sleep(Duration::from_millis(400));
                if started.elapsed() > BOUND {
                    stop.store(true, Ordering::SeqCst);
                }
                if !ctx.is_current() {
                    skipped.lock().unwrap().push((id, ctx.delivery_count()));
                    return Ok(());
                }
                let mut effects = effects.lock().unwrap();
                effects.push((id, ctx.delivery_count(), Instant::now()));
                let applied: BTreeSet<&String> = effects.iter().map(|e| &e.0).collect();
                if applied.len() == ids.len() {
                    stop.store(true, Ordering::SeqCst);
                }
                Ok(())
            })
            .expect("run");
        // A record whose ACCEPT was lost or refused comes back after its 2 s lock.
        assert_nothing_comes_back(&mut consumer, Duration::from_secs(4));
        let effects = effects.into_inner().unwrap();
        let skipped = skipped.into_inner().unwrap();
        let mut applications: BTreeMap<&str, Vec<i16>> = BTreeMap::new();
        for (id, delivery, _) in &effects {
            applications.entry(id).or_default().push(*delivery);
        }
        assert_eq!(
            applications.len(),
            ids.len(),
            "every order applied: {effects:?}"
        );
        let twice: Vec<_> = applications.iter().filter(|(_, d)| d.len() > 1).collect();
        assert!(twice.is_empty(), "applied twice: {twice:?}");
        let first: Vec<&str> = effects
            .iter()
            .filter(|e| e.1 == 1)
            .map(|e| e.0.as_str())
            .collect();
        assert_eq!(
            first,
            vec!["0-0", "0-1", "0-2"],
            "applied on their first delivery (skipped: {skipped:?})"
        );
        let skipped_first: Vec<&str> = skipped
            .iter()
            .filter(|s| s.1 == 1)
            .map(|s| s.0.as_str())
            .collect();
        assert_eq!(skipped_first, vec!["0-3", "0-4", "0-5"]);
        let stats = consumer.stats();
        assert_eq!(stats.locks.accepted, 6, "{stats}");
        assert_eq!(stats.locks.applied_after_expiry, 0, "{stats}");
        // RELEASEs of 5 and 6 may come after their lock (refused: harmless); no ACCEPT may.
        assert_eq!(stats.locks.ack_failures.accept, 0, "{stats}");
        consumer.close().expect("close");
    }
}
