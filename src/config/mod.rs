//! Consumer configuration, under Kafka's own property names: the layer under both consumers.
//!
//! Why a layer of its own: the consumer and the share consumer connect, authenticate and fetch
//! alike, so they read those settings from one table with one validation; each adds its own
//! rows (the share consumer's `share.*` ones among them), and neither imports the other.
//!
//! Why Kafka's names: operators already know them, and a `.properties` file written for a Java or
//! librdkafka consumer should mostly just work here. Why validation at build time, and strict: a
//! consumer that drives payments must not start with a setting that silently does nothing (a
//! misspelt property), or with a combination that guarantees evictions (a heartbeat slower than a
//! third of the session timeout). Every refusal is a [`ConfigError`] that names the setting and
//! states the rule.
//!
//! Three ways in, one validation:
//! - the typed builder: `ConsumerConfig::builder().bootstrap_servers(["127.0.0.1:9092"])
//!   .group_id("orders").build()?`;
//! - a properties map: [`ConsumerConfig::from_properties`];
//! - a Java `.properties` file: [`ConsumerConfig::from_properties_file`].
//!
//! The builder's [`ConsumerConfigBuilder::set`] takes any setting by name, so the three can be
//! mixed. [`SETTINGS`] lists every setting with its default and meaning; the settings table of
//! docs/configuration.md is checked against it by a unit test.
//!
//! ## Where things are
//! - `settings.rs`: the table, one row per setting (name, type, default, rule, setter, doc);
//!   `table.rs`: the macro that generates the builder, its setters and `.properties` arms, the
//!   defaults, [`SETTINGS`] and the `to_properties` entries from those rows;
//! - `values.rs`: the value types and how each reads and prints as text;
//! - `security.rs`: the security settings' types (`security.protocol`, `sasl.*`, the JAAS line)
//!   and how secrets are kept out of every printout;
//! - `checks.rs`: each setting's own rule; `cross.rs`: the rules between settings;
//! - `error.rs`: [`ConfigError`]; `properties.rs`: the `.properties` syntax; `suggest.rs`:
//!   unknown and unsupported names;
//! - this file: the public API (reading, printing, the accessors, and the conversions to the
//!   wire, fetch and guard settings);
//! - `tests.rs`: the unit tests of all of the above, docs/configuration.md's table included.
//!
//! ## Choices that differ from, or go beyond, Java's consumer
//! - `partition.assignment.strategy` defaults to `cooperative-sticky` alone. Java 3.x/4.x default
//!   to `range, cooperative-sticky` (a bridge for rolling upgrades) and librdkafka and kafka-python
//!   to `range, roundrobin` (eager). We refuse lists that mix eager and cooperative assignors (the
//!   consumer must know before joining whether it revokes everything), and among the pure choices
//!   cooperative-sticky is the one a side-effect worker wants: a rebalance revokes only the
//!   partitions that actually move, so in-flight work on every other partition is neither drained
//!   nor interrupted, and stickiness keeps partitions where their idempotency keys are remembered.
//!   To join a group whose members only speak eager assignors (librdkafka's or kafka-python's
//!   defaults), set `range`: the broker refuses a member that shares no assignor with the group.
//! - `enable.auto.commit` is accepted only as `false` (see [`ConfigError::AutoCommitRefused`]).
//! - With `group.protocol=consumer` (KIP-848) the broker owns assignment, session timeout and
//!   heartbeat interval; setting `partition.assignment.strategy`, `session.timeout.ms` or
//!   `heartbeat.interval.ms` explicitly is refused, as Java 4.x does, rather than ignored.
//! - `fetch.max.bytes` below `max.partition.fetch.bytes` is allowed, as in Java (both are soft
//!   limits: the broker always returns at least one batch so the consumer makes progress), and
//!   logged as a warning because it usually is a mistake.
//! - Assignor names (`range`, `roundrobin`, `cooperative-sticky`, or Java's class names) are read
//!   by the group layer's [`Strategy::from_name`], the one parser of them, ignoring ASCII case
//!   like every other named value here (Java and librdkafka compare exactly; what goes on the
//!   wire is always the canonical name).
//! - Values are trimmed; a `.properties` file is read as UTF-8.

use std::fs;
use std::path::Path;
use std::time::Duration;

