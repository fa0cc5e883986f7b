//! Random sequences of assign / process / complete / release / read again / revoke / lost /
//! commit, checked against a deliberately naive model: a committed position never exceeds the end
//! of the contiguous completed prefix, and never goes backwards; a released record is admitted
//! again when it is read again, and nothing else that was admitted is.

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
    /// Release the n-th (mod len) unfinished lease (a failed handler, a record not started).
    Release(usize),
    /// The consumer reads again from where the guard asks (after releases).
    ReadAgain,
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
        1 => any::<usize>().prop_map(Op::Release),
        1 => Just(Op::ReadAgain),
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
    /// Admitted, then released without their effect: to be admitted again.
    released: BTreeSet<i64>,
    /// What the log holds at the offsets read in this assignment (offset to key), so that
    /// reading again delivers the same records.
    log: BTreeMap<i64, u8>,
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
                .is_none_or(|last| commit.next_offset >= last),
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
                    // Read again, the log holds what it held: the same offsets, the same keys.
                    let (offset, key, read_again) = match m.log.range(m.next_fetch..).next() {
                        Some((&offset, &key)) => (offset, key, true),
                        None => (m.next_fetch + gap, key, false),
                    };
                    if m.owned {
                        m.log.insert(offset, key);
                    }
                    match guard.process_message(&tp(partition), offset, Some(key), ()) {
                        Ok(lease) => {
                            prop_assert!(m.owned, "admitted on a partition not owned");
                            prop_assert!(
                                !read_again || m.released.remove(&offset),
                                "offset {} admitted twice without a release", offset
                            );
                            m.admitted.insert(offset);
                            m.next_fetch = offset + 1;
                            leases.push(lease);
                        }
                        Err(AdmitError::Fenced { .. }) => prop_assert!(!m.owned),
                        Err(AdmitError::Duplicate { .. }) => {
                            // The event's work belongs to its first copy: this offset counts
                            // as finished, so a position may pass it.
                            prop_assert!(m.owned, "a duplicate on a partition not owned");
                            let released = m.released.remove(&offset);
                            prop_assert!(
                                released || !read_again || m.completed.contains(&offset),
                                "offset {} read again and refused as a duplicate", offset
                            );
                            m.admitted.insert(offset);
                            m.completed.insert(offset);
                            m.next_fetch = offset + 1;
                        }
                        Err(AdmitError::AlreadyAdmitted { .. }) => {
                            prop_assert!(
                                m.admitted.contains(&offset) && !m.released.contains(&offset),
                                "offset {} refused as already admitted", offset
                            );
                            m.next_fetch = offset + 1;
                        }
                        Err(AdmitError::OffsetRegression { .. }) => {
                            // Read again past an offset that was never delivered (a gap) or
                            // that already left the guard's tracking (finished and retired).
                            prop_assert!(read_again, "the model re-feeds only after a release");
                            prop_assert!(!m.released.contains(&offset));
                            m.next_fetch = offset + 1;
                        }
                        Err(AdmitError::SessionExpired { .. }) => {
                            prop_assert!(false, "no session bound is set in this model")
                        }
                        Err(error @ AdmitError::SeekedWhileRunning { .. }) => {
                            prop_assert!(false, "the model never seeks: {error}")
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
                Op::Release(n) => {
                    if !leases.is_empty() {
                        let lease = leases.remove(n % leases.len());
                        let m = model.get_mut(&lease.tp.partition).unwrap();
                        prop_assert!(m.owned, "a lease kept for a partition not owned");
                        prop_assert!(guard.release(&lease).is_ok(), "an unfinished lease releases");
                        m.released.insert(lease.offset);
                    }
                }
                Op::ReadAgain => {
                    for (partition, from) in guard.take_redeliveries() {
                        let m = model.get_mut(&partition.partition).unwrap();
                        prop_assert!(m.owned, "read again on a partition not owned");
                        prop_assert!(
                            m.released.first().is_some_and(|&lowest| from <= lowest),
                            "read again from {} above a released record {:?}", from, m.released
                        );
                        m.next_fetch = from;
                    }
                }
                Op::Revoke { partition, flush_ok, commit_ok } => {
                    let m = model.get_mut(&partition).unwrap();
                    if flush_ok && m.owned {
                        // A successful flush finishes every pending message but the released
                        // ones, whose work nothing did.
                        let admitted: Vec<i64> =
                            m.admitted.difference(&m.released).copied().collect();
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
