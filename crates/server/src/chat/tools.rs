//! Tool calls (OpenAI's `tools`, `tool_choice`, `tool_calls`): the request's tools read and
//! checked, the conversation's earlier calls and results kept for the chat template (which
//! renders the tools itself, as with llama.cpp's `--jinja`), the model's calls parsed from
//! the format its template teaches, and, for `required` or a named function, a grammar that
//! makes the reply a call whose arguments follow the function's JSON schema.
//!
//! Formats: Hermes / Qwen (`<tool_call>{"name", "arguments"}</tool_call>`, any number),
//! Mistral (`[TOOL_CALLS][{"name", "arguments"}, ...]`), Llama 3.x (a bare JSON object
//! `{"name", "parameters"}`, optionally after `<|python_tag|>`), and a generic one for
//! templates that know no tools: the tools are described in a system message and the model
//! answers `{"tool_call": {"name", "arguments"}}` (llama.cpp's generic format).

use crate::error::ApiError;
use crate::json::type_name;
use serde_json::{json, Map, Value};

/// A function the model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    /// Its name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// Its arguments' JSON schema.
    pub parameters: Value,
}

/// OpenAI's `tool_choice`.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolChoice {
    /// The model decides (the default with tools).
    Auto,
    /// No call (tools are not shown to the model).
    None,
    /// Some call, arguments constrained.
    Required,
    /// This function, arguments constrained.
    Named(String),
}

/// The tools of a request.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolUse {
    /// The functions.
    pub tools: Vec<Tool>,
    /// `tool_choice`.
    pub choice: ToolChoice,
    /// `parallel_tool_calls` (default true): several calls in one reply.
    pub parallel: bool,
}

/// A call the model made (or made earlier in the conversation).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// OpenAI's call id.
    pub id: String,
    /// The function.
    pub name: String,
    /// The arguments, a JSON object.
    pub arguments: Value,
}

impl ToolCall {
    /// As OpenAI writes it in a reply: arguments as a JSON string.
    pub fn openai(&self, index: Option<usize>) -> Value {
        let mut v = json!({
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments.to_string()},
        });
        if let Some(i) = index {
            v["index"] = json!(i);
        }
        v
    }
}

/// Reads `tools`, `tool_choice` and `parallel_tool_calls`; `None` without tools.
pub fn parse(o: &Map<String, Value>) -> Result<Option<ToolUse>, ApiError> {
    let tools = match o.get("tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => {
            a.iter().enumerate().map(|(i, t)| parse_tool(t, i)).collect::<Result<Vec<_>, _>>()?
        }
        Some(other) => {
            return Err(ApiError::field(
                "tools",
                format!("expected an array, got {}", type_name(other)),
            ))
        }
    };
    let choice = match o.get("tool_choice") {
        None | Some(Value::Null) => ToolChoice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "auto" => ToolChoice::Auto,
            "none" => ToolChoice::None,
            "required" => ToolChoice::Required,
            other => {
                return Err(ApiError::field(
                    "tool_choice",
                    format!("'{other}' is not one of auto, none, required, or a function"),
                ))
            }
        },
        Some(Value::Object(c)) => {
            let name = c
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .ok_or_else(|| ApiError::field("tool_choice.function.name", "is required"))?;
            if !tools.iter().any(|t| t.name == name) {
                return Err(ApiError::field(
                    "tool_choice.function.name",
                    format!("'{name}' is not one of the request's tools"),
                ));
            }
            ToolChoice::Named(name.to_string())
        }
        Some(other) => {
            return Err(ApiError::field(
                "tool_choice",
                format!("expected a string or an object, got {}", type_name(other)),
            ))
        }
    };
    let parallel = match o.get("parallel_tool_calls") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(ApiError::field(
                "parallel_tool_calls",
                format!("expected a boolean, got {}", type_name(other)),
            ))
        }
    };
    if tools.is_empty() {
        if matches!(choice, ToolChoice::Required) {
            return Err(ApiError::field("tool_choice", "'required' needs tools"));
        }
        return Ok(None);
    }
    Ok(Some(ToolUse { tools, choice, parallel }))
}

