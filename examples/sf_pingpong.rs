//! A star-forest ping-pong against raw MPI, in the same run: `n` doubles as roots on rank 0
//! and as leaves on rank 1; a `bcast` carries them over and a `reduce` with `Replace`
//! brings rank 1's answer back. The same forest serves every round (its requests are
//! persistent), and rounds alternate the forest and a plain send/receive of the same bytes
//! so that drift on a shared node hits both alike.
//!
//! ```text
//! cargo build --release --example sf_pingpong
//! mpiexec -n 2 target/release/examples/sf_pingpong [rounds]
//! ```
//!
//! Rank 0 prints the median round trip of each (microseconds) per message size. Every round
//! checks what arrived: rank 1 sends back its leaves negated, and the example exits 1 (every
//! rank, through `MPI_Abort`) if a value is wrong, 2 on fewer than 2 ranks or a bad argument.
//! Ranks past the second take no part. `starhalo bench sf-pingpong` is the full benchmark
//! (JSON, device buffers).

use mpi::point_to_point::{Destination, Source};
use mpi::topology::SimpleCommunicator;
use mpi::traits::{Communicator, CommunicatorCollectives};
use starhalo_sf::{Graph, Op, RootRef, SfOptions, StarForest};
use std::process::ExitCode;
use std::time::Instant;

/// Doubles per message, 8 bytes to 1 MiB.
const SIZES: [usize; 6] = [1, 16, 256, 4096, 32_768, 131_072];

fn main() -> ExitCode {
    let Some(universe) = mpi::initialize() else {
        eprintln!("sf_pingpong: MPI could not be initialized");
        return ExitCode::FAILURE;
    };
    let world = universe.world();
    let rounds = match std::env::args().nth(1).map(|a| a.parse::<usize>()) {
        None => 50,
        Some(Ok(r)) if r > 0 => r,
        Some(_) => return usage(&world, "the argument, rounds, must be a positive integer"),
    };
    if world.size() < 2 {
        return usage(&world, "needs at least 2 ranks (mpiexec -n 2)");
    }
    if world.rank() == 0 {
        println!("{:>9} {:>10} {:>10}", "bytes", "mpi_us", "sf_us");
    }
    for n in SIZES {
        match round_trips(&world, n, rounds) {
            Ok(Some((mpi_us, sf_us))) => println!("{:>9} {mpi_us:>10.2} {sf_us:>10.2}", 8 * n),
            Ok(None) => {}
            Err(e) => {
                // The other rank may be waiting on this one: end them all.
                eprintln!("sf_pingpong: rank {}: {e}", world.rank());
                world.abort(1)
            }
        }
    }
    ExitCode::SUCCESS
}

fn usage(world: &SimpleCommunicator, why: &str) -> ExitCode {
    if world.rank() == 0 {
        eprintln!("sf_pingpong: {why}");
    }
    ExitCode::from(2)
}

/// Median round trips of raw MPI and of the forest for `n` doubles, on rank 0 (`None` on the
/// others).
fn round_trips(
    world: &SimpleCommunicator,
    n: usize,
    rounds: usize,
) -> Result<Option<(f64, f64)>, Box<dyn std::error::Error>> {
    let rank = world.rank();
    // Rank 0 owns the roots; rank 1's leaves point at them in order (a contiguous plan on
    // both sides, so the forest packs nothing).
    let (nroots, leaves) = match rank {
        0 => (n, Vec::new()),
        1 => (
            0,
            (0..n as u64)
                .map(|offset| RootRef { rank: 0, offset })
                .collect(),
        ),
        _ => (0, Vec::new()),
    };
    let sf = StarForest::new(
        world,
        &Graph::new(nroots, None, leaves),
        SfOptions::default(),
    )?;
    // What rank 0 sends and rank 1 must receive, and what comes back: the same, negated.
    let value = |i: usize| i as f64 + 0.5;
    let sent: Vec<f64> = (0..nroots).map(value).collect();
    let mut root = sent.clone();
    let mut leaf = vec![0.0; sf.leaf_space()];
    let (mut mpi_us, mut sf_us) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        for forest in [round % 2 == 0, round % 2 == 1] {
            root.copy_from_slice(&sent);
            world.barrier();
            let t0 = Instant::now();
            if forest {
                sf.bcast(&root, &mut leaf, Op::Replace)?;
                check(&leaf, value, "the forest's bcast")?;
                leaf.iter_mut().for_each(|x| *x = -*x);
                sf.reduce(&leaf, &mut root, Op::Replace)?;
            } else if rank == 0 {
                world.process_at_rank(1).send(&root[..]);
                world.process_at_rank(1).receive_into(&mut root[..]);
            } else if rank == 1 {
                world.process_at_rank(0).receive_into(&mut leaf[..]);
                check(&leaf, value, "raw MPI")?;
                leaf.iter_mut().for_each(|x| *x = -*x);
                world.process_at_rank(0).send(&leaf[..]);
            }
            let us = t0.elapsed().as_secs_f64() * 1e6;
            let how = if forest {
                "the forest's reduce"
            } else {
                "raw MPI"
            };
            check(&root, |i| -value(i), how)?;
            if rank == 0 {
                if forest { &mut sf_us } else { &mut mpi_us }.push(us);
            }
        }
    }
    Ok((rank == 0).then(|| (median(&mut mpi_us), median(&mut sf_us))))
}

/// Every `got[i]` is `want(i)`, or an error naming the first that is not.
fn check(got: &[f64], want: impl Fn(usize) -> f64, how: &str) -> Result<(), String> {
    match (0..got.len()).find(|&i| got[i] != want(i)) {
        Some(i) => Err(format!(
            "{how}: value {i} arrived as {}, not {}",
            got[i],
            want(i)
        )),
        None => Ok(()),
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
