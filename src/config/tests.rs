//! The configuration's behaviour, pinned: defaults, parsing, every rule and its message.

use super::*;
use crate::group::StrategyError;

fn base() -> ConsumerConfigBuilder {
    ConsumerConfig::builder()
        .bootstrap_servers(["127.0.0.1:9092"])
        .group_id("orders")
}

fn props(pairs: &[(&str, &str)]) -> Result<ConsumerConfig, ConfigError> {
    let mut all = vec![("bootstrap.servers", "127.0.0.1:9092"), ("group.id", "g")];
    all.extend_from_slice(pairs);
    ConsumerConfig::from_properties(all)
}

#[test]
fn defaults_match_the_documented_table() {
    let c = base().build().unwrap();
    assert_eq!(c.client_id(), "rebalance-guard");
    assert_eq!(c.session_timeout(), Duration::from_millis(45_000));
    assert_eq!(c.heartbeat_interval(), Duration::from_millis(3_000));
    assert_eq!(c.max_poll_interval(), Duration::from_millis(300_000));
    assert_eq!(c.max_poll_records(), 500);
    assert_eq!(c.assignment_strategies(), &[Strategy::CooperativeSticky]);
    assert_eq!(c.rebalance_protocol(), RebalanceProtocol::Cooperative);
    assert_eq!(c.group_protocol(), GroupProtocol::Classic);
    assert_eq!(c.auto_offset_reset(), AutoOffsetReset::Latest);
    assert_eq!(c.isolation_level(), IsolationLevel::ReadCommitted);
    assert_eq!(c.revoke_drain_timeout(), Duration::from_secs(10));
    assert_eq!(c.batch_safety_factor(), 0.5);
    assert_eq!(c.group_instance_id(), None);

    // Every literal default in SETTINGS, set explicitly, gives the same configuration (the
    // share consumer's own rows are refused here; its tests set them).
    let explicit = SETTINGS
        .iter()
        .filter(|s| {
            !s.default.starts_with('(')
                && !cross::share_only(s.name)
                && !cross::producer_only(s.name)
        })
        .fold(base(), |b, s| b.set(s.name, s.default))
        .build()
        .unwrap();
    assert_eq!(explicit, c);
}

#[test]
fn every_setting_is_parsed_and_documented() {
    for s in SETTINGS {
        let err = ConsumerConfig::builder()
            .set(s.name, "x")
            .build()
            .unwrap_err();
        assert!(
            !matches!(err, ConfigError::UnknownSetting { .. }),
            "{} is documented but not parsed",
            s.name
        );
    }
    let names: Vec<&str> = base()
        .build()
        .unwrap()
        .to_properties()
        .iter()
        .map(|(k, _)| *k)
        .collect();
    let documented: Vec<&str> = SETTINGS
        .iter()
        .filter(|s| {
            // group.id has no default (a producer has none) but every consumer sets it.
            (s.default != "(none)" || s.name == "group.id")
                && !cross::share_only(s.name)
                && !cross::producer_only(s.name)
        })
        .map(|s| s.name)
        .collect();
    assert_eq!(names, documented, "to_properties prints SETTINGS in order");
}

#[test]
fn typed_builder_and_properties_agree() {
    let typed = base()
        .group_instance_id("worker-1")
        .client_id("w1")
        .session_timeout(Duration::from_millis(6_000))
        .heartbeat_interval(Duration::from_millis(500))
        .max_poll_interval(Duration::from_millis(6_000))
        .max_poll_records(100)
        .partition_assignment_strategy([Strategy::Range, Strategy::RoundRobin])
        .auto_offset_reset(AutoOffsetReset::Earliest)
        .isolation_level(IsolationLevel::ReadCommitted)
        .batch_safety_factor(0.25)
        .build()
        .unwrap();
    let from_props = ConsumerConfig::from_properties([
        ("bootstrap.servers", "127.0.0.1:9092"),
        ("group.id", "orders"),
        ("group.instance.id", "worker-1"),
        ("client.id", "w1"),
        ("session.timeout.ms", "6000"),
        ("heartbeat.interval.ms", "500"),
        ("max.poll.interval.ms", "6000"),
        ("max.poll.records", "100"),
        (
            "partition.assignment.strategy",
            "org.apache.kafka.clients.consumer.RangeAssignor, ROUNDROBIN",
        ),
        ("auto.offset.reset", "earliest"),
        ("isolation.level", "read_committed"),
        ("batch.safety.factor", "0.25"),
        ("enable.auto.commit", "false"),
    ])
    .unwrap();
    assert_eq!(typed, from_props);
    assert_eq!(typed.rebalance_protocol(), RebalanceProtocol::Eager);
    // Derived default: half of a short poll interval.
    assert_eq!(typed.revoke_drain_timeout(), Duration::from_millis(3_000));
    // to_properties round-trips.
    assert_eq!(
        ConsumerConfig::from_properties(typed.to_properties()).unwrap(),
        typed
    );
}

#[test]
fn later_properties_override_earlier_ones() {
    let c = props(&[("max.poll.records", "10"), ("max.poll.records", "20")]).unwrap();
    assert_eq!(c.max_poll_records(), 20);
}

