//! Why the guard refused something. Each refusal is its own variant because the caller logs and
//! acts on the reason: a fenced message is zombie work to drop, a duplicate is a redelivery to skip,
//! a regression means the consumer was re-fed from a stale position.

use std::error::Error;
use std::fmt;

use super::OwnerStatus;
use crate::basics::error_kind::ErrorKind;
use crate::TopicPartition;

/// An error from a caller-supplied flush or commit function.
pub type BoxError = Box<dyn Error + Send + Sync + 'static>;

/// Why `process_message` refused a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdmitError {
    /// The partition is not owned (never assigned, being revoked, revoked or lost): processing it
    /// would be zombie work on a partition another member may own.
    Fenced {
        /// The partition.
        tp: TopicPartition,
        /// The offset that was refused.
        offset: i64,
        /// Why the partition does not accept work; `None` when it was never assigned.
        status: Option<OwnerStatus>,
    },
    /// The member's session may have expired (no heartbeat answered for `session.timeout.ms`,
    /// measured from its send time): the coordinator may have given the partition to another
    /// member. The record is not admitted; it is handed out once the session is renewed.
    SessionExpired {
        /// The partition.
        tp: TopicPartition,
        /// The offset that was refused.
        offset: i64,
    },
    /// The committed completed-offsets map says an earlier owner already finished this record:
    /// it is skipped, and counts as finished.
    AlreadyCompleted {
        /// The partition.
        tp: TopicPartition,
        /// The skipped offset.
        offset: i64,
    },
    /// Admitting this record could make the partition's completed-offsets map longer than the
    /// commit metadata may be: nothing more of the partition is admitted until the work at
    /// `position` finishes (backpressure; the map is never dropped).
    CompletedMapFull {
        /// The partition.
        tp: TopicPartition,
        /// The refused offset; it stays first in line.
        offset: i64,
        /// The commit position, the unfinished offset the gap starts at.
        position: i64,
    },
    /// A seek took this offset's earlier admission away while its handler may still be running
    /// it: the record is admitted again once that handler returned (it stays first in line;
    /// two handlers never run one record of this member at once).
    SeekedWhileRunning {
        /// The partition.
        tp: TopicPartition,
        /// The offset read again.
        offset: i64,
    },
    /// This member already admitted the record in the current assignment, and it is queued,
    /// running or finished: the partition is being read again from an earlier record that was
    /// released (see `RebalanceGuard::release`), and this one needs nothing more.
    AlreadyAdmitted {
        /// The partition.
        tp: TopicPartition,
        /// The offset read again.
        offset: i64,
    },
    /// The idempotency key was processed recently by this worker: a redelivery.
    Duplicate {
        /// The partition.
        tp: TopicPartition,
        /// The offset that carried the repeated key.
        offset: i64,
    },
    /// The offset does not increase on the highest admitted one: the consumer was re-fed from a
    /// stale position, and accepting it would drag the commit position backwards.
    OffsetRegression {
        /// The partition.
        tp: TopicPartition,
        /// The offset that was refused.
        offset: i64,
        /// The highest offset admitted so far.
        high_water: i64,
    },
}

impl fmt::Display for AdmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Fenced {
                tp: partition,
                offset,
                status,
            } => match status {
                Some(status) => write!(f, "{partition} offset {offset} refused: partition is {status}"),
                None => write!(f, "{partition} offset {offset} refused: partition was never assigned"),
            },
            Self::SessionExpired { tp: partition, offset } => write!(
                f,
                "{partition} offset {offset} refused: the member's session may have expired"
            ),
            Self::AlreadyCompleted { tp: partition, offset } => write!(
                f,
                "{partition} offset {offset} skipped: the committed map says it already finished"
            ),
            Self::CompletedMapFull {
                tp: partition,
                offset,
                position,
            } => write!(
                f,
                "{partition} offset {offset} held back: the completed-offsets map above the \
                 unfinished offset {position} would outgrow the commit metadata"
            ),
            Self::SeekedWhileRunning { tp, offset } => write!(
                f,
                "{tp} offset {offset} waits: a seek took its earlier admission away while its \
                 handler may still be running it"
            ),
            Self::AlreadyAdmitted { tp: partition, offset } => write!(
                f,
                "{partition} offset {offset} skipped: already admitted in this assignment"
            ),
            Self::Duplicate { tp: partition, offset } => write!(
                f,
                "{partition} offset {offset} refused: its idempotency key was already processed"
            ),
            Self::OffsetRegression {
                tp: partition,
                offset,
                high_water,
            } => write!(
                f,
                "{partition} offset {offset} refused: not above the highest admitted offset {high_water}"
            ),
        }
    }
}

