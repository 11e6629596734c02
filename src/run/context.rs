//! What the driver hands a problem: the communicator, the output place, the limits.

use super::clock::Deadline;
use mpi::topology::{Communicator, SimpleCommunicator};
use starhalo_exec::tasks::{TaskError, TaskRegion};
use std::path::PathBuf;
use std::time::Duration;

/// The run's settings, decided by the driver from the command line and `parthenon/*`.
pub struct RunContext<'a> {
    /// All ranks of the job.
    pub world: &'a SimpleCommunicator,
    /// `parthenon/job/problem_id`: the base name of output files.
    pub problem_id: String,
    /// The `-d` directory (exists once the problem runs).
    pub out_dir: PathBuf,
    /// The `-t` limit.
    pub deadline: Deadline,
    /// `parthenon/time/ncycle_out`: a progress line every this many cycles (0: none).
    pub ncycle_out: u64,
    /// `parthenon/time/recv_bdry_buf_timeout_sec`: how long a task may stay incomplete.
    pub recv_timeout: Duration,
    /// The `-r` file, for problems that restart.
    pub restart: Option<PathBuf>,
    /// What memory the ranks have, to refuse meshes that cannot fit.
    pub memory: super::memory::Memory,
}

impl RunContext<'_> {
    /// True on the rank that speaks.
    pub fn is_root(&self) -> bool {
        self.world.rank() == 0
    }

    /// Whether [`progress`](Self::progress) prints a line for `cycle` on this rank.
    pub fn progress_due(&self, cycle: u64) -> bool {
        self.is_root() && self.ncycle_out > 0 && cycle.is_multiple_of(self.ncycle_out)
    }

    /// Prints a progress line on rank 0 when `cycle` is a multiple of `ncycle_out`.
    pub fn progress(&self, cycle: u64, line: impl FnOnce() -> String) {
        if self.progress_due(cycle) {
            outln!(
                "cycle={cycle} {} wall={:.3}s",
                line(),
                self.deadline.elapsed().as_secs_f64()
            );
        }
    }

    /// Runs `region` to completion. A task that stays incomplete past `recv_timeout` aborts
    /// the whole job after saying which: the ranks cannot agree on it, since the peers this
    /// rank waits for may be stuck or already in a later collective, and unwinding would
    /// wait on its sends in flight.
    pub fn execute(&self, region: &mut TaskRegion<'_>) -> Result<(), TaskError> {
        let done = region.execute();
        if let Err(e @ TaskError::Timeout { .. }) = &done {
            self.abort_stuck(e);
        }
        done
    }

    /// Says `e` (a wait that timed out) and aborts the whole job, for the reason given at
    /// [`execute`](Self::execute).
    pub fn abort_stuck(&self, e: impl std::fmt::Display) -> ! {
        crate::exit::say_error(self.world, format_args!("{e}"));
        // The launcher tears the job down at the abort and drops output it has not yet
        // forwarded: give it a moment to pass the line on.
        std::thread::sleep(Duration::from_millis(500));
        self.world.abort(1)
    }

    /// `<out_dir>/<problem_id>-<suffix>`.
    pub fn out_file(&self, suffix: &str) -> PathBuf {
        self.out_dir.join(format!("{}-{suffix}", self.problem_id))
    }
}
