//! Sparse matrices in compressed sparse rows, their sources (a file or a generator) and the
//! serial products the distributed ones are checked against.

use std::ops::Range;

/// A square matrix as `(row, column, value)` entries, sorted by row then column, with
/// duplicates summed (in the order given).
#[derive(Debug, Clone, PartialEq)]
pub struct Triplets {
    /// Rows (= columns).
    pub n: usize,
    /// The entries.
    pub entries: Vec<(usize, usize, f64)>,
}

impl Triplets {
    /// Sorts (stably, so duplicates add in the order given) and sums duplicates.
    pub fn new(n: usize, mut entries: Vec<(usize, usize, f64)>) -> Self {
        entries.sort_by_key(|&(i, j, _)| (i, j));
        let mut out: Vec<(usize, usize, f64)> = Vec::with_capacity(entries.len());
        for (i, j, v) in entries {
            match out.last_mut() {
                Some(last) if (last.0, last.1) == (i, j) => last.2 += v,
                _ => out.push((i, j, v)),
            }
        }
        Triplets { n, entries: out }
    }

    /// The first row `i` whose diagonal entry `a_ii` is not positive (an absent entry is 0),
    /// with `a_ii`: such a matrix is not positive definite. `None` when every `a_ii > 0`.
    pub fn nonpositive_diagonal(&self) -> Option<(usize, f64)> {
        // Sorted by (row, column) without duplicates: the diagonal comes in row order.
        let mut diag = self.entries.iter().filter(|e| e.0 == e.1);
        let mut next = diag.next();
        for i in 0..self.n {
            match next {
                Some(&(r, _, v)) if r == i && v > 0.0 => next = diag.next(),
                Some(&(r, _, v)) if r == i => return Some((i, v)),
                _ => return Some((i, 0.0)),
            }
        }
        None
    }

    /// The first entry `(i, j, a_ij)` whose mirror `a_ji` differs (an absent entry is 0),
    /// with `a_ji`; `None` for a symmetric matrix.
    pub fn asymmetry(&self) -> Option<((usize, usize, f64), f64)> {
        let at = |i: usize, j: usize| {
            self.entries
                .binary_search_by_key(&(i, j), |e| (e.0, e.1))
                .map_or(0.0, |k| self.entries[k].2)
        };
        self.entries.iter().find_map(|&(i, j, v)| {
            let mirror = at(j, i);
            (mirror != v).then_some(((i, j, v), mirror))
        })
    }

    /// The rows in `rows`, as CSR with global column indices.
    pub fn rows(&self, rows: Range<usize>) -> Csr {
        let start = self.entries.partition_point(|e| e.0 < rows.start);
        let end = self.entries.partition_point(|e| e.0 < rows.end);
        let mut csr = Csr::empty();
        let mut row = rows.start;
        for &(i, j, v) in &self.entries[start..end] {
            while row < i {
                csr.end_row();
                row += 1;
            }
            csr.push(j, v);
        }
        while row < rows.end {
            csr.end_row();
            row += 1;
        }
        csr
    }
}

/// Rows of a sparse matrix: row `i` holds `cols[row_ptr[i]..row_ptr[i+1]]`, ascending.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Csr {
    pub row_ptr: Vec<usize>,
    pub cols: Vec<usize>,
    pub vals: Vec<f64>,
}

impl Csr {
    /// No rows yet.
    pub fn empty() -> Self {
        Csr {
            row_ptr: vec![0],
            cols: Vec::new(),
            vals: Vec::new(),
        }
    }

    /// Appends an entry to the row being built.
    pub fn push(&mut self, col: usize, val: f64) {
        self.cols.push(col);
        self.vals.push(val);
    }

    /// Closes the row being built.
    pub fn end_row(&mut self) {
        self.row_ptr.push(self.cols.len());
    }

    /// Number of rows.
    pub fn nrows(&self) -> usize {
        self.row_ptr.len() - 1
    }

    /// Number of stored entries.
    pub fn nnz(&self) -> usize {
        self.cols.len()
    }

    /// The entry range of row `i`.
    pub fn range(&self, i: usize) -> Range<usize> {
        self.row_ptr[i]..self.row_ptr[i + 1]
    }

    /// `y = A x`, each row summed from 0 in ascending column order: the reference order the
    /// distributed product keeps.
    pub fn matvec(&self, x: &[f64]) -> Vec<f64> {
        (0..self.nrows())
            .map(|i| {
                let mut s = 0.0;
                for k in self.range(i) {
                    s += self.vals[k] * x[self.cols[k]];
                }
                s
            })
            .collect()
    }

    /// `y = A^T x` for `ncols` columns, contributions added in ascending row order.
    pub fn matvec_transpose(&self, x: &[f64], ncols: usize) -> Vec<f64> {
        let mut y = vec![0.0; ncols];
        for (i, &xi) in x.iter().enumerate().take(self.nrows()) {
            for k in self.range(i) {
                y[self.cols[k]] += self.vals[k] * xi;
            }
        }
        y
    }
}

/// A generated matrix: the standard finite-difference Laplacian with Dirichlet boundaries
/// (symmetric positive definite).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generator {
    /// 5-point stencil on an `n x n` grid (`n^2` rows).
    Laplace2d,
    /// 7-point stencil on an `n x n x n` grid (`n^3` rows).
    Laplace3d,
}

