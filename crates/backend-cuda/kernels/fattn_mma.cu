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

// Stages the KV cells c0 .. c0 + CELLS (zeros past n_kv) in shared memory for fm_step: K rows
// as halves (s_k, FM_KS halves a row), V transposed (s_vt: row = head column, VS halves a row).
// The NT threads (thread tid of them) move 16-byte units, 8 halves of one cell's row: every
// load of K (then of V) is issued before the first store, so a tile waits for the memory once
// and not once per load (the loops run to compile-time bounds, guarded by the head size). K's
// units go along the rows (coalesced reads); V's down the cells (consecutive threads write
// consecutive halves of a transposed row: no bank conflicts).
template <int CELLS, int VS, int NT>
__device__ __forceinline__ void fm_stage(u32 *s_k, u32 *s_vt, const TT &k, const TT &v, i64 c0,
                                         i64 hk, i64 hv, i64 i3, int dk, int tid) {
    constexpr int UNITS = CELLS * FM_D / 8 / NT;  // a thread's units at the largest head size
    const i64 n_kv = k.ne[1];
    const int per_row = dk / 8, total = CELLS * per_row;
    u32x4 buf[UNITS];
#pragma unroll
    for (int i = 0; i < UNITS; ++i) {
        const int u = tid + i * NT, j = u / per_row, cu = u % per_row;
        buf[i] = u32x4{0, 0, 0, 0};
        if (u < total && c0 + j < n_kv)
            buf[i] = rd128(row_ptr(k, c0 + j, hk, i3 % k.ne[3]) + 16 * cu);
    }
#pragma unroll
    for (int i = 0; i < UNITS; ++i) {
        const int u = tid + i * NT, j = u / per_row, cu = u % per_row;
        if (u < total) {
            u32 *dst = s_k + (j * FM_KS + 8 * cu) / 2;
            dst[0] = buf[i].x;
            dst[1] = buf[i].y;
            dst[2] = buf[i].z;
            dst[3] = buf[i].w;
        }
    }
#pragma unroll
    for (int i = 0; i < UNITS; ++i) {
        const int u = tid + i * NT, j = u % CELLS, cu = u / CELLS;
        buf[i] = u32x4{0, 0, 0, 0};
        if (u < total && c0 + j < n_kv)
            buf[i] = rd128(row_ptr(v, c0 + j, hv, i3 % v.ne[3]) + 16 * cu);
    }
    u16 *vt = (u16 *)s_vt;
#pragma unroll
    for (int i = 0; i < UNITS; ++i) {
        const int u = tid + i * NT, j = u % CELLS, cu = u / CELLS;
        if (u < total) {
            const u32 w[4] = {buf[i].x, buf[i].y, buf[i].z, buf[i].w};
#pragma unroll
            for (int e = 0; e < 8; ++e) vt[(8 * cu + e) * VS + j] = (u16)(w[e / 2] >> (16 * (e & 1)));
        }
    }
}

