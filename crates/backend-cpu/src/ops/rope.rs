//! ROPE (`ggml_compute_forward_rope`): NORM and NEOX pairing, frequency factors, YaRN.
//!
//! As in ggml, the angles of one position are a cache built by an iterated product
//! (`theta *= theta_scale`, not a `pow` per index) in f32, then each rotated pair uses its
//! cached cos/sin; dimensions past `n_dims` are copied.

use super::rowio::{load, row_at, store, with_rows};
use crate::{ComputeParams, TensorRef};
use tessera_tensor::graph::{RopeMode, RopeParams};

fn yarn_ramp(low: f32, high: f32, i0: usize) -> f32 {
    let y = ((i0 / 2) as f32 - low) / (high - low).max(0.001);
    1.0 - y.clamp(0.0, 1.0)
}

/// Fills `cache` with (cos, sin) pairs for the `n_dims / 2` rotated pairs at `pos`.
fn rope_cache(p: &RopeParams, pos: f32, ff: Option<&TensorRef>, corr: [f32; 2], cache: &mut [f32]) {
    let theta_scale = p.freq_base.powf(-2.0 / p.n_dims as f32);
    let mut theta = pos;
    for i0 in (0..p.n_dims).step_by(2) {
        let f = match ff {
            // SAFETY: the graph builder checked that freq_factors holds n_dims / 2 values.
            Some(t) => unsafe { t.data.add((i0 / 2) * t.nb[0]).cast::<f32>().read_unaligned() },
            None => 1.0,
        };
        let extrap = theta / f;
        let interp = p.freq_scale * extrap;
        let (mut angle, mut mscale) = (interp, p.attn_factor);
        if p.ext_factor != 0.0 {
            let mix = yarn_ramp(corr[0], corr[1], i0) * p.ext_factor;
            angle = interp * (1.0 - mix) + extrap * mix;
            mscale *= 1.0 + 0.1 * (1.0 / p.freq_scale).ln();
        }
        cache[i0] = angle.cos() * mscale;
        cache[i0 + 1] = angle.sin() * mscale;
        theta *= theta_scale;
    }
}

/// The rotated pairs of one row: `(j0, j1)` of pair `i0/2` for the mode.
#[inline(always)]
fn pair(i0: usize, n_dims: usize, mode: RopeMode) -> (usize, usize) {
    match mode {
        RopeMode::Norm => (i0, i0 + 1),
        RopeMode::Neox => (i0 / 2, i0 / 2 + n_dims / 2),
    }
}

fn rotate_plain(x: &mut [f32], cache: &[f32], n_dims: usize, mode: RopeMode) {
    for i0 in (0..n_dims).step_by(2) {
        let (c, s) = (cache[i0], cache[i0 + 1]);
        let (j0, j1) = pair(i0, n_dims, mode);
        let (x0, x1) = (x[j0], x[j1]);
        x[j0] = x0 * c - x1 * s;
        x[j1] = x0 * s + x1 * c;
    }
}

#[cfg_attr(target_arch = "x86_64", target_feature(enable = "fma"))]
unsafe fn rotate_fma(x: &mut [f32], cache: &[f32], n_dims: usize, mode: RopeMode) {
    for i0 in (0..n_dims).step_by(2) {
        let (c, s) = (cache[i0], cache[i0 + 1]);
        let (j0, j1) = pair(i0, n_dims, mode);
        let (x0, x1) = (x[j0], x[j1]);
        x[j0] = x0.mul_add(c, -(x1 * s));
        x[j1] = x0.mul_add(s, x1 * c);
    }
}

/// Rotates this thread's share of the rows of `a` (`[head_dim, n_head, n_tokens, ne3]`) by the
/// angles of the I32 positions `pos` (one per token, dim 2).
pub(crate) fn rope(
    p: &ComputeParams,
    dst: &TensorRef,
    a: &TensorRef,
    pos: &TensorRef,
    ff: Option<TensorRef>,
    params: &RopeParams,
) {
    let corr = params.yarn_corr_dims();
    let (ne0, n_dims) = (a.ne[0], params.n_dims);
    // ggml is built with FMA contraction: `x0*c - x1*s` becomes fma(x0, c, -(x1*s)) and
    // `x0*s + x1*c` becomes fma(x0, s, x1*c). Do the same wherever the CPU has FMA (the SIMD
    // levels), plain products at the scalar level (a build without FMA).
    let fused = p.simd >= crate::SimdLevel::Avx2 && crate::simd::has_fma();
    with_rows([ne0, n_dims, 0, 0], |[x, cache, _, _]| {
        let mut cached: Option<(usize, usize)> = None;
        for r in p.split(a.n_rows()) {
            let (i1, i2, i3, src) = row_at(a, r);
            if cached != Some((i2, i3)) {
                // SAFETY: pos holds ne2 I32 positions (checked by the graph builder).
                let position =
                    unsafe { pos.data.add(i2 * pos.nb[0]).cast::<i32>().read_unaligned() };
                rope_cache(params, position as f32, ff.as_ref(), corr, cache);
                cached = Some((i2, i3));
            }
            // SAFETY: row r of a.
            unsafe { load(src, a.dtype, a.nb[0], x) };
            if fused {
                // SAFETY: FMA was detected (`fused`).
                unsafe { rotate_fma(x, cache, n_dims, params.mode) };
            } else {
                rotate_plain(x, cache, n_dims, params.mode);
            }
            // SAFETY: this thread's dst row (same shape as a).
            unsafe { store(dst.row_ptr(i1, i2, i3), dst.dtype, dst.nb[0], x) };
        }
    });
}
