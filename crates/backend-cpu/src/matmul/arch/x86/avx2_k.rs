//! AVX2 dot products of the 256-value super-block types against Q8_K: Q2_K, Q3_K, Q4_K, Q5_K,
//! Q6_K and IQ4_XS.
//!
//! One scheme for all: the weights are unpacked to unsigned bytes, `maddubs` multiplies them
//! with the activation bytes into i16 pairs, `madd` applies the (sub-block) scales into i32,
//! and a constant offset (`q - 32` for Q6_K) or a min (Q2_K, Q4_K, Q5_K) is taken out once per
//! block through Q8_K's per-16 sums (`bsums`); Q3_K's offset (`q - 4`) is taken out of each
//! product pair, as ggml's kernel does (the lanes' integers, and so the rounding, depend on it). Each kernel is generic over
//! the number of activation rows `C` (see [`super::avx2`]).
//!
//! Q8_K block: f32 `d` at 0, `qs[256]` at 4, i16 `bsums[16]` at 260; 292 bytes.

use super::avx2::{fp16x2, hsum_ps, ld128, ld256, nibbles, rd};
use crate::matmul::scalar::{k4_scales, q3_k_scales};
#[cfg(any(test, doc))]
use crate::matmul::VecDot;
#[cfg(any(test, doc))]
use crate::matmul::VecDot4;
use std::arch::x86_64::*;
#[cfg(test)]
use tessera_tensor::DType;

/// Bytes of a Q8_K block.
const Q8K: usize = 292;

/// Declares the one-row kernel `$one` as `$n::<1>`.
macro_rules! one_row {
    ($($one:ident = $n:ident;)*) => {$(
        /// One-row form of the kernel of the same name with `_n`.
        ///
        /// # Safety
        /// The [`VecDot`] contract, and AVX2/FMA/F16C.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(in crate::matmul) unsafe fn $one(n: usize, x: *const u8, y: *const u8) -> f32 {
            // SAFETY: forwarded.
            unsafe { $n::<1>(n, x, [y])[0] }
        }
    )*};
}

one_row! {
    q2_k = q2_k_n;
    q3_k = q3_k_n;
    q4_k = q4_k_n;
    q5_k = q5_k_n;
    q6_k = q6_k_n;
    iq4_xs = iq4_xs_n;
}

/// `pshufb` controls over 8 i16 scales (duplicated in both 128-bit lanes) that give, for the
/// 32 values `32k..32k+32` of a half block, scale `2k` to the first 16 and `2k+1` to the rest.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn pair_controls() -> [__m256i; 4] {
    std::array::from_fn(|k| {
        let lane = |s: usize| _mm_set1_epi16((((2 * s + 1) << 8) | (2 * s)) as i16);
        _mm256_set_m128i(lane(2 * k + 1), lane(2 * k))
    })
}

/// `pshufb` control broadcasting i16 lane `s` (0..8) of each 128-bit lane.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn broadcast_control(s: usize) -> __m256i {
    _mm256_set1_epi16((((2 * s + 1) << 8) | (2 * s)) as i16)
}

/// Shifts each 16-bit lane right by `count`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn shr16(v: __m256i, count: usize) -> __m256i {
    _mm256_srl_epi16(v, _mm_cvtsi32_si128(count as i32))
}

/// The per-16 scales of one half block as i16, in both 128-bit lanes: `scales` holds 16
/// signed bytes; half `h` takes bytes `8h..8h+8`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn half_scales(scales: __m128i, h: usize) -> __m256i {
    let bytes = if h == 0 { scales } else { _mm_unpackhi_epi64(scales, scales) };
    _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(bytes))
}

/// How a per-16-scale type's correction (a min, or a constant offset of its quants) enters,
/// as ggml's AVX2 kernel for the type does it: the integers in the lanes differ, so the f32
/// rounding does too.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Correction {
    /// Q2_K: `Σ m·bsum` in its own lanes, times `dm`, one more FMA per block, before the
    /// scaled sums' (ggml's order).
    Mins,
    /// Q6_K: the offset `m = o·scale` taken out of the lanes through the block sums, in
    /// integers, before the conversion.
    BlockSums,
    /// Q3_K: the offset (4) taken out of each pair of products in i16, before the scales:
    /// every lane holds exactly its own bytes' `Σ scale·(q − 4)·y`.
    PerLane,
}

