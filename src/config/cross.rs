//! Rules between settings, checked after every setting passed its own rule.
//!
//! Each names the setting reported as wrong and the one it conflicts with, and states the rule
//! with both values, so the operator sees which of the two to change and why.

use std::time::Duration;

use log::warn;

use super::checks::truncate_ms;
use super::security::EndpointIdentification;
use super::{ConfigError, ConsumerConfig, GroupProtocol, SecurityProtocol};
use crate::wire::SaslMechanism;

/// Settings that only the classic protocol uses; with `group.protocol=consumer` the broker decides
/// them, so setting one explicitly is refused (as Java 4.x does) rather than ignored.
pub(super) const CLASSIC_ONLY: &[&str] = &[
    "partition.assignment.strategy",
    "session.timeout.ms",
    "heartbeat.interval.ms",
];

/// The consumer-group settings a share consumer refuses, each with what decides it instead
/// (as Java's `KafkaShareConsumer` refuses them, rather than ignoring them).
pub(super) const NOT_FOR_SHARE_GROUPS: &[(&str, &str)] = &[
    ("group.instance.id", "share group members are dynamic (no static membership in KIP-932)"),
    ("session.timeout.ms", "the group's `share.session.timeout.ms` (broker `group.share.session.timeout.ms`) decides it"),
    ("heartbeat.interval.ms", "the group's `share.heartbeat.interval.ms` decides it; the broker sends it in every heartbeat answer"),
    ("partition.assignment.strategy", "the broker assigns partitions (`group.share.assignors`)"),
    ("group.remote.assignor", "the broker assigns partitions (`group.share.assignors`)"),
    ("group.protocol", "a share consumer always speaks the share group protocol"),
    ("auto.offset.reset", "set the group config `share.auto.offset.reset` (Admin incrementalAlterConfigs on the GROUP resource)"),
    ("isolation.level", "set the group config `share.isolation.level`"),
    ("enable.auto.commit", "nothing is committed: each record is acknowledged once it finished"),
    ("commit.interval.ms", "nothing is committed: acknowledgements ride on the next ShareFetch"),
    ("commit.metadata.max.bytes", "nothing is committed: each record is acknowledged"),
    ("max.poll.interval.ms", "the record lock (`share.record.lock.duration.ms`) bounds how long a record may take"),
    ("revoke.drain.timeout.ms", "share groups have no revocation: a record's lock, not its partition, is the lease"),
    ("session.bound.ms", "a record's lease ends with its lock, before the broker's"),
    ("processing.order", "a share group delivers records of one partition to several members, in no order"),
    ("processing.max.in.flight.per.partition", "a share group bounds in-flight records per partition on the broker (`group.share.partition.max.record.locks`)"),
    ("processing.retry.backoff.ms", "a released record is redelivered by the broker; a backoff would hold its lock"),
    ("processing.retry.backoff.max.ms", "a released record is redelivered by the broker; a backoff would hold its lock"),
    ("rebalance.storm.window.ms", "share groups have no rebalances that stop processing"),
    ("rebalance.storm.threshold", "share groups have no rebalances that stop processing"),
    ("batch.safety.factor", "batches are bounded by `max.poll.records` and each record by its lock"),
    ("transaction.interval.ms", "share groups have no committed offsets to put in a transaction (KIP-932)"),
    ("fetch.buffer.bytes", "a share fetch holds only the records it acquired, bounded by `max.poll.records` and `fetch.max.bytes`"),
];

/// The producer's own settings (its rows in the table, documented "Producer only"): refused
/// by the consumer and the share consumer, which produce nothing with them.
pub(super) const PRODUCER_ONLY: &[&str] = &[
    "acks",
    "enable.idempotence",
    "linger.ms",
    "batch.size",
    "buffer.memory",
    "max.block.ms",
    "max.in.flight.requests.per.connection",
    "delivery.timeout.ms",
    "max.request.size",
    "compression.type",
    "compression.gzip.level",
    "compression.zstd.level",
    "partitioner.ignore.keys",
    "transactional.id",
    "transaction.timeout.ms",
];

