//! Reading one record batch (format v2) from bytes a broker sent, with every count, length and
//! delta checked against what the bytes can hold before anything is allocated for it.
//!
//! We read batches ourselves rather than through `kafka-protocol`'s decoder because that decoder
//! sizes allocations from counts on the wire (a record's header count reserves a map of that
//! many entries: five bytes could ask for tens of GiB, and an allocation failure aborts the
//! process) and adds offset and timestamp deltas without overflow checks. Here:
//! - a count reserves at most what the remaining bytes could encode (every record takes at least
//!   [`MIN_RECORD_LEN`] bytes, every header at least [`MIN_HEADER_LEN`]);
//! - every record and header count is charged to the Fetch response's [`Allowance`] before
//!   anything is reserved for it, and so are decompressed output and copied header keys, so
//!   that no response, however its batches are compressed or cut, costs more than a small
//!   constant times its budget;
//! - every offset and timestamp is computed with checked arithmetic, must lie inside the batch's
//!   declared range and must increase, so that `offset + 1` (the commit position) always exists.
//!
//! Decoding records ourselves also keeps a record's headers in wire order with repeated keys,
//! as Kafka's own consumer does.

use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::records::Compression;

use super::{Record, TimestampType};
use crate::wire::compression::{self, DecompressError};

/// Base offset and batch length, the part of a batch outside its `batch_length`.
pub(crate) const LOG_OVERHEAD: usize = 12;
/// The fixed header of a v2 batch, up to and including its record count.
pub(crate) const HEADER_LEN: usize = 61;
/// Smallest possible encoded record: length, attributes, timestamp delta, offset delta, key
/// length, value length and header count, one byte each.
pub(crate) const MIN_RECORD_LEN: usize = 7;
/// Smallest possible encoded header: key length 0 and value length -1, one byte each.
const MIN_HEADER_LEN: usize = 2;

const ATTR_COMPRESSION: i16 = 0x7;
const ATTR_LOG_APPEND_TIME: i16 = 1 << 3;
const ATTR_TRANSACTIONAL: i16 = 1 << 4;
const ATTR_CONTROL: i16 = 1 << 5;

/// How much one Fetch response may decode into, summed over all its partitions.
///
/// Why both counts: a record or header costs a struct of about a hundred bytes however small it
/// was on the wire (2 bytes for a header), so even an uncompressed 64 MiB response could decode
/// to some 28 times its size; and compressed batches can expand a thousandfold, so many small
/// gzip batches of tiny records would turn a response into gigabytes. Every count is charged
/// before anything is allocated for it, in compressed and uncompressed batches alike; the
/// section of an uncompressed batch costs no bytes (its records share the response buffer),
/// only the header keys copied out of it.
/// Decoding one response therefore allocates at most a small constant times
/// `max_decompressed_bytes` plus 128 bytes (one [`Record`]) per
/// `max_decompressed_records`. When the budget runs out, decoding stops at a batch boundary and
/// the partition's next offset points at the first batch not decoded, so nothing is lost: the
/// next fetch starts there. Only a single batch larger than the whole budget is an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeBudget {
    /// Bytes that decoding may produce: decompressed record sections, and the header keys it
    /// copies into `String`s (from compressed and uncompressed batches alike).
    pub max_decompressed_bytes: usize,
    /// Records plus record headers the response may decode, from compressed and uncompressed
    /// batches alike (each costs a struct of about a hundred bytes, however small it was on the
    /// wire).
    pub max_decompressed_records: usize,
}

impl Default for DecodeBudget {
    fn default() -> Self {
        DecodeBudget {
            max_decompressed_bytes: 256 * 1024 * 1024,
            max_decompressed_records: 2 * 1024 * 1024,
        }
    }
}

/// What is left of one response's [`DecodeBudget`] while its partitions are decoded.
#[derive(Clone, Debug)]
pub struct Allowance {
    budget: DecodeBudget,
    bytes_left: usize,
    records_left: usize,
}

impl Allowance {
    /// A full allowance for one response.
    pub fn new(budget: DecodeBudget) -> Self {
        Allowance {
            budget,
            bytes_left: budget.max_decompressed_bytes,
            records_left: budget.max_decompressed_records,
        }
    }

    /// Whether nothing has been charged yet: a batch that does not fit then never will.
    fn untouched(&self) -> bool {
        self.bytes_left == self.budget.max_decompressed_bytes
            && self.records_left == self.budget.max_decompressed_records
    }

