//! ROPE (`ggml_compute_forward_rope`): NORM and NEOX pairing, frequency factors, YaRN, and
//! `ggml_rope_multi`'s modes (M-RoPE, interleaved M-RoPE, vision) with four positions a token.
//!
//! As in ggml, the angles of one position are a cache built by an iterated product
//! (`theta *= theta_scale`, not a `pow` per index) in f32, then each rotated pair uses its
//! cached cos/sin; dimensions past `n_dims` are copied (the vision mode rotates the whole row).

use super::rowio::{load, row_at, store, with_rows};
use crate::{ComputeParams, TensorRef};
use tessera_tensor::graph::{RopeMode, RopeParams};

fn yarn_ramp(low: f32, high: f32, i0: usize) -> f32 {
    let y = ((i0 / 2) as f32 - low) / (high - low).max(0.001);
    1.0 - y.clamp(0.0, 1.0)
}

/// `rope_yarn`: the (cos, sin) of pair `i0`'s angle `extrap` (already divided by its frequency
/// factor) into `out`.
#[inline(always)]
fn yarn(p: &RopeParams, extrap: f32, corr: [f32; 2], i0: usize, out: &mut [f32]) {
    let interp = p.freq_scale * extrap;
    let (mut angle, mut mscale) = (interp, p.attn_factor);
    if p.ext_factor != 0.0 {
        let mix = yarn_ramp(corr[0], corr[1], i0) * p.ext_factor;
        angle = interp * (1.0 - mix) + extrap * mix;
        mscale *= 1.0 + 0.1 * (1.0 / p.freq_scale).ln();
    }
    out[0] = angle.cos() * mscale;
    out[1] = angle.sin() * mscale;
}

/// Frequency factor of pair `i0 / 2`.
#[inline(always)]
fn factor(ff: Option<&TensorRef>, i0: usize) -> f32 {
    match ff {
        // SAFETY: the graph builder checked that freq_factors holds n_dims / 2 values.
        Some(t) => unsafe { t.data.add((i0 / 2) * t.nb[0]).cast::<f32>().read_unaligned() },
        None => 1.0,
    }
}

/// Fills `cache` with (cos, sin) pairs for the `n_dims / 2` rotated pairs at `pos`.
fn rope_cache(p: &RopeParams, pos: f32, ff: Option<&TensorRef>, corr: [f32; 2], cache: &mut [f32]) {
    let theta_scale = p.freq_base.powf(-2.0 / p.n_dims as f32);
    let mut theta = pos;
    for i0 in (0..p.n_dims).step_by(2) {
        yarn(p, theta / factor(ff, i0), corr, i0, &mut cache[i0..i0 + 2]);
        theta *= theta_scale;
    }
}

/// `ggml_mrope_cache_init`: (cos, sin) for every pair of a row of `cache.len()` values from the
/// token's four positions, each pair's angle from its section's position (sections in turn
/// for the interleaved mode); in the vision mode each section's angles start afresh.
fn mrope_cache(
    p: &RopeParams,
    pos: [f32; 4],
    ff: Option<&TensorRef>,
    corr: [f32; 2],
    cache: &mut [f32],
) {
    let Some(s) = p.mode.sections() else { return };
    let (imrope, indep) =
        (matches!(p.mode, RopeMode::Imrope(_)), matches!(p.mode, RopeMode::Vision(_)));
    let theta_scale = p.freq_base.powf(-2.0 / p.n_dims as f32);
    let mut theta = pos;
    let sect_dims = (s[0] + s[1] + s[2] + s[3]) as usize;
    let (sec_w, sec_e) = ((s[0] + s[1]) as usize, (s[0] + s[1] + s[2]) as usize);
    for i0 in (0..cache.len()).step_by(2) {
        let sector = (i0 / 2) % sect_dims;
        if indep {
            // Reset the section's angle where it starts.
            match sector {
                0 => theta[0] = pos[0],
                x if x == s[0] as usize => theta[1] = pos[1],
                x if x == sec_w => theta[2] = pos[2],
                x if x == sec_e => theta[3] = pos[3],
                _ => {}
            }
        }
        let k = if imrope {
            let (m, lim) = (sector % 3, |j: usize| sector < 3 * s[j] as usize);
            match m {
                1 if lim(1) => 1,
                2 if lim(2) => 2,
                0 if lim(0) => 0,
                _ => 3,
            }
        } else if sector >= s[0] as usize && sector < sec_w {
            1
        } else if sector >= sec_w && sector < sec_w + s[2] as usize {
            2
        } else if sector >= sec_w + s[2] as usize {
            3
        } else {
            0
        };
        yarn(p, theta[k] / factor(ff, i0), corr, i0, &mut cache[i0..i0 + 2]);
        for t in &mut theta {
            *t *= theta_scale;
        }
    }
}

