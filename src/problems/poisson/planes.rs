//! Zebra plane relaxation for 3-D cells narrow in two directions: every plane of cells
//! across those two solved whole, on one rank.
//!
//! Coupling strong across a plane is what lines along either of its directions leave
//! behind (V-cycles alone diverged there). The plane's rows, its neighbours across `x`
//! held, are `(T_p ⊗ I + I ⊗ T_q + c) U = R`: `T_d` the 1-D second difference along `d`
//! with the box's faces folded in, the same for every plane of a level, and `c` the plane's
//! share of the diagonal from `x`. Each `T_d = Q_d Λ_d Q_dᵀ` is diagonalized once, so a
//! plane is solved exactly by four small matrix products and a division:
//! `U = Q_p [(Q_pᵀ R Q_q) / (λ_p + λ_q + c)] Q_qᵀ`, whatever mix of periodic, Neumann and
//! Dirichlet faces the plane has. A star forest brings each plane's right-hand side from
//! the blocks it crosses to the rank that solves it (planes dealt to ranks in turn) and
//! takes the solution back.
//!
//! The products cost `4 (n_p + n_q)` multiply-adds per cell for planes `n_p × n_q` cells
//! across: on 64³ cells a V-cycle took as long as with lines (1.9·10⁶ cell-V-cycles/s on
//! one core). Planes a thousand cells across would want fast transforms instead, and more
//! than one rank per plane.

use super::grid::{Grid, Places};
use super::Face;
use crate::run::stats::CommTimer;
use anyhow::{Context as _, Result};
use mpi::topology::{Communicator, SimpleCommunicator};
use nalgebra::{DMatrix, DMatrixView, DMatrixViewMut};
use starhalo_boundary::BlockData;
use starhalo_mesh::multigrid::GmgLevel;
use starhalo_sf::{Graph, Op, RootRef, SfOptions, StarForest};

/// The plane solver of one level.
pub(super) struct Planes {
    /// The direction across the planes.
    x: usize,
    /// The coupling across planes, `1/h_x²`.
    ax: f64,
    /// The exact solver of one plane.
    exact: Exact,
    /// This rank's blocks' interior cells (a plane's right-hand side, then its solution):
    /// the roots.
    mine: Vec<f64>,
    /// The planes of each parity this rank solves.
    parities: [Owned; 2],
}

/// `(T_p ⊗ I + I ⊗ T_q + c)⁻¹` by the eigenvectors of `T_p` and `T_q`.
struct Exact {
    /// Each direction's eigenvectors (columns) and eigenvalues, and `Q_qᵀ`.
    q: [DMatrix<f64>; 2],
    q_t: DMatrix<f64>,
    lambda: [Vec<f64>; 2],
    /// Two planes' worth of scratch for the products.
    scratch: [DMatrix<f64>; 2],
}

/// The planes of one parity that this rank solves.
struct Owned {
    /// Leaves: those planes' cells, plane after plane, each `p` fastest.
    sf: StarForest,
    got: Vec<f64>,
    /// Those planes' global indices along `x`.
    planes: Vec<usize>,
}

impl Planes {
    /// The solver of the planes across `dirs` (two of a 3-D level's directions). Collective:
    /// every rank sets up the same forests.
    pub(super) fn new(
        grid: &Grid,
        level: &GmgLevel,
        world: &SimpleCommunicator,
        dirs: [usize; 2],
    ) -> Result<Self> {
        let x = 3 - dirs[0] - dirs[1];
        let (np, nq) = (grid.across[dirs[0]], grid.across[dirs[1]]);
        let cells: usize = grid.n.iter().product();
        let places = Places::new(grid, level)?;
        let ranks = world.size() as usize;
        let owned = |parity: usize| -> Result<Owned> {
            // Plane `ix` goes to rank `(ix / 2) % ranks`: each parity's dealt in turn.
            let planes: Vec<usize> = (parity..grid.across[x])
                .step_by(2)
                .filter(|ix| (ix / 2) % ranks == world.rank() as usize)
                .collect();
            let mut iremote = Vec::with_capacity(planes.len() * np * nq);
            for &ix in &planes {
                for iq in 0..nq {
                    for ip in 0..np {
                        let mut c = [0; 3];
                        (c[x], c[dirs[0]], c[dirs[1]]) = (ix, ip, iq);
                        let (rank, index) = places.block(std::array::from_fn(|d| c[d] / grid.n[d]));
                        let within = (0..3)
                            .rev()
                            .fold(0, |acc, d| acc * grid.n[d] + c[d] % grid.n[d]);
                        let offset = (index * cells + within) as u64;
                        iremote.push(RootRef { rank, offset });
                    }
                }
            }
            let graph = Graph::new(grid.first.len() * cells, None, iremote);
            let sf = StarForest::new(world, &graph, SfOptions::default())
                .context("poisson planes: setting up the forest of plane cells")?;
            Ok(Owned {
                sf,
                got: vec![0.0; planes.len() * np * nq],
                planes,
            })
        };
        Ok(Planes {
            x,
            ax: 1.0 / (grid.h[x] * grid.h[x]),
            exact: Exact::new(dirs.map(|d| second_difference(grid, d))),
            mine: vec![0.0; grid.first.len() * cells],
            parities: [owned(0)?, owned(1)?],
        })
    }

