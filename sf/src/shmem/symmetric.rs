//! Symmetric objects and the one-sided operations on them.
//!
//! Other PEs write an object whenever they like, as in OpenSHMEM, so this process reads and
//! writes its own part by copies ([`Symmetric::get`] and [`Symmetric::put`] to its own PE)
//! after the synchronisation (a barrier, a `wait_until`) that orders the others' writes
//! before it. A Rust slice over the memory would let the compiler keep values across that
//! synchronisation; [`Symmetric::local`] gives one only under a promise (`unsafe`) that no
//! PE writes the object while it lives. Operations that write an object take it by `&mut`.

use super::Shmem;
use crate::error::SfError;
use crate::raw::{RmaOp, Word};
use crate::unit::Scalar;
use std::marker::PhantomData;
use std::sync::atomic::{fence, Ordering};

/// An array of `len` values of `T` at the same offset of every PE's heap, from
/// [`Shmem::malloc`]; freed (on this PE) when dropped.
pub struct Symmetric<'h, T> {
    shmem: &'h Shmem,
    off: usize,
    len: usize,
    _t: PhantomData<T>,
}

impl<T> Drop for Symmetric<'_, T> {
    fn drop(&mut self) {
        let bytes = self.len * std::mem::size_of::<T>();
        self.shmem.arena.borrow_mut().give(self.off, bytes);
    }
}

impl<T> std::fmt::Debug for Symmetric<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Symmetric")
            .field("offset", &self.off)
            .field("len", &self.len)
            .finish()
    }
}

/// A comparison for [`Symmetric::wait_until`] and [`Symmetric::test`]: `value cmp operand`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmp {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
}

impl Cmp {
    /// Whether `value cmp operand` holds.
    pub fn holds<T: PartialOrd>(self, value: T, operand: T) -> bool {
        match self {
            Cmp::Eq => value == operand,
            Cmp::Ne => value != operand,
            Cmp::Gt => value > operand,
            Cmp::Ge => value >= operand,
            Cmp::Lt => value < operand,
            Cmp::Le => value <= operand,
        }
    }
}

/// An atomic operation that returns the value it replaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Atomic<T> {
    /// Read.
    Fetch,
    /// Write the value.
    Swap(T),
    /// Write `value` if the word equals `cond`.
    CompareSwap { cond: T, value: T },
    /// Add (wrapping).
    FetchAdd(T),
    /// Bitwise and.
    FetchAnd(T),
    /// Bitwise or.
    FetchOr(T),
    /// Bitwise exclusive or.
    FetchXor(T),
}

/// An atomic operation that returns nothing (complete at its target after a quiet).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Update<T> {
    /// Write the value.
    Set(T),
    /// Add (wrapping).
    Add(T),
    /// Bitwise and.
    And(T),
    /// Bitwise or.
    Or(T),
    /// Bitwise exclusive or.
    Xor(T),
}

/// How [`Symmetric::put_signal`] changes the signal word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// Write the value.
    Set(u64),
    /// Add the value (wrapping).
    Add(u64),
}

mod sealed {
    pub trait Sealed {}
}

/// The integer types with remote atomics: `i32`, `i64`, `u32`, `u64`.
pub trait AtomicInt: Scalar + sealed::Sealed {}

macro_rules! atomic_int {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl AtomicInt for $t {}
    )*};
}
atomic_int!(i32, i64, u32, u64);

fn word<T: AtomicInt>() -> Word {
    match T::NAME {
        "i32" => Word::I32,
        "i64" => Word::I64,
        "u32" => Word::U32,
        _ => Word::U64,
    }
}

impl<'h, T: bytemuck::Pod> Symmetric<'h, T> {
    pub(super) fn new(shmem: &'h Shmem, off: usize, len: usize) -> Self {
        Self {
            shmem,
            off,
            len,
            _t: PhantomData,
        }
    }

