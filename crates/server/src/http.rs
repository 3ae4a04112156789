//! The HTTP side: routes, CORS, the request log, the API key check, and the endpoints that
//! do not generate (the generating ones are in [`crate::generate`]).

use crate::api::{self, ApiError};
use crate::engine::Engine;
use crate::generate;
use crate::metrics::Metrics;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use std::sync::Arc;
use tessera_llama::Model;

/// Largest request body (bytes); larger ones get 413.
pub const MAX_BODY: usize = 1 << 20;

/// What the handlers share.
pub struct AppState {
    /// The model (vocabulary, template).
    pub model: Arc<Model>,
    /// The name `/v1/models` lists and responses carry.
    pub model_name: String,
    /// The chat template in force.
    pub template: Option<String>,
    /// Compiles structured-output constraints.
    pub constrainer: crate::constrain::Constrainer,
    /// The engine.
    pub engine: Engine,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// The API keys (`--api-key`, comma-separated, or `--api-key-file`); empty: no key needed.
    pub api_keys: Vec<String>,
    /// A request body must arrive within it (`--timeout`).
    pub body_timeout: std::time::Duration,
    /// Origins browsers may call from (empty: any, as llama-server).
    pub cors_origins: Vec<String>,
    /// `--reasoning-format`.
    pub reasoning_format: crate::reasoning::ReasoningFormat,
    /// The templates' `enable_thinking` (`--reasoning off` turns it off).
    pub enable_thinking: bool,
    /// Responses kept for `previous_response_id` and `GET /v1/responses/{id}`.
    pub responses: crate::response_store::ResponseStore,
    /// `--reasoning-budget` (-1: no limit).
    pub reasoning_budget: i64,
    /// `--reasoning-budget-message`.
    pub reasoning_budget_message: String,
}

type St = State<Arc<AppState>>;

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, Json(self.body())).into_response()
    }
}

/// The router with every endpoint.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/health", get(health))
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(generate::chat))
        .route("/chat/completions", post(generate::chat))
        .route("/v1/completions", post(generate::completions))
        .route("/completions", post(generate::completions))
        .route("/completion", post(generate::completion))
        .route("/v1/messages", post(crate::anthropic::messages))
        .route("/v1/responses", post(crate::responses::responses))
        .route(
            "/v1/responses/{id}",
            get(crate::responses::get_response).delete(crate::responses::delete_response),
        )
        .route("/infill", post(generate::infill))
        .route("/v1/embeddings", post(crate::embed::oai_embeddings))
        .route("/embedding", post(crate::embed::embedding))
        .route("/embeddings", post(crate::embed::embedding))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .route("/apply-template", post(apply_template))
        .route("/metrics", get(metrics))
        .route("/props", get(props))
        .route("/slots", get(slots))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(state.clone(), read_body))
        .layer(middleware::from_fn_with_state(state.clone(), auth))
        .layer(middleware::from_fn_with_state(state.clone(), cors))
        .layer(middleware::from_fn(log_request))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

/// One log line per request (target `tessera_server::http`, level info; warn for 5xx):
/// method, path, status, milliseconds, client address when known.
async fn log_request(req: Request, next: Next) -> Response {
    let (method, path) = (req.method().clone(), req.uri().path().to_string());
    let t0 = std::time::Instant::now();
    let res = next.run(req).await;
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    let status = res.status().as_u16();
    if status >= 500 {
        tracing::warn!("{method} {path} {status} {ms:.1} ms");
    } else if path != "/health" && path != "/metrics" {
        tracing::info!("{method} {path} {status} {ms:.1} ms");
    }
    res
}

