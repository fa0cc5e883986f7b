//! The consumer group protocol (KIP-848, `group.protocol=consumer`) through the whole consumer
//! (`Consumer::subscribe` → poll loop → guard → commits), on real Apache Kafka 4.x: members join
//! and leave with every record processed exactly once; a revocation commits (with the member
//! epoch) before the partition is processed elsewhere; a member the broker stops hearing from
//! loses its assignment (fenced, nothing committed) and rejoins with epoch 0; a static member's
//! leave (epoch -2) and return within the session keeps its partitions. Needs
//! `scripts/setup-test-env`.
//!
//! The shared broker runs `group.consumer.heartbeat.interval.ms=500` and
//! `group.consumer.session.timeout.ms=6000` (`scripts/kafka_broker.py`).

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use rebalance_guard::consumer::{
    AssignedContext, ConsumerRebalanceListener, ConsumerStats, GuardView,
};
use rebalance_guard::consumer::{Consumer, ConsumerConfig, ConsumerError};
use rebalance_guard::group::MembershipView;
use rebalance_guard::guard::{BoxError, OwnerStatus};
use rebalance_guard::TopicPartition;
use support::consumer::{
    committed, consumer_protocol_config, produce_to_each_partition, wait_until,
};
use support::kafka::require_kafka;
use support::log_lines;
use support::proxy::Proxy;
use support::{unique_name, Broker, Kafka, KafkaVersion};

const PARTITIONS: i32 = 6;
const WAIT: Duration = Duration::from_secs(90);

/// A consumer-protocol configuration (`support::consumer::consumer_protocol_config`) with
/// small batches, so that batch boundaries come often.
fn config(bootstrap: &str, group: &str, extra: &[(&str, &str)]) -> ConsumerConfig {
    let mut all = vec![
        ("max.poll.records", "20"),
        ("max.poll.interval.ms", "20000"),
    ];
    all.extend_from_slice(extra);
    consumer_protocol_config(bootstrap, group, &all)
}

/// Every record a member finished: (member, partition, offset, when).
type Processed = Arc<Mutex<Vec<(usize, i32, i64, Instant)>>>;

/// One member on its own thread: poll, process (record it), commit, until stopped; then close.
struct Member {
    stop: Arc<AtomicBool>,
    /// How many partition assignments the member has received so far (it only grows).
    assigned: Arc<AtomicUsize>,
    /// The consumer's owned partitions (`Consumer::assignment`), as of its last poll.
    owned: Arc<Mutex<BTreeSet<i32>>>,
    thread: Option<JoinHandle<Result<ConsumerStats, String>>>,
}

impl Member {
    fn start(id: usize, config: ConsumerConfig, topic: &str, processed: &Processed) -> Member {
        Member::start_with(id, config, topic, processed, |consumer| consumer)
    }

    /// [`Member::start`], with `prepare` applied to the consumer before its first poll (a
    /// rebalance listener).
    fn start_with(
        id: usize,
        config: ConsumerConfig,
        topic: &str,
        processed: &Processed,
        prepare: impl FnOnce(Consumer) -> Consumer + Send + 'static,
    ) -> Member {
        let stop = Arc::new(AtomicBool::new(false));
        let assigned = Arc::new(AtomicUsize::new(0));
        let owned: Arc<Mutex<BTreeSet<i32>>> = Arc::default();
        let (s, p, topic, o, mine) = (
            stop.clone(),
            processed.clone(),
            topic.to_string(),
            assigned.clone(),
            owned.clone(),
        );
        let thread = thread::spawn(move || -> Result<ConsumerStats, String> {
            let consumer = Consumer::subscribe(config, &[&topic]).map_err(|e| e.to_string())?;
            let mut consumer = prepare(consumer);
            while !s.load(Ordering::SeqCst) {
                {
                    o.store(
                        consumer.stats().counters.assigned as usize,
                        Ordering::SeqCst,
                    );
                    *mine.lock().unwrap() = consumer
                        .assignment()
                        .iter()
                        .map(|tp| tp.partition)
                        .collect();
                    let mut batch = consumer
                        .poll(Duration::from_millis(100))
                        .map_err(|e| e.to_string())?;
                    while let Some(delivery) = batch.next() {
                        let (partition, offset) =
                            (delivery.record.partition, delivery.record.offset);
                        p.lock()
                            .unwrap()
                            .push((id, partition, offset, Instant::now()));
                        batch.complete(delivery);
                    }
                }
                match consumer.commit() {
                    Ok(_) | Err(ConsumerError::Commit(_)) => {}
                    Err(e) => return Err(e.to_string()),
                }
            }
            let stats = consumer.stats();
            consumer.close().map_err(|e| e.to_string())?;
            Ok(stats)
        });
        Member {
            stop,
            assigned,
            owned,
            thread: Some(thread),
        }
    }

