//! Reasoning apart from the answer (llama-server's `--reasoning-format deepseek`, its
//! default): a reply's `<think>...</think>` (Qwen3, DeepSeek-R1; the template may open the
//! tag itself at the end of the prompt) becomes `reasoning_content`, streamed as its own
//! deltas, and only what follows is `content`.

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

/// `--reasoning-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReasoningFormat {
    /// Thoughts stay in `content`, as generated.
    None,
    /// Thoughts go to `reasoning_content` (llama-server's `deepseek`; its `auto` is this).
    #[default]
    Deepseek,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing but whitespace yet: the reply may still open `<think>`.
    Start,
    Think,
    Content,
}

/// Splits a streamed reply into reasoning and content.
#[derive(Debug)]
pub struct ThinkSplit {
    state: State,
    buf: String,
    /// After `</think>`: the answer's leading whitespace is dropped.
    skip_ws: bool,
}

impl ThinkSplit {
    /// A split for a reply whose prompt ended inside `<think>` (`opened`) or not.
    pub fn new(opened: bool) -> Self {
        ThinkSplit {
            state: if opened { State::Think } else { State::Start },
            buf: String::new(),
            skip_ws: false,
        }
    }

    /// Adds a piece; returns (reasoning, content) that may be shown now.
    pub fn push(&mut self, piece: &str) -> (String, String) {
        self.buf.push_str(piece);
        let (mut reasoning, mut content) = (String::new(), String::new());
        loop {
            match self.state {
                State::Start => {
                    let t = self.buf.trim_start();
                    if t.is_empty() || (OPEN.starts_with(t) && t.len() < OPEN.len()) {
                        break;
                    }
                    if let Some(rest) = t.strip_prefix(OPEN) {
                        self.buf = rest.to_string();
                        self.state = State::Think;
                    } else {
                        self.state = State::Content;
                    }
                }
                State::Think => {
                    if let Some(p) = self.buf.find(CLOSE) {
                        reasoning.push_str(&self.buf[..p]);
                        self.buf = self.buf[p + CLOSE.len()..].to_string();
                        self.state = State::Content;
                        self.skip_ws = true;
                        continue;
                    }
                    let end = tessera_llama::shown_end(&self.buf, [CLOSE]);
                    reasoning.push_str(&self.buf[..end]);
                    self.buf.drain(..end);
                    break;
                }
                State::Content => {
                    if self.skip_ws {
                        let t = self.buf.trim_start();
                        if t.is_empty() {
                            self.buf.clear();
                            break;
                        }
                        self.buf = t.to_string();
                        self.skip_ws = false;
                    }
                    content.push_str(&self.buf);
                    self.buf.clear();
                    break;
                }
            }
        }
        (reasoning, content)
    }

    /// At the end: what is left, as (reasoning, content) (an unclosed `<think>` is all
    /// reasoning).
    pub fn finish(&mut self) -> (String, String) {
        let rest = std::mem::take(&mut self.buf);
        match self.state {
            State::Think => (rest, String::new()),
            _ => (String::new(), rest),
        }
    }
}

/// A whole reply split: (reasoning, if there was any thinking; content).
pub fn split(text: &str, opened: bool) -> (Option<String>, String) {
    let mut s = ThinkSplit::new(opened);
    let (mut r, mut c) = s.push(text);
    let (r2, c2) = s.finish();
    r.push_str(&r2);
    c.push_str(&c2);
    let thought = opened || text.trim_start().starts_with(OPEN);
    (thought.then_some(r), c)
}

/// Whether a rendered prompt leaves the reply inside `<think>` (DeepSeek-R1's and some
/// Qwen3 templates open it).
pub fn prompt_opens_thinking(prompt: &str) -> bool {
    prompt.trim_end().ends_with(OPEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thoughts_split_from_the_answer() {
        assert_eq!(
            split("<think>\nHmm, 2+2.\n</think>\n\nIt is 4.", false),
            (Some("\nHmm, 2+2.\n".into()), "It is 4.".into())
        );
        assert_eq!(split("It is 4.", false), (None, "It is 4.".into()));
        assert_eq!(split("Hmm.</think>4", true), (Some("Hmm.".into()), "4".into()));
        assert_eq!(split("Hmm, still", true), (Some("Hmm, still".into()), String::new()));
        // Streamed in pieces that cut the tags.
        let mut s = ThinkSplit::new(false);
        let (mut r, mut c) = (String::new(), String::new());
        for p in ["  <thi", "nk>a", "b</th", "ink>", " answer"] {
            let (x, y) = s.push(p);
            r.push_str(&x);
            c.push_str(&y);
        }
        let (x, y) = s.finish();
        assert_eq!((r + &x, c + &y), ("ab".to_string(), "answer".to_string()));
    }
}
