//! Speculative decoding in the server, per slot inside continuous batching: with
//! `--deterministic` (batch-invariant kernels), n-gram proposals and a draft model (the model
//! itself) give exactly the tokens of a server that does not speculate, greedy and seeded, for
//! one request and for two at once; replies carry `draft_n`/`draft_n_accepted` in `timings`
//! and `/metrics` counts them; the `speculative.*` fields are taken as llama-server takes them.

mod common;

use common::{get, model, post};
use serde_json::{json, Value};
use tessera_llama::speculative::NgramSimple;
use tessera_server::engine::{SpecConfig, SpecSource};

const PROMPT: &str = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\n\
                      def add(a, b):\n    return a + b\n\ndef sub(a, b):\n";

fn server(spec: Option<SpecSource>) -> tessera_server::Server {
    let cfg = tessera_server::ServerConfig {
        deterministic: true,
        spec: spec.map(|source| SpecConfig { source, n_max: 8, n_min: 0, p_min: 0.0 }),
        ..common::config(2, 8, None)
    };
    tessera_server::start(model(), cfg, false).unwrap()
}

fn complete(addr: std::net::SocketAddr, extra: Value) -> Value {
    let mut body = json!({"prompt": PROMPT, "n_predict": 40, "temperature": 0});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    let r = post(addr, "/completion", &body);
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()
}

#[test]
fn speculation_keeps_the_tokens_of_plain_decoding() {
    let plain = server(None);
    let seeded = json!({"temperature": 0.8, "seed": 11, "top_k": 40});
    let want_greedy = complete(plain.addr, json!({}))["content"].clone();
    let want_seeded = complete(plain.addr, seeded.clone())["content"].clone();
    let r = post(
        plain.addr,
        "/completion",
        &json!({"prompt": "x", "speculative.type": "ngram-simple"}),
    );
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("does not speculate"), "{}", r.body);
    plain.stop();

    let sources =
        [SpecSource::Ngram(NgramSimple { size_n: 2, size_m: 8 }), SpecSource::Draft(model())];
    for source in sources {
        let name = source.name();
        let s = server(Some(source));
        let a = complete(s.addr, json!({}));
        assert_eq!(a["content"], want_greedy, "{name}: {a}");
        let drafted = a["timings"]["draft_n"].as_u64().unwrap_or(0);
        let kept = a["timings"]["draft_n_accepted"].as_u64().unwrap_or(0);
        assert!(drafted > 0 && kept > 0, "{name}: {}", a["timings"]);
        assert_eq!(complete(s.addr, seeded.clone())["content"], want_seeded, "{name} seeded");
        // Two at once: each its own tokens.
        let (x, y) = std::thread::scope(|sc| {
            let x = sc.spawn(|| complete(s.addr, json!({})));
            let y = sc.spawn(|| complete(s.addr, seeded.clone()));
            (x.join().unwrap(), y.join().unwrap())
        });
        assert_eq!(
            (x["content"].clone(), y["content"].clone()),
            (want_greedy.clone(), want_seeded.clone()),
            "{name}"
        );
        // speculative.n_max 0 (or type none) turns it off for the request.
        let off = complete(s.addr, json!({"speculative.n_max": 0}));
        assert!(off["timings"].get("draft_n").is_none(), "{name}: {}", off["timings"]);
        assert_eq!(off["content"], want_greedy);
        let off = complete(s.addr, json!({"speculative.type": "none"}));
        assert!(off["timings"].get("draft_n").is_none());
        let metrics = get(s.addr, "/metrics").body;
        let line = metrics
            .lines()
            .find(|l| l.starts_with("llamacpp:spec_decode_num_accepted_tokens_total "))
            .unwrap();
        assert!(line.split(' ').nth(1).unwrap().parse::<f64>().unwrap() > 0.0, "{metrics}");
        // Fields llama-server has but this server cannot honour are named.
        let other = if name == "ngram-simple" { "draft-simple" } else { "ngram-simple" };
        let r = post(s.addr, "/completion", &json!({"prompt": "x", "speculative.type": other}));
        assert_eq!(r.status, 400, "{}", r.body);
        assert!(r.body.contains(&format!("speculates with {name}")), "{}", r.body);
        let r =
            post(s.addr, "/completion", &json!({"prompt": "x", "speculative.type": "ngram-mod"}));
        assert_eq!(r.status, 400, "{}", r.body);
        let r = post(s.addr, "/completion", &json!({"prompt": "x", "speculative.n_max": -1}));
        assert_eq!(r.status, 400, "{}", r.body);
        s.stop();
    }
}
