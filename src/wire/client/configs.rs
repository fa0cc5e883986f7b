//! Broker configuration read back with DescribeConfigs: how fast the cluster notices a dead
//! broker.
//!
//! Why the client asks: when a broker dies or hangs, the controller fences it only after
//! `broker.session.timeout.ms` (9 s by default). Until then the broker stays in the ISR of the
//! partitions it replicated, so the group coordinator's `__consumer_offsets` writes wait, and so
//! can its heartbeat answers. A member whose own session (or lease bound) is shorter than that
//! loses its lease on every broker crash, and the whole group rebalances. The consumer reads the
//! value once at start to warn about such a setting (`consumer/poll_loop.rs`).
//!
//! Group configuration (KIP-848's and KIP-932's per-group settings, Kafka 4.0+): written with
//! IncrementalAlterConfigs and read back with DescribeConfigs on the GROUP resource. A share
//! group takes its `share.auto.offset.reset` (latest unless set!), record lock duration,
//! session timeout, heartbeat interval and delivery count limit from there, and a consumer
//! group its session timeout and heartbeat interval; the broker's `group.share.*` /
//! `group.consumer.*` settings are the defaults and bounds.
//!
//! One attempt, never retried here: the check must not delay startup by more than one request,
//! and a broker that refuses it (an authorizer without DESCRIBE_CONFIGS on the cluster) refuses
//! every retry the same way.

use std::time::Duration;

use std::collections::BTreeMap;

use kafka_protocol::messages::{
    self as msg, describe_configs_request, incremental_alter_configs_request, ApiKey,
};
use kafka_protocol::protocol::StrBytes;

use super::Client;
use crate::wire::error::{broker_text, KafkaCode, Result, WireError};

/// DescribeConfigs resource type of a broker (Kafka's `ConfigResource.Type.BROKER`).
const RESOURCE_BROKER: i8 = 4;

/// Config resource type of a group (Kafka's `ConfigResource.Type.GROUP`, Kafka 4.0+).
const RESOURCE_GROUP: i8 = 32;

/// IncrementalAlterConfigs operation SET (Kafka's `AlterConfigOp.OpType.SET`).
const OP_SET: i8 = 0;

/// The controller fences a broker that has not heartbeaten for this long (KRaft).
pub const BROKER_SESSION_TIMEOUT_MS: &str = "broker.session.timeout.ms";
/// The session timeout of consumer-protocol (KIP-848) groups, kept on the broker.
pub const GROUP_CONSUMER_SESSION_TIMEOUT_MS: &str = "group.consumer.session.timeout.ms";
/// The heartbeat interval the broker hands to consumer-protocol (KIP-848) members.
pub const GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS: &str = "group.consumer.heartbeat.interval.ms";

/// How the cluster detects failures, as one broker reports its own configuration.
///
/// Each value is `None` when the broker did not report the key (a release without it, or a
/// broker that hides it); the caller then knows nothing about that setting, not that it is zero.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerFailureDetection {
    /// The broker that answered (its configuration was asked for by its own id).
    pub node_id: i32,
    /// `broker.session.timeout.ms`: how long a dead or hung broker stays in the ISRs (and holds
    /// the coordinator's writes) before the controller fences it.
    pub broker_session_timeout: Option<Duration>,
    /// `group.consumer.session.timeout.ms`: the KIP-848 group session on the broker.
    pub group_consumer_session_timeout: Option<Duration>,
    /// `group.consumer.heartbeat.interval.ms`: the KIP-848 heartbeat interval the broker hands
    /// out (the consumer's default lease bound is derived from it).
    pub group_consumer_heartbeat_interval: Option<Duration>,
}

