//! The symmetric heap's MPI windows: page-aligned memory of this process exposed by
//! `MPI_Win_create` (every peer reached by RMA), or memory from `MPI_Win_allocate_shared` on
//! the node exposed to every rank a second time by `MPI_Win_create` over the same bytes (peers
//! on the node also reached by load and store).
//! Both windows stay in one lock-all epoch for their whole life, so operations need only
//! flushes. Displacements are in bytes from the heap's base.

use super::{byte_type, check, count, win_null, RawComm};
use mpi::ffi;
use std::alloc::Layout;
use std::ffi::CString;
use std::os::raw::c_int;

/// The integer words MPI's atomics operate on here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Word {
    I32,
    I64,
    U32,
    U64,
}

impl Word {
    fn datatype(self) -> ffi::MPI_Datatype {
        // SAFETY: reading constant handles exported by the MPI shim.
        unsafe {
            match self {
                Word::I32 => ffi::RSMPI_INT32_T,
                Word::I64 => ffi::RSMPI_INT64_T,
                Word::U32 => ffi::RSMPI_UINT32_T,
                Word::U64 => ffi::RSMPI_UINT64_T,
            }
        }
    }

    fn bytes(self) -> usize {
        match self {
            Word::I32 | Word::U32 => 4,
            Word::I64 | Word::U64 => 8,
        }
    }
}

/// The accumulate operations the heap's atomics use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RmaOp {
    Replace,
    NoOp,
    Sum,
    Band,
    Bor,
    Bxor,
}

impl RmaOp {
    fn handle(self) -> ffi::MPI_Op {
        // MPICH's ABI values of MPI_REPLACE and MPI_NO_OP (every MPICH-derived MPI shares
        // them); rsmpi's shim does not export these two.
        const REPLACE: ffi::MPI_Op = ffi::MPI_Op(0x5800000d);
        const NO_OP: ffi::MPI_Op = ffi::MPI_Op(0x5800000e);
        // SAFETY: reading constant handles exported by the MPI shim.
        unsafe {
            match self {
                RmaOp::Replace => REPLACE,
                RmaOp::NoOp => NO_OP,
                RmaOp::Sum => ffi::RSMPI_SUM,
                RmaOp::Band => ffi::RSMPI_BAND,
                RmaOp::Bor => ffi::RSMPI_BOR,
                RmaOp::Bxor => ffi::RSMPI_BXOR,
            }
        }
    }
}

/// One rank's part of a symmetric heap and the windows that expose it.
pub(crate) struct HeapWindow {
    /// Over every rank's heap: RMA to any peer.
    win: ffi::MPI_Win,
    /// The node's shared-memory window the heap was allocated from, if it was.
    shared: Option<ffi::MPI_Win>,
    /// The heap's memory when this process allocated it (freed after the windows).
    owned: Option<Layout>,
    base: *mut u8,
}

impl HeapWindow {
    /// Collective over `world`: `bytes` zeroed bytes on every rank, page-aligned, reached by
    /// RMA only.
    pub(crate) fn allocate(world: RawComm, bytes: usize) -> Self {
        let layout = Layout::from_size_align(bytes.max(1), 4096).expect("a valid heap size");
        // SAFETY: a layout of non-zero size.
        let base = unsafe { std::alloc::alloc_zeroed(layout) };
        if base.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        Self {
            win: expose(world, base, bytes),
            shared: None,
            owned: Some(layout),
            base,
        }
    }

