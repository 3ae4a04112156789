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
// block of 32, one lane per value (`q8_1_warp`); rows of ncols (a multiple of 32) values.
extern "C" __global__ void quantize_q8_1(const float *x, u8 *dst, i64 nblocks) {
    const i64 blk = (i64)blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    if (blk >= nblocks) return;
    const int lane = threadIdx.x % WARP;
    q8_1_warp(x[blk * 32 + lane], lane, dst + blk * Q8_1_BYTES);
}

// The MMVQ loops of one warp over one weight row (rows gr and ur for the gated pair) for NC
// activation columns, NC a compile-time count: no branch per column in the loop (branches
// between the unrolled blocks kept their loads from issuing together). `vdot` is the type's
// dot product; the `*_cols` dispatchers pick NC from the run-time count (1 to 8).
template <int NC, int BYTES, int SUB, class V>
__device__ __forceinline__ void mmvq_acc(const u8 *wr, const u8 *yq, int nblocks, int lane,
                                         float (&acc)[8], V vdot) {
#pragma unroll 4
    for (int i = lane / 4; i < nblocks; i += WARP / 4) {
        const u8 *wb = wr + (i64)(i / SUB) * BYTES;
#pragma unroll
        for (int c = 0; c < NC; ++c)
            acc[c] += vdot(wb, i % SUB, yq + ((i64)c * nblocks + i) * Q8_1_BYTES, lane % 4);
    }
}
template <int NC, int BYTES, int SUB, class V>
__device__ __forceinline__ void mmvq_glu_acc(const u8 *gr, const u8 *ur, const u8 *yq,
                                             int nblocks, int lane, float (&ag)[8],
                                             float (&au)[8], V vdot) {
#pragma unroll 4
    for (int i = lane / 4; i < nblocks; i += WARP / 4) {
        const u8 *gb = gr + (i64)(i / SUB) * BYTES, *ub = ur + (i64)(i / SUB) * BYTES;
#pragma unroll
        for (int c = 0; c < NC; ++c) {
            const u8 *y = yq + ((i64)c * nblocks + i) * Q8_1_BYTES;
            ag[c] += vdot(gb, i % SUB, y, lane % 4);
            au[c] += vdot(ub, i % SUB, y, lane % 4);
        }
    }
}
#define MMVQ_CASES(CALL)                                                                      \
    switch (ncols) {                                                                          \
    case 1: CALL(1); break;                                                                   \
    case 2: CALL(2); break;                                                                   \
    case 3: CALL(3); break;                                                                   \
    case 4: CALL(4); break;                                                                   \
    case 5: CALL(5); break;                                                                   \
    case 6: CALL(6); break;                                                                   \
    case 7: CALL(7); break;                                                                   \
    default: CALL(8); break;                                                                  \
    }
template <int BYTES, int SUB, class V>
__device__ __forceinline__ void mmvq_cols(int ncols, const u8 *wr, const u8 *yq, int nblocks,
                                          int lane, float (&acc)[8], V vdot) {
#define MMVQ_CALL(NC) mmvq_acc<NC, BYTES, SUB>(wr, yq, nblocks, lane, acc, vdot)
    MMVQ_CASES(MMVQ_CALL)
#undef MMVQ_CALL
}
template <int BYTES, int SUB, class V>
__device__ __forceinline__ void mmvq_glu_cols(int ncols, const u8 *gr, const u8 *ur,
                                              const u8 *yq, int nblocks, int lane,
                                              float (&ag)[8], float (&au)[8], V vdot) {
#define MMVQ_CALL(NC) mmvq_glu_acc<NC, BYTES, SUB>(gr, ur, yq, nblocks, lane, ag, au, vdot)
    MMVQ_CASES(MMVQ_CALL)
#undef MMVQ_CALL
}

