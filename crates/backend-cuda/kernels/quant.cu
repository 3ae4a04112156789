// Quantized weights: dequantization (to f32 for GET_ROWS, to f16 for cuBLAS products), the
// activations' Q8_1 quantization, and the matrix-vector products of decoding with int8 dot
// products (llama.cpp's MMVQ idea: activations quantized once to Q8_1, dp4a per 4 bytes).

// One kernel per type: row `blockIdx.y` of a weight (ncols values, row_bytes apart), threads
// over its values, to f32 (get_rows: the row index comes from `ids`) or to f16 (whole matrix).
#define DEQUANT(T, QK, BYTES, F)                                                              \
    extern "C" __global__ void get_rows_##T(const u8 *src, const i32 *ids, float *dst,      \
                                            int ncols, i64 row_bytes) {                      \
        const u8 *row = src + (i64)ids[blockIdx.y] * row_bytes;                              \
        float *out = dst + (i64)blockIdx.y * ncols;                                           \
        for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < ncols;                        \
             i += gridDim.x * blockDim.x)                                                     \
            out[i] = F(row + (i / QK) * BYTES, i % QK);                                       \
    }                                                                                         \
    extern "C" __global__ void dequant_f16_##T(const u8 *src, u16 *dst, int ncols,           \
                                               i64 row_bytes) {                              \
        const u8 *row = src + (i64)blockIdx.y * row_bytes;                                    \
        u16 *out = dst + (i64)blockIdx.y * ncols;                                             \
        for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < ncols;                        \
             i += gridDim.x * blockDim.x)                                                     \
            out[i] = f2h(F(row + (i / QK) * BYTES, i % QK));                                  \
    }

DEQUANT(q4_0, 32, Q4_0_BYTES, deq_q4_0)
DEQUANT(q4_1, 32, Q4_1_BYTES, deq_q4_1)
DEQUANT(q5_0, 32, Q5_0_BYTES, deq_q5_0)
DEQUANT(q5_1, 32, Q5_1_BYTES, deq_q5_1)
DEQUANT(q8_0, 32, Q8_0_BYTES, deq_q8_0)
DEQUANT(q4_k, 256, Q4_K_BYTES, deq_q4_k)
DEQUANT(q6_k, 256, Q6_K_BYTES, deq_q6_k)

extern "C" __global__ void get_rows_f32(const float *src, const i32 *ids, float *dst,
                                        int ncols) {
    const float *row = src + (i64)ids[blockIdx.y] * ncols;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < ncols; i += gridDim.x * blockDim.x)
        dst[(i64)blockIdx.y * ncols + i] = row[i];
}

extern "C" __global__ void get_rows_f16(const u16 *src, const i32 *ids, float *dst,
                                        int ncols) {
    const u16 *row = src + (i64)ids[blockIdx.y] * ncols;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < ncols; i += gridDim.x * blockDim.x)
        dst[(i64)blockIdx.y * ncols + i] = h2f(row[i]);
}

// f32 rows -> Q8_1 blocks (d = amax / 127, q = roundf(x / d), s = d * sum(q)), one warp per
// block of 32, one lane per value; rows of ncols (a multiple of 32) values.
extern "C" __global__ void quantize_q8_1(const float *x, u8 *dst, i64 nblocks) {
    const i64 blk = (i64)blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    if (blk >= nblocks) return;
    const int lane = threadIdx.x % WARP;
    const float v = x[blk * 32 + lane];
    const float amax = warp_max(fabsf(v));
    const float d = amax / 127.0f;
    const int q = (int)(amax == 0.0f ? 0.0f : roundf(v / d));
    const int sum = warp_sum_i(q);
    u8 *b = dst + blk * Q8_1_BYTES;
    b[4 + lane] = (u8)(i8)q;
    if (lane == 0) {
        const u16 dh = f2h(d), sh = f2h(d * sum);
        b[0] = dh & 0xFF; b[1] = dh >> 8; b[2] = sh & 0xFF; b[3] = sh >> 8;
    }
}