/// The shared loop of the per-16-scale types (Q2_K, Q3_K, Q6_K). For weight block `xb`,
/// `unpack(xb)` returns the 16 signed per-16 scales, the 256 unsigned quants as 8 vectors of 32
/// (in element order), the two float factors `dq` (multiplies `Σ scale·q·y`) and `dm`
/// (multiplies `Σ m·bsum`), and the 16 per-16 "mins" `m` as i16 ([`Correction`]; `dm` and `m`
/// unused where the correction is not [`Correction::Mins`] or [`Correction::BlockSums`]).
///
/// # Safety
/// The [`VecDot4`] contract for each row, `xsize` bytes per weight block, and AVX2/FMA/F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn per16_rows<const C: usize>(
    n: usize,
    x: *const u8,
    xsize: usize,
    y: [*const u8; C],
    correction: Correction,
    unpack: impl Fn(*const u8) -> (__m128i, [__m256i; 8], f32, f32, __m256i),
) -> [f32; C] {
    let ctl = pair_controls();
    let four = _mm256_set1_epi8(4);
    let mut acc = [_mm256_setzero_ps(); C];
    for i in 0..n / 256 {
        let (scales, q, dq, dm, mins) = unpack(x.wrapping_add(i * xsize));
        let sc = [half_scales(scales, 0), half_scales(scales, 1)];
        for (a, y) in acc.iter_mut().zip(y) {
            let yb = y.wrapping_add(Q8K * i);
            // SAFETY: block i of this activation row: d.
            let dy = unsafe { rd::<f32>(yb) };
            let mut sumi = _mm256_setzero_si256();
            for (j, q) in q.iter().enumerate() {
                // SAFETY: quants 32j..32j+32 of the block.
                let q8 = unsafe { ld256(yb.add(4 + 32 * j)) };
                let s = _mm256_shuffle_epi8(sc[j / 4], ctl[j % 4]);
                let mut p = _mm256_maddubs_epi16(*q, q8);
                if correction == Correction::PerLane {
                    // Pairs of (q − 4)·y, exact in i16 (at most 2 · 7 · 128).
                    p = _mm256_sub_epi16(p, _mm256_maddubs_epi16(four, q8));
                }
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, s));
            }
            match correction {
                // Q3_K's offset is already out of each pair.
                Correction::PerLane => {}
                Correction::BlockSums | Correction::Mins => {
                    // SAFETY: block i's 16 block sums (32 bytes at 260).
                    let summ = _mm256_madd_epi16(mins, unsafe { ld256(yb.add(260)) });
                    if correction == Correction::BlockSums {
                        sumi = _mm256_sub_epi32(sumi, summ);
                    } else {
                        // The mins first, as ggml's kernel adds them.
                        let m = _mm256_cvtepi32_ps(summ);
                        *a = _mm256_fmadd_ps(_mm256_set1_ps(dy * dm), m, *a);
                    }
                }
            }
            *a = _mm256_fmadd_ps(_mm256_set1_ps(dy * dq), _mm256_cvtepi32_ps(sumi), *a);
        }
    }
    acc.map(|a| hsum_ps(a))
}

/// The 2-bit fields of 32 bytes of `qs` as 4 vectors (shifts 0, 2, 4, 6).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn two_bit_fields(bits: __m256i) -> [__m256i; 4] {
    let m3 = _mm256_set1_epi8(3);
    std::array::from_fn(|k| _mm256_and_si256(shr16(bits, 2 * k), m3))
}

