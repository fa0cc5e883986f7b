//! Random sequences of assign / process / complete / revoke / lost / commit, checked against a
//! deliberately naive model: a committed position never exceeds the end of the contiguous
//! completed prefix, and never goes backwards.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use proptest::prelude::*;
use rebalance_guard::guard::{
    AdmitError, BoxError, CommitFailure, CommitOffset, GuardConfig, Lease, RebalanceGuard,
};
use rebalance_guard::TopicPartition;

const PARTITIONS: i32 = 2;

#[derive(Debug, Clone)]
enum Op {
    Assign(i32),
    /// Fetch the next record (skipping `gap` offsets, as compaction does), with a key from a
    /// small pool so duplicates happen.
    Process {
        partition: i32,
        gap: i64,
        key: u8,
    },
    Take(i32),
    /// Complete the n-th (mod len) unfinished lease.
    Complete(usize),
    Revoke {
        partition: i32,
        flush_ok: bool,
        commit_ok: bool,
    },
    Lost(i32),
    Commit {
        commit_ok: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => (0..PARTITIONS).prop_map(Op::Assign),
        6 => (0..PARTITIONS, 0..3i64, 0..40u8)
            .prop_map(|(partition, gap, key)| Op::Process { partition, gap, key }),
        1 => (0..PARTITIONS).prop_map(Op::Take),
        4 => any::<usize>().prop_map(Op::Complete),
        1 => (0..PARTITIONS, any::<bool>(), any::<bool>())
            .prop_map(|(partition, flush_ok, commit_ok)| Op::Revoke { partition, flush_ok, commit_ok }),
        1 => (0..PARTITIONS).prop_map(Op::Lost),
        2 => any::<bool>().prop_map(|commit_ok| Op::Commit { commit_ok }),
    ]
}

/// What a broker and a careful human would track for one partition.
#[derive(Debug, Default)]
struct ModelPartition {
    owned: bool,
    /// Where the "broker" delivers from next.
    next_fetch: i64,
    admitted: BTreeSet<i64>,
    completed: BTreeSet<i64>,
    last_committed: Option<i64>,
}

impl ModelPartition {
    /// The highest position that is safe to commit: the first admitted offset not completed, or
    /// one past the last admitted offset when all of them completed.
    fn safe_bound(&self) -> Option<i64> {
        let first_unfinished = self.admitted.difference(&self.completed).next().copied();
        match first_unfinished {
            Some(offset) => Some(offset),
            None => self.admitted.last().map(|last| last + 1),
        }
    }
}

fn check_commits(
    model: &BTreeMap<i32, ModelPartition>,
    offsets: &[CommitOffset],
) -> Result<(), TestCaseError> {
    for commit in offsets {
        let p = &model[&commit.tp.partition];
        let bound = p.safe_bound();
        prop_assert!(
            bound.is_some_and(|b| commit.next_offset <= b),
            "commit {} of partition {} beyond the completed prefix {:?}",
            commit.next_offset,
            commit.tp.partition,
            bound
        );
        prop_assert!(
            p.last_committed
                .map_or(true, |last| commit.next_offset >= last),
            "commit {} goes back from {:?}",
            commit.next_offset,
            p.last_committed
        );
    }
    Ok(())
}

