//! The `gemm` path's cuBLAS call: queued among the kernels as a launch whose entry is
//! [`ENTRY`] and whose arguments are its operands, so resolving, ordering and the logs treat
//! it as one more launch.
//!
//! ggml's product is `dst[n][m] = Σ_k w[m][k] · x[n][k]` with rows contiguous; in cuBLAS's
//! column-major terms the weights are a `k × m` matrix (leading dimension `k`), the activations
//! `k × n`, the destination `m × n`: `dst = wᵀ · x`, llama.cpp's `cublasGemmEx(OP_T, OP_N,
//! m, n, k, ...)`.

use super::args::Arg;
use crate::gpu::Gpu;
use crate::CudaError;
use cudarc::cublas::{result, sys};
use std::ffi::c_void;

/// The pseudo-entry of a cuBLAS product in a launch list.
pub(crate) const ENTRY: &str = "cublas_gemm_ex";

/// The arguments of a product, in [`call`]'s order: the F16 weights (`k × m`, leading
/// dimension `k`), the F16 activations (`k × n`), the F32 destination (`m × n`, leading
/// dimension `ldc`).
pub(crate) fn args(w16: u64, x16: u64, dst: u64, [m, n, k, ldc]: [usize; 4]) -> Vec<Arg> {
    let i = |v: usize| Arg::I64(v as i64);
    vec![Arg::Ptr(w16), Arg::Ptr(x16), Arg::Ptr(dst), i(m), i(n), i(k), i(ldc)]
}

/// Queues the product described by `a` (made by [`args`]) on the GPU's stream.
pub(crate) fn call(gpu: &Gpu, a: &[Arg]) -> Result<(), CudaError> {
    let blas = gpu
        .blas
        .as_ref()
        .ok_or_else(|| CudaError::Driver("a cuBLAS product planned without cuBLAS".into()))?;
    let (ptr, int) = (
        |i: usize| match a.get(i) {
            Some(Arg::Ptr(p)) => Ok(*p),
            _ => Err(CudaError::Driver(format!("{ENTRY}: argument {i} is not an address"))),
        },
        |i: usize| match a.get(i) {
            Some(Arg::I64(v)) => i32::try_from(*v)
                .map_err(|_| CudaError::Driver(format!("{ENTRY}: argument {i} = {v} too large"))),
            _ => Err(CudaError::Driver(format!("{ENTRY}: argument {i} is not an integer"))),
        },
    );
    let (w, x, dst) = (ptr(0)?, ptr(1)?, ptr(2)?);
    let (m, n, k, ldc) = (int(3)?, int(4)?, int(5)?, int(6)?);
    let (alpha, beta) = (1.0f32, 0.0f32);
    gpu.bind()?;
    // SAFETY: the three addresses are inside buffers of this device or its scratch arena,
    // sized by the plan for these dimensions (w: k·m halves, x: k·n halves, dst: ldc·n
    // floats); alpha and beta are host scalars that outlive the call (cuBLAS reads them before
    // returning in host pointer mode, the default); the handle is bound to the stream the
    // kernels around it are queued on.
    unsafe {
        result::gemm_ex(
            *blas.handle(),
            sys::cublasOperation_t::CUBLAS_OP_T,
            sys::cublasOperation_t::CUBLAS_OP_N,
            m,
            n,
            k,
            (&alpha as *const f32).cast::<c_void>(),
            w as usize as *const c_void,
            sys::cudaDataType::CUDA_R_16F,
            k,
            x as usize as *const c_void,
            sys::cudaDataType::CUDA_R_16F,
            k,
            (&beta as *const f32).cast::<c_void>(),
            dst as usize as *mut c_void,
            sys::cudaDataType::CUDA_R_32F,
            ldc,
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
    .map_err(|e| CudaError::Driver(format!("{ENTRY} (m {m}, n {n}, k {k}): {e:?}")))
}