impl Error for AdmitError {}

impl AdmitError {
    /// The situation, named as every error of the crate names it: a partition not owned or a
    /// session that may have expired is [`ErrorKind::GenerationOver`] (the record may be
    /// another member's); every other refusal is [`ErrorKind::Skipped`] (a redelivery, or a
    /// record held back and handed out later).
    pub fn kind(&self) -> ErrorKind {
        match self {
            AdmitError::Fenced { .. } | AdmitError::SessionExpired { .. } => {
                ErrorKind::GenerationOver
            }
            AdmitError::AlreadyCompleted { .. }
            | AdmitError::CompletedMapFull { .. }
            | AdmitError::SeekedWhileRunning { .. }
            | AdmitError::AlreadyAdmitted { .. }
            | AdmitError::Duplicate { .. }
            | AdmitError::OffsetRegression { .. } => ErrorKind::Skipped,
        }
    }
}

/// Why a completion was not recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompleteError {
    /// The lease is from an earlier assignment: the partition was revoked or lost after the work
    /// was admitted, so the work's result must not be treated as this member's progress.
    StaleLease {
        /// The partition.
        tp: TopicPartition,
        /// The offset of the finished work.
        offset: i64,
        /// The lease's epoch.
        lease_epoch: u64,
        /// The partition's epoch now.
        current_epoch: u64,
    },
    /// The handler was told by `is_current` that the lease was not current (the session may
    /// have expired), so it skipped its effect: the work does not count, and the record is
    /// released and delivered again (to this member while it keeps the partition).
    NotCurrent {
        /// The partition.
        tp: TopicPartition,
        /// The offset of the work that does not count.
        offset: i64,
    },
    /// A seek of the partition took the record away while its handler ran (the application
    /// moved the partition's reading; see `RebalanceGuard::seek`): the lease was not current
    /// from that moment, and the work does not count.
    Seeked {
        /// The partition.
        tp: TopicPartition,
        /// The offset of the work that does not count.
        offset: i64,
    },
    /// The offset is not pending: already completed, rewound, or never admitted.
    NotPending {
        /// The partition.
        tp: TopicPartition,
        /// The offset.
        offset: i64,
    },
}

impl fmt::Display for CompleteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::StaleLease {
                tp: partition,
                offset,
                lease_epoch,
                current_epoch,
            } => write!(
                f,
                "{partition} offset {offset} finished under assignment epoch {lease_epoch}, \
                 but the partition is at epoch {current_epoch}: completion ignored"
            ),
            Self::NotCurrent {
                tp: partition,
                offset,
            } => write!(
                f,
                "{partition} offset {offset} finished after its handler was told the lease was \
                 not current: it does not count and is delivered again"
            ),
            Self::Seeked {
                tp: partition,
                offset,
            } => write!(
                f,
                "{partition} offset {offset} finished after a seek took it away: it does not count"
            ),
            Self::NotPending {
                tp: partition,
                offset,
            } => {
                write!(f, "{partition} offset {offset} is not pending")
            }
        }
    }
}

impl Error for CompleteError {}

impl CompleteError {
    /// The situation: work finished under an assignment that ended, or after its handler was
    /// told its lease was not current, is [`ErrorKind::GenerationOver`] (it must not count as
    /// this member's progress); work a seek took away, or that was not pending, is
    /// [`ErrorKind::Skipped`].
    pub fn kind(&self) -> ErrorKind {
        match self {
            CompleteError::StaleLease { .. } | CompleteError::NotCurrent { .. } => {
                ErrorKind::GenerationOver
            }
            CompleteError::Seeked { .. } | CompleteError::NotPending { .. } => ErrorKind::Skipped,
        }
    }
}

