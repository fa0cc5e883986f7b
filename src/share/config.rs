//! The share consumer's settings, under Kafka's names: the consumer's connection, security and
//! fetch settings as they are, the few `share.*` settings of Java's `KafkaShareConsumer`, and
//! two of our own for the lock guard.
//!
//! Why one validation with the consumer's: a share consumer connects, authenticates and fetches
//! as a consumer does, so those settings are read, checked and documented once
//! ([`ConsumerConfig`]). The consumer-group settings that a share group decides elsewhere (the
//! broker assigns, the group's own configuration sets the start position and the lock) are
//! refused by name with [`ConfigError::NotForShareGroups`], as Java refuses them, rather than
//! silently ignored.

use std::time::Duration;

use crate::consumer::{ConfigError, ConsumerConfig};
use crate::wire::ClientConfig;

/// `share.acquire.mode` (KIP-1206): how the broker bounds the records one ShareFetch acquires.
///
/// Our default differs from Kafka's (`batch_optimized`): a record acquired and not started is a
/// lock running out, and a lock that runs out spends one of the record's deliveries
/// (`share.delivery.count.limit`, after which the broker archives it). A slow worker handed
/// whole producer batches can burn a record's deliveries without ever starting it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AcquireMode {
    /// Whole batches, possibly more than asked for (Kafka's default): fewer requests.
    BatchOptimized,
    /// At most the records asked for, splitting batches (our default): no record is locked
    /// that this member will not start soon. Needs ShareFetch v2 (Kafka 4.2+); an older broker
    /// acquires whole batches.
    #[default]
    RecordLimit,
}

impl AcquireMode {
    /// The byte ShareFetch v2 carries.
    pub fn wire_value(self) -> i8 {
        match self {
            AcquireMode::BatchOptimized => 0,
            AcquireMode::RecordLimit => 1,
        }
    }
}

/// The consumer-group settings a share consumer refuses, each with what decides it instead.
const NOT_FOR_SHARE_GROUPS: &[(&str, &str)] = &[
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
];

/// A validated share consumer configuration. Build it with [`ShareConfig::builder`] or
/// [`ShareConfig::from_properties`]; [`SHARE_SETTINGS`] documents the `share.*` settings, and
/// the consumer's `SETTINGS` every other one it accepts.
#[derive(Clone, Debug)]
pub struct ShareConfig {
    base: ConsumerConfig,
    acquire_mode: AcquireMode,
    lock_safety_margin: Option<Duration>,
    lock_renew: bool,
}

/// One `share.*` setting: its name, default and why it exists.
#[derive(Clone, Copy, Debug)]
pub struct ShareSettingDoc {
    /// The property name.
    pub name: &'static str,
    /// The default, as a `.properties` file would write it.
    pub default: &'static str,
    /// What it does and why the default is what it is.
    pub doc: &'static str,
}

/// The share consumer's own settings; README.md's share table is checked against it.
pub const SHARE_SETTINGS: &[ShareSettingDoc] = &[
    ShareSettingDoc {
        name: "share.acknowledgement.mode",
        default: "explicit",
        doc: "Kafka's name; only `explicit` is accepted: every record is acknowledged by what its \
              handler did and whether its lock may have expired. `implicit` (accept everything \
              the previous poll returned) would accept records whose lock ran out.",
    },
    ShareSettingDoc {
        name: "share.acquire.mode",
        default: "record_limit",
        doc: "`record_limit` or `batch_optimized` (KIP-1206, ShareFetch v2). With `record_limit` \
              the broker acquires at most what a fetch asks for (`max.poll.records` for `poll`, \
              two per worker thread in the decoupled mode). Kafka's default is \
              `batch_optimized` (whole batches); ours differs because an acquired record that \
              waits past its lock spends one of its deliveries.",
    },
    ShareSettingDoc {
        name: "share.lock.safety.margin.ms",
        default: "(a tenth of the lock, at least 1000)",
        doc: "Ours. How long before the broker's lock a record's lease ends: covers the clock \
              difference and the request's trip (the lease is measured from the ShareFetch's \
              send time, so the trip back is already inside it).",
    },
    ShareSettingDoc {
        name: "share.lock.renew",
        default: "true",
        doc: "Ours. Renew the lock of a record still running at half its lock (RENEW, KIP-1222, \
              Kafka 4.2+ brokers); without it a slow record's lease simply ends.",
    },
];

impl ShareConfig {
    /// A builder with every setting at its default.
    pub fn builder() -> ShareConfigBuilder {
        ShareConfigBuilder::default()
    }

