//! The whole share consumer driven in memory: `ShareConsumer` with its turns, its lock guard
//! (the lease rule), its acknowledgements and its close, over the in-memory share coordinator
//! (`testing::share`), which keeps a share group's broker rules (acquisition locks, delivery
//! counts, the delivery count limit, INVALID_RECORD_STATE for what a member no longer holds,
//! share sessions) on a manual clock. No broker, no sleep: time moves when a test moves it.
//!
//! Each test checks one rule and fails when it is broken: an accepted record never comes back; a
//! lease ends before the lock (by the safety margin) and a record held past it comes back with
//! its delivery count up; the close gives back at once what was acquired and not finished; the
//! delivery count limit archives; members split the partitions and a member that leaves gives its
//! records back; an acknowledgement that arrives after its lock is refused, counted, and never
//! taken as applied; a fenced member's leases end; a member not heard from past its session
//! loses its leases before their lock ends, and the record is applied once, by the member the
//! group gave it to; a renewal moves a running record's lease on;
//! a poll with no time to wait still fetches; the decoupled mode's workers apply each record once.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rebalance_guard::guard::AckType;
use rebalance_guard::testing::share::{RecordState, ShareCoordinator, ShareGroupSettings};
use rebalance_guard::testing::InMemoryLog;
use rebalance_guard::wire::{KafkaCode, ProduceRecord};
use rebalance_guard::{IdempotencyKey, ShareConfig, ShareDelivery, ShareFailure, TopicPartition};

const TOPIC: &str = "payments";
const LOCK: Duration = Duration::from_secs(30);
/// A poll's wait for the first record: the coordinator answers at once, so this bounds only how
/// long an empty poll turns (real time; the group's clock stands still meanwhile).
const POLL: Duration = Duration::from_millis(2);

fn config(group: &str, extra: &[(&str, &str)]) -> ShareConfig {
    let _ = env_logger::builder().is_test(true).try_init();
    let mut builder = ShareConfig::builder()
        .bootstrap_servers(["127.0.0.1:9"])
        .group_id(group)
        .set("fetch.max.wait.ms", "1");
    for (name, value) in extra {
        builder = builder.set(name, value);
    }
    builder.build().expect("valid test configuration")
}

/// A log with `partitions` partitions of `records` records each (keys `p<partition>-<offset>`),
/// and a share group over it.
fn group(
    partitions: i32,
    records: usize,
    settings: ShareGroupSettings,
) -> (InMemoryLog, ShareCoordinator) {
    let log = InMemoryLog::new();
    log.create_topic(TOPIC, partitions);
    for partition in 0..partitions {
        for offset in 0..records {
            log.produce(
                TOPIC,
                partition,
                format!("p{partition}-{offset}"),
                "amount=10",
            );
        }
    }
    let coordinator = ShareCoordinator::new(&log, settings);
    (log, coordinator)
}

fn settings() -> ShareGroupSettings {
    ShareGroupSettings {
        lock_duration: LOCK,
        ..ShareGroupSettings::default()
    }
}

fn tp(partition: i32) -> TopicPartition {
    TopicPartition::new(TOPIC, partition)
}

/// (partition, offset, delivery count) of each delivery.
fn seen(deliveries: &[ShareDelivery]) -> Vec<(i32, i64, i16)> {
    deliveries
        .iter()
        .map(|d| {
            (
                d.record().partition,
                d.record().offset,
                d.context().delivery_count(),
            )
        })
        .collect()
}