#[test]
fn unknown_settings_suggest_the_closest_known_one() {
    let cases = [
        ("session.timout.ms", Some("session.timeout.ms")),
        ("group_id", Some("group.id")),
        ("bootstrap.server", Some("bootstrap.servers")),
        ("Max.Poll.Records", Some("max.poll.records")),
        ("max.poll.interval", Some("max.poll.interval.ms")),
        ("completely.unrelated.thing", None),
        ("foo", None),
    ];
    for (name, expected) in cases {
        let err = props(&[(name, "1")]).unwrap_err();
        assert_eq!(
            err,
            ConfigError::UnknownSetting {
                name: name.to_string(),
                suggestion: expected
            },
            "{name}"
        );
    }
    let msg = props(&[("session.timout.ms", "1")])
        .unwrap_err()
        .to_string();
    assert!(msg.contains("did you mean `session.timeout.ms`?"), "{msg}");
}

#[test]
fn known_but_unsupported_settings_say_why() {
    for name in [
        "sasl.kerberos.service.name",
        "ssl.truststore.location",
        "key.deserializer",
    ] {
        let err = props(&[(name, "x")]).unwrap_err();
        assert!(
            matches!(&err, ConfigError::UnsupportedSetting { name: n, .. } if n == name),
            "{err}"
        );
    }
}

#[test]
fn required_settings_are_named() {
    let err = ConsumerConfig::builder().group_id("g").build().unwrap_err();
    assert_eq!(
        err,
        ConfigError::Missing {
            name: "bootstrap.servers"
        }
    );
    assert_eq!(err.to_string(), "setting `bootstrap.servers` is required");
    let err = ConsumerConfig::builder()
        .bootstrap_servers(["h:1"])
        .build()
        .unwrap_err();
    assert_eq!(err, ConfigError::Missing { name: "group.id" });
    assert!(matches!(
        props(&[("group.id", "")]).unwrap_err(),
        ConfigError::OutOfRange {
            name: "group.id",
            ..
        }
    ));
}

#[test]
fn bootstrap_entries_must_be_host_port() {
    let ok = props(&[("bootstrap.servers", " a:1 , [::1]:9092,,b.example:65535 ")]).unwrap();
    assert_eq!(
        ok.bootstrap_servers(),
        &["a:1", "[::1]:9092", "b.example:65535"]
    );
    for bad in [
        "localhost",
        "a:0",
        "a:70000",
        ":9092",
        "::1:9092",
        "a b:1",
        ",",
        "[]:1",
    ] {
        let err = props(&[("bootstrap.servers", bad)]).unwrap_err();
        assert_eq!(err.setting(), Some("bootstrap.servers"), "{bad}: {err}");
    }
}

#[test]
fn unparsable_values_name_the_setting_and_what_is_allowed() {
    let cases: [(&str, &str, &str); 8] = [
        ("session.timeout.ms", "ten", "milliseconds"),
        ("max.poll.records", "1.5", "whole number"),
        ("fetch.max.bytes", "lots", "bytes"),
        ("enable.auto.commit", "yes", "true, false"),
        ("auto.offset.reset", "smallest", "earliest, latest, none"),
        (
            "isolation.level",
            "serializable",
            "read_uncommitted, read_committed",
        ),
        ("group.protocol", "new", "classic, consumer"),
        (
            "partition.assignment.strategy",
            "sticky",
            "range, roundrobin, cooperative-sticky",
        ),
    ];
    for (name, value, allowed) in cases {
        let err = props(&[(name, value)]).unwrap_err();
        assert_eq!(err.setting(), Some(name));
        assert!(matches!(err, ConfigError::InvalidValue { .. }), "{err}");
        let msg = err.to_string();
        assert!(msg.contains(name) && msg.contains(allowed), "{msg}");
    }
    let err = props(&[("batch.safety.factor", "half")]).unwrap_err();
    assert_eq!(err.setting(), Some("batch.safety.factor"));
}

#[test]
fn zero_and_negative_sizes_and_timeouts_are_refused() {
    for name in [
        "session.timeout.ms",
        "heartbeat.interval.ms",
        "max.poll.interval.ms",
        "max.poll.records",
        "fetch.max.bytes",
        "max.partition.fetch.bytes",
        "request.timeout.ms",
        "socket.connection.setup.timeout.ms",
        "retry.backoff.ms",
        "reconnect.backoff.max.ms",
        "rebalance.storm.window.ms",
        "revoke.drain.timeout.ms",
    ] {
        for value in ["0", "-1"] {
            let err = props(&[(name, value)]).unwrap_err();
            assert!(
                matches!(err, ConfigError::OutOfRange { name: n, .. } if n == name),
                "{name}={value}: {err}"
            );
        }
    }
    for value in ["0", "-0.5", "1", "1.5", "NaN", "inf"] {
        let err = props(&[("batch.safety.factor", value)]).unwrap_err();
        assert_eq!(err.setting(), Some("batch.safety.factor"), "{value}");
    }
    // Thresholds where zero means "don't wait" or "disabled" are allowed; negatives are not.
    let c = props(&[
        ("fetch.min.bytes", "0"),
        ("fetch.max.wait.ms", "0"),
        ("idempotency.cache.size", "0"),
        ("rebalance.storm.threshold", "0"),
    ])
    .unwrap();
    assert_eq!(c.fetch_min_bytes(), 0);
    assert_eq!(c.guard_config().idempotency_capacity, 0);
    // Only the poll thread admits: one key shard (more would only cost it cache misses).
    assert_eq!(c.guard_config().idempotency_shards, 1);
    assert!(c.guard_config().validate().is_ok());
    for name in [
        "fetch.min.bytes",
        "fetch.max.wait.ms",
        "idempotency.cache.size",
    ] {
        assert!(matches!(
            props(&[(name, "-1")]).unwrap_err(),
            ConfigError::OutOfRange { .. }
        ));
    }
    // Typed values too, and Kafka's int32 ceiling.
    let err = base().session_timeout(Duration::ZERO).build().unwrap_err();
    assert_eq!(err.setting(), Some("session.timeout.ms"));
    let err = base().max_poll_records(0).build().unwrap_err();
    assert_eq!(err.setting(), Some("max.poll.records"));
    let err = base().fetch_max_bytes(-5).build().unwrap_err();
    assert_eq!(err.setting(), Some("fetch.max.bytes"));
    let err = props(&[("request.timeout.ms", "2147483648")]).unwrap_err();
    assert_eq!(err.setting(), Some("request.timeout.ms"));
    let err = props(&[("fetch.max.bytes", "2147483648")]).unwrap_err();
    assert_eq!(err.setting(), Some("fetch.max.bytes"));
}

