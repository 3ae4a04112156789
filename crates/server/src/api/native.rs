//! llama-server's own endpoints: `/completion` and `/infill` (its body: `content`, `stop`,
//! `timings`; streamed as `data: {...}` events without `[DONE]`), `/tokenize`,
//! `/detokenize`, `/apply-template`, `/health`, `/props`, `/slots`, `/metrics`,
//! `/lora-adapters`; OpenAI's
//! `GET /v1/models`; and the chat page at `/`.

use crate::api::generate::{collect, merge, start};
use crate::api::request::{self, GenRequest};
use crate::engine::{Event, Finished};
use crate::error::ApiError;
use crate::http::sse::{sse_channel, sse_response};
use crate::http::{AppState, Body, St};
use crate::ids::now;
use crate::json::parse_body;
use axum::extract::State;
use axum::http::header;
use axum::response::sse::Event as SseEvent;
use axum::response::{Html, IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::sync::Arc;

/// llama-server's `POST /completion`.
pub async fn completion(State(st): St, body: Body) -> Result<Response, ApiError> {
    let o = parse_body(&body)?;
    let req = request::parse_native(&o, &st.sampling)?;
    native(st, req).await
}

/// llama-server's `POST /infill`.
pub async fn infill(State(st): St, body: Body) -> Result<Response, ApiError> {
    let o = parse_body(&body)?;
    let req = request::parse_infill(&o, &st.sampling)?;
    native(st, req).await
}

/// llama-server's `stop_type`: `eos`, `word` (a stop string) or `limit`.
fn stop_type(finish_reason: &str, text_hit_stop: bool) -> &'static str {
    match finish_reason {
        "length" => "limit",
        _ if text_hit_stop => "word",
        _ => "eos",
    }
}

/// `/completion` and `/infill`: llama-server's own body (`content`, `stop`, `timings`, ...);
/// streamed as `data: {...}` events without `[DONE]`, the last with `"stop": true`.
async fn native(st: Arc<AppState>, req: GenRequest) -> Result<Response, ApiError> {
    let (rx, _) = start(&st, &req)?;
    let model = req.model.clone().unwrap_or_else(|| st.model_name.clone());
    let has_stops = !req.stop.is_empty();
    let last = move |end: &Finished, content: String| {
        let reason = end.finish_reason;
        json!({
            "content": content,
            "stop": true,
            "model": model,
            "stop_type": stop_type(reason, has_stops && reason == "stop"),
            "tokens_predicted": end.completion_tokens,
            "tokens_evaluated": end.prompt_tokens,
            "tokens_cached": end.cached_tokens,
            "truncated": false,
            "timings": end.timings.json(),
        })
    };
    if !req.stream {
        let o = collect(rx).await?;
        return Ok(Json(last(&o.end, o.text)).into_response());
    }
    let (sse_tx, sse_rx) = sse_channel();
    let mut merged = merge(vec![rx]);
    tokio::spawn(async move {
        loop {
            let item = tokio::select! {
                ev = merged.recv() => ev,
                _ = sse_tx.closed() => return,
            };
            let Some((_, ev)) = item else { return };
            let (data, end) = match ev {
                Event::Token { text, .. } if text.is_empty() => continue,
                Event::Token { text, .. } => (json!({"content": text, "stop": false}), false),
                Event::Done(end) => (last(&end, String::new()), true),
                Event::Failed(e) => (e.body(), true),
            };
            if sse_tx.send(SseEvent::default().data(data.to_string())).is_err() || end {
                return;
            }
        }
    });
    Ok(sse_response(sse_rx))
}

/// The chat page (`GET /`).
pub(crate) async fn page() -> Html<&'static str> {
    Html(include_str!("../../static/chat.html"))
}

/// `GET /health`.
pub(crate) async fn health() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// `GET /metrics` (Prometheus text).
pub(crate) async fn metrics(State(st): St) -> impl IntoResponse {
    st.metrics.set_queue(st.engine.queued());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], st.metrics.render())
}

/// OpenAI's `GET /v1/models`: the one model served.
pub(crate) async fn models(State(st): St) -> Json<Value> {
    Json(json!({
        "object": "list",
        "data": [{
            "id": st.model_name,
            "object": "model",
            "created": now(),
            "owned_by": "tessera",
            "meta": {
                "n_vocab": st.model.hparams.n_vocab,
                "n_ctx_train": st.model.hparams.n_ctx_train,
                "n_params": st.model.n_params(),
                "size": st.model.weights.n_bytes(),
            }
        }]
    }))
}

