//! Byte-level BPE (`llm_tokenizer_bpe_session`): merging by merge rank within each
//! pre-tokenized word.
//!
//! Each word (already in the GPT-2 byte alphabet) starts as one symbol per character; adjacent
//! pairs listed in `tokenizer.ggml.merges` go into a min-heap keyed by merge rank (ties:
//! leftmost pair). With `ignore_merges` (Llama 3) a word that is itself a token is emitted
//! whole. Merge parts are checked to be tokens at load time, so ranks are looked up by the
//! pair of token ids.

use crate::pretokenize::PreTokenizer;
use crate::spm::{symbols_of, Symbol};
use crate::vocab::Vocab;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

struct Bigram {
    left: usize,
    right: usize,
    rank: u32,
    size: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bigram {
    /// `BinaryHeap` pops the greatest: make that the lowest rank, then the leftmost pair.
    fn cmp(&self, other: &Self) -> Ordering {
        other.rank.cmp(&self.rank).then_with(|| other.left.cmp(&self.left))
    }
}

/// Tokenizes one text fragment, appending ids to `out`.
pub(crate) fn tokenize(vocab: &Vocab, pre: &PreTokenizer, text: &str, out: &mut Vec<u32>) {
    for word in pre.split(text) {
        if word.is_empty() {
            continue;
        }
        if vocab.ignore_merges() {
            if let Some(id) = vocab.text_to_token(word.as_bytes()) {
                out.push(id);
                continue;
            }
        }
        tokenize_word(vocab, &word, out);
    }
}

fn tokenize_word(vocab: &Vocab, word: &str, out: &mut Vec<u32>) {
    let bytes = word.as_bytes();
    let mut symbols = symbols_of(word);
    let mut queue = BinaryHeap::new();

    let try_add = |symbols: &[Symbol],
                   queue: &mut BinaryHeap<Bigram>,
                   left: Option<usize>,
                   right: Option<usize>| {
        let (Some(left), Some(right)) = (left, right) else { return };
        let (l, r) = (symbols[left], symbols[right]);
        let left_id = vocab.text_to_token(&bytes[l.start..l.start + l.len]);
        let right_id = vocab.text_to_token(&bytes[r.start..r.start + r.len]);
        if let (Some(a), Some(b)) = (left_id, right_id) {
            if let Some(rank) = vocab.merge_rank(a, b) {
                queue.push(Bigram { left, right, rank, size: l.len + r.len });
            }
        }
    };

    for i in 1..symbols.len() {
        try_add(&symbols, &mut queue, Some(i - 1), Some(i));
    }

    while let Some(bigram) = queue.pop() {
        let (l, r) = (symbols[bigram.left], symbols[bigram.right]);
        // Symbols only grow, so an unchanged total size means both sides are unchanged.
        if l.len == 0 || r.len == 0 || l.len + r.len != bigram.size {
            continue;
        }
        symbols[bigram.left].len += r.len;
        symbols[bigram.right].len = 0;
        symbols[bigram.left].next = r.next;
        if let Some(n) = r.next {
            symbols[n].prev = Some(bigram.left);
        }
        try_add(&symbols, &mut queue, symbols[bigram.left].prev, Some(bigram.left));
        try_add(&symbols, &mut queue, Some(bigram.left), symbols[bigram.left].next);
    }

    for s in symbols.iter().filter(|s| s.len > 0) {
        let piece = &bytes[s.start..s.start + s.len];
        match vocab.text_to_token(piece) {
            Some(id) => out.push(id),
            // llama.cpp looks each byte of the encoded piece up as a one-byte token; bytes of
            // multi-byte alphabet characters find none and are dropped, as there.
            None => out
                .extend(piece.iter().filter_map(|b| vocab.text_to_token(std::slice::from_ref(b)))),
        }
    }
}
