//! The lock guard's decisions, one rule per test, and a property test that drives it with random
//! event sequences against a model of the broker's locks and of the share sessions holding them.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::*;
use crate::guard::ManualClock;

const LOCK: Duration = Duration::from_secs(30);

fn tp(partition: i32) -> TopicPartition {
    TopicPartition::new("orders", partition)
}

fn key(id: u64) -> Option<IdempotencyKey> {
    Some(IdempotencyKey::from(id))
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A guard on a manual clock, moved well past the guard's creation so that send times before
/// "now" are still after it.
fn guard_with(config: LockGuardConfig) -> (LockGuard, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new());
    let guard = LockGuard::with_clock(config, clock.clone()).expect("valid config");
    clock.advance(Duration::from_secs(10));
    (guard, clock)
}

fn guard() -> (LockGuard, Arc<ManualClock>) {
    guard_with(LockGuardConfig::default())
}

fn run(acquired: Acquired) -> LockLease {
    match acquired {
        Acquired::Run(lease) => lease,
        other => panic!("expected a lease, got {other:?}"),
    }
}

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn leases_and_the_guard_cross_threads() {
    assert_send_sync::<LockLease>();
    assert_send_sync::<LockGuard>();
}

#[test]
fn ack_types_carry_the_protocols_byte_values() {
    for (ack, byte) in [
        (AckType::Gap, 0),
        (AckType::Accept, 1),
        (AckType::Release, 2),
        (AckType::Reject, 3),
        (AckType::Renew, 4),
    ] {
        assert_eq!(ack.as_i8(), byte);
        assert_eq!(AckType::from_i8(byte), Some(ack));
    }
    assert_eq!(AckType::from_i8(5), None);
    assert_eq!(AckType::from_i8(-1), None);
}

#[test]
fn the_margin_is_a_second_or_a_tenth_of_the_lock_and_at_most_half_of_it() {
    let config = LockGuardConfig::default();
    assert_eq!(
        config.margin(Duration::from_secs(30)),
        Duration::from_secs(3)
    );
    assert_eq!(
        config.margin(Duration::from_secs(60)),
        Duration::from_secs(6)
    );
    assert_eq!(config.margin(Duration::from_secs(15)), ms(1500));
    assert_eq!(
        config.margin(Duration::from_secs(5)),
        Duration::from_secs(1)
    );
    assert_eq!(config.margin(Duration::from_secs(1)), ms(500), "capped");
    assert_eq!(config.margin(Duration::ZERO), Duration::ZERO);
    let custom = LockGuardConfig {
        margin_floor: ms(200),
        margin_percent: 25,
        ..LockGuardConfig::default()
    };
    assert_eq!(
        custom.margin(Duration::from_secs(4)),
        Duration::from_secs(1)
    );
    assert_eq!(custom.margin(ms(400)), ms(200));
    let too_much = LockGuardConfig {
        margin_percent: 51,
        ..LockGuardConfig::default()
    };
    let error = LockGuard::new(too_much).expect_err("refused");
    assert_eq!(error.setting, "margin_percent");
}

#[test]
fn the_deadline_counts_from_the_requests_send_time_not_the_answers_arrival() {
    let (mut guard, clock) = guard();
    let sent_at = clock.now();
    // The answer takes two seconds to arrive.
    clock.advance(Duration::from_secs(2));
    let lease = run(guard.acquired(&tp(0), 7, 1, None, sent_at, LOCK));
    // 30 s lock, 3 s margin: 27 s after the send, 25 s after the answer.
    assert_eq!(lease.deadline(), Some(sent_at + Duration::from_secs(27)));
    assert!(lease.is_current());
    assert_eq!(lease.time_left(), Duration::from_secs(25));
    clock.advance(Duration::from_secs(25) - ms(1));
    assert!(lease.is_current());
    assert_eq!(lease.time_left(), ms(1));
    clock.advance(ms(1));
    assert!(!lease.is_current(), "ends at the deadline itself");
    assert_eq!(lease.time_left(), Duration::ZERO);
    assert_eq!(
        (lease.tp(), lease.offset(), lease.delivery_count()),
        (&tp(0), 7, 1)
    );
}

#[test]
fn the_lease_ends_at_the_session_bound_when_it_comes_before_the_lock_and_stays_ended() {
    let (mut guard, clock) = guard();
    let lock = Duration::from_secs(600);
    let sent_at = clock.now();
    let lease = run(guard.acquired(&tp(0), 3, 1, key(3), sent_at, lock));
    let other = run(guard.acquired(&tp(0), 4, 1, None, sent_at, lock));
    // Unbounded until the membership renews it: the lock's lease (600 s less 60 s).
    assert_eq!(lease.deadline(), Some(sent_at + Duration::from_secs(540)));
    // A heartbeat sent now is answered: the session holds 15 s from its send time.
    let bound = guard.session_bound();
    bound.renew(clock.now(), Duration::from_secs(15));
    assert_eq!(
        lease.deadline(),
        Some(sent_at + Duration::from_secs(540)),
        "the lock's: heartbeats move the bound on"
    );
    clock.advance(Duration::from_secs(15) - ms(1));
    assert!(lease.is_current());
    clock.advance(ms(1));
    assert!(
        !lease.is_current(),
        "the group may have removed the member: 585 s of lock left are no longer ours"
    );
    // A later heartbeat cannot say the record stayed ours meanwhile: the lease stays ended.
    bound.renew(clock.now(), Duration::from_secs(15));
    assert!(!lease.is_current(), "never revived");
    assert_eq!(lease.deadline(), None);
    assert_eq!(
        guard.finished(&lease, Outcome::Applied, clock.now()),
        Some(AckType::Release)
    );
    let stats = guard.stats();
    assert_eq!(
        (
            stats.released_session_lapsed,
            stats.released_expired,
            stats.applied_after_expiry
        ),
        (1, 1, 1)
    );
    // A lease nobody asked while the bound was passed holds again once it is renewed: only an
    // instant at which ownership could have moved ends a lease.
    assert!(other.is_current());
    assert_eq!(
        guard.finished(&other, Outcome::Applied, clock.now()),
        Some(AckType::Accept)
    );
    assert_eq!(guard.stats().released_session_lapsed, 1);
}

