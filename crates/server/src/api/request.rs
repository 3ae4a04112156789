//! The generation request every API is read into ([`GenRequest`]): OpenAI's chat and
//! completions bodies, llama-server's `/completion` and `/infill`, read field by field from
//! JSON so every error names its field; and `/tokenize`'s and `/detokenize`'s bodies.

use crate::api::fields;
use crate::chat::constrain::Constraint;
use crate::chat::content::{self, ImagePart, TEXT};
use crate::error::ApiError;
use crate::json::{opt_bool, opt_int, type_name};
use serde_json::{json, Map, Value};

pub use crate::api::sampling::Sampling;
pub use crate::chat::prompt::{ChatMessage, Prompt, PromptPart};

/// A validated generation request.
#[derive(Debug, Clone, PartialEq)]
pub struct GenRequest {
    /// The prompt.
    pub prompt: Prompt,
    /// Stream server-sent events.
    pub stream: bool,
    /// Send a last chunk with `usage` (`stream_options.include_usage`).
    pub include_usage: bool,
    /// Most tokens to generate (`None`: until the slot's context is full).
    pub max_tokens: Option<usize>,
    /// Sampling settings.
    pub sampling: Sampling,
    /// Stop strings.
    pub stop: Vec<String>,
    /// Log-probabilities: `None` off, `Some(n)`: the chosen token's and the `n` most likely.
    pub logprobs: Option<usize>,
    /// The `model` field as sent (echoed back).
    pub model: Option<String>,
    /// Structured output: the constraint and the field that asked for it.
    pub constraint: Option<(Constraint, &'static str)>,
    /// llama-server's `ignore_eos`: end-of-generation tokens are never sampled.
    pub ignore_eos: bool,
    /// Tools the model may call (chat only; `None` without tools).
    pub tools: Option<crate::chat::tools::ToolUse>,
    /// llama-server's `chat_template_kwargs`: more variables for the chat template.
    pub template_kwargs: Map<String, Value>,
    /// llama-server's `thinking_budget_tokens`: most tokens inside `<think>` before the end of
    /// thinking is forced (-1: no limit; `None`: the server's `--reasoning-budget`).
    pub thinking_budget: Option<i64>,
    /// llama-server's `cache_prompt` (default true): reuse the slot's cached prefix.
    pub cache_prompt: bool,
    /// llama-server's `n_keep`: prompt tokens a context shift keeps after the BOS (-1: all).
    pub n_keep: i64,
    /// llama-server's `n_discard`: tokens a context shift drops (0: half of the rest).
    pub n_discard: usize,
    /// llama-server's `speculative.*` fields.
    pub spec: crate::engine::SpecRequest,
    /// llama-server's `lora` (`[{"id": N, "scale": S}, ...]`), checked against the server's
    /// adapters when the job starts; `None`: the global scales.
    pub lora: Option<Value>,
    /// The images the prompt's `<__media__>` markers stand for, in order (a chat's
    /// `image_url` parts, `/completion`'s `multimodal_data`).
    pub images: Vec<ImagePart>,
}

/// `response_format` (OpenAI's `json_object` / `json_schema`, llama-server's
/// `{"type": "json_object", "schema": ...}`), llama-server's `json_schema`, or its `grammar`
/// (GBNF).
fn constraint(o: &Map<String, Value>) -> Result<Option<(Constraint, &'static str)>, ApiError> {
    let mut found: Vec<(Constraint, &'static str)> = Vec::new();
    match o.get("response_format") {
        None | Some(Value::Null) => {}
        Some(Value::Object(rf)) => match rf.get("type").and_then(Value::as_str) {
            Some("text") => {}
            Some("json_object") => {
                let schema = rf.get("schema").cloned().unwrap_or_else(|| json!({"type": "object"}));
                found.push((Constraint::JsonSchema(schema), "response_format"));
            }
            Some("json_schema") => {
                let schema = rf
                    .get("json_schema")
                    .and_then(|j| j.get("schema"))
                    .or_else(|| rf.get("schema"))
                    .cloned()
                    .ok_or_else(|| {
                        ApiError::field("response_format.json_schema.schema", "is required")
                    })?;
                if !schema.is_object() && !schema.is_boolean() {
                    return Err(ApiError::field(
                        "response_format.json_schema.schema",
                        "must be a JSON schema object",
                    ));
                }
                found.push((Constraint::JsonSchema(schema), "response_format"));
            }
            Some(t) => {
                return Err(ApiError::field(
                    "response_format.type",
                    format!("'{t}' is not one of text, json_object, json_schema"),
                ))
            }
            None => return Err(ApiError::field("response_format.type", "is required")),
        },
        Some(other) => {
            return Err(ApiError::field(
                "response_format",
                format!("expected an object, got {}", type_name(other)),
            ))
        }
    }
    match o.get("json_schema") {
        None | Some(Value::Null) => {}
        Some(s @ (Value::Object(_) | Value::Bool(_))) => {
            found.push((Constraint::JsonSchema(s.clone()), "json_schema"))
        }
        Some(other) => {
            return Err(ApiError::field(
                "json_schema",
                format!("expected a schema object, got {}", type_name(other)),
            ))
        }
    }
    match o.get("grammar") {
        None | Some(Value::Null) => {}
        Some(Value::String(g)) if g.trim().is_empty() => {}
        Some(Value::String(g)) => {
            let lark = crate::chat::gbnf::to_lark(g)
                .map_err(|e| ApiError::field("grammar", format!("not a GBNF grammar: {e}")))?;
            found.push((Constraint::Lark(lark), "grammar"));
        }
        Some(other) => {
            return Err(ApiError::field(
                "grammar",
                format!("expected a GBNF string, got {}", type_name(other)),
            ))
        }
    }
    if found.len() > 1 {
        return Err(ApiError::field(
            found[1].1,
            format!(
                "only one of response_format, json_schema and grammar may be given ({} is too)",
                found[0].1
            ),
        ));
    }
    Ok(found.pop())
}

/// The fields both endpoints share.
fn common(
    o: &Map<String, Value>,
    prompt: Prompt,
    chat: bool,
    defaults: &Sampling,
) -> Result<GenRequest, ApiError> {
    if !chat && o.get("tools").is_some_and(|v| !v.is_null()) {
        return Err(ApiError::field("tools", "tool calls need /v1/chat/completions"));
    }
    if let Some(n) = opt_int(o, "n", 1, i64::MAX)? {
        if n != 1 {
            return Err(ApiError::field("n", "only 1 choice per request is supported"));
        }
    }
    let constraint = constraint(o)?;
    let stream = opt_bool(o, "stream")?.unwrap_or(false);
    let include_usage = match o.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(so)) => opt_bool(so, "include_usage")
            .map_err(|e| ApiError::field("stream_options.include_usage", e.message))?
            .unwrap_or(false),
        Some(other) => {
            return Err(ApiError::field(
                "stream_options",
                format!("expected an object, got {}", type_name(other)),
            ))
        }
    };
    let max_a = opt_int(o, "max_tokens", 1, 1 << 30)?;
    let max_b = opt_int(o, "max_completion_tokens", 1, 1 << 30)?;
    let max_c = opt_int(o, "n_predict", -1, 1 << 30)?.filter(|&n| n > 0);
    let max_tokens = max_b.or(max_a).or(max_c).map(|n| n as usize);
    let sampling = crate::api::sampling::parse(o, defaults)?;
    let cache_prompt = opt_bool(o, "cache_prompt")?.unwrap_or(true);
    crate::api::fields::other_fields(o, chat)?;
    let stop = match o.get("stop") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) if s.is_empty() => {
            return Err(ApiError::field("stop", "empty stop string"))
        }
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, s)| match s {
                Value::String(s) if !s.is_empty() => Ok(s.clone()),
                Value::String(_) => {
                    Err(ApiError::field(&format!("stop[{i}]"), "empty stop string"))
                }
                other => Err(ApiError::field(
                    &format!("stop[{i}]"),
                    format!("expected a string, got {}", type_name(other)),
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(ApiError::field(
                "stop",
                format!("expected a string or an array of strings, got {}", type_name(other)),
            ))
        }
    };
    let logprobs = if chat {
        let on = opt_bool(o, "logprobs")?.unwrap_or(false);
        let top = opt_int(o, "top_logprobs", 0, 20)?;
        if top.is_some() && !on {
            return Err(ApiError::field("top_logprobs", "needs \"logprobs\": true"));
        }
        on.then(|| top.unwrap_or(0) as usize)
    } else {
        opt_int(o, "logprobs", 0, 20)?.map(|n| n as usize)
    };
    let logprobs =
        logprobs.or(opt_int(o, "n_probs", 0, 20)?.filter(|&n| n > 0).map(|n| n as usize));
    let model = match o.get("model") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => {
            return Err(ApiError::field(
                "model",
                format!("expected a string, got {}", type_name(other)),
            ))
        }
    };
    Ok(GenRequest {
        prompt,
        stream,
        include_usage,
        max_tokens,
        sampling,
        stop,
        logprobs,
        model,
        constraint,
        ignore_eos: opt_bool(o, "ignore_eos")?.unwrap_or(false),
        n_keep: opt_int(o, "n_keep", -1, i64::from(i32::MAX))?.unwrap_or(0),
        n_discard: opt_int(o, "n_discard", 0, i64::from(i32::MAX))?.unwrap_or(0) as usize,
        spec: crate::engine::SpecRequest::parse(o)?,
        tools: None,
        template_kwargs: Map::new(),
        thinking_budget: opt_int(o, "thinking_budget_tokens", -1, 1 << 30)?,
        cache_prompt,
        lora: o.get("lora").filter(|v| !v.is_null()).cloned(),
        images: Vec::new(),
    })
}

