//! What happens to a block after its ghost buffers are unpacked: on a block with a coarser
//! neighbour, its coarse buffer is completed and the coarse ghosts are prolongated into the
//! block's ghosts; then physical boundary conditions fill the faces on the domain edge.
//!
//! The coarse buffer of a block is complete around every region to prolongate when:
//! the coarser neighbours have sent their (widened) boxes into it, the block's own interior
//! is restricted into its interior, the ghosts received from same-level or finer neighbours
//! are restricted into the coarse ghosts they cover, and the physical boundary conditions
//! have been applied to it. Every step is a pure function of the block's values, so the
//! result does not depend on ranks, modes or message order.

use starhalo_mesh::field::{IndexRange, IndexShape};
use starhalo_mesh::BoundaryCondition;

use crate::bnd_info::{FieldLayout, IndexBox, FLAG_MIRROR0};
use crate::channel::Channel;
use crate::error::BoundaryError;
use crate::prolong_restrict::{Prolongation, Resampler};

/// The coarse-buffer box of the region of receiver element offset `o`: the coarse cells that
/// cover the block's `g` ghost layers there (or its interior, along free directions).
fn element_coarse_box(o: [i32; 3], shape: &IndexShape, cshape: &IndexShape) -> IndexBox {
    let mut r = [IndexRange { s: 0, e: 0 }; 3];
    for d in 0..shape.ndim() {
        let (cn, cg, half) = (cshape.nx()[d], cshape.nghost(), shape.ghosts(d) / 2);
        r[d] = match o[d] {
            -1 => IndexRange {
                s: cg - half,
                e: cg - 1,
            },
            1 => IndexRange {
                s: cg + cn,
                e: cg + cn + half - 1,
            },
            _ => IndexRange {
                s: cg,
                e: cg + cn - 1,
            },
        };
    }
    IndexBox(r)
}

/// The post-unpack work of one block.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockFinish {
    /// Local block index.
    pub block: usize,
    /// Coarse boxes to prolongate (regions whose neighbour is coarser).
    pub prolong: Vec<IndexBox>,
    /// Coarse ghost boxes to restrict from the block's ghosts (same-level or finer
    /// neighbours), needed only when `prolong` is not empty.
    pub restrict: Vec<IndexBox>,
    /// The coarse interior.
    pub interior: IndexBox,
    /// Physical boundary condition per (direction, side), `None` inside the domain.
    pub faces: [[Option<BoundaryCondition>; 2]; 3],
}

impl BlockFinish {
    /// The work of block `block` given the channels it receives on (every type) and its faces.
    pub fn new(
        block: usize,
        recv: &[Channel],
        shape: &IndexShape,
        faces: [[Option<BoundaryCondition>; 2]; 3],
    ) -> Result<Self, BoundaryError> {
        let mut prolong = Vec::new();
        let mut restrict = Vec::new();
        let needs_coarse = recv.iter().any(|c| c.level_diff > 0);
        let interior = match shape.coarse() {
            Ok(cs) if needs_coarse => {
                if (0..shape.ndim()).any(|d| !shape.ghosts(d).is_multiple_of(2)) {
                    return Err(BoundaryError::Geometry(format!(
                        "prolongation needs an even number of ghost layers, not {}",
                        shape.nghost()
                    )));
                }
                // Every element region of the block: restrict where a same-level or finer
                // neighbour filled the ghosts, prolongate where a coarser one sent (its own
                // element, or the widened box of a coarser face or edge neighbour that covers
                // a region with no record of its own), skip regions beyond the domain.
                let ndim = shape.ndim();
                for o in starhalo_mesh::Element::neighbors(ndim).map(|e| e.offset()) {
                    let outside = (0..ndim).any(|d| {
                        o[d] != 0
                            && matches!(
                                faces[d][usize::from(o[d] > 0)],
                                Some(bc) if bc != BoundaryCondition::Periodic
                            )
                    });
                    let mut filled_fine = false;
                    for c in recv.iter().filter(|c| c.receiver_element().offset() == o) {
                        filled_fine |= c.level_diff <= 0;
                    }
                    if outside {
                        continue;
                    }
                    let b = element_coarse_box(o, shape, &cs);
                    let list = if filled_fine {
                        &mut restrict
                    } else {
                        &mut prolong
                    };
                    list.push(b);
                }
                element_coarse_box([0; 3], shape, &cs)
            }
            _ => IndexBox([IndexRange { s: 0, e: 0 }; 3]),
        };
        Ok(Self {
            block,
            prolong,
            restrict,
            interior,
            faces,
        })
    }

