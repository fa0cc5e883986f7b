//! The membership's session: one state type whose methods are every transition of a member's
//! life cycle, each with its reason, and the only code that writes the phase. The classic
//! protocol's transitions are here; KIP-848's, on the same state, in `session/kip848.rs`.
//!
//! Two groups of transitions on the same state live in children, as `impl SessionState` blocks:
//! - `session/commits.rs`: whether a commit may be sent now, what a refused commit does to the
//!   membership, and which commit errors speak about the membership (for `group/commit.rs`).
//! - `session/heartbeat.rs`: the classic heartbeat thread's tick and the reading of its answers.
//!
//! It does no I/O and reads no clock: the poll thread (`member.rs`) and the membership thread
//! (the classic heartbeat thread, or KIP-848's) send the requests, feed the answers in with the
//! instant they were sent, and apply what comes back (which changes to hand the poll thread,
//! whether to retry, to look the coordinator up again, to leave). Only the lost hook is called from here, under the lock,
//! because a loss must fence the partitions before anything else can happen to them, from
//! whichever thread detected it. So every group rule can be driven in memory, with time passed
//! in: see the coordinator in this module's tests.
//!
//! The two threads share one [`SessionState`] behind one mutex ([`Shared`]), held only for these
//! transitions (never across I/O), and one condvar that wakes the heartbeat thread when the phase
//! changes or the consumer closes.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::assignor::RebalanceProtocol;
use super::changes::{Change, ChangeId, Decision, FenceHook, LostHook, Origin};
use super::config::GroupConfig;
use super::membership::{after_sync, before_join, classify, everything, ErrorAction, ErrorContext};
use super::outcome::LostReason;
use super::outcome::{FatalError, GroupApi};
use super::watch::TopicWatch;
// Re-exported for the poll thread (`member`), which reports losses to its listener.
use super::requests::MemberIdentity;
use crate::guard::{lease_now, Fenced, SessionBound};
use crate::wire::KafkaCode;
use crate::TopicPartition;

mod commits;
mod heartbeat;
mod kip848;
#[cfg(test)]
mod tests;
mod threads;

pub(crate) use heartbeat::{HeartbeatDue, HeartbeatVerdict};
pub(crate) use threads::{GroupThread, ThreadDeath};

/// Where the member is in the classic protocol's life cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Not in a generation: before the first join, or after a reset.
    Unjoined,
    /// The poll thread is inside JoinGroup/SyncGroup; heartbeats pause.
    Joining,
    /// In a generation with an assignment; the heartbeat thread keeps the session alive.
    Stable,
    /// Closed; the heartbeat thread exits.
    Closed,
}

/// The two clocks the session runs on, fixed for the member's life.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timeouts {
    /// `session.timeout.ms`: how long the coordinator keeps a member it does not hear from.
    pub(crate) session_timeout: Duration,
    /// `max.poll.interval.ms`: how long the application may keep control between polls.
    pub(crate) max_poll_interval: Duration,
}

impl Timeouts {
    /// The clocks `config` sets (`session.timeout.ms`, `max.poll.interval.ms`).
    pub(crate) fn of(config: &GroupConfig) -> Self {
        Timeouts {
            session_timeout: config.session_timeout,
            max_poll_interval: config.max_poll_interval,
        }
    }
}

/// What the poll thread does next, as the session sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum NextStep {
    /// The member was closed.
    Closed,
    /// In a generation with nothing pending: `poll` returns.
    Stable,
    /// Join (or rejoin) the group, for this reason.
    Join(String),
}

/// What the poll thread must hand back before it sends JoinGroup.
#[derive(Debug)]
pub(crate) struct RevokeBeforeJoin {
    /// The generation the partitions were owned in: the revocation commits with it.
    pub(crate) identity: MemberIdentity,
    /// Eager: everything owned; cooperative: nothing.
    pub(crate) partitions: Vec<TopicPartition>,
}

