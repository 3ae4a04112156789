// Row normalizations: one block per row of ncols f32 values.

// RMS norm: x / sqrt(mean(x^2) + eps) (ggml_rms_norm).
extern "C" __global__ void rms_norm_f32(const float *x, float *dst, int ncols, float eps) {
    const float *row = x + (i64)blockIdx.x * ncols;
    float *out = dst + (i64)blockIdx.x * ncols;
    float s = 0.0f;
    for (int i = threadIdx.x; i < ncols; i += blockDim.x) s += row[i] * row[i];
    s = block_sum(s);
    const float scale = rsqrtf(s / ncols + eps);
    for (int i = threadIdx.x; i < ncols; i += blockDim.x) out[i] = row[i] * scale;
}

// Layer norm without affine terms: (x - mean) / sqrt(var + eps) (ggml_norm).
extern "C" __global__ void norm_f32(const float *x, float *dst, int ncols, float eps) {
    const float *row = x + (i64)blockIdx.x * ncols;
    float *out = dst + (i64)blockIdx.x * ncols;
    float s = 0.0f;
    for (int i = threadIdx.x; i < ncols; i += blockDim.x) s += row[i];
    const float mean = block_sum(s) / ncols;
    float v = 0.0f;
    for (int i = threadIdx.x; i < ncols; i += blockDim.x) {
        const float d = row[i] - mean;
        v += d * d;
    }
    const float scale = rsqrtf(block_sum(v) / ncols + eps);
    for (int i = threadIdx.x; i < ncols; i += blockDim.x) out[i] = (row[i] - mean) * scale;
}
