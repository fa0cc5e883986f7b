//! The pure decisions of classic group membership: what a new assignment means for the partitions we
//! own, in which order the consumer must apply it, and what each group error code asks us to do.
//!
//! Kept free of sockets and threads so that every rule is a table or a set difference that a unit
//! test pins down (error codes are named by the one table, [`KafkaCode`]). The session
//! (`group/session.rs`) applies them to the membership's state, and the threads that perform the
//! JoinGroup/SyncGroup/Heartbeat I/O only follow the session's decisions.

use std::collections::BTreeSet;

use super::assignor::RebalanceProtocol;
pub(crate) use super::outcome::ErrorAction;
use super::outcome::{FatalError, GroupApi};
use super::quirks;
use crate::wire::KafkaCode;
use crate::TopicPartition;

/// How an assignment change splits our partitions. Each list is sorted and free of duplicates.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct AssignmentDiff {
    /// Assigned now, not owned before.
    pub added: Vec<TopicPartition>,
    /// Owned before, not assigned now.
    pub revoked: Vec<TopicPartition>,
    /// Owned before and assigned now.
    pub retained: Vec<TopicPartition>,
}

/// Splits `owned` and `assigned` into added, revoked and retained.
pub(crate) fn diff(owned: &[TopicPartition], assigned: &[TopicPartition]) -> AssignmentDiff {
    let owned: BTreeSet<&TopicPartition> = owned.iter().collect();
    let assigned: BTreeSet<&TopicPartition> = assigned.iter().collect();
    AssignmentDiff {
        added: assigned.difference(&owned).map(|p| (*p).clone()).collect(),
        revoked: owned.difference(&assigned).map(|p| (*p).clone()).collect(),
        retained: owned
            .intersection(&assigned)
            .map(|p| (*p).clone())
            .collect(),
    }
}

/// One step the consumer applies, in order, through the rebalance guard. Revoked and lost are
/// different events: a revoked partition is flushed and committed, a lost one is only fenced,
/// because another member may already own it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum RebalanceEvent {
    /// Hand these partitions back: fence, flush, commit, then stop fetching them.
    Revoke(Vec<TopicPartition>),
    /// These partitions are no longer ours and may be owned elsewhere: fence and discard, no commit.
    Lost(Vec<TopicPartition>),
    /// Start owning these partitions. Always the last event of a completed rebalance, even when
    /// empty, so the consumer (and storm detection) sees every rebalance finish, as Java calls
    /// `onPartitionsAssigned` every time.
    Assign(Vec<TopicPartition>),
}

/// What to do once SyncGroup delivered an assignment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RebalancePlan {
    /// Apply in this order.
    pub events: Vec<RebalanceEvent>,
    /// What we own once the events are applied (sorted): the next subscription's owned partitions.
    pub owned_after: Vec<TopicPartition>,
    /// Cooperative only: something was revoked, so we must rejoin at once for the follow-up
    /// rebalance that hands those partitions to their new owners (KIP-429).
    pub rejoin: bool,
}

impl RebalancePlan {
    /// The partitions the plan revokes, in order.
    pub(crate) fn revoked(&self) -> Vec<TopicPartition> {
        self.events
            .iter()
            .filter_map(|event| match event {
                RebalanceEvent::Revoke(partitions) => Some(partitions.clone()),
                _ => None,
            })
            .flatten()
            .collect()
    }
}

/// The events due before sending JoinGroup. Eager: revoke everything we own (the new owner may be
/// anyone, and it starts as soon as the group completes). Cooperative: nothing; we keep consuming
/// through the rebalance and revoke only what moves once the assignment is known.
pub(crate) fn before_join(
    protocol: RebalanceProtocol,
    owned: &[TopicPartition],
) -> Vec<RebalanceEvent> {
    match protocol {
        RebalanceProtocol::Eager if !owned.is_empty() => {
            vec![RebalanceEvent::Revoke(sorted_unique(owned))]
        }
        _ => Vec::new(),
    }
}

