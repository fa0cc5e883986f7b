//! Writing record batches (format v2) for Produce: records are appended one by one into an open
//! batch as they are sent, and the batch is stamped (producer id, epoch, base sequence), compressed
//! and checksummed when it goes on the wire.
//!
//! Why our own encoder rather than `kafka-protocol`'s: a producer appends each record once, into
//! bytes that stay where they are until the batch is acknowledged; the codec crate's encoder takes
//! a slice of owned records and allocates a record struct, a header map and a key copy per record.
//! Keeping the record section as bytes also lets a retry after an epoch bump re-stamp the same
//! batch with a new sequence without touching its records (the header and the CRC change, the
//! compressed section does not).

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::records::Compression;

use super::batch::{HEADER_LEN, LOG_OVERHEAD};
use super::ProduceRecord;
use crate::wire::compression;

/// No producer id: a batch written without idempotence.
pub(crate) const NO_PRODUCER_ID: i64 = -1;
/// No producer epoch.
pub(crate) const NO_PRODUCER_EPOCH: i16 = -1;
/// No sequence.
pub(crate) const NO_SEQUENCE: i32 = -1;

/// Who wrote a batch, as its header says: what the leader deduplicates retries by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ProducerStamp {
    /// The producer id from InitProducerId, or [`NO_PRODUCER_ID`].
    pub(crate) producer_id: i64,
    /// Its epoch, or [`NO_PRODUCER_EPOCH`].
    pub(crate) epoch: i16,
    /// The sequence of the batch's first record in its partition, or [`NO_SEQUENCE`].
    pub(crate) base_sequence: i32,
    /// Written inside a transaction.
    pub(crate) transactional: bool,
}

impl ProducerStamp {
    /// A batch of no producer in particular (not idempotent).
    pub(crate) const NONE: ProducerStamp = ProducerStamp {
        producer_id: NO_PRODUCER_ID,
        epoch: NO_PRODUCER_EPOCH,
        base_sequence: NO_SEQUENCE,
        transactional: false,
    };
}

/// How a batch's records are compressed: the codec and its level (`None`: the codec's default).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Codec {
    /// The codec.
    pub(crate) compression: Compression,
    /// Its level, where the codec has levels.
    pub(crate) level: Option<i32>,
}

impl Codec {
    /// No compression.
    pub(crate) const NONE: Codec = Codec {
        compression: Compression::None,
        level: None,
    };
}

/// Bytes a record costs in a batch at most beyond its key, value and headers: the length,
/// attributes, timestamp delta, offset delta and the key, value and header-count varints.
pub(crate) const RECORD_OVERHEAD: usize = 5 + 1 + 10 + 5 + 5 + 5 + 5;

/// What a record will cost in a batch at most (for the buffer's accounting and `batch.size`).
pub(crate) fn record_size_bound(record: &ProduceRecord) -> usize {
    let field = |b: &Option<Bytes>| b.as_ref().map_or(0, Bytes::len);
    let headers: usize = record
        .headers
        .iter()
        .map(|(k, v)| 10 + k.len() + field(v))
        .sum();
    RECORD_OVERHEAD + field(&record.key) + field(&record.value) + headers
}

/// A batch being filled: the encoded records and what the header will say of them.
#[derive(Debug)]
pub(crate) struct OpenBatch {
    records: BytesMut,
    count: i32,
    first_timestamp: i64,
    max_timestamp: i64,
}

