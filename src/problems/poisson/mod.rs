//! `poisson`: Poisson's equation `∇²u = f` on a box by geometric multigrid, every level's
//! ghosts, restrictions and prolongations moved by the boundary crate's multigrid exchange
//! ([`GmgExchange`]).
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
//! red-black Gauss-Seidel, the default; `line`, zebra line Gauss-Seidel along the narrowest
//! cells' direction; or `jacobi`, weighted by `omega`), the residual restricted (volume
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
//! V-cycles it needs on square cells. The line smoother relaxes the strong coupling that
//! the coarse levels (coarsened in every direction) cannot carry: it solves every line of
//! cells along the narrowest cells' direction whole, across blocks and ranks (a star-forest
//! bcast per half sweep brings each rank the ends of its lines' pieces; see [`lines`]), and
//! where cells are narrow in two or three directions, the lines along each in turn. With
//! it, V-cycles need fewer iterations the farther cells are from square (128² cells: 8 at
//! an aspect ratio of 8, 2 at 64). Cells narrow in two of three directions want planes
//! solved whole, which it does not do: V-cycles alone then slow down (26 at an aspect ratio
//! of 10, 32³ cells), or diverge where both of those directions have Neumann faces, while
//! CG still converges (11 and 21). Without a Dirichlet face `u` is fixed up to a constant:
//! the error against the exact solution is then taken after removing the mean.
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

mod lines;

use super::{Problem, ProblemInfo};
use crate::deck::Deck;
use crate::exit::bad_input;
use crate::run::collective::max_f64;
use crate::run::stats::{CommTimer, Stop, Summary};
use crate::run::RunContext;
use anyhow::{Context as _, Result};
use lines::Lines;
use mpi::topology::{Communicator, SimpleCommunicator};
use starhalo_boundary::{ExchangeOptions, GmgData, GmgExchange};
use starhalo_mesh::field::{Centering, Fields, Metadata};
use starhalo_mesh::multigrid::GmgLevel;
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
    setup,
};

