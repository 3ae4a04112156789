//! `--context-shift` as llama-server's: a reply that fills the context keeps the request's
//! `n_keep` tokens, drops older ones and goes on; without it the reply ends with `length` at
//! the context's end. A shifted slot's cells past the kept tokens are not reused.

mod common;

use common::{get, model, post};
use serde_json::json;

fn server(shift: bool) -> tessera_server::Server {
    let cfg = tessera_server::ServerConfig {
        n_ctx: 256,
        context_shift: shift,
        ..common::config(1, 4, None)
    };
    tessera_server::start(model(), cfg, false).unwrap()
}

fn complete(addr: std::net::SocketAddr, n_keep: i64) -> serde_json::Value {
    let body = json!({"prompt": "Once upon a time", "n_predict": 300, "temperature": 0,
                      "n_keep": n_keep});
    let r = post(addr, "/completion", &body);
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()
}

#[test]
fn replies_go_on_past_a_full_context_with_context_shift() {
    let s = server(true);
    let a = complete(s.addr, -1);
    assert_eq!(a["timings"]["predicted_n"], 300, "{a}");
    assert_eq!(a["stop_type"], "limit", "{a}");
    // The slot keeps only the prompt's cells; the same request again gives the same reply.
    let slots = get(s.addr, "/slots").json();
    assert!(slots[0]["n_cached"].as_u64().unwrap() <= 4, "{slots}");
    let b = complete(s.addr, -1);
    assert_eq!(a["content"], b["content"]);
    // n_keep 0 is accepted too (only the BOS, where the model has one, stays).
    let c = complete(s.addr, 0);
    assert_eq!(c["timings"]["predicted_n"], 300, "{c}");
    let r = post(s.addr, "/completion", &json!({"prompt": "x", "n_keep": -2}));
    assert_eq!(r.status, 400, "{}", r.body);
    s.stop();

    let s = server(false);
    let a = complete(s.addr, -1);
    let n = a["timings"]["predicted_n"].as_u64().unwrap();
    assert!(n < 256, "{a}");
    assert_eq!(a["stop_type"], "limit", "{a}");
    s.stop();
}
