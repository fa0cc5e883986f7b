//! ShareGroupHeartbeat (API 76) on a coordinator connection, translated to and from the
//! machine's types, so the machine never sees the wire encoding.

use kafka_protocol::messages::{self as msg, ApiKey, GroupId, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::machine::{ShareHeartbeat, ShareHeartbeatAnswer, ShareIdAssignment};
use crate::group::ids::TopicId;
use crate::wire::{Connection, KafkaCode, Result as WireResult, VersionRange};

/// The ShareGroupHeartbeat versions this crate speaks: v1, the first of share groups' general
/// availability (Kafka 4.1; v0 was 4.0's early access and is gone).
pub(crate) const SHARE_HEARTBEAT_VERSIONS: VersionRange = VersionRange::new(1, 1);

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// The ShareGroupHeartbeat version to use on `conn`, or an error naming both ranges when the
/// broker does not speak it (before Kafka 4.1, or share groups off).
pub fn share_heartbeat_version(conn: &Connection) -> WireResult<i16> {
    conn.version_within(ApiKey::ShareGroupHeartbeat, SHARE_HEARTBEAT_VERSIONS)
}

pub(crate) fn encode(hb: &ShareHeartbeat) -> msg::ShareGroupHeartbeatRequest {
    msg::ShareGroupHeartbeatRequest::default()
        .with_group_id(GroupId(str_bytes(&hb.group_id)))
        .with_member_id(str_bytes(&hb.member_id))
        .with_member_epoch(hb.member_epoch)
        .with_rack_id(hb.rack_id.as_deref().map(str_bytes))
        .with_subscribed_topic_names(
            hb.subscribed_topic_names
                .as_ref()
                .map(|names| names.iter().map(|n| TopicName(str_bytes(n))).collect()),
        )
}

/// The broker's answer in the machine's form; allocates no more than the decoded response
/// holds.
pub(crate) fn decode(resp: msg::ShareGroupHeartbeatResponse) -> ShareHeartbeatAnswer {
    ShareHeartbeatAnswer {
        error: KafkaCode(resp.error_code),
        error_message: resp
            .error_message
            .map(|m| crate::wire::broker_text(m.as_str())),
        member_epoch: resp.member_epoch,
        heartbeat_interval_ms: resp.heartbeat_interval_ms,
        assignment: resp.assignment.map(|a| {
            let mut out = ShareIdAssignment::new();
            for tp in a.topic_partitions {
                let parts: &mut Vec<i32> = out.entry(TopicId::from_uuid(tp.topic_id)).or_default();
                parts.extend(tp.partitions);
                parts.sort_unstable();
                parts.dedup();
            }
            out
        }),
    }
}

/// Sends one ShareGroupHeartbeat on `conn` and returns the decoded answer; errors are the
/// connection's (or the negotiation's), error codes are in the answer.
pub fn send_share_heartbeat(
    conn: &mut Connection,
    hb: &ShareHeartbeat,
) -> WireResult<ShareHeartbeatAnswer> {
    let v = share_heartbeat_version(conn)?;
    let resp = conn.send(&encode(hb), v)?;
    Ok(decode(resp))
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use kafka_protocol::messages::share_group_heartbeat_response;
    use kafka_protocol::protocol::Encodable;

    use super::*;

    #[test]
    fn a_join_carries_rack_and_topics_and_a_short_heartbeat_neither() {
        let join = ShareHeartbeat {
            group_id: "g".into(),
            member_id: "m".into(),
            member_epoch: 0,
            rack_id: Some("zone-a".into()),
            subscribed_topic_names: Some(vec!["orders".into()]),
        };
        let m = encode(&join);
        assert_eq!(m.group_id.0.as_str(), "g");
        assert_eq!(m.member_id.as_str(), "m");
        assert_eq!(m.member_epoch, 0);
        assert_eq!(m.rack_id.as_ref().map(|s| s.as_str()), Some("zone-a"));
        assert_eq!(m.subscribed_topic_names.as_ref().map(Vec::len), Some(1));
        m.encode(&mut BytesMut::new(), 1).expect("v1 encodes");
        let short = encode(&ShareHeartbeat {
            member_epoch: 3,
            rack_id: None,
            subscribed_topic_names: None,
            ..join
        });
        assert_eq!(short.rack_id, None);
        assert_eq!(short.subscribed_topic_names, None);
    }

    #[test]
    fn an_answer_is_read_by_topic_id_with_partitions_sorted_once() {
        let resp = msg::ShareGroupHeartbeatResponse::default()
            .with_member_epoch(4)
            .with_heartbeat_interval_ms(500)
            .with_assignment(Some(
                share_group_heartbeat_response::Assignment::default().with_topic_partitions(vec![
                    share_group_heartbeat_response::TopicPartitions::default()
                        .with_topic_id(TopicId([1; 16]).to_uuid())
                        .with_partitions(vec![3, 1, 3]),
                ]),
            ));
        let a = decode(resp);
        assert_eq!(a.error, KafkaCode::NONE);
        assert_eq!((a.member_epoch, a.heartbeat_interval_ms), (4, 500));
        assert_eq!(a.assignment, Some([(TopicId([1; 16]), vec![1, 3])].into()));
        let none = decode(msg::ShareGroupHeartbeatResponse::default().with_error_code(25));
        assert_eq!(none.error, KafkaCode::UNKNOWN_MEMBER_ID);
        assert_eq!(none.assignment, None, "null: unchanged");
    }
}