/// Why `rewind` refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RewindError {
    /// The partition is not owned, or not under the lease's assignment.
    NotOwned {
        /// The partition.
        tp: TopicPartition,
    },
    /// The rewind point is inside the contiguous completed prefix: that progress may already be
    /// committed, and admitting it again would repeat side effects the group considers done.
    PastFinishedWork {
        /// The partition.
        tp: TopicPartition,
        /// The finished offset in the way.
        finished_offset: i64,
    },
}

impl fmt::Display for RewindError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotOwned { tp: partition } => write!(f, "cannot rewind {partition}: not owned"),
            Self::PastFinishedWork {
                tp: partition,
                finished_offset,
            } => write!(
                f,
                "cannot rewind {partition}: offset {finished_offset} already finished"
            ),
        }
    }
}

impl Error for RewindError {}

impl RewindError {
    /// The situation: a partition no longer owned under the lease's assignment is
    /// [`ErrorKind::GenerationOver`]; a rewind into finished (maybe committed) work is a request
    /// the guard never grants, [`ErrorKind::Config`], as a refused seek is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            RewindError::NotOwned { .. } => ErrorKind::GenerationOver,
            RewindError::PastFinishedWork { .. } => ErrorKind::Config,
        }
    }
}

/// Why `seek` refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeekError {
    /// The partition is not owned (never assigned, revoked, lost, or being handed back): only
    /// the owner moves a partition's reading.
    NotOwned {
        /// The partition.
        tp: TopicPartition,
    },
    /// Offsets start at zero.
    Negative {
        /// The partition.
        tp: TopicPartition,
        /// The offset asked for.
        offset: i64,
    },
}

impl fmt::Display for SeekError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotOwned { tp } => write!(f, "cannot seek {tp}: not owned by this member"),
            Self::Negative { tp, offset } => {
                write!(f, "cannot seek {tp} to {offset}: offsets start at 0")
            }
        }
    }
}

impl Error for SeekError {}

impl SeekError {
    /// [`ErrorKind::Config`], as the consumer has always reported a refused seek: the call asks
    /// for something the guard does not allow (a partition this member does not own, a negative
    /// offset).
    pub fn kind(&self) -> ErrorKind {
        match self {
            SeekError::NotOwned { .. } | SeekError::Negative { .. } => ErrorKind::Config,
        }
    }
}

/// What the caller's commit function reports when it could not commit everything.
#[derive(Debug)]
pub enum CommitFailure {
    /// The whole request failed (transport error, coordinator gone, fenced generation).
    Request(BoxError),
    /// Some partitions were refused; the others were committed.
    Partitions(Vec<(TopicPartition, BoxError)>),
}

impl fmt::Display for CommitFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Request(_) => f.write_str("offset commit failed"),
            Self::Partitions(failed) => {
                write!(f, "offset commit refused for")?;
                for (i, (partition, _)) in failed.iter().enumerate() {
                    let sep = if i == 0 { " " } else { ", " };
                    write!(f, "{sep}{partition}")?;
                }
                Ok(())
            }
        }
    }
}

/// The request's error, or the first refused partition's (each partition's is in the variant).
impl Error for CommitFailure {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            Self::Request(e) => Some(e.as_ref()),
            Self::Partitions(failed) => failed.first().map(|(_, e)| e.as_ref() as _),
        }
    }
}

/// The stage at which a revoked partition's handoff failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandoffStage {
    /// The flush of buffered and in-flight work failed: nothing was committed for the partition.
    Flush,
    /// The flush succeeded but the offset commit failed.
    Commit,
}

/// One revoked partition whose handoff failed: where, and the caller's error as its source.
/// Cloneable (the error is shared), so that a caller can keep it for later reporting as it is:
/// the consumer's `HandoffFailure` is this plus the generation.
#[derive(Debug, Clone)]
pub struct PartitionFailure {
    /// The partition.
    pub tp: TopicPartition,
    /// Where it failed.
    pub stage: HandoffStage,
    /// The caller's error (the flush's, or the commit's: its `source()` chain reaches the
    /// broker's code or the transport failure).
    pub error: std::sync::Arc<dyn Error + Send + Sync>,
}

impl fmt::Display for HandoffStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Flush => "flush",
            Self::Commit => "commit",
        })
    }
}

