//! OpenAI's Responses API (`POST /v1/responses`): `input` (a string, or items: messages with
//! text parts, `function_call` and `function_call_output`), `instructions`,
//! `max_output_tokens`, function `tools` and `tool_choice`, `metadata` (echoed); answered as a
//! response object (`output` items: `reasoning`, `message` with `output_text`,
//! `function_call`) or as its streaming events (`response.created` ...
//! `response.completed`). Responses are stored in memory unless `store` is false
//! ([`crate::response_store`]): `previous_response_id` continues one, and
//! `GET` / `DELETE /v1/responses/{id}` read or forget it.

use crate::api::fields;
use crate::api::generate::{collect, merge, reply_shape, start};
use crate::api::request;
use crate::chat::content::{self, RESPONSES_TEXT};
use crate::chat::reply::ReplySplit;
use crate::chat::tools::ToolCall;
use crate::engine::{Event, Finished};
use crate::error::ApiError;
use crate::http::sse::{sse_channel, sse_response, SseTx};
use crate::http::{AppState, Body};
use crate::ids::{new_id, now};
use crate::json::{parse_body, type_name};
use axum::extract::{Path, State};
use axum::response::sse::Event as SseEvent;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};
use std::sync::Arc;

/// The request as the OpenAI chat body the rest of the server reads.
/// `previous`: the stored conversation `previous_response_id` continues. Returns the chat body
/// and the conversation without `instructions` (what a stored response keeps).
fn to_chat(
    o: &Map<String, Value>,
    previous: &[Value],
) -> Result<(Map<String, Value>, Vec<Value>), ApiError> {
    let mut msgs = Vec::new();
    if let Some(i) = o.get("instructions").filter(|v| !v.is_null()) {
        msgs.push(
            json!({"role": "system", "content": content::text(i, "instructions", RESPONSES_TEXT)?}),
        );
    }
    let n_instructions = msgs.len();
    msgs.extend(previous.iter().cloned());
    match o.get("input") {
        Some(Value::String(s)) => msgs.push(json!({"role": "user", "content": s})),
        Some(Value::Array(items)) => {
            for (i, it) in items.iter().enumerate() {
                let f = |k: &str| format!("input[{i}].{k}");
                match it.get("type").and_then(Value::as_str).unwrap_or("message") {
                    "message" => {
                        let role = it.get("role").and_then(Value::as_str).unwrap_or_default();
                        let content = content::responses_message(it.get("content").unwrap_or(&Value::Null), &f("content"), role)?;
                        msgs.push(json!({"role": role, "content": content}));
                    }
                    "function_call" => {
                        let call = json!({"id": it.get("call_id").cloned().unwrap_or_default(), "type": "function",
                            "function": {"name": it.get("name").cloned().unwrap_or_default(),
                                         "arguments": it.get("arguments").cloned().unwrap_or(json!("{}"))}});
                        // Consecutive calls belong to one assistant turn.
                        match msgs.last_mut() {
                            Some(last) if last["role"] == "assistant" && last.get("tool_calls").is_some() => {
                                if let Some(a) = last["tool_calls"].as_array_mut() {
                                    a.push(call);
                                }
                            }
                            _ => msgs.push(json!({"role": "assistant", "content": "", "tool_calls": [call]})),
                        }
                    }
                    "function_call_output" => {
                        let output = it.get("output").and_then(Value::as_str).ok_or_else(|| {
                            ApiError::field(&f("output"), "is required: a string")
                        })?;
                        msgs.push(json!({"role": "tool", "tool_call_id": it.get("call_id").cloned().unwrap_or_default(), "content": output}));
                    }
                    "reasoning" => {}
                    t => {
                        return Err(ApiError::field(
                            &f("type"),
                            format!("'{t}' items are not supported (message, function_call, function_call_output)"),
                        ))
                    }
                }
            }
        }
        None | Some(Value::Null) => return Err(ApiError::field("input", "is required")),
        Some(other) => {
            return Err(ApiError::field(
                "input",
                format!("expected a string or an array of items, got {}", type_name(other)),
            ))
        }
    }
    let history = msgs[n_instructions..].to_vec();
    let mut out = Map::new();
    out.insert("messages".into(), Value::Array(msgs));
    for k in ["temperature", "top_p", "stream", "model", "parallel_tool_calls"] {
        if let Some(v) = o.get(k) {
            out.insert(k.into(), v.clone());
        }
    }
    if let Some(v) = o.get("max_output_tokens").filter(|v| !v.is_null()) {
        out.insert("max_tokens".into(), v.clone());
    }
    if let Some(tools) = o.get("tools").filter(|v| !v.is_null()) {
        let Value::Array(tools) = tools else {
            return Err(ApiError::field(
                "tools",
                format!("expected an array, got {}", type_name(tools)),
            ));
        };
        let mut list = Vec::new();
        for (i, t) in tools.iter().enumerate() {
            if t.get("type").and_then(Value::as_str) != Some("function") {
                return Err(ApiError::field(
                    &format!("tools[{i}].type"),
                    "only \"function\" tools are supported",
                ));
            }
            list.push(json!({"type": "function", "function": {
                "name": t.get("name").cloned().unwrap_or_default(),
                "description": t.get("description").cloned().unwrap_or_default(),
                "parameters": t.get("parameters").cloned().unwrap_or(Value::Null),
            }}));
        }
        out.insert("tools".into(), Value::Array(list));
    }
    // Structured output (`text.format`) becomes `response_format`; anything the chat path
    // cannot honour is refused by name.
    match o.get("text") {
        None | Some(Value::Null | Value::Object(_)) => {}
        Some(other) => {
            return Err(ApiError::field(
                "text",
                format!("expected an object ({{\"format\": ...}}), got {}", type_name(other)),
            ))
        }
    }
    if let Some(format) = o.get("text").and_then(|t| t.get("format")).filter(|v| !v.is_null()) {
        match format.get("type").and_then(Value::as_str) {
            Some("text") => {}
            Some("json_object") => {
                out.insert("response_format".into(), json!({"type": "json_object"}));
            }
            Some("json_schema") => {
                let schema = format
                    .get("schema")
                    .cloned()
                    .ok_or_else(|| ApiError::field("text.format.schema", "is required"))?;
                out.insert(
                    "response_format".into(),
                    json!({"type": "json_schema", "json_schema": {"schema": schema}}),
                );
            }
            other => {
                return Err(ApiError::field(
                    "text.format.type",
                    format!("{other:?} is not one of text, json_object, json_schema"),
                ))
            }
        }
    }
    if o.get("reasoning").is_some_and(|v| !v.is_null()) {
        return Err(ApiError::field(
            "reasoning",
            "reasoning settings are not supported: the model thinks as its chat template says \
             (the server's --reasoning off turns thinking off, --reasoning-budget limits it)",
        ));
    }
    if let Some(tc) = o.get("tool_choice").filter(|v| !v.is_null()) {
        let choice = match tc {
            Value::String(_) => tc.clone(),
            Value::Object(c) => {
                json!({"type": "function", "function": {"name": c.get("name").cloned().unwrap_or_default()}})
            }
            other => {
                return Err(ApiError::field(
                    "tool_choice",
                    format!("expected a string or an object, got {}", type_name(other)),
                ))
            }
        };
        out.insert("tool_choice".into(), choice);
    }
    Ok((out, history))
}

