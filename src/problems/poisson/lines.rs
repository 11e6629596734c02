//! Zebra line relaxation with every line solved whole, across blocks and ranks.
//!
//! A line of cells along `x` crosses several blocks. Each block solves its piece (the
//! Thomas algorithm) with the values beyond the piece's ends taken as zero, which gives `p`;
//! the piece's solution is then `p + left φ_lo + right φ_hi`, where `φ_lo`, `φ_hi` are its
//! responses to a unit value just beyond either end and `left`, `right` are the neighbouring
//! pieces' end cells. Those end cells solve a small system per line, the same matrix for
//! every line of a level (factored once), from every piece's `p` at its ends, which a star
//! forest brings to each rank holding a piece of the line (a bcast from the pieces' ranks).
//!
//! Solving each piece with the old values beyond its ends instead (lines one block long)
//! leaves the error within about one aspect ratio's worth of cells of every block end where
//! it was: lines that short, as on the coarse levels of any strongly stretched grid, made
//! V-cycles alone diverge.

use super::grid::{Grid, Places};
use super::Face;
use crate::run::stats::CommTimer;
use anyhow::{Context as _, Result};
use mpi::topology::SimpleCommunicator;
use starhalo_boundary::BlockData;
use starhalo_mesh::multigrid::GmgLevel;
use starhalo_sf::{Graph, Op, RootRef, SfOptions, StarForest};

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
    /// Lines across one block.
    per_block: usize,
    /// This rank's pieces' `p` at their ends, by block, line within it and end: the roots.
    mine: Vec<f64>,
    /// The lines of each parity; none where the lines lie in one block (one piece, no wrap).
    parities: Option<[Gather; 2]>,
    /// The end cells of the lines of one parity crossing this rank's blocks.
    ends: Vec<f64>,
    /// One piece's right-hand side, then solution.
    piece: Vec<f64>,
}

