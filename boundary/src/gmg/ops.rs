//! Restriction and prolongation between a block of one multigrid level and the block of the
//! next coarser level that contains it.
//!
//! A finer block covers a box of its coarser block's interior ([`Placement`]): all of it when
//! both are the same tree node at two block sizes (below the root grid) or the same leaf kept
//! in two composite levels, one child's share when the finer block is a child of the coarser
//! one. Along every active direction a coarse cell holds `ratio` fine cells: 2, or 1 for a
//! leaf carried unchanged into the coarser level (its transfers are plain copies).
//!
//! Restriction is the volume average (the mean of the `2^ndim` children: cells are uniform).
//! Prolongation reconstructs each coarse cell as `u + s_d x_d` (as
//! [`prolong_restrict`](crate::prolong_restrict) does for ghosts) from the coarse box widened
//! by one cell, so the coarse level's ghosts must be filled (`gmg_same`) before it.

use starhalo_mesh::field::IndexShape;
use starhalo_mesh::LogicalLocation;

use crate::bnd_info::FieldLayout;
use crate::error::BoundaryError;
use crate::prolong_restrict::{at, Prolongation};

/// Where a finer block lies in the block containing it on the next coarser level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// First coarse interior cell covered, per direction.
    pub offset: [usize; 3],
    /// Coarse interior cells covered, per direction (1 along inactive directions).
    pub size: [usize; 3],
    /// Fine cells per coarse cell along every active direction: 1 or 2.
    pub ratio: usize,
    /// Active directions.
    pub ndim: usize,
}

impl Placement {
    /// The placement of block `fine` (`fine_nx` cells) in block `coarse` (`coarse_nx` cells).
    ///
    /// ```
    /// use starhalo_boundary::gmg::Placement;
    /// use starhalo_mesh::LogicalLocation;
    /// // The upper-left child of a refined 2-D node, both with 8x8 blocks.
    /// let child = LogicalLocation::new(1, [1, 0, 0]);
    /// let node = LogicalLocation::new(0, [0, 0, 0]);
    /// let p = Placement::new(&child, [8, 8, 1], &node, [8, 8, 1], 2).unwrap();
    /// assert_eq!((p.offset, p.size, p.ratio), ([4, 0, 0], [4, 4, 1], 2));
    /// // A root block at 8 cells over the same block at 4 cells (below the root grid).
    /// let p = Placement::new(&node, [8, 8, 1], &node, [4, 4, 1], 2).unwrap();
    /// assert_eq!((p.offset, p.size, p.ratio), ([0, 0, 0], [4, 4, 1], 2));
    /// ```
    pub fn new(
        fine: &LogicalLocation,
        fine_nx: [usize; 3],
        coarse: &LogicalLocation,
        coarse_nx: [usize; 3],
        ndim: usize,
    ) -> Result<Self, BoundaryError> {
        let bad = |why: &str| {
            BoundaryError::Geometry(format!(
                "block {fine:?} ({fine_nx:?} cells) does not lie in {coarse:?} \
                 ({coarse_nx:?} cells) as a multigrid level below it: {why}"
            ))
        };
        let dl = fine
            .level()
            .checked_sub(coarse.level())
            .filter(|&d| d <= 1)
            .ok_or_else(|| bad("levels differ by more than one"))?;
        let scale = 1i64 << dl;
        let (mut offset, mut size, mut ratio) = ([0; 3], [1; 3], None);
        for d in 0..3 {
            if d >= ndim {
                if fine_nx[d] != 1 || coarse_nx[d] != 1 || fine.lx_dir(d) != coarse.lx_dir(d) {
                    return Err(bad("an inactive direction has cells"));
                }
                continue;
            }
            let rel = fine.lx_dir(d) - coarse.lx_dir(d) * scale;
            if !(0..scale).contains(&rel) {
                return Err(bad("it is outside"));
            }
            if !coarse_nx[d].is_multiple_of(scale as usize) {
                return Err(bad("odd coarse block size"));
            }
            size[d] = coarse_nx[d] / scale as usize;
            offset[d] = rel as usize * size[d];
            let r = fine_nx[d] / size[d];
            if r * size[d] != fine_nx[d] || !(1..=2).contains(&r) || ratio.is_some_and(|x| x != r) {
                return Err(bad("cell sizes are not 1:1 or 2:1 in every direction"));
            }
            ratio = Some(r);
        }
        Ok(Self {
            offset,
            size,
            ratio: ratio.unwrap_or(1),
            ndim,
        })
    }

