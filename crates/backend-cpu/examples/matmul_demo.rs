//! Seed 001's demo: a 4×2 matrix A times a 3×2 matrix B on the CPU backend.
//!
//! ggml's `mul_mat(a, b)` computes `b · aᵀ` in its own layout: `result[j][i] = dot(row i of A,
//! row j of B)`, a 4 × 3 tensor (ne = [4, 3]) that prints as the transpose of `A · Bᵀ`.
//!
//! `cargo run -p tessera-backend-cpu --example matmul_demo`

use std::sync::Arc;
use tessera_backend::{Backend, Bindings, BufferType, HostBufferType};
use tessera_backend_cpu::CpuBackend;
use tessera_tensor::graph::{Context, Graph};
use tessera_tensor::DType;

/// Computes the demo and returns the result's shape and values (row-major over `ne[1]`).
fn run() -> Result<([usize; 4], Vec<f32>), Box<dyn std::error::Error>> {
    let matrix_a: [f32; 8] = [2., 8., 5., 1., 4., 2., 8., 6.];
    let matrix_b: [f32; 6] = [10., 5., 9., 9., 5., 4.];

    let mut ctx = Context::new();
    let a = ctx.new_tensor(DType::F32, &[2, 4])?; // cols_A, rows_A
    let b = ctx.new_tensor(DType::F32, &[2, 3])?; // cols_B, rows_B
    let result = ctx.mul_mat(a, b)?;
    let graph = Graph::build(&ctx, &[result]);

    // One host buffer for the three tensors, placed by hand (64-byte aligned offsets).
    let buffer = HostBufferType.alloc(3 * 64)?;
    let buffer: Arc<dyn tessera_backend::Buffer> = buffer;
    let mut bindings = Bindings::new();
    bindings.bind(&ctx, a, buffer.clone(), 0)?;
    bindings.bind(&ctx, b, buffer.clone(), 64)?;
    bindings.bind(&ctx, result, buffer, 128)?;
    bindings.set_f32(&ctx, a, &matrix_a)?;
    bindings.set_f32(&ctx, b, &matrix_b)?;

    let mut backend = CpuBackend::new(1);
    backend.graph_compute(&ctx, &graph, &bindings)?;
    Ok((ctx.get(result).ne, bindings.get_f32(&ctx, result)?))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (ne, data) = run()?;
    println!("mul mat ({} x {}) (transposed result):", ne[0], ne[1]);
    let rows: Vec<String> = data
        .chunks(ne[0])
        .map(|r| r.iter().map(|v| format!(" {v:.2}")).collect::<String>())
        .collect();
    println!("[{} ]", rows.join("\n"));
    Ok(())
}
