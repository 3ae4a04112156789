//! The HTTP side: routes, the API key check, OpenAI response bodies and server-sent events.

use crate::api::{self, ApiError, GenRequest, Prompt};
use crate::engine::{Engine, Event, Job, Logprob};
use crate::metrics::Metrics;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::Arc;
use tessera_llama::Model;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;

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
    /// `--api-key`.
    pub api_key: Option<String>,
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
        .route("/v1/chat/completions", post(chat))
        .route("/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/completions", post(completions))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .route("/metrics", get(metrics))
        .route("/props", get(props))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(state.clone(), auth))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

async fn not_found(req: Request) -> ApiError {
    ApiError::new(
        404,
        "invalid_request_error",
        format!("no endpoint {} {}", req.method(), req.uri().path()),
    )
}

/// With `--api-key`, every endpoint but `/health` (and the page, which asks for the key)
/// needs `Authorization: Bearer KEY`.
async fn auth(State(st): St, req: Request, next: Next) -> Response {
    if let Some(key) = &st.api_key {
        let path = req.uri().path();
        if path != "/health" && path != "/" {
            let ok = req
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .is_some_and(|k| k == key);
            if !ok {
                return ApiError::new(
                    401,
                    "authentication_error",
                    "invalid or missing API key (Authorization: Bearer KEY)",
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
            "n_ctx": st.engine.n_ctx_slot,
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

/// Reads a body that failed to arrive whole (over the limit) as a 413.
fn body_or_413(
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

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn new_id(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!("{prefix}-{:x}{:04x}", now(), N.fetch_add(1, Ordering::Relaxed) & 0xffff)
}

/// Renders and tokenizes the prompt, checks it fits a slot, queues the job.
fn start(
    st: &AppState,
    req: &GenRequest,
) -> Result<(mpsc::UnboundedReceiver<Event>, usize), ApiError> {
    let vocab = &st.model.vocab;
    let tokens = match &req.prompt {
        Prompt::Chat(msgs) => {
            let tpl = st.template.as_deref().ok_or_else(|| {
                ApiError::new(400, "invalid_request_error", "the model has no chat template; use /v1/completions or start the server with --chat-template-file")
            })?;
            let pairs: Vec<(&str, &str)> =
                msgs.iter().map(|(r, c)| (r.as_str(), c.as_str())).collect();
            let text = tessera_llama::chat::apply(tpl, &pairs, true, vocab).map_err(|e| {
                ApiError::field("messages", format!("the chat template failed: {e}"))
            })?;
            vocab.tokenize(&text, true, true)
        }
        Prompt::Text(t) => vocab.tokenize(t, true, true),
    };
    if tokens.is_empty() {
        return Err(ApiError::field(
            match req.prompt {
                Prompt::Chat(_) => "messages",
                Prompt::Text(_) => "prompt",
            },
            "the prompt is empty",
        ));
    }
    let limit = st.engine.n_ctx_slot;
    if tokens.len() >= limit {
        let field = match req.prompt {
            Prompt::Chat(_) => "messages",
            Prompt::Text(_) => "prompt",
        };
        let mut e = ApiError::field(
            field,
            format!(
                "the prompt has {} tokens; a slot's context holds {limit} (raise -c or lower -np)",
                tokens.len()
            ),
        );
        e.code = Some("context_length_exceeded");
        return Err(e);
    }
    let matcher = match &req.constraint {
        Some((c, param)) => Some(st.constrainer.matcher(c, param)?),
        None => None,
    };
    let (tx, rx) = mpsc::unbounded_channel();
    let n_prompt = tokens.len();
    st.engine.submit(Job {
        prompt: tokens,
        max_tokens: req.max_tokens,
        sampling: req.sampling.clone(),
        stop: req.stop.clone(),
        logprobs: req.logprobs,
        events: tx,
        matcher,
        ignore_eos: req.ignore_eos,
    })?;
    st.metrics.add_request();
    Ok((rx, n_prompt))
}

fn logprob_json(lp: &Logprob, chat: bool) -> Value {
    let top: Vec<Value> =
        lp.top.iter().map(|(t, b, l)| json!({"token": t, "logprob": l, "bytes": b})).collect();
    if chat {
        json!({"token": lp.token, "logprob": lp.logprob, "bytes": lp.bytes, "top_logprobs": top})
    } else {
        json!({"token": lp.token, "logprob": lp.logprob, "top_logprobs": top})
    }
}

fn usage(prompt: usize, cached: usize, completion: usize) -> Value {
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    })
}

async fn chat(
    State(st): St,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, ApiError> {
    let o = api::parse_body(&body_or_413(body)?)?;
    let req = api::parse_chat(&o)?;
    generate(st, req, true).await
}

async fn completions(
    State(st): St,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, ApiError> {
    let o = api::parse_body(&body_or_413(body)?)?;
    let req = api::parse_completion(&o)?;
    generate(st, req, false).await
}

async fn generate(st: Arc<AppState>, req: GenRequest, chat: bool) -> Result<Response, ApiError> {
    let (mut rx, _) = start(&st, &req)?;
    let id = new_id(if chat { "chatcmpl" } else { "cmpl" });
    let created = now();
    let model = req.model.clone().unwrap_or_else(|| st.model_name.clone());
    if !req.stream {
        let mut text = String::new();
        let mut lps = Vec::new();
        loop {
            match rx.recv().await {
                Some(Event::Token { text: t, logprob }) => {
                    text.push_str(&t);
                    if let Some(lp) = logprob {
                        lps.push(lp);
                    }
                }
                Some(Event::Done {
                    finish_reason,
                    prompt_tokens,
                    cached_tokens,
                    completion_tokens,
                }) => {
                    let logprobs = req.logprobs.map(|_| {
                        if chat {
                            json!({"content": lps.iter().map(|l| logprob_json(l, true)).collect::<Vec<_>>()})
                        } else {
                            json!({
                                "tokens": lps.iter().map(|l| l.token.clone()).collect::<Vec<_>>(),
                                "token_logprobs": lps.iter().map(|l| l.logprob).collect::<Vec<_>>(),
                                "top_logprobs": lps.iter().map(|l| l.top.iter().map(|(t, _, p)| (t.clone(), json!(p))).collect::<serde_json::Map<_, _>>()).collect::<Vec<_>>(),
                            })
                        }
                    });
                    let choice = if chat {
                        json!({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish_reason, "logprobs": logprobs})
                    } else {
                        json!({"index": 0, "text": text, "finish_reason": finish_reason, "logprobs": logprobs})
                    };
                    let body = json!({
                        "id": id,
                        "object": if chat { "chat.completion" } else { "text_completion" },
                        "created": created,
                        "model": model,
                        "choices": [choice],
                        "usage": usage(prompt_tokens, cached_tokens, completion_tokens),
                    });
                    return Ok(Json(body).into_response());
                }
                Some(Event::Failed(e)) => return Err(e),
                None => return Err(ApiError::new(500, "server_error", "the engine stopped")),
            }
        }
    }
    let include_usage = req.include_usage;
    let want_lp = req.logprobs.is_some();
    let object = if chat { "chat.completion.chunk" } else { "text_completion" };
    let chunk = move |choice: Value, usage_v: Option<Value>| -> SseEvent {
        let mut v = json!({"id": id, "object": object, "created": created, "model": model, "choices": [choice]});
        if let Some(u) = usage_v {
            v["choices"] = json!([]);
            v["usage"] = u;
        }
        SseEvent::default().data(v.to_string())
    };
    let first = chat.then(|| chunk(json!({"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}), None));
    let (sse_tx, sse_rx) = mpsc::unbounded_channel::<SseEvent>();
    if let Some(f) = first {
        let _ = sse_tx.send(f);
    }
    let convert = move |ev: Event| -> (Vec<SseEvent>, bool) {
        let mut out: Vec<SseEvent> = Vec::new();
        let mut finished = false;
        match ev {
            Event::Token { text, logprob } => {
                if text.is_empty() && !(want_lp && logprob.is_some()) {
                    return (out, false);
                }
                let lp = logprob.filter(|_| want_lp).map(|l| {
                    if chat {
                        json!({"content": [logprob_json(&l, true)]})
                    } else {
                        json!({"tokens": [l.token], "token_logprobs": [l.logprob]})
                    }
                });
                let choice = if chat {
                    json!({"index": 0, "delta": {"content": text}, "finish_reason": null, "logprobs": lp})
                } else {
                    json!({"index": 0, "text": text, "finish_reason": null, "logprobs": lp})
                };
                out.push(chunk(choice, None));
            }
            Event::Done { finish_reason, prompt_tokens, cached_tokens, completion_tokens } => {
                let choice = if chat {
                    json!({"index": 0, "delta": {}, "finish_reason": finish_reason})
                } else {
                    json!({"index": 0, "text": "", "finish_reason": finish_reason})
                };
                out.push(chunk(choice, None));
                if include_usage {
                    out.push(chunk(
                        Value::Null,
                        Some(usage(prompt_tokens, cached_tokens, completion_tokens)),
                    ));
                }
                out.push(SseEvent::default().data("[DONE]"));
                finished = true;
            }
            Event::Failed(e) => {
                out.push(SseEvent::default().data(e.body().to_string()));
                out.push(SseEvent::default().data("[DONE]"));
                finished = true;
            }
        }
        (out, finished)
    };
    // Forwards engine events as SSE events; stops (dropping the engine's channel, which frees
    // the slot) as soon as the client's stream is gone.
    tokio::spawn(async move {
        loop {
            let ev = tokio::select! {
                ev = rx.recv() => ev,
                _ = sse_tx.closed() => return,
            };
            let Some(ev) = ev else { return };
            let (out, finished) = convert(ev);
            for e in out {
                if sse_tx.send(e).is_err() {
                    return;
                }
            }
            if finished {
                return;
            }
        }
    });
    let stream = UnboundedReceiverStream::new(sse_rx).map(Ok::<_, Infallible>);
    let mut headers = HeaderMap::new();
    headers.insert(header::CACHE_CONTROL, "no-cache".parse().expect("header"));
    Ok((headers, Sse::new(stream).keep_alive(KeepAlive::default())).into_response())
}