/// Cross-origin requests: by default as llama-server allows them (any origin, with
/// credentials); with `--cors-origin`, only the origins listed get the headers, so browsers on
/// others are refused. Preflight `OPTIONS` is answered 204 before the API key check (browsers
/// send no credentials with it).
async fn cors(State(st): St, req: Request, next: Next) -> Response {
    let origin = req.headers().get(header::ORIGIN).cloned();
    let asked = req.headers().get(header::ACCESS_CONTROL_REQUEST_HEADERS).cloned();
    let mut res = if req.method() == Method::OPTIONS {
        StatusCode::NO_CONTENT.into_response()
    } else {
        next.run(req).await
    };
    let allowed = st.cors_origins.is_empty()
        || origin
            .as_ref()
            .and_then(|o| o.to_str().ok())
            .is_some_and(|o| st.cors_origins.iter().any(|a| a == o));
    if !allowed {
        return res;
    }
    let h = res.headers_mut();
    let allow_origin = origin.unwrap_or(HeaderValue::from_static("*"));
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, allow_origin);
    h.insert(header::VARY, HeaderValue::from_static("Origin"));
    h.insert(header::ACCESS_CONTROL_ALLOW_CREDENTIALS, HeaderValue::from_static("true"));
    h.insert(header::ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static("GET, POST, OPTIONS"));
    h.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        asked.unwrap_or(HeaderValue::from_static("Authorization, Content-Type, X-Api-Key")),
    );
    h.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("86400"));
    res
}

/// Reads the request body within `--timeout` (a client that stops half-way gets a 408 and
/// its connection back, instead of holding a handler forever) and at most [`MAX_BODY`] bytes
/// (413), before the handler runs.
async fn read_body(State(st): St, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    match tokio::time::timeout(st.body_timeout, axum::body::to_bytes(body, MAX_BODY)).await {
        Err(_) => ApiError::new(
            408,
            "invalid_request_error",
            format!(
                "the request body did not arrive within {:.0} s (--timeout)",
                st.body_timeout.as_secs_f64()
            ),
        )
        .into_response(),
        Ok(Err(e)) => {
            let too_large = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            let (status, what) = if too_large {
                (413, format!("request body: larger than {MAX_BODY} bytes"))
            } else {
                (400, format!("request body: {e}"))
            };
            ApiError::new(status, "invalid_request_error", what).into_response()
        }
        Ok(Ok(bytes)) => next.run(Request::from_parts(parts, axum::body::Body::from(bytes))).await,
    }
}

/// Whether `given` equals one of `keys`, in time that does not depend on where they differ.
fn key_matches(keys: &[String], given: &str) -> bool {
    let mut any = false;
    for k in keys {
        let (a, b) = (k.as_bytes(), given.as_bytes());
        let mut diff = u8::from(a.len() != b.len());
        for (i, x) in a.iter().enumerate() {
            diff |= x ^ b.get(i).copied().unwrap_or(0);
        }
        any |= diff == 0;
    }
    any
}

async fn not_found(req: Request) -> ApiError {
    ApiError::new(
        404,
        "invalid_request_error",
        format!("no endpoint {} {}", req.method(), req.uri().path()),
    )
}

/// With `--api-key`, every endpoint but `/health` (and the page, which asks for the key)
/// needs `Authorization: Bearer KEY` or `X-Api-Key: KEY` (Anthropic's clients send that).
async fn auth(State(st): St, req: Request, next: Next) -> Response {
    if !st.api_keys.is_empty() {
        let path = req.uri().path();
        if path != "/health" && path != "/" {
            let bearer = req
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "));
            let x_key = req.headers().get("x-api-key").and_then(|v| v.to_str().ok());
            let ok = bearer.or(x_key).is_some_and(|k| key_matches(&st.api_keys, k));
            if !ok {
                return ApiError::new(
                    401,
                    "authentication_error",
                    "invalid or missing API key (Authorization: Bearer KEY, or X-Api-Key: KEY)",
                )
                .with_code("invalid_api_key")
                .into_response();
            }
        }
    }
    next.run(req).await
}

async fn page() -> Html<&'static str> {
    Html(include_str!("../static/chat.html"))
}

async fn health() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

async fn metrics(State(st): St) -> impl IntoResponse {
    st.metrics.set_queue(st.engine.queued());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], st.metrics.render())
}

