//! Pure-Rust decompression of record batches, one cargo feature per codec.
//!
//! `kafka-protocol`'s built-in codecs link C libraries (zstd, lz4); we hand it these instead
//! through `RecordBatchDecoder::decode_with_custom_compression`, so the default build needs no C
//! toolchain. Every codec is bounded by a limit on the decompressed size: a batch of a few KiB
//! must not be able to expand into gigabytes (a "decompression bomb"). The limit is what is left
//! of the Fetch response's decode budget, so the caller can tell "over the limit" (stop at this
//! batch, fetch it again later) from "corrupt" (an error) by [`DecompressError`].

#[cfg(any(feature = "gzip", feature = "lz4", feature = "zstd"))]
use std::io::Read;

use kafka_protocol::records::Compression;

/// Why a record section could not be decompressed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum DecompressError {
    /// The output would exceed the limit the caller gave: not corrupt, only too large for what is
    /// left of the budget.
    OverLimit {
        /// The limit that was exceeded.
        limit: usize,
    },
    /// The bytes are not a valid stream of the codec (or the codec's feature is off).
    Corrupt(String),
}

impl std::fmt::Display for DecompressError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecompressError::OverLimit { limit } => {
                write!(f, "decompresses to more than the limit of {limit} bytes")
            }
            DecompressError::Corrupt(reason) => f.write_str(reason),
        }
    }
}

/// A leaf: it wraps no other error.
impl std::error::Error for DecompressError {}

fn corrupt(reason: String) -> DecompressError {
    DecompressError::Corrupt(reason)
}

/// Decompresses the record section of one batch, returning at most `limit` bytes or an error.
///
/// `Compression::None` is the caller's business (it needs no copy at all) and is rejected here.
pub(crate) fn decompress(
    data: &[u8],
    codec: Compression,
    limit: usize,
) -> Result<Vec<u8>, DecompressError> {
    match codec {
        Compression::None => Err(corrupt(
            "decompress called for an uncompressed batch".to_string(),
        )),
        Compression::Gzip => gzip(data, limit),
        Compression::Snappy => snappy(data, limit),
        Compression::Lz4 => lz4(data, limit),
        Compression::Zstd => zstd(data, limit),
    }
}

/// Compresses `raw` with `codec` the way producers do (gzip stream, raw snappy block, LZ4 frame,
/// zstd frame), each at its default level; the producer's batches go through [`compress_at`],
/// tests and fuzz targets through this.
pub(crate) fn compress(raw: &[u8], codec: Compression) -> Result<Vec<u8>, String> {
    #[cfg(any(feature = "gzip", feature = "lz4"))]
    use std::io::Write;
    match codec {
        Compression::None => Ok(raw.to_vec()),
        #[cfg(feature = "gzip")]
        Compression::Gzip => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(raw).map_err(|e| e.to_string())?;
            e.finish().map_err(|e| e.to_string())
        }
        #[cfg(feature = "snappy")]
        Compression::Snappy => snap::raw::Encoder::new()
            .compress_vec(raw)
            .map_err(|e| e.to_string()),
        #[cfg(feature = "lz4")]
        Compression::Lz4 => {
            let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
            e.write_all(raw).map_err(|e| e.to_string())?;
            e.finish().map_err(|e| e.to_string())
        }
        #[cfg(feature = "zstd")]
        Compression::Zstd => Ok(ruzstd::encoding::compress_to_vec(
            raw,
            ruzstd::encoding::CompressionLevel::Fastest,
        )),
        #[allow(unreachable_patterns)]
        c => Err(format!(
            "{c:?}: the cargo feature for this codec is disabled"
        )),
    }
}

