//! The rebalance guard: the sans-IO state machine that decides what may be processed and what may
//! be committed while partition ownership moves.
//!
//! Everything that decides *when* and *what* to commit lives in this module, so that a reviewer
//! can read the commit ordering top to bottom. It performs no I/O and owns no threads: the consumer
//! layer hands it `flush` and `commit` functions. It is `Send + Sync`, and threads working on
//! different partitions do not wait for each other. The lock discipline:
//! - each partition's state has its own mutex, found through a table that readers use without a
//!   lock (`table.rs`); a thread holds at most one partition's lock at a time;
//! - the idempotency keys are a set of one or more shards (`key_set.rs`,
//!   `GuardConfig::idempotency_shards`); a shard's lock is taken only inside a partition's lock or
//!   alone, never the other way round;
//! - the storm detector has its own mutex, always taken alone;
//! - no caller-supplied function ever runs while any of these is held.
//!
//! A rule that spans partitions (fence every revoked partition before any I/O) is kept by order:
//! each partition is fenced under its own lock, and the I/O starts after the last one.
//!
//! # The rules
//!
//! These are the guard's rules, numbered here and only here: README.md, the guide under `docs/`
//! and `docs/DESIGN.md` (which lists the test that pins each one) refer to them as "rule N of
//! the guard". A new rule takes the next number; a number is never reused.
//!
//! 1. **Assign** activates partitions; under cooperative rebalancing the argument is only the newly
//!    added partitions, so it activates and never replaces.
//! 2. **Admit** (`process_message`) checks the fence first, then the idempotency key, then offset
//!    monotonicity, and hands out a [`Lease`] tied to the partition's assignment epoch. Each
//!    refusal is its own [`AdmitError`] variant. A record refused as a duplicate counts as
//!    finished at its offset: its event belongs to the first copy, which the partition's
//!    position never passes unfinished.
//! 3. **Revoke** fences *every* revoked partition before any I/O; then per partition flushes the
//!    buffered and in-flight work through the caller's flush function and commits the contiguous
//!    completed position (`last + 1`, rule 8) only when that flush succeeded, synchronously;
//!    failures are aggregated into one [`HandoffError`] naming only the failed partitions, raised
//!    after every partition was fenced and pruned. Without a commit function the guard fences
//!    and drains, commits nothing, and warns. The steps are values (`handoff.rs`): its fence
//!    step may run alone, earlier ([`fence`](RebalanceGuard::fence)), from the thread that
//!    learns the partitions move, and each later step consumes the previous one's value, so
//!    none can run out of order.
//! 4. **Lost** fences and discards: no flush, no commit. Another member may own the partitions.
//!    Keys of discarded work are forgotten, so the redelivery is processed rather than mistaken
//!    for a duplicate.
//! 5. **Storms** are counted on a monotonic clock; a revoke followed by an assign is one
//!    rebalance. The detector returns a value ([`StormStatus`]) so the caller can degrade, not
//!    just a log line.
//! 6. **Completed beyond the gap**: every commit carries, in its metadata, the offsets above its
//!    position that finished (computed under the same lock as the position); a partition whose
//!    map could outgrow `completed_map_max_bytes` admits nothing more until its gap closes, and a
//!    record the committed map names as finished is skipped, never processed again.
//! 7. **Released work comes again.** Work whose handler was told its lease was not current (and
//!    so skipped its effect) does not count when it completes: it is *released*, as is work
//!    that could not start (its session may have expired) or whose handler failed. A released
//!    record never counts as finished, its idempotency key is forgotten (a key stands for work
//!    that happened or is under way, nothing else), the position stays below it, and while the
//!    partition stays owned its record is admitted again when the consumer reads it again from
//!    there.
//! 8. **Commit the next offset of the contiguous completed prefix.** The committed position is
//!    `last processed + 1`, never the last processed offset (which would replay one record per
//!    partition on every rebalance), and never past work that did not finish: with 100
//!    complete, 101 running and 102 complete, the safe position is 101.
//! 9. **Assignment is a lease that also ends by time.** Every admitted message carries a lease
//!    with its partition's assignment epoch; work finishing after its partition moved is
//!    recognised as stale before its side effect ([`is_current`](RebalanceGuard::is_current))
//!    and never counts as progress. With a [`SessionBound`] renewed by the membership
//!    ([`session_bound`](RebalanceGuard::session_bound)), every lease also goes stale once the
//!    session could have expired, read on the [`BootClock`], and nothing new is admitted until
//!    the bound is renewed.
//!
//! # Map
//!
//! - `mod.rs` (this file): the [`RebalanceGuard`] itself: assign, complete, release,
//!   snapshots, and the rules above.
//! - `admission.rs`: admitting a record (rule 2: `process_message`), and the prepared instant
//!   a caller that admits many records at one clock reading passes instead (the consumer's
//!   batch).
//! - `handoff.rs`: the handoff of revoked partitions as typed steps (fence -> [`Fenced`] ->
//!   drain -> [`Drained`] -> prepare_commit -> [`AwaitingCommit`] -> hand_back ->
//!   [`HandedBack`]), losses, and the commits of owned partitions.
//! - `types.rs`: the guard's vocabulary: its configuration, a partition's owner status, the
//!   [`Lease`] an admitted message carries, what a flush and a commit are handed, and the
//!   reports and snapshots it gives back.
//! - `error.rs`: why the guard refused something, one variant per reason the caller acts on
//!   (fenced, duplicate, regression, ...), and the [`HandoffError`] of a handoff.
//! - `table.rs`: the per-partition entries, found by partition on every admission by any number
//!   of threads at once, without a lock.
//! - `partition_state.rs`: one partition's entry in that table: its owner status and epoch, its
//!   progress and its last commit, touched only under its lock.
//! - `progress.rs`: one partition's progress: what was admitted, what finished, and how far it
//!   is safe to commit (the end of the contiguous completed prefix).
//! - `completed_map.rs`: the completed-offsets map written into the commit's metadata, so that
//!   the next owner skips the offsets above the position that already finished (rule 6).
//! - `key_set.rs`: the idempotency keys of every partition, split into shards when configured so
//!   that admitting threads do not take turns on one lock.
//! - `recent.rs`: one shard's bounded set of recently seen keys, replaced by the CLOCK algorithm.
//! - `hash_index.rs`: the open-addressing table from a key's hash to its slot in that set.
//! - `key_hash.rs`: the keyed hash of idempotency keys, seeded per process so that a producer
//!   cannot precompute colliding keys.
//! - `idempotency_key.rs`: the [`IdempotencyKey`] the guard remembers, held without a heap
//!   allocation when short.
//! - `deadline.rs`: the one renewable deadline on the lease clock that both kinds of lease
//!   hold (the [`SessionBound`]'s, a [`LockLease`]'s), and the one rule both keep: a lease ends
//!   when ownership could have moved (deadline passed, scope ended, voided).
//! - `seeking.rs`: moving an owned partition's reading on purpose: a rewind by the consumer, the
//!   application's seek, a reposition after the log went back; each a guard event.
//! - `session_bound.rs`: the [`SessionBound`]: ownership that expires by time, renewed by the
//!   membership's answered requests, so a member frozen past its session stops trusting its
//!   leases (the rebalance guard's, and a share lock guard's: its own bound, which the share
//!   membership renews).
//! - `locks/`: the lock guard (`LockGuard`) of a share group (KIP-932), beside the rebalance guard and
//!   independent of it: each acquired record runs under a [`LockLease`] that ends before the
//!   broker's record lock can, renewals move it forward, and its finish decides the
//!   acknowledgement ([`AckType`]): never ACCEPT once the lock may have ended.
//! - `storm.rs`: rebalance storm detection, counted on the monotonic clock ([`StormStatus`]).
//! - `clock.rs`: the [`Clock`] trait (so tests drive time by hand), the monotonic clock, and
//!   the [`BootClock`] leases are read on: it counts the time the machine was suspended, as the
//!   broker's clocks do.

