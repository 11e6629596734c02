//! Block data after a remesh: every old block's values travel to the rank(s) holding the new
//! blocks made from it, and each new block is built from its origin.
//!
//! - a kept block is copied (ghosts included; they are stale until the next ghost fill);
//! - a refined block's children get the parent prolongated onto their interiors with the
//!   variable's prolongation operator, the arithmetic of the exchange's coarse-to-fine fill:
//!   a linear field is reproduced exactly and, since the children of a coarse cell average to
//!   its value, the total is kept to round-off;
//! - a merged block gets the volume average of its children's interiors.
//!
//! A sparse variable is allocated on a new block if it was on any block it comes from.
//!
//! Every rank knows the whole move plan ([`RemeshOutcome::moves`]), so both ends of a
//! transfer know its size: one message per pair of ranks carries every old block the
//! receiver needs from the sender (each once, in gid order), all posted non-blocking and
//! waited for together, on a communicator of its own.

use std::collections::{BTreeSet, HashMap};

use starhalo_mesh::field::{IndexRange, IndexShape};
use starhalo_mesh::refine::BlockOrigin;
use starhalo_mesh::{Forest, Mesh, RemeshOutcome};
use starhalo_sf::mpi::topology::{Communicator, SimpleCommunicator};
use starhalo_sf::p2p::MsgArena;

use crate::bnd_info::{FieldLayout, IndexBox};
use crate::collective;
use crate::error::BoundaryError;
use crate::prolong_restrict::{at, prolongate, restrict, Prolongation};
use crate::storage::BlockData;

/// The values of one old block, wherever they came from.
#[derive(Debug, Clone)]
pub struct Source<'a> {
    /// Allocation of each variable.
    pub allocated: Vec<bool>,
    /// The block arrays of every slot ([`BlockData::fine_block`]).
    pub fine: &'a [f64],
}