// Four consecutive bytes of a block as one i32 (blocks are only 2-byte aligned).
__device__ __forceinline__ i32 ld_i32(const u8 *p) { return (i32)rd32(p); }

// Integer dot of 32-value weight block j (bytes `b`) with the Q8_1 block `y`, scaled: one
// lane handles 8 values (4 lanes per block).
__device__ __forceinline__ float vdot_q4_0(const u8 *b, const u8 *y, int part) {
    const i32 q = ld_i32(b + 2 + 4 * part);
    const i32 lo = q & 0x0F0F0F0F, hi = (q >> 4) & 0x0F0F0F0F;
    int s = dp4a(lo, ld_i32(y + 4 + 4 * part), 0);
    s = dp4a(hi, ld_i32(y + 4 + 16 + 4 * part), s);
    // sum((q - 8) * y) = sum(q * y) - 8 * sum(y); sum(y) of this part is s_y / d_y, taken
    // once per block as (8 / 4) * s for each of the 4 lanes.
    const float dy = h2f(rd16(y)), sy = h2f(rd16(y + 2));
    return h2f(rd16(b)) * (s * dy - 2.0f * sy);
}
__device__ __forceinline__ float vdot_q8_0(const u8 *b, const u8 *y, int part) {
    int s = dp4a(ld_i32(b + 2 + 8 * part), ld_i32(y + 4 + 8 * part), 0);
    s = dp4a(ld_i32(b + 6 + 8 * part), ld_i32(y + 8 + 8 * part), s);
    return h2f(rd16(b)) * h2f(rd16(y)) * s;
}
__device__ __forceinline__ float vdot_q5_0(const u8 *b, const u8 *y, int part) {
    const u32 qh = rd32(b + 2);
    const i32 q = ld_i32(b + 6 + 4 * part);
    // The fifth bits of values 4*part..4*part+3 (low nibbles) and 16+4*part.. (high).
    i32 lo = q & 0x0F0F0F0F, hi = (q >> 4) & 0x0F0F0F0F;
    for (int k = 0; k < 4; ++k) {
        lo |= ((qh >> (4 * part + k)) & 1) << (8 * k + 4);
        hi |= ((qh >> (16 + 4 * part + k)) & 1) << (8 * k + 4);
    }
    int s = dp4a(lo, ld_i32(y + 4 + 4 * part), 0);
    s = dp4a(hi, ld_i32(y + 4 + 16 + 4 * part), s);
    const float dy = h2f(rd16(y)), sy = h2f(rd16(y + 2));
    return h2f(rd16(b)) * (s * dy - 4.0f * sy);
}

