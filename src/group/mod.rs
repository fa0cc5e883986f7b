//! Consumer-group membership, under both of Kafka's group protocols: the classic one (JoinGroup,
//! SyncGroup, Heartbeat; eager and cooperative assignors, static membership) and the consumer
//! group protocol of KIP-848 (`group.protocol=consumer`, the broker assigns). How a member
//! announces what it wants, how partitions are divided, and what a new assignment or an error
//! code means for the consumer.
//!
//! # Map
//!
//! The decisions are I/O-free, like the guard, so that every interoperability rule (byte
//! layouts, assignor results, event order, error handling) is pinned by unit tests:
//! - `subscription.rs`: the subscription and assignment bytes members exchange through the
//!   broker, readable by Java, librdkafka and kafka-python members;
//! - `assignor/`: `range`, `roundrobin` and `cooperative-sticky`, run when we are the leader,
//!   and (`assignor/join.rs`) the JoinGroup protocol list built from `partition.assignment.strategy`;
//! - `membership.rs`: the [`Membership`] trait every member type implements (take the next
//!   change, commit with an identity, acknowledge), what to revoke, lose and assign, in which
//!   order, as [`Change`]s, and what each classic group error code asks for;
//! - `outcome.rs`: the vocabulary both protocols' error tables share: [`ErrorAction`],
//!   [`FatalError`], [`LostReason`];
//! - `heartbeat_errors.rs`: what each ConsumerGroupHeartbeat and ShareGroupHeartbeat error code
//!   asks of the member: one table, a column per protocol;
//! - `ids.rs`: the identifiers both heartbeat protocols carry: topic ids (named through
//!   Metadata) and the member id a client generates itself, printed as Kafka prints a `Uuid`;
//! - `session.rs` (with `session/`): the membership's state and every transition of its life
//!   cycle (join, joined, stabilise, rejoin, lose, close; commits; the heartbeat thread's
//!   renewal, session expiry and poll timeout; KIP-848's), driven in its tests by an in-memory
//!   coordinator with time passed in;
//! - `changes.rs`: the seam between the membership and the poll thread: [`Change`], the one
//!   type a decided change travels in from the session that decides it (its revoked partitions
//!   fenced at once) to the driver that applies it at the next batch boundary and back as its
//!   acknowledgement, with the [`Decision`] it carries out. For the consumer these changes
//!   replace listener callbacks: its handoff driver (`consumer/handoff.rs`) applies them;
//! - `quirks.rs`: each workaround for a broker that deviates from Kafka (all for librdkafka's
//!   mock cluster), one named constant or function, so the general path reads as Kafka's
//!   protocol;
//! - `config.rs`: what a group member needs to know beyond the connection settings, under either
//!   protocol;
//! - `pattern.rs`: [`TopicPattern`], a subscription by regular expression (whole topic names,
//!   internal topics left out), and [`PatternError`], why one is refused at subscribe;
//! - `watch.rs`: what the classic member's periodic metadata refresh changes: the topics a
//!   pattern selects, and partition counts that moved (both ask for a rejoin);
//! - `error.rs`: [`GroupError`] and [`CommitError`]: why the membership, or one of its commits,
//!   cannot go on.
//!
//! The I/O shell around them sends the requests, feeds the answers to the session or the
//! machine, and applies what they decide:
//! - `member.rs`: the poll thread's member for either protocol, the generic `Member<P>` (the
//!   `Protocol` says what differs: who runs the rounds, how the member leaves), which
//!   implements [`Membership`] over the session it shares with the membership thread: it hands
//!   out decided changes (its `Handout`, shared with the in-memory members of the tests: the
//!   order in which a change is handed out and acknowledged, losses first, then revocations
//!   before the assignment), leaves, commits, and under the eager protocol runs the rounds.
//!   `ClassicMember` and `ConsumerGroupMember` are its two instances;
//! - `classic/`: the classic protocol for the generic member (`ClassicMember`): its heartbeat
//!   thread (`classic/heartbeat.rs`, which under the cooperative protocol also runs the rounds,
//!   beside the poll loop) and one JoinGroup/SyncGroup round (`classic/round.rs`), on whichever
//!   thread owns it;
//! - [`consumer_group`]: the consumer group protocol (KIP-848, `group.protocol=consumer`) as a
//!   sans-I/O state machine over ConsumerGroupHeartbeat, with its own in-memory coordinator
//!   tests, its membership thread (`consumer_group/thread.rs`: heartbeats, topic-id resolution,
//!   reconciliation) and its member (`ConsumerGroupMember`);
//! - [`share`]: share-group membership (KIP-932, ShareGroupHeartbeat): the broker assigns, a
//!   partition may be shared; a sans-I/O machine, its heartbeat thread and [`ShareMembership`],
//!   which the share consumer holds;
//! - `requests.rs`: the four classic-protocol group requests, each built at the highest version
//!   both sides speak (static membership must fail loudly where a broker cannot carry it);
//! - `commit.rs`: offset commits bound to a generation: the one place that sends a group commit,
//!   checks it against the session right before the request and feeds a refusal back; the one
//!   translation between the guard's positions and the group's per-partition answers; and the
//!   commit thread (`Committer`): paced commits travel on a thread and a coordinator connection
//!   of their own, so that a slow `__consumer_offsets` write does not stop the poll thread;
//! - `manual.rs`: [`ManualAssignment`], the member of no group (Java's `assign`): its one
//!   change is the assignment, and it commits only when asked, from outside any group;
//! - `membership_thread.rs`: the membership thread written once for both heartbeat protocols
//!   (KIP-848's and share groups'): the loop, the coordinator look-ups, the heartbeat and its
//!   answer, the wait; each protocol supplies its machine;
//! - `failover.rs`: coordinator failover for the membership threads: short, capped retries of
//!   the look-up and bounded connects, so that a moved coordinator is found before the session
//!   runs out;
//! - `listener.rs`: callbacks instead of changes, for the group-level tests and tools that join
//!   a group without a consumer: the [`RebalanceListener`] adapter, driven by `poll_with` and
//!   `close_with` over any [`Membership`].

