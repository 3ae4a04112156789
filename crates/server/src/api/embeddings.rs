//! Embeddings (`--embedding`, llama-server's `--embeddings`): OpenAI's `POST /v1/embeddings`
//! and llama-server's `POST /embedding`, computed by the engine thread in embeddings mode.
//!
//! As in llama-server, a server runs either embeddings or generation: with `--embedding` the
//! context keeps final-norm rows instead of logits, and the generating endpoints answer 501
//! (as the embedding endpoints do without it). Each input is one sequence; the engine packs
//! waiting inputs into one batch (up to `-np` sequences and `-b` tokens, or one longer input
//! alone), pools each sequence's rows (`--pooling`, default the model's `pooling_type`) and
//! frees its cells. The handlers normalize (`embd_normalize`, Euclidean by default) and
//! format (`encoding_format` `float` or `base64`).

use crate::api::fields;
use crate::engine::EmbedJob;
use crate::error::ApiError;
use crate::http::{AppState, Body, St};
use crate::json::{parse_body, token_ids, type_name};
use axum::extract::State;
use axum::Json;
use base64::Engine as _;
use serde_json::{json, Map, Value};
use tessera_llama::Pooling;
use tokio::sync::oneshot;

/// An embeddings request, parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct EmbedRequest {
    /// Token ids per input.
    pub inputs: Vec<Vec<u32>>,
    /// `embd_normalize` (llama.cpp's: -1 none, 0 max-abs int16, 1 taxicab, 2 Euclidean, p).
    pub normalize: i32,
    /// `encoding_format: "base64"`.
    pub base64: bool,
}

/// Most inputs one embeddings request may carry (OpenAI's 2,048).
pub const MAX_INPUTS: usize = 2048;

/// Reads `input` (or `content`): a string, an array of strings, an array of token ids, or an
/// array of such arrays (OpenAI's four forms); strings are tokenized as llama-server does
/// (special tokens added and parsed). `n_ctx` bounds each input.
pub fn parse_request(
    o: &Map<String, Value>,
    vocab: &tessera_llama::Vocab,
    n_embd: usize,
    n_ctx: usize,
) -> Result<EmbedRequest, ApiError> {
    fields::check(o, fields::EMBEDDINGS, false)?;
    for key in ["model", "user"] {
        match o.get(key) {
            None | Some(Value::Null | Value::String(_)) => {}
            Some(other) => {
                return Err(ApiError::field(
                    key,
                    format!("expected a string, got {}", type_name(other)),
                ))
            }
        }
    }
    let (field, v) = match (o.get("input"), o.get("content")) {
        (Some(v), _) if !v.is_null() => ("input", v),
        (_, Some(v)) if !v.is_null() => ("content", v),
        _ => return Err(ApiError::field("input", "missing: the text to embed")),
    };
    let n_vocab = vocab.n_tokens();
    let ids = |a: &[Value], at: &str| token_ids(a, at, n_vocab);
    let text = |s: &str| vocab.tokenize(s, true, true);
    let inputs: Vec<(String, Vec<u32>)> = match v {
        Value::String(s) => vec![(field.to_string(), text(s))],
        Value::Array(a) if a.iter().all(Value::is_number) && !a.is_empty() => {
            vec![(field.to_string(), ids(a, field)?)]
        }
        Value::Array(a) if a.len() > MAX_INPUTS => {
            return Err(ApiError::field(
                field,
                format!("{} inputs; at most {MAX_INPUTS} per request (OpenAI's limit)", a.len()),
            ))
        }
        Value::Array(a) if !a.is_empty() => a
            .iter()
            .enumerate()
            .map(|(k, e)| {
                let at = format!("{field}[{k}]");
                match e {
                    Value::String(s) => Ok((at, text(s))),
                    Value::Array(t) => Ok((at.clone(), ids(t, &at)?)),
                    other => Err(ApiError::field(
                        &at,
                        format!("expected a string or token ids, got {}", type_name(other)),
                    )),
                }
            })
            .collect::<Result<_, _>>()?,
        Value::Array(_) => return Err(ApiError::field(field, "the list of inputs is empty")),
        other => {
            return Err(ApiError::field(
                field,
                format!("expected a string or an array, got {}", type_name(other)),
            ))
        }
    };
    for (at, toks) in &inputs {
        if toks.is_empty() {
            return Err(ApiError::field(at, "the input is empty"));
        }
        if toks.len() > n_ctx {
            let mut e = ApiError::field(
                at,
                format!(
                    "the input has {} tokens; the context holds {n_ctx} (raise -c)",
                    toks.len()
                ),
            );
            e.code = Some("context_length_exceeded");
            return Err(e);
        }
    }
    let base64 = match o.get("encoding_format") {
        None | Some(Value::Null) => false,
        Some(Value::String(s)) if s == "float" => false,
        Some(Value::String(s)) if s == "base64" => true,
        Some(other) => {
            return Err(ApiError::field(
                "encoding_format",
                format!("expected \"float\" or \"base64\", got {other}"),
            ))
        }
    };
    if let Some(d) = crate::json::opt_int(o, "dimensions", 1, i64::MAX)? {
        if d as usize != n_embd {
            return Err(ApiError::field(
                "dimensions",
                format!("the model's embeddings have {n_embd} dimensions; shortening them is not supported"),
            ));
        }
    }
    let normalize = crate::json::opt_int(o, "embd_normalize", -1, 64)?.map_or(2, |n| n as i32);
    Ok(EmbedRequest { inputs: inputs.into_iter().map(|(_, t)| t).collect(), normalize, base64 })
}

