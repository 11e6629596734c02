//! `poisson`: Poisson's equation `∇²u = f` on a box by geometric multigrid, every level's
//! ghosts, restrictions and prolongations moved by the boundary crate's multigrid exchange
//! ([`GmgExchange`](starhalo_boundary::GmgExchange)).
//!
//! Each face of the box is `periodic`, Neumann `∂u/∂n = 0` (`reflecting` or `outflow`), or
//! Dirichlet `u = 0` (`user`: the problem's own condition, which it applies after every
//! ghost exchange). The right-hand side is that of a known solution,
//! `u = Π_d sin(a_d (x_d - xmin_d) + φ_d)` over the active directions, which meets them:
//! `k_d` whole periods across a periodic direction, `k_d` half periods between like faces (a
//! sine between Dirichlet ones, a cosine between Neumann ones), `k_d - 1/2` between unlike
//! ones (wave numbers `poisson/kx, ky, kz`); so `f = -Σ_d a_d² u`. The mesh is uniform; its
//! multigrid hierarchy runs from the leaf blocks down to the root blocks halved as far as
//! the ghosts allow (`starhalo_mesh::multigrid`). Its coarsest level is solved by conjugate
//! gradients, which keeps the number of V-cycles independent of the resolution; their
//! iterations grow with the root grid's cells across, so keep the root grid small.
//!
//! A V-cycle, level by level from the finest: `pre_smooth` sweeps of the `smoother` (`rbgs`,
//! red-black Gauss-Seidel, the default; `line`, zebra line or plane Gauss-Seidel for cells
//! far from square; or `jacobi`, weighted by `omega`), the residual restricted (volume
//! average) into the next level's right-hand side, whose correction starts at zero; on the
//! coarsest level conjugate gradients until its residual falls by `coarse_tol` (at most
//! `coarse_iters` iterations); back up, the coarse correction prolongated (linear) and added,
//! then `post_smooth` sweeps.
//!
//! `solver: cg` (the default) runs flexible conjugate gradients with one V-cycle as the
//! preconditioner of each iteration; `solver: mg` runs V-cycles alone. Either stops when
//! `||f - ∇²u|| <= tol ||f||` (2-norms over all cells) or after `max_iters` V-cycles; a residual
//! above where it started stops the run (exit 1). Point smoothers want cells close to
//! square: at an aspect ratio of 4, V-cycles alone stall, and CG needs about twice the
//! V-cycles it needs on square cells. The `line` smoother relaxes the strong coupling that
//! the coarse levels (coarsened in every direction) cannot carry. It solves every line of
//! cells along the narrowest cells' direction whole, across blocks and ranks (a star-forest
//! bcast per half sweep brings each rank the ends of its lines' pieces; see [`lines`]);
//! where cells are narrow in every direction, the lines along each in turn. Where cells
//! are narrow in two of three directions it solves every plane of cells across those two
//! whole instead, each on one rank (a star forest gathers it and takes the solution back;
//! see [`planes`]): lines along each in turn left the coupling across the plane, and
//! V-cycles alone diverged where both of its directions had Neumann faces. With it,
//! V-cycles need fewer iterations the farther cells are from square (128² cells: 8 at an
//! aspect ratio of 8, 2 at 64; 32³ cells 10 times narrower in two directions than in the
//! third: 3, with any faces, where lines took 26 to 52 or diverged).
//!
//! Without a Dirichlet face `u` is fixed up to a constant: the error against the exact
//! solution is then taken after removing the mean.
//!
//! Every wave number must be at least 1 and below half the cells across, sweeps and
//! iterations per level are bounded (100 sweeps before and after, at least one after;
//! 10,000 iterations on the coarsest) since the wall-time limit is checked between
//! V-cycles, cells may be at most 10^4 times longer one way than another, and the box's
//! scales must keep the squares of the residual normal numbers.
//!
//! A multigrid round still waiting for its messages after
//! `parthenon/time/recv_bdry_buf_timeout_sec` stops the job (exit 1) naming the round.
//!
//! Norms and the mean are exact sums ([`ExactSum`]) and every cell's arithmetic is the same on
//! any number of ranks, so the whole solve is the same bits on any number of ranks.

