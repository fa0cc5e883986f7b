//! Version negotiation and failure recovery, driven by librdkafka's mock cluster fault
//! injection (`api_version`, `leader`, `broker_down`/`broker_up`). tansu has no fault injection
//! and always advertises its own full ranges, so these tests run on the mock only; the normal
//! negotiation path against tansu is exercised by every test in `wire::records`.
//! Needs `scripts/setup-test-env`.

use crate::support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use rebalance_guard::wire::{
    Client, ClientConfig, CommitIdentity, FetchConfig, FetchPosition, IsolationLevel, KafkaCode,
    OffsetCommitEntry, OffsetSpec, ProduceRecord, WireError,
};
use rebalance_guard::TopicPartition;
use support::{unique_name, MockCluster, MockOptions};

fn mock_with_topic(brokers: u32, topic: &str, partitions: u32) -> MockCluster {
    MockCluster::start(MockOptions {
        brokers,
        topics: vec![(topic.to_string(), partitions)],
        ..MockOptions::default()
    })
}

fn config(bootstrap: &str) -> ClientConfig {
    let mut cfg = ClientConfig::from_bootstrap_str(bootstrap);
    cfg.connection.request_timeout = Duration::from_secs(5);
    cfg.connection.connect_timeout = Duration::from_secs(2);
    cfg.retry_backoff = Duration::from_millis(50);
    cfg.retry_backoff_max = Duration::from_millis(200);
    cfg
}

fn records(n: usize) -> Vec<ProduceRecord> {
    (0..n)
        .map(|i| ProduceRecord {
            key: Some(Bytes::from(format!("k{i}"))),
            value: Some(Bytes::from(format!("v{i}"))),
            ..ProduceRecord::default()
        })
        .collect()
}

fn fetch_cfg() -> FetchConfig {
    FetchConfig {
        max_wait: Duration::from_millis(100),
        ..FetchConfig::default()
    }
}

/// The mock advertises only what a Kafka 2.1 broker supports for the APIs we use; the client
/// picks the highest common version of each (including falling back from ApiVersions v3 to a
/// version the broker knows) and everything still works at those versions.
#[test]
fn kafka_2_1_baseline_negotiation() {
    let topic = unique_name("baseline");
    let mock = mock_with_topic(1, &topic, 2);
    // (api, min, max) as advertised by Apache Kafka 2.1.
    let baseline = [
        ("Produce", 0, 7),
        ("Fetch", 0, 10),
        ("ListOffsets", 0, 4),
        ("Metadata", 0, 7),
        ("OffsetCommit", 0, 6),
        ("OffsetFetch", 0, 5),
        ("FindCoordinator", 0, 2),
        ("ApiVersions", 0, 2),
    ];
    for (api, lo, hi) in baseline {
        mock.must(&format!("api_version {api} {lo} {hi}"));
    }
    let mut c = Client::connect(config(mock.bootstrap())).expect("connect");
    let node = c.brokers()[0].node_id;
    let conn = c.connection(node).expect("connection");
    for (api, want) in [
        (ApiKey::Produce, 7),
        (ApiKey::Fetch, 10),
        (ApiKey::ListOffsets, 4),
        (ApiKey::Metadata, 7),
        (ApiKey::OffsetCommit, 6),
        (ApiKey::OffsetFetch, 5),
        (ApiKey::FindCoordinator, 2),
    ] {
        assert_eq!(conn.version_for(api).ok(), Some(want), "{api:?}");
    }
    let advertised = conn.versions().broker_range(ApiKey::ApiVersions);
    assert_eq!(advertised.map(|r| r.max), Some(2));

    // Produce, fetch, offsets and commits all work at the negotiated versions.
    let tp = TopicPartition::new(topic.as_str(), 1);
    assert_eq!(c.produce(&tp, &records(7)).expect("produce"), 0);
    let latest = c
        .list_offsets(
            std::slice::from_ref(&tp),
            OffsetSpec::Latest,
            IsolationLevel::ReadCommitted,
        )
        .expect("list offsets");
    assert_eq!(latest[&tp], 7);
    let f = c
        .fetch(
            &[FetchPosition {
                tp: tp.clone(),
                offset: 3,
            }],
            &fetch_cfg(),
        )
        .expect("fetch");
    assert!(f[0].error.is_none(), "{:?}", f[0].error);
    let offsets: Vec<i64> = f[0].records.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, [3, 4, 5, 6]);
    let group = unique_name("g");
    let who = CommitIdentity {
        group_id: &group,
        generation_id_or_member_epoch: -1,
        member_id: "",
        group_instance_id: None,
    };
    let res = c
        .offset_commit(
            &who,
            &[OffsetCommitEntry {
                tp: tp.clone(),
                offset: 5,
                leader_epoch: None,
                metadata: Some("m".into()),
            }],
        )
        .expect("commit");
    assert!(res.iter().all(|(_, r)| r.is_ok()), "{res:?}");
    let got = c
        .offset_fetch(&group, std::slice::from_ref(&tp))
        .expect("offset fetch");
    assert_eq!(got[0].offset, Some(5));
    assert_eq!(got[0].metadata.as_deref(), Some("m"));
}

