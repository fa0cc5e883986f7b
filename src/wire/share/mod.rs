//! Share groups (KIP-932) on the wire: ShareFetch and ShareAcknowledge, one share session per
//! broker, one lane (thread) per broker, acknowledgements piggybacked on the next fetch, RENEW.
//!
//! Why a layer of its own: a share group's records are not read from a position the consumer
//! owns; each ShareFetch *acquires* records under a time lock (a lease: `sent_at` plus
//! `AcquisitionLockTimeoutMs`), and each acquired record must be acknowledged (ACCEPT,
//! RELEASE, REJECT) or renewed before its lock runs out, to the partition's leader, inside
//! that broker's share session. This module turns those rules into a [`ShareFetcher`] the
//! share consumer's poll thread drives; membership (ShareGroupHeartbeat) is `group::share`'s.
//!
//! The map:
//! - this file: the vocabulary ([`AckType`], [`ShareAck`], [`AckResult`], [`AcquiredBatch`],
//!   ...), shared by the children;
//! - `acks.rs`: acknowledgements coalesced into AcknowledgementBatches, free of I/O;
//! - `session.rs`: [`ShareSession`], one broker's session epochs, partitions and forgotten
//!   partitions, and what an answer means, free of I/O;
//! - `codec.rs`: the v1/v2 requests (v2 fields spliced into `kafka-protocol`'s v1 encoding)
//!   and the v2 ShareAcknowledge response read down to v1;
//! - `answers.rs`: a broker's answer turned into acquired records, gap acknowledgements,
//!   acknowledgement outcomes and leader hints;
//! - `fetcher/`: [`ShareFetcher`], routing partitions to leaders (topic ids and leaders from
//!   the client's one metadata cache), the acknowledgement queue and the calls of the poll
//!   thread (`mod.rs`), every answer taken in (`absorb.rs`), and the requests and the share
//!   lane they travel on, one per broker, on the request-lane machine of `wire/lane.rs` that
//!   the consumer's Fetch runs on too (`requests.rs`).
//!
//! Acknowledgements are never resent by this layer: one whose request failed (a session
//! reset, a broken connection, a timeout) is reported failed with [`AckError`], and the caller
//! decides (a record whose fate is unknown comes back after its lock expires anyway).

mod acks;
mod answers;
pub(crate) mod codec;
mod fetcher;
mod session;

use std::time::{Duration, Instant};

use crate::wire::{KafkaCode, Record};
use crate::TopicPartition;

pub use acks::MAX_ACKS_PER_PARTITION;
pub use answers::{MAX_GAPS_PER_PARTITION, MAX_OWED_PER_SESSION};
pub use fetcher::ShareFetcher;
// The lock guard's, which decides how a record is acknowledged and whose leases read the
// session: named here, not re-exported (the wire layer has no second name for them).
use crate::guard::{AckType, SessionScope};
pub use session::{
    AckMap, AckQueue, SessionRequest, ShareSession, Verdict, ACKNOWLEDGE_ADVANCES_EPOCH,
};

use crate::guard::LockLease;

/// One record's acknowledgement, as the caller hands it over: tied to the acquisition it was
/// decided for, so that it is never applied to another one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShareAck {
    /// The record's partition.
    pub tp: TopicPartition,
    /// The record's offset.
    pub offset: i64,
    /// What happens to it.
    pub kind: AckType,
    /// The share session (and partition) that acquired the record: once it ended, or once
    /// the record was acquired again, the acknowledgement is dropped, never sent (the broker
    /// would apply it to whatever acquisition holds the record then).
    pub scope: SessionScope,
    /// The broker's lock of that acquisition has certainly ended by then: later, the
    /// acknowledgement is dropped, never sent (it would be refused, and a refusal rolls back
    /// the partition's other acknowledgements in the same request).
    pub lock_ends_by: Instant,
    /// The lease's deadline (on the lease clock): an acknowledgement that goes into a request
    /// at or after it is late (`late`), whenever it was decided.
    pub deadline: Instant,
}

impl ShareAck {
    /// The acknowledgement `kind` of `lease`'s acquisition, tied to its session, its lock's
    /// certain end and its deadline (a lease with none, voided or of an ended session, gives
    /// one that is late at once).
    pub(crate) fn for_lease(lease: &LockLease, kind: AckType) -> ShareAck {
        ShareAck {
            tp: lease.tp().clone(),
            offset: lease.offset(),
            kind,
            scope: lease.scope().clone(),
            lock_ends_by: lease.lock_ends_by(),
            deadline: lease.deadline().unwrap_or_else(|| lease.now()),
        }
    }

