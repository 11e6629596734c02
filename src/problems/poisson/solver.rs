//! The multigrid solve on one rank: the smoothers, the residual, the coarsest level's
//! conjugate gradients and the V-cycle over a level hierarchy.

use super::grid::Grid;
use super::lines::Lines;
use super::planes::Planes;
use super::{Poisson, Smoother};
use crate::exit::bad_input;
use crate::run::stats::CommTimer;
use crate::run::RunContext;
use anyhow::{Context as _, Result};
use mpi::topology::{Communicator, SimpleCommunicator};
use starhalo_boundary::{BlockData, ExchangeOptions, GmgData, GmgExchange};
use starhalo_mesh::field::{Centering, Fields, Metadata};
use starhalo_mesh::multigrid::GmgLevel;
use starhalo_sf::ExactSum;

/// The storage and exchanges of the solve on one rank.
pub(super) struct Solver<'a> {
    pub(super) world: &'a SimpleCommunicator,
    pub(super) grids: Vec<Grid>,
    /// The unknown (correction on coarse levels), with ghosts; its exchange fills and
    /// prolongates.
    pub(super) u: GmgData,
    pub(super) u_ex: GmgExchange,
    /// The residual; its exchange restricts it into the next level.
    pub(super) r: GmgData,
    pub(super) r_ex: GmgExchange,
    /// The right-hand side of each level, laid out as the block arrays.
    pub(super) f: Vec<Vec<f64>>,
    /// One level's worth of block arrays: Jacobi's new values, the pre-prolongation copy.
    pub(super) scratch: Vec<f64>,
    /// The coarsest level's conjugate-gradient vectors: solution, residual, `-∇²p` (the
    /// search direction `p` lives in `u`, whose exchange fills its ghosts).
    pub(super) cg: [Vec<f64>; 3],
    pub(super) coarse_tol: f64,
    pub(super) coarse_iters: usize,
    /// Conjugate-gradient iterations on the coarsest level, over the whole solve.
    pub(super) coarse_total: u64,
    pub(super) comm: &'a CommTimer,
    pub(super) smoother: Smoother,
    /// Each level's line or plane solvers (see [`Zebra::of_level`]), with `smoother: line`.
    pub(super) lines: Vec<Vec<Zebra>>,
    /// Residuals are squared after this scaling (one over the size of `f`), so that their
    /// squares neither underflow nor overflow.
    pub(super) scale: f64,
}

/// One set of a level's zebra relaxation: the lines along one direction, or the planes
/// across two.
pub(super) enum Zebra {
    Lines(Lines),
    Planes(Planes),
}

impl Zebra {
    /// The relaxations of the level `grid` describes, for its directions of strong coupling
    /// (at least a quarter of the strongest: cells at most twice the narrowest width), a
    /// sweep relaxing each in turn. Two of three such directions get planes across them
    /// (lines along each in turn left the coupling across the plane, and V-cycles alone
    /// diverged); otherwise each gets lines along it. Collective: every rank sets up the
    /// same forests.
    fn of_level(grid: &Grid, level: &GmgLevel, world: &SimpleCommunicator) -> Result<Vec<Self>> {
        let narrowest = grid.h[..grid.ndim]
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min);
        let strong: Vec<usize> = (0..grid.ndim)
            .filter(|&d| grid.h[d] <= 2.0 * narrowest)
            .collect();
        if let [p, q] = strong[..] {
            if grid.ndim == 3 {
                return Ok(vec![Zebra::Planes(Planes::new(
                    grid,
                    level,
                    world,
                    [p, q],
                )?)]);
            }
        }
        strong
            .into_iter()
            .map(|x| Ok(Zebra::Lines(Lines::new(grid, level, world, x)?)))
            .collect()
    }

    fn relax(
        &mut self,
        grid: &Grid,
        data: &mut BlockData,
        f: &[f64],
        parity: usize,
        comm: &CommTimer,
    ) -> Result<()> {
        match self {
            Zebra::Lines(lines) => lines.relax(grid, data, f, parity, comm),
            Zebra::Planes(planes) => planes.relax(grid, data, f, parity, comm),
        }
    }
}