mod fcg;
mod grid;
mod lines;
mod outputs;
mod planes;
mod solver;

use super::{Problem, ProblemInfo};
use crate::deck::Deck;
use crate::output::OutputBlock;
use crate::run::collective::max_f64;
use crate::run::stats::{CommTimer, Stop, Summary};
use crate::run::RunContext;
use anyhow::{Context as _, Result};
use fcg::Fcg;
use grid::Grid;
use mpi::topology::Communicator;
use outputs::Outputs;
use solver::Solver;
use starhalo_mesh::{BoundaryCondition, Mesh};
use starhalo_sf::ExactSum;
use std::fmt::Write as _;

const BLOCK: &str = "poisson";
const MESH: &str = "parthenon/mesh";

/// The driver's entry for this problem.
pub const INFO: ProblemInfo = ProblemInfo {
    name: "poisson",
    block: BLOCK,
    restarts: false,
    gpu: false,
    setup,
};

struct Poisson {
    mesh: Mesh,
    /// The `parthenon/outputN` blocks (see [`outputs`]).
    outputs: Vec<OutputBlock>,
    /// The resolved deck, written into hdf5 outputs.
    deck_text: String,
    /// The condition on each face of the box (`[direction][low, high]`).
    faces: [[Face; 2]; 3],
    /// Angular wave number and phase of the exact solution per direction (see
    /// [`Face::mode`]; 0 along inactive directions).
    wave: [f64; 3],
    phase: [f64; 3],
    tol: f64,
    max_iters: u64,
    pre_smooth: usize,
    post_smooth: usize,
    coarse_tol: f64,
    coarse_iters: usize,
    smoother: Smoother,
    /// Flexible CG preconditioned by the V-cycle rather than V-cycles alone.
    krylov: bool,
}

/// What a face of the box holds `u` to.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Face {
    /// The box wraps around (`periodic`).
    Periodic,
    /// `∂u/∂n = 0` (`reflecting` or `outflow`, which the exchange fills by mirror and copy:
    /// the same first ghost layer, the only one the stencil reads).
    Neumann,
    /// `u = 0` (`user`: this problem's own boundary), its ghosts the interior mirrored with
    /// the sign flipped.
    Dirichlet,
}

impl Face {
    /// What the ghost beyond this face adds to the diagonal of the cell beside it when a
    /// solve takes it in, for a coupling `a = 1/h²` across the face: `a` for a Dirichlet
    /// ghost (`-u`), `-a` for a Neumann one (`u`), nothing through a periodic wrap.
    fn fold(self, a: f64) -> f64 {
        match self {
            Face::Dirichlet => a,
            Face::Neumann => -a,
            Face::Periodic => 0.0,
        }
    }

    /// The exact solution's factor along a direction `width` wide with faces `[low, high]`,
    /// `sin(wave (x - xmin) + phase)`, as `(wave, phase)`: `k` whole periods across a
    /// periodic box, `k` half periods between like faces (a sine between Dirichlet faces, a
    /// cosine between Neumann ones), `k - 1/2` between unlike ones.
    fn mode([low, high]: [Face; 2], k: f64, width: f64) -> (f64, f64) {
        use std::f64::consts::{FRAC_PI_2, PI, TAU};
        let phase = if low == Face::Neumann { FRAC_PI_2 } else { 0.0 };
        let half_periods = match (low, high) {
            (Face::Periodic, _) => return (TAU * k / width, 0.0),
            (a, b) if a == b => k,
            _ => k - 0.5,
        };
        (PI * half_periods / width, phase)
    }
}