/// The settings a producer shares with the consumer: how to reach, trust and authenticate to
/// the cluster, and how long to wait for it. Every other consumer setting is refused by a
/// producer ([`ConfigError::NotForProducers`]) rather than ignored.
pub(super) const SHARED_WITH_PRODUCERS: &[&str] = &[
    "bootstrap.servers",
    "client.id",
    "request.timeout.ms",
    "socket.connection.setup.timeout.ms",
    "retry.backoff.ms",
    "reconnect.backoff.max.ms",
    "metadata.max.age.ms",
    "security.protocol",
    "sasl.mechanism",
    "sasl.username",
    "sasl.password",
    "sasl.jaas.config",
    "sasl.oauthbearer.token.callback",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.endpoint.identification.algorithm",
];

/// Whether a setting is the producer's own.
pub(super) fn producer_only(name: &str) -> bool {
    PRODUCER_ONLY.contains(&name)
}

/// The rules between a producer's settings (as Java's `ProducerConfig` states them).
pub(super) fn check_producer(config: &ConsumerConfig) -> Result<(), ConfigError> {
    if config.transactional_id.is_some() && !config.enable_idempotence {
        return Err(ConfigError::Conflict {
            name: "enable.idempotence",
            other: "transactional.id",
            rule: "a transactional producer is idempotent (enable.idempotence=true): the \
                   transaction coordinator fences by the producer id and epoch, and a retried \
                   batch must not be written twice inside a transaction"
                .to_string(),
        });
    }
    if config.enable_idempotence {
        if config.acks != super::values::Acks::All {
            return Err(ConfigError::Conflict {
                name: "acks",
                other: "enable.idempotence",
                rule: format!(
                    "idempotence needs acks=all (acks is {}): a batch only its leader has can \
                     be lost with the leader, and the retry that replaces it would carry a \
                     sequence the new leader never saw; set acks=all or enable.idempotence=false",
                    super::values::SettingValue::text(&config.acks)
                ),
            });
        }
        if config.max_in_flight_requests_per_connection > 5 {
            return Err(ConfigError::Conflict {
                name: "max.in.flight.requests.per.connection",
                other: "enable.idempotence",
                rule: format!(
                    "with idempotence at most 5 requests may be in flight (got {}): the leader \
                     remembers a producer's last five batches per partition, and a sixth would \
                     make a retry look out of order",
                    config.max_in_flight_requests_per_connection
                ),
            });
        }
    }
    let floor = config.linger_ms + config.request_timeout;
    if config.delivery_timeout < floor {
        return Err(ConfigError::Conflict {
            name: "delivery.timeout.ms",
            other: "request.timeout.ms",
            rule: format!(
                "delivery.timeout.ms ({} ms) must be at least linger.ms + request.timeout.ms \
                 ({} ms): a record must be able to wait out its batch and one request",
                config.delivery_timeout.as_millis(),
                floor.as_millis()
            ),
        });
    }
    if config.batch_size > config.buffer_memory {
        return Err(ConfigError::Conflict {
            name: "batch.size",
            other: "buffer.memory",
            rule: format!(
                "batch.size ({}) must not exceed buffer.memory ({}): one batch must fit",
                config.batch_size, config.buffer_memory
            ),
        });
    }
    Ok(())
}

/// Whether a setting is the share consumer's own (its rows in the table are named `share.*`):
/// refused by the consumer, which has no share group to apply it to.
pub(super) fn share_only(name: &str) -> bool {
    name.starts_with("share.")
}

/// The cap on the default `revoke.drain.timeout.ms` when `max.poll.interval.ms` is large. Why
/// ten seconds: long enough for a side effect with one retry, short enough that one hung handler
/// cannot stall a rebalance of the whole group for long.
pub(super) const DRAIN_TIMEOUT_CAP: Duration = Duration::from_secs(10);

/// The default `revoke.drain.timeout.ms`: half the poll interval, capped at
/// [`DRAIN_TIMEOUT_CAP`], so a drain always ends well inside the interval that would get the
/// member evicted.
pub(super) fn default_drain_timeout(max_poll_interval: Duration) -> Duration {
    DRAIN_TIMEOUT_CAP.min(truncate_ms(max_poll_interval / 2))
}

