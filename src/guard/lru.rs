//! A bounded least-recently-used set of idempotency keys.
//!
//! The guard refuses a message whose key it has seen recently, so that a redelivery to *this*
//! worker does not execute the same order twice. The set must be bounded: a consumer runs for
//! weeks, and an unbounded set is a slow memory leak. It is an intrusive doubly linked list stored
//! in a `Vec` (indices instead of pointers), so every operation is O(1) and allocation-free once
//! the set is full.
//!
//! Each key is hashed once, with a per-process keyed hash ([`super::key_hash`]); the index maps
//! that 64-bit hash to a slot, and the slot keeps the key itself so a hit is confirmed by
//! equality. Two different keys sharing a hash never make a new message look like a duplicate:
//! the older key is forgotten instead, which only weakens duplicate detection for that one key.

use std::hash::{BuildHasher, Hash};

use super::hash_index::HashIndex;
use super::key_hash::KeyHashBuilder;

const NIL: usize = usize::MAX;

struct Node<K> {
    /// `None` while the slot is free.
    key: Option<K>,
    hash: u64,
    /// Distinguishes this insertion from every earlier use of the slot.
    stamp: u64,
    prev: usize,
    next: usize,
}

/// A handle on one inserted key, so that pending work can forget its key later without keeping
/// a second copy of it. It goes stale, harmlessly, once the key is evicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeyRef {
    slot: usize,
    stamp: u64,
}

/// A bounded set of keys that forgets the least recently used key when full.
pub(crate) struct KeyLru<K> {
    capacity: usize,
    hasher: KeyHashBuilder,
    /// Key hash to slot.
    index: HashIndex,
    nodes: Vec<Node<K>>,
    free: Vec<usize>,
    next_stamp: u64,
    /// Most recently used.
    head: usize,
    /// Least recently used; evicted first.
    tail: usize,
}

