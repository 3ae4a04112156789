//! AVX-512 (F/BW/VL/DQ, on top of AVX2) dot products: F32, F16, BF16, and Q4_0 and Q8_0
//! against Q8_0 two blocks per register, with a VNNI form (`vpdpbusd`) of the latter two. The
//! other types use their AVX2 kernels at this level.
//!
//! As in [`super::avx2`], kernels with a four-row form are generic over the number of
//! activation rows, so the one- and four-row results are identical.

// The AVX-512 intrinsics are stable since Rust 1.89 (the toolchain here is newer); the
// workspace `rust-version` (1.85) has to be raised to 1.89 for this module, after which this
// allowance can go.
#![allow(clippy::incompatible_msrv)]

use super::avx2::{fp16_mul, ld128, ld256, nibbles, rd};
use super::{VecDot, VecDot4};
use std::arch::x86_64::*;
use tessera_tensor::DType;

/// The AVX-512 kernel for weights of type `dtype`, if this module has one; `vnni` picks the
/// VNNI forms (the CPU must have AVX-512 VNNI).
pub(super) fn vec_dot(dtype: DType, vnni: bool) -> Option<VecDot> {
    Some(match (dtype, vnni) {
        (DType::F32, _) => f32_f32,
        (DType::F16, _) => f16_f16,
        (DType::BF16, _) => bf16_bf16,
        (DType::Q4_0, false) => q4_0_q8_0,
        (DType::Q4_0, true) => q4_0_q8_0_vnni,
        (DType::Q8_0, false) => q8_0_q8_0,
        (DType::Q8_0, true) => q8_0_q8_0_vnni,
        _ => return None,
    })
}

/// The AVX-512 four-row kernel for weights of type `dtype`, if this module has one.
pub(super) fn vec_dot4(dtype: DType, vnni: bool) -> Option<VecDot4> {
    Some(match (dtype, vnni) {
        (DType::F16, _) => f16_f16_n::<4>,
        (DType::Q4_0, false) => q4_0_q8_0_n::<4>,
        (DType::Q4_0, true) => q4_0_q8_0_vnni_n::<4>,
        (DType::Q8_0, false) => q8_0_q8_0_n::<4>,
        (DType::Q8_0, true) => q8_0_q8_0_vnni_n::<4>,
        _ => return None,
    })
}

/// Mask of the first `k` (< 16) lanes.
#[inline]
fn first(k: usize) -> u16 {
    (1u32 << k) as u16 - 1
}

/// F32 · F32: four accumulators of 16, masked tail.
///
/// # Safety
/// The [`VecDot`] contract, and AVX-512 F/BW/VL/DQ.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn f32_f32(n: usize, x: *const u8, y: *const u8) -> f32 {
    let (x, y) = (x.cast::<f32>(), y.cast::<f32>());
    let mut acc = [_mm512_setzero_ps(); 4];
    let mut i = 0;
    while i + 64 <= n {
        for (k, a) in acc.iter_mut().enumerate() {
            // SAFETY: elements i + 16k .. i + 16k + 16 < n of both rows.
            let (u, v) =
                unsafe { (_mm512_loadu_ps(x.add(i + 16 * k)), _mm512_loadu_ps(y.add(i + 16 * k))) };
            *a = _mm512_fmadd_ps(u, v, *a);
        }
        i += 64;
    }
    while i < n {
        let m = if n - i >= 16 { u16::MAX } else { first(n - i) };
        // SAFETY: the masked lanes are elements i.. < n; masked-off lanes are not read.
        let (u, v) =
            unsafe { (_mm512_maskz_loadu_ps(m, x.add(i)), _mm512_maskz_loadu_ps(m, y.add(i))) };
        acc[0] = _mm512_fmadd_ps(u, v, acc[0]);
        i += 16;
    }
    _mm512_reduce_add_ps(_mm512_add_ps(
        _mm512_add_ps(acc[0], acc[1]),
        _mm512_add_ps(acc[2], acc[3]),
    ))
}

