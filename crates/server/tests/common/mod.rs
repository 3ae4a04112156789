//! A server on the loopback interface over the default model, and a minimal HTTP/1.1 client
//! (raw sockets, so tests can also cut a connection mid-stream).

#![allow(dead_code)]

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tessera_llama::Model;
use tessera_server::{Server, ServerConfig};

/// The default model, loaded once per test binary.
pub fn model() -> Arc<Model> {
    static M: OnceLock<Arc<Model>> = OnceLock::new();
    M.get_or_init(|| {
        let path = tessera_models::ensure(&tessera_models::SMOLLM2).expect("model");
        Arc::new(Model::load(path, tessera_backend_cpu::CpuDevice::shared()).expect("load"))
    })
    .clone()
}

/// Qwen2.5-Coder-0.5B-Instruct (its template renders tools; it has FIM tokens), loaded once
/// per test binary.
pub fn qwen() -> Arc<Model> {
    static M: OnceLock<Arc<Model>> = OnceLock::new();
    M.get_or_init(|| {
        let path = tessera_models::ensure(&tessera_models::QWEN25_CODER).expect("model");
        Arc::new(Model::load(path, tessera_backend_cpu::CpuDevice::shared()).expect("load"))
    })
    .clone()
}

/// Runs `tests/py/{script}` with `PYTHON` (which `cargo xtask ci` sets) on `args`; panics with
/// its output when it fails.
pub fn run_python(script: &str, args: &[&str]) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py").join(script);
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let out = std::process::Command::new(&python)
        .arg(&path)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python}: {e}"));
    assert!(
        out.status.success(),
        "{} failed (needs `pip install -r tools/requirements-ci.txt`, which cargo xtask ci does):\n{}{}",
        path.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A server with `np` slots, a queue of `queue`, and an optional key, on a free port.
pub fn server(np: usize, queue: usize, api_key: Option<&str>) -> Server {
    tessera_server::start(model(), config(np, queue, api_key), false).expect("server")
}

/// The configuration [`server`] uses.
pub fn config(np: usize, queue: usize, api_key: Option<&str>) -> ServerConfig {
    ServerConfig {
        host: "127.0.0.1".into(),
        port: 0,
        n_ctx: 1024 * np,
        n_parallel: np,
        n_threads: 2,
        flash_attn: true,
        cache_types: (tessera_llama::DType::F16, tessera_llama::DType::F16),
        sampling: Default::default(),
        queue,
        // Under 64 rows per step: answers do not depend on what shares a step (see
        // ServerConfig::n_batch).
        n_batch: 63,
        api_key: api_key.map(str::to_string),
        chat_template: None,
        model_name: "smollm2".into(),
        shutdown_timeout: std::time::Duration::from_secs(30),
        deterministic: false,
        reasoning_format: tessera_server::reasoning::ReasoningFormat::Deepseek,
        reasoning_budget: -1,
        reasoning_budget_message: None,
        reasoning: None,
        embedding: false,
        pooling: None,
        cache_ram_mib: 8192,
        hardening: Default::default(),
        loras: Vec::new(),
        lora_init_without_apply: false,
        context_shift: false,
        spec: None,
        vision: None,
    }
}

/// A response: status, headers (lower-case names), body.
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    s
}

fn write_request(s: &mut TcpStream, method: &str, path: &str, body: &[u8], extra: &[(&str, &str)]) {
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !body.is_empty() {
        req.push_str("Content-Type: application/json\r\n");
    }
    for (k, v) in extra {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    s.write_all(body).unwrap();
}

fn read_head(r: &mut BufReader<TcpStream>) -> (u16, Vec<(String, String)>) {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let status: u16 = line.split_whitespace().nth(1).expect("status").parse().unwrap();
    let mut headers = Vec::new();
    loop {
        line.clear();
        r.read_line(&mut line).unwrap();
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    (status, headers)
}

fn dechunk(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < raw.len() {
        let Some(nl) = raw[i..].windows(2).position(|w| w == b"\r\n") else { break };
        let n = usize::from_str_radix(std::str::from_utf8(&raw[i..i + nl]).unwrap().trim(), 16)
            .unwrap_or(0);
        i += nl + 2;
        if n == 0 {
            break;
        }
        out.extend_from_slice(&raw[i..(i + n).min(raw.len())]);
        i += n + 2;
    }
    out
}

/// One request, read to the end.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
    extra: &[(&str, &str)],
) -> Resp {
    let mut s = connect(addr);
    write_request(&mut s, method, path, body, extra);
    let mut r = BufReader::new(s);
    let (status, headers) = read_head(&mut r);
    let mut raw = Vec::new();
    r.read_to_end(&mut raw).unwrap();
    let chunked = headers.iter().any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    let bytes = if chunked { dechunk(&raw) } else { raw };
    Resp { status, headers, body: String::from_utf8_lossy(&bytes).into_owned() }
}

pub fn post(addr: SocketAddr, path: &str, body: &Value) -> Resp {
    request(addr, "POST", path, body.to_string().as_bytes(), &[])
}

pub fn get(addr: SocketAddr, path: &str) -> Resp {
    request(addr, "GET", path, b"", &[])
}

/// The `data:` payloads of a server-sent-event body.
pub fn sse_data(body: &str) -> Vec<String> {
    body.lines().filter_map(|l| l.strip_prefix("data: ")).map(str::to_string).collect()
}

/// A streaming request whose connection is dropped after `n` data lines.
pub fn stream_and_drop(addr: SocketAddr, body: &Value, n: usize) {
    let mut s = connect(addr);
    write_request(&mut s, "POST", "/v1/chat/completions", body.to_string().as_bytes(), &[]);
    let mut r = BufReader::new(s);
    let (status, _) = read_head(&mut r);
    assert_eq!(status, 200);
    let mut seen = 0;
    let mut line = String::new();
    while seen < n {
        line.clear();
        if r.read_line(&mut line).unwrap() == 0 {
            break;
        }
        if line.contains("data: ") {
            seen += 1;
        }
    }
    drop(r);
}

/// A metric's value from `/metrics`.
pub fn metric(addr: SocketAddr, name: &str) -> f64 {
    let m = get(addr, "/metrics").body;
    m.lines()
        .find_map(|l| l.strip_prefix(&format!("tessera:{name} ")))
        .unwrap_or_else(|| panic!("{name} missing from {m}"))
        .trim()
        .parse()
        .unwrap()
}

/// Waits (at most `secs`) until no slot is busy and nothing waits; the KV cells in use are
/// then exactly those the slots' caches account for (nothing leaked).
pub fn wait_idle(addr: SocketAddr, secs: u64) {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(secs) {
        if metric(addr, "requests_processing") == 0.0 && metric(addr, "requests_deferred") == 0.0 {
            assert_eq!(
                metric(addr, "kv_cache_tokens"),
                metric(addr, "kv_cache_tokens_in_slots"),
                "KV cells leaked"
            );
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the server did not go idle in {secs} s");
}
