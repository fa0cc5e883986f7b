//! A seek is a guard event: work admitted at or after the seek point is taken away (its handler's
//! lease goes stale at once, its completion does not count, and its record is not admitted again
//! while that handler may still run it), work before it still holds the commit back, and once it
//! finished the commit carries the seek point. Checked in memory, on the guard.

use rebalance_guard::guard::{
    AdmitError, CommitOffset, CompleteError, GuardConfig, Lease, RebalanceGuard, SeekError,
};
use rebalance_guard::TopicPartition;

type Guard = RebalanceGuard<String, ()>;

fn tp() -> TopicPartition {
    TopicPartition::new("orders", 0)
}

fn guard_owning_from(start: i64) -> Guard {
    let guard: Guard = RebalanceGuard::new(GuardConfig::default()).expect("guard");
    guard.assign(&[tp()]);
    guard.resume_at(&tp(), start, None);
    guard
}

fn admit(guard: &Guard, offset: i64) -> Lease {
    guard
        .process_message(&tp(), offset, Some(format!("ord-{offset}")), ())
        .expect("admitted")
}

/// What a commit would carry now (and records it as committed).
fn commit(guard: &Guard) -> Option<i64> {
    let mut carried = None;
    let mut send = |offsets: &[CommitOffset]| {
        carried = offsets.iter().find(|o| o.tp == tp()).map(|o| o.next_offset);
        Ok(())
    };
    guard.commit_progress(&mut send).expect("commit");
    carried
}

#[test]
fn a_seek_forward_skips_on_purpose_but_never_commits_past_work_still_running_before_it() {
    let guard = guard_owning_from(10);
    let running = admit(&guard, 10);
    let finished = admit(&guard, 11);
    guard.complete(&finished).expect("11 finished");
    guard.seek(&tp(), 50).expect("owned");
    assert!(
        guard.is_current(&running),
        "work before the seek point stays current"
    );
    assert!(
        commit(&guard).is_none_or(|at| at <= 10),
        "10 has not finished: nothing past it may be committed"
    );
    // Records between are never admitted again (a stale fetch answer is refused).
    assert!(matches!(
        guard.process_message(&tp(), 30, None, ()),
        Err(AdmitError::OffsetRegression { .. })
    ));
    guard.complete(&running).expect("10 finished");
    assert_eq!(commit(&guard), Some(50), "the skipped records are not work");
    let after = admit(&guard, 50);
    guard.complete(&after).expect("50 finished");
    assert_eq!(commit(&guard), Some(51));
}

#[test]
fn a_seek_back_takes_running_work_away_and_its_record_never_runs_twice_at_once() {
    let guard = guard_owning_from(0);
    for offset in 0..5 {
        let lease = admit(&guard, offset);
        guard.complete(&lease).expect("finished");
    }
    assert_eq!(commit(&guard), Some(5));
    let running = admit(&guard, 5);
    guard.seek(&tp(), 3).expect("owned");
    assert!(
        !guard.is_current(&running),
        "the handler of 5 must skip its effect: the seek took it away"
    );
    // Read again from 3: 3 and 4 finished before, their keys remembered (not applied twice).
    assert!(matches!(
        guard.process_message(&tp(), 3, Some("ord-3".into()), ()),
        Err(AdmitError::Duplicate { .. })
    ));
    assert!(matches!(
        guard.process_message(&tp(), 4, Some("ord-4".into()), ()),
        Err(AdmitError::Duplicate { .. })
    ));
    // 5 waits while its first handler may still run it.
    assert!(matches!(
        guard.process_message(&tp(), 5, Some("ord-5".into()), ()),
        Err(AdmitError::SeekedWhileRunning { offset: 5, .. })
    ));
    assert!(matches!(
        guard.complete(&running),
        Err(CompleteError::Seeked { offset: 5, .. })
    ));
    let again = admit(&guard, 5);
    assert!(guard.is_current(&again));
    guard.complete(&again).expect("5 finished once");
    assert_eq!(commit(&guard), Some(6));
}

#[test]
fn a_seek_back_with_nothing_running_makes_the_next_commit_carry_the_seek_point() {
    let guard = guard_owning_from(0);
    for offset in 0..8 {
        let lease = guard
            .process_message(&tp(), offset, None, ())
            .expect("admitted");
        guard.complete(&lease).expect("finished");
    }
    assert_eq!(commit(&guard), Some(8));
    guard.seek(&tp(), 2).expect("owned");
    assert_eq!(commit(&guard), Some(2), "Java's seek then commitSync");
    let lease = guard
        .process_message(&tp(), 2, None, ())
        .expect("read again");
    guard.complete(&lease).expect("finished");
    assert_eq!(commit(&guard), Some(3));
}

#[test]
fn only_the_owner_seeks_and_offsets_start_at_zero() {
    let guard: Guard = RebalanceGuard::new(GuardConfig::default()).expect("guard");
    assert_eq!(
        guard.seek(&tp(), 3),
        Err(SeekError::NotOwned { tp: tp() }),
        "never assigned"
    );
    guard.assign(&[tp()]);
    assert!(matches!(
        guard.seek(&tp(), -1),
        Err(SeekError::Negative { .. })
    ));
    guard.lost(&[tp()]);
    assert_eq!(guard.seek(&tp(), 3), Err(SeekError::NotOwned { tp: tp() }));
}

#[test]
fn a_worker_refuses_to_start_a_record_a_seek_took_away_and_a_release_ends_it_quietly() {
    let guard = guard_owning_from(0);
    let queued = admit(&guard, 0);
    let handed = admit(&guard, 1);
    guard.seek(&tp(), 0).expect("owned");
    assert!(!guard.start(&queued), "taken away before it started");
    guard
        .release(&handed)
        .expect("a release of taken-away work is quiet");
    let again = admit(&guard, 0);
    guard.complete(&again).expect("finished");
    assert_eq!(commit(&guard), Some(1));
}
