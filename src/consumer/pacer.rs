//! `commit.interval.ms`: how often what finished is committed while records flow, so that a
//! crash or a freeze of this member costs its next owner about that much repeated work instead
//! of a whole batch (which may last up to half of `max.poll.interval.ms`).
//!
//! A paced commit never stops the poll thread. When one is due (checked between two records of
//! a batch, between two hand-offs to the workers, and after each batch), the pacer reads the
//! progress from the guard ([`RebalanceGuard::commit_request`]) and hands it to the group's
//! commit thread ([`Membership::commit_in_background`]); records go on being admitted and
//! handed out while the coordinator writes it. At most one is in flight. Its answer is applied
//! to the guard when the pacer next looks ([`RebalanceGuard::commit_answered`]): nothing counts
//! as committed before the broker acknowledged it, a refused or failed commit changes nothing,
//! and the next interval sends what finished by then. So a crash redoes at most about one
//! interval plus one commit round trip of finished work (plus what was running); while a broker
//! failure holds the coordinator's writes, that round trip is what grows, not the stall of the
//! poll thread.
//!
//! Revocation, close and application commits are synchronous, and the group sends each only
//! after the paced commit in flight was answered, so commits reach the coordinator in the order
//! they were made. The application's ([`CommitPacer::commit_now`], from the consumer or from
//! inside a batch) is made here too, so that it settles the paced one first and restarts the
//! interval.
//!
//! [`RebalanceGuard::commit_request`]: crate::RebalanceGuard::commit_request
//! [`RebalanceGuard::commit_answered`]: crate::RebalanceGuard::commit_answered
//! [`Membership::commit_in_background`]: crate::group::Membership::commit_in_background

use std::time::{Duration, Instant};

use crate::group::{commit_entries, commit_outcome, commit_through, CommitError, Membership};
use crate::guard::{CommitOffset, CommitRequest};
use crate::wire::{ErrorChain, KafkaCode};

use super::context::Guard;
use super::error::ConsumerError;

/// When the next paced commit is due, the one in flight, and how many were refused.
#[derive(Debug)]
pub(crate) struct CommitPacer {
    interval: Duration,
    /// The instant the pacer looks next, `None` when that lies beyond what an `Instant` can
    /// hold. Kept as an instant, not as the last commit's: the check runs before every record,
    /// and comparing two instants costs far less than subtracting them.
    next: Option<Instant>,
    /// The guard's request of the commit on the commit thread, until its answer is applied.
    in_flight: Option<CommitRequest>,
    /// Commits refused outside revocations: paced and the application's.
    pub(crate) refused: u64,
}

impl CommitPacer {
    /// A pacer for `commit.interval.ms`.
    pub(crate) fn new(interval: Duration) -> Self {
        CommitPacer {
            interval,
            next: Instant::now().checked_add(interval),
            in_flight: None,
            refused: 0,
        }
    }

    /// True when the pacer has something to do at `now`: a commit to send, or the answer of
    /// the one in flight to look for.
    #[inline]
    pub(crate) fn due(&self, now: Instant) -> bool {
        self.next.is_some_and(|next| now >= next)
    }

    /// Some commit was made at `now` (a synchronous one): the next paced one is an interval
    /// later.
    pub(crate) fn committed_at(&mut self, now: Instant) {
        self.next = now.checked_add(self.interval);
    }

    /// The pacer's turn, at `now`: applies the answer of the commit in flight if it arrived,
    /// then, if none is in flight any more, sends the progress of every owned partition that
    /// moved to the commit thread. Never waits: with a commit still in flight, the pacer looks
    /// again an interval later.
    pub(crate) fn tick(&mut self, guard: &Guard, member: &mut dyn Membership, now: Instant) {
        self.absorb(guard, member);
        self.next = now.checked_add(self.interval);
        if self.in_flight.is_some() {
            return;
        }
        let Some(request) = guard.commit_request() else {
            return;
        };
        match member.commit_in_background(commit_entries(request.offsets())) {
            Ok(()) => self.in_flight = Some(request),
            Err(_) => log::debug!("paced commit not sent: a commit is still in flight"),
        }
    }

