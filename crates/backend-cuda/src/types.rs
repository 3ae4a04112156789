//! The CUDA type table: one row per type the backend knows, saying what the kernels can do with
//! it (the CPU backend's `matmul/types.rs` is the model). The plan ([`crate::plan`]) and the
//! executor read it; nothing else lists types.
//!
//! The kernels' own constants (`T_*` ids and the block sizes in `kernels/types.cuh`, the
//! `*_BYTES` macros of `kernels/prelude.cuh`) are checked against `tessera_tensor`'s [`DType`]
//! by a test that needs no GPU, as is every kernel name a row gives.

use tessera_tensor::DType::{self, *};

/// How the generic kernels treat a type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// One value per element (`F32`, `F16`, `BF16`): read and written by every generic kernel.
    Float,
    /// ggml's blocks: read by `ld_row` (dequantized per element), written only where
    /// [`TypeRow::quantize`] says.
    Block,
    /// Integer indices (GET_ROWS, SET_ROWS, ROPE positions).
    Index,
}

/// What the kernels do with one type (see the module docs).
#[derive(Debug, Clone, Copy)]
pub struct TypeRow {
    /// The type.
    pub dtype: DType,
    /// Its id macro in `kernels/types.cuh` (`T_Q4_0`).
    pub cuh: &'static str,
    /// How the generic kernels treat it.
    pub class: Class,
    /// `quantize_block` writes it (CPY and SET_ROWS from floats into it; rows a multiple of
    /// the block).
    pub quantize: bool,
    /// The int8 matrix-vector kernel for 1 to 8 columns (activations quantized to Q8_1 by
    /// `quantize_q8_1`).
    pub mmvq: Option<&'static str>,
    /// The float matrix-vector kernel (1 to 8 f32 columns) of a float type.
    pub mmv: Option<&'static str>,
    /// MUL_MAT_ID's int8 expert kernel (`mmvq_id_*`), beside [`mmvq`](Self::mmvq).
    pub mmvq_id: Option<&'static str>,
    /// The fused gate/up products and gated unit (`mmvq_glu_*`), beside [`mmvq`](Self::mmvq).
    pub mmvq_glu: Option<&'static str>,
    /// Up to three products of one activation column in one launch (`mmvq_group_*`, the
    /// ProductGroup window), beside [`mmvq`](Self::mmvq).
    pub mmvq_group: Option<&'static str>,
    /// The int8 tensor-core kernel for batches of columns (`mmq_*`, sm_80+), beside
    /// [`mmvq`](Self::mmvq): the same Q8_1 activations.
    pub mmq: Option<&'static str>,
    /// MUL_MAT_ID's int8 tensor-core kernel for batches (`mmq_id_*`), beside [`mmq`](Self::mmq).
    pub mmq_id: Option<&'static str>,
    /// The alignment (bytes) the int8 matrix-vector kernels' block reads assume of every block
    /// start (`ld_w32`: 2, `ld_a32`: 4, `ld_a64`: 8, MXFP4's byte reads: 1): a divisor of the
    /// block size, so a weight whose address and row (and expert) strides are multiples of it
    /// has every block aligned; the executor checks that before it launches them.
    pub load_align: usize,
}

const fn row(dtype: DType, cuh: &'static str, class: Class) -> TypeRow {
    TypeRow {
        dtype,
        cuh,
        class,
        quantize: false,
        mmvq: None,
        mmv: None,
        mmvq_id: None,
        mmvq_glu: None,
        mmvq_group: None,
        mmq: None,
        mmq_id: None,
        load_align: 2,
    }
}

const fn block(dtype: DType, cuh: &'static str) -> TypeRow {
    row(dtype, cuh, Class::Block)
}

