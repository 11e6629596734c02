//! The ghost exchange over MPI on seeded random AMR meshes (2-D and 3-D, up to 3 levels,
//! periodic and outflow boundaries, a sparse variable allocated at random; the last mesh one
//! periodic root block tall, each root its own neighbour), on 1, 2, 3, 4
//! and 8 ranks, coalesced and per channel, in every posting order, as `any` and as `local`
//! then `nonlocal`. Checked:
//!
//! - same-level ghosts hold exactly the neighbour's interior value (each cell holds a code of
//!   its global index, so any misplaced value is caught);
//! - ghosts from a finer neighbour are the mean of the codes of the cells they cover;
//! - ghosts of a linear field are exact to 1e-12 through restriction and prolongation,
//!   wherever their stencils stay clear of the domain edges and periodic wraps;
//! - a sparse receiver of real data becomes allocated, one of null messages only does not,
//!   and null channels fill the default;
//! - no two channels' receive boxes share a cell of one array;
//! - every mode gives bit-identical blocks, equal to the reference path (a plain star-forest
//!   bcast over the same cells), and the digest printed per mesh is the same on every rank
//!   count (the parent process compares them);
//! - a set-up that fails on one rank fails on every rank.

mod common;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use starhalo_boundary::bnd_info::{recv_box, send_box, Space};
use starhalo_boundary::channel::RankChannels;
use starhalo_boundary::{
    BlockData, BoundaryError, BoundaryType, Exchange, ExchangeOptions, Ordering,
};
use starhalo_exec::Policy;
use starhalo_mesh::config::BoundaryCondition;
use starhalo_mesh::config::RefinementKind;
use starhalo_mesh::field::{Centering, Fields, Metadata, SparseThresholds};
use starhalo_mesh::{Mesh, MeshConfig, RefinementFlag};
use starhalo_sf::mpi::collective::SystemOperation;
use starhalo_sf::mpi::datatype::PartitionMut;
use starhalo_sf::mpi::topology::{Communicator, SimpleCommunicator};
use starhalo_sf::mpi::traits::{CommunicatorCollectives, Root};
use starhalo_sf::{Graph, Op, RootRef, SfOptions, StarForest};
use std::collections::BTreeMap;

const MESHES: u64 = 7;
const LIN: usize = 0;
const CODE: usize = 1;
const SPARSE: usize = 2;

fn main() {
    if std::env::var_os(common::CHILD_ENV).is_some() {
        child();
        return;
    }
    eprintln!("exchange_random: ghost fill on random AMR meshes, all modes");
    let mut same = common::SameDigests::default();
    common::relaunch_checked([1, 2, 3, 4, 8].map(|n| (n, vec![])), 300, |n, out| {
        same.check(n, out, MESHES as usize);
    });
}

/// The linear field.
fn linear(x: [f64; 3]) -> f64 {
    0.5 + 1.25 * x[0] - 0.75 * x[1] + 0.375 * x[2]
}

/// A value that names its cell: level, global index (wrapped), component.
fn code(level: u32, g: [i64; 3], comp: usize) -> f64 {
    ((((level as i64 * 64 + g[0]) * 64 + g[1]) * 64 + g[2]) * 2 + comp as i64) as f64
}

/// Whether gid's sparse variable is allocated, and whether its values are above threshold.
fn sparse_state(seed: u64, gid: usize) -> (bool, bool) {
    let mut r = ChaCha8Rng::seed_from_u64(seed * 1000 + gid as u64);
    (r.gen_bool(0.6), r.gen_bool(0.8))
}

fn random_mesh(seed: u64, nranks: usize) -> Mesh {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    if seed == MESHES - 1 {
        return thin_mesh(&mut rng, nranks);
    }
    let ndim = if seed.is_multiple_of(2) { 2 } else { 3 };
    common::amr::random_amr_mesh(&mut rng, ndim, nranks, &[BoundaryCondition::Outflow])
}

