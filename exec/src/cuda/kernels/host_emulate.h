// Serial host emulation of the CUDA built-ins (one block of one thread), so that a host
// C++ compiler can run the kernels on small cases in tests where no GPU exists.
#include <math.h>
#define __global__
#define __device__
#define __forceinline__ inline
struct sh_dim3 { unsigned x, y, z; };
static sh_dim3 blockIdx, threadIdx, blockDim, gridDim;
#define __shared__ static
static void __syncthreads() {}
static int __syncthreads_or(int p) { return p; }
static unsigned int __float_as_uint(float f) { unsigned u; __builtin_memcpy(&u, &f, 4); return u; }
static float __uint_as_float(unsigned u) { float f; __builtin_memcpy(&f, &u, 4); return f; }
static long long __double_as_longlong(double d) { long long u; __builtin_memcpy(&u, &d, 8); return u; }
static double __longlong_as_double(long long u) { double d; __builtin_memcpy(&d, &u, 8); return d; }
template <typename T> static T atomicCAS(T *p, T c, T v) { T o = *p; if (o == c) *p = v; return o; }
template <typename T> static T atomicAdd(T *p, T v) { T o = *p; *p = o + v; return o; }
template <typename T> static T atomicMin(T *p, T v) { T o = *p; *p = v < o ? v : o; return o; }
template <typename T> static T atomicMax(T *p, T v) { T o = *p; *p = v > o ? v : o; return o; }
template <typename T> static T atomicAnd(T *p, T v) { T o = *p; *p = o & v; return o; }
template <typename T> static T atomicOr(T *p, T v) { T o = *p; *p = o | v; return o; }
template <typename T> static T atomicXor(T *p, T v) { T o = *p; *p = o ^ v; return o; }
// Binary doubles through standard input and output (the test drivers' data).
#include <stdio.h>
#include <stdlib.h>
static void sh_read(double *p, unsigned long long n) {
    if (fread(p, sizeof(double), n, stdin) != n) { printf("short input\n"); exit(3); }
}
static void sh_write(const double *p, unsigned long long n) { fwrite(p, sizeof(double), n, stdout); }