mod admission;
mod clock;
mod completed_map;
mod deadline;
mod error;
mod handoff;
mod hash_index;
mod idempotency_key;
mod key_hash;
mod key_set;
// Without `test-support` the lock guard is the share consumer's alone: what only the tests call
// is unused there, and its `pub` items are not reachable.
#[cfg_attr(not(feature = "test-support"), allow(unreachable_pub, dead_code))]
mod locks;
mod partition_state;
mod progress;
mod recent;
mod seeking;
mod session_bound;
mod storm;
mod table;
mod types;

use std::fmt;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

pub(crate) use admission::AdmissionTime;
#[cfg(test)]
pub(crate) use clock::Suspender;
pub(crate) use clock::{coarse_lag, coarse_now, lease_now};
pub use clock::{BootClock, Clock, ManualClock, MonotonicClock};
/// The fencing token's raise at an assignment: the consumer's `fencing.rs` writes what it says.
pub(crate) use completed_map::raised as raised_fencing_token;
pub use error::{
    AdmitError, BoxError, CommitFailure, CompleteError, GuardConfigError, HandoffError,
    HandoffStage, PartitionFailure, RewindError, SeekError,
};
pub use handoff::{AwaitingCommit, Drained, Fenced, HandedBack};
pub use idempotency_key::IdempotencyKey;
// The lock guard is the share consumer's: an application names a delivery's outcome, its lease
// (and the session scope it belongs to) and the lock statistics. The guard itself is public for
// the crate's own tests only (`test-support`).
pub use locks::{AckFailures, AckType, LockLease, LockStats, SessionScope};
#[cfg(feature = "test-support")]
pub use locks::{Acquired, Grant, LockGuard, LockGuardConfig, Outcome};
#[cfg(not(feature = "test-support"))]
pub(crate) use locks::{Acquired, Grant, LockGuard, LockGuardConfig, Outcome};
pub use session_bound::SessionBound;
pub use storm::StormStatus;
pub use types::{
    CommitFn, CommitOffset, CommitRequest, FlushBatch, FlushFn, GuardConfig, GuardSnapshot, Lease,
    LostReport, OwnerStatus, PartitionSnapshot, RevokeReport,
};