#[test]
fn an_applied_and_acknowledged_record_is_not_delivered_again() {
    let (_log, coordinator) = group(1, 3, settings());
    let mut consumer = coordinator
        .consumer(config("accepted", &[]), &[TOPIC])
        .expect("consumer");
    let batch = consumer.poll(POLL).expect("poll");
    assert_eq!(seen(&batch), vec![(0, 0, 1), (0, 1, 1), (0, 2, 1)]);
    for delivery in batch {
        assert!(delivery.is_current());
        delivery.applied();
    }
    // The next poll acknowledges before it fetches: nothing is left to acquire.
    assert!(consumer.poll(POLL).expect("poll").is_empty());
    for offset in 0..3 {
        let record = coordinator.record(&tp(0), offset).expect("delivered");
        assert_eq!(record.state, RecordState::Acknowledged, "offset {offset}");
    }
    // Long after every lock would have ended, still nothing comes back.
    coordinator.advance(LOCK * 3);
    assert!(consumer.poll(POLL).expect("poll").is_empty());
    let stats = coordinator.stats();
    assert_eq!((stats.delivered, stats.accepted, stats.refused), (3, 3, 0));
    assert_eq!(stats.lock_expiries, 0);
    let locks = consumer.stats().locks;
    assert_eq!(locks.accepted, 3);
    assert_eq!(locks.applied_after_expiry, 0);
    consumer.close().expect("close");
}

#[test]
fn a_record_held_past_its_lease_reads_stale_is_released_and_comes_back_with_delivery_count_2() {
    let (_log, coordinator) = group(1, 1, settings());
    let mut consumer = coordinator
        .consumer(config("stale", &[("share.lock.renew", "false")]), &[TOPIC])
        .expect("consumer");
    let mut batch = consumer.poll(POLL).expect("poll");
    assert_eq!(seen(&batch), vec![(0, 0, 1)]);
    let held = batch.remove(0);
    // The lease ends a safety margin (a tenth of the lock, at least a second) before the lock.
    coordinator.advance(LOCK - Duration::from_secs(4));
    assert!(held.is_current(), "26 s into a 30 s lock: the lease holds");
    coordinator.advance(Duration::from_secs(2));
    assert!(
        !held.is_current(),
        "28 s into a 30 s lock: inside the margin, the broker's lock may already have ended"
    );
    // The worker applies anyway (it did not ask in time): never accepted, released instead.
    held.applied();
    let again = consumer.poll(POLL).expect("poll");
    assert_eq!(
        seen(&again),
        vec![(0, 0, 2)],
        "released, then delivered again"
    );
    let locks = consumer.stats().locks;
    assert_eq!(locks.accepted, 0);
    assert_eq!(locks.applied_after_expiry, 1);
    assert_eq!(locks.released_expired, 1);
    // The lock still held when the RELEASE arrived, so the broker took it.
    assert_eq!(coordinator.stats().released, 1);
    assert_eq!(coordinator.stats().refused, 0);
    for delivery in again {
        assert!(delivery.is_current());
        delivery.applied();
    }
    assert!(consumer.poll(POLL).expect("poll").is_empty());
    assert_eq!(
        coordinator.record(&tp(0), 0).map(|r| r.state),
        Some(RecordState::Acknowledged)
    );
    consumer.close().expect("close");
}

#[test]
fn the_close_releases_what_was_acquired_and_not_finished_at_once() {
    let (log, coordinator) = group(1, 0, settings());
    let five: Vec<ProduceRecord> = (0..5)
        .map(|i| ProduceRecord {
            key: Some(format!("order-{i}").into()),
            value: Some("amount=10".into()),
            ..ProduceRecord::default()
        })
        .collect();
    log.produce_batch(&tp(0), &five);
    let batches = [
        ("max.poll.records", "2"),
        ("share.acquire.mode", "batch_optimized"),
    ];
    let mut first = coordinator
        .consumer(config("close", &batches), &[TOPIC])
        .expect("consumer");
    // Acquiring whole batches, one fetch takes all five; two are handed out, three wait in the
    // buffer.
    let mut batch = first.poll(POLL).expect("poll");
    assert_eq!(seen(&batch), vec![(0, 0, 1), (0, 1, 1)]);
    assert_eq!(first.stats().buffered, 3);
    let unfinished = batch.remove(1);
    batch.remove(0).applied();
    first.close().expect("close");
    let stats = coordinator.stats();
    assert_eq!(stats.accepted, 1);
    assert_eq!(
        stats.released, 3,
        "the buffered records, released by the consumer"
    );
    assert_eq!(
        stats.released_with_session, 1,
        "the one handed out and never finished, released with the share session"
    );
    assert!(
        !unfinished.is_current(),
        "its share session ended: another member may hold it now"
    );
    // Without the clock moving, another member gets every record not accepted.
    let mut second = coordinator
        .consumer(config("close", &[]), &[TOPIC])
        .expect("consumer");
    let again = second.poll(POLL).expect("poll");
    assert_eq!(
        seen(&again),
        vec![(0, 1, 2), (0, 2, 2), (0, 3, 2), (0, 4, 2)]
    );
    // The late finish of the first member's delivery acknowledges nothing.
    unfinished.applied();
    drop(again);
    second.close().expect("close");
    assert_eq!(coordinator.stats().accepted, 1);
}

