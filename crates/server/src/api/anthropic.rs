//! Anthropic's Messages API (`POST /v1/messages`), as llama-server serves it: the request is
//! read into the same chat request as OpenAI's (system prompt, `tool_use` and `tool_result`
//! blocks as tool calls and tool messages, `tools` with `input_schema`, `tool_choice` auto /
//! any / tool / none, `stop_sequences`, `thinking`), and answered with Anthropic's message
//! (`content` blocks: `thinking`, `text`, `tool_use`; `stop_reason`; `usage`) or its
//! streaming events (`message_start`, `content_block_start` / `_delta` / `_stop`,
//! `message_delta`, `message_stop`). Errors are Anthropic's `{"type": "error", ...}`.

use crate::api::fields;
use crate::api::generate::{collect, merge, reply_shape, start};
use crate::api::request;
use crate::chat::content::{self, TEXT};
use crate::chat::reply::ReplySplit;
use crate::engine::{Event, Finished};
use crate::error::ApiError;
use crate::http::sse::{sse_channel, sse_response};
use crate::http::{AppState, Body};
use crate::ids::new_id;
use crate::json::{parse_body, type_name};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::Event as SseEvent;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};
use std::sync::Arc;

/// An error as Anthropic's clients read it.
fn error_response(e: ApiError) -> Response {
    let kind = match e.status {
        401 => "authentication_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 => "overloaded_error",
        s if s >= 500 => "api_error",
        _ => "invalid_request_error",
    };
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = json!({"type": "error", "error": {"type": kind, "message": e.message}});
    (status, Json(body)).into_response()
}

/// `POST /v1/messages`.
pub async fn messages(State(st): State<Arc<AppState>>, body: Body) -> Response {
    match run(st, body).await {
        Ok(r) => r,
        Err(e) => error_response(e),
    }
}

