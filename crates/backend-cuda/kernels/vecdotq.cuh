// The int8 dot products of the MMVQ kernels (quant.cu): sub-block j (32 values) of weight block
// `b` (j is 0 for the 32-value types, 0..7 for the 256-value ones) against the Q8_1 block of the
// same 32 activations, lane `part` (0..3) of the four that share the block taking a quarter of
// it. Plain functions of bytes:
// crates/backend-cuda/tests/host_kernels.rs compiles this file for the CPU and checks every
// one against the f64 dot of the dequantized blocks, without a GPU.

// Four consecutive bytes of a block as one i32 at any alignment (MXFP4's 17-byte blocks).
__device__ __forceinline__ i32 ld_i32(const u8 *p) { return (i32)rd32(p); }
// The same in blocks of an even size (every other type: 2-byte aligned), and two bytes there:
// plain loads with no alignment branch, so the unrolled loops of the MMVQ kernels issue the
// loads of several blocks together (behind rd32's branches each block's loads waited for the
// previous block's dot product in the machine code).
__device__ __forceinline__ i32 ld_w32(const u8 *p) {
    return (i32)((u32)*(const u16 *)p | ((u32)*(const u16 *)(p + 2) << 16));
}
__device__ __forceinline__ u16 ld_w16(const u8 *p) { return *(const u16 *)p; }
// Words of types whose block size is a multiple of 4 (Q4_1, Q5_1, Q2_K, IQ4_XS) or of 16 (Q4_K,
// Q5_K): in rows that start on such a boundary their words are 4-byte (8-byte) aligned, read
// with one load where ld_w32 takes two (llama.cpp's MMVQ reads Q4_K with 4-byte loads). The
// type table's `load_align` says which; the executor checks each weight's address and strides
// against it before it launches these kernels.
__device__ __forceinline__ i32 ld_a32(const u8 *p) { return *(const i32 *)p; }
__device__ __forceinline__ void ld_a64(const u8 *p, i32 &lo, i32 &hi) {
    const u32x2 v = *(const u32x2 *)p;
    lo = (i32)v.x;
    hi = (i32)v.y;
}
// Q8_1 activation bytes: their blocks (36 bytes) start 4-byte aligned in the scratch arena.
__device__ __forceinline__ i32 ld_y32(const u8 *p) { return *(const i32 *)p; }
__device__ __forceinline__ u16 ld_y16(const u8 *p) { return *(const u16 *)p; }
// A Q8_1 block's scale d and d * sum (its first four bytes) with one load.
__device__ __forceinline__ void ld_y_ds(const u8 *y, float &dy, float &sy) {
    const u32 w = (u32)ld_y32(y);
    dy = h2f((u16)w);
    sy = h2f((u16)(w >> 16));
}

// The lane's integer dot with Q8_1 block y when its four bytes `lo` are values 4*part..+3 and
// `hi` values 16+4*part..+3 (the nibble halves of the 32-value types).
__device__ __forceinline__ i32 dot_halves(i32 lo, i32 hi, const u8 *y, int part) {
    return dp4a(hi, ld_y32(y + 4 + 16 + 4 * part), dp4a(lo, ld_y32(y + 4 + 4 * part), 0));
}
// The same when a0 and a1 are values 8*part..+3 and 8*part+4..+7 (a run of eight).
__device__ __forceinline__ i32 dot_run(i32 a0, i32 a1, const u8 *y, int part) {
    return dp4a(a1, ld_y32(y + 8 + 8 * part), dp4a(a0, ld_y32(y + 4 + 8 * part), 0));
}

__device__ __forceinline__ float vdot_q4_0(const u8 *b, int, const u8 *y, int part) {
    const i32 q = ld_w32(b + 2 + 4 * part);
    const int s = dot_halves(q & 0x0F0F0F0F, (q >> 4) & 0x0F0F0F0F, y, part);
    // sum((q - 8) * y) = sum(q * y) - 8 * sum(y); sum(y) of this part is s_y / d_y, taken
    // once per block as (8 / 4) * s for each of the 4 lanes.
    float dy, sy;
    ld_y_ds(y, dy, sy);
    return h2f(ld_w16(b)) * (s * dy - 2.0f * sy);
}
__device__ __forceinline__ float vdot_q8_0(const u8 *b, int, const u8 *y, int part) {
    const int s = dot_run(ld_w32(b + 2 + 8 * part), ld_w32(b + 6 + 8 * part), y, part);
    return h2f(ld_w16(b)) * h2f(ld_y16(y)) * s;
}
// The fifth bits of Q5 blocks: values 4*part.. (low nibbles) and 16+4*part.. (high) of q.
__device__ __forceinline__ void q5_bits(u32 qh, i32 q, int part, i32 &lo, i32 &hi) {
    lo = q & 0x0F0F0F0F;
    hi = (q >> 4) & 0x0F0F0F0F;
    for (int k = 0; k < 4; ++k) {
        lo |= ((qh >> (4 * part + k)) & 1) << (8 * k + 4);
        hi |= ((qh >> (16 + 4 * part + k)) & 1) << (8 * k + 4);
    }
}
__device__ __forceinline__ float vdot_q5_0(const u8 *b, int, const u8 *y, int part) {
    i32 lo, hi;
    q5_bits((u32)ld_w32(b + 2), ld_w32(b + 6 + 4 * part), part, lo, hi);
    const int s = dot_halves(lo, hi, y, part);
    float dy, sy;
    ld_y_ds(y, dy, sy);
    return h2f(ld_w16(b)) * (s * dy - 4.0f * sy);
}

