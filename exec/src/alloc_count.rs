//! A global allocator that counts heap allocations (and reallocations), forwarding every call
//! to the system allocator unchanged. One relaxed atomic add per allocation: cheap enough to
//! leave on in every build, so benchmarks and tests can show that a warm exchange allocates
//! nothing. A program installs it with
//! `#[global_allocator] static GLOBAL: starhalo_exec::alloc_count::Counting = starhalo_exec::alloc_count::Counting;`.
//!
//! It also notes when the system refuses an allocation. Rust ends the process with SIGABRT
//! when an infallible allocation (a `Vec` growing) is refused; after [`exit_on_refusal`] such
//! an end is instead a message and exit code 1, which `mpiexec` passes on after ending the
//! other ranks. Fallible allocations ([`try_reserve_exact`]) keep their meaning: the caller
//! sees the error and reports it.
//!
//! `GlobalAlloc` is an unsafe trait: this module is the one place outside FFI that needs
//! `unsafe`, for the trait, the forwarding calls and the signal handler.

#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The counting allocator.
pub struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Whether the system refused an allocation of this thread that no fallible caller
    /// handled ([`try_reserve_exact`] forgets its own). Rust aborts on the thread whose
    /// infallible allocation failed, and `abort` signals that thread, so the handler reads
    /// the flag of the refusal. Const-initialised and without a destructor: reading it
    /// allocates nothing and is safe in a signal handler.
    static REFUSED: Cell<bool> = const { Cell::new(false) };
}
/// What [`exit_on_refusal`] prints.
static MESSAGE: OnceLock<&'static str> = OnceLock::new();

/// Allocations (including reallocations and zeroed allocations) so far, on this process.
pub fn allocations() -> u64 {
    ALLOCATIONS.load(Ordering::Relaxed)
}

/// From now on, an abort after the system refused an allocation of the aborting thread
/// (Rust's end for an infallible one) prints `message` on standard error and exits with
/// code 1. Other aborts are left as they are, after a refusal [`try_reserve_exact`]
/// returned too. Only [`Counting`] notes refusals, so it must be the global allocator.
pub fn exit_on_refusal(message: &'static str) {
    let _ = MESSAGE.set(message);
    // SAFETY: `on_abort` has the signature `signal` expects and makes only async-signal-safe
    // calls (an atomic load, `write`, `_exit`).
    unsafe {
        libc::signal(libc::SIGABRT, on_abort as *const () as libc::sighandler_t);
    }
}

extern "C" fn on_abort(_signal: libc::c_int) {
    if !REFUSED.try_with(Cell::get).unwrap_or(false) {
        // Returning lets `abort` go on to the default action.
        return;
    }
    if let Some(m) = MESSAGE.get() {
        // SAFETY: `m` is a live `'static` string of `m.len()` bytes; `write` and `_exit` are
        // async-signal-safe and nothing here allocates.
        unsafe {
            libc::write(2, m.as_ptr().cast(), m.len());
            libc::write(2, b"\n".as_ptr().cast(), 1);
        }
    }
    // SAFETY: ends the process at once, as `abort` would have, with another code.
    unsafe { libc::_exit(1) }
}

/// `p`, noting a refusal when it is null.
fn noted(p: *mut u8) -> *mut u8 {
    if p.is_null() {
        // `try_with`: allocations while the thread's locals are torn down go unnoted.
        let _ = REFUSED.try_with(|r| r.set(true));
    }
    p
}

/// `v.try_reserve_exact(additional)`, the way every fallible allocation of the workspace
/// goes: a refusal it returns is the caller's to report, so a later, unrelated abort stays
/// an abort rather than an out-of-memory exit.
pub fn try_reserve_exact<T>(
    v: &mut Vec<T>,
    additional: usize,
) -> Result<(), std::collections::TryReserveError> {
    #[allow(clippy::disallowed_methods)] // the one call the rest go through
    let got = v.try_reserve_exact(additional);
    if got.is_err() {
        let _ = REFUSED.try_with(|r| r.set(false));
    }
    got
}

// SAFETY: every call is forwarded unchanged to the system allocator, which upholds the
// `GlobalAlloc` contract; the only additions are a counter increment and a flag.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        noted(unsafe { System.alloc(layout) })
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        noted(unsafe { System.alloc_zeroed(layout) })
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        noted(unsafe { System.realloc(ptr, layout, new_size) })
    }
}