/// How a sweep relaxes a level.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Smoother {
    /// Red-black Gauss-Seidel: the cells whose global indices sum to an even number, then the
    /// odd ones, each half from the other's latest values (a ghost fill before each half).
    RedBlack,
    /// Weighted Jacobi with this weight: every cell from the previous sweep's values.
    Jacobi(f64),
    /// Zebra line Gauss-Seidel: the lines of cells along each direction of strong coupling
    /// solved whole, alternate lines in two halves ([`Lines`](lines::Lines)).
    Line,
}

fn setup(deck: &Deck, ctx: &RunContext) -> Result<Box<dyn Problem>> {
    let mut config = deck.mesh_config()?;
    let ndim = config.ndim();
    let faces: [[Face; 2]; 3] = std::array::from_fn(|d| {
        std::array::from_fn(|side| match config.bc[d][side] {
            BoundaryCondition::Periodic => Face::Periodic,
            BoundaryCondition::Outflow | BoundaryCondition::Reflecting => Face::Neumann,
            BoundaryCondition::User => Face::Dirichlet,
        })
    });
    if config.is_multilevel() || !config.static_regions.is_empty() {
        return Err(deck
            .invalid(
                MESH,
                "refinement",
                "poisson solves on a uniform mesh (refinement: none, no static regions)",
            )
            .into());
    }
    let (mut wave, mut phase) = ([0.0; 3], [0.0; 3]);
    // A deck for more dimensions runs on fewer as it is, its extra wave numbers unused.
    for key in ["kx", "ky", "kz"].iter().skip(ndim) {
        if deck.has(BLOCK, key) {
            deck.get_usize(BLOCK, key)?;
            deck.ignore(BLOCK, [*key], &format!("a {ndim}-D mesh"));
        }
    }
    for (d, key) in ["kx", "ky", "kz"].iter().enumerate().take(ndim) {
        let kd = deck.get_usize_or(BLOCK, key, 1)?;
        // A zero factor makes the solution vanish; the grid must resolve the wave.
        if kd == 0 || kd.saturating_mul(2) >= config.nx[d] {
            return Err(deck
                .invalid(
                    BLOCK,
                    key,
                    format!(
                        "the wave number must be at least 1 and below half the {} cells across",
                        config.nx[d]
                    ),
                )
                .into());
        }
        let width = config.xmax[d] - config.xmin[d];
        (wave[d], phase[d]) = Face::mode(faces[d], kd as f64, width);
        // The exact solution's -wave^2 per direction and the stencil's 1/h^2 must be
        // normal numbers, with room for the residual's squares.
        let stencil = (config.nx[d] as f64 / width).powi(2);
        if !(1e-100..=1e100).contains(&wave[d].powi(2)) || !(1e-100..=1e100).contains(&stencil) {
            let key = format!("x{}max", d + 1);
            return Err(deck
                .invalid(
                    MESH,
                    &key,
                    format!("a box {width:e} wide is beyond the scales poisson solves at"),
                )
                .into());
        }
    }
    // Past this, the long direction's coupling is lost to rounding against the short one's
    // (measured: 10^4 still converges to the right answer at the default tol; 10^10 reports
    // convergence with a wrong one).
    const MAX_ASPECT: f64 = 1e4;
    let width = |d: usize| (config.xmax[d] - config.xmin[d]) / config.nx[d] as f64;
    let long = (0..ndim).max_by(|&a, &b| width(a).total_cmp(&width(b)));
    let short = (0..ndim).min_by(|&a, &b| width(a).total_cmp(&width(b)));
    if let (Some(long), Some(short)) = (long, short) {
        let aspect = width(long) / width(short);
        if aspect > MAX_ASPECT {
            return Err(deck
                .invalid(
                    MESH,
                    &format!("x{}max", long + 1),
                    format!(
                        "cells {aspect:e} times longer along x{} than along x{}: poisson takes cells at most {MAX_ASPECT:e} times longer one way than another",
                        long + 1,
                        short + 1
                    ),
                )
                .into());
        }
    }
    let tol = deck.get_nonneg_f64_or(BLOCK, "tol", 1e-10)?;
    let at_least = |key: &str, default: usize, least: usize| -> Result<usize> {
        match deck.get_usize_or(BLOCK, key, default)? {
            n if n < least => Err(deck
                .invalid(BLOCK, key, format!("must be at least {least}"))
                .into()),
            n => Ok(n),
        }
    };
    let max_iters = at_least("max_iters", 30, 1)? as u64;
    // Sweeps run between wall-time checks: bounded, so that -t can stop the run.
    let at_most = |key: &str, n: usize, most: usize| -> Result<usize> {
        match n {
            n if n > most => Err(deck
                .invalid(BLOCK, key, format!("must be at most {most}"))
                .into()),
            n => Ok(n),
        }
    };
    let pre_smooth = at_most("pre_smooth", at_least("pre_smooth", 2, 0)?, 100)?;
    // Without a sweep after it, the prolongated correction's rough part stays in the residual
    // (measured: the residual grows by 1.3 to 1.7 in the first V-cycle, with either smoother
    // or solver).
    let post_smooth = at_most("post_smooth", at_least("post_smooth", 2, 1)?, 100)?;
    let coarse_tol = deck.get_f64_or(BLOCK, "coarse_tol", 1e-2)?;
    if !(coarse_tol > 0.0 && coarse_tol < 1.0) {
        return Err(deck
            .invalid(BLOCK, "coarse_tol", "must lie in (0, 1)")
            .into());
    }
    let coarse_iters = at_most("coarse_iters", at_least("coarse_iters", 1000, 1)?, 10_000)?;
    let smoother = match deck.get_str_or(BLOCK, "smoother", "rbgs")?.as_str() {
        name @ ("rbgs" | "line") if deck.has(BLOCK, "omega") => {
            return Err(deck
                .invalid(
                    BLOCK,
                    "omega",
                    format!("weights smoother: jacobi only, not {name}"),
                )
                .into());
        }
        "rbgs" => Smoother::RedBlack,
        // A 1-D mesh is one line, solved whole: singular without a Dirichlet face.
        "line" if ndim == 1 => {
            return Err(deck
                .invalid(
                    BLOCK,
                    "smoother",
                    "line relaxes the lines of a 2-D or 3-D mesh; a 1-D mesh is a single line (use rbgs or jacobi)",
                )
                .into())
        }
        "line" => Smoother::Line,
        "jacobi" => {
            let omega = deck.get_f64_or(BLOCK, "omega", 0.8)?;
            if !(omega > 0.0 && omega <= 1.0) {
                return Err(deck
                    .invalid(BLOCK, "omega", "the Jacobi weight must lie in (0, 1]")
                    .into());
            }
            Smoother::Jacobi(omega)
        }
        other => {
            return Err(deck
                .invalid(
                    BLOCK,
                    "smoother",
                    format!("unknown smoother '{other}' (known: rbgs, line, jacobi)"),
                )
                .into())
        }
    };
    let krylov = match deck.get_str_or(BLOCK, "solver", "cg")?.as_str() {
        "mg" => false,
        "cg" => true,
        other => {
            return Err(deck
                .invalid(
                    BLOCK,
                    "solver",
                    format!("unknown solver '{other}' (known: mg, cg)"),
                )
                .into())
        }
    };
    // u and the residual with their multigrid copies, f and a scratch copy per level: about
    // six copies of one variable; conjugate gradients add five on the finest level.
    let budget = ctx.memory.budget(&config, 1, if krylov { 11 } else { 6 });
    config.max_blocks = budget.max_blocks();
    let nranks = ctx.world.size() as usize;
    let mesh = Mesh::new(config, nranks).map_err(|e| budget.deck_error(deck, e))?;
    let outputs = outputs::from_deck(deck, &mesh)?;
    Ok(Box::new(Poisson {
        mesh,
        outputs,
        deck_text: deck.to_yaml(),
        faces,
        wave,
        phase,
        tol,
        max_iters,
        pre_smooth,
        post_smooth,
        coarse_tol,
        coarse_iters,
        smoother,
        krylov,
    }))
}

