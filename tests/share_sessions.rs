//! Share-group leases that belong to their share session, and acknowledgements that belong to
//! their delivery, on real Kafka 4.4: a broker releases every record a session acquired the
//! moment the session ends (a close), whatever the lock had left, so a lease of that session
//! must read not current from then on; and one acknowledgement the broker refuses rolls back
//! the other acknowledgements of its partition in the same request, so one that may be refused
//! never travels with ACCEPTs that must not.

mod support;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rebalance_guard::guard::{AckType, LockLease};
use rebalance_guard::share::{ShareConfig, ShareConsumer};
use support::proxy::Proxy;
use support::share::{order_id, ShareSetup};

const BOUND: Duration = Duration::from_secs(40);

/// offset -> (applied at, lease end) of every effect.
type Effects = Arc<Mutex<HashMap<i64, Vec<(Instant, Instant)>>>>;

/// Member A holds a delivery (handed out, not finished) and closes: its close releases the
/// record at the broker, and member B gets it again (delivery 2) well within the lock. A's
/// lease must read not current from the close on, or A's handler would apply the effect while
/// B applies it too.
#[test]
fn a_closed_members_held_delivery_is_not_current_from_the_close_on_kafka() {
    let _ = env_logger::builder().is_test(true).try_init();
    let lock = Duration::from_secs(20);
    let setup = ShareSetup::new("share-close-held", 1, lock.as_millis() as u64);
    setup.produce_orders(1, 1);
    let mut a = setup.consumer(&[("share.lock.renew", "false")]);
    let until = Instant::now() + BOUND;
    let held = loop {
        assert!(Instant::now() < until, "A got nothing within {BOUND:?}");
        let mut batch = a.poll(Duration::from_millis(500)).expect("poll");
        if let Some(delivery) = batch.pop() {
            break delivery;
        }
    };
    let lease = held.context().lease().clone();
    assert!(lease.is_current(), "a fresh delivery");
    let closed_at = Instant::now();
    a.close().expect("close");
    assert!(
        !lease.is_current() && !held.is_current(),
        "A's delivery still reads current after A closed"
    );
    let mut b = setup.consumer(&[("share.lock.renew", "false")]);
    let again = loop {
        assert!(Instant::now() < until, "B got nothing within {BOUND:?}");
        let mut batch = b.poll(Duration::from_millis(500)).expect("poll");
        if let Some(delivery) = batch.pop() {
            break delivery;
        }
    };
    assert_eq!(again.context().delivery_count(), 2);
    assert!(
        closed_at.elapsed() < lock,
        "B got it only after the lock: the close did not release it"
    );
    assert!(again.is_current());
    assert!(!held.is_current(), "A's delivery revived");
    again.applied();
    drop(held);
    b.close().expect("close");
}

