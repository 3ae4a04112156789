//! Random-weight Granite files for tests: tessera-llama's synthetic `llama` model with its
//! `llama.*` keys renamed `granite.*` and Granite's scales added, tensors unchanged. The same
//! spec, seed and scales always give the same bytes.

use crate::Scales;
use std::path::Path;
use tessera_gguf::{GgufFile, GgufWriter, Metadata, Value};
use tessera_llama::synth::{write_random_model, SynthSpec};
use tessera_llama::{LlamaError, Result};

/// Writes a Granite model of `spec`'s shape (its `arch` is ignored) with `scales` to `path`,
/// the tokenizer taken from `vocab`.
pub fn write_random_granite(
    spec: &SynthSpec,
    scales: &Scales,
    vocab: &Metadata,
    path: &Path,
) -> Result<()> {
    let llama_path = path.with_extension("llama.gguf");
    let spec = SynthSpec { arch: "llama".into(), ..spec.clone() };
    write_random_model(&spec, vocab, &llama_path)?;
    let src = GgufFile::open(&llama_path)?;
    let g = LlamaError::Metadata;
    let mut w = GgufWriter::new();
    for (key, value) in src.metadata().iter() {
        let value = match key {
            "general.architecture" => Value::from("granite"),
            "general.name" => Value::from("tessera synthetic granite"),
            _ => value.clone(),
        };
        w.add(&key.replacen("llama.", "granite.", 1), value).map_err(g)?;
    }
    w.add("granite.embedding_scale", Value::F32(scales.embedding)).map_err(g)?;
    w.add("granite.residual_scale", Value::F32(scales.residual)).map_err(g)?;
    w.add("granite.attention.scale", Value::F32(scales.attention)).map_err(g)?;
    w.add("granite.logit_scale", Value::F32(scales.logit)).map_err(g)?;
    if !scales.rope {
        w.add("granite.rope.scaling.finetuned", Value::Bool(false)).map_err(g)?;
    }
    for t in src.tensors() {
        w.add_tensor(&t.name, t.dtype, t.shape(), src.tensor_data(t)).map_err(g)?;
    }
    w.write_file(path).map_err(g)?;
    drop(src);
    std::fs::remove_file(&llama_path).map_err(|e| LlamaError::BadValue {
        key: llama_path.display().to_string(),
        reason: e.to_string(),
    })?;
    Ok(())
}

/// The test model: 2 blocks of width 256 (4 query heads sharing 2 KV heads, FFN 512), Q8_0,
/// llama's SentencePiece vocabulary, and Granite 3.x's scales; the vocabulary fixture's name.
pub fn test_model() -> (SynthSpec, Scales, &'static str) {
    let spec = SynthSpec {
        arch: "granite".into(),
        n_layer: 2,
        n_embd: 256,
        n_head: 4,
        n_head_kv: 2,
        head_dim: 0,
        long_rope: false,
        n_ff: 512,
        n_ctx: 2048,
        n_expert: 0,
        n_expert_used: 0,
        dtype: tessera_tensor::DType::Q8_0,
        seed: 7,
    };
    let scales =
        Scales { embedding: 12.0, residual: 0.22, attention: 0.0078125, logit: 8.0, rope: true };
    (spec, scales, "ggml-vocab-llama-spm.gguf")
}
