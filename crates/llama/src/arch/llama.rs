//! LLAMA (also SmolLM/SmolLM2): RMS norms, RoPE NORM mode (adjacent pairs), SwiGLU FFN,
//! optional biases, tied embeddings when `output.weight` is absent (`src/models/llama.cpp`).

use super::{blk, Architecture, ModelGraph};
use crate::graph::{Builder, Gating, MoeActivation, MoeRouting, MoeWeights};
use crate::hparams::HParams;
use crate::weights::Weights;
use crate::Result;
use tessera_tensor::graph::{RopeMode, TensorId};

/// The `llama` architecture.
pub struct Llama;

/// One block's weights, shared by the llama-like architectures.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Block {
    pub attn_norm: TensorId,
    pub wq: TensorId,
    pub wk: TensorId,
    pub wv: TensorId,
    pub wo: TensorId,
    pub bq: Option<TensorId>,
    pub bk: Option<TensorId>,
    pub bv: Option<TensorId>,
    pub bo: Option<TensorId>,
    pub q_norm: Option<TensorId>,
    pub k_norm: Option<TensorId>,
    pub ffn_norm: TensorId,
    pub ffn: Ffn,
}

/// A block's feed-forward weights: one SwiGLU, or a mixture of SwiGLU experts.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Ffn {
    Dense { up: TensorId, gate: TensorId, down: TensorId },
    Moe(MoeWeights),
}

/// Loads layer `il`'s FFN: experts when the file has `expert_count` (each `n_ff_exp` wide),
/// else the dense SwiGLU (`n_ff[il]` wide).
pub(crate) fn load_ffn(w: &Weights, hp: &HParams, il: usize, n_ff_exp: usize) -> Result<Ffn> {
    let (e, t) = (hp.n_embd, |what: &str| blk(il, what));
    if hp.n_expert == 0 {
        let ff = hp.n_ff[il];
        return Ok(Ffn::Dense {
            up: w.get(&t("ffn_up.weight"), &[e, ff])?,
            gate: w.get(&t("ffn_gate.weight"), &[e, ff])?,
            down: w.get(&t("ffn_down.weight"), &[ff, e])?,
        });
    }
    let (n, f) = (hp.n_expert, n_ff_exp);
    Ok(Ffn::Moe(MoeWeights {
        gate_inp: w.get(&t("ffn_gate_inp.weight"), &[e, n])?,
        up_exps: w.get(&t("ffn_up_exps.weight"), &[e, f, n])?,
        gate_exps: w.get(&t("ffn_gate_exps.weight"), &[e, f, n])?,
        down_exps: w.get(&t("ffn_down_exps.weight"), &[f, e, n])?,
        biases: None,
    }))
}

/// Checks a mixture-of-experts file's counts (llama.cpp refuses zero experts used).
pub(crate) fn check_experts(hp: &HParams) -> Result<()> {
    if hp.n_expert > 0 && hp.n_expert_used == 0 {
        return Err(crate::LlamaError::BadValue {
            key: format!("{}.expert_used_count", hp.arch),
            reason: format!("0 of {} experts used", hp.n_expert),
        });
    }
    Ok(())
}

/// The weights outside the blocks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Outer {
    pub tok_embd: TensorId,
    pub output_norm: TensorId,
    pub output: TensorId,
    pub output_b: Option<TensorId>,
    /// Llama 3's RoPE frequency factors (`rope_freqs.weight`, `n_rot / 2` values), read by
    /// the `llama` architecture only.
    pub rope_freqs: Option<TensorId>,
}

pub(crate) fn load_outer(w: &Weights, hp: &HParams) -> Result<Outer> {
    let (e, v) = (hp.n_embd, hp.n_vocab);
    let tok_embd = w.get("token_embd.weight", &[e, v])?;
    let output = w.find("output.weight", &[e, v])?.unwrap_or(tok_embd);
    Ok(Outer {
        tok_embd,
        output_norm: w.get("output_norm.weight", &[e])?,
        output,
        output_b: w.find("output.bias", &[v])?,
        rope_freqs: None,
    })
}

/// Loads the blocks of a llama-like model (`qk_norm`: per-head Q/K norms, as qwen3).
pub(crate) fn load_blocks(w: &Weights, hp: &HParams, qk_norm: bool) -> Result<Vec<Block>> {
    check_experts(hp)?;
    // qwen3moe's experts are `expert_feed_forward_length` wide (else n_ff / n_used); Mixtral's
    // (`llama` with experts) `feed_forward_length`.
    let n_ff_exp = |il: usize| match (hp.arch.as_str(), hp.n_ff_exp) {
        ("qwen3moe", 0) => hp.n_ff[il] / hp.n_expert_used.max(1),
        ("qwen3moe", f) => f,
        _ => hp.n_ff[il],
    };
    let e = hp.n_embd;
    (0..hp.n_layer)
        .map(|il| {
            let (nq, nk, nv) =
                (hp.head_dim_k * hp.n_head[il], hp.n_embd_k_gqa(il), hp.n_embd_v_gqa(il));
            let t = |what: &str| blk(il, what);
            let norm = |what: &str| -> Result<Option<TensorId>> {
                if qk_norm {
                    Ok(Some(w.get(&t(what), &[hp.head_dim_k])?))
                } else {
                    Ok(None)
                }
            };
            Ok(Block {
                attn_norm: w.get(&t("attn_norm.weight"), &[e])?,
                wq: w.get(&t("attn_q.weight"), &[e, nq])?,
                wk: w.get(&t("attn_k.weight"), &[e, nk])?,
                wv: w.get(&t("attn_v.weight"), &[e, nv])?,
                wo: w.get(&t("attn_output.weight"), &[hp.head_dim_v * hp.n_head[il], e])?,
                bq: w.find(&t("attn_q.bias"), &[nq])?,
                bk: w.find(&t("attn_k.bias"), &[nk])?,
                bv: w.find(&t("attn_v.bias"), &[nv])?,
                bo: w.find(&t("attn_output.bias"), &[e])?,
                q_norm: norm("attn_q_norm.weight")?,
                k_norm: norm("attn_k_norm.weight")?,
                ffn_norm: w.get(&t("ffn_norm.weight"), &[e])?,
                ffn: load_ffn(w, hp, il, n_ff_exp(il))?,
            })
        })
        .collect()
}