    /// Stops and closes the member (a static one leaves with epoch -2); its last stats.
    fn close(mut self) -> ConsumerStats {
        self.stop.store(true, Ordering::SeqCst);
        let t = self.thread.take().expect("running");
        t.join()
            .expect("member thread")
            .expect("member ran cleanly")
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// How many times each (partition, offset) was finished.
fn counts(processed: &Processed) -> BTreeMap<(i32, i64), usize> {
    let mut out = BTreeMap::new();
    for (_, p, o, _) in processed.lock().unwrap().iter() {
        *out.entry((*p, *o)).or_insert(0) += 1;
    }
    out
}

fn all_done(processed: &Processed, per_partition: i64) -> bool {
    let c = counts(processed);
    (0..PARTITIONS).all(|p| (0..per_partition).all(|o| c.contains_key(&(p, o))))
}

fn assert_once(processed: &Processed, per_partition: i64) {
    let c = counts(processed);
    let duplicates: Vec<_> = c.iter().filter(|(_, n)| **n > 1).collect();
    assert!(duplicates.is_empty(), "processed twice: {duplicates:?}");
    let missing: Vec<_> = (0..PARTITIONS)
        .flat_map(|p| (0..per_partition).map(move |o| (p, o)))
        .filter(|k| !c.contains_key(k))
        .collect();
    assert!(missing.is_empty(), "never processed: {missing:?}");
}

fn setup(prefix: &str) -> (&'static Kafka, String, String) {
    let _ = env_logger::builder().is_test(true).try_init();
    require_kafka(
        KafkaVersion::Newest,
        (4, 0),
        "KIP-848, the consumer group protocol",
    );
    let kafka = Kafka::shared(KafkaVersion::Newest);
    let topic = unique_name(prefix);
    kafka.create_topic(&topic, PARTITIONS as u32);
    (kafka, topic, unique_name("kip848-group"))
}

#[test]
fn three_members_join_and_leave_with_every_record_processed_once() {
    let (kafka, topic, group) = setup("kip848-three");
    let bootstrap = kafka.bootstrap().to_string();
    produce_to_each_partition(&bootstrap, &topic, PARTITIONS, 200);
    let processed: Processed = Arc::default();

    let a = Member::start(0, config(&bootstrap, &group, &[]), &topic, &processed);
    wait_until("A processes something", WAIT, || {
        !processed.lock().unwrap().is_empty()
    });
    let b = Member::start(1, config(&bootstrap, &group, &[]), &topic, &processed);
    let c = Member::start(2, config(&bootstrap, &group, &[]), &topic, &processed);
    produce_to_each_partition(&bootstrap, &topic, PARTITIONS, 200);
    wait_until("every record of the first two rounds", WAIT, || {
        all_done(&processed, 400)
    });
    // The work was shared: the broker's assignment reached the joiners.
    wait_until("B and C are assigned partitions", WAIT, || {
        b.assigned.load(Ordering::SeqCst) > 0 && c.assigned.load(Ordering::SeqCst) > 0
    });
    produce_to_each_partition(&bootstrap, &topic, PARTITIONS, 200);
    wait_until("every record of the third round", WAIT, || {
        all_done(&processed, 600)
    });
    let members: BTreeSet<usize> = processed
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, _, o, _)| *o >= 400)
        .map(|(m, _, _, _)| *m)
        .collect();
    assert_eq!(members.len(), 3, "all three members processed: {members:?}");

    c.close();
    b.close();
    produce_to_each_partition(&bootstrap, &topic, PARTITIONS, 200);
    wait_until("A processes everything after B and C left", WAIT, || {
        all_done(&processed, 800)
    });
    a.close();
    assert_once(&processed, 800);
    let offsets = committed(&bootstrap, &group, &topic, PARTITIONS);
    for p in 0..PARTITIONS {
        assert_eq!(
            offsets[&p],
            Some(800),
            "partition {p} committed through the end"
        );
    }
}

