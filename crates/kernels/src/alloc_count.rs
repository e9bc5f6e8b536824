//! [`CountingAllocator`]: the system allocator plus a count of allocations, for tests that
//! check a code path does not touch the heap (install it with `#[global_allocator]` in that
//! test binary only).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Counts `alloc` and `realloc` calls on every thread.
pub struct CountingAllocator;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
static TRACE: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Set while this thread prints a trace (which allocates itself).
    static TRACING: Cell<bool> = const { Cell::new(false) };
}

impl CountingAllocator {
    /// Allocations so far, process-wide.
    pub fn allocations() -> usize {
        ALLOCATIONS.load(Ordering::SeqCst)
    }

    /// While on, every allocation prints its size and a backtrace to stderr (to find where
    /// an unexpected one comes from).
    pub fn trace(on: bool) {
        TRACE.store(on, Ordering::SeqCst);
    }
}

fn count(layout: Layout) {
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    if TRACE.load(Ordering::Relaxed) && !TRACING.with(|t| t.replace(true)) {
        eprintln!(
            "allocation of {} bytes at\n{}",
            layout.size(),
            std::backtrace::Backtrace::force_capture()
        );
        TRACING.with(|t| t.set(false));
    }
}

// SAFETY: every call is forwarded unchanged to the system allocator, which upholds the
// `GlobalAlloc` contract; the counter does not touch the memory.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout);
        // SAFETY: the caller's contract (non-zero size layout) is passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` through this allocator with this `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(layout);
        // SAFETY: `ptr` came from `System` with `layout`; the caller guarantees `new_size`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