// The macros first: `settings.rs` expands them.
#[macro_use]
mod table;
mod checks;
mod cross;
mod error;
pub(crate) mod properties;
mod security;
mod settings;
mod suggest;
mod values;

// Public: the value types the builders' typed methods take and the getters return, for
// applications that build a configuration in code rather than from Kafka's property strings
// (`ConsumerConfigBuilder::security_protocol(SecurityProtocol::SaslSsl)`), and the table.
pub use crate::group::consumer_group::RemoteAssignor;
pub use crate::group::{RebalanceProtocol, Strategy};
pub use crate::wire::{IsolationLevel, SaslMechanism};
pub use security::{EndpointIdentification, JaasConfig, LoginModule, SecurityProtocol};
pub use settings::{SettingDoc, SETTINGS};
pub use values::{
    AcknowledgementMode, Acks, AcquireMode, AutoOffsetReset, CompressionType, GroupProtocol,
    ProcessingOrder,
};
// Named at the crate root (and `PropertiesSyntaxError` in `error`).
pub use error::ConfigError;
pub use properties::PropertiesSyntaxError;
pub use settings::{ConsumerConfig, ConsumerConfigBuilder};
// For the crate's own tests and fuzz targets only (the internal `test-support` feature).
#[cfg(feature = "test-support")]
pub use properties::parse_properties;
#[cfg(not(feature = "test-support"))]
pub(crate) use properties::parse_properties;
#[cfg(feature = "test-support")]
pub use security::{CALLBACK, HIDDEN};
#[cfg(not(feature = "test-support"))]
#[allow(unused_imports)]
pub(crate) use security::{CALLBACK, HIDDEN};

use crate::group::consumer_group::ConsumerGroupConfig;
use crate::guard::GuardConfig;
use crate::wire::secret::{wipe_string, WipedString};
use crate::wire::{ClientConfig, FetchConfig, SaslConfig, Secret, TlsConfig};

impl ConsumerConfig {
    /// Starts a typed builder with every setting at its default.
    pub fn builder() -> ConsumerConfigBuilder {
        ConsumerConfigBuilder::default()
    }

