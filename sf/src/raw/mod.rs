//! The one place where the star forest calls MPI through `mpi::ffi`: persistent requests, the
//! non-blocking calls of the scalable discovery, neighbourhood collectives and RMA windows
//! (the symmetric heap's in `heap`), which rsmpi has no safe API for. Counts go through
//! MPI-4's large-count variants (MPICH 4 has them), so no message size is too large.
//!
//! Every function here takes plain Rust values; the pointer rules are kept by the callers'
//! types (a [`Persistent`] request is only ever bound to memory that outlives its activity,
//! which the link and `Pending` lifetimes guarantee).

mod heap;

pub(crate) use heap::{HeapWindow, RmaOp, Word};
use mpi::ffi;
use mpi::raw::AsRaw;
use mpi::topology::SimpleCommunicator;
use std::os::raw::c_int;

/// A raw communicator handle, copied out of an rsmpi communicator that outlives it.
pub(crate) type RawComm = ffi::MPI_Comm;

pub(crate) fn raw_comm(comm: &SimpleCommunicator) -> RawComm {
    comm.as_raw()
}

/// Whether the MPI library says it moves CUDA device memory itself (`MPIX_Query_cuda_support`,
/// which MPICH 4 and Open MPI provide). Call it after MPI is initialised.
pub fn mpi_cuda_support() -> bool {
    // SAFETY: a query without arguments, made once MPI is initialised (callers hold a
    // communicator).
    unsafe { ffi::MPIX_Query_cuda_support() == 1 }
}

/// The bytes of physical memory of this machine (node), or `None` where the system does not
/// say.
pub(crate) fn physical_memory() -> Option<u128> {
    // SAFETY: `sysconf` only reads system configuration values.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    (pages > 0 && page > 0).then(|| pages as u128 * page as u128)
}

fn byte_type() -> ffi::MPI_Datatype {
    // SAFETY: RSMPI_UINT8_T is a constant initialised by the MPI library before any call here.
    unsafe { ffi::RSMPI_UINT8_T }
}

fn null_request() -> ffi::MPI_Request {
    // SAFETY: reading a constant handle exported by the MPI shim.
    unsafe { ffi::RSMPI_REQUEST_NULL }
}

fn check(code: c_int, what: &str) {
    // MPI's default error handler aborts before returning an error; a non-success code here
    // means the handler was changed under us, which is a bug, not user input.
    assert_eq!(code, 0, "{what} failed with MPI error {code}");
}

/// What a persistent request is bound to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Binding {
    addr: usize,
    bytes: usize,
}

/// A set of persistent point-to-point requests (one per peer) that start and complete together.
///
/// Each request is bound to an address; rebinding to a different address frees and re-creates
/// it. Contiguous user data is sent and received in place this way, at no cost once warm.
pub(crate) struct Persistent {
    reqs: Vec<ffi::MPI_Request>,
    bound: Vec<Option<Binding>>,
    peers: Vec<c_int>,
    send: bool,
    tag: c_int,
    comm: RawComm,
}

impl Persistent {
    /// Unbound requests to `peers`; `send` says the direction.
    pub(crate) fn new(comm: RawComm, peers: &[i32], tag: i32, send: bool) -> Self {
        Self {
            reqs: vec![null_request(); peers.len()],
            bound: vec![None; peers.len()],
            peers: peers.to_vec(),
            send,
            tag,
            comm,
        }
    }

