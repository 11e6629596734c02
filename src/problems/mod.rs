//! Problems: each pairs a problem generator with its driver loop.
//!
//! A problem is found by name (`parthenon/job/problem`, or `problem_id` when that is absent)
//! in [`PROBLEMS`]. Its `setup` reads its keys from the deck (its own block and any
//! `parthenon/*` keys it uses) and local data such as a matrix file, without communicating:
//! the driver then agrees across ranks, so that bad input on one rank stops all. Then
//! [`Problem::run`] runs the loop, collectively.
//!
//! Adding a problem: a module with a `pub const INFO: ProblemInfo` and one line in
//! [`PROBLEMS`].

pub mod advection;
pub mod heat2d;
pub mod poisson;
pub mod spmv;

use crate::deck::Deck;
use crate::run::stats::Summary;
use crate::run::RunContext;
use anyhow::Result;

/// A problem ready to run.
pub trait Problem {
    /// Runs to the problem's end (or the wall-time limit of `ctx.deadline`), writes its
    /// results under `ctx.out_dir` and prints progress every `ctx.ncycle_out` cycles.
    ///
    /// Collective. Failures must be collective too (decided on reduced values) so that no
    /// rank is left waiting in a communication.
    fn run(&mut self, ctx: &RunContext) -> Result<Summary>;

    /// Acquires what the run needs beyond the deck (a GPU), or says why it cannot; called
    /// once the whole deck is checked, by a dry run too. Must not communicate.
    fn acquire(&mut self) -> Result<()> {
        Ok(())
    }
}

/// How the driver finds and starts a problem.
pub struct ProblemInfo {
    /// The name in `parthenon/job/problem`.
    pub name: &'static str,
    /// The problem's own deck block: unread keys there are errors.
    pub block: &'static str,
    /// Whether `-r FILE` is accepted.
    pub restarts: bool,
    /// Whether it runs on a GPU (`parthenon/exec/space: cuda`).
    pub gpu: bool,
    /// Reads the problem's keys and local data; must not communicate.
    pub setup: fn(&Deck, &RunContext) -> Result<Box<dyn Problem>>,
}

/// Every problem the driver knows.
pub const PROBLEMS: &[ProblemInfo] = &[heat2d::INFO, spmv::INFO, advection::INFO, poisson::INFO];

/// The problem called `name`.
pub fn find(name: &str) -> Option<&'static ProblemInfo> {
    PROBLEMS.iter().find(|p| p.name == name)
}

/// The known names, for messages.
pub fn names() -> String {
    PROBLEMS
        .iter()
        .map(|p| p.name)
        .collect::<Vec<_>>()
        .join(", ")
}
