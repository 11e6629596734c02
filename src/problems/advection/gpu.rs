//! The advection problem with its fields resident on a GPU (`parthenon/exec/space: cuda`):
//! each stage is one flux launch per direction and one update launch over every block, and the
//! ghost fill packs and unpacks each route in one launch, staging the buffers through the host
//! for MPI. The host's block data keeps the metadata (sparse allocation included) and receives
//! the fields only for outputs, error norms and refinement checks. Periodic, outflow and
//! reflecting boundaries (`setup` refuses user ones).
//!
//! Multilevel meshes: the exchange's device fields restrict and prolongate on the device; the
//! flux correction stages the face fluxes through the host (download, the host's
//! [`FluxCorrection`](starhalo_boundary::FluxCorrection), upload). Adaptive refinement checks
//! the criterion on the downloaded fields, and after a remesh (done on the host) the device
//! fields are built again from the new blocks.
//!
//! Sparse fields: the kernels update every variable of every block, where the host skips
//! unallocated ones. An unallocated variable holds its default, 0, in its interior (the host
//! storage keeps it there) and in its ghosts (null messages unpack the default), and the
//! update of an all-zero stencil is +0, so it stays at the default the host storage holds
//! and starts from when a neighbour's data allocates it.

use super::{Advection, Comms, Geo, Limiter};
use anyhow::{bail, Context as _, Result};
use starhalo_boundary::device_pack::DeviceFields;
use starhalo_boundary::{BlockData, BoundaryType, FluxData};
use starhalo_exec::cuda::{AdvectGeom, Device, SlopeLimiter};
use starhalo_exec::Buffer;

pub(super) struct Gpu {
    fields: DeviceFields,
    geom: AdvectGeom,
    /// Face fluxes per active direction.
    flux: Vec<Buffer<f64>>,
    /// Their host copies for the flux correction (multilevel meshes only, else empty).
    host_flux: Vec<Vec<f64>>,
    /// Three cell widths per block.
    dx: Buffer<f64>,
    /// The fields at the start of the cycle, for the stages after the first (RK2 only).
    base: Option<Buffer<f64>>,
    limiter: SlopeLimiter,
}

impl Gpu {
    /// Uploads `a`'s fields (ghosts filled) and the exchange's descriptors.
    pub(super) fn new(a: &Advection, comms: &Comms) -> Result<Self> {
        let dev = Device::process_default_compiled()
            .context("parthenon/exec/space is cuda, but no GPU can be used")?;
        let data = a.data.borrow();
        let fields = DeviceFields::new(&dev, &comms.exchange.borrow(), &data)?;
        let l = fields.layout();
        let c = a.mesh.config();
        let ndim = a.ndim();
        let mut geom = AdvectGeom {
            nblocks: data.gids().len(),
            nvar: l.nvar,
            dims: l.dims,
            ghosts: [0; 3],
            n: [1; 3],
            ndim,
        };
        for d in 0..ndim {
            geom.ghosts[d] = c.nghost;
            geom.n[d] = c.block_nx[d];
        }
        let dx: Vec<f64> = data
            .gids()
            .iter()
            .flat_map(|&gid| Geo::new(&a.mesh, gid).dx)
            .collect();
        let flux = (0..ndim)
            .map(|d| Buffer::zeroed_on(&dev, geom.flux_len(d)))
            .collect::<Result<_, _>>()?;
        let host_flux = match &comms.correction {
            Some(_) => (0..ndim).map(|d| vec![0.0; geom.flux_len(d)]).collect(),
            None => Vec::new(),
        };
        let base = if a.integrator.stages() > 1 {
            Some(Buffer::zeroed_on(&dev, geom.field_len())?)
        } else {
            None
        };
        Ok(Self {
            geom,
            flux,
            host_flux,
            dx: Buffer::from_host_to(&dev, &dx)?,
            base,
            limiter: match a.limiter {
                Limiter::None => SlopeLimiter::None,
                Limiter::Minmod => SlopeLimiter::Minmod,
                Limiter::Mc => SlopeLimiter::Mc,
            },
            fields,
        })
    }

    /// Keeps the fields of the cycle's start for the later stages (a copy on the device into
    /// the buffer allocated once).
    pub(super) fn begin_cycle(&mut self) -> Result<()> {
        if let Some(b) = &mut self.base {
            b.copy_from(self.fields.data())?;
        }
        Ok(())
    }

    /// Stage `st` of the cycle: fluxes, update (averaged with the cycle's start after the
    /// first stage), ghost fill.
    pub(super) fn stage(&mut self, a: &Advection, comms: &Comms, dt: f64, st: usize) -> Result<()> {
        let dev = self.fields.device().clone();
        for d in 0..self.geom.ndim {
            dev.advect_flux(
                &self.geom,
                self.fields.data(),
                &mut self.flux[d],
                d,
                a.v[d],
                self.limiter,
            )?;
        }
        if let Some(correction) = &comms.correction {
            let mut fd = comms.flux.borrow_mut();
            for (dev, host) in self.flux.iter().zip(&mut self.host_flux) {
                dev.download(host)?;
            }
            to_flux_data(&self.geom, &self.host_flux, &mut fd)?;
            correction
                .borrow_mut()
                .correct(&mut fd, &a.data.borrow())
                .context("flux correction")?;
            from_flux_data(&self.geom, &fd, &mut self.host_flux)?;
            for (dev, host) in self.flux.iter_mut().zip(&self.host_flux) {
                dev.upload(host)?;
            }
        }
        let base = if st == 0 { None } else { self.base.as_ref() };
        dev.advect_update(
            &self.geom,
            self.fields.data_mut(),
            base,
            &self.flux,
            &self.dx,
            dt,
        )?;
        comms
            .exchange
            .borrow_mut()
            .fill_ghosts_in(
                &[BoundaryType::Any],
                &mut a.data.borrow_mut(),
                &mut self.fields,
            )
            .context("ghost fill")?;
        Ok(())
    }