/// A periodic 2-D mesh one root block tall (32x4 cells in 4x4 blocks), some blocks refined:
/// each root block is its own neighbour across its y faces, and two children of one root are
/// each other's on both sides.
fn thin_mesh(rng: &mut ChaCha8Rng, nranks: usize) -> Mesh {
    let mut c = MeshConfig::new([32, 4, 1], [4, 4, 1]);
    c.bc[0] = [BoundaryCondition::Periodic; 2];
    c.bc[1] = [BoundaryCondition::Periodic; 2];
    c.refinement = RefinementKind::Adaptive;
    c.numlevel = 2;
    c.validate().unwrap();
    let mut mesh = Mesh::new(c, nranks).unwrap();
    let flags: Vec<RefinementFlag> = (0..mesh.forest().len())
        .map(|_| match rng.gen_bool(0.4) {
            true => RefinementFlag::Refine,
            false => RefinementFlag::Same,
        })
        .collect();
    mesh.remesh(&flags, None).unwrap();
    mesh
}

fn fields() -> Fields {
    let mut f = Fields::default();
    let cell = || Metadata::new(Centering::Cell).fill_ghost();
    f.add("lin", cell()).unwrap();
    f.add("code", cell().components(2)).unwrap();
    f.add("sparse", cell().sparse(SparseThresholds::default()))
        .unwrap();
    f
}

/// Cell geometry of local block `b`.
struct Geo {
    lo: [f64; 3],
    dx: [f64; 3],
    g: usize,
    n: [usize; 3],
    ndim: usize,
}

impl Geo {
    fn new(mesh: &Mesh, gid: usize) -> Self {
        let (lo, hi) = mesh.bounds(gid).unwrap();
        let c = mesh.config();
        let ndim = mesh.ndim();
        let n = c.block_nx;
        let dx = [0, 1, 2].map(|d| {
            if d < ndim {
                (hi[d] - lo[d]) / n[d] as f64
            } else {
                1.0
            }
        });
        Self {
            lo,
            dx,
            g: c.nghost,
            n,
            ndim,
        }
    }
    fn center(&self, p: [usize; 3]) -> [f64; 3] {
        [0, 1, 2].map(|d| {
            if d < self.ndim {
                self.lo[d] + (p[d] as f64 - self.g as f64 + 0.5) * self.dx[d]
            } else {
                0.0
            }
        })
    }
    fn dims(&self) -> [usize; 3] {
        [0, 1, 2].map(|d| {
            if d < self.ndim {
                self.n[d] + 2 * self.g
            } else {
                1
            }
        })
    }
    fn interior(&self, p: [usize; 3]) -> bool {
        (0..self.ndim).all(|d| p[d] >= self.g && p[d] < self.g + self.n[d])
    }
}

fn points(dims: [usize; 3]) -> impl Iterator<Item = [usize; 3]> {
    (0..dims[2])
        .flat_map(move |k| (0..dims[1]).flat_map(move |j| (0..dims[0]).map(move |i| [i, j, k])))
}

fn at(dims: [usize; 3], p: [usize; 3]) -> usize {
    (p[2] * dims[1] + p[1]) * dims[0] + p[0]
}

/// Global index (at the block's level) of point `p` of block `gid`, wrapped on periodic axes.
fn global(mesh: &Mesh, gid: usize, p: [usize; 3]) -> (u32, [i64; 3]) {
    let loc = mesh.forest().loc(gid).unwrap();
    let c = mesh.config();
    let ext = mesh.forest().grid().extent(loc.level());
    let mut g = [0i64; 3];
    for d in 0..mesh.ndim() {
        let n = c.block_nx[d] as i64;
        let x = loc.lx_dir(d) * n + p[d] as i64 - c.nghost as i64;
        g[d] = if c.periodic()[d] {
            x.rem_euclid(ext[d] * n)
        } else {
            x
        };
    }
    (loc.level(), g)
}

