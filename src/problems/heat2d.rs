//! `heat2d`: the steady 2-D heat equation by Jacobi iterations, the classic ghost-row
//! exchange benchmark (as in the OpenSHMEM 2D-heat test).
//!
//! The unit square holds `nx x ny` unknowns at `(x_j, y_i) = ((j+1)/(nx+1), (i+1)/(ny+1))`,
//! split over the ranks by rows. The boundary holds a profile whose steady state is known:
//! `harmonic` is `T = x^2 - y^2`, which the 5-point stencil reproduces exactly (its discrete
//! Laplacian vanishes for any spacing), `linear` is `T = 1 + 2x - y`. Jacobi converges to
//! it, so the error printed at the end measures how far the iteration got.
//!
//! Each iteration fills the two ghost rows from the neighbours' boundary rows with a star
//! forest bcast: leaves are the ghost rows, roots the neighbours' rows; both are contiguous,
//! so the forest hands them to MPI without packing. The cycle is a task list: interior rows
//! (which need no ghost) do not depend on the exchange; edge rows do.
//!
//! Every point's update is the same arithmetic on any number of ranks, and the residual (the
//! largest change in one iteration) is a maximum, so results are bit-for-bit identical on
//! any number of ranks.

use super::{Problem, ProblemInfo};
use crate::deck::Deck;
use crate::run::collective::max_f64;
use crate::run::stats::{CommTimer, Stop, Summary};
use crate::run::RunContext;
use anyhow::{Context as _, Result};
use mpi::collective::SystemOperation;
use mpi::topology::Communicator;
use mpi::traits::CommunicatorCollectives;
use starhalo_exec::tasks::{TaskList, TaskRegion, TaskStatus};
use starhalo_sf::{Graph, Op, RootRef, SfOptions, StarForest};
use std::cell::{Cell, RefCell};
use std::fmt::Write as _;

const BLOCK: &str = "heat2d";

/// The driver's entry for this problem.
pub const INFO: ProblemInfo = ProblemInfo {
    name: "heat2d",
    block: BLOCK,
    restarts: false,
    gpu: false,
    setup,
};

/// Boundary values with a known steady state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Profile {
    Harmonic,
    Linear,
}

impl Profile {
    fn at(self, x: f64, y: f64) -> f64 {
        match self {
            Profile::Harmonic => x * x - y * y,
            Profile::Linear => 1.0 + 2.0 * x - y,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Profile::Harmonic => "harmonic",
            Profile::Linear => "linear",
        }
    }
}

struct Heat2d {
    nx: usize,
    ny: usize,
    tol: f64,
    max_iters: u64,
    check_every: u64,
    profile: Profile,
}

/// Largest grid accepted: keeps a typo from asking for terabytes.
const MAX_POINTS: usize = 1 << 28;

fn setup(deck: &Deck, ctx: &RunContext) -> Result<Box<dyn Problem>> {
    let ranks = ctx.world.size() as usize;
    let nx = deck.get_usize_or(BLOCK, "nx", 32)?;
    if nx == 0 {
        return Err(deck.invalid(BLOCK, "nx", "must be at least 1").into());
    }
    let ny = deck.get_usize_or(BLOCK, "ny", nx)?;
    if ny < ranks {
        return Err(deck
            .invalid(
                BLOCK,
                "ny",
                format!(
                    "{ny} row{} cannot be split over {ranks} rank{} (each needs a row)",
                    if ny == 1 { "" } else { "s" },
                    if ranks == 1 { "" } else { "s" }
                ),
            )
            .into());
    }
    if nx.checked_mul(ny).is_none_or(|n| n > MAX_POINTS) {
        // Blame the larger factor: that is the one a typo made too big.
        let key = if ny > nx { "ny" } else { "nx" };
        return Err(deck
            .invalid(
                BLOCK,
                key,
                format!("nx * ny = {nx} * {ny} exceeds {MAX_POINTS} points"),
            )
            .into());
    }
    let tol = deck.get_nonneg_f64_or(BLOCK, "tol", 1e-8)?;
    let positive = |key: &str, default: usize| -> Result<u64> {
        match deck.get_usize_or(BLOCK, key, default)? {
            0 => Err(deck.invalid(BLOCK, key, "must be at least 1").into()),
            n => Ok(n as u64),
        }
    };
    let max_iters = positive("max_iters", 10_000)?;
    let check_every = positive("check_every", 10)?;
    let profile = match deck.get_str_or(BLOCK, "profile", "harmonic")?.as_str() {
        "harmonic" => Profile::Harmonic,
        "linear" => Profile::Linear,
        other => {
            return Err(deck
                .invalid(
                    BLOCK,
                    "profile",
                    format!("unknown profile '{other}' (known: harmonic, linear)"),
                )
                .into())
        }
    };
    Ok(Box::new(Heat2d {
        nx,
        ny,
        tol,
        max_iters,
        check_every,
        profile,
    }))
}

