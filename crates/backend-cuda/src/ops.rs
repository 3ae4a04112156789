//! Which op runs on which kernel of `kernels/ops.cu`, with which launch shape, and which
//! op/type combinations the backend accepts ([`supports`]).

use crate::gpu::Gpu;
use crate::CudaError;
use cudarc::driver::{DeviceRepr, LaunchConfig, PushKernelArg};
use tessera_backend::{Bindings, Buffer};
use tessera_tensor::graph::{
    Context, GluOp, Op, RopeMode, RopeParams, TensorDesc, TensorId, UnaryOp,
};
use tessera_tensor::DType::{self, *};

/// A tensor as the kernels see it (`struct TT` in kernels/types.cuh).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct TensorArg {
    p: u64,
    ne: [i64; 4],
    nb: [i64; 4],
    dtype: i32,
    pad: i32,
}

// SAFETY: a plain #[repr(C)] struct of integers, laid out as `struct TT` (8-byte aligned,
// 80 bytes), passed by value as a kernel parameter.
unsafe impl DeviceRepr for TensorArg {}

impl TensorArg {
    /// An absent optional source: every dimension 1, a null pointer the kernel never reads.
    const NONE: TensorArg = TensorArg { p: 0, ne: [1; 4], nb: [0; 4], dtype: 0, pad: 0 };
}

/// Types one element at a time (`ld_row` in types.cuh).
const FLOATS: &[DType] = &[F32, F16, BF16];
/// Block types `ld_row` dequantizes.
const BLOCKS: &[DType] =
    &[Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS];
/// Block types `quantize_block` writes (CPY and SET_ROWS destinations).
const QUANTIZABLE: &[DType] = &[Q8_0, Q4_0, Q4_1, Q5_0, Q5_1];

fn readable(t: DType) -> bool {
    FLOATS.contains(&t) || BLOCKS.contains(&t)
}

/// Whether the backend runs `node` (types, shapes), honestly: what it refuses stays on the CPU.
pub(crate) fn supports(ctx: &Context, node: TensorId) -> bool {
    let d = ctx.get(node);
    let s = |i: usize| d.src[i].map(|s| ctx.get(s));
    let float = |t: &TensorDesc| FLOATS.contains(&t.dtype);
    let src0 = match s(0) {
        Some(s0) => s0,
        None => return d.op.is_view() || d.op == Op::None,
    };
    match d.op {
        Op::None | Op::View | Op::Reshape | Op::Permute { .. } | Op::Transpose => true,
        Op::GetRows => {
            readable(src0.dtype) && s(1).is_some_and(|i| matches!(i.dtype, I32 | I64)) && float(d)
        }
        Op::Add | Op::Sub | Op::Mul | Op::Div | Op::Concat { .. } => {
            float(src0) && s(1).is_some_and(float) && float(d)
        }
        Op::Scale { .. } | Op::Unary(_) | Op::RmsNorm { .. } | Op::Norm { .. } | Op::SumRows => {
            float(src0) && float(d)
        }
        Op::Glu { .. } => float(src0) && s(1).is_none_or(float) && float(d),
        // No attention sinks yet (gpt-oss): those stay on the CPU.
        Op::SoftMax { .. } => float(src0) && s(1).is_none_or(float) && s(2).is_none() && float(d),
        Op::Rope(_) => {
            matches!(src0.dtype, F32 | F16)
                && s(1).is_some_and(|p| p.dtype == I32)
                && s(2).is_none_or(|f| f.dtype == F32)
                && d.dtype == src0.dtype
        }
        Op::MulMat => readable(src0.dtype) && s(1).is_some_and(float) && d.dtype == F32,
        Op::Cpy | Op::Cont | Op::Dup => {
            (readable(src0.dtype) && float(d))
                || (float(src0) && QUANTIZABLE.contains(&d.dtype) && d.ne[0] % 32 == 0)
                || (src0.dtype == d.dtype && BLOCKS.contains(&d.dtype))
        }
        Op::SetRows => {
            s(1).is_some_and(float)
                && s(2).is_some_and(|i| matches!(i.dtype, I32 | I64))
                && (float(d) || (QUANTIZABLE.contains(&d.dtype) && d.ne[0] % 32 == 0))
        }
        Op::FlashAttnExt { .. } => {
            src0.dtype == F32
                && s(1).is_some_and(|k| readable(k.dtype))
                && s(2).is_some_and(|v| readable(v.dtype) && v.ne[0] <= 512)
                && s(3).is_none_or(float)
                && s(4).is_none()
                && d.dtype == F32
        }
        Op::Argmax => src0.dtype == F32 && src0.ne[2] == 1 && src0.ne[3] == 1,
        // No kernels yet: the scheduler keeps the mixture-of-experts ops on the CPU.
        Op::MulMatId | Op::Argsort { .. } | Op::Clamp { .. } | Op::AddId | Op::SwiGluOai { .. } => {
            false
        }
    }
}

