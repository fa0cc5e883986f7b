//! The guard's per-partition entries, found by `TopicPartition` on every admission, by any number
//! of threads at once, without a lock.
//!
//! A lock around the whole table would make every admission and completion, on every partition,
//! take turns on one cache line: threads working on different partitions would serialise on it
//! (measured before this table: four threads on four partitions paid 223 ns per record, against
//! 39 ns for one thread). What makes a lock-free table simple here is that an entry is never
//! removed (a partition's epoch must only ever grow), so the table only grows:
//!
//! - Entries live in an arena of chunks that are allocated once and never move (chunk `k` holds
//!   `64 << k` entries), so a reference to an entry stays valid as long as the table.
//! - The index from a partition to its entry number is an open-addressing table of atomics that
//!   is kept at most half full. When it would pass half, the one writer builds an index twice the
//!   size, fills it with every entry, and only then publishes it; a reader uses whichever index
//!   was published when it looked, and every index it can see is complete for the entries it
//!   names and has an empty slot to end every probe.
//! - Insertions (only `assign` makes them) take a mutex among themselves; readers never wait.
//! - Hashing the topic name is most of a lookup, and records of one partition share one
//!   interned `Arc<str>` topic. So a small array of hints, found by that pointer and the
//!   partition number, names the entry a lookup found last; a hint is only ever a guess, checked
//!   against the entry's own `TopicPartition` (same allocation, same partition) before it is
//!   believed. The entry keeps its `Arc` alive, so a pointer that matches it is that very name.
//!
//! Every cell is set once (a `OnceLock` or an atomic written from zero), so the table needs no
//! `unsafe`: an entry is published with release ordering after it is complete, and found with
//! acquire ordering.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};

use super::key_hash::{folded_multiply, short_word};
use crate::TopicPartition;

/// Entries in the first arena chunk; chunk `k` holds `FIRST_CHUNK << k`.
const FIRST_CHUNK: usize = 64;
/// Arena chunks (and index levels): room for about a billion partitions, far beyond any
/// assignment a coordinator can send through the bounded decoder.
const LEVELS: usize = 24;
/// Slots in the first index; index level `k` has `FIRST_INDEX << k`.
const FIRST_INDEX: usize = 2 * FIRST_CHUNK;
/// Lookup hints.
const HINTS: usize = 64;

/// Aligned to two cache lines (the unit x86 prefetches in), so that two threads working on
/// neighbouring partitions never write to one line.
#[repr(align(128))]
struct Entry<S> {
    tp: TopicPartition,
    hash: u64,
    state: S,
}

/// One arena chunk: allocated when the first entry that lives in it is inserted.
type Chunk<S> = OnceLock<Box<[OnceLock<Entry<S>>]>>;

/// A grow-only map from partition to `S`, safe to read from many threads while one writes.
pub(crate) struct PartitionTable<S> {
    chunks: [Chunk<S>; LEVELS],
    /// Entries published so far: every entry number below it is set.
    len: AtomicUsize,
    /// Index levels; slot values are entry number + 1, zero for empty.
    indexes: [OnceLock<Box<[AtomicU32]>>; LEVELS],
    /// The newest complete index level.
    current: AtomicUsize,
    /// Entry number + 1 of the last partition found through each hint slot, zero for none.
    hints: [AtomicU32; HINTS],
    /// Serialises insertions.
    writer: Mutex<()>,
}

impl<S> Default for PartitionTable<S> {
    fn default() -> Self {
        PartitionTable {
            chunks: std::array::from_fn(|_| OnceLock::new()),
            len: AtomicUsize::new(0),
            indexes: std::array::from_fn(|_| OnceLock::new()),
            current: AtomicUsize::new(0),
            hints: std::array::from_fn(|_| AtomicU32::new(0)),
            writer: Mutex::new(()),
        }
    }
}

/// The index's hash: the topic name's length and three 8-byte words of it (start, middle, end),
/// and the partition number. Hashing every byte of the name cost more than the rest of a lookup;
/// names are chosen by the application and the broker, not by message contents, so no one aims
/// at this hash, and two names that agree on those words only make a probe longer.
#[inline]
fn hash_of(tp: &TopicPartition) -> u64 {
    const SEEDS: [u64; 3] = [
        0x243f_6a88_85a3_08d3,
        0x1319_8a2e_0370_7344,
        0xa409_3822_299f_31d0,
    ];
    let name = tp.topic.as_bytes();
    let n = name.len();
    let word = |at: usize| {
        let mut word = [0u8; 8];
        word.copy_from_slice(&name[at..at + 8]);
        u64::from_le_bytes(word)
    };
    let (start, middle, end) = if n >= 8 {
        (word(0), word((n - 8) / 2), word(n - 8))
    } else {
        (short_word(name), 0, 0)
    };
    let name_hash = folded_multiply(start ^ SEEDS[0], middle ^ (n as u64) ^ SEEDS[1]) ^ end;
    folded_multiply(
        name_hash ^ SEEDS[2],
        u64::from(tp.partition as u32) ^ SEEDS[0],
    )
}

