//! The multigrid exchange (the five `gmg_*` boundary types) on seeded random AMR meshes
//! (2-D and 3-D, up to 3 levels, periodic and outflow boundaries), on 1, 2, 3 and 4 ranks,
//! coalesced and per channel. Checked on every level of the hierarchy:
//!
//! - a linear field set on the leaves restricts to every coarser level exactly (the volume
//!   average of a linear field is its value at the cell centre, to 1e-12), and a constant
//!   restricts to itself bit for bit;
//! - after `gmg_same`, ghosts covered by a same-level block hold exactly that block's interior
//!   value (each cell holds a code of its level and global index), ghosts across level jumps
//!   hold the linear field to 1e-12 (clear of domain edges and periodic wraps), and a constant
//!   field's ghosts hold the constant everywhere;
//! - prolongation onto each level (its interior poisoned with NaN first) reproduces the
//!   linear field to 1e-12 wherever its stencil reads linear data, and constants everywhere,
//!   for a variable with ghosts (linear operator) and one without (constant operator);
//! - the task functions report errors for levels that do not exist or have no partner level,
//!   and for types given to the wrong task; storage built for another mesh or another rank
//!   is refused (on every rank at once); `set_bounds` before anything arrived reports
//!   `Incomplete`;
//! - warm V-cycle legs allocate nothing on the heap;
//! - all levels end bit-identical on every rank count (the parent compares the digests).

mod common;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use starhalo_boundary::gmg::Placement;
use starhalo_boundary::prolong_restrict::Prolongation;
use starhalo_boundary::{
    BlockData, BoundaryError, BoundaryType, ExchangeOptions, GmgData, GmgExchange, TaskStatus,
};
use starhalo_mesh::config::BoundaryCondition;
use starhalo_mesh::field::{Centering, Fields, Metadata};
use starhalo_mesh::multigrid::GmgLevel;
use starhalo_mesh::{LogicalLocation, Mesh};
use starhalo_sf::mpi::datatype::PartitionMut;
use starhalo_sf::mpi::topology::{Communicator, SimpleCommunicator};
use starhalo_sf::mpi::traits::Root;

#[global_allocator]
static GLOBAL: starhalo_exec::alloc_count::Counting = starhalo_exec::alloc_count::Counting;

const MESHES: u64 = 4;
/// Variable ids and slots: `lin` (slot 0), `code` (slots 1, 2), `flat` (3), all with ghosts;
/// `konst` (4) without.
const LIN: usize = 0;
const FLAT_SLOT: usize = 3;
const KONST: usize = 3;
const KONST_SLOT: usize = 4;
const FLAT: f64 = 1.75;
const KONST_VALUE: f64 = 2.5;

fn main() {
    if std::env::var_os(common::CHILD_ENV).is_some() {
        child();
        return;
    }
    eprintln!("gmg_exchange: multigrid ghost fill, restriction and prolongation");
    let mut same = common::SameDigests::default();
    common::relaunch_checked([1, 2, 3, 4].map(|n| (n, vec![])), 300, |n, out| {
        let text = same.check(n, out, MESHES as usize);
        if n == 4 {
            for l in text.lines().filter(|l| l.starts_with("CHECKED")) {
                eprintln!("  {l}");
            }
        }
    });
}

fn linear(x: [f64; 3]) -> f64 {
    0.5 + 1.25 * x[0] - 0.75 * x[1] + 0.375 * x[2]
}

/// A value that names its cell: multigrid level, global index, component.
fn code(level: usize, g: [i64; 3], comp: usize) -> f64 {
    ((((level as i64 * 128 + g[0]) * 128 + g[1]) * 128 + g[2]) * 2 + comp as i64) as f64
}

fn fields() -> Fields {
    let mut f = Fields::default();
    let cell = || Metadata::new(Centering::Cell).fill_ghost();
    f.add("lin", cell()).unwrap();
    f.add("code", cell().components(2)).unwrap();
    f.add("flat", cell()).unwrap();
    f.add("konst", Metadata::new(Centering::Cell)).unwrap();
    f
}