#[test]
fn heartbeat_must_be_at_most_a_third_of_the_session_timeout() {
    let ok = props(&[
        ("session.timeout.ms", "6000"),
        ("heartbeat.interval.ms", "2000"),
    ]);
    assert!(ok.is_ok());
    let err = props(&[
        ("session.timeout.ms", "6000"),
        ("heartbeat.interval.ms", "2001"),
    ])
    .unwrap_err();
    assert!(matches!(
        err,
        ConfigError::Conflict {
            name: "heartbeat.interval.ms",
            other: "session.timeout.ms",
            ..
        }
    ));
    assert!(err.to_string().contains("a third"), "{err}");
}

#[test]
fn max_poll_interval_may_not_be_below_the_session_timeout() {
    let err = props(&[
        ("session.timeout.ms", "6000"),
        ("heartbeat.interval.ms", "500"),
        ("max.poll.interval.ms", "5999"),
    ])
    .unwrap_err();
    assert!(matches!(
        err,
        ConfigError::Conflict {
            name: "max.poll.interval.ms",
            other: "session.timeout.ms",
            ..
        }
    ));
    // Equal is fine; and the issue's slow-handler scenario fits with a short session.
    let c = props(&[
        ("session.timeout.ms", "2000"),
        ("heartbeat.interval.ms", "500"),
        ("max.poll.interval.ms", "2000"),
    ])
    .unwrap();
    assert_eq!(c.revoke_drain_timeout(), Duration::from_millis(1_000));
}

#[test]
fn drain_timeout_must_be_below_the_poll_interval() {
    let err = props(&[
        ("session.timeout.ms", "6000"),
        ("heartbeat.interval.ms", "1000"),
        ("max.poll.interval.ms", "8000"),
        ("revoke.drain.timeout.ms", "8000"),
    ])
    .unwrap_err();
    assert!(matches!(
        err,
        ConfigError::Conflict {
            name: "revoke.drain.timeout.ms",
            ..
        }
    ));
}

#[test]
fn auto_commit_true_is_refused_with_the_reason() {
    let err = props(&[("enable.auto.commit", "true")]).unwrap_err();
    assert_eq!(err, ConfigError::AutoCommitRefused);
    assert_eq!(err.setting(), Some("enable.auto.commit"));
    let msg = err.to_string();
    assert!(
        msg.contains("must be false") && msg.contains("timer"),
        "{msg}"
    );
    assert!(props(&[("enable.auto.commit", "FALSE")]).is_ok());
}

#[test]
fn strategy_lists_are_checked() {
    assert_eq!(
        props(&[("partition.assignment.strategy", " , ")]).unwrap_err(),
        ConfigError::Strategies(StrategyError::Empty)
    );
    assert_eq!(
        base()
            .partition_assignment_strategy([])
            .build()
            .unwrap_err(),
        ConfigError::Strategies(StrategyError::Empty)
    );
    assert_eq!(
        props(&[("partition.assignment.strategy", "range,range")]).unwrap_err(),
        ConfigError::Strategies(StrategyError::Duplicate(Strategy::Range))
    );
    // Java's own default list mixes the two kinds: refused, with the reason.
    let err = props(&[("partition.assignment.strategy", "range,cooperative-sticky")]).unwrap_err();
    assert_eq!(
        err,
        ConfigError::Strategies(StrategyError::Mixed {
            eager: Strategy::Range,
            cooperative: Strategy::CooperativeSticky
        })
    );
    assert!(err.to_string().contains("one kind"), "{err}");
    let err = props(&[(
        "partition.assignment.strategy",
        "cooperative-sticky,roundrobin",
    )])
    .unwrap_err();
    assert_eq!(
        err,
        ConfigError::Strategies(StrategyError::Mixed {
            eager: Strategy::RoundRobin,
            cooperative: Strategy::CooperativeSticky
        })
    );
    for s in Strategy::ALL {
        assert_eq!(Strategy::from_name(s.name()), Some(s));
        assert!(crate::group::assignor::assignor_for(s.name()).is_some());
        assert_eq!(
            crate::group::assignor::assignor_for(s.name()).map(|a| a.protocol()),
            Some(s.protocol())
        );
    }
}

#[test]
fn static_member_ids_follow_kafkas_rules() {
    for bad in ["", ".", "..", "has space", "ünï", &"x".repeat(250)] {
        let err = props(&[("group.instance.id", bad)]).unwrap_err();
        assert_eq!(err.setting(), Some("group.instance.id"), "{bad:?}");
    }
    let c = props(&[("group.instance.id", "worker-1.a_b")]).unwrap();
    assert_eq!(c.group_instance_id(), Some("worker-1.a_b"));
}

