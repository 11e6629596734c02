//! What a run reports: a progress line every `parthenon/time/ncycle_out` cycles and a
//! summary at the end (wall time, throughput, share of time spent communicating).

use super::collective::sum_f64;
use mpi::topology::{Communicator, SimpleCommunicator};
use std::cell::Cell;
use std::time::{Duration, Instant};

/// Accumulates the time spent in communication (exchanges and reductions). A `Cell`, so
/// that every task closure of a cycle can hold it by shared reference.
#[derive(Debug, Default)]
pub struct CommTimer(Cell<Duration>);

impl CommTimer {
    /// Runs `f`, counting its duration as communication.
    pub fn time<T>(&self, f: impl FnOnce() -> T) -> T {
        let t0 = Instant::now();
        let out = f();
        self.0.set(self.0.get() + t0.elapsed());
        out
    }

    /// Counts `d` as communication (measured by the caller).
    pub fn add(&self, d: Duration) {
        self.0.set(self.0.get() + d);
    }

    /// Time counted so far.
    pub fn total(&self) -> Duration {
        self.0.get()
    }
}

/// Why the run loop ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The problem's own criterion (tolerance) was met.
    Converged,
    /// The cycle limit was reached first.
    CycleLimit,
    /// The `-t` wall-time limit was reached.
    WallTime,
}

/// A problem's account of its run, the same on every rank except `comm`.
#[derive(Debug)]
pub struct Summary {
    /// Cycles (iterations) done.
    pub cycles: u64,
    /// Units of work done by all ranks together (cell updates, multiply-adds).
    pub work: f64,
    /// What a unit of work is, for the throughput line.
    pub work_unit: &'static str,
    /// This rank's communication time.
    pub comm: Duration,
    /// Why the run ended.
    pub stop: Stop,
}

impl Summary {
    /// Prints the summary on rank 0; collective (the communication share is the mean over
    /// ranks of each rank's share).
    pub fn print(&self, world: &SimpleCommunicator, problem: &str, wall: Duration) {
        let wall_s = wall.as_secs_f64().max(1e-9);
        let share = sum_f64(world, self.comm.as_secs_f64() / wall_s) / f64::from(world.size());
        if world.rank() != 0 {
            return;
        }
        let why = match self.stop {
            Stop::Converged => "converged",
            Stop::CycleLimit => "cycle limit reached",
            Stop::WallTime => "wall-time limit reached",
        };
        outln!(
            "summary: {problem} on {} rank{}: {} cycle{} ({why}), wall {:.3} s, {:.3e} {}/s, communication {:.1}% of wall time",
            world.size(),
            if world.size() == 1 { "" } else { "s" },
            self.cycles,
            if self.cycles == 1 { "" } else { "s" },
            wall.as_secs_f64(),
            self.work / wall_s,
            self.work_unit,
            100.0 * share,
        );
    }
}
