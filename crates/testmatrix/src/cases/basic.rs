//! Specs of the row-wise and element-wise ops: GET_ROWS, binary ops, SCALE, the norms, unary
//! ops, GLU, CONCAT, SUM_ROWS, ARGMAX.

use crate::case::{Builder, CaseSpec};
use crate::compare::{thresholds, Tolerance};
use crate::init::{default_init, Init};
use tessera_tensor::graph::{GluOp, TensorId, UnaryOp};
use tessera_tensor::{DType, TensorError};

const UNIT: Init = Init::Uniform { min: -1.0, max: 1.0 };

fn mul4(a: [usize; 4], b: [usize; 4]) -> [usize; 4] {
    [a[0] * b[0], a[1] * b[1], a[2] * b[2], a[3] * b[3]]
}

/// GET_ROWS: `r` of `m` rows of width `n` from a `src` tensor, batched over `be`; `view_idx`
/// reads the indexes through a non-contiguous view.
#[derive(Debug, Clone)]
pub struct GetRows {
    /// Type of the table.
    pub src: DType,
    /// Row width.
    pub n: usize,
    /// Rows in the table.
    pub m: usize,
    /// Rows picked.
    pub r: usize,
    /// Batch dims 2 and 3.
    pub be: [usize; 2],
    /// Indexes through a strided view (half of each index row).
    pub view_idx: bool,
}

impl CaseSpec for GetRows {
    fn op(&self) -> &'static str {
        "GET_ROWS"
    }
    fn dtype(&self) -> String {
        self.src.name().into()
    }
    fn build(&self, b: &mut Builder) -> Result<TensorId, TensorError> {
        let [b0, b1] = self.be;
        let a = b.leaf(self.src, &[self.n, self.m, b0, b1], default_init(self.src))?;
        let mut idx =
            b.leaf(DType::I32, &[self.r, b0, b1], Init::RowIds { n: self.m, distinct: false })?;
        if self.view_idx {
            idx = b.sub_view(idx, [self.r / 2, b0, b1, 1])?;
        }
        b.ctx.get_rows(a, idx)
    }
    fn tolerance(&self) -> Tolerance {
        Tolerance::Nmse(thresholds::DEFAULT)
    }
}

/// The binary element-wise ops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    /// ADD.
    Add,
    /// SUB.
    Sub,
    /// MUL.
    Mul,
    /// DIV.
    Div,
}

/// ADD/SUB/MUL/DIV: `src1` of shape `ne` broadcast over `src0` of shape `ne * nr`; `perm1`
/// reads `src1` through a permutation.
#[derive(Debug, Clone)]
pub struct Binary {
    /// The op.
    pub op: BinOp,
    /// Type of both sources and the result.
    pub dtype: DType,
    /// Shape of `src1`.
    pub ne: [usize; 4],
    /// Repeats of `src1` in `src0`.
    pub nr: [usize; 4],
    /// `src1` is a permuted view.
    pub perm1: bool,
}

impl CaseSpec for Binary {
    fn op(&self) -> &'static str {
        match self.op {
            BinOp::Add => "ADD",
            BinOp::Sub => "SUB",
            BinOp::Mul => "MUL",
            BinOp::Div => "DIV",
        }
    }
    fn dtype(&self) -> String {
        self.dtype.name().into()
    }
    fn build(&self, b: &mut Builder) -> Result<TensorId, TensorError> {
        // MUL and DIV have numerical issues around zero (test-backend-ops uses [0.9, 1.1]).
        let init = match self.op {
            BinOp::Mul | BinOp::Div => Init::Uniform { min: 0.9, max: 1.1 },
            _ => UNIT,
        };
        let ne = self.ne;
        let a = b.leaf(self.dtype, &mul4(ne, self.nr), init)?;
        let s1 = if self.perm1 {
            let t = b.leaf(self.dtype, &[ne[1], ne[2], ne[0], ne[3]], init)?;
            b.ctx.permute(t, [1, 2, 0, 3])?
        } else {
            b.leaf(self.dtype, &ne, init)?
        };
        match self.op {
            BinOp::Add => b.ctx.add(a, s1),
            BinOp::Sub => b.ctx.sub(a, s1),
            BinOp::Mul => b.ctx.mul(a, s1),
            BinOp::Div => b.ctx.div(a, s1),
        }
    }
    fn tolerance(&self) -> Tolerance {
        Tolerance::Nmse(thresholds::DEFAULT)
    }
}