/// Every type the CUDA backend knows (see the module docs).
pub const TYPES: &[TypeRow] = &[
    TypeRow { mmv: Some("mmv_f32"), ..row(F32, "T_F32", Class::Float) },
    TypeRow { mmv: Some("mmv_f16"), ..row(F16, "T_F16", Class::Float) },
    TypeRow { mmv: Some("mmv_bf16"), ..row(BF16, "T_BF16", Class::Float) },
    TypeRow {
        quantize: true,
        mmvq: Some("mmvq_q4_0"),
        mmvq_id: Some("mmvq_id_q4_0"),
        mmvq_glu: Some("mmvq_glu_q4_0"),
        mmvq_group: Some("mmvq_group_q4_0"),
        mmq: Some("mmq_q4_0"),
        mmq_id: Some("mmq_id_q4_0"),
        ..block(Q4_0, "T_Q4_0")
    },
    TypeRow {
        quantize: true,
        mmvq: Some("mmvq_q4_1"),
        mmvq_id: Some("mmvq_id_q4_1"),
        mmvq_glu: Some("mmvq_glu_q4_1"),
        mmvq_group: Some("mmvq_group_q4_1"),
        mmq: Some("mmq_q4_1"),
        mmq_id: Some("mmq_id_q4_1"),
        load_align: 4,
        ..block(Q4_1, "T_Q4_1")
    },
    TypeRow {
        quantize: true,
        mmvq: Some("mmvq_q5_0"),
        mmvq_id: Some("mmvq_id_q5_0"),
        mmvq_glu: Some("mmvq_glu_q5_0"),
        mmvq_group: Some("mmvq_group_q5_0"),
        mmq: Some("mmq_q5_0"),
        mmq_id: Some("mmq_id_q5_0"),
        ..block(Q5_0, "T_Q5_0")
    },
    TypeRow {
        quantize: true,
        mmvq: Some("mmvq_q5_1"),
        mmvq_id: Some("mmvq_id_q5_1"),
        mmvq_glu: Some("mmvq_glu_q5_1"),
        mmvq_group: Some("mmvq_group_q5_1"),
        mmq: Some("mmq_q5_1"),
        mmq_id: Some("mmq_id_q5_1"),
        load_align: 4,
        ..block(Q5_1, "T_Q5_1")
    },
    TypeRow {
        quantize: true,
        mmvq: Some("mmvq_q8_0"),
        mmvq_id: Some("mmvq_id_q8_0"),
        mmvq_glu: Some("mmvq_glu_q8_0"),
        mmvq_group: Some("mmvq_group_q8_0"),
        mmq: Some("mmq_q8_0"),
        mmq_id: Some("mmq_id_q8_0"),
        ..block(Q8_0, "T_Q8_0")
    },
    TypeRow {
        mmvq: Some("mmvq_q2_k"),
        mmvq_id: Some("mmvq_id_q2_k"),
        mmvq_glu: Some("mmvq_glu_q2_k"),
        mmvq_group: Some("mmvq_group_q2_k"),
        mmq: Some("mmq_q2_k"),
        mmq_id: Some("mmq_id_q2_k"),
        load_align: 4,
        ..block(Q2_K, "T_Q2_K")
    },
    TypeRow {
        mmvq: Some("mmvq_q3_k"),
        mmvq_id: Some("mmvq_id_q3_k"),
        mmvq_glu: Some("mmvq_glu_q3_k"),
        mmvq_group: Some("mmvq_group_q3_k"),
        mmq: Some("mmq_q3_k"),
        mmq_id: Some("mmq_id_q3_k"),
        ..block(Q3_K, "T_Q3_K")
    },
    TypeRow {
        mmvq: Some("mmvq_q4_k"),
        mmvq_id: Some("mmvq_id_q4_k"),
        mmvq_glu: Some("mmvq_glu_q4_k"),
        mmvq_group: Some("mmvq_group_q4_k"),
        mmq: Some("mmq_q4_k"),
        mmq_id: Some("mmq_id_q4_k"),
        load_align: 8,
        ..block(Q4_K, "T_Q4_K")
    },
    TypeRow {
        mmvq: Some("mmvq_q5_k"),
        mmvq_id: Some("mmvq_id_q5_k"),
        mmvq_glu: Some("mmvq_glu_q5_k"),
        mmvq_group: Some("mmvq_group_q5_k"),
        mmq: Some("mmq_q5_k"),
        mmq_id: Some("mmq_id_q5_k"),
        load_align: 8,
        ..block(Q5_K, "T_Q5_K")
    },
    TypeRow {
        mmvq: Some("mmvq_q6_k"),
        mmvq_id: Some("mmvq_id_q6_k"),
        mmvq_glu: Some("mmvq_glu_q6_k"),
        mmvq_group: Some("mmvq_group_q6_k"),
        mmq: Some("mmq_q6_k"),
        mmq_id: Some("mmq_id_q6_k"),
        ..block(Q6_K, "T_Q6_K")
    },
    TypeRow {
        mmvq: Some("mmvq_iq4_nl"),
        mmvq_id: Some("mmvq_id_iq4_nl"),
        mmvq_glu: Some("mmvq_glu_iq4_nl"),
        mmvq_group: Some("mmvq_group_iq4_nl"),
        mmq: Some("mmq_iq4_nl"),
        mmq_id: Some("mmq_id_iq4_nl"),
        ..block(IQ4_NL, "T_IQ4_NL")
    },
    TypeRow {
        mmvq: Some("mmvq_iq4_xs"),
        mmvq_id: Some("mmvq_id_iq4_xs"),
        mmvq_glu: Some("mmvq_glu_iq4_xs"),
        mmvq_group: Some("mmvq_group_iq4_xs"),
        mmq: Some("mmq_iq4_xs"),
        mmq_id: Some("mmq_id_iq4_xs"),
        load_align: 4,
        ..block(IQ4_XS, "T_IQ4_XS")
    },
    TypeRow {
        mmvq: Some("mmvq_mxfp4"),
        mmvq_id: Some("mmvq_id_mxfp4"),
        mmvq_glu: Some("mmvq_glu_mxfp4"),
        mmvq_group: Some("mmvq_group_mxfp4"),
        mmq: Some("mmq_mxfp4"),
        mmq_id: Some("mmq_id_mxfp4"),
        load_align: 1,
        ..block(MXFP4, "T_MXFP4")
    },
    row(I32, "T_I32", Class::Index),
    row(I64, "T_I64", Class::Index),
];

