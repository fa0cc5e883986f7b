//! Admitting a record (rule 2 of the guard): the fence first, then the session bound, the
//! idempotency key and offset monotonicity, and the lease the record is handed out under. Apart
//! from `mod.rs` because it is the guard's longest operation and its only per-record path with
//! a clock: a caller that admits many records at one reading prepares it once
//! ([`AdmissionTime`]).

use std::hash::Hash;
use std::time::{Duration, Instant};

use super::progress::{Admitted, WorkState};
use super::session_bound::SessionStamp;
use super::{AdmitError, Lease, OwnerStatus, PartitionState, RebalanceGuard};
use crate::TopicPartition;

/// A reading of the guard's clock prepared for admissions ([`RebalanceGuard::admission_time`]):
/// the instant, and the same instant encoded for the session bound's check.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AdmissionTime {
    now: Instant,
    session: SessionStamp,
}

impl<K: Eq + Hash, M> RebalanceGuard<K, M> {
    /// Admits a message for processing, or says why not.
    ///
    /// The checks run in a fixed order: fence first (a revoked partition is refused even if the
    /// message is also a duplicate, because the reason is what the caller acts on), then the
    /// idempotency key, then offset monotonicity. An admitted message stays pending until
    /// [`complete`](Self::complete), a revocation flush, or a loss.
    pub fn process_message(
        &self,
        partition: &TopicPartition,
        offset: i64,
        key: Option<K>,
        payload: M,
    ) -> Result<Lease, AdmitError> {
        self.process_message_at(self.clock.now(), partition, offset, key, payload)
    }

    /// [`process_message`](Self::process_message) with the admission time supplied by the caller.
    ///
    /// Reading a clock costs tens of nanoseconds on virtual machines, more than the rest of an
    /// admission: a caller that already read the guard's clock passes that instant instead of
    /// paying a second read. `now` must come from the guard's clock ([`RebalanceGuard::now`]),
    /// not from `Instant::now()` (the guard's clock counts a suspend of the machine, `Instant`
    /// does not), and be fresh: it is also the instant the [`SessionBound`](super::SessionBound) is checked against.
    pub fn process_message_at(
        &self,
        now: Instant,
        partition: &TopicPartition,
        offset: i64,
        key: Option<K>,
        payload: M,
    ) -> Result<Lease, AdmitError> {
        // One check, so `now` is encoded only if the session is bounded at all.
        let expired = || self.session.is_expired(now);
        self.admit(now, expired, partition, offset, key, payload)
    }

    /// `now` (a reading of the guard's clock) prepared for [`admit_at`](Self::admit_at): a
    /// caller that admits many records at one reading (the consumer's batch, which reads its
    /// clocks about once per timer tick) prepares it once, and each admission's session check
    /// is then two atomic loads and a comparison.
    ///
    /// `max_age` is how old the reading may get while it is used: the session bound is checked
    /// as if it were that much later, so that a reused reading ends a lease early, never late
    /// (rule 9: a lease ends when ownership could have moved).
    pub(crate) fn admission_time(&self, now: Instant, max_age: Duration) -> AdmissionTime {
        AdmissionTime {
            now,
            session: self.session.stamp(now + max_age),
        }
    }

    /// [`process_message_at`](Self::process_message_at) at a prepared instant.
    #[inline]
    pub(crate) fn admit_at(
        &self,
        at: &AdmissionTime,
        partition: &TopicPartition,
        offset: i64,
        key: Option<K>,
        payload: M,
    ) -> Result<Lease, AdmitError> {
        let expired = || self.session.is_expired_at(at.session);
        self.admit(at.now, expired, partition, offset, key, payload)
    }

