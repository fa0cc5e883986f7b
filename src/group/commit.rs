//! Offset commits bound to a generation: the one place that sends a group commit, checks it
//! against the session right before the request, and feeds a refusal back to the session.

use super::consumer_group::reconcile::{stale_epoch_retry_named, StaleEpochRetry};
use super::error::CommitError;
use super::membership::ErrorContext;
use super::requests::MemberIdentity;
use super::session::{membership_refusal, CommitRefusal, Shared};
use crate::wire::{self, CommitIdentity, KafkaCode, WireError};
use crate::TopicPartition;

/// Each partition's own commit result: one refused partition does not fail the others.
pub type CommitResults = Vec<(TopicPartition, Result<(), WireError>)>;

/// Sends one OffsetCommit and returns each partition's result: a client's `offset_commit` in
/// the product, an in-memory coordinator in tests.
pub(crate) type OffsetCommitSend<'a> = dyn FnMut(&CommitIdentity<'_>, &[wire::OffsetCommitEntry]) -> Result<CommitResults, WireError>
    + 'a;

/// Which commit is being made: it decides what a refusal means and whether a refusal for a
/// stale member epoch may be sent again with the current one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitKind {
    /// A revocation's or the close's, inside a rebalance callback: a refusal that ends the
    /// membership asks for a rejoin (the partitions were fenced by the revocation already).
    Handoff,
    /// The application's `commit()`, between polls, with offsets read just before it.
    Application,
    /// A paced commit from the commit thread, between polls, with offsets read when it was
    /// queued: never sent again with a newer member epoch, since the partition may have been
    /// lost and assigned back since those offsets were read, and a retry would then carry an
    /// old position over a newer owner's commit. The next interval reads them again instead.
    Paced,
}

impl CommitKind {
    /// Between polls, a refusal that ends the membership loses the assignment at once.
    fn between_polls(self) -> bool {
        !matches!(self, CommitKind::Handoff)
    }
}

/// Commits `offsets` carrying `identity`. The caller gets each partition's error, and must not
/// retry it into success: the partitions may belong to someone else now.
///
/// When the coordinator says the membership itself is over (UNKNOWN_MEMBER_ID: we were removed,
/// ILLEGAL_GENERATION: the group moved on without us, FENCED_INSTANCE_ID: another process took
/// our `group.instance.id`) and the commit is made between polls (`kind` is not a handoff), the
/// assignment ends here as lost, the way the heartbeat thread ends it on
/// the same answers: fenced through the hook at once, reported as lost at the next poll, never
/// revoked (a revocation would let in-flight work run on under leases that still look current,
/// and commit again with the dead identity). See [`SessionState::commit_refused`].
pub(crate) fn commit_offsets(
    send: &mut OffsetCommitSend<'_>,
    shared: &Shared,
    group_id: &str,
    instance_id: Option<&str>,
    identity: &MemberIdentity,
    offsets: &[wire::OffsetCommitEntry],
    kind: CommitKind,
) -> Result<CommitResults, CommitError> {
    shared
        .lock()
        .may_commit(identity)
        .map_err(|refusal| match refusal {
            CommitRefusal::NotInGeneration => CommitError::NotInGeneration {
                group_id: group_id.to_string(),
            },
            CommitRefusal::GenerationOver {
                current_generation_id,
            } => CommitError::GenerationOver {
                generation_id: identity.generation_id,
                current_generation_id,
            },
        })?;
    let who = CommitIdentity {
        group_id,
        generation_id_or_member_epoch: identity.generation_id,
        member_id: &identity.member_id,
        group_instance_id: instance_id,
    };
    let mut results = send(&who, offsets).map_err(CommitError::Wire)?;
    if kind != CommitKind::Paced {
        retry_stale_epoch(send, shared, &who, offsets, &mut results)?;
    }
    let refusal = membership_refusal(
        results
            .iter()
            .filter_map(|(_, r)| r.as_ref().err().and_then(WireError::kafka_code)),
    );
    if let Some(code) = refusal {
        let ctx = ErrorContext {
            group_id,
            group_instance_id: instance_id,
        };
        shared
            .lock()
            .commit_refused(identity, code, kind.between_polls(), &ctx);
    }
    Ok(results)
}

/// KIP-848: a commit refused with STALE_MEMBER_EPOCH (the broker moved the member to a newer
/// epoch than the one the commit carried) is sent again with the member's current epoch, only
/// for the partitions the member still owns (`reconcile::stale_epoch_retry_named`): another
/// member may own the rest, and the broker would accept the current epoch even for a partition
/// that moved (KIP-1251), so the client must not send it. When the session has not heard a
/// newer epoch yet, the refusal stands; the next commit carries the new epoch.
fn retry_stale_epoch(
    send: &mut OffsetCommitSend<'_>,
    shared: &Shared,
    who: &CommitIdentity<'_>,
    offsets: &[wire::OffsetCommitEntry],
    results: &mut CommitResults,
) -> Result<(), CommitError> {
    let refused: Vec<TopicPartition> = results
        .iter()
        .filter(|(_, r)| {
            r.as_ref().err().and_then(WireError::kafka_code) == Some(KafkaCode::STALE_MEMBER_EPOCH)
        })
        .map(|(tp, _)| tp.clone())
        .collect();
    if refused.is_empty() {
        return Ok(());
    }
    let (current, owned) = {
        let state = shared.lock();
        let me = state.identity();
        let current = (me.member_id == who.member_id).then_some(me.generation_id);
        (current, state.owned().to_vec())
    };
    let decision =
        stale_epoch_retry_named(who.generation_id_or_member_epoch, current, &owned, &refused);
    let StaleEpochRetry::Retry {
        epoch,
        partitions,
        dropped,
    } = decision
    else {
        log::info!(
            "commit refused with STALE_MEMBER_EPOCH for {} partition(s) at epoch {}: no newer \
             epoch known yet ({decision:?})",
            refused.len(),
            who.generation_id_or_member_epoch
        );
        return Ok(());
    };
    log::info!(
        "commit refused with STALE_MEMBER_EPOCH at epoch {}: retrying {} still-owned \
         partition(s) with epoch {epoch}, not {} moved one(s)",
        who.generation_id_or_member_epoch,
        partitions.len(),
        dropped.len()
    );
    let again: Vec<wire::OffsetCommitEntry> = offsets
        .iter()
        .filter(|o| partitions.contains(&o.tp))
        .cloned()
        .collect();
    if again.is_empty() {
        return Ok(());
    }
    let retry_as = CommitIdentity {
        generation_id_or_member_epoch: epoch,
        ..*who
    };
    let retried = send(&retry_as, &again).map_err(CommitError::Wire)?;
    for (tp, result) in retried {
        if let Some(slot) = results.iter_mut().find(|(t, _)| *t == tp) {
            slot.1 = result;
        }
    }
    Ok(())
}
