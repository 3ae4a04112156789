//! # tessera-gguf
//!
//! Reads and writes GGUF, the file format of ggml and llama.cpp, usable on its own.
//!
//! - [`GgufFile::open`] memory-maps a file and checks its header exactly as ggml's
//!   `gguf_init_from_file` does (magic, version 2/3, counts, value types, duplicate keys and
//!   tensor names, name length, dimensions, block multiples, alignment and the packed data
//!   offsets), plus the data bounds llama.cpp's loader checks. Tensor data is handed out as
//!   zero-copy slices of the mapping ([`Gguf::tensor_data`]).
//! - [`GgufWriter`] writes the same bytes as the `gguf` Python package's writer; a file read and
//!   written back is byte-identical.
//!
//! Design decisions: a GGUF file is untrusted input. The parser works on a byte slice (so it can
//! be fuzzed without files), checks every count against the bytes left before allocating, and
//! returns a typed [`GgufError`] that names the key, tensor or byte offset; it never panics.
//! Strings are kept as bytes, because ggml accepts any bytes; keys and tensor names must be UTF-8.

#![deny(missing_docs)]

mod error;
mod file;
mod metadata;
mod read;
mod tensor_info;
mod value;
mod write;

pub use error::{GgufError, Result};
pub use file::{Gguf, GgufFile};
pub use metadata::Metadata;
pub use read::{parse_header, Header, ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAX_DIMS, MAX_NAME};
pub use tensor_info::TensorInfo;
pub use value::{Array, Value, ValueType};
pub use write::GgufWriter;
