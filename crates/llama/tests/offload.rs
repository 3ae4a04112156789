//! The three real models through the scheduler with layers on a second device (the simulated
//! one: CPU kernels, memory of its own): with `-ngl` 0, half and all, with a device that
//! refuses ops, and with `-ot`, the logits of a prompt batch and of every greedy decoding step
//! equal those of the CPU alone bit for bit, and so does the greedy text. The reference builds
//! every graph afresh; the offloaded runs reuse the decode steps' graphs (llama.cpp's graph
//! reuse), so the equality covers reuse too.
//!
//! Weights are compared in the file's layout (`--no-repack`): repacking is the CPU's own
//! layout and arithmetic, which a device never gets (llama.cpp repacks only what stays on the
//! CPU), so with repacking on an offloaded run mixes the two arithmetics and cannot equal
//! either bit for bit. `synthetic_q4_0_offloaded_gets_plain_bytes` checks that case: the
//! device's weights are the file's bytes, the CPU's are interleaved, the greedy text is the
//! CPU's.

use std::sync::Arc;
use tessera_backend::Device;
use tessera_backend_cpu::SimDevice;
use tessera_llama::{
    Batch, ContextParams, LlamaContext, LoadParams, Model, Offload, TensorOverride,
};

/// A prompt of 40+ tokens, so the prompt batch is large enough for `offload_op` (32 rows).
const PROMPT: &str = "The history of the printing press begins in the fifteenth century, when \
     Johannes Gutenberg combined movable metal type, oil-based ink and a wooden press adapted \
     from wine making. Within fifty years";

/// (last-prompt logits, logits of each greedy step, tokens, splits of the last step).
type Run = (Vec<u32>, Vec<Vec<u32>>, Vec<u32>, usize);

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn run(path: &std::path::Path, offload: Offload, flash_attn: bool, graph_reuse: bool) -> Run {
    run_with(path, offload, flash_attn, graph_reuse, false)
}

fn run_with(
    path: &std::path::Path,
    offload: Offload,
    flash_attn: bool,
    graph_reuse: bool,
    repack: bool,
) -> Run {
    let model = Model::load_with(
        path,
        &LoadParams {
            offload,
            repack,
            ..LoadParams::new(tessera_backend_cpu::CpuDevice::shared())
        },
    )
    .unwrap();
    let params = ContextParams {
        n_ctx: 256,
        n_threads: 2,
        flash_attn,
        graph_reuse,
        ..ContextParams::default()
    };
    let mut ctx = LlamaContext::new(&model, params).unwrap();
    let toks = model.vocab.tokenize(PROMPT, true, false);
    assert!(toks.len() >= 32, "{} prompt tokens", toks.len());
    ctx.decode(&Batch::from_tokens(&toks, 0, 0)).unwrap();
    let first = bits(ctx.logits_ith(toks.len() - 1).unwrap());
    let mut steps = Vec::new();
    let mut out = Vec::new();
    let mut last = first.clone();
    for i in 0..6 {
        let tok = last
            .iter()
            .map(|&b| f32::from_bits(b))
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap()
            .0 as u32;
        out.push(tok);
        ctx.decode(&Batch::from_tokens(&[tok], (toks.len() + i) as i32, 0)).unwrap();
        last = bits(ctx.logits_ith(0).unwrap());
        steps.push(last.clone());
    }
    // Decode steps 2..6 have the shape of step 1: their graphs are reused (or never).
    assert_eq!(ctx.n_graph_reused(), if graph_reuse { 5 } else { 0 });
    (first, steps, out, ctx.last_splits().0)
}

fn sim(n_gpu_layers: usize, device: SimDevice) -> Offload {
    Offload {
        devices: vec![Arc::new(device) as Arc<dyn Device>],
        n_gpu_layers,
        ..Offload::default()
    }
}

fn check(model: tessera_models::Model, flash_attn: bool) {
    let path = tessera_models::ensure(&model).unwrap();
    check_file(&path, model.file, flash_attn);
}

