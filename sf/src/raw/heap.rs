//! The symmetric heap's MPI windows: memory from `MPI_Win_allocate` (every peer reached by
//! RMA), or from `MPI_Win_allocate_shared` on the node and exposed to every rank a second time
//! by `MPI_Win_create` over the same bytes (peers on the node also reached by load and store).
//! Both windows stay in one lock-all epoch for their whole life, so operations need only
//! flushes. Displacements are in bytes from the heap's base.

use super::{byte_type, check, count, win_null, RawComm};
use mpi::ffi;
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
    base: *mut u8,
}

impl HeapWindow {
    /// Collective over `world`: `bytes` bytes on every rank, reached by RMA only.
    pub(crate) fn allocate(world: RawComm, bytes: usize) -> Self {
        let mut base: *mut u8 = std::ptr::null_mut();
        let mut win = win_null();
        // SAFETY: MPI writes the memory's address into `base` and the handle into `win`; the
        // memory lives until the window is freed in drop.
        let code = unsafe {
            ffi::MPI_Win_allocate(
                bytes as ffi::MPI_Aint,
                1,
                ffi::RSMPI_INFO_NULL,
                world,
                (&raw mut base).cast(),
                &mut win,
            )
        };
        check(code, "MPI_Win_allocate");
        lock_all(win);
        Self {
            win,
            shared: None,
            base,
        }
    }

    /// Collective over `world` and then `node` (the ranks of this node, a sub-communicator of
    /// `world`): `bytes` bytes on every rank in the node's shared memory, exposed to every
    /// rank for RMA. Also returns, per rank of `node`, the address at which this process sees
    /// that rank's heap.
    pub(crate) fn allocate_shared(
        world: RawComm,
        node: RawComm,
        bytes: usize,
    ) -> (Self, Vec<*mut u8>) {
        let mut base: *mut u8 = std::ptr::null_mut();
        let mut shared = win_null();
        let info = NoncontigInfo::new();
        // SAFETY: as in `allocate`; the shared memory lives until `shared` is freed in drop,
        // after `win`.
        let code = unsafe {
            ffi::MPI_Win_allocate_shared(
                bytes as ffi::MPI_Aint,
                1,
                info.0,
                node,
                (&raw mut base).cast(),
                &mut shared,
            )
        };
        check(code, "MPI_Win_allocate_shared");
        lock_all(shared);
        let mut size: c_int = 0;
        // SAFETY: a valid communicator; `size` is an out-parameter.
        check(
            unsafe { ffi::MPI_Comm_size(node, &mut size) },
            "MPI_Comm_size",
        );
        let peers = (0..size)
            .map(|r| {
                let (mut len, mut unit, mut ptr) =
                    (0 as ffi::MPI_Aint, 0 as c_int, std::ptr::null_mut::<u8>());
                // SAFETY: `r` is a rank of the window's group; MPI writes the three results.
                let code = unsafe {
                    ffi::MPI_Win_shared_query(shared, r, &mut len, &mut unit, (&raw mut ptr).cast())
                };
                check(code, "MPI_Win_shared_query");
                ptr
            })
            .collect();
        let mut win = win_null();
        // SAFETY: the memory is the shared window's, which outlives this window (drop frees
        // this one first).
        let code = unsafe {
            ffi::MPI_Win_create(
                base.cast(),
                bytes as ffi::MPI_Aint,
                1,
                ffi::RSMPI_INFO_NULL,
                world,
                &mut win,
            )
        };
        check(code, "MPI_Win_create");
        lock_all(win);
        let heap = Self {
            win,
            shared: Some(shared),
            base,
        };
        (heap, peers)
    }

    /// The address of this rank's heap.
    pub(crate) fn base(&self) -> *mut u8 {
        self.base
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
    }
}

fn lock_all(win: ffi::MPI_Win) {
    // SAFETY: a window just created, in no epoch yet.
    let code = unsafe { ffi::MPI_Win_lock_all(ffi::MPI_MODE_NOCHECK as c_int, win) };
    check(code, "MPI_Win_lock_all");
}

/// The info `alloc_shared_noncontig`: each rank's part of a shared window on its own pages,
/// placed near that rank.
struct NoncontigInfo(ffi::MPI_Info);

impl NoncontigInfo {
    fn new() -> Self {
        // SAFETY: a null handle value that MPI overwrites.
        let mut info: ffi::MPI_Info = unsafe { ffi::RSMPI_INFO_NULL };
        // SAFETY: MPI writes the new handle into `info`.
        check(
            unsafe { ffi::MPI_Info_create(&mut info) },
            "MPI_Info_create",
        );
        let (key, value) = (
            CString::new("alloc_shared_noncontig").expect("no NUL"),
            CString::new("true").expect("no NUL"),
        );
        // SAFETY: both strings are NUL-terminated and outlive the call, which copies them.
        check(
            unsafe { ffi::MPI_Info_set(info, key.as_ptr(), value.as_ptr()) },
            "MPI_Info_set",
        );
        Self(info)
    }
}

impl Drop for NoncontigInfo {
    fn drop(&mut self) {
        // SAFETY: an info object we created; windows copy what they need of it.
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