/// The events due once SyncGroup delivered `assigned`, given what we own at that moment.
///
/// Eager: we normally own nothing by now ([`before_join`] revoked it all); if we still do, it is
/// revoked first, and then the whole assignment is assigned. Cooperative: revoke only what was
/// taken away, assign only what is new, and ask for a rejoin when something was revoked.
pub(crate) fn after_sync(
    protocol: RebalanceProtocol,
    owned: &[TopicPartition],
    assigned: &[TopicPartition],
) -> RebalancePlan {
    let owned_after = sorted_unique(assigned);
    match protocol {
        RebalanceProtocol::Eager => {
            let mut events = Vec::new();
            if !owned.is_empty() {
                log::warn!(
                    "eager rebalance completed while still owning {} partitions; revoking them first",
                    owned.len()
                );
                events.push(RebalanceEvent::Revoke(sorted_unique(owned)));
            }
            events.push(RebalanceEvent::Assign(owned_after.clone()));
            RebalancePlan {
                events,
                owned_after,
                rejoin: false,
            }
        }
        RebalanceProtocol::Cooperative => {
            let d = diff(owned, assigned);
            let rejoin = !d.revoked.is_empty();
            let mut events = Vec::new();
            if rejoin {
                log::info!(
                    "cooperative rebalance revokes {} partitions; rejoining for the follow-up",
                    d.revoked.len()
                );
                events.push(RebalanceEvent::Revoke(d.revoked));
            }
            events.push(RebalanceEvent::Assign(d.added));
            RebalancePlan {
                events,
                owned_after,
                rejoin,
            }
        }
    }
}

/// The events due when our assignment is lost (the generation or member id became invalid, or we
/// left because `max.poll.interval.ms` expired): everything we own is lost, under either protocol.
pub(crate) fn on_lost(owned: &[TopicPartition]) -> Vec<RebalanceEvent> {
    if owned.is_empty() {
        Vec::new()
    } else {
        vec![RebalanceEvent::Lost(sorted_unique(owned))]
    }
}

/// The events due when we leave the group on purpose (close, unsubscribe): revoke everything, so
/// offsets are committed while the generation is still ours.
pub(crate) fn on_leave(owned: &[TopicPartition]) -> Vec<RebalanceEvent> {
    if owned.is_empty() {
        Vec::new()
    } else {
        vec![RebalanceEvent::Revoke(sorted_unique(owned))]
    }
}

fn sorted_unique(parts: &[TopicPartition]) -> Vec<TopicPartition> {
    let set: BTreeSet<&TopicPartition> = parts.iter().collect();
    set.into_iter().cloned().collect()
}

// ----------------------------------------------------------------------------------------------
// Error classification

/// The names a fatal error message needs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ErrorContext<'a> {
    /// The group id.
    pub group_id: &'a str,
    /// Our `group.instance.id`, if static.
    pub group_instance_id: Option<&'a str>,
}

/// Java's `ConsumerCoordinator`/`AbstractCoordinator` handling of a group response's error code,
/// as a table. Deviations, each towards retrying rather than failing: COORDINATOR_LOAD_IN_PROGRESS
/// on SyncGroup rejoins and on Heartbeat retries (Java reports both as unexpected), and
/// INVALID_REQUEST on SyncGroup rejoins (librdkafka's mock, see
/// `quirks::LATE_SYNC_GROUP_REFUSAL`).
pub(crate) fn classify(api: GroupApi, code: KafkaCode, ctx: &ErrorContext<'_>) -> ErrorAction {
    use ErrorAction::*;
    use GroupApi::*;
    if code == KafkaCode::NONE {
        return Proceed;
    }
    match (api, code) {
        (LeaveGroup, _) => Proceed,
        (_, KafkaCode::COORDINATOR_NOT_AVAILABLE | KafkaCode::NOT_COORDINATOR) => {
            RediscoverCoordinator
        }
        (OffsetCommit, KafkaCode::REQUEST_TIMED_OUT) => RediscoverCoordinator,
        (JoinGroup | Heartbeat | OffsetCommit, KafkaCode::COORDINATOR_LOAD_IN_PROGRESS) => Retry,
        (SyncGroup, KafkaCode::COORDINATOR_LOAD_IN_PROGRESS) => Rejoin,
        // librdkafka's mock refuses a follower's SyncGroup that comes after the leader's.
        (SyncGroup, quirks::LATE_SYNC_GROUP_REFUSAL) => Rejoin,
        (OffsetCommit, KafkaCode::UNKNOWN_TOPIC_OR_PARTITION) => Retry,
        (_, KafkaCode::REBALANCE_IN_PROGRESS) => Rejoin,
        (JoinGroup, KafkaCode::MEMBER_ID_REQUIRED) => Rejoin,
        (_, KafkaCode::UNKNOWN_MEMBER_ID) => ResetAndRejoin {
            member_unknown: true,
        },
        (_, KafkaCode::ILLEGAL_GENERATION) => ResetAndRejoin {
            member_unknown: false,
        },
        _ => Fatal(fatal(api, code, ctx)),
    }
}

