//! GEMMA2 and GEMMA3 (`src/models/gemma2.cpp`, `gemma3.cpp`): one graph with two variants.
//!
//! Both: embeddings scaled by `sqrt(n_embd)`, RoPE NEOX, Q pre-scaled by
//! `HParams::attention_scale` with a KQ scale of 1, sandwich norms around attention and FFN,
//! GEGLU (tanh GELU), sliding-window layers with their own mask and RoPE base, final logit
//! soft-capping where the model has it. The converters already added 1 to the norm weights, so
//! norms are plain RMS norm times weight. Everything else that differs is a hyperparameter
//! (`hparams.rs` sets each one's defaults as llama.cpp does).
//!
//! - Gemma 3: per-head Q/K RMS norms before RoPE; 5 sliding layers per global one (base 10000
//!   on the sliding ones); an own `output.weight` allowed.
//! - Gemma 2: no Q/K norms; attention logits soft-capped (50), final logits too (30); every
//!   other layer sliding from layer 0 (window 4096 unless the file says); the output head is
//!   always the embedding matrix (llama.cpp duplicates it: a file with its own
//!   `output.weight` has an unused tensor); Q scaled by `1/sqrt(n_embd/n_head)` on the 27B.

use super::{blk, Architecture, ModelGraph};
use crate::graph::Builder;
use crate::hparams::HParams;
use crate::weights::Weights;
use crate::Result;
use tessera_tensor::graph::{GluOp, RopeMode, TensorId};

/// The `gemma2` architecture.
pub struct Gemma2;

/// The `gemma3` architecture.
pub struct Gemma3;

#[derive(Debug, Clone, Copy)]
struct Block {
    attn_norm: TensorId,
    wq: TensorId,
    wk: TensorId,
    wv: TensorId,
    wo: TensorId,
    /// Gemma 3's per-head Q/K norms.
    qk_norm: Option<(TensorId, TensorId)>,
    post_attn_norm: TensorId,
    ffn_norm: TensorId,
    up: TensorId,
    gate: TensorId,
    down: TensorId,
    post_ffw_norm: TensorId,
}

struct GemmaGraph {
    tok_embd: TensorId,
    output_norm: TensorId,
    output: TensorId,
    blocks: Vec<Block>,
    /// Gemma 3 scales token embeddings only (an image's embeddings enter as they are).
    gemma3: bool,
}

