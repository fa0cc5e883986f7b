//! How the machine takes an answer in error and loses what it owns: the heartbeat's error
//! answers (`on_error`), the answer to a static member's release (the -2 heartbeat of
//! [`MemberState::Releasing`]), and the loss of the assignment (to a rejoin, to a release
//! first, or for good on a fatal error).
//!
//! Separate from `machine/mod.rs` because these are the membership's failure paths, read apart
//! from its normal course (join, heartbeat, reconcile, revoke, leave); they are methods on the
//! same private state, in a child of the module that declares it so that they can reach its
//! fields, and the parent calls them.

use std::time::Instant;

use log::{debug, info, warn};

use super::{ConsumerGroupMembership, InFlight, MemberState, Sent};
use crate::group::consumer_group::reconcile::named;
use crate::group::consumer_group::types::{Event, HeartbeatResponse, JOIN_EPOCH};
use crate::group::heartbeat_errors;
use crate::group::outcome::{ErrorAction, FatalError, GroupApi, LostReason};
use crate::wire::KafkaCode;

impl ConsumerGroupMembership {
    /// The answer to the -2 heartbeat of [`MemberState::Releasing`] (Kafka's
    /// `GroupMetadataManager.consumerGroupLeave`): our incarnation now waits with epoch -2 for
    /// the join to take it over (none), or the instance id has no member (UNKNOWN_MEMBER_ID) or
    /// the group none at all (GROUP_ID_NOT_FOUND): join. FENCED_INSTANCE_ID: another member id
    /// holds the instance id, which is UNRELEASED_INSTANCE_ID for good.
    pub(super) fn on_release_answer(
        &mut self,
        now: Instant,
        flight: InFlight,
        response: HeartbeatResponse,
    ) {
        if self.state == MemberState::Leaving && flight.life == self.life {
            // Closed while releasing: the -2 just answered was the leave too.
            self.finish_leave();
            return;
        }
        if self.state != MemberState::Releasing || flight.life != self.life {
            return;
        }
        let code = response.error;
        if code == KafkaCode::NONE
            || code == KafkaCode::UNKNOWN_MEMBER_ID
            || code == KafkaCode::GROUP_ID_NOT_FOUND
        {
            info!(
                "consumer group {}: static member {} released its earlier incarnation ({}); \
                 joining with epoch 0",
                self.config.group_id,
                self.member_id,
                code.name()
            );
            self.released = true;
            self.state = MemberState::Joining;
            self.backoff = self.config.retry_backoff;
            self.retry_at = None;
            self.urgent = true;
            return;
        }
        if code == KafkaCode::FENCED_INSTANCE_ID {
            let message = response.error_message.as_deref();
            if let ErrorAction::Fatal(fatal) = classify(KafkaCode::UNRELEASED_INSTANCE_ID, message)
            {
                self.fail(fatal);
            }
            return;
        }
        self.on_error(now, flight, response);
    }

    pub(super) fn on_error(&mut self, now: Instant, flight: InFlight, response: HeartbeatResponse) {
        let code = response.error;
        self.sent = Sent::default();
        let action = classify(code, response.error_message.as_deref());
        if flight.life != self.life && matches!(action, ErrorAction::ResetAndRejoin { .. }) {
            // Already started over since this request; the loss was handled.
            return;
        }
        if code == KafkaCode::UNRELEASED_INSTANCE_ID
            && self.state == MemberState::Joining
            && flight.life == self.life
            && self.maybe_admitted
            && !self.released
        {
            // The holder may be an incarnation of ours whose answers we never read (a lost
            // join answer, heartbeats answered too late): release it and join again. If it is
            // another member's, the release is answered FENCED_INSTANCE_ID and that is fatal.
            info!(
                "consumer group {}: join answered UNRELEASED_INSTANCE_ID; releasing member {} \
                 (epoch -2) before joining again",
                self.config.group_id, self.member_id
            );
            self.state = MemberState::Releasing;
            self.schedule_retry(now);
            return;
        }
        if flight.release && matches!(action, ErrorAction::ResetAndRejoin { .. }) {
            // FENCED_MEMBER_EPOCH cannot answer a -2; nothing of ours is held.
            self.released = true;
            self.state = MemberState::Joining;
            self.urgent = true;
            return;
        }
        match action {
            ErrorAction::RediscoverCoordinator => {
                info!(
                    "consumer group {}: heartbeat answered {}; finding the coordinator again",
                    self.config.group_id,
                    code.name()
                );
                self.coordinator_known = false;
                self.retry_at = None;
                self.urgent = true;
            }
            // This table gives neither Proceed nor Rejoin; resending is the safe reading of both.
            ErrorAction::Retry | ErrorAction::Proceed | ErrorAction::Rejoin => {
                debug!(
                    "consumer group {}: heartbeat answered {}; retrying after {:?}",
                    self.config.group_id,
                    code.name(),
                    self.backoff
                );
                self.schedule_retry(now);
            }
            ErrorAction::ResetAndRejoin { .. } => {
                info!(
                    "consumer group {}: heartbeat answered {} for member {} epoch {}; the \
                     assignment is lost and the member rejoins",
                    self.config.group_id,
                    code.name(),
                    self.member_id,
                    self.member_epoch
                );
                self.lose(LostReason::Fenced(code));
            }
            ErrorAction::Fatal(fatal) => self.fail(fatal),
        }
    }

