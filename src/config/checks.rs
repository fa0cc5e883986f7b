//! Each setting's own rule: the `rule` column of the settings table.
//!
//! A rule sees one value (typed, parsed, or the default) and either returns it, possibly
//! normalised (durations truncated to whole milliseconds, list entries trimmed), or refuses it
//! with a [`ConfigError`] that names the setting and states the rule. Rules that relate two
//! settings are in `cross.rs`, which uses this module (not the other way round).

use std::time::Duration;

use super::ConfigError;
use crate::group::{check_strategies, Strategy};
use crate::wire::Secret;

/// Kafka sends durations and sizes as int32, so no setting may exceed this.
const INT32_MAX: u128 = i32::MAX as u128;

/// No rule beyond the value's type.
pub(super) fn any<T>(_name: &'static str, value: T) -> Result<T, ConfigError> {
    Ok(value)
}

/// Whole milliseconds: what Kafka can carry. `as_millis` of any accepted value fits u64 (it is
/// checked against int32 right after).
pub(super) fn truncate_ms(d: Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A duration Kafka can send: at most int32 milliseconds; zero allowed (a threshold, not a
/// timeout).
pub(super) fn int32_ms(name: &'static str, d: Duration) -> Result<Duration, ConfigError> {
    let d = truncate_ms(d);
    if d.as_millis() > INT32_MAX {
        return Err(ConfigError::OutOfRange {
            name,
            value: d.as_millis().to_string(),
            rule: "must be at most 2147483647 ms (Kafka sends it as a 32-bit integer)",
        });
    }
    Ok(d)
}

/// A timeout or interval: greater than zero (a zero timeout is a hot loop or an instant
/// eviction) and within int32 milliseconds.
pub(super) fn positive_ms(name: &'static str, d: Duration) -> Result<Duration, ConfigError> {
    let d = truncate_ms(d);
    if d.is_zero() {
        return Err(ConfigError::OutOfRange {
            name,
            value: "0".to_string(),
            rule: "must be greater than zero",
        });
    }
    int32_ms(name, d)
}

/// The consumer protocol's session bound: positive, and never longer than the broker's default
/// session timeout, so that a default broker cannot have expired a member whose leases read
/// current.
pub(super) fn session_bound(name: &'static str, d: Duration) -> Result<Duration, ConfigError> {
    let d = positive_ms(name, d)?;
    if d > crate::group::consumer_group::BROKER_DEFAULT_SESSION_TIMEOUT {
        return Err(ConfigError::OutOfRange {
            name,
            value: d.as_millis().to_string(),
            rule:
                "must be at most 45000 ms, the broker's default group.consumer.session.timeout.ms: \
                   past the broker's session timeout a lease could read current for a member \
                   the broker already expired",
        });
    }
    Ok(d)
}

/// A byte threshold where zero means "do not wait": not negative.
pub(super) fn non_negative_bytes(name: &'static str, n: i32) -> Result<i32, ConfigError> {
    if n < 0 {
        return Err(ConfigError::OutOfRange {
            name,
            value: n.to_string(),
            rule: "must not be negative",
        });
    }
    Ok(n)
}

/// A byte limit: greater than zero.
pub(super) fn positive_bytes(name: &'static str, n: i32) -> Result<i32, ConfigError> {
    if n <= 0 {
        return Err(ConfigError::OutOfRange {
            name,
            value: n.to_string(),
            rule: "must be greater than zero",
        });
    }
    Ok(n)
}

/// A batch bound: at least one record, and at most what Kafka's int32 fields can count.
pub(super) fn record_count(name: &'static str, n: usize) -> Result<usize, ConfigError> {
    if n == 0 || n > i32::MAX as usize {
        return Err(ConfigError::OutOfRange {
            name,
            value: n.to_string(),
            rule: "must be between 1 and 2147483647",
        });
    }
    Ok(n)
}

/// `commit.metadata.max.bytes`: 0 (no completed-offsets map), or room for a useful map. Kafka's
/// own `offset.metadata.max.bytes` default is 4096.
pub(super) fn metadata_bytes(name: &'static str, n: usize) -> Result<usize, ConfigError> {
    if n != 0 && !(64..=1 << 20).contains(&n) {
        return Err(ConfigError::OutOfRange {
            name,
            value: n.to_string(),
            rule: "must be 0 (no map) or between 64 and 1048576",
        });
    }
    Ok(n)
}

/// A bound on records in flight: at least one, and small enough to count.
pub(super) fn in_flight(name: &'static str, n: usize) -> Result<usize, ConfigError> {
    if n == 0 || n > 1 << 16 {
        return Err(ConfigError::OutOfRange {
            name,
            value: n.to_string(),
            rule: "must be between 1 and 65536",
        });
    }
    Ok(n)
}

/// `processing.retries`: at most 1000, so that a typo cannot hold a poison record for days.
pub(super) fn retries(name: &'static str, n: usize) -> Result<usize, ConfigError> {
    if n > 1000 {
        return Err(ConfigError::OutOfRange {
            name,
            value: n.to_string(),
            rule: "must be between 0 and 1000",
        });
    }
    Ok(n)
}

/// A fraction strictly between 0 and 1 (so NaN and infinities are refused too).
pub(super) fn fraction(name: &'static str, f: f64) -> Result<f64, ConfigError> {
    if !(f > 0.0 && f < 1.0) {
        return Err(ConfigError::OutOfRange {
            name,
            value: f.to_string(),
            rule: "must be greater than 0 and less than 1 (a fraction of max.poll.interval.ms)",
        });
    }
    Ok(f)
}

/// `enable.auto.commit`: only `false` (see [`ConfigError::AutoCommitRefused`]).
pub(super) fn auto_commit_off(_name: &'static str, on: bool) -> Result<bool, ConfigError> {
    if on {
        return Err(ConfigError::AutoCommitRefused);
    }
    Ok(on)
}

/// The assignor list rules, checked once by the group layer's [`check_strategies`].
pub(super) fn strategies(
    _name: &'static str,
    list: Vec<Strategy>,
) -> Result<Vec<Strategy>, ConfigError> {
    check_strategies(&list).map_err(ConfigError::Strategies)?;
    Ok(list)
}

/// Not empty after trimming (`group.id`); the value is kept as given.
pub(super) fn not_blank(name: &'static str, value: String) -> Result<String, ConfigError> {
    if value.trim().is_empty() {
        return Err(ConfigError::OutOfRange {
            name,
            value: format!("{value:?}"),
            rule: "must not be empty",
        });
    }
    Ok(value)
}

/// A password: not empty (an empty SASL password is always a missing one). The error names the
/// setting only, never the value.
pub(super) fn secret_not_empty(name: &'static str, secret: Secret) -> Result<Secret, ConfigError> {
    if secret.is_empty() {
        return Err(ConfigError::InvalidSecret {
            name,
            problem: "must not be empty".to_string(),
        });
    }
    Ok(secret)
}

/// `bootstrap.servers`: entries trimmed, empty ones dropped, at least one left, each
/// `host:port`.
pub(super) fn host_ports(
    name: &'static str,
    servers: Vec<String>,
) -> Result<Vec<String>, ConfigError> {
    let servers: Vec<String> = servers
        .into_iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    if servers.is_empty() {
        return Err(ConfigError::InvalidValue {
            name,
            value: String::new(),
            expected: "a comma-separated list of at least one host:port",
        });
    }
    for server in &servers {
        check_host_port(name, server)?;
    }
    Ok(servers)
}

/// One `bootstrap.servers` entry: `host:port`, the host non-empty (IPv6 in brackets), the port
/// between 1 and 65535.
fn check_host_port(name: &'static str, entry: &str) -> Result<(), ConfigError> {
    let invalid = || ConfigError::InvalidValue {
        name,
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
pub(super) fn instance_id(name: &'static str, id: String) -> Result<String, ConfigError> {
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
            name,
            value: format!("{id:?}"),
            rule,
        }),
        None => Ok(id),
    }
}

/// `client.rack`: compared byte for byte with the brokers' `broker.rack`, so it must be a name
/// the brokers could have: not empty (unset means no rack), no surrounding spaces or control
/// characters (a value with them matches no broker and shows garbled in logs), and short enough
/// for a Kafka string.
pub(super) fn rack(name: &'static str, rack: String) -> Result<String, ConfigError> {
    let rule = if rack.is_empty() {
        Some("must not be empty (leave it unset when the consumer has no rack)")
    } else if rack.trim() != rack {
        Some("must not start or end with whitespace (it is compared exactly with `broker.rack`)")
    } else if rack.chars().any(char::is_control) {
        Some("must not contain control characters")
    } else if rack.len() > 255 {
        Some("must be at most 255 bytes")
    } else {
        None
    };
    match rule {
        Some(rule) => Err(ConfigError::OutOfRange {
            name,
            value: format!("{rack:?}"),
            rule,
        }),
        None => Ok(rack),
    }
}

/// A producer's byte size (`batch.size`, `buffer.memory`, `max.request.size`): at least one
/// byte, at most what a Produce request's int32 length can carry.
pub(super) fn batch_bytes(name: &'static str, n: usize) -> Result<usize, ConfigError> {
    if n == 0 || n > i32::MAX as usize {
        return Err(ConfigError::OutOfRange {
            name,
            value: n.to_string(),
            rule: "must be between 1 and 2147483647",
        });
    }
    Ok(n)
}

/// `compression.gzip.level`: Java's range (KIP-390), 1 to 9, or -1 for the default.
pub(super) fn gzip_level(name: &'static str, level: i32) -> Result<i32, ConfigError> {
    if level != -1 && !(1..=9).contains(&level) {
        return Err(ConfigError::OutOfRange {
            name,
            value: level.to_string(),
            rule: "must be -1 (the default) or between 1 and 9",
        });
    }
    Ok(level)
}

/// `compression.zstd.level`: what the pure-Rust encoder implements, 0 (stored) to 3.
pub(super) fn zstd_level(name: &'static str, level: i32) -> Result<i32, ConfigError> {
    if !(0..=3).contains(&level) {
        return Err(ConfigError::OutOfRange {
            name,
            value: level.to_string(),
            rule: "must be between 0 and 3 (the pure-Rust zstd encoder has no higher levels)",
        });
    }
    Ok(level)
}
