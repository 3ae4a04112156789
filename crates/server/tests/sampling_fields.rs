//! Every sampling field a request sends has its effect or is refused by name, on SmolLM2-135M:
//! `logit_bias` moves and bans tokens, `seed: -1` draws a new seed each time, seeds outside
//! 32 bits are refused, `cache_prompt: false` evaluates the prompt again, samplers Tessera
//! does not have are refused when on, and unknown fields (`max_tokenz`) are named in a 400.

mod common;

use common::*;
use serde_json::{json, Value};

const PROMPT: &str = "The capital of France is";

fn completion(a: std::net::SocketAddr, extra: Value) -> Resp {
    let mut body = json!({"prompt": PROMPT, "max_tokens": 1, "temperature": 0, "logprobs": 5});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    post(a, "/v1/completions", &body)
}

fn first_token(r: &Resp) -> String {
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()["choices"][0]["logprobs"]["tokens"][0].as_str().unwrap().to_string()
}

fn token_id(a: std::net::SocketAddr, piece: &str) -> u64 {
    let toks = post(a, "/tokenize", &json!({"content": piece})).json();
    assert_eq!(toks["tokens"].as_array().map(Vec::len), Some(1), "{piece:?}: {toks}");
    toks["tokens"][0].as_u64().unwrap()
}

fn refused(r: &Resp, param: &str) {
    assert_eq!(r.status, 400, "{param}: {}", r.body);
    let e = &r.json()["error"];
    // OpenAI's error names the field in `param`, Anthropic's in its message.
    let named = e["param"] == param || e["message"].as_str().is_some_and(|m| m.starts_with(param));
    assert!(named, "{param}: {}", r.body);
}

#[test]
fn logit_bias_moves_and_bans_tokens() {
    let srv = server(1, 4, None);
    let a = srv.addr;
    let r = completion(a, json!({}));
    let greedy = first_token(&r);
    let second = r.json()["choices"][0]["logprobs"]["top_logprobs"][0]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(t, _)| **t != greedy)
        .max_by(|x, y| x.1.as_f64().unwrap().total_cmp(&y.1.as_f64().unwrap()))
        .map(|(t, _)| t.clone())
        .unwrap();
    let id = token_id(a, &greedy);
    // Banning the greedy token (OpenAI's object form, llama-server's `false`) changes the reply.
    for bias in [json!({ id.to_string(): -100 }), json!({ id.to_string(): false })] {
        let t = first_token(&completion(a, json!({ "logit_bias": bias })));
        assert_ne!(t, greedy, "{bias}");
    }
    // llama-server's pair form, by id: the runner-up pushed over the top.
    let other = token_id(a, &second);
    let t = first_token(&completion(a, json!({"logit_bias": [[other, 50]]})));
    assert_eq!(t, second);
    // By text, in a chat request too.
    let chat = json!({"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 1,
                      "temperature": 0, "logprobs": true});
    let r = post(a, "/v1/chat/completions", &chat);
    assert_eq!(r.status, 200, "{}", r.body);
    let said =
        r.json()["choices"][0]["logprobs"]["content"][0]["token"].as_str().unwrap().to_string();
    let mut banned = chat.clone();
    banned["logit_bias"] = json!([[said.clone(), false]]);
    let r = post(a, "/v1/chat/completions", &banned);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_ne!(r.json()["choices"][0]["logprobs"]["content"][0]["token"], said.as_str());
    // Malformed and out-of-vocabulary entries are refused, naming the entry.
    refused(&completion(a, json!({"logit_bias": {"49152": 1}})), "logit_bias.49152");
    refused(&completion(a, json!({"logit_bias": {"1": "x"}})), "logit_bias.1");
    refused(&completion(a, json!({"logit_bias": [[1]]})), "logit_bias[0]");
    refused(&completion(a, json!({"logit_bias": 3})), "logit_bias");
    srv.stop();
}