use crate::TopicPartition;
use deadline::{lease_end, LeaseEnd};
use key_set::KeySet;
use partition_state::PartitionState;
use progress::{Completion, Progress};
use storm::StormDetector;
use table::PartitionTable;

/// The state is consistent between any two statements that can panic (no caller code runs
/// under a lock), so a poisoned lock is still safe to use.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The rebalance guard. `K` is the idempotency key type (an order id, an event id); `M` is the
/// payload a caller may leave buffered in the guard until it is flushed (use `()` when every
/// message is processed as soon as it is admitted).
///
/// The crate's `Consumer` runs one for you; this type is public for a caller that has a
/// consumer of its own and wants the same decisions. Admit, check the lease right before the
/// effect, complete, and let a revocation fence, drain and commit (the module's rules 2, 9, 8
/// and 3):
///
/// ```
/// use rebalance_guard::guard::{GuardConfig, RebalanceGuard};
/// use rebalance_guard::TopicPartition;
///
/// let guard: RebalanceGuard<String> = RebalanceGuard::new(GuardConfig::default())?;
/// let tp = TopicPartition::new("orders", 0);
/// guard.assign(&[tp.clone()]);
///
/// let lease = guard.process_message(&tp, 41, Some("ord-1".to_string()), ())?;
/// if guard.is_current(&lease) {
///     // apply the effect here, keyed by a stable effect key
/// }
/// guard.complete(&lease)?;
/// // The same order id again is refused as a duplicate (rule 2).
/// assert!(guard.process_message(&tp, 42, Some("ord-1".to_string()), ()).is_err());
///
/// // The partition moves: fence, drain (nothing buffered here), commit `last + 1`.
/// let mut committed = Vec::new();
/// let report = guard.revoke(
///     &[tp.clone()],
///     &mut |_batch| Ok(()),
///     Some(&mut |offsets| {
///         committed.extend(offsets.iter().map(|o| o.next_offset));
///         Ok(())
///     }),
/// )?;
/// assert_eq!(committed, [43]);
/// assert_eq!(report.committed.len(), 1);
/// // Fenced: nothing of it is admitted any more, and the old lease is stale.
/// assert!(guard.process_message(&tp, 43, None, ()).is_err());
/// assert!(!guard.is_current(&lease));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct RebalanceGuard<K = Vec<u8>, M = ()> {
    /// One entry per partition ever assigned, each behind its own lock. Entries are never
    /// removed, so that a partition's epoch only ever increases: a lease from an old assignment
    /// can never match a later one.
    partitions: PartitionTable<Mutex<PartitionState<M>>>,
    keys: KeySet<K>,
    storm: Mutex<StormDetector>,
    clock: Arc<dyn Clock>,
    /// Ownership ends by time too: past this bound the coordinator may have evicted us.
    session: Arc<SessionBound>,
    /// `GuardConfig::completed_map_max_bytes`: 0 writes no map.
    map_limit: usize,
    /// Set when some owned partition released a record (rule 7): the consumer must read it
    /// again ([`take_redeliveries`](Self::take_redeliveries)). One atomic, so the consumer's
    /// check before each batch costs nothing when nothing was released.
    redeliveries_wanted: AtomicBool,
}

