//! The boundary kernels in one: pack, unpack, restriction, prolongation, flux correction and
//! the physical fill, each one launch over a descriptor array checked once on the host.

use std::sync::Arc;

use super::{invalid, need};
use crate::buffer::Buffer;
use crate::cuda::desc::{
    check_halos, check_physical, FieldDims, FluxGeom, HaloDesc, ProlongOp, RefineGeom,
};
use crate::cuda::device::Device;
use crate::cuda::error::CudaError;
use smallvec::smallvec;

use crate::cuda::ffi::{Arg, Args};
use crate::cuda::kernels::KernelSet;

const HALO_BLOCK: u32 = 128;

/// What a [`DeviceHalos`] was checked for.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Use {
    Pack {
        fields: FieldDims,
        coarse: Option<FieldDims>,
        buf_len: usize,
    },
    Refine {
        geom: RefineGeom,
        halo: bool,
    },
    Physical {
        fields: FieldDims,
        lo: [usize; 3],
        hi: [usize; 3],
    },
    Flux {
        geom: FluxGeom,
        restrict: bool,
        buf_len: usize,
    },
}

/// Sub-halo descriptors on a device, checked once on the host for one use (pack/unpack,
/// restriction/prolongation, or physical fill) and launched in one kernel each time.
#[derive(Debug)]
pub struct DeviceHalos {
    descs: Buffer<HaloDesc>,
    host: Vec<HaloDesc>,
    usage: Use,
}

impl DeviceHalos {
    /// Descriptors for [`Device::halo_pack`] and [`Device::halo_unpack`] between `fields`
    /// (and `coarse` buffers, for descriptors with [`FLAG_COARSE`](crate::cuda::FLAG_COARSE)) and a
    /// buffer of `buf_len` values.
    pub fn for_pack(
        dev: &Arc<Device>,
        descs: &[HaloDesc],
        fields: FieldDims,
        coarse: Option<FieldDims>,
        buf_len: usize,
    ) -> Result<Self, CudaError> {
        check_halos(descs, &fields, coarse.as_ref(), buf_len)?;
        Self::upload(
            dev,
            descs,
            Use::Pack {
                fields,
                coarse,
                buf_len,
            },
        )
    }

    /// Coarse boxes for [`Device::restrict`] and (with `halo`, which also requires the face
    /// neighbours of every coarse cell) [`Device::prolongate`].
    pub fn for_refine(
        dev: &Arc<Device>,
        descs: &[HaloDesc],
        geom: RefineGeom,
        halo: bool,
    ) -> Result<Self, CudaError> {
        geom.check(descs, halo)?;
        Self::upload(dev, descs, Use::Refine { geom, halo })
    }

    /// Ghost boxes for [`Device::physical_fill`] on `fields` with interior `lo..=hi` per direction;
    /// no box writes a cell another box of its array writes or reads
    /// ([`check_physical`](crate::cuda::desc::check_physical)).
    pub fn for_physical(
        dev: &Arc<Device>,
        descs: &[HaloDesc],
        fields: FieldDims,
        lo: [usize; 3],
        hi: [usize; 3],
    ) -> Result<Self, CudaError> {
        check_physical(descs, &fields, lo, hi)?;
        Self::upload(dev, descs, Use::Physical { fields, lo, hi })
    }

    /// Flux faces for [`Device::flux_restrict`] (`restrict`) or [`Device::flux_set`] between
    /// the face fluxes of `geom` and a buffer of `buf_len` values ([`FluxGeom::check`]).
    pub fn for_flux(
        dev: &Arc<Device>,
        descs: &[HaloDesc],
        geom: FluxGeom,
        restrict: bool,
        buf_len: usize,
    ) -> Result<Self, CudaError> {
        geom.check(descs, restrict, buf_len)?;
        let usage = Use::Flux {
            geom,
            restrict,
            buf_len,
        };
        Self::upload(dev, descs, usage)
    }

