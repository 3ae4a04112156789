//! QWEN3: RoPE NEOX, no QKV biases, and per-head RMS norms of Q and K before RoPE
//! (`src/models/qwen3.cpp`).

use super::llama::load_llama_like;
use super::{Architecture, ModelGraph};
use crate::hparams::HParams;
use crate::model::Weights;
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