impl<K, M> fmt::Debug for RebalanceGuard<K, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RebalanceGuard").finish_non_exhaustive()
    }
}

impl<K: Eq + Hash, M> RebalanceGuard<K, M> {
    /// A guard on the process's [`BootClock`]: its leases end by the session bound, which the
    /// coordinator counts on a clock that keeps running while this machine is suspended.
    pub fn new(config: GuardConfig) -> Result<Self, GuardConfigError> {
        Self::with_clock(config, BootClock::shared())
    }

    /// A guard on the given clock (its session bound reads it too); tests use [`ManualClock`]
    /// to move time without sleeping.
    pub fn with_clock(
        config: GuardConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, GuardConfigError> {
        config.validate()?;
        let session = Arc::new(SessionBound::on_clock(clock.clone()));
        Ok(Self {
            partitions: PartitionTable::default(),
            keys: KeySet::new(config.idempotency_capacity, config.idempotency_shards),
            storm: Mutex::new(StormDetector::new(
                config.storm_window,
                config.storm_threshold,
            )),
            clock,
            session,
            map_limit: config.completed_map_max_bytes,
            redeliveries_wanted: AtomicBool::new(false),
        })
    }

    /// The bound in time on this member's ownership, for the group membership to renew with
    /// every answered heartbeat (see [`SessionBound`]). Until it is first renewed, leases expire
    /// only when their partition moves.
    pub fn session_bound(&self) -> Arc<SessionBound> {
        self.session.clone()
    }

    fn session_expired(&self) -> bool {
        self.session.is_expired_now()
    }

    /// The locked state of `tp`, if it was ever assigned.
    #[inline]
    fn partition(&self, tp: &TopicPartition) -> Option<MutexGuard<'_, PartitionState<M>>> {
        self.partitions.get(tp).map(lock)
    }

    /// Records a rebalance event with the storm detector (rule 5) and reports its view, warning
    /// when it sees a storm.
    fn storm_after(
        &self,
        now: Instant,
        record: impl FnOnce(&mut StormDetector),
    ) -> Option<StormStatus> {
        let mut storm = lock(&self.storm);
        record(&mut storm);
        let status = storm.status(now);
        if status.is_storm() {
            log::warn!(
                "rebalance storm: {} rebalances within {:?} (threshold {})",
                status.rebalances_in_window,
                status.window,
                status.threshold
            );
        }
        Some(status)
    }

    /// Activates newly assigned partitions with empty state and a new epoch.
    ///
    /// Under cooperative rebalancing the argument is only the partitions added in this round:
    /// partitions not listed keep their state. A listed partition that is already owned keeps its
    /// progress (activate, never replace).
    pub fn assign(&self, partitions: &[TopicPartition]) -> Option<StormStatus> {
        let now = self.clock.now();
        for tp in partitions {
            let Some(entry) = self.partitions.get_or_insert_with(tp, || {
                Mutex::new(PartitionState {
                    status: OwnerStatus::Revoked,
                    epoch: 0,
                    fencing_token: 0,
                    progress: Progress::default(),
                    last_committed: None,
                    last_metadata: None,
                    skipped_completed: 0,
                    duplicates_rejected: 0,
                    regressions_rejected: 0,
                    fenced_rejected: 0,
                    completed_after_revocation: 0,
                    released: 0,
                    rebalances: 0,
                    fenced_ahead: false,
                })
            }) else {
                log::error!("{tp} assigned but the guard's table is full: it stays fenced");
                continue;
            };
            let mut state = lock(entry);
            match state.status {
                OwnerStatus::Owned => {
                    log::debug!("{tp} assigned while already owned: keeping its progress");
                }
                OwnerStatus::Draining => {
                    // A handoff is under way (between `fence` and `revoke`, or between revoke's
                    // phases): refuse to resurrect a partition mid-handoff.
                    log::warn!("{tp} assigned while its revocation is still draining: ignored");
                }
                OwnerStatus::Revoked | OwnerStatus::Lost => {
                    let discarded = state.progress.clear();
                    state.status = OwnerStatus::Owned;
                    state.epoch += 1;
                    state.fencing_token = 0;
                    state.last_committed = None;
                    state.last_metadata = None;
                    log::info!("{tp} assigned (epoch {})", state.epoch);
                    self.keys.forget_unfinished(discarded);
                }
            }
        }
        self.storm_after(now, |storm| storm.record_assign(now))
    }

