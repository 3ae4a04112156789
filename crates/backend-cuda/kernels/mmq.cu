// Batched quantized products on int8 tensor cores (MMQ, llama.cpp's idea with a layout of our
// own): Y = W X for 9 to a few hundred activation columns, the columns already Q8_1
// (`quantize_q8_1`, column c's nblocks blocks after column c - 1's, as for mmvq_*); column c of
// the output starts dst_col floats after column c - 1's. Each weight block is read once per
// block of MMQ_COLS columns, where the cuBLAS path converts the whole matrix to F16 first.
//
// Every weight type is seen the same way: each 16 values of a row as 16 int8 codes q with a
// scale d and an offset m, the value d * q + m (m folds the types' fixed offsets and mins:
// Q4_0's q - 8 is q with m = -8 d, Q4_K's d sc q - dmin mn is m = -dmin mn). Per 16 values:
//   sum(w y) = d_y (d S + m Y), S = sum(q q_y) exact in int32 (one mma), Y = sum(q_y).
// A block of MMQ_THREADS threads (four warps) computes MMQ_ROWS weight rows x MMQ_COLS columns;
// per MMQ_KB Q8_1 blocks it stages the rows' codes, scales and offsets and the columns' codes,
// scales and sums in shared memory, then each warp multiplies its 16 rows by the four 8-column
// tiles with mma.sync m16n8k16 (s8 x s8 -> s32), once per 16 values.
//
// mma.sync.m16n8k16 with s8 operands needs sm_80; the plan takes this path only there.
// crates/backend-cuda/tests/host_mmq.rs runs these kernels on the CPU (the mma emulated from
// the PTX fragment layout) against f64, and checks every type's codes against dequantization.

#define MMQ_ROWS 64
#define MMQ_COLS 32
#define MMQ_THREADS 128
// Q8_1 blocks (32 values) staged per pass: 8 (256 values, one K-quant block) keeps about 9 KiB
// of Q4_0 weights in flight per block between two barriers.
#define MMQ_KB 8
// Words (4 codes) per staged row: 8 * MMQ_KB used, 4 more so the fragment reads of a warp
// (rows g, words 4kh + t: bank 4g + t + const) fall in 32 different banks.
#define MMQ_STRIDE (8 * MMQ_KB + 4)

// D += A B for a 16x16 A (row-major; this lane's words: a0 = row g, a1 = row g + 8, codes
// 4t..4t+3), a 16x8 B (column-major; b = column g, codes 4t..4t+3) and the 16x8 D (c[0], c[1]:
// row g, columns 2t, 2t + 1; c[2], c[3]: row g + 8), lane = 4g + t.
#ifndef MMQ_HOST_MMA
__device__ __forceinline__ void mma_s8_16816(i32 *c, i32 a0, i32 a1, i32 b) {
#if __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, "
                 "{%6}, {%0, %1, %2, %3};"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a0), "r"(a1), "r"(b));
#else
    __trap();  // not planned below sm_80
#endif
}
#endif

