//! Generated tokens to text: the one place that turns a stream of sampled tokens into text a
//! user may be shown (`tessera run`, `run -cnv` and the server all use it).
//!
//! - **Whole characters only.** A token's piece may end inside a UTF-8 character (byte-level
//!   vocabularies split emoji and CJK across tokens); the incomplete bytes wait for the next
//!   token. Bytes that can never become valid UTF-8 are shown as U+FFFD.
//! - **Stop strings.** Text that could be the start of a stop string is held back until the
//!   next tokens decide it; when one appears the reply ends just before it, even where it
//!   spans tokens. The earliest stop string in the text wins.
//! - **End of generation.** An end-of-generation token (`Vocab::is_eog`) ends the reply and
//!   adds no text.

use tessera_vocab::Vocab;

/// Why a reply ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEnd {
    /// An end-of-generation token was sampled.
    EndOfGeneration,
    /// This stop string appeared in the text (the text ends before it).
    Stop(String),
}

/// What one token added: the text that can be shown now, and whether the reply ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Chunk {
    /// New text to show (possibly empty: held back, or an incomplete character).
    pub text: String,
    /// `Some` when the reply ended at this token.
    pub end: Option<StreamEnd>,
}

/// Tokens in; UTF-8-complete text, stop strings and end of generation out (module docs).
#[derive(Debug, Clone, Default)]
pub struct TextStream {
    stops: Vec<String>,
    /// Bytes of an incomplete character.
    pending: Vec<u8>,
    /// Every complete character so far (cut at a stop string).
    text: String,
    /// How much of `text` was handed out.
    sent: usize,
}

impl TextStream {
    /// A stream that ends at any of `stops` (empty strings are ignored).
    pub fn new(stops: Vec<String>) -> Self {
        let stops = stops.into_iter().filter(|s| !s.is_empty()).collect();
        TextStream { stops, ..Self::default() }
    }

    /// Adds sampled token `tok`: its piece (special tokens not shown), or the end of the
    /// reply for an end-of-generation token.
    pub fn push_token(&mut self, vocab: &Vocab, tok: u32) -> Chunk {
        if vocab.is_eog(tok) {
            return Chunk { text: String::new(), end: Some(StreamEnd::EndOfGeneration) };
        }
        self.push_bytes(&vocab.token_to_piece(tok, false))
    }

    /// Adds a piece's bytes.
    pub fn push_bytes(&mut self, bytes: &[u8]) -> Chunk {
        self.pending.extend_from_slice(bytes);
        let valid = match std::str::from_utf8(&self.pending) {
            Ok(s) => s.len(),
            // An incomplete character at the end waits; an invalid sequence is shown as is.
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => self.pending.len(),
        };
        let done: Vec<u8> = self.pending.drain(..valid).collect();
        self.text.push_str(&String::from_utf8_lossy(&done));
        // A stop string ends the text before it. It may have started in text held back
        // earlier, never in text already handed out.
        let from = self.sent;
        let hit = self
            .stops
            .iter()
            .filter_map(|s| self.text[from..].find(s.as_str()).map(|p| (p + from, s)))
            .min_by_key(|&(p, _)| p);
        if let Some((p, s)) = hit {
            let stop = s.clone();
            self.text.truncate(p);
            self.pending.clear();
            return Chunk { text: self.take_to(p), end: Some(StreamEnd::Stop(stop)) };
        }
        let end = shown_end(&self.text, self.stops.iter().map(String::as_str));
        Chunk { text: self.take_to(end.max(self.sent)), end: None }
    }

    /// The text held back for a possible stop string, which is text after all once the reply
    /// ends another way (a length limit). Bytes of an incomplete character stay.
    pub fn flush(&mut self) -> String {
        self.take_to(self.text.len())
    }

    /// [`TextStream::flush`], then the bytes of an incomplete character as U+FFFD: everything
    /// not yet handed out, for a reply that ends here.
    pub fn finish(&mut self) -> String {
        let mut out = self.flush();
        let rest = std::mem::take(&mut self.pending);
        out.push_str(&String::from_utf8_lossy(&rest));
        out
    }

