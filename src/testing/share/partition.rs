//! One share partition's records as the broker keeps them (Kafka's `SharePartition`): each
//! offset available, acquired by one member under a lock until an instant, acknowledged, or
//! archived, with the number of times it was delivered. Time is passed in.
//!
//! The rules, as KIP-932 states them:
//! - a fetch acquires available records in offset order, each one's delivery count going up by
//!   one and its lock running from now for the group's lock duration;
//! - a lock that ends makes its record available again, or archives it once its delivery count
//!   reached the group's limit (`group.share.delivery.count.limit`);
//! - ACCEPT acknowledges, REJECT (and a gap) archives, RELEASE makes available (or archives at
//!   the limit), RENEW restarts the lock; each only from the member that holds the record's lock
//!   while it holds it, and INVALID_RECORD_STATE otherwise;
//! - a member's records are released when its share session closes or it leaves the group,
//!   with their delivery count as it was (the Kafka 4.4 broker the `share_sessions` tests run
//!   against delivers such a record again as delivery 2; Kafka's newer `SharePartition` source
//!   lowers the count on this path, since the client may never have seen the records).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::guard::AckType;
use crate::wire::KafkaCode;

/// Where a record of a share partition stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordState {
    /// Any member's next fetch may acquire it.
    Available,
    /// Held by `member` under a lock ending at `until`.
    Acquired {
        /// The member holding the lock.
        member: String,
        /// When the lock ends.
        until: Instant,
    },
    /// Accepted: done for good.
    Acknowledged,
    /// Rejected, or released (or timed out) at the delivery count limit: never delivered again.
    Archived,
}

/// A record the broker has delivered at least once (or archived as a gap).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InFlight {
    /// Where it stands.
    pub state: RecordState,
    /// How many times it was delivered.
    pub delivery_count: u16,
}

/// What happened to an acknowledgement that the partition applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Applied {
    /// The record is done (accepted).
    Accepted,
    /// Available again.
    Released,
    /// Archived (rejected, or released at the limit).
    Archived,
    /// Its lock runs again from now.
    Renewed,
}

/// One partition's share state.
#[derive(Debug, Default)]
pub(super) struct SharePartition {
    /// Offsets below this one were read from the log into `records` (or skipped before the
    /// group started); `None` until the first fetch starts the partition.
    next: Option<i64>,
    records: BTreeMap<i64, InFlight>,
}

impl SharePartition {
    /// The record at `offset`, if the partition has delivered it.
    pub(super) fn record(&self, offset: i64) -> Option<&InFlight> {
        self.records.get(&offset)
    }

    /// Ends the locks that ran out by `now`; returns how many (and how many were archived).
    pub(super) fn expire(&mut self, now: Instant, limit: u16) -> (u64, u64) {
        let (mut expired, mut archived) = (0, 0);
        for record in self.records.values_mut() {
            if matches!(&record.state, RecordState::Acquired { until, .. } if *until <= now) {
                expired += 1;
                if record.delivery_count >= limit {
                    record.state = RecordState::Archived;
                    archived += 1;
                } else {
                    record.state = RecordState::Available;
                }
            }
        }
        (expired, archived)
    }

    /// Whether the partition was started (its first fetch chose where it begins).
    pub(super) fn started(&self) -> bool {
        self.next.is_some()
    }

    /// Starts the partition at `offset` (the group's `share.auto.offset.reset`).
    pub(super) fn start(&mut self, offset: i64) {
        self.next.get_or_insert(offset);
    }

    /// The offsets `member` acquires now, at most `max`: the available ones already delivered,
    /// then the log's new ones below `log_end`, in offset order; each is acquired until
    /// `now + lock`. With `batch_end` (the offset after the produced batch holding an offset:
    /// batch-optimized acquisition) the last new batch is acquired whole, past `max`. Returns
    /// the offsets with their delivery counts.
    pub(super) fn acquire(
        &mut self,
        member: &str,
        now: Instant,
        lock: Duration,
        log_end: i64,
        max: usize,
        batch_end: Option<&dyn Fn(i64) -> i64>,
    ) -> Vec<(i64, u16)> {
        let until = now + lock;
        let mut out = Vec::new();
        for (offset, record) in self.records.iter_mut() {
            if out.len() >= max {
                return out;
            }
            if record.state == RecordState::Available {
                record.delivery_count = record.delivery_count.saturating_add(1);
                record.state = RecordState::Acquired {
                    member: member.to_string(),
                    until,
                };
                out.push((*offset, record.delivery_count));
            }
        }
        let Some(next) = self.next.as_mut() else {
            return out;
        };
        // Past `max` only to finish the batch the max-th record is in.
        let mut whole_to: Option<i64> = None;
        while *next < log_end {
            if out.len() >= max && whole_to.is_none_or(|end| *next >= end) {
                break;
            }
            let offset = *next;
            *next += 1;
            self.records.insert(
                offset,
                InFlight {
                    state: RecordState::Acquired {
                        member: member.to_string(),
                        until,
                    },
                    delivery_count: 1,
                },
            );
            out.push((offset, 1));
            if out.len() == max {
                whole_to = batch_end.map(|end| end(offset));
            }
        }
        out
    }

    /// Gives back an acquisition the log could not fill (the record was deleted meanwhile): it
    /// is archived, as the broker archives offsets it finds no record for.
    pub(super) fn drop_missing(&mut self, offset: i64) {
        if let Some(record) = self.records.get_mut(&offset) {
            record.state = RecordState::Archived;
        }
    }

    /// `member` acknowledges the record at `offset` with `kind` at `now` (locks that ran out
    /// were expired before): applied only while `member` holds its lock.
    pub(super) fn acknowledge(
        &mut self,
        member: &str,
        offset: i64,
        kind: AckType,
        now: Instant,
        lock: Duration,
        limit: u16,
    ) -> Result<Applied, KafkaCode> {
        let Some(record) = self.records.get_mut(&offset) else {
            return Err(KafkaCode::INVALID_RECORD_STATE);
        };
        match &record.state {
            RecordState::Acquired {
                member: holder,
                until,
            } if holder == member && *until > now => {}
            _ => return Err(KafkaCode::INVALID_RECORD_STATE),
        }
        let applied = match kind {
            AckType::Accept => {
                record.state = RecordState::Acknowledged;
                Applied::Accepted
            }
            AckType::Release if record.delivery_count >= limit => {
                record.state = RecordState::Archived;
                Applied::Archived
            }
            AckType::Release => {
                record.state = RecordState::Available;
                Applied::Released
            }
            AckType::Reject | AckType::Gap => {
                record.state = RecordState::Archived;
                Applied::Archived
            }
            AckType::Renew => {
                record.state = RecordState::Acquired {
                    member: member.to_string(),
                    until: now + lock,
                };
                Applied::Renewed
            }
        };
        Ok(applied)
    }

    /// Releases every record `member` holds (its share session closed, or it left the group):
    /// available again, or archived at the limit. Returns how many.
    pub(super) fn release_member(&mut self, member: &str, limit: u16) -> u64 {
        let mut released = 0;
        for record in self.records.values_mut() {
            if matches!(&record.state, RecordState::Acquired { member: holder, .. } if holder == member)
            {
                released += 1;
                record.state = if record.delivery_count >= limit {
                    RecordState::Archived
                } else {
                    RecordState::Available
                };
            }
        }
        released
    }
}
