//! Share-group membership (KIP-932, ShareGroupHeartbeat v1) and group configs
//! (IncrementalAlterConfigs / DescribeConfigs on a GROUP resource) against real Apache Kafka
//! 4.4, on the run's shared broker (`tests/support/kafka.rs`).
//!
//! The shared broker's share settings (`scripts/kafka_broker.py`): a 6 s session, a 500 ms
//! heartbeat, floors of 1 s. Tests that wait out a session lower it for their own group to
//! 2 s with `share.session.timeout.ms`, which is the group-config round trip at work too.
//! Needs `scripts/setup-test-env`.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rebalance_guard::group::{ShareAssignment, ShareMembership, ShareMembershipConfig};
use rebalance_guard::guard::SessionBound;
use rebalance_guard::wire::{
    Client, ClientConfig, CommitIdentity, KafkaCode, OffsetCommitEntry, WireError,
};
use rebalance_guard::{GroupError, TopicPartition};
use support::kafka::require_kafka;
use support::share::set_group_configs;
use support::{unique_name, Kafka, KafkaVersion};

/// The session the tests that wait one out give their group (the broker's floor is 1 s).
const SHORT_SESSION_MS: u64 = 2000;

fn kafka() -> &'static Kafka {
    require_kafka(KafkaVersion::Newest, (4, 2), "share groups (KIP-932)");
    Kafka::shared(KafkaVersion::Newest)
}

fn client(kafka: &Kafka) -> Client {
    let mut cfg = ClientConfig::from_bootstrap_str(kafka.bootstrap());
    cfg.connection.request_timeout = Duration::from_secs(10);
    Client::connect(cfg).expect("connect")
}

fn topic(kafka: &Kafka, partitions: i32) -> String {
    let name = unique_name("share-topic");
    client(kafka)
        .create_topics(&[(&name, partitions, 1)])
        .expect("create topic");
    name
}

fn config(kafka: &Kafka, group: &str, topics: &[&str]) -> ShareMembershipConfig {
    ShareMembershipConfig::new(
        ClientConfig::from_bootstrap_str(kafka.bootstrap()),
        group,
        topics,
    )
}

fn join(kafka: &Kafka, group: &str, topics: &[&str]) -> ShareMembership {
    ShareMembership::join(config(kafka, group, topics)).expect("join")
}

fn all(topic: &str, partitions: i32) -> BTreeSet<TopicPartition> {
    (0..partitions)
        .map(|p| TopicPartition::new(topic, p))
        .collect()
}

