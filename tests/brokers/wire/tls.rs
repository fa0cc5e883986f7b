//! TLS and SASL_SSL against real Kafka 4.x (feature `tls` only): host-name verification, mTLS,
//! SASL_SSL with PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER, a whole consumer group
//! over SASL_SSL, refusals (wrong password, a certificate for another host, an untrusted CA, a
//! missing client certificate) and a handshake that cannot outlast the connect deadline.
//!
//! The broker is the run's security broker ([`SaslKafka`]): its listeners `SSL`, `MTLS`,
//! `SASL_SSL` and `WRONGHOST` use certificates generated when it starts (never committed).

#![cfg(feature = "tls")]

use crate::support;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, MetadataRequest};
use rebalance_guard::consumer::{Consumer, ConsumerConfig};
use rebalance_guard::wire::{
    Client, ClientConfig, Connection, ConnectionConfig, FetchConfig, FetchPosition,
    OAuthBearerCallback, OAuthBearerToken, SaslConfig, SaslMechanism, Secret, TlsConfig, WireError,
};
use rebalance_guard::TopicPartition;
use support::consumer::{produce_through_client, value_records};
use support::kafka::{SaslKafka, SASL_REAUTH};
use support::unique_name;

fn listener(kafka: &SaslKafka, name: &str) -> String {
    kafka
        .tls
        .get(name)
        .cloned()
        .unwrap_or_else(|| panic!("the security broker has no {name} listener"))
}

fn cert(kafka: &SaslKafka, file: &str) -> PathBuf {
    kafka.tls_dir.join(file)
}

fn trusting(kafka: &SaslKafka) -> TlsConfig {
    TlsConfig::new().with_ca_location(cert(kafka, "ca.pem"))
}

fn connection_config(tls: TlsConfig, sasl: Option<SaslConfig>) -> ConnectionConfig {
    ConnectionConfig {
        request_timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(10),
        tls: Some(tls),
        sasl,
        ..ConnectionConfig::default()
    }
}

fn client_config(bootstrap: &str, connection: ConnectionConfig) -> ClientConfig {
    let mut config = ClientConfig::from_bootstrap_str(bootstrap);
    config.connection = connection;
    config
}

/// A metadata round trip on a fresh connection: the TLS (and SASL) session works end to end.
fn metadata_round_trip(addr: &str, config: &ConnectionConfig) -> Result<(), WireError> {
    let mut conn = Connection::connect(addr, config)?;
    assert!(conn.is_tls());
    let version = conn.version_for(ApiKey::Metadata)?;
    conn.send(
        &MetadataRequest::default().with_topics(Some(Vec::new())),
        version,
    )
    .map(|_| ())
}

/// Creates a topic through `client`, produces five records and fetches them back.
fn produce_and_fetch(client: &mut Client, what: &str) {
    let topic = unique_name(&format!("tls-{what}"));
    client
        .create_topics(&[(&topic, 1, 1)])
        .unwrap_or_else(|e| panic!("{what}: create topic: {e}"));
    let tp = TopicPartition::new(topic.as_str(), 0);
    let records = value_records((0..5).map(|i| format!("v{i}")));
    produce_through_client(client, &tp, &records, &format!("{what}: produce"));
    // One fetch round may come back before a loaded broker's answer (the lanes leave a late
    // answer in flight for the next round): fetch until the records are there, bounded.
    let deadline = Instant::now() + Duration::from_secs(15);
    let values: Vec<Option<Bytes>> = loop {
        let fetched = client
            .fetch(
                &[FetchPosition {
                    tp: tp.clone(),
                    offset: 0,
                }],
                &FetchConfig::default(),
            )
            .unwrap_or_else(|e| panic!("{what}: fetch: {e}"));
        let values: Vec<Option<Bytes>> = fetched
            .iter()
            .flat_map(|p| p.records.iter().map(|r| r.value.clone()))
            .collect();
        if !values.is_empty() || Instant::now() >= deadline {
            break values;
        }
    };
    assert_eq!(
        values,
        (0..5)
            .map(|i| Some(Bytes::from(format!("v{i}"))))
            .collect::<Vec<_>>(),
        "{what}"
    );
}