    /// Values in the object.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an object of no values.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The heap the object lives in.
    pub fn shmem(&self) -> &'h Shmem {
        self.shmem
    }

    fn local_ptr(&self) -> *mut T {
        // SAFETY: the object's block lies within this PE's heap.
        let p = unsafe { self.shmem.heap.base().add(self.off) }.cast::<T>();
        debug_assert!(p.is_aligned());
        p
    }

    /// This PE's values, borrowed in place (for handing to MPI or a kernel without a copy).
    ///
    /// # Safety
    /// No PE may write the object while the slice lives (a put, an atomic, a signal): the
    /// compiler assumes the values behind a shared slice do not change.
    pub unsafe fn local(&self) -> &[T] {
        // SAFETY: the block holds `len` values of `T` (zeroed at allocation, and `T` is Pod),
        // aligned (blocks start on 64 bytes of a 64-byte-aligned heap, checked at set-up);
        // this process writes it only through `&mut self`, others not at all (the caller's
        // promise).
        unsafe { std::slice::from_raw_parts(self.local_ptr(), self.len) }
    }

    /// This PE's values, borrowed in place to write.
    ///
    /// # Safety
    /// As for [`local`](Self::local): no other PE may read or write the object meanwhile.
    pub unsafe fn local_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `local`, and `&mut self` makes this the only borrow here.
        unsafe { std::slice::from_raw_parts_mut(self.local_ptr(), self.len) }
    }

    /// The PE as MPI names it and the byte displacement of value `at`, once `pe` and the
    /// values `at..at + n` are checked.
    fn target(&self, at: usize, n: usize, pe: usize) -> Result<(i32, usize), SfError> {
        let pe = self.shmem.check_pe(pe)?;
        match at.checked_add(n) {
            Some(end) if end <= self.len => {}
            _ => {
                return Err(SfError::IndexOutOfRange {
                    what: "symmetric object",
                    index: at.saturating_add(n).saturating_sub(1),
                    len: self.len,
                })
            }
        }
        Ok((pe, self.off + at * std::mem::size_of::<T>()))
    }

    /// Where this process loads and stores byte `disp` of `pe`'s heap, if it can.
    fn direct(&self, pe: i32, disp: usize) -> Option<*mut u8> {
        let base = self.shmem.direct[pe as usize];
        // SAFETY: `disp` was checked to lie within the heap, which `base` starts.
        (!base.is_null()).then(|| unsafe { base.add(disp) })
    }

    /// Writes `src` into values `at..` of `pe`'s object (`shmem_put`); `src` is reusable on
    /// return, and the values are at `pe` after a [`quiet`](Shmem::quiet).
    pub fn put(&mut self, at: usize, src: &[T], pe: usize) -> Result<(), SfError> {
        let (pe, disp) = self.target(at, src.len(), pe)?;
        let bytes = std::mem::size_of_val(src);
        match self.direct(pe, disp) {
            // SAFETY: the target bytes lie in `pe`'s heap, mapped here; `src` cannot overlap
            // them (the object is borrowed mutably, and other objects are disjoint).
            Some(p) => unsafe { std::ptr::copy_nonoverlapping(src.as_ptr().cast(), p, bytes) },
            // SAFETY: `src` is valid for `bytes` bytes; the target range was checked.
            None => unsafe { self.shmem.heap.put(src.as_ptr().cast(), bytes, pe, disp) },
        }
        Ok(())
    }

    /// Reads values `at..at + dst.len()` of `pe`'s object into `dst` (`shmem_get`).
    pub fn get(&self, at: usize, dst: &mut [T], pe: usize) -> Result<(), SfError> {
        let (pe, disp) = self.target(at, dst.len(), pe)?;
        let bytes = std::mem::size_of_val(dst);
        match self.direct(pe, disp) {
            // SAFETY: as in `put`, reading; `dst` is a distinct mutable borrow.
            Some(p) => unsafe {
                std::ptr::copy_nonoverlapping(p.cast_const(), dst.as_mut_ptr().cast(), bytes)
            },
            // SAFETY: `dst` is valid for writes of `bytes` bytes; the range was checked.
            None => unsafe {
                self.shmem
                    .heap
                    .get(dst.as_mut_ptr().cast(), bytes, pe, disp)
            },
        }
        Ok(())
    }

    /// Writes `n` values of `src`, `src_stride` apart, into `pe`'s object at `at`, `stride`
    /// apart (`shmem_iput`).
    pub fn put_strided(
        &mut self,
        at: usize,
        stride: usize,
        src: &[T],
        src_stride: usize,
        n: usize,
        pe: usize,
    ) -> Result<(), SfError> {
        let (pe, disp) = self.strided_target(at, stride, src.len(), src_stride, n, pe)?;
        // The origin is only read on a put, whatever the pointer's type says.
        self.strided(
            true,
            src.as_ptr().cast_mut(),
            src_stride,
            n,
            pe,
            disp,
            stride,
        );
        Ok(())
    }

    /// Reads `n` values of `pe`'s object from `at`, `stride` apart, into `dst`, `dst_stride`
    /// apart (`shmem_iget`).
    pub fn get_strided(
        &self,
        at: usize,
        stride: usize,
        dst: &mut [T],
        dst_stride: usize,
        n: usize,
        pe: usize,
    ) -> Result<(), SfError> {
        let (pe, disp) = self.strided_target(at, stride, dst.len(), dst_stride, n, pe)?;
        self.strided(false, dst.as_mut_ptr(), dst_stride, n, pe, disp, stride);
        Ok(())
    }

    /// Checks a strided transfer of `n` values: strides of at least 1, every value within
    /// both sides, counts MPI can take.
    fn strided_target(
        &self,
        at: usize,
        stride: usize,
        local_len: usize,
        local_stride: usize,
        n: usize,
        pe: usize,
    ) -> Result<(i32, usize), SfError> {
        if stride == 0 || local_stride == 0 {
            return Err(SfError::ZeroStride);
        }
        let span = |s: usize| {
            n.saturating_sub(1)
                .checked_mul(s)
                .and_then(|x| x.checked_add(1))
        };
        let too_far = |what, index, len| SfError::IndexOutOfRange { what, index, len };
        if n > i32::MAX as usize {
            return Err(too_far("strided value count", n, i32::MAX as usize));
        }
        let local = span(local_stride).filter(|&s| n == 0 || s <= local_len);
        if local.is_none() {
            let last = n.saturating_sub(1).saturating_mul(local_stride);
            return Err(too_far("local array", last, local_len));
        }
        let remote = match n {
            0 => 0,
            _ => span(stride).unwrap_or(usize::MAX),
        };
        self.target(at, remote, pe)
    }

    /// Byte strides for `n` values `stride` and `local_stride` values apart, once both spans
    /// are checked to fit in memory (a single value has no stride to speak of).
    fn byte_strides(n: usize, stride: usize, local_stride: usize) -> (usize, usize) {
        let size = std::mem::size_of::<T>();
        match n {
            0 | 1 => (size, size),
            // The spans fit in arrays, so these products do too.
            _ => (stride * size, local_stride * size),
        }
    }

    /// Moves `n` values between `local` (`local_stride` apart) and byte `disp` of `pe`'s heap
    /// (`stride` values apart), once both sides are checked.
    #[allow(clippy::too_many_arguments)]
    fn strided(
        &self,
        put: bool,
        local: *mut T,
        local_stride: usize,
        n: usize,
        pe: i32,
        disp: usize,
        stride: usize,
    ) {
        let size = std::mem::size_of::<T>();
        if n == 0 || size == 0 {
            return;
        }
        let (stride_bytes, local_bytes) = Self::byte_strides(n, stride, local_stride);
        match self.direct(pe, disp) {
            Some(p) => {
                for i in 0..n {
                    // SAFETY: value `i` of each side lies within it (checked); the sides do
                    // not overlap (distinct borrows or distinct objects).
                    unsafe {
                        let mine = local.cast::<u8>().add(i * local_bytes);
                        let theirs = p.add(i * stride_bytes);
                        match put {
                            true => std::ptr::copy_nonoverlapping(mine, theirs, size),
                            false => std::ptr::copy_nonoverlapping(theirs, mine, size),
                        }
                    }
                }
            }
            // SAFETY: every value on both sides was checked to lie within its array.
            None => unsafe {
                self.shmem.heap.strided(
                    put,
                    local.cast(),
                    local_bytes,
                    size,
                    n,
                    pe,
                    disp,
                    stride_bytes,
                )
            },
        }
    }

    /// Writes `src` into values `at..` of `pe`'s object, then updates word `sig_at` of
    /// `pe`'s `sig` (`shmem_put_signal`): a PE that sees the signal change sees the data.
    #[allow(clippy::too_many_arguments)]
    pub fn put_signal(
        &mut self,
        at: usize,
        src: &[T],
        sig: &mut Symmetric<'h, u64>,
        sig_at: usize,
        signal: Signal,
        pe: usize,
    ) -> Result<(), SfError> {
        if !std::ptr::eq(self.shmem, sig.shmem) {
            return Err(SfError::OtherHeap);
        }
        // Checked before any data moves.
        let (rank, _) = sig.target(sig_at, 1, pe)?;
        self.put(at, src, pe)?;
        // The data must be complete at `pe` before the signal is: a fence for stores, a
        // flush for RMA.
        fence(Ordering::Release);
        if !self.shmem.load_store(pe) {
            self.shmem.heap.flush(rank);
        }
        let update = match signal {
            Signal::Set(v) => Update::Set(v),
            Signal::Add(v) => Update::Add(v),
        };
        // A processor atomic's release orders the copy above before it.
        sig.update(sig_at, update, pe)?;
        if !self.shmem.cpu_atomics {
            // Complete the signal now, so that it does not wait on this PE's next MPI call.
            self.shmem.heap.flush(rank);
        }
        Ok(())
    }
}