    /// The admission itself (rule 2), with the session bound's check at `now` supplied by the
    /// caller: asked once, after the fence passed.
    fn admit(
        &self,
        now: Instant,
        session_expired: impl FnOnce() -> bool,
        partition: &TopicPartition,
        offset: i64,
        key: Option<K>,
        payload: M,
    ) -> Result<Lease, AdmitError> {
        let Some(mut state) = self.partition(partition) else {
            return Err(AdmitError::Fenced {
                tp: partition.clone(),
                offset,
                status: None,
            });
        };
        if state.status != OwnerStatus::Owned {
            state.fenced_rejected += 1;
            return Err(AdmitError::Fenced {
                tp: partition.clone(),
                offset,
                status: Some(state.status),
            });
        }
        if session_expired() {
            return Err(AdmitError::SessionExpired {
                tp: partition.clone(),
                offset,
            });
        }
        // Fence passed; now the key, then monotonicity. On the common path (no regression) one
        // insertion both checks for a duplicate and remembers the key.
        let duplicate = |state: &mut PartitionState<M>| {
            state.duplicates_rejected += 1;
            AdmitError::Duplicate {
                tp: partition.clone(),
                offset,
            }
        };
        if state.progress.is_voided(offset) {
            return Err(AdmitError::SeekedWhileRunning {
                tp: partition.clone(),
                offset,
            });
        }
        if state.progress.is_regression(offset) {
            match state.progress.state_of(offset) {
                // Rule 7: read again after it was released.
                Some(WorkState::Released) => {
                    let Some(handle) = key.map_or(Some(None), |key| self.keys.insert(key)) else {
                        state.progress.finish_released(offset);
                        return Err(duplicate(&mut state));
                    };
                    state.progress.readmit(offset, now, handle, payload);
                    return Ok(Lease {
                        tp: partition.clone(),
                        offset,
                        epoch: state.epoch,
                        fencing_token: state.fencing_token,
                    });
                }
                // Read again with a released record before it: this one is already handled.
                Some(_) => {
                    return Err(AdmitError::AlreadyAdmitted {
                        tp: partition.clone(),
                        offset,
                    })
                }
                None => {}
            }
            if key.as_ref().is_some_and(|key| self.keys.contains(key)) {
                return Err(duplicate(&mut state));
            }
            let high_water = state.progress.high_water().unwrap_or(offset);
            state.regressions_rejected += 1;
            return Err(AdmitError::OffsetRegression {
                tp: partition.clone(),
                offset,
                high_water,
            });
        }
        if self.map_limit > 0 && !state.progress.map_has_room(offset, self.map_limit) {
            // Rule 6: the map of what finished beyond the gap must always fit the commit.
            return Err(AdmitError::CompletedMapFull {
                tp: partition.clone(),
                offset,
                position: state.progress.commit_position().unwrap_or(offset),
            });
        }
        let key = match key {
            None => None,
            Some(key) => match self.keys.insert(key) {
                None => {
                    // The event's work is done (or in flight) under its first copy, so this
                    // offset counts as finished: were it the partition's last record, the
                    // position must still pass it, or the next owner would apply the event
                    // again from there.
                    state.progress.admit_completed(offset, now, None);
                    return Err(duplicate(&mut state));
                }
                Some(handle) => handle,
            },
        };
        if state.progress.take_inherited(offset) {
            state.progress.admit_completed(offset, now, key);
            state.skipped_completed += 1;
            return Err(AdmitError::AlreadyCompleted {
                tp: partition.clone(),
                offset,
            });
        }
        state.progress.admit(Admitted {
            offset,
            admitted_at: now,
            key,
            state: WorkState::Buffered(payload),
            told_stale: false,
        });
        Ok(Lease {
            tp: partition.clone(),
            offset,
            epoch: state.epoch,
            fencing_token: state.fencing_token,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::guard::{AdmitError, GuardConfig, RebalanceGuard};
    use crate::TopicPartition;

    /// A reading reused for a while must end a lease early, never late: the session bound is
    /// checked as if the reading were `max_age` later.
    #[test]
    fn a_prepared_reading_counts_its_age_against_the_session() {
        let guard: RebalanceGuard<String> =
            RebalanceGuard::new(GuardConfig::default()).expect("valid config");
        let tp = TopicPartition::new("orders", 0);
        guard.assign(std::slice::from_ref(&tp));
        let now = guard.now();
        // The session ends 5 ms after the reading.
        guard.session_bound().renew(now, Duration::from_millis(5));
        let fresh = guard.admission_time(now, Duration::ZERO);
        assert!(guard.admit_at(&fresh, &tp, 0, None, ()).is_ok());
        // The same reading, allowed to age 10 ms: the session may be over by then.
        let aging = guard.admission_time(now, Duration::from_millis(10));
        assert!(matches!(
            guard.admit_at(&aging, &tp, 1, None, ()),
            Err(AdmitError::SessionExpired { .. })
        ));
    }
}
