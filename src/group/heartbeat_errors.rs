//! What each heartbeat error code asks of a member, for both heartbeat protocols the one
//! membership-thread shell (`membership_thread.rs`) runs: ConsumerGroupHeartbeat (KIP-848,
//! `group.protocol=consumer`) and ShareGroupHeartbeat (share groups, KIP-932), as Kafka defines
//! them (each response schema's error list and the Java client's handling of each).
//!
//! Why one table with a column per protocol, not one table per protocol: the two requests share
//! most codes and their meaning (a moved coordinator, a fenced epoch, an authorization failure),
//! and two copies drift. The columns say where the protocols really differ: a share member has
//! nothing to revoke, no static membership and no assignor to name, so codes about those are
//! undefined for it, and its fatal reasons point at share-group settings
//! (`group.share.max.size`, `share.version`). A code no row names is classified by Kafka's own
//! retriable flag, never ignored.

use super::outcome::{ErrorAction, FatalError, GroupApi};
use crate::wire::KafkaCode;

/// The first ConsumerGroupHeartbeat version with `SubscribedTopicRegex` (KIP-848's regular
/// expressions, Kafka 4.0).
pub(crate) const REGEX_VERSION: i16 = 1;

/// What one code means under one protocol: one cell of the table.
#[derive(Clone, Copy, Debug)]
enum Meaning {
    /// Find the coordinator again, then resend the full heartbeat.
    Rediscover,
    /// The same heartbeat again after the (capped) backoff, to the same coordinator.
    Retry,
    /// The broker no longer knows the member or its epoch: drop the assignment (lost, no
    /// commit) and join again at epoch 0 with the same member id.
    Reset,
    /// Nothing the member can fix; the reason says what to change.
    Fatal(&'static str),
    /// The cluster does not carry this kind of group at all (the protocol's own wording).
    Unsupported,
    /// Not defined for this request: Kafka's retriable flag decides.
    Undefined,
}

/// One code's row: its meaning under ConsumerGroupHeartbeat and under ShareGroupHeartbeat.
struct Row {
    code: KafkaCode,
    consumer: Meaning,
    share: Meaning,
}

/// The table. Where the columns differ, the difference is the protocol's, as Kafka defines it
/// (or, for COORDINATOR_LOAD_IN_PROGRESS, as each member was built: see the row).
const TABLE: &[Row] = &[
    Row {
        code: KafkaCode::NOT_COORDINATOR,
        consumer: Meaning::Rediscover,
        share: Meaning::Rediscover,
    },
    Row {
        code: KafkaCode::COORDINATOR_NOT_AVAILABLE,
        consumer: Meaning::Rediscover,
        share: Meaning::Rediscover,
    },
    // The consumer member retries the same coordinator (it is the group's, only still loading
    // it); the share member looks it up again, paced the same way. Both end on the coordinator
    // that loaded the group.
    Row {
        code: KafkaCode::COORDINATOR_LOAD_IN_PROGRESS,
        consumer: Meaning::Retry,
        share: Meaning::Rediscover,
    },
    Row {
        code: KafkaCode::FENCED_MEMBER_EPOCH,
        consumer: Meaning::Reset,
        share: Meaning::Reset,
    },
    Row {
        code: KafkaCode::UNKNOWN_MEMBER_ID,
        consumer: Meaning::Reset,
        share: Meaning::Reset,
    },
    Row {
        code: KafkaCode::UNRELEASED_INSTANCE_ID,
        consumer: Meaning::Fatal(
            "another member still holds this group.instance.id; give each running consumer \
             its own, or wait until the previous one left or its session expired",
        ),
        share: Meaning::Undefined,
    },
    Row {
        code: KafkaCode::UNSUPPORTED_ASSIGNOR,
        consumer: Meaning::Fatal(
            "the broker does not offer the assignor named by group.remote.assignor; check the \
             broker's group.consumer.assignors",
        ),
        share: Meaning::Undefined,
    },
    Row {
        code: KafkaCode::INVALID_REQUEST,
        consumer: Meaning::Fatal(
            "the broker refused the heartbeat as malformed for this protocol version",
        ),
        share: Meaning::Fatal(
            "the broker refused the heartbeat as malformed (e.g. a join without subscribed \
             topic names)",
        ),
    },
    Row {
        code: KafkaCode::GROUP_MAX_SIZE_REACHED,
        consumer: Meaning::Fatal(
            "the group has as many members as the broker's group.consumer.max.size allows",
        ),
        share: Meaning::Fatal(
            "the share group has as many members as the broker's group.share.max.size allows",
        ),
    },
    Row {
        code: KafkaCode::GROUP_AUTHORIZATION_FAILED,
        consumer: Meaning::Fatal(
            "this principal may not join the group (Read on the group resource)",
        ),
        share: Meaning::Fatal(
            "this principal may not join the share group (Read on the group resource)",
        ),
    },
    Row {
        code: KafkaCode::TOPIC_AUTHORIZATION_FAILED,
        consumer: Meaning::Fatal(
            "this principal may not read a subscribed topic (Describe/Read on the topic)",
        ),
        share: Meaning::Fatal(
            "this principal may not read a subscribed topic (Describe on the topic)",
        ),
    },
    Row {
        code: KafkaCode::UNSUPPORTED_VERSION,
        consumer: Meaning::Fatal(
            "the cluster does not support group.protocol=consumer (Kafka 4.0+ with the \
             consumer group protocol enabled); use group.protocol=classic",
        ),
        share: Meaning::Unsupported,
    },
    Row {
        code: KafkaCode::INVALID_REGULAR_EXPRESSION,
        consumer: Meaning::Fatal("the subscription pattern is invalid"),
        share: Meaning::Undefined,
    },
    Row {
        code: KafkaCode::GROUP_ID_NOT_FOUND,
        consumer: Meaning::Undefined,
        share: Meaning::Fatal(
            "the group id is taken by a group of another type (classic, consumer or streams); \
             a share group needs a group id of its own",
        ),
    },
    Row {
        code: KafkaCode::INVALID_GROUP_ID,
        consumer: Meaning::Undefined,
        share: Meaning::Fatal("the group id is not valid"),
    },
];

/// Classifies an error code (never [`KafkaCode::NONE`]) of the heartbeat `api`
/// ([`GroupApi::ConsumerGroupHeartbeat`] or [`GroupApi::ShareGroupHeartbeat`]; any other reads
/// as ConsumerGroupHeartbeat's column), with the broker's `message` added to a fatal reason. It
/// gives neither [`ErrorAction::Proceed`] nor [`ErrorAction::Rejoin`]: a heartbeat member does
/// not rejoin without losing.
pub(crate) fn classify(api: GroupApi, code: KafkaCode, message: Option<&str>) -> ErrorAction {
    let share = api == GroupApi::ShareGroupHeartbeat;
    let api = if share {
        GroupApi::ShareGroupHeartbeat
    } else {
        GroupApi::ConsumerGroupHeartbeat
    };
    let meaning = TABLE
        .iter()
        .find(|row| row.code == code)
        .map_or(Meaning::Undefined, |row| {
            if share {
                row.share
            } else {
                row.consumer
            }
        });
    match meaning {
        Meaning::Rediscover => ErrorAction::RediscoverCoordinator,
        Meaning::Retry => ErrorAction::Retry,
        Meaning::Reset => ErrorAction::ResetAndRejoin {
            member_unknown: code == KafkaCode::UNKNOWN_MEMBER_ID,
        },
        Meaning::Fatal(what) => ErrorAction::Fatal(fatal(api, code, what, message)),
        Meaning::Unsupported => ErrorAction::Fatal(share_groups_unsupported(
            message.unwrap_or("the coordinator answered UNSUPPORTED_VERSION"),
        )),
        Meaning::Undefined if code.retriable() => ErrorAction::Retry,
        Meaning::Undefined => ErrorAction::Fatal(fatal(
            api,
            code,
            if share {
                "an error share groups do not define for this request"
            } else {
                "an error the consumer group protocol does not define for this request"
            },
            message,
        )),
    }
}

fn fatal(api: GroupApi, code: KafkaCode, what: &str, message: Option<&str>) -> FatalError {
    let reason = match message {
        Some(m) if !m.is_empty() => format!("{what} (broker: {m})"),
        _ => what.to_string(),
    };
    FatalError { api, code, reason }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    const CONSUMER: GroupApi = GroupApi::ConsumerGroupHeartbeat;
    const SHARE: GroupApi = GroupApi::ShareGroupHeartbeat;

    /// Each of `codes` is fatal under `api`, named for `api`, with the broker's words kept.
    fn assert_fatal(api: GroupApi, codes: &[KafkaCode]) {
        for &code in codes {
            match classify(api, code, Some("said the broker")) {
                ErrorAction::Fatal(f) => {
                    assert_eq!((f.api, f.code), (api, code));
                    assert!(f.reason.contains("said the broker"), "{f}");
                }
                other => panic!("{api} {code}: {other:?}"),
            }
        }
    }

    #[test]
    fn every_defined_consumer_heartbeat_error_has_its_kafka_meaning() {
        for code in [
            KafkaCode::NOT_COORDINATOR,
            KafkaCode::COORDINATOR_NOT_AVAILABLE,
        ] {
            assert_eq!(
                classify(CONSUMER, code, None),
                ErrorAction::RediscoverCoordinator
            );
        }
        assert_eq!(
            classify(CONSUMER, KafkaCode::COORDINATOR_LOAD_IN_PROGRESS, None),
            ErrorAction::Retry
        );
        assert_eq!(
            classify(CONSUMER, KafkaCode::FENCED_MEMBER_EPOCH, None),
            ErrorAction::ResetAndRejoin {
                member_unknown: false
            }
        );
        assert_eq!(
            classify(CONSUMER, KafkaCode::UNKNOWN_MEMBER_ID, None),
            ErrorAction::ResetAndRejoin {
                member_unknown: true
            }
        );
        assert_fatal(
            CONSUMER,
            &[
                KafkaCode::UNRELEASED_INSTANCE_ID,
                KafkaCode::UNSUPPORTED_ASSIGNOR,
                KafkaCode::INVALID_REQUEST,
                KafkaCode::GROUP_MAX_SIZE_REACHED,
                KafkaCode::GROUP_AUTHORIZATION_FAILED,
                KafkaCode::TOPIC_AUTHORIZATION_FAILED,
                KafkaCode::UNSUPPORTED_VERSION,
                KafkaCode::INVALID_REGULAR_EXPRESSION,
            ],
        );
    }

    #[test]
    fn every_defined_share_heartbeat_error_has_its_kafka_meaning() {
        for code in [
            KafkaCode::NOT_COORDINATOR,
            KafkaCode::COORDINATOR_NOT_AVAILABLE,
            KafkaCode::COORDINATOR_LOAD_IN_PROGRESS,
        ] {
            assert_eq!(
                classify(SHARE, code, None),
                ErrorAction::RediscoverCoordinator,
                "{code}"
            );
        }
        for code in [KafkaCode::UNKNOWN_MEMBER_ID, KafkaCode::FENCED_MEMBER_EPOCH] {
            assert!(
                matches!(
                    classify(SHARE, code, None),
                    ErrorAction::ResetAndRejoin { .. }
                ),
                "{code}"
            );
        }
        assert_fatal(
            SHARE,
            &[
                KafkaCode::GROUP_AUTHORIZATION_FAILED,
                KafkaCode::TOPIC_AUTHORIZATION_FAILED,
                KafkaCode::GROUP_MAX_SIZE_REACHED,
                KafkaCode::INVALID_REQUEST,
                KafkaCode::GROUP_ID_NOT_FOUND,
                KafkaCode::INVALID_GROUP_ID,
            ],
        );
        match classify(SHARE, KafkaCode::UNSUPPORTED_VERSION, None) {
            ErrorAction::Fatal(f) => assert!(f.reason.contains("share.version"), "{f}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_undefined_code_is_retried_only_when_kafka_calls_it_retriable() {
        for api in [CONSUMER, SHARE] {
            assert_eq!(
                classify(api, KafkaCode::REQUEST_TIMED_OUT, None),
                ErrorAction::Retry
            );
        }
        assert!(matches!(
            classify(CONSUMER, KafkaCode::INVALID_GROUP_ID, None),
            ErrorAction::Fatal(_)
        ));
        match classify(SHARE, KafkaCode::UNSUPPORTED_ASSIGNOR, None) {
            ErrorAction::Fatal(f) => assert!(f.reason.contains("share groups do not define")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn each_code_has_one_row() {
        for (i, row) in TABLE.iter().enumerate() {
            assert!(
                TABLE[i + 1..].iter().all(|other| other.code != row.code),
                "{} twice",
                row.code
            );
        }
    }
}
