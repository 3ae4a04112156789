//! Specs of the mixture-of-experts ops: MUL_MAT_ID, ARGSORT (whole rows and the top-k view a
//! router takes), CLAMP.

use crate::case::{Builder, CaseSpec};
use crate::compare::{thresholds, Tolerance};
use crate::init::{default_init, Init};
use tessera_tensor::graph::TensorId;
use tessera_tensor::{DType, TensorError};

/// MUL_MAT_ID as test-backend-ops' `test_mul_mat_id`: experts `a` `[k, m, n_expert]`, activations
/// `[k, n_b, n_tokens]` (`n_b` 1: every slot reads the token's one row, as a router's up/gate
/// products; `n_b = n_used`: one row per slot, as the down product), ids `[n_used, n_tokens]`
/// with distinct experts per token.
#[derive(Debug, Clone)]
pub struct MulMatId {
    /// Expert weight type.
    pub a: DType,
    /// Experts.
    pub n_expert: usize,
    /// Experts per token.
    pub n_used: usize,
    /// Output rows (weight rows per expert).
    pub m: usize,
    /// Dot product length.
    pub k: usize,
    /// Tokens.
    pub n_tokens: usize,
    /// Whether each slot has its own activation row (`n_b = n_used`), else one per token.
    pub per_slot: bool,
}

impl CaseSpec for MulMatId {
    fn op(&self) -> &'static str {
        "MUL_MAT_ID"
    }
    fn dtype(&self) -> String {
        self.a.name().into()
    }
    fn build(&self, b: &mut Builder) -> Result<TensorId, TensorError> {
        let n_b = if self.per_slot { self.n_used } else { 1 };
        let x = b.leaf(self.a, &[self.k, self.m, self.n_expert], default_init(self.a))?;
        let y = b.leaf(DType::F32, &[self.k, n_b, self.n_tokens], default_init(DType::F32))?;
        let ids = b.leaf(
            DType::I32,
            &[self.n_used, self.n_tokens],
            Init::RowIds { n: self.n_expert, distinct: true },
        )?;
        b.ctx.mul_mat_id(x, y, ids)
    }
    fn tolerance(&self) -> Tolerance {
        Tolerance::Nmse(thresholds::MUL_MAT)
    }
}

/// ARGSORT of `[ne0, ne1]` rows that are permutations (no ties): exact. `top_k` > 0 takes the
/// router's view of the first `top_k` indexes of a descending sort.
#[derive(Debug, Clone)]
pub struct Argsort {
    /// Row length.
    pub ne0: usize,
    /// Rows.
    pub ne1: usize,
    /// Largest first.
    pub descending: bool,
    /// Indexes kept (0: all, through `argsort`).
    pub top_k: usize,
}

impl CaseSpec for Argsort {
    fn op(&self) -> &'static str {
        "ARGSORT"
    }
    fn dtype(&self) -> String {
        "f32".into()
    }
    fn build(&self, b: &mut Builder) -> Result<TensorId, TensorError> {
        let a = b.leaf(DType::F32, &[self.ne0, self.ne1], Init::Permutation)?;
        if self.top_k > 0 {
            return b.ctx.argsort_top_k(a, self.top_k);
        }
        b.ctx.argsort(a, self.descending)
    }
    fn tolerance(&self) -> Tolerance {
        Tolerance::Exact
    }
}

/// ADD_ID: `[n, n_used, n_tokens]` plus the bias rows `[n, n_expert]` the distinct ids pick.
#[derive(Debug, Clone)]
pub struct AddId {
    /// Row length.
    pub n: usize,
    /// Experts (bias rows).
    pub n_expert: usize,
    /// Experts per token.
    pub n_used: usize,
    /// Tokens.
    pub n_tokens: usize,
}

impl CaseSpec for AddId {
    fn op(&self) -> &'static str {
        "ADD_ID"
    }
    fn dtype(&self) -> String {
        "f32".into()
    }
    fn build(&self, b: &mut Builder) -> Result<TensorId, TensorError> {
        let unit = Init::Uniform { min: -1.0, max: 1.0 };
        let a = b.leaf(DType::F32, &[self.n, self.n_used, self.n_tokens], unit)?;
        let bias = b.leaf(DType::F32, &[self.n, self.n_expert], unit)?;
        let ids = b.leaf(
            DType::I32,
            &[self.n_used, self.n_tokens],
            Init::RowIds { n: self.n_expert, distinct: true },
        )?;
        b.ctx.add_id(a, bias, ids)
    }
    fn tolerance(&self) -> Tolerance {
        Tolerance::Nmse(thresholds::DEFAULT)
    }
}

/// SWIGLU_OAI of gate and up values in `[-10, 10)`, so both clamps (at 7) are reached.
#[derive(Debug, Clone)]
pub struct SwiGluOai {
    /// Shape of gate, up and the result.
    pub ne: [usize; 4],
}

impl CaseSpec for SwiGluOai {
    fn op(&self) -> &'static str {
        "SWIGLU_OAI"
    }
    fn dtype(&self) -> String {
        "f32".into()
    }
    fn build(&self, b: &mut Builder) -> Result<TensorId, TensorError> {
        let wide = Init::Uniform { min: -10.0, max: 10.0 };
        let gate = b.leaf(DType::F32, &self.ne, wide)?;
        let up = b.leaf(DType::F32, &self.ne, wide)?;
        b.ctx.swiglu_oai(gate, up, 1.702, 7.0)
    }
    fn tolerance(&self) -> Tolerance {
        Tolerance::Nmse(thresholds::DEFAULT)
    }
}

/// CLAMP of values in `[-2, 2)` to `[min, max]`: exact.
#[derive(Debug, Clone)]
pub struct Clamp {
    /// Shape.
    pub ne: [usize; 4],
    /// Lower bound.
    pub min: f32,
    /// Upper bound.
    pub max: f32,
}

impl CaseSpec for Clamp {
    fn op(&self) -> &'static str {
        "CLAMP"
    }
    fn dtype(&self) -> String {
        "f32".into()
    }
    fn build(&self, b: &mut Builder) -> Result<TensorId, TensorError> {
        let a = b.leaf(DType::F32, &self.ne, Init::Uniform { min: -2.0, max: 2.0 })?;
        b.ctx.clamp(a, self.min, self.max)
    }
    fn tolerance(&self) -> Tolerance {
        Tolerance::Exact
    }
}
