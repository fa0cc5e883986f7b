//! Share-group membership (KIP-932): ShareGroupHeartbeat (API 76, v1) on a heartbeat thread.
//!
//! # Why
//!
//! In a share group the broker assigns partitions, and several members may read one partition
//! at once: records are handed out under time-bound locks and acknowledged one by one, so a
//! rebalance moves no ownership that anything must be committed for. The member's part is
//! small, modelled on the KIP-848 member (`consumer_group/`) without its hard half: no
//! revocation handshake, no owned partitions reported, no static membership. It heartbeats at
//! the interval the broker names, sends its subscribed topic names on the join, whenever they
//! change and after any failure, takes each full assignment the broker sends (by topic id,
//! named through Metadata), and rejoins with the same member id when fenced.
//!
//! # Rules kept
//!
//! - The member id is the client's (a random UUID, Kafka's text form), kept for the member's
//!   whole life, rejoins included. Epoch 0 joins, -1 leaves, the broker's otherwise.
//! - UNKNOWN_MEMBER_ID / FENCED_MEMBER_EPOCH: the assignment is dropped at once (published
//!   empty at epoch 0) and the member rejoins at epoch 0 with every field.
//! - NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE / COORDINATOR_LOAD_IN_PROGRESS and lost
//!   connections: the coordinator is looked up again (FindCoordinator, key type 0) at the
//!   paced, capped retries of `group/failover.rs`, the assignment kept meanwhile.
//! - GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED, GROUP_MAX_SIZE_REACHED,
//!   INVALID_REQUEST, UNSUPPORTED_VERSION (and a broker without ShareGroupHeartbeat v1: the
//!   error names the `share.version` feature), GROUP_ID_NOT_FOUND (the id is another type's
//!   group): fatal, as a [`GroupError::Fatal`](crate::GroupError::Fatal) naming
//!   ShareGroupHeartbeat, the code and what to change.
//!
//! # Map
//!
//! - `machine.rs`: [`ShareGroupMachine`], the sans-I/O member: what to send and when, what an
//!   answer means, the published [`ShareAssignment`]; time is passed in.
//! - What each ShareGroupHeartbeat error code asks of the member is one column of the heartbeat
//!   error table both heartbeat protocols share (`group/heartbeat_errors.rs`).
//! - `wire.rs`: ShareGroupHeartbeat encoded and decoded on a coordinator connection.
//! - `thread.rs`: the heartbeat thread: what share groups supply to the membership-thread
//!   shell both heartbeat protocols run on (`group/membership_thread.rs`), and the state it
//!   shares with the caller.
//! - `membership.rs`: [`ShareMembership`] and [`ShareMembershipConfig`], what the share
//!   consumer holds: join, the assignment at any time, waiting for a change, leave.
//! - `tests.rs`: the machine driven through whole lives with time passed in.

mod machine;
mod membership;
mod thread;
mod wire;

pub use machine::{
    ShareAssignment, ShareGroupMachine, ShareHeartbeat, ShareHeartbeatAnswer, ShareIdAssignment,
    ShareMachineConfig, ShareState, SHARE_JOIN_EPOCH, SHARE_LEAVE_EPOCH,
};
pub use membership::{ShareMembership, ShareMembershipConfig};
pub use wire::{send_share_heartbeat, share_heartbeat_version};

#[cfg(test)]
mod tests;