    /// Collective over `world` and then `node` (the ranks of this node, a sub-communicator of
    /// `world`): `bytes` bytes on every rank in the node's shared memory, starting on an
    /// `align` boundary, exposed to every rank for RMA. Also returns, per rank of `node`, the
    /// address at which this process sees that rank's heap.
    pub(crate) fn allocate_shared(
        world: RawComm,
        node: RawComm,
        bytes: usize,
        align: usize,
    ) -> (Self, Vec<*mut u8>) {
        // Every part starts on a page, so each process finds the same boundary in it.
        assert!(
            align.is_power_of_two() && align <= 4096,
            "alignment {align}"
        );
        let mut base: *mut u8 = std::ptr::null_mut();
        let mut shared = win_null();
        // Each rank's part on its own pages, placed near that rank.
        let info = Info::new(&[("alloc_shared_noncontig", "true")]);
        // SAFETY: as in `allocate`; the shared memory lives until `shared` is freed in drop,
        // after `win`. `align` more bytes leave room to start on the boundary.
        let code = unsafe {
            ffi::MPI_Win_allocate_shared(
                (bytes + align) as ffi::MPI_Aint,
                1,
                info.0,
                node,
                (&raw mut base).cast(),
                &mut shared,
            )
        };
        check(code, "MPI_Win_allocate_shared");
        lock_all(shared);
        let aligned = |p: *mut u8| -> *mut u8 {
            // SAFETY: the part holds `bytes + align` bytes, so the boundary lies within it.
            unsafe { p.add(p.align_offset(align)) }
        };
        let mut size: c_int = 0;
        // SAFETY: a valid communicator; `size` is an out-parameter.
        check(
            unsafe { ffi::MPI_Comm_size(node, &mut size) },
            "MPI_Comm_size",
        );
        let peers = (0..size)
            .map(|r| {
                let (mut len, mut unit) = (0 as ffi::MPI_Aint, 0 as c_int);
                let mut ptr = std::ptr::null_mut::<u8>();
                // SAFETY: `r` is a rank of the window's group; MPI writes the three results.
                let code = unsafe {
                    ffi::MPI_Win_shared_query(shared, r, &mut len, &mut unit, (&raw mut ptr).cast())
                };
                check(code, "MPI_Win_shared_query");
                aligned(ptr)
            })
            .collect();
        let base = aligned(base);
        let heap = Self {
            win: expose(world, base, bytes),
            shared: Some(shared),
            owned: None,
            base,
        };
        (heap, peers)
    }

    /// The address of this rank's heap.
    pub(crate) fn base(&self) -> *mut u8 {
        self.base
    }

    /// Whether MPI keeps one copy of the window's memory (`MPI_WIN_UNIFIED`), so that loads
    /// and stores see RMA without a `MPI_Win_sync` between every pair.
    pub(crate) fn unified(&self) -> bool {
        let mut model: *mut c_int = std::ptr::null_mut();
        let mut flag: c_int = 0;
        // SAFETY: MPI writes a pointer to its own attribute value into `model` when `flag`
        // is set.
        let code = unsafe {
            ffi::MPI_Win_get_attr(
                self.win,
                ffi::MPI_WIN_MODEL as c_int,
                (&raw mut model).cast(),
                &mut flag,
            )
        };
        check(code, "MPI_Win_get_attr");
        // SAFETY: MPI_WIN_MODEL is an int attribute that lives as long as the window.
        flag != 0
            && !model.is_null()
            && unsafe { *model } == ffi::MPIR_Win_model_MPI_WIN_UNIFIED as c_int
    }

    /// Writes `bytes` bytes from `origin` at byte `disp` of `pe`'s heap; `origin` is reusable
    /// on return (the put is complete at the target after a flush).
    ///
    /// # Safety
    /// `origin` must be valid for reads of `bytes` bytes, and `disp + bytes` within the heap.
    pub(crate) unsafe fn put(&self, origin: *const u8, bytes: usize, pe: i32, disp: usize) {
        // SAFETY: the caller's contract; the flush below ends MPI's use of `origin`.
        let code = unsafe {
            ffi::MPI_Put_c(
                origin.cast(),
                count(bytes),
                byte_type(),
                pe,
                disp as ffi::MPI_Aint,
                count(bytes),
                byte_type(),
                self.win,
            )
        };
        check(code, "MPI_Put_c");
        self.flush_local(pe);
    }

    /// Reads `bytes` bytes at byte `disp` of `pe`'s heap into `origin`, complete on return.
    ///
    /// # Safety
    /// `origin` must be valid for writes of `bytes` bytes, and `disp + bytes` within the heap.
    pub(crate) unsafe fn get(&self, origin: *mut u8, bytes: usize, pe: i32, disp: usize) {
        // SAFETY: the caller's contract; the flush below completes the read into `origin`.
        let code = unsafe {
            ffi::MPI_Get_c(
                origin.cast(),
                count(bytes),
                byte_type(),
                pe,
                disp as ffi::MPI_Aint,
                count(bytes),
                byte_type(),
                self.win,
            )
        };
        check(code, "MPI_Get_c");
        self.flush_local(pe);
    }

