//! Pack-in-one, unpack-in-one, restriction, prolongation and outflow fill on a CUDA device
//! (feature `cuda`), with the host twins the device kernels are checked against.
//!
//! A [`BndCache`]'s descriptors go to the device once, as the `#[repr(C)]`
//! [`HaloDesc`](starhalo_exec::cuda::HaloDesc) array the kernels read (a [`BndInfo`] has the
//! same layout; a test checks both against the CUDA source), and every exchange is then one
//! launch per operation. The conversions and the host twins (sparse-threshold flags, outflow
//! fill) exist in every build.

use starhalo_exec::cuda::{FieldDims, HaloDesc, RefineGeom};
use starhalo_mesh::field::IndexShape;

use crate::bnd_info::{BndCache, BndInfo, FieldLayout};
use crate::error::BoundaryError;

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

/// Host twin of the pack kernel's flags: for each sub-halo of `cache`, 1 when some |value| of
/// its segment of the packed `buf` exceeds `threshold`, else 0.
pub fn threshold_flags(cache: &BndCache, buf: &[f64], threshold: f64) -> Vec<u32> {
    let mut off = 0;
    cache
        .infos()
        .iter()
        .map(|b| {
            let seg = &buf[off.min(buf.len())..(off + b.len()).min(buf.len())];
            off += b.len();
            u32::from(seg.iter().any(|v| v.abs() > threshold))
        })
        .collect()
}

/// Host twin of the outflow kernel: every cell of each box takes the value of the cell found
/// by clamping its index onto `lo..=hi` along each direction in which the whole box lies
/// outside that range. Boxes are checked as the device checks them.
pub fn outflow_fill(
    layout: FieldLayout,
    nblocks: usize,
    boxes: &[BndInfo],
    lo: [usize; 3],
    hi: [usize; 3],
    data: &mut [f64],
) -> Result<(), BoundaryError> {
    let descs: Vec<HaloDesc> = boxes.iter().map(halo_desc).collect();
    let f = field_dims(layout, nblocks);
    starhalo_exec::cuda::desc::check_outflow(&descs, &f, lo, hi)
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
        for p in bx.points() {
            let q = [0, 1, 2].map(|d| {
                if below[d] {
                    lo[d]
                } else if above[d] {
                    hi[d]
                } else {
                    p[d]
                }
            });
            data[f.index(b.block, b.var, p)] = data[f.index(b.block, b.var, q)];
        }
    }
    Ok(())
}

#[cfg(feature = "cuda")]
pub use device::{DeviceBndCache, DeviceFields, DeviceRefine};

#[cfg(feature = "cuda")]
mod device {
    use std::sync::Arc;

    use starhalo_exec::cuda::{CudaError, Device, DeviceHalos, HaloDesc, ProlongOp, RefineGeom};
    use starhalo_exec::Buffer;

    use super::{field_dims, halo_desc};
    use crate::bnd_info::{BndCache, BndInfo, FieldLayout, FLAG_ALLOCATED};
    use crate::error::BoundaryError;
    use crate::exchange::{Exchange, FieldSpace};
    use crate::prolong_restrict::Prolongation;
    use crate::storage::BlockData;

    /// A [`BndCache`] on a device: pack-in-one and unpack-in-one as one launch each.
    #[derive(Debug)]
    pub struct DeviceBndCache {
        halos: DeviceHalos,
        buffer_len: usize,
    }

    impl DeviceBndCache {
        /// Uploads the descriptors of `cache`, built for `nblocks` blocks of `layout`.
        pub fn new(
            dev: &Arc<Device>,
            cache: &BndCache,
            layout: FieldLayout,
            nblocks: usize,
        ) -> Result<Self, CudaError> {
            let descs: Vec<HaloDesc> = cache.infos().iter().map(halo_desc).collect();
            let f = field_dims(layout, nblocks);
            Ok(Self {
                halos: DeviceHalos::for_pack(dev, &descs, f, cache.buffer_len())?,
                buffer_len: cache.buffer_len(),
            })
        }

        /// Length of the communication buffer.
        pub fn buffer_len(&self) -> usize {
            self.buffer_len
        }

