//! Block data through random remeshes with load balancing (`boundary::remesh::redistribute`),
//! on 1, 2, 3 and 4 ranks, 2-D and 3-D periodic meshes of up to 3 levels.
//!
//! Each round draws refine/merge flags and block costs (the same on every rank), remeshes,
//! moves the data and checks, on every new block:
//!
//! - a linear field (two dense components) comes out exact to 1e-12 on refined and merged
//!   blocks, and bit for bit (ghosts included) on kept blocks, wherever they now live;
//! - a sparse variable is allocated exactly where the remesh map says (allocated on some
//!   block it came from), and holds its default where not;
//! - the global total of every slot is unchanged to 1e-13 relative;
//! - the rounds really move blocks between ranks and both refine and merge (asserted over
//!   the run);
//! - the final data are bit-identical on every rank count (the parent compares digests).

mod common;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use starhalo_boundary::bnd_info::FieldLayout;
use starhalo_boundary::{redistribute, BlockData};
use starhalo_mesh::config::{BoundaryCondition, RefinementKind};
use starhalo_mesh::field::{Centering, Fields, Metadata, SparseThresholds};
use starhalo_mesh::refine::BlockOrigin;
use starhalo_mesh::{Mesh, MeshConfig, MoveKind, RefinementFlag};
use starhalo_sf::mpi::collective::SystemOperation;
use starhalo_sf::mpi::topology::{Communicator, SimpleCommunicator};
use starhalo_sf::mpi::traits::CommunicatorCollectives;

const ROUNDS: usize = 12;

fn main() {
    if std::env::var_os(common::CHILD_ENV).is_some() {
        child();
        return;
    }
    eprintln!("remesh_data: block data through random remeshes");
    let mut same = common::SameDigests::default();
    common::relaunch_checked([1, 2, 3, 4].map(|n| (n, vec![])), 240, |n, out| {
        let text = same.check(n, out, 2);
        for l in text.lines().filter(|l| l.starts_with("MOVED")) {
            eprintln!("  {n} ranks: {l}");
        }
    });
}

fn mesh(ndim: usize, nranks: usize) -> Mesh {
    let (nx, bnx) = if ndim == 2 {
        ([16, 16, 1], [4, 4, 1])
    } else {
        ([8, 8, 8], [4, 4, 4])
    };
    let mut c = MeshConfig::new(nx, bnx);
    c.xmin = [-1.0, -0.5, 0.0];
    c.xmax = [1.0, 0.5, 1.0];
    for d in 0..ndim {
        c.bc[d] = [BoundaryCondition::Periodic; 2];
    }
    c.refinement = RefinementKind::Adaptive;
    c.numlevel = 3;
    c.derefine_count = 1;
    Mesh::new(c, nranks).expect("test mesh")
}

fn fields() -> Fields {
    let mut f = Fields::default();
    let cell = || Metadata::new(Centering::Cell).fill_ghost();
    f.add("u", cell().components(2)).unwrap();
    f.add("s", cell().sparse(SparseThresholds::default()))
        .unwrap();
    f
}

/// The linear field of slot `s` at `x`.
fn linear(s: usize, x: [f64; 3]) -> f64 {
    2.0 + s as f64 + 0.75 * x[0] - 0.5 * x[1] + 0.375 * x[2]
}

fn var_of(data: &BlockData, slot: usize) -> usize {
    data.vars()
        .iter()
        .position(|v| v.slots.contains(&slot))
        .unwrap()
}

/// Centre of array point `p` of block `gid` (ghosts included).
fn centre(mesh: &Mesh, data: &BlockData, gid: usize, p: [usize; 3]) -> [f64; 3] {
    let (lo, hi) = mesh.bounds(gid).unwrap();
    let s = data.shape();
    [0, 1, 2].map(|d| {
        if d < mesh.ndim() {
            let dx = (hi[d] - lo[d]) / s.nx()[d] as f64;
            lo[d] + (p[d] as f64 - s.ghosts(d) as f64 + 0.5) * dx
        } else {
            0.0
        }
    })
}

fn points(n: [usize; 3]) -> impl Iterator<Item = [usize; 3]> {
    (0..n[2]).flat_map(move |k| (0..n[1]).flat_map(move |j| (0..n[0]).map(move |i| [i, j, k])))
}

fn at(dims: [usize; 3], p: [usize; 3]) -> usize {
    (p[2] * dims[1] + p[1]) * dims[0] + p[0]
}

fn interior(data: &BlockData, p: [usize; 3]) -> bool {
    let s = data.shape();
    (0..3).all(|d| p[d] >= s.ghosts(d) && p[d] < s.ghosts(d) + s.nx()[d])
}