fn call_item(c: &ToolCall) -> Value {
    json!({"type": "function_call", "id": new_id("fc_"), "call_id": c.id, "name": c.name,
           "arguments": c.arguments.to_string(), "status": "completed"})
}

fn message_item(item_id: &str, text: &str) -> Value {
    json!({"type": "message", "id": item_id, "status": "completed", "role": "assistant",
           "content": [{"type": "output_text", "text": text, "annotations": []}]})
}

fn reasoning_item(text: &str) -> Value {
    json!({"type": "reasoning", "id": new_id("rs_"), "summary": [],
           "content": [{"type": "reasoning_text", "text": text}]})
}

/// What a continuation sees of a response: its text and calls as an assistant message.
fn output_message(text: &str, calls: &[ToolCall]) -> Value {
    let mut m = json!({"role": "assistant", "content": text});
    if !calls.is_empty() {
        m["tool_calls"] = calls
            .iter()
            .map(|c| {
                json!({"id": c.id, "type": "function",
                       "function": {"name": c.name, "arguments": c.arguments.to_string()}})
            })
            .collect();
    }
    m
}

/// A request's own fields beyond the chat body: `store`, `previous_response_id` (and the
/// conversation it continues), `metadata`.
struct Extras {
    store: bool,
    previous_id: Option<String>,
    previous: Vec<Value>,
    metadata: Value,
}

