//! Flexible conjugate gradients on the finest level, preconditioned by one V-cycle per
//! iteration (`solver: cg`).

use super::solver::Solver;
use anyhow::Result;
use starhalo_boundary::GmgData;
use starhalo_sf::ExactSum;

/// Flexible conjugate gradients on the finest level's block arrays, preconditioned by one
/// V-cycle per iteration (Notay's FCG with one direction kept: the V-cycle is neither
/// symmetric nor, with its coarse CG, linear, so each new direction is made conjugate to the
/// last explicitly rather than through the usual recurrence).
pub(super) struct Fcg {
    /// The right-hand side, which `f[0]` holds outside the V-cycle.
    b: Vec<f64>,
    x: Vec<f64>,
    /// The preconditioned residual.
    z: Vec<f64>,
    p: Vec<f64>,
    /// `∇²p`.
    q: Vec<f64>,
    /// `p·q` (scaled), or `None` before the first direction.
    pq: Option<f64>,
}

impl Fcg {
    pub(super) fn new(s: &Solver) -> Result<Self> {
        let len = s.f[0].len();
        let mut x = vec![0.0; len];
        s.get_finest(&s.u, &mut x)?;
        Ok(Fcg {
            b: s.f[0].clone(),
            x,
            z: vec![0.0; len],
            p: vec![0.0; len],
            q: vec![0.0; len],
            pq: None,
        })
    }
}

impl Solver<'_> {
    /// Copies the finest level's block arrays of `data` into `v` (laid out as `f[0]`).
    fn get_finest(&self, data: &GmgData, v: &mut [f64]) -> Result<()> {
        let level = data.level(0)?;
        for (b, vb) in v.chunks_exact_mut(self.block_len(0)).enumerate() {
            vb.copy_from_slice(level.fine(b, 0));
        }
        Ok(())
    }

    /// Sets the finest level's block arrays of `u` from `v` (laid out as `f[0]`).
    fn set_finest_u(&mut self, v: &[f64]) -> Result<()> {
        let len = self.block_len(0);
        let level = self.u.level_mut(0)?;
        for (b, vb) in v.chunks_exact(len).enumerate() {
            level.fine_mut(b, 0).copy_from_slice(vb);
        }
        Ok(())
    }

    /// `Σ a_i (scale b_i)` over the interiors of the finest level's block arrays of this rank.
    fn dot(&self, a: &[f64], b: &[f64]) -> ExactSum {
        let (grid, len) = (&self.grids[0], self.block_len(0));
        let mut sum = ExactSum::default();
        for (ab, bb) in a.chunks_exact(len).zip(b.chunks_exact(len)) {
            sum.extend(grid.cells().map(|i| ab[i] * (self.scale * bb[i])));
        }
        sum
    }

    /// One iteration of [`Fcg`], from `u = x`, `f[0] = b` and their residual in `r` (as
    /// [`Solver::residual_norm`] leaves them) to the same after the step.
    pub(super) fn fcg_iteration(&mut self, k: &mut Fcg, pre: usize, post: usize) -> Result<()> {
        // z = M r: the V-cycle for ∇²z = r from z = 0; f[0] holds r until the step ends.
        let mut r = std::mem::take(&mut self.f[0]);
        self.get_finest(&self.r, &mut r)?;
        self.f[0] = r;
        let level = self.u.level_mut(0)?;
        for b in 0..level.gids().len() {
            level.fine_mut(b, 0).fill(0.0);
        }
        self.v_cycle(0, pre, post)?;
        self.get_finest(&self.u, &mut k.z)?;
        // p = z + β p with β = -(z·q)/(p·q), conjugate to the last direction.
        let beta = match k.pq {
            None => 0.0,
            Some(pq) => {
                let mut zq = [self.dot(&k.z, &k.q)];
                self.comm.time(|| ExactSum::all_reduce(self.world, &mut zq));
                -zq[0].value() / pq
            }
        };
        for (p, z) in k.p.iter_mut().zip(&k.z) {
            *p = z + beta * *p;
        }
        // q = ∇²p, with p's ghosts filled through u.
        self.set_finest_u(&k.p)?;
        self.fill_u(0)?;
        let (grid, len) = (&self.grids[0], self.block_len(0));
        let u = self.u.level(0)?;
        for (b, q) in k.q.chunks_exact_mut(len).enumerate() {
            let pb = u.fine(b, 0);
            for i in grid.cells() {
                q[i] = grid.laplacian(pb, i);
            }
        }
        let mut sums = [self.dot(&k.p, &k.q), self.dot(&k.p, &self.f[0])];
        self.comm
            .time(|| ExactSum::all_reduce(self.world, &mut sums));
        let pq = sums[0].value();
        let alpha = sums[1].value() / pq;
        k.pq = Some(pq);
        for (x, p) in k.x.iter_mut().zip(&k.p) {
            *x += alpha * p;
        }
        self.set_finest_u(&k.x)?;
        self.f[0].copy_from_slice(&k.b);
        Ok(())
    }
}
