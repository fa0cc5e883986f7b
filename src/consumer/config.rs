//! Consumer configuration, under Kafka's own property names.
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
//! mixed. [`SETTINGS`] lists every setting with its default and meaning; README.md's configuration
//! table is checked against it by a unit test.
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
//! - Values are trimmed; a `.properties` file is read as UTF-8.

use std::error::Error;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use log::warn;

use crate::group::assignor::{COOPERATIVE_STICKY, RANGE, ROUNDROBIN};
use crate::group::RebalanceProtocol;
use crate::guard::GuardConfig;
use crate::wire::{ClientConfig, FetchConfig, IsolationLevel};

// ----------------------------------------------------------------------------------------------
// The settings table

/// One setting's name, default and meaning, for documentation and checks.
///
/// Why a table in code: README.md's configuration table is checked against [`SETTINGS`] by a unit
/// test, so the documentation cannot drift from what the parser accepts.
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

const fn doc(name: &'static str, default: &'static str, description: &'static str) -> SettingDoc {
    SettingDoc {
        name,
        default,
        description,
    }
}

/// Every setting this consumer accepts, in the order [`ConsumerConfig::to_properties`] prints
/// them. Java's names first, then this library's own.
pub const SETTINGS: &[SettingDoc] = &[
    doc(
        "bootstrap.servers",
        "(required)",
        "Comma-separated `host:port` list used to discover the cluster; any one reachable entry is enough.",
    ),
    doc(
        "group.id",
        "(required)",
        "The consumer group. Required: without a group there is no rebalance to guard and no committed position.",
    ),
    doc(
        "group.instance.id",
        "(none)",
        "Static membership (KIP-345): a restarted member with the same id gets its partitions back without a rebalance. Letters, digits, `.`, `_`, `-`, at most 249.",
    ),
    doc(
        "client.id",
        "rebalance-guard",
        "Sent with every request so broker logs and quotas can attribute traffic; prefixes the member id.",
    ),
    doc(
        "session.timeout.ms",
        "45000",
        "A member silent for this long is evicted. Java's default since 3.0: long enough to ride out a GC pause or a brief network stall.",
    ),
    doc(
        "heartbeat.interval.ms",
        "3000",
        "How often the background thread heartbeats. At most a third of `session.timeout.ms`, so two heartbeats may be lost before eviction.",
    ),
    doc(
        "max.poll.interval.ms",
        "300000",
        "Longest allowed gap between polls; also the classic rebalance timeout. Java's default; batches are sized to stay well inside it.",
    ),
    doc(
        "max.poll.records",
        "500",
        "Upper bound on one batch; the batch sizer usually hands out fewer when records are slow. Java's default.",
    ),
    doc(
        "partition.assignment.strategy",
        "cooperative-sticky",
        "Assignors in preference order: `range`, `roundrobin` (eager) or `cooperative-sticky`; eager and cooperative may not be mixed. Cooperative so a rebalance revokes only partitions that move.",
    ),
    doc(
        "group.protocol",
        "classic",
        "`classic` (JoinGroup/SyncGroup, every broker) or `consumer` (KIP-848, Kafka 4.0+, broker-side assignment). Classic works with every supported broker.",
    ),
    doc(
        "auto.offset.reset",
        "latest",
        "Where to start without a committed offset: `earliest`, `latest` or `none` (fail). Java's default; use `earliest` to not miss records produced before the group first started.",
    ),
    doc(
        "enable.auto.commit",
        "false",
        "Must be `false`: timer-driven commits do not know whether the handler finished a record. Offsets are committed after the guard confirms the work.",
    ),
    doc(
        "fetch.min.bytes",
        "1",
        "The broker answers a fetch once this many bytes are available (or `fetch.max.wait.ms` passed). 1 answers as soon as anything arrives; 0 is allowed.",
    ),
    doc(
        "fetch.max.bytes",
        "52428800",
        "Soft cap on one fetch response (50 MiB, Java's default). May be below `max.partition.fetch.bytes` (a warning is logged).",
    ),
    doc(
        "fetch.max.wait.ms",
        "500",
        "How long the broker may hold a fetch waiting for `fetch.min.bytes`. Java's default: low latency without a busy loop; 0 is allowed.",
    ),
    doc(
        "max.partition.fetch.bytes",
        "1048576",
        "Soft cap on the data returned per partition in one fetch (1 MiB, Java's default).",
    ),
    doc(
        "isolation.level",
        "read_uncommitted",
        "`read_uncommitted` or `read_committed` (only committed transactional records, up to the last stable offset). Java's default.",
    ),
    doc(
        "request.timeout.ms",
        "30000",
        "Upper bound on one request's round trip before the connection is considered broken. Java's default.",
    ),
    doc(
        "socket.connection.setup.timeout.ms",
        "10000",
        "Upper bound on establishing a TCP connection to a broker. Java's default.",
    ),
    doc(
        "retry.backoff.ms",
        "100",
        "First delay before retrying a failed request; doubles per attempt. Java's default; must be positive so failures never become a hot loop.",
    ),
    doc(
        "reconnect.backoff.max.ms",
        "1000",
        "Cap on the exponential backoff for retries and reconnects. Java's default: a restarted broker is found again within a second.",
    ),
    doc(
        "rebalance.storm.window.ms",
        "300000",
        "Sliding window over which the guard counts rebalances. Five minutes: long enough to see a flapping member, short enough to clear soon after.",
    ),
    doc(
        "rebalance.storm.threshold",
        "5",
        "Rebalances within the window that make a storm and fire the storm hook; 0 disables detection. Five in five minutes is never routine.",
    ),
    doc(
        "idempotency.cache.size",
        "100000",
        "Recently processed idempotency keys remembered to skip redeliveries; 0 disables. 100,000 covers several minutes at a few hundred records a second.",
    ),
    doc(
        "batch.safety.factor",
        "0.5",
        "A batch may use at most this fraction of `max.poll.interval.ms` (between 0 and 1, exclusive). Half leaves room for a slowdown the estimate has not seen yet.",
    ),
    doc(
        "revoke.drain.timeout.ms",
        "(min(10000, max.poll.interval.ms / 2))",
        "Bound on waiting for in-flight work when partitions are revoked; below `max.poll.interval.ms`. Long enough for a side effect with a retry, short enough that one hung handler cannot stall the group.",
    ),
];

/// Kafka consumer settings this library knows but does not implement, with the reason, so that a
/// `.properties` file copied from a Java consumer gets an explanation instead of "unknown".
const UNSUPPORTED: &[(&str, &str)] = &[
    (
        "auto.commit.interval.ms",
        "auto-commit is refused (see enable.auto.commit), so its interval has no meaning",
    ),
    (
        "key.deserializer",
        "records are handed to the handler as bytes; deserialize in the handler",
    ),
    (
        "value.deserializer",
        "records are handed to the handler as bytes; deserialize in the handler",
    ),
    (
        "security.protocol",
        "only PLAINTEXT connections are implemented; TLS and SASL are not",
    ),
    (
        "group.remote.assignor",
        "the broker's default assignor is used with group.protocol=consumer",
    ),
    ("interceptor.classes", "Java interceptors do not apply"),
];

/// Prefixes of Kafka settings that belong to features not implemented here.
const UNSUPPORTED_PREFIXES: &[(&str, &str)] = &[
    ("ssl.", "TLS is not implemented; connections are PLAINTEXT"),
    (
        "sasl.",
        "SASL is not implemented; connections are PLAINTEXT",
    ),
];

// ----------------------------------------------------------------------------------------------
// Typed values

