//! Chats: the chat template ([`Template`], [`render`]), what a request's messages and prompt
//! hold ([`prompt`], [`content`], [`tools`]), how a reply is taken apart (reasoning in
//! [`reasoning`], gpt-oss's channels in [`harmony`], calls in [`tools`], all of it in
//! [`reply`]), and the constraints that shape a reply ([`constrain`], [`gbnf`]).

pub mod constrain;
pub mod content;
pub mod gbnf;
pub mod harmony;
pub mod prompt;
pub mod reasoning;
pub mod reply;
pub mod tools;

use crate::error::ApiError;
use prompt::ChatMessage;
use serde_json::{json, Map, Value};
use tessera_llama::Vocab;
use tools::{Format, ToolChoice, ToolUse};

/// The chat template in force, with what is decided once from its text: whether it is
/// gpt-oss's harmony format, and how it asks the model to call tools.
#[derive(Debug, Clone)]
pub struct Template {
    /// The template's Jinja source.
    pub source: String,
    /// A harmony template (gpt-oss: [`harmony::is_harmony`]).
    pub harmony: bool,
    /// How the template asks for tool calls.
    pub format: Format,
}

impl Template {
    /// The template `source`, its format decided.
    pub fn new(source: String) -> Self {
        Template { harmony: harmony::is_harmony(&source), format: Format::of(&source), source }
    }
}

/// The chat template applied to `msgs` (with `tools` unless `tool_choice` is `none`), with
/// the generation prompt; a template failure is the request's error. A template that renders
/// no tools gets them described in a system message (the generic format).
pub(crate) fn render(
    template: Option<&Template>,
    vocab: &Vocab,
    enable_thinking: bool,
    msgs: &[ChatMessage],
    tools: Option<&ToolUse>,
    kwargs: &Map<String, Value>,
) -> Result<String, ApiError> {
    let tpl = template.ok_or_else(|| {
        ApiError::new(400, "invalid_request_error", "the model has no chat template; use /v1/completions or start the server with --chat-template-file")
    })?;
    let tools = tools.filter(|t| t.choice != ToolChoice::None);
    let mut values: Vec<Value> = msgs.iter().map(ChatMessage::template_value).collect();
    if tpl.harmony {
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
        if tpl.format == Format::Generic && !tpl.harmony {
            let text = tools::generic_system_prompt(&t.tools);
            match values.first_mut() {
                Some(first) if first["role"] == "system" => {
                    let old = first["content"].as_str().unwrap_or_default().to_string();
                    first["content"] = format!("{old}\n\n{text}").into();
                }
                _ => values.insert(0, json!({"role": "system", "content": text})),
            }
        } else {
            tool_list = Some(tools::template_tools(&t.tools));
        }
    }
    let mut vars = Map::new();
    vars.insert("enable_thinking".into(), enable_thinking.into());
    vars.extend(kwargs.clone());
    tessera_llama::chat::apply_structured(
        &tpl.source,
        &values,
        tool_list.as_ref(),
        true,
        vocab,
        Some(&vars),
    )
    .map_err(|e| ApiError::field("messages", format!("the chat template failed: {e}")))
}
