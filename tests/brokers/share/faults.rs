//! Share-group members that die or freeze, on real Kafka 4.4: our share worker runs as a process
//! of its own (the `share_worker` example), so it can be killed with SIGKILL or frozen with
//! SIGSTOP while it holds locks.
//!
//! What must hold: no order is lost; an order applied twice was first applied by the member that
//! was killed (and never acknowledged) or by a member whose lock ran out while it was frozen (its
//! ACCEPT then failed); and no effect is ever applied after its lease ended, the frozen member's
//! included once it resumes.

use crate::support;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rebalance_guard::share::ShareConsumer;
use support::proxy::Proxy;
use support::share::{
    all_effects, applications, order_id, wait_all_applied, worker_dir, Effect, ShareSetup,
    WorkerProcess,
};

const BOUND: Duration = Duration::from_secs(60);

/// CLOCK_MONOTONIC in ns, the clock of the workers' effect stamps.
fn mono_ns() -> u128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u128 * 1_000_000_000 + ts.tv_nsec as u128
}

/// No effect after its lease: every effect's applied stamp is before its lease's end.
fn assert_no_effect_after_lease(effects: &[Effect]) {
    let late: Vec<_> = effects
        .iter()
        .filter(|e| e.applied_ns >= e.deadline_ns)
        .collect();
    assert!(
        late.is_empty(),
        "effects applied after their lease ended: {late:?}"
    );
}

/// One effect of an in-process member: who applied which order, on which delivery, when.
#[derive(Clone, Debug)]
struct Applied {
    member: usize,
    order: String,
    delivery_count: i16,
    at: Instant,
}

mod kafka {
    use super::*;

