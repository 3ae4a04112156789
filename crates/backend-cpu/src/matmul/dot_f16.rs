//! `ggml_vec_dot_f16` exactly: the dot product llama.cpp uses for one-column F16 products
//! (MUL_MAT with one src1 row, and flash attention's K·Q with an F16 cache).
//!
//! ggml sums in four vector accumulators over steps of four vectors (64 values with AVX-512,
//! 32 with AVX2), folds them pairwise, reduces the last vector in the hardware's order into a
//! double, and adds the leftover products (each rounded to f32) in double. The wider products
//! sum differently (as llamafile's tinyBLAS, which llama.cpp's MUL_MAT uses for 2+ columns).

#[cfg(target_arch = "x86_64")]
use super::arch::x86::dot_f16 as x86;
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
            return unsafe { x86::dot_avx512(n, x, y) };
        }
        if simd >= SimdLevel::Avx2
            && std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("f16c")
        {
            // SAFETY: features checked; pointers per the caller.
            return unsafe { x86::dot_avx2(n, x, y) };
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
