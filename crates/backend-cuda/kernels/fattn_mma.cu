// FLASH_ATTN_EXT for prompts on the f16 tensor cores (sm_80+; F16 K and V, head sizes a
// multiple of 16 up to FM_D, the same for K and V): a block takes FM_ROWS query rows of one
// head, 16 per warp, and walks the KV cells in tiles of FM_CELLS whose K rows and transposed V
// rows sit in shared memory as f16 for all four warps. Per tile a warp computes its 16 x 32
// scores with mma.sync m16n8k16 (f16 in, f32 out) from its queries (f16 fragments kept in
// registers), applies scale, soft-cap, ALiBi-scaled mask, carries the online softmax per row
// (the four lanes of a row combine their maxima by shuffles; each keeps its own share of the
// sum), and adds P V with the scores' fragments reused as the A operand (FlashAttention-2's
// register layout). Sinks join the max and the sum at the end, as flash_attn_op's. The same
// arguments as fattn_tile_op.
//
// crates/backend-cuda/tests/host_attn.rs runs it on the CPU, the mma emulated from the PTX
// fragment layout, against f64.
#define FM_ROWS 64
#define FM_CELLS 32
#define FM_D 128
#define FM_WARPS 4
// Padded row lengths in halves: K rows (FM_D + 8: a warp's B reads, row g, word t, fall in 32
// banks) and transposed V rows (FM_CELLS + 8, likewise).
#define FM_KS (FM_D + 8)
#define FM_VS (FM_CELLS + 8)

// D += A B for a 16x16 f16 A (row-major; this lane's pairs: a0 row g cols 2t, 2t+1; a1 row g+8;
// a2 row g cols 2t+8, 2t+9; a3 row g+8), a 16x8 f16 B (column-major; b0 rows 2t, 2t+1 of
// column g; b1 rows 2t+8, 2t+9) and the 16x8 f32 D (d[0], d[1]: row g, columns 2t, 2t+1; d[2],
// d[3]: row g + 8), lane = 4g + t; pairs packed low half first.
#ifndef FM_HOST_MMA
__device__ __forceinline__ void mma_f16_16816(float *d, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0,
                                              u32 b1) {
#if __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
    __trap();  // not planned below sm_80
#endif
}
#endif

__device__ __forceinline__ u32 pack_h2(float lo, float hi) {
    return (u32)f2h(lo) | ((u32)f2h(hi) << 16);
}

extern "C" __global__ void fattn_mma_op(TT d, TT q, TT k, TT v, TT m, int has_mask, float scale,
                                        float max_bias, float softcap, TT sk, int has_sinks) {
    __shared__ u32 s_k[FM_CELLS * FM_KS / 2];
    __shared__ u32 s_vt[FM_D * FM_VS / 2];
    const int tid = threadIdx.x, lane = tid % WARP, wi = tid / WARP;
    const int g = lane / 4, t = lane % 4;
    const i64 n_q = q.ne[1], n_head = q.ne[2], n_kv = k.ne[1];
    const i64 h = blockIdx.y, i3 = blockIdx.z;
    const i64 hk = h / (n_head / k.ne[2]), hv = h / (n_head / v.ne[2]);
    const int dk = (int)q.ne[0], nkc = dk / 16, nvt = dk / 8;
    const float slope = alibi_slope(max_bias, h, n_head);
    // This lane's two query rows (g and g + 8 of the warp's 16).
    const i64 r0 = (i64)blockIdx.x * FM_ROWS + wi * 16 + g, r1 = r0 + 8;
    // The queries as A fragments, chunk kc of 16 head columns each.
    // (Loops run to the compile-time bounds, guarded, so the arrays stay in registers.)
    u32 qa[FM_D / 16][4];
#pragma unroll
    for (int kc = 0; kc < FM_D / 16; ++kc) {
        if (kc >= nkc) break;
        const int c = kc * 16 + 2 * t;
        const auto qv = [&](i64 r, int col) { return r < n_q ? ld(q, col, r, h, i3) : 0.0f; };
        qa[kc][0] = pack_h2(qv(r0, c), qv(r0, c + 1));
        qa[kc][1] = pack_h2(qv(r1, c), qv(r1, c + 1));
        qa[kc][2] = pack_h2(qv(r0, c + 8), qv(r0, c + 9));
        qa[kc][3] = pack_h2(qv(r1, c + 8), qv(r1, c + 9));
    }
    float o[FM_D / 8][4];
#pragma unroll
    for (int n = 0; n < FM_D / 8; ++n)
        for (int x = 0; x < 4; ++x) o[n][x] = 0.0f;
    float mx[2] = {-INFINITY, -INFINITY}, sum[2] = {0.0f, 0.0f};
    for (i64 c0 = 0; c0 < n_kv; c0 += FM_CELLS) {
        __syncthreads();  // the previous tile read by every warp
        // K rows as pairs of halves; V transposed (row = head column, pairs of cells).
        for (int x = tid; x < FM_CELLS * dk / 2; x += blockDim.x) {
            const int j = x / (dk / 2), c = 2 * (x % (dk / 2));
            u32 kv = 0;
            if (c0 + j < n_kv) kv = rd32(row_ptr(k, c0 + j, hk, i3 % k.ne[3]) + 2 * c);
            s_k[(j * FM_KS + c) / 2] = kv;
        }
        for (int x = tid; x < FM_CELLS / 2 * dk; x += blockDim.x) {
            const int jp = x / dk, c = x % dk, j = 2 * jp;
            u32 lo = 0, hi = 0;
            if (c0 + j < n_kv) lo = rd16(row_ptr(v, c0 + j, hv, i3 % v.ne[3]) + 2 * c);
            if (c0 + j + 1 < n_kv) hi = rd16(row_ptr(v, c0 + j + 1, hv, i3 % v.ne[3]) + 2 * c);
            s_vt[(c * FM_VS + j) / 2] = lo | (hi << 16);
        }
        __syncthreads();
        // Scores: 4 tiles of 8 cells, s[n][0..1] row g, s[n][2..3] row g + 8.
        float s[FM_CELLS / 8][4];
#pragma unroll
        for (int n = 0; n < FM_CELLS / 8; ++n) {
            for (int x = 0; x < 4; ++x) s[n][x] = 0.0f;
#pragma unroll
            for (int kc = 0; kc < FM_D / 16; ++kc) {
                if (kc >= nkc) break;
                const u32 *kr = s_k + ((8 * n + g) * FM_KS + kc * 16 + 2 * t) / 2;
                mma_f16_16816(s[n], qa[kc][0], qa[kc][1], qa[kc][2], qa[kc][3], kr[0], kr[4]);
            }
        }
        float tmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < FM_CELLS / 8; ++n)
            for (int x = 0; x < 4; ++x) {
                const i64 ic = c0 + 8 * n + 2 * t + (x & 1), iq = x < 2 ? r0 : r1;
                float val = -INFINITY;
                if (ic < n_kv && iq < n_q) {
                    const float mv = has_mask ? slope * ld(m, ic, iq, h % m.ne[2], i3 % m.ne[3]) : 0.0f;
                    if (mv != -INFINITY) {
                        val = s[n][x] * scale;
                        if (softcap != 0.0f) val = softcap * tanhf(val / softcap);
                        val += mv;
                    }
                }
                s[n][x] = val;
                tmax[x / 2] = fmaxf(tmax[x / 2], val);
            }
        float corr[2];
        for (int r = 0; r < 2; ++r) {
            tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 1));
            tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 2));
            const float nm = fmaxf(mx[r], tmax[r]);
            corr[r] = nm == -INFINITY ? 1.0f : expf(mx[r] - nm);
            mx[r] = nm;
        }
