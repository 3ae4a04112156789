//! What llama-server's users rely on, on SmolLM2-135M: one unified KV cache (a request may use
//! all of `-c`), CORS, `X-Api-Key`, llama-server's own endpoints (`/completion`, `/infill`,
//! `/apply-template`, `/slots`), several prompts in one `/v1/completions`, `timings` in
//! replies, `llamacpp:` metrics, the start-up checks and the shutdown deadline.

mod common;

use common::*;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// A prompt of about `n` tokens (SmolLM2 reads " w" words as one token each, plus BOS).
fn words(n: usize) -> String {
    (0..n).map(|i| ["apple", "river", "stone", "cloud"][i % 4]).collect::<Vec<_>>().join(" ")
}

#[test]
fn one_request_may_use_the_whole_unified_cache() {
    // Two slots over 2048 cells: under llama.cpp's old split each would get 1024. Batches of
    // 512 (the answers are not compared here): the long prompts take 3 steps, not 24.
    let cfg = tessera_server::ServerConfig { n_batch: 512, ..config(2, 8, None) };
    let srv = tessera_server::start(model(), cfg, false).expect("server");
    let a = srv.addr;
    let n_ctx = get(a, "/props").json()["default_generation_settings"]["n_ctx"].as_u64().unwrap();
    assert_eq!(n_ctx, 2048);
    let r = post(
        a,
        "/v1/completions",
        &json!({"prompt": words(1500), "max_tokens": 4, "temperature": 0}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let prompt_tokens = r.json()["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(prompt_tokens > 1100, "{prompt_tokens}");
    // The long prompt's cells stay cached in its (now idle) slot; another long prompt in the
    // other slot needs them, so the idle cache gives way instead of the request failing.
    let r = post(
        a,
        "/v1/completions",
        &json!({"prompt": format!("x {}", words(1200)), "max_tokens": 4}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    // Over the whole cache is still refused, naming the field.
    let r = post(a, "/v1/completions", &json!({"prompt": words(2100), "max_tokens": 4}));
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.json()["error"]["code"], "context_length_exceeded");
    wait_idle(a, 60);
    srv.stop();
}

#[test]
fn browsers_on_other_origins_may_call_it() {
    let srv = server(1, 4, Some("k"));
    let a = srv.addr;
    // The preflight carries no key and must pass.
    let r = request(
        a,
        "OPTIONS",
        "/v1/chat/completions",
        b"",
        &[
            ("Origin", "http://localhost:3000"),
            ("Access-Control-Request-Method", "POST"),
            ("Access-Control-Request-Headers", "authorization, content-type"),
        ],
    );
    assert_eq!(r.status, 204, "{}", r.body);
    assert_eq!(r.header("access-control-allow-origin"), Some("http://localhost:3000"));
    assert_eq!(r.header("access-control-allow-headers"), Some("authorization, content-type"));
    assert!(r.header("access-control-allow-methods").unwrap().contains("POST"));
    // The real request gets the header too, even when refused.
    let r = request(a, "GET", "/v1/models", b"", &[("Origin", "http://localhost:3000")]);
    assert_eq!(r.status, 401);
    assert_eq!(r.header("access-control-allow-origin"), Some("http://localhost:3000"));
    // X-Api-Key is a key too (Anthropic-style clients).
    let r = request(a, "GET", "/v1/models", b"", &[("X-Api-Key", "k")]);
    assert_eq!(r.status, 200, "{}", r.body);
    let r = request(a, "GET", "/v1/models", b"", &[("X-Api-Key", "wrong")]);
    assert_eq!(r.status, 401);
    srv.stop();
}

#[test]
fn llama_server_endpoints_answer() {
    let srv = server(2, 8, None);
    let a = srv.addr;
    // /completion: llama-server's body.
    let r =
        post(a, "/completion", &json!({"prompt": "The sea is", "n_predict": 8, "temperature": 0}));
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert!(v["content"].is_string() && v["stop"] == true, "{v}");
    assert!(v["tokens_predicted"].as_u64().unwrap() <= 8);
    let n_prompt = post(a, "/tokenize", &json!({"content": "The sea is", "add_special": true}))
        .json()["tokens"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(v["tokens_evaluated"], n_prompt, "{v}");
    let t = &v["timings"];
    assert_eq!(t["predicted_n"], v["tokens_predicted"]);
    assert!(t["prompt_ms"].as_f64().unwrap() > 0.0 && t["predicted_per_second"].is_number());
    assert!(["eos", "limit", "word"].contains(&v["stop_type"].as_str().unwrap()));
    // Streamed: content pieces, the last one with stop: true and timings, no [DONE].
    let r = post(
        a,
        "/completion",
        &json!({"prompt": "The sea is", "n_predict": 8, "stream": true, "temperature": 0}),
    );
    let data = sse_data(&r.body);
    let events: Vec<Value> = data.iter().map(|d| serde_json::from_str(d).unwrap()).collect();
    let last = events.last().unwrap();
    assert_eq!(last["stop"], true, "{}", r.body);
    assert!(last["timings"]["predicted_n"].is_number());
    let streamed: String = events.iter().filter_map(|e| e["content"].as_str()).collect();
    assert_eq!(streamed, v["content"].as_str().unwrap(), "greedy: streamed = whole");
    // Token ids as the prompt: the same tokens give the same reply.
    let ids = post(a, "/tokenize", &json!({"content": "The sea is", "add_special": true})).json()
        ["tokens"]
        .clone();
    let r = post(a, "/completion", &json!({"prompt": ids, "n_predict": 8, "temperature": 0}));
    assert_eq!(r.json()["content"], v["content"], "{}", r.body);

    // /infill needs fill-in-the-middle tokens, which SmolLM2 lacks: a clear 400.
    let r = post(a, "/infill", &json!({"input_prefix": "def f():", "input_suffix": ""}));
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("no fill-in-the-middle tokens"), "{}", r.body);

    // /apply-template: the chat template's text.
    let r = post(a, "/apply-template", &json!({"messages": [{"role": "user", "content": "hi"}]}));
    let p = r.json()["prompt"].as_str().unwrap().to_string();
    assert!(
        p.contains("<|im_start|>user\nhi<|im_end|>") && p.ends_with("<|im_start|>assistant\n"),
        "{p}"
    );

    // Several prompts: one choice each, in order; the same prompt alone gives the same text.
    let one = post(
        a,
        "/v1/completions",
        &json!({"prompt": "Once upon", "max_tokens": 6, "temperature": 0}),
    )
    .json()["choices"][0]["text"]
        .clone();
    let r = post(
        a,
        "/v1/completions",
        &json!({"prompt": ["The sea is", "Once upon"], "max_tokens": 6, "temperature": 0}),
    );
    let v = r.json();
    let ch = v["choices"].as_array().unwrap();
    assert_eq!(ch.len(), 2, "{v}");
    assert_eq!((ch[0]["index"].as_u64(), ch[1]["index"].as_u64()), (Some(0), Some(1)));
    assert_eq!(ch[1]["text"], one);
    // Streamed: chunks of both choices, one [DONE] at the end.
    let r = post(
        a,
        "/v1/completions",
        &json!({"prompt": ["The sea is", "Once upon"], "max_tokens": 6, "temperature": 0, "stream": true}),
    );
    let data = sse_data(&r.body);
    assert_eq!(data.iter().filter(|d| *d == "[DONE]").count(), 1);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    let mut texts = [String::new(), String::new()];
    for d in &data[..data.len() - 1] {
        let e: Value = serde_json::from_str(d).unwrap();
        let c = &e["choices"][0];
        texts[c["index"].as_u64().unwrap() as usize].push_str(c["text"].as_str().unwrap());
    }
    assert_eq!(texts[1], one.as_str().unwrap());

    // timings in the OpenAI replies too, as llama-server adds them.
    let r = post(
        a,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}),
    );
    assert!(r.json()["timings"]["prompt_n"].as_u64().unwrap() > 0, "{}", r.body);

    // /slots: each slot, idle now.
    let s = get(a, "/slots").json();
    let s = s.as_array().unwrap();
    assert_eq!(s.len(), 2);
    assert!(s.iter().all(|x| x["is_processing"] == false && x["n_ctx"] == 2048), "{s:?}");
    assert!(s.iter().any(|x| x["n_cached"].as_u64().unwrap() > 0));
    // llama-server's metric names, beside Tessera's.
    let m = get(a, "/metrics").body;
    for name in [
        "llamacpp:prompt_tokens_total",
        "llamacpp:tokens_predicted_total",
        "llamacpp:requests_processing",
    ] {
        assert!(m.lines().any(|l| l.starts_with(name)), "{name} missing:\n{m}");
    }
    wait_idle(a, 30);
    srv.stop();
}

#[test]
fn bad_settings_fail_at_start_not_at_every_request() {
    let e = tessera_server::start(model(), config(0, 4, None), false).err().expect("-np 0");
    assert!(e.to_string().contains("-np 0"), "{e}");
    let mut cfg = config(1, 4, None);
    cfg.chat_template = Some("{% if messages %}unclosed".into());
    let e = tessera_server::start(model(), cfg, false).err().expect("a broken template");
    assert!(e.to_string().contains("--chat-template-file"), "{e}");
}

#[test]
fn stopping_ends_running_replies_at_the_deadline() {
    let mut cfg = config(1, 4, None);
    cfg.shutdown_timeout = Duration::from_secs(1);
    let srv = tessera_server::start(model(), cfg, false).expect("server");
    let a = srv.addr;
    // A reply that would run to the end of the context.
    let h = std::thread::spawn(move || {
        post(
            a,
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": "Tell a story."}], "stream": true, "ignore_eos": true}),
        )
    });
    std::thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    srv.stop();
    let waited = t.elapsed();
    let r = h.join().unwrap();
    assert!(waited < Duration::from_secs(10), "stop took {waited:?}");
    let data = sse_data(&r.body);
    let err = data.iter().find(|d| d.contains("\"error\"")).unwrap_or_else(|| panic!("{}", r.body));
    assert!(err.contains("shutting down"), "{err}");
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
}

/// `/infill` on a code model (Qwen2.5-Coder-0.5B): its FIM tokens around the prefix and
/// suffix, the extra files behind `<|file_sep|>`; greedy, the middle of an obvious function.
#[test]
fn infill_fills_the_middle_with_the_models_fim_tokens() {
    let srv = tessera_server::start(qwen(), config(1, 4, None), false).expect("server");
    let a = srv.addr;
    let body = |extra: Value| {
        json!({
            "input_prefix": "def add(a, b):\n    return ",
            "input_suffix": "\n\nprint(add(1, 2))\n",
            "input_extra": extra,
            "n_predict": 8,
            "temperature": 0,
        })
    };
    let r = post(a, "/infill", &body(json!([])));
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    let middle = v["content"].as_str().unwrap();
    assert!(middle.contains("a + b") || middle.contains("a+b"), "{v}");
    let plain = |t: &str| {
        post(a, "/tokenize", &json!({"content": t})).json()["tokens"].as_array().unwrap().len()
    };
    // FIM_PRE prefix FIM_SUF suffix FIM_MID: three special tokens around the two texts.
    let n = plain("def add(a, b):\n    return ") + plain("\n\nprint(add(1, 2))\n") + 3;
    assert_eq!(v["tokens_evaluated"], n, "{v}");
    // An extra file goes before, behind the file separator.
    let r = post(a, "/infill", &body(json!([{"filename": "util.py", "text": "X = 1\n"}])));
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.json()["tokens_evaluated"].as_u64().unwrap() > n as u64 + 3, "{}", r.body);
    srv.stop();
}

/// Tool calls through the official `openai` client on Qwen2.5-Coder-0.5B-Instruct (its
/// template renders tools): required, named, auto, streamed and not, a tool result back
/// (tests/py/tool_calls.py).
#[test]
fn the_openai_client_calls_tools() {
    let srv = tessera_server::start(qwen(), config(1, 4, None), false).expect("server");
    run_python("tool_calls.py", &[&format!("http://{}", srv.addr)]);
    srv.stop();
}

/// Reasoning apart from the answer: a chat template that opens `<think>` (as DeepSeek-R1's
/// does) puts the whole (unfinished) reply in `reasoning_content`, streamed as its own deltas;
/// `--reasoning-format none` leaves it in `content`; `chat_template_kwargs` and the
/// `enable_thinking` variable reach the template (`--reasoning off` sets it false).
#[test]
fn thoughts_come_apart_from_the_answer() {
    let tpl = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
               {% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking %}<think>\n{% endif %}\
               {% if style %}[{{ style }}]{% endif %}{% endif %}";
    let mut cfg = config(1, 4, None);
    cfg.chat_template = Some(tpl.into());
    let srv = tessera_server::start(model(), cfg.clone(), false).expect("server");
    let a = srv.addr;
    let body = |stream: bool| json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6, "temperature": 0, "stream": stream});
    let v = post(a, "/v1/chat/completions", &body(false)).json();
    let m = &v["choices"][0]["message"];
    let thought = m["reasoning_content"].as_str().unwrap_or_else(|| panic!("{v}"));
    assert!(!thought.is_empty() && m["content"] == "", "{v}");
    let r = post(a, "/v1/chat/completions", &body(true));
    let mut streamed = String::new();
    for d in sse_data(&r.body).iter().filter(|d| *d != "[DONE]") {
        let e: Value = serde_json::from_str(d).unwrap();
        let delta = &e["choices"][0]["delta"];
        assert!(delta["content"].as_str().unwrap_or_default().is_empty(), "{d}");
        streamed.push_str(delta["reasoning_content"].as_str().unwrap_or_default());
    }
    assert_eq!(streamed, thought);
    // The request's template variables reach the template.
    let p = post(
        a,
        "/apply-template",
        &json!({"messages": [{"role": "user", "content": "Hi"}], "chat_template_kwargs": {"style": "brief", "enable_thinking": false}}),
    )
    .json()["prompt"]
    .as_str()
    .unwrap()
    .to_string();
    assert!(p.ends_with("assistant\n[brief]"), "{p}");
    srv.stop();

    cfg.reasoning_format = tessera_server::reasoning::ReasoningFormat::None;
    let srv = tessera_server::start(model(), cfg.clone(), false).expect("server");
    let v = post(srv.addr, "/v1/chat/completions", &body(false)).json();
    assert!(v["choices"][0]["message"]["reasoning_content"].is_null(), "{v}");
    assert_eq!(v["choices"][0]["message"]["content"].as_str(), Some(thought), "{v}");
    srv.stop();

    cfg.reasoning = Some(false);
    let srv = tessera_server::start(model(), cfg, false).expect("server");
    let p = post(
        srv.addr,
        "/apply-template",
        &json!({"messages": [{"role": "user", "content": "Hi"}]}),
    );
    assert!(!p.json()["prompt"].as_str().unwrap().contains("<think>"), "{}", p.body);
    srv.stop();
}

