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

    /// How layer `il` of a model of hyperparameters `hp` rotates K by position, for shifting
    /// the cache's positions (llama.cpp's `build_rope_shift` arguments); `kv_size` is the
    /// cache's size (some factors depend on the context). The default,
    /// [`KRope::Unsupported`], makes a context shift an error.
    fn k_rope(&self, hp: &HParams, il: usize, kv_size: usize) -> KRope {
        let _ = (hp, il, kv_size);
        KRope::Unsupported
    }
}

/// How a layer's cached K depends on position ([`ModelGraph::k_rope`]).
#[derive(Debug, Clone, Copy)]
pub enum KRope {
    /// K is rotated by RoPE with this mode, frequency base and frequency factors (a model
    /// weight); the hyperparameters give the rest (`graph::rope_params`).
    Rope {
        /// The rotation's pairing.
        mode: tessera_tensor::graph::RopeMode,
        /// Its frequency base (a sliding-window layer's may differ).
        freq_base: f32,
        /// Per-pair frequency divisors (Llama 3's `rope_freqs`, Phi-3's long/short factors).
        factors: Option<TensorId>,
    },
    /// K holds no position (learned absolute positions, as GPT-2's): a shift changes only
    /// the cells' positions.
    Absolute,
    /// The architecture does not say: shifting its context is refused.
    Unsupported,
}

type Registry = RwLock<BTreeMap<&'static str, Arc<dyn Architecture>>>;

fn registry() -> &'static Registry {
    static REG: OnceLock<Registry> = OnceLock::new();
    REG.get_or_init(|| {
        let builtins: [Arc<dyn Architecture>; 10] = [
            Arc::new(llama::Llama),
            Arc::new(qwen2::Qwen2),
            Arc::new(qwen2::Qwen2Vl),
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
