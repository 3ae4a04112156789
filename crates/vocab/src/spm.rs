//! SentencePiece-style BPE (`llm_tokenizer_spm`): greedy merging of adjacent symbols by token
//! score, with byte fallback.
//!
//! The text arrives with spaces already escaped to U+2581. It starts as one symbol per UTF-8
//! character; every adjacent pair whose concatenation is a token goes into a max-heap keyed by
//! that token's score (ties: leftmost pair first). Popping a pair that is still current merges
//! the right symbol into the left and queues the new neighbours. A final symbol that is not a
//! token is emitted as byte tokens `<0xXX>`.

use crate::vocab::Vocab;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// A symbol: a byte range of the text, linked to its neighbours.
#[derive(Clone, Copy)]
pub(crate) struct Symbol {
    pub(crate) start: usize,
    pub(crate) len: usize,
    pub(crate) prev: Option<usize>,
    pub(crate) next: Option<usize>,
}

/// One symbol per UTF-8 character of `text`.
pub(crate) fn symbols_of(text: &str) -> Vec<Symbol> {
    let n = text.chars().count();
    text.char_indices()
        .enumerate()
        .map(|(i, (start, c))| Symbol {
            start,
            len: c.len_utf8(),
            prev: i.checked_sub(1),
            next: (i + 1 < n).then_some(i + 1),
        })
        .collect()
}

struct Bigram {
    left: usize,
    right: usize,
    score: f32,
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
    /// Higher score first; on equal scores the leftmost pair.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score.total_cmp(&other.score).then_with(|| other.left.cmp(&self.left))
    }
}

/// Tokenizes escaped text, appending ids to `out`.
pub(crate) fn tokenize(vocab: &Vocab, text: &str, out: &mut Vec<u32>) {
    let bytes = text.as_bytes();
    let mut symbols = symbols_of(text);
    let mut queue = BinaryHeap::new();

    let try_add = |symbols: &[Symbol],
                   queue: &mut BinaryHeap<Bigram>,
                   left: Option<usize>,
                   right: Option<usize>| {
        let (Some(left), Some(right)) = (left, right) else { return };
        let (l, r) = (symbols[left], symbols[right]);
        let piece = &bytes[l.start..l.start + l.len + r.len];
        if let Some(id) = vocab.text_to_token(piece) {
            queue.push(Bigram { left, right, score: vocab.token_score(id), size: piece.len() });
        }
    };

    for i in 1..symbols.len() {
        try_add(&symbols, &mut queue, Some(i - 1), Some(i));
    }

    while let Some(bigram) = queue.pop() {
        let (l, r) = (symbols[bigram.left], symbols[bigram.right]);
        // Skip pairs made stale by an earlier merge.
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

    let mut at = (!symbols.is_empty()).then_some(0);
    while let Some(i) = at {
        let s = symbols[i];
        let piece = &bytes[s.start..s.start + s.len];
        match vocab.text_to_token(piece) {
            Some(id) => out.push(id),
            None => {
                for &b in piece {
                    if let Some(id) = vocab.byte_to_token(b) {
                        out.push(id);
                    }
                }
            }
        }
        at = s.next;
    }
}
