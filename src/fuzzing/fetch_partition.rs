//! Fuzz target (a): one partition of a Fetch response, decoded as the consumer decodes it.
//!
//! Input layout: byte 0 holds flags (bit 0 read_committed, bit 1 rewrite CRCs so that mutations
//! get past the checksum, bits 2-3 the budget: default, small, tiny); byte 1 the fetch offset;
//! byte 2 the number of aborted transactions (mod 4), then two bytes each (producer id, first
//! offset); the rest is the partition's record data.
//!
//! Properties: no panic; every record at or after the fetch offset, offsets strictly
//! increasing; the next offset at or after the fetch offset and beyond every record; the budget
//! never overspent; and a decode cut short by a small budget loses nothing: resuming from the
//! next offset it gave, again and again, yields exactly the records one unlimited decode gives.
//! Decoded a batch at a time, as the consumer's intake does ([`PartitionDecoder::fill`]), the
//! records and next offset are those of one whole decode, no more records come than the batch
//! headers counted beforehand, and a whole decode ends where the headers alone said it would.

use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::records::Compression;

use super::batch_writer::{batch_of, fix_crcs, RawBatch, RawRecord};
use crate::wire::records::{
    decode_partition, AbortedTxn, Allowance, DecodeBudget, PartitionDecoder, PartitionInput, Record,
};

struct Case {
    fetch_offset: i64,
    aborted: Option<Vec<AbortedTxn>>,
    budget: DecodeBudget,
    data: Bytes,
}

fn parse(input: &[u8]) -> Option<Case> {
    let (&flags, rest) = input.split_first()?;
    let (&fetch, rest) = rest.split_first()?;
    let (&n, mut rest) = rest.split_first()?;
    let mut aborted = Vec::new();
    for _ in 0..n % 4 {
        let (pair, tail) = rest.split_at_checked(2)?;
        aborted.push(AbortedTxn {
            producer_id: i64::from(pair[0]),
            first_offset: i64::from(pair[1]),
        });
        rest = tail;
    }
    let mut data = rest.to_vec();
    if flags & 2 != 0 {
        fix_crcs(&mut data);
    }
    let budget = match (flags >> 2) & 3 {
        1 => DecodeBudget {
            max_decompressed_bytes: 4096,
            max_decompressed_records: 64,
        },
        2 => DecodeBudget {
            max_decompressed_bytes: 300,
            max_decompressed_records: 6,
        },
        _ => DecodeBudget::default(),
    };
    Some(Case {
        fetch_offset: i64::from(fetch),
        aborted: (flags & 1 != 0).then_some(aborted),
        budget,
        data: Bytes::from(data),
    })
}

/// One decode: records, the effective next offset (as `Client::fetch` computes it), and
/// whether the budget stopped it. Checks the per-call properties.
fn decode_once(
    case: &Case,
    topic: &Arc<str>,
    fetch_offset: i64,
    budget: DecodeBudget,
) -> Option<(Vec<Record>, i64, bool)> {
    let input = PartitionInput {
        topic,
        partition: 0,
        fetch_offset,
        aborted: case.aborted.as_deref(),
    };
    let mut out = Vec::new();
    let mut allowance = Allowance::new(budget);
    let summary = decode_partition(&input, &case.data, &mut out, &mut allowance).ok()?;
    assert!(
        allowance.decompressed_bytes() <= budget.max_decompressed_bytes
            && allowance.decompressed_records() <= budget.max_decompressed_records,
        "budget overspent"
    );
    let next = summary
        .next_offset
        .unwrap_or(fetch_offset)
        .max(fetch_offset);
    let mut previous: Option<i64> = None;
    for r in &out {
        assert!(
            r.offset >= fetch_offset,
            "record {} before the fetch offset {fetch_offset}",
            r.offset
        );
        assert!(
            previous.is_none_or(|p| r.offset > p),
            "offsets do not increase at {}",
            r.offset
        );
        assert!(
            r.offset < next,
            "next offset {next} not beyond record {}",
            r.offset
        );
        previous = Some(r.offset);
    }
    Some((out, next, summary.stopped_by_budget))
}

/// The same decode a batch at a time: the same records and next offset as `full` (one whole
/// decode, `None` when it failed), a record count the headers bounded, an end the headers told.
fn check_lazy(case: &Case, topic: &Arc<str>, full: Option<&(Vec<Record>, i64, bool)>) {
    let input = PartitionInput {
        topic,
        partition: 0,
        fetch_offset: case.fetch_offset,
        aborted: case.aborted.as_deref(),
    };
    let mut decoder = PartitionDecoder::new(&input, case.data.clone());
    let counted = decoder.remaining_records();
    let end = decoder.end_offset();
    let mut allowance = Allowance::new(DecodeBudget::default());
    let mut got: Vec<Record> = Vec::new();
    let mut failed = false;
    while !decoder.is_finished() {
        let before = got.len();
        if decoder.fill(&mut got, &mut allowance).is_err() {
            failed = true;
            break;
        }
        assert!(
            got.len() > before || decoder.is_finished(),
            "a fill that appended nothing did not finish the decoder"
        );
    }
    match full {
        Some((all, next, stopped)) => {
            assert!(
                !failed,
                "batch-at-a-time decoding failed where a whole decode did not"
            );
            assert_eq!(&got, all, "batch-at-a-time decoding gave other records");
            assert_eq!(
                decoder.next_offset(),
                *next,
                "batch-at-a-time decoding ends elsewhere"
            );
            assert!(
                got.len() <= counted,
                "more records than the headers counted"
            );
            if !stopped {
                assert_eq!(end, *next, "the headers' end differs from the decoded end");
            }
        }
        None => assert!(
            failed,
            "batch-at-a-time decoding succeeded where a whole decode failed"
        ),
    }
}

