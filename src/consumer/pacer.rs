//! `commit.interval.ms`: how often what finished is committed while records flow, so that a
//! crash or a freeze of this member costs its next owner about that much repeated work instead
//! of a whole batch (which may last up to half of `max.poll.interval.ms`).
//!
//! Commits stay synchronous and on the poll thread (between two records of a batch, or between
//! two hand-offs to the workers), so there is never more than one in flight and a handler never
//! waits for one; the pacer only decides when, with the clock reading the batch takes anyway.
//! A commit may block (up to `request.timeout.ms`), so an instant read before it is stale after
//! it: [`CommitPacer::commit`] takes none (the next interval runs from its return), and a caller
//! reads the clock again before anything that depends on the session (an admission is checked
//! against the session bound at the instant it is given).
//! Revocation and close commits do not go through it: they are always made, synchronously.

use std::time::{Duration, Instant};

use crate::group::GroupMember;
use crate::guard::CommitOffset;

use super::bridge::commit_through;
use super::context::Guard;

/// When the next paced commit is due, and how many paced commits were refused.
#[derive(Debug)]
pub(crate) struct CommitPacer {
    interval: Duration,
    /// The instant the next paced commit is due, `None` when that lies beyond what an
    /// `Instant` can hold. Kept as an instant, not as the last commit's: the check runs before
    /// every record, and comparing two instants costs far less than subtracting them.
    next: Option<Instant>,
    /// Paced commits refused (reported in the stats with the consumer's own refusals).
    pub(crate) refused: u64,
}

impl CommitPacer {
    /// A pacer for `commit.interval.ms`.
    pub(crate) fn new(interval: Duration) -> Self {
        CommitPacer {
            interval,
            next: Instant::now().checked_add(interval),
            refused: 0,
        }
    }

    /// True when a commit is due at `now`.
    #[inline]
    pub(crate) fn due(&self, now: Instant) -> bool {
        self.next.is_some_and(|next| now >= next)
    }

    /// Some commit was made at `now` (the consumer's own, after a batch): the next paced one is
    /// an interval later.
    pub(crate) fn committed_at(&mut self, now: Instant) {
        self.next = now.checked_add(self.interval);
    }

    /// Commits the contiguous completed prefix (with its completed-offsets map) of every owned
    /// partition that moved, now. A refusal is logged and counted, never retried here: the next
    /// interval commits again, and a refusal that ends the membership fences the partitions
    /// through the group, as for every commit.
    ///
    /// The next interval runs from the commit's return: one that blocked longer than the
    /// interval must not make the next one due at once.
    pub(crate) fn commit(&mut self, guard: &Guard, member: &mut GroupMember) {
        let generation = member.identity().generation_id;
        let mut commit = |offsets: &[CommitOffset]| commit_through(|o| member.commit(o), offsets);
        match guard.commit_progress(&mut commit) {
            Ok(committed) => {
                for c in &committed {
                    log::debug!("{}: committed next offset {} (paced)", c.tp, c.next_offset);
                }
            }
            Err(failure) => {
                self.refused += 1;
                log::error!("offset commit in generation {generation} failed: {failure}");
            }
        }
        self.committed_at(Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::CommitPacer;
    use std::time::{Duration, Instant};

    #[test]
    fn a_commit_is_due_one_interval_after_the_last_and_never_for_an_unreachable_one() {
        let interval = Duration::from_millis(100);
        let mut pacer = CommitPacer::new(interval);
        let start = Instant::now();
        assert!(!pacer.due(start), "not due right after it was made");
        assert!(pacer.due(start + interval + Duration::from_millis(1)));
        let later = start + Duration::from_secs(5);
        pacer.committed_at(later);
        assert!(!pacer.due(later + interval - Duration::from_millis(1)));
        assert!(pacer.due(later + interval));
        let never = CommitPacer::new(Duration::MAX);
        assert!(!never.due(start + Duration::from_secs(1 << 40)));
    }
}
