//! gpt-oss's replies in OpenAI's harmony format (llama-server's GPT-OSS chat format): a reply
//! is a run of messages, each a header and a body,
//! `<|channel|>analysis<|message|>…<|end|><|start|>assistant<|channel|>final<|message|>…`, and
//! a call is a message to a recipient,
//! `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{…}` (the recipient may
//! also stand in the role: `<|start|>assistant to=functions.NAME<|channel|>…`), ended by
//! `<|call|>`, an end-of-generation token.
//!
//! The markers are special tokens, which replies normally do not show; for a harmony template
//! the engine shows these ([`PRESERVED`], llama.cpp's preserved tokens) so the reply can be
//! taken apart here:
//! - `analysis` becomes `reasoning_content` (with `--reasoning-format none`, the message stays
//!   in `content`, markers and all, as llama.cpp leaves it);
//! - `final`, and `commentary` without a recipient (a preamble), become `content`;
//! - a message to `functions.NAME` becomes a call when NAME is one of the request's tools and
//!   its body a JSON object, and is shown as text otherwise (as a malformed call in the other
//!   formats is); messages to built-in tools (`browser.*`, `python`) are dropped, as
//!   llama.cpp drops unsolicited calls.
//!
//! Text that does not start like a header is plain content (a model that ignores the format).

use crate::chat::tools::{Tool, ToolCall};
use crate::ids::new_id;
use serde_json::Value;

/// The special tokens a harmony reply shows (llama.cpp's `preserved_tokens` for gpt-oss).
pub const PRESERVED: [&str; 5] =
    ["<|channel|>", "<|constrain|>", "<|message|>", "<|start|>", "<|end|>"];

const MESSAGE: &str = "<|message|>";
const END: &str = "<|end|>";
const CHANNEL: &str = "<|channel|>";

/// Whether `template` is a harmony template (as llama.cpp decides: it has `<|channel|>`).
pub fn is_harmony(template: &str) -> bool {
    template.contains(CHANNEL)
}

/// The ids of [`PRESERVED`] in `vocab` (those it has as single tokens).
pub fn preserved_ids(vocab: &tessera_llama::Vocab) -> Vec<u32> {
    PRESERVED
        .iter()
        .filter_map(|t| match vocab.tokenize(t, false, true).as_slice() {
            [id] => Some(*id),
            _ => None,
        })
        .collect()
}

/// Where a message's body goes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Body {
    Reasoning,
    Content,
    /// The arguments of the call to this function (`calls.last()`).
    Call,
    /// A message to a built-in tool.
    Dropped,
}

/// A harmony reply taken apart as it streams (module docs).
#[derive(Debug)]
pub struct HarmonySplit {
    think: bool,
    /// Text not yet taken apart: a header so far, or body text held back.
    buf: String,
    /// `None` while reading a header.
    body: Option<Body>,
    /// The calls so far: (function, arguments text).
    calls: Vec<(String, String)>,
}

/// Whether `s` (a header so far) may still become a header: it starts with a marker, or
/// with a recipient (` to=…`, after the prompt's `<|start|>assistant`).
fn header_like(s: &str) -> bool {
    let t = s.trim_start();
    ["<|", " to=", "to="].iter().any(|p| t.starts_with(p) || (p.starts_with(t) && !t.is_empty()))
        || s.is_empty()
        || (t.is_empty() && s.len() < 4)
}

/// The word after `at` in `header`: up to whitespace or the next marker.
fn word_after(header: &str, at: usize) -> &str {
    let rest = &header[at..];
    let end = rest.find(|c: char| c.is_whitespace() || c == '<').unwrap_or(rest.len());
    &rest[..end]
}

impl HarmonySplit {
    /// A split that moves `analysis` to the reasoning (`think`) or leaves it in the content.
    pub fn new(think: bool) -> Self {
        HarmonySplit { think, buf: String::new(), body: None, calls: Vec::new() }
    }