__device__ __forceinline__ float vdot_q4_1(const u8 *b, const u8 *y, int part) {
    const i32 q = ld_i32(b + 4 + 4 * part);
    const i32 lo = q & 0x0F0F0F0F, hi = (q >> 4) & 0x0F0F0F0F;
    int s = dp4a(lo, ld_i32(y + 4 + 4 * part), 0);
    s = dp4a(hi, ld_i32(y + 4 + 16 + 4 * part), s);
    // sum((d q + m) y) = d sum(q y) + m sum(y); the block's m sum(y) = m s_y, a quarter per
    // lane.
    const float dy = h2f(rd16(y)), sy = h2f(rd16(y + 2));
    return h2f(rd16(b)) * dy * s + h2f(rd16(b + 2)) * sy * 0.25f;
}
// The fifth bits of Q5 blocks: values 4*part.. (low nibbles) and 16+4*part.. (high) of q.
__device__ __forceinline__ void q5_bits(u32 qh, i32 q, int part, i32 &lo, i32 &hi) {
    lo = q & 0x0F0F0F0F;
    hi = (q >> 4) & 0x0F0F0F0F;
    for (int k = 0; k < 4; ++k) {
        lo |= ((qh >> (4 * part + k)) & 1) << (8 * k + 4);
        hi |= ((qh >> (16 + 4 * part + k)) & 1) << (8 * k + 4);
    }
}
__device__ __forceinline__ float vdot_q5_1(const u8 *b, const u8 *y, int part) {
    i32 lo, hi;
    q5_bits(rd32(b + 4), ld_i32(b + 8 + 4 * part), part, lo, hi);
    int s = dp4a(lo, ld_i32(y + 4 + 4 * part), 0);
    s = dp4a(hi, ld_i32(y + 4 + 16 + 4 * part), s);
    const float dy = h2f(rd16(y)), sy = h2f(rd16(y + 2));
    return h2f(rd16(b)) * dy * s + h2f(rd16(b + 2)) * sy * 0.25f;
}
// Four nibbles of q (low or high halves of its bytes) through a 16-entry table, as four i8.
__device__ __forceinline__ i32 lut4(const i8 *table, i32 q, int shift) {
    u32 r = 0;
    for (int k = 0; k < 4; ++k) r |= (u32)(u8)table[(q >> (8 * k + shift)) & 15] << (8 * k);
    return (i32)r;
}
__device__ __forceinline__ float vdot_iq4_nl(const u8 *b, const u8 *y, int part) {
    const i32 q = ld_i32(b + 2 + 4 * part);
    int s = dp4a(lut4(KV_IQ4NL, q, 0), ld_i32(y + 4 + 4 * part), 0);
    s = dp4a(lut4(KV_IQ4NL, q, 4), ld_i32(y + 4 + 16 + 4 * part), s);
    return h2f(rd16(b)) * h2f(rd16(y)) * s;
}
__device__ __forceinline__ float vdot_mxfp4(const u8 *b, const u8 *y, int part) {
    const i32 q = ld_i32(b + 1 + 4 * part);
    int s = dp4a(lut4(KV_MXFP4, q, 0), ld_i32(y + 4 + 4 * part), 0);
    s = dp4a(lut4(KV_MXFP4, q, 4), ld_i32(y + 4 + 16 + 4 * part), s);
    return e8m0_half(b[0]) * h2f(rd16(y)) * s;
}

// Y = W X for 1 to 8 activation columns (MMVQ): one warp per weight row, 4 lanes per 32-value
// block, the columns already Q8_1 (`quantize_q8_1`, column c's nblocks blocks after column
// c - 1's); column c of the output starts dst_col floats after column c - 1's.
#define MMVQ(T, BYTES, VDOT)                                                                  \
    extern "C" __global__ void mmvq_##T(const u8 *w, const u8 *yq, float *dst, int nrows,    \
                                        int nblocks, i64 row_bytes, int ncols, i64 dst_col) { \
        const int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;               \
        if (row >= nrows) return;                                                             \
        const int lane = threadIdx.x % WARP;                                                  \
        const u8 *wr = w + (i64)row * row_bytes;                                              \
        float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};                      \
        for (int i = lane / 4; i < nblocks; i += WARP / 4) {                                  \
            const u8 *wb = wr + (i64)i * BYTES;                                               \
            _Pragma("unroll") for (int c = 0; c < 8; ++c) {                                   \
                if (c < ncols)                                                                \
                    acc[c] += VDOT(wb, yq + ((i64)c * nblocks + i) * Q8_1_BYTES, lane % 4);   \
            }                                                                                 \
        }                                                                                     \
        _Pragma("unroll") for (int c = 0; c < 8; ++c) {                                       \
            if (c < ncols) {                                                                  \
                const float v = warp_sum(acc[c]);                                             \
                if (lane == 0) dst[(i64)c * dst_col + row] = v;                               \
            }                                                                                 \
        }                                                                                     \
    }

MMVQ(q4_0, Q4_0_BYTES, vdot_q4_0)
MMVQ(q4_1, Q4_1_BYTES, vdot_q4_1)
MMVQ(q5_0, Q5_0_BYTES, vdot_q5_0)
MMVQ(q5_1, Q5_1_BYTES, vdot_q5_1)
MMVQ(q8_0, Q8_0_BYTES, vdot_q8_0)
MMVQ(iq4_nl, IQ4_NL_BYTES, vdot_iq4_nl)
MMVQ(mxfp4, MXFP4_BYTES, vdot_mxfp4)


