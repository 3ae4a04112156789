//! OpenAI's generating endpoints: `POST /v1/chat/completions` and `POST /v1/completions`
//! (several prompts in one request give several choices), each as one JSON body or as
//! server-sent events ending `data: [DONE]`.

use crate::api::generate::{collect, merge, reply_shape, start};
use crate::api::request::{self, GenRequest};
use crate::chat::reply::{ReplyShape, ReplySplit};
use crate::engine::{Event, Finished, Logprob};
use crate::error::ApiError;
use crate::http::sse::{sse_channel, sse_response};
use crate::http::{AppState, Body, St};
use crate::ids::{new_id, now};
use crate::json::parse_body;
use axum::extract::State;
use axum::response::sse::Event as SseEvent;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::sync::Arc;

/// `POST /v1/chat/completions`.
pub async fn chat(State(st): St, body: Body) -> Result<Response, ApiError> {
    let o = parse_body(&body)?;
    let req = request::parse_chat(&o, &st.sampling)?;
    openai(st, vec![req], true).await
}

/// `POST /v1/completions`.
pub async fn completions(State(st): St, body: Body) -> Result<Response, ApiError> {
    let o = parse_body(&body)?;
    let reqs = request::parse_completion(&o, &st.sampling)?;
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
    let id = new_id(if chat { "chatcmpl-" } else { "cmpl-" });
    let created = now();
    let model = first.model.clone().unwrap_or_else(|| st.model_name.clone());
    if !first.stream {
        let mut choices = Vec::new();
        let (mut p, mut c, mut g) = (0, 0, 0);
        let mut timings = None;
        for (index, rx) in rxs.into_iter().enumerate() {
            let o = collect(rx).await?;
            let logprobs = first.logprobs.map(|_| openai_logprobs(&o.logprobs, chat));
            let (reasoning, text, calls) = crate::chat::reply::split(&shapes[index], &o.text);
            let mut choice = if !calls.is_empty() {
                let content = if text.is_empty() { Value::Null } else { text.into() };
                let tc: Vec<Value> = calls.iter().map(|c| c.openai(None)).collect();
                json!({"index": index, "message": {"role": "assistant", "content": content, "tool_calls": tc}, "finish_reason": "tool_calls", "logprobs": logprobs})
            } else if chat {
                json!({"index": index, "message": {"role": "assistant", "content": text}, "finish_reason": o.end.finish_reason, "logprobs": logprobs})
            } else {
                json!({"index": index, "text": o.text, "finish_reason": o.end.finish_reason, "logprobs": logprobs})
            };
            if let Some(r) = reasoning {
                choice["message"]["reasoning_content"] = r.into();
            }
            choices.push(choice);
            let end = &o.end;
            (p, c, g) = (p + end.prompt_tokens, c + end.cached_tokens, g + end.completion_tokens);
            timings.get_or_insert(end.timings);
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
                Event::Done(Finished {
                    finish_reason,
                    prompt_tokens,
                    cached_tokens,
                    completion_tokens,
                    timings,
                    ..
                }) => {
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
