// The graph ops on tensors of any layout: every kernel takes its tensors as TT descriptors
// (types.cuh) and walks logical indexes, so views, permutations and broadcasts need no copies.
// These are the correctness baseline every op of the model graphs has on the GPU; the fast
// paths of decoding and prefill (quant.cu's MMVQ, cuBLAS, tiled attention) replace them per
// shape where they apply.

// Binary ops with src1 broadcast (ggml's repeat rule): 0 add, 1 sub, 2 mul, 3 div.
extern "C" __global__ void binary_op(TT d, TT a, TT b, int op) {
    pdl_start();
    GRID_STRIDE(i, n_elems(d)) {
        i64 c[4];
        unravel(d.ne, i, c);
        const float x = ld(a, c[0], c[1], c[2], c[3]);
        const float y = ld(b, c[0] % b.ne[0], c[1] % b.ne[1], c[2] % b.ne[2], c[3] % b.ne[3]);
        float r;
        switch (op) {
        case 0: r = x + y; break;
        case 1: r = x - y; break;
        case 2: r = x * y; break;
        default: r = x / y; break;
        }
        st(d, c[0], c[1], c[2], c[3], r);
    }
}


// Unary ops: 0 scale (x * p0 + p1), 1 tanh-GELU, 2 erf-GELU, 3 SiLU, 4 tanh, 5 clamp to
// [p0, p1] (NaN to p1, as ggml's comparisons).
extern "C" __global__ void unary_op(TT d, TT a, int op, float p0, float p1) {
    pdl_start();
    GRID_STRIDE(i, n_elems(d)) {
        i64 c[4];
        unravel(d.ne, i, c);
        const float x = ld(a, c[0], c[1], c[2], c[3]);
        float r;
        switch (op) {
        case 0: r = x * p0 + p1; break;
        case 1: r = gelu_tanh(x); break;
        case 2: r = 0.5f * x * (1.0f + erff(x * 0.7071067811865476f)); break;
        case 3: r = silu(x); break;
        case 5: r = x < p1 ? x : p1; r = r > p0 ? r : p0; break;
        default: r = tanhf(x); break;
        }
        st(d, c[0], c[1], c[2], c[3], r);
    }
}

// Gated units: act(gate) * up; op 0 SwiGLU, 1 GeGLU. Split: gate in a, up in b; fused: a row
// holds both halves (swapped: the second half is the gate).
extern "C" __global__ void glu_op(TT d, TT a, TT b, int op, int swapped, int split) {
    pdl_start();
    GRID_STRIDE(i, n_elems(d)) {
        i64 c[4];
        unravel(d.ne, i, c);
        float g, u;
        if (split) {
            g = ld(a, c[0], c[1], c[2], c[3]);
            u = ld(b, c[0], c[1], c[2], c[3]);
        } else {
            const i64 nc = d.ne[0];
            g = ld(a, c[0] + (swapped ? nc : 0), c[1], c[2], c[3]);
            u = ld(a, c[0] + (swapped ? 0 : nc), c[1], c[2], c[3]);
        }
        st(d, c[0], c[1], c[2], c[3], (op == 0 ? silu(g) : gelu_tanh(g)) * u);
    }
}

// NORM (rms = 0) and RMS_NORM (rms = 1): one block per row.
extern "C" __global__ void norm_op(TT d, TT a, float eps, int rms) {
    pdl_start();
    const i64 r = blockIdx.x, i1 = r % a.ne[1], i2 = (r / a.ne[1]) % a.ne[2], i3 = r / (a.ne[1] * a.ne[2]);
    const i64 n = a.ne[0];
    float mean = 0.0f;
    if (!rms) {
        float s = 0.0f;
        for (i64 i = threadIdx.x; i < n; i += blockDim.x) s += ld(a, i, i1, i2, i3);
        mean = block_sum(s) / n;
    }
    float s2 = 0.0f;
    for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
        const float x = ld(a, i, i1, i2, i3) - mean;
        s2 += x * x;
    }
    const float scale = rsqrtf(block_sum(s2) / n + eps);
    for (i64 i = threadIdx.x; i < n; i += blockDim.x)
        st(d, i, i1, i2, i3, (ld(a, i, i1, i2, i3) - mean) * scale);
}


