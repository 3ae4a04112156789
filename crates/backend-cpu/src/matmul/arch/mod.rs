//! The instruction-set bodies of the matrix product, one folder per architecture (as
//! ggml-cpu's `arch/`): [`generic`] holds the portable kernels (the scalar level and the
//! yardstick the others are tested against), `x86` the AVX2, AVX-512 and AVX-512 VNNI ones.
//!
//! What a folder holds is arithmetic only: which kernel a product takes is decided by
//! [`super::plan`] and the type table ([`super::types`]), and the loops that carry a path out
//! (chunks, few rows, bands) live beside them in `matmul/`.

pub(super) mod generic;
#[cfg(target_arch = "x86_64")]
pub(super) mod x86;