/// SCALE: `x * scale + bias`.
#[derive(Debug, Clone)]
pub struct Scale {
    /// Shape.
    pub ne: [usize; 4],
    /// Multiplier.
    pub scale: f32,
    /// Added after.
    pub bias: f32,
}

impl CaseSpec for Scale {
    fn op(&self) -> &'static str {
        "SCALE"
    }
    fn dtype(&self) -> String {
        "f32".into()
    }
    fn build(&self, b: &mut Builder) -> Result<TensorId, TensorError> {
        let a = b.leaf(DType::F32, &self.ne, UNIT)?;
        b.ctx.scale(a, self.scale, self.bias)
    }
    fn tolerance(&self) -> Tolerance {
        Tolerance::Nmse(thresholds::DEFAULT)
    }
}

/// HADAMARD (llama.cpp's rotation of Q, K and V for a quantized KV cache): rows of `ne[0]`
/// values (a power of two) times the orthonormal Walsh-Hadamard matrix.
#[derive(Debug, Clone)]
pub struct Hadamard {
    /// Shape.
    pub ne: [usize; 4],
    /// Input type (F32 or F16).
    pub dtype: DType,
}

impl CaseSpec for Hadamard {
    fn op(&self) -> &'static str {
        "HADAMARD"
    }
    fn dtype(&self) -> String {
        self.dtype.name().into()
    }
    fn build(&self, b: &mut Builder) -> Result<TensorId, TensorError> {
        let a = b.leaf(self.dtype, &self.ne, UNIT)?;
        b.ctx.hadamard(a)
    }
    fn tolerance(&self) -> Tolerance {
        Tolerance::Nmse(thresholds::DEFAULT)
    }
}

/// RMS_NORM (`rms: true`, inputs in [-10, 10]) or NORM (inputs in [-1, 1]); `view` normalizes
/// the first half of each dimension of a larger tensor.
#[derive(Debug, Clone)]
pub struct Norm {
    /// RMS_NORM rather than NORM.
    pub rms: bool,
    /// Shape of the tensor the view (if any) is taken from.
    pub ne: [usize; 4],
    /// Epsilon.
    pub eps: f32,
    /// Through a non-contiguous view.
    pub view: bool,
}

impl CaseSpec for Norm {
    fn op(&self) -> &'static str {
        if self.rms {
            "RMS_NORM"
        } else {
            "NORM"
        }
    }
    fn dtype(&self) -> String {
        "f32".into()
    }
    fn build(&self, b: &mut Builder) -> Result<TensorId, TensorError> {
        let r = if self.rms { 10.0 } else { 1.0 };
        let mut a = b.leaf(DType::F32, &self.ne, Init::Uniform { min: -r, max: r })?;
        if self.view {
            let ne = self.ne.map(|n| (n / 2).max(1));
            a = b.sub_view(a, ne)?;
        }
        if self.rms {
            b.ctx.rms_norm(a, self.eps)
        } else {
            b.ctx.norm(a, self.eps)
        }
    }
    fn tolerance(&self) -> Tolerance {
        Tolerance::Nmse(thresholds::DEFAULT)
    }
}

/// RMS_NORM then MUL by a weight row broadcast over the rows (a model's norm with its scale):
/// two nodes that backends may run as one kernel (the CUDA backend's `rms_norm_mul_op`). With
/// `residual`, the normed tensor is a sum (ADD) that the output adds again, as a block's
/// residual stream (the CUDA backend's `add_rms_norm_mul_op` stores the sum for that).
#[derive(Debug, Clone)]
pub struct NormMul {
    /// Shape of the normed tensor.
    pub ne: [usize; 4],
    /// Epsilon.
    pub eps: f32,
    /// The residual ADD before the norm, its sum added to the output.
    pub residual: bool,
}

