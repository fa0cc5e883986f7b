//! The rebalance listener: the application's calls at each rebalance (Java's
//! `ConsumerRebalanceListener`, rust-rdkafka's `pre_rebalance`/`post_rebalance`), with the
//! guarantees the handoff driver gives them.
//!
//! All three are called on the poll thread, inside `poll` (or `run`, or `close`), never on the
//! membership thread, and the same way under the classic eager and cooperative protocols and
//! KIP-848:
//!
//! - [`on_assigned`](ConsumerRebalanceListener::on_assigned): the partitions just assigned
//!   (eager: the whole assignment; cooperative and KIP-848: only those added), after the guard
//!   owns them and before their starting positions are looked up, so a seek made here (from an
//!   offset store of the application's) is where reading starts.
//! - [`on_revoked`](ConsumerRebalanceListener::on_revoked): the partitions being handed back
//!   (eager: all of them; cooperative and KIP-848: only those taken away; and all of them at
//!   `close`), after their work drained (no record of them is running or will be handed out)
//!   and before the revocation's commit, with each partition's last finished offset and the
//!   position that commit carries: the place to flush an application's own state or store
//!   offsets elsewhere. The member has not acknowledged the revocation yet: nobody else owns
//!   the partitions while this runs.
//! - [`on_lost`](ConsumerRebalanceListener::on_lost): partitions taken away without a handoff
//!   (the session expired, the member was fenced), after the guard fenced them. Nothing is
//!   committed for them, before or after: another member may own them already.
//!
//! An error from a call does not stop the rebalance (the finished work is committed all the
//! same, the assignment starts): it is returned from the poll that ran it as
//! [`ConsumerError::Listener`](super::ConsumerError::Listener).

use crate::guard::BoxError;
use crate::TopicPartition;

use super::context::Guard;
use super::error::ConsumerError;
use super::intake::Intake;

/// One partition being handed back, as [`ConsumerRebalanceListener::on_revoked`] sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevokedPartition {
    /// The partition.
    pub tp: TopicPartition,
    /// The last offset of the contiguous finished prefix in this assignment (`None`: nothing
    /// finished since it was assigned).
    pub last_finished: Option<i64>,
    /// The next offset the revocation's commit carries (`None`: nothing to commit, the
    /// committed position is already current, or the partition left during the handoff).
    pub committing: Option<i64>,
}

/// What [`ConsumerRebalanceListener::on_assigned`] may do with the partitions it is given:
/// move where they start.
pub struct AssignedContext<'a> {
    pub(crate) guard: &'a Guard,
    pub(crate) intake: &'a mut Intake,
}

impl AssignedContext<'_> {
    /// Starts `tp` (just assigned) at `offset` instead of its committed offset (Java: a `seek`
    /// inside `onPartitionsAssigned`).
    pub fn seek(&mut self, tp: &TopicPartition, offset: i64) -> Result<(), ConsumerError> {
        self.intake.seek_owned(self.guard, tp, offset)
    }

    /// The fencing token of `tp`'s new assignment, which every record of it will carry: the
    /// place to claim the partition in a sink (store the token as its largest), so that from
    /// here on the sink refuses the previous owner's late writes even before this member
    /// wrote anything. `None` when `tp` is not owned or its token could not be raised yet (the
    /// partition is then not read until it is; its records carry it).
    pub fn fencing_token(&self, tp: &TopicPartition) -> Option<u64> {
        self.guard.fencing_token(tp).filter(|&token| token > 0)
    }
}

/// The application's calls at each rebalance. Every method has a default that does nothing;
/// implement those you need. See the module documentation for when each is called and what
/// holds then.
pub trait ConsumerRebalanceListener: Send {
    /// Partitions just assigned, before reading them starts.
    fn on_assigned(
        &mut self,
        partitions: &[TopicPartition],
        context: &mut AssignedContext<'_>,
    ) -> Result<(), BoxError> {
        let _ = (partitions, context);
        Ok(())
    }

    /// Partitions being handed back: drained, not committed yet.
    fn on_revoked(&mut self, partitions: &[RevokedPartition]) -> Result<(), BoxError> {
        let _ = partitions;
        Ok(())
    }

    /// Partitions taken away without a handoff; nothing is committed for them.
    fn on_lost(&mut self, partitions: &[TopicPartition]) -> Result<(), BoxError> {
        let _ = partitions;
        Ok(())
    }
}

/// The listener's error as the consumer returns it.
pub(crate) fn listener_error(callback: &'static str, error: BoxError) -> ConsumerError {
    log::error!(
        "the rebalance listener's {callback} failed: {}",
        crate::wire::ErrorChain(error.as_ref())
    );
    ConsumerError::Listener { callback, error }
}
