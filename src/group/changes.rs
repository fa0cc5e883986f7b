//! The seam between the membership and the poll thread: the one [`Change`] type a decided
//! ownership change travels in, from the session that decides it to the poll thread's driver
//! that applies it and back as its acknowledgement, and the hooks and commit vocabulary the
//! seam needs. The trait every member type implements, [`Membership`], lives in
//! `membership.rs`.
//!
//! The membership side (a classic round's SyncGroup answer, KIP-848's reconciliation of the
//! target assignment, an eager rejoin, a close) decides *what* changes; only the poll thread may
//! *apply* it, because a revocation drops the records it fetched, drains what it handed out and
//! commits synchronously. The contract, in order:
//!
//! 1. **Decided**: the session stores the change's steps as [`Change`]s (revocations first,
//!    then the assignment), each carrying the [`Decision`] it belongs to, and the partitions it
//!    revokes are fenced in the guard at once, through the [`FenceHook`], under the session
//!    lock: from that instant no new record of theirs is handed out, while the partitions the
//!    member keeps go on flowing. The hook's [`Fenced`] token travels in the `Revoke`.
//! 2. **Applied**: [`Membership::next_change`] hands the changes out, one at a time; the
//!    consumer's handoff driver drains, commits with [`Membership::commit_as`] in the change's
//!    identity (the generation the broker accepts for those partitions), and hands the change
//!    back.
//! 3. **Acknowledged** ([`Membership::acknowledge`] with the applied [`Change`]): the partitions
//!    are no longer ours in the session; once the last step of the decision is acknowledged the
//!    decision is cleared, and only then may the membership send its next request that depends
//!    on it (the cooperative second JoinGroup, whose owned partitions no longer list the revoked
//!    ones; for KIP-848, the heartbeat that acknowledges the revocation; for the eager protocol,
//!    the JoinGroup).
//!
//! Losses do not wait for a batch boundary: the session fences everything through the lost hook
//! at once, drops any pending change (nothing of it may be committed or handed out), and the
//! next [`Membership::next_change`] reports the loss.
//!
//! [`Membership`]: super::Membership
//! [`Membership::next_change`]: super::Membership::next_change
//! [`Membership::commit_as`]: super::Membership::commit_as
//! [`Membership::acknowledge`]: super::Membership::acknowledge

use std::sync::Arc;

use super::requests::MemberIdentity;
use crate::guard::Fenced;
use crate::wire::WireError;
use crate::TopicPartition;

use super::outcome::LostReason;

/// Each partition's own commit result: one refused partition does not fail the others.
pub type CommitResults = Vec<(TopicPartition, Result<(), WireError>)>;

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
    /// The commit that raises a newly assigned partition's fencing token (the committed
    /// position again, with the next token in its metadata), before any record of it is
    /// handed out: a refusal that ends the membership loses the assignment, as between polls.
    Fencing,
}

/// Called with partitions the membership has decided to revoke, before the poll thread hands
/// them off: the consumer fences them in the guard (`RebalanceGuard::fence`) and the token it
/// returns travels with the change to the handoff. Runs under the session lock on whichever
/// thread decided the change, so it must not block.
pub type FenceHook = Arc<dyn Fn(&[TopicPartition]) -> Fenced + Send + Sync>;

/// Called with partitions whose ownership ended without a handoff, and why. The consumer fences
/// them in the guard; it runs on whichever thread detected the loss, under the session lock, and
/// must not block.
pub type LostHook = Arc<dyn Fn(&[TopicPartition], &LostReason) + Send + Sync>;

/// One ownership change, the only type a change travels in: the session decides it (a classic
/// round's SyncGroup answer, KIP-848's reconciliation, an eager rejoin, a close), the member
/// hands it to the poll thread, the driver applies it and hands the same value back through
/// [`Membership::acknowledge`](super::Membership::acknowledge), where the membership reads the [`Decision`] it carries.
#[derive(Debug)]
pub enum Change {
    /// Hand these partitions back: drain their work, commit it as `identity` (synchronously,
    /// with [`Membership::commit_as`](super::Membership::commit_as)), then [`Membership::acknowledge`](super::Membership::acknowledge) the change.
    Revoke {
        /// The generation (or member epoch) that owns the partitions until they are handed
        /// back: the handoff's commit carries it.
        identity: MemberIdentity,
        /// The partitions.
        partitions: Vec<TopicPartition>,
        /// The guard's fence, taken when the revocation was decided (`None` when no fence hook
        /// was set: the driver fences them now). The driver takes it out to drain.
        fenced: Option<Fenced>,
        /// The decision this revocation carries out, for the acknowledgement.
        decision: Decision,
    },
    /// These partitions are ours from now on (under incremental protocols: only the new ones).
    /// Start them, then [`Membership::acknowledge`](super::Membership::acknowledge) the change.
    Assign {
        /// The generation (or member epoch) they are assigned in.
        identity: MemberIdentity,
        /// The partitions.
        partitions: Vec<TopicPartition>,
        /// True when this member computed the group's assignment (classic protocol only).
        leader: bool,
        /// The decision this assignment carries out, for the acknowledgement.
        decision: Decision,
    },
    /// These partitions were taken away without a handoff; they were fenced through the
    /// [`LostHook`] when the loss was detected. Never commit them, and nothing to acknowledge.
    Lost {
        /// The partitions.
        partitions: Vec<TopicPartition>,
        /// Why.
        reason: LostReason,
    },
}