/// Runs target (a) on one input.
pub fn check(input: &[u8]) {
    let Some(case) = parse(input) else { return };
    let topic: Arc<str> = Arc::from("fuzz");
    let full = decode_once(&case, &topic, case.fetch_offset, DecodeBudget::default());
    check_lazy(&case, &topic, full.as_ref());
    if case.budget == DecodeBudget::default() {
        return;
    }
    // Resume after every budget stop, as the consumer does, and compare with the unlimited run.
    let mut got: Vec<Record> = Vec::new();
    let mut offset = case.fetch_offset;
    loop {
        let Some((records, next, stopped)) = decode_once(&case, &topic, offset, case.budget) else {
            // A batch larger than the whole small budget is an error the unlimited run need
            // not have; up to it, nothing may differ.
            if let Some((all, _, _)) = &full {
                assert!(
                    all.starts_with(&got),
                    "records lost or changed before a budget error"
                );
            }
            return;
        };
        got.extend(records);
        if !stopped {
            if let Some((all, all_next, _)) = &full {
                assert_eq!(
                    &got, all,
                    "resumed decoding differs from one unlimited decode"
                );
                assert_eq!(next, *all_next, "resumed decoding ends at another offset");
            }
            return;
        }
        assert!(
            next > offset || got.is_empty() && next >= offset,
            "no progress at {offset}"
        );
        if next == offset {
            // Stopped before the first batch of this call: only possible when nothing fit,
            // which is an error, not a stop; an allowance untouched never stops.
            panic!("budget stop without progress at offset {offset}");
        }
        offset = next;
    }
}

fn rec(delta: i32, value: &[u8], headers: usize) -> RawRecord {
    RawRecord {
        offset_delta: delta,
        timestamp_delta: i64::from(delta),
        key: Some(format!("k{delta}").into_bytes()),
        value: Some(value.to_vec()),
        headers: (0..headers)
            .map(|i| (format!("h{i}").into_bytes(), Some(vec![b'v'; i])))
            .collect(),
    }
}

fn batch(base: i64, n: i32, codec: Compression, attrs: i16, pid: i64) -> Vec<u8> {
    let mut h = RawBatch::plain(base, n, codec);
    h.attributes |= attrs;
    h.producer_id = pid;
    let records: Vec<RawRecord> = (0..n)
        .map(|d| rec(d, b"value value value", (d % 3) as usize))
        .collect();
    batch_of(&h, &records)
}

fn marker(base: i64, pid: i64, commit: bool) -> Vec<u8> {
    let mut h = RawBatch::plain(base, 1, Compression::None);
    h.attributes |= 0x30; // transactional + control
    h.producer_id = pid;
    let r = RawRecord {
        key: Some(vec![0, 0, 0, u8::from(commit)]),
        value: Some(vec![0, 0, 0, 0, 0, 0]),
        ..RawRecord::default()
    };
    batch_of(&h, &[r])
}

/// Seeds: every codec, several batches, a fetch offset inside a batch, transactions with
/// commit and abort markers, budgets that cut the data short.
pub(crate) fn seeds() -> Vec<Vec<u8>> {
    let codecs = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];
    let mut out = Vec::new();
    for (i, &codec) in codecs.iter().enumerate() {
        let mut data = Vec::new();
        data.extend(batch(0, 4, codec, 0, -1));
        data.extend(batch(4, 3, codec, 0, -1));
        data.extend(batch(9, 5, codec, 8, -1)); // log-append time, gap before it
        for (flags, fetch) in [(2u8, 0u8), (2 | 4, 2), (2 | 8, 5)] {
            let mut input = vec![flags, fetch, 0];
            input.extend(&data);
            out.push(input);
        }
        // A partial batch at the end.
        let mut input = vec![2, 0, 0];
        input.extend(&data[..data.len() - 7]);
        out.push(input);
        // Transactions: pid 1 aborted, pid 2 committed, in read_committed.
        let mut txn = Vec::new();
        txn.extend(batch(0, 2, codec, 0x10, 1));
        txn.extend(batch(2, 2, codec, 0x10, 2));
        txn.extend(marker(4, 1, false));
        txn.extend(marker(5, 2, true));
        txn.extend(batch(6, 2, codec, 0, -1));
        let mut input = vec![2 | 1 | ((i as u8 % 2) << 2), 0, 1, 1, 0];
        input.extend(&txn);
        out.push(input);
    }
    out
}
