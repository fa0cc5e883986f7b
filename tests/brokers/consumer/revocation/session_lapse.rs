//! What the poll loop does around the session bound (issue 20, item 6), on real Kafka 4.x.
//!
//! Leases are trusted until the send time of the last answered heartbeat plus the session (the
//! classic `session.timeout.ms`, or `session.bound.ms` under `group.protocol=consumer`); past
//! it, every record is refused with `SessionExpired`. Two things must hold around that bound:
//!
//! - Classic protocol, cooperative-sticky: while a round of ours is held at the coordinator
//!   (JoinGroup waiting for a member slow to rejoin), no heartbeat goes out, yet the coordinator
//!   does not expire a member it holds in a join. The partitions the member keeps must go on
//!   flowing, even when the hold outlasts the member's session: a broker-fault run logged
//!   `offset 257 refused: the member's session may have expired` hundreds of times within one
//!   millisecond there.
//! - When the bound has really lapsed (the coordinator went silent; shown under
//!   `group.protocol=consumer`, whose bound lapses seconds before the membership thread, blocked
//!   in its unanswered heartbeat, finds out), every admission is refused; `poll` must then wait
//!   for a renewal, not return an empty batch at once into a caller that polls again (a busy
//!   loop burning a core until the membership thread finds out).
//!
//! The refusals are counted from the consumer's own log line, captured per thread
//! (`support::log_capture`), and the polls by the test's own loop.

use crate::support;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use kafka_protocol::messages::ApiKey;
use rebalance_guard::consumer::{Consumer, ConsumerError};
use support::consumer::{config, consumer_protocol_config, produce_to_each_partition, wait_until};
use support::log_capture::observe_this_thread;
use support::ours::{OurMember, OurMemberSpec};
use support::proxy::{Proxy, Traffic};
use support::{unique_name, BrokerKind};

const WAIT: Duration = Duration::from_secs(90);
/// The busy-loop bound: a `poll` that waits for a renewal (here up to its 100 ms timeout) comes
/// back at most ~10 times a second; a spin comes back thousands of times.
const MAX_POLLS_PER_SECOND: f64 = 50.0;

// ---------------------------------------------------------------------------
// Log capture: the consumer's SessionExpired refusals, per thread
// ---------------------------------------------------------------------------

/// What the logger saw on a thread that registered it.
#[derive(Default)]
struct Seen {
    /// When each `... refused: the member's session may have expired` line was logged.
    refusals: Mutex<Vec<Instant>>,
    /// When each `... is fenced: N fetched record(s) dropped unprocessed` line was logged.
    fenced: Mutex<Vec<Instant>>,
}

/// Registers the calling thread: what it logs from now on lands in `seen` (the refusals are
/// taken, not printed).
fn capture_this_thread(seen: Arc<Seen>) {
    observe_this_thread(Some(Arc::new(move |_, text: &str| {
        if text.contains("refused: the member's session may have expired") {
            seen.refusals.lock().unwrap().push(Instant::now());
            return true;
        }
        if text.contains("is fenced:") {
            seen.fenced.lock().unwrap().push(Instant::now());
        }
        false
    })));
}

fn count_between(times: &[Instant], from: Instant, to: Instant) -> usize {
    times.iter().filter(|t| **t >= from && **t <= to).count()
}

// ---------------------------------------------------------------------------
// 1. A join held at the coordinator past the session
// ---------------------------------------------------------------------------

/// One record of a kept partition as A's handler saw it.
#[derive(Clone, Copy, Debug)]
struct Handled {
    at: Instant,
    partition: i32,
    offset: i64,
    /// `Batch::is_current` right before the (simulated) effect.
    current: bool,
}

/// What A's poll thread recorded.
#[derive(Default)]
struct Loop {
    handled: Vec<Handled>,
    /// When each poll returned a batch that handed out nothing.
    empty_polls: Vec<Instant>,
}

// ---------------------------------------------------------------------------
// 2. A lapsed bound: poll waits
// ---------------------------------------------------------------------------

mod kafka {
    use super::*;

