//! Tessera's libmtmd: images into multimodal models, as llama.cpp's `tools/mtmd` does it.
//!
//! A multimodal model comes as two GGUF files: the language model, and an *mmproj* file with
//! the vision tower and the projector that turns an image into embeddings of the language
//! model's width. This crate reads and checks mmproj files ([`Mmproj`]), decodes images with
//! llama.cpp's conversions ([`Bitmap`]) and prepares them as llama.cpp's preprocessors do
//! ([`preprocess`]: Pillow-compatible resizing, padding, normalisation), so that the encoder
//! sees the same numbers as llama.cpp's.
//!
//! Decisions:
//! - A projector type is supported whole or refused by name ([`Projector::from_name`]): a
//!   file whose type Tessera does not implement fails at load, never in a graph.
//! - Images are untrusted input: sizes are checked on the declared header before decoding
//!   ([`ImageLimits`]), and corrupt data is a named error.
//! - Only the binaries use this crate (the design's layering): it builds on the GGUF and
//!   tensor crates, and nothing below it knows about images.

mod bitmap;
mod chunks;
mod encoder;
mod error;
mod mmproj;
mod preprocess;
mod projector;
mod qwen;
pub mod resize;
pub mod synth;

pub use bitmap::{Bitmap, ImageLimits};
pub use chunks::{eval_chunks, tokenize, Chunk, MARKER};
pub use encoder::Encoder;
pub use error::{MtmdError, Result};
pub use mmproj::{FfnAct, Mmproj, VisionHparams};
pub use preprocess::{preprocess, ImageF32, Preprocessed};
pub use projector::{Projector, SUPPORTED};
