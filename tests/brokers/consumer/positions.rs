//! Where fetching starts, and what happens when that is not known: a partition whose starting
//! position cannot be looked up stays owned, is retried on later polls and reported each time;
//! a fetch position reset backwards moves the guard's monotonicity mark with it.

use crate::support;

use std::time::{Duration, Instant};

use rebalance_guard::consumer::{Consumer, ConsumerError};
use support::consumer::{config, produce_to_each_partition};
use support::{peer, unique_name, BrokerKind, MockCluster, MockOptions};

const WAIT: Duration = Duration::from_secs(30);

/// Polls, completing every record, until `done(offsets seen)`; returns the poll errors seen.
fn consume_until(
    consumer: &mut Consumer,
    what: &str,
    mut done: impl FnMut(&[i64]) -> bool,
) -> (Vec<i64>, Vec<String>) {
    let deadline = Instant::now() + WAIT;
    let (mut seen, mut errors) = (Vec::new(), Vec::new());
    while !done(&seen) {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: seen {seen:?}, poll errors {errors:?}\n{}",
            consumer.stats()
        );
        match consumer.poll(Duration::from_millis(200)) {
            Ok(mut batch) => {
                while let Some(d) = batch.next() {
                    seen.push(d.record.offset);
                    batch.complete(d);
                }
            }
            Err(e) => errors.push(e.to_string()),
        }
    }
    (seen, errors)
}

mod kafka {
    use super::*;

    /// `auto.offset.reset=none` and no committed offset: every retried lookup reports the error
    /// from `poll` again (as Java's consumer does), not only the first one.
    #[test]
    fn no_committed_offset_with_reset_none_is_reported_on_every_retry() {
        let broker = BrokerKind::Kafka.start();
        let topic = unique_name("none");
        broker.create_topic(&topic, 1);
        let mut consumer = Consumer::subscribe(
            config(
                &broker.bootstrap(),
                &unique_name("none-group"),
                &[("auto.offset.reset", "none"), ("retry.backoff.ms", "50")],
            ),
            &[&topic],
        )
        .expect("subscribe");
        let mut reported = 0;
        let deadline = Instant::now() + WAIT;
        while reported < 3 {
            assert!(
                Instant::now() < deadline,
                "reported {reported} times: {}",
                consumer.stats()
            );
            if let Err(e) = consumer.poll(Duration::from_millis(200)) {
                assert!(
                    matches!(e, ConsumerError::NoOffset { .. }),
                    "unexpected error {e}"
                );
                reported += 1;
            }
        }
        consumer.close().ok();
    }
    /// The topic is deleted and created again under the same name (on Kafka): the log now starts
    /// over at 0, the fetch position is out of range and `auto.offset.reset=earliest` moves it
    /// back. The records now at offsets 0.. are new records and must be processed; the guard's
    /// monotonicity mark used to stay at the old position, and every one was refused as a
    /// regression.
    #[test]
    fn a_position_reset_backwards_processes_the_records_read_again() {
        let broker = BrokerKind::Kafka.start();
        let bootstrap = broker.bootstrap();
        let topic = unique_name("reset");
        broker.create_topic(&topic, 1);
        produce_to_each_partition(&bootstrap, &topic, 1, 5);
        let mut consumer = Consumer::subscribe(
            config(&bootstrap, &unique_name("reset-group"), &[]),
            &[&topic],
        )
        .expect("subscribe");
        let (seen, _) = consume_until(&mut consumer, "the first five", |seen| seen.len() >= 5);
        assert_eq!(seen, [0, 1, 2, 3, 4]);
        consumer.commit().expect("commit");
        peer(&["delete-topic", "--bootstrap", &bootstrap, "--topic", &topic]);
        broker.create_topic(&topic, 1);
        produce_to_each_partition(&bootstrap, &topic, 1, 3);
        let (seen, _) = consume_until(&mut consumer, "the three new records", |seen| {
            seen.len() >= 3
        });
        assert_eq!(seen, [0, 1, 2], "the new records at the old offsets");
        consumer.close().ok();
    }
    /// A partition with new records does not wait behind another partition's large buffer: once its
    /// own buffer ran dry it is fetched again (without holding the batch up), while the other still
    /// hands out what it buffered. `poll` used to fetch only when every buffer was empty; in the
    /// demo one partition waited 20.9 s that way. Here partition 0 has 3,000 records buffered at
    /// 1 ms each; records produced to partition 1 meanwhile must be handed out before partition 0's
    /// buffer runs out.
    #[test]
    fn a_partition_with_new_records_does_not_wait_behind_another_partitions_buffer() {
        let broker = BrokerKind::Kafka.start();
        let bootstrap = broker.bootstrap();
        let topic = unique_name("dry");
        broker.create_topic(&topic, 2);
        support::peer_produce(&bootstrap, &topic, 3000, &["--partition", "0", "--batch"]);
        let mut consumer = Consumer::subscribe(
            config(
                &bootstrap,
                &unique_name("dry-group"),
                &[("max.poll.records", "20")],
            ),
            &[&topic],
        )
        .expect("subscribe");
        let (mut p0, mut p1) = (0usize, 0usize);
        let mut p0_when_p1_arrived = None;
        let mut produced = false;
        let deadline = Instant::now() + WAIT;
        while p1 < 5 {
            assert!(
                Instant::now() < deadline,
                "p0 {p0}, p1 {p1}\n{}",
                consumer.stats()
            );
            let mut batch = consumer.poll(Duration::from_millis(200)).expect("poll");
            while let Some(d) = batch.next() {
                if d.record.partition == 0 {
                    p0 += 1;
                    std::thread::sleep(Duration::from_millis(1));
                } else {
                    p1 += 1;
                    p0_when_p1_arrived.get_or_insert(p0);
                }
                batch.complete(d);
            }
            drop(batch);
            if !produced && p0 >= 100 {
                support::peer_produce(&bootstrap, &topic, 5, &["--partition", "1"]);
                produced = true;
            }
        }
        let p0_then = p0_when_p1_arrived.expect("p1 arrived");
        assert!(
            p0_then < 3000,
            "partition 1's records waited until partition 0's buffer of 3000 ran out ({p0_then})"
        );
        consumer.close().ok();
    }
    /// A partition whose fetch keeps failing at the same offset (here its topic was deleted under
    /// the consumer, on Kafka) makes no progress: that is counted in its stats and warned about at
    /// the default level (rate-limited), not logged at debug where nobody sees it.
    #[test]
    fn fetch_errors_of_a_partition_are_counted_in_its_stats() {
        let broker = BrokerKind::Kafka.start();
        let bootstrap = broker.bootstrap();
        let topic = unique_name("gone");
        broker.create_topic(&topic, 1);
        produce_to_each_partition(&bootstrap, &topic, 1, 2);
        let mut consumer = Consumer::subscribe(
            config(&bootstrap, &unique_name("gone-group"), &[]),
            &[&topic],
        )
        .expect("subscribe");
        consume_until(&mut consumer, "the two records", |seen| seen.len() >= 2);
        peer(&["delete-topic", "--bootstrap", &bootstrap, "--topic", &topic]);
        let deadline = Instant::now() + WAIT;
        loop {
            assert!(Instant::now() < deadline, "{}", consumer.stats());
            drop(consumer.poll(Duration::from_millis(100)));
            let stats = consumer.stats();
            let errors = stats
                .partitions
                .iter()
                .filter_map(|p| p.fetch_errors.as_ref().map(|(n, _)| *n))
                .max();
            if errors.is_some_and(|n| n >= 2) {
                assert!(stats.to_string().contains("fetch_errors="), "{stats}");
                break;
            }
        }
        consumer.close().ok();
    }
}