// Each type T: codes_T, word q (codes 4q..4q+3) of 32-value sub-block j of the weight block at
// b; scales_T, the (d, m) of half h (values 16h..16h+15) of that sub-block.
__device__ __forceinline__ i32 nib_word(const u8 *qs, int q) {
    // 32-value types: values 0..15 are the low nibbles of qs[0..15], 16..31 the high ones.
    return (ld_i32(qs + 4 * (q & 3)) >> (q & 4)) & 0x0F0F0F0F;
}
__device__ __forceinline__ i32 q5_word(const u8 *qs, u32 qh, int q) {
    i32 v = nib_word(qs, q);
    for (int k = 0; k < 4; ++k) v |= ((qh >> (4 * q + k)) & 1) << (8 * k + 4);
    return v;
}
__device__ __forceinline__ i32 codes_q4_0(const u8 *b, int, int q) { return nib_word(b + 2, q); }
__device__ __forceinline__ void scales_q4_0(const u8 *b, int, int, float *d, float *m) {
    *d = h2f(rd16(b));
    *m = -8.0f * *d;
}
__device__ __forceinline__ i32 codes_q4_1(const u8 *b, int, int q) { return nib_word(b + 4, q); }
__device__ __forceinline__ void scales_q4_1(const u8 *b, int, int, float *d, float *m) {
    *d = h2f(rd16(b));
    *m = h2f(rd16(b + 2));
}
__device__ __forceinline__ i32 codes_q5_0(const u8 *b, int, int q) { return q5_word(b + 6, rd32(b + 2), q); }
__device__ __forceinline__ void scales_q5_0(const u8 *b, int, int, float *d, float *m) {
    *d = h2f(rd16(b));
    *m = -16.0f * *d;
}
__device__ __forceinline__ i32 codes_q5_1(const u8 *b, int, int q) { return q5_word(b + 8, rd32(b + 4), q); }
__device__ __forceinline__ void scales_q5_1(const u8 *b, int, int, float *d, float *m) {
    *d = h2f(rd16(b));
    *m = h2f(rd16(b + 2));
}
__device__ __forceinline__ i32 codes_q8_0(const u8 *b, int, int q) { return ld_i32(b + 2 + 4 * q); }
__device__ __forceinline__ void scales_q8_0(const u8 *b, int, int, float *d, float *m) {
    *d = h2f(rd16(b));
    *m = 0.0f;
}
__device__ __forceinline__ i32 codes_iq4_nl(const u8 *b, int, int q) {
    return lut4(KV_IQ4NL, ld_i32(b + 2 + 4 * (q & 3)), q & 4);
}
__device__ __forceinline__ void scales_iq4_nl(const u8 *b, int, int, float *d, float *m) {
    *d = h2f(rd16(b));
    *m = 0.0f;
}
__device__ __forceinline__ i32 codes_mxfp4(const u8 *b, int, int q) {
    return lut4(KV_MXFP4, ld_i32(b + 1 + 4 * (q & 3)), q & 4);
}
__device__ __forceinline__ void scales_mxfp4(const u8 *b, int, int, float *d, float *m) {
    *d = e8m0_half(b[0]);
    *m = 0.0f;
}
// Q2_K: 2-bit codes, a 4-bit scale and min per 16 values (scales[2j + h]).
__device__ __forceinline__ i32 codes_q2_k(const u8 *b, int j, int q) {
    return (ld_i32(b + 16 + 32 * (j / 4) + 4 * q) >> (2 * (j % 4))) & 0x03030303;
}
__device__ __forceinline__ void scales_q2_k(const u8 *b, int j, int h, float *d, float *m) {
    const u8 sc = b[2 * j + h];
    *d = h2f(rd16(b + 80)) * (sc & 15);
    *m = -h2f(rd16(b + 82)) * (sc >> 4);
}
// Q3_K: the 2 low bits and the high-mask bit as q + 4 * hbit in 0..7 (the code is that less 4),
// a 6-bit scale less 32 per 16 values.
__device__ __forceinline__ i32 codes_q3_k(const u8 *b, int j, int q) {
    return ((ld_i32(b + 32 + 32 * (j / 4) + 4 * q) >> (2 * (j % 4))) & 0x03030303) |
           (((ld_i32(b + 4 * q) >> j) & 0x01010101) << 2);
}
__device__ __forceinline__ void scales_q3_k(const u8 *b, int j, int h, float *d, float *m) {
    const u8 *sc6 = b + 96;
    const int g = 2 * j + h;
    const int low = g < 8 ? sc6[g] & 15 : sc6[g - 8] >> 4;
    const int high = (sc6[8 + g % 4] >> (2 * (g / 4))) & 3;
    *d = h2f(rd16(b + 108)) * ((low | (high << 4)) - 32);
    *m = -4.0f * *d;
}
// Q4_K and Q5_K: a 6-bit scale and min per 32 values.
__device__ __forceinline__ void dm_k4(const u8 *b, int j, float *d, float *m) {
    int sc, mn;
    k4_scale_min(j, b + 4, &sc, &mn);
    *d = h2f(rd16(b)) * sc;
    *m = -h2f(rd16(b + 2)) * mn;
}
__device__ __forceinline__ i32 codes_q4_k(const u8 *b, int j, int q) {
    return (ld_i32(b + 16 + 32 * (j / 2) + 4 * q) >> (4 * (j % 2))) & 0x0F0F0F0F;
}
__device__ __forceinline__ void scales_q4_k(const u8 *b, int j, int, float *d, float *m) { dm_k4(b, j, d, m); }
__device__ __forceinline__ i32 codes_q5_k(const u8 *b, int j, int q) {
    return ((ld_i32(b + 48 + 32 * (j / 2) + 4 * q) >> (4 * (j % 2))) & 0x0F0F0F0F) |
           (((ld_i32(b + 16 + 4 * q) >> j) & 0x01010101) << 4);
}
__device__ __forceinline__ void scales_q5_k(const u8 *b, int j, int, float *d, float *m) { dm_k4(b, j, d, m); }
// Q6_K: 4 low bits from ql, 2 high from qh, the code less 32; an 8-bit scale per 16 values.
__device__ __forceinline__ i32 codes_q6_k(const u8 *b, int j, int q) {
    const int half = j / 4, quarter = j % 4;
    const u8 *ql = b + 64 * half + (quarter & 1 ? 32 : 0), *qh = b + 128 + 32 * half;
    return ((ld_i32(ql + 4 * q) >> (quarter >= 2 ? 4 : 0)) & 0x0F0F0F0F) |
           (((ld_i32(qh + 4 * q) >> (2 * quarter)) & 0x03030303) << 4);
}
__device__ __forceinline__ void scales_q6_k(const u8 *b, int j, int h, float *d, float *m) {
    *d = h2f(rd16(b + 208)) * ((const i8 *)(b + 192))[2 * j + h];
    *m = -32.0f * *d;
}
// IQ4_XS: IQ4_NL's values, a 6-bit scale less 32 per 32 values.
__device__ __forceinline__ i32 codes_iq4_xs(const u8 *b, int j, int q) {
    return lut4(KV_IQ4NL, ld_i32(b + 8 + 16 * j + 4 * (q & 3)), q & 4);
}
__device__ __forceinline__ void scales_iq4_xs(const u8 *b, int j, int, float *d, float *m) {
    const int ls = ((b[4 + j / 2] >> (4 * (j % 2))) & 15) | (((rd16(b + 2) >> (2 * j)) & 3) << 4);
    *d = h2f(rd16(b)) * (ls - 32);
    *m = 0.0f;
}

