//! Fetching from a preferred read replica (KIP-392) against two fake brokers that speak Fetch
//! v12: a leader that names broker 2 to a fetch carrying a rack and serves a fetch without one,
//! and a follower whose log ends below the position (OFFSET_OUT_OF_RANGE). A lagging follower's
//! answer must never reach the caller as an error (the consumer would reset its position), and
//! the leader, asked again without `client.rack`, must serve the partition itself.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::{
    fetch_response, ApiKey, BrokerId, FetchRequest, FetchResponse, RequestHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use super::{FetchConfig, FetchPosition};
use crate::wire::client::cluster::BrokerInfo;
use crate::wire::records::tests::batches;
use crate::wire::{Client, ClientConfig, KafkaCode};
use crate::TopicPartition;

#[derive(Clone, Copy)]
enum Role {
    /// Names broker 2 to a fetch with a rack (no records), serves records 0..=2 to one without.
    Leader,
    /// Answers OFFSET_OUT_OF_RANGE: its log ends below the position.
    LaggingFollower,
}

fn fake_broker(role: Role) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            thread::spawn(move || serve(conn, role));
        }
    });
    addr
}

/// One request frame a fake broker reads from its client: the api key, the version and the
/// request's bytes (header included; `req[4..8]` is the correlation id), or `None` once the
/// client is gone or sent something too short to be a request.
pub(super) fn read_request(s: &mut TcpStream) -> Option<(i16, i16, Vec<u8>)> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).ok()?;
    let mut req = vec![0u8; i32::from_be_bytes(len).max(0) as usize];
    if s.read_exact(&mut req).is_err() || req.len() < 8 {
        return None;
    }
    let key = i16::from_be_bytes([req[0], req[1]]);
    let version = i16::from_be_bytes([req[2], req[3]]);
    Some((key, version, req))
}

fn serve(mut s: TcpStream, role: Role) {
    while let Some((key, version, req)) = read_request(&mut s) {
        let mut frame = BytesMut::new();
        frame.put_slice(&req[4..8]); // correlation id
        if key == 18 {
            // ApiVersions: refuse anything but v0, then offer ApiVersions 0 and Fetch 4..=12.
            frame.put_i16(if version > 0 { 35 } else { 0 });
            frame.put_i32(2);
            for (k, lo, hi) in [(18i16, 0i16, 0i16), (1, 4, 12)] {
                frame.put_i16(k);
                frame.put_i16(lo);
                frame.put_i16(hi);
            }
        } else {
            let mut body = bytes::Bytes::from(req);
            let header_version = ApiKey::Fetch.request_header_version(version);
            RequestHeader::decode(&mut body, header_version).expect("header");
            let fetch = FetchRequest::decode(&mut body, version).expect("fetch request");
            frame.put_u8(0); // response header v1: no tagged fields
            answer(role, &fetch)
                .encode(&mut frame, version)
                .expect("encode");
        }
        let mut out = Vec::with_capacity(frame.len() + 4);
        out.extend_from_slice(&(frame.len() as i32).to_be_bytes());
        out.extend_from_slice(&frame);
        if s.write_all(&out).is_err() {
            return;
        }
    }
}

fn answer(role: Role, fetch: &FetchRequest) -> FetchResponse {
    let mut part = fetch_response::PartitionData::default()
        .with_partition_index(0)
        .with_high_watermark(3)
        .with_last_stable_offset(3);
    match role {
        Role::Leader if !fetch.rack_id.is_empty() => {
            part = part.with_preferred_read_replica(BrokerId(2));
        }
        Role::Leader => part = part.with_records(Some(batches(&[(0, 2)]))),
        Role::LaggingFollower => {
            part = part
                .with_error_code(KafkaCode::OFFSET_OUT_OF_RANGE.0)
                .with_high_watermark(0)
        }
    }
    FetchResponse::default().with_responses(vec![fetch_response::FetchableTopicResponse::default()
        .with_topic(TopicName(StrBytes::from_static_str("t")))
        .with_partitions(vec![part])])
}

fn client(leader: &str, follower: &str) -> Client {
    let mut client = Client::unconnected(ClientConfig::new(["127.0.0.1:9"]));
    for (id, addr) in [(1, leader), (2, follower)] {
        let (host, port) = addr.rsplit_once(':').expect("host:port");
        client.brokers.insert(
            id,
            BrokerInfo {
                node_id: id,
                host: host.to_string(),
                port: port.parse().expect("port"),
                rack: Some(format!("rack-{id}")),
            },
        );
    }
    client
        .leaders
        .insert(TopicPartition::new(Arc::from("t"), 0), 1);
    client.metadata_stale = false;
    client
}

#[test]
fn a_lagging_follower_sends_the_partition_back_to_its_leader_without_an_error() {
    let (leader, follower) = (
        fake_broker(Role::Leader),
        fake_broker(Role::LaggingFollower),
    );
    let mut client = client(&leader, &follower);
    let cfg = FetchConfig {
        max_wait: Duration::from_millis(50),
        prefetch: false,
        client_rack: Some("rack-2".to_string()),
        ..FetchConfig::default()
    };
    let at = [FetchPosition {
        tp: TopicPartition::new("t", 0),
        offset: 0,
    }];
    // 1: the leader names broker 2 and sends nothing.
    let first = client.fetch(&at, &cfg).expect("fetch");
    assert!(first[0].error.is_none() && first[0].records.is_empty());
    assert_eq!(client.fetch_stats().from_replicas, 1);
    // 2: broker 2 is out of range: no error for the caller, the position stays.
    let second = client.fetch(&at, &cfg).expect("fetch");
    assert!(second[0].error.is_none(), "{:?}", second[0].error);
    assert!(second[0].records.is_empty());
    assert_eq!(second[0].next_offset, 0);
    let stats = client.fetch_stats();
    assert_eq!((stats.from_replicas, stats.fallbacks), (0, 1));
    // 3: the leader again, asked without the rack, serves the records itself.
    let third = client.fetch(&at, &cfg).expect("fetch");
    assert!(third[0].error.is_none(), "{:?}", third[0].error);
    assert_eq!(third[0].records.len(), 3);
    let stats = client.fetch_stats();
    assert!(stats.bytes_from(1) > 0);
    assert_eq!(stats.bytes_from(2), 0);
    assert_eq!(stats.brokers[&2].answers, 1);
}