mod mock {
    use super::*;

    /// The committed-offset lookup of a newly assigned partition fails (OffsetFetch refused, on the
    /// mock): the partition stays owned but unfetched, the failure is shown in its stats, and the
    /// lookup is retried on later polls until the records flow. It used to fail once and leave the
    /// partition owned and never fetched while the group was stable.
    #[test]
    fn a_failed_position_lookup_is_retried_until_the_partition_is_fetched() {
        let topic = unique_name("lookup");
        let mock = MockCluster::start(MockOptions {
            topics: vec![(topic.clone(), 1)],
            ..MockOptions::default()
        });
        produce_to_each_partition(mock.bootstrap(), &topic, 1, 5);
        // Refused three times, with an error the client does not retry by itself.
        mock.must("push_errors OffsetFetch GROUP_AUTHORIZATION_FAILED GROUP_AUTHORIZATION_FAILED GROUP_AUTHORIZATION_FAILED");
        let mut consumer = Consumer::subscribe(
            config(mock.bootstrap(), &unique_name("lookup-group"), &[]),
            &[&topic],
        )
        .expect("subscribe");
        let mut reported = false;
        let (seen, _) = consume_until(&mut consumer, "the five records", |seen| seen.len() >= 5);
        for p in consumer.stats().partitions {
            reported |= p.position_error.is_some();
        }
        assert_eq!(seen, [0, 1, 2, 3, 4]);
        // Resolved by now: the error is gone from the stats.
        assert!(
            !reported,
            "a resolved partition still shows its lookup error"
        );
        consumer.close().expect("close");
    }
    /// While the lookup keeps failing the partition's stats say why, with the number of attempts.
    #[test]
    fn a_failing_position_lookup_is_shown_in_the_partition_stats() {
        let topic = unique_name("lookup");
        let mock = MockCluster::start(MockOptions {
            topics: vec![(topic.clone(), 1)],
            ..MockOptions::default()
        });
        let refusals = vec!["GROUP_AUTHORIZATION_FAILED"; 50].join(" ");
        mock.must(&format!("push_errors OffsetFetch {refusals}"));
        let mut consumer = Consumer::subscribe(
            config(mock.bootstrap(), &unique_name("lookup-group"), &[]),
            &[&topic],
        )
        .expect("subscribe");
        let deadline = Instant::now() + WAIT;
        loop {
            assert!(Instant::now() < deadline, "{}", consumer.stats());
            drop(consumer.poll(Duration::from_millis(200)));
            let stats = consumer.stats();
            let attempts = stats
                .partitions
                .iter()
                .filter_map(|p| p.position_error.as_ref().map(|(_, n)| *n))
                .max();
            if attempts.is_some_and(|n| n >= 2) {
                assert!(stats.to_string().contains("position_error"), "{stats}");
                break;
            }
        }
        mock.must("clear_errors OffsetFetch");
        consumer.close().ok();
    }
}
