//! The consumer group protocol's requests on a coordinator connection: ConsumerGroupHeartbeat
//! (API 68) at the highest version both sides speak (the Metadata look-up that names the topic
//! ids an assignment arrives with is both heartbeat protocols', in `group/ids.rs`).
//!
//! Why here and not in `group/requests.rs`: the machine's request and answer types
//! ([`HeartbeatRequest`], [`HeartbeatResponse`]) are translated to and from `kafka-protocol`'s in
//! one place, so the machine never sees the wire encoding.

use kafka_protocol::messages::{
    self as msg, consumer_group_heartbeat_request, metadata_request, ApiKey, GroupId, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::types::{HeartbeatRequest, HeartbeatResponse, IdAssignment};
use crate::group::error::GroupError;
use crate::group::heartbeat_errors::{regex_unsupported, REGEX_VERSION};
/// The Metadata look-up that names topic ids, as both heartbeat protocols' threads make it
/// (defined in `group/ids.rs`); here for the integration tests that drive the machine directly.
pub use crate::group::ids::resolve_topic_ids;
use crate::group::ids::TopicId;
use crate::wire::Client;
use crate::wire::{Connection, KafkaCode, Result as WireResult, VersionRange, WireError};

/// The ConsumerGroupHeartbeat versions this crate speaks: v0 (the broker assigns the member id)
/// and v1 (the client does, KIP-1082).
pub(crate) const HEARTBEAT_VERSIONS: VersionRange = VersionRange::new(0, 1);

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// The ConsumerGroupHeartbeat version to use on `conn`, or an error naming both ranges when the
/// broker does not speak the protocol (a classic-only cluster).
pub fn heartbeat_version(conn: &Connection) -> WireResult<i16> {
    conn.version_within(ApiKey::ConsumerGroupHeartbeat, HEARTBEAT_VERSIONS)
}

fn encode(req: &HeartbeatRequest) -> msg::ConsumerGroupHeartbeatRequest {
    msg::ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(str_bytes(&req.group_id)))
        .with_member_id(str_bytes(&req.member_id))
        .with_member_epoch(req.member_epoch)
        .with_instance_id(req.instance_id.as_deref().map(str_bytes))
        .with_rack_id(req.rack_id.as_deref().map(str_bytes))
        .with_rebalance_timeout_ms(req.rebalance_timeout_ms)
        .with_subscribed_topic_names(
            req.subscribed_topic_names
                .as_ref()
                .map(|names| names.iter().map(|n| TopicName(str_bytes(n))).collect()),
        )
        .with_subscribed_topic_regex(req.subscribed_topic_regex.as_deref().map(str_bytes))
        .with_server_assignor(req.server_assignor.as_deref().map(str_bytes))
        .with_topic_partitions(req.owned.as_ref().map(|owned| {
            owned
                .iter()
                .map(|(id, partitions)| {
                    consumer_group_heartbeat_request::TopicPartitions::default()
                        .with_topic_id(id.to_uuid())
                        .with_partitions(partitions.clone())
                })
                .collect()
        }))
}

/// Checks, at subscribe, that the cluster can carry a subscription by regular expression
/// (ConsumerGroupHeartbeat v1, Kafka 4.0+), on a broker `client` is connected to: a clear error
/// then, rather than a membership that fails at its first heartbeat.
pub(crate) fn check_regex_support(client: &mut Client, regex: &str) -> Result<(), GroupError> {
    let node = client
        .brokers()
        .first()
        .map(|b| b.node_id)
        .ok_or(WireError::NoBrokerAvailable { tried: Vec::new() })?;
    let version = heartbeat_version(client.connection(node)?)?;
    if version < REGEX_VERSION {
        return Err(GroupError::Fatal(regex_unsupported(regex, version)));
    }
    Ok(())
}

/// Turns the broker's answer into the machine's form. Bounded by what was decoded: nothing here
/// allocates more than the response already holds.
pub(crate) fn decode(resp: msg::ConsumerGroupHeartbeatResponse) -> HeartbeatResponse {
    HeartbeatResponse {
        error: KafkaCode(resp.error_code),
        // The broker's text reaches errors and logs: escaped and bounded.
        error_message: resp
            .error_message
            .map(|m| crate::wire::broker_text(m.as_str())),
        member_id: resp.member_id.map(|m| m.to_string()),
        member_epoch: resp.member_epoch,
        heartbeat_interval_ms: resp.heartbeat_interval_ms,
        assignment: resp.assignment.map(|a| {
            let mut out = IdAssignment::new();
            for tp in a.topic_partitions {
                out.entry(TopicId::from_uuid(tp.topic_id))
                    .or_default()
                    .extend(tp.partitions);
            }
            out
        }),
    }
}

/// Sends one ConsumerGroupHeartbeat on the coordinator connection and returns the version used
/// and the decoded answer. Errors are the connection's (the caller feeds them to
/// `on_transport_error`); error codes are in the answer.
pub fn send_heartbeat(
    conn: &mut Connection,
    req: &HeartbeatRequest,
) -> WireResult<(i16, HeartbeatResponse)> {
    let v = heartbeat_version(conn)?;
    let resp = conn.send(&encode(req), v)?;
    Ok((v, decode(resp)))
}

