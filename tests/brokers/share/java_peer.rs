//! The Java share peer (`scripts/SharePeer.java`, Apache Kafka's `KafkaShareConsumer` with
//! explicit acknowledgement) on the shared Kafka 4.4 broker: the harness the share-group interop
//! tests stand on. Two Java members in one share group take every record of a fresh topic
//! exactly once between them (no fault, so no redelivery), a record RELEASEd on its first
//! delivery comes back with delivery count 2 and is applied then, and a REJECTed one is never
//! delivered again.

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use support::kafka::{require_kafka, Kafka, KafkaVersion};
use support::share_peer::{set_share_group_config, ShareEvent, SharePeer, SharePeerSpec};
use support::{peer, unique_name};

const RECORDS: usize = 60;
const PARTITIONS: u32 = 3;

fn applied_positions(events: &[ShareEvent]) -> Vec<(i32, i64)> {
    events
        .iter()
        .filter(|e| e.event == "applied")
        .filter_map(|e| Some((e.partition?, e.offset?)))
        .collect()
}

#[test]
fn two_java_share_members_take_each_record_once_and_see_releases_come_back() {
    require_kafka(KafkaVersion::Newest, (4, 1), "share groups (KIP-932)");
    let kafka = Kafka::shared(KafkaVersion::Newest);
    let bootstrap = kafka.bootstrap();
    let topic = unique_name("share-java");
    let group = unique_name("share-java");
    peer(&[
        "create-topic",
        "--bootstrap",
        bootstrap,
        "--topic",
        &topic,
        "--partitions",
        &PARTITIONS.to_string(),
    ]);
    // Keys k-0 .. k-59.
    peer(&[
        "produce",
        "--bootstrap",
        bootstrap,
        "--topic",
        &topic,
        "--count",
        &RECORDS.to_string(),
    ]);
    set_share_group_config(
        bootstrap,
        &group,
        &[("share.auto.offset.reset", "earliest")],
    );

    // Both with the same rules: whichever gets k-3 first releases it, whichever gets k-5 rejects
    // it.
    let member = |name: &str| {
        let mut spec = SharePeerSpec::new(bootstrap, &group, &topic, name);
        spec.release_first = vec!["k-3".to_string()];
        spec.reject = vec!["k-5".to_string()];
        SharePeer::start(spec)
    };
    let a = member("java-a");
    let b = member("java-b");
    // Every record but the rejected one applied by one of the two; the bound covers two JVMs
    // starting on a loaded machine and the share group's first assignment.
    let wanted = RECORDS - 1;
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let mut all = applied_positions(&a.events());
        all.extend(applied_positions(&b.events()));
        all.sort_unstable();
        all.dedup();
        if all.len() >= wanted {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "only {} of {wanted} records applied within 120 s",
            all.len()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let events: Vec<ShareEvent> = a.close().into_iter().chain(b.close()).collect();

    let mut applied: BTreeMap<(i32, i64), Vec<&ShareEvent>> = BTreeMap::new();
    for e in events.iter().filter(|e| e.event == "applied") {
        applied
            .entry((e.partition.unwrap_or(-1), e.offset.unwrap_or(-1)))
            .or_default()
            .push(e);
    }
    assert_eq!(applied.len(), wanted, "distinct records applied");
    for (at, apps) in &applied {
        assert_eq!(apps.len(), 1, "record {at:?} applied {} times", apps.len());
    }
    let by_key = |kind: &str, key: &str| -> Vec<&ShareEvent> {
        events
            .iter()
            .filter(|e| e.event == kind && e.key.as_deref() == Some(key))
            .collect()
    };
    let released = by_key("released", "k-3");
    assert_eq!(released.len(), 1, "k-3 released once: {released:?}");
    assert_eq!(released[0].delivery_count, Some(1));
    let redone = by_key("applied", "k-3");
    assert_eq!(redone.len(), 1, "k-3 applied once: {redone:?}");
    assert_eq!(
        redone[0].delivery_count,
        Some(2),
        "k-3 came back as its second delivery"
    );
    assert!(redone[0].mono_ns > released[0].mono_ns);
    assert_eq!(by_key("rejected", "k-5").len(), 1, "k-5 rejected once");
    assert!(
        by_key("applied", "k-5").is_empty(),
        "a rejected record is not delivered again"
    );
    // Every commitSync the members made was accepted.
    let refused: Vec<_> = events
        .iter()
        .filter(|e| e.event == "ack_failed" || (e.event == "commit" && e.json["ok"] != true))
        .collect();
    assert!(refused.is_empty(), "acknowledgements refused: {refused:?}");
}