/// Member A (two workers, bootstrapped through a proxy) has both handlers running and records
/// queued and buffered behind them when the proxy cuts every connection it carries (and holds
/// the new ones): the broker ends A's share session and releases everything it acquired, and
/// member B (straight to the broker) acquires those records again (delivery 2) well within the
/// 30 s lock. From the cut on none of A's leases may read current: the running handlers'
/// leases read not current by the time B holds their records, no record A had queued or
/// buffered starts with a current lease, and the handlers, which return `Ok` after the cut,
/// get nothing accepted.
#[test]
fn a_cut_connection_ends_every_lease_of_its_share_session_kafka() {
    let _ = env_logger::builder().is_test(true).try_init();
    let lock = Duration::from_secs(30);
    let setup = ShareSetup::new("share-cut", 1, lock.as_millis() as u64);
    let ids: BTreeSet<String> = setup.produce_orders(1, 20).into_iter().collect();
    let proxy = Proxy::start(&setup.bootstrap);
    let config = ShareConfig::builder()
        .bootstrap_servers([proxy.addr()])
        .group_id(&setup.group)
        .set("share.lock.renew", "false")
        .set("request.timeout.ms", "2000")
        .build()
        .expect("valid share configuration");
    let accepts_failed: Arc<Mutex<Vec<(i64, String)>>> = Arc::default();
    let hook = accepts_failed.clone();
    let mut a = ShareConsumer::subscribe(config, &[&setup.topic])
        .expect("subscribe")
        .on_ack_failure(move |_tp, offset, kind, why| {
            if kind == AckType::Accept {
                hook.lock().unwrap().push((offset, why.to_string()));
            }
        });
    // The leases of A's handlers running at the cut, what A started after it (offset, delivery,
    // current at the start), and how many of the running handlers returned.
    let held: Arc<Mutex<Vec<(i64, LockLease)>>> = Arc::default();
    let after_cut: Arc<Mutex<Vec<(i64, i16, bool)>>> = Arc::default();
    let returned = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (cut, release, stop) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let member_a = {
        let (held, after_cut, returned) = (held.clone(), after_cut.clone(), returned.clone());
        let (cut, release, stop) = (cut.clone(), release.clone(), stop.clone());
        std::thread::spawn(move || {
            let result = a.run_with_workers(&stop, 2, |record, ctx| {
                if cut.load(Ordering::SeqCst) {
                    after_cut.lock().unwrap().push((
                        record.offset,
                        ctx.delivery_count(),
                        ctx.is_current(),
                    ));
                    return Ok(());
                }
                held.lock()
                    .unwrap()
                    .push((record.offset, ctx.lease().clone()));
                let until = Instant::now() + BOUND;
                while !release.load(Ordering::SeqCst) && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(10));
                }
                // Returns Ok without asking: the guard alone must see that the lease ended.
                returned.fetch_add(1, Ordering::SeqCst);
                Ok(())
            });
            let stats = a.stats();
            let closed = a.close();
            (result, closed, stats)
        })
    };
    let until = Instant::now() + BOUND;
    while held.lock().unwrap().len() < 2 {
        assert!(Instant::now() < until, "A's handlers never ran");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Both workers are blocked: whatever A acquired beyond their two records waits in the
    // workers' queue or the buffer. New connections are held, so A acquires nothing after
    // the cut.
    cut.store(true, Ordering::SeqCst);
    let cut_at = Instant::now();
    proxy.hold();
    proxy.cut();
    let mut b = setup.consumer(&[("share.lock.renew", "false")]);
    let mut b_holds = Vec::new();
    let mut b_offsets = BTreeSet::new();
    while b_offsets.len() < ids.len() {
        assert!(
            cut_at.elapsed() < lock / 2,
            "B holds {} of {} records {:?} after the cut: A's session was not released",
            b_offsets.len(),
            ids.len(),
            cut_at.elapsed()
        );
        for delivery in b.poll(Duration::from_millis(500)).expect("poll") {
            let offset = delivery.record().offset;
            // The moment B holds one of A's running records, A's lease of it is over.
            for (held_offset, lease) in held.lock().unwrap().iter() {
                if *held_offset == offset {
                    assert_eq!(delivery.context().delivery_count(), 2, "{offset}");
                    assert!(
                        !lease.is_current(),
                        "A's running handler of {offset} still reads current {:?} after the \
                         cut, while B holds the record (delivery 2)",
                        cut_at.elapsed()
                    );
                }
            }
            b_offsets.insert(offset);
            b_holds.push(delivery);
        }
    }
    release.store(true, Ordering::SeqCst);
    while returned.load(Ordering::SeqCst) < 2 {
        assert!(Instant::now() < until, "A's handlers never returned");
        std::thread::sleep(Duration::from_millis(10));
    }
    // A's poll thread has its workers free now: it must hand out nothing of what it held
    // (nothing new reaches it). Watched for two seconds.
    let window = Instant::now() + Duration::from_secs(2);
    while Instant::now() < window {
        let started = after_cut.lock().unwrap().clone();
        assert!(
            started.iter().all(|(_, _, current)| !current),
            "A started records it held before the cut with a current lease: {started:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::SeqCst);
    proxy.release();
    let (result, closed, stats) = member_a.join().expect("member A");
    result.expect("A's run");
    if let Err(e) = closed {
        eprintln!("A: close: {e}");
    }
    for delivery in b_holds {
        delivery.applied();
    }
    b.close().expect("close B");
    assert_eq!(
        stats.locks.accepted, 0,
        "A accepted records whose session the cut ended: {stats:?}"
    );
    let held_offsets: BTreeSet<i64> = held.lock().unwrap().iter().map(|(o, _)| *o).collect();
    let failed = accepts_failed.lock().unwrap().clone();
    assert!(
        failed.iter().all(|(o, _)| !held_offsets.contains(o)),
        "A decided ACCEPTs for its running records after the cut: {failed:?}"
    );
    eprintln!(
        "cut: A held {held_offsets:?}, started {:?} after the cut; {stats:?}",
        after_cut.lock().unwrap()
    );
}

/// Two members, renewal off, a 3 s lock: one record's handler sleeps 4 s (its lease ends, it
/// applies nothing and is given back late) among records applied in 50 ms. The late
/// acknowledgement must not share a request's partition batch with the others' ACCEPTs, which
/// a refusal would roll back: no ACCEPT of an effect applied more than a second before its
/// lease's end is refused.
#[test]
fn a_late_release_does_not_roll_back_the_partitions_accepts_kafka() {
    let _ = env_logger::builder().is_test(true).try_init();
    let setup = ShareSetup::new("share-late-release", 1, 3_000);
    let ids: BTreeSet<String> = setup.produce_orders(1, 200).into_iter().collect();
    let effects: Effects = Arc::default();
    let refused: Arc<Mutex<Vec<(i64, String)>>> = Arc::default();
    let applied: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let slow_done = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let members: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|name| {
            let (effects, refused, applied) = (effects.clone(), refused.clone(), applied.clone());
            let (slow_done, stop) = (slow_done.clone(), stop.clone());
            let refused_hook = refused.clone();
            let mut consumer = setup
                .consumer(&[("share.lock.renew", "false")])
                .on_ack_failure(move |_tp, offset, kind, why| {
                    if kind == AckType::Accept {
                        refused_hook.lock().unwrap().push((offset, why.to_string()));
                    }
                });
            std::thread::Builder::new()
                .name(format!("member-{name}"))
                .spawn(move || {
                    let _ = refused;
                    consumer
                        .run_with_workers(&stop, 2, |record, ctx| {
                            let id = order_id(record.value.as_deref()).expect("an order");
                            if id == "0-20" && !slow_done.swap(true, Ordering::SeqCst) {
                                // Outlives its lease (3 s lock, 1 s margin) and its lock.
                                std::thread::sleep(Duration::from_secs(4));
                            } else {
                                std::thread::sleep(Duration::from_millis(50));
                            }
                            if !ctx.is_current() {
                                return Ok(());
                            }
                            let deadline = ctx.deadline().expect("a current lease");
                            effects
                                .lock()
                                .unwrap()
                                .entry(record.offset)
                                .or_default()
                                .push((Instant::now(), deadline));
                            applied.lock().unwrap().insert(id);
                            Ok(())
                        })
                        .expect("run");
                    let stats = consumer.stats();
                    consumer.close().expect("close");
                    stats
                })
                .expect("spawn a member")
        })
        .collect();
    let until = Instant::now() + BOUND;
    while applied.lock().unwrap().len() < ids.len() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::SeqCst);
    let stats: Vec<_> = members
        .into_iter()
        .map(|m| m.join().expect("member"))
        .collect();
    assert_eq!(
        applied.lock().unwrap().len(),
        ids.len(),
        "not every order applied within {BOUND:?}: {stats:?}"
    );
    assert!(
        slow_done.load(Ordering::SeqCst),
        "the slow record never ran"
    );
    let effects = effects.lock().unwrap();
    let wrongly: Vec<_> = refused
        .lock()
        .unwrap()
        .iter()
        .filter(|(offset, _)| {
            effects.get(offset).is_some_and(|list| {
                list.iter().any(|(at, deadline)| {
                    deadline.saturating_duration_since(*at) > Duration::from_secs(1)
                })
            })
        })
        .cloned()
        .collect();
    assert!(
        wrongly.is_empty(),
        "ACCEPTs of effects applied well inside their lease were refused: {wrongly:?}; {stats:?}"
    );
}

