//! The launches of one node: which kernels of `kernels/` run it, with which arguments and launch
//! shape, for the kernel its plan chose ([`crate::plan`]).

use super::args::{grid_for, per_row, warps, Arg, TensorArg, THREADS};
use crate::gpu::Gpu;
use crate::plan::{
    gemm_scratch, mmq_split, AttnPath, Kernel, MatmulPath, MoePath, NodePlan, Q8Input,
    ATTN_MMA_ROWS, ATTN_MMA_THREADS, ATTN_TILE_ROWS, ATTN_TILE_THREADS, MMQ_COLS, MMQ_ROWS,
    MMQ_THREADS,
};
use crate::types::row_of;
use crate::CudaError;
use cudarc::driver::LaunchConfig;
use tessera_backend::{Bindings, Buffer};
use tessera_tensor::graph::{Context, GluOp, Op, RopeMode, TensorId, UnaryOp};
use tessera_tensor::DType;

/// One kernel launch, before its function is looked up.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    pub entry: &'static str,
    pub cfg: LaunchConfig,
    pub args: Vec<Arg>,
}

/// `quantize_q8_1` of `blocks` 32-value blocks of f32 at `x` into Q8_1 blocks at `yq`.
pub(super) fn quantize_q8_1(x: u64, yq: u64, blocks: i64) -> Pending {
    let args = vec![Arg::Ptr(x), Arg::Ptr(yq), blocks.into()];
    Pending { entry: "quantize_q8_1", cfg: warps(blocks as usize, 8), args }
}

pub(super) fn one(entry: &'static str, cfg: LaunchConfig, args: Vec<Arg>) -> Vec<Pending> {
    vec![Pending { entry, cfg, args }]
}

/// What resolving a graph's nodes needs.
pub(crate) struct Resolver<'a> {
    pub gpu: &'a Gpu,
    pub ctx: &'a Context,
    pub bindings: &'a Bindings,
    /// The scratch arena's device address (valid while the executor's plan lives).
    pub scratch: u64,
    /// The region of the arena a node may use for itself ([`NodePlan::scratch`] bytes).
    pub own: u64,
    /// The zeroed group counters of the gate/up kernels that write Q8_1 blocks
    /// ([`crate::plan::ROW_COUNTERS`] u32).
    pub counters: u64,
    /// The fast paths allowed.
    pub paths: crate::plan::Paths,
}