/// F16 · F16 against `C` rows, in llama.cpp's order: where `n` is a multiple of 16 (when its
/// MUL_MAT takes llamafile's tinyBLAS) one accumulator of 16 lanes in `k` order, reduced as
/// `_mm512_reduce_add_ps`; otherwise `ggml_vec_dot_f16` (its fallback).
///
/// # Safety
/// The [`VecDot4`] contract for each row, and AVX-512 F/BW/VL/DQ.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn f16_f16_n<const C: usize>(n: usize, x: *const u8, y: [*const u8; C]) -> [f32; C] {
    let x = x.cast::<u16>();
    if n % 16 != 0 {
        // SAFETY: n f16 values in each row (the VecDot4 contract).
        return y.map(|y| unsafe { super::dot_f16::dot(n, x, y.cast(), crate::SimdLevel::Avx512) });
    }
    let mut acc = [_mm512_setzero_ps(); C];
    for i in (0..n).step_by(16) {
        // SAFETY: elements i..i + 16 <= n of every row.
        let u = _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(x.add(i).cast()) });
        for (a, y) in acc.iter_mut().zip(y) {
            // SAFETY: as above.
            let v = _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(y.cast::<u16>().add(i).cast()) });
            *a = _mm512_fmadd_ps(u, v, *a);
        }
    }
    acc.map(|a| reduce_add(a))
}

/// The 16 lanes summed in GCC's `_mm512_reduce_add_ps` order: 256-bit halves, 128-bit halves,
/// then lanes (0+2)+(1+3).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn reduce_add(v: __m512) -> f32 {
    let h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps::<1>(v));
    let q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps::<1>(h));
    let p = _mm_add_ps(q, _mm_movehl_ps(q, q));
    _mm_cvtss_f32(_mm_add_ss(p, _mm_movehdup_ps(p)))
}

/// F16 · F16.
///
/// # Safety
/// The [`VecDot`] contract, and AVX-512 F/BW/VL/DQ.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn f16_f16(n: usize, x: *const u8, y: *const u8) -> f32 {
    // SAFETY: forwarded.
    unsafe { f16_f16_n::<1>(n, x, [y])[0] }
}

/// BF16 · BF16: widening is a shift; two accumulators of 16, masked tail.
///
/// # Safety
/// The [`VecDot`] contract, and AVX-512 F/BW/VL/DQ.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn bf16_bf16(n: usize, x: *const u8, y: *const u8) -> f32 {
    let (x, y) = (x.cast::<u16>(), y.cast::<u16>());
    let widen = |v: __m256i| _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(v)));
    let mut acc = [_mm512_setzero_ps(); 2];
    let mut i = 0;
    while i < n {
        for (h, a) in acc.iter_mut().enumerate() {
            let at = i + 16 * h;
            if at >= n {
                break;
            }
            let m = if n - at >= 16 { u16::MAX } else { first(n - at) };
            // SAFETY: the masked lanes are elements at.. < n of both rows; others are not read.
            let (u, v) = unsafe {
                (
                    _mm256_maskz_loadu_epi16(m, x.add(at).cast()),
                    _mm256_maskz_loadu_epi16(m, y.add(at).cast()),
                )
            };
            *a = _mm512_fmadd_ps(widen(u), widen(v), *a);
        }
        i += 32;
    }
    _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]))
}

/// Two 256-bit halves as one 512-bit register.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn join(lo: __m256i, hi: __m256i) -> __m512i {
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
}

/// `d0` in the low 8 lanes, `d1` in the high 8.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn join_ps(d0: f32, d1: f32) -> __m512 {
    _mm512_insertf32x8::<1>(_mm512_castps256_ps512(_mm256_set1_ps(d0)), _mm256_set1_ps(d1))
}

/// `Σ |x|·y'` in groups of four (i32 lanes), `y'` being `y` with `x`'s sign (`neg` = lanes
/// where `x < 0`), with `maddubs` + `madd`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn dot_madd(ax: __m512i, neg: u64, y: __m512i) -> __m512i {
    let sy = _mm512_mask_sub_epi8(y, neg, _mm512_setzero_si512(), y);
    _mm512_madd_epi16(_mm512_maddubs_epi16(ax, sy), _mm512_set1_epi16(1))
}

/// As [`dot_madd`], with one `vpdpbusd`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,avx512vnni")]
fn dot_vnni(ax: __m512i, neg: u64, y: __m512i) -> __m512i {
    let sy = _mm512_mask_sub_epi8(y, neg, _mm512_setzero_si512(), y);
    _mm512_dpbusd_epi32(_mm512_setzero_si512(), ax, sy)
}

