// Shared by every kernel file after the prelude: the tensor descriptor the graph kernels take
// (ggml's ne/nb), element loads and stores for every type the backend supports, and the
// per-element dequantization of ggml's block formats.

// ggml type ids (enum ggml_type), as tessera_tensor::DType.
#define T_F32 0
#define T_F16 1
#define T_Q4_0 2
#define T_Q4_1 3
#define T_Q5_0 6
#define T_Q5_1 7
#define T_Q8_0 8
#define T_Q2_K 10
#define T_Q3_K 11
#define T_Q4_K 12
#define T_Q5_K 13
#define T_Q6_K 14
#define T_IQ4_NL 20
#define T_IQ4_XS 23
#define T_I32 26
#define T_I64 27
#define T_BF16 30
#define T_MXFP4 39

// A tensor as a kernel sees it: its first byte, elements and byte strides per dimension, type.
// Mirrored by `TensorArg` in src/ops.rs (#[repr(C)]).
struct TT {
    u8 *p;
    i64 ne[4];
    i64 nb[4];
    i32 type;
    i32 pad;
};

__device__ __forceinline__ i64 n_elems(const TT &t) { return t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3]; }

// Logical index i (dimension 0 fastest) as four coordinates of shape ne.
__device__ __forceinline__ void unravel(const i64 *ne, i64 i, i64 *c) {
    c[0] = i % ne[0];
    i /= ne[0];
    c[1] = i % ne[1];
    i /= ne[1];
    c[2] = i % ne[2];
    c[3] = i / ne[2];
}

__device__ __forceinline__ u8 *row_ptr(const TT &t, i64 i1, i64 i2, i64 i3) {
    return t.p + i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3];
}

__device__ __forceinline__ u16 f2bf(float f) {
    const u32 u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)((u >> 16) | 64);  // NaN stays NaN
    return (u16)((u + (0x7fffu + ((u >> 16) & 1))) >> 16);
}

__device__ __constant__ i8 KV_IQ4NL[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                           1,    13,   25,  38,  53,  69,  89,  113};
__device__ __constant__ i8 KV_MXFP4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// Legacy 32-value blocks: value j (0..32) of the block at b.
__device__ __forceinline__ float deq_q4_0(const u8 *b, int j) {
    const u8 q = b[2 + (j % 16)];
    return h2f(rd16(b)) * ((int)(j < 16 ? q & 15 : q >> 4) - 8);
}
__device__ __forceinline__ float deq_q4_1(const u8 *b, int j) {
    const u8 q = b[4 + (j % 16)];
    return h2f(rd16(b)) * (j < 16 ? q & 15 : q >> 4) + h2f(rd16(b + 2));
}
__device__ __forceinline__ float deq_q5_0(const u8 *b, int j) {
    const u32 qh = rd32(b + 2);
    const u8 q = b[6 + (j % 16)];
    const int v = (j < 16 ? q & 15 : q >> 4) | (((qh >> j) & 1) << 4);
    return h2f(rd16(b)) * (v - 16);
}
__device__ __forceinline__ float deq_q5_1(const u8 *b, int j) {
    const u32 qh = rd32(b + 4);
    const u8 q = b[8 + (j % 16)];
    const int v = (j < 16 ? q & 15 : q >> 4) | (((qh >> j) & 1) << 4);
    return h2f(rd16(b)) * v + h2f(rd16(b + 2));
}
__device__ __forceinline__ float deq_q8_0(const u8 *b, int j) {
    return h2f(rd16(b)) * (float)(i8)b[2 + j];
}
__device__ __forceinline__ float deq_iq4_nl(const u8 *b, int j) {
    const u8 q = b[2 + (j % 16)];
    return h2f(rd16(b)) * KV_IQ4NL[j < 16 ? q & 15 : q >> 4];
}
// ggml_e8m0_to_fp32_half: 2^(e - 128).
__device__ __forceinline__ float e8m0_half(u8 e) {
    return __uint_as_float(e < 2 ? (0x00200000u << e) : ((u32)(e - 1) << 23));
}
__device__ __forceinline__ float deq_mxfp4(const u8 *b, int j) {
    const u8 q = b[1 + (j % 16)];
    return e8m0_half(b[0]) * KV_MXFP4[j < 16 ? q & 15 : q >> 4];
}

// K-quants (256 values). Q2_K: scales[16], qs[64], d, dmin.
__device__ __forceinline__ int two_bits(const u8 *qs, int e) {
    return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}