/// Q2_K · Q8_K against `C` rows (block: scales[16] at 0, qs[64] at 16, d at 80, dmin at 82).
///
/// # Safety
/// The [`VecDot4`] contract for each row, and AVX2/FMA/F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn q2_k_n<const C: usize>(
    n: usize,
    x: *const u8,
    y: [*const u8; C],
) -> [f32; C] {
    let unpack = |b: *const u8| {
        // SAFETY: `b` is a whole 84-byte Q2_K block.
        let (packed, lo, hi, dd) =
            unsafe { (ld128(b), ld256(b.add(16)), ld256(b.add(48)), rd::<u32>(b.add(80))) };
        let (d, dmin) = fp16x2(dd);
        let m4 = _mm_set1_epi8(0xF);
        let scales = _mm_and_si128(packed, m4);
        let mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(packed), m4));
        let (a, b) = (two_bit_fields(lo), two_bit_fields(hi));
        let q = [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]];
        (scales, q, d, -dmin, mins)
    };
    // SAFETY: forwarded.
    unsafe { per16_rows(n, x, 84, y, Correction::Mins, unpack) }
}

/// Q3_K · Q8_K against `C` rows (block: hmask[32] at 0, qs[64] at 32, scales[12] at 96, d at
/// 108). Quant `u = low2 | high << 2` is `q + 4`; ggml's kernel takes the 4 off each product
/// pair (its `q3h` term), so this one does too ([`Correction::PerLane`]).
///
/// # Safety
/// The [`VecDot4`] contract for each row, and AVX2/FMA/F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn q3_k_n<const C: usize>(
    n: usize,
    x: *const u8,
    y: [*const u8; C],
) -> [f32; C] {
    let unpack = |b: *const u8| {
        // SAFETY: `b` is a whole 110-byte Q3_K block.
        let (hmask, lo, hi, packed, d) = unsafe {
            (
                ld256(b),
                ld256(b.add(32)),
                ld256(b.add(64)),
                rd::<[u8; 12]>(b.add(96)),
                rd::<u16>(b.add(108)),
            )
        };
        let sc = q3_k_scales(&packed);
        // SAFETY: 16 bytes.
        let scales = unsafe { ld128(sc.as_ptr().cast()) };
        let one = _mm256_set1_epi8(1);
        let fields = [two_bit_fields(lo), two_bit_fields(hi)];
        let q: [__m256i; 8] = std::array::from_fn(|j| {
            let high = _mm256_and_si256(shr16(hmask, j), one);
            _mm256_or_si256(fields[j / 4][j % 4], _mm256_slli_epi16::<2>(high))
        });
        let dq = fp16x2(u32::from(d)).0;
        (scales, q, dq, 0.0, _mm256_setzero_si256())
    };
    // SAFETY: forwarded.
    unsafe { per16_rows(n, x, 110, y, Correction::PerLane, unpack) }
}

/// Q6_K · Q8_K against `C` rows (block: ql[128] at 0, qh[64] at 128, scales[16] at 192, d at
/// 208). Quant `u = low4 | high2 << 4` is `q + 32`.
///
/// # Safety
/// The [`VecDot4`] contract for each row, and AVX2/FMA/F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn q6_k_n<const C: usize>(
    n: usize,
    x: *const u8,
    y: [*const u8; C],
) -> [f32; C] {
    let unpack = |b: *const u8| {
        let (m4, m30) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x30));
        let mut q = [_mm256_setzero_si256(); 8];
        for h in 0..2 {
            // SAFETY: `b` is a whole 210-byte Q6_K block; half h's ql, ql + 32 and qh.
            let (l0, l1, qh) = unsafe {
                (ld256(b.add(64 * h)), ld256(b.add(64 * h + 32)), ld256(b.add(128 + 32 * h)))
            };
            let f = |lo: __m256i, hi: __m256i| {
                _mm256_or_si256(_mm256_and_si256(lo, m4), _mm256_and_si256(hi, m30))
            };
            q[4 * h] = f(l0, _mm256_slli_epi16::<4>(qh));
            q[4 * h + 1] = f(l1, _mm256_slli_epi16::<2>(qh));
            q[4 * h + 2] = f(_mm256_srli_epi16::<4>(l0), qh);
            q[4 * h + 3] = f(_mm256_srli_epi16::<4>(l1), _mm256_srli_epi16::<2>(qh));
        }
        // SAFETY: scales and d of the block.
        let (scales, d) = unsafe { (ld128(b.add(192)), rd::<u16>(b.add(208))) };
        // F16C from a general register, not fp16's bit manipulation: the block's first load
        // feeds no branch, and the conversion needs no spill (AVX2-only AMD EPYC, 2 threads:
        // Q6_K from 44% to 35% of a random Llama-3.2-1B Q4_K_M file's decode time).
        let dq = fp16x2(u32::from(d)).0;
        let mins = _mm256_slli_epi16::<5>(_mm256_cvtepi8_epi16(scales));
        (scales, q, dq, 0.0, mins)
    };
    // SAFETY: forwarded.
    unsafe { per16_rows(n, x, 210, y, Correction::BlockSums, unpack) }
}

