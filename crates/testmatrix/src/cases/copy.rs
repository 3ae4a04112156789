//! Specs of the copies: CPY (type conversion, quantization), CONT, DUP, SET_ROWS.

use crate::case::{Builder, CaseSpec};
use crate::compare::{thresholds, Tolerance};
use crate::init::{default_init, Init};
use tessera_tensor::graph::TensorId;
use tessera_tensor::{DType, TensorError};

/// Which copy op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyOp {
    /// `ggml_cpy` into a new tensor of the destination type.
    Cpy,
    /// `ggml_cont` (same type, contiguous).
    Cont,
    /// `ggml_dup` (same type and layout).
    Dup,
}

/// CPY/CONT/DUP of a `src` tensor of shape `ne` (values in [-150, 150], as test-backend-ops),
/// optionally read through a permutation or a transpose.
#[derive(Debug, Clone)]
pub struct Copy {
    /// The op.
    pub op: CopyOp,
    /// Source type.
    pub src: DType,
    /// Destination type (CPY only; CONT and DUP keep `src`).
    pub dst: DType,
    /// Shape of the source tensor before any permutation.
    pub ne: [usize; 4],
    /// Source read through `ggml_permute(axes)`.
    pub permute: Option<[usize; 4]>,
    /// Source read through `ggml_transpose`.
    pub transpose: bool,
    /// Destination shape (CPY, CONT), when not the source view's.
    pub dst_ne: Option<[usize; 4]>,
}

impl Copy {
    /// A plain CPY from `src` to `dst` of shape `ne`.
    pub fn cpy(src: DType, dst: DType, ne: [usize; 4]) -> Self {
        Copy { op: CopyOp::Cpy, src, dst, ne, permute: None, transpose: false, dst_ne: None }
    }

    fn dst_type(&self) -> DType {
        match self.op {
            CopyOp::Cpy => self.dst,
            CopyOp::Cont | CopyOp::Dup => self.src,
        }
    }
}

impl CaseSpec for Copy {
    fn op(&self) -> &'static str {
        match self.op {
            CopyOp::Cpy => "CPY",
            CopyOp::Cont => "CONT",
            CopyOp::Dup => "DUP",
        }
    }
    fn dtype(&self) -> String {
        match self.op {
            CopyOp::Cpy => format!("{}->{}", self.src, self.dst),
            _ => self.src.name().into(),
        }
    }
    fn build(&self, b: &mut Builder) -> Result<TensorId, TensorError> {
        let init = if self.src.is_quantized() {
            default_init(self.src)
        } else {
            Init::Uniform { min: -150.0, max: 150.0 }
        };
        let mut s = b.leaf(self.src, &self.ne, init)?;
        if let Some(axes) = self.permute {
            s = b.ctx.permute(s, axes)?;
        }
        if self.transpose {
            s = b.ctx.transpose(s)?;
        }
        let view_ne = b.ctx.get(s).ne;
        let dst_ne = self.dst_ne.unwrap_or(view_ne);
        match self.op {
            CopyOp::Cpy => {
                let d = b.leaf(self.dst, &dst_ne, default_init(self.dst))?;
                b.ctx.cpy(s, d)
            }
            CopyOp::Cont => b.ctx.cont(s, self.dst_ne.as_ref().map(|n| &n[..])),
            CopyOp::Dup => b.ctx.dup(s),
        }
    }
    fn tolerance(&self) -> Tolerance {
        let dst = self.dst_type();
        if dst == self.src {
            return Tolerance::Exact;
        }
        let n = self.ne.iter().product();
        Tolerance::one_quant_step(dst, n).unwrap_or(Tolerance::Nmse(thresholds::CPY))
    }
}

/// SET_ROWS: `r` F32 rows written into a `dst` tensor of `ne` (dims 2 and 3 repeated `nr23`
/// times) at distinct I32/I64 row indexes, broadcast over dims 2 and 3; `view` writes half the
/// rows through non-contiguous views of the rows and the indexes.
#[derive(Debug, Clone)]
pub struct SetRows {
    /// Destination type.
    pub dst: DType,
    /// Index type (I32 or I64).
    pub idx: DType,
    /// Destination shape before the repeats.
    pub ne: [usize; 4],
    /// Repeats of dims 2 and 3 (the indexes are broadcast over them).
    pub nr23: [usize; 2],
    /// Rows written.
    pub r: usize,
    /// Rows and indexes through views.
    pub view: bool,
}

impl CaseSpec for SetRows {
    fn op(&self) -> &'static str {
        "SET_ROWS"
    }
    fn dtype(&self) -> String {
        format!("{}<-{}", self.dst, self.idx)
    }
    fn build(&self, b: &mut Builder) -> Result<TensorId, TensorError> {
        let [n0, n1, n2, n3] = self.ne;
        let (d2, d3) = (n2 * self.nr23[0], n3 * self.nr23[1]);
        let dst = b.leaf(self.dst, &[n0, n1, d2, d3], default_init(self.dst))?;
        let mut rows =
            b.leaf(DType::F32, &[n0, self.r, d2, d3], Init::Uniform { min: -1.0, max: 1.0 })?;
        let mut idx =
            b.leaf(self.idx, &[self.r, n2, n3], Init::RowIds { n: n1, distinct: true })?;
        if self.view {
            rows = b.sub_view(rows, [n0, self.r / 2, d2, d3])?;
            idx = b.sub_view(idx, [self.r / 2, n2, n3, 1])?;
        }
        b.ctx.set_rows(dst, rows, idx)
    }
    fn tolerance(&self) -> Tolerance {
        let [n0, _, n2, n3] = self.ne;
        let n = n0 * self.r * n2 * self.nr23[0] * n3 * self.nr23[1];
        Tolerance::one_quant_step(self.dst, n).unwrap_or(Tolerance::Nmse(thresholds::DEFAULT))
    }
}
