//! The share-group wire layer (`wire::share`) against real Apache Kafka 4.4: a member joins a
//! share group with a raw ShareGroupHeartbeat (membership proper is `group::share`'s), and a
//! `ShareFetcher` acquires, acknowledges (piggybacked and flushed), releases, rejects and
//! renews records, and survives a share-session reset.
//!
//! The broker is the run's shared 4.4 broker, whose `group.share.min.record.lock.duration.ms`
//! is 1000 (`scripts/kafka_broker.py`), so a group can lock records for 2 s and the RENEW test
//! takes seconds, not the 15 s of Kafka's default minimum. Group configs are set
//! with a raw IncrementalAlterConfigs (resource type 32, GROUP). Needs `scripts/setup-test-env`.

use crate::support;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    self as msg, incremental_alter_configs_request as iac, ApiKey, RequestHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use rebalance_guard::guard::{AckType, SessionScope};
use rebalance_guard::wire::share::{
    AckError, AcquiredRecord, ShareAck, ShareFetchSettings, ShareFetcher,
};
use rebalance_guard::wire::{Client, ClientConfig, KafkaCode, ProduceRecord};
use rebalance_guard::TopicPartition;
use support::{unique_name, Kafka, KafkaVersion};

/// The group's record lock.
const LOCK: Duration = Duration::from_millis(2000);

fn kafka() -> &'static Kafka {
    Kafka::shared(KafkaVersion::Newest)
}

/// One request over a fresh socket, encoded and decoded by kafka-protocol (the test's own
/// tool: the broker is trusted here).
fn raw<Req: Encodable + HeaderVersion, Resp: Decodable + HeaderVersion>(
    addr: &str,
    key: ApiKey,
    version: i16,
    req: &Req,
) -> Resp {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(15)))
        .expect("timeout");
    let mut body = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(1)
        .with_client_id(Some(StrBytes::from_static_str("wire-share-test")))
        .encode(&mut body, Req::header_version(version))
        .expect("header");
    req.encode(&mut body, version).expect("encode");
    let mut frame = BytesMut::new();
    frame.put_i32(body.len() as i32);
    frame.put_slice(&body);
    s.write_all(&frame).expect("write");
    let mut len = [0u8; 4];
    s.read_exact(&mut len).expect("length");
    let mut buf = vec![0u8; i32::from_be_bytes(len) as usize];
    s.read_exact(&mut buf).expect("body");
    let mut b = Bytes::from(buf);
    let _ = msg::ResponseHeader::decode(&mut b, Resp::header_version(version)).expect("header");
    Resp::decode(&mut b, version).expect("decode")
}

/// Sets share-group configs with IncrementalAlterConfigs (GROUP = resource type 32).
fn set_group_configs(addr: &str, group: &str, configs: &[(&str, &str)]) {
    let req = msg::IncrementalAlterConfigsRequest::default().with_resources(vec![
        iac::AlterConfigsResource::default()
            .with_resource_type(32)
            .with_resource_name(StrBytes::from_string(group.to_string()))
            .with_configs(
                configs
                    .iter()
                    .map(|(k, v)| {
                        iac::AlterableConfig::default()
                            .with_name(StrBytes::from_string(k.to_string()))
                            .with_config_operation(0)
                            .with_value(Some(StrBytes::from_string(v.to_string())))
                    })
                    .collect(),
            ),
    ]);
    let resp: msg::IncrementalAlterConfigsResponse =
        raw(addr, ApiKey::IncrementalAlterConfigs, 1, &req);
    for r in resp.responses {
        assert_eq!(
            r.error_code, 0,
            "alter group configs: {:?}",
            r.error_message
        );
    }
}