impl Client {
    /// Reads the cluster's failure-detection settings ([`BrokerFailureDetection`]) from one
    /// broker with one DescribeConfigs request (the broker resource named by that broker's own
    /// id, which is where Kafka answers it), at the highest version both sides speak.
    ///
    /// Exactly one attempt, never retried: it is an advisory check at start, which must not
    /// delay the consumer by more than one request. A refusal comes back as
    /// [`WireError::Kafka`] with the broker's code and message; an authorizer's refusal
    /// (CLUSTER_AUTHORIZATION_FAILED and friends) is recognisable with
    /// [`WireError::is_authorization_refused`]. A value that is not a positive number of
    /// milliseconds is a [`WireError::Protocol`].
    pub fn broker_failure_detection(&mut self) -> Result<BrokerFailureDetection> {
        let node = self.any_known_node()?;
        let conn = self.connection(node)?;
        let version = conn.version_for(ApiKey::DescribeConfigs)?;
        let keys = [
            BROKER_SESSION_TIMEOUT_MS,
            GROUP_CONSUMER_SESSION_TIMEOUT_MS,
            GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS,
        ];
        let req = msg::DescribeConfigsRequest::default().with_resources(vec![
            describe_configs_request::DescribeConfigsResource::default()
                .with_resource_type(RESOURCE_BROKER)
                .with_resource_name(StrBytes::from_string(node.to_string()))
                .with_configuration_keys(Some(
                    keys.iter().map(|k| StrBytes::from_static_str(k)).collect(),
                )),
        ]);
        let sent = conn.send(&req, version);
        let resp = self.failed_if_broken(node, sent)?;
        let name = node.to_string();
        let result = resp
            .results
            .into_iter()
            .find(|r| r.resource_type == RESOURCE_BROKER && r.resource_name.as_str() == name)
            .ok_or_else(|| {
                WireError::Protocol(format!(
                    "DescribeConfigs response of broker {node} lacks its own resource"
                ))
            })?;
        resource_error(
            ApiKey::DescribeConfigs,
            result.error_code,
            result.error_message,
            |text| format!("configuration of broker {node} {text}"),
        )?;
        let mut out = BrokerFailureDetection {
            node_id: node,
            broker_session_timeout: None,
            group_consumer_session_timeout: None,
            group_consumer_heartbeat_interval: None,
        };
        for entry in result.configs {
            let slot = match entry.name.as_str() {
                BROKER_SESSION_TIMEOUT_MS => &mut out.broker_session_timeout,
                GROUP_CONSUMER_SESSION_TIMEOUT_MS => &mut out.group_consumer_session_timeout,
                GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS => &mut out.group_consumer_heartbeat_interval,
                _ => continue,
            };
            *slot = match entry.value {
                // A sensitive or hidden value comes back null: unknown, not zero.
                None => None,
                Some(v) => Some(millis(node, entry.name.as_str(), v.as_str())?),
            };
        }
        Ok(out)
    }
}

impl Client {
    /// Sets group-level configuration of `group` (each `(name, value)` with operation SET, the
    /// others left as they are) with one IncrementalAlterConfigs request (resource type GROUP,
    /// Kafka 4.0+), sent to a broker we already talk to (Kafka forwards it to the controller).
    ///
    /// Why a client call: share groups read their per-group settings (`share.auto.offset.reset`,
    /// `share.record.lock.duration.ms`, `share.session.timeout.ms`,
    /// `share.heartbeat.interval.ms`, `share.delivery.count.limit`, ...) from here, not from the
    /// consumer. Kafka 4.4 accepts the names of its `GroupConfig` (the `consumer.*`, `share.*`
    /// and `streams.*` families and `errors.deadletterqueue.*`). A name it does not know, or a
    /// value outside the broker's `group.share.min.*`/`max.*` bounds, is refused with
    /// INVALID_CONFIG and the broker's message naming it; the error also lists the names sent.
    /// Not retried: a refusal is final and a lost answer may have applied.
    pub fn alter_group_configs(&mut self, group: &str, configs: &[(&str, &str)]) -> Result<()> {
        let node = self.any_known_node()?;
        let conn = self.connection(node)?;
        let version = conn.version_for(ApiKey::IncrementalAlterConfigs)?;
        let req = msg::IncrementalAlterConfigsRequest::default().with_resources(vec![
            incremental_alter_configs_request::AlterConfigsResource::default()
                .with_resource_type(RESOURCE_GROUP)
                .with_resource_name(StrBytes::from_string(group.to_string()))
                .with_configs(
                    configs
                        .iter()
                        .map(|(name, value)| {
                            incremental_alter_configs_request::AlterableConfig::default()
                                .with_name(StrBytes::from_string((*name).to_string()))
                                .with_config_operation(OP_SET)
                                .with_value(Some(StrBytes::from_string((*value).to_string())))
                        })
                        .collect(),
                ),
        ]);
        let sent = conn.send(&req, version);
        let resp = self.failed_if_broken(node, sent)?;
        let names = configs
            .iter()
            .map(|(n, _)| *n)
            .collect::<Vec<_>>()
            .join(", ");
        let result = resp
            .responses
            .into_iter()
            .find(|r| r.resource_type == RESOURCE_GROUP && r.resource_name.as_str() == group)
            .ok_or_else(|| {
                WireError::Protocol(format!(
                    "IncrementalAlterConfigs response lacks group {group:?}"
                ))
            })?;
        resource_error(
            ApiKey::IncrementalAlterConfigs,
            result.error_code,
            result.error_message,
            |text| format!("configuration of group {group:?} ({names}): {text}"),
        )?;
        Ok(())
    }

