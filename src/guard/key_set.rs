//! The guard's idempotency keys: a bounded set of recently seen keys shared by every partition,
//! split, when configured, into shards so that threads admitting keyed records do not take turns
//! on one lock.
//!
//! A key is a duplicate whichever partition it arrives on (an order id republished to another
//! partition is still the same order), so the set cannot live in the partition's entry. Each key
//! is hashed once; the top bits of that hash pick the shard and the rest find the key inside it.
//! The number of shards is `GuardConfig::idempotency_shards`, one by default: a single admitting
//! thread (the consumer's poll thread) gains nothing from more and pays for them in cache misses.
//! It is lowered so that every shard holds at least [`SHARD_KEYS`] keys. Shards have equal
//! capacities and each replaces only its own keys (`recent.rs` says which), so what is replaced
//! first is a key not seen recently *in its shard*. The keyed hash is seeded per process, so a
//! producer cannot aim its keys at one shard.
//!
//! Lock discipline: a shard's lock is the innermost lock of the guard. It is taken with a
//! partition's lock held (admission, and forgetting the keys of discarded work), never the other
//! way round, and no caller code runs under it.

use std::hash::{BuildHasher, Hash};
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::key_hash::KeyHashBuilder;
use super::recent::{KeyRef, RecentKeys};

/// A shard is split off only when each shard still holds at least this many keys.
pub(crate) const SHARD_KEYS: usize = 4096;

/// A handle on one remembered key, so that discarded work can forget its key later without
/// keeping a second copy of it. It goes stale, harmlessly, once the key is evicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeyHandle {
    shard: u32,
    key: KeyRef,
}

/// The bounded, sharded set of recently admitted idempotency keys.
pub(crate) struct KeySet<K> {
    capacity: usize,
    hasher: KeyHashBuilder,
    shards: Box<[Mutex<RecentKeys<K>>]>,
    /// `64 - log2(shards)`: the hash's top bits name the shard (a shift of 64 is never used).
    shift: u32,
}

impl<K: Eq + Hash> KeySet<K> {
    /// A set that remembers at most `capacity` keys (rounded up to a multiple of the shard
    /// count) in up to `shards` shards (a power of two, checked by `GuardConfig::validate`);
    /// zero remembers nothing.
    pub(crate) fn new(capacity: usize, shards: usize) -> Self {
        let shards = shards.min(capacity / SHARD_KEYS).max(1);
        // A power of two at most `shards`, so the top bits of the hash pick one evenly.
        let shards = 1usize << shards.ilog2();
        let per_shard = capacity.div_ceil(shards);
        KeySet {
            capacity,
            hasher: KeyHashBuilder::new(),
            shards: (0..shards)
                .map(|_| Mutex::new(RecentKeys::new(per_shard)))
                .collect(),
            shift: 64 - shards.ilog2(),
        }
    }

    #[inline]
    fn shard(&self, hash: u64) -> (usize, MutexGuard<'_, RecentKeys<K>>) {
        let shard = if self.shards.len() == 1 {
            0
        } else {
            (hash >> self.shift) as usize
        };
        let keys = self.shards[shard]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        (shard, keys)
    }

    /// True when the key is remembered; does not change its recency.
    pub(crate) fn contains(&self, key: &K) -> bool {
        if self.capacity == 0 {
            return false;
        }
        let hash = self.hasher.hash_one(key);
        self.shard(hash).1.contains(key, hash)
    }

    /// Remembers `key` as most recently used and returns its handle, or returns `None`
    /// (refreshing its recency) when it was already remembered: a duplicate. With capacity zero
    /// every key is new and nothing is remembered.
    pub(crate) fn insert(&self, key: K) -> Option<Option<KeyHandle>> {
        if self.capacity == 0 {
            return Some(None);
        }
        let hash = self.hasher.hash_one(&key);
        let (shard, mut keys) = self.shard(hash);
        let inserted = keys.insert(key, hash)?;
        Some(inserted.map(|key| KeyHandle {
            shard: shard as u32,
            key,
        }))
    }

    /// Forgets the key behind `handle` if it is still the same insertion.
    pub(crate) fn forget(&self, handle: KeyHandle) -> bool {
        self.shards.get(handle.shard as usize).is_some_and(|keys| {
            keys.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .forget(handle.key)
        })
    }

    /// Keys remembered now, over every shard.
    pub(crate) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|keys| keys.lock().unwrap_or_else(PoisonError::into_inner).len())
            .sum()
    }

    #[cfg(test)]
    fn shard_count(&self) -> usize {
        self.shards.len()
    }
}

#[cfg(test)]
mod tests {
    use super::{KeySet, SHARD_KEYS};

    const SHARDS: usize = 16;

    #[test]
    fn shards_as_configured_but_never_below_their_minimum_size() {
        assert_eq!(KeySet::<u64>::new(100_000, 1).shard_count(), 1);
        assert_eq!(KeySet::<u64>::new(0, SHARDS).shard_count(), 1);
        assert_eq!(
            KeySet::<u64>::new(SHARD_KEYS * 2 - 1, SHARDS).shard_count(),
            1
        );
        assert_eq!(KeySet::<u64>::new(SHARD_KEYS * 2, SHARDS).shard_count(), 2);
        assert_eq!(KeySet::<u64>::new(SHARD_KEYS * 7, SHARDS).shard_count(), 4);
        assert_eq!(KeySet::<u64>::new(100_000, SHARDS).shard_count(), SHARDS);
        assert_eq!(KeySet::<u64>::new(100_000, 4).shard_count(), 4);
        assert_eq!(KeySet::<u64>::new(usize::MAX / 2, 64).shard_count(), 64);
    }

    #[test]
    fn a_sharded_set_finds_duplicates_forgets_by_handle_and_stays_bounded() {
        let capacity = SHARD_KEYS * SHARDS;
        let keys: KeySet<u64> = KeySet::new(capacity, SHARDS);
        let handles: Vec<_> = (0..1_000u64)
            .map(|k| keys.insert(k).flatten().expect("a new key"))
            .collect();
        assert!(
            (0..1_000u64).all(|k| keys.insert(k).is_none()),
            "duplicates"
        );
        assert!(keys.forget(handles[7]));
        assert!(!keys.contains(&7) && keys.contains(&8));
        assert!(keys.insert(7).is_some(), "a forgotten key is new again");
        for k in 1_000..(3 * capacity as u64) {
            keys.insert(k);
        }
        assert!(keys.len() <= capacity);
        // Every shard filled up: the set holds about its capacity, not a fraction of it.
        assert!(keys.len() > capacity - SHARDS * 64, "{}", keys.len());
        assert!(!keys.contains(&0), "the oldest keys were evicted");
    }

    #[test]
    fn zero_capacity_remembers_nothing() {
        let keys: KeySet<&str> = KeySet::new(0, 1);
        assert_eq!(keys.insert("a"), Some(None));
        assert_eq!(keys.insert("a"), Some(None));
        assert!(!keys.contains(&"a"));
        assert_eq!(keys.len(), 0);
    }
}