#[test]
fn released_at_the_delivery_count_limit_a_record_is_archived() {
    let limited = ShareGroupSettings {
        delivery_count_limit: 3,
        ..settings()
    };
    let (_log, coordinator) = group(1, 1, limited);
    let mut consumer = coordinator
        .consumer(config("limit", &[("processing.retries", "10")]), &[TOPIC])
        .expect("consumer");
    for delivery in 1..=3 {
        let batch = consumer.poll(POLL).expect("poll");
        assert_eq!(seen(&batch), vec![(0, 0, delivery)]);
        for d in batch {
            d.failed(&ShareFailure::retryable(std::io::Error::other("down")));
        }
    }
    // The third release rides on the ShareFetch that poll sends ahead, which the coordinator
    // answers on its own time: poll (nothing may come back) until it was applied, 5 s at most.
    let deadline = Instant::now() + Duration::from_secs(5);
    let record = loop {
        assert!(consumer.poll(POLL).expect("poll").is_empty());
        let record = coordinator.record(&tp(0), 0).expect("delivered");
        if record.state == RecordState::Archived || Instant::now() >= deadline {
            break record;
        }
    };
    assert_eq!(record.state, RecordState::Archived);
    assert_eq!(record.delivery_count, 3);
    let stats = coordinator.stats();
    assert_eq!((stats.released, stats.archived, stats.delivered), (2, 1, 3));
    assert_eq!(consumer.stats().locks.released, 3);
    consumer.close().expect("close");
}

#[test]
fn a_lock_that_runs_out_at_the_delivery_count_limit_archives_its_record() {
    let limited = ShareGroupSettings {
        delivery_count_limit: 2,
        ..settings()
    };
    let (_log, coordinator) = group(1, 1, limited);
    let mut consumer = coordinator
        .consumer(config("expiry", &[("share.lock.renew", "false")]), &[TOPIC])
        .expect("consumer");
    let mut held = consumer.poll(POLL).expect("poll");
    assert_eq!(seen(&held), vec![(0, 0, 1)]);
    coordinator.advance(LOCK);
    let second = consumer.poll(POLL).expect("poll");
    assert_eq!(
        seen(&second),
        vec![(0, 0, 2)],
        "the lock ran out: delivered again"
    );
    assert!(
        !held[0].is_current(),
        "the earlier delivery's lease is voided by the new one"
    );
    held.extend(second);
    coordinator.advance(LOCK);
    assert!(consumer.poll(POLL).expect("poll").is_empty());
    let record = coordinator.record(&tp(0), 0).expect("delivered");
    assert_eq!(record.state, RecordState::Archived);
    let stats = coordinator.stats();
    assert_eq!((stats.lock_expiries, stats.archived_on_expiry), (2, 1));
    drop(held);
    assert!(consumer.poll(POLL).expect("poll").is_empty());
    assert_eq!(consumer.stats().locks.accepted, 0);
    consumer.close().expect("close");
}

