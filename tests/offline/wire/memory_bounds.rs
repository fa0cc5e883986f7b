//! Decoding one hostile Fetch response costs at most a small constant times its decode budget,
//! for every codec the build enables.
//!
//! A counting allocator (this test binary only) tracks live heap bytes and their peak over all
//! threads. Each test builds, for every codec, the partitions of one response a hostile broker
//! could send (their bytes allocated before the measurement starts, as a received frame is), resets
//! the peak, decodes every partition under one shared [`Allowance`] as the client does, and
//! requires the peak to stay within [`K`] times [`budget_bytes`]. The hazards: one record declaring
//! millions of empty headers; many batches of the smallest records there are; header keys (copied
//! into `String`s) as long as a batch can carry; a record section that just fits the budget and one
//! that decompresses to four times it; for zstd, a frame declaring the largest window its decoder
//! accepts. Each peak is printed (`--no-capture` shows it).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use kafka_protocol::records::Compression;
use rebalance_guard::fuzzing::batch_writer::{
    batch_bytes, batch_of, fix_crcs, put_varint, RawBatch, RawRecord,
};
use rebalance_guard::wire::records::{
    decode_partition, Allowance, DecodeBudget, PartitionInput, Record,
};

use crate::counting_alloc::{LIVE, PEAK};

/// The budget of every case: 4 MiB of decompressed bytes, 16 Ki records and headers. Small,
/// so that the hostile inputs stay small, yet not small beside the codecs' fixed working state
/// (a gzip window of 32 KiB; LZ4 block buffers, the largest, of up to 8 MiB).
const BUDGET: DecodeBudget = DecodeBudget {
    max_decompressed_bytes: 4 << 20,
    max_decompressed_records: 16 << 10,
};

/// What a budget stands for in memory: its bytes, plus one [`Record`] per record or header it
/// admits (a header entry, `(String, Option<Bytes>)`, is smaller than a record).
fn budget_bytes(b: DecodeBudget) -> usize {
    b.max_decompressed_bytes + b.max_decompressed_records * std::mem::size_of::<Record>()
}

/// The bound is K times the budget. Why 4: decompressed sections and copied header keys are
/// charged to the byte budget, and a batch being decompressed holds at most what is left of it
/// (1 budget); records sit in
/// vectors that grow by doubling, so at most twice what they hold, and header vectors are
/// sized exactly (2 budgets); the codec's working state comes on top (LZ4's, the largest, is
/// 8 MiB, 1.3 budgets here). Measured, the worst case is LZ4 at 2 budgets; before counts were
/// charged ahead of their allocations, one record of empty headers took 19.
const K: usize = 4;

/// One allocation test at a time: the counters are global.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Decodes `partitions` as the partitions of one response (one allowance, one output vector
/// each, all kept until the end) and returns the peak of live heap bytes over the baseline, and
/// how many records were decoded.
fn peak_of(partitions: &[Bytes], budget: DecodeBudget) -> (usize, usize) {
    let topic: Arc<str> = Arc::from("orders");
    let mut outs: Vec<Vec<Record>> = Vec::with_capacity(partitions.len());
    let mut results = Vec::with_capacity(partitions.len());
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let mut allowance = Allowance::new(budget);
    for (i, data) in partitions.iter().enumerate() {
        let mut out = Vec::new();
        let input = PartitionInput {
            topic: &topic,
            partition: i as i32,
            fetch_offset: 0,
            aborted: None,
        };
        results.push(decode_partition(&input, data, &mut out, &mut allowance).map(drop));
        outs.push(out);
    }
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(base);
    assert!(
        allowance.decompressed_bytes() <= budget.max_decompressed_bytes
            && allowance.decompressed_records() <= budget.max_decompressed_records,
        "budget overspent"
    );
    let records = outs.iter().map(Vec::len).sum();
    drop(outs);
    drop(results);
    (peak, records)
}

/// One record with `n` headers of an empty key and a null value (2 bytes each), length
/// prefix included.
fn record_of_empty_headers(n: usize) -> Vec<u8> {
    let mut body = vec![0u8, 0, 0]; // attributes, timestamp delta 0, offset delta 0
    put_varint(&mut body, -1); // key null
    put_varint(&mut body, -1); // value null
    put_varint(&mut body, n as i64);
    for _ in 0..n {
        body.extend_from_slice(&[0x00, 0x01]); // key length 0, value length -1
    }
    let mut record = Vec::with_capacity(body.len() + 5);
    put_varint(&mut record, body.len() as i64);
    record.extend(body);
    record
}

/// The codecs this build decodes.
fn codecs() -> Vec<Compression> {
    let mut out = vec![Compression::None];
    #[cfg(feature = "gzip")]
    out.push(Compression::Gzip);
    #[cfg(feature = "snappy")]
    out.push(Compression::Snappy);
    #[cfg(feature = "lz4")]
    out.push(Compression::Lz4);
    #[cfg(feature = "zstd")]
    out.push(Compression::Zstd);
    out
}

