//! The AVX-512 and AVX2 bodies of `ggml_vec_dot_f16` ([`crate::matmul::dot_f16`], whose docs
//! give the order): four accumulators over steps of four vectors, folded pairwise, the last
//! vector reduced in the hardware's order, the leftovers added in f64.

// The AVX-512 intrinsics are stable since Rust 1.89, above the workspace MSRV; this module is
// only called at the AVX-512 level on x86-64 (as avx512.rs).
#![allow(clippy::incompatible_msrv)]

use crate::matmul::arch::generic::scalar::f16_tail as tail;

/// `ggml_vec_dot_f16` with AVX-512: 64 values a step.
///
/// # Safety
/// As [`crate::matmul::dot_f16::dot`], and AVX-512 F.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn dot_avx512(n: usize, x: *const u16, y: *const u16) -> f32 {
    use std::arch::x86_64::*;
    let np = n & !63;
    let mut acc = [_mm512_setzero_ps(); 4];
    let mut i = 0;
    while i < np {
        for (j, a) in acc.iter_mut().enumerate() {
            // SAFETY: 16 values at i + 16j < np <= n.
            unsafe {
                let vx = _mm512_cvtph_ps(_mm256_loadu_si256(x.add(i + 16 * j).cast()));
                let vy = _mm512_cvtph_ps(_mm256_loadu_si256(y.add(i + 16 * j).cast()));
                *a = _mm512_fmadd_ps(vx, vy, *a);
            }
        }
        i += 64;
    }
    let a01 = _mm512_add_ps(_mm512_add_ps(acc[0], acc[2]), _mm512_add_ps(acc[1], acc[3]));
    // _mm512_reduce_add_ps: halves, then quarters, then pairs.
    let mut l = [0f32; 16];
    // SAFETY: 16 floats.
    unsafe { _mm512_storeu_ps(l.as_mut_ptr(), a01) };
    let s8: [f32; 8] = std::array::from_fn(|k| l[k] + l[k + 8]);
    let s4: [f32; 4] = std::array::from_fn(|k| s8[k] + s8[k + 4]);
    let r = (s4[0] + s4[2]) + (s4[1] + s4[3]);
    // SAFETY: forwarded.
    unsafe { tail(f64::from(r), np, n, x, y) }
}

/// `ggml_vec_dot_f16` with AVX2: 32 values a step.
///
/// # Safety
/// As [`crate::matmul::dot_f16::dot`], and AVX2/FMA/F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::matmul) unsafe fn dot_avx2(n: usize, x: *const u16, y: *const u16) -> f32 {
    use std::arch::x86_64::*;
    let np = n & !31;
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i < np {
        for (j, a) in acc.iter_mut().enumerate() {
            // SAFETY: 8 values at i + 8j < np <= n.
            unsafe {
                let vx = _mm256_cvtph_ps(_mm_loadu_si128(x.add(i + 8 * j).cast()));
                let vy = _mm256_cvtph_ps(_mm_loadu_si128(y.add(i + 8 * j).cast()));
                *a = _mm256_fmadd_ps(vx, vy, *a);
            }
        }
        i += 32;
    }
    let a01 = _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
    // GGML_F32x8_REDUCE: 128-bit halves, then two horizontal adds.
    let t0 = _mm_add_ps(_mm256_castps256_ps128(a01), _mm256_extractf128_ps::<1>(a01));
    let t1 = _mm_hadd_ps(t0, t0);
    let r = _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
    // SAFETY: forwarded.
    unsafe { tail(f64::from(r), np, n, x, y) }
}
