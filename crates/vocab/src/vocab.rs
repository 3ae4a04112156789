//! The [`Vocab`] type: token table, special tokens and flags, and the tokenize / detokenize
//! entry points (`llama_vocab::impl::tokenize`, `token_to_piece`, `detokenize`).

use crate::pretokenize::{PreTokenizer, PreType};
use crate::special::{partition, Fragment, TokenAttr};
use crate::{bpe, spm, unicode, wpm};
use std::collections::{BTreeSet, HashMap};

/// Which tokenizer algorithm a vocabulary uses (`tokenizer.ggml.model`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum VocabType {
    /// SentencePiece BPE by score with byte fallback (`llama`: LLaMA 1/2, Mistral, Gemma, Phi-3).
    Spm,
    /// Byte-level BPE by merge rank (`gpt2`: GPT-2, Llama 3, Qwen2, SmolLM, StarCoder, ...).
    Bpe,
    /// WordPiece (`bert`).
    Wpm,
}

/// One vocabulary entry.
#[derive(Debug, Clone)]
pub(crate) struct TokenData {
    pub(crate) text: Vec<u8>,
    pub(crate) score: f32,
    pub(crate) attr: TokenAttr,
}

/// Special token ids (`None`: not defined).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SpecialIds {
    pub(crate) bos: Option<u32>,
    pub(crate) eos: Option<u32>,
    pub(crate) eot: Option<u32>,
    pub(crate) eom: Option<u32>,
    pub(crate) unk: Option<u32>,
    pub(crate) sep: Option<u32>,
    pub(crate) pad: Option<u32>,
    pub(crate) mask: Option<u32>,
    pub(crate) fim_pre: Option<u32>,
    pub(crate) fim_suf: Option<u32>,
    pub(crate) fim_mid: Option<u32>,
    pub(crate) fim_pad: Option<u32>,
    pub(crate) fim_rep: Option<u32>,
    pub(crate) fim_sep: Option<u32>,
}

/// Tokenizer flags (llama.cpp's `add_bos`, `clean_spaces`, ...).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Flags {
    pub(crate) add_space_prefix: bool,
    pub(crate) add_bos: bool,
    pub(crate) add_eos: bool,
    pub(crate) add_sep: bool,
    pub(crate) ignore_merges: bool,
    pub(crate) clean_spaces: bool,
    pub(crate) lowercase: bool,
    pub(crate) strip_accents: bool,
}

/// A tokenizer vocabulary, built from GGUF metadata ([`Vocab::from_metadata`]).
///
/// Immutable once built; tokenizing takes `&self`, so one `Vocab` can serve many threads.
pub struct Vocab {
    pub(crate) kind: VocabType,
    pub(crate) pre_name: String,
    pub(crate) pre_type: PreType,
    pub(crate) tokens: Vec<TokenData>,
    pub(crate) token_to_id: HashMap<Vec<u8>, u32>,
    pub(crate) max_token_len: usize,
    pub(crate) merges: HashMap<(u32, u32), u32>,
    pub(crate) special: SpecialIds,
    pub(crate) flags: Flags,
    pub(crate) eog: BTreeSet<u32>,
    /// CONTROL / USER_DEFINED / UNKNOWN tokens, longest text first.
    pub(crate) special_cache: Vec<u32>,
    pub(crate) pre: Option<PreTokenizer>,
}

impl std::fmt::Debug for Vocab {
    /// A summary: the token table itself is far too large to print.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vocab")
            .field("type", &self.kind)
            .field("pre", &self.pre_name)
            .field("n_tokens", &self.tokens.len())
            .field("n_merges", &self.merges.len())
            .field("special", &self.special)
            .field("flags", &self.flags)
            .field("eog", &self.eog)
            .finish_non_exhaustive()
    }
}

impl Vocab {
    // ----- queries -------------------------------------------------------------------------

    /// The tokenizer algorithm.
    pub fn vocab_type(&self) -> VocabType {
        self.kind
    }

    /// The BPE pre-tokenizer family ([`PreType::Default`] for SPM and WPM).
    pub fn pre_type(&self) -> PreType {
        self.pre_type
    }

    /// The `tokenizer.ggml.pre` value as read (empty when absent).
    pub fn pre_name(&self) -> &str {
        &self.pre_name
    }

    /// Number of tokens.
    pub fn n_tokens(&self) -> usize {
        self.tokens.len()
    }

    /// Number of BPE merges.
    pub fn n_merges(&self) -> usize {
        self.merges.len()
    }

