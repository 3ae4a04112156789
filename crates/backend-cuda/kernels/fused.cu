// Kernels that compute a window of nodes in one pass (crate::plan::fusion_windows), each with the
// arithmetic of the nodes it replaces, in their order.
//
// Rows of contiguous F32 up to NORM_VALS x blockDim values (4096 at 256 threads: an 8B model's
// width; at most 106 registers a thread, 196 with 32 values) take a fast path: a thread's
// values are loaded all at once into registers and kept there for the second pass, so a row
// costs one memory latency, not one per value (the strided loop took 16 us a 2048-wide row on
// the H200, 0.5 ms of a 1B model's decoded token); the same operations in the same order as
// the strided loop, which keeps the other layouts.
//
// Where the output is the input of int8 products (crate::plan::fold_q8_into_writer), the kernel
// also writes its Q8_1 blocks (q8 not null: row r's blocks at q8 + r * n / 32 blocks, n a
// multiple of 32, the output contiguous F32 rows), from the values it stores, with
// quantize_q8_1's arithmetic (q8_1_warp): the launch of quantize_q8_1 and its read of the row
// are saved, twice a decoder block (before Q/K/V and before gate/up).
#define NORM_VALS 16

__device__ __forceinline__ bool f32_rows(const TT &t) { return t.type == T_F32 && t.nb[0] == 4; }

// The fast path's end: the norm's scale from the block's sum of squares s2, then each held
// value x[k] (element threadIdx.x + k blockDim.x of a row of n) times it and the weight; with
// q8r, warp w's 32 values of step k (the row's block k blockDim.x / 32 + w) to Q8_1 as well.
__device__ __forceinline__ void norm_mul_rows(const float (&x)[NORM_VALS], float s2, i64 n,
                                              float eps, const float *wr, i64 wn, float *dr,
                                              u8 *q8r) {
    const float scale = rsqrtf(block_sum(s2) / n + eps);
#pragma unroll
    for (int k = 0; k < NORM_VALS; ++k) {
        const i64 i = threadIdx.x + (i64)k * blockDim.x;
        const float v = i < n ? x[k] * scale * wr[i % wn] : 0.0f;
        if (i < n) dr[i] = v;
        const i64 first = (i64)k * blockDim.x + (threadIdx.x / WARP) * WARP;
        if (q8r != nullptr && first < n) q8_1_warp(v, threadIdx.x % WARP, q8r + first / 32 * Q8_1_BYTES);
    }
}

// The strided path's Q8_1 blocks (q8r not null): read back from the row the block stored (its
// own writes, visible to the block after the barrier), one warp a block.
__device__ __forceinline__ void norm_rows_q8(const float *dr, i64 n, u8 *q8r) {
    if (q8r == nullptr) return;
    __syncthreads();
    for (i64 b = threadIdx.x / WARP; b < n / 32; b += blockDim.x / WARP)
        q8_1_warp(dr[b * 32 + threadIdx.x % WARP], threadIdx.x % WARP, q8r + b * Q8_1_BYTES);
}

