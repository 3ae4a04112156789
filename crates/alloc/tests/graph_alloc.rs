//! Unit tests of the graph allocator's behaviours: in-place chains, outputs, views, chunks,
//! reserve then re-allocate, pre-bound weights, several buffer types.

mod common;

use common::{check, TestBufferType};
use std::collections::HashMap;
use std::sync::Arc;
use tessera_alloc::{AllocError, GraphAllocator, LinearAllocator};
use tessera_backend::{Bindings, BufferType, HostBufferType};
use tessera_tensor::graph::{Context, Graph, TensorId, UnaryOp};
use tessera_tensor::DType;

fn host() -> Arc<dyn BufferType> {
    Arc::new(HostBufferType)
}

/// Allocates `graph` with a fresh host allocator, checks the invariant, returns the allocator.
fn alloc_checked(ctx: &Context, graph: &Graph) -> (GraphAllocator, Bindings) {
    let mut alloc = GraphAllocator::new(host());
    let mut b = Bindings::new();
    alloc.alloc_graph(ctx, graph, &mut b).unwrap();
    check(ctx, graph, &alloc, &b, &HashMap::new()).unwrap();
    (alloc, b)
}

/// `x` through `n` element-wise ops (silu, scale, rms_norm in turn); the last is an output.
fn unary_chain(ctx: &mut Context, x: TensorId, n: usize) -> TensorId {
    let mut h = x;
    for i in 0..n {
        h = match i % 3 {
            0 => ctx.unary(h, UnaryOp::Silu),
            1 => ctx.scale(h, 0.5, 0.0),
            _ => ctx.rms_norm(h, 1e-6),
        }
        .unwrap();
    }
    ctx.set_output(h)
}

#[test]
fn unary_chain_runs_in_place() {
    const BYTES: usize = 4096;
    // From a plain leaf: every op reuses the one buffer.
    let mut ctx = Context::new();
    let x = ctx.new_tensor(DType::F32, &[1024]).unwrap();
    let out = unary_chain(&mut ctx, x, 12);
    let (alloc, _) = alloc_checked(&ctx, &Graph::build(&ctx, &[out]));
    assert_eq!(alloc.last_plan().unwrap().n_inplace(), 12);
    assert_eq!(alloc.peak_bytes(), BYTES);

    // From an input (kept for the whole graph): the first op needs its own bytes, then the
    // chain stays in those: two tensors' worth in all.
    let mut ctx = Context::new();
    let x = ctx.new_tensor(DType::F32, &[1024]).unwrap();
    ctx.set_input(x);
    let out = unary_chain(&mut ctx, x, 12);
    let (alloc, b) = alloc_checked(&ctx, &Graph::build(&ctx, &[out]));
    let plan = alloc.last_plan().unwrap();
    assert_eq!(plan.n_inplace(), 11);
    assert_eq!(alloc.peak_bytes(), 2 * BYTES);
    assert_eq!(alloc.buffer_sizes(), vec![2 * BYTES]);
    assert_ne!(b.storage(&ctx, x).unwrap().offset, b.storage(&ctx, out).unwrap().offset);
}

#[test]
fn ops_that_cannot_run_in_place_alternate_between_two_buffers() {
    let mut ctx = Context::new();
    let x = ctx.new_tensor(DType::F32, &[256]).unwrap();
    let mut h = x;
    for _ in 0..8 {
        h = ctx.cont(h, None).unwrap();
    }
    ctx.set_output(h);
    let (alloc, _) = alloc_checked(&ctx, &Graph::build(&ctx, &[h]));
    assert_eq!(alloc.last_plan().unwrap().n_inplace(), 0);
    assert_eq!(alloc.peak_bytes(), 2 * 1024);
}

