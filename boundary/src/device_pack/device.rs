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
    /// The [`BndCache::version`] of the descriptors uploaded.
    version: u64,
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
            version: cache.version(),
        })
    }

    /// Length of the communication buffer.
    pub fn buffer_len(&self) -> usize {
        self.buffer_len
    }

    /// Uploads `cache`'s descriptors again if their allocation flags changed since the
    /// upload (sparse variables sending null or data).
    pub fn refresh(&mut self, dev: &Arc<Device>, cache: &BndCache) -> Result<(), CudaError> {
        // Unchanged since the upload: one comparison, not one per descriptor.
        if cache.version() == self.version {
            return Ok(());
        }
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
        self.version = cache.version();
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
    pub fn new(dev: &Arc<Device>, ex: &Exchange, data: &BlockData) -> Result<Self, BoundaryError> {
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
        let refine = |boxes: &[BndInfo], slopes: bool| -> Result<Option<DeviceRefine>, CudaError> {
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
        let p = parts
            .get(part)
            .ok_or_else(|| BoundaryError::Mismatch(format!("partition {part} was not uploaded")))?;
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
