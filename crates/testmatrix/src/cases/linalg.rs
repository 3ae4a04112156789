//! Specs of the matrix and attention ops: MUL_MAT, ROPE, SOFT_MAX, FLASH_ATTN_EXT.

use crate::case::{Builder, CaseSpec};
use crate::compare::{thresholds, Tolerance};
use crate::init::{default_init, Init};
use tessera_tensor::graph::{RopeMode, RopeParams, TensorId};
use tessera_tensor::{DType, TensorError};

const UNIT: Init = Init::Uniform { min: -1.0, max: 1.0 };

/// MUL_MAT as test-backend-ops' `test_mul_mat`: weights `a` `[k, m, bs0, bs1]`, activations `b`
/// `[k, n, bs0*nr0, bs1*nr1]` (`nr` > 1 is the GQA broadcast of `a`); `per` builds both through a
/// permutation, `k_v` > `k` reads rows of `k` out of rows of `k_v` (non-contiguous).
#[derive(Debug, Clone)]
pub struct MulMat {
    /// Weight type.
    pub a: DType,
    /// Activation type.
    pub b: DType,
    /// Output rows (weight rows).
    pub m: usize,
    /// Output columns (activation rows, the batch).
    pub n: usize,
    /// Dot product length.
    pub k: usize,
    /// Weight batch dims 2 and 3.
    pub bs: [usize; 2],
    /// Broadcast of the weights over dims 2 and 3.
    pub nr: [usize; 2],
    /// Permutation both tensors are built through (`[0, 1, 2, 3]`: none).
    pub per: [usize; 4],
    /// Physical row length (0: `k`).
    pub k_v: usize,
}

impl MulMat {
    /// Weights of `a` times F32 activations, `[m, k]` x `[n, k]`, no batch.
    pub fn new(a: DType, m: usize, n: usize, k: usize) -> Self {
        MulMat { a, b: DType::F32, m, n, k, bs: [1, 1], nr: [1, 1], per: [0, 1, 2, 3], k_v: 0 }
    }
}

impl CaseSpec for MulMat {
    fn op(&self) -> &'static str {
        "MUL_MAT"
    }
    fn dtype(&self) -> String {
        if self.b == DType::F32 {
            self.a.name().into()
        } else {
            format!("{}x{}", self.a, self.b)
        }
    }
    fn build(&self, b: &mut Builder) -> Result<TensorId, TensorError> {
        let (k, m, n) = (self.k, self.m, self.n);
        let ne_a = [k, m, self.bs[0], self.bs[1]];
        let ne_b = [k, n, self.bs[0] * self.nr[0], self.bs[1] * self.nr[1]];
        let (ia, ib) = (default_init(self.a), default_init(self.b));
        let p = self.per;
        if p != [0, 1, 2, 3] {
            // Create with the permuted dims, then permute back to [k, m|n, ...].
            let pa = b.leaf(self.a, &p.map(|i| ne_a[i]), ia)?;
            let pb = b.leaf(self.b, &p.map(|i| ne_b[i]), ib)?;
            let x = b.ctx.permute(pa, p)?;
            let y = b.ctx.permute(pb, p)?;
            return b.ctx.mul_mat(x, y);
        }
        let kp = if self.k_v == 0 { k } else { self.k_v };
        let mut x = b.leaf(self.a, &[kp, m, ne_a[2], ne_a[3]], ia)?;
        let mut y = b.leaf(self.b, &[kp, n, ne_b[2], ne_b[3]], ib)?;
        if self.k_v != 0 {
            x = b.sub_view(x, ne_a)?;
            y = b.sub_view(y, ne_b)?;
        }
        b.ctx.mul_mat(x, y)
    }
    fn tolerance(&self) -> Tolerance {
        Tolerance::Nmse(thresholds::MUL_MAT)
    }
}

/// ROPE of `[head_dim, n_head, n_tokens, 1]` at positions in `0..512`, base 10000, original
/// context 4096 (YaRN's correction dims), optional frequency factors in [0.9, 1.1].
#[derive(Debug, Clone)]
pub struct Rope {
    /// F32 or F16.
    pub dtype: DType,
    /// Shape.
    pub ne: [usize; 4],
    /// Rotated dims.
    pub n_dims: usize,
    /// NORM or NEOX.
    pub mode: RopeMode,
    /// `freq_scale`, `ext_factor`, `attn_factor` (`[1, 0, 1]`: plain RoPE).
    pub yarn: [f32; 3],
    /// With frequency factors.
    pub ff: bool,
    /// Through a non-contiguous view.
    pub view: bool,
}

