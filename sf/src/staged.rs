//! A forest's traffic staged through packed arrays: the form in which data that lives in
//! another memory space (a GPU) crosses an MPI that only reads host memory.
//!
//! Each rank's roots are gathered, one segment per leaf rank (this rank first, then the others
//! in ascending rank), into a packed root array; its leaves likewise, one segment per root
//! rank, into a packed leaf array. The `k`-th unit of rank `q`'s segment for rank `r` and the
//! `k`-th unit of `r`'s segment for `q` are the two ends of one edge (set-up lists both in the
//! leaf rank's ascending leaf order), so a second forest joins the packed arrays unit to unit
//! with contiguous plans on both sides: MPI reads and writes them in place, and the only
//! packing is the gather and scatter on the data's own side. A bcast is then gather roots,
//! move the packed roots to the packed leaves, scatter into the leaves with `op`; a reduce the
//! same backwards. [`Staged::bcast`] and [`Staged::reduce`] do it on host slices and give the
//! forest's own results bit for bit; the device path (`DeviceStaged`, feature `cuda`) runs the
//! gathers and scatters as kernels.
//!
//! The packed arrays can also be handed to MPI in place, wherever they live
//! ([`Staged::move_raw`]: device memory needs an MPI with CUDA support), this rank's own
//! segment copied by the caller: the GPU-aware path. [`Staged::bcast_in_place`] and
//! [`Staged::reduce_in_place`] run that path on host memory, so that it is tested everywhere.

use mpi::topology::Communicator;
use mpi::traits::CommunicatorCollectives;

use crate::error::SfError;
use crate::forest::{self, StarForest};
use crate::graph::{Graph, RootRef};
use crate::plan::Plan;
use crate::unit::{reducer, Op, Unit};

/// One peer's part of a packed array: the plan of the data's indices and where the segment
/// starts in the packed array.
#[derive(Clone, Debug)]
pub struct Segment {
    pub rank: i32,
    pub plan: Plan,
    pub offset: usize,
}

/// The packed form of a star forest.
pub struct Staged {
    packed: StarForest,
    nroots: usize,
    leaf_space: usize,
    roots: Vec<Segment>,
    leaves: Vec<Segment>,
}

impl std::fmt::Debug for Staged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Staged")
            .field("roots", &self.roots)
            .field("leaves", &self.leaves)
            .finish_non_exhaustive()
    }
}

/// Segments of `peers` (this rank first, then ascending rank), laid end to end.
fn segments(me: i32, peers: Vec<(i32, &Plan)>) -> Vec<Segment> {
    let mut peers = peers;
    peers.sort_by_key(|&(r, _)| (r != me, r));
    let mut offset = 0;
    peers
        .into_iter()
        .map(|(rank, plan)| {
            let s = Segment {
                rank,
                plan: plan.clone(),
                offset,
            };
            offset += plan.len();
            s
        })
        .collect()
}

fn packed_len(s: &[Segment]) -> usize {
    s.last().map_or(0, |s| s.offset + s.plan.len())
}

impl Staged {
    /// The packed form of `sf`. Collective over its communicator.
    pub fn new(sf: &StarForest) -> Result<Self, SfError> {
        let comm = sf.comm();
        let me = comm.rank();
        let roots = segments(me, sf.leaf_ranks());
        let leaves = segments(me, sf.root_ranks());
        // Each root rank tells each leaf rank where its segment starts.
        let n = comm.size() as usize;
        let mut starts = vec![0u64; n];
        for s in &roots {
            starts[s.rank as usize] = s.offset as u64;
        }
        let mut theirs = vec![0u64; n];
        comm.all_to_all_into(&starts[..], &mut theirs[..]);
        let iremote = leaves
            .iter()
            .flat_map(|s| {
                let base = theirs[s.rank as usize];
                (0..s.plan.len() as u64).map(move |k| RootRef {
                    rank: i64::from(s.rank),
                    offset: base + k,
                })
            })
            .collect();
        let graph = Graph::new(packed_len(&roots), None, iremote);
        let packed = StarForest::new(comm, &graph, sf.options())?;
        Ok(Self {
            packed,
            nroots: sf.nroots(),
            leaf_space: sf.leaf_space(),
            roots,
            leaves,
        })
    }

    /// The forest between the packed arrays.
    pub fn packed(&self) -> &StarForest {
        &self.packed
    }

    /// The root segments, one per leaf rank.
    pub fn root_segments(&self) -> &[Segment] {
        &self.roots
    }

    /// The leaf segments, one per root rank.
    pub fn leaf_segments(&self) -> &[Segment] {
        &self.leaves
    }

    /// Units in the packed root array.
    pub fn packed_roots(&self) -> usize {
        packed_len(&self.roots)
    }

    /// Units in the packed leaf array.
    pub fn packed_leaves(&self) -> usize {
        packed_len(&self.leaves)
    }

    /// Checks the lengths of a root and a leaf array, as the forest does. A failure puts the
    /// forest out of step (see [`SfError::OutOfStep`]): it takes no more operations.
    pub fn check(&self, root: usize, leaf: usize) -> Result<(), SfError> {
        self.packed.in_step(|| {
            if root < self.nroots {
                return Err(too_short("rootdata", root, self.nroots));
            }
            if leaf < self.leaf_space {
                return Err(too_short("leafdata", leaf, self.leaf_space));
            }
            Ok(())
        })
    }

    /// Refuses every later operation: for a failure between the checks and the move.
    #[cfg(feature = "cuda")]
    pub(crate) fn set_out_of_step(&self) {
        self.packed.set_out_of_step();
    }

