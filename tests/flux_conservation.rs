//! Flux correction keeps a conservative AMR update conservative, on seeded random AMR meshes
//! (2-D and 3-D, up to 3 levels, periodic everywhere) on 1, 2, 3, 4 and 8 ranks (8: the
//! first two meshes only).
//!
//! Two conserved variables (one scalar, one with two components) start from random positive
//! values and are advected by first-order upwind fluxes with a fixed velocity: each step fills
//! the ghosts, computes the face fluxes from the cell values, corrects them at fine–coarse
//! faces and applies `u -= dt/dx_d (F_hi - F_lo)` on every interior cell. Checked:
//!
//! - with flux correction the global total `sum(u * cell volume)` (summed per block, then in
//!   gid order on rank 0) stays equal to its initial value to 1e-13 relative over 100 steps;
//! - without it the same run drifts by more than 1e-10 relative, so the check means something;
//! - the final values are bit-identical on every rank count (the parent compares the digests
//!   the children print), and with coalesced and per-channel correction messages, each also
//!   placed in memory-space buffers (`FluxCorrection::place_messages`: the GPU-aware path,
//!   here in host memory, which MPI reads and writes in place);
//! - a set-up that fails on one rank fails on all of them (no rank waits for the other),
//!   and so do coalesced messages whose ends disagree on a channel's length;
//! - coalesced, each correction sends exactly one status and one data message per peer rank
//!   this rank has fine–coarse faces with; per channel, one message per cross-rank channel.

mod common;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use starhalo_boundary::flux_correction::flux_channels;
use starhalo_boundary::{
    BlockData, BufferPool, Exchange, ExchangeOptions, FluxCorrection, FluxData,
};
use starhalo_exec::{Buffer, MemSpace};
use starhalo_mesh::field::{Centering, Fields, Metadata, SparseThresholds};
use starhalo_mesh::Mesh;
use starhalo_sf::mpi::datatype::PartitionMut;
use starhalo_sf::mpi::topology::{Communicator, SimpleCommunicator};
use starhalo_sf::mpi::traits::Root;

const MESHES: u64 = 4;
const STEPS: usize = 100;
const VELOCITY: [f64; 3] = [1.0, 0.7, 0.45];

fn main() {
    if std::env::var_os(common::CHILD_ENV).is_some() {
        child();
        return;
    }
    eprintln!("flux_conservation: conservative advection on random AMR meshes");
    let mut same = common::SameDigests::default();
    // Eight ranks oversubscribe the cores badly: they run the first two meshes (one 2-D, one
    // 3-D) only.
    let meshes = |n: usize| if n == 8 { 2 } else { MESHES };
    let jobs = [1, 2, 3, 4, 8].map(|n| (n, vec![meshes(n).to_string()]));
    common::relaunch_checked(jobs, 300, |n, out| {
        let text = same.check(n, out, meshes(n) as usize);
        if n == 1 {
            for l in text.lines().filter(|l| l.starts_with("DRIFT")) {
                eprintln!("  {l}");
            }
        }
    });
}

fn random_mesh(seed: u64, nranks: usize) -> Mesh {
    let mut rng = ChaCha8Rng::seed_from_u64(seed + 100);
    let ndim = if seed.is_multiple_of(2) { 2 } else { 3 };
    common::amr::random_amr_mesh(&mut rng, ndim, nranks, &[])
}

fn fields() -> Fields {
    let mut f = Fields::default();
    let cell = || Metadata::new(Centering::Cell).fill_ghost().with_fluxes();
    f.add("u", cell()).unwrap();
    f.add("q", cell().components(2)).unwrap();
    f
}

/// Cell sizes of block `gid` (1 along inactive directions).
fn cell_size(mesh: &Mesh, gid: usize) -> [f64; 3] {
    let (lo, hi) = mesh.bounds(gid).unwrap();
    let n = mesh.config().block_nx;
    [0, 1, 2].map(|d| {
        if d < mesh.ndim() {
            (hi[d] - lo[d]) / n[d] as f64
        } else {
            1.0
        }
    })
}

fn points(n: [usize; 3]) -> impl Iterator<Item = [usize; 3]> {
    (0..n[2]).flat_map(move |k| (0..n[1]).flat_map(move |j| (0..n[0]).map(move |i| [i, j, k])))
}