/// The Anthropic body as the OpenAI chat body the rest of the server reads.
fn to_openai(o: &Map<String, Value>) -> Result<Map<String, Value>, ApiError> {
    fields::check(o, fields::ANTHROPIC, false)?;
    let mut out = Map::new();
    // `metadata.user_id` identifies the end user: it goes to the log, as a gateway would use it.
    match o.get("metadata") {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) => match m.get("user_id") {
            None | Some(Value::Null) => {}
            // Debug-formatted: a newline or an escape code in it cannot forge or color a
            // log line.
            Some(Value::String(u)) => tracing::info!(user_id = ?u, "messages request"),
            Some(other) => {
                return Err(ApiError::field(
                    "metadata.user_id",
                    format!("expected a string, got {}", type_name(other)),
                ))
            }
        },
        Some(other) => {
            return Err(ApiError::field(
                "metadata",
                format!("expected an object, got {}", type_name(other)),
            ))
        }
    }
    let mut msgs = Vec::new();
    if let Some(sys) = o.get("system").filter(|v| !v.is_null()) {
        msgs.push(json!({"role": "system", "content": content::text(sys, "system", TEXT)?}));
    }
    let Some(Value::Array(input)) = o.get("messages") else {
        return Err(ApiError::field("messages", "is required: an array of messages"));
    };
    for (i, m) in input.iter().enumerate() {
        let f = |k: &str| format!("messages[{i}].{k}");
        let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
        if role != "user" && role != "assistant" {
            return Err(ApiError::field(&f("role"), format!("'{role}' is not user or assistant")));
        }
        let blocks = match m.get("content") {
            Some(Value::String(s)) => {
                msgs.push(json!({"role": role, "content": s}));
                continue;
            }
            Some(Value::Array(b)) => b,
            _ => return Err(ApiError::field(&f("content"), "is required: a string or blocks")),
        };
        let (mut text, mut calls) = (String::new(), Vec::new());
        // With images: the text so far and each image as OpenAI content parts.
        let mut parts: Vec<Value> = Vec::new();
        for (j, b) in blocks.iter().enumerate() {
            let bf = |k: &str| format!("messages[{i}].content[{j}].{k}");
            match b.get("type").and_then(Value::as_str) {
                Some("text") => text.push_str(b.get("text").and_then(Value::as_str).unwrap_or("")),
                Some("image") if role == "user" => {
                    if !text.is_empty() {
                        parts.push(json!({"type": "text", "text": std::mem::take(&mut text)}));
                    }
                    parts.push(content::image_url_part(
                        image_source(b, &bf("source"))?,
                        &bf("source"),
                    ));
                }
                Some("thinking" | "redacted_thinking") => {}
                Some("tool_use") if role == "assistant" => {
                    let name = b
                        .get("name")
                        .and_then(Value::as_str)
                        .ok_or_else(|| ApiError::field(&bf("name"), "is required"))?;
                    let input = b.get("input").cloned().unwrap_or(json!({}));
                    if !input.is_object() {
                        return Err(ApiError::field(&bf("input"), "expected an object"));
                    }
                    calls.push(
                        json!({"id": b.get("id").cloned().unwrap_or_default(), "type": "function",
                        "function": {"name": name, "arguments": input}}),
                    );
                }
                Some("tool_result") if role == "user" => {
                    let id = b
                        .get("tool_use_id")
                        .and_then(Value::as_str)
                        .ok_or_else(|| ApiError::field(&bf("tool_use_id"), "is required"))?;
                    let content = content::text(
                        b.get("content").unwrap_or(&Value::Null),
                        &bf("content"),
                        TEXT,
                    )?;
                    msgs.push(json!({"role": "tool", "tool_call_id": id, "content": content}));
                }
                Some(t) => {
                    return Err(ApiError::field(
                        &bf("type"),
                        format!("'{t}' blocks are not supported in {role} messages"),
                    ))
                }
                None => return Err(ApiError::field(&bf("type"), "is required")),
            }
        }
        if !parts.is_empty() {
            if !text.is_empty() {
                parts.push(json!({"type": "text", "text": text}));
            }
            msgs.push(json!({"role": role, "content": parts}));
        } else if !text.is_empty() || !calls.is_empty() {
            let mut msg = json!({"role": role, "content": text});
            if !calls.is_empty() {
                msg["tool_calls"] = Value::Array(calls);
            }
            msgs.push(msg);
        }
    }
    out.insert("messages".into(), Value::Array(msgs));
    match o.get("max_tokens") {
        Some(v @ Value::Number(_)) => {
            out.insert("max_tokens".into(), v.clone());
        }
        _ => return Err(ApiError::field("max_tokens", "is required: a positive integer")),
    }
    for k in ["temperature", "top_p", "top_k", "stream", "model"] {
        if let Some(v) = o.get(k) {
            out.insert(k.into(), v.clone());
        }
    }
    if let Some(v) = o.get("stop_sequences") {
        out.insert("stop".into(), v.clone());
    }
    if let Some(Value::Array(tools)) = o.get("tools") {
        let mut list = Vec::new();
        for (i, t) in tools.iter().enumerate() {
            // Anthropic's server tools (web search, code execution, ...) run on its side.
            if let Some(kind) = t.get("type").and_then(Value::as_str).filter(|k| *k != "custom") {
                return Err(ApiError::field(
                    &format!("tools[{i}].type"),
                    format!("'{kind}' tools are not supported (client tools only)"),
                ));
            }
            list.push(json!({"type": "function", "function": {
                "name": t.get("name").cloned().unwrap_or_default(),
                "description": t.get("description").cloned().unwrap_or_default(),
                "parameters": t.get("input_schema").cloned().unwrap_or(Value::Null),
            }}));
        }
        out.insert("tools".into(), Value::Array(list));
    } else if let Some(other) = o.get("tools").filter(|v| !v.is_null()) {
        return Err(ApiError::field(
            "tools",
            format!("expected an array, got {}", type_name(other)),
        ));
    }
    if let Some(tc) = o.get("tool_choice").filter(|v| !v.is_null()) {
        let choice = match tc.get("type").and_then(Value::as_str) {
            Some("auto") => json!("auto"),
            Some("any") => json!("required"),
            Some("none") => json!("none"),
            Some("tool") => {
                json!({"type": "function", "function": {"name": tc.get("name").cloned().unwrap_or_default()}})
            }
            _ => {
                return Err(ApiError::field(
                    "tool_choice.type",
                    "is not one of auto, any, tool, none",
                ))
            }
        };
        out.insert("tool_choice".into(), choice);
        if tc.get("disable_parallel_tool_use") == Some(&Value::Bool(true)) {
            out.insert("parallel_tool_calls".into(), Value::Bool(false));
        }
    }
    match o.get("thinking") {
        None | Some(Value::Null) => {}
        Some(Value::Object(t)) if t.get("type").is_some_and(Value::is_string) => {}
        Some(other) => {
            return Err(ApiError::field(
                "thinking",
                format!("expected {{\"type\": \"enabled\" or \"disabled\"}}, got {other}"),
            ))
        }
    }
    match o.get("thinking").and_then(|t| t.get("type")).and_then(Value::as_str) {
        None => {}
        Some(t @ ("enabled" | "disabled")) => {
            out.insert("chat_template_kwargs".into(), json!({"enable_thinking": t == "enabled"}));
            match o["thinking"].get("budget_tokens") {
                None | Some(Value::Null) => {}
                Some(Value::Number(n)) if t == "enabled" && n.as_u64().is_some() => {
                    out.insert("thinking_budget_tokens".into(), Value::Number(n.clone()));
                }
                Some(other) => {
                    return Err(ApiError::field(
                        "thinking.budget_tokens",
                        format!("expected a token count with type enabled, got {other}"),
                    ))
                }
            }
        }
        Some(t) => {
            return Err(ApiError::field(
                "thinking.type",
                format!("'{t}' is not enabled or disabled"),
            ))
        }
    }
    Ok(out)
}

