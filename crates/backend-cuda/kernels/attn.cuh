// FLASH_ATTN_EXT's online softmax, shared by the generic kernel (ops.cu's flash_attn_op: one
// warp per query row over every cell) and the decode kernel (fattn_vec.cu: four warps per
// chunk of cells).

// One warp's state for one query row: running max, sum of weights, and the lane's output
// columns (col = lane + 32 * j, head sizes up to 512).
struct FaState {
    float mx, sum;
    float acc[16];
};

// Query row w of FLASH_ATTN_EXT (w = h + n_head * (iq + n_q * i3)) over the KV cells first,
// first + step, ... below end, each folded into a fresh state: the scaled (and soft-capped) dot
// with K plus the mask times the ALiBi slope, a masked cell (-inf) skipped.
__device__ __forceinline__ FaState fa_cells(const TT &q, const TT &k, const TT &v, const TT &m,
                                            int has_mask, float scale, float max_bias,
                                            float softcap, i64 w, i64 first, i64 end, i64 step,
                                            int lane) {
    const i64 n_q = q.ne[1], n_head = q.ne[2];
    const i64 h = w % n_head, iq = (w / n_head) % n_q, i3 = w / (n_head * n_q);
    const i64 hk = h / (n_head / k.ne[2]), hv = h / (n_head / v.ne[2]);
    const i64 dk = q.ne[0], dv = v.ne[0];
    const float slope = alibi_slope(max_bias, h, n_head);
    FaState fa;
    fa.mx = -INFINITY;
    fa.sum = 0.0f;
    for (int j = 0; j < 16; ++j) fa.acc[j] = 0.0f;
    const u8 *qr = row_ptr(q, iq, h, i3);
    for (i64 ic = first; ic < end; ic += step) {
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
        const float nm = fmaxf(fa.mx, s);
        const float corr = expf(fa.mx - nm), p = expf(s - nm);
        fa.sum = fa.sum * corr + p;
        const u8 *vr = row_ptr(v, ic, hv, i3 % v.ne[3]);
        for (int j = 0; j < 16; ++j) {
            const i64 col = lane + WARP * j;
            if (col < dv) fa.acc[j] = fa.acc[j] * corr + p * ld_row(v.type, vr, col, v.nb[0]);
        }
        fa.mx = nm;
    }
    return fa;
}