/// How the pieces' ends of the lines of one parity that cross this rank's blocks arrive.
struct Gather {
    /// Leaves: those lines' pieces' ends, by line, piece along `x` and end.
    sf: StarForest,
    got: Vec<f64>,
    /// Those lines' global numbers, in increasing order.
    lines: Vec<usize>,
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
                if let Some(face) = faces[side].filter(|_| at_end) {
                    diag += face.fold(a);
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
    /// The solver of the lines along `x`.
    pub(super) fn new(
        grid: &Grid,
        level: &GmgLevel,
        world: &SimpleCommunicator,
        x: usize,
    ) -> Result<Self> {
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
        let per_block: usize = grid.others(x).map(|d| grid.n[d]).product();
        let periodic = grid.faces[x][0] == Face::Periodic;
        let parities = if blocks > 1 || periodic {
            Some(Self::gathers(grid, level, world, x, blocks, per_block)?)
        } else {
            None
        };
        let mut lines = Lines {
            x,
            a,
            pieces,
            periodic,
            lu: Vec::new(),
            rows: Vec::new(),
            per_block,
            mine: vec![0.0; grid.first.len() * per_block * 2],
            ends: Vec::new(),
            parities,
            piece: vec![0.0; n],
        };
        lines.factor();
        let most = lines.parities.iter().flatten().map(|g| g.lines.len()).max();
        lines.ends = vec![0.0; most.unwrap_or(0) * 2 * lines.interfaces()];
        Ok(lines)
    }

    /// The forests that bring each rank, for the lines of each parity crossing its blocks,
    /// every piece's ends. Collective.
    fn gathers(
        grid: &Grid,
        level: &GmgLevel,
        world: &SimpleCommunicator,
        x: usize,
        blocks: usize,
        per_block: usize,
    ) -> Result<[Gather; 2]> {
        let places = Places::new(grid, level)?;
        // The lines crossing this rank's blocks, by parity, each with its global cell
        // indices (0 along x).
        let mut crossing: [Vec<(usize, [usize; 3])>; 2] = Default::default();
        for first in &grid.first {
            for p in grid.interior().filter(|p| p[x] == 0) {
                let c: [usize; 3] = std::array::from_fn(|d| first[d] + p[d]);
                let (line, parity) = line_of(grid, x, c);
                crossing[parity].push((line, c));
            }
        }
        let parities = crossing.map(|mut lines| {
            lines.sort_unstable_by_key(|&(line, _)| line);
            lines.dedup_by_key(|&mut (line, _)| line);
            let mut iremote = Vec::with_capacity(lines.len() * blocks * 2);
            for &(_, c) in &lines {
                // The line's place within each of its blocks, the same in all of them.
                let (mut within, mut size) = (0, 1);
                for d in grid.others(x) {
                    within += (c[d] % grid.n[d]) * size;
                    size *= grid.n[d];
                }
                for bx in 0..blocks {
                    let b: [usize; 3] =
                        std::array::from_fn(|d| if d == x { bx } else { c[d] / grid.n[d] });
                    let (rank, index) = places.block(b);
                    let offset = ((index * per_block + within) * 2) as u64;
                    iremote.push(RootRef { rank, offset });
                    iremote.push(RootRef {
                        rank,
                        offset: offset + 1,
                    });
                }
            }
            let graph = Graph::new(grid.first.len() * per_block * 2, None, iremote);
            let sf = StarForest::new(world, &graph, SfOptions::default())
                .context("poisson lines: setting up the forest of line ends")?;
            anyhow::Ok(Gather {
                sf,
                got: vec![0.0; lines.len() * blocks * 2],
                lines: lines.into_iter().map(|(line, _)| line).collect(),
            })
        });
        let [even, odd] = parities;
        Ok([even?, odd?])
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
                let [lo, hi] = sides(bx, self.pieces.len(), self.periodic);
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
        comm: &CommTimer,
    ) -> Result<()> {
        let (x, a, len) = (self.x, self.a, grid.dims.iter().product::<usize>());
        let (n, sx, blocks) = (grid.n[x], grid.stride(x), self.pieces.len());
        let r = &mut self.piece;
        for b in 0..data.gids().len() {
            let (u, f) = (data.fine_mut(b, 0), &f[b * len..(b + 1) * len]);
            let first = grid.first[b];
            for (within, p) in grid.interior().filter(|p| p[x] == 0).enumerate() {
                if line_of(grid, x, std::array::from_fn(|d| first[d] + p[d])).1 != parity {
                    continue;
                }
                // Row k: diagonal u_k - a (u_{k-1} + u_{k+1}) = (the couplings across) - f_k.
                let start = grid.at(p);
                for (k, rk) in r.iter_mut().enumerate() {
                    let i = start + k * sx;
                    *rk = -f[i];
                    for d in grid.others(x) {
                        let sd = grid.stride(d);
                        *rk += (u[i + sd] + u[i - sd]) / (grid.h[d] * grid.h[d]);
                    }
                }
                self.pieces[first[x] / n].solve(a, r);
                for (k, &v) in r.iter().enumerate() {
                    u[start + k * sx] = v;
                }
                let at = (b * self.per_block + within) * 2;
                self.mine[at..at + 2].copy_from_slice(&[r[0], r[n - 1]]);
            }
        }
        let m = 2 * self.interfaces();
        let Some(gathers) = &mut self.parities else {
            return Ok(());
        };
        let gather = &mut gathers[parity];
        comm.time(|| gather.sf.bcast(&self.mine, &mut gather.got, Op::Replace))?;
        for (z, got) in self
            .ends
            .chunks_exact_mut(m)
            .zip(gather.got.chunks_exact(blocks * 2))
            .take(gather.lines.len())
        {
            // Each unknown's `p`: the low piece's last cell, the high piece's first.
            for (zi, &row) in z.iter_mut().zip(&self.rows) {
                let i = row / 2;
                *zi = got[if row % 2 == 0 {
                    2 * i + 1
                } else {
                    2 * ((i + 1) % blocks)
                }];
            }
            solve_lu(&self.lu, z);
        }
        for b in 0..data.gids().len() {
            let u = data.fine_mut(b, 0);
            let (first, bx) = (grid.first[b], grid.first[b][x] / n);
            let [lo, hi] = sides(bx, blocks, self.periodic);
            let response = &self.pieces[bx].response;
            for p in grid.interior().filter(|p| p[x] == 0) {
                let (line, ours) = line_of(grid, x, std::array::from_fn(|d| first[d] + p[d]));
                if ours != parity {
                    continue;
                }
                // Every line of this parity crossing a block here was gathered.
                let Ok(slot) = gather.lines.binary_search(&line) else {
                    continue;
                };
                let z = &self.ends[slot * m..][..m];
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
        Ok(())
    }
}

/// The interfaces below and above piece `bx` of `blocks` (see [`Lines::interfaces`]).
fn sides(bx: usize, blocks: usize, periodic: bool) -> [Option<usize>; 2] {
    let last = blocks - 1;
    let wrap = periodic.then_some(last);
    [
        if bx > 0 { Some(bx - 1) } else { wrap },
        if bx < last { Some(bx) } else { wrap },
    ]
}

/// The line along `x` through the cell at global indices `c` (its number over the other
/// directions' indices) and its parity (of their sum).
fn line_of(grid: &Grid, x: usize, c: [usize; 3]) -> (usize, usize) {
    let (mut line, mut size, mut sum) = (0, 1, 0);
    for d in grid.others(x) {
        line += c[d] * size;
        size *= grid.across[d];
        sum += c[d];
    }
    (line, sum % 2)
}

/// Solves `LU z = b` in place, `z` holding `b` in pivot order, for the factors `lu` of an
/// `m × m` matrix (`m = z.len()`).
fn solve_lu(lu: &[f64], z: &mut [f64]) {
    let m = z.len();
    for i in 0..m {
        let s: f64 = (0..i).map(|j| lu[i * m + j] * z[j]).sum();
        z[i] -= s;
    }
    for i in (0..m).rev() {
        let s: f64 = (i + 1..m).map(|j| lu[i * m + j] * z[j]).sum();
        z[i] = (z[i] - s) / lu[i * m + i];
    }
}
