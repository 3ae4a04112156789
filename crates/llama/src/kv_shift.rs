//! The K-shift (llama.cpp's `build_graph_shift`): after [`KvCache::seq_add`] moved cells'
//! positions, every layer's cached K is rotated by each cell's position change, so the cells
//! read as if computed at their new positions (RoPE rotations compose). V holds no position.
//!
//! A float K is rotated where it is (RoPE of the cache's own rows, written back; a cell that
//! did not move is rotated by 0, which leaves it unchanged); a quantized K is dequantized,
//! rotated back by the attention's Walsh-Hadamard matrix where the cache holds it rotated,
//! RoPE'd, rotated again and quantized back, as llama.cpp does.
//!
//! [`KvCache::seq_add`]: crate::KvCache::seq_add

use crate::arch::KRope;
use crate::graph::{rope_params, rotate, rotations};
use crate::kv_cache::{graph_input, KvCache};
use crate::model::Model;
use crate::{LlamaError, Result};
use tessera_tensor::graph::{Context, TensorId};
use tessera_tensor::DType;

/// A K-shift graph: its context, inputs and the nodes that write the cache.
pub(crate) struct ShiftGraph {
    pub ctx: Context,
    /// I32 `[kv_size]`: each cell's position change.
    pub shift: TensorId,
    /// I32 `[kv_size]`: 0, 1, ... (the rows a quantized K is dequantized through).
    pub rows: Option<TensorId>,
    /// The writes back into the cache.
    pub outputs: Vec<TensorId>,
}

/// Builds the K-shift of `kv` (its tensors in `base`, a clone of which the graph starts from);
/// `None` when no layer's K holds positions. `attn_rotation`: whether the cache holds a
/// quantized K Hadamard-rotated (`ContextParams::attn_rotation`).
pub(crate) fn build(
    model: &Model,
    base: &Context,
    kv: &KvCache,
    attn_rotation: bool,
) -> Result<Option<ShiftGraph>> {
    let hp = &model.hparams;
    let kv_size = kv.size();
    let mut ctx = base.clone();
    let shift = graph_input(&mut ctx, DType::I32, &[kv_size], "k_shift")?;
    let mut rows = None;
    let mut outputs = Vec::new();
    for (il, layer) in kv.layers.iter().enumerate() {
        let (mode, freq_base, factors) = match model.graph.k_rope(hp, il, kv_size) {
            KRope::Absolute => continue,
            KRope::Rope { mode, freq_base, factors } => (mode, freq_base, factors),
            KRope::Unsupported => {
                return Err(LlamaError::Setting {
                    flag: "--context-shift".into(),
                    reason: format!(
                        "the {} architecture does not say how its K depends on position, so its \
                         context cannot be shifted",
                        hp.arch
                    ),
                })
            }
        };
        let (hd, n_head_kv, n_rot) = (hp.head_dim_k, hp.n_head_kv[il], hp.n_rot);
        let ek = hp.n_embd_k_gqa(il);
        let kt = ctx.get(layer.k).dtype;
        let p = rope_params(hp, mode, freq_base);
        let out = if kt.block_size() > 1 {
            if n_rot != hd {
                return Err(LlamaError::Setting {
                    flag: "--context-shift".into(),
                    reason: format!(
                        "a {} K cache with partial rotary dimensions ({n_rot} of {hd}) cannot \
                         be shifted",
                        kt.name()
                    ),
                });
            }
            let idx = match rows {
                Some(r) => r,
                None => *rows.insert(graph_input(&mut ctx, DType::I32, &[kv_size], "k_rows")?),
            };
            // Dequantized as ggml dequantizes rows (GET_ROWS of every cell).
            let k = ctx.get_rows(layer.k, idx)?;
            let mut k = ctx.reshape(k, &[hd, n_head_kv, kv_size])?;
            let rot = if attn_rotation {
                rotations(hd, hp.head_dim_v, kt, ctx.get(layer.v).dtype).0
            } else {
                None
            };
            if let Some(n) = rot {
                k = rotate(&mut ctx, k, n)?;
            }
            k = ctx.rope(k, shift, factors, p)?;
            if let Some(n) = rot {
                k = rotate(&mut ctx, k, n)?;
            }
            let k = ctx.reshape(k, &[ek, kv_size])?;
            ctx.cpy(k, layer.k)?
        } else {
            let row = kt.type_size() * ek;
            let head = kt.type_size() * hd;
            let view = ctx.view(layer.k, &[n_rot, n_head_kv, kv_size], &[head, row], 0)?;
            let r = ctx.rope(view, shift, factors, p)?;
            ctx.cpy(r, view)?
        };
        let out = ctx.set_name(out, &format!("k_shifted-{il}"));
        outputs.push(ctx.set_output(out));
    }
    if outputs.is_empty() {
        return Ok(None);
    }
    Ok(Some(ShiftGraph { ctx, shift, rows, outputs }))
}
