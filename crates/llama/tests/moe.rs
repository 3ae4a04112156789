//! Mixture of experts against llama.cpp b11312 (tests/fixtures/moe, made by
//! tools/make_moe_refs.py): the random-weight models of `tessera_llama::synth::moe_models`,
//! written in F16: `qwen3moe` (16 experts of width 256, 4 per token) quantized to Q4_K_M, and
//! `gpt-oss` (the same experts with biases, SWIGLU_OAI and softmax-of-top-k gating, attention
//! sinks and biases, YaRN, a window of 8 on even blocks) quantized to MXFP4_MOE.
//!
//! - Tessera's quantizer gives llama.cpp's tensors (types and bytes) for the MoE files: the
//!   expert stacks, the F32 router, the Q6_K down projections of the `use_more_bits` blocks
//!   (Q4_K_M), MXFP4 experts and Q8_0 elsewhere (MXFP4_MOE).
//! - Every prompt position's top-5 logits and the log-probability of the next prompt token
//!   (a 92-token text: most experts get 8+ rows in the batch, so the tiled K-quant path runs
//!   per expert beside the one-row path), the last position's logits, and 16 greedy tokens,
//!   with the experts repacked (llama.cpp's default on x86) and plain.
//!
//! At the SIMD level and layout that made a fixture the logits are llama.cpp's bits (NMSE
//! bound 1e-9, log-probabilities within 1e-5); elsewhere the bounds are the spread of builds
//! (logits NMSE 5e-3, as the families test; log-probabilities within 0.5: llama.cpp's own
//! repacked and plain runs of this file differ by up to 0.24 and 1.5e-5 in NMSE, a random
//! model's flat distributions amplify it) and the greedy tokens are checked while llama.cpp's
//! top-2 margin is at least 0.1.

use serde_json::Value;
use sha2::{Digest, Sha256};
use std::path::Path;
use tessera_llama::quantize::{quantize_file, FileType};
use tessera_llama::{Batch, ContextParams, LlamaContext, LoadParams, Model};

/// One model of the test: its synthetic file, the file type, the fixtures' name.
struct Case {
    stem: &'static str,
    ftype: &'static str,
    fixture: &'static str,
}

const QWEN3MOE: Case =
    Case { stem: "synth-qwen3moe-f16", ftype: "q4_k_m", fixture: "synth-qwen3moe-q4_k_m" };
const GPT_OSS: Case =
    Case { stem: "synth-gpt-oss-f16", ftype: "mxfp4_moe", fixture: "synth-gpt-oss-mxfp4_moe" };

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect()
}

fn argmax(l: &[f32]) -> u32 {
    l.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0 as u32
}

fn fixture(case: &Case, repack: bool) -> Value {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/moe");
    let name = format!("{}.repack{}.json", case.fixture, u8::from(repack));
    serde_json::from_str(&std::fs::read_to_string(dir.join(name)).unwrap()).unwrap()
}