#[test]
fn two_members_split_the_partitions_and_a_member_that_leaves_gives_its_records_back() {
    let (_log, coordinator) = group(2, 2, settings());
    let mut a = coordinator
        .consumer(config("split", &[]), &[TOPIC])
        .expect("consumer");
    let mut b = coordinator
        .consumer(config("split", &[]), &[TOPIC])
        .expect("consumer");
    let from_a = a.poll(POLL).expect("poll");
    let from_b = b.poll(POLL).expect("poll");
    let a_parts: BTreeSet<i32> = from_a.iter().map(|d| d.record().partition).collect();
    let b_parts: BTreeSet<i32> = from_b.iter().map(|d| d.record().partition).collect();
    assert_eq!((a_parts.len(), b_parts.len()), (1, 1));
    assert!(a_parts.is_disjoint(&b_parts), "{a_parts:?} and {b_parts:?}");
    assert_eq!((from_a.len(), from_b.len()), (2, 2));
    assert_eq!(a.assignment().len(), 1);
    // `a` leaves while its handler still holds its records: they are released, and its leases
    // read stale at once.
    a.close().expect("close");
    assert!(from_a.iter().all(|d| !d.is_current()));
    assert_eq!(coordinator.stats().released_with_session, 2);
    assert_eq!(coordinator.members().len(), 1);
    let given_back = b.poll(POLL).expect("poll");
    let a_partition = *a_parts.iter().next().expect("one partition");
    assert_eq!(
        seen(&given_back),
        vec![(a_partition, 0, 2), (a_partition, 1, 2)],
        "the remaining member takes over the partition and its records, delivered again"
    );
    assert_eq!(b.assignment().len(), 2);
    for d in from_b.into_iter().chain(given_back) {
        d.applied();
    }
    // The leaver's late finishes acknowledge nothing.
    for d in from_a {
        d.applied();
    }
    assert!(b.poll(POLL).expect("poll").is_empty());
    assert_eq!(coordinator.stats().accepted, 4);
    assert_eq!(coordinator.stats().refused, 0);
    b.close().expect("close");
}

#[test]
fn an_acknowledgement_after_its_lock_ended_is_refused_counted_and_never_taken_as_applied() {
    let (_log, coordinator) = group(1, 1, settings());
    let failures: Arc<Mutex<Vec<(i64, AckType, String)>>> = Arc::default();
    let hook = failures.clone();
    let mut consumer = coordinator
        .consumer(config("late", &[("share.lock.renew", "false")]), &[TOPIC])
        .expect("consumer")
        .with_idempotency_key(|record| record.key.as_deref().map(IdempotencyKey::from))
        .on_ack_failure(move |_tp, offset, kind, why| {
            hook.lock()
                .expect("hook")
                .push((offset, kind, why.to_string()))
        });
    let mut batch = consumer.poll(POLL).expect("poll");
    let delivery = batch.remove(0);
    assert!(delivery.is_current());
    // Applied inside the lease: the decision is ACCEPT, made at this instant.
    delivery.applied();
    // The poll thread gets to it only after the lock ended.
    coordinator.advance(LOCK + Duration::from_secs(1));
    let again = consumer.poll(POLL).expect("poll");
    assert!(
        again.is_empty(),
        "redelivered, but its key was applied: acknowledged without running again"
    );
    // That ACCEPT rides on the next request: a poll sends it whatever its window let the
    // last one do (a poll's wait is real time, the group's clock stands still).
    assert!(consumer.poll(POLL).expect("poll").is_empty());
    let failed = failures.lock().expect("failures").clone();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!((failed[0].0, failed[0].1), (0, AckType::Accept));
    let refused = KafkaCode::INVALID_RECORD_STATE.to_string();
    assert!(failed[0].2.contains(&refused), "{failed:?}");
    let locks = consumer.stats().locks;
    assert_eq!(locks.ack_failures.accept, 1);
    assert_eq!(locks.refused_already_applied, 1);
    let stats = coordinator.stats();
    assert_eq!(stats.refused, 1, "the late ACCEPT");
    assert_eq!(stats.delivered, 2);
    assert_eq!(
        stats.accepted, 1,
        "only the second delivery's ACCEPT was taken"
    );
    let record = coordinator.record(&tp(0), 0).expect("delivered");
    assert_eq!(
        (record.state, record.delivery_count),
        (RecordState::Acknowledged, 2)
    );
    consumer.close().expect("close");
}

