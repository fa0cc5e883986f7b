//! The commit thread: the order in which its commits reach the coordinator, and its death.
//!
//! On real Kafka 4.x, through the loopback proxy (`support/proxy.rs`), which holds one
//! OffsetCommit past the client's `request.timeout.ms` and delivers it late: the way a request
//! stuck in a network, or in a broker waiting for its replicas, arrives after the client gave
//! up on it. Kafka executes it all the same.

use crate::support;

use std::time::{Duration, Instant};

use kafka_protocol::messages::ApiKey;
use rebalance_guard::consumer::{Consumer, ConsumerError};
use rebalance_guard::group::GroupError;
use support::consumer::{committed, config, produce_to_each_partition, wait_until};
use support::proxy::Proxy;
use support::{unique_name, BrokerKind};

const WAIT: Duration = Duration::from_secs(60);
const RECORDS: usize = 600;
/// The client's `request.timeout.ms` in these tests.
const REQUEST_TIMEOUT: Duration = Duration::from_millis(2000);
/// How long the proxy holds the paced commit at most: past the commit thread's two attempts
/// of [`REQUEST_TIMEOUT`], and short of the deadline of a commit sent right after them.
const HOLD: Duration = Duration::from_millis(5000);

mod kafka {
    use super::*;

    /// A paced commit is held past the client's timeout; the member finishes its records and
    /// closes, so the revocation commits `last + 1`; the held paced commit (an older position) is
    /// then delivered, before the member leaves. Kafka must end with `last + 1`: the late commit
    /// is executed before the handoff's, never after it (they travel on one connection, in order).
    #[test]
    fn a_paced_commit_delivered_after_the_handoff_commit_does_not_move_the_offset_back() {
        let _ = env_logger::builder().is_test(true).try_init();
        let broker = BrokerKind::Kafka.start();
        let topic = unique_name("late-commit");
        let group = unique_name("late-commit-group");
        broker.create_topic(&topic, 1);
        produce_to_each_partition(&broker.bootstrap(), &topic, 1, RECORDS);
        let proxy = Proxy::start(&broker.bootstrap());
        let timeout_ms = REQUEST_TIMEOUT.as_millis().to_string();
        let settings = [
            ("commit.interval.ms", "100"),
            ("request.timeout.ms", timeout_ms.as_str()),
        ];
        let mut consumer = Consumer::subscribe(config(proxy.addr(), &group, &settings), &[&topic])
            .expect("subscribe");
        let mut processed = 0usize;
        let mut armed = false;
        let mut processed_when_held = None;
        let deadline = Instant::now() + WAIT;
        while processed < RECORDS {
            assert!(Instant::now() < deadline, "processed only {processed}");
            let mut batch = consumer.poll(Duration::from_millis(100)).expect("poll");
            while let Some(delivery) = batch.next() {
                if processed_when_held.is_none() {
                    // Slow enough for paced commits between the records until one is held.
                    std::thread::sleep(Duration::from_millis(2));
                }
                batch.complete(delivery);
                processed += 1;
                if processed == 100 && !armed {
                    proxy.hold_next(ApiKey::OffsetCommit as i16, HOLD);
                    armed = true;
                }
                if armed && processed_when_held.is_none() && proxy.holding() {
                    processed_when_held = Some(processed);
                }
            }
        }
        let held_at = processed_when_held.expect("a paced commit was held while records remained");
        assert!(held_at < RECORDS, "held at {held_at}");
        let closed = consumer.close();
        eprintln!("close: {closed:?}");
        let held = proxy.held().expect("the held commit was delivered");
        eprintln!("held paced commit (made with at most {held_at} records done): {held:?}");
        assert!(
            held.held >= REQUEST_TIMEOUT,
            "held past the client's timeout: {held:?}"
        );
        let offsets = committed(&broker.bootstrap(), &group, &topic, 1);
        assert_eq!(
            offsets.get(&0).copied().flatten(),
            Some(RECORDS as i64),
            "the committed offset moved back to a late paced commit ({held:?})"
        );
    }
    /// The commit thread dies (here it panics when the test asks, at its next commit): nothing
    /// could be committed any more, so the partitions are fenced at once and every poll from then
    /// on fails with the death, instead of paced commits stopping in silence.
    #[test]
    fn a_dead_commit_thread_fails_every_poll_and_fences_the_partitions() {
        let _ = env_logger::builder().is_test(true).try_init();
        let broker = BrokerKind::Kafka.start();
        let topic = unique_name("dead-commit");
        let group = unique_name("dead-commit-group");
        broker.create_topic(&topic, 2);
        produce_to_each_partition(&broker.bootstrap(), &topic, 2, 2000);
        let settings = [("commit.interval.ms", "50"), ("max.poll.records", "20")];
        let mut consumer =
            Consumer::subscribe(config(&broker.bootstrap(), &group, &settings), &[&topic])
                .expect("subscribe");
        let mut processed = 0;
        let deadline = Instant::now() + WAIT;
        while processed < 100 || consumer.assignment().len() < 2 {
            assert!(Instant::now() < deadline, "the member owns and processes");
            let mut batch = consumer.poll(Duration::from_millis(100)).expect("poll");
            while let Some(delivery) = batch.next() {
                batch.complete(delivery);
                processed += 1;
            }
        }
        consumer.panic_commit_thread();
        let died_by = Instant::now() + Duration::from_secs(20);
        let message = loop {
            assert!(
                Instant::now() < died_by,
                "20 s after the commit thread's panic, polls still succeed ({processed} records \
                 processed, assignment {:?})",
                consumer.assignment()
            );
            match consumer.poll(Duration::from_millis(100)) {
                Ok(mut batch) => {
                    while let Some(delivery) = batch.next() {
                        std::thread::sleep(Duration::from_millis(1));
                        batch.complete(delivery);
                        processed += 1;
                    }
                }
                Err(ConsumerError::Group(GroupError::CommitThreadDied(message))) => break message,
                Err(other) => panic!("poll after the commit thread's death: {other}"),
            }
        };
        assert!(message.contains("requested by a test"), "{message}");
        wait_until("the partitions are fenced", Duration::from_secs(5), || {
            consumer.assignment().is_empty()
        });
        for attempt in 0..3 {
            match consumer.poll(Duration::from_millis(100)) {
                Err(ConsumerError::Group(GroupError::CommitThreadDied(_))) => {}
                Err(other) => panic!("poll {attempt} after the death: {other}"),
                Ok(mut batch) => panic!(
                    "poll {attempt} after the death returned a batch (first record: {:?})",
                    batch.next().map(|d| (d.record.partition, d.record.offset))
                ),
            }
        }
        let _ = consumer.close();
    }
}
