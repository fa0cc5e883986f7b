//! Writes record batches (format v2) byte by byte, including ones no producer would write: a
//! header count or offset delta of the test's choosing, a record count that lies. The fuzz seeds
//! and the hostile-input tests build their batches with it; it shares no code with the decoder,
//! so a bug in one is not mirrored in the other.

use kafka_protocol::records::Compression;

use crate::wire::compression;

/// One record's fields, as they are laid out on the wire.
#[derive(Clone, Debug, Default)]
pub struct RawRecord {
    /// Added to the batch's base offset.
    pub offset_delta: i32,
    /// Added to the batch's first timestamp.
    pub timestamp_delta: i64,
    /// `None` writes length -1.
    pub key: Option<Vec<u8>>,
    /// `None` writes length -1.
    pub value: Option<Vec<u8>>,
    /// Header keys and values.
    pub headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

/// A batch header's fields.
#[derive(Clone, Debug)]
pub struct RawBatch {
    /// Offset of the first record.
    pub base_offset: i64,
    /// Codec in the low 3 bits, then timestamp type (8), transactional (16), control (32).
    pub attributes: i16,
    /// Offset of the last record minus the base offset.
    pub last_offset_delta: i32,
    /// Timestamp the records' deltas are relative to.
    pub first_timestamp: i64,
    /// Largest timestamp (the log-append time when that type is set).
    pub max_timestamp: i64,
    /// -1 for a non-idempotent producer.
    pub producer_id: i64,
    /// Record count written in the header (may disagree with the records, on purpose).
    pub record_count: i32,
}

impl RawBatch {
    /// A plain batch of `count` records at `base_offset`, with the codec's attribute bits.
    pub fn plain(base_offset: i64, count: i32, codec: Compression) -> Self {
        RawBatch {
            base_offset,
            attributes: codec_bits(codec),
            last_offset_delta: count.saturating_sub(1).max(0),
            first_timestamp: 1_000,
            max_timestamp: 1_000 + i64::from(count),
            producer_id: -1,
            record_count: count,
        }
    }
}

/// The attribute bits of a codec.
pub(crate) fn codec_bits(codec: Compression) -> i16 {
    match codec {
        Compression::None => 0,
        Compression::Gzip => 1,
        Compression::Snappy => 2,
        Compression::Lz4 => 3,
        Compression::Zstd => 4,
    }
}

/// Appends a zig-zag varint.
pub fn put_varint(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

fn put_nullable(out: &mut Vec<u8>, b: &Option<Vec<u8>>) {
    match b {
        None => put_varint(out, -1),
        Some(b) => {
            put_varint(out, b.len() as i64);
            out.extend_from_slice(b);
        }
    }
}

/// One record, length prefix included.
pub(crate) fn record_bytes(r: &RawRecord) -> Vec<u8> {
    let mut body = vec![0u8]; // attributes
    put_varint(&mut body, r.timestamp_delta);
    put_varint(&mut body, i64::from(r.offset_delta));
    put_nullable(&mut body, &r.key);
    put_nullable(&mut body, &r.value);
    put_varint(&mut body, r.headers.len() as i64);
    for (k, v) in &r.headers {
        put_varint(&mut body, k.len() as i64);
        body.extend_from_slice(k);
        put_nullable(&mut body, v);
    }
    let mut out = Vec::with_capacity(body.len() + 5);
    put_varint(&mut out, body.len() as i64);
    out.extend_from_slice(&body);
    out
}

/// A whole batch around an (uncompressed) record section: compressed with the codec its
/// attributes name, length and CRC-32C filled in.
pub fn batch_bytes(h: &RawBatch, section: &[u8]) -> Vec<u8> {
    let codec = match h.attributes & 7 {
        1 => Compression::Gzip,
        2 => Compression::Snappy,
        3 => Compression::Lz4,
        4 => Compression::Zstd,
        _ => Compression::None,
    };
    let payload = compression::compress(section, codec).unwrap_or_else(|_| section.to_vec());
    let mut b = Vec::with_capacity(61 + payload.len());
    b.extend_from_slice(&h.base_offset.to_be_bytes());
    b.extend_from_slice(&[0; 4]); // batch length, below
    b.extend_from_slice(&0i32.to_be_bytes()); // partition leader epoch
    b.push(2); // magic
    b.extend_from_slice(&[0; 4]); // CRC, below
    b.extend_from_slice(&h.attributes.to_be_bytes());
    b.extend_from_slice(&h.last_offset_delta.to_be_bytes());
    b.extend_from_slice(&h.first_timestamp.to_be_bytes());
    b.extend_from_slice(&h.max_timestamp.to_be_bytes());
    b.extend_from_slice(&h.producer_id.to_be_bytes());
    b.extend_from_slice(&0i16.to_be_bytes()); // producer epoch
    b.extend_from_slice(&(-1i32).to_be_bytes()); // base sequence
    b.extend_from_slice(&h.record_count.to_be_bytes());
    b.extend_from_slice(&payload);
    let len = (b.len() - 12) as i32;
    b[8..12].copy_from_slice(&len.to_be_bytes());
    fix_crcs(&mut b);
    b
}

/// A batch of `records` (offset deltas as given).
pub fn batch_of(h: &RawBatch, records: &[RawRecord]) -> Vec<u8> {
    let section: Vec<u8> = records.iter().flat_map(record_bytes).collect();
    batch_bytes(h, &section)
}

/// Rewrites the CRC of every complete batch in `data`, so that a mutated input gets past the
/// checksum and reaches the decoder behind it.
pub fn fix_crcs(data: &mut [u8]) {
    let mut pos = 0usize;
    while let Some(rest) = data.get_mut(pos..) {
        let Some(len) = rest.get(8..12) else { break };
        let len = i32::from_be_bytes([len[0], len[1], len[2], len[3]]);
        let Ok(len) = usize::try_from(len) else { break };
        let total = 12 + len;
        if total < 61 || total > rest.len() {
            break;
        }
        let crc = crc32c::crc32c(&rest[21..total]);
        rest[17..21].copy_from_slice(&crc.to_be_bytes());
        pos += total;
    }
}
