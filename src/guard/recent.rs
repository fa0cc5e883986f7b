//! A bounded set of recently seen idempotency keys.
//!
//! The guard refuses a message whose key it has seen recently, so that a redelivery to *this*
//! worker does not execute the same order twice. The set must be bounded: a consumer runs for
//! weeks, and an unbounded set is a slow memory leak. When it is full, a new key replaces one
//! chosen by the CLOCK algorithm (second chance), which approximates least-recently-used: the
//! slots form a ring swept by a hand; a key seen again since the hand last passed is spared once
//! (its mark cleared), the first unmarked key is replaced. Against a strict LRU list this saves
//! the two neighbour updates of every hit and every insertion, which on a set of 100,000 keys
//! are two cache misses each; the sweep reads slots in order. Every operation is amortised O(1)
//! and allocation-free once the set is full.
//!
//! Each key is hashed once by the caller, with a per-process keyed hash ([`super::key_hash`]: the
//! key set that owns this one picks a shard with the same hash); the index maps that 64-bit hash
//! to a slot, and the slot keeps the key itself so a hit is confirmed by equality. Two different
//! keys sharing a hash never make a new message look like a duplicate: the older key is
//! forgotten instead, which only weakens duplicate detection for that one key.

use std::hash::Hash;

use super::hash_index::HashIndex;

struct Slot<K> {
    /// `None` while the slot is free.
    key: Option<K>,
    hash: u64,
    /// Distinguishes this insertion from every earlier use of the slot.
    stamp: u64,
    /// Seen again since the hand last passed: spared once.
    referenced: bool,
}

/// A handle on one inserted key, so that pending work can forget its key later without keeping
/// a second copy of it. It goes stale, harmlessly, once the key is replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeyRef {
    slot: u32,
    stamp: u64,
}

/// A bounded set of keys that, when full, replaces a key not seen recently.
pub(crate) struct RecentKeys<K> {
    capacity: usize,
    /// Key hash to slot.
    index: HashIndex,
    /// The index's size once the first key arrives, until then: a set no key reaches (a
    /// consumer that derives none, a shard not hit yet) writes no index, and a set that gets
    /// keys does not pay a dozen doublings while it fills.
    index_for_first_key: Option<usize>,
    slots: Vec<Slot<K>>,
    /// Slots emptied by `forget`, reused before anything is replaced.
    free: Vec<u32>,
    next_stamp: u64,
    /// The CLOCK hand: the next slot to consider for replacement.
    hand: usize,
}