fn parse_tool(t: &Value, i: usize) -> Result<Tool, ApiError> {
    let f = |k: &str| format!("tools[{i}].{k}");
    if t.get("type").and_then(Value::as_str) != Some("function") {
        return Err(ApiError::field(&f("type"), "only \"function\" tools are supported"));
    }
    let func = t
        .get("function")
        .and_then(Value::as_object)
        .ok_or_else(|| ApiError::field(&f("function"), "is required: an object"))?;
    let name = match func.get("name") {
        Some(Value::String(n)) if !n.is_empty() => n.clone(),
        _ => return Err(ApiError::field(&f("function.name"), "is required: a non-empty string")),
    };
    let description =
        func.get("description").and_then(Value::as_str).unwrap_or_default().to_string();
    let parameters = match func.get("parameters") {
        None | Some(Value::Null) => json!({"type": "object", "properties": {}}),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(other) => {
            return Err(ApiError::field(
                &f("function.parameters"),
                format!("expected a JSON schema object, got {}", type_name(other)),
            ))
        }
    };
    Ok(Tool { name, description, parameters })
}

/// Reads an assistant message's `tool_calls` (arguments as a JSON string, or an object).
pub fn parse_message_calls(v: &Value, field: &str) -> Result<Vec<ToolCall>, ApiError> {
    let Value::Array(a) = v else {
        return Err(ApiError::field(field, format!("expected an array, got {}", type_name(v))));
    };
    a.iter()
        .enumerate()
        .map(|(j, c)| {
            let f = |k: &str| format!("{field}[{j}].{k}");
            let func =
                c.get("function").ok_or_else(|| ApiError::field(&f("function"), "is required"))?;
            let name = func
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| ApiError::field(&f("function.name"), "is required"))?;
            let arguments = match func.get("arguments") {
                None | Some(Value::Null) => json!({}),
                Some(Value::String(s)) => serde_json::from_str(s).map_err(|e| {
                    ApiError::field(&f("function.arguments"), format!("not JSON: {e}"))
                })?,
                Some(o @ Value::Object(_)) => o.clone(),
                Some(other) => {
                    return Err(ApiError::field(
                        &f("function.arguments"),
                        format!("expected a JSON string, got {}", type_name(other)),
                    ))
                }
            };
            let id = c.get("id").and_then(Value::as_str).unwrap_or_default().to_string();
            Ok(ToolCall { id, name: name.to_string(), arguments })
        })
        .collect()
}

/// How a template asks the model to call tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `<tool_call>{...}</tool_call>` (Hermes, Qwen 2.5/3).
    Hermes,
    /// `[TOOL_CALLS][{...}]` (Mistral).
    Mistral,
    /// A bare `{"name", "parameters"}` object (Llama 3.x).
    Llama3,
    /// `{"tool_call": {"name", "arguments"}}`, the tools described in a system message.
    Generic,
}

impl Format {
    /// The format `template` teaches (the generic one where it renders no tools).
    pub fn of(template: &str) -> Format {
        if !tessera_llama::chat::reads_tools(template) {
            Format::Generic
        } else if template.contains("<tool_call>") {
            Format::Hermes
        } else if template.contains("[TOOL_CALLS]") {
            Format::Mistral
        } else if template.contains("<|python_tag|>") || template.contains("ipython") {
            Format::Llama3
        } else {
            Format::Generic
        }
    }

    /// Text after which everything is a call: streaming holds it back and stops showing
    /// content there. For the JSON formats, a reply opening with `{` is a call.
    pub fn marker(self) -> &'static str {
        match self {
            Format::Hermes => "<tool_call>",
            Format::Mistral => "[TOOL_CALLS]",
            Format::Llama3 | Format::Generic => "{",
        }
    }

    /// Whether the marker counts only at the start of the reply.
    pub fn marker_at_start(self) -> bool {
        matches!(self, Format::Llama3 | Format::Generic)
    }
}

/// The system message that teaches the generic format to a template that renders no tools.
pub fn generic_system_prompt(tools: &[Tool]) -> String {
    let list: Vec<Value> = tools
        .iter()
        .map(|t| json!({"name": t.name, "description": t.description, "parameters": t.parameters}))
        .collect();
    format!(
        "You can call these tools:\n{}\nTo call one, answer with only a JSON object: \
         {{\"tool_call\": {{\"name\": \"<tool name>\", \"arguments\": {{...}}}}}}. \
         Otherwise answer normally.",
        serde_json::to_string_pretty(&list).unwrap_or_default()
    )
}

/// OpenAI's tool list, for the template's `tools` variable.
pub fn template_tools(tools: &[Tool]) -> Value {
    Value::Array(
        tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.parameters,
                }})
            })
            .collect(),
    )
}

