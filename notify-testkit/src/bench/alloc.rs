//! A counting global allocator: the system allocator, counting the heap bytes live and
//! their peak, for a test or bench binary of its own that asks how much heap a piece
//! of work holds at its peak.
//!
//! ```
//! use notify_testkit::bench::alloc::{CountingAlloc, peak_during};
//!
//! #[global_allocator]
//! static ALLOC: CountingAlloc = CountingAlloc;
//!
//! fn main() {
//!     let peak = peak_during(|| drop(std::hint::black_box(vec![0u8; 1 << 20])));
//!     assert!(peak >= 1 << 20);
//! }
//! ```
//!
//! Without `#[global_allocator]` naming it nothing is counted, and every figure is 0.
// A global allocator can only be written with `unsafe impl GlobalAlloc`; this one only
// delegates to `System` and counts.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(n: usize) {
    let now = LIVE.fetch_add(n, Ordering::SeqCst) + n;
    PEAK.fetch_max(now, Ordering::SeqCst);
}

fn shrank(n: usize) {
    LIVE.fetch_sub(n, Ordering::SeqCst);
}

/// The system allocator, counting the bytes live and their peak. Install it with
/// `#[global_allocator]` in the binary that measures.
#[derive(Debug)]
pub struct CountingAlloc;

// SAFETY: every call is forwarded unchanged to `System`; the counters do not touch the
// memory.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is passed on.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is passed on.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is passed on.
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract is passed on.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            // Counted as a new block then the old one freed: a moving realloc holds both.
            grew(new_size);
            shrank(layout.size());
        }
        p
    }
}

/// The heap's peak since a starting point: [`Peak::start`] resets the peak to the bytes
/// live now, [`Peak::grown`] answers how far above that it has been since. For work
/// that awaits; [`peak_during`] for a closure.
#[derive(Debug)]
pub struct Peak {
    base: usize,
}

impl Peak {
    /// Starts measuring from the bytes live now.
    #[must_use]
    pub fn start() -> Self {
        let base = LIVE.load(Ordering::SeqCst);
        PEAK.store(base, Ordering::SeqCst);
        Self { base }
    }

    /// The peak of live heap bytes above the start, so far.
    #[must_use]
    pub fn grown(&self) -> usize {
        PEAK.load(Ordering::SeqCst).saturating_sub(self.base)
    }
}

/// The peak of live heap bytes above the level at the start, while `f` runs.
pub fn peak_during(f: impl FnOnce()) -> usize {
    let peak = Peak::start();
    f();
    peak.grown()
}
