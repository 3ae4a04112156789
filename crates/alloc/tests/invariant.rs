//! The allocator invariant over random graphs: random DAGs of unary, binary, matmul, view,
//! reshape, transpose/permute, cont and copy ops over leafs of random shapes, with random INPUT
//! and OUTPUT flags and some leafs pre-bound as weights; see `common::check` for what is checked.

mod common;

use common::{check, Stats, TestBufferType};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use tessera_alloc::{alloc_tensors, GraphAllocator};
use tessera_backend::{Bindings, BufferType, HostBufferType};
use tessera_tensor::graph::{Context, Flags, Graph, TensorId, UnaryOp};
use tessera_tensor::DType;

/// One random graph, as choices interpreted by [`build`].
#[derive(Debug, Clone)]
struct Spec {
    /// (ne0 / 4, ne1, ne2, kind: 0 plain, 1 input, 2 pre-bound weight, 3 PARAM).
    leafs: Vec<(usize, usize, usize, u8)>,
    /// (op, operand choices, flags choice).
    steps: Vec<(u8, u16, u16, u16, u8)>,
    /// Extra tensors to expand the graph from (besides every unused one), as choices.
    outputs: Vec<u16>,
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        prop::collection::vec((1usize..9, 1usize..5, 1usize..3, 0u8..6), 1..8),
        prop::collection::vec((0u8..12, any::<u16>(), any::<u16>(), any::<u16>(), 0u8..20), 1..60),
        prop::collection::vec(any::<u16>(), 0..3),
    )
        .prop_map(|(leafs, steps, outputs)| Spec { leafs, steps, outputs })
}

/// A tensor chosen by `x`: mostly one of the last few (long chains, big graphs), sometimes any.
fn pick(ts: &[TensorId], x: u16) -> TensorId {
    let x = x as usize;
    if x % 4 == 0 {
        ts[x / 4 % ts.len()]
    } else {
        ts[ts.len() - 1 - x / 4 % ts.len().min(3)]
    }
}

fn can_repeat(b: &[usize; 4], a: &[usize; 4]) -> bool {
    b.iter().zip(a).all(|(&nb, &na)| na % nb == 0)
}

/// Builds the graph of `spec`; returns the context, graph, and the weights to pre-bind.
fn build(spec: &Spec) -> (Context, Graph, Vec<TensorId>) {
    let mut ctx = Context::new();
    let mut ts = Vec::new();
    let mut weights = Vec::new();
    for &(ne0, ne1, ne2, kind) in &spec.leafs {
        let t = ctx.new_tensor(DType::F32, &[4 * ne0, ne1, ne2]).unwrap();
        match kind {
            1 => {
                ctx.set_input(t);
            }
            2 => weights.push(t),
            3 => {
                ctx.set_flags(t, Flags::PARAM);
            }
            _ => {}
        }
        ts.push(t);
    }
    for &(op, x, y, z, flags) in &spec.steps {
        let a = pick(&ts, x);
        let da = ctx.get(a).clone();
        let r = match op {
            0 => ctx.unary(a, UnaryOp::Silu),
            1 => ctx.scale(a, 2.0, 1.0),
            2 => ctx.rms_norm(a, 1e-6),
            3 | 4 => {
                let cands: Vec<_> =
                    ts.iter().copied().filter(|&b| can_repeat(&ctx.get(b).ne, &da.ne)).collect();
                let b = if cands.is_empty() { a } else { pick(&cands, y) };
                if op == 3 {
                    ctx.add(a, b)
                } else {
                    ctx.mul(a, b)
                }
            }
            5 => {
                let cands: Vec<_> = ts
                    .iter()
                    .copied()
                    .filter(|&b| {
                        let db = ctx.get(b);
                        db.ne[0] == da.ne[0] && db.ne[2] % da.ne[2] == 0 && db.ne[3] % da.ne[3] == 0
                    })
                    .collect();
                let b = if cands.is_empty() { a } else { pick(&cands, y) };
                ctx.mul_mat(a, b)
            }
            6 => {
                let k = 1 + y as usize % da.ne[1];
                let start = z as usize % (da.ne[1] - k + 1);
                ctx.view(a, &[da.ne[0], k], &[da.nb[1]], start * da.nb[1])
            }
            7 => {
                if da.is_contiguous() {
                    ctx.reshape(a, &[da.n_elements()])
                } else {
                    ctx.cont(a, None)
                }
            }
            8 => {
                if y % 2 == 0 {
                    ctx.transpose(a)
                } else {
                    ctx.permute(a, [0, 2, 1, 3])
                }
            }
            9 => ctx.cont(a, None),
            10 => {
                let dst = ctx.new_tensor(DType::F32, &[da.n_elements()]).unwrap();
                if z % 2 == 0 {
                    weights.push(dst);
                }
                ts.push(dst);
                ctx.cpy(a, dst)
            }
            _ => ctx.soft_max(a, None, 1.0, 0.0),
        };
        let Ok(t) = r else { continue };
        match flags {
            0 | 1 => {
                ctx.set_output(t);
            }
            2 if ctx.get(t).is_view() => {
                ctx.set_input(t);
            }
            3 => {
                ctx.set_input(t);
            }
            _ => {}
        }
        ts.push(t);
    }
    // Expand from every tensor nothing uses (most of what was built), then a few more.
    let used: Vec<TensorId> = ts.iter().flat_map(|&t| ctx.get(t).sources()).collect();
    let mut outs: Vec<TensorId> = ts.iter().copied().filter(|t| !used.contains(t)).collect();
    outs.extend(spec.outputs.iter().map(|&x| pick(&ts, x)));
    let graph = Graph::build(&ctx, &outs);
    (ctx, graph, weights)
}