    /// The same use with other descriptors (checked again), e.g. new allocation flags.
    pub fn with_descs(&self, dev: &Arc<Device>, descs: &[HaloDesc]) -> Result<Self, CudaError> {
        match self.usage {
            Use::Pack {
                fields,
                coarse,
                buf_len,
            } => Self::for_pack(dev, descs, fields, coarse, buf_len),
            Use::Refine { geom, halo } => Self::for_refine(dev, descs, geom, halo),
            Use::Physical { fields, lo, hi } => Self::for_physical(dev, descs, fields, lo, hi),
            Use::Flux {
                geom,
                restrict,
                buf_len,
            } => Self::for_flux(dev, descs, geom, restrict, buf_len),
        }
    }

    fn upload(dev: &Arc<Device>, descs: &[HaloDesc], usage: Use) -> Result<Self, CudaError> {
        Ok(Self {
            descs: Buffer::from_host_to(dev, descs)?,
            host: descs.to_vec(),
            usage,
        })
    }

    /// The descriptors.
    pub fn descs(&self) -> &[HaloDesc] {
        &self.host
    }

    /// Number of descriptors.
    pub fn len(&self) -> usize {
        self.host.len()
    }

    /// True when there is no descriptor.
    pub fn is_empty(&self) -> bool {
        self.host.is_empty()
    }

    fn grid(&self) -> u32 {
        self.host.len().clamp(1, 1 << 20) as u32
    }
}

fn dims_args(f: &FieldDims) -> [Arg; 4] {
    [f.dims[0], f.dims[1], f.dims[2], f.nvar].map(|v| Arg::U64(v as u64))
}

/// `d0, d1, d2, c0, c1, c2, nvar` of the fine storage and the coarse buffers.
fn pair_dims(f: &FieldDims, c: &FieldDims) -> [Arg; 7] {
    let (d, e) = (f.dims, c.dims);
    [d[0], d[1], d[2], e[0], e[1], e[2], f.nvar].map(|v| Arg::U64(v as u64))
}

/// `sh_halo_pack(info, nhalo, data, coarse, buf, d0, d1, d2, c0, c1, c2, nvar, threshold,
/// over)`.
pub(super) fn pack_args(
    [descs, data, coarse]: [u64; 3],
    buf: u64,
    nhalo: usize,
    [f, c]: [&FieldDims; 2],
    [threshold, over]: [u64; 2],
) -> Args {
    let mut a = smallvec![
        Arg::Ptr(descs),
        Arg::U64(nhalo as u64),
        Arg::Ptr(data),
        Arg::Ptr(coarse),
        Arg::Ptr(buf),
    ];
    a.extend(pair_dims(f, c));
    a.extend([Arg::Ptr(threshold), Arg::Ptr(over)]);
    a
}

/// `sh_halo_unpack(info, nhalo, buf, data, coarse, d0, d1, d2, c0, c1, c2, nvar, fill)`.
pub(super) fn unpack_args(
    [descs, buf]: [u64; 2],
    [data, coarse]: [u64; 2],
    nhalo: usize,
    [f, c]: [&FieldDims; 2],
    fill: f64,
) -> Args {
    let mut a = smallvec![
        Arg::Ptr(descs),
        Arg::U64(nhalo as u64),
        Arg::Ptr(buf),
        Arg::Ptr(data),
        Arg::Ptr(coarse),
    ];
    a.extend(pair_dims(f, c));
    a.push(Arg::F64(fill));
    a
}

/// `sh_restrict` / `sh_prolongate` (without the trailing `op`): (info, nhalo, from, to,
/// f0, f1, f2, c0, c1, c2, nvar, ndim, g, cg).
pub(super) fn refine_args([descs, from]: [u64; 2], to: u64, nhalo: usize, g: &RefineGeom) -> Args {
    let mut a = smallvec![
        Arg::Ptr(descs),
        Arg::U64(nhalo as u64),
        Arg::Ptr(from),
        Arg::Ptr(to),
    ];
    let (f, c) = (g.fine.dims, g.coarse.dims);
    a.extend([f[0], f[1], f[2], c[0], c[1], c[2]].map(|v| Arg::U64(v as u64)));
    a.extend([g.fine.nvar, g.ndim, g.nghost, g.coarse_nghost].map(|v| Arg::U64(v as u64)));
    a
}