    /// Beginning-of-sequence token.
    pub fn bos(&self) -> Option<u32> {
        self.special.bos
    }

    /// End-of-sequence token.
    pub fn eos(&self) -> Option<u32> {
        self.special.eos
    }

    /// End-of-turn token (from metadata, else detected by text as llama.cpp does).
    pub fn eot(&self) -> Option<u32> {
        self.special.eot
    }

    /// End-of-message token.
    pub fn eom(&self) -> Option<u32> {
        self.special.eom
    }

    /// Unknown token.
    pub fn unk(&self) -> Option<u32> {
        self.special.unk
    }

    /// Separator token (BERT's `[SEP]`).
    pub fn sep(&self) -> Option<u32> {
        self.special.sep
    }

    /// Padding token.
    pub fn pad(&self) -> Option<u32> {
        self.special.pad
    }

    /// Mask token.
    pub fn mask(&self) -> Option<u32> {
        self.special.mask
    }

    /// Fill-in-the-middle prefix token (`<|fim_prefix|>`, `<fim_prefix>`, ...).
    pub fn fim_pre(&self) -> Option<u32> {
        self.special.fim_pre
    }

    /// Fill-in-the-middle suffix token.
    pub fn fim_suf(&self) -> Option<u32> {
        self.special.fim_suf
    }

    /// Fill-in-the-middle middle token (generation starts after it).
    pub fn fim_mid(&self) -> Option<u32> {
        self.special.fim_mid
    }

    /// Fill-in-the-middle repository-name token.
    pub fn fim_rep(&self) -> Option<u32> {
        self.special.fim_rep
    }

    /// Fill-in-the-middle file-separator token.
    pub fn fim_sep(&self) -> Option<u32> {
        self.special.fim_sep
    }

    /// Whether `tokenize(.., add_special = true, ..)` prepends BOS.
    pub fn add_bos(&self) -> bool {
        self.flags.add_bos
    }

    /// Whether `tokenize(.., add_special = true, ..)` appends EOS.
    pub fn add_eos(&self) -> bool {
        self.flags.add_eos
    }

    /// Whether SPM text gets a leading space (`tokenizer.ggml.add_space_prefix`).
    pub fn add_space_prefix(&self) -> bool {
        self.flags.add_space_prefix
    }

