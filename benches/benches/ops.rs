//! CPU op speed through the public backend API (a one-op graph, allocated and computed as a
//! model would): RMS_NORM, ROPE, SOFT_MAX and FLASH_ATTN_EXT at sizes a small model's prompt
//! (512 tokens) and decode step (1 token) produce, on 1 and 2 threads.
//! `cargo bench -p tessera-benches --bench ops`.
//!
//! Throughput is in elements of the op's output, except flash attention: KV cells visited
//! (n_q · n_head · n_kv), so decode and prompt figures compare.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::sync::Arc;
use std::time::Duration;
use tessera_alloc::alloc_tensors;
use tessera_backend::{Backend, Bindings, Buffer, BufferType, HostBufferType};
use tessera_backend_cpu::CpuBackend;
use tessera_benches::random_f32;
use tessera_tensor::graph::{Context, Graph, RopeMode, RopeParams, TensorId};
use tessera_tensor::{quant, DType};

/// A built, allocated one-output graph with random inputs.
struct Case {
    ctx: Context,
    graph: Graph,
    bindings: Bindings,
    _buffers: Vec<Arc<dyn Buffer>>,
}

impl Case {
    fn new(ctx: Context, out: TensorId) -> Case {
        let graph = Graph::build(&ctx, &[out]);
        let mut bindings = Bindings::new();
        let buft: Arc<dyn BufferType> = Arc::new(HostBufferType);
        let ids: Vec<TensorId> = ctx.ids().collect();
        let buffers = alloc_tensors(&buft, &ctx, ids, &mut bindings).expect("alloc");
        for (k, &leaf) in graph.leafs().iter().enumerate() {
            let d = ctx.get(leaf);
            let n = d.n_elements();
            let bytes = match d.dtype {
                DType::I32 => (0..n as i32).flat_map(|i| i.to_le_bytes()).collect(),
                t => quant::quantize(t, &random_f32(n, k as u64 + 1)).expect("quantize"),
            };
            bindings.set(&ctx, leaf, &bytes).expect("set");
        }
        Case { ctx, graph, bindings, _buffers: buffers }
    }

    fn run(&self, cpu: &mut CpuBackend) {
        cpu.graph_compute(&self.ctx, &self.graph, &self.bindings).expect("compute");
    }
}

fn rms_norm(n_embd: usize, n_tok: usize) -> Case {
    let mut ctx = Context::new();
    let x = ctx.new_tensor(DType::F32, &[n_embd, n_tok]).unwrap();
    let y = ctx.rms_norm(x, 1e-6).unwrap();
    Case::new(ctx, y)
}

fn rope(head_dim: usize, n_head: usize, n_tok: usize) -> Case {
    let mut ctx = Context::new();
    let x = ctx.new_tensor(DType::F32, &[head_dim, n_head, n_tok]).unwrap();
    let pos = ctx.new_tensor(DType::I32, &[n_tok]).unwrap();
    let y = ctx.rope(x, pos, None, RopeParams::new(head_dim, RopeMode::Neox, 10000.0)).unwrap();
    Case::new(ctx, y)
}

fn soft_max(n_kv: usize, n_q: usize, n_head: usize) -> Case {
    let mut ctx = Context::new();
    let x = ctx.new_tensor(DType::F32, &[n_kv, n_q, n_head]).unwrap();
    let m = ctx.new_tensor(DType::F16, &[n_kv, n_q]).unwrap();
    let y = ctx.soft_max(x, Some(m), 0.125, 0.0).unwrap();
    Case::new(ctx, y)
}

fn flash_attn(d: usize, n_kv: usize, n_q: usize, n_head: usize, n_head_kv: usize) -> Case {
    let mut ctx = Context::new();
    let q = ctx.new_tensor(DType::F32, &[d, n_q, n_head]).unwrap();
    let k = ctx.new_tensor(DType::F16, &[d, n_kv, n_head_kv]).unwrap();
    let v = ctx.new_tensor(DType::F16, &[d, n_kv, n_head_kv]).unwrap();
    let m = ctx.new_tensor(DType::F16, &[n_kv, n_q.next_multiple_of(64)]).unwrap();
    let y = ctx.flash_attn_ext(q, k, v, Some(m), 0.125, 0.0, 0.0).unwrap();
    Case::new(ctx, y)
}

fn bench(c: &mut Criterion) {
    let mut cpus: Vec<(usize, CpuBackend)> =
        [1, 2].into_iter().map(|n| (n, CpuBackend::new(n))).collect();
    let cases: Vec<(&str, u64, Case)> = vec![
        ("rms_norm/576x512", 576 * 512, rms_norm(576, 512)),
        ("rms_norm/4096x1", 4096, rms_norm(4096, 1)),
        ("rope/64x9x512", 64 * 9 * 512, rope(64, 9, 512)),
        ("soft_max/512x512x9", 512 * 512 * 9, soft_max(512, 512, 9)),
        ("flash_attn/d64_kv512_q1_h9_kv3", 512 * 9, flash_attn(64, 512, 1, 9, 3)),
        ("flash_attn/d64_kv512_q512_h9_kv3", 512 * 512 * 9, flash_attn(64, 512, 512, 9, 3)),
    ];
    let mut g = c.benchmark_group("ops");
    g.warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(2));
    g.sample_size(20);
    for (name, elements, case) in &cases {
        g.throughput(Throughput::Elements(*elements));
        for (n, cpu) in cpus.iter_mut() {
            g.bench_function(format!("{name}/{n}t"), |b| b.iter(|| case.run(cpu)));
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
