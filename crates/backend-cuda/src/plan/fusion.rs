//! Fusion windows over a graph's node list: runs of nodes one kernel could compute together,
//! where llama.cpp's CUDA backend fuses and beyond. The executor asks for the kinds it has
//! kernels for and runs the rest node by node: RMS_NORM then MUL, and the residual ADD before
//! them (`fused.cu`; their output's Q8_1 blocks too where int8 products read it,
//! [`super::fold_q8_into_writer`]); gate and up products of the int8 path with their GLU
//! (`mmvq_glu_*`); two or three products of one activation column (a block's Q, K and V,
//! `mmvq_group_*`); K's RoPE into the cache (`rope_set_rows_op`) and a decoding step's attention
//! inputs, Q's and K's RoPE with K's and V's stores (`rope_kv_store_op`).
//!
//! A window is only a window when the nodes are consecutive in the list (views aside, for the
//! attention inputs: they run no kernel), each intermediate result is read by the next node of
//! the window alone, and no intermediate is a graph output (its value must then exist in
//! memory); AddRmsNormMul's sum and every product of a group are stored by their kernels.

use tessera_tensor::graph::{Context, Flags, GluOp, Op, TensorDesc, TensorId};

/// What a window computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FusionKind {
    /// RMS_NORM, then MUL by a weight row: the norm's scale in the same pass.
    RmsNormMul,
    /// ADD (the residual), then RMS_NORM of the sum.
    AddRmsNorm,
    /// Two MUL_MATs of the same activations (gate, up), then their split GLU.
    GateUpGlu,
    /// ROPE, the RESHAPE of its rows into one row a token, then SET_ROWS of those rows (K
    /// rotated and written into the KV cache).
    RopeSetRows,
    /// ADD (the residual, read again later: stored), RMS_NORM of the sum, MUL by a weight row.
    AddRmsNormMul,
    /// Two or three MUL_MATs of the same activations by weights of one type, one after the
    /// other in the list (a decoder block's Q, K and V), and where each is followed, in the
    /// same order, by the ADD of its bias (Qwen2's), those ADDs: one launch, every output (the
    /// sums, with biases) stored. Nodes: the products, then their ADDs if any.
    ProductGroup,
    /// A decoding step's attention inputs: ROPE of Q; ROPE of K with the same positions and
    /// parameters, its RESHAPE and SET_ROWS into the K cache; SET_ROWS of V into the V cache,
    /// with only views between them in the list (the llama graphs' order): one launch. Nodes:
    /// Q's ROPE, K's ROPE, RESHAPE and SET_ROWS, V's SET_ROWS.
    AttnInputs,
}

/// One window: its kind and its nodes, in list order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    /// What it computes.
    pub kind: FusionKind,
    /// Its nodes.
    pub nodes: Vec<TensorId>,
}

impl Window {
    /// A product group's products, then its bias ADDs (none without biases): the split the
    /// plan checks and the executor launches.
    pub fn products_and_adds(&self, ctx: &Context) -> (&[TensorId], &[TensorId]) {
        let n = self.nodes.iter().filter(|&&id| ctx.get(id).op == Op::MulMat).count();
        self.nodes.split_at(n)
    }
}

/// How many nodes of `nodes` read each tensor (as a source).
fn readers(ctx: &Context, nodes: &[TensorId]) -> std::collections::HashMap<TensorId, usize> {
    let mut n = std::collections::HashMap::new();
    for &id in nodes {
        for s in ctx.get(id).src.iter().flatten() {
            *n.entry(*s).or_insert(0) += 1;
        }
    }
    n
}

