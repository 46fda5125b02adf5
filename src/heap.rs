//! Live heap bytes, for finding where memory goes. A build with the
//! `heap-stats` feature wraps the allocator in [`Counting`], which counts
//! the bytes live allocations hold; `/foldgate/metrics` then exports them
//! as `foldgate_heap_live_bytes`, beside the caches' own sizes, so a soak
//! tells memory the program holds from memory the allocator keeps. Off by
//! default: the count is an atomic add on every allocation and free, on
//! one counter all threads share.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Bytes held by live allocations made through [`Counting`].
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// An allocator that counts the bytes live allocations of `A` hold.
#[derive(Debug)]
pub struct Counting<A>(pub A);

// SAFETY: every call is passed to `A` unchanged; only a counter is added.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Counting<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let ptr = unsafe { self.0.alloc(layout) };
        if !ptr.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let ptr = unsafe { self.0.alloc_zeroed(layout) };
        if !ptr.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { self.0.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let new = unsafe { self.0.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            LIVE.fetch_add(new_size, Ordering::Relaxed);
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        new
    }
}

/// Bytes live allocations hold, when this build counts them (the
/// `heap-stats` feature).
pub fn live_bytes() -> Option<u64> {
    cfg!(feature = "heap-stats").then(|| LIVE.load(Ordering::Relaxed) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::alloc::System;

    #[test]
    fn counts_what_is_live() {
        let a = Counting(System);
        let before = LIVE.load(Ordering::Relaxed);
        let layout = Layout::from_size_align(1000, 8).unwrap_or_else(|_| Layout::new::<u8>());
        // SAFETY: a non-zero layout; the pointers are freed with theirs.
        unsafe {
            let p = a.alloc(layout);
            let q = a.realloc(p, layout, 3000);
            assert_eq!(LIVE.load(Ordering::Relaxed) - before, 3000);
            a.dealloc(q, Layout::from_size_align_unchecked(3000, 8));
        }
        assert_eq!(LIVE.load(Ordering::Relaxed), before);
    }
}