fn check_file(path: &std::path::Path, file: &str, flash_attn: bool) {
    let path = path.to_path_buf();
    // The reference: the CPU alone, every graph built afresh.
    let base = run(&path, Offload::default(), flash_attn, false);
    assert_eq!(base.3, 1, "the CPU alone runs one split");
    let n_layer =
        Model::load(&path, tessera_backend_cpu::CpuDevice::shared()).unwrap().hparams.n_layer;
    let cases: Vec<(String, Offload)> = vec![
        ("-ngl 0".into(), sim(0, SimDevice::new(0, 2))),
        ("-ngl half".into(), sim(n_layer / 2, SimDevice::new(0, 2))),
        ("-ngl all".into(), sim(99, SimDevice::new(0, 2))),
        (
            "-ngl all, device refuses ROPE and GET_ROWS".into(),
            sim(99, SimDevice::new(0, 2).refusing_ops(&["ROPE", "GET_ROWS"])),
        ),
        ("-ngl all -ot ffn_down=CPU".into(), {
            let mut o = sim(99, SimDevice::new(0, 2));
            o.overrides.push(TensorOverride::parse("ffn_down=CPU").unwrap());
            o
        }),
    ];
    for (what, offload) in cases {
        let got = run(&path, offload, flash_attn, true);
        assert_eq!(got.2, base.2, "{file}: {what}: greedy tokens");
        assert!(got.0 == base.0, "{file}: {what}: last-prompt logits differ");
        for (i, (a, b)) in got.1.iter().zip(&base.1).enumerate() {
            assert!(a == b, "{file}: {what}: logits of step {i} differ");
        }
        if what == "-ngl all" {
            // The embedding lookup on the CPU (the input layer stays there), everything after
            // it on the device: two splits per decode step.
            assert_eq!(got.3, 2, "{file}: {what}");
        }
        if what != "-ngl 0" {
            assert!(got.3 > 1, "{file}: {what}: {} split(s)", got.3);
        }
    }
}

#[test]
fn smollm2_offloaded_equals_cpu() {
    check(tessera_models::SMOLLM2, true);
}

#[test]
fn qwen25_offloaded_equals_cpu() {
    check(tessera_models::QWEN25_CODER, true);
}

#[test]
fn qwen25_offloaded_equals_cpu_softmax_path() {
    check(tessera_models::QWEN25_CODER, false);
}

#[test]
fn gemma3_offloaded_equals_cpu() {
    check(tessera_models::GEMMA3, true);
}

