//! The crate's one error type.

use tessera_backend::BackendError;

/// What can go wrong while planning or placing tensors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AllocError {
    /// The backend failed: a buffer could not be allocated, or a binding did not fit.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// A [`GraphAllocator`](crate::GraphAllocator) was made without any buffer type.
    #[error("a graph allocator needs at least one buffer type")]
    NoBufferTypes,
    /// A tensor was assigned to a buffer id the allocator does not have.
    #[error(
        "tensor '{name}' (#{index}) assigned to buffer {buffer_id}, but there are only {n_buffers}"
    )]
    BufferId {
        /// Tensor name.
        name: String,
        /// Tensor index.
        index: usize,
        /// The id it was assigned.
        buffer_id: usize,
        /// How many buffer types the allocator has.
        n_buffers: usize,
    },
    /// The planned bytes outgrew the address space of every chunk (only for absurd sizes: the
    /// last chunk is unbounded).
    #[error("{buffer_type}: cannot place {size} bytes in {chunks} chunks")]
    AddressSpace {
        /// The buffer type.
        buffer_type: String,
        /// Bytes asked for.
        size: usize,
        /// Chunks in use.
        chunks: usize,
    },
    /// A view handed to an allocator that places tensors: views take their source's storage.
    #[error("tensor '{name}' (#{index}) is a view; views take their source's storage")]
    View {
        /// Tensor name.
        name: String,
        /// Tensor index.
        index: usize,
    },
    /// A [`LinearAllocator`](crate::LinearAllocator) ran out of room.
    #[error(
        "not enough space in buffer {buffer} for '{name}': {needed} bytes needed, {available} left"
    )]
    OutOfSpace {
        /// The buffer.
        buffer: String,
        /// Tensor name.
        name: String,
        /// Bytes the tensor needs (padded to the alignment).
        needed: usize,
        /// Bytes left in the buffer.
        available: usize,
    },
}

/// Shorthand for `Result<T, AllocError>`.
pub type Result<T, E = AllocError> = std::result::Result<T, E>;