/// Declares the Q4_0 and Q8_0 kernels (`C`-row and one-row) for one target-feature set and
/// byte-dot helper.
macro_rules! q8_0_kernels {
    ($features:literal, $dot:ident, $rows:ident, $q4n:ident, $q4:ident, $q8n:ident, $q8:ident) => {
        /// Block loop against `C` Q8_0 rows, two blocks per register (the second zero when the
        /// row has an odd count). `unpack(block)` gives a block's scale and 32 signed bytes.
        ///
        /// # Safety
        /// The [`VecDot4`] contract for each row, `xsize` bytes per weight block, and the
        /// target features.
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn $rows<const C: usize>(
            n: usize,
            x: *const u8,
            xsize: usize,
            y: [*const u8; C],
            unpack: impl Fn(*const u8) -> (u16, __m256i),
        ) -> [f32; C] {
            let nb = n / 32;
            let mut acc = [_mm512_setzero_ps(); C];
            for i in (0..nb).step_by(2) {
                let two = i + 1 < nb;
                let (dx0, q0) = unpack(x.wrapping_add(i * xsize));
                let (dx1, q1) = if two {
                    unpack(x.wrapping_add((i + 1) * xsize))
                } else {
                    (0, _mm256_setzero_si256())
                };
                let qx = join(q0, q1);
                let (ax, neg) = (_mm512_abs_epi8(qx), _mm512_movepi8_mask(qx));
                for (a, y) in acc.iter_mut().zip(y) {
                    let (y0, y1) = (y.wrapping_add(34 * i), y.wrapping_add(34 * (i + 1)));
                    // SAFETY: blocks i (and i + 1 when `two`) of this activation row.
                    let (dy0, v0) = unsafe { (rd::<u16>(y0), ld256(y0.add(2))) };
                    let (d1, v1) = if two {
                        // SAFETY: as above.
                        unsafe { (fp16_mul(dx1, rd::<u16>(y1)), ld256(y1.add(2))) }
                    } else {
                        (0.0, _mm256_setzero_si256())
                    };
                    let p = _mm512_cvtepi32_ps($dot(ax, neg, join(v0, v1)));
                    *a = _mm512_fmadd_ps(join_ps(fp16_mul(dx0, dy0), d1), p, *a);
                }
            }
            acc.map(|a| _mm512_reduce_add_ps(a))
        }

        /// Q4_0 · Q8_0 against `C` rows.
        ///
        /// # Safety
        /// The [`VecDot4`] contract for each row, and the target features.
        #[target_feature(enable = $features)]
        unsafe fn $q4n<const C: usize>(n: usize, x: *const u8, y: [*const u8; C]) -> [f32; C] {
            let unpack = |b: *const u8| {
                // SAFETY: `b` is a whole Q4_0 block of the row (18 bytes: d, qs[16]).
                let (d, qs) = unsafe { (rd::<u16>(b), ld128(b.add(2))) };
                (d, _mm256_sub_epi8(nibbles(qs), _mm256_set1_epi8(8)))
            };
            // SAFETY: forwarded.
            unsafe { $rows(n, x, 18, y, unpack) }
        }

        /// Q4_0 · Q8_0.
        ///
        /// # Safety
        /// The [`VecDot`] contract, and the target features.
        #[target_feature(enable = $features)]
        unsafe fn $q4(n: usize, x: *const u8, y: *const u8) -> f32 {
            // SAFETY: forwarded.
            unsafe { $q4n::<1>(n, x, [y])[0] }
        }

        /// Q8_0 · Q8_0 against `C` rows.
        ///
        /// # Safety
        /// The [`VecDot4`] contract for each row, and the target features.
        #[target_feature(enable = $features)]
        unsafe fn $q8n<const C: usize>(n: usize, x: *const u8, y: [*const u8; C]) -> [f32; C] {
            let unpack = |b: *const u8| {
                // SAFETY: `b` is a whole Q8_0 block of the row (34 bytes: d, qs[32]).
                let (d, qs) = unsafe { (rd::<u16>(b), ld256(b.add(2))) };
                (d, qs)
            };
            // SAFETY: forwarded.
            unsafe { $rows(n, x, 34, y, unpack) }
        }

        /// Q8_0 · Q8_0.
        ///
        /// # Safety
        /// The [`VecDot`] contract, and the target features.
        #[target_feature(enable = $features)]
        unsafe fn $q8(n: usize, x: *const u8, y: *const u8) -> f32 {
            // SAFETY: forwarded.
            unsafe { $q8n::<1>(n, x, [y])[0] }
        }
    };
}

q8_0_kernels!(
    "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c",
    dot_madd,
    q8_0_rows,
    q4_0_q8_0_n,
    q4_0_q8_0,
    q8_0_q8_0_n,
    q8_0_q8_0
);

q8_0_kernels!(
    "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,avx512vnni",
    dot_vnni,
    q8_0_rows_vnni,
    q4_0_q8_0_vnni_n,
    q4_0_q8_0_vnni,
    q8_0_q8_0_vnni_n,
    q8_0_q8_0_vnni
);
