//! # tessera-vocab
//!
//! llama.cpp's tokenizers (`src/llama-vocab.cpp`, `src/unicode.cpp`) in Rust, built from GGUF
//! metadata alone: [`Vocab::from_metadata`] reads the `tokenizer.ggml.*` keys, and
//! [`Vocab::tokenize`] / [`Vocab::detokenize`] give the same ids and text as
//! `llama_tokenize` / `llama_detokenize`.
//!
//! ```no_run
//! let vocab = tessera_vocab::Vocab::from_gguf_path("model.gguf")?;
//! let ids = vocab.tokenize("The capital of France is", true, true);
//! let text = vocab.detokenize(&ids, true, false);
//! println!("{ids:?} -> {text:?}; stop at {:?}", vocab.eog_tokens().collect::<Vec<_>>());
//! # Ok::<(), tessera_vocab::VocabError>(())
//! ```
//!
//! Supported: `llama` (SPM: score-ordered merging with `<0xXX>` byte fallback, U+2581 space
//! escaping, `add_space_prefix`), `gpt2` (byte-level BPE by merge rank, with the pre-tokenizers
//! of [`PreType`]: Llama 3, Qwen2, GPT-2/MPT, StarCoder/Refact/SmolLM, DeepSeek LLM and Coder,
//! Falcon, GPT-4o (gpt-oss, Llama 4), default) and `bert` (WordPiece). Other tokenizer models (`t5`, `rwkv`, ...) and
//! pre-tokenizers give a typed error.
//!
//! ## Design decisions
//!
//! - **Faithful to llama.cpp, not to Hugging Face.** Where the two differ (special-token
//!   partitioning, `clean_spaces`, WordPiece's first-code-point "NFD", the lossy byte fallback
//!   of BPE), this crate does what llama.cpp does, because Tessera's reference outputs come
//!   from llama.cpp. The module docs name the llama.cpp function each one mirrors.
//! - **Pre-tokenizers without a lookahead regex engine.** The regexes that need `(?!\S)` (GPT-2,
//!   Llama 3, Qwen2) run through hand-written splitters as in llama.cpp; the rest run on the
//!   `regex` crate over llama.cpp's "collapsed" text, where every non-ASCII code point is
//!   replaced by a placeholder for its Unicode category, so both engines see the same input.
//! - **Unicode data from `regex-syntax`.** General categories come from the tables of the regex
//!   crate's parser (already a dependency) instead of a copied `unicode-data.cpp`.
//! - **Untrusted input.** A GGUF file is checked once, at load: wrong types, short per-token
//!   arrays, duplicate tokens, merges naming non-tokens and special ids past the vocabulary are
//!   [`VocabError`]s naming the key. After that, tokenizing and detokenizing cannot fail or
//!   panic; they take `&self` and allocate only their output and scratch space.
//! - **Bytes where llama.cpp has bytes.** Token texts are kept as the file's bytes and
//!   [`Vocab::token_to_piece`] returns bytes, because a byte-fallback piece can be part of a
//!   UTF-8 sequence; [`Vocab::detokenize`] decodes the whole sequence at the end.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod bpe;
mod error;
mod load;
mod pretokenize;
mod special;
mod spm;
mod unicode;
mod vocab;
mod wpm;

pub use error::{Result, VocabError};
pub use pretokenize::PreType;
pub use special::TokenAttr;
pub use vocab::{Vocab, VocabType};
