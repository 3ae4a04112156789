//! Synthetic models: real architectures with random weights, written by tessera-gguf, for
//! architectures without a small real model here (qwen3, gpt2) and for benchmark shapes.
//! The same spec and seed always give the same bytes, so reference outputs made once with
//! llama.cpp stay valid (tests check the file's hash).

use crate::{LlamaError, Result};
use std::path::Path;
use tessera_gguf::{GgufWriter, Metadata, Value};
use tessera_tensor::{quant, DType};

mod models;
pub use models::{all_models, bench_shape, family_models, moe_models, test_models};

/// What to write.
#[derive(Debug, Clone, PartialEq)]
pub struct SynthSpec {
    /// `llama`, `qwen2`, `qwen2vl`, `qwen3`, `qwen3moe`, `gpt-oss`, `gemma2`, `phi3` or `gpt2`.
    pub arch: String,
    /// Blocks.
    pub n_layer: usize,
    /// Embedding width.
    pub n_embd: usize,
    /// Query heads.
    pub n_head: usize,
    /// KV heads.
    pub n_head_kv: usize,
    /// Head size (0: `n_embd / n_head`; written as `attention.key_length` otherwise).
    pub head_dim: usize,
    /// LongRoPE (`phi3` only): `rope_factors_long` / `_short` and `rope.scaling.attn_factor`,
    /// with an original context of 256 (a fourth of the 128k files' 4096 per 131072, rounded
    /// down to one cache step), so that a 512-cell context takes the long factors.
    pub long_rope: bool,
    /// FFN width (of one expert, with experts).
    pub n_ff: usize,
    /// Experts per block (`qwen3moe`, `gpt-oss`; 0 elsewhere).
    pub n_expert: usize,
    /// Experts per token.
    pub n_expert_used: usize,
    /// Training context (gpt2's position table has this many rows).
    pub n_ctx: usize,
    /// Type of the 2-D weights.
    pub dtype: DType,
    /// RNG seed.
    pub seed: u64,
}

impl SynthSpec {
    /// A small `arch` model with 2-D weights of `dtype`: 2 blocks 256 wide, 4 query and 2 KV
    /// heads, FFN 512, context 512, no experts, seed 5 (the tests change what they need with
    /// `..SynthSpec::small(..)`).
    pub fn small(arch: &str, dtype: DType) -> SynthSpec {
        SynthSpec {
            arch: arch.into(),
            n_layer: 2,
            n_embd: 256,
            n_head: 4,
            n_head_kv: 2,
            head_dim: 0,
            long_rope: false,
            n_ff: 512,
            n_ctx: 512,
            n_expert: 0,
            n_expert_used: 0,
            dtype,
            seed: 5,
        }
    }
}

struct Rng(u64);

impl Rng {
    /// Roughly normal values (sum of uniforms), deterministic.
    fn normal(&mut self) -> f32 {
        let mut s = 0.0;
        for _ in 0..4 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            s += (self.0 >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
        }
        s * 1.732
    }
}

fn err(reason: String) -> LlamaError {
    LlamaError::BadValue { key: "synth".into(), reason }
}

