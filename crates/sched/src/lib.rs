//! # tessera-sched
//!
//! One graph across several backends: ggml's `ggml_backend_sched` in Rust. A [`Scheduler`] holds
//! backends in priority order (accelerators first, the CPU last), decides which one computes
//! each node, cuts the node list into [`Split`]s (runs on one backend), copies the tensors a
//! split reads from memory its backend cannot reach, plans memory for all of it with one
//! [`GraphAllocator`](tessera_alloc::GraphAllocator) over the backends' buffer types, and runs
//! the splits in order.
//!
//! ## The passes
//!
//! [`Scheduler::split`] (also the first half of [`Scheduler::alloc_graph`]) runs ggml's five
//! passes, in its order and by its rules:
//!
//! 1. place tensors already stored (weights, KV cache) with a backend that reads their buffer;
//!    graph inputs on the CPU; nodes that read a weight beside the weight, unless a
//!    higher-priority backend's `offload_op` asks for them (large batches, op offload on);
//! 2. spread those assignments to neighbouring nodes (accelerators first, down then up);
//! 3. give the rest to the backend reading most of their sources, and move nodes up to a
//!    higher-priority backend of the same buffer type where it reads every source;
//! 4. views and leafs follow their source or consumer;
//! 5. cut splits where the backend changes, and add for each source a split's backend cannot
//!    read a copy node (`"{backend}#{name}#{slot}"`), made once per backend and reused by later
//!    splits.
//!
//! The result is a [`Schedule`]: where every tensor went, the splits and their inputs, readable
//! for tests ([`Schedule::n_splits`], [`Schedule::n_copies`], [`Schedule::backend_of`]) and
//! printable ([`Schedule::describe`], ggml's `print_assignments`; [`Schedule::to_dot`], the
//! graph coloured by backend).
//!
//! ## Design decisions
//!
//! - **Copies are graph nodes.** A copy is a [`Op::Dup`](tessera_tensor::graph::Op::Dup) node
//!   reading the original, placed at the start of the split that needs it in the flattened
//!   graph the allocator plans. So the allocator keeps the original alive until the copy is
//!   made and places the copy on the split's backend, with no special cases (ggml adds a view
//!   "dependency" node and a bare copy tensor for the same effect). The scheduler performs
//!   the copies itself; backends never see them.
//! - **The caller's context is extended, not cloned.** Copies are added to the caller's
//!   [`Context`](tessera_tensor::graph::Context) and their readers rewired in it, so tensor ids
//!   stay valid and outputs are read as usual through the [`Bindings`](tessera_backend::Bindings).
//! - **Every evaluation is scheduled afresh.** The passes are linear in the graph; a model that
//!   rebuilds its graph per micro-batch reschedules it too.
//! - **Copies go buffer to buffer where the buffers can** (`Buffer::copy_to`: device to device
//!   within a backend's own kind, one transfer where either side is host memory) and through
//!   the scheduler's host staging buffer otherwise (`read`, then `write`);
//!   [`Scheduler::copy_stats`] counts both, `SchedParams::direct_copies = false` stages all.
//! - **Events per backend and copy slot** order the copies against earlier computes; with the
//!   synchronous CPU backends here they are always complete.
//!
//! No GPU is needed to test any of this: `tessera_backend_cpu::SimDevice` is a second device
//! with memory of its own that refuses chosen ops; results through the scheduler equal the
//! single-backend results bit for bit (tests and a property test over random graphs).

#![deny(missing_docs)]

mod assign;
mod error;
mod scheduler;
mod split;

pub use error::{Result, SchedError};
pub use scheduler::{CopyStats, EvalCallback, EvalPhase, SchedParams, Scheduler};
pub use split::{Schedule, Split, SplitInput};
