//! The coordinators' commits land in an attached log, where a consumer's position lookup (the
//! log as its `RecordSource`) reads them; refused commits store nothing.

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::{classic, consumer_group, InMemoryLog};
use crate::group::consumer_group::{HeartbeatRequest, IdAssignment, JOIN_EPOCH};
use crate::wire::{KafkaCode, OffsetCommitEntry, RecordSource};
use crate::TopicPartition;

fn tp(partition: i32) -> TopicPartition {
    TopicPartition::new("orders", partition)
}

fn entry(partition: i32, offset: i64) -> OffsetCommitEntry {
    OffsetCommitEntry {
        tp: tp(partition),
        offset,
        leader_epoch: None,
        metadata: Some("m".to_string()),
    }
}

fn log() -> InMemoryLog {
    let log = InMemoryLog::new();
    log.create_topic("orders", 2);
    log
}

/// What the consumer of `group` would start `partition` at.
fn looked_up(log: &InMemoryLog, group: &str, partition: i32) -> Option<i64> {
    let mut source = log.clone();
    source
        .offset_fetch(group, &[tp(partition)])
        .expect("offsets")[0]
        .offset
}

/// A classic group with one member in a completed round, its commits stored in `log` if
/// given: (coordinator, member id, generation).
fn classic_group(log: Option<&InMemoryLog>) -> (classic::Coordinator, String, i32) {
    let mut c = classic::Coordinator::new(Instant::now(), Duration::from_secs(10));
    if let Some(log) = log {
        c.attach_log(log.clone(), "g");
    }
    let join = |c: &mut classic::Coordinator, member_id: &str| {
        c.join(classic::JoinRequest {
            member_id: member_id.to_string(),
            instance_id: None,
            protocols: vec![("range".to_string(), Bytes::new())],
        })
        .expect("a lone member's join is answered")
    };
    let first = join(&mut c, "");
    assert_eq!(first.error_code, KafkaCode::MEMBER_ID_REQUIRED);
    let reply = join(&mut c, &first.member_id);
    assert_eq!(reply.error_code, KafkaCode::NONE);
    let synced = c.sync(&reply.member_id, reply.generation_id, Vec::new());
    assert_eq!(synced.map(|(code, _)| code), Some(KafkaCode::NONE));
    (c, reply.member_id, reply.generation_id)
}

#[test]
fn a_classic_commit_is_stored_in_the_attached_log_and_read_back_by_a_lookup() {
    let log = log();
    let (mut c, member, generation) = classic_group(Some(&log));
    let results = c.commit_offsets(&member, generation, &[entry(0, 4), entry(1, 2)]);
    assert!(results.iter().all(|(_, code)| *code == KafkaCode::NONE));
    assert_eq!(looked_up(&log, "g", 0), Some(4));
    assert_eq!(looked_up(&log, "g", 1), Some(2));
    assert_eq!(c.commits, vec![(member, generation)]);
}

#[test]
fn a_classic_commit_of_a_stale_generation_stores_nothing() {
    let log = log();
    let (mut c, member, generation) = classic_group(Some(&log));
    let results = c.commit_offsets(&member, generation - 1, &[entry(0, 4)]);
    assert_eq!(results, vec![(tp(0), KafkaCode::ILLEGAL_GENERATION)]);
    assert_eq!(looked_up(&log, "g", 0), None);
    assert!(c.commits.is_empty());
}

#[test]
fn a_partition_the_log_refuses_is_refused_alone_and_not_counted() {
    let log = log();
    let (mut c, member, generation) = classic_group(Some(&log));
    log.refuse_commits(&tp(1), KafkaCode::REQUEST_TIMED_OUT, 1);
    let results = c.commit_offsets(&member, generation, &[entry(0, 4), entry(1, 2)]);
    assert_eq!(
        results,
        vec![
            (tp(0), KafkaCode::NONE),
            (tp(1), KafkaCode::REQUEST_TIMED_OUT)
        ]
    );
    assert_eq!(looked_up(&log, "g", 1), None);
    assert_eq!(looked_up(&log, "g", 0), Some(4));
}

#[test]
fn without_a_log_the_classic_coordinator_accepts_and_stores_nowhere() {
    let (mut c, member, generation) = classic_group(None);
    let results = c.commit_offsets(&member, generation, &[entry(0, 4)]);
    assert_eq!(results, vec![(tp(0), KafkaCode::NONE)]);
    assert_eq!(c.commits, vec![(member, generation)]);
}

/// A KIP-848 group with one member that owns both partitions: (coordinator, member, epoch).
fn kip848_group(log: &InMemoryLog) -> (consumer_group::Coordinator, String, i32) {
    let mut c = consumer_group::Coordinator::new(&[("orders", 2)]);
    c.attach_log(log.clone(), "g");
    let now = Instant::now();
    let join = HeartbeatRequest {
        group_id: "g".to_string(),
        member_id: "m1".to_string(),
        member_epoch: JOIN_EPOCH,
        instance_id: None,
        rebalance_timeout_ms: 5_000,
        subscribed_topic_names: Some(vec!["orders".to_string()]),
        subscribed_topic_regex: None,
        server_assignor: None,
        rack_id: None,
        owned: Some(IdAssignment::new()),
    };
    let answer = c.heartbeat(now, &join);
    assert_eq!(answer.error, KafkaCode::NONE);
    assert!(c.settled("m1"), "a lone member gets everything at once");
    (c, "m1".to_string(), answer.member_epoch)
}

#[test]
fn a_kip848_commit_is_stored_per_partition_and_a_stale_epoch_stores_nothing() {
    let log = log();
    let (mut c, member, epoch) = kip848_group(&log);
    let stale = c.commit_offsets(&member, epoch + 1, &[entry(0, 3)]);
    assert_eq!(stale, vec![(tp(0), KafkaCode::STALE_MEMBER_EPOCH)]);
    assert_eq!(looked_up(&log, "g", 0), None);

    let unknown = OffsetCommitEntry {
        tp: TopicPartition::new("elsewhere", 0),
        ..entry(0, 1)
    };
    let results = c.commit_offsets(&member, epoch, &[unknown, entry(1, 3)]);
    assert_eq!(results[0].1, KafkaCode::UNKNOWN_TOPIC_OR_PARTITION);
    assert_eq!(results[1], (tp(1), KafkaCode::NONE));
    assert_eq!(looked_up(&log, "g", 1), Some(3));
    let topic = c.topic_id("orders");
    assert_eq!(c.commits, vec![(member, (topic, 1), epoch)]);
}
