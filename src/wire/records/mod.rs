//! Record batches (format v2) to owned records, and records to a batch for Produce.
//!
//! One batch is read by `batch`, our own bounded decoder (CRC, varints,
//! headers, checked offsets); this module adds what a consumer needs around it: splitting a
//! partition's bytes into batches, tolerating the partial batch a broker may leave at the end of
//! a response, skipping control batches and aborted transactions (read_committed), dropping
//! records before the fetch offset when a fetch starts inside a batch, charging what decoding
//! allocates to the response's [`DecodeBudget`], and turning every failure into an error that
//! names the partition and offset. Nothing here panics or allocates without bound on network data.
//! Encoding (for Produce) is `encode`: the producer's batches, appended record by record and
//! stamped per attempt.

mod batch;
pub(crate) mod encode;

use std::collections::HashSet;
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::records::TimestampType as KpTimestampType;
use log::{debug, trace};

use super::error::{Result, WireError};
pub use batch::{Allowance, DecodeBudget};
use batch::{BatchHeader, BatchOutcome, Sink, HEADER_LEN, LOG_OVERHEAD};

/// What a record's timestamp means (the topic's `message.timestamp.type`).
///
/// Our own type rather than `kafka-protocol`'s, so that the codec crate stays out of the public
/// API of this crate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TimestampType {
    /// Set by the producer when the record was created.
    CreateTime,
    /// Set by the broker when the record was appended to the log.
    LogAppendTime,
}

impl From<KpTimestampType> for TimestampType {
    fn from(t: KpTimestampType) -> Self {
        match t {
            KpTimestampType::Creation => TimestampType::CreateTime,
            KpTimestampType::LogAppend => TimestampType::LogAppendTime,
        }
    }
}

/// Derives the idempotency key of a record (an order id, an event id), or `None` when the record
/// has none: the consumer and the share consumer both take one, so that a redelivered record
/// whose key this member already applied is not applied again. Never derive it from the Kafka
/// record key alone unless that key identifies the event: many distinct events share an entity
/// key, and they would be refused as duplicates.
pub type KeyFn = Box<dyn Fn(&Record) -> Option<crate::guard::IdempotencyKey> + Send>;

/// One record fetched from Kafka, owning everything it needs.
///
/// Key, value and header values are `Bytes` that share the response (or decompressed) buffer, so
/// decoding does not copy payloads; the topic is an `Arc<str>` shared by all records of a topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Topic name.
    pub topic: Arc<str>,
    /// Partition index.
    pub partition: i32,
    /// The record's offset in its partition.
    pub offset: i64,
    /// Milliseconds since the epoch (creation or log-append time, see `timestamp_type`).
    pub timestamp: i64,
    /// Whether `timestamp` was set by the producer or by the broker.
    pub timestamp_type: TimestampType,
    /// Record key, `None` when the producer sent a null key.
    pub key: Option<Bytes>,
    /// Record value, `None` for a tombstone.
    pub value: Option<Bytes>,
    /// Headers in wire order; a key may repeat, as Kafka allows.
    pub headers: Vec<(String, Option<Bytes>)>,
}

/// A record to produce (tests, examples, the demo). Offsets and timestamps deltas are computed at
/// encoding time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProduceRecord {
    /// Record key.
    pub key: Option<Bytes>,
    /// Record value.
    pub value: Option<Bytes>,
    /// Headers, in order.
    pub headers: Vec<(String, Option<Bytes>)>,
    /// Creation timestamp in ms; `None` means "now".
    pub timestamp: Option<i64>,
}

/// An aborted transaction as listed in a read_committed Fetch response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AbortedTxn {
    /// The producer whose transaction was aborted.
    pub producer_id: i64,
    /// First offset of the aborted transaction in this partition.
    pub first_offset: i64,
}

/// What decoding one partition's bytes produced besides the records themselves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecodeSummary {
    /// The offset after the last complete batch, i.e. where the next fetch must start, even
    /// if every record in the batches was filtered out (control batches, aborted transactions).
    /// `None` when the data held no complete batch.
    pub next_offset: Option<i64>,
    /// Complete batches seen.
    pub batches: usize,
    /// Bytes of a partial batch left at the end (normal when a size limit cut the response).
    pub partial_tail_bytes: usize,
    /// Decoding stopped before a complete batch because the response's [`DecodeBudget`] was
    /// spent; `next_offset` points at that batch (or is `None` when it was the first).
    pub stopped_by_budget: bool,
}

/// Where a partition's records come from and how to filter them.
#[derive(Clone, Debug)]
pub struct PartitionInput<'a> {
    /// Topic (shared into every record).
    pub topic: &'a Arc<str>,
    /// Partition index.
    pub partition: i32,
    /// The offset the fetch asked for; earlier records in the first batch are dropped.
    pub fetch_offset: i64,
    /// `Some` in read_committed mode: the aborted transactions listed by the broker.
    pub aborted: Option<&'a [AbortedTxn]>,
}

/// Decodes the complete batches in `data`, appending the visible records at or after
/// `input.fetch_offset` to `out`, and charging what decoding allocates to `allowance`, the
/// budget of the whole Fetch response this partition came in.
///
/// A partial batch at the end is not an error (brokers cut responses at size limits). When the
/// allowance runs out, decoding stops before the batch that does not fit and
/// [`DecodeSummary::next_offset`] points at it (`stopped_by_budget` is set), so the next fetch
/// starts there and nothing is lost. A complete batch that fails its checks is a
/// [`WireError::CorruptBatch`] naming partition and offset; records already appended from
/// earlier good batches stay in `out`, and the summary up to them is lost, so callers treat the
/// whole partition response as failed.
///
/// Every record returned has an offset at or after the fetch offset, offsets strictly increase,
/// and `next_offset` lies beyond every one of them.
pub fn decode_partition(
    input: &PartitionInput<'_>,
    data: &Bytes,
    out: &mut Vec<Record>,
    allowance: &mut Allowance,
) -> Result<DecodeSummary> {
    let mut decoder = PartitionDecoder::new(input, data.clone());
    while decoder.step(out, allowance)? {}
    Ok(decoder.summary())
}

