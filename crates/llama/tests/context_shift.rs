//! Context shifts against llama.cpp's (tests/fixtures/context_shift/LEVEL.json, made by
//! crates/llama/tools/llama_cpp_context_shift.py with llama.cpp b11312 built with the level's
//! explicit flags): on the three real models, with F16 and Q8_0 caches, a text evaluated as
//! one batch, then twice the context shifted as llama.cpp's tools shift it (the first 8 tokens
//! kept, half the rest dropped, the tail moved back: `seq_rm`, `seq_add`, and the next decode's
//! K-shift), each followed by 12 tokens decoded one at a time at the shifted positions. Every
//! step's top-5 log-probabilities must equal llama.cpp's within `TOL` (bit-exact logits: the
//! shifted K and the cells the new tokens take are llama.cpp's, `CellOrder::RingHead`), and
//! its top token must be ours where llama.cpp's lead is over `LEAD`.

mod common;

use common::top::{argmax, case_params, compare_top, level_fixture, load, tokens, LEAD, TOL};
use serde_json::Value;
use tessera_llama::{Batch, CellOrder, ContextParams, LlamaContext};

fn check(model_id: tessera_models::Model, fx: &Value) -> Vec<String> {
    let (model, file) = load(model_id);
    let per_shift = fx["steps_per_shift"].as_u64().unwrap() as usize;
    let mut failures = Vec::new();
    for case in fx["cases"].as_array().unwrap().iter().filter(|c| c["model"] == file.as_str()) {
        let (k, v) = (case["type_k"].as_str().unwrap(), case["type_v"].as_str().unwrap());
        let what = format!("{file} {k}/{v}");
        // One sequence, its cells where llama.cpp puts them (the hole a shift leaves first).
        let params = ContextParams { cell_order: CellOrder::RingHead, ..case_params(case, 256) };
        let mut ctx = LlamaContext::new(&model, params).expect("context");
        let tokens = tokens(&case["tokens"]);
        let mut batch = Batch::new();
        for (i, &t) in tokens.iter().enumerate() {
            batch.add(t, i as i32, 0, i + 1 == tokens.len());
        }
        ctx.decode(&batch).expect("decode");
        let mut logits = ctx.logits_ith(tokens.len() - 1).unwrap().to_vec();
        let mut n_past = tokens.len() as i32;
        let steps = case["steps"].as_array().unwrap();
        let mut lead = f64::INFINITY;
        let mut worst = 0f64;
        for (s, shift) in case["shifts"].as_array().unwrap().iter().enumerate() {
            let keep = shift["n_keep"].as_i64().unwrap() as i32;
            let discard = shift["n_discard"].as_i64().unwrap() as i32;
            assert_eq!(discard, (n_past - keep) / 2, "{what}: llama.cpp's tools drop half");
            let kv = ctx.kv_cache_mut();
            kv.seq_rm(Some(0), keep, keep + discard);
            kv.seq_add(0, keep + discard, n_past, -discard);
            n_past -= discard;
            for (j, step) in steps[s * per_shift..(s + 1) * per_shift].iter().enumerate() {
                let want = step["token"].as_u64().unwrap() as u32;
                let ours = argmax(&logits);
                if ours != want && lead >= LEAD {
                    failures.push(format!(
                        "{what}: shift {s} step {j}: token {ours}, llama.cpp {want}"
                    ));
                }
                // llama.cpp's token goes in either way, so every step compares logits.
                ctx.decode(&Batch::from_tokens(&[want], n_past, 0)).expect("decode");
                n_past += 1;
                logits = ctx.logits_ith(0).unwrap().to_vec();
                worst = worst.max(compare_top(&logits, &step["top"]).0);
                lead = step["margin"].as_f64().unwrap();
            }
        }
        eprintln!("{what}: largest log-probability difference after the shifts {worst:.2e}");
        if worst > TOL {
            failures.push(format!("{what}: log-probability off by {worst:.3e}"));
        }
    }
    failures
}

#[test]
fn shifted_contexts_give_llama_cpps_log_probabilities() {
    let Some(fx) = level_fixture("context_shift") else { return };
    assert_eq!(fx["cases"].as_array().unwrap().len(), 6, "three models, two cache types");
    let mut failures = Vec::new();
    for id in [tessera_models::SMOLLM2, tessera_models::QWEN25_CODER, tessera_models::GEMMA3] {
        failures.extend(check(id, &fx));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
