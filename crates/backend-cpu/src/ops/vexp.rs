//! ggml's vector `expf` and what is built on it (`ggml_v_expf`, `ggml_v_silu`,
//! `ggml_vec_swiglu_f32`, `ggml_vec_soft_max_f32`), reproduced bit for bit.
//!
//! ggml's SIMD builds do not call libm's `expf` in these loops: they use a polynomial
//! (ARM's optimized-routines expf, max error 1.45 ulp) on 16 lanes (AVX-512) or 8 lanes (AVX2),
//! the two variants differing in how the last terms are combined, and libm `expf` for the
//! leftover elements. A one-ulp difference in a gate activation moves the next activation
//! quantization, and over 30 layers that shows in the logits, so Tessera computes exactly
//! what ggml computes at each level: the same intrinsics on whole registers (its slow path for
//! large |x| taken per register, as ggml branches), checked lane by lane against scalar
//! models of the two variants.

// Off x86-64 only the libm tails run: the constants serve the x86 code and its tests.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]

use crate::SimdLevel;

const SHIFT: f32 = 12_582_912.0; // 0x1.8p23
const LOG2E: f32 = f32::from_bits(0x3fb8_aa3b); // 0x1.715476p+0
const LN2_HI: f32 = f32::from_bits(0x3f31_7200); // 0x1.62e4p-1
const LN2_LO: f32 = f32::from_bits(0x35bf_be8e); // 0x1.7f7d1cp-20
const C1: f32 = f32::from_bits(0x3f7f_fff6); // 0x1.ffffecp-1
const C2: f32 = f32::from_bits(0x3eff_fedb); // 0x1.fffdb6p-2
const C3: f32 = f32::from_bits(0x3e2a_af33); // 0x1.555e66p-3
const C4: f32 = f32::from_bits(0x3d2b_9f17); // 0x1.573e2ep-5
const C5: f32 = f32::from_bits(0x3c07_2010); // 0x1.0e4020p-7

// The scalar models of one lane each (test references for the register code in `x86`).

/// `(z, n, b, u)`: the reduction shared by both variants.
#[cfg(test)]
#[inline(always)]
fn reduce(x: f32) -> (f32, f32, f32, f32) {
    let z = x.mul_add(LOG2E, SHIFT);
    let n = z - SHIFT;
    let b = (-n).mul_add(LN2_LO, (-n).mul_add(LN2_HI, x));
    (z, n, b, b * b)
}

/// One lane of the AVX-512 `ggml_v_expf` (`_mm512_scalef_ps` for the exponent).
#[cfg(test)]
#[inline(always)]
fn expf_avx512(x: f32) -> f32 {
    let (_, n, b, u) = reduce(x);
    let j = C5.mul_add(b, C4).mul_add(u, C3.mul_add(b, C2)).mul_add(u, C1.mul_add(b, 1.0));
    if n.abs() > 192.0 {
        return if n <= 0.0 { 0.0 } else { f32::INFINITY };
    }
    if (-126.0..=127.0).contains(&n) {
        j * f32::from_bits(((n as i32 + 127) as u32) << 23)
    } else {
        // scalef rounds once; j · 2^n is exact in f64.
        (f64::from(j) * 2f64.powi(n as i32)) as f32
    }
}

/// One lane of the AVX2 `ggml_v_expf` (exponent built in the integer domain).
#[cfg(test)]
#[inline(always)]
fn expf_avx2(x: f32) -> f32 {
    let (z, n, b, u) = reduce(x);
    let e = z.to_bits() << 23;
    let k = f32::from_bits(e.wrapping_add(1f32.to_bits()));
    let j = C5.mul_add(b, C4).mul_add(u, C3.mul_add(b, C2)).mul_add(u, C1 * b);
    if n.abs() <= 126.0 || n.is_nan() {
        return j.mul_add(k, k);
    }
    let g: u32 = if n <= 0.0 { 0x8200_0000 } else { 0 };
    let s1 = f32::from_bits(g.wrapping_add(0x7f00_0000));
    let s2 = f32::from_bits(e.wrapping_sub(g));
    if n.abs() > 192.0 {
        s1 * s1
    } else {
        s2.mul_add(j, s2) * s1
    }
}