    /// Reads the configuration of `group` (resource type GROUP) with one DescribeConfigs
    /// request: every group config the broker reports, by name, with its effective value
    /// (`None` for a null value). Values not set on the group come back too, with the broker's
    /// default. Not retried, like [`Client::alter_group_configs`].
    pub fn describe_group_configs(
        &mut self,
        group: &str,
    ) -> Result<BTreeMap<String, Option<String>>> {
        let node = self.any_known_node()?;
        let conn = self.connection(node)?;
        let version = conn.version_for(ApiKey::DescribeConfigs)?;
        let req = msg::DescribeConfigsRequest::default().with_resources(vec![
            describe_configs_request::DescribeConfigsResource::default()
                .with_resource_type(RESOURCE_GROUP)
                .with_resource_name(StrBytes::from_string(group.to_string()))
                .with_configuration_keys(None),
        ]);
        let sent = conn.send(&req, version);
        let resp = self.failed_if_broken(node, sent)?;
        let result = resp
            .results
            .into_iter()
            .find(|r| r.resource_type == RESOURCE_GROUP && r.resource_name.as_str() == group)
            .ok_or_else(|| {
                WireError::Protocol(format!("DescribeConfigs response lacks group {group:?}"))
            })?;
        resource_error(
            ApiKey::DescribeConfigs,
            result.error_code,
            result.error_message,
            |text| format!("configuration of group {group:?}: {text}"),
        )?;
        Ok(result
            .configs
            .into_iter()
            .map(|c| (c.name.to_string(), c.value.map(|v| v.to_string())))
            .collect())
    }

    /// A broker we already talk to, else the lowest id we know of: where a request that any
    /// broker answers goes.
    fn any_known_node(&self) -> Result<i32> {
        self.conns
            .keys()
            .min()
            .or_else(|| self.brokers.keys().next())
            .copied()
            .ok_or(WireError::NoBrokerAvailable { tried: Vec::new() })
    }
}

/// A configuration value in milliseconds; anything but a positive integer is the broker's error.
fn millis(node: i32, key: &str, value: &str) -> Result<Duration> {
    match value.trim().parse::<u64>() {
        Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
        _ => Err(WireError::Protocol(format!(
            "broker {node} reports {key}={} (not a positive number of milliseconds)",
            broker_text(value)
        ))),
    }
}

/// The error of one resource in a configs answer (`DescribeConfigs`, `IncrementalAlterConfigs`),
/// with the broker's text (escaped and bounded) in the context `what` builds from it.
fn resource_error(
    api: ApiKey,
    error_code: i16,
    error_message: Option<StrBytes>,
    what: impl FnOnce(String) -> String,
) -> Result<()> {
    match KafkaCode::from_code(error_code) {
        Some(code) => {
            let text = error_message
                .map(|m| broker_text(m.as_str()))
                .unwrap_or_default();
            Err(WireError::kafka(api, code, what(text)))
        }
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_a_positive_count_of_milliseconds() {
        assert_eq!(
            millis(1, BROKER_SESSION_TIMEOUT_MS, "9000").ok(),
            Some(Duration::from_millis(9000))
        );
        for bad in ["", "0", "-5", "9s", "18446744073709551616"] {
            let e = millis(1, BROKER_SESSION_TIMEOUT_MS, bad).err();
            assert!(
                matches!(&e, Some(WireError::Protocol(m)) if m.contains(BROKER_SESSION_TIMEOUT_MS)),
                "{bad:?}: {e:?}"
            );
        }
    }
}
