//! The in-memory cluster that tests drive the consumer against: no broker, no socket, no sleep.
//!
//! Why: the consumer's hard cases (a revocation in the middle of a batch, a commit refused while
//! the group re-forms, a position that fell out of the log) are races against a broker, and a
//! real broker makes them slow and rarely repeatable. Here each side of the conversation is a
//! plain value the test steps, the way quinn-proto's tests drive both ends of a connection:
//!
//! - [`InMemoryLog`] (`memory_log.rs`): topics, partitions and their records, and the groups'
//!   committed offsets. It answers the poll thread's reads
//!   ([`RecordSource`](crate::wire::RecordSource)) with real encoded record batches, and its
//!   handles share one state, so a coordinator's commits and the consumer's position lookups
//!   meet in the same store.
//! - [`classic::Coordinator`] and [`consumer_group::Coordinator`]: the broker's group rules for
//!   the classic protocol and for KIP-848, with time passed in, whose commits can be stored in
//!   an attached [`InMemoryLog`].
//! - `member.rs`: what every in-memory member shares, whatever its protocol: the
//!   [`Membership`](crate::group::Membership) the consumer drives (the real hand-out and commit
//!   checks, a paced commit a test may hold in flight, a [`Journal`]), and the [`MemberHandle`]
//!   a test keeps;
//! - [`ClassicGroup`] (`classic_member.rs`): members that run the real session, hand-out and
//!   commit checks of the classic protocol against the classic coordinator, for
//!   `Consumer::with_membership`: the whole consumer in memory.
//! - [`Kip848Group`] (`consumer_group_member.rs`): KIP-848 members that run the real machine,
//!   mirrored into the real session by the membership thread's own code, against the KIP-848
//!   coordinator, for the same use.
//! - [`share::ShareCoordinator`] (`share/`): a share group's broker side (KIP-932) with time
//!   passed in: membership by heartbeat, records of an [`InMemoryLog`] acquired under locks with
//!   delivery counts, acknowledgements, lock expiry, the delivery count limit, share sessions;
//!   its members plug into the share consumer's seams
//!   ([`ShareSource`](crate::share::ShareSource), [`ShareMember`](crate::share::ShareMember)),
//!   which then runs whole, on a manual clock.
//!
//! Not part of the API: hidden from the documentation, it may change with any test's needs.

pub mod classic;
mod classic_member;
pub mod consumer_group;
mod consumer_group_member;
mod member;
mod memory_log;
pub mod share;

pub use classic_member::ClassicGroup;
pub use consumer_group_member::Kip848Group;
pub use member::{Journal, MemberHandle};
pub use memory_log::{InMemoryLog, DEFAULT_MAX_FETCH_RECORDS};

#[cfg(test)]
mod tests;
