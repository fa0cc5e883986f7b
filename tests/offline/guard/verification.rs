//! The guard's rules, each checked in memory: last + 1, revoke and lost, failures that block only
//! their partition, storms, the fence under concurrency, contiguous-prefix commits, leases and
//! epochs, the bounded key set (docs/DESIGN.md maps each invariant to its test).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::Duration;

use rebalance_guard::guard::{
    AdmitError, BoxError, CommitFailure, CommitOffset, CompleteError, FlushBatch, GuardConfig,
    HandoffStage, Lease, ManualClock, OwnerStatus, RebalanceGuard, RewindError,
};
use rebalance_guard::TopicPartition;

type Guard = RebalanceGuard<String, ()>;

fn tp(partition: i32) -> TopicPartition {
    TopicPartition::new("orders", partition)
}

fn guard() -> Guard {
    RebalanceGuard::new(GuardConfig::default()).expect("default config is valid")
}

fn admit(guard: &Guard, partition: i32, offset: i64) -> rebalance_guard::guard::Lease {
    guard
        .process_message(
            &tp(partition),
            offset,
            Some(format!("order-{partition}-{offset}")),
            (),
        )
        .expect("admitted")
}

/// Records every flush and commit a revocation makes.
#[derive(Default)]
struct Calls {
    flushed: Vec<(TopicPartition, Vec<i64>, Vec<i64>)>,
    committed: Vec<Vec<CommitOffset>>,
}

fn flush_ok(calls: &Mutex<Calls>) -> impl FnMut(FlushBatch<()>) -> Result<(), BoxError> + '_ {
    move |batch| {
        calls.lock().unwrap().flushed.push((
            batch.tp,
            batch.buffered.iter().map(|(o, _)| *o).collect(),
            batch.running,
        ));
        Ok(())
    }
}

fn commit_ok(
    calls: &Mutex<Calls>,
) -> impl FnMut(&[CommitOffset]) -> Result<(), CommitFailure> + '_ {
    move |offsets| {
        calls.lock().unwrap().committed.push(offsets.to_vec());
        Ok(())
    }
}

fn offsets(commits: &[CommitOffset]) -> BTreeMap<i32, i64> {
    commits
        .iter()
        .map(|c| (c.tp.partition, c.next_offset))
        .collect()
}

// Process offset 100, revoke: the commit function receives {partition: 101}.
#[test]
fn revocation_commits_last_processed_plus_one() {
    let guard = guard();
    guard.assign(&[tp(0)]);
    admit(&guard, 0, 100);
    let calls = Mutex::new(Calls::default());
    let report = guard
        .revoke(
            &[tp(0)],
            &mut flush_ok(&calls),
            Some(&mut commit_ok(&calls)),
        )
        .expect("handoff succeeds");
    let calls = calls.into_inner().unwrap();
    assert_eq!(calls.flushed, vec![(tp(0), vec![100], vec![])]);
    assert_eq!(calls.committed.len(), 1);
    assert_eq!(offsets(&calls.committed[0]), BTreeMap::from([(0, 101)]));
    assert_eq!(offsets(&report.committed), BTreeMap::from([(0, 101)]));
}

// The same rule on the poll loop's path: processed and completed 100 -> commit 101.
#[test]
fn batch_commit_is_last_processed_plus_one() {
    let guard = guard();
    guard.assign(&[tp(0)]);
    let lease = admit(&guard, 0, 100);
    guard.complete(&lease).unwrap();
    let calls = Mutex::new(Calls::default());
    let committed = guard.commit_progress(&mut commit_ok(&calls)).unwrap();
    assert_eq!(offsets(&committed), BTreeMap::from([(0, 101)]));
    // Nothing new: no second commit.
    assert!(guard
        .commit_progress(&mut commit_ok(&calls))
        .unwrap()
        .is_empty());
    assert_eq!(calls.into_inner().unwrap().committed.len(), 1);
}

