//! The in-memory log answers as a broker would: what was produced, from where it was asked,
//! out of range outside the log, and the committed offsets it stored.

use std::thread;
use std::time::{Duration, Instant};

use super::*;
use crate::wire::Record;

fn tp(partition: i32) -> TopicPartition {
    TopicPartition::new("orders", partition)
}

fn at(partition: i32, offset: i64) -> FetchPosition {
    FetchPosition {
        tp: tp(partition),
        offset,
    }
}

/// A log with "orders" of two partitions.
fn log() -> InMemoryLog {
    let log = InMemoryLog::new();
    log.create_topic("orders", 2);
    log
}

/// A fetch that never waits at the log, as the consumer's `DontWait`.
fn quick() -> FetchConfig {
    FetchConfig {
        max_wait: Duration::ZERO,
        ..FetchConfig::default()
    }
}

/// Every record of a fetched partition, decoded, and where the next fetch starts.
fn decode(part: LazyPartition) -> (Vec<Record>, i64) {
    assert!(part.error.is_none(), "{}: {:?}", part.tp, part.error);
    let mut records = part.records;
    let mut out = Vec::new();
    while !records.is_finished() {
        records.fill(&mut out).expect("the log's batches decode");
    }
    (out, records.next_offset())
}

fn fetch_one(log: &mut InMemoryLog, pos: FetchPosition) -> LazyPartition {
    let mut parts = log.fetch_lazy(&[pos], &quick()).expect("a fetch");
    assert_eq!(parts.len(), 1);
    parts.remove(0)
}

fn entry(partition: i32, offset: i64, metadata: Option<&str>) -> OffsetCommitEntry {
    OffsetCommitEntry {
        tp: tp(partition),
        offset,
        leader_epoch: Some(3),
        metadata: metadata.map(String::from),
    }
}

#[test]
fn a_fetch_returns_the_records_produced_with_their_offsets_keys_and_values() {
    let mut log = log();
    assert_eq!(log.produce("orders", 0, "a", "1"), 0);
    assert_eq!(log.produce("orders", 0, "b", "2"), 1);
    assert_eq!(log.produce("orders", 1, "c", "3"), 0);
    assert_eq!(log.high_watermark(&tp(0)), 2);

    let part = fetch_one(&mut log, at(0, 0));
    assert_eq!((part.high_watermark, part.log_start_offset), (2, 0));
    let (records, next) = decode(part);
    let seen: Vec<(i32, i64, &[u8], &[u8])> = records
        .iter()
        .map(|r| {
            let key: &[u8] = r.key.as_deref().unwrap_or_default();
            let value: &[u8] = r.value.as_deref().unwrap_or_default();
            (r.partition, r.offset, key, value)
        })
        .collect();
    assert_eq!(
        seen,
        vec![(0, 0, &b"a"[..], &b"1"[..]), (0, 1, &b"b"[..], &b"2"[..])]
    );
    assert_eq!(next, 2, "the next fetch starts after the last record");
    assert_eq!(&*records[0].topic, "orders");
}

#[test]
fn a_fetch_starts_at_its_position_even_inside_a_batch() {
    let mut log = log();
    let batch: Vec<ProduceRecord> = (0..5)
        .map(|i| ProduceRecord {
            key: None,
            value: Some(Bytes::from(format!("v{i}"))),
            headers: vec![("h".to_string(), Some(Bytes::from_static(b"x")))],
            timestamp: Some(1_000 + i),
        })
        .collect();
    assert_eq!(log.produce_batch(&tp(0), &batch), 0);
    let (records, next) = decode(fetch_one(&mut log, at(0, 2)));
    let offsets: Vec<i64> = records.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, vec![2, 3, 4]);
    assert_eq!(records[0].key, None, "a null key stays null");
    assert_eq!(records[0].timestamp, 1_002);
    assert_eq!(records[0].headers.len(), 1);
    assert_eq!(next, 5);
}

#[test]
fn a_fetch_at_the_end_is_empty_and_one_past_it_is_out_of_range() {
    let mut log = log();
    log.produce("orders", 0, "k", "v");
    let (records, next) = decode(fetch_one(&mut log, at(0, 1)));
    assert!(records.is_empty());
    assert_eq!(next, 1);

    let part = fetch_one(&mut log, at(0, 2));
    let code = part.error.as_ref().and_then(WireError::kafka_code);
    assert_eq!(code, Some(KafkaCode::OFFSET_OUT_OF_RANGE));
    assert_eq!(part.high_watermark, 1);
}

