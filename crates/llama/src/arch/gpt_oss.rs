//! GPT-OSS (`gpt-oss`, llama.cpp's `LLM_ARCH_OPENAI_MOE`, `src/models/openai-moe.cpp`;
//! gpt-oss-20b and -120b): RMS norms, Q/K/V and output projections with biases, RoPE NEOX with
//! YaRN, attention sinks, a sliding window on every other layer (even layers slide; their RoPE
//! base is `rope.freq_base_swa` where given), a post-attention RMS norm before the experts, and
//! a mixture of experts with biases everywhere: the top-k taken from the biased router logits,
//! a softmax over the chosen ones, gpt-oss's clamped SwiGLU (`alpha` 1.702, `limit` 7). The
//! output rows are picked after the last block, as llama.cpp does for this architecture.

use super::{blk, Architecture, ModelGraph};
use crate::graph::{Builder, Gating, MoeActivation, MoeBiases, MoeRouting, MoeWeights};
use crate::hparams::HParams;
use crate::weights::Weights;
use crate::{LlamaError, Result};
use tessera_tensor::graph::{RopeMode, TensorId};

/// The `gpt-oss` architecture.
pub struct GptOss;

/// gpt-oss's SwiGLU constants (llama.cpp's `build_moe_ffn`, `LLM_FFN_SWIGLU_OAI_MOE`).
const SWIGLU_ALPHA: f32 = 1.702;
const SWIGLU_LIMIT: f32 = 7.0;

#[derive(Debug, Clone, Copy)]
struct Block {
    attn_norm: TensorId,
    attn_post_norm: TensorId,
    wq: TensorId,
    wk: TensorId,
    wv: TensorId,
    bq: Option<TensorId>,
    bk: Option<TensorId>,
    bv: Option<TensorId>,
    wo: TensorId,
    bo: TensorId,
    sinks: TensorId,
    moe: MoeWeights,
}

struct GptOssGraph {
    tok_embd: TensorId,
    output_norm: TensorId,
    output: TensorId,
    blocks: Vec<Block>,
}

fn load_block(w: &Weights, hp: &HParams, il: usize) -> Result<Block> {
    let t = |what: &str| blk(il, what);
    let (e, n, f) = (hp.n_embd, hp.n_expert, hp.n_ff_exp);
    let nq = hp.head_dim_k * hp.n_head[il];
    let (nk, nv) = (hp.n_embd_k_gqa(il), hp.n_embd_v_gqa(il));
    Ok(Block {
        attn_norm: w.get(&t("attn_norm.weight"), &[e])?,
        attn_post_norm: w.get(&t("post_attention_norm.weight"), &[e])?,
        wq: w.get(&t("attn_q.weight"), &[e, nq])?,
        wk: w.get(&t("attn_k.weight"), &[e, nk])?,
        wv: w.get(&t("attn_v.weight"), &[e, nv])?,
        bq: w.find(&t("attn_q.bias"), &[nq])?,
        bk: w.find(&t("attn_k.bias"), &[nk])?,
        bv: w.find(&t("attn_v.bias"), &[nv])?,
        wo: w.get(&t("attn_output.weight"), &[hp.head_dim_v * hp.n_head[il], e])?,
        bo: w.get(&t("attn_output.bias"), &[e])?,
        sinks: w.get(&t("attn_sinks.weight"), &[hp.n_head[il]])?,
        moe: MoeWeights {
            gate_inp: w.get(&t("ffn_gate_inp.weight"), &[e, n])?,
            up_exps: w.get(&t("ffn_up_exps.weight"), &[e, f, n])?,
            gate_exps: w.get(&t("ffn_gate_exps.weight"), &[e, f, n])?,
            down_exps: w.get(&t("ffn_down_exps.weight"), &[f, e, n])?,
            biases: Some(MoeBiases {
                gate_inp: w.get(&t("ffn_gate_inp.bias"), &[n])?,
                up: w.get(&t("ffn_up_exps.bias"), &[f, n])?,
                gate: w.get(&t("ffn_gate_exps.bias"), &[f, n])?,
                down: w.get(&t("ffn_down_exps.bias"), &[e, n])?,
            }),
        },
    })
}

