//! An OpenSHMEM-style one-sided layer over MPI-3 RMA: a symmetric heap, puts and gets
//! (contiguous and strided), remote atomics, put-with-signal and `wait_until`, `fence`,
//! `quiet` and barriers, and teams with their collectives over MPI's.
//!
//! - **Heap.** Every PE (rank of the communicator) holds a heap of the same size.
//!   [`Shmem::malloc`] is collective and gives each PE the same offset, so a
//!   [`Symmetric`] object names the same bytes on every PE; its methods take the PE to act
//!   on.
//! - **Paths.** By default ([`OnNode::LoadStore`]) the heap is allocated in the node's
//!   shared memory (`MPI_Win_allocate_shared`) and exposed to all ranks a second time by
//!   `MPI_Win_create` over the same bytes: puts and gets to a PE on the same node are plain
//!   copies, and RMA reaches the others. [`OnNode::Rma`] sends every put and get through RMA
//!   (page-aligned memory of its own under `MPI_Win_create`). Atomics and signals go
//!   through MPI's atomics, so they are atomic with respect to each other whichever PE issues
//!   them (MPICH allows mixed operations on one word, which the standard does not promise;
//!   the window's info asks for it explicitly); when every PE
//!   shares the node and takes the load/store path, they are the processor's atomics on the
//!   shared memory instead, and a put-with-signal makes no MPI call at all.
//! - **Completion**, as in OpenSHMEM: a put returns once its source may be reused; [`fence`]
//!   orders puts to each PE, and [`quiet`] completes them all; a get returns with the data.
//!   [`Symmetric::put_signal`] delivers the data before it updates the signal, which the
//!   receiver's [`Symmetric::wait_until`] watches.
//!
//! | OpenSHMEM | here |
//! |---|---|
//! | `shmem_malloc` / `shmem_free` | [`Shmem::malloc`] / drop |
//! | `shmem_put`, `shmem_get` | [`Symmetric::put`], [`Symmetric::get`] |
//! | `shmem_iput`, `shmem_iget` | [`Symmetric::put_strided`], [`Symmetric::get_strided`] |
//! | `shmem_atomic_fetch`, `_swap`, `_compare_swap`, `_fetch_add`, `_fetch_and`/`or`/`xor` | [`Symmetric::atomic`] |
//! | `shmem_atomic_set`, `_add`, `_and`/`or`/`xor` | [`Symmetric::update`] |
//! | `shmem_put_signal`, `shmem_wait_until`, `shmem_test` | [`Symmetric::put_signal`], [`Symmetric::wait_until`], [`Symmetric::test`] |
//! | `shmem_fence`, `shmem_quiet`, `shmem_barrier_all` | [`fence`], [`quiet`], [`Shmem::barrier_all`] |
//! | `shmem_team_split_strided` | [`Shmem::team`] |
//! | `shmem_broadcast`, `_collect`, `_fcollect`, `_<op>_reduce`, `shmem_sync` | [`Team`] methods |
//!
//! [`fence`]: Shmem::fence
//! [`quiet`]: Shmem::quiet

mod arena;
mod symmetric;
mod team;

pub use symmetric::{Atomic, AtomicInt, Cmp, Signal, Symmetric, Update};
pub use team::Team;

use crate::discovery::{agree, fingerprint, same_everywhere};
use crate::error::SfError;
use crate::raw::{self, HeapWindow};
use arena::Arena;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::CommunicatorCollectives;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::str::FromStr;
use std::sync::atomic::{fence, Ordering};

/// How puts and gets reach a PE on the same node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OnNode {
    /// Plain loads and stores into the node's shared memory.
    #[default]
    LoadStore,
    /// MPI RMA, as for PEs on other nodes.
    Rma,
}

impl OnNode {
    /// Both paths.
    pub const ALL: [OnNode; 2] = [OnNode::LoadStore, OnNode::Rma];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            OnNode::LoadStore => "load-store",
            OnNode::Rma => "rma",
        }
    }
}

impl FromStr for OnNode {
    type Err = SfError;
    fn from_str(s: &str) -> Result<Self, SfError> {
        let found = Self::ALL.into_iter().find(|p| p.name() == s);
        found.ok_or_else(|| SfError::UnknownName {
            what: "on-node path",
            got: s.to_string(),
            expected: "load-store, rma",
        })
    }
}

