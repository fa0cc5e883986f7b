//! The types settings are held in, and how each is read from and written to `.properties` text.
//!
//! Why one trait for both directions: [`ConsumerConfig::to_properties`](super::ConsumerConfig)
//! must print what [`ConsumerConfig::from_properties`](super::ConsumerConfig) reads back as an
//! equal configuration, and the table's defaults are parsed by the same code as a user's values.
//! A parse failure names the setting and what was expected; range rules are not checked here but
//! by each row's rule ([`super::checks`]).

use std::fmt;
use std::time::Duration;

use super::ConfigError;
use crate::group::consumer_group::RemoteAssignor;
use crate::group::Strategy;
use crate::wire::IsolationLevel;

/// A setting's value type: read from the text a `.properties` file holds, written back the same
/// way.
pub(crate) trait SettingValue: Sized {
    /// Parses the (trimmed) text given for setting `name`.
    fn parse(name: &'static str, text: &str) -> Result<Self, ConfigError>;
    /// The value as a `.properties` file would write it.
    fn text(&self) -> String;
}

/// Which group membership protocol to speak (`group.protocol`).
///
/// Why a choice: the classic protocol works with every broker from Kafka 2.1 on; KIP-848's
/// `consumer` protocol (Kafka 4.0+) moves assignment to the broker and avoids group-wide
/// synchronisation barriers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupProtocol {
    /// JoinGroup/SyncGroup/Heartbeat; client-side assignors.
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AutoOffsetReset {
    /// The log start offset: process everything still retained.
    Earliest,
    /// The log end offset: only records produced from now on. Java's default.
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

/// In which order the decoupled mode may run one partition's records (`processing.order`).
///
/// Why a choice: one slow order for one account must not hold up every other account's orders
/// that happen to share its partition, but orders for the same account must not overtake each
/// other. Whatever the order, only the contiguous completed prefix is committed, and what
/// finished beyond it travels in the commit's completed-offsets map.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProcessingOrder {
    /// One record of a partition at a time, in offset order.
    Partition,
    /// Records with the same Kafka key in offset order; records of different keys of one
    /// partition in parallel (records without a key are ordered with each other).
    Key,
    /// Any record of a partition may run beside any other.
    Unordered,
}

impl ProcessingOrder {
    /// The value as written in configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            ProcessingOrder::Partition => "partition",
            ProcessingOrder::Key => "key",
            ProcessingOrder::Unordered => "unordered",
        }
    }

    /// Parses a configuration value, ignoring case.
    pub fn from_name(value: &str) -> Option<Self> {
        [
            ProcessingOrder::Partition,
            ProcessingOrder::Key,
            ProcessingOrder::Unordered,
        ]
        .into_iter()
        .find(|o| o.as_str().eq_ignore_ascii_case(value.trim()))
    }
}

