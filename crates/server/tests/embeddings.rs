//! `--embedding` on SmolLM2-135M: the official `openai` client's embeddings
//! (tests/py/embeddings_client.py), llama-server's `/embedding` with per-token rows, inputs
//! batched together equal to inputs alone, and the 501s and start-up errors that keep the two
//! modes apart.

mod common;

use common::*;
use serde_json::{json, Value};
use tessera_llama::Pooling;
use tessera_server::ServerConfig;

fn embedding_config(np: usize, pooling: Option<Pooling>) -> ServerConfig {
    ServerConfig { embedding: true, pooling, ..config(np, 8, None) }
}

fn vector(v: &Value) -> Vec<f32> {
    v.as_array().expect("an array").iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

#[test]
fn the_openai_client_gets_embeddings() {
    let srv = tessera_server::start(model(), embedding_config(4, Some(Pooling::Mean)), false)
        .expect("server");
    run_python("embeddings_client.py", &[&format!("http://{}", srv.addr)]);
    srv.stop();
}

#[test]
fn inputs_sent_together_get_the_vectors_they_get_alone() {
    let srv = tessera_server::start(model(), embedding_config(4, Some(Pooling::Last)), false)
        .expect("server");
    let a = srv.addr;
    let texts: Vec<String> = (0..6)
        .map(|i| format!("Sentence number {i} is about {}.", ["rivers", "code", "bread"][i % 3]))
        .collect();
    let alone: Vec<Vec<f32>> = texts
        .iter()
        .map(|t| {
            let r = post(a, "/v1/embeddings", &json!({"input": t}));
            assert_eq!(r.status, 200, "{}", r.body);
            vector(&r.json()["data"][0]["embedding"])
        })
        .collect();
    // Six inputs in one request (batches of up to four sequences), and from four clients at
    // once.
    let r = post(a, "/v1/embeddings", &json!({"input": texts}));
    assert_eq!(r.status, 200, "{}", r.body);
    let together: Vec<Vec<f32>> =
        r.json()["data"].as_array().unwrap().iter().map(|d| vector(&d["embedding"])).collect();
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let t = texts[i].clone();
            std::thread::spawn(move || {
                let r = post(a, "/v1/embeddings", &json!({"input": t}));
                assert_eq!(r.status, 200, "{}", r.body);
                vector(&r.json()["data"][0]["embedding"])
            })
        })
        .collect();
    let concurrent: Vec<Vec<f32>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    for (i, v) in alone.iter().enumerate() {
        let c = tessera_llama::embed::cosine(v, &together[i]);
        assert!(c > 0.99999, "input {i}: cosine {c} batched against alone");
        if let Some(w) = concurrent.get(i) {
            let c = tessera_llama::embed::cosine(v, w);
            assert!(c > 0.99999, "input {i}: cosine {c} concurrent against alone");
        }
    }
    srv.stop();
}

#[test]
fn pooling_none_gives_every_tokens_row_on_the_native_endpoint() {
    let srv = tessera_server::start(model(), embedding_config(1, Some(Pooling::None)), false)
        .expect("server");
    let a = srv.addr;
    let text = "Rows for every token";
    let n_tok =
        post(a, "/tokenize", &json!({"content": text})).json()["tokens"].as_array().unwrap().len();
    let r = post(a, "/embedding", &json!({"content": text}));
    assert_eq!(r.status, 200, "{}", r.body);
    let rows = r.json()[0]["embedding"].as_array().unwrap().clone();
    assert_eq!(rows.len(), n_tok);
    for row in &rows {
        let v = vector(row);
        assert_eq!(v.len(), 576);
        let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "{norm}");
    }
    // OpenAI's format has one vector per input: refused, saying what to do.
    let r = post(a, "/v1/embeddings", &json!({"input": text}));
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("--pooling"), "{}", r.body);
    // embd_normalize -1: the raw rows (not unit length).
    let r = post(a, "/embedding", &json!({"content": text, "embd_normalize": -1}));
    let v = vector(&r.json()[0]["embedding"][0]);
    let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() > 1e-2, "{norm}");
    srv.stop();
}

#[test]
fn each_mode_refuses_the_others_endpoints() {
    let srv = tessera_server::start(model(), embedding_config(1, Some(Pooling::Mean)), false)
        .expect("server");
    let r = post(
        srv.addr,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!(r.status, 501, "{}", r.body);
    assert!(r.body.contains("--embedding"), "{}", r.body);
    let r = post(srv.addr, "/v1/completions", &json!({"prompt": "hi"}));
    assert_eq!(r.status, 501, "{}", r.body);
    srv.stop();

    let srv = server(1, 4, None);
    let r = post(srv.addr, "/v1/embeddings", &json!({"input": "hi"}));
    assert_eq!(r.status, 501, "{}", r.body);
    assert!(r.body.contains("--embedding"), "{}", r.body);
    srv.stop();

    let e = tessera_server::start(
        model(),
        ServerConfig { pooling: Some(Pooling::Mean), ..config(1, 4, None) },
        false,
    )
    .err()
    .expect("--pooling without --embedding");
    assert!(e.to_string().contains("needs --embedding"), "{e}");
    let e = tessera_server::start(model(), embedding_config(1, Some(Pooling::Rank)), false)
        .err()
        .expect("rank pooling");
    assert!(e.to_string().contains("reranking is not supported"), "{e}");
}

/// One request's inputs are bounded (OpenAI's 2,048; 20,000 took a minute and a 248 MB reply),
/// and the model field is a string.
#[test]
fn one_request_embeds_at_most_2048_inputs() {
    let srv = tessera_server::start(model(), embedding_config(1, Some(Pooling::Mean)), false)
        .expect("server");
    let inputs: Vec<&str> = vec!["a"; 2049];
    let r = post(srv.addr, "/v1/embeddings", &json!({ "input": inputs }));
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("2048"), "{}", r.body);
    let r = post(srv.addr, "/v1/embeddings", &json!({"input": "a", "model": 5}));
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.json()["error"]["param"], "model");
    let r = post(srv.addr, "/v1/embeddings", &json!({ "input": vec!["a"; 3] }));
    assert_eq!(r.status, 200, "{}", r.body);
    srv.stop();
}