/// Compresses a batch's record section with `codec` at `level` (`None`: the codec's default),
/// as the producer does: a gzip stream, a raw snappy block (as librdkafka writes it; Java's
/// consumer reads it too), an LZ4 frame, a zstd frame.
pub(crate) fn compress_at(
    raw: &[u8],
    codec: Compression,
    level: Option<i32>,
) -> Result<Vec<u8>, String> {
    match codec {
        #[cfg(feature = "gzip")]
        Compression::Gzip => {
            use std::io::Write;
            let level = match level {
                Some(l @ 1..=9) => flate2::Compression::new(l as u32),
                _ => flate2::Compression::default(),
            };
            let mut e = flate2::write::GzEncoder::new(Vec::with_capacity(raw.len() / 2), level);
            e.write_all(raw).map_err(|e| e.to_string())?;
            e.finish().map_err(|e| e.to_string())
        }
        #[cfg(feature = "zstd")]
        Compression::Zstd => Ok(ruzstd::encoding::compress_to_vec(
            raw,
            if level == Some(0) {
                ruzstd::encoding::CompressionLevel::Uncompressed
            } else {
                ruzstd::encoding::CompressionLevel::Fastest
            },
        )),
        other => compress(raw, other),
    }
}

/// Reads `reader` to the end, failing once more than `limit` bytes come out.
#[cfg(any(feature = "gzip", feature = "lz4", feature = "zstd"))]
fn read_bounded(
    mut reader: impl Read,
    limit: usize,
    hint: usize,
    out: &mut Vec<u8>,
    codec: &str,
) -> Result<(), DecompressError> {
    // Why not `read_to_end`: a growing Vec doubles its capacity, so a stream that stops just
    // past the limit would briefly hold twice the limit. Here the capacity never exceeds the
    // limit plus one chunk, whatever the stream claims or does.
    const CHUNK: usize = 64 * 1024;
    out.reserve(hint.min(limit.saturating_sub(out.len())));
    let mut chunk = [0u8; CHUNK];
    loop {
        let n = match reader.read(&mut chunk) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(corrupt(format!("{codec} decompression failed: {e}"))),
        };
        let needed = out.len().saturating_add(n);
        if needed > limit {
            return Err(DecompressError::OverLimit { limit });
        }
        if needed > out.capacity() {
            let grown = out.capacity().saturating_mul(2).max(needed).min(limit);
            out.reserve_exact(grown - out.len());
        }
        out.extend_from_slice(&chunk[..n]);
    }
}

#[cfg(feature = "gzip")]
fn gzip(data: &[u8], limit: usize) -> Result<Vec<u8>, DecompressError> {
    let mut out = Vec::new();
    read_bounded(
        flate2::read::MultiGzDecoder::new(data),
        limit,
        data.len() * 4,
        &mut out,
        "gzip",
    )?;
    Ok(out)
}

#[cfg(not(feature = "gzip"))]
fn gzip(_: &[u8], _: usize) -> Result<Vec<u8>, DecompressError> {
    Err(corrupt(
        "gzip batch, but the `gzip` cargo feature is disabled".to_string(),
    ))
}

#[cfg(feature = "lz4")]
fn lz4(data: &[u8], limit: usize) -> Result<Vec<u8>, DecompressError> {
    // Kafka v2 batches use the standard LZ4 frame format (KIP-57).
    let mut out = Vec::new();
    read_bounded(
        lz4_flex::frame::FrameDecoder::new(data),
        limit,
        data.len() * 4,
        &mut out,
        "lz4",
    )?;
    Ok(out)
}

#[cfg(not(feature = "lz4"))]
fn lz4(_: &[u8], _: usize) -> Result<Vec<u8>, DecompressError> {
    Err(corrupt(
        "lz4 batch, but the `lz4` cargo feature is disabled".to_string(),
    ))
}

#[cfg(feature = "zstd")]
fn zstd(data: &[u8], limit: usize) -> Result<Vec<u8>, DecompressError> {
    let mut out = Vec::new();
    let mut input = data;
    // A producer may emit several frames; decode them all.
    while !input.is_empty() {
        let decoder = ruzstd::decoding::StreamingDecoder::new(&mut input)
            .map_err(|e| corrupt(format!("zstd frame header: {e}")))?;
        read_bounded(decoder, limit, data.len() * 4, &mut out, "zstd")?;
    }
    Ok(out)
}

#[cfg(not(feature = "zstd"))]
fn zstd(_: &[u8], _: usize) -> Result<Vec<u8>, DecompressError> {
    Err(corrupt(
        "zstd batch, but the `zstd` cargo feature is disabled".to_string(),
    ))
}

