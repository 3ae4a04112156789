//! The mixture-of-experts FFN (llama.cpp's `build_moe_ffn`), node for node: the router's
//! logits and softmax, the top-k experts by a descending argsort, their weights gathered (and
//! normalized), the experts' SwiGLU through `MUL_MAT_ID`, each expert's output weighted and
//! the `n_used` outputs added in slot order.

use super::Builder;
use crate::Result;
use tessera_tensor::graph::{GluOp, TensorId};

/// One mixture-of-experts layer's weights.
#[derive(Debug, Clone, Copy)]
pub struct MoeWeights {
    /// The router, `[n_embd, n_expert]` (`ffn_gate_inp`).
    pub gate_inp: TensorId,
    /// Up projections, `[n_embd, n_ff_exp, n_expert]` (`ffn_up_exps`).
    pub up_exps: TensorId,
    /// Gate projections, `[n_embd, n_ff_exp, n_expert]` (`ffn_gate_exps`).
    pub gate_exps: TensorId,
    /// Down projections, `[n_ff_exp, n_embd, n_expert]` (`ffn_down_exps`).
    pub down_exps: TensorId,
}

/// How a layer routes: softmax gating over `n_expert` experts, the `n_used` most probable
/// taken per token.
#[derive(Debug, Clone, Copy)]
pub struct MoeRouting {
    /// Experts in the layer.
    pub n_expert: usize,
    /// Experts per token.
    pub n_used: usize,
    /// Whether the chosen experts' weights are divided by their sum (`norm_w`).
    pub norm_weights: bool,
    /// Multiplier of the weights (0 or 1: none), llama.cpp's `expert_weights_scale`.
    pub weights_scale: f32,
}

/// The smallest normal f16: llama.cpp clamps the weight sum to it before dividing.
const MIN_WEIGHT_SUM: f32 = 6.103_515_6e-5;

impl Builder<'_> {
    /// The SwiGLU mixture-of-experts FFN of layer `il` on `x` (`[n_embd, n_tokens]`), returning
    /// `[n_embd, n_tokens]`; intermediates named as llama.cpp names them.
    pub fn ffn_moe(
        &mut self,
        x: TensorId,
        w: &MoeWeights,
        r: &MoeRouting,
        il: usize,
    ) -> Result<TensorId> {
        let (n_embd, n_tokens) = (self.ctx.get(x).ne[0], self.ctx.get(x).ne[1]);
        let (n_expert, n_used) = (r.n_expert, r.n_used);
        let logits = self.ctx.mul_mat(w.gate_inp, x)?;
        let logits = self.name(logits, "ffn_moe_logits", il);
        let probs = self.ctx.soft_max(logits, None, 1.0, 0.0)?;
        let probs = self.name(probs, "ffn_moe_probs", il);
        let selected = self.ctx.argsort_top_k(probs, n_used)?;
        let selected = self.name(selected, "ffn_moe_topk", il);
        let probs3 = self.ctx.reshape(probs, &[1, n_expert, n_tokens])?;
        let mut weights = self.ctx.get_rows(probs3, selected)?;
        weights = self.name(weights, "ffn_moe_weights", il);
        if r.norm_weights {
            let w2 = self.ctx.reshape(weights, &[n_used, n_tokens])?;
            let sum = self.ctx.sum_rows(w2)?;
            let sum = self.name(sum, "ffn_moe_weights_sum", il);
            let sum = self.ctx.clamp(sum, MIN_WEIGHT_SUM, f32::INFINITY)?;
            let w2 = self.ctx.div(w2, sum)?;
            let w2 = self.name(w2, "ffn_moe_weights_norm", il);
            weights = self.ctx.reshape(w2, &[1, n_used, n_tokens])?;
        }
        if r.weights_scale != 0.0 && r.weights_scale != 1.0 {
            weights = self.ctx.scale(weights, r.weights_scale, 0.0)?;
        }
        let x3 = self.ctx.reshape(x, &[n_embd, 1, n_tokens])?;
        let up = self.ctx.mul_mat_id(w.up_exps, x3, selected)?;
        let up = self.name(up, "ffn_moe_up", il);
        let gate = self.ctx.mul_mat_id(w.gate_exps, x3, selected)?;
        let gate = self.name(gate, "ffn_moe_gate", il);
        let h = self.ctx.glu_split(gate, up, GluOp::SwiGlu)?;
        let h = self.name(h, "ffn_moe_swiglu", il);
        let experts = self.ctx.mul_mat_id(w.down_exps, h, selected)?;
        let experts = self.name(experts, "ffn_moe_down", il);
        let experts = self.ctx.mul(experts, weights)?;
        let experts = self.name(experts, "ffn_moe_weighted", il);
        let nb = self.ctx.get(experts).nb;
        let mut out = self.ctx.view(experts, &[n_embd, n_tokens], &[nb[2]], 0)?;
        for i in 1..n_used {
            let e = self.ctx.view(experts, &[n_embd, n_tokens], &[nb[2]], i * nb[1])?;
            out = self.ctx.add(out, e)?;
        }
        if n_used == 1 {
            out = self.ctx.cont(out, None)?;
        }
        Ok(self.name(out, "ffn_moe_out", il))
    }
}