#[test]
fn a_lock_that_ends_before_the_session_bound_is_not_counted_as_a_lapsed_session() {
    let (mut guard, clock) = guard();
    let sent_at = clock.now();
    guard
        .session_bound()
        .renew(sent_at, Duration::from_secs(45));
    let lease = run(guard.acquired(&tp(0), 5, 1, None, sent_at, LOCK));
    assert_eq!(lease.deadline(), Some(sent_at + Duration::from_secs(27)));
    clock.advance(Duration::from_secs(27));
    assert!(!lease.is_current());
    assert_eq!(
        guard.finished(&lease, Outcome::Skipped, clock.now()),
        Some(AckType::Release)
    );
    let stats = guard.stats();
    assert_eq!(
        (stats.released_expired, stats.released_session_lapsed),
        (1, 0)
    );
}

#[test]
fn a_lock_that_ran_out_before_its_answer_arrived_gives_a_lease_that_is_never_current() {
    let (mut guard, clock) = guard();
    let sent_at = clock.now();
    clock.advance(Duration::from_secs(28));
    let lease = run(guard.acquired(&tp(0), 0, 1, None, sent_at, LOCK));
    assert!(!lease.is_current());
    let now = clock.now();
    assert_eq!(
        guard.finished(&lease, Outcome::Applied, now),
        Some(AckType::Release)
    );
    assert_eq!(guard.stats().applied_after_expiry, 1);
    assert_eq!(guard.stats().released_expired, 1);
}

#[test]
fn applied_under_a_current_lease_is_accepted_and_after_it_released() {
    let (mut guard, clock) = guard();
    let now = clock.now();
    let early = run(guard.acquired(&tp(0), 1, 1, key(1), now, LOCK));
    let late = run(guard.acquired(&tp(0), 2, 1, key(2), now, LOCK));
    clock.advance(Duration::from_secs(26));
    assert_eq!(
        guard.finished(&early, Outcome::Applied, clock.now()),
        Some(AckType::Accept)
    );
    clock.advance(Duration::from_secs(1));
    assert_eq!(
        guard.finished(&late, Outcome::Applied, clock.now()),
        Some(AckType::Release)
    );
    let stats = guard.stats();
    assert_eq!((stats.accepted, stats.released), (1, 1));
    assert_eq!(stats.applied_after_expiry, 1);
    // Both effects happened here: both keys refuse a redelivery.
    for (offset, id) in [(1, 1), (2, 2)] {
        assert!(matches!(
            guard.acquired(&tp(0), offset, 2, key(id), clock.now(), LOCK),
            Acquired::AlreadyApplied
        ));
    }
}

#[test]
fn an_outcome_is_decided_at_the_instant_its_handler_finished_not_when_it_is_drained() {
    let (mut guard, clock) = guard();
    let sent_at = clock.now();
    let inside = run(guard.acquired(&tp(0), 0, 1, key(1), sent_at, LOCK));
    let outside = run(guard.acquired(&tp(0), 1, 1, key(2), sent_at, LOCK));
    clock.advance(Duration::from_secs(20));
    // Finished (and stamped) inside the lease, which ends at 27 s.
    let finished_inside = inside.now();
    clock.advance(Duration::from_secs(8));
    let finished_outside = outside.now();
    // Both drained at 28 s, past the lease.
    assert_eq!(
        guard.finished(&inside, Outcome::Applied, finished_inside),
        Some(AckType::Accept)
    );
    assert_eq!(
        guard.finished(&outside, Outcome::Applied, finished_outside),
        Some(AckType::Release)
    );
    assert_eq!(guard.stats().applied_after_expiry, 1);
}

#[test]
fn the_failure_policy_releases_while_retries_remain_and_rejects_after() {
    let config = LockGuardConfig {
        retries: 2,
        ..LockGuardConfig::default()
    };
    let retryable = Outcome::Failed { retryable: true };
    let poison = Outcome::Failed { retryable: false };
    // (delivery count, outcome, lease still current at the finish, expected acknowledgement)
    let table = [
        (1, Outcome::Applied, true, AckType::Accept),
        (1, Outcome::Skipped, true, AckType::Release),
        (1, retryable, true, AckType::Release),
        (2, retryable, true, AckType::Release),
        (3, retryable, true, AckType::Reject),
        (9, retryable, true, AckType::Reject),
        (1, poison, true, AckType::Reject),
        (1, Outcome::Applied, false, AckType::Release),
        (1, Outcome::Skipped, false, AckType::Release),
        (3, retryable, false, AckType::Release),
        (1, poison, false, AckType::Release),
    ];
    for (row, (count, outcome, current, expected)) in table.into_iter().enumerate() {
        let (mut guard, clock) = guard_with(config.clone());
        let lease = run(guard.acquired(&tp(0), 0, count, None, clock.now(), LOCK));
        if !current {
            clock.advance(LOCK);
        }
        let ack = guard.finished(&lease, outcome, clock.now());
        assert_eq!(
            ack,
            Some(expected),
            "row {row}: {count} {outcome:?} {current}"
        );
        assert_eq!(
            guard.finished(&lease, outcome, clock.now()),
            None,
            "row {row}: once"
        );
    }
    let (mut guard, clock) = guard();
    let lease = run(guard.acquired(&tp(0), 0, 1, None, clock.now(), LOCK));
    assert_eq!(
        guard.finished(&lease, retryable, clock.now()),
        Some(AckType::Reject),
        "no retries by default"
    );
}

#[test]
fn a_renewal_extends_the_lease_from_its_send_time_and_never_shortens_it() {
    let config = LockGuardConfig {
        renewal: true,
        ..LockGuardConfig::default()
    };
    let (mut guard, clock) = guard_with(config);
    let t0 = clock.now();
    let lease = run(guard.acquired(&tp(0), 5, 1, None, t0, LOCK));
    clock.advance(Duration::from_secs(20));
    let renew_at = clock.now();
    assert!(guard.renew_sent(&tp(0), 5));
    clock.advance(Duration::from_secs(1));
    assert!(guard.renewed(&tp(0), 5, renew_at, LOCK));
    assert_eq!(lease.deadline(), Some(renew_at + Duration::from_secs(27)));
    // An answer to an older renewal, or one for a shorter lock, never moves the deadline back.
    assert!(guard.renewed(&tp(0), 5, t0 + Duration::from_secs(5), LOCK));
    assert!(guard.renewed(&tp(0), 5, renew_at, Duration::from_secs(10)));
    assert_eq!(lease.deadline(), Some(renew_at + Duration::from_secs(27)));
    clock.advance(Duration::from_secs(20));
    assert!(
        lease.is_current(),
        "41 s after the fetch, 21 s after the renewal"
    );
    assert_eq!(
        guard.finished(&lease, Outcome::Applied, clock.now()),
        Some(AckType::Accept)
    );
    assert!(!guard.renewed(&tp(0), 5, clock.now(), LOCK), "finished");
    assert_eq!(guard.stats().renewals, 3);
}