impl CaseSpec for Rope {
    fn op(&self) -> &'static str {
        "ROPE"
    }
    fn dtype(&self) -> String {
        self.dtype.name().into()
    }
    fn build(&self, b: &mut Builder) -> Result<TensorId, TensorError> {
        let [n0, n1, n2, n3] = self.ne;
        let a = if self.view {
            let t = b.leaf(self.dtype, &[n0 * 2, n1 * 4, n2 * 3, n3], UNIT)?;
            b.sub_view(t, self.ne)?
        } else {
            b.leaf(self.dtype, &self.ne, UNIT)?
        };
        let per_token = if self.mode.sections().is_some() { 4 } else { 1 };
        let pos = b.leaf(DType::I32, &[per_token * n2], Init::Positions { n_ctx: 512 })?;
        let ff = if self.ff {
            Some(b.leaf(DType::F32, &[self.n_dims / 2], Init::Uniform { min: 0.9, max: 1.1 })?)
        } else {
            None
        };
        let mut p = RopeParams::new(self.n_dims, self.mode, 10000.0);
        p.n_ctx_orig = 4096;
        [p.freq_scale, p.ext_factor, p.attn_factor] = self.yarn;
        b.ctx.rope(a, pos, ff, p)
    }
    fn tolerance(&self) -> Tolerance {
        Tolerance::Nmse(thresholds::DEFAULT)
    }
}

/// SOFT_MAX of `ne` with an optional mask `[ne0, ne1 + pad, m2, m3]` (some cells `-inf`).
#[derive(Debug, Clone)]
pub struct SoftMax {
    /// Shape.
    pub ne: [usize; 4],
    /// Mask type (F16/F32), if any.
    pub mask: Option<DType>,
    /// Mask dims 2 and 3 (1: broadcast over all heads / sequences).
    pub mask23: [usize; 2],
    /// Extra mask rows beyond `ne1`.
    pub pad: usize,
    /// Logit multiplier.
    pub scale: f32,
    /// ALiBi maximum bias.
    pub max_bias: f32,
    /// Attention sinks (one per head, dim 2).
    pub sinks: bool,
}

impl CaseSpec for SoftMax {
    fn op(&self) -> &'static str {
        "SOFT_MAX"
    }
    fn dtype(&self) -> String {
        match self.mask {
            Some(m) => format!("f32+{m} mask"),
            None => "f32".into(),
        }
    }
    fn build(&self, b: &mut Builder) -> Result<TensorId, TensorError> {
        let a = b.leaf(DType::F32, &self.ne, UNIT)?;
        let mask = match self.mask {
            Some(t) => {
                let [m2, m3] = self.mask23;
                Some(b.leaf(t, &[self.ne[0], self.ne[1] + self.pad, m2, m3], Init::KqMask)?)
            }
            None => None,
        };
        let sm = b.ctx.soft_max(a, mask, self.scale, self.max_bias)?;
        if self.sinks {
            let sinks = b.leaf(DType::F32, &[self.ne[2]], Init::Uniform { min: -2.0, max: 2.0 })?;
            b.ctx.add_sinks(sm, sinks)?;
        }
        Ok(sm)
    }
    fn tolerance(&self) -> Tolerance {
        Tolerance::Nmse(thresholds::SOFT_MAX)
    }
}

/// FLASH_ATTN_EXT: `n_q` queries of `n_head` heads against `n_kv` cells of `n_head_kv` heads
/// (GQA when fewer), head size `d`, K/V of `kv`, scale `1/sqrt(d)`, optional F16 mask padded by
/// `pad` rows, softcap, ALiBi; `permuted` builds Q/K/V as `[d, heads, tokens]` and permutes, as
/// the model graphs do.
#[derive(Debug, Clone)]
pub struct FlashAttn {
    /// Head size (K and V).
    pub d: usize,
    /// KV cells.
    pub n_kv: usize,
    /// Queries.
    pub n_q: usize,
    /// Query heads.
    pub n_head: usize,
    /// KV heads.
    pub n_head_kv: usize,
    /// Sequences (dim 3).
    pub ne3: usize,
    /// K and V type.
    pub kv: DType,
    /// With a mask.
    pub mask: bool,
    /// Extra mask rows.
    pub pad: usize,
    /// Logit soft-capping (0: off).
    pub softcap: f32,
    /// ALiBi maximum bias (0: off).
    pub max_bias: f32,
    /// Q/K/V through permuted views.
    pub permuted: bool,
    /// Attention sinks (one per head).
    pub sinks: bool,
}

