//! LoRA adapters in the server, as llama-server serves them: `GET /lora-adapters` lists them,
//! `POST /lora-adapters` sets the global scales (adapters not listed: 0), a request's `lora`
//! runs it at its own scales; requests at other scales are never decoded in one step nor
//! share cached prompts (each gets the text it gets alone), and bad ids are named errors.

mod common;

use common::{get, model, post};
use serde_json::{json, Value};
use std::sync::Arc;
use tessera_llama::LoraAdapter;

fn complete(addr: std::net::SocketAddr, prompt: &str, lora: Option<Value>) -> String {
    let mut body = json!({"prompt": prompt, "n_predict": 12, "temperature": 0});
    if let Some(l) = lora {
        body["lora"] = l;
    }
    let r = post(addr, "/completion", &body);
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()["content"].as_str().unwrap().to_string()
}

#[test]
fn adapters_are_listed_scaled_globally_and_per_request() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("adapter.gguf");
    let m = model();
    let spec = tessera_llama::synth::RandomLora {
        targets: vec!["attn_q".into(), "attn_v".into()],
        rank: 8,
        amp: 0.3,
        alpha: None,
        task_name: Some("test".into()),
        seed: 0x9e37_79b9_7f4a_7c15,
    };
    tessera_llama::synth::write_random_lora(&m, &spec, &path).unwrap();
    let adapter = Arc::new(LoraAdapter::load(&m, &path).unwrap());
    let cfg =
        tessera_server::ServerConfig { loras: vec![(adapter, 1.0)], ..common::config(2, 8, None) };
    let server = tessera_server::start(m, cfg, false).unwrap();
    let addr = server.addr;

    let list = get(addr, "/lora-adapters").json();
    assert_eq!(list[0]["id"], 0);
    assert_eq!(list[0]["scale"], 1.0);
    assert_eq!(list[0]["task_name"], "test");
    assert!(list[0]["path"].as_str().unwrap().ends_with("adapter.gguf"));

    let (p1, p2) = ("The capital of France is", "Once upon a time, in a small village");
    let with = complete(addr, p1, None);
    let off = complete(addr, p1, Some(json!([{"id": 0, "scale": 0}])));
    assert_ne!(with, off, "the adapter changed nothing");
    // The same prompt again at scale 1: the cells cached at scale 0 are not reused.
    assert_eq!(complete(addr, p1, Some(json!([{"id": 0, "scale": 1.0}]))), with);

    // The global scale: 0 (an empty list sets every adapter to 0), then back.
    let r = post(addr, "/lora-adapters", &json!([]));
    assert_eq!((r.status, r.json()["success"].clone()), (200, json!(true)), "{}", r.body);
    assert_eq!(get(addr, "/lora-adapters").json()[0]["scale"], 0.0);
    assert_eq!(complete(addr, p1, None), off);
    let r = post(addr, "/lora-adapters", &json!([{"id": 0, "scale": 1}]));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(complete(addr, p1, None), with);

    // Two requests at different scales at once (two slots): each gets its text alone.
    let alone2 = complete(addr, p2, Some(json!([{"id": 0, "scale": 0}])));
    assert_ne!(complete(addr, p2, None), alone2, "the adapter changed nothing on the second");
    let both = std::thread::scope(|s| {
        let a = s.spawn(|| complete(addr, p1, Some(json!([{"id": 0, "scale": 1}]))));
        let b = s.spawn(|| complete(addr, p2, Some(json!([{"id": 0, "scale": 0}]))));
        (a.join().unwrap(), b.join().unwrap())
    });
    assert_eq!(both, (with.clone(), alone2));

    // Bad entries are named.
    let r = post(addr, "/completion", &json!({"prompt": p1, "lora": [{"id": 3, "scale": 1}]}));
    assert_eq!(r.status, 400);
    let e = r.json();
    assert_eq!(e["error"]["param"], "lora[0].id", "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("no LoRA adapter 3"), "{e}");
    let r = post(addr, "/completion", &json!({"prompt": p1, "lora": [{"id": 0, "scale": "x"}]}));
    assert_eq!((r.status, r.json()["error"]["param"].clone()), (400, json!("lora[0].scale")));
    let r = post(addr, "/completion", &json!({"prompt": p1, "lora": [{"id": 0, "weight": 1}]}));
    assert_eq!((r.status, r.json()["error"]["param"].clone()), (400, json!("lora[0].weight")));
    let r = post(addr, "/completion", &json!({"prompt": p1, "lora": {"id": 0}}));
    assert_eq!(r.status, 400);
    let r = post(addr, "/lora-adapters", &json!({"id": 0, "scale": 1}));
    assert_eq!(r.status, 400);
    assert!(r.body.contains("must be an array"), "{}", r.body);
    server.stop();
}

#[test]
fn without_adapters_a_request_lora_is_refused_by_id() {
    let server = tessera_server::start(model(), common::config(1, 4, None), false).unwrap();
    assert_eq!(get(server.addr, "/lora-adapters").json(), json!([]));
    let r = post(
        server.addr,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}], "lora": [{"id": 0, "scale": 1}]}),
    );
    assert_eq!(r.status, 400);
    assert!(r.body.contains("no LoRA adapters"), "{}", r.body);
    // An empty list is no adapter at all.
    let r = post(
        server.addr,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}], "lora": [], "max_tokens": 2}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    server.stop();
}