// The tile both kernels share: weight rows row0..row0 + MMQ_ROWS of w (nrows rows, row_bytes
// apart) over Q8_1 blocks ib..ie, times the block's columns: column c's Q8_1 blocks start at
// ycol[c], its output (indexed by row) at ocol[c] (both null past the last column; set in
// shared memory before). MMQ_THREADS threads; MMQ_KB Q8_1 blocks (32 values each) staged per
// pass, blocks past ie as zeros. Weight blocks of SUB 32-value sub-blocks (1, or 8 for the
// 256-value types).
#define MMQ_TILE(T, BYTES, SUB)                                                               \
    {                                                                                         \
        __shared__ i32 wq[MMQ_ROWS * MMQ_STRIDE];                                             \
        __shared__ float wd[MMQ_ROWS * 2 * MMQ_KB], wm[MMQ_ROWS * 2 * MMQ_KB];                \
        __shared__ i32 yq_s[MMQ_COLS * MMQ_STRIDE];                                           \
        __shared__ float yd[MMQ_COLS * MMQ_KB], ysum[MMQ_COLS * 2 * MMQ_KB];                  \
        const int tid = threadIdx.x, warp = tid / WARP, lane = tid % WARP;                    \
        const int g = lane / 4, t = lane % 4;                                                 \
        float acc[4][4];                                                                      \
        for (int n = 0; n < 4; ++n)                                                           \
            for (int k = 0; k < 4; ++k) acc[n][k] = 0.0f;                                     \
        for (int i0 = ib; i0 < ie; i0 += MMQ_KB) {                                            \
            _Pragma("unroll 8") for (int e = tid; e < MMQ_ROWS * 8 * MMQ_KB; e += MMQ_THREADS) { \
                const int r = e / (8 * MMQ_KB), word = e % (8 * MMQ_KB);                      \
                const int row = row0 + r, i = i0 + word / 8;                                  \
                const u8 *wb = w + (i64)row * row_bytes + (i64)(i / SUB) * BYTES;             \
                wq[r * MMQ_STRIDE + word] =                                                   \
                    row < nrows && i < ie ? codes_##T(wb, i % SUB, word % 8) : 0;             \
            }                                                                                 \
            for (int e = tid; e < MMQ_ROWS * 2 * MMQ_KB; e += MMQ_THREADS) {                  \
                const int r = e / (2 * MMQ_KB), row = row0 + r, i = i0 + (e / 2) % MMQ_KB;    \
                const u8 *wb = w + (i64)row * row_bytes + (i64)(i / SUB) * BYTES;             \
                float d = 0.0f, m = 0.0f;                                                     \
                if (row < nrows && i < ie) scales_##T(wb, i % SUB, e % 2, &d, &m);            \
                wd[e] = d;                                                                    \
                wm[e] = m;                                                                    \
            }                                                                                 \
            for (int e = tid; e < MMQ_COLS * 2 * MMQ_KB; e += MMQ_THREADS) {                  \
                const int c = e / (2 * MMQ_KB), kb = (e / 2) % MMQ_KB, h = e % 2;             \
                const int i = i0 + kb;                                                        \
                const bool live = ycol[c] != nullptr && i < ie;                               \
                const u8 *yb = live ? ycol[c] + (i64)i * Q8_1_BYTES : nullptr;                \
                i32 s = 0;                                                                    \
                for (int k = 0; k < 4; ++k) {                                                 \
                    const i32 v = live ? ld_i32(yb + 4 + 16 * h + 4 * k) : 0;                 \
                    yq_s[c * MMQ_STRIDE + 8 * kb + 4 * h + k] = v;                            \
                    s = dp4a(v, 0x01010101, s);                                               \
                }                                                                             \
                ysum[e] = (float)s;                                                           \
                if (h == 0) yd[c * MMQ_KB + kb] = live ? h2f(rd16(yb)) : 0.0f;                \
            }                                                                                 \
            __syncthreads();                                                                  \
            const int r = warp * 16 + g;                                                      \
            for (int kh = 0; kh < 2 * MMQ_KB; ++kh) {                                         \
                const int kb = kh / 2;                                                        \
                const i32 a0 = wq[r * MMQ_STRIDE + 4 * kh + t];                               \
                const i32 a1 = wq[(r + 8) * MMQ_STRIDE + 4 * kh + t];                         \
                const float d0 = wd[r * 2 * MMQ_KB + kh], d1 = wd[(r + 8) * 2 * MMQ_KB + kh]; \
                const float m0 = wm[r * 2 * MMQ_KB + kh], m1 = wm[(r + 8) * 2 * MMQ_KB + kh]; \
                for (int n = 0; n < 4; ++n) {                                                 \
                    i32 c[4] = {0, 0, 0, 0};                                                  \
                    mma_s8_16816(c, a0, a1, yq_s[(8 * n + g) * MMQ_STRIDE + 4 * kh + t]);     \
                    for (int k = 0; k < 4; ++k) {                                             \
                        const int oc = 8 * n + 2 * t + (k & 1);                               \
                        const float d = k < 2 ? d0 : d1, m = k < 2 ? m0 : m1;                 \
                        const float s = d * (float)c[k] + m * ysum[oc * 2 * MMQ_KB + kh];     \
                        acc[n][k] += yd[oc * MMQ_KB + kb] * s;                                \
                    }                                                                         \
                }                                                                             \
            }                                                                                 \
            __syncthreads();                                                                  \
        }                                                                                     \
        for (int n = 0; n < 4; ++n)                                                           \
            for (int k = 0; k < 4; ++k) {                                                     \
                const int row = row0 + warp * 16 + g + (k < 2 ? 0 : 8);                       \
                float *out = ocol[8 * n + 2 * t + (k & 1)];                                   \
                if (row < nrows && out != nullptr) out[row] = acc[n][k];                      \
            }                                                                                 \
    }