    /// Coarse cells of the box widened by one cell where prolongation reads slopes.
    fn halo(&self, d: usize) -> usize {
        usize::from(d < self.ndim && self.ratio == 2)
    }

    /// Values per slot that restriction moves: the coarse box.
    pub fn restrict_len(&self) -> usize {
        self.size.iter().product()
    }

    /// Values per slot that prolongation moves: the coarse box widened by one cell along
    /// active directions (not widened for a copy).
    pub fn prolong_len(&self) -> usize {
        (0..3).map(|d| self.size[d] + 2 * self.halo(d)).product()
    }
}

fn points(n: [usize; 3]) -> impl Iterator<Item = [usize; 3]> {
    (0..n[2]).flat_map(move |k| (0..n[1]).flat_map(move |j| (0..n[0]).map(move |i| [i, j, k])))
}

/// Restricts the interior of one slot of the finer block (`fine`, on `shape`) into `out`:
/// the coarse box of `pl`, x fastest.
pub fn restrict_block(
    pl: &Placement,
    shape: &IndexShape,
    fine: &[f64],
    out: &mut [f64],
) -> Result<(), BoundaryError> {
    let dims = FieldLayout::of_shape(shape, 1).dims;
    BoundaryError::check_size("fine block array", dims.iter().product(), fine.len())?;
    BoundaryError::check_size("restricted values", pl.restrict_len(), out.len())?;
    let g = [0, 1, 2].map(|d| shape.ghosts(d));
    let r = [0, 1, 2].map(|d| if d < pl.ndim { pl.ratio } else { 1 });
    let w = 1.0 / r.iter().product::<usize>() as f64;
    for (o, q) in out.iter_mut().zip(points(pl.size)) {
        let sum: f64 = points(r)
            .map(|c| fine[at(dims, [0, 1, 2].map(|d| g[d] + q[d] * r[d] + c[d]))])
            .sum();
        *o = sum * w;
    }
    Ok(())
}

/// Writes restricted values `vals` (the coarse box of `pl`) into the interior of one slot of
/// the coarser block (`coarse`, on `shape`).
pub fn store_restricted(
    pl: &Placement,
    shape: &IndexShape,
    vals: &[f64],
    coarse: &mut [f64],
) -> Result<(), BoundaryError> {
    let dims = FieldLayout::of_shape(shape, 1).dims;
    BoundaryError::check_size("coarse block array", dims.iter().product(), coarse.len())?;
    BoundaryError::check_size("restricted values", pl.restrict_len(), vals.len())?;
    let g = [0, 1, 2].map(|d| shape.ghosts(d));
    for (v, q) in vals.iter().zip(points(pl.size)) {
        coarse[at(dims, [0, 1, 2].map(|d| g[d] + pl.offset[d] + q[d]))] = *v;
    }
    Ok(())
}

/// Copies the widened coarse box of `pl` out of one slot of the coarser block (`coarse`, on
/// `shape`, ghosts filled) into `out`, x fastest.
pub fn gather_coarse(
    pl: &Placement,
    shape: &IndexShape,
    coarse: &[f64],
    out: &mut [f64],
) -> Result<(), BoundaryError> {
    let dims = FieldLayout::of_shape(shape, 1).dims;
    BoundaryError::check_size("coarse block array", dims.iter().product(), coarse.len())?;
    BoundaryError::check_size("prolongation values", pl.prolong_len(), out.len())?;
    let h = [0, 1, 2].map(|d| pl.halo(d));
    if (0..3).any(|d| h[d] > shape.ghosts(d)) {
        return Err(BoundaryError::Geometry(
            "prolongation needs at least one ghost layer".into(),
        ));
    }
    let n = [0, 1, 2].map(|d| pl.size[d] + 2 * h[d]);
    let start = [0, 1, 2].map(|d| shape.ghosts(d) + pl.offset[d] - h[d]);
    for (o, q) in out.iter_mut().zip(points(n)) {
        *o = coarse[at(dims, [0, 1, 2].map(|d| start[d] + q[d]))];
    }
    Ok(())
}

