//! The building blocks every architecture's graph uses (llama.cpp's `llm_graph_context`):
//! inputs, norms, attention over the KV cache (flash or softmax path), FFNs.
//!
//! Cache writes are SET_ROWS nodes whose results (views of the cache) the attention reads
//! through, so a graph built from the logits alone contains them and orders them before the
//! reads.

mod moe;

pub use moe::{Gating, MoeActivation, MoeBiases, MoeRouting, MoeWeights};

use crate::hparams::HParams;
use crate::kv_cache::KvInputs;
pub use crate::kv_cache::LayerCache;
use crate::lora::LoraSet;
use crate::Result;
use tessera_tensor::graph::{Context, GluOp, RopeMode, RopeParams, TensorId, UnaryOp};
use tessera_tensor::DType;

/// A micro-batch's graph under construction: the context (weights and cache already in it),
/// the input tensors, and the attention setup.
pub struct Builder<'a> {
    /// The graph's tensors.
    pub ctx: Context,
    /// The model's hyperparameters.
    pub hp: &'a HParams,
    /// Tokens in the micro-batch.
    pub n_tokens: usize,
    /// Rows of logits to produce.
    pub n_outputs: usize,
    /// I32 `[n_tokens]` token ids.
    pub inp_tokens: TensorId,
    /// The batch's embeddings (`[n_embd, n_tokens]` F32) when it carries embeddings instead of
    /// tokens: [`inp_embd`](Self::inp_embd) returns them.
    pub inp_embd: Option<TensorId>,
    /// I32 `[n_tokens]` positions.
    pub inp_pos: TensorId,
    /// I32 `[n_outputs]` indexes of the tokens whose logits are wanted.
    pub inp_out_ids: TensorId,
    /// What the attention reads the cache through: masks and K/V row indexes, made and filled
    /// by the cache (F16 masks with flash attention, else F32).
    pub kv: KvInputs,
    /// Cache tensors per layer.
    pub cache: &'a [LayerCache],
    /// Cache cells the attention reads (a multiple of 256, or the whole cache).
    pub n_kv: usize,
    /// Cells in the cache.
    pub kv_size: usize,
    /// Flash attention (else the MUL_MAT + SOFT_MAX path with V stored transposed).
    pub flash_attn: bool,
    /// Embeddings wanted instead of logits: [`logits`](Self::logits) returns the final norm's
    /// output (`result_norm`, `[n_embd, n_outputs]`) and skips the LM head.
    pub embeddings: bool,
    /// Rotate Q, K and V where the cache is quantized ([`ContextParams::attn_rotation`]).
    ///
    /// [`ContextParams::attn_rotation`]: crate::ContextParams::attn_rotation
    pub attn_rotation: bool,
    /// The LoRA adapters' pairs, imported into `ctx`: every product of an adapted weight
    /// through [`mm`](Self::mm) or [`mm_id`](Self::mm_id) adds theirs.
    pub lora: &'a LoraSet,
    /// Nodes the graph expands first, in this order, before its outputs
    /// ([`linear_same_input`](Self::linear_same_input)'s products;
    /// [`Graph::build_with_pins`]).
    pub pins: Vec<TensorId>,
}

