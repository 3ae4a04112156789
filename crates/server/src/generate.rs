//! The generating endpoints: OpenAI's `/v1/chat/completions` and `/v1/completions` (several
//! prompts in one request give several choices) and llama-server's own `/completion` and
//! `/infill`, each as one JSON body or as server-sent events.

use crate::api::{self, ApiError, GenRequest, Prompt};
use crate::constrain::Constraint;
use crate::engine::{Event, Job, Logprob, Timings};
use crate::http::{body_or_413, new_id, now, AppState};
use crate::reasoning::ReasoningFormat;
use crate::reply::{ReplyShape, ReplySplit};
use crate::tools::{Format, ToolChoice};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;

type St = State<Arc<AppState>>;
type Body = Result<Bytes, axum::extract::rejection::BytesRejection>;

/// Renders and tokenizes the prompt, checks it fits the context, queues the job; says whether
/// the rendered chat prompt leaves the reply inside `<think>`.
pub(crate) fn start(
    st: &AppState,
    req: &GenRequest,
) -> Result<(mpsc::UnboundedReceiver<Event>, bool), ApiError> {
    let vocab = &st.model.vocab;
    let rendered = match &req.prompt {
        Prompt::Chat(msgs) => {
            Some(crate::http::render_chat(st, msgs, req.tools.as_ref(), &req.template_kwargs)?)
        }
        _ => None,
    };
    let opened = rendered.as_deref().is_some_and(crate::reasoning::prompt_opens_thinking);
    let tokens = req.prompt.tokens(vocab, rendered.as_deref())?;
    let field = req.prompt.field();
    if tokens.is_empty() {
        return Err(ApiError::field(field, "the prompt is empty"));
    }
    let limit = st.engine.n_ctx;
    if tokens.len() >= limit {
        let mut e = ApiError::field(
            field,
            format!("the prompt has {} tokens; the context holds {limit} (raise -c)", tokens.len()),
        );
        e.code = Some("context_length_exceeded");
        return Err(e);
    }
    let harmony = harmony_chat(st, req);
    let matcher = match (&req.constraint, forced_call_grammar(st, req, harmony)?) {
        (Some((c, param)), _) => Some(st.constrainer.matcher(c, param)?),
        (None, Some(lark)) => Some(st.constrainer.matcher(&Constraint::Lark(lark), "tools")?),
        (None, None) => None,
    };
    let budget = req.thinking_budget.unwrap_or(st.reasoning_budget);
    if harmony && budget >= 0 {
        return Err(ApiError::field(
            "thinking_budget",
            "a reasoning budget (thinking_budget, --reasoning-budget) is not available for \
             gpt-oss's harmony format yet",
        ));
    }
    // A grammar decides what may be generated; the budget applies to free chat replies.
    let think_budget = (rendered.is_some() && matcher.is_none() && budget >= 0).then(|| {
        let end = format!("{}\n</think>\n\n", st.reasoning_budget_message);
        crate::engine::ThinkBudget::new(budget as usize, opened, vocab.tokenize(&end, false, true))
    });
    let bias = req.sampling.resolve_bias(vocab)?;
    let sampler = req.sampling.chain(st.engine.n_ctx, &bias)?;
    tracing::debug!(sampler = %sampler.describe(), seed = ?sampler.seed(), "sampling");
    let (tx, rx) = mpsc::unbounded_channel();
    st.engine.submit(Job {
        prompt: tokens,
        max_tokens: req.max_tokens,
        sampler,
        cache_prompt: req.cache_prompt,
        stop: req.stop.clone(),
        logprobs: req.logprobs,
        events: tx,
        matcher,
        ignore_eos: req.ignore_eos,
        think_budget,
        preserved: if harmony { crate::harmony::preserved_ids(vocab) } else { Vec::new() },
    })?;
    st.metrics.add_request();
    Ok((rx, opened))
}

