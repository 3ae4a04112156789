//! Element-wise kernels: ADD/SUB/MUL/DIV with broadcasting, SCALE, the unary activations and the
//! gated units. Rows of the destination are split evenly over the threads.
//!
//! GELU follows ggml's CPU build (`GGML_GELU_FP16`): inputs in (-10, 10) are rounded to f16 and
//! looked up in a 65,536-entry f16 table of the tanh approximation; outside, 0 or `x`. Models
//! (Gemma's GEGLU) are checked against llama.cpp, so the table matters.

use super::rowio::{load, row_at, store, with_rows};
use super::vexp;
use crate::{ComputeParams, TensorRef};
use std::sync::OnceLock;
use tessera_tensor::graph::{GluOp, Op, UnaryOp};
use tessera_tensor::quant as float;
use tessera_tensor::DType;

const SQRT_2_OVER_PI: f32 = 0.797_884_6;
const GELU_COEF_A: f32 = 0.044715;

/// ggml's `ggml_gelu_f32` as its x86 build compiles it: GCC contracts `1 + a·x·x` into one
/// fused multiply-add (the table differs by an f16 step for some inputs otherwise).
fn gelu_exact_f32(x: f32) -> f32 {
    let inner = (GELU_COEF_A * x).mul_add(x, 1.0);
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * inner).tanh())
}

/// ggml's `ggml_table_gelu_f16`: tanh-GELU of every f16 value, rounded to f16 as ggml stores
/// it, then widened to f32 (exactly) so a lookup needs no conversion.
fn gelu_table() -> &'static [f32] {
    static TABLE: OnceLock<Box<[f32]>> = OnceLock::new();
    TABLE.get_or_init(|| {
        (0..=u16::MAX)
            .map(|h| float::f16_to_f32(float::f32_to_f16(gelu_exact_f32(float::f16_to_f32(h)))))
            .collect()
    })
}

/// GELU (tanh approximation) as ggml's CPU computes it.
pub(crate) fn gelu(x: f32, table: &[f32]) -> f32 {
    if x <= -10.0 {
        0.0
    } else if x >= 10.0 {
        x
    } else {
        table[usize::from(float::f32_to_f16(x))]
    }
}

/// `g[i] = gelu(g[i]) * u[i]` (`u` = `None`: `g[i] = gelu(g[i])`), eight at a time where the
/// CPU has AVX2/F16C: the same f16 rounding (`vcvtps2ph`, nearest even, as ggml's F16C
/// build), the same table entries (a gather) and the same product as [`gelu`].
fn gelu_rows(g: &mut [f32], u: Option<&[f32]>, table: &[f32], simd: crate::SimdLevel) {
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if simd >= crate::SimdLevel::Avx2 {
        // SAFETY: the level is one the CPU runs (ComputeParams::simd never exceeds it); the
        // table has an entry for every f16.
        done = unsafe { gelu_avx2(g, u, table) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = simd;
    match u {
        Some(u) => g[done..].iter_mut().zip(&u[done..]).for_each(|(g, u)| *g = gelu(*g, table) * u),
        None => g[done..].iter_mut().for_each(|v| *v = gelu(*v, table)),
    }
}

/// [`gelu_rows`]' AVX2 body over the whole groups of eight; returns how many it did.
///
/// # Safety
/// AVX2, FMA and F16C; `table` must hold 65,536 entries.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn gelu_avx2(g: &mut [f32], u: Option<&[f32]>, table: &[f32]) -> usize {
    use std::arch::x86_64::*;
    assert!(table.len() > usize::from(u16::MAX) && u.is_none_or(|u| u.len() >= g.len()));
    let n = g.len() / 8 * 8;
    let (lo, hi) = (_mm256_set1_ps(-10.0), _mm256_set1_ps(10.0));
    for i in (0..n).step_by(8) {
        // SAFETY: i + 8 <= n <= g.len() (and u.len(), asserted); every f16 indexes the table.
        unsafe {
            let x = _mm256_loadu_ps(g.as_ptr().add(i));
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x);
            let t = _mm256_i32gather_ps::<4>(table.as_ptr(), _mm256_cvtepu16_epi32(h));
            let r = _mm256_blendv_ps(t, x, _mm256_cmp_ps::<_CMP_GE_OQ>(x, hi));
            let mut r = _mm256_andnot_ps(_mm256_cmp_ps::<_CMP_LE_OQ>(x, lo), r);
            if let Some(u) = u {
                r = _mm256_mul_ps(r, _mm256_loadu_ps(u.as_ptr().add(i)));
            }
            _mm256_storeu_ps(g.as_mut_ptr().add(i), r);
        }
    }
    n
}

