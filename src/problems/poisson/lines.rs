//! Zebra line relaxation with every line solved whole, across blocks and ranks.
//!
//! A line of cells along `x` crosses several blocks. Each block solves its piece (the
//! Thomas algorithm) with the values beyond the piece's ends taken as zero, which gives `p`;
//! the piece's solution is then `p + left φ_lo + right φ_hi`, where `φ_lo`, `φ_hi` are its
//! responses to a unit value just beyond either end and `left`, `right` are the neighbouring
//! pieces' end cells. Those end cells solve a small system per line, the same matrix for
//! every line of a level (factored once), once one reduction has gathered every piece's
//! `p` at its ends.
//!
//! Solving each piece with the old values beyond its ends instead (lines one block long)
//! leaves the error within about one aspect ratio's worth of cells of every block end where
//! it was: lines that short, as on the coarse levels of any strongly stretched grid, made
//! V-cycles alone diverge.

use super::{Face, Grid};
use crate::run::stats::CommTimer;
use mpi::collective::SystemOperation;
use mpi::topology::SimpleCommunicator;
use mpi::traits::CommunicatorCollectives;
use starhalo_boundary::BlockData;

/// The line solver of one level.
pub(super) struct Lines {
    /// The direction of the lines.
    x: usize,
    /// The coupling along a line, `1/h_x²`.
    a: f64,
    /// The solver of each block's piece, by the block's place along `x`.
    pieces: Vec<Piece>,
    periodic: bool,
    /// LU factors (unit lower triangle below the diagonal) of the end-cell system, with the
    /// original row of each pivot row.
    lu: Vec<f64>,
    rows: Vec<usize>,
    /// Each line's pieces' `p` at their ends, this rank's (zero elsewhere), then all ranks'.
    mine: Vec<f64>,
    all: Vec<f64>,
    /// Whether a piece of each line lies on this rank, and those lines' end cells.
    here: Vec<bool>,
    ends: Vec<f64>,
    /// One piece's right-hand side, then solution.
    piece: Vec<f64>,
}

/// The Thomas factors of one piece, whose ends on a Dirichlet (Neumann) face hold `-u`
/// (`u`) of the end cell beyond them, folded into its diagonal.
struct Piece {
    /// The modified upper diagonal and the reciprocal pivots.
    upper: Vec<f64>,
    inv_pivot: Vec<f64>,
    /// The solutions for a unit value just beyond the low and the high end.
    response: [Vec<f64>; 2],
}

impl Piece {
    fn new(n: usize, a: f64, diagonal: f64, faces: [Option<Face>; 2]) -> Self {
        let (mut upper, mut inv_pivot) = (vec![0.0; n], vec![0.0; n]);
        for k in 0..n {
            let mut diag = diagonal;
            for (side, at_end) in [(0, k == 0), (1, k + 1 == n)] {
                match faces[side] {
                    Some(Face::Dirichlet) if at_end => diag += a,
                    Some(Face::Neumann) if at_end => diag -= a,
                    _ => {}
                }
            }
            let pivot = diag + if k == 0 { 0.0 } else { a * upper[k - 1] };
            inv_pivot[k] = 1.0 / pivot;
            upper[k] = -a * inv_pivot[k];
        }
        let mut piece = Piece {
            upper,
            inv_pivot,
            response: [vec![0.0; n], vec![0.0; n]],
        };
        for side in 0..2 {
            let mut r = vec![0.0; n];
            r[if side == 0 { 0 } else { n - 1 }] = a;
            piece.solve(a, &mut r);
            piece.response[side] = r;
        }
        piece
    }

    /// Solves the piece's rows `diagonal u_k - a (u_{k-1} + u_{k+1}) = r_k` in place.
    fn solve(&self, a: f64, r: &mut [f64]) {
        let mut last = 0.0;
        for (k, v) in r.iter_mut().enumerate() {
            last = (*v + a * last) * self.inv_pivot[k];
            *v = last;
        }
        let mut next = 0.0;
        for (k, v) in r.iter_mut().enumerate().rev() {
            next = *v - self.upper[k] * next;
            *v = next;
        }
    }
}

