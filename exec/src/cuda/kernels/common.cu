// starhalo: what every kernel set starts with (prepended to each, so guarded: the host
// emulation compiles all sets as one program).
#ifndef SH_COMMON
#define SH_COMMON

typedef unsigned long long u64;
typedef long long i64;
typedef unsigned int u32;

// q = a / b and *rem = a % b, in 32-bit arithmetic where both fit: a GPU divides 64-bit
// integers in software, several times slower, and the kernels split every flat index so.
__device__ __forceinline__ u64 sh_divmod(u64 a, u64 b, u64 *rem) {
    if (((a | b) >> 32) == 0) {
        u32 q = (u32)a / (u32)b;
        *rem = (u32)a - q * (u32)b;
        return q;
    }
    u64 q = a / b;
    *rem = a - q * b;
    return q;
}

#endif
