//! # tessera-alloc
//!
//! Where a graph's tensors live: ggml's `ggml-alloc.c` in Rust.
//!
//! - [`GraphAllocator`] (`ggml_gallocr`) plans a byte offset for every tensor of a graph so that
//!   tensors that are never alive at the same time share memory, then binds them into buffers it
//!   owns. A [`reserve`](GraphAllocator::reserve) pass on the worst-case graph sizes the
//!   buffers once; each later [`alloc_graph`](GraphAllocator::alloc_graph) re-plans (one cheap
//!   pass) and reuses them, growing a buffer only when a graph needs more.
//! - [`LinearAllocator`] (`ggml_tallocr`) and [`alloc_tensors`] place long-lived tensors
//!   (weights, KV cache) one after another in a buffer.
//! - [`DynAllocator`] (`ggml_dyn_tallocr`) is the offset allocator underneath the planner.
//!
//! ## How a graph is planned
//!
//! Per buffer type, a [`DynAllocator`] hands out aligned ranges of a virtual buffer made of up
//! to [`MAX_CHUNKS`] chunks, each at most the type's `max_size` (the last chunk is unbounded):
//! best fit among the free holes, else the growable tail of a chunk, else a new chunk; freed
//! ranges merge with their neighbours; each chunk's high-water mark is the size its buffer
//! needs. The planner ([`Plan`]) walks the graph as ggml does:
//!
//! 1. leafs first, then every graph input (`Flags::INPUT`), so nothing is placed over them;
//! 2. nodes in execution order: a view gets no storage (its bytes are its `view_src`'s, which
//!    is placed first); a tensor already bound to someone else's buffer is left alone and never
//!    freed; an op that can run in place (`Op::can_inplace`) takes over a source's memory when
//!    that source dies at this node (this node is its last consumer, no view of it is still
//!    used, same type, shape and strides, owned by this allocator, in the same buffer type, not
//!    an input or output); otherwise it gets fresh bytes;
//! 3. after each node, its sources lose a consumer; a tensor with no consumers and no live
//!    views left is freed (for a view, its `view_src` loses a view).
//!
//! **Invariant** (checked by a property test over random graphs): two tensors alive at the
//! same time never share a byte, except a node computed in place over its dying source, and
//! every tensor lies inside its buffer. A tensor lives from the node that computes it (leafs and
//! inputs: from the start) to the last node that uses it, directly or through a view.
//!
//! ## Design decisions
//!
//! - **Plan, then bind.** Planning works on ids and sizes only and returns a [`Plan`]; buffers
//!   are allocated and tensors bound afterwards. Plans can be inspected and tested without
//!   memory, and the same code serves `reserve` and `alloc_graph`.
//! - **Re-plan every graph.** ggml replays the reserved plan when the node count matches and
//!   re-plans otherwise; replaying is only right when the graph's structure is the same, and
//!   planning is a single pass, so every graph is planned afresh and only the buffers are
//!   reused.
//! - **Kept longer than ggml, never shorter.** Inputs are never freed (ggml frees them after
//!   their last use): the caller may read them back or run the graph again with the same
//!   inputs. A view flagged as output keeps its source alive (ggml would free the source after
//!   the view's last consumer). Tensors without consumers in the graph are never freed.
//! - **In-place through views works.** ggml's check that a view source may be donated can never
//!   pass (views are never marked as owned); here a view that starts its source's storage and is
//!   its last user donates that storage, and the tail beyond the node is freed.
//! - **Pre-bound means someone else's.** A tensor bound in the caller's [`Bindings`] to a
//!   buffer this allocator did not make is external; one bound to this allocator's buffers (by
//!   an earlier `alloc_graph`) is planned again, so one `Bindings` can be reused across graphs.
//! - **Free lists are vectors**, not ggml's fixed arrays of 256 blocks: no limit to hit.
//! - **Several buffer types**: buffer ids map to buffer types; ids with the same type (the same
//!   `Arc`) share memory; an in-place node only takes over memory of its own buffer type.
//!
//! Views are never bound: [`Bindings`] resolves them through `view_src` and `view_offs`.
//!
//! [`Bindings`]: tessera_backend::Bindings

#![deny(missing_docs)]

mod dyn_alloc;
mod error;
mod graph_alloc;
mod linear;
mod plan;

pub use dyn_alloc::{Address, DynAllocator, MAX_CHUNKS};
pub use error::{AllocError, Result};
pub use graph_alloc::GraphAllocator;
pub use linear::{alloc_tensors, tensors_size, LinearAllocator};
pub use plan::{Placement, Plan};