#[test]
fn a_renewal_sent_before_the_acquisition_does_not_extend_it() {
    let (mut guard, clock) = guard();
    let before = clock.now();
    clock.advance(Duration::from_secs(1));
    let fetched = clock.now();
    let lease = run(guard.acquired(&tp(0), 5, 2, None, fetched, LOCK));
    assert!(!guard.renewed(&tp(0), 5, before, Duration::from_secs(300)));
    assert_eq!(lease.deadline(), Some(fetched + Duration::from_secs(27)));
}

#[test]
fn a_worker_sees_a_renewal_through_the_lease_it_holds() {
    let (mut guard, clock) = guard();
    let t0 = clock.now();
    let lease = run(guard.acquired(&tp(0), 5, 1, None, t0, LOCK));
    let (ask, asked) = std::sync::mpsc::channel::<()>();
    let (answer, answered) = std::sync::mpsc::channel::<bool>();
    std::thread::scope(|scope| {
        let worker_lease = lease.clone();
        scope.spawn(move || {
            while asked.recv().is_ok() {
                if answer.send(worker_lease.is_current()).is_err() {
                    break;
                }
            }
        });
        let bound = Duration::from_secs(30);
        let current = || {
            ask.send(()).expect("worker waits");
            answered.recv_timeout(bound).expect("worker answers")
        };
        assert!(current());
        clock.advance(Duration::from_secs(15));
        guard.renew_sent(&tp(0), 5);
        guard.renewed(&tp(0), 5, clock.now(), LOCK);
        clock.advance(Duration::from_secs(20));
        assert!(
            current(),
            "35 s after the fetch: current only through the renewal"
        );
        clock.advance(Duration::from_secs(7));
        assert!(!current(), "past the renewed deadline");
        drop(ask);
    });
}

#[test]
fn renewal_is_due_past_half_the_lock_once_and_only_when_enabled() {
    let (mut guard, clock) = guard();
    let t0 = clock.now();
    run(guard.acquired(&tp(0), 1, 1, None, t0, LOCK));
    run(guard.acquired(&tp(1), 1, 1, None, t0 + Duration::from_secs(5), LOCK));
    let finished = run(guard.acquired(&tp(0), 2, 1, None, t0, LOCK));
    guard.finished(&finished, Outcome::Applied, clock.now());
    clock.advance(Duration::from_secs(15));
    assert!(guard.due_for_renewal(clock.now()).is_empty(), "off");
    guard.set_renewal(true);
    assert_eq!(guard.due_for_renewal(clock.now()), vec![(tp(0), 1)]);
    assert!(guard.renew_sent(&tp(0), 1));
    assert!(
        guard.due_for_renewal(clock.now()).is_empty(),
        "being renewed"
    );
    clock.advance(Duration::from_secs(5));
    assert_eq!(guard.due_for_renewal(clock.now()), vec![(tp(1), 1)]);
    // The renewal sent at 15 s is answered at 20 s: due again at 30 s.
    assert!(guard.renewed(&tp(0), 1, t0 + Duration::from_secs(15), LOCK));
    assert_eq!(guard.due_for_renewal(clock.now()), vec![(tp(1), 1)]);
    assert!(guard.renew_sent(&tp(1), 1));
    assert!(guard.renew_failed(&tp(1), 1));
    clock.advance(Duration::from_secs(10));
    assert_eq!(guard.due_for_renewal(clock.now()), vec![(tp(0), 1)]);
    // A refused renewal leaves the deadline as it was, and is not tried again.
    assert!(!guard.renew_sent(&tp(1), 1));
    assert_eq!(guard.stats().renew_failures, 1);
    clock.advance(Duration::from_secs(30));
    assert!(
        guard.due_for_renewal(clock.now()).is_empty(),
        "ended leases"
    );
}

#[test]
fn a_record_acquired_again_voids_the_earlier_lease_and_its_finish() {
    let config = LockGuardConfig {
        renewal: true,
        ..LockGuardConfig::default()
    };
    let (mut guard, clock) = guard_with(config);
    let first = run(guard.acquired(&tp(0), 3, 1, key(3), clock.now(), LOCK));
    clock.advance(LOCK);
    let second = run(guard.acquired(&tp(0), 3, 2, key(3), clock.now(), LOCK));
    assert!(!first.is_current_at(clock.now()));
    assert_eq!(first.deadline(), None);
    assert!(second.is_current());
    // Renewing the new acquisition never revives the old lease.
    guard.renewed(&tp(0), 3, clock.now(), LOCK);
    assert!(!first.is_current());
    assert_eq!(guard.finished(&first, Outcome::Skipped, clock.now()), None);
    assert_eq!(
        guard.finished(&second, Outcome::Applied, clock.now()),
        Some(AckType::Accept)
    );
    let stats = guard.stats();
    assert_eq!((stats.voided, stats.accepted, stats.released), (1, 1, 0));
}

#[test]
fn an_effect_applied_under_a_voided_lease_is_counted_and_its_key_remembered() {
    let (mut guard, clock) = guard();
    let first = run(guard.acquired(&tp(0), 3, 1, key(3), clock.now(), LOCK));
    clock.advance(LOCK);
    let second = run(guard.acquired(&tp(0), 3, 2, key(3), clock.now(), LOCK));
    assert_eq!(guard.finished(&first, Outcome::Applied, clock.now()), None);
    assert_eq!(guard.stats().applied_after_expiry, 1);
    assert!(matches!(
        guard.acquired(&tp(1), 0, 1, key(3), clock.now(), LOCK),
        Acquired::AlreadyApplied
    ));
    assert_eq!(
        guard.finished(&second, Outcome::Skipped, clock.now()),
        Some(AckType::Release)
    );
}