    /// Solves every plane of level `data` whose global index along `x` has parity `parity`
    /// so that its rows of `∇²u = f` hold, with the other planes (ghosts included, filled
    /// before) held. Neighbouring planes have the other parity, so the result does not
    /// depend on how blocks are placed; the plane a periodic wrap with an odd number of
    /// planes joins to one of its own parity is read as it was before the half.
    pub(super) fn relax(
        &mut self,
        grid: &Grid,
        data: &mut BlockData,
        f: &[f64],
        parity: usize,
        comm: &CommTimer,
    ) -> Result<()> {
        let (x, ax, len) = (self.x, self.ax, grid.dims.iter().product::<usize>());
        let (sx, cells) = (grid.stride(x), grid.n.iter().product::<usize>());
        // Each cell's right-hand side: `(T_p ⊗ I + I ⊗ T_q + c) U = a_x (the held
        // neighbours across x) - f`.
        for b in 0..data.gids().len() {
            let (u, f) = (data.fine(b, 0), &f[b * len..(b + 1) * len]);
            let first = grid.first[b];
            let mine = &mut self.mine[b * cells..(b + 1) * cells];
            for (cell, p) in grid.interior().enumerate() {
                let ix = first[x] + p[x];
                if ix % 2 != parity {
                    continue;
                }
                let i = grid.at(p);
                let mut r = -f[i];
                if folded(grid, x, ix, 0).is_none() {
                    r += ax * u[i - sx];
                }
                if folded(grid, x, ix, 1).is_none() {
                    r += ax * u[i + sx];
                }
                mine[cell] = r;
            }
        }
        let owned = &mut self.parities[parity];
        comm.time(|| owned.sf.bcast(&self.mine, &mut owned.got, Op::Replace))?;
        let (np, nq) = (self.exact.q[0].nrows(), self.exact.q[1].nrows());
        for (plane, &ix) in owned.got.chunks_exact_mut(np * nq).zip(&owned.planes) {
            let mut c = 2.0 * ax;
            for face in (0..2).filter_map(|side| folded(grid, x, ix, side)) {
                c += face.fold(ax);
            }
            self.exact.solve(plane, c);
        }
        comm.time(|| owned.sf.reduce(&owned.got, &mut self.mine, Op::Replace))?;
        for b in 0..data.gids().len() {
            let (u, first) = (data.fine_mut(b, 0), grid.first[b]);
            let mine = &self.mine[b * cells..(b + 1) * cells];
            for (cell, p) in grid.interior().enumerate() {
                if (first[x] + p[x]) % 2 == parity {
                    u[grid.at(p)] = mine[cell];
                }
            }
        }
        Ok(())
    }
}

/// Whether the neighbour of plane `ix` (across `x`) below (`side` 0) or above (1) is a Dirichlet or
/// Neumann face's ghost, which the plane's diagonal takes in (`-u` or `u` of the plane
/// itself) rather than holding.
fn folded(grid: &Grid, x: usize, ix: usize, side: usize) -> Option<Face> {
    let at_face = if side == 0 {
        ix == 0
    } else {
        ix + 1 == grid.across[x]
    };
    Some(grid.faces[x][side]).filter(|&f| at_face && f != Face::Periodic)
}

impl Exact {
    fn new(t: [DMatrix<f64>; 2]) -> Self {
        let (np, nq) = (t[0].nrows(), t[1].nrows());
        let [p, q] = t.map(|t| t.symmetric_eigen());
        Exact {
            q_t: q.eigenvectors.transpose(),
            lambda: [&p, &q].map(|e| e.eigenvalues.iter().copied().collect()),
            q: [p.eigenvectors, q.eigenvectors],
            scratch: std::array::from_fn(|_| DMatrix::zeros(np, nq)),
        }
    }

    /// Solves `(T_p ⊗ I + I ⊗ T_q + c) U = R` in place, `plane` holding `R` then `U` with
    /// `p` fastest.
    fn solve(&mut self, plane: &mut [f64], c: f64) {
        let (np, nq) = (self.q[0].nrows(), self.q[1].nrows());
        let [t, w] = &mut self.scratch;
        t.gemm_tr(
            1.0,
            &self.q[0],
            &DMatrixView::from_slice(plane, np, nq),
            0.0,
        );
        w.gemm(1.0, t, &self.q[1], 0.0);
        for (j, &lq) in self.lambda[1].iter().enumerate() {
            for (i, &lp) in self.lambda[0].iter().enumerate() {
                // Not positive only for a constant mode that no face holds (Neumann and
                // periodic all round, one plane across): that mode is left out.
                let d = lp + lq + c;
                w[(i, j)] = if d > 0.0 { w[(i, j)] / d } else { 0.0 };
            }
        }
        t.gemm(1.0, &self.q[0], w, 0.0);
        DMatrixViewMut::from_slice(plane, np, nq).gemm(1.0, t, &self.q_t, 0.0);
    }
}