/// Checks the rules between settings, in this order: settings the consumer protocol refuses
/// (`classic_only_set`: the first [`CLASSIC_ONLY`] setting given explicitly), settings only the
/// consumer protocol uses (`group.remote.assignor`, `session.bound.ms`), heartbeat against
/// session, poll interval against session (both classic only), drain against poll interval,
/// the retry backoff against its cap, then the security settings ([`check_security`]).
/// A `fetch.max.bytes` below `max.partition.fetch.bytes` is allowed, as in Java, and logged.
pub(super) fn check(
    config: &ConsumerConfig,
    classic_only_set: Option<&'static str>,
) -> Result<(), ConfigError> {
    if config.group_protocol == GroupProtocol::Consumer {
        if let Some(name) = classic_only_set {
            return Err(ConfigError::ClassicOnly { name });
        }
    }
    if config.group_protocol == GroupProtocol::Classic {
        let consumer_only = [
            (
                "group.remote.assignor",
                config.group_remote_assignor.is_some(),
            ),
            ("session.bound.ms", config.session_bound.is_some()),
        ];
        if let Some((name, _)) = consumer_only.into_iter().find(|(_, set)| *set) {
            return Err(ConfigError::Conflict {
                name,
                other: "group.protocol",
                rule: format!(
                    "{name} applies to group.protocol=consumer only; with classic the assignor \
                     is partition.assignment.strategy and the session is session.timeout.ms"
                ),
            });
        }
    }
    let session = config.session_timeout.as_millis();
    let heartbeat = config.heartbeat_interval.as_millis();
    let max_poll = config.max_poll_interval.as_millis();
    if config.group_protocol == GroupProtocol::Classic {
        if heartbeat * 3 > session {
            return Err(ConfigError::Conflict {
                name: "heartbeat.interval.ms",
                other: "session.timeout.ms",
                rule: format!(
                    "heartbeat.interval.ms ({heartbeat}) must be at most a third of \
                     session.timeout.ms ({session}), so that losing two heartbeats in a row does \
                     not evict the member"
                ),
            });
        }
        if max_poll < session {
            return Err(ConfigError::Conflict {
                name: "max.poll.interval.ms",
                other: "session.timeout.ms",
                rule: format!(
                    "max.poll.interval.ms ({max_poll}) must not be below session.timeout.ms \
                     ({session}): it is also the rebalance timeout, and a rebalance that gives \
                     members less time to rejoin than the session timeout evicts live members \
                     and starts another rebalance"
                ),
            });
        }
    }
    let drain = config.revoke_drain_timeout.as_millis();
    if drain >= max_poll {
        return Err(ConfigError::Conflict {
            name: "revoke.drain.timeout.ms",
            other: "max.poll.interval.ms",
            rule: format!(
                "revoke.drain.timeout.ms ({drain}) must be below max.poll.interval.ms \
                 ({max_poll}): a drain that outlasts the poll interval gets the member evicted \
                 while it still holds the work it is draining"
            ),
        });
    }
    let (backoff, backoff_max) = (
        config.processing_retry_backoff.as_millis(),
        config.processing_retry_backoff_max.as_millis(),
    );
    if backoff > backoff_max {
        return Err(ConfigError::Conflict {
            name: "processing.retry.backoff.ms",
            other: "processing.retry.backoff.max.ms",
            rule: format!(
                "processing.retry.backoff.ms ({backoff}) must not be above \
                 processing.retry.backoff.max.ms ({backoff_max}), the cap of the doubling backoff"
            ),
        });
    }
    check_security(config)?;
    if config.fetch_max_bytes < config.max_partition_fetch_bytes {
        warn!(
            "fetch.max.bytes ({}) is below max.partition.fetch.bytes ({}): allowed, as in Java, \
             but one partition can then fill a whole fetch",
            config.fetch_max_bytes, config.max_partition_fetch_bytes
        );
    }
    Ok(())
}

