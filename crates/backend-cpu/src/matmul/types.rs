//! The type table: one row per weight type, naming every kernel the type has at every level.
//!
//! [`row`] is the one place that says what a type can do: its activation type (ggml's
//! `vec_dot_type`), its scalar dot (ggml's generic kernel), its AVX2 and AVX-512 dots, its
//! AVX-512 VNNI tiles and row loops, whether the K-quant tiled path has a layout for it, and
//! whether (and from which level) llama.cpp repacks it. The kernel modules under `arch/` only
//! implement; [`super::plan`] and `mul_mat` only read this table. Adding a type's fast path
//! means writing its kernel and naming it in the type's row here.
//!
//! A type without a row is multiplied by dequantizing tiles of its rows to f32 (`Dequant`).

use super::VecDot;
#[cfg(target_arch = "x86_64")]
use super::{TileFn, VecDot4};
use tessera_tensor::DType;

use super::arch::generic::{lowbit, scalar};
#[cfg(target_arch = "x86_64")]
use super::arch::x86;
#[cfg(target_arch = "x86_64")]
use super::layouts::Layout;
#[cfg(target_arch = "x86_64")]
use super::layouts::Shape;
#[cfg(target_arch = "x86_64")]
use crate::SimdLevel::{Avx2, Avx512};
#[cfg(target_arch = "x86_64")]
use x86::{avx2, avx2_k, avx512, dot_bf16 as bf16, dot_f32, interleaved as il, repack, vnni_few};
#[cfg(target_arch = "x86_64")]
use x86::{vnni_matvec::Matvec, vnni_tile};

/// What one weight type has (module docs).
pub(super) struct TypeRow {
    /// The type.
    pub dtype: DType,
    /// The activation type its dots read (ggml's `vec_dot_type`).
    pub vdt: DType,
    /// ggml's generic dot: the scalar level and the yardstick of the others.
    pub scalar: VecDot,
    /// The x86 kernels.
    #[cfg(target_arch = "x86_64")]
    pub x86: X86,
}

/// The dots of one level: one row, four rows, a register tile.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
pub(super) struct Dots {
    /// One weight row by one activation row.
    pub one: VecDot,
    /// One weight row by four activation rows (the same bits as `one` for each).
    pub four: Option<VecDot4>,
    /// Four weight rows by four activation rows (the same bits as `one` for each).
    pub tile: Option<TileFn>,
}

#[cfg(target_arch = "x86_64")]
impl Dots {
    /// One-row and four-row kernels, no tile.
    const fn rows(one: VecDot, four: VecDot4) -> Option<Dots> {
        Some(Dots { one, four: Some(four), tile: None })
    }
}

/// A type's x86 kernels, by level.
#[cfg(target_arch = "x86_64")]
pub(super) struct X86 {
    /// AVX2 (+FMA, F16C): llama.cpp's x86 order, also used at AVX-512 unless `avx512` is set.
    pub avx2: Option<Dots>,
    /// AVX-512 F/BW/VL/DQ (the float types, whose llama.cpp order changes with the width).
    pub avx512: Option<Dots>,
    /// AVX-512 with the BF16 instructions, where they change the kernel (BF16).
    pub avx512_bf16: Option<Dots>,
    /// AVX-512 VNNI: the 4x8 register tile (the AVX2 one-row bits).
    pub vnni_tile: Option<TileFn>,
    /// AVX-512 VNNI: the matrix-vector kernel (the AVX2 one-row bits).
    pub vnni_matvec: Option<x86::vnni_matvec::Matvec>,
    /// AVX-512 VNNI: the few-rows loops (the AVX2 one-row bits).
    pub vnni_few: Option<x86::vnni_few::FewKernels>,
    /// The K-quant tiled path's layout (batches of 8+ rows, AVX2 and VNNI).
    pub tiled: Option<super::layouts::Layout>,
    /// llama.cpp's repacking of the type, where it has one.
    pub repack: Option<Repack>,
}

