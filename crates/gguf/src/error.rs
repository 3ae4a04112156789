//! The crate's one error type. Every variant says where: which key, which tensor, which byte.

use std::path::PathBuf;
use tessera_tensor::TensorError;

/// Everything that can go wrong reading or writing GGUF.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GgufError {
    /// An I/O error on a file.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Any other error, in a named file.
    #[error("{path}: {source}")]
    InFile {
        /// The file.
        path: PathBuf,
        /// What went wrong in it.
        source: Box<GgufError>,
    },
    /// The file does not start with `GGUF`.
    #[error("bad magic {found:?}: not a GGUF file")]
    BadMagic {
        /// The first four bytes.
        found: [u8; 4],
    },
    /// Version 0, 1 (no longer supported), above 3, or byte-swapped (big-endian file).
    #[error("unsupported GGUF version {version}{}", version_hint(*version))]
    UnsupportedVersion {
        /// The version read.
        version: u32,
    },
    /// The file ends before a field it declares.
    #[error(
        "file truncated reading {what} at byte {offset}: need {needed} bytes, {remaining} left"
    )]
    Truncated {
        /// What was being read.
        what: String,
        /// Byte offset of the read.
        offset: u64,
        /// Bytes needed.
        needed: u64,
        /// Bytes left in the file.
        remaining: u64,
    },
    /// A count (tensors, key/values, array elements) that is negative, too large, or cannot fit in
    /// the rest of the file.
    #[error("invalid {what} count {count} at byte {offset}")]
    BadCount {
        /// What was being counted.
        what: String,
        /// The count read.
        count: i128,
        /// Byte offset of the count.
        offset: u64,
    },
    /// A string longer than GGUF's limit (2^30 bytes).
    #[error("{what}: string length {len} exceeds the GGUF maximum")]
    StringTooLong {
        /// What string.
        what: String,
        /// Its declared length.
        len: u64,
    },
    /// A key/value pair with an empty key.
    #[error("key/value pair {index} has an empty key")]
    EmptyKey {
        /// Index of the pair.
        index: u64,
    },
    /// The same key twice.
    #[error("duplicate key '{key}'")]
    DuplicateKey {
        /// The key.
        key: String,
    },
    /// A value type id outside 0..=12, or ARRAY as an array's element type.
    #[error("key '{key}': invalid value type {type_id}{}", if *.nested { " (nested arrays are not allowed)" } else { "" })]
    BadValueType {
        /// The key.
        key: String,
        /// The type id read.
        type_id: i32,
        /// Whether it was an array of arrays.
        nested: bool,
    },
    /// `general.alignment` is not a u32 power of two.
    #[error("general.alignment: {reason}")]
    BadAlignment {
        /// What is wrong with it.
        reason: String,
    },
    /// A key or tensor name that is not UTF-8.
    #[error("{what} is not valid UTF-8")]
    NotUtf8 {
        /// What string.
        what: String,
    },
    /// A tensor name of 64 bytes or more (ggml's `GGML_MAX_NAME`).
    #[error("tensor {index}: name of {len} bytes is too long (ggml's limit is 63)")]
    NameTooLong {
        /// Index of the tensor.
        index: u64,
        /// Name length.
        len: u64,
    },
    /// Two tensors with the same name.
    #[error("duplicate tensor name '{name}'")]
    DuplicateTensor {
        /// The name.
        name: String,
    },
    /// A tensor whose shape ggml rejects.
    #[error("tensor '{name}': {reason}")]
    BadShape {
        /// The tensor.
        name: String,
        /// What is wrong with its shape.
        reason: String,
    },
    /// A tensor type id ggml rejects.
    #[error("tensor '{name}': {source}")]
    BadType {
        /// The tensor.
        name: String,
        /// The type error.
        source: TensorError,
    },
    /// A tensor whose data offset is not where ggml requires it (packed in table order, each
    /// tensor padded to the alignment).
    #[error("tensor '{name}': data offset {offset} is not the expected {expected}")]
    BadOffset {
        /// The tensor.
        name: String,
        /// The offset read (relative to the data section).
        offset: u64,
        /// Where it must be.
        expected: u64,
    },
    /// A tensor whose data lies past the end of the file.
    #[error(
        "tensor '{name}': data ends at byte {end}, past the end of the file ({file_size} bytes)"
    )]
    DataPastEnd {
        /// The tensor.
        name: String,
        /// Absolute end of its data.
        end: u64,
        /// File size.
        file_size: u64,
    },
    /// A metadata key that is not there.
    #[error("metadata key '{key}' is missing")]
    KeyMissing {
        /// The key.
        key: String,
    },
    /// A metadata key of another type than asked for.
    #[error("metadata key '{key}' has type {actual}, expected {expected}")]
    WrongType {
        /// The key.
        key: String,
        /// The type asked for.
        expected: String,
        /// The type found.
        actual: String,
    },
    /// A tensor that is not there.
    #[error("tensor '{name}' not found")]
    TensorMissing {
        /// The tensor.
        name: String,
    },
    /// The writer was given tensor data of the wrong size.
    #[error("tensor '{name}': {actual} bytes of data given, its shape and type need {expected}")]
    DataSize {
        /// The tensor.
        name: String,
        /// Bytes the shape needs.
        expected: u64,
        /// Bytes given.
        actual: u64,
    },
}

fn version_hint(version: u32) -> &'static str {
    match version {
        1 => " (GGUF v1 is no longer supported)",
        v if v & 0xffff == 0 => " (is the file big-endian?)",
        _ => " (supported: 2 and 3)",
    }
}

impl GgufError {
    /// Wraps the error with the path of the file it happened in.
    pub fn in_file(self, path: impl Into<PathBuf>) -> GgufError {
        match self {
            e @ (GgufError::Io { .. } | GgufError::InFile { .. }) => e,
            e => GgufError::InFile { path: path.into(), source: Box::new(e) },
        }
    }
}

/// Shorthand for `Result<T, GgufError>`.
pub type Result<T, E = GgufError> = std::result::Result<T, E>;