impl Lines {
    /// The line solvers of the level `grid` describes, one along each direction whose
    /// coupling is at least a quarter of the strongest (cells at most twice the narrowest
    /// width): a sweep relaxes them in turn. Cells narrow in two directions couple strongly
    /// across a plane, which lines along one of them alone leave (V-cycles alone diverged).
    pub(super) fn of_level(grid: &Grid) -> Vec<Self> {
        let narrowest = grid.h[..grid.ndim]
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min);
        (0..grid.ndim)
            .filter(|&d| grid.h[d] <= 2.0 * narrowest)
            .map(|x| Lines::new(grid, x))
            .collect()
    }

    /// The solver of the lines along `x`.
    fn new(grid: &Grid, x: usize) -> Self {
        let (n, a) = (grid.n[x], 1.0 / (grid.h[x] * grid.h[x]));
        let blocks = grid.across[x] / n;
        let face = |side: usize| Some(grid.faces[x][side]).filter(|&f| f != Face::Periodic);
        let pieces: Vec<Piece> = (0..blocks)
            .map(|bx| {
                let ends = [
                    if bx == 0 { face(0) } else { None },
                    if bx + 1 == blocks { face(1) } else { None },
                ];
                Piece::new(n, a, grid.diagonal(), ends)
            })
            .collect();
        let lines = (0..grid.ndim)
            .filter(|&d| d != x)
            .map(|d| grid.across[d])
            .product::<usize>();
        let mut lines = Lines {
            x,
            a,
            pieces,
            periodic: grid.faces[x][0] == Face::Periodic,
            lu: Vec::new(),
            rows: Vec::new(),
            mine: vec![0.0; lines * blocks * 2],
            all: vec![0.0; lines * blocks * 2],
            here: vec![false; lines],
            ends: Vec::new(),
            piece: vec![0.0; n],
        };
        lines.factor();
        lines.ends = vec![0.0; lines.here.len() * 2 * lines.interfaces()];
        lines
    }

    /// The end-cell unknowns: two per interface between neighbouring pieces, the low
    /// piece's last cell (`2i`) and the high piece's first (`2i + 1`); interface `i` joins
    /// pieces `i` and `i + 1` (through the wrap, the last and the first).
    fn interfaces(&self) -> usize {
        let blocks = self.pieces.len();
        if self.periodic {
            blocks
        } else {
            blocks - 1
        }
    }

    /// The interfaces below and above piece `bx`.
    fn sides(&self, bx: usize) -> [Option<usize>; 2] {
        let last = self.pieces.len() - 1;
        let wrap = self.periodic.then_some(last);
        [
            if bx > 0 { Some(bx - 1) } else { wrap },
            if bx < last { Some(bx) } else { wrap },
        ]
    }

    /// Builds and factors (partial pivoting) the end-cell system: each end cell equals its
    /// piece's `p` there plus the piece's responses to the end cells beyond it.
    fn factor(&mut self) {
        let m = 2 * self.interfaces();
        let mut a = vec![0.0; m * m];
        let last = self.pieces[0].upper.len() - 1;
        for i in 0..self.interfaces() {
            a[2 * i * m + 2 * i] += 1.0;
            a[(2 * i + 1) * m + 2 * i + 1] += 1.0;
            // The low piece's last cell, then the high piece's first.
            for (row, bx, k) in [
                (2 * i, i, last),
                (2 * i + 1, (i + 1) % self.pieces.len(), 0),
            ] {
                let [lo, hi] = self.sides(bx);
                let response = &self.pieces[bx].response;
                if let Some(lo) = lo {
                    a[row * m + 2 * lo] -= response[0][k];
                }
                if let Some(hi) = hi {
                    a[row * m + 2 * hi + 1] -= response[1][k];
                }
            }
        }
        let mut rows: Vec<usize> = (0..m).collect();
        for c in 0..m {
            let p = (c..m)
                .max_by(|&i, &j| a[i * m + c].abs().total_cmp(&a[j * m + c].abs()))
                .unwrap_or(c);
            if p != c {
                for j in 0..m {
                    a.swap(c * m + j, p * m + j);
                }
                rows.swap(c, p);
            }
            for i in c + 1..m {
                let f = a[i * m + c] / a[c * m + c];
                a[i * m + c] = f;
                for j in c + 1..m {
                    a[i * m + j] -= f * a[c * m + j];
                }
            }
        }
        (self.lu, self.rows) = (a, rows);
    }

    /// Solves the end-cell system of one line in place: `z` holds the right-hand side in
    /// pivot order (row `i` is unknown `rows[i]`'s), then the end cells.
    fn solve_ends(&self, z: &mut [f64]) {
        let m = z.len();
        for i in 0..m {
            let s: f64 = (0..i).map(|j| self.lu[i * m + j] * z[j]).sum();
            z[i] -= s;
        }
        for i in (0..m).rev() {
            let s: f64 = (i + 1..m).map(|j| self.lu[i * m + j] * z[j]).sum();
            z[i] = (z[i] - s) / self.lu[i * m + i];
        }
    }

    /// Solves every line of level `data` whose global indices across `x` sum to `parity`
    /// (mod 2) so that its rows of `∇²u = f` hold, with the other lines (ghosts included,
    /// filled before) held. Lines next to each other across `x` have the other parity, so
    /// the result does not depend on how blocks are placed.
    pub(super) fn relax(
        &mut self,
        grid: &Grid,
        data: &mut BlockData,
        f: &[f64],
        parity: usize,
        world: &SimpleCommunicator,
        comm: &CommTimer,
    ) {
        let (x, a, len) = (self.x, self.a, grid.dims.iter().product::<usize>());
        let (n, sx, blocks) = (grid.n[x], grid.stride(x), self.pieces.len());
        // The line through a cell and its parity, from its global indices across x.
        let line_of = |first: [usize; 3], p: [usize; 3]| {
            let (mut line, mut size, mut sum) = (0, 1, 0);
            for d in (0..grid.ndim).filter(|&d| d != x) {
                line += (first[d] + p[d]) * size;
                size *= grid.across[d];
                sum += first[d] + p[d];
            }
            (line, sum % 2 == parity)
        };
        self.mine.fill(0.0);
        self.here.fill(false);
        let r = &mut self.piece;
        for b in 0..data.gids().len() {
            let (u, f) = (data.fine_mut(b, 0), &f[b * len..(b + 1) * len]);
            let (first, bx) = (grid.first[b], grid.first[b][x] / n);
            for p in grid.interior().filter(|p| p[x] == 0) {
                let (line, ours) = line_of(first, p);
                if !ours {
                    continue;
                }
                // Row k: diagonal u_k - a (u_{k-1} + u_{k+1}) = (the couplings across) - f_k.
                let start = grid.at(p);
                for (k, rk) in r.iter_mut().enumerate() {
                    let i = start + k * sx;
                    *rk = -f[i];
                    for d in (0..grid.ndim).filter(|&d| d != x) {
                        let sd = grid.stride(d);
                        *rk += (u[i + sd] + u[i - sd]) / (grid.h[d] * grid.h[d]);
                    }
                }
                self.pieces[bx].solve(a, r);
                for (k, &v) in r.iter().enumerate() {
                    u[start + k * sx] = v;
                }
                let at = (line * blocks + bx) * 2;
                self.mine[at..at + 2].copy_from_slice(&[r[0], r[n - 1]]);
                self.here[line] = true;
            }
        }
        if self.interfaces() == 0 {
            return;
        }
        comm.time(|| {
            world.all_reduce_into(&self.mine[..], &mut self.all[..], SystemOperation::sum())
        });
        // Each line's end cells, where a piece of it lies here. Adding 0 turns the -0 one
        // rank may hold into the 0 that a sum over ranks gives.
        let m = 2 * self.interfaces();
        let mut ends = std::mem::take(&mut self.ends);
        for line in (0..self.here.len()).filter(|&l| self.here[l]) {
            let (z, got) = (
                &mut ends[line * m..(line + 1) * m],
                &self.all[line * blocks * 2..],
            );
            // Each unknown's `p`: the low piece's last cell, the high piece's first.
            for (zi, &row) in z.iter_mut().zip(&self.rows) {
                let i = row / 2;
                let at = if row % 2 == 0 {
                    2 * i + 1
                } else {
                    2 * ((i + 1) % blocks)
                };
                *zi = got[at] + 0.0;
            }
            self.solve_ends(z);
        }
        for b in 0..data.gids().len() {
            let u = data.fine_mut(b, 0);
            let (first, bx) = (grid.first[b], grid.first[b][x] / n);
            let [lo, hi] = self.sides(bx);
            let response = &self.pieces[bx].response;
            for p in grid.interior().filter(|p| p[x] == 0) {
                let (line, ours) = line_of(first, p);
                if !ours {
                    continue;
                }
                let z = &ends[line * m..(line + 1) * m];
                let (left, right) = (
                    lo.map_or(0.0, |i| z[2 * i]),
                    hi.map_or(0.0, |i| z[2 * i + 1]),
                );
                let start = grid.at(p);
                for (k, (&rl, &rh)) in response[0].iter().zip(&response[1]).enumerate() {
                    u[start + k * sx] += left * rl + right * rh;
                }
            }
        }
        self.ends = ends;
    }
}
