//! Which fusion windows ([`super::fusion_windows`]) the CUDA kernels take: a pure function of
//! the nodes' types, shapes and plans, so the choice is tested without a GPU (and on real model
//! graphs) and the executor only launches what it returns.

use super::{FusionKind, Kernel, MatmulPath, NodePlan, Window};
use crate::types::row_of;
use std::collections::HashMap;
use tessera_tensor::graph::{Context, Op, TensorId};
use tessera_tensor::DType;

/// The kinds of window there are kernels for, in the order they are looked for.
pub const FUSED_KINDS: &[FusionKind] = &[
    FusionKind::AttnInputs,
    FusionKind::AddRmsNormMul,
    FusionKind::RmsNormMul,
    FusionKind::GateUpGlu,
    FusionKind::RopeSetRows,
    FusionKind::ProductGroup,
];

/// The windows of `plans` (a graph's nodes in order, planned) the kernels take: those of
/// [`FUSED_KINDS`] that [`fusable`] accepts; a step's attention inputs the kernel cannot take
/// (a quantized V cache, say) may still store K rotated (their middle three nodes).
pub fn fused_windows(ctx: &Context, plans: &[(TensorId, NodePlan)]) -> Vec<Window> {
    let ids: Vec<TensorId> = plans.iter().map(|(n, _)| *n).collect();
    let plan_of: HashMap<TensorId, NodePlan> = plans.iter().copied().collect();
    super::fusion_windows(ctx, &ids, FUSED_KINDS)
        .into_iter()
        .filter_map(|w| {
            if fusable(ctx, &w, &plan_of) {
                return Some(w);
            }
            let k = (w.kind == FusionKind::AttnInputs)
                .then(|| Window { kind: FusionKind::RopeSetRows, nodes: w.nodes[1..4].to_vec() });
            k.filter(|k| fusable(ctx, k, &plan_of))
        })
        .collect()
}