fn fatal(api: GroupApi, code: KafkaCode, ctx: &ErrorContext<'_>) -> FatalError {
    let group = ctx.group_id;
    let detail = match code {
        KafkaCode::FENCED_INSTANCE_ID => format!(
            "group.instance.id {:?} is registered by another member of group {group:?}: two consumers \
             share this group.instance.id; give each its own",
            ctx.group_instance_id.unwrap_or("")
        ),
        KafkaCode::INCONSISTENT_GROUP_PROTOCOL => format!(
            "no partition.assignment.strategy in common with the members of group {group:?}"
        ),
        KafkaCode::INVALID_SESSION_TIMEOUT => {
            "session.timeout.ms is outside the broker's group.min/max.session.timeout.ms".to_string()
        }
        KafkaCode::INVALID_GROUP_ID => format!("group id {group:?} is invalid"),
        KafkaCode::GROUP_AUTHORIZATION_FAILED => format!("not authorized to use group {group:?}"),
        KafkaCode::TOPIC_AUTHORIZATION_FAILED => "not authorized to commit to the topic".to_string(),
        KafkaCode::GROUP_MAX_SIZE_REACHED => {
            format!("group {group:?} already has group.max.size members")
        }
        KafkaCode::OFFSET_METADATA_TOO_LARGE => "the commit metadata is too large".to_string(),
        KafkaCode::INVALID_COMMIT_OFFSET_SIZE => "the offset commit request is too large".to_string(),
        KafkaCode::UNSUPPORTED_VERSION => "the broker does not support this request version".to_string(),
        _ => "unexpected error".to_string(),
    };
    FatalError {
        api,
        code,
        reason: detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(topic: &str, partition: i32) -> TopicPartition {
        TopicPartition::new(topic, partition)
    }

    fn parts(spec: &[(&str, i32)]) -> Vec<TopicPartition> {
        spec.iter().map(|(t, p)| tp(t, *p)).collect()
    }

    const CTX: ErrorContext<'static> = ErrorContext {
        group_id: "payments",
        group_instance_id: Some("worker-7"),
    };

    #[test]
    fn diff_splits_added_revoked_retained() {
        let d = diff(
            &parts(&[("a", 0), ("a", 1), ("b", 0)]),
            &parts(&[("b", 0), ("a", 1), ("c", 3), ("c", 3)]),
        );
        assert_eq!(d.added, parts(&[("c", 3)]));
        assert_eq!(d.revoked, parts(&[("a", 0)]));
        assert_eq!(d.retained, parts(&[("a", 1), ("b", 0)]));
    }

    #[test]
    fn eager_revokes_everything_before_join_and_assigns_everything_after() {
        let owned = parts(&[("t", 1), ("t", 0)]);
        assert_eq!(
            before_join(RebalanceProtocol::Eager, &owned),
            vec![RebalanceEvent::Revoke(parts(&[("t", 0), ("t", 1)]))]
        );
        let plan = after_sync(RebalanceProtocol::Eager, &[], &parts(&[("t", 1), ("t", 2)]));
        assert_eq!(
            plan.events,
            vec![RebalanceEvent::Assign(parts(&[("t", 1), ("t", 2)]))]
        );
        assert!(!plan.rejoin);
        assert_eq!(plan.owned_after, parts(&[("t", 1), ("t", 2)]));
    }

    #[test]
    fn eager_still_owning_at_sync_revokes_first() {
        let plan = after_sync(
            RebalanceProtocol::Eager,
            &parts(&[("t", 1)]),
            &parts(&[("t", 1)]),
        );
        assert_eq!(
            plan.events,
            vec![
                RebalanceEvent::Revoke(parts(&[("t", 1)])),
                RebalanceEvent::Assign(parts(&[("t", 1)]))
            ]
        );
    }

    #[test]
    fn eager_empty_assignment_still_completes_with_an_assign_event() {
        assert!(before_join(RebalanceProtocol::Eager, &[]).is_empty());
        let plan = after_sync(RebalanceProtocol::Eager, &[], &[]);
        assert_eq!(plan.events, vec![RebalanceEvent::Assign(vec![])]);
    }

    #[test]
    fn cooperative_keeps_everything_through_the_join() {
        assert!(before_join(RebalanceProtocol::Cooperative, &parts(&[("t", 0)])).is_empty());
    }

    #[test]
    fn cooperative_revokes_only_moved_then_assigns_only_new_then_rejoins() {
        let owned = parts(&[("t", 0), ("t", 1), ("t", 2)]);
        let assigned = parts(&[("t", 0), ("t", 2), ("u", 0)]);
        let plan = after_sync(RebalanceProtocol::Cooperative, &owned, &assigned);
        assert_eq!(
            plan.events,
            vec![
                RebalanceEvent::Revoke(parts(&[("t", 1)])),
                RebalanceEvent::Assign(parts(&[("u", 0)]))
            ]
        );
        assert!(plan.rejoin);
        assert_eq!(plan.owned_after, parts(&[("t", 0), ("t", 2), ("u", 0)]));
    }

    #[test]
    fn cooperative_without_revocation_needs_no_rejoin() {
        let owned = parts(&[("t", 0)]);
        let plan = after_sync(
            RebalanceProtocol::Cooperative,
            &owned,
            &parts(&[("t", 0), ("t", 1)]),
        );
        assert_eq!(
            plan.events,
            vec![RebalanceEvent::Assign(parts(&[("t", 1)]))]
        );
        assert!(!plan.rejoin);
        let plan = after_sync(RebalanceProtocol::Cooperative, &owned, &owned);
        assert_eq!(plan.events, vec![RebalanceEvent::Assign(vec![])]);
        assert!(!plan.rejoin);
    }

    #[test]
    fn lost_and_leave_cover_everything_owned() {
        let owned = parts(&[("t", 3), ("t", 0)]);
        assert_eq!(
            on_lost(&owned),
            vec![RebalanceEvent::Lost(parts(&[("t", 0), ("t", 3)]))]
        );
        assert_eq!(
            on_leave(&owned),
            vec![RebalanceEvent::Revoke(parts(&[("t", 0), ("t", 3)]))]
        );
        assert!(on_lost(&[]).is_empty());
        assert!(on_leave(&[]).is_empty());
    }

    #[test]
    fn classification_table_follows_java() {
        use ErrorAction::*;
        use GroupApi::*;
        let lost_all = ResetAndRejoin {
            member_unknown: true,
        };
        let lost_gen = ResetAndRejoin {
            member_unknown: false,
        };
        let table = [
            (JoinGroup, KafkaCode::NONE, Proceed),
            (JoinGroup, KafkaCode::MEMBER_ID_REQUIRED, Rejoin),
            (JoinGroup, KafkaCode::REBALANCE_IN_PROGRESS, Rejoin),
            (JoinGroup, KafkaCode::COORDINATOR_LOAD_IN_PROGRESS, Retry),
            (
                JoinGroup,
                KafkaCode::COORDINATOR_NOT_AVAILABLE,
                RediscoverCoordinator,
            ),
            (JoinGroup, KafkaCode::NOT_COORDINATOR, RediscoverCoordinator),
            (JoinGroup, KafkaCode::UNKNOWN_MEMBER_ID, lost_all.clone()),
            (JoinGroup, KafkaCode::ILLEGAL_GENERATION, lost_gen.clone()),
            (SyncGroup, KafkaCode::NONE, Proceed),
            (SyncGroup, KafkaCode::REBALANCE_IN_PROGRESS, Rejoin),
            (SyncGroup, KafkaCode::COORDINATOR_LOAD_IN_PROGRESS, Rejoin),
            (SyncGroup, KafkaCode::NOT_COORDINATOR, RediscoverCoordinator),
            (SyncGroup, KafkaCode::UNKNOWN_MEMBER_ID, lost_all.clone()),
            (SyncGroup, KafkaCode::ILLEGAL_GENERATION, lost_gen.clone()),
            (Heartbeat, KafkaCode::NONE, Proceed),
            (Heartbeat, KafkaCode::REBALANCE_IN_PROGRESS, Rejoin),
            (Heartbeat, KafkaCode::COORDINATOR_LOAD_IN_PROGRESS, Retry),
            (
                Heartbeat,
                KafkaCode::COORDINATOR_NOT_AVAILABLE,
                RediscoverCoordinator,
            ),
            (Heartbeat, KafkaCode::NOT_COORDINATOR, RediscoverCoordinator),
            (Heartbeat, KafkaCode::UNKNOWN_MEMBER_ID, lost_all.clone()),
            (Heartbeat, KafkaCode::ILLEGAL_GENERATION, lost_gen.clone()),
            (LeaveGroup, KafkaCode::UNKNOWN_MEMBER_ID, Proceed),
            (LeaveGroup, KafkaCode::NOT_COORDINATOR, Proceed),
            (OffsetCommit, KafkaCode::NONE, Proceed),
            (OffsetCommit, KafkaCode::COORDINATOR_LOAD_IN_PROGRESS, Retry),
            (OffsetCommit, KafkaCode::UNKNOWN_TOPIC_OR_PARTITION, Retry),
            (
                OffsetCommit,
                KafkaCode::REQUEST_TIMED_OUT,
                RediscoverCoordinator,
            ),
            (
                OffsetCommit,
                KafkaCode::NOT_COORDINATOR,
                RediscoverCoordinator,
            ),
            (OffsetCommit, KafkaCode::REBALANCE_IN_PROGRESS, Rejoin),
            (OffsetCommit, KafkaCode::UNKNOWN_MEMBER_ID, lost_all),
            (OffsetCommit, KafkaCode::ILLEGAL_GENERATION, lost_gen),
        ];
        for (api, code, want) in table {
            assert_eq!(classify(api, code, &CTX), want, "{api} {code}");
        }
    }

    #[test]
    fn fatal_errors_carry_a_clear_message() {
        for (api, code) in [
            (GroupApi::JoinGroup, KafkaCode::INCONSISTENT_GROUP_PROTOCOL),
            (GroupApi::JoinGroup, KafkaCode::INVALID_SESSION_TIMEOUT),
            (GroupApi::JoinGroup, KafkaCode::INVALID_GROUP_ID),
            (GroupApi::JoinGroup, KafkaCode::GROUP_MAX_SIZE_REACHED),
            (GroupApi::JoinGroup, KafkaCode::UNSUPPORTED_VERSION),
            (GroupApi::SyncGroup, KafkaCode::GROUP_AUTHORIZATION_FAILED),
            (GroupApi::Heartbeat, KafkaCode::GROUP_AUTHORIZATION_FAILED),
            (GroupApi::OffsetCommit, KafkaCode::OFFSET_METADATA_TOO_LARGE),
            (
                GroupApi::OffsetCommit,
                KafkaCode::TOPIC_AUTHORIZATION_FAILED,
            ),
            (GroupApi::Heartbeat, KafkaCode(9999)),
        ] {
            match classify(api, code, &CTX) {
                ErrorAction::Fatal(e) => {
                    assert_eq!((e.api, e.code), (api, code));
                    let shown = e.to_string();
                    assert!(shown.starts_with(&api.to_string()), "{shown}");
                    assert!(shown.contains(&code.to_string()), "{shown}");
                }
                other => panic!("{api} {code} gave {other:?}"),
            }
        }
    }

    #[test]
    fn fenced_instance_id_is_fatal_and_names_the_instance() {
        for api in [
            GroupApi::JoinGroup,
            GroupApi::SyncGroup,
            GroupApi::Heartbeat,
            GroupApi::OffsetCommit,
        ] {
            let ErrorAction::Fatal(e) = classify(api, KafkaCode::FENCED_INSTANCE_ID, &CTX) else {
                panic!("{api}: FENCED_INSTANCE_ID must be fatal");
            };
            assert!(e.reason.contains("\"worker-7\""), "{}", e.reason);
            assert!(e.to_string().contains("FencedInstanceId"), "{e}");
            assert!(e.to_string().contains("payments"));
        }
    }

    #[test]
    fn a_late_follower_sync_rejoins_instead_of_failing() {
        let ctx = ErrorContext {
            group_id: "g",
            group_instance_id: None,
        };
        assert_eq!(
            classify(GroupApi::SyncGroup, KafkaCode::INVALID_REQUEST, &ctx),
            ErrorAction::Rejoin
        );
        assert!(matches!(
            classify(GroupApi::JoinGroup, KafkaCode::INVALID_REQUEST, &ctx),
            ErrorAction::Fatal(_)
        ));
    }
}