fn gelu_erf(x: f32) -> f32 {
    0.5 * x * (1.0 + libm::erff(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// Runs `f(dst_row_ptr, (i1, i2, i3))` for this thread's share of dst's rows.
fn for_rows(p: &ComputeParams, dst: &TensorRef, mut f: impl FnMut(*mut u8, (usize, usize, usize))) {
    for r in p.split(dst.n_rows()) {
        let (i1, i2, i3, d) = row_at(dst, r);
        f(d, (i1, i2, i3));
    }
}

/// ADD, SUB, MUL or DIV of `a` and `b` broadcast over `a` (`ggml_compute_forward_add` etc.).
pub(crate) fn binary(p: &ComputeParams, op: Op, dst: &TensorRef, a: &TensorRef, b: &TensorRef) {
    // One instantiation per operation, so each inner loop is a plain vectorizable loop.
    match op {
        Op::Add => binary_with(p, dst, a, b, |x, y| x + y),
        Op::Sub => binary_with(p, dst, a, b, |x, y| x - y),
        Op::Mul => binary_with(p, dst, a, b, |x, y| x * y),
        _ => binary_with(p, dst, a, b, |x, y| x / y),
    }
}

/// [`binary`] with the operation `f`.
fn binary_with(
    p: &ComputeParams,
    dst: &TensorRef,
    a: &TensorRef,
    b: &TensorRef,
    f: impl Fn(f32, f32) -> f32 + Copy,
) {
    let (ne0, ne10) = (dst.ne[0], b.ne[0]);
    let packed_f32 = |t: &TensorRef| t.dtype == DType::F32 && t.nb[0] == 4;
    if packed_f32(dst) && packed_f32(a) && packed_f32(b) && (ne10 == ne0 || b.data != dst.data) {
        // F32 rows with packed elements: computed in place, no scratch copies. Element i of
        // dst is written after elements i of a and b are read, so dst may be a or b.
        for_rows(p, dst, |d, (i1, i2, i3)| {
            // SAFETY: rows of dst, a (same shape) and b (taken modulo its shape), each ne
            // packed f32 (ne10 for b); dst's row is this thread's.
            unsafe {
                let (pa, pd) = (a.row_ptr(i1, i2, i3).cast::<f32>(), d.cast::<f32>());
                let pb = b.row_ptr(i1 % b.ne[1], i2 % b.ne[2], i3 % b.ne[3]).cast::<f32>();
                if ne10 == ne0 {
                    for i in 0..ne0 {
                        let v = f(pa.add(i).read_unaligned(), pb.add(i).read_unaligned());
                        pd.add(i).write_unaligned(v);
                    }
                } else {
                    for i in 0..ne0 {
                        let v = f(pa.add(i).read_unaligned(), pb.add(i % ne10).read_unaligned());
                        pd.add(i).write_unaligned(v);
                    }
                }
            }
        });
        return;
    }
    with_rows([ne0, ne10, 0, 0], |[x, y, _, _]| {
        for_rows(p, dst, |d, (i1, i2, i3)| {
            // SAFETY: (i1, i2, i3) is a row of dst, and of a (same shape); the b row is taken
            // modulo b's shape; each row holds ne elements at nb[0] strides.
            unsafe {
                load(a.row_ptr(i1, i2, i3), a.dtype, a.nb[0], x);
                let bi = b.row_ptr(i1 % b.ne[1], i2 % b.ne[2], i3 % b.ne[3]);
                load(bi, b.dtype, b.nb[0], y);
            }
            if ne10 == ne0 {
                for (x, y) in x.iter_mut().zip(y.iter()) {
                    *x = f(*x, *y);
                }
            } else {
                for (i, x) in x.iter_mut().enumerate() {
                    *x = f(*x, y[i % ne10]);
                }
            }
            // SAFETY: this thread's dst row; x is owned scratch.
            unsafe { store(d, dst.dtype, dst.nb[0], x) };
        });
    });
}

/// `x * scale + bias` (`ggml_compute_forward_scale`).
pub(crate) fn scale(p: &ComputeParams, dst: &TensorRef, a: &TensorRef, s: f32, bias: f32) {
    with_rows([dst.ne[0], 0, 0, 0], |[x, _, _, _]| {
        for_rows(p, dst, |d, (i1, i2, i3)| {
            // SAFETY: a row of a (same shape as dst).
            unsafe { load(a.row_ptr(i1, i2, i3), a.dtype, a.nb[0], x) };
            for v in x.iter_mut() {
                *v = *v * s + bias;
            }
            // SAFETY: this thread's dst row.
            unsafe { store(d, dst.dtype, dst.nb[0], x) };
        });
    });
}

/// Each row times the orthonormal Walsh-Hadamard matrix (`ggml_compute_forward_fwht`, what
/// ggml's CPU runs for a MUL_MAT hinted `GGML_HINT_SRC0_IS_HADAMARD`): the row times
/// `1/sqrt(n)`, then butterflies `(u, v) → (u + v, u − v)` of span 1, 2, 4, … in that order
/// (ggml's SIMD passes compute `u − v` as `fma(v, −1, u)`, the same value).
pub(crate) fn hadamard(p: &ComputeParams, dst: &TensorRef, a: &TensorRef) {
    let n = dst.ne[0];
    let scale = 1.0f32 / (n as f32).sqrt();
    with_rows([n, 0, 0, 0], |[x, _, _, _]| {
        for_rows(p, dst, |d, (i1, i2, i3)| {
            // SAFETY: a row of a (same shape as dst).
            unsafe { load(a.row_ptr(i1, i2, i3), a.dtype, a.nb[0], x) };
            for v in x.iter_mut() {
                *v *= scale;
            }
            let mut len = 1;
            while len < n {
                for i in (0..n).step_by(2 * len) {
                    for j in i..i + len {
                        let (u, v) = (x[j], x[j + len]);
                        x[j] = u + v;
                        x[j + len] = u - v;
                    }
                }
                len <<= 1;
            }
            // SAFETY: this thread's dst row.
            unsafe { store(d, dst.dtype, dst.nb[0], x) };
        });
    });
}

/// Each element clamped to `[min, max]` (`ggml_compute_forward_clamp_f32`: `max(min(x, max),
/// min)`, so a NaN becomes `max`).
pub(crate) fn clamp(p: &ComputeParams, dst: &TensorRef, a: &TensorRef, min: f32, max: f32) {
    with_rows([dst.ne[0], 0, 0, 0], |[x, _, _, _]| {
        for_rows(p, dst, |d, (i1, i2, i3)| {
            // SAFETY: a row of a (same shape as dst).
            unsafe { load(a.row_ptr(i1, i2, i3), a.dtype, a.nb[0], x) };
            for v in x.iter_mut() {
                let lo = if *v < max { *v } else { max };
                *v = if lo > min { lo } else { min };
            }
            // SAFETY: this thread's dst row.
            unsafe { store(d, dst.dtype, dst.nb[0], x) };
        });
    });
}

/// `a[:, e, t] + b[:, ids[e, t]]` (`ggml_compute_forward_add_id_f32`).
pub(crate) fn add_id(
    p: &ComputeParams,
    dst: &TensorRef,
    a: &TensorRef,
    b: &TensorRef,
    ids: &TensorRef,
) {
    let n = dst.ne[0];
    with_rows([n, n, 0, 0], |[x, y, _, _]| {
        for_rows(p, dst, |d, (i1, i2, i3)| {
            // SAFETY: element (i1, i2) of the I32 ids (shape checked by the builder).
            let e = unsafe {
                ids.data.add(i1 * ids.nb[0] + i2 * ids.nb[1]).cast::<i32>().read_unaligned()
            };
            assert!(
                (0..b.ne[1] as i64).contains(&i64::from(e)),
                "ADD_ID: expert id {e} out of range 0..{} (at [{i1}, {i2}])",
                b.ne[1]
            );
            // SAFETY: a row of a (same shape as dst) and row e of b (checked above).
            unsafe {
                load(a.row_ptr(i1, i2, i3), a.dtype, a.nb[0], x);
                load(b.row_ptr(e as usize, 0, 0), b.dtype, b.nb[0], y);
            }
            for (v, w) in x.iter_mut().zip(y.iter()) {
                *v += *w;
            }
            // SAFETY: this thread's dst row.
            unsafe { store(d, dst.dtype, dst.nb[0], x) };
        });
    });
}

/// gpt-oss's clamped SwiGLU (`ggml_compute_forward_swiglu_oai_f32`), split form.
pub(crate) fn swiglu_oai(
    p: &ComputeParams,
    dst: &TensorRef,
    gate: &TensorRef,
    up: &TensorRef,
    alpha: f32,
    limit: f32,
) {
    let n = dst.ne[0];
    with_rows([n, n, 0, 0], |[g, u, _, _]| {
        for_rows(p, dst, |d, (i1, i2, i3)| {
            // SAFETY: rows of both sources (same shape as dst).
            unsafe {
                load(gate.row_ptr(i1, i2, i3), gate.dtype, gate.nb[0], g);
                load(up.row_ptr(i1, i2, i3), up.dtype, up.nb[0], u);
            }
            for (x, y) in g.iter_mut().zip(u.iter()) {
                // std::min and std::clamp: a NaN gate stays NaN, a NaN up stays NaN.
                let xv = if limit < *x { limit } else { *x };
                let yv = if *y < -limit {
                    -limit
                } else if limit < *y {
                    limit
                } else {
                    *y
                };
                let out_glu = xv / (1.0 + (alpha * (-xv)).exp());
                *x = out_glu * (yv + 1.0);
            }
            // SAFETY: this thread's dst row.
            unsafe { store(d, dst.dtype, dst.nb[0], g) };
        });
    });
}

/// GELU, GELU_ERF, SILU or TANH of each element.
pub(crate) fn unary(p: &ComputeParams, op: UnaryOp, dst: &TensorRef, a: &TensorRef) {
    let table = gelu_table();
    with_rows([dst.ne[0], 0, 0, 0], |[x, _, _, _]| {
        for_rows(p, dst, |d, (i1, i2, i3)| {
            // SAFETY: a row of a (same shape as dst).
            unsafe { load(a.row_ptr(i1, i2, i3), a.dtype, a.nb[0], x) };
            match op {
                UnaryOp::Gelu => gelu_rows(x, None, table, p.simd),
                UnaryOp::GeluErf => x.iter_mut().for_each(|v| *v = gelu_erf(*v)),
                UnaryOp::Silu => vexp::silu(x, p.simd),
                UnaryOp::Tanh => x.iter_mut().for_each(|v| *v = v.tanh()),
            }
            // SAFETY: this thread's dst row.
            unsafe { store(d, dst.dtype, dst.nb[0], x) };
        });
    });
}

/// SWIGLU / GEGLU: `act(gate) * up`, the two halves of each `a` row (fused) or `a` and `up`
/// (split).
pub(crate) fn glu(
    p: &ComputeParams,
    op: GluOp,
    swapped: bool,
    dst: &TensorRef,
    a: &TensorRef,
    up: Option<TensorRef>,
) {
    let table = gelu_table();
    let n = dst.ne[0];
    with_rows([n, n, 0, 0], |[g, u, _, _]| {
        for_rows(p, dst, |d, (i1, i2, i3)| {
            // SAFETY: rows of the sources, which hold 2n (fused) or n (split) elements.
            unsafe {
                let ra = a.row_ptr(i1, i2, i3);
                match &up {
                    Some(b) => {
                        load(ra, a.dtype, a.nb[0], g);
                        load(b.row_ptr(i1, i2, i3), b.dtype, b.nb[0], u);
                    }
                    None => {
                        let second = ra.add(n * a.nb[0]);
                        let (pg, pu) = if swapped { (second, ra) } else { (ra, second) };
                        load(pg, a.dtype, a.nb[0], g);
                        load(pu, a.dtype, a.nb[0], u);
                    }
                }
            }
            match op {
                GluOp::SwiGlu => vexp::swiglu(g, u, p.simd),
                GluOp::GeGlu => gelu_rows(g, Some(u), table, p.simd),
            }
            // SAFETY: this thread's dst row.
            unsafe { store(d, dst.dtype, dst.nb[0], g) };
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry where ggml's table (built with `1 + a·x·x` as one FMA, as GCC compiles it)
    /// and an unfused evaluation differ by an f16 step; the value is llama.cpp's (Gemma-3's
    /// GEGLU, compared through its eval callback).
    #[test]
    fn gelu_table_follows_ggml_fma_contraction() {
        assert_eq!(float::f32_to_f16(gelu_table()[0xBFFF]), 0xA9D3);
        assert_eq!(gelu(f32::from_bits(0xbfff_d442), gelu_table()).to_bits(), 0xbd3a_6000);
    }

    /// The eight-wide GELU gives the scalar bits for every f16 input, values next to them,
    /// the ±10 cut-offs and beyond, with and without the gate product.
    #[test]
    fn gelu_rows_match_the_scalar_gelu() {
        let table = gelu_table();
        let mut xs: Vec<f32> =
            (0..=u16::MAX).map(float::f16_to_f32).filter(|x| !x.is_nan()).collect();
        let near: Vec<f32> = xs.iter().map(|x| f32::from_bits(x.to_bits() ^ 0x0000_0fff)).collect();
        xs.extend(near);
        xs.extend([-10.0, 10.0, -10.000001, 9.999999, -1e9, 1e9, 0.0, -0.0]);
        let u: Vec<f32> = (0..xs.len()).map(|i| (i % 97) as f32 * 0.37 - 11.0).collect();
        for simd in crate::SimdLevel::available() {
            let mut g = xs.clone();
            gelu_rows(&mut g, Some(&u), table, simd);
            let mut plain = xs.clone();
            gelu_rows(&mut plain, None, table, simd);
            for (i, &x) in xs.iter().enumerate() {
                let want = gelu(x, table);
                assert_eq!(plain[i].to_bits(), want.to_bits(), "{simd} gelu({x:e})");
                assert_eq!(g[i].to_bits(), (want * u[i]).to_bits(), "{simd} gelu({x:e}) * u");
            }
        }
    }
}
