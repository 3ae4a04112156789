//! Row reductions: RMS_NORM and NORM (sums in f64, as ggml's `ggml_float`, in its order),
//! SUM_ROWS, ARGMAX.

use super::rowio::{load, row_at, store, with_rows};
use crate::{ComputeParams, TensorRef};

/// Runs `f(row values, dst row)` for this thread's share of `a`'s rows, the values loaded as f32.
fn per_row(
    p: &ComputeParams,
    dst: &TensorRef,
    a: &TensorRef,
    mut f: impl FnMut(&mut [f32], *mut u8),
) {
    with_rows([a.ne[0], 0, 0, 0], |[x, _, _, _]| {
        for r in p.split(a.n_rows()) {
            let (i1, i2, i3, src) = row_at(a, r);
            // SAFETY: row r of a holds ne[0] elements at nb[0] strides.
            unsafe { load(src, a.dtype, a.nb[0], x) };
            // SAFETY: dst has a row at the same coordinates (same dims 1..3).
            let d = unsafe { dst.row_ptr(i1, i2, i3) };
            f(x, d);
        }
    });
}

/// `x / sqrt(mean(x²) + eps)` per row (`ggml_compute_forward_rms_norm_f32`).
pub(crate) fn rms_norm(p: &ComputeParams, dst: &TensorRef, a: &TensorRef, eps: f32) {
    per_row(p, dst, a, |x, d| {
        // As ggml: each square rounded to f32, the sum in f64.
        let sum: f64 = x.iter().map(|&v| f64::from(v * v)).sum();
        let mean = (sum / x.len() as f64) as f32;
        let s = 1.0 / (mean + eps).sqrt();
        x.iter_mut().for_each(|v| *v *= s);
        // SAFETY: this thread's dst row.
        unsafe { store(d, dst.dtype, dst.nb[0], x) };
    });
}

/// `(x - mean) / sqrt(var + eps)` per row (`ggml_compute_forward_norm_f32`), in ggml's order:
/// the sum in f64 rounded to f32 before the division by the length (in f32); the variance by
/// [`centered_variance`]; the scale `1 / sqrtf(var + eps)` in f32.
pub(crate) fn norm(p: &ComputeParams, dst: &TensorRef, a: &TensorRef, eps: f32) {
    let level = p.simd;
    per_row(p, dst, a, |x, d| {
        let sum = x.iter().map(|&v| f64::from(v)).sum::<f64>() as f32;
        let mean = sum / x.len() as f32;
        let var = centered_variance(x, mean, level) as f32;
        let s = 1.0 / (var + eps).sqrt();
        x.iter_mut().for_each(|v| *v *= s);
        // SAFETY: this thread's dst row.
        unsafe { store(d, dst.dtype, dst.nb[0], x) };
    });
}

/// `ggml_vec_cvar_f32`: `x -= mean` in place, and the mean of the squares: squares in f32, each
/// SIMD vector of them summed in its build's lane order (AVX-512: halves, quarters, then
/// `(l0 + l2) + (l1 + l3)`; AVX2: halves, then the same; the scalar level as ggml's SSE2 build
/// without AVX: `(l0 + l1) + (l2 + l3)`), the vectors' sums and the tail's squares added in f64.
fn centered_variance(x: &mut [f32], mean: f32, level: crate::SimdLevel) -> f64 {
    use crate::SimdLevel;
    let lanes = match level {
        SimdLevel::Avx512 => 16,
        SimdLevel::Avx2 => 8,
        _ => 4,
    };
    let n = x.len();
    let mut sum = 0f64;
    let mut i = 0;
    let mut sq = [0f32; 16];
    while i + lanes <= n {
        for (j, s) in sq.iter_mut().take(lanes).enumerate() {
            let v = x[i + j] - mean;
            x[i + j] = v;
            *s = v * v;
        }
        let r = match lanes {
            16 | 8 => {
                let mut h = [0f32; 8];
                let half = lanes / 2;
                for k in 0..half {
                    h[k] = sq[k + half] + sq[k];
                }
                if lanes == 16 {
                    for k in 0..4 {
                        h[k] += h[k + 4];
                    }
                }
                (h[0] + h[2]) + (h[1] + h[3])
            }
            _ => (sq[0] + sq[1]) + (sq[2] + sq[3]),
        };
        sum += f64::from(r);
        i += lanes;
    }
    for v in &mut x[i..] {
        *v -= mean;
        sum += f64::from(*v * *v);
    }
    sum / n as f64
}

/// Sum of each row, into a one-element row.
pub(crate) fn sum_rows(p: &ComputeParams, dst: &TensorRef, a: &TensorRef) {
    per_row(p, dst, a, |x, d| {
        let s = x.iter().map(|&v| f64::from(v)).sum::<f64>() as f32;
        // SAFETY: this thread's one-element dst row.
        unsafe { store(d, dst.dtype, dst.nb[0], &[s]) };
    });
}

/// Index of the first largest value of each row of a matrix, as I32 (`ggml_vec_argmax_f32`).
pub(crate) fn argmax(p: &ComputeParams, dst: &TensorRef, a: &TensorRef) {
    with_rows([a.ne[0], 0, 0, 0], |[x, _, _, _]| {
        for r in p.split(a.ne[1]) {
            // SAFETY: row r of the matrix a.
            unsafe { load(a.row_ptr(r, 0, 0), a.dtype, a.nb[0], x) };
            let (mut best, mut max) = (0usize, f32::NEG_INFINITY);
            for (i, &v) in x.iter().enumerate() {
                if v > max {
                    (best, max) = (i, v);
                }
            }
            // SAFETY: element r of the I32 dst vector, written by this thread only.
            unsafe { dst.data.add(r * dst.nb[0]).cast::<i32>().write_unaligned(best as i32) };
        }
    });
}