/// One partition's record set, decoded one batch at a time as its records are wanted.
///
/// Why: a consumer holding a whole fetch decoded holds a 128-byte [`Record`] per record, tens
/// of thousands per partition, beside the response bytes they point into. Decoding the next
/// batch only when the previous one is handed out keeps one decoded batch per partition alive.
/// [`decode_partition`] is this decoder run to the end, so both apply the same checks.
#[derive(Debug)]
pub struct PartitionDecoder {
    topic: Arc<str>,
    partition: i32,
    fetch_offset: i64,
    read_committed: bool,
    data: Bytes,
    pos: usize,
    /// Aborted transactions not reached yet, sorted by descending first offset (popped from
    /// the end as batches reach them).
    aborted_pending: Vec<AbortedTxn>,
    aborted_producers: HashSet<i64>,
    previous_last: Option<i64>,
    summary: DecodeSummary,
    finished: bool,
}

impl PartitionDecoder {
    /// A decoder of `data`, one partition's record set of a Fetch response.
    pub fn new(input: &PartitionInput<'_>, data: Bytes) -> Self {
        let mut aborted_pending: Vec<AbortedTxn> =
            input.aborted.map(<[_]>::to_vec).unwrap_or_default();
        // Consumed in first_offset order; keep it sorted descending so we pop from the end.
        aborted_pending.sort_by_key(|t| std::cmp::Reverse(t.first_offset));
        PartitionDecoder {
            topic: Arc::clone(input.topic),
            partition: input.partition,
            fetch_offset: input.fetch_offset,
            read_committed: input.aborted.is_some(),
            data,
            pos: 0,
            aborted_pending,
            aborted_producers: HashSet::new(),
            previous_last: None,
            summary: DecodeSummary::default(),
            finished: false,
        }
    }

    /// What was decoded so far (all of it once [`PartitionDecoder::is_finished`]).
    pub fn summary(&self) -> DecodeSummary {
        self.summary
    }

    /// True when nothing more comes out: the data is used up, the budget stopped it, or a
    /// batch failed its checks.
    pub fn is_finished(&self) -> bool {
        self.finished || self.pos >= self.data.len()
    }

    /// Where the next fetch of this partition starts, given what was decoded so far: after
    /// the last batch decoded or skipped, never before the fetch offset.
    pub fn next_offset(&self) -> i64 {
        self.summary
            .next_offset
            .unwrap_or(self.fetch_offset)
            .max(self.fetch_offset)
    }

    /// Where the next fetch starts once every complete batch of the data is decoded (what
    /// [`PartitionDecoder::next_offset`] becomes unless decoding stops early), read from the
    /// batch headers alone.
    pub fn end_offset(&self) -> i64 {
        next_offset_after(&self.data, self.fetch_offset)
    }

    /// Record data not decoded yet, in bytes.
    pub fn remaining_bytes(&self) -> usize {
        self.data.len().saturating_sub(self.pos)
    }

    /// Records not decoded yet, as their batch headers count them (control batches, aborted
    /// transactions and records before the fetch offset included, so at most this many come).
    pub fn remaining_records(&self) -> usize {
        if self.finished {
            return 0;
        }
        complete_batches(&self.data, self.pos)
            .map(|batch| be_i32(batch, 57).map_or(0, |n| usize::try_from(n).unwrap_or(0)))
            .fold(0, usize::saturating_add)
    }

    /// Decodes batches until one appends a record to `out` or the decoder finishes, charging
    /// what decoding allocates to `allowance` (the budget of the response the data came in).
    pub fn fill(&mut self, out: &mut Vec<Record>, allowance: &mut Allowance) -> Result<()> {
        let start = out.len();
        while out.len() == start && self.step(out, allowance)? {}
        Ok(())
    }

    /// Decodes (or skips) the next complete batch, appending its visible records at or after
    /// the fetch offset to `out`. Returns false once finished; an error finishes it too.
    pub fn step(&mut self, out: &mut Vec<Record>, allowance: &mut Allowance) -> Result<bool> {
        if self.finished {
            return Ok(false);
        }
        let more = self.step_inner(out, allowance);
        if !matches!(more, Ok(true)) {
            self.finished = true;
        }
        more
    }

