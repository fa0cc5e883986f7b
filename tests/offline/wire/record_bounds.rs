//! Hostile record data costs only what it weighs: the tier's counting allocator (`counting_alloc`)
//! measures, on the test thread, the largest single allocation and the peak of live bytes
//! while one partition's data is decoded. Each test builds the bytes a broker (or a man in the
//! middle) could send: a header count of 2^31 - 1, a 5-byte snappy claim of 256 MiB, many small
//! gzip batches of tiny records; the decoder must answer with an error or a stop at a batch
//! boundary, never with an allocation sized by the claim.

use std::cell::Cell;
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::records::Compression;
use rebalance_guard::fuzzing::batch_writer::{
    batch_bytes, batch_of, put_varint, RawBatch, RawRecord,
};
use rebalance_guard::wire::records::{
    decode_partition, Allowance, DecodeBudget, DecodeSummary, PartitionInput, Record,
};
use rebalance_guard::wire::{Result, WireError};

use crate::counting_alloc::{THREAD_LARGEST as LARGEST, THREAD_LIVE as LIVE, THREAD_PEAK as PEAK};

struct Measured {
    result: Result<DecodeSummary>,
    records: usize,
    largest: usize,
    peak: usize,
}

/// Decodes `data` as one partition with `budget`, measuring this thread's allocations.
fn measure(data: Vec<u8>, budget: DecodeBudget) -> Measured {
    let topic: Arc<str> = Arc::from("orders");
    let data = Bytes::from(data);
    let mut out: Vec<Record> = Vec::new();
    let mut allowance = Allowance::new(budget);
    LARGEST.with(|m| m.set(0));
    let base = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(base));
    let result = decode_partition(
        &PartitionInput {
            topic: &topic,
            partition: 0,
            fetch_offset: 0,
            aborted: None,
        },
        &data,
        &mut out,
        &mut allowance,
    );
    let peak = (PEAK.with(Cell::get) - base).max(0) as usize;
    Measured {
        result,
        records: out.len(),
        largest: LARGEST.with(Cell::get),
        peak,
    }
}

/// One record whose header count says `count` but which carries no header.
fn record_claiming_headers(count: i64) -> Vec<u8> {
    let mut body = vec![0u8, 0, 0]; // attributes, timestamp delta 0, offset delta 0
    put_varint(&mut body, -1); // key null
    put_varint(&mut body, -1); // value null
    put_varint(&mut body, count);
    let mut section = Vec::new();
    put_varint(&mut section, body.len() as i64);
    section.extend(body);
    section
}

#[test]
fn a_huge_header_count_is_an_error_without_a_matching_allocation() {
    for codec in [Compression::None, Compression::Gzip] {
        let data = batch_bytes(
            &RawBatch::plain(0, 1, codec),
            &record_claiming_headers(0x7fff_ffff),
        );
        let n = data.len();
        let m = measure(data, DecodeBudget::default());
        assert!(
            matches!(&m.result, Err(WireError::CorruptBatch { reason, .. }) if reason.contains("headers")),
            "{codec:?}: {:?}",
            m.result
        );
        assert!(
            m.largest < 64 * 1024,
            "{codec:?}: {} bytes for {n} input bytes",
            m.largest
        );
    }
}

#[test]
fn a_snappy_length_claim_beyond_snappy_expansion_allocates_nothing_like_it() {
    // A record section of five bytes: a raw snappy block whose length varint says 256 MiB.
    let mut h = RawBatch::plain(0, 1, Compression::None);
    h.attributes = 2; // snappy, but the bytes are written as they are
    let mut claim = Vec::new();
    let mut v: u32 = 256 << 20;
    while v >= 0x80 {
        claim.push((v as u8) | 0x80);
        v >>= 7;
    }
    claim.push(v as u8);
    let data = raw_batch_with_payload(&h, &claim);
    let m = measure(data, DecodeBudget::default());
    assert!(
        matches!(&m.result, Err(WireError::CorruptBatch { reason, .. }) if reason.contains("snappy")),
        "{:?}",
        m.result
    );
    assert!(
        m.largest < 64 * 1024,
        "largest allocation {} bytes",
        m.largest
    );
}

/// A batch whose payload is `payload` as given (not compressed by the writer).
fn raw_batch_with_payload(h: &RawBatch, payload: &[u8]) -> Vec<u8> {
    let mut plain = h.clone();
    plain.attributes = 0;
    let mut b = batch_bytes(&plain, payload);
    b[21..23].copy_from_slice(&h.attributes.to_be_bytes());
    rebalance_guard::fuzzing::batch_writer::fix_crcs(&mut b);
    b
}

#[cfg(feature = "gzip")]
#[test]
fn many_small_gzip_batches_stop_at_the_response_budget_not_at_gigabytes() {
    // 2000 batches of 500 empty records each: about 1 MiB on the wire, a million records
    // decompressed. With a per-batch limit only, every batch passed and the structs took
    // hundreds of MiB; with one budget per response the decode stops at a batch boundary.
    let records: Vec<RawRecord> = (0..500)
        .map(|d| RawRecord {
            offset_delta: d,
            ..RawRecord::default()
        })
        .collect();
    let mut data = Vec::new();
    for b in 0..2000i64 {
        data.extend(batch_of(
            &RawBatch::plain(b * 500, 500, Compression::Gzip),
            &records,
        ));
    }
    let n = data.len();
    let budget = DecodeBudget {
        max_decompressed_bytes: 64 * 1024 * 1024,
        max_decompressed_records: 20_000,
    };
    let m = measure(data, budget);
    let summary = m.result.as_ref().ok().copied().unwrap_or_default();
    assert!(summary.stopped_by_budget, "{:?}", m.result);
    assert_eq!(m.records, 20_000, "40 whole batches fit the record budget");
    assert_eq!(
        summary.next_offset,
        Some(20_000),
        "resume at the first batch not decoded"
    );
    let bound = 4 * n + 20_000 * 256;
    assert!(
        m.peak < bound,
        "peak {} bytes for {n} input bytes (bound {bound})",
        m.peak
    );
}

#[test]
fn uncompressed_data_costs_a_small_constant_times_its_size() {
    // The densest records there are (7 bytes each) with the densest headers (2 bytes each).
    let records: Vec<RawRecord> = (0..2000)
        .map(|d| RawRecord {
            offset_delta: d,
            headers: vec![(Vec::new(), None); 20],
            ..RawRecord::default()
        })
        .collect();
    let data = batch_of(&RawBatch::plain(0, 2000, Compression::None), &records);
    let n = data.len();
    let m = measure(data, DecodeBudget::default());
    assert!(m.result.is_ok(), "{:?}", m.result);
    assert_eq!(m.records, 2000);
    assert!(m.peak < 40 * n, "peak {} bytes for {n} input bytes", m.peak);
}