    /// Tells an owned partition where its reading starts (its committed offset, or the reset
    /// position) and the committed metadata found with that offset. When the metadata is this
    /// guard's completed-offsets map for that very offset, the records it names are skipped when
    /// they arrive (each counted in the partition's `skipped_completed`); any other metadata is
    /// another client's and is ignored. Returns how many offsets the map names.
    pub fn resume_at(&self, partition: &TopicPartition, start: i64, metadata: Option<&str>) -> u64 {
        let Some(mut state) = self
            .partition(partition)
            .filter(|state| state.status == OwnerStatus::Owned)
        else {
            return 0;
        };
        let (runs, named) = self.inherited_runs(partition, &mut state, start, metadata);
        state.progress.resume_at(start, runs);
        named
    }

    /// Gives an owned partition's current assignment its fencing token, which every lease of
    /// the assignment carries from then on and every commit of it writes into its metadata.
    /// The caller takes the token from the group (`consumer/fencing.rs`: one more than the
    /// committed one, committed under the group's fencing before any record is admitted);
    /// the guard only carries it. Returns false (and changes nothing) when the partition is
    /// not owned: the assignment the token was taken for is over.
    pub fn set_fencing_token(&self, partition: &TopicPartition, token: u64) -> bool {
        match self
            .partition(partition)
            .filter(|state| state.status == OwnerStatus::Owned)
        {
            Some(mut state) => {
                state.fencing_token = token;
                true
            }
            None => false,
        }
    }

    /// The fencing token of an owned partition's current assignment (0 until it has one);
    /// `None` when the partition is not owned.
    pub fn fencing_token(&self, partition: &TopicPartition) -> Option<u64> {
        self.partition(partition)
            .filter(|state| state.status == OwnerStatus::Owned)
            .map(|state| state.fencing_token)
    }

    /// The offsets above `start` that the committed map `metadata` names as finished (ours,
    /// written for `start`; anything else is ignored), and how many: what the next owner, or
    /// this one after an aborted transaction, skips. Logged when there are any.
    fn inherited_runs(
        &self,
        partition: &TopicPartition,
        state: &mut PartitionState<M>,
        start: i64,
        metadata: Option<&str>,
    ) -> (completed_map::Runs, u64) {
        let metadata = metadata.filter(|_| self.map_limit > 0);
        let runs = match metadata.map(|m| completed_map::decode(m, start)) {
            None | Some(Err(completed_map::MapError::Foreign)) => Vec::new(),
            Some(Err(error)) => {
                log::warn!("{partition}: committed metadata ignored: {error}");
                Vec::new()
            }
            Some(Ok(runs)) => {
                state.last_metadata = metadata.map(str::to_string);
                runs
            }
        };
        let named: u64 = runs.iter().map(|&(s, e)| (e - s) as u64).sum();
        if named > 0 {
            log::info!(
                "{partition}: {named} offset(s) above {start} already finished (committed map):                  they are skipped"
            );
        }
        (runs, named)
    }

    /// Records that the leased message finished (its side effect happened).
    ///
    /// A lease from an earlier assignment is refused and counted as "completed after revocation":
    /// it is not this member's progress any more. A completion after someone holding the lease
    /// was told by [`is_current`](Self::is_current) that it is not current does not count either
    /// (rule 7): a handler told that skips its effect and returns, so the record is released, to
    /// be delivered again, even if the session was renewed in between. A handler that never
    /// asked did its effect, and its completion counts (refusing it would only make this member
    /// apply the effect a second time).
    pub fn complete(&self, lease: &Lease) -> Result<(), CompleteError> {
        let Some(mut state) = self.partition(&lease.tp) else {
            return Err(CompleteError::NotPending {
                tp: lease.tp.clone(),
                offset: lease.offset,
            });
        };
        if !state.accepts_completions(lease.epoch) {
            state.completed_after_revocation += 1;
            return Err(CompleteError::StaleLease {
                tp: lease.tp.clone(),
                offset: lease.offset,
                lease_epoch: lease.epoch,
                current_epoch: state.epoch,
            });
        }
        if state.progress.end_voided(lease.offset) {
            return Err(CompleteError::Seeked {
                tp: lease.tp.clone(),
                offset: lease.offset,
            });
        }
        match state.progress.complete_unless_told_stale(lease.offset) {
            Completion::Done => Ok(()),
            Completion::ToldStale if self.release_locked(&mut state, lease.offset) => {
                Err(CompleteError::NotCurrent {
                    tp: lease.tp.clone(),
                    offset: lease.offset,
                })
            }
            Completion::ToldStale | Completion::NotPending => Err(CompleteError::NotPending {
                tp: lease.tp.clone(),
                offset: lease.offset,
            }),
        }
    }