/// Polls `done` over both members' assignments until it holds, at most `bound`.
fn wait_until(
    bound: Duration,
    members: &[&ShareMembership],
    mut done: impl FnMut(&[ShareAssignment]) -> bool,
) -> (Duration, Vec<ShareAssignment>) {
    let start = Instant::now();
    loop {
        let seen: Vec<ShareAssignment> = members.iter().map(|m| m.assignment()).collect();
        if done(&seen) {
            return (start.elapsed(), seen);
        }
        for m in members {
            m.status().expect("membership alive");
        }
        assert!(
            start.elapsed() < bound,
            "not reached within {bound:?}; assignments: {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn short_session(kafka: &Kafka, group: &str) {
    client(kafka)
        .alter_group_configs(
            group,
            &[("share.session.timeout.ms", &SHORT_SESSION_MS.to_string())],
        )
        .expect("set share.session.timeout.ms");
}

#[test]
fn two_members_split_four_partitions_and_the_one_left_takes_all_four() {
    let kafka = kafka();
    let t = topic(kafka, 4);
    let group = unique_name("share-split");
    let a = join(kafka, &group, &[&t]);
    let b = join(kafka, &group, &[&t]);
    assert_ne!(a.member_id(), b.member_id());
    let (took, seen) = wait_until(Duration::from_secs(20), &[&a, &b], |s| {
        s[0].partitions.len() == 2
            && s[1].partitions.len() == 2
            && s[0].partitions.union(&s[1].partitions).count() == 4
    });
    println!("split after {took:?}: {seen:?}");
    assert!(
        seen[0].partitions.is_disjoint(&seen[1].partitions),
        "{seen:?}"
    );
    assert!(seen.iter().all(|s| s.epoch > 0), "{seen:?}");
    let before = a.assignment().epoch;
    b.leave(Duration::from_secs(5)).expect("leave answered");
    let (took, seen) = wait_until(Duration::from_secs(10), &[&a], |s| {
        s[0].partitions == all(&t, 4)
    });
    println!("the remaining member has all four after {took:?}: {seen:?}");
    assert!(
        seen[0].epoch > before,
        "a new assignment comes with a new epoch: {seen:?}"
    );
    a.leave(Duration::from_secs(5)).expect("leave answered");
}

#[test]
fn a_member_whose_heartbeats_stop_is_removed_after_the_session_timeout() {
    let kafka = kafka();
    let t = topic(kafka, 4);
    let group = unique_name("share-crash");
    short_session(kafka, &group);
    let a = join(kafka, &group, &[&t]);
    let b = join(kafka, &group, &[&t]);
    wait_until(Duration::from_secs(20), &[&a, &b], |s| {
        s[0].partitions.len() == 2 && s[1].partitions.len() == 2
    });
    let stopped = Instant::now();
    b.stop_without_leaving();
    let (took, seen) = wait_until(Duration::from_secs(15), &[&a], |s| {
        s[0].partitions == all(&t, 4)
    });
    println!("the crashed member's partitions moved after {took:?}: {seen:?}");
    // Its last heartbeat was at most one interval (500 ms) before the stop: the broker cannot
    // have removed it much before the session ran out, so this was the session, not a leave.
    assert!(
        stopped.elapsed() >= Duration::from_millis(SHORT_SESSION_MS - 700),
        "moved after {took:?}, before the {SHORT_SESSION_MS} ms session could run out"
    );
}

#[test]
fn a_member_fenced_after_a_stall_rejoins_with_the_same_member_id() {
    let kafka = kafka();
    let t = topic(kafka, 2);
    let group = unique_name("share-fenced");
    short_session(kafka, &group);
    let a = join(kafka, &group, &[&t]);
    let id = a.member_id().to_string();
    let (_, seen) = wait_until(Duration::from_secs(20), &[&a], |s| {
        s[0].partitions == all(&t, 2)
    });
    let first = seen[0].epoch;
    // Silent for twice the session: the broker removes the member, and its next heartbeat is
    // answered UNKNOWN_MEMBER_ID (or FENCED_MEMBER_EPOCH).
    a.pause_heartbeats(Duration::from_millis(2 * SHORT_SESSION_MS));
    let (took, seen) = wait_until(Duration::from_secs(20), &[&a], |s| {
        s[0].epoch != first && s[0].epoch > 0 && s[0].partitions == all(&t, 2)
    });
    println!("rejoined after {took:?}: {seen:?} (first epoch {first})");
    assert!(took >= Duration::from_millis(2 * SHORT_SESSION_MS - 100));
    assert_eq!(a.member_id(), id, "the member id is kept across the rejoin");
    a.status().expect("a fence is not fatal");
}

/// Polls `done` every 20 ms until it holds or `bound` passed; how long it took.
fn within(bound: Duration, what: &str, mut done: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < bound, "{what}: not within {bound:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    start.elapsed()
}

#[test]
fn answered_heartbeats_renew_the_session_bound_handed_over_and_a_stall_lets_it_pass() {
    let kafka = kafka();
    let t = topic(kafka, 1);
    let group = unique_name("share-bound");
    short_session(kafka, &group);
    let a = join(kafka, &group, &[&t]);
    // What the share consumer hands over: its lock guard's bound, on the boot clock.
    let bound = Arc::new(SessionBound::unbounded());
    a.bound_session(bound.clone());
    let first = bound
        .valid_until()
        .expect("bounded at once, from the join's answer");
    // Three 500 ms heartbeat intervals from each answered send: the heartbeats move it on.
    within(Duration::from_secs(5), "a renewal", || {
        bound
            .valid_until()
            .is_some_and(|until| until >= first + Duration::from_millis(400))
    });
    assert!(!bound.is_expired_now());
    // Silent for twice the session: the bound passes about 1.5 s after the last answered send,
    // well before the broker's 2 s session ends and its fence.
    a.pause_heartbeats(Duration::from_millis(2 * SHORT_SESSION_MS));
    let lapsed = within(Duration::from_secs(3), "the bound to pass", || {
        bound.is_expired_now()
    });
    println!("the session bound passed {lapsed:?} into the stall");
    // Rejoined after the pause: answered heartbeats renew it again.
    let renewed = within(
        Duration::from_secs(20),
        "a renewal after the rejoin",
        || !bound.is_expired_now(),
    );
    println!("renewed {renewed:?} after it passed");
    a.status().expect("a fence is not fatal");
}

#[test]
fn a_topic_created_after_the_join_is_assigned_and_a_new_subscription_is_followed() {
    let kafka = kafka();
    let first = topic(kafka, 1);
    let later = unique_name("share-later");
    let group = unique_name("share-later");
    let a = join(kafka, &group, &[&first, &later]);
    wait_until(Duration::from_secs(20), &[&a], |s| {
        s[0].partitions == all(&first, 1)
    });
    client(kafka)
        .create_topics(&[(&later, 3, 1)])
        .expect("create the later topic");
    let both: BTreeSet<_> = all(&first, 1).union(&all(&later, 3)).cloned().collect();
    let (took, _) = wait_until(Duration::from_secs(20), &[&a], |s| s[0].partitions == both);
    println!("the topic created later was assigned after {took:?}");
    a.subscribe(&[&later]);
    let (took, _) = wait_until(Duration::from_secs(20), &[&a], |s| {
        s[0].partitions == all(&later, 3)
    });
    println!("the new subscription was followed after {took:?}");
    let before = a.assignment();
    let after = a.wait_for_assignment_change(before.epoch, Duration::from_millis(300));
    assert_eq!(
        after, before,
        "nothing changed: the wait ends at its timeout"
    );
}

#[test]
fn group_configs_are_set_and_read_back() {
    let kafka = kafka();
    let group = unique_name("share-configs");
    let mut c = client(kafka);
    // Kafka applies group configs through its metadata log: read back until they show.
    set_group_configs(
        &mut c,
        &group,
        &[
            ("share.auto.offset.reset", "earliest"),
            ("share.record.lock.duration.ms", "2000"),
            ("share.session.timeout.ms", "3000"),
            ("share.heartbeat.interval.ms", "400"),
            ("share.delivery.count.limit", "3"),
        ],
    );
    let read = c.describe_group_configs(&group).expect("describe");
    for (name, value) in [
        ("share.auto.offset.reset", "earliest"),
        ("share.record.lock.duration.ms", "2000"),
        ("share.session.timeout.ms", "3000"),
        ("share.heartbeat.interval.ms", "400"),
        ("share.delivery.count.limit", "3"),
    ] {
        assert_eq!(
            read.get(name).cloned().flatten().as_deref(),
            Some(value),
            "{name}: {read:?}"
        );
    }
    // SET leaves the others alone.
    set_group_configs(&mut c, &group, &[("share.delivery.count.limit", "4")]);
    let read = c.describe_group_configs(&group).expect("describe");
    assert_eq!(
        read.get("share.auto.offset.reset")
            .cloned()
            .flatten()
            .as_deref(),
        Some("earliest")
    );
    assert_eq!(
        read.get("share.delivery.count.limit")
            .cloned()
            .flatten()
            .as_deref(),
        Some("4")
    );
}

#[test]
fn an_unknown_group_config_name_is_refused_with_its_name() {
    let kafka = kafka();
    let group = unique_name("share-bad-config");
    let err = client(kafka)
        .alter_group_configs(&group, &[("share.no.such.setting", "1")])
        .expect_err("an unknown name must be refused");
    println!("{err}");
    match &err {
        WireError::Kafka { code, context, .. } => {
            assert_eq!(*code, KafkaCode(40), "INVALID_CONFIG expected: {err}");
            assert!(context.contains("share.no.such.setting"), "{err}");
        }
        other => panic!("{other:?}"),
    }
    // A value outside the broker's bounds (group.share.min.record.lock.duration.ms = 1000).
    let err = client(kafka)
        .alter_group_configs(&group, &[("share.record.lock.duration.ms", "10")])
        .expect_err("a value under the floor must be refused");
    println!("{err}");
    assert!(
        err.to_string().contains("share.record.lock.duration.ms"),
        "{err}"
    );
}

#[test]
fn a_group_id_of_a_consumer_group_is_a_fatal_error_for_a_share_member() {
    let kafka = kafka();
    let t = topic(kafka, 1);
    let group = unique_name("share-taken");
    // A classic group with committed offsets holds the id.
    let mut c = client(kafka);
    // The coordinator may not know the new topic yet (UNKNOWN_TOPIC_OR_PARTITION): retried.
    let until = Instant::now() + Duration::from_secs(15);
    loop {
        let results = c
            .offset_commit(
                &CommitIdentity {
                    group_id: &group,
                    generation_id_or_member_epoch: -1,
                    member_id: "",
                    group_instance_id: None,
                },
                &[OffsetCommitEntry {
                    tp: TopicPartition::new(t.as_str(), 0),
                    offset: 0,
                    leader_epoch: None,
                    metadata: None,
                }],
            )
            .expect("commit");
        if results.iter().all(|(_, r)| r.is_ok()) {
            break;
        }
        assert!(Instant::now() < until, "{results:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let err = ShareMembership::join(config(kafka, &group, &[&t])).expect_err("refused");
    println!("{err}");
    match &err {
        GroupError::Fatal(f) => assert!(f.to_string().contains("ShareGroupHeartbeat"), "{f}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn with_more_members_than_partitions_a_partition_is_assigned_to_several_members() {
    let kafka = kafka();
    let t = topic(kafka, 2);
    let group = unique_name("share-shared");
    let members: Vec<ShareMembership> = (0..3).map(|_| join(kafka, &group, &[&t])).collect();
    let refs: Vec<&ShareMembership> = members.iter().collect();
    let (took, seen) = wait_until(Duration::from_secs(20), &refs, |s| {
        s.iter().all(|a| !a.partitions.is_empty())
    });
    println!("three members on two partitions after {took:?}: {seen:?}");
    let union: BTreeSet<_> = seen
        .iter()
        .flat_map(|a| a.partitions.iter().cloned())
        .collect();
    assert_eq!(union, all(&t, 2), "{seen:?}");
    // Three non-empty assignments out of two partitions: some partition is in two of them
    // (Kafka 4.4's SimpleAssignor, measured: one member gets both, the others one each).
    let total: usize = seen.iter().map(|a| a.partitions.len()).sum();
    assert!(total > 2, "{seen:?}");
}

mod kafka3 {
    use super::*;

    #[test]
    fn a_broker_without_share_groups_refuses_the_join_naming_share_version() {
        // Kafka 3.9 does not advertise ShareGroupHeartbeat (KIP-932 was early access there).
        let kafka = Kafka::shared(KafkaVersion::Last3);
        let t = unique_name("share-old");
        let started = Instant::now();
        let err = ShareMembership::join(config(kafka, &unique_name("share-old"), &[&t]))
            .expect_err("no share groups before Kafka 4.1");
        println!("{err}");
        match &err {
            GroupError::Fatal(f) => {
                assert_eq!(f.code, KafkaCode::UNSUPPORTED_VERSION, "{f}");
                assert!(f.to_string().contains("share.version"), "{f}");
            }
            other => panic!("{other:?}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "refused at once, not retried"
        );
    }
}