    /// Charges `n` records or headers; false (and nothing charged) when fewer are left.
    fn take_items(&mut self, n: usize) -> bool {
        match self.records_left.checked_sub(n) {
            Some(rest) => {
                self.records_left = rest;
                true
            }
            None => false,
        }
    }

    /// Charges `n` bytes; false (and nothing charged) when fewer are left.
    fn take_bytes(&mut self, n: usize) -> bool {
        match self.bytes_left.checked_sub(n) {
            Some(rest) => {
                self.bytes_left = rest;
                true
            }
            None => false,
        }
    }

    /// Bytes decompressed, or copied out as header keys, so far under this allowance.
    pub fn decompressed_bytes(&self) -> usize {
        self.budget.max_decompressed_bytes - self.bytes_left
    }

    /// Records and headers decoded so far under this allowance.
    pub fn decompressed_records(&self) -> usize {
        self.budget.max_decompressed_records - self.records_left
    }
}

/// The fixed header fields of a v2 batch.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BatchHeader {
    pub(crate) base_offset: i64,
    pub(crate) magic: i8,
    crc: u32,
    attributes: i16,
    last_offset_delta: i32,
    first_timestamp: i64,
    max_timestamp: i64,
    pub(crate) producer_id: i64,
    record_count: i32,
}

impl BatchHeader {
    /// Reads the header from the start of a batch; `None` when fewer than [`HEADER_LEN`] bytes.
    pub(crate) fn parse(b: &[u8]) -> Option<BatchHeader> {
        let i64_at = |o: usize| Some(i64::from_be_bytes(b.get(o..o + 8)?.try_into().ok()?));
        let i32_at = |o: usize| Some(i32::from_be_bytes(b.get(o..o + 4)?.try_into().ok()?));
        let i16_at = |o: usize| Some(i16::from_be_bytes(b.get(o..o + 2)?.try_into().ok()?));
        Some(BatchHeader {
            base_offset: i64_at(0)?,
            magic: i8::from_be_bytes([*b.get(16)?]),
            crc: u32::from_be_bytes(b.get(17..21)?.try_into().ok()?),
            attributes: i16_at(21)?,
            last_offset_delta: i32_at(23)?,
            first_timestamp: i64_at(27)?,
            max_timestamp: i64_at(35)?,
            producer_id: i64_at(43)?,
            record_count: i32_at(57)?,
        })
    }

    /// The batch's last offset, saturating: for skipping and positioning before validation.
    pub(crate) fn last_offset(&self) -> i64 {
        self.base_offset
            .saturating_add(i64::from(self.last_offset_delta))
    }

    pub(crate) fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }

    pub(crate) fn is_transactional(&self) -> bool {
        self.attributes & ATTR_TRANSACTIONAL != 0
    }

    /// Checks the offset range the batch declares: non-negative, not overflowing, and leaving
    /// room for `last + 1`, the position after it.
    pub(crate) fn check_offsets(&self) -> Result<(), String> {
        if self.base_offset < 0 {
            return Err(format!("negative base offset {}", self.base_offset));
        }
        if self.last_offset_delta < 0 {
            return Err(format!(
                "negative last offset delta {}",
                self.last_offset_delta
            ));
        }
        match self
            .base_offset
            .checked_add(i64::from(self.last_offset_delta))
        {
            Some(last) if last < i64::MAX => Ok(()),
            _ => Err(format!(
                "offsets {} + {} leave no next offset",
                self.base_offset, self.last_offset_delta
            )),
        }
    }
}

/// How decoding one batch ended, when it did not fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BatchOutcome {
    /// Every record was read (and those at or after the fetch offset appended).
    Decoded,
    /// The batch does not fit in what is left of the response's budget; nothing was appended
    /// and nothing charged. Decoding must stop before this batch.
    OverBudget,
}

/// Where the records of a batch go.
pub(crate) struct Sink<'a> {
    pub(crate) topic: &'a Arc<str>,
    pub(crate) partition: i32,
    /// Records before this offset are read (and checked) but not appended.
    pub(crate) fetch_offset: i64,
    pub(crate) out: &'a mut Vec<Record>,
}

