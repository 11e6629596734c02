//! A buffer returned to the pool is handed out again without touching the allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use starhalo_boundary::bnd_info::{recv_box, send_box, BndCache, BndInfo, FieldLayout};
use starhalo_boundary::channel::all_channels;
use starhalo_boundary::pool::BufferPool;
use starhalo_exec::Policy;
use starhalo_mesh::field::IndexShape;
use starhalo_mesh::{find_neighbors, Forest, RootGrid};

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

#[test]
fn warm_pack_and_unpack_allocate_nothing() {
    let grid = RootGrid::new(2, [2, 2, 1], [true, true, false]).unwrap();
    let forest = Forest::uniform(grid, 0);
    let nb = find_neighbors(&forest, &[0; 4]).unwrap();
    let shape = IndexShape::new([4, 4, 1], 2, 2).unwrap();
    let layout = FieldLayout::of_shape(&shape, 1);
    let (mut s, mut r) = (Vec::new(), Vec::new());
    for ch in all_channels(&nb, &[0]) {
        s.push(BndInfo::new(
            ch.key.sender,
            0,
            &send_box(&ch, &shape).unwrap().0,
            0,
            2,
        ));
        r.push(BndInfo::new(
            ch.key.receiver,
            0,
            &recv_box(&ch, &shape).unwrap().0,
            0,
            2,
        ));
    }
    let send = BndCache::new(layout, 4, s).unwrap();
    let recv = BndCache::new(layout, 4, r).unwrap();
    let mut data = vec![1.0; 4 * layout.block_len()];
    let pool = BufferPool::new();
    drop(pool.get(send.buffer_len()));
    let before = count();
    for _ in 0..5 {
        let mut buf = pool.get(send.buffer_len());
        send.pack(Policy::Serial, &data, &mut buf).unwrap();
        recv.unpack(Policy::Serial, &buf, &mut data, &[]).unwrap();
    }
    assert_eq!(count(), before, "a warm exchange allocated");
}