/// A Lark grammar (llguidance) for a reply that is a call in `format` (one, or several when
/// `parallel`) to `tools` (all of them, or the named one), arguments following their schemas.
pub fn grammar(format: Format, tools: &[Tool], choice: &ToolChoice, parallel: bool) -> String {
    let chosen: Vec<&Tool> = match choice {
        ToolChoice::Named(n) => tools.iter().filter(|t| &t.name == n).collect(),
        _ => tools.iter().collect(),
    };
    let args_key = if format == Format::Llama3 { "parameters" } else { "arguments" };
    let one = |t: &Tool| {
        json!({
            "type": "object",
            "properties": {"name": {"const": t.name}, args_key: t.parameters},
            "required": ["name", args_key],
            "additionalProperties": false,
        })
    };
    let call = json!({"anyOf": chosen.iter().map(|t| one(t)).collect::<Vec<_>>()});
    let call = match format {
        Format::Generic => json!({
            "type": "object",
            "properties": {"tool_call": call},
            "required": ["tool_call"],
            "additionalProperties": false,
        }),
        _ => call,
    };
    let item = format!("%json {call}");
    match format {
        Format::Hermes => {
            let tc = format!("\"<tool_call>\\n\" {item} \"\\n</tool_call>\"");
            if parallel {
                format!("start: tc (\"\\n\" tc)*\ntc: {tc}\n")
            } else {
                format!("start: {tc}\n")
            }
        }
        Format::Mistral => {
            if parallel {
                format!("start: \"[TOOL_CALLS][\" c (\", \" c)* \"]\"\nc: {item}\n")
            } else {
                format!("start: \"[TOOL_CALLS][\" {item} \"]\"\n")
            }
        }
        Format::Llama3 | Format::Generic => format!("start: {item}\n"),
    }
}

/// Splits a finished reply into its text and the calls in it (none when it holds none that
/// parse, or names a function not among `tools`: then it is all text). Whatever the format,
/// a reply that is only a JSON call object (`{"name", "arguments"}`, small models often drop
/// their format's tags) is a call too.
pub fn parse_reply(format: Format, text: &str, tools: &[Tool]) -> (String, Vec<ToolCall>) {
    let (rest, calls) = parse_format(format, text, tools);
    if !calls.is_empty() || format == Format::Llama3 || format == Format::Generic {
        return (rest, calls);
    }
    parse_format(Format::Generic, text, tools)
}

fn parse_format(format: Format, text: &str, tools: &[Tool]) -> (String, Vec<ToolCall>) {
    let known = |n: &str| tools.iter().any(|t| t.name == n);
    let call = |v: &Value, args_keys: &[&str]| -> Option<ToolCall> {
        let name = v.get("name")?.as_str()?;
        if !known(name) {
            return None;
        }
        let arguments = args_keys
            .iter()
            .find_map(|k| v.get(*k))
            .map(|a| match a {
                Value::String(s) => serde_json::from_str(s).unwrap_or(json!({})),
                other => other.clone(),
            })
            .unwrap_or(json!({}));
        arguments.is_object().then(|| ToolCall {
            id: crate::ids::new_id("call_"),
            name: name.into(),
            arguments,
        })
    };
    let none = (text.to_string(), Vec::new());
    match format {
        Format::Hermes => {
            let Some(start) = text.find("<tool_call>") else { return none };
            let mut calls = Vec::new();
            let mut rest = &text[start..];
            while let Some(open) = rest.find("<tool_call>") {
                let after = &rest[open + "<tool_call>".len()..];
                let (body, next, closed) = match after.find("</tool_call>") {
                    Some(close) => (&after[..close], &after[close + "</tool_call>".len()..], true),
                    None => (after, "", false),
                };
                match serde_json::from_str::<Value>(body.trim())
                    .ok()
                    .and_then(|v| call(&v, &["arguments", "parameters"]))
                {
                    Some(c) => calls.push(c),
                    // A reply cut inside a later call (max_tokens): the calls before it stand,
                    // as llama-server's partial parse keeps them; the unfinished one is dropped.
                    None if !closed && !calls.is_empty() => break,
                    None => return none,
                }
                rest = next;
            }
            (text[..start].trim_end().to_string(), calls)
        }
        Format::Mistral => {
            let Some(start) = text.find("[TOOL_CALLS]") else { return none };
            let body = text[start + "[TOOL_CALLS]".len()..].trim();
            let a = match serde_json::from_str::<Value>(body) {
                Ok(Value::Array(a)) => a,
                Ok(_) => return none,
                // Cut inside the array (max_tokens): the whole objects before the cut.
                Err(_) => whole_items(body),
            };
            let calls: Option<Vec<ToolCall>> =
                a.iter().map(|v| call(v, &["arguments", "parameters"])).collect();
            match calls {
                Some(c) if !c.is_empty() => (text[..start].trim_end().to_string(), c),
                _ => none,
            }
        }
        Format::Llama3 | Format::Generic => {
            let body = text.trim_start().trim_start_matches("<|python_tag|>").trim();
            let Ok(v) = serde_json::from_str::<Value>(body) else { return none };
            let v = v.get("tool_call").cloned().unwrap_or(v);
            match call(&v, &["arguments", "parameters"]) {
                Some(c) => (String::new(), vec![c]),
                None => none,
            }
        }
    }
}

