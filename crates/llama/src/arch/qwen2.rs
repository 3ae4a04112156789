//! QWEN2 (Qwen2, Qwen2.5): the llama graph with RoPE NEOX and Q/K/V biases
//! (`src/models/qwen2.cpp`); the biases are found by name when present. QWEN2VL (the language
//! model of Qwen2-VL and Qwen2.5-VL, `src/models/qwen2vl.cpp`): the same graph with M-RoPE,
//! four positions a token in `rope.dimension_sections`.

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

/// The `qwen2vl` architecture.
pub struct Qwen2Vl;

impl Architecture for Qwen2Vl {
    fn name(&self) -> &'static str {
        "qwen2vl"
    }
    fn load(&self, w: &Weights, hp: &HParams) -> Result<Box<dyn ModelGraph>> {
        let Some(sections) = hp.rope_sections else {
            return Err(crate::LlamaError::BadValue {
                key: "qwen2vl.rope.dimension_sections".into(),
                reason: "missing: M-RoPE needs its sections".into(),
            });
        };
        load_llama_like(w, hp, RopeMode::Mrope(sections), false)
    }
}
