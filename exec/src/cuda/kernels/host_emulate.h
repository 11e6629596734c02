// Host emulation of the CUDA built-ins, so that a host C++ compiler can run the kernels on
// small cases in tests where no GPU exists: blocks one after another, each of one thread, or
// of blockDim.x threads under sh_run_block (with __syncthreads a barrier among them).
#include <math.h>
#include <atomic>
#include <barrier>
#include <thread>
#include <vector>
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
struct sh_dim3 { unsigned x, y, z; };
static sh_dim3 blockIdx, blockDim, gridDim;
static thread_local sh_dim3 threadIdx;
// The running block's barrier under sh_run_block; none for a block of one thread.
static std::barrier<> *sh_barrier = nullptr;
static std::atomic<int> sh_any{0};
static void __syncthreads() {
    if (sh_barrier) sh_barrier->arrive_and_wait();
}
static int __syncthreads_or(int p) {
    if (!sh_barrier) return p;
    if (p) sh_any = 1;
    sh_barrier->arrive_and_wait();
    int any = sh_any;
    sh_barrier->arrive_and_wait();
    if (threadIdx.x == 0) sh_any = 0;
    sh_barrier->arrive_and_wait();
    return any;
}
// Runs `kernel` as block blockIdx.x of blockDim.x threads, one std::thread each, started
// together (a barrier first) so that they overlap.
template <typename F> static void sh_run_block(F kernel) {
    std::barrier<> bar(blockDim.x);
    sh_barrier = &bar;
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < blockDim.x; ++t)
        threads.emplace_back([&kernel, &bar, t] {
            threadIdx = {t, 0, 0};
            bar.arrive_and_wait();
            kernel();
        });
    for (auto &t : threads) t.join();
    sh_barrier = nullptr;
}
static unsigned int __float_as_uint(float f) { unsigned u; __builtin_memcpy(&u, &f, 4); return u; }
static float __uint_as_float(unsigned u) { float f; __builtin_memcpy(&f, &u, 4); return f; }
static long long __double_as_longlong(double d) { long long u; __builtin_memcpy(&u, &d, 8); return u; }
static double __longlong_as_double(long long u) { double d; __builtin_memcpy(&d, &u, 8); return d; }
// Atomics are atomic among the threads of sh_run_block too; each returns the old value.
template <typename T> static T atomicCAS(T *p, T c, T v) { std::atomic_ref<T>(*p).compare_exchange_strong(c, v); return c; }
template <typename T> static T atomicAdd(T *p, T v) { return std::atomic_ref<T>(*p).fetch_add(v); }
template <typename T, typename F> static T sh_atomic_update(T *p, F f) {
    std::atomic_ref<T> a(*p);
    T o = a.load();
    while (!a.compare_exchange_weak(o, f(o))) {}
    return o;
}
// As on the GPU (PTX atom.add.f32), single-precision atomicAdd flushes subnormal inputs and
// results to zero.
static float sh_ftz(float x) { return fpclassify(x) == FP_SUBNORMAL ? copysignf(0.0f, x) : x; }
static float atomicAdd(float *p, float v) {
    return sh_atomic_update(p, [v](float o) { return sh_ftz(sh_ftz(o) + sh_ftz(v)); });
}
template <typename T> static T atomicMin(T *p, T v) { return sh_atomic_update(p, [v](T o) { return v < o ? v : o; }); }
template <typename T> static T atomicMax(T *p, T v) { return sh_atomic_update(p, [v](T o) { return v > o ? v : o; }); }
template <typename T> static T atomicAnd(T *p, T v) { return std::atomic_ref<T>(*p).fetch_and(v); }
template <typename T> static T atomicOr(T *p, T v) { return std::atomic_ref<T>(*p).fetch_or(v); }
template <typename T> static T atomicXor(T *p, T v) { return std::atomic_ref<T>(*p).fetch_xor(v); }
// Binary doubles through standard input and output (the test drivers' data).
#include <stdio.h>
#include <stdlib.h>
static void sh_read(double *p, unsigned long long n) {
    if (fread(p, sizeof(double), n, stdin) != n) { printf("short input\n"); exit(3); }
}
static void sh_write(const double *p, unsigned long long n) { fwrite(p, sizeof(double), n, stdout); }