async fn models(State(st): St) -> Json<Value> {
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
/// render chats: per-slot context, slot count, chat template, build.
async fn props(State(st): St) -> Json<Value> {
    Json(json!({
        "default_generation_settings": {
            "n_ctx": st.engine.n_ctx,
            "model": st.model_name,
        },
        "total_slots": st.engine.n_slots,
        "model_alias": st.model_name,
        "chat_template": st.template.clone().unwrap_or_default(),
        "n_ctx_train": st.model.hparams.n_ctx_train,
        "build_info": format!("tessera {}", env!("CARGO_PKG_VERSION")),
        "modalities": {"vision": false, "audio": false},
    }))
}

/// llama-server's `GET /slots`: each slot's state.
async fn slots(State(st): St) -> Json<Value> {
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

/// The chat template applied to `msgs` (with `tools` unless `tool_choice` is `none`), with
/// the generation prompt; a template failure is the request's error. A template that renders
/// no tools gets them described in a system message (the generic format).
pub(crate) fn render_chat(
    st: &AppState,
    msgs: &[api::ChatMessage],
    tools: Option<&crate::tools::ToolUse>,
    kwargs: &serde_json::Map<String, Value>,
) -> Result<String, ApiError> {
    use crate::tools::{Format, ToolChoice};
    let tpl = st.template.as_deref().ok_or_else(|| {
        ApiError::new(400, "invalid_request_error", "the model has no chat template; use /v1/completions or start the server with --chat-template-file")
    })?;
    let tools = tools.filter(|t| t.choice != ToolChoice::None);
    let mut values: Vec<Value> = msgs.iter().map(api::ChatMessage::template_value).collect();
    let harmony = crate::harmony::is_harmony(tpl);
    if harmony {
        // gpt-oss's template reads earlier reasoning as `thinking`, and a call's message
        // without content (as llama.cpp adjusts the messages).
        for v in &mut values {
            if let Some(r) = v.get("reasoning_content").cloned() {
                v["thinking"] = r;
                if v.get("tool_calls").is_some() {
                    if let Some(o) = v.as_object_mut() {
                        o.remove("content");
                    }
                }
            }
        }
    }
    let mut tool_list = None;
    if let Some(t) = tools {
        if Format::of(tpl) == Format::Generic && !harmony {
            let text = crate::tools::generic_system_prompt(&t.tools);
            match values.first_mut() {
                Some(first) if first["role"] == "system" => {
                    let old = first["content"].as_str().unwrap_or_default().to_string();
                    first["content"] = format!("{old}\n\n{text}").into();
                }
                _ => values.insert(0, json!({"role": "system", "content": text})),
            }
        } else {
            tool_list = Some(crate::tools::template_tools(&t.tools));
        }
    }
    let mut vars = serde_json::Map::new();
    vars.insert("enable_thinking".into(), st.enable_thinking.into());
    vars.extend(kwargs.clone());
    tessera_llama::chat::apply_structured(
        tpl,
        &values,
        tool_list.as_ref(),
        true,
        &st.model.vocab,
        Some(&vars),
    )
    .map_err(|e| ApiError::field("messages", format!("the chat template failed: {e}")))
}

/// llama-server's `POST /apply-template`: the prompt the chat template makes of `messages`.
async fn apply_template(
    State(st): St,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let o = api::parse_body(&body_or_413(body)?)?;
    let req = api::parse_chat(&o)?;
    let api::Prompt::Chat(msgs) = &req.prompt else {
        return Err(ApiError::field("messages", "is required"));
    };
    Ok(Json(json!({ "prompt": render_chat(&st, msgs, req.tools.as_ref(), &req.template_kwargs)? })))
}

/// Reads a body that failed to arrive whole (over the limit) as a 413.
pub(crate) fn body_or_413(
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Bytes, ApiError> {
    body.map_err(|e| {
        let status = e.status().as_u16();
        ApiError::new(status, "invalid_request_error", format!("request body: {}", e.body_text()))
    })
}

async fn tokenize(
    State(st): St,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let o = api::parse_body(&body_or_413(body)?)?;
    let (content, add_special, with_pieces) = api::parse_tokenize(&o)?;
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

async fn detokenize(
    State(st): St,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let o = api::parse_body(&body_or_413(body)?)?;
    let ids = api::parse_detokenize(&o, st.model.vocab.n_tokens())?;
    Ok(Json(json!({ "content": st.model.vocab.detokenize(&ids, false, false) })))
}

pub(crate) fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

pub(crate) fn new_id(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!("{prefix}-{:x}{:04x}", now(), N.fetch_add(1, Ordering::Relaxed) & 0xffff)
}

#[cfg(test)]
mod tests {
    use super::key_matches;

    #[test]
    fn keys_match_whole() {
        let keys = vec!["alpha".to_string(), "beta".to_string()];
        assert!(key_matches(&keys, "alpha") && key_matches(&keys, "beta"));
        for bad in ["alph", "alphaa", "", "Alpha", "alpha,beta"] {
            assert!(!key_matches(&keys, bad), "{bad}");
        }
    }
}
