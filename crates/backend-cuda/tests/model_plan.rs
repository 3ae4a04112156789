//! The CUDA plan over a real model's graph, without a GPU: a synthetic Llama (random Q4_0
//! weights, Llama 3's layout) decodes a token on the CPU through the llama crate, and its
//! decode step's graph is planned for an sm_90 device as the executor plans it. Every block
//! must take the decode paths and windows the kernels were written for: the norms, gate/up
//! with their GLU and the attention's chunk merge writing their products' Q8_1 blocks, Q/K/V
//! as one launch, the attention inputs as one launch. So a change in the llama graphs' order or in a window's conditions that silently
//! drops a fusion fails here, not only as a slower token on a GPU.

use std::collections::BTreeMap;
use tessera_backend_cuda::plan::{
    fused_windows, plan_node, q8_writers, share_q8_1, Capability, FusionKind, Kernel, MatmulPath,
    NodePlan, Paths,
};
use tessera_llama::{Batch, ContextParams, LlamaContext, Model};
use tessera_tensor::graph::{Context, Op, TensorId};

/// A synthetic `arch` model (random Q4_0 weights, 3 blocks of 256, 4/2 heads) decodes a token
/// on the CPU; `check` gets its decode step's graph planned for sm_90.
fn with_decode_step(
    arch: &str,
    vocab: &str,
    check: impl FnOnce(&Context, &[(TensorId, NodePlan)], usize),
) {
    let vocab = tessera_models::fixtures::vocab(vocab).unwrap();
    let v = tessera_gguf::GgufFile::open(&vocab).expect("vocabulary fixture");
    let n_layer = 3;
    let spec = tessera_llama::synth::SynthSpec {
        n_layer,
        ..tessera_llama::synth::SynthSpec::small(arch, tessera_tensor::DType::Q4_0)
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("synth-{arch}-q4_0.gguf"));
    tessera_llama::synth::write_random_model(&spec, v.metadata(), &path).unwrap();
    let model = Model::load(&path, tessera_backend_cpu::CpuDevice::shared()).unwrap();
    let params = ContextParams { n_ctx: 512, n_threads: 2, flash_attn: true, ..Default::default() };
    let mut ctx = LlamaContext::new(&model, params).unwrap();
    ctx.decode(&Batch::from_tokens(&[1, 2, 3], 0, 0)).unwrap();
    ctx.decode(&Batch::from_tokens(&[4], 3, 0)).unwrap();
    let (gctx, schedule) = ctx.last_schedule().expect("a decoded step");
    let cap = Capability { arch: 90, cublas: true };
    let plans: Vec<(TensorId, NodePlan)> = schedule
        .splits()
        .iter()
        .flat_map(|s| s.graph.nodes().to_vec())
        .map(|n| (n, plan_node(gctx, n, cap, Paths::all()).expect("a node CUDA runs")))
        .collect();
    check(gctx, &plans, n_layer);
}

/// Qwen2's Q, K and V have biases: the group takes the ADDs too (the llama builder pins them
/// after the products), so the attention inputs are one launch as well.
#[test]
fn a_qwen2_decode_step_groups_its_biased_products() {
    with_decode_step("qwen2", "ggml-vocab-qwen2.gguf", |gctx, plans, n_layer| {
        let windows = fused_windows(gctx, plans);
        let groups: Vec<usize> = windows
            .iter()
            .filter(|w| w.kind == FusionKind::ProductGroup)
            .map(|w| w.nodes.len())
            .collect();
        assert_eq!(groups, vec![6; n_layer], "Q/K/V groups with their bias ADDs");
        let inputs = windows.iter().filter(|w| w.kind == FusionKind::AttnInputs).count();
        assert_eq!(inputs, n_layer, "attention inputs");
    });
}

/// Qwen3's Q and K norms sit between the products and the RoPEs: the group, and K's RoPE into
/// the cache (its own window), in every block.
#[test]
fn a_qwen3_decode_step_groups_its_products_and_ropes_k_into_the_cache() {
    with_decode_step("qwen3", "ggml-vocab-qwen2.gguf", |gctx, plans, n_layer| {
        let windows = fused_windows(gctx, plans);
        let count = |k: FusionKind| windows.iter().filter(|w| w.kind == k).count();
        assert_eq!(count(FusionKind::ProductGroup), n_layer, "Q/K/V groups");
        assert_eq!(count(FusionKind::RopeSetRows), n_layer, "K's RoPE into the cache");
        // The Q and K norms (a row a head) besides each block's two.
        assert!(count(FusionKind::RmsNormMul) >= 2 * n_layer, "Q/K norms");
    });
}

