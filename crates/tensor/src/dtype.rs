//! `DType`: every ggml type id a GGUF file can hold, with ggml's name, block size and
//! bytes per block.

use crate::{Result, TensorError};
use std::fmt;

/// A ggml tensor element type (`enum ggml_type`), with the same numeric ids.
///
/// Ids ggml removed (4, 5, 31-33, 36-38) have no variant: [`DType::from_id`] rejects them with
/// [`TensorError::RemovedType`].
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum DType {
    /// 32-bit IEEE float.
    F32 = 0,
    /// 16-bit IEEE float.
    F16 = 1,
    /// 4-bit, 32 per block, one f16 scale.
    Q4_0 = 2,
    /// 4-bit, 32 per block, f16 scale and min.
    Q4_1 = 3,
    /// 5-bit, 32 per block, one f16 scale.
    Q5_0 = 6,
    /// 5-bit, 32 per block, f16 scale and min.
    Q5_1 = 7,
    /// 8-bit, 32 per block, one f16 scale.
    Q8_0 = 8,
    /// 8-bit, 32 per block, f16 scale and f16 `d * sum(q)`.
    Q8_1 = 9,
    /// 2-bit K-quant, 256 per block.
    Q2_K = 10,
    /// 3-bit K-quant, 256 per block.
    Q3_K = 11,
    /// 4-bit K-quant, 256 per block.
    Q4_K = 12,
    /// 5-bit K-quant, 256 per block.
    Q5_K = 13,
    /// 6-bit K-quant, 256 per block.
    Q6_K = 14,
    /// 8-bit K-quant (activations), f32 scale and per-16 sums.
    Q8_K = 15,
    /// 2.0625-bit i-quant.
    IQ2_XXS = 16,
    /// 2.3125-bit i-quant.
    IQ2_XS = 17,
    /// 3.0625-bit i-quant.
    IQ3_XXS = 18,
    /// 1.5625-bit i-quant.
    IQ1_S = 19,
    /// 4-bit non-linear, 32 per block.
    IQ4_NL = 20,
    /// 3.4375-bit i-quant.
    IQ3_S = 21,
    /// 2.5625-bit i-quant.
    IQ2_S = 22,
    /// 4.25-bit non-linear, 256 per block.
    IQ4_XS = 23,
    /// 8-bit signed integer.
    I8 = 24,
    /// 16-bit signed integer.
    I16 = 25,
    /// 32-bit signed integer.
    I32 = 26,
    /// 64-bit signed integer.
    I64 = 27,
    /// 64-bit IEEE float.
    F64 = 28,
    /// 1.75-bit i-quant.
    IQ1_M = 29,
    /// bfloat16: the top 16 bits of an f32.
    BF16 = 30,
    /// Ternary, base-3 packed.
    TQ1_0 = 34,
    /// Ternary, 2 bits each.
    TQ2_0 = 35,
    /// Microscaling FP4 (E2M1 values, E8M0 shared exponent), 32 per block.
    MXFP4 = 39,
    /// NVIDIA FP4 (recognised; no reference kernels here yet).
    NVFP4 = 40,
    /// 1-bit, 128 per block (recognised; no reference kernels here yet).
    Q1_0 = 41,
    /// 2-bit, 64 per block (recognised; no reference kernels here yet).
    Q2_0 = 42,
}

/// One more than the largest id ggml knows (`GGML_TYPE_COUNT`).
pub const GGML_TYPE_COUNT: u32 = 43;

impl DType {
    /// Every variant, in id order.
    pub const ALL: [DType; 35] = [
        DType::F32,
        DType::F16,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
        DType::Q8_1,
        DType::Q2_K,
        DType::Q3_K,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
        DType::Q8_K,
        DType::IQ2_XXS,
        DType::IQ2_XS,
        DType::IQ3_XXS,
        DType::IQ1_S,
        DType::IQ4_NL,
        DType::IQ3_S,
        DType::IQ2_S,
        DType::IQ4_XS,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::F64,
        DType::IQ1_M,
        DType::BF16,
        DType::TQ1_0,
        DType::TQ2_0,
        DType::MXFP4,
        DType::NVFP4,
        DType::Q1_0,
        DType::Q2_0,
    ];

    /// The type with ggml id `id`; removed and unknown ids are errors.
    pub fn from_id(id: u32) -> Result<DType> {
        let removed = |what| Err(TensorError::RemovedType { id, what });
        match id {
            4 => removed("Q4_2"),
            5 => removed("Q4_3"),
            31..=33 => removed("Q4_0_4_4/Q4_0_4_8/Q4_0_8_8: repacking is a runtime buffer type"),
            36..=38 => {
                removed("IQ4_NL_4_4/IQ4_NL_4_8/IQ4_NL_8_8: repacking is a runtime buffer type")
            }
            _ => DType::ALL
                .iter()
                .copied()
                .find(|d| d.id() == id)
                .ok_or(TensorError::UnknownType { id }),
        }
    }