fn record_success(model: &mut BTreeMap<i32, ModelPartition>, offsets: &[CommitOffset]) {
    for commit in offsets {
        model.get_mut(&commit.tp.partition).unwrap().last_committed = Some(commit.next_offset);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn commits_stay_within_the_contiguous_completed_prefix(ops in prop::collection::vec(op(), 1..120)) {
        let guard: RebalanceGuard<u8, ()> = RebalanceGuard::new(GuardConfig {
            idempotency_capacity: 16,
            ..GuardConfig::default()
        }).unwrap();
        let mut model: BTreeMap<i32, ModelPartition> =
            (0..PARTITIONS).map(|p| (p, ModelPartition::default())).collect();
        let mut leases: Vec<Lease> = Vec::new();
        let tp = |p: i32| TopicPartition::new("t", p);

        for op in ops {
            match op {
                Op::Assign(p) => {
                    guard.assign(&[tp(p)]);
                    let m = model.get_mut(&p).unwrap();
                    if !m.owned {
                        // A new owner resumes from the committed position.
                        *m = ModelPartition {
                            owned: true,
                            next_fetch: m.last_committed.unwrap_or(0),
                            last_committed: m.last_committed,
                            ..ModelPartition::default()
                        };
                        leases.retain(|l| l.tp.partition != p);
                    }
                }
                Op::Process { partition, gap, key } => {
                    let m = model.get_mut(&partition).unwrap();
                    let offset = m.next_fetch + gap;
                    match guard.process_message(&tp(partition), offset, Some(key), ()) {
                        Ok(lease) => {
                            prop_assert!(m.owned, "admitted on a partition not owned");
                            m.admitted.insert(offset);
                            m.next_fetch = offset + 1;
                            leases.push(lease);
                        }
                        Err(AdmitError::Fenced { .. }) => prop_assert!(!m.owned),
                        Err(AdmitError::Duplicate { .. }) => {
                            // The event's work belongs to its first copy: this offset counts
                            // as finished, so a position may pass it.
                            prop_assert!(m.owned, "a duplicate on a partition not owned");
                            m.admitted.insert(offset);
                            m.completed.insert(offset);
                            m.next_fetch = offset + 1;
                        }
                        Err(AdmitError::OffsetRegression { .. }) => {
                            prop_assert!(false, "the model never re-feeds an old offset")
                        }
                        Err(AdmitError::SessionExpired { .. }) => {
                            prop_assert!(false, "no session bound is set in this model")
                        }
                        Err(error @ (AdmitError::AlreadyCompleted { .. }
                        | AdmitError::CompletedMapFull { .. })) => {
                            prop_assert!(false, "no map is resumed in this model: {error}")
                        }
                    }
                }
                Op::Take(p) => {
                    guard.take_buffered(&tp(p));
                }
                Op::Complete(n) => {
                    if !leases.is_empty() {
                        let lease = leases.remove(n % leases.len());
                        let m = model.get_mut(&lease.tp.partition).unwrap();
                        let accepted = guard.complete(&lease).is_ok();
                        prop_assert_eq!(accepted, m.owned && m.admitted.contains(&lease.offset));
                        if accepted {
                            m.completed.insert(lease.offset);
                        }
                    }
                }
                Op::Revoke { partition, flush_ok, commit_ok } => {
                    let m = model.get_mut(&partition).unwrap();
                    if flush_ok && m.owned {
                        // A successful flush finishes every pending message.
                        let admitted = m.admitted.clone();
                        m.completed.extend(admitted);
                    }
                    let seen: Mutex<Vec<CommitOffset>> = Mutex::default();
                    let mut check = Ok(());
                    let _ = guard.revoke(
                        &[tp(partition)],
                        &mut |_| -> Result<(), BoxError> {
                            if flush_ok { Ok(()) } else { Err("flush failed".into()) }
                        },
                        Some(&mut |offsets: &[CommitOffset]| {
                            check = check_commits(&model, offsets);
                            seen.lock().unwrap().extend_from_slice(offsets);
                            if commit_ok { Ok(()) } else { Err(CommitFailure::Request("down".into())) }
                        }),
                    );
                    check?;
                    let seen = seen.into_inner().unwrap();
                    prop_assert!(flush_ok || seen.is_empty(), "committed after a failed flush");
                    if commit_ok {
                        record_success(&mut model, &seen);
                    }
                    model.get_mut(&partition).unwrap().owned = false;
                    leases.retain(|l| l.tp.partition != partition);
                }
                Op::Lost(p) => {
                    guard.lost(&[tp(p)]);
                    model.get_mut(&p).unwrap().owned = false;
                    leases.retain(|l| l.tp.partition != p);
                }
                Op::Commit { commit_ok } => {
                    let mut check = Ok(());
                    let result = guard.commit_progress(&mut |offsets| {
                        check = check_commits(&model, offsets);
                        if commit_ok { Ok(()) } else { Err(CommitFailure::Request("down".into())) }
                    });
                    check?;
                    if let Ok(committed) = result {
                        for c in &committed {
                            prop_assert!(model[&c.tp.partition].owned, "committed a partition not owned");
                        }
                        record_success(&mut model, &committed);
                    }
                }
            }
        }
    }
}