impl<'a> Solver<'a> {
    /// The storage, exchanges and (with `smoother: line`) line solvers of `problem`'s
    /// hierarchy on this rank. Collective.
    pub(super) fn new(
        problem: &Poisson,
        ctx: &RunContext<'a>,
        comm: &'a CommTimer,
    ) -> Result<Self> {
        let (world, mesh) = (ctx.world, &problem.mesh);
        let rank = world.rank() as usize;
        let storage = |name: &str| {
            let mut fields = Fields::default();
            fields
                .add(name, Metadata::new(Centering::Cell).fill_ghost())
                .map_err(|e| bad_input!("{e}"))?;
            GmgData::new(mesh, &fields, rank).map_err(crate::exit::storage_error)
        };
        let (u, r) = (storage("u")?, storage("r")?);
        let opts = ExchangeOptions {
            split: false,
            ..ExchangeOptions::default()
        };
        let exchange = |d: &GmgData| {
            let mut ex =
                GmgExchange::new(world, mesh, d, opts).context("poisson: multigrid exchange")?;
            ex.set_timeout(ctx.recv_timeout);
            anyhow::Ok(ex)
        };
        let (u_ex, r_ex) = (exchange(&u)?, exchange(&r)?);
        let levels = u.multigrid().levels();
        let grids: Vec<Grid> = levels
            .iter()
            .enumerate()
            .map(|(l, level)| Ok(Grid::new(mesh, level, u.level(l)?.gids(), problem.faces)))
            .collect::<Result<_>>()?;
        let lines = match problem.smoother {
            Smoother::Line => grids
                .iter()
                .zip(levels)
                .map(|(grid, level)| Zebra::of_level(grid, level, world))
                .collect::<Result<_>>()?,
            _ => Vec::new(),
        };
        // The block arrays of each level, one after the other, as `fine(b, 0)` holds them.
        let f: Vec<Vec<f64>> = grids
            .iter()
            .map(|g| vec![0.0; g.first.len() * g.dims.iter().product::<usize>()])
            .collect();
        let scratch = vec![0.0; f[0].len()];
        let cg = std::array::from_fn(|_| vec![0.0; f[f.len() - 1].len()]);
        Ok(Solver {
            world,
            grids,
            u,
            u_ex,
            r,
            r_ex,
            f,
            scratch,
            cg,
            coarse_tol: problem.coarse_tol,
            coarse_iters: problem.coarse_iters,
            coarse_total: 0,
            comm,
            smoother: problem.smoother,
            lines,
            scale: 1.0 / problem.eigenvalue().abs(),
        })
    }
}

impl Solver<'_> {
    pub(super) fn block_len(&self, l: usize) -> usize {
        self.grids[l].dims.iter().product()
    }

    /// Fills the ghosts of `u` on level `l` (see [`Grid::fill`]).
    pub(super) fn fill_u(&mut self, l: usize) -> Result<()> {
        self.grids[l].fill(l, &mut self.u_ex, &mut self.u, self.comm)
    }

    /// One sweep of the smoother on level `l`.
    pub(super) fn smooth(&mut self, l: usize) -> Result<()> {
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
    pub(super) fn gauss_seidel_half(&mut self, l: usize, parity: usize) -> Result<()> {
        self.fill_u(l)?;
        let len = self.block_len(l);
        let grid = &self.grids[l];
        let w = 1.0 / grid.diagonal();
        let data = self.u.level_mut(l)?;
        for b in 0..data.gids().len() {
            let (u, f) = (data.fine_mut(b, 0), &self.f[l][b * len..(b + 1) * len]);
            let first_sum: usize = grid.first[b][..grid.ndim].iter().sum();
            for k in 0..grid.n[2] {
                for j in 0..grid.n[1] {
                    // Every other cell of the row, from the first whose global indices sum
                    // to `parity` (j and k are 0 along inactive directions).
                    let row = grid.row(j, k);
                    let start = row.start + (parity + first_sum + j + k) % 2;
                    for i in (start..row.end).step_by(2) {
                        u[i] += w * (grid.laplacian(u, i) - f[i]);
                    }
                }
            }
        }
        Ok(())
    }

    /// Half a sweep of level `l`'s `x`-th set of zebra lines or planes (see
    /// [`Lines::relax`], [`Planes::relax`]).
    pub(super) fn line_half(&mut self, l: usize, x: usize, parity: usize) -> Result<()> {
        self.fill_u(l)?;
        let data = self.u.level_mut(l)?;
        self.lines[l][x].relax(&self.grids[l], data, &self.f[l], parity, self.comm)
    }

    /// One weighted-Jacobi sweep on level `l`.
    pub(super) fn jacobi(&mut self, l: usize, omega: f64) -> Result<()> {
        self.fill_u(l)?;
        let len = self.block_len(l);
        let grid = &self.grids[l];
        let w = omega / grid.diagonal();
        let data = self.u.level_mut(l)?;
        for b in 0..data.gids().len() {
            let (u, f) = (data.fine(b, 0), &self.f[l][b * len..(b + 1) * len]);
            let new = &mut self.scratch[b * len..(b + 1) * len];
            for i in grid.cells() {
                new[i] = u[i] - w * (f[i] - grid.laplacian(u, i));
            }
            let u = data.fine_mut(b, 0);
            for i in grid.cells() {
                u[i] = new[i];
            }
        }
        Ok(())
    }

    /// `r = f - ∇²u` on level `l` into the residual storage.
    pub(super) fn residual(&mut self, l: usize) -> Result<()> {
        self.fill_u(l)?;
        let len = self.block_len(l);
        let grid = &self.grids[l];
        let (u, r) = (self.u.level(l)?, self.r.level_mut(l)?);
        for b in 0..u.gids().len() {
            let (ub, f) = (u.fine(b, 0), &self.f[l][b * len..(b + 1) * len]);
            let rb = r.fine_mut(b, 0);
            for i in grid.cells() {
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
    pub(super) fn coarse_solve(&mut self) -> Result<()> {
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
            for i in grid.cells() {
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
            for i in grid.cells() {
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
                sums[0].extend(grid.cells().map(|i| {
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
                for i in grid.cells() {
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
                for i in grid.cells() {
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
    pub(super) fn v_cycle(&mut self, l: usize, pre: usize, post: usize) -> Result<()> {
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
            for i in grid.cells() {
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
    pub(super) fn residual_norm(&mut self, deadline_passed: bool) -> Result<(f64, bool)> {
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
