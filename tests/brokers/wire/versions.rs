//! Version negotiation against real Apache Kafka (the newest 4.x and the last 3.x): every
//! request this crate puts on the wire uses the highest version both sides have, and none is
//! below the floors that Kafka 4.0 set (KIP-896).
//!
//! Nothing here trusts the crate to report on itself:
//! * the broker's ranges come from an ApiVersions v3 request encoded by hand in this file;
//! * the versions actually sent are read off the wire by a recording TCP proxy between our
//!   client and the broker (it also rewrites the broker's port in Metadata and FindCoordinator
//!   answers, so every connection our client opens, the heartbeat thread's included, passes
//!   through it);
//! * only our side of the negotiation, the range of versions the crate says it speaks, comes
//!   from the crate (`wire::client_range`, `group::requests::supported_versions`).
//!
//! Where the crate caps an API below what Kafka has, the cap is listed in [`CAPS`] with the
//! reason the code gives, and the test fails on any cap that is not listed. Each test prints
//! its negotiated table. Needs `scripts/setup-test-env`.

use crate::support;

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use rebalance_guard::group::{
    requests, ClassicMember, GroupConfig, GroupContext, LostReason, Membership, RebalanceListener,
};
use rebalance_guard::wire::{
    client_range, Client, ClientConfig, CommitIdentity, FetchConfig, FetchPosition, IsolationLevel,
    OffsetCommitEntry, OffsetSpec, ProduceRecord, VersionRange,
};
use rebalance_guard::TopicPartition;
use support::fetch::fetch_answered;
use support::proxy::{read_frame, write_frame, Proxy};
use support::{unique_name, Kafka, KafkaVersion};

// ---------------------------------------------------------------------------
// The broker's own answer: ApiVersions v3, encoded and decoded here
// ---------------------------------------------------------------------------

fn put_uvarint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A cursor over a response body, failing with a message instead of panicking mid-way.
struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let s = self
            .b
            .get(self.at..self.at + n)
            .ok_or_else(|| format!("response ends at byte {} (wanted {n} more)", self.at))?;
        self.at += n;
        Ok(s)
    }
    fn i16(&mut self) -> Result<i16, String> {
        let s = self.take(2)?;
        Ok(i16::from_be_bytes([s[0], s[1]]))
    }
    fn i32(&mut self) -> Result<i32, String> {
        let s = self.take(4)?;
        Ok(i32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn uvarint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.take(1)?[0];
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("varint too long".into())
    }
    fn skip_tagged_fields(&mut self) -> Result<(), String> {
        for _ in 0..self.uvarint()? {
            self.uvarint()?; // tag
            let size = self.uvarint()? as usize;
            self.take(size)?;
        }
        Ok(())
    }
}

/// The (min, max) version of every API the broker at `addr` advertises, from an ApiVersions v3
/// request written byte by byte (request header v2, compact strings, tagged fields).
fn broker_api_versions(addr: &str) -> BTreeMap<i16, (i16, i16)> {
    const CORRELATION_ID: i32 = 0x7e57;
    let mut frame = Vec::new();
    frame.extend_from_slice(&(ApiKey::ApiVersions as i16).to_be_bytes());
    frame.extend_from_slice(&3i16.to_be_bytes());
    frame.extend_from_slice(&CORRELATION_ID.to_be_bytes());
    let client_id = b"wire-versions-probe";
    frame.extend_from_slice(&(client_id.len() as i16).to_be_bytes());
    frame.extend_from_slice(client_id);
    put_uvarint(&mut frame, 0); // header tagged fields
    for s in [&b"wire-versions-probe"[..], &b"1.0"[..]] {
        put_uvarint(&mut frame, s.len() as u64 + 1); // compact string
        frame.extend_from_slice(s);
    }
    put_uvarint(&mut frame, 0); // body tagged fields
    let mut request = (frame.len() as i32).to_be_bytes().to_vec();
    request.extend_from_slice(&frame);

    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&request).expect("write ApiVersions v3");
    let mut len = [0u8; 4];
    s.read_exact(&mut len).expect("ApiVersions response length");
    let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
    s.read_exact(&mut body).expect("ApiVersions response");
    // The ApiVersions response header is always v0: the correlation id only.
    let mut c = Cursor { b: &body, at: 0 };
    let parse = |c: &mut Cursor| -> Result<BTreeMap<i16, (i16, i16)>, String> {
        if c.i32()? != CORRELATION_ID {
            return Err("correlation id".into());
        }
        let error = c.i16()?;
        if error != 0 {
            return Err(format!("error code {error}"));
        }
        let n = c.uvarint()?.checked_sub(1).ok_or("null api_keys array")?;
        let mut apis = BTreeMap::new();
        for _ in 0..n {
            let key = c.i16()?;
            let min = c.i16()?;
            let max = c.i16()?;
            c.skip_tagged_fields()?;
            apis.insert(key, (min, max));
        }
        c.i32()?; // throttle_time_ms
        c.skip_tagged_fields()?; // supported and finalized features
        if c.at != c.b.len() {
            return Err(format!("{} bytes left over", c.b.len() - c.at));
        }
        Ok(apis)
    };
    parse(&mut c).unwrap_or_else(|e| panic!("ApiVersions v3 answer of {addr}: {e}"))
}