/// The whole JSON values at the start of an array that was cut off (`[{..}, {..}, {"na`).
fn whole_items(body: &str) -> Vec<Value> {
    let Some(mut rest) = body.strip_prefix('[') else { return Vec::new() };
    let mut items = Vec::new();
    loop {
        let mut it = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
        match it.next() {
            Some(Ok(v)) => {
                let used = it.byte_offset();
                items.push(v);
                rest = rest[used..].trim_start();
                match rest.strip_prefix(',') {
                    Some(r) => rest = r,
                    None => return items,
                }
            }
            _ => return items,
        }
    }
}

/// Splits a streamed reply: text before a call is shown as it comes; from the call's marker
/// on, the text is held, and parsed when the reply ends.
#[derive(Debug)]
pub struct StreamSplit {
    format: Format,
    text: String,
    sent: usize,
    in_call: bool,
    plain: bool,
}

impl StreamSplit {
    /// A split for replies in `format`.
    pub fn new(format: Format) -> Self {
        StreamSplit { format, text: String::new(), sent: 0, in_call: false, plain: false }
    }

    /// Adds a piece of the reply; returns the text that may be shown now.
    pub fn push(&mut self, piece: &str) -> String {
        self.text.push_str(piece);
        if self.in_call {
            return String::new();
        }
        if !self.plain && self.sent == 0 {
            // A reply opening with a JSON object may be a call in any format.
            let t = self.text.trim_start();
            const TAG: &str = "<|python_tag|>";
            let at_start = self.format.marker_at_start();
            if t.is_empty() || (at_start && TAG.starts_with(t) && t.len() < TAG.len()) {
                return String::new();
            }
            if t.starts_with('{') || (at_start && t.starts_with(TAG)) {
                self.in_call = true;
                return String::new();
            }
            if at_start {
                self.plain = true;
            }
        }
        let end = if self.plain {
            self.text.len()
        } else {
            let marker = self.format.marker();
            if let Some(p) = self.text[self.sent..].find(marker) {
                self.in_call = true;
                self.sent + p
            } else {
                // Hold back what could be the marker's beginning.
                tessera_llama::shown_end(&self.text, [marker]).max(self.sent)
            }
        };
        let out = self.text[self.sent..end].to_string();
        self.sent = end;
        out
    }

    /// At the end of the reply: the text still to show, and the calls (none when what
    /// looked like a call does not parse: it is then shown as text).
    pub fn finish(&mut self, tools: &[Tool]) -> (String, Vec<ToolCall>) {
        if self.in_call {
            let (_, calls) = parse_reply(self.format, &self.text, tools);
            if !calls.is_empty() {
                self.sent = self.text.len();
                return (String::new(), calls);
            }
        }
        let rest = self.text[self.sent..].to_string();
        self.sent = self.text.len();
        (rest, Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools() -> Vec<Tool> {
        vec![Tool {
            name: "get_weather".into(),
            description: "Weather in a city".into(),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        }]
    }

    /// A reply cut by max_tokens inside its third call gives the two whole calls (the
    /// forced-call reply that made CI flaky: Qwen2.5-Coder, greedy, `tool_choice: any`).
    #[test]
    fn a_cut_reply_keeps_its_whole_calls() {
        let t = tools();
        let call = |c: &str| {
            format!("<tool_call>\n{{\"name\": \"get_weather\", \"arguments\": {{\"city\": \"{c}\"}}}}\n</tool_call>")
        };
        let cut =
            format!("{}\n{}\n<tool_call>\n{{\"name\": \"get_wea", call("Paris"), call("Rome"));
        let (text, calls) = parse_reply(Format::Hermes, &cut, &t);
        assert_eq!((text.as_str(), calls.len()), ("", 2), "{cut}");
        assert_eq!(calls[1].arguments["city"], "Rome");
        let cut = "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}, {\"name\": \"get_w";
        let (_, calls) = parse_reply(Format::Mistral, cut, &t);
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].arguments["city"], "Oslo");
    }