/// A partition assignor, named as in `partition.assignment.strategy`.
///
/// Why an enum and not free text: the consumer must know, before it joins, whether its assignors
/// are eager or cooperative (that decides whether it revokes everything at the start of each
/// rebalance), and an enum makes "unknown assignor" a build-time error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AssignmentStrategy {
    /// Java's `RangeAssignor` (eager): per topic, contiguous ranges of partitions per member, so
    /// co-partitioned topics land together.
    Range,
    /// Java's `RoundRobinAssignor` (eager): partitions of all topics dealt out in turn.
    RoundRobin,
    /// Java's `CooperativeStickyAssignor` (KIP-429): partitions stay with their owner, and only
    /// those that move are revoked.
    CooperativeSticky,
}

impl AssignmentStrategy {
    /// Every assignor, in the order they are listed in error messages.
    pub const ALL: [AssignmentStrategy; 3] = [
        AssignmentStrategy::Range,
        AssignmentStrategy::RoundRobin,
        AssignmentStrategy::CooperativeSticky,
    ];

    /// The protocol name sent in JoinGroup (also librdkafka's configuration name), so the group
    /// layer's `assignor_for` and `select_protocol` accept it.
    pub fn name(self) -> &'static str {
        match self {
            AssignmentStrategy::Range => RANGE,
            AssignmentStrategy::RoundRobin => ROUNDROBIN,
            AssignmentStrategy::CooperativeSticky => COOPERATIVE_STICKY,
        }
    }

    /// Eager or cooperative: how a rebalance hands partitions over under this assignor.
    pub fn protocol(self) -> RebalanceProtocol {
        match self {
            AssignmentStrategy::Range | AssignmentStrategy::RoundRobin => RebalanceProtocol::Eager,
            AssignmentStrategy::CooperativeSticky => RebalanceProtocol::Cooperative,
        }
    }

    /// Parses one list entry: the short name (any case) or Java's class name, so configuration
    /// copied from a Java or librdkafka consumer works. Surrounding whitespace is ignored.
    pub fn from_name(entry: &str) -> Option<Self> {
        let entry = entry.trim();
        let short = entry
            .strip_prefix("org.apache.kafka.clients.consumer.")
            .map(|class| match class {
                "RangeAssignor" => RANGE,
                "RoundRobinAssignor" => ROUNDROBIN,
                "CooperativeStickyAssignor" => COOPERATIVE_STICKY,
                _ => "",
            })
            .unwrap_or(entry);
        AssignmentStrategy::ALL
            .into_iter()
            .find(|s| s.name().eq_ignore_ascii_case(short))
    }
}

impl fmt::Display for AssignmentStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which group membership protocol to speak (`group.protocol`).
///
/// Why a choice: the classic protocol works with every broker from Kafka 2.1 on; KIP-848's
/// `consumer` protocol (Kafka 4.0+) moves assignment to the broker and avoids group-wide
/// synchronisation barriers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum GroupProtocol {
    /// JoinGroup/SyncGroup/Heartbeat; client-side assignors.
    #[default]
    Classic,
    /// KIP-848 ConsumerGroupHeartbeat; the broker assigns.
    Consumer,
}

impl GroupProtocol {
    /// The value as written in configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            GroupProtocol::Classic => "classic",
            GroupProtocol::Consumer => "consumer",
        }
    }

    /// Parses a configuration value, ignoring case (Java accepts `CLASSIC` too).
    pub fn from_name(value: &str) -> Option<Self> {
        [GroupProtocol::Classic, GroupProtocol::Consumer]
            .into_iter()
            .find(|p| p.as_str().eq_ignore_ascii_case(value.trim()))
    }
}

impl fmt::Display for GroupProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where to start reading a partition that has no committed offset (`auto.offset.reset`).
///
/// Why it matters here: `latest` on a new group skips everything produced before the group first
/// started, which for an order stream is silent loss; `none` makes that a visible error instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum AutoOffsetReset {
    /// The log start offset: process everything still retained.
    Earliest,
    /// The log end offset: only records produced from now on. Java's default.
    #[default]
    Latest,
    /// Fail instead of choosing: a missing committed offset is an operator decision.
    None,
}

impl AutoOffsetReset {
    /// The value as written in configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            AutoOffsetReset::Earliest => "earliest",
            AutoOffsetReset::Latest => "latest",
            AutoOffsetReset::None => "none",
        }
    }

    /// Parses a configuration value, ignoring case.
    pub fn from_name(value: &str) -> Option<Self> {
        [
            AutoOffsetReset::Earliest,
            AutoOffsetReset::Latest,
            AutoOffsetReset::None,
        ]
        .into_iter()
        .find(|r| r.as_str().eq_ignore_ascii_case(value.trim()))
    }
}

impl fmt::Display for AutoOffsetReset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

fn isolation_name(level: IsolationLevel) -> &'static str {
    match level {
        IsolationLevel::ReadUncommitted => "read_uncommitted",
        IsolationLevel::ReadCommitted => "read_committed",
    }
}

fn isolation_from_name(value: &str) -> Option<IsolationLevel> {
    [
        IsolationLevel::ReadUncommitted,
        IsolationLevel::ReadCommitted,
    ]
    .into_iter()
    .find(|l| isolation_name(*l).eq_ignore_ascii_case(value.trim()))
}

// ----------------------------------------------------------------------------------------------
// Errors

/// Why a configuration was refused. Every variant names the setting (see [`ConfigError::setting`])
/// and its message states the rule, so an operator can fix the file without reading code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// No such setting. Refused rather than ignored: a misspelt `session.timout.ms` would
    /// otherwise silently leave the default in force.
    UnknownSetting {
        /// The name as given.
        name: String,
        /// The closest known setting, when one is close enough to be a likely typo.
        suggestion: Option<&'static str>,
    },
    /// A Kafka setting this library knows but does not implement.
    UnsupportedSetting {
        /// The name as given.
        name: String,
        /// Why it is not supported.
        reason: &'static str,
    },
    /// A required setting was not given.
    Missing {
        /// The setting.
        name: &'static str,
    },
    /// The value could not be parsed.
    InvalidValue {
        /// The setting.
        name: &'static str,
        /// The value as given.
        value: String,
        /// What was expected, naming the allowed values for enumerations.
        expected: &'static str,
    },
    /// The value parsed but is outside the allowed range (zero, negative, too large).
    OutOfRange {
        /// The setting.
        name: &'static str,
        /// The value as given (durations in milliseconds).
        value: String,
        /// The rule it broke.
        rule: &'static str,
    },
    /// Two settings contradict each other.
    Conflict {
        /// The setting reported as wrong.
        name: &'static str,
        /// The setting it conflicts with.
        other: &'static str,
        /// The rule, with both values.
        rule: String,
    },
    /// `enable.auto.commit=true`.
    AutoCommitRefused,
    /// `partition.assignment.strategy` names no assignor.
    EmptyStrategies,
    /// `partition.assignment.strategy` lists an assignor twice.
    DuplicateStrategy {
        /// The repeated assignor.
        strategy: AssignmentStrategy,
    },
    /// `partition.assignment.strategy` mixes eager and cooperative assignors.
    MixedStrategies {
        /// An eager assignor in the list.
        eager: AssignmentStrategy,
        /// A cooperative assignor in the list.
        cooperative: AssignmentStrategy,
    },
    /// A classic-protocol setting was set explicitly with `group.protocol=consumer`, where the
    /// broker decides it.
    ClassicOnly {
        /// The setting.
        name: &'static str,
    },
    /// A `.properties` file could not be read.
    File {
        /// The file.
        path: PathBuf,
        /// The I/O error's kind.
        kind: std::io::ErrorKind,
        /// The I/O error's message.
        message: String,
    },
    /// A `.properties` file is malformed (only a broken `\u` escape can make it so).
    Syntax {
        /// The file, when the text came from one.
        path: Option<PathBuf>,
        /// The 1-based line where the logical line starts.
        line: usize,
        /// What is wrong.
        message: String,
    },
}