#[cfg(target_arch = "x86_64")]
impl X86 {
    /// No kernels: the AVX2 level takes the scalar dot.
    const NONE: X86 = X86 {
        avx2: None,
        avx512: None,
        avx512_bf16: None,
        vnni_tile: None,
        vnni_matvec: None,
        vnni_few: None,
        tiled: None,
        repack: None,
    };
}

/// How llama.cpp repacks a type (`ggml_repack_get_optimal_repack_type` on x86) and how
/// Tessera multiplies the repacked weights.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
pub(super) struct Repack {
    /// The lowest level llama.cpp repacks the type at.
    pub level: crate::SimdLevel,
    /// The repacked GEMV and GEMM chains, one row against one row (the reference the
    /// interleaved kernels are tested against).
    #[cfg_attr(not(test), allow(dead_code))]
    pub chains: (VecDot, VecDot),
    /// The interleaved layout.
    pub shape: super::layouts::Shape,
    /// The group kernels over interleaved rows.
    pub groups: x86::interleaved::Groups,
}

/// The row of `dtype`, if it has dot kernels (else it is dequantized).
pub(super) fn row(dtype: DType) -> Option<&'static TypeRow> {
    TABLE.iter().find(|r| r.dtype == dtype)
}

/// A grid i-quant or ternary type: ggml's generic and AVX2 integer kernels ([`lowbit`]),
/// `$i` the type's index in `lowbit::TYPES` (the kernels' const parameter; `lowbit`'s tests
/// catch a wrong one, as the kernel then reads another type's blocks), `$tiled` its layout
/// on the tiled path (the grid i-quants have one; the ternary types not).
macro_rules! lowbit {
    ($dtype:ident, $i:literal, $tiled:expr) => {
        TypeRow {
            dtype: DType::$dtype,
            vdt: DType::Q8_K,
            scalar: lowbit::generic::<$i>,
            #[cfg(target_arch = "x86_64")]
            x86: X86 {
                avx2: Some(Dots { one: x86::lowbit::avx2::<$i>, four: None, tile: None }),
                tiled: $tiled,
                ..X86::NONE
            },
        }
    };
}

