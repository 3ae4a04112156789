//! What a request generates from, and how it becomes tokens: chat messages through the chat
//! template, text, llama-server's token ids (mixed with text if wanted), or a fill-in-the-
//! middle request through the model's FIM tokens.

use crate::error::ApiError;
use crate::json::type_name;
use serde_json::Value;
use tessera_vocab::Vocab;

/// One piece of a mixed prompt (llama-server accepts `[12, 34, "text", 56]`).
#[derive(Debug, Clone, PartialEq)]
pub enum PromptPart {
    /// Text, tokenized (special tokens parsed; BOS added when it comes first).
    Text(String),
    /// A token id, checked against the vocabulary.
    Token(u64),
}

/// One chat message as the template sees it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// Its text.
    pub content: String,
    /// An assistant's calls.
    pub tool_calls: Vec<crate::chat::tools::ToolCall>,
    /// A tool result's call id.
    pub tool_call_id: Option<String>,
    /// A tool result's function name.
    pub name: Option<String>,
    /// An assistant's earlier reasoning (`reasoning_content`), which templates such as
    /// Qwen3's and gpt-oss's (as `thinking`) render.
    pub reasoning_content: Option<String>,
}

impl ChatMessage {
    /// A message of `role` with `content`.
    pub fn new(role: &str, content: &str) -> Self {
        ChatMessage { role: role.into(), content: content.into(), ..Default::default() }
    }

    /// The object chat templates read: `role`, `content`, and `tool_calls` (arguments as
    /// objects, as Hugging Face templates expect), `tool_call_id`, `name` where set.
    pub fn template_value(&self) -> Value {
        let mut v = serde_json::json!({"role": self.role, "content": self.content});
        if !self.tool_calls.is_empty() {
            v["tool_calls"] = self
                .tool_calls
                .iter()
                .map(|c| {
                    serde_json::json!({"id": c.id, "type": "function", "function": {
                        "name": c.name, "arguments": c.arguments,
                    }})
                })
                .collect();
        }
        if let Some(id) = &self.tool_call_id {
            v["tool_call_id"] = id.clone().into();
        }
        if let Some(n) = &self.name {
            v["name"] = n.clone().into();
        }
        if let Some(r) = &self.reasoning_content {
            v["reasoning_content"] = r.clone().into();
        }
        v
    }
}

/// What to generate from.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    /// Chat messages, rendered through the chat template.
    Chat(Vec<ChatMessage>),
    /// Raw text (`/v1/completions`, `/completion`).
    Text(String),
    /// Token ids and texts in order.
    Parts(Vec<PromptPart>),
    /// Fill in the middle (`/infill`).
    Infill {
        /// Code before the cursor.
        prefix: String,
        /// Code after the cursor.
        suffix: String,
        /// Other files: (name, text).
        extra: Vec<(String, String)>,
        /// What the user typed after the prefix, generation continues it.
        typed: String,
    },
}

impl Prompt {
    /// The request field an error about this prompt names.
    pub fn field(&self) -> &'static str {
        match self {
            Prompt::Chat(_) => "messages",
            Prompt::Infill { .. } => "input_prefix",
            _ => "prompt",
        }
    }

    /// The prompt's tokens (`rendered`: the chat text, already rendered by the caller).
    pub fn tokens(&self, vocab: &Vocab, rendered: Option<&str>) -> Result<Vec<u32>, ApiError> {
        Ok(match self {
            Prompt::Chat(_) => vocab.tokenize(rendered.unwrap_or_default(), true, true),
            Prompt::Text(t) => vocab.tokenize(t, true, true),
            Prompt::Parts(parts) => {
                let mut out = Vec::new();
                for (i, p) in parts.iter().enumerate() {
                    match p {
                        PromptPart::Text(t) => out.extend(vocab.tokenize(t, i == 0, true)),
                        PromptPart::Token(id) if (*id as usize) < vocab.n_tokens() => {
                            out.push(*id as u32)
                        }
                        PromptPart::Token(id) => {
                            let field = if parts.len() == 1 {
                                "prompt".to_string()
                            } else {
                                format!("prompt[{i}]")
                            };
                            return Err(ApiError::field(
                                &field,
                                format!("{id} is not a token id below {}", vocab.n_tokens()),
                            ));
                        }
                    }
                }
                out
            }
            Prompt::Infill { prefix, suffix, extra, typed } => {
                infill_tokens(vocab, prefix, suffix, extra, typed)?
            }
        })
    }
}