    /// Binds request `i` to `bytes` bytes at `addr` (re-creating it only if that changed).
    ///
    /// # Safety
    /// `addr..addr+bytes` must stay valid (and, for receives, writable and unaliased) from the
    /// next [`start_all`](Self::start_all) until the matching [`wait_all`](Self::wait_all).
    pub(crate) unsafe fn bind(&mut self, i: usize, addr: *const u8, bytes: usize) {
        let want = Binding {
            addr: addr as usize,
            bytes,
        };
        if self.bound[i] == Some(want) {
            return;
        }
        self.free_one(i);
        let count = count(bytes);
        // SAFETY: the caller guarantees the buffer's validity while the request is active; the
        // request handle is written by MPI into our own vector slot.
        let code = unsafe {
            if self.send {
                ffi::MPI_Send_init_c(
                    addr.cast(),
                    count,
                    byte_type(),
                    self.peers[i],
                    self.tag,
                    self.comm,
                    &mut self.reqs[i],
                )
            } else {
                ffi::MPI_Recv_init_c(
                    addr.cast_mut().cast(),
                    count,
                    byte_type(),
                    self.peers[i],
                    self.tag,
                    self.comm,
                    &mut self.reqs[i],
                )
            }
        };
        check(code, "MPI_Send_init_c/MPI_Recv_init_c");
        self.bound[i] = Some(want);
    }

    /// Starts every request (all must be bound).
    pub(crate) fn start_all(&mut self) {
        if self.reqs.is_empty() {
            return;
        }
        debug_assert!(self.bound.iter().all(Option::is_some));
        // One peer is the common case; MPI_Start skips MPI_Startall's loop.
        // SAFETY: every request is a bound, inactive persistent request (bind/wait_all keep
        // that invariant) and the array length matches the count.
        let code = unsafe {
            match self.reqs.as_mut_slice() {
                [one] => ffi::MPI_Start(one),
                all => ffi::MPI_Startall(all.len() as c_int, all.as_mut_ptr()),
            }
        };
        check(code, "MPI_Startall");
    }

    /// Waits for every started request.
    pub(crate) fn wait_all(&mut self) {
        wait_every(&mut self.reqs);
    }

    fn free_one(&mut self, i: usize) {
        if self.bound[i].take().is_some() {
            // SAFETY: the request is a valid, inactive persistent request that we own.
            let code = unsafe { ffi::MPI_Request_free(&mut self.reqs[i]) };
            check(code, "MPI_Request_free");
        }
    }
}

/// Waits for every request of `reqs` (valid handles, active or not); statuses are ignored.
fn wait_every(reqs: &mut [ffi::MPI_Request]) {
    // SAFETY: the slice holds valid request handles and its length is the count.
    let code = unsafe {
        match reqs {
            [] => return,
            // One request is the common case: MPI_Wait skips MPI_Waitall's loop.
            [one] => ffi::MPI_Wait(one, ffi::RSMPI_STATUS_IGNORE),
            all => ffi::MPI_Waitall(
                all.len() as c_int,
                all.as_mut_ptr(),
                ffi::RSMPI_STATUSES_IGNORE,
            ),
        }
    };
    check(code, "MPI_Waitall");
}

impl Drop for Persistent {
    fn drop(&mut self) {
        for i in 0..self.reqs.len() {
            self.free_one(i);
        }
    }
}

/// A non-blocking synchronous send of a `u64` list (discovery messages).
pub(crate) struct SyncSend {
    req: ffi::MPI_Request,
}

impl SyncSend {
    /// # Safety
    /// `data` must stay alive and unchanged until [`test`](Self::test) reports completion.
    pub(crate) unsafe fn start(
        comm: RawComm,
        data: &[u64],
        dest: i32,
        tag: i32,
        sync: bool,
    ) -> Self {
        let mut req = null_request();
        let bytes = std::mem::size_of_val(data);
        let count = count(bytes);
        let isend = if sync {
            ffi::MPI_Issend_c
        } else {
            ffi::MPI_Isend_c
        };
        // SAFETY: the caller keeps `data` alive until completion; `req` is our own slot.
        let code = unsafe {
            isend(
                data.as_ptr().cast(),
                count,
                byte_type(),
                dest,
                tag,
                comm,
                &mut req,
            )
        };
        check(code, "MPI_Issend_c/MPI_Isend_c");
        Self { req }
    }

    /// True once the send has completed (and, for a synchronous send, been matched).
    pub(crate) fn test(&mut self) -> bool {
        test(&mut self.req)
    }
}