impl<K: Eq + Hash> KeyLru<K> {
    /// A set that holds at most `capacity` keys; a capacity of zero remembers nothing.
    pub(crate) fn new(capacity: usize) -> Self {
        // Slot numbers are stored as u32 in the index.
        let capacity = capacity.min(u32::MAX as usize - 1);
        Self {
            capacity,
            hasher: KeyHashBuilder::new(),
            index: HashIndex::with_capacity(capacity.min(1 << 12)),
            nodes: Vec::with_capacity(capacity.min(1 << 16)),
            free: Vec::new(),
            next_stamp: 0,
            head: NIL,
            tail: NIL,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    /// The slot holding exactly `key`, if any.
    fn find(&self, key: &K, hash: u64) -> Option<usize> {
        let slot = self.index.get(hash)?;
        (self.nodes[slot].key.as_ref() == Some(key)).then_some(slot)
    }

    /// True when the key is present; does not change its recency.
    pub(crate) fn contains(&self, key: &K) -> bool {
        self.capacity > 0 && self.find(key, self.hasher.hash_one(key)).is_some()
    }

    /// Inserts `key` as most recently used and returns its handle, or returns `None` (refreshing
    /// its recency) when the key was already present. With capacity zero nothing is remembered and
    /// every key is new.
    pub(crate) fn insert(&mut self, key: K) -> Option<Option<KeyRef>> {
        if self.capacity == 0 {
            return Some(None);
        }
        let hash = self.hasher.hash_one(&key);
        if let Some(slot) = self.index.get(hash) {
            if self.nodes[slot].key.as_ref() == Some(&key) {
                self.unlink(slot);
                self.push_front(slot);
                return None;
            }
            // A different key with the same hash: forget the older one (see the module notes).
            let stamp = self.nodes[slot].stamp;
            self.forget(KeyRef { slot, stamp });
        }
        let slot = if let Some(slot) = self.free.pop() {
            slot
        } else if self.nodes.len() < self.capacity {
            self.nodes.push(Node {
                key: None,
                hash: 0,
                stamp: 0,
                prev: NIL,
                next: NIL,
            });
            self.nodes.len() - 1
        } else {
            // Full: reuse the least recently used slot.
            let slot = self.tail;
            self.unlink(slot);
            self.nodes[slot].key = None;
            self.index.remove(self.nodes[slot].hash);
            slot
        };
        self.next_stamp += 1;
        let stamp = self.next_stamp;
        let node = &mut self.nodes[slot];
        node.key = Some(key);
        node.hash = hash;
        node.stamp = stamp;
        self.index.insert(hash, slot);
        self.push_front(slot);
        Some(Some(KeyRef { slot, stamp }))
    }

    /// Forgets the key behind `handle` if it is still the same insertion. Used when admitted work
    /// is discarded without being executed: if the same message comes back it must not be mistaken
    /// for a duplicate, or it would be silently dropped.
    pub(crate) fn forget(&mut self, handle: KeyRef) -> bool {
        let Some(node) = self.nodes.get_mut(handle.slot) else {
            return false;
        };
        if node.stamp != handle.stamp {
            return false;
        }
        if node.key.take().is_none() {
            return false;
        }
        let hash = node.hash;
        self.index.remove(hash);
        self.unlink(handle.slot);
        self.free.push(handle.slot);
        true
    }

    fn unlink(&mut self, slot: usize) {
        let (prev, next) = (self.nodes[slot].prev, self.nodes[slot].next);
        if prev == NIL {
            self.head = next;
        } else {
            self.nodes[prev].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.nodes[next].prev = prev;
        }
        self.nodes[slot].prev = NIL;
        self.nodes[slot].next = NIL;
    }

    fn push_front(&mut self, slot: usize) {
        self.nodes[slot].prev = NIL;
        self.nodes[slot].next = self.head;
        if self.head != NIL {
            self.nodes[self.head].prev = slot;
        }
        self.head = slot;
        if self.tail == NIL {
            self.tail = slot;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::KeyLru;
    use std::hash::BuildHasher;

    #[test]
    fn evicts_least_recently_used_and_stays_bounded() {
        let mut lru = KeyLru::new(3);
        for k in 0..3 {
            assert!(lru.insert(k).is_some());
        }
        // Touch 0 so that 1 becomes the least recently used.
        assert!(lru.insert(0).is_none());
        assert!(lru.insert(3).is_some());
        assert_eq!(lru.len(), 3);
        assert!(
            !lru.contains(&1),
            "1 was least recently used and must be evicted"
        );
        assert!(lru.contains(&0) && lru.contains(&2) && lru.contains(&3));
        for k in 100..10_000 {
            lru.insert(k);
            assert!(lru.len() <= 3);
        }
        assert_eq!(lru.nodes.len(), 3);
    }

    #[test]
    fn forget_only_affects_the_same_insertion() {
        let mut lru = KeyLru::new(2);
        let a = lru.insert("a").flatten().expect("new key");
        let b = lru.insert("b").flatten().expect("new key");
        assert!(lru.forget(a));
        assert!(!lru.forget(a), "already forgotten");
        assert!(!lru.contains(&"a") && lru.contains(&"b"));
        // Reuses a's slot; the stale handle must not remove the new occupant.
        let c = lru.insert("c").flatten().expect("new key");
        assert!(!lru.forget(a));
        assert!(lru.contains(&"c"));
        // Evicting b (least recent) makes its handle stale too.
        lru.insert("d");
        assert!(!lru.contains(&"b"));
        assert!(!lru.forget(b));
        assert!(lru.forget(c));
        assert_eq!(lru.len(), 1);
    }

    #[test]
    fn a_hash_collision_never_reports_a_false_duplicate() {
        let mut lru = KeyLru::new(4);
        lru.insert(1u64);
        // Force a collision: file key 2 under key 1's hash by hand.
        let hash_of_1 = lru.hasher.hash_one(1u64);
        let slot = lru.index.get(hash_of_1).unwrap();
        assert!(!lru.contains(&2));
        lru.index.remove(hash_of_1);
        let hash_of_2 = lru.hasher.hash_one(2u64);
        lru.nodes[slot].hash = hash_of_2;
        lru.index.insert(hash_of_2, slot);
        // Now the slot under 2's hash holds key 1: inserting 2 must succeed, not be a duplicate.
        assert!(lru.insert(2).is_some());
        assert!(lru.contains(&2));
        assert!(!lru.contains(&1), "the older key is forgotten instead");
        assert_eq!(lru.len(), 1);
    }

    #[test]
    fn zero_capacity_remembers_nothing() {
        let mut lru = KeyLru::new(0);
        assert_eq!(lru.insert("a"), Some(None));
        assert_eq!(lru.insert("a"), Some(None));
        assert_eq!(lru.len(), 0);
    }
}