/// What JoinGroup is sent with.
#[derive(Debug)]
pub(crate) struct JoinStart {
    /// Who we join as (member id, last generation).
    pub(crate) identity: MemberIdentity,
    /// What we still own (cooperative): the subscription's owned partitions, and the starting
    /// point of the assignment's diff.
    pub(crate) owned: Vec<TopicPartition>,
}

/// The parts of a JoinGroup answer the session needs.
#[derive(Clone, Debug)]
pub(crate) struct JoinAnswer<'a> {
    /// The group error code.
    pub(crate) error_code: KafkaCode,
    /// The generation the join completed.
    pub(crate) generation_id: i32,
    /// Our member id (also the one to use after MEMBER_ID_REQUIRED).
    pub(crate) member_id: &'a str,
    /// The leader's member id.
    pub(crate) leader: &'a str,
}

/// A completed JoinGroup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Joined {
    /// Our identity in the new generation.
    pub(crate) identity: MemberIdentity,
    /// True when we must compute the assignment.
    pub(crate) leader: bool,
}

/// Why a rebalance step did not go on, and what the shell does about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Back off and poll again. `rediscover` asks the shell to look the coordinator up again.
    Retry {
        /// For the log.
        why: String,
        /// The coordinator moved or is unavailable.
        rediscover: bool,
    },
    /// The membership cannot go on; the assignment is already lost.
    Fatal(FatalError),
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

/// The membership state shared by the poll thread and the heartbeat thread. Its fields are
/// private: every change is one of the transitions below.
pub(crate) struct SessionState {
    phase: Phase,
    identity: MemberIdentity,
    owned: Vec<TopicPartition>,
    /// Set when a rejoin is needed, with the reason for the logs and the JoinGroup request.
    rejoin: Option<String>,
    /// Partitions already fenced (through the lost hook) that the poll thread must still report
    /// to its listener.
    lost: Vec<(Vec<TopicPartition>, LostReason)>,
    fatal: Option<FatalError>,
    /// When the application last got control back from `poll`: `max.poll.interval.ms` runs from
    /// here while `in_poll` is false.
    last_poll: Instant,
    /// True while the application's thread is inside the library's `poll` (joining, syncing,
    /// running the rebalance callbacks): that time is the library's, not the handler's, so it
    /// does not count against `max.poll.interval.ms`.
    in_poll: bool,
    /// While a round of ours (JoinGroup, then SyncGroup) is at the coordinator: the JoinGroup's
    /// send time. The coordinator does not expire a member waiting in a join or a sync, and ends
    /// either wait within the rebalance timeout (`max.poll.interval.ms`) from there at the
    /// latest, so the session clock cannot run out before that.
    held_since: Option<Instant>,
    last_heartbeat_ok: Instant,
    /// Shared with the guard: renewed here, read by whoever is about to act on a lease.
    session_bound: Option<Arc<SessionBound>>,
    /// Fences partitions whose ownership ended without a handoff.
    hook: LostHook,
    timeouts: Timeouts,
    /// True when rebalance rounds run on the membership (heartbeat) thread, beside the poll
    /// loop (the cooperative protocol); false when the poll thread runs them (eager).
    rounds_beside: bool,
    /// The application has polled once: the membership thread starts joining only then, as a
    /// poll-driven member would.
    polled: bool,
    /// The ownership change decided and not yet applied by the poll thread (see
    /// [`super::changes`]): set from the decision until its last step is acknowledged.
    decided: Option<ChangeId>,
    /// The decided change's steps the poll thread has not taken yet (revocations first, their
    /// fence tokens inside).
    waiting: Vec<Change>,
    /// Fences partitions a decided change revokes, the moment it is decided.
    fence_hook: Option<FenceHook>,
    /// KIP-848: revocations the poll thread applied, for the membership thread to acknowledge.
    acknowledged: Vec<u64>,
    /// The id of the last decided change (see [`ChangeId`]).
    last_change: ChangeId,
    /// A thread of the member died (`threads.rs`): every later poll fails with it.
    died: Option<ThreadDeath>,
}