    /// This rank's own segment, when it has edges to itself: `(root offset, leaf offset,
    /// units)` in the packed arrays (the first segment of each).
    pub fn self_segment(&self) -> Option<(usize, usize, usize)> {
        let me = self.packed.comm().rank();
        match (self.roots.first(), self.leaves.first()) {
            (Some(r), Some(l)) if r.rank == me && l.rank == me => {
                Some((r.offset, l.offset, r.plan.len()))
            }
            _ => None,
        }
    }

    /// Moves the packed roots to the packed leaves (or back, with `reduce`) with MPI reading
    /// and writing them in place, except this rank's own segment ([`self_segment`]).
    ///
    /// # Safety
    /// `roots` and `leaves` must address [`packed_roots`](Self::packed_roots) and
    /// [`packed_leaves`](Self::packed_leaves) units of `unit_bytes` bytes in memory this MPI
    /// reads and writes, valid until this returns, the destination not aliased.
    ///
    /// [`self_segment`]: Self::self_segment
    pub unsafe fn move_raw(
        &self,
        roots: *mut u8,
        leaves: *mut u8,
        unit_bytes: usize,
        reduce: bool,
    ) -> Result<(), SfError> {
        // SAFETY: the caller's contract is the forest's (its roots and leaves are the packed
        // arrays).
        unsafe { self.packed.move_in_place(roots, leaves, unit_bytes, reduce) }
    }

    /// [`bcast`](Self::bcast) with the packed arrays moved in place by
    /// [`move_raw`](Self::move_raw) (the GPU-aware path, on host memory).
    pub fn bcast_in_place<U: Unit>(
        &self,
        root: &[U],
        leaf: &mut [U],
        op: Op,
    ) -> Result<(), SfError> {
        self.run(root, leaf, op, false, true)
    }

    /// [`reduce`](Self::reduce) with the packed arrays moved in place by
    /// [`move_raw`](Self::move_raw) (the GPU-aware path, on host memory).
    pub fn reduce_in_place<U: Unit>(
        &self,
        leaf: &[U],
        root: &mut [U],
        op: Op,
    ) -> Result<(), SfError> {
        self.run(leaf, root, op, true, true)
    }

    /// `leaf = leaf op root` through the packed arrays, on the host.
    pub fn bcast<U: Unit>(&self, root: &[U], leaf: &mut [U], op: Op) -> Result<(), SfError> {
        self.run(root, leaf, op, false, false)
    }

    /// `root = root op leaf` through the packed arrays, on the host.
    pub fn reduce<U: Unit>(&self, leaf: &[U], root: &mut [U], op: Op) -> Result<(), SfError> {
        self.run(leaf, root, op, true, false)
    }

    /// Gathers `from` into its packed array, moves it to the other (through the packed forest,
    /// or `in_place` by [`move_raw`](Self::move_raw)) and scatters it into `to` with `op`:
    /// roots to leaves, or leaves to roots with `reduce`.
    fn run<U: Unit>(
        &self,
        from: &[U],
        to: &mut [U],
        op: Op,
        reduce: bool,
        in_place: bool,
    ) -> Result<(), SfError> {
        let (root_len, leaf_len) = if reduce {
            (to.len(), from.len())
        } else {
            (from.len(), to.len())
        };
        self.check(root_len, leaf_len)?;
        reducer::<U>(op)?;
        let mut proots = vec![U::zeroed(); self.packed_roots()];
        let mut pleaves = vec![U::zeroed(); self.packed_leaves()];
        let (src_segs, dst_segs) = if reduce {
            (&self.leaves, &self.roots)
        } else {
            (&self.roots, &self.leaves)
        };
        gather(
            src_segs,
            from,
            if reduce { &mut pleaves } else { &mut proots },
        );
        if in_place {
            if let Some((r, l, n)) = self.self_segment() {
                match reduce {
                    false => pleaves[l..l + n].copy_from_slice(&proots[r..r + n]),
                    true => proots[r..r + n].copy_from_slice(&pleaves[l..l + n]),
                }
            }
            let (pr, pl) = (proots.as_mut_ptr().cast(), pleaves.as_mut_ptr().cast());
            // SAFETY: both vectors hold the packed lengths and outlive the call.
            unsafe { self.move_raw(pr, pl, size_of::<U>(), reduce)? };
        } else if reduce {
            self.packed.reduce(&pleaves, &mut proots, Op::Replace)?;
        } else {
            self.packed.bcast(&proots, &mut pleaves, Op::Replace)?;
        }
        scatter(dst_segs, if reduce { &proots } else { &pleaves }, to, op)
    }
}

fn too_short(what: &'static str, got: usize, need: usize) -> SfError {
    SfError::BufferTooShort { what, got, need }
}

/// `packed[s.offset + k] = data[s.plan[k]]` for every segment (lengths checked).
fn gather<U: Unit>(segs: &[Segment], data: &[U], packed: &mut [U]) {
    for s in segs {
        forest::gather(
            &mut packed[s.offset..s.offset + s.plan.len()],
            &s.plan,
            data,
        );
    }
}

/// `data[s.plan[k]] = data[...] op packed[s.offset + k]`, segment by segment, in order
/// (lengths and `op` checked).
fn scatter<U: Unit>(segs: &[Segment], packed: &[U], data: &mut [U], op: Op) -> Result<(), SfError> {
    let red = forest::combine::<U>(op)?;
    for s in segs {
        forest::unpack(
            data,
            &s.plan,
            &packed[s.offset..s.offset + s.plan.len()],
            red,
        );
    }
    Ok(())
}