#[test]
fn consumer_protocol_refuses_classic_only_settings() {
    let c = props(&[("group.protocol", "CONSUMER")]).unwrap();
    assert_eq!(c.group_protocol(), GroupProtocol::Consumer);
    assert_eq!(
        ConsumerConfig::from_properties(c.to_properties()).unwrap(),
        c
    );
    for name in cross::CLASSIC_ONLY {
        let value = if *name == "partition.assignment.strategy" {
            "range"
        } else {
            "3000"
        };
        let err = props(&[("group.protocol", "consumer"), (name, value)]).unwrap_err();
        assert_eq!(err, ConfigError::ClassicOnly { name });
    }
}

#[test]
fn conversions_carry_the_settings() {
    let c = props(&[
        ("client.id", "w"),
        ("request.timeout.ms", "7000"),
        ("fetch.max.bytes", "100000000"),
        ("retry.backoff.ms", "50"),
    ])
    .unwrap();
    let client = c.client_config();
    assert_eq!(client.bootstrap, vec!["127.0.0.1:9092".to_string()]);
    assert_eq!(client.connection.client_id, "w");
    assert_eq!(client.connection.request_timeout, Duration::from_secs(7));
    assert!(client.connection.max_response_size > 100_000_000);
    assert_eq!(client.retry_backoff, Duration::from_millis(50));
    let fetch = c.fetch_config();
    // Each fetch answer is at most half of fetch.buffer.bytes (4 MiB by default)...
    assert_eq!(fetch.max_bytes, 2 * 1024 * 1024);
    assert_eq!(fetch.max_wait, Duration::from_millis(500));
    // ...and at most fetch.max.bytes, whichever is smaller.
    let roomy = props(&[
        ("fetch.max.bytes", "100000000"),
        ("fetch.buffer.bytes", "1000000000"),
    ])
    .unwrap();
    assert_eq!(roomy.fetch_config().max_bytes, 100_000_000);
    let small = props(&[("fetch.max.bytes", "1000000")]).unwrap();
    assert_eq!(small.fetch_config().max_bytes, 1_000_000);
    let err = props(&[("fetch.buffer.bytes", "0")])
        .unwrap_err()
        .to_string();
    assert!(err.contains("fetch.buffer.bytes"), "{err}");
    let guard = c.guard_config();
    assert_eq!(guard.storm_threshold, 5);
    assert!(guard.validate().is_ok());
}

#[test]
fn properties_file_round_trip_and_errors() {
    let dir = std::env::temp_dir().join(format!("rg-config-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let path = dir.join("consumer.properties");
    fs::write(
        &path,
        "bootstrap.servers=127.0.0.1:9092\r\ngroup.id=g\r\nmax.poll.records: 7\r\n",
    )
    .unwrap();
    let c = ConsumerConfig::from_properties_file(&path).unwrap();
    assert_eq!(c.max_poll_records(), 7);

    fs::write(&path, "group.id=g\nbad=\\uZZZZ\n").unwrap();
    let err = ConsumerConfig::from_properties_file(&path).unwrap_err();
    assert!(matches!(err, ConfigError::Syntax { line: 2, .. }), "{err}");

    let missing = dir.join("absent.properties");
    let err = ConsumerConfig::from_properties_file(&missing).unwrap_err();
    assert!(
        matches!(
            &err,
            ConfigError::File {
                kind: std::io::ErrorKind::NotFound,
                ..
            }
        ),
        "{err}"
    );
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn builder_keeps_the_first_set_error() {
    let err = base()
        .set("max.poll.records", "x")
        .set("nope", "1")
        .build()
        .unwrap_err();
    assert_eq!(err.setting(), Some("max.poll.records"));
}

/// docs/configuration.md's settings table, generated from [`SETTINGS`]: the failure message of
/// [`the_configuration_doc_documents_every_setting`] prints it to paste.
fn settings_table() -> String {
    let mut out = String::from("| Setting | Default | Meaning |\n| --- | --- | --- |\n");
    for s in SETTINGS {
        out.push_str(&format!(
            "| `{}` | `{}` | {} |\n",
            s.name, s.default, s.description
        ));
    }
    out
}

/// The settings reference a user reads (docs/configuration.md) is the table in code: every row
/// whole (name, default and meaning), under its "## Settings" heading, and no row for a setting
/// the table does not have.
#[test]
fn the_configuration_doc_documents_every_setting() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/configuration.md");
    let doc = fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"));
    let start = doc.find("\n## Settings").unwrap_or_else(|| {
        panic!(
            "docs/configuration.md has no \"## Settings\" section; it must list every setting in \
             rebalance_guard::config::SETTINGS as a table row \"| `name` | `default` \
             | meaning |\"; the table to paste:\n{}",
            settings_table()
        )
    });
    let section = &doc[start + 1..];
    let section = match section[2..].find("\n## ") {
        Some(end) => &section[..end + 2],
        None => section,
    };
    let rows: Vec<String> = SETTINGS
        .iter()
        .map(|s| format!("| `{}` | `{}` | {} |", s.name, s.default, s.description))
        .collect();
    let missing: Vec<&str> = rows
        .iter()
        .filter(|row| !section.lines().any(|l| l == row.as_str()))
        .map(String::as_str)
        .collect();
    // A row of the section's table that is none of the generated ones: a setting renamed or
    // removed from the table, still documented.
    let stale: Vec<&str> = section
        .lines()
        .filter(|l| l.starts_with("| `") && !rows.iter().any(|row| row == l))
        .collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "docs/configuration.md's Settings section lacks rows (or has stale defaults or \
         meanings) for:\n{}\nand has rows the table does not:\n{}\nthe whole table, to paste:\n{}",
        missing.join("\n"),
        stale.join("\n"),
        settings_table()
    );
}

#[test]
fn printed_defaults_are_the_documented_ones() {
    // A configuration of defaults prints, for every setting with a literal default, exactly the
    // text SETTINGS documents: the default is written once, in the table.
    let printed = base().build().unwrap().to_properties();
    let consumers = SETTINGS
        .iter()
        .filter(|s| !cross::share_only(s.name) && !cross::producer_only(s.name));
    for s in consumers.filter(|s| !s.default.starts_with('(')) {
        let value = printed
            .iter()
            .find(|(k, _)| *k == s.name)
            .map(|(_, v)| v.as_str());
        assert_eq!(value, Some(s.default), "{}", s.name);
    }
    // The one derived default documents its cap.
    let drain = SETTINGS
        .iter()
        .find(|s| s.name == "revoke.drain.timeout.ms")
        .unwrap();
    let cap = cross::DRAIN_TIMEOUT_CAP.as_millis().to_string();
    assert!(drain.default.contains(&cap), "{}", drain.default);
    assert_eq!(
        base()
            .max_poll_interval(Duration::from_secs(60))
            .build()
            .unwrap()
            .revoke_drain_timeout(),
        cross::DRAIN_TIMEOUT_CAP
    );
}

#[test]
fn settings_are_documented_once_each() {
    let mut names: Vec<&str> = SETTINGS.iter().map(|s| s.name).collect();
    let count = names.len();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), count, "a setting has two rows");
    for s in SETTINGS {
        assert!(!s.description.is_empty(), "{} has no documentation", s.name);
        assert!(!ConsumerConfig::builder().is_set(s.name), "{}", s.name);
    }
    for name in cross::CLASSIC_ONLY {
        assert!(SETTINGS.iter().any(|s| s.name == *name), "{name}");
    }
}

