//! The fencing token across ownership changes: random sequences of joins, leaves, losses (the
//! coordinator ends a membership: a session that expired, a fenced member epoch) and static
//! restarts (a new process under the same `group.instance.id`, which the classic protocol gives
//! the old process's generation), under the classic protocol and KIP-848, over the in-memory
//! coordinators, each consumer the real one.
//!
//! What must hold, per partition (the statement DESIGN.md proves):
//!
//! 1. In the order the coordinator stored the group's commits, the token in their metadata
//!    never goes down.
//! 2. Every record is handed out with a token (never 0), the token its assignment raised and
//!    committed; every record of one assignment (member process, guard epoch) carries the same
//!    token, and two assignments never carry the same one.
//!
//! Together: each assignment's token is larger than the token of every assignment of the
//! partition whose raise the coordinator stored before it, to this member or any other.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use rebalance_guard::group::Strategy as Assignor;
use rebalance_guard::testing::{ClassicGroup, InMemoryLog, Kip848Group};
use rebalance_guard::wire::KafkaCode;
use rebalance_guard::TopicPartition;

use super::in_memory::{
    classic_group, classic_node, kip848_group, kip848_node_with, produce, tp, Node, PARTITIONS,
};

/// Member processes at most at once.
const SLOTS: usize = 3;

#[derive(Clone, Copy, Debug)]
enum Protocol {
    Classic(Assignor),
    Kip848,
}

#[derive(Clone, Debug)]
enum Op {
    /// Every running process takes this many turns.
    Turns(u8),
    /// A process starts in the slot (if it has none).
    Join(usize),
    /// The slot's process closes: a dynamic member leaves the group; a static one stops and
    /// comes back at once under its instance id (a static member never sends a leave).
    Leave(usize),
    /// The slot's process stops without leaving and a new one takes its place under the same
    /// `group.instance.id` (slot 0 is static; the others are dynamic and simply rejoin).
    Restart(usize),
    /// The coordinator ends the slot's membership (a session that expired, a fenced member
    /// epoch); the process hears it at its next turn.
    Lose(usize),
    /// Ten more records in every partition.
    Produce,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1u8..6).prop_map(Op::Turns),
        2 => (0..SLOTS).prop_map(Op::Join),
        1 => (0..SLOTS).prop_map(Op::Leave),
        1 => (0..SLOTS).prop_map(Op::Restart),
        1 => (0..SLOTS).prop_map(Op::Lose),
        1 => Just(Op::Produce),
    ]
}

/// One record handed out: by which process, in which assignment (guard epoch), with which token.
#[derive(Clone, Debug)]
struct Handed {
    process: String,
    tp: TopicPartition,
    offset: i64,
    epoch: u64,
    token: u64,
}

enum Group {
    Classic(ClassicGroup),
    Kip848(Kip848Group),
}

struct Run {
    protocol: Protocol,
    group: Group,
    log: InMemoryLog,
    slots: [Option<Node>; SLOTS],
    started: usize,
    /// Records produced per partition.
    produced: usize,
    handed: Arc<Mutex<Vec<Handed>>>,
}

impl Run {
    fn new(protocol: Protocol) -> Self {
        let (log, group) = match protocol {
            Protocol::Classic(_) => {
                let (log, group, _) = classic_group();
                (log, Group::Classic(group))
            }
            Protocol::Kip848 => {
                let (log, group, _) = kip848_group();
                (log, Group::Kip848(group))
            }
        };
        Run {
            protocol,
            group,
            log,
            slots: [None, None, None],
            started: 0,
            produced: 10,
            handed: Arc::default(),
        }
    }

    fn start(&mut self, slot: usize) {
        self.started += 1;
        let name = format!("s{slot}.{}", self.started);
        let instance = format!("instance-{slot}");
        let mut extra: Vec<(&str, &str)> = Vec::new();
        if slot == 0 {
            extra.push(("group.instance.id", instance.as_str()));
        }
        let mut node = match (&self.group, self.protocol) {
            (Group::Classic(group), Protocol::Classic(strategy)) => {
                classic_node(group, "", strategy, &extra)
            }
            (Group::Kip848(group), _) => kip848_node_with(group, "", &extra),
            _ => unreachable!("the group matches the protocol"),
        };
        node.name = name;
        self.slots[slot] = Some(node);
    }