// MUL_MAT: blockIdx.x a block of MMQ_ROWS weight rows, blockIdx.y one of MMQ_COLS columns,
// blockIdx.z a share of the K dimension (split K: Q8_1 blocks z * kper .. (z + 1) * kper, its
// sums written split_stride floats after share z - 1's, for `mmq_sum_splits` to add up; one
// share: the whole row, straight into the output).
#define MMQ(T, BYTES, SUB)                                                                    \
    extern "C" __global__ void mmq_##T(const u8 *w, const u8 *yq, float *dst, int nrows,     \
                                       int nblocks, i64 row_bytes, int ncols, i64 dst_col,   \
                                       int kper, i64 split_stride) {                          \
        pdl_start();                                                                          \
        __shared__ const u8 *ycol[MMQ_COLS];                                                  \
        __shared__ float *ocol[MMQ_COLS];                                                     \
        const int row0 = blockIdx.x * MMQ_ROWS;                                               \
        const int ib = blockIdx.z * kper, ie = min(nblocks, ib + kper);                       \
        if (threadIdx.x < MMQ_COLS) {                                                         \
            const int col = blockIdx.y * MMQ_COLS + threadIdx.x;                              \
            const bool live = col < ncols;                                                    \
            ycol[threadIdx.x] = live ? yq + (i64)col * nblocks * Q8_1_BYTES : nullptr;        \
            ocol[threadIdx.x] =                                                               \
                live ? dst + blockIdx.z * split_stride + (i64)col * dst_col : nullptr;        \
        }                                                                                     \
        __syncthreads();                                                                      \
        MMQ_TILE(T, BYTES, SUB)                                                               \
    }

