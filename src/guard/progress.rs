//! Per-partition progress: what was admitted, what finished, and how far it is safe to commit.
//!
//! Kafka commits a position (the next offset to read), not a set of finished offsets. When work
//! finishes out of order, the only safe position is the end of the contiguous completed prefix:
//! with 100 complete, 101 running and 102 complete, the position is 101. Committing
//! 103 would skip 101 for whoever owns the partition next.

use std::collections::VecDeque;
use std::hash::Hash;
use std::time::Instant;

use super::completed_map::{self, Runs};
use super::key_set::{KeyHandle, KeySet};

/// Where one admitted message is in its life.
#[derive(Debug)]
pub(crate) enum WorkState<M> {
    /// Admitted and held by the guard until the caller takes it or a revocation flushes it.
    Buffered(M),
    /// Taken out of the guard (queued in the caller's executor); not started yet.
    Queued,
    /// Started by a worker; not finished yet.
    Running,
    /// Finished; its side effect happened.
    Done,
    /// Handed out and given back without its effect: cancelled by a revocation before it
    /// started while later work of the partition had started (a partition worked out of order),
    /// refused at its start or its completion because the lease was no longer current, or failed
    /// in its handler. It blocks the contiguous prefix like unfinished work, but nothing waits
    /// for it, its idempotency key is forgotten, and while the partition stays owned its record
    /// is admitted again when it is delivered again.
    Released,
}

impl<M> WorkState<M> {
    /// Handed out or buffered, and neither finished nor released: something may still do it.
    pub(crate) fn is_unfinished(&self) -> bool {
        matches!(self, Self::Buffered(_) | Self::Queued | Self::Running)
    }
}

#[derive(Debug)]
pub(crate) struct Admitted<M> {
    pub(crate) offset: i64,
    pub(crate) admitted_at: Instant,
    /// The idempotency key's entry, so discarding unfinished work can forget it.
    pub(crate) key: Option<KeyHandle>,
    pub(crate) state: WorkState<M>,
    /// Someone holding its lease was told the lease is not current (the session may have
    /// expired): a handler that then returns has skipped its effect, so its completion must not
    /// count, even if the session was renewed in between.
    pub(crate) told_stale: bool,
}

// Kept here rather than in `key_set.rs` because deciding what is unfinished is this module's
// business: the key set stays below progress and knows nothing of admitted work.
impl<K: Eq + Hash> KeySet<K> {
    /// Forgets the keys of work that is being discarded unfinished, so that its redelivery to
    /// this worker is processed instead of being mistaken for a duplicate and dropped. Returns how
    /// many discarded messages had not finished.
    pub(crate) fn forget_unfinished<M>(
        &self,
        discarded: impl IntoIterator<Item = Admitted<M>>,
    ) -> usize {
        let mut count = 0;
        for admitted in discarded {
            if !matches!(admitted.state, WorkState::Done) {
                count += 1;
                if let Some(key) = admitted.key {
                    self.forget(key);
                }
            }
        }
        count
    }
}

/// What [`Progress::complete_unless_told_stale`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Completion {
    /// Marked finished.
    Done,
    /// Not marked: someone holding its lease was told it is not current.
    ToldStale,
    /// Not pending unfinished (already finished and retired, rewound, or never admitted).
    NotPending,
}

/// The admitted-but-not-yet-committable messages of one partition, in offset order.
#[derive(Debug)]
pub(crate) struct Progress<M> {
    /// Strictly increasing offsets. Every entry before the first unfinished one is retired at once,
    /// so the front is always unfinished (or the deque is empty).
    pending: VecDeque<Admitted<M>>,
    /// Highest offset admitted in this assignment: the monotonicity fence.
    high_water: Option<i64>,
    /// One past the last offset of the contiguous completed prefix: the position that is safe to
    /// commit. `None` until something in this assignment finished.
    completed_next: Option<i64>,
    /// Where this assignment started reading (its committed offset, or the reset position),
    /// when the consumer said so: the position a completed-offsets map is relative to until
    /// something finishes.
    start: Option<i64>,
    /// Offsets above the position that an earlier owner finished (read from the committed map):
    /// sorted, disjoint half-open ranges; a record at one of them is skipped, not processed
    /// again.
    inherited: VecDeque<(i64, i64)>,
    /// Set when a record was released (see [`WorkState::Released`]) since the consumer last
    /// asked where to read again.
    redelivery_due: bool,
    /// How many pending entries are released, so that the check before each start costs
    /// nothing while none is.
    released: usize,
    /// Offsets a seek took away while a handler may still be running them (see
    /// [`Progress::seek`]): their leases are not current, their completions do not count, and
    /// they are not admitted again until the handler returned. Few, and empty almost always.
    voided: Vec<i64>,
}

