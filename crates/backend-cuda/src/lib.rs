//! Tessera's CUDA backend: the kernel sources, their NVRTC compilation to CUBIN with an
//! in-memory and on-disk cache, the device probe that turns a machine without CUDA into a
//! typed error, and [`CudaDevice`]/[`CudaBackend`] on the `tessera_backend` traits.
//!
//! # Where things are
//!
//! - `kernels/`: the sources ([`kernels`] embeds them; `build.rs` lists the folder, so no file
//!   can be left out, and each module's `__global__` names are read from its text). The `.cuh`
//!   headers go in front of every `.cu` module: `prelude.cuh` (halves to and from float by inline
//!   PTX, warp and block reductions), `types.cuh` (the `TT` tensor descriptor: pointer, `ne`,
//!   `nb`, type; element loads and stores; per-element dequantization of F16, BF16, Q4_0..Q8_0,
//!   Q2_K..Q6_K, IQ4_NL, IQ4_XS, MXFP4; ggml's reference quantizers for Q8_0, Q4_0, Q4_1, Q5_0,
//!   Q5_1), `vecdotq.cuh` (the int8 dot products) and `attn.cuh` (FLASH_ATTN_EXT's online softmax
//!   over KV cells). Modules: `ops.cu` (every op of the model graphs on tensors of any layout:
//!   views, permutations, broadcasts), `quant.cu` (the MMVQ kernels, 1-8 columns), `mmq.cu`
//!   (int8 tensor-core products of batches, `mma.sync` through inline PTX), `fattn_mma.cu` and
//!   `fattn_tile.cu` (prompt attention: f16 tensor cores, SIMT tiles), `fattn_vec.cu`
//!   (decode attention split over the KV cells, flash decoding) and `fused.cu` (kernels that run
//!   a window of nodes in one pass: RMS_NORM then MUL, with the unfused nodes' bits).
//!   `tests/host_kernels.rs` compiles `types.cuh` and `vecdotq.cuh` for the CPU with the
//!   machine's C++ compiler and checks them against ggml's without a GPU.
//! - Pure, without the feature (tested on any machine): [`types`], the CUDA type table (one row
//!   per type: class, `quantize_block`, its int8 and float matrix-vector kernels; a test checks
//!   it and the `.cuh` constants against `DType` and every kernel name against the sources),
//!   and [`plan`], what runs each node.
//! - With the `cuda` feature: `nvrtc` (compile, cache), `device` (`open` returns a context or a
//!   [`CudaError`], never cudarc's panic), `buffer` (device memory; copies queued on the GPU's
//!   stream and waited for), `backend` ([`CudaBackend`]: `graph_compute` hands the graph to the
//!   executor and returns without waiting; reads wait; `record_event` marks the stream) and
//!   `exec` (the executor: resolved launches, CUDA graphs).
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
//!   `nvidia-cuda-nvrtc` is enough, which is how CI compiles every kernel for sm_75/80/89/90
//!   on machines without a GPU).
//! - **Behind a feature.** Without the `cuda` feature the crate carries only the kernel
//!   sources ([`kernels`]), the type table, the plan and the error type; the workspace builds
//!   and tests without CUDA.
//! - **Every op first, fast paths after.** [`CudaBackend`] runs every op of the model graphs
//!   through the strided kernels of `kernels/ops.cu`, which take each tensor as a descriptor
//!   (pointer, `ne`, `nb`, type) and so handle views, permutations and broadcasts without
//!   copies; weights of every supported type are dequantized per element. These are the
//!   correctness baseline the test matrix checks (`cargo xtask test-matrix --backend cuda`).
//!   Fast paths (int8 MMVQ and F16 matrix-vector products, cuBLAS for batched products, flash
//!   decoding, the fused norm, CUDA graphs) replace them where [`plan`] says, and
//!   `TESSERA_CUDA_PATHS` turns each off, so a GPU run can compare every path with the
//!   baseline. cuBLAS is opened at run time like the driver; without it batched products
//!   stay on the generic kernel.
//! - **The CPU backend's shape.** A type table ([`types`]) and a pure plan ([`plan`]) decide;
//!   kernels only implement. Both are plain functions of tensor descriptions, so they build
//!   and are tested without the feature and without a GPU; `supports_op` and the executor
//!   read the same plan, so what the backend claims and what it runs cannot drift apart.
//! - **One stream, resolved launches.** The backend owns a non-blocking stream (the legacy
//!   default stream cannot be captured into a CUDA graph); buffer copies are queued on it too,
//!   so they are ordered with the kernels. A graph is planned and resolved (functions,
//!   addresses, scratch) before its first launch; nothing is compiled, loaded or allocated
//!   between launches, and `graph_compute` does not wait for the GPU.
//! - **Launches that overlap (sm_90+).** A kernel right after another in a list is launched
//!   with programmatic stream serialization ([`plan::early_launches`]): its blocks start while
//!   the previous grid finishes, the matrix-vector kernels prefetch their weight rows into L2,
//!   and every kernel waits for its predecessor (`pdl_start()` in prelude.cuh, first in every
//!   kernel: a test reads each kernel's text). A driver whose graphs refuse the programmatic
//!   edges costs the early launches, not the graphs.
//!
//! # Status
//!
//! The generic kernels have run on a GPU (an H200): the kernel test matrix passes there, and
//! whole models match Tessera's CPU closely (docs/FIDELITY.md). They are correctness kernels,
//! far slower than llama.cpp's (docs/BENCHMARKS.md). The fast paths compile to CUBIN for
//! sm_75/80/89/90 but have not yet run on one; their plan is tested as tables, and most of
//! their kernels run on the CPU in the `host_*` tests (compiled as C++ behind a shim, against
//! f64 references). The cuBLAS call (`exec/gemm.rs`) and the executor itself are checked only
//! on a GPU.

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
mod staging;

#[cfg(feature = "cuda")]
pub use backend::{CudaBackend, CudaDevice};
pub use error::CudaError;
