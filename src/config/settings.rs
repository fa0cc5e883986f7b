//! The settings table: one row per setting, in the order [`SETTINGS`] documents them and
//! [`ConsumerConfig::to_properties`] prints them (Java's names first, then this library's own).
//!
//! Each row gives the field (also the typed setter's name), the type it is held in, the Kafka
//! property name, the default (written once, as a `.properties` file would write it), the
//! setting's own rule ([`super::checks`]), the typed setter's argument, and the documentation
//! that docs/configuration.md's settings table is checked against. [`super::table`] explains the
//! row syntax and what is generated from it; rules between settings are in [`super::cross`].

use std::time::Duration;

use std::path::PathBuf;

use super::security::{EndpointIdentification, JaasConfig, SecurityProtocol};
use super::suggest::unknown_setting;
use super::values::{
    AcknowledgementMode, Acks, AcquireMode, AutoOffsetReset, CompressionType, GroupProtocol,
    ProcessingOrder,
};
use super::{checks, cross, ConfigError};
use crate::group::consumer_group::RemoteAssignor;
use crate::group::Strategy;
use crate::wire::{IsolationLevel, OAuthBearerCallback, SaslMechanism, Secret};

/// One setting's name, default and meaning, for documentation and checks.
///
/// Why a table in code: docs/configuration.md's settings table is checked against [`SETTINGS`] by
/// a unit test, so the documentation cannot drift from what the parser accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SettingDoc {
    /// The property name, exactly as written in a `.properties` file.
    pub name: &'static str,
    /// The default as it would be written in a `.properties` file; `(required)`, `(none)` or a
    /// parenthesised formula when there is no literal default.
    pub default: &'static str,
    /// What it does, and why the default is what it is.
    pub description: &'static str,
}