    /// Completes the coarse buffer and prolongates (if the block has a coarser neighbour),
    /// then applies the physical boundaries, on one variable slot.
    pub fn apply(
        &self,
        op: Prolongation,
        shape: &IndexShape,
        fine: &mut [f64],
        coarse: &mut [f64],
    ) -> Result<(), BoundaryError> {
        if !self.prolong.is_empty() {
            let cs = shape.coarse()?;
            let r = Resampler::new(shape)?;
            r.restrict(fine, coarse, &self.interior)?;
            for b in &self.restrict {
                r.restrict(fine, coarse, b)?;
            }
            physical_bounds(&cs, &self.faces, coarse);
            for b in &self.prolong {
                r.prolongate(op, coarse, fine, b)?;
            }
        }
        physical_bounds(shape, &self.faces, fine);
        Ok(())
    }
}

/// The interior of `shape` as inclusive index bounds per direction (`0..=0` along inactive
/// directions): the range physical boxes clamp onto or mirror across.
pub fn interior_bounds(shape: &IndexShape) -> ([usize; 3], [usize; 3]) {
    let (mut lo, mut hi) = ([0; 3], [0; 3]);
    for d in 0..shape.ndim() {
        lo[d] = shape.ghosts(d);
        hi[d] = shape.ghosts(d) + shape.nx()[d] - 1;
    }
    (lo, hi)
}

/// [`physical_bounds`]' outflow and reflecting faces as disjoint boxes for a one-launch
/// fill, each with its flags ([`FLAG_MIRROR0`]` << d` along the directions it lies beyond a
/// reflecting face). Along each direction the points split into the ghost layers of each
/// such side and one range of the rest (interior plus any other ghosts); every product of
/// these ranges except the all-rest one is a box. A cell of a box outside along the
/// directions `S` takes the value of the cell mapped into the interior along `S` (clamped
/// across outflow faces, mirrored across reflecting ones), which is what the
/// direction-by-direction fill leaves there; no box reads a cell any box writes (given at
/// least as many interior cells as ghost layers), so all boxes of all blocks and variables
/// go in one launch. Empty unless some face is outflow or reflecting.
pub fn physical_boxes(
    shape: &IndexShape,
    faces: &[[Option<BoundaryCondition>; 2]; 3],
) -> Vec<(IndexBox, u32)> {
    let dims = FieldLayout::of_shape(shape, 1).dims;
    // Per direction: (range, flags if it is a ghost range of a physical face).
    let mut ranges: [Vec<(IndexRange, Option<u32>)>; 3] = Default::default();
    for (d, r) in ranges.iter_mut().enumerate() {
        let face = |side: usize| match faces[d][side] {
            _ if d >= shape.ndim() => None,
            Some(BoundaryCondition::Outflow) => Some(0),
            Some(BoundaryCondition::Reflecting) => Some(FLAG_MIRROR0 << d),
            _ => None,
        };
        let (g, n) = if d < shape.ndim() {
            (shape.ghosts(d), shape.nx()[d])
        } else {
            (0, dims[d])
        };
        let (lo, hi) = (face(0), face(1));
        let s = if lo.is_some() { g } else { 0 };
        let e = if hi.is_some() { g + n } else { dims[d] } - 1;
        if lo.is_some() {
            r.push((IndexRange { s: 0, e: g - 1 }, lo));
        }
        r.push((IndexRange { s, e }, None));
        if hi.is_some() {
            r.push((
                IndexRange {
                    s: g + n,
                    e: dims[d] - 1,
                },
                hi,
            ));
        }
    }
    let mut boxes = Vec::new();
    for &(r0, f0) in &ranges[0] {
        for &(r1, f1) in &ranges[1] {
            for &(r2, f2) in &ranges[2] {
                let flags = [f0, f1, f2];
                if flags.iter().any(Option::is_some) {
                    let mirror = flags.iter().flatten().fold(0, |a, f| a | f);
                    boxes.push((IndexBox([r0, r1, r2]), mirror));
                }
            }
        }
    }
    boxes
}

