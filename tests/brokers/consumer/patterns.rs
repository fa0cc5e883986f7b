//! Pattern subscriptions (`Consumer::subscribe_pattern`) on real Apache Kafka: a group
//! subscribed by regular expression is assigned and consumes a matching topic created while it
//! runs, hands a deleted topic's partitions back, and consumes the partitions added to a
//! subscribed topic; under the classic protocol (Kafka 4.x and 3.9: the client matches the
//! pattern at every `metadata.max.age.ms`, shortened here) and under KIP-848 (Kafka 4.x: the
//! broker resolves the regular expression, at the earliest ten seconds after its last
//! resolution). An invalid pattern is refused at subscribe. Needs `scripts/setup-test-env`.

use crate::support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use rebalance_guard::consumer::{Consumer, ConsumerConfig, ConsumerError};
use rebalance_guard::group::GroupError;
use rebalance_guard::ErrorKind;
use support::consumer::{config, consumer_protocol_config, produce_to_each_partition};
use support::{peer, unique_name, Broker, Kafka, KafkaVersion};

/// Bound on each step: a classic refresh every 500 ms plus a rebalance; KIP-848's broker
/// resolves a pattern again at the earliest 10 s after the last resolution, then assigns at
/// the next heartbeats.
const STEP: Duration = Duration::from_secs(90);
const RECORDS: usize = 3;

/// Polls `consumer`, keeping what it delivers (completed, so committed) as (topic, partition,
/// offset), until `done` holds of the consumer and the deliveries; panics naming `what` after
/// [`STEP`].
fn poll_until(
    consumer: &mut Consumer,
    seen: &mut BTreeSet<(String, i32, i64)>,
    what: &str,
    mut done: impl FnMut(&Consumer, &BTreeSet<(String, i32, i64)>) -> bool,
) {
    let deadline = Instant::now() + STEP;
    loop {
        let mut batch = consumer
            .poll(Duration::from_millis(100))
            .unwrap_or_else(|e| panic!("poll while waiting for {what}: {e}"));
        while let Some(delivery) = batch.next() {
            let r = &delivery.record;
            seen.insert((r.topic.to_string(), r.partition, r.offset));
            batch.complete(delivery);
        }
        drop(batch);
        if done(consumer, seen) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; assignment {:?}",
            consumer.assignment()
        );
    }
}

/// How many records of `topic` were delivered.
fn delivered(seen: &BTreeSet<(String, i32, i64)>, topic: &str) -> usize {
    seen.iter().filter(|(t, _, _)| t == topic).count()
}

/// How many partitions of `topic` the consumer owns.
fn owns_topic(consumer: &Consumer, topic: &str) -> usize {
    consumer
        .assignment()
        .iter()
        .filter(|tp| &*tp.topic == topic)
        .count()
}