// RMS_NORM of each row of a, then MUL by w (broadcast as binary_op's second source): the norm's
// value is rounded to f32 as the unfused RMS_NORM stores it, then multiplied. One block per row.
extern "C" __global__ void rms_norm_mul_op(TT d, TT a, TT w, float eps, u8 *q8) {
    pdl_start();
    const i64 r = blockIdx.x, i1 = r % a.ne[1], i2 = (r / a.ne[1]) % a.ne[2], i3 = r / (a.ne[1] * a.ne[2]);
    const i64 n = a.ne[0];
    u8 *q8r = q8 == nullptr || n % 32 != 0 ? nullptr : q8 + r * (n / 32) * Q8_1_BYTES;
    if (f32_rows(a) && f32_rows(d) && f32_rows(w) && n <= NORM_VALS * (i64)blockDim.x) {
        const float *ar = (const float *)row_ptr(a, i1, i2, i3);
        const float *wr = (const float *)row_ptr(w, i1 % w.ne[1], i2 % w.ne[2], i3 % w.ne[3]);
        float *dr = (float *)row_ptr(d, i1, i2, i3);
        float x[NORM_VALS];
        float s2 = 0.0f;
#pragma unroll
        for (int k = 0; k < NORM_VALS; ++k) {
            const i64 i = threadIdx.x + (i64)k * blockDim.x;
            x[k] = i < n ? ar[i] : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < NORM_VALS; ++k)
            if (threadIdx.x + (i64)k * blockDim.x < n) s2 += x[k] * x[k];
        norm_mul_rows(x, s2, n, eps, wr, w.ne[0], dr, q8r);
        return;
    }
    float s2 = 0.0f;
    for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
        const float x = ld(a, i, i1, i2, i3);
        s2 += x * x;
    }
    const float scale = rsqrtf(block_sum(s2) / n + eps);
    for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
        const float normed = ld(a, i, i1, i2, i3) * scale;
        const float m = ld(w, i % w.ne[0], i1 % w.ne[1], i2 % w.ne[2], i3 % w.ne[3]);
        st(d, i, i1, i2, i3, normed * m);
    }
    norm_rows_q8((const float *)row_ptr(d, i1, i2, i3), n, q8r);
}

// ADD of two rows of the same shape (the residual), then RMS_NORM of the sum and MUL by w: the
// sum is stored (later nodes read it) and, as f32, is what the norm reads, as the unfused
// nodes do; the norm as rms_norm_mul_op. One block per row. The sum may take a source's
// memory (the allocator runs ADD in place), so the second pass reads the stored sum (each
// thread its own elements, written by itself in the first pass), never a or b again; the fast
// path loads all of a thread's a and b before its first store.
extern "C" __global__ void add_rms_norm_mul_op(TT sum, TT a, TT b, TT d, TT w, float eps,
                                               u8 *q8) {
    pdl_start();
    const i64 r = blockIdx.x, i1 = r % a.ne[1], i2 = (r / a.ne[1]) % a.ne[2], i3 = r / (a.ne[1] * a.ne[2]);
    const i64 n = a.ne[0];
    u8 *q8r = q8 == nullptr || n % 32 != 0 ? nullptr : q8 + r * (n / 32) * Q8_1_BYTES;
    if (f32_rows(sum) && f32_rows(a) && f32_rows(b) && f32_rows(d) && f32_rows(w) &&
        n <= NORM_VALS * (i64)blockDim.x) {
        const float *ar = (const float *)row_ptr(a, i1, i2, i3);
        const float *br = (const float *)row_ptr(b, i1, i2, i3);
        const float *wr = (const float *)row_ptr(w, i1 % w.ne[1], i2 % w.ne[2], i3 % w.ne[3]);
        float *sr = (float *)row_ptr(sum, i1, i2, i3), *dr = (float *)row_ptr(d, i1, i2, i3);
        float x[NORM_VALS];
#pragma unroll
        for (int k = 0; k < NORM_VALS; ++k) {
            const i64 i = threadIdx.x + (i64)k * blockDim.x;
            x[k] = i < n ? ar[i] + br[i] : 0.0f;
        }
        float s2 = 0.0f;
#pragma unroll
        for (int k = 0; k < NORM_VALS; ++k) {
            const i64 i = threadIdx.x + (i64)k * blockDim.x;
            if (i < n) {
                sr[i] = x[k];
                s2 += x[k] * x[k];
            }
        }
        norm_mul_rows(x, s2, n, eps, wr, w.ne[0], dr, q8r);
        return;
    }
    float s2 = 0.0f;
    for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
        const float x = ld(a, i, i1, i2, i3) + ld(b, i, i1, i2, i3);
        st(sum, i, i1, i2, i3, x);
        s2 += x * x;
    }
    const float scale = rsqrtf(block_sum(s2) / n + eps);
    for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
        const float x = ld(sum, i, i1, i2, i3);
        const float m = ld(w, i % w.ne[0], i1 % w.ne[1], i2 % w.ne[2], i3 % w.ne[3]);
        st(d, i, i1, i2, i3, x * scale * m);
    }
    norm_rows_q8((const float *)row_ptr(d, i1, i2, i3), n, q8r);
}