// K-quants and IQ4_XS (256-value superblocks), one 32-value sub-block j of superblock `b` at a
// time, against the Q8_1 block of the same 32 values; lane `part` takes values 8*part..+7
// (IQ4_XS: the nibble halves, as the 32-value types).
__device__ __forceinline__ i32 q8_sum(const u8 *y, int part) {
    // The exact integer sum of the lane's 8 activation quants.
    return dp4a(0x01010101, ld_i32(y + 4 + 8 * part), dp4a(0x01010101, ld_i32(y + 8 + 8 * part), 0));
}
__device__ __forceinline__ float vdot_q2_k(const u8 *b, int j, const u8 *y, int part) {
    const u8 *q = b + 16 + 32 * (j / 4) + 8 * part;
    const int sh = 2 * (j % 4);
    const i32 a0 = (ld_i32(q) >> sh) & 0x03030303, a1 = (ld_i32(q + 4) >> sh) & 0x03030303;
    int s = dp4a(a0, ld_i32(y + 4 + 8 * part), 0);
    s = dp4a(a1, ld_i32(y + 8 + 8 * part), s);
    const u8 sc = b[2 * j + part / 2];
    const float dy = h2f(rd16(y));
    return dy * (h2f(rd16(b + 80)) * (sc & 15) * s - h2f(rd16(b + 82)) * (sc >> 4) * q8_sum(y, part));
}
__device__ __forceinline__ float vdot_q4_k(const u8 *b, int j, const u8 *y, int part) {
    const u8 *q = b + 16 + 32 * (j / 2) + 8 * part;
    const int sh = 4 * (j % 2);
    const i32 a0 = (ld_i32(q) >> sh) & 0x0F0F0F0F, a1 = (ld_i32(q + 4) >> sh) & 0x0F0F0F0F;
    int s = dp4a(a0, ld_i32(y + 4 + 8 * part), 0);
    s = dp4a(a1, ld_i32(y + 8 + 8 * part), s);
    int sc, mn;
    k4_scale_min(j, b + 4, &sc, &mn);
    const float dy = h2f(rd16(y));
    return dy * (h2f(rd16(b)) * sc * s - h2f(rd16(b + 2)) * mn * q8_sum(y, part));
}
__device__ __forceinline__ float vdot_q5_k(const u8 *b, int j, const u8 *y, int part) {
    const u8 *q = b + 48 + 32 * (j / 2) + 8 * part, *qh = b + 16 + 8 * part;
    const int sh = 4 * (j % 2);
    const i32 a0 = ((ld_i32(q) >> sh) & 0x0F0F0F0F) | (((ld_i32(qh) >> j) & 0x01010101) << 4);
    const i32 a1 = ((ld_i32(q + 4) >> sh) & 0x0F0F0F0F) | (((ld_i32(qh + 4) >> j) & 0x01010101) << 4);
    int s = dp4a(a0, ld_i32(y + 4 + 8 * part), 0);
    s = dp4a(a1, ld_i32(y + 8 + 8 * part), s);
    int sc, mn;
    k4_scale_min(j, b + 4, &sc, &mn);
    const float dy = h2f(rd16(y));
    return dy * (h2f(rd16(b)) * sc * s - h2f(rd16(b + 2)) * mn * q8_sum(y, part));
}
__device__ __forceinline__ float vdot_q6_k(const u8 *b, int j, const u8 *y, int part) {
    const int half = j / 4, quarter = j % 4;
    const u8 *ql = b + 64 * half + (quarter & 1 ? 32 : 0) + 8 * part;
    const u8 *qh = b + 128 + 32 * half + 8 * part;
    const int sh = quarter >= 2 ? 4 : 0, hs = 2 * quarter;
    const i32 a0 = ((ld_i32(ql) >> sh) & 0x0F0F0F0F) | (((ld_i32(qh) >> hs) & 0x03030303) << 4);
    const i32 a1 =
        ((ld_i32(ql + 4) >> sh) & 0x0F0F0F0F) | (((ld_i32(qh + 4) >> hs) & 0x03030303) << 4);
    int s = dp4a(a0, ld_i32(y + 4 + 8 * part), 0);
    s = dp4a(a1, ld_i32(y + 8 + 8 * part), s);
    // The quants are q - 32: sum((q - 32) y) = sum(q y) - 32 sum(y).
    const int sc = ((const i8 *)(b + 192))[8 * half + 2 * quarter + part / 2];
    return h2f(rd16(b + 208)) * sc * h2f(rd16(y)) * (float)(s - 32 * q8_sum(y, part));
}
__device__ __forceinline__ float vdot_iq4_xs(const u8 *b, int j, const u8 *y, int part) {
    const i32 q = ld_i32(b + 8 + 16 * j + 4 * part);
    const int ls = ((b[4 + j / 2] >> (4 * (j % 2))) & 15) | (((rd16(b + 2) >> (2 * j)) & 3) << 4);
    int s = dp4a(lut4(KV_IQ4NL, q, 0), ld_i32(y + 4 + 4 * part), 0);
    s = dp4a(lut4(KV_IQ4NL, q, 4), ld_i32(y + 4 + 16 + 4 * part), s);
    return h2f(rd16(b)) * (ls - 32) * h2f(rd16(y)) * s;
}

