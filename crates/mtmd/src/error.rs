//! The crate's one error type.

/// Everything that can go wrong reading an mmproj file or an image; variants name the file,
/// key, tensor or image at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MtmdError {
    /// The GGUF file could not be read or parsed.
    #[error("{path}: {source}")]
    Gguf {
        /// The file.
        path: String,
        /// What the reader said.
        source: tessera_gguf::GgufError,
    },
    /// A metadata key is missing, has the wrong type or an unusable value.
    #[error("{path}: metadata key '{key}': {reason}")]
    Metadata {
        /// The file.
        path: String,
        /// The key.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The file is not a vision projector Tessera can run: another kind of GGUF, an audio-only
    /// projector, or a projector type it does not implement (named).
    #[error("{path}: {reason}")]
    Unsupported {
        /// The file.
        path: String,
        /// What it is and why it cannot be used.
        reason: String,
    },
    /// A tensor the projector needs is missing or has the wrong shape or type.
    #[error("{path}: tensor '{name}': {reason}")]
    Tensor {
        /// The file.
        path: String,
        /// The tensor.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The encoder's graph could not be built or computed.
    #[error("image encoder: {reason}")]
    Encode {
        /// What went wrong.
        reason: String,
    },
    /// A multimodal prompt could not be cut or evaluated (markers and images disagree, the
    /// projector does not fit the model, the model failed).
    #[error("multimodal prompt: {reason}")]
    Prompt {
        /// What went wrong.
        reason: String,
    },
    /// An image could not be decoded, or exceeds the limits.
    #[error("image {what}: {reason}")]
    Image {
        /// The image (a file name, or where in a request it came from).
        what: String,
        /// Why it cannot be used.
        reason: String,
    },
}

/// The crate's result type.
pub type Result<T, E = MtmdError> = std::result::Result<T, E>;
