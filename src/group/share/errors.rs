//! What each ShareGroupHeartbeat error code asks of a share-group member, as Kafka 4.x defines
//! it (the response schema's error list and the Java share consumer's handling of each).
//!
//! Why its own table and not the consumer group protocol's: the codes overlap, but a share
//! member has nothing to revoke, no static membership and no assignor to name, and the fatal
//! reasons must point at share-group settings (`group.share.max.size`, `share.version`).

use crate::group::outcome::{FatalError, GroupApi};
use crate::wire::KafkaCode;

/// What the member does about an error answer (never [`KafkaCode::NONE`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShareErrorAction {
    /// Find the coordinator again (FindCoordinator), then resend the full heartbeat:
    /// NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS.
    Rediscover,
    /// The broker no longer knows this member or its epoch (UNKNOWN_MEMBER_ID,
    /// FENCED_MEMBER_EPOCH): drop the assignment and join again at epoch 0 with the same
    /// member id.
    Rejoin,
    /// A retriable code the table does not name: the same heartbeat again after the backoff.
    Retry,
    /// Nothing the member can fix: the membership ends with this error.
    Fatal(FatalError),
}

fn fatal(code: KafkaCode, what: &str, message: Option<&str>) -> ShareErrorAction {
    let reason = match message {
        Some(m) if !m.is_empty() => format!("{what} (broker: {m})"),
        _ => what.to_string(),
    };
    ShareErrorAction::Fatal(FatalError {
        api: GroupApi::ShareGroupHeartbeat,
        code,
        reason,
    })
}

/// Why a broker that does not speak ShareGroupHeartbeat v1 cannot carry a share group: the
/// feature that is missing, with `detail` (the negotiation's or the broker's words).
pub(crate) fn share_groups_unsupported(detail: &str) -> FatalError {
    FatalError {
        api: GroupApi::ShareGroupHeartbeat,
        code: KafkaCode::UNSUPPORTED_VERSION,
        reason: format!(
            "the cluster does not support share groups: they need brokers that speak \
             ShareGroupHeartbeat v1 (Kafka 4.1 or later, production-ready from 4.2) with the \
             feature share.version enabled (a freshly formatted 4.4 node has share.version=2; \
             an upgraded cluster enables it with kafka-features.sh upgrade --feature \
             share.version=2) ({detail})"
        ),
    }
}

/// Classifies a ShareGroupHeartbeat error code.
pub fn classify(code: KafkaCode, message: Option<&str>) -> ShareErrorAction {
    match code {
        KafkaCode::NOT_COORDINATOR
        | KafkaCode::COORDINATOR_NOT_AVAILABLE
        | KafkaCode::COORDINATOR_LOAD_IN_PROGRESS => ShareErrorAction::Rediscover,
        KafkaCode::UNKNOWN_MEMBER_ID | KafkaCode::FENCED_MEMBER_EPOCH => ShareErrorAction::Rejoin,
        KafkaCode::GROUP_AUTHORIZATION_FAILED => fatal(
            code,
            "this principal may not join the share group (Read on the group resource)",
            message,
        ),
        KafkaCode::TOPIC_AUTHORIZATION_FAILED => fatal(
            code,
            "this principal may not read a subscribed topic (Describe on the topic)",
            message,
        ),
        KafkaCode::GROUP_MAX_SIZE_REACHED => fatal(
            code,
            "the share group has as many members as the broker's group.share.max.size allows",
            message,
        ),
        KafkaCode::INVALID_REQUEST => fatal(
            code,
            "the broker refused the heartbeat as malformed (e.g. a join without subscribed \
             topic names)",
            message,
        ),
        KafkaCode::UNSUPPORTED_VERSION => ShareErrorAction::Fatal(share_groups_unsupported(
            message.unwrap_or("the coordinator answered UNSUPPORTED_VERSION"),
        )),
        KafkaCode::GROUP_ID_NOT_FOUND => fatal(
            code,
            "the group id is taken by a group of another type (classic, consumer or streams); \
             a share group needs a group id of its own",
            message,
        ),
        KafkaCode::INVALID_GROUP_ID => fatal(code, "the group id is not valid", message),
        other if other.retriable() => ShareErrorAction::Retry,
        other => fatal(
            other,
            "an error share groups do not define for this request",
            message,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_defined_code_has_its_kafka_meaning() {
        for code in [
            KafkaCode::NOT_COORDINATOR,
            KafkaCode::COORDINATOR_NOT_AVAILABLE,
            KafkaCode::COORDINATOR_LOAD_IN_PROGRESS,
        ] {
            assert_eq!(classify(code, None), ShareErrorAction::Rediscover, "{code}");
        }
        for code in [KafkaCode::UNKNOWN_MEMBER_ID, KafkaCode::FENCED_MEMBER_EPOCH] {
            assert_eq!(classify(code, None), ShareErrorAction::Rejoin, "{code}");
        }
        for code in [
            KafkaCode::GROUP_AUTHORIZATION_FAILED,
            KafkaCode::TOPIC_AUTHORIZATION_FAILED,
            KafkaCode::GROUP_MAX_SIZE_REACHED,
            KafkaCode::INVALID_REQUEST,
            KafkaCode::GROUP_ID_NOT_FOUND,
        ] {
            match classify(code, Some("said the broker")) {
                ShareErrorAction::Fatal(f) => {
                    assert_eq!((f.api, f.code), (GroupApi::ShareGroupHeartbeat, code));
                    assert!(f.reason.contains("said the broker"), "{f}");
                }
                other => panic!("{code}: {other:?}"),
            }
        }
        match classify(KafkaCode::UNSUPPORTED_VERSION, None) {
            ShareErrorAction::Fatal(f) => assert!(f.reason.contains("share.version"), "{f}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            classify(KafkaCode::REQUEST_TIMED_OUT, None),
            ShareErrorAction::Retry
        );
    }
}