    /// Builds from `(name, value)` pairs, as from a map or a parsed `.properties` file. A later
    /// pair overrides an earlier one with the same name, as in a Java `Properties` object.
    pub fn from_properties<I, K, V>(properties: I) -> Result<ConsumerConfig, ConfigError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        properties
            .into_iter()
            .fold(ConsumerConfig::builder(), |b, (k, v)| {
                b.set(k.as_ref(), v.as_ref())
            })
            .build()
    }

    /// Reads a Java `.properties` file (Java's syntax, `\uXXXX` escapes included) and builds from
    /// it.
    pub fn from_properties_file(path: impl AsRef<Path>) -> Result<ConsumerConfig, ConfigError> {
        let path = path.as_ref();
        // The text and the pairs may hold a password: both are wiped before they are freed.
        let text = WipedString(fs::read_to_string(path).map_err(|e| ConfigError::File {
            path: path.to_path_buf(),
            kind: e.kind(),
            message: e.to_string(),
        })?);
        let mut properties = parse_properties(&text.0).map_err(|e| ConfigError::Syntax {
            path: Some(path.to_path_buf()),
            line: e.line,
            message: e.message,
        })?;
        let built = ConsumerConfig::from_properties(properties.iter().map(|(k, v)| (k, v)));
        for (key, value) in &mut properties {
            wipe_string(key);
            wipe_string(value);
        }
        built
    }

    /// Every setting with its effective value, in [`SETTINGS`] order, for logging at startup.
    /// Feeding the result back to [`ConsumerConfig::from_properties`] gives an equal
    /// configuration, except that secrets (`sasl.password`, `sasl.jaas.config`) are printed as
    /// `[hidden]`, which is refused when read back: put the real secret in again.
    pub fn to_properties(&self) -> Vec<(&'static str, String)> {
        let mut out = self.all_properties();
        // The share consumer's own settings: the consumer refuses them, so it does not print them.
        out.retain(|(k, _)| !cross::share_only(k) && !cross::producer_only(k));
        // The group protocol decides these; printing them would make the round trip refuse them.
        if self.group_protocol == GroupProtocol::Consumer {
            out.retain(|(k, _)| !cross::CLASSIC_ONLY.contains(k));
        }
        out
    }

    /// `bootstrap.servers`, one `host:port` per entry.
    pub fn bootstrap_servers(&self) -> &[String] {
        &self.bootstrap_servers
    }
    /// `group.id`.
    pub fn group_id(&self) -> &str {
        self.group_id.as_deref().unwrap_or_default()
    }
    /// `group.instance.id`: `Some` for a static member.
    pub fn group_instance_id(&self) -> Option<&str> {
        self.group_instance_id.as_deref()
    }
    /// `client.id`.
    pub fn client_id(&self) -> &str {
        &self.client_id
    }
    /// `session.timeout.ms`.
    pub fn session_timeout(&self) -> Duration {
        self.session_timeout
    }
    /// `heartbeat.interval.ms`.
    pub fn heartbeat_interval(&self) -> Duration {
        self.heartbeat_interval
    }
    /// `max.poll.interval.ms` (also the classic protocol's rebalance timeout).
    pub fn max_poll_interval(&self) -> Duration {
        self.max_poll_interval
    }
    /// `metadata.max.age.ms`: how often a classic member refreshes its subscription's metadata.
    pub fn metadata_max_age(&self) -> Duration {
        self.metadata_max_age
    }
    /// `exclude.internal.topics`: a pattern never selects Kafka's internal topics.
    pub fn exclude_internal_topics(&self) -> bool {
        self.exclude_internal_topics
    }
    /// `max.poll.records`: at least 1.
    pub fn max_poll_records(&self) -> usize {
        self.max_poll_records
    }
    /// `share.acquire.mode` (the share consumer's; a consumer's is always the default).
    pub(crate) fn share_acquire_mode(&self) -> AcquireMode {
        self.share_acquire_mode
    }
    /// `share.lock.safety.margin.ms`, when set.
    pub(crate) fn share_lock_safety_margin(&self) -> Option<Duration> {
        self.share_lock_safety_margin
    }
    /// `share.lock.renew`.
    pub(crate) fn share_lock_renew(&self) -> bool {
        self.share_lock_renew
    }
    internal_pub! {
    /// `partition.assignment.strategy` in preference order: non-empty, no duplicates, all of
    /// one [`RebalanceProtocol`].
    fn assignment_strategies(&self) -> &[Strategy] {
        &self.partition_assignment_strategy
    }
    }
    internal_pub! {
    /// Eager or cooperative, as implied by the assignors (they all agree, by validation).
    fn rebalance_protocol(&self) -> RebalanceProtocol {
        self.partition_assignment_strategy
            .first()
            .map_or(RebalanceProtocol::Cooperative, |s| s.protocol())
    }
    }
    internal_pub! {
    /// `group.protocol`.
    fn group_protocol(&self) -> GroupProtocol {
        self.group_protocol
    }
    }
    internal_pub! {
    /// `group.remote.assignor`: the broker-side assignor to ask for (consumer protocol only).
    fn group_remote_assignor(&self) -> Option<RemoteAssignor> {
        self.group_remote_assignor
    }
    }
    /// `session.bound.ms`: the user's session bound for leases (consumer protocol only); `None`
    /// derives it from the broker's heartbeat interval.
    pub fn session_bound(&self) -> Option<Duration> {
        self.session_bound
    }
    internal_pub! {
    /// `auto.offset.reset`.
    fn auto_offset_reset(&self) -> AutoOffsetReset {
        self.auto_offset_reset
    }
    }
    /// `fetch.min.bytes` (at least 0).
    pub fn fetch_min_bytes(&self) -> i32 {
        self.fetch_min_bytes
    }
    /// `fetch.max.bytes` (positive).
    pub fn fetch_max_bytes(&self) -> i32 {
        self.fetch_max_bytes
    }
    /// `fetch.max.wait.ms`.
    pub fn fetch_max_wait(&self) -> Duration {
        self.fetch_max_wait
    }
    /// `max.partition.fetch.bytes` (positive).
    pub fn max_partition_fetch_bytes(&self) -> i32 {
        self.max_partition_fetch_bytes
    }
    /// `fetch.buffer.bytes` (positive): the per-broker bound on fetched records held ahead of
    /// the handler, printed by benchmarks beside the Kafka settings it narrows.
    pub fn fetch_buffer_bytes(&self) -> i32 {
        self.fetch_buffer_bytes
    }
    internal_pub! {
    /// `isolation.level`.
    fn isolation_level(&self) -> IsolationLevel {
        self.isolation_level
    }
    }
    /// `client.rack`, if set.
    pub fn client_rack(&self) -> Option<&str> {
        self.client_rack.as_deref()
    }
    /// `request.timeout.ms`.
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }
    /// `socket.connection.setup.timeout.ms`.
    pub fn connection_setup_timeout(&self) -> Duration {
        self.connection_setup_timeout
    }
    /// `retry.backoff.ms`.
    pub fn retry_backoff(&self) -> Duration {
        self.retry_backoff
    }
    /// `reconnect.backoff.max.ms`.
    pub fn reconnect_backoff_max(&self) -> Duration {
        self.reconnect_backoff_max
    }
    /// How long to wait before trying again after `failures` failures in a row of something
    /// the network may let through later (a timeout, a refused connection): `retry.backoff.ms`
    /// doubled per failure after the first, capped at `reconnect.backoff.max.ms` (the
    /// client's `retry_backoff_max`). The one backoff of the consumers' poll threads.
    pub(crate) fn retry_backoff_after(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(20);
        self.retry_backoff
            .saturating_mul(1 << doublings)
            .min(self.reconnect_backoff_max.max(self.retry_backoff))
    }
    internal_pub! {
    /// `security.protocol`.
    fn security_protocol(&self) -> SecurityProtocol {
        self.security_protocol
    }
    }
    internal_pub! {
    /// `sasl.mechanism`, when set.
    fn sasl_mechanism(&self) -> Option<SaslMechanism> {
        self.sasl_mechanism
    }
    }
    internal_pub! {
    /// How every connection authenticates: `None` unless `security.protocol` uses SASL. The
    /// credentials come from `sasl.username`/`sasl.password` or from `sasl.jaas.config`
    /// (validation made sure exactly one of them is given, with a matching mechanism).
    fn sasl(&self) -> Option<SaslConfig> {
        if !self.security_protocol.uses_sasl() {
            return None;
        }
        let mechanism = self.sasl_mechanism?;
        if mechanism == SaslMechanism::OAuthBearer {
            return Some(SaslConfig::oauthbearer(
                self.sasl_oauthbearer_token_callback.clone()?,
            ));
        }
        let (username, password): (String, Secret) = match &self.sasl_jaas_config {
            Some(jaas) => (jaas.username().to_string(), jaas.password().clone()),
            None => (self.sasl_username.clone()?, self.sasl_password.clone()?),
        };
        Some(SaslConfig::password(mechanism, username, password))
    }
    }
    internal_pub! {
    /// How every connection runs TLS: `None` unless `security.protocol` uses TLS (`ssl.*`
    /// settings with another protocol are refused by validation).
    fn tls(&self) -> Option<TlsConfig> {
        if !self.security_protocol.uses_tls() {
            return None;
        }
        let mut tls = TlsConfig::new().with_hostname_verification(
            self.ssl_endpoint_identification_algorithm == EndpointIdentification::Https,
        );
        if let Some(ca) = &self.ssl_ca_location {
            tls = tls.with_ca_location(ca);
        }
        if let (Some(cert), Some(key)) = (&self.ssl_certificate_location, &self.ssl_key_location) {
            tls = tls.with_client_certificate(cert, key);
        }
        Some(tls)
    }
    }
    /// `rebalance.storm.window.ms`.
    pub fn storm_window(&self) -> Duration {
        self.storm_window
    }
    /// `rebalance.storm.threshold`; 0 disables storm detection.
    pub fn storm_threshold(&self) -> usize {
        self.storm_threshold
    }
    /// `idempotency.cache.size`; 0 disables duplicate detection.
    pub fn idempotency_cache_size(&self) -> usize {
        self.idempotency_cache_size
    }
    /// `batch.safety.factor`: strictly between 0 and 1.
    pub fn batch_safety_factor(&self) -> f64 {
        self.batch_safety_factor
    }
    /// `revoke.drain.timeout.ms`: positive and below `max.poll.interval.ms`.
    pub fn revoke_drain_timeout(&self) -> Duration {
        self.revoke_drain_timeout
    }

    /// `commit.interval.ms`: positive.
    pub fn commit_interval(&self) -> Duration {
        self.commit_interval
    }
    /// Reads with `read_committed` from now on (`Consumer::run_transactional`: an input that is
    /// itself a transactional output must not be read before it commits).
    pub(crate) fn read_committed(&mut self) {
        self.isolation_level = IsolationLevel::ReadCommitted;
    }

    /// `transaction.interval.ms`: how long `run_transactional` keeps a transaction open.
    pub fn transaction_interval(&self) -> Duration {
        self.transaction_interval
    }

    /// `commit.metadata.max.bytes`: 0, or between 64 and 1 MiB.
    pub fn commit_metadata_max_bytes(&self) -> usize {
        self.commit_metadata_max_bytes
    }
    internal_pub! {
    /// `processing.order`.
    fn processing_order(&self) -> ProcessingOrder {
        self.processing_order
    }
    }
    /// `processing.max.in.flight.per.partition`: at least 1.
    pub fn max_in_flight_per_partition(&self) -> usize {
        self.max_in_flight_per_partition
    }

    /// `processing.retries`: how many times a failed record is tried again.
    pub fn processing_retries(&self) -> usize {
        self.processing_retries
    }

    /// `processing.retry.backoff.ms`: the wait before the first retry.
    pub fn processing_retry_backoff(&self) -> Duration {
        self.processing_retry_backoff
    }

    /// `processing.retry.backoff.max.ms`: the cap of the doubling retry backoff.
    pub fn processing_retry_backoff_max(&self) -> Duration {
        self.processing_retry_backoff_max
    }

    /// The guard's settings (idempotency cache, storm window and threshold, map limit).
    pub fn guard_config(&self) -> GuardConfig {
        GuardConfig {
            idempotency_capacity: self.idempotency_cache_size,
            // The consumer admits on its poll thread only (in both modes): one shard.
            idempotency_shards: 1,
            storm_window: self.storm_window,
            storm_threshold: self.storm_threshold,
            completed_map_max_bytes: self.commit_metadata_max_bytes,
        }
    }

    internal_pub! {
    /// The wire client's settings, SASL credentials included (every connection of the client and
    /// of the heartbeat thread authenticates with them). `reconnect.backoff.max.ms` caps the client's single
    /// exponential backoff, which it uses for request retries and reconnects alike. The largest
    /// accepted response frame is raised above the client's default when `fetch.max.bytes` plus
    /// one partition's worth could exceed it, so a legal fetch response is never refused.
    fn client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new(self.bootstrap_servers.iter().cloned());
        config.connection.client_id = self.client_id.clone();
        config.connection.connect_timeout = self.connection_setup_timeout;
        config.connection.request_timeout = self.request_timeout;
        let fetch_frame = (self.fetch_max_bytes as usize)
            .saturating_add(self.max_partition_fetch_bytes as usize)
            .saturating_add(64 * 1024);
        config.connection.max_response_size = config.connection.max_response_size.max(fetch_frame);
        config.connection.sasl = self.sasl();
        config.connection.tls = self.tls();
        config.retry_backoff = self.retry_backoff;
        config.retry_backoff_max = self.reconnect_backoff_max.max(self.retry_backoff);
        config
    }
    }

    internal_pub! {
    /// The consumer group protocol machine's settings (`group.protocol=consumer`) for a
    /// subscription to `topics`: the rebalance timeout is `max.poll.interval.ms` (how long the
    /// broker waits for a revocation), the backoff is the client's.
    fn consumer_group_config(&self, topics: &[&str]) -> ConsumerGroupConfig {
        ConsumerGroupConfig {
            group_id: self.group_id().to_string(),
            instance_id: self.group_instance_id.clone(),
            topics: topics.iter().map(|t| t.to_string()).collect(),
            topic_regex: None,
            rebalance_timeout: self.max_poll_interval,
            remote_assignor: self.group_remote_assignor,
            rack: self.client_rack.clone(),
            session_bound: self.session_bound,
            retry_backoff: self.retry_backoff,
            retry_backoff_max: self.reconnect_backoff_max.max(self.retry_backoff),
        }
    }
    }

    internal_pub! {
    /// The fetch settings for the wire client; anything the properties do not cover keeps the
    /// wire layer's default.
    fn fetch_config(&self) -> FetchConfig {
        FetchConfig {
            max_wait: self.fetch_max_wait,
            min_bytes: self.fetch_min_bytes,
            // Two answers are held per broker (the one handed out, the one fetched ahead), so
            // each asks for at most half of `fetch.buffer.bytes`.
            max_bytes: self.fetch_max_bytes.min((self.fetch_buffer_bytes / 2).max(1)),
            max_partition_bytes: self.max_partition_fetch_bytes,
            isolation: self.isolation_level,
            client_rack: self.client_rack.clone(),
            // Fields the wire layer adds later keep its defaults.
            ..FetchConfig::default()
        }
    }
    }
}