fn silu_libm(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// Lanes per vector at `simd` (0: scalar only).
fn lanes(simd: SimdLevel) -> usize {
    match simd {
        SimdLevel::Avx512 => 16,
        SimdLevel::Avx2 => 8,
        SimdLevel::Scalar => 0,
    }
}

/// ggml's vector loops in its own intrinsics: `ggml_v_expf` on whole registers (a lane's
/// value is the scalar model's above, tested bit for bit), so the slow-path branch is taken
/// once per register as in ggml, not once per element.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::incompatible_msrv)] // AVX-512 intrinsics: stable since 1.89, as in matmul::avx512
mod x86 {
    use super::{C1, C2, C3, C4, C5, LN2_HI, LN2_LO, LOG2E, SHIFT};
    use crate::matmul::{hsum_ps, reduce_add_ps};
    use std::arch::x86_64::*;

    /// `ggml_v_expf`, AVX2 variant (exponent built in the integer domain).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn expf8(x: __m256) -> __m256 {
        let set = _mm256_set1_ps;
        let r = set(SHIFT);
        let z = _mm256_fmadd_ps(x, set(LOG2E), r);
        let n = _mm256_sub_ps(z, r);
        let b = _mm256_fnmadd_ps(n, set(LN2_LO), _mm256_fnmadd_ps(n, set(LN2_HI), x));
        let e = _mm256_slli_epi32::<23>(_mm256_castps_si256(z));
        let k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(set(1.0))));
        let abs_n = _mm256_andnot_ps(set(-0.0), n);
        let c = _mm256_cmp_ps::<_CMP_GT_OQ>(abs_n, set(126.0));
        let u = _mm256_mul_ps(b, b);
        let j = _mm256_fmadd_ps(
            _mm256_fmadd_ps(
                _mm256_fmadd_ps(set(C5), b, set(C4)),
                u,
                _mm256_fmadd_ps(set(C3), b, set(C2)),
            ),
            u,
            _mm256_mul_ps(set(C1), b),
        );
        if _mm256_movemask_ps(c) == 0 {
            return _mm256_fmadd_ps(j, k, k);
        }
        let le0 = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_LE_OQ>(n, _mm256_setzero_ps()));
        let g = _mm256_and_si256(le0, _mm256_set1_epi32(0x8200_0000_u32 as i32));
        let s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f00_0000)));
        let s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
        let d = _mm256_cmp_ps::<_CMP_GT_OQ>(abs_n, set(192.0));
        let scaled = _mm256_or_ps(
            _mm256_and_ps(c, _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1)),
            _mm256_andnot_ps(c, _mm256_fmadd_ps(k, j, k)),
        );
        _mm256_or_ps(_mm256_and_ps(d, _mm256_mul_ps(s1, s1)), _mm256_andnot_ps(d, scaled))
    }

    /// `ggml_v_expf`, AVX-512 variant (`_mm512_scalef_ps` for the exponent).
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
    pub(super) fn expf16(x: __m512) -> __m512 {
        let set = _mm512_set1_ps;
        let r = set(SHIFT);
        let z = _mm512_fmadd_ps(x, set(LOG2E), r);
        let n = _mm512_sub_ps(z, r);
        let b = _mm512_fnmadd_ps(n, set(LN2_LO), _mm512_fnmadd_ps(n, set(LN2_HI), x));
        let d = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(_mm512_abs_ps(n), set(192.0));
        let u = _mm512_mul_ps(b, b);
        let j = _mm512_fmadd_ps(
            _mm512_fmadd_ps(
                _mm512_fmadd_ps(set(C5), b, set(C4)),
                u,
                _mm512_fmadd_ps(set(C3), b, set(C2)),
            ),
            u,
            _mm512_fmadd_ps(set(C1), b, set(1.0)),
        );
        let res = _mm512_scalef_ps(j, n);
        if d == 0 {
            return res;
        }
        let le0 = _mm512_cmp_ps_mask::<_CMP_LE_OQ>(n, _mm512_setzero_ps());
        let alt = _mm512_mask_blend_ps(le0, set(f32::INFINITY), _mm512_setzero_ps());
        _mm512_mask_blend_ps(d, res, alt)
    }

    /// `ggml_v_silu` on 8 lanes: `x / (1 + exp(0 − x))`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn silu8(x: __m256) -> __m256 {
        let e = expf8(_mm256_sub_ps(_mm256_setzero_ps(), x));
        _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0), e))
    }

    /// `ggml_v_silu` on 16 lanes.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
    fn silu16(x: __m512) -> __m512 {
        let e = expf16(_mm512_sub_ps(_mm512_setzero_ps(), x));
        _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0), e))
    }

    /// Generates the three loops for one register width.
    macro_rules! loops {
        ($feat:literal, $w:literal, $load:ident, $store:ident, $sub:ident, $mul:ident,
         $set:ident, $exp:ident, $silu:ident, $sum:ident,
         $swiglu_fn:ident, $silu_fn:ident, $soft_max_fn:ident) => {
            /// `g[i] = silu(g[i]) · u[i]` for whole registers (`g.len()` a multiple of the width).
            #[target_feature(enable = $feat)]
            pub(super) fn $swiglu_fn(g: &mut [f32], u: &[f32]) {
                for (gc, uc) in g.chunks_exact_mut($w).zip(u.chunks_exact($w)) {
                    // SAFETY: each chunk holds one register's worth of f32.
                    unsafe {
                        $store(gc.as_mut_ptr(), $mul($silu($load(gc.as_ptr())), $load(uc.as_ptr())))
                    };
                }
            }

            /// `x[i] = silu(x[i])` for whole registers.
            #[target_feature(enable = $feat)]
            pub(super) fn $silu_fn(x: &mut [f32]) {
                for c in x.chunks_exact_mut($w) {
                    // SAFETY: as above.
                    unsafe { $store(c.as_mut_ptr(), $silu($load(c.as_ptr()))) };
                }
            }

            /// `x[i] = exp(x[i] − max)` for whole registers; each register's lanes summed
            /// in f32 (ggml's reduction order), the sums added in f64.
            #[target_feature(enable = $feat)]
            pub(super) fn $soft_max_fn(x: &mut [f32], max: f32) -> f64 {
                let m = $set(max);
                let mut sum = 0f64;
                for c in x.chunks_exact_mut($w) {
                    // SAFETY: as above.
                    let v = $exp($sub(unsafe { $load(c.as_ptr()) }, m));
                    // SAFETY: as above.
                    unsafe { $store(c.as_mut_ptr(), v) };
                    sum += f64::from($sum(v));
                }
                sum
            }
        };
    }

    loops!(
        "avx2,fma,f16c",
        8,
        _mm256_loadu_ps,
        _mm256_storeu_ps,
        _mm256_sub_ps,
        _mm256_mul_ps,
        _mm256_set1_ps,
        expf8,
        silu8,
        hsum_ps,
        swiglu8,
        silu_8,
        soft_max8
    );
    loops!(
        "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c",
        16,
        _mm512_loadu_ps,
        _mm512_storeu_ps,
        _mm512_sub_ps,
        _mm512_mul_ps,
        _mm512_set1_ps,
        expf16,
        silu16,
        reduce_add_ps,
        swiglu16,
        silu_16,
        soft_max16
    );
}

