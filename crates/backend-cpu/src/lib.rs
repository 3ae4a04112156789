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
pub mod sim;
mod simd;
mod tensor_ref;

pub use backend::{CpuBackend, CpuDevice};
pub use params::{ComputeParams, ThreadSync};
pub use pool::ThreadPool;
pub use sim::{SimBackend, SimDevice};
pub use simd::{has_vnni, kernel_family, SimdLevel};
pub use tensor_ref::TensorRef;

/// Whether llama.cpp's CPU backend, built for `level`, would repack a 2-D weight of type
/// `dtype` with `rows` rows into its CPU_REPACK buffer (its default on x86; `--no-repack`
/// turns it off). A model loader marks such weights
/// [`Flags::REPACKED`](tessera_tensor::graph::Flags::REPACKED) so their products follow the
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
