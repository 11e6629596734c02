//! Launches of the finite-volume advection kernels ([`ADVECT_SRC`](super::kernels::ADVECT_SRC)):
//! the face fluxes along one direction and the conservative update, each one launch over every
//! (block, variable) array of a field storage, and the refinement measures of every block in
//! one launch.

use smallvec::smallvec;

use super::device::{grid_for, Device};
use super::error::CudaError;
use super::ffi::{Arg, Args};
use super::kernels::KernelSet;
use super::ops::need;
use crate::buffer::Buffer;
use std::sync::Arc;

const BLOCK: u32 = 256;
/// Threads per block of the refinement measure: `SH_MEASURE_THREADS` of the source.
const MEASURE_THREADS: u32 = 256;

/// What a refinement criterion measures over a block's interior cells (Parthenon's methods),
/// with the codes of the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MeasureKind {
    /// `derivative_order_1`: the largest `|u(c + e_d) - u(c - e_d)| / (2 |u(c)| + tiny)`.
    FirstDerivative = 0,
    /// `derivative_order_2`: the largest `|a - u(c)| / (|a| + |u(c)| + tiny)`, with `a` the
    /// mean of the two neighbours along `d`.
    SecondDerivative = 1,
    /// `magnitude`, `greater_than`: the largest value.
    Max = 2,
    /// `magnitude`, `less_than`: the largest negated value (minus the smallest).
    MaxNegated = 3,
    /// The largest value of the whole block, ghosts included (with the next, the advection
    /// example's own test).
    BlockMax = 4,
    /// The largest negated value of the whole block, ghosts included.
    BlockMaxNegated = 5,
}

/// Slope limiters of the piecewise-linear reconstruction, with the codes of the kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SlopeLimiter {
    /// Centred slope, unlimited.
    None = 0,
    /// Minmod.
    Minmod = 1,
    /// Monotonised central.
    Mc = 2,
}

/// The arrays the kernels walk: `nblocks * nvar` row-major arrays of `dims` points, `ghosts`
/// layers (0 on inactive directions) around `n` interior cells, on a mesh of `ndim`
/// dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AdvectGeom {
    pub nblocks: usize,
    pub nvar: usize,
    pub dims: [usize; 3],
    pub ghosts: [usize; 3],
    pub n: [usize; 3],
    pub ndim: usize,
}

impl AdvectGeom {
    /// Values of the field storage.
    pub fn field_len(&self) -> usize {
        self.nblocks * self.nvar * self.dims.iter().product::<usize>()
    }

    /// Values of the fluxes along `dir`: per array, the interior widened by one face along
    /// `dir`.
    pub fn flux_len(&self, dir: usize) -> usize {
        let mut f = self.n;
        f[dir] += 1;
        self.nblocks * self.nvar * f.iter().product::<usize>()
    }

    /// Checks that the arrays are what the kernels assume, so that no stencil reads outside
    /// them: 1 to 3 dimensions; along each active one at least the two ghost layers the
    /// limited reconstruction reads and `dims = n + 2 ghosts`; inactive ones of one point.
    pub fn check(&self) -> Result<(), CudaError> {
        let ok = (1..=3).contains(&self.ndim)
            && (0..3).all(|d| {
                let (n, g, dims) = (self.n[d], self.ghosts[d], self.dims[d]);
                if d < self.ndim {
                    n >= 1 && g >= 2 && dims == n + 2 * g
                } else {
                    n == 1 && g == 0 && dims == 1
                }
            });
        if ok {
            Ok(())
        } else {
            Err(CudaError::Invalid(format!("advection arrays {self:?}")))
        }
    }

    fn shape_args(&self) -> [Arg; 9] {
        let [d, g, n] = [self.dims, self.ghosts, self.n];
        [d[0], d[1], d[2], g[0], g[1], g[2], n[0], n[1], n[2]].map(|v| Arg::U64(v as u64))
    }
}

impl Device {
    /// Face fluxes `vel * state` along `dir` of every array of `u` into `flux`, the state
    /// reconstructed upwind with `limiter`.
    pub fn advect_flux(
        &self,
        g: &AdvectGeom,
        u: &Buffer<f64>,
        flux: &mut Buffer<f64>,
        dir: usize,
        vel: f64,
        limiter: SlopeLimiter,
    ) -> Result<(), CudaError> {
        g.check()?;
        if dir >= g.ndim {
            return Err(CudaError::Invalid(format!(
                "direction {dir} of a {}-D mesh",
                g.ndim
            )));
        }
        need("field storage", g.field_len(), u.len())?;
        need("fluxes", g.flux_len(dir), flux.len())?;
        let args = flux_args(
            [
                u.on_device(self)?.address(),
                flux.on_device_mut(self)?.address(),
            ],
            g,
            dir,
            vel,
            limiter,
        );
        let grid = grid_for(g.flux_len(dir), BLOCK);
        self.launch(KernelSet::Advect, "sh_adv_flux", grid, BLOCK, &args)
    }