pub(crate) mod assignor;
// The items marked `#[doc(hidden)] pub` below are the group layer's internals that the
// integration tests (tests/brokers/group/, brokers::consumer::group_protocol) and the fuzz targets
// drive directly against a broker; they are not part of the product's API and may change
// without notice. Applications reach the group only through `Consumer`.
mod changes;
#[doc(hidden)]
pub mod classic;
pub(crate) mod commit;
mod config;
#[doc(hidden)]
pub mod consumer_group;
mod error;
mod failover;
mod heartbeat_errors;
pub(crate) mod ids;
mod listener;
mod manual;
pub(crate) mod member;
pub(crate) mod membership;
pub(crate) mod membership_thread;
mod outcome;
mod pattern;
mod quirks;
#[doc(hidden)]
pub mod requests;
pub(crate) mod session;
pub mod share;
pub(crate) mod subscription;
pub(crate) mod watch;

pub use assignor::{RebalanceProtocol, Strategy, StrategyError};
pub use changes::{Change, Decision, FenceHook, LostHook, MembershipView};
#[doc(hidden)]
pub use classic::ClassicMember;
#[doc(hidden)]
pub use commit::{CommitKind, CommitResults, OffsetCommitSend};
#[doc(hidden)]
pub use config::GroupConfig;
#[doc(hidden)]
pub use consumer_group::ConsumerGroupMember;
pub use error::{CommitError, GroupError};
#[doc(hidden)]
pub use listener::{close_with, poll_with, GroupContext, RebalanceListener};
pub use manual::ManualAssignment;
#[doc(hidden)]
pub use member::{Member, MemberIo, Protocol, Step};
pub use membership::Membership;
pub use outcome::{ErrorAction, FatalError, GroupApi, LostReason};
pub use pattern::{PatternError, TopicPattern};

pub(crate) use assignor::{check_strategies, AssignError};
pub(crate) use commit::{commit_entries, commit_outcome, commit_through};
pub use requests::MemberIdentity;
pub use share::{ShareAssignment, ShareMembership, ShareMembershipConfig};