/// `sh_physical(info, nhalo, data, d0, d1, d2, nvar, lo0, lo1, lo2, hi0, hi1, hi2)`.
pub(super) fn physical_args(
    descs: u64,
    data: u64,
    nhalo: usize,
    f: &FieldDims,
    lo: [usize; 3],
    hi: [usize; 3],
) -> Args {
    let mut a = smallvec![Arg::Ptr(descs), Arg::U64(nhalo as u64), Arg::Ptr(data)];
    a.extend(dims_args(f));
    a.extend([lo[0], lo[1], lo[2], hi[0], hi[1], hi[2]].map(|v| Arg::U64(v as u64)));
    a
}

/// `sh_flux_restrict(info, nface, x0, x1, x2, buf, n0, n1, n2, nslot, ndim)`, or with
/// `restrict` false `sh_flux_set(info, nface, buf, x0, x1, x2, n0, n1, n2, nslot)`.
pub(super) fn flux_args(
    descs: u64,
    nface: usize,
    flux: [u64; 3],
    buf: u64,
    restrict: bool,
    g: &FluxGeom,
) -> Args {
    let mut a = smallvec![Arg::Ptr(descs), Arg::U64(nface as u64)];
    let arrays = flux.map(Arg::Ptr);
    if restrict {
        a.extend(arrays);
        a.push(Arg::Ptr(buf));
    } else {
        a.push(Arg::Ptr(buf));
        a.extend(arrays);
    }
    a.extend(g.n.map(|v| Arg::U64(v as u64)));
    a.push(Arg::U64(g.nslots as u64));
    if restrict {
        a.push(Arg::U64(g.ndim as u64));
    }
    a
}

/// The geometry flux faces `h` were checked for, with `restrict` as asked, checked against
/// the face arrays (one per active direction) and a buffer of the given lengths.
fn flux_use(
    h: &DeviceHalos,
    restrict: bool,
    arrays: &[Buffer<f64>],
    buf_len: usize,
) -> Result<FluxGeom, CudaError> {
    let Use::Flux {
        geom,
        restrict: r,
        buf_len: want,
    } = h.usage
    else {
        return invalid("descriptors were not checked for flux faces".into());
    };
    if r != restrict {
        let what = if r { "restriction" } else { "setting" };
        return invalid(format!("flux faces were checked for {what}"));
    }
    need("face flux arrays", geom.ndim, arrays.len())?;
    for (d, a) in arrays.iter().enumerate() {
        if a.len() != geom.len(d) {
            need(
                &format!("face fluxes along x{}", d + 1),
                geom.len(d),
                a.len(),
            )?;
        }
    }
    if buf_len < want {
        return invalid(format!(
            "flux correction buffer: {buf_len} values, expected at least {want}"
        ));
    }
    Ok(geom)
}

/// The storage of pack/unpack descriptors `h`, checked against a field storage and a
/// communication buffer of the given lengths.
fn pack_use(
    h: &DeviceHalos,
    data_len: usize,
    buf_len: usize,
) -> Result<(FieldDims, Option<FieldDims>), CudaError> {
    let Use::Pack {
        fields,
        coarse,
        buf_len: want,
    } = h.usage
    else {
        return invalid("descriptors were not checked for packing".into());
    };
    need("field storage", fields.len(), data_len)?;
    // A message buffer may hold more after the packed sub-halos (coalesced status values).
    if buf_len < want {
        return invalid(format!(
            "communication buffer: {buf_len} values, expected at least {want}"
        ));
    }
    Ok((fields, coarse))
}

