//! The one name every layer uses for "a partition of a topic".

use std::fmt;
use std::hash::Hasher;
use std::sync::Arc;

/// Identifies a partition of a topic.
///
/// Every layer (guard, wire, group, consumer) keys its state by this type, so an assignment
/// decoded from the network can be handed to the guard without conversion. The topic is an
/// `Arc<str>` because the same topic name is shared by many partitions and many records; cloning a
/// `TopicPartition` must stay cheap on the hot path.
#[derive(Clone, Debug, PartialOrd, Ord)]
pub struct TopicPartition {
    /// Topic name.
    pub topic: Arc<str>,
    /// Partition index within the topic.
    pub partition: i32,
}

impl TopicPartition {
    /// Builds a `TopicPartition` from anything that converts into a shared topic name.
    pub fn new(topic: impl Into<Arc<str>>, partition: i32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }
}

// Equality and hashing sit on the per-record path. Topic names are usually the same interned
// `Arc`, so a pointer comparison settles most equalities before any byte is compared.
impl PartialEq for TopicPartition {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        self.partition == other.partition
            && (Arc::ptr_eq(&self.topic, &other.topic) || *self.topic == *other.topic)
    }
}

impl Eq for TopicPartition {}

impl std::hash::Hash for TopicPartition {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write(self.topic.as_bytes());
        state.write_i32(self.partition);
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// A fast, unkeyed hasher for maps keyed by [`TopicPartition`].
///
/// Partition maps sit on the per-record path, and their keys are partitions this member was
/// assigned (named by configuration and the broker, not by message contents), so hash flooding is
/// not a concern there and SipHash's cost is not worth paying. Never use it for keys taken from
/// message data.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct PartitionHasher {
    hash: u64,
}

impl PartitionHasher {
    const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

    #[inline]
    fn mix(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(Self::SEED);
    }
}

impl Hasher for PartitionHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.mix(u64::from_le_bytes(word));
        }
        // Assembled byte by byte: a variable-length copy would be a `memcpy` call per hash.
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let word = rest
                .iter()
                .rev()
                .fold(0u64, |word, &b| (word << 8) | u64::from(b));
            self.mix(word);
        }
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
    fn write_i32(&mut self, n: i32) {
        self.mix(u64::from(n as u32));
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.mix(n);
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.mix(n as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}

/// A map keyed by partition with [`PartitionHasher`]: the consumer's per-partition maps are read
/// several times per record, and SipHash over the topic name was a tenth of the whole loop.
pub(crate) type PartitionMap<V> =
    std::collections::HashMap<TopicPartition, V, std::hash::BuildHasherDefault<PartitionHasher>>;

/// A set of partitions with [`PartitionHasher`] (see [`PartitionMap`]).
pub(crate) type PartitionSet =
    std::collections::HashSet<TopicPartition, std::hash::BuildHasherDefault<PartitionHasher>>;
