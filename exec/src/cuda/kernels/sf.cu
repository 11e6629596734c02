// starhalo: star-forest gather (pack) and scatter (unpack with an operation) kernels.
// Compiled at run time by NVRTC; never with nvcc at build time.
//
// A unit is `lanes` consecutive scalars. The kernels walk `n * lanes` scalars with a
// grid-stride loop: thread t moves lane t % lanes of unit t / lanes.
// Index sets are either a 3-D box, unit p at start + sy * k + sx * j + i with
// p = (k * dy + j) * dx + i, or an explicit list of 64-bit unit indices.
// Entry points are `sh_<kind>_<type>` for kind in gather_box, gather_list, scatter_box,
// scatter_list, scatter_list_atomic and type in f32, f64, i32, u32, i64, u64. Parameters are
// pointers, `u64`, `int` or `double` only, spelled out so the host can check every launch.

// Operation codes, in the order of starhalo_exec::cuda::ReduceOp.
#define SH_OP_REPLACE 0
#define SH_OP_SUM 1
#define SH_OP_PROD 2
#define SH_OP_MIN 3
#define SH_OP_MAX 4
#define SH_OP_LAND 5
#define SH_OP_LOR 6
#define SH_OP_BAND 7
#define SH_OP_BOR 8
#define SH_OP_BXOR 9

__device__ __forceinline__ u64 sh_box_at(u64 p, u64 start, u64 dx, u64 dy, u64 sx, u64 sy) {
    u64 i, j;
    u64 row = sh_divmod(p, dx, &i);
    u64 k = sh_divmod(row, dy, &j);
    return start + k * sy + j * sx + i;
}