/// How ggml's AVX2 kernels add the min corrections (the rounding differs, so each type keeps
/// its own, to give llama.cpp's bits).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mins {
    /// Q4_K: a separate 4-lane f32 accumulator, reduced on its own and added at the end.
    Lanes,
    /// Q5_K: the corrections summed as integers per block, accumulated in one f32 (with a
    /// fused multiply-add, as the compiler contracts `summs += dmin * x`).
    Scalar,
}

/// The shared loop of Q4_K and Q5_K (per-32 scales and mins). `unpack(xb)` returns the 16
/// bytes `[scale 0..8, min 0..8]`, the 256 unsigned quants as 8 vectors of 32, `d` and `dmin`.
///
/// # Safety
/// The [`VecDot4`] contract for each row, `xsize` bytes per weight block, and AVX2/FMA/F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn per32_rows<const C: usize>(
    n: usize,
    x: *const u8,
    xsize: usize,
    y: [*const u8; C],
    mins_mode: Mins,
    unpack: impl Fn(*const u8) -> ([u8; 16], [__m256i; 8], f32, f32),
) -> [f32; C] {
    let ctl: [__m256i; 8] = std::array::from_fn(|s| broadcast_control(s));
    let mut acc = [_mm256_setzero_ps(); C];
    let mut acc_m = [_mm_setzero_ps(); C];
    let mut summs = [0f32; C];
    for i in 0..n / 256 {
        let (sm, q, d, dmin) = unpack(x.wrapping_add(i * xsize));
        // SAFETY: 16 bytes.
        let sm = _mm256_cvtepu8_epi16(unsafe { ld128(sm.as_ptr()) });
        let scales = _mm256_permute2x128_si256::<0x00>(sm, sm);
        let mins = _mm256_extracti128_si256::<1>(sm);
        for (r, y) in y.iter().enumerate() {
            let yb = y.wrapping_add(Q8K * i);
            // SAFETY: block i of this activation row: d and bsums.
            let (dy, bsums) = unsafe { (rd::<f32>(yb), ld256(yb.add(260))) };
            let pair_sums =
                _mm_hadd_epi16(_mm256_castsi256_si128(bsums), _mm256_extracti128_si256::<1>(bsums));
            let prod = _mm_madd_epi16(mins, pair_sums);
            let dm = -dy * dmin;
            match mins_mode {
                Mins::Lanes => {
                    acc_m[r] = _mm_fmadd_ps(_mm_set1_ps(dm), _mm_cvtepi32_ps(prod), acc_m[r]);
                }
                Mins::Scalar => {
                    let z = _mm_setzero_si128();
                    let h = _mm_hadd_epi32(_mm_hadd_epi32(prod, z), z);
                    summs[r] = dm.mul_add(_mm_cvtsi128_si32(h) as f32, summs[r]);
                }
            }
            let mut sumi = _mm256_setzero_si256();
            for (s, q) in q.iter().enumerate() {
                // SAFETY: quants 32s..32s+32 of the block.
                let q8 = unsafe { ld256(yb.add(4 + 32 * s)) };
                let p = _mm256_maddubs_epi16(*q, q8);
                sumi = _mm256_add_epi32(
                    sumi,
                    _mm256_madd_epi16(p, _mm256_shuffle_epi8(scales, ctl[s])),
                );
            }
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dy * d), _mm256_cvtepi32_ps(sumi), acc[r]);
        }
    }
    std::array::from_fn(|r| {
        let m = match mins_mode {
            Mins::Lanes => {
                let a = _mm_add_ps(acc_m[r], _mm_movehl_ps(acc_m[r], acc_m[r]));
                _mm_cvtss_f32(_mm_add_ss(a, _mm_movehdup_ps(a)))
            }
            Mins::Scalar => summs[r],
        };
        hsum_ps(acc[r]) + m
    })
}