/// The rows `[lo, hi)` of rank `r` of `size`: balanced, the first `ny % size` ranks one more.
fn rows_of(ny: usize, size: usize, r: usize) -> (usize, usize) {
    let (q, rem) = (ny / size, ny % size);
    let lo = r * q + r.min(rem);
    (lo, lo + q + usize::from(r < rem))
}

/// Jacobi weights for spacings `hx`, `hy`: `u = wx (W + E) + wy (S + N)`.
fn weights(hx: f64, hy: f64) -> (f64, f64) {
    let d = 2.0 * (hx * hx + hy * hy);
    (hy * hy / d, hx * hx / d)
}

/// One row of Jacobi: `out[j]` from the row, its neighbours above and below and the boundary
/// values at its ends. Returns the largest change.
#[allow(clippy::too_many_arguments)] // a stencil row: each argument is one neighbour
fn relax_row(
    above: &[f64],
    row: &[f64],
    below: &[f64],
    left: f64,
    right: f64,
    (wx, wy): (f64, f64),
    out: &mut [f64],
) -> f64 {
    let n = row.len();
    let mut change = 0.0f64;
    for j in 0..n {
        let w = if j == 0 { left } else { row[j - 1] };
        let e = if j + 1 == n { right } else { row[j + 1] };
        let v = wx * (w + e) + wy * (above[j] + below[j]);
        change = change.max((v - row[j]).abs());
        out[j] = v;
    }
    change
}

