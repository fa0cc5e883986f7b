//! The completed-offsets map: which offsets beyond the committed position already finished,
//! written into the OffsetCommit `metadata` string so that the next owner skips them.
//!
//! Kafka stores one position per partition. With 101 running and 102..110 finished, the position
//! is 101, and without more information the next owner redoes 102..110, whose effects already
//! happened. The map carries them: `rgc2;<token>;<position>;<kind><payload>`.
//!
//! - `rgc2;` is the magic and the version: metadata written by another client (or by a later,
//!   incompatible version of this one) does not start with it and is ignored, never misread.
//!   Version 1 (`rgc1;<position>;...`, written before the token existed) is still read, as
//!   token 0.
//! - `<token>` is the partition's fencing token in decimal: the one the assignment that wrote
//!   the commit was given (see `consumer/fencing.rs`). The next owner reads it, whatever
//!   position it was written for, and commits one more before it reads a record.
//! - `<position>` is the committed offset the map is relative to, in decimal. A reader whose
//!   committed offset differs (someone committed a position without our map) ignores the map.
//! - `<kind>` is `r` (run-length: alternating lengths of unfinished and finished runs, starting
//!   at `position + 1`, as LEB128 varints) or `b` (a bitset: bit `i`, least significant first,
//!   is offset `position + 1 + i`). The writer picks the shorter; both are base64url without
//!   padding, because the metadata is a string and must survive any client's text handling.
//!
//! Decoding is bounded by the text's length: runs are kept as ranges, never expanded, so a map
//! of a billion offsets costs a few bytes of memory, and every bad byte or overflow is an error.

use std::fmt;

/// The prefix that marks metadata as ours, version 2 (with the fencing token).
pub(crate) const MAGIC: &str = "rgc2;";

/// The prefix of version 1, written before the token existed: read as token 0.
const MAGIC_V1: &str = "rgc1;";

/// The longest token in decimal (`u64::MAX`): the room the header keeps for it, whatever the
/// token is now, so that a map admitted under one token still fits under a larger one.
const LONGEST_TOKEN: usize = 20;

/// Offsets completed beyond a position, as sorted, disjoint, non-adjacent half-open ranges.
pub(crate) type Runs = Vec<(i64, i64)>;

/// Why committed metadata was not read as a map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MapError {
    /// Another client's metadata (or none of ours): not an error, just not a map.
    Foreign,
    /// Ours, but malformed: the reason.
    Malformed(&'static str),
    /// Ours, written for another position than the one committed.
    OtherPosition { written_for: i64 },
}

impl fmt::Display for MapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Foreign => f.write_str("not a completed-offsets map"),
            Self::Malformed(why) => write!(f, "malformed completed-offsets map: {why}"),
            Self::OtherPosition { written_for } => {
                write!(
                    f,
                    "completed-offsets map written for position {written_for}"
                )
            }
        }
    }
}

/// A leaf: it wraps no other error.
impl std::error::Error for MapError {}

/// The longest encoding a map can have when it covers the offsets `position + 1 ..= last`,
/// whatever finished among them: the bitset's length, which the writer never exceeds (it
/// picks the run-length form only when shorter). Admission checks this, O(1), so that the map
/// always fits the broker's `offset.metadata.max.bytes` and never has to be dropped.
pub(crate) fn worst_case_len(position: i64, last: i64) -> usize {
    let span = last.saturating_sub(position).max(0) as u64;
    let bytes = span.div_ceil(8);
    header_len(position) + 1 + base64_len(bytes)
}

/// True when a map from `position` to `last` can never be longer than `limit` bytes. Admission
/// asks with every record; while the span is far from the limit (nearly always) this answers
/// from the longest header any position can have, without counting the position's digits.
#[inline]
pub(crate) fn always_fits(position: i64, last: i64, limit: usize) -> bool {
    /// `i64::MIN` in decimal, the longest position.
    const LONGEST_POSITION: usize = 20;
    let span = last.saturating_sub(position).max(0) as u64;
    let body = 1 + base64_len(span.div_ceil(8));
    MAGIC.len() + LONGEST_TOKEN + 1 + LONGEST_POSITION + 1 + body <= limit
        || worst_case_len(position, last) <= limit
}