/// The nibbles of 128 bytes of Q4_K/Q5_K `qs` in element order: for each 32 bytes, the low
/// nibbles (sub-block 2j) then the high (2j+1).
///
/// # Safety
/// 128 readable bytes at `qs`, and AVX2/FMA/F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn k_nibbles(qs: *const u8) -> [__m256i; 8] {
    let m4 = _mm256_set1_epi8(0x0F);
    let mut q = [_mm256_setzero_si256(); 8];
    for j in 0..4 {
        // SAFETY: bytes 32j..32j+32 < 128.
        let bits = unsafe { ld256(qs.add(32 * j)) };
        q[2 * j] = _mm256_and_si256(bits, m4);
        q[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16::<4>(bits), m4);
    }
    q
}

/// Q4_K · Q8_K against `C` rows (block: d at 0, dmin at 2, scales[12] at 4, qs[128] at 16).
///
/// # Safety
/// The [`VecDot4`] contract for each row, and AVX2/FMA/F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn q4_k_n<const C: usize>(
    n: usize,
    x: *const u8,
    y: [*const u8; C],
) -> [f32; C] {
    let unpack = |b: *const u8| {
        // SAFETY: `b` is a whole 144-byte Q4_K block.
        let (dd, packed, q) =
            unsafe { (rd::<u32>(b), rd::<[u8; 12]>(b.add(4)), k_nibbles(b.add(16))) };
        let (d, dmin) = fp16x2(dd);
        (k4_scales(&packed), q, d, dmin)
    };
    // SAFETY: forwarded.
    unsafe { per32_rows(n, x, 144, y, Mins::Lanes, unpack) }
}

/// Q5_K · Q8_K against `C` rows (block: d at 0, dmin at 2, scales[12] at 4, qh[32] at 16,
/// qs[128] at 48; the fifth bit of sub-block `s` is bit `s` of `qh`).
///
/// # Safety
/// The [`VecDot4`] contract for each row, and AVX2/FMA/F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn q5_k_n<const C: usize>(
    n: usize,
    x: *const u8,
    y: [*const u8; C],
) -> [f32; C] {
    let unpack = |b: *const u8| {
        // SAFETY: `b` is a whole 176-byte Q5_K block.
        let (dd, packed, qh, mut q) = unsafe {
            (rd::<u32>(b), rd::<[u8; 12]>(b.add(4)), ld256(b.add(16)), k_nibbles(b.add(48)))
        };
        let (d, dmin) = fp16x2(dd);
        let one = _mm256_set1_epi8(1);
        for (s, q) in q.iter_mut().enumerate() {
            let high = _mm256_and_si256(shr16(qh, s), one);
            *q = _mm256_or_si256(*q, _mm256_slli_epi16::<4>(high));
        }
        (k4_scales(&packed), q, d, dmin)
    };
    // SAFETY: forwarded.
    unsafe { per32_rows(n, x, 176, y, Mins::Scalar, unpack) }
}