    /// True while the lease's assignment is still this member's (owned, or draining during a
    /// revocation). Check it right before an external side effect.
    ///
    /// A `false` caused by the session bound is remembered on the record: the handler that asked
    /// will skip its effect, so its completion will not count even if the session is renewed
    /// before it returns (rule 7).
    pub fn is_current(&self, lease: &Lease) -> bool {
        let mut state = self.partition(&lease.tp);
        // The rule every lease keeps (`deadline.rs`): the session bound, then the assignment
        // the lease was admitted under, then a seek that voided the record.
        let end = lease_end(
            self.session_expired(),
            || {
                !state
                    .as_ref()
                    .is_some_and(|state| state.accepts_completions(lease.epoch))
            },
            || {
                state
                    .as_ref()
                    .is_some_and(|state| state.progress.is_voided(lease.offset))
            },
        );
        if end == Some(LeaseEnd::DeadlinePassed) {
            if let Some(state) = state.as_mut().filter(|state| state.epoch == lease.epoch) {
                state.progress.mark_told_stale(lease.offset);
            }
        }
        end.is_none()
    }

    /// True while the lease's partition is owned under the lease's assignment and not being
    /// handed back: unlike [`is_current`](Self::is_current), a partition draining for a
    /// revocation does not count, and the session bound is not consulted (ask `is_current` as
    /// well for that). For decisions that start new work on a record (a retry, a dead letter):
    /// a partition on its way out leaves them to its next owner.
    pub fn owns(&self, lease: &Lease) -> bool {
        self.partition(&lease.tp)
            .is_some_and(|state| state.epoch == lease.epoch && state.status == OwnerStatus::Owned)
    }

    /// A worker is about to start the leased message: allowed only while the partition is owned
    /// under the lease's epoch. Once a revocation has fenced the partition, queued work that has
    /// not started must not start (it is cancelled instead), so this refuses.
    ///
    /// Refused because the session may have expired, while the partition is still owned under
    /// the lease, the record is released (rule 7): it is delivered again, not left queued. So is
    /// a record with an earlier released record of its partition before it: nothing overtakes
    /// that one, and this one comes again after it.
    pub fn start(&self, lease: &Lease) -> bool {
        if self.session_expired() {
            if let Some(mut state) = self.partition(&lease.tp) {
                if state.epoch == lease.epoch && state.status == OwnerStatus::Owned {
                    self.release_locked(&mut state, lease.offset);
                }
            }
            return false;
        }
        match self.partition(&lease.tp) {
            Some(mut state) if state.epoch == lease.epoch && state.status == OwnerStatus::Owned => {
                if state.progress.end_voided(lease.offset) {
                    // A seek took it away before it started.
                    return false;
                }
                if state.progress.behind_released(lease.offset) {
                    // Nothing overtakes a released record: this one comes again after it.
                    self.release_locked(&mut state, lease.offset);
                    return false;
                }
                state.progress.start(lease.offset)
            }
            _ => false,
        }
    }

    /// Gives the leased record back without its effect (rule 7): a handler failed on it, or a
    /// worker will not start it (the run is stopping, its partition stopped on a failure). It
    /// does not count as finished, its key is forgotten, nothing waits for it, and while the
    /// partition stays owned it is delivered again (see
    /// [`take_redeliveries`](Self::take_redeliveries)). Refused for a lease of an earlier
    /// assignment, which can no longer touch the partition's progress.
    pub fn release(&self, lease: &Lease) -> Result<(), CompleteError> {
        let Some(mut state) = self.partition(&lease.tp) else {
            return Err(CompleteError::NotPending {
                tp: lease.tp.clone(),
                offset: lease.offset,
            });
        };
        if !state.accepts_completions(lease.epoch) {
            return Err(CompleteError::StaleLease {
                tp: lease.tp.clone(),
                offset: lease.offset,
                lease_epoch: lease.epoch,
                current_epoch: state.epoch,
            });
        }
        if state.progress.end_voided(lease.offset) {
            // A seek took it away: reading already moved, nothing to deliver again.
            return Ok(());
        }
        match self.release_locked(&mut state, lease.offset) {
            true => Ok(()),
            false => Err(CompleteError::NotPending {
                tp: lease.tp.clone(),
                offset: lease.offset,
            }),
        }
    }