impl OpenBatch {
    /// An empty batch with room reserved for `capacity` bytes of records.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        OpenBatch {
            records: BytesMut::with_capacity(capacity),
            count: 0,
            first_timestamp: 0,
            max_timestamp: 0,
        }
    }

    /// Records appended so far.
    pub(crate) fn count(&self) -> i32 {
        self.count
    }

    /// Bytes of encoded records so far (the batch is this plus [`HEADER_LEN`] uncompressed).
    pub(crate) fn records_len(&self) -> usize {
        self.records.len()
    }

    /// Appends `record` with `timestamp` (ms since the epoch) as the next offset delta.
    pub(crate) fn append(&mut self, record: &ProduceRecord, timestamp: i64) {
        if self.count == 0 {
            self.first_timestamp = timestamp;
            self.max_timestamp = timestamp;
        }
        self.max_timestamp = self.max_timestamp.max(timestamp);
        let timestamp_delta = timestamp.wrapping_sub(self.first_timestamp);
        let mut body = [0u8; 32];
        let mut head = Cursor::new(&mut body);
        head.put_u8(0); // attributes: unused in v2 records
        head.varint(timestamp_delta);
        head.varint(i64::from(self.count));
        let head_len = head.len;
        let key_len = record.key.as_ref().map_or(-1, |k| k.len() as i64);
        let value_len = record.value.as_ref().map_or(-1, |v| v.len() as i64);
        let mut length = head_len as i64
            + varint_len(key_len)
            + key_len.max(0)
            + varint_len(value_len)
            + value_len.max(0)
            + varint_len(record.headers.len() as i64);
        for (k, v) in &record.headers {
            let v_len = v.as_ref().map_or(-1, |v| v.len() as i64);
            length +=
                varint_len(k.len() as i64) + k.len() as i64 + varint_len(v_len) + v_len.max(0);
        }
        put_varint(&mut self.records, length);
        self.records.put_slice(&body[..head_len]);
        put_nullable(&mut self.records, record.key.as_deref());
        put_nullable(&mut self.records, record.value.as_deref());
        put_varint(&mut self.records, record.headers.len() as i64);
        for (k, v) in &record.headers {
            put_nullable(&mut self.records, Some(k.as_bytes()));
            put_nullable(&mut self.records, v.as_deref());
        }
        self.count += 1;
    }

    /// Closes the batch: its records compressed with `codec` once, ready to be stamped.
    pub(crate) fn seal(self, codec: Codec) -> Result<SealedBatch, String> {
        let section = match codec.compression {
            Compression::None => self.records.freeze(),
            c => Bytes::from(compression::compress_at(&self.records, c, codec.level)?),
        };
        Ok(SealedBatch {
            section,
            codec: codec.compression,
            count: self.count,
            first_timestamp: self.first_timestamp,
            max_timestamp: self.max_timestamp,
        })
    }
}

/// A closed batch: its record section (compressed) and what its header says of it. Stamped
/// into wire bytes by [`SealedBatch::stamp`] for each attempt.
#[derive(Clone, Debug)]
pub(crate) struct SealedBatch {
    section: Bytes,
    codec: Compression,
    count: i32,
    first_timestamp: i64,
    max_timestamp: i64,
}

impl SealedBatch {
    /// Records in the batch.
    pub(crate) fn count(&self) -> i32 {
        self.count
    }

    /// Bytes the batch takes on the wire.
    pub(crate) fn wire_len(&self) -> usize {
        LOG_OVERHEAD + HEADER_LEN - LOG_OVERHEAD + self.section.len()
    }

    /// The batch's bytes with `stamp` in its header: base offset 0 (the leader assigns offsets),
    /// the CRC-32C over everything from the attributes on.
    pub(crate) fn stamp(&self, stamp: ProducerStamp) -> Bytes {
        let mut out = BytesMut::with_capacity(HEADER_LEN + self.section.len());
        let batch_length = (HEADER_LEN - LOG_OVERHEAD + self.section.len()) as i32;
        out.put_i64(0); // base offset
        out.put_i32(batch_length);
        out.put_i32(-1); // partition leader epoch: the broker sets it
        out.put_i8(2); // magic
        out.put_u32(0); // CRC, patched below
        let crc_from = out.len();
        let mut attributes = codec_bits(self.codec);
        if stamp.transactional {
            attributes |= 1 << 4;
        }
        out.put_i16(attributes);
        out.put_i32(self.count.saturating_sub(1)); // last offset delta
        out.put_i64(self.first_timestamp);
        out.put_i64(self.max_timestamp);
        out.put_i64(stamp.producer_id);
        out.put_i16(stamp.epoch);
        out.put_i32(stamp.base_sequence);
        out.put_i32(self.count);
        out.put_slice(&self.section);
        let crc = crc32c::crc32c(&out[crc_from..]);
        out[crc_from - 4..crc_from].copy_from_slice(&crc.to_be_bytes());
        out.freeze()
    }
}

/// The codec's bits in a batch's attributes.
fn codec_bits(codec: Compression) -> i16 {
    match codec {
        Compression::None => 0,
        Compression::Gzip => 1,
        Compression::Snappy => 2,
        Compression::Lz4 => 3,
        Compression::Zstd => 4,
    }
}

/// Writes `b` as a varint length and its bytes (`None`: length -1).
fn put_nullable(out: &mut BytesMut, b: Option<&[u8]>) {
    match b {
        None => put_varint(out, -1),
        Some(b) => {
            put_varint(out, b.len() as i64);
            out.put_slice(b);
        }
    }
}

/// Zig-zag varint, as the record format writes lengths and deltas.
fn put_varint(out: &mut BytesMut, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.put_u8((z as u8) | 0x80);
        z >>= 7;
    }
    out.put_u8(z as u8);
}

/// Bytes [`put_varint`] writes for `v`.
fn varint_len(v: i64) -> i64 {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    let mut n = 1;
    while z >= 0x80 {
        z >>= 7;
        n += 1;
    }
    n
}

/// A few bytes written on the stack (a record's fixed fields before its length is known).
struct Cursor<'a> {
    buf: &'a mut [u8; 32],
    len: usize,
}

