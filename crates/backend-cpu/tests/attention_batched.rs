//! `Backend::set_prefer_batched` on the CPU: a batch of fewer than 64 query rows (speculative
//! decoding's verification) takes the tiled flash attention, so each row gets the bits that
//! llama.cpp's tiled algorithm gives it in a batch of 64+ rows, not the row-at-a-time
//! kernel's; batch-invariant mode overrides the hint.

use std::sync::Arc;
use tessera_alloc::alloc_tensors;
use tessera_backend::{Backend, Bindings, BufferType, HostBufferType};
use tessera_backend_cpu::{CpuBackend, SimdLevel};
use tessera_tensor::graph::{Context, Graph, TensorId};
use tessera_tensor::DType;

const D: usize = 64;
const N_KV: usize = 300;
const N_HEAD: usize = 14;
const N_HEAD_KV: usize = 2;

/// Deterministic values in about ±0.5.
fn values(n: usize, seed: usize) -> Vec<f32> {
    (0..n).map(|i| (((i * 7919 + seed * 104_729) % 10_007) as f32 / 10_007.0 - 0.5) * 1.7).collect()
}

fn f16_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|&x| half::f16::from_f32(x).to_le_bytes()).collect()
}

/// The attention of the first `n_q` query rows of one fixed problem (GQA 14 over 2 KV heads,
/// a causal mask over the last cells, so whole KV tiles are masked for the first rows): its
/// output `[dv, heads, rows]` as f32.
fn attend(n_q: usize, threads: usize, level: SimdLevel, prefer: bool, invariant: bool) -> Vec<f32> {
    let mut ctx = Context::new();
    let q = ctx.new_tensor(DType::F32, &[D, n_q, N_HEAD]).unwrap();
    let k = ctx.new_tensor(DType::F16, &[D, N_KV, N_HEAD_KV]).unwrap();
    let v = ctx.new_tensor(DType::F16, &[D, N_KV, N_HEAD_KV]).unwrap();
    let mask = ctx.new_tensor(DType::F16, &[N_KV, n_q]).unwrap();
    let out = ctx.flash_attn_ext(q, k, v, Some(mask), 0.125, 0.0, 0.0).unwrap();
    let graph = Graph::build(&ctx, &[out]);
    let host: Arc<dyn BufferType> = Arc::new(HostBufferType);
    let mut b = Bindings::new();
    let ids: Vec<TensorId> = ctx.ids().collect();
    let _bufs = alloc_tensors(&host, &ctx, ids, &mut b).unwrap();
    // Query row i of head h is the same in every batch size (rows are dim 1).
    let qv: Vec<f32> = (0..N_HEAD)
        .flat_map(|h| (0..n_q).flat_map(move |i| values(D, 1000 + h * 100 + i)))
        .collect();
    b.set_f32(&ctx, q, &qv).unwrap();
    b.set(&ctx, k, &f16_bytes(&values(D * N_KV * N_HEAD_KV, 1))).unwrap();
    b.set(&ctx, v, &f16_bytes(&values(D * N_KV * N_HEAD_KV, 2))).unwrap();
    // Row i sees cells 0..=200 + i (the rest of the cache belongs to later tokens).
    let m: Vec<f32> = (0..n_q)
        .flat_map(|i| (0..N_KV).map(move |c| if c <= 200 + i { 0.0 } else { f32::NEG_INFINITY }))
        .collect();
    b.set(&ctx, mask, &f16_bytes(&m)).unwrap();
    let mut cpu = CpuBackend::new(threads);
    cpu.set_simd_level(level);
    cpu.set_batch_invariant(invariant).unwrap();
    cpu.set_prefer_batched(prefer).unwrap();
    cpu.graph_compute(&ctx, &graph, &b).unwrap();
    b.get_f32(&ctx, out).unwrap()
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

#[test]
fn preferred_batched_rows_get_the_tiled_algorithms_bits() {
    const N: usize = 49;
    let row = D * N_HEAD;
    for level in SimdLevel::available() {
        // 70 rows: llama.cpp's rule takes the tiled algorithm (64-row query tiles).
        let tiled = attend(70, 2, level, false, false);
        for threads in [1, 2, 3] {
            let got = attend(N, threads, level, true, false);
            assert!(same_bits(&got, &tiled[..N * row]), "{level}/t{threads}: not the tiled bits");
        }
        // Without the hint, and with batch-invariant arithmetic, the row-at-a-time kernel:
        // other bits (which is what makes the check above mean something).
        let one_row = attend(N, 2, level, false, false);
        assert!(!same_bits(&one_row, &tiled[..N * row]), "{level}: the same bits either way");
        let invariant = attend(N, 2, level, true, true);
        assert!(same_bits(&invariant, &one_row), "{level}: batch-invariant mode took the hint");
        // Two rows are enough to take it.
        let two = attend(2, 2, level, true, false);
        assert!(same_bits(&two, &tiled[..2 * row]), "{level}: two rows");
    }
}
