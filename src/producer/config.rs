//! The producer's settings, under Kafka's names: the consumer's connection and security rows as
//! they are, and the producer's own rows (`acks`, `enable.idempotence`, `linger.ms`, ...).
//!
//! Why one table with the consumer's: a producer connects and authenticates as a consumer does,
//! so its settings are rows of the one settings table (`crate::config`), read, checked and
//! documented once. A consumer's setting given to a producer is refused by name
//! ([`ConfigError::NotForProducers`]) rather than ignored, and a producer's setting given to a
//! consumer likewise ([`ConfigError::ProducerOnly`]).

use std::time::Duration;

use crate::config::{
    self, Acks, CompressionType, ConfigError, ConsumerConfig, ConsumerConfigBuilder,
    ProducerSettings,
};
use crate::wire::ClientConfig;

/// A validated producer configuration. Build it with [`ProducerConfig::builder`] or
/// [`ProducerConfig::from_properties`]; the settings table (`config::SETTINGS`) documents every
/// setting, the producer's rows among them ("Producer only").
///
/// ```
/// use rebalance_guard::ProducerConfig;
///
/// let config = ProducerConfig::builder()
///     .bootstrap_servers(["127.0.0.1:9092"])
///     .set("linger.ms", "10")
///     .set("compression.type", "zstd")
///     .build()?;
/// assert!(config.idempotence());
///
/// // Idempotence needs every in-sync replica to have the batch:
/// let refused = ProducerConfig::builder()
///     .bootstrap_servers(["127.0.0.1:9092"])
///     .set("acks", "1")
///     .build();
/// assert_eq!(refused.unwrap_err().setting(), Some("acks"));
/// # Ok::<(), rebalance_guard::ConfigError>(())
/// ```
#[derive(Clone, Debug)]
pub struct ProducerConfig {
    base: ConsumerConfig,
    settings: ProducerSettings,
    /// Whether the producer's metadata requests may create a topic (where the broker allows).
    auto_create_topics: bool,
}

impl ProducerConfig {
    /// A builder with every setting at its default.
    pub fn builder() -> ProducerConfigBuilder {
        ProducerConfigBuilder::default()
    }

    /// Builds from `(name, value)` pairs (a `.properties` file's); a later pair overrides an
    /// earlier one of the same name. Every setting is read and checked by the one settings
    /// table; a consumer's setting is refused by name.
    pub fn from_properties<I, K, V>(properties: I) -> Result<ProducerConfig, ConfigError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        properties
            .into_iter()
            .fold(ProducerConfig::builder(), |b, (name, value)| {
                b.set(name.as_ref(), value.as_ref())
            })
            .build()
    }

    /// A producer with a consumer's connection and security settings and the producer's own at
    /// their defaults but `linger.ms=0` (the dead-letter topic's: one record at a time, waited
    /// for), `max.block.ms` at the request timeout and no topic created by its metadata (a
    /// missing dead-letter topic is an error, soon), its delivery timeout raised to cover the
    /// consumer's request timeout if need be.
    pub(crate) fn for_dead_letters(consumer: &ConsumerConfig) -> ProducerConfig {
        let mut settings = consumer.producer_settings();
        settings.linger = std::time::Duration::ZERO;
        // A missing topic is reported within one request timeout, as the consumer would.
        settings.max_block = settings.request_timeout;
        settings.delivery_timeout = settings.delivery_timeout.max(settings.request_timeout * 2);
        ProducerConfig {
            base: consumer.clone(),
            settings,
            // A dead-letter topic must exist: a typo must fail `connect`, not create a topic.
            auto_create_topics: false,
        }
    }

    /// `enable.idempotence`.
    pub fn idempotence(&self) -> bool {
        self.settings.idempotence
    }

    /// `bootstrap.servers`.
    pub fn bootstrap_servers(&self) -> &[String] {
        self.base.bootstrap_servers()
    }

    /// `acks`: which replicas have a record before it counts as written. Read back (like the
    /// getters below) so that a log line or a benchmark can print what a producer runs with,
    /// defaults included, rather than what it was given.
    pub fn acks(&self) -> Acks {
        self.settings.acks
    }

    /// `linger.ms`: how long a batch waits for more records before it goes.
    pub fn linger(&self) -> Duration {
        self.settings.linger
    }

    /// `batch.size`: the bytes of records a partition's batch holds before it goes at once.
    pub fn batch_size(&self) -> usize {
        self.settings.batch_size
    }

    /// `buffer.memory`: the bytes of records waiting or unacknowledged before `send` blocks.
    pub fn buffer_memory(&self) -> usize {
        self.settings.buffer_memory
    }

    /// `max.in.flight.requests.per.connection`: the Produce requests on the wire per broker.
    pub fn max_in_flight_requests_per_connection(&self) -> usize {
        self.settings.max_in_flight
    }

    /// `compression.type`: the codec each batch is compressed with.
    pub fn compression_type(&self) -> CompressionType {
        self.settings.compression
    }

    /// `delivery.timeout.ms`: the bound on a record's whole story, `send` to acknowledgement.
    pub fn delivery_timeout(&self) -> Duration {
        self.settings.delivery_timeout
    }

    /// The producer's own settings, read once.
    pub(crate) fn settings(&self) -> &ProducerSettings {
        &self.settings
    }

    /// How the producer's client connects: the consumer's rule for connection and security,
    /// and metadata that may create a topic where the broker allows it (as Java's producer
    /// asks by default).
    pub(crate) fn client_config(&self) -> ClientConfig {
        let mut config = self.base.client_config();
        config.allow_auto_topic_creation = self.auto_create_topics;
        config
    }
}