// MUL_MAT_ID of a batch, experts grouped (`moe_group_pairs`): blockIdx.z an expert,
// blockIdx.y a block of MMQ_COLS of the (slot, token) pairs routed to it (blocks past its
// count return at once), blockIdx.x a block of MMQ_ROWS rows of its matrix (experts
// expert_bytes apart). Pair p = t * n_used + e reads activation column (t, e % nb) (Q8_1,
// columns of nblocks blocks in that order) and writes dst row (e, t) of nrows floats.
#define MMQ_ID(T, BYTES, SUB)                                                                 \
    extern "C" __global__ void mmq_id_##T(const u8 *experts, const u8 *yq, float *dst,       \
                                          const i32 *groups, int nrows, int nblocks,         \
                                          i64 row_bytes, i64 expert_bytes, int n_expert,     \
                                          int n_used, int nb) {                              \
        pdl_start();                                                                          \
        __shared__ const u8 *ycol[MMQ_COLS];                                                  \
        __shared__ float *ocol[MMQ_COLS];                                                     \
        const int ex = blockIdx.z, begin = groups[ex], count = groups[ex + 1] - begin;        \
        if ((int)blockIdx.y * MMQ_COLS >= count) return;                                      \
        if (threadIdx.x < MMQ_COLS) {                                                         \
            const int j = blockIdx.y * MMQ_COLS + threadIdx.x;                                \
            const u8 *y = nullptr;                                                            \
            float *o = nullptr;                                                               \
            if (j < count) {                                                                  \
                const int p = groups[n_expert + 1 + begin + j], t = p / n_used, e = p % n_used; \
                y = yq + ((i64)t * nb + e % nb) * nblocks * Q8_1_BYTES;                       \
                o = dst + ((i64)t * n_used + e) * nrows;                                      \
            }                                                                                 \
            ycol[threadIdx.x] = y;                                                            \
            ocol[threadIdx.x] = o;                                                            \
        }                                                                                     \
        __syncthreads();                                                                      \
        const u8 *w = experts + ex * expert_bytes;                                            \
        const int row0 = blockIdx.x * MMQ_ROWS, ib = 0, ie = nblocks;                         \
        MMQ_TILE(T, BYTES, SUB)                                                               \
    }

