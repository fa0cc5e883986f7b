//! Share-group leases that belong to their share session, and acknowledgements that belong to
//! their delivery, on real Kafka 4.4: a broker releases every record a session acquired the
//! moment the session ends (a close), whatever the lock had left, so a lease of that session
//! must read not current from then on; and one acknowledgement the broker refuses rolls back
//! the other acknowledgements of its partition in the same request, so one that may be refused
//! never travels with ACCEPTs that must not.

use crate::support;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rebalance_guard::guard::{AckType, LockLease};
use rebalance_guard::share::ShareConsumer;
use support::proxy::Proxy;
use support::share::ShareSetup;

const BOUND: Duration = Duration::from_secs(40);

mod kafka {
    use super::*;

    /// Member A holds a delivery (handed out, not finished) and closes: its close releases the
    /// record at the broker, and member B gets it again (delivery 2) well within the lock. A's
    /// lease must read not current from the close on, or A's handler would apply the effect while
    /// B applies it too.
    #[test]
    fn a_closed_members_held_delivery_is_not_current_from_the_close() {
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
    fn a_cut_connection_ends_every_lease_of_its_share_session() {
        let _ = env_logger::builder().is_test(true).try_init();
        let lock = Duration::from_secs(30);
        let setup = ShareSetup::new("share-cut", 1, lock.as_millis() as u64);
        let ids: BTreeSet<String> = setup.produce_orders(1, 20).into_iter().collect();
        let proxy = Proxy::start(&setup.bootstrap);
        let config = setup.config_via(
            proxy.addr(),
            &[
                ("share.lock.renew", "false"),
                ("request.timeout.ms", "2000"),
            ],
        );
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
    /// Member A (through a proxy) polls deliveries and keeps them, sending nothing more: no
    /// request of its share session is out when the proxy cuts the connection, so no answer will
    /// tell A that the broker ended the session and released the records (member B, straight to
    /// the broker, gets them again at delivery 2). The idle fetch thread must notice the closed
    /// connection by itself and end the session's leases within its watch interval, not at A's
    /// next request (without the watch they read current for the whole 30 s lock).
    #[test]
    fn a_member_that_sends_nothing_learns_of_a_cut_connection_and_its_held_deliveries_end() {
        let _ = env_logger::builder().is_test(true).try_init();
        let lock = Duration::from_secs(30);
        let setup = ShareSetup::new("share-idle-cut", 1, lock.as_millis() as u64);
        setup.produce_orders(1, 3);
        let proxy = Proxy::start(&setup.bootstrap);
        let config = setup.config_via(
            proxy.addr(),
            &[
                ("share.lock.renew", "false"),
                ("request.timeout.ms", "2000"),
            ],
        );
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
    /// One partition, renewal off, a 3 s lock (a 2 s lease). Member A (through a proxy, one record
    /// per fetch) holds record 0 past its lease (not past the broker's lock yet), then polls record
    /// 1, and finishes both: 0 late (RELEASE), 1 inside its lease (ACCEPT). The proxy holds the
    /// request that carries them until record 0's lock has surely ended at the broker, well inside
    /// record 1's. Kafka stops at the first invalid offset of a partition and rolls back the
    /// partition's other acknowledgements in that request: if the late RELEASE shared its batch
    /// with the ACCEPT, the ACCEPT of an effect applied well inside its lease would be refused and
    /// the record delivered again. Kept apart, the ACCEPT lands.
    #[test]
    fn a_late_release_held_in_the_network_does_not_take_an_accept_down_with_it() {
        let _ = env_logger::builder().is_test(true).try_init();
        let setup = ShareSetup::new("share-late-held", 1, 3_000);
        setup.produce_orders(1, 4);
        let proxy = Proxy::start(&setup.bootstrap);
        let config = setup.config_via(
            proxy.addr(),
            &[
                ("share.lock.renew", "false"),
                ("max.poll.records", "1"),
                ("share.lock.safety.margin.ms", "1000"),
            ],
        );
        let refused: Arc<Mutex<Vec<(i64, AckType, String)>>> = Arc::default();
        let hook = refused.clone();
        let mut a = ShareConsumer::subscribe(config, &[&setup.topic])
            .expect("subscribe")
            .on_ack_failure(move |_tp, offset, kind, why| {
                hook.lock().unwrap().push((offset, kind, why.to_string()));
            });
        let until = Instant::now() + BOUND;
        let next = |a: &mut ShareConsumer| loop {
            assert!(Instant::now() < until, "nothing polled within {BOUND:?}");
            if let Some(d) = a.poll(Duration::from_millis(300)).expect("poll").pop() {
                break d;
            }
        };
        let first = next(&mut a);
        let lease = first.context().lease().clone();
        let deadline = lease.deadline().expect("a current lease");
        // Past the lease, inside the lock (the lease ends a second before the lock can).
        while lease.now() < deadline + Duration::from_millis(100) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!first.is_current());
        let second = next(&mut a);
        assert!(second.is_current(), "a fresh delivery");
        assert_ne!(first.record().offset, second.record().offset);
        let lock_ends_by = lease.lock_ends_by();
        assert!(
            lease.now() < lock_ends_by,
            "the first record's lock may have ended already: the test was too slow"
        );
        let (late_offset, accepted_offset) = (first.record().offset, second.record().offset);
        first.applied();
        second.applied();
        proxy.hold();
        // Builds and writes the request that carries both (held in the proxy).
        let _ = a.poll(Duration::from_millis(200)).expect("poll");
        while lease.now() < lock_ends_by + Duration::from_millis(300) {
            std::thread::sleep(Duration::from_millis(10));
        }
        proxy.release();
        let settle = Instant::now() + Duration::from_secs(3);
        while Instant::now() < settle {
            for d in a.poll(Duration::from_millis(200)).expect("poll") {
                d.skipped();
            }
        }
        let stats = a.stats();
        let refused = refused.lock().unwrap().clone();
        assert!(
            !refused
                .iter()
                .any(|(offset, kind, _)| *offset == accepted_offset && *kind == AckType::Accept),
            "the ACCEPT of {accepted_offset} (applied inside its lease) was refused with the late \
             RELEASE of {late_offset}: {refused:?}; {stats}"
        );
        assert_eq!(stats.locks.ack_failures.accept, 0, "{stats}");
        drop(a);
    }
}