impl SessionState {
    /// A member that has not joined yet, created at `now`: its first poll joins.
    pub(crate) fn new(hook: LostHook, timeouts: Timeouts, now: Instant) -> Self {
        SessionState {
            phase: Phase::Unjoined,
            identity: MemberIdentity::unjoined(),
            owned: Vec::new(),
            rejoin: Some("initial join".to_string()),
            lost: Vec::new(),
            fatal: None,
            last_poll: now,
            in_poll: false,
            held_since: None,
            last_heartbeat_ok: now,
            session_bound: None,
            hook,
            timeouts,
            rounds_beside: false,
            polled: false,
            decided: None,
            waiting: Vec::new(),
            fence_hook: None,
            acknowledged: Vec::new(),
            last_change: ChangeId::default(),
            died: None,
        }
    }

    /// Rounds run on the membership thread from now on (cooperative), not on the poll thread.
    pub(crate) fn run_rounds_beside(&mut self) {
        self.rounds_beside = true;
    }

    /// Revocations are fenced through `hook` the moment they are decided.
    pub(crate) fn fence_revocations_with(&mut self, hook: FenceHook) {
        self.fence_hook = Some(hook);
    }

    // ------------------------------------------------------------------------------------------
    // Reads

    /// Where the member is.
    pub(crate) fn phase(&self) -> Phase {
        self.phase
    }

    /// Our generation id and member id.
    pub(crate) fn identity(&self) -> &MemberIdentity {
        &self.identity
    }

    /// The partitions we own now (sorted).
    pub(crate) fn owned(&self) -> &[TopicPartition] {
        &self.owned
    }

    /// Why a rejoin is pending, if one is.
    pub(crate) fn rejoin_reason(&self) -> Option<&str> {
        self.rejoin.as_deref()
    }

    /// In a generation with nothing pending: records may be processed.
    pub(crate) fn is_stable(&self) -> bool {
        self.phase == Phase::Stable && self.rejoin.is_none()
    }

    /// True when rounds run on the membership thread (cooperative).
    pub(crate) fn rounds_beside(&self) -> bool {
        self.rounds_beside
    }

    /// The decided change the poll thread must apply, if any.
    pub(crate) fn pending(&self) -> Option<ChangeId> {
        self.decided
    }

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

    /// The decided change's steps the poll thread has not taken yet (tests read them).
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> &[Change] {
        &self.waiting
    }

    /// True when the poll thread should end its batch and poll: eager, a rejoin is pending (the
    /// poll thread runs it, and everything stops meanwhile); cooperative, a decided change waits
    /// to be applied (a rebalance merely in progress does not stop the batch).
    pub(crate) fn boundary_due(&self) -> bool {
        if self.rounds_beside {
            self.decided.is_some()
        } else {
            self.rejoin.is_some()
        }
    }

    /// True when the poll thread may fetch and hand out records of what it owns: eager, only
    /// while stable; cooperative, also while a round runs beside it (the partitions it keeps
    /// flow on; those it hands back were fenced when the round decided so).
    pub(crate) fn may_fetch(&self) -> bool {
        if self.rounds_beside {
            self.phase != Phase::Closed
        } else {
            self.is_stable()
        }
    }

    /// The membership thread's question: should it run a round now, and why. Only when rounds
    /// run beside the poll loop, the application has polled, no decided change still waits for
    /// the poll thread (the second cooperative JoinGroup must not list what is being handed back,
    /// nor go out before its commit), and no failure waits to be reported.
    pub(crate) fn round_due(&self) -> Option<String> {
        if !self.rounds_beside || !self.polled || self.decided.is_some() || self.fatal.is_some() {
            return None;
        }
        match self.next_step() {
            NextStep::Join(reason) => Some(reason),
            NextStep::Closed | NextStep::Stable => None,
        }
    }