#[test]
fn every_block_of_a_llama_decode_step_takes_the_fused_paths() {
    with_decode_step("llama", "ggml-vocab-llama-bpe.gguf", |gctx, plans, n_layer| {
        llama_step(gctx, plans, n_layer)
    });
}

fn llama_step(gctx: &Context, plans: &[(TensorId, NodePlan)], n_layer: usize) {
    let products = plans.iter().filter(|(_, p)| matches!(p.kernel, Kernel::MulMat(_))).count();
    let mmvq = plans.iter().filter(|(_, p)| p.kernel == Kernel::MulMat(MatmulPath::Mmvq)).count();
    assert_eq!(mmvq, products, "every product of a decoded token on the int8 path");

    let windows = fused_windows(gctx, plans);
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for w in &windows {
        *kinds.entry(format!("{:?}", w.kind)).or_default() += 1;
    }
    let count = |k: FusionKind| kinds.get(&format!("{k:?}")).copied().unwrap_or(0);
    assert_eq!(count(FusionKind::ProductGroup), n_layer, "Q/K/V groups: {kinds:?}");
    assert_eq!(count(FusionKind::AttnInputs), n_layer, "attention inputs: {kinds:?}");
    assert_eq!(count(FusionKind::GateUpGlu), n_layer, "gate/up: {kinds:?}");
    // Each block's two norms and the output norm; all but the first with the residual ADD.
    let norms = count(FusionKind::AddRmsNormMul) + count(FusionKind::RmsNormMul);
    assert_eq!(norms, 2 * n_layer + 1, "norms: {kinds:?}");
    assert_eq!(count(FusionKind::AddRmsNormMul), 2 * n_layer, "residual norms: {kinds:?}");

    // The norms before Q/K/V and gate/up write their Q8_1 blocks (the output norm's reader,
    // the LM head on a row of the last token, too), each gate/up kernel its GLU output's (the
    // down projection's input), each attention's chunk merge the output projection's: no
    // quantization is left.
    let (mut q8, _) = share_q8_1(gctx, plans);
    let writers = q8_writers(gctx, plans, &windows, &mut q8);
    let kind_of = |n: &TensorId| windows.iter().find(|w| w.nodes[0] == *n).map(|w| w.kind);
    let attention = |n: &TensorId| matches!(gctx.get(*n).op, Op::FlashAttnExt { .. });
    let norms = |n: &&TensorId| {
        matches!(kind_of(n), Some(FusionKind::RmsNormMul | FusionKind::AddRmsNormMul))
    };
    assert_eq!(writers.keys().filter(norms).count(), 2 * n_layer + 1, "norms writing Q8_1");
    let glus = writers.keys().filter(|n| kind_of(n) == Some(FusionKind::GateUpGlu)).count();
    assert_eq!(glus, n_layer, "gate/up kernels writing Q8_1 blocks");
    let merges = writers.keys().filter(|n| attention(n)).count();
    assert_eq!(merges, n_layer, "attention merges writing Q8_1 blocks");
    assert_eq!(writers.len(), 4 * n_layer + 1, "{writers:?}");
    let quantizing = q8.iter().flatten().filter(|i| i.quantize).count();
    assert_eq!(quantizing, 0, "quantizations left");

    // Launches of a decoded token: kernels of unfused nodes, one a window, the quantizations.
    let skipped: usize = windows.iter().map(|w| w.nodes.len() - 1).sum();
    let kernels = plans.iter().filter(|(_, p)| p.kernel != Kernel::Nothing).count();
    let launches = kernels - skipped + quantizing;
    // A block: norm, Q/K/V, attention inputs, attention and its merge, output product, norm,
    // gate/up, down product (9; llama.cpp's CUDA backend about 20); outside: the embedding
    // lookup and the LM head (the output norm is the last block's residual window).
    let merges_launched =
        plans.iter().filter(|(_, p)| matches!(p.kernel, Kernel::FlashAttn(a) if a.splits() > 1));
    let launches = launches + merges_launched.count();
    assert!(launches <= 9 * n_layer + 2, "{launches} launches for {n_layer} blocks");
}