/// Whether a kernel takes window `w` with these types and plans (it must give the bits of
/// the nodes it replaces): F32 residual sums of equal shapes, RMS_NORM into F32 then MUL by
/// floats; gate and up products, or a group, all on the int8 path with one weight type (a
/// group of one column); RoPE into float caches of one row a token.
pub fn fusable(ctx: &Context, w: &Window, plan_of: &HashMap<TensorId, NodePlan>) -> bool {
    match w.kind {
        FusionKind::AddRmsNormMul => {
            let (add, norm, mul) = (ctx.get(w.nodes[0]), ctx.get(w.nodes[1]), ctx.get(w.nodes[2]));
            let f32_of = |t: Option<TensorId>| t.map(|t| ctx.get(t));
            let (a, b) = (f32_of(add.src[0]), f32_of(add.src[1]));
            let same = |t: Option<&tessera_tensor::graph::TensorDesc>| {
                t.is_some_and(|t| t.dtype == DType::F32 && t.ne == add.ne)
            };
            add.dtype == DType::F32
                && same(a)
                && same(b)
                && norm.dtype == DType::F32
                && mul.dtype == DType::F32
                && mul.src[1].is_some_and(|w| ctx.get(w).dtype == DType::F32)
        }
        FusionKind::GateUpGlu => {
            let (g, u, glu) = (w.nodes[0], w.nodes[1], ctx.get(w.nodes[2]));
            let mmvq = |n: TensorId| {
                plan_of.get(&n).is_some_and(|p| p.kernel == Kernel::MulMat(MatmulPath::Mmvq))
            };
            let weights = |n: TensorId| ctx.get(ctx.get(n).src[0].expect("weights"));
            let (wg, wu) = (weights(g), weights(u));
            let (dg, du) = (ctx.get(g), ctx.get(u));
            mmvq(g)
                && mmvq(u)
                && wg.dtype == wu.dtype
                && wg.ne == wu.ne
                && row_of(wg.dtype).is_some_and(|r| r.mmvq_glu.is_some())
                && dg.ne == du.ne
                && glu.dtype == DType::F32
                && glu.ne == dg.ne
                && glu.nb[0] == 4
                && glu.nb[1] % 4 == 0
                && glu.src[1].is_some()
        }
        FusionKind::RmsNormMul => {
            let (norm, mul) = (ctx.get(w.nodes[0]), ctx.get(w.nodes[1]));
            let float =
                |t: Option<TensorId>| t.is_some_and(|t| crate::types::is_float(ctx.get(t).dtype));
            matches!(norm.op, Op::RmsNorm { .. })
                && norm.dtype == DType::F32
                && float(norm.src[0])
                && mul.op == Op::Mul
                && float(mul.src[1])
                && crate::types::is_float(mul.dtype)
        }
        FusionKind::ProductGroup => {
            // One column each, every product on the int8 path (the kernel is MMVQ's
            // one-column loop), outputs contiguous; each bias ADD an F32 row of the product's
            // length added to it.
            let (products, adds) = w.products_and_adds(ctx);
            let column = |d: &tessera_tensor::graph::TensorDesc| {
                d.ne[1] == 1 && d.ne[2] * d.ne[3] == 1 && d.dtype == DType::F32 && d.nb[0] == 4
            };
            let biased = adds.iter().zip(products).all(|(&a, &p)| {
                let (da, dp) = (ctx.get(a), ctx.get(p));
                let bias = da.src[1].map(|b| ctx.get(b));
                column(da)
                    && da.ne == dp.ne
                    && bias.is_some_and(|b| {
                        b.dtype == DType::F32 && b.ne == [dp.ne[0], 1, 1, 1] && b.nb[0] == 4
                    })
            });
            (adds.is_empty() || adds.len() == products.len())
                && biased
                && products.iter().all(|&p| {
                    plan_of.get(&p).is_some_and(|pl| pl.kernel == Kernel::MulMat(MatmulPath::Mmvq))
                        && column(ctx.get(p))
                })
                && ctx.get(w.nodes[0]).src[0]
                    .and_then(|wt| row_of(ctx.get(wt).dtype))
                    .is_some_and(|r| r.mmvq_group.is_some())
        }
        FusionKind::RopeSetRows => rope_into_cache(ctx, &w.nodes, plan_of),
        FusionKind::AttnInputs => {
            let planned = |n: TensorId, k: Kernel| plan_of.get(&n).is_some_and(|p| p.kernel == k);
            let (sv, set) = (w.nodes[4], ctx.get(w.nodes[4]));
            let rows = set.src[1].map(|v| ctx.get(v));
            let idx = set.src[2].map(|i| ctx.get(i));
            // Q's ROPE (any destination), K's into its cache, V's rows [n0, tokens] into
            // cache rows idx[token] (a plain 2-D SET_ROWS).
            planned(w.nodes[0], Kernel::Rope)
                && rope_into_cache(ctx, &w.nodes[1..4], plan_of)
                && planned(sv, Kernel::SetRows)
                && set.ne[2] * set.ne[3] == 1
                && rows.is_some_and(|r| {
                    r.ne[2] * r.ne[3] == 1
                        && r.ne[0] == set.ne[0]
                        && idx.is_some_and(|i| i.ne == [r.ne[1], 1, 1, 1])
                })
        }
        _ => false,
    }
}

/// Whether nodes (ROPE, RESHAPE, SET_ROWS) rotate K into its cache as `rope_set_rows_op`
/// and `rope_kv_store_op` write it: rope `[n0, heads, tokens]`, rows `[n0 heads, tokens]`,
/// cache rows `idx[token]` of a float cache.
fn rope_into_cache(
    ctx: &Context,
    nodes: &[TensorId],
    plan_of: &HashMap<TensorId, NodePlan>,
) -> bool {
    let (rope, rows, set) = (ctx.get(nodes[0]), ctx.get(nodes[1]), ctx.get(nodes[2]));
    let planned = |n: TensorId, k: Kernel| plan_of.get(&n).is_some_and(|p| p.kernel == k);
    let idx = set.src[2].map(|i| ctx.get(i));
    planned(nodes[0], Kernel::Rope)
        && planned(nodes[2], Kernel::SetRows)
        && rope.ne[3] == 1
        && rows.ne == [rope.ne[0] * rope.ne[1], rope.ne[2], 1, 1]
        && set.ne[2] * set.ne[3] == 1
        && set.ne[0] == rows.ne[0]
        && idx.is_some_and(|i| i.ne == [rope.ne[2], 1, 1, 1])
}
