//! The guard's vocabulary: its configuration, the owner status of a partition, the lease an
//! admitted message carries, what a flush and a commit are handed, and the reports and snapshots
//! the guard gives back. The state machine that uses them is in the parent module.

use std::fmt;
use std::time::Duration;

use super::error::{BoxError, CommitFailure, GuardConfigError};
use super::storm::StormStatus;
use crate::TopicPartition;

/// Tunables of the guard. The defaults suit a worker that handles up to a few thousand messages
/// per second and rebalances rarely.
#[derive(Debug, Clone)]
pub struct GuardConfig {
    /// How many recently processed idempotency keys to remember. Bounded because a consumer runs
    /// for weeks; an unbounded set is a slow memory leak. Zero disables duplicate detection.
    pub idempotency_capacity: usize,
    /// How many independently locked parts the idempotency key set is split into (a power of
    /// two, 1 to 64). Keys are one set across every partition, so threads admitting keyed
    /// records on different partitions meet on it; with several parts they rarely wait for
    /// each other. One part suits a guard that one thread admits into, as the consumer's poll
    /// thread does (in both of its modes): more parts cost a single admitting thread cache
    /// misses, while several threads admitting at once gain from them (`cargo bench --bench
    /// guard` measures both; the figures are in the design notes). Each part holds
    /// `idempotency_capacity / parts` keys.
    pub idempotency_shards: usize,
    /// The sliding window over which rebalances are counted.
    pub storm_window: Duration,
    /// Rebalances within `storm_window` that make a storm. Zero disables storm detection.
    pub storm_threshold: usize,
    /// The longest completed-offsets map a commit may carry in its metadata: the broker's
    /// `offset.metadata.max.bytes` (4096 by default in Kafka), which refuses a longer one. A
    /// partition whose map could grow past it admits nothing more until its gap closes. Zero
    /// writes no map (and reads none back).
    pub completed_map_max_bytes: usize,
}

impl Default for GuardConfig {
    fn default() -> Self {
        Self {
            idempotency_capacity: 100_000,
            idempotency_shards: 1,
            storm_window: Duration::from_secs(300),
            storm_threshold: 5,
            completed_map_max_bytes: 4096,
        }
    }
}

impl GuardConfig {
    /// Checks the settings, naming the one at fault.
    pub fn validate(&self) -> Result<(), GuardConfigError> {
        if !(1..=64).contains(&self.idempotency_shards)
            || !self.idempotency_shards.is_power_of_two()
        {
            return Err(GuardConfigError {
                setting: "idempotency_shards",
                rule: "must be a power of two from 1 to 64",
            });
        }
        if self.storm_threshold > 0 && self.storm_window.is_zero() {
            return Err(GuardConfigError {
                setting: "storm_window",
                rule: "must be greater than zero when storm_threshold is set",
            });
        }
        if self.completed_map_max_bytes != 0 && self.completed_map_max_bytes < 64 {
            return Err(GuardConfigError {
                setting: "completed_map_max_bytes",
                rule: "must be 0 (no map) or at least 64",
            });
        }
        Ok(())
    }
}

/// Whether this member may do work for a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerStatus {
    /// Assigned to this member: messages are admitted.
    Owned,
    /// Being revoked: fenced against new messages, in-flight work is draining, completions of the
    /// current epoch still count.
    Draining,
    /// Handed off cleanly.
    Revoked,
    /// Taken away without a handoff (session timeout, poll interval overrun, fenced generation).
    Lost,
}

impl fmt::Display for OwnerStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Owned => "owned",
            Self::Draining => "being revoked",
            Self::Revoked => "revoked",
            Self::Lost => "lost",
        })
    }
}

/// Proof that a message was admitted under a given assignment of its partition.
///
/// Work that finishes after its partition moved carries a lease from an older epoch; the guard
/// recognises it as stale ([`RebalanceGuard::is_current`](crate::guard::RebalanceGuard::is_current)) so the worker can skip the side effect,
/// and refuses its completion so it never counts as this member's progress.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Lease {
    /// The partition.
    pub tp: TopicPartition,
    /// The message offset.
    pub offset: i64,
    /// The partition's assignment epoch when the message was admitted.
    pub epoch: u64,
    /// The partition's fencing token in that assignment: the same for every message of one
    /// assignment, and larger in every later assignment of the partition, to this member or
    /// any other. A sink that stores the largest token it has seen per partition and refuses
    /// a write carrying a smaller one refuses the writes of a member whose partition moved,
    /// however late they arrive (see [`RebalanceGuard::set_fencing_token`](crate::guard::RebalanceGuard::set_fencing_token)). 0 when the
    /// assignment has none (the guard used on its own, a consumer outside a group).
    pub fencing_token: u64,
}