    /// Where a message with `header` goes (and the call it opens).
    fn classify(&mut self, header: &str) -> Body {
        // The last channel counts (gpt-oss sometimes writes a stray `commentary` first).
        let channel = header.rfind(CHANNEL).map_or("", |p| word_after(header, p + CHANNEL.len()));
        let recipient = header
            .match_indices("to=")
            .map(|(p, _)| word_after(header, p + 3))
            .find(|r| *r != "assistant");
        match (recipient, channel) {
            (Some(r), _) => match r.strip_prefix("functions.") {
                Some(name) => {
                    self.calls.push((name.to_string(), String::new()));
                    Body::Call
                }
                None => {
                    tracing::debug!(recipient = r, "dropping a call to a built-in tool");
                    Body::Dropped
                }
            },
            (None, "analysis") => Body::Reasoning,
            _ => Body::Content,
        }
    }

    /// Sends `text` of a body where it goes.
    fn emit(&mut self, body: &Body, text: &str, out: &mut (String, String)) {
        match body {
            Body::Reasoning if self.think => out.0.push_str(text),
            Body::Reasoning | Body::Content => out.1.push_str(text),
            Body::Call => {
                if let Some(c) = self.calls.last_mut() {
                    c.1.push_str(text);
                }
            }
            Body::Dropped => {}
        }
    }

    /// Adds a piece of the reply; returns the (reasoning, content) that may be shown now.
    pub fn push(&mut self, piece: &str) -> (String, String) {
        self.buf.push_str(piece);
        let mut out = (String::new(), String::new());
        loop {
            match self.body.clone() {
                None => {
                    if let Some(p) = self.buf.find(MESSAGE) {
                        let header = self.buf[..p].to_string();
                        self.buf.drain(..p + MESSAGE.len());
                        let body = self.classify(&header);
                        if body == Body::Reasoning && !self.think {
                            out.1.push_str(&header);
                            out.1.push_str(MESSAGE);
                        }
                        self.body = Some(body);
                        continue;
                    }
                    if !header_like(&self.buf) {
                        // Not the format: plain text from here on.
                        self.body = Some(Body::Content);
                        continue;
                    }
                    break;
                }
                Some(body) => {
                    if let Some(p) = self.buf.find(END) {
                        let text = self.buf[..p].to_string();
                        self.buf.drain(..p + END.len());
                        self.emit(&body, &text, &mut out);
                        if body == Body::Reasoning && !self.think {
                            out.1.push_str(END);
                        }
                        self.body = None;
                        continue;
                    }
                    let end = tessera_llama::shown_end(&self.buf, [END]);
                    let text: String = self.buf.drain(..end).collect();
                    self.emit(&body, &text, &mut out);
                    break;
                }
            }
        }
        out
    }

    /// At the end of the reply: the reasoning and content still to show, and the calls to
    /// `tools` (a call that names no tool of the request, or whose arguments are not a JSON
    /// object, is shown as text).
    pub fn finish(&mut self, tools: &[Tool]) -> (String, String, Vec<ToolCall>) {
        let mut out = (String::new(), String::new());
        let rest = std::mem::take(&mut self.buf);
        match self.body.clone() {
            Some(body) => self.emit(&body, &rest, &mut out),
            None => out.1.push_str(&rest),
        }
        let mut calls = Vec::new();
        for (name, args) in std::mem::take(&mut self.calls) {
            let known = tools.iter().any(|t| t.name == name);
            match serde_json::from_str::<Value>(args.trim()) {
                Ok(arguments) if known && arguments.is_object() => {
                    calls.push(ToolCall { id: new_id("call_"), name, arguments })
                }
                _ => out.1.push_str(&args),
            }
        }
        (out.0, out.1, calls)
    }
}