fn initial(mesh: &Mesh, f: &Fields, rank: usize, seed: u64) -> BlockData {
    let mut data = BlockData::new(mesh, f, rank).unwrap();
    let gids = data.gids().to_vec();
    for (b, &gid) in gids.iter().enumerate() {
        let geo = Geo::new(mesh, gid);
        let dims = geo.dims();
        let (on, big) = sparse_state(seed, gid);
        data.set_allocated(b, SPARSE, on);
        for p in points(dims).filter(|&p| geo.interior(p)) {
            let (lvl, g) = global(mesh, gid, p);
            data.fine_mut(b, 0)[at(dims, p)] = linear(geo.center(p));
            data.fine_mut(b, 1)[at(dims, p)] = code(lvl, g, 0);
            data.fine_mut(b, 2)[at(dims, p)] = code(lvl, g, 1);
            if on {
                // Small blocks sit exactly at the threshold, which is not above it.
                let small = -SparseThresholds::default().allocation;
                data.fine_mut(b, 3)[at(dims, p)] = if big { 1.0 + code(lvl, g, 0) } else { small };
            }
        }
    }
    data
}

/// FNV-1a over `words`.
fn fnv(words: impl IntoIterator<Item = u64>) -> u64 {
    words.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, x| {
        (h ^ x).wrapping_mul(0x100_0000_01b3)
    })
}

/// One hash per local block: its gid, allocation flags and every value's bits.
fn block_digests(data: &BlockData) -> Vec<u64> {
    let n = data.layout().fine.block_len();
    let values = data.fine_values();
    (0..data.gids().len())
        .map(|b| {
            let flags = (0..data.vars().len()).map(|v| u64::from(data.is_allocated(b, v)));
            let bits = values[b * n..(b + 1) * n].iter().map(|x| x.to_bits());
            fnv(std::iter::once(data.gids()[b] as u64)
                .chain(flags)
                .chain(bits))
        })
        .collect()
}

fn digest(data: &BlockData) -> u64 {
    fnv(block_digests(data))
}

/// The hash of every block's hash in gid order, on rank 0: independent of the partition.
fn global_digest(world: &SimpleCommunicator, mesh: &Mesh, data: &BlockData) -> u64 {
    let mine = block_digests(data);
    let root = world.process_at_rank(0);
    if world.rank() == 0 {
        let p = mesh.partition();
        let counts: Vec<i32> = (0..world.size() as usize)
            .map(|r| p.blocks_of(r).len() as i32)
            .collect();
        let displs: Vec<i32> = (0..world.size() as usize)
            .map(|r| p.blocks_of(r).start as i32)
            .collect();
        let mut all = vec![0u64; mesh.forest().len()];
        let mut part = PartitionMut::new(&mut all[..], counts, displs);
        root.gather_varcount_into_root(&mine[..], &mut part);
        fnv(all)
    } else {
        root.gather_varcount_into(&mine[..]);
        0
    }
}

/// The reference path: restrict every interior into its coarse buffer, bcast every dense
/// channel's cells over a star forest built from the same boxes, then the same post-unpack
/// work. Sparse slots are left as they are.
fn reference(
    world: &SimpleCommunicator,
    mesh: &Mesh,
    f: &Fields,
    data: &mut BlockData,
    ex: &mut Exchange,
) {
    let rank = world.rank() as usize;
    let shape = *data.shape();
    let layout = data.layout();
    if let Some(cs) = data.coarse_shape().copied() {
        let interior = starhalo_boundary::bounds::coarse_interior(&cs);
        for b in 0..data.gids().len() {
            for s in 0..3 {
                let (fi, co) = data.fine_and_coarse_mut(b, s);
                starhalo_boundary::prolong_restrict::restrict(&shape, fi, co, &interior).unwrap();
            }
        }
    }
    let nb = mesh.neighbors().unwrap();
    let rc = RankChannels::new(&nb, &[LIN, CODE], rank);
    let index = |block: usize, slot: usize, space: Space, p: [usize; 3]| {
        let l = if space == Space::Coarse {
            layout.coarse.unwrap()
        } else {
            layout.fine
        };
        let base = if space == Space::Coarse {
            layout.coarse_start()
        } else {
            0
        };
        block * layout.block_len() + base + l.index_in_block(slot, p)
    };
    let mut edges: BTreeMap<usize, RootRef> = BTreeMap::new();
    for c in &rc.recv {
        let (rb, rs) = recv_box(c, &shape).unwrap();
        let (sb, ss) = send_box(c, &shape).unwrap();
        let rblock = data.local(c.key.receiver).unwrap();
        let sblock = c.key.sender - mesh.partition().blocks_of(c.sender_rank).start;
        for slot in data.vars()[c.key.var].slots.clone() {
            for (pr, ps) in rb.points().zip(sb.points()) {
                edges.entry(index(rblock, slot, rs, pr)).or_insert(RootRef {
                    rank: c.sender_rank as i64,
                    offset: index(sblock, slot, ss, ps) as u64,
                });
            }
        }
    }
    let graph = Graph {
        nroots: data.data().len(),
        ilocal: Some(edges.keys().copied().collect()),
        iremote: edges.values().copied().collect(),
    };
    let sf = StarForest::new(world, &graph, SfOptions::default()).unwrap();
    let roots = data.data().to_vec();
    sf.bcast(&roots, data.data_mut(), Op::Replace).unwrap();
    drop(sf);
    let _ = f;
    for p in 0..ex.partitions() {
        ex.finish(p, data).unwrap();
    }
}