    /// Every complete character of the reply so far (without a stop string that ended it).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The text from what was handed out up to `end`, marked handed out.
    fn take_to(&mut self, end: usize) -> String {
        let out = self.text[self.sent..end].to_string();
        self.sent = end;
        out
    }
}

/// Where the text that may be shown now ends: before the longest tail of `text` that could be
/// the beginning of one of `markers` (a stop string, a closing tag split across pieces), moved
/// back to a character boundary. The one hold-back rule of every streamed split (this
/// crate's [`TextStream`]; the server's reasoning, tool-call and harmony splits).
pub fn shown_end<'a>(text: &str, markers: impl IntoIterator<Item = &'a str>) -> usize {
    let bytes = text.as_bytes();
    let keep = markers
        .into_iter()
        .filter_map(|m| {
            let m = m.as_bytes();
            (1..m.len().min(bytes.len() + 1)).rev().find(|&k| bytes.ends_with(&m[..k]))
        })
        .max()
        .unwrap_or(0);
    let mut end = text.len() - keep;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(stops: &[&str]) -> TextStream {
        TextStream::new(stops.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn shown_end_keeps_possible_stop_prefixes() {
        let stops = ["</s>", "\n\n"];
        let held = |t: &str| t.len() - shown_end(t, stops);
        assert_eq!(held("hello <"), 1);
        assert_eq!(held("hello </"), 2);
        assert_eq!(held("hello\n"), 1);
        assert_eq!(held("hello"), 0);
        // A marker that begins with a whole character held back.
        assert_eq!(shown_end("x€", ["€!"]), 1);
    }

    #[test]
    fn characters_split_across_pieces_wait() {
        let mut s = stream(&[]);
        let euro = "€".as_bytes();
        assert_eq!(s.push_bytes(b"a").text, "a");
        assert_eq!(s.push_bytes(&euro[..2]).text, "");
        assert_eq!(s.push_bytes(&euro[2..]).text, "€");
        assert_eq!(s.push_bytes(&[0xff]).text, "\u{fffd}", "never valid: shown at once");
        assert_eq!(s.push_bytes(&euro[..1]).text, "");
        assert_eq!(s.finish(), "\u{fffd}", "an incomplete character at the very end");
        assert_eq!(s.text(), "a€\u{fffd}");
    }

    #[test]
    fn stop_strings_are_held_back_and_cut() {
        let mut s = stream(&["</s>", "\n\n"]);
        assert_eq!(s.push_bytes(b"hello <").text, "hello ");
        assert_eq!(s.push_bytes(b"/").text, "");
        let c = s.push_bytes(b"s> more");
        assert_eq!(c, Chunk { text: String::new(), end: Some(StreamEnd::Stop("</s>".into())) });
        assert_eq!(s.text(), "hello ");
        // Held-back text that turns out not to be a stop string comes out.
        let mut s = stream(&["</s>"]);
        assert_eq!(s.push_bytes(b"a <").text, "a ");
        assert_eq!(s.push_bytes(b"b").text, "<b");
        assert_eq!(s.push_bytes(b" </").text, " ");
        assert_eq!(s.flush(), "</", "a length limit: the held-back text is text");
        // The earliest of two stop strings wins.
        let mut s = stream(&["b", "a"]);
        assert_eq!(s.push_bytes(b"xab").end, Some(StreamEnd::Stop("a".into())));
        assert_eq!(s.text(), "x");
    }

    #[test]
    fn a_stop_string_split_inside_a_character() {
        let mut s = stream(&["€!"]);
        let euro = "€".as_bytes();
        assert_eq!(s.push_bytes(b"x").text, "x");
        assert_eq!(s.push_bytes(&euro[..1]).text, "");
        assert_eq!(s.push_bytes(&euro[1..]).text, "", "could start the stop string");
        assert_eq!(s.push_bytes(b"!").end, Some(StreamEnd::Stop("€!".into())));
        assert_eq!(s.text(), "x");
    }
}
