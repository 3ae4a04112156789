//! The vision encoder as a graph on the scheduler, node for node as llama.cpp's `clip_graph`
//! builds it (tools/mtmd/clip.cpp `build_inp`, `build_vit`, `build_attn` with flash attention;
//! models/siglip.cpp for Gemma 3's projector), so its embeddings are libmtmd's.
//!
//! Gemma 3: the image (`[W, H, 3]`, planar) through the patch convolution plus bias, plus the
//! learned positions; each block `x + attn(LN1(x))`, then `x + FFN(LN2(x))` (LayerNorm with
//! weight and bias; Q, K, V and output projections with biases; attention over all patches,
//! K and V cast to F16 for flash attention; FFN up, GELU, down, with biases); the post
//! LayerNorm; then the patch grid average-pooled `n_merge × n_merge`, RMS-normed times
//! `mm.soft_emb_norm`, and projected by `mm.input_projection` to the language model's width.
//!
//! The caller chooses the backends (the crate knows none): the weights stay in the file's
//! mapping, in host memory, and the scheduler places each op where a backend takes it.

use crate::mmproj::MappedGguf;
use crate::{FfnAct, ImageF32, Mmproj, MtmdError, Projector, Result};
use std::collections::HashMap;
use std::sync::Arc;
use tessera_backend::{Backend, Bindings, Buffer, MappedBuffer};
use tessera_sched::{SchedParams, Scheduler};
use tessera_tensor::graph::{Context, Graph, PoolOp, TensorId, UnaryOp};
use tessera_tensor::DType;

/// Turns preprocessed images into embeddings for the language model.
pub struct Encoder {
    mmproj: Arc<Mmproj>,
    sched: Scheduler,
}

pub(crate) fn graph_err(e: impl std::fmt::Display) -> MtmdError {
    MtmdError::Encode { reason: e.to_string() }
}

impl Encoder {
    /// An encoder for `mmproj` computing on `backends` (in priority order, the host CPU's
    /// last, as the scheduler wants them).
    pub fn new(mmproj: Arc<Mmproj>, backends: Vec<Box<dyn Backend>>) -> Result<Encoder> {
        let sched = Scheduler::new(backends, SchedParams::default()).map_err(graph_err)?;
        Ok(Encoder { mmproj, sched })
    }

    /// llama.cpp's `cb_eval` (its `MTMD_...` debugging): `cb` is asked about every node and
    /// sees the ones it wants once computed. Nodes carry clip.cpp's names (`Qcur-0`,
    /// `attn_out-0`, `ffn_out-1`...).
    pub fn set_eval_callback(&mut self, cb: Option<tessera_sched::EvalCallback>) {
        self.sched.set_eval_callback(cb);
    }

    /// The mmproj file encoded with.
    pub fn mmproj(&self) -> &Mmproj {
        &self.mmproj
    }

    /// The mmproj file encoded with, shared.
    pub fn mmproj_shared(&self) -> Arc<Mmproj> {
        self.mmproj.clone()
    }

    /// The embeddings of one preprocessed image: `n_tokens × n_mmproj_embd` values, token by
    /// token (llama.cpp's `clip_image_encode` output).
    pub fn encode(&mut self, img: &ImageF32) -> Result<Vec<f32>> {
        let h = &self.mmproj.hparams;
        if self.mmproj.projector == Projector::Qwen25Vl {
            return self.encode_qwen25vl(img);
        }
        if (img.width, img.height) != (h.image_size, h.image_size) {
            return Err(graph_err(format!(
                "the image is {}x{}, the encoder takes {}x{} (preprocess it first)",
                img.width, img.height, h.image_size, h.image_size
            )));
        }
        let mut g = GraphBuilder::new(&self.mmproj)?;
        let (input, out) = g.build(img.width, img.height)?;
        let GraphBuilder { mut ctx, mut bindings, .. } = g;
        let graph = Graph::build(&ctx, &[out]);
        let schedule =
            self.sched.alloc_graph(&mut ctx, &graph, &mut bindings).map_err(graph_err)?;
        bindings.set_f32(&ctx, input, &planar(img)).map_err(graph_err)?;
        self.sched.compute(&ctx, &schedule, &bindings).map_err(graph_err)?;
        bindings.get_f32(&ctx, out).map_err(graph_err)
    }

