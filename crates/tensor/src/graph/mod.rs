//! The graph builder: tensor descriptors in an arena ([`Context`]) with typed ids, builder
//! methods for every op the model graphs need (checked shapes, typed errors), and [`Graph`], the
//! nodes to run in execution order.
//!
//! This is ggml's `ggml_context` in `no_alloc` mode plus `ggml_cgraph`: metadata only. Where a
//! tensor's bytes live is decided later by an allocator (tessera-alloc) and a backend.

mod cgraph;
mod context;
mod conv;
mod desc;
mod moe;
mod op;
mod ops;

pub use cgraph::Graph;
pub use context::Context;
pub use desc::{contiguous_strides, Flags, TensorDesc, TensorId, MAX_DIMS, MAX_NAME, MAX_SRC};
pub use op::{GluOp, Op, PoolOp, RopeMode, RopeParams, UnaryOp};
