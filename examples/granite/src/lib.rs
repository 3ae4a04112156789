//! # tessera-granite
//!
//! IBM's Granite 3.x dense models (llama.cpp's `granite` architecture) for tessera-llama,
//! defined in a crate of their own through the public registry: the example of a downstream
//! model crate. It depends only on tessera-llama's public API (the [`Architecture`] and
//! [`ModelGraph`] traits, the graph [`Builder`], [`Weights`] and their metadata), so an
//! architecture Tessera's own crate lacks can be added without forking it.
//!
//! Granite is Llama with four scales, read from `granite.*` keys: the token embeddings times
//! `embedding_scale`, `attention.scale` as the KQ scale (instead of `1/sqrt(head_dim)`), each
//! block's attention and FFN outputs times `residual_scale` before their residual additions,
//! and the logits divided by `logit_scale`. `rope.scaling.finetuned = false` turns RoPE off.
//! The graph is llama.cpp's `llm_build_granite` (`src/models/granite.cpp`), node for node, so
//! the logits are its bits. Granite's MoE variants (`granitemoe`) are not covered.
//!
//! ```no_run
//! tessera_granite::register();
//! let cpu = tessera_backend_cpu::CpuDevice::shared();
//! let model = tessera_llama::Model::load("granite-3.3-2b-instruct-Q4_K_M.gguf", cpu)?;
//! # Ok::<(), tessera_llama::LlamaError>(())
//! ```

#![deny(missing_docs)]
// The registry's traits return tessera-llama's error type, whatever its size.
#![allow(clippy::result_large_err)]

use std::sync::Arc;
use tessera_gguf::{Metadata, Value};
use tessera_llama::arch::{Architecture, ModelGraph};
use tessera_llama::graph::Builder;
use tessera_llama::{HParams, LlamaError, Result, Weights};
use tessera_tensor::graph::{RopeMode, TensorId};

pub mod synth;

/// The `granite` architecture.
pub struct Granite;

/// Registers [`Granite`] in tessera-llama's architecture registry (once is enough; again is
/// harmless).
pub fn register() {
    tessera_llama::arch::register(Arc::new(Granite));
}

/// Granite's own hyperparameters (`granite.*`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scales {
    /// Multiplies the token embeddings (0: none).
    pub embedding: f32,
    /// Multiplies each attention and FFN output before its residual addition (0: none).
    pub residual: f32,
    /// The KQ scale (0: `1/sqrt(head_dim)`).
    pub attention: f32,
    /// Divides the logits (required).
    pub logit: f32,
    /// RoPE on (`rope.scaling.finetuned`, true when absent).
    pub rope: bool,
}

fn f32_key(md: &Metadata, key: &str, required: bool) -> Result<f32> {
    match md.get(key) {
        None if !required => Ok(0.0),
        None => Err(LlamaError::BadValue { key: key.into(), reason: "missing".into() }),
        Some(_) => Ok(md.get_f32(key)?),
    }
}

impl Scales {
    /// Reads the `granite.*` keys.
    pub fn from_metadata(md: &Metadata) -> Result<Scales> {
        let rope = match md.get("granite.rope.scaling.finetuned") {
            None => true,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                return Err(LlamaError::BadValue {
                    key: "granite.rope.scaling.finetuned".into(),
                    reason: format!("expected a boolean, got {other:?}"),
                })
            }
        };
        let s = Scales {
            embedding: f32_key(md, "granite.embedding_scale", false)?,
            residual: f32_key(md, "granite.residual_scale", false)?,
            attention: f32_key(md, "granite.attention.scale", false)?,
            logit: f32_key(md, "granite.logit_scale", true)?,
            rope,
        };
        if s.logit == 0.0 || !s.logit.is_finite() {
            return Err(LlamaError::BadValue {
                key: "granite.logit_scale".into(),
                reason: format!("{} cannot divide the logits", s.logit),
            });
        }
        Ok(s)
    }
}

/// One block's weights.
#[derive(Debug, Clone, Copy)]
struct Block {
    attn_norm: TensorId,
    wq: TensorId,
    wk: TensorId,
    wv: TensorId,
    wo: TensorId,
    bo: Option<TensorId>,
    ffn_norm: TensorId,
    up: TensorId,
    gate: TensorId,
    down: TensorId,
    rope_freqs: Option<TensorId>,
}

struct GraniteGraph {
    scales: Scales,
    tok_embd: TensorId,
    output_norm: TensorId,
    output: TensorId,
    blocks: Vec<Block>,
}