#[inline]
fn hint_slot(tp: &TopicPartition) -> usize {
    let pointer = std::sync::Arc::as_ptr(&tp.topic) as *const u8 as usize;
    ((pointer >> 4) ^ (tp.partition as usize).wrapping_mul(0x9e37_79b9)) % HINTS
}

/// Entry `n`'s chunk and its place in that chunk.
#[inline]
fn chunk_of(n: usize) -> (usize, usize) {
    let chunk = (n / FIRST_CHUNK + 1).ilog2() as usize;
    let first = FIRST_CHUNK * ((1 << chunk) - 1);
    (chunk, n - first)
}

fn empty_slots<T>(count: usize, make: impl Fn() -> T) -> Box<[T]> {
    (0..count).map(|_| make()).collect()
}

impl<S> PartitionTable<S> {
    #[inline]
    fn entry(&self, n: usize) -> Option<&Entry<S>> {
        let (chunk, at) = chunk_of(n);
        self.chunks.get(chunk)?.get()?.get(at)?.get()
    }

    /// The entry number of `tp` in the published index, if it has one, with the entry.
    #[inline]
    fn find(&self, tp: &TopicPartition, hash: u64) -> Option<(usize, &Entry<S>)> {
        let index = self.indexes[self.current.load(Ordering::Acquire)].get()?;
        let mask = index.len() - 1;
        let mut slot = hash as usize & mask;
        loop {
            let value = index[slot].load(Ordering::Acquire) as usize;
            // The index is at most half full, so a probe always ends at an empty slot.
            let n = value.checked_sub(1)?;
            let entry = self.entry(n)?;
            if entry.hash == hash && entry.tp == *tp {
                return Some((n, entry));
            }
            slot = (slot + 1) & mask;
        }
    }

    /// The state of `tp`, if it was ever inserted.
    #[inline]
    pub(crate) fn get(&self, tp: &TopicPartition) -> Option<&S> {
        let hint = &self.hints[hint_slot(tp)];
        let guess = (hint.load(Ordering::Relaxed) as usize).checked_sub(1);
        if let Some(entry) = guess.and_then(|n| self.entry(n)) {
            if entry.tp.partition == tp.partition
                && std::sync::Arc::ptr_eq(&entry.tp.topic, &tp.topic)
            {
                return Some(&entry.state);
            }
        }
        self.get_unhinted(tp, hint)
    }

    /// `get` when the hint did not name `tp`: a lookup in the index, which then becomes the
    /// hint. Kept out of line so the hinted path stays a few instructions long.
    #[cold]
    #[inline(never)]
    fn get_unhinted(&self, tp: &TopicPartition, hint: &AtomicU32) -> Option<&S> {
        let (n, entry) = self.find(tp, hash_of(tp))?;
        // Entry numbers fit in u32: `get_or_insert_with` numbers no more.
        hint.store(n as u32 + 1, Ordering::Relaxed);
        Some(&entry.state)
    }

    /// The state of `tp`, created by `make` if it was never inserted; `None` only when the table
    /// holds as many partitions as it can number (about a billion).
    pub(crate) fn get_or_insert_with(
        &self,
        tp: &TopicPartition,
        make: impl FnOnce() -> S,
    ) -> Option<&S> {
        let hash = hash_of(tp);
        if let Some((_, entry)) = self.find(tp, hash) {
            return Some(&entry.state);
        }
        let _writer = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        // Another insertion may have won the race for the same partition.
        if let Some((_, entry)) = self.find(tp, hash) {
            return Some(&entry.state);
        }
        let n = self.len.load(Ordering::Relaxed);
        let number = u32::try_from(n + 1).ok()?;
        let (chunk, at) = chunk_of(n);
        let cells = self
            .chunks
            .get(chunk)?
            .get_or_init(|| empty_slots(FIRST_CHUNK << chunk, OnceLock::new));
        let entry = Entry {
            tp: tp.clone(),
            hash,
            state: make(),
        };
        if cells[at].set(entry).is_err() {
            // Unreachable: entry numbers are handed out once, under the writer lock.
            return None;
        }
        let index = self.index_with_room_for(n + 1)?;
        Self::place(index, hash, number);
        self.len.store(n + 1, Ordering::Release);
        self.entry(n).map(|entry| &entry.state)
    }