/// With `tool_choice` `required` or a named function: the grammar of a reply that is a call
/// (refused for a harmony template, which has no such grammar here yet).
fn forced_call_grammar(
    st: &AppState,
    req: &GenRequest,
    harmony: bool,
) -> Result<Option<String>, ApiError> {
    let Some(t) = req.tools.as_ref() else { return Ok(None) };
    if !matches!(t.choice, ToolChoice::Required | ToolChoice::Named(_)) {
        return Ok(None);
    }
    if harmony {
        return Err(ApiError::field(
            "tool_choice",
            "forcing a call (required, or a named function) is not available for gpt-oss's \
             harmony format yet; use auto",
        ));
    }
    let Some(tpl) = st.template.as_deref() else { return Ok(None) };
    Ok(Some(crate::tools::grammar(Format::of(tpl), &t.tools, &t.choice, t.parallel)))
}

/// The format of calls a chat request's reply may hold, and its tools (`None` without
/// tools, or with `tool_choice` `none`).
fn tool_format(st: &AppState, req: &GenRequest) -> Option<(Format, Vec<crate::tools::Tool>)> {
    let t = req.tools.as_ref().filter(|t| t.choice != ToolChoice::None)?;
    Some((Format::of(st.template.as_deref()?), t.tools.clone()))
}

/// Whether `req` is a chat rendered by a harmony template (gpt-oss: [`crate::harmony`]).
fn harmony_chat(st: &AppState, req: &GenRequest) -> bool {
    matches!(req.prompt, Prompt::Chat(_))
        && st.template.as_deref().is_some_and(crate::harmony::is_harmony)
}

/// What a chat request's reply may hold (`opened`: from [`start`]).
pub(crate) fn reply_shape(st: &AppState, req: &GenRequest, opened: bool) -> ReplyShape {
    ReplyShape {
        think: st.reasoning_format == ReasoningFormat::Deepseek,
        opened,
        tools: tool_format(st, req),
        harmony: harmony_chat(st, req),
    }
}

/// A finished request, gathered from its events.
pub(crate) struct Outcome {
    pub(crate) text: String,
    pub(crate) logprobs: Vec<Logprob>,
    pub(crate) finish_reason: &'static str,
    pub(crate) prompt_tokens: usize,
    pub(crate) cached_tokens: usize,
    pub(crate) completion_tokens: usize,
    pub(crate) timings: Timings,
    pub(crate) stop_word: Option<String>,
}