#[test]
fn keys_refuse_what_was_applied_and_what_runs_but_not_what_was_given_back() {
    let (mut guard, clock) = guard();
    let now = clock.now();
    let applied = run(guard.acquired(&tp(0), 0, 1, key(1), now, LOCK));
    let busy = guard.acquired(&tp(1), 0, 1, key(1), now, LOCK);
    assert!(matches!(busy, Acquired::KeyInFlight));
    assert_eq!(busy.ack(), Some(AckType::Release));
    assert_eq!(
        guard.finished(&applied, Outcome::Applied, now),
        Some(AckType::Accept)
    );
    let refused = guard.acquired(&tp(1), 0, 2, key(1), now, LOCK);
    assert!(matches!(refused, Acquired::AlreadyApplied));
    assert_eq!(refused.ack(), Some(AckType::Accept));
    // Released work leaves no key behind: the record runs again when it comes back.
    let skipped = run(guard.acquired(&tp(0), 1, 1, key(2), now, LOCK));
    guard.finished(&skipped, Outcome::Skipped, now);
    let failed = run(guard.acquired(&tp(0), 1, 2, key(2), now, LOCK));
    guard.finished(&failed, Outcome::Failed { retryable: false }, now);
    run(guard.acquired(&tp(0), 1, 3, key(2), now, LOCK));
    let stats = guard.stats();
    assert_eq!(stats.refused_already_applied, 1);
    assert_eq!(stats.refused_key_in_flight, 1);
    assert_eq!((stats.accepted, stats.released, stats.rejected), (2, 2, 1));
}

#[test]
fn a_refused_accept_is_counted_and_the_key_still_refuses_the_record() {
    let (mut guard, clock) = guard();
    let now = clock.now();
    let lease = run(guard.acquired(&tp(0), 4, 1, key(4), now, LOCK));
    assert_eq!(
        guard.finished(&lease, Outcome::Applied, now),
        Some(AckType::Accept)
    );
    assert_eq!(guard.stats().held, 1);
    assert!(guard.ack_result(&tp(0), 4, AckType::Accept, false));
    let stats = guard.stats();
    assert_eq!(stats.ack_failures.accept, 1);
    assert_eq!(stats.ack_failures.total(), 1);
    assert_eq!(stats.held, 0);
    clock.advance(LOCK);
    assert!(matches!(
        guard.acquired(&tp(0), 4, 2, key(4), clock.now(), LOCK),
        Acquired::AlreadyApplied
    ));
    assert!(guard.ack_result(&tp(0), 4, AckType::Accept, true));
    assert!(
        !guard.ack_result(&tp(0), 4, AckType::Accept, true),
        "not held"
    );
    assert_eq!(guard.stats().held, 0);
}

#[test]
fn applied_keys_are_bounded_and_the_oldest_is_forgotten_first() {
    let config = LockGuardConfig {
        applied_keys: 3,
        ..LockGuardConfig::default()
    };
    let (mut guard, clock) = guard_with(config);
    let now = clock.now();
    for id in 1..=4u64 {
        let lease = run(guard.acquired(&tp(0), id as i64, 1, key(id), now, LOCK));
        guard.finished(&lease, Outcome::Applied, now);
        // Refused again soon after, which must not make a key look recent.
        assert!(matches!(
            guard.acquired(&tp(1), id as i64, 1, key(id), now, LOCK),
            Acquired::AlreadyApplied
        ));
        if id == 2 {
            assert!(matches!(
                guard.acquired(&tp(1), 9, 1, key(1), now, LOCK),
                Acquired::AlreadyApplied
            ));
        }
    }
    assert!(matches!(
        guard.acquired(&tp(2), 1, 2, key(1), now, LOCK),
        Acquired::Run(_)
    ));
    for id in 2..=4u64 {
        assert!(matches!(
            guard.acquired(&tp(2), id as i64, 2, key(id), now, LOCK),
            Acquired::AlreadyApplied
        ));
    }
    let (mut forgetful, clock) = guard_with(LockGuardConfig {
        applied_keys: 0,
        ..LockGuardConfig::default()
    });
    let lease = run(forgetful.acquired(&tp(0), 0, 1, key(1), clock.now(), LOCK));
    forgetful.finished(&lease, Outcome::Applied, clock.now());
    assert!(matches!(
        forgetful.acquired(&tp(0), 1, 1, key(1), clock.now(), LOCK),
        Acquired::Run(_)
    ));
}

#[test]
fn expired_lists_each_ended_lease_once_and_drops_unanswered_acknowledgements() {
    let (mut guard, clock) = guard();
    let t0 = clock.now();
    let running = run(guard.acquired(&tp(0), 1, 1, None, t0, LOCK));
    let done = run(guard.acquired(&tp(0), 2, 1, None, t0, LOCK));
    run(guard.acquired(&tp(0), 3, 1, None, t0 + Duration::from_secs(10), LOCK));
    guard.finished(&done, Outcome::Applied, t0);
    assert!(guard.expired(clock.now()).is_empty());
    clock.advance(Duration::from_secs(27));
    assert_eq!(guard.expired(clock.now()), vec![(tp(0), 1)]);
    assert!(guard.expired(clock.now()).is_empty(), "listed once");
    let stats = guard.stats();
    assert_eq!(
        (stats.held, stats.running),
        (2, 2),
        "the ACCEPT's answer is moot"
    );
    assert!(guard.is_running(&tp(0), 1));
    assert_eq!(
        guard.finished(&running, Outcome::Skipped, clock.now()),
        Some(AckType::Release)
    );
    clock.advance(Duration::from_secs(10));
    assert_eq!(guard.expired(clock.now()), vec![(tp(0), 3)]);
    assert_eq!(guard.stats().held, 1);
}

#[test]
fn forgetting_a_partition_voids_its_running_leases() {
    let (mut guard, clock) = guard();
    let now = clock.now();
    let a = run(guard.acquired(&tp(0), 1, 1, key(1), now, LOCK));
    let b = run(guard.acquired(&tp(0), 2, 1, None, now, LOCK));
    let other = run(guard.acquired(&tp(1), 1, 1, None, now, LOCK));
    guard.finished(&b, Outcome::Applied, now);
    assert_eq!(guard.forget_partition(&tp(0)), 1);
    assert_eq!(guard.forget_partition(&tp(0)), 0);
    assert!(!a.is_current());
    assert!(other.is_current());
    assert_eq!(guard.finished(&a, Outcome::Skipped, now), None);
    // Its key is free again: the record was not applied.
    assert!(matches!(
        guard.acquired(&tp(0), 1, 2, key(1), now, LOCK),
        Acquired::Run(_)
    ));
    let stats = guard.stats();
    assert_eq!((stats.held, stats.running, stats.voided), (2, 2, 1));
}