    fn turn(&mut self) {
        for node in self.slots.iter_mut().flatten() {
            let mut batch = match node.consumer.poll(Duration::ZERO) {
                Ok(batch) => batch,
                // A membership refused (a static instance taken over): the process is over.
                Err(_) => continue,
            };
            while let Some(delivery) = batch.next() {
                self.handed.lock().unwrap().push(Handed {
                    process: node.name.clone(),
                    tp: delivery.lease().tp.clone(),
                    offset: delivery.record.offset,
                    epoch: delivery.lease().epoch,
                    token: delivery.fencing_token(),
                });
                batch.complete(delivery);
            }
        }
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Turns(n) => {
                for _ in 0..n {
                    self.turn();
                }
            }
            Op::Join(slot) => {
                if self.slots[slot].is_none() {
                    self.start(slot);
                }
            }
            Op::Leave(slot) | Op::Restart(slot) => {
                if let Some(node) = self.slots[slot].take() {
                    let _ = node.consumer.close();
                    if slot == 0 || matches!(op, Op::Restart(_)) {
                        self.start(slot);
                    }
                }
            }
            Op::Lose(slot) => {
                if let Some(node) = &self.slots[slot] {
                    let member_id = node.handle.identity().member_id;
                    match &self.group {
                        Group::Classic(group) => group.coordinator().leave(&member_id),
                        Group::Kip848(group) => group
                            .coordinator()
                            .inject(&member_id, KafkaCode::FENCED_MEMBER_EPOCH),
                    }
                }
            }
            Op::Produce => {
                produce(&self.log, 10);
                self.produced += 10;
            }
        }
    }

    /// Turns until every record produced was handed out at least once (at most `rounds`).
    fn settle(&mut self, rounds: usize) -> bool {
        for _ in 0..rounds {
            self.turn();
            let seen: BTreeSet<(TopicPartition, i64)> = self
                .handed
                .lock()
                .unwrap()
                .iter()
                .map(|h| (h.tp.clone(), h.offset))
                .collect();
            if seen.len() == self.produced * PARTITIONS as usize {
                return true;
            }
        }
        false
    }

    fn close(self) {
        for node in self.slots.into_iter().flatten() {
            let _ = node.consumer.close();
        }
    }
}

/// The token in committed metadata (`rgc2;<token>;...`), 0 without one.
fn token_of(metadata: Option<&str>) -> u64 {
    metadata
        .and_then(|m| m.strip_prefix("rgc2;"))
        .and_then(|rest| rest.split_once(';'))
        .and_then(|(token, _)| token.parse().ok())
        .unwrap_or(0)
}

fn check(run: &Run) -> Result<(), TestCaseError> {
    // 1. The stored commits' tokens never go down, per partition.
    let mut stored: BTreeMap<TopicPartition, BTreeSet<u64>> = BTreeMap::new();
    let mut last: BTreeMap<TopicPartition, u64> = BTreeMap::new();
    for entry in run.log.commit_history("g") {
        let token = token_of(entry.metadata.as_deref());
        let previous = last.insert(entry.tp.clone(), token).unwrap_or(0);
        prop_assert!(
            token >= previous,
            "{}: a stored commit's token went down from {previous} to {token}",
            entry.tp
        );
        stored.entry(entry.tp.clone()).or_default().insert(token);
    }
    // 2. Every record carries its assignment's token, one per assignment, committed.
    let handed = run.handed.lock().unwrap();
    let mut by_assignment: BTreeMap<(TopicPartition, String, u64), u64> = BTreeMap::new();
    let mut owner_of: BTreeMap<(TopicPartition, u64), (String, u64)> = BTreeMap::new();
    for h in handed.iter() {
        prop_assert!(h.token > 0, "{h:?} was handed out without a token");
        let assignment = (h.tp.clone(), h.process.clone(), h.epoch);
        let token = *by_assignment.entry(assignment).or_insert(h.token);
        prop_assert_eq!(token, h.token, "two tokens in one assignment: {:?}", h);
        let owner = owner_of
            .entry((h.tp.clone(), h.token))
            .or_insert((h.process.clone(), h.epoch));
        prop_assert_eq!(
            owner.clone(),
            (h.process.clone(), h.epoch),
            "two assignments of {} carried token {}",
            h.tp,
            h.token
        );
        prop_assert!(
            stored.get(&h.tp).is_some_and(|s| s.contains(&h.token)),
            "{h:?}: its token was never committed"
        );
    }
    Ok(())
}

