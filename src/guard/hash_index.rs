//! An open-addressing table from a 64-bit key hash to a slot number, for the idempotency set.
//!
//! The hashes it stores are already keyed SipHash output (uniform, not steerable by a producer),
//! so it needs no hashing of its own and no general-purpose map machinery: linear probing at a
//! load factor of at most one half, and backward-shift deletion so no tombstones accumulate in a
//! set that inserts and evicts on every message. It doubles as the set fills, so a large
//! configured capacity costs memory only once it is used.

const EMPTY: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct Entry {
    hash: u64,
    slot: u32,
}

/// Hash to slot, at most one slot per hash.
pub(crate) struct HashIndex {
    entries: Vec<Entry>,
    mask: usize,
    len: usize,
}

impl HashIndex {
    /// A table sized for `capacity` entries up front (it grows beyond that when needed). Slot
    /// numbers must stay below `u32::MAX`.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        let size = (capacity.max(4) * 2).next_power_of_two();
        HashIndex {
            entries: vec![
                Entry {
                    hash: 0,
                    slot: EMPTY
                };
                size
            ],
            mask: size - 1,
            len: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn home(&self, hash: u64) -> usize {
        // The low bits of SipHash output are as good as any.
        (hash as usize) & self.mask
    }

    #[inline]
    fn position(&self, hash: u64) -> Option<usize> {
        let mut i = self.home(hash);
        loop {
            let entry = self.entries[i];
            if entry.slot == EMPTY {
                return None;
            }
            if entry.hash == hash {
                return Some(i);
            }
            i = (i + 1) & self.mask;
        }
    }

    /// The slot stored under `hash`.
    #[inline]
    pub(crate) fn get(&self, hash: u64) -> Option<usize> {
        self.position(hash).map(|i| self.entries[i].slot as usize)
    }

    /// Stores `slot` under `hash`, replacing what was there.
    pub(crate) fn insert(&mut self, hash: u64, slot: usize) {
        debug_assert!(slot < EMPTY as usize);
        if (self.len + 1) * 2 > self.entries.len() {
            self.grow();
        }
        let mut i = self.home(hash);
        loop {
            let entry = &mut self.entries[i];
            if entry.slot == EMPTY {
                *entry = Entry {
                    hash,
                    slot: slot as u32,
                };
                self.len += 1;
                return;
            }
            if entry.hash == hash {
                entry.slot = slot as u32;
                return;
            }
            i = (i + 1) & self.mask;
        }
    }

    fn grow(&mut self) {
        let old = std::mem::replace(self, HashIndex::with_capacity(self.entries.len()));
        for entry in old.entries.into_iter().filter(|e| e.slot != EMPTY) {
            self.insert(entry.hash, entry.slot as usize);
        }
    }

    /// Removes the entry under `hash`, shifting later entries of its probe run back so that
    /// every remaining entry stays reachable from its home position.
    pub(crate) fn remove(&mut self, hash: u64) -> Option<usize> {
        let mut hole = self.position(hash)?;
        let removed = self.entries[hole].slot as usize;
        let mut next = (hole + 1) & self.mask;
        loop {
            let entry = self.entries[next];
            if entry.slot == EMPTY {
                break;
            }
            let home = self.home(entry.hash);
            // Move the entry into the hole unless its home lies cyclically in (hole, next].
            let distance_to_next = next.wrapping_sub(home) & self.mask;
            let distance_to_hole = hole.wrapping_sub(home) & self.mask;
            if distance_to_hole <= distance_to_next {
                self.entries[hole] = entry;
                hole = next;
            }
            next = (next + 1) & self.mask;
        }
        self.entries[hole].slot = EMPTY;
        self.len -= 1;
        Some(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::HashIndex;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[test]
    fn collisions_on_the_home_position_stay_reachable_after_removals() {
        let mut index = HashIndex::with_capacity(4); // 8 entries, mask 7
        for (n, hash) in [3u64, 11, 19, 4, 27].into_iter().enumerate() {
            index.insert(hash, n);
        }
        assert_eq!(index.remove(11), Some(1));
        assert_eq!(index.get(19), Some(2));
        assert_eq!(index.get(27), Some(4));
        assert_eq!(index.get(4), Some(3));
        assert_eq!(index.remove(3), Some(0));
        assert_eq!(index.get(27), Some(4));
        assert_eq!(index.len(), 3);
    }

    #[test]
    fn grows_when_half_full() {
        let mut index = HashIndex::with_capacity(4);
        for n in 0..1000u64 {
            index.insert(n.wrapping_mul(0x9e37_79b9_7f4a_7c15), n as usize);
        }
        assert_eq!(index.len(), 1000);
        for n in 0..1000u64 {
            assert_eq!(
                index.get(n.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
                Some(n as usize)
            );
        }
    }

    proptest! {
        #[test]
        fn behaves_like_a_map(ops in prop::collection::vec((any::<bool>(), 0u64..64, 0usize..1000), 1..400)) {
            // Few distinct hashes over a small table: long probe runs and wrap-around.
            let mut index = HashIndex::with_capacity(40);
            let mut model: HashMap<u64, usize> = HashMap::new();
            for (insert, hash, slot) in ops {
                let hash = hash.wrapping_mul(0x9e37_79b9_7f4a_7c15) & !0x3f | (hash & 7);
                if insert {
                    if model.len() < 40 || model.contains_key(&hash) {
                        index.insert(hash, slot);
                        model.insert(hash, slot);
                    }
                } else {
                    prop_assert_eq!(index.remove(hash), model.remove(&hash));
                }
                prop_assert_eq!(index.len(), model.len());
                for (&h, &s) in &model {
                    prop_assert_eq!(index.get(h), Some(s));
                }
            }
        }
    }
}