fn grant(clock: &ManualClock, scope: &SessionScope) -> Grant {
    Grant {
        sent_at: clock.now(),
        lock: LOCK,
        lock_ends_by: clock.now() + LOCK,
        scope: scope.clone(),
    }
}

#[test]
fn a_lease_of_an_ended_session_is_not_current_and_its_finish_acknowledges_nothing() {
    let (mut guard, clock) = guard();
    let session = SessionScope::new();
    let g = grant(&clock, &session.child());
    let applied = run(guard.acquired_in(&tp(0), 1, 1, key(1), &g));
    let skipped = run(guard.acquired_in(&tp(0), 2, 1, None, &g));
    assert!(applied.is_current() && skipped.is_current());
    assert_eq!(applied.lock_ends_by(), clock.now() + LOCK);
    assert!(session.end(), "the first end ends it");
    assert!(!session.end(), "and it stays ended");
    // At once, lock-free, whatever the deadline says.
    for lease in [&applied, &skipped] {
        assert!(!lease.is_current());
        assert!(!lease.is_current_at(clock.now()));
        assert_eq!(lease.time_left(), Duration::ZERO);
        assert_eq!(lease.deadline(), None);
    }
    let now = clock.now();
    assert_eq!(guard.finished(&applied, Outcome::Applied, now), None);
    assert_eq!(guard.finished(&skipped, Outcome::Skipped, now), None);
    let stats = guard.stats();
    assert_eq!((stats.held, stats.running, stats.voided), (0, 0, 2));
    assert_eq!(stats.applied_session_ended, 1);
    assert_eq!((stats.accepted, stats.released), (0, 0));
    // The applied key still refuses the record when it comes back in a new session.
    let next = grant(&clock, &SessionScope::new());
    assert!(matches!(
        guard.acquired_in(&tp(0), 1, 2, key(1), &next),
        Acquired::AlreadyApplied
    ));
}

#[test]
fn ending_a_partition_or_a_session_ends_only_the_leases_inside_it() {
    let (mut guard, clock) = guard();
    let (one, two) = (SessionScope::new(), SessionScope::new());
    let (p0, p1) = (one.child(), one.child());
    let a = run(guard.acquired_in(&tp(0), 1, 1, None, &grant(&clock, &p0)));
    let b = run(guard.acquired_in(&tp(1), 1, 1, None, &grant(&clock, &p1)));
    let c = run(guard.acquired_in(&tp(2), 1, 1, None, &grant(&clock, &two.child())));
    assert!(p0.is_within(&one) && !p0.is_within(&two) && !one.is_within(&p0));
    p0.end();
    assert!(!a.is_current() && b.is_current() && c.is_current());
    one.end();
    assert!(!b.is_current() && c.is_current());
    assert!(p1.has_ended() && !two.has_ended());
}

#[test]
fn sweeping_ended_sessions_voids_their_running_leases_and_forgets_their_acks() {
    let (mut guard, clock) = guard();
    let session = SessionScope::new();
    let g = grant(&clock, &session);
    let running = run(guard.acquired_in(&tp(0), 1, 1, key(1), &g));
    let done = run(guard.acquired_in(&tp(0), 2, 1, None, &g));
    let other = run(guard.acquired_in(&tp(0), 3, 1, None, &grant(&clock, &SessionScope::new())));
    let now = clock.now();
    assert_eq!(
        guard.finished(&done, Outcome::Applied, now),
        Some(AckType::Accept)
    );
    session.end();
    // Swept on the poll thread's next turn.
    assert_eq!(guard.expired(now), Vec::new());
    let stats = guard.stats();
    assert_eq!((stats.held, stats.running, stats.voided), (1, 1, 1));
    assert!(other.is_current());
    assert_eq!(guard.sweep_ended_sessions(), 0);
    // The voided lease's finish acknowledges nothing, and its key is free again.
    assert_eq!(guard.finished(&running, Outcome::Skipped, now), None);
    assert!(matches!(
        guard.acquired_in(&tp(1), 1, 1, key(1), &grant(&clock, &SessionScope::new())),
        Acquired::Run(_)
    ));
}

/// How many share sessions the property test's acquisitions run under, each ended and replaced
/// by a new incarnation at random.
const SESSIONS: usize = 2;

/// The idempotency keys the property test draws from (few, so that they collide).
const KEYS: u64 = 4;

/// The share session an acquisition of the property test happens under.
#[derive(Debug, Clone)]
enum Under {
    /// None the caller tracks ([`LockGuard::acquired`]): the lease ends by time only.
    Nothing,
    /// The live incarnation of this session, in the scope of the record's partition.
    Session(usize),
    /// A scope that already ended (an answer absorbed after its session ended), when one has;
    /// else the first session's live one.
    Ended(prop::sample::Index),
}

/// One step of the property test.
#[derive(Debug, Clone)]
enum Step {
    Acquire {
        partition: i32,
        offset: i64,
        key: Option<u64>,
        delivery_count: i16,
        trip: u64,
        lock: u64,
        under: Under,
    },
    Advance(u64),
    Finish {
        pick: prop::sample::Index,
        outcome: Outcome,
    },
    SendRenewals,
    AnswerRenewal {
        pick: prop::sample::Index,
        ok: bool,
        lock: u64,
    },
    AnswerAck {
        pick: prop::sample::Index,
        ok: bool,
    },
    Expired,
    Forget(i32),
    /// The session ends (its connection closed, it was fenced): a new incarnation replaces it.
    EndSession(usize),
    /// The partition left the session (its leader moved): a new partition scope replaces it.
    EndPartition {
        session: usize,
        partition: i32,
    },
    /// The poll thread's sweep of ended sessions.
    Sweep,
}

