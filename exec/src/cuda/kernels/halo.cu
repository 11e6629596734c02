// starhalo: boundary kernels "in one": one launch walks every sub-halo (or coarse box) of a
// descriptor array. CUDA block b handles descriptors b, b + gridDim.x, ...; its threads walk
// the cells of the box with x1 fastest, the order of the host loops.
// Compiled at run time by NVRTC with --fmad=false so that every floating-point expression
// rounds as the host's does. Parameters are pointers, `u64`, `int` or `double` only.
//
// Field storage: for each block, for each variable, a row-major array of d0 x d1 x d2 points
// (x1 fastest); block b, variable v, point (i, j, k) is at ((b * nvar + v) * d2 + k) * d1 + j)
// * d0 + i.

// One sub-halo; the layout of starhalo_exec::cuda::HaloDesc and starhalo_boundary::BndInfo
// (asserted by tests on the host).
struct sh_bnd_info {
    u64 block;
    u64 var;
    u64 s[3];
    u64 e[3];
    u64 buf_offset;
    u32 flags;
    u32 pad;
};

#define SH_FLAG_COARSE 1u
#define SH_FLAG_ALLOCATED 2u
// Physical fill: along direction d, bit SH_FLAG_MIRROR0 << d mirrors (reflecting face)
// instead of clamping (outflow face).
#define SH_FLAG_MIRROR0 4u

// Prolongation operators, in the order of starhalo_exec::cuda::ProlongOp.
#define SH_PROLONG_CONSTANT 0
#define SH_PROLONG_LINEAR 1
#define SH_PROLONG_MINMOD 2

__device__ __forceinline__ u64 sh_extent(const sh_bnd_info &b, int d) {
    return b.e[d] + 1 > b.s[d] ? b.e[d] + 1 - b.s[d] : 0;
}

__device__ __forceinline__ u64 sh_at(u64 block, u64 var, u64 nvar, u64 d0, u64 d1, u64 d2, u64 i, u64 j, u64 k) {
    return (((block * nvar + var) * d2 + k) * d1 + j) * d0 + i;
}

// Point c of box b (x1 fastest, n0 x n1 points across its first two directions).
__device__ __forceinline__ void sh_point(const sh_bnd_info &b, u64 c, u64 n0, u64 n1, u64 p[3]) {
    u64 i, j;
    u64 r = sh_divmod(c, n0, &i);
    u64 k = sh_divmod(r, n1, &j);
    p[0] = b.s[0] + i;
    p[1] = b.s[1] + j;
    p[2] = b.s[2] + k;
}

// The array a sub-halo lives in: the coarse buffers (dims c) when it has SH_FLAG_COARSE, else
// the block data (dims d). Both hold nvar variables per block.
struct sh_arr {
    u64 n0, n1, n2;
    bool coarse;
};

__device__ __forceinline__ sh_arr sh_arr_of(const sh_bnd_info &b, u64 d0, u64 d1, u64 d2, u64 c0, u64 c1, u64 c2) {
    bool co = (b.flags & SH_FLAG_COARSE) != 0;
    sh_arr a = {co ? c0 : d0, co ? c1 : d1, co ? c2 : d2, co};
    return a;
}

// Packs every sub-halo into buf at its buf_offset, from data or (coarse sub-halos) coarse;
// over[h] = 1 when some |value| of sub-halo h exceeds its variable slot's threshold[var] (a
// null `over` skips the flags and leaves `threshold` unread).
extern "C" __global__ void sh_halo_pack(const sh_bnd_info *info, u64 nhalo, const double *data, const double *coarse, double *buf, u64 d0, u64 d1, u64 d2, u64 c0, u64 c1, u64 c2, u64 nvar, const double *threshold, u32 *over) {
    for (u64 h = blockIdx.x; h < nhalo; h += gridDim.x) {
        const sh_bnd_info b = info[h];
        const sh_arr a = sh_arr_of(b, d0, d1, d2, c0, c1, c2);
        const double *src = a.coarse ? coarse : data;
        u64 n0 = sh_extent(b, 0), n1 = sh_extent(b, 1), n2 = sh_extent(b, 2);
        u64 n = n0 * n1 * n2;
        int hit = 0;
        const double t = over != 0 ? threshold[b.var] : 0.0;
        for (u64 c = threadIdx.x; c < n; c += blockDim.x) {
            u64 p[3];
            sh_point(b, c, n0, n1, p);
            double v = src[sh_at(b.block, b.var, nvar, a.n0, a.n1, a.n2, p[0], p[1], p[2])];
            buf[b.buf_offset + c] = v;
            hit |= fabs(v) > t;
        }
        int any = __syncthreads_or(hit);
        if (over != 0 && threadIdx.x == 0) over[h] = any ? 1u : 0u;
    }
}