__device__ __forceinline__ u64 sh_first() { return (u64)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ u64 sh_stride() { return (u64)gridDim.x * blockDim.x; }

// dst = dst op src for integers: wrapping arithmetic through the unsigned type U.
template <typename T, typename U> struct sh_int_ops {
    static __device__ __forceinline__ T apply(int op, T d, T s) {
        switch (op) {
        case SH_OP_REPLACE: return s;
        case SH_OP_SUM: return (T)((U)d + (U)s);
        case SH_OP_PROD: return (T)((U)d * (U)s);
        case SH_OP_MIN: return s < d ? s : d;
        case SH_OP_MAX: return s > d ? s : d;
        case SH_OP_LAND: return (T)((d != 0 && s != 0) ? 1 : 0);
        case SH_OP_LOR: return (T)((d != 0 || s != 0) ? 1 : 0);
        case SH_OP_BAND: return d & s;
        case SH_OP_BOR: return d | s;
        case SH_OP_BXOR: return d ^ s;
        default: return d;
        }
    }
};

__device__ __forceinline__ float sh_fmin(float a, float b) { return fminf(a, b); }
__device__ __forceinline__ float sh_fmax(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ double sh_fmin(double a, double b) { return fmin(a, b); }
__device__ __forceinline__ double sh_fmax(double a, double b) { return fmax(a, b); }

// dst = dst op src for floating point (the host refuses the integer-only operations).
template <typename T> struct sh_float_ops {
    static __device__ __forceinline__ T apply(int op, T d, T s) {
        switch (op) {
        case SH_OP_REPLACE: return s;
        case SH_OP_SUM: return d + s;
        case SH_OP_PROD: return d * s;
        case SH_OP_MIN: return sh_fmin(d, s);
        case SH_OP_MAX: return sh_fmax(d, s);
        default: return d;
        }
    }
};

// The machine word of each type, for compare-and-swap loops.
template <typename T> struct sh_word;
template <> struct sh_word<float> {
    typedef u32 W;
    static __device__ __forceinline__ W to(float v) { return __float_as_uint(v); }
    static __device__ __forceinline__ float from(W w) { return __uint_as_float(w); }
};
template <> struct sh_word<double> {
    typedef u64 W;
    static __device__ __forceinline__ W to(double v) { return (u64)__double_as_longlong(v); }
    static __device__ __forceinline__ double from(W w) { return __longlong_as_double((i64)w); }
};
template <> struct sh_word<int> {
    typedef u32 W;
    static __device__ __forceinline__ W to(int v) { return (W)v; }
    static __device__ __forceinline__ int from(W w) { return (int)w; }
};
template <> struct sh_word<u32> {
    typedef u32 W;
    static __device__ __forceinline__ W to(u32 v) { return v; }
    static __device__ __forceinline__ u32 from(W w) { return w; }
};
template <> struct sh_word<i64> {
    typedef u64 W;
    static __device__ __forceinline__ W to(i64 v) { return (W)v; }
    static __device__ __forceinline__ i64 from(W w) { return (i64)w; }
};
template <> struct sh_word<u64> {
    typedef u64 W;
    static __device__ __forceinline__ W to(u64 v) { return v; }
    static __device__ __forceinline__ u64 from(W w) { return w; }
};

// Any operation, atomically, by compare-and-swap on the value's bits.
template <typename T, typename Ops> __device__ void sh_atomic_cas(T *p, T s, int op) {
    typedef typename sh_word<T>::W W;
    W *a = (W *)p;
    W old = *a, assumed;
    do {
        assumed = old;
        W next = sh_word<T>::to(Ops::apply(op, sh_word<T>::from(assumed), s));
        old = atomicCAS(a, assumed, next);
    } while (old != assumed);
}

// Hardware atomics where the type and operation have one that rounds as the host does;
// compare-and-swap otherwise. Single precision has none: the GPU's atomicAdd on float
// (atom.add.f32) flushes subnormal inputs and results to zero, where the host keeps them.
template <typename T, typename Ops> struct sh_atomic {
    static __device__ __forceinline__ void apply(T *p, T s, int op) { sh_atomic_cas<T, Ops>(p, s, op); }
};
template <typename Ops> struct sh_atomic<double, Ops> {
    static __device__ __forceinline__ void apply(double *p, double s, int op) {
#if __CUDA_ARCH__ >= 600
        if (op == SH_OP_SUM) { atomicAdd(p, s); return; }
#endif
        sh_atomic_cas<double, Ops>(p, s, op);
    }
};
// Integers have native atomics for every built-in op: B is the type the bitwise and add
// forms take (two's complement makes signed add the unsigned one), M the one min and max take.
template <typename T, typename B, typename M, typename Ops>
__device__ __forceinline__ void sh_atomic_int(T *p, T s, int op) {
    switch (op) {
    case SH_OP_SUM: atomicAdd((B *)p, (B)s); return;
    case SH_OP_MIN: atomicMin((M *)p, (M)s); return;
    case SH_OP_MAX: atomicMax((M *)p, (M)s); return;
    case SH_OP_BAND: atomicAnd((B *)p, (B)s); return;
    case SH_OP_BOR: atomicOr((B *)p, (B)s); return;
    case SH_OP_BXOR: atomicXor((B *)p, (B)s); return;
    default: sh_atomic_cas<T, Ops>(p, s, op);
    }
}
template <typename Ops> struct sh_atomic<int, Ops> {
    static __device__ __forceinline__ void apply(int *p, int s, int op) { sh_atomic_int<int, u32, int, Ops>(p, s, op); }
};
template <typename Ops> struct sh_atomic<u32, Ops> {
    static __device__ __forceinline__ void apply(u32 *p, u32 s, int op) { sh_atomic_int<u32, u32, u32, Ops>(p, s, op); }
};
template <typename Ops> struct sh_atomic<u64, Ops> {
    static __device__ __forceinline__ void apply(u64 *p, u64 s, int op) { sh_atomic_int<u64, u64, u64, Ops>(p, s, op); }
};
template <typename Ops> struct sh_atomic<i64, Ops> {
    static __device__ __forceinline__ void apply(i64 *p, i64 s, int op) { sh_atomic_int<i64, u64, i64, Ops>(p, s, op); }
};

template <typename T>
__device__ void sh_gather_box(const T *src, T *dst, u64 dst_off, u64 n, u64 lanes, u64 start,
                              u64 dx, u64 dy, u64 sx, u64 sy) {
    for (u64 t = sh_first(); t < n * lanes; t += sh_stride()) {
        u64 l, p = sh_divmod(t, lanes, &l);
        dst[dst_off + t] = src[sh_box_at(p, start, dx, dy, sx, sy) * lanes + l];
    }
}

template <typename T>
__device__ void sh_gather_list(const T *src, T *dst, u64 dst_off, u64 n, u64 lanes, const u64 *idx) {
    for (u64 t = sh_first(); t < n * lanes; t += sh_stride()) {
        u64 l, p = sh_divmod(t, lanes, &l);
        dst[dst_off + t] = src[idx[p] * lanes + l];
    }
}

template <typename T, typename Ops>
__device__ void sh_scatter_box(const T *src, u64 src_off, T *dst, u64 n, u64 lanes, int op,
                               u64 start, u64 dx, u64 dy, u64 sx, u64 sy) {
    for (u64 t = sh_first(); t < n * lanes; t += sh_stride()) {
        u64 l, p = sh_divmod(t, lanes, &l);
        T *d = dst + sh_box_at(p, start, dx, dy, sx, sy) * lanes + l;
        *d = Ops::apply(op, *d, src[src_off + t]);
    }
}

template <typename T, typename Ops>
__device__ void sh_scatter_list(const T *src, u64 src_off, T *dst, u64 n, u64 lanes, int op,
                                const u64 *idx) {
    for (u64 t = sh_first(); t < n * lanes; t += sh_stride()) {
        u64 l, p = sh_divmod(t, lanes, &l);
        T *d = dst + idx[p] * lanes + l;
        *d = Ops::apply(op, *d, src[src_off + t]);
    }
}

template <typename T, typename Ops>
__device__ void sh_scatter_list_atomic(const T *src, u64 src_off, T *dst, u64 n, u64 lanes,
                                       int op, const u64 *idx) {
    for (u64 t = sh_first(); t < n * lanes; t += sh_stride()) {
        u64 l, p = sh_divmod(t, lanes, &l);
        sh_atomic<T, Ops>::apply(dst + idx[p] * lanes + l, src[src_off + t], op);
    }
}

typedef sh_float_ops<float> sh_ops_f32;
typedef sh_float_ops<double> sh_ops_f64;
typedef sh_int_ops<int, u32> sh_ops_i32;
typedef sh_int_ops<u32, u32> sh_ops_u32;
typedef sh_int_ops<i64, u64> sh_ops_i64;
typedef sh_int_ops<u64, u64> sh_ops_u64;

extern "C" __global__ void sh_gather_box_f32(const float *src, float *dst, u64 dst_off, u64 n, u64 lanes, u64 start, u64 dx, u64 dy, u64 sx, u64 sy) { sh_gather_box<float>(src, dst, dst_off, n, lanes, start, dx, dy, sx, sy); }
extern "C" __global__ void sh_gather_box_f64(const double *src, double *dst, u64 dst_off, u64 n, u64 lanes, u64 start, u64 dx, u64 dy, u64 sx, u64 sy) { sh_gather_box<double>(src, dst, dst_off, n, lanes, start, dx, dy, sx, sy); }
extern "C" __global__ void sh_gather_box_i32(const int *src, int *dst, u64 dst_off, u64 n, u64 lanes, u64 start, u64 dx, u64 dy, u64 sx, u64 sy) { sh_gather_box<int>(src, dst, dst_off, n, lanes, start, dx, dy, sx, sy); }
extern "C" __global__ void sh_gather_box_u32(const u32 *src, u32 *dst, u64 dst_off, u64 n, u64 lanes, u64 start, u64 dx, u64 dy, u64 sx, u64 sy) { sh_gather_box<u32>(src, dst, dst_off, n, lanes, start, dx, dy, sx, sy); }
extern "C" __global__ void sh_gather_box_i64(const i64 *src, i64 *dst, u64 dst_off, u64 n, u64 lanes, u64 start, u64 dx, u64 dy, u64 sx, u64 sy) { sh_gather_box<i64>(src, dst, dst_off, n, lanes, start, dx, dy, sx, sy); }
extern "C" __global__ void sh_gather_box_u64(const u64 *src, u64 *dst, u64 dst_off, u64 n, u64 lanes, u64 start, u64 dx, u64 dy, u64 sx, u64 sy) { sh_gather_box<u64>(src, dst, dst_off, n, lanes, start, dx, dy, sx, sy); }

extern "C" __global__ void sh_gather_list_f32(const float *src, float *dst, u64 dst_off, u64 n, u64 lanes, const u64 *idx) { sh_gather_list<float>(src, dst, dst_off, n, lanes, idx); }
extern "C" __global__ void sh_gather_list_f64(const double *src, double *dst, u64 dst_off, u64 n, u64 lanes, const u64 *idx) { sh_gather_list<double>(src, dst, dst_off, n, lanes, idx); }
extern "C" __global__ void sh_gather_list_i32(const int *src, int *dst, u64 dst_off, u64 n, u64 lanes, const u64 *idx) { sh_gather_list<int>(src, dst, dst_off, n, lanes, idx); }
extern "C" __global__ void sh_gather_list_u32(const u32 *src, u32 *dst, u64 dst_off, u64 n, u64 lanes, const u64 *idx) { sh_gather_list<u32>(src, dst, dst_off, n, lanes, idx); }
extern "C" __global__ void sh_gather_list_i64(const i64 *src, i64 *dst, u64 dst_off, u64 n, u64 lanes, const u64 *idx) { sh_gather_list<i64>(src, dst, dst_off, n, lanes, idx); }
extern "C" __global__ void sh_gather_list_u64(const u64 *src, u64 *dst, u64 dst_off, u64 n, u64 lanes, const u64 *idx) { sh_gather_list<u64>(src, dst, dst_off, n, lanes, idx); }

extern "C" __global__ void sh_scatter_box_f32(const float *src, u64 src_off, float *dst, u64 n, u64 lanes, int op, u64 start, u64 dx, u64 dy, u64 sx, u64 sy) { sh_scatter_box<float, sh_ops_f32>(src, src_off, dst, n, lanes, op, start, dx, dy, sx, sy); }
extern "C" __global__ void sh_scatter_box_f64(const double *src, u64 src_off, double *dst, u64 n, u64 lanes, int op, u64 start, u64 dx, u64 dy, u64 sx, u64 sy) { sh_scatter_box<double, sh_ops_f64>(src, src_off, dst, n, lanes, op, start, dx, dy, sx, sy); }
extern "C" __global__ void sh_scatter_box_i32(const int *src, u64 src_off, int *dst, u64 n, u64 lanes, int op, u64 start, u64 dx, u64 dy, u64 sx, u64 sy) { sh_scatter_box<int, sh_ops_i32>(src, src_off, dst, n, lanes, op, start, dx, dy, sx, sy); }
extern "C" __global__ void sh_scatter_box_u32(const u32 *src, u64 src_off, u32 *dst, u64 n, u64 lanes, int op, u64 start, u64 dx, u64 dy, u64 sx, u64 sy) { sh_scatter_box<u32, sh_ops_u32>(src, src_off, dst, n, lanes, op, start, dx, dy, sx, sy); }
extern "C" __global__ void sh_scatter_box_i64(const i64 *src, u64 src_off, i64 *dst, u64 n, u64 lanes, int op, u64 start, u64 dx, u64 dy, u64 sx, u64 sy) { sh_scatter_box<i64, sh_ops_i64>(src, src_off, dst, n, lanes, op, start, dx, dy, sx, sy); }
extern "C" __global__ void sh_scatter_box_u64(const u64 *src, u64 src_off, u64 *dst, u64 n, u64 lanes, int op, u64 start, u64 dx, u64 dy, u64 sx, u64 sy) { sh_scatter_box<u64, sh_ops_u64>(src, src_off, dst, n, lanes, op, start, dx, dy, sx, sy); }

extern "C" __global__ void sh_scatter_list_f32(const float *src, u64 src_off, float *dst, u64 n, u64 lanes, int op, const u64 *idx) { sh_scatter_list<float, sh_ops_f32>(src, src_off, dst, n, lanes, op, idx); }
extern "C" __global__ void sh_scatter_list_f64(const double *src, u64 src_off, double *dst, u64 n, u64 lanes, int op, const u64 *idx) { sh_scatter_list<double, sh_ops_f64>(src, src_off, dst, n, lanes, op, idx); }
extern "C" __global__ void sh_scatter_list_i32(const int *src, u64 src_off, int *dst, u64 n, u64 lanes, int op, const u64 *idx) { sh_scatter_list<int, sh_ops_i32>(src, src_off, dst, n, lanes, op, idx); }
extern "C" __global__ void sh_scatter_list_u32(const u32 *src, u64 src_off, u32 *dst, u64 n, u64 lanes, int op, const u64 *idx) { sh_scatter_list<u32, sh_ops_u32>(src, src_off, dst, n, lanes, op, idx); }
extern "C" __global__ void sh_scatter_list_i64(const i64 *src, u64 src_off, i64 *dst, u64 n, u64 lanes, int op, const u64 *idx) { sh_scatter_list<i64, sh_ops_i64>(src, src_off, dst, n, lanes, op, idx); }
extern "C" __global__ void sh_scatter_list_u64(const u64 *src, u64 src_off, u64 *dst, u64 n, u64 lanes, int op, const u64 *idx) { sh_scatter_list<u64, sh_ops_u64>(src, src_off, dst, n, lanes, op, idx); }

extern "C" __global__ void sh_scatter_list_atomic_f32(const float *src, u64 src_off, float *dst, u64 n, u64 lanes, int op, const u64 *idx) { sh_scatter_list_atomic<float, sh_ops_f32>(src, src_off, dst, n, lanes, op, idx); }
extern "C" __global__ void sh_scatter_list_atomic_f64(const double *src, u64 src_off, double *dst, u64 n, u64 lanes, int op, const u64 *idx) { sh_scatter_list_atomic<double, sh_ops_f64>(src, src_off, dst, n, lanes, op, idx); }
extern "C" __global__ void sh_scatter_list_atomic_i32(const int *src, u64 src_off, int *dst, u64 n, u64 lanes, int op, const u64 *idx) { sh_scatter_list_atomic<int, sh_ops_i32>(src, src_off, dst, n, lanes, op, idx); }
extern "C" __global__ void sh_scatter_list_atomic_u32(const u32 *src, u64 src_off, u32 *dst, u64 n, u64 lanes, int op, const u64 *idx) { sh_scatter_list_atomic<u32, sh_ops_u32>(src, src_off, dst, n, lanes, op, idx); }
extern "C" __global__ void sh_scatter_list_atomic_i64(const i64 *src, u64 src_off, i64 *dst, u64 n, u64 lanes, int op, const u64 *idx) { sh_scatter_list_atomic<i64, sh_ops_i64>(src, src_off, dst, n, lanes, op, idx); }
extern "C" __global__ void sh_scatter_list_atomic_u64(const u64 *src, u64 src_off, u64 *dst, u64 n, u64 lanes, int op, const u64 *idx) { sh_scatter_list_atomic<u64, sh_ops_u64>(src, src_off, dst, n, lanes, op, idx); }

// Fill with a bit pattern of 4 or 8 bytes.
extern "C" __global__ void sh_fill_b32(u32 *dst, u64 n, u32 bits) { for (u64 t = sh_first(); t < n; t += sh_stride()) dst[t] = bits; }
extern "C" __global__ void sh_fill_b64(u64 *dst, u64 n, u64 bits) { for (u64 t = sh_first(); t < n; t += sh_stride()) dst[t] = bits; }
