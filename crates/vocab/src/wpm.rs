//! WordPiece (`llm_tokenizer_wpm_session`), for BERT-style vocabularies.
//!
//! The text is normalized (optionally lowercased and stripped of accents, where llama.cpp's
//! "NFD" keeps the first code point of each canonical decomposition), split on whitespace,
//! punctuation, ASCII symbols and CJK ideographs; each word, prefixed with U+2581, is then
//! covered greedily by the longest matching tokens. A word that cannot be covered becomes the
//! unknown token.

use crate::unicode;
use crate::vocab::Vocab;

/// Tokenizes one text fragment, appending ids to `out`.
pub(crate) fn tokenize(vocab: &Vocab, text: &str, out: &mut Vec<u32>) {
    for word in preprocess(text, vocab.lowercase(), vocab.strip_accents()) {
        if word.is_empty() {
            continue;
        }
        let word = format!("\u{2581}{word}");
        let bytes = word.as_bytes();
        let n = bytes.len();
        let before = out.len();
        let mut i = 0;
        while i < n {
            let longest = (i + 1..=n.min(i + vocab.max_token_len() + 1))
                .rev()
                .find_map(|j| vocab.text_to_token(&bytes[i..j]).map(|id| (id, j)));
            match longest {
                Some((id, j)) => {
                    out.push(id);
                    i = j;
                }
                None => {
                    out.truncate(before);
                    break;
                }
            }
        }
        if out.len() == before {
            if let Some(unk) = vocab.unk() {
                out.push(unk);
            }
        }
    }
}

/// The BERT normalizer and word splitter.
fn preprocess(text: &str, lowercase: bool, strip_accents: bool) -> Vec<String> {
    let mut words = vec![String::new()];
    for c in text.chars() {
        let c = if strip_accents { unicode::nfd_first(c) } else { c };
        let flags = unicode::flags(c);
        if flags.is_whitespace() {
            if !words.last().is_some_and(String::is_empty) {
                words.push(String::new());
            }
            continue;
        }
        if c == '\0' || c == '\u{FFFD}' || flags.is_control() {
            continue;
        }
        if strip_accents && flags.is_accent_mark() {
            continue;
        }
        let c = if lowercase { unicode::to_lower(c) } else { c };
        let last = words.len() - 1;
        if flags.is_punctuation() || ((c as u32) < 0x7F && flags.is_symbol()) || is_chinese_char(c)
        {
            if !words[last].is_empty() {
                words.push(String::new());
            }
            let last = words.len() - 1;
            words[last].push(c);
            words.push(String::new());
        } else {
            words[last].push(c);
        }
    }
    if words.last().is_some_and(String::is_empty) {
        words.pop();
    }
    words
}

/// CJK ideograph blocks, as BERT (and llama.cpp) list them.
fn is_chinese_char(c: char) -> bool {
    matches!(
        c as u32,
        0x4E00..=0x9FFF
            | 0x3400..=0x4DBF
            | 0x20000..=0x2A6DF
            | 0x2A700..=0x2B73F
            | 0x2B740..=0x2B81F
            | 0x2B920..=0x2CEAF
            | 0xF900..=0xFAFF
            | 0x2F800..=0x2FA1F
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_like_bert() {
        assert_eq!(
            preprocess("Héllo, World!  中文", true, true),
            ["hello", ",", "world", "!", "中", "文"]
        );
        assert_eq!(preprocess("a$b", false, false), ["a", "$", "b"]);
    }
}