impl ConsumerConfigBuilder {
    /// Sets any setting by its property name from its text form, as a `.properties` file would.
    /// A parse error (or an unknown name) is kept and returned by [`build`](Self::build); only
    /// the first such error is kept.
    pub fn set(mut self, name: &str, value: &str) -> Self {
        if self.error.is_none() {
            if let Err(e) = self.apply(name.trim(), value.trim()) {
                self.error = Some(e);
            }
        }
        self
    }

    /// Validates every setting and the rules between them, and returns the configuration or the
    /// first problem found: errors from [`set`](Self::set) first, then each setting's own rule in
    /// [`SETTINGS`] order, then the rules that relate two settings (those the consumer protocol
    /// refuses first).
    pub fn build(mut self) -> Result<ConsumerConfig, ConfigError> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        let share_only_set = SETTINGS
            .iter()
            .find(|s| cross::share_only(s.name) && self.is_set(s.name));
        if let Some(setting) = share_only_set {
            return Err(ConfigError::ShareOnly { name: setting.name });
        }
        self.build_for_group()
    }

    /// What a share consumer's configuration is built by: the `share.*` rows are accepted, and
    /// every other rule is the consumer's. The settings a share group decides elsewhere are
    /// refused as they are given ([`refused_for_share`]).
    pub(crate) fn build_for_share(mut self) -> Result<ConsumerConfig, ConfigError> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.build_for_group()
    }

    /// What a producer's configuration is built by: its own rows and the connection and
    /// security rows; a consumer's setting is refused as it is given ([`refused_for_producer`]),
    /// and the rules between the producer's settings are checked.
    pub(crate) fn build_for_producer(mut self) -> Result<ConsumerConfig, ConfigError> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        let config = self.resolve()?;
        cross::check_security(&config)?;
        cross::check_producer(&config)?;
        Ok(config)
    }

    /// A consumer's or share consumer's build: a group is required, a producer's settings are
    /// refused, then every other rule.
    fn build_for_group(self) -> Result<ConsumerConfig, ConfigError> {
        let producer_only_set = SETTINGS
            .iter()
            .find(|s| cross::producer_only(s.name) && self.is_set(s.name));
        if let Some(setting) = producer_only_set {
            return Err(ConfigError::ProducerOnly { name: setting.name });
        }
        if !self.is_set("group.id") {
            return Err(ConfigError::Missing { name: "group.id" });
        }
        self.build_checked()
    }

    /// Each setting's own rule, then the rules between settings.
    fn build_checked(self) -> Result<ConsumerConfig, ConfigError> {
        let classic_only_set = cross::CLASSIC_ONLY
            .iter()
            .copied()
            .find(|name| self.is_set(name));
        let config = self.resolve()?;
        cross::check(&config, classic_only_set)?;
        Ok(config)
    }
}