/// Writes the linear field on allocated variables: everywhere, or only in the ghosts (what
/// a ghost fill of the linear field would give). The sparse variable's interior is left
/// alone on blocks where it is not `exact`.
fn fill(mesh: &Mesh, data: &mut BlockData, exact: &[bool], ghosts_only: bool) {
    let dims = FieldLayout::of_shape(data.shape(), 1).dims;
    let nslot = data.layout().fine.nvar;
    for b in 0..data.gids().len() {
        let gid = data.gids()[b];
        for s in 0..nslot {
            let v = var_of(data, s);
            if !data.is_allocated(b, v) {
                continue;
            }
            let keep = ghosts_only || (v == 1 && !exact[gid]);
            for p in points(dims) {
                if keep && interior(data, p) {
                    continue;
                }
                let v = linear(s, centre(mesh, data, gid, p));
                data.fine_mut(b, s)[at(dims, p)] = v;
            }
        }
    }
}

/// Global volume integral of every slot (summed per rank, then reduced).
fn totals(world: &SimpleCommunicator, mesh: &Mesh, data: &BlockData) -> Vec<f64> {
    let dims = FieldLayout::of_shape(data.shape(), 1).dims;
    let nslot = data.layout().fine.nvar;
    let mut t = vec![0.0; nslot];
    for b in 0..data.gids().len() {
        let (lo, hi) = mesh.bounds(data.gids()[b]).unwrap();
        let dv: f64 = (0..mesh.ndim())
            .map(|d| (hi[d] - lo[d]) / data.shape().nx()[d] as f64)
            .product();
        for (s, ts) in t.iter_mut().enumerate() {
            for p in points(dims).filter(|&p| interior(data, p)) {
                *ts += data.fine(b, s)[at(dims, p)] * dv;
            }
        }
    }
    let mut all = vec![0.0; nslot];
    world.all_reduce_into(&t[..], &mut all[..], SystemOperation::sum());
    all
}

fn fnv(words: impl IntoIterator<Item = u64>) -> u64 {
    words.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, x| {
        (h ^ x).wrapping_mul(0x100_0000_01b3)
    })
}

/// XOR over blocks of a hash of (gid, values): independent of which rank holds what.
fn digest(world: &SimpleCommunicator, data: &BlockData) -> u64 {
    let mine = (0..data.gids().len())
        .map(|b| {
            let words = std::iter::once(data.gids()[b] as u64)
                .chain(data.fine_block(b).iter().map(|x| x.to_bits()));
            fnv(words)
        })
        .fold(0u64, |a, h| a ^ h);
    let mut all = 0u64;
    world.all_reduce_into(&mine, &mut all, SystemOperation::bitwise_xor());
    all
}

