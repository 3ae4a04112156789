//! Comparing a backend's output with the reference: NaN fails, infinities must match in sign,
//! then the normalized mean squared error must be within the case's threshold
//! (test-backend-ops' rules and thresholds).

use std::fmt;
use tessera_tensor::DType;

/// NMSE thresholds of test-backend-ops, test mode.
pub mod thresholds {
    /// Everything not listed below (ROPE, RMS_NORM, NORM, binary ops, GET_ROWS, unary, GLU...).
    pub const DEFAULT: f64 = 1e-7;
    /// MUL_MAT and FLASH_ATTN_EXT: the CPU quantizes activations to the weight's dot type (Q8_0,
    /// Q8_1, Q8_K, F16, BF16), and flash attention accumulates V in F16.
    pub const MUL_MAT: f64 = 5e-4;
    /// SOFT_MAX.
    pub const SOFT_MAX: f64 = 1e-6;
    /// CPY between different float types.
    pub const CPY: f64 = 1e-6;
}

/// How close a backend's output must be to the reference.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Tolerance {
    /// NMSE at most this.
    Nmse(f64),
    /// Bit-exact values (same-type copies, ARGMAX): NMSE must be 0.
    Exact,
}

impl Tolerance {
    /// The NMSE bound.
    pub fn max_nmse(self) -> f64 {
        match self {
            Tolerance::Nmse(t) => t,
            Tolerance::Exact => 0.0,
        }
    }

    /// test-backend-ops' "one quantization step" estimate for copying `n` values uniform in
    /// `[-range, range)` into `dtype`: the NMSE if one value lands one step off, i.e.
    /// `(2 * range / 2^bits)^2 / (0.25 * range^2 * n)`. `None` for types it does not estimate.
    pub fn one_quant_step(dtype: DType, n: usize) -> Option<Tolerance> {
        let mut step = match dtype {
            DType::Q4_0 | DType::Q4_1 => 1.0 / 8.0,
            DType::IQ4_NL => 2.0 / 8.0,
            DType::Q5_0 | DType::Q5_1 => 1.0 / 16.0,
            DType::Q8_0 => 1.0 / 64.0,
            _ => return None,
        };
        step *= step;
        Some(Tolerance::Nmse(step / (0.25 * n as f64)))
    }
}

impl fmt::Display for Tolerance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tolerance::Nmse(t) => write!(f, "{t:.3e}"),
            Tolerance::Exact => f.write_str("exact"),
        }
    }
}

/// Why an output does not match.
#[derive(Debug, Clone, PartialEq)]
pub enum Mismatch {
    /// A NaN in the backend's output (or in the reference, a bug of the case).
    NaN {
        /// Element index (logical order).
        index: usize,
        /// The backend's value.
        got: f64,
        /// The reference value.
        want: f64,
    },
    /// An infinity on one side only, or of the other sign.
    Inf {
        /// Element index (logical order).
        index: usize,
        /// The backend's value.
        got: f64,
        /// The reference value.
        want: f64,
    },
    /// NMSE above the threshold.
    Nmse {
        /// The error.
        nmse: f64,
        /// The threshold.
        max: f64,
        /// Index of the element with the largest absolute difference.
        worst: usize,
        /// The backend's value there.
        got: f64,
        /// The reference value there.
        want: f64,
    },
    /// Different element counts (a bug of the harness).
    Length {
        /// The backend's count.
        got: usize,
        /// The reference's count.
        want: usize,
    },
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Mismatch::NaN { index, got, want } => {
                write!(f, "NaN at element {index} (got {got}, want {want})")
            }
            Mismatch::Inf { index, got, want } => {
                write!(f, "infinity mismatch at element {index} (got {got}, want {want})")
            }
            Mismatch::Nmse { nmse, max, worst, got, want } => write!(
                f,
                "NMSE {nmse:.3e} > {max:.3e} (worst element {worst}: got {got:.6e}, want {want:.6e})"
            ),
            Mismatch::Length { got, want } => write!(f, "{got} values, expected {want}"),
        }
    }
}