/// `--reasoning-budget N` and a request's `thinking_budget_tokens`: after N tokens inside
/// `<think>` the end of thinking is forced and the reply goes on to its answer in `content`
/// (streamed the same way); -1 leaves thoughts unbounded, 0 closes them at once; a budget
/// below -1 is refused at start.
#[test]
fn the_reasoning_budget_closes_the_thoughts() {
    let tpl =
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
               {% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}";
    let mut cfg = config(1, 4, None);
    cfg.chat_template = Some(tpl.into());
    cfg.reasoning_budget = 4;
    let srv = tessera_server::start(model(), cfg.clone(), false).expect("server");
    let a = srv.addr;
    let ask = |extra: Value| {
        let mut b = json!({"messages": [{"role": "user", "content": "Tell me a story"}], "max_tokens": 16,
                           "temperature": 0, "ignore_eos": true});
        b.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        let v = post(a, "/v1/chat/completions", &b).json();
        let m = &v["choices"][0]["message"];
        (
            m["reasoning_content"].as_str().unwrap_or_default().to_string(),
            m["content"].as_str().unwrap_or_default().to_string(),
        )
    };
    let n_tokens = |s: &str| {
        post(a, "/tokenize", &json!({"content": s})).json()["tokens"].as_array().unwrap().len()
    };
    let (thought, answer) = ask(json!({}));
    assert!(!thought.is_empty() && n_tokens(&thought) <= 5, "{thought:?}");
    assert!(!answer.is_empty() && !answer.contains("</think>"), "{answer:?}");
    // Streamed: the same split.
    let r = post(
        a,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Tell me a story"}],
        "max_tokens": 16, "temperature": 0, "ignore_eos": true, "stream": true}),
    );
    let (mut st, mut sa) = (String::new(), String::new());
    for d in sse_data(&r.body).iter().filter(|d| *d != "[DONE]") {
        let e: Value = serde_json::from_str(d).unwrap();
        st.push_str(e["choices"][0]["delta"]["reasoning_content"].as_str().unwrap_or_default());
        sa.push_str(e["choices"][0]["delta"]["content"].as_str().unwrap_or_default());
    }
    assert_eq!((st, sa), (thought.clone(), answer));
    // The request's budget wins over the server's.
    let (short, _) = ask(json!({"thinking_budget_tokens": 1}));
    assert!(
        n_tokens(&short) <= 2 && thought.starts_with(short.trim_end()),
        "{short:?} / {thought:?}"
    );
    let (long, rest) = ask(json!({"thinking_budget_tokens": -1}));
    assert!(long.len() > thought.len() && rest.is_empty(), "{long:?} / {rest:?}");
    let (none, answer0) = ask(json!({"thinking_budget_tokens": 0}));
    assert!(none.trim().is_empty() && !answer0.is_empty(), "{none:?} / {answer0:?}");
    srv.stop();

    cfg.reasoning_budget = -2;
    let e = tessera_server::start(model(), cfg, false).err().expect("budget -2");
    assert!(e.to_string().contains("--reasoning-budget -2"), "{e}");
}