#[test]
fn tls_ssl_listener_with_host_name_verification_by_ip_and_by_name() {
    let _ = env_logger::builder().is_test(true).try_init();
    let kafka = SaslKafka::shared();
    let ssl = listener(kafka, "SSL");
    let config = connection_config(trusting(kafka), None);
    // 127.0.0.1 matches the certificate's IP entry, localhost its DNS entry.
    metadata_round_trip(&ssl, &config).expect("by IP");
    let by_name = ssl.replace("127.0.0.1", "localhost");
    metadata_round_trip(&by_name, &config).expect("by name");
    let mut client = Client::connect(client_config(&ssl, config)).expect("client over SSL");
    produce_and_fetch(&mut client, "ssl");
}

#[test]
fn tls_mtls_listener_accepts_our_certificate_and_refuses_none() {
    let kafka = SaslKafka::shared();
    let mtls = listener(kafka, "MTLS");
    let with_cert = connection_config(
        trusting(kafka)
            .with_client_certificate(cert(kafka, "client.crt"), cert(kafka, "client.key")),
        None,
    );
    let mut client = Client::connect(client_config(&mtls, with_cert)).expect("mTLS client");
    produce_and_fetch(&mut client, "mtls");
    // Without a certificate the broker refuses (TLS 1.3 reports it after the client's side of
    // the handshake, on the first read): a TLS error, not retried.
    let err = metadata_round_trip(&mtls, &connection_config(trusting(kafka), None))
        .expect_err("a broker that requires client authentication refuses a client without");
    assert!(
        matches!(err, WireError::Tls { .. }) && !err.retriable(),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("ssl.certificate.location"),
        "{err}"
    );
}

fn sasl_ssl_password(mechanism: SaslMechanism) {
    let kafka = SaslKafka::shared();
    let addr = listener(kafka, "SASL_SSL");
    let config = connection_config(
        trusting(kafka),
        Some(SaslConfig::password(
            mechanism,
            kafka.user.clone(),
            kafka.password.as_str(),
        )),
    );
    let mut client = Client::connect(client_config(&addr, config)).expect("client over SASL_SSL");
    produce_and_fetch(&mut client, &mechanism.name().to_lowercase());
}

#[test]
fn sasl_ssl_plain_produce_and_fetch() {
    sasl_ssl_password(SaslMechanism::Plain);
}

#[test]
fn sasl_ssl_scram_sha256_produce_and_fetch() {
    sasl_ssl_password(SaslMechanism::ScramSha256);
}

#[test]
fn sasl_ssl_scram_sha512_produce_and_fetch() {
    sasl_ssl_password(SaslMechanism::ScramSha512);
}