/// A finished harmony reply: (reasoning when `think`, content, calls).
pub fn split(think: bool, text: &str, tools: &[Tool]) -> (Option<String>, String, Vec<ToolCall>) {
    let mut h = HarmonySplit::new(think);
    let (mut reasoning, mut content) = h.push(text);
    let (r, c, calls) = h.finish(tools);
    reasoning.push_str(&r);
    content.push_str(&c);
    (think.then_some(reasoning), content, calls)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str) -> Tool {
        Tool {
            name: name.into(),
            description: String::new(),
            parameters: json!({"type": "object"}),
        }
    }

    /// Every split of `text` into pieces at `step` bytes (on char boundaries) gives `want`.
    fn streamed(think: bool, text: &str, tools: &[Tool]) -> (String, String, Vec<ToolCall>) {
        let whole = split(think, text, tools);
        for step in [1, 2, 3, 5, 7, 64] {
            let mut h = HarmonySplit::new(think);
            let (mut r, mut c) = (String::new(), String::new());
            let mut i = 0;
            while i < text.len() {
                let mut j = (i + step).min(text.len());
                while !text.is_char_boundary(j) {
                    j += 1;
                }
                let (a, b) = h.push(&text[i..j]);
                r.push_str(&a);
                c.push_str(&b);
                i = j;
            }
            let (a, b, calls) = h.finish(tools);
            r.push_str(&a);
            c.push_str(&b);
            assert_eq!(Some(&r).filter(|_| think), whole.0.as_ref(), "reasoning, step {step}");
            assert_eq!(c, whole.1, "content, step {step}");
            let names = |v: &[ToolCall]| v.iter().map(|c| c.name.clone()).collect::<Vec<_>>();
            assert_eq!(names(&calls), names(&whole.2), "calls, step {step}");
        }
        (whole.0.unwrap_or_default(), whole.1, whole.2)
    }

    #[test]
    fn analysis_then_final() {
        let text = "<|channel|>analysis<|message|>The user greets. Reply.<|end|>\
                    <|start|>assistant<|channel|>final<|message|>Hello — how can I help?";
        let (r, c, calls) = streamed(true, text, &[]);
        assert_eq!(r, "The user greets. Reply.");
        assert_eq!(c, "Hello — how can I help?");
        assert!(calls.is_empty());
        // --reasoning-format none: the analysis message stays in the content, as generated.
        let (_, c, _) = streamed(false, text, &[]);
        assert_eq!(
            c,
            "<|channel|>analysis<|message|>The user greets. Reply.<|end|>Hello — how can I help?"
        );
    }

    #[test]
    fn calls_in_the_channel_or_the_role() {
        let tools = [tool("get_weather")];
        let text = "<|channel|>analysis<|message|>Need weather.<|end|>\
                    <|start|>assistant<|channel|>commentary to=functions.get_weather \
                    <|constrain|>json<|message|>{\"city\": \"Paris\"}";
        let (r, c, calls) = streamed(true, text, &tools);
        assert_eq!((r.as_str(), c.as_str()), ("Need weather.", ""));
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].name, "get_weather");
        assert_eq!(calls[0].arguments, json!({"city": "Paris"}));
        let text =
            " to=functions.get_weather<|channel|>commentary json<|message|>{\"city\":\"Oslo\"}";
        let (_, c, calls) = streamed(true, text, &tools);
        assert_eq!(c, "");
        assert_eq!(calls[0].arguments, json!({"city": "Oslo"}));
        // A function the request does not offer, or arguments that are not an object: text.
        let text = "<|channel|>commentary to=functions.nope<|message|>{\"a\": 1}";
        let (_, c, calls) = streamed(true, text, &tools);
        assert!(calls.is_empty());
        assert_eq!(c, "{\"a\": 1}");
    }

    #[test]
    fn preambles_builtins_and_plain_text() {
        let text = "<|channel|>commentary<|message|>Checking.<|end|>\
                    <|start|>assistant<|channel|>analysis to=browser.search<|message|>{\"q\":1}<|end|>\
                    <|start|>assistant<|channel|>commentary to=assistant<|channel|>final<|message|>Done.";
        let (r, c, calls) = streamed(true, text, &[]);
        assert_eq!((r.as_str(), c.as_str()), ("", "Checking.Done."));
        assert!(calls.is_empty());
        // A model that ignores the format: all content.
        let (r, c, _) = streamed(true, "Just text, no <|channel|> at the start.", &[]);
        assert_eq!((r.as_str(), c.as_str()), ("", "Just text, no <|channel|> at the start."));
    }
}
