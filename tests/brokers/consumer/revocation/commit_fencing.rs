//! Commits and the end of a membership: a commit refusal that says the membership is over fences
//! the assignment at once (as Java does), and no commit ever leaves outside a generation.
//!
//! The refusals are injected on librdkafka's mock (error codes on demand are what only it can
//! give; the heartbeats stay healthy there, so nothing but the commit can reveal the end of the
//! membership). The generation -1 commit needs real Kafka: Kafka accepts a commit with generation
//! -1 and no member id for an empty group, as if it came from outside any group.

use crate::support;

use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use rebalance_guard::consumer::{Consumer, ConsumerError};
use rebalance_guard::group::Membership;
use rebalance_guard::guard::{Lease, OwnerStatus};
use rebalance_guard::wire::OffsetCommitEntry;
use rebalance_guard::TopicPartition;
use support::consumer::{committed, config, produce_to_each_partition};
use support::ours::{direct_member, Recorder};
use support::{unique_name, BrokerKind, MockCluster, MockOptions};

const WAIT: Duration = Duration::from_secs(30);

/// Polls until a record was handed out and completed; returns its lease.
fn process_one(consumer: &mut Consumer) -> Lease {
    let deadline = Instant::now() + WAIT;
    loop {
        assert!(Instant::now() < deadline, "no record within {WAIT:?}");
        let mut batch = consumer.poll(Duration::from_millis(200)).expect("poll");
        if let Some(delivery) = batch.next() {
            let lease = delivery.lease().clone();
            batch.complete(delivery);
            return lease;
        }
    }
}

fn mock_with_topic(topic: &str) -> MockCluster {
    MockCluster::start(MockOptions {
        topics: vec![(topic.to_string(), 1)],
        ..MockOptions::default()
    })
}

mod kafka {
    use super::*;

    /// After the member lost its assignment (here: evicted for exceeding max.poll.interval.ms, and
    /// it left the group, which is now empty), a commit must not go out: it would carry generation
    /// -1 and no member id, which Kafka accepts for an empty group. It is refused before any I/O
    /// and the broker's committed offset does not move.
    #[test]
    fn no_commit_leaves_outside_a_generation() {
        let _ = env_logger::builder().is_test(true).try_init();
        let broker = BrokerKind::Kafka.start();
        let topic = unique_name("gen");
        let group = unique_name("gen-group");
        broker.create_topic(&topic, 1);
        let (mut member, fenced) = direct_member(
            &broker.bootstrap(),
            &group,
            vec![topic.clone()],
            Duration::from_millis(1000),
        );
        let mut listener = Recorder::default();
        let deadline = Instant::now() + WAIT;
        while listener.assigned.is_empty() {
            assert!(Instant::now() < deadline, "no assignment");
            member
                .poll(&mut listener, Duration::from_millis(500))
                .expect("poll");
        }
        // The application stalls past max.poll.interval.ms: the heartbeat thread fences and leaves.
        let deadline = Instant::now() + WAIT;
        while fenced.load(Ordering::SeqCst) == 0 {
            assert!(Instant::now() < deadline, "the poll timeout never fired");
            thread::sleep(Duration::from_millis(50));
        }
        let tp = TopicPartition::new(topic.as_str(), 0);
        let offsets = [OffsetCommitEntry {
            tp: tp.clone(),
            offset: 5,
            leader_epoch: None,
            metadata: None,
        }];
        let identity = member.identity();
        assert!(
            member.commit(&offsets).is_err(),
            "a commit outside a generation (identity {identity:?}) must be refused"
        );
        assert_eq!(
            committed(&broker.bootstrap(), &group, &topic, 1)[&0],
            None,
            "the broker's committed offset must not move"
        );
        member.close(&mut listener).ok();
    }
}

mod mock {
    use super::*;

    /// ILLEGAL_GENERATION and UNKNOWN_MEMBER_ID on OffsetCommit mean the coordinator no longer
    /// counts this member in the generation: its partitions may be someone else's already. The
    /// assignment is lost at once (fenced, discarded, not committed), before the next record; it
    /// used to be only a request to rejoin, so records kept being handed out until the heartbeat
    /// thread heard the same news.
    #[test]
    fn a_commit_refused_for_an_ended_membership_fences_at_once() {
        for code in ["ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID"] {
            let topic = unique_name("fence");
            let group = unique_name("fence-group");
            let mock = mock_with_topic(&topic);
            produce_to_each_partition(mock.bootstrap(), &topic, 1, 5);
            let mut consumer = Consumer::subscribe(
                config(mock.bootstrap(), &group, &[("max.poll.records", "1")]),
                &[&topic],
            )
            .expect("subscribe");
            let lease = process_one(&mut consumer);
            assert!(consumer.is_current(&lease));
            mock.must(&format!("push_errors OffsetCommit {code}"));
            match consumer.commit() {
                Err(ConsumerError::Commit(_)) => {}
                other => panic!("{code}: the refused commit must be reported, got {other:?}"),
            }
            assert!(
                !consumer.is_current(&lease),
                "{code}: the partition must be fenced as soon as the commit is refused"
            );
            let tp = TopicPartition::new(topic.as_str(), 0);
            let status = consumer
                .guard_view()
                .snapshot()
                .partitions
                .iter()
                .find(|p| p.tp == tp)
                .map(|p| p.status);
            assert_eq!(status, Some(OwnerStatus::Lost), "{code}");
            assert_eq!(
                committed(mock.bootstrap(), &group, &topic, 1)[&0],
                None,
                "{code}: nothing was committed"
            );
            consumer.close().ok();
        }
    }
    /// FENCED_INSTANCE_ID on OffsetCommit: another consumer took over this group.instance.id.
    /// Fatal, and the error names the instance id; the assignment is fenced at once.
    #[test]
    fn fenced_instance_id_on_commit_is_fatal_and_names_the_instance() {
        let topic = unique_name("fenced");
        let group = unique_name("fenced-group");
        let instance = unique_name("instance");
        let mock = mock_with_topic(&topic);
        produce_to_each_partition(mock.bootstrap(), &topic, 1, 5);
        let mut consumer = Consumer::subscribe(
            config(
                mock.bootstrap(),
                &group,
                &[("max.poll.records", "1"), ("group.instance.id", &instance)],
            ),
            &[&topic],
        )
        .expect("subscribe");
        let lease = process_one(&mut consumer);
        mock.must("push_errors OffsetCommit FENCED_INSTANCE_ID");
        assert!(consumer.commit().is_err(), "the refused commit is reported");
        assert!(!consumer.is_current(&lease), "fenced at once");
        let error = match consumer.poll(Duration::from_millis(200)) {
            Ok(_) => panic!("the next poll must fail: the instance id belongs to another consumer"),
            Err(e) => e.to_string(),
        };
        assert!(
            error.contains(&instance),
            "the error must name the instance id {instance}: {error}"
        );
    }
}