#[test]
fn seeds_are_llama_servers() {
    let srv = server(1, 4, None);
    let a = srv.addr;
    let sampled = |seed: Value| {
        let body = json!({"prompt": "Once upon a time", "max_tokens": 24, "temperature": 2.0,
                          "top_k": 0, "top_p": 1.0, "min_p": 0.0, "seed": seed});
        let r = post(a, "/v1/completions", &body);
        assert_eq!(r.status, 200, "{}", r.body);
        r.json()["choices"][0]["text"].as_str().unwrap().to_string()
    };
    assert_eq!(sampled(json!(42)), sampled(json!(42)));
    // -1 is a new random seed each time (was one fixed seed): 24 tokens at temperature 2
    // over the whole vocabulary agree by chance with negligible probability.
    assert_ne!(sampled(json!(-1)), sampled(json!(-1)));
    for bad in [json!(4294967296u64), json!(-2), json!("42")] {
        refused(&completion(a, json!({ "seed": bad })), "seed");
    }
    srv.stop();
}

#[test]
fn fields_take_effect_or_are_refused_by_name() {
    let srv = server(1, 4, None);
    let a = srv.addr;
    let native = |extra: Value| {
        let mut body = json!({"prompt": PROMPT, "n_predict": 2, "temperature": 0});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let r = post(a, "/completion", &body);
        assert_eq!(r.status, 200, "{}", r.body);
        r.json()
    };
    native(json!({}));
    // The same prompt again comes from the slot's cache, unless cache_prompt is false.
    assert!(native(json!({}))["timings"]["cache_n"].as_u64().unwrap() > 0);
    assert_eq!(native(json!({"cache_prompt": false}))["timings"]["cache_n"], 0);
    // The whole chain: typical_p, samplers, DRY, XTC, top-n-sigma, dynamic temperature and
    // mirostat are taken (their arithmetic is checked against llama.cpp in tessera-llama).
    native(json!({"mirostat": 0, "dry_multiplier": 0, "xtc_probability": 0, "typical_p": 0.9,
                  "samplers": ["top_k", "temperature"], "n_keep": -1}));
    native(json!({"temperature": 0.7, "seed": 3, "dry_multiplier": 0.8, "dry_penalty_last_n": -1,
                  "dry_sequence_breakers": ["\n", ":"], "xtc_probability": 0.5,
                  "xtc_threshold": 0.1, "top_n_sigma": 1.0, "dynatemp_range": 0.3,
                  "min_keep": 2}));
    native(json!({"temperature": 0.7, "seed": 3, "mirostat": 2, "mirostat_tau": 4.0}));
    native(json!({"temperature": 0.7, "seed": 3, "mirostat": 1}));
    for (extra, param) in [
        (json!({"mirostat": 3}), "mirostat"),
        (json!({"dry_multiplier": -0.8}), "dry_multiplier"),
        (json!({"dry_sequence_breakers": []}), "dry_sequence_breakers"),
        (json!({"xtc_probability": 1.5}), "xtc_probability"),
        (json!({"typical_p": "0.9"}), "typical_p"),
        (json!({"samplers": ["top_k", "nope"]}), "samplers"),
        (json!({"cache_prompt": "no"}), "cache_prompt"),
        (json!({"id_slot": 0}), "id_slot"),
        (json!({"echo": true}), "echo"),
        (json!({"suffix": "x"}), "suffix"),
        (json!({"best_of": 3}), "best_of"),
        (json!({"top_logprobs": 2}), "top_logprobs"),
        (json!({"max_tokenz": 5}), "max_tokenz"),
    ] {
        refused(&completion(a, extra), param);
    }
    // Misspelled fields on the other endpoints too.
    let chat = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokenz": 5});
    refused(&post(a, "/v1/chat/completions", &chat), "max_tokenz");
    let msg = json!({"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}],
                     "temprature": 0});
    refused(&post(a, "/v1/messages", &msg), "temprature");
    refused(
        &post(a, "/v1/responses", &json!({"input": "Hi", "max_output_token": 4})),
        "max_output_token",
    );
    srv.stop();
}