impl<M> Default for Progress<M> {
    fn default() -> Self {
        Self {
            pending: VecDeque::new(),
            high_water: None,
            completed_next: None,
            start: None,
            inherited: VecDeque::new(),
            redelivery_due: false,
            released: 0,
            voided: Vec::new(),
        }
    }
}

impl<M> Progress<M> {
    pub(crate) fn high_water(&self) -> Option<i64> {
        self.high_water
    }

    pub(crate) fn completed_next(&self) -> Option<i64> {
        self.completed_next
    }

    /// Unfinished plus finished-but-blocked-behind-a-gap messages.
    pub(crate) fn pending(&self) -> impl Iterator<Item = &Admitted<M>> {
        self.pending.iter()
    }

    pub(crate) fn unfinished(&self) -> usize {
        self.pending
            .iter()
            .filter(|a| a.state.is_unfinished())
            .count()
    }

    /// The assignment starts reading at `start`, with `inherited` (offsets above it) already
    /// finished by an earlier owner.
    pub(crate) fn resume_at(&mut self, start: i64, inherited: Runs) {
        self.start = Some(start);
        self.inherited = inherited
            .into_iter()
            .filter(|&(_, end)| end > start)
            .collect();
    }

    /// The position a commit would carry: the end of the completed prefix, else where the
    /// assignment started.
    pub(crate) fn commit_position(&self) -> Option<i64> {
        self.completed_next.or(self.start)
    }

    /// Finished offsets above `position`, from this assignment's work and the inherited map.
    pub(crate) fn completed_runs(&self, position: i64) -> Runs {
        let done = self
            .pending
            .iter()
            .filter(|a| matches!(a.state, WorkState::Done) && a.offset > position)
            .map(|a| (a.offset, a.offset + 1));
        let inherited = self
            .inherited
            .iter()
            .filter(|&&(_, end)| end > position + 1)
            .map(|&(start, end)| (start.max(position + 1), end));
        let mut all: Vec<(i64, i64)> = done.chain(inherited).collect();
        all.sort_unstable();
        let mut runs: Runs = Vec::new();
        for (start, end) in all {
            match runs.last_mut() {
                Some((_, last_end)) if start <= *last_end => *last_end = (*last_end).max(end),
                _ => runs.push((start, end)),
            }
        }
        runs
    }

    /// True when admitting `offset` keeps the worst-case map within `limit` characters (with
    /// two to spare: the position's digits may grow as it moves). Always true while the
    /// position is unknown (no map can be written then).
    ///
    /// An offset inside the span of the inherited map is always admitted: it does not make the
    /// map any longer than the one the earlier owner already committed. Without that, a new
    /// owner with a smaller limit than the earlier one could never admit the gap record itself,
    /// and the partition would stall for good.
    pub(crate) fn map_has_room(&self, offset: i64, limit: usize) -> bool {
        let Some(position) = self.commit_position() else {
            return true;
        };
        if self.inherited.back().is_some_and(|&(_, end)| offset < end) {
            return true;
        }
        let last = self
            .inherited
            .back()
            .map_or(offset, |&(_, end)| offset.max(end - 1));
        completed_map::always_fits(position, last, limit.saturating_sub(2))
    }

    /// True when `offset` finished before it was admitted here (see `inherited`); consumes it.
    /// Inherited offsets below it were never seen (compacted away, or control records): the
    /// position passes them with the next admission, so they are forgotten.
    pub(crate) fn take_inherited(&mut self, offset: i64) -> bool {
        while let Some(&(start, end)) = self.inherited.front() {
            if end <= offset {
                self.inherited.pop_front();
            } else if start <= offset {
                if offset + 1 < end {
                    self.inherited[0].0 = offset + 1;
                } else {
                    self.inherited.pop_front();
                }
                return true;
            } else {
                return false;
            }
        }
        false
    }

    /// Records an admitted message whose work already happened (`take_inherited` said so).
    pub(crate) fn admit_completed(&mut self, offset: i64, at: Instant, key: Option<KeyHandle>) {
        self.admit(Admitted {
            offset,
            admitted_at: at,
            key,
            state: WorkState::Done,
            told_stale: false,
        });
        self.retire_prefix();
    }

