//! Work that was handed out and did not happen must come again, and its idempotency key must not
//! outlive it: a record whose handler skipped its effect because its lease was no longer current,
//! a record a worker could not start, a failed handler. Each is checked in memory, on the guard.

use std::sync::Arc;
use std::time::Duration;

use rebalance_guard::guard::{
    AdmitError, CompleteError, GuardConfig, Lease, ManualClock, OwnerStatus, RebalanceGuard,
};
use rebalance_guard::TopicPartition;

type Guard = RebalanceGuard<String, ()>;

const SESSION: Duration = Duration::from_secs(6);

fn tp(partition: i32) -> TopicPartition {
    TopicPartition::new("orders", partition)
}

fn order(offset: i64) -> Option<String> {
    Some(format!("ord-{offset}"))
}

/// A guard on a manual clock whose session bound was just renewed.
fn guard_with_session() -> (Guard, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new());
    let guard: Guard = RebalanceGuard::with_clock(GuardConfig::default(), clock.clone()).unwrap();
    guard.session_bound().renew(guard.now(), SESSION);
    (guard, clock)
}

fn admit(guard: &Guard, offset: i64) -> Lease {
    guard
        .process_message(&tp(0), offset, order(offset), ())
        .expect("admitted")
}

/// The order that was lost in a broker-fault run: the session bound lapsed while records sat in
/// a worker's queue; the handler of one of them found its lease not current, skipped the effect
/// and returned; the loss came after; the partition came back, was read again from the committed
/// offset, and the skipped record was refused as a duplicate of itself and committed past.
#[test]
fn a_record_whose_handler_skipped_it_as_stale_is_processed_when_its_partition_comes_back() {
    let (guard, clock) = guard_with_session();
    guard.assign(&[tp(0)]);
    let leases: Vec<Lease> = (852..=908).map(|offset| admit(&guard, offset)).collect();
    let skipped = leases.last().expect("908").clone();
    assert!(guard.start(&skipped), "908 runs on a worker (key order)");
    // Heartbeat answers are held: past the bound, the handler asks before its effect.
    clock.advance(SESSION);
    assert!(!guard.is_current(&skipped), "the session may have expired");
    // It skipped the effect and returned: that must not count as the record's work.
    assert!(matches!(
        guard.complete(&skipped),
        Err(CompleteError::NotCurrent { offset: 908, .. })
    ));
    // The membership learns of the loss, and the group gives the partition back.
    guard.lost(&[tp(0)]);
    guard.session_bound().renew(guard.now(), SESSION);
    guard.assign(&[tp(0)]);
    guard.resume_at(&tp(0), 852, None);
    for offset in 852..908 {
        admit(&guard, offset);
    }
    admit(&guard, 908);
}

/// The same skip while the membership never loses the partition (the session was renewed in
/// time): the record is released, handed out again from its offset, and the position never
/// passes it before it was done.
#[test]
fn a_record_skipped_as_stale_while_its_partition_stays_owned_is_delivered_again() {
    let (guard, clock) = guard_with_session();
    guard.assign(&[tp(0)]);
    let first = admit(&guard, 10);
    let stale = admit(&guard, 11);
    let after = admit(&guard, 12);
    assert!(guard.start(&first) && guard.start(&stale) && guard.start(&after));
    guard.complete(&first).unwrap();
    clock.advance(SESSION);
    assert!(!guard.is_current(&stale));
    // The answers arrive before the handler returns: the lease reads current again, but the
    // handler was told it was not, and skipped its effect.
    guard.session_bound().renew(guard.now(), SESSION);
    assert!(matches!(
        guard.complete(&stale),
        Err(CompleteError::NotCurrent { offset: 11, .. })
    ));
    guard.complete(&after).unwrap();
    assert_eq!(guard.take_redeliveries(), vec![(tp(0), 11)]);
    assert!(guard.take_redeliveries().is_empty(), "taken once");
    let snapshot = &guard.snapshot().partitions[0];
    assert_eq!(snapshot.contiguous_completed, Some(10), "never past 11");
    // Read again from 11: 11 is admitted again (its key too), 12 finished and is skipped.
    let again = guard
        .process_message(&tp(0), 11, order(11), ())
        .expect("11 comes again");
    assert!(matches!(
        guard.process_message(&tp(0), 12, order(12), ()),
        Err(AdmitError::AlreadyAdmitted { offset: 12, .. })
    ));
    guard.complete(&again).unwrap();
    assert_eq!(
        guard.snapshot().partitions[0].contiguous_completed,
        Some(12)
    );
    let next = admit(&guard, 13);
    guard.complete(&next).unwrap();
}

/// A worker that finds the session expired does not start the record, and the record is not
/// left queued forever: it comes again (the classic-protocol run whose offset 256 was never
/// applied, and whose commit stayed at 256 while 257 onwards were).
#[test]
fn a_record_refused_at_its_start_by_an_expired_session_is_delivered_again() {
    let (guard, clock) = guard_with_session();
    guard.assign(&[tp(0)]);
    let queued = admit(&guard, 256);
    clock.advance(SESSION);
    assert!(!guard.start(&queued), "not started past the bound");
    guard.session_bound().renew(guard.now(), SESSION);
    assert_eq!(guard.take_redeliveries(), vec![(tp(0), 256)]);
    assert_eq!(guard.unfinished(&tp(0)), 0, "nothing waits for it");
    let again = admit(&guard, 256);
    assert!(guard.start(&again));
    guard.complete(&again).unwrap();
    assert_eq!(
        guard.snapshot().partitions[0].contiguous_completed,
        Some(256)
    );
}

/// Releasing is tied to the lease's assignment: a worker of an earlier assignment cannot give
/// back a record of the current one.
#[test]
fn a_release_under_an_old_lease_changes_nothing() {
    let guard: Guard = RebalanceGuard::new(GuardConfig::default()).unwrap();
    guard.assign(&[tp(0)]);
    let old = admit(&guard, 5);
    guard.lost(&[tp(0)]);
    guard.assign(&[tp(0)]);
    let current = admit(&guard, 5);
    assert!(matches!(
        guard.release(&old),
        Err(CompleteError::StaleLease { .. })
    ));
    assert!(guard.take_redeliveries().is_empty());
    guard.complete(&current).unwrap();
    let snapshot = &guard.snapshot().partitions[0];
    assert_eq!(
        (snapshot.status, snapshot.contiguous_completed),
        (OwnerStatus::Owned, Some(5))
    );
}

/// Nothing of a partition overtakes a released record: a queued record after it does not start
/// (it is released too), and reading again starts at the released one, so the partition's
/// records still run in offset order.
#[test]
fn a_record_after_a_released_one_does_not_start_before_it_comes_again() {
    let guard: Guard = RebalanceGuard::new(GuardConfig::default()).unwrap();
    guard.assign(&[tp(0)]);
    let failed = admit(&guard, 10);
    let queued = admit(&guard, 11);
    assert!(guard.start(&failed));
    guard.release(&failed).expect("its handler failed");
    assert!(
        !guard.start(&queued),
        "11 must not run before 10 came again"
    );
    assert_eq!(guard.take_redeliveries(), vec![(tp(0), 10)]);
    let again: Vec<Lease> = [10, 11].iter().map(|&o| admit(&guard, o)).collect();
    assert!(guard.start(&again[0]) && guard.start(&again[1]));
    for lease in &again {
        guard.complete(lease).unwrap();
    }
    assert_eq!(
        guard.snapshot().partitions[0].contiguous_completed,
        Some(11)
    );
}
