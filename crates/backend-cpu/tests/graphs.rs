//! Whole graphs on the CPU backend through the public API: the seed demos, the graph
//! allocator's placements (in-place reuse included), thread counts, errors and the abort flag.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use tessera_alloc::{alloc_tensors, GraphAllocator};
use tessera_backend::{Backend, BackendError, Bindings, BufferType, HostBufferType};
use tessera_backend_cpu::{CpuBackend, CpuDevice, SimdLevel};
use tessera_tensor::graph::{Context, Graph, TensorId};
use tessera_tensor::DType;

fn host() -> Arc<dyn BufferType> {
    Arc::new(HostBufferType)
}

/// Binds every leaf with `alloc_tensors`, the rest with the graph allocator.
fn place(
    ctx: &Context,
    graph: &Graph,
) -> (Bindings, GraphAllocator, Vec<Arc<dyn tessera_backend::Buffer>>) {
    let mut bindings = Bindings::new();
    let leafs: Vec<TensorId> = graph.leafs().to_vec();
    let bufs = alloc_tensors(&host(), ctx, leafs, &mut bindings).unwrap();
    let mut galloc = GraphAllocator::new(host());
    galloc.alloc_graph(ctx, graph, &mut bindings).unwrap();
    (bindings, galloc, bufs)
}

#[test]
fn seed_001_matmul_prints_ggmls_transposed_result() {
    let mut ctx = Context::new();
    let a = ctx.new_tensor(DType::F32, &[2, 4]).unwrap();
    let b = ctx.new_tensor(DType::F32, &[2, 3]).unwrap();
    let r = ctx.mul_mat(a, b).unwrap();
    let graph = Graph::build(&ctx, &[r]);
    let (bindings, _g, _b) = place(&ctx, &graph);
    bindings.set_f32(&ctx, a, &[2., 8., 5., 1., 4., 2., 8., 6.]).unwrap();
    bindings.set_f32(&ctx, b, &[10., 5., 9., 9., 5., 4.]).unwrap();
    for level in SimdLevel::available() {
        let mut cpu = CpuBackend::new(1);
        cpu.set_simd_level(level);
        cpu.graph_compute(&ctx, &graph, &bindings).unwrap();
        assert_eq!(ctx.get(r).ne, [4, 3, 1, 1]);
        assert_eq!(
            bindings.get_f32(&ctx, r).unwrap(),
            [60., 55., 50., 110., 90., 54., 54., 126., 42., 29., 28., 64.],
            "{level}"
        );
    }
}

/// A small transformer-like block: rms_norm, mul, matmuls, rope, softmax attention, swiglu,
/// residual adds: many intermediates the allocator reuses, some in place.
fn block(ctx: &mut Context, n_tok: usize) -> (Vec<TensorId>, TensorId) {
    let (d, hd, nh, ff) = (64, 16, 4, 96);
    let x = ctx.new_tensor(DType::F32, &[d, n_tok]).unwrap();
    ctx.set_input(x);
    let g = ctx.new_tensor(DType::F32, &[d]).unwrap();
    let wq = ctx.new_tensor(DType::F16, &[d, d]).unwrap();
    let wk = ctx.new_tensor(DType::F32, &[d, d]).unwrap();
    let wv = ctx.new_tensor(DType::F32, &[d, d]).unwrap();
    let wu = ctx.new_tensor(DType::F32, &[d, 2 * ff]).unwrap();
    let wd = ctx.new_tensor(DType::F32, &[ff, d]).unwrap();
    let pos = ctx.new_tensor(DType::I32, &[n_tok]).unwrap();
    ctx.set_input(pos);
    let h = ctx.rms_norm(x, 1e-6).unwrap();
    let h = ctx.mul(h, g).unwrap();
    let q = ctx.mul_mat(wq, h).unwrap();
    let q = ctx.reshape(q, &[hd, nh, n_tok]).unwrap();
    let p =
        tessera_tensor::graph::RopeParams::new(hd, tessera_tensor::graph::RopeMode::Neox, 10000.0);
    let q = ctx.rope(q, pos, None, p).unwrap();
    let k = ctx.mul_mat(wk, h).unwrap();
    let k = ctx.reshape(k, &[hd, nh, n_tok]).unwrap();
    let k = ctx.rope(k, pos, None, p).unwrap();
    let v = ctx.mul_mat(wv, h).unwrap();
    let v = ctx.reshape(v, &[hd, nh, n_tok]).unwrap();
    let qp = ctx.permute(q, [0, 2, 1, 3]).unwrap();
    let kp = ctx.permute(k, [0, 2, 1, 3]).unwrap();
    let kq = ctx.mul_mat(kp, qp).unwrap();
    let kq = ctx.soft_max(kq, None, 0.25, 0.0).unwrap();
    let vt = ctx.permute(v, [1, 2, 0, 3]).unwrap();
    let vt = ctx.cont(vt, None).unwrap();
    let kqv = ctx.mul_mat(vt, kq).unwrap();
    let kqv = ctx.permute(kqv, [0, 2, 1, 3]).unwrap();
    let att = ctx.cont(kqv, Some(&[d, n_tok])).unwrap();
    let x2 = ctx.add(x, att).unwrap();
    let u = ctx.mul_mat(wu, x2).unwrap();
    let s = ctx.glu(u, tessera_tensor::graph::GluOp::SwiGlu, false).unwrap();
    let o = ctx.mul_mat(wd, s).unwrap();
    let out = ctx.add(x2, o).unwrap();
    ctx.set_output(out);
    (vec![x, g, wq, wk, wv, wu, wd, pos], out)
}

