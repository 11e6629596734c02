//! The ghost exchange with device fields ([`DeviceFields`]) on seeded random meshes, on 1, 2
//! and 4 ranks, coalesced and per channel, in random posting orders, as `any` and as `local`
//! then `nonlocal`: single-level meshes (2-D and 3-D, each direction periodic or each face
//! outflow or reflecting, random block sizes, ghost depths and partitions) and adaptive meshes
//! of up to three levels (each direction periodic, outflow or reflecting)
//! (restriction before sending, prolongation after receiving, linear and constant
//! prolongation), with a one- and a two-component variable and a sparse one (allocated on
//! some blocks, below its threshold on some of those). Checked:
//!
//! - with a GPU: the device fill gives the host fill's allocation, and its blocks and coarse
//!   buffers of every allocated variable bit for bit, staged through the host and (on one
//!   rank, or with an MPI that supports CUDA) with the messages in device memory,
//!   twice in a row (the second fill reuses every buffer), from random values (not dyadic,
//!   so a change in rounding order shows);
//! - on every machine: the device's plan run on the host ([`HostTwin`]: the same boxes, split
//!   storage, the host's restriction, prolongation and boundary code) gives the host fill's
//!   allocation and allocated storage bit for bit, with the messages in host buffers and
//!   placed in buffers that MPI reads and writes in place (the GPU-aware path on host memory); the host fill's digest is the same on
//!   every rank count; on single-level meshes every ghost holds the value that names its
//!   periodic image or, beyond an outflow face, the nearest interior cell, or beyond a
//!   reflecting face, its mirror image; without a GPU opening one is an error on every rank,
//!   never a panic.

mod common;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use starhalo_boundary::device_pack::{DeviceFields, HostTwin};
use starhalo_boundary::prolong_restrict::Prolongation;
use starhalo_boundary::{BlockData, BoundaryType, Exchange, ExchangeOptions, Ordering};
use starhalo_exec::cuda::Device;
use starhalo_exec::{Buffer, MemSpace, Policy};
use starhalo_mesh::config::BoundaryCondition;
use starhalo_mesh::field::{Centering, Fields, Metadata, SparseThresholds};
use starhalo_mesh::{Mesh, MeshConfig};
use starhalo_sf::mpi::point_to_point::{Destination, Source};
use starhalo_sf::mpi::topology::{Communicator, SimpleCommunicator};
use starhalo_sf::mpi::traits::CommunicatorCollectives;

const MESHES: u64 = 6;

fn main() {
    if std::env::var_os(common::CHILD_ENV).is_some() {
        child();
        return;
    }
    eprintln!("exchange_device: device ghost fill on random single-level meshes");
    let mut same = common::SameDigests::default();
    common::relaunch_checked([1, 2, 4].map(|n| (n, vec![])), 300, |n, out| {
        same.check(n, out, 2 * MESHES as usize);
    });
}

/// A random single-level mesh: 2-D or 3-D, each direction periodic or each of its faces
/// outflow or reflecting, 2 to 4 blocks
/// per direction of 2 to 6 cells, 1 to 3 ghost layers (at most the block width), one
/// partition per rank or partitions of 1 to 3 blocks.
fn random_mesh(rng: &mut ChaCha8Rng, nranks: usize) -> Mesh {
    let ndim = rng.gen_range(2..=3);
    let (mut nx, mut bnx) = ([1; 3], [1; 3]);
    for d in 0..ndim {
        bnx[d] = rng.gen_range(2..=6);
        nx[d] = bnx[d] * rng.gen_range(2..=4);
    }
    let mut c = MeshConfig::new(nx, bnx);
    for d in 0..ndim {
        let wall = |rng: &mut ChaCha8Rng| {
            if rng.gen_bool(0.5) {
                BoundaryCondition::Outflow
            } else {
                BoundaryCondition::Reflecting
            }
        };
        c.bc[d] = if rng.gen_bool(0.4) {
            [BoundaryCondition::Periodic; 2]
        } else {
            [wall(rng), wall(rng)]
        };
    }
    c.nghost = rng.gen_range(1..=3.min(*bnx[..ndim].iter().min().unwrap()));
    c.pack_size = rng.gen_bool(0.5).then(|| rng.gen_range(1..=3));
    c.validate().expect("test mesh configuration");
    Mesh::new(c, nranks).expect("test mesh")
}