fn sasl_base() -> ConsumerConfigBuilder {
    base()
        .set("security.protocol", "SASL_PLAINTEXT")
        .set("sasl.mechanism", "SCRAM-SHA-512")
}

#[test]
fn sasl_settings_reach_every_connection_of_the_client() {
    let c = sasl_base()
        .set("sasl.username", "alice")
        .set("sasl.password", "pw-1")
        .build()
        .unwrap();
    let sasl = c.client_config().connection.sasl.unwrap();
    assert_eq!(sasl.mechanism, SaslMechanism::ScramSha512);
    assert_eq!(sasl.username, "alice");
    assert_eq!(sasl.password, Secret::new("pw-1"));
    // Java's JAAS line instead of librdkafka's two settings.
    let c = base()
        .set("security.protocol", "sasl_plaintext")
        .set("sasl.mechanism", "PLAIN")
        .set(
            "sasl.jaas.config",
            r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="bob" password="pw-2";"#,
        )
        .build()
        .unwrap();
    let sasl = c.sasl().unwrap();
    assert_eq!(
        (sasl.mechanism, sasl.username.as_str()),
        (SaslMechanism::Plain, "bob")
    );
    assert_eq!(sasl.password, Secret::new("pw-2"));
    // PLAINTEXT: no SASL at all.
    assert_eq!(
        base().build().unwrap().client_config().connection.sasl,
        None
    );
}

/// Builds each configuration and checks that it is refused naming `setting`,
/// with a message that contains both the setting and `rule`.
fn assert_each_is_refused_naming_setting_and_rule(cases: Vec<(ConsumerConfigBuilder, &str, &str)>) {
    for (builder, setting, rule) in cases {
        let err = builder.build().unwrap_err();
        let text = err.to_string();
        assert_eq!(err.setting(), Some(setting), "{text}");
        assert!(text.contains(setting) && text.contains(rule), "{text}");
    }
}