    /// `u = u + dt L(u)`, or with `u0` `u = (u0 + u + dt L(u)) / 2`, on every interior cell,
    /// from the fluxes of each active direction (`fluxes[d]`) and three cell widths per block
    /// (`dx`).
    pub fn advect_update(
        &self,
        g: &AdvectGeom,
        u: &mut Buffer<f64>,
        u0: Option<&Buffer<f64>>,
        fluxes: &[Buffer<f64>],
        dx: &Buffer<f64>,
        dt: f64,
    ) -> Result<(), CudaError> {
        g.check()?;
        need("field storage", g.field_len(), u.len())?;
        need("flux directions", g.ndim, fluxes.len())?;
        need("cell widths", 3 * g.nblocks, dx.len())?;
        let mut f = [0u64; 3];
        for (d, fd) in fluxes.iter().enumerate() {
            need("fluxes", g.flux_len(d), fd.len())?;
            f[d] = fd.on_device(self)?.address();
        }
        let base = match u0 {
            Some(b) => {
                need("stage base", g.field_len(), b.len())?;
                b.on_device(self)?.address()
            }
            None => 0,
        };
        let dx = dx.on_device(self)?.address();
        let args = update_args([u.on_device_mut(self)?.address(), base, dx], f, g, dt);
        let cells = g.nblocks * g.nvar * g.n.iter().product::<usize>();
        let grid = grid_for(cells, BLOCK);
        self.launch(KernelSet::Advect, "sh_adv_update", grid, BLOCK, &args)
    }

    /// The refinement measure ([`MeasureKind`]) of every block for each criterion of `m`, over
    /// the interior cells (or the whole block) of its variable, into `out` as
    /// `[block][criterion]`. One launch, then one copy of those values to the host (a
    /// synchronisation).
    pub fn refine_measure(
        &self,
        g: &AdvectGeom,
        u: &Buffer<f64>,
        m: &mut MeasureArrays,
        tiny: f64,
        out: &mut [f64],
    ) -> Result<(), CudaError> {
        g.check()?;
        need("field storage", g.field_len(), u.len())?;
        if (g.nblocks, g.nvar) != (m.nblocks, m.nvar) {
            return Err(CudaError::Invalid(format!(
                "measure arrays of {} blocks and {} variables for {} and {}",
                m.nblocks, m.nvar, g.nblocks, g.nvar
            )));
        }
        let npairs = m.measure.len();
        need("refinement measures", npairs, out.len())?;
        if npairs == 0 {
            return Ok(());
        }
        let ptrs = [
            u.on_device(self)?.address(),
            m.vars.on_device(self)?.address(),
            m.measure.on_device_mut(self)?.address(),
        ];
        let args = measure_args(ptrs, m.vars.len(), g, tiny);
        let grid = npairs.min(1 << 16) as u32;
        self.launch(
            KernelSet::Advect,
            "sh_adv_refine_measure",
            grid,
            MEASURE_THREADS,
            &args,
        )?;
        m.measure.on_device(self)?.download(out)
    }
}

/// The device arrays of the refinement measure: the criteria (variable and kind), uploaded
/// once, and one measure per block and criterion, reused by every
/// [`Device::refine_measure`].
#[derive(Debug)]
pub struct MeasureArrays {
    nblocks: usize,
    nvar: usize,
    vars: Buffer<u64>,
    measure: Buffer<f64>,
}

impl MeasureArrays {
    /// The arrays on `dev` for the blocks of `g` and `criteria`, each a variable of `g` and
    /// what to measure on it.
    pub fn new(
        dev: &Arc<Device>,
        g: &AdvectGeom,
        criteria: &[(usize, MeasureKind)],
    ) -> Result<Self, CudaError> {
        Ok(Self {
            nblocks: g.nblocks,
            nvar: g.nvar,
            vars: Buffer::from_host_to(dev, &criteria_codes(g, criteria)?)?,
            measure: Buffer::zeroed_on(dev, g.nblocks * criteria.len())?,
        })
    }

    /// Measures per call: blocks times criteria.
    pub fn len(&self) -> usize {
        self.measure.len()
    }

    /// Whether there are no blocks or no criteria.
    pub fn is_empty(&self) -> bool {
        self.measure.is_empty()
    }
}