    /// Releases pending `offset` of a partition whose lock the caller holds; false when it was
    /// not pending unfinished.
    fn release_locked(&self, state: &mut PartitionState<M>, offset: i64) -> bool {
        let Some(key) = state.progress.release(offset) else {
            return false;
        };
        if let Some(key) = key {
            self.keys.forget(key);
        }
        state.released += 1;
        if state.status == OwnerStatus::Owned {
            self.redeliveries_wanted.store(true, Ordering::Release);
        }
        true
    }

    /// Where the consumer must read again so that every released record of an owned partition
    /// is delivered again: per partition, the lowest released offset since the last call. The
    /// consumer seeks there before it hands out more records; records it reads again that are
    /// not released are refused as [`AdmitError::AlreadyAdmitted`].
    pub fn take_redeliveries(&self) -> Vec<(TopicPartition, i64)> {
        if !self.redeliveries_wanted.swap(false, Ordering::AcqRel) {
            return Vec::new();
        }
        self.partitions
            .iter()
            .filter_map(|(tp, entry)| {
                let mut state = lock(entry);
                if state.status != OwnerStatus::Owned {
                    return None;
                }
                state
                    .progress
                    .take_redelivery()
                    .map(|from| (tp.clone(), from))
            })
            .collect()
    }

    /// During a revocation's flush: cancels the partition's queued work that never started, so
    /// the revocation commits exactly the processed prefix. Returns how many messages were
    /// cancelled (their keys are forgotten: they will be processed by the next owner).
    pub fn cancel_unstarted(&self, partition: &TopicPartition) -> usize {
        let Some(mut state) = self.partition(partition) else {
            return 0;
        };
        if state.status != OwnerStatus::Draining {
            return 0;
        }
        let cancelled = state.progress.discard_unstarted_tail();
        self.keys.forget_unfinished(cancelled)
    }

    /// Admitted messages of a partition that have not finished (queued or running).
    pub fn unfinished(&self, partition: &TopicPartition) -> usize {
        self.partition(partition)
            .map_or(0, |state| state.progress.unfinished())
    }

    /// Takes the buffered payloads of a partition out of the guard to hand them to an executor.
    /// They stay pending (running) until completed.
    pub fn take_buffered(&self, partition: &TopicPartition) -> Vec<(Lease, M)> {
        let Some(mut state) = self.partition(partition) else {
            return Vec::new();
        };
        if state.status != OwnerStatus::Owned {
            return Vec::new();
        }
        let (epoch, fencing_token) = (state.epoch, state.fencing_token);
        state
            .progress
            .take_buffered()
            .into_iter()
            .map(|(offset, payload)| {
                (
                    Lease {
                        tp: partition.clone(),
                        offset,
                        epoch,
                        fencing_token,
                    },
                    payload,
                )
            })
            .collect()
    }

    /// The current instant on the guard's clock, for [`process_message_at`](Self::process_message_at).
    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// The storm detector's view now.
    pub fn storm_status(&self) -> StormStatus {
        let now = self.clock.now();
        lock(&self.storm).status(now)
    }

    /// Partitions currently owned (admitting messages).
    pub fn owned(&self) -> Vec<TopicPartition> {
        let mut owned: Vec<_> = self
            .partitions
            .iter()
            .filter(|(_, entry)| lock(entry).status == OwnerStatus::Owned)
            .map(|(tp, _)| tp.clone())
            .collect();
        owned.sort();
        owned
    }

