//! Restriction and prolongation of cell-centred data between a block and its coarse buffer.
//!
//! Coarse cell `c` of the coarse buffer (with `cg = nghost / 2 + 1` ghost layers) covers the
//! fine cells `g + 2 (c - cg) + {0, 1}` of the block array along every active direction
//! (`g = nghost`); inactive directions map index 0 to index 0. Cells are uniform, so the volume
//! average is the arithmetic mean.
//!
//! Prolongation reconstructs each coarse cell linearly, `u + s_d x_d` per active direction,
//! and gives each child the value at its centre (`x_d = ±1/4` of a coarse cell). The slope
//! `s_d` is zero ([`Prolongation::Constant`]), the centred difference
//! ([`Prolongation::Linear`]), or the minmod of the one-sided differences
//! ([`Prolongation::MinmodLinear`], the default), which never leaves the range of the cell and
//! its face neighbours.

use starhalo_mesh::field::IndexShape;

use crate::bnd_info::{FieldLayout, IndexBox};
use crate::error::BoundaryError;

/// How coarse data is reconstructed on fine cells.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Prolongation {
    /// Every child takes the coarse value.
    Constant,
    /// Centred slopes, no limiter: exact for linear fields.
    Linear,
    /// Minmod-limited slopes: exact for linear fields, no new extrema.
    #[default]
    MinmodLinear,
}

impl Prolongation {
    /// The slope across a coarse cell from its one-sided differences `dl` (centre minus
    /// lower neighbour) and `dr` (upper neighbour minus centre); zero for `Constant`.
    pub(crate) fn slope(self, dl: f64, dr: f64) -> f64 {
        match self {
            Prolongation::Constant => 0.0,
            Prolongation::Linear => 0.5 * (dl + dr),
            Prolongation::MinmodLinear => minmod(dl, dr),
        }
    }
}

/// `minmod(a, b)`: the smaller in magnitude when both have the same sign, else zero.
pub fn minmod(a: f64, b: f64) -> f64 {
    if a * b <= 0.0 {
        0.0
    } else if a.abs() < b.abs() {
        a
    } else {
        b
    }
}

#[derive(Debug, Clone)]
struct Geometry {
    ndim: usize,
    g: usize,
    cg: usize,
    fine: [usize; 3],
    coarse: [usize; 3],
}

impl Geometry {
    fn new(shape: &IndexShape) -> Result<Self, BoundaryError> {
        let cshape = shape.coarse()?;
        Ok(Self {
            ndim: shape.ndim(),
            g: shape.nghost(),
            cg: cshape.nghost(),
            fine: FieldLayout::of_shape(shape, 1).dims,
            coarse: FieldLayout::of_shape(&cshape, 1).dims,
        })
    }

    /// First fine index under coarse index `c` along `d`, if inside the block array.
    fn first_child(&self, d: usize, c: usize) -> Option<usize> {
        if d >= self.ndim {
            return (c == 0).then_some(0);
        }
        let f = (self.g + 2 * c).checked_sub(2 * self.cg)?;
        (f + 1 < self.fine[d]).then_some(f)
    }

    fn check(
        &self,
        cbox: &IndexBox,
        fine: usize,
        coarse: usize,
        halo: bool,
    ) -> Result<(), BoundaryError> {
        let flen: usize = self.fine.iter().product();
        let clen: usize = self.coarse.iter().product();
        for (what, expected, got) in [("fine array", flen, fine), ("coarse array", clen, coarse)] {
            if got != expected {
                return Err(BoundaryError::Size {
                    what,
                    expected,
                    got,
                });
            }
        }
        for d in 0..3 {
            let r = cbox.0[d];
            if r.is_empty() {
                continue;
            }
            let h = usize::from(halo && d < self.ndim);
            let ok = r.s >= h
                && r.e < self.coarse[d].saturating_sub(h)
                && self.first_child(d, r.s).is_some()
                && self.first_child(d, r.e).is_some();
            if !ok {
                return Err(BoundaryError::Geometry(format!(
                    "coarse box {:?} does not map into the block along x{}",
                    cbox.0,
                    d + 1
                )));
            }
        }
        Ok(())
    }
}

/// Flat index of point `p` in one row-major array of `dims` points (x fastest).
pub(crate) fn at(dims: [usize; 3], p: [usize; 3]) -> usize {
    (p[2] * dims[1] + p[1]) * dims[0] + p[0]
}

