//! Single-process benchmarks of what moves the bytes, each against a `memcpy` of as many
//! bytes in the same group: the star forest's pack plans (contiguous, 3-D strided, index
//! list, duplicates reduced) on one rank, and the boundary exchange's pack-in-one and
//! unpack-in-one over every sub-halo of a mesh.
//!
//! ```text
//! cargo bench --bench pack                 # all groups, criterion's report per function
//! cargo bench --bench pack -- sf_face      # one group
//! ```
//!
//! `cargo test --benches` (and `make test`) runs each function once after checking that
//! every variant moves the same values as the plain copy, so a wrong plan fails there.

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, Throughput};
use mpi::topology::SimpleCommunicator;
use mpi::traits::Communicator;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use starhalo_boundary::{BlockData, Exchange, ExchangeOptions};
use starhalo_exec::Policy;
use starhalo_mesh::config::{BoundaryCondition, MeshConfig};
use starhalo_mesh::field::{Centering, Fields, Metadata};
use starhalo_mesh::Mesh;
use starhalo_sf::{Graph, Op, PackPlan, RootRef, SfOptions, StarForest};
use std::hint::black_box;
use std::time::Duration;

/// Interior cells across the 3-D array the forests read, and ghost cells on each side.
const N: usize = 64;
const G: usize = 2;

/// A forest on this one rank whose leaf `l` reads root `roots[l]`.
fn forest(world: &SimpleCommunicator, nroots: usize, roots: &[usize]) -> StarForest {
    let iremote = roots
        .iter()
        .map(|&r| RootRef {
            rank: 0,
            offset: r as u64,
        })
        .collect();
    StarForest::new(
        world,
        &Graph::new(nroots, None, iremote),
        SfOptions::default(),
    )
    .expect("a valid one-rank graph")
}

/// A group of `bytes` per iteration with `memcpy` of as many bytes as its first function.
fn group<'a>(c: &'a mut Criterion, name: &str, units: usize) -> BenchmarkGroup<'a, WallTime> {
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Bytes(8 * units as u64));
    let src: Vec<f64> = (0..units).map(|i| i as f64).collect();
    let mut dst = vec![0.0; units];
    g.bench_function("memcpy", |b| {
        b.iter(|| black_box(&mut dst[..]).copy_from_slice(black_box(&src)))
    });
    g
}

/// `bcast` through a forest reading `roots` of an array of `nroots`, after checking that
/// every leaf gets its root's value and that set-up chose `plan`.
fn bcast(
    g: &mut BenchmarkGroup<WallTime>,
    world: &SimpleCommunicator,
    name: &str,
    nroots: usize,
    roots: &[usize],
    plan: &str,
) {
    let sf = forest(world, nroots, roots);
    let kinds: Vec<String> = sf
        .leaf_ranks()
        .iter()
        .map(|(_, p)| kind(&p.kind).into())
        .collect();
    assert_eq!(kinds, [plan], "{name}: the roots' plan");
    let root: Vec<f64> = (0..nroots).map(|i| i as f64).collect();
    let mut leaf = vec![f64::NAN; sf.leaf_space()];
    sf.bcast(&root, &mut leaf, Op::Replace).expect("bcast");
    assert!(
        leaf.iter().zip(roots).all(|(&l, &r)| l == r as f64),
        "{name}: a leaf is wrong"
    );
    g.bench_function(name, |b| {
        b.iter(|| {
            sf.bcast(black_box(&root), black_box(&mut leaf), Op::Replace)
                .expect("bcast")
        })
    });
}

fn kind(p: &PackPlan) -> &'static str {
    match p {
        PackPlan::Contiguous { .. } => "contiguous",
        PackPlan::Strided { .. } => "strided",
        PackPlan::List(_) => "list",
    }
}

/// The flat index of cell `(i, j, k)` of the `(N + 2G)³` array.
fn at(i: usize, j: usize, k: usize) -> usize {
    let s = N + 2 * G;
    i + s * (j + s * k)
}

/// The interior of a block: 2 MiB in rows of `N` doubles, read in order, as a 3-D box, and
/// shuffled; and summed into that box.
fn sf_interior(c: &mut Criterion, world: &SimpleCommunicator) {
    let nroots = (N + 2 * G).pow(3);
    let boxed: Vec<usize> = (0..N * N * N)
        .map(|c| at(G + c % N, G + c / N % N, G + c / (N * N)))
        .collect();
    let mut shuffled = boxed.clone();
    shuffled.shuffle(&mut ChaCha8Rng::seed_from_u64(7));
    let mut g = group(c, "sf_interior", boxed.len());
    bcast(
        &mut g,
        world,
        "contiguous",
        nroots,
        &(0..boxed.len()).collect::<Vec<_>>(),
        "contiguous",
    );
    bcast(&mut g, world, "strided", nroots, &boxed, "strided");
    bcast(&mut g, world, "list", nroots, &shuffled, "list");
    reduce_sum(&mut g, world, nroots, &boxed);
    g.finish();
}