/// [`ConfigError::NotForShareGroups`] for a consumer-group setting that a share group decides
/// elsewhere (the broker assigns, the group's own configuration sets the start position and the
/// lock), with what decides it instead; `None` for any other name.
pub(crate) fn refused_for_share(name: &str) -> Option<ConfigError> {
    let (name, instead) = cross::NOT_FOR_SHARE_GROUPS
        .iter()
        .find(|(refused, _)| *refused == name)?;
    Some(ConfigError::NotForShareGroups { name, instead })
}

/// The builder behind the clients that take part of the one settings table (the share consumer,
/// the producer): each setting is parsed as it is given, by the table's own code (so a secret
/// is typed at once and `Debug` never shows it), and a setting outside the client's part is
/// refused by name (`refuse`). The first error is kept for `build`, as the consumer's builder
/// does.
#[derive(Clone, Debug)]
pub(crate) struct ScopedBuilder {
    base: ConsumerConfigBuilder,
    refuse: fn(&str) -> Option<ConfigError>,
    error: Option<ConfigError>,
}

impl ScopedBuilder {
    /// An empty builder for a client that refuses what `refuse` names.
    pub(crate) fn new(refuse: fn(&str) -> Option<ConfigError>) -> Self {
        ScopedBuilder {
            base: ConsumerConfigBuilder::default(),
            refuse,
            error: None,
        }
    }