/// The ids of `names` (topics the cluster knows), for a shell that resolves its subscription up
/// front.
pub fn topic_ids(conn: &mut Connection, names: &[&str]) -> WireResult<Vec<(TopicId, String)>> {
    let v = conn.version_within(ApiKey::Metadata, VersionRange::new(10, 12))?;
    let req = msg::MetadataRequest::default()
        .with_topics(Some(
            names
                .iter()
                .map(|n| {
                    metadata_request::MetadataRequestTopic::default()
                        .with_name(Some(TopicName(str_bytes(n))))
                })
                .collect(),
        ))
        .with_allow_auto_topic_creation(false);
    let resp = conn.send(&req, v)?;
    let mut out = Vec::new();
    for t in resp.topics {
        if let (None, Some(name)) = (KafkaCode::from_code(t.error_code), t.name) {
            let id = TopicId::from_uuid(t.topic_id);
            if id == TopicId::ZERO {
                return Err(WireError::Protocol(format!(
                    "Metadata v{v} named topic {} without a topic id",
                    name.as_str()
                )));
            }
            out.push((id, name.to_string()));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use kafka_protocol::messages::consumer_group_heartbeat_response;
    use kafka_protocol::protocol::Encodable;

    use super::*;

    fn full() -> HeartbeatRequest {
        HeartbeatRequest {
            group_id: "g".into(),
            member_id: "m".into(),
            member_epoch: 0,
            instance_id: Some("i".into()),
            rebalance_timeout_ms: 300_000,
            subscribed_topic_names: Some(vec!["orders".into()]),
            subscribed_topic_regex: None,
            server_assignor: Some("range".into()),
            rack_id: Some("zone-b".into()),
            owned: Some([(TopicId([7; 16]), vec![0, 2])].into()),
        }
    }

    #[test]
    fn every_field_reaches_the_wire_message_with_null_meaning_unchanged() {
        let m = encode(&full());
        assert_eq!(m.group_id.0.as_str(), "g");
        assert_eq!(m.member_id.as_str(), "m");
        assert_eq!(m.member_epoch, 0);
        assert_eq!(m.instance_id.as_ref().map(|s| s.as_str()), Some("i"));
        assert_eq!(m.rack_id.as_ref().map(|s| s.as_str()), Some("zone-b"));
        assert_eq!(m.rebalance_timeout_ms, 300_000);
        assert_eq!(m.subscribed_topic_names.as_ref().map(Vec::len), Some(1));
        assert_eq!(m.subscribed_topic_regex, None, "v0 has no regex field");
        assert_eq!(
            m.server_assignor.as_ref().map(|s| s.as_str()),
            Some("range")
        );
        let owned = m.topic_partitions.as_ref().expect("owned");
        assert_eq!(owned[0].topic_id, TopicId([7; 16]).to_uuid());
        assert_eq!(owned[0].partitions, vec![0, 2]);

        let short = encode(&HeartbeatRequest::unchanged("g", "m", 5));
        assert_eq!(short.rack_id, None);
        assert_eq!(short.rebalance_timeout_ms, -1);
        assert_eq!(short.subscribed_topic_names, None);
        assert_eq!(short.server_assignor, None);
        assert_eq!(short.topic_partitions, None);
        for v in HEARTBEAT_VERSIONS.min..=HEARTBEAT_VERSIONS.max {
            let mut buf = BytesMut::new();
            encode(&full()).encode(&mut buf, v).expect("encodes");
            assert!(!buf.is_empty());
        }
    }

    #[test]
    fn a_regex_reaches_the_wire_from_v1_and_cannot_be_encoded_at_v0() {
        let req = HeartbeatRequest {
            subscribed_topic_names: None,
            subscribed_topic_regex: Some("orders-.*".into()),
            ..full()
        };
        let m = encode(&req);
        assert_eq!(
            m.subscribed_topic_regex.as_ref().map(|s| s.as_str()),
            Some("orders-.*")
        );
        assert_eq!(m.subscribed_topic_names, None);
        let mut buf = BytesMut::new();
        m.encode(&mut buf, 1).expect("v1 carries the regex");
        assert!(
            m.encode(&mut BytesMut::new(), 0).is_err(),
            "v0 has no field for it: never sent silently without it"
        );
    }

    #[test]
    fn an_answer_is_read_with_its_assignment_by_topic_id() {
        let resp = msg::ConsumerGroupHeartbeatResponse::default()
            .with_member_id(Some(StrBytes::from_static_str("m")))
            .with_member_epoch(4)
            .with_heartbeat_interval_ms(500)
            .with_assignment(Some(
                consumer_group_heartbeat_response::Assignment::default().with_topic_partitions(
                    vec![
                        consumer_group_heartbeat_response::TopicPartitions::default()
                            .with_topic_id(TopicId([1; 16]).to_uuid())
                            .with_partitions(vec![3, 1]),
                    ],
                ),
            ));
        let r = decode(resp);
        assert_eq!(r.error, KafkaCode::NONE);
        assert_eq!(r.member_id.as_deref(), Some("m"));
        assert_eq!(r.member_epoch, 4);
        assert_eq!(r.heartbeat_interval_ms, 500);
        assert_eq!(r.assignment, Some([(TopicId([1; 16]), vec![3, 1])].into()));
        let none = decode(msg::ConsumerGroupHeartbeatResponse::default().with_error_code(110));
        assert_eq!(none.error, KafkaCode::FENCED_MEMBER_EPOCH);
        assert_eq!(none.assignment, None, "null: no assignment news");
    }
}