    /// Copies the device fields into the host's block data.
    pub(super) fn download(&self, data: &mut BlockData) -> Result<()> {
        Ok(self.fields.download(data)?)
    }
}

/// Copies the device's face fluxes (per direction, `[block][slot][faces]`) into `fd` (per
/// block and slot, the directions one after another). Both order a slot's faces of one
/// direction with the first direction fastest over the interior widened by one face along
/// the normal, so each (block, slot, direction) is one contiguous copy.
fn to_flux_data(g: &AdvectGeom, flux: &[Vec<f64>], fd: &mut FluxData) -> Result<()> {
    for (d, f) in flux.iter().enumerate() {
        let n = faces_per_slot(g, fd, d)?;
        for (i, chunk) in f.chunks(n).enumerate() {
            fd.flux_mut(i / g.nvar, i % g.nvar, d)
                .copy_from_slice(chunk);
        }
    }
    Ok(())
}

/// The inverse of [`to_flux_data`].
fn from_flux_data(g: &AdvectGeom, fd: &FluxData, flux: &mut [Vec<f64>]) -> Result<()> {
    for (d, f) in flux.iter_mut().enumerate() {
        let n = faces_per_slot(g, fd, d)?;
        for (i, chunk) in f.chunks_mut(n).enumerate() {
            chunk.copy_from_slice(fd.flux(i / g.nvar, i % g.nvar, d));
        }
    }
    Ok(())
}

/// Faces of one slot along `d`, checked to be the same in both layouts.
fn faces_per_slot(g: &AdvectGeom, fd: &FluxData, d: usize) -> Result<usize> {
    let mut dims = g.n;
    dims[d] += 1;
    if fd.face_dims(d) != dims || fd.blocks() != g.nblocks || fd.slots() != g.nvar {
        bail!(
            "device fluxes along x{} ({} blocks of {} slots of {dims:?} faces) do not match the \
             host's ({} of {} of {:?})",
            d + 1,
            g.nblocks,
            g.nvar,
            fd.blocks(),
            fd.slots(),
            fd.face_dims(d)
        );
    }
    Ok(dims.iter().product())
}

#[cfg(test)]
mod tests {
    use super::*;
    use starhalo_mesh::field::IndexShape;

    /// Each device face lands on the host face with the same (block, slot, direction, index),
    /// and back; a mismatched shape is an error.
    #[test]
    fn fluxes_cross_between_the_device_and_host_layouts() {
        let shape = IndexShape::new([3, 2, 4], 2, 3).unwrap();
        let g = AdvectGeom {
            nblocks: 2,
            nvar: 3,
            dims: [7, 6, 8],
            ghosts: [2; 3],
            n: [3, 2, 4],
            ndim: 3,
        };
        let code = |b: usize, v: usize, d: usize, p: [usize; 3]| {
            (((((b * 3 + v) * 3 + d) * 8 + p[2]) * 8 + p[1]) * 8 + p[0]) as f64
        };
        let flux: Vec<Vec<f64>> = (0..3)
            .map(|d| {
                let mut f = g.n;
                f[d] += 1;
                let mut out = Vec::new();
                for bv in 0..g.nblocks * g.nvar {
                    for k in 0..f[2] {
                        for j in 0..f[1] {
                            for i in 0..f[0] {
                                out.push(code(bv / g.nvar, bv % g.nvar, d, [i, j, k]));
                            }
                        }
                    }
                }
                assert_eq!(out.len(), g.flux_len(d));
                out
            })
            .collect();
        let mut fd = FluxData::with_shape(&shape, 2, 3);
        to_flux_data(&g, &flux, &mut fd).unwrap();
        for (b, v, d) in [(0, 0, 0), (1, 2, 1), (1, 1, 2), (0, 2, 2)] {
            let dims = fd.face_dims(d);
            for p in [
                [0, 0, 0],
                [dims[0] - 1, dims[1] - 1, dims[2] - 1],
                [1, 1, 2],
            ] {
                assert_eq!(fd.flux(b, v, d)[fd.face_index(d, p)], code(b, v, d, p));
            }
        }
        let mut back: Vec<Vec<f64>> = flux.iter().map(|f| vec![0.0; f.len()]).collect();
        from_flux_data(&g, &fd, &mut back).unwrap();
        assert_eq!(back, flux);
        let other = FluxData::with_shape(&IndexShape::new([3, 2, 5], 2, 3).unwrap(), 2, 3);
        assert!(from_flux_data(&g, &other, &mut back).is_err());
    }
}