/// An agent loop's next turn after other conversations took every slot: the first turn's
/// prompt went to host memory (`--cache-ram`) when its slot was reused, and comes back from
/// there (`cached_tokens` at least 90% of it, a fraction of the prompt time), with the greedy
/// answer the same as where the slot had kept it; with `--cache-ram 0` it is computed again.
#[test]
fn a_conversation_comes_back_from_the_host_cache_after_others_took_the_slots() {
    let prefix = words(400);
    let turn =
        |q: &str| json!({"prompt": format!("{prefix} {q}"), "max_tokens": 8, "temperature": 0});
    let others = [format!("x {}", words(300)), format!("y {}", words(300))];
    let run = |cache_ram_mib: i64, interleave: bool| {
        let srv = tessera_server::start(
            model(),
            tessera_server::ServerConfig { cache_ram_mib, ..config(2, 8, None) },
            false,
        )
        .expect("server");
        let a = srv.addr;
        let first = post(a, "/v1/completions", &turn("First question?")).json();
        if interleave {
            for o in &others {
                let r = post(a, "/v1/completions", &json!({"prompt": o, "max_tokens": 2}));
                assert_eq!(r.status, 200, "{}", r.body);
            }
        }
        let second = post(a, "/v1/completions", &turn("First question? Second question?")).json();
        let saved = metric(a, "prompt_cache_states");
        srv.stop();
        (first, second, saved)
    };
    let (first, second, saved) = run(8192, true);
    assert!(saved >= 1.0, "{saved} prompts saved");
    let n_prompt = second["usage"]["prompt_tokens"].as_u64().unwrap();
    let cached = second["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
    let n_first = first["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(cached * 10 >= n_first * 9, "{cached} of the first turn's {n_first} tokens reused");
    assert!(cached < n_prompt);
    let (t1, t2) = (
        first["timings"]["prompt_ms"].as_f64().unwrap(),
        second["timings"]["prompt_ms"].as_f64().unwrap(),
    );
    assert!(t2 < t1, "prompt time {t2} ms from the host cache, {t1} ms computed");
    // The same answer as where the slot had kept the first turn.
    let (_, kept, _) = run(8192, false);
    assert_eq!(second["choices"][0]["text"], kept["choices"][0]["text"]);
    assert_eq!(kept["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64(), Some(cached));
    // Without the host cache, the other conversations' prompts took its cells.
    let (_, recomputed, saved) = run(0, true);
    assert_eq!(saved, 0.0);
    let cached = recomputed["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
    assert!(cached < 10, "{cached} tokens reused without a host cache");
}

/// A prompt that shares a long prefix with what another slot holds (here: a busy one) takes
/// those cells instead of computing them again: `cached_tokens` covers the prefix and the
/// prompt time is a fraction of the first request's.
#[test]
fn a_prefix_held_by_another_slot_is_reused() {
    let srv = server(2, 8, None);
    let a = srv.addr;
    let prefix = words(600);
    let first = json!({"prompt": format!("{prefix} First question?"), "max_tokens": 64, "ignore_eos": true, "temperature": 0});
    let h = std::thread::spawn(move || post(a, "/v1/completions", &first).json());
    // Wait until the first request generates (its slot busy with the prefix cached).
    let t = Instant::now();
    while !get(a, "/slots").json().as_array().unwrap().iter().any(|s| {
        s["is_processing"] == true && s["next_token"]["n_decoded"].as_u64().unwrap_or(0) > 0
    }) {
        assert!(t.elapsed() < Duration::from_secs(120), "the first request did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let second =
        json!({"prompt": format!("{prefix} Second question?"), "max_tokens": 2, "temperature": 0});
    let v = post(a, "/v1/completions", &second).json();
    let n_prompt = v["usage"]["prompt_tokens"].as_u64().unwrap();
    let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
    let first = h.join().unwrap();
    let n_prefix = n_prompt - 4;
    assert!(cached * 10 >= n_prefix * 9, "{cached} of a {n_prefix}-token prefix reused: {v}");
    let (t1, t2) = (
        first["timings"]["prompt_ms"].as_f64().unwrap(),
        v["timings"]["prompt_ms"].as_f64().unwrap(),
    );
    assert!(t2 < t1, "prompt time {t2} ms with the prefix shared, {t1} ms without");
    wait_idle(a, 60);
    srv.stop();
}

/// The client scripts' last checks are a 0.5B model's greedy choices (it answers from the tool
/// result instead of calling again), which move with the last bits of a reused prefix: a
/// prefix restored from the host cache was evaluated in another batch, and K-quant products
/// round by batch shape (as in llama.cpp). So their server computes every prompt afresh or
/// from its own slot; restoring is checked bit for bit in
/// `a_conversation_comes_back_from_the_host_cache_after_others_took_the_slots`.
fn client_config() -> tessera_server::ServerConfig {
    tessera_server::ServerConfig { cache_ram_mib: 0, ..config(1, 4, None) }
}

/// Anthropic's Messages API through the official `anthropic` client on Qwen2.5-Coder-0.5B:
/// a message, a stream, stop sequences, a system prompt, tool_use (forced, named and
/// streamed), a tool_result round trip, errors in Anthropic's shape
/// (tests/py/anthropic_client.py).
#[test]
fn the_anthropic_client_works() {
    let srv = tessera_server::start(qwen(), client_config(), false).expect("server");
    run_python("anthropic_client.py", &[&format!("http://{}", srv.addr)]);
    srv.stop();
}

/// OpenAI's Responses API through the official client on Qwen2.5-Coder-0.5B: text, streamed
/// events, instructions, a required function call and its output back
/// (tests/py/responses_client.py).
#[test]
fn the_responses_api_works() {
    let srv = tessera_server::start(qwen(), client_config(), false).expect("server");
    run_python("responses_client.py", &[&format!("http://{}", srv.addr)]);
    srv.stop();
}