    /// Commits the contiguous completed prefix of every owned partition now, synchronously, in
    /// the current generation, after the paced commit in flight (if any) was answered; the next
    /// paced commit is an interval after this one returned. A refusal is counted and returned,
    /// never retried.
    pub(crate) fn commit_now(
        &mut self,
        guard: &Guard,
        member: &mut dyn Membership,
    ) -> Result<Vec<CommitOffset>, ConsumerError> {
        // A paced commit in flight is answered (and applied) first: commits land in order.
        self.settle(guard, member);
        let result = {
            let mut commit =
                |offsets: &[CommitOffset]| commit_through(|o| member.commit(o), offsets);
            guard.commit_progress(&mut commit)
        };
        // The next paced commit is an interval after this one returned (it may have blocked).
        self.committed_at(Instant::now());
        match result {
            Ok(committed) => {
                for c in &committed {
                    log::debug!("{}: committed next offset {}", c.tp, c.next_offset);
                }
                Ok(committed)
            }
            Err(failure) => {
                self.refused += 1;
                log::error!(
                    "offset commit in generation {} failed: {}",
                    member.identity().generation_id,
                    ErrorChain(&failure)
                );
                Err(ConsumerError::Commit(failure))
            }
        }
    }

    /// Waits for the paced commit in flight (if any) and applies its answer: called before a
    /// synchronous commit, so that the synchronous one is sent after it and its bookkeeping
    /// is not overwritten by an older answer.
    pub(crate) fn settle(&mut self, guard: &Guard, member: &mut dyn Membership) {
        if self.in_flight.is_some() {
            member.settle_commit();
            self.absorb(guard, member);
        }
    }

    /// Applies the answer of the commit in flight to the guard, if it arrived. A refusal is
    /// logged and counted, never retried here: the next interval commits again, and a refusal
    /// that ends the membership fences the partitions through the group, as for every commit.
    fn absorb(&mut self, guard: &Guard, member: &mut dyn Membership) {
        if self.in_flight.is_none() {
            return;
        }
        let Some(answer) = member.commit_answer() else {
            return;
        };
        let Some(request) = self.in_flight.take() else {
            return;
        };
        if let Err(
            unsent @ (CommitError::GenerationOver { .. } | CommitError::NotInGeneration { .. }),
        ) = &answer
        {
            // Checked on the commit thread right before sending: the generation it was made in
            // ended meanwhile (a round of the group), so nothing was sent. Not a refusal: the
            // progress is still due, and the next interval carries it in the new generation.
            log::info!("paced offset commit not sent: {unsent}");
            return;
        }
        // A rebalance overtook the commit while it travelled: the generation (KIP-848: the member
        // epoch) it carried was over when the coordinator read it, or the group was re-forming.
        // A paced commit is not sent again (its offsets were read under the old generation); the
        // next interval, or the handoff, reads them again and carries them in the new one. Not
        // a refusal: nothing was lost, and the session has already judged the answer (a code
        // that ends the membership ended it there).
        let overtaken = matches!(&answer, Ok(results)
        if results.iter().any(|(_, r)| r.is_err())
            && results.iter().all(|(_, r)| match r {
                Ok(()) => true,
                Err(e) => matches!(
                    e.kafka_code(),
                    Some(
                        KafkaCode::STALE_MEMBER_EPOCH
                            | KafkaCode::ILLEGAL_GENERATION
                            | KafkaCode::REBALANCE_IN_PROGRESS
                    )
                ),
            }));
        let outcome = commit_outcome(request.offsets(), answer);
        let committed = guard.commit_answered(request, &outcome);
        for c in &committed {
            log::debug!("{}: committed next offset {} (paced)", c.tp, c.next_offset);
        }
        if overtaken {
            if let Err(failure) = &outcome {
                log::info!(
                    "paced offset commit overtaken by a rebalance ({failure}); the next one \
                     commits in the new generation"
                );
            }
            return;
        }
        if let Err(failure) = outcome {
            self.refused += 1;
            log::error!(
                "paced offset commit in generation {} failed: {}",
                member.identity().generation_id,
                ErrorChain(&failure)
            );
        }
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