fn test(req: &mut ffi::MPI_Request) -> bool {
    let mut flag: c_int = 0;
    // SAFETY: `req` is a valid (possibly null) request handle we own.
    let code = unsafe { ffi::MPI_Test(req, &mut flag, ffi::RSMPI_STATUS_IGNORE) };
    check(code, "MPI_Test");
    flag != 0
}

/// A message found by probing: its source and length in bytes.
pub(crate) struct Probed {
    pub source: i32,
    pub bytes: usize,
}

/// Probes for a message with `tag` from `src` (`None`: any source); blocking when `block`.
pub(crate) fn probe(comm: RawComm, src: Option<i32>, tag: i32, block: bool) -> Option<Probed> {
    // SAFETY: reading a constant handle exported by the MPI shim.
    let src = src.unwrap_or(unsafe { ffi::RSMPI_ANY_SOURCE });
    let mut status = std::mem::MaybeUninit::<ffi::MPI_Status>::uninit();
    let mut flag: c_int = 1;
    // SAFETY: `status` and `flag` are out-parameters MPI writes before we read them.
    let code = unsafe {
        if block {
            ffi::MPI_Probe(src, tag, comm, status.as_mut_ptr())
        } else {
            ffi::MPI_Iprobe(src, tag, comm, &mut flag, status.as_mut_ptr())
        }
    };
    check(code, "MPI_Probe/MPI_Iprobe");
    if flag == 0 {
        return None;
    }
    // SAFETY: MPI filled the status because a message was found.
    let status = unsafe { status.assume_init() };
    let mut count: ffi::MPI_Count = 0;
    // SAFETY: `status` is a valid status from the probe above.
    let code = unsafe { ffi::MPI_Get_count_c(&status, byte_type(), &mut count) };
    check(code, "MPI_Get_count_c");
    Some(Probed {
        source: status.MPI_SOURCE,
        bytes: count as usize,
    })
}

/// Receives the probed message into a new vector.
pub(crate) fn recv_u64s(comm: RawComm, msg: &Probed, tag: i32) -> Vec<u64> {
    let mut data = vec![0u64; msg.bytes / std::mem::size_of::<u64>()];
    let count = count(std::mem::size_of_val(&data[..]));
    // SAFETY: `data` has exactly the probed size; MPI writes into it before returning.
    let code = unsafe {
        ffi::MPI_Recv_c(
            data.as_mut_ptr().cast(),
            count,
            byte_type(),
            msg.source,
            tag,
            comm,
            ffi::RSMPI_STATUS_IGNORE,
        )
    };
    check(code, "MPI_Recv_c");
    data
}

/// A non-blocking barrier in progress.
pub(crate) struct Ibarrier {
    req: ffi::MPI_Request,
}

impl Ibarrier {
    pub(crate) fn start(comm: RawComm) -> Self {
        let mut req = null_request();
        // SAFETY: `req` is our own out-parameter.
        let code = unsafe { ffi::MPI_Ibarrier(comm, &mut req) };
        check(code, "MPI_Ibarrier");
        Self { req }
    }

    pub(crate) fn test(&mut self) -> bool {
        test(&mut self.req)
    }
}

/// Non-blocking sends and receives of `f64` slices that complete together.
#[derive(Debug, Default)]
pub(crate) struct Requests {
    reqs: Vec<ffi::MPI_Request>,
    recv: Vec<bool>,
}

impl Requests {
    pub(crate) fn len(&self) -> usize {
        self.reqs.len()
    }

    /// Room for `n` requests in flight, so that posting them allocates nothing.
    pub(crate) fn reserve(&mut self, n: usize) {
        self.reqs.reserve(n.saturating_sub(self.reqs.len()));
        self.recv.reserve(n.saturating_sub(self.recv.len()));
    }