impl<T: AtomicInt> Symmetric<'_, T> {
    /// Applies `op` atomically to value `i` of `pe`'s object and returns the value it held.
    pub fn atomic(&mut self, i: usize, op: Atomic<T>, pe: usize) -> Result<T, SfError> {
        let (pe, disp) = self.target(i, 1, pe)?;
        if self.shmem.cpu_atomics {
            return Ok(cpu_atomic(
                self.direct(pe, disp).expect("every PE is direct"),
                op,
            ));
        }
        let heap = &self.shmem.heap;
        let w = word::<T>();
        let fetch = |v, op| heap.fetch_and_op(w, v, op, pe, disp);
        Ok(match op {
            Atomic::Fetch => fetch(T::zeroed(), RmaOp::NoOp),
            Atomic::Swap(v) => fetch(v, RmaOp::Replace),
            Atomic::CompareSwap { cond, value } => heap.compare_and_swap(w, cond, value, pe, disp),
            Atomic::FetchAdd(v) => fetch(v, RmaOp::Sum),
            Atomic::FetchAnd(v) => fetch(v, RmaOp::Band),
            Atomic::FetchOr(v) => fetch(v, RmaOp::Bor),
            Atomic::FetchXor(v) => fetch(v, RmaOp::Bxor),
        })
    }

    /// Applies `op` atomically to value `i` of `pe`'s object, fetching nothing.
    pub fn update(&mut self, i: usize, op: Update<T>, pe: usize) -> Result<(), SfError> {
        let (pe, disp) = self.target(i, 1, pe)?;
        let (v, fetching, op) = match op {
            Update::Set(v) => (v, Atomic::Swap(v), RmaOp::Replace),
            Update::Add(v) => (v, Atomic::FetchAdd(v), RmaOp::Sum),
            Update::And(v) => (v, Atomic::FetchAnd(v), RmaOp::Band),
            Update::Or(v) => (v, Atomic::FetchOr(v), RmaOp::Bor),
            Update::Xor(v) => (v, Atomic::FetchXor(v), RmaOp::Bxor),
        };
        match self.shmem.cpu_atomics {
            true => {
                cpu_atomic(self.direct(pe, disp).expect("every PE is direct"), fetching);
            }
            false => self.shmem.heap.accumulate(word::<T>(), v, op, pe, disp),
        }
        Ok(())
    }

    /// Byte `disp` of this PE's object, read atomically; what was put before a signal
    /// changed is visible once the change is seen.
    fn read_own(&self, me: i32, disp: usize) -> T {
        if self.shmem.cpu_atomics {
            return cpu_atomic(self.direct(me, disp).expect("own heap"), Atomic::Fetch);
        }
        // Through MPI's atomics, which also moves MPI's progress along.
        let heap = &self.shmem.heap;
        let value = heap.fetch_and_op(word::<T>(), T::zeroed(), RmaOp::NoOp, me, disp);
        heap.sync();
        fence(Ordering::Acquire);
        value
    }

    /// Whether this PE's value `i` compares `cmp` to `operand` now (`shmem_test`).
    pub fn test(&self, i: usize, cmp: Cmp, operand: T) -> Result<bool, SfError> {
        let (me, disp) = self.target(i, 1, self.shmem.my_pe())?;
        Ok(cmp.holds(self.read_own(me, disp), operand))
    }

    /// Waits until this PE's value `i` compares `cmp` to `operand` (`shmem_wait_until`), and
    /// returns it.
    pub fn wait_until(&self, i: usize, cmp: Cmp, operand: T) -> Result<T, SfError> {
        let (me, disp) = self.target(i, 1, self.shmem.my_pe())?;
        loop {
            let value = self.read_own(me, disp);
            if cmp.holds(value, operand) {
                return Ok(value);
            }
            std::hint::spin_loop();
        }
    }
}

