//! Pack-in-one, unpack-in-one, restriction, prolongation and physical boundary fill on a CUDA
//! device (feature `cuda`), with the host twins the device kernels are checked against.
//!
//! A [`BndCache`](crate::bnd_info::BndCache)'s descriptors go to the device once, as the
//! `#[repr(C)]` [`HaloDesc`] array the kernels read (a [`BndInfo`] has the same layout; a test
//! checks both against the CUDA source), and every exchange is then one launch per operation.
//!
//! - `plan`: [`SpacePlan`] turns an exchange's data work into box lists: per route, the coarse
//!   interiors restricted before packing; per partition, the coarse boxes restricted, the
//!   coarse physical boxes (outflow and reflecting faces), the boxes prolongated (per
//!   operator) and the fine physical boxes.
//! - `host_twin`: [`HostTwin`] runs a plan on the host with the host's own restriction,
//!   prolongation and boundary code, so the plan itself is checked against the exchange's host
//!   path in every build.
//! - `device` (feature `cuda`): `DeviceFields` runs the same plan as kernels, on storage that
//!   keeps the block arrays and the coarse buffers apart, each laid out as the kernels index
//!   them (`[block][variable][points]`).
//!
//! The conversions to the kernels' forms and the host twins exist in every build.

use starhalo_exec::cuda::{FieldDims, HaloDesc, RefineGeom};
use starhalo_mesh::field::IndexShape;

pub use crate::bnd_info::threshold_flags;
use crate::bnd_info::{BndInfo, FieldLayout, FLAG_MIRROR0};
use crate::error::BoundaryError;

#[cfg(feature = "cuda")]
mod device;
mod host_twin;
mod plan;
#[cfg(test)]
mod tests;

#[cfg(feature = "cuda")]
pub use device::{DeviceBndCache, DeviceFields, DeviceRefine};
pub use host_twin::HostTwin;
pub use plan::{PartPlan, SpacePlan};

/// The kernels' form of a descriptor.
pub fn halo_desc(b: &BndInfo) -> HaloDesc {
    HaloDesc {
        block: b.block as u64,
        var: b.var as u64,
        s: b.s.map(|v| v as u64),
        e: b.e.map(|v| v as u64),
        buf_offset: b.buf_offset as u64,
        flags: b.flags,
        pad: 0,
    }
}

/// The kernels' form of `nblocks` blocks of `layout`.
pub fn field_dims(layout: FieldLayout, nblocks: usize) -> FieldDims {
    FieldDims {
        dims: layout.dims,
        nvar: layout.nvar,
        nblocks,
    }
}

/// Restriction/prolongation geometry of `nblocks` blocks of `nvar` variables on `shape`.
pub fn refine_geom(
    shape: &IndexShape,
    nvar: usize,
    nblocks: usize,
) -> Result<RefineGeom, BoundaryError> {
    let cshape = shape.coarse()?;
    Ok(RefineGeom {
        ndim: shape.ndim(),
        nghost: shape.nghost(),
        coarse_nghost: cshape.nghost(),
        fine: field_dims(FieldLayout::of_shape(shape, nvar), nblocks),
        coarse: field_dims(FieldLayout::of_shape(&cshape, nvar), nblocks),
    })
}

/// Host twin of the physical fill kernel: every cell of each box takes the value of the cell
/// found by mapping its index onto `lo..=hi` along each direction in which the whole box lies
/// outside that range: clamped, or mirrored across the face where the box has
/// [`FLAG_MIRROR0`]` << d`. Boxes are checked as the device checks them.
pub fn physical_fill(
    layout: FieldLayout,
    nblocks: usize,
    boxes: &[BndInfo],
    lo: [usize; 3],
    hi: [usize; 3],
    data: &mut [f64],
) -> Result<(), BoundaryError> {
    let descs: Vec<HaloDesc> = boxes.iter().map(halo_desc).collect();
    let f = field_dims(layout, nblocks);
    starhalo_exec::cuda::desc::check_physical(&descs, &f, lo, hi)
        .map_err(|e| BoundaryError::Geometry(e.to_string()))?;
    if data.len() != f.len() {
        return Err(BoundaryError::Size {
            what: "field storage",
            expected: f.len(),
            got: data.len(),
        });
    }
    for b in boxes {
        let bx = b.index_box();
        let below = [0, 1, 2].map(|d| b.e[d] < lo[d]);
        let above = [0, 1, 2].map(|d| b.s[d] > hi[d]);
        let mirror = [0, 1, 2].map(|d| b.flags & (FLAG_MIRROR0 << d) != 0);
        for p in bx.points() {
            let q = [0, 1, 2].map(|d| match (below[d], above[d], mirror[d]) {
                (true, _, false) => lo[d],
                (true, _, true) => 2 * lo[d] - 1 - p[d],
                (_, true, false) => hi[d],
                (_, true, true) => 2 * hi[d] + 1 - p[d],
                _ => p[d],
            });
            data[f.index(b.block, b.var, p)] = data[f.index(b.block, b.var, q)];
        }
    }
    Ok(())
}
