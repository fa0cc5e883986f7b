//! The hand-out order of the intake: turns of [`TURN_RECORDS`] per partition, pauses and drops.

use std::sync::Arc;

use super::*;
use crate::wire::TimestampType;

fn record(topic: &Arc<str>, partition: i32, offset: i64) -> Record {
    Record {
        topic: topic.clone(),
        partition,
        offset,
        timestamp: 0,
        timestamp_type: TimestampType::CreateTime,
        key: None,
        value: None,
        headers: Vec::new(),
    }
}

/// An intake holding `count` records (offsets 0..count) of each of `partitions` partitions.
fn filled(partitions: i32, count: i64) -> (Intake, Vec<TopicPartition>) {
    let topic: Arc<str> = Arc::from("t");
    let mut intake = Intake::default();
    let tps: Vec<TopicPartition> = (0..partitions)
        .map(|p| TopicPartition::new(topic.clone(), p))
        .collect();
    for tp in &tps {
        intake.positions.insert(tp.clone(), count);
        intake.buffers.insert(
            tp.clone(),
            (0..count)
                .map(|o| record(&topic, tp.partition, o))
                .collect(),
        );
        intake.mark_ready(tp);
    }
    (intake, tps)
}

/// Drains the intake: (partition, offset) in hand-out order.
fn drain(intake: &mut Intake) -> Vec<(i32, i64)> {
    std::iter::from_fn(|| {
        intake.next_record().map(|(tp, r)| {
            assert_eq!(
                tp.partition, r.partition,
                "record handed out under another partition"
            );
            (r.partition, r.offset)
        })
    })
    .collect()
}

#[test]
fn partitions_take_turns_of_turn_records_each() {
    let turn = TURN_RECORDS as i64;
    let (mut intake, _) = filled(3, turn * 2 + 10);
    let order = drain(&mut intake);
    assert_eq!(order.len() as i64, 3 * (turn * 2 + 10));
    // Runs of one partition: a full turn each, until the last short one.
    let mut runs: Vec<(i32, usize)> = Vec::new();
    for &(p, _) in &order {
        match runs.last_mut() {
            Some((q, n)) if *q == p => *n += 1,
            _ => runs.push((p, 1)),
        }
    }
    let expected: Vec<(i32, usize)> = [0, 1, 2, 0, 1, 2]
        .iter()
        .map(|&p| (p, TURN_RECORDS))
        .chain([(0, 10), (1, 10), (2, 10)])
        .collect();
    assert_eq!(runs, expected);
    // Every partition's records in offset order.
    for p in 0..3 {
        let offsets: Vec<i64> = order
            .iter()
            .filter(|(q, _)| *q == p)
            .map(|(_, o)| *o)
            .collect();
        assert_eq!(offsets, (0..turn * 2 + 10).collect::<Vec<_>>());
    }
    assert!(!intake.has_buffered());
}

#[test]
fn a_paused_partition_hands_out_nothing_until_resumed() {
    let (mut intake, tps) = filled(2, 100);
    intake.pause(&tps[..1]);
    assert!(intake.has_buffered(), "partition 1 still has records");
    let order = drain(&mut intake);
    assert_eq!(order.len(), 100);
    assert!(
        order.iter().all(|(p, _)| *p == 1),
        "paused partition 0 handed out: {order:?}"
    );
    assert!(
        !intake.has_buffered(),
        "only a paused partition has records"
    );
    intake.resume(&tps[..1]);
    assert!(intake.has_buffered());
    let order = drain(&mut intake);
    assert_eq!(order, (0..100).map(|o| (0, o)).collect::<Vec<_>>());
}

#[test]
fn a_dropped_partition_ends_its_turn_at_once() {
    let (mut intake, tps) = filled(2, 100);
    let first = intake.next_record().map(|(tp, r)| (tp.partition, r.offset));
    assert_eq!(first, Some((0, 0)));
    assert_eq!(intake.drop_partition(&tps[0]), 99);
    let order = drain(&mut intake);
    assert_eq!(order, (0..100).map(|o| (1, o)).collect::<Vec<_>>());
}

#[test]
fn a_record_put_back_is_next_in_its_partition() {
    let (mut intake, tps) = filled(1, 3);
    let (tp, r) = intake.next_record().expect("a record");
    let tp = tp.clone();
    assert_eq!(r.offset, 0);
    intake.push_front(tp, r);
    assert_eq!(tps.len(), 1);
    assert_eq!(drain(&mut intake), vec![(0, 0), (0, 1), (0, 2)]);
}

