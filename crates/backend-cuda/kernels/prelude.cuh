// Shared by every kernel file (prepended by kernels.rs): fixed-width types, half <-> float by
// inline PTX (NVRTC 13 has no cuda_fp16.h), warp reductions, ggml's block layouts as bytes.
typedef unsigned char u8;
typedef signed char i8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef int i32;
typedef long long i64;

#define WARP 32
#define INFINITY __int_as_float(0x7f800000)
// A grid-stride loop of `i` over 0..n (the element-wise kernels).
#define GRID_STRIDE(i, n) \
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (i64)gridDim.x * blockDim.x)

__device__ __forceinline__ float h2f(u16 h) {
    float f;
    asm("{ .reg .b16 t; mov.b16 t, %1; cvt.f32.f16 %0, t; }" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ u16 f2h(float f) {
    u16 h;
    asm("{ .reg .b16 t; cvt.rn.f16.f32 t, %1; mov.b16 %0, t; }" : "=h"(h) : "f"(f));
    return h;
}

__device__ __forceinline__ float bf2f(u16 h) { return __int_as_float(((u32)h) << 16); }

// A float another block of this grid wrote (made visible by its __threadfence), read from L2:
// ld.global.cg bypasses this SM's L1, which could hold no older copy anyway.
__device__ __forceinline__ float ld_cg(const float *p) {
    float v;
    asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p));
    return v;
}

// Programmatic dependent launch (sm_90+; nothing elsewhere). The executor launches a kernel
// that follows another in a list with the programmatic-serialization attribute (the `pdl`
// path): its blocks may start while the previous kernel still runs, so every kernel calls
// pdl_start() before it reads or writes any memory but weights (griddepcontrol.wait: the
// previous grid complete and its writes visible; a test over every kernel's text checks the
// call), then lets its own successor launch (launch_dependents: it takes effect once every
// block of this grid has passed here, so a waiting successor never holds an SM this grid
// still needs).
__device__ __forceinline__ void pdl_start() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// An L2 prefetch of the 16-byte-aligned bytes inside [p, p + n) (sm_90's bulk prefetch, one
// instruction for a whole weight row; nothing elsewhere): the matrix-vector kernels issue it
// for their weight rows before pdl_start, so the weights stream in while the previous kernel
// finishes. Only bytes inside the range are touched, and it is safe on any row, a KV cache's
// too: L2 is the device memory's point of coherence, so a prefetch of bytes another kernel is
// still writing leaves no stale copy for a later read.
__device__ __forceinline__ void prefetch_l2(const u8 *p, i64 n) {
#if __CUDA_ARCH__ >= 900
    const unsigned long long a = (unsigned long long)p;
    const unsigned long long b = (a + 15) & ~15ull, e = (a + n) & ~15ull;
    if (e > b) {
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(b), "r"((u32)(e - b))
                     : "memory");
    }
#endif
}