#[test]
fn sasl_rules_name_the_setting_and_the_rule() {
    let jaas_scram = r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="a" password="b";"#;
    let cases: Vec<(ConsumerConfigBuilder, &str, &str)> = vec![
        // SASL without a mechanism.
        (
            base().set("security.protocol", "SASL_PLAINTEXT"),
            "sasl.mechanism",
            "there is no default",
        ),
        // A mechanism without credentials, or half of them.
        (sasl_base(), "sasl.username", "needs credentials"),
        (
            sasl_base().set("sasl.username", "a"),
            "sasl.password",
            "needs credentials",
        ),
        (
            sasl_base().set("sasl.password", "b"),
            "sasl.username",
            "needs credentials",
        ),
        // SASL settings with PLAINTEXT would silently not apply.
        (
            base().set("sasl.mechanism", "PLAIN"),
            "sasl.mechanism",
            "does not authenticate",
        ),
        (
            base().set("sasl.username", "a").set("sasl.password", "b"),
            "sasl.username",
            "does not authenticate",
        ),
        (
            base().set("sasl.jaas.config", jaas_scram),
            "sasl.jaas.config",
            "does not authenticate",
        ),
        // Credentials given twice.
        (
            sasl_base()
                .set("sasl.jaas.config", jaas_scram)
                .set("sasl.username", "a"),
            "sasl.jaas.config",
            "give the credentials once",
        ),
        // A login module that does not serve the mechanism.
        (
            base()
                .set("security.protocol", "SASL_PLAINTEXT")
                .set("sasl.mechanism", "PLAIN")
                .set("sasl.jaas.config", jaas_scram),
            "sasl.jaas.config",
            "does not serve sasl.mechanism=PLAIN",
        ),
        // TLS settings with a protocol without TLS would silently not apply.
        (
            base().set("ssl.ca.location", "/etc/ca.pem"),
            "ssl.ca.location",
            "does not use TLS",
        ),
        (
            sasl_base()
                .set("sasl.username", "a")
                .set("sasl.password", "b")
                .set("ssl.endpoint.identification.algorithm", "none"),
            "ssl.endpoint.identification.algorithm",
            "does not use TLS",
        ),
        // OAUTHBEARER takes a token callback, which has no text form, and no password.
        (
            base()
                .set("security.protocol", "SASL_PLAINTEXT")
                .set("sasl.mechanism", "OAUTHBEARER"),
            "sasl.oauthbearer.token.callback",
            "needs sasl.oauthbearer.token.callback",
        ),
        (
            base()
                .set("security.protocol", "SASL_PLAINTEXT")
                .set("sasl.mechanism", "OAUTHBEARER")
                .set("sasl.password", "b"),
            "sasl.password",
            "would not be used",
        ),
        (
            base().set("sasl.oauthbearer.token.callback", "my_fn"),
            "sasl.oauthbearer.token.callback",
            "cannot be given as text",
        ),
        (
            base()
                .set("security.protocol", "SASL_PLAINTEXT")
                .set("sasl.mechanism", "OAUTHBEARER")
                .set(
                    "sasl.jaas.config",
                    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
                ),
            "sasl.jaas.config",
            "OAUTHBEARER tokens come from a callback",
        ),
        // Mechanisms Kafka has that this library does not.
        (
            base().set("sasl.mechanism", "GSSAPI"),
            "sasl.mechanism",
            "Kerberos",
        ),
        (
            base().set("sasl.mechanism", "SCRAM-SHA-1"),
            "sasl.mechanism",
            "allowed: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512",
        ),
        (
            base().set("security.protocol", "TLS"),
            "security.protocol",
            "allowed: PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL",
        ),
        // Empty credentials.
        (
            sasl_base()
                .set("sasl.username", " ")
                .set("sasl.password", "b"),
            "sasl.username",
            "must not be empty",
        ),
        (
            sasl_base()
                .set("sasl.username", "a")
                .set("sasl.password", ""),
            "sasl.password",
            "must not be empty",
        ),
    ];
    assert_each_is_refused_naming_setting_and_rule(cases);
}

#[test]
fn sasl_secrets_never_appear_in_any_printout_of_the_configuration() {
    let password = "Pw-only-here-7731";
    let jaas_password = "Jaas-only-here-9142";
    let jaas = format!(
        r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="carol" password="{jaas_password}";"#
    );
    let by_name = sasl_base()
        .set("sasl.username", "alice")
        .set("sasl.password", password);
    let by_jaas = sasl_base().set("sasl.jaas.config", &jaas);
    let mut printed = vec![format!("{by_name:?}"), format!("{by_jaas:?}")];
    for builder in [by_name, by_jaas] {
        let c = builder.build().unwrap();
        printed.push(format!("{c:?}"));
        printed.push(format!("{:?}", c.client_config()));
        printed.push(format!("{:?}", c.sasl()));
        printed.push(format!("{:?}", c.to_properties()));
        // The printed form is refused when fed back, rather than used as the password.
        let err = ConsumerConfig::from_properties(c.to_properties()).unwrap_err();
        assert!(err.to_string().contains(HIDDEN), "{err}");
        printed.push(format!("{err} {err:?}"));
    }
    // Errors of configurations that hold secrets.
    for builder in [
        base().set("sasl.password", password),
        base().set("sasl.jaas.config", &jaas),
        sasl_base().set("sasl.jaas.config", jaas.trim_end_matches(';')),
        sasl_base()
            .set("sasl.jaas.config", &jaas)
            .set("sasl.password", password),
    ] {
        let err = builder.build().unwrap_err();
        printed.push(format!("{err} {err:?}"));
    }
    for text in &printed {
        assert!(
            !text.contains(password) && !text.contains(jaas_password),
            "a secret was printed: {text}"
        );
    }
    assert!(printed.iter().any(|t| t.contains("[redacted]")));
}

#[test]
fn consumer_protocol_takes_a_remote_assignor_by_its_broker_name() {
    for (text, assignor) in [
        ("uniform", RemoteAssignor::Uniform),
        ("range", RemoteAssignor::Range),
        (" RANGE ", RemoteAssignor::Range),
    ] {
        let c = props(&[
            ("group.protocol", "consumer"),
            ("group.remote.assignor", text),
        ])
        .unwrap();
        assert_eq!(c.group_remote_assignor(), Some(assignor));
        assert_eq!(
            ConsumerConfig::from_properties(c.to_properties()).unwrap(),
            c
        );
    }
    let typed = base()
        .group_protocol(GroupProtocol::Consumer)
        .group_remote_assignor(RemoteAssignor::Uniform)
        .build()
        .unwrap();
    assert_eq!(typed.group_remote_assignor(), Some(RemoteAssignor::Uniform));
    assert_eq!(props(&[]).unwrap().group_remote_assignor(), None);
    let err = props(&[
        ("group.protocol", "consumer"),
        ("group.remote.assignor", "sticky"),
    ])
    .unwrap_err();
    assert!(matches!(
        err,
        ConfigError::InvalidValue {
            name: "group.remote.assignor",
            ..
        }
    ));
    assert!(err.to_string().contains("uniform, range"), "{err}");
}