impl fmt::Display for PartitionFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} handoff failed at its {}", self.tp, self.stage)
    }
}

impl Error for PartitionFailure {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&*self.error)
    }
}

/// A revocation's handoff finished with failures. Raised only after every revoked partition
/// was fenced and pruned; it names only the partitions that failed, each with its stage and
/// its error.
#[derive(Debug)]
pub struct HandoffError {
    /// The failed partitions, in the order they were revoked.
    pub failures: Vec<PartitionFailure>,
}

impl HandoffError {
    /// The failed partitions.
    pub fn partitions(&self) -> Vec<TopicPartition> {
        self.failures.iter().map(|f| f.tp.clone()).collect()
    }
}

impl fmt::Display for HandoffError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "revocation handoff failed for")?;
        for (i, failure) in self.failures.iter().enumerate() {
            let sep = if i == 0 { " " } else { ", " };
            write!(f, "{sep}{} ({})", failure.tp, failure.stage)?;
        }
        Ok(())
    }
}

/// The first failed partition (each one's error is its own source).
impl Error for HandoffError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.failures.first().map(|f| f as _)
    }
}

/// The guard's configuration is invalid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardConfigError {
    /// The setting at fault.
    pub setting: &'static str,
    /// The rule it broke.
    pub rule: &'static str,
}

impl fmt::Display for GuardConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid guard setting {}: {}", self.setting, self.rule)
    }
}

impl Error for GuardConfigError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp() -> TopicPartition {
        TopicPartition::new("orders", 0)
    }

    #[test]
    fn admit_refusals_have_a_kind() {
        let (tp, offset) = (tp(), 7);
        let over = [
            AdmitError::Fenced {
                tp: tp.clone(),
                offset,
                status: None,
            },
            AdmitError::SessionExpired {
                tp: tp.clone(),
                offset,
            },
        ];
        for e in over {
            assert_eq!(e.kind(), ErrorKind::GenerationOver, "{e}");
        }
        let skipped = [
            AdmitError::AlreadyCompleted {
                tp: tp.clone(),
                offset,
            },
            AdmitError::CompletedMapFull {
                tp: tp.clone(),
                offset,
                position: 3,
            },
            AdmitError::SeekedWhileRunning {
                tp: tp.clone(),
                offset,
            },
            AdmitError::AlreadyAdmitted {
                tp: tp.clone(),
                offset,
            },
            AdmitError::Duplicate {
                tp: tp.clone(),
                offset,
            },
            AdmitError::OffsetRegression {
                tp,
                offset,
                high_water: 9,
            },
        ];
        for e in skipped {
            assert_eq!(e.kind(), ErrorKind::Skipped, "{e}");
        }
    }

    #[test]
    fn completion_refusals_have_a_kind() {
        let (tp, offset) = (tp(), 7);
        let stale = CompleteError::StaleLease {
            tp: tp.clone(),
            offset,
            lease_epoch: 1,
            current_epoch: 2,
        };
        assert_eq!(stale.kind(), ErrorKind::GenerationOver);
        let not_current = CompleteError::NotCurrent {
            tp: tp.clone(),
            offset,
        };
        assert_eq!(not_current.kind(), ErrorKind::GenerationOver);
        let seeked = CompleteError::Seeked {
            tp: tp.clone(),
            offset,
        };
        assert_eq!(seeked.kind(), ErrorKind::Skipped);
        assert_eq!(
            CompleteError::NotPending { tp, offset }.kind(),
            ErrorKind::Skipped
        );
    }

    #[test]
    fn rewind_refusals_have_a_kind() {
        let not_owned = RewindError::NotOwned { tp: tp() };
        assert_eq!(not_owned.kind(), ErrorKind::GenerationOver);
        let past = RewindError::PastFinishedWork {
            tp: tp(),
            finished_offset: 4,
        };
        assert_eq!(past.kind(), ErrorKind::Config);
    }

    #[test]
    fn seek_refusals_are_config() {
        assert_eq!(SeekError::NotOwned { tp: tp() }.kind(), ErrorKind::Config);
        let negative = SeekError::Negative {
            tp: tp(),
            offset: -1,
        };
        assert_eq!(negative.kind(), ErrorKind::Config);
    }
}
