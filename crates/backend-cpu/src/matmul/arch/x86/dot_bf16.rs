//! BF16 · BF16 dot products in llama.cpp's orders, per build: `ggml_vec_dot_bf16` for
//! one-column products, llamafile's tinyBLAS for two or more columns (its MUL_MAT), each as
//! an AVX2 build, an AVX-512F build or an AVX512_BF16 build computes it (a CPU with
//! AVX512_BF16, as Zen 4 and Sapphire Rapids have, gets the last at the AVX-512 level).
//!
//! - `ggml_vec_dot_bf16`: AVX2 four 8-lane accumulators over steps of 32 values, folded as
//!   `(c1 + c3) + (c2 + c4)` and reduced; AVX-512F two 16-lane accumulators over steps of 32,
//!   AVX512_BF16 two `vdpbf16ps` accumulators over steps of 64, each reduced on its own into a
//!   double; the leftover products (each rounded to f32) added in double.
//! - tinyBLAS: one accumulator per output of 8 (AVX2, FMA), 16 (AVX-512F, FMA) or 32 values
//!   (`vdpbf16ps`) in `k` order, reduced once; only where `k` is a multiple of that width
//!   (else llama.cpp falls back to the dot above).

// The AVX-512 intrinsics are stable since Rust 1.89, above the workspace MSRV; this module is
// only called at the AVX-512 level on x86-64 (as matmul/avx512.rs).
#![allow(clippy::incompatible_msrv)]

use super::avx2::{hsum_ps, ld128};
use super::avx512::reduce_add;
use crate::matmul::VecDot;
use std::arch::x86_64::*;

/// Which build's arithmetic: an AVX2 build.
pub(in crate::matmul) const AVX2: u8 = 0;
/// An AVX-512F build without AVX512_BF16.
pub(in crate::matmul) const AVX512: u8 = 1;
/// An AVX512_BF16 build.
pub(in crate::matmul) const AVX512_BF16: u8 = 2;

/// The variant for the AVX-512 level on this CPU.
fn avx512_variant() -> u8 {
    if crate::has_avx512_bf16() {
        AVX512_BF16
    } else {
        AVX512
    }
}

/// The one-column dot (`ggml_vec_dot_bf16`) of the build a level stands for: AVX2, or
/// (`avx512`) AVX-512 with or without AVX512_BF16 as this CPU has it.
pub(in crate::matmul) fn one_column(avx512: bool) -> VecDot {
    match (avx512, avx512_variant()) {
        (false, _) => vec_dot::<AVX2>,
        (true, AVX512_BF16) => vec_dot::<AVX512_BF16>,
        (true, _) => vec_dot::<AVX512>,
    }
}

/// One row of [`tiny`].
///
/// # Safety
/// As [`tiny`].
pub(in crate::matmul) unsafe fn tiny1<const V: u8>(n: usize, x: *const u8, y: *const u8) -> f32 {
    // SAFETY: forwarded.
    unsafe { tiny::<V, 1>(n, x, [y])[0] }
}

/// bf16 bits as f32 (exact).
fn f(b: u16) -> f32 {
    f32::from_bits(u32::from(b) << 16)
}

/// Eight bf16 at `p` as f32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn widen8(p: *const u16) -> __m256 {
    // SAFETY: the caller's 8 values.
    _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(unsafe { ld128(p.cast()) })))
}

/// Sixteen bf16 at `p` as f32.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn widen16(p: *const u16) -> __m512 {
    // SAFETY: the caller's 16 values.
    let v = unsafe { _mm256_loadu_si256(p.cast()) };
    _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(v)))
}

/// `vdpbf16ps` of 32 bf16 pairs at `x` and `y` into `acc`.
#[inline]
#[target_feature(enable = "avx512bf16,avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn dp32(acc: __m512, x: *const u16, y: *const u16) -> __m512 {
    // SAFETY: the caller's 32 values each; the bf16 vector types are 512 bits of bf16.
    unsafe {
        let (a, b) = (_mm512_loadu_si512(x.cast()), _mm512_loadu_si512(y.cast()));
        _mm512_dpbf16_ps(
            acc,
            std::mem::transmute::<__m512i, __m512bh>(a),
            std::mem::transmute::<__m512i, __m512bh>(b),
        )
    }
}

