//! The advection problem with its fields resident on a GPU (`parthenon/exec/space: cuda`):
//! each stage is one flux launch per direction and one update launch over every block, and the
//! ghost fill packs and unpacks each route in one launch, staging the buffers through the host
//! for MPI. The host's block data keeps the metadata (sparse allocation included) and receives
//! the fields only for outputs and error norms. Single-level meshes with periodic, outflow or
//! reflecting boundaries (`setup` refuses the rest).
//!
//! Sparse fields: the kernels update every variable of every block, where the host skips
//! unallocated ones. An unallocated variable holds its default, 0, in its interior (the host
//! storage keeps it there) and in its ghosts (null messages unpack the default), and the
//! update of an all-zero stencil is +0, so it stays at the default the host storage holds
//! and starts from when a neighbour's data allocates it.

use super::{Advection, Comms, Geo, Limiter};
use anyhow::{Context as _, Result};
use starhalo_boundary::device_pack::DeviceFields;
use starhalo_boundary::{BlockData, BoundaryType};
use starhalo_exec::cuda::{AdvectGeom, Device, SlopeLimiter};
use starhalo_exec::Buffer;

pub(super) struct Gpu {
    fields: DeviceFields,
    geom: AdvectGeom,
    /// Face fluxes per active direction.
    flux: Vec<Buffer<f64>>,
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
        let base = if a.integrator.stages() > 1 {
            Some(Buffer::zeroed_on(&dev, geom.field_len())?)
        } else {
            None
        };
        Ok(Self {
            geom,
            flux,
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