__device__ __forceinline__ float vdot_q4_1(const u8 *b, int, const u8 *y, int part) {
    const i32 q = ld_a32(b + 4 + 4 * part);
    const int s = dot_halves(q & 0x0F0F0F0F, (q >> 4) & 0x0F0F0F0F, y, part);
    // sum((d q + m) y) = d sum(q y) + m sum(y); the block's m sum(y) = m s_y, a quarter per
    // lane.
    float dy, sy;
    ld_y_ds(y, dy, sy);
    return h2f(ld_w16(b)) * dy * s + h2f(ld_w16(b + 2)) * sy * 0.25f;
}
__device__ __forceinline__ float vdot_q5_1(const u8 *b, int, const u8 *y, int part) {
    i32 lo, hi;
    q5_bits((u32)ld_a32(b + 4), ld_a32(b + 8 + 4 * part), part, lo, hi);
    const int s = dot_halves(lo, hi, y, part);
    float dy, sy;
    ld_y_ds(y, dy, sy);
    return h2f(ld_w16(b)) * dy * s + h2f(ld_w16(b + 2)) * sy * 0.25f;
}
// Four nibbles of q (low or high halves of its bytes) through a 16-entry table, as four i8.
__device__ __forceinline__ i32 lut4(const i8 *table, i32 q, int shift) {
    u32 r = 0;
    for (int k = 0; k < 4; ++k) r |= (u32)(u8)table[(q >> (8 * k + shift)) & 15] << (8 * k);
    return (i32)r;
}
__device__ __forceinline__ float vdot_iq4_nl(const u8 *b, int, const u8 *y, int part) {
    const i32 q = ld_w32(b + 2 + 4 * part);
    const int s = dot_halves(lut4(KV_IQ4NL, q, 0), lut4(KV_IQ4NL, q, 4), y, part);
    return h2f(ld_w16(b)) * h2f(ld_y16(y)) * s;
}
__device__ __forceinline__ float vdot_mxfp4(const u8 *b, int, const u8 *y, int part) {
    const i32 q = ld_i32(b + 1 + 4 * part);
    const int s = dot_halves(lut4(KV_MXFP4, q, 0), lut4(KV_MXFP4, q, 4), y, part);
    return e8m0_half(b[0]) * h2f(ld_y16(y)) * s;
}