impl ConfigError {
    /// The setting at fault, when the error concerns one.
    pub fn setting(&self) -> Option<&str> {
        match self {
            ConfigError::UnknownSetting { name, .. }
            | ConfigError::UnsupportedSetting { name, .. } => Some(name),
            ConfigError::Missing { name }
            | ConfigError::InvalidValue { name, .. }
            | ConfigError::OutOfRange { name, .. }
            | ConfigError::Conflict { name, .. }
            | ConfigError::ClassicOnly { name } => Some(name),
            ConfigError::AutoCommitRefused => Some("enable.auto.commit"),
            ConfigError::EmptyStrategies
            | ConfigError::DuplicateStrategy { .. }
            | ConfigError::MixedStrategies { .. } => Some("partition.assignment.strategy"),
            ConfigError::File { .. } | ConfigError::Syntax { .. } => None,
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::UnknownSetting { name, suggestion } => {
                write!(f, "unknown setting `{name}`")?;
                match suggestion {
                    Some(s) => write!(f, ": did you mean `{s}`?"),
                    None => write!(f, " (see rebalance_guard::consumer::config::SETTINGS)"),
                }
            }
            ConfigError::UnsupportedSetting { name, reason } => {
                write!(f, "setting `{name}` is not supported: {reason}")
            }
            ConfigError::Missing { name } => write!(f, "setting `{name}` is required"),
            ConfigError::InvalidValue {
                name,
                value,
                expected,
            } => write!(f, "setting `{name}`: {value:?} is not {expected}"),
            ConfigError::OutOfRange { name, value, rule } => {
                write!(f, "setting `{name}`: {value} {rule}")
            }
            ConfigError::Conflict { name, other, rule } => {
                write!(f, "setting `{name}` conflicts with `{other}`: {rule}")
            }
            ConfigError::AutoCommitRefused => f.write_str(
                "setting `enable.auto.commit`: must be false. Auto-commit commits the fetched \
                 position on a timer without knowing whether the handler finished those records; \
                 a crash or rebalance after such a commit loses records that were never \
                 processed, the exact failure this consumer prevents. Offsets are committed after \
                 the guard confirms the work (last processed + 1).",
            ),
            ConfigError::EmptyStrategies => f.write_str(
                "setting `partition.assignment.strategy`: names no assignor (allowed: range, \
                 roundrobin, cooperative-sticky)",
            ),
            ConfigError::DuplicateStrategy { strategy } => write!(
                f,
                "setting `partition.assignment.strategy`: lists `{strategy}` twice"
            ),
            ConfigError::MixedStrategies { eager, cooperative } => write!(
                f,
                "setting `partition.assignment.strategy`: mixes eager `{eager}` and cooperative \
                 `{cooperative}`; the consumer must know before joining whether a rebalance \
                 revokes every partition (eager) or only those that move (cooperative), so list \
                 assignors of one kind only"
            ),
            ConfigError::ClassicOnly { name } => write!(
                f,
                "setting `{name}` applies to group.protocol=classic only; with \
                 group.protocol=consumer the broker decides it (group.consumer.* broker settings)"
            ),
            ConfigError::File {
                path,
                kind,
                message,
            } => write!(
                f,
                "cannot read properties file {}: {message} ({kind:?})",
                path.display()
            ),
            ConfigError::Syntax {
                path,
                line,
                message,
            } => match path {
                Some(path) => write!(f, "{}:{line}: {message}", path.display()),
                None => write!(f, "properties line {line}: {message}"),
            },
        }
    }
}

impl Error for ConfigError {}

// ----------------------------------------------------------------------------------------------
// The validated configuration

/// A validated consumer configuration. Only [`ConsumerConfigBuilder::build`] (and the
/// `from_properties*` functions, which use it) make one, so holding a `ConsumerConfig` means every
/// rule in this module was checked.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsumerConfig {
    bootstrap_servers: Vec<String>,
    group_id: String,
    group_instance_id: Option<String>,
    client_id: String,
    session_timeout: Duration,
    heartbeat_interval: Duration,
    max_poll_interval: Duration,
    max_poll_records: usize,
    assignment_strategies: Vec<AssignmentStrategy>,
    group_protocol: GroupProtocol,
    auto_offset_reset: AutoOffsetReset,
    fetch_min_bytes: i32,
    fetch_max_bytes: i32,
    fetch_max_wait: Duration,
    max_partition_fetch_bytes: i32,
    isolation_level: IsolationLevel,
    request_timeout: Duration,
    connection_setup_timeout: Duration,
    retry_backoff: Duration,
    reconnect_backoff_max: Duration,
    storm_window: Duration,
    storm_threshold: usize,
    idempotency_cache_size: usize,
    batch_safety_factor: f64,
    revoke_drain_timeout: Duration,
}