    /// True when `offset` does not increase on everything admitted so far.
    pub(crate) fn is_regression(&self, offset: i64) -> bool {
        self.high_water.is_some_and(|hw| offset <= hw)
    }

    /// Records an admitted message. The caller checked `is_regression` first.
    pub(crate) fn admit(&mut self, admitted: Admitted<M>) {
        self.high_water = Some(admitted.offset);
        self.pending.push_back(admitted);
    }

    #[inline]
    fn find(&self, offset: i64) -> Option<usize> {
        // Work usually finishes in order: the front is the common answer.
        if self.pending.front().is_some_and(|a| a.offset == offset) {
            return Some(0);
        }
        self.pending
            .binary_search_by_key(&offset, |a| a.offset)
            .ok()
    }

    /// Marks `offset` finished. Returns `false` when it is not pending (already finished and
    /// retired, rewound, or never admitted).
    #[cfg(test)]
    pub(crate) fn complete(&mut self, offset: i64) -> bool {
        self.complete_unless_told_stale(offset) == Completion::Done
    }

    /// Marks `offset` finished unless someone holding its lease was told the lease is not
    /// current (then nothing changes: the caller releases it, rule 7). One look-up for both
    /// questions: a completion is on every record's path.
    #[inline]
    pub(crate) fn complete_unless_told_stale(&mut self, offset: i64) -> Completion {
        let Some(index) = self.find(offset) else {
            return Completion::NotPending;
        };
        let entry = &mut self.pending[index];
        if entry.told_stale {
            return Completion::ToldStale;
        }
        if !entry.state.is_unfinished() {
            return Completion::NotPending;
        }
        entry.state = WorkState::Done;
        self.retire_prefix();
        Completion::Done
    }

    /// The state of `offset` when it is pending (admitted in this assignment and not retired).
    pub(crate) fn state_of(&self, offset: i64) -> Option<&WorkState<M>> {
        self.find(offset).map(|index| &self.pending[index].state)
    }

    /// Someone was told the lease of `offset` is not current: its completion will not count.
    pub(crate) fn mark_told_stale(&mut self, offset: i64) {
        if let Some(index) = self.find(offset) {
            self.pending[index].told_stale = true;
        }
    }

    /// Gives unfinished `offset` back without its effect (see [`WorkState::Released`]) and marks
    /// the partition for reading again from it. Returns its key's handle for the caller to
    /// forget, or `None` when `offset` is not pending unfinished (finished, already released,
    /// gone).
    pub(crate) fn release(&mut self, offset: i64) -> Option<Option<KeyHandle>> {
        let index = self.find(offset)?;
        let entry = &mut self.pending[index];
        if !entry.state.is_unfinished() {
            return None;
        }
        entry.state = WorkState::Released;
        entry.told_stale = false;
        let key = entry.key.take();
        self.released += 1;
        self.redelivery_due = true;
        Some(key)
    }

    /// Admits released `offset` again, delivered again: it becomes buffered under `key`, its
    /// admission time `at`. Returns `false` (and changes nothing) when it is not released.
    pub(crate) fn readmit(
        &mut self,
        offset: i64,
        at: Instant,
        key: Option<KeyHandle>,
        payload: M,
    ) -> bool {
        let Some(index) = self.find(offset) else {
            return false;
        };
        let entry = &mut self.pending[index];
        if !matches!(entry.state, WorkState::Released) {
            return false;
        }
        entry.state = WorkState::Buffered(payload);
        entry.admitted_at = at;
        entry.key = key;
        entry.told_stale = false;
        self.released -= 1;
        true
    }

    /// Released `offset`, delivered again, turned out to repeat an event already processed (its
    /// key is known): it counts as finished, like any refused duplicate.
    pub(crate) fn finish_released(&mut self, offset: i64) {
        if let Some(index) = self.find(offset) {
            if matches!(self.pending[index].state, WorkState::Released) {
                self.pending[index].state = WorkState::Done;
                self.released -= 1;
                self.retire_prefix();
            }
        }
    }