/// Roles a chat message may have (`developer` is OpenAI's newer name for `system`).
const ROLES: [&str; 5] = ["system", "developer", "user", "assistant", "tool"];

/// `POST /v1/chat/completions`; sampling fields absent from the request take `defaults`.
pub fn parse_chat(o: &Map<String, Value>, defaults: &Sampling) -> Result<GenRequest, ApiError> {
    fields::check(o, fields::CHAT, true)?;
    let msgs = match o.get("messages") {
        Some(Value::Array(a)) if !a.is_empty() => a,
        Some(Value::Array(_)) => return Err(ApiError::field("messages", "must not be empty")),
        None | Some(Value::Null) => return Err(ApiError::field("messages", "is required")),
        Some(other) => {
            return Err(ApiError::field(
                "messages",
                format!("expected an array, got {}", type_name(other)),
            ))
        }
    };
    let mut out = Vec::with_capacity(msgs.len());
    let mut images = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        let p = |f: &str| format!("messages[{i}].{f}");
        let Value::Object(m) = m else {
            return Err(ApiError::field(
                &format!("messages[{i}]"),
                format!("expected an object, got {}", type_name(m)),
            ));
        };
        let role = match m.get("role") {
            Some(Value::String(r)) if ROLES.contains(&r.as_str()) => {
                if r == "developer" {
                    "system".to_string()
                } else {
                    r.clone()
                }
            }
            Some(Value::String(r)) => {
                return Err(ApiError::field(
                    &p("role"),
                    format!("unknown role '{r}' (one of {})", ROLES.join(", ")),
                ))
            }
            None => return Err(ApiError::field(&p("role"), "is required")),
            Some(other) => {
                return Err(ApiError::field(
                    &p("role"),
                    format!("expected a string, got {}", type_name(other)),
                ))
            }
        };
        let content = m.get("content").unwrap_or(&Value::Null);
        let content = match role.as_str() {
            "user" => content::with_images(content, &p("content"), TEXT, &mut images)?,
            _ => content::text(content, &p("content"), TEXT)?,
        };
        let mut msg = ChatMessage::new(&role, &content);
        if let Some(calls) = m.get("tool_calls").filter(|v| !v.is_null()) {
            if role != "assistant" {
                return Err(ApiError::field(
                    &p("tool_calls"),
                    "only assistant messages make calls",
                ));
            }
            msg.tool_calls = crate::chat::tools::parse_message_calls(calls, &p("tool_calls"))?;
        }
        let keys = [
            ("tool_call_id", &mut msg.tool_call_id),
            ("name", &mut msg.name),
            ("reasoning_content", &mut msg.reasoning_content),
        ];
        for (key, slot) in keys {
            match m.get(key) {
                None | Some(Value::Null) => {}
                Some(Value::String(s)) => *slot = Some(s.clone()),
                Some(other) => {
                    return Err(ApiError::field(
                        &p(key),
                        format!("expected a string, got {}", type_name(other)),
                    ))
                }
            }
        }
        out.push(msg);
    }
    let mut req = common(o, Prompt::Chat(out), true, defaults)?;
    req.images = images;
    req.tools = crate::chat::tools::parse(o)?;
    match o.get("chat_template_kwargs") {
        None | Some(Value::Null) => {}
        Some(Value::Object(k)) => req.template_kwargs = k.clone(),
        Some(other) => {
            return Err(ApiError::field(
                "chat_template_kwargs",
                format!("expected an object, got {}", type_name(other)),
            ))
        }
    }
    if let Some(t) = &req.tools {
        let forced = matches!(
            t.choice,
            crate::chat::tools::ToolChoice::Required | crate::chat::tools::ToolChoice::Named(_)
        );
        if forced && req.constraint.is_some() {
            return Err(ApiError::field(
                "tool_choice",
                "a required call cannot be combined with response_format, json_schema or grammar",
            ));
        }
    }
    Ok(req)
}

