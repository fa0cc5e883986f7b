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

pub mod assignor;
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

mod heartbeat;
pub mod member;
mod quirks;
pub mod requests;
mod session;

pub use heartbeat::LostHook;
pub use member::{
    CommitError, GroupConfig, GroupContext, GroupError, GroupMember, RebalanceListener,
};
pub use requests::MemberIdentity;
pub use session::LostReason;