    /// Any setting by its property name (refused, or parsed into the table's builder).
    pub(crate) fn set(mut self, name: &str, value: &str) -> Self {
        if self.error.is_none() {
            let name = name.trim();
            match (self.refuse)(name) {
                Some(refused) => self.error = Some(refused),
                None => self.base = self.base.set(name, value),
            }
        }
        self
    }

    /// `bootstrap.servers` from a list of `host:port`.
    pub(crate) fn bootstrap_servers<S: AsRef<str>>(
        self,
        servers: impl IntoIterator<Item = S>,
    ) -> Self {
        let list: Vec<String> = servers
            .into_iter()
            .map(|s| s.as_ref().to_string())
            .collect();
        self.set("bootstrap.servers", &list.join(","))
    }

    /// The first refusal, or what `build` (the client's own validation) makes of the settings.
    pub(crate) fn build_with(
        self,
        build: fn(ConsumerConfigBuilder) -> Result<ConsumerConfig, ConfigError>,
    ) -> Result<ConsumerConfig, ConfigError> {
        match self.error {
            Some(e) => Err(e),
            None => build(self.base),
        }
    }
}

/// A producer's own settings, read out of the one table for the producer layer.
#[derive(Clone, Debug)]
pub(crate) struct ProducerSettings {
    pub(crate) acks: Acks,
    pub(crate) idempotence: bool,
    pub(crate) linger: std::time::Duration,
    pub(crate) batch_size: usize,
    pub(crate) buffer_memory: usize,
    pub(crate) max_block: std::time::Duration,
    pub(crate) max_in_flight: usize,
    pub(crate) delivery_timeout: std::time::Duration,
    pub(crate) request_timeout: std::time::Duration,
    pub(crate) max_request_size: usize,
    pub(crate) compression: CompressionType,
    pub(crate) compression_level: Option<i32>,
    pub(crate) ignore_keys: bool,
    pub(crate) retry_backoff: std::time::Duration,
    pub(crate) metadata_max_age: std::time::Duration,
    /// `transactional.id`: `Some` makes the producer transactional.
    pub(crate) transactional_id: Option<String>,
    /// `transaction.timeout.ms`.
    pub(crate) transaction_timeout: std::time::Duration,
}