fn fill(ctx: &Context, b: &Bindings, ids: &[TensorId], n_tok: usize) {
    for (k, &id) in ids.iter().enumerate() {
        let desc = ctx.get(id);
        let n = desc.n_elements();
        match desc.dtype {
            DType::I32 => b.set_i32(ctx, id, &(0..n_tok as i32).collect::<Vec<_>>()).unwrap(),
            DType::F16 => {
                let v: Vec<u8> = (0..n)
                    .flat_map(|i| {
                        half::f16::from_f32(((i * 7 + k) as f32 * 0.01).sin() * 0.2).to_le_bytes()
                    })
                    .collect();
                b.set(ctx, id, &v).unwrap()
            }
            _ => b
                .set_f32(
                    ctx,
                    id,
                    &(0..n).map(|i| ((i * 13 + k) as f32 * 0.017).cos() * 0.3).collect::<Vec<_>>(),
                )
                .unwrap(),
        }
    }
}

#[test]
fn allocated_block_gives_the_same_result_on_every_thread_count_and_level() {
    let n_tok = 7;
    let mut ctx = Context::new();
    let (inputs, out) = block(&mut ctx, n_tok);
    let graph = Graph::build(&ctx, &[out]);
    let (bindings, galloc, _b) = place(&ctx, &graph);
    fill(&ctx, &bindings, &inputs, n_tok);
    // Unshared reference: every tensor in its own buffer (no reuse at all).
    let mut own = Bindings::new();
    let all: Vec<TensorId> = ctx.ids().collect();
    let _bufs = alloc_tensors(&host(), &ctx, all, &mut own).unwrap();
    fill(&ctx, &own, &inputs, n_tok);
    let mut cpu = CpuBackend::new(1);
    cpu.set_simd_level(SimdLevel::Scalar);
    cpu.graph_compute(&ctx, &graph, &own).unwrap();
    let want = own.get_f32(&ctx, out).unwrap();
    assert!(galloc.peak_bytes() < tessera_alloc::tensors_size(&*host(), &ctx, ctx.ids()));
    for level in SimdLevel::available() {
        for threads in [1, 2, 3, 4] {
            let mut cpu = CpuBackend::new(threads);
            cpu.set_simd_level(level);
            for _ in 0..3 {
                cpu.graph_compute(&ctx, &graph, &bindings).unwrap();
                let got = bindings.get_f32(&ctx, out).unwrap();
                let err: f32 = got.iter().zip(&want).map(|(a, b)| (a - b) * (a - b)).sum::<f32>()
                    / want.iter().map(|b| b * b).sum::<f32>();
                assert!(err < 1e-4, "{level}/t{threads}: nmse {err}");
            }
        }
    }
}

#[test]
fn a_bad_index_is_an_error_not_a_crash() {
    let mut ctx = Context::new();
    let t = ctx.new_tensor(DType::F32, &[4, 3]).unwrap();
    let idx = ctx.new_tensor(DType::I32, &[2]).unwrap();
    let r = ctx.get_rows(t, idx).unwrap();
    let graph = Graph::build(&ctx, &[r]);
    let (b, _g, _bufs) = place(&ctx, &graph);
    b.set_i32(&ctx, idx, &[1, 3]).unwrap();
    let mut cpu = CpuBackend::new(2);
    let e = cpu.graph_compute(&ctx, &graph, &b).unwrap_err();
    assert!(matches!(e, BackendError::Kernel { .. }), "{e}");
    assert!(e.to_string().contains("GET_ROWS: index 3 out of range"), "{e}");
    // The backend still works afterwards.
    b.set_i32(&ctx, idx, &[2, 0]).unwrap();
    cpu.graph_compute(&ctx, &graph, &b).unwrap();
}