/// The SASL settings, given only with a SASL protocol.
const SASL_SETTINGS: &[&str] = &[
    "sasl.mechanism",
    "sasl.username",
    "sasl.password",
    "sasl.jaas.config",
    "sasl.oauthbearer.token.callback",
];

/// The security rules, in this order: the TLS settings ([`check_tls`]); SASL settings with a
/// protocol without SASL are refused (they would silently not apply); with SASL, the mechanism
/// is required (no GSSAPI default as in Java); OAUTHBEARER needs the token callback and nothing
/// else; PLAIN and SCRAM need their credentials once (`sasl.jaas.config` or `sasl.username`
/// with `sasl.password`), and a JAAS line's login module must serve the mechanism. No message
/// quotes a secret.
pub(super) fn check_security(config: &ConsumerConfig) -> Result<(), ConfigError> {
    check_tls(config)?;
    let protocol = config.security_protocol;
    let given = |name: &str| match name {
        "sasl.mechanism" => config.sasl_mechanism.is_some(),
        "sasl.username" => config.sasl_username.is_some(),
        "sasl.password" => config.sasl_password.is_some(),
        "sasl.oauthbearer.token.callback" => config.sasl_oauthbearer_token_callback.is_some(),
        _ => config.sasl_jaas_config.is_some(),
    };
    if !protocol.uses_sasl() {
        if let Some(name) = SASL_SETTINGS.iter().copied().find(|n| given(n)) {
            return Err(ConfigError::Conflict {
                name,
                other: "security.protocol",
                rule: format!(
                    "{name} is set but security.protocol is {protocol}, which does not \
                     authenticate; set security.protocol={} (or {}) or remove the sasl.* \
                     settings",
                    SecurityProtocol::SaslSsl,
                    SecurityProtocol::SaslPlaintext
                ),
            });
        }
        return Ok(());
    }
    let Some(mechanism) = config.sasl_mechanism else {
        return Err(ConfigError::Conflict {
            name: "sasl.mechanism",
            other: "security.protocol",
            rule: format!(
                "security.protocol={protocol} needs sasl.mechanism (PLAIN, SCRAM-SHA-256, \
                 SCRAM-SHA-512 or OAUTHBEARER); there is no default"
            ),
        });
    };
    if mechanism == SaslMechanism::OAuthBearer {
        if let Some(name) = ["sasl.username", "sasl.password", "sasl.jaas.config"]
            .into_iter()
            .find(|n| given(n))
        {
            return Err(ConfigError::Conflict {
                name,
                other: "sasl.mechanism",
                rule: format!(
                    "sasl.mechanism=OAUTHBEARER authenticates with a token from \
                     sasl.oauthbearer.token.callback; {name} would not be used"
                ),
            });
        }
        if !given("sasl.oauthbearer.token.callback") {
            return Err(ConfigError::Conflict {
                name: "sasl.oauthbearer.token.callback",
                other: "sasl.mechanism",
                rule: "sasl.mechanism=OAUTHBEARER needs sasl.oauthbearer.token.callback (set \
                       with ConsumerConfigBuilder::sasl_oauthbearer_token_callback)"
                    .to_string(),
            });
        }
        return Ok(());
    }
    if given("sasl.oauthbearer.token.callback") {
        return Err(ConfigError::Conflict {
            name: "sasl.oauthbearer.token.callback",
            other: "sasl.mechanism",
            rule: format!(
                "a token callback is only used with sasl.mechanism=OAUTHBEARER, not {mechanism}"
            ),
        });
    }
    if let Some(jaas) = &config.sasl_jaas_config {
        if let Some(other) = ["sasl.username", "sasl.password"]
            .into_iter()
            .find(|n| given(n))
        {
            return Err(ConfigError::Conflict {
                name: "sasl.jaas.config",
                other,
                rule: "give the credentials once: either sasl.jaas.config, or sasl.username \
                       with sasl.password"
                    .to_string(),
            });
        }
        if !jaas.module().serves(mechanism) {
            return Err(ConfigError::Conflict {
                name: "sasl.jaas.config",
                other: "sasl.mechanism",
                rule: format!(
                    "its login module {} does not serve sasl.mechanism={mechanism} \
                     (PlainLoginModule serves PLAIN, ScramLoginModule SCRAM-SHA-256 and \
                     SCRAM-SHA-512)",
                    jaas.module().class()
                ),
            });
        }
        return Ok(());
    }
    for name in ["sasl.username", "sasl.password"] {
        if !given(name) {
            return Err(ConfigError::Conflict {
                name,
                other: "sasl.mechanism",
                rule: format!(
                    "sasl.mechanism={mechanism} needs credentials: sasl.username and \
                     sasl.password, or sasl.jaas.config"
                ),
            });
        }
    }
    Ok(())
}

