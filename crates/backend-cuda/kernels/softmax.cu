// Soft max over rows of ncols f32 (ggml_soft_max_ext): softmax(x * scale + mask), the mask
// (f16, ncols per row, rows repeating every mask_rows) optional; one block per row.

extern "C" __global__ void soft_max_f32(const float *x, const u16 *mask, float *dst, int ncols,
                                        int mask_rows, float scale) {
    const i64 r = blockIdx.x;
    const float *row = x + r * ncols;
    const u16 *m = mask ? mask + (r % mask_rows) * ncols : 0;
    float *out = dst + r * ncols;
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < ncols; i += blockDim.x) {
        const float v = row[i] * scale + (m ? h2f(m[i]) : 0.0f);
        out[i] = v;
        mx = fmaxf(mx, v);
    }
    mx = block_max(mx);
    float s = 0.0f;
    for (int i = threadIdx.x; i < ncols; i += blockDim.x) {
        const float e = out[i] == -INFINITY ? 0.0f : expf(out[i] - mx);
        out[i] = e;
        s += e;
    }
    const float inv = 1.0f / block_sum(s);
    for (int i = threadIdx.x; i < ncols; i += blockDim.x) out[i] *= inv;
}
