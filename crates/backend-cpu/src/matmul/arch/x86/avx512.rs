//! AVX-512 (F/BW/VL/DQ, on top of AVX2) dot products of the float types: F32, F16, BF16. The
//! block types use their AVX2 kernels at this level (llama.cpp's order, which a 16-lane
//! accumulator would not give), plus the VNNI tiles and matrix-vector kernels of
//! [`super::vnni_tile`] and [`super::vnni_matvec`].
//!
//! As in [`super::avx2`], kernels with a four-row form are generic over the number of
//! activation rows, so the one- and four-row results are identical.

// The AVX-512 intrinsics are stable since Rust 1.89 (the toolchain here is newer); the
// workspace `rust-version` (1.85) has to be raised to 1.89 for this module, after which this
// allowance can go.
#![allow(clippy::incompatible_msrv)]

#[cfg(doc)]
use crate::matmul::VecDot;
#[cfg(doc)]
use crate::matmul::VecDot4;
use std::arch::x86_64::*;

/// F16 · F16 against `C` rows, in llama.cpp's order: where `n` is a multiple of 16 (when its
/// MUL_MAT takes llamafile's tinyBLAS) one accumulator of 16 lanes in `k` order, reduced as
/// `_mm512_reduce_add_ps`; otherwise `ggml_vec_dot_f16` (its fallback).
///
/// # Safety
/// The [`VecDot4`] contract for each row, and AVX-512 F/BW/VL/DQ.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn f16_f16_n<const C: usize>(
    n: usize,
    x: *const u8,
    y: [*const u8; C],
) -> [f32; C] {
    let x = x.cast::<u16>();
    if n % 16 != 0 {
        // SAFETY: n f16 values in each row (the VecDot4 contract).
        return y.map(|y| unsafe {
            crate::matmul::dot_f16::dot(n, x, y.cast(), crate::SimdLevel::Avx512)
        });
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
pub(crate) fn reduce_add(v: __m512) -> f32 {
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
pub(in crate::matmul) unsafe fn f16_f16(n: usize, x: *const u8, y: *const u8) -> f32 {
    // SAFETY: forwarded.
    unsafe { f16_f16_n::<1>(n, x, [y])[0] }
}
