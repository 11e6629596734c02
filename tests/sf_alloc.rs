//! A warm star forest allocates nothing per operation: links, staging buffers and persistent
//! requests are all reused. Counted with a global allocator, on 3 ranks, for every kind of
//! operation over contiguous, list and self edges, under every implementation.

mod common;

use starhalo_sf::mpi::topology::Communicator;
use starhalo_sf::{Graph, Op, RootRef, SfOptions, SfType, StarForest};

#[global_allocator]
static GLOBAL: starhalo_exec::alloc_count::Counting = starhalo_exec::alloc_count::Counting;

fn main() {
    if std::env::var_os(common::CHILD_ENV).is_some() {
        child();
    } else {
        eprintln!("sf_alloc: no heap allocation per operation once warm");
        common::relaunch_self(&[3], 120);
    }
}

fn child() {
    let universe = starhalo_sf::mpi::initialize().expect("MPI init");
    let world = universe.world();
    // Every type on every rank, whatever failed before: forest set-up is collective.
    let results: Vec<bool> = [SfType::Basic, SfType::Neighbor, SfType::Rma]
        .into_iter()
        .map(|t| count_warm_allocations(&world, t))
        .collect();
    let ok = results.iter().all(|&ok| ok);
    drop(universe);
    std::process::exit(i32::from(!ok));
}

/// True when 600 warm operations allocated nothing (and the counter demonstrably counts).
fn count_warm_allocations(world: &impl Communicator, sf_type: SfType) -> bool {
    let (r, n) = (world.rank() as i64, world.size() as i64);
    let at = |rank: i64, offset: u64| RootRef {
        rank: rank.rem_euclid(n),
        offset,
    };
    // Leaves 0..4: contiguous roots of the next rank (sent and received in place);
    // 4..8: scattered roots of the rank after (packed lists); 8..10: own roots (local scatter).
    let mut iremote: Vec<RootRef> = (0..4).map(|o| at(r + 1, o)).collect();
    iremote.extend([7, 5, 3, 1].map(|o| at(r + 2, o)));
    iremote.extend([2, 3].map(|o| at(r, o)));
    let opts = SfOptions {
        sf_type,
        ..SfOptions::default()
    };
    let sf = StarForest::new(world, &Graph::new(8, None, iremote), opts).unwrap();
    let mut root = vec![1.0f64; 8];
    let mut leaf = vec![2.0f64; 10];
    let mut upd = vec![0.0f64; 10];
    let cycle = |root: &mut Vec<f64>, leaf: &mut Vec<f64>, upd: &mut Vec<f64>| {
        sf.bcast(root, leaf, Op::Replace).unwrap();
        sf.bcast(root, leaf, Op::Sum).unwrap();
        sf.reduce(leaf, root, Op::Replace).unwrap();
        sf.reduce(leaf, root, Op::Max).unwrap();
        sf.fetch_and_op(root, leaf, upd, Op::Sum).unwrap();
        let a = sf.bcast_begin(root, leaf, Op::Sum).unwrap();
        a.end();
    };
    cycle(&mut root, &mut leaf, &mut upd); // warm: links and requests are made here
    cycle(&mut root, &mut leaf, &mut upd);
    let before = starhalo_exec::alloc_count::allocations();
    for _ in 0..100 {
        cycle(&mut root, &mut leaf, &mut upd);
    }
    let during = starhalo_exec::alloc_count::allocations() - before;
    // The counter itself must work, or the zero above proves nothing.
    let probe = std::hint::black_box(vec![0u8; 64]);
    let counted = starhalo_exec::alloc_count::allocations() - before - during;
    drop(probe);
    if during != 0 || counted == 0 {
        let t = sf_type.name();
        eprintln!("[rank {r}] FAIL {t}: {during} allocations in 600 warm operations (counter probe saw {counted})");
        return false;
    }
    true
}