/// This rank's storage of the remeshed `mesh`, from the `old` storage (ghosts filled) of the
/// blocks of `old_forest`, the forest before the remesh that produced `outcome`. `ops` gives
/// each variable's prolongation operator (missing entries: the default). Collective over
/// `comm`; ghosts of the result must be filled before use.
///
/// ```
/// use starhalo_boundary::{redistribute, BlockData};
/// use starhalo_mesh::field::{Centering, Fields, Metadata};
/// use starhalo_mesh::{Mesh, MeshConfig, RefinementFlag, RefinementKind};
/// let universe = starhalo_sf::mpi::initialize().unwrap();
/// let world = universe.world();
/// let mut c = MeshConfig::new([16, 16, 1], [8, 8, 1]);
/// c.refinement = RefinementKind::Adaptive;
/// c.numlevel = 2;
/// let mut mesh = Mesh::new(c, 1).unwrap();
/// let mut fields = Fields::default();
/// fields.add("u", Metadata::new(Centering::Cell)).unwrap();
/// let mut data = BlockData::new(&mesh, &fields, 0).unwrap();
/// data.data_mut().fill(3.0);
/// let old_forest = mesh.forest().clone();
/// let flags = [RefinementFlag::Refine, RefinementFlag::Same, RefinementFlag::Same, RefinementFlag::Same];
/// let outcome = mesh.remesh(&flags, None).unwrap();
/// let data = redistribute(&world, &old_forest, &mesh, &outcome, &data, &[]).unwrap();
/// assert_eq!(data.gids().len(), 7);
/// // A constant stays constant in the new children (interior cell 2, 2 of block 0).
/// assert_eq!(data.fine(0, 0)[2 * 12 + 2], 3.0);
/// ```
pub fn redistribute(
    comm: &SimpleCommunicator,
    old_forest: &Forest,
    mesh: &Mesh,
    outcome: &RemeshOutcome,
    old: &BlockData,
    ops: &[Prolongation],
) -> Result<BlockData, BoundaryError> {
    let rank = comm.rank() as usize;
    let (nvar, block_len) = (old.vars().len(), old.layout().fine.block_len());
    // At least one value per block, so that every block is a chunk (none without variables).
    let item = (nvar + block_len).max(1);
    // Who sends what to whom: (peer, old gid), each pair once.
    let mut sends = BTreeSet::new();
    let mut recvs = BTreeSet::new();
    for m in &outcome.moves {
        if m.from_rank == rank && m.to_rank != rank {
            sends.insert((m.to_rank, m.old_gid));
        }
        if m.to_rank == rank && m.from_rank != rank {
            recvs.insert((m.from_rank, m.old_gid));
        }
    }
    let (recv_peers, recv_segs) = peer_runs(&recvs, item);
    // Everything that can fail on one rank (inputs that do not fit the plan, memory for the
    // new storage and the messages) comes before the agreement: a rank that fails must not
    // leave the others waiting for it.
    let prepared = check(comm, old_forest, mesh, outcome, old).and_then(|()| {
        let new = old.for_blocks_of(mesh, rank)?;
        let mut out = MsgArena::with_len(sends.len() * item)?;
        let buf = out.buf_mut()?;
        for (chunk, &(_, gid)) in buf.chunks_exact_mut(item).zip(&sends) {
            let b = old.local(gid).ok_or_else(|| missing(gid, rank))?;
            for (v, x) in chunk[..nvar].iter_mut().enumerate() {
                *x = f64::from(u8::from(old.is_allocated(b, v)));
            }
            chunk[nvar..nvar + block_len].copy_from_slice(old.fine_block(b));
        }
        let inbox = MsgArena::new(recv_segs.clone())?;
        Ok((new, out, inbox))
    });
    let (mut new, mut out, mut inbox) = collective::agree(
        comm,
        prepared,
        "another rank's storage does not fit the remesh, or did not fit in memory",
    )?;
    let own = comm.duplicate();
    for (seg, (&peer, r)) in recv_peers.iter().zip(&recv_segs).enumerate() {
        inbox.recv(&own, seg, r.len(), peer as i32, 0)?;
    }
    let (send_peers, send_segs) = peer_runs(&sends, item);
    for (&peer, r) in send_peers.iter().zip(&send_segs) {
        out.send(&own, r.clone(), peer as i32, 0)?;
    }
    inbox.wait();
    out.wait();

    let received = inbox.buf()?;
    let mut sources: HashMap<usize, Source> = HashMap::new();
    for (chunk, &(_, gid)) in received.chunks_exact(item).zip(&recvs) {
        sources.insert(
            gid,
            Source {
                allocated: chunk[..nvar].iter().map(|&x| x != 0.0).collect(),
                fine: &chunk[nvar..nvar + block_len],
            },
        );
    }
    for m in &outcome.moves {
        if m.to_rank == rank && m.from_rank == rank {
            let b = old
                .local(m.old_gid)
                .ok_or_else(|| missing(m.old_gid, rank))?;
            sources.entry(m.old_gid).or_insert_with(|| Source {
                allocated: (0..nvar).map(|v| old.is_allocated(b, v)).collect(),
                fine: old.fine_block(b),
            });
        }
    }
    assemble(&mut new, old_forest, mesh, outcome, &sources, ops)?;
    Ok(new)
}

fn missing(gid: usize, rank: usize) -> BoundaryError {
    BoundaryError::Mismatch(format!(
        "the remesh moves old block {gid} from rank {rank}, which does not hold it"
    ))
}

/// The inputs agree with each other and with the plan, as far as this rank can tell.
fn check(
    comm: &SimpleCommunicator,
    old_forest: &Forest,
    mesh: &Mesh,
    outcome: &RemeshOutcome,
    old: &BlockData,
) -> Result<(), BoundaryError> {
    let rank = comm.rank() as usize;
    BoundaryError::check_size(
        "ranks of the remeshed partition",
        comm.size() as usize,
        mesh.partition().nranks(),
    )?;
    BoundaryError::check_size(
        "new blocks of the remesh map",
        mesh.forest().len(),
        outcome.map.origin.len(),
    )?;
    BoundaryError::check_size(
        "old blocks of the remesh map",
        old_forest.len(),
        outcome.map.fate.len(),
    )?;
    for m in &outcome.moves {
        if m.from_rank == rank && old.local(m.old_gid).is_none() {
            return Err(missing(m.old_gid, rank));
        }
    }
    Ok(())
}

