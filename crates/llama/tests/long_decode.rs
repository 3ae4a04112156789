//! Decoding deep in the context against llama.cpp (tests/fixtures/long_decode/LEVEL.json, made
//! by crates/llama/tools/llama_cpp_long_decode.py with llama.cpp b11312 built with the level's
//! explicit flags): about 600 tokens evaluated as one batch, then ten tokens decoded one at a
//! time with an F16 cache of 1024 cells, at 2 and 3 threads. There the cache view holds 768
//! cells, and llama.cpp's one-token flash attention splits them over its threads and merges the
//! shares, so its bits depend on the thread count; at every step llama.cpp's top-5
//! log-probabilities must be met within `TOL` (bit-exact logits), llama.cpp's greedy tokens
//! fed back. At the scalar level there is no reference, and the test says so.

mod common;

use common::top::{compare_top, level_fixture, load, tokens, TOL};
use serde_json::Value;
use tessera_llama::{Batch, ContextParams, LlamaContext};

fn check(model_id: tessera_models::Model, cases: &[Value]) -> Vec<String> {
    let (model, file) = load(model_id);
    let mut failures = Vec::new();
    for case in cases.iter().filter(|c| c["model"] == file.as_str()) {
        let nth = case["threads"].as_u64().unwrap() as usize;
        let what = format!("{file} at {nth} threads");
        let params = ContextParams {
            n_ctx: 1024,
            n_ubatch: 1024,
            n_threads: nth,
            flash_attn: true,
            ..Default::default()
        };
        let mut ctx = LlamaContext::new(&model, params).expect("context");
        let prompt = tokens(&case["tokens"]);
        ctx.decode(&Batch::from_tokens(&prompt, 0, 0)).expect("prompt");
        let (mut worst, mut worst_at) = (0f64, 0);
        for (i, step) in case["steps"].as_array().unwrap().iter().enumerate() {
            let tok = step["token"].as_u64().unwrap() as u32;
            ctx.decode(&Batch::from_tokens(&[tok], (prompt.len() + i) as i32, 0)).unwrap();
            let (d, differs) = compare_top(ctx.logits_ith(0).unwrap(), &step["top"]);
            if d > worst {
                (worst, worst_at) = (d, i);
            }
            if let Some((ours, theirs)) = differs {
                failures.push(format!("{what}: step {i}: top token {ours}, llama.cpp {theirs}"));
            }
        }
        eprintln!("{what}: largest log-probability difference {worst:.2e} (step {worst_at})");
        if worst > TOL {
            failures.push(format!("{what}: log-probability off by {worst:.3e} at step {worst_at}"));
        }
    }
    failures
}

#[test]
fn decoding_past_512_cells_gives_llama_cpps_log_probabilities() {
    let Some(fx) = level_fixture("long_decode") else { return };
    let cases = fx["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 6, "three models, two thread counts");
    let mut failures = Vec::new();
    for id in [tessera_models::SMOLLM2, tessera_models::QWEN25_CODER, tessera_models::GEMMA3] {
        failures.extend(check(id, cases));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