// HADAMARD: each row (n <= 1024, a power of two) times the orthonormal Walsh-Hadamard matrix,
// in the CPU's order (ggml_compute_forward_fwht): the row times 1/sqrt(n) (rounded as the
// CPU's, despite fast math), then butterflies (u, v) -> (u + v, u - v) of span 1, 2, 4, ...:
// the same float operations, so the CPU's bits (but for denormals, which fast math flushes).
extern "C" __global__ void hadamard_op(TT d, TT a) {
    pdl_start();
    __shared__ float buf[1024];
    const i64 r = blockIdx.x, i1 = r % a.ne[1], i2 = (r / a.ne[1]) % a.ne[2], i3 = r / (a.ne[1] * a.ne[2]);
    const i64 n = a.ne[0];
    const float scale = __fdiv_rn(1.0f, __fsqrt_rn((float) n));
    for (i64 i = threadIdx.x; i < n; i += blockDim.x) buf[i] = ld(a, i, i1, i2, i3) * scale;
    __syncthreads();
    for (i64 len = 1; len < n; len <<= 1) {
        for (i64 k = threadIdx.x; k < n / 2; k += blockDim.x) {
            const i64 i = (k / len) * 2 * len + (k % len);
            const float u = buf[i], v = buf[i + len];
            buf[i] = u + v;
            buf[i + len] = u - v;
        }
        __syncthreads();
    }
    for (i64 i = threadIdx.x; i < n; i += blockDim.x) st(d, i, i1, i2, i3, buf[i]);
}

// SOFT_MAX(a * scale + mask * slope) per row: one block per row, three passes. With sinks (F32
// [n_head]) the head's sink joins the max and the sum as a logit without a value.
extern "C" __global__ void soft_max_op(TT d, TT a, TT m, int has_mask, float scale, float max_bias,
                                       TT sk, int has_sinks) {
    pdl_start();
    const i64 r = blockIdx.x, i1 = r % a.ne[1], i2 = (r / a.ne[1]) % a.ne[2], i3 = r / (a.ne[1] * a.ne[2]);
    const i64 n = a.ne[0];
    const float slope = alibi_slope(max_bias, i2, a.ne[2]);
#define SM_VAL(i) (ld(a, i, i1, i2, i3) * scale + (has_mask ? slope * ld(m, i, i1, i2 % m.ne[2], i3 % m.ne[3]) : 0.0f))
    float mx = -INFINITY;
    for (i64 i = threadIdx.x; i < n; i += blockDim.x) mx = fmaxf(mx, SM_VAL(i));
    mx = block_max(mx);
    const float sink = has_sinks ? ld(sk, i2, 0, 0, 0) : -INFINITY;
    mx = fmaxf(mx, sink);
    float s = 0.0f;
    for (i64 i = threadIdx.x; i < n; i += blockDim.x) s += expf(SM_VAL(i) - mx);
    s = block_sum(s);
    if (has_sinks) s += expf(sink - mx);
    for (i64 i = threadIdx.x; i < n; i += blockDim.x) st(d, i, i1, i2, i3, expf(SM_VAL(i) - mx) / s);
#undef SM_VAL
}