/// `sum((got - want)^2) / sum(want^2)`, skipping positions where both are the same infinity.
/// Normalized by the reference, not by the backend's output as test-backend-ops does, so a
/// backend producing huge garbage cannot shrink its own error. 0/0 is 0; x/0 is infinite.
pub fn nmse(got: &[f64], want: &[f64]) -> f64 {
    let (mut num, mut den) = (0.0, 0.0);
    for (&g, &w) in got.iter().zip(want) {
        if g.is_infinite() && g == w {
            continue;
        }
        num += (g - w) * (g - w);
        den += w * w;
    }
    match (num == 0.0, den == 0.0) {
        (true, _) => 0.0,
        (false, true) => f64::INFINITY,
        (false, false) => num / den,
    }
}

/// Checks `got` (the backend's output) against `want` (the reference), returning the NMSE.
pub fn compare(got: &[f64], want: &[f64], tol: Tolerance) -> Result<f64, Mismatch> {
    if got.len() != want.len() {
        return Err(Mismatch::Length { got: got.len(), want: want.len() });
    }
    for (index, (&g, &w)) in got.iter().zip(want).enumerate() {
        if g.is_nan() || w.is_nan() {
            return Err(Mismatch::NaN { index, got: g, want: w });
        }
        let inf = |x: f64| x.is_infinite() || x.abs() == f64::from(f32::MAX);
        if (inf(g) || inf(w)) && !(inf(g) && inf(w) && g.signum() == w.signum()) {
            return Err(Mismatch::Inf { index, got: g, want: w });
        }
    }
    let err = nmse(got, want);
    let max = tol.max_nmse();
    if err > max {
        let worst = got
            .iter()
            .zip(want)
            .map(|(g, w)| if g == w { 0.0 } else { (g - w).abs() })
            .enumerate()
            .fold((0, -1.0), |b, (i, d)| if d > b.1 { (i, d) } else { b })
            .0;
        return Err(Mismatch::Nmse { nmse: err, max, worst, got: got[worst], want: want[worst] });
    }
    Ok(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nan_fails_even_within_tolerance() {
        let e = compare(&[1.0, f64::NAN], &[1.0, 2.0], Tolerance::Nmse(1.0)).unwrap_err();
        assert!(matches!(e, Mismatch::NaN { index: 1, .. }));
    }

    #[test]
    fn infinities_must_match_in_sign() {
        let inf = f64::INFINITY;
        assert!(compare(&[inf, 1.0], &[inf, 1.0], Tolerance::Exact).is_ok());
        assert!(matches!(
            compare(&[-inf, 1.0], &[inf, 1.0], Tolerance::Nmse(1.0)),
            Err(Mismatch::Inf { .. })
        ));
        assert!(matches!(
            compare(&[5.0, 1.0], &[inf, 1.0], Tolerance::Nmse(1.0)),
            Err(Mismatch::Inf { .. })
        ));
    }

    #[test]
    fn nmse_is_relative_to_the_reference() {
        let want = [1.0, -1.0, 2.0, -2.0];
        let got = [1.001, -1.0, 2.0, -2.0];
        let e = compare(&got, &want, Tolerance::Nmse(1e-6)).unwrap();
        assert!((e - 1e-6 / 10.0).abs() < 1e-12);
        assert!(matches!(
            compare(&got, &want, Tolerance::Nmse(1e-8)),
            Err(Mismatch::Nmse { worst: 0, .. })
        ));
        assert!(compare(&got, &want, Tolerance::Exact).is_err());
        assert_eq!(compare(&[0.0], &[0.0], Tolerance::Exact), Ok(0.0));
    }

    #[test]
    fn one_step_estimate_matches_test_backend_ops() {
        // Q8_0, 1000 values: (1/64)^2 / 250.
        let t = Tolerance::one_quant_step(DType::Q8_0, 1000).unwrap().max_nmse();
        assert!((t - (1.0f64 / 64.0).powi(2) / 250.0).abs() < 1e-15);
        assert!(Tolerance::one_quant_step(DType::Q4_K, 1000).is_none());
    }
}
