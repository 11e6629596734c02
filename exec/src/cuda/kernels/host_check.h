// Host stand-ins for the CUDA built-ins the kernels use, with CUDA's overload sets, so that a
// host C++ compiler can check the kernels' syntax and types without a CUDA toolkit.
#include <math.h>
#define __global__
#define __device__
#define __forceinline__ inline
struct sh_dim3 { unsigned x, y, z; };
static sh_dim3 blockIdx, threadIdx, blockDim, gridDim;
#define __shared__ static
void __syncthreads();
int __syncthreads_or(int);
unsigned int __float_as_uint(float);
float __uint_as_float(unsigned int);
long long __double_as_longlong(double);
double __longlong_as_double(long long);
unsigned int atomicCAS(unsigned int *, unsigned int, unsigned int);
unsigned long long atomicCAS(unsigned long long *, unsigned long long, unsigned long long);
int atomicCAS(int *, int, int);
float atomicAdd(float *, float);
double atomicAdd(double *, double);
int atomicAdd(int *, int);
unsigned int atomicAdd(unsigned int *, unsigned int);
unsigned long long atomicAdd(unsigned long long *, unsigned long long);
int atomicMin(int *, int);
unsigned int atomicMin(unsigned int *, unsigned int);
long long atomicMin(long long *, long long);
unsigned long long atomicMin(unsigned long long *, unsigned long long);
int atomicMax(int *, int);
unsigned int atomicMax(unsigned int *, unsigned int);
long long atomicMax(long long *, long long);
unsigned long long atomicMax(unsigned long long *, unsigned long long);
int atomicAnd(int *, int);
unsigned int atomicAnd(unsigned int *, unsigned int);
unsigned long long atomicAnd(unsigned long long *, unsigned long long);
int atomicOr(int *, int);
unsigned int atomicOr(unsigned int *, unsigned int);
unsigned long long atomicOr(unsigned long long *, unsigned long long);
int atomicXor(int *, int);
unsigned int atomicXor(unsigned int *, unsigned int);
unsigned long long atomicXor(unsigned long long *, unsigned long long);