/// The AttnInputs window starting at `nodes[i]`, if there is one (see [`FusionKind`]).
fn attn_inputs(
    ctx: &Context,
    nodes: &[TensorId],
    i: usize,
    inner: &dyn Fn(TensorId) -> bool,
    next_real: impl Fn(usize) -> Option<usize>,
) -> Option<Window> {
    let rq = nodes[i];
    let dq = ctx.get(rq);
    if !matches!(dq.op, Op::Rope(_)) {
        return None;
    }
    let k_at = next_real(i + 1)?;
    let (rk, dk) = (nodes[k_at], ctx.get(nodes[k_at]));
    let (vk, sk) = (*nodes.get(k_at + 1)?, *nodes.get(k_at + 2)?);
    let (dvk, dsk) = (ctx.get(vk), ctx.get(sk));
    let rope_k_into_cache = dk.op == dq.op
        && dk.src[1] == dq.src[1]
        && dk.src[2] == dq.src[2]
        && dvk.op == Op::Reshape
        && dvk.src[0] == Some(rk)
        && dsk.op == Op::SetRows
        && dsk.src[1] == Some(vk)
        && inner(rk)
        && inner(vk);
    if !rope_k_into_cache {
        return None;
    }
    // V's rows were computed before Q's ROPE: only views lie between it and V's SET_ROWS.
    let sv = nodes[next_real(k_at + 3)?];
    (ctx.get(sv).op == Op::SetRows)
        .then(|| Window { kind: FusionKind::AttnInputs, nodes: vec![rq, rk, vk, sk, sv] })
}

/// Whether `b` is a product of `a`'s activations by weights of `a`'s weight type.
fn same_product(ctx: &Context, a: &TensorDesc, b: &TensorDesc) -> bool {
    let wtype = |d: &TensorDesc| d.src[0].map(|w| ctx.get(w).dtype);
    a.op == Op::MulMat
        && b.op == Op::MulMat
        && a.src[1] == b.src[1]
        && wtype(a).is_some()
        && wtype(a) == wtype(b)
}