/// The header's longest length, `rgc2;<token>;<position>;` with the longest token, counted
/// without formatting (admission asks for it with every record).
fn header_len(position: i64) -> usize {
    let mut digits = 1;
    let mut rest = position.unsigned_abs() / 10;
    while rest > 0 {
        digits += 1;
        rest /= 10;
    }
    MAGIC.len() + LONGEST_TOKEN + 1 + usize::from(position < 0) + digits + 1
}

fn base64_len(bytes: u64) -> usize {
    usize::try_from((bytes * 4).div_ceil(3)).unwrap_or(usize::MAX)
}

/// Encodes the fencing token and the runs (all above `position`) as metadata text, the runs in
/// the shorter of the two forms. An empty map encodes to the bare header, so that committing it
/// replaces an older map.
pub(crate) fn encode(token: u64, position: i64, runs: &[(i64, i64)]) -> String {
    let mut text = format!("{MAGIC}{token};{position};");
    let Some(&(_, last_end)) = runs.last() else {
        text.push('r');
        return text;
    };
    let mut rle = Vec::new();
    let mut cursor = position + 1;
    for &(start, end) in runs {
        varint(&mut rle, (start - cursor) as u64);
        varint(&mut rle, (end - start) as u64);
        cursor = end;
    }
    let span = (last_end - (position + 1)) as u64;
    if (rle.len() as u64) <= span.div_ceil(8) {
        text.push('r');
        base64(&mut text, &rle);
    } else {
        let mut bits = vec![0u8; span.div_ceil(8) as usize];
        for &(start, end) in runs {
            for offset in start..end {
                let i = (offset - (position + 1)) as usize;
                bits[i / 8] |= 1 << (i % 8);
            }
        }
        text.push('b');
        base64(&mut text, &bits);
    }
    text
}

/// The fencing token committed metadata carries: 0 when it carries none (another client's
/// metadata, version 1, none at all). A malformed token reads as 0 too, and is logged by the
/// caller's map decoding; the token is only ever raised from what is read, so a 0 can cost
/// liveness (a sink refuses the new owner's writes until its own record is reset), never
/// safety.
pub(crate) fn token(metadata: &str) -> u64 {
    metadata
        .strip_prefix(MAGIC)
        .and_then(|rest| rest.split_once(';'))
        .and_then(|(token, _)| token.parse().ok())
        .unwrap_or(0)
}

/// Replaces the token of committed metadata (ours, either version) and keeps its map, for the
/// commit that raises the token at an assignment: `None` when the metadata is not ours, and the
/// caller writes a bare header for its position instead.
pub(crate) fn with_token(metadata: &str, token: u64) -> Option<String> {
    let rest = match metadata.strip_prefix(MAGIC) {
        Some(rest) => rest.split_once(';')?.1,
        None => metadata.strip_prefix(MAGIC_V1)?,
    };
    Some(format!("{MAGIC}{token};{rest}"))
}

/// The commit that raises a partition's fencing token at an assignment: the token one more than
/// the one `committed` metadata carries, and that metadata with the new token (its map kept),
/// or a bare header for `position` when the metadata is not ours.
pub(crate) fn raised(committed: Option<&str>, position: i64) -> (u64, String) {
    let committed = committed.unwrap_or("");
    let next = token(committed).saturating_add(1);
    let text = with_token(committed, next).unwrap_or_else(|| encode(next, position, &[]));
    (next, text)
}

