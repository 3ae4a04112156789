//! The crate's one error type.

use crate::DType;

/// Everything that can go wrong in `tessera-tensor`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TensorError {
    /// A type id that ggml once had and has since removed (4, 5, 31-33, 36-38).
    #[error("ggml type id {id} was removed from ggml ({what}) and is not accepted")]
    RemovedType {
        /// The numeric id.
        id: u32,
        /// What the id used to be.
        what: &'static str,
    },
    /// A type id that ggml never had.
    #[error("unknown ggml type id {id}")]
    UnknownType {
        /// The numeric id.
        id: u32,
    },
    /// A type with no reference quantizer or dequantizer here.
    #[error("{op} is not supported for type {dtype}")]
    Unsupported {
        /// The operation asked for ("quantize", "dequantize").
        op: &'static str,
        /// The type it was asked for.
        dtype: DType,
    },
    /// An element count that is not a whole number of blocks.
    #[error("{n} elements is not a multiple of {dtype}'s block size {block}")]
    NotBlockMultiple {
        /// The type.
        dtype: DType,
        /// The element count given.
        n: u64,
        /// The block size of the type.
        block: u64,
    },
    /// Source and destination buffers of different sizes.
    #[error("{what}: expected {expected} bytes/elements, got {actual}")]
    SizeMismatch {
        /// Which buffer.
        what: &'static str,
        /// Size implied by the other buffer.
        expected: u64,
        /// Size given.
        actual: u64,
    },
    /// Operand shapes an op does not accept.
    #[error("{op}: {reason}")]
    Shape {
        /// The op (ggml's name, e.g. "MUL_MAT").
        op: &'static str,
        /// What is wrong, with the shapes involved.
        reason: String,
    },
    /// An operand type an op does not accept.
    #[error("{op}: operand type {dtype} not accepted ({reason})")]
    OpType {
        /// The op.
        op: &'static str,
        /// The offending type.
        dtype: DType,
        /// Which operand and what is accepted.
        reason: String,
    },
    /// A size computation overflowed `u64`/`usize`.
    #[error("size of {what} overflows")]
    Overflow {
        /// What was being sized.
        what: &'static str,
    },
}

/// Shorthand for `Result<T, TensorError>`.
pub type Result<T, E = TensorError> = std::result::Result<T, E>;
