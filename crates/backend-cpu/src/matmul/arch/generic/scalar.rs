//! Scalar dot products, one per weight type with a kernel of its own: the path on CPUs without
//! AVX2 and the yardstick the SIMD kernels are tested against.
//!
//! Quantized kernels sum integer products per block (or per sub-block, times its integer
//! scale) exactly, then scale in f32 as ggml's generic kernels do; float kernels accumulate in
//! f64 (ggml's `ggml_float`).

#[cfg(doc)]
use crate::matmul::VecDot;
use half::f16;
use tessera_tensor::blocks::*;

/// The leftover f16 elements `from..n` of a dot product, added in f64 to `s` (the SIMD
/// kernels' tail and the scalar level's whole loop).
///
/// # Safety
/// `x` and `y` must be valid for `n` reads of `u16`.
pub(in crate::matmul) unsafe fn f16_tail(
    mut s: f64,
    from: usize,
    n: usize,
    x: *const u16,
    y: *const u16,
) -> f32 {
    for i in from..n {
        // SAFETY: i < n.
        let (a, b) = unsafe { (x.add(i).read_unaligned(), y.add(i).read_unaligned()) };
        s += f64::from(tessera_tensor::quant::f16_to_f32(a) * tessera_tensor::quant::f16_to_f32(b));
    }
    s as f32
}

/// A weight block with a scalar dot product against a block of its dot type.
pub(in crate::matmul) trait BlockDot: Copy {
    /// The activation block.
    type Y: Copy;
    /// Values per block.
    const QK: usize;
    /// `Σ x·y` over the block, scaled.
    fn dot(&self, y: &Self::Y) -> f32;
}

/// Sums the block dots over the `n / QK` blocks of two rows, in order.
///
/// # Safety
/// The [`VecDot`] contract: `x` and `y` hold `n / QK` readable blocks of `X` and `X::Y`.
pub(in crate::matmul) unsafe fn rows<X: BlockDot>(n: usize, x: *const u8, y: *const u8) -> f32 {
    let mut sum = 0.0;
    for i in 0..n / X::QK {
        // SAFETY: i < n / QK blocks of each row, read without alignment.
        let (a, b) = unsafe { (at::<X>(x, i), at::<X::Y>(y, i)) };
        sum += a.dot(&b);
    }
    sum
}

/// Implements [`BlockDot`] for a block type with the given function.
macro_rules! block_dot {
    ($($x:ty, $y:ty, $qk:expr, $f:ident;)*) => {$(
        impl BlockDot for $x {
            type Y = $y;
            const QK: usize = $qk;
            fn dot(&self, y: &$y) -> f32 {
                $f(self, y)
            }
        }
    )*};
}

block_dot! {
    BlockQ4_0, BlockQ8_0, QK4_0, q4_0;
    BlockQ4_1, BlockQ8_1, QK4_0, q4_1;
    BlockQ5_0, BlockQ8_0, QK4_0, q5_0;
    BlockQ5_1, BlockQ8_1, QK4_0, q5_1;
    BlockQ8_0, BlockQ8_0, QK4_0, q8_0;
    BlockIQ4NL, BlockQ8_0, QK4_0, iq4_nl;
    BlockMXFP4, BlockQ8_0, QK4_0, mxfp4;
    BlockQ2K, BlockQ8K, QK_K, q2_k;
    BlockQ3K, BlockQ8K, QK_K, q3_k;
    BlockQ4K, BlockQ8K, QK_K, q4_k;
    BlockQ5K, BlockQ8K, QK_K, q5_k;
    BlockQ6K, BlockQ8K, QK_K, q6_k;
    BlockIQ4XS, BlockQ8K, QK_K, iq4_xs;
}

/// Reads element `i` of a row of `T` (no alignment needed).
///
/// # Safety
/// `p` must hold at least `i + 1` values of `T`.
#[inline(always)]
unsafe fn at<T: Copy>(p: *const u8, i: usize) -> T {
    // SAFETY: in bounds by the caller's contract.
    unsafe { p.cast::<T>().add(i).read_unaligned() }
}

/// F32 · F32.
///
/// # Safety
/// The [`VecDot`] contract.
pub(in crate::matmul) unsafe fn f32_f32(n: usize, x: *const u8, y: *const u8) -> f32 {
    // SAFETY: i < n values of each row.
    (0..n).map(|i| unsafe { f64::from(at::<f32>(x, i) * at::<f32>(y, i)) }).sum::<f64>() as f32
}

/// F16 · F16 (f32 products, f64 sum).
///
/// # Safety
/// The [`VecDot`] contract.
pub(in crate::matmul) unsafe fn f16_f16(n: usize, x: *const u8, y: *const u8) -> f32 {
    let h = |p, i| {
        // SAFETY: i < n values of the row.
        f16::from_bits(unsafe { at::<u16>(p, i) }).to_f32()
    };
    (0..n).map(|i| f64::from(h(x, i) * h(y, i))).sum::<f64>() as f32
}