struct Poisson {
    mesh: Mesh,
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
    /// solved whole, alternate lines in two halves ([`Lines`]).
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
    Ok(Box::new(Poisson {
        mesh,
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

/// The cells of one level of this rank: shape, spacing and where each block sits.
struct Grid {
    ndim: usize,
    /// Interior cells per block.
    n: [usize; 3],
    /// Ghost layers per direction (0 along inactive ones).
    g: [usize; 3],
    /// Block array sizes with ghosts.
    dims: [usize; 3],
    /// Cell widths.
    h: [f64; 3],
    /// First global cell index of each local block.
    first: Vec<[usize; 3]>,
    /// Cells across the level.
    across: [usize; 3],
    /// The condition on each face of the box.
    faces: [[Face; 2]; 3],
    /// Cells of the level on all ranks.
    total_cells: f64,
}

impl Grid {
    fn new(mesh: &Mesh, level: &GmgLevel, gids: &[usize], faces: [[Face; 2]; 3]) -> Self {
        let c = mesh.config();
        let ndim = mesh.ndim();
        let mut grid = Grid {
            ndim,
            n: level.block_nx,
            g: [0; 3],
            dims: [1; 3],
            h: [1.0; 3],
            first: Vec::with_capacity(gids.len()),
            across: [1; 3],
            faces,
            total_cells: (level.forest.len() * level.block_nx.iter().product::<usize>()) as f64,
        };
        // A uniform mesh: every block of a level has the tree level of block 0.
        let tree_level = level.forest.loc(0).map_or(0, |l| l.level());
        let across = level.forest.grid().extent(tree_level);
        for (d, &blocks) in across.iter().enumerate().take(ndim) {
            grid.g[d] = c.nghost;
            grid.dims[d] = grid.n[d] + 2 * c.nghost;
            grid.across[d] = blocks as usize * grid.n[d];
            grid.h[d] = (c.xmax[d] - c.xmin[d]) / grid.across[d] as f64;
        }
        for &gid in gids {
            let loc = level.forest.loc(gid).expect("a block of this level");
            grid.first
                .push(std::array::from_fn(|d| loc.lx_dir(d) as usize * grid.n[d]));
        }
        grid
    }

    /// Fills the ghosts of `u` on this level, `l`: the exchange (neighbours, the periodic
    /// wrap, Neumann faces), then the Dirichlet faces, each ghost the negated interior cell
    /// it mirrors, so that `u` is 0 halfway between.
    fn fill(
        &self,
        l: usize,
        ex: &mut GmgExchange,
        u: &mut GmgData,
        comm: &CommTimer,
    ) -> Result<()> {
        comm.time(|| ex.fill(l, u))?;
        let data = u.level_mut(l)?;
        for b in 0..data.gids().len() {
            let u = data.fine_mut(b, 0);
            for d in 0..self.ndim {
                let (g, n, s) = (self.g[d], self.n[d], self.stride(d));
                for side in 0..2 {
                    if self.face(b, d, side) != Some(Face::Dirichlet) {
                        continue;
                    }
                    // Ghost layer x mirrors interior layer m; each layer along d is the
                    // lines below it (`s` values), every `s * dims[d]`.
                    for j in 0..g {
                        let (x, m) = if side == 0 {
                            (g - 1 - j, g + j)
                        } else {
                            (g + n + j, g + n - 1 - j)
                        };
                        for base in (0..u.len()).step_by(s * self.dims[d]) {
                            for i in 0..s {
                                u[base + x * s + i] = -u[base + m * s + i];
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The condition on side `side` (0 low, 1 high) of local block `b` along `d`, where that
    /// side lies on the box's face (`None` inside the box).
    fn face(&self, b: usize, d: usize, side: usize) -> Option<Face> {
        let on_face = if side == 0 {
            self.first[b][d] == 0
        } else {
            self.first[b][d] + self.n[d] == self.across[d]
        };
        on_face.then_some(self.faces[d][side])
    }

    /// Whether no face holds `u` to a value: `-∇²` then has the constants as its null space,
    /// and `u` is fixed only up to a constant.
    fn singular(&self) -> bool {
        !self.faces[..self.ndim]
            .iter()
            .flatten()
            .any(|&f| f == Face::Dirichlet)
    }

    fn stride(&self, d: usize) -> usize {
        self.dims[..d].iter().product()
    }

    /// Array index of interior cell `p` of a block.
    fn at(&self, p: [usize; 3]) -> usize {
        (0..3).map(|d| (p[d] + self.g[d]) * self.stride(d)).sum()
    }

    fn interior(&self) -> impl Iterator<Item = [usize; 3]> + '_ {
        let n = self.n;
        (0..n[2]).flat_map(move |k| (0..n[1]).flat_map(move |j| (0..n[0]).map(move |i| [i, j, k])))
    }

    /// The interior values of a block array.
    fn values<'a>(&'a self, v: &'a [f64]) -> impl Iterator<Item = f64> + 'a {
        self.interior().map(|p| v[self.at(p)])
    }

    /// The squares of the interior values of a block array times `scale`: the terms of a
    /// scaled 2-norm.
    fn squares<'a>(&'a self, v: &'a [f64], scale: f64) -> impl Iterator<Item = f64> + 'a {
        self.values(v).map(move |x| (x * scale).powi(2))
    }

    /// `∇²u` at array index `i` (the 2nd-order central stencil).
    fn laplacian(&self, u: &[f64], i: usize) -> f64 {
        (0..self.ndim)
            .map(|d| {
                let s = self.stride(d);
                (u[i + s] + u[i - s] - 2.0 * u[i]) / (self.h[d] * self.h[d])
            })
            .sum()
    }

    /// `2 Σ_d 1/h_d²`: minus the stencil's diagonal.
    fn diagonal(&self) -> f64 {
        (0..self.ndim).map(|d| 2.0 / (self.h[d] * self.h[d])).sum()
    }
}

/// The storage and exchanges of the solve on one rank.
struct Solver<'a> {
    world: &'a SimpleCommunicator,
    grids: Vec<Grid>,
    /// The unknown (correction on coarse levels), with ghosts; its exchange fills and
    /// prolongates.
    u: GmgData,
    u_ex: GmgExchange,
    /// The residual; its exchange restricts it into the next level.
    r: GmgData,
    r_ex: GmgExchange,
    /// The right-hand side of each level, laid out as the block arrays.
    f: Vec<Vec<f64>>,
    /// One level's worth of block arrays: Jacobi's new values, the pre-prolongation copy.
    scratch: Vec<f64>,
    /// The coarsest level's conjugate-gradient vectors: solution, residual, `-∇²p` (the
    /// search direction `p` lives in `u`, whose exchange fills its ghosts).
    cg: [Vec<f64>; 3],
    coarse_tol: f64,
    coarse_iters: usize,
    /// Conjugate-gradient iterations on the coarsest level, over the whole solve.
    coarse_total: u64,
    comm: &'a CommTimer,
    smoother: Smoother,
    /// Each level's line solvers, one per direction of strong coupling, with
    /// `smoother: line`.
    lines: Vec<Vec<Lines>>,
    /// Residuals are squared after this scaling (one over the size of `f`), so that their
    /// squares neither underflow nor overflow.
    scale: f64,
}

impl Solver<'_> {
    fn block_len(&self, l: usize) -> usize {
        self.grids[l].dims.iter().product()
    }

    /// Fills the ghosts of `u` on level `l` (see [`Grid::fill`]).
    fn fill_u(&mut self, l: usize) -> Result<()> {
        self.grids[l].fill(l, &mut self.u_ex, &mut self.u, self.comm)
    }

    /// One sweep of the smoother on level `l`.
    fn smooth(&mut self, l: usize) -> Result<()> {
        match self.smoother {
            Smoother::RedBlack => {
                self.gauss_seidel_half(l, 0)?;
                self.gauss_seidel_half(l, 1)
            }
            Smoother::Jacobi(omega) => self.jacobi(l, omega),
            Smoother::Line => {
                for x in 0..self.lines[l].len() {
                    self.line_half(l, x, 0)?;
                    self.line_half(l, x, 1)?;
                }
                Ok(())
            }
        }
    }

    /// Sets every cell of level `l` whose global indices sum to `parity` (mod 2) so that its
    /// row of `∇²u = f` holds. Its neighbours have the other parity (through the wrap too,
    /// where a level has an even number of cells across; otherwise they are read from the
    /// ghosts, filled before), so the result does not depend on how blocks are placed. A
    /// Dirichlet ghost mirrors the cell itself and keeps its value from before the half, so
    /// a boundary cell's row holds only as the sweeps converge.
    fn gauss_seidel_half(&mut self, l: usize, parity: usize) -> Result<()> {
        self.fill_u(l)?;
        let len = self.block_len(l);
        let grid = &self.grids[l];
        let w = 1.0 / grid.diagonal();
        let data = self.u.level_mut(l)?;
        for b in 0..data.gids().len() {
            let (u, f) = (data.fine_mut(b, 0), &self.f[l][b * len..(b + 1) * len]);
            let first = grid.first[b];
            for p in grid.interior() {
                if (0..grid.ndim).map(|d| first[d] + p[d]).sum::<usize>() % 2 == parity {
                    let i = grid.at(p);
                    u[i] += w * (grid.laplacian(u, i) - f[i]);
                }
            }
        }
        Ok(())
    }

    /// Half a sweep of level `l`'s `x`-th set of zebra lines (see [`Lines::relax`]).
    fn line_half(&mut self, l: usize, x: usize, parity: usize) -> Result<()> {
        self.fill_u(l)?;
        let data = self.u.level_mut(l)?;
        self.lines[l][x].relax(&self.grids[l], data, &self.f[l], parity, self.comm)
    }

    /// One weighted-Jacobi sweep on level `l`.
    fn jacobi(&mut self, l: usize, omega: f64) -> Result<()> {
        self.fill_u(l)?;
        let len = self.block_len(l);
        let grid = &self.grids[l];
        let w = omega / grid.diagonal();
        let data = self.u.level_mut(l)?;
        for b in 0..data.gids().len() {
            let (u, f) = (data.fine(b, 0), &self.f[l][b * len..(b + 1) * len]);
            let new = &mut self.scratch[b * len..(b + 1) * len];
            for p in grid.interior() {
                let i = grid.at(p);
                new[i] = u[i] - w * (f[i] - grid.laplacian(u, i));
            }
            let u = data.fine_mut(b, 0);
            for p in grid.interior() {
                let i = grid.at(p);
                u[i] = new[i];
            }
        }
        Ok(())
    }

    /// `r = f - ∇²u` on level `l` into the residual storage.
    fn residual(&mut self, l: usize) -> Result<()> {
        self.fill_u(l)?;
        let len = self.block_len(l);
        let grid = &self.grids[l];
        let (u, r) = (self.u.level(l)?, self.r.level_mut(l)?);
        for b in 0..u.gids().len() {
            let (ub, f) = (u.fine(b, 0), &self.f[l][b * len..(b + 1) * len]);
            let rb = r.fine_mut(b, 0);
            for p in grid.interior() {
                let i = grid.at(p);
                rb[i] = f[i] - grid.laplacian(ub, i);
            }
        }
        Ok(())
    }

    /// Solves the coarsest level's `∇²u = f` by conjugate gradients on `-∇²`, from the `u`
    /// it holds (zero below the finest level), until the residual falls by `coarse_tol`,
    /// reaches rounding level against `f`, or after `coarse_iters` iterations.
    ///
    /// Without a Dirichlet face `-∇²` is singular with the constants as its null space.
    /// Rounding gives the residual and each `∇²p` a small mean, which CG cannot remove: it
    /// would push `u` along the constants without end once the rest is solved. Both then
    /// lose their means (in the same reductions as the dot products), so CG stays in the
    /// constants' complement. Dot products are exact sums over scaled values, so every rank
    /// count gives the same bits.
    fn coarse_solve(&mut self) -> Result<()> {
        let l = self.grids.len() - 1;
        let (len, scale) = (self.block_len(l), self.scale);
        let grid = &self.grids[l];
        let [x, r, q] = &mut self.cg;
        let f = &self.f[l];
        let blocks = f.len() / len;
        // x = u, r = ∇²x - f (the residual of -∇²x = -f), with |f|².
        grid.fill(l, &mut self.u_ex, &mut self.u, self.comm)?;
        let u = self.u.level(l)?;
        let mut sums: [ExactSum; 2] = Default::default();
        for b in 0..blocks {
            let (fb, rb) = (&f[b * len..(b + 1) * len], &mut r[b * len..(b + 1) * len]);
            let xb = &mut x[b * len..(b + 1) * len];
            xb.copy_from_slice(u.fine(b, 0));
            for p in grid.interior() {
                let i = grid.at(p);
                rb[i] = grid.laplacian(xb, i) - fb[i];
            }
            sums[0].extend(grid.values(rb));
            sums[1].extend(grid.squares(fb, scale));
        }
        self.comm
            .time(|| ExactSum::all_reduce(self.world, &mut sums));
        // Means are removed only where the constants are the null space.
        let mean_of = |sum: &ExactSum| {
            if grid.singular() {
                sum.value() / grid.total_cells
            } else {
                0.0
            }
        };
        let (mean, ff) = (mean_of(&sums[0]), sums[1].value());
        // r loses its mean; p = r, held in u so that its exchange fills the ghosts.
        let u = self.u.level_mut(l)?;
        let mut rr = [ExactSum::default()];
        for b in 0..blocks {
            let (rb, pb) = (&mut r[b * len..(b + 1) * len], u.fine_mut(b, 0));
            for p in grid.interior() {
                let i = grid.at(p);
                rb[i] -= mean;
                pb[i] = rb[i];
            }
            rr[0].extend(grid.squares(rb, scale));
        }
        self.comm.time(|| ExactSum::all_reduce(self.world, &mut rr));
        let mut rr = rr[0].value();
        // Below this the residual is rounding in ∇²x against f: nothing left to solve.
        let floor =
            (self.coarse_tol * self.coarse_tol * rr).max(ff * (64.0 * f64::EPSILON).powi(2));
        let mut iters = 0;
        while rr > floor && iters < self.coarse_iters {
            grid.fill(l, &mut self.u_ex, &mut self.u, self.comm)?;
            let u = self.u.level(l)?;
            // q = -∇²p, with p·q and the mean of q.
            let mut sums: [ExactSum; 2] = Default::default();
            for b in 0..blocks {
                let (pb, qb) = (u.fine(b, 0), &mut q[b * len..(b + 1) * len]);
                sums[0].extend(grid.interior().map(|p| {
                    let i = grid.at(p);
                    qb[i] = -grid.laplacian(pb, i);
                    (pb[i] * scale) * (qb[i] * scale)
                }));
                sums[1].extend(grid.values(qb));
            }
            self.comm
                .time(|| ExactSum::all_reduce(self.world, &mut sums));
            let (pq, q_mean) = (sums[0].value(), mean_of(&sums[1]));
            let alpha = rr / pq;
            // p·q vanishes only when p is rounding: stop rather than divide by it.
            if !(pq > 0.0 && alpha.is_finite()) {
                break;
            }
            let mut next = [ExactSum::default()];
            for b in 0..blocks {
                let (xb, rb) = (
                    &mut x[b * len..(b + 1) * len],
                    &mut r[b * len..(b + 1) * len],
                );
                let (pb, qb) = (u.fine(b, 0), &q[b * len..(b + 1) * len]);
                for p in grid.interior() {
                    let i = grid.at(p);
                    xb[i] += alpha * pb[i];
                    rb[i] -= alpha * (qb[i] - q_mean);
                }
                next[0].extend(grid.squares(rb, scale));
            }
            self.comm
                .time(|| ExactSum::all_reduce(self.world, &mut next));
            let beta = next[0].value() / rr;
            rr = next[0].value();
            let u = self.u.level_mut(l)?;
            for b in 0..blocks {
                let (pb, rb) = (u.fine_mut(b, 0), &r[b * len..(b + 1) * len]);
                for p in grid.interior() {
                    let i = grid.at(p);
                    pb[i] = rb[i] + beta * pb[i];
                }
            }
            iters += 1;
        }
        self.coarse_total += iters as u64;
        let u = self.u.level_mut(l)?;
        for b in 0..blocks {
            u.fine_mut(b, 0).copy_from_slice(&x[b * len..(b + 1) * len]);
        }
        Ok(())
    }

    /// One V-cycle from level `l` down.
    fn v_cycle(&mut self, l: usize, pre: usize, post: usize) -> Result<()> {
        if l + 1 == self.grids.len() {
            return self.coarse_solve();
        }
        for _ in 0..pre {
            self.smooth(l)?;
        }
        self.residual(l)?;
        self.comm.time(|| self.r_ex.restrict(l, &mut self.r))?;
        // The coarse right-hand side is the restricted residual; its correction starts at 0.
        let len = self.block_len(l + 1);
        let (r, u) = (self.r.level(l + 1)?, self.u.level_mut(l + 1)?);
        for b in 0..r.gids().len() {
            self.f[l + 1][b * len..(b + 1) * len].copy_from_slice(r.fine(b, 0));
            u.fine_mut(b, 0).fill(0.0);
        }
        self.v_cycle(l + 1, pre, post)?;
        // u += P e: keep u, let the prolongation overwrite the interior, add u back.
        let len = self.block_len(l);
        let u = self.u.level(l)?;
        for b in 0..u.gids().len() {
            self.scratch[b * len..(b + 1) * len].copy_from_slice(u.fine(b, 0));
        }
        self.fill_u(l + 1)?;
        self.comm.time(|| self.u_ex.prolongate(l, &mut self.u))?;
        let grid = &self.grids[l];
        let u = self.u.level_mut(l)?;
        for b in 0..u.gids().len() {
            let (ub, kept) = (u.fine_mut(b, 0), &self.scratch[b * len..(b + 1) * len]);
            for p in grid.interior() {
                let i = grid.at(p);
                ub[i] += kept[i];
            }
        }
        for _ in 0..post {
            self.smooth(l)?;
        }
        Ok(())
    }

    /// The 2-norm of the finest level's residual over all ranks, and whether any rank's
    /// wall time ran out (in the same reduction, so that every rank stops together).
    fn residual_norm(&mut self, deadline_passed: bool) -> Result<(f64, bool)> {
        let mut expired = ExactSum::default();
        expired.add(f64::from(u8::from(deadline_passed)));
        self.residual(0)?;
        let grid = &self.grids[0];
        let r = self.r.level(0)?;
        let mut rr = ExactSum::default();
        for b in 0..r.gids().len() {
            rr.extend(grid.squares(r.fine(b, 0), self.scale));
        }
        let mut sums = [rr, expired];
        self.comm
            .time(|| ExactSum::all_reduce(self.world, &mut sums));
        Ok((sums[0].value().sqrt(), sums[1].value() > 0.0))
    }
}

/// Flexible conjugate gradients on the finest level's block arrays, preconditioned by one
/// V-cycle per iteration (Notay's FCG with one direction kept: the V-cycle is neither
/// symmetric nor, with its coarse CG, linear, so each new direction is made conjugate to the
/// last explicitly rather than through the usual recurrence).
struct Fcg {
    /// The right-hand side, which `f[0]` holds outside the V-cycle.
    b: Vec<f64>,
    x: Vec<f64>,
    /// The preconditioned residual.
    z: Vec<f64>,
    p: Vec<f64>,
    /// `∇²p`.
    q: Vec<f64>,
    /// `p·q` (scaled), or `None` before the first direction.
    pq: Option<f64>,
}

impl Fcg {
    fn new(s: &Solver) -> Result<Self> {
        let len = s.f[0].len();
        let mut x = vec![0.0; len];
        s.get_finest(&s.u, &mut x)?;
        Ok(Fcg {
            b: s.f[0].clone(),
            x,
            z: vec![0.0; len],
            p: vec![0.0; len],
            q: vec![0.0; len],
            pq: None,
        })
    }
}

impl Solver<'_> {
    /// Copies the finest level's block arrays of `data` into `v` (laid out as `f[0]`).
    fn get_finest(&self, data: &GmgData, v: &mut [f64]) -> Result<()> {
        let level = data.level(0)?;
        for (b, vb) in v.chunks_exact_mut(self.block_len(0)).enumerate() {
            vb.copy_from_slice(level.fine(b, 0));
        }
        Ok(())
    }

    /// Sets the finest level's block arrays of `u` from `v` (laid out as `f[0]`).
    fn set_finest_u(&mut self, v: &[f64]) -> Result<()> {
        let len = self.block_len(0);
        let level = self.u.level_mut(0)?;
        for (b, vb) in v.chunks_exact(len).enumerate() {
            level.fine_mut(b, 0).copy_from_slice(vb);
        }
        Ok(())
    }

    /// `Σ a_i (scale b_i)` over the interiors of the finest level's block arrays of this rank.
    fn dot(&self, a: &[f64], b: &[f64]) -> ExactSum {
        let (grid, len) = (&self.grids[0], self.block_len(0));
        let mut sum = ExactSum::default();
        for (ab, bb) in a.chunks_exact(len).zip(b.chunks_exact(len)) {
            sum.extend(grid.interior().map(|p| {
                let i = grid.at(p);
                ab[i] * (self.scale * bb[i])
            }));
        }
        sum
    }

    /// One iteration of [`Fcg`], from `u = x`, `f[0] = b` and their residual in `r` (as
    /// [`Solver::residual_norm`] leaves them) to the same after the step.
    fn fcg_iteration(&mut self, k: &mut Fcg, pre: usize, post: usize) -> Result<()> {
        // z = M r: the V-cycle for ∇²z = r from z = 0; f[0] holds r until the step ends.
        let mut r = std::mem::take(&mut self.f[0]);
        self.get_finest(&self.r, &mut r)?;
        self.f[0] = r;
        let level = self.u.level_mut(0)?;
        for b in 0..level.gids().len() {
            level.fine_mut(b, 0).fill(0.0);
        }
        self.v_cycle(0, pre, post)?;
        self.get_finest(&self.u, &mut k.z)?;
        // p = z + β p with β = -(z·q)/(p·q), conjugate to the last direction.
        let beta = match k.pq {
            None => 0.0,
            Some(pq) => {
                let mut zq = [self.dot(&k.z, &k.q)];
                self.comm.time(|| ExactSum::all_reduce(self.world, &mut zq));
                -zq[0].value() / pq
            }
        };
        for (p, z) in k.p.iter_mut().zip(&k.z) {
            *p = z + beta * *p;
        }
        // q = ∇²p, with p's ghosts filled through u.
        self.set_finest_u(&k.p)?;
        self.fill_u(0)?;
        let (grid, len) = (&self.grids[0], self.block_len(0));
        let u = self.u.level(0)?;
        for (b, q) in k.q.chunks_exact_mut(len).enumerate() {
            let pb = u.fine(b, 0);
            for p in grid.interior() {
                let i = grid.at(p);
                q[i] = grid.laplacian(pb, i);
            }
        }
        let mut sums = [self.dot(&k.p, &k.q), self.dot(&k.p, &self.f[0])];
        self.comm
            .time(|| ExactSum::all_reduce(self.world, &mut sums));
        let pq = sums[0].value();
        let alpha = sums[1].value() / pq;
        k.pq = Some(pq);
        for (x, p) in k.x.iter_mut().zip(&k.p) {
            *x += alpha * p;
        }
        self.set_finest_u(&k.x)?;
        self.f[0].copy_from_slice(&k.b);
        Ok(())
    }
}

impl Poisson {
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
        let rank = world.rank() as usize;
        let mut fields = Fields::default();
        fields
            .add("u", Metadata::new(Centering::Cell).fill_ghost())
            .map_err(|e| bad_input!("{e}"))?;
        let mut rfields = Fields::default();
        rfields
            .add("r", Metadata::new(Centering::Cell).fill_ghost())
            .map_err(|e| bad_input!("{e}"))?;
        let storage =
            |f: &Fields| GmgData::new(&self.mesh, f, rank).map_err(crate::exit::storage_error);
        let (u, r) = (storage(&fields)?, storage(&rfields)?);
        let opts = ExchangeOptions {
            split: false,
            ..ExchangeOptions::default()
        };
        let exchange = |d: &GmgData| {
            let mut ex = GmgExchange::new(world, &self.mesh, d, opts)
                .context("poisson: multigrid exchange")?;
            ex.set_timeout(ctx.recv_timeout);
            anyhow::Ok(ex)
        };
        let (u_ex, r_ex) = (exchange(&u)?, exchange(&r)?);
        let levels = u.multigrid().levels();
        let grids: Vec<Grid> = (0..levels.len())
            .map(|l| {
                Ok(Grid::new(
                    &self.mesh,
                    &levels[l],
                    u.level(l)?.gids(),
                    self.faces,
                ))
            })
            .collect::<Result<_>>()?;
        let nlevels = grids.len();
        let lines = match self.smoother {
            Smoother::Line => grids
                .iter()
                .zip(levels)
                .map(|(grid, level)| Lines::of_level(grid, level, world))
                .collect::<Result<_>>()?,
            _ => Vec::new(),
        };
        // The block arrays of each level, one after the other, as `fine(b, 0)` holds them.
        let f: Vec<Vec<f64>> = (0..nlevels)
            .map(|l| {
                Ok(vec![
                    0.0;
                    grids[l].first.len()
                        * grids[l].dims.iter().product::<usize>()
                ])
            })
            .collect::<Result<_>>()?;
        let scratch = vec![0.0; f[0].len()];
        let cg = std::array::from_fn(|_| vec![0.0; f[nlevels - 1].len()]);
        let comm = CommTimer::default();
        let mut s = Solver {
            world,
            grids,
            u,
            u_ex,
            r,
            r_ex,
            f,
            scratch,
            cg,
            coarse_tol: self.coarse_tol,
            coarse_iters: self.coarse_iters,
            coarse_total: 0,
            comm: &comm,
            smoother: self.smoother,
            lines,
            scale: 1.0 / self.eigenvalue().abs(),
        };

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
        let grid = &s.grids[0];
        let data = s.u.level(0)?;
        let c = self.mesh.config();
        let volume: f64 = (0..grid.ndim).map(|d| c.xmax[d] - c.xmin[d]).product();
        let cell: f64 = grid.h[..grid.ndim].iter().product();
        let mut sum = [ExactSum::default()];
        for b in 0..data.gids().len() {
            let ub = data.fine(b, 0);
            sum[0].extend(grid.interior().map(|p| ub[grid.at(p)] * cell));
        }
        comm.time(|| ExactSum::all_reduce(world, &mut sum));
        let mean = if grid.singular() {
            sum[0].value() / volume
        } else {
            0.0
        };
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