// ROPE: one thread per rotated pair (the dims past n_dims are copied). Mode (ggml's numbers)
// 0: adjacent pairs; 2: NeoX halves; 8: M-RoPE and 40: interleaved M-RoPE (NeoX halves, four
// positions a token, the pair's section choosing one); 24: vision (pairs i, i + n_dims over the
// whole row, each section's angles starting afresh). corr0/corr1: YaRN's correction dims
// (host-computed in f32 as ggml does).
template <class Store>
__device__ __forceinline__ void rope_rows(const TT &a, const TT &pos, const TT &ff, int has_ff,
                                          int n_dims, int mode, float freq_base,
                                          float freq_scale, float ext_factor, float attn_factor,
                                          float corr0, float corr1, int s0, int s1, int s2,
                                          int s3, Store store) {
    const i64 half = a.ne[0] / 2;
    const bool vision = mode == 24, multi = mode == 8 || mode == 40 || vision;
    GRID_STRIDE(k, half * a.ne[1] * a.ne[2] * a.ne[3]) {
        const i64 i = k % half, r = k / half;
        const i64 i1 = r % a.ne[1], i2 = (r / a.ne[1]) % a.ne[2], i3 = r / (a.ne[1] * a.ne[2]);
        if (!vision && 2 * i >= n_dims) {
            store(2 * i, i1, i2, i3, ld(a, 2 * i, i1, i2, i3));
            store(2 * i + 1, i1, i2, i3, ld(a, 2 * i + 1, i1, i2, i3));
            continue;
        }
        // Which of the token's positions, and how many frequency steps into its section.
        int which = 0;
        i64 steps = i;
        if (multi) {
            const int start[4] = {0, s0, s0 + s1, s0 + s1 + s2};
            const int sector = (int)(i % (s0 + s1 + s2 + s3));
            if (mode == 40) {
                const int m = sector % 3;
                which = (m == 1 && sector < 3 * s1) ? 1 : (m == 2 && sector < 3 * s2) ? 2
                      : (m == 0 && sector < 3 * s0) ? 0 : 3;
            } else {
                which = sector >= start[3] ? 3 : sector >= start[2] ? 2 : sector >= start[1] ? 1 : 0;
            }
            if (vision) steps = sector - start[which];
        }
        const float p = (float)*(const i32 *)(pos.p + (i2 + which * a.ne[2]) * pos.nb[0]);
        const float f = has_ff ? ld(ff, i, 0, 0, 0) : 1.0f;
        // The frequency and sin/cos in double: --use_fast_math would turn powf and sincosf
        // into intrinsics whose error grows with the argument (positions reach 10^5).
        const float extrap = p * (float)pow((double)freq_base, -2.0 * (double)steps / n_dims) / f;
        const float interp = freq_scale * extrap;
        float theta = interp, mscale = attn_factor;
        if (ext_factor != 0.0f) {
            const float y = (i - corr0) / fmaxf(0.001f, corr1 - corr0);
            const float ramp = (1.0f - fminf(1.0f, fmaxf(0.0f, y))) * ext_factor;
            theta = interp * (1.0f - ramp) + extrap * ramp;
            mscale *= 1.0f + 0.1f * logf(1.0f / freq_scale);
        }
        double sd, cd;
        sincos((double)theta, &sd, &cd);
        const float sn = (float)sd * mscale, cs = (float)cd * mscale;
        const i64 j0 = mode == 0 ? 2 * i : i;
        const i64 j1 = mode == 0 ? 2 * i + 1 : vision ? i + n_dims : i + n_dims / 2;
        const float x0 = ld(a, j0, i1, i2, i3), x1 = ld(a, j1, i1, i2, i3);
        store(j0, i1, i2, i3, x0 * cs - x1 * sn);
        store(j1, i1, i2, i3, x0 * sn + x1 * cs);
    }
}


extern "C" __global__ void rope_op(TT d, TT a, TT pos, TT ff, int has_ff, int n_dims, int mode,
                                   float freq_base, float freq_scale, float ext_factor,
                                   float attn_factor, float corr0, float corr1, int s0, int s1,
                                   int s2, int s3) {
    pdl_start();
    rope_rows(a, pos, ff, has_ff, n_dims, mode, freq_base, freq_scale, ext_factor, attn_factor,
              corr0, corr1, s0, s1, s2, s3,
              [&](i64 j, i64 i1, i64 i2, i64 i3, float v) { st(d, j, i1, i2, i3, v); });
}