/// Builds a [`ProducerConfig`]: typed setters for the common settings, [`set`](Self::set) for any
/// setting by its Kafka name. Errors wait for [`build`](Self::build), which names the setting.
/// Each setting is parsed as it is given, so a secret (`sasl.password`, `sasl.jaas.config`) is
/// never kept as text and `Debug` never shows it.
#[derive(Clone, Debug)]
pub struct ProducerConfigBuilder {
    inner: config::ScopedBuilder,
}

impl Default for ProducerConfigBuilder {
    fn default() -> Self {
        ProducerConfigBuilder {
            inner: config::ScopedBuilder::new(config::refused_for_producer),
        }
    }
}

impl ProducerConfigBuilder {
    /// `bootstrap.servers`: any reachable broker of the cluster.
    pub fn bootstrap_servers<S: AsRef<str>>(self, servers: impl IntoIterator<Item = S>) -> Self {
        ProducerConfigBuilder {
            inner: self.inner.bootstrap_servers(servers),
        }
    }

    /// `client.id`: how broker logs and quotas name this producer.
    pub fn client_id(self, id: &str) -> Self {
        self.set("client.id", id)
    }

    /// Any setting by its property name; a consumer's setting is refused by name at
    /// [`build`](Self::build).
    pub fn set(self, name: &str, value: &str) -> Self {
        ProducerConfigBuilder {
            inner: self.inner.set(name, value),
        }
    }