/// The default `revoke.drain.timeout.ms` when `max.poll.interval.ms` is large.
const DRAIN_TIMEOUT_CAP: Duration = Duration::from_secs(10);

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

    /// Reads a Java `.properties` file (see [`parse_properties`] for the syntax) and builds from
    /// it.
    pub fn from_properties_file(path: impl AsRef<Path>) -> Result<ConsumerConfig, ConfigError> {
        let path = path.as_ref();
        let text = fs::read_to_string(path).map_err(|e| ConfigError::File {
            path: path.to_path_buf(),
            kind: e.kind(),
            message: e.to_string(),
        })?;
        let properties = parse_properties(&text).map_err(|e| ConfigError::Syntax {
            path: Some(path.to_path_buf()),
            line: e.line,
            message: e.message,
        })?;
        ConsumerConfig::from_properties(properties)
    }

    /// Every setting with its effective value, in [`SETTINGS`] order, for logging at startup.
    /// Feeding the result back to [`ConsumerConfig::from_properties`] gives an equal
    /// configuration. Nothing secret is printed because no secret setting is supported.
    pub fn to_properties(&self) -> Vec<(&'static str, String)> {
        let ms = |d: Duration| d.as_millis().to_string();
        let mut out = vec![
            ("bootstrap.servers", self.bootstrap_servers.join(",")),
            ("group.id", self.group_id.clone()),
        ];
        if let Some(id) = &self.group_instance_id {
            out.push(("group.instance.id", id.clone()));
        }
        out.extend([
            ("client.id", self.client_id.clone()),
            ("session.timeout.ms", ms(self.session_timeout)),
            ("heartbeat.interval.ms", ms(self.heartbeat_interval)),
            ("max.poll.interval.ms", ms(self.max_poll_interval)),
            ("max.poll.records", self.max_poll_records.to_string()),
            (
                "partition.assignment.strategy",
                self.assignment_strategies
                    .iter()
                    .map(|s| s.name())
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            ("group.protocol", self.group_protocol.as_str().to_string()),
            (
                "auto.offset.reset",
                self.auto_offset_reset.as_str().to_string(),
            ),
            ("enable.auto.commit", "false".to_string()),
            ("fetch.min.bytes", self.fetch_min_bytes.to_string()),
            ("fetch.max.bytes", self.fetch_max_bytes.to_string()),
            ("fetch.max.wait.ms", ms(self.fetch_max_wait)),
            (
                "max.partition.fetch.bytes",
                self.max_partition_fetch_bytes.to_string(),
            ),
            (
                "isolation.level",
                isolation_name(self.isolation_level).to_string(),
            ),
            ("request.timeout.ms", ms(self.request_timeout)),
            (
                "socket.connection.setup.timeout.ms",
                ms(self.connection_setup_timeout),
            ),
            ("retry.backoff.ms", ms(self.retry_backoff)),
            ("reconnect.backoff.max.ms", ms(self.reconnect_backoff_max)),
            ("rebalance.storm.window.ms", ms(self.storm_window)),
            (
                "rebalance.storm.threshold",
                self.storm_threshold.to_string(),
            ),
            (
                "idempotency.cache.size",
                self.idempotency_cache_size.to_string(),
            ),
            ("batch.safety.factor", self.batch_safety_factor.to_string()),
            ("revoke.drain.timeout.ms", ms(self.revoke_drain_timeout)),
        ]);
        // The group protocol decides these; printing them would make the round trip refuse them.
        if self.group_protocol == GroupProtocol::Consumer {
            out.retain(|(k, _)| !CLASSIC_ONLY.contains(k));
        }
        out
    }

    /// `bootstrap.servers`, one `host:port` per entry.
    pub fn bootstrap_servers(&self) -> &[String] {
        &self.bootstrap_servers
    }
    /// `group.id`.
    pub fn group_id(&self) -> &str {
        &self.group_id
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
    /// `max.poll.records`: at least 1.
    pub fn max_poll_records(&self) -> usize {
        self.max_poll_records
    }
    /// `partition.assignment.strategy` in preference order: non-empty, no duplicates, all of
    /// one [`RebalanceProtocol`].
    pub fn assignment_strategies(&self) -> &[AssignmentStrategy] {
        &self.assignment_strategies
    }
    /// Eager or cooperative, as implied by the assignors (they all agree, by validation).
    pub fn rebalance_protocol(&self) -> RebalanceProtocol {
        self.assignment_strategies
            .first()
            .map_or(RebalanceProtocol::Cooperative, |s| s.protocol())
    }
    /// `group.protocol`.
    pub fn group_protocol(&self) -> GroupProtocol {
        self.group_protocol
    }
    /// `auto.offset.reset`.
    pub fn auto_offset_reset(&self) -> AutoOffsetReset {
        self.auto_offset_reset
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
    /// `isolation.level`.
    pub fn isolation_level(&self) -> IsolationLevel {
        self.isolation_level
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

    /// The guard's settings (idempotency cache, storm window and threshold).
    pub fn guard_config(&self) -> GuardConfig {
        GuardConfig {
            idempotency_capacity: self.idempotency_cache_size,
            storm_window: self.storm_window,
            storm_threshold: self.storm_threshold,
        }
    }

    /// The wire client's settings. `reconnect.backoff.max.ms` caps the client's single
    /// exponential backoff, which it uses for request retries and reconnects alike. The largest
    /// accepted response frame is raised above the client's default when `fetch.max.bytes` plus
    /// one partition's worth could exceed it, so a legal fetch response is never refused.
    pub fn client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new(self.bootstrap_servers.iter().cloned());
        config.connection.client_id = self.client_id.clone();
        config.connection.connect_timeout = self.connection_setup_timeout;
        config.connection.request_timeout = self.request_timeout;
        let fetch_frame = (self.fetch_max_bytes as usize)
            .saturating_add(self.max_partition_fetch_bytes as usize)
            .saturating_add(64 * 1024);
        config.connection.max_response_size = config.connection.max_response_size.max(fetch_frame);
        config.retry_backoff = self.retry_backoff;
        config.retry_backoff_max = self.reconnect_backoff_max.max(self.retry_backoff);
        config
    }

    /// The fetch settings for the wire client; anything the properties do not cover keeps the
    /// wire layer's default.
    pub fn fetch_config(&self) -> FetchConfig {
        FetchConfig {
            max_wait: self.fetch_max_wait,
            min_bytes: self.fetch_min_bytes,
            max_bytes: self.fetch_max_bytes,
            max_partition_bytes: self.max_partition_fetch_bytes,
            isolation: self.isolation_level,
            // Fields the wire layer adds later keep its defaults.
            ..FetchConfig::default()
        }
    }
}

/// Settings that only the classic protocol uses; with `group.protocol=consumer` the broker decides
/// them.
const CLASSIC_ONLY: &[&str] = &[
    "partition.assignment.strategy",
    "session.timeout.ms",
    "heartbeat.interval.ms",
];

// ----------------------------------------------------------------------------------------------
// The builder

/// Collects settings, typed or by name, and validates them all in [`build`](Self::build).
///
/// Why errors wait for `build`: the builder chains (`.set(..).group_id(..).build()?`) and a
/// configuration is either wholly valid or refused with the first problem found. Setters given
/// the same setting twice keep the last value.
#[derive(Debug, Clone, Default)]
pub struct ConsumerConfigBuilder {
    bootstrap_servers: Option<Vec<String>>,
    group_id: Option<String>,
    group_instance_id: Option<String>,
    client_id: Option<String>,
    session_timeout: Option<Duration>,
    heartbeat_interval: Option<Duration>,
    max_poll_interval: Option<Duration>,
    max_poll_records: Option<usize>,
    assignment_strategies: Option<Vec<AssignmentStrategy>>,
    group_protocol: Option<GroupProtocol>,
    auto_offset_reset: Option<AutoOffsetReset>,
    enable_auto_commit: Option<bool>,
    fetch_min_bytes: Option<i32>,
    fetch_max_bytes: Option<i32>,
    fetch_max_wait: Option<Duration>,
    max_partition_fetch_bytes: Option<i32>,
    isolation_level: Option<IsolationLevel>,
    request_timeout: Option<Duration>,
    connection_setup_timeout: Option<Duration>,
    retry_backoff: Option<Duration>,
    reconnect_backoff_max: Option<Duration>,
    storm_window: Option<Duration>,
    storm_threshold: Option<usize>,
    idempotency_cache_size: Option<usize>,
    batch_safety_factor: Option<f64>,
    revoke_drain_timeout: Option<Duration>,
    /// The first error met by `set`, reported by `build`.
    error: Option<ConfigError>,
}

impl ConsumerConfigBuilder {
    /// `bootstrap.servers`: `host:port` entries (IPv6 hosts in brackets, `[::1]:9092`).
    pub fn bootstrap_servers<I, S>(mut self, servers: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.bootstrap_servers = Some(servers.into_iter().map(Into::into).collect());
        self
    }
    /// `group.id`.
    pub fn group_id(mut self, group_id: impl Into<String>) -> Self {
        self.group_id = Some(group_id.into());
        self
    }
    /// `group.instance.id`: makes this a static member.
    pub fn group_instance_id(mut self, id: impl Into<String>) -> Self {
        self.group_instance_id = Some(id.into());
        self
    }
    /// `client.id`.
    pub fn client_id(mut self, id: impl Into<String>) -> Self {
        self.client_id = Some(id.into());
        self
    }
    /// `session.timeout.ms` (whole milliseconds; finer parts are dropped).
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = Some(timeout);
        self
    }
    /// `heartbeat.interval.ms`.
    pub fn heartbeat_interval(mut self, interval: Duration) -> Self {
        self.heartbeat_interval = Some(interval);
        self
    }
    /// `max.poll.interval.ms`.
    pub fn max_poll_interval(mut self, interval: Duration) -> Self {
        self.max_poll_interval = Some(interval);
        self
    }
    /// `max.poll.records`.
    pub fn max_poll_records(mut self, records: usize) -> Self {
        self.max_poll_records = Some(records);
        self
    }
    /// `partition.assignment.strategy`, in preference order.
    pub fn partition_assignment_strategy<I>(mut self, strategies: I) -> Self
    where
        I: IntoIterator<Item = AssignmentStrategy>,
    {
        self.assignment_strategies = Some(strategies.into_iter().collect());
        self
    }
    /// `group.protocol`.
    pub fn group_protocol(mut self, protocol: GroupProtocol) -> Self {
        self.group_protocol = Some(protocol);
        self
    }
    /// `auto.offset.reset`.
    pub fn auto_offset_reset(mut self, reset: AutoOffsetReset) -> Self {
        self.auto_offset_reset = Some(reset);
        self
    }
    /// `fetch.min.bytes`.
    pub fn fetch_min_bytes(mut self, bytes: i32) -> Self {
        self.fetch_min_bytes = Some(bytes);
        self
    }
    /// `fetch.max.bytes`.
    pub fn fetch_max_bytes(mut self, bytes: i32) -> Self {
        self.fetch_max_bytes = Some(bytes);
        self
    }
    /// `fetch.max.wait.ms`.
    pub fn fetch_max_wait(mut self, wait: Duration) -> Self {
        self.fetch_max_wait = Some(wait);
        self
    }
    /// `max.partition.fetch.bytes`.
    pub fn max_partition_fetch_bytes(mut self, bytes: i32) -> Self {
        self.max_partition_fetch_bytes = Some(bytes);
        self
    }
    /// `isolation.level`.
    pub fn isolation_level(mut self, level: IsolationLevel) -> Self {
        self.isolation_level = Some(level);
        self
    }
    /// `request.timeout.ms`.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = Some(timeout);
        self
    }
    /// `socket.connection.setup.timeout.ms`.
    pub fn connection_setup_timeout(mut self, timeout: Duration) -> Self {
        self.connection_setup_timeout = Some(timeout);
        self
    }
    /// `retry.backoff.ms`.
    pub fn retry_backoff(mut self, backoff: Duration) -> Self {
        self.retry_backoff = Some(backoff);
        self
    }
    /// `reconnect.backoff.max.ms`.
    pub fn reconnect_backoff_max(mut self, backoff: Duration) -> Self {
        self.reconnect_backoff_max = Some(backoff);
        self
    }
    /// `rebalance.storm.window.ms`.
    pub fn storm_window(mut self, window: Duration) -> Self {
        self.storm_window = Some(window);
        self
    }
    /// `rebalance.storm.threshold`; 0 disables storm detection.
    pub fn storm_threshold(mut self, rebalances: usize) -> Self {
        self.storm_threshold = Some(rebalances);
        self
    }
    /// `idempotency.cache.size`; 0 disables duplicate detection.
    pub fn idempotency_cache_size(mut self, keys: usize) -> Self {
        self.idempotency_cache_size = Some(keys);
        self
    }
    /// `batch.safety.factor`.
    pub fn batch_safety_factor(mut self, factor: f64) -> Self {
        self.batch_safety_factor = Some(factor);
        self
    }
    /// `revoke.drain.timeout.ms`.
    pub fn revoke_drain_timeout(mut self, timeout: Duration) -> Self {
        self.revoke_drain_timeout = Some(timeout);
        self
    }

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

    fn apply(&mut self, name: &str, value: &str) -> Result<(), ConfigError> {
        match name {
            "bootstrap.servers" => {
                self.bootstrap_servers = Some(
                    value
                        .split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(String::from)
                        .collect(),
                )
            }
            "group.id" => self.group_id = Some(value.to_string()),
            "group.instance.id" => self.group_instance_id = Some(value.to_string()),
            "client.id" => self.client_id = Some(value.to_string()),
            "session.timeout.ms" => {
                self.session_timeout = Some(parse_ms("session.timeout.ms", value)?)
            }
            "heartbeat.interval.ms" => {
                self.heartbeat_interval = Some(parse_ms("heartbeat.interval.ms", value)?)
            }
            "max.poll.interval.ms" => {
                self.max_poll_interval = Some(parse_ms("max.poll.interval.ms", value)?)
            }
            "max.poll.records" => {
                self.max_poll_records = Some(parse_count("max.poll.records", value)?)
            }
            "partition.assignment.strategy" => {
                let mut list = Vec::new();
                for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
                    list.push(AssignmentStrategy::from_name(entry).ok_or_else(|| {
                        ConfigError::InvalidValue {
                            name: "partition.assignment.strategy",
                            value: entry.to_string(),
                            expected:
                                "an assignor (allowed: range, roundrobin, cooperative-sticky, \
                                       or Java's class names for them)",
                        }
                    })?);
                }
                self.assignment_strategies = Some(list);
            }
            "group.protocol" => {
                self.group_protocol = Some(GroupProtocol::from_name(value).ok_or_else(|| {
                    ConfigError::InvalidValue {
                        name: "group.protocol",
                        value: value.to_string(),
                        expected: "a group protocol (allowed: classic, consumer)",
                    }
                })?)
            }
            "auto.offset.reset" => {
                self.auto_offset_reset =
                    Some(AutoOffsetReset::from_name(value).ok_or_else(|| {
                        ConfigError::InvalidValue {
                            name: "auto.offset.reset",
                            value: value.to_string(),
                            expected: "an offset reset policy (allowed: earliest, latest, none)",
                        }
                    })?)
            }
            "enable.auto.commit" => {
                self.enable_auto_commit = Some(parse_bool("enable.auto.commit", value)?)
            }
            "fetch.min.bytes" => self.fetch_min_bytes = Some(parse_i32("fetch.min.bytes", value)?),
            "fetch.max.bytes" => self.fetch_max_bytes = Some(parse_i32("fetch.max.bytes", value)?),
            "fetch.max.wait.ms" => {
                self.fetch_max_wait = Some(parse_ms("fetch.max.wait.ms", value)?)
            }
            "max.partition.fetch.bytes" => {
                self.max_partition_fetch_bytes =
                    Some(parse_i32("max.partition.fetch.bytes", value)?)
            }
            "isolation.level" => {
                self.isolation_level =
                    Some(
                        isolation_from_name(value).ok_or_else(|| ConfigError::InvalidValue {
                            name: "isolation.level",
                            value: value.to_string(),
                            expected:
                                "an isolation level (allowed: read_uncommitted, read_committed)",
                        })?,
                    )
            }
            "request.timeout.ms" => {
                self.request_timeout = Some(parse_ms("request.timeout.ms", value)?)
            }
            "socket.connection.setup.timeout.ms" => {
                self.connection_setup_timeout =
                    Some(parse_ms("socket.connection.setup.timeout.ms", value)?)
            }
            "retry.backoff.ms" => self.retry_backoff = Some(parse_ms("retry.backoff.ms", value)?),
            "reconnect.backoff.max.ms" => {
                self.reconnect_backoff_max = Some(parse_ms("reconnect.backoff.max.ms", value)?)
            }
            "rebalance.storm.window.ms" => {
                self.storm_window = Some(parse_ms("rebalance.storm.window.ms", value)?)
            }
            "rebalance.storm.threshold" => {
                self.storm_threshold = Some(parse_count("rebalance.storm.threshold", value)?)
            }
            "idempotency.cache.size" => {
                self.idempotency_cache_size = Some(parse_count("idempotency.cache.size", value)?)
            }
            "batch.safety.factor" => {
                self.batch_safety_factor =
                    Some(
                        value
                            .parse::<f64>()
                            .map_err(|_| ConfigError::InvalidValue {
                                name: "batch.safety.factor",
                                value: value.to_string(),
                                expected: "a decimal number such as 0.5",
                            })?,
                    )
            }
            "revoke.drain.timeout.ms" => {
                self.revoke_drain_timeout = Some(parse_ms("revoke.drain.timeout.ms", value)?)
            }
            other => return Err(unknown_setting(other)),
        }
        Ok(())
    }

    /// Validates every setting and the rules between them, and returns the configuration or the
    /// first problem found: errors from [`set`](Self::set) first, then each setting in
    /// [`SETTINGS`] order, then the rules that relate two settings.
    pub fn build(self) -> Result<ConsumerConfig, ConfigError> {
        if let Some(e) = self.error {
            return Err(e);
        }

        let bootstrap_servers = self
            .bootstrap_servers
            .ok_or(ConfigError::Missing {
                name: "bootstrap.servers",
            })?
            .into_iter()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>();
        if bootstrap_servers.is_empty() {
            return Err(ConfigError::InvalidValue {
                name: "bootstrap.servers",
                value: String::new(),
                expected: "a comma-separated list of at least one host:port",
            });
        }
        for server in &bootstrap_servers {
            check_host_port(server)?;
        }

        let group_id = self
            .group_id
            .ok_or(ConfigError::Missing { name: "group.id" })?;
        if group_id.trim().is_empty() {
            return Err(ConfigError::OutOfRange {
                name: "group.id",
                value: format!("{group_id:?}"),
                rule: "must not be empty",
            });
        }
        if let Some(id) = &self.group_instance_id {
            check_instance_id(id)?;
        }

        let group_protocol = self.group_protocol.unwrap_or_default();
        if group_protocol == GroupProtocol::Consumer {
            let explicit = [
                (
                    "partition.assignment.strategy",
                    self.assignment_strategies.is_some(),
                ),
                ("session.timeout.ms", self.session_timeout.is_some()),
                ("heartbeat.interval.ms", self.heartbeat_interval.is_some()),
            ];
            if let Some((name, _)) = explicit.into_iter().find(|(_, set)| *set) {
                return Err(ConfigError::ClassicOnly { name });
            }
        }

        let session_timeout = positive_ms(
            "session.timeout.ms",
            self.session_timeout,
            Duration::from_millis(45_000),
        )?;
        let heartbeat_interval = positive_ms(
            "heartbeat.interval.ms",
            self.heartbeat_interval,
            Duration::from_millis(3_000),
        )?;
        let max_poll_interval = positive_ms(
            "max.poll.interval.ms",
            self.max_poll_interval,
            Duration::from_millis(300_000),
        )?;
        let max_poll_records = self.max_poll_records.unwrap_or(500);
        if max_poll_records == 0 || max_poll_records > i32::MAX as usize {
            return Err(ConfigError::OutOfRange {
                name: "max.poll.records",
                value: max_poll_records.to_string(),
                rule: "must be between 1 and 2147483647",
            });
        }
        let assignment_strategies = check_strategies(
            self.assignment_strategies
                .unwrap_or_else(|| vec![AssignmentStrategy::CooperativeSticky]),
        )?;
        let auto_offset_reset = self.auto_offset_reset.unwrap_or_default();
        if self.enable_auto_commit == Some(true) {
            return Err(ConfigError::AutoCommitRefused);
        }
        let fetch_min_bytes = self.fetch_min_bytes.unwrap_or(1);
        if fetch_min_bytes < 0 {
            return Err(ConfigError::OutOfRange {
                name: "fetch.min.bytes",
                value: fetch_min_bytes.to_string(),
                rule: "must not be negative",
            });
        }
        let fetch_max_bytes = positive_bytes("fetch.max.bytes", self.fetch_max_bytes, 52_428_800)?;
        let fetch_max_wait = non_negative_ms(
            "fetch.max.wait.ms",
            self.fetch_max_wait,
            Duration::from_millis(500),
        )?;
        let max_partition_fetch_bytes = positive_bytes(
            "max.partition.fetch.bytes",
            self.max_partition_fetch_bytes,
            1_048_576,
        )?;
        let isolation_level = self.isolation_level.unwrap_or_default();
        let request_timeout = positive_ms(
            "request.timeout.ms",
            self.request_timeout,
            Duration::from_millis(30_000),
        )?;
        let connection_setup_timeout = positive_ms(
            "socket.connection.setup.timeout.ms",
            self.connection_setup_timeout,
            Duration::from_millis(10_000),
        )?;
        let retry_backoff = positive_ms(
            "retry.backoff.ms",
            self.retry_backoff,
            Duration::from_millis(100),
        )?;
        let reconnect_backoff_max = positive_ms(
            "reconnect.backoff.max.ms",
            self.reconnect_backoff_max,
            Duration::from_millis(1_000),
        )?;
        let storm_window = positive_ms(
            "rebalance.storm.window.ms",
            self.storm_window,
            Duration::from_millis(300_000),
        )?;
        let storm_threshold = self.storm_threshold.unwrap_or(5);
        let idempotency_cache_size = self.idempotency_cache_size.unwrap_or(100_000);
        let batch_safety_factor = self.batch_safety_factor.unwrap_or(0.5);
        if !(batch_safety_factor > 0.0 && batch_safety_factor < 1.0) {
            return Err(ConfigError::OutOfRange {
                name: "batch.safety.factor",
                value: batch_safety_factor.to_string(),
                rule: "must be greater than 0 and less than 1 (a fraction of max.poll.interval.ms)",
            });
        }
        let revoke_drain_timeout = match self.revoke_drain_timeout {
            Some(_) => positive_ms(
                "revoke.drain.timeout.ms",
                self.revoke_drain_timeout,
                DRAIN_TIMEOUT_CAP,
            )?,
            None => DRAIN_TIMEOUT_CAP.min(truncate_ms(max_poll_interval / 2)),
        };

        // Rules between settings.
        if group_protocol == GroupProtocol::Classic {
            if heartbeat_interval.as_millis() * 3 > session_timeout.as_millis() {
                return Err(ConfigError::Conflict {
                    name: "heartbeat.interval.ms",
                    other: "session.timeout.ms",
                    rule: format!(
                        "heartbeat.interval.ms ({}) must be at most a third of session.timeout.ms \
                         ({}), so that losing two heartbeats in a row does not evict the member",
                        heartbeat_interval.as_millis(),
                        session_timeout.as_millis()
                    ),
                });
            }
            if max_poll_interval < session_timeout {
                return Err(ConfigError::Conflict {
                    name: "max.poll.interval.ms",
                    other: "session.timeout.ms",
                    rule: format!(
                        "max.poll.interval.ms ({}) must not be below session.timeout.ms ({}): it \
                         is also the rebalance timeout, and a rebalance that gives members less \
                         time to rejoin than the session timeout evicts live members and starts \
                         another rebalance",
                        max_poll_interval.as_millis(),
                        session_timeout.as_millis()
                    ),
                });
            }
        }
        if revoke_drain_timeout >= max_poll_interval {
            return Err(ConfigError::Conflict {
                name: "revoke.drain.timeout.ms",
                other: "max.poll.interval.ms",
                rule: format!(
                    "revoke.drain.timeout.ms ({}) must be below max.poll.interval.ms ({}): a \
                     drain that outlasts the poll interval gets the member evicted while it \
                     still holds the work it is draining",
                    revoke_drain_timeout.as_millis(),
                    max_poll_interval.as_millis()
                ),
            });
        }
        if fetch_max_bytes < max_partition_fetch_bytes {
            warn!(
                "fetch.max.bytes ({fetch_max_bytes}) is below max.partition.fetch.bytes \
                 ({max_partition_fetch_bytes}): allowed, as in Java, but one partition can then \
                 fill a whole fetch"
            );
        }

        Ok(ConsumerConfig {
            bootstrap_servers,
            group_id,
            group_instance_id: self.group_instance_id,
            client_id: self
                .client_id
                .unwrap_or_else(|| "rebalance-guard".to_string()),
            session_timeout,
            heartbeat_interval,
            max_poll_interval,
            max_poll_records,
            assignment_strategies,
            group_protocol,
            auto_offset_reset,
            fetch_min_bytes,
            fetch_max_bytes,
            fetch_max_wait,
            max_partition_fetch_bytes,
            isolation_level,
            request_timeout,
            connection_setup_timeout,
            retry_backoff,
            reconnect_backoff_max,
            storm_window,
            storm_threshold,
            idempotency_cache_size,
            batch_safety_factor,
            revoke_drain_timeout,
        })
    }
}