/// Every type with dot kernels, family by family (module docs).
static TABLE: &[TypeRow] = &[
    TypeRow {
        dtype: DType::F32,
        vdt: DType::F32,
        scalar: scalar::f32_f32,
        #[cfg(target_arch = "x86_64")]
        x86: X86 {
            avx2: Some(Dots { one: dot_f32::vec_dot_avx2, four: None, tile: None }),
            avx512: Some(Dots { one: dot_f32::vec_dot_avx512, four: None, tile: None }),
            ..X86::NONE
        },
    },
    TypeRow {
        dtype: DType::F16,
        vdt: DType::F16,
        scalar: scalar::f16_f16,
        #[cfg(target_arch = "x86_64")]
        x86: X86 {
            avx2: Dots::rows(avx2::f16_f16, avx2::f16_f16_n::<4>),
            avx512: Dots::rows(avx512::f16_f16, avx512::f16_f16_n::<4>),
            ..X86::NONE
        },
    },
    TypeRow {
        dtype: DType::Q4_0,
        vdt: DType::Q8_0,
        scalar: scalar::rows::<tessera_tensor::blocks::BlockQ4_0>,
        #[cfg(target_arch = "x86_64")]
        x86: X86 {
            avx2: Some(Dots {
                one: avx2::q4_0_q8_0,
                four: Some(avx2::q4_0_q8_0_n::<4>),
                tile: Some(avx2::q4_0_t44),
            }),
            vnni_tile: Some(vnni_tile::q4_0_t48),
            vnni_matvec: Some(Matvec::signed(8, x86::vnni_matvec::q4_0_mv)),
            vnni_few: Some(vnni_few::FewKernels::Signed(vnni_few::q4_0_few_at)),
            repack: Some(Repack {
                level: Avx2,
                chains: (repack::q4_0_repacked, repack::q4_0_repacked),
                shape: Shape::Q4_0,
                groups: il::Groups::Biased { pick: il::q4_0_group, bias: [Some(8), Some(8)] },
            }),
            ..X86::NONE
        },
    },
    TypeRow {
        dtype: DType::Q4_1,
        vdt: DType::Q8_1,
        scalar: scalar::rows::<tessera_tensor::blocks::BlockQ4_1>,
        #[cfg(target_arch = "x86_64")]
        x86: X86 {
            avx2: Some(Dots {
                one: avx2::q4_1_q8_1,
                four: Some(avx2::q4_1_q8_1_n::<4>),
                tile: Some(avx2::q4_1_t44),
            }),
            vnni_matvec: Some(Matvec::q8_1(x86::vnni_matvec::q4_1_mv)),
            vnni_few: Some(vnni_few::FewKernels::Q8_1(vnni_few::q4_1_few_at)),
            ..X86::NONE
        },
    },
    TypeRow {
        dtype: DType::Q5_0,
        vdt: DType::Q8_0,
        scalar: scalar::rows::<tessera_tensor::blocks::BlockQ5_0>,
        #[cfg(target_arch = "x86_64")]
        x86: X86 {
            avx2: Some(Dots {
                one: avx2::q5_0_q8_0,
                four: Some(avx2::q5_0_q8_0_n::<4>),
                tile: Some(avx2::q5_0_t44),
            }),
            vnni_tile: Some(vnni_tile::q5_0_t48),
            vnni_matvec: Some(Matvec::signed(16, x86::vnni_matvec::q5_0_mv)),
            vnni_few: Some(vnni_few::FewKernels::Signed(vnni_few::q5_0_few_at)),
            ..X86::NONE
        },
    },
    TypeRow {
        dtype: DType::Q5_1,
        vdt: DType::Q8_1,
        scalar: scalar::rows::<tessera_tensor::blocks::BlockQ5_1>,
        #[cfg(target_arch = "x86_64")]
        x86: X86 {
            avx2: Some(Dots {
                one: avx2::q5_1_q8_1,
                four: Some(avx2::q5_1_q8_1_n::<4>),
                tile: Some(avx2::q5_1_t44),
            }),
            vnni_matvec: Some(Matvec::q8_1(x86::vnni_matvec::q5_1_mv)),
            vnni_few: Some(vnni_few::FewKernels::Q8_1(vnni_few::q5_1_few_at)),
            ..X86::NONE
        },
    },
    TypeRow {
        dtype: DType::Q8_0,
        vdt: DType::Q8_0,
        scalar: scalar::rows::<tessera_tensor::blocks::BlockQ8_0>,
        #[cfg(target_arch = "x86_64")]
        x86: X86 {
            avx2: Some(Dots {
                one: avx2::q8_0_q8_0,
                four: Some(avx2::q8_0_q8_0_n::<4>),
                tile: Some(avx2::q8_0_t44),
            }),
            vnni_tile: Some(vnni_tile::q8_0_t48),
            // The sign trick: unbiased.
            vnni_matvec: Some(Matvec::signed(0, x86::vnni_matvec::q8_0_mv)),
            vnni_few: Some(vnni_few::FewKernels::Signed(vnni_few::q8_0_few_at)),
            ..X86::NONE
        },
    },
    TypeRow {
        dtype: DType::Q2_K,
        vdt: DType::Q8_K,
        scalar: scalar::rows::<tessera_tensor::blocks::BlockQ2K>,
        #[cfg(target_arch = "x86_64")]
        x86: X86 {
            avx2: Dots::rows(avx2_k::q2_k, avx2_k::q2_k_n::<4>),
            tiled: Some(Layout { nsub: 16, mins: true, signed: false }),
            repack: Some(Repack {
                level: Avx512,
                chains: (repack::q2_k_repacked::<false>, repack::q2_k_repacked::<true>),
                shape: Shape::Q2_K,
                groups: il::Groups::Chains(x86::interleaved_q2k::kernel),
            }),
            ..X86::NONE
        },
    },
    TypeRow {
        dtype: DType::Q3_K,
        vdt: DType::Q8_K,
        scalar: scalar::rows::<tessera_tensor::blocks::BlockQ3K>,
        #[cfg(target_arch = "x86_64")]
        x86: X86 {
            avx2: Dots::rows(avx2_k::q3_k, avx2_k::q3_k_n::<4>),
            tiled: Some(Layout { nsub: 16, mins: false, signed: false }),
            ..X86::NONE
        },
    },
    TypeRow {
        dtype: DType::Q4_K,
        vdt: DType::Q8_K,
        scalar: scalar::rows::<tessera_tensor::blocks::BlockQ4K>,
        #[cfg(target_arch = "x86_64")]
        x86: X86 {
            avx2: Dots::rows(avx2_k::q4_k, avx2_k::q4_k_n::<4>),
            tiled: Some(Layout { nsub: 8, mins: true, signed: false }),
            repack: Some(Repack {
                level: Avx2,
                chains: (repack::q4_k_repacked::<false>, repack::q4_k_repacked::<true>),
                shape: Shape::Q4_K,
                groups: il::Groups::Chains(x86::interleaved_k::kernel),
            }),
            ..X86::NONE
        },
    },
    TypeRow {
        dtype: DType::Q5_K,
        vdt: DType::Q8_K,
        scalar: scalar::rows::<tessera_tensor::blocks::BlockQ5K>,
        #[cfg(target_arch = "x86_64")]
        x86: X86 {
            avx2: Dots::rows(avx2_k::q5_k, avx2_k::q5_k_n::<4>),
            tiled: Some(Layout { nsub: 8, mins: true, signed: false }),
            ..X86::NONE
        },
    },
    TypeRow {
        dtype: DType::Q6_K,
        vdt: DType::Q8_K,
        scalar: scalar::rows::<tessera_tensor::blocks::BlockQ6K>,
        #[cfg(target_arch = "x86_64")]
        x86: X86 {
            avx2: Dots::rows(avx2_k::q6_k, avx2_k::q6_k_n::<4>),
            tiled: Some(Layout { nsub: 16, mins: false, signed: false }),
            ..X86::NONE
        },
    },
    lowbit!(IQ2_XXS, 0, Some(Layout { nsub: 8, mins: false, signed: true })),
    lowbit!(IQ2_XS, 1, Some(Layout { nsub: 16, mins: false, signed: true })),
    lowbit!(IQ2_S, 2, Some(Layout { nsub: 16, mins: false, signed: true })),
    lowbit!(IQ3_XXS, 3, Some(Layout { nsub: 8, mins: false, signed: true })),
    lowbit!(IQ3_S, 4, Some(Layout { nsub: 8, mins: false, signed: true })),
    lowbit!(IQ1_S, 5, Some(Layout { nsub: 8, mins: false, signed: true })),
    lowbit!(IQ1_M, 6, Some(Layout { nsub: 16, mins: false, signed: true })),
    lowbit!(TQ1_0, 7, None),
    lowbit!(TQ2_0, 8, None),
    TypeRow {
        dtype: DType::IQ4_NL,
        vdt: DType::Q8_0,
        scalar: scalar::rows::<tessera_tensor::blocks::BlockIQ4NL>,
        #[cfg(target_arch = "x86_64")]
        x86: X86 {
            avx2: Some(Dots {
                one: avx2::iq4_nl_q8_0,
                four: Some(avx2::iq4_nl_q8_0_n::<4>),
                tile: Some(avx2::iq4_nl_t44),
            }),
            vnni_tile: Some(vnni_tile::iq4_nl_t48),
            vnni_matvec: Some(Matvec::signed(128, x86::vnni_matvec::iq4_nl_mv)),
            vnni_few: Some(vnni_few::FewKernels::Signed(vnni_few::iq4_nl_few_at)),
            repack: Some(Repack {
                level: Avx2,
                chains: (repack::iq4_nl_repacked, repack::iq4_nl_repacked),
                shape: Shape::Q4_0,
                // AVX2 takes the signed values by the sign trick, unbiased.
                groups: il::Groups::Biased { pick: il::iq4_nl_group, bias: [None, Some(128)] },
            }),
            ..X86::NONE
        },
    },
    TypeRow {
        dtype: DType::IQ4_XS,
        vdt: DType::Q8_K,
        scalar: scalar::rows::<tessera_tensor::blocks::BlockIQ4XS>,
        #[cfg(target_arch = "x86_64")]
        x86: X86 {
            avx2: Dots::rows(avx2_k::iq4_xs, avx2_k::iq4_xs_n::<4>),
            tiled: Some(Layout { nsub: 8, mins: false, signed: true }),
            ..X86::NONE
        },
    },
    TypeRow {
        dtype: DType::BF16,
        vdt: DType::BF16,
        scalar: scalar::bf16_bf16,
        #[cfg(target_arch = "x86_64")]
        x86: X86 {
            avx2: Dots::rows(bf16::tiny1::<{ bf16::AVX2 }>, bf16::tiny::<{ bf16::AVX2 }, 4>),
            avx512: Dots::rows(bf16::tiny1::<{ bf16::AVX512 }>, bf16::tiny::<{ bf16::AVX512 }, 4>),
            avx512_bf16: Dots::rows(
                bf16::tiny1::<{ bf16::AVX512_BF16 }>,
                bf16::tiny::<{ bf16::AVX512_BF16 }, 4>,
            ),
            ..X86::NONE
        },
    },
    TypeRow {
        dtype: DType::MXFP4,
        vdt: DType::Q8_0,
        scalar: scalar::rows::<tessera_tensor::blocks::BlockMXFP4>,
        #[cfg(target_arch = "x86_64")]
        x86: X86 {
            avx2: Dots::rows(avx2::mxfp4_q8_0, avx2::mxfp4_q8_0_n::<4>),
            repack: Some(Repack {
                level: Avx2,
                chains: (repack::mxfp4_repacked, repack::mxfp4_repacked),
                shape: Shape::MXFP4,
                groups: il::Groups::Biased { pick: il::mxfp4_group, bias: [None, Some(128)] },
            }),
            ..X86::NONE
        },
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    /// The table's own invariants: one row per type; the activation types ggml pairs with
    /// each family; kernel sets that only make sense together.
    #[test]
    fn rows_are_consistent() {
        for (i, r) in TABLE.iter().enumerate() {
            assert!(TABLE[..i].iter().all(|o| o.dtype != r.dtype), "{} twice", r.dtype);
            let want = match r.dtype.block_size() {
                1 => r.dtype,
                256 => DType::Q8_K,
                _ if matches!(r.dtype, DType::Q4_1 | DType::Q5_1) => DType::Q8_1,
                _ => DType::Q8_0,
            };
            assert_eq!(r.vdt, want, "{}: activation type", r.dtype);
            #[cfg(target_arch = "x86_64")]
            {
                let x = &r.x86;
                assert!(x.avx2.is_some(), "{}: every table type has an AVX2 dot", r.dtype);
                assert!(x.vnni_few.is_none() || x.vnni_matvec.is_some(), "{}", r.dtype);
                assert!(x.vnni_tile.is_none() || r.vdt == DType::Q8_0, "{}", r.dtype);
                if x.tiled.is_some() {
                    assert_eq!(r.vdt, DType::Q8_K, "{}: the tiled path reads Q8_K", r.dtype);
                }
                if let Some(rp) = x.repack {
                    assert_eq!(rp.shape.block_bytes(), r.dtype.type_size(), "{}", r.dtype);
                    assert_eq!(rp.shape.block_values(), r.dtype.block_size(), "{}", r.dtype);
                }
            }
        }
    }
}
