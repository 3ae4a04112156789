//! `tessera serve` end to end on loopback, bounded in count and time: the endpoints, a table
//! of bad inputs, the API key, streaming, continuous batching under concurrent clients (the
//! same greedy answers as one at a time, nothing leaked), disconnects, a full queue, and a
//! graceful stop. The servers take at most 63 tokens per step, under the 64 rows from which
//! the CPU's flash attention changes algorithm, so answers cannot depend on what shares a
//! step (the KV cache keeps each sequence's cells in position order for the same reason).

mod common;

use common::*;
use serde_json::{json, Value};
use std::time::Duration;

fn chat_body(content: &str, max_tokens: usize, stream: bool) -> Value {
    json!({
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": stream,
    })
}

fn content(r: &Resp) -> String {
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()["choices"][0]["message"]["content"].as_str().unwrap().to_string()
}

fn streamed_text(r: &Resp) -> (String, Vec<Value>) {
    assert_eq!(r.status, 200, "{}", r.body);
    let data = sse_data(&r.body);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"), "{}", r.body);
    let chunks: Vec<Value> =
        data[..data.len() - 1].iter().map(|d| serde_json::from_str(d).unwrap()).collect();
    let text = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect::<String>();
    (text, chunks)
}

#[test]
fn endpoints_answer_like_llama_server() {
    let srv = server(2, 8, None);
    let a = srv.addr;
    assert_eq!(get(a, "/health").json()["status"], "ok");
    let models = get(a, "/v1/models").json();
    assert_eq!(models["data"][0]["id"], "smollm2");
    // llama-server's /props: per-slot context, slots, the chat template.
    let props = get(a, "/props").json();
    assert_eq!(props["total_slots"], 2);
    assert!(props["default_generation_settings"]["n_ctx"].as_u64().is_some_and(|n| n > 0));
    assert!(props["chat_template"].as_str().is_some_and(|t| t.contains("im_start")), "{props}");
    let toks = post(a, "/tokenize", &json!({"content": "The capital of France is"})).json();
    // llama.cpp's ids for this text (testdata/refs).
    assert_eq!(toks["tokens"], json!([504, 3575, 282, 4649, 314]));
    let text = post(a, "/detokenize", &json!({"tokens": toks["tokens"]})).json();
    assert_eq!(text["content"], "The capital of France is");
    let pieces = post(a, "/tokenize", &json!({"content": "Paris", "with_pieces": true})).json();
    assert_eq!(pieces["tokens"][0]["piece"], "Paris");
    let page = get(a, "/");
    assert_eq!(page.status, 200);
    assert!(page.body.contains("<title>Tessera chat</title>"));
    // Non-streaming and streaming give the same greedy text; usage adds up.
    let r =
        post(a, "/v1/chat/completions", &chat_body("Write a long poem about the sea.", 12, false));
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    let u = &v["usage"];
    assert_eq!(u["completion_tokens"], 12);
    assert_eq!(u["total_tokens"].as_u64(), Some(u["prompt_tokens"].as_u64().unwrap() + 12));
    let mut body = chat_body("Write a long poem about the sea.", 12, true);
    body["stream_options"] = json!({"include_usage": true});
    let s = post(a, "/v1/chat/completions", &body);
    assert!(s.header("content-type").unwrap().starts_with("text/event-stream"));
    let (text, chunks) = streamed_text(&s);
    assert_eq!(text, content(&r));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let usage_chunk = chunks.last().unwrap();
    assert_eq!(usage_chunk["choices"], json!([]));
    assert_eq!(usage_chunk["usage"]["completion_tokens"], 12);
    // The second identical prompt came from the slot's cache.
    assert!(usage_chunk["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap() > 0);
    // Completions, stop strings, logprobs.
    let c = post(
        a,
        "/v1/completions",
        &json!({"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}),
    )
    .json();
    assert_eq!(c["object"], "text_completion");
    // llama.cpp's greedy continuation (testdata/refs): " Paris.\n\nThe United".
    assert!(c["choices"][0]["text"].as_str().unwrap().starts_with(" Paris.\n\nThe"), "{c}");
    let c = post(
        a,
        "/v1/completions",
        &json!({"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0, "stop": ["\n"]}),
    )
    .json();
    assert_eq!(c["choices"][0]["text"], " Paris.");
    assert_eq!(c["choices"][0]["finish_reason"], "stop");
    let mut lp = chat_body("Hi", 3, false);
    lp["logprobs"] = json!(true);
    lp["top_logprobs"] = json!(2);
    let v = post(a, "/v1/chat/completions", &lp).json();
    let first = &v["choices"][0]["logprobs"]["content"][0];
    assert!(first["logprob"].as_f64().unwrap() <= 0.0);
    assert_eq!(first["top_logprobs"].as_array().unwrap().len(), 2);
    // Greedy: the chosen token is the most likely one.
    assert_eq!(first["top_logprobs"][0]["token"], first["token"]);
    wait_idle(a, 30);
    srv.stop();
}

#[test]
fn bad_input_gets_a_4xx_naming_the_field() {
    let srv = server(1, 4, None);
    let a = srv.addr;
    let long = "word ".repeat(1500);
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        ("/v1/chat/completions", b"{not json".to_vec(), 400, "invalid JSON"),
        ("/v1/chat/completions", b"[1, 2]".to_vec(), 400, "JSON object"),
        ("/v1/chat/completions", b"{}".to_vec(), 400, "messages"),
        ("/v1/chat/completions", br#"{"messages": []}"#.to_vec(), 400, "messages"),
        ("/v1/chat/completions", br#"{"messages": "hi"}"#.to_vec(), 400, "messages"),
        ("/v1/chat/completions", br#"{"messages": [42]}"#.to_vec(), 400, "messages[0]"),
        (
            "/v1/chat/completions",
            br#"{"messages": [{"content": "x"}]}"#.to_vec(),
            400,
            "messages[0].role",
        ),
        (
            "/v1/chat/completions",
            br#"{"messages": [{"role": "wizard", "content": "x"}]}"#.to_vec(),
            400,
            "unknown role",
        ),
        (
            "/v1/chat/completions",
            br#"{"messages": [{"role": "user", "content": 7}]}"#.to_vec(),
            400,
            "messages[0].content",
        ),
        (
            "/v1/chat/completions",
            br#"{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}"#.to_vec(),
            400,
            "image_url",
        ),
        (
            "/v1/chat/completions",
            br#"{"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}"#.to_vec(),
            400,
            "temperature",
        ),
        (
            "/v1/chat/completions",
            br#"{"messages": [{"role": "user", "content": "x"}], "temperature": 9}"#.to_vec(),
            400,
            "temperature",
        ),
        (
            "/v1/chat/completions",
            br#"{"messages": [{"role": "user", "content": "x"}], "top_p": -1}"#.to_vec(),
            400,
            "top_p",
        ),
        (
            "/v1/chat/completions",
            br#"{"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}"#.to_vec(),
            400,
            "max_tokens",
        ),
        (
            "/v1/chat/completions",
            br#"{"messages": [{"role": "user", "content": "x"}], "max_tokens": 2.5}"#.to_vec(),
            400,
            "max_tokens",
        ),
        (
            "/v1/chat/completions",
            br#"{"messages": [{"role": "user", "content": "x"}], "stream": "yes"}"#.to_vec(),
            400,
            "stream",
        ),
        (
            "/v1/chat/completions",
            br#"{"messages": [{"role": "user", "content": "x"}], "stop": 3}"#.to_vec(),
            400,
            "stop",
        ),
        (
            "/v1/chat/completions",
            br#"{"messages": [{"role": "user", "content": "x"}], "stop": [""]}"#.to_vec(),
            400,
            "stop[0]",
        ),
        (
            "/v1/chat/completions",
            br#"{"messages": [{"role": "user", "content": "x"}], "n": 2}"#.to_vec(),
            400,
            "n:",
        ),
        (
            "/v1/chat/completions",
            br#"{"messages": [{"role": "user", "content": "x"}], "top_logprobs": 3}"#.to_vec(),
            400,
            "top_logprobs",
        ),
        (
            "/v1/chat/completions",
            br#"{"messages": [{"role": "user", "content": "x"}], "presence_penalty": 5}"#.to_vec(),
            400,
            "presence_penalty",
        ),
        (
            "/v1/chat/completions",
            br#"{"messages": [{"role": "user", "content": "x"}], "stream_options": 1}"#.to_vec(),
            400,
            "stream_options",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": long}]}).to_string().into_bytes(),
            400,
            "context",
        ),
        ("/v1/completions", b"{}".to_vec(), 400, "prompt"),
        ("/v1/completions", br#"{"prompt": [1, 99999999]}"#.to_vec(), 400, "prompt[1]"),
        ("/completion", br#"{"prompt": ["a", "b"]}"#.to_vec(), 400, "prompt"),
        ("/infill", br#"{"input_prefix": 3}"#.to_vec(), 400, "input_prefix"),
        (
            "/infill",
            br#"{"input_extra": [{"filename": 1}]}"#.to_vec(),
            400,
            "input_extra[0].filename",
        ),
        ("/v1/completions", br#"{"prompt": "x", "logprobs": 99}"#.to_vec(), 400, "logprobs"),
        ("/tokenize", br#"{"content": 5}"#.to_vec(), 400, "content"),
        ("/detokenize", br#"{"tokens": [1, -3]}"#.to_vec(), 400, "tokens[1]"),
        ("/detokenize", br#"{"tokens": [99999999]}"#.to_vec(), 400, "tokens[0]"),
        ("/v1/nothing", b"{}".to_vec(), 404, "no endpoint"),
        ("/v1/chat/completions", vec![b' '; 2 << 20], 413, "body"),
    ];
    assert!(cases.len() >= 20);
    for (path, body, status, needle) in &cases {
        let r = request(a, "POST", path, body, &[]);
        assert_eq!(
            r.status,
            *status,
            "{path} {}: {}",
            String::from_utf8_lossy(&body[..body.len().min(80)]),
            r.body
        );
        let e = r.json();
        let msg = e["error"]["message"].as_str().unwrap_or_else(|| panic!("{}", r.body));
        assert!(msg.contains(needle), "{path}: '{msg}' should mention '{needle}'");
        assert!(e["error"]["type"].is_string(), "{}", r.body);
    }
    let e =
        post(a, "/v1/chat/completions", &json!({"messages": [{"role": "user", "content": long}]}))
            .json();
    assert_eq!(e["error"]["code"], "context_length_exceeded");
    assert_eq!(e["error"]["param"], "messages");
    // Still serving.
    assert!(!content(&post(a, "/v1/chat/completions", &chat_body("Hi", 2, false))).is_empty());
    wait_idle(a, 30);
    srv.stop();
}

#[test]
fn the_api_key_guards_everything_but_health() {
    let srv = server(1, 4, Some("sekret"));
    let a = srv.addr;
    assert_eq!(get(a, "/health").status, 200);
    for (m, p) in [
        ("GET", "/v1/models"),
        ("GET", "/metrics"),
        ("POST", "/v1/chat/completions"),
        ("POST", "/tokenize"),
    ] {
        let r = request(a, m, p, b"{}", &[]);
        assert_eq!(r.status, 401, "{p}");
        assert_eq!(r.json()["error"]["code"], "invalid_api_key");
        let r = request(a, m, p, b"{}", &[("Authorization", "Bearer wrong")]);
        assert_eq!(r.status, 401, "{p}");
    }
    let r = request(a, "GET", "/v1/models", b"", &[("Authorization", "Bearer sekret")]);
    assert_eq!(r.status, 200);
    srv.stop();
}

#[test]
fn concurrent_clients_get_the_answers_of_one_at_a_time() {
    let srv = server(4, 64, None);
    let a = srv.addr;
    let prompts = [
        "Write a haiku about rivers.",
        "What is 2 + 2?",
        "Name a fruit that is red.",
        "Give me one tip for sleeping well.",
        "Translate 'good morning' to Spanish.",
        "What color is the sky?",
        "Say something about cats.",
        "List two planets.",
    ];
    // One at a time first.
    let want: Vec<String> = prompts
        .iter()
        .map(|p| content(&post(a, "/v1/chat/completions", &chat_body(p, 16, false))))
        .collect();
    wait_idle(a, 30);
    // 16 clients x 8 requests, half of them streaming.
    let handles: Vec<_> = (0..16)
        .map(|c| {
            let prompts = prompts.map(str::to_string);
            std::thread::spawn(move || {
                let mut got = Vec::new();
                for k in 0..8 {
                    let i = (c + k) % prompts.len();
                    let stream = (c + k) % 2 == 0;
                    let r = post(a, "/v1/chat/completions", &chat_body(&prompts[i], 16, stream));
                    let text = if stream { streamed_text(&r).0 } else { content(&r) };
                    got.push((i, text));
                }
                got
            })
        })
        .collect();
    let mut n = 0;
    for h in handles {
        for (i, text) in h.join().unwrap() {
            assert_eq!(text, want[i], "prompt {i}: batched answer differs from the single one");
            n += 1;
        }
    }
    assert_eq!(n, 128);
    wait_idle(a, 60);
    assert!(metric(a, "requests_total") >= 136.0);
    srv.stop();
}

#[test]
fn a_client_that_disconnects_frees_its_slot() {
    let srv = server(1, 4, None);
    let a = srv.addr;
    stream_and_drop(a, &chat_body("Tell me a very long story about a dragon.", 400, true), 3);
    // The slot frees at the next step: the server goes idle long before 400 tokens.
    wait_idle(a, 20);
    assert!(metric(a, "tokens_predicted_total") < 300.0);
    // And serves the next request.
    assert!(!content(&post(a, "/v1/chat/completions", &chat_body("Hi", 3, false))).is_empty());
    srv.stop();
}

#[test]
fn a_full_queue_answers_503() {
    let srv = server(1, 1, None);
    let a = srv.addr;
    let handles: Vec<_> = (0..6)
        .map(|_| {
            std::thread::spawn(move || {
                post(a, "/v1/chat/completions", &chat_body("Count from one to fifty.", 48, false))
            })
        })
        .collect();
    let rs: Vec<Resp> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let busy: Vec<&Resp> = rs.iter().filter(|r| r.status == 503).collect();
    assert!(!busy.is_empty(), "one slot and a queue of one cannot take six at once");
    assert!(rs.iter().all(|r| r.status == 200 || r.status == 503));
    assert_eq!(busy[0].json()["error"]["code"], "server_busy");
    wait_idle(a, 30);
    srv.stop();
}

#[test]
fn stopping_lets_a_running_stream_finish() {
    let srv = server(1, 4, None);
    let a = srv.addr;
    let h = std::thread::spawn(move || {
        post(a, "/v1/chat/completions", &chat_body("Describe the sea.", 40, true))
    });
    std::thread::sleep(Duration::from_millis(300));
    srv.stop();
    let r = h.join().unwrap();
    let (text, _) = streamed_text(&r);
    assert!(!text.is_empty());
}

#[test]
fn structured_output_always_parses_and_validates() {
    let srv = server(2, 8, None);
    let a = srv.addr;
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 20},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 10}, "maxItems": 3}
        },
        "required": ["name", "age", "tags"],
        "additionalProperties": false
    });
    for (seed, temp) in [(1, 0.0), (2, 0.9), (3, 1.2)] {
        let body = json!({
            "messages": [{"role": "user", "content": "Invent a person and describe them."}],
            "max_tokens": 120,
            "temperature": temp,
            "seed": seed,
            "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": schema}},
        });
        let r = post(a, "/v1/chat/completions", &body);
        let text = content(&r);
        assert_eq!(r.json()["choices"][0]["finish_reason"], "stop", "{text}");
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        let o = v.as_object().unwrap();
        assert_eq!(o.len(), 3, "{text}");
        assert!(o["name"].as_str().is_some_and(|s| s.chars().count() <= 20), "{text}");
        assert!(o["age"].as_u64().is_some_and(|n| n <= 150), "{text}");
        assert!(o["tags"].as_array().is_some_and(|t| t.len() <= 3), "{text}");
    }
    // llama-server's json_object with a schema, streamed.
    let mut body = chat_body("Give me a JSON object about cats.", 80, true);
    body["response_format"] = json!({"type": "json_object", "schema": {
        "type": "object",
        "properties": {"color": {"enum": ["black", "white", "orange"]}, "lives": {"type": "integer", "maximum": 9}},
        "required": ["color", "lives"], "additionalProperties": false
    }});
    let (text, chunks) = streamed_text(&post(a, "/v1/chat/completions", &body));
    let fin = chunks.iter().find_map(|c| c["choices"][0]["finish_reason"].as_str()).unwrap();
    assert_eq!(fin, "stop", "{text}");
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert!(["black", "white", "orange"].contains(&v["color"].as_str().unwrap()), "{text}");
    // Plain json_object: an object whenever the reply ends by itself.
    let mut body = chat_body("Give me a small JSON object about dogs.", 200, false);
    body["response_format"] = json!({"type": "json_object"});
    let r = post(a, "/v1/chat/completions", &body);
    let text = content(&r);
    assert!(text.trim_start().starts_with('{'), "{text}");
    if r.json()["choices"][0]["finish_reason"] == "stop" {
        assert!(serde_json::from_str::<Value>(&text).is_ok_and(|v| v.is_object()), "{text}");
    }
    // A GBNF grammar (llama-server's `grammar`).
    let body = json!({
        "prompt": "Is the sky blue? Answer:",
        "max_tokens": 10,
        "temperature": 1.0,
        "seed": 5,
        "grammar": "root ::= \" \" answer \".\"\nanswer ::= (\"yes\" | \"no\") (\", \" [a-z]{1,8})?",
    });
    let c = post(a, "/v1/completions", &body).json();
    let t = c["choices"][0]["text"].as_str().unwrap();
    let re_ok = t.starts_with(" yes") || t.starts_with(" no");
    assert!(re_ok && t.ends_with('.'), "{t:?}");
    // Bad constraints are 400s naming the field.
    for (body, param) in [
        (
            json!({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema"}}),
            "response_format.json_schema.schema",
        ),
        (
            json!({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "xml"}}),
            "response_format.type",
        ),
        (
            json!({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}}}}),
            "response_format",
        ),
        (
            json!({"messages": [{"role": "user", "content": "x"}], "grammar": "root ::= \"unterminated"}),
            "grammar",
        ),
        (
            json!({"messages": [{"role": "user", "content": "x"}], "grammar": "start ::= \"x\""}),
            "grammar",
        ),
        (
            json!({"messages": [{"role": "user", "content": "x"}], "grammar": "root ::= \"a\"", "json_schema": {}}),
            "grammar",
        ),
    ] {
        let r = post(a, "/v1/chat/completions", &body);
        assert_eq!(r.status, 400, "{body}: {}", r.body);
        assert_eq!(r.json()["error"]["param"], param, "{}", r.body);
    }
    wait_idle(a, 30);
    srv.stop();
}

/// The official `openai` Python client (pinned in tools/requirements-ci.txt; `cargo xtask ci`
/// installs it and sets PYTHON) against the server: models, chat, streaming, completions,
/// JSON-schema output validated with `jsonschema`.
#[test]
fn the_openai_python_client_works() {
    let srv = server(2, 8, Some("sk-tessera-test"));
    run_python("openai_client.py", &[&format!("http://{}", srv.addr), "sk-tessera-test", "json"]);
    srv.stop();
}

/// The chat page in headless Chromium (Debian's chromium and chromium-driver, which .ci/run
/// installs; Selenium from tools/requirements-ci.txt): a typed message gets a streamed reply,
/// the conversation is kept, Stop cuts a reply. `TESSERA_SKIP_BROWSER=1` skips it where no
/// browser can be installed (said on stderr).
#[test]
fn the_chat_page_streams_a_reply_in_a_browser() {
    if std::env::var_os("TESSERA_SKIP_BROWSER").is_some() {
        eprintln!("TESSERA_SKIP_BROWSER set: the browser test is skipped");
        return;
    }
    assert!(
        std::path::Path::new("/usr/bin/chromium").exists()
            && std::path::Path::new("/usr/bin/chromedriver").exists(),
        "the browser test needs Debian's chromium and chromium-driver (apt-get install chromium \
         chromium-driver; .ci/run installs them), or TESSERA_SKIP_BROWSER=1"
    );
    let srv = server(2, 8, None);
    run_python("browser_chat.py", &[&format!("http://{}", srv.addr)]);
    wait_idle(srv.addr, 30);
    srv.stop();
}