#[test]
fn a_position_below_the_log_start_is_out_of_range_after_records_are_deleted() {
    let mut log = log();
    for i in 0..4 {
        log.produce("orders", 0, "k", format!("{i}"));
    }
    log.delete_records(&tp(0), 2);
    assert_eq!(log.log_start(&tp(0)), 2);
    let part = fetch_one(&mut log, at(0, 1));
    let code = part.error.as_ref().and_then(WireError::kafka_code);
    assert_eq!(code, Some(KafkaCode::OFFSET_OUT_OF_RANGE));
    assert_eq!(part.log_start_offset, 2);
    let (records, _) = decode(fetch_one(&mut log, at(0, 2)));
    assert_eq!(records.iter().map(|r| r.offset).collect::<Vec<_>>(), [2, 3]);
}

#[test]
fn a_truncated_log_puts_a_position_past_its_new_end_out_of_range_and_reuses_the_offsets() {
    let mut log = log();
    for i in 0..4 {
        log.produce("orders", 0, "k", format!("{i}"));
    }
    log.truncate(&tp(0), 2);
    let part = fetch_one(&mut log, at(0, 3));
    let code = part.error.as_ref().and_then(WireError::kafka_code);
    assert_eq!(code, Some(KafkaCode::OFFSET_OUT_OF_RANGE));
    assert_eq!(log.produce("orders", 0, "k", "new"), 2);
}

#[test]
fn a_fetch_returns_a_bounded_number_of_records_and_the_next_one_goes_on() {
    let mut log = log();
    log.set_max_fetch_records(3);
    for i in 0..7 {
        log.produce("orders", 0, "k", format!("{i}"));
    }
    let mut position = 0;
    let mut sizes = Vec::new();
    while position < 7 {
        let (records, next) = decode(fetch_one(&mut log, at(0, position)));
        assert_eq!(records.first().map(|r| r.offset), Some(position));
        sizes.push(records.len());
        position = next;
    }
    assert_eq!(sizes, vec![3, 3, 1]);
}

#[test]
fn an_unknown_partition_is_answered_unknown_and_the_others_still_get_their_records() {
    let mut log = log();
    log.produce("orders", 1, "k", "v");
    let parts = log
        .fetch_lazy(&[at(7, 0), at(1, 0)], &quick())
        .expect("a fetch");
    for part in parts {
        if part.tp == tp(7) {
            let code = part.error.as_ref().and_then(WireError::kafka_code);
            assert_eq!(code, Some(KafkaCode::UNKNOWN_TOPIC_OR_PARTITION));
        } else {
            assert_eq!(decode(part).0.len(), 1);
        }
    }
}

#[test]
fn an_injected_fetch_failure_fails_every_partition_of_the_next_fetches_only() {
    let mut log = log();
    log.produce("orders", 0, "k", "v");
    let error = WireError::kafka(ApiKey::Fetch, KafkaCode::NOT_LEADER_OR_FOLLOWER, "injected");
    log.fail_next_fetches(2, error);
    for _ in 0..2 {
        let parts = log
            .fetch_lazy(&[at(0, 0), at(1, 0)], &quick())
            .expect("a fetch");
        assert_eq!(parts.len(), 2);
        for part in parts {
            let code = part.error.as_ref().and_then(WireError::kafka_code);
            assert_eq!(code, Some(KafkaCode::NOT_LEADER_OR_FOLLOWER));
        }
    }
    assert_eq!(decode(fetch_one(&mut log, at(0, 0))).0.len(), 1);
    assert_eq!(log.fetch_calls(), 3);
}

#[test]
fn an_empty_fetch_returns_at_once_whatever_the_fetch_may_wait() {
    let mut log = log();
    let cfg = FetchConfig {
        max_wait: Duration::from_secs(30),
        ..FetchConfig::default()
    };
    let started = Instant::now();
    let parts = log.fetch_lazy(&[at(0, 0)], &cfg).expect("a fetch");
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(decode(parts.into_iter().next().expect("one")).0.len(), 0);
}

#[test]
fn a_fetch_allowed_to_wait_is_woken_by_a_produce_on_another_handle() {
    let mut log = log();
    log.set_fetch_wait(Duration::from_secs(20));
    let producer = log.clone();
    let thread = thread::spawn(move || {
        thread::sleep(Duration::from_millis(20));
        producer.produce("orders", 0, "k", "v");
    });
    let cfg = FetchConfig {
        max_wait: Duration::from_secs(20),
        ..FetchConfig::default()
    };
    let started = Instant::now();
    let parts = log.fetch_lazy(&[at(0, 0)], &cfg).expect("a fetch");
    thread.join().expect("the producer");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "woken, not timed out"
    );
    assert_eq!(decode(parts.into_iter().next().expect("one")).0.len(), 1);
}