#[test]
fn a_revoked_partition_is_committed_before_its_new_owner_processes_it() {
    let (kafka, topic, group) = setup("kip848-revoke");
    let bootstrap = kafka.bootstrap().to_string();
    produce_to_each_partition(&bootstrap, &topic, PARTITIONS, 300);
    let processed: Processed = Arc::default();
    let a = Member::start(0, config(&bootstrap, &group, &[]), &topic, &processed);
    wait_until("A processes every partition", WAIT, || {
        let seen: BTreeSet<i32> = processed
            .lock()
            .unwrap()
            .iter()
            .map(|(_, p, _, _)| *p)
            .collect();
        seen.len() == PARTITIONS as usize
    });
    let b = Member::start(1, config(&bootstrap, &group, &[]), &topic, &processed);
    // A may finish the first 300 per partition before the broker hands B anything; the records
    // that show the handover are produced once B owns partitions.
    wait_until("B is assigned partitions", WAIT, || {
        b.assigned.load(Ordering::SeqCst) > 0
    });
    produce_to_each_partition(&bootstrap, &topic, PARTITIONS, 300);
    wait_until("every record", WAIT, || all_done(&processed, 600));
    // Each partition B processed it started exactly where A's last processed record ended:
    // A's revocation committed (with its member epoch) before B fetched its committed offset.
    let log = processed.lock().unwrap().clone();
    let mut moved = 0;
    for p in 0..PARTITIONS {
        let first_b = log
            .iter()
            .filter(|(m, q, _, _)| *m == 1 && *q == p)
            .map(|(_, _, o, _)| *o)
            .min();
        let Some(first_b) = first_b else { continue };
        moved += 1;
        let last_a_before = log
            .iter()
            .filter(|(m, q, o, _)| *m == 0 && *q == p && *o < first_b)
            .map(|(_, _, o, _)| *o)
            .max();
        assert_eq!(
            last_a_before.map(|o| o + 1).unwrap_or(0),
            first_b,
            "partition {p}: B starts at A's commit"
        );
    }
    assert!(moved > 0, "the broker moved partitions to B");
    b.close();
    a.close();
    assert_once(&processed, 600);
}

/// The partitions on which `member` processed offsets `from..`.
fn partitions_of(processed: &Processed, member: usize, from: i64) -> BTreeSet<i32> {
    processed
        .lock()
        .unwrap()
        .iter()
        .filter(|(m, _, o, _)| *m == member && *o >= from)
        .map(|(_, p, _, _)| *p)
        .collect()
}

#[test]
fn a_member_cut_off_from_the_broker_loses_its_partitions_and_rejoins_with_epoch_0() {
    let (kafka, topic, group) = setup("kip848-cut-off");
    let bootstrap = kafka.bootstrap().to_string();
    produce_to_each_partition(&bootstrap, &topic, PARTITIONS, 100);
    let processed: Processed = Arc::default();
    let proxy = Proxy::start(&bootstrap);
    let a = Member::start(0, config(proxy.addr(), &group, &[]), &topic, &processed);
    wait_until("A processed and committed everything", WAIT, || {
        all_done(&processed, 100)
            && committed(&bootstrap, &group, &topic, PARTITIONS)
                .values()
                .all(|c| *c == Some(100))
    });
    // A network partition between A and the broker for longer than the broker's session
    // (6 s): A's own session bound (3 heartbeat intervals) runs out first and fences its
    // partitions without a commit; the broker then expires A and gives everything to B.
    let assigned_before = a.assigned.load(Ordering::SeqCst);
    proxy.hold();
    let b = Member::start(1, config(&bootstrap, &group, &[]), &topic, &processed);
    produce_to_each_partition(&bootstrap, &topic, PARTITIONS, 100);
    wait_until("B processed the second round", WAIT, || {
        all_done(&processed, 200)
    });
    assert_eq!(
        partitions_of(&processed, 1, 100).len(),
        PARTITIONS as usize,
        "B took every partition of the expired member"
    );
    proxy.release();
    // A rejoins with epoch 0 and gets a share back through B's revocation; the third round is
    // produced once A owns partitions again, so that A has records of its own to process.
    wait_until("A is assigned partitions again", WAIT, || {
        a.assigned.load(Ordering::SeqCst) > assigned_before
    });
    produce_to_each_partition(&bootstrap, &topic, PARTITIONS, 100);
    wait_until("the third round, shared again", WAIT, || {
        all_done(&processed, 300) && !partitions_of(&processed, 0, 200).is_empty()
    });
    let a_stats = a.close();
    b.close();
    assert!(
        a_stats.counters.lost >= PARTITIONS as u64,
        "A lost its six partitions: {a_stats}"
    );
    // Nothing A held at the cut was committed after it, nor processed twice: B started exactly
    // at A's last commit, and A's later share started at B's.
    assert_once(&processed, 300);
}