impl Generator {
    /// Its name in `spmv/generate`.
    pub fn name(self) -> &'static str {
        match self {
            Generator::Laplace2d => "laplace2d",
            Generator::Laplace3d => "laplace3d",
        }
    }

    /// Rows of the matrix for grid size `n`, or `None` if it would overflow.
    pub fn size(self, n: usize) -> Option<usize> {
        match self {
            Generator::Laplace2d => n.checked_mul(n),
            Generator::Laplace3d => n.checked_mul(n)?.checked_mul(n),
        }
    }

    /// Rows `rows` of the matrix for grid size `n` (columns ascending in each row).
    pub fn rows(self, n: usize, rows: Range<usize>) -> Csr {
        let dims = match self {
            Generator::Laplace2d => 2,
            Generator::Laplace3d => 3,
        };
        let mut csr = Csr::empty();
        for k in rows {
            // Grid coordinates of row k, fastest first, and the stride of each direction.
            let mut c = [0usize; 3];
            let mut rest = k;
            for d in c.iter_mut().take(dims) {
                *d = rest % n;
                rest /= n;
            }
            let strides = [1, n, n * n];
            // Lower neighbours from the largest stride down, the diagonal, then upper ones.
            for d in (0..dims).rev() {
                if c[d] > 0 {
                    csr.push(k - strides[d], -1.0);
                }
            }
            csr.push(k, 2.0 * dims as f64);
            for d in 0..dims {
                if c[d] + 1 < n {
                    csr.push(k + strides[d], -1.0);
                }
            }
            csr.end_row();
        }
        csr
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn laplacians_are_symmetric_with_sorted_rows() {
        for (g, n) in [(Generator::Laplace2d, 4), (Generator::Laplace3d, 3)] {
            let size = g.size(n).unwrap();
            let a = g.rows(n, 0..size);
            let mut entries = Vec::new();
            for i in 0..size {
                let r = a.range(i);
                assert!(a.cols[r.clone()].windows(2).all(|w| w[0] < w[1]));
                let sum: f64 = a.vals[r.clone()].iter().sum();
                assert!(sum >= 0.0);
                entries.extend(r.map(|k| (i, a.cols[k], a.vals[k])));
            }
            let mut transposed: Vec<_> = entries.iter().map(|&(i, j, v)| (j, i, v)).collect();
            transposed.sort_by_key(|&(i, j, _)| (i, j));
            assert_eq!(entries, transposed);
            // A piece equals the same rows of the whole.
            let part = g.rows(n, 2..5);
            assert_eq!(part.cols, a.cols[a.row_ptr[2]..a.row_ptr[5]]);
        }
    }

    #[test]
    fn asymmetry_finds_the_first_unmirrored_entry() {
        let t = Triplets::new(3, vec![(0, 1, 2.0), (1, 0, 2.0), (2, 2, 5.0)]);
        assert_eq!(t.asymmetry(), None);
        let t = Triplets::new(3, vec![(0, 1, 2.0), (1, 0, 2.5), (2, 2, 5.0)]);
        assert_eq!(t.asymmetry(), Some(((0, 1, 2.0), 2.5)));
        let t = Triplets::new(3, vec![(0, 0, 1.0), (2, 1, -1.0)]);
        assert_eq!(t.asymmetry(), Some(((2, 1, -1.0), 0.0)));
    }

    #[test]
    fn nonpositive_diagonal_finds_the_first_row() {
        let t = Triplets::new(3, vec![(0, 0, 1.0), (1, 1, 2.0), (2, 2, 5.0), (2, 0, -9.0)]);
        assert_eq!(t.nonpositive_diagonal(), None);
        let t = Triplets::new(3, vec![(0, 0, 1.0), (1, 1, -2.0), (2, 2, 0.0)]);
        assert_eq!(t.nonpositive_diagonal(), Some((1, -2.0)));
        let t = Triplets::new(3, vec![(0, 0, 1.0), (1, 0, 2.0), (2, 2, 5.0)]);
        assert_eq!(
            t.nonpositive_diagonal(),
            Some((1, 0.0)),
            "row 1 has no diagonal"
        );
        let t = Triplets::new(2, vec![(0, 0, 1.0)]);
        assert_eq!(
            t.nonpositive_diagonal(),
            Some((1, 0.0)),
            "the last row neither"
        );
    }

    #[test]
    fn triplet_rows_and_serial_products() {
        let t = Triplets::new(3, vec![(2, 0, 1.0), (0, 1, 2.0), (0, 0, 1.0), (2, 2, 3.0)]);
        let a = t.rows(0..3);
        assert_eq!(a.row_ptr, [0, 2, 2, 4]);
        assert_eq!(a.matvec(&[1.0, 2.0, 3.0]), [5.0, 0.0, 10.0]);
        assert_eq!(a.matvec_transpose(&[1.0, 2.0, 3.0], 3), [4.0, 2.0, 9.0]);
        let b = t.rows(1..3);
        assert_eq!(b.row_ptr, [0, 0, 2]);
    }
}