impl Problem for Heat2d {
    fn run(&mut self, ctx: &RunContext) -> Result<Summary> {
        let world = ctx.world;
        let (rank, size) = (world.rank() as usize, world.size() as usize);
        let (nx, ny) = (self.nx, self.ny);
        let (lo, hi) = rows_of(ny, size, rank);
        let rows = hi - lo;
        let (hx, hy) = (1.0 / (nx + 1) as f64, 1.0 / (ny + 1) as f64);
        let x = |j: usize| (j + 1) as f64 * hx;
        let y = |i: isize| (i + 1) as f64 * hy;
        let t = |xx: f64, yy: f64| self.profile.at(xx, yy);
        let w = weights(hx, hy);

        // Ghost rows: [0, nx) is the row above (global lo - 1), [nx, 2nx) the row below (hi).
        // At the domain's edge they hold the boundary values and take no part in the forest.
        let mut ghost = vec![0.0; 2 * nx];
        let mut ilocal = Vec::new();
        let mut iremote = Vec::new();
        let (top, bottom) = ghost.split_at_mut(nx);
        if rank == 0 {
            for (j, g) in top.iter_mut().enumerate() {
                *g = t(x(j), 0.0);
            }
        } else {
            let (alo, ahi) = rows_of(ny, size, rank - 1);
            for j in 0..nx {
                ilocal.push(j);
                iremote.push(RootRef {
                    rank: rank as i64 - 1,
                    offset: ((ahi - alo - 1) * nx + j) as u64,
                });
            }
        }
        if rank + 1 == size {
            for (j, g) in bottom.iter_mut().enumerate() {
                *g = t(x(j), 1.0);
            }
        } else {
            for j in 0..nx {
                ilocal.push(nx + j);
                iremote.push(RootRef {
                    rank: rank as i64 + 1,
                    offset: j as u64,
                });
            }
        }
        let graph = Graph::new(rows * nx, Some(ilocal), iremote);
        let sf = StarForest::new(world, &graph, SfOptions::default())
            .context("heat2d: setting up the ghost-row forest")?;
        let left: Vec<f64> = (lo..hi).map(|i| t(0.0, y(i as isize))).collect();
        let right: Vec<f64> = (lo..hi).map(|i| t(1.0, y(i as isize))).collect();

        let u = RefCell::new(vec![0.0; rows * nx]);
        let unew = RefCell::new(vec![0.0; rows * nx]);
        let ghost = RefCell::new(ghost);
        let change = Cell::new(0.0f64);
        let comm = CommTimer::default();

        // Relaxes local row `i` of `u` into `unew`; `above`/`below` come from `u` or a ghost.
        let relax = |i: usize, u: &[f64], g: &[f64], unew: &mut [f64]| {
            let row = &u[i * nx..(i + 1) * nx];
            let above = if i == 0 {
                &g[..nx]
            } else {
                &u[(i - 1) * nx..i * nx]
            };
            let below = if i + 1 == rows {
                &g[nx..]
            } else {
                &u[(i + 1) * nx..(i + 2) * nx]
            };
            let c = relax_row(
                above,
                row,
                below,
                left[i],
                right[i],
                w,
                &mut unew[i * nx..(i + 1) * nx],
            );
            change.set(change.get().max(c));
        };

        let mut list = TaskList::new(format!("rank{rank}"));
        let exchange = list.add("exchange_ghost_rows", &[], || {
            comm.time(|| sf.bcast(&u.borrow(), &mut ghost.borrow_mut(), Op::Replace))?;
            Ok(TaskStatus::Complete)
        });
        let interior = list.add("relax_interior_rows", &[], || {
            let (u, g) = (u.borrow(), ghost.borrow());
            let mut unew = unew.borrow_mut();
            for i in 1..rows.saturating_sub(1) {
                relax(i, &u, &g, &mut unew);
            }
            Ok(TaskStatus::Complete)
        });
        let edges = list.add("relax_edge_rows", &[exchange], || {
            let (u, g) = (u.borrow(), ghost.borrow());
            let mut unew = unew.borrow_mut();
            relax(0, &u, &g, &mut unew);
            if rows > 1 {
                relax(rows - 1, &u, &g, &mut unew);
            }
            Ok(TaskStatus::Complete)
        });
        list.add("swap", &[interior, edges], || {
            std::mem::swap(&mut *u.borrow_mut(), &mut *unew.borrow_mut());
            Ok(TaskStatus::Complete)
        });
        let mut region = TaskRegion::new(ctx.recv_timeout);
        region.push(list);

        // The residual of the last check; every run ends with one (the last iteration checks).
        let mut residual = None;
        let mut iters = 0;
        let mut stop = Stop::CycleLimit;
        while iters < self.max_iters {
            change.set(0.0);
            ctx.execute(&mut region)?;
            iters += 1;
            if iters % self.check_every == 0 || iters == self.max_iters {
                // Residual and wall-time verdict in one reduction, so every rank stops together.
                let mine = [change.get(), f64::from(u8::from(ctx.deadline.expired()))];
                let mut all = [0.0; 2];
                comm.time(|| {
                    world.all_reduce_into(&mine[..], &mut all[..], SystemOperation::max())
                });
                residual = Some(all[0]);
                if all[0] <= self.tol {
                    stop = Stop::Converged;
                } else if all[1] > 0.0 {
                    stop = Stop::WallTime;
                }
            }
            ctx.progress(iters, || match residual {
                Some(r) => format!("residual={r:.6e}"),
                None => "residual=unchecked".to_string(),
            });
            if stop != Stop::CycleLimit {
                break;
            }
        }
        drop(region);
        let residual = residual.unwrap_or(f64::INFINITY);

        let u = u.into_inner();
        let mut err = 0.0f64;
        for (k, v) in u.iter().enumerate() {
            let (i, j) = (lo + k / nx, k % nx);
            err = err.max((v - t(x(j), y(i as isize))).abs());
        }
        let max_error = max_f64(world, err);
        if ctx.is_root() {
            outln!(
                "heat2d: {iters} iterations, residual {residual:.6e}, max error vs exact {max_error:.6e}"
            );
            if stop == Stop::CycleLimit {
                tracing::warn!(
                    "heat2d: residual {residual:.3e} above tol {:.3e} after max_iters {}",
                    self.tol,
                    self.max_iters
                );
            }
        }
        let bytes: Vec<u8> = u.iter().flat_map(|v| v.to_le_bytes()).collect();
        let all = crate::comm::gather_bytes(world, &bytes);
        if ctx.is_root() {
            let path = ctx.out_file("heat2d.dat");
            let text = self.result_text(iters, stop, residual, max_error, &all);
            crate::output::write_atomically(&path, |w| w.write_all(text.as_bytes()))
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        Ok(Summary {
            cycles: iters,
            work: iters as f64 * (nx * ny) as f64,
            work_unit: "point-updates",
            comm: comm.total(),
            stop,
        })
    }
}

impl Heat2d {
    /// The result file: settings, outcome and the whole field, rank-count independent.
    fn result_text(
        &self,
        iters: u64,
        stop: Stop,
        residual: f64,
        max_error: f64,
        parts: &[Vec<u8>],
    ) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "# heat2d: Jacobi on the unit square, exact steady state {}",
            self.profile.name()
        );
        let _ = writeln!(
            s,
            "nx {}\nny {}\nprofile {}",
            self.nx,
            self.ny,
            self.profile.name()
        );
        let stop = match stop {
            Stop::Converged => "converged",
            Stop::CycleLimit => "max_iters",
            Stop::WallTime => "wall_time",
        };
        let _ = writeln!(
            s,
            "iterations {iters}\nstop {stop}\nresidual {residual:e}\nmax_error {max_error:e}"
        );
        let _ = writeln!(
            s,
            "# field: ny lines of nx values, line i at y = (i+1)/(ny+1)"
        );
        let values = parts.iter().flat_map(|p| {
            p.chunks_exact(8).map(|c| {
                let mut b = [0u8; 8];
                b.copy_from_slice(c);
                f64::from_le_bytes(b)
            })
        });
        for (k, v) in values.enumerate() {
            let sep = if (k + 1) % self.nx == 0 { '\n' } else { ' ' };
            let _ = write!(s, "{v:e}{sep}");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_cover_the_grid_in_order() {
        for ny in 1..20 {
            for size in 1..=ny.min(8) {
                let mut next = 0;
                for r in 0..size {
                    let (lo, hi) = rows_of(ny, size, r);
                    assert_eq!(lo, next);
                    assert!(hi > lo);
                    next = hi;
                }
                assert_eq!(next, ny);
            }
        }
    }

    #[test]
    fn the_stencil_keeps_both_profiles_fixed() {
        // On the exact steady state a Jacobi sweep changes nothing (to rounding).
        let (nx, hx, hy) = (7, 1.0 / 8.0, 1.0 / 5.0);
        let w = weights(hx, hy);
        for p in [Profile::Harmonic, Profile::Linear] {
            let row_at = |yy: f64| {
                (0..nx)
                    .map(|j| p.at((j + 1) as f64 * hx, yy))
                    .collect::<Vec<_>>()
            };
            let y = 2.0 * hy;
            let mut out = vec![0.0; nx];
            let c = relax_row(
                &row_at(y - hy),
                &row_at(y),
                &row_at(y + hy),
                p.at(0.0, y),
                p.at(1.0, y),
                w,
                &mut out,
            );
            assert!(c < 1e-15, "{p:?}: {c}");
        }
    }
}
