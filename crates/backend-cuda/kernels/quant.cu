// Quantized weights: dequantization (to f32 for GET_ROWS, to f16 for cuBLAS products), the
// activations' Q8_1 quantization, and the matrix-vector products of decoding with int8 dot
// products (llama.cpp's MMVQ idea: activations quantized once to Q8_1, dp4a per 4 bytes).

// One kernel per type: row `blockIdx.y` of a weight (ncols values, row_bytes apart), threads
// over its values, to f32 (get_rows: the row index comes from `ids`) or to f16 (whole matrix).
#define DEQUANT(T, QK, BYTES, F)                                                              \
    extern "C" __global__ void get_rows_##T(const u8 *src, const i32 *ids, float *dst,      \
                                            int ncols, i64 row_bytes) {                      \
        pdl_start();                                                                          \
        const u8 *row = src + (i64)ids[blockIdx.y] * row_bytes;                              \
        float *out = dst + (i64)blockIdx.y * ncols;                                           \
        for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < ncols;                        \
             i += gridDim.x * blockDim.x)                                                     \
            out[i] = F(row + (i / QK) * BYTES, i % QK);                                       \
    }                                                                                         \
    extern "C" __global__ void dequant_f16_##T(const u8 *src, u16 *dst, int ncols,           \
                                               i64 row_bytes) {                              \
        pdl_start();                                                                          \
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
    pdl_start();
    const float *row = src + (i64)ids[blockIdx.y] * ncols;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < ncols; i += gridDim.x * blockDim.x)
        dst[(i64)blockIdx.y * ncols + i] = row[i];
}

extern "C" __global__ void get_rows_f16(const u16 *src, const i32 *ids, float *dst,
                                        int ncols) {
    pdl_start();
    const u16 *row = src + (i64)ids[blockIdx.y] * ncols;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < ncols; i += gridDim.x * blockDim.x)
        dst[(i64)blockIdx.y * ncols + i] = h2f(row[i]);
}

// f32 rows -> Q8_1 blocks (d = amax / 127, q = roundf(x / d), s = d * sum(q)), one warp per
// block of 32, one lane per value (`q8_1_warp`); rows of ncols (a multiple of 32) values.
extern "C" __global__ void quantize_q8_1(const float *x, u8 *dst, i64 nblocks) {
    pdl_start();
    const i64 blk = (i64)blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    if (blk >= nblocks) return;
    const int lane = threadIdx.x % WARP;
    q8_1_warp(x[blk * 32 + lane], lane, dst + blk * Q8_1_BYTES);
}