#[test]
fn a_record_still_running_at_half_its_lock_is_renewed_and_its_lease_moves_on() {
    let (_log, coordinator) = group(1, 1, settings());
    let mut consumer = coordinator
        .consumer(config("renew", &[]), &[TOPIC])
        .expect("consumer");
    let mut batch = consumer.poll(POLL).expect("poll");
    let running = batch.remove(0);
    let first_deadline = running.context().deadline().expect("deadline");
    coordinator.advance(LOCK / 2 + Duration::from_secs(1));
    // A turn with the record still running renews it.
    assert!(consumer.poll(POLL).expect("poll").is_empty());
    assert_eq!(coordinator.stats().renewed, 1);
    assert_eq!(consumer.stats().locks.renewals, 1);
    let renewed = running.context().deadline().expect("deadline");
    assert!(
        renewed > first_deadline,
        "{renewed:?} after {first_deadline:?}"
    );
    // Past the first lock's end, the lease (and the broker's lock) still hold.
    coordinator.advance(LOCK / 2 + Duration::from_secs(1));
    assert!(running.is_current());
    running.applied();
    assert!(consumer.poll(POLL).expect("poll").is_empty());
    assert_eq!(coordinator.stats().accepted, 1);
    assert_eq!(coordinator.stats().lock_expiries, 0);
    consumer.close().expect("close");
}

#[test]
fn a_fenced_member_sees_its_leases_end_and_its_records_come_back() {
    let fenced_soon = ShareGroupSettings {
        lock_duration: Duration::from_secs(60),
        session_timeout: Duration::from_secs(10),
        ..ShareGroupSettings::default()
    };
    let (_log, coordinator) = group(1, 1, fenced_soon);
    let mut consumer = coordinator
        .consumer(config("fenced", &[("share.lock.renew", "false")]), &[TOPIC])
        .expect("consumer");
    let mut batch = consumer.poll(POLL).expect("poll");
    let held = batch.remove(0);
    // No heartbeat for the session timeout (the poll thread did not turn): the group removes
    // the member and releases its records, well inside their lock.
    coordinator.advance(Duration::from_secs(11));
    let again = consumer.poll(POLL).expect("poll");
    assert_eq!(coordinator.stats().fenced, 1);
    assert_eq!(coordinator.stats().released_with_session, 1);
    assert!(
        !held.is_current(),
        "the fence ended the share session, whatever the lock had left"
    );
    assert_eq!(
        seen(&again),
        vec![(0, 0, 2)],
        "rejoined, and delivered again"
    );
    held.applied();
    for d in again {
        d.applied();
    }
    // The ACCEPT leaves with the next poll and is counted when its answer arrives, which a
    // loaded machine may deliver after that poll returned: poll until it is (5 s at most).
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        assert!(consumer.poll(POLL).expect("poll").is_empty());
        if consumer.stats().locks.accepted > 0 || std::time::Instant::now() >= deadline {
            break;
        }
    }
    let locks = consumer.stats().locks;
    assert_eq!(
        locks.applied_session_ended, 1,
        "counted, never acknowledged"
    );
    assert_eq!(locks.accepted, 1, "{locks:?}");
    assert_eq!(coordinator.stats().accepted, 1);
    assert_eq!(coordinator.stats().refused, 0);
    consumer.close().expect("close");
}

/// A handler that applies its record's effect only while its lease is current, as the share
/// consumer's handlers must; true when it applied it.
fn apply_if_current(
    delivery: ShareDelivery,
    effects: &mut Vec<(String, i32, i64)>,
    who: &str,
) -> bool {
    if delivery.is_current() {
        let record = delivery.record();
        effects.push((who.to_string(), record.partition, record.offset));
        delivery.applied();
        true
    } else {
        delivery.skipped();
        false
    }
}

