//! Group membership as the poll thread sees it, and its pure decisions: the [`Membership`] trait
//! every member type implements (one per group protocol, and the in-memory members tests drive
//! the consumer with); what a new assignment means for the partitions we own, as the
//! [`Change`]s the consumer must apply in order; and what each classic group error code asks us
//! to do.
//!
//! The decisions are kept free of sockets and threads so that every rule is a table or a set
//! difference that a unit test pins down (error codes are named by the one table,
//! [`KafkaCode`]). The session (`group/session.rs`) applies them to the membership's state, and
//! the threads that perform the JoinGroup/SyncGroup/Heartbeat I/O only follow the session's
//! decisions.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use super::assignor::RebalanceProtocol;
use super::changes::{
    Change, ChangeId, CommitKind, CommitResults, Decision, FenceHook, MembershipView,
    OffsetCommitSend, Origin,
};
use super::error::{CommitError, GroupError};
pub(crate) use super::outcome::ErrorAction;
use super::outcome::{FatalError, GroupApi};
use super::quirks;
use super::requests::MemberIdentity;
use crate::guard::SessionBound;
use crate::wire::{FetchStats, KafkaCode, Nudge, OffsetCommitEntry, RecordSource};
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

/// The partitions due for revocation before sending JoinGroup. Eager: everything we own (the
/// new owner may be anyone, and it starts as soon as the group completes). Cooperative:
/// nothing; we keep consuming through the rebalance and revoke only what moves once the
/// assignment is known.
pub(crate) fn before_join(
    protocol: RebalanceProtocol,
    owned: &[TopicPartition],
) -> Vec<TopicPartition> {
    match protocol {
        RebalanceProtocol::Eager => sorted_unique(owned),
        RebalanceProtocol::Cooperative => Vec::new(),
    }
}

/// The changes due once SyncGroup delivered `assigned` to `identity` (`leader` when we computed
/// it), given what we own at that moment, as the decided change `id`: a revocation (when
/// something is taken away) and always an assignment, which is the last step even when empty,
/// so the consumer (and storm detection) sees every rebalance finish, as Java calls
/// `onPartitionsAssigned` every time. Revoked and lost are different: a revoked partition is
/// drained and committed, a lost one only fenced.
///
/// Eager: we normally own nothing by now ([`before_join`] revoked it all); if we still do, it is
/// revoked first, and then the whole assignment is assigned. Cooperative: revoke only what was
/// taken away, assign only what is new, and ask for the follow-up rejoin (KIP-429) when
/// something was revoked.
pub(crate) fn after_sync(
    protocol: RebalanceProtocol,
    owned: &[TopicPartition],
    assigned: &[TopicPartition],
    identity: &MemberIdentity,
    leader: bool,
    id: ChangeId,
) -> Vec<Change> {
    let owned_after = sorted_unique(assigned);
    let (revoke, assign, rejoin) = match protocol {
        RebalanceProtocol::Eager => {
            if !owned.is_empty() {
                log::warn!(
                    "eager rebalance completed while still owning {} partitions; revoking them first",
                    owned.len()
                );
            }
            (sorted_unique(owned), owned_after.clone(), false)
        }
        RebalanceProtocol::Cooperative => {
            let d = diff(owned, assigned);
            let rejoin = !d.revoked.is_empty();
            if rejoin {
                log::info!(
                    "cooperative rebalance revokes {} partitions; rejoining for the follow-up",
                    d.revoked.len()
                );
            }
            (d.revoked, d.added, rejoin)
        }
    };
    let decision = Decision(Origin::Session {
        id,
        owned_after,
        rejoin,
        machine: None,
    });
    let mut changes = Vec::with_capacity(2);
    if !revoke.is_empty() {
        changes.push(Change::Revoke {
            identity: identity.clone(),
            partitions: revoke,
            fenced: None,
            decision: decision.clone(),
        });
    }
    changes.push(Change::Assign {
        identity: identity.clone(),
        partitions: assign,
        leader,
        decision,
    });
    changes
}

/// The partitions reported lost when our assignment is lost (the generation or member id
/// became invalid, or we left because `max.poll.interval.ms` expired) or handed back when we
/// leave on purpose (close, unsubscribe: revoked, so offsets are committed while the generation
/// is still ours): everything we own, under either protocol, sorted.
pub(crate) fn everything(owned: &[TopicPartition]) -> Vec<TopicPartition> {
    sorted_unique(owned)
}

fn sorted_unique(parts: &[TopicPartition]) -> Vec<TopicPartition> {
    let set: BTreeSet<&TopicPartition> = parts.iter().collect();
    set.into_iter().cloned().collect()
}

/// A group member as the poll thread drives it, whatever the protocol: take the next change,
/// commit with an identity, acknowledge. The consumer, its batches and its handoff driver are
/// written against this trait only, so they run the same over the classic protocol, KIP-848,
/// and the in-memory members of the tests.
pub trait Membership: Send {
    /// The next ownership change to apply, waiting up to `timeout` for the membership (an
    /// eager round runs inside this call); `None` once the member is stable or the time is up.
    /// Losses come first, then the decided change, one event at a time.
    fn next_change(&mut self, timeout: Duration) -> Result<Option<Change>, GroupError>;