/// Parses, queues and awaits an embeddings request: the normalized vectors (per token rows
/// for pooling `none`) and the prompt token count.
async fn compute(st: &AppState, body: Body) -> Result<(EmbedRequest, Vec<Vec<f32>>), ApiError> {
    let Some(pooling) = st.engine.pooling() else { return Err(ApiError::not_embedding()) };
    let o = parse_body(&body)?;
    let n_embd = st.model.hparams.n_embd;
    let req = parse_request(&o, &st.model.vocab, n_embd, st.engine.n_ctx)?;
    let (tx, rx) = oneshot::channel();
    st.engine.submit_embed(EmbedJob { inputs: req.inputs.clone(), reply: tx })?;
    st.metrics.add_request();
    let mut vectors = rx.await.map_err(|_| ApiError::shutting_down())??;
    for v in &mut vectors {
        if pooling == Pooling::None {
            v.chunks_mut(n_embd)
                .for_each(|row| tessera_llama::embed::normalize(row, req.normalize));
        } else {
            tessera_llama::embed::normalize(v, req.normalize);
        }
    }
    Ok((req, vectors))
}

fn encode(v: &[f32], base64: bool) -> Value {
    if base64 {
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        Value::from(base64::engine::general_purpose::STANDARD.encode(bytes))
    } else {
        json!(v)
    }
}

/// `POST /v1/embeddings` (OpenAI's): one pooled vector per input.
pub async fn oai_embeddings(State(st): St, body: Body) -> Result<Json<Value>, ApiError> {
    if st.engine.pooling() == Some(Pooling::None) {
        return Err(ApiError::new(
            400,
            "invalid_request_error",
            "pooling 'none' gives one vector per token, which OpenAI's format cannot carry: \
             use /embedding, or start the server with --pooling mean, cls or last",
        ));
    }
    let (req, vectors) = compute(&st, body).await?;
    let n_tok: usize = req.inputs.iter().map(Vec::len).sum();
    let data: Vec<Value> = vectors
        .iter()
        .enumerate()
        .map(
            |(i, v)| json!({"object": "embedding", "index": i, "embedding": encode(v, req.base64)}),
        )
        .collect();
    Ok(Json(json!({
        "object": "list",
        "model": st.model_name,
        "data": data,
        "usage": {"prompt_tokens": n_tok, "total_tokens": n_tok},
    })))
}

/// llama-server's `POST /embedding`: per input, its rows (one pooled row, or every token's
/// with pooling `none`).
pub async fn embedding(State(st): St, body: Body) -> Result<Json<Value>, ApiError> {
    let (req, vectors) = compute(&st, body).await?;
    let n_embd = st.model.hparams.n_embd;
    let data: Vec<Value> = vectors
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let rows: Vec<Value> = v.chunks(n_embd).map(|r| encode(r, req.base64)).collect();
            json!({"index": i, "embedding": rows})
        })
        .collect();
    Ok(Json(Value::Array(data)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_is_little_endian_f32() {
        let v = encode(&[1.0, -2.5], true);
        let bytes = base64::engine::general_purpose::STANDARD.decode(v.as_str().unwrap()).unwrap();
        assert_eq!(bytes, [1.0f32.to_le_bytes(), (-2.5f32).to_le_bytes()].concat());
        assert_eq!(encode(&[0.5], false), json!([0.5]));
    }
}