/// Reads committed metadata as the map for the committed `position`.
pub(crate) fn decode(metadata: &str, position: i64) -> Result<Runs, MapError> {
    let rest = match metadata.strip_prefix(MAGIC) {
        Some(rest) => {
            let (token, rest) = rest
                .split_once(';')
                .ok_or(MapError::Malformed("no token"))?;
            token
                .parse::<u64>()
                .map_err(|_| MapError::Malformed("token is not a number"))?;
            rest
        }
        None => metadata.strip_prefix(MAGIC_V1).ok_or(MapError::Foreign)?,
    };
    let (written_for, body) = rest
        .split_once(';')
        .ok_or(MapError::Malformed("no position"))?;
    let written_for: i64 = written_for
        .parse()
        .map_err(|_| MapError::Malformed("position is not a number"))?;
    if written_for != position {
        return Err(MapError::OtherPosition { written_for });
    }
    let mut chars = body.chars();
    let kind = chars.next().ok_or(MapError::Malformed("no kind"))?;
    let bytes = unbase64(chars.as_str())?;
    let base = position
        .checked_add(1)
        .ok_or(MapError::Malformed("position overflows"))?;
    let mut runs: Runs = Vec::new();
    match kind {
        'r' => {
            let mut input = bytes.as_slice();
            let mut cursor = base;
            while !input.is_empty() {
                let gap = read_varint(&mut input)?;
                let len = read_varint(&mut input)?;
                if len == 0 || (gap == 0 && !runs.is_empty()) {
                    return Err(MapError::Malformed("empty or adjacent run"));
                }
                let start = add(cursor, gap)?;
                let end = add(start, len)?;
                runs.push((start, end));
                cursor = end;
            }
        }
        'b' => {
            for (i, byte) in bytes.iter().enumerate() {
                for bit in 0..8 {
                    if byte & (1 << bit) == 0 {
                        continue;
                    }
                    let offset = add(base, (i as u64) * 8 + bit)?;
                    match runs.last_mut() {
                        Some((_, end)) if *end == offset => *end += 1,
                        _ => runs.push((offset, offset + 1)),
                    }
                }
            }
        }
        _ => return Err(MapError::Malformed("unknown kind")),
    }
    Ok(runs)
}

fn add(offset: i64, delta: u64) -> Result<i64, MapError> {
    i64::try_from(delta)
        .ok()
        .and_then(|d| offset.checked_add(d))
        .ok_or(MapError::Malformed("offset overflows"))
}

fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn read_varint(input: &mut &[u8]) -> Result<u64, MapError> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = input
            .split_first()
            .ok_or(MapError::Malformed("truncated number"))?;
        *input = rest;
        value |= u64::from(byte & 0x7f)
            .checked_shl(shift)
            .ok_or(MapError::Malformed("number too long"))?;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(MapError::Malformed("number too long"))
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

fn base64(out: &mut String, bytes: &[u8]) {
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | (u32::from(b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 0x3f) as usize] as char);
        }
    }
}