/// Writes a random-weight model of `spec` to `path`, with the tokenizer keys
/// (`tokenizer.*`) copied from `vocab`. Returns the vocabulary size used.
pub fn write_random_model(spec: &SynthSpec, vocab: &Metadata, path: &Path) -> Result<usize> {
    let a = spec.arch.as_str();
    if !matches!(
        a,
        "llama"
            | "qwen2"
            | "qwen2vl"
            | "qwen3"
            | "qwen3moe"
            | "gpt-oss"
            | "gemma2"
            | "phi3"
            | "gpt2"
    ) {
        return Err(err(format!("no synthetic layout for architecture '{a}'")));
    }
    let n_vocab = vocab.get_array("tokenizer.ggml.tokens")?.len();
    let hd = if spec.head_dim == 0 { spec.n_embd / spec.n_head } else { spec.head_dim };
    let e = spec.n_embd;
    let (nq, nkv, ff) = (hd * spec.n_head, hd * spec.n_head_kv, spec.n_ff);
    let mut w = GgufWriter::new();
    let g = |e: tessera_gguf::GgufError| LlamaError::Metadata(e);
    w.add("general.architecture", a).map_err(g)?;
    w.add("general.name", format!("tessera synthetic {a}").as_str()).map_err(g)?;
    w.add("general.file_type", Value::U32(if spec.dtype == DType::F32 { 0 } else { 1 }))
        .map_err(g)?;
    let k = |s: &str| format!("{a}.{s}");
    w.add(&k("block_count"), Value::U32(spec.n_layer as u32)).map_err(g)?;
    w.add(&k("context_length"), Value::U32(spec.n_ctx as u32)).map_err(g)?;
    w.add(&k("embedding_length"), Value::U32(e as u32)).map_err(g)?;
    let (oss, moe) = (a == "gpt-oss", a == "qwen3moe" || a == "gpt-oss");
    if moe {
        // As Qwen3-MoE's files: the dense width is the experts' times the experts used.
        let (n, used) = (spec.n_expert as u32, spec.n_expert_used as u32);
        w.add(&k("feed_forward_length"), Value::U32(ff as u32 * used)).map_err(g)?;
        w.add(&k("expert_feed_forward_length"), Value::U32(ff as u32)).map_err(g)?;
        w.add(&k("expert_count"), Value::U32(n)).map_err(g)?;
        w.add(&k("expert_used_count"), Value::U32(used)).map_err(g)?;
    } else {
        w.add(&k("feed_forward_length"), Value::U32(ff as u32)).map_err(g)?;
    }
    w.add(&k("attention.head_count"), Value::U32(spec.n_head as u32)).map_err(g)?;
    w.add(&k("attention.head_count_kv"), Value::U32(spec.n_head_kv as u32)).map_err(g)?;
    if spec.head_dim != 0 {
        w.add(&k("attention.key_length"), Value::U32(hd as u32)).map_err(g)?;
        w.add(&k("attention.value_length"), Value::U32(hd as u32)).map_err(g)?;
    }
    if spec.long_rope {
        // Phi-3-mini-128k's attention factor: sqrt(1 + ln(131072 / 4096) / ln(4096)).
        w.add(&k("rope.scaling.attn_factor"), Value::F32(1.190_238)).map_err(g)?;
        w.add(&k("rope.scaling.original_context_length"), Value::U32(256)).map_err(g)?;
    }
    if oss {
        // gpt-oss's RoPE: YaRN 32x from 4096 (its files' values); a window of 8 so that short
        // prompts reach past it.
        w.add(&k("rope.scaling.type"), "yarn").map_err(g)?;
        w.add(&k("rope.scaling.factor"), Value::F32(32.0)).map_err(g)?;
        w.add(&k("rope.scaling.original_context_length"), Value::U32(4096)).map_err(g)?;
        w.add(&k("attention.sliding_window"), Value::U32(8)).map_err(g)?;
    }
    if a == "gpt2" {
        w.add(&k("attention.layer_norm_epsilon"), Value::F32(1e-5)).map_err(g)?;
    } else {
        // llama.cpp b11312's qwen2vl ignores the key (its RMS norms use ε = 0): a qwen2vl
        // file says 0 so that both read the same.
        let eps = if a == "qwen2vl" { 0.0 } else { 1e-6 };
        w.add(&k("attention.layer_norm_rms_epsilon"), Value::F32(eps)).map_err(g)?;
        w.add(&k("rope.freq_base"), Value::F32(1_000_000.0)).map_err(g)?;
    }
    if a == "qwen2vl" {
        // Qwen2-VL's M-RoPE sections (16, 24, 24 of 64 pairs), scaled to the head.
        let pairs = (hd / 2) as i32;
        let s = [pairs / 4, pairs * 3 / 8, pairs * 3 / 8, 0];
        w.add(&k("rope.dimension_sections"), Value::Array(tessera_gguf::Array::I32(s.to_vec())))
            .map_err(g)?;
    }
    if a == "gemma2" {
        // Gemma 2's soft-caps; a window of 8 so that short prompts reach past it.
        w.add(&k("attn_logit_softcapping"), Value::F32(50.0)).map_err(g)?;
        w.add(&k("final_logit_softcapping"), Value::F32(30.0)).map_err(g)?;
        w.add(&k("attention.sliding_window"), Value::U32(8)).map_err(g)?;
    }
    for (key, value) in vocab.iter().filter(|(k, _)| k.starts_with("tokenizer.")) {
        w.add(key, value.clone()).map_err(g)?;
    }

    let mut rng = Rng(spec.seed | 1);
    let mut tensors: Vec<(String, DType, Vec<u64>, Vec<u8>)> = Vec::new();
    let mut add = |name: String, shape: &[usize], kind: Kind, rng: &mut Rng| -> Result<()> {
        let n: usize = shape.iter().product();
        let vals: Vec<f32> = match kind {
            Kind::Norm => (0..n).map(|_| 1.0 + 0.1 * rng.normal()).collect(),
            Kind::Sink => (0..n).map(|_| 1.0 + rng.normal()).collect(),
            Kind::LongFactor => (0..n).map(|_| 1.0 + 10.0 * rng.normal().abs()).collect(),
            Kind::ShortFactor => (0..n).map(|_| 1.0 + 0.2 * rng.normal().abs()).collect(),
            Kind::Bias => (0..n).map(|_| 0.02 * rng.normal()).collect(),
            Kind::Matrix | Kind::Router => {
                let s = 1.0 / (shape[0] as f32).sqrt();
                (0..n).map(|_| s * rng.normal()).collect()
            }
        };
        let dtype = if shape.len() == 1 || kind != Kind::Matrix { DType::F32 } else { spec.dtype };
        let bytes = quant::quantize(dtype, &vals)?;
        tensors.push((name, dtype, shape.iter().map(|&d| d as u64).collect(), bytes));
        Ok(())
    };
    add("token_embd.weight".into(), &[e, n_vocab], Kind::Matrix, &mut rng)?;
    if spec.long_rope {
        // Frequency divisors as Phi-3's: near 1 for short contexts, up to tens for long ones.
        add("rope_factors_long.weight".into(), &[hd / 2], Kind::LongFactor, &mut rng)?;
        add("rope_factors_short.weight".into(), &[hd / 2], Kind::ShortFactor, &mut rng)?;
    }
    if a == "gpt2" {
        add("position_embd.weight".into(), &[e, spec.n_ctx], Kind::Matrix, &mut rng)?;
    }
    for il in 0..spec.n_layer {
        let b = |s: &str| format!("blk.{il}.{s}");
        add(b("attn_norm.weight"), &[e], Kind::Norm, &mut rng)?;
        if a == "gpt2" {
            add(b("attn_norm.bias"), &[e], Kind::Bias, &mut rng)?;
            add(b("attn_qkv.weight"), &[e, nq + 2 * nkv], Kind::Matrix, &mut rng)?;
            add(b("attn_qkv.bias"), &[nq + 2 * nkv], Kind::Bias, &mut rng)?;
            add(b("attn_output.weight"), &[nq, e], Kind::Matrix, &mut rng)?;
            add(b("attn_output.bias"), &[e], Kind::Bias, &mut rng)?;
            add(b("ffn_norm.weight"), &[e], Kind::Norm, &mut rng)?;
            add(b("ffn_norm.bias"), &[e], Kind::Bias, &mut rng)?;
            add(b("ffn_up.weight"), &[e, ff], Kind::Matrix, &mut rng)?;
            add(b("ffn_up.bias"), &[ff], Kind::Bias, &mut rng)?;
            add(b("ffn_down.weight"), &[ff, e], Kind::Matrix, &mut rng)?;
            add(b("ffn_down.bias"), &[e], Kind::Bias, &mut rng)?;
            continue;
        }
        if a == "phi3" {
            add(b("attn_qkv.weight"), &[e, nq + 2 * nkv], Kind::Matrix, &mut rng)?;
            add(b("attn_output.weight"), &[nq, e], Kind::Matrix, &mut rng)?;
            add(b("ffn_norm.weight"), &[e], Kind::Norm, &mut rng)?;
            add(b("ffn_up.weight"), &[e, 2 * ff], Kind::Matrix, &mut rng)?;
            add(b("ffn_down.weight"), &[ff, e], Kind::Matrix, &mut rng)?;
            continue;
        }
        add(b("attn_q.weight"), &[e, nq], Kind::Matrix, &mut rng)?;
        add(b("attn_k.weight"), &[e, nkv], Kind::Matrix, &mut rng)?;
        add(b("attn_v.weight"), &[e, nkv], Kind::Matrix, &mut rng)?;
        if a == "qwen2" || a == "qwen2vl" {
            add(b("attn_q.bias"), &[nq], Kind::Bias, &mut rng)?;
            add(b("attn_k.bias"), &[nkv], Kind::Bias, &mut rng)?;
            add(b("attn_v.bias"), &[nkv], Kind::Bias, &mut rng)?;
        }
        if a == "qwen3" || a == "qwen3moe" {
            add(b("attn_q_norm.weight"), &[hd], Kind::Norm, &mut rng)?;
            add(b("attn_k_norm.weight"), &[hd], Kind::Norm, &mut rng)?;
        }
        add(b("attn_output.weight"), &[nq, e], Kind::Matrix, &mut rng)?;
        if oss {
            add(b("attn_q.bias"), &[nq], Kind::Bias, &mut rng)?;
            add(b("attn_k.bias"), &[nkv], Kind::Bias, &mut rng)?;
            add(b("attn_v.bias"), &[nkv], Kind::Bias, &mut rng)?;
            add(b("attn_output.bias"), &[e], Kind::Bias, &mut rng)?;
            add(b("attn_sinks.weight"), &[spec.n_head], Kind::Sink, &mut rng)?;
            add(b("post_attention_norm.weight"), &[e], Kind::Norm, &mut rng)?;
            let n = spec.n_expert;
            add(b("ffn_gate_inp.weight"), &[e, n], Kind::Router, &mut rng)?;
            add(b("ffn_gate_inp.bias"), &[n], Kind::Bias, &mut rng)?;
            add(b("ffn_gate_exps.weight"), &[e, ff, n], Kind::Matrix, &mut rng)?;
            add(b("ffn_gate_exps.bias"), &[ff, n], Kind::Bias, &mut rng)?;
            add(b("ffn_up_exps.weight"), &[e, ff, n], Kind::Matrix, &mut rng)?;
            add(b("ffn_up_exps.bias"), &[ff, n], Kind::Bias, &mut rng)?;
            add(b("ffn_down_exps.weight"), &[ff, e, n], Kind::Matrix, &mut rng)?;
            add(b("ffn_down_exps.bias"), &[e, n], Kind::Bias, &mut rng)?;
            continue;
        }
        if a == "gemma2" {
            add(b("post_attention_norm.weight"), &[e], Kind::Norm, &mut rng)?;
        }
        add(b("ffn_norm.weight"), &[e], Kind::Norm, &mut rng)?;
        if moe {
            // The router stays F32, as llama.cpp's converter and quantizer keep it.
            let n = spec.n_expert;
            add(b("ffn_gate_inp.weight"), &[e, n], Kind::Router, &mut rng)?;
            add(b("ffn_gate_exps.weight"), &[e, ff, n], Kind::Matrix, &mut rng)?;
            add(b("ffn_up_exps.weight"), &[e, ff, n], Kind::Matrix, &mut rng)?;
            add(b("ffn_down_exps.weight"), &[ff, e, n], Kind::Matrix, &mut rng)?;
            continue;
        }
        add(b("ffn_gate.weight"), &[e, ff], Kind::Matrix, &mut rng)?;
        add(b("ffn_up.weight"), &[e, ff], Kind::Matrix, &mut rng)?;
        add(b("ffn_down.weight"), &[ff, e], Kind::Matrix, &mut rng)?;
        if a == "gemma2" {
            add(b("post_ffw_norm.weight"), &[e], Kind::Norm, &mut rng)?;
        }
    }
    add("output_norm.weight".into(), &[e], Kind::Norm, &mut rng)?;
    if oss {
        add("output.weight".into(), &[e, n_vocab], Kind::Matrix, &mut rng)?;
    }
    if a == "gpt2" {
        add("output_norm.bias".into(), &[e], Kind::Bias, &mut rng)?;
    }
    for (name, dtype, shape, bytes) in tensors {
        w.add_tensor(&name, dtype, &shape, bytes).map_err(g)?;
    }
    w.write_file(path)
        .map_err(|source| LlamaError::Gguf { path: path.display().to_string(), source })?;
    Ok(n_vocab)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Norm,
    Bias,
    /// Attention sinks: logits around 1.
    Sink,
    /// LongRoPE's frequency divisors for long contexts (1 to about 40).
    LongFactor,
    /// ... and for short ones (1 to about 1.8).
    ShortFactor,
    Matrix,
    /// A matrix kept in F32 (a mixture-of-experts router).
    Router,
}