/// The children of any coarse cell, set up once per block shape rather than per cell: their flat
/// offsets in the block array from the cell's first (lower) child, x fastest, and their
/// positions (`-1` lower, `+1` upper child, `0` along inactive directions).
#[derive(Debug, Clone)]
struct Children {
    n: usize,
    flat: [usize; 8],
    off: [[f64; 3]; 8],
}

impl Children {
    fn of(geo: &Geometry) -> Self {
        let n = [0, 1, 2].map(|d| if d < geo.ndim { 2 } else { 1 });
        let mut ch = Self {
            n: 0,
            flat: [0; 8],
            off: [[0.0; 3]; 8],
        };
        for k in 0..n[2] {
            for j in 0..n[1] {
                for i in 0..n[0] {
                    let q = [i, j, k];
                    ch.flat[ch.n] = at(geo.fine, q);
                    ch.off[ch.n] = [0, 1, 2].map(|d| {
                        if d < geo.ndim {
                            2.0 * q[d] as f64 - 1.0
                        } else {
                            0.0
                        }
                    });
                    ch.n += 1;
                }
            }
        }
        ch
    }

    /// Flat indices of coarse cell `c`'s children in the block array, with their positions.
    fn under<'a>(
        &'a self,
        geo: &Geometry,
        c: [usize; 3],
    ) -> impl Iterator<Item = (usize, &'a [f64; 3])> + 'a {
        // `Geometry::check` has put every child of the box inside the block array.
        let f0 = at(
            geo.fine,
            [0, 1, 2].map(|d| geo.first_child(d, c[d]).unwrap_or(0)),
        );
        self.flat[..self.n]
            .iter()
            .zip(&self.off[..self.n])
            .map(move |(o, off)| (f0 + o, off))
    }
}

/// Restricts the fine cells under every coarse cell of `cbox` (coarse-buffer indices) into
/// `coarse`: the mean of the `2^ndim` children.
///
/// ```
/// use starhalo_boundary::bnd_info::IndexBox;
/// use starhalo_boundary::prolong_restrict::restrict;
/// use starhalo_mesh::field::{IndexRange, IndexShape};
/// // 1-D block of 4 cells, 2 ghosts: coarse buffer of 2 cells, 2 ghosts.
/// let shape = IndexShape::new([4, 1, 1], 2, 1).unwrap();
/// let fine = [0.0, 0.0, 1.0, 3.0, 5.0, 7.0, 0.0, 0.0];
/// let mut coarse = [0.0; 6];
/// let r = |s, e| IndexRange { s, e };
/// restrict(&shape, &fine, &mut coarse, &IndexBox([r(2, 3), r(0, 0), r(0, 0)])).unwrap();
/// assert_eq!(coarse, [0.0, 0.0, 2.0, 6.0, 0.0, 0.0]);
/// ```
pub fn restrict(
    shape: &IndexShape,
    fine: &[f64],
    coarse: &mut [f64],
    cbox: &IndexBox,
) -> Result<(), BoundaryError> {
    Resampler::new(shape)?.restrict(fine, coarse, cbox)
}

/// Prolongates every coarse cell of `cbox` (coarse-buffer indices) onto its children in
/// `fine` with `op`. The coarse cells' face neighbours must lie in the coarse buffer.
pub fn prolongate(
    op: Prolongation,
    shape: &IndexShape,
    coarse: &[f64],
    fine: &mut [f64],
    cbox: &IndexBox,
) -> Result<(), BoundaryError> {
    Resampler::new(shape)?.prolongate(op, coarse, fine, cbox)
}

/// [`restrict`] and [`prolongate`] for blocks of one shape, with the geometry worked out once
/// and used for every box, rather than once per box and per cell.
#[derive(Debug, Clone)]
pub struct Resampler {
    geo: Geometry,
    kids: Children,
}

impl Resampler {
    /// The geometry of blocks of `shape` and of their coarse buffers.
    pub fn new(shape: &IndexShape) -> Result<Self, BoundaryError> {
        let geo = Geometry::new(shape)?;
        let kids = Children::of(&geo);
        Ok(Self { geo, kids })
    }

    /// [`restrict`] on a block of this shape.
    pub fn restrict(
        &self,
        fine: &[f64],
        coarse: &mut [f64],
        cbox: &IndexBox,
    ) -> Result<(), BoundaryError> {
        let geo = &self.geo;
        geo.check(cbox, fine.len(), coarse.len(), false)?;
        let w = 1.0 / (1usize << geo.ndim) as f64;
        each_cell(cbox, |c| {
            let sum: f64 = self.kids.under(geo, c).map(|(f, _)| fine[f]).sum();
            coarse[at(geo.coarse, c)] = sum * w;
        });
        Ok(())
    }

