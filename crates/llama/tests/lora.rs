//! LoRA adapters against llama.cpp's (tests/fixtures/lora/LEVEL.json, made by
//! crates/llama/tools/llama_cpp_lora.py with llama.cpp b11312 built with the level's explicit
//! flags): two random adapters on SmolLM2 (F16 rank 8 with alpha on every attention projection,
//! F32 rank 4 without alpha on the even layers' FFN), written here byte for byte as the tool
//! writes them, applied with scales 0.75 and 0.5. At every position of a text evaluated as one
//! batch, llama.cpp's top-5 log-probabilities must be met within `TOL` (bit-exact logits; the
//! float64 log-softmax's printout is all `TOL` leaves room for), and a greedy continuation must
//! give its tokens. The adapters must visibly change the answer, a scale of 0 must give the
//! model's own logits, and adapters that do not fit the model are named errors.

mod common;

use common::top::{argmax, compare_top, level_fixture, LEAD, TOL};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tessera_gguf::GgufWriter;
use tessera_llama::{Batch, ContextParams, DType, LlamaContext, LlamaError, LoraAdapter, Model};

const MASK_SEED: u64 = 0xcbf2_9ce4_8422_2325;

/// The tool's `values()`: element `i` of tensor `name`, in [-amp, amp].
fn values(name: &str, n: usize, amp: f64) -> Vec<f32> {
    let seed = name.bytes().fold(MASK_SEED, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));
    (0..n as u64)
        .map(|i| {
            let mut x = (i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(seed);
            x ^= x >> 31;
            x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
            x ^= x >> 29;
            ((((x % 2001) as f64) - 1000.0) * amp / 1000.0) as f32
        })
        .collect()
}

/// One adapter as the tool writes it.
struct Spec {
    name: &'static str,
    f16: bool,
    rank: usize,
    alpha: Option<f32>,
    scale: f32,
    tensors: fn(usize) -> &'static [&'static str],
}

const SPECS: [Spec; 2] = [
    Spec {
        name: "attn",
        f16: true,
        rank: 8,
        alpha: Some(16.0),
        scale: 0.75,
        tensors: |_| &["attn_q", "attn_k", "attn_v", "attn_output"],
    },
    Spec {
        name: "ffn",
        f16: false,
        rank: 4,
        alpha: None,
        scale: 0.5,
        tensors: |il| if il % 2 == 0 { &["ffn_up", "ffn_gate", "ffn_down"] } else { &[] },
    },
];

/// Writes `spec`'s adapter for `model` into `dir`; `tweak` may change each pair's (n_in,
/// n_out, rank) to make a wrong one.
fn write_adapter(
    dir: &Path,
    model: &Model,
    spec: &Spec,
    amp: f64,
    tweak: impl Fn(usize, usize, usize) -> (usize, usize, usize),
) -> PathBuf {
    let mut w = GgufWriter::new();
    w.add("general.architecture", "llama").unwrap();
    w.add("general.type", "adapter").unwrap();
    w.add("adapter.type", "lora").unwrap();
    if let Some(a) = spec.alpha {
        w.add("adapter.lora.alpha", a).unwrap();
    }
    for il in 0..model.hparams.n_layer {
        for t in (spec.tensors)(il) {
            let base = format!("blk.{il}.{t}.weight");
            let ne = model.weights.ctx.get(model.weights.id(&base).unwrap()).ne;
            let (n_in, n_out, rank) = tweak(ne[0], ne[1], spec.rank);
            for (half, ne0, ne1) in [("lora_a", n_in, rank), ("lora_b", rank, n_out)] {
                let name = format!("{base}.{half}");
                let v = values(&name, ne0 * ne1, amp);
                let (dtype, bytes): (DType, Vec<u8>) = if spec.f16 {
                    let b = v.iter().flat_map(|&x| half::f16::from_f32(x).to_le_bytes()).collect();
                    (DType::F16, b)
                } else {
                    (DType::F32, v.iter().flat_map(|x| x.to_le_bytes()).collect())
                };
                w.add_tensor(&name, dtype, &[ne0 as u64, ne1 as u64], bytes).unwrap();
            }
        }
    }
    let path = dir.join(format!("{}.gguf", spec.name));
    w.write_file(&path).unwrap();
    path
}

fn params() -> ContextParams {
    ContextParams { n_ctx: 256, n_threads: 2, flash_attn: true, ..Default::default() }
}

fn top_check(ctx: &LlamaContext, top: &[Value], what: &str, failures: &mut Vec<String>) {
    let mut worst = 0f64;
    for (i, want) in top.iter().enumerate() {
        let (d, differs) = compare_top(ctx.logits_ith(i).expect("logits"), want);
        worst = worst.max(d);
        if let Some((ours, theirs)) = differs {
            failures.push(format!("{what}: position {i}: top token {ours}, llama.cpp {theirs}"));
        }
    }
    eprintln!("{what}: largest log-probability difference {worst:.2e}");
    if worst > TOL {
        failures.push(format!("{what}: log-probability off by {worst:.3e}"));
    }
}

fn load_model() -> Model {
    common::top::load(tessera_models::SMOLLM2).0
}

