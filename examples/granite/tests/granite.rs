//! The downstream Granite architecture against llama.cpp b11312 on a random-weight Granite file
//! (tests/fixtures/llama_cpp.json, made by the repository's tools/make_family_refs.py from the file
//! `examples/write_synth.rs` writes): same prompt tokens, the last prompt position's logits
//! (sampled) and the greedy continuation. At the SIMD level and layout that made the fixture
//! the logits are llama.cpp's bits (NMSE bound 1e-9); elsewhere the bound is the levels' own
//! spread (5e-3, as the embeddings test).

use serde_json::Value;
use tessera_llama::{Batch, ContextParams, LlamaContext, Model};

fn fixture() -> Value {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llama_cpp.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect()
}

fn model() -> (tempfile::TempDir, Model) {
    tessera_granite::register();
    let (spec, scales, vocab) = tessera_granite::synth::test_model();
    let vocab = tessera_models::fixtures::vocab(vocab).unwrap();
    let v = tessera_gguf::GgufFile::open(&vocab).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("granite.gguf");
    tessera_granite::synth::write_random_granite(&spec, &scales, v.metadata(), &path).unwrap();
    let model = Model::load(&path, tessera_backend_cpu::CpuDevice::shared()).unwrap();
    (dir, model)
}

#[test]
fn granite_matches_llama_cpp() {
    let r = fixture();
    let (_dir, model) = model();
    assert_eq!(model.hparams.arch, "granite");
    let prompt = ids(&r["prompt_tokens"]);
    assert_eq!(model.vocab.tokenize(r["prompt"].as_str().unwrap(), true, true), prompt);
    let params = ContextParams { n_ctx: 512, n_threads: 2, ..ContextParams::default() };
    let mut ctx = LlamaContext::new(&model, params).unwrap();
    ctx.decode(&Batch::from_tokens(&prompt, 0, 0)).unwrap();
    let logits = ctx.logits_ith(prompt.len() - 1).unwrap().to_vec();

    let level = tessera_backend_cpu::SimdLevel::from_env();
    let same_layout =
        model.n_repacked == 0 || r["build"]["repack"].as_bool() == Some(model.n_repacked > 0);
    let same_build = r["build"]["simd_level"] == level.name() && same_layout;
    let bound = if same_build { 1e-9 } else { 5e-3 };
    let step = r["sample_step"].as_u64().unwrap() as usize;
    let (mut num, mut den) = (0f64, 0f64);
    for (k, want) in r["logits_sample"].as_array().unwrap().iter().enumerate() {
        let (g, w) = (f64::from(logits[k * step]), want.as_f64().unwrap());
        num += (g - w).powi(2);
        den += w * w;
    }
    let nmse = num / den;
    eprintln!("granite ({}): last-position logits NMSE {nmse:.3e} (bound {bound:e})", level.name());
    assert!(nmse <= bound, "logits NMSE {nmse:e} from llama.cpp's, over {bound:e}");
    let top = r["top20"].as_array().unwrap();
    assert_eq!(
        logits.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0 as u64,
        top[0][0].as_u64().unwrap(),
        "the most likely next token"
    );

    // Greedy: the same tokens while llama.cpp's choice is clear (top-2 margin 0.1 or more).
    let greedy = ids(&r["greedy_tokens"]);
    let margins: Vec<f64> =
        r["greedy_top2_margins"].as_array().unwrap().iter().map(|m| m.as_f64().unwrap()).collect();
    let next = |l: &[f32]| l.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0 as u32;
    let mut tok = next(&logits);
    for (i, (&want, &m)) in greedy.iter().zip(&margins).enumerate() {
        if m < 0.1 {
            break;
        }
        assert_eq!(tok, want, "greedy token {i}");
        ctx.decode(&Batch::from_tokens(&[tok], (prompt.len() + i) as i32, 0)).unwrap();
        tok = next(ctx.logits_ith(0).unwrap());
    }
}

#[test]
fn a_granite_file_without_its_logit_scale_is_refused_by_name() {
    tessera_granite::register();
    let (spec, scales, vocab) = tessera_granite::synth::test_model();
    let vocab = tessera_models::fixtures::vocab(vocab).unwrap();
    let v = tessera_gguf::GgufFile::open(&vocab).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.gguf");
    let bad = tessera_granite::Scales { logit: 0.0, ..scales };
    tessera_granite::synth::write_random_granite(&spec, &bad, v.metadata(), &path).unwrap();
    let Err(e) = Model::load(&path, tessera_backend_cpu::CpuDevice::shared()) else {
        panic!("a logit scale of 0 was accepted")
    };
    assert!(e.to_string().contains("granite.logit_scale"), "{e}");
}