fn step() -> impl Strategy<Value = Step> {
    let outcome = prop_oneof![
        Just(Outcome::Applied),
        Just(Outcome::Skipped),
        any::<bool>().prop_map(|retryable| Outcome::Failed { retryable }),
    ];
    let under = prop_oneof![
        1 => Just(Under::Nothing),
        4 => (0..SESSIONS).prop_map(Under::Session),
        1 => any::<prop::sample::Index>().prop_map(Under::Ended),
    ];
    prop_oneof![
        4 => (
            (0..2i32, 0..4i64, proptest::option::of(0..KEYS)),
            (1..4i16, 0..400u64, 500..3_000u64, under),
        )
            .prop_map(|((partition, offset, key), (delivery_count, trip, lock, under))| {
                Step::Acquire { partition, offset, key, delivery_count, trip, lock, under }
            }),
        4 => (0..1_500u64).prop_map(Step::Advance),
        4 => (any::<prop::sample::Index>(), outcome)
            .prop_map(|(pick, outcome)| Step::Finish { pick, outcome }),
        2 => Just(Step::SendRenewals),
        2 => (any::<prop::sample::Index>(), any::<bool>(), 500..3_000u64)
            .prop_map(|(pick, ok, lock)| Step::AnswerRenewal { pick, ok, lock }),
        2 => (any::<prop::sample::Index>(), any::<bool>())
            .prop_map(|(pick, ok)| Step::AnswerAck { pick, ok }),
        1 => Just(Step::Expired),
        1 => (0..2i32).prop_map(Step::Forget),
        1 => (0..SESSIONS).prop_map(Step::EndSession),
        1 => (0..SESSIONS, 0..2i32)
            .prop_map(|(session, partition)| Step::EndPartition { session, partition }),
        1 => Just(Step::Sweep),
    ]
}

/// The model's view of one acquisition that got a lease.
struct ModelLease {
    lease: LockLease,
    key: Option<u64>,
    /// The scope it was acquired under (an index into [`Model::scopes`]), if any.
    scope: Option<usize>,
    /// When the acquiring request was sent: renewals sent earlier do not count for it.
    sent_at: Instant,
    /// The latest instant the model lets the lease reach: the send time plus the lock minus
    /// the margin, of the acquisition or of a granted renewal sent after it.
    deadline: Instant,
    /// The broker's lock lasts at least until here (the same, without the margins).
    lock_until: Instant,
    /// The guard stopped tracking it while its handler ran (acquired again, partition
    /// forgotten, swept or finished after its session ended).
    voided: bool,
    finished: bool,
}

/// One scope the model made, with its own record of whether it ended: the model never asks
/// the scope under test.
struct ModelScope {
    scope: SessionScope,
    /// The session scope a partition's scope is inside (an index into [`Model::scopes`]).
    parent: Option<usize>,
    ended: bool,
}

/// The broker's lock and the guard's decisions, as plain bookkeeping.
struct Model {
    config: LockGuardConfig,
    leases: Vec<ModelLease>,
    /// The acquisition holding each record now (an index into `leases`), if it got a lease.
    current: HashMap<(i32, i64), usize>,
    applied: HashSet<u64>,
    /// RENEWs sent and not answered: (lease index, send time).
    renewals: Vec<(usize, Instant)>,
    /// Acknowledgements decided and not answered: (record, type, the acquisition's scope).
    acks: Vec<((i32, i64), AckType, Option<usize>)>,
    /// Every scope made, ended or not.
    scopes: Vec<ModelScope>,
    /// The live incarnation of each session.
    sessions: Vec<usize>,
    /// The live scope of each (session, partition), made at its first acquisition.
    partitions: HashMap<(usize, i32), usize>,
    /// The counters the guard should show (`held`, the renewals and the refused
    /// acknowledgements are not modelled).
    stats: LockStats,
}

impl Model {
    fn new(config: LockGuardConfig) -> Self {
        let mut model = Model {
            config,
            leases: Vec::new(),
            current: HashMap::new(),
            applied: HashSet::new(),
            renewals: Vec::new(),
            acks: Vec::new(),
            scopes: Vec::new(),
            sessions: Vec::new(),
            partitions: HashMap::new(),
            stats: LockStats::default(),
        };
        model.sessions = (0..SESSIONS).map(|_| model.new_session()).collect();
        model
    }

    fn margin_deadline(&self, sent_at: Instant, lock: Duration) -> Instant {
        sent_at + lock - self.config.margin(lock)
    }

    /// A new session incarnation.
    fn new_session(&mut self) -> usize {
        self.scopes.push(ModelScope {
            scope: SessionScope::new(),
            parent: None,
            ended: false,
        });
        self.scopes.len() - 1
    }

    /// The live scope of `partition` in `session`'s live incarnation.
    fn partition_scope(&mut self, session: usize, partition: i32) -> usize {
        if let Some(&index) = self.partitions.get(&(session, partition)) {
            return index;
        }
        let parent = self.sessions[session];
        self.scopes.push(ModelScope {
            scope: self.scopes[parent].scope.child(),
            parent: Some(parent),
            ended: false,
        });
        let index = self.scopes.len() - 1;
        self.partitions.insert((session, partition), index);
        index
    }

    /// Whether the scope, or the session it is inside, ended.
    fn ended(&self, scope: Option<usize>) -> bool {
        let mut at = scope;
        while let Some(index) = at {
            if self.scopes[index].ended {
                return true;
            }
            at = self.scopes[index].parent;
        }
        false
    }

    /// Ends the scope: the acknowledgements decided under it are dropped unsent.
    fn end(&mut self, index: usize) {
        self.scopes[index].ended = true;
        let acks = std::mem::take(&mut self.acks);
        self.acks = acks
            .into_iter()
            .filter(|(_, _, scope)| !self.ended(*scope))
            .collect();
    }

    /// Voids the acquisition holding the record now, if its handler has not finished (a
    /// finished lease has nothing left to void).
    fn void(&mut self, record: (i32, i64)) {
        if let Some(index) = self.current.remove(&record) {
            let lease = &mut self.leases[index];
            if !lease.finished {
                lease.voided = true;
                self.stats.voided += 1;
            }
        }
    }

    /// What the guard's sweep of ended sessions does: returns how many were running.
    fn sweep(&mut self) -> usize {
        let ended: Vec<(i32, i64)> = self
            .current
            .iter()
            .filter(|(_, &index)| self.ended(self.leases[index].scope))
            .map(|(record, _)| *record)
            .collect();
        let mut running = 0;
        for record in ended {
            running += usize::from(!self.leases[self.current[&record]].finished);
            self.void(record);
        }
        running
    }

    fn key_in_flight(&self, key: u64) -> bool {
        self.current.values().any(|&index| {
            let lease = &self.leases[index];
            lease.key == Some(key) && !lease.finished && !lease.voided
        })
    }
}