impl Architecture for GptOss {
    fn name(&self) -> &'static str {
        "gpt-oss"
    }

    fn load(&self, w: &Weights, hp: &HParams) -> Result<Box<dyn ModelGraph>> {
        let required = |what: &str, v: usize| {
            if v == 0 {
                Err(LlamaError::BadValue {
                    key: format!("gpt-oss.{what}"),
                    reason: "missing or 0: gpt-oss needs it".into(),
                })
            } else {
                Ok(())
            }
        };
        required("expert_count", hp.n_expert)?;
        required("expert_used_count", hp.n_expert_used)?;
        required("expert_feed_forward_length", hp.n_ff_exp)?;
        let (e, v) = (hp.n_embd, hp.n_vocab);
        Ok(Box::new(GptOssGraph {
            tok_embd: w.get("token_embd.weight", &[e, v])?,
            output_norm: w.get("output_norm.weight", &[e])?,
            output: w.get("output.weight", &[e, v])?,
            blocks: (0..hp.n_layer).map(|il| load_block(w, hp, il)).collect::<Result<_>>()?,
        }))
    }
}

impl ModelGraph for GptOssGraph {
    fn k_rope(&self, hp: &HParams, il: usize, _kv_size: usize) -> super::KRope {
        let freq_base = if hp.is_swa(il) { hp.rope_freq_base_swa } else { hp.rope_freq_base };
        super::KRope::Rope { mode: RopeMode::Neox, freq_base, factors: None }
    }

    fn build(&self, b: &mut Builder) -> Result<TensorId> {
        let hp = b.hp;
        let n_tok = b.n_tokens;
        let kq_scale = 1.0 / (hp.n_rot as f32).sqrt();
        let routing = MoeRouting {
            n_expert: hp.n_expert,
            n_used: hp.n_expert_used,
            norm_weights: false,
            // openai-moe does not read `expert_weights_scale`: llama.cpp's default, none.
            weights_scale: 0.0,
            gating: Gating::SoftmaxWeight,
            activation: MoeActivation::SwiGluOai { alpha: SWIGLU_ALPHA, limit: SWIGLU_LIMIT },
        };
        let mut inp = b.inp_embd(self.tok_embd)?;
        for (il, l) in self.blocks.iter().enumerate() {
            let base = if hp.is_swa(il) { hp.rope_freq_base_swa } else { hp.rope_freq_base };
            let cur = b.rms_norm(inp, Some(l.attn_norm))?;
            let cur = b.name(cur, "attn_norm", il);
            let [q, k, v] = b.linear_same_input(cur, [(l.wq, l.bq), (l.wk, l.bk), (l.wv, l.bv)])?;
            let q = b.ctx.reshape(q, &[hp.head_dim_k, hp.n_head[il], n_tok])?;
            let k = b.ctx.reshape(k, &[hp.head_dim_k, hp.n_head_kv[il], n_tok])?;
            let v = b.ctx.reshape(v, &[hp.head_dim_v, hp.n_head_kv[il], n_tok])?;
            let q = b.rope(q, RopeMode::Neox, base, None)?;
            let q = b.name(q, "Qcur", il);
            let k = b.rope(k, RopeMode::Neox, base, None)?;
            let k = b.name(k, "Kcur", il);
            let a = b.attention_with_sinks(il, q, k, v, kq_scale, Some(l.sinks))?;
            let cur = b.linear(l.wo, Some(l.bo), a)?;
            let ffn_inp = b.ctx.add(cur, inp)?;
            let ffn_inp = b.name(ffn_inp, "ffn_inp", il);
            let cur = b.rms_norm(ffn_inp, Some(l.attn_post_norm))?;
            let cur = b.name(cur, "attn_post_norm", il);
            let cur = b.ffn_moe(cur, &l.moe, &routing, il)?;
            inp = b.ctx.add(cur, ffn_inp)?;
            inp = b.name(inp, "l_out", il);
        }
        let cur = b.out_rows(inp)?;
        let cur = b.rms_norm(cur, Some(self.output_norm))?;
        let cur = b.ctx.set_name(cur, "result_norm");
        b.logits(cur, self.output, None)
    }
}