        /// Packs every sub-halo from `data` into `buf` (both on the device); with
        /// `flags = Some((threshold, out))`, `out[h]` becomes 1 when some |value| of sub-halo
        /// `h` exceeds `threshold` (sparse allocation), else 0.
        pub fn pack(
            &self,
            dev: &Device,
            data: &Buffer<f64>,
            buf: &mut Buffer<f64>,
            flags: Option<(f64, &mut Buffer<u32>)>,
        ) -> Result<(), CudaError> {
            match flags {
                Some((t, out)) => dev.halo_pack(&self.halos, data, buf, t, Some(out)),
                None => dev.halo_pack(&self.halos, data, buf, f64::INFINITY, None),
            }
        }

        /// Unpacks every sub-halo from `buf` into `data`; sub-halos without
        /// [`FLAG_ALLOCATED`](crate::bnd_info::FLAG_ALLOCATED) get `default`.
        pub fn unpack(
            &self,
            dev: &Device,
            buf: &Buffer<f64>,
            data: &mut Buffer<f64>,
            default: f64,
        ) -> Result<(), CudaError> {
            dev.halo_unpack(&self.halos, buf, data, default)
        }
    }

    /// The field storage of a single-level mesh's blocks on a device, as an exchange's
    /// [`FieldSpace`]: each route packs in one launch into a device buffer, which is copied to
    /// the host buffer MPI sends (the copy waits for the stream: the one synchronisation
    /// before MPI), and unpacks in one launch after the host buffer is copied up; each
    /// partition's outflow faces are then filled in one launch.
    #[derive(Debug)]
    pub struct DeviceFields {
        dev: Arc<Device>,
        layout: FieldLayout,
        data: Buffer<f64>,
        /// Per route: send and receive descriptors and their device buffers.
        routes: Vec<[(DeviceBndCache, Buffer<f64>); 2]>,
        /// Per partition: its outflow boxes.
        outflow: Vec<DeviceHalos>,
    }

    fn device_error(e: impl std::fmt::Display) -> BoundaryError {
        BoundaryError::Device(e.to_string())
    }

    impl DeviceFields {
        /// Uploads `data` (the blocks of a single-level mesh) and the descriptors of every
        /// route and outflow face of `ex`, which was built for `data` and must need no host
        /// work ([`Exchange::needs_host`]).
        pub fn new(
            dev: &Arc<Device>,
            ex: &Exchange,
            data: &BlockData,
        ) -> Result<Self, BoundaryError> {
            let l = data.layout();
            if l.coarse.is_some() {
                return Err(BoundaryError::Geometry(
                    "device fields hold single-level meshes (no coarse buffers)".into(),
                ));
            }
            if ex.needs_host() {
                return Err(BoundaryError::Geometry(
                    "device fields with restriction, prolongation or reflecting boundaries, \
                     which run on the host"
                        .into(),
                ));
            }
            let nblocks = data.gids().len();
            let (lo, hi) = crate::bounds::interior_bounds(data.shape());
            let outflow = (0..ex.partitions())
                .map(|p| {
                    let descs: Vec<HaloDesc> =
                        ex.outflow_boxes(p, data).iter().map(halo_desc).collect();
                    let f = field_dims(l.fine, nblocks);
                    DeviceHalos::for_outflow(dev, &descs, f, lo, hi)
                })
                .collect::<Result<_, _>>()
                .map_err(device_error)?;
            let mut routes = Vec::new();
            for (send, recv) in ex.route_caches() {
                let side = |c: &BndCache| -> Result<_, CudaError> {
                    let d = DeviceBndCache::new(dev, c, l.fine, nblocks)?;
                    let buf = Buffer::zeroed_on(dev, c.buffer_len())?;
                    Ok((d, buf))
                };
                routes.push([
                    side(send).map_err(device_error)?,
                    side(recv).map_err(device_error)?,
                ]);
            }
            Ok(Self {
                dev: dev.clone(),
                layout: l.fine,
                data: Buffer::from_host_to(dev, data.data()).map_err(device_error)?,
                routes,
                outflow,
            })
        }

        /// The device.
        pub fn device(&self) -> &Arc<Device> {
            &self.dev
        }

        /// The layout of each block's arrays.
        pub fn layout(&self) -> FieldLayout {
            self.layout
        }

        /// The field storage on the device, laid out as the host's.
        pub fn data(&self) -> &Buffer<f64> {
            &self.data
        }

        /// The same, to write.
        pub fn data_mut(&mut self) -> &mut Buffer<f64> {
            &mut self.data
        }

        /// Copies the device values into `data`'s storage (outputs, error norms).
        pub fn download(&self, data: &mut BlockData) -> Result<(), BoundaryError> {
            self.data.download(data.data_mut()).map_err(device_error)
        }
    }