/// llama-server's `GET /props`: what clients (its web UI, agents) read to size requests and
/// render chats: per-slot context, slot count, chat template, build, whether it sees images.
pub(crate) async fn props(State(st): St) -> Json<Value> {
    Json(json!({
        "default_generation_settings": {
            "n_ctx": st.engine.n_ctx,
            "model": st.model_name,
        },
        "total_slots": st.engine.n_slots,
        "model_alias": st.model_name,
        "chat_template": st.template.as_ref().map(|t| t.source.clone()).unwrap_or_default(),
        "n_ctx_train": st.model.hparams.n_ctx_train,
        "build_info": format!("tessera {}", env!("CARGO_PKG_VERSION")),
        "modalities": {"vision": st.vision.is_some(), "audio": false},
    }))
}

/// llama-server's `GET /lora-adapters`: each adapter's id, path, global scale, task name and
/// prompt prefix.
pub(crate) async fn lora_adapters(State(st): St) -> Json<Value> {
    Json(st.loras.to_json())
}

/// llama-server's `POST /lora-adapters`: `[{"id": N, "scale": S}, ...]` sets the global
/// scales (adapters not listed: 0) that requests without their own `lora` run with.
pub(crate) async fn set_lora_adapters(State(st): St, body: Body) -> Result<Json<Value>, ApiError> {
    let v: Value = serde_json::from_slice(&body).map_err(|e| {
        ApiError::new(400, "invalid_request_error", format!("invalid JSON body: {e}"))
    })?;
    if !v.is_array() {
        return Err(ApiError::new(400, "invalid_request_error", "Request body must be an array"));
    }
    let scales = st.loras.parse(&v, "body")?;
    st.loras.set(scales);
    Ok(Json(json!({"success": true})))
}

/// llama-server's `GET /slots`: each slot's state.
pub(crate) async fn slots(State(st): St) -> Json<Value> {
    let n_ctx = st.engine.n_ctx;
    Json(Value::Array(
        st.engine
            .slots()
            .into_iter()
            .map(|s| {
                json!({
                    "id": s.id,
                    "n_ctx": n_ctx,
                    "is_processing": s.is_processing,
                    "n_cached": s.n_cached,
                    "n_prompt_tokens": s.n_prompt,
                    "next_token": {"n_decoded": s.n_decoded},
                })
            })
            .collect(),
    ))
}

/// llama-server's `POST /apply-template`: the prompt the chat template makes of `messages`.
pub(crate) async fn apply_template(State(st): St, body: Body) -> Result<Json<Value>, ApiError> {
    let o = parse_body(&body)?;
    let req = request::parse_chat(&o, &st.sampling)?;
    let request::Prompt::Chat(msgs) = &req.prompt else {
        return Err(ApiError::field("messages", "is required"));
    };
    Ok(Json(
        json!({ "prompt": crate::api::generate::render(&st, msgs, req.tools.as_ref(), &req.template_kwargs)? }),
    ))
}

/// llama-server's `POST /tokenize`: `content` as token ids (with pieces if `with_pieces`).
pub(crate) async fn tokenize(State(st): St, body: Body) -> Result<Json<Value>, ApiError> {
    let o = parse_body(&body)?;
    let (content, add_special, with_pieces) = request::parse_tokenize(&o)?;
    let ids = st.model.vocab.tokenize(&content, add_special, true);
    let tokens: Vec<Value> = if with_pieces {
        ids.iter()
            .map(|&t| {
                let b = st.model.vocab.token_to_piece(t, true);
                match String::from_utf8(b.clone()) {
                    Ok(s) => json!({"id": t, "piece": s}),
                    Err(_) => json!({"id": t, "piece": b}),
                }
            })
            .collect()
    } else {
        ids.iter().map(|&t| json!(t)).collect()
    };
    Ok(Json(json!({ "tokens": tokens })))
}

/// llama-server's `POST /detokenize`: `tokens` as text.
pub(crate) async fn detokenize(State(st): St, body: Body) -> Result<Json<Value>, ApiError> {
    let o = parse_body(&body)?;
    let ids = request::parse_detokenize(&o, st.model.vocab.n_tokens())?;
    Ok(Json(json!({ "content": st.model.vocab.detokenize(&ids, false, false) })))
}