impl Builder<'_> {
    /// Names `id` `"{base}-{il}"`, as llama.cpp's `cb(cur, name, il)`, so it can be observed
    /// (see `LlamaContext::observe`).
    pub fn name(&mut self, id: TensorId, base: &str, il: usize) -> TensorId {
        self.ctx.set_name(id, &format!("{base}-{il}"))
    }

    /// Whether the batch is token ids (llama.cpp's `ubatch.token`), not embeddings.
    pub fn token_input(&self) -> bool {
        self.inp_embd.is_none()
    }

    /// `get_rows(tok_embd, tokens)`: `[n_embd, n_tokens]` F32, plus each LoRA adapter's
    /// `s · B · A[tokens]` (llama.cpp's `build_inp_embd`); an embeddings batch's values as they
    /// are.
    pub fn inp_embd(&mut self, tok_embd: TensorId) -> Result<TensorId> {
        if let Some(e) = self.inp_embd {
            return Ok(e);
        }
        let mut x = self.ctx.get_rows(tok_embd, self.inp_tokens)?;
        for l in self.lora.of_embedding(tok_embd) {
            let rows = self.ctx.get_rows(l.a, self.inp_tokens)?;
            let d = self.ctx.mul_mat(l.b, rows)?;
            let d = self.ctx.scale(d, l.scale, 0.0)?;
            x = self.ctx.add(x, d)?;
        }
        Ok(self.ctx.set_name(x, "inp_embd"))
    }

    /// `w · x`, plus each LoRA adapter's `s · B · (A · x)` for `w` (llama.cpp's
    /// `build_lora_mm`): every weight product of a graph goes through here.
    pub fn mm(&mut self, w: TensorId, x: TensorId) -> Result<TensorId> {
        let mut y = self.ctx.mul_mat(w, x)?;
        for l in self.lora.of(w) {
            let ax = self.ctx.mul_mat(l.a, x)?;
            let d = self.ctx.mul_mat(l.b, ax)?;
            let d = self.ctx.scale(d, l.scale, 0.0)?;
            y = self.ctx.add(y, d)?;
        }
        Ok(y)
    }

    /// `mul_mat_id(w, x, ids)` with each LoRA adapter's experts' pairs added (llama.cpp's
    /// `build_lora_mm_id`).
    pub fn mm_id(&mut self, w: TensorId, x: TensorId, ids: TensorId) -> Result<TensorId> {
        let mut y = self.ctx.mul_mat_id(w, x, ids)?;
        for l in self.lora.of(w) {
            let ax = self.ctx.mul_mat_id(l.a, x, ids)?;
            let d = self.ctx.mul_mat_id(l.b, ax, ids)?;
            let d = self.ctx.scale(d, l.scale, 0.0)?;
            y = self.ctx.add(y, d)?;
        }
        Ok(y)
    }

    /// RMS norm times an optional weight.
    pub fn rms_norm(&mut self, x: TensorId, w: Option<TensorId>) -> Result<TensorId> {
        let y = self.ctx.rms_norm(x, self.hp.rms_eps)?;
        Ok(match w {
            Some(w) => self.ctx.mul(y, w)?,
            None => y,
        })
    }

    /// LayerNorm times a weight plus a bias.
    pub fn layer_norm(
        &mut self,
        x: TensorId,
        w: TensorId,
        b: Option<TensorId>,
    ) -> Result<TensorId> {
        let y = self.ctx.norm(x, self.hp.norm_eps)?;
        let y = self.ctx.mul(y, w)?;
        Ok(match b {
            Some(b) => self.ctx.add(y, b)?,
            None => y,
        })
    }

    /// `w · x (+ b)`.
    pub fn linear(&mut self, w: TensorId, b: Option<TensorId>, x: TensorId) -> Result<TensorId> {
        let y = self.mm(w, x)?;
        Ok(match b {
            Some(b) => self.ctx.add(y, b)?,
            None => y,
        })
    }

    /// The products of one input `x` by each `(w, bias)` (a block's Q, K and V), each as
    /// [`linear`](Self::linear) gives it; the products are made first, then their biases'
    /// ADDs, all [pinned](Self::pins), so the graph computes the products one after another
    /// and then the ADDs: a backend can run them as one launch (the CUDA backend's product
    /// group).
    pub fn linear_same_input<const N: usize>(
        &mut self,
        x: TensorId,
        parts: [(TensorId, Option<TensorId>); N],
    ) -> Result<[TensorId; N]> {
        let mut out = [x; N];
        for (o, (w, _)) in out.iter_mut().zip(parts) {
            *o = self.mm(w, x)?;
        }
        self.pins.extend(out);
        let mut biased = Vec::new();
        for (o, (_, b)) in out.iter_mut().zip(parts) {
            if let Some(b) = b {
                *o = self.ctx.add(*o, b)?;
                biased.push(*o);
            }
        }
        // The bias ADDs follow the products, in the same order (one launch with them too).
        self.pins.extend(biased);
        Ok(out)
    }

    /// RoPE of `x` (`[head_dim, n_head, n_tokens]`) at the batch positions, each dimension
    /// pair's frequency divided by `freq_factors` where given (Llama 3's `rope_freqs.weight`).
    pub fn rope(
        &mut self,
        x: TensorId,
        mode: RopeMode,
        freq_base: f32,
        freq_factors: Option<TensorId>,
    ) -> Result<TensorId> {
        let p = rope_params(self.hp, mode, freq_base);
        Ok(self.ctx.rope(x, self.inp_pos, freq_factors, p)?)
    }

    /// Only the rows of the tokens whose logits are wanted (`get_rows(x, out_ids)`).
    pub fn out_rows(&mut self, x: TensorId) -> Result<TensorId> {
        Ok(self.ctx.get_rows(x, self.inp_out_ids)?)
    }

    /// Q, K and V of layer `il` from a fused projection (`[q | k | v]` per token, F32): views
    /// `[head_dim, heads, tokens]` as llama.cpp's `build_qkv` takes them, copied out (the
    /// same values, contiguous).
    pub fn split_qkv(
        &mut self,
        qkv: TensorId,
        il: usize,
    ) -> Result<(TensorId, TensorId, TensorId)> {
        let hp = self.hp;
        let (hd, nh, nkv, n_tok) = (hp.head_dim_k, hp.n_head[il], hp.n_head_kv[il], self.n_tokens);
        let row = self.ctx.get(qkv).nb[1];
        let (eq, ek) = (hd * nh, hd * nkv);
        let q = self.ctx.view(qkv, &[hd, nh, n_tok], &[hd * 4, row], 0)?;
        let k = self.ctx.view(qkv, &[hd, nkv, n_tok], &[hd * 4, row], eq * 4)?;
        let hv = hp.head_dim_v;
        let v = self.ctx.view(qkv, &[hv, nkv, n_tok], &[hv * 4, row], (eq + ek) * 4)?;
        Ok((self.ctx.cont(q, None)?, self.ctx.cont(k, None)?, self.ctx.cont(v, None)?))
    }

    /// SwiGLU FFN: `down · (silu(gate · x) * (up · x))`, with optional biases.
    pub fn ffn_swiglu(
        &mut self,
        x: TensorId,
        up: TensorId,
        gate: TensorId,
        down: TensorId,
        il: usize,
    ) -> Result<TensorId> {
        self.ffn_glu(x, up, gate, down, GluOp::SwiGlu, il)
    }

    /// Gated FFN with `op` as activation (SWIGLU or GEGLU), split form as llama.cpp's
    /// `LLM_FFN_PAR`, its intermediates named as llama.cpp names them for layer `il`.
    pub fn ffn_glu(
        &mut self,
        x: TensorId,
        up: TensorId,
        gate: TensorId,
        down: TensorId,
        op: GluOp,
        il: usize,
    ) -> Result<TensorId> {
        let u = self.mm(up, x)?;
        let u = self.name(u, "ffn_up", il);
        let g = self.mm(gate, x)?;
        let g = self.name(g, "ffn_gate", il);
        let h = self.ctx.glu_split(g, u, op)?;
        let glu = if op == GluOp::GeGlu { "ffn_geglu" } else { "ffn_swiglu" };
        let h = self.name(h, glu, il);
        self.mm(down, h)
    }

    /// Sequential GELU FFN (GPT-2): `down · gelu(up · x + bu) + bd`.
    pub fn ffn_gelu(
        &mut self,
        x: TensorId,
        (up, up_b): (TensorId, Option<TensorId>),
        (down, down_b): (TensorId, Option<TensorId>),
    ) -> Result<TensorId> {
        let h = self.linear(up, up_b, x)?;
        let h = self.ctx.unary(h, UnaryOp::Gelu)?;
        self.linear(down, down_b, h)
    }

    /// Attention of layer `il` (llama.cpp's `build_attn` with a KV cache): stores `k` and `v`
    /// (`[head_dim, n_head_kv, n_tokens]`) in the cache, attends with `q` (`[head_dim, n_head,
    /// n_tokens]`) over the first `n_kv` cells, returns `[head_dim_v * n_head, n_tokens]`.
    pub fn attention(
        &mut self,
        il: usize,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        kq_scale: f32,
    ) -> Result<TensorId> {
        self.attention_with_sinks(il, q, k, v, kq_scale, None)
    }

    /// [`attention`](Self::attention) with attention sinks (gpt-oss's `attn_sinks`, one logit
    /// per head that joins every softmax's denominator).
    pub fn attention_with_sinks(
        &mut self,
        il: usize,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        kq_scale: f32,
        sinks: Option<TensorId>,
    ) -> Result<TensorId> {
        let hp = self.hp;
        let (hd_k, hd_v, n_head, n_head_kv) =
            (hp.head_dim_k, hp.head_dim_v, hp.n_head[il], hp.n_head_kv[il]);
        let (n_tok, n_kv, kv_size) = (self.n_tokens, self.n_kv, self.kv_size);
        let (ek, ev) = (hp.n_embd_k_gqa(il), hp.n_embd_v_gqa(il));
        let cache = self.cache[il];
        let mask =
            if hp.is_swa(il) { self.kv.mask_swa.unwrap_or(self.kv.mask) } else { self.kv.mask };
        // A quantized cache holds K and V rotated (llama.cpp's attention rotation): Q and K by
        // the Walsh-Hadamard matrix of the largest power of two dividing the head size, V by
        // that of 64 and the output rotated back, so outliers spread before quantization.
        let kt = self.ctx.get(cache.k).dtype;
        let vt = self.ctx.get(cache.v).dtype;
        let (rot_k, rot_v) =
            if self.attn_rotation { rotations(hd_k, hd_v, kt, vt) } else { (None, None) };
        let (q, k, v) = match rot_k {
            Some(n) => (self.rotate(q, n)?, self.rotate(k, n)?, v),
            None => (q, k, v),
        };
        let v = match rot_v {
            Some(n) => self.rotate(v, n)?,
            None => v,
        };

        // Store K: rows of one token's heads.
        let k2 = self.ctx.reshape(k, &[ek, n_tok])?;
        let k_all = self.ctx.set_rows(cache.k, k2, self.kv.k_idxs)?;
        let krow = kt.type_size() * ek / kt.block_size();
        let khead = kt.type_size() * hd_k / kt.block_size();
        let k_view = self.ctx.view(k_all, &[hd_k, n_head_kv, n_kv], &[khead, krow], 0)?;
        let k_view = self.ctx.permute(k_view, [0, 2, 1, 3])?;
        let q = self.ctx.permute(q, [0, 2, 1, 3])?;

        let out = if self.flash_attn {
            let v2 = self.ctx.reshape(v, &[ev, n_tok])?;
            let v_all = self.ctx.set_rows(cache.v, v2, self.kv.v_idxs)?;
            let vrow = vt.type_size() * ev / vt.block_size();
            let vhead = vt.type_size() * hd_v / vt.block_size();
            let v_view = self.ctx.view(v_all, &[hd_v, n_head_kv, n_kv], &[vhead, vrow], 0)?;
            let v_view = self.ctx.permute(v_view, [0, 2, 1, 3])?;
            let o = self.ctx.flash_attn_ext(
                q,
                k_view,
                v_view,
                Some(mask),
                kq_scale,
                0.0,
                hp.attn_logit_softcap,
            )?;
            if let Some(s) = sinks {
                self.ctx.add_sinks(o, s)?;
            }
            let o = self.name(o, "fattn", il);
            let o = self.ctx.reshape(o, &[hd_v * n_head, n_tok])?;
            match rot_v {
                Some(n) => self.rotate(o, n)?,
                None => o,
            }
        } else {
            // V transposed: element (channel c, cell j) at c * kv_size + j.
            let v_flat = self.ctx.reshape(cache.v, &[1, ev * kv_size])?;
            let v_cur = self.ctx.reshape(v, &[1, ev * n_tok])?;
            let v_all = self.ctx.set_rows(v_flat, v_cur, self.kv.v_idxs)?;
            let es = vt.type_size();
            let v_view = self.ctx.view(
                v_all,
                &[n_kv, hd_v, n_head_kv],
                &[kv_size * es, hd_v * kv_size * es],
                0,
            )?;
            let mut kq = self.ctx.mul_mat(k_view, q)?;
            if hp.attn_logit_softcap != 0.0 {
                let c = hp.attn_logit_softcap;
                kq = self.ctx.scale(kq, 1.0 / c, 0.0)?;
                kq = self.ctx.unary(kq, UnaryOp::Tanh)?;
                kq = self.ctx.scale(kq, c, 0.0)?;
            }
            let kq = self.name(kq, "kq", il);
            let kq = self.ctx.soft_max(kq, Some(mask), kq_scale, 0.0)?;
            if let Some(s) = sinks {
                self.ctx.add_sinks(kq, s)?;
            }
            let kq = self.name(kq, "kq_soft_max", il);
            let kqv = self.ctx.mul_mat(v_view, kq)?;
            let kqv = self.name(kqv, "kqv", il);
            let kqv = self.ctx.permute(kqv, [0, 2, 1, 3])?;
            self.ctx.cont(kqv, Some(&[hd_v * n_head, n_tok]))?
        };
        Ok(self.name(out, "kqv_out", il))
    }

    fn rotate(&mut self, x: TensorId, n: usize) -> Result<TensorId> {
        rotate(&mut self.ctx, x, n)
    }

    /// The default KQ scale, `1 / sqrt(head_dim)`.
    pub fn kq_scale(&self) -> f32 {
        1.0 / (self.hp.head_dim_k as f32).sqrt()
    }

    /// Final norm output through the LM head, optionally soft-capped: the logits. In an
    /// embeddings context, `x` itself (named `result_norm`, as llama.cpp's `t_embd`).
    pub fn logits(
        &mut self,
        x: TensorId,
        output: TensorId,
        bias: Option<TensorId>,
    ) -> Result<TensorId> {
        if self.embeddings {
            let x = self.ctx.set_name(x, "result_norm");
            return Ok(self.ctx.set_output(x));
        }
        let mut l = self.linear(output, bias, x)?;
        let cap = self.hp.final_logit_softcap;
        if cap != 0.0 {
            l = self.ctx.scale(l, 1.0 / cap, 0.0)?;
            l = self.ctx.unary(l, UnaryOp::Tanh)?;
            l = self.ctx.scale(l, cap, 0.0)?;
        }
        let l = self.ctx.set_name(l, "result_output");
        Ok(self.ctx.set_output(l))
    }

    /// Type of the cache's K.
    pub fn cache_type_k(&self) -> DType {
        self.ctx.get(self.cache[0].k).dtype
    }
}