/// Consecutive runs of `(peer, gid)` pairs per peer, as segments of `item` values each.
fn peer_runs(
    pairs: &BTreeSet<(usize, usize)>,
    item: usize,
) -> (Vec<usize>, Vec<std::ops::Range<usize>>) {
    let mut peers: Vec<usize> = Vec::new();
    let mut segs: Vec<std::ops::Range<usize>> = Vec::new();
    for (i, &(peer, _)) in pairs.iter().enumerate() {
        if peers.last() == Some(&peer) {
            if let Some(s) = segs.last_mut() {
                s.end += item;
            }
        } else {
            peers.push(peer);
            segs.push(i * item..(i + 1) * item);
        }
    }
    (peers, segs)
}

/// Fills every block of `new` (storage of the remeshed `mesh`, fresh from
/// [`BlockData::for_blocks_of`]) from the old blocks in `sources`, keyed by old gid.
pub fn assemble(
    new: &mut BlockData,
    old_forest: &Forest,
    mesh: &Mesh,
    outcome: &RemeshOutcome,
    sources: &HashMap<usize, Source>,
    ops: &[Prolongation],
) -> Result<(), BoundaryError> {
    let get = |gid: usize| {
        sources.get(&gid).ok_or_else(|| {
            BoundaryError::Mismatch(format!("old block {gid} did not reach this rank"))
        })
    };
    let vars = new.vars().to_vec();
    let vlen = new.layout().fine.var_len();
    let halves = Halves::new(new.shape());
    let mut coarse = vec![0.0; halves.coarse_len()];
    for b in 0..new.gids().len() {
        let gid = new.gids()[b];
        let origin = outcome
            .map
            .origin
            .get(gid)
            .ok_or_else(|| BoundaryError::Size {
                what: "new blocks of the remesh map",
                expected: gid + 1,
                got: outcome.map.origin.len(),
            })?;
        match origin {
            BlockOrigin::Kept { old } => {
                let src = get(*old)?;
                for (v, &on) in src.allocated.iter().enumerate() {
                    new.set_allocated(b, v, on);
                }
                new.fine_block_mut(b).copy_from_slice(src.fine);
            }
            BlockOrigin::Refined { old } => {
                let src = get(*old)?;
                let pos = position(mesh.forest(), gid)?;
                let h = halves.need()?;
                for (v, var) in vars.iter().enumerate() {
                    new.set_allocated(b, v, src.allocated[v]);
                    if !src.allocated[v] {
                        continue;
                    }
                    let op = ops.get(v).copied().unwrap_or_default();
                    for s in var.slots.clone() {
                        let parent = &src.fine[s * vlen..(s + 1) * vlen];
                        h.prolongate_child(op, parent, pos, new.fine_mut(b, s), &mut coarse)?;
                    }
                }
            }
            BlockOrigin::Merged { old } => {
                let srcs = old.iter().map(|&o| get(o)).collect::<Result<Vec<_>, _>>()?;
                let h = halves.need()?;
                for (v, var) in vars.iter().enumerate() {
                    let on = srcs.iter().any(|s| s.allocated[v]);
                    new.set_allocated(b, v, on);
                    if !on {
                        continue;
                    }
                    for s in var.slots.clone() {
                        for (&o, src) in old.iter().zip(&srcs) {
                            let pos = position(old_forest, o)?;
                            let child = &src.fine[s * vlen..(s + 1) * vlen];
                            h.restrict_child(child, pos, new.fine_mut(b, s), &mut coarse)?;
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

fn position(forest: &Forest, gid: usize) -> Result<[usize; 3], BoundaryError> {
    let loc = forest
        .loc(gid)
        .ok_or_else(|| BoundaryError::Geometry(format!("block {gid} is not in the forest")))?;
    Ok(loc.position_in_parent().map(|x| x as usize))
}

/// A block and the half of its parent it covers: fine block arrays, the coarse buffer the
/// prolongation and restriction operators work on, and how their indices meet.
struct Halves {
    shape: IndexShape,
    multilevel: Option<Multilevel>,
}

struct Multilevel {
    shape: IndexShape,
    fine: [usize; 3],
    coarse: [usize; 3],
    /// Interior cells of the coarse buffer per direction (half the block's, 1 if inactive).
    half: [usize; 3],
    g: [usize; 3],
    cg: [usize; 3],
    /// The coarse buffer's interior.
    interior: IndexBox,
    /// The interior with one layer of face neighbours (what prolongation reads).
    with_halo: IndexBox,
}

impl Halves {
    fn new(shape: &IndexShape) -> Self {
        // Blocks of odd size cannot be refined (the mesh refuses them); keep the error for
        // the moment a refined or merged block needs the geometry.
        let multilevel = shape.coarse().ok().map(|cs| {
            let ndim = shape.ndim();
            let range = |s, e| IndexRange { s, e };
            let g = [0, 1, 2].map(|d| shape.ghosts(d));
            let cg = [0, 1, 2].map(|d| cs.ghosts(d));
            let half = cs.nx();
            let h = [0, 1, 2].map(|d| usize::from(d < ndim));
            Multilevel {
                shape: *shape,
                fine: FieldLayout::of_shape(shape, 1).dims,
                coarse: FieldLayout::of_shape(&cs, 1).dims,
                half,
                g,
                cg,
                interior: IndexBox([0, 1, 2].map(|d| range(cg[d], cg[d] + half[d] - 1))),
                with_halo: IndexBox(
                    [0, 1, 2].map(|d| range(cg[d] - h[d], cg[d] + half[d] - 1 + h[d])),
                ),
            }
        });
        Self {
            shape: *shape,
            multilevel,
        }
    }

    fn coarse_len(&self) -> usize {
        self.multilevel
            .as_ref()
            .map_or(0, |m| m.coarse.iter().product())
    }

    fn need(&self) -> Result<&Multilevel, BoundaryError> {
        let m = self.multilevel.as_ref().ok_or_else(|| {
            BoundaryError::Geometry(format!(
                "blocks of {:?} cells cannot be refined or merged (odd size)",
                self.shape.nx()
            ))
        })?;
        if self.shape.nghost() == 0 {
            return Err(BoundaryError::Geometry(
                "prolongation after a remesh needs at least one ghost layer".into(),
            ));
        }
        Ok(m)
    }
}

impl Multilevel {
    /// The parent's index of coarse-buffer point `c` of the child at `pos`.
    fn in_parent(&self, pos: [usize; 3], c: [usize; 3]) -> [usize; 3] {
        [0, 1, 2].map(|d| self.g[d] + pos[d] * self.half[d] + c[d] - self.cg[d])
    }

    /// The child at `pos` of `parent` (one slot's block array, ghosts filled): the parent's
    /// cells over the child, with one halo layer, go to the coarse buffer and are prolongated
    /// onto the child's interior.
    fn prolongate_child(
        &self,
        op: Prolongation,
        parent: &[f64],
        pos: [usize; 3],
        child: &mut [f64],
        coarse: &mut [f64],
    ) -> Result<(), BoundaryError> {
        for c in self.with_halo.points() {
            coarse[at(self.coarse, c)] = parent[at(self.fine, self.in_parent(pos, c))];
        }
        prolongate(op, &self.shape, coarse, child, &self.interior)
    }

    /// The volume average of `child`'s interior into the part of `parent` it covers.
    fn restrict_child(
        &self,
        child: &[f64],
        pos: [usize; 3],
        parent: &mut [f64],
        coarse: &mut [f64],
    ) -> Result<(), BoundaryError> {
        restrict(&self.shape, child, coarse, &self.interior)?;
        for c in self.interior.points() {
            parent[at(self.fine, self.in_parent(pos, c))] = coarse[at(self.coarse, c)];
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use starhalo_mesh::field::{Centering, Fields, Metadata, SparseThresholds};
    use starhalo_mesh::{MeshConfig, RefinementFlag, RefinementKind};

    fn mesh(ndim: usize) -> Mesh {
        let (nx, bnx) = if ndim == 2 {
            ([16, 16, 1], [4, 4, 1])
        } else {
            ([8, 8, 8], [4, 4, 4])
        };
        let mut c = MeshConfig::new(nx, bnx);
        c.refinement = RefinementKind::Adaptive;
        c.numlevel = 3;
        c.derefine_count = 1;
        Mesh::new(c, 1).unwrap()
    }

    fn fields() -> Fields {
        let mut f = Fields::default();
        f.add("u", Metadata::new(Centering::Cell).components(2))
            .unwrap();
        f.add(
            "s",
            Metadata::new(Centering::Cell).sparse(SparseThresholds::default()),
        )
        .unwrap();
        f
    }

    /// A linear field of the cell centres (unit domain), different per slot.
    fn linear(slot: usize, x: [f64; 3]) -> f64 {
        1.0 + slot as f64 + 0.5 * x[0] - 0.25 * x[1] + 0.125 * x[2]
    }

    /// Fills every cell of every local block with `linear`, or only the ghosts (what a ghost
    /// fill of a linear field gives, here at physical boundaries too).
    fn fill(mesh: &Mesh, data: &mut BlockData, ghosts_only: bool) {
        let lay = data.layout().fine;
        let g = data.shape().nghost();
        let ndim = mesh.ndim();
        let nx = data.shape().nx();
        for b in 0..data.gids().len() {
            let (lo, hi) = mesh.bounds(data.gids()[b]).unwrap();
            for s in 0..lay.nvar {
                let var = data
                    .vars()
                    .iter()
                    .position(|v| v.slots.contains(&s))
                    .unwrap();
                if !data.is_allocated(b, var) {
                    continue;
                }
                let arr = data.fine_mut(b, s);
                for p in IndexBox(lay.dims.map(|n| IndexRange { s: 0, e: n - 1 })).points() {
                    let ghost = (0..ndim).any(|d| p[d] < g || p[d] >= g + nx[d]);
                    if ghosts_only && !ghost {
                        continue;
                    }
                    let x = [0, 1, 2].map(|d| {
                        if d < ndim {
                            let dx = (hi[d] - lo[d]) / nx[d] as f64;
                            lo[d] + (p[d] as f64 - g as f64 + 0.5) * dx
                        } else {
                            0.0
                        }
                    });
                    arr[at(lay.dims, p)] = linear(s, x);
                }
            }
        }
    }

    /// Max error of the interiors against `linear`, and the total of each slot.
    fn check(mesh: &Mesh, data: &BlockData) -> (f64, Vec<f64>) {
        let mut want = data.clone();
        fill(mesh, &mut want, false);
        let lay = data.layout().fine;
        let g = data.shape().nghost();
        let ndim = mesh.ndim();
        let nx = data.shape().nx();
        let inner = IndexBox([0, 1, 2].map(|d| {
            let g = if d < ndim { g } else { 0 };
            IndexRange {
                s: g,
                e: g + nx[d] - 1,
            }
        }));
        let mut err = 0.0f64;
        let mut total = vec![0.0; lay.nvar];
        for b in 0..data.gids().len() {
            let (lo, hi) = mesh.bounds(data.gids()[b]).unwrap();
            let dv: f64 = (0..ndim).map(|d| (hi[d] - lo[d]) / nx[d] as f64).product();
            for (s, t) in total.iter_mut().enumerate() {
                let var = data
                    .vars()
                    .iter()
                    .position(|v| v.slots.contains(&s))
                    .unwrap();
                let live = data.is_allocated(b, var);
                for p in inner.points() {
                    let (a, w) = (
                        data.fine(b, s)[at(lay.dims, p)],
                        want.fine(b, s)[at(lay.dims, p)],
                    );
                    if live {
                        err = err.max((a - w).abs());
                    } else {
                        assert_eq!(a, data.vars()[var].default);
                    }
                    *t += a * dv;
                }
            }
        }
        (err, total)
    }

    fn step(mesh: &mut Mesh, data: &BlockData, flags: &[RefinementFlag]) -> BlockData {
        let old_forest = mesh.forest().clone();
        let out = mesh.remesh(flags, None).unwrap();
        let mut new = data.for_blocks_of(mesh, 0).unwrap();
        let sources: HashMap<usize, Source> = (0..data.gids().len())
            .map(|b| {
                let nv = data.vars().len();
                let src = Source {
                    allocated: (0..nv).map(|v| data.is_allocated(b, v)).collect(),
                    fine: data.fine_block(b),
                };
                (data.gids()[b], src)
            })
            .collect();
        assemble(&mut new, &old_forest, mesh, &out, &sources, &[]).unwrap();
        fill(mesh, &mut new, true);
        new
    }

    #[test]
    fn linear_fields_survive_refine_and_merge_exactly_with_the_total() {
        for ndim in [2, 3] {
            let mut m = mesh(ndim);
            let mut data = BlockData::new(&m, &fields(), 0).unwrap();
            // The sparse variable starts allocated on block 1 only.
            data.set_allocated(1, 1, true);
            fill(&m, &mut data, false);
            let (_, total0) = check(&m, &data);
            let n0 = m.forest().len();
            // Refine blocks 0 and 1 (one allocated sparse block, one not), twice over for 0.
            let mut flags = vec![RefinementFlag::Same; n0];
            flags[0] = RefinementFlag::Refine;
            flags[1] = RefinementFlag::Refine;
            data = step(&mut m, &data, &flags);
            let mut flags = vec![RefinementFlag::Same; m.forest().len()];
            flags[0] = RefinementFlag::Refine;
            data = step(&mut m, &data, &flags);
            assert_eq!(m.forest().max_level(), 2);
            let (err, total) = check(&m, &data);
            assert!(err < 1e-12, "{ndim}-D after refinement: error {err}");
            for (a, b) in total.iter().zip(&total0) {
                assert!(((a - b) / b).abs() < 1e-14, "{ndim}-D total {a} vs {b}");
            }
            // Children of the allocated block carry the sparse variable; others do not.
            let fam = 1usize << ndim;
            let alloc: usize = (0..data.gids().len())
                .filter(|&b| data.is_allocated(b, 1))
                .count();
            assert_eq!(alloc, fam);
            // Merge everything back.
            for _ in 0..4 {
                let flags = vec![RefinementFlag::Derefine; m.forest().len()];
                data = step(&mut m, &data, &flags);
            }
            assert_eq!(m.forest().len(), n0);
            let (err, total) = check(&m, &data);
            assert!(err < 1e-12, "{ndim}-D after merging: error {err}");
            for (a, b) in total.iter().zip(&total0) {
                assert!(((a - b) / b).abs() < 1e-14, "{ndim}-D total {a} vs {b}");
            }
            assert!(data.is_allocated(1, 1) && !data.is_allocated(0, 1));
        }
    }

    #[test]
    fn limited_prolongation_keeps_the_total_of_a_rough_field() {
        let mut m = mesh(2);
        let mut data = BlockData::new(&m, &fields(), 0).unwrap();
        for b in 0..data.gids().len() {
            data.set_allocated(b, 1, true);
        }
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for v in data.data_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *v = (x >> 11) as f64 / (1u64 << 53) as f64;
        }
        let (_, t0) = check(&m, &data);
        let flags = vec![RefinementFlag::Refine; m.forest().len()];
        let refined = step(&mut m, &data, &flags);
        let (err, t1) = check(&m, &refined);
        // A random field is not linear, but the total is kept.
        assert!(err > 1e-3);
        for (a, b) in t1.iter().zip(&t0) {
            assert!(((a - b) / b).abs() < 1e-14, "total {a} vs {b}");
        }
        // Merging the children gives back the parent's interior exactly.
        let flags = vec![RefinementFlag::Derefine; m.forest().len()];
        let merged = step(&mut m, &refined, &flags);
        let (_, t2) = check(&m, &merged);
        for (a, b) in t2.iter().zip(&t0) {
            assert!(((a - b) / b).abs() < 1e-14, "total {a} vs {b}");
        }
        let g = data.shape().nghost();
        let lay = data.layout().fine;
        for b in 0..data.gids().len() {
            let inner = IndexRange { s: g, e: g + 3 };
            for p in IndexBox([inner, inner, IndexRange { s: 0, e: 0 }]).points() {
                let i = at(lay.dims, p);
                let (a, w) = (merged.fine(b, 0)[i], data.fine(b, 0)[i]);
                assert!((a - w).abs() < 1e-14, "block {b} {p:?}: {a} vs {w}");
            }
        }
    }
}
