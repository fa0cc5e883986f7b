//! Where the group layer works around a broker that deviates from Kafka: each workaround is one
//! named constant or function here, documented with the broker, what it does wrong, what Kafka
//! does, and what this crate does instead. The requests and the error table use them by name, so
//! the general path reads as Kafka's protocol and removing a workaround is one edit here.
//!
//! Every one of them is for librdkafka's mock cluster (the `mock` broker of the tests), and none
//! changes what Kafka sees or how its answers are read: the `_kafka` tests and
//! tests/brokers/wire/versions.rs pin that. The wire layer's workarounds are in `wire/quirks.rs`;
//! docs/DESIGN.md ("Brokers in tests") lists both.
//!
//! - [`MAX_JOIN_GROUP`], [`MAX_SYNC_GROUP`], [`MAX_HEARTBEAT`], [`MAX_LEAVE_GROUP`]: the mock
//!   advertises flexible group API versions it cannot serve.
//! - [`dynamic_leave_group_version`]: the mock's LeaveGroup v3 answer lacks its member list.
//! - [`error_code_of_undecodable_response`]: the mock's JoinGroup and SyncGroup error answers
//!   carry nulls their schemas forbid.
//! - [`LATE_SYNC_GROUP_REFUSAL`]: the mock refuses a follower's SyncGroup that arrives after the
//!   leader's.

use kafka_protocol::messages::ApiKey;

use crate::wire::{Connection, KafkaCode, VersionRange};

// The group API version caps.
//
// librdkafka's mock cluster advertises JoinGroup v6 (the first flexible version) but closes the
// connection when it receives one. Kafka serves every version it advertises (4.x: JoinGroup 9,
// SyncGroup 5, Heartbeat 4, LeaveGroup 5). Each group API is capped at its last non-flexible
// version, the same for every broker; with Kafka nothing is lost, since what the later versions
// add (flexible encoding, KIP-559 protocol type and name, KIP-800 reasons, KIP-814
// skip_assignment) this crate does not use. tests/brokers/wire/versions.rs lists every such cap.

/// The highest JoinGroup version sent (see the caps above): v5, the last non-flexible one.
pub(crate) const MAX_JOIN_GROUP: i16 = 5;
/// The highest SyncGroup version sent (see the caps above): v3, the last non-flexible one.
pub(crate) const MAX_SYNC_GROUP: i16 = 3;
/// The highest Heartbeat version sent (see the caps above): v3, the last non-flexible one.
pub(crate) const MAX_HEARTBEAT: i16 = 3;
/// The highest LeaveGroup version sent (see the caps above): v3, the last non-flexible one.
pub(crate) const MAX_LEAVE_GROUP: i16 = 3;

/// The LeaveGroup version for a dynamic member, or `None` to choose it as for any request.
///
/// **librdkafka's mock cluster** answers LeaveGroup v3 (the batched form of KIP-345) without
/// the `members` array its schema requires, so the answer does not decode. **Kafka** answers
/// v3 with one entry per member that left. A dynamic member (no `group.instance.id`) needs
/// nothing v3 adds, so it leaves with the highest of v0-v2 the broker speaks. `None` for a
/// static member, which needs v3 to name its instance id, and for a broker that speaks none of
/// v0-v2.
pub(crate) fn dynamic_leave_group_version(
    conn: &Connection,
    instance_id: Option<&str>,
) -> Option<i16> {
    let dynamic = conn
        .version_within(ApiKey::LeaveGroup, VersionRange::new(0, 2))
        .ok();
    match instance_id {
        None => dynamic,
        Some(_) => None,
    }
}

/// The top-level error code of a response body that did not decode (after `throttle_time_ms`
/// when the version has it), `None` when it is missing or success.
///
/// **librdkafka's mock cluster** writes a null `protocol_name` in JoinGroup v5 error answers and
/// a null `assignment` in SyncGroup error answers, which their schemas forbid, so
/// `kafka-protocol` refuses to decode them. **Kafka** writes empty values there. The error code
/// is what matters in an error answer, and it sits at a fixed position, so it is read from
/// there; an answer that does not decode and carries no error is still a protocol error.
pub(crate) fn error_code_of_undecodable_response(
    body: &[u8],
    has_throttle: bool,
) -> Option<KafkaCode> {
    let at = if has_throttle { 4 } else { 0 };
    let bytes = body.get(at..at + 2)?;
    KafkaCode::from_code(i16::from_be_bytes([bytes[0], bytes[1]]))
}

/// The error with which librdkafka's mock refuses a late follower's SyncGroup; the error table
/// (`membership::classify`) answers it on SyncGroup with a rejoin.
///
/// **librdkafka's mock cluster** ends a generation's sync round when the leader's SyncGroup
/// arrives, and answers INVALID_REQUEST to a follower whose SyncGroup comes later. **Kafka**
/// answers every member of the generation with its assignment, whether its SyncGroup came
/// before the leader's (held until then) or after it. Rejoining recovers: the next generation's
/// follower usually syncs in time (the leader's Metadata request before its SyncGroup, in
/// `member.rs` `lead`, gives it that time). Java would fail instead. A Kafka broker rejecting a
/// malformed SyncGroup would turn this into a visible retry loop, logged on every round, rather
/// than a crash of the worker.
pub(crate) const LATE_SYNC_GROUP_REFUSAL: KafkaCode = KafkaCode::INVALID_REQUEST;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_error_code_of_an_undecodable_answer_is_read_at_its_fixed_place() {
        // JoinGroup v2+ and SyncGroup v1+: throttle_time_ms (4 bytes), then the error code.
        let body = [0, 0, 0, 0, 0, 27, 0xff];
        assert_eq!(
            error_code_of_undecodable_response(&body, true),
            Some(KafkaCode::REBALANCE_IN_PROGRESS)
        );
        assert_eq!(
            error_code_of_undecodable_response(&[0, 42], false),
            Some(KafkaCode::INVALID_REQUEST)
        );
        // Success, or too short to hold a code: nothing to fall back on.
        assert_eq!(error_code_of_undecodable_response(&[0, 0], false), None);
        assert_eq!(error_code_of_undecodable_response(&[0, 0, 0], true), None);
    }
}
