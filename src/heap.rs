//! Live heap bytes, for finding where memory goes. A build with the
//! `heap-stats` feature wraps the allocator in [`Counting`], which counts
//! the bytes live allocations hold; `/foldgate/metrics` then exports them
//! as `foldgate_heap_live_bytes`, beside the caches' own sizes, so a soak
//! tells memory the program holds from memory the allocator keeps. Off by
//! default: the count is two atomic adds on every allocation and free,
//! on counters all threads share. The bytes are counted by the size of the
//! allocation ([`live_by_size`]), so a slow rise can be told apart as many
//! small entries or a few growing buffers; their sum is the live total.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The upper bounds of the size classes [`live_by_size`] reports, in bytes.
const SIZES: [usize; 6] = [64, 512, 4096, 32 * 1024, 256 * 1024, usize::MAX];

/// Live bytes and live allocations made through [`Counting`], in each
/// class of [`SIZES`].
static BYTES_BY_SIZE: [AtomicUsize; SIZES.len()] = [const { AtomicUsize::new(0) }; SIZES.len()];
static COUNT_BY_SIZE: [AtomicUsize; SIZES.len()] = [const { AtomicUsize::new(0) }; SIZES.len()];

fn class(size: usize) -> usize {
    SIZES
        .iter()
        .position(|&max| size <= max)
        .unwrap_or(SIZES.len() - 1)
}

fn allocated(size: usize) {
    let c = class(size);
    BYTES_BY_SIZE[c].fetch_add(size, Ordering::Relaxed);
    COUNT_BY_SIZE[c].fetch_add(1, Ordering::Relaxed);
}

fn freed(size: usize) {
    let c = class(size);
    BYTES_BY_SIZE[c].fetch_sub(size, Ordering::Relaxed);
    COUNT_BY_SIZE[c].fetch_sub(1, Ordering::Relaxed);
}

/// An allocator that counts the bytes live allocations of `A` hold.
#[derive(Debug)]
pub struct Counting<A>(pub A);

// SAFETY: every call is passed to `A` unchanged; only a counter is added.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Counting<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let ptr = unsafe { self.0.alloc(layout) };
        if !ptr.is_null() {
            allocated(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let ptr = unsafe { self.0.alloc_zeroed(layout) };
        if !ptr.is_null() {
            allocated(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { self.0.dealloc(ptr, layout) };
        freed(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let new = unsafe { self.0.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            allocated(new_size);
            freed(layout.size());
        }
        new
    }
}

/// Bytes live allocations hold, when this build counts them (the
/// `heap-stats` feature).
pub fn live_bytes() -> Option<u64> {
    cfg!(feature = "heap-stats").then(|| live() as u64)
}

fn live() -> usize {
    BYTES_BY_SIZE
        .iter()
        .map(|n| n.load(Ordering::Relaxed))
        .sum()
}

/// Live bytes and live allocations by allocation size, when this build
/// counts them: `(largest size in the class, bytes, allocations)`, the
/// last class unbounded (`None`).
pub fn live_by_size() -> Option<Vec<(Option<usize>, u64, u64)>> {
    cfg!(feature = "heap-stats").then(|| {
        SIZES
            .iter()
            .zip(BYTES_BY_SIZE.iter().zip(&COUNT_BY_SIZE))
            .map(|(&max, (bytes, count))| {
                let bound = (max != usize::MAX).then_some(max);
                let load = |n: &AtomicUsize| n.load(Ordering::Relaxed) as u64;
                (bound, load(bytes), load(count))
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::alloc::System;

    // One test: the counters are process-wide, and a second test running
    // beside it would move them.
    #[test]
    fn counts_what_is_live_and_moves_a_realloc_to_its_size_class() {
        let a = Counting(System);
        let (small, large) = (class(1000), class(100_000));
        let at = |c: usize| BYTES_BY_SIZE[c].load(Ordering::Relaxed);
        let before = live();
        let (small_before, large_before) = (at(small), at(large));
        let layout = Layout::from_size_align(1000, 8).unwrap_or_else(|_| Layout::new::<u8>());
        // SAFETY: a non-zero layout; the pointers are freed with theirs.
        unsafe {
            let p = a.alloc(layout);
            assert_eq!(at(small) - small_before, 1000);
            let q = a.realloc(p, layout, 100_000);
            assert_eq!(live() - before, 100_000);
            assert_eq!(
                (at(small), at(large) - large_before),
                (small_before, 100_000)
            );
            a.dealloc(q, Layout::from_size_align_unchecked(100_000, 8));
        }
        assert_eq!(live(), before);
        assert_eq!(at(large), large_before);
        assert_eq!(
            (class(64), class(65), class(usize::MAX)),
            (0, 1, SIZES.len() - 1)
        );
    }
}