impl Device {
    /// Packs every sub-halo of `h` from `data` (coarse ones from `coarse`, given when `h` was
    /// checked with coarse buffers) into `buf` in one launch; with `flags = Some((threshold,
    /// over))`, `over[k]` becomes 1 if some |value| of sub-halo `k` exceeds the threshold of
    /// its variable slot (`threshold[var]`), else 0.
    pub fn halo_pack(
        &self,
        h: &DeviceHalos,
        data: &Buffer<f64>,
        coarse: Option<&Buffer<f64>>,
        buf: &mut Buffer<f64>,
        flags: Option<(&Buffer<f64>, &mut Buffer<u32>)>,
    ) -> Result<(), CudaError> {
        let (fields, cdims) = pack_use(h, data.len(), buf.len())?;
        let (cptr, cdims) = match (coarse, cdims) {
            (Some(c), Some(d)) => {
                need("coarse buffers", d.len(), c.len())?;
                (c.on_device(self)?.address(), d)
            }
            (None, None) => (data.on_device(self)?.address(), fields),
            _ => {
                return invalid(
                    "coarse buffers given without coarse dimensions, or not given".into(),
                )
            }
        };
        let flag_ptrs = match flags {
            Some((t, o)) => {
                if o.len() < h.len() {
                    return invalid(format!("{} flags for {} sub-halos", o.len(), h.len()));
                }
                if t.len() < fields.nvar {
                    let n = fields.nvar;
                    return invalid(format!("{} thresholds for {n} variable slots", t.len()));
                }
                [
                    t.on_device(self)?.address(),
                    o.on_device_mut(self)?.address(),
                ]
            }
            None => [0, 0],
        };
        if h.is_empty() {
            return Ok(());
        }
        let args = pack_args(
            [
                h.descs.on_device(self)?.address(),
                data.on_device(self)?.address(),
                cptr,
            ],
            buf.on_device_mut(self)?.address(),
            h.len(),
            [&fields, &cdims],
            flag_ptrs,
        );
        self.launch(KernelSet::Halo, "sh_halo_pack", h.grid(), HALO_BLOCK, &args)
    }

    /// Unpacks every sub-halo of `h` from `buf` into `data` (coarse ones into `coarse`) in one
    /// launch; a sub-halo without [`FLAG_ALLOCATED`](crate::cuda::desc::FLAG_ALLOCATED) gets
    /// `fill`. Receiving boxes must not overlap (they do not in a valid exchange).
    pub fn halo_unpack(
        &self,
        h: &DeviceHalos,
        buf: &Buffer<f64>,
        data: &mut Buffer<f64>,
        coarse: Option<&mut Buffer<f64>>,
        fill: f64,
    ) -> Result<(), CudaError> {
        let (fields, cdims) = pack_use(h, data.len(), buf.len())?;
        let dptr = data.on_device_mut(self)?.address();
        let (cptr, cdims) = match (coarse, cdims) {
            (Some(c), Some(d)) => {
                need("coarse buffers", d.len(), c.len())?;
                (c.on_device_mut(self)?.address(), d)
            }
            (None, None) => (dptr, fields),
            _ => {
                return invalid(
                    "coarse buffers given without coarse dimensions, or not given".into(),
                )
            }
        };
        if h.is_empty() {
            return Ok(());
        }
        let args = unpack_args(
            [
                h.descs.on_device(self)?.address(),
                buf.on_device(self)?.address(),
            ],
            [dptr, cptr],
            h.len(),
            [&fields, &cdims],
            fill,
        );
        self.launch(
            KernelSet::Halo,
            "sh_halo_unpack",
            h.grid(),
            HALO_BLOCK,
            &args,
        )
    }

    fn refine_args(
        &self,
        h: &DeviceHalos,
        from: &Buffer<f64>,
        from_len: usize,
        to: &mut Buffer<f64>,
        to_len: usize,
        geom: &RefineGeom,
    ) -> Result<Args, CudaError> {
        need("source storage", from_len, from.len())?;
        need("destination storage", to_len, to.len())?;
        Ok(refine_args(
            [
                h.descs.on_device(self)?.address(),
                from.on_device(self)?.address(),
            ],
            to.on_device_mut(self)?.address(),
            h.len(),
            geom,
        ))
    }

    /// Restricts the fine cells under every coarse cell of every box of `h` into `coarse`, in
    /// one launch (the host's expression order: bit-identical results).
    pub fn restrict(
        &self,
        h: &DeviceHalos,
        fine: &Buffer<f64>,
        coarse: &mut Buffer<f64>,
    ) -> Result<(), CudaError> {
        let Use::Refine { geom, .. } = h.usage else {
            return invalid("descriptors were not checked for restriction".into());
        };
        let args = self.refine_args(h, fine, geom.fine.len(), coarse, geom.coarse.len(), &geom)?;
        if h.is_empty() {
            return Ok(());
        }
        self.launch(KernelSet::Halo, "sh_restrict", h.grid(), HALO_BLOCK, &args)
    }