/// The rotated pairs of one row: `(j0, j1)` of pair `i0/2` for the mode.
#[inline(always)]
fn pair(i0: usize, n_dims: usize, mode: RopeMode) -> (usize, usize) {
    match mode {
        RopeMode::Norm => (i0, i0 + 1),
        RopeMode::Neox | RopeMode::Mrope(_) | RopeMode::Imrope(_) => (i0 / 2, i0 / 2 + n_dims / 2),
        RopeMode::Vision(_) => (i0 / 2, i0 / 2 + n_dims),
    }
}

/// How many values of a row the pairs span (`rotate_pairs`'s `n`): the whole row in the vision
/// mode, else `n_dims`.
fn span(ne0: usize, n_dims: usize, mode: RopeMode) -> usize {
    if matches!(mode, RopeMode::Vision(_)) {
        ne0
    } else {
        n_dims
    }
}

fn rotate_plain(x: &mut [f32], cache: &[f32], n_dims: usize, mode: RopeMode) {
    for i0 in (0..cache.len()).step_by(2) {
        let (c, s) = (cache[i0], cache[i0 + 1]);
        let (j0, j1) = pair(i0, n_dims, mode);
        let (x0, x1) = (x[j0], x[j1]);
        x[j0] = x0 * c - x1 * s;
        x[j1] = x0 * s + x1 * c;
    }
}

#[cfg_attr(target_arch = "x86_64", target_feature(enable = "fma"))]
unsafe fn rotate_fma(x: &mut [f32], cache: &[f32], n_dims: usize, mode: RopeMode) {
    for i0 in (0..cache.len()).step_by(2) {
        let (c, s) = (cache[i0], cache[i0 + 1]);
        let (j0, j1) = pair(i0, n_dims, mode);
        let (x0, x1) = (x[j0], x[j1]);
        x[j0] = x0.mul_add(c, -(x1 * s));
        x[j1] = x0.mul_add(s, x1 * c);
    }
}

/// Rotates this thread's share of the rows of `a` (`[head_dim, n_head, n_tokens, ne3]`) by the
/// angles of the I32 positions `pos` (one per token, dim 2; four for the multi modes, each
/// component's `n_tokens` after the last).
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
    let n = span(ne0, n_dims, params.mode);
    let ne2 = a.ne[2];
    with_rows([ne0, n, 0, 0], |[x, cache, _, _]| {
        let mut cached: Option<(usize, usize)> = None;
        for r in p.split(a.n_rows()) {
            let (i1, i2, i3, src) = row_at(a, r);
            if cached != Some((i2, i3)) {
                // SAFETY: pos holds ne2 I32 positions, 4·ne2 for the multi modes (checked by
                // the graph builder).
                let at = |k: usize| unsafe {
                    pos.data.add((i2 + k * ne2) * pos.nb[0]).cast::<i32>().read_unaligned() as f32
                };
                if params.mode.sections().is_some() {
                    mrope_cache(params, [at(0), at(1), at(2), at(3)], ff.as_ref(), corr, cache);
                } else {
                    rope_cache(params, at(0), ff.as_ref(), corr, cache);
                }
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