/// BF16 · BF16 (f32 products, f64 sum).
///
/// # Safety
/// The [`VecDot`] contract.
pub(in crate::matmul) unsafe fn bf16_bf16(n: usize, x: *const u8, y: *const u8) -> f32 {
    let h = |p, i| {
        // SAFETY: i < n values of the row.
        f32::from_bits(u32::from(unsafe { at::<u16>(p, i) }) << 16)
    };
    (0..n).map(|i| f64::from(h(x, i) * h(y, i))).sum::<f64>() as f32
}

/// Nibble `j` (0..32) of a 32-value block: low nibbles are 0..16, high 16..32.
#[inline(always)]
fn nib(qs: &[u8; 16], j: usize) -> i32 {
    i32::from(if j < 16 { qs[j] & 0xF } else { qs[j - 16] >> 4 })
}

/// Value `j` of a 5-bit block: the nibble plus bit `j` of `qh` as bit 4.
#[inline(always)]
fn five(qs: &[u8; 16], qh: [u8; 4], j: usize) -> i32 {
    nib(qs, j) | ((((u32::from_le_bytes(qh) >> j) & 1) as i32) << 4)
}

/// `Σ f(j) · y[j]` over a 32-value block.
#[inline(always)]
fn isum32(y: &[i8; 32], f: impl Fn(usize) -> i32) -> i32 {
    (0..32).map(|j| f(j) * i32::from(y[j])).sum()
}

fn q4_0(a: &BlockQ4_0, b: &BlockQ8_0) -> f32 {
    isum32(&b.qs, |j| nib(&a.qs, j) - 8) as f32 * a.d.to_f32() * b.d.to_f32()
}

fn q4_1(a: &BlockQ4_1, b: &BlockQ8_1) -> f32 {
    let s = isum32(&b.qs, |j| nib(&a.qs, j));
    a.d.to_f32() * b.d.to_f32() * s as f32 + a.m.to_f32() * b.s.to_f32()
}

fn q5_0(a: &BlockQ5_0, b: &BlockQ8_0) -> f32 {
    isum32(&b.qs, |j| five(&a.qs, a.qh, j) - 16) as f32 * a.d.to_f32() * b.d.to_f32()
}

fn q5_1(a: &BlockQ5_1, b: &BlockQ8_1) -> f32 {
    let s = isum32(&b.qs, |j| five(&a.qs, a.qh, j));
    a.d.to_f32() * b.d.to_f32() * s as f32 + a.m.to_f32() * b.s.to_f32()
}

fn q8_0(a: &BlockQ8_0, b: &BlockQ8_0) -> f32 {
    isum32(&b.qs, |j| i32::from(a.qs[j])) as f32 * (a.d.to_f32() * b.d.to_f32())
}

fn iq4_nl(a: &BlockIQ4NL, b: &BlockQ8_0) -> f32 {
    let s = isum32(&b.qs, |j| i32::from(KVALUES_IQ4NL[nib(&a.qs, j) as usize]));
    a.d.to_f32() * b.d.to_f32() * s as f32
}

/// `ggml_e8m0_to_fp32_half`: half the E8M0 value, `2^(e - 128)` (subnormal for `e < 2`).
pub(in crate::matmul) fn e8m0_half(e: u8) -> f32 {
    f32::from_bits(if e < 2 { 0x0020_0000u32 << e } else { u32::from(e - 1) << 23 })
}

fn mxfp4(a: &BlockMXFP4, b: &BlockQ8_0) -> f32 {
    let s = isum32(&b.qs, |j| i32::from(KVALUES_MXFP4[nib(&a.qs, j) as usize]));
    b.d.to_f32() * e8m0_half(a.e) * s as f32
}

/// The 16 signed 6-bit scales of a Q3_K block (already minus 32).
pub(in crate::matmul) fn q3_k_scales(s: &[u8; 12]) -> [i8; 16] {
    std::array::from_fn(|j| {
        let low = if j < 8 { s[j] & 0xF } else { s[j - 8] >> 4 };
        let high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        (low | (high << 4)) as i8 - 32
    })
}

/// The 8 scales and 8 mins (6 bits each) of a Q4_K/Q5_K block, as bytes
/// `[scale 0..8, min 0..8]` (ggml's `utmp` unpacking).
pub(in crate::matmul) fn k4_scales(s: &[u8; 12]) -> [u8; 16] {
    let u = |i: usize| u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
    let (u0, u1, u2) = (u(0), u(1), u(2));
    let (m1, m2, m3) = (0x3f3f_3f3f, 0x0f0f_0f0f, 0x0303_0303);
    let words = [
        u0 & m1,
        (u2 & m2) | (((u0 >> 6) & m3) << 4),
        u1 & m1,
        ((u2 >> 4) & m2) | (((u1 >> 6) & m3) << 4),
    ];
    let mut out = [0u8; 16];
    for (o, w) in out.chunks_exact_mut(4).zip(words) {
        o.copy_from_slice(&w.to_le_bytes());
    }
    out
}