    /// Prolongates every coarse cell of every box of `h` onto its children in `fine` with
    /// `op`, in one launch.
    pub fn prolongate(
        &self,
        h: &DeviceHalos,
        op: ProlongOp,
        coarse: &Buffer<f64>,
        fine: &mut Buffer<f64>,
    ) -> Result<(), CudaError> {
        let Use::Refine { geom, halo } = h.usage else {
            return invalid("descriptors were not checked for prolongation".into());
        };
        if !halo && op != ProlongOp::Constant {
            return invalid("slopes need descriptors checked with their face neighbours".into());
        }
        let mut args =
            self.refine_args(h, coarse, geom.coarse.len(), fine, geom.fine.len(), &geom)?;
        args.push(Arg::I32(op as i32));
        if h.is_empty() {
            return Ok(());
        }
        self.launch(
            KernelSet::Halo,
            "sh_prolongate",
            h.grid(),
            HALO_BLOCK,
            &args,
        )
    }

    /// Restricts the fine face fluxes (`flux[d]` along each active direction `d`) under every
    /// coarse face of the flux faces `h` into `buf`, in one launch (the host's expression
    /// order: bit-identical results).
    pub fn flux_restrict(
        &self,
        h: &DeviceHalos,
        flux: &[Buffer<f64>],
        buf: &mut Buffer<f64>,
    ) -> Result<(), CudaError> {
        let g = flux_use(h, true, flux, buf.len())?;
        if h.is_empty() {
            return Ok(());
        }
        let mut ptrs = [0; 3];
        for (p, f) in ptrs.iter_mut().zip(flux) {
            *p = f.on_device(self)?.address();
        }
        let descs = h.descs.on_device(self)?.address();
        let out = buf.on_device_mut(self)?.address();
        let args = flux_args(descs, h.len(), ptrs, out, true, &g);
        self.launch(
            KernelSet::Halo,
            "sh_flux_restrict",
            h.grid(),
            HALO_BLOCK,
            &args,
        )
    }

    /// Sets the face fluxes of every flux face of `h` with
    /// [`FLAG_ALLOCATED`](crate::cuda::FLAG_ALLOCATED) to the values in `buf`, in one launch; the
    /// others keep theirs.
    pub fn flux_set(
        &self,
        h: &DeviceHalos,
        buf: &Buffer<f64>,
        flux: &mut [Buffer<f64>],
    ) -> Result<(), CudaError> {
        let g = flux_use(h, false, flux, buf.len())?;
        if h.is_empty() {
            return Ok(());
        }
        let mut ptrs = [0; 3];
        for (p, f) in ptrs.iter_mut().zip(flux) {
            *p = f.on_device_mut(self)?.address();
        }
        let descs = h.descs.on_device(self)?.address();
        let from = buf.on_device(self)?.address();
        let args = flux_args(descs, h.len(), ptrs, from, false, &g);
        self.launch(KernelSet::Halo, "sh_flux_set", h.grid(), HALO_BLOCK, &args)
    }

    /// Fills every ghost box of `h` from the interior along the directions the box lies
    /// outside it: the nearest interior value (outflow), or the mirror image across the face
    /// for boxes with [`FLAG_MIRROR0`](crate::cuda::FLAG_MIRROR0)` << d` (reflecting), in one launch.
    pub fn physical_fill(&self, h: &DeviceHalos, data: &mut Buffer<f64>) -> Result<(), CudaError> {
        let Use::Physical { fields, lo, hi } = h.usage else {
            return invalid("descriptors were not checked for a physical fill".into());
        };
        need("field storage", fields.len(), data.len())?;
        if h.is_empty() {
            return Ok(());
        }
        let descs = h.descs.on_device(self)?.address();
        let args = physical_args(
            descs,
            data.on_device_mut(self)?.address(),
            h.len(),
            &fields,
            lo,
            hi,
        );
        self.launch(KernelSet::Halo, "sh_physical", h.grid(), HALO_BLOCK, &args)
    }
}
