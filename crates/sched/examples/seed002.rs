//! Seed 002's example: a two-layer graph whose first layer's weights are in host memory and
//! whose second layer's are on a second device (here the simulated one), scheduled and run.
//! Prints the splits (ggml's `print_assignments`), the result beside the CPU-only result, and
//! the graph coloured by backend with `--dot`.
//!
//! `cargo run -p tessera-sched --example seed002 [-- --dot]`

use std::sync::Arc;
use tessera_backend::{Backend, Bindings, BufferType, BufferUsage, HostBufferType};
use tessera_backend_cpu::sim::SimBufferType;
use tessera_backend_cpu::{CpuBackend, SimDevice};
use tessera_sched::{SchedParams, Scheduler};
use tessera_tensor::graph::{Context, Graph};
use tessera_tensor::DType;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dot = std::env::args().any(|a| a == "--dot");
    let mut results = Vec::new();
    for with_device in [false, true] {
        let mut ctx = Context::new();
        let inp = ctx.new_tensor(DType::F32, &[4, 2])?;
        ctx.set_name(inp, "inp");
        ctx.set_input(inp);
        let mut w = Vec::new();
        for (i, ne) in [[4usize, 4], [4, 1], [4, 4], [4, 1]].iter().enumerate() {
            let t = ctx.new_tensor(DType::F32, ne)?;
            ctx.set_name(t, &format!("weight_{i}"));
            w.push(t);
        }
        let mm0 = ctx.mul_mat(w[0], inp)?;
        ctx.set_name(mm0, "mul_mat_0");
        let add1 = ctx.add(mm0, w[1])?;
        ctx.set_name(add1, "add_1");
        let mm2 = ctx.mul_mat(w[2], add1)?;
        ctx.set_name(mm2, "mul_mat_2");
        let out = ctx.add(mm2, w[3])?;
        ctx.set_name(out, "add_3");
        ctx.set_output(out);

        // Weights 0 and 1 in host memory, 2 and 3 on the device (llama.cpp's -ngl for layer 2).
        let mut bindings = Bindings::new();
        for (i, &t) in w.iter().enumerate() {
            let buft: Arc<dyn BufferType> = if with_device && i >= 2 {
                Arc::new(SimBufferType::new("SIM0"))
            } else {
                Arc::new(HostBufferType)
            };
            let buf = buft.alloc(ctx.get(t).n_bytes())?;
            buf.set_usage(BufferUsage::Weights);
            bindings.bind(&ctx, t, buf, 0)?;
            let n = ctx.get(t).n_elements();
            let v: Vec<f32> = (0..n).map(|k| (k as f32 + i as f32) * 0.25 - 1.0).collect();
            bindings.set_f32(&ctx, t, &v)?;
        }
        let mut backends: Vec<Box<dyn Backend>> = Vec::new();
        if with_device {
            backends.push(Box::new(SimDevice::new(0, 1).backend()?));
        }
        backends.push(Box::new(CpuBackend::new(1)));
        let mut sched = Scheduler::new(backends, SchedParams::default())?;
        let graph = Graph::build(&ctx, &[out]);
        let schedule = sched.alloc_graph(&mut ctx, &graph, &mut bindings)?;
        bindings.set_f32(&ctx, inp, &[1.0, 2.0, 3.0, 4.0, -1.0, 0.5, 0.25, 2.0])?;
        sched.compute(&ctx, &schedule, &bindings)?;
        let values = bindings.get_f32(&ctx, out)?;
        println!(
            "{}: {} split(s), {} copy(ies)\n{}",
            if with_device { "SIM0 + CPU" } else { "CPU alone" },
            schedule.n_splits(),
            schedule.n_copies(),
            schedule.describe(&ctx)
        );
        if dot && with_device {
            println!("{}", schedule.to_dot(&ctx));
        }
        results.push(values);
    }
    println!("add_3, CPU alone:  {:?}", results[0]);
    println!("add_3, SIM0 + CPU: {:?}", results[1]);
    let same = results[0].iter().zip(&results[1]).all(|(a, b)| a.to_bits() == b.to_bits());
    println!("bit for bit the same: {same}");
    Ok(())
}