/// Ghost-inclusive dimensions and ghosts per direction.
fn frame(data: &BlockData) -> ([usize; 3], [usize; 3], [usize; 3]) {
    let s = data.shape();
    let g = [0, 1, 2].map(|d| s.ghosts(d));
    let nx = s.nx();
    ([0, 1, 2].map(|d| nx[d] + 2 * g[d]), g, nx)
}

fn at(dims: [usize; 3], p: [usize; 3]) -> usize {
    (p[2] * dims[1] + p[1]) * dims[0] + p[0]
}

fn initial(mesh: &Mesh, f: &Fields, rank: usize, seed: u64) -> BlockData {
    let mut data = BlockData::new(mesh, f, rank).unwrap();
    let (dims, g, nx) = frame(&data);
    let gids = data.gids().to_vec();
    let nslots = data.vars().iter().map(|v| v.slots.end).max().unwrap();
    for (b, &gid) in gids.iter().enumerate() {
        let mut r = ChaCha8Rng::seed_from_u64(seed * 100_000 + gid as u64);
        for s in 0..nslots {
            for p in points(nx) {
                let q = [p[0] + g[0], p[1] + g[1], p[2] + g[2]];
                data.fine_mut(b, s)[at(dims, q)] = r.gen_range(0.5..2.0);
            }
        }
    }
    data
}

/// Upwind fluxes of every slot (positive velocity: the value of the lower cell).
fn fluxes(data: &BlockData, flux: &mut FluxData) {
    let (dims, g, _) = frame(data);
    let ndim = data.shape().ndim();
    for b in 0..data.gids().len() {
        for s in 0..flux.slots() {
            let u = data.fine(b, s);
            for d in 0..ndim {
                let fd = flux.face_dims(d);
                let out = flux.flux_mut(b, s, d);
                for (i, p) in points(fd).enumerate() {
                    let mut q = [p[0] + g[0], p[1] + g[1], p[2] + g[2]];
                    q[d] -= 1;
                    out[i] = VELOCITY[d] * u[at(dims, q)];
                }
            }
        }
    }
}

/// `u -= dt/dx_d (F_hi - F_lo)` on every interior cell of every slot.
fn update(mesh: &Mesh, data: &mut BlockData, flux: &FluxData, dt: f64) {
    let (dims, g, nx) = frame(data);
    let ndim = data.shape().ndim();
    for b in 0..data.gids().len() {
        let dx = cell_size(mesh, data.gids()[b]);
        for s in 0..flux.slots() {
            for p in points(nx) {
                let mut du = 0.0;
                for d in 0..ndim {
                    let f = flux.flux(b, s, d);
                    let mut hi = p;
                    hi[d] += 1;
                    du += dt / dx[d] * (f[flux.face_index(d, hi)] - f[flux.face_index(d, p)]);
                }
                let q = [p[0] + g[0], p[1] + g[1], p[2] + g[2]];
                data.fine_mut(b, s)[at(dims, q)] -= du;
            }
        }
    }
}

/// Per block and slot: the total `sum(u * volume)` over the interior, in cell order.
fn block_totals(mesh: &Mesh, data: &BlockData) -> Vec<f64> {
    let (dims, g, nx) = frame(data);
    let nslots = data.vars().iter().map(|v| v.slots.end).max().unwrap();
    let mut out = Vec::new();
    for b in 0..data.gids().len() {
        let dx = cell_size(mesh, data.gids()[b]);
        let vol = dx[0] * dx[1] * dx[2];
        for s in 0..nslots {
            let u = data.fine(b, s);
            let mut t = 0.0;
            for p in points(nx) {
                t += u[at(dims, [p[0] + g[0], p[1] + g[1], p[2] + g[2]])] * vol;
            }
            out.push(t);
        }
    }
    out
}

/// `per` values of each local block gathered on rank 0 in gid order (empty elsewhere).
fn gather<T>(world: &SimpleCommunicator, mesh: &Mesh, mine: &[T], per: usize) -> Vec<T>
where
    T: starhalo_sf::mpi::datatype::Equivalence + Default + Clone,
{
    let root = world.process_at_rank(0);
    if world.rank() == 0 {
        let p = mesh.partition();
        let counts: Vec<i32> = (0..world.size() as usize)
            .map(|r| (p.blocks_of(r).len() * per) as i32)
            .collect();
        let displs: Vec<i32> = (0..world.size() as usize)
            .map(|r| (p.blocks_of(r).start * per) as i32)
            .collect();
        let mut all = vec![T::default(); mesh.forest().len() * per];
        let mut part = PartitionMut::new(&mut all[..], counts, displs);
        root.gather_varcount_into_root(mine, &mut part);
        all
    } else {
        root.gather_varcount_into(mine);
        Vec::new()
    }
}