    /// A member killed with locks held: its records come back to the other member after the lock
    /// duration and are applied there; an order is applied twice only when the killed member
    /// applied it first (and died before its ACCEPT went out), never twice by the live member.
    #[test]
    fn a_killed_members_records_come_back_to_the_others() {
        let _ = env_logger::builder().is_test(true).try_init();
        let setup = ShareSetup::new("share-kill", 2, 3_000);
        let ids: BTreeSet<String> = setup.produce_orders(2, 200).into_iter().collect();
        let dir = worker_dir("share-kill");
        let mut victim = WorkerProcess::start(&setup, &dir, "victim", 2, 20, &[]);
        let mut survivor = WorkerProcess::start(&setup, &dir, "survivor", 2, 20, &[]);
        let until = Instant::now() + BOUND;
        while victim.effects().len() < 30 {
            assert!(
                Instant::now() < until,
                "the victim applied nothing: {}",
                victim.output()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        victim.signal("KILL");
        let killed_at = mono_ns();
        victim.kill();
        wait_all_applied(&[&victim, &survivor], &ids, BOUND, "after the kill");
        assert!(
            survivor.stop(Duration::from_secs(20)),
            "{}",
            survivor.output()
        );
        let effects = all_effects(&[&victim, &survivor]);
        assert_no_effect_after_lease(&effects);
        let mut repeats = 0;
        for (order, applied) in applications(&effects) {
            if applied.len() < 2 {
                continue;
            }
            repeats += 1;
            assert_eq!(
                applied.len(),
                2,
                "{order} applied {} times: {applied:?}",
                applied.len()
            );
            let (first, second) = (&applied[0], &applied[1]);
            let (first, second) = if first.applied_ns <= second.applied_ns {
                (first, second)
            } else {
                (second, first)
            };
            assert_eq!(first.worker, "victim", "{order}: {applied:?}");
            assert_eq!(second.worker, "survivor", "{order}: {applied:?}");
            assert!(first.applied_ns < killed_at, "{order}: {applied:?}");
            assert!(second.delivery_count >= 2, "{order}: {applied:?}");
        }
        // The kill cost at most what the victim held: two workers' records in flight.
        eprintln!("killed member: {} orders, {repeats} repeat(s)", ids.len());
    }
    /// A member frozen (SIGSTOP) for longer than the lock: the others take its records over; once
    /// it resumes it applies nothing whose lease ended (its handlers find `is_current` false), and
    /// an order it applied right before the freeze and could not ACCEPT is the only kind of repeat.
    #[test]
    fn a_frozen_member_applies_nothing_after_it_resumes() {
        let _ = env_logger::builder().is_test(true).try_init();
        let lock = Duration::from_millis(3_000);
        let setup = ShareSetup::new("share-freeze", 2, lock.as_millis() as u64);
        let ids: BTreeSet<String> = setup.produce_orders(2, 150).into_iter().collect();
        let dir = worker_dir("share-freeze");
        // Slow handlers, so that the freeze catches records in the middle of their work.
        let mut frozen = WorkerProcess::start(&setup, &dir, "frozen", 2, 100, &[]);
        let mut other = WorkerProcess::start(&setup, &dir, "other", 2, 20, &[]);
        let until = Instant::now() + BOUND;
        while frozen.effects().len() < 5 {
            assert!(
                Instant::now() < until,
                "the member applied nothing: {}",
                frozen.output()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        frozen.signal("STOP");
        let stopped_at = mono_ns();
        std::thread::sleep(lock * 2);
        frozen.signal("CONT");
        let resumed_at = mono_ns();
        wait_all_applied(&[&frozen, &other], &ids, BOUND, "after the freeze");
        assert!(frozen.stop(Duration::from_secs(20)), "{}", frozen.output());
        assert!(other.stop(Duration::from_secs(20)), "{}", other.output());
        let effects = all_effects(&[&frozen, &other]);
        assert_no_effect_after_lease(&effects);
        // What the frozen member held across the freeze: no effect of it between the stop and the
        // resume (it was stopped), and after the resume only records acquired after it.
        let after_resume: Vec<_> = effects
            .iter()
            .filter(|e| e.worker == "frozen" && e.applied_ns >= stopped_at)
            .collect();
        for e in &after_resume {
            assert!(
                e.applied_ns >= resumed_at && e.deadline_ns > resumed_at,
                "the frozen member applied a record held across the freeze: {e:?}"
            );
        }
        let output = frozen.output();
        let expired_lines = output
            .lines()
            .filter(|l| l.starts_with("lease_expired"))
            .count();
        let ack_failed: BTreeSet<(i32, i64)> = output
            .lines()
            .filter(|l| l.starts_with("ack_failed"))
            .filter_map(|l| {
                let field = |k: &str| {
                    l.split_whitespace()
                        .find_map(|f| f.strip_prefix(k))
                        .and_then(|v| v.parse::<i64>().ok())
                };
                Some((field("partition=")? as i32, field("offset=")?))
            })
            .collect();
        let mut repeats = 0;
        for (order, applied) in applications(&effects) {
            if applied.len() < 2 {
                continue;
            }
            repeats += 1;
            let first = applied.iter().min_by_key(|e| e.applied_ns).expect("two");
            assert_eq!(first.worker, "frozen", "{order}: {applied:?}");
            assert!(
                first.applied_ns < stopped_at,
                "{order}: repeated, first applied after the freeze: {applied:?}"
            );
            // Explained by the freeze: that lease ended while the member was stopped, and the
            // redelivery came after it.
            assert!(
                first.deadline_ns < resumed_at,
                "{order}: repeated though its first lease outlived the freeze: {applied:?}"
            );
            let second = applied
                .iter()
                .find(|e| !std::ptr::eq(*e, first))
                .expect("two");
            assert!(second.delivery_count >= 2, "{order}: {applied:?}");
            assert!(
                second.applied_ns > first.deadline_ns,
                "{order}: {applied:?}"
            );
        }
        eprintln!(
            "frozen member: {} orders; {expired_lines} effect(s) skipped after the resume \
             (lease_expired); {} failed acknowledgement(s); {repeats} repeat(s)",
            ids.len(),
            ack_failed.len()
        );
    }
    /// Two members (two workers each) bootstrapped through a proxy that holds all their traffic
    /// for longer than `request.timeout.ms`, twice, as a broker that stops answering (SIGSTOP)
    /// and comes back: the timeouts are retried with backoff, both members keep running to the
    /// end, and every order is applied. Each effect is recorded with its delivery count and time.
    #[test]
    fn share_members_survive_a_broker_that_stops_answering_past_the_request_timeout() {
        let _ = env_logger::builder().is_test(true).try_init();
        let request_timeout = Duration::from_millis(2_000);
        let hold = request_timeout * 2 + Duration::from_millis(500);
        let setup = ShareSetup::new("share-stall", 2, 15_000);
        let ids: BTreeSet<String> = setup.produce_orders(2, 40).into_iter().collect();
        let proxy = Proxy::start(&setup.bootstrap);
        let config = || {
            setup.config_via(
                proxy.addr(),
                &[(
                    "request.timeout.ms",
                    &request_timeout.as_millis().to_string(),
                )],
            )
        };
        let stop = Arc::new(AtomicBool::new(false));
        let effects: Arc<Mutex<Vec<Applied>>> = Arc::default();
        // How each member's run ended, as soon as it did.
        let ended: Arc<Mutex<Vec<(usize, String)>>> = Arc::default();
        let members: Vec<_> = (0..2)
            .map(|member| {
                let consumer =
                    ShareConsumer::subscribe(config(), &[&setup.topic]).expect("subscribe");
                let (stop, effects, ended) =
                    (Arc::clone(&stop), Arc::clone(&effects), Arc::clone(&ended));
                std::thread::spawn(move || {
                    let mut consumer = consumer;
                    let result = consumer.run_with_workers(&stop, 2, |record, ctx| {
                        std::thread::sleep(Duration::from_millis(150));
                        if !ctx.is_current() {
                            return Ok(());
                        }
                        let order = order_id(record.value.as_deref()).expect("an order");
                        effects.lock().unwrap().push(Applied {
                            member,
                            order,
                            delivery_count: ctx.delivery_count(),
                            at: Instant::now(),
                        });
                        Ok(())
                    });
                    ended.lock().unwrap().push((member, format!("{result:?}")));
                    let closed = consumer.close();
                    (result, closed)
                })
            })
            .collect();
        let applied = |effects: &Mutex<Vec<Applied>>| -> BTreeSet<String> {
            effects
                .lock()
                .unwrap()
                .iter()
                .map(|e| e.order.clone())
                .collect()
        };
        let until = Instant::now() + BOUND;
        for (round, before) in [(1, 10), (2, 30)] {
            while applied(&effects).len() < before {
                assert!(
                    Instant::now() < until,
                    "round {round}: fewer than {before} orders applied"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            proxy.hold();
            std::thread::sleep(hold);
            proxy.release();
            let ended_now = ended.lock().unwrap().clone();
            assert!(
                ended_now.is_empty(),
                "members ended during stall {round}: {ended_now:?}"
            );
        }
        while applied(&effects).len() < ids.len() {
            assert!(
                Instant::now() < until,
                "orders never applied: {:?}",
                ids.difference(&applied(&effects)).collect::<Vec<_>>()
            );
            let ended_now = ended.lock().unwrap().clone();
            assert!(
                ended_now.is_empty(),
                "members ended before every order was applied: {ended_now:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        stop.store(true, Ordering::SeqCst);
        for (index, member) in members.into_iter().enumerate() {
            let (result, closed) = member.join().expect("member thread");
            assert!(result.is_ok(), "member {index}: {result:?}");
            if let Err(e) = closed {
                eprintln!("member {index}: close: {e}");
            }
        }
        assert_eq!(applied(&effects), ids);
        let effects = effects.lock().unwrap().clone();
        let repeats = effects.len() - ids.len();
        eprintln!(
            "{} effects for {} orders ({repeats} repeated); by member: {:?}; deliveries > 1: {}",
            effects.len(),
            ids.len(),
            [0, 1].map(|m| effects.iter().filter(|e| e.member == m).count()),
            effects.iter().filter(|e| e.delivery_count > 1).count()
        );
        let first = effects.iter().map(|e| e.at).min().expect("effects");
        let last = effects.iter().map(|e| e.at).max().expect("effects");
        eprintln!("effects over {:?}", last - first);
    }
    /// Member A (two workers, handlers of 6 s) reaches the broker through a proxy that holds all
    /// its traffic for 4.5 s (past its 2 s `request.timeout.ms`, as a broker that stops answering
    /// it) while both its workers are in the middle of a handler; member B (fast handlers) reaches
    /// the broker directly. A's fetch times out during the stall and A drops its connection; once
    /// the traffic flows the broker sees it closed, ends A's share session and releases every
    /// record A acquired, and B acquires them again (delivery d+1) at once. A's handlers return
    /// about a second after the stall's end: their leases must read not current by then. No
    /// effect of delivery d of a record comes after the stall's end when delivery d+1 of that
    /// record exists.
    #[test]
    fn no_effect_of_a_delivery_after_a_stall_that_ended_its_session() {
        let _ = env_logger::builder().is_test(true).try_init();
        let request_timeout = Duration::from_millis(2_000);
        let hold = request_timeout * 2 + Duration::from_millis(500);
        let slow = Duration::from_secs(6);
        let setup = ShareSetup::new("share-stall-late", 1, 15_000);
        let ids: BTreeSet<String> = setup.produce_orders(1, 10).into_iter().collect();
        let proxy = Proxy::start(&setup.bootstrap);
        let stop = Arc::new(AtomicBool::new(false));
        let effects: Arc<Mutex<Vec<Applied>>> = Arc::default();
        // Every handler start, as an effect would be recorded: a delivery that exists.
        let starts: Arc<Mutex<Vec<Applied>>> = Arc::default();
        let start_member = |member: usize, bootstrap: &str, handler_time: Duration| {
            let config = setup.config_via(
                bootstrap,
                &[(
                    "request.timeout.ms",
                    &request_timeout.as_millis().to_string(),
                )],
            );
            let consumer = ShareConsumer::subscribe(config, &[&setup.topic]).expect("subscribe");
            let (stop, effects, starts) = (stop.clone(), effects.clone(), starts.clone());
            std::thread::spawn(move || {
                let mut consumer = consumer;
                let result = consumer.run_with_workers(&stop, 2, |record, ctx| {
                    let order = order_id(record.value.as_deref()).expect("an order");
                    let seen = |list: &Mutex<Vec<Applied>>| {
                        list.lock().unwrap().push(Applied {
                            member,
                            order: order.clone(),
                            delivery_count: ctx.delivery_count(),
                            at: Instant::now(),
                        })
                    };
                    seen(&starts);
                    std::thread::sleep(handler_time);
                    if ctx.is_current() {
                        seen(&effects);
                    }
                    Ok(())
                });
                let stats = consumer.stats();
                let closed = consumer.close();
                (result, closed, stats)
            })
        };
        let a = start_member(0, proxy.addr(), slow);
        let until = Instant::now() + BOUND;
        // Both of A's workers in the middle of a handler before B takes the rest.
        while starts.lock().unwrap().len() < 2 {
            assert!(Instant::now() < until, "A started no handlers");
            std::thread::sleep(Duration::from_millis(20));
        }
        let b = start_member(1, &setup.bootstrap, Duration::from_millis(100));
        std::thread::sleep(Duration::from_millis(500));
        proxy.hold();
        std::thread::sleep(hold);
        proxy.release();
        let stall_end = Instant::now();
        let applied = |effects: &Mutex<Vec<Applied>>| -> BTreeSet<String> {
            effects
                .lock()
                .unwrap()
                .iter()
                .map(|e| e.order.clone())
                .collect()
        };
        while applied(&effects) != ids {
            assert!(
                Instant::now() < until,
                "orders never applied: {:?}",
                ids.difference(&applied(&effects)).collect::<Vec<_>>()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        // A's handlers that ran through the stall return a second after its end.
        let handlers_done = stall_end + slow;
        while Instant::now() < handlers_done {
            std::thread::sleep(Duration::from_millis(50));
        }
        stop.store(true, Ordering::SeqCst);
        for (name, member) in [("A", a), ("B", b)] {
            let (result, closed, stats) = member.join().expect("member thread");
            assert!(result.is_ok(), "member {name}: {result:?}");
            if let Err(e) = closed {
                eprintln!("member {name}: close: {e}");
            }
            eprintln!("member {name}: {stats:?}");
        }
        let effects = effects.lock().unwrap().clone();
        let starts = starts.lock().unwrap().clone();
        let stale: Vec<_> = effects
            .iter()
            .filter(|e| e.at > stall_end)
            .filter(|e| {
                starts
                    .iter()
                    .any(|s| s.order == e.order && s.delivery_count > e.delivery_count)
            })
            .collect();
        eprintln!(
            "{} effects, {} handler starts ({} of a delivery > 1)",
            effects.len(),
            starts.len(),
            starts.iter().filter(|s| s.delivery_count > 1).count(),
        );
        assert!(
            stale.is_empty(),
            "effects after the stall's end of a delivery the broker had delivered again: {stale:?}"
        );
    }
}