    /// Qwen2.5-VL's tower on an image of its own size (sides multiples of two patches).
    fn encode_qwen25vl(&mut self, img: &ImageF32) -> Result<Vec<f32>> {
        let h = &self.mmproj.hparams;
        let m = 2 * h.patch_size;
        if img.width % m != 0 || img.height % m != 0 || img.width == 0 || img.height == 0 {
            return Err(graph_err(format!(
                "the image is {}x{}: its sides must be multiples of {m} (preprocess it first)",
                img.width, img.height
            )));
        }
        let (px, py) = (img.width / h.patch_size, img.height / h.patch_size);
        let values = crate::qwen::input_values(px, py, h.patch_size, h.n_wa_pattern > 0);
        let mut g = GraphBuilder::new(&self.mmproj)?;
        let (input, inputs, out) = g.build_qwen25vl(img.width, img.height)?;
        let GraphBuilder { mut ctx, mut bindings, .. } = g;
        let graph = Graph::build(&ctx, &[out]);
        let schedule =
            self.sched.alloc_graph(&mut ctx, &graph, &mut bindings).map_err(graph_err)?;
        bindings.set_f32(&ctx, input, &planar(img)).map_err(graph_err)?;
        bindings.set_i32(&ctx, inputs.positions, &values.positions).map_err(graph_err)?;
        if let Some((idx, inv, mask)) = inputs.windows {
            bindings.set_i32(&ctx, idx, &values.idx).map_err(graph_err)?;
            bindings.set_i32(&ctx, inv, &values.inv_idx).map_err(graph_err)?;
            bindings.set_f32(&ctx, mask, &values.mask).map_err(graph_err)?;
        }
        self.sched.compute(&ctx, &schedule, &bindings).map_err(graph_err)?;
        bindings.get_f32(&ctx, out).map_err(graph_err)
    }
}

/// llama.cpp's input: planar channels (`[W, H, 3]`) from the interleaved image.
fn planar(img: &ImageF32) -> Vec<f32> {
    let plane = img.width * img.height;
    let mut planar = vec![0f32; plane * 3];
    for (i, px) in img.data.chunks_exact(3).enumerate() {
        for c in 0..3 {
            planar[c * plane + i] = px[c];
        }
    }
    planar
}

/// One encoding's graph: the weights as leaves bound in the file's mapping.
pub(crate) struct GraphBuilder<'m> {
    pub(crate) m: &'m Mmproj,
    pub(crate) ctx: Context,
    pub(crate) bindings: Bindings,
    weights: HashMap<String, TensorId>,
    buffer: Arc<dyn Buffer>,
}

impl<'m> GraphBuilder<'m> {
    pub(crate) fn new(m: &'m Mmproj) -> Result<Self> {
        let mapped: Arc<MappedGguf> = m.mapped();
        let buffer: Arc<dyn Buffer> = Arc::new(MappedBuffer::new(mapped));
        Ok(GraphBuilder {
            m,
            ctx: Context::new(),
            bindings: Bindings::new(),
            weights: HashMap::new(),
            buffer,
        })
    }

    /// Weight `name` (checked at load), bound in place on first use.
    pub(crate) fn w(&mut self, name: &str) -> Result<TensorId> {
        if let Some(&id) = self.weights.get(name) {
            return Ok(id);
        }
        let info = self.m.gguf().tensor(name).map_err(graph_err)?;
        let ne: Vec<usize> = info.shape().iter().map(|&d| d as usize).collect();
        let id = self.ctx.new_tensor(info.dtype, &ne).map_err(graph_err)?;
        self.ctx.set_name(id, name);
        self.bindings
            .bind(&self.ctx, id, self.buffer.clone(), info.data_offset as usize)
            .map_err(graph_err)?;
        self.weights.insert(name.to_string(), id);
        Ok(id)
    }

    /// `x·W` then `+ b` (`build_mm` and the bias add).
    pub(crate) fn linear(&mut self, x: TensorId, name: &str) -> Result<TensorId> {
        let (w, b) = (self.w(&format!("{name}.weight"))?, self.w(&format!("{name}.bias"))?);
        let y = self.ctx.mul_mat(w, x).map_err(graph_err)?;
        self.ctx.add(y, b).map_err(graph_err)
    }

    /// Names `x` as clip.cpp's `cb` does (`name-il`, or `name` outside the blocks).
    pub(crate) fn named(&mut self, x: TensorId, name: &str, il: Option<usize>) -> TensorId {
        match il {
            Some(il) => self.ctx.set_name(x, &format!("{name}-{il}")),
            None => self.ctx.set_name(x, name),
        }
    }