/// Per slot, the global total summed in gid order on rank 0 (zeros elsewhere).
fn totals(world: &SimpleCommunicator, mesh: &Mesh, data: &BlockData, nslots: usize) -> Vec<f64> {
    let all = gather(world, mesh, &block_totals(mesh, data), nslots);
    let mut t = vec![0.0; nslots];
    for (i, x) in all.iter().enumerate() {
        t[i % nslots] += x;
    }
    t
}

fn fnv(words: impl IntoIterator<Item = u64>) -> u64 {
    words.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, x| {
        (h ^ x).wrapping_mul(0x100_0000_01b3)
    })
}

/// Hash of every block's interior values (per block, gathered in gid order).
fn digest(world: &SimpleCommunicator, mesh: &Mesh, data: &BlockData) -> u64 {
    let n = data.layout().fine.block_len();
    let values = data.fine_values();
    let mine: Vec<u64> = (0..data.gids().len())
        .map(|b| fnv(values[b * n..(b + 1) * n].iter().map(|x| x.to_bits())))
        .collect();
    fnv(gather(world, mesh, &mine, 1))
}

/// The largest relative change of a slot's total (0 off rank 0).
fn change(t: &[f64], t0: &[f64]) -> f64 {
    t.iter()
        .zip(t0)
        .map(|(a, b)| if *b == 0.0 { 0.0 } else { (a - b).abs() / b })
        .fold(0.0, f64::max)
}

/// The flux correction of every variable, `coalesced` or per channel.
fn correction(
    world: &SimpleCommunicator,
    mesh: &Mesh,
    data: &BlockData,
    coalesced: bool,
) -> FluxCorrection {
    let vars: Vec<usize> = (0..data.vars().len()).collect();
    FluxCorrection::new_in(world, mesh, data, &vars, coalesced, &BufferPool::new()).unwrap()
}

/// How a run corrects its fluxes.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Correct {
    No,
    /// Messages coalesced per peer rank (`true`) or per channel, in pooled host buffers or
    /// (`placed`) in memory-space buffers.
    With {
        coalesced: bool,
        placed: bool,
    },
}

/// Runs `STEPS` steps with the correction `correct`; returns the largest relative change of
/// a slot's total (on rank 0), the final data and the correction messages this rank sent.
fn run(
    world: &SimpleCommunicator,
    mesh: &Mesh,
    seed: u64,
    correct: Correct,
) -> (f64, BlockData, u64) {
    let rank = world.rank() as usize;
    let f = fields();
    let mut data = initial(mesh, &f, rank, seed);
    let nslots = data.vars().iter().map(|v| v.slots.end).max().unwrap();
    let mut ex = Exchange::new(world, mesh, &data, ExchangeOptions::default()).unwrap();
    let coalesced = matches!(
        correct,
        Correct::No
            | Correct::With {
                coalesced: true,
                ..
            }
    );
    let mut fc = correction(world, mesh, &data, coalesced);
    if let Correct::With { placed: true, .. } = correct {
        fc.place_messages(&Buffer::zeroed(MemSpace::Host, 0).unwrap())
            .unwrap();
    }
    let mut flux = FluxData::new(&data);
    let ndim = mesh.ndim();
    let top = mesh
        .forest()
        .leaves()
        .iter()
        .map(|l| l.level())
        .max()
        .unwrap();
    let c = mesh.config();
    let dx_min = (0..ndim)
        .map(|d| (c.xmax[d] - c.xmin[d]) / (c.nx[d] << top) as f64)
        .fold(f64::INFINITY, f64::min);
    let dt = 0.4 * dx_min / VELOCITY[..ndim].iter().sum::<f64>();
    let t0 = totals(world, mesh, &data, nslots);
    let mut drift = 0.0f64;
    for _ in 0..STEPS {
        ex.fill_ghosts(&mut data).unwrap();
        fluxes(&data, &mut flux);
        if correct != Correct::No {
            fc.correct(&mut flux, &data).unwrap();
            update(mesh, &mut data, &flux, dt);
            drift = drift.max(change(&totals(world, mesh, &data, nslots), &t0));
        } else {
            update(mesh, &mut data, &flux, dt);
        }
    }
    if correct == Correct::No {
        drift = change(&totals(world, mesh, &data, nslots), &t0);
    }
    (drift, data, fc.traffic().messages)
}