    /// Builds from `(name, value)` pairs; a later pair overrides an earlier one of the same
    /// name. Consumer settings are checked by the consumer's own rules; settings a share group
    /// decides elsewhere are refused by name.
    pub fn from_properties<I, K, V>(properties: I) -> Result<ShareConfig, ConfigError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut base = ConsumerConfig::builder();
        let mut acquire_mode = AcquireMode::default();
        let mut lock_safety_margin = None;
        let mut lock_renew = true;
        for (name, value) in properties {
            let (name, value) = (name.as_ref().trim(), value.as_ref().trim());
            if let Some((refused, instead)) = NOT_FOR_SHARE_GROUPS.iter().find(|(n, _)| *n == name)
            {
                return Err(ConfigError::NotForShareGroups {
                    name: refused,
                    instead,
                });
            }
            match name {
                "share.acknowledgement.mode" => {
                    if !value.eq_ignore_ascii_case("explicit") {
                        return Err(ConfigError::InvalidValue {
                            name: "share.acknowledgement.mode",
                            value: value.to_string(),
                            expected: "`explicit` (each record is acknowledged by its outcome; \
                                       `implicit` would accept records whose lock ran out)",
                        });
                    }
                }
                "share.acquire.mode" => {
                    acquire_mode = match value.to_ascii_lowercase().as_str() {
                        "batch_optimized" => AcquireMode::BatchOptimized,
                        "record_limit" => AcquireMode::RecordLimit,
                        _ => {
                            return Err(ConfigError::InvalidValue {
                                name: "share.acquire.mode",
                                value: value.to_string(),
                                expected: "one of `batch_optimized`, `record_limit`",
                            })
                        }
                    }
                }
                "share.lock.safety.margin.ms" => {
                    let ms: u64 = value.parse().map_err(|_| ConfigError::InvalidValue {
                        name: "share.lock.safety.margin.ms",
                        value: value.to_string(),
                        expected: "a whole number of milliseconds",
                    })?;
                    if ms == 0 {
                        return Err(ConfigError::OutOfRange {
                            name: "share.lock.safety.margin.ms",
                            value: value.to_string(),
                            rule: "must be at least 1: a lease that ends with the broker's lock \
                                   races its redelivery",
                        });
                    }
                    lock_safety_margin = Some(Duration::from_millis(ms));
                }
                "share.lock.renew" => {
                    lock_renew = match value.to_ascii_lowercase().as_str() {
                        "true" => true,
                        "false" => false,
                        _ => {
                            return Err(ConfigError::InvalidValue {
                                name: "share.lock.renew",
                                value: value.to_string(),
                                expected: "`true` or `false`",
                            })
                        }
                    }
                }
                _ => base = base.set(name, value),
            }
        }
        Ok(ShareConfig {
            base: base.build()?,
            acquire_mode,
            lock_safety_margin,
            lock_renew,
        })
    }

    /// The consumer settings underneath (connection, security, fetch, `max.poll.records`,
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
        self.acquire_mode
    }
    }

    /// `share.lock.safety.margin.ms`, when set (otherwise the lock guard derives it from the
    /// lock the broker reports).
    pub fn lock_safety_margin(&self) -> Option<Duration> {
        self.lock_safety_margin
    }

    /// `share.lock.renew`.
    pub fn lock_renew(&self) -> bool {
        self.lock_renew
    }

    internal_pub! {
    /// The wire client's settings (the consumer's, security included).
    fn client_config(&self) -> ClientConfig {
        self.base.client_config()
    }
    }
}

/// Collects settings by name (typed shortcuts for the two every configuration needs) and
/// validates them all at [`build`](Self::build).
#[derive(Clone, Debug, Default)]
pub struct ShareConfigBuilder {
    properties: Vec<(String, String)>,
}

impl ShareConfigBuilder {
    /// `bootstrap.servers`.
    pub fn bootstrap_servers<S: AsRef<str>>(self, servers: impl IntoIterator<Item = S>) -> Self {
        let list: Vec<String> = servers
            .into_iter()
            .map(|s| s.as_ref().to_string())
            .collect();
        self.set("bootstrap.servers", &list.join(","))
    }

    /// `group.id`: the share group.
    pub fn group_id(self, group: &str) -> Self {
        self.set("group.id", group)
    }

    /// Any setting by its property name.
    pub fn set(mut self, name: &str, value: &str) -> Self {
        self.properties.push((name.to_string(), value.to_string()));
        self
    }

    /// Validates and returns the configuration, or the first problem, naming the setting.
    pub fn build(self) -> Result<ShareConfig, ConfigError> {
        ShareConfig::from_properties(self.properties)
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
        for (name, _) in NOT_FOR_SHARE_GROUPS {
            let err = minimal().set(name, "1").build().expect_err(name);
            assert_eq!(err.setting(), Some(*name), "{err}");
            assert!(err
                .to_string()
                .contains("does not apply to a share consumer"));
        }
    }

    /// README.md's share settings table has a row for every [`SHARE_SETTINGS`] entry, with its
    /// default: the table is the operator's reference, so it must not drift from the code.
    #[test]
    fn the_readme_lists_every_share_setting_with_its_default() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/README.md");
        let readme = std::fs::read_to_string(path).expect("README.md");
        for s in SHARE_SETTINGS {
            let row = format!("| `{}` | `{}` |", s.name, s.default);
            assert!(readme.contains(&row), "README.md has no row {row}");
        }
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