#[test]
fn a_member_not_heard_from_past_its_session_loses_its_leases_before_the_lock_and_the_other_member_applies_once(
) {
    // The lock outlasts the session timeout (Kafka allows a lock of up to an hour): only the
    // session bound can end the stalled member's lease before the group gives its record away.
    let long_lock = ShareGroupSettings {
        lock_duration: Duration::from_secs(120),
        session_timeout: Duration::from_secs(10),
        ..ShareGroupSettings::default()
    };
    let (_log, coordinator) = group(1, 1, long_lock);
    let mut stalled = coordinator
        .consumer(config("lapse", &[("share.lock.renew", "false")]), &[TOPIC])
        .expect("consumer");
    let mut held = stalled.poll(POLL).expect("poll");
    assert_eq!(seen(&held), vec![(0, 0, 1)]);
    let held = held.remove(0);
    let mut other = coordinator
        .consumer(config("lapse", &[("share.lock.renew", "false")]), &[TOPIC])
        .expect("consumer");
    assert!(
        other.poll(POLL).expect("poll").is_empty(),
        "locked by the first member"
    );
    // The first member's process stalls (no turn, no heartbeat); the other keeps heartbeating.
    coordinator.advance(Duration::from_secs(6));
    assert!(other.poll(POLL).expect("poll").is_empty());
    assert!(held.is_current(), "6 s of silence: inside the session");
    coordinator.advance(Duration::from_secs(5));
    // The group fences the silent member and releases its record, 11 s into a 120 s lock; the
    // other member acquires it.
    let taken_over = other.poll(POLL).expect("poll");
    assert_eq!(coordinator.stats().fenced, 1);
    assert_eq!(coordinator.stats().released_with_session, 1);
    assert_eq!(seen(&taken_over), vec![(0, 0, 2)]);
    // The stalled handler resumes before its poll thread learned of the fence: its lock has
    // 109 s left, but its session bound passed, so its lease no longer holds.
    assert!(
        !held.is_current(),
        "past the session bound the group may have given the record away"
    );
    assert_eq!(held.context().deadline(), None, "ended, not merely due");
    let mut effects = Vec::new();
    assert!(!apply_if_current(held, &mut effects, "stalled"));
    for delivery in taken_over {
        assert!(apply_if_current(delivery, &mut effects, "other"));
    }
    assert!(other.poll(POLL).expect("poll").is_empty());
    // The stalled member turns again: it learns of the fence and rejoins; nothing comes back.
    assert!(stalled.poll(POLL).expect("poll").is_empty());
    assert_eq!(
        effects,
        vec![("other".to_string(), 0, 0)],
        "applied once, by the other member"
    );
    let locks = stalled.stats().locks;
    assert_eq!(
        (
            locks.released_expired,
            locks.released_session_lapsed,
            locks.accepted
        ),
        (1, 1, 0),
        "the refused effect is counted as a release for a lapsed session"
    );
    assert_eq!(locks.applied_after_expiry, 0);
    let stats = coordinator.stats();
    assert_eq!((stats.accepted, stats.delivered), (1, 2));
    assert_eq!(
        coordinator
            .record(&tp(0), 0)
            .map(|r| (r.state, r.delivery_count)),
        Some((RecordState::Acknowledged, 2))
    );
    stalled.close().expect("close");
    other.close().expect("close");
}