    /// [`prolongate`] on a block of this shape.
    pub fn prolongate(
        &self,
        op: Prolongation,
        coarse: &[f64],
        fine: &mut [f64],
        cbox: &IndexBox,
    ) -> Result<(), BoundaryError> {
        let geo = &self.geo;
        geo.check(cbox, fine.len(), coarse.len(), op != Prolongation::Constant)?;
        let stride = [1, geo.coarse[0], geo.coarse[0] * geo.coarse[1]];
        each_cell(cbox, |c| {
            let ci = at(geo.coarse, c);
            let u = coarse[ci];
            let mut slope = [0.0; 3];
            if op != Prolongation::Constant {
                // `check` has put both face neighbours inside the coarse buffer.
                for (d, s) in slope.iter_mut().enumerate().take(geo.ndim) {
                    let dl = u - coarse[ci - stride[d]];
                    let dr = coarse[ci + stride[d]] - u;
                    *s = op.slope(dl, dr);
                }
            }
            for (f, off) in self.kids.under(geo, c) {
                let v: f64 = (0..3).map(|d| 0.25 * off[d] * slope[d]).sum();
                fine[f] = u + v;
            }
        });
        Ok(())
    }
}

/// Calls `f` on every point of `cbox`, x fastest (as [`IndexBox::points`], in plain loops:
/// boxes here are small and many).
fn each_cell(cbox: &IndexBox, mut f: impl FnMut([usize; 3])) {
    let [x, y, z] = cbox.0;
    for k in z.as_range() {
        for j in y.as_range() {
            for i in x.as_range() {
                f([i, j, k]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use starhalo_mesh::field::IndexRange;

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> f64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    fn shape(ndim: usize) -> IndexShape {
        let nx = [0, 1, 2].map(|d| if d < ndim { 4 } else { 1 });
        IndexShape::new(nx, 2, ndim).unwrap()
    }

    fn dims(s: &IndexShape) -> ([usize; 3], [usize; 3]) {
        (
            FieldLayout::of_shape(s, 1).dims,
            FieldLayout::of_shape(&s.coarse().unwrap(), 1).dims,
        )
    }

    fn points(d: [usize; 3]) -> impl Iterator<Item = [usize; 3]> {
        IndexBox(d.map(|n| IndexRange { s: 0, e: n - 1 }))
            .points()
            .collect::<Vec<_>>()
            .into_iter()
    }

    /// Coarse interior box (every coarse cell whose children lie in the block interior).
    fn interior(s: &IndexShape) -> IndexBox {
        let c = s.coarse().unwrap();
        IndexBox([0, 1, 2].map(|d| IndexRange {
            s: c.ghosts(d),
            e: c.ghosts(d) + c.nx()[d] - 1,
        }))
    }

    /// Linear field: value at position x (in fine-cell units, centred cells).
    fn lin(a: [f64; 3], x: [f64; 3]) -> f64 {
        1.5 + a[0] * x[0] + a[1] * x[1] + a[2] * x[2]
    }

    fn fine_x(s: &IndexShape, p: [usize; 3]) -> [f64; 3] {
        [0, 1, 2].map(|d| p[d] as f64 - s.ghosts(d) as f64 + 0.5)
    }

    fn coarse_x(s: &IndexShape, p: [usize; 3]) -> [f64; 3] {
        let cg = s.coarse().unwrap().ghosts(0);
        [0, 1, 2].map(|d| {
            if d < s.ndim() {
                2.0 * (p[d] as f64 - cg as f64 + 0.5)
            } else {
                0.5
            }
        })
    }

    #[test]
    fn restriction_of_a_linear_field_is_its_coarse_value() {
        for ndim in 1..=3 {
            let s = shape(ndim);
            let (fd, cd) = dims(&s);
            let a = [0.3, -1.25, 2.0];
            let fine: Vec<f64> = points(fd).map(|p| lin(a, fine_x(&s, p))).collect();
            let mut coarse = vec![f64::NAN; cd.iter().product()];
            restrict(&s, &fine, &mut coarse, &interior(&s)).unwrap();
            for c in interior(&s).points() {
                let want = lin(a, coarse_x(&s, c));
                assert!((coarse[at(cd, c)] - want).abs() < 1e-12, "{ndim}D {c:?}");
            }
        }
    }

    #[test]
    fn linear_and_minmod_prolongation_are_exact_on_linear_fields() {
        for ndim in 1..=3 {
            let s = shape(ndim);
            let (fd, cd) = dims(&s);
            let a = [0.7, 0.2, -0.4];
            let coarse: Vec<f64> = points(cd).map(|p| lin(a, coarse_x(&s, p))).collect();
            for op in [Prolongation::Linear, Prolongation::MinmodLinear] {
                let mut fine = vec![f64::NAN; fd.iter().product()];
                prolongate(op, &s, &coarse, &mut fine, &interior(&s)).unwrap();
                let mut n = 0;
                for p in points(fd) {
                    let inside =
                        (0..3).all(|d| p[d] >= s.ghosts(d) && p[d] < s.ghosts(d) + s.nx()[d]);
                    if inside {
                        let want = lin(a, fine_x(&s, p));
                        assert!(
                            (fine[at(fd, p)] - want).abs() < 1e-12,
                            "{op:?} {ndim}D {p:?}"
                        );
                        n += 1;
                    }
                }
                assert_eq!(n, s.nx().iter().product::<usize>());
            }
            // Piecewise constant is not exact on a sloped field.
            let mut fine = vec![0.0; fd.iter().product()];
            prolongate(
                Prolongation::Constant,
                &s,
                &coarse,
                &mut fine,
                &interior(&s),
            )
            .unwrap();
            let p = [
                2,
                if ndim > 1 { 2 } else { 0 },
                if ndim > 2 { 2 } else { 0 },
            ];
            assert!((fine[at(fd, p)] - lin(a, fine_x(&s, p))).abs() > 1e-3);
        }
    }

    #[test]
    fn minmod_never_creates_new_extrema_but_linear_can() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut linear_overshoots = 0;
        for round in 0..200 {
            let ndim = 1 + round % 3;
            let s = shape(ndim);
            let (fd, cd) = dims(&s);
            let coarse: Vec<f64> = (0..cd.iter().product::<usize>())
                .map(|_| {
                    if rng.next() < 0.3 {
                        0.0
                    } else {
                        rng.next() * 10.0 - 5.0
                    }
                })
                .collect();
            for op in [Prolongation::MinmodLinear, Prolongation::Linear] {
                let mut fine = vec![0.0; fd.iter().product()];
                prolongate(op, &s, &coarse, &mut fine, &interior(&s)).unwrap();
                for c in interior(&s).points() {
                    let mut lo = coarse[at(cd, c)];
                    let mut hi = lo;
                    for d in 0..ndim {
                        for step in [-1i64, 1] {
                            let mut q = c;
                            q[d] = (q[d] as i64 + step) as usize;
                            lo = lo.min(coarse[at(cd, q)]);
                            hi = hi.max(coarse[at(cd, q)]);
                        }
                    }
                    let geo = Geometry::new(&s).unwrap();
                    for (f, _) in Children::of(&geo).under(&geo, c) {
                        let v = fine[f];
                        let out = v < lo - 1e-12 || v > hi + 1e-12;
                        if op == Prolongation::MinmodLinear {
                            assert!(!out, "round {round}: {v} outside [{lo}, {hi}]");
                        } else {
                            linear_overshoots += usize::from(out);
                        }
                    }
                }
            }
        }
        assert!(
            linear_overshoots > 0,
            "the test data never challenges a limiter"
        );
    }

    #[test]
    fn boxes_outside_the_buffers_are_errors() {
        let s = shape(2);
        let (fd, cd) = dims(&s);
        let fine = vec![0.0; fd.iter().product()];
        let mut coarse = vec![0.0; cd.iter().product()];
        let r = |s, e| IndexRange { s, e };
        let whole = IndexBox([r(0, cd[0] - 1), r(0, cd[1] - 1), r(0, 0)]);
        assert!(restrict(&s, &fine, &mut coarse, &whole).is_err());
        let mut f2 = fine.clone();
        assert!(prolongate(Prolongation::MinmodLinear, &s, &coarse, &mut f2, &whole).is_err());
        assert!(restrict(&s, &fine[1..], &mut coarse, &interior(&s)).is_err());
        assert_eq!(minmod(1.0, -2.0), 0.0);
        assert_eq!(minmod(-1.0, -0.5), -0.5);
    }
}