fn fields() -> Fields {
    let mut f = Fields::default();
    let cell = || Metadata::new(Centering::Cell).fill_ghost();
    f.add("a", cell()).unwrap();
    f.add("b", cell().components(2)).unwrap();
    // A default other than 0: null sub-halos must get it, not stale buffer values.
    let sparse = SparseThresholds {
        default_value: 0.25,
        ..SparseThresholds::default()
    };
    f.add("s", cell().sparse(sparse)).unwrap();
    f
}

/// The sparse variable's index.
const SPARSE: usize = 2;

/// The value cell `p` of block `gid`, slot `slot` holds: a code of its global index. Ghosts
/// start at -1.
fn code(mesh: &Mesh, gid: usize, slot: usize, p: [usize; 3]) -> Option<f64> {
    let c = mesh.config();
    let interior = (0..mesh.ndim()).all(|d| p[d] >= c.nghost && p[d] < c.nghost + c.block_nx[d]);
    interior.then(|| filled_code(mesh, gid, slot, p))
}

/// The code a filled point holds, ghosts included: that of the cell it maps to, wrapped
/// across periodic directions, clamped onto the domain across outflow faces and mirrored
/// across reflecting ones.
fn filled_code(mesh: &Mesh, gid: usize, slot: usize, p: [usize; 3]) -> f64 {
    let c = mesh.config();
    let loc = mesh.forest().loc(gid).unwrap();
    let ext = mesh.forest().grid().extent(loc.level());
    let mut g = [0i64; 3];
    for d in 0..mesh.ndim() {
        let n = c.block_nx[d] as i64;
        let x = loc.lx_dir(d) * n + p[d] as i64 - c.nghost as i64;
        let len = ext[d] * n;
        let face = if x < 0 { c.bc[d][0] } else { c.bc[d][1] };
        g[d] = match face {
            BoundaryCondition::Periodic => x.rem_euclid(len),
            BoundaryCondition::Reflecting if x < 0 => -1 - x,
            BoundaryCondition::Reflecting if x >= len => 2 * len - 1 - x,
            _ => x.clamp(0, len - 1),
        };
    }
    (((g[0] * 64 + g[1]) * 64 + g[2]) * 4 + slot as i64) as f64
}

fn dims(mesh: &Mesh) -> [usize; 3] {
    let c = mesh.config();
    [0, 1, 2].map(|d| {
        if d < mesh.ndim() {
            c.block_nx[d] + 2 * c.nghost
        } else {
            1
        }
    })
}

fn points(d: [usize; 3]) -> impl Iterator<Item = [usize; 3]> {
    (0..d[2]).flat_map(move |k| (0..d[1]).flat_map(move |j| (0..d[0]).map(move |i| [i, j, k])))
}

fn initial(mesh: &Mesh, f: &Fields, rank: usize) -> BlockData {
    let mut data = BlockData::new(mesh, f, rank).unwrap();
    let d = dims(mesh);
    for (b, &gid) in data.gids().to_vec().iter().enumerate() {
        for slot in 0..3 {
            let values = data.fine_mut(b, slot);
            for (i, p) in points(d).enumerate() {
                values[i] = code(mesh, gid, slot, p).unwrap_or(-1.0);
            }
        }
    }
    data
}

/// Every value of every block (ghosts and coarse buffers too) drawn from a generator seeded
/// by the case and the block's gid, so the same on any number of ranks; the sparse variable
/// allocated on some blocks, and on some of those below its threshold (null messages).
fn random_initial(mesh: &Mesh, f: &Fields, rank: usize, case: u64) -> BlockData {
    let mut data = BlockData::new(mesh, f, rank).unwrap();
    let n = data.layout().block_len();
    let gids = data.gids().to_vec();
    let sparse_slots = data.vars()[SPARSE].slots.clone();
    let fine_len = data.layout().fine.block_len() / data.layout().fine.nvar;
    let mut states = Vec::new();
    for (b, chunk) in data.data_mut().chunks_mut(n).enumerate() {
        let mut rng = ChaCha8Rng::seed_from_u64(case * 100_003 + gids[b] as u64);
        chunk.iter_mut().for_each(|x| *x = rng.gen_range(-1.0..1.0));
        let (on, big) = (rng.gen_bool(0.6), rng.gen_bool(0.7));
        if !big {
            let s = sparse_slots.start;
            chunk[s * fine_len..sparse_slots.end * fine_len]
                .iter_mut()
                .for_each(|x| *x *= 1e-20);
        }
        states.push(on);
    }
    for (b, on) in states.into_iter().enumerate() {
        data.set_allocated(b, SPARSE, on);
    }
    data
}