    /// Moves `n` elements of `elem` bytes between `origin` (elements `origin_stride` bytes
    /// apart) and `pe`'s heap at `disp` (elements `target_stride` bytes apart), one RMA call
    /// with a strided datatype on each side: a put when `put`, else a get. Complete locally on
    /// return.
    ///
    /// # Safety
    /// Every origin element must be valid (for reads on a put, writes on a get), and every
    /// target element within the heap.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn strided(
        &self,
        put: bool,
        origin: *mut u8,
        origin_stride: usize,
        elem: usize,
        n: usize,
        pe: i32,
        disp: usize,
        target_stride: usize,
    ) {
        let origin_type = Strided::new(elem, n, origin_stride);
        let target_type = Strided::new(elem, n, target_stride);
        // SAFETY: the caller's contract; the datatypes describe exactly the elements named.
        let code = unsafe {
            if put {
                ffi::MPI_Put(
                    origin.cast_const().cast(),
                    1,
                    origin_type.0,
                    pe,
                    disp as ffi::MPI_Aint,
                    1,
                    target_type.0,
                    self.win,
                )
            } else {
                ffi::MPI_Get(
                    origin.cast(),
                    1,
                    origin_type.0,
                    pe,
                    disp as ffi::MPI_Aint,
                    1,
                    target_type.0,
                    self.win,
                )
            }
        };
        check(code, if put { "MPI_Put" } else { "MPI_Get" });
        self.flush_local(pe);
    }

    /// Atomically applies `op` with `value` to the word at `disp` of `pe` and returns the word
    /// it held before.
    pub(crate) fn fetch_and_op<T: bytemuck::Pod>(
        &self,
        word: Word,
        value: T,
        op: RmaOp,
        pe: i32,
        disp: usize,
    ) -> T {
        assert_eq!(std::mem::size_of::<T>(), word.bytes(), "word size");
        let mut old = value;
        // SAFETY: both values live on this frame until the flush completes the call; the
        // caller checked `disp` against the heap.
        let code = unsafe {
            ffi::MPI_Fetch_and_op(
                (&raw const value).cast(),
                (&raw mut old).cast(),
                word.datatype(),
                pe,
                disp as ffi::MPI_Aint,
                op.handle(),
                self.win,
            )
        };
        check(code, "MPI_Fetch_and_op");
        self.flush_local(pe);
        old
    }

    /// Atomically replaces the word at `disp` of `pe` with `value` if it equals `cond`, and
    /// returns the word it held before.
    pub(crate) fn compare_and_swap<T: bytemuck::Pod>(
        &self,
        word: Word,
        cond: T,
        value: T,
        pe: i32,
        disp: usize,
    ) -> T {
        assert_eq!(std::mem::size_of::<T>(), word.bytes(), "word size");
        let mut old = value;
        // SAFETY: as in `fetch_and_op`.
        let code = unsafe {
            ffi::MPI_Compare_and_swap(
                (&raw const value).cast(),
                (&raw const cond).cast(),
                (&raw mut old).cast(),
                word.datatype(),
                pe,
                disp as ffi::MPI_Aint,
                self.win,
            )
        };
        check(code, "MPI_Compare_and_swap");
        self.flush_local(pe);
        old
    }

    /// Atomically applies `op` with `value` to the word at `disp` of `pe`, fetching nothing
    /// (complete at the target after a flush).
    pub(crate) fn accumulate<T: bytemuck::Pod>(
        &self,
        word: Word,
        value: T,
        op: RmaOp,
        pe: i32,
        disp: usize,
    ) {
        assert_eq!(std::mem::size_of::<T>(), word.bytes(), "word size");
        // SAFETY: `value` lives on this frame until the local flush ends MPI's use of it.
        let code = unsafe {
            ffi::MPI_Accumulate(
                (&raw const value).cast(),
                1,
                word.datatype(),
                pe,
                disp as ffi::MPI_Aint,
                1,
                word.datatype(),
                op.handle(),
                self.win,
            )
        };
        check(code, "MPI_Accumulate");
        self.flush_local(pe);
    }

    /// Completes every operation to `pe` at `pe`.
    pub(crate) fn flush(&self, pe: i32) {
        // SAFETY: a valid window in a lock-all epoch.
        check(unsafe { ffi::MPI_Win_flush(pe, self.win) }, "MPI_Win_flush");
    }

    /// Completes every operation of this rank at its target.
    pub(crate) fn flush_all(&self) {
        // SAFETY: a valid window in a lock-all epoch.
        check(
            unsafe { ffi::MPI_Win_flush_all(self.win) },
            "MPI_Win_flush_all",
        );
    }

    fn flush_local(&self, pe: i32) {
        // SAFETY: a valid window in a lock-all epoch.
        check(
            unsafe { ffi::MPI_Win_flush_local(pe, self.win) },
            "MPI_Win_flush_local",
        );
    }

    /// Makes the public and private copies of this rank's heap the same, in both windows.
    pub(crate) fn sync(&self) {
        for win in std::iter::once(self.win).chain(self.shared) {
            // SAFETY: a valid window in a lock-all epoch.
            check(unsafe { ffi::MPI_Win_sync(win) }, "MPI_Win_sync");
        }
    }
}

