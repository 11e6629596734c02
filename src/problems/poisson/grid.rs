//! One multigrid level's cells on this rank: shape, spacing, where each block sits, the
//! box's faces, and the stencil.

use std::ops::Range;

use super::Face;
use crate::run::stats::CommTimer;
use anyhow::{Context as _, Result};
use starhalo_boundary::{GmgData, GmgExchange};
use starhalo_mesh::multigrid::GmgLevel;
use starhalo_mesh::Mesh;

/// The cells of one level of this rank: shape, spacing and where each block sits.
pub(super) struct Grid {
    pub(super) ndim: usize,
    /// Interior cells per block.
    pub(super) n: [usize; 3],
    /// Ghost layers per direction (0 along inactive ones).
    pub(super) g: [usize; 3],
    /// Block array sizes with ghosts.
    pub(super) dims: [usize; 3],
    /// Cell widths.
    pub(super) h: [f64; 3],
    /// First global cell index of each local block.
    pub(super) first: Vec<[usize; 3]>,
    /// Cells across the level.
    pub(super) across: [usize; 3],
    /// The condition on each face of the box.
    pub(super) faces: [[Face; 2]; 3],
    /// Cells of the level on all ranks.
    pub(super) total_cells: f64,
}

impl Grid {
    pub(super) fn new(
        mesh: &Mesh,
        level: &GmgLevel,
        gids: &[usize],
        faces: [[Face; 2]; 3],
    ) -> Self {
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
    pub(super) fn fill(
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
    pub(super) fn face(&self, b: usize, d: usize, side: usize) -> Option<Face> {
        let on_face = if side == 0 {
            self.first[b][d] == 0
        } else {
            self.first[b][d] + self.n[d] == self.across[d]
        };
        on_face.then_some(self.faces[d][side])
    }

    /// Whether no face holds `u` to a value: `-∇²` then has the constants as its null space,
    /// and `u` is fixed only up to a constant.
    pub(super) fn singular(&self) -> bool {
        !self.faces[..self.ndim]
            .iter()
            .flatten()
            .any(|&f| f == Face::Dirichlet)
    }

    /// The active directions other than `x`.
    pub(super) fn others(&self, x: usize) -> impl Iterator<Item = usize> {
        (0..self.ndim).filter(move |&d| d != x)
    }

    pub(super) fn stride(&self, d: usize) -> usize {
        self.dims[..d].iter().product()
    }

    /// Array index of interior cell `p` of a block.
    pub(super) fn at(&self, p: [usize; 3]) -> usize {
        (0..3).map(|d| (p[d] + self.g[d]) * self.stride(d)).sum()
    }

    pub(super) fn interior(&self) -> impl Iterator<Item = [usize; 3]> + '_ {
        let n = self.n;
        (0..n[2]).flat_map(move |k| (0..n[1]).flat_map(move |j| (0..n[0]).map(move |i| [i, j, k])))
    }

    /// The array indices of interior row `(j, k)` of a block.
    pub(super) fn row(&self, j: usize, k: usize) -> Range<usize> {
        let start = self.at([0, j, k]);
        start..start + self.n[0]
    }

    /// The array indices of a block's interior cells, in the order of [`Self::interior`],
    /// found row by row.
    pub(super) fn cells(&self) -> impl Iterator<Item = usize> + '_ {
        let n = self.n;
        (0..n[2]).flat_map(move |k| (0..n[1]).flat_map(move |j| self.row(j, k)))
    }

    /// The interior values of a block array.
    pub(super) fn values<'a>(&'a self, v: &'a [f64]) -> impl Iterator<Item = f64> + 'a {
        self.cells().map(|i| v[i])
    }

    /// The squares of the interior values of a block array times `scale`: the terms of a
    /// scaled 2-norm.
    pub(super) fn squares<'a>(
        &'a self,
        v: &'a [f64],
        scale: f64,
    ) -> impl Iterator<Item = f64> + 'a {
        self.values(v).map(move |x| (x * scale).powi(2))
    }

    /// `∇²u` at array index `i` (the 2nd-order central stencil).
    pub(super) fn laplacian(&self, u: &[f64], i: usize) -> f64 {
        (0..self.ndim)
            .map(|d| {
                let s = self.stride(d);
                (u[i + s] + u[i - s] - 2.0 * u[i]) / (self.h[d] * self.h[d])
            })
            .sum()
    }

    /// `2 Σ_d 1/h_d²`: minus the stencil's diagonal.
    pub(super) fn diagonal(&self) -> f64 {
        (0..self.ndim).map(|d| 2.0 / (self.h[d] * self.h[d])).sum()
    }
}

/// Where the blocks of a level lie: by its place (block indices along each direction), each
/// block's rank and index among that rank's blocks, for star forests rooted in block arrays.
pub(super) struct Places {
    /// Blocks across the level.
    nb: [usize; 3],
    /// By place: the rank and the index there.
    at: Vec<(i64, usize)>,
}

impl Places {
    pub(super) fn new(grid: &Grid, level: &GmgLevel) -> Result<Self> {
        let nb: [usize; 3] = std::array::from_fn(|d| grid.across[d] / grid.n[d].max(1));
        let mut at = vec![(0, 0); nb.iter().product()];
        let mut count = vec![0; level.ranks.iter().max().map_or(0, |r| r + 1)];
        for (gid, &rank) in level.ranks.iter().enumerate() {
            let loc = level
                .forest
                .loc(gid)
                .context("poisson: a block of the level")?;
            let b: [usize; 3] = std::array::from_fn(|d| loc.lx_dir(d) as usize);
            at[b[0] + nb[0] * (b[1] + nb[1] * b[2])] = (rank as i64, count[rank]);
            count[rank] += 1;
        }
        Ok(Places { nb, at })
    }

    /// The rank of the block at place `b` and its index among that rank's blocks.
    pub(super) fn block(&self, b: [usize; 3]) -> (i64, usize) {
        self.at[b[0] + self.nb[0] * (b[1] + self.nb[1] * b[2])]
    }
}
