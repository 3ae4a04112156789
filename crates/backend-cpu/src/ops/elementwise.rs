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

const SQRT_2_OVER_PI: f32 = 0.797_884_6;
const GELU_COEF_A: f32 = 0.044715;

/// ggml's `ggml_gelu_f32` as its x86 build compiles it: GCC contracts `1 + a·x·x` into one
/// fused multiply-add (the table differs by an f16 step for some inputs otherwise).
fn gelu_exact_f32(x: f32) -> f32 {
    let inner = (GELU_COEF_A * x).mul_add(x, 1.0);
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * inner).tanh())
}

/// ggml's `ggml_table_gelu_f16`: tanh-GELU of every f16 value, as f16 bits.
fn gelu_table() -> &'static [u16] {
    static TABLE: OnceLock<Box<[u16]>> = OnceLock::new();
    TABLE.get_or_init(|| {
        (0..=u16::MAX).map(|h| float::f32_to_f16(gelu_exact_f32(float::f16_to_f32(h)))).collect()
    })
}

/// GELU (tanh approximation) as ggml's CPU computes it.
pub(crate) fn gelu(x: f32, table: &[u16]) -> f32 {
    if x <= -10.0 {
        0.0
    } else if x >= 10.0 {
        x
    } else {
        float::f16_to_f32(table[float::f32_to_f16(x) as usize])
    }
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
    let f: fn(f32, f32) -> f32 = match op {
        Op::Add => |x, y| x + y,
        Op::Sub => |x, y| x - y,
        Op::Mul => |x, y| x * y,
        _ => |x, y| x / y,
    };
    let (ne0, ne10) = (dst.ne[0], b.ne[0]);
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

/// GELU, GELU_ERF, SILU or TANH of each element.
pub(crate) fn unary(p: &ComputeParams, op: UnaryOp, dst: &TensorRef, a: &TensorRef) {
    let table = gelu_table();
    with_rows([dst.ne[0], 0, 0, 0], |[x, _, _, _]| {
        for_rows(p, dst, |d, (i1, i2, i3)| {
            // SAFETY: a row of a (same shape as dst).
            unsafe { load(a.row_ptr(i1, i2, i3), a.dtype, a.nb[0], x) };
            match op {
                UnaryOp::Gelu => x.iter_mut().for_each(|v| *v = gelu(*v, table)),
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
                GluOp::GeGlu => {
                    g.iter_mut().zip(u.iter()).for_each(|(g, u)| *g = gelu(*g, table) * u)
                }
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
        assert_eq!(gelu_table()[0xBFFF], 0xA9D3);
        assert_eq!(gelu(f32::from_bits(0xbfff_d442), gelu_table()).to_bits(), 0xbd3a_6000);
    }
}