#[test]
fn two_adapters_give_llama_cpps_log_probabilities() {
    let Some(fx) = level_fixture("lora") else { return };
    assert_eq!(fx["adapters"].as_array().unwrap().len(), SPECS.len());
    let amp = fx["amp"].as_f64().unwrap();
    let model = load_model();
    let tmp = tempfile::tempdir().unwrap();
    let loras: Vec<(Arc<LoraAdapter>, f32)> = SPECS
        .iter()
        .map(|s| {
            let p = write_adapter(tmp.path(), &model, s, amp, |i, o, r| (i, o, r));
            (Arc::new(LoraAdapter::load(&model, &p).expect("adapter")), s.scale)
        })
        .collect();
    assert_eq!(loras[0].0.targets().count(), 4 * model.hparams.n_layer);
    let tokens = common::top::tokens(&fx["tokens"]);
    let batch = |toks: &[u32]| {
        let mut b = Batch::new();
        for (i, &t) in toks.iter().enumerate() {
            b.add(t, i as i32, 0, true);
        }
        b
    };
    let mut failures = Vec::new();

    // The model alone, then with a scale of 0 (the same logits, bit for bit).
    let mut ctx = LlamaContext::new(&model, params()).unwrap();
    ctx.decode(&batch(&tokens)).unwrap();
    top_check(&ctx, fx["base_top"].as_array().unwrap(), "no adapter", &mut failures);
    let base: Vec<f32> = ctx.logits().to_vec();
    let zero = loras.iter().map(|(a, _)| (a.clone(), 0.0)).collect();
    let mut ctx = LlamaContext::new(&model, params()).unwrap();
    ctx.set_loras(zero).unwrap();
    ctx.decode(&batch(&tokens)).unwrap();
    assert!(ctx.logits() == base.as_slice(), "adapters at scale 0 changed the logits");

    // Both adapters.
    let mut ctx = LlamaContext::new(&model, params()).unwrap();
    ctx.set_loras(loras.clone()).unwrap();
    ctx.decode(&batch(&tokens)).unwrap();
    let moved = ctx.logits().iter().zip(&base).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(moved > 0.5, "the adapters moved the logits by only {moved}");
    top_check(&ctx, fx["top"].as_array().unwrap(), "two adapters", &mut failures);
    let greedy = common::top::tokens(&fx["greedy"]);
    let margins: Vec<f64> =
        fx["margins"].as_array().unwrap().iter().map(|m| m.as_f64().unwrap()).collect();
    let mut logits = ctx.logits_ith(tokens.len() - 1).unwrap().to_vec();
    for (step, (&want, &margin)) in greedy.iter().zip(&margins).enumerate() {
        let ours = argmax(&logits);
        if margin < LEAD {
            break;
        }
        if ours != want {
            failures.push(format!("greedy step {step}: {ours}, llama.cpp {want}"));
            break;
        }
        ctx.decode(&Batch::from_tokens(&[want], (tokens.len() + step) as i32, 0)).unwrap();
        logits = ctx.logits_ith(0).unwrap().to_vec();
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn load_err(model: &Model, path: &Path) -> String {
    match LoraAdapter::load(model, path) {
        Ok(_) => panic!("{} loaded", path.display()),
        Err(e @ LlamaError::Lora { .. }) => e.to_string(),
        Err(e) => panic!("not a LoRA error: {e}"),
    }
}

#[test]
fn adapters_that_do_not_fit_are_named_errors() {
    let model = load_model();
    let tmp = tempfile::tempdir().unwrap();
    let spec = &SPECS[0];
    // Another model's shapes: the projections one wider.
    let p = write_adapter(tmp.path(), &model, spec, 0.05, |i, o, r| (i, o + 64, r));
    let e = load_err(&model, &p);
    assert!(e.contains("blk.0.attn_k.weight") && e.contains("another model"), "{e}");
    // A not transposed to B.
    let dir2 = tmp.path().join("t");
    std::fs::create_dir(&dir2).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in
        [("general.architecture", "llama"), ("general.type", "adapter"), ("adapter.type", "lora")]
    {
        w.add(k, v).unwrap();
    }
    let f = |n: usize| vec![0u8; n * 4];
    w.add_tensor("blk.0.attn_q.weight.lora_a", DType::F32, &[576, 8], f(576 * 8)).unwrap();
    w.add_tensor("blk.0.attn_q.weight.lora_b", DType::F32, &[4, 576], f(4 * 576)).unwrap();
    let p = dir2.join("t.gguf");
    w.write_file(&p).unwrap();
    assert!(load_err(&model, &p).contains("not transposed"));
    // Wrong architecture, a model instead of an adapter, a lone half, an unknown tensor, a
    // weight the model lacks.
    type Case = (
        &'static str,
        &'static str,
        &'static str,
        &'static [(&'static str, [u64; 2])],
        &'static str,
    );
    let cases: [Case; 5] = [
        ("qwen2", "adapter", "lora", &[], "architecture 'qwen2'"),
        ("llama", "model", "lora", &[], "general.type is 'model'"),
        ("llama", "adapter", "lora", &[("blk.0.attn_q.weight.lora_a", [576, 8])], "lacks"),
        ("llama", "adapter", "lora", &[("blk.0.attn_q.weight", [576, 8])], "neither"),
        (
            "llama",
            "adapter",
            "lora",
            &[("blk.99.attn_q.weight.lora_a", [576, 8]), ("blk.99.attn_q.weight.lora_b", [8, 576])],
            "not a weight of the model",
        ),
    ];
    for (i, (arch, ty, at, tensors, want)) in cases.iter().enumerate() {
        let mut w = GgufWriter::new();
        w.add("general.architecture", *arch).unwrap();
        w.add("general.type", *ty).unwrap();
        w.add("adapter.type", *at).unwrap();
        for (name, ne) in *tensors {
            let n = (ne[0] * ne[1]) as usize;
            w.add_tensor(name, DType::F32, &ne[..], f(n)).unwrap();
        }
        let p = tmp.path().join(format!("case{i}.gguf"));
        w.write_file(&p).unwrap();
        let e = load_err(&model, &p);
        assert!(e.contains(want) && e.contains(&p.display().to_string()), "case {i}: {e}");
    }
}
