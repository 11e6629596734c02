//! The advection problem with its fields resident on a GPU (`parthenon/exec/space: cuda`):
//! each stage is one flux launch per direction and one update launch over every block, and the
//! ghost fill packs and unpacks each route in one launch, staging the buffers through the host
//! for MPI, or (GPU-aware, `parthenon/exec/gpu_mpi`) packing into and unpacking from message
//! buffers in device memory that MPI reads and writes in place. The host's block data keeps
//! the metadata (sparse allocation included) and receives the fields only for outputs, error
//! norms and remeshes. Periodic, outflow and reflecting boundaries (`setup` refuses user
//! ones).
//!
//! Multilevel meshes: the exchange's device fields restrict and prolongate on the device, and
//! the face fluxes stay there for the flux correction ([`DeviceFluxes`]): one launch
//! restricts every fine face into the correction's messages, one sets every coarse face from
//! what arrived; its messages stage through the host or, GPU-aware, live in device memory
//! like the exchange's. Adaptive refinement measures its criteria on the device (one launch,
//! one value per block and measure to the host, every `refine_interval` cycles); only a
//! remesh (done on the host) downloads the fields, and the device fields are then built again
//! from the new blocks.
//!
//! Sparse fields: the kernels update every variable of every block, where the host skips
//! unallocated ones. An unallocated variable holds its default, 0, in its interior (the host
//! storage keeps it there) and in its ghosts (null messages unpack the default), and the
//! update of an all-zero stencil is +0, so it stays at the default the host storage holds
//! and starts from when a neighbour's data allocates it. This relies on the advection never
//! deallocating: a deallocation would reset the host storage only.

use super::amr::TINY;
use super::{Advection, Comms, Geo, Limiter};
use anyhow::{Context as _, Result};
use starhalo_boundary::device_flux::DeviceFluxes;
use starhalo_boundary::device_pack::DeviceFields;
use starhalo_boundary::{BlockData, BoundaryType};
use starhalo_exec::cuda::{AdvectGeom, Device, FluxGeom, MeasureArrays, SlopeLimiter};
use starhalo_exec::Buffer;
use starhalo_sf::device::GpuMpi;
use std::sync::Arc;

/// The process's GPU with every kernel compiled, or why there is none.
pub(super) fn open() -> Result<Arc<Device>> {
    Device::process_default_compiled()
        .context("parthenon/exec/space is cuda, but no GPU can be used")
}

/// The MPI path `asked` for on this MPI, or why it does not exist. A job of one rank hands
/// MPI no message (every channel is on the rank), so its messages may stay in device memory
/// whatever the MPI supports.
pub(super) fn resolve_mpi(asked: GpuMpi, nranks: usize) -> Result<GpuMpi> {
    asked
        .resolve(nranks == 1 || starhalo_sf::mpi_cuda_support())
        .map_err(anyhow::Error::msg)
        .context("parthenon/exec/gpu_mpi")
}

pub(super) struct Gpu {
    fields: DeviceFields,
    geom: AdvectGeom,
    /// Face fluxes per active direction, with the flux correction's faces (multilevel).
    fluxes: DeviceFluxes,
    /// Three cell widths per block.
    dx: Buffer<f64>,
    /// The fields at the start of the cycle, for the stages after the first (RK2 only).
    base: Option<Buffer<f64>>,
    /// The refinement criteria's device arrays (adaptive runs).
    measure: Option<MeasureArrays>,
    limiter: SlopeLimiter,
}