impl Resolver<'_> {
    /// The int8 matrix-vector kernels read `dtype`'s blocks with loads of the type table's
    /// `load_align` bytes: weights at address `p` with row (and expert) strides `strides` must
    /// keep every block start that aligned. Tensors the loader and the graph allocator place
    /// always do; a view at an odd offset is an error here rather than a misaligned load on the
    /// GPU.
    pub(super) fn check_block_alignment(
        &self,
        dtype: tessera_tensor::DType,
        p: u64,
        strides: &[i64],
    ) -> Result<(), CudaError> {
        let align = row_of(dtype).map_or(1, |r| r.load_align) as u64;
        let off = strides.iter().fold(p, |m, &s| m | s as u64) % align;
        if off != 0 {
            return Err(CudaError::Driver(format!(
                "{dtype} weights at {p:#x} with strides {strides:?}: the int8 matrix-vector \
                 kernels need their blocks {align}-byte aligned"
            )));
        }
        Ok(())
    }

    /// Warps a row of the int8 matrix-vector kernels takes for rows of `nblocks` 32-value
    /// blocks (one where `mmvq-split` is off).
    pub(super) fn warps_per_row(&self, nblocks: usize) -> usize {
        if self.paths.allows(crate::plan::FastPath::MmvqSplit) {
            crate::plan::mmvq_warps_per_row(nblocks)
        } else {
            1
        }
    }

    pub(super) fn arg(&self, id: TensorId) -> Result<TensorArg, CudaError> {
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

    /// An int8 product's Q8_1 activations (`q8`, placed by [`crate::plan::share_q8_1`]): their
    /// address, and the quantization of the `blocks` blocks at `x` where this product is their
    /// first reader.
    pub(super) fn q8_activations(
        &self,
        q8: Option<Q8Input>,
        x: u64,
        blocks: i64,
    ) -> Result<(u64, Option<Pending>), CudaError> {
        let q8 = q8.ok_or_else(|| {
            CudaError::Driver("an int8 product without its Q8_1 activations".into())
        })?;
        let yq = self.scratch + q8.offset as u64;
        Ok((yq, q8.quantize.then(|| quantize_q8_1(x, yq, blocks))))
    }

    pub(super) fn src(&self, node: TensorId, i: usize) -> Result<TensorArg, CudaError> {
        match self.ctx.get(node).src[i] {
            Some(s) => self.arg(s),
            None => Ok(TensorArg::NONE),
        }
    }

    /// The launches of `id` on the kernel of `plan` (`q8`: where an int8 product's Q8_1
    /// activations are, and whether it writes them; `q8_out`: where an attention's merge
    /// writes its output's Q8_1 blocks, [`crate::plan::fold_q8_into_writer`]).
    pub(crate) fn node(
        &self,
        id: TensorId,
        plan: &NodePlan,
        q8: Option<Q8Input>,
        q8_out: Option<u64>,
    ) -> Result<Vec<Pending>, CudaError> {
        let d = self.ctx.get(id);
        if plan.kernel == Kernel::Nothing {
            return Ok(Vec::new());
        }
        let dst = self.arg(id)?;
        let a = self.src(id, 0)?;
        let n = d.n_elements();
        let rows = d.ne[1] * d.ne[2] * d.ne[3];
        Ok(match plan.kernel {
            Kernel::Nothing => Vec::new(),
            Kernel::GetRows => {
                one("get_rows_op", grid_for(n), vec![dst.into(), a.into(), self.src(id, 1)?.into()])
            }
            Kernel::Binary => {
                let op: i32 = match d.op {
                    Op::Add => 0,
                    Op::Sub => 1,
                    Op::Mul => 2,
                    _ => 3,
                };
                one(
                    "binary_op",
                    grid_for(n),
                    vec![dst.into(), a.into(), self.src(id, 1)?.into(), op.into()],
                )
            }
            Kernel::Unary => {
                let (op, p0, p1) = match d.op {
                    Op::Scale { scale, bias } => (0, scale, bias),
                    Op::Clamp { min, max } => (5, min, max),
                    Op::Unary(u) => {
                        let op = match u {
                            UnaryOp::Gelu => 1,
                            UnaryOp::GeluErf => 2,
                            UnaryOp::Silu => 3,
                            UnaryOp::Tanh => 4,
                        };
                        (op, 0.0, 0.0)
                    }
                    _ => return Err(mismatch(d.op.name(), plan)),
                };
                one(
                    "unary_op",
                    grid_for(n),
                    vec![dst.into(), a.into(), op.into(), p0.into(), p1.into()],
                )
            }
            Kernel::Glu => {
                let Op::Glu { op, swapped } = d.op else { return Err(mismatch(d.op.name(), plan)) };
                let split = d.src[1].is_some();
                let b = if split { self.src(id, 1)? } else { TensorArg::NONE };
                let args = vec![
                    dst.into(),
                    a.into(),
                    b.into(),
                    i32::from(op == GluOp::GeGlu).into(),
                    i32::from(swapped).into(),
                    i32::from(split).into(),
                ];
                one("glu_op", grid_for(n), args)
            }
            Kernel::Norm => {
                let (eps, rms) = match d.op {
                    Op::RmsNorm { eps } => (eps, 1i32),
                    Op::Norm { eps } => (eps, 0),
                    _ => return Err(mismatch(d.op.name(), plan)),
                };
                one(
                    "norm_op",
                    per_row(rows, THREADS),
                    vec![dst.into(), a.into(), eps.into(), rms.into()],
                )
            }
            Kernel::SoftMax => {
                let Op::SoftMax { scale, max_bias } = d.op else {
                    return Err(mismatch(d.op.name(), plan));
                };
                let has = i32::from(d.src[1].is_some());
                let args = vec![
                    dst.into(),
                    a.into(),
                    self.src(id, 1)?.into(),
                    has.into(),
                    scale.into(),
                    max_bias.into(),
                    self.src(id, 2)?.into(),
                    i32::from(d.src[2].is_some()).into(),
                ];
                one("soft_max_op", per_row(rows, THREADS), args)
            }
            Kernel::Rope => self.rope(id, dst, a)?,
            Kernel::MulMat(path) => self.mul_mat(id, path, dst, a, q8)?,
            Kernel::CpyQuantize => one("cpy_q_op", grid_for(n / 32), vec![dst.into(), a.into()]),
            Kernel::CpyBlocks => {
                let row_bytes = d.row_size() as i64;
                let cfg = grid_for(row_bytes as usize * rows);
                one("cpy_rows_bytes", cfg, vec![dst.into(), a.into(), row_bytes.into()])
            }
            Kernel::Cpy => one("cpy_op", grid_for(n), vec![dst.into(), a.into()]),
            Kernel::SetRows | Kernel::SetRowsQuantize => {
                let bn = self.ctx.get(d.src[1].expect("planned with rows")).n_elements();
                let args = vec![dst.into(), self.src(id, 1)?.into(), self.src(id, 2)?.into()];
                if plan.kernel == Kernel::SetRowsQuantize {
                    one("set_rows_q_op", grid_for(bn / 32), args)
                } else {
                    one("set_rows_op", grid_for(bn), args)
                }
            }
            Kernel::FlashAttn(path) => {
                let Op::FlashAttnExt { scale, max_bias, softcap } = d.op else {
                    return Err(mismatch(d.op.name(), plan));
                };
                let q = self.ctx.get(d.src[0].expect("q"));
                let rows = q.ne[1] * q.ne[2] * q.ne[3];
                let mut args = vec![
                    dst.into(),
                    a.into(),
                    self.src(id, 1)?.into(),
                    self.src(id, 2)?.into(),
                    self.src(id, 3)?.into(),
                    i32::from(d.src[3].is_some()).into(),
                    scale.into(),
                    max_bias.into(),
                    softcap.into(),
                ];
                match path {
                    AttnPath::Generic | AttnPath::Tile | AttnPath::Mma => {
                        // All take the sinks (the decode path has none), the same arguments.
                        args.push(self.src(id, 4)?.into());
                        args.push(Arg::I32(i32::from(d.src[4].is_some())));
                        let (entry, rows_per_block, threads) = match path {
                            AttnPath::Generic => {
                                return Ok(one("flash_attn_op", warps(rows, 4), args));
                            }
                            AttnPath::Tile => ("fattn_tile_op", ATTN_TILE_ROWS, ATTN_TILE_THREADS),
                            _ => ("fattn_mma_op", ATTN_MMA_ROWS, ATTN_MMA_THREADS),
                        };
                        let blocks = q.ne[1].div_ceil(rows_per_block) as u32;
                        let cfg = LaunchConfig {
                            grid_dim: (blocks, q.ne[2] as u32, q.ne[3] as u32),
                            block_dim: (threads, 1, 1),
                            shared_mem_bytes: 0,
                        };
                        one(entry, cfg, args)
                    }
                    AttnPath::Vec { splits } | AttnPath::MmaDec { splits } => {
                        let kd = self.ctx.get(d.src[1].expect("k"));
                        let n_kv = kd.ne[1];
                        let chunk = n_kv.div_ceil(splits as usize) as i64;
                        args.extend([(splits as i32).into(), chunk.into(), Arg::Ptr(self.own)]);
                        // A block per (row, chunk) of four warps, or per (KV head, group of
                        // 16 query rows of its heads, chunk) of four warps; the same partials.
                        let (entry, cfg) = if matches!(path, AttnPath::Vec { .. }) {
                            let cfg = LaunchConfig {
                                grid_dim: (rows as u32, splits, 1),
                                block_dim: (4 * 32, 1, 1),
                                shared_mem_bytes: 0,
                            };
                            ("fattn_vec_op", cfg)
                        } else {
                            // A block per 16 of the rows sharing a KV head.
                            let groups = (q.ne[2] / kd.ne[2] * q.ne[1]).div_ceil(16);
                            let cfg = LaunchConfig {
                                grid_dim: ((kd.ne[2] * groups) as u32, splits, q.ne[3] as u32),
                                block_dim: (crate::plan::ATTN_MMA_DEC_THREADS, 1, 1),
                                shared_mem_bytes: 0,
                            };
                            ("fattn_mma_dec_op", cfg)
                        };
                        let mut v = one(entry, cfg, args);
                        if splits > 1 {
                            let dv = self.ctx.get(d.src[2].expect("v")).ne[0] as i64;
                            let merge = vec![
                                dst.into(),
                                a.into(),
                                Arg::Ptr(self.own),
                                (splits as i32).into(),
                                dv.into(),
                                Arg::Ptr(q8_out.unwrap_or(0)),
                            ];
                            v.extend(one("fattn_vec_combine", per_row(rows, 128), merge));
                        }
                        v
                    }
                }
            }
            Kernel::MulMatId(MoePath::Generic) => {
                let args =
                    vec![dst.into(), a.into(), self.src(id, 1)?.into(), self.src(id, 2)?.into()];
                one("mul_mat_id_op", warps(n, 8), args)
            }
            Kernel::MulMatId(path @ (MoePath::Mmvq | MoePath::Mmq)) => {
                self.mul_mat_id_int8(id, path, dst, a)?
            }
            Kernel::Argsort => {
                let Op::Argsort { descending } = d.op else {
                    return Err(mismatch(d.op.name(), plan));
                };
                one(
                    "argsort_op",
                    grid_for(n),
                    vec![dst.into(), a.into(), i32::from(descending).into()],
                )
            }
            Kernel::AddId => {
                let args =
                    vec![dst.into(), a.into(), self.src(id, 1)?.into(), self.src(id, 2)?.into()];
                one("add_id_op", grid_for(n), args)
            }
            Kernel::SwiGluOai => {
                let Op::SwiGluOai { alpha, limit } = d.op else {
                    return Err(mismatch(d.op.name(), plan));
                };
                let args =
                    vec![dst.into(), a.into(), self.src(id, 1)?.into(), alpha.into(), limit.into()];
                one("swiglu_oai_op", grid_for(n), args)
            }
            Kernel::Concat => {
                let Op::Concat { dim } = d.op else { return Err(mismatch(d.op.name(), plan)) };
                one(
                    "concat_op",
                    grid_for(n),
                    vec![dst.into(), a.into(), self.src(id, 1)?.into(), (dim as i32).into()],
                )
            }
            Kernel::Im2Col => {
                let Op::Im2Col { s0, s1, p0, p1, d0, d1, is_2d } = d.op else {
                    return Err(mismatch(d.op.name(), plan));
                };
                let k = self.ctx.get(d.src[0].expect("the kernel"));
                let (kh, kw) =
                    if is_2d { (k.ne[1] as i32, k.ne[0] as i32) } else { (1, k.ne[0] as i32) };
                let mut args = vec![dst.into(), self.src(id, 1)?.into(), kh.into(), kw.into()];
                args.extend([s0, s1, p0, p1, d0, d1, i32::from(is_2d)].map(Arg::from));
                one("im2col_op", grid_for(n), args)
            }
            Kernel::Pool2d => {
                let Op::Pool2d { op, k0, k1, s0, s1, p0, p1 } = d.op else {
                    return Err(mismatch(d.op.name(), plan));
                };
                let max = i32::from(op == tessera_tensor::graph::PoolOp::Max);
                let mut args = vec![dst.into(), a.into()];
                args.extend([max, k0, k1, s0, s1, p0, p1].map(Arg::from));
                one("pool2d_op", grid_for(n), args)
            }
            Kernel::SumRows => {
                one("sum_rows_op", per_row(rows, THREADS), vec![dst.into(), a.into()])
            }
            Kernel::Hadamard => {
                one("hadamard_op", per_row(rows, THREADS), vec![dst.into(), a.into()])
            }
            Kernel::Argmax => {
                let r = self.ctx.get(d.src[0].expect("a source")).ne[1];
                one("argmax_op", per_row(r, 256), vec![dst.into(), a.into()])
            }
        })
    }

    fn rope(&self, id: TensorId, dst: TensorArg, a: TensorArg) -> Result<Vec<Pending>, CudaError> {
        let mut args = vec![dst.into(), a.into()];
        args.extend(self.rope_params(id)?);
        Ok(one("rope_op", grid_for(self.ctx.get(id).n_elements() / 2), args))
    }

    /// ROPE node `id`'s arguments after its destination and source (positions, frequency
    /// factors, mode and YaRN parameters, M-RoPE sections), shared by `rope_op` and the fused
    /// `rope_set_rows_op`.
    pub(super) fn rope_params(&self, id: TensorId) -> Result<Vec<Arg>, CudaError> {
        let d = self.ctx.get(id);
        let Op::Rope(p) = d.op else {
            return Err(CudaError::Driver("ROPE planned for another op".into()));
        };
        let [c0, c1] = p.yarn_corr_dims();
        let mut args = vec![
            self.src(id, 1)?.into(),
            self.src(id, 2)?.into(),
            i32::from(d.src[2].is_some()).into(),
            (p.n_dims as i32).into(),
            match p.mode {
                RopeMode::Norm => 0,
                RopeMode::Neox => 2,
                RopeMode::Mrope(_) => 8,
                RopeMode::Vision(_) => 24,
                RopeMode::Imrope(_) => 40,
            }
            .into(),
            p.freq_base.into(),
            p.freq_scale.into(),
            p.ext_factor.into(),
            p.attn_factor.into(),
            c0.into(),
            c1.into(),
        ];
        args.extend(p.mode.sections().unwrap_or_default().map(Arg::from));
        Ok(args)
    }

    /// A product on `path`: the generic kernel, or a matrix-vector kernel over the one
    /// contiguous column the plan checked (raw addresses, the weight's row stride).
    fn mul_mat(
        &self,
        id: TensorId,
        path: MatmulPath,
        dst: TensorArg,
        w: TensorArg,
        q8: Option<Q8Input>,
    ) -> Result<Vec<Pending>, CudaError> {
        let d = self.ctx.get(id);
        let x = self.src(id, 1)?;
        let wd = self.ctx.get(d.src[0].expect("weights"));
        let (nrows, ncols) = (wd.ne[1], wd.ne[0]);
        let row_bytes = wd.nb[1] as i64;
        let kernel = |pick: fn(&crate::types::TypeRow) -> Option<&'static str>| {
            row_of(wd.dtype).and_then(pick).ok_or_else(|| {
                CudaError::Driver(format!(
                    "{path} planned for {} weights without a kernel",
                    wd.dtype
                ))
            })
        };
        let cfg = warps(nrows, 8);
        Ok(match path {
            MatmulPath::Generic => {
                one("mul_mat_op", warps(d.n_elements(), 8), vec![dst.into(), w.into(), x.into()])
            }
            MatmulPath::Mmvq | MatmulPath::Mmq => {
                let nblocks = ncols / 32;
                // Columns of the activations (contiguous, checked by the plan) and the
                // output's column stride in floats; both kernels take the same arguments.
                let cols = x.ne[1];
                let (yq, quantize) = self.q8_activations(q8, x.p, nblocks as i64 * cols)?;
                // MMQ splits K in shares whose sums go to the node's scratch where the launch
                // would be small (plan: mmq_split), then adds them up in share order.
                let split =
                    (path == MatmulPath::Mmq).then(|| mmq_split(nrows, cols as usize, nblocks));
                let shared = split.is_some_and(|s| s.splits > 1);
                let (out, out_col) =
                    if shared { (self.own, nrows as i64) } else { (dst.p, dst.nb[1] / 4) };
                let mut mm = vec![
                    Arg::Ptr(w.p),
                    Arg::Ptr(yq),
                    Arg::Ptr(out),
                    (nrows as i32).into(),
                    (nblocks as i32).into(),
                    row_bytes.into(),
                    (cols as i32).into(),
                    out_col.into(),
                ];
                let mut v: Vec<Pending> = quantize.into_iter().collect();
                let Some(split) = split else {
                    // MMVQ: each row over `wpr` warps.
                    self.check_block_alignment(wd.dtype, w.p, &[row_bytes])?;
                    let wpr = self.warps_per_row(nblocks);
                    mm.push((wpr as i32).into());
                    let cfg = warps(nrows * wpr, 8);
                    v.push(Pending { entry: kernel(|r| r.mmvq)?, cfg, args: mm });
                    return Ok(v);
                };
                let cols = cols as usize;
                let shares = (nrows * cols) as i64;
                mm.push((split.kper as i32).into());
                mm.push((if shared { shares } else { 0 }).into());
                let grid = (
                    nrows.div_ceil(MMQ_ROWS) as u32,
                    cols.div_ceil(MMQ_COLS) as u32,
                    split.splits as u32,
                );
                let cfg = LaunchConfig {
                    grid_dim: grid,
                    block_dim: (MMQ_THREADS, 1, 1),
                    shared_mem_bytes: 0,
                };
                v.push(Pending { entry: kernel(|r| r.mmq)?, cfg, args: mm });
                if shared {
                    let sum = vec![
                        Arg::Ptr(self.own),
                        Arg::Ptr(dst.p),
                        (nrows as i32).into(),
                        (cols as i32).into(),
                        (split.splits as i32).into(),
                        (dst.nb[1] / 4).into(),
                    ];
                    v.push(Pending {
                        entry: "mmq_sum_splits",
                        cfg: grid_for(nrows * cols),
                        args: sum,
                    });
                }
                v
            }
            MatmulPath::Gemm => {
                // F16 copies in the node's own scratch (cpy_op converts element by element),
                // then cuBLAS; contiguous F16 weights are read in place.
                let (k, m, n) = (ncols, nrows, x.ne[1] as usize);
                let s = gemm_scratch(wd, n);
                let half = |p: u64, rows: usize| TensorArg {
                    p,
                    ne: [k as i64, rows as i64, 1, 1],
                    nb: [2, 2 * k as i64, (2 * k * rows) as i64, (2 * k * rows) as i64],
                    dtype: DType::F16.id() as i32,
                    pad: 0,
                };
                let mut v = Vec::with_capacity(3);
                let w16 = if s.w_bytes == 0 {
                    w.p
                } else {
                    let to = half(self.own, m);
                    v.push(Pending {
                        entry: "cpy_op",
                        cfg: grid_for(k * m),
                        args: vec![to.into(), w.into()],
                    });
                    self.own
                };
                let x16 = self.own + s.x_offset as u64;
                let to = half(x16, n);
                v.push(Pending {
                    entry: "cpy_op",
                    cfg: grid_for(k * n),
                    args: vec![to.into(), x.into()],
                });
                let ldc = (dst.nb[1] / 4) as usize;
                let args = super::gemm::args(w16, x16, dst.p, [m, n, k, ldc]);
                v.push(Pending { entry: super::gemm::ENTRY, cfg: grid_for(1), args });
                v
            }
            MatmulPath::Mmv => {
                // Columns of the activations and of the output, contiguous (checked by the
                // plan), their strides in floats.
                let args = vec![
                    Arg::Ptr(w.p),
                    Arg::Ptr(x.p),
                    Arg::Ptr(dst.p),
                    (nrows as i32).into(),
                    (ncols as i32).into(),
                    row_bytes.into(),
                    (x.ne[1] as i32).into(),
                    (x.nb[1] / 4).into(),
                    (dst.nb[1] / 4).into(),
                ];
                one(kernel(|r| r.mmv)?, cfg, args)
            }
        })
    }
}

fn mismatch(op: &str, plan: &NodePlan) -> CudaError {
    CudaError::Driver(format!("{op} planned as {:?}", plan.kernel))
}
