//! The coordinator's own rules, driven through the seams the share consumer holds, with no
//! consumer in between: what Kafka's broker would answer each request.

use std::collections::BTreeSet;
use std::time::Duration;

use super::{RecordState, ShareCoordinator, ShareGroupSettings};
use crate::guard::AckType;
use crate::share::{ShareMember, ShareSource};
use crate::testing::InMemoryLog;
use crate::wire::share::{AckError, ShareAck, ShareFetchRound};
use crate::wire::{KafkaCode, ProduceRecord};
use crate::TopicPartition;

fn tp(partition: i32) -> TopicPartition {
    TopicPartition::new("orders", partition)
}

fn log(partitions: i32, records: i32) -> InMemoryLog {
    let log = InMemoryLog::new();
    log.create_topic("orders", partitions);
    for p in 0..partitions {
        for r in 0..records {
            log.produce("orders", p, format!("k{r}"), "v");
        }
    }
    log
}

/// The acknowledgement `kind` of the first batch's record at `offset`.
fn ack(round: &ShareFetchRound, offset: i64, kind: AckType) -> ShareAck {
    round.batches[0].ack(offset, kind)
}

/// One member's sides, assigned and fetching.
fn member(
    coordinator: &ShareCoordinator,
) -> (super::InMemoryShareMember, super::InMemoryShareSource) {
    let (member, mut source) = coordinator.join(&["orders"]);
    source.assign(&member.assignment().partitions);
    (member, source)
}

fn offsets(round: &ShareFetchRound) -> Vec<(i32, i64, u16)> {
    round
        .batches
        .iter()
        .flat_map(|b| {
            b.records
                .iter()
                .map(|r| (r.record.partition, r.record.offset, r.delivery_count))
        })
        .collect()
}

#[test]
fn more_members_than_partitions_share_them_and_fewer_split_them() {
    let coordinator = ShareCoordinator::new(&log(2, 0), ShareGroupSettings::default());
    let (a, _) = coordinator.join(&["orders"]);
    assert_eq!(a.assignment().partitions.len(), 2);
    let (b, _) = coordinator.join(&["orders"]);
    let (pa, pb) = (a.assignment().partitions, b.assignment().partitions);
    assert_eq!((pa.len(), pb.len()), (1, 1));
    assert!(pa.is_disjoint(&pb));
    let (c, _) = coordinator.join(&["orders"]);
    let all: BTreeSet<_> = [&a, &b, &c]
        .iter()
        .flat_map(|m| m.assignment().partitions)
        .collect();
    assert_eq!(all.len(), 2, "every partition has a member");
    assert_eq!(c.assignment().partitions.len(), 1);
    Box::new(c).leave(Duration::ZERO).expect("leave");
    assert_eq!(coordinator.members().len(), 2);
}

#[test]
fn only_the_member_holding_a_lock_may_acknowledge_and_only_while_it_holds() {
    let settings = ShareGroupSettings::default();
    let lock = settings.lock_duration;
    let coordinator = ShareCoordinator::new(&log(1, 3), settings);
    let (_a, mut source_a) = member(&coordinator);
    let round = source_a.fetch().expect("fetch");
    assert_eq!(offsets(&round), vec![(0, 0, 1), (0, 1, 1), (0, 2, 1)]);
    // Another member names a record it never acquired.
    let (_b, mut source_b) = member(&coordinator);
    source_b.acknowledge(vec![ack(&round, 0, AckType::Accept)]);
    let results = source_b.send_acks_now();
    assert_eq!(results.len(), 1);
    assert!(
        matches!(&results[0].outcome, Err(AckError::SessionEnded)),
        "its session never acquired it: dropped unsent, {results:?}"
    );
    assert_eq!(
        coordinator.acknowledge("member-2", &tp(0), 0, AckType::Accept),
        Err(KafkaCode::INVALID_RECORD_STATE)
    );
    // The holder: ACCEPT, REJECT, then (after its lock ended) RELEASE refused.
    source_a.acknowledge(vec![
        ack(&round, 0, AckType::Accept),
        ack(&round, 1, AckType::Reject),
    ]);
    assert!(source_a.send_acks_now().iter().all(|r| r.outcome.is_ok()));
    coordinator.advance(lock);
    source_a.acknowledge(vec![ack(&round, 2, AckType::Release)]);
    let late = source_a.send_acks_now();
    assert_eq!(
        late[0].outcome,
        Err(AckError::Kafka(KafkaCode::INVALID_RECORD_STATE))
    );
    let state = |offset| coordinator.record(&tp(0), offset).map(|r| r.state);
    assert_eq!(state(0), Some(RecordState::Acknowledged));
    assert_eq!(state(1), Some(RecordState::Archived));
    assert_eq!(state(2), Some(RecordState::Available));
    assert_eq!(
        (
            coordinator.stats().refused,
            coordinator.stats().lock_expiries
        ),
        (2, 1)
    );
}

