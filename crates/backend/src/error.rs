//! The crate's one error type.

use tessera_tensor::TensorError;

/// What can go wrong in a backend.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// A buffer could not be allocated.
    #[error("{buffer_type}: cannot allocate {} ({size} bytes): {reason}", human_size(*size))]
    Alloc {
        /// The buffer type.
        buffer_type: String,
        /// Bytes asked for.
        size: usize,
        /// Why.
        reason: String,
    },
    /// A read or write outside a buffer.
    #[error(
        "{buffer}: {what} of {len} bytes at offset {offset} is outside the buffer ({size} bytes)"
    )]
    OutOfBounds {
        /// The buffer.
        buffer: String,
        /// "read" or "write" or "bind".
        what: &'static str,
        /// Offset.
        offset: usize,
        /// Length.
        len: usize,
        /// Buffer size.
        size: usize,
    },
    /// A write to a read-only buffer (e.g. memory-mapped weights).
    #[error("{buffer} is read-only")]
    ReadOnly {
        /// The buffer.
        buffer: String,
    },
    /// A tensor that has no storage bound.
    #[error("tensor '{name}' (#{index}) has no storage")]
    Unbound {
        /// Tensor name.
        name: String,
        /// Tensor index.
        index: usize,
    },
    /// Data of the wrong size handed to `set`/`get`.
    #[error("tensor '{name}': {actual} bytes given, the tensor has {expected}")]
    DataSize {
        /// Tensor name.
        name: String,
        /// Its size.
        expected: usize,
        /// Given size.
        actual: usize,
    },
    /// An op the backend cannot run.
    #[error("{backend} does not support {op} on node '{name}' ({detail})")]
    Unsupported {
        /// The backend.
        backend: String,
        /// The op.
        op: &'static str,
        /// The node.
        name: String,
        /// Types and shapes.
        detail: String,
    },
    /// A setting the backend cannot honour (e.g. batch-invariant arithmetic).
    #[error("{backend}: {what}")]
    Setting {
        /// The backend.
        backend: String,
        /// What it cannot do.
        what: String,
    },
    /// A tensor-level error.
    #[error(transparent)]
    Tensor(#[from] TensorError),
    /// A kernel stopped with an error (e.g. an index out of range in the graph's data).
    #[error("{backend}: a kernel failed: {message}")]
    Kernel {
        /// The backend.
        backend: String,
        /// What went wrong.
        message: String,
    },
    /// Computation was aborted by the abort flag.
    #[error("graph computation aborted")]
    Aborted,
}

/// Shorthand for `Result<T, BackendError>`.
pub type Result<T, E = BackendError> = std::result::Result<T, E>;

/// A byte count as people read it: `512 B`, `1.50 KiB`, `91.94 MiB`, `7.25 GiB`.
pub fn human_size(n: usize) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.2} {}", UNITS[u])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_people_read_them() {
        assert_eq!(human_size(512), "512 B");
        assert_eq!(human_size(1536), "1.50 KiB");
        assert_eq!(human_size(3 << 30), "3.00 GiB");
        let e =
            BackendError::Alloc { buffer_type: "CPU".into(), size: 5 << 30, reason: "x".into() };
        assert_eq!(e.to_string(), "CPU: cannot allocate 5.00 GiB (5368709120 bytes): x");
    }
}
