//! A reply taken apart for every API that answers chats (OpenAI chat, Anthropic messages,
//! OpenAI responses): reasoning apart from the answer ([`crate::chat::reasoning`]), then, with
//! tools, the calls apart from the text ([`crate::chat::tools`]); whole, or piece by piece as it
//! streams.

use crate::chat::harmony::HarmonySplit;
use crate::chat::reasoning::ThinkSplit;
use crate::chat::tools::{Format, StreamSplit, Tool, ToolCall};

/// What a request's reply may hold: thoughts (`think`; `opened` when the prompt left the
/// reply inside `<think>`) and calls in a format (`tools`).
#[derive(Debug, Clone)]
pub struct ReplyShape {
    /// Split `<think>` off (`--reasoning-format deepseek`).
    pub think: bool,
    /// The rendered prompt ends inside `<think>`.
    pub opened: bool,
    /// The call format and the request's tools.
    pub tools: Option<(Format, Vec<Tool>)>,
    /// The template is gpt-oss's harmony format ([`crate::chat::harmony`]): its channels say what
    /// is reasoning, content and calls, instead of `<think>` and the call format.
    pub harmony: bool,
}

/// A finished reply: the reasoning (when there was thinking), the text, the calls.
pub fn split(shape: &ReplyShape, text: &str) -> (Option<String>, String, Vec<ToolCall>) {
    if shape.harmony {
        let tools = shape.tools.as_ref().map_or(&[][..], |(_, l)| l);
        return crate::chat::harmony::split(shape.think, text, tools);
    }
    let (reasoning, text) = if shape.think {
        crate::chat::reasoning::split(text, shape.opened)
    } else {
        (None, text.to_string())
    };
    let (text, calls) = match &shape.tools {
        Some((format, list)) => crate::chat::tools::parse_reply(*format, &text, list),
        None => (text, Vec::new()),
    };
    (reasoning, text, calls)
}

/// A reply split as it streams.
#[derive(Debug)]
pub struct ReplySplit {
    harmony: Option<HarmonySplit>,
    think: Option<ThinkSplit>,
    calls: Option<StreamSplit>,
    tools: Vec<Tool>,
}

impl ReplySplit {
    /// A split for replies of `shape`.
    pub fn new(shape: &ReplyShape) -> Self {
        let harmony = shape.harmony;
        ReplySplit {
            harmony: harmony.then(|| HarmonySplit::new(shape.think)),
            think: (shape.think && !harmony).then(|| ThinkSplit::new(shape.opened)),
            calls: shape.tools.as_ref().filter(|_| !harmony).map(|(f, _)| StreamSplit::new(*f)),
            tools: shape.tools.as_ref().map(|(_, l)| l.clone()).unwrap_or_default(),
        }
    }

    /// Adds a piece; returns the (reasoning, text) that may be shown now.
    pub fn push(&mut self, piece: &str) -> (String, String) {
        if let Some(h) = &mut self.harmony {
            return h.push(piece);
        }
        let (reasoning, text) = match &mut self.think {
            Some(t) => t.push(piece),
            None => (String::new(), piece.to_string()),
        };
        let text = match &mut self.calls {
            Some(s) => s.push(&text),
            None => text,
        };
        (reasoning, text)
    }

    /// At the end: the reasoning and text still to show, and the calls.
    pub fn finish(&mut self) -> (String, String, Vec<ToolCall>) {
        if let Some(h) = &mut self.harmony {
            return h.finish(&self.tools);
        }
        let (reasoning, tail) = match &mut self.think {
            Some(t) => t.finish(),
            None => (String::new(), String::new()),
        };
        match &mut self.calls {
            Some(s) => {
                let mut text = s.push(&tail);
                let (rest, calls) = s.finish(&self.tools);
                text.push_str(&rest);
                (reasoning, text, calls)
            }
            None => (reasoning, tail, Vec::new()),
        }
    }
}
