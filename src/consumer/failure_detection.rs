//! The check at subscribe: does this member's lease survive the cluster's failure detection?
//!
//! When a broker dies or hangs, the controller fences it only after `broker.session.timeout.ms`
//! (9 s by default); until then the coordinator's `__consumer_offsets` writes wait and its
//! heartbeat answers can be held as long. A lease bound (classic `session.timeout.ms`, or
//! `session.bound.ms` under `group.protocol=consumer`) that is not comfortably above that expires
//! on every broker failure: every member fences all its partitions and the whole group
//! rebalances, for a broker that may not even be the coordinator. Measured on three Kafka 4.4
//! brokers: processing stopped 11.5-12.1 s at each fault with the default 9 s, hence the margin.
//!
//! The check is advisory and costs one DescribeConfigs request at most; a broker that refuses it
//! (an authorizer) or fails it leaves the consumer running without it.

use std::time::Duration;

use crate::group::consumer_group::liveness;
use crate::wire::ErrorChain;
use crate::wire::{BrokerFailureDetection, Client, BROKER_SESSION_TIMEOUT_MS};

use super::config::{ConsumerConfig, GroupProtocol};

/// How far above `broker.session.timeout.ms` a lease bound must be to outlive a broker failure:
/// the fencing itself, then the leader elections and the coordinator's first answered write
/// (3 s over the measured 9 s fencing covered the 11.5-12.1 s stalls seen).
pub(crate) const MARGIN: Duration = Duration::from_secs(3);

/// The lease bound this consumer uses, with the setting that decides it and a note on where the
/// value came from: `session.timeout.ms` (classic), or under `group.protocol=consumer` the
/// user's `session.bound.ms`, else the bound derived from the broker's heartbeat interval
/// (`None` if the broker did not report it).
fn lease_bound(
    config: &ConsumerConfig,
    seen: &BrokerFailureDetection,
) -> Option<(&'static str, Duration, &'static str)> {
    match config.group_protocol() {
        GroupProtocol::Classic => Some(("session.timeout.ms", config.session_timeout(), "")),
        GroupProtocol::Consumer => match config.session_bound() {
            Some(user) => Some((
                "session.bound.ms",
                liveness::session_bound(Some(user), Duration::ZERO),
                "",
            )),
            None => seen.group_consumer_heartbeat_interval.map(|interval| {
                (
                    "session.bound.ms",
                    liveness::session_bound(None, interval),
                    " (unset: three of the broker's group.consumer.heartbeat.interval.ms)",
                )
            }),
        },
    }
}

/// The warning for a lease bound that a broker failure outlasts, or `None` when the bound is at
/// least [`MARGIN`] above `broker.session.timeout.ms` (or either value is unknown).
pub(crate) fn warning(config: &ConsumerConfig, seen: &BrokerFailureDetection) -> Option<String> {
    let broker = seen.broker_session_timeout?;
    let (name, bound, note) = lease_bound(config, seen)?;
    let needed = broker.saturating_add(MARGIN);
    (bound < needed).then(|| {
        format!(
            "{name}={}{note} is not above the cluster's {BROKER_SESSION_TIMEOUT_MS}={} \
             (broker {}) with a margin: a broker that dies or hangs holds the coordinator's \
             answers until it is fenced, so every member's lease expires and the whole group \
             rebalances at each broker failure; set {name} to {} or more",
            bound.as_millis(),
            broker.as_millis(),
            seen.node_id,
            needed.as_millis(),
        )
    })
}

/// Reads the cluster's failure detection through `client` (one request) and logs the warning
/// if the lease bound does not outlast it; returns what was read, `None` when the broker refused
/// or failed (logged at info: the consumer goes on without the check).
pub(crate) fn check(
    config: &ConsumerConfig,
    client: &mut Client,
) -> Option<BrokerFailureDetection> {
    let seen = match client.broker_failure_detection() {
        Ok(seen) => seen,
        Err(e) if e.is_authorization_refused() => {
            let e = ErrorChain(&e);
            log::info!(
                "cannot check {BROKER_SESSION_TIMEOUT_MS} against the lease bound: {e} \
                 (grant DESCRIBE_CONFIGS on the cluster to enable the check)"
            );
            return None;
        }
        Err(e) => {
            let e = ErrorChain(&e);
            log::info!("cannot check {BROKER_SESSION_TIMEOUT_MS} against the lease bound: {e}");
            return None;
        }
    };
    match warning(config, &seen) {
        Some(text) => log::warn!("{text}"),
        None => log::debug!("lease bound outlasts the cluster's failure detection: {seen:?}"),
    }
    Some(seen)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(broker_ms: Option<u64>, heartbeat_ms: Option<u64>) -> BrokerFailureDetection {
        BrokerFailureDetection {
            node_id: 1,
            broker_session_timeout: broker_ms.map(Duration::from_millis),
            group_consumer_session_timeout: Some(Duration::from_millis(45_000)),
            group_consumer_heartbeat_interval: heartbeat_ms.map(Duration::from_millis),
        }
    }

    fn config(props: &[(&str, &str)]) -> ConsumerConfig {
        let mut all = vec![("bootstrap.servers", "127.0.0.1:9092"), ("group.id", "g")];
        if !props.contains(&("group.protocol", "consumer")) {
            all.push(("heartbeat.interval.ms", "1000"));
        }
        all.extend_from_slice(props);
        ConsumerConfig::from_properties(all).expect("valid configuration")
    }

    #[test]
    fn a_classic_session_below_the_fencing_time_plus_margin_warns_with_both_values() {
        let six = config(&[("session.timeout.ms", "6000")]);
        let text = warning(&six, &seen(Some(9000), None)).unwrap_or_default();
        assert!(text.contains("session.timeout.ms=6000"), "{text}");
        assert!(text.contains("broker.session.timeout.ms=9000"), "{text}");
        assert!(text.contains("whole group rebalances"), "{text}");
        assert!(text.contains("12000 or more"), "{text}");
        // Equal to the fencing time is not enough; 12 s is.
        let nine = config(&[("session.timeout.ms", "9000")]);
        assert!(warning(&nine, &seen(Some(9000), None)).is_some());
        let twelve = config(&[("session.timeout.ms", "12000")]);
        assert_eq!(warning(&twelve, &seen(Some(9000), None)), None);
        // Unknown fencing time: nothing to compare with.
        assert_eq!(warning(&six, &seen(None, None)), None);
    }

    #[test]
    fn a_kip848_member_is_checked_on_its_lease_bound() {
        let user = config(&[("group.protocol", "consumer"), ("session.bound.ms", "6000")]);
        let text = warning(&user, &seen(Some(9000), Some(5000))).unwrap_or_default();
        assert!(text.contains("session.bound.ms=6000"), "{text}");
        // Unset: three broker heartbeat intervals (5 s -> 15 s) outlast 9 s; 500 ms ones do not.
        let derived = config(&[("group.protocol", "consumer")]);
        assert_eq!(warning(&derived, &seen(Some(9000), Some(5000))), None);
        let text = warning(&derived, &seen(Some(9000), Some(500))).unwrap_or_default();
        assert!(text.contains("session.bound.ms=1500 (unset"), "{text}");
        assert_eq!(warning(&derived, &seen(Some(9000), None)), None);
    }
}