    /// What the poll thread does next.
    pub(crate) fn next_step(&self) -> NextStep {
        if self.phase == Phase::Closed {
            return NextStep::Closed;
        }
        match (&self.rejoin, self.phase) {
            (None, Phase::Stable) => NextStep::Stable,
            (Some(reason), _) => NextStep::Join(reason.clone()),
            (None, _) => NextStep::Join("not in a generation".to_string()),
        }
    }

    // ------------------------------------------------------------------------------------------
    // The session clock

    /// Lets the membership bound ownership in time (see [`SessionBound`]).
    pub(crate) fn bound_session(&mut self, bound: Arc<SessionBound>) {
        self.session_bound = Some(bound);
    }

    /// The coordinator answered a request of ours sent at `sent` (a heartbeat, a JoinGroup, a
    /// SyncGroup): the session runs for `session.timeout.ms` from there.
    pub(crate) fn session_renewed(&mut self, sent: Instant) {
        self.last_heartbeat_ok = self.last_heartbeat_ok.max(sent);
        if let Some(bound) = &self.session_bound {
            bound.renew(sent, self.timeouts.session_timeout);
        }
    }

    /// A round's JoinGroup sent at `join_sent` is at the coordinator (and its SyncGroup after
    /// it): the session, and the bound leases are checked against, hold until the round ends,
    /// for at most the rebalance timeout from `join_sent`.
    pub(crate) fn hold_session(&mut self, join_sent: Instant) {
        self.held_since = Some(join_sent);
        if let Some(bound) = &self.session_bound {
            let until = join_sent
                .checked_add(self.timeouts.max_poll_interval)
                .unwrap_or(join_sent);
            bound.hold(until);
        }
    }

    /// The round ended (its answers renewed the session first, or it failed): the session runs
    /// on its renewals again.
    pub(crate) fn release_session(&mut self) {
        self.held_since = None;
        if let Some(bound) = &self.session_bound {
            bound.release();
        }
    }

    /// True while a round of ours holds the session at `now` (see [`Self::hold_session`]).
    fn session_held(&self, now: Instant) -> bool {
        self.held_since.is_some_and(|since| {
            now.saturating_duration_since(since) < self.timeouts.max_poll_interval
        })
    }

    /// The application's thread entered `poll`: from now on its time is the library's. True
    /// the first time: rounds beside the poll loop wait for it (see [`Self::round_due`]), so
    /// the membership thread must be woken then.
    pub(crate) fn enter_poll(&mut self) -> bool {
        self.in_poll = true;
        !std::mem::replace(&mut self.polled, true)
    }

    /// `poll` returned at `now`: `max.poll.interval.ms` runs from here.
    pub(crate) fn leave_poll(&mut self, now: Instant) {
        self.in_poll = false;
        self.last_poll = now;
    }