fn unbase64(text: &str) -> Result<Vec<u8>, MapError> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.bytes() {
        let value = ALPHABET
            .iter()
            .position(|&a| a == c)
            .ok_or(MapError::Malformed("not base64url"))? as u32;
        acc = (acc << 6) | value;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    if bits >= 6 {
        return Err(MapError::Malformed("dangling base64url character"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quick_room_check_agrees_with_the_exact_length_everywhere() {
        let positions = [0, 7, 9, 10, 99_999, 1 << 40, i64::MAX - 1_000, -1, i64::MIN];
        for position in positions {
            for span in [0, 1, 8, 9, 100, 5_000] {
                let last = position.saturating_add(span);
                let exact = worst_case_len(position, last);
                for limit in exact.saturating_sub(30)..exact + 30 {
                    assert_eq!(
                        always_fits(position, last, limit),
                        exact <= limit,
                        "position {position}, last {last}, limit {limit}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_map_reads_back_as_written_in_both_forms() {
        let sparse = vec![(102, 111), (5000, 5001)];
        let text = encode(4, 101, &sparse);
        assert!(text.starts_with("rgc2;4;101;r"), "{text}");
        assert_eq!(decode(&text, 101), Ok(sparse));
        let dense: Runs = (0..200).map(|i| (102 + 2 * i, 103 + 2 * i)).collect();
        let text = encode(4, 101, &dense);
        assert!(text.starts_with("rgc2;4;101;b"), "{text}");
        assert_eq!(decode(&text, 101), Ok(dense.clone()));
        assert!(text.len() <= worst_case_len(101, 102 + 2 * 199));
        assert_eq!(decode(&encode(0, 7, &[]), 7), Ok(vec![]));
    }

    #[test]
    fn the_header_length_is_counted_as_it_is_written() {
        for position in [0, 9, 10, 99, 100, 123_456, i64::MAX, -1, i64::MIN] {
            assert_eq!(
                header_len(position),
                format!("{MAGIC}{};{position};", u64::MAX).len(),
                "{position}"
            );
        }
    }

    #[test]
    fn metadata_that_is_not_ours_or_not_for_this_position_is_ignored() {
        assert_eq!(decode("", 3), Err(MapError::Foreign));
        assert_eq!(
            decode("written by the java client", 3),
            Err(MapError::Foreign)
        );
        assert_eq!(
            decode(&encode(1, 101, &[(103, 104)]), 150),
            Err(MapError::OtherPosition { written_for: 101 })
        );
    }

    #[test]
    fn malformed_maps_are_errors_never_panics_or_huge_allocations() {
        for bad in [
            "rgc1;",
            "rgc1;x;r",
            "rgc1;1;",
            "rgc1;1;q",
            "rgc1;1;r*",
            "rgc1;1;r_",
            "rgc1;1;r____________w",
            "rgc1;9223372036854775806;rAQ",
            "rgc2;",
            "rgc2;x;1;r",
            "rgc2;-1;1;r",
            "rgc2;18446744073709551616;1;r",
            "rgc2;1;",
            "rgc2;1;x;r",
            "rgc2;1;1;q",
        ] {
            assert!(
                matches!(decode(bad, 1), Err(MapError::Malformed(_)))
                    || matches!(
                        decode(bad, 9223372036854775806),
                        Err(MapError::Malformed(_))
                    ),
                "{bad}"
            );
        }
        // A run of 2^62 offsets is three ranges' worth of memory, not 2^62 entries.
        let mut rle = Vec::new();
        varint(&mut rle, 0);
        varint(&mut rle, 1 << 62);
        let mut text = format!("{MAGIC}3;0;r");
        base64(&mut text, &rle);
        assert_eq!(decode(&text, 0), Ok(vec![(1, 1 + (1 << 62))]));
    }

    #[test]
    fn the_worst_case_bound_holds_for_every_pattern_of_a_span() {
        for pattern in 0u32..(1 << 12) {
            let runs: Runs = (0..12).filter(|i| pattern & (1 << i) != 0).fold(
                Vec::new(),
                |mut runs: Runs, i| {
                    let offset = 11 + i64::from(i);
                    match runs.last_mut() {
                        Some((_, end)) if *end == offset => *end += 1,
                        _ => runs.push((offset, offset + 1)),
                    }
                    runs
                },
            );
            let text = encode(u64::MAX, 10, &runs);
            assert!(text.len() <= worst_case_len(10, 22), "{pattern:b}: {text}");
            assert_eq!(decode(&text, 10), Ok(runs));
        }
    }

    #[test]
    fn the_token_reads_back_from_either_version_and_is_zero_otherwise() {
        assert_eq!(token(&encode(42, 101, &[(103, 104)])), 42);
        assert_eq!(token(&encode(u64::MAX, 0, &[])), u64::MAX);
        for other in [
            "",
            "rgc1;101;r",
            "java metadata",
            "rgc2;",
            "rgc2;x;1;r",
            "rgc2;-3;1;r",
        ] {
            assert_eq!(token(other), 0, "{other}");
        }
        // Version 1 is read as a map, with token 0.
        assert_eq!(decode("rgc1;101;r", 101), Ok(vec![]));
    }

    #[test]
    fn raising_the_token_keeps_the_map() {
        let runs = vec![(103, 104), (200, 210)];
        let raised = with_token(&encode(6, 101, &runs), 7).expect("ours");
        assert_eq!(token(&raised), 7);
        assert_eq!(decode(&raised, 101), Ok(runs));
        let from_v1 = with_token("rgc1;101;r", 1).expect("ours");
        assert_eq!(from_v1, "rgc2;1;101;r");
        assert_eq!(with_token("java metadata", 3), None);
        assert_eq!(with_token("rgc2;", 3), None);
    }
}