fn run_ops(protocol: Protocol, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut run = Run::new(protocol);
    run.start(0);
    prop_assert!(run.settle(300), "the first member never read the log");
    for op in ops {
        run.apply(op);
    }
    // Whatever the sequence left running goes on; the properties hold whether or not the
    // group settled (a static member that stopped without leaving holds its partitions until
    // its session ends, which these runs do not wait for).
    run.settle(300);
    let checked = check(&run);
    run.close();
    checked
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn tokens_only_grow_under_the_classic_eager_protocol(ops in proptest::collection::vec(op(), 1..24)) {
        run_ops(Protocol::Classic(Assignor::Range), &ops)?;
    }

    #[test]
    fn tokens_only_grow_under_the_classic_cooperative_protocol(ops in proptest::collection::vec(op(), 1..24)) {
        run_ops(Protocol::Classic(Assignor::CooperativeSticky), &ops)?;
    }

    #[test]
    fn tokens_only_grow_under_kip848(ops in proptest::collection::vec(op(), 1..24)) {
        run_ops(Protocol::Kip848, &ops)?;
    }
}

/// The case the generation cannot fence, spelled out: a static member's process is replaced by
/// a new one under the same instance id (the classic coordinator gives it the same generation,
/// no rebalance), and the new process's token is larger than every token the old one used.
#[test]
fn a_static_restart_takes_a_larger_token_than_the_process_it_replaces() {
    for protocol in [Protocol::Classic(Assignor::Range), Protocol::Kip848] {
        let mut run = Run::new(protocol);
        run.start(0);
        for _ in 0..20 {
            run.turn();
        }
        let old: Vec<u64> = run.handed.lock().unwrap().iter().map(|h| h.token).collect();
        assert!(
            !old.is_empty(),
            "{protocol:?}: the first process handed nothing out"
        );
        run.apply(&Op::Restart(0));
        run.apply(&Op::Produce);
        for _ in 0..20 {
            run.turn();
        }
        let handed = run.handed.lock().unwrap().clone();
        let old_max = old.iter().max().copied().unwrap_or(0);
        let new: Vec<&Handed> = handed.iter().filter(|h| h.process == "s0.2").collect();
        assert_eq!(
            new.len(),
            PARTITIONS as usize * 10,
            "{protocol:?}: the new process read the new records"
        );
        for h in new {
            assert!(
                h.token > old_max,
                "{protocol:?}: {h:?} is not above the replaced process's {old_max}"
            );
        }
        check(&run).unwrap_or_else(|e| panic!("{protocol:?}: {e}"));
        run.close();
    }
}

/// A raise the coordinator refused leaves its partition owned and unread: none of its records
/// is handed out (without a token a sink could not fence them) until a later poll raised it,
/// while the other partitions are read meanwhile.
#[test]
fn a_partition_whose_raise_was_refused_is_not_read_until_a_retry_raised_it() {
    let (log, group, _) = kip848_group();
    log.refuse_commits(&tp(0), KafkaCode::OFFSET_METADATA_TOO_LARGE, 1);
    let mut node = kip848_node_with(&group, "a", &[("retry.backoff.ms", "50")]);
    let mut handed: Vec<(i32, u64)> = Vec::new();
    let turn = |node: &mut Node, handed: &mut Vec<(i32, u64)>| {
        let mut batch = node.consumer.poll(Duration::ZERO).expect("poll");
        while let Some(delivery) = batch.next() {
            handed.push((delivery.lease().tp.partition, delivery.fencing_token()));
            batch.complete(delivery);
        }
    };
    let began = Instant::now();
    while handed.len() < 30 {
        turn(&mut node, &mut handed);
        assert!(began.elapsed() < Duration::from_secs(10), "{handed:?}");
    }
    assert!(
        handed.iter().all(|&(p, _)| p != 0),
        "a record of the unfenced partition was handed out: {handed:?}"
    );
    assert_eq!(node.consumer.assignment().len(), PARTITIONS as usize);
    // The retry, after its backoff.
    while handed.len() < 40 {
        turn(&mut node, &mut handed);
        assert!(began.elapsed() < Duration::from_secs(10), "{handed:?}");
    }
    assert!(
        handed.iter().all(|&(_, token)| token == 1),
        "the refused raise stored nothing: every token is 1: {handed:?}"
    );
    node.consumer.close().expect("close");
}
