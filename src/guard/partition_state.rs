//! One partition's entry in the guard's table: who owns it (status and epoch), its progress, and
//! what was last committed. Only the guard touches it, always under its lock.

use super::completed_map;
use super::progress::Progress;
use super::types::{CommitOffset, OwnerStatus};
use crate::TopicPartition;

/// A partition's state; the guard's numbered rules (in `guard/mod.rs`) say how it changes.
#[derive(Debug)]
pub(super) struct PartitionState<M> {
    pub(super) status: OwnerStatus,
    pub(super) epoch: u64,
    /// The assignment's fencing token (0 until [`RebalanceGuard::set_fencing_token`] gives one),
    /// handed out with every lease and written into every commit's metadata, so the next
    /// owner reads it and takes a larger one.
    ///
    /// [`RebalanceGuard::set_fencing_token`]: super::RebalanceGuard::set_fencing_token
    pub(super) fencing_token: u64,
    pub(super) progress: Progress<M>,
    pub(super) last_committed: Option<i64>,
    /// The metadata (completed-offsets map) of the last commit, so an unchanged map at an
    /// unchanged position is not committed again.
    pub(super) last_metadata: Option<String>,
    /// Records skipped because the committed map said they had finished.
    pub(super) skipped_completed: u64,
    pub(super) duplicates_rejected: u64,
    pub(super) regressions_rejected: u64,
    pub(super) fenced_rejected: u64,
    pub(super) completed_after_revocation: u64,
    /// Records given back without their effect (rule 7), to be delivered again.
    pub(super) released: u64,
    pub(super) rebalances: u64,
    /// Set by [`RebalanceGuard::fence`]: `Draining` ahead of the revocation that hands it off.
    pub(super) fenced_ahead: bool,
}

impl<M> PartitionState<M> {
    pub(super) fn accepts_completions(&self, epoch: u64) -> bool {
        self.epoch == epoch && matches!(self.status, OwnerStatus::Owned | OwnerStatus::Draining)
    }

    /// What a commit of this partition would carry now, if it moved since the last commit: the
    /// contiguous position and (with a map limit) the offsets finished beyond it. Called under
    /// the guard's lock, so the position and its map describe one instant.
    pub(super) fn commit_due(
        &self,
        partition: &TopicPartition,
        map_limit: usize,
    ) -> Option<CommitOffset> {
        let position = self.progress.commit_position()?;
        let runs = if map_limit > 0 {
            self.progress.completed_runs(position)
        } else {
            Vec::new()
        };
        let completed = self.progress.completed_next();
        if completed.is_none() && runs.is_empty() {
            return None;
        }
        // The token travels in every commit (with an empty map when maps are off): a commit
        // without it would hand the next owner token 0.
        let metadata = (map_limit > 0 || self.fencing_token > 0)
            .then(|| completed_map::encode(self.fencing_token, position, &runs));
        let moved = completed.is_some_and(|next| self.last_committed.is_none_or(|l| next > l));
        let changed = metadata.is_some() && metadata != self.last_metadata;
        (moved || changed).then(|| CommitOffset {
            tp: partition.clone(),
            next_offset: position,
            metadata,
        })
    }

    pub(super) fn committed(&mut self, offset: &CommitOffset) {
        let next = offset.next_offset;
        self.last_committed = Some(self.last_committed.map_or(next, |l| l.max(next)));
        if offset.metadata.is_some() {
            self.last_metadata = offset.metadata.clone();
        }
    }
}
