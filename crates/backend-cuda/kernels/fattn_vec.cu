// FLASH_ATTN_EXT for decoding (few query rows): flash decoding. Block (row w, split s) takes the
// KV cells [s * chunk, (s + 1) * chunk); its FV_WARPS warps take every FV_WARPS-th cell of it,
// each with flash_attn_op's online softmax (attn.cuh), and merge their states in shared
// memory. With one split the block writes the result; with several it writes a partial (max,
// sum, dv weighted values) per split into `part`, which fattn_vec_combine merges. Head sizes
// up to 512.
#define FV_WARPS 4

extern "C" __global__ void fattn_vec_op(TT d, TT q, TT k, TT v, TT m, int has_mask, float scale,
                                        float max_bias, float softcap, int splits, i64 chunk,
                                        float *part) {
    pdl_start();
    const i64 w = blockIdx.x;
    const int split = blockIdx.y;
    const int lane = threadIdx.x % WARP, wi = threadIdx.x / WARP;
    const i64 n_q = q.ne[1], n_head = q.ne[2];
    const i64 h = w % n_head, iq = (w / n_head) % n_q, i3 = w / (n_head * n_q);
    const i64 dv = v.ne[0];
    const i64 c0 = (i64)split * chunk;
    const i64 c1 = c0 + chunk < k.ne[1] ? c0 + chunk : k.ne[1];
    const FaState fa = fa_cells(q, k, v, m, has_mask, scale, max_bias, softcap, w, c0 + wi, c1,
                                FV_WARPS, lane);
    // The warps' states, merged by warp 0 (a warp that saw no cell has max -inf: weight 0).
    __shared__ float s_mx[FV_WARPS], s_sum[FV_WARPS];
    __shared__ float s_acc[FV_WARPS][512];
    if (lane == 0) {
        s_mx[wi] = fa.mx;
        s_sum[wi] = fa.sum;
    }
    for (int j = 0; j < 16; ++j) {
        const i64 col = lane + WARP * j;
        if (col < dv) s_acc[wi][col] = fa.acc[j];
    }
    __syncthreads();
    if (wi != 0) return;
    float big = -INFINITY;
    for (int x = 0; x < FV_WARPS; ++x) big = fmaxf(big, s_mx[x]);
    float f[FV_WARPS], total = 0.0f;
    for (int x = 0; x < FV_WARPS; ++x) {
        f[x] = s_mx[x] == -INFINITY ? 0.0f : expf(s_mx[x] - big);
        total += s_sum[x] * f[x];
    }
    float *out = splits > 1 ? part + (w * splits + split) * (dv + 2) : 0;
    for (i64 col = lane; col < dv; col += WARP) {
        float o = 0.0f;
        for (int x = 0; x < FV_WARPS; ++x) o += s_acc[x][col] * f[x];
        if (splits == 1) {
            st(d, col, h, iq, i3, total > 0.0f ? o / total : 0.0f);
        } else {
            out[2 + col] = o;
        }
    }
    if (splits > 1 && lane == 0) {
        out[0] = big;
        out[1] = total;
    }
}

// Merges fattn_vec_op's partials of row blockIdx.x: out = sum_s e^(m_s - M) o_s / sum_s e^(m_s - M) l_s.
// With q8 (not null; d contiguous F32, dv a multiple of 32), the row's Q8_1 blocks too, as
// quantize_q8_1 makes them from d (q8_1_warp; row w's blocks at q8 + w dv / 32 blocks): the
// attention output's quantization for the output projection, saved (plan::fold_q8_into_writer).
extern "C" __global__ void fattn_vec_combine(TT d, TT q, const float *part, int splits, i64 dv,
                                             u8 *q8) {
    pdl_start();
    const i64 w = blockIdx.x;
    const i64 n_q = q.ne[1], n_head = q.ne[2];
    const i64 h = w % n_head, iq = (w / n_head) % n_q, i3 = w / (n_head * n_q);
    const float *p = part + w * splits * (dv + 2);
    float big = -INFINITY;
    for (int s = 0; s < splits; ++s) big = fmaxf(big, p[s * (dv + 2)]);
    float total = 0.0f;
    for (int s = 0; s < splits; ++s) {
        const float ms = p[s * (dv + 2)];
        total += p[s * (dv + 2) + 1] * (ms == -INFINITY ? 0.0f : expf(ms - big));
    }
    for (i64 col = threadIdx.x; col < dv; col += blockDim.x) {
        float o = 0.0f;
        for (int s = 0; s < splits; ++s) {
            const float ms = p[s * (dv + 2)];
            if (ms != -INFINITY) o += p[s * (dv + 2) + 2 + col] * expf(ms - big);
        }
        const float out = total > 0.0f ? o / total : 0.0f;
        st(d, col, h, iq, i3, out);
        // Warp-uniform: dv is a multiple of 32 where q8 is given, so a warp's 32 columns are
        // one block.
        if (q8 != nullptr) q8_1_warp(out, threadIdx.x % WARP, q8 + (w * dv + col) / 32 * Q8_1_BYTES);
    }
}