fn extras(st: &AppState, o: &Map<String, Value>) -> Result<Extras, ApiError> {
    fields::check(o, fields::RESPONSES, false)?;
    let store = crate::json::opt_bool(o, "store")?.unwrap_or(true);
    let previous_id = match o.get("previous_response_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => {
            return Err(ApiError::field(
                "previous_response_id",
                format!("expected a string, got {}", type_name(other)),
            ))
        }
    };
    let previous = match &previous_id {
        None => Vec::new(),
        Some(id) => st.responses.get(id).map(|s| s.history).ok_or_else(|| {
            ApiError::field(
                "previous_response_id",
                format!(
                    "no stored response '{id}': responses are kept in memory, the newest {}, \
                     until the server restarts (and not with store: false)",
                    crate::response_store::MAX_STORED
                ),
            )
        })?,
    };
    let metadata = match o.get("metadata") {
        None | Some(Value::Null) => Value::Null,
        // OpenAI's limits: 16 pairs, keys of at most 64 characters, values of at most 512.
        Some(Value::Object(m))
            if m.len() <= 16
                && m.iter().all(|(k, v)| {
                    k.chars().count() <= 64 && v.as_str().is_some_and(|v| v.chars().count() <= 512)
                }) =>
        {
            Value::Object(m.clone())
        }
        Some(_) => {
            return Err(ApiError::field(
                "metadata",
                "expected an object of at most 16 string values, keys of at most 64 \
                 characters and values of at most 512",
            ))
        }
    };
    Ok(Extras { store, previous_id, previous, metadata })
}

impl Extras {
    /// Fills the response object's fields from the request, and keeps it if asked to.
    fn finish(
        &self,
        st: &AppState,
        r: &mut Value,
        history: &[Value],
        text: &str,
        calls: &[ToolCall],
    ) {
        r["store"] = json!(self.store);
        r["previous_response_id"] = json!(self.previous_id);
        r["metadata"] = if self.metadata.is_null() { json!({}) } else { self.metadata.clone() };
        if self.store {
            let mut h = history.to_vec();
            h.push(output_message(text, calls));
            let id = r["id"].as_str().unwrap_or_default().to_string();
            st.responses.put(id, crate::response_store::Stored { history: h, response: r.clone() });
        }
    }
}

/// The response object around `output`.
#[allow(clippy::too_many_arguments)]
fn response(
    resp_id: &str,
    created: u64,
    model: &str,
    output: Vec<Value>,
    finish: &str,
    prompt: usize,
    cached: usize,
    generated: usize,
) -> Value {
    let complete = finish != "length";
    json!({
        "id": resp_id, "object": "response", "created_at": created, "model": model,
        "status": if complete { "completed" } else { "incomplete" },
        "incomplete_details": if complete { Value::Null } else { json!({"reason": "max_output_tokens"}) },
        "output": output, "error": null, "parallel_tool_calls": true, "tool_choice": "auto", "tools": [],
        "usage": {"input_tokens": prompt, "output_tokens": generated, "total_tokens": prompt + generated,
                  "input_tokens_details": {"cached_tokens": cached},
                  "output_tokens_details": {"reasoning_tokens": 0}},
    })
}