/// What a revocation hands the caller's flush function for one partition.
#[derive(Debug)]
pub struct FlushBatch<M> {
    /// The partition being revoked.
    pub tp: TopicPartition,
    /// Admitted messages the caller never took out of the guard, in offset order: hand them to
    /// the executor now.
    pub buffered: Vec<(i64, M)>,
    /// Offsets handed out earlier (queued or started) and not completed yet: cancel the ones that
    /// have not started ([`RebalanceGuard::cancel_unstarted`](crate::guard::RebalanceGuard::cancel_unstarted)) and wait, boundedly, for the rest.
    pub running: Vec<i64>,
}

/// One position to commit: the offset of the next message to read (`last processed + 1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitOffset {
    /// The partition.
    pub tp: TopicPartition,
    /// The next offset to read.
    pub next_offset: i64,
    /// The offsets above `next_offset` that already finished, encoded for the OffsetCommit
    /// `metadata` field (see [`RebalanceGuard::resume_at`](crate::guard::RebalanceGuard::resume_at)); `None` when the guard writes no map.
    pub metadata: Option<String>,
}

/// A commit of the owned partitions' progress read at one instant, waiting for the broker's
/// answer ([`RebalanceGuard::commit_request`](crate::guard::RebalanceGuard::commit_request)): each
/// position with the partition's epoch at that instant, so an answer that arrives after the
/// partition moved is not recorded against the new assignment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitRequest {
    pub(super) offsets: Vec<CommitOffset>,
    pub(super) epochs: Vec<u64>,
}

impl CommitRequest {
    /// The positions to send, one per partition.
    pub fn offsets(&self) -> &[CommitOffset] {
        &self.offsets
    }
}

/// The caller's flush: hand the buffered messages to the executor and wait (boundedly) for the
/// running ones; `Ok` vouches that all of the partition's admitted work is finished.
pub type FlushFn<'a, M> = dyn FnMut(FlushBatch<M>) -> Result<(), BoxError> + 'a;

/// The caller's synchronous offset commit, carrying the current generation and member id (or
/// member epoch).
pub type CommitFn<'a> = dyn FnMut(&[CommitOffset]) -> Result<(), CommitFailure> + 'a;

/// What a revocation did, when every partition was handed off.
#[derive(Debug, Default)]
pub struct RevokeReport {
    /// The positions committed.
    pub committed: Vec<CommitOffset>,
    /// Partitions that had no new progress to commit.
    pub unchanged: Vec<TopicPartition>,
    /// The storm detector's view after this rebalance.
    pub storm: Option<StormStatus>,
}

/// What a loss discarded.
#[derive(Debug, Default)]
pub struct LostReport {
    /// Partitions that were fenced by this call.
    pub fenced: Vec<TopicPartition>,
    /// Admitted messages dropped without flush or commit; they will be redelivered elsewhere.
    pub discarded: usize,
    /// The storm detector's view after this rebalance.
    pub storm: Option<StormStatus>,
}

/// A point-in-time view of one partition, for stats lines and dashboards (the
/// "operational signals").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionSnapshot {
    /// The partition.
    pub tp: TopicPartition,
    /// Assignment epoch; increases on every assign, revoke and loss.
    pub epoch: u64,
    /// The fencing token of the current (or last) assignment: 0 until the assignment has one,
    /// which an owned partition without it is waiting for (it is not read meanwhile).
    pub fencing_token: u64,
    /// Ownership status.
    pub status: OwnerStatus,
    /// Highest offset admitted in the current assignment.
    pub highest_admitted: Option<i64>,
    /// Last offset of the contiguous completed prefix.
    pub contiguous_completed: Option<i64>,
    /// The last position committed through the guard (the next offset to read).
    pub last_committed: Option<i64>,
    /// Admitted messages not finished yet.
    pub in_flight: usize,
    /// Age of the oldest pending message.
    pub oldest_in_flight_age: Option<Duration>,
    /// Messages refused as duplicates.
    pub duplicates_rejected: u64,
    /// Messages refused as offset regressions.
    pub regressions_rejected: u64,
    /// Messages refused because the partition was fenced.
    pub fenced_rejected: u64,
    /// Work that finished after its partition was revoked or lost (stale leases).
    pub completed_after_revocation: u64,
    /// Records given back without their effect while the partition was this member's (a
    /// completion under a lease that was not current, a record a worker could not start, a
    /// failed handler): each is delivered again.
    pub released: u64,
    /// Records skipped because the committed completed-offsets map said an earlier owner had
    /// already finished them.
    pub skipped_completed: u64,
    /// How many times this partition was revoked or lost.
    pub rebalances: u64,
}

/// A point-in-time view of the whole guard.
#[derive(Debug, Clone)]
pub struct GuardSnapshot {
    /// Every partition this guard has ever been assigned, sorted.
    pub partitions: Vec<PartitionSnapshot>,
    /// Rebalances counted since the guard was created (revoke + assign counted once).
    pub rebalances: u64,
    /// The storm detector's current view.
    pub storm: StormStatus,
    /// Idempotency keys currently remembered.
    pub remembered_keys: usize,
}