fn child() {
    let universe = starhalo_sf::mpi::initialize().unwrap();
    let world = universe.world();
    let rank = world.rank() as usize;
    let nranks = world.size() as usize;
    let meshes = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(MESHES);
    one_rank_fails(&world);
    lengths_disagree(&world);
    for seed in 0..meshes {
        let mesh = random_mesh(seed, nranks);
        // The mesh has fine–coarse faces, so the check is not vacuous.
        let nb = mesh.neighbors().unwrap();
        let faces: usize = (0..nranks)
            .map(|r| flux_channels(&nb, &[0], r).send.len())
            .sum();
        assert!(faces > 0, "seed {seed}: no fine-coarse faces");
        let mine = flux_channels(&nb, &[0, 1], rank);
        let remote = mine.send.iter().filter(|c| !c.is_local());
        let mut peers: Vec<usize> = remote.clone().map(|c| c.receiver_rank).collect();
        peers.sort_unstable();
        peers.dedup();
        for coalesced in [true, false] {
            sparse_check(&world, &mesh, seed, coalesced);
        }
        let mode = |coalesced, placed| Correct::With { coalesced, placed };
        let (with, data, sent) = run(&world, &mesh, seed, mode(true, false));
        let (with_pc, data_pc, sent_pc) = run(&world, &mesh, seed, mode(false, false));
        let (without, _, _) = run(&world, &mesh, seed, Correct::No);
        let steps = STEPS as u64;
        assert_eq!(
            sent,
            2 * peers.len() as u64 * steps,
            "seed {seed}: coalesced messages"
        );
        assert_eq!(
            sent_pc,
            remote.count() as u64 * steps,
            "seed {seed}: per-channel messages"
        );
        let bits = |d: &BlockData| d.data().iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert!(
            bits(&data) == bits(&data_pc),
            "seed {seed}: coalesced and per-channel correction differ"
        );
        for coalesced in [true, false] {
            let (_, placed, n) = run(&world, &mesh, seed, mode(coalesced, true));
            let want = if coalesced { sent } else { sent_pc };
            assert_eq!(
                n, want,
                "seed {seed}: placed messages (coalesced {coalesced})"
            );
            assert!(
                bits(&placed) == bits(&data),
                "seed {seed}: placed and pooled messages differ (coalesced {coalesced})"
            );
        }
        let d = digest(&world, &mesh, &data);
        if rank == 0 {
            assert!(
                with.max(with_pc) <= 1e-13,
                "seed {seed}: total drifts by {with:e} (coalesced), {with_pc:e} (per channel) \
                 with flux correction"
            );
            assert!(
                without > 1e-10,
                "seed {seed}: total drifts by only {without:e} without flux correction"
            );
            println!(
                "DRIFT seed {seed} ({}-D, {} blocks, {faces} fine-coarse faces): \
                 {with:.2e} corrected, {without:.2e} uncorrected",
                mesh.ndim(),
                mesh.forest().len()
            );
            println!("DIGEST {seed} {d:016x}");
        }
    }
}

/// A set-up that fails on rank 0 only (a variable without storage) fails on every rank, in
/// both modes, instead of leaving the others waiting for rank 0's messages.
fn one_rank_fails(world: &SimpleCommunicator) {
    let rank = world.rank() as usize;
    let mesh = random_mesh(0, world.size() as usize);
    let data = BlockData::new(&mesh, &fields(), rank).unwrap();
    let vars = if rank == 0 { vec![0, 99] } else { vec![0] };
    for coalesced in [true, false] {
        let r = FluxCorrection::new_in(world, &mesh, &data, &vars, coalesced, &BufferPool::new());
        let err = r.err().map(|e| e.to_string()).unwrap_or_default();
        let want = if rank == 0 { "99" } else { "another rank" };
        assert!(err.contains(want), "rank {rank}: {err:?}");
    }
}