/// `POST /v1/completions`: one request per prompt (`prompt` may be a string, token ids,
/// llama-server's mix of both, or a list of any of these).
pub fn parse_completion(
    o: &Map<String, Value>,
    defaults: &Sampling,
) -> Result<Vec<GenRequest>, ApiError> {
    fields::check(o, fields::COMPLETION, true)?;
    let prompts = crate::chat::prompt::parse_prompts(o.get("prompt"))?;
    let first = common(o, Prompt::Text(String::new()), false, defaults)?;
    Ok(prompts.into_iter().map(|prompt| GenRequest { prompt, ..first.clone() }).collect())
}

/// llama-server's `POST /completion`: one prompt (string, token ids or their mix).
pub fn parse_native(o: &Map<String, Value>, defaults: &Sampling) -> Result<GenRequest, ApiError> {
    fields::check(o, fields::COMPLETION, true)?;
    if let Some(Value::Object(p)) = o.get("prompt") {
        return multimodal_prompt(o, p, defaults);
    }
    let mut prompts = crate::chat::prompt::parse_prompts(o.get("prompt"))?;
    if prompts.len() != 1 {
        return Err(ApiError::field(
            "prompt",
            "one prompt per request on /completion (send several to /v1/completions)",
        ));
    }
    common(o, prompts.remove(0), false, defaults)
}

