//! Acknowledgements as the share protocol carries them: per partition, sorted, contiguous
//! offsets of one type as one batch with a single type, mixed runs with one type per offset.
//!
//! Free of I/O and of session state, so the coalescing rules are unit-tested alone.

use std::collections::BTreeMap;

use super::AckType;

/// The most offsets one partition acknowledges in one request; more wait for the next one.
/// Why a cap: a request must stay well under the broker's `socket.request.max.bytes` (100 MiB
/// by default) even when every offset needs a type of its own (one byte each, plus a batch).
pub const MAX_ACKS_PER_PARTITION: usize = 100_000;

/// One AcknowledgementBatch: `first..=last` and either one type for all or one per offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AckBatch {
    pub(crate) first: i64,
    pub(crate) last: i64,
    pub(crate) types: Vec<i8>,
}

/// Coalesces one partition's acknowledgements (any order; a repeated offset keeps the type
/// given last) into batches sorted by offset.
pub(crate) fn coalesce(acks: &[(i64, AckType)]) -> Vec<AckBatch> {
    let by_offset: BTreeMap<i64, AckType> = acks.iter().copied().collect();
    let mut out: Vec<AckBatch> = Vec::new();
    let mut run: Vec<(i64, AckType)> = Vec::new();
    let flush = |run: &mut Vec<(i64, AckType)>, out: &mut Vec<AckBatch>| {
        let (Some(&(first, kind)), Some(&(last, _))) = (run.first(), run.last()) else {
            return;
        };
        let types = if run.iter().all(|(_, k)| *k == kind) {
            vec![kind as i8]
        } else {
            run.iter().map(|(_, k)| *k as i8).collect()
        };
        out.push(AckBatch { first, last, types });
        run.clear();
    };
    for (offset, kind) in by_offset {
        if run
            .last()
            .is_some_and(|&(prev, _)| prev.checked_add(1) != Some(offset))
        {
            flush(&mut run, &mut out);
        }
        run.push((offset, kind));
    }
    flush(&mut run, &mut out);
    out
}

/// The acknowledgements in `batches`, one per offset (what a request carried, for reports).
#[cfg(test)]
pub(crate) fn expand(batches: &[AckBatch]) -> Vec<(i64, i8)> {
    let mut out = Vec::new();
    for b in batches {
        for (i, offset) in (b.first..=b.last).enumerate() {
            let t = if b.types.len() == 1 {
                b.types[0]
            } else {
                b.types[i]
            };
            out.push((offset, t));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use AckType::{Accept, Gap, Reject, Release};

    #[test]
    fn contiguous_offsets_of_one_type_make_one_batch_with_one_type() {
        let b = coalesce(&[(12, Accept), (10, Accept), (11, Accept)]);
        assert_eq!(
            b,
            vec![AckBatch {
                first: 10,
                last: 12,
                types: vec![1]
            }]
        );
    }

    #[test]
    fn mixed_runs_carry_a_type_per_offset_and_holes_split_batches() {
        let b = coalesce(&[
            (5, Accept),
            (6, Gap),
            (7, Release),
            (9, Reject),
            (10, Reject),
        ]);
        assert_eq!(
            b,
            vec![
                AckBatch {
                    first: 5,
                    last: 7,
                    types: vec![1, 0, 2]
                },
                AckBatch {
                    first: 9,
                    last: 10,
                    types: vec![3]
                },
            ]
        );
        assert_eq!(expand(&b), vec![(5, 1), (6, 0), (7, 2), (9, 3), (10, 3)]);
    }

    #[test]
    fn a_repeated_offset_keeps_the_last_type_and_extremes_do_not_overflow() {
        let b = coalesce(&[(i64::MAX, Accept), (3, Accept), (3, Reject)]);
        assert_eq!(b.len(), 2);
        assert_eq!(b[0].types, vec![3]);
        assert_eq!(b[1].first, i64::MAX);
        assert!(coalesce(&[]).is_empty());
    }
}
