//! # tessera-llama
//!
//! llama.cpp's model layer in Rust: load a GGUF model zero-copy, run it through the backend
//! scheduler (tessera-sched: the CPU, and any devices layers were offloaded to) with a KV
//! cache, and sample from its logits.
//!
//! - [`Model::load`]: hyperparameters from the `{arch}.*` keys ([`HParams`]), the tokenizer
//!   (tessera-vocab) from `tokenizer.ggml.*`, every tensor bound in place to the file's mapping,
//!   and the architecture's graph builder, found by name in a registry ([`arch`]) that
//!   downstream crates can extend with [`arch::register`].
//! - [`LlamaContext`]: the KV cache (F16 by default, Q8_0 possible), micro-batching, masks,
//!   and [`LlamaContext::decode`], which builds each micro-batch's graph (or reuses the
//!   previous one's when the shape is the same), has the scheduler place, allocate and run it.
//! - [`placement`]: llama.cpp's `-ngl`/`-ts`/`-ot`/`--device` rules and the device registry.
//! - [`sampling`]: llama.cpp's sampler chain, with its mt19937 so a seed gives its tokens.
//! - [`embed`]: embeddings ([`ContextParams::embeddings`]): the final-norm rows of a
//!   sequence, pooled (mean, CLS, last) and normalized as llama.cpp's.
//!
//! Design decisions:
//! - **Graphs are rebuilt when the micro-batch's shape changes** from a base context holding
//!   the weights and cache tensors (cloning descriptors is cheap); a decode step of the same
//!   shape reuses the last graph (every changing value is an input), so a change of batch
//!   shape needs no special path and steady decoding skips the rebuild.
//! - **Cache writes are nodes on the path to the logits**: the attention reads the cache
//!   through the SET_ROWS results, so building the graph from the logits alone schedules the
//!   writes before the reads.
//! - **One cache for sliding-window layers too**: llama.cpp's default keeps a full-size SWA
//!   cache, which holds the same cells; only the mask differs.

#![deny(missing_docs)]

pub mod arch;
mod batch;
pub mod chat;
mod context;
pub mod embed;
mod error;
mod generator;
pub mod graph;
mod hparams;
mod kv_cache;
mod kv_override;
mod kv_shift;
pub mod lora;
mod model;
pub mod placement;
pub mod quantize;
pub mod sampling;
pub mod speculative;
pub mod synth;
mod text_stream;
mod weights;

pub use batch::Batch;
pub use context::{ContextParams, LlamaContext};
pub use embed::Pooling;
pub use error::{LlamaError, Result};
pub use generator::Generator;
pub use hparams::HParams;
pub use kv_cache::{Cell, CellOrder, KvCache, KvInputs, SeqState, MAX_SEQ};
pub use kv_override::{KvOverride, OverrideValue};
pub use lora::LoraAdapter;
pub use model::{LoadParams, Model};
pub use placement::{LayerPlan, Offload, TensorOverride};
pub use tessera_tensor::DType;
pub use tessera_vocab::Vocab;
pub use text_stream::{shown_end, Chunk, StreamEnd, TextStream};
pub use weights::Weights;
