//! The scale searches the K-quant reference quantizers share (`nearest_int`,
//! `make_qx_quants`, `make_q3_quants`, `make_qkx2_quants` in ggml's `ggml-quants.c`).
//!
//! Every float operation here is done in f32 and in ggml's order: C evaluates `w*x[i]*l` as
//! `(w * x[i]) * (float)l`, and ggml's CPU code is compiled without FMA contraction, so a
//! reordering or a fused multiply-add would change which quant wins a tie and hence the bytes.

/// Below this largest magnitude a group counts as all zeros (`GROUP_MAX_EPS`).
pub(super) const GROUP_MAX_EPS: f32 = 1e-15;

/// ggml's `nearest_int`: rounds to nearest, ties to even, by adding `1.5 * 2^23` and reading
/// the low mantissa bits. Exact for `|x| <= 4194303`; outside that range it returns the same
/// (meaningless) value as ggml's release builds, where the range `assert` is compiled out.
pub(super) fn nearest_int(x: f32) -> i32 {
    let biased = x + 12_582_912.0;
    (biased.to_bits() as i32 & 0x007f_ffff) - 0x0040_0000
}

/// The value of largest magnitude in `x` with its sign (the first one wins ties), and that
/// magnitude.
fn signed_absmax(x: &[f32]) -> (f32, f32) {
    let (mut max, mut amax) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    (max, amax)
}

/// `nearest_int(iscale * x)` clamped to the signed range `-nmax..nmax`.
fn signed_quant(iscale: f32, x: f32, nmax: i32) -> i32 {
    nearest_int(iscale * x).clamp(-nmax, nmax - 1)
}