#[test]
fn a_group_that_starts_at_the_log_end_delivers_only_what_comes_after() {
    let records = log(1, 2);
    let settings = ShareGroupSettings {
        from_earliest: false,
        ..ShareGroupSettings::default()
    };
    let coordinator = ShareCoordinator::new(&records, settings);
    let (_a, mut source) = member(&coordinator);
    assert!(source.fetch().expect("fetch").batches.is_empty());
    records.produce("orders", 0, "k", "v");
    assert_eq!(
        offsets(&source.fetch().expect("fetch")),
        vec![(0, 2, 1)],
        "one store: the record produced after the start"
    );
}

#[test]
fn renew_restarts_the_lock_from_now_for_its_holder_only() {
    let settings = ShareGroupSettings::default();
    let lock = settings.lock_duration;
    let coordinator = ShareCoordinator::new(&log(1, 1), settings);
    let (_a, mut source) = member(&coordinator);
    source.fetch().expect("fetch");
    coordinator.advance(lock / 2);
    let renewed = source.renew(&[(tp(0), 0)], Duration::ZERO);
    assert_eq!(renewed.lock_duration, Some(lock));
    assert!(renewed.results.iter().all(|r| r.outcome.is_ok()));
    coordinator.advance(lock / 2 + Duration::from_secs(1));
    assert!(matches!(
        coordinator.record(&tp(0), 0).map(|r| r.state),
        Some(RecordState::Acquired { .. })
    ));
    coordinator.advance(lock);
    assert_eq!(
        coordinator.record(&tp(0), 0).map(|r| r.state),
        Some(RecordState::Available)
    );
    let refused = source.renew(&[(tp(0), 0)], Duration::ZERO);
    assert_eq!(refused.lock_duration, None);
}

#[test]
fn record_limit_acquires_at_most_max_records_and_batch_optimized_finishes_the_batch() {
    let records = InMemoryLog::new();
    records.create_topic("orders", 2);
    for partition in 0..2 {
        let batch: Vec<ProduceRecord> = (0..3)
            .map(|i| ProduceRecord {
                value: Some(format!("v{i}").into()),
                ..ProduceRecord::default()
            })
            .collect();
        records.produce_batch(&tp(partition), &batch);
    }
    let coordinator = ShareCoordinator::new(&records, ShareGroupSettings::default());
    let (_a, mut limited) = member(&coordinator);
    limited.set_max_records(2);
    assert_eq!(
        offsets(&limited.fetch().expect("fetch")),
        vec![(0, 0, 1), (0, 1, 1)],
        "MaxRecords counts the whole request, not each partition"
    );
    let (_b, mut whole) = member(&coordinator);
    whole.set_max_records(2);
    whole.acquire_whole_batches(true);
    assert_eq!(
        offsets(&whole.fetch().expect("fetch")),
        vec![(1, 0, 1), (1, 1, 1), (1, 2, 1)],
        "the batch that reached MaxRecords is acquired whole (the second member has partition 1)"
    );
}
