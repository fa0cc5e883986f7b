//! The share consumer's settings, under Kafka's names: the consumer's connection, security and
//! fetch settings as they are, the few `share.*` settings of Java's `KafkaShareConsumer`, and
//! two of our own for the lock guard.
//!
//! Why one table with the consumer's: a share consumer connects, authenticates and fetches as a
//! consumer does, so its settings are rows of the one settings table (`crate::config`), read,
//! checked and documented once, its own `share.*` rows among them. The consumer-group settings
//! that a share group decides elsewhere (the broker assigns, the group's own configuration sets
//! the start position and the lock) are refused by name with
//! [`ConfigError::NotForShareGroups`], as Java refuses them, rather than silently ignored.

use std::time::Duration;

use crate::config::{self, AcquireMode, ConfigError, ConsumerConfig, ConsumerConfigBuilder};
use crate::wire::ClientConfig;

/// A validated share consumer configuration. Build it with [`ShareConfig::builder`] or
/// [`ShareConfig::from_properties`]; the settings table (`config::SETTINGS`) documents every
/// setting it accepts, its own `share.*` rows among them.
#[derive(Clone, Debug)]
pub struct ShareConfig {
    base: ConsumerConfig,
}

impl ShareConfig {
    /// A builder with every setting at its default.
    pub fn builder() -> ShareConfigBuilder {
        ShareConfigBuilder::default()
    }

    /// Builds from `(name, value)` pairs; a later pair overrides an earlier one of the same
    /// name. Every setting is read and checked by the one settings table; the consumer-group
    /// settings a share group decides elsewhere are refused by name.
    pub fn from_properties<I, K, V>(properties: I) -> Result<ShareConfig, ConfigError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        properties
            .into_iter()
            .fold(ShareConfig::builder(), |b, (name, value)| {
                b.set(name.as_ref(), value.as_ref())
            })
            .build()
    }

    /// The settings underneath (connection, security, fetch, `max.poll.records`,
    /// `processing.retries`, `idempotency.cache.size`).
    pub fn consumer(&self) -> &ConsumerConfig {
        &self.base
    }

    /// `group.id`: the share group.
    pub fn group_id(&self) -> &str {
        self.base.group_id()
    }

    internal_pub! {
    /// `share.acquire.mode`.
    fn acquire_mode(&self) -> AcquireMode {
        self.base.share_acquire_mode()
    }
    }

    /// `share.lock.safety.margin.ms`, when set (otherwise the lock guard derives it from the
    /// lock the broker reports).
    pub fn lock_safety_margin(&self) -> Option<Duration> {
        self.base.share_lock_safety_margin()
    }

    /// `share.lock.renew`.
    pub fn lock_renew(&self) -> bool {
        self.base.share_lock_renew()
    }

    internal_pub! {
    /// The wire client's settings (the consumer's, security included).
    fn client_config(&self) -> ClientConfig {
        self.base.client_config()
    }
    }
}

/// Collects settings by name (typed shortcuts for the two every configuration needs) and
/// validates them all at [`build`](Self::build). Each is parsed as it is given, so a secret
/// (`sasl.password`, `sasl.jaas.config`) is never kept as text and `Debug` never shows it.
#[derive(Clone, Debug)]
pub struct ShareConfigBuilder {
    inner: config::ScopedBuilder,
}

impl Default for ShareConfigBuilder {
    fn default() -> Self {
        ShareConfigBuilder {
            inner: config::ScopedBuilder::new(config::refused_for_share),
        }
    }
}

impl ShareConfigBuilder {
    /// `bootstrap.servers`.
    pub fn bootstrap_servers<S: AsRef<str>>(self, servers: impl IntoIterator<Item = S>) -> Self {
        ShareConfigBuilder {
            inner: self.inner.bootstrap_servers(servers),
        }
    }

    /// `group.id`: the share group.
    pub fn group_id(self, group: &str) -> Self {
        self.set("group.id", group)
    }

    /// Any setting by its property name; a consumer-group setting a share group decides
    /// elsewhere is refused by name at [`build`](Self::build).
    pub fn set(self, name: &str, value: &str) -> Self {
        ShareConfigBuilder {
            inner: self.inner.set(name, value),
        }
    }

