//! IM2COL, POOL_2D and the convolution built from them (`ggml_conv_2d`), as vision encoders
//! use them: patch embeddings (stride = kernel), padded and dilated kernels, 1-D, F16 and F32.

use crate::case::{Builder, CaseSpec};
use crate::compare::{thresholds, Tolerance};
use crate::init::Init;
use tessera_tensor::graph::{PoolOp, TensorId};
use tessera_tensor::{DType, TensorError};

/// IM2COL of an image by a kernel's shape.
#[derive(Debug, Clone)]
pub struct Im2Col {
    /// Kernel `[KW, KH, IC, OC]` (2-D) or `[K, IC, OC, 1]` (1-D).
    pub kernel: [usize; 4],
    /// Image `[IW, IH, IC, N]` (2-D) or `[IW, IC, N, 1]` (1-D).
    pub image: [usize; 4],
    /// Strides, paddings, dilations (x, y).
    pub s: [i32; 2],
    /// See `s`.
    pub p: [i32; 2],
    /// See `s`.
    pub d: [i32; 2],
    /// 2-D.
    pub is_2d: bool,
    /// The image's type.
    pub src: DType,
    /// The result's type.
    pub dst: DType,
}

impl CaseSpec for Im2Col {
    fn op(&self) -> &'static str {
        "IM2COL"
    }
    fn dtype(&self) -> String {
        format!("{}->{}", self.src.name(), self.dst.name())
    }
    fn build(&self, b: &mut Builder) -> Result<TensorId, TensorError> {
        let k = b.leaf(DType::F16, &self.kernel, Init::Uniform { min: -1.0, max: 1.0 })?;
        let img = b.leaf(self.src, &self.image, Init::Uniform { min: -1.0, max: 1.0 })?;
        b.ctx.im2col(k, img, self.s, self.p, self.d, self.is_2d, self.dst)
    }
    fn tolerance(&self) -> Tolerance {
        // Copies (with the reference's own rounding into the result's type).
        Tolerance::Exact
    }
}

/// POOL_2D of `ne` planes.
#[derive(Debug, Clone)]
pub struct Pool2d {
    /// Source shape.
    pub ne: [usize; 4],
    /// The source's type.
    pub src: DType,
    /// Average or maximum.
    pub op: PoolOp,
    /// Kernel, strides, paddings (x, y).
    pub k: [i32; 2],
    /// See `k`.
    pub s: [i32; 2],
    /// See `k`.
    pub p: [i32; 2],
}

impl CaseSpec for Pool2d {
    fn op(&self) -> &'static str {
        "POOL_2D"
    }
    fn dtype(&self) -> String {
        format!("{} {:?}", self.src.name(), self.op).to_lowercase()
    }
    fn build(&self, b: &mut Builder) -> Result<TensorId, TensorError> {
        let a = b.leaf(self.src, &self.ne, Init::Uniform { min: -1.0, max: 1.0 })?;
        b.ctx.pool_2d(a, self.op, self.k, self.s, self.p)
    }
    fn tolerance(&self) -> Tolerance {
        match self.op {
            PoolOp::Max => Tolerance::Exact,
            PoolOp::Avg => Tolerance::Nmse(thresholds::DEFAULT),
        }
    }
}

/// `ggml_conv_2d`: IM2COL to F16, MUL_MAT, permuted back.
#[derive(Debug, Clone)]
pub struct Conv2d {
    /// Kernel `[KW, KH, IC, OC]`.
    pub kernel: [usize; 4],
    /// Image `[IW, IH, IC, N]`.
    pub image: [usize; 4],
    /// The kernel's type.
    pub ktype: DType,
    /// Strides, paddings (x, y); no dilation.
    pub s: [i32; 2],
    /// See `s`.
    pub p: [i32; 2],
}

impl CaseSpec for Conv2d {
    fn op(&self) -> &'static str {
        "CONV_2D"
    }
    fn dtype(&self) -> String {
        self.ktype.name().into()
    }
    fn build(&self, b: &mut Builder) -> Result<TensorId, TensorError> {
        let k = b.leaf(self.ktype, &self.kernel, Init::Uniform { min: -1.0, max: 1.0 })?;
        let img = b.leaf(DType::F32, &self.image, Init::Uniform { min: -1.0, max: 1.0 })?;
        b.ctx.conv_2d(k, img, self.s, self.p, [1, 1])
    }
    fn tolerance(&self) -> Tolerance {
        Tolerance::Nmse(thresholds::MUL_MAT)
    }
}