/// Member A (through a proxy) polls deliveries and keeps them, sending nothing more: no
/// request of its share session is out when the proxy cuts the connection, so no answer will
/// tell A that the broker ended the session and released the records (member B, straight to
/// the broker, gets them again at delivery 2). The idle fetch thread must notice the closed
/// connection by itself and end the session's leases within its watch interval, not at A's
/// next request (without the watch they read current for the whole 30 s lock).
#[test]
fn a_member_that_sends_nothing_learns_of_a_cut_connection_and_its_held_deliveries_end_kafka() {
    let _ = env_logger::builder().is_test(true).try_init();
    let lock = Duration::from_secs(30);
    let setup = ShareSetup::new("share-idle-cut", 1, lock.as_millis() as u64);
    setup.produce_orders(1, 3);
    let proxy = Proxy::start(&setup.bootstrap);
    let config = ShareConfig::builder()
        .bootstrap_servers([proxy.addr()])
        .group_id(&setup.group)
        .set("share.lock.renew", "false")
        .set("request.timeout.ms", "2000")
        .build()
        .expect("valid share configuration");
    let mut a = ShareConsumer::subscribe(config, &[&setup.topic]).expect("subscribe");
    let until = Instant::now() + BOUND;
    let mut held = Vec::new();
    while held.len() < 3 {
        assert!(
            Instant::now() < until,
            "A got {} of 3 within {BOUND:?}",
            held.len()
        );
        held.extend(a.poll(Duration::from_millis(500)).expect("poll"));
    }
    assert!(held.iter().all(|d| d.is_current()), "fresh deliveries");
    // Let the fetch thread finish whatever it was doing: then nothing of A's is out.
    std::thread::sleep(Duration::from_millis(200));
    let cut_at = Instant::now();
    proxy.cut();
    let noticed = Instant::now() + Duration::from_secs(2);
    while held.iter().any(|d| d.is_current()) && Instant::now() < noticed {
        std::thread::sleep(Duration::from_millis(5));
    }
    let current: Vec<i64> = held
        .iter()
        .filter(|d| d.is_current())
        .map(|d| d.record().offset)
        .collect();
    assert!(
        current.is_empty(),
        "A's deliveries {current:?} still read current {:?} after the broker closed its idle \
         connection",
        cut_at.elapsed()
    );
    // The broker did release them: B gets them again, well within the lock.
    let mut b = setup.consumer(&[("share.lock.renew", "false")]);
    let mut again = Vec::new();
    while again.len() < 3 {
        assert!(
            Instant::now() < until,
            "B got {} of A's 3 records within {BOUND:?}",
            again.len()
        );
        again.extend(b.poll(Duration::from_millis(500)).expect("poll"));
    }
    assert!(again.iter().all(|d| d.context().delivery_count() == 2));
    assert!(cut_at.elapsed() < lock, "B got them only after the lock");
    assert!(
        held.iter().all(|d| !d.is_current()),
        "A's deliveries revived"
    );
    for d in again {
        d.applied();
    }
    drop(held);
    b.close().expect("close");
    drop(a);
}