    /// Whether generation stops at `id`: EOS, EOT, EOM and the end-of-turn-looking tokens
    /// llama.cpp adds (`<|im_end|>`, `<|endoftext|>`, `<end_of_turn>`, FIM pad/repo/sep, ...).
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.contains(&id)
    }

    /// The end-of-generation tokens, ascending.
    pub fn eog_tokens(&self) -> impl Iterator<Item = u32> + '_ {
        self.eog.iter().copied()
    }

    /// The text of token `id` as stored (with `▁` or GPT-2 alphabet escapes), if `id` is in
    /// range and the text is UTF-8.
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.token_bytes(id).and_then(|t| std::str::from_utf8(t).ok())
    }

    /// The raw bytes of token `id`'s text.
    pub fn token_bytes(&self, id: u32) -> Option<&[u8]> {
        self.tokens.get(id as usize).map(|t| t.text.as_slice())
    }

    /// The attributes of token `id` ([`TokenAttr::UNDEFINED`] when out of range).
    pub fn token_attr(&self, id: u32) -> TokenAttr {
        self.tokens.get(id as usize).map_or(TokenAttr::UNDEFINED, |t| t.attr)
    }

    /// The score of token `id` (0 when out of range).
    pub fn token_score(&self, id: u32) -> f32 {
        self.tokens.get(id as usize).map_or(0.0, |t| t.score)
    }

    /// The id of the token whose text is exactly `text`.
    pub fn text_to_token(&self, text: &[u8]) -> Option<u32> {
        self.token_to_id.get(text).copied()
    }

    // ----- internals used by the algorithms ---------------------------------------------

    pub(crate) fn max_token_len(&self) -> usize {
        self.max_token_len
    }
    pub(crate) fn ignore_merges(&self) -> bool {
        self.flags.ignore_merges
    }
    pub(crate) fn lowercase(&self) -> bool {
        self.flags.lowercase
    }
    pub(crate) fn strip_accents(&self) -> bool {
        self.flags.strip_accents
    }
    pub(crate) fn special_cache(&self) -> &[u32] {
        &self.special_cache
    }
    pub(crate) fn merge_rank(&self, left: u32, right: u32) -> Option<u32> {
        self.merges.get(&(left, right)).copied()
    }

    /// The byte-fallback token for `b` (SPM: `<0xXX>`, else the raw byte as a token).
    pub(crate) fn byte_to_token(&self, b: u8) -> Option<u32> {
        match self.kind {
            VocabType::Spm => self
                .text_to_token(format!("<0x{b:02X}>").as_bytes())
                .or_else(|| self.text_to_token(&[b])),
            VocabType::Bpe | VocabType::Wpm => {
                let c = unicode::byte_to_char_table()[usize::from(b)];
                self.text_to_token(c.to_string().as_bytes())
            }
        }
    }

    // ----- tokenize --------------------------------------------------------------------------

    /// Tokenizes `text` as `llama_tokenize` does.
    ///
    /// `add_special` adds BOS / EOS as the vocabulary's flags say (WPM: `[CLS]` and `[SEP]`);
    /// `parse_special` lets control tokens written in the text (`<|im_start|>`) become those
    /// tokens; user-defined tokens are always matched.
    pub fn tokenize(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        let fragments = partition(self, text, parse_special);
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        match self.kind {
            VocabType::Spm => {
                if add_special && self.flags.add_bos {
                    out.extend(self.special.bos);
                }
                let mut prev_special = true;
                for fragment in &fragments {
                    match fragment {
                        Fragment::Text(range) => {
                            let mut piece = String::with_capacity(range.len() + 1);
                            if self.flags.add_space_prefix && prev_special {
                                piece.push(' ');
                            }
                            piece.push_str(&text[range.clone()]);
                            spm::tokenize(self, &piece.replace(' ', "\u{2581}"), &mut out);
                            prev_special = false;
                        }
                        Fragment::Token(id) => {
                            out.push(*id);
                            prev_special = true;
                        }
                    }
                }
                if add_special && self.flags.add_eos {
                    out.extend(self.special.eos);
                }
            }
            VocabType::Bpe => {
                if add_special && self.flags.add_bos {
                    out.extend(self.special.bos);
                }
                for fragment in &fragments {
                    match fragment {
                        Fragment::Text(range) => {
                            if let Some(pre) = &self.pre {
                                bpe::tokenize(self, pre, &text[range.clone()], &mut out);
                            }
                        }
                        Fragment::Token(id) => out.push(*id),
                    }
                }
                if add_special && self.flags.add_eos {
                    out.extend(self.special.eos);
                }
            }
            VocabType::Wpm => {
                if add_special {
                    out.extend(self.special.bos);
                }
                for fragment in &fragments {
                    match fragment {
                        Fragment::Text(range) => {
                            wpm::tokenize(self, &text[range.clone()], &mut out)
                        }
                        Fragment::Token(id) => out.push(*id),
                    }
                }
                if add_special {
                    out.extend(self.special.sep);
                }
            }
        }
        out
    }

    // ----- detokenize ------------------------------------------------------------------------

    /// The bytes token `id` stands for (`llama_token_to_piece` with `lstrip` 0).
    ///
    /// Control and unknown tokens give nothing unless `special`. A piece may be part of a
    /// UTF-8 sequence (byte tokens), hence bytes. Out-of-range ids give nothing.
    pub fn token_to_piece(&self, id: u32, special: bool) -> Vec<u8> {
        let Some(token) = self.tokens.get(id as usize) else {
            return Vec::new();
        };
        let attr = token.attr;
        let special_attr = TokenAttr::UNKNOWN | TokenAttr::CONTROL;
        if !special && attr.intersects(special_attr) {
            return Vec::new();
        }
        if attr.intersects(special_attr | TokenAttr::USER_DEFINED) {
            return token.text.clone();
        }
        if attr.intersects(TokenAttr::NORMAL) {
            return match self.kind {
                VocabType::Spm | VocabType::Wpm => unescape_whitespace(&token.text),
                VocabType::Bpe => decode_gpt2(&token.text),
            };
        }
        if attr.intersects(TokenAttr::BYTE) {
            return parse_byte_token(&token.text).map(|b| vec![b]).unwrap_or_default();
        }
        Vec::new()
    }

    /// Detokenizes `ids` to bytes (`llama_detokenize`): drops the SPM space prefix, optionally
    /// the BOS / EOS the vocabulary adds (`remove_special`), renders control tokens only with
    /// `unparse_special`, and applies llama.cpp's `clean_spaces` rules where the vocabulary
    /// asks for them.
    pub fn detokenize_bytes(
        &self,
        ids: &[u32],
        remove_special: bool,
        unparse_special: bool,
    ) -> Vec<u8> {
        let mut ids = ids;
        let mut remove_space = self.flags.add_space_prefix;
        if remove_special && self.flags.add_bos {
            if let (Some(&first), Some(bos)) = (ids.first(), self.special.bos) {
                if first == bos {
                    remove_space = false;
                    ids = &ids[1..];
                }
            }
        }
        if remove_special && self.flags.add_eos {
            if let (Some(&last), Some(eos)) = (ids.last(), self.special.eos) {
                if last == eos {
                    ids = &ids[..ids.len() - 1];
                }
            }
        }
        let mut text = Vec::new();
        for &id in ids {
            let piece = self.token_to_piece(id, unparse_special);
            let skip = usize::from(remove_space && piece.first() == Some(&b' '));
            text.extend_from_slice(&piece[skip..]);
            remove_space = false;
        }
        if self.flags.clean_spaces {
            clean_spaces(&mut text);
        }
        text
    }

    /// [`Vocab::detokenize_bytes`] as a string (invalid UTF-8 replaced by U+FFFD).
    pub fn detokenize(&self, ids: &[u32], remove_special: bool, unparse_special: bool) -> String {
        String::from_utf8_lossy(&self.detokenize_bytes(ids, remove_special, unparse_special))
            .into_owned()
    }
}

