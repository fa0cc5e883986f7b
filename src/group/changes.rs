//! The seam between the membership and the poll thread: the [`Membership`] trait every member
//! type implements (one per group protocol, and the in-memory members tests drive the consumer
//! with), and the ownership [`Change`]s it hands the poll thread at a batch boundary.
//!
//! The membership side (a classic round's SyncGroup answer, KIP-848's reconciliation of the
//! target assignment, an eager rejoin, a close) decides *what* changes; only the poll thread may
//! *apply* it, because a revocation drops the records it fetched, drains what it handed out and
//! commits synchronously. The contract, in order:
//!
//! 1. **Decided**: the change is stored as one [`Pending`], and the partitions it revokes are
//!    fenced in the guard at once, through the [`FenceHook`], under the session lock: from that
//!    instant no new record of theirs is handed out, while the partitions the member keeps go on
//!    flowing. The hook's [`Fenced`] token travels with the change.
//! 2. **Applied**: [`Membership::next_change`] hands the change out, one [`Change`] at a time
//!    (revocations first, then the assignment); the consumer's handoff driver drains, commits
//!    with [`Membership::commit_as`] in the change's identity (the generation the broker accepts
//!    for those partitions), and answers with the change's [`Ack`].
//! 3. **Acknowledged** ([`Membership::acknowledge`]): the partitions are no longer ours in the
//!    session; once the last event of the change is acknowledged the change is cleared, and only
//!    then may the membership send its next request that depends on it (the cooperative second
//!    JoinGroup, whose owned partitions no longer list the revoked ones; for KIP-848, the
//!    heartbeat that acknowledges the revocation; for the eager protocol, the JoinGroup).
//!
//! Losses do not wait for a batch boundary: the session fences everything through the lost hook
//! at once, drops any pending change (nothing of it may be committed or handed out), and the
//! next [`Membership::next_change`] reports the loss.

use std::sync::Arc;
use std::time::Duration;

use super::assignor::RebalanceProtocol;
use super::error::{CommitError, GroupError};
use super::membership::RebalancePlan;
use super::requests::MemberIdentity;
use crate::guard::{Fenced, SessionBound};
use crate::wire::{FetchStats, Nudge, OffsetCommitEntry, RecordSource, WireError};
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

/// One ownership change for the poll thread to apply, in the order the membership hands them
/// out.
#[derive(Debug)]
pub enum Change {
    /// Hand these partitions back: drain their work, commit it as `identity` (synchronously,
    /// with [`Membership::commit_as`]), then [`Membership::acknowledge`] with `ack`.
    Revoke {
        /// The generation (or member epoch) that owns the partitions until they are handed
        /// back: the handoff's commit carries it.
        identity: MemberIdentity,
        /// The partitions.
        partitions: Vec<TopicPartition>,
        /// The guard's fence, taken when the revocation was decided (`None` when no fence hook
        /// was set: the driver fences them now).
        fenced: Option<Fenced>,
        /// Hands the partitions back to the membership once committed.
        ack: Ack,
    },
    /// These partitions are ours from now on (under incremental protocols: only the new ones).
    /// Start them, then [`Membership::acknowledge`] with `ack`.
    Assign {
        /// The generation (or member epoch) they are assigned in.
        identity: MemberIdentity,
        /// The partitions.
        partitions: Vec<TopicPartition>,
        /// True when this member computed the group's assignment (classic protocol only).
        leader: bool,
        /// Tells the membership the assignment was started.
        ack: Ack,
    },
    /// These partitions were taken away without a handoff; they were fenced through the
    /// [`LostHook`] when the loss was detected. Never commit them.
    Lost {
        /// The partitions.
        partitions: Vec<TopicPartition>,
        /// Why.
        reason: LostReason,
    },
}

/// The receipt of one applied [`Change`], handed back through [`Membership::acknowledge`]: only
/// the membership that issued it reads what is inside.
#[must_use = "a change not acknowledged holds the membership's next request back"]
#[derive(Debug)]
pub struct Ack(pub(crate) AckKind);