/// Two-bit value of element `e` in the Q2_K/Q3_K `qs` layout.
#[inline(always)]
fn two_bits(qs: &[u8; 64], e: usize) -> i32 {
    i32::from((qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3)
}

/// `Σ_j scale(j) · Σ_{e in sub-block j of 16} q(e) · y[e]`.
#[inline(always)]
fn isum16(y: &[i8; QK_K], scale: impl Fn(usize) -> i32, q: impl Fn(usize) -> i32) -> i32 {
    (0..16)
        .map(|j| scale(j) * (16 * j..16 * j + 16).map(|e| q(e) * i32::from(y[e])).sum::<i32>())
        .sum()
}

fn q2_k(a: &BlockQ2K, b: &BlockQ8K) -> f32 {
    let isum = isum16(&b.qs, |j| i32::from(a.scales[j] & 0xF), |e| two_bits(&a.qs, e));
    let summs: i32 = (0..16).map(|j| i32::from(a.scales[j] >> 4) * i32::from(b.bsums[j])).sum();
    b.d * a.d.to_f32() * isum as f32 - b.d * a.dmin.to_f32() * summs as f32
}

fn q3_k(a: &BlockQ3K, b: &BlockQ8K) -> f32 {
    let sc = q3_k_scales(&a.scales);
    let q = |e: usize| {
        let high = (a.hmask[e % 32] >> (e / 32)) & 1;
        two_bits(&a.qs, e) - if high == 0 { 4 } else { 0 }
    };
    let isum = isum16(&b.qs, |j| i32::from(sc[j]), q);
    b.d * a.d.to_f32() * isum as f32
}

/// Shared Q4_K/Q5_K body: `q(e)` is the unsigned quant of element `e`.
fn scale_min(d: f16, dmin: f16, scales: &[u8; 12], b: &BlockQ8K, q: impl Fn(usize) -> i32) -> f32 {
    let sm = k4_scales(scales);
    let isum: i32 = (0..8)
        .map(|s| {
            i32::from(sm[s]) * (32 * s..32 * s + 32).map(|e| q(e) * i32::from(b.qs[e])).sum::<i32>()
        })
        .sum();
    let summs: i32 = (0..8)
        .map(|s| i32::from(sm[8 + s]) * (i32::from(b.bsums[2 * s]) + i32::from(b.bsums[2 * s + 1])))
        .sum();
    b.d * d.to_f32() * isum as f32 - b.d * dmin.to_f32() * summs as f32
}

/// Nibble of element `e` in the Q4_K/Q5_K `qs` layout.
#[inline(always)]
fn k_nibble(qs: &[u8; 128], e: usize) -> i32 {
    i32::from((qs[32 * (e / 64) + e % 32] >> (4 * ((e % 64) / 32))) & 0xF)
}

fn q4_k(a: &BlockQ4K, b: &BlockQ8K) -> f32 {
    scale_min(a.d, a.dmin, &a.scales, b, |e| k_nibble(&a.qs, e))
}

fn q5_k(a: &BlockQ5K, b: &BlockQ8K) -> f32 {
    let q = |e: usize| k_nibble(&a.qs, e) | (i32::from((a.qh[e % 32] >> (e / 32)) & 1) << 4);
    scale_min(a.d, a.dmin, &a.scales, b, q)
}

fn q6_k(a: &BlockQ6K, b: &BlockQ8K) -> f32 {
    let q = |e: usize| {
        let (half, quarter, l) = (e / 128, (e % 128) / 32, e % 32);
        let lo = (a.ql[64 * half + l + 32 * (quarter & 1)] >> (4 * (quarter / 2))) & 0xF;
        let hi = (a.qh[32 * half + l] >> (2 * quarter)) & 3;
        i32::from(lo | (hi << 4)) - 32
    };
    let isum = isum16(&b.qs, |j| i32::from(a.scales[j]), q);
    b.d * a.d.to_f32() * isum as f32
}

fn iq4_xs(a: &BlockIQ4XS, b: &BlockQ8K) -> f32 {
    let d = a.d.to_f32() * b.d;
    let mut sum = 0.0;
    for ib in 0..8 {
        let ls = i32::from((a.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF)
            | (i32::from((a.scales_h >> (2 * ib)) & 3) << 4);
        let qs: &[u8; 16] = a.qs[16 * ib..16 * ib + 16].try_into().expect("16 bytes");
        let y: &[i8; 32] = b.qs[32 * ib..32 * ib + 32].try_into().expect("32 values");
        let s = isum32(y, |j| i32::from(KVALUES_IQ4NL[nib(qs, j) as usize]));
        sum += d * (ls - 32) as f32 * s as f32;
    }
    sum
}
