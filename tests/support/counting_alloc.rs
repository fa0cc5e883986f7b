//! The one global allocator of a tier binary (`offline`, `brokers`): it counts, for the tests
//! that bound what hostile input may cost, and it can watch freed blocks, for the test that
//! looks for secrets left in freed memory. A binary has one global allocator, so the tests that
//! once had an allocator each share this one; nextest runs every test in a process of its own,
//! so one test's counters and watch never see another test's allocations.
//!
//! What it records:
//! * [`LIVE`] / [`PEAK`]: live bytes and their peak over all threads. A measurement stores the
//!   live count into [`PEAK`] first and reads the rise afterwards.
//! * [`THREAD_LARGEST`], [`THREAD_LIVE`], [`THREAD_PEAK`]: the same on the calling thread only,
//!   plus its largest single request, for a measurement that must not count other threads.
//! * [`THREAD_ALLOCATIONS`]: how many blocks the calling thread asked for (allocations and
//!   reallocations), for a test that a loop allocates nothing per iteration.
//! * [`watch_frees`]: from then on every block is searched, just before it is freed, by the
//!   watcher the binary installed ([`Counting::watching`]), and every reallocation moves (the
//!   old block is freed and searched, as a growing buffer's old block would be). So that every
//!   byte a watcher reads is initialised, an allocator that has a watcher zeroes every block it
//!   hands out and every grown part of a block, whether or not the watch is on; before the watch
//!   a reallocation stays the system's, so the peaks the other tests measure are unchanged.
//!
//! A tier's `main.rs` declares it (`#[path = "../support/counting_alloc.rs"] mod
//! counting_alloc;`) and installs it with `#[global_allocator]`.
#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The system allocator, counted, and with [`Counting::watching`] its freed blocks searched.
pub struct Counting {
    /// Called with each block about to be freed while [`watch_frees`] is on.
    watcher: Option<fn(&[u8])>,
}

impl Counting {
    /// Counts only: allocations go to the system allocator unchanged.
    pub const fn plain() -> Counting {
        Counting { watcher: None }
    }

    /// Counts and zeroes every block; once [`watch_frees`] was called, moves every
    /// reallocation and hands each block about to be freed to `watcher`.
    pub const fn watching(watcher: fn(&[u8])) -> Counting {
        Counting {
            watcher: Some(watcher),
        }
    }
}

/// Bytes allocated and not freed, over all threads.
pub static LIVE: AtomicUsize = AtomicUsize::new(0);
/// The highest [`LIVE`] since it was last stored into this.
pub static PEAK: AtomicUsize = AtomicUsize::new(0);

/// Whether freed blocks go to the watcher (see [`watch_frees`]).
static WATCHING: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// The largest single allocation or reallocation this thread asked for since it was last
    /// reset.
    pub static THREAD_LARGEST: Cell<usize> = const { Cell::new(0) };
    /// Bytes this thread allocated minus those it freed (negative when it frees what others
    /// allocated).
    pub static THREAD_LIVE: Cell<isize> = const { Cell::new(0) };
    /// The highest [`THREAD_LIVE`] since it was last set.
    pub static THREAD_PEAK: Cell<isize> = const { Cell::new(0) };
    /// Allocations and reallocations this thread asked for, ever.
    pub static THREAD_ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

/// From now on, in this process, every freed block is handed to the allocator's watcher.
pub fn watch_frees() {
    WATCHING.store(true, Ordering::SeqCst);
}

fn grew(n: usize) {
    let _ = THREAD_ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
    let now = LIVE.fetch_add(n, Ordering::Relaxed) + n;
    PEAK.fetch_max(now, Ordering::Relaxed);
    let _ = THREAD_LARGEST.try_with(|m| m.set(m.get().max(n)));
    thread_grew(n as isize);
}

fn shrank(n: usize) {
    LIVE.fetch_sub(n, Ordering::Relaxed);
    thread_grew(-(n as isize));
}

fn thread_grew(by: isize) {
    let _ = THREAD_LIVE.try_with(|l| {
        l.set(l.get() + by);
        let _ = THREAD_PEAK.try_with(|p| p.set(p.get().max(l.get())));
    });
}

// SAFETY: every block comes from the system allocator with the layout it was asked for and goes
// back to it with the same layout; a watcher reads a block only before it is freed and only when
// every block was zeroed at its allocation; a moving reallocation allocates the new block first
// and copies at most the smaller of the two sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = if self.watcher.is_some() {
            System.alloc_zeroed(layout)
        } else {
            System.alloc(layout)
        };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if let Some(watcher) = self.watcher {
            if WATCHING.load(Ordering::Relaxed) {
                watcher(std::slice::from_raw_parts(ptr, layout.size()));
            }
        }
        shrank(layout.size());
        System.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if self.watcher.is_some() && WATCHING.load(Ordering::Relaxed) {
            let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
            let new = self.alloc(new_layout);
            if !new.is_null() {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
            return new;
        }
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            if self.watcher.is_some() && new_size > layout.size() {
                // The grown part, zeroed like every block: a watch turned on later may read it.
                std::ptr::write_bytes(p.add(layout.size()), 0, new_size - layout.size());
            }
            shrank(layout.size());
            grew(new_size);
        }
        p
    }
}
