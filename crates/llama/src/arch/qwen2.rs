//! QWEN2 (Qwen2, Qwen2.5): the llama graph with RoPE NEOX and Q/K/V biases
//! (`src/models/qwen2.cpp`); the biases are found by name when present.

use super::llama::load_llama_like;
use super::{Architecture, ModelGraph};
use crate::hparams::HParams;
use crate::weights::Weights;
use crate::Result;
use tessera_tensor::graph::RopeMode;

/// The `qwen2` architecture.
pub struct Qwen2;

impl Architecture for Qwen2 {
    fn name(&self) -> &'static str {
        "qwen2"
    }
    fn load(&self, w: &Weights, hp: &HParams) -> Result<Box<dyn ModelGraph>> {
        load_llama_like(w, hp, RopeMode::Neox, false)
    }
}