__device__ __forceinline__ float deq_q2_k(const u8 *b, int e) {
    const u8 sc = b[e / 16];
    return h2f(rd16(b + 80)) * (sc & 15) * two_bits(b + 16, e) - h2f(rd16(b + 82)) * (sc >> 4);
}
// Q3_K: hmask[32], qs[64], scales[12], d.
__device__ __forceinline__ float deq_q3_k(const u8 *b, int e) {
    const u8 *s = b + 96;
    const int j = e / 16;
    const int low = j < 8 ? s[j] & 15 : s[j - 8] >> 4;
    const int high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    const int sc = (low | (high << 4)) - 32;
    const int q = two_bits(b + 32, e) - (((b[e % 32] >> (e / 32)) & 1) ? 0 : 4);
    return h2f(rd16(b + 108)) * sc * q;
}
// ggml's get_scale_min_k4 over the 12 scale bytes of Q4_K / Q5_K.
__device__ __forceinline__ void k4_scale_min(int j, const u8 *q, int *d, int *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}
// Q4_K: d, dmin, scales[12], qs[128].
__device__ __forceinline__ float deq_q4_k(const u8 *b, int e) {
    int sc, mn;
    k4_scale_min(e / 32, b + 4, &sc, &mn);
    const int q = (b[16 + 32 * (e / 64) + e % 32] >> (4 * ((e % 64) / 32))) & 15;
    return h2f(rd16(b)) * sc * q - h2f(rd16(b + 2)) * mn;
}
// Q5_K: d, dmin, scales[12], qh[32], qs[128].
__device__ __forceinline__ float deq_q5_k(const u8 *b, int e) {
    int sc, mn;
    k4_scale_min(e / 32, b + 4, &sc, &mn);
    const int q = ((b[48 + 32 * (e / 64) + e % 32] >> (4 * ((e % 64) / 32))) & 15) |
                  (((b[16 + e % 32] >> (e / 32)) & 1) << 4);
    return h2f(rd16(b)) * sc * q - h2f(rd16(b + 2)) * mn;
}
// Q6_K: ql[128], qh[64], scales[16] (i8), d.
__device__ __forceinline__ float deq_q6_k(const u8 *b, int j) {
    const int half = j / 128, l = j % 32, quarter = (j % 128) / 32;
    const u8 *ql = b + 64 * half, *qh = b + 128 + 32 * half;
    const i8 *sc = (const i8 *)(b + 192) + 8 * half;
    const int lo = quarter & 1 ? ql[l + 32] : ql[l];
    const int q = ((quarter >= 2 ? lo >> 4 : lo & 15) | (((qh[l] >> (2 * quarter)) & 3) << 4));
    return h2f(rd16(b + 208)) * sc[l / 16 + 2 * quarter] * (q - 32);
}
// IQ4_XS: d, scales_h (u16), scales_l[4], qs[128].
__device__ __forceinline__ float deq_iq4_xs(const u8 *b, int e) {
    const int ib = e / 32, w = e % 32;
    const int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 15) | (((rd16(b + 2) >> (2 * ib)) & 3) << 4);
    const u8 q = b[8 + 16 * ib + w % 16];
    return h2f(rd16(b)) * (ls - 32) * KV_IQ4NL[w < 16 ? q & 15 : q >> 4];
}

// Element i0 of the row at `row` (its byte stride nb0 for the one-value types).
__device__ __forceinline__ float ld_row(int type, const u8 *row, i64 i0, i64 nb0) {
    switch (type) {
    case T_F32: return *(const float *)(row + i0 * nb0);
    case T_F16: return h2f(*(const u16 *)(row + i0 * nb0));
    case T_BF16: return bf2f(*(const u16 *)(row + i0 * nb0));
    case T_I32: return (float)*(const i32 *)(row + i0 * nb0);
    case T_Q4_0: return deq_q4_0(row + (i0 / 32) * 18, i0 % 32);
    case T_Q4_1: return deq_q4_1(row + (i0 / 32) * 20, i0 % 32);
    case T_Q5_0: return deq_q5_0(row + (i0 / 32) * 22, i0 % 32);
    case T_Q5_1: return deq_q5_1(row + (i0 / 32) * 24, i0 % 32);
    case T_Q8_0: return deq_q8_0(row + (i0 / 32) * 34, i0 % 32);
    case T_IQ4_NL: return deq_iq4_nl(row + (i0 / 32) * 18, i0 % 32);
    case T_MXFP4: return deq_mxfp4(row + (i0 / 32) * 17, i0 % 32);
    case T_Q2_K: return deq_q2_k(row + (i0 / 256) * 84, i0 % 256);
    case T_Q3_K: return deq_q3_k(row + (i0 / 256) * 110, i0 % 256);
    case T_Q4_K: return deq_q4_k(row + (i0 / 256) * 144, i0 % 256);
    case T_Q5_K: return deq_q5_k(row + (i0 / 256) * 176, i0 % 256);
    case T_Q6_K: return deq_q6_k(row + (i0 / 256) * 210, i0 % 256);
    case T_IQ4_XS: return deq_iq4_xs(row + (i0 / 256) * 136, i0 % 256);
    default: return __int_as_float(0x7fc00000);  // refused by supports_op; NaN if reached
    }
}

__device__ __forceinline__ float ld(const TT &t, i64 i0, i64 i1, i64 i2, i64 i3) {
    return ld_row(t.type, row_ptr(t, i1, i2, i3), i0, t.nb[0]);
}