impl Change {
    /// The decision a revocation or an assignment carries out (`None` for a loss).
    pub(crate) fn decision(&self) -> Option<&Decision> {
        match self {
            Change::Revoke { decision, .. } | Change::Assign { decision, .. } => Some(decision),
            Change::Lost { .. } => None,
        }
    }

    /// The partitions a revocation's acknowledgement hands back (an empty list for the eager
    /// revocation of everything before a JoinGroup, or a close), `None` for any other change:
    /// what an observer of the membership (a test's in-memory member) records.
    pub fn revoked(&self) -> Option<Vec<TopicPartition>> {
        match self {
            Change::Revoke {
                partitions,
                decision: Decision(Origin::Session { .. }),
                ..
            } => Some(partitions.clone()),
            Change::Revoke { .. } => Some(Vec::new()),
            Change::Assign { .. } | Change::Lost { .. } => None,
        }
    }
}

/// Which decision of the membership a [`Change`] carries out: only the membership that made
/// it reads what is inside, when the change comes back acknowledged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision(pub(crate) Origin);

impl Decision {
    /// An assignment no membership decided: a manual one.
    pub(crate) fn manual() -> Self {
        Decision(Origin::Manual)
    }

    /// The session's decided change this is, if the session decided it.
    pub(crate) fn id(&self) -> Option<ChangeId> {
        match &self.0 {
            Origin::Session { id, .. } => Some(*id),
            Origin::BeforeJoin | Origin::Closing | Origin::Manual => None,
        }
    }
}

/// Who decided a change, and what its acknowledgement does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    /// The session's decided change `id`: the session keeps it pending until its last step is
    /// acknowledged (see `member.rs`'s hand-out).
    Session {
        /// Which decided change ([`ChangeId`]).
        id: ChangeId,
        /// What is owned once the change is applied (sorted): the assignment sets it.
        owned_after: Vec<TopicPartition>,
        /// Cooperative: something was revoked, so the follow-up round must run (KIP-429).
        rejoin: bool,
        /// KIP-848: the machine's revocation this change carries, acknowledged to the machine
        /// once applied; the classic protocol has none.
        machine: Option<u64>,
    },
    /// Eager: the revocation of everything before the JoinGroup, made on the poll thread.
    BeforeJoin,
    /// The revocation of everything when closing: nothing to record.
    Closing,
    /// An assignment no membership decided (a manual one).
    Manual,
}

/// Read-only access to a member's generation and ownership from another thread (a consumer's
/// `membership_view`): a metrics endpoint, a watchdog or an audit log reads it while the poll
/// thread is inside a long call; it keeps no membership alive and changes nothing.
#[derive(Clone)]
pub struct MembershipView(Arc<dyn Fn() -> (MemberIdentity, Vec<TopicPartition>) + Send + Sync>);

impl MembershipView {
    internal_pub! {
    /// A view reading through `read`, which returns the identity and the owned partitions
    /// together (two separate reads could pair a new generation with the previous assignment).
    fn new(
        read: impl Fn() -> (MemberIdentity, Vec<TopicPartition>) + Send + Sync + 'static,
    ) -> Self {
        MembershipView(Arc::new(read))
    }
    }

    /// The generation id and member id, and the partitions owned, read together.
    pub fn read(&self) -> (MemberIdentity, Vec<TopicPartition>) {
        (self.0)()
    }
}

impl std::fmt::Debug for MembershipView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MembershipView").finish_non_exhaustive()
    }
}

/// Names one decided change for the life of a session, never reused. The identity alone cannot:
/// after a loss the member may be given the same epoch and the same partitions again (KIP-848
/// answers an epoch-0 rejoin of a member it still holds that way), and the acknowledgement of a
/// change from before the loss, still in the poll thread's hands, must neither clear the change
/// decided after it (which would never be handed out: the member would hold partitions the
/// session, the guard and the poll loop know nothing of) nor change what the session owns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub(crate) struct ChangeId(pub(crate) u64);

/// Sends one commit of offsets and returns each partition's result: a client's OffsetCommit in
/// the product, a TxnOffsetCommit inside a transaction (`Consumer::run_transactional`), an
/// in-memory coordinator in tests.
pub type OffsetCommitSend<'a> = dyn FnMut(
        &crate::wire::CommitIdentity<'_>,
        &[crate::wire::OffsetCommitEntry],
    ) -> Result<CommitResults, super::error::CommitError>
    + 'a;
