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
pub use repack_buffer::{is_repacked, RepackBuffer, RepackBufferType, REPACK_NAME};
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

/// The bytes a repacked weight holds in the CPU's repacked buffer ([`RepackBufferType`]),
/// from its bytes in the file's layout (`rows` rows of `k` values of `dtype`): `Some` with the
/// rows rearranged where the CPU backend keeps that type's repacked weights in a layout of
/// its own (Q4_0, IQ4_NL and MXFP4: eight rows interleaved, as llama.cpp's `block_q4_0x8` /
/// `block_iq4_nlx8` / `block_mxfp4x8`, so a group of eight rows is one memory stream), `None`
/// for other types or where `bytes` is not `rows` whole rows of a multiple of eight. Only
/// matrix products read a rearranged weight (an embedding's GET_ROWS reads the file's layout).
pub fn repack_layout(
    dtype: tessera_tensor::DType,
    bytes: &[u8],
    rows: usize,
    k: usize,
) -> Option<Vec<u8>> {
    #[cfg(target_arch = "x86_64")]
    {
        if !matmul::interleaved::applies(dtype) {
            return None;
        }
        matmul::interleaved::interleave(dtype, bytes, rows, k)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (dtype, bytes, rows, k);
        None
    }
}

/// The file's layout back from [`repack_layout`]'s (same conditions).
pub fn plain_layout(
    dtype: tessera_tensor::DType,
    bytes: &[u8],
    rows: usize,
    k: usize,
) -> Option<Vec<u8>> {
    #[cfg(target_arch = "x86_64")]
    {
        if !matmul::interleaved::applies(dtype) {
            return None;
        }
        matmul::interleaved::deinterleave(dtype, bytes, rows, k)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (dtype, bytes, rows, k);
        None
    }
}

/// Whether [`repack_layout`] rearranges repacked weights of `dtype`.
pub fn repack_rearranges(dtype: tessera_tensor::DType) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        matmul::interleaved::applies(dtype)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = dtype;
        false
    }
}

/// Whether llama.cpp's CPU backend, built for `level`, would repack a 2-D weight of type
/// `dtype` with `rows` rows into its CPU_REPACK buffer (its default on x86; `--no-repack`
/// turns it off): the rule of [`RepackBufferType`], whose weights' products follow the
/// repacked kernels' arithmetic. False off x86.
pub fn repack_applies(dtype: tessera_tensor::DType, rows: usize, level: SimdLevel) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        matmul::repack::applies(dtype, rows, level)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (dtype, rows, level);
        false
    }
}
