//! A matrix distributed by blocks of rows, split as PETSc splits it: a diagonal block whose
//! columns are this rank's vector entries, and an off-diagonal block whose columns are ghost
//! entries owned by other ranks.
//!
//! The ghosts form a star forest: leaves are the ghost entries (contiguous, in ascending
//! global column), roots are the owned vector entries. `A x` fills the ghosts with a bcast
//! and overlaps it with the rows that need none; `A^T x` adds the off-diagonal block's
//! contributions into their owners with a reduce (sum).
//!
//! Each row of `A x` is summed from 0 in ascending global column order, as the serial
//! product sums it, so the result is the same bit for bit on any number of ranks: ghosts
//! left of the diagonal block come first, then the block, then the ghosts right of it.

use super::matrix::Csr;
use crate::run::stats::CommTimer;
use anyhow::{Context as _, Result};
use mpi::topology::SimpleCommunicator;
use starhalo_sf::{Graph, Op, RootRef, SfOptions, StarForest};
use std::time::Instant;

/// The first row of each rank, and `n` at the end: rank `r` owns `starts[r]..starts[r+1]`.
pub fn row_starts(n: usize, size: usize) -> Vec<usize> {
    (0..=size)
        .map(|r| r * (n / size) + r.min(n % size))
        .collect()
}

/// This rank's rows of the matrix and the forest of its ghost entries.
pub struct DistMatrix {
    /// Columns are local vector indices.
    diag: Csr,
    /// Columns are ghost indices.
    offd: Csr,
    /// Per row: where its right-of-diagonal ghost entries start in `offd`.
    split: Vec<usize>,
    /// Global column of each ghost (ascending).
    ghosts: Vec<usize>,
    /// Rows with no ghost entry (computed while the ghosts travel), and the others.
    interior: Vec<usize>,
    boundary: Vec<usize>,
    sf: StarForest,
}

impl DistMatrix {
    /// Splits `local` (this rank's rows `starts[rank]..starts[rank+1]`, global columns) and
    /// sets up the ghost forest. Collective.
    pub fn new(
        world: &SimpleCommunicator,
        local: &Csr,
        starts: &[usize],
        rank: usize,
    ) -> Result<Self> {
        let rows = starts[rank]..starts[rank + 1];
        let mut ghosts: Vec<usize> = local
            .cols
            .iter()
            .copied()
            .filter(|c| !rows.contains(c))
            .collect();
        ghosts.sort_unstable();
        ghosts.dedup();
        let ghost_of = |c: usize| ghosts.partition_point(|&g| g < c);
        let (mut diag, mut offd) = (Csr::empty(), Csr::empty());
        let (mut split, mut interior, mut boundary) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..local.nrows() {
            let mut right = None;
            for k in local.range(i) {
                let c = local.cols[k];
                if rows.contains(&c) {
                    diag.push(c - rows.start, local.vals[k]);
                } else {
                    if c >= rows.end && right.is_none() {
                        right = Some(offd.nnz());
                    }
                    offd.push(ghost_of(c), local.vals[k]);
                }
            }
            split.push(right.unwrap_or(offd.nnz()));
            diag.end_row();
            offd.end_row();
            if offd.range(i).is_empty() {
                interior.push(i);
            } else {
                boundary.push(i);
            }
        }
        let iremote = ghosts
            .iter()
            .map(|&c| {
                // The owner is the last rank whose first row is at or before c.
                let owner = starts.partition_point(|&s| s <= c) - 1;
                RootRef {
                    rank: owner as i64,
                    offset: (c - starts[owner]) as u64,
                }
            })
            .collect();
        let graph = Graph::new(rows.len(), None, iremote);
        let sf = StarForest::new(world, &graph, SfOptions::default())
            .context("spmv: setting up the ghost-entry forest")?;
        Ok(DistMatrix {
            diag,
            offd,
            split,
            ghosts,
            interior,
            boundary,
            sf,
        })
    }

    /// Number of ghost entries.
    pub fn nghosts(&self) -> usize {
        self.ghosts.len()
    }

    /// Stored entries on this rank.
    pub fn nnz(&self) -> usize {
        self.diag.nnz() + self.offd.nnz()
    }

    fn row_sum(&self, i: usize, x: &[f64], g: &[f64]) -> f64 {
        let (o, d) = (self.offd.range(i), self.diag.range(i));
        let mut s = 0.0;
        for k in o.start..self.split[i] {
            s += self.offd.vals[k] * g[self.offd.cols[k]];
        }
        for k in d {
            s += self.diag.vals[k] * x[self.diag.cols[k]];
        }
        for k in self.split[i]..o.end {
            s += self.offd.vals[k] * g[self.offd.cols[k]];
        }
        s
    }

    /// `y = A x` for this rank's entries; `ghost` is scratch of [`Self::nghosts`] entries.
    pub fn matvec(
        &self,
        x: &[f64],
        y: &mut [f64],
        ghost: &mut [f64],
        comm: &CommTimer,
    ) -> Result<()> {
        // The interior rows need no ghost: computed while the ghosts are in flight, and not
        // counted as communication.
        let t0 = Instant::now();
        let compute = self.sf.bcast_while(x, ghost, Op::Replace, || {
            let t = Instant::now();
            for &i in &self.interior {
                y[i] = self.row_sum(i, x, &[]);
            }
            t.elapsed()
        })?;
        comm.add(t0.elapsed().saturating_sub(compute));
        for &i in &self.boundary {
            y[i] = self.row_sum(i, x, ghost);
        }
        Ok(())
    }

    /// `y = A^T x` for this rank's entries: diagonal-block contributions in place, the
    /// off-diagonal block's gathered per ghost and summed into their owners by a reduce.
    pub fn matvec_transpose(
        &self,
        x: &[f64],
        y: &mut [f64],
        ghost: &mut [f64],
        comm: &CommTimer,
    ) -> Result<()> {
        y.fill(0.0);
        ghost.fill(0.0);
        for (i, &xi) in x.iter().enumerate() {
            for k in self.diag.range(i) {
                y[self.diag.cols[k]] += self.diag.vals[k] * xi;
            }
            for k in self.offd.range(i) {
                ghost[self.offd.cols[k]] += self.offd.vals[k] * xi;
            }
        }
        comm.time(|| self.sf.reduce(ghost, y, Op::Sum))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_starts_split_evenly() {
        assert_eq!(row_starts(10, 3), [0, 4, 7, 10]);
        assert_eq!(row_starts(4, 4), [0, 1, 2, 3, 4]);
        assert_eq!(row_starts(5, 1), [0, 5]);
    }
}