// Unpacks every sub-halo from buf into data or (coarse sub-halos) coarse; a sub-halo without
// SH_FLAG_ALLOCATED gets `fill`.
extern "C" __global__ void sh_halo_unpack(const sh_bnd_info *info, u64 nhalo, const double *buf, double *data, double *coarse, u64 d0, u64 d1, u64 d2, u64 c0, u64 c1, u64 c2, u64 nvar, double fill) {
    for (u64 h = blockIdx.x; h < nhalo; h += gridDim.x) {
        const sh_bnd_info b = info[h];
        const sh_arr a = sh_arr_of(b, d0, d1, d2, c0, c1, c2);
        double *dst = a.coarse ? coarse : data;
        u64 n0 = sh_extent(b, 0), n1 = sh_extent(b, 1), n2 = sh_extent(b, 2);
        u64 n = n0 * n1 * n2;
        bool on = (b.flags & SH_FLAG_ALLOCATED) != 0;
        for (u64 c = threadIdx.x; c < n; c += blockDim.x) {
            u64 p[3];
            sh_point(b, c, n0, n1, p);
            dst[sh_at(b.block, b.var, nvar, a.n0, a.n1, a.n2, p[0], p[1], p[2])] = on ? buf[b.buf_offset + c] : fill;
        }
    }
}

// First fine index under coarse index c along direction d.
__device__ __forceinline__ u64 sh_child(u64 d, u64 c, u64 ndim, u64 g, u64 cg) {
    return d < ndim ? g + 2 * c - 2 * cg : 0;
}

// Restriction: each coarse cell of each box becomes the mean of its 2^ndim children, summed
// in the host's order (x1 fastest) from -0.0 and scaled by 1 / 2^ndim.
extern "C" __global__ void sh_restrict(const sh_bnd_info *info, u64 nhalo, const double *fine, double *coarse, u64 f0, u64 f1, u64 f2, u64 c0, u64 c1, u64 c2, u64 nvar, u64 ndim, u64 g, u64 cg) {
    double w = 1.0 / (double)(1ull << ndim);
    u64 m0 = ndim > 0 ? 2 : 1, m1 = ndim > 1 ? 2 : 1, m2 = ndim > 2 ? 2 : 1;
    for (u64 h = blockIdx.x; h < nhalo; h += gridDim.x) {
        const sh_bnd_info b = info[h];
        u64 n0 = sh_extent(b, 0), n1 = sh_extent(b, 1), n2 = sh_extent(b, 2);
        u64 n = n0 * n1 * n2;
        for (u64 c = threadIdx.x; c < n; c += blockDim.x) {
            u64 p[3];
            sh_point(b, c, n0, n1, p);
            u64 i = p[0], j = p[1], k = p[2];
            u64 fi = sh_child(0, i, ndim, g, cg), fj = sh_child(1, j, ndim, g, cg), fk = sh_child(2, k, ndim, g, cg);
            double sum = -0.0;
            for (u64 qk = 0; qk < m2; ++qk)
                for (u64 qj = 0; qj < m1; ++qj)
                    for (u64 qi = 0; qi < m0; ++qi)
                        sum += fine[sh_at(b.block, b.var, nvar, f0, f1, f2, fi + qi, fj + qj, fk + qk)];
            coarse[sh_at(b.block, b.var, nvar, c0, c1, c2, i, j, k)] = sum * w;
        }
    }
}

__device__ __forceinline__ double sh_minmod(double a, double b) {
    if (a * b <= 0.0) return 0.0;
    return fabs(a) < fabs(b) ? a : b;
}