/// A member of `group` subscribed to `topic`, heartbeating until it is assigned `partitions`
/// partitions; returns its member id.
fn join(coordinator: &str, group: &str, topic: &str, partitions: usize) -> (String, i32) {
    let member = format!("m{}", unique_name("x").replace(['-', '_', '.'], ""));
    let mut epoch = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let req = msg::ShareGroupHeartbeatRequest::default()
            .with_group_id(StrBytes::from_string(group.to_string()).into())
            .with_member_id(StrBytes::from_string(member.clone()))
            .with_member_epoch(epoch)
            .with_subscribed_topic_names(
                (epoch == 0).then(|| vec![TopicName(StrBytes::from_string(topic.to_string()))]),
            );
        let resp: msg::ShareGroupHeartbeatResponse =
            raw(coordinator, ApiKey::ShareGroupHeartbeat, 1, &req);
        // The coordinator may still be loading or electing on a fresh broker.
        if (14..=16).contains(&resp.error_code) {
            thread::sleep(Duration::from_millis(200));
            continue;
        }
        assert_eq!(resp.error_code, 0, "heartbeat: {:?}", resp.error_message);
        epoch = resp.member_epoch;
        let assigned: usize = resp
            .assignment
            .map(|a| a.topic_partitions.iter().map(|t| t.partitions.len()).sum())
            .unwrap_or(0);
        if assigned == partitions {
            return (member, epoch);
        }
        thread::sleep(Duration::from_millis(200));
    }
    panic!("{member} was not assigned {partitions} partition(s) of {topic} in 30 s");
}

struct Setup {
    fetcher: ShareFetcher,
    tp: TopicPartition,
    coordinator: String,
    epoch: i32,
}

/// A topic of one partition with `n` records and a member of a new share group assigned it.
fn setup(n: usize) -> Setup {
    let kafka = kafka();
    let topic = unique_name("share-topic");
    let group = unique_name("share-group");
    let cfg = ClientConfig::from_bootstrap_str(kafka.bootstrap());
    let mut client = Client::connect(cfg.clone()).expect("connect");
    client.create_topics(&[(&topic, 1, 1)]).expect("topic");
    let tp = TopicPartition::new(topic.as_str(), 0);
    let records: Vec<ProduceRecord> = (0..n)
        .map(|i| ProduceRecord {
            value: Some(Bytes::from(format!("v{i}"))),
            ..ProduceRecord::default()
        })
        .collect();
    client.produce(&tp, &records).expect("produce");
    let lock_ms = LOCK.as_millis().to_string();
    set_group_configs(
        kafka.bootstrap(),
        &group,
        &[
            ("share.auto.offset.reset", "earliest"),
            ("share.record.lock.duration.ms", &lock_ms),
        ],
    );
    let coordinator = client.find_coordinator(&group).expect("coordinator").addr();
    let (member, epoch) = join(&coordinator, &group, &topic, 1);
    let settings = ShareFetchSettings {
        max_wait: Duration::from_millis(300),
        ..ShareFetchSettings::default()
    };
    let mut fetcher = ShareFetcher::new(cfg, &group, &member, settings).expect("fetcher");
    fetcher.assign(&BTreeSet::from([tp.clone()]));
    Setup {
        fetcher,
        tp,
        coordinator,
        epoch,
    }
}

/// Fetch rounds until `want` records came (at most 40 rounds), with every ack outcome seen.
fn fetch_until(
    f: &mut ShareFetcher,
    want: usize,
) -> (
    Vec<AcquiredRecord>,
    Instant,
    Vec<rebalance_guard::wire::share::AckResult>,
) {
    let mut got = Vec::new();
    let mut acks = Vec::new();
    let mut sent_at = Instant::now();
    for _ in 0..40 {
        let round = f.fetch().expect("fetch");
        assert!(round.errors.is_empty(), "{:?}", round.errors);
        acks.extend(round.ack_results);
        for b in round.batches {
            assert!(
                b.lock_duration <= LOCK && !b.lock_duration.is_zero(),
                "{b:?}"
            );
            sent_at = b.sent_at;
            LAST_SCOPE.with(|last| *last.borrow_mut() = Some(b.scope.clone()));
            got.extend(b.records);
        }
        if got.len() >= want {
            break;
        }
    }
    (got, sent_at, acks)
}

