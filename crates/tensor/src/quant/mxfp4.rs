//! MXFP4 (OCP microscaling FP4): 32 E2M1 values sharing one E8M0 exponent.
//!
//! ggml keeps the E2M1 values doubled as integers ([`KVALUES_MXFP4`]) and so uses half the
//! E8M0 scale (`ggml_e8m0_to_fp32_half`). Quantization is `quantize_row_mxfp4_ref`: the exponent
//! is `floor(log2(amax)) - 2` (so amax lands in the top binade of E2M1), and each value takes
//! the table entry nearest to it (first one on ties).

use super::{for_each_block, quantize_blocks, Kernels};
use crate::blocks::{BlockMXFP4, KVALUES_MXFP4, QK4_0};
use crate::DType;

/// `ggml_e8m0_to_fp32_half`: `2^(e - 128)`, i.e. half the E8M0 value `2^(e - 127)`; `e` 0 and 1
/// give the subnormals 2^-128 and 2^-127. (255, NaN in E8M0, gives 2^127 as in ggml.)
pub(crate) fn e8m0_to_f32_half(e: u8) -> f32 {
    let bits = if e < 2 { 0x0020_0000u32 << e } else { u32::from(e - 1) << 23 };
    f32::from_bits(bits)
}

/// `best_index_mxfp4`: the index of the doubled E2M1 value that, times `d`, is nearest to `x`;
/// the first such index on ties.
fn best_index(x: f32, d: f32) -> u8 {
    let mut best = 0;
    let mut best_err = (f32::from(KVALUES_MXFP4[0]) * d - x).abs();
    for (i, &k) in KVALUES_MXFP4.iter().enumerate().skip(1) {
        let err = (f32::from(k) * d - x).abs();
        if err < best_err {
            best = i as u8;
            best_err = err;
        }
    }
    best
}

/// The shared exponent of a block with absolute maximum `amax`: `floor(log2(amax)) - 2 + 127`,
/// 0 for an all-zero block. The float-to-u8 conversion goes through i32 and keeps the low byte,
/// as ggml's `(uint8_t)` cast does on x86-64 (for finite inputs the value is in -24..=253).
fn shared_exponent(amax: f32) -> u8 {
    if amax > 0.0 {
        (amax.log2().floor() - 2.0 + 127.0) as i32 as u8
    } else {
        0
    }
}

/// `quantize_row_mxfp4_ref` on one block.
fn quantize_mxfp4(x: &[f32; QK4_0]) -> BlockMXFP4 {
    let mut amax = 0f32;
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
        }
    }
    let e = shared_exponent(amax);
    let d = e8m0_to_f32_half(e);
    let qs = std::array::from_fn(|j| best_index(x[j], d) | (best_index(x[j + 16], d) << 4));
    BlockMXFP4 { e, qs }
}

/// `dequantize_row_mxfp4` on one block: low nibbles are elements 0..16, high 16..32.
fn dequantize_mxfp4(b: &BlockMXFP4, y: &mut [f32; QK4_0]) {
    let d = e8m0_to_f32_half(b.e);
    for (j, &q) in b.qs.iter().enumerate() {
        y[j] = f32::from(KVALUES_MXFP4[usize::from(q & 0xf)]) * d;
        y[j + 16] = f32::from(KVALUES_MXFP4[usize::from(q >> 4)]) * d;
    }
}

/// This module's entries of the dispatch table.
pub(crate) const KERNELS: &[Kernels] = &[Kernels {
    dtype: DType::MXFP4,
    dequantize: |s, d| for_each_block(s, d, dequantize_mxfp4),
    quantize: Some(|s, d| quantize_blocks(s, d, quantize_mxfp4)),
}];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e8m0_half_is_two_to_the_e_minus_128() {
        for e in 0..=254u8 {
            assert_eq!(e8m0_to_f32_half(e), 2f64.powi(i32::from(e) - 128) as f32, "e={e}");
        }
        assert_eq!(e8m0_to_f32_half(255), 2f32.powi(127));
    }

    #[test]
    fn shared_exponent_puts_amax_in_the_top_binade() {
        // amax in [4, 8) -> 2^0 scale for doubled values -> d = 0.5, so 6.0 is kvalue 12.
        assert_eq!(shared_exponent(6.0), 127);
        assert_eq!(shared_exponent(4.0), 127);
        assert_eq!(shared_exponent(0.0), 0);
        assert_eq!(shared_exponent(1e-6), 105);
    }
}