/// `x` with every run of `n` values along its rows times the orthonormal Walsh-Hadamard
/// matrix (llama.cpp's `llama_mul_mat_hadamard`), in `x`'s shape.
pub(crate) fn rotate(ctx: &mut Context, x: TensorId, n: usize) -> Result<TensorId> {
    let t = ctx.get(x);
    let (ne, count) = (t.ne, t.n_elements());
    let flat = if t.is_contiguous() {
        ctx.reshape(x, &[n, count / n])?
    } else {
        ctx.cont(x, Some(&[n, count / n]))?
    };
    let r = ctx.hadamard(flat)?;
    Ok(ctx.reshape(r, &ne)?)
}

/// The RoPE arguments of a model of hyperparameters `hp` with this mode and frequency base
/// (the context length it was trained at, its frequency scale and YaRN factors).
pub(crate) fn rope_params(hp: &HParams, mode: RopeMode, freq_base: f32) -> RopeParams {
    let mut p = RopeParams::new(hp.n_rot, mode, freq_base);
    p.n_ctx_orig = hp.n_ctx_orig;
    p.freq_scale = hp.rope_freq_scale;
    p.ext_factor = hp.yarn_ext_factor;
    p.attn_factor = hp.yarn_attn_factor;
    p
}

/// The attention rotations of a cache of K type `kt` and V type `vt` (llama.cpp's `attn_rot_k`,
/// `attn_rot_v`): K's (and Q's) size is the largest power of two dividing the K head size, V's
/// is 64, each where its cache type is quantized and its head size a multiple of 64.
pub(crate) fn rotations(
    hd_k: usize,
    hd_v: usize,
    kt: DType,
    vt: DType,
) -> (Option<usize>, Option<usize>) {
    let quantized = |t: DType| t.block_size() > 1;
    let k = (quantized(kt) && hd_k % 64 == 0).then(|| {
        let mut n = 64;
        while hd_k % (n * 2) == 0 {
            n *= 2;
        }
        n
    });
    let v = (quantized(vt) && hd_v % 64 == 0).then_some(64);
    (k, v)
}