    fn no_route(route: usize) -> BoundaryError {
        BoundaryError::Mismatch(format!("route {route} was not uploaded"))
    }

    impl FieldSpace for DeviceFields {
        fn pack(
            &mut self,
            route: usize,
            cache: &BndCache,
            _data: &BlockData,
            buf: &mut [f64],
        ) -> Result<(), BoundaryError> {
            let (n, got) = (cache.buffer_len(), buf.len());
            let out = buf.get_mut(..n).ok_or(BoundaryError::Size {
                what: "communication buffer",
                expected: n,
                got,
            })?;
            let Self {
                dev, data, routes, ..
            } = self;
            let [(d, dbuf), _] = routes.get_mut(route).ok_or_else(|| no_route(route))?;
            d.pack(dev, data, dbuf, None).map_err(device_error)?;
            dbuf.download(out).map_err(device_error)
        }

        fn unpack(
            &mut self,
            route: usize,
            cache: &BndCache,
            buf: &[f64],
            _data: &mut BlockData,
            _defaults: &[f64],
        ) -> Result<(), BoundaryError> {
            // The descriptors went up once, all allocated: a null (sparse) message would need
            // its fill value, which dense fields never get.
            if cache.infos().iter().any(|b| b.flags & FLAG_ALLOCATED == 0) {
                return Err(BoundaryError::Geometry(
                    "a null (sparse) message for device fields, which hold dense fields only"
                        .into(),
                ));
            }
            let n = cache.buffer_len();
            let from = buf.get(..n).ok_or(BoundaryError::Size {
                what: "communication buffer",
                expected: n,
                got: buf.len(),
            })?;
            let Self {
                dev, data, routes, ..
            } = self;
            let [_, (d, dbuf)] = routes.get_mut(route).ok_or_else(|| no_route(route))?;
            dbuf.upload(from).map_err(device_error)?;
            d.unpack(dev, dbuf, data, 0.0).map_err(device_error)
        }

        fn finish(&mut self, part: usize) -> Result<bool, BoundaryError> {
            let h = self.outflow.get(part).ok_or_else(|| {
                BoundaryError::Mismatch(format!("partition {part} was not uploaded"))
            })?;
            self.dev.outflow(h, &mut self.data).map_err(device_error)?;
            Ok(true)
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
    use crate::bnd_info::{IndexBox, FLAG_ALLOCATED, FLAG_COARSE};
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
        assert_eq!(threshold_flags(&c, &buf, 1.0), [1, 0]);
        assert_eq!(threshold_flags(&c, &buf, 2.0), [0, 0]);
    }

    #[test]
    fn outflow_copies_the_nearest_interior_cell_along_the_normal() {
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
        outflow_fill(l, 1, &x1, lo, hi, &mut data).unwrap();
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
        outflow_fill(l, 1, &x2, lo, hi, &mut data).unwrap();
        assert_eq!(&data[0..4], &data[4..8]);
        let mixed = [x1[0], x2[0]];
        assert!(outflow_fill(l, 1, &mixed, lo, hi, &mut data).is_err());
    }

    /// The outflow boxes filled by the device's rule (the host twin) give exactly what the
    /// host's direction-by-direction fill gives, for every mix of outflow, periodic, reflecting
    /// and interior faces in 1-D, 2-D and 3-D.
    #[test]
    fn outflow_boxes_fill_as_the_host_does() {
        use crate::bounds::{interior_bounds, outflow_boxes, physical_bounds};
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
                // The host fills reflecting faces too: give the twin the same start there.
                let no_reflect = faces.map(|f| f.map(|x| x.filter(|&b| b != Bc::Reflecting)));
                physical_bounds(&shape, &no_reflect, &mut want);
                let boxes: Vec<BndInfo> = outflow_boxes(&shape, &faces)
                    .iter()
                    .map(|b| BndInfo::new(0, 0, b, 0, 0))
                    .collect();
                let mut got = data.clone();
                outflow_fill(l, 1, &boxes, lo, hi, &mut got).unwrap();
                assert_eq!(got, want, "{nx:?} g={g} faces {faces:?}");
                let any_outflow = faces[..shape.ndim()]
                    .iter()
                    .flatten()
                    .any(|f| *f == Some(Bc::Outflow));
                assert_eq!(!boxes.is_empty(), any_outflow, "{faces:?}");
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
}