pub(crate) async fn collect(mut rx: mpsc::UnboundedReceiver<Event>) -> Result<Outcome, ApiError> {
    let mut text = String::new();
    let mut logprobs = Vec::new();
    loop {
        match rx.recv().await {
            Some(Event::Token { text: t, logprob }) => {
                text.push_str(&t);
                logprobs.extend(logprob);
            }
            Some(Event::Done {
                finish_reason,
                prompt_tokens,
                cached_tokens,
                completion_tokens,
                timings,
                stop_word,
            }) => {
                return Ok(Outcome {
                    text,
                    logprobs,
                    finish_reason,
                    prompt_tokens,
                    cached_tokens,
                    completion_tokens,
                    timings,
                    stop_word,
                })
            }
            Some(Event::Failed(e)) => return Err(e),
            None => return Err(ApiError::new(500, "server_error", "the engine stopped")),
        }
    }
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

/// `POST /v1/chat/completions`.
pub async fn chat(State(st): St, body: Body) -> Result<Response, ApiError> {
    let o = api::parse_body(&body_or_413(body)?)?;
    let req = api::parse_chat(&o)?;
    openai(st, vec![req], true).await
}

/// `POST /v1/completions`.
pub async fn completions(State(st): St, body: Body) -> Result<Response, ApiError> {
    let o = api::parse_body(&body_or_413(body)?)?;
    let reqs = api::parse_completion(&o)?;
    let cap = st.engine.queue_capacity;
    if reqs.len() > cap {
        return Err(ApiError::field(
            "prompt",
            format!(
                "{} prompts; this server queues at most {cap} requests at once (--queue): send \
                 fewer per request",
                reqs.len()
            ),
        ));
    }
    openai(st, reqs, false).await
}

/// llama-server's `POST /completion`.
pub async fn completion(State(st): St, body: Body) -> Result<Response, ApiError> {
    let o = api::parse_body(&body_or_413(body)?)?;
    native(st, api::parse_native(&o)?).await
}

/// llama-server's `POST /infill`.
pub async fn infill(State(st): St, body: Body) -> Result<Response, ApiError> {
    let o = api::parse_body(&body_or_413(body)?)?;
    native(st, api::parse_infill(&o)?).await
}

fn openai_logprobs(lps: &[Logprob], chat: bool) -> Value {
    if chat {
        json!({"content": lps.iter().map(|l| logprob_json(l, true)).collect::<Vec<_>>()})
    } else {
        json!({
            "tokens": lps.iter().map(|l| l.token.clone()).collect::<Vec<_>>(),
            "token_logprobs": lps.iter().map(|l| l.logprob).collect::<Vec<_>>(),
            "top_logprobs": lps.iter().map(|l| l.top.iter().map(|(t, _, p)| (t.clone(), json!(p))).collect::<serde_json::Map<_, _>>()).collect::<Vec<_>>(),
        })
    }
}

/// The OpenAI endpoints: every request of `reqs` is one choice (index in order).
async fn openai(
    st: Arc<AppState>,
    reqs: Vec<GenRequest>,
    chat: bool,
) -> Result<Response, ApiError> {
    let first = reqs[0].clone();
    let mut rxs = Vec::with_capacity(reqs.len());
    let mut opened = Vec::with_capacity(reqs.len());
    for r in &reqs {
        let (rx, o) = start(&st, r)?;
        rxs.push(rx);
        opened.push(o);
    }
    // Completions are text: no thoughts or calls taken apart.
    let plain = ReplyShape { think: false, opened: false, tools: None, harmony: false };
    let shapes: Vec<ReplyShape> = opened
        .iter()
        .map(|&o| if chat { reply_shape(&st, &first, o) } else { plain.clone() })
        .collect();
    let id = new_id(if chat { "chatcmpl" } else { "cmpl" });
    let created = now();
    let model = first.model.clone().unwrap_or_else(|| st.model_name.clone());
    if !first.stream {
        let mut choices = Vec::new();
        let (mut p, mut c, mut g) = (0, 0, 0);
        let mut timings = None;
        for (index, rx) in rxs.into_iter().enumerate() {
            let o = collect(rx).await?;
            let logprobs = first.logprobs.map(|_| openai_logprobs(&o.logprobs, chat));
            let (reasoning, text, calls) = crate::reply::split(&shapes[index], &o.text);
            let mut choice = if !calls.is_empty() {
                let content = if text.is_empty() { Value::Null } else { text.into() };
                let tc: Vec<Value> = calls.iter().map(|c| c.openai(None)).collect();
                json!({"index": index, "message": {"role": "assistant", "content": content, "tool_calls": tc}, "finish_reason": "tool_calls", "logprobs": logprobs})
            } else if chat {
                json!({"index": index, "message": {"role": "assistant", "content": text}, "finish_reason": o.finish_reason, "logprobs": logprobs})
            } else {
                json!({"index": index, "text": o.text, "finish_reason": o.finish_reason, "logprobs": logprobs})
            };
            if let Some(r) = reasoning {
                choice["message"]["reasoning_content"] = r.into();
            }
            choices.push(choice);
            (p, c, g) = (p + o.prompt_tokens, c + o.cached_tokens, g + o.completion_tokens);
            timings.get_or_insert(o.timings);
        }
        let mut body = json!({
            "id": id,
            "object": if chat { "chat.completion" } else { "text_completion" },
            "created": created,
            "model": model,
            "choices": choices,
            "usage": usage(p, c, g),
        });
        if let (Some(t), 1) = (timings, reqs.len()) {
            body["timings"] = t.json();
        }
        return Ok(Json(body).into_response());
    }
    let include_usage = first.include_usage;
    let want_lp = first.logprobs.is_some();
    let object = if chat { "chat.completion.chunk" } else { "text_completion" };
    let n = rxs.len();
    let chunk = move |choice: Value, extra: Option<(&str, Value)>| -> SseEvent {
        let mut v = json!({"id": id, "object": object, "created": created, "model": model, "choices": [choice]});
        if let Some((k, x)) = extra {
            if k == "usage" {
                v["choices"] = json!([]);
            }
            v[k] = x;
        }
        SseEvent::default().data(v.to_string())
    };
    let (sse_tx, sse_rx) = sse_channel();
    if chat {
        let _ = sse_tx.send(chunk(
            json!({"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}),
            None,
        ));
    }
    let merged = merge(rxs);
    let mut splits: Vec<ReplySplit> = shapes.iter().map(ReplySplit::new).collect();
    tokio::spawn(async move {
        let mut merged = merged;
        let mut done = 0;
        let (mut p, mut c, mut g) = (0, 0, 0);
        loop {
            let item = tokio::select! {
                ev = merged.recv() => ev,
                _ = sse_tx.closed() => return,
            };
            let Some((index, ev)) = item else { return };
            let mut out = Vec::new();
            match ev {
                Event::Token { text, logprob } => {
                    let (r, text) = splits[index].push(&text);
                    if !r.is_empty() {
                        out.push(chunk(
                            json!({"index": index, "delta": {"reasoning_content": r}, "finish_reason": null}),
                            None,
                        ));
                    }
                    if !text.is_empty() || (want_lp && logprob.is_some()) {
                        let lp = logprob.filter(|_| want_lp).map(|l| {
                            if chat {
                                json!({"content": [logprob_json(&l, true)]})
                            } else {
                                json!({"tokens": [l.token], "token_logprobs": [l.logprob]})
                            }
                        });
                        out.push(chunk(
                            if chat {
                                json!({"index": index, "delta": {"content": text}, "finish_reason": null, "logprobs": lp})
                            } else {
                                json!({"index": index, "text": text, "finish_reason": null, "logprobs": lp})
                            },
                            None,
                        ));
                    }
                }
                Event::Done {
                    finish_reason,
                    prompt_tokens,
                    cached_tokens,
                    completion_tokens,
                    timings,
                    ..
                } => {
                    let (r, rest, calls) = splits[index].finish();
                    if !r.is_empty() {
                        out.push(chunk(
                            json!({"index": index, "delta": {"reasoning_content": r}, "finish_reason": null}),
                            None,
                        ));
                    }
                    if !rest.is_empty() {
                        out.push(chunk(
                            json!({"index": index, "delta": {"content": rest}, "finish_reason": null}),
                            None,
                        ));
                    }
                    let finish_reason = if calls.is_empty() { finish_reason } else { "tool_calls" };
                    if !calls.is_empty() {
                        let tc: Vec<Value> =
                            calls.iter().enumerate().map(|(k, c)| c.openai(Some(k))).collect();
                        out.push(chunk(
                            json!({"index": index, "delta": {"tool_calls": tc}, "finish_reason": null}),
                            None,
                        ));
                    }
                    let choice = if chat {
                        json!({"index": index, "delta": {}, "finish_reason": finish_reason})
                    } else {
                        json!({"index": index, "text": "", "finish_reason": finish_reason})
                    };
                    out.push(chunk(choice, Some(("timings", timings.json()))));
                    (p, c, g) = (p + prompt_tokens, c + cached_tokens, g + completion_tokens);
                    done += 1;
                    if done == n {
                        if include_usage {
                            out.push(chunk(Value::Null, Some(("usage", usage(p, c, g)))));
                        }
                        out.push(SseEvent::default().data("[DONE]"));
                    }
                }
                Event::Failed(e) => {
                    out.push(SseEvent::default().data(e.body().to_string()));
                    out.push(SseEvent::default().data("[DONE]"));
                    done = n;
                }
            }
            for e in out {
                if sse_tx.send(e).is_err() {
                    return;
                }
            }
            if done == n {
                return;
            }
        }
    });
    Ok(sse_response(sse_rx))
}

/// The events of several requests on one channel, tagged with their index. A request's
/// forwarder stops (dropping its engine channel, which frees its slot) once the merged
/// receiver is gone.
pub(crate) fn merge(
    rxs: Vec<mpsc::UnboundedReceiver<Event>>,
) -> mpsc::UnboundedReceiver<(usize, Event)> {
    let (tx, rx) = mpsc::unbounded_channel();
    for (i, mut r) in rxs.into_iter().enumerate() {
        let tx = tx.clone();
        tokio::spawn(async move {
            loop {
                let ev = tokio::select! {
                    ev = r.recv() => ev,
                    _ = tx.closed() => return,
                };
                let Some(ev) = ev else { return };
                let last = !matches!(ev, Event::Token { .. });
                if tx.send((i, ev)).is_err() || last {
                    return;
                }
            }
        });
    }
    rx
}

/// Server-sent events not yet written to a client before it counts as not reading: its reply
/// ends and its slot is freed (a token is one event).
pub const MAX_UNREAD_EVENTS: usize = 2048;

/// The sending end of a streamed reply (see [`MAX_UNREAD_EVENTS`]).
#[derive(Debug, Clone)]
pub(crate) struct SseTx(mpsc::Sender<SseEvent>);

impl SseTx {
    /// Queues `e` for the client; an error when the client is gone or too far behind (then
    /// the caller stops, which ends the reply and frees its slot).
    pub(crate) fn send(&self, e: SseEvent) -> Result<(), ()> {
        match self.0.try_send(e) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::warn!(
                    unread = MAX_UNREAD_EVENTS,
                    "a streaming client stopped reading: ending its reply"
                );
                Err(())
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Err(()),
        }
    }

    /// Resolves when the client is gone.
    pub(crate) async fn closed(&self) {
        self.0.closed().await
    }
}

/// A streamed reply's channel: [`SseTx`] and what [`sse_response`] writes out.
pub(crate) fn sse_channel() -> (SseTx, mpsc::Receiver<SseEvent>) {
    let (tx, rx) = mpsc::channel(MAX_UNREAD_EVENTS);
    (SseTx(tx), rx)
}

pub(crate) fn sse_response(rx: mpsc::Receiver<SseEvent>) -> Response {
    let stream = ReceiverStream::new(rx).map(Ok::<_, Infallible>);
    let mut headers = HeaderMap::new();
    headers.insert(header::CACHE_CONTROL, "no-cache".parse().expect("header"));
    (headers, Sse::new(stream).keep_alive(KeepAlive::default())).into_response()
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
    let last = move |finish_reason: &'static str,
                     prompt: usize,
                     cached: usize,
                     generated: usize,
                     timings: Timings,
                     content: String| {
        json!({
            "content": content,
            "stop": true,
            "model": model,
            "stop_type": stop_type(finish_reason, has_stops && finish_reason == "stop"),
            "tokens_predicted": generated,
            "tokens_evaluated": prompt,
            "tokens_cached": cached,
            "truncated": false,
            "timings": timings.json(),
        })
    };
    if !req.stream {
        let o = collect(rx).await?;
        return Ok(Json(last(
            o.finish_reason,
            o.prompt_tokens,
            o.cached_tokens,
            o.completion_tokens,
            o.timings,
            o.text,
        ))
        .into_response());
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
                Event::Done {
                    finish_reason,
                    prompt_tokens,
                    cached_tokens,
                    completion_tokens,
                    timings,
                    ..
                } => (
                    last(
                        finish_reason,
                        prompt_tokens,
                        cached_tokens,
                        completion_tokens,
                        timings,
                        String::new(),
                    ),
                    true,
                ),
                Event::Failed(e) => (e.body(), true),
            };
            if sse_tx.send(SseEvent::default().data(data.to_string())).is_err() || end {
                return;
            }
        }
    });
    Ok(sse_response(sse_rx))
}