/// What one graph computation needs: the GPU, the bindings, the name for errors.
pub(crate) struct Launcher<'a> {
    pub gpu: &'a Gpu,
    pub ctx: &'a Context,
    pub bindings: &'a Bindings,
}

const THREADS: u32 = 256;

fn grid_for(n: usize) -> LaunchConfig {
    let blocks = n.div_ceil(THREADS as usize).clamp(1, 1 << 20) as u32;
    LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 }
}

fn per_row(rows: usize, threads: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (rows.max(1) as u32, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn warps(n: usize, per_block: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n.div_ceil(per_block).max(1) as u32, 1, 1),
        block_dim: (32 * per_block as u32, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Launches kernel `$entry` with `$cfg` and the arguments, in the kernel's parameter order.
macro_rules! launch {
    ($self:ident, $entry:expr, $cfg:expr, $($arg:expr),+ $(,)?) => {{
        let f = $self.gpu.function($entry)?;
        let mut b = $self.gpu.stream.launch_builder(&f);
        $( b.arg(&$arg); )+
        // SAFETY: every pointer argument is a device address inside a buffer of this device
        // (checked in `arg`) with the tensor's shape and strides, which is what the kernels
        // index within; scalars match the kernels' parameter types in order.
        unsafe { b.launch($cfg) }
            .map(|_| ())
            .map_err(|e| CudaError::Driver(format!("{}: {e:?}", $entry)))
    }};
}

impl Launcher<'_> {
    fn arg(&self, id: TensorId) -> Result<TensorArg, CudaError> {
        let d = self.ctx.get(id);
        let s = self
            .bindings
            .storage(self.ctx, id)
            .ok_or_else(|| CudaError::Driver(format!("tensor '{}' has no storage", d.name)))?;
        let buf: &dyn Buffer = &*s.buffer;
        if buf.is_host() || buf.name() != self.gpu.name {
            return Err(CudaError::Driver(format!(
                "tensor '{}' is in a {} buffer, which {} cannot read",
                d.name,
                buf.name(),
                self.gpu.name
            )));
        }
        let base = buf.device_ptr().map_or(0, |p| p.as_ptr() as usize as u64);
        Ok(TensorArg {
            p: base + s.offset as u64,
            ne: d.ne.map(|x| x as i64),
            nb: d.nb.map(|x| x as i64),
            dtype: d.dtype.id() as i32,
            pad: 0,
        })
    }

    fn src(&self, node: TensorId, i: usize) -> Result<TensorArg, CudaError> {
        match self.ctx.get(node).src[i] {
            Some(s) => self.arg(s),
            None => Ok(TensorArg::NONE),
        }
    }

    /// Queues the kernels of one node.
    pub(crate) fn node(&self, id: TensorId) -> Result<(), CudaError> {
        let d = self.ctx.get(id);
        let dst = self.arg(id)?;
        let a = self.src(id, 0)?;
        let n = d.n_elements();
        let rows = d.ne[1] * d.ne[2] * d.ne[3];
        match d.op {
            Op::GetRows => {
                let idx = self.src(id, 1)?;
                launch!(self, "get_rows_op", grid_for(n), dst, a, idx)
            }
            Op::Add | Op::Sub | Op::Mul | Op::Div => {
                let b = self.src(id, 1)?;
                let op: i32 = match d.op {
                    Op::Add => 0,
                    Op::Sub => 1,
                    Op::Mul => 2,
                    _ => 3,
                };
                launch!(self, "binary_op", grid_for(n), dst, a, b, op)
            }
            Op::Scale { scale, bias } => self.unary(dst, a, n, 0, scale, bias),
            Op::Unary(u) => {
                let op = match u {
                    UnaryOp::Gelu => 1,
                    UnaryOp::GeluErf => 2,
                    UnaryOp::Silu => 3,
                    UnaryOp::Tanh => 4,
                };
                self.unary(dst, a, n, op, 0.0, 0.0)
            }
            Op::Glu { op, swapped } => {
                let split = d.src[1].is_some();
                let b = if split { self.src(id, 1)? } else { TensorArg::NONE };
                let (op, swapped, split) =
                    (i32::from(op == GluOp::GeGlu), i32::from(swapped), i32::from(split));
                launch!(self, "glu_op", grid_for(n), dst, a, b, op, swapped, split)
            }
            Op::RmsNorm { eps } | Op::Norm { eps } => {
                let rms = i32::from(matches!(d.op, Op::RmsNorm { .. }));
                launch!(self, "norm_op", per_row(rows, THREADS), dst, a, eps, rms)
            }
            Op::SoftMax { scale, max_bias } => {
                let has = i32::from(d.src[1].is_some());
                let m = self.src(id, 1)?;
                launch!(
                    self,
                    "soft_max_op",
                    per_row(rows, THREADS),
                    dst,
                    a,
                    m,
                    has,
                    scale,
                    max_bias
                )
            }
            Op::Rope(p) => self.rope(id, dst, a, &p),
            Op::MulMat => {
                let b = self.src(id, 1)?;
                launch!(self, "mul_mat_op", warps(n, 8), dst, a, b)
            }
            Op::Cpy | Op::Cont | Op::Dup => {
                let src0 = self.ctx.get(d.src[0].expect("a source"));
                if QUANTIZABLE.contains(&d.dtype) && FLOATS.contains(&src0.dtype) {
                    launch!(self, "cpy_q_op", grid_for(n / 32), dst, a)
                } else if BLOCKS.contains(&d.dtype) {
                    let row_bytes = d.row_size() as i64;
                    launch!(
                        self,
                        "cpy_rows_bytes",
                        grid_for(row_bytes as usize * rows),
                        dst,
                        a,
                        row_bytes
                    )
                } else {
                    launch!(self, "cpy_op", grid_for(n), dst, a)
                }
            }
            Op::SetRows => {
                let (b, idx) = (self.src(id, 1)?, self.src(id, 2)?);
                let bd = self.ctx.get(d.src[1].expect("rows"));
                if QUANTIZABLE.contains(&d.dtype) {
                    launch!(self, "set_rows_q_op", grid_for(bd.n_elements() / 32), dst, b, idx)
                } else {
                    launch!(self, "set_rows_op", grid_for(bd.n_elements()), dst, b, idx)
                }
            }
            Op::FlashAttnExt { scale, max_bias, softcap } => {
                let (k, v, m) = (self.src(id, 1)?, self.src(id, 2)?, self.src(id, 3)?);
                let has = i32::from(d.src[3].is_some());
                let q = self.ctx.get(d.src[0].expect("q"));
                let n_warps = q.ne[1] * q.ne[2] * q.ne[3];
                launch!(
                    self,
                    "flash_attn_op",
                    warps(n_warps, 4),
                    dst,
                    a,
                    k,
                    v,
                    m,
                    has,
                    scale,
                    max_bias,
                    softcap
                )
            }
            Op::Concat { dim } => {
                let b = self.src(id, 1)?;
                let dim = dim as i32;
                launch!(self, "concat_op", grid_for(n), dst, a, b, dim)
            }
            Op::SumRows => launch!(self, "sum_rows_op", per_row(rows, THREADS), dst, a),
            Op::Argmax => {
                let r = self.ctx.get(d.src[0].expect("a source")).ne[1];
                launch!(self, "argmax_op", per_row(r, 32), dst, a)
            }
            Op::None | Op::View | Op::Reshape | Op::Permute { .. } | Op::Transpose => Ok(()),
            Op::MulMatId
            | Op::Argsort { .. }
            | Op::Clamp { .. }
            | Op::AddId
            | Op::SwiGluOai { .. } => Err(CudaError::Driver(format!(
                "{} has no CUDA kernel (supports() refuses it)",
                d.op.name()
            ))),
        }
    }

    fn unary(
        &self,
        dst: TensorArg,
        a: TensorArg,
        n: usize,
        op: i32,
        p0: f32,
        p1: f32,
    ) -> Result<(), CudaError> {
        launch!(self, "unary_op", grid_for(n), dst, a, op, p0, p1)
    }

    fn rope(
        &self,
        id: TensorId,
        dst: TensorArg,
        a: TensorArg,
        p: &RopeParams,
    ) -> Result<(), CudaError> {
        let d = self.ctx.get(id);
        let pos = self.src(id, 1)?;
        let ff = self.src(id, 2)?;
        let has_ff = i32::from(d.src[2].is_some());
        let n_dims = p.n_dims as i32;
        let neox = i32::from(p.mode == RopeMode::Neox);
        let [c0, c1] = p.yarn_corr_dims();
        let pairs = d.n_elements() / 2;
        launch!(
            self,
            "rope_op",
            grid_for(pairs),
            dst,
            a,
            pos,
            ff,
            has_ff,
            n_dims,
            neox,
            p.freq_base,
            p.freq_scale,
            p.ext_factor,
            p.attn_factor,
            c0,
            c1
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `supports` says yes to the weight types with a dequantizer and to the quantizable
    /// destinations, no to the rest (so the scheduler keeps those on the CPU).
    #[test]
    fn supports_follows_the_kernels() {
        let mut ctx = Context::new();
        let x = ctx.new_tensor(F32, &[256, 4]).unwrap();
        for (w, want) in
            [(Q4_K, true), (IQ4_XS, true), (MXFP4, true), (IQ2_XXS, false), (TQ2_0, false)]
        {
            let a = ctx.new_tensor(w, &[256, 8]).unwrap();
            let y = ctx.mul_mat(a, x).unwrap();
            assert_eq!(supports(&ctx, y), want, "MUL_MAT {w}");
        }
        for (d, want) in [(F16, true), (Q8_0, true), (Q5_1, true), (Q4_K, false), (IQ4_NL, false)] {
            let dst = ctx.new_tensor(d, &[256, 4]).unwrap();
            let c = ctx.cpy(x, dst).unwrap();
            assert_eq!(supports(&ctx, c), want, "CPY F32 -> {d}");
        }
        let v = ctx.new_tensor(F32, &[8]).unwrap();
        let m = ctx.argmax(x).unwrap();
        assert!(supports(&ctx, m));
        assert!(supports(&ctx, v), "a leaf");
    }

    /// The kernel descriptor has the layout of `struct TT`: 80 bytes, 8-aligned.
    #[test]
    fn tensor_arg_matches_the_kernels_struct() {
        assert_eq!(std::mem::size_of::<TensorArg>(), 80);
        assert_eq!(std::mem::align_of::<TensorArg>(), 8);
    }
}