/// IQ4_XS · Q8_K against `C` rows (block: d at 0, scales_h at 2, scales_l[4] at 4, qs[128] at
/// 8; sub-block `ib` is 16 bytes of nibbles indexing `kvalues_iq4nl`, scaled by `ls - 32`).
///
/// # Safety
/// The [`VecDot4`] contract for each row, and AVX2/FMA/F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn iq4_xs_n<const C: usize>(
    n: usize,
    x: *const u8,
    y: [*const u8; C],
) -> [f32; C] {
    // SAFETY: the table is 16 bytes.
    let table = _mm256_broadcastsi128_si256(unsafe {
        ld128(tessera_tensor::blocks::KVALUES_IQ4NL.as_ptr().cast())
    });
    let mut acc = [_mm256_setzero_ps(); C];
    for i in 0..n / 256 {
        let b = x.wrapping_add(136 * i);
        // SAFETY: `b` is a whole 136-byte IQ4_XS block.
        let (d, sh, sl) = unsafe { (rd::<u16>(b), rd::<u16>(b.add(2)), rd::<[u8; 4]>(b.add(4))) };
        let d = fp16x2(u32::from(d)).0;
        let mut sumi = [_mm256_setzero_si256(); C];
        for ib in 0..8 {
            let ls = i32::from((sl[ib / 2] >> (4 * (ib % 2))) & 0xF)
                | (i32::from((sh >> (2 * ib)) & 3) << 4);
            let scale = _mm256_set1_epi16((ls - 32) as i16);
            // SAFETY: the 16 bytes of sub-block ib.
            let q = _mm256_shuffle_epi8(table, nibbles(unsafe { ld128(b.add(8 + 16 * ib)) }));
            let ax = _mm256_sign_epi8(q, q);
            for (s, y) in sumi.iter_mut().zip(y) {
                // SAFETY: quants 32ib..32ib+32 of block i of this activation row.
                let q8 = unsafe { ld256(y.add(Q8K * i + 4 + 32 * ib)) };
                let p = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(q8, q));
                *s = _mm256_add_epi32(*s, _mm256_madd_epi16(p, scale));
            }
        }
        for ((a, s), y) in acc.iter_mut().zip(sumi).zip(y) {
            // SAFETY: d of block i of this activation row.
            let dy = unsafe { rd::<f32>(y.add(Q8K * i)) };
            *a = _mm256_fmadd_ps(_mm256_set1_ps(d * dy), _mm256_cvtepi32_ps(s), *a);
        }
    }
    acc.map(|a| hsum_ps(a))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matmul::tests::Rng;
    use crate::SimdLevel;
    use tessera_tensor::quant;

    /// ggml's AVX2 `ggml_vec_dot_q3_K_q8_K`, lane by lane in scalar code: lane `m` holds, per
    /// block, `Σ scale·(q − 4)·y` over bytes `4m..4m+4` of every 32 values; `acc[m] =
    /// fma(y.d·x.d, f32(lane), acc[m])`; then `hsum_float_8`'s order.
    fn ggml_q3_k(n: usize, x: &[u8], y: &[u8]) -> f32 {
        let mut acc = [0f32; 8];
        for b in 0..n / 256 {
            let (xb, yb) = (&x[110 * b..110 * (b + 1)], &y[292 * b..292 * (b + 1)]);
            let scales = crate::matmul::scalar::q3_k_scales(xb[96..108].try_into().unwrap());
            let d = f32::from_le_bytes(yb[..4].try_into().unwrap())
                * half::f16::from_le_bytes([xb[108], xb[109]]).to_f32();
            let mut lanes = [0i32; 8];
            for v in 0..256 {
                let (h, j, l) = (v / 128, v % 128 / 32, v % 32);
                let low = (xb[32 + 32 * h + l] >> (2 * j)) & 3;
                let high = (xb[l] >> (4 * h + j)) & 1;
                let q = i32::from(low) + 4 * i32::from(high) - 4;
                let yv = i32::from(yb[4 + v] as i8);
                lanes[v % 32 / 4] += i32::from(scales[v / 16]) * q * yv;
            }
            for (a, &s) in acc.iter_mut().zip(&lanes) {
                *a = d.mul_add(s as f32, *a);
            }
        }
        ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))
    }

    /// ggml's AVX2 `ggml_vec_dot_q2_K_q8_K` in scalar code: per block, first the mins
    /// (`acc[m] = fma(−y.d·dmin, mins[2m]·bsums[2m] + mins[2m+1]·bsums[2m+1], acc[m])`), then
    /// the scaled sums of lane `m`'s bytes `4m..4m+4` of every 32 values, times `y.d·d`.
    fn ggml_q2_k(n: usize, x: &[u8], y: &[u8]) -> f32 {
        let f16 = |b: &[u8]| half::f16::from_le_bytes([b[0], b[1]]).to_f32();
        let mut acc = [0f32; 8];
        for b in 0..n / 256 {
            let (xb, yb) = (&x[84 * b..84 * (b + 1)], &y[292 * b..292 * (b + 1)]);
            let dy = f32::from_le_bytes(yb[..4].try_into().unwrap());
            let (d, dmin) = (dy * f16(&xb[80..82]), -dy * f16(&xb[82..84]));
            let bsum = |t: usize| i32::from(i16::from_le_bytes([yb[260 + 2 * t], yb[261 + 2 * t]]));
            let min = |t: usize| i32::from(xb[t] >> 4);
            let mut lanes = [0i32; 8];
            for v in 0..256 {
                let (h, j, l) = (v / 128, v % 128 / 32, v % 32);
                let q = i32::from((xb[16 + 32 * h + l] >> (2 * j)) & 3);
                lanes[v % 32 / 4] += i32::from(xb[v / 16] & 0xF) * q * i32::from(yb[4 + v] as i8);
            }
            for (m, (a, &s)) in acc.iter_mut().zip(&lanes).enumerate() {
                let mins = min(2 * m) * bsum(2 * m) + min(2 * m + 1) * bsum(2 * m + 1);
                *a = dmin.mul_add(mins as f32, *a);
                *a = d.mul_add(s as f32, *a);
            }
        }
        ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))
    }

    /// The one-row and four-row kernels of `dtype` give `model`'s bits on random rows.
    fn check(
        dtype: DType,
        seed: u64,
        one: VecDot,
        four: VecDot4,
        model: fn(usize, &[u8], &[u8]) -> f32,
    ) {
        if SimdLevel::detect() < SimdLevel::Avx2 {
            eprintln!("skipped: no AVX2");
            return;
        }
        let mut rng = Rng(seed);
        let k = 256 * 6;
        for _ in 0..20 {
            let x = quant::quantize(dtype, &rng.f32s(k)).unwrap();
            let ys: Vec<Vec<u8>> =
                (0..4).map(|_| quant::quantize(DType::Q8_K, &rng.f32s(k)).unwrap()).collect();
            let ptrs: [*const u8; 4] = std::array::from_fn(|j| ys[j].as_ptr());
            // SAFETY: one weight row and Q8_K rows of k values; AVX2 checked above.
            let (got1, got4) =
                unsafe { (one(k, x.as_ptr(), ys[0].as_ptr()), four(k, x.as_ptr(), ptrs)) };
            let want: Vec<f32> = ys.iter().map(|y| model(k, &x, y)).collect();
            assert_eq!(got1.to_bits(), want[0].to_bits(), "{dtype} one row");
            for (g, w) in got4.iter().zip(&want) {
                assert_eq!(g.to_bits(), w.to_bits(), "{dtype} four rows");
            }
        }
    }

    /// Q2_K's products add the mins first, as ggml's kernel does (after the sums, other bits).
    #[test]
    fn q2_k_follows_ggml_order() {
        check(DType::Q2_K, 0x22, q2_k, q2_k_n::<4>, ggml_q2_k);
    }

    /// Q3_K's products keep ggml's lanes (an offset taken out per block sum instead gives the
    /// same total in other lanes, and other bits).
    #[test]
    fn q3_k_follows_ggml_lanes() {
        check(DType::Q3_K, 0x33, q3_k, q3_k_n::<4>, ggml_q3_k);
    }
}
