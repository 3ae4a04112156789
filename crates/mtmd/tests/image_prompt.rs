//! A prompt with an image, against llama.cpp's mtmd (tests/fixtures/image_prompt_LEVEL.json,
//! made by tools/llama_cpp_image_prompt.py with llama.cpp b11312 built with the level's
//! explicit flags): Gemma-3-270M with the random Gemma 3 projector of its width, and
//! SmolLM2-135M given Idefics3's image tokens with the random Idefics3 projector of its width
//! (the image cut into four tiles and an overview, each its own chunk), and the random Qwen2-VL
//! language model with the random Qwen2.5-VL projector (M-RoPE grid positions). The chunks
//! equal `mtmd_tokenize`'s (text tokens, image size), and after `mtmd_helper_eval_chunks` and
//! each of ten greedy steps llama.cpp's top-5 log-probabilities are met within `TOL`
//! (bit-exact logits), its greedy tokens fed back. Also: markers and images must agree, and a
//! projector of another width is refused. At the scalar level there is no reference.

use std::path::Path;
use std::sync::Arc;
use tessera_llama::{Batch, ContextParams, LlamaContext, LoadParams, Model};
use tessera_mtmd::synth::{write_random_mmproj, RandomMmproj};
use tessera_mtmd::{eval_chunks, tokenize, Bitmap, Chunk, Encoder, ImageLimits, Mmproj};

const TOL: f64 = 1e-6;

fn log_softmax(l: &[f32]) -> Vec<f64> {
    let m = l.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let s: f64 = l.iter().map(|&x| (x as f64 - m).exp()).sum();
    l.iter().map(|&x| x as f64 - m - s.ln()).collect()
}

#[test]
fn an_image_prompt_gives_llama_cpps_log_probabilities() {
    let path = tessera_models::ensure(&tessera_models::GEMMA3).expect("fetching the model");
    check("image_prompt", &path, RandomMmproj::tiny_gemma3);
}

#[test]
fn an_idefics3_image_prompt_gives_llama_cpps_log_probabilities() {
    let lm = tessera_models::ensure(&tessera_models::SMOLLM2).expect("fetching the model");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("smolvlm-tokens.gguf");
    tessera_mtmd::synth::with_idefics3_tokens(&lm, &path).unwrap();
    check("image_prompt_idefics3", &path, RandomMmproj::tiny_idefics3);
}

/// Qwen2.5-VL: the random Qwen2-VL language model, the image at its own size (two windows
/// wide) placed with M-RoPE grid positions.
#[test]
fn a_qwen25vl_image_prompt_gives_llama_cpps_log_probabilities() {
    let (stem, spec, vocab) = tessera_llama::synth::family_models()
        .into_iter()
        .find(|m| m.0 == "synth-qwen2vl-q8_0")
        .unwrap();
    let v = tessera_gguf::GgufFile::open(tessera_models::fixtures::vocab(vocab).unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{stem}.gguf"));
    tessera_llama::synth::write_random_model(&spec, v.metadata(), &path).unwrap();
    check("image_prompt_qwen25vl", &path, RandomMmproj::tiny_qwen25vl);
}

fn check(name: &str, path: &Path, spec: fn(usize) -> RandomMmproj) {
    let level = tessera_backend_cpu::SimdLevel::from_env();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let fixture = root.join(format!("{name}_{}.json", level.name()));
    if !fixture.exists() {
        eprintln!("no llama.cpp reference for the {} level: nothing to compare", level.name());
        return;
    }
    let fx: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&fixture).unwrap()).unwrap();
    let model =
        Model::load_with(path, &LoadParams::new(tessera_backend_cpu::CpuDevice::shared())).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mm_path = dir.path().join("mmproj.gguf");
    write_random_mmproj(&spec(model.hparams.n_embd), &mm_path).unwrap();
    let mmproj = Arc::new(Mmproj::load(&mm_path).unwrap());
    let img = Bitmap::open(
        &root.join("images").join(fx["image"].as_str().unwrap()),
        ImageLimits::default(),
    )
    .unwrap();
    let prompt = fx["prompt"].as_str().unwrap();
    let chunks =
        tokenize(&mmproj, &model.vocab, prompt, std::slice::from_ref(&img), true, true).unwrap();
    let want = fx["chunks"].as_array().unwrap();
    assert_eq!(chunks.len(), want.len(), "chunks");
    for (c, w) in chunks.iter().zip(want) {
        match c {
            Chunk::Text(t) => {
                let wt: Vec<u32> = w["tokens"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_u64().unwrap() as u32)
                    .collect();
                assert_eq!(t, &wt, "text chunk");
            }
            Chunk::Image { n_tokens, .. } => {
                assert_eq!(*n_tokens as u64, w["n_tokens"].as_u64().unwrap())
            }
        }
    }
    let params = ContextParams { n_ctx: 512, n_threads: 2, flash_attn: true, ..Default::default() };
    let mut ctx = LlamaContext::new(&model, params).unwrap();
    let cpu = tessera_backend_cpu::CpuBackend::new(2);
    let mut enc = Encoder::new(mmproj.clone(), vec![Box::new(cpu)]).unwrap();
    let n_past = eval_chunks(&mut ctx, &mut enc, &chunks, 0, 0, 512, true).unwrap();
    assert_eq!(n_past as u64, fx["n_past"].as_u64().unwrap());
    let mut failures = Vec::new();
    let (mut worst, mut n_checked) = (0f64, 0);
    for (i, step) in fx["steps"].as_array().unwrap().iter().enumerate() {
        if let Some(t) = step["token"].as_u64() {
            let pos = (n_past + i - 1) as i32;
            ctx.decode(&Batch::from_tokens(&[t as u32], pos, 0)).unwrap();
        }
        // The one row of logits kept (the prompt's last token, then each step's).
        let lp = log_softmax(ctx.logits());
        for e in step["top"].as_array().unwrap() {
            let (t, l) = (e[0].as_u64().unwrap() as usize, e[1].as_f64().unwrap());
            worst = worst.max((lp[t] - l).abs());
            n_checked += 1;
            if (lp[t] - l).abs() > TOL {
                failures.push(format!("step {i}: token {t}: {:.6} vs llama.cpp {l:.6}", lp[t]));
            }
        }
    }
    eprintln!("{n_checked} log-probabilities, largest difference {worst:.2e}");
    assert_eq!(n_checked, 55, "11 steps of 5");
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // Markers and images must agree; a projector of another width is refused.
    let e = tokenize(&mmproj, &model.vocab, "no marker", std::slice::from_ref(&img), true, true)
        .unwrap_err();
    assert!(e.to_string().contains("0 media markers"), "{e}");
    let other = dir.path().join("other.gguf");
    write_random_mmproj(&spec(96), &other).unwrap();
    let other = Arc::new(Mmproj::load(&other).unwrap());
    let mut enc2 =
        Encoder::new(other.clone(), vec![Box::new(tessera_backend_cpu::CpuBackend::new(2))])
            .unwrap();
    let e = eval_chunks(&mut ctx, &mut enc2, &chunks, 0, 1, 512, true).unwrap_err();
    assert!(e.to_string().contains("96 wide"), "{e}");
}