    /// Everything owned is lost (fence, discard, no commit); the member rejoins with epoch 0,
    /// or, if it was leaving, is out of the group.
    ///
    /// A static member the broker may still hold (its session bound passed while its heartbeats
    /// may have arrived, a revocation past the rebalance timeout, FENCED_MEMBER_EPOCH) first
    /// releases that incarnation with -2, as the Java client leaves with -2 before rejoining
    /// after its poll timer expired: Kafka refuses an epoch-0 join of an instance id whose
    /// member has not left with -2 (UNRELEASED_INSTANCE_ID), even under the same member id.
    /// After UNKNOWN_MEMBER_ID the broker holds nothing of ours and the member joins at once.
    pub(super) fn lose(&mut self, cause: LostReason) {
        let leaving = matches!(
            self.state,
            MemberState::PrepareLeaving | MemberState::Leaving
        );
        self.drop_assignment(cause.clone());
        self.released = false;
        if leaving {
            self.finish_leave();
        } else if self.config.instance_id.is_some()
            && self.maybe_admitted
            && cause != LostReason::Fenced(KafkaCode::UNKNOWN_MEMBER_ID)
        {
            self.state = MemberState::Releasing;
            self.urgent = true;
        } else {
            self.state = MemberState::Joining;
        }
    }

    pub(super) fn drop_assignment(&mut self, cause: LostReason) {
        let partitions = named(&self.owned);
        self.owned.clear();
        self.target.clear();
        self.target_sent = None;
        self.revoking = None;
        self.metadata_at = None;
        self.member_epoch = JOIN_EPOCH;
        self.sent = Sent::default();
        self.urgent = false;
        self.next_heartbeat = None;
        self.renewal = None;
        self.life += 1;
        if !partitions.is_empty() {
            self.events.push_back(Event::Lost { partitions, cause });
        }
    }

    /// The coordinator has no ConsumerGroupHeartbeat version in common with us (`detail` says
    /// what each side offers). Fatal, like the broker's own UNSUPPORTED_VERSION answer: retrying
    /// cannot make the API appear, and falling back to the classic protocol unasked would
    /// change how the group assigns and fences.
    pub fn on_unsupported(&mut self, detail: &str) {
        if matches!(self.state, MemberState::Fatal | MemberState::Left) {
            return;
        }
        if let ErrorAction::Fatal(fatal) = classify(KafkaCode::UNSUPPORTED_VERSION, Some(detail)) {
            self.fail(fatal);
        }
    }

    pub(super) fn fail(&mut self, fatal: FatalError) {
        warn!(
            "consumer group {}: membership ended: {fatal}",
            self.config.group_id
        );
        self.drop_assignment(LostReason::Fenced(fatal.code));
        self.state = MemberState::Fatal;
        self.events.push_back(Event::Fatal(fatal));
    }
}

/// The ConsumerGroupHeartbeat column of the heartbeat error table.
fn classify(code: KafkaCode, message: Option<&str>) -> ErrorAction {
    heartbeat_errors::classify(GroupApi::ConsumerGroupHeartbeat, code, message)
}
