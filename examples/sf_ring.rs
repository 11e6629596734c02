//! The star forest on its own: a periodic 1-D array split over the ranks, each rank's
//! leaves its own cells plus one ghost on either side, rooted in the cells that own them.
//!
//! ```text
//! cargo build --release --example sf_ring
//! mpiexec -n 4 target/release/examples/sf_ring
//! ```
//!
//! A `bcast` (root → leaf) fills the ghosts, split into its begin and end halves with the
//! interior's work between them, as a halo exchange overlaps them; a `reduce` with `Sum`
//! (leaf → root) then counts how many leaves read each root: 2 for a rank's first and last
//! cells (its own leaf and a neighbour's ghost), 1 for the others. It exits 1 (every rank,
//! through `MPI_Abort`) if either comes out wrong.

use mpi::traits::Communicator;
use starhalo_sf::{Graph, Op, RootRef, SfOptions, StarForest};
use std::process::ExitCode;

/// Cells per rank.
const CELLS: usize = 5;

fn main() -> ExitCode {
    let Some(universe) = mpi::initialize() else {
        eprintln!("sf_ring: MPI could not be initialized");
        return ExitCode::FAILURE;
    };
    let world = universe.world();
    match run(&world) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Other ranks may be waiting on this one: end them all.
            eprintln!("sf_ring: rank {}: {e}", world.rank());
            world.abort(1)
        }
    }
}

fn run(world: &mpi::topology::SimpleCommunicator) -> Result<(), Box<dyn std::error::Error>> {
    let (rank, size) = (world.rank() as i64, world.size() as i64);
    let total = (CELLS as i64) * size;
    // The global cell behind each leaf: the left ghost, the rank's own cells, the right one.
    let first = rank * CELLS as i64;
    let globals: Vec<i64> = (first - 1..first + CELLS as i64 + 1)
        .map(|g| g.rem_euclid(total))
        .collect();
    let iremote = globals
        .iter()
        .map(|&g| RootRef {
            rank: g / CELLS as i64,
            offset: (g % CELLS as i64) as u64,
        })
        .collect();
    let sf = StarForest::new(
        world,
        &Graph::new(CELLS, None, iremote),
        SfOptions::default(),
    )?;

    // Each root holds its global index; after the bcast, every leaf must hold its root's.
    let roots: Vec<f64> = (0..CELLS).map(|i| (first + i as i64) as f64).collect();
    let mut leaves = vec![f64::NAN; CELLS + 2];
    let pending = sf.bcast_begin(&roots, &mut leaves, Op::Replace)?;
    // Work that needs no ghost goes here, while the messages travel.
    let interior: f64 = roots.iter().sum();
    pending.end();
    for (leaf, &g) in leaves.iter().zip(&globals) {
        if *leaf != g as f64 {
            return Err(format!("leaf for cell {g} holds {leaf}").into());
        }
    }

    // Every leaf adds 1 to its root.
    let mut readers = vec![0.0; CELLS];
    sf.reduce(&[1.0; CELLS + 2], &mut readers, Op::Sum)?;
    for (i, &r) in readers.iter().enumerate() {
        let edge = i == 0 || i + 1 == CELLS;
        if r != if edge { 2.0 } else { 1.0 } {
            return Err(format!("cell {} is read by {r} leaves", first + i as i64).into());
        }
    }
    if rank == 0 {
        println!(
            "sf_ring: {size} ranks, {total} cells: ghosts filled, edge cells read twice \
             (rank 0's cells sum to {interior})"
        );
    }
    Ok(())
}
