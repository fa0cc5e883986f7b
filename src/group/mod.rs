//! Consumer-group membership (the classic protocol): how a member announces what it wants, how the
//! leader divides partitions, and what a new assignment or an error code means for the consumer.
//!
//! This part is I/O-free, like the guard, so that every interoperability rule (byte layouts,
//! assignor results, event order, error handling) is pinned by unit tests:
//! - [`consumer_protocol`]: the subscription and assignment bytes members exchange through the
//!   broker, readable by Java, librdkafka and kafka-python members;
//! - [`assignor`]: `range`, `roundrobin` and `cooperative-sticky`, run when we are the leader, and
//!   the JoinGroup protocol list built from `partition.assignment.strategy`;
//! - [`membership`]: what to revoke, lose and assign, in which order, and what each group error
//!   code asks for.
//! - `session`: the membership's state and every transition of its life cycle (join, joined,
//!   stabilise, rejoin, lose, close; the heartbeat thread's renewal, session expiry and poll
//!   timeout), driven in its tests by an in-memory coordinator with time passed in.
//!
//! - [`consumer_group`]: the consumer group protocol (KIP-848, `group.protocol=consumer`) as a
//!   sans-I/O state machine over ConsumerGroupHeartbeat, with its own in-memory coordinator tests.
//!
//! The I/O shell around it: `member` (the poll thread: applies decided changes, leaves, commits,
//! and under the eager protocol runs the rounds), `round` (one JoinGroup/SyncGroup round, on
//! whichever thread owns it) and `heartbeat` (the heartbeat thread, which under the cooperative
//! protocol also runs the rounds, beside the poll loop) send the requests, feed the answers to
//! the session, and apply what it decides. `changes` is the seam between the membership and the
//! poll thread: decided changes wait there for the next batch boundary.

pub mod assignor;
pub mod consumer_group;
pub mod consumer_protocol;
pub mod membership;

pub use assignor::{
    assign_and_encode, assignor_for, check_strategies, select_protocol, AssignError, Assignor,
    JoinProtocol, JoinProtocolError, JoinProtocols, LeaderError, MemberId, MemberSubscription,
    RebalanceProtocol, Strategy, StrategyError,
};
pub use consumer_protocol::{
    decode_assignment, decode_subscription, encode_assignment, encode_subscription, Assignment,
    DecodeError, DecodedSubscription, EncodeError, Subscription,
};
pub use membership::{
    after_sync, before_join, classify, ErrorAction, FatalError, GroupApi, RebalanceEvent,
    RebalancePlan,
};

mod changes;
mod commit;
mod consumer_member;
mod error;
mod heartbeat;
pub mod member;
mod quirks;
pub mod requests;
mod round;
mod session;

pub use changes::FenceHook;
pub use member::{
    CommitError, GroupConfig, GroupContext, GroupError, GroupMember, MembershipView,
    RebalanceListener,
};
pub use requests::MemberIdentity;
pub use session::{LostHook, LostReason};
