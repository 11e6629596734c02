//! Launches of the finite-volume advection kernels ([`ADVECT_SRC`](super::kernels::ADVECT_SRC)):
//! the face fluxes along one direction and the conservative update, each one launch over every
//! (block, variable) array of a field storage.

use super::device::{grid_for, Device};
use super::error::CudaError;
use super::ffi::Arg;
use super::kernels::KernelSet;
use super::ops::need;
use crate::buffer::Buffer;

const BLOCK: u32 = 256;

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
        let nbv = (g.nblocks * g.nvar) as u64;
        let mut args = vec![
            Arg::Ptr(u.on_device(self)?.address()),
            Arg::Ptr(flux.on_device_mut(self)?.address()),
            Arg::U64(nbv),
        ];
        args.extend(g.shape_args());
        args.extend([
            Arg::I32(dir as i32),
            Arg::F64(vel),
            Arg::I32(limiter as i32),
        ]);
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
        let nbv = (g.nblocks * g.nvar) as u64;
        let mut args = vec![
            Arg::Ptr(u.on_device_mut(self)?.address()),
            Arg::Ptr(base),
            Arg::Ptr(f[0]),
            Arg::Ptr(f[1]),
            Arg::Ptr(f[2]),
            Arg::Ptr(dx.on_device(self)?.address()),
            Arg::U64(g.nvar as u64),
            Arg::U64(nbv),
        ];
        args.extend(g.shape_args());
        args.extend([Arg::U64(g.ndim as u64), Arg::F64(dt)]);
        let cells = g.nblocks * g.nvar * g.n.iter().product::<usize>();
        let grid = grid_for(cells, BLOCK);
        self.launch(KernelSet::Advect, "sh_adv_update", grid, BLOCK, &args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_check_refuses_arrays_a_stencil_would_leave() {
        let ok = AdvectGeom {
            nblocks: 2,
            nvar: 1,
            dims: [12, 12, 1],
            ghosts: [2, 2, 0],
            n: [8, 8, 1],
            ndim: 2,
        };
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
