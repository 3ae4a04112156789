//! Qwen2.5-VL's vision tower (tools/mtmd/models/qwen2vl.cpp), node for node, and the inputs
//! clip.cpp computes for it (`clip_image_batch_encode`'s QWEN25VL case).
//!
//! The image (any size whose sides are multiples of `2 × patch`) goes through two patch
//! convolutions (the temporal pair of one still frame), added; the patches are reordered so
//! that each 2 × 2 block a merged token will take is contiguous; with window attention the
//! blocks are grouped by window (`inv_window_idx`). Each layer: RMS norm, Q/K/V with biases,
//! the 2-D RoPE (vision mode: rows then columns, `d_head / 4` pairs each), attention over all
//! patches (every `n_wa_pattern`-th layer) or within windows (an additive mask), the output
//! projection, then RMS norm and a SwiGLU FFN with biases. After the post norm, each 2 × 2
//! block is one row of the merger (`mm.0`, GELU, `mm.2`), and the windows' order is undone
//! (`window_idx`).

use crate::encoder::{graph_err, GraphBuilder};
use crate::Result;
use tessera_tensor::graph::{GluOp, RopeMode, RopeParams, TensorId, UnaryOp};
use tessera_tensor::DType;

/// llama.cpp's default attention window (pixels) where the file gives none.
const WINDOW_PIXELS: usize = 112;

/// The graph's inputs beside the image.
pub(crate) struct Inputs {
    /// I32 `[4 · n_patches]`: each patch's (row, column, row, column), in the merge order.
    pub positions: TensorId,
    /// With window attention: I32 `[n_patches / 4]` each ways, and the F32 mask.
    pub windows: Option<(TensorId, TensorId, TensorId)>,
}

/// Values of [`Inputs`] for an image of `pw × ph` patches (clip.cpp's set_input).
pub(crate) struct InputValues {
    pub positions: Vec<i32>,
    pub idx: Vec<i32>,
    pub inv_idx: Vec<i32>,
    pub mask: Vec<f32>,
}

/// clip.cpp's QWEN25VL inputs for `ipw × iph` patches of `patch` pixels: the window grouping
/// (merged tokens of each `WINDOW_PIXELS` square, row by row within it, windows row by row),
/// the mask letting a patch see its window's patches only, and the RoPE positions.
pub(crate) fn input_values(ipw: usize, iph: usize, patch: usize, windows: bool) -> InputValues {
    let (pw, ph) = (ipw / 2, iph / 2);
    let n_pos = ipw * iph;
    let mut idx: Vec<i32> = (0..(pw * ph) as i32).collect();
    let mut inv_idx = vec![0i32; pw * ph];
    let mut mask = Vec::new();
    if windows {
        let grid = WINDOW_PIXELS / patch / 2;
        mask = vec![f32::MIN; n_pos * n_pos];
        let (mut dst, mut row) = (0usize, 0usize);
        for y in (0..ph).step_by(grid.max(1)) {
            for x in (0..pw).step_by(grid.max(1)) {
                let (wh, ww) = (grid.min(ph - y), grid.min(pw - x));
                let dst0 = dst;
                for dy in 0..wh {
                    for dx in 0..ww {
                        let src = (y + dy) * pw + (x + dx);
                        idx[src] = dst as i32;
                        inv_idx[dst] = src as i32;
                        dst += 1;
                    }
                }
                for _ in 0..wh * ww * 4 {
                    mask[row * n_pos + dst0 * 4..row * n_pos + dst * 4].fill(0.0);
                    row += 1;
                }
            }
        }
    }
    let mut positions = vec![0i32; 4 * n_pos];
    let mut ptr = 0;
    for y in (0..iph).step_by(2) {
        for x in (0..ipw).step_by(2) {
            for dy in 0..2 {
                for dx in 0..2 {
                    let remap = idx[ptr / 4] as usize * 4 + ptr % 4;
                    let (py, px) = ((y + dy) as i32, (x + dx) as i32);
                    positions[remap] = py;
                    positions[n_pos + remap] = px;
                    positions[2 * n_pos + remap] = py;
                    positions[3 * n_pos + remap] = px;
                    ptr += 1;
                }
            }
        }
    }
    InputValues { positions, idx, inv_idx, mask }
}