// The MMVQ loops of one warp over its share of one weight row (rows gr and ur for the gated
// pair) for NC activation columns, NC a compile-time count: no branch per column in the loop
// (branches between the unrolled blocks kept their loads from issuing together). A row's
// 32-value blocks are split over `wpr` warps (Mmvq::warps_per_row in the plan): warp share ws
// takes blocks 8 ws + lane / 4, then every 8 wpr, so a long row's loads are in flight on wpr
// warps at once (one warp a row left a 1B model's 8192-wide down projection eight dependent
// load rounds deep on 2048 warps). `vdot` is the type's dot product; the `*_cols` dispatchers
// pick NC from the run-time count (1 to 8).
template <int NC, int BYTES, int SUB, class V>
__device__ __forceinline__ void mmvq_acc(const u8 *wr, const u8 *yq, int nblocks, int lane,
                                         int ws, int wpr, float (&acc)[8], V vdot) {
#pragma unroll 4
    for (int i = 8 * ws + lane / 4; i < nblocks; i += 8 * wpr) {
        const u8 *wb = wr + (i64)(i / SUB) * BYTES;
#pragma unroll
        for (int c = 0; c < NC; ++c)
            acc[c] += vdot(wb, i % SUB, yq + ((i64)c * nblocks + i) * Q8_1_BYTES, lane % 4);
    }
}
template <int NC, int BYTES, int SUB, class V>
__device__ __forceinline__ void mmvq_glu_acc(const u8 *gr, const u8 *ur, const u8 *yq,
                                             int nblocks, int lane, int ws, int wpr,
                                             float (&ag)[8], float (&au)[8], V vdot) {
#pragma unroll 4
    for (int i = 8 * ws + lane / 4; i < nblocks; i += 8 * wpr) {
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
                                          int lane, int ws, int wpr, float (&acc)[8], V vdot) {
#define MMVQ_CALL(NC) mmvq_acc<NC, BYTES, SUB>(wr, yq, nblocks, lane, ws, wpr, acc, vdot)
    MMVQ_CASES(MMVQ_CALL)
#undef MMVQ_CALL
}
template <int BYTES, int SUB, class V>
__device__ __forceinline__ void mmvq_glu_cols(int ncols, const u8 *gr, const u8 *ur,
                                              const u8 *yq, int nblocks, int lane, int ws,
                                              int wpr, float (&ag)[8], float (&au)[8], V vdot) {
#define MMVQ_CALL(NC) mmvq_glu_acc<NC, BYTES, SUB>(gr, ur, yq, nblocks, lane, ws, wpr, ag, au, vdot)
    MMVQ_CASES(MMVQ_CALL)
#undef MMVQ_CALL
}

// A row's sums of its first ncols columns, from the partials in acc of each of its wpr warps
// (a block's 8 warps hold 8 / wpr rows): each warp's lanes summed (warp_sum), then the warps'
// sums in warp order through `part` (the block's shared [warp][column] array). Returns true
// for the one lane holding the row's sums in acc (lane 0 of the row's last warp). Every thread
// of the block calls it (a barrier when wpr > 1).
__device__ __forceinline__ bool mmvq_row_sums(float (&acc)[8], int ncols, int wpr,
                                              float (*part)[8]) {
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP, ws = warp % wpr;
#pragma unroll
    for (int c = 0; c < 8; ++c)
        if (c < ncols) acc[c] = warp_sum(acc[c]);
    if (wpr == 1) return lane == 0;
    // (Constant indexes into acc, so it stays in registers.)
    if (lane == 0) {
#pragma unroll
        for (int c = 0; c < 8; ++c)
            if (c < ncols) part[warp][c] = acc[c];
    }
    __syncthreads();
    if (lane != 0 || ws != wpr - 1) return false;
#pragma unroll
    for (int c = 0; c < 8; ++c) {
        if (c >= ncols) continue;
        float s = 0.0f;
        for (int w = warp - ws; w <= warp; ++w) s += part[w][c];
        acc[c] = s;
    }
    return true;
}

// Y = W X for 1 to 8 activation columns (MMVQ): wpr warps per weight row (8 / wpr rows a
// block of 8 warps), 4 lanes per 32 values (the loop over blocks unrolled four times and
// specialized per column count, so a lane's loads of four blocks are in flight together: one
// block at a time left 2048-wide Q4_0 rows at about 0.25 TB/s on the H200), the columns
// already Q8_1 (`quantize_q8_1`, column c's nblocks blocks after column c - 1's); column c of
// the output starts dst_col floats after column c - 1's. Weight blocks of SUB 32-value
// sub-blocks (1, or 8 for the 256-value types): 32-value block i is sub-block i % SUB of weight
// block i / SUB.
#define MMVQ(T, BYTES, SUB, VDOT)                                                             \
    extern "C" __global__ void mmvq_##T(const u8 *w, const u8 *yq, float *dst, int nrows,    \
                                        int nblocks, i64 row_bytes, int ncols, i64 dst_col,   \
                                        int wpr) {                                            \
        const int g = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;                 \
        const int row = g / wpr, ws = g % wpr, lane = threadIdx.x % WARP;                     \
        if (row < nrows && ws == 0 && lane == 0) prefetch_l2(w + (i64)row * row_bytes, row_bytes); \
        pdl_start();                                                                          \
        __shared__ float part[8][8];                                                          \
        float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};                      \
        if (row < nrows)                                                                      \
            mmvq_cols<BYTES, SUB>(ncols, w + (i64)row * row_bytes, yq, nblocks, lane, ws, wpr, \
                                  acc, [](const u8 *b, int j, const u8 *y, int p) { return VDOT(b, j, y, p); }); \
        if (!mmvq_row_sums(acc, ncols, wpr, part) || row >= nrows) return;                    \
        _Pragma("unroll") for (int c = 0; c < 8; ++c)                                         \
            if (c < ncols) dst[(i64)c * dst_col + row] = acc[c];                              \
    }