    /// `change`, handed out by [`next_change`](Self::next_change) or
    /// [`closing`](Self::closing), was applied and comes back as its own acknowledgement: the
    /// membership may go on. A [`Change::Lost`] is not acknowledged.
    fn acknowledge(&mut self, change: Change);

    /// Closing: the losses not reported yet, then the revocation of everything still owned (in
    /// the current generation), for the driver to hand off before [`leave`](Self::leave).
    fn closing(&mut self) -> Vec<Change>;

    /// Leaves the group (unless static) and stops the membership's threads.
    fn leave(&mut self) -> Result<(), GroupError>;

    /// Commits synchronously as `identity`, after the background commit in flight (if any) was
    /// answered, so commits reach the coordinator in the order they were made. `kind` says what
    /// a refusal means (see [`CommitKind`]).
    fn commit_as(
        &mut self,
        identity: &MemberIdentity,
        offsets: &[OffsetCommitEntry],
        kind: CommitKind,
    ) -> Result<CommitResults, CommitError>;

    /// Commits synchronously as `identity` through `send` on the calling thread, after the
    /// background commit in flight (if any) was answered: the same check against the session
    /// right before the request, and the same judgement of a refusal, as every other commit.
    /// `Consumer::run_transactional` sends its offsets this way, inside the transaction
    /// (TxnOffsetCommit), because they must travel with the outputs of the records they cover.
    fn commit_through(
        &mut self,
        identity: &MemberIdentity,
        offsets: &[OffsetCommitEntry],
        kind: CommitKind,
        send: &mut OffsetCommitSend<'_>,
    ) -> Result<CommitResults, CommitError>;

    /// True when an assignment must raise its partitions' fencing token before their records
    /// are handed out (`consumer/fencing.rs`). A member of no group is given partitions nobody
    /// else is given, and commits only when the application asks: it raises none.
    fn fences_assignments(&self) -> bool {
        true
    }

    /// Commits synchronously as the current identity (the application's commit between polls,
    /// with offsets read just before it).
    fn commit(&mut self, offsets: &[OffsetCommitEntry]) -> Result<CommitResults, CommitError> {
        let identity = self.identity();
        self.commit_as(&identity, offsets, CommitKind::Application)
    }

    /// Sends a commit as the current identity without waiting for it (a paced commit); the
    /// offsets come back when one is still in flight or its answer was not taken.
    fn commit_in_background(
        &mut self,
        offsets: Vec<OffsetCommitEntry>,
    ) -> Result<(), Vec<OffsetCommitEntry>>;

    /// The background commit's answer, once it arrived; never waits.
    fn commit_answer(&mut self) -> Option<Result<CommitResults, CommitError>>;

    /// Waits until the background commit (if any) was answered; its answer stays for
    /// [`commit_answer`](Self::commit_answer).
    fn settle_commit(&mut self);

    /// True while a background commit was not answered, or its answer not taken.
    fn commit_in_flight(&self) -> bool;

    /// Where the poll thread reads records and positions: the member's wire client (an
    /// in-memory log in tests).
    fn records(&mut self) -> &mut dyn RecordSource;

    /// Bytes fetched per broker and the partitions read from preferred read replicas (KIP-392),
    /// for the consumer's stats; empty for a membership whose records come from no broker.
    fn fetch_stats(&self) -> FetchStats {
        FetchStats::default()
    }

    /// The generation (or member epoch) and member id now.
    fn identity(&self) -> MemberIdentity;

    /// The partitions owned now.
    fn owned(&self) -> Vec<TopicPartition>;

    /// Eager (everything stops for a rebalance) or incremental (only what moves stops).
    fn rebalance_protocol(&self) -> RebalanceProtocol;

    /// True when records of what we own may be fetched and handed out.
    fn may_fetch(&self) -> bool;

    /// True when the batch should end so a change can be applied (eager: any rebalance).
    fn batch_boundary_due(&self) -> bool;

    /// The poll thread is inside the library (`max.poll.interval.ms` does not run) until
    /// [`leave_poll`](Self::leave_poll).
    fn enter_poll(&self);

    /// The application has control again: `max.poll.interval.ms` runs from now.
    fn leave_poll(&self);

    /// Waits up to `timeout` while `bound` has lapsed and the membership has nothing new.
    fn wait_while_session_lapsed(&self, bound: &SessionBound, timeout: Duration);

    /// Ends the poll thread's wait in [`next_change`](Self::next_change) or
    /// [`wait_while_session_lapsed`](Self::wait_while_session_lapsed) from any thread (the
    /// consumer's waker): the wait returns as if its time were up. An eager round running on
    /// the poll thread is not interrupted (its requests are on the wire).
    fn nudge(&self) -> Nudge;

    /// A handle that reads the identity and ownership from any thread.
    fn view(&self) -> MembershipView;

    /// Lets every answered request renew `bound` (leases expire by time too).
    fn bound_session(&self, bound: Arc<SessionBound>);

    /// Fences revocations through `hook` the moment they are decided.
    fn fence_revocations_with(&self, hook: FenceHook);

