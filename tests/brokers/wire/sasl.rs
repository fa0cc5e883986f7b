//! SASL over SASL_PLAINTEXT against real Kafka 4.x: PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512
//! through our wire client (produce, fetch, offsets), a whole consumer group over SCRAM, a wrong
//! password refused once and quickly, KIP-368 re-authentication on a long-lived connection, and
//! no secret in any printout.
//!
//! The broker is the run's SASL broker ([`SaslKafka`]): one JVM per run, its SASL_PLAINTEXT
//! listener enabling all three mechanisms for one user created at storage format time, with
//! sessions limited to [`SASL_REAUTH`]. Needs `scripts/setup-test-env`.

use crate::support;

use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::MetadataRequest;
use rebalance_guard::consumer::{Consumer, ConsumerConfig};
use rebalance_guard::wire::{
    Client, ClientConfig, CommitIdentity, Connection, FetchConfig, FetchPosition, IsolationLevel,
    OffsetCommitEntry, OffsetSpec, ProduceRecord, SaslConfig, SaslMechanism, Secret, WireError,
};
use rebalance_guard::TopicPartition;
use support::consumer::{produce_through_client, value_records};
use support::fetch::fetch_answered;
use support::kafka::{SaslKafka, SASL_REAUTH};
use support::unique_name;

/// The mechanisms that authenticate with a password (OAUTHBEARER takes a token: `wire::tls`).
const PASSWORD_MECHANISMS: [SaslMechanism; 3] = [
    SaslMechanism::Plain,
    SaslMechanism::ScramSha256,
    SaslMechanism::ScramSha512,
];

fn client_config(kafka: &SaslKafka, mechanism: SaslMechanism, password: &str) -> ClientConfig {
    let mut config = ClientConfig::from_bootstrap_str(&kafka.sasl);
    config.connection.request_timeout = Duration::from_secs(10);
    config.connection.sasl = Some(SaslConfig::password(
        mechanism,
        kafka.user.clone(),
        Secret::new(password),
    ));
    config
}

/// Creates a topic, produces, reads the offsets and fetches the records back, and commits and
/// reads a group offset, every request over connections authenticated with `mechanism`.
fn produce_fetch_and_offsets(mechanism: SaslMechanism) {
    let _ = env_logger::builder().is_test(true).try_init();
    let kafka = SaslKafka::shared();
    let mut client = Client::connect(client_config(kafka, mechanism, &kafka.password))
        .unwrap_or_else(|e| panic!("{mechanism}: {e}"));
    let topic = unique_name(&format!("sasl-{}", mechanism.name().to_lowercase()));
    client
        .create_topics(&[(&topic, 1, 1)])
        .expect("create topic");
    let tp = TopicPartition::new(topic.as_str(), 0);
    let records: Vec<ProduceRecord> = (0..5)
        .map(|i| ProduceRecord {
            key: Some(Bytes::from(format!("k{i}"))),
            value: Some(Bytes::from(format!("v{i}"))),
            headers: Vec::new(),
            timestamp: None,
        })
        .collect();
    let base = produce_through_client(&mut client, &tp, &records, &format!("{mechanism}: produce"));
    assert_eq!(base, 0, "{mechanism}");
    let latest = client
        .list_offsets(
            std::slice::from_ref(&tp),
            OffsetSpec::Latest,
            IsolationLevel::ReadUncommitted,
        )
        .expect("list offsets");
    assert_eq!(latest.get(&tp), Some(&5), "{mechanism}");
    let fetched = fetch_answered(
        &mut client,
        &[FetchPosition {
            tp: tp.clone(),
            offset: 0,
        }],
        &FetchConfig::default(),
    );
    let values: Vec<Option<Bytes>> = fetched
        .iter()
        .flat_map(|p| p.records.iter().map(|r| r.value.clone()))
        .collect();
    assert_eq!(
        values,
        (0..5)
            .map(|i| Some(Bytes::from(format!("v{i}"))))
            .collect::<Vec<_>>(),
        "{mechanism}: {fetched:?}"
    );
    let group = unique_name("sasl-group");
    let who = CommitIdentity {
        group_id: &group,
        generation_id_or_member_epoch: -1,
        member_id: "",
        group_instance_id: None,
    };
    client
        .offset_commit(
            &who,
            &[OffsetCommitEntry {
                tp: tp.clone(),
                offset: 3,
                leader_epoch: None,
                metadata: None,
            }],
        )
        .expect("commit");
    let committed = client
        .offset_fetch(&group, std::slice::from_ref(&tp))
        .expect("offset fetch");
    assert_eq!(
        committed.first().and_then(|c| c.offset),
        Some(3),
        "{mechanism}"
    );
}

