//! A buffer returned to the pool is handed out again without touching the allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use starhalo_boundary::pool::BufferPool;

struct Counting;

thread_local! {
    // Per thread, so the test harness's own threads cannot disturb the count.
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

fn count() -> usize {
    ALLOCS.with(Cell::get)
}

fn bump() {
    // `try_with`: the slot may be gone while a thread is being torn down.
    let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so
// `System`'s guarantees carry over; the counter is a
// const-initialised thread-local `Cell` and allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        bump();
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` above with this `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        bump();
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn get_after_return_does_not_allocate() {
    let pool = BufferPool::new();
    let sizes = [16usize, 100, 7];
    // Warm up: one buffer of each size, returned.
    let first: Vec<_> = sizes.iter().map(|&n| pool.get(n)).collect();
    drop(first);
    let before = count();
    for _ in 0..50 {
        let held: Vec<_> = [pool.get(16), pool.get(100), pool.get(7)].into();
        assert_eq!(held[1].len(), 100);
        drop(held);
    }
    // The `Vec` of handles allocates once per round; the pool itself never does.
    let after = count();
    assert_eq!(after - before, 50, "the pool allocated on get or return");
    // A size never returned before does allocate.
    let b = count();
    let fresh = pool.get(33);
    assert!(count() > b);
    drop(fresh);
}