impl CaseSpec for NormMul {
    fn op(&self) -> &'static str {
        "RMS_NORM"
    }
    fn dtype(&self) -> String {
        if self.residual { "f32,add,mul" } else { "f32,mul" }.into()
    }
    fn build(&self, b: &mut Builder) -> Result<TensorId, TensorError> {
        let mut a = b.leaf(DType::F32, &self.ne, Init::Uniform { min: -10.0, max: 10.0 })?;
        if self.residual {
            let r = b.leaf(DType::F32, &self.ne, Init::Uniform { min: -10.0, max: 10.0 })?;
            a = b.ctx.add(a, r)?;
        }
        let w =
            b.leaf(DType::F32, &[self.ne[0], 1, 1, 1], Init::Uniform { min: -2.0, max: 2.0 })?;
        let n = b.ctx.rms_norm(a, self.eps)?;
        let y = b.ctx.mul(n, w)?;
        if self.residual {
            b.ctx.add(y, a)
        } else {
            Ok(y)
        }
    }
    fn tolerance(&self) -> Tolerance {
        Tolerance::Nmse(thresholds::DEFAULT)
    }
}

/// GELU/GELU_ERF/SILU/TANH on values uniform in `[-range, range)`; `view` reads a third of each
/// row of a wider tensor.
#[derive(Debug, Clone)]
pub struct Unary {
    /// The function.
    pub op: UnaryOp,
    /// F32 or F16.
    pub dtype: DType,
    /// Shape.
    pub ne: [usize; 4],
    /// Input range (test-backend-ops: 150, to reach both tails).
    pub range: f32,
    /// Through a non-contiguous view.
    pub view: bool,
    /// Threshold.
    pub max_nmse: f64,
}

pub(crate) fn unary_name(op: UnaryOp) -> &'static str {
    match op {
        UnaryOp::Gelu => "GELU",
        UnaryOp::GeluErf => "GELU_ERF",
        UnaryOp::Silu => "SILU",
        UnaryOp::Tanh => "TANH",
    }
}

impl CaseSpec for Unary {
    fn op(&self) -> &'static str {
        unary_name(self.op)
    }
    fn dtype(&self) -> String {
        self.dtype.name().into()
    }
    fn build(&self, b: &mut Builder) -> Result<TensorId, TensorError> {
        let init = Init::Uniform { min: -self.range, max: self.range };
        let a = if self.view {
            let [n0, n1, n2, n3] = self.ne;
            let t = b.leaf(self.dtype, &[n0 * 3, n1, n2, n3], init)?;
            b.sub_view(t, self.ne)?
        } else {
            b.leaf(self.dtype, &self.ne, init)?
        };
        b.ctx.unary(a, self.op)
    }
    fn tolerance(&self) -> Tolerance {
        Tolerance::Nmse(self.max_nmse)
    }
}

/// How a GLU case passes gate and value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GluForm {
    /// One tensor, gate in the first half of each row (`swapped`: the second).
    Fused {
        /// Gate in the second half.
        swapped: bool,
    },
    /// Two tensors (`ggml_swiglu_split`).
    Split,
}

/// SWIGLU/GEGLU on values in [-150, 150] (test-backend-ops' range).
#[derive(Debug, Clone)]
pub struct Glu {
    /// The activation.
    pub op: GluOp,
    /// F32 or F16.
    pub dtype: DType,
    /// Shape of the input (of each input, split form).
    pub ne: [usize; 4],
    /// Fused or split.
    pub form: GluForm,
    /// Inputs through non-contiguous views.
    pub view: bool,
}

