//! # tessera-backend-cpu
//!
//! The CPU backend: a persistent thread pool that walks a graph's nodes with a barrier between
//! nodes, each node split across threads by rows or chunks; kernels for every op of the model
//! graphs; matrix multiplication with the activations converted once to the weight's dot type
//! (Q8_0/Q8_1/Q8_K, F16, BF16) as ggml does; SIMD chosen at run time (AVX2, AVX-512) with a
//! scalar path always present (`TESSERA_SIMD` forces a lower level).

#![deny(missing_docs)]

mod backend;
mod matmul;
mod ops;
mod params;
pub mod pool;
mod repack_buffer;
pub mod sim;
mod simd;
mod tensor_ref;

pub use backend::{CpuBackend, CpuDevice};
pub use matmul::plan;
pub use params::{ComputeParams, ThreadSync};
pub use pool::ThreadPool;
pub use repack_buffer::{
    is_repacked, plain_layout, repack_applies, repack_layout, repack_rearranges, RepackBuffer,
    RepackBufferType, REPACK_NAME,
};
pub use sim::{SimBackend, SimDevice};
pub use simd::{has_avx512_bf16, has_vnni, kernel_family, SimdLevel};
pub use tensor_ref::TensorRef;

/// Entry points for the criterion benches (`benches/`), which time kernels without a graph.
/// Not a stable API: the backend's kernels are reached through [`CpuBackend`] otherwise.
#[doc(hidden)]
pub mod bench {
    use crate::{ComputeParams, TensorRef};

    /// Bytes of work buffer [`mul_mat`] needs.
    pub fn mul_mat_work_size(src0: &TensorRef, src1: &TensorRef) -> usize {
        crate::matmul::work_size(src0, src1)
    }

    /// This thread's share of MUL_MAT (called by every thread of `p` at once).
    pub fn mul_mat(p: &ComputeParams, dst: &TensorRef, src0: &TensorRef, src1: &TensorRef) {
        crate::matmul::mul_mat(p, dst, src0, src1)
    }
}