/// Whether the broker answers a Produce request of `version` (v2 or v3, encoded here) for a
/// topic that does not exist: an answer (UNKNOWN_TOPIC_OR_PARTITION inside) means the version
/// is accepted, a closed connection that it is refused.
fn produce_is_answered(addr: &str, version: i16) -> bool {
    assert!(version == 2 || version == 3);
    let mut frame = Vec::new();
    frame.extend_from_slice(&(ApiKey::Produce as i16).to_be_bytes());
    frame.extend_from_slice(&version.to_be_bytes());
    frame.extend_from_slice(&7i32.to_be_bytes());
    frame.extend_from_slice(&5i16.to_be_bytes());
    frame.extend_from_slice(b"probe");
    if version >= 3 {
        frame.extend_from_slice(&(-1i16).to_be_bytes()); // no transactional id
    }
    frame.extend_from_slice(&1i16.to_be_bytes()); // acks
    frame.extend_from_slice(&1000i32.to_be_bytes()); // timeout
    let topic = unique_name("no-such-topic");
    frame.extend_from_slice(&1i32.to_be_bytes());
    frame.extend_from_slice(&(topic.len() as i16).to_be_bytes());
    frame.extend_from_slice(topic.as_bytes());
    frame.extend_from_slice(&1i32.to_be_bytes());
    frame.extend_from_slice(&0i32.to_be_bytes()); // partition
    frame.extend_from_slice(&0i32.to_be_bytes()); // empty records
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write_frame(&mut s, &frame).expect("write Produce");
    match read_frame(&mut s) {
        Ok(body) => {
            assert_eq!(
                body.get(..4),
                Some(&7i32.to_be_bytes()[..]),
                "correlation id"
            );
            true
        }
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset
            ) =>
        {
            false
        }
        Err(e) => panic!("Produce v{version} to {addr}: {e}"),
    }
}

// ---------------------------------------------------------------------------
// Our side, and the caps below Kafka's versions that the code documents
// ---------------------------------------------------------------------------

/// The APIs this crate sends in this test's classic workload. `ConsumerGroupHeartbeat` (API 68,
/// sent under `group.protocol=consumer` only, at v0-1 as `group/consumer_group/wire.rs` says) is
/// not part of it: `tests/brokers/consumer/group_protocol.rs` and
/// `tests/brokers/consumer/kip848.rs` run it on Kafka 4.x.
const APIS: &[ApiKey] = &[
    ApiKey::ApiVersions,
    ApiKey::Metadata,
    ApiKey::CreateTopics,
    ApiKey::Produce,
    ApiKey::Fetch,
    ApiKey::ListOffsets,
    ApiKey::FindCoordinator,
    ApiKey::OffsetCommit,
    ApiKey::OffsetFetch,
    ApiKey::JoinGroup,
    ApiKey::SyncGroup,
    ApiKey::Heartbeat,
    ApiKey::LeaveGroup,
];

/// The range the crate declares for `api`: the group layer's own for the four group APIs, the
/// wire layer's for the others.
fn ours(api: ApiKey) -> VersionRange {
    match api {
        ApiKey::JoinGroup | ApiKey::SyncGroup | ApiKey::Heartbeat | ApiKey::LeaveGroup => {
            requests::supported_versions(api)
        }
        _ => client_range(api),
    }
}

