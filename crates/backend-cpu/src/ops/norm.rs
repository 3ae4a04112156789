//! Row reductions: RMS_NORM and NORM (sums in f64, as ggml's `ggml_float`), SUM_ROWS, ARGMAX.

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

/// `(x - mean) / sqrt(var + eps)` per row (`ggml_compute_forward_norm_f32`).
pub(crate) fn norm(p: &ComputeParams, dst: &TensorRef, a: &TensorRef, eps: f32) {
    per_row(p, dst, a, |x, d| {
        let n = x.len() as f64;
        let mean = (x.iter().map(|&v| f64::from(v)).sum::<f64>() / n) as f32;
        let mut var = 0f64;
        for v in x.iter_mut() {
            *v -= mean;
            var += f64::from(*v) * f64::from(*v);
        }
        let s = 1.0 / ((var / n) as f32 + eps).sqrt();
        x.iter_mut().for_each(|v| *v *= s);
        // SAFETY: this thread's dst row.
        unsafe { store(d, dst.dtype, dst.nb[0], x) };
    });
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