impl Poisson {
    /// The mean of `u` over the box where `u` is fixed only up to a constant (no Dirichlet
    /// face), else 0; collective.
    fn mean(&self, s: &Solver, ctx: &RunContext, comm: &CommTimer) -> Result<f64> {
        let grid = &s.grids[0];
        if !grid.singular() {
            return Ok(0.0);
        }
        let data = s.u.level(0)?;
        let c = self.mesh.config();
        let volume: f64 = (0..grid.ndim).map(|d| c.xmax[d] - c.xmin[d]).product();
        let cell: f64 = grid.h[..grid.ndim].iter().product();
        let mut sum = [ExactSum::default()];
        for b in 0..data.gids().len() {
            let ub = data.fine(b, 0);
            sum[0].extend(grid.cells().map(|i| ub[i] * cell));
        }
        comm.time(|| ExactSum::all_reduce(ctx.world, &mut sum));
        Ok(sum[0].value() / volume)
    }

    /// The exact solution at `x`.
    fn exact(&self, x: [f64; 3]) -> f64 {
        let c = self.mesh.config();
        (0..self.mesh.ndim())
            .map(|d| (self.wave[d] * (x[d] - c.xmin[d]) + self.phase[d]).sin())
            .product()
    }

    /// `-Σ_d wave_d²`: the exact solution's `∇²u / u`.
    fn eigenvalue(&self) -> f64 {
        -self.wave.iter().map(|w| w * w).sum::<f64>()
    }

