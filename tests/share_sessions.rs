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

use rebalance_guard::guard::AckType;
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
