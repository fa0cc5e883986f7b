//! Fuzz target (b): the decompressors, one codec per input.
//!
//! Input layout: byte 0 picks the codec (mod 4: gzip, snappy, lz4, zstd), byte 1 the output
//! limit (2^(byte mod 21) bytes); the rest is the compressed data.
//!
//! Properties: no panic; output never longer than the limit; and the rest of the input, as
//! plain data, round-trips through every codec's encoder and decoder, exactly at a limit of its
//! length, and is reported over the limit one byte below it.

use kafka_protocol::records::Compression;

use crate::wire::compression::{compress, decompress, DecompressError};

const CODECS: [Compression; 4] = [
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

/// Runs target (b) on one input.
pub fn check(input: &[u8]) {
    let [selector, limit, data @ ..] = input else {
        return;
    };
    let codec = CODECS[usize::from(*selector) % CODECS.len()];
    let limit = 1usize << (limit % 21);
    if let Ok(out) = decompress(data, codec, limit) {
        assert!(
            out.len() <= limit,
            "{codec:?}: {} bytes out, limit {limit}",
            out.len()
        );
    }
    for codec in CODECS {
        let Ok(packed) = compress(data, codec) else {
            continue; // codec feature off
        };
        let back = decompress(&packed, codec, data.len());
        assert_eq!(back.as_deref().ok(), Some(data), "{codec:?} round trip");
        if !data.is_empty() {
            assert_eq!(
                decompress(&packed, codec, data.len() - 1),
                Err(DecompressError::OverLimit {
                    limit: data.len() - 1
                }),
                "{codec:?}: one byte over the limit"
            );
        }
    }
}

/// Seeds: each codec's output for a few payloads (so mutations start from valid streams), and
/// snappy-java framing.
pub(crate) fn seeds() -> Vec<Vec<u8>> {
    let payloads: [&[u8]; 3] = [b"", b"hello hello hello hello", &[0u8; 3000]];
    let mut out = Vec::new();
    for (i, codec) in CODECS.iter().enumerate() {
        for p in payloads {
            if let Ok(packed) = compress(p, *codec) {
                let mut input = vec![i as u8, 16];
                input.extend(packed);
                out.push(input);
            }
        }
    }
    if let Ok(raw) = compress(b"framed framed framed", Compression::Snappy) {
        let mut input = vec![
            1u8, 12, 0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1,
        ];
        input.extend((raw.len() as i32).to_be_bytes());
        input.extend(raw);
        out.push(input);
    }
    out
}