impl Architecture for Granite {
    fn name(&self) -> &'static str {
        "granite"
    }

    fn load(&self, w: &Weights, hp: &HParams) -> Result<Box<dyn ModelGraph>> {
        let scales = Scales::from_metadata(w.metadata())?;
        let (e, v) = (hp.n_embd, hp.n_vocab);
        let tok_embd = w.get("token_embd.weight", &[e, v])?;
        let output = w.find("output.weight", &[e, v])?.unwrap_or(tok_embd);
        let blocks = (0..hp.n_layer)
            .map(|il| {
                let t = |what: &str| format!("blk.{il}.{what}");
                let (nq, nk, nv) =
                    (hp.head_dim_k * hp.n_head[il], hp.n_embd_k_gqa(il), hp.n_embd_v_gqa(il));
                let ff = hp.n_ff[il];
                // Llama 3-style frequency factors: one tensor, which every block reads.
                let rope_freqs = w.find("rope_freqs.weight", &[hp.n_rot / 2])?;
                Ok(Block {
                    attn_norm: w.get(&t("attn_norm.weight"), &[e])?,
                    wq: w.get(&t("attn_q.weight"), &[e, nq])?,
                    wk: w.get(&t("attn_k.weight"), &[e, nk])?,
                    wv: w.get(&t("attn_v.weight"), &[e, nv])?,
                    wo: w.get(&t("attn_output.weight"), &[nq, e])?,
                    bo: w.find(&t("attn_output.bias"), &[e])?,
                    ffn_norm: w.get(&t("ffn_norm.weight"), &[e])?,
                    up: w.get(&t("ffn_up.weight"), &[e, ff])?,
                    gate: w.get(&t("ffn_gate.weight"), &[e, ff])?,
                    down: w.get(&t("ffn_down.weight"), &[ff, e])?,
                    rope_freqs,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Box::new(GraniteGraph {
            scales,
            tok_embd,
            output_norm: w.get("output_norm.weight", &[e])?,
            output,
            blocks,
        }))
    }
}

impl GraniteGraph {
    /// `x · residual_scale` where Granite scales (llama.cpp skips the node when it is 0).
    fn residual(&self, b: &mut Builder, x: TensorId) -> Result<TensorId> {
        Ok(match self.scales.residual {
            s if s != 0.0 => b.ctx.scale(x, s, 0.0)?,
            _ => x,
        })
    }
}

impl ModelGraph for GraniteGraph {
    fn build(&self, b: &mut Builder) -> Result<TensorId> {
        let hp = b.hp;
        let n_tok = b.n_tokens;
        let mut inp = b.inp_embd(self.tok_embd)?;
        if self.scales.embedding != 0.0 {
            inp = b.ctx.scale(inp, self.scales.embedding, 0.0)?;
        }
        let kq_scale = match self.scales.attention {
            s if s != 0.0 => s,
            _ => b.kq_scale(),
        };
        for (il, l) in self.blocks.iter().enumerate() {
            let cur = b.rms_norm(inp, Some(l.attn_norm))?;
            let cur = b.name(cur, "attn_norm", il);
            let q = b.linear(l.wq, None, cur)?;
            let k = b.linear(l.wk, None, cur)?;
            let v = b.linear(l.wv, None, cur)?;
            let mut q = b.ctx.reshape(q, &[hp.head_dim_k, hp.n_head[il], n_tok])?;
            let mut k = b.ctx.reshape(k, &[hp.head_dim_k, hp.n_head_kv[il], n_tok])?;
            let v = b.ctx.reshape(v, &[hp.head_dim_v, hp.n_head_kv[il], n_tok])?;
            if self.scales.rope {
                q = b.rope(q, RopeMode::Norm, hp.rope_freq_base, l.rope_freqs)?;
                k = b.rope(k, RopeMode::Norm, hp.rope_freq_base, l.rope_freqs)?;
            }
            let q = b.name(q, "Qcur", il);
            let k = b.name(k, "Kcur", il);
            let a = b.attention(il, q, k, v, kq_scale)?;
            let mut cur = b.linear(l.wo, l.bo, a)?;
            if il == self.blocks.len() - 1 {
                cur = b.out_rows(cur)?;
                inp = b.out_rows(inp)?;
            }
            let cur = self.residual(b, cur)?;
            let ffn_inp = b.ctx.add(cur, inp)?;
            let ffn_inp = b.name(ffn_inp, "ffn_inp", il);
            let cur = b.rms_norm(ffn_inp, Some(l.ffn_norm))?;
            let cur = b.name(cur, "ffn_norm", il);
            let cur = b.ffn_swiglu(cur, l.up, l.gate, l.down, il)?;
            let cur = self.residual(b, cur)?;
            inp = b.ctx.add(cur, ffn_inp)?;
            inp = b.name(inp, "l_out", il);
        }
        let cur = b.rms_norm(inp, Some(self.output_norm))?;
        let cur = b.ctx.set_name(cur, "result_norm");
        if b.embeddings {
            return Ok(b.ctx.set_output(cur));
        }
        let logits = b.linear(self.output, None, cur)?;
        let logits = b.ctx.scale(logits, 1.0 / self.scales.logit, 0.0)?;
        let logits = b.ctx.set_name(logits, "result_output");
        Ok(b.ctx.set_output(logits))
    }
}