/// `ggml_vec_dot_bf16` of build `V` over `n` values at `x` and `y`.
///
/// # Safety
/// `n` readable bf16 at each pointer; the CPU has `V`'s features.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn vec_dot<const V: u8>(n: usize, x: *const u8, y: *const u8) -> f32 {
    let (x, y) = (x.cast::<u16>(), y.cast::<u16>());
    let mut i = 0;
    let mut sum = match V {
        // SAFETY: elements i..i + 32 <= n of both rows; AVX2 per the caller.
        AVX2 => unsafe {
            let mut c = [_mm256_setzero_ps(); 4];
            while i + 32 <= n {
                for (k, c) in c.iter_mut().enumerate() {
                    let o = i + 8 * k;
                    *c = _mm256_add_ps(_mm256_mul_ps(widen8(x.add(o)), widen8(y.add(o))), *c);
                }
                i += 32;
            }
            let c = _mm256_add_ps(_mm256_add_ps(c[0], c[2]), _mm256_add_ps(c[1], c[3]));
            f64::from(hsum_ps(c))
        },
        // SAFETY: forwarded (n values each; the variant's features per the caller).
        AVX512 => unsafe { avx512_vec(n, x, y, &mut i) },
        // SAFETY: as above.
        _ => unsafe { bf16_vec(n, x, y, &mut i) },
    };
    while i < n {
        // SAFETY: i < n.
        let (a, b) = unsafe { (x.add(i).read_unaligned(), y.add(i).read_unaligned()) };
        sum += f64::from(f(a) * f(b));
        i += 1;
    }
    sum as f32
}

/// The AVX-512F body of [`vec_dot`]: two accumulators of 16 over steps of 32.
///
/// # Safety
/// As [`vec_dot`]; AVX-512 F/BW/VL/DQ.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn avx512_vec(n: usize, x: *const u16, y: *const u16, i: &mut usize) -> f64 {
    let (mut c1, mut c2) = (_mm512_setzero_ps(), _mm512_setzero_ps());
    while *i + 32 <= n {
        // SAFETY: elements i..i + 32 <= n.
        unsafe {
            c1 = _mm512_add_ps(_mm512_mul_ps(widen16(x.add(*i)), widen16(y.add(*i))), c1);
            let (a, b) = (widen16(x.add(*i + 16)), widen16(y.add(*i + 16)));
            c2 = _mm512_add_ps(_mm512_mul_ps(a, b), c2);
        }
        *i += 32;
    }
    f64::from(reduce_add(c1)) + f64::from(reduce_add(c2))
}

/// The AVX512_BF16 body of [`vec_dot`]: two `vdpbf16ps` accumulators over steps of 64.
///
/// # Safety
/// As [`vec_dot`]; AVX512_BF16 and AVX-512 F/BW/VL/DQ.
#[target_feature(enable = "avx512bf16,avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn bf16_vec(n: usize, x: *const u16, y: *const u16, i: &mut usize) -> f64 {
    let (mut c1, mut c2) = (_mm512_setzero_ps(), _mm512_setzero_ps());
    while *i + 64 <= n {
        // SAFETY: elements i..i + 64 <= n.
        unsafe {
            c1 = dp32(c1, x.add(*i), y.add(*i));
            c2 = dp32(c2, x.add(*i + 32), y.add(*i + 32));
        }
        *i += 64;
    }
    f64::from(reduce_add(c1)) + f64::from(reduce_add(c2))
}

/// tinyBLAS's BF16 order of build `V` against `C` rows: one accumulator per output over
/// steps of its width in `k` order, reduced once; [`vec_dot`] where `n` is not a multiple of
/// the width.
///
/// # Safety
/// `n` readable bf16 at `x` and at each `y`; the CPU has `V`'s features.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn tiny<const V: u8, const C: usize>(
    n: usize,
    x: *const u8,
    y: [*const u8; C],
) -> [f32; C] {
    let width = match V {
        AVX2 => 8,
        AVX512 => 16,
        _ => 32,
    };
    if n % width != 0 {
        // SAFETY: forwarded.
        return y.map(|y| unsafe { vec_dot::<V>(n, x, y) });
    }
    let x = x.cast::<u16>();
    match V {
        // SAFETY: n values per row, n a multiple of 8; AVX2 per the caller.
        AVX2 => y.map(|y| unsafe {
            let y = y.cast::<u16>();
            let mut acc = _mm256_setzero_ps();
            for i in (0..n).step_by(8) {
                acc = _mm256_fmadd_ps(widen8(x.add(i)), widen8(y.add(i)), acc);
            }
            hsum_ps(acc)
        }),
        // SAFETY: n values per row, a multiple of 16; AVX-512 per the caller.
        AVX512 => y.map(|y| unsafe { tiny512(n, x, y.cast()) }),
        // SAFETY: n values per row, a multiple of 32; AVX512_BF16 per the caller.
        _ => y.map(|y| unsafe { tiny_bf16(n, x, y.cast()) }),
    }
}

