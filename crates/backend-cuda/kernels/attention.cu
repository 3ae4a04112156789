// Flash attention (ggml_flash_attn_ext) for f32 queries against an f16 K/V cache: one block
// of 32 threads per (query row, head), the row's scores computed a key at a time with an
// online soft max (running max and sum, accumulator rescaled), so the n_kv scores never need
// memory. Grouped-query attention: head h reads K/V head h / (n_head / n_head_kv). The mask
// (f16, n_kv per query row) is added to the scaled score; softcap > 0 applies
// softcap * tanh(score / softcap) first, as ggml does.

struct AttnParams {
    int head_dim, n_kv, n_head, n_head_kv;
    i64 q_row, q_head;     // strides in f32 elements: between query rows, between heads
    i64 k_row, k_head;     // strides in f16 elements: between cache cells, between heads
    i64 v_row, v_head;
    i64 o_row, o_head;     // output strides in f32 elements
    i64 mask_row;          // f16 elements between the mask rows of consecutive query rows
    float scale, softcap;
};

#define ATTN_MAX_D 256

extern "C" __global__ void flash_attn_f16(const float *q, const u16 *k, const u16 *v,
                                          const u16 *mask, float *out, AttnParams p) {
    const int row = blockIdx.x, head = blockIdx.y, lane = threadIdx.x;
    const int kv_head = head / (p.n_head / p.n_head_kv);
    const float *qr = q + row * p.q_row + head * p.q_head;
    const u16 *kh = k + kv_head * p.k_head;
    const u16 *vh = v + kv_head * p.v_head;
    const u16 *m = mask ? mask + row * p.mask_row : 0;
    // Each lane owns dims lane, lane + 32, ... of the query and the accumulator.
    float qv[ATTN_MAX_D / WARP], acc[ATTN_MAX_D / WARP];
    const int per = (p.head_dim + WARP - 1) / WARP;
#pragma unroll
    for (int j = 0; j < ATTN_MAX_D / WARP; ++j) {
        const int d = lane + j * WARP;
        qv[j] = (j < per && d < p.head_dim) ? qr[d] : 0.0f;
        acc[j] = 0.0f;
    }
    float mx = -INFINITY, sum = 0.0f;
    for (int c = 0; c < p.n_kv; ++c) {
        const float bias = m ? h2f(m[c]) : 0.0f;
        if (bias == -INFINITY) continue;
        const u16 *kc = kh + (i64)c * p.k_row;
        float s = 0.0f;
#pragma unroll
        for (int j = 0; j < ATTN_MAX_D / WARP; ++j) {
            const int d = lane + j * WARP;
            if (j < per && d < p.head_dim) s += qv[j] * h2f(kc[d]);
        }
        s = warp_sum(s) * p.scale;
        if (p.softcap > 0.0f) s = p.softcap * tanhf(s / p.softcap);
        s += bias;
        const float new_mx = fmaxf(mx, s);
        const float old_scale = mx == -INFINITY ? 0.0f : expf(mx - new_mx);
        const float w = expf(s - new_mx);
        sum = sum * old_scale + w;
        const u16 *vc = vh + (i64)c * p.v_row;
#pragma unroll
        for (int j = 0; j < ATTN_MAX_D / WARP; ++j) {
            const int d = lane + j * WARP;
            if (j < per && d < p.head_dim) acc[j] = acc[j] * old_scale + w * h2f(vc[d]);
        }
        mx = new_mx;
    }
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    float *o = out + row * p.o_row + head * p.o_head;
#pragma unroll
    for (int j = 0; j < ATTN_MAX_D / WARP; ++j) {
        const int d = lane + j * WARP;
        if (j < per && d < p.head_dim) o[d] = acc[j] * inv;
    }
}