// ROPE, then SET_ROWS of the rotated rows into a float cache d (the RopeSetRows window: K
// rotated and stored in one pass): a is [n0, heads, tokens], the SET_ROWS source its reshape to
// [n0 heads, tokens], so element (j, head, token) goes to d[j + head n0, idx[token]]. The
// values are rope_op's, stored as set_rows_op stores them.
extern "C" __global__ void rope_set_rows_op(TT d, TT idx, TT a, TT pos, TT ff, int has_ff,
                                            int n_dims, int mode, float freq_base,
                                            float freq_scale, float ext_factor,
                                            float attn_factor, float corr0, float corr1, int s0,
                                            int s1, int s2, int s3) {
    pdl_start();
    rope_rows(a, pos, ff, has_ff, n_dims, mode, freq_base, freq_scale, ext_factor, attn_factor,
              corr0, corr1, s0, s1, s2, s3, [&](i64 j, i64 i1, i64 i2, i64, float v) {
                  st(d, j + i1 * a.ne[0], ld_idx(idx, i2, 0, 0), 0, 0, v);
              });
}

// A decoding step's attention inputs in one launch (the AttnInputs window): blockIdx.y 0
// rotates Q into dq as rope_op, 1 rotates K into its cache as rope_set_rows_op, 2 stores V's
// rows [n0, tokens] into cache rows idx_v[token] as set_rows_op; Q and K share positions and
// parameters. Each job's values are those of its own kernel.
extern "C" __global__ void rope_kv_store_op(TT dq, TT q, TT ck, TT idx_k, TT k, TT cv, TT idx_v,
                                            TT v, TT pos, TT ff, int has_ff, int n_dims,
                                            int mode, float freq_base, float freq_scale,
                                            float ext_factor, float attn_factor, float corr0,
                                            float corr1, int s0, int s1, int s2, int s3) {
    pdl_start();
    if (blockIdx.y == 0) {
        rope_rows(q, pos, ff, has_ff, n_dims, mode, freq_base, freq_scale, ext_factor,
                  attn_factor, corr0, corr1, s0, s1, s2, s3,
                  [&](i64 j, i64 i1, i64 i2, i64 i3, float x) { st(dq, j, i1, i2, i3, x); });
    } else if (blockIdx.y == 1) {
        rope_rows(k, pos, ff, has_ff, n_dims, mode, freq_base, freq_scale, ext_factor,
                  attn_factor, corr0, corr1, s0, s1, s2, s3, [&](i64 j, i64 i1, i64 i2, i64, float x) {
                      st(ck, j + i1 * k.ne[0], ld_idx(idx_k, i2, 0, 0), 0, 0, x);
                  });
    } else {
        GRID_STRIDE(i, v.ne[0] * v.ne[1]) {
            const i64 i0 = i % v.ne[0], i1 = i / v.ne[0];
            st(cv, i0, ld_idx(idx_v, i1, 0, 0), 0, 0, ld(v, i0, i1, 0, 0));
        }
    }
}

// GET_ROWS: dst[i0, i10, i11, i12] = a[i0, idx[i10, i11, i12], i11, i12] (any weight type).
extern "C" __global__ void get_rows_op(TT d, TT a, TT idx) {
    pdl_start();
    GRID_STRIDE(i, n_elems(d)) {
        i64 c[4];
        unravel(d.ne, i, c);
        const i64 r = ld_idx(idx, c[1], c[2], c[3]);
        st(d, c[0], c[1], c[2], c[3], ld(a, c[0], r, c[2], c[3]));
    }
}