/// The crate's caps below what Kafka 4.x advertises, with the reason its code or history
/// gives. A cap not listed here fails the test: a new one must come with its reason.
const CAPS: &[(ApiKey, i16, &str)] = &[
    (
        ApiKey::ApiVersions,
        3,
        "wire/versions.rs gives no reason (Kafka 3.9 has v4, whose only change is that \
         SupportedFeatures may list a min version 0, KAFKA-17011; Kafka 4.4 has v5)",
    ),
    (
        ApiKey::Metadata,
        12,
        "wire/versions.rs: newest version whose semantics the wire code handles",
    ),
    (
        ApiKey::Produce,
        12,
        "wire/versions.rs: v13 names topics by id only, which the produce paths do not \
         handle (v12 is transaction version 2; transactional batches of version 1 stay at v11)",
    ),
    (
        ApiKey::Fetch,
        12,
        "wire/mod.rs: Fetch v13 identifies topics by id only; no fetch sessions",
    ),
    (
        ApiKey::ListOffsets,
        7,
        "wire/versions.rs: newest version whose semantics the wire code handles",
    ),
    (
        ApiKey::FindCoordinator,
        4,
        "wire/versions.rs: newest version whose semantics the wire code handles",
    ),
    (
        ApiKey::OffsetCommit,
        9,
        "wire/versions.rs: topics by name (v10 identifies them by id)",
    ),
    (
        ApiKey::OffsetFetch,
        9,
        "wire/versions.rs: topics by name (v10 identifies them by id)",
    ),
    (
        ApiKey::JoinGroup,
        5,
        "group/requests.rs: last non-flexible version; librdkafka's mock advertises v6 and \
         closes the connection on it",
    ),
    (
        ApiKey::SyncGroup,
        3,
        "group/requests.rs: last non-flexible version (same cap as JoinGroup)",
    ),
    (
        ApiKey::Heartbeat,
        3,
        "group/requests.rs: last non-flexible version (same cap as JoinGroup)",
    ),
    (
        ApiKey::LeaveGroup,
        3,
        "group/requests.rs: last non-flexible version (same cap as JoinGroup)",
    ),
];

/// A dynamic member leaves with LeaveGroup v2 at most (group/requests.rs `leave_group`):
/// librdkafka's mock answers LeaveGroup v3 without the member list its schema requires. Static
/// members leave with v3 (they need its member identities); a closing static member does not
/// leave at all, so the LeaveGroup the workload sends is a dynamic member's.
const DYNAMIC_LEAVE_GROUP_MAX: i16 = 2;

/// The floors Kafka 4.0 set for the APIs we use (KIP-896: each API keeps the newest version
/// Kafka 2.1 had, and later ones), as `(api, min advertised by Kafka 4.x, lowest version Kafka
/// 4.x accepts)`. Two amendments since the KIP was adopted make the advertised minimum differ
/// from the KIP's table:
/// * Produce is advertised from v0 (KAFKA-18659, Kafka 4.0.0: librdkafka's compressed produce
///   fails unless ApiVersions lists Produce v0), but v0-v2 are still refused: the floor is 3;
/// * JoinGroup v0 and v1 came back (KAFKA-19444, Kafka 4.0.1 and 4.1.0, for librdkafka older
///   than 2.11 with Kerberos): advertised and accepted from v0.
const KIP_896_FLOORS: &[(ApiKey, i16, i16)] = &[
    (ApiKey::ApiVersions, 0, 0),
    (ApiKey::Metadata, 0, 0),
    (ApiKey::CreateTopics, 2, 2),
    (ApiKey::Produce, 0, 3),
    (ApiKey::Fetch, 4, 4),
    (ApiKey::ListOffsets, 1, 1),
    (ApiKey::FindCoordinator, 0, 0),
    (ApiKey::OffsetCommit, 2, 2),
    (ApiKey::OffsetFetch, 1, 1),
    (ApiKey::JoinGroup, 0, 0),
    (ApiKey::SyncGroup, 0, 0),
    (ApiKey::Heartbeat, 0, 0),
    (ApiKey::LeaveGroup, 0, 0),
];