impl Ack {
    /// The partitions a revocation's acknowledgement hands back (an empty list for the eager
    /// revocation of everything before a JoinGroup, or a close), `None` for an assignment's:
    /// what an observer of the membership (a test's in-memory member) records.
    pub fn revoked(&self) -> Option<Vec<TopicPartition>> {
        match &self.0 {
            AckKind::Revoked { partitions, .. } => Some(partitions.clone()),
            AckKind::RevokedBeforeJoin | AckKind::Closing => Some(Vec::new()),
            AckKind::Assigned { .. } => None,
        }
    }
}

/// What an [`Ack`] acknowledges, for the member that issued it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AckKind {
    /// A revocation of the decided change `change` of `identity`.
    Revoked {
        identity: MemberIdentity,
        partitions: Vec<TopicPartition>,
        change: ChangeId,
    },
    /// An eager revocation of everything before the JoinGroup.
    RevokedBeforeJoin,
    /// The assignment of the decided change `change` of `identity` (`None`: an assignment no
    /// membership decided, a manual one).
    Assigned {
        identity: MemberIdentity,
        change: Option<ChangeId>,
    },
    /// The hand-back of everything when closing: nothing to record.
    Closing,
}

/// A group member as the poll thread drives it, whatever the protocol: take the next change,
/// commit with an identity, acknowledge. The consumer, its batches and its handoff driver are
/// written against this trait only, so they run the same over the classic protocol, KIP-848,
/// and the in-memory members of the tests.
pub trait Membership: Send {
    /// The next ownership change to apply, waiting up to `timeout` for the membership (an
    /// eager round runs inside this call); `None` once the member is stable or the time is up.
    /// Losses come first, then the decided change, one event at a time.
    fn next_change(&mut self, timeout: Duration) -> Result<Option<Change>, GroupError>;

    /// A change was applied (see [`Change`]): the membership may go on.
    fn acknowledge(&mut self, ack: Ack);

    /// Closing: the losses not reported yet, then the revocation of everything still owned (in
    /// the current generation), for the driver to hand off before [`leave`](Self::leave).
    fn closing(&mut self) -> Vec<Change>;

    /// Leaves the group (unless static) and stops the membership's threads.
    fn leave(&mut self) -> Result<(), GroupError>;

    /// Commits synchronously as `identity`, after the background commit in flight (if any) was
    /// answered, so commits reach the coordinator in the order they were made. `kind` says what
    /// a refusal means (see [`CommitKind`]).
    fn commit_as(
        &mut self,
        identity: &MemberIdentity,
        offsets: &[OffsetCommitEntry],
        kind: CommitKind,
    ) -> Result<CommitResults, CommitError>;

    /// Commits synchronously as the current identity (the application's commit between polls,
    /// with offsets read just before it).
    fn commit(&mut self, offsets: &[OffsetCommitEntry]) -> Result<CommitResults, CommitError> {
        let identity = self.identity();
        self.commit_as(&identity, offsets, CommitKind::Application)
    }

    /// Sends a commit as the current identity without waiting for it (a paced commit); the
    /// offsets come back when one is still in flight or its answer was not taken.
    fn commit_in_background(
        &mut self,
        offsets: Vec<OffsetCommitEntry>,
    ) -> Result<(), Vec<OffsetCommitEntry>>;

    /// The background commit's answer, once it arrived; never waits.
    fn commit_answer(&mut self) -> Option<Result<CommitResults, CommitError>>;

    /// Waits until the background commit (if any) was answered; its answer stays for
    /// [`commit_answer`](Self::commit_answer).
    fn settle_commit(&mut self);

    /// True while a background commit was not answered, or its answer not taken.
    fn commit_in_flight(&self) -> bool;

    /// Where the poll thread reads records and positions: the member's wire client (an
    /// in-memory log in tests).
    fn records(&mut self) -> &mut dyn RecordSource;

