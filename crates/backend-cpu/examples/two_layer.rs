//! Seed 002's graph: two layers of `mul_mat` + `add`, weights placed once in their own buffer
//! and the intermediates placed by the graph allocator, computed on the CPU backend.
//!
//! `cargo run -p tessera-backend-cpu --example two_layer`

use std::sync::Arc;
use tessera_alloc::{alloc_tensors, GraphAllocator};
use tessera_backend::{Backend, Bindings, BufferType, HostBufferType};
use tessera_backend_cpu::CpuBackend;
use tessera_tensor::graph::{Context, Graph};
use tessera_tensor::DType;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (n_in, n_hidden, n_out, n_tokens) = (8, 16, 4, 3);
    let mut ctx = Context::new();
    // Weights (leafs) and the input.
    let w0 = ctx.new_tensor(DType::F32, &[n_in, n_hidden])?;
    let b0 = ctx.new_tensor(DType::F32, &[n_hidden])?;
    let w1 = ctx.new_tensor(DType::F32, &[n_hidden, n_out])?;
    let b1 = ctx.new_tensor(DType::F32, &[n_out])?;
    let inp = ctx.new_tensor(DType::F32, &[n_in, n_tokens])?;
    ctx.set_input(inp);
    // cur = w1 · (w0 · inp + b0) + b1
    let cur = ctx.mul_mat(w0, inp)?;
    let cur = ctx.add(cur, b0)?;
    let cur = ctx.mul_mat(w1, cur)?;
    let out = ctx.add(cur, b1)?;
    ctx.set_output(out);
    let graph = Graph::build(&ctx, &[out]);

    let buft: Arc<dyn BufferType> = Arc::new(HostBufferType);
    let mut bindings = Bindings::new();
    let _weights = alloc_tensors(&buft, &ctx, [w0, b0, w1, b1, inp], &mut bindings)?;
    let fill = |n: usize, k: f32| (0..n).map(|i| ((i as f32) * k).sin()).collect::<Vec<_>>();
    bindings.set_f32(&ctx, w0, &fill(n_in * n_hidden, 0.37))?;
    bindings.set_f32(&ctx, b0, &fill(n_hidden, 1.1))?;
    bindings.set_f32(&ctx, w1, &fill(n_hidden * n_out, 0.53))?;
    bindings.set_f32(&ctx, b1, &fill(n_out, 0.9))?;
    bindings.set_f32(&ctx, inp, &fill(n_in * n_tokens, 0.21))?;

    let mut galloc = GraphAllocator::new(buft);
    galloc.alloc_graph(&ctx, &graph, &mut bindings)?;
    println!(
        "graph: {} nodes, {} leafs; intermediates need {} bytes",
        graph.nodes().len(),
        graph.leafs().len(),
        galloc.peak_bytes()
    );

    let mut backend = CpuBackend::new(2);
    backend.graph_compute(&ctx, &graph, &bindings)?;
    let y = bindings.get_f32(&ctx, out)?;
    for (t, row) in y.chunks(n_out).enumerate() {
        println!("token {t}: {row:?}");
    }
    Ok(())
}
