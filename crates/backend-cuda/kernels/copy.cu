// Copies with layouts: strided 4-D copies (CPY/CONT/DUP with conversion), and SET_ROWS, the
// KV cache write: row i of src goes to row ids[i] of dst.

struct Layout4 {
    i64 ne[4];  // elements per dimension
    i64 nb[4];  // strides in bytes
};

__device__ __forceinline__ i64 offset_of(const Layout4 &l, i64 i) {
    const i64 i0 = i % l.ne[0], i1 = (i / l.ne[0]) % l.ne[1];
    const i64 i2 = (i / (l.ne[0] * l.ne[1])) % l.ne[2], i3 = i / (l.ne[0] * l.ne[1] * l.ne[2]);
    return i0 * l.nb[0] + i1 * l.nb[1] + i2 * l.nb[2] + i3 * l.nb[3];
}

// Element i (in dst's logical order) of src, with src's and dst's own strides; n elements.
#define CPY(name, TS, TD, CONV)                                                               \
    extern "C" __global__ void name(const u8 *src, u8 *dst, Layout4 s, Layout4 d, i64 n) {   \
        const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;                            \
        if (i >= n) return;                                                                   \
        const TS x = *(const TS *)(src + offset_of(s, i));                                    \
        *(TD *)(dst + offset_of(d, i)) = CONV(x);                                             \
    }

#define SAME(x) (x)
CPY(cpy_f32_f32, float, float, SAME)
CPY(cpy_f16_f16, u16, u16, SAME)
CPY(cpy_f32_f16_strided, float, u16, f2h)
CPY(cpy_f16_f32_strided, u16, float, h2f)
CPY(cpy_bf16_f32_strided, u16, float, bf2f)

// SET_ROWS into an f16 cache: nrows rows of ncols f32.
extern "C" __global__ void set_rows_f32_f16(const float *src, const i64 *ids, u16 *dst,
                                            int ncols, i64 dst_row) {
    const float *in = src + (i64)blockIdx.y * ncols;
    u16 *out = dst + ids[blockIdx.y] * dst_row;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < ncols; i += gridDim.x * blockDim.x)
        out[i] = f2h(in[i]);
}

// SET_ROWS into a Q8_0 cache (ggml's quantize_row_q8_0: d = amax / 127, q = roundf(x / d),
// halves away from zero):
// one warp per 32-value block.
extern "C" __global__ void set_rows_f32_q8_0(const float *src, const i64 *ids, u8 *dst,
                                             int ncols, i64 dst_row_bytes) {
    const int lane = threadIdx.x % WARP;
    const int blk = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    if (blk >= ncols / 32) return;
    const float x = src[(i64)blockIdx.y * ncols + blk * 32 + lane];
    const float amax = warp_max(fabsf(x));
    const float d = amax / 127.0f;
    const int q = (int)(amax == 0.0f ? 0.0f : roundf(x / d));
    u8 *b = dst + ids[blockIdx.y] * dst_row_bytes + (i64)blk * Q8_0_BYTES;
    b[2 + lane] = (u8)(i8)q;
    if (lane == 0) {
        const u16 dh = f2h(d);
        b[0] = dh & 0xFF;
        b[1] = dh >> 8;
    }
}