    /// # Safety
    /// The `bytes` bytes at `addr` (host memory, or device memory for an MPI that reads
    /// it) must stay alive and unchanged until [`wait_all`](Self::wait_all) or a successful
    /// [`test_all`](Self::test_all).
    pub(crate) unsafe fn isend(
        &mut self,
        comm: RawComm,
        addr: *const u8,
        bytes: usize,
        dest: i32,
        tag: i32,
    ) {
        let mut req = null_request();
        // SAFETY: the caller keeps the bytes alive until completion; `req` is our own slot.
        let code = unsafe {
            ffi::MPI_Isend_c(
                addr.cast(),
                count(bytes),
                byte_type(),
                dest,
                tag,
                comm,
                &mut req,
            )
        };
        check(code, "MPI_Isend_c");
        self.reqs.push(req);
        self.recv.push(false);
    }

    /// # Safety
    /// The `bytes` bytes at `addr` must stay alive and untouched by anything else until
    /// completion.
    pub(crate) unsafe fn irecv(
        &mut self,
        comm: RawComm,
        addr: *mut u8,
        bytes: usize,
        src: i32,
        tag: i32,
    ) {
        let mut req = null_request();
        // SAFETY: the caller keeps the bytes alive and unaliased until completion.
        let code = unsafe {
            ffi::MPI_Irecv_c(
                addr.cast(),
                count(bytes),
                byte_type(),
                src,
                tag,
                comm,
                &mut req,
            )
        };
        check(code, "MPI_Irecv_c");
        self.reqs.push(req);
        self.recv.push(true);
    }

    /// True (and the list emptied) when every request has completed.
    pub(crate) fn test_all(&mut self) -> bool {
        if self.reqs.is_empty() {
            return true;
        }
        let mut flag: c_int = 0;
        // SAFETY: the array holds valid request handles; statuses are ignored.
        let code = unsafe {
            ffi::MPI_Testall(
                self.reqs.len() as c_int,
                self.reqs.as_mut_ptr(),
                &mut flag,
                ffi::RSMPI_STATUSES_IGNORE,
            )
        };
        check(code, "MPI_Testall");
        if flag != 0 {
            self.reqs.clear();
            self.recv.clear();
        }
        flag != 0
    }

    pub(crate) fn wait_all(&mut self) {
        wait_every(&mut self.reqs);
        self.reqs.clear();
        self.recv.clear();
    }

    /// Cancels the receives still in flight (they complete as cancelled at the next wait).
    pub(crate) fn cancel_receives(&mut self) {
        for (r, &is_recv) in self.reqs.iter_mut().zip(&self.recv) {
            if is_recv && !test(r) {
                // SAFETY: `r` is an active receive request we own.
                let code = unsafe { ffi::MPI_Cancel(r) };
                check(code, "MPI_Cancel");
            }
        }
    }
}

/// A distributed-graph communicator with fixed neighbour lists (no reordering), for MPI's
/// neighbourhood collectives. Freed on drop.
pub(crate) struct GraphComm {
    comm: ffi::MPI_Comm,
}

impl GraphComm {
    /// Collective over `comm`: this rank receives from `sources` and sends to `dests`, in
    /// that order in every neighbourhood collective on the new communicator.
    pub(crate) fn new(comm: RawComm, sources: &[i32], dests: &[i32]) -> Self {
        // SAFETY: reading constants exported by the MPI shim.
        let (unweighted, info) = unsafe { (ffi::RSMPI_UNWEIGHTED(), ffi::RSMPI_INFO_NULL) };
        // SAFETY: MPI_COMM_NULL is a constant; MPI writes the new handle into `graph`.
        let mut graph = unsafe { ffi::RSMPI_COMM_NULL };
        // SAFETY: the rank lists outlive the call and their lengths are the degrees; the
        // weights are MPI_UNWEIGHTED, which MPI never dereferences.
        let code = unsafe {
            ffi::MPI_Dist_graph_create_adjacent(
                comm,
                sources.len() as c_int,
                sources.as_ptr(),
                unweighted,
                dests.len() as c_int,
                dests.as_ptr(),
                unweighted,
                info,
                0,
                &mut graph,
            )
        };
        check(code, "MPI_Dist_graph_create_adjacent");
        Self { comm: graph }
    }