/// `op` on the word at `ptr` with the processor's atomics (sequentially consistent, so each
/// also orders the plain copies around it).
fn cpu_atomic<T: AtomicInt>(ptr: *mut u8, op: Atomic<T>) -> T {
    use std::sync::atomic::{AtomicI32, AtomicI64, AtomicU32, AtomicU64};
    const SC: Ordering = Ordering::SeqCst;
    macro_rules! on {
        ($atomic:ty, $int:ty) => {{
            // SAFETY: `ptr` is a checked, aligned word of a symmetric object in shared memory;
            // while every PE takes this path, nothing else reaches the word except atomically.
            let a = unsafe { <$atomic>::from_ptr(ptr.cast::<$int>()) };
            let c = |x: T| -> $int { bytemuck::cast(x) };
            let old = match op {
                Atomic::Fetch => a.load(SC),
                Atomic::Swap(v) => a.swap(c(v), SC),
                Atomic::CompareSwap { cond, value } => a
                    .compare_exchange(c(cond), c(value), SC, SC)
                    .unwrap_or_else(|x| x),
                Atomic::FetchAdd(v) => a.fetch_add(c(v), SC),
                Atomic::FetchAnd(v) => a.fetch_and(c(v), SC),
                Atomic::FetchOr(v) => a.fetch_or(c(v), SC),
                Atomic::FetchXor(v) => a.fetch_xor(c(v), SC),
            };
            bytemuck::cast(old)
        }};
    }
    match word::<T>() {
        Word::I32 => on!(AtomicI32, i32),
        Word::I64 => on!(AtomicI64, i64),
        Word::U32 => on!(AtomicU32, u32),
        Word::U64 => on!(AtomicU64, u64),
    }
}