#[test]
fn a_partition_that_runs_dry_is_the_one_to_fetch() {
    let (mut intake, tps) = filled(2, 3);
    assert!(!intake.has_dry_partition(), "both partitions hold records");
    // Partition 0 hands out its three records first (one turn), then runs dry.
    for offset in 0..3 {
        let got = intake.next_record().map(|(tp, r)| (tp.partition, r.offset));
        assert_eq!(got, Some((0, offset)));
    }
    assert!(intake.has_dry_partition());
    intake.prune_dry();
    assert_eq!(intake.dry.iter().collect::<Vec<_>>(), vec![&tps[0]]);
    // Paused, it is not one to fetch; resumed, it is again.
    intake.pause(&tps[..1]);
    assert!(!intake.has_dry_partition());
    intake.resume(&tps[..1]);
    assert!(intake.has_dry_partition());
    // Dropped, it is gone; the other one runs dry in turn.
    intake.drop_partition(&tps[0]);
    assert!(!intake.has_dry_partition());
    assert_eq!(drain(&mut intake).len(), 3);
    assert!(intake.has_dry_partition());
    intake.clear_buffers();
    intake.prune_dry();
    assert_eq!(intake.dry.iter().collect::<Vec<_>>(), vec![&tps[1]]);
}

#[test]
fn a_partition_put_back_is_not_dry() {
    let (mut intake, _) = filled(1, 1);
    let (tp, r) = intake.next_record().expect("a record");
    let tp = tp.clone();
    assert!(intake.has_dry_partition(), "its only record is out");
    intake.push_front(tp, r);
    assert!(!intake.has_dry_partition(), "the record is back");
}

/// An intake owning partition 0 of "t", with a fetch of `data` (from `fetch_offset`) buffered.
fn fetched(data: bytes::Bytes, fetch_offset: i64) -> (Intake, TopicPartition) {
    let topic: Arc<str> = Arc::from("t");
    let tp = TopicPartition::new(topic.clone(), 0);
    let mut intake = Intake::default();
    intake.positions.insert(tp.clone(), fetch_offset);
    let input = wire::records::PartitionInput {
        topic: &topic,
        partition: 0,
        fetch_offset,
        aborted: None,
    };
    let records = wire::LazyRecords::standalone(&input, data, wire::DecodeBudget::default());
    intake.buffer_fetched(&tp, records);
    (intake, tp)
}

#[test]
fn a_fetch_decoded_batch_by_batch_is_handed_out_whole_and_in_order() {
    let data = wire::records::tests::batches(&[(0, 99), (100, 199), (200, 249)]);
    let (mut intake, tp) = fetched(data, 40);
    assert_eq!(
        intake.positions.get(&tp),
        Some(&250),
        "the next fetch starts past the data"
    );
    assert!(!intake.dry.contains(&tp));
    let order = drain(&mut intake);
    assert_eq!(order, (40..250).map(|o| (0, o)).collect::<Vec<_>>());
    assert_eq!(intake.positions.get(&tp), Some(&250));
    assert!(
        intake.dry.contains(&tp),
        "ran dry: the next poll fetches it"
    );
    assert!(!intake.fetch_errors.contains_key(&tp));
}

#[test]
fn a_corrupt_batch_inside_a_fetch_ends_it_there_and_counts_as_a_fetch_error() {
    let first = wire::records::tests::batches(&[(0, 9)]);
    let mut data = bytes::BytesMut::from(&wire::records::tests::batches(&[(0, 9), (10, 19)])[..]);
    // A byte inside the second batch's records: its CRC fails.
    let at = first.len() + 61 + 3;
    data[at] ^= 0xff;
    let (mut intake, tp) = fetched(data.freeze(), 0);
    let order = drain(&mut intake);
    assert_eq!(order, (0..10).map(|o| (0, o)).collect::<Vec<_>>());
    assert_eq!(
        intake.positions.get(&tp),
        Some(&10),
        "the next fetch starts at the corrupt batch, so nothing after it is skipped"
    );
    assert_eq!(intake.fetch_errors.get(&tp).map(|e| e.count), Some(1));
    assert!(intake.dry.contains(&tp));
}

#[test]
fn dropping_a_partition_counts_the_records_not_decoded_yet() {
    let data = wire::records::tests::batches(&[(0, 99), (100, 199), (200, 249)]);
    let (mut intake, tp) = fetched(data, 0);
    assert_eq!(intake.next_record().map(|(_, r)| r.offset), Some(0));
    assert_eq!(intake.drop_partition(&tp), 249);
    assert!(intake.next_record().is_none());
}