// Signed 8-bit dot of four byte pairs plus c (dp4a; sm_61 and newer).
__device__ __forceinline__ i32 dp4a(i32 a, i32 b, i32 c) {
    i32 r;
    asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int o = WARP / 2; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

__device__ __forceinline__ i32 warp_sum_i(i32 x) {
#pragma unroll
    for (int o = WARP / 2; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
    for (int o = WARP / 2; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

// Sum (MAX = false) or maximum (MAX = true) over a block of blockDim.x threads (a multiple of
// 32, at most 1024); every thread gets it.
template <bool MAX> __device__ __forceinline__ float block_reduce(float x) {
    __shared__ float partial[32];
    x = MAX ? warp_max(x) : warp_sum(x);
    const int lane = threadIdx.x % WARP, w = threadIdx.x / WARP;
    __syncthreads();
    if (lane == 0) partial[w] = x;
    __syncthreads();
    x = lane < (int)(blockDim.x / WARP) ? partial[lane] : (MAX ? -INFINITY : 0.0f);
    return MAX ? warp_max(x) : warp_sum(x);
}

__device__ __forceinline__ float block_sum(float x) { return block_reduce<false>(x); }
__device__ __forceinline__ float block_max(float x) { return block_reduce<true>(x); }

// One Q8_1 block from a warp's 32 values, lane i holding value i: d = amax / 127 (f16 in bytes
// 0-1), q = roundf(v / d) (int8 at byte 4 + i), s = d * sum(q) (f16 in bytes 2-3).
// quantize_q8_1's arithmetic, shared with the fused norms that write their output's Q8_1 blocks
// too (the same bits either way). Every lane of the warp must call it.
__device__ __forceinline__ void q8_1_warp(float v, int lane, u8 *b) {
    const float amax = warp_max(fabsf(v));
    const float d = amax / 127.0f;
    const int q = (int)(amax == 0.0f ? 0.0f : roundf(v / d));
    const int sum = warp_sum_i(q);
    b[4 + lane] = (u8)(i8)q;
    if (lane == 0) {
        const u16 dh = f2h(d), sh = f2h(d * sum);
        b[0] = dh & 0xFF; b[1] = dh >> 8; b[2] = sh & 0xFF; b[3] = sh >> 8;
    }
}

// Little-endian reads from block bytes at any alignment, with the widest loads the address
// allows: every ggml block but MXFP4's (17 bytes) has an even size, so rows of them are read
// with 2- and 4-byte loads, not byte by byte (a byte load each was four load instructions a
// word on the matrix-vector paths).
__device__ __forceinline__ u16 rd16(const u8 *p) {
    if (((unsigned long long)p & 1) == 0) return *(const u16 *)p;
    return (u16)p[0] | ((u16)p[1] << 8);
}
__device__ __forceinline__ u32 rd32(const u8 *p) {
    const unsigned long long a = (unsigned long long)p;
    if ((a & 3) == 0) return *(const u32 *)p;
    if ((a & 1) == 0) return (u32)(*(const u16 *)p) | ((u32)(*(const u16 *)(p + 2)) << 16);
    return (u32)p[0] | ((u32)p[1] << 8) | ((u32)p[2] << 16) | ((u32)p[3] << 24);
}

// Eight bytes as two words (an 8-byte-aligned load).
struct alignas(8) u32x2 {
    u32 x, y;
};

// Sixteen bytes as four little-endian words: one 128-bit load where p is 16-byte aligned (the
// KV cache's rows are), else four rd32.
struct alignas(16) u32x4 {
    u32 x, y, z, w;
};
__device__ __forceinline__ u32x4 rd128(const u8 *p) {
    if (((unsigned long long)p & 15) == 0) return *(const u32x4 *)p;
    u32x4 r;
    r.x = rd32(p);
    r.y = rd32(p + 4);
    r.z = rd32(p + 8);
    r.w = rd32(p + 12);
    return r;
}

// ggml block sizes in bytes (32 values each unless noted).
#define Q4_0_BYTES 18   // d, qs[16]
#define Q4_1_BYTES 20   // d, m, qs[16]
#define Q5_0_BYTES 22   // d, qh[4], qs[16]
#define Q5_1_BYTES 24   // d, m, qh[4], qs[16]
#define Q8_0_BYTES 34   // d, qs[32]
#define IQ4_NL_BYTES 18 // d, qs[16] (indexes into kvalues_iq4nl)
#define MXFP4_BYTES 17  // e (e8m0), qs[16] (indexes into kvalues_mxfp4)
#define Q8_1_BYTES 36   // d, s, qs[32]
#define Q2_K_BYTES 84   // 256 values: scales[16], qs[64], d, dmin
#define Q3_K_BYTES 110  // 256 values: hmask[32], qs[64], scales[12], d
#define Q4_K_BYTES 144  // 256 values: d, dmin, scales[12], qs[128]
#define Q5_K_BYTES 176  // 256 values: d, dmin, scales[12], qh[32], qs[128]
#define IQ4_XS_BYTES 136 // 256 values: d, scales_h, scales_l[4], qs[128]
#define Q6_K_BYTES 210  // 256 values: ql[128], qh[64], scales[16], d