#[test]
fn outputs_are_never_overwritten() {
    let mut ctx = Context::new();
    let x = ctx.new_tensor(DType::F32, &[64, 4]).unwrap();
    let mid = ctx.unary(x, UnaryOp::Silu).unwrap();
    ctx.set_output(mid);
    let scaled = ctx.scale(mid, 2.0, 0.0).unwrap();
    let mut h = scaled;
    for _ in 0..6 {
        let c = ctx.cont(h, None).unwrap();
        h = ctx.add(c, h).unwrap();
    }
    ctx.set_output(h);
    let (alloc, _) = alloc_checked(&ctx, &Graph::build(&ctx, &[h]));
    let plan = alloc.last_plan().unwrap();
    let m = plan.placement(mid).unwrap();
    // Nothing computed after `mid` shares its bytes, not even the in-place scale.
    for (id, p) in plan.placements() {
        if id != mid && id != x {
            assert!(p.offset + p.size <= m.offset || m.offset + m.size <= p.offset, "{id:?}");
        }
    }
    assert_eq!(plan.inplace_source(scaled), None);
    assert_eq!(plan.inplace_source(mid), Some(x), "a plain leaf may be overwritten");
}

#[test]
fn views_take_no_memory_of_their_own() {
    let mut ctx = Context::new();
    let x = ctx.new_tensor(DType::F32, &[16, 8]).unwrap();
    ctx.set_input(x);
    let y = ctx.cont(x, None).unwrap(); // 512 bytes
    let rows = ctx.view(y, &[16, 2], &[64], 3 * 64).unwrap();
    let flat = ctx.reshape(y, &[128]).unwrap();
    let t = ctx.transpose(y).unwrap();
    let p = ctx.permute(t, [1, 0, 2, 3]).unwrap();
    let a = ctx.cont(rows, None).unwrap();
    let b = ctx.sum_rows(flat).unwrap();
    let c = ctx.cont(p, None).unwrap();
    for o in [a, b, c] {
        ctx.set_output(o);
    }
    let (alloc, bind) = alloc_checked(&ctx, &Graph::build(&ctx, &[a, b, c]));
    let plan = alloc.last_plan().unwrap();
    let ys = bind.storage(&ctx, y).unwrap();
    for (v, offs) in [(rows, 192), (flat, 0), (t, 0), (p, 0)] {
        assert!(plan.placement(v).is_none());
        assert_eq!(bind.storage(&ctx, v).unwrap().offset, ys.offset + offs);
    }
    // x, y, a, b, c: 512 + 512 + 128 + 64 (4 bytes, aligned) + 512.
    assert_eq!(plan.placements().count(), 5);
    assert_eq!(alloc.peak_bytes(), 512 + 512 + 128 + 64 + 512);
}

#[test]
fn a_view_that_starts_its_dying_source_donates_the_storage() {
    let mut ctx = Context::new();
    let x = ctx.new_tensor(DType::F32, &[16, 8]).unwrap(); // 512 bytes, not kept
    let y = ctx.cont(x, None).unwrap();
    let top = ctx.view(y, &[16, 4], &[64], 0).unwrap(); // first 256 bytes of y
    let z = ctx.unary(top, UnaryOp::Tanh).unwrap();
    let w = ctx.cont(z, None).unwrap();
    ctx.set_output(w);
    let (alloc, bind) = alloc_checked(&ctx, &Graph::build(&ctx, &[w]));
    let plan = alloc.last_plan().unwrap();
    assert_eq!(plan.inplace_source(z), Some(y));
    assert_eq!(plan.placement(z).unwrap().size, 256);
    assert_eq!(bind.storage(&ctx, z).unwrap().offset, bind.storage(&ctx, y).unwrap().offset);
    // A view at an offset, or a transposed one, does not donate.
    let mut ctx = Context::new();
    let x = ctx.new_tensor(DType::F32, &[16, 8]).unwrap();
    let y = ctx.cont(x, None).unwrap();
    let low = ctx.view(y, &[16, 4], &[64], 256).unwrap();
    let z = ctx.unary(low, UnaryOp::Tanh).unwrap();
    ctx.set_output(z);
    let (alloc, _) = alloc_checked(&ctx, &Graph::build(&ctx, &[z]));
    assert_eq!(alloc.last_plan().unwrap().inplace_source(z), None);
}

