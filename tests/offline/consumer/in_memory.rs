//! The whole consumer driven in memory: `Consumer` with its batches, guard, handoff driver,
//! commit pacer and worker pool, over in-memory members that run the real session, the real
//! hand-out of changes and the real commit checks against the in-memory coordinators of both
//! protocols, and an in-memory log for records and committed offsets. No broker, no sleeps that
//! hope: each test drives the members turn by turn (the way quinn-proto's tests drive both ends
//! of a connection) and checks what the broker would hold afterwards.
//!
//! Each step of a revocation's handoff has a test here that fails when the step moves: the
//! records nobody was handed dropped first, the drain, the state check before the commit, the
//! commit of `last + 1` in the generation that owned the partition, the hand-back in the guard,
//! the membership's acknowledgement last; a loss never commits; a paced commit in flight lands
//! before the handoff's.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use rebalance_guard::consumer::{
    AssignedContext, Consumer, ConsumerConfig, ConsumerError, ConsumerRebalanceListener,
    RevokedPartition,
};
use rebalance_guard::group::Strategy;
use rebalance_guard::guard::{BoxError, HandoffStage};
use rebalance_guard::testing::{ClassicGroup, InMemoryLog, Journal, Kip848Group, MemberHandle};
use rebalance_guard::wire::KafkaCode;
use rebalance_guard::TopicPartition;

pub(super) const TOPIC: &str = "orders";
pub(super) const PARTITIONS: i32 = 4;
const SESSION: Duration = Duration::from_secs(30);

/// Every (partition, offset) a handler processed, by which node, in order.
pub(super) type Processed = Arc<Mutex<Vec<(String, TopicPartition, i64)>>>;

fn config(group: &str, extra: &[(&str, &str)]) -> ConsumerConfig {
    let _ = env_logger::builder().is_test(true).try_init();
    let mut props: Vec<(String, String)> = vec![
        ("bootstrap.servers".into(), "127.0.0.1:9".into()),
        ("group.id".into(), group.into()),
        ("auto.offset.reset".into(), "earliest".into()),
        ("session.timeout.ms".into(), SESSION.as_millis().to_string()),
        ("heartbeat.interval.ms".into(), "1000".into()),
        ("max.poll.interval.ms".into(), "3600000".into()),
        ("fetch.max.wait.ms".into(), "0".into()),
        ("commit.interval.ms".into(), "3600000".into()),
    ];
    for (k, v) in extra {
        props.retain(|(name, _)| name != k);
        props.push((k.to_string(), v.to_string()));
    }
    ConsumerConfig::from_properties(props).expect("valid test configuration")
}

fn log_with(records_per_partition: usize) -> InMemoryLog {
    let log = InMemoryLog::new();
    log.create_topic(TOPIC, PARTITIONS);
    produce(&log, records_per_partition);
    log
}

pub(super) fn produce(log: &InMemoryLog, records_per_partition: usize) {
    for p in 0..PARTITIONS {
        for i in 0..records_per_partition {
            let key = format!("{p}-{i}");
            log.produce(TOPIC, p, key.as_str(), "order");
        }
    }
}

pub(super) fn tp(p: i32) -> TopicPartition {
    TopicPartition::new(TOPIC, p)
}

/// One consumer over an in-memory member, and the test's handle on the member.
pub(super) struct Node {
    pub(super) name: String,
    pub(super) consumer: Consumer,
    pub(super) handle: MemberHandle,
}

fn kip848_node(group: &Kip848Group, name: &str) -> Node {
    kip848_node_with(group, name, &[])
}

pub(super) fn kip848_node_with(group: &Kip848Group, name: &str, extra: &[(&str, &str)]) -> Node {
    let mut handle = None;
    let consumer = Consumer::with_membership(config("g", extra), &[TOPIC], |settings, hook| {
        let (member, h) = group.member(settings, hook);
        handle = Some(h);
        Ok(member)
    })
    .expect("consumer");
    Node {
        name: name.to_string(),
        consumer,
        handle: handle.expect("a member was built"),
    }
}

pub(super) fn classic_node(
    group: &ClassicGroup,
    name: &str,
    strategy: Strategy,
    extra: &[(&str, &str)],
) -> Node {
    let mut handle = None;
    let strategy_name = strategy.name();
    let mut props = vec![("partition.assignment.strategy", strategy_name)];
    props.extend_from_slice(extra);
    let consumer = Consumer::with_membership(config("g", &props), &[TOPIC], |settings, hook| {
        let (member, h) = group.member(strategy, settings, hook);
        handle = Some(h);
        Ok(member)
    })
    .expect("consumer");
    Node {
        name: name.to_string(),
        consumer,
        handle: handle.expect("a member was built"),
    }
}

impl Node {
    /// One poll: the batch it returns, every record completed (recorded in `processed`).
    fn turn(&mut self, processed: &Processed) -> usize {
        let mut batch = self.consumer.poll(Duration::ZERO).expect("poll");
        let mut handled = 0;
        while let Some(delivery) = batch.next() {
            processed.lock().unwrap().push((
                self.name.clone(),
                delivery.lease().tp.clone(),
                delivery.record.offset,
            ));
            batch.complete(delivery);
            handled += 1;
        }
        handled
    }
}

/// Turns of every node, round robin, until `done` holds (at most `turns` rounds).
fn drive(
    nodes: &mut [&mut Node],
    processed: &Processed,
    turns: usize,
    done: impl Fn(&Processed, &[&mut Node]) -> bool,
) {
    for _ in 0..turns {
        for node in nodes.iter_mut() {
            node.turn(processed);
        }
        if done(processed, nodes) {
            return;
        }
    }
    panic!(
        "not done after {turns} rounds: processed {}",
        processed.lock().unwrap().len()
    );
}

/// A classic group (in-memory coordinator) over a log of ten records per partition, and an
/// empty record of what its members process.
pub(super) fn classic_group() -> (InMemoryLog, ClassicGroup, Processed) {
    let log = log_with(10);
    let group = ClassicGroup::new(log.clone(), SESSION);
    (log, group, Processed::default())
}

/// A KIP-848 group (in-memory coordinator) over a log of ten records per partition, and an
/// empty record of what its members process.
pub(super) fn kip848_group() -> (InMemoryLog, Kip848Group, Processed) {
    let log = log_with(10);
    let group = Kip848Group::new(log.clone(), "g", &[(TOPIC, PARTITIONS)]);
    (log, group, Processed::default())
}

/// A classic group over a log of ten records per partition, and its first member `a` after it
/// processed all forty (nothing committed yet: the commit interval is an hour).
fn classic_a_after_forty(strategy: Strategy) -> (InMemoryLog, ClassicGroup, Processed, Node) {
    let (log, group, processed) = classic_group();
    let mut a = classic_node(&group, "a", strategy, &[]);
    drive(&mut [&mut a], &processed, 50, |p, _| count(p) == 40);
    (log, group, processed, a)
}

/// Closes `a`, lets `b` take the whole group over (the coordinator refuses commits while the
/// group re-forms after a's leave), then closes `b`.
fn close_both(a: Node, mut b: Node, processed: &Processed) {
    a.consumer.close().expect("close a");
    drive(&mut [&mut b], processed, 100, |_, nodes| {
        nodes[0].consumer.assignment().len() == PARTITIONS as usize
    });
    b.consumer.close().expect("close b");
}