// ----------------------------------------------------------------------------------------------
// Value parsing and checks

/// Kafka sends durations and sizes as int32, so no setting may exceed this.
const INT32_MAX: u128 = i32::MAX as u128;

fn parse_integer(
    name: &'static str,
    value: &str,
    expected: &'static str,
) -> Result<i64, ConfigError> {
    value.parse::<i64>().map_err(|_| ConfigError::InvalidValue {
        name,
        value: value.to_string(),
        expected,
    })
}

fn parse_ms(name: &'static str, value: &str) -> Result<Duration, ConfigError> {
    let ms = parse_integer(name, value, "a whole number of milliseconds")?;
    u64::try_from(ms)
        .map(Duration::from_millis)
        .map_err(|_| ConfigError::OutOfRange {
            name,
            value: value.to_string(),
            rule: "must not be negative",
        })
}

fn parse_i32(name: &'static str, value: &str) -> Result<i32, ConfigError> {
    let n = parse_integer(name, value, "a whole number of bytes")?;
    i32::try_from(n).map_err(|_| ConfigError::OutOfRange {
        name,
        value: value.to_string(),
        rule: "must be between -2147483648 and 2147483647",
    })
}

fn parse_count(name: &'static str, value: &str) -> Result<usize, ConfigError> {
    let n = parse_integer(name, value, "a whole number")?;
    usize::try_from(n).map_err(|_| ConfigError::OutOfRange {
        name,
        value: value.to_string(),
        rule: "must not be negative",
    })
}

