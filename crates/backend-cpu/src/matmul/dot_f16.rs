//! `ggml_vec_dot_f16` exactly: the dot product llama.cpp uses for one-column F16 products
//! (MUL_MAT with one src1 row, and flash attention's K·Q with an F16 cache).
//!
//! ggml sums in four vector accumulators over steps of four vectors (64 values with AVX-512,
//! 32 with AVX2), folds them pairwise, reduces the last vector in the hardware's order into a
//! double, and adds the leftover products (each rounded to f32) in double. The wider products
//! sum differently (as llamafile's tinyBLAS, which llama.cpp's MUL_MAT uses for 2+ columns).

// The AVX-512 intrinsics are stable since Rust 1.89, above the workspace MSRV; this module is
// only called at the AVX-512 level on x86-64 (as matmul/avx512.rs).
#![allow(clippy::incompatible_msrv)]

use crate::SimdLevel;
use tessera_tensor::quant as float;

/// `Σ x[i]·y[i]` over `n` f16 values at `x` and `y`, as `ggml_vec_dot_f16` at level `simd`.
///
/// # Safety
/// `x` and `y` must point to `n` readable f16 values each.
pub unsafe fn dot(n: usize, x: *const u16, y: *const u16, simd: SimdLevel) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if simd >= SimdLevel::Avx512 && std::is_x86_feature_detected!("avx512f") {
            // SAFETY: feature checked; pointers per the caller.
            return unsafe { dot_avx512(n, x, y) };
        }
        if simd >= SimdLevel::Avx2
            && std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("f16c")
        {
            // SAFETY: features checked; pointers per the caller.
            return unsafe { dot_avx2(n, x, y) };
        }
    }
    let _ = simd;
    let mut s = 0f64;
    for i in 0..n {
        // SAFETY: i < n.
        let (a, b) = unsafe { (x.add(i).read_unaligned(), y.add(i).read_unaligned()) };
        s += f64::from(float::f16_to_f32(a) * float::f16_to_f32(b));
    }
    s as f32
}

/// The leftover elements `from..n`, added in f64 to `s`.
///
/// # Safety
/// As [`dot`].
unsafe fn tail(mut s: f64, from: usize, n: usize, x: *const u16, y: *const u16) -> f32 {
    for i in from..n {
        // SAFETY: i < n.
        let (a, b) = unsafe { (x.add(i).read_unaligned(), y.add(i).read_unaligned()) };
        s += f64::from(float::f16_to_f32(a) * float::f16_to_f32(b));
    }
    s as f32
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn dot_avx512(n: usize, x: *const u16, y: *const u16) -> f32 {
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

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_avx2(n: usize, x: *const u16, y: *const u16) -> f32 {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_level_is_close_to_exact() {
        for n in [1, 31, 64, 100, 256] {
            let x: Vec<u16> = (0..n).map(|i| float::f32_to_f16((i as f32 * 0.37).sin())).collect();
            let y: Vec<u16> = (0..n).map(|i| float::f32_to_f16((i as f32 * 0.11).cos())).collect();
            let exact: f64 = x
                .iter()
                .zip(&y)
                .map(|(&a, &b)| f64::from(float::f16_to_f32(a)) * f64::from(float::f16_to_f32(b)))
                .sum();
            for level in SimdLevel::available() {
                // SAFETY: n values each.
                let got = unsafe { dot(n, x.as_ptr(), y.as_ptr(), level) };
                assert!(
                    (f64::from(got) - exact).abs() < 1e-4 * (1.0 + exact.abs()),
                    "{level} n={n}"
                );
            }
        }
    }
}
