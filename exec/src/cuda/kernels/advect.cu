// starhalo: finite-volume linear advection on every block of a field storage in one launch per
// step: face fluxes of a piecewise-linear reconstruction (upwind, slope-limited), then the
// conservative update. Threads stride over (block, variable, face or cell), x1 fastest.
// Compiled at run time by NVRTC with --fmad=false and written in the host's expression order
// (src/problems/advection.rs), so the results equal the host's bit for bit.
//
// Field storage as in halo.cu: block b, variable v, point (i, j, k) is at
// (((b * nvar + v) * d2 + k) * d1 + j) * d0 + i; g* are the ghost layers (0 on inactive
// directions), n* the interior cells. Fluxes along direction `dir`: per (block, variable), a
// row-major array of (n + e_dir) faces; face (i, j, k) lies between cells (i, j, k) - e_dir and
// (i, j, k) of the interior.


// Limiters, in the order of the host's `Limiter`.
#define SH_LIMIT_NONE 0
#define SH_LIMIT_MINMOD 1
#define SH_LIMIT_MC 2

__device__ __forceinline__ double sh_slope(int limiter, double a, double b) {
    if (limiter == SH_LIMIT_NONE) return 0.5 * (a + b);
    if (a * b <= 0.0) return 0.0;
    if (limiter == SH_LIMIT_MINMOD) return fabs(a) < fabs(b) ? a : b;
    double m = fmin(fmin(2.0 * fabs(a), 2.0 * fabs(b)), 0.5 * fabs(a + b));
    return copysign(m, a);
}