fn check_sequence(steps: Vec<Step>) -> Result<(), TestCaseError> {
    let config = LockGuardConfig {
        margin_floor: ms(100),
        margin_percent: 10,
        retries: 1,
        applied_keys: 1_000,
        renewal: true,
    };
    let (mut guard, clock) = guard_with(config.clone());
    let mut model = Model::new(config);
    for step in steps {
        let now = clock.now();
        match step {
            Step::Acquire {
                partition,
                offset,
                key: id,
                delivery_count,
                trip,
                lock,
                under,
            } => {
                let record = (partition, offset);
                let (sent_at, lock) = (now - ms(trip), ms(lock));
                let scope = match under {
                    Under::Nothing => None,
                    Under::Session(session) => Some(model.partition_scope(session, partition)),
                    Under::Ended(pick) => {
                        let ended: Vec<usize> = (0..model.scopes.len())
                            .filter(|&index| model.ended(Some(index)))
                            .collect();
                        Some(if ended.is_empty() {
                            model.partition_scope(0, partition)
                        } else {
                            ended[pick.index(ended.len())]
                        })
                    }
                };
                let ended = model.ended(scope);
                model.void(record);
                model.acks.retain(|(held, _, _)| *held != record);
                let (tp, key) = (tp(partition), id.map(IdempotencyKey::from));
                let acquired = match scope {
                    None => guard.acquired(&tp, offset, delivery_count, key, sent_at, lock),
                    Some(index) => {
                        let grant = Grant {
                            sent_at,
                            lock,
                            lock_ends_by: now + lock,
                            scope: model.scopes[index].scope.clone(),
                        };
                        guard.acquired_in(&tp, offset, delivery_count, key, &grant)
                    }
                };
                match (acquired, id) {
                    (Acquired::Run(lease), _) => {
                        prop_assert!(id.is_none_or(|id| !model.applied.contains(&id)));
                        prop_assert!(id.is_none_or(|id| !model.key_in_flight(id)));
                        let deadline = model.margin_deadline(sent_at, lock);
                        prop_assert_eq!(lease.deadline(), (!ended).then_some(deadline));
                        model.current.insert(record, model.leases.len());
                        model.leases.push(ModelLease {
                            lease,
                            key: id,
                            scope,
                            sent_at,
                            deadline,
                            lock_until: sent_at + lock,
                            voided: false,
                            finished: false,
                        });
                    }
                    (Acquired::AlreadyApplied, Some(id)) => {
                        prop_assert!(model.applied.contains(&id));
                        model.stats.refused_already_applied += 1;
                        model.stats.accepted += 1;
                        if !ended {
                            model.acks.push((record, AckType::Accept, scope));
                        }
                    }
                    (Acquired::KeyInFlight, Some(id)) => {
                        prop_assert!(!model.applied.contains(&id));
                        prop_assert!(model.key_in_flight(id));
                        model.stats.refused_key_in_flight += 1;
                        model.stats.released += 1;
                        if !ended {
                            model.acks.push((record, AckType::Release, scope));
                        }
                    }
                    (refusal, None) => {
                        prop_assert!(false, "a keyless record refused: {:?}", refusal);
                    }
                }
            }
            Step::Advance(by) => clock.advance(ms(by)),
            Step::Finish { pick, outcome } => {
                if model.leases.is_empty() {
                    continue;
                }
                let index = pick.index(model.leases.len());
                let ack = guard.finished(&model.leases[index].lease, outcome, now);
                let ended = model.ended(model.leases[index].scope);
                let lease = &mut model.leases[index];
                let record = (lease.lease.tp().partition, lease.lease.offset());
                let first = !lease.finished;
                lease.finished = true;
                if !first {
                    prop_assert_eq!(ack, None, "finished before");
                    continue;
                }
                let applied = outcome == Outcome::Applied;
                if applied {
                    // Even under a voided lease or an ended session: the effect happened here.
                    if let Some(id) = lease.key {
                        model.applied.insert(id);
                    }
                }
                if ended {
                    // The broker released the record with its session: nothing is decided.
                    prop_assert_eq!(ack, None, "its session ended");
                    model.stats.applied_session_ended += u64::from(applied);
                    if !lease.voided {
                        lease.voided = true;
                        model.stats.voided += 1;
                        model.current.remove(&record);
                    }
                    continue;
                }
                if lease.voided {
                    prop_assert_eq!(ack, None, "voided");
                    model.stats.applied_after_expiry += u64::from(applied);
                    continue;
                }
                let ack = ack.ok_or_else(|| TestCaseError::fail("a live lease got no ack"))?;
                let current = now < lease.deadline;
                // The point of the guard: never ACCEPT once the lock may have ended.
                if ack == AckType::Accept {
                    prop_assert!(current && now < lease.lock_until);
                }
                if applied {
                    prop_assert_eq!(ack == AckType::Accept, current, "precise, not only safe");
                }
                if !current {
                    prop_assert_eq!(ack, AckType::Release);
                    model.stats.released_expired += 1;
                    model.stats.applied_after_expiry += u64::from(applied);
                }
                match ack {
                    AckType::Accept => model.stats.accepted += 1,
                    AckType::Reject => model.stats.rejected += 1,
                    _ => model.stats.released += 1,
                }
                model.acks.push((record, ack, lease.scope));
            }
            Step::SendRenewals => {
                for (tp, offset) in guard.due_for_renewal(now) {
                    let index = model.current[&(tp.partition, offset)];
                    let lease = &model.leases[index];
                    prop_assert!(!lease.finished && !lease.voided && now < lease.deadline);
                    prop_assert!(!model.ended(lease.scope), "renewing under an ended session");
                    prop_assert!(guard.renew_sent(&tp, offset));
                    model.renewals.push((index, now));
                }
            }
            Step::AnswerRenewal { pick, ok, lock } => {
                if model.renewals.is_empty() {
                    continue;
                }
                let (index, sent_at) = model.renewals.remove(pick.index(model.renewals.len()));
                let lock = ms(lock);
                let record = {
                    let lease = &model.leases[index].lease;
                    (lease.tp().clone(), lease.offset())
                };
                // The broker grants a renewal only while it still holds the lock.
                let ok = ok && sent_at < model.leases[index].lock_until;
                if ok {
                    guard.renewed(&record.0, record.1, sent_at, lock);
                    // The grant extends whichever acquisition holds the record now, when it was
                    // sent after that acquisition's request.
                    let deadline = model.margin_deadline(sent_at, lock);
                    if let Some(&holder) = model.current.get(&(record.0.partition, record.1)) {
                        let holder = &mut model.leases[holder];
                        if !holder.finished && sent_at >= holder.sent_at {
                            holder.deadline = holder.deadline.max(deadline);
                            holder.lock_until = holder.lock_until.max(sent_at + lock);
                        }
                    }
                } else {
                    guard.renew_failed(&record.0, record.1);
                }
            }
            Step::AnswerAck { pick, ok } => {
                if model.acks.is_empty() {
                    continue;
                }
                let ((partition, offset), ack, _) = model.acks.remove(pick.index(model.acks.len()));
                guard.ack_result(&tp(partition), offset, ack, ok);
            }
            Step::Expired => {
                // The guard sweeps ended sessions first.
                model.sweep();
                for (tp, offset) in guard.expired(now) {
                    let index = model.current.get(&(tp.partition, offset)).copied();
                    let index = index.ok_or_else(|| TestCaseError::fail("listed, not held"))?;
                    let lease = &model.leases[index];
                    prop_assert!(now >= lease.deadline && !model.ended(lease.scope));
                }
            }
            Step::Forget(partition) => {
                guard.forget_partition(&tp(partition));
                let records: Vec<_> = model
                    .current
                    .keys()
                    .filter(|(p, _)| *p == partition)
                    .copied()
                    .collect();
                for record in records {
                    model.void(record);
                }
                model.acks.retain(|((p, _), _, _)| *p != partition);
            }
            Step::EndSession(session) => {
                let index = model.sessions[session];
                prop_assert!(model.scopes[index].scope.end(), "the first end ends it");
                model.end(index);
                model.sessions[session] = model.new_session();
                model.partitions.retain(|(at, _), _| *at != session);
            }
            Step::EndPartition { session, partition } => {
                if let Some(index) = model.partitions.remove(&(session, partition)) {
                    prop_assert!(model.scopes[index].scope.end(), "the first end ends it");
                    model.end(index);
                }
            }
            Step::Sweep => {
                let running = model.sweep();
                prop_assert_eq!(guard.sweep_ended_sessions(), running);
            }
        }
        // After every step: a voided lease, or one whose session ended, is never current at
        // any instant, whatever happened since; every live lease reads what the model says;
        // the guard runs what the model runs, remembers the keys it applied, and counts what
        // the model counts.
        let now = clock.now();
        for lease in &model.leases {
            let ended = model.ended(lease.scope);
            if lease.voided || ended {
                let just_before = lease.deadline - Duration::from_nanos(1);
                for at in [lease.sent_at, just_before, now] {
                    prop_assert!(
                        !lease.lease.is_current_at(at),
                        "current at {:?} (voided {}, session ended {})",
                        at,
                        lease.voided,
                        ended
                    );
                }
                prop_assert_eq!(lease.lease.deadline(), None);
                prop_assert_eq!(lease.lease.time_left(), Duration::ZERO);
            } else if !lease.finished {
                prop_assert_eq!(lease.lease.deadline(), Some(lease.deadline));
                prop_assert_eq!(lease.lease.is_current_at(now), now < lease.deadline);
            }
        }
        for id in 0..KEYS {
            let remembered = guard.applied.contains(&IdempotencyKey::from(id));
            prop_assert_eq!(remembered, model.applied.contains(&id), "key {}", id);
        }
        let actual = guard.stats();
        let running = model
            .leases
            .iter()
            .filter(|lease| !lease.voided && !lease.finished)
            .count();
        let expected = LockStats {
            held: actual.held,
            running,
            ack_failures: actual.ack_failures,
            renewals: actual.renewals,
            renew_failures: actual.renew_failures,
            ..model.stats
        };
        prop_assert_eq!(actual, expected);
    }
    Ok(())
}