    pub(crate) fn raw(&self) -> RawComm {
        self.comm
    }
}

impl Drop for GraphComm {
    fn drop(&mut self) {
        // SAFETY: a communicator we created and own, with no operation in flight (every
        // neighbourhood exchange on it is waited for before its forest can be dropped).
        let code = unsafe { ffi::MPI_Comm_free(&mut self.comm) };
        check(code, "MPI_Comm_free");
    }
}

/// A non-blocking neighbourhood all-to-all of bytes (`MPI_Ineighbor_alltoallv_c`), with each
/// neighbour's message anywhere in memory: displacements are taken from the lowest address,
/// and MPI-4's large-count call takes them as `MPI_Aint`, so separate allocations are fine.
#[derive(Default)]
pub(crate) struct NeighborAlltoall {
    /// Counts and displacements: MPI reads them until the exchange completes.
    sendcounts: Vec<ffi::MPI_Count>,
    sdispls: Vec<ffi::MPI_Aint>,
    recvcounts: Vec<ffi::MPI_Count>,
    rdispls: Vec<ffi::MPI_Aint>,
    req: Option<ffi::MPI_Request>,
}

impl NeighborAlltoall {
    /// Starts the exchange on `graph`: `sends[i]` (address, bytes) goes to its `i`-th
    /// destination, `recvs[i]` comes from its `i`-th source. Collective over `graph`.
    ///
    /// # Safety
    /// Every range must stay valid (and, for receives, writable and unaliased) until
    /// [`wait`](Self::wait).
    pub(crate) unsafe fn start(
        &mut self,
        graph: RawComm,
        sends: &[(*const u8, usize)],
        recvs: &[(*const u8, usize)],
    ) {
        assert!(self.req.is_none(), "neighbourhood exchange started twice");
        let sendbuf = lay_out(sends, &mut self.sendcounts, &mut self.sdispls);
        let recvbuf = lay_out(recvs, &mut self.recvcounts, &mut self.rdispls);
        let mut req = null_request();
        // SAFETY: the arrays have one entry per neighbour and live in `self` until the wait
        // (MPI reads them until completion); the caller keeps every range valid.
        let code = unsafe {
            ffi::MPI_Ineighbor_alltoallv_c(
                sendbuf.cast(),
                self.sendcounts.as_ptr(),
                self.sdispls.as_ptr(),
                byte_type(),
                recvbuf.cast_mut().cast(),
                self.recvcounts.as_ptr(),
                self.rdispls.as_ptr(),
                byte_type(),
                graph,
                &mut req,
            )
        };
        check(code, "MPI_Ineighbor_alltoallv_c");
        self.req = Some(req);
    }

    /// Waits for the exchange, if one is in flight.
    pub(crate) fn wait(&mut self) {
        if let Some(mut req) = self.req.take() {
            wait_every(std::slice::from_mut(&mut req));
        }
    }
}

/// Fills `counts` and `displs` for `msgs` and returns the base address the displacements
/// count from (the lowest one; null when there are no messages).
fn lay_out(
    msgs: &[(*const u8, usize)],
    counts: &mut Vec<ffi::MPI_Count>,
    displs: &mut Vec<ffi::MPI_Aint>,
) -> *const u8 {
    let base = msgs
        .iter()
        .map(|&(a, _)| a)
        .min()
        .unwrap_or(std::ptr::null());
    counts.clear();
    displs.clear();
    for &(addr, bytes) in msgs {
        counts.push(count(bytes));
        displs.push((addr as usize - base as usize) as ffi::MPI_Aint);
    }
    base
}

/// An MPI-3 window held in one passive-target epoch to every rank (`MPI_Win_lock_all`) for
/// its whole life, so that puts and accumulates need only flushes. Unlocked and freed
/// (collectively) on drop.
pub(crate) struct Window {
    win: ffi::MPI_Win,
    rank: c_int,
    /// The memory of a window over words (from `Box::into_raw`; none for a dynamic one): MPI
    /// reads and writes it until the window is freed, so it is freed after.
    words: Option<*mut [u64]>,
}

