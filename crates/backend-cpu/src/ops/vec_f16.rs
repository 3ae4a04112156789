//! f16 vector helpers with ggml's rounding (`ggml_vec_mad_f16`, `ggml_vec_scale_f16`): each
//! element is widened to f32, updated with one fused multiply-add (or multiply), and rounded
//! back to f16 to nearest even. F16C + FMA at the AVX2 level and above, scalar otherwise; both
//! give the same bits.

use crate::SimdLevel;
use tessera_tensor::quant as float;

/// `y[i] = f16(y[i] + x[i] * v)`, x read from `x` (n f16 values, unaligned).
///
/// # Safety
/// `x` must point to `y.len()` readable f16 values.
pub unsafe fn mad(y: &mut [u16], x: *const u16, v: f32, simd: SimdLevel) {
    #[cfg(target_arch = "x86_64")]
    if simd >= SimdLevel::Avx2
        && std::is_x86_feature_detected!("f16c")
        && std::is_x86_feature_detected!("fma")
    {
        // SAFETY: features checked; x holds y.len() values (caller).
        unsafe { mad_f16c(y, x, v) };
        return;
    }
    let _ = simd;
    for (i, yi) in y.iter_mut().enumerate() {
        // SAFETY: i < y.len() values are readable at x (caller).
        let xi = float::f16_to_f32(unsafe { x.add(i).read_unaligned() });
        *yi = float::f32_to_f16(xi.mul_add(v, float::f16_to_f32(*yi)));
    }
}

/// `y[i] = f16(y[i] * v)`.
pub fn scale(y: &mut [u16], v: f32, simd: SimdLevel) {
    #[cfg(target_arch = "x86_64")]
    if simd >= SimdLevel::Avx2 && std::is_x86_feature_detected!("f16c") {
        // SAFETY: F16C checked.
        unsafe { scale_f16c(y, v) };
        return;
    }
    let _ = simd;
    for yi in y.iter_mut() {
        *yi = float::f32_to_f16(float::f16_to_f32(*yi) * v);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn mad_f16c(y: &mut [u16], x: *const u16, v: f32) {
    use std::arch::x86_64::*;
    let n = y.len();
    let vv = _mm256_set1_ps(v);
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: 8 values at i are inside both x and y.
        unsafe {
            let xv = _mm256_cvtph_ps(_mm_loadu_si128(x.add(i).cast()));
            let yp = y.as_mut_ptr().add(i);
            let yv = _mm256_cvtph_ps(_mm_loadu_si128(yp.cast()));
            let r = _mm256_fmadd_ps(xv, vv, yv);
            _mm_storeu_si128(yp.cast(), _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(r));
        }
        i += 8;
    }
    for (j, yj) in y.iter_mut().enumerate().skip(i) {
        // SAFETY: j < n.
        let xi = float::f16_to_f32(unsafe { x.add(j).read_unaligned() });
        *yj = float::f32_to_f16(xi.mul_add(v, float::f16_to_f32(*yj)));
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
unsafe fn scale_f16c(y: &mut [u16], v: f32) {
    use std::arch::x86_64::*;
    let n = y.len();
    let vv = _mm256_set1_ps(v);
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: 8 values at i are inside y.
        unsafe {
            let yp = y.as_mut_ptr().add(i);
            let yv = _mm256_cvtph_ps(_mm_loadu_si128(yp.cast()));
            _mm_storeu_si128(
                yp.cast(),
                _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_mul_ps(yv, vv)),
            );
        }
        i += 8;
    }
    for yi in &mut y[i..] {
        *yi = float::f32_to_f16(float::f16_to_f32(*yi) * v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simd_and_scalar_round_the_same() {
        let x: Vec<u16> =
            (0..37).map(|i| float::f32_to_f16((i as f32 * 0.37).sin() * 3.0)).collect();
        for level in SimdLevel::available() {
            let mut a: Vec<u16> =
                (0..37).map(|i| float::f32_to_f16((i as f32 * 0.11).cos())).collect();
            let mut b = a.clone();
            // SAFETY: x holds 37 values.
            unsafe {
                mad(&mut a, x.as_ptr(), 0.731, level);
                mad(&mut b, x.as_ptr(), 0.731, SimdLevel::Scalar);
            }
            scale(&mut a, 0.377, level);
            scale(&mut b, 0.377, SimdLevel::Scalar);
            assert_eq!(a, b, "{level}");
        }
    }
}