// An index tensor's element (I32 or I64).
__device__ __forceinline__ i64 ld_idx(const TT &t, i64 i0, i64 i1, i64 i2) {
    const u8 *p = t.p + i0 * t.nb[0] + i1 * t.nb[1] + i2 * t.nb[2];
    return t.type == T_I64 ? *(const i64 *)p : (i64) * (const i32 *)p;
}

// Stores v at (i0..i3) of a one-value-per-element tensor (F32, F16, BF16, I32).
__device__ __forceinline__ void st(const TT &t, i64 i0, i64 i1, i64 i2, i64 i3, float v) {
    u8 *p = row_ptr(t, i1, i2, i3) + i0 * t.nb[0];
    switch (t.type) {
    case T_F32: *(float *)p = v; break;
    case T_F16: *(u16 *)p = f2h(v); break;
    case T_BF16: *(u16 *)p = f2bf(v); break;
    case T_I32: *(i32 *)p = (i32)v; break;
    default: break;
    }
}

// ggml's reference quantizers for one 32-value block (x: the values; out: the block's bytes).
__device__ __forceinline__ void st16(u8 *p, u16 v) { p[0] = v & 0xff; p[1] = v >> 8; }

__device__ void quantize_block(int type, const float *x, u8 *out) {
    if (type == T_Q8_0) {
        float amax = 0.0f;
        for (int j = 0; j < 32; ++j) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        st16(out, f2h(d));
        for (int j = 0; j < 32; ++j) out[2 + j] = (u8)(i8)roundf(x[j] * id);
    } else if (type == T_Q4_0 || type == T_Q5_0) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 32; ++j)
            if (fabsf(x[j]) > amax) { amax = fabsf(x[j]); max = x[j]; }
        const bool five = type == T_Q5_0;
        const float d = max / (five ? -16.0f : -8.0f), id = d != 0.0f ? 1.0f / d : 0.0f;
        st16(out, f2h(d));
        u32 qh = 0;
        u8 *qs = out + (five ? 6 : 2);
        for (int j = 0; j < 16; ++j) {
            const float off = five ? 16.5f : 8.5f;
            const int top = five ? 31 : 15;
            const int a = min(top, (int)(i8)(x[j] * id + off));
            const int b = min(top, (int)(i8)(x[j + 16] * id + off));
            qs[j] = (u8)((a & 15) | ((b & 15) << 4));
            qh |= ((u32)((a >> 4) & 1) << j) | ((u32)((b >> 4) & 1) << (j + 16));
        }
        if (five) { st16(out + 2, qh & 0xffff); st16(out + 4, qh >> 16); }
    } else if (type == T_Q4_1 || type == T_Q5_1) {
        float lo = x[0], hi = x[0];
        for (int j = 1; j < 32; ++j) { lo = fminf(lo, x[j]); hi = fmaxf(hi, x[j]); }
        const bool five = type == T_Q5_1;
        const float d = (hi - lo) / (five ? 31.0f : 15.0f), id = d != 0.0f ? 1.0f / d : 0.0f;
        st16(out, f2h(d));
        st16(out + 2, f2h(lo));
        u32 qh = 0;
        u8 *qs = out + (five ? 8 : 4);
        for (int j = 0; j < 16; ++j) {
            const int top = five ? 31 : 15;
            const int a = min(top, (int)(i8)((x[j] - lo) * id + 0.5f));
            const int b = min(top, (int)(i8)((x[j + 16] - lo) * id + 0.5f));
            qs[j] = (u8)((a & 15) | ((b & 15) << 4));
            qh |= ((u32)((a >> 4) & 1) << j) | ((u32)((b >> 4) & 1) << (j + 16));
        }
        if (five) { st16(out + 4, qh & 0xffff); st16(out + 6, qh >> 16); }
    }
}

// Bytes of one block of a type quantize_block writes.
__device__ __forceinline__ int block_bytes(int type) {
    switch (type) {
    case T_Q8_0: return 34;
    case T_Q4_0: return 18;
    case T_Q5_0: return 22;
    case T_Q4_1: return 20;
    case T_Q5_1: return 24;
    default: return 0;
    }
}

// ALiBi slope of head h of n_head (max_bias 0: 1), as ggml.
__device__ __forceinline__ float alibi_slope(float max_bias, i64 h, i64 n_head) {
    if (max_bias <= 0.0f) return 1.0f;
    const int log2 = 1 << (31 - __clz((int)n_head));
    const float m0 = exp2f(-max_bias / log2), m1 = exp2f(-(max_bias / 2.0f) / log2);
    return h < log2 ? powf(m0, (float)(h + 1)) : powf(m1, (float)(2 * (h - log2) + 1));
}

// The gated units' activations (glu_op, unary_op and the fused gate/up product).
__device__ __forceinline__ float gelu_tanh(float x) {
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}
__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }
