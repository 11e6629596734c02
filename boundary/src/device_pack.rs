//! Pack-in-one, unpack-in-one, restriction, prolongation and physical boundary fill on a CUDA
//! device
//! (feature `cuda`), with the host twins the device kernels are checked against.
//!
//! A [`BndCache`]'s descriptors go to the device once, as the `#[repr(C)]`
//! [`HaloDesc`] array the kernels read (a [`BndInfo`] has the
//! same layout; a test checks both against the CUDA source), and every exchange is then one
//! launch per operation.
//!
//! [`SpacePlan`] turns an exchange's data work into box lists: per route, the coarse
//! interiors restricted before packing; per partition, the coarse boxes restricted, the
//! coarse physical boxes (outflow and reflecting faces), the boxes prolongated (per operator)
//! and the fine physical boxes.
//! The device storage keeps the block arrays and the coarse buffers apart, each laid out as
//! the kernels index them (`[block][variable][points]`). [`HostTwin`] runs a plan on the host
//! with the host's own restriction, prolongation and boundary code, so the plan itself is
//! checked against the exchange's host path in every build; `DeviceFields` (feature `cuda`)
//! runs the same plan as kernels. The conversions and the host twins exist in every build.

use starhalo_exec::cuda::{FieldDims, HaloDesc, RefineGeom};
use starhalo_mesh::field::IndexShape;

pub use crate::bnd_info::threshold_flags;
use crate::bnd_info::{
    BlockLayout, BndCache, BndInfo, FieldLayout, FLAG_ALLOCATED, FLAG_COARSE, FLAG_MIRROR0,
};
use crate::bounds::{coarse_interior, interior_bounds, physical_boxes, BlockFinish};
use crate::error::BoundaryError;
use crate::exchange::{not_host, Exchange, FieldSpace};
use crate::prolong_restrict::{prolongate, restrict, Prolongation};
use crate::storage::BlockData;
use starhalo_sf::p2p::{Values, ValuesMut};

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

/// Host twin of the pack kernel: each sub-halo of `infos` into `buf` at its offset, from the
/// `fine` block arrays or (coarse sub-halos) the `coarse` buffers of `nblocks` blocks.
fn pack_boxes(
    infos: &[BndInfo],
    nblocks: usize,
    fine: (FieldLayout, &[f64]),
    coarse: Option<(FieldLayout, &[f64])>,
    buf: &mut [f64],
) -> Result<(), BoundaryError> {
    for b in infos {
        let (l, arr) = match b.flags & FLAG_COARSE {
            0 => fine,
            _ => coarse.ok_or_else(no_coarse)?,
        };
        let f = field_dims(l, nblocks);
        for (k, p) in b.index_box().points().enumerate() {
            buf[b.buf_offset + k] = arr[f.index(b.block, b.var, p)];
        }
    }
    Ok(())
}

/// Host twin of the unpack kernel: each sub-halo of `infos` from `buf` into the block arrays
/// or the coarse buffers; a sub-halo without [`FLAG_ALLOCATED`] gets `fill`.
fn unpack_boxes(
    infos: &[BndInfo],
    buf: &[f64],
    nblocks: usize,
    fine: (FieldLayout, &mut [f64]),
    mut coarse: Option<(FieldLayout, &mut [f64])>,
    fill: f64,
) -> Result<(), BoundaryError> {
    let (fl, fine) = fine;
    for b in infos {
        let on = b.flags & FLAG_ALLOCATED != 0;
        let (l, arr) = match (b.flags & FLAG_COARSE, coarse.as_mut()) {
            (0, _) => (fl, &mut *fine),
            (_, Some((cl, c))) => (*cl, &mut **c),
            (_, None) => return Err(no_coarse()),
        };
        let f = field_dims(l, nblocks);
        for (k, p) in b.index_box().points().enumerate() {
            arr[f.index(b.block, b.var, p)] = if on { buf[b.buf_offset + k] } else { fill };
        }
    }
    Ok(())
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

/// An exchange's data work as box lists, for storage that keeps the block arrays (`fine`) and
/// the coarse buffers (`coarse`) apart, each `[block][variable][points]`.
#[derive(Debug, Clone)]
pub struct SpacePlan {
    /// The block arrays of one block.
    pub fine: FieldLayout,
    /// The coarse buffers of one block, on a multilevel mesh.
    pub coarse: Option<FieldLayout>,
    /// Blocks on this rank.
    pub nblocks: usize,
    /// The block shape.
    pub shape: IndexShape,
    /// The prolongation of each variable the plan was made with.
    pub ops: Vec<Prolongation>,
    /// The value unallocated (null) sub-halos receive: the default of every sparse
    /// fill-ghost variable.
    pub fill: f64,
    /// Per storage slot: its variable's sparse threshold (infinite where it has none), the
    /// exchange's.
    pub thresholds: Vec<f64>,
    /// Per route: the coarse interiors restricted before it packs.
    pub route_restrict: Vec<Vec<BndInfo>>,
    /// Per partition: its post-unpack work.
    pub parts: Vec<PartPlan>,
}

/// A partition's post-unpack work, in launch order.
#[derive(Debug, Clone, Default)]
pub struct PartPlan {
    /// Coarse boxes of the blocks with a coarser neighbour restricted from their block arrays:
    /// interiors, and the ghosts same-level or finer neighbours filled.
    pub restrict: Vec<BndInfo>,
    /// Those blocks' coarse physical boxes.
    pub coarse_physical: Vec<BndInfo>,
    /// Coarse boxes prolongated into the block arrays, per operator.
    pub prolong: Vec<(Prolongation, Vec<BndInfo>)>,
    /// The block arrays' physical boxes.
    pub physical: Vec<BndInfo>,
}

impl SpacePlan {
    /// The plan of `ex`, built for `data`, whose sparse fill-ghost variables must share one
    /// default value.
    ///
    /// Restriction, prolongation and the physical fill run on every variable, allocated or not (the
    /// host skips unallocated ones): an unallocated variable's values are never read, since
    /// it sends null messages and its interior is never written, so allocated values are the
    /// host's bit for bit.
    pub fn new(ex: &Exchange, data: &BlockData) -> Result<Self, BoundaryError> {
        let nblocks = data.gids().len();
        let mut defaults = data
            .vars()
            .iter()
            .filter(|v| v.fill_ghost && v.threshold.is_some())
            .map(|v| v.default);
        let fill = defaults.next().unwrap_or(0.0);
        if defaults.any(|d| d.to_bits() != fill.to_bits()) {
            return Err(BoundaryError::Geometry(
                "sparse variables with different default values".into(),
            ));
        }
        let shape = *data.shape();
        let cshape = data.coarse_shape().copied();
        let slots_of = |v: usize| data.vars()[v].slots.clone();
        // (variable, slot) of every fill-ghost variable.
        let filled: Vec<(usize, usize)> = (0..data.vars().len())
            .filter(|&v| data.vars()[v].fill_ghost)
            .flat_map(|v| slots_of(v).map(move |s| (v, s)))
            .collect();
        let ops = ex.prolongations().to_vec();
        let route_restrict = ex
            .route_restricts()
            .map(|list| match &cshape {
                Some(cs) => {
                    let interior = coarse_interior(cs);
                    list.iter()
                        .flat_map(|&(b, v)| slots_of(v).map(move |s| (b, s)))
                        .map(|(b, s)| BndInfo::new(b, s, &interior, 0, FLAG_COARSE))
                        .collect()
                }
                None => Vec::new(),
            })
            .collect();
        let parts = (0..ex.partitions())
            .map(|p| part_plan(ex.finish_work(p), &filled, &ops, &shape, cshape.as_ref()))
            .collect::<Result<_, _>>()?;
        let layout = data.layout();
        Ok(Self {
            fine: layout.fine,
            coarse: layout.coarse,
            nblocks,
            shape,
            ops,
            fill,
            thresholds: ex.thresholds().to_vec(),
            route_restrict,
            parts,
        })
    }

    /// Checks that the exchange still prolongates with the operators the plan was made with.
    pub fn check_ops(&self, ops: &[Prolongation]) -> Result<(), BoundaryError> {
        if ops == self.ops {
            Ok(())
        } else {
            Err(BoundaryError::Mismatch(
                "prolongation changed after the plan was made".into(),
            ))
        }
    }

    /// The block layout the host storage has for this plan.
    pub fn block_layout(&self) -> BlockLayout {
        BlockLayout {
            fine: self.fine,
            coarse: self.coarse,
        }
    }

    /// The host storage `data` split into block arrays and coarse buffers.
    pub fn split(&self, data: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let l = self.block_layout();
        let (n, start) = (l.block_len(), l.coarse_start());
        let (mut fine, mut coarse) = (Vec::new(), Vec::new());
        for b in data.chunks(n.max(1)).take(self.nblocks) {
            fine.extend_from_slice(&b[..start]);
            coarse.extend_from_slice(&b[start..]);
        }
        (fine, coarse)
    }

    /// The inverse of [`split`](Self::split), into `data`.
    pub fn merge(&self, fine: &[f64], coarse: &[f64], data: &mut [f64]) {
        let l = self.block_layout();
        let (n, start) = (l.block_len(), l.coarse_start());
        let cn = n - start;
        for (b, out) in data.chunks_mut(n.max(1)).take(self.nblocks).enumerate() {
            out[..start].copy_from_slice(&fine[b * start..(b + 1) * start]);
            out[start..].copy_from_slice(&coarse[b * cn..(b + 1) * cn]);
        }
    }
}

fn part_plan(
    work: &[BlockFinish],
    filled: &[(usize, usize)],
    ops: &[Prolongation],
    shape: &IndexShape,
    cshape: Option<&IndexShape>,
) -> Result<PartPlan, BoundaryError> {
    let mut p = PartPlan::default();
    let mut by_op: Vec<(Prolongation, Vec<BndInfo>)> = Vec::new();
    for f in work {
        let fine_physical = physical_boxes(shape, &f.faces);
        for &(_, s) in filled {
            for (b, flags) in &fine_physical {
                p.physical.push(BndInfo::new(f.block, s, b, 0, *flags));
            }
        }
        if f.prolong.is_empty() {
            continue;
        }
        let Some(cs) = cshape else {
            return Err(BoundaryError::Geometry(
                "prolongation without coarse buffers".into(),
            ));
        };
        let coarse_physical = physical_boxes(cs, &f.faces);
        for &(v, s) in filled {
            let co = |b: &crate::bnd_info::IndexBox| BndInfo::new(f.block, s, b, 0, FLAG_COARSE);
            p.restrict.push(co(&f.interior));
            p.restrict.extend(f.restrict.iter().map(co));
            p.coarse_physical.extend(
                coarse_physical
                    .iter()
                    .map(|(b, flags)| BndInfo::new(f.block, s, b, 0, FLAG_COARSE | flags)),
            );
            let op = *ops.get(v).ok_or_else(|| {
                BoundaryError::Mismatch(format!("no prolongation for variable {v}"))
            })?;
            let list = match by_op.iter().position(|(o, _)| *o == op) {
                Some(i) => &mut by_op[i].1,
                None => {
                    by_op.push((op, Vec::new()));
                    &mut by_op.last_mut().expect("just pushed").1
                }
            };
            list.extend(f.prolong.iter().map(co));
        }
    }
    p.prolong = by_op;
    Ok(p)
}

/// A [`SpacePlan`] run on the host with the host's restriction, prolongation and boundary
/// code, on its own split copy of the storage: what `DeviceFields` does, box for box, so
/// that its results can be checked against the exchange's host path anywhere.
#[derive(Debug)]
pub struct HostTwin {
    plan: SpacePlan,
    fine: Vec<f64>,
    coarse: Vec<f64>,
}

impl HostTwin {
    /// The plan of `ex` and a copy of `data`.
    pub fn new(ex: &Exchange, data: &BlockData) -> Result<Self, BoundaryError> {
        let plan = SpacePlan::new(ex, data)?;
        let (fine, coarse) = plan.split(data.data());
        Ok(Self { plan, fine, coarse })
    }

    /// The twin's values in the host storage's layout.
    pub fn merged(&self) -> Vec<f64> {
        let n = self.plan.block_layout().block_len() * self.plan.nblocks;
        let mut out = vec![0.0; n];
        self.plan.merge(&self.fine, &self.coarse, &mut out);
        out
    }

    fn slot(l: FieldLayout, b: &BndInfo) -> std::ops::Range<usize> {
        let n = l.dims.iter().product::<usize>();
        let start = (b.block * l.nvar + b.var) * n;
        start..start + n
    }

    fn restrict_boxes(&mut self, boxes: &[BndInfo]) -> Result<(), BoundaryError> {
        if boxes.is_empty() {
            return Ok(());
        }
        let c = self.plan.coarse.ok_or_else(no_coarse)?;
        for b in boxes {
            let f = &self.fine[Self::slot(self.plan.fine, b)];
            let co = &mut self.coarse[Self::slot(c, b)];
            restrict(&self.plan.shape, f, co, &b.index_box())?;
        }
        Ok(())
    }
}

fn no_coarse() -> BoundaryError {
    BoundaryError::Geometry("coarse boxes without coarse buffers".into())
}

impl FieldSpace for HostTwin {
    fn restrict(
        &mut self,
        route: usize,
        _list: &[(usize, usize)],
        _shape: &IndexShape,
        _data: &mut BlockData,
    ) -> Result<(), BoundaryError> {
        let boxes =
            self.plan.route_restrict.get_mut(route).ok_or_else(|| {
                BoundaryError::Mismatch(format!("route {route} is not in the plan"))
            })?;
        let boxes = std::mem::take(boxes);
        let done = self.restrict_boxes(&boxes);
        self.plan.route_restrict[route] = boxes;
        done
    }

    fn pack(
        &mut self,
        _route: usize,
        cache: &BndCache,
        _data: &BlockData,
        buf: ValuesMut<'_>,
        flags: Option<(&[f64], &mut [u32])>,
    ) -> Result<(), BoundaryError> {
        let buf = buf.host().ok_or_else(not_host)?;
        let p = &self.plan;
        let coarse = p.coarse.map(|c| (c, &self.coarse[..]));
        pack_boxes(cache.infos(), p.nblocks, (p.fine, &self.fine), coarse, buf)?;
        if let Some((t, over)) = flags {
            threshold_flags(cache.infos(), buf, t, over);
        }
        Ok(())
    }

    fn unpack(
        &mut self,
        _route: usize,
        cache: &BndCache,
        buf: Values<'_>,
        _data: &mut BlockData,
        _defaults: &[f64],
    ) -> Result<(), BoundaryError> {
        let buf = buf.host().ok_or_else(not_host)?;
        let p = &self.plan;
        let coarse = p.coarse.map(|c| (c, &mut self.coarse[..]));
        let fine = (p.fine, &mut self.fine[..]);
        unpack_boxes(cache.infos(), buf, p.nblocks, fine, coarse, p.fill)
    }

    fn finish(
        &mut self,
        part: usize,
        _work: &[BlockFinish],
        ops: &[Prolongation],
        _shape: &IndexShape,
        _data: &mut BlockData,
    ) -> Result<(), BoundaryError> {
        self.plan.check_ops(ops)?;
        let p = std::mem::take(self.plan.parts.get_mut(part).ok_or_else(|| {
            BoundaryError::Mismatch(format!("partition {part} is not in the plan"))
        })?);
        let done = self.run_part(&p);
        self.plan.parts[part] = p;
        done
    }
}

impl HostTwin {
    /// A partition's post-unpack work, in the device's launch order.
    fn run_part(&mut self, p: &PartPlan) -> Result<(), BoundaryError> {
        let nb = self.plan.nblocks;
        self.restrict_boxes(&p.restrict)?;
        if let Some(c) = self.plan.coarse {
            let (lo, hi) = interior_bounds(&self.plan.shape.coarse()?);
            physical_fill(c, nb, &p.coarse_physical, lo, hi, &mut self.coarse)?;
            for (op, boxes) in &p.prolong {
                for b in boxes {
                    let co = &self.coarse[Self::slot(c, b)];
                    let f = &mut self.fine[Self::slot(self.plan.fine, b)];
                    prolongate(*op, &self.plan.shape, co, f, &b.index_box())?;
                }
            }
        }
        let (lo, hi) = interior_bounds(&self.plan.shape);
        physical_fill(self.plan.fine, nb, &p.physical, lo, hi, &mut self.fine)
    }
}

#[cfg(feature = "cuda")]
pub use device::{DeviceBndCache, DeviceFields, DeviceRefine};

#[cfg(feature = "cuda")]
mod device {
    use std::sync::Arc;

    use starhalo_exec::cuda::{
        CudaError, Device, DeviceHalos, HaloDesc, ProlongOp, RefineGeom, Staging,
    };
    use starhalo_exec::Buffer;
    use starhalo_mesh::field::IndexShape;

    use super::{field_dims, halo_desc, refine_geom, SpacePlan};
    use crate::bnd_info::{BndCache, BndInfo, FieldLayout};
    use crate::bounds::{interior_bounds, BlockFinish};
    use crate::error::BoundaryError;
    use crate::exchange::{Exchange, FieldSpace};
    use crate::prolong_restrict::Prolongation;
    use crate::storage::BlockData;
    use starhalo_sf::p2p::{Values, ValuesMut};

    /// A [`BndCache`] on a device: pack-in-one and unpack-in-one as one launch each.
    #[derive(Debug)]
    pub struct DeviceBndCache {
        halos: DeviceHalos,
        buffer_len: usize,
    }

    impl DeviceBndCache {
        /// Uploads the descriptors of `cache`, built for `nblocks` blocks of `layout` (coarse
        /// sub-halos in coarse buffers of `coarse`).
        pub fn new(
            dev: &Arc<Device>,
            cache: &BndCache,
            layout: FieldLayout,
            coarse: Option<FieldLayout>,
            nblocks: usize,
        ) -> Result<Self, CudaError> {
            let descs: Vec<HaloDesc> = cache.infos().iter().map(halo_desc).collect();
            let f = field_dims(layout, nblocks);
            let c = coarse.map(|c| field_dims(c, nblocks));
            Ok(Self {
                halos: DeviceHalos::for_pack(dev, &descs, f, c, cache.buffer_len())?,
                buffer_len: cache.buffer_len(),
            })
        }

        /// Length of the communication buffer.
        pub fn buffer_len(&self) -> usize {
            self.buffer_len
        }

        /// Uploads `cache`'s descriptors again if their allocation flags changed since the
        /// upload (sparse variables sending null or data).
        pub fn refresh(&mut self, dev: &Arc<Device>, cache: &BndCache) -> Result<(), CudaError> {
            let infos = cache.infos();
            let same = infos.len() == self.halos.len()
                && infos
                    .iter()
                    .zip(self.halos.descs())
                    .all(|(b, d)| b.flags == d.flags);
            if !same {
                let descs: Vec<HaloDesc> = infos.iter().map(halo_desc).collect();
                self.halos = self.halos.with_descs(dev, &descs)?;
            }
            Ok(())
        }

        /// Packs every sub-halo from `data` (coarse ones from `coarse`) into `buf`, all on
        /// the device; with `flags = Some((thresholds, out))`, `out[h]` becomes 1 when some
        /// |value| of sub-halo `h` exceeds its variable slot's threshold (sparse
        /// allocation), else 0.
        pub fn pack(
            &self,
            dev: &Device,
            data: &Buffer<f64>,
            coarse: Option<&Buffer<f64>>,
            buf: &mut Buffer<f64>,
            flags: Option<(&Buffer<f64>, &mut Buffer<u32>)>,
        ) -> Result<(), CudaError> {
            dev.halo_pack(&self.halos, data, coarse, buf, flags)
        }

        /// Unpacks every sub-halo from `buf` into `data` (coarse ones into `coarse`);
        /// sub-halos without [`FLAG_ALLOCATED`](crate::bnd_info::FLAG_ALLOCATED) get
        /// `default`.
        pub fn unpack(
            &self,
            dev: &Device,
            buf: &Buffer<f64>,
            data: &mut Buffer<f64>,
            coarse: Option<&mut Buffer<f64>>,
            default: f64,
        ) -> Result<(), CudaError> {
            dev.halo_unpack(&self.halos, buf, data, coarse, default)
        }
    }

    /// A route on the device: send and receive descriptors with their device copies of host
    /// message buffers (staged path), the send side's sparse flags, and the restriction
    /// before packing.
    #[derive(Debug)]
    struct DeviceRoute {
        sides: [(DeviceBndCache, Staging<f64>); 2],
        over: Buffer<u32>,
        restrict: Option<DeviceRefine>,
    }

    /// A partition's post-unpack work on the device: one launch per non-empty step.
    #[derive(Debug)]
    struct DevicePart {
        restrict: Option<DeviceRefine>,
        coarse_physical: Option<DeviceHalos>,
        prolong: Vec<(Prolongation, DeviceRefine)>,
        physical: Option<DeviceHalos>,
    }

    /// The field storage of a rank's blocks on a device, as an exchange's [`FieldSpace`]
    /// running a [`SpacePlan`]: the block arrays and (multilevel) the coarse buffers apart,
    /// each route restricting its coarse interiors in one launch and packing in one launch
    /// into a device buffer, which is copied to the host buffer MPI sends (the copy waits for
    /// the stream: the one synchronisation before MPI), and unpacking in one launch after the
    /// host buffer is copied up; each partition then restricts, fills coarse physical faces,
    /// prolongates (one launch per operator) and fills physical faces, one launch each.
    #[derive(Debug)]
    pub struct DeviceFields {
        dev: Arc<Device>,
        plan: SpacePlan,
        /// The plan's sparse threshold per variable slot.
        thresholds: Buffer<f64>,
        fine: Buffer<f64>,
        coarse: Option<Buffer<f64>>,
        routes: Vec<DeviceRoute>,
        parts: Vec<DevicePart>,
    }

    impl DeviceFields {
        /// Uploads `data` and the plan of `ex`, which was built for `data`
        /// ([`SpacePlan::new`] says what it refuses).
        pub fn new(
            dev: &Arc<Device>,
            ex: &Exchange,
            data: &BlockData,
        ) -> Result<Self, BoundaryError> {
            let plan = SpacePlan::new(ex, data)?;
            Self::upload(dev, ex, data, plan).map_err(BoundaryError::device)
        }

        fn upload(
            dev: &Arc<Device>,
            ex: &Exchange,
            data: &BlockData,
            plan: SpacePlan,
        ) -> Result<Self, CudaError> {
            let nb = plan.nblocks;
            let geom = match plan.coarse {
                Some(_) => Some(
                    refine_geom(&plan.shape, plan.fine.nvar, nb)
                        .map_err(|e| CudaError::Invalid(e.to_string()))?,
                ),
                None => None,
            };
            let refine =
                |boxes: &[BndInfo], slopes: bool| -> Result<Option<DeviceRefine>, CudaError> {
                    match (boxes.is_empty(), geom) {
                        (true, _) => Ok(None),
                        (false, Some(g)) => DeviceRefine::new(dev, boxes, g, slopes).map(Some),
                        (false, None) => Err(CudaError::Invalid(
                            "coarse boxes without coarse buffers".into(),
                        )),
                    }
                };
            let physical = |boxes: &[BndInfo], l: FieldLayout, s: &IndexShape| {
                if boxes.is_empty() {
                    return Ok(None);
                }
                let descs: Vec<HaloDesc> = boxes.iter().map(halo_desc).collect();
                let (lo, hi) = interior_bounds(s);
                DeviceHalos::for_physical(dev, &descs, field_dims(l, nb), lo, hi).map(Some)
            };
            let mut routes = Vec::new();
            for ((send, recv), restrict) in ex.route_caches().zip(&plan.route_restrict) {
                let side = |c: &BndCache| -> Result<_, CudaError> {
                    let d = DeviceBndCache::new(dev, c, plan.fine, plan.coarse, nb)?;
                    Ok((d, Staging::new(c.buffer_len())))
                };
                routes.push(DeviceRoute {
                    sides: [side(send)?, side(recv)?],
                    over: Buffer::zeroed_on(dev, send.infos().len())?,
                    restrict: refine(restrict, false)?,
                });
            }
            let cshape = plan.shape.coarse().ok();
            let mut parts = Vec::new();
            for p in &plan.parts {
                let coarse_physical = match (plan.coarse, &cshape) {
                    (Some(c), Some(cs)) => physical(&p.coarse_physical, c, cs)?,
                    _ => None,
                };
                let mut prolong = Vec::new();
                for (op, boxes) in &p.prolong {
                    if let Some(r) = refine(boxes, *op != Prolongation::Constant)? {
                        prolong.push((*op, r));
                    }
                }
                parts.push(DevicePart {
                    restrict: refine(&p.restrict, false)?,
                    coarse_physical,
                    prolong,
                    physical: physical(&p.physical, plan.fine, &plan.shape)?,
                });
            }
            let (fine, coarse) = plan.split(data.data());
            Ok(Self {
                dev: dev.clone(),
                thresholds: Buffer::from_host_to(dev, &plan.thresholds)?,
                fine: Buffer::from_host_to(dev, &fine)?,
                coarse: match plan.coarse {
                    Some(_) => Some(Buffer::from_host_to(dev, &coarse)?),
                    None => None,
                },
                plan,
                routes,
                parts,
            })
        }

        /// The device.
        pub fn device(&self) -> &Arc<Device> {
            &self.dev
        }

        /// The layout of each block's arrays.
        pub fn layout(&self) -> FieldLayout {
            self.plan.fine
        }

        /// Allocates every route's device copies of its messages now (the staged path needs
        /// them; GPU-aware messages never do), so that the exchange itself allocates nothing.
        pub fn allocate_staging(&mut self) -> Result<(), BoundaryError> {
            for r in &mut self.routes {
                for (_, s) in &mut r.sides {
                    s.allocate(&self.dev).map_err(BoundaryError::device)?;
                }
            }
            Ok(())
        }

        /// The block arrays on the device, `[block][variable][points]` (without a coarse
        /// level, the host storage's own layout).
        pub fn data(&self) -> &Buffer<f64> {
            &self.fine
        }

        /// The same, to write.
        pub fn data_mut(&mut self) -> &mut Buffer<f64> {
            &mut self.fine
        }

        /// The coarse buffers on the device, on a multilevel mesh.
        pub fn coarse(&self) -> Option<&Buffer<f64>> {
            self.coarse.as_ref()
        }

        /// The plan the fields run.
        pub fn plan(&self) -> &SpacePlan {
            &self.plan
        }

        /// Copies the device values (block arrays and coarse buffers) into `data`'s storage
        /// (outputs, error norms, checks).
        pub fn download(&self, data: &mut BlockData) -> Result<(), BoundaryError> {
            let fine = self.fine.to_vec().map_err(BoundaryError::device)?;
            let coarse = match &self.coarse {
                Some(c) => c.to_vec().map_err(BoundaryError::device)?,
                None => Vec::new(),
            };
            self.plan.merge(&fine, &coarse, data.data_mut());
            Ok(())
        }
    }

    fn no_route(route: usize) -> BoundaryError {
        BoundaryError::Mismatch(format!("route {route} was not uploaded"))
    }

    impl FieldSpace for DeviceFields {
        fn restrict(
            &mut self,
            route: usize,
            _list: &[(usize, usize)],
            _shape: &IndexShape,
            _data: &mut BlockData,
        ) -> Result<(), BoundaryError> {
            let Self {
                dev,
                fine,
                coarse,
                routes,
                ..
            } = self;
            let r = routes.get(route).ok_or_else(|| no_route(route))?;
            match (&r.restrict, coarse) {
                (Some(r), Some(c)) => r.restrict(dev, fine, c).map_err(BoundaryError::device),
                _ => Ok(()),
            }
        }

        fn pack(
            &mut self,
            route: usize,
            cache: &BndCache,
            _data: &BlockData,
            buf: ValuesMut<'_>,
            flags: Option<(&[f64], &mut [u32])>,
        ) -> Result<(), BoundaryError> {
            // The thresholds went to the device with the plan, which has the exchange's.
            let over = flags.map(|(_, o)| o);
            let n = cache.buffer_len();
            let Self {
                dev,
                fine,
                coarse,
                routes,
                thresholds,
                ..
            } = self;
            let r = routes.get_mut(route).ok_or_else(|| no_route(route))?;
            let [(d, dbuf), _] = &mut r.sides;
            let flags = over.is_some().then_some((&*thresholds, &mut r.over));
            match buf {
                // GPU-aware: straight into the message buffer MPI reads in place.
                ValuesMut::Space(b) => d
                    .pack(dev, fine, coarse.as_ref(), b, flags)
                    .map_err(BoundaryError::device)?,
                // Staged: into the device copy, then down to the host message buffer (the
                // download waits for the stream: the one synchronisation before MPI).
                ValuesMut::Host(h) => {
                    let got = h.len();
                    let out = h.get_mut(..n).ok_or(BoundaryError::Size {
                        what: "communication buffer",
                        expected: n,
                        got,
                    })?;
                    let dbuf = dbuf.get(dev).map_err(BoundaryError::device)?;
                    d.pack(dev, fine, coarse.as_ref(), dbuf, flags)
                        .map_err(BoundaryError::device)?;
                    dbuf.download(out).map_err(BoundaryError::device)?;
                }
            }
            match over {
                Some(o) => r.over.download(o).map_err(BoundaryError::device),
                None => Ok(()),
            }
        }

        fn unpack(
            &mut self,
            route: usize,
            cache: &BndCache,
            buf: Values<'_>,
            _data: &mut BlockData,
            _defaults: &[f64],
        ) -> Result<(), BoundaryError> {
            let n = cache.buffer_len();
            let Self {
                dev,
                plan,
                fine,
                coarse,
                routes,
                ..
            } = self;
            let r = routes.get_mut(route).ok_or_else(|| no_route(route))?;
            let [_, (d, dbuf)] = &mut r.sides;
            d.refresh(dev, cache).map_err(BoundaryError::device)?;
            let from = match buf {
                // GPU-aware: straight from the message buffer MPI wrote in place.
                Values::Space(b) => b,
                Values::Host(h) => {
                    let got = h.len();
                    let h = h.get(..n).ok_or(BoundaryError::Size {
                        what: "communication buffer",
                        expected: n,
                        got,
                    })?;
                    let dbuf = dbuf.get(dev).map_err(BoundaryError::device)?;
                    dbuf.upload(h).map_err(BoundaryError::device)?;
                    dbuf
                }
            };
            d.unpack(dev, from, fine, coarse.as_mut(), plan.fill)
                .map_err(BoundaryError::device)
        }

        fn finish(
            &mut self,
            part: usize,
            _work: &[BlockFinish],
            ops: &[Prolongation],
            _shape: &IndexShape,
            _data: &mut BlockData,
        ) -> Result<(), BoundaryError> {
            self.plan.check_ops(ops)?;
            let Self {
                dev,
                fine,
                coarse,
                parts,
                ..
            } = self;
            let p = parts.get(part).ok_or_else(|| {
                BoundaryError::Mismatch(format!("partition {part} was not uploaded"))
            })?;
            if let Some(c) = coarse {
                if let Some(r) = &p.restrict {
                    r.restrict(dev, fine, c).map_err(BoundaryError::device)?;
                }
                if let Some(h) = &p.coarse_physical {
                    dev.physical_fill(h, c).map_err(BoundaryError::device)?;
                }
                for (op, r) in &p.prolong {
                    r.prolongate(dev, *op, c, fine)
                        .map_err(BoundaryError::device)?;
                }
            }
            if let Some(h) = &p.physical {
                dev.physical_fill(h, fine).map_err(BoundaryError::device)?;
            }
            Ok(())
        }
    }

    /// Coarse boxes on a device for restriction and prolongation in one launch.
    #[derive(Debug)]
    pub struct DeviceRefine {
        halos: DeviceHalos,
    }

    fn prolong_op(op: Prolongation) -> ProlongOp {
        match op {
            Prolongation::Constant => ProlongOp::Constant,
            Prolongation::Linear => ProlongOp::Linear,
            Prolongation::MinmodLinear => ProlongOp::MinmodLinear,
        }
    }

    impl DeviceRefine {
        /// Uploads coarse boxes (`block`, `var`, `s`, `e` of each [`BndInfo`], in coarse
        /// indices); `slopes` also checks the face neighbours that linear prolongation reads.
        pub fn new(
            dev: &Arc<Device>,
            boxes: &[BndInfo],
            geom: RefineGeom,
            slopes: bool,
        ) -> Result<Self, CudaError> {
            let descs: Vec<HaloDesc> = boxes.iter().map(halo_desc).collect();
            Ok(Self {
                halos: DeviceHalos::for_refine(dev, &descs, geom, slopes)?,
            })
        }

        /// Restricts fine data into the coarse buffers.
        pub fn restrict(
            &self,
            dev: &Device,
            fine: &Buffer<f64>,
            coarse: &mut Buffer<f64>,
        ) -> Result<(), CudaError> {
            dev.restrict(&self.halos, fine, coarse)
        }

        /// Prolongates the coarse buffers onto the fine data with `op`.
        pub fn prolongate(
            &self,
            dev: &Device,
            op: Prolongation,
            coarse: &Buffer<f64>,
            fine: &mut Buffer<f64>,
        ) -> Result<(), CudaError> {
            dev.prolongate(&self.halos, prolong_op(op), coarse, fine)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bnd_info::{IndexBox, FLAG_ALLOCATED, FLAG_COARSE, FLAG_MIRROR0};
    use starhalo_exec::cuda::kernels::{c_layout, define, struct_fields, HALO_SRC};
    use starhalo_mesh::field::IndexRange;
    use std::mem::{offset_of, size_of};

    /// BndInfo can be copied to the device as is: its layout is the CUDA struct's.
    #[test]
    fn bnd_info_has_the_layout_of_the_cuda_struct() {
        let (cuda, size) = c_layout(&struct_fields(HALO_SRC, "sh_bnd_info").unwrap());
        let rust = [
            ("block", offset_of!(BndInfo, block)),
            ("var", offset_of!(BndInfo, var)),
            ("s", offset_of!(BndInfo, s)),
            ("e", offset_of!(BndInfo, e)),
            ("buf_offset", offset_of!(BndInfo, buf_offset)),
            ("flags", offset_of!(BndInfo, flags)),
            ("pad", offset_of!(BndInfo, pad)),
        ];
        let cuda: Vec<(&str, usize)> = cuda.iter().map(|(n, o)| (n.as_str(), *o)).collect();
        assert_eq!(cuda, rust);
        assert_eq!(size, size_of::<BndInfo>());
        assert_eq!(size_of::<BndInfo>(), size_of::<HaloDesc>());
        assert_eq!(
            define(HALO_SRC, "SH_FLAG_COARSE"),
            Some(u64::from(FLAG_COARSE))
        );
        assert_eq!(
            define(HALO_SRC, "SH_FLAG_ALLOCATED"),
            Some(u64::from(FLAG_ALLOCATED))
        );
        assert_eq!(
            define(HALO_SRC, "SH_FLAG_MIRROR0"),
            Some(u64::from(FLAG_MIRROR0))
        );
    }

    fn r(s: usize, e: usize) -> IndexRange {
        IndexRange { s, e }
    }

    #[test]
    fn descriptors_convert_field_by_field() {
        let b = BndInfo::new(
            3,
            1,
            &IndexBox([r(0, 1), r(2, 5), r(0, 0)]),
            17,
            FLAG_ALLOCATED,
        );
        let d = halo_desc(&b);
        assert_eq!(
            (d.block, d.var, d.buf_offset, d.flags),
            (3, 1, 17, FLAG_ALLOCATED)
        );
        assert_eq!((d.s, d.e), ([0, 2, 0], [1, 5, 0]));
        assert_eq!(d.len(), b.len() as u64);
        let p: Vec<[u64; 3]> = d.points().collect();
        let q: Vec<[u64; 3]> = b
            .index_box()
            .points()
            .map(|p| p.map(|v| v as u64))
            .collect();
        assert_eq!(p, q, "kernel order is the host's");
    }

    #[test]
    fn threshold_flags_mark_sub_halos_with_a_large_value() {
        let l = FieldLayout {
            dims: [4, 1, 1],
            nvar: 1,
        };
        let infos = vec![
            BndInfo::new(0, 0, &IndexBox([r(0, 1), r(0, 0), r(0, 0)]), 0, 0),
            BndInfo::new(0, 0, &IndexBox([r(2, 3), r(0, 0), r(0, 0)]), 0, 0),
        ];
        let c = BndCache::new(l, 1, infos).unwrap();
        let mut buf = vec![0.0; 4];
        c.pack(
            starhalo_exec::Policy::Serial,
            &[0.1, -2.0, 0.5, 0.0],
            &mut buf,
        )
        .unwrap();
        let mut over = [7; 2];
        threshold_flags(c.infos(), &buf, &[1.0], &mut over);
        assert_eq!(over, [1, 0]);
        threshold_flags(c.infos(), &buf, &[2.0], &mut over);
        assert_eq!(over, [0, 0]);
        // Each sub-halo is held to its own variable slot's threshold.
        let two = FieldLayout {
            dims: [2, 1, 1],
            nvar: 2,
        };
        let infos = vec![
            BndInfo::new(0, 0, &IndexBox([r(0, 1), r(0, 0), r(0, 0)]), 0, 0),
            BndInfo::new(0, 1, &IndexBox([r(0, 1), r(0, 0), r(0, 0)]), 2, 0),
        ];
        let c = BndCache::new(two, 1, infos).unwrap();
        c.pack(
            starhalo_exec::Policy::Serial,
            &[0.1, -2.0, 0.5, 3.0],
            &mut buf,
        )
        .unwrap();
        threshold_flags(c.infos(), &buf, &[2.5, 2.5], &mut over);
        assert_eq!(over, [0, 1]);
        threshold_flags(c.infos(), &buf, &[1.0, 5.0], &mut over);
        assert_eq!(over, [1, 0]);
    }

    #[test]
    fn physical_fill_clamps_outflow_and_mirrors_reflecting_boxes() {
        // 2-D block of 2x2 interior cells with one ghost layer: 4x4 points.
        let l = FieldLayout {
            dims: [4, 4, 1],
            nvar: 1,
        };
        let mut data: Vec<f64> = (0..16).map(f64::from).collect();
        let (lo, hi) = ([1, 1, 0], [2, 2, 0]);
        let x1 = [
            BndInfo::new(0, 0, &IndexBox([r(0, 0), r(0, 3), r(0, 0)]), 0, 0),
            BndInfo::new(0, 0, &IndexBox([r(3, 3), r(0, 3), r(0, 0)]), 0, 0),
        ];
        physical_fill(l, 1, &x1, lo, hi, &mut data).unwrap();
        // Row j: ghosts i=0 and i=3 copy i=1 and i=2 of the same row (ghost rows too).
        for j in 0..4 {
            let row = 4.0 * j as f64;
            assert_eq!(data[4 * j], row + 1.0);
            assert_eq!(data[4 * j + 3], row + 2.0);
        }
        let x2 = [BndInfo::new(
            0,
            0,
            &IndexBox([r(0, 3), r(0, 0), r(0, 0)]),
            0,
            0,
        )];
        physical_fill(l, 1, &x2, lo, hi, &mut data).unwrap();
        assert_eq!(&data[0..4], &data[4..8]);
        let mixed = [x1[0], x2[0]];
        assert!(physical_fill(l, 1, &mixed, lo, hi, &mut data).is_err());
        // Reflecting x1 faces of 1-D rows: interior 1..=2 of 4 points, one ghost each side,
        // mirror 1 and 2.
        let mut data: Vec<f64> = (0..16).map(f64::from).collect();
        let x1m = x1.map(|b| BndInfo {
            flags: FLAG_MIRROR0,
            ..b
        });
        physical_fill(l, 1, &x1m, lo, hi, &mut data).unwrap();
        for j in 0..4 {
            let row = 4.0 * j as f64;
            assert_eq!([data[4 * j], data[4 * j + 3]], [row + 1.0, row + 2.0]);
        }
        // Two ghost layers mirror in reverse order: interior 2..=3 of 6 points.
        let l6 = FieldLayout {
            dims: [6, 1, 1],
            nvar: 1,
        };
        let mut row: Vec<f64> = vec![0.0, 0.0, 10.0, 20.0, 0.0, 0.0];
        let sides = [
            BndInfo::new(
                0,
                0,
                &IndexBox([r(0, 1), r(0, 0), r(0, 0)]),
                0,
                FLAG_MIRROR0,
            ),
            BndInfo::new(
                0,
                0,
                &IndexBox([r(4, 5), r(0, 0), r(0, 0)]),
                0,
                FLAG_MIRROR0,
            ),
        ];
        physical_fill(l6, 1, &sides, [2, 0, 0], [3, 0, 0], &mut row).unwrap();
        assert_eq!(row, [20.0, 10.0, 10.0, 20.0, 20.0, 10.0]);
    }

    /// The physical boxes filled by the device's rule (the host twin) give exactly what the
    /// host's direction-by-direction fill gives, for every mix of outflow, periodic, reflecting
    /// and interior faces in 1-D, 2-D and 3-D.
    #[test]
    fn physical_boxes_fill_as_the_host_does() {
        use crate::bounds::{interior_bounds, physical_bounds, physical_boxes};
        use starhalo_mesh::BoundaryCondition as Bc;
        let kinds = [
            None,
            Some(Bc::Periodic),
            Some(Bc::Outflow),
            Some(Bc::Reflecting),
        ];
        let mut seed = 12345u64;
        let mut next = move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as usize
        };
        for (nx, g, ndim) in [
            ([5, 1, 1], 2, 1),
            ([4, 3, 1], 1, 2),
            ([4, 3, 2], 2, 3),
            ([3, 3, 3], 3, 3),
        ] {
            let shape = IndexShape::new(nx, g, ndim).unwrap();
            let l = FieldLayout::of_shape(&shape, 1);
            let (lo, hi) = interior_bounds(&shape);
            for _ in 0..200 {
                let faces = [0, 1, 2].map(|_| [0, 1].map(|_| kinds[next() % 4]));
                let data: Vec<f64> = (0..l.block_len()).map(|_| (next() % 1000) as f64).collect();
                let mut want = data.clone();
                physical_bounds(&shape, &faces, &mut want);
                let boxes: Vec<BndInfo> = physical_boxes(&shape, &faces)
                    .iter()
                    .map(|(b, flags)| BndInfo::new(0, 0, b, 0, *flags))
                    .collect();
                let mut got = data.clone();
                physical_fill(l, 1, &boxes, lo, hi, &mut got).unwrap();
                assert_eq!(got, want, "{nx:?} g={g} faces {faces:?}");
                let any_physical = faces[..shape.ndim()]
                    .iter()
                    .flatten()
                    .any(|f| matches!(f, Some(Bc::Outflow | Bc::Reflecting)));
                assert_eq!(!boxes.is_empty(), any_physical, "{faces:?}");
                let mirrors = boxes.iter().any(|b| b.flags != 0);
                let any_reflecting = faces[..shape.ndim()]
                    .iter()
                    .flatten()
                    .any(|f| *f == Some(Bc::Reflecting));
                assert_eq!(mirrors, any_reflecting, "{faces:?}");
            }
        }
    }

    #[test]
    fn refine_geometry_follows_the_shape() {
        let shape = IndexShape::new([8, 8, 1], 2, 2).unwrap();
        let g = refine_geom(&shape, 3, 5).unwrap();
        assert_eq!((g.ndim, g.nghost, g.coarse_nghost), (2, 2, 2));
        assert_eq!(g.fine.dims, [12, 12, 1]);
        assert_eq!(g.coarse.dims, [8, 8, 1]);
        assert_eq!((g.fine.nvar, g.coarse.nblocks), (3, 5));
    }

    /// Reads an operation, its geometry, descriptors, the fine and coarse storage and a
    /// buffer; runs one boundary kernel with the arguments `Device` passes, as 3 blocks of 32
    /// threads (each block takes several sub-halos, each thread several cells, and the pack's
    /// flags are a real `__syncthreads_or`); writes the storage, the buffer and the pack's
    /// threshold flags.
    const HALO_DRIVER: &str = r#"
int main() {
    double h[23];
    sh_read(h, 23);
    int op = (int)h[0], pop = (int)h[20];
    u64 nb = h[1], nvar = h[2], f[3] = {(u64)h[3], (u64)h[4], (u64)h[5]}, c[3] = {(u64)h[6], (u64)h[7], (u64)h[8]};
    u64 ndim = h[9], g = h[10], cg = h[11], nhalo = h[21], buflen = h[22];
    u64 lo[3] = {(u64)h[12], (u64)h[13], (u64)h[14]}, hi[3] = {(u64)h[15], (u64)h[16], (u64)h[17]};
    sh_bnd_info *info = (sh_bnd_info *)malloc(nhalo * sizeof(sh_bnd_info) + 1);
    if (fread(info, sizeof(sh_bnd_info), nhalo, stdin) != nhalo) { printf("short descriptors\n"); return 3; }
    u64 flen = nb * nvar * f[0] * f[1] * f[2], clen = nb * nvar * c[0] * c[1] * c[2];
    double *fine = (double *)malloc(flen * 8), *coarse = (double *)malloc(clen * 8), *buf = (double *)malloc(buflen * 8 + 8);
    sh_read(fine, flen);
    sh_read(coarse, clen);
    sh_read(buf, buflen);
    u32 *over = (u32 *)malloc(nhalo * 4 + 4);
    double *th = (double *)malloc(nvar * 8 + 8);
    for (u64 v = 0; v < nvar; ++v) th[v] = h[18] * (double)(v + 1);
    double *flags = (double *)malloc(nhalo * 8 + 8);
    if (op < 0 || op > 5) { printf("unknown operation %d\n", op); return 3; }
    gridDim.x = 3; blockDim.x = 32;
    for (blockIdx.x = 0; blockIdx.x < gridDim.x; ++blockIdx.x) sh_run_block([&] {
        switch (op) {
        case 0: sh_halo_pack(info, nhalo, fine, coarse, buf, f[0], f[1], f[2], c[0], c[1], c[2], nvar, th, over); break;
        case 1: sh_halo_unpack(info, nhalo, buf, fine, coarse, f[0], f[1], f[2], c[0], c[1], c[2], nvar, h[19]); break;
        case 2: sh_restrict(info, nhalo, fine, coarse, f[0], f[1], f[2], c[0], c[1], c[2], nvar, ndim, g, cg); break;
        case 3: sh_prolongate(info, nhalo, coarse, fine, f[0], f[1], f[2], c[0], c[1], c[2], nvar, ndim, g, cg, pop); break;
        case 4: sh_physical(info, nhalo, fine, f[0], f[1], f[2], nvar, lo[0], lo[1], lo[2], hi[0], hi[1], hi[2]); break;
        case 5: sh_physical(info, nhalo, coarse, c[0], c[1], c[2], nvar, lo[0], lo[1], lo[2], hi[0], hi[1], hi[2]); break;
        }
    });
    for (u64 i = 0; i < nhalo; ++i) flags[i] = op == 0 ? over[i] : 0;
    sh_write(fine, flen);
    sh_write(coarse, clen);
    sh_write(buf, buflen);
    sh_write(flags, nhalo);
    return 0;
}
"#;

    /// The host's storage of one case and what a kernel left.
    #[derive(Clone, PartialEq)]
    struct State {
        fine: Vec<f64>,
        coarse: Vec<f64>,
        buf: Vec<f64>,
        flags: Vec<u32>,
    }

    /// The boundary kernels (pack with threshold flags, unpack with the sparse fill,
    /// restriction, the three prolongations, the physical fill of block arrays and coarse
    /// buffers), run on the host by the emulator, leave the storage bit for bit as
    /// the host code the exchange runs does: 2-D and 3-D, two blocks of two variables, random
    /// non-dyadic values, coarse ghost and interior boxes, outflow and reflecting faces.
    /// Skipped, saying so, where no `c++` is installed.
    #[test]
    fn halo_kernels_under_the_emulator_match_the_host() {
        use crate::bounds::{coarse_interior, physical_boxes};
        use starhalo_exec::cuda::emulate::{
            desc_bytes, from_bytes, test_values, to_bytes, Emulator,
        };
        use starhalo_mesh::BoundaryCondition as Bc;
        let Some(emu) = Emulator::build(HALO_DRIVER).unwrap() else {
            eprintln!("no host c++ compiler: boundary kernels not emulated");
            return;
        };
        let mut unit = test_values(99);
        for (nx, ndim) in [([6, 4, 1], 2), ([4, 4, 4], 3)] {
            let shape = IndexShape::new(nx, 2, ndim).unwrap();
            let cs = shape.coarse().unwrap();
            let (nb, nvar) = (2, 2);
            let (fl, cl) = (
                FieldLayout::of_shape(&shape, nvar),
                FieldLayout::of_shape(&cs, nvar),
            );
            let (fd, cd) = (field_dims(fl, nb), field_dims(cl, nb));
            let fslot = |b: &BndInfo| HostTwin::slot(fl, b);
            let cslot = |b: &BndInfo| HostTwin::slot(cl, b);
            let start = State {
                fine: (0..fd.len()).map(|_| unit()).collect(),
                coarse: (0..cd.len()).map(|_| unit()).collect(),
                buf: Vec::new(),
                flags: Vec::new(),
            };
            let (cg, g) = (cs.nghost(), shape.nghost());
            // Coarse boxes: the interior, and the first ghost layer below x1 (its children
            // are fine ghosts; its neighbours exist for the slopes).
            let interior = coarse_interior(&cs);
            let mut slab = interior;
            slab.0[0] = IndexRange {
                s: cg - 1,
                e: cg - 1,
            };
            let mut refine = Vec::new();
            for b in 0..nb {
                for v in 0..nvar {
                    for bx in [&interior, &slab] {
                        refine.push(BndInfo::new(b, v, bx, 0, FLAG_COARSE));
                    }
                }
            }
            // Sub-halos of both arrays, some unallocated, back to back in the buffer.
            let mut halos = Vec::new();
            let mut off = 0;
            let boxes = [
                (IndexBox([r(0, 1), r(0, 3), r(0, 0)]), 0),
                (IndexBox([r(1, 2), r(1, 1), r(0, 0)]), FLAG_COARSE),
                (IndexBox([r(2, 5), r(2, 3), r(0, 0)]), FLAG_ALLOCATED),
                (slab, FLAG_COARSE | FLAG_ALLOCATED),
            ];
            for (k, (bx, flags)) in boxes.iter().enumerate() {
                let mut bx = *bx;
                if ndim == 3 && bx.0[2].e == 0 {
                    bx.0[2] = r(1, 2);
                }
                let h = BndInfo::new(k % nb, (k / 2) % nvar, &bx, off, *flags);
                off += h.len();
                halos.push(h);
            }
            let (m, o) = (Some(Bc::Reflecting), Some(Bc::Outflow));
            let faces = [[m, o], [o, m], [m, o]];
            let physical = |sh: &IndexShape, coarse: bool| -> Vec<BndInfo> {
                let flag = if coarse { FLAG_COARSE } else { 0 };
                let mut out = Vec::new();
                for b in 0..nb {
                    for v in 0..nvar {
                        for (bx, m) in physical_boxes(sh, &faces) {
                            out.push(BndInfo::new(b, v, &bx, 0, m | flag));
                        }
                    }
                }
                out
            };
            let run = |op: usize, pop: usize, descs: &[BndInfo], st: &State| -> State {
                let (lo, hi) = match op {
                    5 => interior_bounds(&cs),
                    _ => interior_bounds(&shape),
                };
                let mut h = vec![op as f64, nb as f64, nvar as f64];
                h.extend(fd.dims.map(|x| x as f64));
                h.extend(cd.dims.map(|x| x as f64));
                h.extend([ndim, g, cg].map(|x| x as f64));
                h.extend(lo.map(|x| x as f64));
                h.extend(hi.map(|x| x as f64));
                h.extend([
                    0.5,
                    0.25,
                    pop as f64,
                    descs.len() as f64,
                    st.buf.len() as f64,
                ]);
                let mut input = to_bytes(&h);
                let descs: Vec<HaloDesc> = descs.iter().map(halo_desc).collect();
                input.extend(desc_bytes(&descs));
                input.extend(to_bytes(&st.fine));
                input.extend(to_bytes(&st.coarse));
                input.extend(to_bytes(&st.buf));
                let out = from_bytes(&emu.run(&input).unwrap());
                let (f, rest) = out.split_at(st.fine.len());
                let (c, rest) = rest.split_at(st.coarse.len());
                let (b, flags) = rest.split_at(st.buf.len());
                State {
                    fine: f.to_vec(),
                    coarse: c.to_vec(),
                    buf: b.to_vec(),
                    flags: flags.iter().map(|&x| x as u32).collect(),
                }
            };
            let same = |what: &str, got: &State, want: &State| {
                let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&got.fine),
                    bits(&want.fine),
                    "{ndim}-D {what}: block arrays"
                );
                assert_eq!(
                    bits(&got.coarse),
                    bits(&want.coarse),
                    "{ndim}-D {what}: coarse"
                );
                assert_eq!(bits(&got.buf), bits(&want.buf), "{ndim}-D {what}: buffer");
            };

            // Pack, with the flags of sub-halos holding some |value| above their slot's
            // threshold: 0.5 for slot 0, 1.0 for slot 1, ...
            let mut st = State {
                buf: vec![0.0; off],
                ..start.clone()
            };
            let got = run(0, 0, &halos, &st);
            let coarse = Some((cl, &st.coarse[..]));
            pack_boxes(&halos, nb, (fl, &st.fine), coarse, &mut st.buf).unwrap();
            let mut over = vec![0; halos.len()];
            let thresholds: Vec<f64> = (0..nvar).map(|s| 0.5 * (s + 1) as f64).collect();
            threshold_flags(&halos, &st.buf, &thresholds, &mut over);
            st.flags = over;
            same("pack", &got, &st);
            assert_eq!(got.flags, st.flags, "{ndim}-D pack flags");
            assert!(st.flags.contains(&1), "some sub-halo above the threshold");

            // Unpack a random buffer; unallocated sub-halos get the fill value 0.25.
            let mut st = State {
                buf: (0..off).map(|_| unit()).collect(),
                ..start.clone()
            };
            let got = run(1, 0, &halos, &st);
            let (fine, coarse) = ((fl, &mut st.fine[..]), Some((cl, &mut st.coarse[..])));
            unpack_boxes(&halos, &st.buf, nb, fine, coarse, 0.25).unwrap();
            same("unpack", &got, &st);

            // Restriction, then each prolongation, of the coarse boxes.
            let mut st = start.clone();
            let got = run(2, 0, &refine, &st);
            for b in &refine {
                let fine = &st.fine[fslot(b)];
                restrict(&shape, fine, &mut st.coarse[cslot(b)], &b.index_box()).unwrap();
            }
            same("restrict", &got, &st);
            use starhalo_exec::cuda::ProlongOp;
            for (pop, op) in [
                (ProlongOp::Constant, Prolongation::Constant),
                (ProlongOp::Linear, Prolongation::Linear),
                (ProlongOp::MinmodLinear, Prolongation::MinmodLinear),
            ] {
                let pop = pop as usize;
                let mut st = start.clone();
                let got = run(3, pop, &refine, &st);
                for b in &refine {
                    let coarse = &st.coarse[cslot(b)];
                    prolongate(op, &shape, coarse, &mut st.fine[fslot(b)], &b.index_box()).unwrap();
                }
                same(&format!("prolongate {op:?}"), &got, &st);
            }

            // Physical faces of the block arrays and of the coarse buffers.
            for (op, sh, coarse) in [(4, &shape, false), (5, &cs, true)] {
                let boxes = physical(sh, coarse);
                assert!(boxes.iter().any(|b| b.flags & FLAG_MIRROR0 != 0));
                let mut st = start.clone();
                let got = run(op, 0, &boxes, &st);
                let (lo, hi) = interior_bounds(sh);
                let (l, arr) = if coarse {
                    (cl, &mut st.coarse)
                } else {
                    (fl, &mut st.fine)
                };
                physical_fill(l, nb, &boxes, lo, hi, arr).unwrap();
                same(&format!("physical (coarse {coarse})"), &got, &st);
            }
        }
    }
}