#[test]
fn unbound_tensors_and_the_abort_flag_are_reported() {
    let mut ctx = Context::new();
    let a = ctx.new_tensor(DType::F32, &[4]).unwrap();
    let s = ctx.scale(a, 2.0, 0.0).unwrap();
    let graph = Graph::build(&ctx, &[s]);
    let mut cpu = CpuBackend::new(2);
    let e = cpu.graph_compute(&ctx, &graph, &Bindings::new()).unwrap_err();
    assert!(matches!(e, BackendError::Unbound { .. }), "{e}");
    let (b, _g, _bufs) = place(&ctx, &graph);
    cpu.abort_flag().store(true, Ordering::SeqCst);
    assert!(matches!(cpu.graph_compute(&ctx, &graph, &b), Err(BackendError::Aborted)));
    cpu.abort_flag().store(false, Ordering::SeqCst);
    b.set_f32(&ctx, a, &[1., 2., 3., 4.]).unwrap();
    cpu.graph_compute(&ctx, &graph, &b).unwrap();
    assert_eq!(b.get_f32(&ctx, s).unwrap(), [2., 4., 6., 8.]);
}

#[test]
fn the_device_describes_the_host() {
    let dev = CpuDevice::from_env();
    let (free, total) = tessera_backend::Device::memory(&dev);
    assert!(total > 0 && free <= total);
    let mut b = tessera_backend::Device::init_backend(&dev).unwrap();
    assert_eq!(b.name(), "CPU");
    b.synchronize().unwrap();
}

/// A graph of a few looked-up rows (the token embeddings of a GPU-offloaded model) runs on the
/// calling thread alone: two GET_ROWS nodes with four threads give the rows, in order, and
/// the pool still serves the next, larger graph.
#[test]
fn a_tiny_lookup_graph_runs_without_the_pool() {
    let mut ctx = Context::new();
    let t = ctx.new_tensor(DType::F32, &[4, 3]).unwrap();
    let idx = ctx.new_tensor(DType::I32, &[2]).unwrap();
    let r1 = ctx.get_rows(t, idx).unwrap();
    let r2 = ctx.get_rows(r1, idx).unwrap();
    let graph = Graph::build(&ctx, &[r2]);
    let (b, _g, _bufs) = place(&ctx, &graph);
    b.set_f32(&ctx, t, &(0..12).map(|v| v as f32).collect::<Vec<_>>()).unwrap();
    b.set_i32(&ctx, idx, &[1, 0]).unwrap();
    let mut cpu = CpuBackend::new(4);
    cpu.graph_compute(&ctx, &graph, &b).unwrap();
    assert_eq!(b.get_f32(&ctx, r1).unwrap(), [4., 5., 6., 7., 0., 1., 2., 3.]);
    assert_eq!(b.get_f32(&ctx, r2).unwrap(), [0., 1., 2., 3., 4., 5., 6., 7.]);
    let mut big = Context::new();
    let a = big.new_tensor(DType::F32, &[1 << 17]).unwrap();
    let s = big.scale(a, 2.0, 0.0).unwrap();
    let g2 = Graph::build(&big, &[s]);
    let (b2, _g2, _bufs2) = place(&big, &g2);
    b2.set_f32(&big, a, &vec![1.0; 1 << 17]).unwrap();
    cpu.graph_compute(&big, &g2, &b2).unwrap();
    assert!(b2.get_f32(&big, s).unwrap().iter().all(|&v| v == 2.0));
}

/// The backend keeps a graph's resolved nodes between calls only while the context, graph and
/// bindings are unchanged: data written in place is read afresh, and a tensor bound elsewhere
/// (the bindings' version moves) is read from its new place.
#[test]
fn resolved_nodes_follow_rebinding() {
    let mut ctx = Context::new();
    let a = ctx.new_tensor(DType::F32, &[4]).unwrap();
    let s = ctx.scale(a, 2.0, 0.0).unwrap();
    let graph = Graph::build(&ctx, &[s]);
    let (mut b, _g, _bufs) = place(&ctx, &graph);
    let mut cpu = CpuBackend::new(2);
    b.set_f32(&ctx, a, &[1., 2., 3., 4.]).unwrap();
    cpu.graph_compute(&ctx, &graph, &b).unwrap();
    assert_eq!(b.get_f32(&ctx, s).unwrap(), [2., 4., 6., 8.]);
    b.set_f32(&ctx, a, &[5., 6., 7., 8.]).unwrap();
    cpu.graph_compute(&ctx, &graph, &b).unwrap();
    assert_eq!(b.get_f32(&ctx, s).unwrap(), [10., 12., 14., 16.]);
    let other = host().alloc(16).unwrap();
    b.bind(&ctx, a, other, 0).unwrap();
    b.set_f32(&ctx, a, &[1., 1., 1., 1.]).unwrap();
    cpu.graph_compute(&ctx, &graph, &b).unwrap();
    assert_eq!(b.get_f32(&ctx, s).unwrap(), [2., 2., 2., 2.]);
}
