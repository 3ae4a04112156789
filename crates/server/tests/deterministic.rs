//! `--deterministic`: 16 greedy requests of mixed lengths (several over 64 prompt tokens, where
//! the default mode's steps take the tiled attention, and K-quant batches of 8+ rows the tiled
//! order) sent together to 8 slots with `-b 512` get exactly the tokens each gets alone, on a
//! Q4_1 (SmolLM2-135M) and a Q4_K_M (Qwen2.5-Coder-0.5B, repacked) model.

mod common;

use common::*;
use serde_json::json;
use std::sync::Arc;
use tessera_llama::Model;

fn prompt(i: usize) -> String {
    let n = [3, 12, 70, 140, 5, 90, 30, 66][i % 8] + i;
    let words = ["river", "stone", "cloud", "apple", "window", "garden"];
    let body: Vec<&str> = (0..n).map(|k| words[(k * 7 + i) % words.len()]).collect();
    format!("Note {i}: {}. In short,", body.join(" "))
}

fn answers_alone_and_together(model: Arc<Model>) {
    let mut cfg = config(1, 32, None);
    cfg.deterministic = true;
    cfg.n_batch = 512;
    cfg.n_ctx = 4096;
    let alone_srv = tessera_server::start(model.clone(), cfg.clone(), false).expect("server");
    let body = |i: usize| json!({"prompt": prompt(i), "max_tokens": 8, "temperature": 0});
    let alone: Vec<String> = (0..16)
        .map(|i| {
            let r = post(alone_srv.addr, "/v1/completions", &body(i));
            assert_eq!(r.status, 200, "{}", r.body);
            r.json()["choices"][0]["text"].as_str().unwrap().to_string()
        })
        .collect();
    alone_srv.stop();

    cfg.n_parallel = 8;
    cfg.n_ctx = 8192;
    let srv = tessera_server::start(model, cfg, false).expect("server");
    let a = srv.addr;
    let together: Vec<String> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..16)
            .map(|i| {
                let b = body(i);
                s.spawn(move || {
                    let r = post(a, "/v1/completions", &b);
                    assert_eq!(r.status, 200, "{}", r.body);
                    r.json()["choices"][0]["text"].as_str().unwrap().to_string()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    wait_idle(a, 60);
    srv.stop();
    let differ: Vec<String> = (0..16)
        .filter(|&i| alone[i] != together[i])
        .map(|i| format!("request {i}: alone {:?}, together {:?}", alone[i], together[i]))
        .collect();
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

#[test]
fn q4_1_answers_do_not_depend_on_load() {
    answers_alone_and_together(model());
}

#[test]
fn q4_k_m_answers_do_not_depend_on_load() {
    answers_alone_and_together(qwen());
}