    /// Makes the membership thread panic (tests of a dead membership thread only).
    #[doc(hidden)]
    fn panic_membership_thread(&self);

    /// Makes the commit thread panic at its next commit (tests of a dead commit thread only;
    /// a membership without one has nothing to do).
    #[doc(hidden)]
    fn panic_commit_thread(&self) {}
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

    /// Each step of a change, as ("revoke" | "assign", partitions).
    type Steps = Vec<(&'static str, Vec<TopicPartition>)>;

    /// The steps of `changes`, and the decision they share.
    fn steps(changes: &[Change]) -> (Steps, Origin) {
        let mut decided = None;
        let steps = changes
            .iter()
            .map(|change| match change {
                Change::Revoke {
                    partitions,
                    decision,
                    ..
                } => {
                    decided = Some(decision.0.clone());
                    ("revoke", partitions.clone())
                }
                Change::Assign {
                    partitions,
                    decision,
                    ..
                } => {
                    decided = Some(decision.0.clone());
                    ("assign", partitions.clone())
                }
                Change::Lost { partitions, .. } => ("lost", partitions.clone()),
            })
            .collect();
        (steps, decided.expect("a decided change"))
    }

    fn sync(
        protocol: RebalanceProtocol,
        owned: &[TopicPartition],
        assigned: &[TopicPartition],
    ) -> (Steps, Vec<TopicPartition>, bool) {
        let me = MemberIdentity {
            generation_id: 3,
            member_id: "m".to_string(),
        };
        let (steps, decided) = steps(&after_sync(
            protocol,
            owned,
            assigned,
            &me,
            false,
            ChangeId(1),
        ));
        let Origin::Session {
            owned_after,
            rejoin,
            id,
            machine,
        } = decided
        else {
            panic!("a session's decision");
        };
        assert_eq!((id, machine), (ChangeId(1), None));
        (steps, owned_after, rejoin)
    }

    #[test]
    fn eager_revokes_everything_before_join_and_assigns_everything_after() {
        let owned = parts(&[("t", 1), ("t", 0)]);
        assert_eq!(
            before_join(RebalanceProtocol::Eager, &owned),
            parts(&[("t", 0), ("t", 1)])
        );
        let (steps, owned_after, rejoin) =
            sync(RebalanceProtocol::Eager, &[], &parts(&[("t", 1), ("t", 2)]));
        assert_eq!(steps, vec![("assign", parts(&[("t", 1), ("t", 2)]))]);
        assert!(!rejoin);
        assert_eq!(owned_after, parts(&[("t", 1), ("t", 2)]));
    }

    #[test]
    fn eager_still_owning_at_sync_revokes_first() {
        let (steps, _, _) = sync(
            RebalanceProtocol::Eager,
            &parts(&[("t", 1)]),
            &parts(&[("t", 1)]),
        );
        assert_eq!(
            steps,
            vec![
                ("revoke", parts(&[("t", 1)])),
                ("assign", parts(&[("t", 1)]))
            ]
        );
    }

    #[test]
    fn eager_empty_assignment_still_completes_with_an_assign_event() {
        assert!(before_join(RebalanceProtocol::Eager, &[]).is_empty());
        let (steps, _, _) = sync(RebalanceProtocol::Eager, &[], &[]);
        assert_eq!(steps, vec![("assign", vec![])]);
    }

    #[test]
    fn cooperative_keeps_everything_through_the_join() {
        assert!(before_join(RebalanceProtocol::Cooperative, &parts(&[("t", 0)])).is_empty());
    }

    #[test]
    fn cooperative_revokes_only_moved_then_assigns_only_new_then_rejoins() {
        let owned = parts(&[("t", 0), ("t", 1), ("t", 2)]);
        let assigned = parts(&[("t", 0), ("t", 2), ("u", 0)]);
        let (steps, owned_after, rejoin) = sync(RebalanceProtocol::Cooperative, &owned, &assigned);
        assert_eq!(
            steps,
            vec![
                ("revoke", parts(&[("t", 1)])),
                ("assign", parts(&[("u", 0)]))
            ]
        );
        assert!(rejoin);
        assert_eq!(owned_after, parts(&[("t", 0), ("t", 2), ("u", 0)]));
    }

    #[test]
    fn cooperative_without_revocation_needs_no_rejoin() {
        let owned = parts(&[("t", 0)]);
        let (steps, _, rejoin) = sync(
            RebalanceProtocol::Cooperative,
            &owned,
            &parts(&[("t", 0), ("t", 1)]),
        );
        assert_eq!(steps, vec![("assign", parts(&[("t", 1)]))]);
        assert!(!rejoin);
        let (steps, _, rejoin) = sync(RebalanceProtocol::Cooperative, &owned, &owned);
        assert_eq!(steps, vec![("assign", vec![])]);
        assert!(!rejoin);
    }

    #[test]
    fn lost_and_leave_cover_everything_owned() {
        let owned = parts(&[("t", 3), ("t", 0)]);
        assert_eq!(everything(&owned), parts(&[("t", 0), ("t", 3)]));
        assert!(everything(&[]).is_empty());
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
