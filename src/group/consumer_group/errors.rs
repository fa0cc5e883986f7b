//! What each ConsumerGroupHeartbeat error code asks of the member, as Kafka defines it (the
//! response schema's error list and the Java client's handling of each).
//!
//! Why one function: the machine, its tests and the report of a fatal error must agree on every
//! code; a code nobody lists here is classified by Kafka's own retriable flag, never ignored.

pub use crate::group::outcome::ErrorAction;
use crate::group::outcome::{FatalError, GroupApi};
use crate::wire::KafkaCode;

/// The first ConsumerGroupHeartbeat version with `SubscribedTopicRegex` (KIP-848's regular
/// expressions, Kafka 4.0).
pub(crate) const REGEX_VERSION: i16 = 1;

/// Why a subscription by regular expression cannot go on a coordinator that speaks only
/// ConsumerGroupHeartbeat `version` (below [`REGEX_VERSION`]: Kafka 3.7 to 3.9).
pub(crate) fn regex_unsupported(regex: &str, version: i16) -> FatalError {
    FatalError {
        api: GroupApi::ConsumerGroupHeartbeat,
        code: KafkaCode::UNSUPPORTED_VERSION,
        reason: format!(
            "the topic pattern {regex:?} needs ConsumerGroupHeartbeat v{REGEX_VERSION} (Kafka 4.0 \
             or later) under group.protocol=consumer, and the broker speaks at most v{version}; \
             upgrade the brokers, or subscribe with group.protocol=classic, which matches the \
             pattern in the client"
        ),
    }
}

fn fatal(code: KafkaCode, what: &str, message: Option<&str>) -> ErrorAction {
    let reason = match message {
        Some(m) if !m.is_empty() => format!("{what} (broker: {m})"),
        _ => what.to_string(),
    };
    ErrorAction::Fatal(FatalError {
        api: GroupApi::ConsumerGroupHeartbeat,
        code,
        reason,
    })
}

/// Classifies a heartbeat error code (never [`KafkaCode::NONE`]): the consumer group protocol's
/// table, in the shape both protocols share ([`ErrorAction`]); it gives neither
/// [`ErrorAction::Proceed`] nor [`ErrorAction::Rejoin`].
pub fn classify(code: KafkaCode, message: Option<&str>) -> ErrorAction {
    match code {
        KafkaCode::NOT_COORDINATOR | KafkaCode::COORDINATOR_NOT_AVAILABLE => {
            ErrorAction::RediscoverCoordinator
        }
        KafkaCode::COORDINATOR_LOAD_IN_PROGRESS => ErrorAction::Retry,
        // The broker no longer knows this member or its epoch: the assignment is lost (fence,
        // discard, no commit) and the member rejoins with epoch 0.
        KafkaCode::FENCED_MEMBER_EPOCH | KafkaCode::UNKNOWN_MEMBER_ID => {
            ErrorAction::ResetAndRejoin {
                member_unknown: code == KafkaCode::UNKNOWN_MEMBER_ID,
            }
        }
        KafkaCode::UNRELEASED_INSTANCE_ID => fatal(
            code,
            "another member still holds this group.instance.id; give each running consumer \
             its own, or wait until the previous one left or its session expired",
            message,
        ),
        KafkaCode::UNSUPPORTED_ASSIGNOR => fatal(
            code,
            "the broker does not offer the assignor named by group.remote.assignor; check the \
             broker's group.consumer.assignors",
            message,
        ),
        KafkaCode::INVALID_REQUEST => fatal(
            code,
            "the broker refused the heartbeat as malformed for this protocol version",
            message,
        ),
        KafkaCode::GROUP_MAX_SIZE_REACHED => fatal(
            code,
            "the group has as many members as the broker's group.consumer.max.size allows",
            message,
        ),
        KafkaCode::GROUP_AUTHORIZATION_FAILED => fatal(
            code,
            "this principal may not join the group (Read on the group resource)",
            message,
        ),
        KafkaCode::TOPIC_AUTHORIZATION_FAILED => fatal(
            code,
            "this principal may not read a subscribed topic (Describe/Read on the topic)",
            message,
        ),
        KafkaCode::UNSUPPORTED_VERSION => fatal(
            code,
            "the cluster does not support group.protocol=consumer (Kafka 4.0+ with the \
             consumer group protocol enabled); use group.protocol=classic",
            message,
        ),
        KafkaCode::INVALID_REGULAR_EXPRESSION => {
            fatal(code, "the subscription pattern is invalid", message)
        }
        other if other.retriable() => ErrorAction::Retry,
        other => fatal(
            other,
            "an error the consumer group protocol does not define for this request",
            message,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_defined_heartbeat_error_has_its_kafka_meaning() {
        assert_eq!(
            classify(KafkaCode::NOT_COORDINATOR, None),
            ErrorAction::RediscoverCoordinator
        );
        assert_eq!(
            classify(KafkaCode::COORDINATOR_NOT_AVAILABLE, None),
            ErrorAction::RediscoverCoordinator
        );
        assert_eq!(
            classify(KafkaCode::COORDINATOR_LOAD_IN_PROGRESS, None),
            ErrorAction::Retry
        );
        assert_eq!(
            classify(KafkaCode::FENCED_MEMBER_EPOCH, None),
            ErrorAction::ResetAndRejoin {
                member_unknown: false
            }
        );
        assert_eq!(
            classify(KafkaCode::UNKNOWN_MEMBER_ID, None),
            ErrorAction::ResetAndRejoin {
                member_unknown: true
            }
        );
        for code in [
            KafkaCode::UNRELEASED_INSTANCE_ID,
            KafkaCode::UNSUPPORTED_ASSIGNOR,
            KafkaCode::INVALID_REQUEST,
            KafkaCode::GROUP_MAX_SIZE_REACHED,
            KafkaCode::GROUP_AUTHORIZATION_FAILED,
            KafkaCode::TOPIC_AUTHORIZATION_FAILED,
            KafkaCode::UNSUPPORTED_VERSION,
            KafkaCode::INVALID_REGULAR_EXPRESSION,
        ] {
            match classify(code, Some("said the broker")) {
                ErrorAction::Fatal(f) => {
                    assert_eq!((f.api, f.code), (GroupApi::ConsumerGroupHeartbeat, code));
                    assert!(f.reason.contains("said the broker"), "{f}");
                }
                other => panic!("{code:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn an_undefined_code_is_retried_only_when_kafka_calls_it_retriable() {
        assert_eq!(
            classify(KafkaCode::REQUEST_TIMED_OUT, None),
            ErrorAction::Retry
        );
        assert!(matches!(
            classify(KafkaCode::INVALID_GROUP_ID, None),
            ErrorAction::Fatal(_)
        ));
    }
}
