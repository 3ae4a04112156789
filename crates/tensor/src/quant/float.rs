//! The plain (block size 1) types: F32, F16, BF16, F64 and the integers.
//!
//! f32 → f16 and f32 → bf16 round to nearest even, as ggml does (F16C on x86, and
//! `ggml_compute_fp32_to_bf16`, which also keeps NaNs quiet).

use super::Kernels;
use crate::DType;
use half::f16;

/// f16 bits to f32 (exact), through a 65,536-entry table as ggml's `ggml_table_f32_f16`: the
/// `half` crate's portable conversion is several times slower without F16C at compile time.
pub fn f16_to_f32(h: u16) -> f32 {
    static TABLE: std::sync::OnceLock<Box<[f32]>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| (0..=u16::MAX).map(|b| f16::from_bits(b).to_f32()).collect())[h as usize]
}

/// f32 to f16 bits, rounding to nearest even.
pub fn f32_to_f16(x: f32) -> u16 {
    f16::from_f32(x).to_bits()
}

/// bf16 bits to f32 (exact).
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// f32 to bf16 bits as `ggml_compute_fp32_to_bf16`: NaNs made quiet, others rounded to
/// nearest even.
pub fn f32_to_bf16(x: f32) -> u16 {
    let u = x.to_bits();
    if (u & 0x7fff_ffff) > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    ((u + (0x7fff + ((u >> 16) & 1))) >> 16) as u16
}

/// Reads little-endian `N`-byte values from `src`, converting each with `f`.
fn convert<const N: usize>(src: &[u8], dst: &mut [f32], f: impl Fn([u8; N]) -> f32) {
    for (b, d) in src.chunks_exact(N).zip(dst.iter_mut()) {
        *d = f(b.try_into().expect("chunks_exact yields N bytes"));
    }
}

fn store<const N: usize>(src: &[f32], dst: &mut [u8], f: impl Fn(f32) -> [u8; N]) {
    for (x, b) in src.iter().zip(dst.chunks_exact_mut(N)) {
        b.copy_from_slice(&f(*x));
    }
}

pub(crate) const KERNELS: &[Kernels] = &[
    Kernels {
        dtype: DType::F32,
        dequantize: |s, d| convert(s, d, f32::from_le_bytes),
        quantize: Some(|s, d| store(s, d, f32::to_le_bytes)),
    },
    Kernels {
        dtype: DType::F16,
        dequantize: |s, d| convert(s, d, |b| f16_to_f32(u16::from_le_bytes(b))),
        quantize: Some(|s, d| store(s, d, |x| f32_to_f16(x).to_le_bytes())),
    },
    Kernels {
        dtype: DType::BF16,
        dequantize: |s, d| convert(s, d, |b| bf16_to_f32(u16::from_le_bytes(b))),
        quantize: Some(|s, d| store(s, d, |x| f32_to_bf16(x).to_le_bytes())),
    },
    Kernels {
        dtype: DType::F64,
        dequantize: |s, d| convert(s, d, |b| f64::from_le_bytes(b) as f32),
        quantize: None,
    },
    Kernels {
        dtype: DType::I8,
        dequantize: |s, d| convert(s, d, |b| i8::from_le_bytes(b) as f32),
        quantize: None,
    },
    Kernels {
        dtype: DType::I16,
        dequantize: |s, d| convert(s, d, |b| i16::from_le_bytes(b) as f32),
        quantize: None,
    },
    Kernels {
        dtype: DType::I32,
        dequantize: |s, d| convert(s, d, |b| i32::from_le_bytes(b) as f32),
        quantize: None,
    },
    Kernels {
        dtype: DType::I64,
        dequantize: |s, d| convert(s, d, |b| i64::from_le_bytes(b) as f32),
        quantize: None,
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounds_to_nearest_even_and_keeps_nan_quiet() {
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        // 1 + 2^-8 is a tie between 0x3f80 and 0x3f81: even wins.
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f81_8000)), 0x3f82);
        assert_eq!(f32_to_bf16(f32::from_bits(0x7f80_0001)), 0x7fc0);
    }

    #[test]
    fn f16_rounds_to_nearest_even() {
        // 1 + 2^-11 is a tie between 1.0 and the next f16: even (1.0) wins.
        assert_eq!(f32_to_f16(1.0 + f32::powi(2.0, -11)), 0x3c00);
        assert_eq!(f32_to_f16(1.0 + 3.0 * f32::powi(2.0, -11)), 0x3c02);
    }
}

#[cfg(test)]
mod table_tests {
    use super::*;

    #[test]
    fn f16_table_matches_half_for_every_value() {
        for b in 0..=u16::MAX {
            let (t, h) = (f16_to_f32(b), f16::from_bits(b).to_f32());
            assert!(t.to_bits() == h.to_bits(), "{b:#06x}: {t} vs {h}");
        }
    }
}