impl Drop for HeapWindow {
    fn drop(&mut self) {
        // The RMA window first: its memory may be the shared window's.
        for win in std::iter::once(&mut self.win).chain(self.shared.as_mut()) {
            // SAFETY: windows we created, each in the lock-all epoch opened at creation;
            // freeing is collective, like the heap's own drop.
            unsafe {
                check(ffi::MPI_Win_unlock_all(*win), "MPI_Win_unlock_all");
                check(ffi::MPI_Win_free(win), "MPI_Win_free");
            }
        }
        if let Some(layout) = self.owned.take() {
            // SAFETY: allocated with this layout in `allocate`, and in no window any more.
            unsafe { std::alloc::dealloc(self.base, layout) };
        }
    }
}

/// Collective over `world`: a window over `bytes` bytes at `base` (which outlive it), every
/// atomic allowed, in a lock-all epoch.
fn expose(world: RawComm, base: *mut u8, bytes: usize) -> ffi::MPI_Win {
    let mut win = win_null();
    let info = Info::every_atomic();
    // SAFETY: the caller keeps the memory alive until the window is freed; MPI writes the
    // handle into `win`.
    let code = unsafe {
        ffi::MPI_Win_create(
            base.cast(),
            bytes as ffi::MPI_Aint,
            1,
            info.0,
            world,
            &mut win,
        )
    };
    check(code, "MPI_Win_create");
    lock_all(win);
    win
}

fn lock_all(win: ffi::MPI_Win) {
    // SAFETY: a window just created, in no epoch yet.
    let code = unsafe { ffi::MPI_Win_lock_all(ffi::MPI_MODE_NOCHECK as c_int, win) };
    check(code, "MPI_Win_lock_all");
}

/// An MPI info object holding `pairs`; freed on drop (windows copy what they need).
struct Info(ffi::MPI_Info);

impl Info {
    fn new(pairs: &[(&str, &str)]) -> Self {
        // SAFETY: a null handle value that MPI overwrites.
        let mut info: ffi::MPI_Info = unsafe { ffi::RSMPI_INFO_NULL };
        // SAFETY: MPI writes the new handle into `info`.
        check(
            unsafe { ffi::MPI_Info_create(&mut info) },
            "MPI_Info_create",
        );
        for (key, value) in pairs {
            let key = CString::new(*key).expect("no NUL in a key");
            let value = CString::new(*value).expect("no NUL in a value");
            // SAFETY: both strings are NUL-terminated and outlive the call, which copies them.
            check(
                unsafe { ffi::MPI_Info_set(info, key.as_ptr(), value.as_ptr()) },
                "MPI_Info_set",
            );
        }
        Self(info)
    }

    /// For the window every atomic goes through: MPICH's own key saying that concurrent
    /// atomics on one word may use different operations (compare-and-swap beside replace, or
    /// and beside or), which the standard's default `accumulate_ops` does not promise.
    fn every_atomic() -> Self {
        Self::new(&[(
            "which_accumulate_ops",
            "max,min,sum,prod,maxloc,minloc,band,bor,bxor,land,lor,lxor,replace,no_op,cswap",
        )])
    }
}

impl Drop for Info {
    fn drop(&mut self) {
        // SAFETY: an info object we created.
        check(unsafe { ffi::MPI_Info_free(&mut self.0) }, "MPI_Info_free");
    }
}

/// A committed datatype of `n` elements of `elem` bytes, `stride` bytes apart; freed on drop.
struct Strided(ffi::MPI_Datatype);

impl Strided {
    fn new(elem: usize, n: usize, stride: usize) -> Self {
        let mut contiguous = byte_type();
        let mut vector = byte_type();
        // SAFETY: MPI writes the new handles; the element type is freed once the vector,
        // which keeps its own reference, is committed.
        unsafe {
            check(
                ffi::MPI_Type_contiguous(elem as c_int, byte_type(), &mut contiguous),
                "MPI_Type_contiguous",
            );
            check(
                ffi::MPI_Type_create_hvector(
                    n as c_int,
                    1,
                    stride as ffi::MPI_Aint,
                    contiguous,
                    &mut vector,
                ),
                "MPI_Type_create_hvector",
            );
            check(ffi::MPI_Type_commit(&mut vector), "MPI_Type_commit");
            check(ffi::MPI_Type_free(&mut contiguous), "MPI_Type_free");
        }
        Self(vector)
    }
}

impl Drop for Strided {
    fn drop(&mut self) {
        // SAFETY: a datatype we committed; MPI keeps it alive for operations still using it.
        check(unsafe { ffi::MPI_Type_free(&mut self.0) }, "MPI_Type_free");
    }
}