/// The llama-like forward pass: llama, qwen2 and qwen3 differ only in RoPE mode, biases and
/// Q/K norms, which the loaded weights and `mode` carry.
pub(crate) fn forward(
    b: &mut Builder,
    outer: &Outer,
    blocks: &[Block],
    mode: RopeMode,
) -> Result<TensorId> {
    let hp = b.hp;
    let n_tok = b.n_tokens;
    let mut inp = b.inp_embd(outer.tok_embd)?;
    let kq_scale = b.kq_scale();
    for (il, l) in blocks.iter().enumerate() {
        let cur = b.rms_norm(inp, Some(l.attn_norm))?;
        let cur = b.name(cur, "attn_norm", il);
        let [q, k, v] = b.linear_same_input(cur, [(l.wq, l.bq), (l.wk, l.bk), (l.wv, l.bv)])?;
        let mut q = b.ctx.reshape(q, &[hp.head_dim_k, hp.n_head[il], n_tok])?;
        let mut k = b.ctx.reshape(k, &[hp.head_dim_k, hp.n_head_kv[il], n_tok])?;
        let v = b.ctx.reshape(v, &[hp.head_dim_v, hp.n_head_kv[il], n_tok])?;
        if let Some(qn) = l.q_norm {
            q = b.rms_norm(q, Some(qn))?;
        }
        if let Some(kn) = l.k_norm {
            k = b.rms_norm(k, Some(kn))?;
        }
        let q = b.rope(q, mode, hp.rope_freq_base, outer.rope_freqs)?;
        let q = b.name(q, "Qcur", il);
        let k = b.rope(k, mode, hp.rope_freq_base, outer.rope_freqs)?;
        let k = b.name(k, "Kcur", il);
        let a = b.attention(il, q, k, v, kq_scale)?;
        let mut cur = b.linear(l.wo, l.bo, a)?;
        if il == blocks.len() - 1 {
            cur = b.out_rows(cur)?;
            inp = b.out_rows(inp)?;
        }
        let ffn_inp = b.ctx.add(cur, inp)?;
        let ffn_inp = b.name(ffn_inp, "ffn_inp", il);
        let cur = b.rms_norm(ffn_inp, Some(l.ffn_norm))?;
        let cur = b.name(cur, "ffn_norm", il);
        let cur = match l.ffn {
            Ffn::Dense { up, gate, down } => {
                let cur = b.ffn_swiglu(cur, up, gate, down, il)?;
                b.name(cur, "ffn_out", il)
            }
            Ffn::Moe(ref weights) => {
                // llama.cpp's llama (Mixtral) and qwen3moe: softmax gating, weights normalized.
                let routing = MoeRouting {
                    n_expert: hp.n_expert,
                    n_used: hp.n_expert_used,
                    norm_weights: true,
                    weights_scale: 0.0,
                    gating: Gating::Softmax,
                    activation: MoeActivation::SwiGlu,
                };
                b.ffn_moe(cur, weights, &routing, il)?
            }
        };
        inp = b.ctx.add(cur, ffn_inp)?;
        inp = b.name(inp, "l_out", il);
    }
    let cur = b.rms_norm(inp, Some(outer.output_norm))?;
    let cur = b.ctx.set_name(cur, "result_norm");
    b.logits(cur, outer.output, outer.output_b)
}

struct LlamaGraph {
    outer: Outer,
    blocks: Vec<Block>,
    mode: RopeMode,
}

impl ModelGraph for LlamaGraph {
    fn build(&self, b: &mut Builder) -> Result<TensorId> {
        forward(b, &self.outer, &self.blocks, self.mode)
    }

    fn k_rope(&self, hp: &HParams, _il: usize, _kv_size: usize) -> super::KRope {
        if self.mode.sections().is_some() {
            // M-RoPE's cells would need their four positions shifted: not done.
            return super::KRope::Unsupported;
        }
        super::KRope::Rope {
            mode: self.mode,
            freq_base: hp.rope_freq_base,
            factors: self.outer.rope_freqs,
        }
    }
}

/// A llama-like graph with the given RoPE mode and Q/K norms.
pub(crate) fn load_llama_like(
    w: &Weights,
    hp: &HParams,
    mode: RopeMode,
    qk_norm: bool,
) -> Result<Box<dyn ModelGraph>> {
    Ok(Box::new(LlamaGraph {
        outer: load_outer(w, hp)?,
        blocks: load_blocks(w, hp, qk_norm)?,
        mode,
    }))
}

impl Architecture for Llama {
    fn name(&self) -> &'static str {
        "llama"
    }
    fn load(&self, w: &Weights, hp: &HParams) -> Result<Box<dyn ModelGraph>> {
        let mut outer = load_outer(w, hp)?;
        // llama.cpp's LLM_ARCH_LLAMA reads them (Llama 3.1+ files carry them); the other
        // llama-like architectures do not, so there the tensor is unused, which is an error.
        outer.rope_freqs = w.find("rope_freqs.weight", &[hp.n_rot / 2])?;
        Ok(Box::new(LlamaGraph { outer, blocks: load_blocks(w, hp, false)?, mode: RopeMode::Norm }))
    }
}
