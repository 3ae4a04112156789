//! ggml's vector `expf` and what is built on it (`ggml_v_expf`, `ggml_v_silu`,
//! `ggml_vec_swiglu_f32`, `ggml_vec_soft_max_f32`), reproduced bit for bit.
//!
//! ggml's SIMD builds do not call libm's `expf` in these loops: they use a polynomial
//! (ARM's optimized-routines expf, max error 1.45 ulp) on 16 lanes (AVX-512) or 8 lanes (AVX2),
//! the two variants differing in how the last terms are combined, and libm `expf` for the
//! leftover elements. A one-ulp difference in a gate activation moves the next activation
//! quantization, and over 30 layers that shows in the logits, so Tessera computes exactly
//! what ggml computes at each level. Each lane is evaluated with the same IEEE operations
//! (fused multiply-adds where ggml fuses), so the results are the same bits.

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

/// `(n, b, u)`: the reduction shared by both variants.
#[inline(always)]
fn reduce(x: f32) -> (f32, f32, f32, f32) {
    let z = x.mul_add(LOG2E, SHIFT);
    let n = z - SHIFT;
    let b = (-n).mul_add(LN2_LO, (-n).mul_add(LN2_HI, x));
    (z, n, b, b * b)
}

/// One lane of the AVX-512 `ggml_v_expf` (`_mm512_scalef_ps` for the exponent).
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

/// One lane of ggml's vector expf of the given variant.
#[inline(always)]
fn vexp<const AVX512: bool>(x: f32) -> f32 {
    if AVX512 {
        expf_avx512(x)
    } else {
        expf_avx2(x)
    }
}

#[inline(always)]
fn swiglu_lanes<const AVX512: bool>(g: &mut [f32], u: &[f32]) {
    for (x, &y) in g.iter_mut().zip(u) {
        *x = *x / (1.0 + vexp::<AVX512>(0.0 - *x)) * y;
    }
}

#[inline(always)]
fn silu_lanes<const AVX512: bool>(x: &mut [f32]) {
    for v in x.iter_mut() {
        *v = *v / (1.0 + vexp::<AVX512>(0.0 - *v));
    }
}

#[inline(always)]
fn soft_max_lanes<const AVX512: bool>(x: &mut [f32], max: f32, w: usize) -> f64 {
    let mut sum = 0f64;
    for chunk in x.chunks_exact_mut(w) {
        for v in chunk.iter_mut() {
            *v = vexp::<AVX512>(*v - max);
        }
        let mut s = [0f32; 16];
        s[..w].copy_from_slice(chunk);
        let mut n = w;
        while n > 2 {
            n /= 2;
            for i in 0..n {
                s[i] += s[i + n];
            }
        }
        sum += f64::from(s[0] + s[1]);
    }
    sum
}

// The lane loops compiled with FMA enabled, so `mul_add` is one instruction (the functions
// above are inlined into these).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
unsafe fn swiglu_fma<const AVX512: bool>(g: &mut [f32], u: &[f32]) {
    swiglu_lanes::<AVX512>(g, u)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
unsafe fn silu_fma<const AVX512: bool>(x: &mut [f32]) {
    silu_lanes::<AVX512>(x)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
unsafe fn soft_max_fma<const AVX512: bool>(x: &mut [f32], max: f32, w: usize) -> f64 {
    soft_max_lanes::<AVX512>(x, max, w)
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
                swiglu_fma::<true>(&mut g[..full], &u[..full])
            } else {
                swiglu_fma::<false>(&mut g[..full], &u[..full])
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
                silu_fma::<true>(&mut x[..full])
            } else {
                silu_fma::<false>(&mut x[..full])
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
        let w = lanes(simd);
        // SAFETY: as in `swiglu`.
        sum = unsafe {
            if simd == SimdLevel::Avx512 {
                soft_max_fma::<true>(&mut x[..full], max, w)
            } else {
                soft_max_fma::<false>(&mut x[..full], max, w)
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