/// `/completion`'s multimodal prompt (llama-server's): `{"prompt_string": "...",
/// "multimodal_data": ["<base64>", ...]}`, one `<__media__>` marker per image in the text.
fn multimodal_prompt(
    o: &Map<String, Value>,
    p: &Map<String, Value>,
    defaults: &Sampling,
) -> Result<GenRequest, ApiError> {
    let text = match p.get("prompt_string") {
        Some(Value::String(s)) => s.clone(),
        None | Some(Value::Null) => {
            return Err(ApiError::field("prompt.prompt_string", "is required"))
        }
        Some(other) => {
            return Err(ApiError::field(
                "prompt.prompt_string",
                format!("expected a string, got {}", type_name(other)),
            ))
        }
    };
    let mut images = Vec::new();
    match p.get("multimodal_data") {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) => {
            for (i, d) in a.iter().enumerate() {
                let field = format!("prompt.multimodal_data[{i}]");
                let Value::String(b64) = d else {
                    return Err(ApiError::field(&field, "expected a base64 string"));
                };
                let url = format!("data:application/octet-stream;base64,{b64}");
                images.push(ImagePart { bytes: content::data_url_bytes(&url, &field)?, field });
            }
        }
        Some(other) => {
            return Err(ApiError::field(
                "prompt.multimodal_data",
                format!("expected an array of base64 strings, got {}", type_name(other)),
            ))
        }
    }
    let mut req = common(o, Prompt::Text(text), false, defaults)?;
    req.images = images;
    Ok(req)
}