    fn session_expired(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.last_heartbeat_ok) > self.timeouts.session_timeout
    }

    // ------------------------------------------------------------------------------------------
    // Rejoin and loss

    /// Asks for a rejoin at the next poll, unless one is pending already. Returns true when this
    /// call asked for it.
    pub(crate) fn request_rejoin(&mut self, reason: &str) -> bool {
        if self.rejoin.is_some() {
            return false;
        }
        self.rejoin = Some(reason.to_string());
        true
    }

    /// Ends the member's ownership without a handoff: fences through the hook while the session
    /// lock is held (so no rejoin can interleave), records the loss for the poll thread's
    /// listener, and resets the identity as the error demands.
    pub(crate) fn lose(&mut self, reason: LostReason, reset_member_id: bool) {
        // Kept sorted by every transition; reported sorted and once each whatever happened.
        let mut owned = std::mem::take(&mut self.owned);
        owned.sort();
        owned.dedup();
        if !owned.is_empty() {
            log::warn!(
                "assignment lost ({reason:?}): fencing {} partition(s) without commit",
                owned.len()
            );
            (self.hook)(&owned, &reason);
        }
        self.lost.push((owned, reason.clone()));
        // A decided change of the ended membership is void: nothing of it is committed or
        // handed out. Its fence token goes with it: the lost hook just moved the epoch of every
        // partition it fenced, which takes them out of any handoff.
        self.decided = None;
        self.waiting.clear();
        self.identity.generation_id = -1;
        if reset_member_id {
            self.identity.member_id.clear();
        }
        if self.phase != Phase::Closed {
            self.phase = Phase::Unjoined;
        }
        self.rejoin
            .get_or_insert_with(|| format!("assignment lost: {reason:?}"));
    }

    /// True when losses or a fatal error wait for the poll thread.
    pub(crate) fn has_reports(&self) -> bool {
        !self.lost.is_empty() || self.fatal.is_some()
    }

    /// What the poll thread applies at a batch boundary, read together: the losses not reported
    /// yet (taken) and the decided change (left pending until applied). A loss queued before the
    /// change was decided comes first, so its report can never follow, and undo in the guard,
    /// a later reassignment of the same partitions; a loss after it voids the change (see
    /// [`lose`](Self::lose)).
    pub(crate) fn take_change(&mut self) -> (Vec<(Vec<TopicPartition>, LostReason)>, Vec<Change>) {
        (
            std::mem::take(&mut self.lost),
            std::mem::take(&mut self.waiting),
        )
    }

    /// Fences `partitions` through the fence hook now, for a revocation decided on the poll
    /// thread (an eager rejoin, a close); `None` without a hook.
    pub(crate) fn fence_now(&self, partitions: &[TopicPartition]) -> Option<Fenced> {
        self.fence_hook.as_ref().map(|fence| fence(partitions))
    }

    /// The losses (already fenced) and the fatal error the poll thread must still report.
    pub(crate) fn take_reports(
        &mut self,
    ) -> (Vec<(Vec<TopicPartition>, LostReason)>, Option<FatalError>) {
        (std::mem::take(&mut self.lost), self.fatal.take())
    }

    /// Applies a group error code: what it asks of the session, and what the shell does next.
    fn refused(
        &mut self,
        api: GroupApi,
        code: KafkaCode,
        member_id: &str,
        ctx: &ErrorContext<'_>,
    ) -> Refusal {
        match classify(api, code, ctx) {
            ErrorAction::Proceed => Refusal::Retry {
                why: format!("{api} answered {code}"),
                rediscover: false,
            },
            ErrorAction::Retry => Refusal::Retry {
                why: format!("{api} answered retriable error {code}"),
                rediscover: false,
            },
            ErrorAction::RediscoverCoordinator => Refusal::Retry {
                why: format!("{api}: coordinator moved ({code})"),
                rediscover: true,
            },
            ErrorAction::Rejoin => {
                if code == KafkaCode::MEMBER_ID_REQUIRED {
                    // KIP-394: the coordinator gave us an id; join again with it.
                    self.identity.member_id = member_id.to_string();
                }
                Refusal::Retry {
                    why: format!("{api}: rejoin ({code})"),
                    rediscover: false,
                }
            }
            ErrorAction::ResetAndRejoin {
                member_unknown: reset_member_id,
            } => {
                self.lose(LostReason::Fenced(code), reset_member_id);
                Refusal::Retry {
                    why: format!("{api}: membership reset ({code})"),
                    rediscover: false,
                }
            }
            ErrorAction::Fatal(fatal) => {
                self.lose(LostReason::Fenced(code), true);
                Refusal::Fatal(fatal)
            }
        }
    }

    // ------------------------------------------------------------------------------------------
    // A rebalance round, on the poll thread

    /// Before JoinGroup: what to hand back while the old generation is still valid for commits.
    pub(crate) fn revoke_before_join(&self, protocol: RebalanceProtocol) -> RevokeBeforeJoin {
        RevokeBeforeJoin {
            identity: self.identity.clone(),
            partitions: before_join(protocol, &self.owned),
        }
    }

    /// The eager revocation ran: we own nothing now.
    pub(crate) fn revoked_before_join(&mut self) {
        self.owned.clear();
    }

    /// JoinGroup is about to be sent: heartbeats pause, the pending rejoin is being served.
    pub(crate) fn join(&mut self) -> JoinStart {
        if self.phase != Phase::Closed {
            self.phase = Phase::Joining;
        }
        self.rejoin = None;
        JoinStart {
            identity: self.identity.clone(),
            owned: self.owned.clone(),
        }
    }

    /// A step of the round failed (the request could not be sent, we could not lead, the
    /// assignment did not decode): back to unjoined, and the round is retried for `reason`.
    pub(crate) fn round_failed(&mut self, reason: &str) {
        if self.phase == Phase::Joining {
            self.phase = Phase::Unjoined;
        }
        self.rejoin.get_or_insert_with(|| reason.to_string());
    }

    /// JoinGroup sent at `sent` was answered.
    pub(crate) fn joined(
        &mut self,
        sent: Instant,
        answer: &JoinAnswer<'_>,
        reason: &str,
        ctx: &ErrorContext<'_>,
    ) -> Result<Joined, Refusal> {
        if answer.error_code != KafkaCode::NONE {
            self.round_failed(reason);
            return Err(self.refused(
                GroupApi::JoinGroup,
                answer.error_code,
                answer.member_id,
                ctx,
            ));
        }
        self.session_renewed(sent);
        self.identity = MemberIdentity {
            generation_id: answer.generation_id,
            member_id: answer.member_id.to_string(),
        };
        Ok(Joined {
            identity: self.identity.clone(),
            leader: answer.leader == answer.member_id,
        })
    }

    /// SyncGroup sent at `sent` as `me` was answered with `code`.
    pub(crate) fn synced(
        &mut self,
        sent: Instant,
        me: &MemberIdentity,
        code: KafkaCode,
        reason: &str,
        ctx: &ErrorContext<'_>,
    ) -> Result<(), Refusal> {
        if code != KafkaCode::NONE {
            self.round_failed(reason);
            return Err(self.refused(GroupApi::SyncGroup, code, &me.member_id, ctx));
        }
        self.session_renewed(sent);
        Ok(())
    }

    /// The generation `me` is complete with `assigned`: heartbeats resume now, not after the
    /// handoff, because a revocation's drain may take longer than the session timeout. Until
    /// the revocation has run, we own both what we keep and what we hand back. Returns the
    /// decided change's steps, in order (see [`after_sync`]).
    pub(crate) fn stabilise(
        &mut self,
        protocol: RebalanceProtocol,
        me: &MemberIdentity,
        leader: bool,
        owned_before: &[TopicPartition],
        assigned: &[TopicPartition],
    ) -> Vec<Change> {
        let id = self.next_change_id();
        let changes = after_sync(protocol, owned_before, assigned, me, leader, id);
        let interim: std::collections::BTreeSet<TopicPartition> =
            owned_before.iter().chain(assigned).cloned().collect();
        self.owned = interim.into_iter().collect();
        self.phase = Phase::Stable;
        changes
    }

    /// The generation `me` is complete with `assigned` (as [`stabilise`](Self::stabilise)), and
    /// the change is left for the poll thread to apply at its next batch boundary (see
    /// [`super::changes`]): the partitions it revokes are fenced now, through the fence hook,
    /// under this lock, so no record of theirs is handed out from here on while the kept ones
    /// flow on. True when the change asks for a cooperative follow-up round (for the log).
    pub(crate) fn post_assignment(
        &mut self,
        protocol: RebalanceProtocol,
        me: &MemberIdentity,
        leader: bool,
        owned_before: &[TopicPartition],
        assigned: &[TopicPartition],
    ) -> bool {
        if self.phase == Phase::Closed {
            // Closed while the round ran (on the membership thread): nothing more to apply.
            return false;
        }
        // What the round started with, less what was lost while it ran (a heartbeat answer, a
        // refused commit, the session bound): those partitions were fenced and reported lost,
        // so the new generation must start them anew, not count them as kept.
        let still_owned: Vec<TopicPartition> = owned_before
            .iter()
            .filter(|tp| self.owned.contains(tp))
            .cloned()
            .collect();
        let changes = self.stabilise(protocol, me, leader, &still_owned, assigned);
        let rejoin = changes.iter().any(|change| {
            matches!(
                change,
                Change::Assign {
                    decision: Decision(Origin::Session { rejoin: true, .. }),
                    ..
                }
            )
        });
        self.decide(changes, "generation");
        rejoin
    }

    /// Keeps `changes` (one decided change) for the poll thread, fencing what its revocation
    /// hands back now, through the fence hook, under this lock. `what` names the identity's
    /// number in the log (a generation, a member epoch).
    pub(crate) fn decide(&mut self, mut changes: Vec<Change>, what: &str) {
        for change in &mut changes {
            if let Change::Revoke {
                identity,
                partitions,
                fenced,
                decision: Decision(Origin::Session { id, .. }),
            } = change
            {
                if let Some(fence) = &self.fence_hook {
                    log::info!(
                        "{what} {} revokes {} partition(s): fenced now, handed off at the next \
                         batch boundary",
                        identity.generation_id,
                        partitions.len()
                    );
                    *fenced = Some(fence(partitions));
                }
                self.decided = Some(*id);
            }
            if let Change::Assign {
                decision: Decision(Origin::Session { id, .. }),
                ..
            } = change
            {
                self.decided = Some(*id);
            }
        }
        self.waiting = changes;
    }

    /// A fresh [`ChangeId`] for a change being decided.
    fn next_change_id(&mut self) -> ChangeId {
        self.last_change.0 += 1;
        self.last_change
    }

    /// True while the decided change `change` waits for the poll thread: false once it was
    /// applied, or voided by a loss (even if a change of the same identity was decided since).
    pub(crate) fn still_pending(&self, change: ChangeId) -> bool {
        self.decided == Some(change)
    }

    /// The poll thread applied the decided change of `decision` (revocations committed,
    /// assignment handed out, or stopped by a loss): the membership may go on (the cooperative
    /// follow-up round may start; KIP-848's machine hears of its revocation). Another change,
    /// decided after a loss, stays.
    pub(crate) fn changes_applied(&mut self, decision: &Decision) {
        if let Origin::Session { id, machine, .. } = &decision.0 {
            if self.decided == Some(*id) {
                self.decided = None;
                self.waiting.clear();
                self.acknowledged.extend(*machine);
            }
        }
    }

    /// A revocation in generation `me` ran: those partitions are no longer ours (unless the
    /// generation ended meanwhile, and with it everything we owned).
    pub(crate) fn revoked(&mut self, me: &MemberIdentity, partitions: &[TopicPartition]) {
        if self.identity == *me {
            self.owned.retain(|tp| !partitions.contains(tp));
        }
    }

    /// The assignment of generation `me`, decided as `decision`, is about to be handed to the
    /// poll thread. False when the assignment was lost while a revocation ran: the next poll
    /// reports that instead. A cooperative round that revoked something asks for its follow-up
    /// rebalance here.
    pub(crate) fn assigning(&mut self, me: &MemberIdentity, decision: &Decision) -> bool {
        if self.identity != *me || self.phase != Phase::Stable {
            return false;
        }
        if let Origin::Session {
            owned_after,
            rejoin,
            ..
        } = &decision.0
        {
            self.owned = owned_after.clone();
            if *rejoin {
                self.rejoin
                    .get_or_insert_with(|| "cooperative follow-up".to_string());
            }
        }
        true
    }

    // ------------------------------------------------------------------------------------------
    // Leaving

    /// Closing: what to hand back (everything, committed while the generation is still ours) and
    /// in which generation. None when already closed.
    pub(crate) fn leave(&self) -> Option<(MemberIdentity, Vec<TopicPartition>)> {
        if self.phase == Phase::Closed {
            return None;
        }
        Some((self.identity.clone(), everything(&self.owned)))
    }

    /// Closed: we own nothing, and the heartbeat thread exits.
    pub(crate) fn close(&mut self) {
        self.owned.clear();
        self.decided = None;
        self.waiting.clear();
        self.phase = Phase::Closed;
    }
}

