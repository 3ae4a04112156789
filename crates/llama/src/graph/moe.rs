//! The mixture-of-experts FFN (llama.cpp's `build_moe_ffn`), node for node: the router's
//! logits (plus its bias) and softmax, the top-k experts by a descending argsort, their weights
//! gathered (softmaxed among the chosen with gpt-oss's gating, normalized where asked), the
//! experts' gated activation through `MUL_MAT_ID` (each product plus its expert's bias by
//! `ADD_ID` where the file has them), each expert's output weighted and the `n_used` outputs
//! added in slot order.

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
    /// The experts' biases where the file has them (gpt-oss): the router's `[n_expert]`, the up
    /// and gate projections' `[n_ff_exp, n_expert]`, the down projections' `[n_embd, n_expert]`.
    pub biases: Option<MoeBiases>,
}

/// A mixture-of-experts layer's biases (`ffn_*.bias`), all or none, as gpt-oss has them.
#[derive(Debug, Clone, Copy)]
pub struct MoeBiases {
    /// `ffn_gate_inp.bias`, `[n_expert]`.
    pub gate_inp: TensorId,
    /// `ffn_up_exps.bias`, `[n_ff_exp, n_expert]`.
    pub up: TensorId,
    /// `ffn_gate_exps.bias`, `[n_ff_exp, n_expert]`.
    pub gate: TensorId,
    /// `ffn_down_exps.bias`, `[n_embd, n_expert]`.
    pub down: TensorId,
}

/// How the router's logits become the chosen experts' weights (llama.cpp's
/// `llama_expert_gating_func_type`, the two that Tessera's architectures use).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gating {
    /// Softmax over all experts; the chosen experts' probabilities are their weights.
    Softmax,
    /// The top-k picked from the logits, then a softmax over the chosen ones (gpt-oss).
    SoftmaxWeight,
}

/// The experts' gated activation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MoeActivation {
    /// `silu(gate) · up`.
    SwiGlu,
    /// gpt-oss's clamped SwiGLU (`SWIGLU_OAI`) with its `alpha` and `limit`.
    SwiGluOai {
        /// The sigmoid's slope (1.702).
        alpha: f32,
        /// The clamp of gate (above) and up (both sides) (7.0).
        limit: f32,
    },
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
    /// From logits to weights.
    pub gating: Gating,
    /// The experts' activation.
    pub activation: MoeActivation,
}

/// The smallest normal f16: llama.cpp clamps the weight sum to it before dividing.
const MIN_WEIGHT_SUM: f32 = 6.103_515_6e-5;

impl Builder<'_> {
    /// The mixture-of-experts FFN of layer `il` on `x` (`[n_embd, n_tokens]`), returning
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
        let mut logits = self.mm(w.gate_inp, x)?;
        logits = self.name(logits, "ffn_moe_logits", il);
        if let Some(b) = &w.biases {
            logits = self.ctx.add(logits, b.gate_inp)?;
            logits = self.name(logits, "ffn_moe_logits_biased", il);
        }
        let probs = match r.gating {
            Gating::Softmax => self.ctx.soft_max(logits, None, 1.0, 0.0)?,
            Gating::SoftmaxWeight => logits,
        };
        let probs = self.name(probs, "ffn_moe_probs", il);
        let selected = self.ctx.argsort_top_k(probs, n_used)?;
        let selected = self.name(selected, "ffn_moe_topk", il);
        let probs3 = self.ctx.reshape(probs, &[1, n_expert, n_tokens])?;
        let mut weights = self.ctx.get_rows(probs3, selected)?;
        weights = self.name(weights, "ffn_moe_weights", il);
        if r.gating == Gating::SoftmaxWeight {
            let w2 = self.ctx.reshape(weights, &[n_used, n_tokens])?;
            let w2 = self.ctx.soft_max(w2, None, 1.0, 0.0)?;
            weights = self.ctx.reshape(w2, &[1, n_used, n_tokens])?;
            weights = self.name(weights, "ffn_moe_weights_softmax", il);
        }
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
        let mut up = self.mm_id(w.up_exps, x3, selected)?;
        up = self.name(up, "ffn_moe_up", il);
        if let Some(b) = &w.biases {
            up = self.ctx.add_id(up, b.up, selected)?;
            up = self.name(up, "ffn_moe_up_biased", il);
        }
        let mut gate = self.mm_id(w.gate_exps, x3, selected)?;
        gate = self.name(gate, "ffn_moe_gate", il);
        if let Some(b) = &w.biases {
            gate = self.ctx.add_id(gate, b.gate, selected)?;
            gate = self.name(gate, "ffn_moe_gate_biased", il);
        }
        let h = match r.activation {
            MoeActivation::SwiGlu => {
                let h = self.ctx.glu_split(gate, up, GluOp::SwiGlu)?;
                self.name(h, "ffn_moe_swiglu", il)
            }
            MoeActivation::SwiGluOai { alpha, limit } => {
                let h = self.ctx.swiglu_oai(gate, up, alpha, limit)?;
                self.name(h, "ffn_moe_swiglu_oai", il)
            }
        };
        let mut experts = self.mm_id(w.down_exps, h, selected)?;
        experts = self.name(experts, "ffn_moe_down", il);
        if let Some(b) = &w.biases {
            experts = self.ctx.add_id(experts, b.down, selected)?;
            experts = self.name(experts, "ffn_moe_down_biased", il);
        }
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