// Y = W X for 1 to 8 activation columns (MMVQ): one warp per weight row, 4 lanes per 32 values
// (the loop over blocks unrolled four times and specialized per column count, so a lane's loads
// of four blocks are in flight together: one block at a time left 2048-wide Q4_0 rows at about
// 0.25 TB/s on the H200), the columns already Q8_1 (`quantize_q8_1`, column c's nblocks blocks
// after column c - 1's); column c of the output starts dst_col floats after column c - 1's.
// Weight blocks of SUB 32-value sub-blocks (1, or 8 for the 256-value types): 32-value block i
// is sub-block i % SUB of weight block i / SUB.
#define MMVQ(T, BYTES, SUB, VDOT)                                                             \
    extern "C" __global__ void mmvq_##T(const u8 *w, const u8 *yq, float *dst, int nrows,    \
                                        int nblocks, i64 row_bytes, int ncols, i64 dst_col) { \
        const int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;               \
        if (row >= nrows) return;                                                             \
        const int lane = threadIdx.x % WARP;                                                  \
        const u8 *wr = w + (i64)row * row_bytes;                                              \
        float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};                      \
        mmvq_cols<BYTES, SUB>(ncols, wr, yq, nblocks, lane, acc,                              \
                              [](const u8 *b, int j, const u8 *y, int p) { return VDOT(b, j, y, p); }); \
        _Pragma("unroll") for (int c = 0; c < 8; ++c) {                                       \
            if (c < ncols) {                                                                  \
                const float v = warp_sum(acc[c]);                                             \
                if (lane == 0) dst[(i64)c * dst_col + row] = v;                               \
            }                                                                                 \
        }                                                                                     \
    }

// Gate and up products of the same activations and their gated unit in one pass (the
// GateUpGlu window): dst[c][row] = act(gate_row . x_c) * (up_row . x_c), act SiLU (op 0) or
// tanh-GELU (op 1); both weights of type T, the columns Q8_1 as for mmvq_*. The sums are the
// unfused kernels' own, so the result is the unfused nodes'.
#define MMVQ_GLU(T, BYTES, SUB, VDOT)                                                         \
    extern "C" __global__ void mmvq_glu_##T(const u8 *wg, const u8 *wu, const u8 *yq,        \
                                            float *dst, int nrows, int nblocks, i64 rb_g,    \
                                            i64 rb_u, int ncols, i64 dst_col, int op) {      \
        const int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;               \
        if (row >= nrows) return;                                                             \
        const int lane = threadIdx.x % WARP;                                                  \
        const u8 *gr = wg + (i64)row * rb_g, *ur = wu + (i64)row * rb_u;                      \
        float ag[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};                       \
        float au[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};                       \
        mmvq_glu_cols<BYTES, SUB>(ncols, gr, ur, yq, nblocks, lane, ag, au,                   \
                                  [](const u8 *b, int j, const u8 *y, int p) { return VDOT(b, j, y, p); }); \
        _Pragma("unroll") for (int c = 0; c < 8; ++c) {                                       \
            if (c < ncols) {                                                                  \
                const float g = warp_sum(ag[c]);                                              \
                const float u = warp_sum(au[c]);                                              \
                if (lane == 0) dst[(i64)c * dst_col + row] = (op == 0 ? silu(g) : gelu_tanh(g)) * u; \
            }                                                                                 \
        }                                                                                     \
    }

