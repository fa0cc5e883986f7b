//! Moving an owned partition's reading on purpose, as guard events: the consumer's rewind of a
//! record it took back, the application's seek (Java's `seek`), and the reposition after the log
//! itself went back. Each takes away the admitted work it passes, so that nothing is committed
//! past work that did not finish and no record runs twice at once.

use std::hash::Hash;

use super::{Lease, RewindError, SeekError};
use super::{OwnerStatus, RebalanceGuard};
use crate::TopicPartition;

impl<K: Eq + Hash, M> RebalanceGuard<K, M> {
    /// Forgets the work at or after the leased record so that it can be admitted again, for a
    /// consumer that seeks back on one thread (a record it could not hand on, taken back): the
    /// record and everything after it come again, including later records that already finished
    /// (their keys stay remembered, so a keyed redelivery of them is refused as a duplicate).
    /// Refuses a lease of an earlier assignment, a partition not owned, and going back into the
    /// contiguous completed prefix, which may already be committed. Work that other threads may
    /// still be doing is given back one record at a time with [`release`](Self::release)
    /// instead, which never discards anything else.
    pub fn rewind(&self, lease: &Lease) -> Result<(), RewindError> {
        let (partition, offset) = (&lease.tp, lease.offset);
        let mut state = self
            .partition(partition)
            .filter(|state| state.status == OwnerStatus::Owned && state.epoch == lease.epoch)
            .ok_or_else(|| RewindError::NotOwned {
                tp: partition.clone(),
            })?;
        let discarded = state.progress.rewind(offset).map_err(|finished_offset| {
            RewindError::PastFinishedWork {
                tp: partition.clone(),
                finished_offset,
            }
        })?;
        self.keys.forget_unfinished(discarded);
        Ok(())
    }

    /// The application moves an owned partition's reading to `offset` (Java's `seek`): a guard
    /// event, because work already admitted must not be committed past or applied twice.
    ///
    /// - Work admitted at or after `offset` is taken away. A handler still running one of those
    ///   records sees its lease not current from now on (`is_current` is false, its completion
    ///   does not count), and the record is not admitted again until that handler returned, so
    ///   one record never runs twice at once. Unfinished work's keys are forgotten (the record
    ///   is read again); finished work's keys stay, so a keyed record whose effect this member
    ///   applied is refused as a duplicate when read again.
    /// - Work before `offset` stays: the commit still waits for it to finish.
    /// - Once it finished, the commit position is `offset`: a seek forward skips the records in
    ///   between on purpose (they are never committed as unfinished work, they are not work);
    ///   a seek back makes the next commit carry `offset`, even below what was committed.
    pub fn seek(&self, partition: &TopicPartition, offset: i64) -> Result<(), SeekError> {
        if offset < 0 {
            return Err(SeekError::Negative {
                tp: partition.clone(),
                offset,
            });
        }
        let mut state = self
            .partition(partition)
            .filter(|state| state.status == OwnerStatus::Owned)
            .ok_or_else(|| SeekError::NotOwned {
                tp: partition.clone(),
            })?;
        let back = state
            .progress
            .commit_position()
            .is_some_and(|at| offset < at)
            || state
                .last_committed
                .is_some_and(|committed| offset < committed);
        let discarded = state.progress.seek(offset, self.clock.now());
        if back {
            // The next commit carries the position read again from, below the committed one.
            state.last_committed = None;
        }
        let discarded = self.keys.forget_unfinished(discarded);
        log::info!("{partition}: seek to {offset} ({discarded} unfinished record(s) taken away)");
        Ok(())
    }

    internal_pub! {
    /// Takes back the progress an aborted transaction held: a partition owned, or draining
    /// toward its revocation, reads from `offset` (what the group has committed) again, as a
    /// seek there would, and its work at or after `offset`, finished or running, no longer
    /// counts (a handler still running one sees its lease not current, and its outputs are not
    /// sent). Why a draining partition too: its drained position would otherwise be committed by
    /// its handoff, past work whose outputs the abort took away. Refused for a partition neither
    /// owned nor draining (its next owner reads from what committed anyway).
    ///
    /// `metadata` is what was committed with `offset`: its completed-offsets map names records
    /// beyond `offset` that finished in transactions that did commit (their outputs are
    /// visible), which must be skipped, not done again.
    fn rewind_aborted(
        &self,
        partition: &TopicPartition,
        offset: i64,
        metadata: Option<&str>,
    ) -> Result<(), SeekError> {
        if offset < 0 {
            return Err(SeekError::Negative {
                tp: partition.clone(),
                offset,
            });
        }
        let mut state = self
            .partition(partition)
            .filter(|state| matches!(state.status, OwnerStatus::Owned | OwnerStatus::Draining))
            .ok_or_else(|| SeekError::NotOwned {
                tp: partition.clone(),
            })?;
        let discarded = state.progress.seek(offset, self.clock.now());
        // The next commit carries `offset` (what committed), whatever the guard believed, and
        // the records the committed map names as finished are skipped.
        state.last_committed = None;
        state.last_metadata = None;
        let (runs, _) = self.inherited_runs(partition, &mut state, offset, metadata);
        state.progress.resume_at(offset, runs);
        let discarded = self.keys.forget_unfinished(discarded);
        log::info!(
            "{partition}: back to {offset} after an aborted transaction ({discarded} unfinished \
             record(s) taken away)"
        );
        Ok(())
    }
    }

    /// The partitions in hand: owned, or draining toward a revocation (what an aborted
    /// transaction may hold progress of).
    pub(crate) fn in_hand(&self) -> Vec<TopicPartition> {
        let mut held: Vec<_> = self
            .partitions
            .iter()
            .filter(|(_, entry)| {
                matches!(
                    super::lock(entry).status,
                    OwnerStatus::Owned | OwnerStatus::Draining
                )
            })
            .map(|(tp, _)| tp.clone())
            .collect();
        held.sort();
        held
    }

    /// Moves an owned partition's monotonicity mark back to `offset`, for a consumer whose fetch
    /// position was reset to an earlier offset because the log went back (OFFSET_OUT_OF_RANGE
    /// after a truncation, or a topic recreated under the same name): the records now at those
    /// offsets are new records and must be admitted, not refused as regressions. Unfinished work
    /// at or after `offset` is discarded (its keys forgotten). Returns the previous mark when it
    /// moved; `None` when the partition is not owned or was already below `offset`.
    pub fn reposition(&self, partition: &TopicPartition, offset: i64) -> Option<i64> {
        let mut state = self
            .partition(partition)
            .filter(|state| state.status == OwnerStatus::Owned)?;
        let (discarded, previous) = state.progress.reposition(offset)?;
        // Progress on the log as it is now must be committable again.
        state.last_committed = state.last_committed.map(|last| last.min(offset));
        self.keys.forget_unfinished(discarded);
        Some(previous)
    }
}