// Prolongation: each coarse cell of each box is reconstructed as u + sum_d s_d x_d and every
// child takes the value at its centre (x_d = +-1/4), with the host's expression order.
extern "C" __global__ void sh_prolongate(const sh_bnd_info *info, u64 nhalo, const double *coarse, double *fine, u64 f0, u64 f1, u64 f2, u64 c0, u64 c1, u64 c2, u64 nvar, u64 ndim, u64 g, u64 cg, int op) {
    u64 m0 = ndim > 0 ? 2 : 1, m1 = ndim > 1 ? 2 : 1, m2 = ndim > 2 ? 2 : 1;
    for (u64 h = blockIdx.x; h < nhalo; h += gridDim.x) {
        const sh_bnd_info b = info[h];
        u64 n0 = sh_extent(b, 0), n1 = sh_extent(b, 1), n2 = sh_extent(b, 2);
        u64 n = n0 * n1 * n2;
        for (u64 c = threadIdx.x; c < n; c += blockDim.x) {
            u64 p[3];
            sh_point(b, c, n0, n1, p);
            double u = coarse[sh_at(b.block, b.var, nvar, c0, c1, c2, p[0], p[1], p[2])];
            double slope[3] = {0.0, 0.0, 0.0};
            if (op != SH_PROLONG_CONSTANT) {
                for (u64 d = 0; d < ndim && d < 3; ++d) {
                    u64 lo[3] = {p[0], p[1], p[2]}, hi[3] = {p[0], p[1], p[2]};
                    lo[d] -= 1;
                    hi[d] += 1;
                    double dl = u - coarse[sh_at(b.block, b.var, nvar, c0, c1, c2, lo[0], lo[1], lo[2])];
                    double dr = coarse[sh_at(b.block, b.var, nvar, c0, c1, c2, hi[0], hi[1], hi[2])] - u;
                    slope[d] = op == SH_PROLONG_LINEAR ? 0.5 * (dl + dr) : sh_minmod(dl, dr);
                }
            }
            u64 f[3] = {sh_child(0, p[0], ndim, g, cg), sh_child(1, p[1], ndim, g, cg), sh_child(2, p[2], ndim, g, cg)};
            for (u64 qk = 0; qk < m2; ++qk)
                for (u64 qj = 0; qj < m1; ++qj)
                    for (u64 qi = 0; qi < m0; ++qi) {
                        u64 q[3] = {qi, qj, qk};
                        double v = -0.0;
                        for (u64 d = 0; d < 3; ++d) {
                            double off = d < ndim ? 2.0 * (double)q[d] - 1.0 : 0.0;
                            v += 0.25 * off * slope[d];
                        }
                        fine[sh_at(b.block, b.var, nvar, f0, f1, f2, f[0] + qi, f[1] + qj, f[2] + qk)] = u + v;
                    }
        }
    }
}

// Physical boundary fill: every cell of each box copies the cell found by mapping its index
// along each direction d in which the whole box lies outside [lo_d, hi_d] (the interior):
// clamped onto the nearest interior index (outflow), or mirrored across the face when the
// box has bit SH_FLAG_MIRROR0 << d (reflecting); other directions keep the cell's own index.
extern "C" __global__ void sh_physical(const sh_bnd_info *info, u64 nhalo, double *data, u64 d0, u64 d1, u64 d2, u64 nvar, u64 lo0, u64 lo1, u64 lo2, u64 hi0, u64 hi1, u64 hi2) {
    for (u64 h = blockIdx.x; h < nhalo; h += gridDim.x) {
        const sh_bnd_info b = info[h];
        u64 n0 = sh_extent(b, 0), n1 = sh_extent(b, 1), n2 = sh_extent(b, 2);
        u64 n = n0 * n1 * n2;
        u64 lo[3] = {lo0, lo1, lo2}, hi[3] = {hi0, hi1, hi2};
        int below[3], above[3], mirror[3];
        for (int d = 0; d < 3; ++d) {
            below[d] = b.e[d] < lo[d];
            above[d] = b.s[d] > hi[d];
            mirror[d] = (b.flags & (SH_FLAG_MIRROR0 << d)) != 0;
        }
        for (u64 c = threadIdx.x; c < n; c += blockDim.x) {
            u64 p[3];
            sh_point(b, c, n0, n1, p);
            u64 q[3];
            for (int d = 0; d < 3; ++d) {
                if (below[d]) q[d] = mirror[d] ? 2 * lo[d] - 1 - p[d] : lo[d];
                else if (above[d]) q[d] = mirror[d] ? 2 * hi[d] + 1 - p[d] : hi[d];
                else q[d] = p[d];
            }
            data[sh_at(b.block, b.var, nvar, d0, d1, d2, p[0], p[1], p[2])] = data[sh_at(b.block, b.var, nvar, d0, d1, d2, q[0], q[1], q[2])];
        }
    }
}