/// Prolongates the widened coarse box `region` (from [`gather_coarse`]) with `op` onto the
/// interior of one slot of the finer block (`fine`, on `shape`).
pub fn prolongate_block(
    pl: &Placement,
    op: Prolongation,
    region: &[f64],
    shape: &IndexShape,
    fine: &mut [f64],
) -> Result<(), BoundaryError> {
    let dims = FieldLayout::of_shape(shape, 1).dims;
    BoundaryError::check_size("fine block array", dims.iter().product(), fine.len())?;
    BoundaryError::check_size("prolongation values", pl.prolong_len(), region.len())?;
    let h = [0, 1, 2].map(|d| pl.halo(d));
    let rdims = [0, 1, 2].map(|d| pl.size[d] + 2 * h[d]);
    let g = [0, 1, 2].map(|d| shape.ghosts(d));
    let r = [0, 1, 2].map(|d| if d < pl.ndim { pl.ratio } else { 1 });
    for p in points(shape.nx()) {
        let c = [0, 1, 2].map(|d| p[d] / r[d] + h[d]);
        let u = region[at(rdims, c)];
        let mut v = u;
        if pl.ratio == 2 && op != Prolongation::Constant {
            for d in 0..pl.ndim {
                let (mut lo, mut hi) = (c, c);
                lo[d] -= 1;
                hi[d] += 1;
                let dl = u - region[at(rdims, lo)];
                let dr = region[at(rdims, hi)] - u;
                let s = op.slope(dl, dr);
                // Child centres lie a quarter of a coarse cell either side of the centre.
                let side = if p[d] % 2 == 0 { -1.0 } else { 1.0 };
                v += 0.25 * side * s;
            }
        }
        fine[at(dims, [0, 1, 2].map(|d| g[d] + p[d]))] = v;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lin(x: [f64; 3]) -> f64 {
        0.25 + 1.5 * x[0] - 0.5 * x[1] + 0.75 * x[2]
    }

    /// Fills a block array with `f` at cell centres, cells of width `dx` from `lo`.
    fn fill(shape: &IndexShape, lo: [f64; 3], dx: f64, f: impl Fn([f64; 3]) -> f64) -> Vec<f64> {
        let dims = FieldLayout::of_shape(shape, 1).dims;
        points(dims)
            .map(|p| {
                f([0, 1, 2].map(|d| {
                    if d < shape.ndim() {
                        lo[d] + (p[d] as f64 - shape.ghosts(d) as f64 + 0.5) * dx
                    } else {
                        0.0
                    }
                }))
            })
            .collect()
    }

    #[test]
    fn restrict_then_prolongate_a_child_is_exact_for_linear_data() {
        // 3-D: a node of 4^3 cells (width 0.5) and its child at [1, 0, 1] (width 0.25).
        let shape = IndexShape::new([4, 4, 4], 2, 3).unwrap();
        let node = LogicalLocation::new(0, [0, 0, 0]);
        let child = LogicalLocation::new(1, [1, 0, 1]);
        let pl = Placement::new(&child, [4; 3], &node, [4; 3], 3).unwrap();
        assert_eq!((pl.offset, pl.size, pl.ratio), ([2, 0, 2], [2, 2, 2], 2));
        let fine = fill(&shape, [1.0, 0.0, 1.0], 0.25, lin);
        let mut vals = vec![0.0; pl.restrict_len()];
        restrict_block(&pl, &shape, &fine, &mut vals).unwrap();
        let mut coarse = vec![f64::NAN; fine.len()];
        store_restricted(&pl, &shape, &vals, &mut coarse).unwrap();
        let exact = fill(&shape, [0.0; 3], 0.5, lin);
        let dims = FieldLayout::of_shape(&shape, 1).dims;
        for q in points([2, 2, 2]) {
            let i = at(dims, [4 + q[0], 2 + q[1], 4 + q[2]]);
            assert!((coarse[i] - exact[i]).abs() < 1e-14, "{q:?}");
        }
        // Only the child's octant was written.
        assert!(coarse[at(dims, [2, 2, 2])].is_nan());
        // Prolongation back from the exact coarse block (ghosts included).
        let mut region = vec![0.0; pl.prolong_len()];
        assert_eq!(region.len(), 64);
        gather_coarse(&pl, &shape, &exact, &mut region).unwrap();
        for op in [Prolongation::Linear, Prolongation::MinmodLinear] {
            let mut out = vec![0.0; fine.len()];
            prolongate_block(&pl, op, &region, &shape, &mut out).unwrap();
            for p in points([4; 3]) {
                let i = at(dims, [p[0] + 2, p[1] + 2, p[2] + 2]);
                assert!((out[i] - fine[i]).abs() < 1e-14, "{op:?} {p:?}");
            }
        }
        // Constant: every child takes its parent's value, so it misses the linear field.
        let mut out = vec![0.0; fine.len()];
        prolongate_block(&pl, Prolongation::Constant, &region, &shape, &mut out).unwrap();
        let i = at(dims, [2, 2, 2]);
        assert_eq!(out[i], exact[at(dims, [4, 2, 4])]);
        assert!((out[i] - fine[i]).abs() > 0.1);
    }

    #[test]
    fn a_composite_copy_moves_values_unchanged() {
        let shape = IndexShape::new([4, 2, 1], 1, 2).unwrap();
        let leaf = LogicalLocation::new(1, [3, 1, 0]);
        let pl = Placement::new(&leaf, [4, 2, 1], &leaf, [4, 2, 1], 2).unwrap();
        assert_eq!((pl.offset, pl.size, pl.ratio), ([0; 3], [4, 2, 1], 1));
        assert_eq!(pl.prolong_len(), 8);
        let a: Vec<f64> = (0..24).map(|x| f64::from(x) * 0.37).collect();
        let mut vals = vec![0.0; 8];
        restrict_block(&pl, &shape, &a, &mut vals).unwrap();
        let mut b = vec![0.0; 24];
        store_restricted(&pl, &shape, &vals, &mut b).unwrap();
        let mut c = vec![0.0; 24];
        gather_coarse(&pl, &shape, &b, &mut vals).unwrap();
        prolongate_block(&pl, Prolongation::Linear, &vals, &shape, &mut c).unwrap();
        let dims = FieldLayout::of_shape(&shape, 1).dims;
        for p in points([4, 2, 1]) {
            let i = at(dims, [p[0] + 1, p[1] + 1, 0]);
            assert_eq!((b[i], c[i]), (a[i], a[i]));
        }
    }

    #[test]
    fn bad_placements_and_sizes_are_errors() {
        let node = LogicalLocation::new(0, [0, 0, 0]);
        let far = LogicalLocation::new(2, [0, 0, 0]);
        assert!(Placement::new(&far, [4, 4, 1], &node, [4, 4, 1], 2).is_err());
        let outside = LogicalLocation::new(1, [2, 0, 0]);
        assert!(Placement::new(&outside, [4, 4, 1], &node, [4, 4, 1], 2).is_err());
        // 8 cells over 2: a 4:1 jump.
        assert!(Placement::new(&node, [8, 8, 1], &node, [2, 2, 1], 2).is_err());
        let pl = Placement::new(&node, [4, 4, 1], &node, [2, 2, 1], 2).unwrap();
        let shape = IndexShape::new([4, 4, 1], 2, 2).unwrap();
        let mut out = vec![0.0; 3];
        assert!(matches!(
            restrict_block(&pl, &shape, &[0.0; 64], &mut out),
            Err(BoundaryError::Size { .. })
        ));
        // No ghost layer to read slopes from.
        let bare = IndexShape::new([2, 2, 1], 0, 2).unwrap();
        let mut region = vec![0.0; pl.prolong_len()];
        assert!(gather_coarse(&pl, &bare, &[0.0; 4], &mut region).is_err());
    }
}