    /// Where reading must go back to, when a record was released since the last call: the
    /// lowest record still released (not the lowest released since the last call: an earlier
    /// one may not have been read again yet, and reading from above it would skip it for good).
    /// The caller seeks there.
    pub(crate) fn take_redelivery(&mut self) -> Option<i64> {
        if !std::mem::take(&mut self.redelivery_due) || self.released == 0 {
            return None;
        }
        self.pending
            .iter()
            .find(|a| matches!(a.state, WorkState::Released))
            .map(|a| a.offset)
    }

    /// Marks every pending message finished: a successful revocation flush vouches for them.
    /// Released ones stay released: nothing did their work, the flush cannot vouch for them.
    pub(crate) fn complete_all(&mut self) {
        for entry in &mut self.pending {
            if entry.state.is_unfinished() {
                entry.state = WorkState::Done;
            }
        }
        self.retire_prefix();
    }

    /// Moves every buffered payload out to the caller's executor, in offset order.
    pub(crate) fn take_buffered(&mut self) -> Vec<(i64, M)> {
        let mut taken = Vec::new();
        for entry in &mut self.pending {
            if matches!(entry.state, WorkState::Buffered(_)) {
                if let WorkState::Buffered(payload) =
                    std::mem::replace(&mut entry.state, WorkState::Queued)
                {
                    taken.push((entry.offset, payload));
                }
            }
        }
        taken
    }

    /// True when an earlier pending record than `offset` is released and waits to be delivered
    /// again: nothing of the partition may overtake it.
    pub(crate) fn behind_released(&self, offset: i64) -> bool {
        self.released > 0
            && self
                .pending
                .iter()
                .take_while(|a| a.offset < offset)
                .any(|a| matches!(a.state, WorkState::Released))
    }

    /// Marks one buffered message as started by a worker. Returns `false` when it is not
    /// buffered (already started, finished, or gone).
    pub(crate) fn start(&mut self, offset: i64) -> bool {
        let Some(index) = self.find(offset) else {
            return false;
        };
        let entry = &mut self.pending[index];
        if matches!(entry.state, WorkState::Buffered(_) | WorkState::Queued) {
            entry.state = WorkState::Running;
            true
        } else {
            false
        }
    }

    /// Cancels the buffered (never started) messages, for a revocation that cancels queued work
    /// instead of waiting for it. The unstarted tail is removed; an unstarted message before a
    /// started one (a partition worked out of order) stays as [`WorkState::Released`], keeping
    /// the commit position below it while nothing waits for it. Returns what was cancelled so
    /// the caller can forget its keys.
    pub(crate) fn discard_unstarted_tail(&mut self) -> Vec<Admitted<M>> {
        let unstarted =
            |a: &Admitted<M>| matches!(a.state, WorkState::Buffered(_) | WorkState::Queued);
        let keep = self
            .pending
            .iter()
            .rposition(|a| !unstarted(a))
            .map_or(0, |last_started| last_started + 1);
        let mut cancelled: Vec<Admitted<M>> = Vec::new();
        for entry in self.pending.iter_mut().take(keep) {
            if unstarted(entry) {
                entry.state = WorkState::Released;
                cancelled.push(Admitted {
                    offset: entry.offset,
                    admitted_at: entry.admitted_at,
                    key: entry.key.take(),
                    state: WorkState::Released,
                    told_stale: false,
                });
            }
        }
        let mut discarded: Vec<_> = self.pending.drain(keep..).collect();
        self.count_released();
        if !discarded.is_empty() {
            self.high_water = self
                .pending
                .back()
                .map(|a| a.offset)
                .or(self.completed_next.map(|next| next - 1));
        }
        discarded.append(&mut cancelled);
        discarded
    }

    /// Offsets handed out (queued or started) and not finished yet.
    pub(crate) fn running_offsets(&self) -> Vec<i64> {
        self.pending
            .iter()
            .filter(|a| matches!(a.state, WorkState::Queued | WorkState::Running))
            .map(|a| a.offset)
            .collect()
    }

    /// Forgets everything at or after `offset` so it can be admitted again, for a caller that
    /// seeks back after a failed handler. Work after `offset` that already finished goes too:
    /// its record comes again with the rest (a kept completion beyond the rewind point would be
    /// a gap the contiguous prefix could never close). Finished entries keep their idempotency
    /// keys (the caller forgets only the unfinished ones), so a keyed redelivery of work whose
    /// effect happened is recognised as a duplicate. Returns the discarded entries, or
    /// `Err(offset)` of the finished message when `offset` itself is inside the completed
    /// prefix: that progress may already be committed and cannot be taken back.
    pub(crate) fn rewind(&mut self, offset: i64) -> Result<Vec<Admitted<M>>, i64> {
        if let Some(next) = self.completed_next.filter(|&next| offset < next) {
            return Err(next - 1);
        }
        let split = self.pending.partition_point(|a| a.offset < offset);
        let discarded: Vec<_> = self.pending.drain(split..).collect();
        self.high_water = self
            .pending
            .back()
            .map(|a| a.offset)
            .or(self.completed_next.map(|next| next - 1));
        self.count_released();
        Ok(discarded)
    }