/// The session behind its one mutex, and the condvar that wakes the heartbeat thread (and the
/// poll thread waiting for the membership thread's decisions).
pub(crate) struct Shared {
    state: Mutex<SessionState>,
    pub(crate) wake: Condvar,
    /// A round on the membership thread failed for good (no assignor in common, an assignment
    /// that does not decode, ...): the poll thread returns it from its next poll, as it would
    /// have returned it from a round of its own. No round runs while it waits there.
    failure: Mutex<Option<super::error::GroupError>>,
    /// Tests only: the threads (`threads::GroupThread` bits) that panic at their next look at
    /// the session (see `Membership::panic_membership_thread`), so that a death can be tested
    /// end to end.
    panic_requested: std::sync::atomic::AtomicU8,
    /// The consumer's waker asked the poll thread to stop waiting for the membership (see
    /// [`Self::nudge`]); taken by the wait it ends.
    nudged: std::sync::atomic::AtomicBool,
    /// The classic member's subscription and what it knows of the cluster's topics (see
    /// `watch.rs`): a lock of its own, never held with the session's.
    topics: Mutex<TopicWatch>,
}

impl Shared {
    pub(crate) fn new(hook: LostHook, timeouts: Timeouts) -> Self {
        Shared {
            state: Mutex::new(SessionState::new(hook, timeouts, lease_now())),
            wake: Condvar::new(),
            failure: Mutex::new(None),
            panic_requested: std::sync::atomic::AtomicU8::new(0),
            nudged: std::sync::atomic::AtomicBool::new(false),
            topics: Mutex::new(TopicWatch::default()),
        }
    }

