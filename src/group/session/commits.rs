//! The session's commit transitions: whether a commit made for an identity may be sent now
//! ([`SessionState::may_commit`], and why not: [`CommitRefusal`]), which of a commit's
//! per-partition errors speak about the membership itself ([`membership_refusal`]), and what a
//! refused commit does to the membership ([`SessionState::commit_refused`]).
//!
//! Separate from `session.rs` because these are the commit path's questions to the session
//! (asked by `group/commit.rs` for every protocol), not steps of the member's own life cycle;
//! they read and write the same state, as a child of the module that declares it.

use super::{Phase, SessionState};
use crate::group::membership::{classify, ErrorAction, ErrorContext};
use crate::group::outcome::{GroupApi, LostReason};
use crate::group::requests::MemberIdentity;
use crate::wire::KafkaCode;

impl SessionState {
    /// Whether a commit made for `identity` may be sent now: checked right before the request,
    /// against the membership as it is now, so a loss detected by the heartbeat thread after the
    /// caller chose what to commit stops the commit.
    pub(crate) fn may_commit(&self, identity: &MemberIdentity) -> Result<(), CommitRefusal> {
        if identity.generation_id < 0 || identity.member_id.is_empty() {
            return Err(CommitRefusal::NotInGeneration);
        }
        if self.identity != *identity {
            return Err(CommitRefusal::GenerationOver {
                current_generation_id: self.identity.generation_id,
            });
        }
        Ok(())
    }

    /// The coordinator refused a commit made for `identity` with `code` (one of
    /// [`membership_refusal`]'s). For the application's commit between polls
    /// (`between_polls`), an answer that ends the membership loses the assignment here, as the
    /// heartbeat thread does on the same answers. Inside a revocation the partitions are fenced
    /// by the revocation already, and the JoinGroup that follows learns the same; there, and for
    /// REBALANCE_IN_PROGRESS (the generation is ending, not over), a rejoin is requested.
    pub(crate) fn commit_refused(
        &mut self,
        identity: &MemberIdentity,
        code: KafkaCode,
        between_polls: bool,
        ctx: &ErrorContext<'_>,
    ) {
        if self.identity != *identity {
            // Already reset (the heartbeat thread heard the same) or rejoined meanwhile.
            return;
        }
        if self.phase == Phase::Joining && code == KafkaCode::ILLEGAL_GENERATION {
            // A round of ours is at the coordinator and the group's generation moved past the
            // one the commit carried: most likely the round's own, completed at the broker and
            // not answered yet (a paced commit sent from the commit thread just before the
            // JoinGroup was answered). Whether the membership survived is what the JoinGroup
            // answer says; losing the assignment now would fence partitions the round keeps.
            log::info!(
                "offset commit refused for generation {} (error {code}) while our JoinGroup is \
                 at the coordinator: its answer decides",
                identity.generation_id
            );
            return;
        }
        match (between_polls, classify(GroupApi::OffsetCommit, code, ctx)) {
            (
                true,
                ErrorAction::ResetAndRejoin {
                    member_unknown: reset_member_id,
                },
            ) => {
                log::warn!(
                    "offset commit refused for generation {} (error {code}): the membership is over",
                    identity.generation_id
                );
                self.lose(LostReason::Fenced(code), reset_member_id);
            }
            (true, ErrorAction::Fatal(fatal)) => {
                log::error!("offset commit: {fatal}");
                self.lose(LostReason::Fenced(code), true);
                self.fatal = Some(fatal);
            }
            _ if self.phase == Phase::Joining => {
                // A round of ours is at the coordinator (cooperative: the membership thread runs
                // it while the application commits what it kept processing): that round is the
                // rejoin; asking for another would cost the group a needless extra round.
                log::info!(
                    "offset commit refused for generation {} (error {code}) while rejoining",
                    identity.generation_id
                );
            }
            _ => {
                if self.request_rejoin("offset commit refused for this generation") {
                    log::warn!(
                        "offset commit refused for generation {} (error {code}): rejoining",
                        identity.generation_id
                    );
                }
            }
        }
    }
}

/// Why [`SessionState::may_commit`] refused a commit (the group id is the shell's to add).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum CommitRefusal {
    /// The identity is outside any generation.
    NotInGeneration,
    /// The generation the commit was made for is over.
    GenerationOver {
        /// The member's generation now (-1 when it has none).
        current_generation_id: i32,
    },
}

/// The first per-partition commit error that speaks about the membership itself (the generation
/// or member id is no longer valid, or the group is rebalancing), if any.
pub(crate) fn membership_refusal(codes: impl IntoIterator<Item = KafkaCode>) -> Option<KafkaCode> {
    codes.into_iter().find(|&c| {
        matches!(
            c,
            KafkaCode::ILLEGAL_GENERATION
                | KafkaCode::UNKNOWN_MEMBER_ID
                | KafkaCode::FENCED_INSTANCE_ID
                | KafkaCode::REBALANCE_IN_PROGRESS
        )
    })
}