// SET_ROWS into a one-value type: d[i0, idx[i1, i2 % .., i3 % ..], i2, i3] = b[i0, i1, i2, i3].
extern "C" __global__ void set_rows_op(TT d, TT b, TT idx) {
    pdl_start();
    GRID_STRIDE(i, n_elems(b)) {
        i64 c[4];
        unravel(b.ne, i, c);
        const i64 r = ld_idx(idx, c[1], c[2] % idx.ne[1], c[3] % idx.ne[2]);
        st(d, c[0], r, c[2], c[3], ld(b, c[0], c[1], c[2], c[3]));
    }
}

// SET_ROWS into a 32-value block type (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1): one thread per block.
extern "C" __global__ void set_rows_q_op(TT d, TT b, TT idx) {
    pdl_start();
    const i64 nblk = b.ne[0] / 32;
    GRID_STRIDE(k, nblk * b.ne[1] * b.ne[2] * b.ne[3]) {
        const i64 blk = k % nblk, r = k / nblk;
        const i64 i1 = r % b.ne[1], i2 = (r / b.ne[1]) % b.ne[2], i3 = r / (b.ne[1] * b.ne[2]);
        float x[32];
        for (int j = 0; j < 32; ++j) x[j] = ld(b, blk * 32 + j, i1, i2, i3);
        const i64 dr = ld_idx(idx, i1, i2 % idx.ne[1], i3 % idx.ne[2]);
        quantize_block(d.type, x, row_ptr(d, dr, i2, i3) + blk * block_bytes(d.type));
    }
}

// CPY / CONT / DUP into a one-value type: element i of dst (logical order) from element i of
// src in src's own shape (the shapes may differ, the counts do not).
extern "C" __global__ void cpy_op(TT d, TT a) {
    pdl_start();
    GRID_STRIDE(i, n_elems(d)) {
        i64 c[4], s[4];
        unravel(d.ne, i, c);
        unravel(a.ne, i, s);
        st(d, c[0], c[1], c[2], c[3], ld(a, s[0], s[1], s[2], s[3]));
    }
}

// CPY into a 32-value block type: one thread per destination block.
extern "C" __global__ void cpy_q_op(TT d, TT a) {
    pdl_start();
    const i64 nblk = d.ne[0] / 32;
    GRID_STRIDE(k, nblk * d.ne[1] * d.ne[2] * d.ne[3]) {
        const i64 blk = k % nblk, r = k / nblk;
        const i64 i1 = r % d.ne[1], i2 = (r / d.ne[1]) % d.ne[2], i3 = r / (d.ne[1] * d.ne[2]);
        float x[32];
        for (int j = 0; j < 32; ++j) {
            i64 s[4];
            unravel(a.ne, r * d.ne[0] + blk * 32 + j, s);
            x[j] = ld(a, s[0], s[1], s[2], s[3]);
        }
        quantize_block(d.type, x, row_ptr(d, i1, i2, i3) + blk * block_bytes(d.type));
    }
}

// Same-type copy of a quantized tensor, row by row (rows are contiguous in every block type).
extern "C" __global__ void cpy_rows_bytes(TT d, TT a, i64 row_bytes) {
    pdl_start();
    GRID_STRIDE(k, row_bytes * d.ne[1] * d.ne[2] * d.ne[3]) {
        const i64 b = k % row_bytes, r = k / row_bytes;
        i64 c[4], s[4];
        unravel(d.ne, r * d.ne[0], c);
        unravel(a.ne, r * a.ne[0], s);
        row_ptr(d, c[1], c[2], c[3])[b] = row_ptr(a, s[1], s[2], s[3])[b];
    }
}

// CONCAT along dim.
extern "C" __global__ void concat_op(TT d, TT a, TT b, int dim) {
    pdl_start();
    GRID_STRIDE(i, n_elems(d)) {
        i64 c[4];
        unravel(d.ne, i, c);
        float v;
        if (c[dim] < a.ne[dim]) {
            v = ld(a, c[0], c[1], c[2], c[3]);
        } else {
            i64 e[4] = {c[0], c[1], c[2], c[3]};
            e[dim] -= a.ne[dim];
            v = ld(b, e[0], e[1], e[2], e[3]);
        }
        st(d, c[0], c[1], c[2], c[3], v);
    }
}