/// `T_d`, the second difference across the level along `d` (`2/h² u_k - (u_{k-1} +
/// u_{k+1})/h²`), its Dirichlet (Neumann) faces' ghosts `-u` (`u`) of the cell beside
/// them, folded into the diagonal.
fn second_difference(grid: &Grid, d: usize) -> DMatrix<f64> {
    let (n, a) = (grid.across[d], 1.0 / (grid.h[d] * grid.h[d]));
    let mut t = DMatrix::zeros(n, n);
    for k in 0..n {
        t[(k, k)] += 2.0 * a;
        for (side, beyond) in [(0, k.checked_sub(1)), (1, (k + 1 < n).then_some(k + 1))] {
            match (beyond, grid.faces[d][side]) {
                (Some(j), _) => t[(k, j)] -= a,
                (None, Face::Periodic) => t[(k, if side == 0 { n - 1 } else { 0 })] -= a,
                (None, face) => t[(k, k)] += face.fold(a),
            }
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A level `across` cells wide, cells `h` wide, with `faces`.
    fn grid(across: [usize; 3], h: [f64; 3], faces: [[Face; 2]; 3]) -> Grid {
        Grid {
            ndim: 3,
            n: across,
            g: [1; 3],
            dims: across.map(|n| n + 2),
            h,
            first: vec![[0; 3]],
            across,
            faces,
            total_cells: across.iter().product::<usize>() as f64,
        }
    }

    /// The plane's rows applied cell by cell, each face's ghost `-u` (Dirichlet), `u`
    /// (Neumann) or the cell across the wrap: what the solve must invert.
    fn apply(g: &Grid, dirs: [usize; 2], c: f64, u: &[f64]) -> Vec<f64> {
        let n = dirs.map(|d| g.across[d]);
        let a = dirs.map(|d| 1.0 / (g.h[d] * g.h[d]));
        let at = |i: usize, j: usize| u[i + n[0] * j];
        // `next`: the neighbour's value, its index wrapped, which a periodic face reads.
        let beyond = |k: usize, axis: usize, side: usize, next: f64, own: f64| {
            let last = n[axis] - 1;
            if (side == 0 && k > 0) || (side == 1 && k < last) {
                return next;
            }
            match g.faces[dirs[axis]][side] {
                Face::Periodic => next,
                Face::Dirichlet => -own,
                Face::Neumann => own,
            }
        };
        let mut out = vec![0.0; u.len()];
        for j in 0..n[1] {
            for i in 0..n[0] {
                let own = at(i, j);
                let (ip, im) = ((i + 1) % n[0], (i + n[0] - 1) % n[0]);
                let (jp, jm) = ((j + 1) % n[1], (j + n[1] - 1) % n[1]);
                let sides = [
                    a[0] * beyond(i, 0, 0, at(im, j), own),
                    a[0] * beyond(i, 0, 1, at(ip, j), own),
                    a[1] * beyond(j, 1, 0, at(i, jm), own),
                    a[1] * beyond(j, 1, 1, at(i, jp), own),
                ];
                out[i + n[0] * j] = (2.0 * a[0] + 2.0 * a[1] + c) * own - sides.iter().sum::<f64>();
            }
        }
        out
    }

    /// Every mix of faces, planes across `x1`-`x3` and `x2`-`x3` of unequal sizes and cell
    /// widths: the solve inverts the plane's rows to rounding. A face folded with the
    /// wrong sign, a transposed product or a missed wrap would leave residuals of order one.
    #[test]
    fn a_plane_is_solved_exactly_with_any_faces() {
        use Face::*;
        // Periodic only in pairs, as decks allow.
        let pairs = [
            [Periodic, Periodic],
            [Neumann, Neumann],
            [Neumann, Dirichlet],
            [Dirichlet, Neumann],
            [Dirichlet, Dirichlet],
        ];
        let mut seed = 12345u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 11) as f64 / (1u64 << 53) as f64 - 0.5
        };
        for (dirs, across) in [
            ([0, 2], [6, 1, 5]),
            ([1, 2], [1, 4, 7]),
            ([0, 1], [2, 3, 1]),
        ] {
            for f0 in pairs {
                for f1 in pairs {
                    let mut faces = [[Periodic; 2]; 3];
                    (faces[dirs[0]], faces[dirs[1]]) = (f0, f1);
                    let g = grid(across, [0.5, 0.3, 0.2], faces);
                    let mut exact = Exact::new(dirs.map(|d| second_difference(&g, d)));
                    let c = 0.75;
                    let r: Vec<f64> = (0..across[dirs[0]] * across[dirs[1]])
                        .map(|_| next())
                        .collect();
                    let mut u = r.clone();
                    exact.solve(&mut u, c);
                    let back = apply(&g, dirs, c, &u);
                    for (k, (b, r)) in back.iter().zip(&r).enumerate() {
                        assert!(
                            (b - r).abs() < 1e-10,
                            "{dirs:?} {faces:?} cell {k}: {b} vs {r}"
                        );
                    }
                }
            }
        }
    }
}