/// `▁` (U+2581) back to spaces.
fn unescape_whitespace(text: &[u8]) -> Vec<u8> {
    const ESCAPED: &[u8] = "\u{2581}".as_bytes();
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        if text[i..].starts_with(ESCAPED) {
            out.push(b' ');
            i += ESCAPED.len();
        } else {
            out.push(text[i]);
            i += 1;
        }
    }
    out
}

/// GPT-2 alphabet back to bytes (`llama_decode_text`), with llama.cpp's `[UNK_BYTE_..]` marker
/// for characters outside the alphabet.
fn decode_gpt2(text: &[u8]) -> Vec<u8> {
    let s = String::from_utf8_lossy(text);
    let mut out = Vec::with_capacity(text.len());
    for c in s.chars() {
        match unicode::char_to_byte(c) {
            Some(b) => out.push(b),
            None => {
                out.extend_from_slice(b"[UNK_BYTE_0x");
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.extend_from_slice(s.as_bytes());
                out.push(b']');
            }
        }
    }
    out
}

/// The byte of a `<0xXX>` token.
fn parse_byte_token(text: &[u8]) -> Option<u8> {
    let hex = text.get(3..5)?;
    u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
}

/// llama.cpp's three `clean_spaces` passes over the detokenized bytes.
fn clean_spaces(text: &mut Vec<u8>) {
    // " ?", " !", " .", " ," lose the space
    let mut out: Vec<u8> = Vec::with_capacity(text.len());
    for (i, &x) in text.iter().enumerate() {
        if i > 0 && text[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            out.pop();
        }
        out.push(x);
    }
    // " ' " becomes "'"
    // (llama.cpp zeroes the dropped space in place, so it no longer counts as a space before
    // the next character)
    let mut src = std::mem::take(&mut out);
    let mut i = 0;
    while i < src.len() {
        let x = src[i];
        if i > 0 && x == b'\'' && i + 1 < src.len() && src[i - 1] == b' ' && src[i + 1] == b' ' {
            out.pop();
            i += 1;
            src[i] = 0;
        }
        out.push(x);
        i += 1;
    }
    // " 's", " 'm", " 're", " 've" lose the space
    let src = std::mem::take(&mut out);
    for (i, &x) in src.iter().enumerate() {
        if i > 0 && src[i - 1] == b' ' && x == b'\'' && i + 1 < src.len() {
            let x1 = src[i + 1];
            let x2 = src.get(i + 2).copied();
            let drop = matches!(x1, b's' | b'm')
                || matches!((x1, x2), (b'r', Some(b'e')) | (b'v', Some(b'e')));
            if drop {
                out.pop();
            }
        }
        out.push(x);
    }
    *text = out;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_spaces_like_llama() {
        let mut t = b"Hello , world ! it 's a ' test ' ok 're".to_vec();
        clean_spaces(&mut t);
        assert_eq!(String::from_utf8(t).unwrap(), "Hello, world! it's a'test'ok're");
    }

    #[test]
    fn byte_tokens() {
        assert_eq!(parse_byte_token(b"<0x0A>"), Some(10));
        assert_eq!(parse_byte_token(b"<0x"), None);
        assert_eq!(unescape_whitespace("\u{2581}a\u{2581}".as_bytes()), b" a ");
    }
}
