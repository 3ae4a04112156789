//! M-RoPE (Qwen2-VL's language model, architecture `qwen2vl`) against llama.cpp
//! (tests/fixtures/mrope/LEVEL.json, made by tools/llama_cpp_mrope.py with llama.cpp b11312
//! built with the level's explicit flags) on the random `synth-qwen2vl-q8_0`: a text prompt,
//! an "image" of 3 rows of 4 embeddings at one time with mtmd's grid positions (its tokens
//! ordered among themselves by row and column, llama.cpp's 2-D causal mask), a text tail after
//! the grid's larger side, then eight greedy steps: llama.cpp's top-5 log-probabilities
//! within `TOL` at each. The image split over two micro-batches (the mask's grid order across
//! them) gives the same answer within the levels' spread. At the scalar level there is no
//! reference.

use std::path::Path;
use tessera_llama::{Batch, ContextParams, LlamaContext, Model};

const TOL: f64 = 1e-6;

fn log_softmax(l: &[f32]) -> Vec<f64> {
    let m = l.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let s: f64 = l.iter().map(|&x| (x as f64 - m).exp()).sum();
    l.iter().map(|&x| x as f64 - m - s.ln()).collect()
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect()
}

/// The tool's embeddings: `((i·131 + j·71) mod 257)/257 − 0.5`, exact in f32.
fn embeddings(n: usize, n_embd: usize) -> Vec<f32> {
    (0..n)
        .flat_map(|i| (0..n_embd).map(move |j| ((i * 131 + j * 71) % 257) as f32 / 257.0 - 0.5))
        .collect()
}

/// The log-probabilities after the tail and each greedy step (the fixture's tokens fed back).
fn run(model: &Model, fx: &serde_json::Value, n_ubatch: usize) -> Vec<Vec<f64>> {
    let params = ContextParams {
        n_ctx: 256,
        n_threads: 2,
        flash_attn: true,
        n_ubatch,
        ..Default::default()
    };
    let mut ctx = LlamaContext::new(model, params).unwrap();
    let prompt = ids(&fx["prompt_tokens"]);
    let mut b = Batch::from_tokens(&prompt, 0, 0);
    b.logits.iter_mut().for_each(|l| *l = false);
    ctx.decode(&b).unwrap();
    let (w, h) =
        (fx["grid"][0].as_u64().unwrap() as usize, fx["grid"][1].as_u64().unwrap() as usize);
    let t = prompt.len() as i32;
    let n_embd = model.hparams.n_embd;
    ctx.decode(&Batch::from_image_grid(&embeddings(w * h, n_embd), n_embd, w, t, 0)).unwrap();
    let tail = ids(&fx["tail_tokens"]);
    let mut p = t + w.max(h) as i32;
    ctx.decode(&Batch::from_tokens(&tail, p, 0)).unwrap();
    p += tail.len() as i32;
    let mut out = vec![log_softmax(ctx.logits())];
    for step in &fx["steps"].as_array().unwrap()[1..] {
        let tok = step["token"].as_u64().unwrap() as u32;
        ctx.decode(&Batch::from_tokens(&[tok], p, 0)).unwrap();
        p += 1;
        out.push(log_softmax(ctx.logits()));
    }
    out
}

#[test]
fn m_rope_gives_llama_cpps_log_probabilities() {
    let level = tessera_backend_cpu::SimdLevel::from_env();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("tests/fixtures/mrope/{}.json", level.name()));
    if !fixture.exists() {
        eprintln!("no llama.cpp reference for the {} level: nothing to compare", level.name());
        return;
    }
    let fx: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&fixture).unwrap()).unwrap();
    let (stem, spec, vocab) = tessera_llama::synth::family_models()
        .into_iter()
        .find(|m| m.0 == "synth-qwen2vl-q8_0")
        .unwrap();
    let v = tessera_gguf::GgufFile::open(tessera_models::fixtures::vocab(vocab).unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{stem}.gguf"));
    tessera_llama::synth::write_random_model(&spec, v.metadata(), &path).unwrap();
    let model = Model::load(&path, tessera_backend_cpu::CpuDevice::shared()).unwrap();
    assert_eq!(model.hparams.rope_sections, Some([8, 12, 12, 0]));
    assert_eq!(
        model.vocab.tokenize(fx["prompt"].as_str().unwrap(), true, true),
        ids(&fx["prompt_tokens"])
    );
    let got = run(&model, &fx, 512);
    let (mut worst, mut failures) = (0f64, Vec::new());
    for (i, (step, lp)) in fx["steps"].as_array().unwrap().iter().zip(&got).enumerate() {
        for e in step["top"].as_array().unwrap() {
            let (t, l) = (e[0].as_u64().unwrap() as usize, e[1].as_f64().unwrap());
            worst = worst.max((lp[t] - l).abs());
            if (lp[t] - l).abs() > TOL {
                failures.push(format!("step {i}: token {t}: {:.6} vs llama.cpp {l:.6}", lp[t]));
            }
        }
    }
    eprintln!("M-RoPE: 45 log-probabilities, largest difference {worst:.2e}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The image over two micro-batches: its later rows see the earlier ones through the mask's
    // grid order; the same answer within the levels' spread.
    let split = run(&model, &fx, 8);
    for (a, b) in got.iter().zip(&split) {
        let top = fx["steps"][0]["top"][0][0].as_u64().unwrap() as usize;
        assert!((a[top] - b[top]).abs() < 1e-3, "{} vs {}", a[top], b[top]);
    }
}

#[test]
fn a_qwen2vl_file_without_sections_is_refused_by_name() {
    let (_, mut spec, vocab) = tessera_llama::synth::family_models()
        .into_iter()
        .find(|m| m.0 == "synth-qwen2vl-q8_0")
        .unwrap();
    spec.arch = "qwen2".into();
    let v = tessera_gguf::GgufFile::open(tessera_models::fixtures::vocab(vocab).unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.gguf");
    tessera_llama::synth::write_random_model(&spec, v.metadata(), &path).unwrap();
    // The qwen2 file renamed qwen2vl: every key moved, no sections.
    let file = tessera_gguf::GgufFile::open(&path).unwrap();
    let mut w = tessera_gguf::GgufWriter::new();
    for (k, val) in file.metadata().iter() {
        let k = k.replacen("qwen2.", "qwen2vl.", 1);
        let val = if k == "general.architecture" { "qwen2vl".into() } else { val.clone() };
        w.add(&k, val).unwrap();
    }
    for t in file.tensors() {
        w.add_tensor(&t.name, t.dtype, t.shape(), file.tensor_data(t)).unwrap();
    }
    let bad = dir.path().join("bad.gguf");
    w.write_file(&bad).unwrap();
    let e = Model::load(&bad, tessera_backend_cpu::CpuDevice::shared()).err().unwrap();
    assert!(e.to_string().contains("rope.dimension_sections"), "{e}");
}