impl fmt::Display for ProcessingOrder {
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

fn invalid(name: &'static str, text: &str, expected: &'static str) -> ConfigError {
    ConfigError::InvalidValue {
        name,
        value: text.to_string(),
        expected,
    }
}

fn parse_integer(
    name: &'static str,
    text: &str,
    expected: &'static str,
) -> Result<i64, ConfigError> {
    text.parse::<i64>()
        .map_err(|_| invalid(name, text, expected))
}

fn negative(name: &'static str, text: &str) -> ConfigError {
    ConfigError::OutOfRange {
        name,
        value: text.to_string(),
        rule: "must not be negative",
    }
}

/// Durations are whole milliseconds, as in every Kafka client.
impl SettingValue for Duration {
    fn parse(name: &'static str, text: &str) -> Result<Self, ConfigError> {
        let ms = parse_integer(name, text, "a whole number of milliseconds")?;
        u64::try_from(ms)
            .map(Duration::from_millis)
            .map_err(|_| negative(name, text))
    }
    fn text(&self) -> String {
        self.as_millis().to_string()
    }
}

/// Every `i32` setting is a byte size (Kafka sends them as int32).
impl SettingValue for i32 {
    fn parse(name: &'static str, text: &str) -> Result<Self, ConfigError> {
        let n = parse_integer(name, text, "a whole number of bytes")?;
        i32::try_from(n).map_err(|_| ConfigError::OutOfRange {
            name,
            value: text.to_string(),
            rule: "must be between -2147483648 and 2147483647",
        })
    }
    fn text(&self) -> String {
        self.to_string()
    }
}

/// Counts: records, rebalances, cache entries.
impl SettingValue for usize {
    fn parse(name: &'static str, text: &str) -> Result<Self, ConfigError> {
        let n = parse_integer(name, text, "a whole number")?;
        usize::try_from(n).map_err(|_| negative(name, text))
    }
    fn text(&self) -> String {
        self.to_string()
    }
}

/// Fractions (`batch.safety.factor` is the only one).
impl SettingValue for f64 {
    fn parse(name: &'static str, text: &str) -> Result<Self, ConfigError> {
        text.parse::<f64>()
            .map_err(|_| invalid(name, text, "a decimal number such as 0.5"))
    }
    fn text(&self) -> String {
        self.to_string()
    }
}

/// `true` or `false`, ignoring case as Java does.
impl SettingValue for bool {
    fn parse(name: &'static str, text: &str) -> Result<Self, ConfigError> {
        if text.eq_ignore_ascii_case("true") {
            Ok(true)
        } else if text.eq_ignore_ascii_case("false") {
            Ok(false)
        } else {
            Err(invalid(name, text, "a boolean (allowed: true, false)"))
        }
    }
    fn text(&self) -> String {
        self.to_string()
    }
}

impl SettingValue for String {
    fn parse(_name: &'static str, text: &str) -> Result<Self, ConfigError> {
        Ok(text.to_string())
    }
    fn text(&self) -> String {
        self.clone()
    }
}

/// Entries of a comma-separated list, each trimmed; empty entries are skipped.
fn list_entries(text: &str) -> impl Iterator<Item = &str> {
    text.split(',').map(str::trim).filter(|e| !e.is_empty())
}

/// A comma-separated list of text (`bootstrap.servers`).
impl SettingValue for Vec<String> {
    fn parse(_name: &'static str, text: &str) -> Result<Self, ConfigError> {
        Ok(list_entries(text).map(String::from).collect())
    }
    fn text(&self) -> String {
        self.join(",")
    }
}

/// A comma-separated assignor list in preference order, each entry read by
/// [`Strategy::from_name`]; the list rules are the row's rule, not checked here.
impl SettingValue for Vec<Strategy> {
    fn parse(name: &'static str, text: &str) -> Result<Self, ConfigError> {
        list_entries(text)
            .map(|entry| {
                Strategy::from_name(entry).ok_or_else(|| {
                    invalid(
                        name,
                        entry,
                        "an assignor (allowed: range, roundrobin, cooperative-sticky, or Java's \
                         class names for them)",
                    )
                })
            })
            .collect()
    }
    fn text(&self) -> String {
        self.iter().map(|s| s.name()).collect::<Vec<_>>().join(",")
    }
}

impl SettingValue for GroupProtocol {
    fn parse(name: &'static str, text: &str) -> Result<Self, ConfigError> {
        GroupProtocol::from_name(text)
            .ok_or_else(|| invalid(name, text, "a group protocol (allowed: classic, consumer)"))
    }
    fn text(&self) -> String {
        self.as_str().to_string()
    }
}

impl SettingValue for RemoteAssignor {
    fn parse(name: &'static str, text: &str) -> Result<Self, ConfigError> {
        RemoteAssignor::from_name(text).ok_or_else(|| {
            invalid(
                name,
                text,
                "a broker-side assignor (allowed: uniform, range)",
            )
        })
    }
    fn text(&self) -> String {
        self.as_str().to_string()
    }
}

impl SettingValue for AutoOffsetReset {
    fn parse(name: &'static str, text: &str) -> Result<Self, ConfigError> {
        AutoOffsetReset::from_name(text).ok_or_else(|| {
            invalid(
                name,
                text,
                "an offset reset policy (allowed: earliest, latest, none)",
            )
        })
    }
    fn text(&self) -> String {
        self.as_str().to_string()
    }
}

impl SettingValue for ProcessingOrder {
    fn parse(name: &'static str, text: &str) -> Result<Self, ConfigError> {
        ProcessingOrder::from_name(text).ok_or_else(|| {
            invalid(
                name,
                text,
                "a processing order (allowed: partition, key, unordered)",
            )
        })
    }
    fn text(&self) -> String {
        self.as_str().to_string()
    }
}

/// Ignoring case, like the other named values.
impl SettingValue for IsolationLevel {
    fn parse(name: &'static str, text: &str) -> Result<Self, ConfigError> {
        [
            IsolationLevel::ReadUncommitted,
            IsolationLevel::ReadCommitted,
        ]
        .into_iter()
        .find(|l| isolation_name(*l).eq_ignore_ascii_case(text.trim()))
        .ok_or_else(|| {
            invalid(
                name,
                text,
                "an isolation level (allowed: read_uncommitted, read_committed)",
            )
        })
    }
    fn text(&self) -> String {
        isolation_name(*self).to_string()
    }
}

/// `share.acquire.mode` (KIP-1206): how the broker bounds the records one ShareFetch acquires.
///
/// Our default differs from Kafka's (`batch_optimized`): a record acquired and not started is a
/// lock running out, and a lock that runs out spends one of the record's deliveries
/// (`share.delivery.count.limit`, after which the broker archives it). A slow worker handed
/// whole producer batches can burn a record's deliveries without ever starting it. What that
/// costs: a `RecordLimit` acquisition ends inside a log batch, and Kafka 4.4 then keeps and
/// acknowledges that acquisition one offset at a time, at about twice the broker CPU per record
/// (`scripts/bench --share` compares both).
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

impl SettingValue for AcquireMode {
    fn parse(name: &'static str, text: &str) -> Result<Self, ConfigError> {
        match text.to_ascii_lowercase().as_str() {
            "batch_optimized" => Ok(AcquireMode::BatchOptimized),
            "record_limit" => Ok(AcquireMode::RecordLimit),
            _ => Err(invalid(
                name,
                text,
                "one of `batch_optimized`, `record_limit`",
            )),
        }
    }
    fn text(&self) -> String {
        match self {
            AcquireMode::BatchOptimized => "batch_optimized",
            AcquireMode::RecordLimit => "record_limit",
        }
        .to_string()
    }
}

/// `share.acknowledgement.mode`: Kafka's setting, of which only `explicit` is accepted.
///
/// Why only one value: every record is acknowledged by what its handler did and whether its
/// lock may have expired; `implicit` (accept everything the previous poll returned) would
/// accept records whose lock ran out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AcknowledgementMode {
    /// Each record by its outcome.
    #[default]
    Explicit,
}