fn ev(name: &str, data: Value) -> SseEvent {
    SseEvent::default().event(name).data(data.to_string())
}

/// The content blocks of a streamed message: which is open (its index and kind), and the
/// next index.
#[derive(Default)]
struct Blocks {
    open: Option<(usize, &'static str)>,
    next: usize,
}

impl Blocks {
    /// Text of `kind` (`thinking` or `text`), opening its block (and closing another) first.
    fn emit(&mut self, out: &mut Vec<SseEvent>, kind: &'static str, text: &str) {
        if text.is_empty() {
            return;
        }
        if self.open.map(|(_, k)| k) != Some(kind) {
            self.close(out);
            let block = if kind == "thinking" {
                json!({"type": "thinking", "thinking": "", "signature": ""})
            } else {
                json!({"type": "text", "text": ""})
            };
            out.push(ev(
                "content_block_start",
                json!({"type": "content_block_start", "index": self.next, "content_block": block}),
            ));
            self.open = Some((self.next, kind));
            self.next += 1;
        }
        let delta = if kind == "thinking" {
            json!({"type": "thinking_delta", "thinking": text})
        } else {
            json!({"type": "text_delta", "text": text})
        };
        let i = self.open.map_or(0, |(i, _)| i);
        out.push(ev(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": i, "delta": delta}),
        ));
    }

    /// Closes the open block.
    fn close(&mut self, out: &mut Vec<SseEvent>) {
        if let Some((i, _)) = self.open.take() {
            out.push(ev("content_block_stop", json!({"type": "content_block_stop", "index": i})));
        }
    }

    /// A whole `tool_use` block: start, the input as one JSON delta, stop.
    fn tool_use(&mut self, out: &mut Vec<SseEvent>, c: &crate::chat::tools::ToolCall) {
        let i = self.next;
        self.next += 1;
        let block =
            json!({"type": "tool_use", "id": new_id("toolu_"), "name": c.name, "input": {}});
        out.push(ev(
            "content_block_start",
            json!({"type": "content_block_start", "index": i, "content_block": block}),
        ));
        out.push(ev(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": i,
                   "delta": {"type": "input_json_delta", "partial_json": c.arguments.to_string()}}),
        ));
        out.push(ev("content_block_stop", json!({"type": "content_block_stop", "index": i})));
    }
}

fn stop_reason(finish: &str, stop_word: &Option<String>, calls: bool) -> &'static str {
    match finish {
        _ if calls => "tool_use",
        "length" => "max_tokens",
        _ if stop_word.is_some() => "stop_sequence",
        _ => "end_turn",
    }
}

