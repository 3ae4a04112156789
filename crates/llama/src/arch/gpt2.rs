//! GPT2 (`src/models/gpt2.cpp`): learned absolute positions added to the token embeddings,
//! pre-LayerNorms with bias, a fused QKV projection split by views, GELU FFN, and the LM head
//! tied to the embeddings unless `output.weight` exists. No RoPE.

use super::{blk, Architecture, ModelGraph};
use crate::graph::Builder;
use crate::hparams::HParams;
use crate::weights::Weights;
use crate::Result;
use tessera_tensor::graph::TensorId;

/// The `gpt2` architecture.
pub struct Gpt2;

#[derive(Debug, Clone, Copy)]
struct Block {
    attn_norm: (TensorId, TensorId),
    qkv: (TensorId, Option<TensorId>),
    wo: (TensorId, Option<TensorId>),
    ffn_norm: (TensorId, TensorId),
    up: (TensorId, Option<TensorId>),
    down: (TensorId, Option<TensorId>),
}

struct Gpt2Graph {
    tok_embd: TensorId,
    pos_embd: TensorId,
    output_norm: (TensorId, TensorId),
    output: TensorId,
    blocks: Vec<Block>,
}

impl Architecture for Gpt2 {
    fn name(&self) -> &'static str {
        "gpt2"
    }

    fn load(&self, w: &Weights, hp: &HParams) -> Result<Box<dyn ModelGraph>> {
        let (e, v) = (hp.n_embd, hp.n_vocab);
        let tok_embd = w.get("token_embd.weight", &[e, v])?;
        let blocks = (0..hp.n_layer)
            .map(|il| {
                let t = |what: &str| blk(il, what);
                let qkv = hp.head_dim_k * hp.n_head[il] + hp.n_embd_k_gqa(il) + hp.n_embd_v_gqa(il);
                let ff = hp.n_ff[il];
                Ok(Block {
                    attn_norm: (
                        w.get(&t("attn_norm.weight"), &[e])?,
                        w.get(&t("attn_norm.bias"), &[e])?,
                    ),
                    qkv: (
                        w.get(&t("attn_qkv.weight"), &[e, qkv])?,
                        w.find(&t("attn_qkv.bias"), &[qkv])?,
                    ),
                    wo: (
                        w.get(&t("attn_output.weight"), &[e, e])?,
                        w.find(&t("attn_output.bias"), &[e])?,
                    ),
                    ffn_norm: (
                        w.get(&t("ffn_norm.weight"), &[e])?,
                        w.get(&t("ffn_norm.bias"), &[e])?,
                    ),
                    up: (w.get(&t("ffn_up.weight"), &[e, ff])?, w.find(&t("ffn_up.bias"), &[ff])?),
                    down: (
                        w.get(&t("ffn_down.weight"), &[ff, e])?,
                        w.find(&t("ffn_down.bias"), &[e])?,
                    ),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Box::new(Gpt2Graph {
            tok_embd,
            pos_embd: w.get("position_embd.weight", &[e, hp.n_ctx_train])?,
            output_norm: (w.get("output_norm.weight", &[e])?, w.get("output_norm.bias", &[e])?),
            output: w.find("output.weight", &[e, v])?.unwrap_or(tok_embd),
            blocks,
        }))
    }
}

impl ModelGraph for Gpt2Graph {
    fn k_rope(&self, _hp: &HParams, _il: usize, _kv_size: usize) -> super::KRope {
        super::KRope::Absolute
    }

    fn build(&self, b: &mut Builder) -> Result<TensorId> {
        let tok = b.inp_embd(self.tok_embd)?;
        let pos = b.ctx.get_rows(self.pos_embd, b.inp_pos)?;
        let mut inp = b.ctx.add(tok, pos)?;
        let kq_scale = b.kq_scale();
        for (il, l) in self.blocks.iter().enumerate() {
            let cur = b.layer_norm(inp, l.attn_norm.0, Some(l.attn_norm.1))?;
            let qkv = b.linear(l.qkv.0, l.qkv.1, cur)?;
            let (q, k, v) = b.split_qkv(qkv, il)?;
            let a = b.attention(il, q, k, v, kq_scale)?;
            let mut cur = b.linear(l.wo.0, l.wo.1, a)?;
            if il == self.blocks.len() - 1 {
                cur = b.out_rows(cur)?;
                inp = b.out_rows(inp)?;
            }
            let ffn_inp = b.ctx.add(cur, inp)?;
            let cur = b.layer_norm(ffn_inp, l.ffn_norm.0, Some(l.ffn_norm.1))?;
            let cur = b.ffn_gelu(cur, l.up, l.down)?;
            inp = b.ctx.add(cur, ffn_inp)?;
        }
        let cur = b.layer_norm(inp, self.output_norm.0, Some(self.output_norm.1))?;
        b.logits(cur, self.output, None)
    }
}