    #[test]
    fn calls_parse_from_every_format() {
        let t = tools();
        let (text, calls) = parse_reply(
            Format::Hermes,
            "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}</tool_call>",
            &t,
        );
        assert_eq!(text, "Sure.");
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[1].arguments, json!({"city": "Rome"}));
        let (_, calls) = parse_reply(
            Format::Mistral,
            "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}]",
            &t,
        );
        assert_eq!(calls[0].name, "get_weather");
        let (_, calls) = parse_reply(
            Format::Llama3,
            "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Lima\"}}",
            &t,
        );
        assert_eq!(calls[0].arguments["city"], "Lima");
        let (_, calls) = parse_reply(
            Format::Generic,
            "{\"tool_call\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Kyiv\"}}}",
            &t,
        );
        assert_eq!(calls.len(), 1);
        // Unknown functions and broken JSON stay text.
        for (f, s) in [
            (Format::Hermes, "<tool_call>{\"name\": \"nope\", \"arguments\": {}}</tool_call>"),
            (Format::Hermes, "<tool_call>{\"name\": \"get_weather\", \"argu"),
            (Format::Generic, "{\"weather\": 1}"),
            (Format::Mistral, "[TOOL_CALLS] not json"),
        ] {
            let (text, calls) = parse_reply(f, s, &t);
            assert!(calls.is_empty() && text == s, "{f:?} {s}");
        }
    }

    #[test]
    fn requests_are_checked() {
        let o = |v: Value| v.as_object().unwrap().clone();
        let ok = parse(&o(json!({"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "f"}}}))).unwrap().unwrap();
        assert_eq!(ok.choice, ToolChoice::Named("f".into()));
        for (body, field) in [
            (json!({"tools": 1}), "tools"),
            (json!({"tools": [{"type": "retrieval"}]}), "tools[0].type"),
            (json!({"tools": [{"type": "function", "function": {}}]}), "tools[0].function.name"),
            (
                json!({"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "maybe"}),
                "tool_choice",
            ),
            (
                json!({"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "g"}}}),
                "tool_choice.function.name",
            ),
            (json!({"tool_choice": "required"}), "tool_choice"),
        ] {
            let e = parse(&o(body.clone())).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(field), "{body}: {}", e.message);
        }
    }

    #[test]
    fn grammars_name_the_format() {
        let g = grammar(Format::Hermes, &tools(), &ToolChoice::Required, false);
        assert!(g.starts_with("start: \"<tool_call>\\n\" %json {"), "{g}");
        let g = grammar(Format::Generic, &tools(), &ToolChoice::Named("get_weather".into()), true);
        assert!(g.contains("\"tool_call\""), "{g}");
    }

    #[test]
    fn streams_show_text_and_hold_calls() {
        let t = tools();
        let mut s = StreamSplit::new(Format::Hermes);
        let mut shown = String::new();
        for piece in [
            "Let me ",
            "check.",
            " <tool",
            "_call>\n{\"name\": \"get_weather\", ",
            "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
        ] {
            shown.push_str(&s.push(piece));
        }
        let (rest, calls) = s.finish(&t);
        assert_eq!(shown + &rest, "Let me check. ");
        assert_eq!(calls.len(), 1);
        // A plain reply in a JSON format streams whole.
        let mut s = StreamSplit::new(Format::Generic);
        let shown: String = ["  ", "Hello", " there"].iter().map(|p| s.push(p)).collect();
        assert_eq!(shown, "  Hello there");
        // A broken call comes out as text at the end.
        let mut s = StreamSplit::new(Format::Generic);
        assert_eq!(s.push("{\"oops\""), "");
        assert_eq!(s.finish(&t), ("{\"oops\"".to_string(), vec![]));
    }
}