    /// Moves the partition's position back to `offset` after the log itself went back (a fetch
    /// position out of range, reset to an earlier offset): everything admitted at or after it
    /// is discarded, and the monotonicity mark and the completed prefix are lowered to it, so
    /// that the records now at those offsets are admitted. Returns the discarded entries and
    /// the previous mark, or `None` when the partition was already below `offset`.
    ///
    /// With nothing admitted yet, the inherited map is still cut at `offset`: a reset means the
    /// log is not what the map described (a truncation, a topic recreated), and a record now at
    /// an offset it names must be processed, not skipped.
    pub(crate) fn reposition(&mut self, offset: i64) -> Option<(Vec<Admitted<M>>, i64)> {
        let Some(mark) = self.high_water else {
            self.forget_inherited_from(offset);
            return None;
        };
        if offset > mark {
            return None;
        }
        let split = self.pending.partition_point(|a| a.offset < offset);
        let discarded: Vec<_> = self.pending.drain(split..).collect();
        self.high_water = self
            .pending
            .back()
            .map(|a| a.offset)
            .or(Some(offset.saturating_sub(1)))
            .filter(|&o| o >= 0);
        self.completed_next = self.completed_next.map(|next| next.min(offset));
        self.count_released();
        self.forget_inherited_from(offset);
        Some((discarded, mark))
    }

    /// The log went back to `offset`: what the inherited map says finished at or after it was
    /// other records, and reading starts no later than there.
    fn forget_inherited_from(&mut self, offset: i64) {
        self.start = self.start.map(|start| start.min(offset));
        self.inherited.retain(|&(start, _)| start < offset);
        if let Some(last) = self.inherited.back_mut() {
            last.1 = last.1.min(offset);
        }
    }

    /// The application moves the partition's reading to `offset`. Work admitted at or after it
    /// is taken away: finished work there is forgotten (its keys stay, as for a rewind), and
    /// work a handler may still be running is voided until that handler returns. Work before
    /// it stays, and the commit waits for it as before. The monotonicity mark becomes
    /// `offset - 1`, so reading resumes at `offset` and nothing earlier is admitted again; and
    /// once the work before `offset` finished, the commit position is `offset`: a seek forward
    /// skips the records between on purpose, a seek back reads again from there. Returns the
    /// entries taken away, so the caller can forget the keys of the unfinished ones.
    pub(crate) fn seek(&mut self, offset: i64, now: Instant) -> Vec<Admitted<M>> {
        let split = self.pending.partition_point(|a| a.offset < offset);
        let discarded: Vec<_> = self.pending.drain(split..).collect();
        self.voided.extend(
            discarded
                .iter()
                .filter(|a| a.state.is_unfinished())
                .map(|a| a.offset),
        );
        match self.pending.back() {
            // Nothing left to wait for: the position is the seek's.
            None => self.completed_next = Some(offset),
            // The commit reaches `offset` when the work before it finishes: a finished entry
            // marks the skipped records (a gap of offsets, as compaction leaves).
            Some(last) if last.offset < offset - 1 => self.pending.push_back(Admitted {
                offset: offset - 1,
                admitted_at: now,
                key: None,
                state: WorkState::Done,
                told_stale: false,
            }),
            Some(_) => {}
        }
        self.high_water = Some(offset - 1).filter(|&o| o >= 0);
        self.count_released();
        discarded
    }

    /// True when a seek voided `offset` while its handler may still run it.
    #[inline]
    pub(crate) fn is_voided(&self, offset: i64) -> bool {
        !self.voided.is_empty() && self.voided.contains(&offset)
    }

    /// The handler of a voided offset returned (completed, released, or refused its start):
    /// the offset may be admitted again. True when it was voided.
    pub(crate) fn end_voided(&mut self, offset: i64) -> bool {
        match self.voided.iter().position(|&o| o == offset) {
            Some(at) => {
                self.voided.swap_remove(at);
                true
            }
            None => false,
        }
    }