fn base64url(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

/// An unsigned JWT (`alg: none`), which Kafka's default unsecured validator accepts.
fn unsecured_jwt(subject: &str, lifetime: Duration) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let header = base64url(br#"{"alg":"none"}"#);
    let claims = format!(
        r#"{{"sub":"{subject}","iat":{now},"exp":{}}}"#,
        now + lifetime.as_secs()
    );
    format!("{header}.{}.", base64url(claims.as_bytes()))
}

/// OAUTHBEARER over SASL_SSL with tokens from a callback; the broker limits sessions to
/// `SASL_REAUTH`, so a long-lived connection re-authenticates (KIP-368) with a fresh token.
#[test]
fn sasl_ssl_oauthbearer_token_from_the_callback_and_reauthentication() {
    let kafka = SaslKafka::shared();
    let addr = listener(kafka, "SASL_SSL");
    let calls = Arc::new(AtomicU32::new(0));
    let counted = calls.clone();
    // A short token lifetime, so re-authentication needs a new one. The JWT's `exp` is in whole
    // seconds, so the lifetime told to the library is a second less than the claim's.
    let lifetime = Duration::from_secs(5);
    let callback = OAuthBearerCallback::new(move || {
        counted.fetch_add(1, Ordering::SeqCst);
        Ok(OAuthBearerToken {
            value: Secret::new(unsecured_jwt(
                "rg-oauth-user",
                lifetime + Duration::from_secs(1),
            )),
            lifetime,
            extensions: Vec::new(),
        })
    });
    let config = connection_config(trusting(kafka), Some(SaslConfig::oauthbearer(callback)));
    let mut client =
        Client::connect(client_config(&addr, config.clone())).expect("client over OAUTHBEARER");
    produce_and_fetch(&mut client, "oauthbearer");
    let mut conn = Connection::connect(&addr, &config).expect("connect");
    let version = conn
        .version_for(ApiKey::Metadata)
        .expect("metadata version");
    let until = Instant::now() + SASL_REAUTH.max(lifetime) * 2;
    while Instant::now() < until {
        conn.send(
            &MetadataRequest::default().with_topics(Some(Vec::new())),
            version,
        )
        .unwrap_or_else(|e| panic!("after {} authentications: {e}", conn.authentications()));
        thread::sleep(Duration::from_millis(300));
    }
    assert!(conn.authentications() >= 3, "{}", conn.authentications());
    assert!(
        calls.load(Ordering::SeqCst) >= 2,
        "the token was never fetched again"
    );
    // A token the validator refuses (expired): one clear error naming the mechanism.
    let expired = OAuthBearerCallback::new(|| {
        Ok(OAuthBearerToken {
            value: Secret::new(unsecured_jwt("rg-oauth-user", Duration::ZERO)),
            lifetime: Duration::from_secs(60),
            extensions: Vec::new(),
        })
    });
    let err = metadata_round_trip(
        &addr,
        &connection_config(trusting(kafka), Some(SaslConfig::oauthbearer(expired))),
    )
    .expect_err("an expired token is refused");
    assert!(
        matches!(
            &err,
            WireError::Authentication {
                mechanism: "OAUTHBEARER",
                ..
            }
        ),
        "{err:?}"
    );
}

/// A token callback whose first call fails (an identity provider's blip), counting its calls.
fn failing_once(calls: Arc<AtomicU32>) -> OAuthBearerCallback {
    OAuthBearerCallback::new(move || {
        if calls.fetch_add(1, Ordering::SeqCst) == 0 {
            return Err("identity provider unreachable".to_string());
        }
        Ok(OAuthBearerToken {
            value: Secret::new(unsecured_jwt("rg-oauth-user", Duration::from_secs(61))),
            lifetime: Duration::from_secs(60),
            extensions: Vec::new(),
        })
    })
}

/// An identity provider's blip is not fatal: a token callback that fails while no valid token
/// is cached is a retriable error (before: a non-retried Authentication error, so the client
/// gave up at once), and the client's retry asks the callback again and connects.
#[test]
fn sasl_ssl_oauthbearer_a_failing_token_callback_is_retried_not_fatal() {
    let kafka = SaslKafka::shared();
    let addr = listener(kafka, "SASL_SSL");
    let calls = Arc::new(AtomicU32::new(0));
    let sasl = SaslConfig::oauthbearer(failing_once(calls.clone()));
    let err = metadata_round_trip(&addr, &connection_config(trusting(kafka), Some(sasl)))
        .expect_err("the callback's first call fails");
    assert!(
        matches!(&err, WireError::TokenUnavailable { reason } if reason.contains("unreachable")),
        "{err:?}"
    );
    assert!(err.retriable() && !err.is_authentication(), "{err}");

    let calls = Arc::new(AtomicU32::new(0));
    let sasl = SaslConfig::oauthbearer(failing_once(calls.clone()));
    let mut config = client_config(&addr, connection_config(trusting(kafka), Some(sasl)));
    config.retry_backoff = Duration::from_millis(100);
    let mut client = Client::connect(config).expect("connects once the callback recovers");
    produce_and_fetch(&mut client, "oauthbearer-after-a-failed-callback");
    assert!(calls.load(Ordering::SeqCst) >= 2);
}

#[test]
fn sasl_ssl_wrong_password_fails_once_naming_the_mechanism() {
    let kafka = SaslKafka::shared();
    let addr = listener(kafka, "SASL_SSL");
    for mechanism in [
        SaslMechanism::Plain,
        SaslMechanism::ScramSha256,
        SaslMechanism::ScramSha512,
    ] {
        let mut config = client_config(
            &addr,
            connection_config(
                trusting(kafka),
                Some(SaslConfig::password(
                    mechanism,
                    kafka.user.clone(),
                    "not-the-password",
                )),
            ),
        );
        config.retry_backoff = Duration::from_secs(1);
        config.retry_backoff_max = Duration::from_secs(8);
        let started = Instant::now();
        let err = Client::connect(config).expect_err("a wrong password must be refused");
        assert!(
            matches!(&err, WireError::Authentication { mechanism: m, .. } if *m == mechanism.name()),
            "{mechanism}: {err:?}"
        );
        assert!(!err.retriable(), "{err}");
        assert!(!err.to_string().contains("not-the-password"), "{err}");
        // With retries, a retriable error would take at least 1+2+4+8 s.
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{mechanism}: {:?}",
            started.elapsed()
        );
    }
}