/// `POST /v1/responses`.
pub async fn responses(State(st): State<Arc<AppState>>, body: Body) -> Result<Response, ApiError> {
    let o = parse_body(&body)?;
    let ex = extras(&st, &o)?;
    let (chat, history) = to_chat(&o, &ex.previous)?;
    let req = request::parse_chat(&chat, &st.sampling)?;
    let (rx, opened) = start(&st, &req)?;
    let shape = reply_shape(&st, &req, opened);
    let model = req.model.clone().unwrap_or_else(|| st.model_name.clone());
    let (resp_id, created) = (new_id("resp_"), now());
    if !req.stream {
        let out = collect(rx).await?;
        let (reasoning, text, calls) = crate::chat::reply::split(&shape, &out.text);
        let mut output = Vec::new();
        if let Some(r) = reasoning {
            output.push(reasoning_item(&r));
        }
        if !text.is_empty() || calls.is_empty() {
            output.push(message_item(&new_id("msg_"), &text));
        }
        output.extend(calls.iter().map(call_item));
        let mut r = response(
            &resp_id,
            created,
            &model,
            output,
            out.end.finish_reason,
            out.end.prompt_tokens,
            out.end.cached_tokens,
            out.end.completion_tokens,
        );
        ex.finish(&st, &mut r, &history, &text, &calls);
        return Ok(Json(r).into_response());
    }
    let (tx, sse_rx) = sse_channel();
    let mut merged = merge(vec![rx]);
    tokio::spawn(async move {
        let mut seq = 0u64;
        let mut send = |tx: &SseTx, mut data: Value| {
            data["sequence_number"] = json!(seq);
            seq += 1;
            let name = data["type"].as_str().unwrap_or_default().to_string();
            tx.send(SseEvent::default().event(name).data(data.to_string())).is_ok()
        };
        let mut shell = response(&resp_id, created, &model, Vec::new(), "stop", 0, 0, 0);
        shell["store"] = json!(ex.store);
        shell["previous_response_id"] = json!(ex.previous_id);
        shell["metadata"] = if ex.metadata.is_null() { json!({}) } else { ex.metadata.clone() };
        let mut start_shell = shell.clone();
        start_shell["status"] = json!("in_progress");
        send(&tx, json!({"type": "response.created", "response": start_shell.clone()}));
        send(&tx, json!({"type": "response.in_progress", "response": start_shell}));
        let mut split = ReplySplit::new(&shape);
        let msg_id = new_id("msg_");
        let (mut reasoning, mut text) = (String::new(), String::new());
        let mut msg_open = false;
        // Text shown: opens the message item on its first piece.
        let mut show = |tx: &SseTx,
                        send: &mut dyn FnMut(&SseTx, Value) -> bool,
                        piece: &str,
                        text: &mut String| {
            if piece.is_empty() {
                return;
            }
            if !msg_open {
                msg_open = true;
                let item = json!({"type": "message", "id": msg_id, "status": "in_progress", "role": "assistant", "content": []});
                send(
                    tx,
                    json!({"type": "response.output_item.added", "output_index": 0, "item": item}),
                );
                send(
                    tx,
                    json!({"type": "response.content_part.added", "item_id": msg_id, "output_index": 0, "content_index": 0,
                                "part": {"type": "output_text", "text": "", "annotations": []}}),
                );
            }
            text.push_str(piece);
            send(
                tx,
                json!({"type": "response.output_text.delta", "item_id": msg_id, "output_index": 0, "content_index": 0, "delta": piece}),
            );
        };
        loop {
            let item = tokio::select! {
                e = merged.recv() => e,
                _ = tx.closed() => return,
            };
            let Some((_, event)) = item else { return };
            match event {
                Event::Token { text: piece, .. } => {
                    let (r, piece) = split.push(&piece);
                    reasoning.push_str(&r);
                    show(&tx, &mut send, &piece, &mut text);
                }
                Event::Done(Finished {
                    finish_reason,
                    prompt_tokens,
                    cached_tokens,
                    completion_tokens,
                    ..
                }) => {
                    let (r, rest, calls) = split.finish();
                    reasoning.push_str(&r);
                    show(&tx, &mut send, &rest, &mut text);
                    let mut output = Vec::new();
                    if !reasoning.is_empty() {
                        output.push(reasoning_item(&reasoning));
                    }
                    if msg_open {
                        let item = message_item(&msg_id, &text);
                        send(
                            &tx,
                            json!({"type": "response.output_text.done", "item_id": msg_id, "output_index": 0, "content_index": 0, "text": text}),
                        );
                        send(
                            &tx,
                            json!({"type": "response.content_part.done", "item_id": msg_id, "output_index": 0, "content_index": 0,
                                         "part": item["content"][0].clone()}),
                        );
                        send(
                            &tx,
                            json!({"type": "response.output_item.done", "output_index": 0, "item": item.clone()}),
                        );
                        output.push(item);
                    }
                    for c in &calls {
                        let index = output.len();
                        let item = call_item(c);
                        let mut added = item.clone();
                        added["arguments"] = json!("");
                        added["status"] = json!("in_progress");
                        send(
                            &tx,
                            json!({"type": "response.output_item.added", "output_index": index, "item": added}),
                        );
                        send(
                            &tx,
                            json!({"type": "response.function_call_arguments.delta", "item_id": item["id"], "output_index": index, "delta": item["arguments"]}),
                        );
                        send(
                            &tx,
                            json!({"type": "response.function_call_arguments.done", "item_id": item["id"], "output_index": index, "arguments": item["arguments"]}),
                        );
                        send(
                            &tx,
                            json!({"type": "response.output_item.done", "output_index": index, "item": item.clone()}),
                        );
                        output.push(item);
                    }
                    let mut done = response(
                        &resp_id,
                        created,
                        &model,
                        output,
                        finish_reason,
                        prompt_tokens,
                        cached_tokens,
                        completion_tokens,
                    );
                    ex.finish(&st, &mut done, &history, &text, &calls);
                    let kind = if done["status"] == "completed" {
                        "response.completed"
                    } else {
                        "response.incomplete"
                    };
                    send(&tx, json!({"type": kind, "response": done}));
                    return;
                }
                Event::Failed(e) => {
                    send(
                        &tx,
                        json!({"type": "error", "code": e.code, "message": e.message, "param": e.param}),
                    );
                    return;
                }
            }
        }
    });
    Ok(sse_response(sse_rx))
}