/// A random LoRA adapter ([`write_random_lora`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RandomLora {
    /// The weights of every block it changes (`attn_q`, `ffn_up`, ...).
    pub targets: Vec<String>,
    /// Its rank.
    pub rank: usize,
    /// Values are uniform in `[-amp, amp]`.
    pub amp: f32,
    /// `adapter.lora.alpha` (none: the scale is used as is).
    pub alpha: Option<f32>,
    /// `adapter.lora.task_name`, if any.
    pub task_name: Option<String>,
    /// RNG seed.
    pub seed: u64,
}

/// Writes a random F32 LoRA adapter for `model` to `path`: a `lora_a`/`lora_b` pair for each
/// block's `spec.targets`, shaped from the model's weights. Returns the pairs written.
pub fn write_random_lora(model: &crate::Model, spec: &RandomLora, path: &Path) -> Result<usize> {
    let mut w = GgufWriter::new();
    w.add("general.architecture", model.hparams.arch.as_str())?;
    w.add("general.type", "adapter")?;
    w.add("adapter.type", "lora")?;
    if let Some(a) = spec.alpha {
        w.add("adapter.lora.alpha", a)?;
    }
    if let Some(t) = &spec.task_name {
        w.add("adapter.lora.task_name", t.as_str())?;
    }
    let mut state = spec.seed | 1;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        ((state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * spec.amp
    };
    let mut n = 0;
    for il in 0..model.hparams.n_layer {
        for t in &spec.targets {
            let base = format!("blk.{il}.{t}.weight");
            let id = model
                .weights
                .id(&base)
                .ok_or_else(|| crate::LlamaError::MissingTensor(base.clone()))?;
            let ne = model.weights.ctx.get(id).ne;
            for (half, d0, d1) in [("lora_a", ne[0], spec.rank), ("lora_b", spec.rank, ne[1])] {
                let bytes: Vec<u8> = (0..d0 * d1).flat_map(|_| next().to_le_bytes()).collect();
                w.add_tensor(
                    &format!("{base}.{half}"),
                    DType::F32,
                    &[d0 as u64, d1 as u64],
                    bytes,
                )?;
            }
            n += 1;
        }
    }
    w.write_file(path)?;
    Ok(n)
}