/// The arguments of `sh_adv_flux`: the field storage and flux addresses.
fn flux_args(
    [u, flux]: [u64; 2],
    g: &AdvectGeom,
    dir: usize,
    vel: f64,
    limiter: SlopeLimiter,
) -> Args {
    let mut args = smallvec![
        Arg::Ptr(u),
        Arg::Ptr(flux),
        Arg::U64((g.nblocks * g.nvar) as u64),
    ];
    args.extend(g.shape_args());
    args.extend([
        Arg::I32(dir as i32),
        Arg::F64(vel),
        Arg::I32(limiter as i32),
    ]);
    args
}

/// The arguments of `sh_adv_update`: the field storage, stage base (0 for none) and cell
/// width addresses, and the flux address of each direction (0 where inactive).
fn update_args([u, base, dx]: [u64; 3], f: [u64; 3], g: &AdvectGeom, dt: f64) -> Args {
    let mut args = smallvec![Arg::Ptr(u), Arg::Ptr(base)];
    args.extend(f.map(Arg::Ptr));
    args.extend([
        Arg::Ptr(dx),
        Arg::U64(g.nvar as u64),
        Arg::U64((g.nblocks * g.nvar) as u64),
    ]);
    args.extend(g.shape_args());
    args.extend([Arg::U64(g.ndim as u64), Arg::F64(dt)]);
    args
}

/// The kernel's code of each criterion: its variable in the low 32 bits, its kind above.
pub fn criteria_codes(
    g: &AdvectGeom,
    criteria: &[(usize, MeasureKind)],
) -> Result<Vec<u64>, CudaError> {
    criteria
        .iter()
        .map(|&(v, kind)| match v < g.nvar {
            true => Ok(v as u64 | (kind as u64) << 32),
            false => Err(CudaError::Invalid(format!(
                "refinement measure of variable {v} of {}",
                g.nvar
            ))),
        })
        .collect()
}

/// The arguments of `sh_adv_refine_measure`: the field storage, criteria and measure
/// addresses, for `ncrit` criteria.
fn measure_args(ptrs: [u64; 3], ncrit: usize, g: &AdvectGeom, tiny: f64) -> Args {
    let mut args = Args::from_slice(&ptrs.map(Arg::Ptr));
    args.extend([
        Arg::U64((g.nblocks * ncrit) as u64),
        Arg::U64(ncrit as u64),
        Arg::U64(g.nvar as u64),
    ]);
    args.extend(g.shape_args());
    args.extend([Arg::U64(g.ndim as u64), Arg::F64(tiny)]);
    args
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::kernels::{define, signatures, ADVECT_SRC};

    /// What the host passes equals what each advection kernel declares.
    #[test]
    fn host_arguments_match_the_advection_kernels() {
        let sigs = signatures(ADVECT_SRC).unwrap();
        let declared = |name: &str| sigs.iter().find(|(n, _)| n == name).unwrap().1.clone();
        let kinds = |a: Args| a.iter().map(Arg::kind).collect::<Vec<_>>();
        let g = two_blocks_2d();
        let a = flux_args([1, 2], &g, 1, 0.5, SlopeLimiter::Mc);
        assert_eq!(kinds(a), declared("sh_adv_flux"));
        let a = update_args([1, 0, 2], [3, 4, 0], &g, 0.1);
        assert_eq!(kinds(a), declared("sh_adv_update"));
        let a = measure_args([1, 2, 3], 2, &g, 1e-20);
        assert_eq!(kinds(a), declared("sh_adv_refine_measure"));
    }

    #[test]
    fn the_measure_launches_the_reduction_size_of_the_source() {
        assert_eq!(
            define(ADVECT_SRC, "SH_MEASURE_THREADS"),
            Some(u64::from(MEASURE_THREADS))
        );
    }

    /// Two 2-D blocks of 8x8 cells and two ghost layers, one variable.
    fn two_blocks_2d() -> AdvectGeom {
        AdvectGeom {
            nblocks: 2,
            nvar: 1,
            dims: [12, 12, 1],
            ghosts: [2, 2, 0],
            n: [8, 8, 1],
            ndim: 2,
        }
    }

    #[test]
    fn geometry_check_refuses_arrays_a_stencil_would_leave() {
        let ok = two_blocks_2d();
        assert!(ok.check().is_ok());
        let one_ghost = AdvectGeom {
            dims: [10, 10, 1],
            ghosts: [1, 1, 0],
            ..ok
        };
        assert!(one_ghost.check().is_err());
        let short = AdvectGeom {
            dims: [11, 12, 1],
            ..ok
        };
        assert!(short.check().is_err());
        let ghost_on_inactive = AdvectGeom {
            ghosts: [2, 2, 2],
            ..ok
        };
        assert!(ghost_on_inactive.check().is_err());
        assert!(AdvectGeom { ndim: 0, ..ok }.check().is_err());
    }
}