/// Cell geometry of one block of one level.
struct Geo {
    lo: [f64; 3],
    dx: [f64; 3],
    g: usize,
    n: [usize; 3],
    ndim: usize,
    loc: LogicalLocation,
}

impl Geo {
    fn new(mesh: &Mesh, level: &GmgLevel, gid: usize) -> Self {
        let c = mesh.config();
        let ndim = mesh.ndim();
        let loc = level.forest.leaves()[gid];
        let ext = level.forest.grid().extent(loc.level());
        let n = level.block_nx;
        let mut lo = [0.0; 3];
        let mut dx = [1.0; 3];
        for d in 0..ndim {
            let w = (c.xmax[d] - c.xmin[d]) / ext[d] as f64;
            lo[d] = c.xmin[d] + w * loc.lx_dir(d) as f64;
            dx[d] = w / n[d] as f64;
        }
        Self {
            lo,
            dx,
            g: c.nghost,
            n,
            ndim,
            loc,
        }
    }
    fn ghosts(&self, d: usize) -> usize {
        if d < self.ndim {
            self.g
        } else {
            0
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
        [0, 1, 2].map(|d| self.n[d] + 2 * self.ghosts(d))
    }
    fn interior(&self, p: [usize; 3]) -> bool {
        (0..self.ndim).all(|d| p[d] >= self.g && p[d] < self.g + self.n[d])
    }
    /// Unwrapped global cell index of point `p` at the block's tree level.
    fn global(&self, p: [usize; 3]) -> [i64; 3] {
        [0, 1, 2].map(|d| {
            if d < self.ndim {
                self.loc.lx_dir(d) * self.n[d] as i64 + p[d] as i64 - self.g as i64
            } else {
                0
            }
        })
    }
    /// Whether `x` lies `k` cells inside every domain edge.
    fn clear(&self, mesh: &Mesh, x: [f64; 3], k: f64) -> bool {
        let c = mesh.config();
        (0..self.ndim)
            .all(|d| x[d] > c.xmin[d] + k * self.dx[d] && x[d] < c.xmax[d] - k * self.dx[d])
    }
}

fn points(dims: [usize; 3]) -> impl Iterator<Item = [usize; 3]> {
    (0..dims[2])
        .flat_map(move |k| (0..dims[1]).flat_map(move |j| (0..dims[0]).map(move |i| [i, j, k])))
}

fn at(dims: [usize; 3], p: [usize; 3]) -> usize {
    (p[2] * dims[1] + p[1]) * dims[0] + p[0]
}

fn close(got: f64, want: f64) -> bool {
    (got - want).abs() <= 1e-12 * want.abs().max(1.0)
}

/// Which block of `level` holds global cell `g` of a block at tree level `tl` (wrapped
/// through periodic boundaries): `None` outside the domain, `Some(None)` where finer blocks
/// hold it, `Some(Some((gid, wrapped g)))` otherwise.
fn holder(
    mesh: &Mesh,
    level: &GmgLevel,
    tl: u32,
    g: [i64; 3],
) -> Option<Option<(usize, [i64; 3])>> {
    let grid = level.forest.grid();
    let ext = grid.extent(tl);
    let n = level.block_nx;
    let mut w = g;
    for d in 0..mesh.ndim() {
        let cells = ext[d] * n[d] as i64;
        if grid.periodic()[d] {
            w[d] = g[d].rem_euclid(cells);
        } else if !(0..cells).contains(&g[d]) {
            return None;
        }
    }
    let lx = [0, 1, 2].map(|d| w[d].div_euclid(n[d] as i64));
    let gid = level.forest.covering_leaf(&LogicalLocation::new(tl, lx));
    Some(gid.map(|h| (h, w)))
}

/// Sets `f` on the interior of slot `slot` of every local block of `level`.
fn set(
    mesh: &Mesh,
    level: &GmgLevel,
    data: &mut BlockData,
    slot: usize,
    f: impl Fn(&Geo, [usize; 3]) -> f64,
) {
    for b in 0..data.gids().len() {
        let geo = Geo::new(mesh, level, data.gids()[b]);
        let dims = geo.dims();
        let arr = data.fine_mut(b, slot);
        for p in points(dims).filter(|&p| geo.interior(p)) {
            arr[at(dims, p)] = f(&geo, p);
        }
    }
}

#[derive(Default)]
struct Counts {
    restricted: usize,
    same: usize,
    jump: usize,
    prolonged: usize,
}

fn child() {
    let universe = starhalo_sf::mpi::initialize().unwrap();
    let world = universe.world();
    let rank = world.rank() as usize;
    let nranks = world.size() as usize;
    let f = fields();
    let mut counts = Counts::default();
    for seed in 0..MESHES {
        let mut rng = ChaCha8Rng::seed_from_u64(seed + 200);
        let ndim = if seed.is_multiple_of(2) { 2 } else { 3 };
        let mesh =
            common::amr::random_amr_mesh(&mut rng, ndim, nranks, &[BoundaryCondition::Outflow]);
        let opts = ExchangeOptions {
            coalesced: seed < 2,
            ..ExchangeOptions::default()
        };
        let mut data = GmgData::new(&mesh, &f, rank).unwrap();
        let mut gx = GmgExchange::new(&world, &mesh, &data, opts).unwrap();
        let mg = data.multigrid().clone();
        let levels = mg.levels();
        assert_eq!(gx.levels(), levels.len());
        assert!(levels.len() >= 3, "seed {seed}: {} levels", levels.len());
        errors(&world, &mesh, &f, &mut gx, &mut data, seed);

        // The leaves: a linear field, codes, two constants; through the leaf storage.
        let mut leaves = BlockData::new(&mesh, &f, rank).unwrap();
        set(&mesh, &levels[0], &mut leaves, 0, |g, p| {
            linear(g.center(p))
        });
        set(&mesh, &levels[0], &mut leaves, FLAT_SLOT, |_, _| FLAT);
        set(&mesh, &levels[0], &mut leaves, KONST_SLOT, |_, _| {
            KONST_VALUE
        });
        data.load_leaves(&leaves).unwrap();

        // Down: every coarser level holds the linear field at its centres.
        gx.restrict_down(&mut data).unwrap();
        for (li, level) in levels.iter().enumerate().skip(1) {
            let d = data.level(li).unwrap();
            for b in 0..d.gids().len() {
                let geo = Geo::new(&mesh, level, d.gids()[b]);
                let dims = geo.dims();
                for p in points(dims).filter(|&p| geo.interior(p)) {
                    let (got, want) = (d.fine(b, 0)[at(dims, p)], linear(geo.center(p)));
                    assert!(
                        close(got, want),
                        "seed {seed} level {li} block {}: {got} vs {want}",
                        d.gids()[b]
                    );
                    assert_eq!(d.fine(b, FLAT_SLOT)[at(dims, p)], FLAT);
                    assert_eq!(d.fine(b, KONST_SLOT)[at(dims, p)], KONST_VALUE);
                    counts.restricted += 1;
                }
            }
        }

        // Same level: codes in every interior, then each level's ghost fill, as tasks.
        for (li, level) in levels.iter().enumerate() {
            let d = data.level_mut(li).unwrap();
            for comp in 0..2 {
                set(&mesh, level, d, 1 + comp, |g, p| {
                    code(li, g.global(p), comp)
                });
            }
            let t = BoundaryType::GmgSame;
            gx.start_receive(li, t).unwrap();
            while gx.send(li, t, &mut data).unwrap() == TaskStatus::Incomplete {}
            while gx.receive(li, t).unwrap() == TaskStatus::Incomplete {}
            assert_eq!(
                gx.set_bounds(li, t, &mut data).unwrap(),
                TaskStatus::Complete
            );
            check_ghosts(&mesh, level, li, data.level(li).unwrap(), seed, &mut counts);
        }

        // Up, one level at a time: each level poisoned, then prolongated from the restricted
        // level above it.
        for li in (0..levels.len() - 1).rev() {
            let d = data.level_mut(li).unwrap();
            for s in [0, FLAT_SLOT, KONST_SLOT] {
                set(&mesh, &levels[li], d, s, |_, _| f64::NAN);
            }
            gx.fill(li + 1, &mut data).unwrap();
            gx.prolongate(li, &mut data).unwrap();
            check_prolonged(
                &mesh,
                levels,
                li,
                data.level(li).unwrap(),
                seed,
                &mut counts,
            );
            // Restore the restricted values for the next level down.
            if li > 0 {
                gx.restrict(li - 1, &mut data).unwrap();
            }
        }
        // A whole V-cycle leg up; then both legs again, warm: no heap allocation.
        gx.prolongate_up(&mut data).unwrap();
        let (a0, t0) = (
            starhalo_exec::alloc_count::allocations(),
            std::time::Instant::now(),
        );
        gx.restrict_down(&mut data).unwrap();
        gx.prolongate_up(&mut data).unwrap();
        let (allocs, legs) = (starhalo_exec::alloc_count::allocations() - a0, t0.elapsed());
        assert_eq!(
            allocs, 0,
            "seed {seed}: warm V-cycle legs allocated {allocs} times"
        );
        for li in 0..levels.len() {
            let d = data.level(li).unwrap();
            for b in 0..d.gids().len() {
                // Interiors and every ghost: neighbours, level jumps and physical boundaries.
                assert!(
                    d.fine(b, FLAT_SLOT).iter().all(|&x| x == FLAT),
                    "seed {seed} level {li}"
                );
            }
        }
        let mut text = String::new();
        for (li, level) in levels.iter().enumerate() {
            let h = global_digest(&world, level, data.level(li).unwrap());
            text.push_str(&format!(" {h:016x}"));
        }
        let t = gx.traffic();
        if rank == 0 {
            println!("DIGEST {seed}{text}");
            println!(
                "CHECKED seed {seed} ({ndim}-D, {} levels): rank 0 sent {} messages, {} bytes; \
                 warm restrict_down + prolongate_up {:.2} ms on rank 0",
                levels.len(),
                t.messages,
                t.bytes,
                legs.as_secs_f64() * 1e3
            );
        }
    }
    // Every kind of check found cells to check (summed over ranks).
    let mine = [
        counts.restricted,
        counts.same,
        counts.jump,
        counts.prolonged,
    ]
    .map(|x| x as u64);
    let mut total = [0u64; 4];
    use starhalo_sf::mpi::collective::SystemOperation;
    use starhalo_sf::mpi::traits::CommunicatorCollectives;
    world.all_reduce_into(&mine[..], &mut total[..], SystemOperation::sum());
    assert!(total.iter().all(|&x| x > 0), "nothing checked: {total:?}");
    if rank == 0 {
        println!(
            "CHECKED cells: {} restricted, {} same-level ghosts, {} level-jump ghosts, \
             {} prolongated",
            total[0], total[1], total[2], total[3]
        );
    }
}

/// Ghosts of one level after `gmg_same`.
fn check_ghosts(
    mesh: &Mesh,
    level: &GmgLevel,
    li: usize,
    d: &BlockData,
    seed: u64,
    n: &mut Counts,
) {
    for b in 0..d.gids().len() {
        let gid = d.gids()[b];
        let geo = Geo::new(mesh, level, gid);
        let dims = geo.dims();
        for p in points(dims).filter(|&p| !geo.interior(p)) {
            let Some(h) = holder(mesh, level, geo.loc.level(), geo.global(p)) else {
                // Beyond a physical boundary: outflow copies, so constants hold.
                assert_eq!(d.fine(b, FLAT_SLOT)[at(dims, p)], FLAT);
                continue;
            };
            assert_eq!(
                d.fine(b, FLAT_SLOT)[at(dims, p)],
                FLAT,
                "seed {seed} level {li} block {gid} {p:?}"
            );
            match h {
                Some((other, w)) if level.forest.leaves()[other].level() == geo.loc.level() => {
                    for comp in 0..2 {
                        assert_eq!(
                            d.fine(b, 1 + comp)[at(dims, p)],
                            code(li, w, comp),
                            "seed {seed} level {li}: ghost {p:?} of block {gid} from block {other}"
                        );
                    }
                    n.same += 1;
                }
                _ => {
                    let x = geo.center(p);
                    if geo.clear(mesh, x, 8.0) {
                        let got = d.fine(b, 0)[at(dims, p)];
                        assert!(
                            close(got, linear(x)),
                            "seed {seed} level {li}: level-jump ghost {p:?} of block {gid}: \
                             {got} vs {}",
                            linear(x)
                        );
                        n.jump += 1;
                    }
                }
            }
        }
    }
}

/// Interiors of level `li` after prolongation from `li + 1`.
fn check_prolonged(
    mesh: &Mesh,
    levels: &[GmgLevel],
    li: usize,
    d: &BlockData,
    seed: u64,
    n: &mut Counts,
) {
    let (level, up) = (&levels[li], &levels[li + 1]);
    let ndim = mesh.ndim();
    for b in 0..d.gids().len() {
        let gid = d.gids()[b];
        let geo = Geo::new(mesh, level, gid);
        let dims = geo.dims();
        let c = level.coarser[gid].unwrap();
        let pl = Placement::new(
            &geo.loc,
            level.block_nx,
            &up.forest.leaves()[c],
            up.block_nx,
            ndim,
        )
        .unwrap();
        for p in points(dims).filter(|&p| geo.interior(p)) {
            let i = at(dims, p);
            assert_eq!(
                d.fine(b, FLAT_SLOT)[i],
                FLAT,
                "seed {seed} level {li} block {gid}"
            );
            assert_eq!(d.fine(b, KONST_SLOT)[i], KONST_VALUE);
            // The coarse cell and its two neighbours per direction lie inside the coarse
            // block (restricted values), or everything the ghosts were made of lies clear of
            // the domain edges.
            let inside = pl.ratio == 1
                || (0..ndim).all(|dd| {
                    let cc = pl.offset[dd] + (p[dd] - geo.g) / 2;
                    cc >= 1 && cc + 1 < up.block_nx[dd]
                });
            let x = geo.center(p);
            if inside || geo.clear(mesh, x, 16.0) {
                let got = d.fine(b, 0)[i];
                assert!(
                    close(got, linear(x)),
                    "seed {seed} level {li} block {gid} {p:?}: prolongated {got} vs {}",
                    linear(x)
                );
                n.prolonged += 1;
            }
        }
    }
}

/// Error cases: none of them may leave a message in flight or hang a peer.
fn errors(
    world: &SimpleCommunicator,
    mesh: &Mesh,
    f: &Fields,
    gx: &mut GmgExchange,
    data: &mut GmgData,
    seed: u64,
) {
    let n = gx.levels();
    let level_err = |r: Result<TaskStatus, BoundaryError>, level: usize| {
        assert!(
            matches!(
                r,
                Err(BoundaryError::GmgLevel { level: l, levels, .. }) if (l, levels) == (level, n)
            ),
            "seed {seed}: {r:?}"
        );
    };
    level_err(gx.send(n, BoundaryType::GmgSame, data), n);
    level_err(gx.start_receive(n + 3, BoundaryType::GmgSame), n + 3);
    level_err(gx.send(n - 1, BoundaryType::GmgRestrictSend, data), n - 1);
    level_err(gx.receive(0, BoundaryType::GmgRestrictRecv), 0);
    level_err(gx.send(0, BoundaryType::GmgProlongateSend, data), 0);
    level_err(
        gx.set_bounds(n - 1, BoundaryType::GmgProlongateRecv, data),
        n - 1,
    );
    assert!(matches!(
        gx.start_receive(1, BoundaryType::GmgRestrictSend),
        Err(BoundaryError::Unsupported("gmg_restrict_send"))
    ));
    assert!(matches!(
        gx.send(0, BoundaryType::Any, data),
        Err(BoundaryError::Unsupported("any"))
    ));
    assert!(data.level(n).is_err());
    // Nothing sent yet: nothing to set.
    assert_eq!(
        gx.set_bounds(1, BoundaryType::GmgRestrictRecv, data)
            .unwrap(),
        TaskStatus::Incomplete
    );
    // `konst` has no ghosts to read slopes from; there is no variable 9.
    assert!(gx.set_prolongation(KONST, Prolongation::Linear).is_err());
    assert!(gx.set_prolongation(9, Prolongation::Constant).is_err());
    gx.set_prolongation(LIN, Prolongation::Linear).unwrap();
    // Storage of a refined mesh offered with the unrefined one: refused.
    let nranks = world.size() as usize;
    let unrefined = Mesh::new(mesh.config().clone(), nranks).unwrap();
    let r = GmgExchange::new(world, &unrefined, data, ExchangeOptions::default());
    assert!(
        matches!(r, Err(BoundaryError::Mismatch(_))),
        "seed {seed}: storage accepted for another mesh"
    );
    // Storage of another rank (on rank 0 only): every rank refuses together.
    if nranks > 1 {
        let rank = world.rank() as usize;
        let owner = if rank == 0 { 1 } else { rank };
        let other = GmgData::new(mesh, f, owner).unwrap();
        let r = GmgExchange::new(world, mesh, &other, ExchangeOptions::default());
        assert!(
            matches!(r, Err(BoundaryError::Mismatch(_))),
            "seed {seed}: rank {rank} accepted mismatched storage"
        );
    }
}

/// FNV-1a over `words`.
fn fnv(words: impl IntoIterator<Item = u64>) -> u64 {
    words.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, x| {
        (h ^ x).wrapping_mul(0x100_0000_01b3)
    })
}

