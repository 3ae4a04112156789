//! # tessera-tensor
//!
//! The bottom layer of Tessera: ggml's element types and quantized block formats, bit for bit.
//!
//! - [`DType`] is `enum ggml_type` with the same ids, names, block sizes and bytes per block.
//!   Removed ids are rejected with a typed error, so a GGUF file can never smuggle a type in.
//! - [`blocks`] holds `#[repr(C)]` structs identical to ggml's `block_*`, so tensor bytes from a
//!   GGUF file are used in place, never converted at load.
//! - [`quant`] has a reference (scalar, readable) dequantizer for every type and a quantizer for
//!   every type ggml quantizes without an importance matrix, producing ggml's exact bytes. These
//!   are the ground truth that SIMD and GPU kernels are measured against, so they favour
//!   clarity over speed.
//!
//! - [`graph`] is the graph builder: tensor descriptors in an arena with typed ids, shape-checked
//!   op constructors and [`graph::Graph`], ggml's `cgraph`.
//! - [`Version`]: contexts and graphs (and the backend crate's bindings) carry a version that
//!   changes with them and is never reused, so a backend may keep what it resolved from a
//!   graph (its nodes' addresses, its launches) while the versions it saw hold.
//!
//! Design decisions: this crate does no I/O and has no `unsafe`; blocks are read with
//! `bytemuck::pod_read_unaligned` so callers never have to promise alignment.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod blocks;
mod dtype;
mod error;
pub mod graph;
pub mod quant;
pub mod version;

pub use dtype::{DType, GGML_TYPE_COUNT};
pub use error::{Result, TensorError};
pub use quant::{dequantize, dequantize_row, quantize, quantize_row};
pub use version::Version;