impl GraphBuilder<'_> {
    /// An input leaf of `dtype` and shape `ne`, named as clip.cpp names it.
    fn input(&mut self, dtype: DType, ne: &[usize], name: &str) -> Result<TensorId> {
        let t = self.ctx.new_tensor(dtype, ne).map_err(graph_err)?;
        self.ctx.set_name(t, name);
        self.ctx.set_input(t);
        Ok(t)
    }

    /// RMS norm times the weight `{name}.weight`, plus `{name}.bias` where the file has one
    /// (`build_norm`, `NORM_TYPE_RMS`).
    fn rms(&mut self, x: TensorId, name: &str, il: Option<usize>) -> Result<TensorId> {
        let (w, eps) = (self.w(&format!("{name}.weight"))?, self.m.hparams.eps);
        let y = self.ctx.rms_norm(x, eps).map_err(graph_err)?;
        let mut y = self.ctx.mul(y, w).map_err(graph_err)?;
        self.named(y, "norm_w", il);
        let bias = format!("{name}.bias");
        if self.m.gguf().tensor(&bias).is_ok() {
            let b = self.w(&bias)?;
            y = self.ctx.add(y, b).map_err(graph_err)?;
        }
        Ok(y)
    }

    /// The graph of a `width × height` image: (image input, other inputs, embeddings).
    pub(crate) fn build_qwen25vl(
        &mut self,
        width: usize,
        height: usize,
    ) -> Result<(TensorId, Inputs, TensorId)> {
        let h = self.m.hparams.clone();
        let (d, p) = (h.n_embd, h.patch_size);
        let (px, py) = (width / p, height / p);
        let n_pos = px * py;
        let (n_head, d_head) = (h.n_head, h.n_embd / h.n_head);
        let inp_raw = self.input(DType::F32, &[width, height, 3, 1], "inp_raw")?;
        // build_inp_with_temporal_merge: one frame through both kernels.
        let (k0, k1) = (self.w("v.patch_embd.weight")?, self.w("v.patch_embd.weight.1")?);
        let pi = p as i32;
        let c = &mut self.ctx;
        let a = c.conv_2d(k0, inp_raw, [pi, pi], [0, 0], [1, 1]).map_err(graph_err)?;
        let b = c.conv_2d(k1, inp_raw, [pi, pi], [0, 0], [1, 1]).map_err(graph_err)?;
        let x = c.add(a, b).map_err(graph_err)?;
        // Each 2 × 2 block of patches contiguous.
        let x = c.permute(x, [1, 2, 0, 3]).map_err(graph_err)?;
        let x = c.cont(x, Some(&[d * 2, px / 2, py, 1])).map_err(graph_err)?;
        let x = c.reshape(x, &[d * 2, px / 2, 2, py / 2]).map_err(graph_err)?;
        let x = c.permute(x, [0, 2, 1, 3]).map_err(graph_err)?;
        let mut inp_l = c.cont(x, Some(&[d, n_pos, 1])).map_err(graph_err)?;
        let positions = self.input(DType::I32, &[4 * n_pos], "positions")?;
        let windows = if h.n_wa_pattern > 0 {
            let inv = self.input(DType::I32, &[n_pos / 4], "inv_window_idx")?;
            let mask = self.input(DType::F32, &[n_pos, n_pos], "window_mask")?;
            let idx = self.input(DType::I32, &[n_pos / 4], "window_idx")?;
            let c = &mut self.ctx;
            let x = c.reshape(inp_l, &[d * 4, n_pos / 4]).map_err(graph_err)?;
            let x = c.get_rows(x, inv).map_err(graph_err)?;
            inp_l = c.reshape(x, &[d, n_pos, 1]).map_err(graph_err)?;
            Some((idx, inv, mask))
        } else {
            None
        };
        // Flash attention reads an F16 mask.
        let mask_f16 = match windows {
            Some((_, _, m)) => Some(self.cast(m, DType::F16)?),
            None => None,
        };
        let kq_scale = 1.0 / (d_head as f32).sqrt();
        let sections = [(d_head / 4) as i32; 4];
        let mut rope = RopeParams::new(d_head / 2, RopeMode::Vision(sections), 10000.0);
        rope.n_ctx_orig = 32768;
        for il in 0..h.n_layer {
            let blk = format!("v.blk.{il}");
            let full = h.n_wa_pattern == 0 || (il + 1) % h.n_wa_pattern == 0;
            let cur = self.rms(inp_l, &format!("{blk}.ln1"), Some(il))?;
            let cur = self.named(cur, "ln1", Some(il));
            let q = self.linear(cur, &format!("{blk}.attn_q"))?;
            let k = self.linear(cur, &format!("{blk}.attn_k"))?;
            let v = self.linear(cur, &format!("{blk}.attn_v"))?;
            let c = &mut self.ctx;
            let shape = [d_head, n_head, n_pos];
            let q = c.reshape(q, &shape).map_err(graph_err)?;
            let k = c.reshape(k, &shape).map_err(graph_err)?;
            let v = c.reshape(v, &shape).map_err(graph_err)?;
            let q = c.rope(q, positions, None, rope).map_err(graph_err)?;
            let k = c.rope(k, positions, None, rope).map_err(graph_err)?;
            self.named(q, "Qcur_rope", Some(il));
            self.named(k, "Kcur_rope", Some(il));
            let mask = if full { None } else { mask_f16 };
            let a = self.attention(q, k, v, mask, kq_scale)?;
            let a = self.linear(a, &format!("{blk}.attn_out"))?;
            self.named(a, "attn_out", Some(il));
            let cur = self.ctx.add(a, inp_l).map_err(graph_err)?;
            inp_l = self.named(cur, "ffn_inp", Some(il));
            let cur = self.rms(inp_l, &format!("{blk}.ln2"), Some(il))?;
            let up = self.linear(cur, &format!("{blk}.ffn_up"))?;
            let gate = self.linear(cur, &format!("{blk}.ffn_gate"))?;
            let cur = self.ctx.glu_split(gate, up, GluOp::SwiGlu).map_err(graph_err)?;
            let cur = self.linear(cur, &format!("{blk}.ffn_down"))?;
            self.named(cur, "ffn_out", Some(il));
            let cur = self.ctx.add(inp_l, cur).map_err(graph_err)?;
            inp_l = self.named(cur, "layer_out", Some(il));
        }
        let x = self.rms(inp_l, "v.post_ln", Some(h.n_layer))?;
        // The merger: each 2 × 2 block one row.
        let x = self.ctx.reshape(x, &[d * 4, n_pos / 4, 1]).map_err(graph_err)?;
        let x = self.linear(x, "mm.0")?;
        let x = self.ctx.unary(x, UnaryOp::Gelu).map_err(graph_err)?;
        let mut out = self.linear(x, "mm.2")?;
        if let Some((idx, _, _)) = windows {
            let n_out = self.ctx.get(out).ne[0];
            let c = &mut self.ctx;
            let x = c.reshape(out, &[n_out, n_pos / 4]).map_err(graph_err)?;
            let x = c.get_rows(x, idx).map_err(graph_err)?;
            out = c.reshape(x, &[n_out, n_pos / 4, 1]).map_err(graph_err)?;
        }
        self.ctx.set_output(out);
        Ok((inp_raw, Inputs { positions, windows }, out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_group_merged_tokens_and_mask_outside_them() {
        // 16 × 4 patches of 8 pixels: 8 × 2 merged tokens, windows of 112 / 8 / 2 = 7.
        let v = input_values(16, 4, 8, true);
        assert_eq!(v.inv_idx[..7], [0, 1, 2, 3, 4, 5, 6]);
        assert_eq!(v.inv_idx[7..14], [8, 9, 10, 11, 12, 13, 14], "the first window's second row");
        assert_eq!(v.inv_idx[14..], [7, 15], "the second window: one column, two rows");
        for (src, &dst) in v.idx.iter().enumerate() {
            assert_eq!(v.inv_idx[dst as usize] as usize, src);
        }
        let n = 64;
        // A patch of the first window sees its 56 patches, none of the second's 8.
        assert!(
            v.mask[..56].iter().all(|&m| m == 0.0) && v.mask[56..64].iter().all(|&m| m < -1e38)
        );
        assert!(v.mask[60 * n + 56..60 * n + 64].iter().all(|&m| m == 0.0));
        // Positions: the first merged token's four patches, rows then columns.
        assert_eq!(&v.positions[..4], &[0, 0, 1, 1]);
        assert_eq!(&v.positions[n..n + 4], &[0, 1, 0, 1]);
    }
}