#[test]
fn chunks_respect_max_size() {
    let buft = TestBufferType::new(64, 1024);
    let mut ctx = Context::new();
    // Eight 512-byte inputs, all alive at once, summed pairwise into outputs; one 4 KiB tensor.
    let xs: Vec<_> = (0..8)
        .map(|_| {
            let t = ctx.new_tensor(DType::F32, &[128]).unwrap();
            ctx.set_input(t)
        })
        .collect();
    let mut outs: Vec<_> = xs.chunks(2).map(|p| ctx.add(p[0], p[1]).unwrap()).collect();
    let big = ctx.new_tensor(DType::F32, &[1024]).unwrap();
    outs.push(ctx.scale(big, 1.0, 0.0).unwrap());
    for &o in &outs {
        ctx.set_output(o);
    }
    let graph = Graph::build(&ctx, &outs);
    let mut alloc = GraphAllocator::new(buft.clone());
    let mut b = Bindings::new();
    alloc.alloc_graph(&ctx, &graph, &mut b).unwrap();
    check(&ctx, &graph, &alloc, &b, &HashMap::new()).unwrap();
    let sizes: Vec<_> = alloc.buffers(0).iter().map(|b| b.size()).collect();
    assert!(sizes.len() >= 7, "{sizes:?}");
    // Every chunk within max_size, but the one holding the oversized tensor alone.
    for (c, &s) in sizes.iter().enumerate() {
        let holds_big = alloc.last_plan().unwrap().placement(big).unwrap().chunk == c;
        assert!(s <= 1024 || (holds_big && s == 4096), "chunk {c}: {s} bytes");
    }
    assert_eq!(buft.allocs(), sizes.len());
}

/// A small transformer-ish block over `n_tokens` tokens with bound weights.
fn block(n_tokens: usize) -> (Context, Graph, Vec<TensorId>) {
    let mut ctx = Context::new();
    let w1 = ctx.new_tensor(DType::F32, &[64, 128]).unwrap();
    let w2 = ctx.new_tensor(DType::F32, &[128, 64]).unwrap();
    let x = ctx.new_tensor(DType::F32, &[64, n_tokens]).unwrap();
    ctx.set_input(x);
    let h = ctx.rms_norm(x, 1e-6).unwrap();
    let up = ctx.mul_mat(w1, h).unwrap();
    let act = ctx.unary(up, UnaryOp::Gelu).unwrap();
    let down = ctx.mul_mat(w2, act).unwrap();
    let out = ctx.add(down, x).unwrap();
    ctx.set_output(out);
    let g = Graph::build(&ctx, &[out]);
    (ctx, g, vec![w1, w2])
}

fn bind_weights(ctx: &Context, ws: &[TensorId], b: &mut Bindings) {
    let mut la = LinearAllocator::with_buffer_type(host(), 1 << 16).unwrap();
    for &w in ws {
        la.alloc(ctx, w, b).unwrap();
    }
}