/// Decodes, for every codec of the build, the response `build` makes for it, and fails naming
/// each codec whose peak exceeds the bound.
fn check(case: &str, build: impl Fn(Compression) -> Vec<Vec<u8>>) {
    let _serial = serial();
    let budget = budget_bytes(BUDGET);
    let mut over = Vec::new();
    for codec in codecs() {
        let partitions: Vec<Bytes> = build(codec).into_iter().map(Bytes::from).collect();
        let (peak, _) = peak_of(&partitions, BUDGET);
        let ratio = peak as f64 / budget as f64;
        println!("{case}, {codec:?}: peak {peak} bytes = {ratio:.2} x the budget of {budget}");
        if peak > K * budget {
            over.push(format!("{codec:?}: {peak} bytes ({ratio:.2} x)"));
        }
    }
    assert!(
        over.is_empty(),
        "{case}: peaks over {K} x the budget of {budget} bytes: {over:?}"
    );
}

/// One batch of `codec` holding `records`.
fn batch(codec: Compression, records: &[RawRecord]) -> Vec<u8> {
    batch_of(&RawBatch::plain(0, records.len() as i32, codec), records)
}

#[test]
fn a_record_of_millions_of_empty_headers_costs_at_most_four_budgets_per_codec() {
    // 2 bytes each on the wire, a 56-byte entry each once decoded; as many as the byte budget
    // lets a compressed batch carry.
    let n = (BUDGET.max_decompressed_bytes - 64) / 2;
    check("empty headers", |codec| {
        vec![batch_bytes(
            &RawBatch::plain(0, 1, codec),
            &record_of_empty_headers(n),
        )]
    });
}

#[test]
fn many_batches_of_the_smallest_records_cost_at_most_four_budgets_per_codec() {
    // Two partitions of 150 batches of 1000 empty records: 8 bytes each on the wire, a
    // 128-byte record each once decoded.
    let records: Vec<RawRecord> = (0..1000)
        .map(|d| RawRecord {
            offset_delta: d,
            ..RawRecord::default()
        })
        .collect();
    check("tiny records", |codec| {
        let mut data = Vec::new();
        for b in 0..150i64 {
            data.extend(batch_of(&RawBatch::plain(b * 1000, 1000, codec), &records));
        }
        vec![data.clone(), data]
    });
}

#[test]
fn header_keys_as_long_as_a_batch_carries_cost_at_most_four_budgets_per_codec() {
    // Keys of 64 KiB each, as many as one batch carries into the decoder: a whole frame's
    // worth when uncompressed (that costs no decompression), just under the byte budget
    // otherwise. Every key is copied into a String.
    let key = vec![b'k'; 64 << 10];
    check("long header keys", |codec| {
        let carried = match codec {
            Compression::None => 8 * BUDGET.max_decompressed_bytes,
            _ => BUDGET.max_decompressed_bytes - 4096,
        };
        let keyed = RawRecord {
            headers: vec![(key.clone(), None); carried / key.len() - 1],
            ..RawRecord::default()
        };
        vec![batch(codec, &[keyed])]
    });
}

#[test]
fn decompression_bombs_cost_at_most_four_budgets_per_codec() {
    // A value of zeros that just fits the byte budget, one four times the budget, and (zstd)
    // a frame declaring the largest window its decoder accepts.
    for (case, len) in [
        ("budget-sized value", BUDGET.max_decompressed_bytes - 4096),
        ("bomb of 4 budgets", 4 * BUDGET.max_decompressed_bytes),
    ] {
        let zeros = RawRecord {
            value: Some(vec![0; len]),
            ..RawRecord::default()
        };
        check(case, |codec| {
            vec![batch(codec, std::slice::from_ref(&zeros))]
        });
    }
    #[cfg(feature = "zstd")]
    {
        let _serial = serial();
        let (peak, records) = peak_of(&[Bytes::from(zstd_largest_window())], BUDGET);
        println!("zstd largest window, Zstd: peak {peak} bytes");
        assert_eq!(records, 1, "the frame decodes, window and all");
        assert!(
            peak <= K * budget_bytes(BUDGET),
            "zstd window: {peak} bytes"
        );
    }
}

/// A batch holding one zstd frame that declares a 96 MiB window (under the decoder's 100 MiB
/// ceiling) and carries one 7-byte record in a raw block.
#[cfg(feature = "zstd")]
fn zstd_largest_window() -> Vec<u8> {
    let mut record = Vec::new();
    put_varint(&mut record, 6);
    // Attributes, timestamp and offset deltas 0, null key and value, no header.
    record.extend_from_slice(&[0, 0, 0, 1, 1, 0]);
    let mut frame = 0xFD2F_B528u32.to_le_bytes().to_vec();
    frame.push(0x00); // descriptor: no single segment, no checksum, no content size
    frame.push((16 << 3) | 4); // window descriptor: 2^26 plus 4/8 of it = 96 MiB
    let block = ((record.len() as u32) << 3) | 1; // raw block, the last
    frame.extend_from_slice(&block.to_le_bytes()[..3]);
    frame.extend_from_slice(&record);
    let mut b = batch_bytes(&RawBatch::plain(0, 1, Compression::None), &frame);
    b[21..23].copy_from_slice(&4i16.to_be_bytes()); // zstd, the bytes kept as written
    fix_crcs(&mut b);
    b
}
