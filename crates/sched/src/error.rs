//! The crate's one error type.

use tessera_alloc::AllocError;
use tessera_backend::BackendError;

/// What can go wrong while scheduling or computing a graph across backends.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SchedError {
    /// A backend failed (computing, copying, reading a buffer).
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// Memory for the graph could not be planned or allocated.
    #[error(transparent)]
    Alloc(#[from] AllocError),
    /// A scheduler needs at least one backend, and the last must compute in host memory (the
    /// CPU), as ggml requires: graph inputs live there.
    #[error("scheduler backends: {0}")]
    Backends(String),
    /// No backend supports a node.
    #[error("no backend can compute {op} node '{name}' (#{index})")]
    Unsupported {
        /// ggml's op name.
        op: &'static str,
        /// Node name.
        name: String,
        /// Node index.
        index: usize,
    },
    /// A tensor is already stored in a buffer that no backend both reads and can run its op in.
    #[error(
        "tensor '{name}' is in a {buffer} buffer, which no backend that supports {op} can read"
    )]
    Stranded {
        /// Tensor name.
        name: String,
        /// The buffer's name.
        buffer: String,
        /// The op asking.
        op: &'static str,
    },
    /// [`Scheduler::compute`](crate::Scheduler::compute) was given a schedule made by another
    /// scheduler or for another graph.
    #[error("the schedule does not belong to this scheduler ({0})")]
    Mismatch(String),
}

/// Shorthand for `Result<T, SchedError>`.
pub type Result<T, E = SchedError> = std::result::Result<T, E>;