/// llama.cpp's infill layout (prefix-suffix-middle): `[BOS] ([FIM_REP] project\n)
/// ([FIM_SEP] name\n text)... [FIM_PRE] prefix [FIM_SUF] suffix [FIM_MID] typed`; the extra
/// files need the file-separator token.
fn infill_tokens(
    vocab: &Vocab,
    prefix: &str,
    suffix: &str,
    extra: &[(String, String)],
    typed: &str,
) -> Result<Vec<u32>, ApiError> {
    let (Some(pre), Some(suf), Some(mid)) = (vocab.fim_pre(), vocab.fim_suf(), vocab.fim_mid())
    else {
        return Err(ApiError::new(
            400,
            "invalid_request_error",
            "the model has no fill-in-the-middle tokens (FIM prefix, suffix, middle); use a \
             code model such as Qwen2.5-Coder",
        ));
    };
    let mut out = Vec::new();
    if vocab.add_bos() {
        out.extend(vocab.bos());
    }
    if !extra.is_empty() {
        let Some(sep) = vocab.fim_sep() else {
            return Err(ApiError::field(
                "input_extra",
                "the model has no file-separator token for extra files",
            ));
        };
        if let Some(rep) = vocab.fim_rep() {
            out.push(rep);
            out.extend(vocab.tokenize("myproject\n", false, false));
        }
        for (name, text) in extra {
            out.push(sep);
            out.extend(vocab.tokenize(&format!("{name}\n{text}"), false, false));
        }
        out.push(sep);
    }
    out.push(pre);
    out.extend(vocab.tokenize(prefix, false, false));
    out.push(suf);
    out.extend(vocab.tokenize(suffix, false, false));
    out.push(mid);
    out.extend(vocab.tokenize(typed, false, false));
    Ok(out)
}

/// The prompts of a `prompt` field: a string; token ids; a mix of ids and strings (one
/// prompt); or a list whose items are strings or arrays of ids/strings (one prompt each).
pub fn parse_prompts(v: Option<&Value>) -> Result<Vec<Prompt>, ApiError> {
    let one = |v: &Value, field: &str| -> Result<Prompt, ApiError> {
        match v {
            Value::String(s) => Ok(Prompt::Text(s.clone())),
            Value::Array(a) if a.is_empty() => Err(ApiError::field(field, "must not be empty")),
            Value::Array(a) => a
                .iter()
                .enumerate()
                .map(|(i, p)| match p {
                    Value::String(s) => Ok(PromptPart::Text(s.clone())),
                    Value::Number(n) if n.as_u64().is_some() => {
                        Ok(PromptPart::Token(n.as_u64().unwrap_or_default()))
                    }
                    other => Err(ApiError::field(
                        &format!("{field}[{i}]"),
                        format!("expected a token id or a string, got {}", type_name(other)),
                    )),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Prompt::Parts),
            other => Err(ApiError::field(
                field,
                format!("expected a string or an array, got {}", type_name(other)),
            )),
        }
    };
    match v {
        None | Some(Value::Null) => Err(ApiError::field("prompt", "is required")),
        Some(Value::Array(a)) if a.is_empty() => {
            Err(ApiError::field("prompt", "must not be empty"))
        }
        // A list of prompts: every item a string or an array.
        Some(Value::Array(a)) if a.iter().all(|x| x.is_string()) && a.len() > 1 => {
            a.iter().enumerate().map(|(i, x)| one(x, &format!("prompt[{i}]"))).collect()
        }
        Some(Value::Array(a)) if a.iter().all(|x| x.is_array()) => {
            a.iter().enumerate().map(|(i, x)| one(x, &format!("prompt[{i}]"))).collect()
        }
        Some(Value::Array(a)) if a.len() == 1 && a[0].is_string() => {
            Ok(vec![one(&a[0], "prompt")?])
        }
        Some(v) => Ok(vec![one(v, "prompt")?]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn prompt_shapes() {
        let p = |v: Value| parse_prompts(Some(&v));
        assert_eq!(p(json!("hi")).unwrap(), vec![Prompt::Text("hi".into())]);
        assert_eq!(p(json!(["hi"])).unwrap(), vec![Prompt::Text("hi".into())]);
        assert_eq!(p(json!(["a", "b"])).unwrap().len(), 2);
        assert_eq!(
            p(json!([1, "x", 2])).unwrap(),
            vec![Prompt::Parts(vec![
                PromptPart::Token(1),
                PromptPart::Text("x".into()),
                PromptPart::Token(2)
            ])]
        );
        assert_eq!(p(json!([[1, 2], [3]])).unwrap().len(), 2);
        assert!(p(json!([])).unwrap_err().message.contains("must not be empty"));
        assert!(p(json!([1, -2])).unwrap_err().message.starts_with("prompt[1]"));
        assert!(p(json!([[1], [true]])).unwrap_err().message.starts_with("prompt[1][0]"));
        assert!(p(json!(3)).unwrap_err().message.contains("expected a string or an array"));
        assert!(parse_prompts(None).unwrap_err().message.contains("is required"));
    }
}