    /// A (session 2 s) keeps three partitions while the group rebalances and the coordinator holds
    /// A's JoinGroup for about 10 s: C, the other member, has a 10 s session and is cut off behind
    /// a proxy, so the coordinator waits for C's JoinGroup until C's session runs out; B's arrival
    /// starts the round. Throughout, records wait on A's partitions (a 3 ms handler, thousands of
    /// records each).
    ///
    /// The round's hold lasts several of A's sessions, and during it: not one record of A is
    /// refused with SessionExpired, records are handed out and read current more than a session
    /// after the JoinGroup's send, nothing is fenced or lost, and A's polls do not spin.
    ///
    /// Before the fix (5553234) A's bound lapsed one session after its last heartbeat: every record
    /// was refused (tens of thousands of refusals in the hold) and A's loop polled empty batches
    /// back to back.
    #[test]
    fn a_join_held_past_the_session_keeps_the_kept_partitions_current_without_a_busy_poll() {
        const A_SESSION: Duration = Duration::from_millis(2000);
        const PARTITIONS: i32 = 6;
        let a_seen = Arc::new(Seen::default());
        capture_this_thread(a_seen.clone());
        let broker = BrokerKind::Kafka.start();
        let bootstrap = broker.bootstrap();
        let topic = unique_name("held-join");
        broker.create_topic(&topic, PARTITIONS as u32);
        produce_to_each_partition(&bootstrap, &topic, PARTITIONS, 4000);
        let group = unique_name("held-join-group");

        // C: long session, behind a proxy the test holds later.
        let c_proxy = Proxy::start(&bootstrap);
        let mut c_spec = OurMemberSpec::new(c_proxy.addr(), &group, &topic, "cooperative-sticky");
        c_spec.session_timeout_ms = 10_000;
        let c = OurMember::start(c_spec);
        c.wait_for("C owns every partition", WAIT, |_, owned| {
            owned.len() == PARTITIONS as usize
        })
        .unwrap();

        // A: short session, through a proxy that reports when its JoinGroup leaves and when the
        // SyncGroup answer comes back.
        let a_proxy = Proxy::start(&bootstrap);
        let traffic: Arc<Mutex<Vec<(Instant, Traffic)>>> = Arc::default();
        let observed = traffic.clone();
        a_proxy.observe(move |t| observed.lock().unwrap().push((Instant::now(), t)));
        let a_config = config(
            a_proxy.addr(),
            &group,
            &[
                ("partition.assignment.strategy", "cooperative-sticky"),
                ("session.timeout.ms", "2000"),
                ("heartbeat.interval.ms", "300"),
                ("max.poll.records", "20"),
            ],
        );
        let recorded: Arc<Mutex<Loop>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (a_recorded, a_stop, a_topic, a_thread_seen) = (
            recorded.clone(),
            stop.clone(),
            topic.clone(),
            a_seen.clone(),
        );
        let a = thread::spawn(move || {
            capture_this_thread(a_thread_seen);
            let mut consumer = Consumer::subscribe(a_config, &[&a_topic]).expect("subscribe");
            while !a_stop.load(Ordering::SeqCst) {
                {
                    let mut batch = consumer.poll(Duration::from_millis(100)).expect("poll");
                    let mut handed = 0;
                    while let Some(delivery) = batch.next() {
                        handed += 1;
                        thread::sleep(Duration::from_millis(3));
                        let current = batch.is_current(&delivery);
                        let (partition, offset) =
                            (delivery.record.partition, delivery.record.offset);
                        batch.complete(delivery);
                        a_recorded.lock().unwrap().handled.push(Handled {
                            at: Instant::now(),
                            partition,
                            offset,
                            current,
                        });
                    }
                    if handed == 0 {
                        a_recorded.lock().unwrap().empty_polls.push(Instant::now());
                    }
                }
                match consumer.commit() {
                    Ok(_) | Err(ConsumerError::Commit(_)) => {}
                    Err(e) => panic!("A: {e}"),
                }
            }
            consumer
        });

        // C and A settle on three partitions each, and A is processing its three.
        let mut kept = BTreeSet::new();
        wait_until("C and A split the partitions", WAIT, || {
            let c_owned: BTreeSet<i32> = c.owned().iter().map(|(_, p)| *p).collect();
            let recent: BTreeSet<i32> = {
                let recorded = recorded.lock().unwrap();
                let len = recorded.handled.len();
                recorded.handled[len.saturating_sub(200)..]
                    .iter()
                    .map(|h| h.partition)
                    .collect()
            };
            kept = recent.clone();
            c_owned.len() == 3 && recent.len() == 3 && recent.is_disjoint(&c_owned)
        });

        // C goes silent; B joins. The coordinator holds the round until C's session runs out.
        c_proxy.hold();
        let b_starts = Instant::now();
        let b = OurMember::start(OurMemberSpec::new(
            &bootstrap,
            &group,
            &topic,
            "cooperative-sticky",
        ));
        b.wait_for("B owns partitions", WAIT, |_, owned| !owned.is_empty())
            .unwrap();
        // A's round: its last JoinGroup request before the first SyncGroup answer after B started.
        let window = || {
            let traffic = traffic.lock().unwrap();
            let after: Vec<_> = traffic.iter().filter(|(at, _)| *at >= b_starts).collect();
            let synced = after
                .iter()
                .find(|(_, t)| *t == Traffic::Response(ApiKey::SyncGroup as i16))?
                .0;
            let joined = after
                .iter()
                .rfind(|(at, t)| *at <= synced && *t == Traffic::Request(ApiKey::JoinGroup as i16))?
                .0;
            Some((joined, synced))
        };
        wait_until("A processes again after its SyncGroup answer", WAIT, || {
            window().is_some_and(|(_, synced)| {
                recorded
                    .lock()
                    .unwrap()
                    .handled
                    .iter()
                    .any(|h| h.at > synced)
            })
        });
        stop.store(true, Ordering::SeqCst);
        let a = a.join().expect("A's thread");
        let lost = a.stats().counters.lost;
        let assignment: BTreeSet<i32> = a.assignment().iter().map(|tp| tp.partition).collect();
        a.close().expect("close A");
        c_proxy.release();
        drop(c);
        drop(b);

        let (joined, synced) = window().expect("A's round is in the traffic");
        let held = synced - joined;
        assert!(
            held > A_SESSION * 3,
            "the coordinator held A's JoinGroup for {held:?} only, not past A's session \
             ({A_SESSION:?}) several times over: the test shows nothing"
        );
        let refusals = count_between(&a_seen.refusals.lock().unwrap(), joined, synced);
        let first_refusal = a_seen
            .refusals
            .lock()
            .unwrap()
            .iter()
            .find(|t| **t >= joined)
            .map(|t| *t - joined);
        let recorded = recorded.lock().unwrap();
        let empty_polls = count_between(&recorded.empty_polls, joined, synced);
        eprintln!(
            "held join: {held:?}, {refusals} SessionExpired refusal(s), {empty_polls} empty poll(s), \
             {} record(s) handled in it",
            recorded
                .handled
                .iter()
                .filter(|h| h.at >= joined && h.at <= synced)
                .count()
        );
        assert_eq!(
            refusals, 0,
            "{refusals} record(s) of A's kept partitions {kept:?} were refused with SessionExpired \
             while the coordinator held A's JoinGroup for {held:?} (the first {first_refusal:?} \
             after its send; A's session is {A_SESSION:?})"
        );
        let rate = empty_polls as f64 / held.as_secs_f64();
        assert!(
            rate < MAX_POLLS_PER_SECOND,
            "A's loop polled {empty_polls} empty batches in the {held:?} its JoinGroup was held \
             ({rate:.0} per second, bound {MAX_POLLS_PER_SECOND}): a busy loop"
        );
        let late: Vec<&Handled> = recorded
            .handled
            .iter()
            .filter(|h| h.at > joined + A_SESSION + Duration::from_millis(500) && h.at < synced)
            .collect();
        assert!(
            late.len() >= 20,
            "only {} record(s) were handled between one session after A's JoinGroup and its \
             SyncGroup answer ({held:?} apart), with thousands waiting on {kept:?}",
            late.len()
        );
        let stale: Vec<(i32, i64)> = late
            .iter()
            .filter(|h| !h.current)
            .map(|h| (h.partition, h.offset))
            .collect();
        assert!(
            stale.is_empty(),
            "leases read stale while the join was held: {:?}",
            &stale[..stale.len().min(10)]
        );
        let outside: Vec<i32> = late
            .iter()
            .map(|h| h.partition)
            .filter(|p| !kept.contains(p))
            .collect();
        assert!(
            outside.is_empty(),
            "records of partitions A did not own before the round were handled during it: {outside:?}"
        );
        let fenced = count_between(&a_seen.fenced.lock().unwrap(), joined, synced);
        assert_eq!(
            fenced, 0,
            "A's partitions were fenced while its JoinGroup was held"
        );
        assert_eq!(lost, 0, "A lost partitions");
        assert!(
            kept.is_subset(&assignment),
            "A kept {kept:?} before the round and owns {assignment:?} after it"
        );
    }
    /// A `group.protocol=consumer` member (its lease bound: `session.bound.ms` = 1.5 s, three of
    /// the shared broker's 500 ms heartbeat intervals) has thousands of records buffered when every
    /// byte between it and the broker is held (a network partition). Its heartbeat sits unanswered
    /// for the membership thread's request timeout (5 s), so the thread finds the loss only then;
    /// 1.5 s after the last answered heartbeat's send the bound has lapsed and every record is
    /// refused. For 1.5 s of that, the test's loop polls with a 100 ms timeout: `poll` must wait
    /// for a renewal, at most its timeout, so the loop comes back about ten times a second, not in
    /// a spin. The partition stays assigned and its records buffered throughout (this is the lapse,
    /// not a loss, after which `poll` would wait anyway).
    ///
    /// Before the fix (5553234) every poll returned at once: tens of thousands of polls, each with
    /// one refusal, in the 1.5 s.
    #[test]
    fn a_lapsed_session_bound_makes_poll_wait_instead_of_spinning() {
        const OBSERVED: Duration = Duration::from_millis(1500);
        let seen = Arc::new(Seen::default());
        capture_this_thread(seen.clone());
        let broker = BrokerKind::Kafka.start();
        let topic = unique_name("lapse");
        let group = unique_name("lapse-group");
        broker.create_topic(&topic, 1);
        produce_to_each_partition(&broker.bootstrap(), &topic, 1, 3000);
        let proxy = Proxy::start(&broker.bootstrap());
        let settings = [
            ("session.bound.ms", "1500"),
            ("max.poll.records", "5"),
            // No paced commit: it would block in the held proxy and hide the loop's pace.
            ("commit.interval.ms", "600000"),
        ];
        let mut consumer = Consumer::subscribe(
            consumer_protocol_config(proxy.addr(), &group, &settings),
            &[&topic],
        )
        .expect("subscribe");
        let deadline = Instant::now() + WAIT;
        let lease = loop {
            assert!(Instant::now() < deadline, "no records through the proxy");
            let mut batch = consumer.poll(Duration::from_millis(200)).expect("poll");
            if let Some(delivery) = batch.next() {
                let lease = delivery.lease().clone();
                batch.complete(delivery);
                break lease;
            }
        };
        let buffered = |consumer: &Consumer| -> usize {
            consumer.stats().partitions.iter().map(|p| p.buffered).sum()
        };
        assert!(
            buffered(&consumer) > 100,
            "the first fetch buffered {} record(s) only",
            buffered(&consumer)
        );

        // Cut off: from here no answer renews the session.
        proxy.hold();
        wait_until("the session bound lapsed", Duration::from_secs(10), || {
            !consumer.is_current(&lease)
        });
        let start = Instant::now();
        let mut polls = 0usize;
        let mut handed = 0usize;
        while start.elapsed() < OBSERVED {
            let mut batch = consumer.poll(Duration::from_millis(100)).expect("poll");
            polls += 1;
            while let Some(delivery) = batch.next() {
                handed += 1;
                batch.complete(delivery);
            }
        }
        let elapsed = start.elapsed();
        let refusals = count_between(&seen.refusals.lock().unwrap(), start, Instant::now());
        let still_buffered = buffered(&consumer);
        let assignment = consumer.assignment();
        proxy.release();
        drop(consumer.close());

        eprintln!(
            "lapsed bound: {polls} poll(s), {refusals} SessionExpired refusal(s) in {elapsed:?}; \
             {still_buffered} record(s) still buffered"
        );
        // The window saw the lapse, not a loss or an empty buffer.
        assert_eq!(
            handed, 0,
            "records were handed out although the session bound had lapsed"
        );
        assert!(
            refusals >= 1,
            "no SessionExpired refusal in the window: the polls never met the lapsed bound"
        );
        assert_eq!(
            assignment.len(),
            1,
            "the partition was lost during the window; the test needs it assigned"
        );
        assert!(
            still_buffered > 100,
            "{still_buffered} record(s) buffered at the end of the window"
        );
        let rate = polls as f64 / elapsed.as_secs_f64();
        assert!(
            rate < MAX_POLLS_PER_SECOND,
            "{polls} polls in {elapsed:?} ({rate:.0} per second, bound {MAX_POLLS_PER_SECOND}) while \
             the session bound had lapsed, {refusals} SessionExpired refusal(s): poll spins"
        );
        let refusal_rate = refusals as f64 / elapsed.as_secs_f64();
        assert!(
            refusal_rate < MAX_POLLS_PER_SECOND,
            "{refusals} SessionExpired refusals in {elapsed:?} ({refusal_rate:.0} per second)"
        );
    }
}