fn parse_bool(name: &'static str, value: &str) -> Result<bool, ConfigError> {
    if value.eq_ignore_ascii_case("true") {
        Ok(true)
    } else if value.eq_ignore_ascii_case("false") {
        Ok(false)
    } else {
        Err(ConfigError::InvalidValue {
            name,
            value: value.to_string(),
            expected: "a boolean (allowed: true, false)",
        })
    }
}

fn truncate_ms(d: Duration) -> Duration {
    // as_millis of any Duration fits u64 for every value accepted below (checked against int32).
    Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn positive_ms(
    name: &'static str,
    value: Option<Duration>,
    default: Duration,
) -> Result<Duration, ConfigError> {
    let d = value.map_or(default, truncate_ms);
    if d.is_zero() {
        return Err(ConfigError::OutOfRange {
            name,
            value: "0".to_string(),
            rule: "must be greater than zero",
        });
    }
    within_int32(name, d)
}

fn non_negative_ms(
    name: &'static str,
    value: Option<Duration>,
    default: Duration,
) -> Result<Duration, ConfigError> {
    within_int32(name, value.map_or(default, truncate_ms))
}

fn within_int32(name: &'static str, d: Duration) -> Result<Duration, ConfigError> {
    if d.as_millis() > INT32_MAX {
        return Err(ConfigError::OutOfRange {
            name,
            value: d.as_millis().to_string(),
            rule: "must be at most 2147483647 ms (Kafka sends it as a 32-bit integer)",
        });
    }
    Ok(d)
}

fn positive_bytes(
    name: &'static str,
    value: Option<i32>,
    default: i32,
) -> Result<i32, ConfigError> {
    let n = value.unwrap_or(default);
    if n <= 0 {
        return Err(ConfigError::OutOfRange {
            name,
            value: n.to_string(),
            rule: "must be greater than zero",
        });
    }
    Ok(n)
}

/// Checks one `bootstrap.servers` entry: `host:port`, the host non-empty (IPv6 in brackets), the
/// port between 1 and 65535.
fn check_host_port(entry: &str) -> Result<(), ConfigError> {
    let invalid = || ConfigError::InvalidValue {
        name: "bootstrap.servers",
        value: entry.to_string(),
        expected: "host:port (IPv6 hosts in brackets, e.g. [::1]:9092)",
    };
    let (host, port) = entry.rsplit_once(':').ok_or_else(invalid)?;
    let host_ok = if let Some(inner) = host.strip_prefix('[') {
        inner.strip_suffix(']').is_some_and(|h| !h.is_empty())
    } else {
        !host.is_empty() && !host.contains(':') && !host.contains(char::is_whitespace)
    };
    let port_ok = port.parse::<u16>().is_ok_and(|p| p > 0);
    if host_ok && port_ok {
        Ok(())
    } else {
        Err(invalid())
    }
}

/// Kafka's rules for a `group.instance.id` (the broker applies the same ones): non-empty, not `.`
/// or `..`, at most 249 characters from `[a-zA-Z0-9._-]`.
fn check_instance_id(id: &str) -> Result<(), ConfigError> {
    let rule = if id.is_empty() {
        Some("must not be empty (leave it unset for a dynamic member)")
    } else if id == "." || id == ".." {
        Some("must not be `.` or `..`")
    } else if id.len() > 249 {
        Some("must be at most 249 characters")
    } else if !id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        Some("may contain only ASCII letters, digits, `.`, `_` and `-`")
    } else {
        None
    };
    match rule {
        Some(rule) => Err(ConfigError::OutOfRange {
            name: "group.instance.id",
            value: format!("{id:?}"),
            rule,
        }),
        None => Ok(()),
    }
}