/// The TLS rules: `SSL` and `SASL_SSL` need the cargo feature `tls`; the `ssl.*` settings are
/// refused with a protocol without TLS (they would silently not apply; `https`, the default
/// host-name check, is harmless and accepted, so printed configurations read back);
/// `ssl.certificate.location` and `ssl.key.location` come together; the host-name check is
/// turned off (`none`) only with a CA of the user's own (`ssl.ca.location`); and, with the
/// feature, the files are read now, so a missing or malformed one is refused at build time.
fn check_tls(config: &ConsumerConfig) -> Result<(), ConfigError> {
    let protocol = config.security_protocol;
    if !protocol.uses_tls() {
        let given = [
            ("ssl.ca.location", config.ssl_ca_location.is_some()),
            (
                "ssl.certificate.location",
                config.ssl_certificate_location.is_some(),
            ),
            ("ssl.key.location", config.ssl_key_location.is_some()),
            (
                "ssl.endpoint.identification.algorithm",
                config.ssl_endpoint_identification_algorithm != EndpointIdentification::Https,
            ),
        ];
        if let Some((name, _)) = given.into_iter().find(|(_, set)| *set) {
            return Err(ConfigError::Conflict {
                name,
                other: "security.protocol",
                rule: format!(
                    "{name} is set but security.protocol is {protocol}, which does not use \
                     TLS; set security.protocol={} (or {}) or remove the ssl.* settings",
                    SecurityProtocol::Ssl,
                    SecurityProtocol::SaslSsl
                ),
            });
        }
        return Ok(());
    }
    if !cfg!(feature = "tls") {
        return Err(ConfigError::Unavailable {
            name: "security.protocol",
            value: protocol.as_str().to_string(),
            reason: "TLS needs this library built with the cargo feature `tls` (rustls; its \
                     ring provider needs a C compiler to build); without it use PLAINTEXT or \
                     SASL_PLAINTEXT",
        });
    }
    if config.ssl_endpoint_identification_algorithm == EndpointIdentification::None
        && config.ssl_ca_location.is_none()
    {
        return Err(ConfigError::Conflict {
            name: "ssl.endpoint.identification.algorithm",
            other: "ssl.ca.location",
            rule: "ssl.endpoint.identification.algorithm=none needs ssl.ca.location: without \
                   the host-name check, the operating system's trust store would accept a \
                   certificate from any public CA for any name, so anyone could pose as the \
                   broker; give the CA that signs the brokers' certificates, or keep https"
                .to_string(),
        });
    }
    match (&config.ssl_certificate_location, &config.ssl_key_location) {
        (Some(_), None) => {
            return Err(ConfigError::Conflict {
                name: "ssl.key.location",
                other: "ssl.certificate.location",
                rule: "ssl.certificate.location needs ssl.key.location (its private key)"
                    .to_string(),
            })
        }
        (None, Some(_)) => {
            return Err(ConfigError::Conflict {
                name: "ssl.certificate.location",
                other: "ssl.key.location",
                rule: "ssl.key.location needs ssl.certificate.location (the certificate it \
                       signs for)"
                    .to_string(),
            })
        }
        _ => {}
    }
    #[cfg(feature = "tls")]
    if let Some(tls) = config.tls() {
        tls.load().map_err(|e| ConfigError::TlsFile {
            name: e.setting,
            path: e.path.clone(),
            problem: e.problem.clone(),
        })?;
    }
    Ok(())
}