/// A Q4_0 llama with tied embeddings (random weights, the project's writer), half its layers
/// offloaded with repacking on: the weights on the device hold the file's plain bytes, those the
/// CPU keeps are interleaved (eight rows), the tied output on the device is a plain copy, and
/// the greedy tokens equal the CPU alone's. With repacking off, offloaded or not, the bits are
/// the CPU alone's.
#[test]
fn synthetic_q4_0_offloaded_gets_plain_bytes() {
    let vocab = tessera_models::fixtures::vocab("ggml-vocab-llama-bpe.gguf").unwrap();
    let v = tessera_gguf::GgufFile::open(&vocab).expect("vocabulary fixture");
    let spec = tessera_llama::synth::SynthSpec {
        seed: 11,
        ..tessera_llama::synth::SynthSpec::small("llama", tessera_tensor::DType::Q4_0)
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("synth-llama-q4_0.gguf");
    tessera_llama::synth::write_random_model(&spec, v.metadata(), &path).unwrap();
    let file = tessera_gguf::GgufFile::open(&path).unwrap();
    assert!(!file.tensors().iter().any(|t| t.name == "output.weight"), "tied embeddings");
    check_file(&path, "synth-llama-q4_0", true);
    let level = tessera_backend_cpu::SimdLevel::from_env();
    if !tessera_backend_cpu::repack_applies(tessera_tensor::DType::Q4_0, 256, level) {
        return; // no repacking at this level (scalar): nothing interleaved to check
    }
    let in_file = |name: &str| {
        let t = file.tensor(name).unwrap();
        file.tensor_data(t).to_vec()
    };
    // (bytes as stored, buffer type) of each weight of a load with `-ngl ngl`, repacking on;
    // read back as a tensor (`Bindings::get`), each is the file's bytes again.
    let load = |ngl: usize| {
        let offload = sim(ngl, SimDevice::new(0, 2));
        let model = Model::load_with(
            &path,
            &LoadParams {
                offload,
                repack: true,
                ..LoadParams::new(tessera_backend_cpu::CpuDevice::shared())
            },
        )
        .unwrap();
        let w = &model.weights;
        let bytes_of = |name: &str| {
            let id = w.id(name).unwrap_or_else(|| panic!("{name}"));
            let s = w.bindings.storage(&w.ctx, id).unwrap();
            let mut out = vec![0u8; w.ctx.get(id).n_bytes()];
            s.buffer.read(s.offset, &mut out).unwrap();
            let plain = if name == "output.weight" { "token_embd.weight" } else { name };
            assert!(w.bindings.get(&w.ctx, id).unwrap() == in_file(plain), "{name} read back");
            (out, s.buffer.name().to_string())
        };
        let names = ["blk.0.attn_q.weight", "blk.1.attn_q.weight", "output.weight"];
        names.map(bytes_of)
    };
    // -ngl 1: blk.1 on the device, blk.0 and the output head on the CPU.
    let [b0, b1, out] = load(1);
    let repack = tessera_backend_cpu::REPACK_NAME;
    assert!(b1.1 == "SIM0" && b1.0 == in_file("blk.1.attn_q.weight"), "the device: plain bytes");
    assert!(b0.1 == repack && b0.0 != in_file("blk.0.attn_q.weight"), "the CPU's: interleaved");
    assert!(out.1 == repack && out.0 != in_file("token_embd.weight"), "the CPU's head too");
    // -ngl 3 (2 layers + output): everything on the device, in the file's layout.
    let [b0, b1, out] = load(3);
    assert!(b0.1 == "SIM0" && b0.0 == in_file("blk.0.attn_q.weight"));
    assert!(b1.1 == "SIM0" && b1.0 == in_file("blk.1.attn_q.weight"));
    assert!(out.1 == "SIM0" && out.0 == in_file("token_embd.weight"), "the device's head: a copy");
    let offload = sim(1, SimDevice::new(0, 2));
    let base = run_with(&path, Offload::default(), true, false, true);
    let got = run_with(&path, offload, true, true, true);
    assert_eq!(got.2, base.2, "greedy tokens, half offloaded with repacking on");
}

/// A random Qwen3-MoE (F16: the file's layout everywhere) through the scheduler: every offload
/// case of the real models, MUL_MAT_ID on the device included, and `--cpu-moe` /
/// `--n-cpu-moe 2` with everything else offloaded: those experts stay in host memory, the rest
/// go to the device, and the logits are the CPU alone's bit for bit.
#[test]
fn synthetic_qwen3moe_offloaded_equals_cpu() {
    let (stem, spec, vocab) = tessera_llama::synth::moe_models()
        .into_iter()
        .find(|m| m.0 == "synth-qwen3moe-f16")
        .unwrap();
    let v = tessera_gguf::GgufFile::open(tessera_models::fixtures::vocab(vocab).unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{stem}.gguf"));
    tessera_llama::synth::write_random_model(&spec, v.metadata(), &path).unwrap();
    check_file(&path, stem, true);
    let base = run(&path, Offload::default(), true, false);
    for (what, overrides) in [
        ("--cpu-moe", vec![TensorOverride::cpu_moe()]),
        ("--n-cpu-moe 2", TensorOverride::n_cpu_moe(2)),
    ] {
        let offload = || Offload { overrides: overrides.clone(), ..sim(99, SimDevice::new(0, 2)) };
        let model = Model::load_with(
            &path,
            &LoadParams {
                offload: offload(),
                ..LoadParams::new(tessera_backend_cpu::CpuDevice::shared())
            },
        )
        .unwrap();
        let w = &model.weights;
        for il in 0..spec.n_layer {
            for t in ["ffn_up_exps", "ffn_gate_exps", "ffn_down_exps", "attn_q"] {
                let name = format!("blk.{il}.{t}.weight");
                let s = w.bindings.storage(&w.ctx, w.id(&name).unwrap()).unwrap();
                let on_cpu = t.ends_with("exps") && (what == "--cpu-moe" || il < 2);
                assert_eq!(s.buffer.is_host(), on_cpu, "{what}: {name}");
            }
        }
        let got = run(&path, offload(), true, true);
        assert_eq!(got.2, base.2, "{what}: greedy tokens");
        assert!(got.0 == base.0, "{what}: last-prompt logits differ");
        assert!(got.1 == base.1, "{what}: decode logits differ");
    }
}