thread_local! {
    /// The session scope of the records `fetch_until` acquired last.
    static LAST_SCOPE: std::cell::RefCell<Option<SessionScope>> = const { std::cell::RefCell::new(None) };
}

/// An acknowledgement of a record `fetch_until` acquired last, never dropped for its lock
/// (these tests measure what the broker says).
fn ack(tp: &TopicPartition, offset: i64, kind: AckType) -> ShareAck {
    ShareAck {
        tp: tp.clone(),
        offset,
        kind,
        scope: LAST_SCOPE.with(|last| last.borrow().clone().expect("records acquired")),
        lock_ends_by: Instant::now() + Duration::from_secs(60),
        deadline: Instant::now() + Duration::from_secs(60),
    }
}

#[test]
fn acquire_accept_release_reject_and_flush() {
    let Setup {
        mut fetcher, tp, ..
    } = setup(6);
    let (got, _, _) = fetch_until(&mut fetcher, 6);
    let offsets: Vec<i64> = got.iter().map(|r| r.record.offset).collect();
    assert_eq!(offsets, vec![0, 1, 2, 3, 4, 5]);
    assert!(got.iter().all(|r| r.delivery_count == 1), "{got:?}");
    // ACCEPT 0-2 through a flushed ShareAcknowledge, then 3 piggybacked on the next fetch:
    // that the piggybacked one succeeds shows the flush moved the session epoch on.
    fetcher.acknowledge((0..3).map(|o| ack(&tp, o, AckType::Accept)));
    let flushed = fetcher.flush_acks(Duration::from_secs(10));
    assert_eq!(flushed.len(), 1, "{flushed:?}");
    assert_eq!(flushed[0].outcome, Ok(()), "{flushed:?}");
    fetcher.acknowledge([
        ack(&tp, 3, AckType::Accept),
        ack(&tp, 4, AckType::Release),
        ack(&tp, 5, AckType::Reject),
    ]);
    let (back, _, acks) = fetch_until(&mut fetcher, 1);
    assert!(!acks.is_empty());
    assert!(acks.iter().all(|a| a.outcome.is_ok()), "{acks:?}");
    let back: Vec<(i64, u16)> = back
        .iter()
        .map(|r| (r.record.offset, r.delivery_count))
        .collect();
    assert_eq!(
        back,
        vec![(4, 2)],
        "the released record comes back, the rejected one not"
    );
    fetcher.acknowledge([ack(&tp, 4, AckType::Accept)]);
    let ok = fetcher.flush_acks(Duration::from_secs(10));
    assert!(ok.iter().all(|a| a.outcome.is_ok()), "{ok:?}");
    // Measured on 4.4: accepting it again, once every offset of the partition is acknowledged
    // (the share-partition start offset moved past it), is answered without error.
    fetcher.acknowledge([ack(&tp, 4, AckType::Accept)]);
    let twice = fetcher.flush_acks(Duration::from_secs(10));
    println!("accepted twice: {twice:?}");
    assert_eq!(twice.len(), 1);
    let closed = fetcher.close(Duration::from_secs(10));
    assert!(closed.is_empty(), "{closed:?}");
}