settings! {
    /// Every setting this consumer accepts, in the order [`ConsumerConfig::to_properties`] prints
    /// them. Java's names first, then this library's own.
    pub const SETTINGS;

    /// A validated consumer configuration. Only [`ConsumerConfigBuilder::build`] (and the
    /// `from_properties*` functions, which use it) make one, so holding a `ConsumerConfig` means
    /// every rule in this module was checked.
    ///
    /// Kafka's own property names, from pairs or a Java `.properties` file, so that a
    /// configuration moves between this crate and the Java client or librdkafka unchanged:
    ///
    /// ```
    /// use rebalance_guard::ConsumerConfig;
    ///
    /// let config = ConsumerConfig::from_properties([
    ///     ("bootstrap.servers", "127.0.0.1:9092"),
    ///     ("group.id", "order-workers"),
    ///     ("session.timeout.ms", "12000"),
    /// ])?;
    /// assert_eq!(config.group_id(), "order-workers");
    ///
    /// // A refusal names the setting: timer-driven commits do not know what finished.
    /// let refused = ConsumerConfig::from_properties([
    ///     ("bootstrap.servers", "127.0.0.1:9092"),
    ///     ("group.id", "order-workers"),
    ///     ("enable.auto.commit", "true"),
    /// ]);
    /// assert_eq!(refused.unwrap_err().setting(), Some("enable.auto.commit"));
    /// # Ok::<(), rebalance_guard::ConfigError>(())
    /// ```
    pub struct ConsumerConfig;

    /// Collects settings, typed or by name, and validates them all in
    /// [`build`](Self::build).
    ///
    /// Why errors wait for `build`: the builder chains (`.set(..).group_id(..).build()?`) and a
    /// configuration is either wholly valid or refused with the first problem found. Setters
    /// given the same setting twice keep the last value.
    ///
    /// Typed setters (named after the setting) and [`set`](Self::set) by Kafka's name mix:
    ///
    /// ```
    /// use std::time::Duration;
    /// use rebalance_guard::ConsumerConfig;
    ///
    /// let config = ConsumerConfig::builder()
    ///     .bootstrap_servers(["127.0.0.1:9092"])
    ///     .group_id("order-workers")
    ///     .session_timeout(Duration::from_secs(12))
    ///     .set("processing.order", "key") // any setting by name
    ///     .build()?;
    /// assert_eq!(config.session_timeout(), Duration::from_secs(12));
    ///
    /// // Checked at build, naming the setting: a heartbeat must fit three times in the session.
    /// let refused = ConsumerConfig::builder()
    ///     .bootstrap_servers(["127.0.0.1:9092"])
    ///     .group_id("order-workers")
    ///     .set("heartbeat.interval.ms", "5000")
    ///     .set("session.timeout.ms", "6000")
    ///     .build();
    /// assert!(refused.is_err());
    /// # Ok::<(), rebalance_guard::ConfigError>(())
    /// ```
    pub struct ConsumerConfigBuilder;

    bootstrap_servers: Vec<String> {
        name: "bootstrap.servers",
        default: required,
        rule: checks::host_ports,
        set: |servers: impl IntoIterator<Item = impl Into<String>>| servers.into_iter().map(Into::into).collect(),
        doc: "Comma-separated `host:port` list used to discover the cluster; any one reachable entry is enough.",
    }
    group_id: String {
        name: "group.id",
        default: none,
        rule: checks::not_blank,
        set: |group_id: impl Into<String>| group_id.into(),
        doc: "The consumer group. Required by the consumer and the share consumer: without a group there is no rebalance to guard and no committed position. A producer has none.",
    }
    group_instance_id: String {
        name: "group.instance.id",
        default: none,
        rule: checks::instance_id,
        set: |id: impl Into<String>| id.into(),
        doc: "Static membership (KIP-345): a restarted member with the same id gets its partitions back without a rebalance. Letters, digits, `.`, `_`, `-`, at most 249.",
    }
    client_id: String {
        name: "client.id",
        default: "rebalance-guard",
        rule: checks::any,
        set: |id: impl Into<String>| id.into(),
        doc: "Sent with every request so broker logs and quotas can attribute traffic; prefixes the member id.",
    }
    session_timeout: Duration {
        name: "session.timeout.ms",
        default: "45000",
        rule: checks::positive_ms,
        set: |timeout: Duration| timeout,
        doc: "A member silent for this long is evicted. Java's default since 3.0: long enough to ride out a GC pause or a brief network stall.",
    }
    heartbeat_interval: Duration {
        name: "heartbeat.interval.ms",
        default: "3000",
        rule: checks::positive_ms,
        set: |interval: Duration| interval,
        doc: "How often the background thread heartbeats. At most a third of `session.timeout.ms`, so two heartbeats may be lost before eviction.",
    }
    max_poll_interval: Duration {
        name: "max.poll.interval.ms",
        default: "300000",
        rule: checks::positive_ms,
        set: |interval: Duration| interval,
        doc: "Longest allowed gap between polls; also the classic rebalance timeout. Java's default; batches are sized to stay well inside it.",
    }
    max_poll_records: usize {
        name: "max.poll.records",
        default: "500",
        rule: checks::record_count,
        set: |records: usize| records,
        doc: "Upper bound on one batch; the batch sizer usually hands out fewer when records are slow. Java's default.",
    }
    partition_assignment_strategy: Vec<Strategy> {
        name: "partition.assignment.strategy",
        default: "cooperative-sticky",
        rule: checks::strategies,
        set: |strategies: impl IntoIterator<Item = Strategy>| strategies.into_iter().collect(),
        doc: "Assignors in preference order: `range`, `roundrobin` (eager) or `cooperative-sticky`; eager and cooperative may not be mixed. Cooperative so a rebalance revokes only partitions that move.",
    }
    group_protocol: GroupProtocol {
        name: "group.protocol",
        default: "classic",
        rule: checks::any,
        set: |protocol: GroupProtocol| protocol,
        doc: "`classic` (JoinGroup/SyncGroup, every broker) or `consumer` (KIP-848, Kafka 4.0+, broker-side assignment). Classic works with every supported broker.",
    }
    group_remote_assignor: RemoteAssignor {
        name: "group.remote.assignor",
        default: none,
        rule: checks::any,
        set: |assignor: RemoteAssignor| assignor,
        doc: "With `group.protocol=consumer`: the broker-side assignor, `uniform` or `range`. Unset, the broker picks its default (the first of its `group.consumer.assignors`, `uniform` unless changed). Refused with `classic`.",
    }
    auto_offset_reset: AutoOffsetReset {
        name: "auto.offset.reset",
        default: "latest",
        rule: checks::any,
        set: |reset: AutoOffsetReset| reset,
        doc: "Where to start without a committed offset: `earliest`, `latest` or `none` (fail). Java's default; use `earliest` to not miss records produced before the group first started.",
    }
    enable_auto_commit: bool {
        name: "enable.auto.commit",
        default: "false",
        rule: checks::auto_commit_off,
        set: |enable: bool| enable,
        doc: "Must be `false`: timer-driven commits do not know whether the handler finished a record. Offsets are committed after the guard confirms the work.",
    }
    fetch_min_bytes: i32 {
        name: "fetch.min.bytes",
        default: "1",
        rule: checks::non_negative_bytes,
        set: |bytes: i32| bytes,
        doc: "The broker answers a fetch once this many bytes are available (or `fetch.max.wait.ms` passed). 1 answers as soon as anything arrives; 0 is allowed.",
    }
    fetch_max_bytes: i32 {
        name: "fetch.max.bytes",
        default: "52428800",
        rule: checks::positive_bytes,
        set: |bytes: i32| bytes,
        doc: "Soft cap on one fetch response (50 MiB, Java's default). May be below `max.partition.fetch.bytes` (a warning is logged).",
    }
    fetch_max_wait: Duration {
        name: "fetch.max.wait.ms",
        default: "500",
        rule: checks::int32_ms,
        set: |wait: Duration| wait,
        doc: "How long the broker may hold a fetch waiting for `fetch.min.bytes`. Java's default: low latency without a busy loop; 0 is allowed.",
    }
    max_partition_fetch_bytes: i32 {
        name: "max.partition.fetch.bytes",
        default: "1048576",
        rule: checks::positive_bytes,
        set: |bytes: i32| bytes,
        doc: "Soft cap on the data returned per partition in one fetch (1 MiB, Java's default).",
    }
    fetch_buffer_bytes: i32 {
        name: "fetch.buffer.bytes",
        default: "4194304",
        rule: checks::positive_bytes,
        set: |bytes: i32| bytes,
        doc: "Consumer only; ours. The bound, per broker, on fetched records held ahead of the handler: the fetch answer being handed out and the one fetched ahead each ask for at most half of it (and at most `fetch.max.bytes`), shared evenly among the partitions owned (at least 64 KiB each) so that no answer is held for one partition's sake. 4 MiB: the whole consumer peaks near 12 MB of memory at full speed on six partitions, where Java holds up to `fetch.max.bytes` (50 MiB) per broker; a record batch larger than a partition's share still comes whole, so it can be exceeded by one batch. Raise it on a link whose round trip is long (each answer carries at most half of it)",
    }
    isolation_level: IsolationLevel {
        name: "isolation.level",
        default: "read_committed",
        rule: checks::any,
        set: |level: IsolationLevel| level,
        doc: "`read_committed` (records of committed transactions only, up to the last stable offset) or `read_uncommitted`. `read_committed` by default (librdkafka's default; Java's is `read_uncommitted`), so that a consumer of what `run_transactional` writes never hands out an aborted attempt's output; on a topic without transactions both read the same records.",
    }
    client_rack: String {
        name: "client.rack",
        default: none,
        rule: checks::rack,
        set: |rack: impl Into<String>| rack.into(),
        doc: "The rack (zone) this consumer runs in, matched against the brokers' `broker.rack`: sent in every Fetch so that a leader with a rack-aware `replica.selector.class` can name a replica in the same rack to read from (KIP-392, less cross-zone traffic), and to the group (JoinGroup subscription, KIP-848 heartbeat) for rack-aware assignors. Unset: partitions are read from their leaders.",
    }
    request_timeout: Duration {
        name: "request.timeout.ms",
        default: "30000",
        rule: checks::positive_ms,
        set: |timeout: Duration| timeout,
        doc: "Upper bound on one request's round trip before the connection is considered broken (an OffsetCommit's connection is kept with the answer owed, so that the next commit is executed after it). Java's default.",
    }
    connection_setup_timeout: Duration {
        name: "socket.connection.setup.timeout.ms",
        default: "10000",
        rule: checks::positive_ms,
        set: |timeout: Duration| timeout,
        doc: "Upper bound on establishing a TCP connection to a broker. Java's default.",
    }
    retry_backoff: Duration {
        name: "retry.backoff.ms",
        default: "100",
        rule: checks::positive_ms,
        set: |backoff: Duration| backoff,
        doc: "First delay before retrying a failed request; doubles per attempt. Java's default; must be positive so failures never become a hot loop.",
    }
    reconnect_backoff_max: Duration {
        name: "reconnect.backoff.max.ms",
        default: "1000",
        rule: checks::positive_ms,
        set: |backoff: Duration| backoff,
        doc: "Cap on the exponential backoff for retries and reconnects. Java's default: a restarted broker is found again within a second.",
    }
    metadata_max_age: Duration {
        name: "metadata.max.age.ms",
        default: "300000",
        rule: checks::positive_ms,
        set: |age: Duration| age,
        doc: "How often a classic member refreshes its subscription's metadata (a pattern's: every topic's) to follow created and deleted topics and added partitions, rejoining when they changed. Java's default. Under `group.protocol=consumer` the broker follows them instead.",
    }
    exclude_internal_topics: bool {
        name: "exclude.internal.topics",
        default: "true",
        rule: checks::any,
        set: |exclude: bool| exclude,
        doc: "A pattern subscription (`subscribe_pattern`) never selects Kafka's internal topics (`__consumer_offsets`, ...). Java's default. Under `group.protocol=consumer` the broker decides.",
    }
    security_protocol: SecurityProtocol {
        name: "security.protocol",
        default: "PLAINTEXT",
        rule: checks::any,
        set: |protocol: SecurityProtocol| protocol,
        doc: "`PLAINTEXT`, `SSL`, `SASL_PLAINTEXT` or `SASL_SSL`; with SASL every connection authenticates, the heartbeat thread's too. `SSL` and `SASL_SSL` need the cargo feature `tls` (refused at build time without it).",
    }
    sasl_mechanism: SaslMechanism {
        name: "sasl.mechanism",
        default: none,
        rule: checks::any,
        set: |mechanism: SaslMechanism| mechanism,
        doc: "`PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512` or `OAUTHBEARER`; required with SASL (no GSSAPI default as in Java). PLAIN sends the password itself: use it over TLS only.",
    }
    sasl_username: String {
        name: "sasl.username",
        default: none,
        rule: checks::not_blank,
        set: |username: impl Into<String>| username.into(),
        doc: "The SASL user (librdkafka's name); give it with `sasl.password`, or both in `sasl.jaas.config`.",
    }
    sasl_password: Secret {
        name: "sasl.password",
        default: none,
        rule: checks::secret_not_empty,
        set: |password: impl Into<Secret>| password.into(),
        doc: "The SASL password. Never printed: `Debug` shows `[redacted]`, `to_properties` `[hidden]`.",
    }
    sasl_jaas_config: JaasConfig {
        name: "sasl.jaas.config",
        default: none,
        rule: checks::any,
        set: |jaas: JaasConfig| jaas,
        doc: "Java's form of the credentials: a `PlainLoginModule` or `ScramLoginModule` line with `username` and `password`, instead of `sasl.username`/`sasl.password`. Never printed; other login modules are refused with the reason.",
    }
    sasl_oauthbearer_token_callback: OAuthBearerCallback {
        name: "sasl.oauthbearer.token.callback",
        default: none,
        rule: checks::any,
        set: |callback: OAuthBearerCallback| callback,
        doc: "With `OAUTHBEARER`: the function that returns a token and its lifetime; called again once half of the lifetime has passed. Typed builder only (a callback has no text form; printed as `[callback]`).",
    }
    ssl_ca_location: PathBuf {
        name: "ssl.ca.location",
        default: none,
        rule: checks::any,
        set: |path: impl Into<PathBuf>| path.into(),
        doc: "PEM file of the CA certificates that sign the brokers' certificates; unset, the operating system's trust store is used. TLS protocols only.",
    }
    ssl_certificate_location: PathBuf {
        name: "ssl.certificate.location",
        default: none,
        rule: checks::any,
        set: |path: impl Into<PathBuf>| path.into(),
        doc: "PEM certificate chain this client presents (mTLS), with `ssl.key.location`.",
    }
    ssl_key_location: PathBuf {
        name: "ssl.key.location",
        default: none,
        rule: checks::any,
        set: |path: impl Into<PathBuf>| path.into(),
        doc: "PEM private key (PKCS#8, PKCS#1 or SEC1; unencrypted) of `ssl.certificate.location`.",
    }
    ssl_endpoint_identification_algorithm: EndpointIdentification {
        name: "ssl.endpoint.identification.algorithm",
        default: "https",
        rule: checks::any,
        set: |check: EndpointIdentification| check,
        doc: "`https`: the broker's certificate must name the host connected to (Java's default); `none` (or empty) skips only that check, the chain is still verified.",
    }
    storm_window: Duration {
        name: "rebalance.storm.window.ms",
        default: "300000",
        rule: checks::positive_ms,
        set: |window: Duration| window,
        doc: "Sliding window over which the guard counts rebalances. Five minutes: long enough to see a flapping member, short enough to clear soon after.",
    }
    storm_threshold: usize {
        name: "rebalance.storm.threshold",
        default: "5",
        rule: checks::any,
        set: |rebalances: usize| rebalances,
        doc: "Rebalances within the window that make a storm and fire the storm hook; 0 disables detection. Five in five minutes is never routine.",
    }
    idempotency_cache_size: usize {
        name: "idempotency.cache.size",
        default: "100000",
        rule: checks::any,
        set: |keys: usize| keys,
        doc: "Recently processed idempotency keys remembered to skip redeliveries; 0 disables. 100,000 covers several minutes at a few hundred records a second.",
    }
    batch_safety_factor: f64 {
        name: "batch.safety.factor",
        default: "0.5",
        rule: checks::fraction,
        set: |factor: f64| factor,
        doc: "A batch may use at most this fraction of `max.poll.interval.ms` (between 0 and 1, exclusive). Half leaves room for a slowdown the estimate has not seen yet.",
    }
    revoke_drain_timeout: Duration {
        name: "revoke.drain.timeout.ms",
        default: { "(min(10000, max.poll.interval.ms / 2))" => cross::default_drain_timeout(max_poll_interval) },
        rule: checks::positive_ms,
        set: |timeout: Duration| timeout,
        doc: "Bound on waiting for in-flight work when partitions are revoked; below `max.poll.interval.ms`. Long enough for a side effect with a retry, short enough that one hung handler cannot stall the group.",
    }
    session_bound: Duration {
        name: "session.bound.ms",
        default: none,
        rule: checks::session_bound,
        set: |bound: Duration| bound,
        doc: "With `group.protocol=consumer`: how long ownership is trusted after the send of the last answered heartbeat (leases go stale past it). Unset: three of the heartbeat intervals the broker returns. At most 45000, the broker's default session timeout; set it lower if the broker's `group.consumer.session.timeout.ms` is below three intervals. Refused with `classic`, which uses `session.timeout.ms`.",
    }
    commit_interval: Duration {
        name: "commit.interval.ms",
        default: "100",
        rule: checks::positive_ms,
        set: |interval: Duration| interval,
        doc: "What finished (the contiguous prefix and its completed-offsets map) is committed at most this often during a batch as well as after it, so a crash or a freeze redoes about this much work (plus one commit round trip) instead of a whole batch. Sent on a commit thread of its own, one at a time, without stopping the poll thread; nothing counts as committed before the broker acknowledged it. Revocation, close and `commit()` commits are synchronous and always made, after the paced commit in flight. 100 ms costs one commit per 100 ms.",
    }
    commit_metadata_max_bytes: usize {
        name: "commit.metadata.max.bytes",
        default: "4096",
        rule: checks::metadata_bytes,
        set: |bytes: usize| bytes,
        doc: "Longest completed-offsets map a commit carries in its `metadata` (offsets finished beyond the first unfinished one, skipped by the next owner); set it to the broker's `offset.metadata.max.bytes` (Kafka's default 4096). A partition whose map could outgrow it admits nothing more until its gap closes. 0 writes no map.",
    }
    processing_order: ProcessingOrder {
        name: "processing.order",
        default: "partition",
        rule: checks::any,
        set: |order: ProcessingOrder| order,
        doc: "Decoupled mode: `partition` (one record of a partition at a time, in order), `key` (same key in order, different keys of one partition in parallel) or `unordered`. Partition order is the safe default for order streams keyed by partition.",
    }
    max_in_flight_per_partition: usize {
        name: "processing.max.in.flight.per.partition",
        default: "64",
        rule: checks::in_flight,
        set: |records: usize| records,
        doc: "Decoupled mode with `processing.order` `key` or `unordered`: records of one partition running or queued at once, at least 1. Bounds what one revocation drains and what one gap can hold back.",
    }
    processing_retries: usize {
        name: "processing.retries",
        default: "0",
        rule: checks::retries,
        set: |retries: usize| retries,
        doc: "`run` and the decoupled mode: how many times a record whose handler fails is tried again before it is dead-lettered (`Consumer::on_dead_letter`) or, without a dead-letter callback, stops the run. 0 (at most 1000): the first failure does, as before retries existed.",
    }
    processing_retry_backoff: Duration {
        name: "processing.retry.backoff.ms",
        default: "100",
        rule: checks::positive_ms,
        set: |backoff: Duration| backoff,
        doc: "Wait before the first retry of a failed record; doubles per retry up to `processing.retry.backoff.max.ms`. Its partition waits (paused, later records held back), the others go on, and the poll loop keeps polling.",
    }
    processing_retry_backoff_max: Duration {
        name: "processing.retry.backoff.max.ms",
        default: "10000",
        rule: checks::positive_ms,
        set: |backoff: Duration| backoff,
        doc: "Cap on the doubling retry backoff; at least `processing.retry.backoff.ms`. Ten seconds: a broken dependency is not hammered, a record is not held for minutes.",
    }
    transaction_interval: Duration {
        name: "transaction.interval.ms",
        default: "100",
        rule: checks::positive_ms,
        set: |interval: Duration| interval,
        doc: "Consumer only; ours. For `Consumer::run_transactional`: how long a transaction stays open collecting finished records before it commits them with their offsets (the role `commit.interval.ms` has for plain commits). Shorter: outputs become visible to `read_committed` readers sooner and less is redone after an abort; longer: fewer transaction markers, more throughput. Keep it well below `transaction.timeout.ms`.",
    }
    share_acknowledgement_mode: AcknowledgementMode {
        name: "share.acknowledgement.mode",
        default: "explicit",
        rule: checks::any,
        set: |mode: AcknowledgementMode| mode,
        doc: "Share consumer only. Kafka's name; only `explicit` is accepted: every record is acknowledged by what its handler did and whether its lock may have expired. `implicit` (accept everything the previous poll returned) would accept records whose lock ran out.",
    }
    share_acquire_mode: AcquireMode {
        name: "share.acquire.mode",
        default: "record_limit",
        rule: checks::any,
        set: |mode: AcquireMode| mode,
        doc: "Share consumer only. `record_limit` or `batch_optimized` (KIP-1206, ShareFetch v2). With `record_limit` the broker acquires at most what a fetch asks for (`max.poll.records` for `poll`, two per worker thread in the decoupled mode). Kafka's default is `batch_optimized` (whole batches); ours differs because an acquired record that waits past its lock spends one of its deliveries. What it costs: a `record_limit` acquisition ends inside a log batch, and Kafka 4.4 then keeps and acknowledges it one offset at a time, about twice the broker CPU per record; with fast handlers `batch_optimized` reads about twice as fast (docs/benchmarks.md).",
    }
    share_lock_safety_margin: Duration {
        name: "share.lock.safety.margin.ms",
        default: none,
        rule: checks::positive_ms,
        set: |margin: Duration| margin,
        doc: "Share consumer only; ours. How long before the broker's lock a record's lease ends: covers the clock difference and the request's trip (the lease is measured from the ShareFetch's send time, so the trip back is already inside it). Unset: a tenth of the lock the broker reports, at least 1000.",
    }
    share_lock_renew: bool {
        name: "share.lock.renew",
        default: "true",
        rule: checks::any,
        set: |renew: bool| renew,
        doc: "Share consumer only; ours. Renew the lock of a record still running at half its lock (RENEW, KIP-1222, Kafka 4.2+ brokers); without it a slow record's lease simply ends.",
    }
    acks: Acks {
        name: "acks",
        default: "all",
        rule: checks::any,
        set: |acks: Acks| acks,
        doc: "Producer only. `all` (`-1`), `1` or `0`: which replicas must have a record before the leader answers. `all` (Java's default since 3.0), so that an acknowledged record survives the loss of its leader; idempotence requires it.",
    }
    enable_idempotence: bool {
        name: "enable.idempotence",
        default: "true",
        rule: checks::any,
        set: |on: bool| on,
        doc: "Producer only. A producer id and a sequence per partition, so that the leader drops a retried batch it already wrote: a retry after a lost answer writes nothing twice, and up to 5 requests in flight keep their order. On by default, as in Java since 3.0.",
    }
    linger_ms: Duration {
        name: "linger.ms",
        default: "5",
        rule: checks::int32_ms,
        set: |linger: Duration| linger,
        doc: "Producer only. How long a partition's batch waits for more records before it is sent, unless it is full first. 5 ms (Java's default since 4.0): a few ms of latency buy batches several times larger.",
    }
    batch_size: usize {
        name: "batch.size",
        default: "16384",
        rule: checks::batch_bytes,
        set: |bytes: usize| bytes,
        doc: "Producer only. The size in bytes at which a partition's batch is sent without waiting for `linger.ms`, and after which the sticky partitioner moves keyless records to another partition. A record larger than it travels in a batch of its own.",
    }
    buffer_memory: usize {
        name: "buffer.memory",
        default: "33554432",
        rule: checks::batch_bytes,
        set: |bytes: usize| bytes,
        doc: "Producer only. Bytes of records that may wait unsent or unacknowledged; `send` blocks while it is full, up to `max.block.ms`. Bounds the producer's memory whatever the brokers do.",
    }
    max_block: Duration {
        name: "max.block.ms",
        default: "60000",
        rule: checks::int32_ms,
        set: |wait: Duration| wait,
        doc: "Producer only. How long `send` may block: for a topic's metadata, or for room in `buffer.memory`. Then it fails with an error that says which.",
    }
    max_in_flight_requests_per_connection: usize {
        name: "max.in.flight.requests.per.connection",
        default: "5",
        rule: checks::in_flight,
        set: |n: usize| n,
        doc: "Producer only. Produce requests one broker connection may have unanswered. At most 5 with idempotence: the leader remembers the last five batches of a producer per partition, which is what keeps a retry in order.",
    }
    delivery_timeout: Duration {
        name: "delivery.timeout.ms",
        default: "120000",
        rule: checks::int32_ms,
        set: |timeout: Duration| timeout,
        doc: "Producer only. How long a record may take from `send` to its acknowledgement, retries included; then its handle fails. At least `linger.ms` + `request.timeout.ms`. Two minutes ride out a leader election and a broker restart.",
    }
    max_request_size: usize {
        name: "max.request.size",
        default: "1048576",
        rule: checks::batch_bytes,
        set: |bytes: usize| bytes,
        doc: "Producer only. The largest record (and Produce request) sent; a larger record fails at `send`. Keep it at most the broker's `message.max.bytes`.",
    }
    compression_type: CompressionType {
        name: "compression.type",
        default: "none",
        rule: super::values::codec_built,
        set: |codec: CompressionType| codec,
        doc: "Producer only. `none`, `gzip`, `snappy`, `lz4` or `zstd`, compressing each batch with the pure-Rust codec of the same cargo feature (all on by default).",
    }
    compression_gzip_level: i32 {
        name: "compression.gzip.level",
        default: "-1",
        rule: checks::gzip_level,
        set: |level: i32| level,
        doc: "Producer only. 1 (fastest) to 9 (smallest), or -1 for the codec's default (6), as Java names it (KIP-390).",
    }
    compression_zstd_level: i32 {
        name: "compression.zstd.level",
        default: "3",
        rule: checks::zstd_level,
        set: |level: i32| level,
        doc: "Producer only. 0 stores blocks uncompressed; 1 to 3 compress (the pure-Rust encoder has no higher levels and 1-3 all use its fastest one). Java's default is 3.",
    }
    transactional_id: String {
        name: "transactional.id",
        default: none,
        rule: checks::not_blank,
        set: |id: impl Into<String>| id.into(),
        doc: "Producer only. Makes the producer transactional: its records and the consumer offsets sent with them become visible together or not at all (to readers with `isolation.level=read_committed`). A second producer started with the same id fences the first (its next request is refused) and aborts what it left open. Keep it stable per worker instance (the `group.instance.id` of a static member is a good choice) so that a restarted worker aborts its predecessor's transaction at once instead of after `transaction.timeout.ms`. Needs `enable.idempotence=true`.",
    }
    transaction_timeout: Duration {
        name: "transaction.timeout.ms",
        default: "60000",
        rule: checks::positive_ms,
        set: |timeout: Duration| timeout,
        doc: "Producer only. How long the transaction coordinator lets a transaction stay open before it aborts it: the bound on how long a frozen producer's open transaction holds back `read_committed` readers and the next owner of its input partitions. `Consumer::run_transactional` requires it within the member's session (`session.timeout.ms`; with `group.protocol=consumer`, `session.bound.ms` when set). At most the broker's `transaction.max.timeout.ms` (15 minutes by default).",
    }
    partitioner_ignore_keys: bool {
        name: "partitioner.ignore.keys",
        default: "false",
        rule: checks::any,
        set: |ignore: bool| ignore,
        doc: "Producer only. Spread keyed records as keyless ones (sticky), ignoring the key. False: a key lands on `murmur2(key) % partitions`, the partition Java's producer picks for it.",
    }
}