    /// Whether the acknowledgement is late when a request carrying it is built at `now` (at or
    /// after its lease's deadline: the broker may refuse it). Decided then, not when the
    /// outcome was drained: an ACCEPT decided inside its lease that waited past the deadline
    /// (behind a fetch in flight, a slow flush) may be refused all the same. A late one never
    /// travels in the same partition batch as acknowledgements that are not, so that its
    /// refusal (Kafka stops at a partition's first invalid offset and rolls back the others)
    /// cannot undo them.
    pub(crate) fn late(&self, now: Instant) -> bool {
        now >= self.deadline
    }
}

/// Why acknowledgements failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AckError {
    /// The broker refused them (INVALID_RECORD_STATE: the lock expired or they were
    /// acknowledged already; NOT_LEADER_OR_FOLLOWER; a session error ...).
    Kafka(KafkaCode),
    /// The request or its answer was lost with the connection: outcome unknown.
    Transport(String),
    /// No answer within the caller's timeout: outcome unknown (the answer, if it comes, is
    /// not reported again).
    TimedOut,
    /// No share session was open with the leader, so nothing was sent (a session opens with
    /// a ShareFetch, which carries no acknowledgements).
    NoSession,
    /// The partition's leader or topic id is unknown, so nothing was sent.
    NoLeader,
    /// The share session that acquired the record ended (a broken connection, a timeout, a
    /// session error, a close, a leader change) before the acknowledgement was sent: the broker
    /// released the record then, so it was dropped, never sent.
    SessionEnded,
    /// The record was acquired again (a later delivery) before the acknowledgement was sent: it
    /// was decided for the earlier acquisition, so it was dropped, never sent.
    Reacquired,
    /// The broker's lock of the acquisition had certainly ended before the acknowledgement
    /// could be sent: it was dropped, never sent (the record comes back anyway).
    LockEnded,
    /// RENEW needs ShareAcknowledge v2, which the leader does not speak; or a RENEW was handed
    /// to [`ShareFetcher::acknowledge`] (renewals go through [`ShareFetcher::renew`]).
    RenewUnsupported,
}

impl std::fmt::Display for AckError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AckError::Kafka(code) => write!(f, "refused: {code}"),
            AckError::Transport(why) => write!(f, "lost with the connection: {why}"),
            AckError::TimedOut => write!(f, "no answer in time"),
            AckError::NoSession => write!(f, "no share session with the leader"),
            AckError::NoLeader => write!(f, "the partition's leader is unknown"),
            AckError::SessionEnded => {
                write!(f, "not sent: the share session that acquired it ended")
            }
            AckError::Reacquired => write!(f, "not sent: the record was acquired again"),
            AckError::LockEnded => write!(f, "not sent: the lock had certainly ended"),
            AckError::RenewUnsupported => write!(f, "the leader does not speak RENEW"),
        }
    }
}

/// What a broker's answer said that this layer refused to act on. Why an error and not a
/// silent skip: an answer that names what the session never asked for is a broken or hostile
/// broker (or a bug here), and acting on it (running its records, owing acknowledgements for
/// its offsets) would make the member work for a claim nobody made.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AnswerError {
    /// A ShareFetch answer named a partition the share session did not fetch: its records were
    /// not run and nothing is acknowledged or owed for it (whatever the broker holds for it runs
    /// out by its lock).
    UnaskedPartition {
        /// The partition.
        tp: TopicPartition,
    },
}

impl std::fmt::Display for AnswerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AnswerError::UnaskedPartition { tp } => {
                write!(
                    f,
                    "the answer names {tp}, which the share session did not fetch"
                )
            }
        }
    }
}

impl std::error::Error for AnswerError {}

/// The outcome of some acknowledgements of one partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AckResult {
    /// The partition.
    pub tp: TopicPartition,
    /// The acknowledged offsets and how.
    pub acks: Vec<(i64, AckType)>,
    /// Whether the broker applied them.
    pub outcome: Result<(), AckError>,
}

