//! The K-quants: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (super-blocks of 256 with quantized sub-block
//! scales) and Q8_K (the activation type of their dot products).
//!
//! The quantizers are ggml's reference ones (`quantize_row_q2_K_ref` … `quantize_row_q8_K_ref`
//! in `ggml-quants.c`), which is what `llama-quantize` runs for these types without an
//! importance matrix. Each one searches per-sub-block scales ([`search`]), quantizes those
//! scales to 4, 6 or 8 bits against an f16 super-block scale, and then re-quantizes the values
//! against the scales as stored, so the bytes depend on every rounding on the way: the float
//! operations follow ggml's order in f32, `nearest_int` is ggml's round-half-even trick, and
//! f32 → f16 rounds to nearest even.
//!
//! - [`sub16`]: Q2_K, Q3_K, Q6_K (16 sub-blocks of 16).
//! - [`sub32`]: Q4_K, Q5_K (8 sub-blocks of 32, 12-byte packed 6-bit scales and mins).

mod search;
mod sub16;
mod sub32;

use super::{for_each_block, quantize_blocks, Kernels};
use crate::blocks::{BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K, QK_K};
use crate::DType;
use search::{nearest_int, GROUP_MAX_EPS};

/// Sub-blocks of 16 per super-block.
const SUB16: usize = QK_K / 16;
/// Sub-blocks of 32 per super-block.
const SUB32: usize = QK_K / 32;

/// `quantize_row_q8_K_ref` for one block: `d = max / -127` with `max` the signed value of
/// largest magnitude (so `max` itself maps to -127), `q = min(127, nearest_int(x / d))`
/// computed as `nearest_int(x · (-127 / max))`, and `bsums` the sums of each 16 quants.
///
/// An all-zero block gets `d = 0` and zero quants; ggml leaves its `bsums` untouched there,
/// this writes zeros (which are the sums).
fn quantize_q8_k(x: &[f32; QK_K]) -> BlockQ8K {
    let (mut max, mut amax) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax == 0.0 {
        return BlockQ8K { d: 0.0, qs: [0; QK_K], bsums: [0; SUB16] };
    }
    let iscale = -127.0 / max;
    let qs: [i8; QK_K] = std::array::from_fn(|j| nearest_int(iscale * x[j]).min(127) as i8);
    let bsums: [i16; SUB16] =
        std::array::from_fn(|j| qs[16 * j..16 * (j + 1)].iter().map(|&q| i16::from(q)).sum());
    BlockQ8K { d: 1.0 / iscale, qs, bsums }
}

/// `dequantize_row_q8_K` for one block.
fn dequantize_q8_k(b: &BlockQ8K, y: &mut [f32; QK_K]) {
    for (y, &q) in y.iter_mut().zip(&b.qs) {
        *y = b.d * f32::from(q);
    }
}

/// The kernels of this family, for the dispatcher in `quant`.
pub(crate) const KERNELS: &[Kernels] = &[
    Kernels {
        dtype: DType::Q2_K,
        dequantize: |s, d| for_each_block::<BlockQ2K, QK_K>(s, d, sub16::dequantize_q2_k),
        quantize: Some(|s, d| quantize_blocks::<BlockQ2K, QK_K>(s, d, sub16::quantize_q2_k)),
    },
    Kernels {
        dtype: DType::Q3_K,
        dequantize: |s, d| for_each_block::<BlockQ3K, QK_K>(s, d, sub16::dequantize_q3_k),
        quantize: Some(|s, d| quantize_blocks::<BlockQ3K, QK_K>(s, d, sub16::quantize_q3_k)),
    },
    Kernels {
        dtype: DType::Q4_K,
        dequantize: |s, d| for_each_block::<BlockQ4K, QK_K>(s, d, sub32::dequantize_q4_k),
        quantize: Some(|s, d| quantize_blocks::<BlockQ4K, QK_K>(s, d, sub32::quantize_q4_k)),
    },
    Kernels {
        dtype: DType::Q5_K,
        dequantize: |s, d| for_each_block::<BlockQ5K, QK_K>(s, d, sub32::dequantize_q5_k),
        quantize: Some(|s, d| quantize_blocks::<BlockQ5K, QK_K>(s, d, sub32::quantize_q5_k)),
    },
    Kernels {
        dtype: DType::Q6_K,
        dequantize: |s, d| for_each_block::<BlockQ6K, QK_K>(s, d, sub16::dequantize_q6_k),
        quantize: Some(|s, d| quantize_blocks::<BlockQ6K, QK_K>(s, d, sub16::quantize_q6_k)),
    },
    Kernels {
        dtype: DType::Q8_K,
        dequantize: |s, d| for_each_block::<BlockQ8K, QK_K>(s, d, dequantize_q8_k),
        quantize: Some(|s, d| quantize_blocks::<BlockQ8K, QK_K>(s, d, quantize_q8_k)),
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q8_k_maps_the_signed_absmax_to_minus_127() {
        let mut x = [0.25f32; QK_K];
        x[7] = 2.0;
        let b = quantize_q8_k(&x);
        assert_eq!(b.qs[7], -127);
        assert_eq!(b.d, 1.0 / (-127.0 / 2.0));
        assert_eq!(b.bsums[0], -127 + 15 * nearest_int(-127.0 / 2.0 * 0.25) as i16);
    }
}