proptest! {
    #[test]
    fn no_accept_after_the_lock_may_have_ended_one_ack_each_voided_or_session_ended_never_current(
        steps in proptest::collection::vec(step(), 1..80)
    ) {
        check_sequence(steps)?;
    }
}

#[test]
fn a_suspend_of_the_machine_past_the_lock_makes_the_lease_stale() {
    // The broker's lock clock runs on while this machine is suspended; `Instant` does not. A
    // lease read on the boot clock sees the suspend as elapsed time.
    let suspender = crate::guard::Suspender::new();
    let clock = suspender.clock();
    let mut guard =
        LockGuard::with_clock(LockGuardConfig::default(), clock.clone()).expect("valid config");
    let sent_at = guard.now();
    let lease = run(guard.acquired(&tp(0), 7, 1, key(7), sent_at, LOCK));
    let waiting = run(guard.acquired(&tp(0), 8, 1, key(8), sent_at, LOCK));
    assert!(lease.is_current() && waiting.is_current());
    let instant_before = Instant::now();

    suspender.suspend(LOCK);

    assert!(
        Instant::now() < instant_before + LOCK,
        "Instant did not see the suspend"
    );
    assert!(!lease.is_current(), "the lease outlived the broker's lock");
    assert!(!waiting.is_current());
    assert_eq!(lease.time_left(), Duration::ZERO);
    // The guard, asked on its clock, agrees: nothing to renew, both leases ended, and an effect
    // whose finish was stamped after the suspend (as a finish stamps it: the lease's clock,
    // read after the handler returned) is not accepted.
    assert!(guard.due_for_renewal(guard.now()).is_empty());
    assert_eq!(guard.expired(guard.now()), vec![(tp(0), 7), (tp(0), 8)]);
    assert_eq!(
        guard.finished(&lease, Outcome::Applied, lease.now()),
        Some(AckType::Release)
    );
}

#[test]
fn a_lock_guard_made_as_the_share_consumer_makes_it_reads_the_clock_its_send_stamps_are_on() {
    // The share consumer's guard (`LockGuard::new`) and the fetch threads' send stamps
    // (`lease_now`) must read one clock: a deadline stamped on the boot clock and checked on
    // `Instant` ends late by every suspend since the process started.
    let guard = LockGuard::new(LockGuardConfig::default()).expect("valid config");
    assert!(Arc::ptr_eq(
        guard.time.clock(),
        &crate::guard::BootClock::shared()
    ));
}