impl<K: Eq + Hash> RecentKeys<K> {
    /// A set that holds at most `capacity` keys; a capacity of zero remembers nothing.
    pub(crate) fn new(capacity: usize) -> Self {
        // Slot numbers are stored as u32 in the index and in handles.
        let capacity = capacity.min(u32::MAX as usize - 1);
        // The slots are reserved, not written (no resident memory until keys arrive); the index
        // is written when the first key comes.
        Self {
            capacity,
            index: HashIndex::with_capacity(0),
            index_for_first_key: Some(capacity.min(1 << 12)),
            slots: Vec::with_capacity(capacity.min(1 << 16)),
            free: Vec::new(),
            next_stamp: 0,
            hand: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    /// The slot holding exactly `key`, if any.
    fn find(&self, key: &K, hash: u64) -> Option<usize> {
        let slot = self.index.get(hash)?;
        (self.slots[slot].key.as_ref() == Some(key)).then_some(slot)
    }

    /// True when the key (whose hash is `hash`) is present; does not mark it as seen.
    pub(crate) fn contains(&self, key: &K, hash: u64) -> bool {
        self.capacity > 0 && self.find(key, hash).is_some()
    }

    /// Inserts `key` and returns its handle, or returns `None` (marking it as seen again) when
    /// the key was already present. With capacity zero nothing is remembered and every key is
    /// new.
    pub(crate) fn insert(&mut self, key: K, hash: u64) -> Option<Option<KeyRef>> {
        if self.capacity == 0 {
            return Some(None);
        }
        if let Some(size) = self.index_for_first_key.take() {
            self.index = HashIndex::with_capacity(size);
        }
        if let Some(slot) = self.index.get(hash) {
            if self.slots[slot].key.as_ref() == Some(&key) {
                self.slots[slot].referenced = true;
                return None;
            }
            // A different key with the same hash: forget the older one (see the module notes).
            let stamp = self.slots[slot].stamp;
            self.forget(KeyRef {
                slot: slot as u32,
                stamp,
            });
        }
        let slot = if let Some(slot) = self.free.pop() {
            slot as usize
        } else if self.slots.len() < self.capacity {
            self.slots.push(Slot {
                key: None,
                hash: 0,
                stamp: 0,
                referenced: false,
            });
            self.slots.len() - 1
        } else {
            self.replace_one()
        };
        self.next_stamp += 1;
        let stamp = self.next_stamp;
        self.slots[slot] = Slot {
            key: Some(key),
            hash,
            stamp,
            referenced: false,
        };
        self.index.insert(hash, slot);
        Some(Some(KeyRef {
            slot: slot as u32,
            stamp,
        }))
    }

    /// Empties the slot the hand chooses and returns it. Called only when the set is full and no
    /// slot is free, so every slot holds a key; two turns of the hand always find an unmarked one
    /// (the first turn clears every mark it passes).
    fn replace_one(&mut self) -> usize {
        let ring = self.slots.len();
        for _ in 0..2 * ring {
            let at = self.hand;
            self.hand = (at + 1) % ring;
            let slot = &mut self.slots[at];
            if slot.referenced {
                slot.referenced = false;
                continue;
            }
            if slot.key.take().is_some() {
                self.index.remove(slot.hash);
                return at;
            }
        }
        // Unreachable while every empty slot is on the free list; replace at the hand anyway.
        let at = self.hand;
        self.hand = (at + 1) % ring;
        if self.slots[at].key.take().is_some() {
            self.index.remove(self.slots[at].hash);
        }
        at
    }

    /// Forgets the key behind `handle` if it is still the same insertion. Used when admitted work
    /// is discarded without being executed: if the same message comes back it must not be mistaken
    /// for a duplicate, or it would be silently dropped.
    pub(crate) fn forget(&mut self, handle: KeyRef) -> bool {
        let Some(slot) = self.slots.get_mut(handle.slot as usize) else {
            return false;
        };
        if slot.stamp != handle.stamp || slot.key.take().is_none() {
            return false;
        }
        slot.referenced = false;
        self.index.remove(slot.hash);
        self.free.push(handle.slot);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::{KeyRef, RecentKeys};
    use crate::guard::key_hash::KeyHashBuilder;
    use std::hash::{BuildHasher, Hash};

    /// The LRU with the hashing its owner does, so the tests read as set operations.
    struct Hashed<K> {
        keys: RecentKeys<K>,
        hasher: KeyHashBuilder,
    }

    impl<K: Eq + Hash> Hashed<K> {
        fn new(capacity: usize) -> Self {
            Hashed {
                keys: RecentKeys::new(capacity),
                hasher: KeyHashBuilder::new(),
            }
        }
        fn insert(&mut self, key: K) -> Option<Option<KeyRef>> {
            let hash = self.hasher.hash_one(&key);
            self.keys.insert(key, hash)
        }
        fn contains(&self, key: &K) -> bool {
            self.keys.contains(key, self.hasher.hash_one(key))
        }
        fn forget(&mut self, handle: KeyRef) -> bool {
            self.keys.forget(handle)
        }
        fn len(&self) -> usize {
            self.keys.len()
        }
    }

    #[test]
    fn a_key_seen_again_is_spared_and_the_set_stays_bounded() {
        let mut set = Hashed::new(3);
        for k in 0..3 {
            assert!(set.insert(k).is_some());
        }
        // See 0 again, so that 1 is the first key the hand may replace.
        assert!(set.insert(0).is_none());
        assert!(set.insert(3).is_some());
        assert_eq!(set.len(), 3);
        assert!(
            !set.contains(&1),
            "1 was not seen again and must be replaced"
        );
        assert!(set.contains(&0) && set.contains(&2) && set.contains(&3));
        for k in 100..10_000 {
            set.insert(k);
            assert!(set.len() <= 3);
        }
        assert_eq!(set.keys.slots.len(), 3);
    }

    #[test]
    fn a_key_seen_before_every_insertion_is_never_replaced() {
        let mut set = Hashed::new(4);
        for k in 0..4 {
            set.insert(k);
        }
        for k in 100..1_000 {
            assert!(set.insert(0).is_none(), "0 replaced before key {k}");
            assert!(set.insert(k).is_some());
        }
        assert_eq!(set.len(), 4);
    }

    #[test]
    fn forget_only_affects_the_same_insertion() {
        let mut set = Hashed::new(2);
        let a = set.insert("a").flatten().expect("new key");
        let b = set.insert("b").flatten().expect("new key");
        assert!(set.forget(a));
        assert!(!set.forget(a), "already forgotten");
        assert!(!set.contains(&"a") && set.contains(&"b"));
        // Reuses a's slot; the stale handle must not remove the new occupant.
        let c = set.insert("c").flatten().expect("new key");
        assert!(!set.forget(a));
        assert!(set.contains(&"c"));
        // The set is full: d replaces the key under the hand (c, in the first slot), and c's
        // handle goes stale too.
        set.insert("d");
        assert!(!set.contains(&"c"));
        assert!(!set.forget(c));
        assert!(set.forget(b));
        assert_eq!(set.len(), 1);
        assert!(set.contains(&"d"));
    }

    #[test]
    fn a_hash_collision_never_reports_a_false_duplicate() {
        let mut set = Hashed::new(4);
        set.insert(1u64);
        // Force a collision: file key 2 under key 1's hash by hand.
        let hash_of_1 = set.hasher.hash_one(1u64);
        let slot = set.keys.index.get(hash_of_1).unwrap();
        assert!(!set.contains(&2));
        set.keys.index.remove(hash_of_1);
        let hash_of_2 = set.hasher.hash_one(2u64);
        set.keys.slots[slot].hash = hash_of_2;
        set.keys.index.insert(hash_of_2, slot);
        // Now the slot under 2's hash holds key 1: inserting 2 must succeed, not be a duplicate.
        assert!(set.insert(2).is_some());
        assert!(set.contains(&2));
        assert!(!set.contains(&1), "the older key is forgotten instead");
        assert_eq!(set.len(), 1);
    }

    #[test]
    fn a_new_set_writes_no_index_before_its_first_key() {
        let mut set = Hashed::new(100_000);
        assert!(
            set.keys.index_for_first_key.is_some(),
            "no index written yet"
        );
        assert!(set.keys.slots.is_empty());
        for k in 0..1_000u64 {
            set.insert(k);
        }
        assert!(set.keys.index_for_first_key.is_none());
        assert_eq!(set.len(), 1_000);
        assert!((0..1_000u64).all(|k| set.contains(&k)));
    }

    #[test]
    fn zero_capacity_remembers_nothing() {
        let mut set = Hashed::new(0);
        assert_eq!(set.insert("a"), Some(None));
        assert_eq!(set.insert("a"), Some(None));
        assert_eq!(set.len(), 0);
    }
}