/// How to build a [`Shmem`]; the same on every PE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShmemOptions {
    /// Bytes of symmetric heap on each PE.
    pub heap_bytes: usize,
    /// How puts and gets reach PEs on the same node.
    pub on_node: OnNode,
}

impl Default for ShmemOptions {
    fn default() -> Self {
        Self {
            heap_bytes: 16 << 20,
            on_node: OnNode::LoadStore,
        }
    }
}

/// A symmetric heap over a communicator, and the one-sided operations on it. Dropping it is
/// collective (it frees MPI windows), after every [`Symmetric`] object of it is gone.
pub struct Shmem {
    comm: SimpleCommunicator,
    heap: HeapWindow,
    options: ShmemOptions,
    /// Per PE, the address at which this process loads and stores that PE's heap, or null
    /// where only RMA reaches it.
    direct: Vec<*mut u8>,
    /// Every PE is reached by load and store (one node, [`OnNode::LoadStore`]): atomics and
    /// signals are then the processor's own atomics on the shared memory, and nothing goes
    /// through MPI's. Mixing the two on one word would not be atomic, so it is all or none.
    cpu_atomics: bool,
    arena: RefCell<Arena>,
    /// Team communicators by (start, log2 stride, size), built once each.
    teams: RefCell<HashMap<(usize, u32, usize), Rc<SimpleCommunicator>>>,
}

impl Shmem {
    /// Collective over `comm`: a heap of `options.heap_bytes` (rounded up to whole pages) on
    /// every PE. Options that differ between PEs give [`SfError::Disagree`] on every PE; an
    /// MPI without the unified memory model, [`SfError::Unsupported`].
    pub fn new(comm: &SimpleCommunicator, options: ShmemOptions) -> Result<Shmem, SfError> {
        let comm = comm.duplicate();
        let (rank, size) = (comm.rank() as usize, comm.size() as usize);
        let options_print = fingerprint([
            options.heap_bytes as u64,
            (options.on_node == OnNode::Rma) as u64,
        ]);
        same_everywhere(&comm, options_print, "symmetric heap options")?;
        // Whole pages, as the memory is allocated.
        const PAGE: usize = 4096;
        let most = isize::MAX as usize / 2;
        let bytes = match options.heap_bytes.checked_next_multiple_of(PAGE) {
            Some(b) if b <= most => b,
            _ => {
                return Err(SfError::IndexOutOfRange {
                    what: "symmetric heap bytes",
                    index: options.heap_bytes,
                    len: most,
                })
            }
        };
        // A heap larger than the node's memory is refused before MPI is asked for it (MPICH
        // touched every page of a 16 TiB shared segment for hours; the RMA heap's allocation
        // aborted). Agreed: nodes may differ.
        let memory = raw::physical_memory();
        let fits = match memory {
            Some(m) if bytes as u128 > m => Err(SfError::IndexOutOfRange {
                what: "symmetric heap bytes (this node's physical memory)",
                index: options.heap_bytes,
                len: m.min(usize::MAX as u128) as usize,
            }),
            _ => Ok(()),
        };
        agree(&comm, fits)?;
        let mut direct = vec![std::ptr::null_mut(); size];
        let heap = match options.on_node {
            OnNode::Rma => {
                let heap = HeapWindow::allocate(raw::raw_comm(&comm), bytes);
                direct[rank] = heap.base();
                heap
            }
            OnNode::LoadStore => {
                let node = comm.split_shared(comm.rank());
                let mut ranks = vec![0i32; node.size() as usize];
                node.all_gather_into(&comm.rank(), &mut ranks[..]);
                let (heap, peers) = HeapWindow::allocate_shared(
                    raw::raw_comm(&comm),
                    raw::raw_comm(&node),
                    bytes,
                    arena::ALIGN,
                );
                for (&r, p) in ranks.iter().zip(peers) {
                    direct[r as usize] = p;
                }
                heap
            }
        };
        let usable = match (
            heap.unified(),
            (heap.base() as usize).is_multiple_of(arena::ALIGN),
        ) {
            (false, _) => Err(SfError::Unsupported(
                "an MPI whose windows keep separate public and private copies (MPI_WIN_SEPARATE)",
            )),
            (_, false) => Err(SfError::Unsupported(
                "an MPI that places window memory off 64-byte boundaries",
            )),
            _ => Ok(()),
        };
        agree(&comm, usable)?;
        let cpu_atomics = direct.iter().all(|p| !p.is_null());
        let world = Rc::new(comm.duplicate());
        let teams = HashMap::from([((0, 0, size), world)]);
        Ok(Shmem {
            comm,
            heap,
            options,
            direct,
            cpu_atomics,
            arena: RefCell::new(Arena::new(bytes)),
            teams: RefCell::new(teams),
        })
    }