/// The first acknowledged revocation in `journal` came after a commit, in the revocation's
/// generation, that stored `partitions` at `offset`: the membership may give a partition away
/// (the follow-up JoinGroup, the eager JoinGroup) only once its handoff committed.
fn assert_committed_before_acknowledged(
    journal: &[Journal],
    partitions: &[TopicPartition],
    offset: i64,
) {
    let acked = journal
        .iter()
        .position(|e| matches!(e, Journal::RevocationAcknowledged(_)))
        .unwrap_or_else(|| panic!("no revocation acknowledged: {journal:?}"));
    for tp in partitions {
        let committed = journal[..acked].iter().any(|e| match e {
            Journal::Committed { offsets, .. } => offsets
                .iter()
                .any(|(t, o, stored)| t == tp && *o == offset && *stored),
            _ => false,
        });
        assert!(
            committed,
            "{tp} was acknowledged as handed back before its commit at {offset}: {journal:?}"
        );
    }
}

/// Ends `node`'s membership (`end`, at the coordinator) while a batch is open, and lets the
/// membership thread take its turn: the record already handed out reads stale, nothing more is
/// handed out, and the next poll reports the loss.
fn lose_mid_batch(node: &mut Node, end: impl FnOnce()) {
    {
        let mut batch = node.consumer.poll(Duration::ZERO).expect("poll");
        let first = batch.next().expect("a record");
        end();
        node.handle.step();
        assert!(
            !batch.is_current(&first),
            "the lease went stale with the loss"
        );
        assert!(
            batch.next().is_none(),
            "no record of a lost partition is handed out"
        );
        batch.complete(first);
    }
    node.consumer
        .poll(Duration::ZERO)
        .expect("poll after the loss");
}

fn count(processed: &Processed) -> usize {
    processed.lock().unwrap().len()
}

/// Each (partition, offset) processed how many times.
fn times(processed: &Processed) -> BTreeMap<(TopicPartition, i64), usize> {
    let mut seen = BTreeMap::new();
    for (_, tp, offset) in processed.lock().unwrap().iter() {
        *seen.entry((tp.clone(), *offset)).or_insert(0) += 1;
    }
    seen
}

fn repeats(processed: &Processed) -> Vec<(TopicPartition, i64)> {
    times(processed)
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(k, _)| k)
        .collect()
}

fn by(processed: &Processed, name: &str) -> Vec<(TopicPartition, i64)> {
    processed
        .lock()
        .unwrap()
        .iter()
        .filter(|(n, _, _)| n == name)
        .map(|(_, tp, o)| (tp.clone(), *o))
        .collect()
}

fn committed(log: &InMemoryLog, p: i32) -> Option<i64> {
    log.committed("g", &tp(p))
}

/// The handoff every protocol must get right: `b` joins while `a` owns everything; once each
/// owns two partitions, `a` committed `last + 1` of each partition it handed over, before it
/// acknowledged the revocation; then new records are processed once, `b`'s from exactly where
/// `a` stopped.
fn second_member_takes_half(a: &mut Node, b: &mut Node, log: &InMemoryLog, processed: &Processed) {
    drive(&mut [&mut *a, &mut *b], processed, 300, |_, nodes| {
        nodes[0].consumer.assignment().len() == 2 && nodes[1].consumer.assignment().len() == 2
    });
    let moved = b.consumer.assignment();
    for tp in &moved {
        assert_eq!(log.committed("g", tp), Some(10), "a's handoff of {tp}");
    }
    assert_committed_before_acknowledged(&a.handle.journal(), &moved, 10);
    produce(log, 10);
    drive(&mut [&mut *a, &mut *b], processed, 300, |p, _| {
        count(p) >= 80
    });
    assert_eq!(repeats(processed), vec![], "a record was processed twice");
    assert_eq!(
        by(processed, "b").len(),
        20,
        "b processed its partitions' new records"
    );
    let a_stats = a.consumer.stats();
    assert_eq!(a_stats.counters.failed_handoffs, 0, "{a_stats}");
    assert_eq!(a_stats.counters.lost, 0, "{a_stats}");
}

/// Every partition's commit is at `offset`.
fn assert_all_committed_at(log: &InMemoryLog, offset: i64) {
    for p in 0..PARTITIONS {
        assert_eq!(committed(log, p), Some(offset), "partition {p}");
    }
}

/// Eager: a second member's join revokes everything from the first; its handoff commits
/// `last + 1` of every partition in the generation that owned them, before the JoinGroup, so
/// the second starts exactly there: every record processed once, commits at the log end.
#[test]
fn an_eager_rebalance_commits_last_plus_one_before_the_join_and_nothing_repeats() {
    let (log, group, processed, mut a) = classic_a_after_forty(Strategy::Range);
    let mut b = classic_node(&group, "b", Strategy::Range, &[]);
    second_member_takes_half(&mut a, &mut b, &log, &processed);
    close_both(a, b, &processed);
    assert_all_committed_at(&log, 20);
}

/// Cooperative: the partitions the first member keeps flow on while the group rebalances; the
/// one it hands over is fenced when the round decides it, drained and committed at `last + 1`
/// before the membership is acknowledged (the follow-up round that gives it away).
#[test]
fn a_cooperative_handoff_commits_before_the_partition_is_given_away_and_nothing_repeats() {
    let (log, group, processed, mut a) = classic_a_after_forty(Strategy::CooperativeSticky);
    let mut b = classic_node(&group, "b", Strategy::CooperativeSticky, &[]);
    second_member_takes_half(&mut a, &mut b, &log, &processed);
    let a_stats = a.consumer.stats();
    assert_eq!(
        a_stats.counters.revoked, 2,
        "only the two partitions that moved: {a_stats}"
    );
    close_both(a, b, &processed);
    assert_all_committed_at(&log, 20);
}

/// A loss commits nothing: the member removed by the coordinator while a batch is open finds
/// its records stale, its next poll reports the loss, and no commit of its partitions is made
/// after the loss (the new owner redoes what was not committed).
#[test]
fn a_loss_during_a_batch_commits_nothing_and_stops_the_batch() {
    let (log, group, processed) = classic_group();
    let mut a = classic_node(&group, "a", Strategy::Range, &[("max.poll.records", "5")]);
    // Joined, and one committed batch.
    drive(&mut [&mut a], &processed, 20, |p, _| count(p) >= 5);
    a.consumer.commit().expect("commit");
    let before: Vec<Option<i64>> = (0..PARTITIONS).map(|p| committed(&log, p)).collect();
    let history_before = log.commit_history("g").len();
    // The coordinator removes the member; its next heartbeat learns it.
    let member_id = a.handle.identity().member_id;
    lose_mid_batch(&mut a, || group.coordinator().leave(&member_id));
    let stats = a.consumer.stats();
    assert!(stats.counters.lost >= PARTITIONS as u64, "{stats}");
    let after: Vec<Option<i64>> = (0..PARTITIONS).map(|p| committed(&log, p)).collect();
    assert_eq!(before, after, "nothing committed after the loss");
    assert_eq!(
        log.commit_history("g").len(),
        history_before,
        "no commit sent after the loss"
    );
}

