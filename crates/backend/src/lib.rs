//! # tessera-backend
//!
//! The one abstraction every Tessera backend implements, as small traits with provided defaults
//! (ggml's `ggml-backend-impl.h`, in Rust):
//!
//! - [`BufferType`]: a kind of memory (alloc, alignment, max size, per-tensor alloc size).
//! - [`Buffer`]: a block of it (read/write/clear; host buffers expose a pointer for kernels).
//! - [`Backend`]: a stream that computes whole graphs (`graph_compute`, `supports_op`,
//!   `offload_op`, events).
//! - [`Device`] and [`Registry`]: what hardware there is and how to start backends on it.
//!
//! Tensors are metadata in a `tessera_tensor::graph::Context`; where their bytes live is a
//! [`Bindings`] map from tensor id to (buffer, offset), filled by an allocator (tessera-alloc) or
//! by hand for weights. [`MappedBuffer`] wraps a GGUF file's mapping so weights are used without
//! a copy.
//!
//! Design decisions: buffers are shared (`Arc<dyn Buffer>`) and written through `&self`, because
//! many tensors live in one buffer and kernels on several threads write disjoint parts of it at
//! once; the allocator's invariant (no two live tensors overlap) is what makes that sound.

#![deny(missing_docs)]

mod backend;
mod bindings;
mod buffer;
mod error;
mod host;

pub use backend::{op_batch_size, Backend, CompletedEvent, Device, DeviceKind, Event, Registry};
pub use bindings::{Bindings, Storage};
pub use buffer::{check_range, copy_via_host, Buffer, BufferType, BufferUsage, UsageCell};
pub use error::{human_size, BackendError, Result};
pub use host::{HostBuffer, HostBufferType, MappedBuffer, HOST_ALIGNMENT};
