//! How a member hands the poll thread what the session decided, one [`Change`] at a time, and
//! takes the acknowledgements back: the poll-thread half of the seam in `changes.rs`, shared by
//! every member type (both protocols, and the in-memory members of the tests), so the order in
//! which a change is handed out and acknowledged is written once.
//!
//! The order: losses first (a change may reassign the same partitions, and a loss reported
//! after it would mark them lost in the guard again), then the decided change's events
//! (revocations before the assignment); an assignment whose generation ended while a revocation
//! ran is not handed out (the loss is, instead). Once the change's last event is acknowledged
//! the session clears it, which lets the membership send its next request (the cooperative
//! follow-up JoinGroup, KIP-848's acknowledging heartbeat).

use std::collections::VecDeque;

use super::assignor::RebalanceProtocol;
use super::changes::{Change, Decided, Decision};
use super::error::GroupError;
use super::membership::everything;
use super::outcome::LostReason;
use super::session::Shared;
use crate::TopicPartition;

/// The changes waiting for the poll thread, and the one being handed out.
#[derive(Debug, Default)]
pub(crate) struct Handout {
    /// Losses taken from the session, not handed out yet.
    losses: VecDeque<Change>,
    /// The decision being handed out: an acknowledgement applies to it only while the session
    /// still has it pending (a loss voids it, even if the same identity is decided again).
    decision: Option<Decision>,
    /// Its steps not handed out yet, in order.
    applying: VecDeque<Change>,
    /// Eager: the revocation before the join was handed out and not acknowledged yet.
    revoking_before_join: bool,
    /// A fatal error the session recorded: returned once the losses before it were handed out.
    fatal: Option<GroupError>,
}

impl Handout {
    /// Takes the losses and the fatal error the session recorded; a failure of the membership
    /// thread is returned at once. The losses wait to be handed out, and the fatal error for
    /// [`take_fatal`](Self::take_fatal) after them (the partitions are reported lost first).
    pub(crate) fn take_reports(&mut self, shared: &Shared) -> Result<(), GroupError> {
        if let Some(failure) = shared.take_failure() {
            return Err(failure);
        }
        let (lost, fatal) = shared.lock().take_reports();
        self.queue_losses(lost);
        if let Some(fatal) = fatal {
            self.fatal.get_or_insert(GroupError::Fatal(fatal));
        }
        Ok(())
    }

    /// The next loss to hand out, if any.
    pub(crate) fn next_loss(&mut self) -> Option<Change> {
        self.losses.pop_front()
    }

    /// The fatal error, once every loss before it was handed out.
    pub(crate) fn take_fatal(&mut self) -> Option<GroupError> {
        if self.losses.is_empty() {
            self.fatal.take()
        } else {
            None
        }
    }

    fn queue_losses(&mut self, lost: Vec<(Vec<TopicPartition>, LostReason)>) {
        for (partitions, reason) in lost {
            let partitions = everything(&partitions);
            if !partitions.is_empty() {
                self.losses.push_back(Change::Lost { partitions, reason });
            }
        }
    }

    /// The next loss or step of the decided change (taking it from the session when none is
    /// being handed out), or `None` when there is none.
    pub(crate) fn next(&mut self, shared: &Shared) -> Option<Change> {
        if self.decision.is_none() {
            let (lost, decided) = shared.lock().take_change();
            self.queue_losses(lost);
            self.decision = decided.first().and_then(Change::decision).cloned();
            self.applying = decided.into();
        }
        if let Some(loss) = self.losses.pop_front() {
            return Some(loss);
        }
        let decision = self.decision.as_ref()?;
        match self.applying.pop_front() {
            Some(assign @ Change::Assign { .. }) => {
                let assigning = match (&assign, decision.id()) {
                    (Change::Assign { identity, .. }, Some(id)) => {
                        let mut state = shared.lock();
                        state.still_pending(id) && state.assigning(identity, decision)
                    }
                    _ => false,
                };
                if !assigning {
                    // Lost while the revocation ran: the loss is handed out instead.
                    self.applying.clear();
                    self.finish(shared);
                    return self.next(shared);
                }
                Some(assign)
            }
            Some(change) => Some(change),
            None => {
                self.finish(shared);
                None
            }
        }
    }

    /// The decided change was applied (or stopped by a loss): the session clears it, and the
    /// membership thread is woken for its next request.
    fn finish(&mut self, shared: &Shared) {
        if let Some(decision) = self.decision.take() {
            shared.lock().changes_applied(&decision);
            shared.wake.notify_all();
        }
    }

    /// A change handed out was applied and comes back: the session records a revocation, and
    /// the decided change is cleared once its last step was acknowledged.
    pub(crate) fn acknowledge(&mut self, shared: &Shared, change: Change) {
        if let Change::Revoke {
            identity,
            partitions,
            decision,
            ..
        } = &change
        {
            match &decision.0 {
                Decided::Session { id, .. } => {
                    let mut state = shared.lock();
                    // Voided by a loss since: the loss took everything, and what the session
                    // owns now was decided after it.
                    if state.still_pending(*id) {
                        state.revoked(identity, partitions);
                    }
                }
                Decided::BeforeJoin => {
                    self.revoking_before_join = false;
                    shared.lock().revoked_before_join();
                }
                Decided::Closing | Decided::Manual => {}
            }
        }
        if self.decision.is_some() && self.applying.is_empty() {
            self.finish(shared);
        }
    }

    /// Eager: the revocation of everything before the JoinGroup, while the old generation is
    /// still valid for commits, fenced now; `None` when nothing is owned or it was handed out
    /// already (the round runs once it is acknowledged).
    pub(crate) fn revoke_before_join(
        &mut self,
        shared: &Shared,
        protocol: RebalanceProtocol,
        group_id: &str,
        reason: &str,
    ) -> Option<Change> {
        if self.revoking_before_join {
            return None;
        }
        let revoke = shared.lock().revoke_before_join(protocol);
        if revoke.partitions.is_empty() {
            return None;
        }
        log::info!(
            "group {group_id}: revoking {} partition(s) before rejoining ({reason})",
            revoke.partitions.len()
        );
        self.revoking_before_join = true;
        let fenced = shared.lock().fence_now(&revoke.partitions);
        Some(Change::Revoke {
            identity: revoke.identity,
            partitions: revoke.partitions,
            fenced,
            decision: Decision(Decided::BeforeJoin),
        })
    }

    /// Closing: the losses not handed out, then the revocation of everything still owned, in
    /// the current generation, fenced now.
    pub(crate) fn closing(&mut self, shared: &Shared) -> Vec<Change> {
        let _ = self.take_reports(shared);
        let mut changes: Vec<Change> = self.losses.drain(..).collect();
        let Some((identity, partitions)) = shared.lock().leave() else {
            return changes;
        };
        if !partitions.is_empty() {
            let fenced = shared.lock().fence_now(&partitions);
            changes.push(Change::Revoke {
                identity,
                partitions,
                fenced,
                decision: Decision(Decided::Closing),
            });
        }
        changes
    }
}
