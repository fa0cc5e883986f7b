//! Rules between settings, checked after every setting passed its own rule.
//!
//! Each names the setting reported as wrong and the one it conflicts with, and states the rule
//! with both values, so the operator sees which of the two to change and why.

use std::time::Duration;

use log::warn;

use super::checks::truncate_ms;
use super::{ConfigError, ConsumerConfig, GroupProtocol};

/// Settings that only the classic protocol uses; with `group.protocol=consumer` the broker decides
/// them, so setting one explicitly is refused (as Java 4.x does) rather than ignored.
pub(super) const CLASSIC_ONLY: &[&str] = &[
    "partition.assignment.strategy",
    "session.timeout.ms",
    "heartbeat.interval.ms",
];

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
/// (`classic_only_set`: the first [`CLASSIC_ONLY`] setting given explicitly), heartbeat against
/// session, poll interval against session (both classic only), drain against poll interval.
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
    if config.fetch_max_bytes < config.max_partition_fetch_bytes {
        warn!(
            "fetch.max.bytes ({}) is below max.partition.fetch.bytes ({}): allowed, as in Java, \
             but one partition can then fill a whole fetch",
            config.fetch_max_bytes, config.max_partition_fetch_bytes
        );
    }
    Ok(())
}