/// Coalesced, rank 0 gives `q` three components where the others give two: only the ends
/// receiving a message whose channels' lengths differ see it, yet every rank fails, including
/// those that share no fine–coarse face with rank 0 (they would go on and wait otherwise).
fn lengths_disagree(world: &SimpleCommunicator) {
    let rank = world.rank() as usize;
    let mesh = random_mesh(1, world.size() as usize);
    let mut f = Fields::default();
    let cell = || Metadata::new(Centering::Cell).fill_ghost().with_fluxes();
    f.add("u", cell()).unwrap();
    f.add("q", cell().components(if rank == 0 { 3 } else { 2 }))
        .unwrap();
    let data = BlockData::new(&mesh, &f, rank).unwrap();
    // Only a rank 0 with cross-rank fine–coarse faces sends or receives a message that differs.
    let nb = mesh.neighbors().unwrap();
    let involved = (0..world.size() as usize).any(|r| {
        let ch = flux_channels(&nb, &[0], r);
        ch.send
            .iter()
            .any(|c| !c.is_local() && (r == 0 || c.receiver_rank == 0))
    });
    let r = FluxCorrection::new_in(world, &mesh, &data, &[0, 1], true, &BufferPool::new());
    match r {
        Err(e) => assert!(
            involved && e.to_string().contains("channels"),
            "rank {rank}: {e}"
        ),
        Ok(_) => assert!(!involved, "rank {rank}: set up despite rank 0's lengths"),
    }
}

/// Whether block `gid`'s sparse variable is allocated.
fn sparse_on(seed: u64, gid: usize) -> bool {
    ChaCha8Rng::seed_from_u64(seed * 7919 + gid as u64).gen_bool(0.6)
}

/// A sparse variable beside a dense one: every block's fluxes are its code `gid + 1` (so the
/// mean of a fine face is that too). After a correction, a coarse face holds the sender's
/// code exactly where both blocks have the variable allocated (always, for the dense one),
/// its own code elsewhere, and nothing else has changed. Twice, on the same channels.
fn sparse_check(world: &SimpleCommunicator, mesh: &Mesh, seed: u64, coalesced: bool) {
    let rank = world.rank() as usize;
    let mut f = Fields::default();
    let cell = || Metadata::new(Centering::Cell).with_fluxes();
    f.add("s", cell().sparse(SparseThresholds::default()))
        .unwrap();
    f.add("u", cell()).unwrap();
    let mut data = BlockData::new(mesh, &f, rank).unwrap();
    for b in 0..data.gids().len() {
        data.set_allocated(b, 0, sparse_on(seed, data.gids()[b]));
    }
    let mut fc = correction(world, mesh, &data, coalesced);
    let mut flux = FluxData::new(&data);
    let code = |gid: usize| (gid + 1) as f64;
    let nx = data.shape().nx();
    let ndim = mesh.ndim();
    let chans: Vec<_> = fc.recv_channels().copied().collect();
    for _round in 0..2 {
        for b in 0..data.gids().len() {
            let gid = data.gids()[b];
            for s in 0..2 {
                for d in 0..ndim {
                    flux.flux_mut(b, s, d).fill(code(gid));
                }
            }
        }
        let before = flux.clone();
        fc.correct(&mut flux, &data).unwrap();
        let mut expect = 0;
        for c in &chans {
            let b = data.local(c.key.receiver).unwrap();
            let var = c.key.var;
            let live = var == 1 || (sparse_on(seed, c.key.sender) && data.is_allocated(b, 0));
            let o = c.receiver_element().offset();
            let d = (0..3).find(|&d| o[d] != 0).unwrap();
            let fd = flux.face_dims(d);
            let face = if o[d] > 0 { nx[d] } else { 0 };
            let mut lo = [0; 3];
            let mut hi = [1; 3];
            lo[d] = face;
            hi[d] = face + 1;
            for (s, e) in (0..ndim).filter(|&e| e != d).enumerate() {
                lo[e] = usize::from(c.fi[s]) * nx[e] / 2;
                hi[e] = lo[e] + nx[e] / 2;
            }
            let want = if live {
                expect += (0..3).map(|e| hi[e] - lo[e]).product::<usize>();
                code(c.key.sender)
            } else {
                code(c.key.receiver)
            };
            for k in lo[2]..hi[2] {
                for j in lo[1]..hi[1] {
                    for i in lo[0]..hi[0] {
                        let x = flux.flux(b, var, d)[(k * fd[1] + j) * fd[0] + i];
                        assert_eq!(x, want, "seed {seed}: {c:?} face ({i},{j},{k})");
                    }
                }
            }
        }
        let changed = flux
            .values()
            .iter()
            .zip(before.values())
            .filter(|(a, b)| a != b)
            .count();
        assert_eq!(
            changed, expect,
            "seed {seed}: values changed off the corrected faces"
        );
    }
}