/// tinyBLAS's AVX-512F order for one output.
///
/// # Safety
/// `n` (a multiple of 16) bf16 at each pointer; AVX-512 F/BW/VL/DQ.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn tiny512(n: usize, x: *const u16, y: *const u16) -> f32 {
    let mut acc = _mm512_setzero_ps();
    for i in (0..n).step_by(16) {
        // SAFETY: elements i..i + 16 <= n.
        acc = unsafe { _mm512_fmadd_ps(widen16(x.add(i)), widen16(y.add(i)), acc) };
    }
    reduce_add(acc)
}

/// tinyBLAS's AVX512_BF16 order for one output.
///
/// # Safety
/// `n` (a multiple of 32) bf16 at each pointer; AVX512_BF16, AVX-512 F/BW/VL/DQ.
#[target_feature(enable = "avx512bf16,avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn tiny_bf16(n: usize, x: *const u16, y: *const u16) -> f32 {
    let mut acc = _mm512_setzero_ps();
    for i in (0..n).step_by(32) {
        // SAFETY: elements i..i + 32 <= n.
        acc = unsafe { dp32(acc, x.add(i), y.add(i)) };
    }
    reduce_add(acc)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ggml_vec_dot_bf16` of an AVX2 build and tinyBLAS's AVX2 order, in scalar code (the
    /// AVX-512F and AVX512_BF16 variants are checked against llama.cpp end to end only).
    #[test]
    fn dots_follow_ggml_and_tinyblas_orders() {
        if !std::is_x86_feature_detected!("avx2") || !std::is_x86_feature_detected!("fma") {
            eprintln!("skipped: no AVX2");
            return;
        }
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut bf = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let v = (state % 2001) as f32 / 1000.0 - 1.0;
            (v.to_bits() >> 16) as u16
        };
        let lanes_sum8 = |c: [f32; 8]| {
            let h: [f32; 4] = std::array::from_fn(|i| c[i + 4] + c[i]);
            (h[0] + h[2]) + (h[1] + h[3])
        };
        for n in [64, 96, 100, 256, 1000, 2048].into_iter().flat_map(|n| [n; 20]) {
            let x: Vec<u16> = (0..n).map(|_| bf()).collect();
            let y: Vec<u16> = (0..n).map(|_| bf()).collect();
            let (xp, yp) = (x.as_ptr().cast::<u8>(), y.as_ptr().cast::<u8>());
            // ggml_vec_dot_bf16, AVX2: four accumulators of 8 (multiply, then add), folded.
            let mut c = [[0f32; 8]; 4];
            let mut i = 0;
            while i + 32 <= n {
                for (k, c) in c.iter_mut().enumerate() {
                    for (l, c) in c.iter_mut().enumerate() {
                        *c += f(x[i + 8 * k + l]) * f(y[i + 8 * k + l]);
                    }
                }
                i += 32;
            }
            let folded: [f32; 8] =
                std::array::from_fn(|l| (c[0][l] + c[2][l]) + (c[1][l] + c[3][l]));
            let mut want = f64::from(lanes_sum8(folded));
            for j in i..n {
                want += f64::from(f(x[j]) * f(y[j]));
            }
            // SAFETY: n values each; AVX2 checked above.
            let got = unsafe { vec_dot::<AVX2>(n, xp, yp) };
            assert_eq!(got.to_bits(), (want as f32).to_bits(), "vec_dot n={n}");
            // tinyBLAS, AVX2: one accumulator of 8 with FMA (n a multiple of 8).
            if n % 8 == 0 {
                let mut acc = [0f32; 8];
                for i in (0..n).step_by(8) {
                    for (l, a) in acc.iter_mut().enumerate() {
                        *a = f(x[i + l]).mul_add(f(y[i + l]), *a);
                    }
                }
                // SAFETY: as above.
                let got = unsafe { tiny::<AVX2, 1>(n, xp, [yp])[0] };
                assert_eq!(got.to_bits(), lanes_sum8(acc).to_bits(), "tiny n={n}");
            }
        }
    }
}
