//! `tessera serve` against careless and hostile clients, on SmolLM2-135M over loopback:
//! shutdown ends at its deadline whatever the clients do, half-sent headers and bodies are cut
//! off, connections are capped, grammars that cannot run are a 400 before the job is queued,
//! per-request limits, API keys and CORS origins.

mod common;

use common::*;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};
use tessera_server::listen::Hardening;
use tessera_server::ServerConfig;

fn hardened(h: Hardening, shutdown: Duration) -> ServerConfig {
    ServerConfig { hardening: h, shutdown_timeout: shutdown, ..config(1, 4, None) }
}

/// A connection that sent `bytes` and nothing more.
fn half_sent(a: SocketAddr, bytes: &str) -> TcpStream {
    let mut s = TcpStream::connect(a).unwrap();
    s.write_all(bytes.as_bytes()).unwrap();
    s
}

/// Reads until the server closes the connection (true) or `limit` passes (false); what was
/// read comes back too.
fn closed_within(s: &mut TcpStream, limit: Duration) -> (bool, String) {
    s.set_read_timeout(Some(limit)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let t = Instant::now();
    loop {
        match s.read(&mut buf) {
            Ok(0) => return (true, String::from_utf8_lossy(&got).into_owned()),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return (true, String::from_utf8_lossy(&got).into_owned())
            }
            Err(_) => return (false, String::from_utf8_lossy(&got).into_owned()),
        }
        if t.elapsed() > limit {
            return (false, String::from_utf8_lossy(&got).into_owned());
        }
    }
}

const HALF_HEADERS: &str = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Ty";
const HALF_BODY: &str =
    "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\":";