/// When the broker's range for an API does not overlap ours, the error names the API and both
/// ranges, and nothing is sent at an unadvertised version.
#[test]
fn non_overlapping_fetch_versions_give_a_clear_error() {
    let topic = unique_name("nooverlap");
    let mock = mock_with_topic(1, &topic, 1);
    mock.must("api_version Fetch 0 3");
    let mut c = Client::connect(config(mock.bootstrap())).expect("connect");
    let tp = TopicPartition::new(topic.as_str(), 0);
    let f = c
        .fetch(&[FetchPosition { tp, offset: 0 }], &fetch_cfg())
        .expect("fetch call");
    let err = f[0].error.as_ref().expect("an error");
    assert!(
        matches!(
            err,
            WireError::UnsupportedVersion {
                ours: (4, _),
                broker: Some((0, 3)),
                ..
            }
        ),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains("Fetch"), "{msg}");
    assert!(msg.contains("0..=3"), "{msg}");
    assert!(msg.contains("4..="), "{msg}");
    assert!(!err.retriable());
}

/// The partition's leader moves to another broker: the first fetch to the old leader reports
/// NOT_LEADER_OR_FOLLOWER, the client refreshes metadata and the next fetch reads from the new
/// leader. Produce recovers inside its own retry loop.
#[test]
fn leader_moved_is_recovered_through_metadata_refresh() {
    let topic = unique_name("moved");
    let mock = mock_with_topic(3, &topic, 1);
    let mut c = Client::connect(config(mock.bootstrap())).expect("connect");
    let tp = TopicPartition::new(topic.as_str(), 0);
    c.produce(&tp, &records(5)).expect("produce");
    let old = c.leader(&tp).expect("leader");
    let new = if old == 1 { 2 } else { 1 };
    let pos = [FetchPosition {
        tp: tp.clone(),
        offset: 0,
    }];
    let f = c.fetch(&pos, &fetch_cfg()).expect("fetch");
    assert_eq!(f[0].records.len(), 5, "{:?}", f[0].error);

    mock.must(&format!("leader {topic} 0 {new}"));
    // The old leader answers NOT_LEADER_OR_FOLLOWER (at the latest on the second call: the
    // first may consume a prefetch that the old leader answered before the move).
    let mut saw_not_leader = false;
    let mut recovered = None;
    for _ in 0..4 {
        let mut f = c.fetch(&pos, &fetch_cfg()).expect("fetch");
        let f = f.remove(0);
        match &f.error {
            Some(e) => {
                assert_eq!(
                    e.kafka_code(),
                    Some(KafkaCode::NOT_LEADER_OR_FOLLOWER),
                    "{e:?}"
                );
                assert!(e.retriable());
                assert_eq!(f.next_offset, 0, "a failed fetch keeps the position");
                saw_not_leader = true;
            }
            None if saw_not_leader => {
                recovered = Some(f);
                break;
            }
            None => assert!(
                f.records.is_empty(),
                "data from the old leader after the move"
            ),
        }
    }
    assert!(saw_not_leader, "the old leader never refused the fetch");
    let f = recovered.expect("no successful fetch from the new leader");
    assert_eq!(f.records.len(), 5);
    assert_eq!(c.leader(&tp).expect("leader"), new);

    // Move it back: produce finds the new leader by itself.
    mock.must(&format!("leader {topic} 0 {old}"));
    assert_eq!(c.produce(&tp, &records(2)).expect("produce"), 5);
    assert_eq!(c.leader(&tp).expect("leader"), old);
}