impl ConsumerConfig {
    /// The producer's settings (meaningful for a configuration built for a producer).
    pub(crate) fn producer_settings(&self) -> ProducerSettings {
        ProducerSettings {
            acks: self.acks,
            idempotence: self.enable_idempotence,
            linger: self.linger_ms,
            batch_size: self.batch_size,
            buffer_memory: self.buffer_memory,
            max_block: self.max_block,
            max_in_flight: self.max_in_flight_requests_per_connection,
            delivery_timeout: self.delivery_timeout,
            request_timeout: self.request_timeout,
            max_request_size: self.max_request_size,
            compression: self.compression_type,
            compression_level: match self.compression_type {
                CompressionType::Gzip if self.compression_gzip_level > 0 => {
                    Some(self.compression_gzip_level)
                }
                CompressionType::Zstd => Some(self.compression_zstd_level),
                _ => None,
            },
            ignore_keys: self.partitioner_ignore_keys,
            retry_backoff: self.retry_backoff,
            metadata_max_age: self.metadata_max_age,
            transactional_id: self.transactional_id.clone(),
            transaction_timeout: self.transaction_timeout,
        }
    }
}

/// [`ConfigError::NotForProducers`] for a consumer setting given to a producer (anything but
/// the producer's own rows and the connection and security rows); `None` for any other name
/// (an unknown name is the table's own error).
pub(crate) fn refused_for_producer(name: &str) -> Option<ConfigError> {
    let setting = SETTINGS.iter().find(|s| s.name == name)?;
    if cross::producer_only(name) || cross::SHARED_WITH_PRODUCERS.contains(&name) {
        return None;
    }
    Some(ConfigError::NotForProducers { name: setting.name })
}

#[cfg(test)]
mod tests;