#[test]
fn a_poll_with_no_time_to_wait_still_fetches_once_and_run_works_with_fetch_max_wait_zero() {
    let (_log, coordinator) = group(1, 2, settings());
    let mut consumer = coordinator
        .consumer(config("no-wait", &[("fetch.max.wait.ms", "0")]), &[TOPIC])
        .expect("consumer");
    let batch = consumer.poll(Duration::ZERO).expect("poll");
    assert_eq!(seen(&batch), vec![(0, 0, 1), (0, 1, 1)]);
    drop(batch);
    // `run` polls with `fetch.max.wait.ms` as its wait: 0 must not make it spin without
    // fetching.
    let stop = std::sync::atomic::AtomicBool::new(false);
    let mut handled = Vec::new();
    consumer
        .run(&stop, |record, ctx| {
            handled.push((record.offset, ctx.delivery_count()));
            if handled.len() == 2 {
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            Ok(())
        })
        .expect("run");
    assert_eq!(handled, vec![(0, 2), (1, 2)]);
    consumer.close().expect("close");
    assert_eq!(coordinator.stats().accepted, 2);
}

#[test]
fn workers_apply_every_record_once_and_each_is_accepted() {
    let (_log, coordinator) = group(3, 10, settings());
    let mut consumer = coordinator
        .consumer(config("workers", &[]), &[TOPIC])
        .expect("consumer");
    let stop = std::sync::atomic::AtomicBool::new(false);
    let applied: Mutex<Vec<(i32, i64, i16)>> = Mutex::default();
    consumer
        .run_with_workers(&stop, 4, |record, ctx| {
            if !ctx.is_current() {
                return Ok(());
            }
            let mut applied = applied.lock().expect("applied");
            applied.push((record.partition, record.offset, ctx.delivery_count()));
            if applied.len() == 30 {
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            Ok(())
        })
        .expect("run");
    consumer.close().expect("close");
    let mut applied = applied.into_inner().expect("applied");
    applied.sort();
    let expected: Vec<(i32, i64, i16)> = (0..3)
        .flat_map(|p| (0..10).map(move |o| (p, o, 1)))
        .collect();
    assert_eq!(applied, expected, "each record once, first delivery");
    let stats = coordinator.stats();
    assert_eq!(
        (stats.accepted, stats.delivered, stats.refused),
        (30, 30, 0)
    );
}

#[test]
fn poll_acquires_the_next_records_ahead_and_releases_unseen_those_whose_lease_ran_out_meanwhile() {
    let (_log, coordinator) = group(1, 6, settings());
    let mut consumer = coordinator
        .consumer(
            config(
                "ahead",
                &[("max.poll.records", "2"), ("share.lock.renew", "false")],
            ),
            &[TOPIC],
        )
        .expect("consumer");
    let first = consumer.poll(POLL).expect("poll");
    assert_eq!(seen(&first), vec![(0, 0, 1), (0, 1, 1)]);
    assert_eq!(
        coordinator.record(&tp(0), 2),
        None,
        "the first poll knows nothing of the application's pace: nothing acquired ahead"
    );
    first.into_iter().for_each(ShareDelivery::applied);
    let second = consumer.poll(POLL).expect("poll");
    assert_eq!(seen(&second), vec![(0, 2, 1), (0, 3, 1)]);
    // The application came back at once: the next records were acquired as the poll returned,
    // while these two are worked on.
    for offset in 4..6 {
        let state = coordinator.record(&tp(0), offset).map(|r| r.state);
        assert!(
            matches!(state, Some(RecordState::Acquired { .. })),
            "offset {offset} acquired ahead: {state:?}"
        );
    }
    second.into_iter().for_each(ShareDelivery::applied);
    // The application stalls past the lease of what was acquired ahead (a tenth of the lock
    // before it ends): those records are released, never handed out, and come back.
    coordinator.advance(LOCK - Duration::from_secs(2));
    let third = consumer.poll(POLL).expect("poll");
    assert_eq!(
        seen(&third),
        vec![(0, 4, 2), (0, 5, 2)],
        "delivered again, after a release"
    );
    assert_eq!(consumer.stats().expired_in_buffer, 2);
    third.into_iter().for_each(ShareDelivery::applied);
    assert!(consumer.poll(POLL).expect("poll").is_empty());
    for offset in 0..6 {
        assert_eq!(
            coordinator.record(&tp(0), offset).map(|r| r.state),
            Some(RecordState::Acknowledged),
            "offset {offset}"
        );
    }
    let stats = coordinator.stats();
    // Offsets 2 and 3 were applied inside their lease, and their ACCEPTs rode on a request
    // sent before their lock ended; offsets 4 and 5 were never accepted in their first
    // delivery.
    assert_eq!((stats.accepted, stats.released, stats.refused), (6, 2, 0));
    let locks = consumer.stats().locks;
    assert_eq!(locks.accepted, 6);
    assert_eq!(locks.applied_after_expiry, 0);
    consumer.close().expect("close");
}

#[test]
fn an_application_slower_than_a_quarter_of_the_lock_gets_nothing_acquired_ahead() {
    let (_log, coordinator) = group(1, 6, settings());
    let mut consumer = coordinator
        .consumer(
            config(
                "behind",
                &[("max.poll.records", "2"), ("share.lock.renew", "false")],
            ),
            &[TOPIC],
        )
        .expect("consumer");
    let first = consumer.poll(POLL).expect("poll");
    coordinator.advance(LOCK / 4 + Duration::from_secs(1));
    first.into_iter().for_each(ShareDelivery::applied);
    let second = consumer.poll(POLL).expect("poll");
    assert_eq!(seen(&second), vec![(0, 2, 1), (0, 3, 1)]);
    assert_eq!(
        coordinator.record(&tp(0), 4),
        None,
        "a record acquired now would wait a quarter of its lock before its handler runs"
    );
    second.into_iter().for_each(ShareDelivery::applied);
    let third = consumer.poll(POLL).expect("poll");
    assert_eq!(seen(&third), vec![(0, 4, 1), (0, 5, 1)]);
    third.into_iter().for_each(ShareDelivery::applied);
    assert!(consumer.poll(POLL).expect("poll").is_empty());
    assert_eq!(coordinator.stats().accepted, 6);
    assert_eq!(consumer.stats().expired_in_buffer, 0);
    consumer.close().expect("close");
}

#[test]
fn poll_hands_out_whole_acquired_ranges_when_they_fit_and_splits_only_one_larger_than_a_poll() {
    let (log, coordinator) = group(2, 0, settings());
    let batch = |n: usize| -> Vec<ProduceRecord> {
        (0..n)
            .map(|i| ProduceRecord {
                key: Some(format!("order-{i}").into()),
                value: Some("amount=10".into()),
                ..ProduceRecord::default()
            })
            .collect()
    };
    log.produce_batch(&tp(0), &batch(3));
    log.produce_batch(&tp(1), &batch(3));
    let whole = [
        ("max.poll.records", "4"),
        ("share.acquire.mode", "batch_optimized"),
    ];
    let mut consumer = coordinator
        .consumer(config("ranges", &whole), &[TOPIC])
        .expect("consumer");
    // One fetch acquires both batches whole (3 of partition 0 reach no limit of 4, partition 1's
    // batch goes past it): two ranges of three. The poll takes the first whole; the second does
    // not fit in the one place left and waits, so that each range is acknowledged whole.
    let first = consumer.poll(POLL).expect("poll");
    assert_eq!(seen(&first), vec![(0, 0, 1), (0, 1, 1), (0, 2, 1)]);
    assert_eq!(consumer.stats().buffered, 3);
    first.into_iter().for_each(ShareDelivery::applied);
    let second = consumer.poll(POLL).expect("poll");
    assert_eq!(seen(&second), vec![(1, 0, 1), (1, 1, 1), (1, 2, 1)]);
    second.into_iter().for_each(ShareDelivery::applied);
    // A range larger than a poll is split: a poll never comes back empty for it.
    log.produce_batch(&tp(0), &batch(6));
    let third = consumer.poll(POLL).expect("poll");
    assert_eq!(seen(&third).len(), 4, "{:?}", seen(&third));
    third.into_iter().for_each(ShareDelivery::applied);
    let fourth = consumer.poll(POLL).expect("poll");
    assert_eq!(seen(&fourth), vec![(0, 7, 1), (0, 8, 1)]);
    fourth.into_iter().for_each(ShareDelivery::applied);
    assert!(consumer.poll(POLL).expect("poll").is_empty());
    assert_eq!(coordinator.stats().accepted, 12);
    consumer.close().expect("close");
}