    /// Validates and returns the configuration, or the first problem, naming the setting.
    pub fn build(self) -> Result<ShareConfig, ConfigError> {
        Ok(ShareConfig {
            base: self
                .inner
                .build_with(ConsumerConfigBuilder::build_for_share)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minimal() -> ShareConfigBuilder {
        ShareConfig::builder()
            .bootstrap_servers(["127.0.0.1:9092"])
            .group_id("orders")
    }

    #[test]
    fn defaults_and_share_settings() {
        let config = minimal().build().expect("valid");
        assert_eq!(config.acquire_mode(), AcquireMode::RecordLimit);
        assert!(config.lock_renew());
        assert_eq!(config.lock_safety_margin(), None);
        let config = minimal()
            .set("share.acquire.mode", "batch_optimized")
            .set("share.lock.safety.margin.ms", "2500")
            .set("share.lock.renew", "false")
            .set("share.acknowledgement.mode", "explicit")
            .set("max.poll.records", "50")
            .build()
            .expect("valid");
        assert_eq!(config.acquire_mode(), AcquireMode::BatchOptimized);
        assert_eq!(
            config.lock_safety_margin(),
            Some(Duration::from_millis(2500))
        );
        assert!(!config.lock_renew());
        assert_eq!(config.consumer().max_poll_records(), 50);
    }

    #[test]
    fn consumer_group_settings_are_refused_by_name() {
        for name in [
            "group.instance.id",
            "session.timeout.ms",
            "heartbeat.interval.ms",
            "partition.assignment.strategy",
            "group.remote.assignor",
            "group.protocol",
            "auto.offset.reset",
            "isolation.level",
            "enable.auto.commit",
            "commit.interval.ms",
            "commit.metadata.max.bytes",
            "max.poll.interval.ms",
            "revoke.drain.timeout.ms",
            "session.bound.ms",
            "processing.order",
            "processing.max.in.flight.per.partition",
            "processing.retry.backoff.ms",
            "processing.retry.backoff.max.ms",
            "rebalance.storm.window.ms",
            "rebalance.storm.threshold",
            "batch.safety.factor",
        ] {
            let err = minimal().set(name, "1").build().expect_err(name);
            assert_eq!(err.setting(), Some(name), "{err}");
            assert!(err
                .to_string()
                .contains("does not apply to a share consumer"));
        }
    }

    /// The share consumer's rows of the settings table, set to their documented defaults, give
    /// the configuration of defaults: the default is written once, in the table.
    #[test]
    fn share_rows_default_as_documented() {
        let rows = config::SETTINGS
            .iter()
            .filter(|s| s.name.starts_with("share."));
        let literal = rows.filter(|s| !s.default.starts_with('('));
        let explicit = literal
            .fold(minimal(), |b, s| b.set(s.name, s.default))
            .build()
            .expect("valid");
        let defaults = minimal().build().expect("valid");
        assert_eq!(explicit.consumer(), defaults.consumer());
        assert_eq!(
            config::SETTINGS
                .iter()
                .filter(|s| s.name.starts_with("share."))
                .count(),
            4
        );
    }

    /// The consumer refuses the share consumer's own settings by name, and prints none of them.
    #[test]
    fn the_consumer_refuses_share_settings() {
        for (name, value) in [
            ("share.acquire.mode", "batch_optimized"),
            ("share.lock.renew", "true"),
            ("share.lock.safety.margin.ms", "2000"),
            ("share.acknowledgement.mode", "explicit"),
        ] {
            let err = ConsumerConfig::builder()
                .bootstrap_servers(["127.0.0.1:9092"])
                .group_id("orders")
                .set(name, value)
                .build()
                .expect_err(name);
            assert_eq!(err, ConfigError::ShareOnly { name }, "{err}");
        }
        let config = minimal().build().expect("valid");
        let printed = config.consumer().to_properties();
        assert!(printed.iter().all(|(name, _)| !name.starts_with("share.")));
    }

    #[test]
    fn bad_share_values_name_the_setting() {
        for (name, value) in [
            ("share.acknowledgement.mode", "implicit"),
            ("share.acquire.mode", "greedy"),
            ("share.lock.safety.margin.ms", "0"),
            ("share.lock.safety.margin.ms", "soon"),
            ("share.lock.renew", "maybe"),
        ] {
            let err = minimal().set(name, value).build().expect_err(name);
            assert_eq!(err.setting(), Some(name), "{err}");
        }
        // The consumer's own rules still apply, with its messages.
        let err = minimal()
            .set("max.poll.records", "0")
            .build()
            .expect_err("0");
        assert_eq!(err.setting(), Some("max.poll.records"));
        let err = minimal()
            .set("sesion.timeout.ms", "1")
            .build()
            .expect_err("typo");
        assert_eq!(err.setting(), Some("sesion.timeout.ms"));
    }
}
