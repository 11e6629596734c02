// Runs the kernels on the host (see host_emulate.h), serially but for one case of many
// threads, on small cases with known answers; exits non-zero naming the first wrong result. Built after the prelude and the
// kernel sources by starhalo_exec::cuda::emulate.
#include <stdio.h>
#include <stdlib.h>

static int failures = 0;
static void expect(const char *what, double got, double want) {
    if (got != want) {
        printf("FAIL %s: got %.17g, want %.17g\n", what, got, want);
        ++failures;
    }
}

int main() {
    gridDim.x = 1; blockDim.x = 1; blockIdx.x = 0; threadIdx.x = 0;
    // Index splitting: the 32-bit path and, past 2^32, the 64-bit one agree with plain / and %.
    const u64 cases[][2] = {{0, 7}, {13, 1}, {4294967295ull, 65536}, {4294967296ull, 3},
                            {(1ull << 40) + 12345, 4294967295ull}, {99, 4294967296ull}};
    for (const auto &c : cases) {
        u64 r = 0, q = sh_divmod(c[0], c[1], &r);
        expect("divmod quotient", (double)q, (double)(c[0] / c[1]));
        expect("divmod remainder", (double)r, (double)(c[0] % c[1]));
    }
    // 1-D block: 4 interior cells, 2 ghosts (8 points); coarse buffer 2 cells, 2 ghosts (6).
    // A linear field: restriction gives the coarse values, (limited) linear prolongation the
    // fine ones; constant prolongation copies the coarse value.
    double fine[8], coarse[6];
    for (int i = 0; i < 8; ++i) fine[i] = 1.5 + 0.25 * (i - 2 + 0.5);
    for (int i = 0; i < 6; ++i) coarse[i] = 1.5 + 0.25 * 2.0 * (i - 2 + 0.5);
    sh_bnd_info b = {0, 0, {2, 0, 0}, {3, 0, 0}, 0, 0, 0};
    double c2[6] = {0};
    sh_restrict(&b, 1, fine, c2, 8, 1, 1, 6, 1, 1, 1, 1, 2, 2);
    expect("restrict 2", c2[2], coarse[2]);
    expect("restrict 3", c2[3], coarse[3]);
    for (int op = 0; op < 3; ++op) {
        double f2[8] = {0};
        sh_prolongate(&b, 1, coarse, f2, 8, 1, 1, 6, 1, 1, 1, 1, 2, 2, op);
        for (int i = 2; i < 6; ++i) expect("prolongate", f2[i], op == 0 ? coarse[i / 2 + 1] : fine[i]);
    }
    // Pack a 2x2 box of a 4x4 array at offset 3; |values| 5, 6, 9, 10 exceed 9.5 once.
    double data[32];
    for (int i = 0; i < 32; ++i) data[i] = i;
    sh_bnd_info p[2] = {{0, 0, {1, 1, 0}, {2, 2, 0}, 3, 2, 0}, {1, 0, {0, 0, 0}, {0, 1, 0}, 0, 0, 0}};
    double buf[8] = {0};
    unsigned over[2] = {7, 7};
    double threshold[1] = {9.5};
    sh_halo_pack(p, 2, data, data, buf, 4, 4, 1, 4, 4, 1, 1, threshold, over);
    double want_buf[8] = {16, 20, 0, 5, 6, 9, 10, 0};
    for (int i = 0; i < 8; ++i) expect("pack", buf[i], want_buf[i]);
    expect("pack flag 0", over[0], 1);
    expect("pack flag 1", over[1], 1);
    // Unpack: the allocated box gets the buffer, the other the fill value.
    double out[32] = {0};
    sh_halo_unpack(p, 2, buf, out, out, 4, 4, 1, 4, 4, 1, 1, -1.0);
    expect("unpack 5", out[5], 5);
    expect("unpack 10", out[10], 10);
    expect("unpack fill 16", out[16], -1);
    expect("unpack fill 20", out[20], -1);
    // A coarse sub-halo reads and writes the coarse buffers (3x2 points per block here),
    // a fine one the block data, in one launch.
    double cdata[12];
    for (int i = 0; i < 12; ++i) cdata[i] = 100 + i;
    sh_bnd_info q[2] = {{1, 0, {1, 0, 0}, {2, 1, 0}, 0, 1 | 2, 0}, {0, 0, {3, 3, 0}, {3, 3, 0}, 4, 2, 0}};
    double qbuf[5] = {0};
    sh_halo_pack(q, 2, data, cdata, qbuf, 4, 4, 1, 3, 2, 1, 1, 0, 0);
    double want_q[5] = {107, 108, 110, 111, 15};
    for (int i = 0; i < 5; ++i) expect("pack coarse and fine", qbuf[i], want_q[i]);
    double cout_[12] = {0}, fout[32] = {0};
    sh_halo_unpack(q, 2, qbuf, fout, cout_, 4, 4, 1, 3, 2, 1, 1, -1.0);
    expect("unpack coarse 7", cout_[7], 107);
    expect("unpack coarse 11", cout_[11], 111);
    expect("unpack fine 15", fout[15], 15);
    expect("unpack coarse leaves fine", fout[7], 0);
    // Star-forest kernels.
    double src[10];
    for (int i = 0; i < 10; ++i) src[i] = i;
    double g[4];
    sh_gather_box_f64(src, g, 0, 4, 1, 1, 2, 2, 5, 10);
    double want_g[4] = {1, 2, 6, 7};
    for (int i = 0; i < 4; ++i) expect("gather box", g[i], want_g[i]);
    u64 idx[3] = {2, 2, 0};
    double gl[6];
    sh_gather_list_f64(src, gl, 0, 3, 2, idx);
    double want_gl[6] = {4, 5, 4, 5, 0, 1};
    for (int i = 0; i < 6; ++i) expect("gather list lanes", gl[i], want_gl[i]);
    double v[3] = {1, 2, 3}, dst[3] = {10, 10, 10};
    sh_scatter_list_atomic_f64(v, 0, dst, 3, 1, SH_OP_SUM, idx);
    expect("atomic sum 0", dst[0], 13);
    expect("atomic sum 2", dst[2], 13);
    int di[3] = {5, 5, 5}, vi[3] = {1, 9, -3};
    sh_scatter_list_atomic_i32(vi, 0, di, 3, 1, SH_OP_MIN, idx);
    expect("atomic min", di[0] * 100 + di[2], -300 + 1);
    sh_scatter_list_atomic_i32(vi, 0, di, 3, 1, SH_OP_PROD, idx);
    expect("atomic prod (cas)", di[0] * 100 + di[2], 900 + 9);
    sh_scatter_list_atomic_i32(vi, 0, di, 3, 1, SH_OP_LAND, idx);
    expect("atomic land (cas)", di[0] * 100 + di[2], 101);
    // 64-bit integers go through the bit-typed add and the signed min.
    i64 dl[3] = {5, 5, 5}, vl[3] = {-(1ll << 40), 9, -3};
    sh_scatter_list_atomic_i64(vl, 0, dl, 3, 1, SH_OP_MIN, idx);
    expect("atomic i64 min", (double)(dl[0] == -3 && dl[2] == -(1ll << 40)), 1);
    sh_scatter_list_atomic_i64(vl, 0, dl, 3, 1, SH_OP_SUM, idx);
    expect("atomic i64 sum", (double)(dl[0] == -6 && dl[2] == 9 - (1ll << 41)), 1);
    u64 du[3] = {6, 6, 6}, vu[3] = {3, 5, 1};
    sh_scatter_list_atomic_u64(vu, 0, du, 3, 1, SH_OP_BXOR, idx);
    expect("atomic u64 xor", (double)(du[0] * 100 + du[2]), 700 + 0);
    // Single-precision sums keep subnormal values, as the host's do (the GPU's float
    // atomicAdd, emulated in the prelude, would flush them to zero).
    float sv[3] = {1e-40f, 3e-40f, 2e-40f}, sd[3] = {1e-40f, 0, 5e-41f};
    sh_scatter_list_atomic_f32(sv, 0, sd, 3, 1, SH_OP_SUM, idx);
    expect("atomic f32 sum of subnormals 0", sd[0], 1e-40f + 2e-40f);
    expect("atomic f32 sum of subnormals 2", sd[2], (5e-41f + 1e-40f) + 3e-40f);
    float fv[2] = {-2.0f, 4.0f}, fd[4] = {1, 1, 1, 1};
    sh_scatter_box_f32(fv, 0, fd, 2, 1, SH_OP_MAX, 1, 1, 2, 2, 4);
    expect("scatter box max", fd[1] * 10 + fd[3], 14);
    u64 ud[2] = {0, 0};
    sh_fill_b64(ud, 2, 0xfffffffffffffffeull);
    expect("fill b64", (double)(ud[1] == 0xfffffffffffffffeull), 1);
    // Outflow: interior 1..=2 of 4 points; both ghost cells take their neighbour.
    double o[4] = {0, 1, 2, 0};
    sh_bnd_info ob[2] = {{0, 0, {0, 0, 0}, {0, 0, 0}, 0, 0, 0}, {0, 0, {3, 0, 0}, {3, 0, 0}, 0, 0, 0}};
    sh_physical(ob, 2, o, 4, 1, 1, 1, 1, 0, 0, 2, 0, 0);
    expect("outflow lo", o[0], 1);
    expect("outflow hi", o[3], 2);
    // Reflecting: interior 2..=3 of 6 points; ghosts 0, 1 mirror 3, 2 and ghosts 4, 5 mirror
    // 3, 2 (flag SH_FLAG_MIRROR0 along x1).
    double m[6] = {0, 0, 10, 20, 0, 0};
    sh_bnd_info mb[2] = {{0, 0, {0, 0, 0}, {1, 0, 0}, 0, SH_FLAG_MIRROR0, 0}, {0, 0, {4, 0, 0}, {5, 0, 0}, 0, SH_FLAG_MIRROR0, 0}};
    sh_physical(mb, 2, m, 6, 1, 1, 1, 2, 0, 0, 3, 0, 0);
    expect("reflect lo", m[0] * 10 + m[1], 210);
    expect("reflect hi", m[4] * 10 + m[5], 210);
    // Advection, 1-D: 4 interior cells, 2 ghosts, two variables; u = i on variable 0 and -i on
    // variable 1 (every slope 1 or -1 under each limiter). Upwind for vel > 0: the state at
    // face i is u[i + 1] + slope / 2 (cell i - 1 of the interior is point i + 1).
    double u[16], fl[10];
    for (int i = 0; i < 8; ++i) { u[i] = i; u[8 + i] = -i; }
    for (int lim = 0; lim < 3; ++lim) {
        sh_adv_flux(u, fl, 2, 8, 1, 1, 2, 0, 0, 4, 1, 1, 0, 2.0, lim);
        for (int f = 0; f < 5; ++f) {
            expect("adv flux +", fl[f], 2.0 * (f + 1 + 0.5));
            expect("adv flux -", fl[5 + f], 2.0 * (-(f + 1) - 0.5));
        }
    }
    // Against the flow: the state at face i is u[i + 2] - slope / 2.
    sh_adv_flux(u, fl, 1, 8, 1, 1, 2, 0, 0, 4, 1, 1, 0, -0.5, SH_LIMIT_MC);
    for (int f = 0; f < 5; ++f) expect("adv flux upwind -", fl[f], -0.5 * (f + 2 - 0.5));
    // A jump: minmod and mc give 0 slope at the extremum, none does not.
    double s[8] = {0, 0, 0, 1, 0, 0, 0, 0};
    sh_adv_flux(s, fl, 1, 8, 1, 1, 2, 0, 0, 4, 1, 1, 0, 1.0, SH_LIMIT_MINMOD);
    expect("adv flux minmod extremum", fl[2], 1.0);
    sh_adv_flux(s, fl, 1, 8, 1, 1, 2, 0, 0, 4, 1, 1, 0, 1.0, SH_LIMIT_NONE);
    expect("adv flux unlimited", fl[2], 1.0);
    expect("adv flux unlimited next", fl[1], 0.25);
    // Update: flux differences of 2 (variable 0) and -2 (variable 1) over dx = 0.5, dt = 0.25:
    // du = -4 and 4, u += -1 and 1; with u0 = 0 the mean halves it.
    double fx[10];
    for (int f = 0; f < 5; ++f) { fx[f] = 2.0 * f; fx[5 + f] = -2.0 * f; }
    double dx[3] = {0.5, 1, 1};
    double w[16];
    for (int i = 0; i < 16; ++i) w[i] = u[i];
    sh_adv_update(w, 0, fx, 0, 0, dx, 2, 2, 8, 1, 1, 2, 0, 0, 4, 1, 1, 1, 0.25);
    for (int i = 2; i < 6; ++i) {
        expect("adv update 0", w[i], i - 1.0);
        expect("adv update 1", w[8 + i], -i + 1.0);
    }
    expect("adv update leaves ghosts", w[1] + w[6], 1 + 6);
    double z[16] = {0};
    sh_adv_update(w, z, fx, 0, 0, dx, 2, 2, 8, 1, 1, 2, 0, 0, 4, 1, 1, 1, 0.25);
    expect("adv update rk2", w[3], 0.5 * (3 - 1.0 - 1.0));
    // Duplicates under concurrency: 2 blocks of 64 threads scatter 4096 values onto 4 roots
    // through atomicAdd (int sum) and compare-and-swap (double sum and product, on the host);
    // every value lands, in whatever order, only if the atomics are atomic.
    static double many[4096], sums[4] = {0, 0, 0, 0}, prods[4] = {1, 1, 1, 1};
    static int imany[4096], isums[4] = {0, 0, 0, 0};
    static u64 roots[4096];
    for (int i = 0; i < 4096; ++i) {
        many[i] = i % 64 == 0 ? 2.0 : 1.0;
        imany[i] = i;
        roots[i] = (u64)(i % 4);
    }
    gridDim.x = 2; blockDim.x = 64;
    for (blockIdx.x = 0; blockIdx.x < gridDim.x; ++blockIdx.x) sh_run_block([&] {
        sh_scatter_list_atomic_f64(many, 0, sums, 4096, 1, SH_OP_SUM, roots);
        sh_scatter_list_atomic_f64(many, 0, prods, 4096, 1, SH_OP_PROD, roots);
        sh_scatter_list_atomic_i32(imany, 0, isums, 4096, 1, SH_OP_SUM, roots);
    });
    gridDim.x = 1; blockDim.x = 1; blockIdx.x = 0;
    for (int r = 0; r < 4; ++r) {
        expect("threaded atomic sum", sums[r], r == 0 ? 1024 + 64 : 1024);
        expect("threaded atomic prod (cas)", prods[r], r == 0 ? ldexp(1.0, 64) : 1.0);
        // Roots r take i = r, r + 4, ...: 1024 r + 4 (0 + 1 + ... + 1023).
        expect("threaded atomic int sum", isums[r], 1024.0 * r + 4.0 * 523776);
    }
    if (failures == 0) printf("all kernel emulations passed\n");
    return failures == 0 ? 0 : 1;
}