/// The same allocation, and the same bits in every allocated variable's block arrays and
/// coarse buffers (an unallocated variable's values are never read: device fields may hold
/// anything there).
fn same_allocated(host: &BlockData, flags: &BlockData, values: &[f64]) -> Result<(), String> {
    let l = host.layout();
    let (n, start) = (l.block_len(), l.coarse_start());
    let flen = l.fine.block_len() / l.fine.nvar;
    let clen = l.coarse.map_or(0, |c| c.block_len() / c.nvar);
    for b in 0..host.gids().len() {
        for v in 0..host.vars().len() {
            let on = host.is_allocated(b, v);
            if on != flags.is_allocated(b, v) {
                return Err(format!("block {b} variable {v}: allocation differs"));
            }
            for s in host.vars()[v].slots.clone().filter(|_| on) {
                let f = b * n + s * flen..b * n + (s + 1) * flen;
                let c = b * n + start + s * clen..b * n + start + (s + 1) * clen;
                for (what, r) in [("block array", f), ("coarse buffer", c)] {
                    if let Some(i) = r
                        .clone()
                        .find(|&i| host.data()[i].to_bits() != values[i].to_bits())
                    {
                        return Err(format!(
                            "block {b} slot {s}, {what} value {}: {} against the host's {}",
                            i - r.start,
                            values[i],
                            host.data()[i]
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

/// Every cell, ghosts included, holds the code of the cell it maps to.
fn check_filled(mesh: &Mesh, data: &BlockData, what: &str) {
    let d = dims(mesh);
    for (b, &gid) in data.gids().iter().enumerate() {
        for slot in 0..3 {
            for (i, p) in points(d).enumerate() {
                let want = filled_code(mesh, gid, slot, p);
                let got = data.fine(b, slot)[i];
                assert_eq!(got, want, "{what}: block {gid} slot {slot} at {p:?}");
            }
        }
    }
}

/// FNV-1a over every block's gid then values, in gid order over all ranks (on rank 0).
fn global_digest(world: &SimpleCommunicator, data: &BlockData) -> u64 {
    let n = data.layout().fine.block_len();
    let values = data.fine_values();
    let mine: Vec<u64> = data
        .gids()
        .iter()
        .enumerate()
        .flat_map(|(b, &g)| {
            let bits = values[b * n..(b + 1) * n].iter().map(|x| x.to_bits());
            std::iter::once(g as u64).chain(bits)
        })
        .collect();
    // Ranks hold consecutive gids: rank order is gid order.
    if world.rank() == 0 {
        let mut all = mine;
        for r in 1..world.size() {
            all.extend(world.process_at_rank(r).receive_vec::<u64>().0);
        }
        all.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, x| {
            (h ^ x).wrapping_mul(0x100_0000_01b3)
        })
    } else {
        world.process_at_rank(0).send(&mine[..]);
        0
    }
}

fn child() {
    let universe = starhalo_sf::mpi::initialize().unwrap();
    let world = universe.world();
    let (rank, nranks) = (world.rank() as usize, world.size() as usize);
    let dev = Device::process_default();
    if !common::has_gpu() {
        let e = dev
            .as_ref()
            .expect_err("a device opened without an NVIDIA driver");
        assert!(e.to_string().contains("driver"), "{e}");
    }
    let dev = dev.and_then(|d| d.compile_all().map(|()| d));
    if common::has_gpu() {
        if let Err(e) = &dev {
            panic!("rank {rank}: the GPU cannot be used: {e}");
        }
    }
    for case in 0..2 * MESHES {
        let (seed, amr) = (case % MESHES, case >= MESHES);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mesh = if amr {
            let ndim = if seed.is_multiple_of(2) { 2 } else { 3 };
            let walls = [BoundaryCondition::Outflow, BoundaryCondition::Reflecting];
            common::amr::random_amr_mesh(&mut rng, ndim, nranks, &walls)
        } else {
            random_mesh(&mut rng, nranks)
        };
        let f = fields();
        let opts = ExchangeOptions {
            coalesced: rng.gen_bool(0.5),
            ordering: Ordering::Random(rng.gen()),
            policy: Policy::Serial,
            split: true,
        };
        let types: &[BoundaryType] = if rng.gen_bool(0.5) {
            &[BoundaryType::Any]
        } else {
            &[BoundaryType::Local, BoundaryType::Nonlocal]
        };
        let what = format!(
            "{} mesh {seed} on {nranks} ranks ({opts:?}, {types:?})",
            if amr { "adaptive" } else { "single-level" }
        );
        let exchange = |data: &BlockData| {
            let mut ex = Exchange::new(&world, &mesh, data, opts).unwrap();
            ex.set_prolongation(1, Prolongation::Constant).unwrap();
            ex
        };
        if !amr {
            let mut coded = initial(&mesh, &f, rank);
            let mut ex = exchange(&coded);
            ex.fill_ghosts_as(types, &mut coded).unwrap();
            check_filled(&mesh, &coded, &what);
        }
        // Random values everywhere (ghosts and coarse buffers too), not dyadic: any change
        // in how restriction or prolongation round shows.
        // The host after one and after two fills (sparse variables allocated by the first
        // send data in the second).
        let mut host = random_initial(&mesh, &f, rank, case);
        let mut ex = exchange(&host);
        let mut hosts = Vec::new();
        for _ in 0..2 {
            ex.fill_ghosts_as(types, &mut host).unwrap();
            hosts.push(host.clone());
        }

        // The twin with host message buffers (staged), then with the messages placed in a
        // buffer of their own that MPI reads and writes in place (the GPU-aware path, on
        // host memory).
        for placed in [false, true] {
            let what = format!("{what}, twin, placed messages {placed}");
            let mut data = random_initial(&mesh, &f, rank, case);
            let mut ex = exchange(&data);
            let mut twin = HostTwin::new(&ex, &data).unwrap_or_else(|e| panic!("{what}: {e}"));
            if placed {
                ex.place_messages(&Buffer::zeroed(MemSpace::Host, 0).unwrap())
                    .unwrap();
            }
            for (round, want) in hosts.iter().enumerate() {
                ex.fill_ghosts_in(types, &mut data, &mut twin)
                    .unwrap_or_else(|e| panic!("{what}, fill {round}: {e}"));
                if let Err(e) = same_allocated(want, &data, &twin.merged()) {
                    panic!("{what}, fill {round}: differs from the host fill: {e}");
                }
            }
        }
        // With a GPU: staged, and GPU-aware (messages in device memory) where this MPI
        // supports CUDA, or on one rank, where no message crosses MPI.
        let aware = nranks == 1 || starhalo_sf::mpi_cuda_support();
        for placed in [false, true].into_iter().filter(|&p| !p || aware) {
            let Ok(dev) = &dev else { break };
            let what = format!("{what}, device, placed messages {placed}");
            let mut data = random_initial(&mesh, &f, rank, case);
            let mut ex = exchange(&data);
            let mut fields = DeviceFields::new(dev, &ex, &data).unwrap();
            if placed {
                ex.place_messages(&Buffer::zeroed_for_mpi(dev, 1).unwrap())
                    .unwrap();
            }
            for (round, want) in hosts.iter().enumerate() {
                ex.fill_ghosts_in(types, &mut data, &mut fields).unwrap();
                fields.download(&mut data).unwrap();
                if let Err(e) = same_allocated(want, &data, data.data()) {
                    panic!("{what}, fill {round}: differs from the host fill: {e}");
                }
            }
        }
        let d = global_digest(&world, &hosts[0]);
        if rank == 0 {
            println!("DIGEST {case} {d:016x}");
        }
        world.barrier();
    }
}
