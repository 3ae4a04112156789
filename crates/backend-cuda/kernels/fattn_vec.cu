// FLASH_ATTN_EXT for decoding (few query rows): flash decoding. Block (row w, split s) takes the
// KV cells [s * chunk, (s + 1) * chunk); its FV_WARPS warps take every FV_WARPS-th cell of it,
// each with flash_attn_op's online softmax, and merge their states in shared memory. With one
// split the block writes the result; with several it writes a partial (max, sum, dv weighted
// values) per split into `part`, which fattn_vec_combine merges. Head sizes up to 512.
#define FV_WARPS 4

extern "C" __global__ void fattn_vec_op(TT d, TT q, TT k, TT v, TT m, int has_mask, float scale,
                                        float max_bias, float softcap, int splits, i64 chunk,
                                        float *part) {
    const i64 w = blockIdx.x;
    const int split = blockIdx.y;
    const int lane = threadIdx.x % WARP, wi = threadIdx.x / WARP;
    const i64 n_q = q.ne[1], n_head = q.ne[2];
    const i64 h = w % n_head, iq = (w / n_head) % n_q, i3 = w / (n_head * n_q);
    const i64 hk = h / (n_head / k.ne[2]), hv = h / (n_head / v.ne[2]);
    const i64 dk = q.ne[0], dv = v.ne[0];
    const float slope = alibi_slope(max_bias, h, n_head);
    float acc[16];
    for (int j = 0; j < 16; ++j) acc[j] = 0.0f;
    float mx = -INFINITY, sum = 0.0f;
    const u8 *qr = row_ptr(q, iq, h, i3);
    const i64 c0 = (i64)split * chunk;
    const i64 c1 = c0 + chunk < k.ne[1] ? c0 + chunk : k.ne[1];
    for (i64 ic = c0 + wi; ic < c1; ic += FV_WARPS) {
        float mv = 0.0f;
        if (has_mask) {
            mv = slope * ld(m, ic, iq, h % m.ne[2], i3 % m.ne[3]);
            if (mv == -INFINITY) continue;
        }
        const u8 *kr = row_ptr(k, ic, hk, i3 % k.ne[3]);
        float dot = 0.0f;
        for (i64 j = lane; j < dk; j += WARP) dot += ld_row(q.type, qr, j, q.nb[0]) * ld_row(k.type, kr, j, k.nb[0]);
        float s = warp_sum(dot) * scale;
        if (softcap != 0.0f) s = softcap * tanhf(s / softcap);
        s += mv;
        const float nm = fmaxf(mx, s);
        const float corr = expf(mx - nm), p = expf(s - nm);
        sum = sum * corr + p;
        const u8 *vr = row_ptr(v, ic, hv, i3 % v.ne[3]);
        for (int j = 0; j < 16; ++j) {
            const i64 col = lane + WARP * j;
            if (col < dv) acc[j] = acc[j] * corr + p * ld_row(v.type, vr, col, v.nb[0]);
        }
        mx = nm;
    }
    // The warps' states, merged by warp 0 (a warp that saw no cell has max -inf: weight 0).
    __shared__ float s_mx[FV_WARPS], s_sum[FV_WARPS];
    __shared__ float s_acc[FV_WARPS][512];
    if (lane == 0) {
        s_mx[wi] = mx;
        s_sum[wi] = sum;
    }
    for (int j = 0; j < 16; ++j) {
        const i64 col = lane + WARP * j;
        if (col < dv) s_acc[wi][col] = acc[j];
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
extern "C" __global__ void fattn_vec_combine(TT d, TT q, const float *part, int splits, i64 dv) {
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
        st(d, col, h, iq, i3, total > 0.0f ? o / total : 0.0f);
    }
}