/// `make_qx_quants(n, nmax, x, L, rmse_type = 1, qw = NULL)`: a symmetric scale for `x` with
/// quants in `-nmax..nmax`, weighting each element by `x²`.
///
/// Starts from the scale that maps the signed absmax to `-nmax`, then tries the 18 nearby
/// scales `-(nmax ± 0.1·k)/max` and keeps the best weighted least-squares fit. Writes the
/// quants, offset by `nmax` (so `0..2·nmax`), to `levels` and returns the scale.
pub(super) fn make_qx_quants(nmax: i32, x: &[f32], levels: &mut [u8]) -> f32 {
    let (max, amax) = signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        levels.fill(0);
        return 0.0;
    }
    // The weighted sums sum(w·x·l) and sum(w·l²) for the quants a given iscale produces.
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0f32, 0f32);
        for &xi in x {
            let l = signed_quant(iscale, xi, nmax) as f32;
            let w = xi * xi;
            sumlx += w * xi * l;
            suml2 += w * l * l;
        }
        (sumlx, suml2)
    };
    let store = |iscale: f32, levels: &mut [u8]| {
        for (q, &xi) in levels.iter_mut().zip(x) {
            *q = (nmax + signed_quant(iscale, xi, nmax)) as u8;
        }
    };

    let iscale = -(nmax as f32) / max;
    store(iscale, levels);
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for step in (-9..=9).filter(|&s| s != 0) {
        let iscale = -(nmax as f32 + 0.1 * step as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            store(iscale, levels);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// `make_q3_quants(n, nmax, x, L, do_rmse = true)`: a symmetric scale for `x` with quants in
/// `-nmax..nmax`, weighting each element by `x²`.
///
/// Starts from the absmax scale, then up to 5 passes of coordinate descent: each quant is
/// moved to the level the least-squares scale of the others suggests when that improves the
/// fit. Writes the quants offset by `nmax` to `levels` and returns the least-squares scale.
pub(super) fn make_q3_quants(nmax: i32, x: &[f32], levels: &mut [u8]) -> f32 {
    let (max, amax) = signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        levels.fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let mut l: Vec<i32> = x.iter().map(|&xi| signed_quant(iscale, xi, nmax)).collect();
    let (mut sumlx, mut suml2) = (0f32, 0f32);
    for (&xi, &li) in x.iter().zip(&l) {
        let w = xi * xi;
        sumlx += w * xi * li as f32;
        suml2 += w * li as f32 * li as f32;
    }
    for _ in 0..5 {
        let mut changed = false;
        for (&xi, li) in x.iter().zip(l.iter_mut()) {
            let w = xi * xi;
            let old = *li as f32;
            // The fit without element i.
            let mut slx = sumlx - w * xi * old;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * old * old;
                let new_l = nearest_int(xi * sl2 / slx).clamp(-nmax, nmax - 1);
                if new_l != *li {
                    slx += w * xi * new_l as f32;
                    sl2 += w * new_l as f32 * new_l as f32;
                    // Keep it if sumlx²/suml2 (the explained energy) grows.
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        *li = new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }
    for (q, &li) in levels.iter_mut().zip(&l) {
        *q = (li + nmax) as u8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// The search grid and error norm of [`make_qkx2_quants`].
pub(super) struct Qkx2Search {
    /// Offset of the first trial `iscale` numerator from `nmax` (`rmin`).
    pub rmin: f32,
    /// Step between trial numerators (`rdelta`).
    pub rdelta: f32,
    /// Number of steps; `nstep + 1` trials (`nstep`).
    pub nstep: i32,
    /// Minimize the weighted absolute error instead of the squared error (`use_mad`).
    pub use_mad: bool,
}

/// `make_qkx2_quants`: an affine fit `x ≈ scale·l - min` with quants `l` in `0..=nmax` and
/// `min >= 0`, weighted by `weights`.
///
/// Starts from the min/max fit, then for each trial `iscale = (nmax + rmin + rdelta·k) /
/// (max - min)` quantizes and solves the weighted least-squares scale and min, keeping the one
/// with the smallest weighted error. Writes the quants to `levels` and returns
/// `(scale, min)` (the min as a positive number to subtract).
pub(super) fn make_qkx2_quants(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    levels: &mut [u8],
    search: &Qkx2Search,
) -> (f32, f32) {
    let n = x.len();
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        min = if x[i] < min { x[i] } else { min };
        max = if x[i] > max { x[i] } else { max };
        sum_w += weights[i];
        sum_x += weights[i] * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        levels.fill(0);
        return (0.0, -min);
    }
    let error = |diff: f32| if search.use_mad { diff.abs() } else { diff * diff };
    let quant = |iscale: f32, xi: f32, min: f32| nearest_int(iscale * (xi - min)).clamp(0, nmax);

    let iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0f32;
    for i in 0..n {
        levels[i] = quant(iscale, x[i], min) as u8;
        let diff = scale * f32::from(levels[i]) + min - x[i];
        best_error += weights[i] * error(diff);
    }
    if search.nstep < 1 {
        return (scale, -min);
    }

    let mut trial = [0u8; 32];
    let trial = &mut trial[..n];
    for step in 0..=search.nstep {
        let iscale = (search.rmin + search.rdelta * step as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0f32, 0f32, 0f32);
        for i in 0..n {
            let l = quant(iscale, x[i], min);
            trial[i] = l as u8;
            let (w, l) = (weights[i], l as f32);
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0f32;
            for i in 0..n {
                let diff = this_scale * f32::from(trial[i]) + this_min - x[i];
                cur_error += weights[i] * error(diff);
            }
            if cur_error < best_error {
                levels[..n].copy_from_slice(trial);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_half_to_even() {
        assert_eq!(nearest_int(0.5), 0);
        assert_eq!(nearest_int(1.5), 2);
        assert_eq!(nearest_int(2.5), 2);
        assert_eq!(nearest_int(-0.5), 0);
        assert_eq!(nearest_int(-1.5), -2);
        assert_eq!(nearest_int(-2.4), -2);
        assert_eq!(nearest_int(4_194_303.0), 4_194_303);
        assert_eq!(nearest_int(-4_194_303.0), -4_194_303);
    }

    #[test]
    fn make_qkx2_quants_fits_an_exact_grid() {
        // x = 0.5·l - 1 for l in 0..=15 is representable exactly.
        let x: Vec<f32> = (0..32).map(|i| 0.5 * (i % 16) as f32 - 1.0).collect();
        let w = vec![1.0; 32];
        let mut l = [0u8; 32];
        let s = Qkx2Search { rmin: -1.0, rdelta: 0.1, nstep: 20, use_mad: false };
        let (scale, min) = make_qkx2_quants(15, &x, &w, &mut l, &s);
        assert_eq!((scale, min), (0.5, 1.0));
        assert!(l.iter().enumerate().all(|(i, &q)| q as usize == i % 16));
    }
}