// One warp's step over a staged tile: its 16 query rows (A fragments qa, dk / 16 = nkc chunks)
// against the tile's cells; score(n, x, dot) turns the raw dot of this lane's element (cell
// 8n + 2t + (x & 1) of the tile, row g or g + 8 for x < 2 or not) into the final score or
// -INFINITY; then the online softmax (mx, sum: rows g and g + 8, sum this lane's share) and
// o += P V over nvt = dv / 8 tiles of head columns.
template <int CELLS, int VS, class Score>
__device__ __forceinline__ void fm_step(const u32 *s_k, const u32 *s_vt, const u32 (&qa)[FM_D / 16][4],
                                        float (&o)[FM_D / 8][4], float *mx, float *sum, int nkc,
                                        int nvt, Score score) {
    const int lane = threadIdx.x % WARP, g = lane / 4, t = lane % 4;
    float s[CELLS / 8][4];
#pragma unroll
    for (int n = 0; n < CELLS / 8; ++n) {
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
    for (int n = 0; n < CELLS / 8; ++n)
        for (int x = 0; x < 4; ++x) {
            s[n][x] = score(n, x, s[n][x]);
            tmax[x / 2] = fmaxf(tmax[x / 2], s[n][x]);
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
    for (int n = 0; n < CELLS / 8; ++n)
        for (int x = 0; x < 4; ++x) s[n][x] = s[n][x] == -INFINITY ? 0.0f : expf(s[n][x] - mx[x / 2]);
    for (int r = 0; r < 2; ++r) sum[r] *= corr[r];
#pragma unroll
    for (int n = 0; n < CELLS / 8; ++n) {
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
    for (int kc = 0; kc < CELLS / 16; ++kc) {
        const u32 a0 = pack_h2(s[2 * kc][0], s[2 * kc][1]);
        const u32 a1 = pack_h2(s[2 * kc][2], s[2 * kc][3]);
        const u32 a2 = pack_h2(s[2 * kc + 1][0], s[2 * kc + 1][1]);
        const u32 a3 = pack_h2(s[2 * kc + 1][2], s[2 * kc + 1][3]);
#pragma unroll
        for (int n = 0; n < FM_D / 8; ++n) {
            if (n >= nvt) break;
            const u32 *vr = s_vt + ((8 * n + g) * VS + kc * 16 + 2 * t) / 2;
            mma_f16_16816(o[n], a0, a1, a2, a3, vr[0], vr[4]);
        }
    }
}

// A warp's 16 query rows as A fragments: qv(r, col) the value of row r (0..15) at column col.
template <class Qv>
__device__ __forceinline__ void fm_load_q(u32 (&qa)[FM_D / 16][4], int nkc, Qv qv) {
    const int lane = threadIdx.x % WARP, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int kc = 0; kc < FM_D / 16; ++kc) {
        if (kc >= nkc) break;
        const int c = kc * 16 + 2 * t;
        qa[kc][0] = pack_h2(qv(g, c), qv(g, c + 1));
        qa[kc][1] = pack_h2(qv(g + 8, c), qv(g + 8, c + 1));
        qa[kc][2] = pack_h2(qv(g, c + 8), qv(g, c + 9));
        qa[kc][3] = pack_h2(qv(g + 8, c + 8), qv(g + 8, c + 9));
    }
}

// The scaled, soft-capped dot plus the ALiBi-scaled mask of query row iq of head h at cell ic
// (-INFINITY past the cells, past the rows or masked).
__device__ __forceinline__ float fm_score(float dot, const TT &m, int has_mask, float scale,
                                          float softcap, float slope, i64 ic, i64 n_kv, i64 iq,
                                          i64 n_q, i64 h, i64 i3) {
    if (ic >= n_kv || iq >= n_q) return -INFINITY;
    const float mv = has_mask ? slope * ld(m, ic, iq, h % m.ne[2], i3 % m.ne[3]) : 0.0f;
    if (mv == -INFINITY) return -INFINITY;
    float val = dot * scale;
    if (softcap != 0.0f) val = softcap * tanhf(val / softcap);
    return val + mv;
}

extern "C" __global__ void fattn_mma_op(TT d, TT q, TT k, TT v, TT m, int has_mask, float scale,
                                        float max_bias, float softcap, TT sk, int has_sinks) {
    pdl_start();
    __shared__ u32 s_k[FM_CELLS * FM_KS / 2];
    __shared__ u32 s_vt[FM_D * FM_VS / 2];
    const int tid = threadIdx.x, lane = tid % WARP, wi = tid / WARP;
    const int g = lane / 4, t = lane % 4;
    const i64 n_q = q.ne[1], n_head = q.ne[2], n_kv = k.ne[1];
    const i64 h = blockIdx.y, i3 = blockIdx.z;
    const i64 hk = h / (n_head / k.ne[2]), hv = h / (n_head / v.ne[2]);
    const int dk = (int)q.ne[0], nkc = dk / 16, nvt = dk / 8;
    const float slope = alibi_slope(max_bias, h, n_head);
    // This warp's 16 query rows; this lane's two (g and g + 8).
    const i64 rw = (i64)blockIdx.x * FM_ROWS + wi * 16, r0 = rw + g, r1 = r0 + 8;
    // (Loops run to the compile-time bounds, guarded, so the arrays stay in registers.)
    u32 qa[FM_D / 16][4];
    fm_load_q(qa, nkc, [&](int r, int col) { return rw + r < n_q ? ld(q, col, rw + r, h, i3) : 0.0f; });
    float o[FM_D / 8][4];
#pragma unroll
    for (int n = 0; n < FM_D / 8; ++n)
        for (int x = 0; x < 4; ++x) o[n][x] = 0.0f;
    float mx[2] = {-INFINITY, -INFINITY}, sum[2] = {0.0f, 0.0f};
    for (i64 c0 = 0; c0 < n_kv; c0 += FM_CELLS) {
        __syncthreads();  // the previous tile read by every warp
        fm_stage<FM_CELLS, FM_VS, FM_WARPS * WARP>(s_k, s_vt, k, v, c0, hk, hv, i3, dk, tid);
        __syncthreads();
        fm_step<FM_CELLS, FM_VS>(s_k, s_vt, qa, o, mx, sum, nkc, nvt, [&](int n, int x, float dot) {
            return fm_score(dot, m, has_mask, scale, softcap, slope, c0 + 8 * n + 2 * t + (x & 1),
                            n_kv, x < 2 ? r0 : r1, n_q, h, i3);
        });
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

// FLASH_ATTN_EXT for decoding on the tensor cores (flash decoding): a block of FMD_WARPS warps
// per (KV head, group of 16 of the query rows of the heads sharing it: row j is head hk * G +
// j / n_q, query row j % n_q; blockIdx.x = hk * groups + the group) and chunk of KV cells
// [s * chunk, (s + 1) * chunk) (split s = blockIdx.y), so each K and V byte is read once for
// 16 rows (all of them with G x n_q <= 16). Warp w takes the chunk's tiles of FMD_CELLS cells
// w, w + FMD_WARPS, ..., each staged in the warp's own shared memory, with its own online
// softmax; the warps' states are merged through shared memory at the end. With one split the
// block writes the result; with several a partial per row (max, sum, dv weighted values:
// fattn_vec_op's layout) for fattn_vec_combine. The same arguments as fattn_vec_op.
#define FMD_WARPS 4
#define FMD_CELLS 16
#define FMD_VS (FMD_CELLS + 8)
// A warp's staging (K rows, transposed V) in u32; the merge needs less than the block's.
#define FMD_STAGE (FMD_CELLS * FM_KS / 2 + FM_D * FMD_VS / 2)
extern "C" __global__ void fattn_mma_dec_op(TT d, TT q, TT k, TT v, TT m, int has_mask,
                                            float scale, float max_bias, float softcap,
                                            int splits, i64 chunk, float *part) {
    pdl_start();
    __shared__ u32 smem[FMD_WARPS * FMD_STAGE];
    const int lane = threadIdx.x % WARP, wi = threadIdx.x / WARP, g = lane / 4, t = lane % 4;
    const i64 n_q = q.ne[1], n_head = q.ne[2], n_kv = k.ne[1];
    const i64 group = n_head / k.ne[2], rows = group * n_q, groups = (rows + 15) / 16;
    const i64 hk = blockIdx.x / groups, j0 = (blockIdx.x % groups) * 16, i3 = blockIdx.z;
    const i64 hv = hk * v.ne[2] / k.ne[2];
    const int dk = (int)q.ne[0], nkc = dk / 16, nvt = dk / 8, dv = nvt * 8;
    const int split = blockIdx.y;
    const i64 c_begin = (i64)split * chunk;
    const i64 c_end = c_begin + chunk < n_kv ? c_begin + chunk : n_kv;
    // Row r of the 16: head and query row (rows past group * n_q are padding).
    const auto head_of = [&](int r) { return hk * group + (j0 + r) / n_q; };
    const auto iq_of = [&](int r) { return (j0 + r) % n_q; };
    const auto live = [&](int r) { return j0 + r < rows; };
    u32 qa[FM_D / 16][4];
    fm_load_q(qa, nkc, [&](int r, int col) {
        return live(r) ? ld(q, col, iq_of(r), head_of(r), i3) : 0.0f;
    });
    float o[FM_D / 8][4];
#pragma unroll
    for (int n = 0; n < FM_D / 8; ++n)
        for (int x = 0; x < 4; ++x) o[n][x] = 0.0f;
    float mx[2] = {-INFINITY, -INFINITY}, sum[2] = {0.0f, 0.0f};
    const float slope0 = alibi_slope(max_bias, head_of(g), n_head);
    const float slope1 = alibi_slope(max_bias, head_of(g + 8), n_head);
    u32 *s_k = smem + wi * FMD_STAGE, *s_vt = s_k + FMD_CELLS * FM_KS / 2;
    for (i64 c0 = c_begin + wi * FMD_CELLS; c0 < c_end; c0 += FMD_WARPS * FMD_CELLS) {
        __syncwarp();  // the previous tile read by every lane
        fm_stage<FMD_CELLS, FMD_VS, WARP>(s_k, s_vt, k, v, c0, hk, hv, i3, dk, lane);
        __syncwarp();
        fm_step<FMD_CELLS, FMD_VS>(s_k, s_vt, qa, o, mx, sum, nkc, nvt, [&](int n, int x, float dot) {
            const int r = x < 2 ? g : g + 8;
            if (!live(r)) return -INFINITY;
            const i64 ic = c0 + 8 * n + 2 * t + (x & 1);
            // Cells past this split's chunk belong to the next one.
            return fm_score(dot, m, has_mask, scale, softcap, x < 2 ? slope0 : slope1,
                            ic < c_end ? ic : n_kv, n_kv, iq_of(r), n_q, head_of(r), i3);
        });
    }
    for (int r = 0; r < 2; ++r) {
        sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 1);
        sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 2);
    }
    // The warps' states into shared memory (the staging, free once every warp is done), then
    // each (row, column) merged: a warp that saw no visible cell has max -inf and weight 0.
    __syncthreads();
    float *m_o = (float *)smem, *m_ms = m_o + FMD_WARPS * 16 * FM_D;
    for (int r = 0; r < 2; ++r) {
        const int row = g + 8 * r;
        if (t == 0) {
            m_ms[(wi * 16 + row) * 2] = mx[r];
            m_ms[(wi * 16 + row) * 2 + 1] = sum[r];
        }
#pragma unroll
        for (int n = 0; n < FM_D / 8; ++n) {
            if (n >= nvt) break;
            for (int x = 0; x < 2; ++x) m_o[(wi * 16 + row) * FM_D + 8 * n + 2 * t + x] = o[n][2 * r + x];
        }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < 16 * dv; e += FMD_WARPS * WARP) {
        const int row = e / dv, col = e % dv;
        if (!live(row)) continue;
        float big = -INFINITY;
        for (int w = 0; w < FMD_WARPS; ++w) big = fmaxf(big, m_ms[(w * 16 + row) * 2]);
        float total = 0.0f, acc = 0.0f;
        for (int w = 0; w < FMD_WARPS; ++w) {
            const float mw = m_ms[(w * 16 + row) * 2];
            if (mw == -INFINITY) continue;
            const float f = expf(mw - big);
            total += m_ms[(w * 16 + row) * 2 + 1] * f;
            acc += m_o[(w * 16 + row) * FM_D + col] * f;
        }
        const i64 h = head_of(row), iq = iq_of(row);
        if (splits > 1) {
            float *out = part + ((h + n_head * (iq + n_q * i3)) * splits + split) * (dv + 2);
            out[2 + col] = acc;
            if (col == 0) {
                out[0] = big;
                out[1] = total;
            }
        } else {
            st(d, col, h, iq, i3, total > 0.0f ? acc / total : 0.0f);
        }
    }
}