/// Loads either variant: `gemma3` has Q/K norms and may have its own output matrix.
fn load(w: &Weights, hp: &HParams, gemma3: bool) -> Result<Box<dyn ModelGraph>> {
    let (e, v) = (hp.n_embd, hp.n_vocab);
    let tok_embd = w.get("token_embd.weight", &[e, v])?;
    let blocks = (0..hp.n_layer)
        .map(|il| {
            let t = |what: &str| blk(il, what);
            let (nq, ff) = (hp.head_dim_k * hp.n_head[il], hp.n_ff[il]);
            let qk_norm = if gemma3 {
                Some((
                    w.get(&t("attn_q_norm.weight"), &[hp.head_dim_k])?,
                    w.get(&t("attn_k_norm.weight"), &[hp.head_dim_k])?,
                ))
            } else {
                None
            };
            Ok(Block {
                attn_norm: w.get(&t("attn_norm.weight"), &[e])?,
                wq: w.get(&t("attn_q.weight"), &[e, nq])?,
                wk: w.get(&t("attn_k.weight"), &[e, hp.n_embd_k_gqa(il)])?,
                wv: w.get(&t("attn_v.weight"), &[e, hp.n_embd_v_gqa(il)])?,
                wo: w.get(&t("attn_output.weight"), &[hp.head_dim_v * hp.n_head[il], e])?,
                qk_norm,
                post_attn_norm: w.get(&t("post_attention_norm.weight"), &[e])?,
                ffn_norm: w.get(&t("ffn_norm.weight"), &[e])?,
                up: w.get(&t("ffn_up.weight"), &[e, ff])?,
                gate: w.get(&t("ffn_gate.weight"), &[e, ff])?,
                down: w.get(&t("ffn_down.weight"), &[ff, e])?,
                post_ffw_norm: w.get(&t("post_ffw_norm.weight"), &[e])?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let output = if gemma3 { w.find("output.weight", &[e, v])? } else { None };
    Ok(Box::new(GemmaGraph {
        tok_embd,
        output_norm: w.get("output_norm.weight", &[e])?,
        output: output.unwrap_or(tok_embd),
        blocks,
        gemma3,
    }))
}

impl Architecture for Gemma2 {
    fn name(&self) -> &'static str {
        "gemma2"
    }

    fn load(&self, w: &Weights, hp: &HParams) -> Result<Box<dyn ModelGraph>> {
        load(w, hp, false)
    }
}

impl Architecture for Gemma3 {
    fn name(&self) -> &'static str {
        "gemma3"
    }

    fn load(&self, w: &Weights, hp: &HParams) -> Result<Box<dyn ModelGraph>> {
        load(w, hp, true)
    }
}

impl ModelGraph for GemmaGraph {
    fn k_rope(&self, hp: &HParams, il: usize, _kv_size: usize) -> super::KRope {
        let freq_base = if hp.is_swa(il) { hp.rope_freq_base_swa } else { hp.rope_freq_base };
        super::KRope::Rope { mode: RopeMode::Neox, freq_base, factors: None }
    }

    fn build(&self, b: &mut Builder) -> Result<TensorId> {
        let hp = b.hp;
        let n_tok = b.n_tokens;
        let x = b.inp_embd(self.tok_embd)?;
        // gemma3.cpp: `ubatch.token ? sqrtf(n_embd) : 1.0f` (a scale by 1 still: same bits).
        let s = if !self.gemma3 || b.token_input() { (hp.n_embd as f32).sqrt() } else { 1.0 };
        let mut inp = b.ctx.scale(x, s, 0.0)?;
        for (il, l) in self.blocks.iter().enumerate() {
            let base = if hp.is_swa(il) { hp.rope_freq_base_swa } else { hp.rope_freq_base };
            let cur = b.rms_norm(inp, Some(l.attn_norm))?;
            let cur = b.name(cur, "attn_norm", il);
            let [q, k, v] = b.linear_same_input(cur, [(l.wq, None), (l.wk, None), (l.wv, None)])?;
            let q = b.name(q, "q_proj", il);
            let mut q = b.ctx.reshape(q, &[hp.head_dim_k, hp.n_head[il], n_tok])?;
            let mut k = b.ctx.reshape(k, &[hp.head_dim_k, hp.n_head_kv[il], n_tok])?;
            let v = b.ctx.reshape(v, &[hp.head_dim_v, hp.n_head_kv[il], n_tok])?;
            if let Some((qn, kn)) = l.qk_norm {
                q = b.rms_norm(q, Some(qn))?;
                q = b.name(q, "Qcur_normed", il);
                k = b.rms_norm(k, Some(kn))?;
            }
            let q = b.rope(q, RopeMode::Neox, base, None)?;
            let k = b.rope(k, RopeMode::Neox, base, None)?;
            let q = b.name(q, "Qcur", il);
            let k = b.name(k, "Kcur", il);
            let q = b.ctx.scale(q, hp.attention_scale, 0.0)?;
            let a = b.attention(il, q, k, v, 1.0)?;
            let cur = b.mm(l.wo, a)?;
            // Row by row: the same bits before or after keeping the output rows.
            let mut cur = b.rms_norm(cur, Some(l.post_attn_norm))?;
            cur = b.name(cur, "attn_post_norm", il);
            if il == self.blocks.len() - 1 {
                cur = b.out_rows(cur)?;
                inp = b.out_rows(inp)?;
            }
            let sa_out = b.ctx.add(cur, inp)?;
            let sa_out = b.name(sa_out, "sa_out", il);
            let cur = b.rms_norm(sa_out, Some(l.ffn_norm))?;
            let cur = b.name(cur, "ffn_norm", il);
            let cur = b.ffn_glu(cur, l.up, l.gate, l.down, GluOp::GeGlu, il)?;
            let cur = b.name(cur, "ffn_out", il);
            let cur = b.rms_norm(cur, Some(l.post_ffw_norm))?;
            inp = b.ctx.add(cur, sa_out)?;
            inp = b.name(inp, "l_out", il);
        }
        let cur = b.rms_norm(inp, Some(self.output_norm))?;
        let cur = b.ctx.set_name(cur, "result_norm");
        b.logits(cur, self.output, None)
    }
}