#[test]
fn sasl_plain_produce_fetch_and_offsets() {
    produce_fetch_and_offsets(SaslMechanism::Plain);
}

#[test]
fn sasl_scram_sha256_produce_fetch_and_offsets() {
    produce_fetch_and_offsets(SaslMechanism::ScramSha256);
}

#[test]
fn sasl_scram_sha512_produce_fetch_and_offsets() {
    produce_fetch_and_offsets(SaslMechanism::ScramSha512);
}

/// A wrong password: one clear, non-retriable error naming the mechanism, quickly (no retry
/// loop over the bootstrap list or the backoff schedule), for each mechanism.
#[test]
fn sasl_wrong_password_fails_once_quickly_naming_the_mechanism() {
    let kafka = SaslKafka::shared();
    for mechanism in PASSWORD_MECHANISMS {
        let mut config = client_config(kafka, mechanism, "not-the-password");
        // With retries, a retriable error would take at least 1+2+4+8 s here.
        config.retry_backoff = Duration::from_secs(1);
        config.retry_backoff_max = Duration::from_secs(8);
        let started = Instant::now();
        let err = Client::connect(config).expect_err("a wrong password must be refused");
        let took = started.elapsed();
        assert!(
            matches!(&err, WireError::Authentication { mechanism: m, .. } if *m == mechanism.name()),
            "{mechanism}: {err:?}"
        );
        assert!(!err.retriable(), "{err}");
        let text = err.to_string();
        assert!(text.contains(mechanism.name()), "{text}");
        assert!(!text.contains("not-the-password"), "{text}");
        assert!(took < Duration::from_secs(3), "{mechanism}: took {took:?}");
    }
}

/// KIP-368: the listener limits sessions to [`SASL_REAUTH`]; a connection used for twice that
/// long keeps working because it re-authenticates in between (without it, the broker closes
/// the connection at the first request after the session ends).
#[test]
fn sasl_connection_reauthenticates_before_its_session_ends() {
    let kafka = SaslKafka::shared();
    let config = client_config(kafka, SaslMechanism::ScramSha256, &kafka.password).connection;
    let mut conn = Connection::connect(&kafka.sasl, &config).expect("connect");
    assert_eq!(conn.authentications(), 1);
    let version = conn
        .version_for(kafka_protocol::messages::ApiKey::Metadata)
        .expect("metadata version");
    let until = Instant::now() + SASL_REAUTH * 2 + Duration::from_secs(1);
    while Instant::now() < until {
        conn.send(
            &MetadataRequest::default().with_topics(Some(Vec::new())),
            version,
        )
        .unwrap_or_else(|e| panic!("after {} authentications: {e}", conn.authentications()));
        thread::sleep(Duration::from_millis(300));
    }
    assert!(conn.authentications() >= 3, "{}", conn.authentications());
}

