// Rotary position embedding (ggml_rope_ext) on f32 rows of head_dim values, one thread per
// rotated pair. Row r (of n_rows = heads x tokens) is head r % n_heads of token r / n_heads,
// at position pos[token]. mode 0: pairs (2i, 2i+1); mode 2 (NeoX): pairs (i, i + n_dims/2).
// YaRN as ggml's rope_yarn: ramp between interpolated and extrapolated angles.

struct RopeParams {
    int head_dim, n_dims, n_heads, mode;
    float freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow;
    float corr_low, corr_high;  // ggml_rope_yarn_corr_dims, computed on the host
};

__device__ __forceinline__ float yarn_ramp(float low, float high, int i0) {
    const float y = (i0 / 2 - low) / fmaxf(0.001f, high - low);
    return 1.0f - fminf(1.0f, fmaxf(0.0f, y));
}

__device__ __forceinline__ void rope_yarn(float theta_extrap, const RopeParams &p, int i0,
                                          float *c, float *s) {
    const float theta_interp = p.freq_scale * theta_extrap;
    float theta = theta_interp, mscale = p.attn_factor;
    if (p.ext_factor != 0.0f) {
        const float mix = yarn_ramp(p.corr_low, p.corr_high, i0) * p.ext_factor;
        theta = theta_interp * (1.0f - mix) + theta_extrap * mix;
        mscale *= 1.0f + 0.1f * logf(1.0f / p.freq_scale);
    }
    *c = cosf(theta) * mscale;
    *s = sinf(theta) * mscale;
}

extern "C" __global__ void rope_f32(const float *x, float *dst, const i32 *pos, int n_rows,
                                    RopeParams p) {
    const int pairs = p.head_dim / 2;
    const i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (i64)n_rows * pairs) return;
    const int row = t / pairs, i = t % pairs, i0 = 2 * i;
    const float *in = x + (i64)row * p.head_dim;
    float *out = dst + (i64)row * p.head_dim;
    if (i0 >= p.n_dims) {  // past the rotated dims: copied
        out[i0] = in[i0];
        out[i0 + 1] = in[i0 + 1];
        return;
    }
    const float theta_scale = powf(p.freq_base, -2.0f / p.n_dims);
    const float theta = pos[row / p.n_heads] * powf(theta_scale, (float)i);
    float c, s;
    rope_yarn(theta, p, i0, &c, &s);
    const int a = p.mode == 2 ? i : i0, b = p.mode == 2 ? i + p.n_dims / 2 : i0 + 1;
    const float x0 = in[a], x1 = in[b];
    out[a] = x0 * c - x1 * s;
    out[b] = x0 * s + x1 * c;
}
