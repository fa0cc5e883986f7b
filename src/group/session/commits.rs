//! The session's commit transition: what a refused commit does to the membership
//! ([`SessionState::commit_refused`]). Whether a commit may be sent at all is a read of the
//! session (`SessionState::may_commit`, in `session.rs`), and which per-partition errors speak
//! about the membership is the commit's own question (`group/commit.rs`): both lie on every
//! commit's path, this file only on a refused one's.
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
    /// The coordinator refused a commit made for `identity` with `code` (one of
    /// `commit::membership_refusal`'s). For the application's commit between polls
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