impl CaseSpec for Glu {
    fn op(&self) -> &'static str {
        match self.op {
            GluOp::SwiGlu => "SWIGLU",
            GluOp::GeGlu => "GEGLU",
        }
    }
    fn dtype(&self) -> String {
        self.dtype.name().into()
    }
    fn build(&self, b: &mut Builder) -> Result<TensorId, TensorError> {
        let init = Init::Uniform { min: -150.0, max: 150.0 };
        let input = |b: &mut Builder| -> Result<TensorId, TensorError> {
            if self.view {
                let [n0, n1, n2, n3] = self.ne;
                let t = b.leaf(self.dtype, &[n0 * 3, n1, n2, n3], init)?;
                b.sub_view(t, self.ne)
            } else {
                b.leaf(self.dtype, &self.ne, init)
            }
        };
        let a = input(b)?;
        match self.form {
            GluForm::Fused { swapped } => b.ctx.glu(a, self.op, swapped),
            GluForm::Split => {
                let up = input(b)?;
                b.ctx.glu_split(a, up, self.op)
            }
        }
    }
    fn tolerance(&self) -> Tolerance {
        Tolerance::Nmse(thresholds::DEFAULT)
    }
}

/// CONCAT of `ne` and `ne` with `ne[dim] = ne_b`; `view_b` takes `b` from a wider tensor.
#[derive(Debug, Clone)]
pub struct Concat {
    /// Type of both.
    pub dtype: DType,
    /// Shape of `a`.
    pub ne: [usize; 4],
    /// Axis.
    pub dim: usize,
    /// `b`'s extent along `dim`.
    pub ne_b: usize,
    /// `b` through a non-contiguous view.
    pub view_b: bool,
}

impl CaseSpec for Concat {
    fn op(&self) -> &'static str {
        "CONCAT"
    }
    fn dtype(&self) -> String {
        self.dtype.name().into()
    }
    fn build(&self, b: &mut Builder) -> Result<TensorId, TensorError> {
        let a = b.leaf(self.dtype, &self.ne, UNIT)?;
        let mut ne_b = self.ne;
        ne_b[self.dim] = self.ne_b;
        let src1 = if self.view_b {
            let mut wide = ne_b;
            wide[0] *= 2;
            let t = b.leaf(self.dtype, &wide, UNIT)?;
            b.sub_view(t, ne_b)?
        } else {
            b.leaf(self.dtype, &ne_b, UNIT)?
        };
        b.ctx.concat(a, src1, self.dim)
    }
    fn tolerance(&self) -> Tolerance {
        Tolerance::Nmse(thresholds::DEFAULT)
    }
}

/// SUM_ROWS of an F32 tensor (`view`: of a non-contiguous view).
#[derive(Debug, Clone)]
pub struct SumRows {
    /// Shape.
    pub ne: [usize; 4],
    /// Through a view of the first half of each dimension.
    pub view: bool,
}

impl CaseSpec for SumRows {
    fn op(&self) -> &'static str {
        "SUM_ROWS"
    }
    fn dtype(&self) -> String {
        "f32".into()
    }
    fn build(&self, b: &mut Builder) -> Result<TensorId, TensorError> {
        let mut a = b.leaf(DType::F32, &self.ne, UNIT)?;
        if self.view {
            a = b.sub_view(a, self.ne.map(|n| (n / 2).max(1)))?;
        }
        b.ctx.sum_rows(a)
    }
    fn tolerance(&self) -> Tolerance {
        Tolerance::Nmse(thresholds::DEFAULT)
    }
}

/// ARGMAX of an `[ne0, ne1]` matrix whose rows are permutations (no ties): exact.
#[derive(Debug, Clone)]
pub struct Argmax {
    /// Row length.
    pub ne0: usize,
    /// Rows.
    pub ne1: usize,
}

impl CaseSpec for Argmax {
    fn op(&self) -> &'static str {
        "ARGMAX"
    }
    fn dtype(&self) -> String {
        "f32".into()
    }
    fn build(&self, b: &mut Builder) -> Result<TensorId, TensorError> {
        let a = b.leaf(DType::F32, &[self.ne0, self.ne1], Init::Permutation)?;
        b.ctx.argmax(a)
    }
    fn tolerance(&self) -> Tolerance {
        Tolerance::Exact
    }
}
