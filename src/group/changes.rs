//! The seam between the membership and the poll thread: ownership changes the membership
//! decided, waiting for the poll thread to apply them at its next batch boundary.
//!
//! The membership side (a classic round's SyncGroup answer, or KIP-848's reconciliation of the
//! target assignment the broker sent) decides *what* changes; only the poll thread may *apply* it,
//! because
//! a revocation drops the records it fetched, drains what it handed out and commits synchronously
//! through the rebalance listener (`consumer/bridge.rs`). The contract, in order:
//!
//! 1. **Decided** ([`SessionState::post_assignment`](super::session::SessionState::post_assignment)):
//!    the change is stored as one [`Pending`], and the partitions it revokes are fenced in the
//!    guard at once, through the [`FenceHook`], under the session lock: from that instant no new
//!    record of theirs is handed out, while the partitions the member keeps go on flowing.
//! 2. **Applied** (`GroupMember::poll` → `apply_pending`, on the poll thread, between batches):
//!    revocations first (the listener drains and commits with [`Pending::identity`], the
//!    generation the broker accepts for them), then the assignment. Each revocation is
//!    acknowledged to the session (`SessionState::revoked`), the assignment too
//!    (`SessionState::assigning`, which asks for the cooperative follow-up round).
//! 3. **Acknowledged** (`SessionState::changes_applied`): the pending change is cleared, and only
//!    then may the membership send its next request that depends on it (the cooperative second
//!    JoinGroup, whose owned partitions no longer list the revoked ones; for KIP-848, the
//!    heartbeat that acknowledges the revocation).
//!
//! Losses do not wait for a batch boundary: [`SessionState::lose`](super::session::SessionState::lose)
//! fences everything through the lost hook at once, drops any pending change (nothing of it may be
//! committed or handed out), and the poll thread reports the loss at its next poll.

use std::sync::Arc;

use super::membership::RebalancePlan;
use super::requests::MemberIdentity;
use crate::TopicPartition;

/// Called with partitions the membership has decided to revoke, before the poll thread hands
/// them off: the consumer fences them in the guard (`RebalanceGuard::fence`). Runs under the
/// session lock on whichever thread decided the change, so it must not block.
pub type FenceHook = Arc<dyn Fn(&[TopicPartition]) + Send + Sync>;

/// One decided ownership change waiting for the poll thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Pending {
    /// The generation (or member epoch) the change belongs to: the revocation's commit carries
    /// it, and the change is void once the session's identity is no longer this one.
    pub(crate) identity: MemberIdentity,
    /// Whether this member computed the group's assignment for it.
    pub(crate) leader: bool,
    /// What to apply, in order (revocations, then the assignment).
    pub(crate) plan: RebalancePlan,
    /// KIP-848: the machine's revocation this change carries, acknowledged to it once applied
    /// (`SessionState::take_acknowledged`); the classic protocol has none.
    pub(crate) ack: Option<u64>,
}

impl Pending {
    /// The partitions this change revokes (fenced when it was decided).
    pub(crate) fn revoked(&self) -> Vec<TopicPartition> {
        self.plan
            .events
            .iter()
            .filter_map(|event| match event {
                super::membership::RebalanceEvent::Revoke(partitions) => Some(partitions.clone()),
                _ => None,
            })
            .flatten()
            .collect()
    }
}
