//! Consumer-group membership, under both of Kafka's group protocols: the classic one (JoinGroup,
//! SyncGroup, Heartbeat; eager and cooperative assignors, static membership) and the consumer
//! group protocol of KIP-848 (`group.protocol=consumer`, the broker assigns). How a member
//! announces what it wants, how partitions are divided, and what a new assignment or an error
//! code means for the consumer.
//!
//! This part is I/O-free, like the guard, so that every interoperability rule (byte layouts,
//! assignor results, event order, error handling) is pinned by unit tests:
//! - `consumer_protocol`: the subscription and assignment bytes members exchange through the
//!   broker, readable by Java, librdkafka and kafka-python members;
//! - `assignor`: `range`, `roundrobin` and `cooperative-sticky`, run when we are the leader, and
//!   the JoinGroup protocol list built from `partition.assignment.strategy`;
//! - `membership`: what to revoke, lose and assign, in which order, and what each group error
//!   code asks for.
//! - `outcome`: the vocabulary both protocols' error tables share: [`ErrorAction`],
//!   [`FatalError`], [`LostReason`].
//! - `session`: the membership's state and every transition of its life cycle (join, joined,
//!   stabilise, rejoin, lose, close; the heartbeat thread's renewal, session expiry and poll
//!   timeout), driven in its tests by an in-memory coordinator with time passed in.
//!
//! - [`consumer_group`]: the consumer group protocol (KIP-848, `group.protocol=consumer`) as a
//!   sans-I/O state machine over ConsumerGroupHeartbeat, with its own in-memory coordinator tests.
//!
//! The I/O shell around it: `member` (the poll thread: applies decided changes, leaves, commits,
//! and under the eager protocol runs the rounds), `round` (one JoinGroup/SyncGroup round, on
//! whichever thread owns it), `heartbeat` (the heartbeat thread, which under the cooperative
//! protocol also runs the rounds, beside the poll loop) and `consumer_member` (the membership
//! thread of the consumer group protocol: heartbeats, topic-id resolution, reconciliation) send
//! the requests, feed the answers to the session or the machine, and apply what they decide. `changes` is the seam between the membership and the
//! poll thread: decided changes wait there for the next batch boundary.

pub(crate) mod assignor;
// The items marked `#[doc(hidden)] pub` below are the group layer's internals that the
// integration tests (tests/group_*.rs, tests/consumer_group_protocol.rs) and the fuzz targets
// drive directly against a broker; they are not part of the product's API and may change
// without notice. Applications reach the group only through `Consumer`.
mod changes;
#[doc(hidden)]
pub mod classic;
pub(crate) mod commit;
mod committer;
mod config;
#[doc(hidden)]
pub mod consumer_group;
mod error;
mod failover;
pub(crate) mod handout;
mod listener;
pub(crate) mod member;
pub(crate) mod membership;
mod outcome;
mod quirks;
#[doc(hidden)]
pub mod requests;
pub(crate) mod session;
pub(crate) mod subscription;

pub use assignor::{RebalanceProtocol, Strategy, StrategyError};
pub use changes::{Ack, Change, FenceHook, LostHook, Membership, MembershipView};
#[doc(hidden)]
pub use classic::ClassicMember;
#[doc(hidden)]
pub use commit::{CommitKind, CommitResults};
#[doc(hidden)]
pub use config::GroupConfig;
#[doc(hidden)]
pub use consumer_group::ConsumerGroupMember;
pub use error::{CommitError, GroupError};
#[doc(hidden)]
pub use listener::{close_with, poll_with, GroupContext, RebalanceListener};
#[doc(hidden)]
pub use member::{Member, MemberIo, Protocol, Step};
pub use outcome::{ErrorAction, FatalError, GroupApi, LostReason};

pub(crate) use assignor::{check_strategies, AssignError};
pub use requests::MemberIdentity;
