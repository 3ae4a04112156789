//! Token attributes and special-token partitioning (`tokenizer_st_partition`).
//!
//! Before a model tokenizer sees the text, every occurrence of a special token's text is cut
//! out of it and becomes that token directly. Special tokens are those with the CONTROL,
//! USER_DEFINED or UNKNOWN attribute, tried longest text first; with `parse_special` false only
//! USER_DEFINED ones are matched (as Hugging Face's tokenizers do for added tokens). A token with
//! LSTRIP / RSTRIP also swallows the ASCII whitespace before / after it.

use crate::vocab::Vocab;
use std::ops::Range;

/// Per-token attributes, llama.cpp's `llama_token_attr` bit set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct TokenAttr(pub u32);

impl TokenAttr {
    /// No attribute (`token_type` UNDEFINED or an unknown value).
    pub const UNDEFINED: TokenAttr = TokenAttr(0);
    /// The unknown token.
    pub const UNKNOWN: TokenAttr = TokenAttr(1 << 0);
    /// Unused (reserved) token.
    pub const UNUSED: TokenAttr = TokenAttr(1 << 1);
    /// Ordinary token.
    pub const NORMAL: TokenAttr = TokenAttr(1 << 2);
    /// Control token (BOS, EOS, chat markers): never produced from text unless parse_special.
    pub const CONTROL: TokenAttr = TokenAttr(1 << 3);
    /// User-defined (added) token: always matched in text.
    pub const USER_DEFINED: TokenAttr = TokenAttr(1 << 4);
    /// Byte-fallback token `<0xXX>`.
    pub const BYTE: TokenAttr = TokenAttr(1 << 5);
    /// Normalized (unused by the tokenizers here).
    pub const NORMALIZED: TokenAttr = TokenAttr(1 << 6);
    /// Swallows whitespace to its left when matched.
    pub const LSTRIP: TokenAttr = TokenAttr(1 << 7);
    /// Swallows whitespace to its right when matched.
    pub const RSTRIP: TokenAttr = TokenAttr(1 << 8);
    /// Single word (unused by the tokenizers here).
    pub const SINGLE_WORD: TokenAttr = TokenAttr(1 << 9);

    /// The attribute for a GGUF `tokenizer.ggml.token_type` value.
    pub fn from_token_type(token_type: i32) -> TokenAttr {
        match token_type {
            1 => TokenAttr::NORMAL,
            2 => TokenAttr::UNKNOWN,
            3 => TokenAttr::CONTROL,
            4 => TokenAttr::USER_DEFINED,
            5 => TokenAttr::UNUSED,
            6 => TokenAttr::BYTE,
            _ => TokenAttr::UNDEFINED,
        }
    }

    /// Whether any bit of `other` is set.
    pub fn intersects(self, other: TokenAttr) -> bool {
        self.0 & other.0 != 0
    }

    /// `self` with the bits of `other` set or cleared.
    pub fn with(self, other: TokenAttr, on: bool) -> TokenAttr {
        if on {
            TokenAttr(self.0 | other.0)
        } else {
            TokenAttr(self.0 & !other.0)
        }
    }
}

impl std::ops::BitOr for TokenAttr {
    type Output = TokenAttr;
    fn bitor(self, rhs: TokenAttr) -> TokenAttr {
        TokenAttr(self.0 | rhs.0)
    }
}

/// A piece of the input: a special token found in it, or text still to tokenize.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fragment {
    /// A special token.
    Token(u32),
    /// A byte range of the input text (never empty, on character boundaries).
    Text(Range<usize>),
}

/// C's `isspace` in the "C" locale.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r')
}

/// Cuts the special tokens out of `text`.
pub(crate) fn partition(vocab: &Vocab, text: &str, parse_special: bool) -> Vec<Fragment> {
    let mut fragments = Vec::new();
    if text.is_empty() {
        return fragments;
    }
    fragments.push(Fragment::Text(0..text.len()));
    let bytes = text.as_bytes();
    for &id in vocab.special_cache() {
        let attr = vocab.token_attr(id);
        if !parse_special && attr.intersects(TokenAttr::CONTROL | TokenAttr::UNKNOWN) {
            continue;
        }
        let Some(needle) = vocab.token_bytes(id).and_then(|t| std::str::from_utf8(t).ok()) else {
            continue;
        };
        if needle.is_empty()
            || !fragments
                .iter()
                .any(|f| matches!(f, Fragment::Text(r) if text[r.clone()].contains(needle)))
        {
            continue;
        }
        let mut next = Vec::with_capacity(fragments.len() + 2);
        for fragment in fragments {
            let Fragment::Text(mut range) = fragment else {
                next.push(fragment);
                continue;
            };
            while let Some(found) = text[range.clone()].find(needle) {
                let at = range.start + found;
                let mut left_end = at;
                if attr.intersects(TokenAttr::LSTRIP) {
                    while left_end > range.start && is_c_space(bytes[left_end - 1]) {
                        left_end -= 1;
                    }
                }
                if left_end > range.start {
                    next.push(Fragment::Text(range.start..left_end));
                }
                next.push(Fragment::Token(id));
                let mut right = at + needle.len();
                if attr.intersects(TokenAttr::RSTRIP) {
                    while right < range.end && is_c_space(bytes[right]) {
                        right += 1;
                    }
                }
                range = right..range.end;
            }
            if !range.is_empty() {
                next.push(Fragment::Text(range));
            }
        }
        fragments = next;
    }
    fragments
}