#[test]
fn renew_keeps_a_lock_past_its_first_duration() {
    let Setup {
        mut fetcher, tp, ..
    } = setup(2);
    let (got, sent_at, _) = fetch_until(&mut fetcher, 2);
    assert_eq!(got.len(), 2);
    assert!(
        fetcher.supports_renew(),
        "Kafka 4.4 speaks ShareAcknowledge v2"
    );
    // Renew record 0 halfway through its lock; leave record 1 alone.
    thread::sleep((sent_at + LOCK / 2).saturating_duration_since(Instant::now()));
    let renewed = fetcher.renew(&[(tp.clone(), 0)], Duration::from_secs(5));
    assert!(
        renewed.results.iter().all(|r| r.outcome.is_ok()),
        "{renewed:?}"
    );
    let lock = renewed.lock_duration.expect("v2 answers the lock duration");
    assert_eq!(lock, LOCK);
    // Past the first lock (plus a second for the broker's timer), before the renewed one ends.
    let first_end = sent_at + LOCK + Duration::from_millis(500);
    thread::sleep(first_end.saturating_duration_since(Instant::now()));
    assert!(
        Instant::now() < renewed.sent_at + lock,
        "the test ran too slowly to tell"
    );
    fetcher.acknowledge([ack(&tp, 0, AckType::Accept)]);
    let kept = fetcher.flush_acks(Duration::from_secs(5));
    assert_eq!(kept.len(), 1);
    assert_eq!(
        kept[0].outcome,
        Ok(()),
        "the renewed lock outlived the first: {kept:?}"
    );
    // The control: the unrenewed record's lock expired, so accepting it is refused.
    let expired = sent_at + LOCK + Duration::from_millis(1000);
    thread::sleep(expired.saturating_duration_since(Instant::now()));
    fetcher.acknowledge([ack(&tp, 1, AckType::Accept)]);
    let late = fetcher.flush_acks(Duration::from_secs(5));
    assert_eq!(
        late[0].outcome,
        Err(AckError::Kafka(KafkaCode::INVALID_RECORD_STATE)),
        "{late:?}"
    );
}

#[test]
fn a_session_replaced_behind_our_back_resets_and_fails_its_acks() {
    let Setup {
        mut fetcher, tp, ..
    } = setup(3);
    let (got, _, _) = fetch_until(&mut fetcher, 3);
    assert_eq!(got.len(), 3);
    // Two more requests, so our epoch is past 1: measured, the replacing session expects
    // epoch 1 next, and a request of ours that happens to carry 1 is taken into it.
    for _ in 0..2 {
        let round = fetcher.fetch().expect("fetch");
        assert!(
            round.batches.is_empty() && round.errors.is_empty(),
            "{round:?}"
        );
    }
    // Open a new session for the same member on another connection: ours is gone.
    let kafka = kafka();
    let mut client =
        Client::connect(ClientConfig::from_bootstrap_str(kafka.bootstrap())).expect("connect");
    let leader = client.leader(&tp).expect("leader");
    let addr = client.broker(leader).expect("broker").addr();
    let (group, member) = fetcher.identity();
    let req = msg::ShareFetchRequest::default()
        .with_group_id(Some(StrBytes::from_string(group.to_string()).into()))
        .with_member_id(Some(StrBytes::from_string(member.to_string())))
        .with_share_session_epoch(0)
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(1024)
        .with_max_records(1)
        .with_batch_size(1);
    let other: msg::ShareFetchResponse = raw(&addr, ApiKey::ShareFetch, 1, &req);
    println!("the second session's opening: error {}", other.error_code);
    fetcher.acknowledge([ack(&tp, 0, AckType::Accept)]);
    let round = fetcher.fetch().expect("fetch");
    println!("after the replacement: {:?}", round.ack_results);
    let failed: Vec<_> = round
        .ack_results
        .iter()
        .map(|a| a.outcome.clone())
        .collect();
    assert_eq!(failed.len(), 1);
    assert!(
        matches!(failed[0], Err(AckError::Kafka(KafkaCode(122 | 123)))),
        "{failed:?}"
    );
    // The session reopens with the next fetch. Acknowledgements decided for the records the
    // replaced session acquired are dropped, never sent in the new one: a session that ended
    // may have had its records released and acquired again, by another member or by this one.
    let _ = fetcher.fetch().expect("fetch");
    fetcher.acknowledge((0..3).map(|o| ack(&tp, o, AckType::Accept)));
    let again = fetcher.flush_acks(Duration::from_secs(10));
    println!("after reopening: {again:?}");
    assert!(
        again
            .iter()
            .all(|a| a.outcome == Err(AckError::SessionEnded)),
        "{again:?}"
    );
}

