//! FLASH_ATTN_EXT for one query row deep in the cache, split over the KV cells
//! (llama.cpp b11312's `use_split_kv_path`).
//!
//! A one-token batch has a query row per head, too few to keep every thread busy, so ggml
//! splits the KV cells instead: thread `i` of `nth` attends every head over cells
//! `[i·c, (i+1)·c)` with `c = ⌈n_kv / nth⌉`, each as the row kernel does over all of them (an
//! F16 V accumulates in f16 within the share), and writes its running max `M`, sum `S` and
//! unnormalised V sum; after a barrier each head's shares are merged in cell order:
//! `M' = max(M, Mᵢ)`, `VKQ = VKQ·e^(M−M') + VKQᵢ·e^(Mᵢ−M')` (the first product one FMA where
//! the CPU has it, as GCC contracts ggml's C), the same for `S`, shares with `S = 0` skipped;
//! then `VKQ / S`. A sink joins the first share. The bits depend on the thread count, as
//! llama.cpp's do; batch-invariant mode never takes this path.

use super::attention::{apply_sink, sink_at, RowAttention};
use crate::{ComputeParams, TensorRef};
use tessera_tensor::DType;

/// KV cells from which ggml splits a one-row attention.
const MIN_CELLS: usize = 512;

/// Whether llama.cpp would split this attention over the KV cells: one query row in one
/// sequence batch, K and V both F16 or both F32, at least [`MIN_CELLS`] cells.
pub(crate) fn applies(q: &TensorRef, k: &TensorRef, v: &TensorRef) -> bool {
    q.dtype == DType::F32
        && q.ne[1] == 1
        && q.ne[3] == 1
        && matches!(k.dtype, DType::F16 | DType::F32)
        && k.dtype == v.dtype
        && k.ne[1] >= MIN_CELLS
}

/// Bytes of work buffer the split needs: `[head][share][M, S, VKQ[dv]]` in f32.
pub(crate) fn work_size(q: &TensorRef, v: &TensorRef, nth: usize) -> usize {
    q.ne[2] * nth * (2 + v.ne[0]) * 4
}

/// This thread's share of the split attention, then of the merge (every thread of `p` calls
/// it; `p.wdata` holds at least [`work_size`] bytes). Arguments as
/// [`super::attention::flash_attn_ext`]'s.
pub(crate) fn flash_attn_ext_split(
    p: &ComputeParams,
    dst: &TensorRef,
    qkv: [&TensorRef; 3],
    [mask, sinks]: [Option<TensorRef>; 2],
    params: [f32; 3],
) {
    let a = RowAttention::new(p, qkv, mask.as_ref(), params);
    let (n_head, n_kv, dv, nth) = (qkv[0].ne[2], qkv[1].ne[1], qkv[2].ne[0], p.nth);
    let size = 2 + dv;
    assert!(p.wsize >= work_size(qkv[0], qkv[2], nth), "flash attention split: work buffer");
    let partials = p.wdata.cast::<f32>();
    let chunk = n_kv.div_ceil(nth);
    let (start, end) = ((p.ith * chunk).min(n_kv), ((p.ith + 1) * chunk).min(n_kv));
    let group = n_head / qkv[1].ne[2];
    let mut gacc = vec![0f32; group * dv];
    let mut gout = vec![(f32::NEG_INFINITY, 0f32); group];
    a.with_scratch(|b| {
        for hk in 0..n_head / group {
            let heads = hk * group..(hk + 1) * group;
            // The heads of one KV head together where the group kernel applies.
            let grouped = start < end
                && a.attend_heads(p, b, heads.clone(), start..end, &mut gacc, &mut gout);
            for h in heads {
                // SAFETY: share (h, ith) of the buffer is this thread's alone until the barrier.
                let out = unsafe {
                    std::slice::from_raw_parts_mut(partials.add((h * nth + p.ith) * size), size)
                };
                if start >= end {
                    out[0] = f32::NEG_INFINITY;
                    out[1] = 0.0;
                    continue;
                }
                let g = h - hk * group;
                let (mut max, mut sum) = if grouped {
                    b.acc.copy_from_slice(&gacc[g * dv..(g + 1) * dv]);
                    gout[g]
                } else {
                    a.attend(p, b, (0, h, 0), start..end)
                };
                if let (Some(s), 0) = (&sinks, start) {
                    let sink = sink_at(s, h);
                    sum = apply_sink(sink, max, sum, b.acc, a.fused);
                    max = max.max(sink);
                }
                out[0] = max;
                out[1] = sum;
                out[2..].copy_from_slice(b.acc);
            }
        }
    });
    p.sync.barrier();
    let fused = a.fused;
    let mut acc = vec![0f32; dv];
    // Heads dealt round-robin, as ggml's reduction.
    for h in (p.ith..n_head).step_by(nth) {
        let (mut m, mut s) = (f32::NEG_INFINITY, 0f32);
        acc.iter_mut().for_each(|x| *x = 0.0);
        for i in 0..nth {
            if i * chunk >= n_kv {
                continue;
            }
            // SAFETY: every share was written before the barrier; nothing writes them now.
            let part =
                unsafe { std::slice::from_raw_parts(partials.add((h * nth + i) * size), size) };
            let (mi, si) = (part[0], part[1]);
            if si == 0.0 {
                continue;
            }
            let m_new = m.max(mi);
            let (old, new) = ((m - m_new).exp(), (mi - m_new).exp());
            for (x, &y) in acc.iter_mut().zip(&part[2..]) {
                *x = if fused { x.mul_add(old, y * new) } else { *x * old + y * new };
            }
            s = if fused { s.mul_add(old, si * new) } else { s * old + si * new };
            m = m_new;
        }
        if s != 0.0 {
            let inv = 1.0 / s;
            acc.iter_mut().for_each(|x| *x *= inv);
        }
        // SAFETY: dst row (h, 0, 0) is this thread's (heads dealt out above).
        unsafe { super::rowio::store(dst.row_ptr(h, 0, 0), dst.dtype, dst.nb[0], &acc) };
    }
}
