//! The crate's one error type. Every variant names the GGUF key or the token at fault.

use std::path::PathBuf;

/// Everything that can go wrong building a [`crate::Vocab`] from GGUF metadata.
///
/// Tokenizing and detokenizing never fail: every check happens once, when the vocabulary is
/// loaded, so a loaded `Vocab` is internally consistent.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VocabError {
    /// The GGUF file could not be opened or parsed.
    #[error("{path}: {source}")]
    Gguf {
        /// The file.
        path: PathBuf,
        /// The reader's error.
        source: tessera_gguf::GgufError,
    },
    /// A key the tokenizer needs is absent.
    #[error("metadata key '{key}' is missing")]
    MissingKey {
        /// The key.
        key: &'static str,
    },
    /// A key holds a value of the wrong type.
    #[error("metadata key '{key}' has type {actual}, expected {expected}")]
    WrongType {
        /// The key.
        key: &'static str,
        /// What the tokenizer accepts.
        expected: &'static str,
        /// The value's type in the file.
        actual: String,
    },
    /// A string value is not UTF-8.
    #[error("metadata key '{key}' is not valid UTF-8")]
    NotUtf8 {
        /// The key.
        key: &'static str,
    },
    /// `tokenizer.ggml.model` names a tokenizer this crate does not implement.
    #[error("tokenizer model '{model}' ({key}) is not supported (supported: llama, gpt2, bert)")]
    UnsupportedModel {
        /// The key (`tokenizer.ggml.model`).
        key: &'static str,
        /// Its value.
        model: String,
    },
    /// `tokenizer.ggml.pre` names a BPE pre-tokenizer this crate does not implement.
    #[error("pre-tokenizer '{pre}' ({key}) is not supported")]
    UnsupportedPre {
        /// The key (`tokenizer.ggml.pre`).
        key: &'static str,
        /// Its value.
        pre: String,
    },
    /// The vocabulary has no tokens, or more than fit in a `u32` id.
    #[error("'{key}' holds {count} tokens: a vocabulary needs between 1 and 2^31 tokens")]
    BadTokenCount {
        /// The key (`tokenizer.ggml.tokens`).
        key: &'static str,
        /// How many tokens it holds.
        count: usize,
    },
    /// A per-token array is shorter than the token list.
    #[error("'{key}' has {len} entries but the vocabulary has {n_tokens} tokens")]
    LengthMismatch {
        /// The key (`tokenizer.ggml.scores`, `tokenizer.ggml.token_type`).
        key: &'static str,
        /// Its length.
        len: usize,
        /// The number of tokens.
        n_tokens: usize,
    },
    /// The same token text appears twice.
    #[error("duplicate token {text:?} in '{key}': ids {first} and {second}")]
    DuplicateToken {
        /// The key (`tokenizer.ggml.tokens`).
        key: &'static str,
        /// The token text (lossily decoded).
        text: String,
        /// The first id holding it.
        first: u32,
        /// The second id holding it.
        second: u32,
    },
    /// A BPE merge is not two tokens separated by a space, or names a string that is not a token.
    #[error("merge #{index} {merge:?} in '{key}': {reason}")]
    BadMerge {
        /// The key (`tokenizer.ggml.merges`).
        key: &'static str,
        /// Index of the merge (its rank).
        index: usize,
        /// The merge text (lossily decoded).
        merge: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A special-token id is outside the vocabulary.
    #[error("'{key}' = {id} is out of range: the vocabulary has {n_tokens} tokens")]
    TokenIdOutOfRange {
        /// The key (e.g. `tokenizer.ggml.bos_token_id`).
        key: &'static str,
        /// The id in the file.
        id: i128,
        /// The number of tokens.
        n_tokens: usize,
    },
    /// A flag asks to add a special token that the vocabulary does not define.
    #[error("'{flag_key}' is true, but '{id_key}' is not set")]
    MissingSpecialToken {
        /// The flag (e.g. `tokenizer.ggml.add_bos_token`).
        flag_key: &'static str,
        /// The id key it needs (e.g. `tokenizer.ggml.bos_token_id`).
        id_key: &'static str,
    },
    /// A built-in pre-tokenizer regex failed to compile (a bug in this crate, reported rather
    /// than panicking).
    #[error("pre-tokenizer regex {pattern:?} does not compile: {message}")]
    Regex {
        /// The regex, as llama.cpp writes it.
        pattern: String,
        /// The regex engine's message.
        message: String,
    },
}

/// `Result` with [`VocabError`].
pub type Result<T, E = VocabError> = std::result::Result<T, E>;