/// A set-up that fails on rank 0 only (storage of rank 1's blocks) fails on every rank, in
/// both modes, instead of leaving the others waiting for rank 0's messages.
fn one_rank_fails(world: &SimpleCommunicator) {
    let (rank, nranks) = (world.rank() as usize, world.size() as usize);
    if nranks == 1 {
        return;
    }
    let mesh = random_mesh(0, nranks);
    let data = BlockData::new(&mesh, &fields(), rank.max(1)).unwrap();
    for coalesced in [true, false] {
        let opts = ExchangeOptions {
            coalesced,
            ordering: Ordering::Natural,
            policy: Policy::Serial,
            split: true,
        };
        let err = Exchange::new(world, &mesh, &data, opts).err();
        let err = err.map(|e| e.to_string()).unwrap_or_default();
        let want = if rank == 0 {
            "not on rank 0"
        } else {
            "another rank"
        };
        assert!(err.contains(want), "rank {rank}: {err:?}");
    }
}

fn child() {
    let universe = starhalo_sf::mpi::initialize().unwrap();
    let world = universe.world();
    let rank = world.rank() as usize;
    let nranks = world.size() as usize;
    let f = fields();
    one_rank_fails(&world);
    let mut compared = [0u64; 3];
    for seed in 0..MESHES {
        let mesh = random_mesh(seed, nranks);
        let mut results = Vec::new();
        let mut orderings = vec![
            Ordering::Natural,
            Ordering::Random(seed + 7),
            Ordering::ByReceiver,
        ];
        if seed % 2 == 1 {
            orderings.truncate(2);
        }
        for coalesced in [true, false] {
            for &ordering in &orderings {
                for types in [
                    &[BoundaryType::Any][..],
                    &[BoundaryType::Local, BoundaryType::Nonlocal],
                ] {
                    let policy = if ordering == Ordering::ByReceiver {
                        Policy::Threaded
                    } else {
                        Policy::Serial
                    };
                    // `any` alone is run on an exchange built for it alone half the time.
                    let split = types.len() > 1 || seed % 2 == 0;
                    let opts = ExchangeOptions {
                        coalesced,
                        ordering,
                        policy,
                        split,
                    };
                    let mut data = initial(&mesh, &f, rank, seed);
                    let mut ex = Exchange::new(&world, &mesh, &data, opts).unwrap();
                    if !split {
                        // Asking for a type it was not built for is an error, not a no-op.
                        let e = ex.fill_ghosts_as(&[BoundaryType::Local], &mut data);
                        assert!(
                            matches!(e, Err(BoundaryError::Unsupported("local"))),
                            "{e:?}"
                        );
                    }
                    // Twice: the second exchange runs on warm routes and must agree.
                    ex.fill_ghosts_as(types, &mut data).unwrap();
                    let once = digest(&data);
                    ex.fill_ghosts_as(types, &mut data).unwrap();
                    assert_eq!(
                        once,
                        digest(&data),
                        "seed {seed}: second exchange differs in {opts:?} {types:?}"
                    );
                    results.push((format!("{opts:?} {types:?}"), data));
                }
            }
        }
        let (_, first) = &results[0];
        for (total, n) in compared.iter_mut().zip(check(&mesh, first, seed)) {
            *total += n as u64;
        }
        for (name, d) in &results[1..] {
            assert!(
                d.data() == first.data(),
                "seed {seed}: mode {name} differs from {}",
                results[0].0
            );
        }
        // Reference path: dense slots equal, bit for bit.
        let mut refd = initial(&mesh, &f, rank, seed);
        let mut ex = Exchange::new(&world, &mesh, &refd, ExchangeOptions::default()).unwrap();
        reference(&world, &mesh, &f, &mut refd, &mut ex);
        for b in 0..refd.gids().len() {
            for s in 0..3 {
                assert!(
                    refd.fine(b, s) == first.fine(b, s),
                    "seed {seed}: reference differs on block {} slot {s}",
                    refd.gids()[b]
                );
            }
        }
        let d = global_digest(&world, &mesh, first);
        if rank == 0 {
            println!("DIGEST {seed} {d:016x}");
        }
    }
    // The value checks compared something: same-level and across-level ghosts, somewhere.
    let mut total = [0u64; 3];
    world.all_reduce_into(&compared[..], &mut total[..], SystemOperation::sum());
    assert!(
        total.iter().all(|&n| n > 0),
        "ghosts compared (same level, restricted, linear across levels): {total:?}"
    );
}