    /// Validates and returns the configuration, or the first problem, naming the setting.
    pub fn build(self) -> Result<ProducerConfig, ConfigError> {
        let base = self
            .inner
            .build_with(ConsumerConfigBuilder::build_for_producer)?;
        let settings = base.producer_settings();
        Ok(ProducerConfig {
            base,
            settings,
            auto_create_topics: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minimal() -> ProducerConfigBuilder {
        ProducerConfig::builder().bootstrap_servers(["127.0.0.1:9092"])
    }

    #[test]
    fn defaults_are_javas() {
        let c = minimal().build().expect("valid");
        let s = c.settings();
        assert_eq!(s.acks, Acks::All);
        assert!(s.idempotence);
        assert_eq!(s.linger, Duration::from_millis(5));
        assert_eq!(s.batch_size, 16384);
        assert_eq!(s.buffer_memory, 32 * 1024 * 1024);
        assert_eq!(s.max_in_flight, 5);
        assert_eq!(s.delivery_timeout, Duration::from_secs(120));
        assert_eq!(s.max_block, Duration::from_secs(60));
        assert_eq!(s.compression, CompressionType::None);
        assert!(c.client_config().allow_auto_topic_creation);
        // The public getters read the same settings.
        assert_eq!(
            (c.acks(), c.linger(), c.batch_size(), c.buffer_memory()),
            (Acks::All, Duration::from_millis(5), 16384, 32 * 1024 * 1024)
        );
        assert_eq!(c.max_in_flight_requests_per_connection(), 5);
        assert_eq!(c.compression_type(), CompressionType::None);
        assert_eq!(c.delivery_timeout(), Duration::from_secs(120));
    }

    /// Each refusal names the setting and states the rule.
    #[test]
    fn bad_settings_are_refused_by_name() {
        // (settings, the setting named, a phrase of the rule)
        type Case = (
            &'static [(&'static str, &'static str)],
            &'static str,
            &'static str,
        );
        let cases: &[Case] = &[
            (&[("acks", "1")], "acks", "idempotence needs acks=all"),
            (
                &[("max.in.flight.requests.per.connection", "6")],
                "max.in.flight.requests.per.connection",
                "at most 5",
            ),
            (
                &[("delivery.timeout.ms", "1000")],
                "delivery.timeout.ms",
                "linger.ms + request.timeout.ms",
            ),
            (&[("batch.size", "0")], "batch.size", "between 1 and"),
            (
                &[("batch.size", "2048"), ("buffer.memory", "1024")],
                "batch.size",
                "must not exceed buffer.memory",
            ),
            (
                &[("compression.type", "brotli")],
                "compression.type",
                "a codec",
            ),
            (
                &[("compression.gzip.level", "12")],
                "compression.gzip.level",
                "1 and 9",
            ),
            (
                &[("group.id", "orders")],
                "group.id",
                "does not apply to a producer",
            ),
            (
                &[("max.poll.records", "10")],
                "max.poll.records",
                "does not apply",
            ),
            (&[("acks", "2")], "acks", "one of"),
        ];
        for (props, name, rule) in cases {
            let mut b = minimal();
            for (k, v) in *props {
                b = b.set(k, v);
            }
            let e = b.build().expect_err(name);
            assert_eq!(e.setting(), Some(*name), "{e}");
            assert!(e.to_string().contains(rule), "{name}: {e}");
        }
        // Without idempotence, acks=1 and more requests in flight are the operator's call.
        let c = minimal()
            .set("enable.idempotence", "false")
            .set("acks", "1")
            .set("max.in.flight.requests.per.connection", "10")
            .build()
            .expect("valid");
        assert_eq!(c.settings().acks, Acks::Leader);
    }

    /// A secret given to the builder is typed at once: neither the builder's nor the
    /// configuration's `Debug` shows it (the share consumer's builder is the same type).
    #[test]
    fn debug_never_shows_a_password() {
        let b = minimal()
            .set("security.protocol", "SASL_PLAINTEXT")
            .set("sasl.mechanism", "PLAIN")
            .set("sasl.username", "u")
            .set("sasl.password", "hunter2-secret");
        assert!(!format!("{b:?}").contains("hunter2"), "{b:?}");
        let c = b.build().expect("valid");
        assert!(!format!("{c:?}").contains("hunter2"));
        let share = crate::share::ShareConfig::builder()
            .bootstrap_servers(["127.0.0.1:9092"])
            .group_id("g")
            .set("sasl.password", "hunter2-secret");
        assert!(!format!("{share:?}").contains("hunter2"));
    }

    /// The dead-letter topic's producer: no waiting for company, no topic created by a typo.
    #[test]
    fn the_dead_letter_producer_creates_no_topic() {
        let consumer = ConsumerConfig::builder()
            .bootstrap_servers(["127.0.0.1:9092"])
            .group_id("g")
            .build()
            .expect("consumer");
        let dlq = ProducerConfig::for_dead_letters(&consumer);
        assert!(!dlq.client_config().allow_auto_topic_creation);
        assert_eq!(dlq.settings().linger, Duration::ZERO);
        assert_eq!(dlq.settings().max_block, consumer.request_timeout());
        assert!(dlq.idempotence());
    }

    /// A consumer refuses a producer's settings rather than ignoring them.
    #[test]
    fn a_consumer_refuses_producer_settings() {
        let e = ConsumerConfig::builder()
            .bootstrap_servers(["127.0.0.1:9092"])
            .group_id("g")
            .set("linger.ms", "10")
            .build()
            .expect_err("producer only");
        assert_eq!(e, ConfigError::ProducerOnly { name: "linger.ms" });
        let e = ConsumerConfig::builder()
            .bootstrap_servers(["127.0.0.1:9092"])
            .build()
            .expect_err("no group");
        assert_eq!(e, ConfigError::Missing { name: "group.id" });
    }
}