    /// LayerNorm with weight and bias (`build_norm`, `NORM_TYPE_NORMAL`).
    fn layer_norm(&mut self, x: TensorId, name: &str) -> Result<TensorId> {
        let (w, b) = (self.w(&format!("{name}.weight"))?, self.w(&format!("{name}.bias"))?);
        let eps = self.m.hparams.eps;
        let c = &mut self.ctx;
        let y = c.norm(x, eps).map_err(graph_err)?;
        let y = c.mul(y, w).map_err(graph_err)?;
        c.add(y, b).map_err(graph_err)
    }

    /// `build_attn` with flash attention: Q, K, V `[d_head, n_head, n]` permuted, K and V cast
    /// to F16, the optional F16 mask; `[d_head · n_head, n]` out.
    pub(crate) fn attention(
        &mut self,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        mask: Option<TensorId>,
        scale: f32,
    ) -> Result<TensorId> {
        let c = &mut self.ctx;
        let q = c.permute(q, [0, 2, 1, 3]).map_err(graph_err)?;
        let k = c.permute(k, [0, 2, 1, 3]).map_err(graph_err)?;
        let v = c.permute(v, [0, 2, 1, 3]).map_err(graph_err)?;
        let k = self.cast(k, DType::F16)?;
        let v = self.cast(v, DType::F16)?;
        let c = &mut self.ctx;
        let a = c.flash_attn_ext(q, k, v, mask, scale, 0.0, 0.0).map_err(graph_err)?;
        let ne = c.get(a).ne;
        c.reshape(a, &[ne[0] * ne[1], ne[2] * ne[3]]).map_err(graph_err)
    }

    /// `ggml_cast`: a copy of `x` in `dtype`.
    pub(crate) fn cast(&mut self, x: TensorId, dtype: DType) -> Result<TensorId> {
        let ne = self.ctx.get(x).ne;
        let dst = self.ctx.new_tensor(dtype, &ne).map_err(graph_err)?;
        self.ctx.cpy(x, dst).map_err(graph_err)
    }

    /// The graph of a `width × height` image: (input, embeddings).
    fn build(&mut self, width: usize, height: usize) -> Result<(TensorId, TensorId)> {
        let h = self.m.hparams.clone();
        let (d, p) = (h.n_embd, h.patch_size as i32);
        let (n_head, side) = (h.n_head, h.patches_per_side());
        let (d_head, n_pos) = (d / n_head, side * side);
        let inp_raw = self.ctx.new_tensor(DType::F32, &[width, height, 3, 1]).map_err(graph_err)?;
        self.ctx.set_name(inp_raw, "inp_raw");
        self.ctx.set_input(inp_raw);
        // build_inp
        let kernel = self.w("v.patch_embd.weight")?;
        let c = &mut self.ctx;
        let x = c.conv_2d(kernel, inp_raw, [p, p], [0, 0], [1, 1]).map_err(graph_err)?;
        let x = c.reshape(x, &[n_pos, d, 1]).map_err(graph_err)?;
        let x = c.transpose(x).map_err(graph_err)?;
        let x = c.cont(x, None).map_err(graph_err)?;
        let bias = self.w("v.patch_embd.bias")?;
        let x = self.ctx.add(x, bias).map_err(graph_err)?;
        self.named(x, "patch_bias", None);
        // build_vit
        let pos = self.w("v.position_embd.weight")?;
        let x = self.ctx.add(x, pos).map_err(graph_err)?;
        self.named(x, "pos_embed", None);
        let mut inpl = self.ctx.reshape(x, &[d, n_pos]).map_err(graph_err)?;
        let kq_scale = 1.0 / (d_head as f32).sqrt();
        for il in 0..h.n_layer {
            let blk = format!("v.blk.{il}");
            let cur = self.layer_norm(inpl, &format!("{blk}.ln1"))?;
            self.named(cur, "layer_inp_normed", Some(il));
            let q = self.linear(cur, &format!("{blk}.attn_q"))?;
            let k = self.linear(cur, &format!("{blk}.attn_k"))?;
            let v = self.linear(cur, &format!("{blk}.attn_v"))?;
            let c = &mut self.ctx;
            let shape = [d_head, n_head, n_pos, 1];
            let q = c.reshape(q, &shape).map_err(graph_err)?;
            let k = c.reshape(k, &shape).map_err(graph_err)?;
            let v = c.reshape(v, &shape).map_err(graph_err)?;
            self.named(q, "Qcur", Some(il));
            self.named(k, "Kcur", Some(il));
            self.named(v, "Vcur", Some(il));
            let a = self.attention(q, k, v, None, kq_scale)?;
            self.named(a, "kqv_out", Some(il));
            let a = self.linear(a, &format!("{blk}.attn_out"))?;
            self.named(a, "attn_out", Some(il));
            let cur = self.ctx.add(a, inpl).map_err(graph_err)?;
            self.named(cur, "ffn_inp", Some(il));
            inpl = cur;
            let cur = self.layer_norm(cur, &format!("{blk}.ln2"))?;
            self.named(cur, "ffn_inp_normed", Some(il));
            let up = self.linear(cur, &format!("{blk}.ffn_up"))?;
            self.named(up, "ffn_up_b", Some(il));
            let act =
                match h.ffn_act {
                    FfnAct::Gelu => UnaryOp::Gelu,
                    FfnAct::Silu => UnaryOp::Silu,
                    FfnAct::GeluQuick => return Err(graph_err(
                        "the quick-GELU feed-forward (neither clip.use_gelu nor clip.use_silu) \
                         is not implemented",
                    )),
                };
            let cur = self.ctx.unary(up, act).map_err(graph_err)?;
            self.named(cur, "ffn_gelu", Some(il));
            let cur = self.linear(cur, &format!("{blk}.ffn_down"))?;
            self.named(cur, "ffn_out", Some(il));
            inpl = self.ctx.add(inpl, cur).map_err(graph_err)?;
            self.named(inpl, "layer_out", Some(il));
        }
        let x = self.layer_norm(inpl, "v.post_ln")?;
        let out = match self.m.projector {
            Projector::Gemma3 => self.gemma3_projector(x, side)?,
            Projector::Idefics3 => self.idefics3_projector(x, side)?,
            Projector::Qwen25Vl => return Err(graph_err("Qwen2.5-VL has its own graph (qwen.rs)")),
        };
        self.ctx.set_output(out);
        Ok((inp_raw, out))
    }