/// `reduce` with `Sum` of leaves onto the roots they read, after checking one.
fn reduce_sum(
    g: &mut BenchmarkGroup<WallTime>,
    world: &SimpleCommunicator,
    nroots: usize,
    roots: &[usize],
) {
    let sf = forest(world, nroots, roots);
    let leaf: Vec<f64> = (0..roots.len()).map(|l| l as f64).collect();
    let mut root = vec![0.5; nroots];
    sf.reduce(&leaf, &mut root, Op::Sum).expect("reduce");
    let mut want = vec![0.5; nroots];
    roots.iter().zip(&leaf).for_each(|(&r, l)| want[r] += l);
    assert!(root == want, "reduce_sum: a root is wrong");
    g.bench_function("reduce_sum", |b| {
        b.iter(|| {
            sf.reduce(black_box(&leaf), black_box(&mut root), Op::Sum)
                .expect("reduce")
        })
    });
}

/// A ghost-wide x face of the block (`G` doubles per row, 64 KiB): as a 3-D box and as the
/// same indices with every row reversed (a list).
fn sf_face(c: &mut Criterion, world: &SimpleCommunicator) {
    let nroots = (N + 2 * G).pow(3);
    let face: Vec<usize> = (0..G * N * N)
        .map(|c| at(G + c % G, G + c / G % N, G + c / (G * N)))
        .collect();
    let reversed: Vec<usize> = face
        .chunks(G)
        .flat_map(|r| r.iter().rev().copied())
        .collect();
    let mut g = group(c, "sf_face", face.len());
    bcast(&mut g, world, "strided", nroots, &face, "strided");
    bcast(&mut g, world, "list", nroots, &reversed, "list");
    g.finish();
}

/// A `reduce` with `Sum` where every root has two leaves (duplicates in the roots' plan):
/// as many bytes of leaves as the copy moves.
fn sf_duplicates(c: &mut Criterion, world: &SimpleCommunicator) {
    let nroots = N * N * N / 2;
    let roots: Vec<usize> = (0..2 * nroots).map(|l| l % nroots).collect();
    let sf = forest(world, nroots, &roots);
    assert!(
        sf.leaf_ranks().iter().all(|(_, p)| p.duplicates),
        "duplicates found at set-up"
    );
    let leaf: Vec<f64> = (0..roots.len()).map(|l| l as f64).collect();
    let mut root = vec![0.0; nroots];
    sf.reduce(&leaf, &mut root, Op::Sum).expect("reduce");
    assert!(
        root.iter()
            .enumerate()
            .all(|(r, &v)| v == (2 * r + nroots) as f64),
        "each root sums its two leaves"
    );
    let mut g = group(c, "sf_duplicates", roots.len());
    g.bench_function("reduce_sum", |b| {
        b.iter(|| {
            sf.reduce(black_box(&leaf), black_box(&mut root), Op::Sum)
                .expect("reduce")
        })
    });
    g.finish();
}

/// Every sub-halo a 4×4×4-block periodic mesh of 16³-cell blocks sends, two variables:
/// packed in one dispatch from the block arrays and unpacked likewise, against copies of the
/// same bytes.
fn pack_in_one(c: &mut Criterion, world: &SimpleCommunicator) {
    let mut config = MeshConfig::new([64, 64, 64], [16, 16, 16]);
    config.bc = [[BoundaryCondition::Periodic; 2]; 3];
    let mesh = Mesh::new(config, 1).expect("a valid mesh");
    let mut fields = Fields::default();
    for name in ["u", "v"] {
        fields
            .add(name, Metadata::new(Centering::Cell).fill_ghost())
            .expect("a new field");
    }
    let mut data = BlockData::new(&mesh, &fields, 0).expect("block arrays");
    let opts = ExchangeOptions {
        split: false,
        ..ExchangeOptions::default()
    };
    let mut exchange = Exchange::new(world, &mesh, &data, opts).expect("an exchange");
    let values: Vec<f64> = (0..data.data().len()).map(|i| i as f64).collect();
    data.data_mut().copy_from_slice(&values);
    exchange.fill_ghosts(&mut data).expect("a ghost fill");
    let filled = data.data();
    let (send, recv) = exchange
        .route_caches()
        .next()
        .expect("one route on one rank");
    let len = send.buffer_len();
    assert_eq!(len, recv.buffer_len(), "one rank sends what it receives");

    // Packing every sub-halo and unpacking the buffer where the receivers want it is the
    // whole ghost fill of this periodic one-rank mesh.
    let mut buf = vec![f64::NAN; len];
    send.pack(Policy::Serial, &values, &mut buf).expect("pack");
    let mut arrays = values.clone();
    recv.unpack(Policy::Serial, &buf, &mut arrays, &[])
        .expect("unpack");
    assert!(
        arrays == filled,
        "pack and unpack fill the ghosts as the exchange does"
    );
    assert_ne!(arrays, values, "the ghosts changed");

    let mut g = group(c, "pack_in_one", len);
    g.bench_function("pack", |b| {
        b.iter(|| {
            send.pack(Policy::Serial, black_box(&values), black_box(&mut buf))
                .expect("pack")
        })
    });
    g.bench_function("unpack", |b| {
        b.iter(|| {
            recv.unpack(Policy::Serial, black_box(&buf), black_box(&mut arrays), &[])
                .expect("unpack")
        })
    });
    g.finish();
}

fn main() {
    let Some(universe) = mpi::initialize() else {
        eprintln!("pack: MPI could not be initialized");
        std::process::exit(1);
    };
    let world = universe.world();
    assert_eq!(
        world.size(),
        1,
        "a single-process benchmark: run it without mpiexec"
    );
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    sf_interior(&mut c, &world);
    sf_face(&mut c, &world);
    sf_duplicates(&mut c, &world);
    pack_in_one(&mut c, &world);
    c.final_summary();
}