/// A refused handoff commit is reported per partition, the other partitions' commits stand,
/// and the refused partition's next owner starts from its last commit (the repeat is explained
/// by the failure report).
#[test]
fn a_refused_handoff_commit_is_reported_and_the_other_partitions_are_committed() {
    let (log, group, processed, mut a) = classic_a_after_forty(Strategy::Range);
    log.refuse_commits(&tp(1), KafkaCode::OFFSET_METADATA_TOO_LARGE, 1);
    let mut b = classic_node(&group, "b", Strategy::Range, &[]);
    drive(&mut [&mut a, &mut b], &processed, 200, |_, nodes| {
        nodes[1].consumer.assignment().len() == 2
    });
    let failures = a.consumer.take_handoff_failures();
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(failures[0].tp, tp(1));
    assert_eq!(failures[0].stage, HandoffStage::Commit);
    for p in [0, 2, 3] {
        assert_eq!(committed(&log, p), Some(10), "partition {p}");
    }
    assert_eq!(
        committed(&log, 1),
        None,
        "the refused commit stored nothing"
    );
}

/// A paced commit still in flight when a revocation comes is answered before the handoff's
/// commit is sent, so the older position can never land after the newer one: the partition's
/// commits only move forward and end at `last + 1`.
#[test]
fn a_paced_commit_in_flight_lands_before_the_handoffs_commit() {
    let (log, group, processed) = classic_group();
    let mut a = classic_node(
        &group,
        "a",
        Strategy::Range,
        &[("commit.interval.ms", "1"), ("max.poll.records", "3")],
    );
    drive(&mut [&mut a], &processed, 20, |p, _| count(p) >= 3);
    a.handle.hold_paced();
    thread::sleep(Duration::from_millis(5));
    a.turn(&processed);
    thread::sleep(Duration::from_millis(5));
    a.turn(&processed);
    assert!(
        a.handle.paced_in_flight(),
        "a paced commit waits for its answer"
    );
    let mut b = classic_node(&group, "b", Strategy::Range, &[]);
    drive(&mut [&mut a, &mut b], &processed, 200, |_, nodes| {
        nodes[1].consumer.assignment().len() == 2
    });
    assert!(!a.handle.paced_in_flight());
    assert_commits_never_move_back(&log);
    assert_eq!(repeats(&processed), vec![], "a record was processed twice");
}