// MUL_MAT_ID's expert products with int8 dots: dst [nrows, n_used, n_tokens] row (e, t) is
// expert ids[t * ids_stride + e]'s matrix (experts expert_bytes apart, rows row_bytes apart)
// times column (e % nb, t) of the activations, already Q8_1 (`quantize_q8_1`, columns of
// nblocks blocks in (slot, token) order). One warp per weight row (MMVQ's loop, one column)
// and blockIdx.y per (slot, token); an expert id out of range gives NaN (a router's ids never
// are).
#define MMVQ_ID(T, BYTES, SUB, VDOT)                                                          \
    extern "C" __global__ void mmvq_id_##T(const u8 *w, const u8 *yq, float *dst,            \
                                           const i32 *ids, int nrows, int nblocks,           \
                                           i64 row_bytes, i64 expert_bytes, int n_expert,    \
                                           int n_used, int nb, i64 ids_stride) {             \
        const int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;               \
        if (row >= nrows) return;                                                             \
        const int lane = threadIdx.x % WARP;                                                  \
        const int e = blockIdx.y % n_used, t = blockIdx.y / n_used;                           \
        const i64 ex = ids[(i64)t * ids_stride + e];                                          \
        float *out = dst + ((i64)t * n_used + e) * nrows + row;                               \
        if (ex < 0 || ex >= n_expert) {                                                       \
            if (lane == 0) *out = __int_as_float(0x7fc00000);                                 \
            return;                                                                           \
        }                                                                                     \
        const u8 *wr = w + ex * expert_bytes + (i64)row * row_bytes;                          \
        const u8 *y = yq + ((i64)t * nb + e % nb) * nblocks * Q8_1_BYTES;                     \
        float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};                      \
        mmvq_acc<1, BYTES, SUB>(wr, y, nblocks, lane, acc,                                    \
                                [](const u8 *b, int j, const u8 *q, int p) { return VDOT(b, j, q, p); }); \
        const float v = warp_sum(acc[0]);                                                     \
        if (lane == 0) *out = v;                                                              \
    }

// Up to three products of the same activation column in one launch (the ProductGroup window:
// a decoder block's Q, K and V): rows of w0, then w1's, then w2's (n2 may be 0), one warp a
// row, each row's sum MMVQ's own for one column (mmvq_acc<1>), so the outputs are the unfused
// kernels' bits. K and V, a few hundred rows each, launched alone left most SMs idle.
#define MMVQ_GROUP(T, BYTES, SUB, VDOT)                                                       \
    extern "C" __global__ void mmvq_group_##T(const u8 *yq, int nblocks, const u8 *w0,       \
                                              const u8 *w1, const u8 *w2, i64 rb0, i64 rb1,  \
                                              i64 rb2, float *d0, float *d1, float *d2,      \
                                              int n0, int n1, int n2) {                      \
        int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;                     \
        const u8 *w = w0;                                                                     \
        i64 rb = rb0;                                                                         \
        float *dst = d0;                                                                      \
        if (row >= n0) {                                                                      \
            row -= n0; w = w1; rb = rb1; dst = d1;                                            \
            if (row >= n1) {                                                                  \
                row -= n1; w = w2; rb = rb2; dst = d2;                                        \
                if (row >= n2) return;                                                        \
            }                                                                                 \
        }                                                                                     \
        const int lane = threadIdx.x % WARP;                                                  \
        float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};                      \
        mmvq_acc<1, BYTES, SUB>(w + (i64)row * rb, yq, nblocks, lane, acc,                    \
                                [](const u8 *b, int j, const u8 *q, int p) { return VDOT(b, j, q, p); }); \
        const float v = warp_sum(acc[0]);                                                     \
        if (lane == 0) dst[row] = v;                                                          \
    }

MMVQ(q4_0, Q4_0_BYTES, 1, vdot_q4_0)
MMVQ(q4_1, Q4_1_BYTES, 1, vdot_q4_1)
MMVQ(q5_0, Q5_0_BYTES, 1, vdot_q5_0)
MMVQ(q5_1, Q5_1_BYTES, 1, vdot_q5_1)
MMVQ(q8_0, Q8_0_BYTES, 1, vdot_q8_0)
MMVQ(iq4_nl, IQ4_NL_BYTES, 1, vdot_iq4_nl)
MMVQ(mxfp4, MXFP4_BYTES, 1, vdot_mxfp4)
MMVQ(q2_k, Q2_K_BYTES, 8, vdot_q2_k)
MMVQ(q3_k, Q3_K_BYTES, 8, vdot_q3_k)
MMVQ(q4_k, Q4_K_BYTES, 8, vdot_q4_k)
MMVQ(q5_k, Q5_K_BYTES, 8, vdot_q5_k)
MMVQ(q6_k, Q6_K_BYTES, 8, vdot_q6_k)
MMVQ(iq4_xs, IQ4_XS_BYTES, 8, vdot_iq4_xs)