#[test]
fn tls_certificate_for_another_host_is_refused_unless_verification_is_off() {
    let kafka = SaslKafka::shared();
    let wrong = listener(kafka, "WRONGHOST");
    let err = metadata_round_trip(&wrong, &connection_config(trusting(kafka), None))
        .expect_err("a certificate for other-host.invalid must not pass for 127.0.0.1");
    assert!(matches!(err, WireError::Tls { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("ssl.endpoint.identification.algorithm"),
        "{err}"
    );
    let started = Instant::now();
    let refused = Client::connect(client_config(
        &wrong,
        connection_config(trusting(kafka), None),
    ))
    .expect_err("the client refuses too");
    assert!(
        refused.is_authentication() && started.elapsed() < Duration::from_secs(5),
        "{refused:?}"
    );
    // ssl.endpoint.identification.algorithm=none: the chain is still checked, the name is not.
    metadata_round_trip(
        &wrong,
        &connection_config(trusting(kafka).with_hostname_verification(false), None),
    )
    .expect("without host-name verification");
    let err = metadata_round_trip(
        &wrong,
        &connection_config(
            TlsConfig::new()
                .with_ca_location(cert(kafka, "untrusted-ca.pem"))
                .with_hostname_verification(false),
            None,
        ),
    )
    .expect_err("turning off the host-name check does not turn off the chain check");
    assert!(matches!(err, WireError::Tls { .. }), "{err:?}");
}

#[test]
fn tls_broker_signed_by_an_untrusted_ca_is_refused() {
    let kafka = SaslKafka::shared();
    let untrusted = TlsConfig::new().with_ca_location(cert(kafka, "untrusted-ca.pem"));
    for name in ["SSL", "SASL_SSL"] {
        let err = metadata_round_trip(
            &listener(kafka, name),
            &connection_config(untrusted.clone(), None),
        )
        .expect_err("an untrusted CA must be refused");
        assert!(matches!(err, WireError::Tls { .. }), "{name}: {err:?}");
        assert!(err.to_string().contains("ssl.ca.location"), "{err}");
    }
    // The OS store does not know the test CA either.
    let err = metadata_round_trip(
        &listener(kafka, "SSL"),
        &connection_config(TlsConfig::new(), None),
    );
    assert!(matches!(err, Err(WireError::Tls { .. })), "{err:?}");
}

/// A whole classic group over SASL_SSL (SCRAM-SHA-256), configured by Kafka's property names:
/// two members join (each with a heartbeat thread on its own authenticated TLS connection),
/// records are processed and committed, the second member's arrival revokes partitions from
/// the first, and the group keeps heartbeating across a SASL session lifetime.
#[test]
fn sasl_ssl_consumer_group_joins_heartbeats_commits_and_revokes() {
    let _ = env_logger::builder().is_test(true).try_init();
    let kafka = SaslKafka::shared();
    let addr = listener(kafka, "SASL_SSL");
    let mut admin = Client::connect(client_config(
        &addr,
        connection_config(
            trusting(kafka),
            Some(SaslConfig::password(
                SaslMechanism::ScramSha256,
                kafka.user.clone(),
                kafka.password.as_str(),
            )),
        ),
    ))
    .expect("admin");
    let topic = unique_name("tls-orders");
    admin
        .create_topics(&[(&topic, 2, 1)])
        .expect("create topic");
    for p in 0..2 {
        let tp = TopicPartition::new(topic.as_str(), p);
        let records = value_records((0..10).map(|i| format!("order-{p}-{i}")));
        produce_through_client(&mut admin, &tp, &records, "produce");
    }
    let group = unique_name("tls-group");
    let ca = cert(kafka, "ca.pem");
    let ca = ca.to_string_lossy();
    let config = || {
        ConsumerConfig::from_properties([
            ("bootstrap.servers", addr.as_str()),
            ("group.id", group.as_str()),
            ("security.protocol", "SASL_SSL"),
            ("ssl.ca.location", &ca),
            ("sasl.mechanism", "SCRAM-SHA-256"),
            ("sasl.username", kafka.user.as_str()),
            ("sasl.password", kafka.password.as_str()),
            ("auto.offset.reset", "earliest"),
            ("session.timeout.ms", "6000"),
            ("heartbeat.interval.ms", "500"),
            ("fetch.max.wait.ms", "100"),
            ("partition.assignment.strategy", "range"),
        ])
        .expect("config")
    };
    let mut first = Consumer::subscribe(config(), &[&topic]).expect("subscribe");
    let mut processed = 0;
    let deadline = Instant::now() + Duration::from_secs(40);
    while processed < 20 {
        assert!(Instant::now() < deadline, "processed only {processed}");
        let mut batch = first.poll(Duration::from_millis(200)).expect("poll");
        while let Some(delivery) = batch.next() {
            processed += 1;
            batch.complete(delivery);
        }
    }
    first.commit().expect("commit");
    let revocations_before = first.stats().counters.revoked;
    // A second member joins: the first must give up a partition (revocation) and both keep
    // heartbeating over their own SASL_SSL connections.
    let second_config = config();
    let second = thread::spawn(move || {
        let topic_name = topic;
        let mut second = Consumer::subscribe(second_config, &[&topic_name]).expect("second");
        let until = Instant::now() + SASL_REAUTH + Duration::from_secs(8);
        let mut assigned = 0;
        while Instant::now() < until {
            let mut batch = second
                .poll(Duration::from_millis(200))
                .expect("second poll");
            if let Some(again) = batch.next() {
                panic!("offset {} came again after its commit", again.record.offset);
            }
            drop(batch);
            assigned = assigned.max(second.assignment().len());
        }
        second.close().expect("second leaves");
        assigned
    });
    let until = Instant::now() + SASL_REAUTH + Duration::from_secs(8);
    while Instant::now() < until {
        let mut batch = first.poll(Duration::from_millis(200)).expect("first poll");
        if let Some(again) = batch.next() {
            panic!("offset {} came again after its commit", again.record.offset);
        }
    }
    let second_assigned = second.join().expect("second member");
    assert_eq!(
        second_assigned, 1,
        "the second member never got a partition"
    );
    assert!(
        first.stats().counters.revoked > revocations_before,
        "the first member gave nothing up: {:?}",
        first.stats().counters
    );
    first.commit().expect("commit after the rebalance");
    first.close().expect("leave");
}

/// Every configuration, connection and error that holds a password, token or key path
/// formatted with `{:?}` and `{}`: no password and no token appears.
#[test]
fn tls_sasl_secrets_appear_in_no_debug_output_or_error_message() {
    let kafka = SaslKafka::shared();
    let addr = listener(kafka, "SASL_SSL");
    let password = kafka.password.as_str();
    let token = unsecured_jwt("rg-secret-test", Duration::from_secs(300));
    let token_for_callback = token.clone();
    let callback = OAuthBearerCallback::new(move || {
        Ok(OAuthBearerToken {
            value: Secret::new(token_for_callback.clone()),
            lifetime: Duration::from_secs(300),
            extensions: Vec::new(),
        })
    });
    let mut printed = Vec::new();
    for sasl in [
        SaslConfig::password(SaslMechanism::Plain, kafka.user.clone(), password),
        SaslConfig::password(SaslMechanism::ScramSha512, kafka.user.clone(), password),
        SaslConfig::oauthbearer(callback.clone()),
    ] {
        let config = connection_config(trusting(kafka), Some(sasl.clone()));
        printed.push(format!("{config:?}"));
        let conn = Connection::connect(&addr, &config).expect("connect");
        printed.push(format!("{conn:?}"));
        let client = Client::connect(client_config(&addr, config)).expect("client");
        printed.push(format!("{client:?}"));
    }
    let wrong = format!("{password}-wrong");
    let err = Client::connect(client_config(
        &addr,
        connection_config(
            trusting(kafka),
            Some(SaslConfig::password(
                SaslMechanism::ScramSha256,
                kafka.user.clone(),
                wrong.as_str(),
            )),
        ),
    ))
    .expect_err("refused");
    printed.push(format!("{err} {err:?}"));
    let ca = cert(kafka, "ca.pem");
    let consumer_config = ConsumerConfig::builder()
        .set("bootstrap.servers", &addr)
        .set("group.id", "g")
        .set("security.protocol", "SASL_SSL")
        .set("ssl.ca.location", &ca.to_string_lossy())
        .set("sasl.mechanism", "OAUTHBEARER")
        .sasl_oauthbearer_token_callback(callback)
        .build()
        .expect("config");
    printed.push(format!("{consumer_config:?}"));
    printed.push(format!("{:?}", consumer_config.to_properties()));
    printed.push(format!("{:?}", consumer_config.client_config()));
    for text in &printed {
        assert!(!text.contains(password), "the password was printed: {text}");
        assert!(!text.contains(&token), "the token was printed: {text}");
    }
}

/// A peer that accepts TCP and then trickles a TLS record one byte at a time, each just before
/// a socket timeout would fire: the handshake still ends at the connect deadline.
#[test]
fn tls_handshake_with_a_trickling_peer_ends_at_the_connect_deadline() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let peer = thread::spawn(move || {
        let Ok((mut s, _)) = listener.accept() else {
            return;
        };
        let _ = s.set_read_timeout(Some(Duration::from_millis(50)));
        let mut hello = [0u8; 512];
        let _ = s.read(&mut hello);
        // A handshake record header claiming 16 KiB, then one byte every 200 ms for 20 s.
        let _ = s.write_all(&[0x16, 0x03, 0x03, 0x40, 0x00]);
        for _ in 0..100 {
            if s.write_all(&[0x02]).is_err() {
                return;
            }
            thread::sleep(Duration::from_millis(200));
        }
    });
    let config = ConnectionConfig {
        connect_timeout: Duration::from_secs(1),
        tls: Some(TlsConfig::new()),
        ..ConnectionConfig::default()
    };
    let started = Instant::now();
    let err = Connection::connect(&addr, &config).expect_err("the handshake cannot finish");
    assert!(matches!(err, WireError::Timeout { .. }), "{err:?}");
    // Generous: the peer would keep trickling for 20 s.
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    drop(peer);
}