// The Q8_1 blocks of a matrix-vector output (nrows a multiple of 32, columns dst_col floats
// apart, each of its thread blocks 8 / wpr whole rows), for the product that reads it: the
// block that completes a group of 32 rows quantizes them (`q8_1_warp`, quantize_q8_1's
// arithmetic, so the bits of a separate quantization), one warp a column. Each block's
// writes are made visible (__threadfence) before it counts itself in counters[group] (u32,
// zero before the launch: the last block of a group sets it back to zero, so a graph replays
// with them as it found them); the last reads the group back from L2 (ld_cg). Every thread of
// the block calls it. The launch saved is one quantize_q8_1 a block of a model, before the
// down projection.
__device__ __forceinline__ void q8_1_of_rows(const float *dst, int nrows, int ncols, i64 dst_col,
                                             int wpr, u8 *q8, u32 *counters) {
    __shared__ int last;
    __threadfence();
    __syncthreads();
    const int rows_per_block = (int)(blockDim.x / WARP) / wpr;
    const int group = (int)blockIdx.x * rows_per_block / 32;
    if (threadIdx.x == 0) {
        last = atomicAdd(counters + group, 1u) == (u32)(32 / rows_per_block - 1);
        if (last) counters[group] = 0;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    const i64 nb = nrows / 32;
    for (int c = warp; c < ncols; c += blockDim.x / WARP)
        q8_1_warp(ld_cg(dst + c * dst_col + group * 32 + lane), lane,
                  q8 + (c * nb + group) * Q8_1_BYTES);
}

// Gate and up products of the same activations and their gated unit in one pass (the
// GateUpGlu window): dst[c][row] = act(gate_row . x_c) * (up_row . x_c), act SiLU (op 0) or
// tanh-GELU (op 1); both weights of type T, the columns Q8_1 and the rows split over wpr warps
// as for mmvq_*. The sums are the unfused kernels' own, so the result is the unfused nodes'.
// With q8 (nrows a multiple of 32), the output's Q8_1 blocks too (`q8_1_of_rows`: the down
// projection's input, quantized here instead of by a launch of its own).
#define MMVQ_GLU(T, BYTES, SUB, VDOT)                                                         \
    extern "C" __global__ void mmvq_glu_##T(const u8 *wg, const u8 *wu, const u8 *yq,        \
                                            float *dst, int nrows, int nblocks, i64 rb_g,    \
                                            i64 rb_u, int ncols, i64 dst_col, int op,        \
                                            int wpr, u8 *q8, u32 *counters) {                 \
        const int g = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;                 \
        const int row = g / wpr, ws = g % wpr, lane = threadIdx.x % WARP;                     \
        if (row < nrows && ws == 0 && lane == 0) {                                            \
            prefetch_l2(wg + (i64)row * rb_g, rb_g);                                          \
            prefetch_l2(wu + (i64)row * rb_u, rb_u);                                          \
        }                                                                                     \
        pdl_start();                                                                          \
        __shared__ float part_g[8][8], part_u[8][8];                                          \
        float ag[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};                       \
        float au[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};                       \
        if (row < nrows)                                                                      \
            mmvq_glu_cols<BYTES, SUB>(ncols, wg + (i64)row * rb_g, wu + (i64)row * rb_u, yq,  \
                                      nblocks, lane, ws, wpr, ag, au,                         \
                                      [](const u8 *b, int j, const u8 *y, int p) { return VDOT(b, j, y, p); }); \
        const bool gate = mmvq_row_sums(ag, ncols, wpr, part_g);                              \
        const bool up = mmvq_row_sums(au, ncols, wpr, part_u);                                \
        if (gate && up && row < nrows) {                                                      \
            _Pragma("unroll") for (int c = 0; c < 8; ++c)                                     \
                if (c < ncols)                                                                \
                    dst[(i64)c * dst_col + row] = (op == 0 ? silu(ag[c]) : gelu_tanh(ag[c])) * au[c]; \
        }                                                                                     \
        if (q8 != nullptr) q8_1_of_rows(dst, nrows, ncols, dst_col, wpr, q8, counters);       \
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
        pdl_start();                                                                          \
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
        mmvq_acc<1, BYTES, SUB>(wr, y, nblocks, lane, 0, 1, acc,                              \
                                [](const u8 *b, int j, const u8 *q, int p) { return VDOT(b, j, q, p); }); \
        const float v = warp_sum(acc[0]);                                                     \
        if (lane == 0) *out = v;                                                              \
    }

// Up to three products of the same activation column in one launch (the ProductGroup window:
// a decoder block's Q, K and V): rows of w0, then w1's, then w2's (n2 may be 0), split over wpr
// warps each as for mmvq_*, each row's sum MMVQ's own for one column (mmvq_acc<1>), plus the
// row's bias where b0/b1/b2 is given (Qwen2's; the f32 sum then the f32 ADD, as the unfused
// nodes), so the outputs are the unfused kernels' bits. K and V, a few hundred rows each,
// launched alone left most SMs idle.
#define MMVQ_GROUP(T, BYTES, SUB, VDOT)                                                       \
    extern "C" __global__ void mmvq_group_##T(const u8 *yq, int nblocks, const u8 *w0,       \
                                              const u8 *w1, const u8 *w2, i64 rb0, i64 rb1,  \
                                              i64 rb2, float *d0, float *d1, float *d2,      \
                                              const float *b0, const float *b1,              \
                                              const float *b2, int n0, int n1, int n2,       \
                                              int wpr) {                                      \
        const int g = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;                 \
        int row = g / wpr;                                                                    \
        const int ws = g % wpr, lane = threadIdx.x % WARP;                                    \
        const u8 *w = w0;                                                                     \
        i64 rb = rb0;                                                                         \
        int n = n0, k = 0;                                                                    \
        if (row >= n0) {                                                                      \
            row -= n0; w = w1; rb = rb1; n = n1; k = 1;                                       \
            if (row >= n1) { row -= n1; w = w2; rb = rb2; n = n2; k = 2; }                    \
        }                                                                                     \
        if (row < n && ws == 0 && lane == 0) prefetch_l2(w + (i64)row * rb, rb);              \
        pdl_start();                                                                          \
        __shared__ float part[8][8];                                                          \
        float *dst = k == 0 ? d0 : k == 1 ? d1 : d2;                                          \
        const float *bias = k == 0 ? b0 : k == 1 ? b1 : b2;                                   \
        float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};                      \
        if (row < n)                                                                          \
            mmvq_acc<1, BYTES, SUB>(w + (i64)row * rb, yq, nblocks, lane, ws, wpr, acc,       \
                                    [](const u8 *b, int j, const u8 *q, int p) { return VDOT(b, j, q, p); }); \
        if (mmvq_row_sums(acc, 1, wpr, part) && row < n)                                      \
            dst[row] = bias == nullptr ? acc[0] : acc[0] + bias[row];                         \
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
