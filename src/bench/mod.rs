//! `starhalo bench ...`: benchmarks that compare against a baseline inside one run.

pub mod exchange;
mod exchange_device;
pub mod sf_pingpong;
pub mod sf_strategies;
pub mod shmem;

use mpi::collective::SystemOperation;
use mpi::topology::SimpleCommunicator;
use mpi::traits::CommunicatorCollectives;
use std::time::Instant;

/// The median of `v` (reordered).
pub(crate) fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs `f` on every rank from a common start (a barrier); returns the seconds it took on
/// the slowest rank, and what it returned here.
pub(crate) fn timed<R>(world: &SimpleCommunicator, f: impl FnOnce() -> R) -> (f64, R) {
    world.barrier();
    let t0 = Instant::now();
    let r = f();
    let mine = t0.elapsed().as_secs_f64();
    let mut slowest = 0.0;
    world.all_reduce_into(&mine, &mut slowest, SystemOperation::max());
    (slowest, r)
}