// MMVQ for the 256-value types: as MMVQ, each 32-value block i being sub-block i % 8 of
// superblock i / 8.
#define MMVQ_K(T, BYTES, VDOT)                                                                \
    extern "C" __global__ void mmvq_##T(const u8 *w, const u8 *yq, float *dst, int nrows,    \
                                        int nblocks, i64 row_bytes, int ncols, i64 dst_col) { \
        const int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;               \
        if (row >= nrows) return;                                                             \
        const int lane = threadIdx.x % WARP;                                                  \
        const u8 *wr = w + (i64)row * row_bytes;                                              \
        float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};                      \
        for (int i = lane / 4; i < nblocks; i += WARP / 4) {                                  \
            const u8 *sb = wr + (i64)(i / 8) * BYTES;                                         \
            _Pragma("unroll") for (int c = 0; c < 8; ++c) {                                   \
                if (c < ncols)                                                                \
                    acc[c] += VDOT(sb, i % 8, yq + ((i64)c * nblocks + i) * Q8_1_BYTES,       \
                                   lane % 4);                                                 \
            }                                                                                 \
        }                                                                                     \
        _Pragma("unroll") for (int c = 0; c < 8; ++c) {                                       \
            if (c < ncols) {                                                                  \
                const float v = warp_sum(acc[c]);                                             \
                if (lane == 0) dst[(i64)c * dst_col + row] = v;                               \
            }                                                                                 \
        }                                                                                     \
    }

MMVQ_K(q2_k, Q2_K_BYTES, vdot_q2_k)
MMVQ_K(q4_k, Q4_K_BYTES, vdot_q4_k)
MMVQ_K(q5_k, Q5_K_BYTES, vdot_q5_k)
MMVQ_K(q6_k, Q6_K_BYTES, vdot_q6_k)
MMVQ_K(iq4_xs, IQ4_XS_BYTES, vdot_iq4_xs)

// y = W x for f16 weights and f32 activations: one warp per row, two halves per load.
extern "C" __global__ void mmv_f16(const u16 *w, const float *x, float *dst, int nrows,
                                   int ncols) {
    const int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    if (row >= nrows) return;
    const int lane = threadIdx.x % WARP;
    const u16 *wr = w + (i64)row * ncols;
    float acc = 0.0f;
    for (int i = lane; i < ncols; i += WARP) acc += h2f(wr[i]) * x[i];
    acc = warp_sum(acc);
    if (lane == 0) dst[row] = acc;
}
