//! PHI3 (`src/models/phi3.cpp`; Phi-3 and Phi-3.5 mini/medium, Phi-4): RMS norms, a fused QKV
//! projection split by views, RoPE NEOX, Q pre-scaled by `1/sqrt(head_dim)` with a KQ scale of
//! 1, and a fused gate+up projection (`ffn_up` of twice the FFN width, SwiGLU over its two
//! halves). llama.cpp turns Phi's sliding window off (so does Tessera: every layer is global).
//! LongRoPE (the 128k-context files): `rope_factors_long` / `rope_factors_short` divide the
//! RoPE frequencies, the long ones when the context's cells outnumber
//! `rope.scaling.original_context_length` (llama.cpp's `get_rope_factors`, with one sequence or
//! a unified cache), and `rope.scaling.attn_factor` scales the rotation's magnitude.

use super::{blk, Architecture, ModelGraph};
use crate::graph::Builder;
use crate::hparams::HParams;
use crate::weights::Weights;
use crate::Result;
use tessera_tensor::graph::{GluOp, RopeMode, TensorId};

/// The `phi3` architecture.
pub struct Phi3;

#[derive(Debug, Clone, Copy)]
struct Block {
    attn_norm: TensorId,
    wqkv: TensorId,
    wo: TensorId,
    ffn_norm: TensorId,
    up: TensorId,
    down: TensorId,
}

struct Phi3Graph {
    tok_embd: TensorId,
    output_norm: TensorId,
    output: TensorId,
    output_b: Option<TensorId>,
    /// LongRoPE's factors for contexts past the original one, and up to it.
    rope_long: Option<TensorId>,
    rope_short: Option<TensorId>,
    blocks: Vec<Block>,
}

impl Architecture for Phi3 {
    fn name(&self) -> &'static str {
        "phi3"
    }

    fn load(&self, w: &Weights, hp: &HParams) -> Result<Box<dyn ModelGraph>> {
        let (e, v) = (hp.n_embd, hp.n_vocab);
        let tok_embd = w.get("token_embd.weight", &[e, v])?;
        let blocks = (0..hp.n_layer)
            .map(|il| {
                let t = |what: &str| blk(il, what);
                let nq = hp.head_dim_k * hp.n_head[il];
                let qkv = nq + hp.n_embd_k_gqa(il) + hp.n_embd_v_gqa(il);
                let ff = hp.n_ff[il];
                Ok(Block {
                    attn_norm: w.get(&t("attn_norm.weight"), &[e])?,
                    wqkv: w.get(&t("attn_qkv.weight"), &[e, qkv])?,
                    wo: w.get(&t("attn_output.weight"), &[hp.head_dim_v * hp.n_head[il], e])?,
                    ffn_norm: w.get(&t("ffn_norm.weight"), &[e])?,
                    up: w.get(&t("ffn_up.weight"), &[e, 2 * ff])?,
                    down: w.get(&t("ffn_down.weight"), &[ff, e])?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Box::new(Phi3Graph {
            tok_embd,
            output_norm: w.get("output_norm.weight", &[e])?,
            output: w.find("output.weight", &[e, v])?.unwrap_or(tok_embd),
            output_b: w.find("output.bias", &[v])?,
            rope_long: w.find("rope_factors_long.weight", &[hp.n_rot / 2])?,
            rope_short: w.find("rope_factors_short.weight", &[hp.n_rot / 2])?,
            blocks,
        }))
    }
}

impl ModelGraph for Phi3Graph {
    fn k_rope(&self, hp: &HParams, _il: usize, kv_size: usize) -> super::KRope {
        let factors = if kv_size > hp.n_ctx_orig { self.rope_long } else { self.rope_short };
        super::KRope::Rope { mode: RopeMode::Neox, freq_base: hp.rope_freq_base, factors }
    }

    fn build(&self, b: &mut Builder) -> Result<TensorId> {
        let hp = b.hp;
        let mut inp = b.inp_embd(self.tok_embd)?;
        let q_scale = 1.0 / (hp.head_dim_k as f32).sqrt();
        let factors = if b.kv_size > hp.n_ctx_orig { self.rope_long } else { self.rope_short };
        for (il, l) in self.blocks.iter().enumerate() {
            let cur = b.rms_norm(inp, Some(l.attn_norm))?;
            let cur = b.name(cur, "attn_norm", il);
            let qkv = b.mm(l.wqkv, cur)?;
            let (q, k, v) = b.split_qkv(qkv, il)?;
            let q = b.rope(q, RopeMode::Neox, hp.rope_freq_base, factors)?;
            let k = b.rope(k, RopeMode::Neox, hp.rope_freq_base, factors)?;
            let q = b.name(q, "Qcur", il);
            let k = b.name(k, "Kcur", il);
            let q = b.ctx.scale(q, q_scale, 0.0)?;
            let a = b.attention(il, q, k, v, 1.0)?;
            let mut cur = b.mm(l.wo, a)?;
            if il == self.blocks.len() - 1 {
                cur = b.out_rows(cur)?;
                inp = b.out_rows(inp)?;
            }
            let residual = b.ctx.add(cur, inp)?;
            let cur = b.rms_norm(residual, Some(l.ffn_norm))?;
            let cur = b.name(cur, "ffn_norm", il);
            // SwiGLU over the fused projection: silu(first half) * second half.
            let up = b.mm(l.up, cur)?;
            let h = b.ctx.glu(up, GluOp::SwiGlu, false)?;
            let cur = b.mm(l.down, h)?;
            let cur = b.name(cur, "ffn_out", il);
            inp = b.ctx.add(residual, cur)?;
            inp = b.name(inp, "l_out", il);
        }
        let cur = b.rms_norm(inp, Some(self.output_norm))?;
        let cur = b.ctx.set_name(cur, "result_norm");
        b.logits(cur, self.output, self.output_b)
    }
}