async fn run(st: Arc<AppState>, body: Body) -> Result<Response, ApiError> {
    let o = parse_body(&body)?;
    let req = request::parse_chat(&to_openai(&o)?, &st.sampling)?;
    let (rx, opened) = start(&st, &req)?;
    let shape = reply_shape(&st, &req, opened);
    let model = req.model.clone().unwrap_or_else(|| st.model_name.clone());
    let id = new_id("msg_");
    if !req.stream {
        let out = collect(rx).await?;
        let (reasoning, text, calls) = crate::chat::reply::split(&shape, &out.text);
        let end = &out.end;
        let mut content = Vec::new();
        if let Some(r) = reasoning {
            content.push(json!({"type": "thinking", "thinking": r, "signature": ""}));
        }
        if !text.is_empty() || calls.is_empty() {
            content.push(json!({"type": "text", "text": text}));
        }
        for c in &calls {
            content.push(json!({"type": "tool_use", "id": new_id("toolu_"), "name": c.name, "input": c.arguments}));
        }
        return Ok(Json(json!({
            "id": id, "type": "message", "role": "assistant", "model": model,
            "content": content,
            "stop_reason": stop_reason(end.finish_reason, &end.stop_word, !calls.is_empty()),
            "stop_sequence": end.stop_word,
            "usage": {"input_tokens": end.prompt_tokens, "output_tokens": end.completion_tokens,
                      "cache_read_input_tokens": end.cached_tokens},
        }))
        .into_response());
    }
    let (tx, sse_rx) = sse_channel();
    let _ = tx.send(ev(
        "message_start",
        json!({"type": "message_start", "message": {
        "id": id, "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": 0, "output_tokens": 0}}}),
    ));
    let mut merged = merge(vec![rx]);
    tokio::spawn(async move {
        let mut split = ReplySplit::new(&shape);
        let mut blocks = Blocks::default();
        loop {
            let item = tokio::select! {
                e = merged.recv() => e,
                _ = tx.closed() => return,
            };
            let Some((_, event)) = item else { return };
            let mut out = Vec::new();
            let mut end = false;
            match event {
                Event::Token { text, .. } => {
                    let (r, text) = split.push(&text);
                    blocks.emit(&mut out, "thinking", &r);
                    blocks.emit(&mut out, "text", &text);
                }
                Event::Done(Finished { finish_reason, completion_tokens, stop_word, .. }) => {
                    let (r, rest, calls) = split.finish();
                    blocks.emit(&mut out, "thinking", &r);
                    blocks.emit(&mut out, "text", &rest);
                    blocks.close(&mut out);
                    for c in &calls {
                        blocks.tool_use(&mut out, c);
                    }
                    out.push(ev("message_delta", json!({"type": "message_delta",
                        "delta": {"stop_reason": stop_reason(finish_reason, &stop_word, !calls.is_empty()), "stop_sequence": stop_word},
                        "usage": {"output_tokens": completion_tokens}})));
                    out.push(ev("message_stop", json!({"type": "message_stop"})));
                    end = true;
                }
                Event::Failed(e) => {
                    out.push(ev("error", json!({"type": "error", "error": {"type": "api_error", "message": e.message}})));
                    end = true;
                }
            }
            for e in out {
                if tx.send(e).is_err() {
                    return;
                }
            }
            if end {
                return;
            }
        }
    });
    Ok(sse_response(sse_rx))
}

/// An `image` block's source as a URL: `{"type": "base64", "media_type", "data"}` becomes a
/// `data:` URL; `{"type": "url", "url"}` stays (and is refused as remote later).
fn image_source(b: &Value, field: &str) -> Result<String, ApiError> {
    let src = b.get("source").ok_or_else(|| ApiError::field(field, "is required"))?;
    let get = |k: &str| {
        src.get(k)
            .and_then(Value::as_str)
            .ok_or_else(|| ApiError::field(&format!("{field}.{k}"), "is required: a string"))
    };
    match get("type")? {
        "base64" => Ok(format!("data:{};base64,{}", get("media_type")?, get("data")?)),
        "url" => Ok(get("url")?.to_string()),
        t => Err(ApiError::field(
            &format!("{field}.type"),
            format!("'{t}' image sources are not supported (base64; url is refused as remote)"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn convert(body: Value) -> Result<Map<String, Value>, ApiError> {
        to_openai(body.as_object().unwrap())
    }

    #[test]
    fn a_thinking_budget_becomes_the_reasoning_budget() {
        let msgs = json!([{"role": "user", "content": "hi"}]);
        let o = convert(json!({"max_tokens": 8, "messages": msgs,
                               "thinking": {"type": "enabled", "budget_tokens": 64}}))
        .unwrap();
        assert_eq!(o["thinking_budget_tokens"], 64);
        assert_eq!(o["chat_template_kwargs"]["enable_thinking"], true);
        let o =
            convert(json!({"max_tokens": 8, "messages": msgs, "thinking": {"type": "disabled"}}))
                .unwrap();
        assert!(o.get("thinking_budget_tokens").is_none());
        assert_eq!(o["chat_template_kwargs"]["enable_thinking"], false);
        let e = convert(json!({"max_tokens": 8, "messages": msgs,
                               "thinking": {"type": "enabled", "budget_tokens": "lots"}}))
        .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("thinking.budget_tokens"));
        assert!(convert(json!({"max_tokens": 8, "messages": msgs, "metadata": {"user_id": "u1"}}))
            .is_ok());
        let e = convert(json!({"max_tokens": 8, "messages": msgs, "metadata": {"user_id": 5}}))
            .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("metadata.user_id"));
    }
}
