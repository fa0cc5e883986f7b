//! The guard's per-partition states, found by `TopicPartition` on every admission.
//!
//! A general map lookup hashes the topic name each time; on the per-record path that was the
//! largest single cost of an admission (about 100 instructions). Records of one partition share
//! one interned `Arc<str>` topic, so a small direct-mapped cache keyed by that pointer answers
//! almost every lookup with a pointer and an integer comparison. The cache holds its own clone of
//! each `Arc`, so a cached pointer can never be freed and reused for another topic name.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::Arc;

use crate::partition::PartitionHasher;
use crate::TopicPartition;

const CACHE_SLOTS: usize = 64;

pub(crate) struct PartitionTable<S> {
    states: Vec<(TopicPartition, S)>,
    index: HashMap<TopicPartition, usize, BuildHasherDefault<PartitionHasher>>,
    cache: Vec<Option<(Arc<str>, i32, usize)>>,
}

impl<S> Default for PartitionTable<S> {
    fn default() -> Self {
        PartitionTable {
            states: Vec::new(),
            index: HashMap::default(),
            cache: vec![None; CACHE_SLOTS],
        }
    }
}

#[inline]
fn cache_slot(tp: &TopicPartition) -> usize {
    let pointer = Arc::as_ptr(&tp.topic) as *const u8 as usize;
    ((pointer >> 4) ^ (tp.partition as usize).wrapping_mul(0x9e37_79b9)) % CACHE_SLOTS
}

impl<S> PartitionTable<S> {
    #[inline]
    fn cached(&self, tp: &TopicPartition) -> Option<usize> {
        match &self.cache[cache_slot(tp)] {
            Some((topic, partition, at))
                if *partition == tp.partition && Arc::ptr_eq(topic, &tp.topic) =>
            {
                Some(*at)
            }
            _ => None,
        }
    }

    #[inline]
    fn position(&mut self, tp: &TopicPartition) -> Option<usize> {
        if let Some(at) = self.cached(tp) {
            return Some(at);
        }
        let at = *self.index.get(tp)?;
        self.cache[cache_slot(tp)] = Some((tp.topic.clone(), tp.partition, at));
        Some(at)
    }

    /// The state of `tp`, if it was ever assigned.
    #[inline]
    pub(crate) fn get_mut(&mut self, tp: &TopicPartition) -> Option<&mut S> {
        let at = self.position(tp)?;
        self.states.get_mut(at).map(|(_, state)| state)
    }

    /// The state of `tp`, without touching the cache.
    pub(crate) fn get(&self, tp: &TopicPartition) -> Option<&S> {
        let at = self.cached(tp).or_else(|| self.index.get(tp).copied())?;
        self.states.get(at).map(|(_, state)| state)
    }

    /// The state of `tp`, created by `make` if it was never assigned.
    pub(crate) fn get_or_insert_with(
        &mut self,
        tp: &TopicPartition,
        make: impl FnOnce() -> S,
    ) -> &mut S {
        let at = match self.position(tp) {
            Some(at) => at,
            None => {
                self.states.push((tp.clone(), make()));
                let at = self.states.len() - 1;
                self.index.insert(tp.clone(), at);
                at
            }
        };
        &mut self.states[at].1
    }

    /// Every partition with its state, in assignment order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&TopicPartition, &S)> {
        self.states.iter().map(|(tp, state)| (tp, state))
    }
}

#[cfg(test)]
mod tests {
    use super::PartitionTable;
    use crate::TopicPartition;

    #[test]
    fn equal_names_in_different_allocations_find_the_same_state() {
        let mut table: PartitionTable<u32> = PartitionTable::default();
        let a = TopicPartition::new("orders", 1);
        let b = TopicPartition::new(String::from("orders"), 1); // another allocation
        *table.get_or_insert_with(&a, || 0) += 1;
        *table.get_or_insert_with(&b, || 100) += 1;
        assert_eq!(table.get(&a), Some(&2));
        assert_eq!(table.get_mut(&b).copied(), Some(2));
        assert_eq!(table.get(&TopicPartition::new("orders", 2)), None);
        // Many partitions of many topics: every lookup stays right whatever the cache holds.
        for p in 0..500 {
            let tp = TopicPartition::new(format!("t{}", p % 7), p);
            *table.get_or_insert_with(&tp, || p as u32) += 0;
        }
        for p in 0..500 {
            let tp = TopicPartition::new(format!("t{}", p % 7), p);
            assert_eq!(table.get_mut(&tp).copied(), Some(p as u32));
        }
        assert_eq!(table.iter().count(), 501);
    }
}