impl<'a> Cursor<'a> {
    fn new(buf: &'a mut [u8; 32]) -> Self {
        Cursor { buf, len: 0 }
    }

    fn put_u8(&mut self, b: u8) {
        self.buf[self.len] = b;
        self.len += 1;
    }

    fn varint(&mut self, v: i64) {
        let mut z = ((v << 1) ^ (v >> 63)) as u64;
        while z >= 0x80 {
            self.put_u8((z as u8) | 0x80);
            z >>= 7;
        }
        self.put_u8(z as u8);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::records::{decode_partition, Allowance, DecodeBudget, PartitionInput};
    use std::sync::Arc;

    fn record(key: Option<&str>, value: &str, headers: &[(&str, Option<&str>)]) -> ProduceRecord {
        ProduceRecord {
            key: key.map(|k| Bytes::copy_from_slice(k.as_bytes())),
            value: Some(Bytes::copy_from_slice(value.as_bytes())),
            headers: headers
                .iter()
                .map(|(k, v)| {
                    (
                        k.to_string(),
                        v.map(|v| Bytes::copy_from_slice(v.as_bytes())),
                    )
                })
                .collect(),
            timestamp: None,
        }
    }

    /// What we write, our bounded decoder reads back (CRC, deltas, headers in order, null key),
    /// for every codec this build has.
    #[test]
    fn every_codec_reads_back_what_it_wrote() {
        let codecs = [
            Compression::None,
            #[cfg(feature = "gzip")]
            Compression::Gzip,
            #[cfg(feature = "snappy")]
            Compression::Snappy,
            #[cfg(feature = "lz4")]
            Compression::Lz4,
            #[cfg(feature = "zstd")]
            Compression::Zstd,
        ];
        for compression in codecs {
            let mut open = OpenBatch::with_capacity(64);
            let records = [
                record(
                    Some("acct-17"),
                    "fill 1",
                    &[("trace", Some("a")), ("trace", None)],
                ),
                record(None, "fill 2", &[]),
                record(Some(""), &"x".repeat(300), &[]),
            ];
            for (i, r) in records.iter().enumerate() {
                open.append(r, 1_700_000_000_000 + i as i64 * 7);
            }
            let sealed = open
                .seal(Codec {
                    compression,
                    level: None,
                })
                .expect("seal");
            let stamp = ProducerStamp {
                producer_id: 42,
                epoch: 3,
                base_sequence: 10,
                transactional: false,
            };
            let bytes = sealed.stamp(stamp);
            assert_eq!(bytes.len(), sealed.wire_len(), "{compression:?}");
            let topic: Arc<str> = Arc::from("t");
            let mut out = Vec::new();
            decode_partition(
                &PartitionInput {
                    topic: &topic,
                    partition: 0,
                    fetch_offset: 0,
                    aborted: None,
                },
                &bytes,
                &mut out,
                &mut Allowance::new(DecodeBudget::default()),
            )
            .expect("decodes");
            assert_eq!(out.len(), 3, "{compression:?}");
            assert_eq!(out[0].key.as_deref(), Some(&b"acct-17"[..]));
            assert_eq!(out[0].headers.len(), 2);
            assert_eq!(out[0].headers[1].1, None);
            assert_eq!(out[1].key, None);
            assert_eq!(out[1].offset, 1);
            assert_eq!(out[2].timestamp, 1_700_000_000_014);
            assert_eq!(out[2].value.as_ref().map(Bytes::len), Some(300));
        }
    }

    /// The header carries the stamp where Kafka reads it, and a re-stamp changes the CRC.
    #[test]
    fn the_stamp_lands_in_the_header() {
        let mut open = OpenBatch::with_capacity(16);
        open.append(&record(None, "v", &[]), 5);
        let sealed = open.seal(Codec::NONE).expect("seal");
        let a = sealed.stamp(ProducerStamp {
            producer_id: 7,
            epoch: 1,
            base_sequence: 99,
            transactional: true,
        });
        assert_eq!(&a[43..51], &7i64.to_be_bytes());
        assert_eq!(&a[51..53], &1i16.to_be_bytes());
        assert_eq!(&a[53..57], &99i32.to_be_bytes());
        assert_eq!(i16::from_be_bytes([a[21], a[22]]) & (1 << 4), 1 << 4);
        let b = sealed.stamp(ProducerStamp::NONE);
        assert_ne!(a[17..21], b[17..21], "the CRC covers the stamp");
    }

    /// The bound the buffer charges is never below what a record really takes.
    #[test]
    fn the_size_bound_covers_the_record() {
        let r = record(Some("k"), &"v".repeat(1000), &[("h", Some("x"))]);
        let mut open = OpenBatch::with_capacity(16);
        open.append(&r, 0);
        assert!(open.records_len() <= record_size_bound(&r));
    }
}