/// The header snappy-java (used by the Java client) writes before its blocks.
#[cfg(feature = "snappy")]
const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];

#[cfg(feature = "snappy")]
fn snappy(data: &[u8], limit: usize) -> Result<Vec<u8>, DecompressError> {
    // Java producers use snappy-java's framing (magic, version, compat, then length-prefixed
    // raw blocks); librdkafka may write one raw block. Accept both, as Kafka's consumers do.
    let mut out = Vec::new();
    if data.len() >= 16 && data[..8] == XERIAL_MAGIC {
        let mut rest = &data[16..];
        while !rest.is_empty() {
            let (len_bytes, tail) = rest.split_at(rest.len().min(4));
            let len_bytes: [u8; 4] = len_bytes
                .try_into()
                .map_err(|_| corrupt("snappy-java block length is truncated".to_string()))?;
            let len = i32::from_be_bytes(len_bytes);
            let len = usize::try_from(len)
                .map_err(|_| corrupt(format!("negative snappy-java block length {len}")))?;
            if len > tail.len() {
                return Err(corrupt(format!(
                    "snappy-java block of {len} bytes but only {} remain",
                    tail.len()
                )));
            }
            let (block, next) = tail.split_at(len);
            snappy_raw(block, limit, &mut out)?;
            rest = next;
        }
    } else {
        snappy_raw(data, limit, &mut out)?;
    }
    Ok(out)
}

/// The most a raw snappy block can expand: its densest element is a 3-byte copy of 64 bytes
/// (21.3x); a block claiming more cannot be valid, whatever its length varint says.
#[cfg(feature = "snappy")]
const SNAPPY_MAX_EXPANSION: usize = 22;

#[cfg(feature = "snappy")]
fn snappy_raw(block: &[u8], limit: usize, out: &mut Vec<u8>) -> Result<(), DecompressError> {
    let n = snap::raw::decompress_len(block).map_err(|e| corrupt(format!("snappy: {e}")))?;
    // The claimed length sizes the output buffer (snap writes into an initialised slice), so an
    // impossible claim is refused before anything is allocated: 5 bytes must not cost a
    // 256 MiB memset.
    if n > block.len().saturating_mul(SNAPPY_MAX_EXPANSION) {
        return Err(corrupt(format!(
            "snappy block of {} bytes claims {n} bytes, more than snappy can expand",
            block.len()
        )));
    }
    if n > limit.saturating_sub(out.len()) {
        return Err(DecompressError::OverLimit { limit });
    }
    let start = out.len();
    out.resize(start + n, 0);
    let written = snap::raw::Decoder::new()
        .decompress(block, &mut out[start..])
        .map_err(|e| corrupt(format!("snappy: {e}")))?;
    out.truncate(start + written);
    Ok(())
}

#[cfg(not(feature = "snappy"))]
fn snappy(_: &[u8], _: usize) -> Result<Vec<u8>, DecompressError> {
    Err(corrupt(
        "snappy batch, but the `snappy` cargo feature is disabled".to_string(),
    ))
}

#[cfg(all(
    test,
    any(
        feature = "gzip",
        feature = "snappy",
        feature = "lz4",
        feature = "zstd"
    )
))]
mod tests {
    use super::*;

    #[cfg(feature = "gzip")]
    #[test]
    fn gzip_round_trip_and_bomb_limit() {
        use std::io::Write;
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        let payload = vec![b'a'; 100_000];
        assert!(enc.write_all(&payload).is_ok());
        let compressed = enc.finish().unwrap_or_default();
        assert_eq!(
            decompress(&compressed, Compression::Gzip, 1 << 20).ok(),
            Some(payload)
        );
        let err = decompress(&compressed, Compression::Gzip, 1000).err();
        assert_eq!(err, Some(DecompressError::OverLimit { limit: 1000 }));
    }

