//! Portable kernels: ggml's generic dot products, the scalar level's arithmetic.

pub(in crate::matmul) mod lowbit;
pub(in crate::matmul) mod scalar;