// K-quants and IQ4_XS (256-value superblocks), one 32-value sub-block j of superblock `b` at a
// time, against the Q8_1 block of the same 32 values; lane `part` takes values 8*part..+7
// (IQ4_XS: the nibble halves, as the 32-value types).
__device__ __forceinline__ i32 q8_sum(const u8 *y, int part) {
    // The exact integer sum of the lane's 8 activation quants.
    return dot_run(0x01010101, 0x01010101, y, part);
}
__device__ __forceinline__ float vdot_q2_k(const u8 *b, int j, const u8 *y, int part) {
    const u8 *q = b + 16 + 32 * (j / 4) + 8 * part;
    const int sh = 2 * (j % 4);
    const i32 a0 = (ld_a32(q) >> sh) & 0x03030303, a1 = (ld_a32(q + 4) >> sh) & 0x03030303;
    const int s = dot_run(a0, a1, y, part);
    const u8 sc = b[2 * j + part / 2];
    const float dy = h2f(ld_y16(y));
    return dy * (h2f(ld_w16(b + 80)) * (sc & 15) * s - h2f(ld_w16(b + 82)) * (sc >> 4) * q8_sum(y, part));
}
// Q3_K: the lane's eight values (one 16-value scale group) as q + 4 * high bit in 0..7, so
// the signed quants' sum is s - 4 * (the part's activation sum); the 6-bit scale less 32.
__device__ __forceinline__ float vdot_q3_k(const u8 *b, int j, const u8 *y, int part) {
    const u8 *q = b + 32 + 32 * (j / 4) + 8 * part, *hm = b + 8 * part;
    const int sh = 2 * (j % 4);
    const i32 a0 = ((ld_w32(q) >> sh) & 0x03030303) | (((ld_w32(hm) >> j) & 0x01010101) << 2);
    const i32 a1 = ((ld_w32(q + 4) >> sh) & 0x03030303) | (((ld_w32(hm + 4) >> j) & 0x01010101) << 2);
    const int s = dot_run(a0, a1, y, part);
    const u8 *sc6 = b + 96;
    const int g = 2 * j + part / 2;
    const int low = g < 8 ? sc6[g] & 15 : sc6[g - 8] >> 4;
    const int high = (sc6[8 + g % 4] >> (2 * (g / 4))) & 3;
    const int sc = (low | (high << 4)) - 32;
    return h2f(ld_w16(b + 108)) * sc * h2f(ld_y16(y)) * (float)(s - 4 * q8_sum(y, part));
}
// Q4_K's and Q5_K's sub-block j of the block at b applied to its integer sum s against the
// Q8_1 part at y: d * scale * s - dmin * min * (the part's sum), times the part's scale. The
// 16-byte header (d, dmin, scales[12]) is read with two 8-byte loads (load_align 8), where
// byte loads took up to six; the 6-bit scale and min as k4_scale_min unpacks them.
__device__ __forceinline__ float k4_apply(const u8 *b, int j, int s, const u8 *y, int part) {
    i32 h0, h1, h2, h3;
    ld_a64(b, h0, h1);     // d, dmin; scales[0..3]
    ld_a64(b + 8, h2, h3); // scales[4..7]; scales[8..11]
    const int k = 8 * (j & 3);
    const int s0 = ((u32)h1 >> k) & 255, s1 = ((u32)h2 >> k) & 255, s2 = ((u32)h3 >> k) & 255;
    const int sc = j < 4 ? s0 & 63 : (s2 & 15) | ((s0 >> 6) << 4);
    const int mn = j < 4 ? s1 & 63 : (s2 >> 4) | ((s1 >> 6) << 4);
    const float dy = h2f(ld_y16(y));
    return dy * (h2f((u16)h0) * sc * s - h2f((u16)((u32)h0 >> 16)) * mn * q8_sum(y, part));
}
__device__ __forceinline__ float vdot_q4_k(const u8 *b, int j, const u8 *y, int part) {
    const u8 *q = b + 16 + 32 * (j / 2) + 8 * part;
    const int sh = 4 * (j % 2);
    i32 w0, w1;
    ld_a64(q, w0, w1);
    const i32 a0 = (w0 >> sh) & 0x0F0F0F0F, a1 = (w1 >> sh) & 0x0F0F0F0F;
    return k4_apply(b, j, dot_run(a0, a1, y, part), y, part);
}
__device__ __forceinline__ float vdot_q5_k(const u8 *b, int j, const u8 *y, int part) {
    const u8 *q = b + 48 + 32 * (j / 2) + 8 * part, *qh = b + 16 + 8 * part;
    const int sh = 4 * (j % 2);
    i32 w0, w1, h0, h1;
    ld_a64(q, w0, w1);
    ld_a64(qh, h0, h1);
    const i32 a0 = ((w0 >> sh) & 0x0F0F0F0F) | (((h0 >> j) & 0x01010101) << 4);
    const i32 a1 = ((w1 >> sh) & 0x0F0F0F0F) | (((h1 >> j) & 0x01010101) << 4);
    return k4_apply(b, j, dot_run(a0, a1, y, part), y, part);
}
__device__ __forceinline__ float vdot_q6_k(const u8 *b, int j, const u8 *y, int part) {
    const int half = j / 4, quarter = j % 4;
    const u8 *ql = b + 64 * half + (quarter & 1 ? 32 : 0) + 8 * part;
    const u8 *qh = b + 128 + 32 * half + 8 * part;
    const int sh = quarter >= 2 ? 4 : 0, hs = 2 * quarter;
    const i32 a0 = ((ld_w32(ql) >> sh) & 0x0F0F0F0F) | (((ld_w32(qh) >> hs) & 0x03030303) << 4);
    const i32 a1 =
        ((ld_w32(ql + 4) >> sh) & 0x0F0F0F0F) | (((ld_w32(qh + 4) >> hs) & 0x03030303) << 4);
    const int s = dot_run(a0, a1, y, part);
    // The quants are q - 32: sum((q - 32) y) = sum(q y) - 32 sum(y).
    const int sc = ((const i8 *)(b + 192))[8 * half + 2 * quarter + part / 2];
    return h2f(ld_w16(b + 208)) * sc * h2f(ld_y16(y)) * (float)(s - 32 * q8_sum(y, part));
}
__device__ __forceinline__ float vdot_iq4_xs(const u8 *b, int j, const u8 *y, int part) {
    const i32 q = ld_a32(b + 8 + 16 * j + 4 * part);
    const int ls = ((b[4 + j / 2] >> (4 * (j % 2))) & 15) | (((ld_w16(b + 2) >> (2 * j)) & 3) << 4);
    const int s = dot_halves(lut4(KV_IQ4NL, q, 0), lut4(KV_IQ4NL, q, 4), y, part);
    return h2f(ld_w16(b)) * (ls - 32) * h2f(ld_y16(y)) * s;
}