    /// Empties the partition, returning what was pending so the caller can forget its keys.
    pub(crate) fn clear(&mut self) -> VecDeque<Admitted<M>> {
        self.high_water = None;
        self.completed_next = None;
        self.start = None;
        self.inherited.clear();
        self.redelivery_due = false;
        self.released = 0;
        self.voided.clear();
        std::mem::take(&mut self.pending)
    }

    /// Recounts the released entries after some entries left `pending` at once.
    fn count_released(&mut self) {
        self.released = self
            .pending
            .iter()
            .filter(|a| matches!(a.state, WorkState::Released))
            .count();
    }

    #[inline]
    fn retire_prefix(&mut self) {
        while let Some(front) = self.pending.front() {
            if !matches!(front.state, WorkState::Done) {
                break;
            }
            // Saturating: an offset of i64::MAX (no broker writes one; the fetch decoder refuses
            // it) must not wrap the commit position to a negative garbage offset.
            self.completed_next = Some(front.offset.saturating_add(1));
            self.pending.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admit(progress: &mut Progress<()>, offset: i64) {
        assert!(!progress.is_regression(offset));
        progress.admit(Admitted {
            offset,
            admitted_at: Instant::now(),
            key: None,
            state: WorkState::Running,
            told_stale: false,
        });
    }

    #[test]
    fn contiguous_prefix_stops_at_the_first_unfinished_offset() {
        let mut progress = Progress::default();
        for offset in 100..=102 {
            admit(&mut progress, offset);
        }
        assert!(progress.complete(100));
        assert!(progress.complete(102));
        assert_eq!(progress.completed_next(), Some(101));
        assert!(progress.complete(101));
        assert_eq!(progress.completed_next(), Some(103));
        assert!(
            !progress.complete(101),
            "a retired offset cannot complete twice"
        );
    }

    #[test]
    fn gaps_in_offsets_are_not_holes() {
        let mut progress = Progress::default();
        admit(&mut progress, 10);
        admit(&mut progress, 15); // 11..14 compacted away
        assert!(progress.complete(15));
        assert_eq!(progress.completed_next(), None, "10 is still running");
        assert!(progress.complete(10));
        assert_eq!(progress.completed_next(), Some(16));
    }

    #[test]
    fn reposition_lowers_the_mark_so_records_read_again_are_admitted() {
        let mut progress = Progress::default();
        for offset in 10..15 {
            admit(&mut progress, offset);
        }
        for offset in 10..13 {
            assert!(progress.complete(offset));
        }
        assert!(
            progress.reposition(20).is_none(),
            "forward: nothing to move"
        );
        let (discarded, previous) = progress.reposition(11).expect("backwards");
        assert_eq!(previous, 14);
        assert_eq!(discarded.len(), 2, "13 and 14 were still pending");
        assert!(!progress.is_regression(11), "11 may be admitted again");
        assert_eq!(progress.completed_next(), Some(11));
        assert!(progress.reposition(0).is_some());
        assert!(!progress.is_regression(0));
    }

    #[test]
    fn rewind_discards_the_tail_but_never_the_completed_prefix() {
        let mut progress = Progress::default();
        for offset in 0..5 {
            admit(&mut progress, offset);
        }
        assert!(progress.complete(0));
        assert!(progress.complete(1));
        assert!(progress.complete(4), "beyond the gap at 2");
        assert_eq!(
            progress.rewind(1).err(),
            Some(1),
            "1 is in the completed prefix"
        );
        let discarded = progress
            .rewind(3)
            .expect("3 is not in the completed prefix");
        assert_eq!(
            discarded.iter().map(|a| a.offset).collect::<Vec<_>>(),
            [3, 4],
            "4 finished beyond the gap and comes again with 3"
        );
        assert!(!progress.is_regression(3), "3 may be admitted again");
        assert!(progress.is_regression(2));
        assert_eq!(progress.completed_next(), Some(2));
    }

    #[test]
    fn extreme_offsets_never_overflow_the_commit_position() {
        let mut progress: Progress<()> = Progress::default();
        admit(&mut progress, i64::MAX);
        assert!(progress.complete(i64::MAX));
        assert_eq!(progress.completed_next(), Some(i64::MAX));
        assert!(progress.reposition(i64::MIN).is_some());
        assert_eq!(progress.high_water(), None);
    }
}