impl Gpu {
    /// Uploads `a`'s fields (ghosts filled) and the exchange's descriptors to `dev`, and
    /// with a GPU-aware MPI path moves the exchange's messages to device memory.
    pub(super) fn new(dev: &Arc<Device>, a: &Advection, comms: &Comms) -> Result<Self> {
        let data = a.data.borrow();
        let mut fields = DeviceFields::new(dev, &comms.exchange.borrow(), &data)?;
        // Resolved to staged or aware when the device was acquired.
        let mpi = a.gpu_mpi;
        if mpi == GpuMpi::Aware {
            let like = Buffer::zeroed_for_mpi(dev, 1)?;
            comms.exchange.borrow_mut().place_messages(&like)?;
            if let Some(c) = &comms.correction {
                c.borrow_mut().place_messages(&like)?;
            }
        }
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
        let flux_geom = FluxGeom {
            ndim,
            n: geom.n,
            nslots: geom.nvar,
            nblocks: geom.nblocks,
        };
        let mut fluxes = match &comms.correction {
            Some(c) => {
                let c = c.borrow();
                DeviceFluxes::new(dev, flux_geom, Some([c.send_faces(), c.recv_faces()]))?
            }
            None => DeviceFluxes::new(dev, flux_geom, None)?,
        };
        // Staged messages need device copies: allocated here, where a failure stops every
        // rank together, rather than in the first exchange.
        if mpi == GpuMpi::Staged {
            fields.allocate_staging()?;
            fluxes.allocate_staging()?;
        }
        let measure = match &a.amr {
            Some(amr) => Some(MeasureArrays::new(dev, &geom, &amr.measures())?),
            None => None,
        };
        let base = if a.integrator.stages() > 1 {
            Some(Buffer::zeroed_on(dev, geom.field_len())?)
        } else {
            None
        };
        Ok(Self {
            geom,
            fluxes,
            dx: Buffer::from_host_to(dev, &dx)?,
            base,
            measure,
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
            let flux = self
                .fluxes
                .array_mut(d)
                .context("no face fluxes along an active direction")?;
            dev.advect_flux(
                &self.geom,
                self.fields.data(),
                flux,
                d,
                a.v[d],
                self.limiter,
            )?;
        }
        if let Some(correction) = &comms.correction {
            correction
                .borrow_mut()
                .correct(&mut self.fluxes, &a.data.borrow())
                .context("flux correction")?;
        }
        let base = if st == 0 { None } else { self.base.as_ref() };
        dev.advect_update(
            &self.geom,
            self.fields.data_mut(),
            base,
            self.fluxes.arrays(),
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

    /// The measure of each refinement criterion on every block,
    /// `[block][measure]`, in one launch; only these values come to the host.
    pub(super) fn refine_measures(&mut self) -> Result<Vec<f64>> {
        let m = self
            .measure
            .as_mut()
            .context("no refinement criteria on the device")?;
        let mut out = vec![0.0; m.len()];
        let dev = self.fields.device();
        dev.refine_measure(&self.geom, self.fields.data(), m, TINY, &mut out)?;
        Ok(out)
    }

    /// Copies the device fields into the host's block data.
    pub(super) fn download(&self, data: &mut BlockData) -> Result<()> {
        Ok(self.fields.download(data)?)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{block_update, face_fluxes, Limiter};
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use starhalo_exec::cuda::emulate::{from_bytes, to_bytes, Emulator};
    use starhalo_mesh::config::RefinementKind;
    use starhalo_mesh::{Mesh, MeshConfig, RefinementFlag};

    /// Reads a geometry, the fields, the cycle's start and the cell widths; runs the flux
    /// kernel per active direction and the update kernel with the arguments
    /// `Device::advect_flux` and `Device::advect_update` pass, each as 3 blocks of 32 threads;
    /// writes the fluxes and the updated fields.
    const DRIVER: &str = r#"
int main() {
    gridDim.x = 3; blockDim.x = 32;
    double h[18];
    sh_read(h, 18);
    u64 nb = h[0], nvar = h[1], d[3] = {(u64)h[2], (u64)h[3], (u64)h[4]};
    u64 g[3] = {(u64)h[5], (u64)h[6], (u64)h[7]}, n[3] = {(u64)h[8], (u64)h[9], (u64)h[10]};
    u64 ndim = h[11], has_u0 = h[17];
    int limiter = (int)h[12];
    u64 len = nb * nvar * d[0] * d[1] * d[2];
    double *u = (double *)malloc(len * 8), *u0 = has_u0 ? (double *)malloc(len * 8) : 0;
    double *dx = (double *)malloc(nb * 3 * 8);
    sh_read(u, len);
    if (has_u0) sh_read(u0, len);
    sh_read(dx, nb * 3);
    double *f[3] = {0, 0, 0};
    u64 flen[3] = {0, 0, 0};
    for (u64 dir = 0; dir < ndim; ++dir) {
        flen[dir] = nb * nvar * (n[0] + (dir == 0)) * (n[1] + (dir == 1)) * (n[2] + (dir == 2));
        f[dir] = (double *)malloc(flen[dir] * 8);
        for (blockIdx.x = 0; blockIdx.x < gridDim.x; ++blockIdx.x) sh_run_block([&] {
            sh_adv_flux(u, f[dir], nb * nvar, d[0], d[1], d[2], g[0], g[1], g[2], n[0], n[1], n[2], (int)dir, h[13 + dir], limiter);
        });
        sh_write(f[dir], flen[dir]);
    }
    for (blockIdx.x = 0; blockIdx.x < gridDim.x; ++blockIdx.x) sh_run_block([&] {
        sh_adv_update(u, u0, f[0], f[1], f[2], dx, nvar, nb * nvar, d[0], d[1], d[2], g[0], g[1], g[2], n[0], n[1], n[2], ndim, h[16]);
    });
    sh_write(u, len);
    return 0;
}
"#;

    /// Reads a geometry, the criteria's variables and the fields; runs the refinement measure
    /// as blocks of `SH_MEASURE_THREADS` threads (as `Device::refine_measure` launches it),
    /// on a grid of 2 blocks (fewer than the pairs, so each block takes several); writes the
    /// measures.
    const MEASURE_DRIVER: &str = r#"
int main() {
    gridDim.x = 2; blockDim.x = SH_MEASURE_THREADS;
    double h[14];
    sh_read(h, 14);
    u64 nb = h[0], nvar = h[1], d[3] = {(u64)h[2], (u64)h[3], (u64)h[4]};
    u64 g[3] = {(u64)h[5], (u64)h[6], (u64)h[7]}, n[3] = {(u64)h[8], (u64)h[9], (u64)h[10]};
    u64 ndim = h[11], ncrit = h[12];
    u64 len = nb * nvar * d[0] * d[1] * d[2];
    double *u = (double *)malloc(len * 8), *v = (double *)malloc(ncrit * 8);
    double *m = (double *)malloc(nb * ncrit * 8);
    u64 *crit = (u64 *)malloc(ncrit * 8);
    sh_read(v, ncrit);
    for (u64 c = 0; c < ncrit; ++c) crit[c] = v[c];
    sh_read(u, len);
    for (blockIdx.x = 0; blockIdx.x < gridDim.x; ++blockIdx.x) sh_run_block([&] {
        sh_adv_refine_measure(u, crit, m, nb * ncrit, ncrit, nvar, d[0], d[1], d[2], g[0], g[1], g[2], n[0], n[1], n[2], ndim, h[13]);
    });
    sh_write(m, nb * ncrit);
    return 0;
}
"#;

    /// The refinement measure kernel, run on the host by the emulator with its block reduction
    /// over 256 threads, gives the host criterion's value bit for bit: 1-D to 3-D blocks of
    /// two levels (fewer and more cells than threads), seven criteria of every kind on two
    /// variables, random non-dyadic values with zeros (where `TINY` keeps the ratios finite),
    /// a steep ghost the edge cells see, and a NaN (which both maxima ignore).
    /// Skipped, saying so, where no `c++` is installed.
    #[test]
    fn refinement_measure_kernel_matches_the_host_bit_for_bit() {
        let Some(emu) = Emulator::build(MEASURE_DRIVER).unwrap() else {
            eprintln!("no host c++ compiler: refinement measure not emulated");
            return;
        };
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        use starhalo_exec::cuda::MeasureKind::*;
        let criteria = [
            (1, FirstDerivative),
            (0, FirstDerivative),
            (1, SecondDerivative),
            (0, Max),
            (1, MaxNegated),
            (0, BlockMax),
            (1, BlockMaxNegated),
        ];
        let ncrit = criteria.len();
        let meshes = [
            two_level_mesh(1),
            two_level_mesh(2),
            two_level_mesh(3),
            // 512 cells a block: each thread takes two.
            two_level([64, 32, 1], [32, 16, 1]),
        ];
        for mesh in &meshes {
            let ndim = mesh.config().ndim();
            let geos: Vec<Geo> = (0..mesh.forest().len())
                .map(|gid| Geo::new(mesh, gid))
                .collect();
            let (nb, nvar) = (geos.len(), 2);
            let npts: usize = geos[0].dims.iter().product();
            let mut u: Vec<f64> = (0..nb * nvar * npts)
                .map(|_| match rng.gen_range(0..8) {
                    0 => 0.0,
                    1 => -0.0,
                    _ => rng.gen_range(-1.0..1.0),
                })
                .collect();
            // Block 1, variable 0: a flat interior, steep only through a ghost of its first
            // interior cell along x1. Block 2, variable 1: a NaN inside.
            let g1 = &geos[1];
            let first = g1.at(g1.interior().next().unwrap());
            u[nvar * npts..(nvar + 1) * npts].fill(0.5);
            u[nvar * npts + first - 1] = 40.0;
            u[(2 * nvar + 1) * npts + first + 1] = f64::NAN;

            let mut input = vec![nb as f64, nvar as f64];
            input.extend(geos[0].dims.map(|x| x as f64));
            input.extend(geos[0].g.map(|x| x as f64));
            input.extend(geos[0].n.map(|x| x as f64));
            input.extend([ndim as f64, ncrit as f64, TINY]);
            let g = AdvectGeom {
                nblocks: nb,
                nvar,
                dims: geos[0].dims,
                ghosts: geos[0].g,
                n: geos[0].n,
                ndim,
            };
            let codes = starhalo_exec::cuda::criteria_codes(&g, &criteria).unwrap();
            input.extend(codes.iter().map(|&c| c as f64));
            input.extend(&u);
            let got = from_bytes(&emu.run(&to_bytes(&input)).unwrap());
            assert_eq!(got.len(), nb * ncrit, "{ndim}-D");
            for (b, geo) in geos.iter().enumerate() {
                for (c, &(v, kind)) in criteria.iter().enumerate() {
                    let at = (b * nvar + v) * npts;
                    let want = super::super::amr::measure(kind, &u[at..at + npts], geo);
                    let dev = got[b * ncrit + c];
                    assert_eq!(
                        dev.to_bits(),
                        want.to_bits(),
                        "{ndim}-D block {b} variable {v} {kind:?}: {dev} against {want}"
                    );
                }
            }
            // The ghost is what makes block 1 steep (the host's measure says so too).
            assert!(got[ncrit + 1] > 10.0, "{ndim}-D: {}", got[ncrit + 1]);
            // Block 1's variable 0 is 0.5 inside: its largest value there; with the ghosts,
            // the steep ghost's 40.
            assert_eq!(got[ncrit + 3], 0.5, "{ndim}-D");
            assert_eq!(got[ncrit + 5], 40.0, "{ndim}-D");
            assert!(got.iter().all(|m| m.is_finite()), "{ndim}-D: {got:?}");
        }
    }

    /// A 2-level mesh (block 0 refined) of `ndim` dimensions: blocks of two cell widths.
    fn two_level_mesh(ndim: usize) -> Mesh {
        match ndim {
            1 => two_level([16, 1, 1], [4, 1, 1]),
            2 => two_level([16, 8, 1], [4, 4, 1]),
            _ => two_level([8, 8, 8], [4, 4, 4]),
        }
    }

    /// A 2-level mesh (block 0 refined) of `nx` cells in blocks of `bnx`.
    fn two_level(nx: [usize; 3], bnx: [usize; 3]) -> Mesh {
        let mut c = MeshConfig::new(nx, bnx);
        c.xmax = [1.0, 0.7, 0.3];
        c.refinement = RefinementKind::Adaptive;
        c.numlevel = 2;
        c.validate().unwrap();
        let mut mesh = Mesh::new(c, 1).unwrap();
        let mut flags = vec![RefinementFlag::Same; mesh.forest().len()];
        flags[0] = RefinementFlag::Refine;
        mesh.remesh(&flags, None).unwrap();
        mesh
    }

    /// The flux and update kernels, run on the host by the emulator, give the host
    /// advection's fluxes and updated fields bit for bit: 2-D and 3-D blocks of two levels
    /// (so each block reads its own cell widths), two variables, random non-dyadic values
    /// with sign changes (every limiter branch), velocities of both signs and zero, RK1 and
    /// the RK2 average. Skipped, saying so, where no `c++` is installed.
    #[test]
    fn advection_kernels_match_the_host_bit_for_bit() {
        let Some(emu) = Emulator::build(DRIVER).unwrap() else {
            eprintln!("no host c++ compiler: advection kernels not emulated");
            return;
        };
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let limiters = [
            (Limiter::None, SlopeLimiter::None),
            (Limiter::Minmod, SlopeLimiter::Minmod),
            (Limiter::Mc, SlopeLimiter::Mc),
        ];
        let mut cases = 0;
        for ndim in [2, 3] {
            let mesh = two_level_mesh(ndim);
            let geos: Vec<Geo> = (0..mesh.forest().len())
                .map(|gid| Geo::new(&mesh, gid))
                .collect();
            assert!(geos.iter().any(|g| g.dx != geos[0].dx), "one cell width");
            let (nb, nvar) = (geos.len(), 2);
            let (dims, g0) = (geos[0].dims, geos[0].g);
            let npts: usize = dims.iter().product();
            for ((lim, dev_lim), rk2) in limiters.into_iter().zip([false, true, true]) {
                let v = [0.7, -1.3, if ndim == 3 { 0.45 } else { 0.0 }];
                let v = if lim == Limiter::Minmod {
                    [-0.9, 0.0, 0.3]
                } else {
                    v
                };
                let dt = 0.0123;
                let u: Vec<f64> = (0..nb * nvar * npts)
                    .map(|_| rng.gen_range(-1.0..1.0))
                    .collect();
                let u0: Vec<f64> = (0..u.len()).map(|_| rng.gen_range(-1.0..1.0)).collect();
                let dx: Vec<f64> = geos.iter().flat_map(|g| g.dx).collect();
                let mut header = vec![nb as f64, nvar as f64];
                header.extend(dims.map(|x| x as f64));
                header.extend(g0.map(|x| x as f64));
                header.extend(geos[0].n.map(|x| x as f64));
                header.extend([ndim as f64, dev_lim as i32 as f64]);
                header.extend(v);
                header.extend([dt, f64::from(u8::from(rk2))]);
                let mut input = header;
                input.extend(&u);
                if rk2 {
                    input.extend(&u0);
                }
                input.extend(&dx);
                let out = from_bytes(&emu.run(&to_bytes(&input)).unwrap());

                let mut at = 0;
                let mut flux_of = |d: usize| {
                    let mut f = geos[0].n;
                    f[d] += 1;
                    let len = nb * nvar * f.iter().product::<usize>();
                    at += len;
                    (&out[at - len..at], len / (nb * nvar))
                };
                let dev_flux: Vec<(&[f64], usize)> = (0..ndim).map(&mut flux_of).collect();
                let dev_u = &out[at..];
                assert_eq!(dev_u.len(), u.len());
                let what = format!("{ndim}-D, {lim:?}, rk2 {rk2}");
                for (b, geo) in geos.iter().enumerate() {
                    for s in 0..nvar {
                        let bs = b * nvar + s;
                        let slot = &u[bs * npts..(bs + 1) * npts];
                        let fl: Vec<Vec<f64>> = dev_flux
                            .iter()
                            .enumerate()
                            .map(|(d, &(_, per))| {
                                let mut f = vec![f64::NAN; per];
                                face_fluxes(slot, geo, d, v[d], lim, &mut f);
                                f
                            })
                            .collect();
                        for (d, (f, per)) in dev_flux.iter().enumerate() {
                            let dev = &f[bs * per..(bs + 1) * per];
                            let same = dev
                                .iter()
                                .zip(&fl[d])
                                .all(|(a, b)| a.to_bits() == b.to_bits());
                            assert!(
                                same && dev.len() == fl[d].len(),
                                "{what}: block {b} slot {s} fluxes along x{}",
                                d + 1
                            );
                        }
                        let base = rk2.then(|| &u0[bs * npts..(bs + 1) * npts]);
                        let mut new = slot.to_vec();
                        let flux = [0, 1, 2].map(|d| fl.get(d).map_or(&[][..], |f| &f[..]));
                        block_update(&mut new, base, flux, geo, dt);
                        let dev = &dev_u[bs * npts..(bs + 1) * npts];
                        for p in geo.interior() {
                            let (got, want) = (dev[geo.at(p)], new[geo.at(p)]);
                            assert_eq!(
                                got.to_bits(),
                                want.to_bits(),
                                "{what}: block {b} slot {s} at {p:?}: {got} against {want}"
                            );
                        }
                        let interior: std::collections::HashSet<usize> =
                            geo.interior().map(|p| geo.at(p)).collect();
                        for (i, x) in dev
                            .iter()
                            .enumerate()
                            .filter(|(i, _)| !interior.contains(i))
                        {
                            assert_eq!(x.to_bits(), slot[i].to_bits(), "{what}: ghost {i} changed");
                        }
                        cases += 1;
                    }
                }
            }
        }
        assert!(cases > 0);
    }
}
