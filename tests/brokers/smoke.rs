//! Proves the test-broker infrastructure works with no code of ours on the
//! wire: each broker (Apache Kafka 4.x and 3.x, the mock cluster, tansu) is
//! started, a topic created, records produced and read
//! back by the peer clients (confluent-kafka), and kafka-python bootstraps
//! against it. If these fail, every other integration test is meaningless.
//!
//! Needs `scripts/setup-test-env` to have run.

use crate::support;

use support::{
    api_versions_probe, peer, peer_consume, peer_key, peer_produce, peer_try, peer_value,
    unique_name, Broker, BrokerKind, Kafka, KafkaVersion, MockCluster, MockOptions, Tansu,
};

const RECORDS: usize = 100;
const PARTITIONS: u32 = 3;

/// Create a 3-partition topic, produce 100 lz4-compressed records with headers,
/// read them back and check every key, value and header.
fn produce_and_consume_roundtrip(broker: &dyn Broker) {
    let bootstrap = broker.bootstrap();
    let topic = unique_name("smoke");
    broker.create_topic(&topic, PARTITIONS);

    peer_produce(
        &bootstrap,
        &topic,
        RECORDS,
        &["--headers", "--compression", "lz4", "--size", "48"],
    );
    let records = peer_consume(&bootstrap, &topic, RECORDS, &["--timeout-s", "30"]);
    assert_eq!(records.len(), RECORDS, "{:?}: record count", broker.kind());

    let mut keys: Vec<String> = records.iter().filter_map(|r| r.key.clone()).collect();
    keys.sort();
    let mut expected: Vec<String> = (0..RECORDS).map(|i| peer_key("k", i)).collect();
    expected.sort();
    assert_eq!(keys, expected, "{:?}: keys", broker.kind());

    let mut partitions_seen = std::collections::BTreeSet::new();
    for r in &records {
        let i: usize = r
            .key
            .as_deref()
            .and_then(|k| k.strip_prefix("k-"))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("unexpected key in {r:?}"));
        assert_eq!(
            r.value.as_deref(),
            Some(&peer_value(i, 48)[..]),
            "value of {r:?}"
        );
        assert_eq!(
            r.headers,
            vec![
                ("h1".to_string(), Some(i.to_string().into_bytes())),
                ("h2".to_string(), Some(Vec::new())),
            ],
            "headers of {r:?}"
        );
        assert!((0..PARTITIONS as i32).contains(&r.partition), "{r:?}");
        partitions_seen.insert(r.partition);
    }
    // 100 keys over 3 partitions: the topic really has several partitions.
    assert!(
        partitions_seen.len() > 1,
        "{:?}: all records in one partition",
        broker.kind()
    );
    // Offsets per partition are dense from 0.
    for p in partitions_seen {
        let offsets: Vec<i64> = records
            .iter()
            .filter(|r| r.partition == p)
            .map(|r| r.offset)
            .collect();
        let dense: Vec<i64> = (0..offsets.len() as i64).collect();
        assert_eq!(
            offsets,
            dense,
            "{:?}: offsets of partition {p}",
            broker.kind()
        );
    }
}

/// kafka-python 2.3.3 (the second peer client of the group interop tests) must
/// be able to bootstrap and read metadata.
fn kafka_python_bootstraps(broker: &dyn Broker) {
    let topic = unique_name("smoke-kp");
    broker.create_topic(&topic, PARTITIONS);
    let out = peer(&[
        "kafka-python-metadata",
        "--bootstrap",
        &broker.bootstrap(),
        "--topic",
        &topic,
        "--timeout-s",
        "20",
    ]);
    assert_eq!(out.trim(), format!("partitions {topic} {PARTITIONS}"));
}

fn bootstrap_addr(broker: &dyn Broker) -> std::net::SocketAddr {
    let first = broker.bootstrap();
    let first = first.split(',').next().unwrap().to_string();
    let addr: std::net::SocketAddr = first.parse().expect("bootstrap is ip:port");
    assert!(
        addr.ip().is_loopback(),
        "broker must listen on loopback: {addr}"
    );
    addr
}

/// Apache Kafka of `version` (the run's shared broker): on loopback, answers ApiVersions v0
/// (which KIP-896 keeps in 4.x) and round-trips records through confluent-kafka.
fn kafka_roundtrip(version: KafkaVersion) {
    let kafka = Kafka::shared(version);
    eprintln!(
        "Kafka {} at {} (started by this test in {:?}; zero when handed over)",
        version.version(),
        kafka.bootstrap(),
        kafka.startup_time()
    );
    api_versions_probe(bootstrap_addr(&kafka)).expect("Kafka answers ApiVersions v0");
    produce_and_consume_roundtrip(&kafka);
}

#[test]
fn kafka_python_bootstraps_on_every_broker() {
    for kind in BrokerKind::ALL.into_iter().chain([BrokerKind::Kafka3]) {
        let broker = kind.start();
        kafka_python_bootstraps(&*broker);
    }
}

