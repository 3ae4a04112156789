// The mixture-of-experts ops (qwen3moe, gpt-oss): the expert product, the router's sort, the
// per-expert bias and gpt-oss's clamped SwiGLU. Generic kernels over TT descriptors, the
// correctness baseline as in ops.cu; the batched expert paths (grouped products) replace
// MUL_MAT_ID's kernel where they apply.

// MUL_MAT_ID: d [M, n_used, n_tokens]; row (e, t) is expert ids[e, t]'s matrix (as: [K, M,
// n_expert]) times row (e % b.ne[1], t) of b ([K, n_b, n_tokens]). One warp per output
// element; an expert id out of range gives NaN (the router's ids never are).
extern "C" __global__ void mul_mat_id_op(TT d, TT as, TT b, TT ids) {
    pdl_start();
    const i64 o = (i64)blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    if (o >= n_elems(d)) return;
    const int lane = threadIdx.x % WARP;
    const i64 m = o % d.ne[0], e = (o / d.ne[0]) % d.ne[1], t = o / (d.ne[0] * d.ne[1]);
    const i64 expert = ld_idx(ids, e, t, 0);
    if (expert < 0 || expert >= as.ne[2]) {
        if (lane == 0) st(d, m, e, t, 0, __int_as_float(0x7fc00000));
        return;
    }
    const u8 *w = row_ptr(as, m, expert, 0), *x = row_ptr(b, e % b.ne[1], t, 0);
    float acc = 0.0f;
    for (i64 k = lane; k < as.ne[0]; k += WARP)
        acc += ld_row(as.type, w, k, as.nb[0]) * ld_row(b.type, x, k, b.nb[0]);
    acc = warp_sum(acc);
    if (lane == 0) st(d, m, e, t, 0, acc);
}

// ARGSORT of each row (I32 indexes, largest first when `descending`): each element's place is
// the number of elements that come before it, equal values in index order (a stable sort, as
// the CPU's). One thread per element, the row read once per element (router rows are short).
extern "C" __global__ void argsort_op(TT d, TT a, int descending) {
    pdl_start();
    GRID_STRIDE(i, n_elems(a)) {
        i64 c[4];
        unravel(a.ne, i, c);
        const u8 *row = row_ptr(a, c[1], c[2], c[3]);
        const float x = ld_row(a.type, row, c[0], a.nb[0]);
        i64 place = 0;
        for (i64 j = 0; j < a.ne[0]; ++j) {
            const float y = ld_row(a.type, row, j, a.nb[0]);
            const bool before = descending ? y > x : y < x;
            place += before || (y == x && j < c[0]);
        }
        *(i32 *)(row_ptr(d, c[1], c[2], c[3]) + place * d.nb[0]) = (i32)c[0];
    }
}

// ADD_ID: d = a + the row of b (one bias row per expert) that ids[e, t] picks, for row (e, t)
// of a; NaN for an id out of range.
extern "C" __global__ void add_id_op(TT d, TT a, TT b, TT ids) {
    pdl_start();
    GRID_STRIDE(i, n_elems(d)) {
        i64 c[4];
        unravel(d.ne, i, c);
        const i64 e = ld_idx(ids, c[1], c[2], 0);
        const float bias = e >= 0 && e < b.ne[1] ? ld(b, c[0], e, 0, 0) : __int_as_float(0x7fc00000);
        st(d, c[0], c[1], c[2], c[3], ld(a, c[0], c[1], c[2], c[3]) + bias);
    }
}

// SWIGLU_OAI (gpt-oss): the gate clamped above at `limit`, up to [-limit, limit] (NaN stays
// NaN, as std::min and std::clamp), gate * sigmoid(alpha * gate) * (up + 1).
extern "C" __global__ void swiglu_oai_op(TT d, TT g, TT u, float alpha, float limit) {
    pdl_start();
    GRID_STRIDE(i, n_elems(d)) {
        i64 c[4];
        unravel(d.ne, i, c);
        const float x0 = ld(g, c[0], c[1], c[2], c[3]), y0 = ld(u, c[0], c[1], c[2], c[3]);
        const float x = limit < x0 ? limit : x0;
        const float y = y0 < -limit ? -limit : (limit < y0 ? limit : y0);
        const float glu = x / (1.0f + expf(alpha * (-x)));
        st(d, c[0], c[1], c[2], c[3], glu * (y + 1.0f));
    }
}