/// Verifies and decodes one complete batch (`batch` starts at its base offset and holds exactly
/// `LOG_OVERHEAD + batch_length` bytes). On error or [`BatchOutcome::OverBudget`], `sink.out`
/// is left as it was.
pub(crate) fn decode_batch(
    header: &BatchHeader,
    batch: &Bytes,
    allowance: &mut Allowance,
    sink: &mut Sink<'_>,
) -> Result<BatchOutcome, String> {
    if header.magic != 2 {
        return Err(format!("unsupported magic {}", header.magic));
    }
    header.check_offsets()?;
    let count = usize::try_from(header.record_count)
        .map_err(|_| format!("negative record count {}", header.record_count))?;
    let body = batch
        .get(21..)
        .ok_or_else(|| "batch shorter than its header".to_string())?;
    let crc = crc32c::crc32c(body);
    if crc != header.crc {
        return Err(format!(
            "CRC mismatch: the batch says {:#010x}, its bytes give {crc:#010x}",
            header.crc
        ));
    }
    let compression = match header.attributes & ATTR_COMPRESSION {
        0 => Compression::None,
        1 => Compression::Gzip,
        2 => Compression::Snappy,
        3 => Compression::Lz4,
        4 => Compression::Zstd,
        other => return Err(format!("unknown compression codec {other}")),
    };
    let compressed = compression != Compression::None;
    // Charged on a copy, committed only when the whole batch was decoded: a batch that stops
    // or fails costs its response nothing.
    let mut left = allowance.clone();
    if compressed && count > left.records_left {
        // Refused before any decompression work; checked again below for every codec.
        return over_budget(allowance, "records", count);
    }
    let section = if compressed {
        let raw = batch.get(HEADER_LEN..).unwrap_or_default();
        match compression::decompress(raw, compression, left.bytes_left) {
            Ok(out) => {
                left.bytes_left -= out.len().min(left.bytes_left);
                Bytes::from(out)
            }
            Err(DecompressError::OverLimit { .. }) => {
                return over_budget(allowance, "decompressed bytes", 0);
            }
            Err(DecompressError::Corrupt(reason)) => return Err(reason),
        }
    } else {
        batch.slice(HEADER_LEN.min(batch.len())..)
    };
    if count > section.len() / MIN_RECORD_LEN {
        return Err(format!(
            "{count} records cannot fit in {} bytes",
            section.len()
        ));
    }
    if !left.take_items(count) {
        return over_budget(allowance, "records", count);
    }
    let start = sink.out.len();
    match read_records(header, count, &section, sink, &mut left) {
        Ok(()) => {
            *allowance = left;
            Ok(BatchOutcome::Decoded)
        }
        Err(stop) => {
            sink.out.truncate(start);
            match stop {
                ReadStop::OverBudget { what, n } => over_budget(allowance, what, n),
                ReadStop::Corrupt(reason) => Err(reason),
            }
        }
    }
}