#[test]
fn consumer_only_settings_are_refused_with_the_classic_protocol() {
    for (name, value) in [
        ("group.remote.assignor", "uniform"),
        ("session.bound.ms", "3000"),
    ] {
        let err = props(&[(name, value)]).unwrap_err();
        match &err {
            ConfigError::Conflict {
                name: n,
                other,
                rule,
            } => {
                assert_eq!(n, &name);
                assert_eq!(*other, "group.protocol");
                assert!(rule.contains("group.protocol=consumer only"), "{rule}");
            }
            other => panic!("{name}: {other:?}"),
        }
    }
}

#[test]
fn the_session_bound_is_positive_and_at_most_the_brokers_default_session_timeout() {
    let ok = props(&[
        ("group.protocol", "consumer"),
        ("session.bound.ms", "45000"),
    ])
    .unwrap();
    assert_eq!(ok.session_bound(), Some(Duration::from_secs(45)));
    assert_eq!(
        ConsumerConfig::from_properties(ok.to_properties()).unwrap(),
        ok
    );
    assert_eq!(
        props(&[("group.protocol", "consumer")])
            .unwrap()
            .session_bound(),
        None,
        "unset: derived from the broker's heartbeat interval"
    );
    for value in ["0", "45001"] {
        let err =
            props(&[("group.protocol", "consumer"), ("session.bound.ms", value)]).unwrap_err();
        assert!(
            matches!(
                err,
                ConfigError::OutOfRange {
                    name: "session.bound.ms",
                    ..
                }
            ),
            "{value}: {err:?}"
        );
    }
}

#[test]
fn a_classic_only_setting_is_refused_saying_the_broker_owns_it() {
    let err = props(&[
        ("group.protocol", "consumer"),
        ("heartbeat.interval.ms", "1000"),
    ])
    .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("the broker owns it"), "{text}");
    assert!(text.contains("heartbeat.interval.ms"), "{text}");
}

#[cfg(not(feature = "tls"))]
#[test]
fn tls_protocols_without_the_tls_feature_are_refused_naming_the_feature() {
    for protocol in ["SSL", "sasl_ssl"] {
        let err = base()
            .set("security.protocol", protocol)
            .build()
            .unwrap_err();
        let text = err.to_string();
        assert_eq!(err.setting(), Some("security.protocol"), "{text}");
        assert!(text.contains("cargo feature `tls`"), "{text}");
    }
}

#[cfg(feature = "tls")]
#[test]
fn tls_rules_name_the_setting_and_the_rule() {
    let ssl = || base().set("security.protocol", "SSL");
    let cases: Vec<(ConsumerConfigBuilder, &str, &str)> = vec![
        (
            ssl().set("ssl.certificate.location", "/c.pem"),
            "ssl.key.location",
            "needs ssl.key.location",
        ),
        (
            ssl().set("ssl.key.location", "/k.pem"),
            "ssl.certificate.location",
            "needs ssl.certificate.location",
        ),
        (
            ssl().set("ssl.ca.location", "/nonexistent/rg-ca.pem"),
            "ssl.ca.location",
            "cannot read PEM certificates",
        ),
        (
            ssl().set("ssl.endpoint.identification.algorithm", "http"),
            "ssl.endpoint.identification.algorithm",
            "https (verify the broker's host name) or none",
        ),
        (
            base().set("security.protocol", "SASL_SSL"),
            "sasl.mechanism",
            "there is no default",
        ),
    ];
    assert_each_is_refused_naming_setting_and_rule(cases);
}

/// Without a host-name check, trusting the operating system's store would accept any public
/// CA's certificate for any name: so `none` needs a CA of the user's own.
#[cfg(feature = "tls")]
#[test]
fn hostname_verification_off_without_an_own_ca_is_refused_naming_both_settings() {
    for protocol in ["SSL", "SASL_SSL"] {
        let mut b = base()
            .set("security.protocol", protocol)
            .set("ssl.endpoint.identification.algorithm", "none");
        if protocol == "SASL_SSL" {
            b = b
                .set("sasl.mechanism", "PLAIN")
                .set("sasl.username", "u")
                .set("sasl.password", "p");
        }
        let err = b.build().unwrap_err();
        let text = err.to_string();
        assert_eq!(
            err.setting(),
            Some("ssl.endpoint.identification.algorithm"),
            "{text}"
        );
        assert!(
            text.contains("ssl.ca.location") && text.contains("any public CA"),
            "{text}"
        );
    }
}

/// Unknown `ssl.*` and `sasl.*` names get the list of what is implemented, and no claim that
/// TLS is missing.
#[test]
fn unknown_security_settings_name_the_implemented_ones() {
    let err = base()
        .set("ssl.truststore.location", "/x.jks")
        .build()
        .unwrap_err();
    let text = err.to_string();
    assert!(!text.contains("not built"), "{text}");
    assert!(
        text.contains("ssl.ca.location") && text.contains("PEM"),
        "{text}"
    );
    let err = base()
        .set("sasl.login.callback.handler.class", "x")
        .build()
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("OAUTHBEARER"), "{text}");
}