/// The hash, on rank 0, of every block's (gid, values) hash in gid order.
fn global_digest(world: &SimpleCommunicator, level: &GmgLevel, d: &BlockData) -> u64 {
    let nslot = d.slot_defaults().len();
    let mine: Vec<u64> = (0..d.gids().len())
        .map(|b| {
            let bits = (0..nslot).flat_map(|s| d.fine(b, s).iter().map(|x| x.to_bits()));
            fnv(std::iter::once(d.gids()[b] as u64).chain(bits))
        })
        .collect();
    let root = world.process_at_rank(0);
    if world.rank() != 0 {
        root.gather_varcount_into(&mine[..]);
        return 0;
    }
    // Each rank's blocks of a level are consecutive in gid order.
    let size = world.size() as usize;
    let counts: Vec<i32> = (0..size)
        .map(|r| level.ranks.iter().filter(|&&x| x == r).count() as i32)
        .collect();
    let displs: Vec<i32> = counts
        .iter()
        .scan(0, |at, &c| {
            let s = *at;
            *at += c;
            Some(s)
        })
        .collect();
    assert!(level.ranks.windows(2).all(|w| w[0] <= w[1]));
    let mut all = vec![0u64; level.ranks.len()];
    let mut part = PartitionMut::new(&mut all[..], counts, displs);
    root.gather_varcount_into_root(&mine[..], &mut part);
    fnv(all)
}