fn check_strategies(list: Vec<AssignmentStrategy>) -> Result<Vec<AssignmentStrategy>, ConfigError> {
    let first = *list.first().ok_or(ConfigError::EmptyStrategies)?;
    for (i, s) in list.iter().enumerate() {
        if list[..i].contains(s) {
            return Err(ConfigError::DuplicateStrategy { strategy: *s });
        }
    }
    if let Some(other) = list.iter().find(|s| s.protocol() != first.protocol()) {
        let (eager, cooperative) = if first.protocol() == RebalanceProtocol::Eager {
            (first, *other)
        } else {
            (*other, first)
        };
        return Err(ConfigError::MixedStrategies { eager, cooperative });
    }
    Ok(list)
}

fn unknown_setting(name: &str) -> ConfigError {
    if let Some((_, reason)) = UNSUPPORTED.iter().find(|(n, _)| *n == name) {
        return ConfigError::UnsupportedSetting {
            name: name.to_string(),
            reason,
        };
    }
    if let Some((_, reason)) = UNSUPPORTED_PREFIXES
        .iter()
        .find(|(p, _)| name.starts_with(p))
    {
        return ConfigError::UnsupportedSetting {
            name: name.to_string(),
            reason,
        };
    }
    ConfigError::UnknownSetting {
        name: name.to_string(),
        suggestion: suggest(name),
    }
}

/// The known setting closest to `name`, if it is close enough to be a typo: within a third of the
/// name's length in edits (at least 2), after treating `_` and `-` as `.` and ignoring case, so
/// `group_id` and `Session.Timeout.MS` find their setting.
fn suggest(name: &str) -> Option<&'static str> {
    let normal = |s: &str| {
        s.chars()
            .map(|c| match c {
                '_' | '-' => '.',
                c => c.to_ascii_lowercase(),
            })
            .collect::<String>()
    };
    let wanted = normal(name);
    let limit = (wanted.chars().count() / 3).max(2);
    SETTINGS
        .iter()
        .map(|s| (edit_distance(&wanted, s.name), s.name))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, n)| n)
}

/// Levenshtein distance over chars, with one row of memory.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if ca == *cb {
                diagonal
            } else {
                1 + diagonal.min(above).min(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}

// ----------------------------------------------------------------------------------------------
// .properties syntax

/// A malformed line in `.properties` text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PropertiesSyntaxError {
    /// The 1-based line where the logical line starts.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for PropertiesSyntaxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "properties line {}: {}", self.line, self.message)
    }
}

impl Error for PropertiesSyntaxError {}

