//! Tessera's CUDA backend (first part): the kernel sources, their NVRTC compilation to CUBIN
//! with an in-memory and on-disk cache, and the device probe that turns a machine without
//! CUDA into a typed error.
//!
//! # Design decisions
//!
//! - **Run-time loading.** [cudarc] is built with `dynamic-loading`: libcuda, libnvrtc and
//!   libcublas are opened when first used, so the crate builds on machines without a CUDA
//!   toolkit, and one binary runs on any machine with a driver. cudarc *panics* when a
//!   library is missing; every entry point here checks for the library first
//!   (`is_culib_present`, cached) and keeps `catch_unwind` as a backstop, so callers get a
//!   [`CudaError`], never a panic.
//! - **NVRTC to CUBIN, not PTX.** Kernels live in `.cu` files under `kernels/` (embedded in
//!   the binary), compiled at run time for the device's own `sm_XX` straight to CUBIN: PTX
//!   would go through the driver's JIT (about 0.1 s per module) on every start. Compiled
//!   modules are cached in memory and on disk, keyed by a hash of the source, the options, the
//!   NVRTC version and the architecture ([`nvrtc::Compiler`]).
//! - **No headers.** NVRTC 13 ships no `cuda_fp16.h`; the sources convert halves with inline
//!   PTX (`kernels/prelude.cuh`), so compiling needs nothing but libnvrtc (the PyPI wheel
//!   `nvidia-cuda-nvrtc` is enough, which is how CI compiles every kernel on machines without
//!   a GPU).
//! - **Behind a feature.** Without the `cuda` feature the crate carries only the kernel
//!   sources ([`kernels`]) and the error type; the workspace builds and tests without CUDA.
//!
//! - **Every op first, fast paths after.** [`CudaBackend`] runs every op of the model graphs
//!   through the strided kernels of `kernels/ops.cu`, which take each tensor as a descriptor
//!   (pointer, `ne`, `nb`, type) and so handle views, permutations and broadcasts without
//!   copies; weights of every type in the list are dequantized per element. These are
//!   the correctness baseline the test matrix checks (`cargo xtask test-matrix --backend
//!   cuda`). Fast paths (the matrix-vector kernels of `quant.cu` today) replace them where
//!   [`plan`] says, and `TESSERA_CUDA_PATHS` turns each off, so a GPU run can compare every
//!   path with the baseline.
//! - **The CPU backend's shape.** A type table ([`types`]) and a pure plan ([`plan`]) decide;
//!   kernels only implement. Both are plain functions of tensor descriptions, so they build
//!   and are tested without the feature and without a GPU; `supports_op` and the executor
//!   read the same plan, so what the backend claims and what it runs cannot drift apart.
//! - **One stream, resolved launches.** The backend owns a non-blocking stream (the legacy
//!   default stream cannot be captured into a CUDA graph); buffer copies are queued on it too,
//!   so they are ordered with the kernels. A graph is planned and resolved (functions,
//!   addresses, scratch) before its first launch; nothing is compiled, loaded or allocated
//!   between launches, and `graph_compute` does not wait for the GPU.

pub mod error;
pub mod kernels;
pub mod plan;
pub mod types;

#[cfg(feature = "cuda")]
mod backend;
#[cfg(feature = "cuda")]
pub mod buffer;
#[cfg(feature = "cuda")]
pub mod device;
#[cfg(feature = "cuda")]
mod exec;
#[cfg(feature = "cuda")]
mod gpu;
#[cfg(feature = "cuda")]
pub mod nvrtc;

#[cfg(feature = "cuda")]
pub use backend::{CudaBackend, CudaDevice};
pub use error::CudaError;