crate::on_brokers! {
    kafka {
        roundtrip => kafka_roundtrip(KafkaVersion::Newest),
    }

    kafka3 {
        roundtrip => kafka_roundtrip(KafkaVersion::Last3),
    }
}

mod mock {
    use super::*;

    #[test]
    fn roundtrip() {
        let mock = MockCluster::start(MockOptions::default());
        eprintln!("mock cluster up in {:?}", mock.startup_time());
        api_versions_probe(bootstrap_addr(&mock)).expect("mock answers ApiVersions v0");
        produce_and_consume_roundtrip(&mock);
    }
    #[test]
    fn commands() {
        let mock = MockCluster::start(MockOptions {
            brokers: 3,
            topics: vec![("pre".to_string(), 4)],
            initial_rebalance_delay_ms: 0,
        });
        assert_eq!(mock.bootstrap().split(',').count(), 3);
        mock.must("ping");
        mock.must("create_topic fresh 2 3");
        mock.must("leader fresh 0 2");
        mock.must("coordinator group g1 3");
        mock.must("rtt -1 0");
        mock.must("broker_down 2");
        mock.must("broker_up 2");
        mock.must("api_version Fetch 4 11");
        mock.must("push_errors JoinGroup REBALANCE_IN_PROGRESS 27 _TRANSPORT");
        mock.must("clear_errors JoinGroup");
        mock.must("broker_push_errors 1 Heartbeat NOT_COORDINATOR:10 0:0");
        mock.must("initial_rebalance_delay 0");
        let err = mock.command("no_such_command").unwrap_err();
        assert!(err.contains("unknown command"), "{err}");
        let err = mock
            .command("push_errors JoinGroup NOT_AN_ERROR")
            .unwrap_err();
        assert!(err.contains("unknown error code"), "{err}");
        let err = mock.command("coordinator shard g1 1").unwrap_err();
        assert!(err.contains("group or transaction"), "{err}");

        // Injected errors reach a real client: the next two Produce requests fail
        // with a non-retriable error, so the first record's delivery fails...
        mock.must("push_errors Produce TOPIC_AUTHORIZATION_FAILED TOPIC_AUTHORIZATION_FAILED");
        let (ok, _, stderr) = peer_try(&[
            "produce",
            "--bootstrap",
            mock.bootstrap(),
            "--topic",
            "pre",
            "--count",
            "1",
            "--partition",
            "0",
            "--timeout-s",
            "10",
        ]);
        assert!(!ok, "produce should fail on an injected error");
        assert!(stderr.contains("TOPIC_AUTHORIZATION_FAILED"), "{stderr}");
        // ...and with the stack drained, producing works again.
        mock.must("clear_errors Produce");
        peer_produce(mock.bootstrap(), "pre", 5, &["--partition", "1"]);
        let records = peer_consume(mock.bootstrap(), "pre", 5, &["--partition", "1"]);
        assert_eq!(records.len(), 5);

        // `quit` ends the script; later commands report that instead of hanging.
        mock.must("quit");
        let err = mock.command("ping").unwrap_err();
        assert!(err.contains("exited") || err.contains("write"), "{err}");
    }
}

mod tansu {
    use super::*;

    #[test]
    fn roundtrip() {
        let tansu = Tansu::start();
        eprintln!("tansu up in {:?}", tansu.startup_time());
        bootstrap_addr(&tansu);
        produce_and_consume_roundtrip(&tansu);
    }
}

/// The run's shared mock (`scripts/mock_cluster.py --serve`, `MockCluster::shared`) takes a
/// topic of a test's own, and refuses every command that would reach the other tests on it
/// (errors pushed for an API key, a broker down or slow, cluster settings): a test that needs
/// those starts a mock of its own.
#[test]
fn the_shared_mock_takes_topics_and_refuses_faults() {
    let mock = MockCluster::shared();
    let topic = unique_name("shared");
    mock.create_topic(&topic, 2);
    peer_produce(mock.bootstrap(), &topic, 5, &["--partition", "1"]);
    assert_eq!(
        peer_consume(mock.bootstrap(), &topic, 5, &["--partition", "1"]).len(),
        5
    );
    // A command it takes still reports the mock's own refusal.
    let err = mock
        .command(&format!("create_topic {topic} 2"))
        .unwrap_err();
    assert!(err.contains("TOPIC_ALREADY_EXISTS"), "{err}");
    for fault in [
        "push_errors JoinGroup REBALANCE_IN_PROGRESS",
        "clear_errors JoinGroup",
        "broker_push_errors 1 Heartbeat NOT_COORDINATOR:10",
        "broker_down 1",
        "rtt -1 100",
        "api_version Fetch 4 11",
        "initial_rebalance_delay 3000",
        "quit",
    ] {
        let err = mock.command(fault).unwrap_err();
        assert!(
            err.contains("not taken by the shared mock"),
            "{fault}: {err}"
        );
    }
    mock.command("ping").expect("the shared mock still answers");
}