impl Window {
    /// Collective over `comm`: a window over `words` (their initial values), addressed in
    /// words.
    pub(crate) fn over_words(comm: RawComm, words: Box<[u64]>) -> Self {
        let bytes = std::mem::size_of_val(&*words) as ffi::MPI_Aint;
        let words = Box::into_raw(words);
        let mut win = win_null();
        // SAFETY: the words live until drop, which frees the window before them; MPI writes
        // the handle into `win`.
        let code = unsafe {
            ffi::MPI_Win_create(words.cast(), bytes, 8, ffi::RSMPI_INFO_NULL, comm, &mut win)
        };
        check(code, "MPI_Win_create");
        Self::locked(win, comm, Some(words))
    }

    /// Collective over `comm`: a window with no memory until [`attach`](Self::attach),
    /// addressed by `MPI_Get_address`.
    pub(crate) fn dynamic(comm: RawComm) -> Self {
        let mut win = win_null();
        // SAFETY: MPI writes the handle into `win`.
        let code = unsafe { ffi::MPI_Win_create_dynamic(ffi::RSMPI_INFO_NULL, comm, &mut win) };
        check(code, "MPI_Win_create_dynamic");
        Self::locked(win, comm, None)
    }

    fn locked(win: ffi::MPI_Win, comm: RawComm, words: Option<*mut [u64]>) -> Self {
        let mut rank: c_int = 0;
        // SAFETY: a valid communicator; `rank` is an out-parameter.
        check(
            unsafe { ffi::MPI_Comm_rank(comm, &mut rank) },
            "MPI_Comm_rank",
        );
        // SAFETY: a window just created, in no epoch yet.
        let code = unsafe { ffi::MPI_Win_lock_all(ffi::MPI_MODE_NOCHECK as c_int, win) };
        check(code, "MPI_Win_lock_all");
        Self { win, rank, words }
    }

    /// Exposes `bytes` bytes at `addr` to remote puts (a dynamic window).
    ///
    /// # Safety
    /// The memory must stay valid until [`detach`](Self::detach).
    pub(crate) unsafe fn attach(&self, addr: *const u8, bytes: usize) {
        // SAFETY: the caller keeps the memory valid while attached.
        let code = unsafe {
            ffi::MPI_Win_attach(self.win, addr.cast_mut().cast(), bytes as ffi::MPI_Aint)
        };
        check(code, "MPI_Win_attach");
    }

    /// Ends the exposure of memory attached at `addr`.
    pub(crate) fn detach(&self, addr: *const u8) {
        // SAFETY: `addr` was attached to this window (MPI checks and reports otherwise).
        let code = unsafe { ffi::MPI_Win_detach(self.win, addr.cast()) };
        check(code, "MPI_Win_detach");
    }

    /// The address remote ranks name `addr` by in a dynamic window.
    pub(crate) fn address(addr: *const u8) -> u64 {
        let mut a: ffi::MPI_Aint = 0;
        // SAFETY: MPI_Get_address only computes the address; `a` is an out-parameter.
        let code = unsafe { ffi::MPI_Get_address(addr.cast(), &mut a) };
        check(code, "MPI_Get_address");
        a as u64
    }

    /// Puts `bytes` bytes from `origin` at displacement `disp` (in the window's unit: words,
    /// or bytes from address 0 for a dynamic window) of `target`; complete (and
    /// `origin` reusable) after [`flush`](Self::flush).
    ///
    /// # Safety
    /// `origin` must stay valid and unchanged until the flush, and the target range must be
    /// exposed by `target`.
    pub(crate) unsafe fn put(&self, origin: *const u8, bytes: usize, target: i32, disp: u64) {
        // SAFETY: the caller's contract.
        let code = unsafe {
            ffi::MPI_Put_c(
                origin.cast(),
                count(bytes),
                byte_type(),
                target,
                disp as ffi::MPI_Aint,
                count(bytes),
                byte_type(),
                self.win,
            )
        };
        check(code, "MPI_Put_c");
    }