/// sha256 over `name:type:sha256(bytes)` lines sorted by name (the fixture's digest).
fn tensors_digest(path: &Path) -> String {
    let g = tessera_gguf::GgufFile::open(path).unwrap();
    let mut lines: Vec<String> = g
        .tensors()
        .iter()
        .map(|t| {
            let h = Sha256::digest(g.tensor_data(t));
            format!("{}:{}:{}\n", t.name, t.dtype.id(), hex(&h))
        })
        .collect();
    lines.sort();
    hex(&Sha256::digest(lines.concat().as_bytes()))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The case's file, quantized by Tessera from the F16 synthetic model, in `dir`.
fn quantized(case: &Case, dir: &Path) -> std::path::PathBuf {
    let (_, spec, vocab) =
        tessera_llama::synth::moe_models().into_iter().find(|m| m.0 == case.stem).unwrap();
    let v = tessera_gguf::GgufFile::open(tessera_models::fixtures::vocab(vocab).unwrap()).unwrap();
    let base = dir.join(format!("{}.gguf", case.stem));
    tessera_llama::synth::write_random_model(&spec, v.metadata(), &base).unwrap();
    let q = dir.join(format!("{}.gguf", case.ftype));
    quantize_file(&base, &q, FileType::parse(case.ftype).unwrap(), false, |_, _, _| {}).unwrap();
    q
}

#[test]
fn qwen3moe_matches_llama_cpp() {
    matches_llama_cpp(&QWEN3MOE);
}

#[test]
fn gpt_oss_matches_llama_cpp() {
    matches_llama_cpp(&GPT_OSS);
}

fn matches_llama_cpp(case: &Case) {
    let dir = tempfile::tempdir().unwrap();
    let q = quantized(case, dir.path());
    let digest = tensors_digest(&q);
    for repack in [false, true] {
        let r = fixture(case, repack);
        assert_eq!(
            digest,
            r["quantized_tensors_sha256"].as_str().unwrap(),
            "Tessera's {} tensors differ from llama.cpp's",
            case.ftype
        );
        check(&q, &r, repack, case.stem);
    }
}

fn check(path: &Path, r: &Value, repack: bool, stem: &str) {
    let params = LoadParams { repack, ..LoadParams::new(tessera_backend_cpu::CpuDevice::shared()) };
    let model = Model::load_with(path, &params).unwrap();
    assert_eq!(model.hparams.n_expert, 16);
    let prompt = ids(&r["prompt_tokens"]);
    assert_eq!(model.vocab.tokenize(r["prompt"].as_str().unwrap(), true, true), prompt);
    let cp = ContextParams { n_ctx: 512, n_threads: 2, flash_attn: true, ..Default::default() };
    let mut ctx = LlamaContext::new(&model, cp).unwrap();
    // Logits at every position, as the fixture's run (which decides how many rows each
    // expert of the last block gets, and so its path).
    let mut batch = Batch::new();
    for (i, &t) in prompt.iter().enumerate() {
        batch.add(t, i as i32, 0, true);
    }
    ctx.decode(&batch).unwrap();

    let level = tessera_backend_cpu::SimdLevel::from_env();
    let same_layout = model.n_repacked == 0 || r["build"]["repack"].as_bool() == Some(true);
    let same_build = r["build"]["simd_level"] == level.name() && same_layout;
    let (bound, lp_bound) = if same_build { (1e-9, 1e-5) } else { (5e-3, 0.5) };
    let tag = format!("{stem}, repack {repack}, {}", level.name());

    let (mut num, mut den, mut worst_lp) = (0f64, 0f64, 0f64);
    for (p, e) in r["positions"].as_array().unwrap().iter().enumerate() {
        let l = ctx.logits_ith(p).unwrap();
        for pair in e["top5"].as_array().unwrap() {
            let (id, want) = (pair[0].as_u64().unwrap() as usize, pair[1].as_f64().unwrap());
            num += (f64::from(l[id]) - want).powi(2);
            den += want * want;
        }
        if let Some(next) = e.get("next") {
            let id = next[0].as_u64().unwrap() as usize;
            let max = l.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
            let lse = l.iter().map(|&x| (f64::from(x) - max).exp()).sum::<f64>().ln() + max;
            let lp = f64::from(l[id]) - lse;
            worst_lp = worst_lp.max((lp - next[2].as_f64().unwrap()).abs());
        }
    }
    let nmse = num / den;
    eprintln!("({tag}): top-5 logits NMSE {nmse:.3e}, worst log-prob diff {worst_lp:.3e}");
    assert!(nmse <= bound, "({tag}): top-5 logits NMSE {nmse:e} over {bound:e}");
    assert!(worst_lp <= lp_bound, "({tag}): log-prob off by {worst_lp:e}");

    let n = prompt.len();
    let last = ctx.logits_ith(n - 1).unwrap().to_vec();
    let step = r["sample_step"].as_u64().unwrap() as usize;
    let (mut num, mut den) = (0f64, 0f64);
    for (k, want) in r["logits_sample"].as_array().unwrap().iter().enumerate() {
        let (g, w) = (f64::from(last[k * step]), want.as_f64().unwrap());
        num += (g - w).powi(2);
        den += w * w;
    }
    assert!(num / den <= bound, "({tag}): last logits NMSE {:e}", num / den);

    let greedy = ids(&r["greedy_tokens"]);
    let margins = r["greedy_top2_margins"].as_array().unwrap();
    let mut tok = argmax(&last);
    for (i, (&want, m)) in greedy.iter().zip(margins).enumerate() {
        if !same_build && m.as_f64().unwrap() < 0.1 {
            break;
        }
        assert_eq!(tok, want, "({tag}): greedy token {i}");
        ctx.decode(&Batch::from_tokens(&[tok], (n + i) as i32, 0)).unwrap();
        tok = argmax(ctx.logits_ith(0).unwrap());
    }
}
