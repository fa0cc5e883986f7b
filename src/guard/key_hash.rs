//! A keyed hash for idempotency keys: fast, and seeded per process so that a producer cannot
//! precompute colliding keys.
//!
//! Keys come from message data, so an unkeyed hash would let whoever writes to the topic craft
//! keys that all land in one probe run and make every admission a linear scan. std's SipHash-1-3
//! prevents that but costs more than the rest of an admission (measured: about 140 instructions
//! for a `u64`, against about 30 here). This is the folded-multiply construction used by the
//! fast seeded hashers (a 64x64->128-bit multiply whose halves are XORed), with two secret 64-bit
//! seeds drawn from std's own per-process random keys. It is not a cryptographic PRF; it makes
//! collision crafting infeasible without learning the seeds, which a remote producer cannot
//! observe. The set confirms every hit by comparing the keys themselves, so even a collision can
//! only weaken duplicate detection, never drop a new message.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

const MULTIPLE: u64 = 0x5851_f42d_4c95_7f2d;

#[inline]
pub(super) fn folded_multiply(a: u64, b: u64) -> u64 {
    let full = u128::from(a) * u128::from(b);
    (full as u64) ^ ((full >> 64) as u64)
}

/// Packs up to 7 bytes into a word without a variable-length copy (which would be a `memcpy`
/// call per hash): two overlapping loads for 4 to 7 bytes, three single bytes below that. Equal
/// inputs give equal words; the caller mixes the length in separately.
#[inline]
pub(super) fn short_word(bytes: &[u8]) -> u64 {
    let n = bytes.len();
    if n >= 4 {
        let low = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        let high = u32::from_le_bytes([bytes[n - 4], bytes[n - 3], bytes[n - 2], bytes[n - 1]]);
        u64::from(low) | (u64::from(high) << 32)
    } else if n > 0 {
        u64::from(bytes[0]) | (u64::from(bytes[n / 2]) << 8) | (u64::from(bytes[n - 1]) << 16)
    } else {
        0
    }
}

/// Builds [`KeyHasher`]s that share this process's secret seeds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeyHashBuilder {
    seed: u64,
    finish_seed: u64,
}

impl KeyHashBuilder {
    /// Draws fresh secret seeds from std's per-process random keys.
    pub(crate) fn new() -> Self {
        let random = RandomState::new();
        KeyHashBuilder {
            seed: random.hash_one(0x243f_6a88_85a3_08d3u64) | 1,
            finish_seed: random.hash_one(0x1319_8a2e_0370_7344u64),
        }
    }
}

impl BuildHasher for KeyHashBuilder {
    type Hasher = KeyHasher;

    #[inline]
    fn build_hasher(&self) -> KeyHasher {
        KeyHasher {
            state: self.seed,
            finish_seed: self.finish_seed,
        }
    }
}

/// The hasher of one key.
pub(crate) struct KeyHasher {
    state: u64,
    finish_seed: u64,
}

impl KeyHasher {
    #[inline]
    fn mix(&mut self, word: u64) {
        self.state = folded_multiply(self.state ^ word, MULTIPLE);
    }
}

impl Hasher for KeyHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.mix(u64::from_le_bytes(word));
        }
        self.mix(short_word(chunks.remainder()));
        // The length goes in too, so "a" and "a\0" differ.
        self.mix(bytes.len() as u64);
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.mix(n);
    }

    #[inline]
    fn write_u8(&mut self, n: u8) {
        self.mix(u64::from(n));
    }

    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.mix(u64::from(n));
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.mix(n as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        folded_multiply(self.state, self.finish_seed)
    }
}

#[cfg(test)]
mod tests {
    use super::KeyHashBuilder;
    use std::collections::HashSet;
    use std::hash::BuildHasher;

    #[test]
    fn seeds_differ_per_builder_and_outputs_spread() {
        let (a, b) = (KeyHashBuilder::new(), KeyHashBuilder::new());
        assert_ne!(a.hash_one(42u64), b.hash_one(42u64), "seeded per builder");
        assert_eq!(a.hash_one("order-1"), a.hash_one("order-1"));
        // Sequential keys, as order ids often are, must not collide or cluster in low bits.
        let low_bits: HashSet<u64> = (0..4096u64).map(|k| a.hash_one(k) & 0xfff).collect();
        assert!(low_bits.len() > 2400, "{} distinct of 4096", low_bits.len());
        let full: HashSet<u64> = (0..100_000u64)
            .map(|k| a.hash_one(format!("order-{k}")))
            .collect();
        assert_eq!(full.len(), 100_000);
    }
}
