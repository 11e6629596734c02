//! A split-phase operation leaked with `mem::forget` (safe Rust) leaves MPI none of the
//! caller's memory: the caller's slices are not written after the leak, however the messages
//! arrive, and the forest goes on working with a new link. On 2 ranks, each with contiguous
//! leaves on the other's roots (the shape MPI would otherwise receive in place), under the
//! two-sided implementations. (The one-sided one stages alike, but a window attachment leaked
//! with its link makes UCX abort at `MPI_Finalize`: a leak, still not a use after free.)

mod common;

use starhalo_sf::mpi::collective::CommunicatorCollectives;
use starhalo_sf::mpi::topology::Communicator;
use starhalo_sf::{Graph, Op, RootRef, SfOptions, SfType, StarForest};

fn main() {
    if std::env::var_os(common::CHILD_ENV).is_some() {
        child();
    } else {
        eprintln!("sf_leak: a forgotten operation writes nothing of the caller's");
        common::relaunch_self(&[2], 120);
    }
}

fn child() {
    let universe = starhalo_sf::mpi::initialize().expect("MPI init");
    let world = universe.world();
    // Every type on every rank, whatever failed before: forest set-up is collective.
    let results: Vec<bool> = [SfType::Basic, SfType::Neighbor]
        .into_iter()
        .map(|t| leak_writes_nothing(&world, t))
        .collect();
    let ok = results.iter().all(|&ok| ok);
    drop(universe);
    std::process::exit(i32::from(!ok));
}

fn leak_writes_nothing(world: &impl Communicator, sf_type: SfType) -> bool {
    const N: usize = 256;
    let (r, n) = (world.rank() as i64, world.size() as i64);
    let other = (r + 1).rem_euclid(n);
    let iremote: Vec<RootRef> = (0..N as u64)
        .map(|offset| RootRef {
            rank: other,
            offset,
        })
        .collect();
    let opts = SfOptions {
        sf_type,
        ..SfOptions::default()
    };
    let sf = StarForest::new(world, &Graph::new(N, None, iremote), opts).unwrap();
    let mut root: Vec<f64> = (0..N).map(|i| (r as usize * N + i) as f64).collect();
    let mut leaf = vec![-1.0f64; N];
    std::mem::forget(sf.bcast_begin(&root, &mut leaf, Op::Replace).unwrap());
    // The peer's values for `leaf` have surely arrived, and MPI has made progress, by the
    // end of these rounds.
    for _ in 0..20 {
        world.barrier();
    }
    let name = sf_type.name();
    let mut ok = true;
    if leaf.iter().any(|&x| x != -1.0) {
        eprintln!("[rank {r}] FAIL {name}: a forgotten bcast wrote the caller's leaves");
        ok = false;
    }
    // A reduce whose roots MPI could write in place.
    let before = root.clone();
    let sent = vec![-2.0f64; N];
    std::mem::forget(sf.reduce_begin(&sent, &mut root, Op::Replace).unwrap());
    for _ in 0..20 {
        world.barrier();
    }
    if root != before {
        eprintln!("[rank {r}] FAIL {name}: a forgotten reduce wrote the caller's roots");
        ok = false;
    }
    // The forest still works (the leaked operations took their links along).
    sf.bcast(&root, &mut leaf, Op::Replace).unwrap();
    let want: Vec<f64> = (0..N).map(|i| (other as usize * N + i) as f64).collect();
    if leaf != want {
        eprintln!("[rank {r}] FAIL {name}: the bcast after the leaks got wrong values");
        ok = false;
    }
    ok
}