#[test]
fn reserve_then_smaller_graphs_reuse_the_buffers() {
    let buft = TestBufferType::new(64, usize::MAX);
    let mut alloc = GraphAllocator::new(buft.clone());
    let (ctx, g, ws) = block(32);
    let mut b = Bindings::new();
    bind_weights(&ctx, &ws, &mut b);
    alloc.reserve_bound(&ctx, &g, &b).unwrap();
    let reserved = alloc.buffer_sizes();
    let first = alloc.buffers(0)[0].clone();
    assert_eq!(buft.allocs(), 1);
    // Weights are not in the compute buffer: reserving unbound would count them.
    let mut unbound = GraphAllocator::new(host());
    unbound.reserve(&ctx, &g).unwrap();
    assert!(unbound.peak_bytes() >= alloc.peak_bytes() + 2 * 64 * 128 * 4);

    for n_tokens in [1, 7, 32, 16] {
        let (ctx, g, ws) = block(n_tokens);
        let mut b = Bindings::new();
        bind_weights(&ctx, &ws, &mut b);
        alloc.alloc_graph(&ctx, &g, &mut b).unwrap();
        let ext = ws
            .iter()
            .map(|&w| {
                let s = b.storage(&ctx, w).unwrap();
                (w, (Arc::as_ptr(&s.buffer) as *const u8 as usize, s.offset))
            })
            .collect();
        check(&ctx, &g, &alloc, &b, &ext).unwrap();
        assert!(alloc.peak_bytes() <= reserved[0]);
        // Allocating the same graph again with the same bindings re-plans identically.
        let before = alloc.last_plan().unwrap().clone();
        alloc.alloc_graph(&ctx, &g, &mut b).unwrap();
        let after = alloc.last_plan().unwrap();
        assert!(before.placements().eq(after.placements()));
    }
    assert_eq!(buft.allocs(), 1, "no graph up to the reserved size reallocates");
    assert!(Arc::ptr_eq(&alloc.buffers(0)[0], &first));
    assert_eq!(alloc.buffer_sizes(), reserved);

    // A larger graph grows the buffer once; old bindings into the old buffer are re-planned.
    let (ctx, g, ws) = block(64);
    let mut b = Bindings::new();
    bind_weights(&ctx, &ws, &mut b);
    alloc.alloc_graph(&ctx, &g, &mut b).unwrap();
    assert_eq!(buft.allocs(), 2);
    assert!(alloc.buffer_sizes()[0] > reserved[0]);
    assert!(alloc.owns(&first), "a replaced buffer still in use counts as ours");
    alloc.alloc_graph(&ctx, &g, &mut b).unwrap();
    assert_eq!(buft.allocs(), 2);
}

#[test]
fn several_buffer_types() {
    let gpu = TestBufferType::new(256, usize::MAX);
    let cpu = TestBufferType::new(64, usize::MAX);
    let bufts: Vec<Arc<dyn BufferType>> = vec![gpu.clone(), cpu.clone(), gpu.clone()];
    let mut alloc = GraphAllocator::new_multi(bufts).unwrap();
    let (ctx, g, _) = block(8);
    // Leafs and the first half of the nodes on id 0 or 2 (same memory), the rest on id 1.
    let half = g.nodes().len() / 2;
    let late: Vec<_> = g.nodes()[half..].to_vec();
    let assign = move |id: TensorId| if late.contains(&id) { 1 } else { 2 * (id.index() % 2) };
    let mut b = Bindings::new();
    alloc.alloc_graph_n(&ctx, &g, &mut b, &assign).unwrap();
    check(&ctx, &g, &alloc, &b, &HashMap::new()).unwrap();
    let plan = alloc.last_plan().unwrap();
    for (id, p) in plan.placements() {
        assert_eq!(p.buffer_id, assign(id));
        let align = if p.buffer_id == 1 { 64 } else { 256 };
        assert_eq!(p.offset % align, 0);
    }
    assert_eq!(gpu.allocs(), 1);
    assert_eq!(cpu.allocs(), 1);
    let sizes = alloc.buffer_sizes();
    assert_eq!(sizes[2], 0, "id 2 shares id 0's memory and is counted once");
    assert_eq!(sizes[0] + sizes[1], alloc.peak_bytes());

    let bad = |_: TensorId| 3;
    let err = alloc.alloc_graph_n(&ctx, &g, &mut b, &bad).unwrap_err();
    assert!(matches!(err, AllocError::BufferId { buffer_id: 3, n_buffers: 3, .. }), "{err}");
    assert!(matches!(GraphAllocator::new_multi(vec![]), Err(AllocError::NoBufferTypes)));
}