fn child() {
    let universe = starhalo_sf::mpi::initialize().unwrap();
    let world = universe.world();
    let rank = world.rank() as usize;
    let nranks = world.size() as usize;
    for ndim in [2, 3] {
        let mut rng = ChaCha8Rng::seed_from_u64(40 + ndim as u64);
        let mut mesh = mesh(ndim, nranks);
        let mut data = BlockData::new(&mesh, &fields(), rank).unwrap();
        // The sparse variable: allocated on every third block. `alloc` and `exact` track, per
        // gid, whether it should be allocated and whether it is still linear (a merge of
        // allocated and unallocated blocks is not).
        let mut alloc: Vec<bool> = (0..mesh.forest().len()).map(|g| g % 3 == 0).collect();
        let mut exact = alloc.clone();
        for b in 0..data.gids().len() {
            data.set_allocated(b, 1, alloc[data.gids()[b]]);
        }
        fill(&mesh, &mut data, &exact, false);
        let t0 = totals(&world, &mesh, &data);
        let (mut moved, mut refined, mut merged) = (0, 0, 0);
        for round in 0..ROUNDS {
            let p_refine = if round % 3 == 2 { 0.05 } else { 0.25 };
            let flags: Vec<RefinementFlag> = (0..mesh.forest().len())
                .map(|_| match rng.gen_range(0.0..1.0) {
                    x if x < p_refine => RefinementFlag::Refine,
                    x if x < 0.8 => RefinementFlag::Derefine,
                    _ => RefinementFlag::Same,
                })
                .collect();
            let costs: Vec<f64> = (0..mesh.forest().len())
                .map(|_| rng.gen_range(0.5..2.0))
                .collect();
            let old_forest = mesh.forest().clone();
            let out = mesh.remesh(&flags, Some(&costs)).unwrap();
            data = redistribute(&world, &old_forest, &mesh, &out, &data, &[]).unwrap();
            assert_eq!(
                data.gids(),
                &mesh.partition().blocks_of(rank).collect::<Vec<_>>()[..]
            );
            // The expected allocation, replayed from the map.
            let (a, e): (Vec<bool>, Vec<bool>) = out
                .map
                .origin
                .iter()
                .map(|o| match o {
                    BlockOrigin::Kept { old } | BlockOrigin::Refined { old } => {
                        (alloc[*old], exact[*old])
                    }
                    BlockOrigin::Merged { old } => (
                        old.iter().any(|&g| alloc[g]),
                        old.iter().all(|&g| alloc[g] == alloc[old[0]] && exact[g]),
                    ),
                })
                .unzip();
            alloc = a;
            exact = e;
            moved += out
                .moves
                .iter()
                .filter(|m| m.kind == MoveKind::Same && !m.is_local())
                .count();
            refined += out
                .map
                .origin
                .iter()
                .filter(|o| matches!(o, BlockOrigin::Refined { .. }))
                .count();
            merged += out
                .map
                .origin
                .iter()
                .filter(|o| matches!(o, BlockOrigin::Merged { .. }))
                .count();

            let mut want = data.clone();
            fill(&mesh, &mut want, &exact, false);
            let dims = FieldLayout::of_shape(data.shape(), 1).dims;
            for b in 0..data.gids().len() {
                let gid = data.gids()[b];
                let kept = matches!(out.map.origin[gid], BlockOrigin::Kept { .. });
                assert_eq!(data.is_allocated(b, 1), alloc[gid], "{ndim}-D gid {gid}");
                for s in 0..data.layout().fine.nvar {
                    let v = var_of(&data, s);
                    let (got, w) = (data.fine(b, s), want.fine(b, s));
                    if !data.is_allocated(b, v) {
                        assert!(got.iter().all(|&x| x == data.vars()[v].default));
                        continue;
                    }
                    if v == 1 && !exact[gid] {
                        continue;
                    }
                    for p in points(dims) {
                        let i = at(dims, p);
                        if kept {
                            // Copied, ghosts included, from the same formula: bit for bit.
                            assert_eq!(got[i], w[i], "{ndim}-D kept gid {gid} slot {s} {p:?}");
                        } else if interior(&data, p) {
                            assert!(
                                (got[i] - w[i]).abs() < 1e-12,
                                "{ndim}-D round {round} gid {gid} slot {s} {p:?}: {} vs {}",
                                got[i],
                                w[i]
                            );
                        }
                    }
                }
            }
            let t = totals(&world, &mesh, &data);
            for (s, (a, b)) in t.iter().zip(&t0).enumerate() {
                assert!(
                    ((a - b) / b).abs() < 1e-13,
                    "{ndim}-D round {round} slot {s}: total {a} vs {b}"
                );
            }
            // The next round starts from the exact field (within 1e-12 of what it has), ghosts
            // filled, so that kept blocks can be compared bit for bit.
            fill(&mesh, &mut data, &exact, false);
        }
        assert!(
            refined > 0 && merged > 0,
            "{ndim}-D: {refined} refined, {merged} merged"
        );
        if nranks > 1 {
            assert!(moved > 0, "{ndim}-D: no kept block changed rank");
        }
        let d = digest(&world, &data);
        if rank == 0 {
            println!("MOVED {ndim}-D: {moved} kept blocks changed rank, {refined} refined, {merged} merged");
            println!("DIGEST {ndim}-D {d:016x} blocks {}", mesh.forest().len());
        }
    }
    refusals(&world);
}

/// Storage that does not fit the remesh on one rank (the last) fails on every rank rather
/// than leaving the others waiting for its messages; storage of no variables moves without
/// failing.
fn refusals(world: &SimpleCommunicator) {
    let (rank, nranks) = (world.rank() as usize, world.size() as usize);
    let mut mesh = mesh(2, nranks);
    // The last rank's storage: the same blocks (so the same gids), of 8^2 cells where the
    // mesh's have 4^2.
    let mut other = mesh.config().clone();
    other.nx = [32, 32, 1];
    other.block_nx = [8, 8, 1];
    let other = Mesh::new(other, nranks).unwrap();
    let misfit = BlockData::new(
        if rank + 1 == nranks { &other } else { &mesh },
        &fields(),
        rank,
    );
    let empty = BlockData::new(&mesh, &Fields::default(), rank).unwrap();
    let old_forest = mesh.forest().clone();
    let mut flags = vec![RefinementFlag::Same; mesh.forest().len()];
    flags[0] = RefinementFlag::Refine;
    let costs: Vec<f64> = (0..mesh.forest().len()).map(|g| 1.0 + g as f64).collect();
    let out = mesh.remesh(&flags, Some(&costs)).unwrap();
    let got = redistribute(world, &old_forest, &mesh, &out, &misfit.unwrap(), &[]);
    assert!(
        got.is_err(),
        "rank {rank}: storage of another shape was redistributed"
    );
    let moved = redistribute(world, &old_forest, &mesh, &out, &empty, &[]).unwrap();
    assert_eq!(
        moved.gids(),
        &mesh.partition().blocks_of(rank).collect::<Vec<_>>()[..]
    );
}