    /// The ggml id.
    pub const fn id(self) -> u32 {
        self as u32
    }

    /// ggml's name for the type (`ggml_type_name`), e.g. `"q4_K"`, `"f32"`.
    pub const fn name(self) -> &'static str {
        self.traits().0
    }

    /// Elements per block (`ggml_blck_size`).
    pub const fn block_size(self) -> usize {
        self.traits().1
    }

    /// Bytes per block (`ggml_type_size`).
    pub const fn type_size(self) -> usize {
        self.traits().2
    }

    /// Whether the type stores blocks of quantized values (block size > 1).
    pub const fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// Whether this crate has reference kernels for the type. NVFP4, Q1_0 and Q2_0 are
    /// recognised (a GGUF file holding them reads) but not supported by the kernels.
    pub const fn is_supported(self) -> bool {
        !matches!(self, DType::NVFP4 | DType::Q1_0 | DType::Q2_0)
    }

    /// Bytes taken by one row of `n` elements, or an error when `n` is not a whole number of
    /// blocks (`ggml_row_size`).
    pub fn row_size(self, n: u64) -> Result<u64> {
        let block = self.block_size() as u64;
        if n % block != 0 {
            return Err(TensorError::NotBlockMultiple { dtype: self, n, block });
        }
        (n / block)
            .checked_mul(self.type_size() as u64)
            .ok_or(TensorError::Overflow { what: "row size" })
    }

    /// (name, block size, bytes per block), as ggml's type traits.
    const fn traits(self) -> (&'static str, usize, usize) {
        use DType::*;
        match self {
            F32 => ("f32", 1, 4),
            F16 => ("f16", 1, 2),
            Q4_0 => ("q4_0", 32, 18),
            Q4_1 => ("q4_1", 32, 20),
            Q5_0 => ("q5_0", 32, 22),
            Q5_1 => ("q5_1", 32, 24),
            Q8_0 => ("q8_0", 32, 34),
            Q8_1 => ("q8_1", 32, 36),
            Q2_K => ("q2_K", 256, 84),
            Q3_K => ("q3_K", 256, 110),
            Q4_K => ("q4_K", 256, 144),
            Q5_K => ("q5_K", 256, 176),
            Q6_K => ("q6_K", 256, 210),
            Q8_K => ("q8_K", 256, 292),
            IQ2_XXS => ("iq2_xxs", 256, 66),
            IQ2_XS => ("iq2_xs", 256, 74),
            IQ3_XXS => ("iq3_xxs", 256, 98),
            IQ1_S => ("iq1_s", 256, 50),
            IQ4_NL => ("iq4_nl", 32, 18),
            IQ3_S => ("iq3_s", 256, 110),
            IQ2_S => ("iq2_s", 256, 82),
            IQ4_XS => ("iq4_xs", 256, 136),
            I8 => ("i8", 1, 1),
            I16 => ("i16", 1, 2),
            I32 => ("i32", 1, 4),
            I64 => ("i64", 1, 8),
            F64 => ("f64", 1, 8),
            IQ1_M => ("iq1_m", 256, 56),
            BF16 => ("bf16", 1, 2),
            TQ1_0 => ("tq1_0", 256, 54),
            TQ2_0 => ("tq2_0", 256, 66),
            MXFP4 => ("mxfp4", 32, 17),
            NVFP4 => ("nvfp4", 64, 36),
            Q1_0 => ("q1_0", 128, 18),
            Q2_0 => ("q2_0", 64, 18),
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl TryFrom<u32> for DType {
    type Error = TensorError;
    fn try_from(id: u32) -> Result<DType> {
        DType::from_id(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_removed_ids_are_rejected() {
        for id in 0..64u32 {
            match DType::from_id(id) {
                Ok(d) => assert_eq!(d.id(), id),
                Err(TensorError::RemovedType { .. }) => {
                    assert!(matches!(id, 4 | 5 | 31..=33 | 36..=38))
                }
                Err(TensorError::UnknownType { .. }) => assert!(id >= GGML_TYPE_COUNT),
                Err(e) => panic!("unexpected {e}"),
            }
        }
        assert_eq!(DType::ALL.len() as u32, GGML_TYPE_COUNT - 8);
    }

    #[test]
    fn row_size_checks_blocks() {
        assert_eq!(DType::Q4_K.row_size(512).unwrap(), 288);
        assert!(DType::Q4_K.row_size(100).is_err());
        assert_eq!(DType::F32.row_size(3).unwrap(), 12);
    }
}