    /// A view of every partition's state and the guard's counters. Each partition's row is
    /// consistent in itself (read under its lock); rows of different partitions are read one
    /// after another, so the view never stops admissions on every partition at once.
    pub fn snapshot(&self) -> GuardSnapshot {
        let now = self.clock.now();
        let mut partitions: Vec<PartitionSnapshot> = self
            .partitions
            .iter()
            .map(|(tp, entry)| {
                let state = lock(entry);
                let oldest_in_flight_age = state
                    .progress
                    .pending()
                    .find(|a| a.state.is_unfinished())
                    .map(|a| now.saturating_duration_since(a.admitted_at));
                PartitionSnapshot {
                    tp: tp.clone(),
                    epoch: state.epoch,
                    fencing_token: state.fencing_token,
                    status: state.status,
                    highest_admitted: state.progress.high_water(),
                    contiguous_completed: state.progress.completed_next().map(|next| next - 1),
                    last_committed: state.last_committed,
                    in_flight: state.progress.unfinished(),
                    oldest_in_flight_age,
                    duplicates_rejected: state.duplicates_rejected,
                    regressions_rejected: state.regressions_rejected,
                    fenced_rejected: state.fenced_rejected,
                    completed_after_revocation: state.completed_after_revocation,
                    released: state.released,
                    skipped_completed: state.skipped_completed,
                    rebalances: state.rebalances,
                }
            })
            .collect();
        partitions.sort_by(|a, b| a.tp.cmp(&b.tp));
        let (rebalances, storm) = {
            let mut storm = lock(&self.storm);
            (storm.total(), storm.status(now))
        };
        GuardSnapshot {
            partitions,
            rebalances,
            storm,
            remembered_keys: self.keys.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn guard_is_send_and_sync() {
        assert_send_sync::<RebalanceGuard<String, Vec<u8>>>();
        assert_send_sync::<RebalanceGuard>();
    }

    #[test]
    fn idempotency_shards_must_be_a_power_of_two_from_one_to_sixty_four() {
        for shards in [0, 3, 128] {
            let config = GuardConfig {
                idempotency_shards: shards,
                ..GuardConfig::default()
            };
            let error = RebalanceGuard::<u64, ()>::new(config).expect_err("refused");
            assert_eq!(error.setting, "idempotency_shards", "{shards}");
        }
        for shards in [1, 2, 64] {
            let config = GuardConfig {
                idempotency_shards: shards,
                ..GuardConfig::default()
            };
            assert!(RebalanceGuard::<u64, ()>::new(config).is_ok(), "{shards}");
        }
    }

    #[test]
    fn a_partition_admits_and_completes_while_another_partitions_lock_is_held() {
        let guard: RebalanceGuard<u64, ()> = RebalanceGuard::new(GuardConfig::default()).unwrap();
        let (a, b) = (TopicPartition::new("t", 0), TopicPartition::new("t", 1));
        guard.assign(&[a.clone(), b.clone()]);
        let held = guard.partition(&a).expect("assigned");
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let lease = guard.process_message(&b, 0, Some(7), ()).expect("admitted");
                guard.complete(&lease).expect("completed");
                done.send(guard.is_current(&lease)).expect("receiver waits");
            });
            // With one lock for every partition this would wait forever; the bound is only a
            // way to fail instead of hanging.
            let outcome = finished.recv_timeout(std::time::Duration::from_secs(30));
            drop(held);
            assert_eq!(outcome, Ok(true));
        });
    }

    #[test]
    fn a_key_is_admitted_once_when_threads_race_with_it_on_different_partitions() {
        for shards in [1, 16] {
            keys_race_on_different_partitions(shards);
        }
    }

    fn keys_race_on_different_partitions(shards: usize) {
        let config = GuardConfig {
            idempotency_shards: shards,
            ..GuardConfig::default()
        };
        let guard: RebalanceGuard<u64, ()> = RebalanceGuard::new(config).unwrap();
        let partitions: Vec<_> = (0..4).map(|p| TopicPartition::new("t", p)).collect();
        guard.assign(&partitions);
        let admitted = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for tp in &partitions {
                let (guard, admitted) = (&guard, &admitted);
                scope.spawn(move || {
                    for key in 0..2_000u64 {
                        match guard.process_message(tp, key as i64, Some(key), ()) {
                            Ok(_) => {
                                admitted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                            Err(AdmitError::Duplicate { .. }) => {}
                            Err(other) => panic!("unexpected refusal: {other}"),
                        }
                    }
                });
            }
        });
        assert_eq!(
            admitted.into_inner(),
            2_000,
            "{shards} shard(s): each key exactly once"
        );
        let snapshot = guard.snapshot();
        let duplicates: u64 = snapshot
            .partitions
            .iter()
            .map(|p| p.duplicates_rejected)
            .sum();
        assert_eq!(duplicates, 3 * 2_000);
        assert_eq!(snapshot.remembered_keys, 2_000);
    }
}