/// Checks the values of one filled state on this rank's blocks; returns how many same-level
/// code ghosts, restricted code ghosts and linear ghosts across levels it compared.
fn check(mesh: &Mesh, data: &BlockData, seed: u64) -> [usize; 3] {
    let rank = data
        .gids()
        .first()
        .and_then(|&g| mesh.partition().rank_of(g))
        .unwrap_or(0);
    let shape = *data.shape();
    let nb = mesh.neighbors().unwrap();
    let rc = RankChannels::new(&nb, &[LIN, CODE, SPARSE], rank);
    let c = mesh.config();
    let (mut same, mut multi, mut restricted) = (0usize, 0usize, 0usize);
    // A sparse variable is allocated after the fill where it was before, or where some
    // sender sent data (allocated and above threshold); null messages allocate nothing.
    let mut allocated: Vec<bool> = (data.gids().iter())
        .map(|&g| sparse_state(seed, g).0)
        .collect();
    for ch in rc.recv.iter().filter(|ch| ch.key.var == SPARSE) {
        let (on, big) = sparse_state(seed, ch.key.sender);
        allocated[data.local(ch.key.receiver).unwrap()] |= on && big;
    }
    for (b, &want) in allocated.iter().enumerate() {
        assert_eq!(
            data.is_allocated(b, SPARSE),
            want,
            "seed {seed}: block {} sparse allocation",
            data.gids()[b]
        );
    }
    for ch in &rc.recv {
        let b = data.local(ch.key.receiver).unwrap();
        let gid = ch.key.receiver;
        let geo = Geo::new(mesh, gid);
        let dims = geo.dims();
        let (rb, rs) = recv_box(ch, &shape).unwrap();
        if ch.key.var == CODE && ch.level_diff == 0 {
            for p in rb.points() {
                let (lvl, g) = global(mesh, gid, p);
                for comp in 0..2 {
                    assert_eq!(
                        data.fine(b, 1 + comp)[at(dims, p)],
                        code(lvl, g, comp),
                        "seed {seed} {ch:?} {p:?}"
                    );
                }
                same += 1;
            }
        }
        if ch.key.var == CODE && ch.level_diff == -1 && rs == Space::Block {
            // From a finer sender, restricted: each ghost is the mean of the codes of the
            // 2^ndim cells it covers one level up (global indices, so nothing else matches).
            let kids = 1usize << geo.ndim;
            for p in rb.points() {
                let (lvl, g) = global(mesh, gid, p);
                for comp in 0..2 {
                    let sum: f64 = (0..kids)
                        .map(|k| {
                            let child: [i64; 3] = std::array::from_fn(|d| match d < geo.ndim {
                                true => 2 * g[d] + ((k >> d) & 1) as i64,
                                false => g[d],
                            });
                            code(lvl + 1, child, comp)
                        })
                        .sum();
                    let want = sum / kids as f64;
                    let got = data.fine(b, 1 + comp)[at(dims, p)];
                    assert!(
                        (got - want).abs() <= 1e-9 * want.abs(),
                        "seed {seed}: restricted ghost {p:?} of block {gid} ({ch:?}): {got} vs {want}"
                    );
                }
                restricted += 1;
            }
        }
        if ch.key.var == SPARSE {
            let (on, big) = sparse_state(seed, ch.key.sender);
            if on && big {
                assert!(
                    data.is_allocated(b, SPARSE),
                    "seed {seed}: block {gid} received data but is unallocated"
                );
            }
            if ch.level_diff == 0 && data.is_allocated(b, SPARSE) {
                for p in rb.points() {
                    let (lvl, g) = global(mesh, gid, p);
                    let want = if on && big {
                        1.0 + code(lvl, g, 0)
                    } else {
                        0.0
                    };
                    assert_eq!(
                        data.fine(b, 3)[at(dims, p)],
                        want,
                        "seed {seed} sparse {ch:?} {p:?}"
                    );
                }
            }
        }
        if ch.key.var == LIN && ch.level_diff != 0 {
            // The fine ghosts this channel fills (the coarse-buffer box maps to its children).
            let fine_pts: Vec<[usize; 3]> = if rs == Space::Coarse {
                let cg = shape.nghost() / 2 + 1;
                let g = shape.nghost();
                rb.points()
                    .flat_map(|q| {
                        let mut out = Vec::new();
                        for k in 0..if geo.ndim == 3 { 2 } else { 1 } {
                            for j in 0..2 {
                                for i in 0..2 {
                                    let o = [i, j, k];
                                    let f: Vec<i64> = (0..3)
                                        .map(|d| {
                                            if d < geo.ndim {
                                                g as i64
                                                    + 2 * (q[d] as i64 - cg as i64)
                                                    + o[d] as i64
                                            } else {
                                                0
                                            }
                                        })
                                        .collect();
                                    if (0..3).all(|d| f[d] >= 0 && (f[d] as usize) < dims[d]) {
                                        out.push([f[0] as usize, f[1] as usize, f[2] as usize]);
                                    }
                                }
                            }
                        }
                        out
                    })
                    .filter(|&p| !geo.interior(p))
                    .collect()
            } else {
                rb.points().collect()
            };
            for p in fine_pts {
                let x = geo.center(p);
                // Clear of the domain edges by three coarse cells: no wrap, no boundary fill.
                let clear = (0..geo.ndim).all(|d| {
                    let w = 6.0 * geo.dx[d].max(2.0 * geo.dx[d] * 0.5);
                    x[d] > c.xmin[d] + w && x[d] < c.xmax[d] - w
                });
                if !clear {
                    continue;
                }
                let got = data.fine(b, 0)[at(dims, p)];
                let want = linear(x);
                assert!(
                    (got - want).abs() <= 1e-12 * want.abs().max(1.0),
                    "seed {seed}: linear ghost {p:?} of block {gid} ({ch:?}): {got} vs {want}"
                );
                multi += 1;
            }
        }
    }

    // No two channels write the same cell of one array: the GPU unpacks every box at once,
    // in no set order, and a null channel's default would race another's data.
    let mut boxes: Vec<_> = rc
        .recv
        .iter()
        .map(|ch| {
            (
                ch.key.receiver,
                ch.key.var,
                recv_box(ch, &shape).unwrap(),
                ch,
            )
        })
        .collect();
    boxes.sort_by_key(|&(gid, var, (_, space), _)| (gid, var, space as u8));
    for run in boxes.chunk_by(|a, b| (a.0, a.1, a.2 .1 as u8) == (b.0, b.1, b.2 .1 as u8)) {
        for (i, (_, _, (a, _), ca)) in run.iter().enumerate() {
            for (_, _, (b, _), cb) in &run[..i] {
                let meet = (0..3).all(|d| a.0[d].s.max(b.0[d].s) <= a.0[d].e.min(b.0[d].e));
                assert!(!meet, "seed {seed}: receive boxes overlap: {ca:?} {cb:?}");
            }
        }
    }
    [same, restricted, multi]
}
