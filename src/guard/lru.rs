//! A bounded least-recently-used set of idempotency keys.
//!
//! The guard refuses a message whose key it has seen recently, so that a redelivery to *this*
//! worker does not execute the same order twice. The set must be bounded: a consumer runs for
//! weeks, and an unbounded set is a slow memory leak. It is an intrusive doubly linked list stored
//! in a `Vec` (indices instead of pointers), so every operation is O(1) and allocation-free once
//! the set is full.

use std::collections::HashMap;
use std::hash::Hash;

const NIL: usize = usize::MAX;

struct Node<K> {
    key: K,
    prev: usize,
    next: usize,
}

/// A bounded set of keys that forgets the least recently used key when full.
pub(crate) struct KeyLru<K> {
    capacity: usize,
    index: HashMap<K, usize>,
    nodes: Vec<Node<K>>,
    /// Most recently used.
    head: usize,
    /// Least recently used; evicted first.
    tail: usize,
}

impl<K: Eq + Hash + Clone> KeyLru<K> {
    /// A set that holds at most `capacity` keys; a capacity of zero remembers nothing.
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            index: HashMap::with_capacity(capacity.min(1 << 16)),
            nodes: Vec::with_capacity(capacity.min(1 << 16)),
            head: NIL,
            tail: NIL,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    /// Inserts `key` as most recently used. Returns `false` (and refreshes its recency) when the
    /// key was already present.
    pub(crate) fn insert(&mut self, key: K) -> bool {
        if self.capacity == 0 {
            return true;
        }
        if let Some(&slot) = self.index.get(&key) {
            self.unlink(slot);
            self.push_front(slot);
            return false;
        }
        let slot = if self.nodes.len() < self.capacity {
            self.nodes.push(Node {
                key: key.clone(),
                prev: NIL,
                next: NIL,
            });
            self.nodes.len() - 1
        } else {
            // Full: reuse the least recently used slot.
            let slot = self.tail;
            self.unlink(slot);
            let old = std::mem::replace(&mut self.nodes[slot].key, key.clone());
            self.index.remove(&old);
            slot
        };
        self.index.insert(key, slot);
        self.push_front(slot);
        true
    }

    /// True when the key is present; does not change its recency.
    pub(crate) fn contains(&self, key: &K) -> bool {
        self.index.contains_key(key)
    }

    /// Forgets `key`. Used when admitted work is discarded without being executed: if the same
    /// message comes back it must not be mistaken for a duplicate, or it would be silently dropped.
    pub(crate) fn remove(&mut self, key: &K) -> bool {
        let Some(slot) = self.index.remove(key) else {
            return false;
        };
        self.unlink(slot);
        // Keep `nodes` dense: move the last node into the freed slot.
        let last = self.nodes.len() - 1;
        if slot != last {
            self.nodes.swap(slot, last);
            let moved = &self.nodes[slot];
            let (prev, next) = (moved.prev, moved.next);
            if prev == NIL {
                self.head = slot;
            } else {
                self.nodes[prev].next = slot;
            }
            if next == NIL {
                self.tail = slot;
            } else {
                self.nodes[next].prev = slot;
            }
            if let Some(entry) = self.index.get_mut(&self.nodes[slot].key) {
                *entry = slot;
            }
        }
        self.nodes.pop();
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

    #[test]
    fn evicts_least_recently_used_and_stays_bounded() {
        let mut lru = KeyLru::new(3);
        for k in 0..3 {
            assert!(lru.insert(k));
        }
        // Touch 0 so that 1 becomes the least recently used.
        assert!(!lru.insert(0));
        assert!(lru.insert(3));
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
    fn remove_keeps_links_consistent() {
        let mut lru = KeyLru::new(4);
        for k in 0..4 {
            lru.insert(k);
        }
        assert!(lru.remove(&0)); // the tail
        assert!(lru.remove(&3)); // the head
        assert!(!lru.remove(&3));
        assert_eq!(lru.len(), 2);
        for k in 10..13 {
            lru.insert(k);
        }
        // Capacity 4 with {1, 2, 10, 11, 12}: 1 (least recent) is gone.
        assert!(!lru.contains(&1));
        assert!(lru.contains(&2) && lru.contains(&12));
        assert_eq!(lru.len(), 4);
    }

    #[test]
    fn zero_capacity_remembers_nothing() {
        let mut lru = KeyLru::new(0);
        assert!(lru.insert("a"));
        assert!(lru.insert("a"));
        assert_eq!(lru.len(), 0);
    }
}