    /// Makes this rank's public and private copies of its window memory the same (the
    /// separate memory model needs it between remote puts and local reads).
    pub(crate) fn sync(&self) {
        // SAFETY: a valid window in a lock-all epoch.
        let code = unsafe { ffi::MPI_Win_sync(self.win) };
        check(code, "MPI_Win_sync");
    }

    /// Completes every operation to `target` at the target.
    pub(crate) fn flush(&self, target: i32) {
        // SAFETY: a valid window in a lock-all epoch.
        let code = unsafe { ffi::MPI_Win_flush(target, self.win) };
        check(code, "MPI_Win_flush");
    }

    /// Atomically adds `value` to word `disp` of `target` (wrapping) and completes it there.
    pub(crate) fn add_word(&self, target: i32, disp: u64, value: u64) {
        // SAFETY: `value` lives until the flush below; a single word of the window.
        let code = unsafe {
            ffi::MPI_Accumulate(
                (&raw const value).cast(),
                1,
                ffi::RSMPI_UINT64_T,
                target,
                disp as ffi::MPI_Aint,
                1,
                ffi::RSMPI_UINT64_T,
                ffi::RSMPI_SUM,
                self.win,
            )
        };
        check(code, "MPI_Accumulate");
        self.flush(target);
    }

    /// Atomically reads this rank's word `disp` (driving MPI's progress as it does).
    pub(crate) fn read_word(&self, disp: u64) -> u64 {
        let zero = 0u64;
        let mut value = 0u64;
        // SAFETY: both words live on this frame until the flush below completes the call.
        let code = unsafe {
            ffi::MPI_Fetch_and_op(
                (&raw const zero).cast(),
                (&raw mut value).cast(),
                ffi::RSMPI_UINT64_T,
                self.rank,
                disp as ffi::MPI_Aint,
                ffi::RSMPI_SUM,
                self.win,
            )
        };
        check(code, "MPI_Fetch_and_op");
        self.flush(self.rank);
        value
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        // SAFETY: a window we created, in the lock-all epoch opened at creation, with every
        // operation flushed.
        check(
            unsafe { ffi::MPI_Win_unlock_all(self.win) },
            "MPI_Win_unlock_all",
        );
        // SAFETY: as above; freeing is collective, like the forest's own drop.
        check(unsafe { ffi::MPI_Win_free(&mut self.win) }, "MPI_Win_free");
        if let Some(words) = self.words.take() {
            // SAFETY: from `Box::into_raw` in `over_words`, and no longer in any window.
            drop(unsafe { Box::from_raw(words) });
        }
    }
}

fn win_null() -> ffi::MPI_Win {
    // SAFETY: reading a constant handle exported by the MPI shim.
    unsafe { ffi::RSMPI_WIN_NULL }
}

/// A message's length in bytes as MPI-4's large-count calls (`MPI_Isend_c`, ...) take it, so
/// messages of 2 GiB and more need no special path. Lossless: no buffer exceeds `isize::MAX`
/// bytes.
fn count(bytes: usize) -> ffi::MPI_Count {
    bytes as ffi::MPI_Count
}

/// The communicator's `MPI_TAG_UB` attribute.
pub(crate) fn tag_ub(comm: RawComm) -> usize {
    let mut value: *mut c_int = std::ptr::null_mut();
    let mut flag: c_int = 0;
    // SAFETY: MPI writes a pointer to its own attribute value into `value` when `flag` is set.
    let code = unsafe {
        ffi::MPI_Comm_get_attr(
            comm,
            ffi::MPI_TAG_UB as c_int,
            (&mut value as *mut *mut c_int).cast(),
            &mut flag,
        )
    };
    check(code, "MPI_Comm_get_attr");
    if flag == 0 || value.is_null() {
        return 32767; // the smallest upper bound the standard allows
    }
    // SAFETY: MPI_TAG_UB is an int attribute that lives as long as MPI is initialised.
    usize::try_from(unsafe { *value }).unwrap_or(32767)
}