/// One heartbeat of `member` (epoch -1: it leaves); returns the error and the new epoch.
fn heartbeat(
    coordinator: &str,
    group: &str,
    member: &str,
    epoch: i32,
    topics: Option<Vec<String>>,
) -> (i16, i32) {
    let req = msg::ShareGroupHeartbeatRequest::default()
        .with_group_id(StrBytes::from_string(group.to_string()).into())
        .with_member_id(StrBytes::from_string(member.to_string()))
        .with_member_epoch(epoch)
        .with_subscribed_topic_names(topics.map(|ts| {
            ts.into_iter()
                .map(|t| TopicName(StrBytes::from_string(t)))
                .collect()
        }));
    let resp: msg::ShareGroupHeartbeatResponse =
        raw(coordinator, ApiKey::ShareGroupHeartbeat, 1, &req);
    (resp.error_code, resp.member_epoch)
}

/// Fetch rounds (at most 10) until one acquires something; returns the records acquired and
/// every acknowledgement outcome seen.
fn fetch_some(f: &mut ShareFetcher) -> (usize, Vec<rebalance_guard::wire::share::AckResult>) {
    let mut acks = Vec::new();
    for _ in 0..10 {
        let round = f.fetch().expect("fetch");
        assert!(round.errors.is_empty(), "{:?}", round.errors);
        acks.extend(round.ack_results);
        let n: usize = round.batches.iter().map(|b| b.records.len()).sum();
        if n > 0 {
            return (n, acks);
        }
    }
    (0, acks)
}

/// Measured on 4.4: a member's share session goes on acquiring records of a partition after
/// its assignment lost it, and even after the member left the group; so whether to fetch a
/// partition is the client's to decide (`ShareFetcher::assign`). And a ShareAcknowledge
/// cannot open a session: at epoch 0 it is refused with INVALID_SHARE_SESSION_EPOCH.
#[test]
fn the_broker_does_not_hold_a_session_to_the_assignment() {
    let Setup {
        mut fetcher,
        tp,
        coordinator,
        epoch,
    } = setup(2);
    let (got, _, _) = fetch_until(&mut fetcher, 2);
    assert_eq!(got.len(), 2);
    let (group, member) = {
        let (g, m) = fetcher.identity();
        (g.to_string(), m.to_string())
    };
    let mut client =
        Client::connect(ClientConfig::from_bootstrap_str(kafka().bootstrap())).expect("connect");
    let more = [ProduceRecord {
        value: Some(Bytes::from_static(b"later")),
        ..ProduceRecord::default()
    }];
    // Unsubscribed: the assignment is empty, the session still acquires and acknowledges.
    let (err, epoch) = heartbeat(&coordinator, &group, &member, epoch, Some(vec![]));
    assert_eq!(err, 0);
    client.produce(&tp, &more).expect("produce");
    fetcher.acknowledge([ack(&tp, 0, AckType::Accept)]);
    let (n, acks) = fetch_some(&mut fetcher);
    assert_eq!(n, 1, "the unassigned partition's new record");
    assert_eq!(acks.len(), 1);
    assert_eq!(acks[0].outcome, Ok(()), "{acks:?}");
    // Left the group: the same.
    let (err, _) = heartbeat(&coordinator, &group, &member, -1, None);
    assert_eq!(err, 0);
    assert!(epoch > 0);
    client.produce(&tp, &more).expect("produce");
    fetcher.acknowledge([ack(&tp, 1, AckType::Accept)]);
    let (n, acks) = fetch_some(&mut fetcher);
    assert_eq!(n, 1, "a record acquired by a member that left");
    assert_eq!(acks[0].outcome, Ok(()), "{acks:?}");
    let closed = fetcher.close(Duration::from_secs(5));
    assert!(closed.is_empty(), "{closed:?}");
    let leader = client.leader(&tp).expect("leader");
    let addr = client.broker(leader).expect("broker").addr();
    let req = msg::ShareAcknowledgeRequest::default()
        .with_group_id(Some(StrBytes::from_string(group).into()))
        .with_member_id(Some(StrBytes::from_string(member)))
        .with_share_session_epoch(0);
    let resp: msg::ShareAcknowledgeResponse = raw(&addr, ApiKey::ShareAcknowledge, 1, &req);
    assert_eq!(resp.error_code, 123, "INVALID_SHARE_SESSION_EPOCH");
}