/// The only broker goes down: operations fail after a bounded number of retries with an error
/// that says what failed and why; when it comes back the same client recovers.
#[test]
fn broker_down_then_up() {
    let topic = unique_name("down");
    let mock = mock_with_topic(1, &topic, 1);
    let mut cfg = config(mock.bootstrap());
    cfg.max_retries = 3;
    let mut c = Client::connect(cfg).expect("connect");
    let tp = TopicPartition::new(topic.as_str(), 0);
    c.produce(&tp, &records(3)).expect("produce");

    mock.must("broker_down 1");
    let started = Instant::now();
    let err = c
        .list_offsets(
            std::slice::from_ref(&tp),
            OffsetSpec::Latest,
            IsolationLevel::ReadUncommitted,
        )
        .expect_err("broker is down");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(20), "took {took:?}");
    match &err {
        WireError::RetriesExhausted { what, attempts, .. } => {
            assert_eq!(what, "ListOffsets");
            assert_eq!(*attempts, 3);
        }
        other => panic!("expected RetriesExhausted, got {other:?}"),
    }
    assert!(
        err.to_string()
            .contains("ListOffsets failed after 3 attempts"),
        "{err}"
    );
    // Fetch reports the outage per partition instead of failing or hanging.
    let f = c
        .fetch(
            &[FetchPosition {
                tp: tp.clone(),
                offset: 0,
            }],
            &fetch_cfg(),
        )
        .expect("fetch with cached leader");
    assert!(
        f[0].error.as_ref().is_some_and(WireError::retriable),
        "{:?}",
        f[0].error
    );

    mock.must("broker_up 1");
    let deadline = Instant::now() + Duration::from_secs(10);
    let latest = loop {
        match c.list_offsets(
            std::slice::from_ref(&tp),
            OffsetSpec::Latest,
            IsolationLevel::ReadUncommitted,
        ) {
            Ok(l) => break l,
            Err(e) if Instant::now() < deadline => {
                eprintln!("not yet: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("no recovery after broker_up: {e}"),
        }
    };
    assert_eq!(latest[&tp], 3);
    let f = c
        .fetch(&[FetchPosition { tp, offset: 0 }], &fetch_cfg())
        .expect("fetch");
    assert_eq!(f[0].records.len(), 3, "{:?}", f[0].error);
}

/// The group coordinator moves to another broker: the commit to the old one gets
/// NOT_COORDINATOR, the client looks the coordinator up again and the commit succeeds; a
/// transient COORDINATOR_LOAD_IN_PROGRESS on OffsetFetch is retried too.
#[test]
fn coordinator_moved_and_loading_are_retried() {
    let topic = unique_name("coord");
    let mock = mock_with_topic(3, &topic, 1);
    let mut c = Client::connect(config(mock.bootstrap())).expect("connect");
    let tp = TopicPartition::new(topic.as_str(), 0);
    let group = unique_name("g");
    let who = CommitIdentity {
        group_id: &group,
        generation_id_or_member_epoch: -1,
        member_id: "",
        group_instance_id: None,
    };
    let commit = |c: &mut Client, offset: i64| {
        let res = c
            .offset_commit(
                &who,
                &[OffsetCommitEntry {
                    tp: tp.clone(),
                    offset,
                    leader_epoch: None,
                    metadata: None,
                }],
            )
            .expect("commit");
        assert!(res.iter().all(|(_, r)| r.is_ok()), "{res:?}");
    };
    commit(&mut c, 1);
    let old = c.find_coordinator(&group).expect("coordinator").node_id;
    let new = if old == 1 { 2 } else { 1 };
    // The mock accepts commits on any broker, so the move is made visible the way a real
    // coordinator would: the old one answers NOT_COORDINATOR.
    mock.must(&format!("coordinator group {group} {new}"));
    mock.must("push_errors OffsetCommit NOT_COORDINATOR");
    commit(&mut c, 2);
    assert_eq!(
        c.find_coordinator(&group).expect("coordinator").node_id,
        new
    );

    mock.must("push_errors OffsetFetch COORDINATOR_LOAD_IN_PROGRESS COORDINATOR_LOAD_IN_PROGRESS");
    let got = c
        .offset_fetch(&group, std::slice::from_ref(&tp))
        .expect("offset fetch");
    assert_eq!(got[0].offset, Some(2));
}

/// A broker slower than the request timeout gives a Timeout (after bounded retries), and the
/// client recovers on its own once the broker is fast again.
#[test]
fn request_timeout_then_recovery() {
    let topic = unique_name("slow");
    let mock = mock_with_topic(1, &topic, 1);
    let mut cfg = config(mock.bootstrap());
    cfg.connection.request_timeout = Duration::from_millis(300);
    cfg.max_retries = 2;
    let mut c = Client::connect(cfg).expect("connect");
    let tp = TopicPartition::new(topic.as_str(), 0);
    c.produce(&tp, &records(2)).expect("produce");

    mock.must("rtt -1 1500");
    let started = Instant::now();
    let err = c
        .list_offsets(
            std::slice::from_ref(&tp),
            OffsetSpec::Latest,
            IsolationLevel::ReadUncommitted,
        )
        .expect_err("slower than the timeout");
    assert!(started.elapsed() < Duration::from_secs(10));
    match &err {
        WireError::RetriesExhausted { attempts: 2, .. } => {}
        other => panic!("expected RetriesExhausted after 2 attempts, got {other:?}"),
    }
    // The metadata refresh and the request itself time out; the error says so.
    let shown = rebalance_guard::ErrorChain(&err).to_string();
    assert!(shown.contains("timed out"), "{shown}");

    mock.must("rtt -1 0");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match c.list_offsets(
            std::slice::from_ref(&tp),
            OffsetSpec::Latest,
            IsolationLevel::ReadUncommitted,
        ) {
            Ok(l) => {
                assert_eq!(l[&tp], 2);
                break;
            }
            Err(e) if Instant::now() < deadline => {
                eprintln!("not yet: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("no recovery: {e}"),
        }
    }
}
