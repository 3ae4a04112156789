// FLASH_ATTN_EXT for prompts (more query rows than the decode path takes): a block takes
// FT_ROWS query rows of one head and walks the KV cells in tiles of FT_CELLS, each tile's K and
// V rows converted to f32 into shared memory once for all the block's rows. A warp owns
// FT_ROWS / FT_WARPS rows; in a tile, lane j scores cell j for each of them (the whole dot in
// one lane, so no reduction per cell), the warp's max and sum carry the online softmax, and each
// lane accumulates its own output columns over the tile's cells. Head sizes up to FT_D; sinks
// join the max and the sum at the end, as flash_attn_op's.
#define FT_ROWS 16
#define FT_CELLS 32
#define FT_D 128
#define FT_WARPS 4
#define FT_PER (FT_ROWS / FT_WARPS)
#define FT_COLS (FT_D / WARP)

extern "C" __global__ void fattn_tile_op(TT d, TT q, TT k, TT v, TT m, int has_mask, float scale,
                                         float max_bias, float softcap, TT sk, int has_sinks) {
    pdl_start();
    __shared__ float s_q[FT_ROWS][FT_D];
    __shared__ float s_k[FT_CELLS][FT_D + 1];  // +1: lane j reads row j, no bank conflicts
    __shared__ float s_v[FT_CELLS][FT_D];
    const int tid = threadIdx.x, lane = tid % WARP, wi = tid / WARP;
    const i64 n_q = q.ne[1], n_head = q.ne[2], n_kv = k.ne[1];
    const i64 iq0 = (i64)blockIdx.x * FT_ROWS, h = blockIdx.y, i3 = blockIdx.z;
    const i64 hk = h / (n_head / k.ne[2]), hv = h / (n_head / v.ne[2]);
    const i64 dk = q.ne[0], dv = v.ne[0];
    const float slope = alibi_slope(max_bias, h, n_head);
    for (i64 x = tid; x < FT_ROWS * dk; x += blockDim.x) {
        const i64 r = x / dk, c = x % dk;
        s_q[r][c] = iq0 + r < n_q ? ld(q, c, iq0 + r, h, i3) : 0.0f;
    }
    float mx[FT_PER], sum[FT_PER], acc[FT_PER][FT_COLS];
    for (int r = 0; r < FT_PER; ++r) {
        mx[r] = -INFINITY;
        sum[r] = 0.0f;
        for (int t = 0; t < FT_COLS; ++t) acc[r][t] = 0.0f;
    }
    for (i64 c0 = 0; c0 < n_kv; c0 += FT_CELLS) {
        __syncthreads();  // the previous tile read by every warp (and the queries written)
        for (i64 x = tid; x < FT_CELLS * dk; x += blockDim.x) {
            const i64 j = x / dk, c = x % dk;
            s_k[j][c] = c0 + j < n_kv ? ld(k, c, c0 + j, hk, i3 % k.ne[3]) : 0.0f;
        }
        for (i64 x = tid; x < FT_CELLS * dv; x += blockDim.x) {
            const i64 j = x / dv, c = x % dv;
            s_v[j][c] = c0 + j < n_kv ? ld(v, c, c0 + j, hv, i3 % v.ne[3]) : 0.0f;
        }
        __syncthreads();
        for (int rr = 0; rr < FT_PER; ++rr) {
            const i64 r = wi * FT_PER + rr, iq = iq0 + r, ic = c0 + lane;
            if (iq >= n_q) break;  // the same for the whole warp
            float s = -INFINITY;
            if (ic < n_kv) {
                const float mv = has_mask ? slope * ld(m, ic, iq, h % m.ne[2], i3 % m.ne[3]) : 0.0f;
                if (mv != -INFINITY) {
                    float dot = 0.0f;
                    for (i64 c = 0; c < dk; ++c) dot += s_q[r][c] * s_k[lane][c];
                    s = dot * scale;
                    if (softcap != 0.0f) s = softcap * tanhf(s / softcap);
                    s += mv;
                }
            }
            const float nm = fmaxf(mx[rr], warp_max(s));
            if (nm == -INFINITY) continue;  // nothing seen yet (the whole warp agrees)
            const float corr = expf(mx[rr] - nm);
            const float p = s == -INFINITY ? 0.0f : expf(s - nm);
            sum[rr] = sum[rr] * corr + warp_sum(p);
            for (int t = 0; t < FT_COLS; ++t) acc[rr][t] *= corr;
            for (int j = 0; j < FT_CELLS; ++j) {
                const float pj = __shfl_sync(0xffffffffu, p, j);
                for (int t = 0; t < FT_COLS; ++t) {
                    const i64 col = lane + WARP * t;
                    if (col < dv) acc[rr][t] += pj * s_v[j][col];
                }
            }
            mx[rr] = nm;
        }
    }
    for (int rr = 0; rr < FT_PER; ++rr) {
        const i64 iq = iq0 + wi * FT_PER + rr;
        if (iq >= n_q) break;
        float total = sum[rr];
        if (has_sinks) {
            const float sink = ld(sk, h, 0, 0, 0);
            if (sink > mx[rr]) {
                const float ms = expf(mx[rr] - sink);
                for (int t = 0; t < FT_COLS; ++t) acc[rr][t] *= ms;
                total = total * ms + 1.0f;
            } else {
                total += expf(sink - mx[rr]);
            }
        }
        const float inv = total > 0.0f ? 1.0f / total : 0.0f;
        for (int t = 0; t < FT_COLS; ++t) {
            const i64 col = lane + WARP * t;
            if (col < dv) st(d, col, h, iq, i3, acc[rr][t] * inv);
        }
    }
}
