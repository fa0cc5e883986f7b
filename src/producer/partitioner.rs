//! Which partition a record goes to, as Java's producer decides it, so that a key lands on the
//! same partition whichever client wrote it (and a consumer keyed by partition sees one order):
//!
//! - an explicit partition wins;
//! - a keyed record goes to `toPositive(murmur2(key)) % partitions`, Java's
//!   `BuiltInPartitioner.partitionForKey` (the `Utils.murmur2` seed and mixing, bit for bit);
//! - a keyless record (or any record with `partitioner.ignore.keys`) sticks to one partition
//!   until `batch.size` bytes went there, then moves to another chosen uniformly at random
//!   (KIP-480's sticky partitioner with KIP-794's switch by bytes produced, not by batch
//!   completion, which had skewed the load towards slow brokers).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Kafka's murmur2 (32-bit, seed 0x9747b28c), as `org.apache.kafka.common.utils.Utils.murmur2`.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let length = data.len() as u32;
    let mut h: u32 = SEED ^ length;
    let chunks = data.chunks_exact(4);
    let tail = chunks.remainder();
    for chunk in chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    match tail.len() {
        3 => {
            h ^= u32::from(tail[2]) << 16;
            h ^= u32::from(tail[1]) << 8;
            h ^= u32::from(tail[0]);
            h = h.wrapping_mul(M);
        }
        2 => {
            h ^= u32::from(tail[1]) << 8;
            h ^= u32::from(tail[0]);
            h = h.wrapping_mul(M);
        }
        1 => {
            h ^= u32::from(tail[0]);
            h = h.wrapping_mul(M);
        }
        _ => {}
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition Java's producer picks for `key` among `partitions` (> 0).
pub fn partition_for_key(key: &[u8], partitions: i32) -> i32 {
    // Utils.toPositive: clear the sign bit (not abs: i32::MIN has none).
    (murmur2(key) & 0x7fff_ffff) % partitions.max(1)
}

/// The sticky choice for keyless records, per topic.
#[derive(Debug)]
pub(crate) struct Sticky {
    batch_size: usize,
    topics: HashMap<Arc<str>, Stick>,
    rng: u64,
}

#[derive(Debug, Clone, Copy)]
struct Stick {
    partition: i32,
    bytes: usize,
}

impl Sticky {
    /// Switches partitions after `batch_size` bytes.
    pub(crate) fn new(batch_size: usize) -> Self {
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x2545_f491_4f6c_dd1d);
        Sticky {
            batch_size,
            topics: HashMap::new(),
            rng: seed | 1,
        }
    }

    /// The partition for a keyless record of `size` bytes to `topic` with `partitions`.
    pub(crate) fn partition(&mut self, topic: &Arc<str>, partitions: i32, size: usize) -> i32 {
        let partitions = partitions.max(1);
        let current = self.topics.get(topic).copied();
        let stick = match current {
            Some(s) if s.partition < partitions && s.bytes < self.batch_size => s,
            Some(s) => Stick {
                partition: self.other_than(s.partition, partitions),
                bytes: 0,
            },
            None => Stick {
                partition: self.next_below(partitions),
                bytes: 0,
            },
        };
        let chosen = stick.partition;
        self.topics.insert(
            Arc::clone(topic),
            Stick {
                partition: chosen,
                bytes: stick.bytes.saturating_add(size),
            },
        );
        chosen
    }

    /// A partition other than `current`, uniformly (when there is another).
    fn other_than(&mut self, current: i32, partitions: i32) -> i32 {
        if partitions == 1 {
            return 0;
        }
        let pick = self.next_below(partitions - 1);
        if pick >= current {
            pick + 1
        } else {
            pick
        }
    }

    /// A number in `0..n` (xorshift64*: the choice needs spread, not secrecy).
    fn next_below(&mut self, n: i32) -> i32 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let x = self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d);
        ((x >> 33) % n.max(1) as u64) as i32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The values of Kafka's own `UtilsTest.testMurmur2`.
    #[test]
    fn murmur2_matches_kafkas_utils() {
        let cases: &[(&[u8], i32)] = &[
            (b"21", -973932308),
            (b"foobar", -790332482),
            (b"a-little-bit-long-string", -985981536),
            (b"a-little-bit-longer-string", -1486304829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58897971,
            ),
            (b"abc", 479470107),
        ];
        for (key, want) in cases {
            assert_eq!(murmur2(key), *want, "{}", String::from_utf8_lossy(key));
        }
    }

    #[test]
    fn a_key_always_lands_on_one_partition_in_range() {
        for i in 0..10_000 {
            let key = format!("acct-{i}");
            let p = partition_for_key(key.as_bytes(), 12);
            assert!((0..12).contains(&p));
            assert_eq!(p, partition_for_key(key.as_bytes(), 12));
        }
    }

    /// Keyless records stay on one partition for `batch.size` bytes, then move, and over many
    /// switches every partition gets its share.
    #[test]
    fn sticky_switches_after_batch_size_bytes_and_spreads() {
        let topic: Arc<str> = Arc::from("t");
        let mut sticky = Sticky::new(1000);
        let first = sticky.partition(&topic, 6, 100);
        for _ in 0..9 {
            assert_eq!(sticky.partition(&topic, 6, 100), first);
        }
        let next = sticky.partition(&topic, 6, 100);
        assert_ne!(next, first, "switched after 1000 bytes");
        let mut counts = [0u32; 6];
        for _ in 0..60_000 {
            counts[sticky.partition(&topic, 6, 100) as usize] += 1;
        }
        for c in counts {
            assert!((7_000..13_000).contains(&c), "{counts:?}");
        }
    }
}