/// Polls `done` until it holds or `timeout` passes; whether it held.
fn holds_within(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// What [`PauseWhileAssigning`] saw of the member's membership (its session's identity).
#[derive(Clone, Debug)]
struct Pause {
    /// When the traffic was held.
    at: Instant,
    /// The member epoch the assignment being started belongs to.
    epoch_before: i32,
    /// The member declared its assignment lost (its session bound ran out) during the pause.
    declared_lost: bool,
    /// The epoch its rejoin was answered with, once it was.
    epoch_after: Option<i32>,
}

/// How long [`PauseWhileAssigning`] holds the coordinator's traffic: twice the member's own
/// session bound (three of the broker's 500 ms heartbeat intervals), half the broker's session
/// (6 s), so the member declares its assignment lost and the broker keeps it. The member's
/// heartbeat in flight is answered only once the traffic is let through.
const PAUSE: Duration = Duration::from_secs(3);

/// A listener whose first `on_assigned` pauses the coordinator's traffic (the proxy holds it
/// for [`PAUSE`]) while the poll thread is starting that assignment, then waits until the
/// member has declared the assignment lost (its guard fenced every partition) and its epoch-0
/// rejoin was answered: the change from before the loss is acknowledged after the one decided
/// from that answer.
struct PauseWhileAssigning {
    proxy: Arc<Proxy>,
    view: MembershipView,
    guard: GuardView,
    fired: bool,
    seen: Arc<Mutex<Option<Pause>>>,
}

impl ConsumerRebalanceListener for PauseWhileAssigning {
    fn on_assigned(
        &mut self,
        _: &[TopicPartition],
        _: &mut AssignedContext<'_>,
    ) -> Result<(), BoxError> {
        if std::mem::replace(&mut self.fired, true) {
            return Ok(());
        }
        let (identity, _) = self.view.read();
        let at = Instant::now();
        self.proxy.hold();
        thread::sleep(PAUSE);
        self.proxy.release();
        // The guard's partitions stay lost while this callback holds the poll thread, and the
        // session's epoch is -1 from the loss until the rejoin is answered.
        let declared_lost = holds_within(Duration::from_secs(10), || {
            let partitions = self.guard.snapshot().partitions;
            !partitions.is_empty() && partitions.iter().all(|p| p.status == OwnerStatus::Lost)
        });
        let rejoined = declared_lost
            && holds_within(Duration::from_secs(30), || {
                self.view.read().0.generation_id > 0
            });
        *self.seen.lock().unwrap() = Some(Pause {
            at,
            epoch_before: identity.generation_id,
            declared_lost,
            epoch_after: rejoined.then(|| self.view.read().0.generation_id),
        });
        Ok(())
    }
}

/// What the coordinator's heartbeat answers gave the member since `since`, as the membership
/// logs each one ("consumer group G: assigned [..] in epoch E"; "revoking [..]"): the
/// partitions assigned, by epoch, and whether any revocation came.
fn answered_since(since: Instant, group: &str) -> (Vec<(i32, BTreeSet<String>)>, bool) {
    let prefix = format!("consumer group {group}: ");
    let ours = log_lines::lines(|l| l.at >= since && l.text.starts_with(&prefix));
    let revoked = ours.iter().any(|l| l.text.contains(": revoking ["));
    let assigned = ours
        .iter()
        .filter_map(|l| {
            let rest = l.text.strip_prefix(&prefix)?.strip_prefix("assigned [")?;
            let (list, epoch) = rest.split_once("] in epoch ")?;
            let partitions = list
                .split(", ")
                .map(|p| p.trim_matches('"').to_string())
                .collect();
            Some((epoch.trim().parse().ok()?, partitions))
        })
        .collect();
    (assigned, revoked)
}

/// Issue item 9 on real Kafka: while the poll thread starts the member's assignment, the
/// coordinator's traffic is held past the member's own session bound but inside the broker's
/// session; the member fences its assignment as lost and rejoins with epoch 0, and the broker,
/// which kept it, answers with the same epoch and the same partitions. The change decided from
/// that answer must be handed out although the one from before the loss (same epoch) is
/// acknowledged after it: every partition is consumed and committed to its end, every record
/// applied once, and the consumer owns what the broker says the member holds.
#[test]
fn a_member_that_declared_its_own_loss_and_got_the_same_epoch_back_consumes_every_partition_to_its_end(
) {
    log_lines::install();
    let (kafka, topic, group) = setup("kip848-own-loss");
    let bootstrap = kafka.bootstrap().to_string();
    produce_to_each_partition(&bootstrap, &topic, PARTITIONS, 100);
    let processed: Processed = Arc::default();
    let proxy = Arc::new(Proxy::start(&bootstrap));
    let seen: Arc<Mutex<Option<Pause>>> = Arc::default();
    let (pause_proxy, pause_seen) = (proxy.clone(), seen.clone());
    let a = Member::start_with(
        0,
        config(proxy.addr(), &group, &[]),
        &topic,
        &processed,
        move |consumer| {
            let (view, guard) = (consumer.membership_view(), consumer.guard_view());
            consumer.with_rebalance_listener(PauseWhileAssigning {
                proxy: pause_proxy,
                view,
                guard,
                fired: false,
                seen: pause_seen,
            })
        },
    );
    wait_until("the pause in A's first assignment", WAIT, || {
        seen.lock().unwrap().is_some()
    });
    let pause = seen.lock().unwrap().clone().expect("the pause");
    assert!(
        pause.declared_lost,
        "A declared its assignment lost during the pause: {pause:?}"
    );
    assert_eq!(
        pause.epoch_after,
        Some(pause.epoch_before),
        "the broker kept A and answered its epoch-0 rejoin with the same epoch"
    );
    produce_to_each_partition(&bootstrap, &topic, PARTITIONS, 100);
    wait_until("every partition committed to its end", WAIT, || {
        committed(&bootstrap, &group, &topic, PARTITIONS)
            .values()
            .all(|c| *c == Some(200))
    });
    assert_once(&processed, 200);
    // What the broker says A holds: its answer to the rejoin (one member: everything, in the
    // same epoch), and nothing since.
    let (answered, revoked) = answered_since(pause.at, &group);
    let all: BTreeSet<String> = (0..PARTITIONS).map(|p| format!("{topic}-{p}")).collect();
    assert_eq!(
        answered,
        vec![(pause.epoch_before, all.clone())],
        "the rejoin was answered with every partition in the same epoch"
    );
    assert!(!revoked, "nothing was revoked since");
    let owned: BTreeSet<String> = a
        .owned
        .lock()
        .unwrap()
        .iter()
        .map(|p| format!("{topic}-{p}"))
        .collect();
    assert_eq!(owned, all, "A's consumer owns what the broker answered");
    let stats = a.close();
    assert!(
        stats.counters.lost >= PARTITIONS as u64,
        "A lost its assignment once, through its session bound: {stats}"
    );
}

#[test]
fn a_static_member_that_leaves_and_returns_gets_its_partitions_back() {
    let (kafka, topic, group) = setup("kip848-static");
    let bootstrap = kafka.bootstrap().to_string();
    let processed: Processed = Arc::default();
    let a_cfg = || config(&bootstrap, &group, &[("group.instance.id", "static-a")]);
    let b_cfg = config(&bootstrap, &group, &[("group.instance.id", "static-b")]);
    let a = Member::start(0, a_cfg(), &topic, &processed);
    let b = Member::start(1, b_cfg, &topic, &processed);
    produce_to_each_partition(&bootstrap, &topic, PARTITIONS, 50);
    wait_until("the first round", WAIT, || all_done(&processed, 50));
    // Let the assignment settle (a joiner's partitions arrive over a few heartbeats).
    thread::sleep(Duration::from_secs(3));
    produce_to_each_partition(&bootstrap, &topic, PARTITIONS, 50);
    wait_until("the second round", WAIT, || all_done(&processed, 100));
    let a_partitions = partitions_of(&processed, 0, 50);
    let b_partitions = partitions_of(&processed, 1, 50);
    assert!(
        a_partitions.is_disjoint(&b_partitions),
        "{a_partitions:?} {b_partitions:?}"
    );
    assert_eq!(a_partitions.len() + b_partitions.len(), PARTITIONS as usize);
    assert!(
        !a_partitions.is_empty() && !b_partitions.is_empty(),
        "both members work"
    );

    // A leaves with epoch -2: the broker keeps its partitions for it for the session (6 s).
    a.close();
    produce_to_each_partition(&bootstrap, &topic, PARTITIONS, 50);
    thread::sleep(Duration::from_secs(1));
    let a_again = Member::start(2, a_cfg(), &topic, &processed);
    wait_until("the third round", WAIT, || all_done(&processed, 150));
    assert_eq!(
        partitions_of(&processed, 2, 100),
        a_partitions,
        "the returning static member got its partitions back"
    );
    assert!(
        partitions_of(&processed, 1, 100).is_disjoint(&a_partitions),
        "B never worked A's reserved partitions"
    );
    a_again.close();
    b.close();
    assert_once(&processed, 150);
}

/// A static member whose heartbeats stall past its own `session.bound.ms` but well inside the
/// broker's session (a coordinator whose `__consumer_offsets` writes wait, a short network
/// stall) fences its partitions as lost; the broker still holds its incarnation, and Kafka
/// refuses an epoch-0 join of that instance id with UNRELEASED_INSTANCE_ID until it left with
/// -2. The member releases it (-2 under its member id) and joins again: it owns its partitions
/// again, keeps processing, and nothing is lost or processed twice.
#[test]
fn a_static_member_whose_session_bound_passed_while_the_broker_still_holds_it_gets_back_in() {
    let (kafka, topic, group) = setup("kip848-static-lapse");
    let bootstrap = kafka.bootstrap().to_string();
    produce_to_each_partition(&bootstrap, &topic, PARTITIONS, 100);
    let processed: Processed = Arc::default();
    let proxy = Proxy::start(&bootstrap);
    let cfg = config(
        proxy.addr(),
        &group,
        &[
            ("group.instance.id", "static-lapse"),
            ("session.bound.ms", "1500"),
        ],
    );
    let a = Member::start(0, cfg, &topic, &processed);
    wait_until("A processed and committed everything", WAIT, || {
        all_done(&processed, 100)
            && committed(&bootstrap, &group, &topic, PARTITIONS)
                .values()
                .all(|c| *c == Some(100))
    });
    let assigned_before = a.assigned.load(Ordering::SeqCst);
    // 3 s of silence: twice A's session bound, half the broker's session (6 s).
    proxy.hold();
    thread::sleep(Duration::from_secs(3));
    proxy.release();
    wait_until("A owns its partitions again", WAIT, || {
        a.assigned.load(Ordering::SeqCst) > assigned_before
    });
    produce_to_each_partition(&bootstrap, &topic, PARTITIONS, 100);
    wait_until("A processed the second round", WAIT, || {
        all_done(&processed, 200)
            && committed(&bootstrap, &group, &topic, PARTITIONS)
                .values()
                .all(|c| *c == Some(200))
    });
    // A clean close: no fatal error (UNRELEASED_INSTANCE_ID) ended the membership.
    let stats = a.close();
    assert_eq!(
        stats.counters.lost, PARTITIONS as u64,
        "A lost its six partitions once, through its session bound: {stats}"
    );
    assert_once(&processed, 200);
    if let Some(log) = kafka.log_path() {
        let log = std::fs::read_to_string(log).unwrap_or_default();
        let ours: Vec<&str> = log
            .lines()
            .filter(|l| l.contains(&format!("[GroupId {group}]")))
            .collect();
        assert!(
            ours.iter().any(|l| l.contains("temporarily left")),
            "the broker saw the release (-2): {ours:#?}"
        );
        assert!(
            ours.iter()
                .any(|l| l.contains("re-joins the consumer group")),
            "the broker replaced the incarnation: {ours:#?}"
        );
        assert!(
            !ours.iter().any(|l| l.contains("cannot join the group")),
            "no join was refused: {ours:#?}"
        );
    }
}

#[test]
fn closing_while_a_revocation_is_pending_leaves_at_once_and_the_other_member_takes_everything() {
    let (kafka, topic, group) = setup("kip848-close-revoking");
    let bootstrap = kafka.bootstrap().to_string();
    produce_to_each_partition(&bootstrap, &topic, PARTITIONS, 20);
    let processed: Processed = Arc::default();
    let mut a = Consumer::subscribe(config(&bootstrap, &group, &[]), &[&topic]).expect("A");
    let deadline = Instant::now() + WAIT;
    while !all_done(&processed, 20) {
        assert!(Instant::now() < deadline, "A processes everything alone");
        let mut batch = a.poll(Duration::from_millis(100)).expect("poll");
        while let Some(delivery) = batch.next() {
            let (p, o) = (delivery.record.partition, delivery.record.offset);
            processed.lock().unwrap().push((0, p, o, Instant::now()));
            batch.complete(delivery);
        }
        drop(batch);
        a.commit().expect("commit");
    }
    assert_eq!(a.assignment().len(), PARTITIONS as usize);
    // B joins; the broker asks A to revoke B's share. A's membership thread fences those
    // partitions at once, and the handoff waits for A's next poll, which never comes: A closes
    // with the revocation still unacknowledged.
    let b = Member::start(1, config(&bootstrap, &group, &[]), &topic, &processed);
    wait_until("a revocation is pending on A", WAIT, || {
        a.assignment().len() < PARTITIONS as usize
    });
    let started = Instant::now();
    a.close().expect("A closes cleanly");
    let took = started.elapsed();
    // The leave heartbeat (epoch -1) goes out at once: the broker hands everything to B within a
    // few heartbeat intervals (500 ms), long before A's session (6 s) would have expired.
    assert!(took < Duration::from_secs(3), "close took {took:?}");
    let closed = Instant::now();
    wait_until("B owns every partition", Duration::from_secs(20), || {
        b.assigned.load(Ordering::SeqCst) >= PARTITIONS as usize
    });
    let handed = closed.elapsed();
    assert!(
        handed < Duration::from_secs(4),
        "B got everything {handed:?} after A closed"
    );
    b.close();
}

/// On a broker without the consumer group protocol, `group.protocol=consumer` fails within the
/// first polls with one named error (ConsumerGroupHeartbeat, UNSUPPORTED_VERSION, use
/// `group.protocol=classic`), whichever way the broker says no: Kafka 3.9 as the tests run it
/// (KIP-848 preview off) advertises the API and answers UNSUPPORTED_VERSION; 3.6 and older do
/// not advertise it at all, so no version is in common. Never a silent fall back to the classic
/// protocol, never an endless retry (before the fix, the second case looked the coordinator up
/// again for ever). Runs on the last 3.x in the normal run and on every line of the version
/// matrix (`scripts/test --versions`).
#[test]
fn the_consumer_protocol_on_a_broker_without_kip_848_fails_with_a_named_error() {
    let _ = env_logger::builder().is_test(true).try_init();
    let kafka = Kafka::shared(KafkaVersion::Last3);
    let topic = unique_name("kip848-absent");
    kafka.create_topic(&topic, 1);
    let bootstrap = kafka.bootstrap().to_string();
    let group = unique_name("kip848-absent-group");
    let started = Instant::now();
    let failure = match Consumer::subscribe(config(&bootstrap, &group, &[]), &[&topic]) {
        Err(e) => e,
        Ok(mut consumer) => loop {
            match consumer.poll(Duration::from_millis(500)) {
                Err(e) => break e,
                Ok(mut batch) => {
                    assert!(
                        batch.next().is_none(),
                        "Kafka {}: a consumer-protocol member was handed a record",
                        KafkaVersion::Last3.version()
                    );
                }
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "Kafka {}: still polling after 30 s without the consumer protocol's refusal",
                KafkaVersion::Last3.version()
            );
        },
    };
    let mut chain = failure.to_string();
    let mut source = std::error::Error::source(&failure);
    while let Some(e) = source {
        chain.push_str(": ");
        chain.push_str(&e.to_string());
        source = e.source();
    }
    println!("Kafka {}: {chain}", KafkaVersion::Last3.version());
    for needed in [
        "ConsumerGroupHeartbeat",
        "UnsupportedVersion",
        "group.protocol=classic",
    ] {
        assert!(
            chain.contains(needed),
            "Kafka {}: the refusal lacks {needed:?}: {chain}",
            KafkaVersion::Last3.version()
        );
    }
}