    fn step_inner(&mut self, out: &mut Vec<Record>, allowance: &mut Allowance) -> Result<bool> {
        let data = &self.data;
        let pos = self.pos;
        if pos >= data.len() {
            return Ok(false);
        }
        let rest = data.get(pos..).unwrap_or_default();
        let (topic, partition) = (&self.topic, self.partition);
        let corrupt = |offset: i64, reason: String| WireError::CorruptBatch {
            topic: topic.to_string(),
            partition,
            offset,
            reason,
        };
        if rest.len() < LOG_OVERHEAD {
            self.summary.partial_tail_bytes = rest.len();
            return Ok(false);
        }
        let base_offset = i64::from_be_bytes(rest[..8].try_into().unwrap_or_default());
        let batch_len = i32::from_be_bytes(rest[8..12].try_into().unwrap_or_default());
        let batch_len = usize::try_from(batch_len)
            .map_err(|_| corrupt(base_offset, format!("negative batch length {batch_len}")))?;
        let total = LOG_OVERHEAD + batch_len;
        if total > rest.len() {
            self.summary.partial_tail_bytes = rest.len();
            trace!(
                "{}-{}: partial batch at offset {base_offset} ({} of {total} bytes), left for the next fetch",
                self.topic,
                self.partition,
                rest.len()
            );
            return Ok(false);
        }
        if rest.len() > 16 && rest[16] != 2 {
            return Err(corrupt(
                base_offset,
                format!("record batch magic {} is not supported (only v2)", rest[16]),
            ));
        }
        if total < HEADER_LEN {
            return Err(corrupt(
                base_offset,
                format!("batch length {batch_len} is shorter than a v2 batch header"),
            ));
        }
        let header = BatchHeader::parse(rest)
            .ok_or_else(|| corrupt(base_offset, "unreadable batch header".to_string()))?;
        header
            .check_offsets()
            .map_err(|reason| corrupt(base_offset, reason))?;
        if let Some(last) = self
            .previous_last
            .filter(|&last| header.base_offset <= last)
        {
            return Err(corrupt(
                base_offset,
                format!("batch starts at or before the previous batch's last offset {last}"),
            ));
        }
        let batch = data.slice(pos..pos + total);

        if header.last_offset() < self.fetch_offset {
            // Entirely before the requested offset.
            self.consumed(&header, total);
            return Ok(true);
        }

        let mut skip = false;
        if self.read_committed && header.producer_id >= 0 {
            while let Some(t) = self.aborted_pending.last() {
                if t.first_offset > header.last_offset() {
                    break;
                }
                self.aborted_producers.insert(t.producer_id);
                self.aborted_pending.pop();
            }
            if header.is_control() {
                let marker = control_marker(&batch).ok_or_else(|| {
                    corrupt(base_offset, "unreadable transaction marker".to_string())
                })?;
                if marker == CONTROL_ABORT {
                    self.aborted_producers.remove(&header.producer_id);
                }
                self.consumed(&header, total);
                return Ok(true);
            }
            skip =
                header.is_transactional() && self.aborted_producers.contains(&header.producer_id);
        }
        if skip || header.is_control() {
            self.consumed(&header, total);
            return Ok(true);
        }

        let mut sink = Sink {
            topic: &self.topic,
            partition: self.partition,
            fetch_offset: self.fetch_offset,
            out,
        };
        match batch::decode_batch(&header, &batch, allowance, &mut sink)
            .map_err(|reason| corrupt(base_offset, reason))?
        {
            BatchOutcome::Decoded => {
                self.consumed(&header, total);
                Ok(true)
            }
            BatchOutcome::OverBudget => {
                debug!(
                    "{}-{}: fetch decode budget spent; stopping before offset {base_offset}",
                    self.topic, self.partition
                );
                self.summary.stopped_by_budget = true;
                Ok(false)
            }
        }
    }

    /// Moves past a batch that was decoded or deliberately skipped.
    fn consumed(&mut self, header: &BatchHeader, total: usize) {
        self.pos += total;
        self.summary.batches += 1;
        // check_offsets() made sure that last + 1 exists.
        self.summary.next_offset = Some(header.last_offset().saturating_add(1));
        self.previous_last = Some(header.last_offset());
    }
}

const CONTROL_ABORT: i16 = 0;

/// The type of the first control record of a control batch (0 = ABORT, 1 = COMMIT).
///
/// Parsed here rather than by `kafka-protocol` because that would verify the batch CRC, and
/// librdkafka's mock cluster writes transaction markers with a CRC of 0 (librdkafka itself does
/// not check CRCs by default). A marker carries no user data, so skipping the check for it
/// cannot let corrupt records through. Control batches are never compressed.
fn control_marker(batch: &[u8]) -> Option<i16> {
    let mut rest = batch.get(HEADER_LEN..)?;
    let _record_len = read_varint(&mut rest)?;
    rest = rest.get(1..)?; // attributes
    let _timestamp_delta = read_varint(&mut rest)?;
    let _offset_delta = read_varint(&mut rest)?;
    let key_len = read_varint(&mut rest)?;
    if key_len < 4 {
        return None;
    }
    let key = rest.get(..4)?;
    Some(i16::from_be_bytes([*key.get(2)?, *key.get(3)?]))
}

/// A zig-zag varint/varlong as used inside v2 records.
fn read_varint(buf: &mut &[u8]) -> Option<i64> {
    let mut value: u64 = 0;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = buf.split_first()?;
        *buf = rest;
        value |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some((value >> 1) as i64 ^ -((value & 1) as i64));
        }
    }
    None
}

/// Where the fetch after this data must start: past the last complete batch, or `fetch_offset`
/// if there is none. Reads only batch headers (no CRC, no decoding), so a prefetch can be sent
/// before the data is decoded; `decode_partition` computes the same value the thorough way.
pub(crate) fn next_offset_after(data: &[u8], fetch_offset: i64) -> i64 {
    complete_batches(data, 0)
        .filter_map(|batch| Some(be_i64(batch, 0)?.saturating_add(i64::from(be_i32(batch, 23)?))))
        .fold(fetch_offset, |next, last| next.max(last.saturating_add(1)))
}

/// The complete batches of `data` from byte `pos` on, each as its bytes, found by their length
/// fields alone (no CRC, no decoding): the walk both header readers above share. It ends at the
/// first batch that is cut off or whose length is impossible.
fn complete_batches(data: &[u8], mut pos: usize) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        let rest = data.get(pos..)?;
        let total = LOG_OVERHEAD.checked_add(usize::try_from(be_i32(rest, 8)?).ok()?)?;
        if total > rest.len() || total < HEADER_LEN {
            return None;
        }
        pos += total;
        rest.get(..total)
    })
}

/// The big-endian `i32` at `at`, if the bytes reach that far.
fn be_i32(bytes: &[u8], at: usize) -> Option<i32> {
    let field = bytes.get(at..at.checked_add(4)?)?;
    field.try_into().ok().map(i32::from_be_bytes)
}