/// The row of `dtype`, if the backend knows it.
pub fn row_of(dtype: DType) -> Option<&'static TypeRow> {
    TYPES.iter().find(|r| r.dtype == dtype)
}

/// Whether `dtype` is one of the float types.
pub fn is_float(dtype: DType) -> bool {
    row_of(dtype).is_some_and(|r| r.class == Class::Float)
}

/// Whether the generic kernels read `dtype` as values (floats and blocks).
pub fn readable(dtype: DType) -> bool {
    row_of(dtype).is_some_and(|r| r.class != Class::Index)
}

/// Whether `dtype` is a block type (copied as bytes between equal types).
pub fn is_block(dtype: DType) -> bool {
    row_of(dtype).is_some_and(|r| r.class == Class::Block)
}

/// Whether `quantize_block` writes `dtype`.
pub fn quantizable(dtype: DType) -> bool {
    row_of(dtype).is_some_and(|r| r.quantize)
}

/// Whether `dtype` is an index type.
pub fn is_index(dtype: DType) -> bool {
    row_of(dtype).is_some_and(|r| r.class == Class::Index)
}

/// Bytes of one Q8_1 block (`Q8_1_BYTES`): the activations of the int8 kernels.
pub const Q8_1_BYTES: usize = 36;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels;

    fn file(name: &str) -> &'static str {
        kernels::FILES.iter().find(|(n, _)| *n == name).map(|(_, s)| *s).unwrap()
    }

    /// `#define NAME value` in `text`.
    fn define(text: &str, name: &str) -> Option<usize> {
        text.lines().find_map(|l| {
            let rest = l.trim().strip_prefix("#define ")?.strip_prefix(name)?;
            rest.split_whitespace().next()?.parse().ok()
        })
    }

    /// One row per type; ids, block sizes and block bytes as the kernels spell them equal
    /// `DType`'s; every kernel a row names exists; the int8 kernels only for 32-value blocks.
    #[test]
    fn the_table_matches_dtype_and_the_kernels() {
        let types_cuh = file("types.cuh");
        let prelude = file("prelude.cuh");
        let entries: Vec<String> = kernels::all().iter().flat_map(|k| k.entry_points()).collect();
        for (i, r) in TYPES.iter().enumerate() {
            let t = r.dtype;
            assert!(TYPES[..i].iter().all(|o| o.dtype != t), "{t} twice");
            assert_eq!(define(types_cuh, r.cuh), Some(t.id() as usize), "{}", r.cuh);
            if r.class == Class::Block {
                // `case T_X: return deq_x(row + (i0 / QK) * BYTES, ...)` in ld_row.
                let case = types_cuh
                    .lines()
                    .find(|l| l.trim().starts_with(&format!("case {}:", r.cuh)))
                    .unwrap_or_else(|| panic!("ld_row has no case for {t}"));
                let want = format!("(i0 / {}) * {}", t.block_size(), t.type_size());
                assert!(case.contains(&want), "{t}: {case} (want {want})");
                let bytes = format!("{}_BYTES", t.name().to_uppercase());
                if let Some(b) = define(prelude, &bytes) {
                    assert_eq!(b, t.type_size(), "{bytes}");
                }
            }
            if r.quantize {
                assert_eq!(r.class, Class::Block, "{t}");
                let case = format!("case {}: return {};", r.cuh, t.type_size());
                assert!(types_cuh.contains(&case), "{t}: quantize_block's sizes lack `{case}`");
            }
            if r.mmvq.is_some() {
                let qk = t.block_size();
                assert!(
                    qk == 32 || qk == 256,
                    "{t}: the int8 kernels take 32- or 256-value blocks"
                );
                let a = r.load_align;
                assert!(a.is_power_of_two() && t.type_size() % a == 0, "{t}: load_align {a}");
                // The aligned reads are the type's own: ld_a64 for 8, ld_a32 for 4.
                let vdot = file("vecdotq.cuh");
                let name = format!("vdot_{}(", t.name().to_lowercase());
                let at = vdot.find(&name).unwrap_or_else(|| panic!("{t}: no {name}"));
                let end = vdot[at..].find("\n}").map_or(vdot.len(), |e| at + e);
                let body = &vdot[at..end];
                assert_eq!(body.contains("ld_a64("), a == 8, "{t}: load_align {a}, {name}");
                assert_eq!(body.contains("ld_a32("), a == 4, "{t}: load_align {a}, {name}");
            }
            if r.mmv.is_some() {
                assert_eq!(r.class, Class::Float, "{t}");
            }
            assert_eq!(r.mmq.is_some(), r.mmvq.is_some(), "{t}: MMQ beside MMVQ");
            assert_eq!(r.mmq_id.is_some(), r.mmq.is_some(), "{t}: MMQ_ID beside MMQ");
            assert_eq!(r.mmvq_group.is_some(), r.mmvq.is_some(), "{t}: a group beside MMVQ");
            let all = [r.mmvq, r.mmv, r.mmvq_id, r.mmvq_glu, r.mmvq_group, r.mmq, r.mmq_id];
            for k in all.into_iter().flatten() {
                assert!(entries.iter().any(|e| e == k), "{t}: no kernel {k}");
            }
        }
        assert_eq!(define(prelude, "Q8_1_BYTES"), Some(Q8_1_BYTES));
    }
}