#[test]
fn oauthbearer_takes_its_token_from_the_typed_callback() {
    use crate::wire::{OAuthBearerCallback, OAuthBearerToken};
    let token = "tok-only-here-5521";
    let callback = OAuthBearerCallback::new(move || {
        Ok(OAuthBearerToken {
            value: Secret::new(token),
            lifetime: Duration::from_secs(600),
            extensions: Vec::new(),
        })
    });
    let c = base()
        .set("security.protocol", "SASL_PLAINTEXT")
        .set("sasl.mechanism", "OAUTHBEARER")
        .sasl_oauthbearer_token_callback(callback.clone())
        .build()
        .unwrap();
    let sasl = c.sasl().unwrap();
    assert_eq!(sasl.mechanism, SaslMechanism::OAuthBearer);
    assert_eq!(sasl.token_callback, Some(callback));
    let props = c.to_properties();
    assert!(props.contains(&("sasl.oauthbearer.token.callback", CALLBACK.to_string())));
    for text in [
        format!("{c:?}"),
        format!("{props:?}"),
        format!("{:?}", c.client_config()),
    ] {
        assert!(!text.contains(token), "{text}");
    }
    // The printed form is refused when read back, naming the typed setter.
    let err = ConsumerConfig::from_properties(props).unwrap_err();
    assert!(
        err.to_string().contains("sasl_oauthbearer_token_callback"),
        "{err}"
    );
}

#[test]
fn the_consumer_group_machine_gets_its_settings_from_the_configuration() {
    let c = props(&[
        ("group.protocol", "consumer"),
        ("group.instance.id", "worker-1"),
        ("group.remote.assignor", "range"),
        ("session.bound.ms", "4000"),
        ("max.poll.interval.ms", "60000"),
        ("retry.backoff.ms", "50"),
        ("reconnect.backoff.max.ms", "2000"),
    ])
    .unwrap();
    let g = c.consumer_group_config(&["orders", "fills"]);
    assert_eq!(g.group_id, "g");
    assert_eq!(g.instance_id.as_deref(), Some("worker-1"));
    assert_eq!(g.topics, vec!["orders".to_string(), "fills".to_string()]);
    assert_eq!(
        g.rebalance_timeout,
        Duration::from_secs(60),
        "max.poll.interval.ms"
    );
    assert_eq!(g.remote_assignor, Some(RemoteAssignor::Range));
    assert_eq!(g.session_bound, Some(Duration::from_secs(4)));
    assert_eq!(g.retry_backoff, Duration::from_millis(50));
    assert_eq!(g.retry_backoff_max, Duration::from_secs(2));
}

#[test]
fn client_rack_reaches_fetch_and_both_group_protocols_and_bad_racks_are_refused() {
    let c = props(&[("client.rack", "eu-west-1b")]).unwrap();
    assert_eq!(c.client_rack(), Some("eu-west-1b"));
    assert_eq!(c.fetch_config().client_rack.as_deref(), Some("eu-west-1b"));
    assert_eq!(
        c.consumer_group_config(&["orders"]).rack.as_deref(),
        Some("eu-west-1b")
    );
    assert!(c
        .to_properties()
        .iter()
        .any(|(k, v)| *k == "client.rack" && v == "eu-west-1b"));
    let unset = base().build().unwrap();
    assert_eq!(unset.client_rack(), None);
    assert_eq!(unset.fetch_config().client_rack, None);
    for bad in ["", " zone-a", "zone-a\t", "zone\u{7}a", &"r".repeat(256)] {
        let err = base().client_rack(bad).build().unwrap_err();
        assert_eq!(err.setting(), Some("client.rack"), "{bad:?}");
    }
    let err = props(&[("client.rack", "")]).unwrap_err();
    assert!(err.to_string().contains("leave it unset"), "{err}");
}

#[test]
fn retry_settings_are_read_checked_and_default_to_no_retries() {
    let c = base().build().unwrap();
    assert_eq!(
        c.processing_retries(),
        0,
        "default: a failure stops the run"
    );
    assert_eq!(c.processing_retry_backoff(), Duration::from_millis(100));
    assert_eq!(c.processing_retry_backoff_max(), Duration::from_secs(10));
    let c = props(&[
        ("processing.retries", "3"),
        ("processing.retry.backoff.ms", "50"),
        ("processing.retry.backoff.max.ms", "50"),
    ])
    .unwrap();
    assert_eq!(
        (c.processing_retries(), c.processing_retry_backoff()),
        (3, Duration::from_millis(50))
    );
    let err = props(&[("processing.retries", "1001")]).unwrap_err();
    assert!(
        matches!(
            err,
            ConfigError::OutOfRange {
                name: "processing.retries",
                ..
            }
        ),
        "{err}"
    );
    let err = props(&[("processing.retry.backoff.ms", "0")]).unwrap_err();
    assert!(
        matches!(
            err,
            ConfigError::OutOfRange {
                name: "processing.retry.backoff.ms",
                ..
            }
        ),
        "{err}"
    );
    let err = base()
        .processing_retry_backoff(Duration::from_secs(2))
        .processing_retry_backoff_max(Duration::from_secs(1))
        .build()
        .unwrap_err();
    assert!(
        matches!(
            err,
            ConfigError::Conflict {
                name: "processing.retry.backoff.ms",
                other: "processing.retry.backoff.max.ms",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("2000"), "{err}");
}