    /// The classic member's subscription (see [`TopicWatch`]).
    pub(crate) fn topics(&self) -> MutexGuard<'_, TopicWatch> {
        self.topics.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits on the condvar for at most `timeout`.
    pub(crate) fn wait<'a>(
        &self,
        state: MutexGuard<'a, SessionState>,
        timeout: Duration,
    ) -> MutexGuard<'a, SessionState> {
        self.wake
            .wait_timeout(state, timeout)
            .map(|(s, _)| s)
            .unwrap_or_else(|p| p.into_inner().0)
    }

    /// The membership thread's round failed for good: kept for the poll thread.
    pub(crate) fn set_failure(&self, error: super::error::GroupError) {
        *self.failure.lock().unwrap_or_else(PoisonError::into_inner) = Some(error);
        self.wake.notify_all();
    }

    /// A failure waits for the poll thread.
    pub(crate) fn has_failure(&self) -> bool {
        self.failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    /// Takes the failure to report.
    pub(crate) fn take_failure(&self) -> Option<super::error::GroupError> {
        self.failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// Ends the poll thread's wait for the membership from any thread (the consumer's waker).
    /// The flag is set under the session's lock, so a wait that checked it and is about to
    /// sleep cannot miss the notification.
    pub(crate) fn nudge(&self) {
        let _state = self.lock();
        self.nudged.store(true, std::sync::atomic::Ordering::SeqCst);
        self.wake.notify_all();
    }

    /// True once after each [`Self::nudge`]: the poll thread's wait ends.
    pub(crate) fn take_nudge(&self) -> bool {
        self.nudged.swap(false, std::sync::atomic::Ordering::SeqCst)
    }

    /// No code that can panic runs while the lock is held, so a poisoned lock still guards a
    /// consistent state.
    pub(crate) fn lock(&self) -> MutexGuard<'_, SessionState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