    fn center(&self, grid: &Grid, b: usize, p: [usize; 3]) -> [f64; 3] {
        let c = self.mesh.config();
        std::array::from_fn(|d| {
            if d < grid.ndim {
                c.xmin[d] + ((grid.first[b][d] + p[d]) as f64 + 0.5) * grid.h[d]
            } else {
                0.0
            }
        })
    }
}

impl Problem for Poisson {
    fn run(&mut self, ctx: &RunContext) -> Result<Summary> {
        let world = ctx.world;
        let comm = CommTimer::default();
        let mut s = Solver::new(self, ctx, &comm)?;
        let nlevels = s.grids.len();

        // f on the finest level, and its norm.
        let (lambda, scale) = (self.eigenvalue(), s.scale);
        let len = s.block_len(0);
        let mut ff = [ExactSum::default()];
        for b in 0..s.grids[0].first.len() {
            let fb = &mut s.f[0][b * len..(b + 1) * len];
            let grid = &s.grids[0];
            ff[0].extend(grid.interior().map(|p| {
                let i = grid.at(p);
                fb[i] = lambda * self.exact(self.center(grid, b, p));
                (fb[i] * scale).powi(2)
            }));
        }
        comm.time(|| ExactSum::all_reduce(world, &mut ff));
        let fnorm = ff[0].value().sqrt();

        let rel = |r: f64| if fnorm > 0.0 { r / fnorm } else { r };
        let mut outs = Outputs::new(&self.outputs, &self.deck_text);
        outs.write(self, &mut s, ctx, &comm, 0, false)?;
        let (r0, _) = s.residual_norm(false)?;
        let mut residuals = vec![rel(r0)];
        let mut stop = if residuals[0] <= self.tol {
            Stop::Converged
        } else {
            Stop::CycleLimit
        };
        let mut cycles = 0;
        let mut fcg = self.krylov.then(|| Fcg::new(&s)).transpose()?;
        while stop == Stop::CycleLimit && cycles < self.max_iters {
            match &mut fcg {
                Some(k) => s.fcg_iteration(k, self.pre_smooth, self.post_smooth)?,
                None => s.v_cycle(0, self.pre_smooth, self.post_smooth)?,
            }
            cycles += 1;
            let (r, expired) = s.residual_norm(ctx.deadline.expired())?;
            let r = rel(r);
            residuals.push(r);
            ctx.progress(cycles, || format!("relative_residual={r:.6e}"));
            outs.write(self, &mut s, ctx, &comm, cycles, false)?;
            // Decided on reduced values: every rank takes the same branch.
            if r.is_nan() || r > 1.0 {
                let h = &s.grids[0].h[..s.grids[0].ndim];
                let aspect = h.iter().copied().fold(0.0, f64::max)
                    / h.iter().copied().fold(f64::INFINITY, f64::min);
                let hint = match self.smoother {
                    _ if aspect <= 2.0 => String::new(),
                    Smoother::Line if !self.krylov => " (try poisson/solver=cg)".to_string(),
                    Smoother::Line => String::new(),
                    _ => format!(
                        " (cell widths {h:?}: point smoothers need cells close to square; try poisson/smoother=line)"
                    ),
                };
                anyhow::bail!(
                    "poisson: the solve diverges: relative residual {r:e} after V-cycle {cycles}, against 1 at the start{hint}"
                );
            } else if r <= self.tol {
                stop = Stop::Converged;
            } else if expired {
                stop = Stop::WallTime;
            }
        }

        // The error against the exact solution, less the mean where u is fixed only up to a
        // constant.
        outs.write(self, &mut s, ctx, &comm, cycles, true)?;
        let mean = self.mean(&s, ctx, &comm)?;
        let grid = &s.grids[0];
        let data = s.u.level(0)?;
        let mut err = 0.0f64;
        for b in 0..data.gids().len() {
            let ub = data.fine(b, 0);
            for p in grid.interior() {
                let e = (ub[grid.at(p)] - mean - self.exact(self.center(grid, b, p))).abs();
                err = err.max(if e.is_nan() { f64::INFINITY } else { e });
            }
        }
        let max_error = max_f64(world, err);
        let last = *residuals.last().unwrap_or(&f64::INFINITY);
        let cells = grid.total_cells;
        if ctx.is_root() {
            outln!(
                "poisson: {nlevels} levels, {cycles} V-cycles, relative residual {last:.6e}, max error vs exact {max_error:.6e}"
            );
            if stop == Stop::CycleLimit {
                tracing::warn!(
                    "poisson: relative residual {last:.3e} above tol {:.3e} after max_iters {}",
                    self.tol,
                    self.max_iters
                );
            }
            let path = ctx.out_file("poisson.dat");
            let text =
                self.result_text(nlevels, cycles, s.coarse_total, stop, &residuals, max_error);
            crate::output::write_atomically(&path, |w| w.write_all(text.as_bytes()))
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        Ok(Summary {
            cycles,
            work: cycles as f64 * cells,
            work_unit: "cell-V-cycles",
            comm: comm.total(),
            stop,
        })
    }
}

impl Poisson {
    /// The result file: settings, outcome and the residual after each V-cycle.
    fn result_text(
        &self,
        nlevels: usize,
        cycles: u64,
        coarse_iterations: u64,
        stop: Stop,
        residuals: &[f64],
        max_error: f64,
    ) -> String {
        let c = self.mesh.config();
        let mut s = String::new();
        let _ = writeln!(s, "# poisson: geometric multigrid");
        let _ = writeln!(s, "solver {}", if self.krylov { "cg" } else { "mg" });
        let _ = writeln!(
            s,
            "nx {} {} {}\nblock_nx {} {} {}\nlevels {nlevels}",
            c.nx[0], c.nx[1], c.nx[2], c.block_nx[0], c.block_nx[1], c.block_nx[2]
        );
        let stop = match stop {
            Stop::Converged => "converged",
            Stop::CycleLimit => "max_iters",
            Stop::WallTime => "wall_time",
        };
        let last = residuals.last().copied().unwrap_or(f64::INFINITY);
        let _ = writeln!(
            s,
            "v_cycles {cycles}\ncoarse_cg_iterations {coarse_iterations}\nstop {stop}\nrelative_residual {last:e}\nmax_error {max_error:e}"
        );
        let _ = writeln!(
            s,
            "# relative residual before the first V-cycle and after each"
        );
        for r in residuals {
            let _ = writeln!(s, "{r:e}");
        }
        s
    }
}