// IM2COL: the patches a convolution reads, one thread per destination element (as the CPU's
// im2col): 2-D dst [IC*KH*KW, OW, OH, N] from b [IW, IH, IC, N]; 1-D dst [IC*K, OW, N, 1] from
// b [IW, IC, N, 1]; cells outside the image are 0.
extern "C" __global__ void im2col_op(TT d, TT b, int kh, int kw, int s0, int s1, int p0, int p1,
                                     int d0, int d1, int is_2d) {
    pdl_start();
    GRID_STRIDE(i, n_elems(d)) {
        i64 c[4];
        unravel(d.ne, i, c);
        const i64 ic = c[0] / (kh * kw), ky = (c[0] / kw) % kh, kx = c[0] % kw;
        const i64 oh = is_2d ? c[2] : 0, n = is_2d ? c[3] : c[2];
        const i64 iw = c[1] * s0 + kx * d0 - p0, ih = oh * s1 + ky * d1 - p1;
        const i64 IH = is_2d ? b.ne[1] : 1;
        float v = 0.0f;
        if (ih >= 0 && ih < IH && iw >= 0 && iw < b.ne[0]) {
            v = is_2d ? ld(b, iw, ih, ic, n) : ld(b, iw, ic, n, 0);
        }
        st(d, c[0], c[1], c[2], c[3], v);
    }
}

// POOL_2D of each [ne0, ne1] plane, one thread per output (the CPU's loop order; the average's
// division correctly rounded whatever --use_fast_math says).
extern "C" __global__ void pool2d_op(TT d, TT a, int op_max, int k0, int k1, int s0, int s1,
                                     int p0, int p1) {
    pdl_start();
    GRID_STRIDE(i, n_elems(d)) {
        i64 c[4];
        unravel(d.ne, i, c);
        float res = op_max ? -3.40282347e+38f : 0.0f;
        const i64 ix = c[0] * s0 - p0, iy = c[1] * s1 - p1;
        for (i64 ky = 0; ky < k1; ++ky) {
            const i64 y = iy + ky;
            if (y < 0 || y >= a.ne[1]) continue;
            for (i64 kx = 0; kx < k0; ++kx) {
                const i64 j = ix + kx;
                if (j < 0 || j >= a.ne[0]) continue;
                const float v = ld(a, j, y, c[2], c[3]);
                if (op_max) {
                    res = v > res ? v : res;
                } else {
                    res += v;
                }
            }
        }
        if (!op_max) res = __fdiv_rn(res, (float)(k0 * k1));
        st(d, c[0], c[1], c[2], c[3], res);
    }
}

// SUM_ROWS: one block per row.
extern "C" __global__ void sum_rows_op(TT d, TT a) {
    pdl_start();
    const i64 r = blockIdx.x, i1 = r % a.ne[1], i2 = (r / a.ne[1]) % a.ne[2], i3 = r / (a.ne[1] * a.ne[2]);
    float s = 0.0f;
    for (i64 i = threadIdx.x; i < a.ne[0]; i += blockDim.x) s += ld(a, i, i1, i2, i3);
    s = block_sum(s);
    if (threadIdx.x == 0) st(d, 0, i1, i2, i3, s);
}

