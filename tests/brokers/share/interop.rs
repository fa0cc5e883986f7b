//! Our share consumers and Apache Kafka's Java `KafkaShareConsumer` (`scripts/SharePeer.java`,
//! explicit acknowledgement) in one share group on real Kafka 4.4: the broker hands records of
//! the same partitions to members of both clients, every order is applied once between them, and
//! when a Java member is killed with locks held its records come back to the others after the
//! lock duration, applied again only where the killed member had applied them.

use crate::support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rebalance_guard::share::{ShareConsumer, ShareStats};
use rebalance_guard::IdempotencyKey;
use support::share::{order_id, ShareSetup};
use support::share_peer::{ShareEvent, SharePeer, SharePeerSpec};

const BOUND: Duration = Duration::from_secs(60);

/// Which member applied each order, in order of application.
type Applied = Arc<Mutex<BTreeMap<String, Vec<String>>>>;

/// Starts one of ours on a thread; `joined` is set once the broker assigned it partitions.
fn ours(
    setup: &ShareSetup,
    name: &'static str,
    applied: Applied,
    stop: Arc<AtomicBool>,
    joined: Arc<AtomicBool>,
) -> JoinHandle<ShareStats> {
    let config = setup.config(&[("max.poll.records", "20"), ("client.id", name)]);
    let topic = setup.topic.clone();
    std::thread::spawn(move || {
        let mut consumer = ShareConsumer::subscribe(config, &[&topic])
            .expect("subscribe")
            .with_idempotency_key(|r| {
                order_id(r.value.as_deref()).map(|id| IdempotencyKey::from(id.as_str()))
            });
        let until = Instant::now() + BOUND;
        while consumer.assignment().is_empty() {
            assert!(
                Instant::now() < until,
                "{name}: no assignment within {BOUND:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        joined.store(true, Ordering::SeqCst);
        consumer
            .run_with_workers(&stop, 2, |record, ctx| {
                std::thread::sleep(Duration::from_millis(5));
                if ctx.is_current() {
                    let id = order_id(record.value.as_deref()).expect("an order");
                    applied
                        .lock()
                        .unwrap()
                        .entry(id)
                        .or_default()
                        .push(name.to_string());
                }
                Ok(())
            })
            .expect("run_with_workers");
        let stats = consumer.stats();
        consumer.close().expect("close");
        stats
    })
}

/// A Java member; `small` bounds each fetch to 20 records (`share.acquire.mode=record_limit`),
/// so that it does not acquire everything at once.
fn java(setup: &ShareSetup, name: &str, process_ms: u64, small: bool) -> SharePeer {
    let mut spec = SharePeerSpec::new(&setup.bootstrap, &setup.group, &setup.topic, name);
    spec.process_ms = process_ms;
    if small {
        spec.settings.push(("max.poll.records".into(), "20".into()));
        spec.settings
            .push(("share.acquire.mode".into(), "record_limit".into()));
    }
    SharePeer::start(spec)
}

fn wait_joined(flags: &[&Arc<AtomicBool>]) {
    let until = Instant::now() + BOUND;
    while !flags.iter().all(|f| f.load(Ordering::SeqCst)) {
        assert!(Instant::now() < until, "ours not assigned within {BOUND:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Adds a Java member's `applied` events (keys are order ids) to `applied`.
fn merge_java(applied: &Applied, events: &[ShareEvent], name: &str) {
    let mut applied = applied.lock().unwrap();
    for e in events.iter().filter(|e| e.event == "applied") {
        let key = e.key.clone().expect("a key");
        applied.entry(key).or_default().push(name.to_string());
    }
}

fn wait_all(ids: &[String], count: impl Fn() -> usize, what: &str) {
    let until = Instant::now() + BOUND;
    while count() < ids.len() {
        assert!(
            Instant::now() < until,
            "{what}: {} of {} applied",
            count(),
            ids.len()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Two of ours and two Java members on two partitions (so partitions are shared): every order
/// applied exactly once, by members of both clients, no acknowledgement refused.
/// Produces a few orders at a time until each of `peers` applied one. A share group hands a
/// record to whichever member fetches it first, so a JVM that joins after its sibling acquired
/// the whole first batch would wait for records that never come (it did once, under load: one
/// Java member took all 40 first orders before the other had joined).
fn produce_until_each_applied(setup: &ShareSetup, peers: &[&SharePeer], ids: &mut Vec<String>) {
    let deadline = Instant::now() + BOUND;
    while peers
        .iter()
        .any(|peer| peer.events_of("applied").is_empty())
    {
        let applied: Vec<usize> = peers.iter().map(|p| p.events_of("applied").len()).collect();
        assert!(
            Instant::now() < deadline,
            "the Java members did not each apply an order within {BOUND:?}: {applied:?}"
        );
        // Paces the production (the condition above is what the loop waits for): one more
        // small batch per half second, for the member that has not fetched yet.
        std::thread::sleep(Duration::from_millis(500));
        if peers
            .iter()
            .any(|peer| peer.events_of("applied").is_empty())
        {
            ids.extend(setup.produce_orders(2, 5));
        }
    }
}

mod kafka {
    use super::*;

    #[test]
    fn ours_and_java_share_one_group_and_apply_each_order_once() {
        let _ = env_logger::builder().is_test(true).try_init();
        let setup = ShareSetup::new("share-interop", 2, 15_000);
        // The Java members join first (a JVM starts in seconds, our members in milliseconds) and
        // take the first orders; ours join once both applied some, then the rest is produced.
        let mut ids = setup.produce_orders(2, 20);
        let applied: Applied = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let j1 = java(&setup, "java-1", 5, true);
        let j2 = java(&setup, "java-2", 5, true);
        produce_until_each_applied(&setup, &[&j1, &j2], &mut ids);
        let (joined1, joined2): (Arc<AtomicBool>, Arc<AtomicBool>) = Default::default();
        let o1 = ours(
            &setup,
            "ours-1",
            applied.clone(),
            stop.clone(),
            joined1.clone(),
        );
        let o2 = ours(
            &setup,
            "ours-2",
            applied.clone(),
            stop.clone(),
            joined2.clone(),
        );
        wait_joined(&[&joined1, &joined2]);
        ids.extend(setup.produce_orders(2, 400));
        let count = || {
            let mut all = applied.lock().unwrap().clone();
            for (peer, name) in [(&j1, "java-1"), (&j2, "java-2")] {
                for e in peer.events_of("applied") {
                    all.entry(e.key.clone().unwrap_or_default())
                        .or_default()
                        .push(name.into());
                }
            }
            all.len()
        };
        wait_all(&ids, count, "two clients in one share group");
        stop.store(true, Ordering::SeqCst);
        let stats = [o1.join().unwrap(), o2.join().unwrap()];
        let (e1, e2) = (j1.close(), j2.close());
        let java_refused = e1
            .iter()
            .chain(&e2)
            .filter(|e| e.event == "ack_failed")
            .count();
        merge_java(&applied, &e1, "java-1");
        merge_java(&applied, &e2, "java-2");
        let applied = applied.lock().unwrap();
        let twice: Vec<_> = applied.iter().filter(|(_, by)| by.len() > 1).collect();
        assert!(twice.is_empty(), "applied twice without a fault: {twice:?}");
        assert_eq!(applied.len(), ids.len());
        let by_ours = applied
            .values()
            .filter(|by| by[0].starts_with("ours"))
            .count();
        let by_java = applied.len() - by_ours;
        assert!(by_ours > 0 && by_java > 0, "ours {by_ours}, java {by_java}");
        // Once ours joined, both clients kept taking records (not one of them idle).
        let java_late = e1
            .iter()
            .chain(&e2)
            .filter(|e| e.event == "applied" && e.key.as_deref().is_some_and(|k| k.contains('.')))
            .count();
        assert!(
            java_late > 0,
            "the Java members took none of the later orders"
        );
        for s in &stats {
            assert_eq!(s.locks.ack_failures.total(), 0, "{s}");
        }
        assert_eq!(java_refused, 0, "Java's acknowledgements refused");
        eprintln!(
            "interop: {} orders, ours applied {by_ours}, Java {by_java}",
            ids.len()
        );
    }
    /// A Java member killed (SIGKILL) while it holds locks: its records come back to the others
    /// (ours and the other Java member) after the lock duration; every order is applied, and an
    /// order is applied twice only when the killed member applied it first.
    #[test]
    fn a_killed_java_members_records_come_back_to_ours() {
        let _ = env_logger::builder().is_test(true).try_init();
        let setup = ShareSetup::new("share-interop-kill", 2, 3_000);
        let ids = setup.produce_orders(2, 300);
        let applied: Applied = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        // The Java member alone first: it acquires batches of records and works through them.
        let mut victim = java(&setup, "java-victim", 20, false);
        victim.wait_for("some records applied", BOUND, |events| {
            events.iter().filter(|e| e.event == "applied").count() >= 20
        });
        let o1 = ours(
            &setup,
            "ours-1",
            applied.clone(),
            stop.clone(),
            Arc::default(),
        );
        let until = Instant::now() + BOUND;
        while applied.lock().unwrap().is_empty() {
            assert!(
                Instant::now() < until,
                "ours applied nothing beside the Java member"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        victim.kill();
        merge_java(&applied, &victim.events(), "java-victim");
        let count = || applied.lock().unwrap().len();
        wait_all(&ids, count, "after the Java member was killed");
        stop.store(true, Ordering::SeqCst);
        let stats = o1.join().unwrap();
        let applied = applied.lock().unwrap();
        let mut repeats = 0;
        for (order, by) in applied.iter() {
            if by.len() > 1 {
                repeats += 1;
                assert_eq!(by.len(), 2, "{order}: {by:?}");
                assert!(by.contains(&"java-victim".to_string()), "{order}: {by:?}");
                assert!(by.contains(&"ours-1".to_string()), "{order}: {by:?}");
            }
        }
        eprintln!(
            "killed Java member: {} orders, {repeats} repeat(s) (applied by it, never acknowledged); \
             ours: {stats}",
            ids.len()
        );
    }
}
