//! The consumer group protocol (KIP-848, `group.protocol=consumer`) as a sans-I/O state machine.
//!
//! # Why
//!
//! Under the consumer group protocol the broker computes the assignment and each member converges
//! on its own through ConsumerGroupHeartbeat (API 68): there is no group-wide JoinGroup/SyncGroup
//! barrier, so a slow member delays nobody but itself. The client side is subtle (which fields to
//! send when, which epoch to send, when a partition may be reported as given up, what each error
//! means), so every decision lives here, with no socket, no thread and no clock of its own, and
//! is pinned by tests against an in-memory coordinator (the hidden `testing` module's `consumer_group`) that
//! runs the broker's rules. The I/O shell (the member's own thread beside the poll loop) sends what
//! [`ConsumerGroupMembership::poll_transmit`] returns, feeds the answer back, and hands the
//! [`Event`]s to the poll thread, which applies them to the guard at batch boundaries.
//!
//! # Inputs and outputs
//!
//! In: heartbeat answers ([`on_response`](ConsumerGroupMembership::on_response)), lost requests
//! ([`on_transport_error`](ConsumerGroupMembership::on_transport_error)), the coordinator being
//! found ([`coordinator_found`](ConsumerGroupMembership::coordinator_found), with the negotiated
//! version), topic names ([`on_metadata`](ConsumerGroupMembership::on_metadata)), the poll
//! thread's acknowledgement that a revocation finished
//! ([`revocation_done`](ConsumerGroupMembership::revocation_done)), `leave`, `poll_timed_out`,
//! `rejoin`, and the time (`handle_timeout`), always passed in.
//!
//! Out: the next heartbeat ([`poll_transmit`](ConsumerGroupMembership::poll_transmit): the full
//! form when joining, after any error or when a field changed, else the short one), when to call
//! again ([`poll_timeout`](ConsumerGroupMembership::poll_timeout): the broker's interval, at once
//! for an acknowledgement), which topic ids to look up
//! ([`poll_metadata`](ConsumerGroupMembership::poll_metadata)), the session bound for leases
//! ([`session_renewal`](ConsumerGroupMembership::session_renewal), see `liveness`), and events:
//! [`Event::Revoke`] (fence, drain, commit with the member epoch, then acknowledge; the partitions
//! are reported as owned until then), [`Event::Assign`], [`Event::Lost`] (fence and discard, no
//! commit), [`Event::Fatal`], [`Event::Left`].
//!
//! # States
//!
//! ```text
//!                 poll_transmit: epoch 0, full (owned = [])
//!   new ───────► JOINING ─────────answer with epoch > 0─────────► STABLE ◄─────────────┐
//!                  ▲  ▲                                             │ target changed    │ nothing left
//!                  │  │                                             ▼                   │ to do
//!                  │  │                                         RECONCILING ────────────┘
//!                  │  │       Revoke(owned − target) ─► revocation_done ─► ack heartbeat at once
//!                  │  │       then Assign(target − owned); ids not yet named: Metadata, retried
//!                  │  │
//!                  │  └── Lost, epoch 0: FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID, a revocation
//!                  │      unacknowledged past the rebalance timeout, the session bound passed
//!                  │      (a static member the broker may still hold goes through RELEASING:
//!                  │      epoch -2 under its member id, answered, then JOINING; Kafka refuses
//!                  │      an epoch-0 join with UNRELEASED_INSTANCE_ID until the instance id's
//!                  │      member left with -2. A join answered UNRELEASED_INSTANCE_ID after a
//!                  │      lost answer releases too; a release answered FENCED_INSTANCE_ID means
//!                  │      another process holds the instance id: FATAL)
//!                  │
//!                  └────────── rejoin() ◄── LEFT / STALE
//!
//!   STABLE/RECONCILING ── leave() ──► PREPARE_LEAVING (Revoke all) ── revocation_done ──►
//!        LEAVING (epoch -1; -2 for a static member) ── answered, or not sendable ──► LEFT
//!   member ── poll_timed_out() ──► Lost, LEAVING ──► STALE
//!   any ── UNRELEASED_INSTANCE_ID, UNSUPPORTED_ASSIGNOR, INVALID_REQUEST, GROUP_MAX_SIZE_REACHED,
//!          authorization, UNSUPPORTED_VERSION ──► Lost, FATAL (with the reason)
//!   any ── NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, connection lost ──► find the coordinator,
//!          resend the full heartbeat (state unchanged)
//! ```
//!
//! # Rules kept
//!
//! - The epoch sent is 0 to join, -1 to leave, -2 for a static member's leave, the broker's
//!   otherwise; a negative epoch in an answer is never adopted.
//! - Owned partitions are reported exactly: a partition being revoked is still owned until the
//!   poll thread acknowledged the revocation, and the heartbeat after the acknowledgement reports
//!   it gone; a partition of a topic id that cannot be named yet is not owned (nothing can work on
//!   it), and stays in the target until it resolves or the broker drops it.
//! - Revoke before assign, the acknowledgement after both, as the Java client and as the classic
//!   cooperative protocol's order that reviewers already read.
//! - A commit refused with STALE_MEMBER_EPOCH is retried with the new epoch, only for partitions
//!   still owned ([`ConsumerGroupMembership::stale_epoch_retry`]).
//!
//! # Map
//!
//! - `machine/`: the machine itself, [`ConsumerGroupMembership`] and its [`MemberState`]; its
//!   failure paths (error answers, a static member's release, losses) in
//!   `machine/failures.rs`.
//! - `types.rs`: the machine's vocabulary: its configuration, the heartbeat it asks to send and
//!   the answer it is fed (both free of the wire encoding), and the [`Event`]s it hands out.
//! - What each ConsumerGroupHeartbeat error code asks of the member is one column of the
//!   heartbeat error table both heartbeat protocols share (`group/heartbeat_errors.rs`).
//! - `reconcile.rs`: the reconciliation decisions as pure functions: which partitions of the
//!   target can be named yet, what to revoke and what to assign, and which partitions a commit
//!   refused with STALE_MEMBER_EPOCH may be retried.
//! - `liveness.rs`: how long the member may trust its ownership without a fresh heartbeat
//!   answer: the session bound derived from the heartbeat interval.
//! - `wire.rs`: the requests on a coordinator connection (ConsumerGroupHeartbeat, and the
//!   Metadata lookup that names topic ids), translated to and from the machine's types.
//! - `thread.rs`: the membership thread: what this protocol supplies to the membership-thread
//!   shell both heartbeat protocols run on (`group/membership_thread.rs`, which heartbeats and
//!   resolves topic ids); it hands the machine's decisions to the poll thread.
//! - `member.rs`: [`ConsumerGroupMember`], the generic poll-thread member over this protocol.
//! - `mirror.rs`: the machine mirrored into the shared session (what the poll thread did goes
//!   in, what the machine decided comes out as changes), run by the membership thread and by
//!   the in-memory members of the tests alike.
//! - `tests.rs`: the machine driven through whole group lives against the in-memory coordinator,
//!   with time passed in.

pub(crate) mod liveness;
mod machine;
mod member;
pub(crate) mod mirror;
pub(crate) mod reconcile;
mod thread;
mod types;
pub mod wire;

pub use crate::group::ids::{generate_member_id, TopicId};
pub use machine::{ConsumerGroupMembership, MemberState};
pub use member::{ConsumerGroup, ConsumerGroupMember};
pub use reconcile::StaleEpochRetry;
pub use types::{
    ConsumerGroupConfig, Event, HeartbeatRequest, HeartbeatResponse, IdAssignment, RemoteAssignor,
    RevocationId, BROKER_DEFAULT_SESSION_TIMEOUT, JOIN_EPOCH, LEAVE_EPOCH, SESSION_BOUND_INTERVALS,
    STATIC_LEAVE_EPOCH,
};

#[cfg(test)]
use super::outcome::{FatalError, LostReason};

#[cfg(test)]
mod tests;