// ARGMAX (I32 out): one block per row (a 128k vocabulary's logits are 512 KB: one warp streamed
// them alone), the first index of the largest value.
extern "C" __global__ void argmax_op(TT d, TT a) {
    pdl_start();
    __shared__ float s_best[32];
    __shared__ i64 s_at[32];
    const i64 r = blockIdx.x;
    const int lane = threadIdx.x % WARP, w = threadIdx.x / WARP, nw = blockDim.x / WARP;
    float best = -INFINITY;
    i64 at = 0x7fffffffffffffffll;
    for (i64 i = threadIdx.x; i < a.ne[0]; i += blockDim.x) {
        const float x = ld(a, i, r, 0, 0);
        if (x > best) { best = x; at = i; }
    }
    // The largest, the first of equals: within each warp, then across the warps.
    for (int o = WARP / 2; o > 0; o >>= 1) {
        const float ob = __shfl_xor_sync(0xffffffffu, best, o);
        const i64 oa = __shfl_xor_sync(0xffffffffu, at, o);
        if (ob > best || (ob == best && oa < at)) { best = ob; at = oa; }
    }
    if (lane == 0) { s_best[w] = best; s_at[w] = at; }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int k = 1; k < nw; ++k)
            if (s_best[k] > best || (s_best[k] == best && s_at[k] < at)) { best = s_best[k]; at = s_at[k]; }
        *(i32 *)(d.p + r * d.nb[0]) = (i32)(at == 0x7fffffffffffffffll ? 0 : at);
    }
}

// MUL_MAT: dst[i0, i1, i2, i3] = dot(a row i0 (broadcast over dims 2, 3), b row i1); one warp
// per output, the weights dequantized per element, f32 accumulation.
extern "C" __global__ void mul_mat_op(TT d, TT a, TT b) {
    pdl_start();
    const i64 o = (i64)blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    if (o >= n_elems(d)) return;
    const int lane = threadIdx.x % WARP;
    i64 c[4];
    unravel(d.ne, o, c);
    const i64 r2 = b.ne[2] / a.ne[2], r3 = b.ne[3] / a.ne[3];
    const u8 *wa = row_ptr(a, c[0], c[2] / r2, c[3] / r3), *xb = row_ptr(b, c[1], c[2], c[3]);
    float acc = 0.0f;
    for (i64 k = lane; k < a.ne[0]; k += WARP)
        acc += ld_row(a.type, wa, k, a.nb[0]) * ld_row(b.type, xb, k, b.nb[0]);
    acc = warp_sum(acc);
    if (lane == 0) st(d, c[0], c[1], c[2], c[3], acc);
}

// FLASH_ATTN_EXT: one warp per (query row, head, batch); the online softmax over every KV cell
// (attn.cuh), each lane owning every 32nd output column (head sizes up to 512). Output
// [dv, n_head, n_q, ne3].
extern "C" __global__ void flash_attn_op(TT d, TT q, TT k, TT v, TT m, int has_mask, float scale,
                                         float max_bias, float softcap, TT sk, int has_sinks) {
    pdl_start();
    const i64 w = (i64)blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    const i64 n_q = q.ne[1], n_head = q.ne[2];
    if (w >= n_q * n_head * q.ne[3]) return;
    const int lane = threadIdx.x % WARP;
    const i64 h = w % n_head, iq = (w / n_head) % n_q, i3 = w / (n_head * n_q);
    FaState fa = fa_cells(q, k, v, m, has_mask, scale, max_bias, softcap, w, 0, k.ne[1], 1, lane);
    if (has_sinks) {
        // The head's sink joins the max and the sum without a value (ggml's order).
        const float sink = ld(sk, h, 0, 0, 0);
        if (sink > fa.mx) {
            const float ms = expf(fa.mx - sink);
            for (int j = 0; j < 16; ++j) fa.acc[j] *= ms;
            fa.sum = fa.sum * ms + 1.0f;
        } else {
            fa.sum += expf(sink - fa.mx);
        }
    }
    const float inv = fa.sum > 0.0f ? 1.0f / fa.sum : 0.0f;
    for (int j = 0; j < 16; ++j) {
        const i64 col = lane + WARP * j;
        if (col < v.ne[0]) st(d, col, h, iq, i3, fa.acc[j] * inv);
    }
}