/// What [`ShareFetcher::fetch`] does besides its partitions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShareFetchSettings {
    /// `MaxWaitMs`: how long a broker may hold a fetch for data.
    pub max_wait: Duration,
    /// `MinBytes`.
    pub min_bytes: i32,
    /// `MaxBytes`.
    pub max_bytes: i32,
    /// `MaxRecords`: the most records one fetch acquires per broker (batch boundaries may
    /// exceed it in batch-optimized mode).
    pub max_records: i32,
    /// `BatchSize`: the preferred number of records per acquired batch.
    pub batch_size: i32,
    /// `ShareAcquireMode` (v2): 0 batch-optimized, 1 record-limit (never more than
    /// `max_records`).
    pub acquire_mode: i8,
}

impl Default for ShareFetchSettings {
    fn default() -> Self {
        ShareFetchSettings {
            max_wait: Duration::from_millis(500),
            min_bytes: 1,
            max_bytes: 50 * 1024 * 1024,
            max_records: 500,
            batch_size: 500,
            acquire_mode: 0,
        }
    }
}

/// One record acquired by this member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcquiredRecord {
    /// The record.
    pub record: Record,
    /// How often it was delivered, this time included (1 the first time).
    pub delivery_count: u16,
    /// The last offset of the acquired range it came in (an `AcquiredRecords` entry of the
    /// answer: one in-flight batch at the broker, which settles a batch acknowledged whole as
    /// one and one acknowledged in parts offset by offset).
    pub range_last: i64,
}

/// The records one partition's answer acquired, under one lock.
#[derive(Clone, Debug)]
pub struct AcquiredBatch {
    /// The partition.
    pub tp: TopicPartition,
    /// When the request that acquired them was sent: their lock runs from (no later than)
    /// here, so a lease measured from it never outlives the broker's.
    pub sent_at: Instant,
    /// `AcquisitionLockTimeoutMs`.
    pub lock_duration: Duration,
    /// The answer's arrival (or a later instant) plus the lock: the broker's lock has certainly
    /// ended by then.
    pub lock_ends_by: Instant,
    /// The share session (and partition in it) that acquired them: the broker releases them
    /// when it ends, and their leases read not current from then on.
    pub scope: SessionScope,
    /// The records, in offset order.
    pub records: Vec<AcquiredRecord>,
}

impl AcquiredBatch {
    /// The lock as the lock guard leases it.
    pub(crate) fn grant(&self) -> crate::guard::Grant {
        crate::guard::Grant {
            sent_at: self.sent_at,
            lock: self.lock_duration,
            lock_ends_by: self.lock_ends_by,
            scope: self.scope.clone(),
        }
    }

    /// The earliest instant the broker's lock of these records may end (the send time plus
    /// the lock): the deadline of an acknowledgement this layer decides for them itself (a
    /// record refused at acquisition, a gap), which no lease margin shortens.
    pub(crate) fn earliest_lock_end(&self) -> Instant {
        self.sent_at
            .checked_add(self.lock_duration)
            .unwrap_or(self.sent_at)
    }

    /// The acknowledgement `kind` of the record at `offset` of this batch, decided now (a
    /// record refused at acquisition; a test's handler).
    pub(crate) fn ack(&self, offset: i64, kind: AckType) -> ShareAck {
        ShareAck {
            tp: self.tp.clone(),
            offset,
            kind,
            scope: self.scope.clone(),
            lock_ends_by: self.lock_ends_by,
            deadline: self.earliest_lock_end(),
        }
    }
}

/// What one [`ShareFetcher::fetch`] brought.
#[derive(Clone, Debug, Default)]
pub struct ShareFetchRound {
    /// Acquired records, one batch per partition answer.
    pub batches: Vec<AcquiredBatch>,
    /// Outcomes of acknowledgements (piggybacked, gaps included) answered meanwhile.
    pub ack_results: Vec<AckResult>,
    /// Partition errors of the fetches (leader moves are handled here, and still reported).
    pub errors: Vec<(TopicPartition, KafkaCode)>,
    /// What the answers said that was refused (their records ignored).
    pub refused: Vec<AnswerError>,
}

/// What [`ShareFetcher::renew`] did.
#[derive(Clone, Debug)]
pub struct RenewResult {
    /// When the first renewal request was sent: the new locks run from no later than here.
    pub sent_at: Instant,
    /// The shortest `AcquisitionLockTimeoutMs` the leaders answered (`None`: none answered).
    pub lock_duration: Option<Duration>,
    /// The outcome per partition.
    pub results: Vec<AckResult>,
}