__device__ __forceinline__ u64 sh_thread() { return (u64)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ u64 sh_threads() { return (u64)gridDim.x * blockDim.x; }

// flux[(b * nvar + v) * nfaces + face] = vel * (upwind reconstructed state) along `dir`.
extern "C" __global__ void sh_adv_flux(const double *u, double *flux, u64 nbv, u64 d0, u64 d1, u64 d2, u64 g0, u64 g1, u64 g2, u64 n0, u64 n1, u64 n2, int dir, double vel, int limiter) {
    u64 f0 = n0 + (dir == 0), f1 = n1 + (dir == 1), f2 = n2 + (dir == 2);
    u64 nfaces = f0 * f1 * f2;
    u64 stride = dir == 0 ? 1 : dir == 1 ? d0 : d0 * d1;
    for (u64 t = sh_thread(); t < nbv * nfaces; t += sh_threads()) {
        u64 f, i, j;
        u64 bv = sh_divmod(t, nfaces, &f);
        u64 k = sh_divmod(sh_divmod(f, f0, &i), f1, &j);
        u64 c = ((bv * d2 + k + g2) * d1 + j + g1) * d0 + i + g0;
        double state;
        if (vel == 0.0) {
            flux[t] = 0.0;
            continue;
        } else if (vel > 0.0) {
            u64 l = c - stride;
            state = u[l] + 0.5 * sh_slope(limiter, u[l] - u[l - stride], u[l + stride] - u[l]);
        } else {
            state = u[c] - 0.5 * sh_slope(limiter, u[c] - u[c - stride], u[c + stride] - u[c]);
        }
        flux[t] = vel * state;
    }
}

// u = u + dt L(u) (null u0), or u = (u0 + u + dt L(u)) / 2, on every interior cell; dx holds
// three cell widths per block.
extern "C" __global__ void sh_adv_update(double *u, const double *u0, const double *fx, const double *fy, const double *fz, const double *dx, u64 nvar, u64 nbv, u64 d0, u64 d1, u64 d2, u64 g0, u64 g1, u64 g2, u64 n0, u64 n1, u64 n2, u64 ndim, double dt) {
    u64 ncells = n0 * n1 * n2;
    for (u64 t = sh_thread(); t < nbv * ncells; t += sh_threads()) {
        u64 p, i, j;
        u64 bv = sh_divmod(t, ncells, &p);
        u64 k = sh_divmod(sh_divmod(p, n0, &i), n1, &j);
        const double *fl[3] = {fx, fy, fz};
        u64 v, block = sh_divmod(bv, nvar, &v);
        double du = 0.0;
        for (u64 d = 0; d < ndim; ++d) {
            u64 e0 = n0 + (d == 0), e1 = n1 + (d == 1), e2 = n2 + (d == 2);
            const double *f = fl[d] + bv * (e0 * e1 * e2);
            u64 lo = (k * e1 + j) * e0 + i;
            u64 hi = lo + (d == 0 ? 1 : d == 1 ? e0 : e0 * e1);
            du -= (f[hi] - f[lo]) / dx[block * 3 + d];
        }
        u64 c = ((bv * d2 + k + g2) * d1 + j + g1) * d0 + i + g0;
        double q = u[c] + dt * du;
        u[c] = u0 == 0 ? q : 0.5 * (u0[c] + q);
    }
}

// Threads per block of sh_adv_refine_measure: a power of two, the size of its reduction.
#define SH_MEASURE_THREADS 256

// The refinement measure of each (block, criterion) pair, Parthenon's criteria over the
// interior cells c of the criterion's variable (the low 32 bits of crit[criterion]) by the
// method in its high bits: 0, the largest |u(c + e_d) - u(c - e_d)| / (2 |u(c)| + tiny) over
// the active directions d (derivative_order_1); 1, the largest |a - u(c)| / (|a| + |u(c)| +
// tiny) with a = (u(c + e_d) + u(c - e_d)) / 2 (derivative_order_2); 2, the largest u(c); 3,
// the largest -u(c) (magnitude); 4 and 5, the same over the whole block, ghosts included (the
// advection example's own test). Into measure[block * ncrit + criterion]. One thread block of
// SH_MEASURE_THREADS threads per pair. fmax is exact and, like the host's max, ignores NaN, so
// any order of the reduction gives the host's value (up to the sign of a zero, made +0).
extern "C" __global__ void sh_adv_refine_measure(const double *u, const u64 *crit, double *measure, u64 npairs, u64 ncrit, u64 nvar, u64 d0, u64 d1, u64 d2, u64 g0, u64 g1, u64 g2, u64 n0, u64 n1, u64 n2, u64 ndim, double tiny) {
    __shared__ double part[SH_MEASURE_THREADS];
    u64 ncells = n0 * n1 * n2, npts = d0 * d1 * d2;
    u64 stride[3] = {1, d0, d0 * d1};
    for (u64 pair = blockIdx.x; pair < npairs; pair += gridDim.x) {
        u64 c0 = crit[pair % ncrit], method = c0 >> 32;
        const double *a = u + ((pair / ncrit) * nvar + (c0 & 0xffffffffull)) * npts;
        double m = method >= 2 ? __longlong_as_double(0xfff0000000000000ll) : 0.0; // -infinity
        if (method >= 4) {
            for (u64 p = threadIdx.x; p < npts; p += blockDim.x) m = fmax(m, method == 4 ? a[p] : -a[p]);
        } else for (u64 p = threadIdx.x; p < ncells; p += blockDim.x) {
            u64 i, j;
            u64 k = sh_divmod(sh_divmod(p, n0, &i), n1, &j);
            u64 c = ((k + g2) * d1 + j + g1) * d0 + i + g0;
            if (method == 0) {
                double scale = 2.0 * fabs(a[c]) + tiny;
                for (u64 d = 0; d < ndim; ++d) m = fmax(m, fabs(a[c + stride[d]] - a[c - stride[d]]) / scale);
            } else if (method == 1) {
                double aqt = fabs(a[c]) + tiny;
                for (u64 d = 0; d < ndim; ++d) {
                    double avg = 0.5 * (a[c + stride[d]] + a[c - stride[d]]);
                    m = fmax(m, fabs(avg - a[c]) / (fabs(avg) + aqt));
                }
            } else {
                m = fmax(m, method == 2 ? a[c] : -a[c]);
            }
        }
        part[threadIdx.x] = m;
        __syncthreads();
        for (unsigned h = blockDim.x / 2; h > 0; h /= 2) {
            if (threadIdx.x < h) part[threadIdx.x] = fmax(part[threadIdx.x], part[threadIdx.x + h]);
            __syncthreads();
        }
        // + 0.0 makes a zero +0 whichever zero the reduction kept, as the host does.
        if (threadIdx.x == 0) measure[pair] = part[0] + 0.0;
        // part is written again for the next pair only once thread 0 has read it.
        __syncthreads();
    }
}