/// The decoupled mode in memory: worker threads process while a second member joins; the
/// revocation cancels what has not started, waits for what runs, and commits only finished
/// work, so nothing is processed twice.
#[test]
fn workers_are_drained_by_the_revocation_and_nothing_repeats() {
    let log = log_with(25);
    let group = ClassicGroup::new(log.clone(), SESSION);
    let processed = Processed::default();
    let mut a = classic_node(&group, "a", Strategy::Range, &[("commit.interval.ms", "5")]);
    let stop = Arc::new(AtomicBool::new(false));
    let (a_processed, a_stop) = (processed.clone(), stop.clone());
    let worker = thread::spawn(move || {
        let handler = move |record: &rebalance_guard::Record,
                            ctx: &rebalance_guard::WorkContext<'_>| {
            thread::sleep(Duration::from_millis(1));
            if ctx.is_current() {
                a_processed.lock().unwrap().push((
                    "a".to_string(),
                    TopicPartition::new(&*record.topic, record.partition),
                    record.offset,
                ));
            }
            Ok::<(), std::io::Error>(())
        };
        a.consumer
            .run_with_workers(&a_stop, 3, 8, handler)
            .expect("run with workers");
        a.consumer.close().expect("close a");
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while count(&processed) < 20 {
        assert!(Instant::now() < deadline, "a processed nothing");
        thread::sleep(Duration::from_millis(5));
    }
    let mut b = classic_node(&group, "b", Strategy::Range, &[]);
    while count(&processed) < 100 {
        assert!(Instant::now() < deadline, "not done: {}", count(&processed));
        b.turn(&processed);
    }
    stop.store(true, Ordering::SeqCst);
    worker.join().expect("worker thread");
    b.consumer.close().expect("close b");
    assert_eq!(repeats(&processed), vec![], "a record was processed twice");
}

/// KIP-848: the broker moves partitions to a second member; the first fences them when its
/// membership decides the revocation, drains them, commits `last + 1` with its member epoch,
/// and only then acknowledges (the heartbeat that lets the broker assign them on); the second
/// starts exactly at that commit.
#[test]
fn a_kip848_revocation_commits_with_the_member_epoch_before_it_is_acknowledged() {
    let (log, group, processed) = kip848_group();
    let mut a = kip848_node(&group, "a");
    drive(&mut [&mut a], &processed, 50, |p, _| count(p) == 40);
    let mut b = kip848_node(&group, "b");
    second_member_takes_half(&mut a, &mut b, &log, &processed);
    let a_stats = a.consumer.stats();
    assert_eq!(
        a_stats.counters.revoked, 2,
        "only the two partitions that moved: {a_stats}"
    );
}

/// KIP-848: a fenced member epoch loses the assignment at once: the open batch stops, nothing
/// is committed after the loss, and the member joins again with epoch 0.
#[test]
fn a_kip848_fenced_epoch_loses_everything_without_a_commit() {
    let (log, group, processed) = kip848_group();
    let mut a = kip848_node(&group, "a");
    drive(&mut [&mut a], &processed, 50, |p, _| count(p) == 40);
    a.consumer.commit().expect("commit");
    produce(&log, 10);
    let history = log.commit_history("g").len();
    let member_id = a.handle.identity().member_id;
    lose_mid_batch(&mut a, || {
        group
            .coordinator()
            .inject(&member_id, KafkaCode::FENCED_MEMBER_EPOCH)
    });
    let stats = a.consumer.stats();
    assert!(stats.counters.lost >= PARTITIONS as u64, "{stats}");
    // After the loss the member joins again with epoch 0 and, given partitions back, raises
    // their fencing tokens: commits of the positions already committed. No position of the
    // lost assignment is committed.
    let all = log.commit_history("g");
    let before: BTreeMap<TopicPartition, i64> = all[..history]
        .iter()
        .map(|e| (e.tp.clone(), e.offset))
        .collect();
    for entry in &all[history..] {
        assert_eq!(
            Some(entry.offset),
            before.get(&entry.tp).copied(),
            "{}: a position committed after the loss: {entry:?}",
            entry.tp
        );
    }
    // It joins again (epoch 0, then a new epoch) and gets the partitions back.
    drive(&mut [&mut a], &processed, 100, |p, _| count(p) >= 80);
    assert!(a.handle.identity().generation_id > 0);
}

/// What the coordinator holds for the member `member_id` (assigned and pending revocation), by
/// name.
fn held_by_coordinator(group: &Kip848Group, member_id: &str) -> BTreeSet<TopicPartition> {
    let coordinator = group.coordinator();
    let id = coordinator.topic_id(TOPIC);
    coordinator
        .held()
        .get(member_id)
        .map(|held| {
            held.iter()
                .filter(|(t, _)| *t == id)
                .map(|(_, p)| tp(*p))
                .collect()
        })
        .unwrap_or_default()
}

/// What `node` owns by its membership and by its guard.
fn owned_by_member_and_guard(node: &Node) -> (BTreeSet<TopicPartition>, BTreeSet<TopicPartition>) {
    let (_, owned) = node.consumer.membership_view().read();
    (
        owned.into_iter().collect(),
        node.consumer.assignment().into_iter().collect(),
    )
}

/// A listener whose first `on_assigned` stands for the poll thread held while it starts its
/// assignment (its offset lookup goes to the paused coordinator): meanwhile the coordinator's
/// traffic is held past the member's session bound (three 500 ms intervals) and well within
/// the coordinator's 6 s session, so the member declares its assignment lost itself, then the
/// traffic is let through and the member's epoch-0 rejoin is answered.
struct PauseWhileAssigning {
    group: Kip848Group,
    handle: MemberHandle,
    fired: bool,
}

impl ConsumerRebalanceListener for PauseWhileAssigning {
    fn on_assigned(
        &mut self,
        _: &[TopicPartition],
        _: &mut AssignedContext<'_>,
    ) -> Result<(), BoxError> {
        if !std::mem::replace(&mut self.fired, true) {
            self.group.hold_heartbeats(true);
            self.handle.step();
            self.group.advance(Duration::from_secs(2));
            self.handle.step();
            self.group.hold_heartbeats(false);
            // The coordinator found again, then the rejoin after the retry backoff.
            self.handle.step();
            self.handle.step();
        }
        Ok(())
    }
}

/// KIP-848, the member that declared its own loss (issue item 9): while the poll thread starts
/// the member's assignment, its heartbeats go unanswered past its session bound (a paused
/// coordinator) and the coordinator, whose session timeout is longer, keeps it; the member
/// fences everything as lost, and its epoch-0 rejoin is answered with the same epoch and the
/// same partitions, which it takes again through the normal path; a revocation (a second
/// member joins) and a re-assignment (it leaves) follow. The member's owned set and its
/// guard's must equal the coordinator's, and every partition is processed to its end.
#[test]
fn a_kip848_member_that_declared_its_own_loss_and_got_the_same_epoch_back_stays_in_step_with_the_coordinator(
) {
    let (log, group, processed) = kip848_group();
    let a = kip848_node(&group, "a");
    let pause = PauseWhileAssigning {
        group: group.clone(),
        handle: a.handle.clone(),
        fired: false,
    };
    let mut a = Node {
        consumer: a.consumer.with_rebalance_listener(pause),
        ..a
    };
    let all: BTreeSet<TopicPartition> = (0..PARTITIONS).map(tp).collect();
    drive(&mut [&mut a], &processed, 50, |_, _| true);
    let member_id = a.handle.identity().member_id;
    assert!(
        group.coordinator().is_member(&member_id),
        "the coordinator kept a"
    );
    for _ in 0..20 {
        a.turn(&processed);
    }
    assert!(
        a.consumer.stats().counters.lost >= PARTITIONS as u64,
        "a declared its assignment lost itself: {}",
        a.consumer.stats()
    );
    assert_eq!(held_by_coordinator(&group, &member_id), all);
    assert_eq!(owned_by_member_and_guard(&a), (all.clone(), all.clone()));
    // A revocation: b takes two partitions.
    let mut b = kip848_node(&group, "b");
    drive(&mut [&mut a, &mut b], &processed, 300, |_, nodes| {
        nodes[1].consumer.assignment().len() == 2
    });
    let a_held = held_by_coordinator(&group, &member_id);
    assert_eq!(a_held.len(), 2, "{a_held:?}");
    assert_eq!(owned_by_member_and_guard(&a), (a_held.clone(), a_held));
    // A re-assignment: b leaves and a gets them back.
    b.consumer.close().expect("close b");
    for _ in 0..20 {
        a.turn(&processed);
    }
    assert_eq!(held_by_coordinator(&group, &member_id), all);
    assert_eq!(owned_by_member_and_guard(&a), (all.clone(), all));
    drive(&mut [&mut a], &processed, 300, |p, _| {
        (0..PARTITIONS).all(|q| times(p).contains_key(&(tp(q), 9)))
    });
    a.consumer.commit().expect("commit");
    for p in 0..PARTITIONS {
        assert_eq!(
            committed(&log, p),
            Some(10),
            "partition {p} reached its end"
        );
    }
}

/// KIP-848, the ownership check (issue item 9): the consumer's session loses every partition
/// on its own (an application commit refused UNKNOWN_MEMBER_ID between polls) while the
/// membership, whose heartbeats go on being answered, and the broker keep them. After a few
/// heartbeat intervals with nothing on the way, the member takes them back through the normal
/// path (and says so in a warning) instead of leaving them assigned and consumed by nobody.
#[test]
fn a_kip848_consumer_that_dropped_partitions_its_membership_still_owns_takes_them_back() {
    let (log, group, processed) = kip848_group();
    let mut a = kip848_node(&group, "a");
    drive(&mut [&mut a], &processed, 50, |p, _| count(p) == 40);
    let member_id = a.handle.identity().member_id;
    log.refuse_commits(&tp(0), KafkaCode::UNKNOWN_MEMBER_ID, 1);
    assert!(a.consumer.commit().is_err(), "the commit was refused");
    assert_eq!(
        a.consumer.assignment(),
        vec![],
        "the session lost everything"
    );
    let all: BTreeSet<TopicPartition> = (0..PARTITIONS).map(tp).collect();
    assert_eq!(
        held_by_coordinator(&group, &member_id),
        all,
        "the broker kept them"
    );
    produce(&log, 10);
    drive(&mut [&mut a], &processed, 300, |p, nodes| {
        nodes[0].consumer.assignment().len() == PARTITIONS as usize
            && (0..PARTITIONS).all(|q| times(p).contains_key(&(tp(q), 19)))
    });
    assert_eq!(held_by_coordinator(&group, &member_id), all);
    assert_eq!(owned_by_member_and_guard(&a), (all.clone(), all));
}

/// Every partition's commits only move forward.
fn assert_commits_never_move_back(log: &InMemoryLog) {
    let mut last: BTreeMap<TopicPartition, i64> = BTreeMap::new();
    for entry in log.commit_history("g") {
        let previous = last.insert(entry.tp.clone(), entry.offset);
        assert!(
            previous.is_none_or(|p| p <= entry.offset),
            "{}: commit moved back from {previous:?} to {}",
            entry.tp,
            entry.offset
        );
    }
}

/// KIP-848: a paced commit read at one member epoch, still in flight while the member lost its
/// partitions (its session lapsed), another member processed and committed them further, and
/// the first got two of them back at a newer epoch, is refused STALE_MEMBER_EPOCH when it
/// arrives and never sent again with the newer epoch: its positions predate the loss, and
/// sending them would move the partitions' commits back.
#[test]
fn a_kip848_paced_commit_from_before_a_loss_is_never_sent_again_with_a_newer_epoch() {
    let (log, group, processed) = kip848_group();
    let mut a = kip848_node_with(&group, "a", &[("commit.interval.ms", "200")]);
    a.handle.hold_paced();
    drive(&mut [&mut a], &processed, 50, |p, _| count(p) == 40);
    thread::sleep(Duration::from_millis(250));
    a.turn(&processed);
    assert!(
        a.handle.paced_in_flight(),
        "a's paced commit at 10 is in flight"
    );
    // a goes silent; b joins and, once the coordinator expired a, takes everything.
    let mut b = kip848_node(&group, "b");
    drive(&mut [&mut b], &processed, 300, |_, nodes| {
        nodes[0].consumer.assignment().len() == PARTITIONS as usize
    });
    produce(&log, 10);
    drive(&mut [&mut b], &processed, 300, |p, _| {
        (0..PARTITIONS).all(|q| by(p, "b").contains(&(tp(q), 19)))
    });
    b.consumer.commit().expect("b commits");
    assert_all_committed_at(&log, 20);
    // a hears its membership is over, joins again, and gets two partitions back.
    drive(&mut [&mut a, &mut b], &processed, 300, |_, nodes| {
        nodes[0].consumer.assignment().len() == 2 && nodes[1].consumer.assignment().len() == 2
    });
    // The assignment's fencing raise is a synchronous commit: it went out only after the old
    // paced commit was answered (commits leave in the order they were made), and that answer
    // was the refusal, not a retry with the newer epoch.
    assert!(
        !a.handle.paced_in_flight(),
        "the fencing raise did not wait for the old paced commit"
    );
    a.handle.release_paced();
    assert_all_committed_at(&log, 20);
    assert_commits_never_move_back(&log);
}

// The rebalance listener: the same calls, in the same places, under every protocol.

/// What a [`Recorder`] saw, in order.
#[derive(Debug, Clone, PartialEq)]
enum Heard {
    Assigned(Vec<TopicPartition>),
    /// The partitions revoked, and what the group had committed for each at that moment.
    Revoked(Vec<RevokedPartition>, Vec<Option<i64>>),
    Lost(Vec<TopicPartition>),
}

/// A listener that records its calls, reads the committed offsets at `on_revoked` time, and
/// optionally seeks in `on_assigned` or fails in `on_revoked`.
#[derive(Clone)]
struct Recorder {
    heard: Arc<Mutex<Vec<Heard>>>,
    log: InMemoryLog,
    seek_on_assign: Option<(TopicPartition, i64)>,
    fail_revoked: bool,
}

impl Recorder {
    fn new(log: &InMemoryLog) -> Self {
        Recorder {
            heard: Arc::default(),
            log: log.clone(),
            seek_on_assign: None,
            fail_revoked: false,
        }
    }

    fn heard(&self) -> Vec<Heard> {
        self.heard.lock().unwrap().clone()
    }
}

impl ConsumerRebalanceListener for Recorder {
    fn on_assigned(
        &mut self,
        partitions: &[TopicPartition],
        context: &mut AssignedContext<'_>,
    ) -> Result<(), BoxError> {
        self.heard
            .lock()
            .unwrap()
            .push(Heard::Assigned(partitions.to_vec()));
        if let Some((tp, offset)) = &self.seek_on_assign {
            if partitions.contains(tp) {
                context.seek(tp, *offset)?;
            }
        }
        Ok(())
    }

    fn on_revoked(&mut self, partitions: &[RevokedPartition]) -> Result<(), BoxError> {
        let committed = partitions
            .iter()
            .map(|r| self.log.committed("g", &r.tp))
            .collect();
        self.heard
            .lock()
            .unwrap()
            .push(Heard::Revoked(partitions.to_vec(), committed));
        if self.fail_revoked {
            return Err("the application's own flush failed".into());
        }
        Ok(())
    }

    fn on_lost(&mut self, partitions: &[TopicPartition]) -> Result<(), BoxError> {
        self.heard
            .lock()
            .unwrap()
            .push(Heard::Lost(partitions.to_vec()));
        Ok(())
    }
}

/// Every handler call of the failure-policy tests: partition, offset, attempt, when, and whether
/// the handler succeeded.
type Tries = Arc<Mutex<Vec<(i32, i64, u32, Instant, bool)>>>;

/// Every dead-letter callback call: partition, offset, attempts, the error's text.
type Letters = Arc<Mutex<Vec<(i32, i64, u32, String)>>>;

/// A handler for `run` or the workers that fails the first `failures` tries of `poison` (all of
/// them with `u32::MAX`), records every call in `tries`, and sets `stop` once every record of
/// the log (`PARTITIONS` × `records`) succeeded or was given to the dead-letter callback
/// (counted in `dead`).
fn failing_handler(
    poison: (i32, i64),
    failures: u32,
    records: usize,
    tries: &Tries,
    dead: &Letters,
    stop: &Arc<AtomicBool>,
) -> impl Fn(&rebalance_guard::Record, &rebalance_guard::WorkContext<'_>) -> Result<(), std::io::Error>
       + Send
       + Sync
       + 'static {
    let (tries, dead, stop) = (tries.clone(), dead.clone(), stop.clone());
    move |record, ctx| {
        let fail = (record.partition, record.offset) == poison && ctx.attempt() <= failures;
        let mut all = tries.lock().unwrap();
        all.push((
            record.partition,
            record.offset,
            ctx.attempt(),
            Instant::now(),
            !fail,
        ));
        let finished = all.iter().filter(|t| t.4).count() + dead.lock().unwrap().len();
        if finished >= PARTITIONS as usize * records {
            stop.store(true, Ordering::SeqCst);
        }
        if fail {
            return Err(std::io::Error::other(format!("no (try {})", ctx.attempt())));
        }
        Ok(())
    }
}

/// Checks that `count` records succeeded, each exactly once.
fn assert_each_succeeded_once(tries: &Tries, count: usize) {
    let seen = successes(tries);
    assert_eq!(seen.len(), count, "every record succeeded: {seen:?}");
    assert!(
        seen.values().all(|n| *n == 1),
        "a record repeated: {seen:?}"
    );
}

/// A dead-letter callback that records its calls in `letters` and succeeds.
fn recording_letters(
    letters: &Letters,
) -> impl Fn(
    &rebalance_guard::Record,
    &(dyn std::error::Error + Send + Sync + 'static),
    u32,
) -> Result<(), std::io::Error>
       + Send
       + Sync
       + 'static {
    let letters = letters.clone();
    move |record, error, attempts| {
        letters.lock().unwrap().push((
            record.partition,
            record.offset,
            attempts,
            error.to_string(),
        ));
        Ok(())
    }
}

fn listened(node: Node, recorder: &Recorder) -> Node {
    Node {
        consumer: node.consumer.with_rebalance_listener(recorder.clone()),
        ..node
    }
}

/// `a` owned every partition and finished 0..=9 of each (nothing committed: the interval is an
/// hour); `b` joins. `a`'s listener heard the whole assignment first, then the revocation of
/// exactly what moved, drained (last finished 9) and not committed yet (the group held nothing
/// for them while it ran, the commit carried 10 right after).
fn assert_listener_saw_the_handoff(a: &Recorder, moved: &[TopicPartition], log: &InMemoryLog) {
    let heard = a.heard();
    let mut assigned: Vec<TopicPartition> = match heard.first() {
        Some(Heard::Assigned(partitions)) => partitions.clone(),
        other => panic!("first call: {other:?} (all: {heard:?})"),
    };
    assigned.sort();
    assert_eq!(assigned, (0..PARTITIONS).map(tp).collect::<Vec<_>>());
    let (revoked, committed_then) = heard
        .iter()
        .find_map(|h| match h {
            Heard::Revoked(r, c) => Some((r.clone(), c.clone())),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no on_revoked: {heard:?}"));
    for tp in moved {
        let at = revoked
            .iter()
            .position(|r| &r.tp == tp)
            .unwrap_or_else(|| panic!("{tp} moved without on_revoked: {revoked:?}"));
        assert_eq!(revoked[at].last_finished, Some(9), "{revoked:?}");
        assert_eq!(revoked[at].committing, Some(10), "{revoked:?}");
        assert_eq!(committed_then[at], None, "on_revoked ran after the commit");
        assert_eq!(
            log.committed("g", tp),
            Some(10),
            "the commit after on_revoked"
        );
    }
    assert!(
        !heard.iter().any(|h| matches!(h, Heard::Lost(_))),
        "{heard:?}"
    );
}

#[test]
fn the_listener_hears_an_eager_handoff_drained_and_before_its_commit() {
    let (log, group, processed) = classic_group();
    let recorder = Recorder::new(&log);
    let mut a = listened(classic_node(&group, "a", Strategy::Range, &[]), &recorder);
    drive(&mut [&mut a], &processed, 50, |p, _| count(p) == 40);
    let mut b = classic_node(&group, "b", Strategy::Range, &[]);
    second_member_takes_half(&mut a, &mut b, &log, &processed);
    let moved = b.consumer.assignment();
    assert_listener_saw_the_handoff(&recorder, &moved, &log);
    // Eager: everything was revoked, and what a keeps was assigned again.
    let heard = recorder.heard();
    let Some(Heard::Revoked(revoked, _)) = heard.get(1) else {
        panic!("{heard:?}")
    };
    assert_eq!(revoked.len(), PARTITIONS as usize, "eager revokes all");
    assert!(matches!(heard.get(2), Some(Heard::Assigned(kept)) if kept.len() == 2));
}

#[test]
fn the_listener_hears_only_what_moves_in_a_cooperative_handoff() {
    let (log, group, processed) = classic_group();
    let recorder = Recorder::new(&log);
    let strategy = Strategy::CooperativeSticky;
    let mut a = listened(classic_node(&group, "a", strategy, &[]), &recorder);
    drive(&mut [&mut a], &processed, 50, |p, _| count(p) == 40);
    let mut b = classic_node(&group, "b", strategy, &[]);
    second_member_takes_half(&mut a, &mut b, &log, &processed);
    let moved = b.consumer.assignment();
    assert_listener_saw_the_handoff(&recorder, &moved, &log);
    let revoked: Vec<TopicPartition> = recorder
        .heard()
        .iter()
        .filter_map(|h| match h {
            Heard::Revoked(r, _) => Some(r.iter().map(|r| r.tp.clone())),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(revoked.len(), 2, "only what moved: {revoked:?}");
}

#[test]
fn the_listener_hears_a_kip848_revocation_before_its_commit_and_a_loss_without_one() {
    let (log, group, processed) = kip848_group();
    let recorder = Recorder::new(&log);
    let mut a = listened(kip848_node(&group, "a"), &recorder);
    drive(&mut [&mut a], &processed, 50, |p, _| count(p) == 40);
    let mut b = kip848_node(&group, "b");
    second_member_takes_half(&mut a, &mut b, &log, &processed);
    let moved = b.consumer.assignment();
    assert_listener_saw_the_handoff(&recorder, &moved, &log);
    // Then a fenced epoch: on_lost, with nothing committed after it.
    produce(&log, 10);
    let history = log.commit_history("g").len();
    let member_id = a.handle.identity().member_id;
    let kept = a.consumer.assignment();
    lose_mid_batch(&mut a, || {
        group
            .coordinator()
            .inject(&member_id, KafkaCode::FENCED_MEMBER_EPOCH)
    });
    let heard = recorder.heard();
    let lost: Vec<TopicPartition> = heard
        .iter()
        .filter_map(|h| match h {
            Heard::Lost(l) => Some(l.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    for tp in &kept {
        assert!(lost.contains(tp), "{tp} lost without on_lost: {heard:?}");
    }
    assert_eq!(log.commit_history("g").len(), history, "nothing committed");
    assert!(
        !matches!(heard.last(), Some(Heard::Revoked(..))),
        "a loss is never a revocation: {heard:?}"
    );
}

#[test]
fn a_seek_in_on_assigned_is_where_reading_starts() {
    let (log, group, processed) = kip848_group();
    let mut recorder = Recorder::new(&log);
    recorder.seek_on_assign = Some((tp(0), 7));
    let mut a = listened(kip848_node(&group, "a"), &recorder);
    drive(&mut [&mut a], &processed, 50, |p, _| count(p) == 33);
    let first: Vec<i64> = by(&processed, "a")
        .into_iter()
        .filter(|(t, _)| *t == tp(0))
        .map(|(_, o)| o)
        .collect();
    assert_eq!(first, vec![7, 8, 9], "read from the listener's seek");
    a.consumer.commit().expect("commit");
    assert_eq!(committed(&log, 0), Some(10));
}

#[test]
fn a_failing_on_revoked_is_returned_and_the_handoff_still_commits() {
    let (log, group, processed) = kip848_group();
    let mut recorder = Recorder::new(&log);
    recorder.fail_revoked = true;
    let mut a = listened(kip848_node(&group, "a"), &recorder);
    drive(&mut [&mut a], &processed, 50, |p, _| count(p) == 40);
    let mut b = kip848_node(&group, "b");
    let mut reported = None;
    for _ in 0..300 {
        b.turn(&processed);
        match a.consumer.poll(Duration::ZERO) {
            Ok(mut batch) => {
                while let Some(d) = batch.next() {
                    batch.complete(d);
                }
            }
            Err(error) => {
                reported = Some(error);
                break;
            }
        }
    }
    let error = reported.expect("the listener's error reached the caller");
    assert!(
        matches!(
            error,
            ConsumerError::Listener {
                callback: "on_revoked",
                ..
            }
        ),
        "{error}"
    );
    let moved: Vec<TopicPartition> = recorder
        .heard()
        .iter()
        .filter_map(|h| match h {
            Heard::Revoked(r, _) => Some(r.iter().map(|r| r.tp.clone())),
            _ => None,
        })
        .flatten()
        .collect();
    assert!(!moved.is_empty());
    for tp in &moved {
        assert_eq!(log.committed("g", tp), Some(10), "committed all the same");
    }
}

/// A close commits once, through the revocation of everything it owns: every finished record,
/// in the current generation.
#[test]
fn a_close_commits_everything_finished_in_one_commit() {
    let (log, _group, _processed, a) = classic_a_after_forty(Strategy::CooperativeSticky);
    let history = log.commit_history("g").len();
    a.consumer.close().expect("close");
    assert_all_committed_at(&log, 10);
    assert_eq!(
        log.commit_history("g").len(),
        history + PARTITIONS as usize,
        "one commit at close, of each partition once"
    );
}

/// A partition the close could not commit (refused with a code that ends the generation: the
/// group began to re-form) is named in the close's error; the others are committed.
#[test]
fn a_close_that_could_not_commit_a_partition_names_it() {
    let (log, _group, _processed, a) = classic_a_after_forty(Strategy::CooperativeSticky);
    log.refuse_commits(&tp(0), KafkaCode::REBALANCE_IN_PROGRESS, 1);
    let error = a
        .consumer
        .close()
        .expect_err("partition 0 was not committed");
    let ConsumerError::Handoff(failures) = &error else {
        panic!("{error}")
    };
    assert_eq!(failures.len(), 1, "{error}");
    assert_eq!(failures[0].tp, tp(0));
    assert_eq!(
        error.kind(),
        rebalance_guard::ErrorKind::GenerationOver,
        "{error}"
    );
    assert_eq!(committed(&log, 0), None);
    for p in 1..PARTITIONS {
        assert_eq!(committed(&log, p), Some(10));
    }
}

/// The successful calls per (partition, offset).
fn successes(tries: &Tries) -> BTreeMap<(i32, i64), usize> {
    let mut seen = BTreeMap::new();
    for (p, o, _, _, ok) in tries.lock().unwrap().iter() {
        if *ok {
            *seen.entry((*p, *o)).or_insert(0) += 1;
        }
    }
    seen
}

/// The attempts the handler was told for `record`, in call order, with when each started.
fn attempts_of(tries: &Tries, record: (i32, i64)) -> Vec<(u32, Instant)> {
    tries
        .lock()
        .unwrap()
        .iter()
        .filter(|t| (t.0, t.1) == record)
        .map(|t| (t.2, t.3))
        .collect()
}

fn retry_node(extra: &[(&str, &str)]) -> (InMemoryLog, Node) {
    let log = log_with(10);
    let group = ClassicGroup::new(log.clone(), SESSION);
    let node = classic_node(&group, "a", Strategy::Range, extra);
    (log, node)
}

/// `run` with `processing.retries=2`: a record failing twice succeeds on its third try, told
/// attempts 1, 2, 3, each after its backoff; its partition waits meanwhile but the others are
/// processed (the poll loop goes on); every record succeeds exactly once and all is committed.
#[test]
fn run_retries_a_failing_record_after_its_backoff_while_the_other_partitions_go_on() {
    let (log, mut a) = retry_node(&[
        ("processing.retries", "2"),
        ("processing.retry.backoff.ms", "150"),
        ("processing.retry.backoff.max.ms", "1000"),
    ]);
    let (tries, dead, stop) = (Tries::default(), Arc::default(), Arc::default());
    let handler = failing_handler((0, 3), 2, 10, &tries, &dead, &stop);
    a.consumer.run(&stop, handler).expect("run");
    let stats = a.consumer.stats();
    a.consumer.close().expect("close");
    let attempts = attempts_of(&tries, (0, 3));
    assert_eq!(
        attempts.iter().map(|a| a.0).collect::<Vec<_>>(),
        [1, 2, 3],
        "{attempts:?}"
    );
    let waits: Vec<Duration> = attempts.windows(2).map(|w| w[1].1 - w[0].1).collect();
    assert!(
        waits[0] >= Duration::from_millis(150) && waits[1] >= Duration::from_millis(300),
        "the backoff doubles from 150 ms: {waits:?}"
    );
    let first_failure = attempts[0].1;
    let others_meanwhile = tries
        .lock()
        .unwrap()
        .iter()
        .filter(|t| t.0 != 0 && t.3 > first_failure && t.3 < attempts[1].1)
        .count();
    assert!(
        others_meanwhile > 0,
        "no other partition was processed during the backoff"
    );
    assert_each_succeeded_once(&tries, 40);
    assert_all_committed_at(&log, 10);
    assert_eq!((stats.retries, stats.dead_lettered), (2, 0), "{stats}");
    assert_eq!(
        released_of(&stats, 0),
        2,
        "the record waits paused, not handed out and given back again and again: {stats}"
    );
}

/// How many records of `partition` the guard released (given back without their effect).
fn released_of(stats: &rebalance_guard::ConsumerStats, partition: i32) -> u64 {
    stats
        .partitions
        .iter()
        .find(|p| p.guard.tp == tp(partition))
        .map_or(0, |p| p.guard.released)
}

/// A poison-record test's log and node, and what its handler and callback record.
struct PoisonRun {
    log: InMemoryLog,
    node: Node,
    tries: Tries,
    dead: Letters,
    stop: Arc<AtomicBool>,
}

/// A node with `processing.retries=1` (1 ms backoff), and a handler that always fails on
/// (1, 5).
fn poison_run() -> (
    PoisonRun,
    impl Fn(
            &rebalance_guard::Record,
            &rebalance_guard::WorkContext<'_>,
        ) -> Result<(), std::io::Error>
        + Send
        + Sync
        + 'static,
) {
    let (log, node) = retry_node(&[
        ("processing.retries", "1"),
        ("processing.retry.backoff.ms", "1"),
        ("processing.retry.backoff.max.ms", "1"),
    ]);
    let (tries, dead, stop) = (Tries::default(), Letters::default(), Arc::default());
    let handler = failing_handler((1, 5), u32::MAX, 10, &tries, &dead, &stop);
    let run = PoisonRun {
        log,
        node,
        tries,
        dead,
        stop,
    };
    (run, handler)
}

/// `run` with a poison record: after `processing.retries + 1` failures the dead-letter callback
/// takes it once, with the last error and the attempt count; it then counts as finished, so the
/// commit passes it, and the stats count one dead letter and the retries.
#[test]
fn run_dead_letters_a_poison_record_once_and_commits_past_it() {
    let (
        PoisonRun {
            log,
            node: a,
            tries,
            dead,
            stop,
        },
        handler,
    ) = poison_run();
    let mut consumer = a.consumer.on_dead_letter(recording_letters(&dead));
    consumer.run(&stop, handler).expect("run");
    let stats = consumer.stats();
    consumer.close().expect("close");
    assert_eq!(
        *dead.lock().unwrap(),
        [(1, 5, 2, "no (try 2)".to_string())],
        "called once, with the last error and attempts = retries + 1"
    );
    assert_each_succeeded_once(&tries, 39);
    assert_all_committed_at(&log, 10);
    assert_eq!((stats.retries, stats.dead_lettered), (1, 1), "{stats}");
}

/// A dead-letter callback that fails stops `run` with the error naming the record, and nothing
/// is committed past the record.
#[test]
fn run_stops_when_the_dead_letter_callback_fails_and_commits_nothing_past_the_record() {
    let (
        PoisonRun {
            log, node: a, stop, ..
        },
        handler,
    ) = poison_run();
    let mut consumer = a
        .consumer
        .on_dead_letter(|_, _, _| Err(std::io::Error::other("the dead-letter topic is down")));
    match consumer.run(&stop, handler) {
        Err(rebalance_guard::ConsumerError::DeadLetter {
            tp: partition,
            offset,
            attempts,
            ..
        }) => assert_eq!((partition, offset, attempts), (tp(1), 5, 2)),
        other => panic!("the run must stop on the callback's failure, got {other:?}"),
    }
    assert!(
        committed(&log, 1).is_some_and(|c| c <= 5),
        "committed past the record: {:?}",
        committed(&log, 1)
    );
    assert_eq!(consumer.stats().dead_lettered, 0);
}

/// The decoupled mode with one worker: a record failing twice is retried after its backoff
/// without the worker waiting it out (the other partitions' records run on the same worker
/// meanwhile); every record succeeds once and all is committed. In partition order no later
/// record of its partition runs before its last try.
#[test]
fn workers_retry_without_holding_up_the_other_partitions_of_the_worker() {
    for order in ["partition", "key", "unordered"] {
        workers_retry_in(order);
    }
}

fn workers_retry_in(order: &str) {
    eprintln!("processing.order={order}");
    let (log, mut a) = retry_node(&[
        ("processing.retries", "2"),
        ("processing.retry.backoff.ms", "200"),
        ("processing.retry.backoff.max.ms", "200"),
        ("commit.interval.ms", "5"),
        ("processing.order", order),
    ]);
    let (tries, dead, stop) = (Tries::default(), Arc::default(), Arc::default());
    let handler = failing_handler((0, 3), 2, 10, &tries, &dead, &stop);
    let run_stop = stop.clone();
    let runner = thread::spawn(move || {
        let result = a.consumer.run_with_workers(&run_stop, 1, 4, handler);
        let stats = a.consumer.stats();
        a.consumer.close().expect("close");
        (result, stats)
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while !stop.load(Ordering::SeqCst) {
        assert!(
            Instant::now() < deadline,
            "not done: {:?}",
            successes(&tries)
        );
        thread::sleep(Duration::from_millis(5));
    }
    let (result, stats) = runner.join().expect("runner");
    result.expect("run with workers");
    let attempts = attempts_of(&tries, (0, 3));
    assert_eq!(
        attempts.iter().map(|a| a.0).collect::<Vec<_>>(),
        [1, 2, 3],
        "{attempts:?}"
    );
    assert!(
        attempts[1].1 - attempts[0].1 >= Duration::from_millis(200),
        "{attempts:?}"
    );
    let others_meanwhile = tries
        .lock()
        .unwrap()
        .iter()
        .filter(|t| t.0 != 0 && t.3 > attempts[0].1 && t.3 < attempts[1].1)
        .count();
    assert!(others_meanwhile > 0, "the worker waited out the backoff");
    assert_each_succeeded_once(&tries, 40);
    let later_of_0: Vec<i64> = tries
        .lock()
        .unwrap()
        .iter()
        .filter(|t| t.0 == 0 && t.1 > 3 && t.3 < attempts[2].1)
        .map(|t| t.1)
        .collect();
    if order == "partition" {
        assert_eq!(
            later_of_0,
            Vec::<i64>::new(),
            "later records overtook the retry"
        );
    }
    assert_all_committed_at(&log, 10);
    assert_eq!((stats.retries, stats.dead_lettered), (2, 0), "{stats}");
    // Each failure gives back the record and at most the later records of its partition
    // already handed to the worker (10 records in all).
    assert!(
        released_of(&stats, 0) <= 2 * 10,
        "the record waits paused, not handed out and given back again and again: {} {stats}",
        released_of(&stats, 0)
    );
}

/// `run` with a dead-letter callback and no retries: the handler fails on a record after the
/// member lost its partitions (the coordinator removed it mid-record), so the record is neither
/// dead-lettered nor retried by this assignment; after the member rejoins it comes again as a
/// first attempt and succeeds, and no record is lost (what was not committed before the loss is
/// processed again, as after any loss).
#[test]
fn run_does_not_dead_letter_a_record_whose_partition_was_lost_under_it() {
    let log = log_with(10);
    let group = ClassicGroup::new(log.clone(), SESSION);
    let a = classic_node(&group, "a", Strategy::Range, &[("processing.retries", "0")]);
    let letters = Letters::default();
    let mut consumer = a.consumer.on_dead_letter(recording_letters(&letters));
    let (handle, stop) = (a.handle.clone(), AtomicBool::new(false));
    let tries = Tries::default();
    let lost_under_it = AtomicBool::new(false);
    consumer
        .run(&stop, |record, ctx| {
            let mut all = tries.lock().unwrap();
            let first = !all.iter().any(|t| (t.0, t.1) == (0, 3));
            let fail = (record.partition, record.offset) == (0, 3) && first;
            if fail {
                group.coordinator().leave(&handle.identity().member_id);
                handle.step();
                lost_under_it.store(!ctx.is_current(), Ordering::SeqCst);
            }
            all.push((
                record.partition,
                record.offset,
                ctx.attempt(),
                Instant::now(),
                !fail,
            ));
            // Every record succeeded since the loss (what was not committed before it comes again).
            let since_loss = all.iter().position(|t| !t.4).map_or(0, |at| at + 1);
            let distinct: std::collections::BTreeSet<(i32, i64)> = all[since_loss..]
                .iter()
                .filter(|t| t.4)
                .map(|t| (t.0, t.1))
                .collect();
            if distinct.len() >= 40 {
                stop.store(true, Ordering::SeqCst);
            }
            match fail {
                true => Err(std::io::Error::other("failed after the loss")),
                false => Ok(()),
            }
        })
        .expect("run");
    consumer.close().expect("close");
    assert!(
        lost_under_it.load(Ordering::SeqCst),
        "the loss reached the lease"
    );
    assert_eq!(*letters.lock().unwrap(), [], "dead-lettered after the loss");
    assert_eq!(
        attempts_of(&tries, (0, 3))
            .iter()
            .map(|a| a.0)
            .collect::<Vec<_>>(),
        [1, 1],
        "handed out again after the rejoin as a first attempt"
    );
    let seen = successes(&tries);
    assert_eq!(seen.len(), 40, "{seen:?}");
    assert_eq!(seen[&(0, 3)], 1, "{seen:?}");
    assert_all_committed_at(&log, 10);
}

/// `fetch.buffer.bytes` bounds what a member holds ahead of its handler: each fetch answer asks
/// for at most half of it, shared evenly by the partitions owned (never below 64 KiB each), so
/// that a partition fetched alone does not take a whole answer and pin it.
#[test]
fn the_fetch_buffer_bound_is_shared_among_the_partitions_owned() {
    let cases: [(&[(&str, &str)], i32); 3] = [
        // 1 MiB: answers of 512 KiB, 128 KiB per partition of the four.
        (&[("fetch.buffer.bytes", "1048576")], 128 * 1024),
        // 256 KiB: 32 KiB per partition would be below the floor.
        (&[("fetch.buffer.bytes", "262144")], 64 * 1024),
        // Room for every partition's max.partition.fetch.bytes: as set.
        (
            &[
                ("fetch.buffer.bytes", "16777216"),
                ("max.partition.fetch.bytes", "100000"),
            ],
            100_000,
        ),
    ];
    for (extra, expected) in cases {
        let (log, group, processed) = classic_group();
        let mut node = classic_node(&group, "a", Strategy::Range, extra);
        while count(&processed) < 4 * 10 {
            node.turn(&processed);
        }
        assert_eq!(
            log.last_partition_max_bytes(),
            Some(expected),
            "{extra:?}: each partition's share of a fetch"
        );
        node.consumer.close().expect("close");
    }
}

/// `run` allocates nothing per record once it runs steadily, keyed or not (a short idempotency
/// key is held inline): over 30,000 records, after 10,000 that warm it up, fewer than one record
/// in a hundred sees the poll thread (where the handler and the in-memory fetches run) allocate
/// anything since the record before it. What allocates between two records is a poll (its
/// fetch, which the in-memory log encodes record by record), a commit or a batch's start; an
/// allocation per record would show between every two.
#[test]
fn run_allocates_nothing_per_record_in_steady_state() {
    use crate::counting_alloc::THREAD_ALLOCATIONS;
    const WARM_UP: u64 = 10_000;
    const MEASURED: u64 = 30_000;
    for keyed in [false, true] {
        // 4 partitions of 12,500: the run ends while every partition still has records.
        let log = log_with(12_500);
        let group = ClassicGroup::new(log.clone(), SESSION);
        let node = classic_node(&group, "a", Strategy::Range, &[]);
        let mut consumer = node.consumer;
        if keyed {
            consumer = consumer.with_idempotency_key(|record| {
                let mut key = [0u8; 12];
                key[..4].copy_from_slice(&record.partition.to_be_bytes());
                key[4..].copy_from_slice(&record.offset.to_be_bytes());
                Some(key)
            });
        }
        let stop = AtomicBool::new(false);
        let (mut seen, mut last, mut allocating, mut allocations) = (0u64, 0u64, 0u64, 0u64);
        consumer
            .run(&stop, |_record, _ctx| {
                let now = THREAD_ALLOCATIONS.with(|c| c.get());
                seen += 1;
                if seen > WARM_UP {
                    allocating += u64::from(now != last);
                    allocations += now - last;
                }
                last = now;
                if seen == WARM_UP + MEASURED {
                    stop.store(true, Ordering::SeqCst);
                }
                Ok::<(), std::convert::Infallible>(())
            })
            .expect("run");
        consumer.close().expect("close");
        assert_eq!(
            seen,
            WARM_UP + MEASURED,
            "the run read every record it needed"
        );
        assert!(
            allocating < MEASURED / 100,
            "keyed={keyed}: {allocating} of {MEASURED} records came after an allocation on the \
             poll thread ({allocations} allocations in all)"
        );
    }
}