/// Parses Java `.properties` text into `(key, value)` pairs in file order.
///
/// Java's syntax, so an existing file can be reused: `key=value`, `key: value` or `key value`;
/// lines starting with `#` or `!` are comments; blank lines are skipped; a line ending in an odd
/// number of backslashes continues on the next line (whose leading whitespace is dropped);
/// escapes `\t`, `\n`, `\r`, `\f`, `\uXXXX`, and `\` before any other character (so `\=` and
/// `\:` in keys). One deliberate difference: values are also trimmed at the end, since no
/// setting has meaningful trailing whitespace and an invisible trailing space should not make a
/// number unparsable.
pub fn parse_properties(text: &str) -> Result<Vec<(String, String)>, PropertiesSyntaxError> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let start = i + 1;
        let first = lines[i].trim_start_matches(is_properties_space);
        i += 1;
        if first.is_empty() || first.starts_with('#') || first.starts_with('!') {
            continue;
        }
        // Join continuation lines.
        let mut logical = String::new();
        let mut current = first;
        loop {
            let trailing = current.chars().rev().take_while(|c| *c == '\\').count();
            if trailing % 2 == 1 {
                logical.push_str(&current[..current.len() - 1]);
                match lines.get(i) {
                    Some(next) => {
                        current = next.trim_start_matches(is_properties_space);
                        i += 1;
                    }
                    None => break,
                }
            } else {
                logical.push_str(current);
                break;
            }
        }
        let (key, value) = split_key_value(&logical);
        let key = unescape(key).map_err(|message| PropertiesSyntaxError {
            line: start,
            message,
        })?;
        let value = unescape(value).map_err(|message| PropertiesSyntaxError {
            line: start,
            message,
        })?;
        out.push((key, value.trim_end().to_string()));
    }
    Ok(out)
}

fn is_properties_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\u{c}')
}

/// Splits a logical line at the first unescaped `=`, `:` or whitespace; whitespace around the
/// separator is dropped.
fn split_key_value(line: &str) -> (&str, &str) {
    let mut escaped = false;
    for (idx, c) in line.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        if c == '\\' {
            escaped = true;
        } else if c == '=' || c == ':' || is_properties_space(c) {
            let key = &line[..idx];
            let mut rest = line[idx..].trim_start_matches(is_properties_space);
            if c == '=' || c == ':' {
                rest = &rest[1..];
            } else if let Some(r) = rest.strip_prefix(['=', ':']) {
                rest = r;
            }
            return (key, rest.trim_start_matches(is_properties_space));
        }
    }
    (line, "")
}

fn unescape(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\u{c}'),
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                let ch = (hex.len() == 4)
                    .then(|| u32::from_str_radix(&hex, 16).ok())
                    .flatten()
                    .and_then(char::from_u32)
                    .ok_or_else(|| format!("malformed \\u escape \\u{hex}"))?;
                out.push(ch);
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(
            c.assignment_strategies(),
            &[AssignmentStrategy::CooperativeSticky]
        );
        assert_eq!(c.rebalance_protocol(), RebalanceProtocol::Cooperative);
        assert_eq!(c.group_protocol(), GroupProtocol::Classic);
        assert_eq!(c.auto_offset_reset(), AutoOffsetReset::Latest);
        assert_eq!(c.isolation_level(), IsolationLevel::ReadUncommitted);
        assert_eq!(c.revoke_drain_timeout(), Duration::from_secs(10));
        assert_eq!(c.batch_safety_factor(), 0.5);
        assert_eq!(c.group_instance_id(), None);

        // Every literal default in SETTINGS, set explicitly, gives the same configuration.
        let explicit = SETTINGS
            .iter()
            .filter(|s| !s.default.starts_with('('))
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
            .map(|s| s.name)
            .filter(|n| *n != "group.instance.id")
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
            .partition_assignment_strategy([
                AssignmentStrategy::Range,
                AssignmentStrategy::RoundRobin,
            ])
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
            "security.protocol",
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
        // Equal is fine; and the slow-handler scenario fits with a short session.
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
            ConfigError::EmptyStrategies
        );
        assert_eq!(
            base()
                .partition_assignment_strategy([])
                .build()
                .unwrap_err(),
            ConfigError::EmptyStrategies
        );
        assert_eq!(
            props(&[("partition.assignment.strategy", "range,range")]).unwrap_err(),
            ConfigError::DuplicateStrategy {
                strategy: AssignmentStrategy::Range
            }
        );
        // Java's own default list mixes the two kinds: refused, with the reason.
        let err =
            props(&[("partition.assignment.strategy", "range,cooperative-sticky")]).unwrap_err();
        assert_eq!(
            err,
            ConfigError::MixedStrategies {
                eager: AssignmentStrategy::Range,
                cooperative: AssignmentStrategy::CooperativeSticky
            }
        );
        assert!(err.to_string().contains("one kind"), "{err}");
        let err = props(&[(
            "partition.assignment.strategy",
            "cooperative-sticky,roundrobin",
        )])
        .unwrap_err();
        assert_eq!(
            err,
            ConfigError::MixedStrategies {
                eager: AssignmentStrategy::RoundRobin,
                cooperative: AssignmentStrategy::CooperativeSticky
            }
        );
        for s in AssignmentStrategy::ALL {
            assert_eq!(AssignmentStrategy::from_name(s.name()), Some(s));
            assert!(crate::group::assignor_for(s.name()).is_some());
            assert_eq!(
                crate::group::assignor_for(s.name()).map(|a| a.protocol()),
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
        for name in CLASSIC_ONLY {
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
        assert_eq!(fetch.max_bytes, 100_000_000);
        assert_eq!(fetch.max_wait, Duration::from_millis(500));
        let guard = c.guard_config();
        assert_eq!(guard.storm_threshold, 5);
        assert!(guard.validate().is_ok());
    }

    #[test]
    fn properties_syntax_follows_java() {
        let text = "# a comment\n\
                    ! another\n\
                    \n\
                    \x20  bootstrap.servers = a:1,\\\n\
                    \x20      b:2\n\
                    group.id:orders  \n\
                    client.id   spaced\\u0041\n\
                    key\\=with\\:escapes = v\n\
                    empty\n\
                    trailing.backslash = x\\\\\n";
        let parsed = parse_properties(text).unwrap();
        assert_eq!(
            parsed,
            vec![
                ("bootstrap.servers".to_string(), "a:1,b:2".to_string()),
                ("group.id".to_string(), "orders".to_string()),
                ("client.id".to_string(), "spacedA".to_string()),
                ("key=with:escapes".to_string(), "v".to_string()),
                ("empty".to_string(), String::new()),
                ("trailing.backslash".to_string(), "x\\".to_string()),
            ]
        );
        let err = parse_properties("a=1\nb=\\u12x4\n").unwrap_err();
        assert_eq!(err.line, 2);
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

    /// The README's configuration table, generated from [`SETTINGS`].
    fn readme_table() -> String {
        let mut out = String::from("| Setting | Default | Meaning |\n| --- | --- | --- |\n");
        for s in SETTINGS {
            out.push_str(&format!(
                "| `{}` | `{}` | {} |\n",
                s.name, s.default, s.description
            ));
        }
        out
    }

    #[test]
    fn readme_documents_every_setting() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/README.md");
        let readme = fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"));
        let start = readme.find("\n## Configuration").unwrap_or_else(|| {
            panic!(
                "README.md has no \"## Configuration\" section; it must list every setting in \
                 rebalance_guard::consumer::config::SETTINGS as a table row \"| `name` | `default` \
                 | meaning |\"; the table to paste:\n{}",
                readme_table()
            )
        });
        let section = &readme[start + 1..];
        let section = match section[2..].find("\n## ") {
            Some(end) => &section[..end + 2],
            None => section,
        };
        let mut missing = Vec::new();
        for s in SETTINGS {
            let prefix = format!("| `{}` | `{}` |", s.name, s.default);
            if !section.lines().any(|l| l.starts_with(&prefix)) {
                missing.push(prefix);
            }
        }
        assert!(
            missing.is_empty(),
            "README.md's Configuration section lacks rows (or has stale defaults) for:\n{}\n\
             the whole table, to paste:\n{}",
            missing.join("\n"),
            readme_table()
        );
    }
}