    /// The published index, first replaced by a bigger complete one if `entries` would fill it
    /// past half. Called under the writer lock.
    fn index_with_room_for(&self, entries: usize) -> Option<&[AtomicU32]> {
        let mut level = self.current.load(Ordering::Relaxed);
        let index =
            self.indexes[level].get_or_init(|| empty_slots(FIRST_INDEX, AtomicU32::default));
        if entries * 2 <= index.len() {
            return Some(index);
        }
        level += 1;
        let bigger = self
            .indexes
            .get(level)?
            .get_or_init(|| empty_slots(FIRST_INDEX << level, AtomicU32::default));
        for n in 0..entries - 1 {
            let entry = self.entry(n)?;
            Self::place(bigger, entry.hash, u32::try_from(n + 1).ok()?);
        }
        self.current.store(level, Ordering::Release);
        Some(bigger)
    }

    fn place(index: &[AtomicU32], hash: u64, number: u32) {
        let mask = index.len() - 1;
        let mut slot = hash as usize & mask;
        while index[slot].load(Ordering::Relaxed) != 0 {
            slot = (slot + 1) & mask;
        }
        index[slot].store(number, Ordering::Release);
    }

    /// Every partition with its state, in insertion order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&TopicPartition, &S)> {
        (0..self.len.load(Ordering::Acquire))
            .filter_map(|n| self.entry(n))
            .map(|entry| (&entry.tp, &entry.state))
    }
}

#[cfg(test)]
mod tests {
    use super::{chunk_of, PartitionTable, FIRST_CHUNK};
    use crate::TopicPartition;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn entry_numbers_map_to_consecutive_chunk_places() {
        assert_eq!(chunk_of(0), (0, 0));
        assert_eq!(chunk_of(FIRST_CHUNK - 1), (0, FIRST_CHUNK - 1));
        assert_eq!(chunk_of(FIRST_CHUNK), (1, 0));
        assert_eq!(chunk_of(3 * FIRST_CHUNK - 1), (1, 2 * FIRST_CHUNK - 1));
        assert_eq!(chunk_of(3 * FIRST_CHUNK), (2, 0));
        assert_eq!(chunk_of(7 * FIRST_CHUNK), (3, 0));
    }

    #[test]
    fn equal_names_in_different_allocations_find_the_same_state() {
        let table: PartitionTable<AtomicU32> = PartitionTable::default();
        let a = TopicPartition::new("orders", 1);
        let b = TopicPartition::new(String::from("orders"), 1); // another allocation
        assert!(table.get(&a).is_none(), "an empty table finds nothing");
        table
            .get_or_insert_with(&a, || AtomicU32::new(0))
            .map(|s| s.fetch_add(1, Ordering::Relaxed));
        table
            .get_or_insert_with(&b, || AtomicU32::new(100))
            .map(|s| s.fetch_add(1, Ordering::Relaxed));
        assert_eq!(table.get(&a).map(|s| s.load(Ordering::Relaxed)), Some(2));
        assert!(table.get(&TopicPartition::new("orders", 2)).is_none());
        // Many partitions of many topics, across several index rebuilds and arena chunks: every
        // lookup stays right, and iteration keeps insertion order.
        for p in 0..2_000 {
            let tp = TopicPartition::new(format!("t{}", p % 7), p);
            table.get_or_insert_with(&tp, || AtomicU32::new(p as u32));
        }
        for p in 0..2_000 {
            let tp = TopicPartition::new(format!("t{}", p % 7), p);
            assert_eq!(
                table.get(&tp).map(|s| s.load(Ordering::Relaxed)),
                Some(p as u32)
            );
        }
        let order: Vec<i32> = table.iter().map(|(tp, _)| tp.partition).collect();
        assert_eq!(order.len(), 2_001);
        assert_eq!(order[0], 1);
        assert!(order[1..].iter().copied().eq(0..2_000));
    }

    #[test]
    fn readers_on_other_threads_see_every_partition_while_it_grows() {
        let table: PartitionTable<i32> = PartitionTable::default();
        let partitions: Vec<_> = (0..3_000).map(|p| TopicPartition::new("grow", p)).collect();
        std::thread::scope(|scope| {
            for reader in 0..2 {
                let (table, partitions) = (&table, &partitions);
                scope.spawn(move || {
                    // A partition once seen stays found with its own state, whatever the writer
                    // is rebuilding meanwhile.
                    let mut seen = 0;
                    while seen < partitions.len() {
                        for tp in &partitions[..seen] {
                            assert_eq!(table.get(tp), Some(&tp.partition), "reader {reader}");
                        }
                        if table.get(&partitions[seen]).is_some() {
                            seen += 1;
                        } else {
                            std::thread::yield_now();
                        }
                    }
                });
            }
            for tp in &partitions {
                assert_eq!(
                    table.get_or_insert_with(tp, || tp.partition),
                    Some(&tp.partition)
                );
            }
        });
        assert_eq!(table.iter().count(), partitions.len());
    }
}
