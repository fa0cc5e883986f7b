//! One partition's fetched records that were not handed out yet: a few decoded records in
//! line, and behind them the rest of the fetched data, decoded a batch at a time as the line
//! runs out.
//!
//! Why not the whole fetch decoded at once: a decoded record is a 128-byte struct, and a
//! 1 MiB partition fetch of small records holds about ten thousand of them, per partition,
//! beside the response bytes they point into. Decoding on demand keeps one batch per
//! partition decoded.

use std::collections::VecDeque;

use crate::wire::{LazyRecords, Record, WireError};

/// The records of one partition still to hand out, in offset order: `line` first, then what
/// `rest` decodes to.
#[derive(Debug, Default)]
pub(crate) struct PartitionBuffer {
    line: VecDeque<Record>,
    rest: Option<LazyRecords>,
}

/// What [`PartitionBuffer::refill`] found.
#[derive(Debug)]
pub(crate) enum Refill {
    /// Records are in line, or nothing more comes and nothing went wrong.
    Ok,
    /// The fetched data is used up: the next fetch starts at this offset.
    Finished(i64),
    /// A batch failed its checks: nothing more comes from this fetch; the next one starts at
    /// the offset (the failed batch), where the error will be seen again or not.
    Failed(i64, WireError),
}

impl PartitionBuffer {
    /// A buffer of a fetch's records, nothing decoded yet.
    pub(crate) fn lazy(records: LazyRecords) -> Self {
        PartitionBuffer {
            line: VecDeque::new(),
            rest: Some(records),
        }
    }

    /// True when nothing is left to hand out (nothing in line, no data left to decode).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.line.is_empty() && self.rest.is_none()
    }

    /// Records left: those in line, and at most what the undecoded batches' headers count.
    pub(crate) fn len(&self) -> usize {
        self.line.len() + self.rest.as_ref().map_or(0, LazyRecords::remaining_records)
    }

    /// The offset of the next record to hand out (the line is never empty while data is left).
    pub(crate) fn front_offset(&self) -> Option<i64> {
        self.line.front().map(|record| record.offset)
    }

    /// The next record in line, if one is decoded (see [`PartitionBuffer::refill`]).
    #[inline]
    pub(crate) fn pop_front(&mut self) -> Option<Record> {
        self.line.pop_front()
    }

    /// True when the line ran out and fetched data is left to decode: time to
    /// [`PartitionBuffer::refill`].
    #[inline]
    pub(crate) fn needs_refill(&self) -> bool {
        self.line.is_empty() && self.rest.is_some()
    }

    /// Puts a record back first in line.
    pub(crate) fn push_front(&mut self, record: Record) {
        self.line.push_front(record);
    }

    /// With nothing in line, decodes batches of the rest until a record is in line or the rest
    /// is used up (then it is dropped, and the offset the next fetch starts at is returned).
    /// The intake calls it whenever the line runs out, so a buffer with nothing in line has
    /// nothing left at all.
    pub(crate) fn refill(&mut self) -> Refill {
        if !self.line.is_empty() {
            return Refill::Ok;
        }
        let Some(rest) = self.rest.as_mut() else {
            return Refill::Ok;
        };
        // The line's allocation is reused for every batch (a VecDeque that is empty converts
        // to a Vec and back without moving or allocating).
        let mut decoded = Vec::from(std::mem::take(&mut self.line));
        let result = rest.fill(&mut decoded);
        self.line = VecDeque::from(decoded);
        match result {
            Err(error) => {
                let at = rest.next_offset();
                self.rest = None;
                Refill::Failed(at, error)
            }
            Ok(()) if rest.is_finished() => {
                let at = rest.next_offset();
                self.rest = None;
                Refill::Finished(at)
            }
            Ok(()) => Refill::Ok,
        }
    }
}

impl FromIterator<Record> for PartitionBuffer {
    fn from_iter<I: IntoIterator<Item = Record>>(records: I) -> Self {
        PartitionBuffer {
            line: records.into_iter().collect(),
            rest: None,
        }
    }
}