/// The windows of `kinds` in `nodes` (a graph's node list), without overlap, first come first
/// taken (so a caller asks only for the kinds it has kernels for).
pub fn fusion_windows(ctx: &Context, nodes: &[TensorId], kinds: &[FusionKind]) -> Vec<Window> {
    let readers = readers(ctx, nodes);
    // `id` may stay in registers: read once (by the window's next node), not an output.
    let inner = |id: TensorId| {
        readers.get(&id).copied() == Some(1) && !ctx.get(id).flags.contains(Flags::OUTPUT)
    };
    // The next node at or after `j` that is not a view, and its index.
    let next_real = |mut j: usize| {
        while j < nodes.len() && ctx.get(nodes[j]).op.is_view() {
            j += 1;
        }
        (j < nodes.len()).then_some(j)
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < nodes.len() {
        if kinds.contains(&FusionKind::AttnInputs) {
            if let Some(w) = attn_inputs(ctx, nodes, i, &inner, next_real) {
                i = nodes.iter().position(|&n| n == *w.nodes.last().expect("nodes")).unwrap() + 1;
                out.push(w);
                continue;
            }
        }
        let d = |k: usize| nodes.get(i + k).map(|&id| (id, ctx.get(id)));
        let found = match (d(0), d(1), d(2)) {
            (Some((a, da)), Some((n, dn)), Some((_, dm)))
                if kinds.contains(&FusionKind::AddRmsNormMul)
                    && da.op == Op::Add
                    && matches!(dn.op, Op::RmsNorm { .. })
                    && dn.src[0] == Some(a)
                    && dm.op == Op::Mul
                    && dm.src[0] == Some(n)
                    && inner(n) =>
            {
                Some((FusionKind::AddRmsNormMul, 3))
            }
            (Some((a, da)), Some((_, db)), _)
                if matches!(da.op, Op::RmsNorm { .. })
                    && db.op == Op::Mul
                    && db.src[0] == Some(a)
                    && inner(a) =>
            {
                Some((FusionKind::RmsNormMul, 2))
            }
            (Some((a, da)), Some((_, db)), _)
                if da.op == Op::Add
                    && matches!(db.op, Op::RmsNorm { .. })
                    && db.src[0] == Some(a)
                    && inner(a) =>
            {
                Some((FusionKind::AddRmsNorm, 2))
            }
            (Some((g, dg)), Some((u, du)), Some((_, dglu)))
                if dg.op == Op::MulMat
                    && du.op == Op::MulMat
                    && dg.src[1] == du.src[1]
                    && matches!(
                        dglu.op,
                        Op::Glu { op: GluOp::SwiGlu | GluOp::GeGlu, swapped: false }
                    )
                    && dglu.src[0] == Some(g)
                    && dglu.src[1] == Some(u)
                    && inner(g)
                    && inner(u) =>
            {
                Some((FusionKind::GateUpGlu, 3))
            }
            (Some((_, d0)), Some((_, d1)), third)
                if kinds.contains(&FusionKind::ProductGroup) && same_product(ctx, d0, d1) =>
            {
                let three = third.is_some_and(|(_, d2)| same_product(ctx, d0, d2));
                let n = if three { 3 } else { 2 };
                // Their bias ADDs right after, one a product in order, each product read by
                // its ADD alone.
                let biased = (0..n).all(|j| {
                    let (p, a) = (nodes[i + j], nodes.get(i + n + j));
                    a.is_some_and(|&a| {
                        let da = ctx.get(a);
                        da.op == Op::Add && da.src[0] == Some(p) && da.src[1].is_some() && inner(p)
                    })
                });
                Some((FusionKind::ProductGroup, if biased { 2 * n } else { n }))
            }
            (Some((r, dr)), Some((v, dv)), Some((_, ds)))
                if matches!(dr.op, Op::Rope(_))
                    && dv.op == Op::Reshape
                    && dv.src[0] == Some(r)
                    && ds.op == Op::SetRows
                    && ds.src[1] == Some(v)
                    && inner(r)
                    && inner(v) =>
            {
                Some((FusionKind::RopeSetRows, 3))
            }
            _ => None,
        };
        match found.filter(|(kind, _)| kinds.contains(kind)) {
            Some((kind, n)) => {
                out.push(Window { kind, nodes: nodes[i..i + n].to_vec() });
                i += n;
            }
            None => i += 1,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_tensor::graph::{Graph, RopeMode, RopeParams};

    const ALL: [FusionKind; 4] = [
        FusionKind::RmsNormMul,
        FusionKind::AddRmsNorm,
        FusionKind::GateUpGlu,
        FusionKind::RopeSetRows,
    ];
    use tessera_tensor::DType::{F32, I32, I64, Q4_0, Q8_0};

    /// A decoder block's beginning: residual add, norm × weight, gate/up and SwiGLU; each
    /// window found once, and none where an intermediate is read twice or is an output.
    #[test]
    fn windows_of_a_block() {
        let mut ctx = Context::new();
        let x = ctx.new_tensor(F32, &[64, 1]).unwrap();
        let res = ctx.new_tensor(F32, &[64, 1]).unwrap();
        let w_norm = ctx.new_tensor(F32, &[64]).unwrap();
        let w_gate = ctx.new_tensor(Q4_0, &[64, 128]).unwrap();
        let w_up = ctx.new_tensor(Q4_0, &[64, 128]).unwrap();
        let sum = ctx.add(x, res).unwrap();
        let n = ctx.rms_norm(sum, 1e-6).unwrap();
        let h = ctx.mul(n, w_norm).unwrap();
        let g = ctx.mul_mat(w_gate, h).unwrap();
        let u = ctx.mul_mat(w_up, h).unwrap();
        let y = ctx.glu_split(g, u, GluOp::SwiGlu).unwrap();
        ctx.set_output(y);
        let graph = Graph::build(&ctx, &[y]);
        let kinds: Vec<FusionKind> =
            fusion_windows(&ctx, graph.nodes(), &ALL).iter().map(|w| w.kind).collect();
        // ADD+RMS_NORM takes the norm first, so RMS_NORM+MUL is not a second window on it.
        assert_eq!(kinds, [FusionKind::AddRmsNorm, FusionKind::GateUpGlu], "{:?}", graph.nodes());
        // The sum read again (the residual stream): no ADD+RMS_NORM window.
        let mut ctx2 = ctx.clone();
        let again = ctx2.add(sum, x).unwrap();
        ctx2.set_output(again);
        let graph = Graph::build(&ctx2, &[y, again]);
        let kinds: Vec<FusionKind> =
            fusion_windows(&ctx2, graph.nodes(), &ALL).iter().map(|w| w.kind).collect();
        assert_eq!(kinds, [FusionKind::RmsNormMul, FusionKind::GateUpGlu]);
        // Asking only for the kinds with kernels: RMS_NORM+MUL is found behind the ADD.
        let graph = Graph::build(&ctx, &[y]);
        let w = fusion_windows(&ctx, graph.nodes(), &[FusionKind::RmsNormMul]);
        assert_eq!(w, [Window { kind: FusionKind::RmsNormMul, nodes: vec![n, h] }]);
    }

    /// The residual stream: the sum read again later still fuses with the norm after it when
    /// AddRmsNormMul is asked for (its kernel stores the sum); not when the norm is read twice.
    #[test]
    fn residual_add_norm_mul() {
        let mut ctx = Context::new();
        let x = ctx.new_tensor(F32, &[64, 1]).unwrap();
        let res = ctx.new_tensor(F32, &[64, 1]).unwrap();
        let w = ctx.new_tensor(F32, &[64]).unwrap();
        let sum = ctx.add(x, res).unwrap();
        let n = ctx.rms_norm(sum, 1e-6).unwrap();
        let h = ctx.mul(n, w).unwrap();
        let later = ctx.add(h, sum).unwrap();
        let graph = Graph::build(&ctx, &[later]);
        let kinds = [FusionKind::AddRmsNormMul, FusionKind::RmsNormMul];
        let found = fusion_windows(&ctx, graph.nodes(), &kinds);
        assert_eq!(found, [Window { kind: FusionKind::AddRmsNormMul, nodes: vec![sum, n, h] }]);
        // Without it: the norm and the mul alone.
        let found = fusion_windows(&ctx, graph.nodes(), &[FusionKind::RmsNormMul]);
        assert_eq!(found, [Window { kind: FusionKind::RmsNormMul, nodes: vec![n, h] }]);
        let again = ctx.add(n, x).unwrap();
        let graph = Graph::build(&ctx, &[later, again]);
        assert!(fusion_windows(&ctx, graph.nodes(), &kinds[..1]).is_empty());
    }

    /// A decoding step's attention inputs with only views between (the llama graphs' order):
    /// one AttnInputs window; with a real node between Q's and K's ROPE (a K norm), K's
    /// RoPE into the cache alone.
    #[test]
    fn attention_inputs_of_a_step() {
        let mut ctx = Context::new();
        let q = ctx.new_tensor(F32, &[64, 4, 1]).unwrap();
        let k = ctx.new_tensor(F32, &[64, 2, 1]).unwrap();
        let v = ctx.new_tensor(F32, &[64, 2, 1]).unwrap();
        let pos = ctx.new_tensor(I32, &[1]).unwrap();
        let p = RopeParams::new(64, RopeMode::Norm, 10000.0);
        let (ck, cv) =
            (ctx.new_tensor(F32, &[128, 16]).unwrap(), ctx.new_tensor(F32, &[128, 16]).unwrap());
        let idx = ctx.new_tensor(I64, &[1]).unwrap();
        let build = |ctx: &mut Context, k: TensorId| {
            let rq = ctx.rope(q, pos, None, p).unwrap();
            let pq = ctx.permute(rq, [0, 2, 1, 3]).unwrap();
            let rk = ctx.rope(k, pos, None, p).unwrap();
            let rows = ctx.reshape(rk, &[128, 1]).unwrap();
            let sk = ctx.set_rows(ck, rows, idx).unwrap();
            let kv = ctx.view(sk, &[64, 2, 16], &[128 * 4, 64 * 4], 0).unwrap();
            let vr = ctx.reshape(v, &[128, 1]).unwrap();
            let sv = ctx.set_rows(cv, vr, idx).unwrap();
            (vec![rq, rk, rows, sk, sv], Graph::build(ctx, &[pq, kv, sv]))
        };
        let kinds = [FusionKind::AttnInputs, FusionKind::RopeSetRows];
        let (want, graph) = build(&mut ctx, k);
        let w = fusion_windows(&ctx, graph.nodes(), &kinds);
        assert_eq!(
            w,
            [Window { kind: FusionKind::AttnInputs, nodes: want }],
            "{:?}",
            graph.nodes()
        );
        let scaled = ctx.scale(k, 0.5, 0.0).unwrap();
        let (want, graph) = build(&mut ctx, scaled);
        let w = fusion_windows(&ctx, graph.nodes(), &kinds);
        assert_eq!(w, [Window { kind: FusionKind::RopeSetRows, nodes: want[1..4].to_vec() }]);
    }

    /// Q, K and V of one input by weights of one type: one group; a V of another type left
    /// out (Q and K a pair); gate and up before their GLU stay a GateUpGlu window.
    #[test]
    fn products_of_one_input() {
        let mut ctx = Context::new();
        let x = ctx.new_tensor(F32, &[64, 1]).unwrap();
        let w: Vec<TensorId> = [Q4_0, Q4_0, Q4_0, Q8_0]
            .iter()
            .map(|&t| ctx.new_tensor(t, &[64, 32]).unwrap())
            .collect();
        let q = ctx.mul_mat(w[0], x).unwrap();
        let k = ctx.mul_mat(w[1], x).unwrap();
        let v = ctx.mul_mat(w[2], x).unwrap();
        let v8 = ctx.mul_mat(w[3], x).unwrap();
        let kinds = [FusionKind::GateUpGlu, FusionKind::ProductGroup];
        let graph = Graph::build(&ctx, &[q, k, v]);
        let w3 = fusion_windows(&ctx, graph.nodes(), &kinds);
        assert_eq!(w3, [Window { kind: FusionKind::ProductGroup, nodes: vec![q, k, v] }]);
        let graph = Graph::build(&ctx, &[q, k, v8]);
        let w2 = fusion_windows(&ctx, graph.nodes(), &kinds);
        assert_eq!(w2, [Window { kind: FusionKind::ProductGroup, nodes: vec![q, k] }]);
        // Each followed by its bias ADD (Qwen2's Q, K and V): the ADDs join the window.
        let biases: Vec<TensorId> = (0..3).map(|_| ctx.new_tensor(F32, &[32]).unwrap()).collect();
        let sums: Vec<TensorId> =
            [q, k, v].iter().zip(&biases).map(|(&p, &b)| ctx.add(p, b).unwrap()).collect();
        let mut pins = vec![q, k, v];
        pins.extend(&sums);
        let graph = Graph::build_with_pins(&ctx, &pins, &sums);
        let w6 = fusion_windows(&ctx, graph.nodes(), &kinds);
        assert_eq!(w6, [Window { kind: FusionKind::ProductGroup, nodes: pins.clone() }]);
        // Not when a product is read again (its value must exist).
        let again = ctx.scale(k, 2.0, 0.0).unwrap();
        let mut outs = sums.clone();
        outs.push(again);
        let graph = Graph::build_with_pins(&ctx, &pins, &outs);
        let w3 = fusion_windows(&ctx, graph.nodes(), &kinds);
        assert_eq!(w3[0].nodes, [q, k, v], "{:?}", graph.nodes());
        let g = ctx.glu_split(q, k, GluOp::SwiGlu).unwrap();
        let graph = Graph::build(&ctx, &[g]);
        let glu: Vec<FusionKind> =
            fusion_windows(&ctx, graph.nodes(), &kinds).iter().map(|w| w.kind).collect();
        assert_eq!(glu, [FusionKind::GateUpGlu]);
    }

    /// K rotated and written into the cache (through the reshape to one row a token, as the
    /// llama graphs store it): one window; not when the rotated K is also an output, nor
    /// without the reshape (SET_ROWS of three-dimensional rows: other semantics).
    #[test]
    fn rope_into_the_cache() {
        let mut ctx = Context::new();
        let k = ctx.new_tensor(F32, &[64, 2, 1]).unwrap();
        let pos = ctx.new_tensor(I32, &[1]).unwrap();
        let r = ctx.rope(k, pos, None, RopeParams::new(64, RopeMode::Neox, 10000.0)).unwrap();
        let rows = ctx.reshape(r, &[128, 1]).unwrap();
        let cache = ctx.new_tensor(F32, &[128, 16]).unwrap();
        let idx = ctx.new_tensor(I64, &[1]).unwrap();
        let s = ctx.set_rows(cache, rows, idx).unwrap();
        let graph = Graph::build(&ctx, &[s]);
        let w = fusion_windows(&ctx, graph.nodes(), &ALL);
        assert_eq!(w, [Window { kind: FusionKind::RopeSetRows, nodes: vec![r, rows, s] }]);
        let mut ctx2 = ctx.clone();
        ctx2.set_output(r);
        assert!(fusion_windows(&ctx2, graph.nodes(), &ALL).is_empty());
        let cache3 = ctx.new_tensor(F32, &[64, 16]).unwrap();
        let idx2 = ctx.new_tensor(I64, &[2]).unwrap();
        let s3 = ctx.set_rows(cache3, r, idx2).unwrap();
        let graph = Graph::build(&ctx, &[s3]);
        assert!(fusion_windows(&ctx, graph.nodes(), &ALL).is_empty());
    }
}