impl FlashAttn {
    /// F16 K/V, masked, no softcap or ALiBi, contiguous, one sequence.
    pub fn new(d: usize, n_kv: usize, n_q: usize, n_head: usize, n_head_kv: usize) -> Self {
        FlashAttn {
            d,
            n_kv,
            n_q,
            n_head,
            n_head_kv,
            ne3: 1,
            kv: DType::F16,
            mask: true,
            pad: 0,
            softcap: 0.0,
            max_bias: 0.0,
            permuted: false,
            sinks: false,
        }
    }
}

impl CaseSpec for FlashAttn {
    fn op(&self) -> &'static str {
        "FLASH_ATTN_EXT"
    }
    fn dtype(&self) -> String {
        self.kv.name().into()
    }
    fn build(&self, b: &mut Builder) -> Result<TensorId, TensorError> {
        let (d, s) = (self.d, self.ne3);
        let tensor = |b: &mut Builder, t: DType, rows: usize, heads: usize| {
            let init = if t == DType::F32 { UNIT } else { default_init(t) };
            if self.permuted {
                let x = b.leaf(t, &[d, heads, rows, s], init)?;
                b.ctx.permute(x, [0, 2, 1, 3])
            } else {
                b.leaf(t, &[d, rows, heads, s], init)
            }
        };
        let q = tensor(b, DType::F32, self.n_q, self.n_head)?;
        let k = tensor(b, self.kv, self.n_kv, self.n_head_kv)?;
        let v = tensor(b, self.kv, self.n_kv, self.n_head_kv)?;
        let mask = if self.mask {
            Some(b.leaf(DType::F16, &[self.n_kv, self.n_q + self.pad], Init::KqMask)?)
        } else {
            None
        };
        let scale = 1.0 / (d as f32).sqrt();
        let fa = b.ctx.flash_attn_ext(q, k, v, mask, scale, self.max_bias, self.softcap)?;
        if self.sinks {
            // Above the scores (about ±1 at scale 1/sqrt(d)): each sink takes a large share.
            let sinks = b.leaf(DType::F32, &[self.n_head], Init::Uniform { min: 1.0, max: 5.0 })?;
            b.ctx.add_sinks(fa, sinks)?;
        }
        Ok(fa)
    }
    fn tolerance(&self) -> Tolerance {
        Tolerance::Nmse(thresholds::MUL_MAT)
    }
}

/// A feed-forward block's gated unit: gate and up products of the same activations (`cols`
/// columns of `k`), then SWIGLU or GEGLU of the two, as the model graphs build it, and with
/// `down` the down projection of the result (back to `k` rows, weights of the same type). The
/// CUDA backend computes the three nodes in one kernel where the products take the int8 path,
/// and that kernel writes the down projection's Q8_1 activations too.
#[derive(Debug, Clone)]
pub struct FfnGlu {
    /// Weight type of both products.
    pub w: DType,
    /// The activation.
    pub op: tessera_tensor::graph::GluOp,
    /// Dot product length.
    pub k: usize,
    /// Output rows.
    pub m: usize,
    /// Activation columns.
    pub cols: usize,
    /// The down projection after the gated unit.
    pub down: bool,
}

impl CaseSpec for FfnGlu {
    fn op(&self) -> &'static str {
        "FFN_GLU"
    }
    fn dtype(&self) -> String {
        format!("{}{}", self.w.name(), if self.down { ",down" } else { "" })
    }
    fn build(&self, b: &mut Builder) -> Result<TensorId, TensorError> {
        let gate = b.leaf(self.w, &[self.k, self.m], default_init(self.w))?;
        let up = b.leaf(self.w, &[self.k, self.m], default_init(self.w))?;
        let x = b.leaf(DType::F32, &[self.k, self.cols], default_init(DType::F32))?;
        let g = b.ctx.mul_mat(gate, x)?;
        let u = b.ctx.mul_mat(up, x)?;
        let h = b.ctx.glu_split(g, u, self.op)?;
        if !self.down {
            return Ok(h);
        }
        let down = b.leaf(self.w, &[self.m, self.k], default_init(self.w))?;
        b.ctx.mul_mat(down, h)
    }
    fn tolerance(&self) -> Tolerance {
        Tolerance::Nmse(thresholds::MUL_MAT)
    }
}