/// Half-sent headers, a half-sent body and a stream nobody reads do not keep the server alive
/// past its deadline (they did: graceful shutdown waited for every connection).
#[test]
fn shutdown_ends_at_the_deadline_whatever_the_clients_do() {
    let h = Hardening { header_timeout: Duration::from_secs(60), ..Hardening::default() };
    let srv = tessera_server::start(model(), hardened(h, Duration::from_secs(1)), false).unwrap();
    let a = srv.addr;
    let _c1 = half_sent(a, HALF_HEADERS);
    let _c2 = half_sent(a, HALF_BODY);
    // A long stream whose client never reads a byte.
    let body = json!({"prompt": "Once", "max_tokens": 100000, "ignore_eos": true, "stream": true})
        .to_string();
    let _c3 = half_sent(
        a,
        &format!(
            "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    );
    std::thread::sleep(Duration::from_millis(500));
    let (tx, rx) = std::sync::mpsc::channel();
    let t = Instant::now();
    std::thread::spawn(move || {
        srv.stop();
        let _ = tx.send(());
    });
    assert!(rx.recv_timeout(Duration::from_secs(15)).is_ok(), "the server did not stop");
    // The deadline (1 s) and the moment the last events get to leave (1 s), with room.
    assert!(t.elapsed() < Duration::from_secs(6), "stopped after {:?}", t.elapsed());
}

/// Headers must arrive within --header-timeout and bodies within --timeout (a body cut off
/// gets a 408); before, such connections stayed open for ever.
#[test]
fn slow_headers_and_bodies_are_cut_off() {
    let h = Hardening {
        header_timeout: Duration::from_secs(1),
        timeout: Duration::from_secs(1),
        ..Hardening::default()
    };
    let srv = tessera_server::start(model(), hardened(h, Duration::from_secs(5)), false).unwrap();
    let a = srv.addr;
    let mut c = half_sent(a, HALF_HEADERS);
    let (closed, _) = closed_within(&mut c, Duration::from_secs(8));
    assert!(closed, "half-sent headers kept their connection");
    let mut c = half_sent(a, HALF_BODY);
    let (closed, got) = closed_within(&mut c, Duration::from_secs(8));
    assert!(got.starts_with("HTTP/1.1 408"), "{got}");
    assert!(got.contains("--timeout"), "{got}");
    let _ = closed;
    assert_eq!(get(a, "/health").status, 200);
    srv.stop();
}

/// More connections than --max-connections are closed as they arrive, and a freed slot is
/// usable again.
#[test]
fn connections_are_capped() {
    let h = Hardening {
        max_connections: 3,
        header_timeout: Duration::from_secs(60),
        ..Hardening::default()
    };
    let srv = tessera_server::start(model(), hardened(h, Duration::from_secs(1)), false).unwrap();
    let a = srv.addr;
    let mut held: Vec<TcpStream> = (0..3).map(|_| half_sent(a, HALF_HEADERS)).collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut extra = half_sent(a, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    let (closed, got) = closed_within(&mut extra, Duration::from_secs(5));
    assert!(closed && got.is_empty(), "a connection over the cap was served: {got}");
    drop(held.pop());
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(get(a, "/health").status, 200);
    drop(held);
    srv.stop();
}

/// A grammar that compiles but cannot run is a 400 naming its field before anything is queued,
/// streaming or not (was a 500 with llguidance's parser state, after a 200 when streaming).
#[test]
fn grammars_that_cannot_run_are_refused_at_admission() {
    let srv = server(1, 4, None);
    let a = srv.addr;
    let alts: Vec<String> = (0..10000).map(|i| format!("\"w{i}\"")).collect();
    for (grammar, stream) in [
        ("root ::= \"a\"{100000}".to_string(), false),
        ("root ::= \"a\"{100000}".to_string(), true),
        (format!("root ::= {}", alts.join(" | ")), true),
    ] {
        let r =
            post(a, "/completion", &json!({"prompt": "x", "grammar": grammar, "stream": stream}));
        assert_eq!(r.status, 400, "{}", r.body);
        let e = &r.json()["error"];
        assert_eq!(e["param"], "grammar");
        let msg = e["message"].as_str().unwrap();
        assert!(msg.contains("cannot be run") && msg.len() < 300, "{msg}");
    }
    let r = post(a, "/completion", &json!({"prompt": "x", "json_schema": {"$ref": "#"}}));
    assert_eq!(r.status, 400, "{}", r.body);
    srv.stop();
}

/// Per-request limits: OpenAI's metadata limits on /v1/responses, more prompts than the queue
/// in one request (a 400 on any load, not a 503 on an idle server), and the type checks the
/// review found missing.
#[test]
fn per_request_limits() {
    let srv = server(1, 4, None);
    let a = srv.addr;
    let meta: serde_json::Map<String, Value> =
        (0..17).map(|i| (format!("k{i}"), json!("v"))).collect();
    let r =
        post(a, "/v1/responses", &json!({"input": "Hi", "max_output_tokens": 2, "metadata": meta}));
    assert_eq!(r.status, 400, "{}", r.body);
    let r = post(
        a,
        "/v1/responses",
        &json!({"input": "Hi", "max_output_tokens": 2, "metadata": {"k": "v".repeat(513)}}),
    );
    assert_eq!(r.status, 400, "{}", r.body);
    let r =
        post(a, "/v1/completions", &json!({"prompt": ["a", "b", "c", "d", "e"], "max_tokens": 1}));
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.json()["error"]["param"], "prompt");
    let r = post(
        a,
        "/v1/completions",
        &json!({"prompt": ["a", "b"], "max_tokens": 1, "temperature": 0}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    for (path, body, param) in [
        ("/v1/completions", json!({"prompt": "a", "stop": ""}), "stop"),
        ("/v1/responses", json!({"input": "a", "text": 5}), "text"),
        (
            "/v1/messages",
            json!({"max_tokens": 2, "messages": [{"role": "user", "content": "a"}], "thinking": "on"}),
            "thinking",
        ),
    ] {
        let r = post(a, path, &body);
        assert_eq!(r.status, 400, "{path}: {}", r.body);
        let e = &r.json()["error"];
        let named =
            e["param"] == param || e["message"].as_str().is_some_and(|m| m.starts_with(param));
        assert!(named, "{path}: {}", r.body);
    }
    srv.stop();
}

/// An empty key is a configuration error (it started a "protected" server that took an empty
/// key); several keys work; only listed CORS origins get the headers.
#[test]
fn keys_and_origins() {
    for bad in ["", "a,,b", " "] {
        let cfg = ServerConfig { api_key: Some(bad.into()), ..config(1, 4, None) };
        assert!(tessera_server::start(model(), cfg, false).is_err(), "{bad:?} accepted");
    }
    let h = Hardening { cors_origins: vec!["https://ok.example".into()], ..Hardening::default() };
    let cfg = ServerConfig { api_key: Some("one,two".into()), hardening: h, ..config(1, 4, None) };
    let srv = tessera_server::start(model(), cfg, false).unwrap();
    let a = srv.addr;
    for (key, want) in [("one", 200), ("two", 200), ("on", 401), ("one,two", 401), ("", 401)] {
        let auth = format!("Bearer {key}");
        let r = request(a, "GET", "/v1/models", b"", &[("Authorization", &auth)]);
        assert_eq!(r.status, want, "{key:?}");
    }
    let ok = request(a, "OPTIONS", "/v1/models", b"", &[("Origin", "https://ok.example")]);
    assert_eq!(ok.header("access-control-allow-origin"), Some("https://ok.example"));
    let other = request(a, "OPTIONS", "/v1/models", b"", &[("Origin", "https://evil.example")]);
    assert_eq!(other.header("access-control-allow-origin"), None);
    srv.stop();
}