// A loss performs no commit and no flush, yet still fences the partition
// and discards its buffer.
#[test]
fn lost_fences_and_discards_without_flush_or_commit() {
    let guard = guard();
    guard.assign(&[tp(0), tp(1)]);
    admit(&guard, 0, 100);
    admit(&guard, 0, 101);
    let report = guard.lost(&[tp(0)]);
    assert_eq!(report.fenced, vec![tp(0)]);
    assert_eq!(report.discarded, 2);
    // Fenced: new work is refused with the loss as the reason.
    assert!(matches!(
        guard.process_message(&tp(0), 102, None, ()),
        Err(AdmitError::Fenced {
            status: Some(OwnerStatus::Lost),
            ..
        })
    ));
    // Discarded: nothing buffered, nothing in flight, nothing to commit, nothing left to flush.
    assert!(guard.take_buffered(&tp(0)).is_empty());
    let snapshot = guard.snapshot();
    let p0 = &snapshot.partitions[0];
    assert_eq!((p0.in_flight, p0.highest_admitted), (0, None));
    let commits = AtomicUsize::new(0);
    guard
        .commit_progress(&mut |_| {
            commits.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
        .unwrap();
    assert_eq!(
        commits.load(Ordering::SeqCst),
        0,
        "a lost partition is never committed"
    );
    // A later revocation of the lost partition neither flushes nor commits it either.
    let calls = Mutex::new(Calls::default());
    guard
        .revoke(
            &[tp(0)],
            &mut flush_ok(&calls),
            Some(&mut commit_ok(&calls)),
        )
        .unwrap();
    let calls = calls.into_inner().unwrap();
    assert!(calls.flushed.is_empty() && calls.committed.is_empty());
    // The untouched partition still works.
    admit(&guard, 1, 5);
}

// A failing flush prevents that partition's commit while unaffected partitions
// still commit, and the HandoffError names only the failed ones.
#[test]
fn failing_flush_blocks_only_its_partition() {
    let guard = guard();
    guard.assign(&[tp(0), tp(1), tp(2)]);
    for p in 0..3 {
        admit(&guard, p, 10);
    }
    let calls = Mutex::new(Calls::default());
    let mut flush = |batch: FlushBatch<()>| -> Result<(), BoxError> {
        if batch.tp == tp(1) {
            Err("executor rejected the batch".into())
        } else {
            Ok(())
        }
    };
    let error = guard
        .revoke(
            &[tp(0), tp(1), tp(2)],
            &mut flush,
            Some(&mut commit_ok(&calls)),
        )
        .expect_err("partition 1 failed");
    assert_eq!(error.partitions(), vec![tp(1)]);
    assert_eq!(error.failures[0].stage, HandoffStage::Flush);
    assert!(error.to_string().contains("orders-1"));
    assert!(!error.to_string().contains("orders-0"));
    let calls = calls.into_inner().unwrap();
    assert_eq!(calls.committed.len(), 1);
    assert_eq!(
        offsets(&calls.committed[0]),
        BTreeMap::from([(0, 11), (2, 11)])
    );
    // All three are fenced and pruned, the failed one included.
    for p in 0..3 {
        assert!(matches!(
            guard.process_message(&tp(p), 11, None, ()),
            Err(AdmitError::Fenced {
                status: Some(OwnerStatus::Revoked),
                ..
            })
        ));
    }
}

// Every partition is fenced even when the commit fails.
#[test]
fn every_partition_is_fenced_when_the_commit_fails() {
    let guard = guard();
    guard.assign(&[tp(0), tp(1)]);
    admit(&guard, 0, 1);
    admit(&guard, 1, 1);
    let mut commit = |_: &[CommitOffset]| -> Result<(), CommitFailure> {
        Err(CommitFailure::Request("coordinator unavailable".into()))
    };
    let error = guard
        .revoke(&[tp(0), tp(1)], &mut |_| Ok(()), Some(&mut commit))
        .expect_err("commit failed");
    assert_eq!(error.partitions(), vec![tp(0), tp(1)]);
    assert!(error
        .failures
        .iter()
        .all(|f| f.stage == HandoffStage::Commit));
    for p in 0..2 {
        assert!(matches!(
            guard.process_message(&tp(p), 2, None, ()),
            Err(AdmitError::Fenced { .. })
        ));
    }
    let snapshot = guard.snapshot();
    assert!(snapshot
        .partitions
        .iter()
        .all(|p| p.status == OwnerStatus::Revoked && p.last_committed.is_none()));
}

#[test]
fn a_commit_refusing_some_partitions_names_only_those() {
    let guard = guard();
    guard.assign(&[tp(0), tp(1)]);
    admit(&guard, 0, 1);
    admit(&guard, 1, 1);
    let mut commit = |_: &[CommitOffset]| -> Result<(), CommitFailure> {
        Err(CommitFailure::Partitions(vec![(
            tp(1),
            "ILLEGAL_GENERATION".into(),
        )]))
    };
    let error = guard
        .revoke(&[tp(0), tp(1)], &mut |_| Ok(()), Some(&mut commit))
        .expect_err("partition 1 refused");
    assert_eq!(error.partitions(), vec![tp(1)]);
    let snapshot = guard.snapshot();
    assert_eq!(snapshot.partitions[0].last_committed, Some(2));
    assert_eq!(snapshot.partitions[1].last_committed, None);
}

// A revocation commits progress even when the in-flight buffer is already empty.
#[test]
fn revocation_commits_progress_with_an_empty_buffer() {
    let guard = guard();
    guard.assign(&[tp(0)]);
    let lease = admit(&guard, 0, 100);
    guard.complete(&lease).unwrap();
    let calls = Mutex::new(Calls::default());
    guard
        .revoke(
            &[tp(0)],
            &mut flush_ok(&calls),
            Some(&mut commit_ok(&calls)),
        )
        .unwrap();
    let calls = calls.into_inner().unwrap();
    assert_eq!(
        calls.flushed,
        vec![(tp(0), vec![], vec![])],
        "nothing left to flush"
    );
    assert_eq!(offsets(&calls.committed[0]), BTreeMap::from([(0, 101)]));
}

#[test]
fn revocation_skips_a_commit_that_would_repeat_the_last_one() {
    let guard = guard();
    guard.assign(&[tp(0)]);
    let lease = admit(&guard, 0, 100);
    guard.complete(&lease).unwrap();
    guard.commit_progress(&mut |_| Ok(())).unwrap();
    let calls = Mutex::new(Calls::default());
    let report = guard
        .revoke(
            &[tp(0)],
            &mut flush_ok(&calls),
            Some(&mut commit_ok(&calls)),
        )
        .unwrap();
    assert!(calls.into_inner().unwrap().committed.is_empty());
    assert_eq!(report.unchanged, vec![tp(0)]);
}

#[test]
fn revocation_without_a_commit_function_fences_and_drains_but_commits_nothing() {
    let guard = guard();
    guard.assign(&[tp(0)]);
    admit(&guard, 0, 7);
    let calls = Mutex::new(Calls::default());
    let report = guard.revoke(&[tp(0)], &mut flush_ok(&calls), None).unwrap();
    assert!(report.committed.is_empty());
    assert_eq!(
        calls.into_inner().unwrap().flushed.len(),
        1,
        "still drained"
    );
    assert!(guard.process_message(&tp(0), 8, None, ()).is_err());
}

// A revoke-then-assign pair counts as one rebalance, not two.
#[test]
fn revoke_then_assign_counts_as_one_rebalance() {
    let clock = Arc::new(ManualClock::new());
    let config = GuardConfig {
        storm_window: Duration::from_secs(60),
        storm_threshold: 3,
        ..GuardConfig::default()
    };
    let guard: Guard = RebalanceGuard::with_clock(config, clock.clone()).unwrap();
    guard.assign(&[tp(0), tp(1)]); // joining the group: one rebalance
    for round in 0..2 {
        // Eager: everything revoked, then everything assigned, in one rebalance.
        guard
            .revoke(&[tp(0), tp(1)], &mut |_| Ok(()), None)
            .unwrap();
        let status = guard.assign(&[tp(0), tp(1)]).expect("status");
        assert_eq!(status.rebalances_in_window, round + 2);
        clock.advance(Duration::from_secs(10));
    }
    let status = guard.storm_status();
    assert_eq!(status.rebalances_in_window, 3);
    assert!(status.is_storm());
    assert_eq!(guard.snapshot().rebalances, 3);
    // The window slides on the monotonic clock, not on the wall clock.
    clock.advance(Duration::from_secs(41));
    assert!(!guard.storm_status().is_storm());
}

// The fence holds against concurrent producer threads and nothing is appended to a
// buffer after revocation discarded it.
#[test]
fn fence_holds_against_concurrent_producers() {
    for revoke_cleanly in [true, false] {
        let guard: Arc<Guard> = Arc::new(guard());
        let partitions: Vec<_> = (0..4).map(tp).collect();
        guard.assign(&partitions);
        let fenced = Arc::new(AtomicBool::new(false));
        let admitted_total = Arc::new(AtomicUsize::new(0));
        let warmed_up = Arc::new(Barrier::new(5));
        let mut producers = Vec::new();
        for p in 0..4 {
            let (guard, fenced, admitted_total, warmed_up) = (
                guard.clone(),
                fenced.clone(),
                admitted_total.clone(),
                warmed_up.clone(),
            );
            producers.push(thread::spawn(move || {
                let mut admitted = BTreeSet::new();
                let mut after_fence = 0;
                for offset in 0..200_000i64 {
                    if offset == 100 {
                        warmed_up.wait();
                    }
                    let fence_seen_before = fenced.load(Ordering::SeqCst);
                    match guard.process_message(&tp(p), offset, Some(format!("{p}-{offset}")), ()) {
                        Ok(_) => {
                            assert!(!fence_seen_before, "admitted after the fence was raised");
                            admitted.insert(offset);
                            admitted_total.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(AdmitError::Fenced { .. }) => {
                            after_fence += 1;
                            if after_fence > 1000 {
                                break;
                            }
                        }
                        Err(other) => panic!("unexpected refusal: {other}"),
                    }
                }
                admitted
            }));
        }
        warmed_up.wait();
        let flushed: Mutex<BTreeMap<i32, BTreeSet<i64>>> = Mutex::default();
        let discarded = if revoke_cleanly {
            guard
                .revoke(
                    &partitions,
                    &mut |batch| {
                        // The fence is up before any flush runs.
                        fenced.store(true, Ordering::SeqCst);
                        flushed.lock().unwrap().insert(
                            batch.tp.partition,
                            batch.buffered.iter().map(|(o, _)| *o).collect(),
                        );
                        Ok(())
                    },
                    Some(&mut |_| Ok(())),
                )
                .unwrap();
            0
        } else {
            let report = guard.lost(&partitions);
            fenced.store(true, Ordering::SeqCst);
            report.discarded
        };
        let admitted: Vec<BTreeSet<i64>> =
            producers.into_iter().map(|h| h.join().unwrap()).collect();
        if revoke_cleanly {
            // Every admitted message reached the flush; none was admitted after it.
            let flushed = flushed.into_inner().unwrap();
            for (p, offsets) in admitted.iter().enumerate() {
                assert_eq!(&flushed[&(p as i32)], offsets);
            }
        } else {
            assert_eq!(discarded, admitted_total.load(Ordering::SeqCst));
        }
        let snapshot = guard.snapshot();
        assert!(snapshot.partitions.iter().all(|p| p.in_flight == 0));
        assert!(snapshot.partitions.iter().all(|p| p.fenced_rejected > 0));
    }
}

// 100 complete, 101 running, 102 complete: the safe next offset to commit is 101.
#[test]
fn concurrent_work_commits_only_the_contiguous_completed_prefix() {
    let guard = guard();
    guard.assign(&[tp(4)]);
    let leases: Vec<_> = (100..=102).map(|o| admit(&guard, 4, o)).collect();
    let taken = guard.take_buffered(&tp(4));
    assert_eq!(taken.len(), 3);
    guard.complete(&leases[0]).unwrap();
    guard.complete(&leases[2]).unwrap();
    let committed = guard.commit_progress(&mut |_| Ok(())).unwrap();
    assert_eq!(offsets(&committed), BTreeMap::from([(4, 101)]));
    guard.complete(&leases[1]).unwrap();
    let committed = guard.commit_progress(&mut |_| Ok(())).unwrap();
    assert_eq!(offsets(&committed), BTreeMap::from([(4, 103)]));
}

#[test]
fn revocation_tells_the_flush_what_is_still_running() {
    let guard = guard();
    guard.assign(&[tp(0)]);
    let leases: Vec<_> = (0..3).map(|o| admit(&guard, 0, o)).collect();
    guard.take_buffered(&tp(0)); // 0..3 handed to workers
    admit(&guard, 0, 3); // buffered
    guard.complete(&leases[1]).unwrap();
    let calls = Mutex::new(Calls::default());
    guard
        .revoke(
            &[tp(0)],
            &mut flush_ok(&calls),
            Some(&mut commit_ok(&calls)),
        )
        .unwrap();
    let calls = calls.into_inner().unwrap();
    assert_eq!(calls.flushed, vec![(tp(0), vec![3], vec![0, 2])]);
    assert_eq!(offsets(&calls.committed[0]), BTreeMap::from([(0, 4)]));
}

#[test]
fn work_finishing_after_its_partition_moved_is_stale() {
    let guard = guard();
    guard.assign(&[tp(0)]);
    let old = admit(&guard, 0, 100);
    assert!(guard.is_current(&old));
    guard.lost(&[tp(0)]);
    assert!(!guard.is_current(&old), "lost: the lease is stale at once");
    guard.assign(&[tp(0)]); // reassigned to us in a later generation
    let new = admit(&guard, 0, 100);
    assert!(new.epoch > old.epoch);
    assert!(
        !guard.is_current(&old),
        "a new assignment does not revive an old lease"
    );
    assert!(matches!(
        guard.complete(&old),
        Err(CompleteError::StaleLease { .. })
    ));
    guard.complete(&new).unwrap();
    let snapshot = guard.snapshot();
    assert_eq!(snapshot.partitions[0].completed_after_revocation, 1);
    assert_eq!(snapshot.partitions[0].contiguous_completed, Some(100));
}

#[test]
fn completions_during_the_drain_still_count() {
    let guard: Arc<Guard> = Arc::new(guard());
    guard.assign(&[tp(0)]);
    let lease = admit(&guard, 0, 9);
    guard.take_buffered(&tp(0));
    let inner = guard.clone();
    let mut flush = |batch: FlushBatch<()>| -> Result<(), BoxError> {
        assert_eq!(batch.running, vec![9]);
        // A worker finishes while the revocation waits for it.
        assert!(inner.is_current(&lease), "draining work may still finish");
        inner.complete(&lease).map_err(|e| e.into())
    };
    guard
        .revoke(&[tp(0)], &mut flush, Some(&mut |_| Ok(())))
        .unwrap();
    assert!(
        !guard.is_current(&lease),
        "after the handoff the lease is stale"
    );
}

#[test]
fn checks_run_fence_then_duplicate_then_monotonicity() {
    let guard = guard();
    guard.assign(&[tp(0)]);
    guard
        .process_message(&tp(0), 100, Some("A".into()), ())
        .unwrap();
    // Both a duplicate and a regression: the duplicate is reported.
    assert!(matches!(
        guard.process_message(&tp(0), 50, Some("A".into()), ()),
        Err(AdmitError::Duplicate { offset: 50, .. })
    ));
    assert!(matches!(
        guard.process_message(&tp(0), 99, Some("B".into()), ()),
        Err(AdmitError::OffsetRegression {
            offset: 99,
            high_water: 100,
            ..
        })
    ));
    // The admitted offset itself, read again, is not a regression but already in hand.
    assert!(matches!(
        guard.process_message(&tp(0), 100, Some("B".into()), ()),
        Err(AdmitError::AlreadyAdmitted { offset: 100, .. })
    ));
    guard.revoke(&[tp(0)], &mut |_| Ok(()), None).unwrap();
    // Fenced, duplicate and regression at once: the fence is reported.
    assert!(matches!(
        guard.process_message(&tp(0), 50, Some("A".into()), ()),
        Err(AdmitError::Fenced { .. })
    ));
    let snapshot = guard.snapshot();
    let p = &snapshot.partitions[0];
    assert_eq!(
        (
            p.duplicates_rejected,
            p.regressions_rejected,
            p.fenced_rejected
        ),
        (1, 1, 1)
    );
}

#[test]
fn idempotency_keys_are_bounded() {
    let config = GuardConfig {
        idempotency_capacity: 3,
        ..GuardConfig::default()
    };
    let guard: Guard = RebalanceGuard::new(config).unwrap();
    guard.assign(&[tp(0)]);
    for offset in 0..10 {
        guard
            .process_message(&tp(0), offset, Some(format!("k{offset}")), ())
            .unwrap();
        assert!(guard.snapshot().remembered_keys <= 3);
    }
    assert!(matches!(
        guard.process_message(&tp(0), 10, Some("k9".into()), ()),
        Err(AdmitError::Duplicate { .. })
    ));
    // k0 was evicted long ago: it is treated as new.
    guard
        .process_message(&tp(0), 11, Some("k0".into()), ())
        .unwrap();
}

#[test]
fn discarded_work_is_not_mistaken_for_a_duplicate_when_it_comes_back() {
    let guard = guard();
    guard.assign(&[tp(0)]);
    guard
        .process_message(&tp(0), 5, Some("order-5".into()), ())
        .unwrap();
    guard.lost(&[tp(0)]);
    guard.assign(&[tp(0)]);
    guard
        .process_message(&tp(0), 5, Some("order-5".into()), ())
        .expect("the lost copy never ran, so the redelivery must run");
    // A finished message stays remembered across a clean revocation.
    guard.revoke(&[tp(0)], &mut |_| Ok(()), None).unwrap();
    guard.assign(&[tp(0)]);
    assert!(matches!(
        guard.process_message(&tp(0), 5, Some("order-5".into()), ()),
        Err(AdmitError::Duplicate { .. })
    ));
}

#[test]
fn cooperative_assign_activates_without_replacing() {
    let guard = guard();
    guard.assign(&[tp(0), tp(1)]);
    admit(&guard, 0, 100);
    guard.assign(&[tp(2)]);
    guard.assign(&[tp(0)]); // repeated: must not reset progress
    assert_eq!(guard.owned(), vec![tp(0), tp(1), tp(2)]);
    assert!(matches!(
        guard.process_message(&tp(0), 100, None, ()),
        Err(AdmitError::AlreadyAdmitted { offset: 100, .. })
    ));
}

#[test]
fn rewind_lets_unfinished_work_be_admitted_again_but_never_finished_work() {
    let guard = guard();
    guard.assign(&[tp(0)]);
    let first = admit(&guard, 0, 0);
    let second = admit(&guard, 0, 1);
    admit(&guard, 0, 2);
    guard.complete(&first).unwrap();
    guard.rewind(&second).unwrap();
    admit(&guard, 0, 1); // same key and offset: neither a duplicate nor a regression
    assert!(matches!(
        guard.rewind(&first),
        Err(RewindError::PastFinishedWork {
            finished_offset: 0,
            ..
        })
    ));
    let elsewhere = Lease {
        tp: tp(9),
        ..first.clone()
    };
    assert!(matches!(
        guard.rewind(&elsewhere),
        Err(RewindError::NotOwned { .. })
    ));
    // A lease of an earlier assignment cannot take back the current one's work.
    guard.lost(&[tp(0)]);
    guard.assign(&[tp(0)]);
    let current = admit(&guard, 0, 1);
    assert!(matches!(
        guard.rewind(&second),
        Err(RewindError::NotOwned { .. })
    ));
    guard.complete(&current).unwrap();
}

/// Committed positions a commit of the guard's progress would send now, by partition.
fn committable(guard: &Guard) -> BTreeMap<i32, i64> {
    let mut sent = BTreeMap::new();
    guard
        .commit_progress(&mut |batch: &[CommitOffset]| {
            sent = offsets(batch);
            Ok(())
        })
        .expect("commit succeeds");
    sent
}

// Hand out 10, 11, 12; 12 completes first, then 10 fails. The failed record is released: it
// must come again, nothing at or after 10 may be committed, and the work that did happen (12) or
// is still under way (11) is not taken back.
#[test]
fn a_failed_record_comes_again_and_blocks_the_position_while_later_work_still_counts() {
    let guard = guard();
    guard.assign(&[tp(0)]);
    let leases: Vec<_> = (10..=12).map(|o| admit(&guard, 0, o)).collect();
    guard.complete(&leases[2]).unwrap();
    guard
        .release(&leases[0])
        .expect("a failed record is released even before later completed work");
    assert_eq!(
        committable(&guard),
        BTreeMap::new(),
        "nothing at or after 10 finished in order"
    );
    guard
        .complete(&leases[1])
        .expect("11 was running on another thread: its effect happened and counts");
    assert_eq!(guard.take_redeliveries(), vec![(tp(0), 10)]);
    // Read again from 10: 10 is admitted again; 11 and 12, whose effects happened, are known.
    let again = admit(&guard, 0, 10);
    for offset in [11, 12] {
        assert!(matches!(
            guard.process_message(&tp(0), offset, Some(format!("order-0-{offset}")), ()),
            Err(AdmitError::AlreadyAdmitted { .. })
        ));
    }
    guard.complete(&again).unwrap();
    assert_eq!(
        committable(&guard),
        BTreeMap::from([(0, 13)]),
        "past 12: its effect happened, so the next owner must not redo it"
    );
}

// A record taken back with `rewind` (the consumer could not hand it on) takes everything after
// it back too: a later completion counts for nothing and the commit stays below it.
#[test]
fn a_completion_after_the_rewind_of_an_earlier_record_is_not_progress() {
    let guard = guard();
    guard.assign(&[tp(0)]);
    let leases: Vec<_> = (10..=12).map(|o| admit(&guard, 0, o)).collect();
    guard.rewind(&leases[0]).unwrap();
    assert!(matches!(
        guard.complete(&leases[2]),
        Err(CompleteError::NotPending { offset: 12, .. })
    ));
    assert_eq!(committable(&guard), BTreeMap::new());
    let again = admit(&guard, 0, 10);
    guard.complete(&again).unwrap();
    assert_eq!(committable(&guard), BTreeMap::from([(0, 11)]));
}

#[test]
fn snapshot_reports_in_flight_age_on_the_guard_clock() {
    let clock = Arc::new(ManualClock::new());
    let guard: Guard = RebalanceGuard::with_clock(GuardConfig::default(), clock.clone()).unwrap();
    guard.assign(&[tp(0)]);
    let lease = admit(&guard, 0, 1);
    clock.advance(Duration::from_millis(250));
    admit(&guard, 0, 2);
    let snapshot = guard.snapshot();
    let p = &snapshot.partitions[0];
    assert_eq!(p.in_flight, 2);
    assert_eq!(p.oldest_in_flight_age, Some(Duration::from_millis(250)));
    assert_eq!(
        (p.status, p.epoch, p.highest_admitted),
        (OwnerStatus::Owned, 1, Some(2))
    );
    guard.complete(&lease).unwrap();
    let p = guard.snapshot().partitions[0].clone();
    assert_eq!(p.oldest_in_flight_age, Some(Duration::ZERO));
}

#[test]
fn invalid_config_names_the_setting() {
    let config = GuardConfig {
        storm_window: Duration::ZERO,
        ..GuardConfig::default()
    };
    let error = RebalanceGuard::<String>::new(config).unwrap_err();
    assert_eq!(error.setting, "storm_window");
    assert!(error.to_string().contains("storm_window"));
}

// Decoupled work: queued work that has not started when a revocation fences the
// partition is cancelled, running work drains, and the revocation commits exactly the processed
// prefix; cancelled messages are the next owner's, so their keys are forgotten.
#[test]
fn revocation_cancels_unstarted_work_and_commits_the_processed_prefix() {
    let guard: Arc<Guard> = Arc::new(guard());
    guard.assign(&[tp(0)]);
    let leases: Vec<_> = (0..5).map(|o| admit(&guard, 0, o)).collect();
    for lease in &leases[..2] {
        assert!(guard.start(lease));
        guard.complete(lease).unwrap();
    }
    assert!(
        guard.start(&leases[2]),
        "offset 2 is running when the rebalance comes"
    );
    assert!(!guard.start(&leases[2]), "a message starts once");
    assert_eq!(guard.unfinished(&tp(0)), 3);
    let inner = guard.clone();
    let running = leases[2].clone();
    let queued = leases[3].clone();
    let mut flush = |batch: FlushBatch<()>| -> Result<(), BoxError> {
        assert!(!inner.start(&queued), "fenced: queued work must not start");
        assert_eq!(inner.cancel_unstarted(&batch.tp), 2);
        // The running one finishes within the drain.
        inner.complete(&running).map_err(|e| e.into())
    };
    let calls = Mutex::new(Calls::default());
    guard
        .revoke(&[tp(0)], &mut flush, Some(&mut commit_ok(&calls)))
        .unwrap();
    let calls = calls.into_inner().unwrap();
    assert_eq!(offsets(&calls.committed[0]), BTreeMap::from([(0, 3)]));
    // Whoever owns the partition next processes 3 and 4, and so may we.
    guard.assign(&[tp(0)]);
    admit(&guard, 0, 3);
    assert!(!guard.start(&leases[4]), "an old lease never starts");
}

// A lease is also stale once the coordinator could have expired the member's session: at the
// send time of the last answered heartbeat plus the session timeout, on the clock of whoever
// asks, whether or not anything else noticed.
#[test]
fn a_lease_expires_when_the_session_could_have_expired() {
    let clock = Arc::new(ManualClock::new());
    let guard: Guard = RebalanceGuard::with_clock(GuardConfig::default(), clock.clone()).unwrap();
    guard.assign(&[tp(0)]);
    let lease = admit(&guard, 0, 1);
    assert!(
        guard.is_current(&lease),
        "no bound yet: only ownership counts"
    );
    let bound = guard.session_bound();
    bound.renew(guard.now(), Duration::from_secs(6));
    clock.advance(Duration::from_millis(5999));
    assert!(guard.is_current(&lease));
    assert!(guard.start(&lease));
    clock.advance(Duration::from_millis(1));
    assert!(!guard.is_current(&lease), "the session may have expired");
    assert!(matches!(
        guard.process_message(&tp(0), 2, None, ()),
        Err(AdmitError::SessionExpired { offset: 2, .. })
    ));
    // An answered heartbeat renews it; the partition was never fenced, so the lease is good again.
    bound.renew(guard.now(), Duration::from_secs(6));
    assert!(guard.is_current(&lease));
    admit(&guard, 0, 2);
}

// A revocation decided on another thread (a cooperative SyncGroup answered on the membership
// thread) fences at once: nothing more is admitted, while a record already running completes
// and counts; a kept partition is untouched; the revocation that follows commits last + 1 of
// the fenced partition like any revocation.
#[test]
fn a_partition_fenced_ahead_admits_nothing_but_finishes_its_running_work_and_is_committed_by_its_revocation(
) {
    let guard = guard();
    guard.assign(&[tp(0), tp(1)]);
    let done = admit(&guard, 0, 10);
    guard.complete(&done).unwrap();
    let running = admit(&guard, 0, 11);
    let first = guard.fence(&[tp(0)]);
    assert_eq!(first.partitions(), vec![tp(0)]);
    assert!(matches!(
        guard.process_message(&tp(0), 12, None, ()),
        Err(AdmitError::Fenced {
            status: Some(OwnerStatus::Draining),
            ..
        })
    ));
    // The kept partition flows on.
    let kept = admit(&guard, 1, 5);
    guard.complete(&kept).unwrap();
    // The record handed out before the fence finishes and counts.
    assert!(guard.is_current(&running));
    guard.complete(&running).unwrap();
    // Fencing twice changes nothing: the same partition, at the same epoch, one handoff.
    assert_eq!(guard.fence(&[tp(0)]), first);
    let calls = Mutex::new(Calls::default());
    let report = guard
        .revoke(
            &[tp(0)],
            &mut flush_ok(&calls),
            Some(&mut commit_ok(&calls)),
        )
        .expect("handoff succeeds");
    assert_eq!(offsets(&report.committed), BTreeMap::from([(0, 12)]));
    assert!(!guard.is_current(&running));
    assert_eq!(guard.owned(), vec![tp(1)]);
}

// A partition whose last record repeats an earlier event: the repeat is refused, and the
// position still passes it, or the next owner would start at the repeat and apply the event a
// second time. The same holds when the first copy sits on another partition.
#[test]
fn a_refused_duplicate_at_the_end_of_a_partition_is_committed_past() {
    let guard = guard();
    guard.assign(&[tp(0), tp(1)]);
    let first = guard
        .process_message(&tp(0), 0, Some("order-7".to_string()), ())
        .unwrap();
    guard.complete(&first).unwrap();
    for (partition, offset) in [(0, 1), (1, 0)] {
        assert!(matches!(
            guard.process_message(&tp(partition), offset, Some("order-7".to_string()), ()),
            Err(AdmitError::Duplicate { .. })
        ));
    }
    assert_eq!(committable(&guard), BTreeMap::from([(0, 2), (1, 1)]));
    let snapshot = guard.snapshot();
    assert!(snapshot
        .partitions
        .iter()
        .all(|p| p.duplicates_rejected == 1));
}

// A commit whose request travels without the caller waiting (the paced commit): nothing counts
// as committed before its answer, so a second request carries the same position again; the
// answer is recorded only for the assignment it was made for; a refused partition is carried
// again by the next request.
#[test]
fn a_commit_in_flight_counts_only_once_answered_and_only_for_its_assignment() {
    let guard = guard();
    guard.assign(&[tp(0), tp(1)]);
    for p in 0..2 {
        let lease = admit(&guard, p, 10);
        guard.complete(&lease).unwrap();
    }
    let in_flight = guard.commit_request().expect("progress to commit");
    assert_eq!(
        offsets(in_flight.offsets()),
        BTreeMap::from([(0, 11), (1, 11)])
    );
    // Not answered yet: the same positions are still due.
    let again = guard.commit_request().expect("still due");
    assert_eq!(offsets(again.offsets()), offsets(in_flight.offsets()));
    assert_eq!(guard.snapshot().partitions[0].last_committed, None);

    // While it travels, partition 1 is lost and assigned back: a new assignment, whose
    // bookkeeping the old answer must not touch.
    guard.lost(&[tp(1)]);
    guard.assign(&[tp(1)]);
    let committed = guard.commit_answered(in_flight, &Ok(()));
    assert_eq!(offsets(&committed), BTreeMap::from([(0, 11), (1, 11)]));
    let snapshot = guard.snapshot();
    assert_eq!(snapshot.partitions[0].last_committed, Some(11));
    assert_eq!(
        snapshot.partitions[1].last_committed, None,
        "an answer for the old assignment is not the new one's commit"
    );

    // A refused partition keeps its last commit, so the next request carries it again.
    let lease = admit(&guard, 0, 11);
    guard.complete(&lease).unwrap();
    let request = guard.commit_request().expect("progress to commit");
    assert_eq!(offsets(request.offsets()), BTreeMap::from([(0, 12)]));
    let refused = Err(CommitFailure::Partitions(vec![(
        tp(0),
        "REBALANCE_IN_PROGRESS".into(),
    )]));
    assert!(guard.commit_answered(request, &refused).is_empty());
    assert_eq!(guard.snapshot().partitions[0].last_committed, Some(11));
    let retried = guard.commit_request().expect("carried again");
    assert_eq!(offsets(retried.offsets()), BTreeMap::from([(0, 12)]));
    // A request that failed as a whole changes nothing either.
    let failed = Err(CommitFailure::Request("timed out".into()));
    assert!(guard.commit_answered(retried, &failed).is_empty());
    assert_eq!(guard.snapshot().partitions[0].last_committed, Some(11));
}

// The handoff's one state check: a partition lost after its fence and drain (the heartbeat
// thread heard the membership end while the poll thread was between the drain and the commit)
// leaves the handoff at `prepare_commit`: nothing of it is offered for the commit, and
// `hand_back` leaves it lost rather than revoked. The partition still handed off is committed.
#[test]
fn a_partition_lost_between_its_drain_and_its_commit_is_not_committed() {
    let guard = guard();
    guard.assign(&[tp(0), tp(1)]);
    for p in [0, 1] {
        let lease = admit(&guard, p, 7);
        guard.complete(&lease).unwrap();
    }
    let calls = Mutex::new(Calls::default());
    let fenced = guard.fence(&[tp(0), tp(1)]);
    let drained = guard.drain(fenced, &mut flush_ok(&calls));
    // The loss lands here, from another thread.
    guard.lost_because(&[tp(0)], &"the coordinator answered UNKNOWN_MEMBER_ID");
    let awaiting = guard.prepare_commit(drained);
    assert_eq!(
        offsets(awaiting.offsets()),
        BTreeMap::from([(1, 8)]),
        "only the partition still being handed off is offered"
    );
    let handed = guard.hand_back(awaiting, Some(Ok(())));
    assert_eq!(handed.partitions, vec![tp(1)]);
    let report = handed.result.expect("no failure");
    assert_eq!(offsets(&report.committed), BTreeMap::from([(1, 8)]));
    let snapshot = guard.snapshot();
    let status = |p| {
        snapshot
            .partitions
            .iter()
            .find(|s| s.tp == tp(p))
            .map(|s| s.status)
    };
    assert_eq!(status(0), Some(OwnerStatus::Lost));
    assert_eq!(status(1), Some(OwnerStatus::Revoked));
    assert_eq!(
        snapshot.partitions[0].last_committed, None,
        "the lost one was never committed"
    );
}

// A loss while the handoff's commit is in flight: the answer is not recorded against the lost
// partition, which stays lost (its epoch moved), and it is not reported as handed back.
#[test]
fn a_partition_lost_while_its_handoff_commit_is_in_flight_stays_lost() {
    let guard = guard();
    guard.assign(&[tp(0)]);
    let lease = admit(&guard, 0, 3);
    guard.complete(&lease).unwrap();
    let calls = Mutex::new(Calls::default());
    let awaiting = guard.prepare_commit(guard.drain(guard.fence(&[tp(0)]), &mut flush_ok(&calls)));
    assert_eq!(offsets(awaiting.offsets()), BTreeMap::from([(0, 4)]));
    guard.lost_because(&[tp(0)], &"session expired");
    let handed = guard.hand_back(awaiting, Some(Ok(())));
    assert!(handed.partitions.is_empty(), "{:?}", handed.partitions);
    let snapshot = guard.snapshot();
    assert_eq!(snapshot.partitions[0].status, OwnerStatus::Lost);
    assert_eq!(snapshot.partitions[0].last_committed, None);
}

// Lost after its drain and assigned back before the handoff reached its commit (a new
// generation gave it to us again): the old handoff must not commit the new assignment's
// progress, which belongs to the new generation's own commits.
#[test]
fn a_partition_lost_and_assigned_back_during_a_handoff_is_left_to_its_new_assignment() {
    let guard = guard();
    guard.assign(&[tp(0)]);
    let lease = admit(&guard, 0, 3);
    guard.complete(&lease).unwrap();
    let calls = Mutex::new(Calls::default());
    let drained = guard.drain(guard.fence(&[tp(0)]), &mut flush_ok(&calls));
    guard.lost_because(&[tp(0)], &"fenced");
    guard.assign(&[tp(0)]);
    guard.resume_at(&tp(0), 10, None);
    let lease = admit(&guard, 0, 10);
    guard.complete(&lease).unwrap();
    let awaiting = guard.prepare_commit(drained);
    assert!(awaiting.offsets().is_empty(), "{:?}", awaiting.offsets());
    let handed = guard.hand_back(awaiting, None);
    assert!(handed.partitions.is_empty());
    assert_eq!(guard.owned(), vec![tp(0)], "the new assignment goes on");
}

// A failed handoff chains to the caller's error: the handoff error names the partitions and
// stages, its source is the first failed partition, whose source is the commit's own error.
#[test]
fn a_failed_handoff_chains_to_the_commit_error() {
    use std::error::Error as _;
    let guard = guard();
    guard.assign(&[tp(0)]);
    let lease = admit(&guard, 0, 1);
    guard.complete(&lease).unwrap();
    let calls = Mutex::new(Calls::default());
    let mut refuse = |_: &[CommitOffset]| -> Result<(), CommitFailure> {
        Err(CommitFailure::Partitions(vec![(
            tp(0),
            "OffsetCommit failed with RebalanceInProgress (27)".into(),
        )]))
    };
    let error = guard
        .revoke(&[tp(0)], &mut flush_ok(&calls), Some(&mut refuse))
        .expect_err("the commit was refused");
    assert_eq!(
        error.to_string(),
        "revocation handoff failed for orders-0 (commit)"
    );
    let partition = error.source().expect("the failed partition");
    assert_eq!(
        partition.to_string(),
        "orders-0 handoff failed at its commit"
    );
    let cause = partition.source().expect("the commit's error");
    assert_eq!(
        cause.to_string(),
        "OffsetCommit failed with RebalanceInProgress (27)"
    );
}