#[test]
fn list_offsets_answers_the_log_start_the_end_and_the_first_offset_at_a_timestamp() {
    let mut log = log();
    let record = |ts: i64| ProduceRecord {
        value: Some(Bytes::from_static(b"v")),
        timestamp: Some(ts),
        ..ProduceRecord::default()
    };
    log.produce_batch(&tp(0), &[record(100), record(200), record(300)]);
    log.delete_records(&tp(0), 1);
    let offsets = |log: &mut InMemoryLog, spec| {
        log.list_offsets(&[tp(0), tp(1)], spec, IsolationLevel::ReadCommitted)
            .expect("offsets")
    };
    let earliest = offsets(&mut log, OffsetSpec::Earliest);
    assert_eq!((earliest[&tp(0)], earliest[&tp(1)]), (1, 0));
    let latest = offsets(&mut log, OffsetSpec::Latest);
    assert_eq!((latest[&tp(0)], latest[&tp(1)]), (3, 0));
    let at_250 = offsets(&mut log, OffsetSpec::Timestamp(250));
    assert_eq!((at_250[&tp(0)], at_250[&tp(1)]), (2, -1));
    let unknown = log.list_offsets(&[tp(9)], OffsetSpec::Latest, IsolationLevel::default());
    assert!(unknown.is_err());
}

#[test]
fn committed_offsets_round_trip_per_group_with_their_metadata() {
    let mut log = log();
    let results = log.commit("g", &[entry(0, 5, Some("map")), entry(1, 7, None)]);
    assert_eq!(
        results,
        vec![(tp(0), KafkaCode::NONE), (tp(1), KafkaCode::NONE)]
    );
    let fetched = log.offset_fetch("g", &[tp(0), tp(1)]).expect("offsets");
    assert_eq!(fetched[0].offset, Some(5));
    assert_eq!(fetched[0].metadata.as_deref(), Some("map"));
    assert_eq!(fetched[0].leader_epoch, Some(3));
    assert_eq!(fetched[1].offset, Some(7));
    let other = log.offset_fetch("h", &[tp(0)]).expect("offsets");
    assert_eq!(other[0].offset, None, "another group committed nothing");

    log.commit("g", &[entry(0, 9, None)]);
    assert_eq!(log.committed("g", &tp(0)), Some(9), "the last commit wins");
    let history: Vec<i64> = log.commit_history("g").iter().map(|e| e.offset).collect();
    assert_eq!(history, vec![5, 7, 9]);
}

#[test]
fn a_refused_commit_stores_nothing_for_its_partition_only() {
    let log = log();
    log.refuse_commits(&tp(0), KafkaCode::REBALANCE_IN_PROGRESS, 1);
    let results = log.commit("g", &[entry(0, 5, None), entry(1, 6, None)]);
    assert_eq!(
        results,
        vec![
            (tp(0), KafkaCode::REBALANCE_IN_PROGRESS),
            (tp(1), KafkaCode::NONE)
        ]
    );
    assert_eq!(log.committed("g", &tp(0)), None);
    assert_eq!(log.committed("g", &tp(1)), Some(6));
    log.commit("g", &[entry(0, 5, None)]);
    assert_eq!(log.committed("g", &tp(0)), Some(5), "refused once only");
    let unknown = log.commit("g", &[entry(5, 1, None)]);
    assert_eq!(unknown[0].1, KafkaCode::UNKNOWN_TOPIC_OR_PARTITION);
}

#[test]
fn injected_position_lookup_failures_fail_the_next_lookups_only() {
    let mut log = log();
    let error = WireError::kafka(ApiKey::OffsetFetch, KafkaCode::NOT_COORDINATOR, "injected");
    log.fail_next_offset_fetches(1, error.clone());
    assert!(log.offset_fetch("g", &[tp(0)]).is_err());
    assert!(log.offset_fetch("g", &[tp(0)]).is_ok());
    log.fail_next_list_offsets(1, error);
    let spec = OffsetSpec::Earliest;
    assert!(log
        .list_offsets(&[tp(0)], spec, IsolationLevel::default())
        .is_err());
    assert!(log
        .list_offsets(&[tp(0)], spec, IsolationLevel::default())
        .is_ok());
}

#[test]
fn every_clone_sees_one_log() {
    let log = log();
    let other = log.clone();
    other.produce("orders", 1, "k", "v");
    other.commit("g", &[entry(1, 1, None)]);
    assert_eq!(log.high_watermark(&tp(1)), 1);
    assert_eq!(log.committed("g", &tp(1)), Some(1));
    log.create_topic("orders", 3);
    assert_eq!(other.partition_count("orders"), Some(3));
    assert_eq!(other.high_watermark(&tp(1)), 1, "growing keeps the records");
}
