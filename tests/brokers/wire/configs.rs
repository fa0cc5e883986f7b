//! DescribeConfigs for the cluster's failure detection (issue 21, item 6), against real Apache
//! Kafka (the newest 4.x and the last 3.x) and a scripted broker that refuses it.
//!
//! The shared test brokers leave `broker.session.timeout.ms` at Kafka's default (9000) and set
//! the consumer-protocol group settings (`scripts/kafka_broker.py`: session 6000, heartbeat
//! 500), so each value read back is one the broker really holds, not a default of ours. The
//! refusal an authorizer gives (CLUSTER_AUTHORIZATION_FAILED) is played by a scripted broker on
//! loopback: the shared brokers run without an authorizer. Needs `scripts/setup-test-env`.
//!
//! Under the version matrix (`scripts/test --versions`) the same tests read an older line, where
//! a setting the line does not have must come back as absent (`None`), not as an error nor a
//! default of ours: a ZooKeeper-mode broker (2.x) has no `broker.session.timeout.ms` (a KRaft
//! setting), and lines before 3.5 have no `group.consumer.*` (KIP-848's settings; measured:
//! 3.0.2 lacks them, 3.6.2 holds the configured values).

use crate::support;

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::Duration;

use bytes::BytesMut;
use kafka_protocol::messages::{
    self as msg, api_versions_response, describe_configs_response, metadata_response, ApiKey,
    BrokerId,
};
use kafka_protocol::protocol::{Encodable, HeaderVersion, StrBytes};
use rebalance_guard::wire::{Client, ClientConfig, KafkaCode, WireError};
use support::kafka::major_minor;
use support::{Kafka, KafkaVersion};

fn reads_the_failure_detection_settings(version: KafkaVersion) {
    let kafka = Kafka::shared(version);
    let mut cfg = ClientConfig::from_bootstrap_str(kafka.bootstrap());
    cfg.connection.request_timeout = Duration::from_secs(10);
    let mut client = Client::connect(cfg).unwrap_or_else(|e| panic!("{version:?}: {e}"));
    let seen = client
        .broker_failure_detection()
        .unwrap_or_else(|e| panic!("{version:?}: {e}"));
    println!("{version:?}: {seen:?}");
    assert!(
        client.broker(seen.node_id).is_some(),
        "{version:?}: {seen:?}"
    );
    let line = major_minor(&version.version());
    let kraft = line >= (3, 0);
    let kip848_settings = line >= (3, 5);
    assert_eq!(
        seen.broker_session_timeout,
        kraft.then(|| Duration::from_millis(9000)),
        "{version:?} ({})",
        version.version()
    );
    assert_eq!(
        seen.group_consumer_session_timeout,
        kip848_settings.then(|| Duration::from_millis(6000)),
        "{version:?} ({})",
        version.version()
    );
    assert_eq!(
        seen.group_consumer_heartbeat_interval,
        kip848_settings.then(|| Duration::from_millis(500)),
        "{version:?} ({})",
        version.version()
    );
}

// ---------------------------------------------------------------------------
// A scripted broker whose authorizer refuses DescribeConfigs
// ---------------------------------------------------------------------------

fn read_frame(s: &mut TcpStream) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let mut frame = vec![0u8; i32::from_be_bytes(len).clamp(0, 1 << 20) as usize];
    s.read_exact(&mut frame)?;
    Ok(frame)
}

fn answer<T: Encodable + HeaderVersion>(
    s: &mut TcpStream,
    correlation: [u8; 4],
    version: i16,
    body: &T,
) -> io::Result<()> {
    let mut out = BytesMut::new();
    out.extend_from_slice(&correlation);
    if T::header_version(version) >= 1 {
        out.extend_from_slice(&[0]); // no tagged fields in the header
    }
    body.encode(&mut out, version)
        .map_err(|e| io::Error::other(format!("{e:#}")))?;
    s.write_all(&(out.len() as i32).to_be_bytes())?;
    s.write_all(&out)
}

/// One connection of the scripted broker: ApiVersions, Metadata naming itself as node 1, and a
/// DescribeConfigs answer refusing the broker resource the way Kafka's authorizer does.
fn serve(mut s: TcpStream, port: u16) -> io::Result<()> {
    loop {
        let frame = read_frame(&mut s)?;
        if frame.len() < 8 {
            return Ok(());
        }
        let api = i16::from_be_bytes([frame[0], frame[1]]);
        let version = i16::from_be_bytes([frame[2], frame[3]]);
        let correlation = [frame[4], frame[5], frame[6], frame[7]];
        if api == ApiKey::ApiVersions as i16 {
            let keys = [
                (ApiKey::ApiVersions, 0, 3),
                (ApiKey::Metadata, 1, 12),
                (ApiKey::DescribeConfigs, 1, 4),
            ];
            let resp = msg::ApiVersionsResponse::default().with_api_keys(
                keys.iter()
                    .map(|(k, lo, hi)| {
                        api_versions_response::ApiVersion::default()
                            .with_api_key(*k as i16)
                            .with_min_version(*lo)
                            .with_max_version(*hi)
                    })
                    .collect(),
            );
            // Answer at v0 when asked for a version we do not list (the broker's fallback).
            answer(&mut s, correlation, version.min(3), &resp)?;
        } else if api == ApiKey::Metadata as i16 {
            let resp = msg::MetadataResponse::default()
                .with_brokers(vec![metadata_response::MetadataResponseBroker::default()
                    .with_node_id(BrokerId(1))
                    .with_host(StrBytes::from_static_str("127.0.0.1"))
                    .with_port(i32::from(port))])
                .with_controller_id(BrokerId(1));
            answer(&mut s, correlation, version, &resp)?;
        } else if api == ApiKey::DescribeConfigs as i16 {
            let resp = msg::DescribeConfigsResponse::default().with_results(vec![
                describe_configs_response::DescribeConfigsResult::default()
                    .with_error_code(KafkaCode::CLUSTER_AUTHORIZATION_FAILED.0)
                    .with_error_message(Some(StrBytes::from_static_str(
                        "Cluster authorization failed.",
                    )))
                    .with_resource_type(4)
                    .with_resource_name(StrBytes::from_static_str("1")),
            ]);
            answer(&mut s, correlation, version, &resp)?;
        } else {
            return Ok(());
        }
    }
}

#[test]
fn an_authorizers_refusal_is_a_clear_error_not_a_retry() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let port = listener.local_addr().expect("local addr").port();
    thread::spawn(move || {
        for s in listener.incoming().flatten() {
            thread::spawn(move || serve(s, port));
        }
    });
    let mut cfg = ClientConfig::from_bootstrap_str(&format!("127.0.0.1:{port}"));
    cfg.connection.request_timeout = Duration::from_secs(5);
    let mut client = Client::connect(cfg).expect("connect to the scripted broker");
    let err = client
        .broker_failure_detection()
        .expect_err("the scripted broker refuses DescribeConfigs");
    assert!(err.is_authorization_refused(), "{err:?}");
    assert!(
        matches!(
            &err,
            WireError::Kafka { code, .. } if *code == KafkaCode::CLUSTER_AUTHORIZATION_FAILED
        ),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("DescribeConfigs") && text.contains("broker 1"),
        "{text}"
    );
}

crate::on_brokers! {
    kafka {
        reports_its_broker_session_timeout =>
            reads_the_failure_detection_settings(KafkaVersion::Newest),
    }

    kafka3 {
        reports_its_broker_session_timeout =>
            reads_the_failure_detection_settings(KafkaVersion::Last3),
    }
}