/// The big-endian `i64` at `at`, if the bytes reach that far.
fn be_i64(bytes: &[u8], at: usize) -> Option<i64> {
    let field = bytes.get(at..at.checked_add(8)?)?;
    field.try_into().ok().map(i64::from_be_bytes)
}

/// Encodes `records` as one uncompressed v2 batch of no producer, starting at relative offset 0
/// (the one-shot [`Client::produce`](crate::wire::Client::produce) of tests and tools; the
/// producer fills its batches record by record with the same encoder).
pub(crate) fn encode_batch(records: &[ProduceRecord], now_ms: i64) -> Result<Bytes> {
    let size: usize = records.iter().map(encode::record_size_bound).sum();
    let mut open = encode::OpenBatch::with_capacity(size);
    for r in records {
        open.append(r, r.timestamp.unwrap_or(now_ms));
    }
    let sealed = open
        .seal(encode::Codec::NONE)
        .map_err(|e| WireError::Protocol(format!("cannot encode record batch: {e}")))?;
    Ok(sealed.stamp(encode::ProducerStamp::NONE))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::records::{
        Compression, Record as KpRecord, RecordBatchEncoder, RecordEncodeOptions,
        NO_PRODUCER_EPOCH, NO_PRODUCER_ID,
    };

    pub(crate) fn kp_record(offset: i64, value: &str) -> KpRecord {
        KpRecord {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            timestamp_type: KpTimestampType::Creation,
            offset,
            // The encoder starts a new batch whenever offset - sequence changes.
            sequence: offset as i32,
            timestamp: 1_000 + offset,
            key: Some(Bytes::from(format!("k{offset}"))),
            value: Some(Bytes::copy_from_slice(value.as_bytes())),
            headers: [("h".into(), Some(Bytes::from_static(b"v")))].into(),
        }
    }

    fn encode(records: &[KpRecord], compression: Compression) -> Bytes {
        let mut buf = BytesMut::new();
        let r = RecordBatchEncoder::encode_with_custom_compression(
            &mut buf,
            records,
            &RecordEncodeOptions {
                version: 2,
                compression,
            },
            Some(
                |raw: &mut BytesMut, out: &mut BytesMut, c: Compression| -> anyhow::Result<()> {
                    out.extend_from_slice(&compress_for_test(raw, c));
                    Ok(())
                },
            ),
        );
        assert!(r.is_ok(), "{r:?}");
        buf.freeze()
    }

    /// Uncompressed batches, one per `(first, last)` offset range (inclusive), back to back,
    /// each record's value its offset in decimal.
    pub(crate) fn batches(ranges: &[(i64, i64)]) -> Bytes {
        let mut data = BytesMut::new();
        for &(first, last) in ranges {
            let records: Vec<KpRecord> = (first..=last)
                .map(|o| kp_record(o, &o.to_string()))
                .collect();
            data.extend_from_slice(&encode(&records, Compression::None));
        }
        data.freeze()
    }

    fn compress_for_test(raw: &[u8], c: Compression) -> Vec<u8> {
        super::super::compression::compress(raw, c).unwrap_or_else(|_| raw.to_vec())
    }

    fn input<'a>(topic: &'a Arc<str>, fetch_offset: i64) -> PartitionInput<'a> {
        PartitionInput {
            topic,
            partition: 3,
            fetch_offset,
            aborted: None,
        }
    }

    fn full() -> Allowance {
        Allowance::new(DecodeBudget::default())
    }

    fn values(records: &[Record]) -> Vec<String> {
        records
            .iter()
            .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
            .collect()
    }

    #[cfg(all(
        feature = "gzip",
        feature = "snappy",
        feature = "lz4",
        feature = "zstd"
    ))]
    #[test]
    fn decodes_every_codec_exactly() {
        let topic: Arc<str> = Arc::from("t");
        for c in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let recs: Vec<KpRecord> = (10..15).map(|o| kp_record(o, &format!("v{o}"))).collect();
            let data = encode(&recs, c);
            let mut out = Vec::new();
            let s = decode_partition(&input(&topic, 10), &data, &mut out, &mut full());
            assert_eq!(s.ok().and_then(|s| s.next_offset), Some(15), "{c:?}");
            assert_eq!(values(&out), ["v10", "v11", "v12", "v13", "v14"], "{c:?}");
            let first = &out[0];
            assert_eq!(first.partition, 3);
            assert_eq!(first.offset, 10);
            assert_eq!(first.timestamp, 1_010);
            assert_eq!(first.key.as_deref(), Some(&b"k10"[..]));
            assert_eq!(
                first.headers,
                vec![("h".to_string(), Some(Bytes::from_static(b"v")))]
            );
        }
    }

    #[test]
    fn the_decoder_hands_out_one_batch_at_a_time_and_ends_where_decode_partition_does() {
        let topic: Arc<str> = Arc::from("t");
        let whole = batches(&[(0, 9), (10, 19), (20, 29), (30, 39)]);
        // The last batch cut short, as a size limit leaves it.
        let data = whole.slice(..whole.len() - 10);
        let mut decoder = PartitionDecoder::new(&input(&topic, 5), data.clone());
        assert_eq!(decoder.end_offset(), 30);
        assert_eq!(
            decoder.remaining_records(),
            30,
            "the partial batch is not counted"
        );
        let mut seen = Vec::new();
        let mut fills = 0;
        while !decoder.is_finished() {
            let mut out = Vec::new();
            assert!(decoder.fill(&mut out, &mut full()).is_ok());
            fills += 1;
            assert!(out.len() <= 10, "one batch per fill, got {}", out.len());
            seen.extend(out.iter().map(|r| r.offset));
        }
        assert_eq!(fills, 4, "three batches, then the partial tail ends it");
        assert_eq!(seen, (5..30).collect::<Vec<_>>());
        assert_eq!(decoder.remaining_records(), 0);
        let mut all = Vec::new();
        let summary = decode_partition(&input(&topic, 5), &data, &mut all, &mut full()).ok();
        assert_eq!(decoder.summary(), summary.unwrap_or_default());
        assert_eq!(decoder.next_offset(), 30);
        assert_eq!(all.len(), seen.len());
    }

    #[test]
    fn the_decoder_stops_at_a_corrupt_batch_after_the_good_ones() {
        let topic: Arc<str> = Arc::from("t");
        let first = batches(&[(0, 9)]);
        let mut data = BytesMut::from(&batches(&[(0, 9), (10, 19), (20, 29)])[..]);
        // A byte of the second batch's records: its CRC no longer matches.
        let at = first.len() + HEADER_LEN + 3;
        data[at] ^= 0xff;
        let mut decoder = PartitionDecoder::new(&input(&topic, 0), data.freeze());
        let mut out = Vec::new();
        assert!(decoder.fill(&mut out, &mut full()).is_ok());
        assert_eq!(out.len(), 10);
        let mut more = Vec::new();
        match decoder.fill(&mut more, &mut full()) {
            Err(WireError::CorruptBatch { offset, .. }) => assert_eq!(offset, 10),
            other => panic!("expected a corrupt batch at 10, got {other:?}"),
        }
        assert!(more.is_empty());
        assert!(decoder.is_finished(), "nothing comes after a corrupt batch");
        assert_eq!(
            decoder.next_offset(),
            10,
            "the next fetch starts at the corrupt batch"
        );
        assert_eq!(decoder.remaining_records(), 0);
    }

    #[test]
    fn fetch_from_middle_of_batch_drops_earlier_records() {
        let topic: Arc<str> = Arc::from("t");
        let recs: Vec<KpRecord> = (0..10).map(|o| kp_record(o, &format!("v{o}"))).collect();
        let data = encode(&recs, Compression::None);
        let mut out = Vec::new();
        let s = decode_partition(&input(&topic, 7), &data, &mut out, &mut full()).ok();
        assert_eq!(values(&out), ["v7", "v8", "v9"]);
        assert_eq!(s.and_then(|s| s.next_offset), Some(10));
    }

    #[test]
    fn batches_before_fetch_offset_are_skipped_but_advance() {
        let topic: Arc<str> = Arc::from("t");
        let a: Vec<KpRecord> = (0..3).map(|o| kp_record(o, "a")).collect();
        let b: Vec<KpRecord> = (3..6).map(|o| kp_record(o, "b")).collect();
        let mut data = BytesMut::new();
        data.extend_from_slice(&encode(&a, Compression::None));
        data.extend_from_slice(&encode(&b, Compression::None));
        let data = data.freeze();
        let mut out = Vec::new();
        let s = decode_partition(&input(&topic, 4), &data, &mut out, &mut full()).ok();
        assert_eq!(out.iter().map(|r| r.offset).collect::<Vec<_>>(), [4, 5]);
        assert_eq!(s.map(|s| s.batches), Some(2));
    }

    #[test]
    fn partial_trailing_batch_is_left_for_next_fetch() {
        let topic: Arc<str> = Arc::from("t");
        let a = encode(&[kp_record(0, "a")], Compression::None);
        let b = encode(&[kp_record(1, "b")], Compression::None);
        let mut data = BytesMut::new();
        data.extend_from_slice(&a);
        data.extend_from_slice(&b[..b.len() - 5]);
        let mut out = Vec::new();
        let s = decode_partition(&input(&topic, 0), &data.freeze(), &mut out, &mut full()).ok();
        assert_eq!(values(&out), ["a"]);
        assert_eq!(
            s.map(|s| (s.next_offset, s.partial_tail_bytes)),
            Some((Some(1), b.len() - 5))
        );
    }

    #[test]
    fn corrupted_batch_names_partition_and_offset() {
        let topic: Arc<str> = Arc::from("orders");
        let data = encode(&[kp_record(42, "x"), kp_record(43, "y")], Compression::None);
        let mut bytes = data.to_vec();
        let last = bytes.len() - 3;
        bytes[last] ^= 0xff; // flip a payload byte: CRC must catch it
        let mut out = Vec::new();
        let r = decode_partition(
            &input(&topic, 42),
            &Bytes::from(bytes),
            &mut out,
            &mut full(),
        );
        match r {
            Err(WireError::CorruptBatch {
                topic,
                partition,
                offset,
                ..
            }) => {
                assert_eq!((topic.as_str(), partition, offset), ("orders", 3, 42));
            }
            other => panic!("expected CorruptBatch, got {other:?}"),
        }
    }

    #[test]
    fn internally_truncated_batch_is_an_error_not_a_panic() {
        // Cut the records section short and fix up length and CRC so that only the record
        // decoding itself notices.
        let topic: Arc<str> = Arc::from("t");
        let data = encode(
            &[kp_record(5, "hello"), kp_record(6, "world")],
            Compression::None,
        );
        let mut bytes = data.to_vec();
        bytes.truncate(bytes.len() - 4);
        let batch_len = (bytes.len() - LOG_OVERHEAD) as i32;
        bytes[8..12].copy_from_slice(&batch_len.to_be_bytes());
        let crc = crc32c_for_test(&bytes[21..]);
        bytes[17..21].copy_from_slice(&crc.to_be_bytes());
        let mut out = Vec::new();
        let r = decode_partition(
            &input(&topic, 0),
            &Bytes::from(bytes),
            &mut out,
            &mut full(),
        );
        assert!(
            matches!(r, Err(WireError::CorruptBatch { offset: 5, .. })),
            "{r:?}"
        );
    }

    #[test]
    fn absurd_record_count_is_rejected_before_allocation() {
        let topic: Arc<str> = Arc::from("t");
        let data = encode(&[kp_record(0, "x")], Compression::None);
        let mut bytes = data.to_vec();
        bytes[57..61].copy_from_slice(&i32::MAX.to_be_bytes());
        let crc = crc32c_for_test(&bytes[21..]);
        bytes[17..21].copy_from_slice(&crc.to_be_bytes());
        let mut out = Vec::new();
        let r = decode_partition(
            &input(&topic, 0),
            &Bytes::from(bytes),
            &mut out,
            &mut full(),
        );
        assert!(matches!(r, Err(WireError::CorruptBatch { .. })), "{r:?}");
    }

    #[test]
    fn random_garbage_never_panics() {
        let topic: Arc<str> = Arc::from("t");
        let good = encode(
            &(0..4).map(|o| kp_record(o, "zz")).collect::<Vec<_>>(),
            Compression::None,
        );
        // Deterministic xorshift so the test is reproducible.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..2000 {
            let mut bytes = good.to_vec();
            for _ in 0..3 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let i = (x as usize) % bytes.len();
                bytes[i] = (x >> 32) as u8;
            }
            let mut out = Vec::new();
            let _ = decode_partition(
                &input(&topic, 0),
                &Bytes::from(bytes),
                &mut out,
                &mut full(),
            );
        }
    }

    #[test]
    fn control_batches_are_skipped() {
        let topic: Arc<str> = Arc::from("t");
        let mut marker = kp_record(3, "");
        marker.control = true;
        marker.transactional = true;
        marker.producer_id = 9;
        marker.producer_epoch = 0;
        marker.key = Some(Bytes::from_static(&[0, 0, 0, 1])); // COMMIT
        marker.value = Some(Bytes::from_static(&[0, 0, 0, 0, 0, 0]));
        marker.headers = Default::default();
        let mut data = BytesMut::new();
        data.extend_from_slice(&encode(&[kp_record(2, "a")], Compression::None));
        data.extend_from_slice(&encode(&[marker], Compression::None));
        let mut out = Vec::new();
        let s = decode_partition(&input(&topic, 0), &data.freeze(), &mut out, &mut full()).ok();
        assert_eq!(values(&out), ["a"]);
        assert_eq!(s.and_then(|s| s.next_offset), Some(4));
    }

    #[test]
    fn read_committed_drops_aborted_transactions() {
        let topic: Arc<str> = Arc::from("t");
        let txn = |pid: i64, offs: std::ops::Range<i64>, v: &str| -> Bytes {
            let recs: Vec<KpRecord> = offs
                .map(|o| {
                    let mut r = kp_record(o, v);
                    r.transactional = true;
                    r.producer_id = pid;
                    r.producer_epoch = 0;
                    r.sequence = o as i32;
                    r
                })
                .collect();
            encode(&recs, Compression::None)
        };
        let marker = |pid: i64, off: i64, commit: bool| -> Bytes {
            let mut m = kp_record(off, "");
            m.control = true;
            m.transactional = true;
            m.producer_id = pid;
            m.producer_epoch = 0;
            m.key = Some(Bytes::from(vec![0, 0, 0, u8::from(commit)]));
            m.headers = Default::default();
            encode(&[m], Compression::None)
        };
        let mut data = BytesMut::new();
        data.extend_from_slice(&txn(1, 0..2, "aborted")); // 0,1
        data.extend_from_slice(&txn(2, 2..4, "committed")); // 2,3
        data.extend_from_slice(&marker(1, 4, false)); // abort pid 1
        data.extend_from_slice(&marker(2, 5, true)); // commit pid 2
        data.extend_from_slice(&txn(1, 6..7, "later")); // pid 1 again, new txn
        data.extend_from_slice(&marker(1, 7, true));
        let data = data.freeze();
        let aborted = [AbortedTxn {
            producer_id: 1,
            first_offset: 0,
        }];
        let mut inp = input(&topic, 0);
        inp.aborted = Some(&aborted);
        let mut out = Vec::new();
        let s = decode_partition(&inp, &data, &mut out, &mut full()).ok();
        assert_eq!(values(&out), ["committed", "committed", "later"]);
        assert_eq!(s.and_then(|s| s.next_offset), Some(8));
        // read_uncommitted sees everything that is not a control record.
        let mut out = Vec::new();
        let _ = decode_partition(&input(&topic, 0), &data, &mut out, &mut full());
        assert_eq!(out.len(), 5);
    }

    #[test]
    fn transaction_marker_with_zero_crc_is_understood() {
        // librdkafka's mock cluster writes markers with CRC 0; they carry no user data.
        let topic: Arc<str> = Arc::from("t");
        let marker = |pid: i64, off: i64, commit: bool| -> Vec<u8> {
            let mut m = kp_record(off, "");
            m.control = true;
            m.transactional = true;
            m.producer_id = pid;
            m.producer_epoch = 0;
            m.key = Some(Bytes::from(vec![0, 0, 0, u8::from(commit)]));
            m.headers = Default::default();
            let mut b = encode(&[m], Compression::None).to_vec();
            b[17..21].copy_from_slice(&[0, 0, 0, 0]);
            b
        };
        let mut txn = kp_record(0, "aborted");
        txn.transactional = true;
        txn.producer_id = 4;
        txn.producer_epoch = 0;
        let mut data = BytesMut::new();
        data.extend_from_slice(&encode(&[txn], Compression::None));
        data.extend_from_slice(&marker(4, 1, false));
        data.extend_from_slice(&encode(&[kp_record(2, "plain")], Compression::None));
        let data = data.freeze();
        let aborted = [AbortedTxn {
            producer_id: 4,
            first_offset: 0,
        }];
        let mut inp = input(&topic, 0);
        inp.aborted = Some(&aborted);
        let mut out = Vec::new();
        let s = decode_partition(&inp, &data, &mut out, &mut full());
        assert_eq!(s.ok().and_then(|s| s.next_offset), Some(3));
        assert_eq!(values(&out), ["plain"]);
        assert_eq!(control_marker(&marker(4, 1, true)), Some(1));
        assert_eq!(control_marker(&[0u8; 10]), None);
    }

    #[test]
    fn varints_decode_and_never_overrun() {
        let mut b: &[u8] = &[0x01];
        assert_eq!(read_varint(&mut b), Some(-1));
        let mut b: &[u8] = &[0x96, 0x01];
        assert_eq!(read_varint(&mut b), Some(75));
        let mut b: &[u8] = &[0x80, 0x80];
        assert_eq!(read_varint(&mut b), None);
        let mut b: &[u8] = &[0xff; 20];
        assert_eq!(read_varint(&mut b), None);
    }

    #[test]
    fn produce_batch_round_trips() {
        let recs = vec![
            ProduceRecord {
                key: Some(Bytes::from_static(b"k")),
                value: Some(Bytes::from_static(b"v")),
                headers: vec![("a".into(), None)],
                timestamp: Some(5),
            },
            ProduceRecord::default(),
        ];
        let data = encode_batch(&recs, 77);
        let data = data.unwrap_or_default();
        let topic: Arc<str> = Arc::from("t");
        let mut out = Vec::new();
        let _ = decode_partition(&input(&topic, 0), &data, &mut out, &mut full());
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].headers, vec![("a".to_string(), None)]);
        assert_eq!(out[1].timestamp, 77);
        assert_eq!(out[1].value, None);
    }

    use crate::fuzzing::batch_writer::{batch_of, RawBatch, RawRecord};

    fn raw(delta: i32, value: &str) -> RawRecord {
        RawRecord {
            offset_delta: delta,
            timestamp_delta: i64::from(delta),
            key: None,
            value: Some(value.as_bytes().to_vec()),
            headers: Vec::new(),
        }
    }

    fn decode_with(
        data: &[u8],
        fetch_offset: i64,
        allowance: &mut Allowance,
    ) -> (Result<DecodeSummary>, Vec<Record>) {
        let topic: Arc<str> = Arc::from("t");
        let mut out = Vec::new();
        let r = decode_partition(
            &input(&topic, fetch_offset),
            &Bytes::copy_from_slice(data),
            &mut out,
            allowance,
        );
        (r, out)
    }

    #[test]
    fn offset_delta_overflow_is_a_corrupt_batch_not_a_panic() {
        let mut h = RawBatch::plain(i64::MAX - 10, 1, Compression::None);
        h.last_offset_delta = 5;
        let data = batch_of(&h, &[raw(i32::MAX, "x")]);
        let (r, out) = decode_with(&data, 0, &mut full());
        assert!(
            matches!(&r, Err(WireError::CorruptBatch { reason, .. }) if reason.contains("offset delta")),
            "{r:?}"
        );
        assert!(out.is_empty());
    }

    #[test]
    fn timestamp_delta_overflow_is_a_corrupt_batch_not_a_panic() {
        let mut h = RawBatch::plain(0, 1, Compression::None);
        h.first_timestamp = i64::MAX - 1;
        let mut r0 = raw(0, "x");
        r0.timestamp_delta = 5;
        let (r, _) = decode_with(&batch_of(&h, &[r0]), 0, &mut full());
        assert!(
            matches!(&r, Err(WireError::CorruptBatch { reason, .. }) if reason.contains("overflows")),
            "{r:?}"
        );
    }

    #[test]
    fn batch_whose_last_offset_leaves_no_next_offset_is_rejected() {
        // Last offset i64::MAX: the position after it (what a commit would store) does not exist.
        let h = RawBatch::plain(i64::MAX, 1, Compression::None);
        let (r, _) = decode_with(&batch_of(&h, &[raw(0, "x")]), 0, &mut full());
        assert!(matches!(r, Err(WireError::CorruptBatch { .. })), "{r:?}");
        let h = RawBatch::plain(-3, 1, Compression::None);
        let (r, _) = decode_with(&batch_of(&h, &[raw(0, "x")]), -5, &mut full());
        assert!(matches!(r, Err(WireError::CorruptBatch { .. })), "{r:?}");
    }

    #[test]
    fn records_outside_the_batch_range_or_out_of_order_are_rejected() {
        let h = RawBatch::plain(10, 2, Compression::None);
        let (r, _) = decode_with(&batch_of(&h, &[raw(0, "a"), raw(2, "b")]), 0, &mut full());
        assert!(
            matches!(r, Err(WireError::CorruptBatch { .. })),
            "beyond last: {r:?}"
        );
        let (r, _) = decode_with(&batch_of(&h, &[raw(1, "a"), raw(0, "b")]), 0, &mut full());
        assert!(
            matches!(r, Err(WireError::CorruptBatch { .. })),
            "backwards: {r:?}"
        );
        // Two batches that overlap.
        let mut data = batch_of(&h, &[raw(0, "a"), raw(1, "b")]);
        data.extend(batch_of(
            &RawBatch::plain(11, 1, Compression::None),
            &[raw(0, "c")],
        ));
        let (r, _) = decode_with(&data, 0, &mut full());
        assert!(
            matches!(r, Err(WireError::CorruptBatch { .. })),
            "overlap: {r:?}"
        );
    }

    #[test]
    fn huge_header_count_is_refused_against_the_record_length() {
        let h = RawBatch::plain(0, 1, Compression::None);
        // key null, value null, then a header count of i32::MAX and nothing after it.
        let mut body = vec![0u8, 0, 0, 1, 1];
        crate::fuzzing::batch_writer::put_varint(&mut body, i64::from(i32::MAX));
        let mut section = Vec::new();
        crate::fuzzing::batch_writer::put_varint(&mut section, body.len() as i64);
        section.extend(body);
        let data = crate::fuzzing::batch_writer::batch_bytes(&h, &section);
        let (r, _) = decode_with(&data, 0, &mut full());
        assert!(
            matches!(&r, Err(WireError::CorruptBatch { reason, .. }) if reason.contains("headers cannot fit")),
            "{r:?}"
        );
    }

    #[test]
    fn headers_keep_wire_order_and_repeated_keys() {
        let mut r0 = raw(0, "x");
        r0.headers = vec![
            (b"trace".to_vec(), Some(b"1".to_vec())),
            (b"trace".to_vec(), Some(b"2".to_vec())),
            (b"a".to_vec(), None),
        ];
        let data = batch_of(&RawBatch::plain(0, 1, Compression::None), &[r0]);
        let (r, out) = decode_with(&data, 0, &mut full());
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(
            out[0].headers,
            vec![
                ("trace".to_string(), Some(Bytes::from_static(b"1"))),
                ("trace".to_string(), Some(Bytes::from_static(b"2"))),
                ("a".to_string(), None),
            ]
        );
    }

    #[test]
    fn log_append_time_is_the_batch_max_timestamp_as_in_kafka() {
        // The broker stamps LogAppendTime into the batch header only (max timestamp); the
        // records keep the producer's deltas, which Kafka's consumer ignores for that type.
        let mut h = RawBatch::plain(0, 2, Compression::None);
        h.attributes |= 8;
        h.max_timestamp = 99_000;
        let data = batch_of(&h, &[raw(0, "a"), raw(1, "b")]);
        let (r, out) = decode_with(&data, 0, &mut full());
        assert!(r.is_ok(), "{r:?}");
        assert!(out
            .iter()
            .all(|r| r.timestamp == 99_000 && r.timestamp_type == TimestampType::LogAppendTime));
    }

    #[cfg(feature = "gzip")]
    fn gzip_batches(n: i64, per_batch: i32) -> (Vec<u8>, usize) {
        let mut data = Vec::new();
        for b in 0..n {
            let recs: Vec<RawRecord> = (0..per_batch).map(|d| raw(d, &"v".repeat(100))).collect();
            data.extend(batch_of(
                &RawBatch::plain(b * i64::from(per_batch), per_batch, Compression::Gzip),
                &recs,
            ));
        }
        let section: usize = (0..per_batch)
            .map(|d| crate::fuzzing::batch_writer::record_bytes(&raw(d, &"v".repeat(100))).len())
            .sum();
        (data, section)
    }

    #[cfg(feature = "gzip")]
    #[test]
    fn response_budget_stops_at_a_batch_boundary_and_resuming_loses_nothing() {
        let (data, section) = gzip_batches(5, 10);
        let budget = DecodeBudget {
            max_decompressed_bytes: section * 2 + section / 2,
            max_decompressed_records: 1000,
        };
        let mut all = Vec::new();
        let mut offset = 0;
        let mut calls = 0;
        loop {
            calls += 1;
            let mut allowance = Allowance::new(budget);
            let (r, out) = decode_with(&data, offset, &mut allowance);
            let summary = r.ok().unwrap_or_default();
            assert!(allowance.decompressed_bytes() <= budget.max_decompressed_bytes);
            all.extend(out.iter().map(|r| r.offset));
            let next = summary.next_offset.unwrap_or(offset);
            if !summary.stopped_by_budget {
                assert_eq!(next, 50);
                break;
            }
            assert_eq!(out.len(), 20, "two whole batches per call");
            assert_eq!(
                next,
                offset + 20,
                "next offset is the first batch not decoded"
            );
            offset = next;
        }
        assert_eq!(calls, 3);
        assert_eq!(all, (0..50).collect::<Vec<_>>());
    }

    #[cfg(feature = "gzip")]
    #[test]
    fn response_budget_is_shared_by_partitions_and_counts_records() {
        let (data, _) = gzip_batches(3, 10);
        let budget = DecodeBudget {
            max_decompressed_bytes: usize::MAX,
            max_decompressed_records: 25,
        };
        let mut allowance = Allowance::new(budget);
        let (r, first) = decode_with(&data, 0, &mut allowance);
        assert_eq!(first.len(), 20);
        assert!(r
            .as_ref()
            .is_ok_and(|s| s.stopped_by_budget && s.next_offset == Some(20)));
        // A second partition of the same response gets what is left: not one more batch.
        let (r, second) = decode_with(&data, 0, &mut allowance);
        assert!(second.is_empty());
        assert!(r.is_ok_and(|s| s.stopped_by_budget && s.next_offset.is_none()));
        assert_eq!(allowance.decompressed_records(), 20);
    }

    #[cfg(feature = "gzip")]
    #[test]
    fn batch_larger_than_the_whole_budget_is_an_error() {
        let (data, section) = gzip_batches(1, 10);
        let mut allowance = Allowance::new(DecodeBudget {
            max_decompressed_bytes: section - 1,
            max_decompressed_records: 1000,
        });
        let (r, out) = decode_with(&data, 0, &mut allowance);
        assert!(
            matches!(&r, Err(WireError::CorruptBatch { reason, .. }) if reason.contains("budget")),
            "{r:?}"
        );
        assert!(out.is_empty());
    }

    /// CRC-32C (Castagnoli), bitwise; only for fixing up hand-corrupted test batches.
    fn crc32c_for_test(data: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &b in data {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0x82F6_3B78
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }
}
