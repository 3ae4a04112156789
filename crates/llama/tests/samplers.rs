//! The sampler chain against llama.cpp's: for every case of tests/fixtures/samplers.json
//! (made by crates/llama/tools/llama_cpp_samplers.py through llama.cpp b11312's C API), the
//! same parameters, history and logit vectors must select llama.cpp's token at every step.
//! The cases cover the penalties, DRY (default, no and own sequence breakers, tokenized with
//! the GPT-2 vocabulary), XTC, top-n-σ, dynamic temperature, mirostat 1 and 2, `min_keep`,
//! a logit bias and a reordered chain; all are seeded.

use serde_json::Value;
use tessera_llama::sampling::{order_from_names, SamplerChain, SamplingParams, SeqSampler};
use tessera_llama::Vocab;

/// The logits both sides compute: xorshift32 from the case and step, each `(x >> 8) / 2^24
/// · 8 − 4` (exact in f32), the fixture's hot tokens raised by 3.5.
fn logits(case: u32, step: u32, n: usize, hot: &[u32]) -> Vec<f32> {
    let mut x = 0x9E37_79B9u32.wrapping_mul(case + 1) ^ 0x85EB_CA77u32.wrapping_mul(step + 1);
    if x == 0 {
        x = 1;
    }
    let mut out: Vec<f32> = (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 8) as f32 / 16_777_216.0 * 8.0 - 4.0
        })
        .collect();
    for &t in hot {
        out[t as usize] += 3.5;
    }
    out
}

fn gpt2_vocab() -> Vocab {
    let path = tessera_models::fixtures::vocab("ggml-vocab-gpt-2.gguf").expect("the GPT-2 vocab");
    let gguf = tessera_gguf::GgufFile::open(path).expect("open the vocabulary");
    Vocab::from_metadata(gguf.metadata()).expect("read the vocabulary")
}

fn params(p: &Value) -> (SamplingParams, Vec<tessera_llama::sampling::Step>, Vec<(u32, f32)>) {
    let f = |k: &str| p[k].as_f64().unwrap_or_else(|| panic!("{k}")) as f32;
    let i = |k: &str| p[k].as_i64().unwrap_or_else(|| panic!("{k}"));
    let sp = SamplingParams {
        temp: f("temp"),
        top_k: i("top_k") as usize,
        top_p: f("top_p"),
        min_p: f("min_p"),
        typical_p: f("typical_p"),
        repeat_penalty: f("repeat_penalty"),
        repeat_last_n: i("repeat_last_n") as usize,
        frequency_penalty: f("frequency_penalty"),
        presence_penalty: f("presence_penalty"),
        seed: i("seed") as u32,
        min_keep: i("min_keep") as usize,
        dynatemp_range: f("dynatemp_range"),
        dynatemp_exponent: f("dynatemp_exponent"),
        xtc_probability: f("xtc_probability"),
        xtc_threshold: f("xtc_threshold"),
        top_n_sigma: f("top_n_sigma"),
        dry_multiplier: f("dry_multiplier"),
        dry_base: f("dry_base"),
        dry_allowed_length: i("dry_allowed_length") as i32,
        dry_penalty_last_n: i("dry_penalty_last_n") as i32,
        dry_sequence_breakers: p["dry_sequence_breakers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_str().unwrap().to_string())
            .collect(),
        mirostat: i("mirostat") as u8,
        mirostat_tau: f("mirostat_tau"),
        mirostat_eta: f("mirostat_eta"),
    };
    let order =
        order_from_names(p["order"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()))
            .unwrap();
    let bias = p["logit_bias"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let b = match &e[1] {
                Value::String(s) if s == "-inf" => f32::NEG_INFINITY,
                v => v.as_f64().unwrap() as f32,
            };
            (e[0].as_u64().unwrap() as u32, b)
        })
        .collect();
    (sp, order, bias)
}

#[test]
fn every_sampler_selects_llama_cpps_tokens() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/samplers.json");
    let text = std::fs::read_to_string(&path).expect("tests/fixtures/samplers.json");
    let fx: Value = serde_json::from_str(&text).unwrap();
    let vocab = gpt2_vocab();
    let n = fx["n_candidates"].as_u64().unwrap() as usize;
    let hot: Vec<u32> =
        fx["hot"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect();
    let history: Vec<u32> =
        fx["history"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect();
    let cases = fx["cases"].as_array().unwrap();
    assert!(cases.len() >= 10, "the fixture's cases");
    let mut failures = Vec::new();
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let index = case["index"].as_u64().unwrap() as u32;
        let (sp, order, bias) = params(&case["params"]);
        let chain = SamplerChain::ordered(&sp, &order, &bias, Some(&vocab))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut s = SeqSampler::new(chain);
        s.history(&history);
        let want: Vec<u32> =
            case["tokens"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect();
        let got: Vec<u32> = (0..want.len() as u32)
            .map(|step| s.sample(&logits(index, step, n, &hot)).token)
            .collect();
        if got != want {
            let at = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(0);
            failures.push(format!("{name}: first difference at step {at}: {got:?} vs {want:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