#pragma unroll
        for (int n = 0; n < FM_CELLS / 8; ++n)
            for (int x = 0; x < 4; ++x) {
                const float p = s[n][x] == -INFINITY ? 0.0f : expf(s[n][x] - mx[x / 2]);
                s[n][x] = p;
            }
        for (int r = 0; r < 2; ++r) sum[r] *= corr[r];
        for (int n = 0; n < FM_CELLS / 8; ++n) {
            sum[0] += s[n][0] + s[n][1];
            sum[1] += s[n][2] + s[n][3];
        }
#pragma unroll
        for (int n = 0; n < FM_D / 8; ++n) {
            o[n][0] *= corr[0];
            o[n][1] *= corr[0];
            o[n][2] *= corr[1];
            o[n][3] *= corr[1];
        }
        // O += P V over the tile's cells, 16 at a time: P's fragments are the scores'.
#pragma unroll
        for (int kc = 0; kc < FM_CELLS / 16; ++kc) {
            const u32 a0 = pack_h2(s[2 * kc][0], s[2 * kc][1]);
            const u32 a1 = pack_h2(s[2 * kc][2], s[2 * kc][3]);
            const u32 a2 = pack_h2(s[2 * kc + 1][0], s[2 * kc + 1][1]);
            const u32 a3 = pack_h2(s[2 * kc + 1][2], s[2 * kc + 1][3]);
#pragma unroll
            for (int n = 0; n < FM_D / 8; ++n) {
                if (n >= nvt) break;
                const u32 *vr = s_vt + ((8 * n + g) * FM_VS + kc * 16 + 2 * t) / 2;
                mma_f16_16816(o[n], a0, a1, a2, a3, vr[0], vr[4]);
            }
        }
    }
    // Each row's sum from its four lanes; sinks; the output.
    for (int r = 0; r < 2; ++r) {
        sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 1);
        sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 2);
    }
    for (int r = 0; r < 2; ++r) {
        const i64 iq = r == 0 ? r0 : r1;
        if (iq >= n_q) continue;
        float total = sum[r], ms = 1.0f;
        if (has_sinks) {
            const float sink = ld(sk, h, 0, 0, 0);
            if (sink > mx[r]) {
                ms = expf(mx[r] - sink);
                total = total * ms + 1.0f;
            } else {
                total += expf(sink - mx[r]);
            }
        }
        const float inv = total > 0.0f ? ms / total : 0.0f;
#pragma unroll
        for (int n = 0; n < FM_D / 8; ++n) {
            if (n >= nvt) break;
            for (int x = 0; x < 2; ++x) st(d, 8 * n + 2 * t + x, h, iq, i3, o[n][2 * r + x] * inv);
        }
    }
}