fn not_stored(id: &str) -> ApiError {
    ApiError::new(404, "invalid_request_error", format!("no stored response '{id}'"))
        .with_code("not_found")
}

/// `GET /v1/responses/{id}`: a stored response.
pub async fn get_response(
    State(st): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    st.responses.get(&id).map(|s| Json(s.response)).ok_or_else(|| not_stored(&id))
}

/// `DELETE /v1/responses/{id}`: forgets a stored response.
pub async fn delete_response(
    State(st): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    if !st.responses.delete(&id) {
        return Err(not_stored(&id));
    }
    Ok(Json(json!({"id": id, "object": "response", "deleted": true})))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_map_to_chat_or_fail_by_name() {
        let o = |v: Value| v.as_object().unwrap().clone();
        let (chat, _) = to_chat(
            &o(json!({"input": "hi", "text": {"format": {"type": "json_schema", "name": "x",
            "schema": {"type": "object"}}}})),
            &[],
        )
        .unwrap();
        assert_eq!(chat["response_format"]["json_schema"]["schema"], json!({"type": "object"}));
        for (body, field) in [
            (json!({"input": "hi", "reasoning": {"effort": "low"}}), "reasoning"),
            (json!({"input": "hi", "text": {"format": {"type": "yaml"}}}), "text.format.type"),
            (json!({"input": [{"type": "web_search_call"}]}), "input[0].type"),
        ] {
            let e = to_chat(&o(body.clone()), &[]).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(field), "{body}: {}", e.message);
        }
    }

    #[test]
    fn a_continuation_puts_new_instructions_before_the_stored_conversation() {
        let o = json!({"input": "and then?", "instructions": "be brief"});
        let before = vec![
            json!({"role": "user", "content": "hi"}),
            json!({"role": "assistant", "content": "hello"}),
        ];
        let (chat, history) = to_chat(o.as_object().unwrap(), &before).unwrap();
        let roles: Vec<&str> = chat["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        assert_eq!(roles, ["system", "user", "assistant", "user"]);
        // What is stored leaves the instructions out: they do not carry over.
        assert_eq!(history.len(), 3);
        assert_eq!(history[2]["content"], "and then?");
        let m = output_message("", &[]);
        assert_eq!(m["role"], "assistant");
    }
}