    /// Bytes fetched per broker and the partitions read from preferred read replicas (KIP-392),
    /// for the consumer's stats; empty for a membership whose records come from no broker.
    fn fetch_stats(&self) -> FetchStats {
        FetchStats::default()
    }

    /// The generation (or member epoch) and member id now.
    fn identity(&self) -> MemberIdentity;

    /// The partitions owned now.
    fn owned(&self) -> Vec<TopicPartition>;

    /// Eager (everything stops for a rebalance) or incremental (only what moves stops).
    fn rebalance_protocol(&self) -> RebalanceProtocol;

    /// True when records of what we own may be fetched and handed out.
    fn may_fetch(&self) -> bool;

    /// True when the batch should end so a change can be applied (eager: any rebalance).
    fn batch_boundary_due(&self) -> bool;

    /// The poll thread is inside the library (`max.poll.interval.ms` does not run) until
    /// [`leave_poll`](Self::leave_poll).
    fn enter_poll(&self);

    /// The application has control again: `max.poll.interval.ms` runs from now.
    fn leave_poll(&self);

    /// Waits up to `timeout` while `bound` has lapsed and the membership has nothing new.
    fn wait_while_session_lapsed(&self, bound: &SessionBound, timeout: Duration);

    /// Ends the poll thread's wait in [`next_change`](Self::next_change) or
    /// [`wait_while_session_lapsed`](Self::wait_while_session_lapsed) from any thread (the
    /// consumer's waker): the wait returns as if its time were up. An eager round running on
    /// the poll thread is not interrupted (its requests are on the wire).
    fn nudge(&self) -> Nudge;

    /// A handle that reads the identity and ownership from any thread.
    fn view(&self) -> MembershipView;

    /// Lets every answered request renew `bound` (leases expire by time too).
    fn bound_session(&self, bound: Arc<SessionBound>);

    /// Fences revocations through `hook` the moment they are decided.
    fn fence_revocations_with(&self, hook: FenceHook);

    /// Makes the membership thread panic (tests of a dead membership thread only).
    #[doc(hidden)]
    fn panic_membership_thread(&self);

    /// Makes the commit thread panic at its next commit (tests of a dead commit thread only;
    /// a membership without one has nothing to do).
    #[doc(hidden)]
    fn panic_commit_thread(&self) {}
}

/// Read-only access to a member's generation and ownership from another thread (see
/// [`Membership::view`]): a metrics endpoint or a watchdog reads it while the poll thread is
/// inside a long call; it keeps no membership alive and changes nothing.
#[derive(Clone)]
pub struct MembershipView(Arc<dyn Fn() -> (MemberIdentity, Vec<TopicPartition>) + Send + Sync>);

impl MembershipView {
    /// A view reading through `read`, which returns the identity and the owned partitions
    /// together (two separate reads could pair a new generation with the previous assignment).
    pub fn new(
        read: impl Fn() -> (MemberIdentity, Vec<TopicPartition>) + Send + Sync + 'static,
    ) -> Self {
        MembershipView(Arc::new(read))
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

/// One decided ownership change waiting for the poll thread.
#[derive(Debug)]
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
    /// The guard's fence of what the change revokes, taken when it was decided; handed to the
    /// poll thread with the change's revocation.
    pub(crate) fenced: Option<Fenced>,
    /// Which decided change this is ([`ChangeId`]): the acknowledgements of the poll thread
    /// name it, so that they apply to this change only.
    pub(crate) id: ChangeId,
}

/// Names one decided change for the life of a session, never reused. The identity alone cannot:
/// after a loss the member may be given the same epoch and the same partitions again (KIP-848
/// answers an epoch-0 rejoin of a member it still holds that way), and the acknowledgement of a
/// change from before the loss, still in the poll thread's hands, must neither clear the change
/// decided after it (which would never be handed out: the member would hold partitions the
/// session, the guard and the poll loop know nothing of) nor change what the session owns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub(crate) struct ChangeId(pub(crate) u64);