/// Pre-binds the weights that are in the graph in a separate buffer; returns where they are.
fn bind_weights(
    ctx: &Context,
    graph: &Graph,
    weights: &[TensorId],
    bindings: &mut Bindings,
) -> HashMap<TensorId, (usize, usize)> {
    let buft: Arc<dyn BufferType> = Arc::new(HostBufferType);
    let ws = weights.iter().copied().filter(|&w| graph.contains(w));
    alloc_tensors(&buft, ctx, ws.clone(), bindings).unwrap();
    ws.map(|w| {
        let s = bindings.storage(ctx, w).unwrap();
        (w, (Arc::as_ptr(&s.buffer) as *const u8 as usize, s.offset))
    })
    .collect()
}

fn run_case(specs: &(Spec, Spec), alignment: usize, max_size: usize) -> Result<Vec<Stats>, String> {
    let buft = TestBufferType::new(alignment, max_size);
    let mut alloc = GraphAllocator::new(buft.clone());
    let mut stats = Vec::new();
    let (ctx1, g1, w1) = build(&specs.0);
    let (ctx2, g2, w2) = build(&specs.1);
    let mut b1 = Bindings::new();
    let ext1 = bind_weights(&ctx1, &g1, &w1, &mut b1);
    // Reserve on the first graph, allocate both, then the first again with its old bindings.
    alloc.reserve_bound(&ctx1, &g1, &b1).map_err(|e| e.to_string())?;
    let reserved = alloc.n_buffer_allocs();
    alloc.alloc_graph(&ctx1, &g1, &mut b1).map_err(|e| e.to_string())?;
    if alloc.n_buffer_allocs() != reserved {
        return Err("allocating the reserved graph allocated buffers".into());
    }
    stats.push(check(&ctx1, &g1, &alloc, &b1, &ext1)?);
    let mut b2 = Bindings::new();
    let ext2 = bind_weights(&ctx2, &g2, &w2, &mut b2);
    alloc.alloc_graph(&ctx2, &g2, &mut b2).map_err(|e| e.to_string())?;
    stats.push(check(&ctx2, &g2, &alloc, &b2, &ext2)?);
    alloc.alloc_graph(&ctx1, &g1, &mut b1).map_err(|e| e.to_string())?;
    stats.push(check(&ctx1, &g1, &alloc, &b1, &ext1)?);
    if buft.allocs() != alloc.n_buffer_allocs() {
        return Err("buffer allocation count mismatch".into());
    }
    for id in 0..alloc.n_buffer_ids() {
        if alloc.buffers(id).iter().map(|b| b.size()).sum::<usize>() < alloc.peak_bytes() {
            return Err("buffers smaller than the last plan".into());
        }
    }
    Ok(stats)
}

#[test]
fn live_tensors_never_overlap() {
    // A fixed seed keeps the coverage counts below reproducible; PROPTEST_CASES raises the count.
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(1000);
    let config = Config { cases, failure_persistence: None, ..Config::default() };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha));
    let total = RefCell::new((0usize, Stats::default()));
    let strategy = ((spec(), spec()), prop::sample::select(vec![16usize, 64]), 0usize..3);
    runner
        .run(&strategy, |(specs, alignment, max_choice)| {
            let max_size = [usize::MAX, 256, 1024][max_choice];
            let stats = run_case(&specs, alignment, max_size).map_err(TestCaseError::fail)?;
            let mut t = total.borrow_mut();
            for s in stats {
                t.0 += 1;
                t.1.nodes += s.nodes;
                t.1.placed += s.placed;
                t.1.inplace += s.inplace;
                t.1.views += s.views;
                t.1.external += s.external;
                t.1.shared_pairs += s.shared_pairs;
                t.1.max_chunks = t.1.max_chunks.max(s.max_chunks);
            }
            Ok(())
        })
        .unwrap();
    let (graphs, s) = *total.borrow();
    eprintln!("{graphs} graph allocations checked: {s:?}");
    // The generator must exercise what the invariant is about.
    assert!(s.inplace > graphs / 4, "too few in-place nodes: {s:?}");
    assert!(s.views > graphs, "too few views: {s:?}");
    assert!(s.external > graphs / 4, "too few pre-bound tensors: {s:?}");
    assert!(s.shared_pairs > graphs, "too little memory reuse: {s:?}");
    assert!(s.max_chunks > 1, "never used several chunks: {s:?}");
}
