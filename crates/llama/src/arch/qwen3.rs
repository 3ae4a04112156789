//! QWEN3: RoPE NEOX, no QKV biases, and per-head RMS norms of Q and K before RoPE
//! (`src/models/qwen3.cpp`); QWEN3MOE, the same with experts.

use super::llama::load_llama_like;
use super::{Architecture, ModelGraph};
use crate::hparams::HParams;
use crate::weights::Weights;
use crate::Result;
use tessera_tensor::graph::RopeMode;

/// The `qwen3` architecture.
pub struct Qwen3;

impl Architecture for Qwen3 {
    fn name(&self) -> &'static str {
        "qwen3"
    }
    fn load(&self, w: &Weights, hp: &HParams) -> Result<Box<dyn ModelGraph>> {
        load_llama_like(w, hp, RopeMode::Neox, true)
    }
}

/// The `qwen3moe` architecture (Qwen3-30B-A3B, Qwen3-235B-A22B, Qwen3-Coder-30B-A3B): qwen3's
/// attention with a mixture of SwiGLU experts in every block, softmax routing with the chosen
/// experts' weights normalized (`src/models/qwen3moe.cpp`).
pub struct Qwen3Moe;

impl Architecture for Qwen3Moe {
    fn name(&self) -> &'static str {
        "qwen3moe"
    }
    fn load(&self, w: &Weights, hp: &HParams) -> Result<Box<dyn ModelGraph>> {
        if hp.n_expert == 0 {
            return Err(crate::LlamaError::BadValue {
                key: "qwen3moe.expert_count".into(),
                reason: "missing or 0: qwen3moe needs experts".into(),
            });
        }
        load_llama_like(w, hp, RopeMode::Neox, true)
    }
}