/// The vectorized prefix length at `simd` (0 without FMA: all elements take libm's expf).
fn split(len: usize, simd: SimdLevel) -> usize {
    let w = if crate::simd::has_fma() { lanes(simd) } else { 0 };
    len.checked_div(w).map_or(0, |q| q * w)
}

/// `g[i] = silu(g[i]) * u[i]` as `ggml_vec_swiglu_f32` at level `simd`.
pub fn swiglu(g: &mut [f32], u: &[f32], simd: SimdLevel) {
    let full = split(g.len(), simd);
    #[cfg(target_arch = "x86_64")]
    if full > 0 {
        // SAFETY: `split` is non-zero only where FMA was detected.
        unsafe {
            if simd == SimdLevel::Avx512 {
                x86::swiglu16(&mut g[..full], &u[..full])
            } else {
                x86::swiglu8(&mut g[..full], &u[..full])
            }
        }
    }
    for (x, &y) in g[full..].iter_mut().zip(&u[full..]) {
        *x = silu_libm(*x) * y;
    }
}

/// `x[i] = silu(x[i])` as `ggml_vec_silu_f32`.
pub fn silu(x: &mut [f32], simd: SimdLevel) {
    let full = split(x.len(), simd);
    #[cfg(target_arch = "x86_64")]
    if full > 0 {
        // SAFETY: as in `swiglu`.
        unsafe {
            if simd == SimdLevel::Avx512 {
                x86::silu_16(&mut x[..full])
            } else {
                x86::silu_8(&mut x[..full])
            }
        }
    }
    for v in x[full..].iter_mut() {
        *v = silu_libm(*v);
    }
}