/// The whole life of a pattern subscription on `broker`, with `config` (classic or KIP-848):
/// an existing matching topic, one created later, partitions added to it, and a deletion.
///
/// `follow_up`: the cooperative protocol rebalances once more after a revocation; the test waits
/// for it before closing (a close while the group rebalances cannot commit).
fn follows_the_cluster(
    broker: &dyn Broker,
    follow_up: bool,
    config: impl Fn(&str) -> ConsumerConfig,
) {
    let _ = env_logger::builder().is_test(true).try_init();
    let prefix = unique_name("pattern");
    let (first, later, other) = (
        format!("{prefix}-orders-a"),
        format!("{prefix}-orders-b"),
        format!("{prefix}-fills"),
    );
    let bootstrap = broker.bootstrap();
    broker.create_topic(&first, 2);
    broker.create_topic(&other, 1);
    produce_to_each_partition(&bootstrap, &first, 2, RECORDS);
    produce_to_each_partition(&bootstrap, &other, 1, RECORDS);
    let pattern = format!("{prefix}-orders-.*");
    let mut consumer = Consumer::subscribe_pattern(config(&unique_name("pattern-group")), &pattern)
        .expect("subscribe by pattern");
    let mut seen = BTreeSet::new();

    poll_until(&mut consumer, &mut seen, "the existing topic", |c, seen| {
        owns_topic(c, &first) == 2 && delivered(seen, &first) == 2 * RECORDS
    });
    assert_eq!(owns_topic(&consumer, &other), 0);

    // A matching topic created while the group runs is assigned and consumed.
    broker.create_topic(&later, 2);
    produce_to_each_partition(&bootstrap, &later, 2, RECORDS);
    poll_until(&mut consumer, &mut seen, "the created topic", |c, seen| {
        owns_topic(c, &later) == 2 && delivered(seen, &later) == 2 * RECORDS
    });

    // Partitions added to a subscribed topic are assigned and consumed.
    grow(&bootstrap, &first, 2, 4);
    poll_until(
        &mut consumer,
        &mut seen,
        "the added partitions",
        |c, seen| owns_topic(c, &first) == 4 && delivered(seen, &first) == 4 * RECORDS,
    );

    // A deleted topic's partitions are handed back; the others stay.
    let revoked_before = consumer.stats().counters.revoked;
    let stable_generation = consumer.generation().generation_id;
    peer(&["delete-topic", "--bootstrap", &bootstrap, "--topic", &later]);
    // Fenced when the rebalance decided it, handed off (revoked) at the next batch boundary.
    poll_until(
        &mut consumer,
        &mut seen,
        "the deleted topic's handoff",
        |c, _| owns_topic(c, &later) == 0 && c.stats().counters.revoked >= revoked_before + 2,
    );
    assert_eq!(owns_topic(&consumer, &first), 4, "the other topic stays");
    if follow_up {
        // The generation after the stable one revokes, the next one is the follow-up.
        poll_until(
            &mut consumer,
            &mut seen,
            "the follow-up rebalance",
            |c, _| {
                c.generation().generation_id >= stable_generation + 2 && owns_topic(c, &first) == 4
            },
        );
    }
    assert_eq!(consumer.stats().counters.lost, 0, "a handoff, not a loss");
    assert_eq!(
        delivered(&seen, &other),
        0,
        "a topic the pattern does not match"
    );
    consumer.close().expect("close");
}

/// Grows `topic` from `from` to `to` partitions (CreatePartitions) and produces [`RECORDS`] to
/// each new one.
fn grow(bootstrap: &str, topic: &str, from: i32, to: i32) {
    let total = to.to_string();
    peer(&[
        "create-partitions",
        "--bootstrap",
        bootstrap,
        "--topic",
        topic,
        "--total",
        &total,
    ]);
    for p in from..to {
        support::peer_produce(bootstrap, topic, RECORDS, &["--partition", &p.to_string()]);
    }
}

/// Classic protocol settings: the metadata refresh every 500 ms.
fn classic(bootstrap: &str, strategy: &'static str) -> impl Fn(&str) -> ConsumerConfig {
    let bootstrap = bootstrap.to_string();
    move |group| {
        config(
            &bootstrap,
            group,
            &[
                ("metadata.max.age.ms", "500"),
                ("partition.assignment.strategy", strategy),
            ],
        )
    }
}

#[test]
fn an_invalid_pattern_is_refused_at_subscribe() {
    // Refused before anything is connected: no broker listens on this address.
    let config = config("127.0.0.1:9", "never-joins", &[]);
    let err = Consumer::subscribe_pattern(config, "orders-(").expect_err("invalid pattern");
    assert_eq!(err.kind(), ErrorKind::Config);
    match &err {
        ConsumerError::Group(GroupError::Pattern(e)) => {
            assert_eq!(e.pattern, "orders-(");
            let text = rebalance_guard::ErrorChain(&err).to_string();
            assert!(
                text.contains("invalid topic pattern \"orders-(\""),
                "{text}"
            );
        }
        other => panic!("expected a pattern error, got {other:?}"),
    }
}

mod kafka {
    use super::*;