    /// models/siglip.cpp's Idefics3 branch: `build_patch_merge_permute` (the pixel shuffle:
    /// each `n_merge × n_merge` block of patches side by side in one row; the side divides, as
    /// the file was checked) and `build_mm`.
    fn idefics3_projector(&mut self, x: TensorId, side: usize) -> Result<TensorId> {
        let (d, s) = (self.m.hparams.n_embd, self.m.hparams.n_merge);
        let fc = self.w("mm.model.fc.weight")?;
        let c = &mut self.ctx;
        let x = c.reshape(x, &[d, side, side]).map_err(graph_err)?;
        // Unshuffle the height, then the width.
        let x = c.reshape(x, &[d * s, side / s, side]).map_err(graph_err)?;
        let x = c.permute(x, [0, 2, 1, 3]).map_err(graph_err)?;
        let x = c.cont(x, Some(&[d * s * s, side / s, side / s])).map_err(graph_err)?;
        let x = c.permute(x, [0, 2, 1, 3]).map_err(graph_err)?;
        let x = c.cont(x, Some(&[d * s * s, (side / s) * (side / s)])).map_err(graph_err)?;
        self.named(x, "pixel_shuffle", None);
        self.ctx.mul_mat(fc, x).map_err(graph_err)
    }

    /// models/siglip.cpp's Gemma 3 branch.
    fn gemma3_projector(&mut self, x: TensorId, side: usize) -> Result<TensorId> {
        let (d, m, eps) = (self.m.hparams.n_embd, self.m.hparams.n_merge, self.m.hparams.eps);
        let (norm_w, proj) =
            (self.w("mm.soft_emb_norm.weight")?, self.w("mm.input_projection.weight")?);
        let c = &mut self.ctx;
        let x = c.transpose(x).map_err(graph_err)?;
        let x = c.cont(x, Some(&[side, side, d, 1])).map_err(graph_err)?;
        let mi = m as i32;
        let x = c.pool_2d(x, PoolOp::Avg, [mi, mi], [mi, mi], [0, 0]).map_err(graph_err)?;
        let s = side / m;
        let x = c.reshape(x, &[s * s, d, 1]).map_err(graph_err)?;
        let x = c.transpose(x).map_err(graph_err)?;
        let x = c.cont(x, None).map_err(graph_err)?;
        let x = c.rms_norm(x, eps).map_err(graph_err)?;
        let x = c.mul(x, norm_w).map_err(graph_err)?;
        let pt = c.transpose(proj).map_err(graph_err)?;
        let pt = c.cont(pt, None).map_err(graph_err)?;
        c.mul_mat(pt, x).map_err(graph_err)
    }
}