MMQ(q4_0, Q4_0_BYTES, 1)
MMQ(q4_1, Q4_1_BYTES, 1)
MMQ(q5_0, Q5_0_BYTES, 1)
MMQ(q5_1, Q5_1_BYTES, 1)
MMQ(q8_0, Q8_0_BYTES, 1)
MMQ(iq4_nl, IQ4_NL_BYTES, 1)
MMQ(mxfp4, MXFP4_BYTES, 1)
MMQ(q2_k, Q2_K_BYTES, 8)
MMQ(q3_k, Q3_K_BYTES, 8)
MMQ(q4_k, Q4_K_BYTES, 8)
MMQ(q5_k, Q5_K_BYTES, 8)
MMQ(q6_k, Q6_K_BYTES, 8)
MMQ(iq4_xs, IQ4_XS_BYTES, 8)

MMQ_ID(q4_0, Q4_0_BYTES, 1)
MMQ_ID(q4_1, Q4_1_BYTES, 1)
MMQ_ID(q5_0, Q5_0_BYTES, 1)
MMQ_ID(q5_1, Q5_1_BYTES, 1)
MMQ_ID(q8_0, Q8_0_BYTES, 1)
MMQ_ID(iq4_nl, IQ4_NL_BYTES, 1)
MMQ_ID(mxfp4, MXFP4_BYTES, 1)
MMQ_ID(q2_k, Q2_K_BYTES, 8)
MMQ_ID(q3_k, Q3_K_BYTES, 8)
MMQ_ID(q4_k, Q4_K_BYTES, 8)
MMQ_ID(q5_k, Q5_K_BYTES, 8)
MMQ_ID(q6_k, Q6_K_BYTES, 8)
MMQ_ID(iq4_xs, IQ4_XS_BYTES, 8)

// The split-K shares' sums added in share order: dst[col][row] (columns dst_col floats apart)
// = sum over z of part[z][col][row] (shares of ncols x nrows floats, packed).
extern "C" __global__ void mmq_sum_splits(const float *part, float *dst, int nrows, int ncols,
                                          int splits, i64 dst_col) {
    pdl_start();
    const i64 n = (i64)nrows * ncols;
    GRID_STRIDE(i, n) {
        float s = 0.0f;
        for (int z = 0; z < splits; ++z) s += part[z * n + i];
        dst[(i / nrows) * dst_col + i % nrows] = s;
    }
}

// MUL_MAT_ID's grouping for mmq_id_*: the (slot, token) pairs of ids [n_used, n_tokens] (tokens
// ids_stride apart) by expert into groups: groups[ex] .. groups[ex + 1] index the list at
// groups + n_expert + 1 (pair p = t * n_used + e; any order within a group, each column's sums
// being its own), counted in groups + n_expert + 1 + n_pairs (n_expert more). Pairs whose id is
// out of range are in no group; their dst rows (nrows floats) become NaN. One block.
extern "C" __global__ void moe_group_pairs(const i32 *ids, i64 ids_stride, int n_used,
                                           int n_tokens, int n_expert, i32 *groups, float *dst,
                                           int nrows) {
    pdl_start();
    const int n = n_used * n_tokens;
    i32 *list = groups + n_expert + 1, *cursor = list + n;
    for (int ex = threadIdx.x; ex <= n_expert; ex += blockDim.x) groups[ex] = 0;
    __syncthreads();
    for (int p = threadIdx.x; p < n; p += blockDim.x) {
        const i32 ex = ids[(i64)(p / n_used) * ids_stride + p % n_used];
        if (ex >= 0 && ex < n_expert) atomicAdd(&groups[ex + 1], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0)
        for (int ex = 0; ex < n_expert; ++ex) {
            groups[ex + 1] += groups[ex];
            cursor[ex] = groups[ex];
        }
    __syncthreads();
    for (int p = threadIdx.x; p < n; p += blockDim.x) {
        const i32 ex = ids[(i64)(p / n_used) * ids_stride + p % n_used];
        if (ex >= 0 && ex < n_expert) {
            list[atomicAdd(&cursor[ex], 1)] = p;
        } else {
            for (int r = 0; r < nrows; ++r) dst[(i64)p * nrows + r] = __int_as_float(0x7fc00000);
        }
    }
}
