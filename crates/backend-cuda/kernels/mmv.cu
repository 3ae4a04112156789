// Matrix-vector products of float weights (F16, BF16, F32) with 1 to 8 f32 activation
// columns: y[c][row] = sum_i W[row][i] * x[c][i]. One warp per weight row, each weight read
// once for every column; 16-byte loads (8 halves or 4 floats) where the row, the activations
// and their column stride are 16-byte aligned and the row length a multiple of the load,
// element loads otherwise.

// Sixteen bytes, aligned (a struct of our own: no CUDA header needed, and the host test
// compiles it too).
struct __align__(16) Bytes16 {
    u32 w[4];
};

__device__ __forceinline__ float mmv_f16_at(const u8 *r, i64 i) { return h2f(((const u16 *)r)[i]); }
__device__ __forceinline__ float mmv_bf16_at(const u8 *r, i64 i) { return bf2f(((const u16 *)r)[i]); }
__device__ __forceinline__ float mmv_f32_at(const u8 *r, i64 i) { return ((const float *)r)[i]; }
__device__ __forceinline__ void mmv_f16_unpack(const Bytes16 &b, float *v) {
    for (int k = 0; k < 4; ++k) { v[2 * k] = h2f(b.w[k] & 0xffff); v[2 * k + 1] = h2f(b.w[k] >> 16); }
}
__device__ __forceinline__ void mmv_bf16_unpack(const Bytes16 &b, float *v) {
    for (int k = 0; k < 4; ++k) { v[2 * k] = bf2f(b.w[k] & 0xffff); v[2 * k + 1] = bf2f(b.w[k] >> 16); }
}
__device__ __forceinline__ void mmv_f32_unpack(const Bytes16 &b, float *v) {
    for (int k = 0; k < 4; ++k) v[k] = __uint_as_float(b.w[k]);
}

// w: rows row_bytes apart; x: `cols` columns x_stride floats apart; dst: columns d_stride
// floats apart. PER: values per 16 bytes.
#define MMV(NAME, PER)                                                                            \
    extern "C" __global__ void mmv_##NAME(const u8 *w, const float *x, float *dst, int nrows,     \
                                          int ncols, i64 row_bytes, int cols, i64 x_stride,       \
                                          i64 d_stride) {                                         \
        const int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;                    \
        if (row >= nrows) return;                                                                 \
        const int lane = threadIdx.x % WARP;                                                      \
        const u8 *wr = w + (i64)row * row_bytes;                                                  \
        if (lane == 0) prefetch_l2(wr, row_bytes);                                                \
        pdl_start();                                                                              \
        float acc[8];                                                                             \
        for (int c = 0; c < 8; ++c) acc[c] = 0.0f;                                                \
        const bool vec = ncols % PER == 0 &&                                                      \
                         ((((i64)(size_t)wr) | ((i64)(size_t)x) | (x_stride * 4)) & 15) == 0;     \
        if (vec) {                                                                                \
            for (i64 i = (i64)lane * PER; i < ncols; i += (i64)WARP * PER) {                      \
                float v[PER];                                                                     \
                mmv_##NAME##_unpack(*(const Bytes16 *)(wr + i * (16 / PER)), v);                  \
                for (int c = 0; c < 8; ++c) {                                                     \
                    if (c >= cols) break;                                                         \
                    const float *xc = x + c * x_stride + i;                                       \
                    for (int k = 0; k < PER; ++k) acc[c] += v[k] * xc[k];                         \
                }                                                                                 \
            }                                                                                     \
        } else {                                                                                  \
            for (i64 i = lane; i < ncols; i += WARP) {                                            \
                const float v = mmv_##NAME##_at(wr, i);                                           \
                for (int c = 0; c < 8; ++c) {                                                     \
                    if (c >= cols) break;                                                         \
                    acc[c] += v * x[c * x_stride + i];                                            \
                }                                                                                 \
            }                                                                                     \
        }                                                                                         \
        for (int c = 0; c < 8; ++c) {                                                             \
            if (c >= cols) break;                                                                 \
            const float s = warp_sum(acc[c]);                                                     \
            if (lane == 0) dst[c * d_stride + row] = s;                                           \
        }                                                                                         \
    }

MMV(f16, 8)
MMV(bf16, 8)
MMV(f32, 4)
