//! The heartbeat thread's transitions on the session: its tick ([`SessionState::heartbeat_due`]:
//! enforce `max.poll.interval.ms` and the session timeout, or say whom to heartbeat as) and the
//! reading of a heartbeat's answer ([`SessionState::heartbeat_answered`]), with what each one
//! tells the thread to do ([`HeartbeatDue`], [`HeartbeatVerdict`]).
//!
//! Separate from `session.rs` because only the classic protocol's heartbeat thread
//! (`group/classic/heartbeat.rs`, or the in-memory classic member in `testing/` standing in for
//! it) drives them, while the rest of the session serves the poll thread and both protocols;
//! they read and write the same state, as a child of the module that declares it.

use std::time::Instant;

use super::{Phase, SessionState};
use crate::group::membership::{classify, ErrorAction, ErrorContext};
use crate::group::outcome::{FatalError, GroupApi, LostReason};
use crate::group::requests::MemberIdentity;
use crate::wire::KafkaCode;

/// What the heartbeat thread does at a tick.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum HeartbeatDue {
    /// Nothing to send (not stable, or the session was just found lost).
    Skip,
    /// The application did not poll within `max.poll.interval.ms`: the assignment is lost and
    /// the member, which was this identity, leaves the group (unless static).
    LeaveAfterPollTimeout(MemberIdentity),
    /// Send a heartbeat as this identity.
    Send(MemberIdentity),
}

/// What a heartbeat's answer meant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum HeartbeatVerdict {
    /// About a generation that no longer matters (the poll thread rejoined, or we were reset).
    Stale,
    /// The session was renewed.
    Renewed,
    /// Retriable: nothing changes.
    Retry,
    /// Look the coordinator up again (an error code said so, or the request failed).
    RediscoverCoordinator,
    /// The group is rebalancing; `first` when this is what asked for the rejoin.
    Rebalancing {
        /// No rejoin was pending before.
        first: bool,
    },
    /// The membership is over: the assignment was lost.
    Lost,
    /// The membership is over for good: lost, and the fatal error waits for the poll thread.
    Fatal(FatalError),
}

impl SessionState {
    /// The heartbeat thread's tick at `now`: enforces `max.poll.interval.ms` and the session
    /// timeout (losing the assignment when either ran out), or says whom to heartbeat as.
    pub(crate) fn heartbeat_due(&mut self, now: Instant) -> HeartbeatDue {
        if self.phase != Phase::Stable {
            // Rejoining, a cooperative member still holds the partitions it keeps. If the
            // coordinator has not heard from it for a session (no round of ours holds it there
            // now, and no request succeeded for session.timeout.ms), it has very likely evicted
            // us and handed them on: fence them, as when stable.
            if !self.owned.is_empty() && !self.session_held(now) && self.session_expired(now) {
                self.lose(LostReason::SessionExpired, false);
            }
            return HeartbeatDue::Skip;
        }
        if !self.in_poll
            && now.saturating_duration_since(self.last_poll) > self.timeouts.max_poll_interval
        {
            let left = self.identity.clone();
            self.lose(LostReason::PollTimeout, true);
            return HeartbeatDue::LeaveAfterPollTimeout(left);
        }
        if self.session_expired(now) {
            self.lose(LostReason::SessionExpired, false);
            return HeartbeatDue::Skip;
        }
        HeartbeatDue::Send(self.identity.clone())
    }

    /// A heartbeat sent at `sent` as `me` was answered with `answer` (None: the request failed).
    pub(crate) fn heartbeat_answered(
        &mut self,
        sent: Instant,
        me: &MemberIdentity,
        answer: Option<KafkaCode>,
        ctx: &ErrorContext<'_>,
    ) -> HeartbeatVerdict {
        if self.phase != Phase::Stable || self.identity != *me {
            return HeartbeatVerdict::Stale;
        }
        let Some(code) = answer else {
            return HeartbeatVerdict::RediscoverCoordinator;
        };
        if code == KafkaCode::NONE {
            self.session_renewed(sent);
            return HeartbeatVerdict::Renewed;
        }
        match classify(GroupApi::Heartbeat, code, ctx) {
            ErrorAction::Proceed => {
                self.session_renewed(sent);
                HeartbeatVerdict::Renewed
            }
            ErrorAction::Retry => HeartbeatVerdict::Retry,
            ErrorAction::RediscoverCoordinator => HeartbeatVerdict::RediscoverCoordinator,
            ErrorAction::Rejoin => {
                // The member is alive; the group wants it to rejoin.
                self.session_renewed(sent);
                HeartbeatVerdict::Rebalancing {
                    first: self.request_rejoin("the group is rebalancing"),
                }
            }
            ErrorAction::ResetAndRejoin {
                member_unknown: reset_member_id,
            } => {
                self.lose(LostReason::Fenced(code), reset_member_id);
                HeartbeatVerdict::Lost
            }
            ErrorAction::Fatal(fatal) => {
                log::error!("heartbeat: {fatal}");
                self.lose(LostReason::Fenced(code), true);
                self.fatal = Some(fatal.clone());
                HeartbeatVerdict::Fatal(fatal)
            }
        }
    }
}