/// A whole classic group over SCRAM-SHA-512, configured by Kafka's property names: join (every
/// connection, the heartbeat thread's included, authenticates), records processed, commit,
/// heartbeats across more than one session lifetime, clean leave.
#[test]
fn sasl_scram_consumer_group_joins_heartbeats_commits_and_leaves() {
    let _ = env_logger::builder().is_test(true).try_init();
    let kafka = SaslKafka::shared();
    let topic = unique_name("sasl-orders");
    let mut admin = Client::connect(client_config(
        kafka,
        SaslMechanism::ScramSha512,
        &kafka.password,
    ))
    .expect("admin");
    admin
        .create_topics(&[(&topic, 1, 1)])
        .expect("create topic");
    let tp = TopicPartition::new(topic.as_str(), 0);
    let records = value_records((0..10).map(|i| format!("order-{i}")));
    produce_through_client(&mut admin, &tp, &records, "produce");
    let group = unique_name("sasl-group");
    let config = ConsumerConfig::from_properties([
        ("bootstrap.servers", kafka.sasl.as_str()),
        ("group.id", group.as_str()),
        ("security.protocol", "SASL_PLAINTEXT"),
        ("sasl.mechanism", "SCRAM-SHA-512"),
        ("sasl.username", kafka.user.as_str()),
        ("sasl.password", kafka.password.as_str()),
        ("auto.offset.reset", "earliest"),
        ("session.timeout.ms", "6000"),
        ("heartbeat.interval.ms", "500"),
        ("fetch.max.wait.ms", "100"),
        ("partition.assignment.strategy", "range"),
    ])
    .expect("config");
    let mut consumer = Consumer::subscribe(config, &[&topic]).expect("subscribe");
    let mut processed = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while processed.len() < 10 {
        assert!(Instant::now() < deadline, "processed only {processed:?}");
        let mut batch = consumer.poll(Duration::from_millis(200)).expect("poll");
        while let Some(delivery) = batch.next() {
            processed.push(delivery.record.offset);
            batch.complete(delivery);
        }
    }
    consumer.commit().expect("commit");
    // Stay in the group longer than a SASL session: the heartbeat thread's connection must
    // re-authenticate, or the broker closes it and the member is evicted.
    let stay = Instant::now() + SASL_REAUTH + Duration::from_secs(2);
    while Instant::now() < stay {
        let mut batch = consumer.poll(Duration::from_millis(200)).expect("poll");
        if let Some(again) = batch.next() {
            panic!("offset {} came twice", again.record.offset);
        }
    }
    consumer.commit().expect("second commit, same generation");
    consumer.close().expect("leave");
    assert_eq!(processed, (0..10).collect::<Vec<_>>());
    let committed = admin
        .offset_fetch(&group, std::slice::from_ref(&tp))
        .expect("offset fetch");
    assert_eq!(committed.first().and_then(|c| c.offset), Some(10));
}

/// Every configuration, connection and error that holds or met the password, formatted with
/// `{:?}` and `{}`: the password appears in none of them.
#[test]
fn sasl_secrets_appear_in_no_debug_output_or_error_message() {
    let kafka = SaslKafka::shared();
    let password = kafka.password.as_str();
    let mut printed = Vec::new();
    for mechanism in PASSWORD_MECHANISMS {
        let config = client_config(kafka, mechanism, password);
        printed.push(format!("{config:?}"));
        let mut conn = Connection::connect(&kafka.sasl, &config.connection).expect("connect");
        // The connection's write buffer no longer holds the authentication bytes.
        printed.push(format!("{conn:?}"));
        let version = conn
            .version_for(kafka_protocol::messages::ApiKey::Metadata)
            .expect("metadata version");
        conn.send(
            &MetadataRequest::default().with_topics(Some(Vec::new())),
            version,
        )
        .expect("metadata");
        let client = Client::connect(config).expect("client");
        printed.push(format!("{client:?}"));
        // A refused login whose attempted password is the real one with a suffix.
        let wrong = format!("{password}-wrong");
        let err = Client::connect(client_config(kafka, mechanism, &wrong)).expect_err("refused");
        printed.push(format!("{err} {err:?}"));
    }
    let consumer_config = ConsumerConfig::from_properties([
        ("bootstrap.servers", kafka.sasl.as_str()),
        ("group.id", "g"),
        ("security.protocol", "SASL_PLAINTEXT"),
        ("sasl.mechanism", "SCRAM-SHA-256"),
        ("sasl.username", kafka.user.as_str()),
        ("sasl.password", password),
    ])
    .expect("config");
    printed.push(format!("{consumer_config:?}"));
    printed.push(format!("{:?}", consumer_config.to_properties()));
    printed.push(format!("{:?}", consumer_config.client_config()));
    let refused = ConsumerConfig::from_properties([
        ("bootstrap.servers", kafka.sasl.as_str()),
        ("group.id", "g"),
        ("sasl.password", password),
    ])
    .expect_err("SASL settings with PLAINTEXT");
    printed.push(format!("{refused} {refused:?}"));
    for text in &printed {
        assert!(!text.contains(password), "the password was printed: {text}");
    }
    assert!(printed.iter().any(|t| t.contains("[redacted]")));
}