/// Why reading a batch's records ended early.
enum ReadStop {
    /// The bytes break the format: the batch is corrupt.
    Corrupt(String),
    /// What the batch declares (`n` of `what`) exceeds what is left of the response's budget.
    OverBudget { what: &'static str, n: usize },
}

impl From<String> for ReadStop {
    fn from(reason: String) -> Self {
        ReadStop::Corrupt(reason)
    }
}

/// A batch that does not fit: an error when nothing else was decoded (it never will fit), a
/// stop at this batch boundary otherwise.
fn over_budget(allowance: &Allowance, what: &str, n: usize) -> Result<BatchOutcome, String> {
    if allowance.untouched() {
        let b = allowance.budget;
        return Err(format!(
            "batch exceeds the whole per-response decode budget ({what}{}; budget {} bytes, {} records)",
            if n > 0 { format!(": {n}") } else { String::new() },
            b.max_decompressed_bytes,
            b.max_decompressed_records
        ));
    }
    Ok(BatchOutcome::OverBudget)
}

/// Reads `count` records (already charged) from the record section, appending those at or after
/// the fetch offset, and charges every record's headers to `left` before allocating them.
fn read_records(
    header: &BatchHeader,
    count: usize,
    section: &Bytes,
    sink: &mut Sink<'_>,
    left: &mut Allowance,
) -> Result<(), ReadStop> {
    let log_append = header.attributes & ATTR_LOG_APPEND_TIME != 0;
    let timestamp_type = if log_append {
        TimestampType::LogAppendTime
    } else {
        TimestampType::CreateTime
    };
    let last_offset = header.last_offset();
    let mut cur = Cursor {
        buf: section,
        pos: 0,
    };
    let mut previous: Option<i64> = None;
    // Bounded by the bytes: `count` was checked against the section length.
    sink.out.reserve(count);
    for _ in 0..count {
        let len = cur.varint("record length")?;
        let len = usize::try_from(len).map_err(|_| format!("negative record length {len}"))?;
        let end = cur
            .pos
            .checked_add(len)
            .filter(|&e| e <= section.len())
            .ok_or_else(|| format!("record of {len} bytes overruns the batch"))?;
        let mut rec = Cursor {
            buf: section.get(..end).unwrap_or_default(),
            pos: cur.pos,
        };
        rec.take(1, "attributes")?;
        let timestamp_delta = rec.varlong("timestamp delta")?;
        let offset_delta = rec.varint("offset delta")?;
        let offset = header
            .base_offset
            .checked_add(i64::from(offset_delta))
            .filter(|&o| o >= header.base_offset && o <= last_offset)
            .ok_or_else(|| {
                format!(
                    "offset delta {offset_delta} is outside the batch's range {}..={last_offset}",
                    header.base_offset
                )
            })?;
        if previous.is_some_and(|p| offset <= p) {
            return Err(format!("record offset {offset} does not increase").into());
        }
        previous = Some(offset);
        let timestamp = if log_append {
            header.max_timestamp
        } else {
            header
                .first_timestamp
                .checked_add(timestamp_delta)
                .ok_or_else(|| {
                    format!(
                        "timestamp {} + delta {timestamp_delta} overflows",
                        header.first_timestamp
                    )
                })?
        };
        let key = rec.nullable_bytes(section, "key")?;
        let value = rec.nullable_bytes(section, "value")?;
        let header_count = rec.varint("header count")?;
        let header_count = usize::try_from(header_count)
            .map_err(|_| format!("negative header count {header_count}"))?;
        if header_count > (end - rec.pos) / MIN_HEADER_LEN {
            return Err(format!(
                "{header_count} headers cannot fit in the {} bytes left of the record",
                end - rec.pos
            )
            .into());
        }
        if !left.take_items(header_count) {
            return Err(ReadStop::OverBudget {
                what: "record headers",
                n: header_count,
            });
        }
        let mut headers = Vec::with_capacity(header_count);
        for _ in 0..header_count {
            let key_len = rec.varint("header key length")?;
            let key_len = usize::try_from(key_len)
                .map_err(|_| format!("negative header key length {key_len}"))?;
            let range = rec.take(key_len, "header key")?;
            let name = std::str::from_utf8(section.get(range).unwrap_or_default())
                .map_err(|_| "header key is not UTF-8".to_string())?;
            // The key is copied out of the section (the record's API owns a String): charged
            // first, as the section itself is not when the batch is uncompressed.
            if !left.take_bytes(key_len) {
                return Err(ReadStop::OverBudget {
                    what: "header key bytes",
                    n: key_len,
                });
            }
            let name = name.to_string();
            let value = rec.nullable_bytes(section, "header value")?;
            headers.push((name, value));
        }
        if rec.pos != end {
            return Err(format!(
                "record at offset {offset} declares {len} bytes but its fields take {}",
                len - (end - rec.pos)
            )
            .into());
        }
        cur.pos = end;
        if offset >= sink.fetch_offset {
            sink.out.push(Record {
                topic: Arc::clone(sink.topic),
                partition: sink.partition,
                offset,
                timestamp,
                timestamp_type,
                key,
                value,
                headers,
            });
        }
    }
    if cur.pos != section.len() {
        return Err(format!(
            "{} bytes after the batch's {count} records",
            section.len() - cur.pos
        )
        .into());
    }
    Ok(())
}

/// A position in a record section.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize, what: &str) -> Result<std::ops::Range<usize>, String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| format!("{what} of {n} bytes overruns the record"))?;
        let range = self.pos..end;
        self.pos = end;
        Ok(range)
    }

    /// An unsigned LEB128 of at most `max_bytes` bytes.
    #[inline(never)]
    fn leb128(&mut self, max_bytes: usize, what: &str) -> Result<u64, String> {
        let mut value: u64 = 0;
        for i in 0..max_bytes {
            let b = *self
                .buf
                .get(self.pos)
                .ok_or_else(|| format!("{what} is truncated"))?;
            self.pos += 1;
            value |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(format!("{what} is longer than {max_bytes} bytes"))
    }

    /// A LEB128 of one or two bytes, the common case, read without the general loop: a record
    /// carries seven varints (its length, deltas, key and value lengths, header count), nearly
    /// all that short, and the loop was an eighth of the whole consumer's instructions. `None`
    /// when it is longer (or truncated): the caller reads it with [`Self::leb128`].
    #[inline]
    fn short_leb128(&mut self) -> Option<u64> {
        match *self.buf.get(self.pos..)? {
            [low, ..] if low < 0x80 => {
                self.pos += 1;
                Some(u64::from(low))
            }
            [low, high, ..] if high < 0x80 => {
                self.pos += 2;
                Some(u64::from(low & 0x7f) | (u64::from(high) << 7))
            }
            _ => None,
        }
    }

    /// A zig-zag varint (at most 5 bytes, 32 bits). Inlined always: called seven times per
    /// record, the call cost more than a short varint's decoding.
    #[inline(always)]
    fn varint(&mut self, what: &str) -> Result<i32, String> {
        let raw = match self.short_leb128() {
            Some(raw) => raw,
            None => self.leb128(5, what)?,
        };
        let raw = u32::try_from(raw).map_err(|_| format!("{what} does not fit in 32 bits"))?;
        Ok((raw >> 1) as i32 ^ -((raw & 1) as i32))
    }

    /// A zig-zag varlong (at most 10 bytes, 64 bits).
    #[inline]
    fn varlong(&mut self, what: &str) -> Result<i64, String> {
        let raw = match self.short_leb128() {
            Some(raw) => raw,
            None => self.leb128(10, what)?,
        };
        Ok((raw >> 1) as i64 ^ -((raw & 1) as i64))
    }

    /// A varint length (-1 for null) and that many bytes, shared with `section`.
    fn nullable_bytes(&mut self, section: &Bytes, what: &str) -> Result<Option<Bytes>, String> {
        let len = self.varint(what)?;
        match len {
            -1 => Ok(None),
            n if n < -1 => Err(format!("negative {what} length {n}")),
            n => {
                let range = self.take(n as usize, what)?;
                Ok(Some(section.slice(range)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_are_bounded_in_length_and_width() {
        let mut c = Cursor {
            buf: &[0x01],
            pos: 0,
        };
        assert_eq!(c.varint("x"), Ok(-1));
        let mut c = Cursor {
            buf: &[0x96, 0x01],
            pos: 0,
        };
        assert_eq!(c.varint("x"), Ok(75));
        // One, two and three bytes, and a truncated two-byte varint, against the general loop.
        for value in [
            0i32,
            -1,
            63,
            -64,
            64,
            8191,
            -8192,
            8192,
            1 << 20,
            i32::MAX,
            i32::MIN,
        ] {
            let zigzag = ((value << 1) ^ (value >> 31)) as u32;
            let mut bytes = Vec::new();
            let mut rest = zigzag;
            while rest >= 0x80 {
                bytes.push((rest as u8) | 0x80);
                rest >>= 7;
            }
            bytes.push(rest as u8);
            bytes.push(0x55); // what follows must stay unread
            let mut c = Cursor {
                buf: &bytes,
                pos: 0,
            };
            assert_eq!(c.varint("x"), Ok(value), "{value}");
            assert_eq!(c.pos, bytes.len() - 1, "{value}");
            // A 32-bit value's zig-zag is the same in 64 bits.
            let mut c = Cursor {
                buf: &bytes,
                pos: 0,
            };
            assert_eq!(c.varlong("x"), Ok(i64::from(value)), "{value}");
            assert_eq!(c.pos, bytes.len() - 1, "{value}");
        }
        let mut c = Cursor {
            buf: &[0x96],
            pos: 0,
        };
        assert!(
            c.varint("x").is_err(),
            "a continuation byte at the end is truncated"
        );
        let mut c = Cursor {
            buf: &[0xff, 0xff, 0xff, 0xff, 0x7f],
            pos: 0,
        };
        assert!(c.varint("x").is_err(), "35 bits do not fit a varint");
        let mut c = Cursor {
            buf: &[0xff; 11],
            pos: 0,
        };
        assert!(c.varlong("x").is_err());
        let mut c = Cursor {
            buf: &[0x80, 0x80],
            pos: 0,
        };
        assert!(c.varlong("x").is_err());
    }

    #[test]
    fn offset_range_must_leave_a_next_offset() {
        let mut h = BatchHeader {
            base_offset: i64::MAX - 3,
            magic: 2,
            crc: 0,
            attributes: 0,
            last_offset_delta: 3,
            first_timestamp: 0,
            max_timestamp: 0,
            producer_id: -1,
            record_count: 1,
        };
        assert!(h.check_offsets().is_err());
        h.last_offset_delta = 2;
        assert!(h.check_offsets().is_ok());
        h.last_offset_delta = -1;
        assert!(h.check_offsets().is_err());
        h.base_offset = -5;
        h.last_offset_delta = 0;
        assert!(h.check_offsets().is_err());
    }
}