impl SettingValue for AcknowledgementMode {
    fn parse(name: &'static str, text: &str) -> Result<Self, ConfigError> {
        if text.eq_ignore_ascii_case("explicit") {
            Ok(AcknowledgementMode::Explicit)
        } else {
            Err(invalid(
                name,
                text,
                "`explicit` (each record is acknowledged by its outcome; `implicit` would accept \
                 records whose lock ran out)",
            ))
        }
    }
    fn text(&self) -> String {
        "explicit".to_string()
    }
}

/// `acks`: which replicas must have a record before its leader answers the Produce request.
///
/// Why a type and not a number: the three values mean three durability promises, and
/// idempotence is only sound with [`Acks::All`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Acks {
    /// No answer at all (`0`): the producer learns of no failure and no offset.
    None,
    /// The leader's own log (`1`): lost if the leader dies before a follower copied it.
    Leader,
    /// Every in-sync replica (`all`, `-1`), at least `min.insync.replicas` of them.
    #[default]
    All,
}

impl Acks {
    /// The number a Produce request carries.
    pub fn wire_value(self) -> i16 {
        match self {
            Acks::None => 0,
            Acks::Leader => 1,
            Acks::All => -1,
        }
    }
}

impl SettingValue for Acks {
    fn parse(name: &'static str, text: &str) -> Result<Self, ConfigError> {
        match text.to_ascii_lowercase().as_str() {
            "all" | "-1" => Ok(Acks::All),
            "1" => Ok(Acks::Leader),
            "0" => Ok(Acks::None),
            _ => Err(invalid(name, text, "one of `all` (or `-1`), `1`, `0`")),
        }
    }
    fn text(&self) -> String {
        match self {
            Acks::None => "0",
            Acks::Leader => "1",
            Acks::All => "all",
        }
        .to_string()
    }
}

/// `compression.type`: the codec a producer compresses each batch with.
///
/// Why only these: they are the codecs Kafka's record format knows, and each has a pure-Rust
/// encoder behind the cargo feature of the same name, so compressing needs no C.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CompressionType {
    /// Batches go as they are.
    #[default]
    None,
    /// DEFLATE in a gzip stream (`flate2`'s Rust backend; feature `gzip`).
    Gzip,
    /// A raw snappy block, as librdkafka writes it (`snap`; feature `snappy`).
    Snappy,
    /// An LZ4 frame (`lz4_flex`; feature `lz4`).
    Lz4,
    /// A zstd frame (`ruzstd`; feature `zstd`).
    Zstd,
}

impl CompressionType {
    /// The value as written in configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            CompressionType::None => "none",
            CompressionType::Gzip => "gzip",
            CompressionType::Snappy => "snappy",
            CompressionType::Lz4 => "lz4",
            CompressionType::Zstd => "zstd",
        }
    }

    /// Whether this build has the codec's cargo feature.
    pub fn is_built(self) -> bool {
        match self {
            CompressionType::None => true,
            CompressionType::Gzip => cfg!(feature = "gzip"),
            CompressionType::Snappy => cfg!(feature = "snappy"),
            CompressionType::Lz4 => cfg!(feature = "lz4"),
            CompressionType::Zstd => cfg!(feature = "zstd"),
        }
    }
}

impl SettingValue for CompressionType {
    fn parse(name: &'static str, text: &str) -> Result<Self, ConfigError> {
        [
            CompressionType::None,
            CompressionType::Gzip,
            CompressionType::Snappy,
            CompressionType::Lz4,
            CompressionType::Zstd,
        ]
        .into_iter()
        .find(|c| c.as_str().eq_ignore_ascii_case(text.trim()))
        .ok_or_else(|| {
            invalid(
                name,
                text,
                "a codec (allowed: none, gzip, snappy, lz4, zstd)",
            )
        })
    }
    fn text(&self) -> String {
        self.as_str().to_string()
    }
}

/// `compression.type`: the codec's cargo feature must be in this build (a producer that
/// silently sent uncompressed would break the operator's disk and network budget).
pub(super) fn codec_built(
    name: &'static str,
    codec: CompressionType,
) -> Result<CompressionType, ConfigError> {
    if !codec.is_built() {
        return Err(ConfigError::UnsupportedSetting {
            name: name.to_string(),
            reason: "this build lacks the codec's cargo feature (gzip, snappy, lz4, zstd)",
        });
    }
    Ok(codec)
}