    #[test]
    fn classic_cooperative_pattern_follows_created_grown_and_deleted_topics() {
        let kafka = Kafka::shared(KafkaVersion::Newest);
        follows_the_cluster(
            &kafka,
            true,
            classic(kafka.bootstrap(), "cooperative-sticky"),
        );
    }
    #[test]
    fn classic_pattern_that_matches_nothing_yet_joins_and_takes_the_first_matching_topic() {
        let _ = env_logger::builder().is_test(true).try_init();
        let kafka = Kafka::shared(KafkaVersion::Newest);
        let bootstrap = kafka.bootstrap();
        let prefix = unique_name("pattern-empty");
        let config = classic(bootstrap, "cooperative-sticky")(&unique_name("pattern-group"));
        let mut consumer =
            Consumer::subscribe_pattern(config, &format!("{prefix}-.*")).expect("subscribe");
        let mut seen = BTreeSet::new();
        // Joined with an empty subscription (as Java does): a generation, and nothing assigned.
        poll_until(&mut consumer, &mut seen, "the empty join", |c, _| {
            c.generation().generation_id > 0
        });
        assert!(consumer.assignment().is_empty());
        let topic = format!("{prefix}-orders");
        Broker::create_topic(&kafka, &topic, 2);
        produce_to_each_partition(bootstrap, &topic, 2, RECORDS);
        poll_until(
            &mut consumer,
            &mut seen,
            "the first matching topic",
            |c, seen| owns_topic(c, &topic) == 2 && delivered(seen, &topic) == 2 * RECORDS,
        );
        consumer.close().expect("close");
    }
    #[test]
    fn classic_topic_list_consumes_partitions_added_later() {
        let _ = env_logger::builder().is_test(true).try_init();
        let kafka = Kafka::shared(KafkaVersion::Newest);
        let bootstrap = kafka.bootstrap();
        let topic = unique_name("grown");
        Broker::create_topic(&kafka, &topic, 1);
        produce_to_each_partition(bootstrap, &topic, 1, RECORDS);
        let config = classic(bootstrap, "cooperative-sticky")(&unique_name("grown-group"));
        let mut consumer = Consumer::subscribe(config, &[&topic]).expect("subscribe");
        let mut seen = BTreeSet::new();
        poll_until(
            &mut consumer,
            &mut seen,
            "the first partition",
            |c, seen| owns_topic(c, &topic) == 1 && delivered(seen, &topic) == RECORDS,
        );
        grow(bootstrap, &topic, 1, 3);
        poll_until(
            &mut consumer,
            &mut seen,
            "the added partitions",
            |c, seen| owns_topic(c, &topic) == 3 && delivered(seen, &topic) == 3 * RECORDS,
        );
        consumer.close().expect("close");
    }
    #[test]
    fn consumer_protocol_pattern_is_resolved_by_the_broker() {
        let kafka = Kafka::shared(KafkaVersion::Newest);
        let bootstrap = kafka.bootstrap().to_string();
        follows_the_cluster(&kafka, false, move |group| {
            consumer_protocol_config(&bootstrap, group, &[])
        });
    }
}

mod kafka3 {
    use super::*;

    #[test]
    fn classic_eager_pattern_follows_created_grown_and_deleted_topics() {
        let kafka = Kafka::shared(KafkaVersion::Last3);
        follows_the_cluster(&kafka, false, classic(kafka.bootstrap(), "range"));
    }
    #[test]
    fn consumer_protocol_pattern_is_refused_at_subscribe() {
        let kafka = Kafka::shared(KafkaVersion::Last3);
        let config =
            consumer_protocol_config(kafka.bootstrap(), &unique_name("pattern-group"), &[]);
        let err =
            Consumer::subscribe_pattern(config, "orders-.*").expect_err("no regex before 4.0");
        let text = rebalance_guard::ErrorChain(&err).to_string();
        // Kafka 3.9 speaks ConsumerGroupHeartbeat v0 only: the member says what it needs.
        assert!(
            text.contains("needs ConsumerGroupHeartbeat v1 (Kafka 4.0 or later)"),
            "{text}"
        );
        assert!(text.contains("orders-.*"), "{text}");
    }
}