// ---------------------------------------------------------------------------
// The workload: every API we use, through the proxy
// ---------------------------------------------------------------------------

struct Listener;

impl RebalanceListener for Listener {
    fn on_partitions_revoked(&mut self, _: &mut GroupContext<'_>, _: &[TopicPartition]) {}
    fn on_partitions_assigned(&mut self, _: &mut GroupContext<'_>, _: &[TopicPartition]) {}
    fn on_partitions_lost(&mut self, _: &[TopicPartition], _: &LostReason) {}
}

/// Runs every request this crate can send against the broker behind `proxy`: the wire client
/// (CreateTopics, Metadata, Produce, Fetch, ListOffsets, FindCoordinator, OffsetCommit,
/// OffsetFetch), then a group member that joins, syncs, heartbeats, commits and leaves.
fn workload(proxy: &Proxy) {
    let mut cfg = ClientConfig::from_bootstrap_str(proxy.addr());
    cfg.connection.request_timeout = Duration::from_secs(20);
    let mut c = Client::connect(cfg.clone()).expect("connect through the proxy");
    let topic = unique_name("versions");
    c.create_topics(&[(&topic, 2, 1)]).expect("create topic");
    let tp = TopicPartition::new(topic.as_str(), 0);
    // The new topic's leader may take a moment to be known: retry Produce on a bounded clock.
    let deadline = Instant::now() + Duration::from_secs(30);
    let record = ProduceRecord {
        key: Some(Bytes::from_static(b"k")),
        value: Some(Bytes::from_static(b"v")),
        headers: Vec::new(),
        timestamp: None,
    };
    loop {
        match c.produce(&tp, std::slice::from_ref(&record)) {
            Ok(_) => break,
            Err(e) if Instant::now() < deadline => {
                eprintln!("produce not yet: {e}");
                thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("produce: {e}"),
        }
    }
    let latest = c
        .list_offsets(
            std::slice::from_ref(&tp),
            OffsetSpec::Latest,
            IsolationLevel::ReadUncommitted,
        )
        .expect("list offsets");
    assert_eq!(latest[&tp], 1);
    let fetch = FetchConfig {
        max_wait: Duration::from_millis(100),
        ..FetchConfig::default()
    };
    let f = fetch_answered(
        &mut c,
        &[FetchPosition {
            tp: tp.clone(),
            offset: 0,
        }],
        &fetch,
    );
    assert_eq!(f[0].records.len(), 1, "{f:?}");
    let group = unique_name("versions-simple");
    let who = CommitIdentity {
        group_id: &group,
        generation_id_or_member_epoch: -1,
        member_id: "",
        group_instance_id: None,
    };
    let commit = [OffsetCommitEntry {
        tp: tp.clone(),
        offset: 1,
        leader_epoch: None,
        metadata: None,
    }];
    let results = c.offset_commit(&who, &commit).expect("commit");
    assert!(results.iter().all(|(_, r)| r.is_ok()), "{results:?}");
    let committed = c
        .offset_fetch(&group, std::slice::from_ref(&tp))
        .expect("offset fetch");
    assert_eq!(committed[0].offset, Some(1));

    // The group member: join (MEMBER_ID_REQUIRED, then again), sync, heartbeats from its own
    // thread and connection, a commit in its generation, and LeaveGroup on close.
    let config = GroupConfig {
        group_id: unique_name("versions-group"),
        group_instance_id: None,
        topics: vec![topic.clone()],
        pattern: None,
        exclude_internal_topics: true,
        metadata_max_age: Duration::from_secs(300),
        strategies: vec![rebalance_guard::group::Strategy::Range],
        session_timeout: Duration::from_secs(6),
        heartbeat_interval: Duration::from_millis(100),
        max_poll_interval: Duration::from_secs(30),
        rack: None,
    };
    let mut member = ClassicMember::new(
        config,
        cfg,
        Arc::new(|_: &[TopicPartition], _: &LostReason| {}),
    )
    .expect("group member");
    let mut listener = Listener;
    let deadline = Instant::now() + Duration::from_secs(60);
    let heartbeats = || {
        proxy
            .seen()
            .iter()
            .filter(|(k, _)| *k == ApiKey::Heartbeat as i16)
            .count()
    };
    while member.owned().len() < 2 || heartbeats() < 2 {
        assert!(
            Instant::now() < deadline,
            "no stable membership with heartbeats within 60 s: owned {:?}, {} heartbeats",
            member.owned(),
            heartbeats()
        );
        member
            .poll(&mut listener, Duration::from_millis(200))
            .expect("poll");
    }
    let results = member.commit(&commit).expect("member commit");
    assert!(results.iter().all(|(_, r)| r.is_ok()), "{results:?}");
    member.close(&mut listener).expect("close");
}

// ---------------------------------------------------------------------------
// The checks
// ---------------------------------------------------------------------------

fn name(api: ApiKey) -> String {
    format!("{api:?}")
}

struct Observed {
    kafka: String,
    broker: BTreeMap<i16, (i16, i16)>,
    /// Every version seen on the wire per API.
    sent: BTreeMap<i16, Vec<i16>>,
}

/// Asks the broker for its ranges, runs the workload through the proxy and prints the table.
fn observe(version: KafkaVersion) -> Observed {
    let started = Instant::now();
    let kafka = Kafka::shared(version);
    let broker = broker_api_versions(kafka.bootstrap());
    let proxy = Proxy::start(kafka.bootstrap());
    workload(&proxy);
    let mut sent: BTreeMap<i16, Vec<i16>> = BTreeMap::new();
    for (k, v) in proxy.seen() {
        let versions = sent.entry(k).or_default();
        if !versions.contains(&v) {
            versions.push(v);
        }
    }
    let kafka_version = version.version();
    let mut table = format!(
        "negotiated versions with Kafka {kafka_version} (on the wire, through the proxy):\n  \
         {:<16} {:>7} {:>8} {:>6} {:>7}  note\n",
        "API", "ours", "broker", "sent", "common"
    );
    for &api in APIS {
        let o = ours(api);
        let b = broker.get(&(api as i16)).copied();
        let common = b.map(|(lo, hi)| VersionRange::new(lo, hi).highest_common(o));
        let note = if api == ApiKey::LeaveGroup {
            format!("dynamic member: capped at v{DYNAMIC_LEAVE_GROUP_MAX}")
        } else if b.is_some_and(|(_, hi)| o.max < hi) {
            format!("capped by us at v{}", o.max)
        } else {
            String::new()
        };
        table.push_str(&format!(
            "  {:<16} {:>7} {:>8} {:>6} {:>7}  {note}\n",
            name(api),
            format!("{}-{}", o.min, o.max),
            b.map(|(lo, hi)| format!("{lo}-{hi}"))
                .unwrap_or_else(|| "none".into()),
            sent.get(&(api as i16))
                .map(|v| v
                    .iter()
                    .map(|v| v.to_string())
                    .collect::<Vec<_>>()
                    .join(","))
                .unwrap_or_else(|| "-".into()),
            common
                .flatten()
                .map(|v| v.to_string())
                .unwrap_or_else(|| "none".into()),
        ));
    }
    eprintln!("{table}workload and checks took {:?}", started.elapsed());
    Observed {
        kafka: kafka_version,
        broker,
        sent,
    }
}

/// Every API we use was sent, only at the highest version both sides have, and nothing else
/// went over the wire.
fn sent_versions_are_the_highest_common(o: &Observed) {
    for &key in o.sent.keys() {
        assert!(
            APIS.iter().any(|a| *a as i16 == key),
            "Kafka {}: we sent API {key} ({:?}), which this test does not know",
            o.kafka,
            ApiKey::try_from(key)
        );
    }
    for &api in APIS {
        let ours = ours(api);
        let (lo, hi) = *o
            .broker
            .get(&(api as i16))
            .unwrap_or_else(|| panic!("Kafka {} does not advertise {api:?}", o.kafka));
        let mut want = ours.max.min(hi);
        if api == ApiKey::LeaveGroup {
            want = want.min(DYNAMIC_LEAVE_GROUP_MAX);
        }
        assert!(
            want >= lo.max(ours.min),
            "Kafka {}: no common version of {api:?}: ours {ours:?}, broker {lo}-{hi}",
            o.kafka
        );
        let sent = o
            .sent
            .get(&(api as i16))
            .unwrap_or_else(|| panic!("Kafka {}: the workload sent no {api:?}", o.kafka));
        assert_eq!(
            sent,
            &vec![want],
            "Kafka {}: {api:?} sent at {sent:?}, the highest common version is {want} \
             (ours {}-{}, broker {lo}-{hi})",
            o.kafka,
            ours.min,
            ours.max
        );
    }
}

/// Every cap of ours below the broker's maximum is one that [`CAPS`] lists with its reason.
fn caps_below_kafka_are_documented(o: &Observed) {
    for &api in APIS {
        let ours = ours(api);
        let (_, hi) = o.broker[&(api as i16)];
        let listed = CAPS.iter().find(|(a, _, _)| *a == api);
        if ours.max < hi {
            let (_, cap, reason) = listed.unwrap_or_else(|| {
                panic!(
                    "Kafka {} has {api:?} up to v{hi}, we stop at v{}: an undocumented cap",
                    o.kafka, ours.max
                )
            });
            assert_eq!(*cap, ours.max, "{api:?}: the cap moved; update its reason");
            eprintln!(
                "Kafka {}: {api:?} capped at v{cap} (broker has v{hi}): {reason}",
                o.kafka
            );
        }
    }
}

mod kafka {
    use super::*;

    #[test]
    fn sent_versions_are_the_highest_common() {
        let o = observe(KafkaVersion::Newest);
        super::sent_versions_are_the_highest_common(&o);
        caps_below_kafka_are_documented(&o);
    }
    /// Kafka 4.x advertises exactly the KIP-896 minimums (as amended, see [`KIP_896_FLOORS`]) for
    /// the APIs we use, and nothing we send is below the floors: checked against the broker's own
    /// answer and against what went over the wire. Our declared minimums are at or above the
    /// floors too, so no broker can make us send less. (Kafka 3.x still has every version from 0:
    /// `kafka3::every_version_from_0_is_still_taken`.)
    #[test]
    fn nothing_sent_is_below_the_kip_896_floors() {
        let o = observe(KafkaVersion::Newest);
        for &(api, advertised, floor) in KIP_896_FLOORS {
            let (lo, _) = o.broker[&(api as i16)];
            assert_eq!(
                lo, advertised,
                "Kafka {}: {api:?} advertises min v{lo}, KIP-896 (amended) says v{advertised}",
                o.kafka
            );
            for &v in &o.sent[&(api as i16)] {
                assert!(
                    v >= floor.max(lo),
                    "Kafka {}: {api:?} sent at v{v}, below the floor v{}",
                    o.kafka,
                    floor.max(lo)
                );
            }
            assert!(
                ours(api).min >= floor,
                "{api:?}: we declare v{} and up, Kafka 4 refuses below v{floor}",
                ours(api).min
            );
        }
        // Produce is advertised from v0 but refused below v3: Kafka closes the connection.
        let new = Kafka::shared(KafkaVersion::Newest).bootstrap();
        assert!(
            !produce_is_answered(new, 2),
            "Kafka {} took Produce v2",
            o.kafka
        );
        assert!(
            produce_is_answered(new, 3),
            "Kafka {} refused Produce v3",
            o.kafka
        );
    }
}

mod kafka3 {
    use super::*;

    #[test]
    fn sent_versions_are_the_highest_common() {
        let o = observe(KafkaVersion::Last3);
        super::sent_versions_are_the_highest_common(&o);
        caps_below_kafka_are_documented(&o);
    }
    /// Before KIP-896 (Kafka 3.x and older), every API we use is advertised from v0 and Produce v2
    /// is still answered: the floors above are a 4.0 change, not a constant of the protocol.
    #[test]
    fn every_version_from_0_is_still_taken() {
        let old = Kafka::shared(KafkaVersion::Last3);
        let old_apis = broker_api_versions(old.bootstrap());
        for &(api, _, _) in KIP_896_FLOORS {
            assert_eq!(
                old_apis.get(&(api as i16)).map(|r| r.0),
                Some(0),
                "Kafka {}: {api:?} min",
                KafkaVersion::Last3.version()
            );
        }
        assert!(
            produce_is_answered(old.bootstrap(), 2),
            "Kafka {} refused Produce v2",
            KafkaVersion::Last3.version()
        );
    }
}
