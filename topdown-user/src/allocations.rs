//! Unit tests' count of heap allocations: the test binary's allocator counts those its
//! current thread makes inside [`count`], so a test can bound what a hot path allocates
//! (tests run on threads of their own: no other test's allocations are counted).

use std::{
    alloc::{GlobalAlloc, Layout, System},
    cell::Cell,
};

thread_local! {
    /// Allocations made on this thread while counting; `None` while not counting.
    static MADE: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The system allocator, counting.
struct Counting;

// SAFETY: every call is the system allocator's; counting touches only a thread-local cell.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

fn note() {
    // `try_with`: a thread's allocations after its locals are gone are not counted.
    let _ = MADE.try_with(|made| {
        if let Some(n) = made.get() {
            made.set(Some(n + 1));
        }
    });
}

/// What `f` returns, and the allocations (and reallocations) this thread made while it ran.
pub fn count<T>(f: impl FnOnce() -> T) -> (T, usize) {
    MADE.with(|made| made.set(Some(0)));
    let out = f();
    let made = MADE.with(|made| made.take()).unwrap_or(0);
    (out, made)
}
