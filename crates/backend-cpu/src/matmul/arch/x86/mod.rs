//! x86-64 kernels: AVX2 (+FMA, F16C), AVX-512 (F/BW/VL/DQ) and AVX-512 VNNI bodies.
//!
//! [`avx2`] also holds the helpers every x86 kernel shares (horizontal sums, loads, the
//! `maddubs` dot, the 4-bit lookup tables).

pub(in crate::matmul) mod avx2;
pub(in crate::matmul) mod avx2_k;
pub(in crate::matmul) mod avx512;
pub(in crate::matmul) mod convert;
pub(in crate::matmul) mod dot_bf16;
pub(in crate::matmul) mod dot_f16;
pub(in crate::matmul) mod dot_f32;
pub(in crate::matmul) mod interleaved;
pub(in crate::matmul) mod interleaved_k;
pub(in crate::matmul) mod interleaved_q2k;
pub(in crate::matmul) mod kquant_tiled;
pub(in crate::matmul) mod lowbit;
pub(crate) mod repack;
pub(in crate::matmul) mod vnni_few;
pub(in crate::matmul) mod vnni_matvec;
pub(in crate::matmul) mod vnni_tile;