MMVQ_ID(q4_0, Q4_0_BYTES, 1, vdot_q4_0)
MMVQ_ID(q4_1, Q4_1_BYTES, 1, vdot_q4_1)
MMVQ_ID(q5_0, Q5_0_BYTES, 1, vdot_q5_0)
MMVQ_ID(q5_1, Q5_1_BYTES, 1, vdot_q5_1)
MMVQ_ID(q8_0, Q8_0_BYTES, 1, vdot_q8_0)
MMVQ_ID(iq4_nl, IQ4_NL_BYTES, 1, vdot_iq4_nl)
MMVQ_ID(mxfp4, MXFP4_BYTES, 1, vdot_mxfp4)
MMVQ_ID(q2_k, Q2_K_BYTES, 8, vdot_q2_k)
MMVQ_ID(q3_k, Q3_K_BYTES, 8, vdot_q3_k)
MMVQ_ID(q4_k, Q4_K_BYTES, 8, vdot_q4_k)
MMVQ_ID(q5_k, Q5_K_BYTES, 8, vdot_q5_k)
MMVQ_ID(q6_k, Q6_K_BYTES, 8, vdot_q6_k)
MMVQ_ID(iq4_xs, IQ4_XS_BYTES, 8, vdot_iq4_xs)

MMVQ_GLU(q4_0, Q4_0_BYTES, 1, vdot_q4_0)
MMVQ_GLU(q4_1, Q4_1_BYTES, 1, vdot_q4_1)
MMVQ_GLU(q5_0, Q5_0_BYTES, 1, vdot_q5_0)
MMVQ_GLU(q5_1, Q5_1_BYTES, 1, vdot_q5_1)
MMVQ_GLU(q8_0, Q8_0_BYTES, 1, vdot_q8_0)
MMVQ_GLU(iq4_nl, IQ4_NL_BYTES, 1, vdot_iq4_nl)
MMVQ_GLU(mxfp4, MXFP4_BYTES, 1, vdot_mxfp4)
MMVQ_GLU(q2_k, Q2_K_BYTES, 8, vdot_q2_k)
MMVQ_GLU(q3_k, Q3_K_BYTES, 8, vdot_q3_k)
MMVQ_GLU(q4_k, Q4_K_BYTES, 8, vdot_q4_k)
MMVQ_GLU(q5_k, Q5_K_BYTES, 8, vdot_q5_k)
MMVQ_GLU(q6_k, Q6_K_BYTES, 8, vdot_q6_k)
MMVQ_GLU(iq4_xs, IQ4_XS_BYTES, 8, vdot_iq4_xs)

MMVQ_GROUP(q4_0, Q4_0_BYTES, 1, vdot_q4_0)
MMVQ_GROUP(q4_1, Q4_1_BYTES, 1, vdot_q4_1)
MMVQ_GROUP(q5_0, Q5_0_BYTES, 1, vdot_q5_0)
MMVQ_GROUP(q5_1, Q5_1_BYTES, 1, vdot_q5_1)
MMVQ_GROUP(q8_0, Q8_0_BYTES, 1, vdot_q8_0)
MMVQ_GROUP(iq4_nl, IQ4_NL_BYTES, 1, vdot_iq4_nl)
MMVQ_GROUP(mxfp4, MXFP4_BYTES, 1, vdot_mxfp4)
MMVQ_GROUP(q2_k, Q2_K_BYTES, 8, vdot_q2_k)
MMVQ_GROUP(q3_k, Q3_K_BYTES, 8, vdot_q3_k)
MMVQ_GROUP(q4_k, Q4_K_BYTES, 8, vdot_q4_k)
MMVQ_GROUP(q5_k, Q5_K_BYTES, 8, vdot_q5_k)
MMVQ_GROUP(q6_k, Q6_K_BYTES, 8, vdot_q6_k)
MMVQ_GROUP(iq4_xs, IQ4_XS_BYTES, 8, vdot_iq4_xs)