    #[cfg(feature = "snappy")]
    #[test]
    fn snappy_raw_and_xerial_framing() {
        let payload = b"hello hello hello hello".to_vec();
        let raw = snap::raw::Encoder::new()
            .compress_vec(&payload)
            .unwrap_or_default();
        assert_eq!(
            decompress(&raw, Compression::Snappy, 1000).ok(),
            Some(payload.clone())
        );
        let mut xerial = XERIAL_MAGIC.to_vec();
        xerial.extend_from_slice(&1i32.to_be_bytes());
        xerial.extend_from_slice(&1i32.to_be_bytes());
        for _ in 0..2 {
            xerial.extend_from_slice(&(raw.len() as i32).to_be_bytes());
            xerial.extend_from_slice(&raw);
        }
        let mut twice = payload.clone();
        twice.extend_from_slice(&payload);
        assert_eq!(
            decompress(&xerial, Compression::Snappy, 1000).ok(),
            Some(twice)
        );
        assert!(decompress(&xerial, Compression::Snappy, 30).is_err());
        // A block length pointing past the end is an error, not a panic.
        let mut bad = XERIAL_MAGIC.to_vec();
        bad.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1, 0x7f, 0, 0, 0]);
        assert!(decompress(&bad, Compression::Snappy, 1000).is_err());
    }

    #[cfg(feature = "snappy")]
    #[test]
    fn snappy_claim_beyond_its_expansion_is_refused_before_allocating() {
        // A length varint of 256 MiB and nothing else: five bytes that used to cost a 256 MiB
        // zero-filled buffer before the decoder noticed there was no data.
        let mut bomb = Vec::new();
        let mut n: u32 = 256 << 20;
        while n >= 0x80 {
            bomb.push((n as u8) | 0x80);
            n >>= 7;
        }
        bomb.push(n as u8);
        match decompress(&bomb, Compression::Snappy, usize::MAX) {
            Err(DecompressError::Corrupt(reason)) => {
                assert!(reason.contains("more than snappy can expand"), "{reason}")
            }
            other => panic!("expected a corrupt-data error, got {other:?}"),
        }
        // A claim within snappy's reach but above the limit is "over the limit", not corrupt.
        let raw = snap::raw::Encoder::new()
            .compress_vec(&[9u8; 10_000])
            .unwrap_or_default();
        assert_eq!(
            decompress(&raw, Compression::Snappy, 100),
            Err(DecompressError::OverLimit { limit: 100 })
        );
    }

    #[test]
    fn every_codec_reads_what_its_encoder_writes() {
        let raw: Vec<u8> = (0..20_000u32).map(|i| (i * 7 % 251) as u8).collect();
        for codec in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let Ok(packed) = compress(&raw, codec) else {
                continue; // that codec's feature is off
            };
            assert_eq!(
                decompress(&packed, codec, raw.len()).ok(),
                Some(raw.clone()),
                "{codec:?}"
            );
            assert_eq!(
                decompress(&packed, codec, raw.len() - 1),
                Err(DecompressError::OverLimit {
                    limit: raw.len() - 1
                }),
                "{codec:?}"
            );
        }
    }

    #[cfg(feature = "lz4")]
    #[test]
    fn lz4_frame_round_trip() {
        use std::io::Write;
        let payload = vec![7u8; 50_000];
        let mut enc = lz4_flex::frame::FrameEncoder::new(Vec::new());
        assert!(enc.write_all(&payload).is_ok());
        let compressed = enc.finish().unwrap_or_default();
        assert_eq!(
            decompress(&compressed, Compression::Lz4, 1 << 20).ok(),
            Some(payload)
        );
        assert!(decompress(&compressed, Compression::Lz4, 10).is_err());
        assert!(decompress(&[1, 2, 3], Compression::Lz4, 10).is_err());
    }

    #[cfg(feature = "zstd")]
    #[test]
    fn zstd_round_trip_and_garbage() {
        let payload = vec![3u8; 50_000];
        let compressed = ruzstd::encoding::compress_to_vec(
            payload.as_slice(),
            ruzstd::encoding::CompressionLevel::Fastest,
        );
        assert_eq!(
            decompress(&compressed, Compression::Zstd, 1 << 20).ok(),
            Some(payload)
        );
        assert!(decompress(&compressed, Compression::Zstd, 100).is_err());
        assert!(decompress(&[0xde, 0xad, 0xbe, 0xef, 1], Compression::Zstd, 100).is_err());
    }
}