/// Fills the ghosts of `arr` (one variable slot on `shape`) beyond every face with a physical
/// boundary condition, direction by direction so that edges and corners take the value of
/// the last direction: outflow copies the last interior cell, reflecting mirrors the
/// interior. Periodic and user faces are left alone (neighbours or the application fill
/// them).
pub fn physical_bounds(
    shape: &IndexShape,
    faces: &[[Option<BoundaryCondition>; 2]; 3],
    arr: &mut [f64],
) {
    let dims = FieldLayout::of_shape(shape, 1).dims;
    let stride = [1, dims[0], dims[0] * dims[1]];
    for d in 0..shape.ndim() {
        let (n, g) = (shape.nx()[d], shape.ghosts(d));
        for (side, bc) in faces[d].iter().enumerate() {
            let source: &dyn Fn(usize) -> usize = match bc {
                Some(BoundaryCondition::Outflow) if side == 0 => &|_| g,
                Some(BoundaryCondition::Outflow) => &|_| g + n - 1,
                Some(BoundaryCondition::Reflecting) if side == 0 => &|x| 2 * g - 1 - x,
                Some(BoundaryCondition::Reflecting) => &|x| 2 * (g + n) - 1 - x,
                _ => continue,
            };
            let ghosts = if side == 0 { 0..g } else { g + n..2 * g + n };
            // Walk every line along d: its start point has coordinate 0 along d.
            let others = match d {
                0 => [1, 2],
                1 => [0, 2],
                _ => [0, 1],
            };
            for a in 0..dims[others[0]] {
                for b in 0..dims[others[1]] {
                    let base = a * stride[others[0]] + b * stride[others[1]];
                    for x in ghosts.clone() {
                        arr[base + x * stride[d]] = arr[base + source(x) * stride[d]];
                    }
                }
            }
        }
    }
}

/// The interior of a coarse buffer of `cshape`.
pub fn coarse_interior(cshape: &IndexShape) -> IndexBox {
    let mut r = [IndexRange { s: 0, e: 0 }; 3];
    for (d, x) in r.iter_mut().enumerate().take(cshape.ndim()) {
        let (n, g) = (cshape.nx()[d], cshape.nghost());
        *x = IndexRange { s: g, e: g + n - 1 };
    }
    IndexBox(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outflow_and_reflecting_fill_each_face_from_the_interior() {
        let shape = IndexShape::new([3, 2, 1], 2, 2).unwrap();
        let dims = FieldLayout::of_shape(&shape, 1).dims;
        assert_eq!(dims, [7, 6, 1]);
        let mut a: Vec<f64> = (0..42).map(f64::from).collect();
        let faces = [
            [
                Some(BoundaryCondition::Outflow),
                Some(BoundaryCondition::Reflecting),
            ],
            [None, Some(BoundaryCondition::Periodic)],
            [None, None],
        ];
        physical_bounds(&shape, &faces, &mut a);
        for j in 0..6 {
            let row = &a[j * 7..(j + 1) * 7];
            let v = |i: usize| (j * 7 + i) as f64;
            assert_eq!(row[0], v(2));
            assert_eq!(row[1], v(2));
            // Reflecting: ghost 5 mirrors interior 4, ghost 6 mirrors interior 3.
            assert_eq!(row[5], v(4));
            assert_eq!(row[6], v(3));
        }
        // x2 faces untouched.
        assert_eq!(a[2], 2.0);
    }
}