/// `x[i] = exp(x[i] - max)`, returning their sum in f64, as `ggml_vec_soft_max_f32`: each
/// vector's lanes are summed in f32 in the hardware's pairwise order, then added in f64.
pub fn soft_max(x: &mut [f32], max: f32, simd: SimdLevel) -> f64 {
    let full = split(x.len(), simd);
    let mut sum = 0f64;
    #[cfg(target_arch = "x86_64")]
    if full > 0 {
        // SAFETY: as in `swiglu`.
        sum = unsafe {
            if simd == SimdLevel::Avx512 {
                x86::soft_max16(&mut x[..full], max)
            } else {
                x86::soft_max8(&mut x[..full], max)
            }
        };
    }
    for v in x[full..].iter_mut() {
        *v = (*v - max).exp();
        sum += f64::from(*v);
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One lane of ggml's vector expf of the given variant (the scalar models above).
    fn model(avx512: bool, x: f32) -> f32 {
        if avx512 {
            expf_avx512(x)
        } else {
            expf_avx2(x)
        }
    }

    /// Inputs over every branch of both variants: the polynomial range, the scaled ranges
    /// (|n| in 126..192), overflow and underflow, the specials, and random bit patterns.
    fn inputs() -> Vec<f32> {
        let mut xs: Vec<f32> = (-4000..4000).map(|i| i as f32 * 0.0517).collect();
        xs.extend([f32::NEG_INFINITY, f32::INFINITY, f32::NAN, -0.0, 0.0, 88.72, 88.73, -87.4]);
        xs.extend([-103.97, -104.0, 1e-30, -1e-30, f32::MIN_POSITIVE, f32::MAX, f32::MIN]);
        let mut seed = 0x9e37_79b9_u32;
        for _ in 0..4096 {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            xs.push(f32::from_bits(seed));
        }
        let pad = xs.len().next_multiple_of(16) - xs.len();
        xs.extend(std::iter::repeat_n(-1.5, pad));
        xs
    }

    fn same(a: f32, b: f32) -> bool {
        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
    }

    #[test]
    fn registers_match_the_lane_model_bit_for_bit() {
        let xs = inputs();
        for level in SimdLevel::available() {
            if split(16, level) == 0 {
                continue;
            }
            let avx512 = level == SimdLevel::Avx512;
            let w = lanes(level);
            // silu and swiglu against the model, lane by lane.
            let mut y = xs.clone();
            silu(&mut y, level);
            let mut g = xs.clone();
            let u: Vec<f32> = xs.iter().rev().copied().collect();
            swiglu(&mut g, &u, level);
            for (i, &x) in xs.iter().enumerate() {
                let s = x / (1.0 + model(avx512, 0.0 - x));
                assert!(same(y[i], s), "{level} silu({x}) = {}, model {s}", y[i]);
                assert!(same(g[i], s * u[i]), "{level} swiglu({x}, {})", u[i]);
            }
            // soft_max over finite shifted inputs (as ggml sees them), with -inf cells.
            let mut x: Vec<f32> =
                xs.iter().map(|&v| if v.is_finite() { v.clamp(-300.0, 0.0) } else { v }).collect();
            x.iter_mut().step_by(7).for_each(|v| *v = f32::NEG_INFINITY);
            x.iter_mut().for_each(|v| *v = if v.is_nan() { 0.0 } else { *v });
            let mut y = x.clone();
            let sum = soft_max(&mut y, 0.5, level);
            let mut want = 0f64;
            for (xc, yc) in x.chunks_exact(w).zip(y.chunks_exact(w)) {
                let mut s = [0f32; 16];
                for (l, (&xv, &yv)) in xc.iter().zip(yc).enumerate() {
                    s[l] = model(avx512, xv - 0.5);
                    assert!(same(yv, s[l]), "{level} soft_max lane of {xv}");
                }
                let mut n = w;
                while n > 2 {
                    n /= 2;
                    for i in 0..n {
                        s[i] += s[i + n];
                    }
                }
                want += f64::from(s[0] + s[1]);
            }
            assert_eq!(sum.to_bits(), want.to_bits(), "{level} soft_max sum");
        }
    }

    #[test]
    fn both_variants_are_close_to_exp_and_agree_on_specials() {
        for i in -2000..2000 {
            let x = i as f32 * 0.061;
            let want = f64::from(x).exp();
            for (name, f) in [("avx512", expf_avx512 as fn(f32) -> f32), ("avx2", expf_avx2)] {
                let got = f64::from(f(x));
                if want > 1e-37 && want < 1e38 {
                    assert!(
                        ((got - want) / want).abs() < 3e-7,
                        "{name} exp({x}) = {got}, want {want}"
                    );
                }
            }
        }
        for f in [expf_avx512 as fn(f32) -> f32, expf_avx2] {
            assert_eq!(f(f32::NEG_INFINITY), 0.0);
            assert_eq!(f(-200.0), 0.0);
            assert_eq!(f(200.0), f32::INFINITY);
            assert_eq!(f(0.0), 1.0);
        }
    }

    #[test]
    fn soft_max_sums_like_ggml() {
        let mut x: Vec<f32> = (0..37).map(|i| (i as f32 * 0.3).sin() * 4.0).collect();
        x[5] = f32::NEG_INFINITY;
        let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        for level in SimdLevel::available() {
            let mut y = x.clone();
            let s = soft_max(&mut y, max, level);
            let want: f64 = x.iter().map(|&v| f64::from(v - max).exp()).sum();
            assert!((s - want).abs() / want < 1e-6, "{level}: {s} vs {want}");
            assert_eq!(y[5], 0.0);
        }
    }
}
