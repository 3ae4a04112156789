//! The architecture registry: one module per architecture, each building the same graph
//! llama.cpp builds (`src/models/*.cpp`). Downstream crates add their own with [`register`].

mod gemma;
mod gpt2;
mod gpt_oss;
mod llama;
mod phi3;
mod qwen2;
mod qwen3;

use crate::graph::Builder;
use crate::hparams::HParams;
use crate::weights::Weights;
use crate::{LlamaError, Result};
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock, RwLock};
use tessera_tensor::graph::TensorId;

/// An architecture: how to find its weights in a GGUF file.
pub trait Architecture: Send + Sync {
    /// The `general.architecture` value it handles.
    fn name(&self) -> &'static str;
    /// Picks and shape-checks the weights, returning the graph builder that holds them.
    fn load(&self, weights: &Weights, hp: &HParams) -> Result<Box<dyn ModelGraph>>;
}

/// A loaded architecture's forward pass.
pub trait ModelGraph: Send + Sync {
    /// Builds the graph of one micro-batch on `b` (inputs, KV cache views and masks are
    /// ready there) and returns the logits tensor, `[n_vocab, n_outputs]`; in an embeddings
    /// context (`b.embeddings`), the final norm's output `[n_embd, n_outputs]`, which
    /// [`Builder::logits`] returns there.
    fn build(&self, b: &mut Builder) -> Result<TensorId>;
}

type Registry = RwLock<BTreeMap<&'static str, Arc<dyn Architecture>>>;

fn registry() -> &'static Registry {
    static REG: OnceLock<Registry> = OnceLock::new();
    REG.get_or_init(|| {
        let builtins: [Arc<dyn Architecture>; 9] = [
            Arc::new(llama::Llama),
            Arc::new(qwen2::Qwen2),
            Arc::new(qwen3::Qwen3),
            Arc::new(qwen3::Qwen3Moe),
            Arc::new(gemma::Gemma2),
            Arc::new(gemma::Gemma3),
            Arc::new(gpt2::Gpt2),
            Arc::new(gpt_oss::GptOss),
            Arc::new(phi3::Phi3),
        ];
        RwLock::new(builtins.into_iter().map(|a| (a.name(), a)).collect())
    })
}

/// Adds (or replaces) an architecture.
pub fn register(arch: Arc<dyn Architecture>) {
    registry().write().unwrap_or_else(|e| e.into_inner()).insert(arch.name(), arch);
}

/// The names of every registered architecture.
pub fn names() -> Vec<&'static str> {
    registry().read().unwrap_or_else(|e| e.into_inner()).keys().copied().collect()
}

/// The architecture called `name`.
pub fn lookup(name: &str) -> Result<Arc<dyn Architecture>> {
    registry()
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(name)
        .cloned()
        .ok_or_else(|| LlamaError::UnknownArchitecture(name.to_string(), names().join(", ")))
}

/// Per-layer tensor name `blk.{il}.{what}.weight` / `.bias`.
pub(crate) fn blk(il: usize, what: &str) -> String {
    format!("blk.{il}.{what}")
}
