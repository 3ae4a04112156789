//! The crate's one error type.

use tessera_tensor::DType;

/// Everything that can go wrong loading or running a model; variants name the file, key or
/// tensor at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LlamaError {
    /// The GGUF file could not be read or parsed. The file is named once: the reader's own
    /// errors already name it where they can.
    #[error("{}", gguf_message(path, source))]
    Gguf {
        /// The file.
        path: String,
        /// What the reader said.
        source: tessera_gguf::GgufError,
    },
    /// A metadata key is missing or has the wrong type, or a file could not be written.
    #[error("metadata: {0}")]
    Metadata(#[from] tessera_gguf::GgufError),
    /// A metadata value is out of its valid range.
    #[error("metadata key '{key}': {reason}")]
    BadValue {
        /// The key.
        key: String,
        /// Why it cannot be used.
        reason: String,
    },
    /// A setting from the caller (llama.cpp's flag names: `--device`, `--override-tensor`) is
    /// unusable.
    #[error("{flag}: {reason}")]
    Setting {
        /// The flag.
        flag: String,
        /// Why it cannot be used.
        reason: String,
    },
    /// `general.architecture` names an architecture nobody registered.
    #[error("unknown architecture '{0}' (known: {1})")]
    UnknownArchitecture(String, String),
    /// Tensors in the file that the architecture does not read (llama.cpp: "wrong number of
    /// tensors"): computing without them would silently give other answers.
    #[error(
        "{arch}: the file has {} tensor(s) this architecture does not use: {} (an unsupported \
         variant of the architecture; --allow-unused-tensors loads it anyway, ignoring them)",
        names.len(),
        names.join(", ")
    )]
    UnusedTensors {
        /// The architecture.
        arch: String,
        /// The tensors, in file order (at most the first 20).
        names: Vec<String>,
    },
    /// A tensor the architecture needs is not in the file.
    #[error("tensor '{0}' is missing from the model")]
    MissingTensor(String),
    /// A tensor has another shape than the hyperparameters imply.
    #[error("tensor '{name}' has shape {actual:?}, expected {expected:?}")]
    TensorShape {
        /// The tensor.
        name: String,
        /// Its shape in the file.
        actual: Vec<usize>,
        /// The shape the hyperparameters imply.
        expected: Vec<usize>,
    },
    /// A tensor's type cannot be used where it is.
    #[error("tensor '{name}' has type {dtype}, which {reason}")]
    TensorType {
        /// The tensor.
        name: String,
        /// Its type.
        dtype: DType,
        /// Why it cannot be used.
        reason: String,
    },
    /// The tokenizer could not be built.
    #[error("tokenizer: {0}")]
    Vocab(#[from] tessera_vocab::VocabError),
    /// The batch does not fit in the context.
    #[error("the context is full: {needed} more cells needed, {free} free of {size} (use a larger context, -c)")]
    ContextFull {
        /// Cells the batch needs.
        needed: usize,
        /// Free cells.
        free: usize,
        /// Context size in cells.
        size: usize,
    },
    /// A batch is malformed (empty, token out of vocabulary, bad sequence id, ...).
    #[error("invalid batch: {0}")]
    Batch(String),
    /// Building a graph failed (a shape rule of an op).
    #[error("graph: {0}")]
    Graph(#[from] tessera_tensor::TensorError),
    /// Allocating the graph failed.
    #[error("allocation: {0}")]
    Alloc(#[from] tessera_alloc::AllocError),
    /// Scheduling a graph across the backends failed.
    #[error("scheduler: {0}")]
    Sched(#[from] tessera_sched::SchedError),
    /// The backend failed.
    #[error("backend: {0}")]
    Backend(#[from] tessera_backend::BackendError),
    /// A LoRA adapter cannot be used (with this model).
    #[error("LoRA adapter {path}: {reason}")]
    Lora {
        /// The adapter's file.
        path: String,
        /// Why it cannot be used.
        reason: String,
    },
    /// A chat template could not be rendered.
    #[error("chat template: {0}")]
    Template(String),
}

/// Result with [`LlamaError`].
pub type Result<T, E = LlamaError> = std::result::Result<T, E>;

/// `path: source`, or just `source` where the reader's error names the file itself.
fn gguf_message(path: &str, source: &tessera_gguf::GgufError) -> String {
    match source {
        tessera_gguf::GgufError::Io { .. } | tessera_gguf::GgufError::InFile { .. } => {
            source.to_string()
        }
        _ => format!("{path}: {source}"),
    }
}