    /// This PE's number (its rank in the communicator).
    pub fn my_pe(&self) -> usize {
        self.comm.rank() as usize
    }

    /// How many PEs share the heap.
    pub fn n_pes(&self) -> usize {
        self.comm.size() as usize
    }

    /// The options the heap was built with.
    pub fn options(&self) -> ShmemOptions {
        self.options
    }

    /// Whether puts and gets reach `pe` by load and store (OpenSHMEM's `shmem_ptr` is not
    /// null): this PE always, and PEs on this node with [`OnNode::LoadStore`].
    pub fn load_store(&self, pe: usize) -> bool {
        self.direct.get(pe).is_some_and(|p| !p.is_null())
    }

    /// Collective: a symmetric object of `len` zeroed values, at the same offset on every PE.
    /// Returns once every PE has it, so puts into it may start at once.
    ///
    /// Every PE must ask for the same length ([`SfError::Disagree`] otherwise), and its heap
    /// must be in the same state: objects are freed by dropping them, and one dropped on some
    /// PEs only before this call may give `Disagree` (where the new object would take its
    /// place on those PEs; elsewhere the call succeeds at the same offset everywhere). A heap
    /// without room gives [`SfError::HeapFull`]. Errors are given on every PE.
    pub fn malloc<T: bytemuck::Pod>(&self, len: usize) -> Result<Symmetric<'_, T>, SfError> {
        let bytes = len.saturating_mul(std::mem::size_of::<T>());
        // Every PE's puts and updates complete before anyone zeroes a block that may be
        // reused: one into an object dropped since must not land in its successor. The
        // reductions below order every PE's quiet before any zeroing.
        self.quiet();
        // Agreed: PEs may ask for as many bytes of types of other alignments.
        let aligned = match std::mem::align_of::<T>() > arena::ALIGN {
            true => Err(SfError::Unsupported(
                "symmetric objects of types aligned to more than 64 bytes",
            )),
            false => Ok(()),
        };
        agree(&self.comm, aligned)?;
        same_everywhere(&self.comm, bytes as u64, "symmetric allocation sizes")?;
        let off = self.arena.borrow_mut().take(bytes);
        let at = off.map_or(u64::MAX, |o| o as u64);
        let agreed = same_everywhere(
            &self.comm,
            at,
            "symmetric heap states (an object dropped on some PEs only)",
        );
        let give_back = |o| self.arena.borrow_mut().give(o, bytes);
        if let Err(e) = agreed {
            off.map(give_back);
            return Err(e);
        }
        let Some(off) = off else {
            let largest = self.arena.borrow().largest();
            return Err(SfError::HeapFull { bytes, largest });
        };
        // SAFETY: the block lies within this PE's heap (the arena only gives such blocks), and
        // no other object covers it; no peer writes it before the barrier below.
        unsafe { std::ptr::write_bytes(self.heap.base().add(off), 0, bytes) };
        self.barrier_all();
        Ok(Symmetric::new(self, off, len))
    }

    /// Orders this PE's puts: those to each PE before the fence arrive there before those
    /// after it (`shmem_fence`).
    pub fn fence(&self) {
        fence(Ordering::Release);
        self.heap.flush_all();
    }

    /// Completes every put, atomic and signal this PE has issued, at its target
    /// (`shmem_quiet`).
    pub fn quiet(&self) {
        fence(Ordering::SeqCst);
        self.heap.flush_all();
    }

    /// Collective: [`quiet`](Self::quiet) on every PE, then a barrier; afterwards every PE
    /// sees every update made before it (`shmem_barrier_all`).
    pub fn barrier_all(&self) {
        self.quiet();
        self.comm.barrier();
        self.heap.sync();
        fence(Ordering::SeqCst);
    }

    fn check_pe(&self, pe: usize) -> Result<i32, SfError> {
        match pe < self.n_pes() {
            true => Ok(pe as i32),
            false => Err(SfError::PeOutOfRange {
                pe,
                npes: self.n_pes(),
            }),
        }
    }
}
