//! Conjugate gradients (unpreconditioned) on a [`DistMatrix`]. Dot products are exact sums
//! reduced over the ranks ([`ExactSum`]), so every iterate, residual and iteration count is
//! the same bit for bit on any number of ranks, as `y = A x` is.

use super::dist::DistMatrix;
use crate::run::collective::max_f64;
use crate::run::stats::{CommTimer, Stop};
use crate::run::RunContext;
use anyhow::{bail, Result};
use starhalo_sf::ExactSum;

/// How the solve ended.
pub struct CgResult {
    /// Iterations done.
    pub iterations: u64,
    /// `||b - A x|| / ||b||` of the recursively updated residual.
    pub relative_residual: f64,
    /// Why it stopped.
    pub stop: Stop,
}

/// Sums `parts` over the ranks in one reduction, each correctly rounded.
fn allreduce_sum<const N: usize>(
    ctx: &RunContext,
    comm: &CommTimer,
    mut parts: [ExactSum; N],
) -> [f64; N] {
    comm.time(|| ExactSum::all_reduce(ctx.world, &mut parts));
    parts.map(|s| s.value())
}

/// Solves `A x = b` from `x = 0` until `||r|| <= tol ||b||`, `max_iters`, or the wall-time
/// limit (checked in the same reduction as `r.r`, so every rank stops together).
pub fn solve(
    ctx: &RunContext,
    a: &DistMatrix,
    b: &[f64],
    x: &mut [f64],
    tol: f64,
    max_iters: u64,
    comm: &CommTimer,
) -> Result<CgResult> {
    let n = b.len();
    let mut ghost = vec![0.0; a.nghosts()];
    x.fill(0.0);
    // CG solves `A x' = b 2^-e` for `x' = x 2^-e` with every value scaled alike, and a power
    // of two scales exactly: with the largest |b_i| in [1, 2), `b.b` and `p.Ap` stay clear of
    // underflow and overflow whatever the matrix's scale (entries of 1e-300 would otherwise
    // make `b.b` zero and the solve stop at once), and the result is the same bits unless
    // the scaling takes some value out of the normal range (b spanning over 1e300).
    let bmax = comm.time(|| max_f64(ctx.world, b.iter().fold(0.0, |m, v| m.max(v.abs()))));
    let e = if bmax > 0.0 && bmax.is_finite() {
        bmax.log2().floor() as i32
    } else {
        0
    };
    let mut r: Vec<f64> = b.iter().map(|&v| pow2(v, -e)).collect();
    let mut p = r.clone();
    let mut ap = vec![0.0; n];
    let [bb] = allreduce_sum(ctx, comm, [ExactSum::dot(&r, &r)]);
    let bnorm = bb.sqrt();
    let mut rr = bb;
    let mut iterations = 0;
    let mut stop = Stop::CycleLimit;
    let rel = |rr: f64| {
        if bnorm > 0.0 {
            rr.sqrt() / bnorm
        } else {
            rr.sqrt()
        }
    };
    if rel(rr) <= tol {
        stop = Stop::Converged;
    }
    while stop == Stop::CycleLimit && iterations < max_iters {
        a.matvec(&p, &mut ap, &mut ghost, comm)?;
        let [pap] = allreduce_sum(ctx, comm, [ExactSum::dot(&p, &ap)]);
        if !(pap > 0.0 && pap.is_finite()) {
            // Decided on a reduced value: every rank fails here together.
            bail!(
                "CG broke down at iteration {}: p.Ap = {pap:e} (the matrix is not symmetric positive definite)",
                iterations + 1
            );
        }
        let alpha = rr / pap;
        for i in 0..n {
            x[i] += alpha * p[i];
            r[i] -= alpha * ap[i];
        }
        let mut expired = ExactSum::default();
        expired.add(f64::from(u8::from(ctx.deadline.expired())));
        let [rr_new, any_expired] = allreduce_sum(ctx, comm, [ExactSum::dot(&r, &r), expired]);
        iterations += 1;
        ctx.progress(iterations, || {
            format!("relative_residual={:.6e}", rel(rr_new))
        });
        if rel(rr_new) <= tol {
            stop = Stop::Converged;
        } else if any_expired > 0.0 {
            stop = Stop::WallTime;
        }
        let beta = rr_new / rr;
        rr = rr_new;
        for i in 0..n {
            p[i] = r[i] + beta * p[i];
        }
    }
    x.iter_mut().for_each(|v| *v = pow2(*v, e));
    Ok(CgResult {
        iterations,
        relative_residual: rel(rr),
        stop,
    })
}

/// `v 2^k`, in two steps so that every factor is a normal number for any `|k| <= 2044`.
fn pow2(v: f64, k: i32) -> f64 {
    let half = k / 2;
    v * 2f64.powi(half) * 2f64.powi(k - half)
}

#[cfg(test)]
mod tests {
    use super::pow2;

    #[test]
    fn powers_of_two_scale_exactly_across_the_whole_range() {
        assert_eq!(pow2(3.0, 4), 48.0);
        assert_eq!(pow2(1e-300, 996) * 2f64.powi(-996), 1e-300);
        assert_eq!(pow2(pow2(1e-300, 996), -996), 1e-300);
        let tiny = f64::from_bits(1); // 2^-1074
        assert_eq!(pow2(tiny, 1074), 1.0);
        assert_eq!(pow2(1.0, -1074), tiny);
    }
}