// Flux correction. Face fluxes: per normal direction d an array like the field storage, of
// nslot slots per block, each n0 x n1 x n2 interior cells widened by one face along d (face i
// along d is the lower face of cell i). A flux face descriptor has bit SH_FLAG_NORMAL0 << d for
// its normal d, s[d] = e[d] its face layer, and along the other directions a box of coarse
// faces.
#define SH_FLAG_NORMAL0 32u

__device__ __forceinline__ int sh_normal(const sh_bnd_info &b) {
    return (b.flags & (SH_FLAG_NORMAL0 << 2)) ? 2 : (b.flags & (SH_FLAG_NORMAL0 << 1)) ? 1 : 0;
}

// Restricts the fine fluxes under every coarse face of each descriptor into buf at its
// buf_offset: the mean of the 2^(ndim-1) fine faces 2q + k (bit t of k along the t-th free
// direction), summed with the first free direction fastest and scaled, as the host does.
extern "C" __global__ void sh_flux_restrict(const sh_bnd_info *info, u64 nface, const double *x0, const double *x1, const double *x2, double *buf, u64 n0, u64 n1, u64 n2, u64 nslot, u64 ndim) {
    for (u64 h = blockIdx.x; h < nface; h += gridDim.x) {
        const sh_bnd_info b = info[h];
        int d = sh_normal(b);
        const double *src = d == 0 ? x0 : d == 1 ? x1 : x2;
        u64 m[3] = {n0, n1, n2};
        m[d] += 1;
        int free_dir[2] = {0, 0}, nfree = 0;
        for (int e = 0; e < (int)ndim && e < 3; ++e)
            if (e != d) free_dir[nfree++] = e;
        u64 kids = 1ull << nfree;
        double w = 1.0 / (double)kids;
        u64 e0 = sh_extent(b, 0), e1 = sh_extent(b, 1), e2 = sh_extent(b, 2);
        u64 n = e0 * e1 * e2;
        for (u64 c = threadIdx.x; c < n; c += blockDim.x) {
            u64 q[3];
            sh_point(b, c, e0, e1, q);
            double sum = 0.0;
            for (u64 k = 0; k < kids; ++k) {
                u64 p[3] = {q[0], q[1], q[2]};
                for (int t = 0; t < nfree; ++t) p[free_dir[t]] = 2 * q[free_dir[t]] + ((k >> t) & 1);
                double v = src[sh_at(b.block, b.var, nslot, m[0], m[1], m[2], p[0], p[1], p[2])];
                sum = k == 0 ? v : sum + v;
            }
            buf[b.buf_offset + c] = sum * w;
        }
    }
}

// Replaces the coarse fluxes of every descriptor with SH_FLAG_ALLOCATED by the values in buf at
// its buf_offset; the others are left as they are.
extern "C" __global__ void sh_flux_set(const sh_bnd_info *info, u64 nface, const double *buf, double *x0, double *x1, double *x2, u64 n0, u64 n1, u64 n2, u64 nslot) {
    for (u64 h = blockIdx.x; h < nface; h += gridDim.x) {
        const sh_bnd_info b = info[h];
        if ((b.flags & SH_FLAG_ALLOCATED) == 0) continue;
        int d = sh_normal(b);
        double *dst = d == 0 ? x0 : d == 1 ? x1 : x2;
        u64 m[3] = {n0, n1, n2};
        m[d] += 1;
        u64 e0 = sh_extent(b, 0), e1 = sh_extent(b, 1), e2 = sh_extent(b, 2);
        u64 n = e0 * e1 * e2;
        for (u64 c = threadIdx.x; c < n; c += blockDim.x) {
            u64 p[3];
            sh_point(b, c, e0, e1, p);
            dst[sh_at(b.block, b.var, nslot, m[0], m[1], m[2], p[0], p[1], p[2])] = buf[b.buf_offset + c];
        }
    }
}