/// llama-server's `POST /infill`: `input_prefix`, `input_suffix`, optional `input_extra`
/// (`[{"filename", "text"}]`, other files of the project) and `prompt` (text already typed
/// after the cursor's prefix).
pub fn parse_infill(o: &Map<String, Value>, defaults: &Sampling) -> Result<GenRequest, ApiError> {
    fields::check(o, fields::INFILL, true)?;
    let text = |k: &str| match o.get(k) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => {
            Err(ApiError::field(k, format!("expected a string, got {}", type_name(other))))
        }
    };
    let prefix = text("input_prefix")?;
    let suffix = text("input_suffix")?;
    let typed = text("prompt")?;
    let mut extra = Vec::new();
    match o.get("input_extra") {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) => {
            for (i, c) in a.iter().enumerate() {
                let f = |k: &str| format!("input_extra[{i}].{k}");
                let get = |k: &str| match c.get(k) {
                    None | Some(Value::Null) => Ok(String::new()),
                    Some(Value::String(s)) => Ok(s.clone()),
                    Some(other) => Err(ApiError::field(
                        &f(k),
                        format!("expected a string, got {}", type_name(other)),
                    )),
                };
                if !c.is_object() {
                    return Err(ApiError::field(
                        &format!("input_extra[{i}]"),
                        "expected {\"filename\": ..., \"text\": ...}",
                    ));
                }
                extra.push((get("filename")?, get("text")?));
            }
        }
        Some(other) => {
            return Err(ApiError::field(
                "input_extra",
                format!("expected an array, got {}", type_name(other)),
            ))
        }
    }
    common(o, Prompt::Infill { prefix, suffix, extra, typed }, false, defaults)
}

/// llama-server's `POST /tokenize` body: `content`, `add_special`, `with_pieces`.
pub fn parse_tokenize(o: &Map<String, Value>) -> Result<(String, bool, bool), ApiError> {
    let content = match o.get("content") {
        Some(Value::String(s)) => s.clone(),
        None => return Err(ApiError::field("content", "is required")),
        Some(other) => {
            return Err(ApiError::field(
                "content",
                format!("expected a string, got {}", type_name(other)),
            ))
        }
    };
    Ok((
        content,
        opt_bool(o, "add_special")?.unwrap_or(false),
        opt_bool(o, "with_pieces")?.unwrap_or(false),
    ))
}

/// llama-server's `POST /detokenize` body: `tokens`, checked against the vocabulary size.
pub fn parse_detokenize(o: &Map<String, Value>, n_vocab: usize) -> Result<Vec<u32>, ApiError> {
    let Some(Value::Array(a)) = o.get("tokens") else {
        return Err(ApiError::field("tokens", "is required: an array of token ids"));
    };
    crate::json::token_ids(a, "tokens", n_vocab)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earlier_reasoning_reaches_the_template() {
        let body = json!({"messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello", "reasoning_content": "greet back"},
            {"role": "user", "content": "again"},
        ]});
        let req = parse_chat(body.as_object().unwrap(), &Sampling::default()).unwrap();
        let Prompt::Chat(msgs) = &req.prompt else { panic!("a chat") };
        assert_eq!(msgs[1].template_value()["reasoning_content"], "greet back");
        assert!(msgs[0].template_value().get("reasoning_content").is_none());
        let bad =
            json!({"messages": [{"role": "assistant", "content": "", "reasoning_content": 1}]});
        let e = parse_chat(bad.as_object().unwrap(), &Sampling::default()).unwrap_err();
        assert!(e.message.starts_with("messages[0].reasoning_content"), "{}", e.message);
    }
}
