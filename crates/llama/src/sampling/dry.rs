//! DRY, "don't repeat yourself" (`llama_sampler_init_dry`, llama.cpp's `--dry-*` flags, after
//! koboldcpp): a token that would extend a repetition of the recent context beyond
//! `allowed_length` tokens is penalized by `multiplier · base^(length − allowed_length)`.
//! Sequence breakers (by default newline, `:`, `"`, `*`) end the repetitions a match may run
//! across, so structured text (lists, dialogue) is not punished for its shape.
//!
//! llama.cpp's arithmetic and its data structures' behaviour: the breakers as token
//! sequences found by detokenizing every vocabulary token (a token holding a whole breaker is
//! a one-token breaker; a token ending in a breaker's beginning is the head of a sequence
//! whose tail is the rest of the breaker tokenized, at most 20 tokens; breakers longer than 40
//! bytes are cut), the longest repeated suffixes found by the Z-algorithm over the last
//! `penalty_last_n` tokens, and the penalty capped so `base^exponent` stays finite.

use super::{Candidates, Sampler};
use std::collections::{HashMap, VecDeque};
use tessera_vocab::Vocab;

/// Bytes of a breaker beyond which it is cut (llama.cpp's `MAX_CHAR_LEN`).
const MAX_BREAKER_BYTES: usize = 40;
/// Tokens of a breaker's tail beyond which it is cut (`MAX_SEQ_LEN`).
const MAX_TAIL_TOKENS: usize = 20;
/// `ln(f32::MAX)`, approximately: exponents above `this / ln(base)` are capped.
const FLOAT_MAX_LOG: f32 = 88.722_84;

/// The DRY step (module docs).
#[derive(Debug, Clone)]
pub struct Dry {
    multiplier: f32,
    base: f32,
    allowed_length: i32,
    penalty_last_n: usize,
    /// Head token → the tails of the breakers it begins (empty: a one-token breaker).
    breakers: HashMap<u32, Vec<Vec<u32>>>,
    /// The last `penalty_last_n` accepted tokens, oldest first.
    last: VecDeque<u32>,
}

impl Dry {
    /// A DRY step; `breakers` are turned into token sequences with `vocab` (empty breakers are
    /// skipped, as llama.cpp skips them). `penalty_last_n` below 0 counts as 0 (off).
    pub fn new(
        multiplier: f32,
        base: f32,
        allowed_length: i32,
        penalty_last_n: i32,
        breakers: &[String],
        vocab: &Vocab,
    ) -> Self {
        let penalty_last_n = penalty_last_n.max(0) as usize;
        let mut dry = Dry {
            multiplier,
            base,
            allowed_length,
            penalty_last_n,
            breakers: HashMap::new(),
            last: VecDeque::new(),
        };
        if dry.enabled() {
            let breakers: Vec<&[u8]> = breakers
                .iter()
                .filter(|b| !b.is_empty())
                .map(|b| &b.as_bytes()[..b.len().min(MAX_BREAKER_BYTES)])
                .collect();
            dry.add_breakers(&breakers, vocab);
        }
        dry
    }

    /// A DRY step whose breakers are given as token sequences, first token the head (what
    /// llama.cpp's `llama_sampler_init_dry_testing` takes).
    pub fn with_token_breakers(
        multiplier: f32,
        base: f32,
        allowed_length: i32,
        penalty_last_n: i32,
        breakers: &[Vec<u32>],
    ) -> Self {
        let mut dry = Dry {
            multiplier,
            base,
            allowed_length,
            penalty_last_n: penalty_last_n.max(0) as usize,
            breakers: HashMap::new(),
            last: VecDeque::new(),
        };
        for b in breakers {
            if let Some((&head, tail)) = b.split_first() {
                let tail: Vec<u32> = tail.iter().copied().take(MAX_TAIL_TOKENS).collect();
                dry.push_sequence(head, tail);
            }
        }
        dry
    }

    fn enabled(&self) -> bool {
        self.multiplier != 0.0 && self.base >= 1.0 && self.penalty_last_n != 0
    }

    fn push_sequence(&mut self, head: u32, tail: Vec<u32>) {
        let seqs = self.breakers.entry(head).or_default();
        if !seqs.contains(&tail) {
            seqs.push(tail);
        }
    }

    /// For each breaker, every token that holds it whole, or ends in its beginning (llama.cpp's
    /// `get_overlapping_token_sequences`), each token detokenized once for all breakers.
    fn add_breakers(&mut self, breakers: &[&[u8]], vocab: &Vocab) {
        if breakers.is_empty() {
            return;
        }
        for id in 0..vocab.n_tokens() as u32 {
            let word = vocab.detokenize_bytes(&[id], false, true);
            for breaker in breakers {
                self.add_overlap(id, &word, breaker, vocab);
            }
        }
    }

    /// Token `id` (text `word`) as a head of `breaker`, if it is one.
    fn add_overlap(&mut self, id: u32, word: &[u8], breaker: &[u8], vocab: &Vocab) {
        if contains(word, breaker) {
            self.push_sequence(id, Vec::new());
            return;
        }
        for pos in (0..word.len()).filter(|&p| word[p] == breaker[0]) {
            // The word's rest from `pos` is a beginning of the breaker (it ends the word:
            // a whole breaker inside it was found above).
            let mut i = 1;
            let mut matched = true;
            while i < breaker.len() && pos + i < word.len() {
                if word[pos + i] != breaker[i] {
                    matched = false;
                    break;
                }
                i += 1;
            }
            if !matched {
                continue;
            }
            // A tail cut inside a character cannot be tokenized as text here (llama.cpp
            // tokenizes its bytes); such a head is left out.
            let Ok(tail) = std::str::from_utf8(&breaker[i..]) else { continue };
            let mut tokens = vocab.tokenize(tail, false, false);
            tokens.truncate(MAX_TAIL_TOKENS);
            self.push_sequence(id, tokens);
        }
    }

    /// The `i`-th token from the end (0: the newest).
    fn rat(&self, i: usize) -> u32 {
        self.last[self.last.len() - 1 - i]
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || hay.windows(needle.len()).any(|w| w == needle)
}

impl Sampler for Dry {
    fn name(&self) -> &'static str {
        "dry"
    }

    fn accept(&mut self, token: u32) {
        if !self.enabled() {
            return;
        }
        if self.last.len() == self.penalty_last_n {
            self.last.pop_front();
        }
        self.last.push_back(token);
    }

    fn apply(&mut self, cur: &mut Candidates) {
        if !self.enabled() {
            return;
        }
        let n = self.last.len().min(self.penalty_last_n);
        let allowed = self.allowed_length;
        if n as i64 <= i64::from(allowed) {
            return;
        }
        // Step 1: the nearest breaker limits how far back a repetition may run.
        let mut rep_limit = n as i32;
        for i in 0..n {
            let Some(seqs) = self.breakers.get(&self.rat(i)) else { continue };
            let mut longest: i32 = -1;
            for tail in seqs {
                let len = tail.len() as i32;
                if len > longest
                    && len <= i as i32
                    && tail.iter().enumerate().all(|(o, &t)| t == self.rat(i - o - 1))
                {
                    longest = len;
                }
            }
            if longest >= 0 {
                rep_limit = i as i32 - longest;
                break;
            }
        }
        if rep_limit < allowed {
            return;
        }
        // Step 2: the length of the repeated suffix ending at each position (Z-algorithm,
        // from the end), at most `rep_limit`.
        let mut repeat = vec![0i32; n];
        let last = n - 1;
        let (mut lt, mut rt) = (0usize, 0usize);
        for k in 1..n {
            if k > rt {
                let mut len = 0;
                while len + k < n && self.rat(len) == self.rat(len + k) {
                    len += 1;
                }
                repeat[last - k] = (len as i32).min(rep_limit);
                if len > 0 {
                    lt = k;
                    rt = k + len - 1;
                }
            } else {
                let p = k - lt;
                let right = (rt - k + 1) as i32;
                if repeat[last - p] < right {
                    repeat[last - k] = repeat[last - p].min(rep_limit);
                } else {
                    let mut i = rt + 1;
                    while i < n && self.rat(i) == self.rat(i - k) {
                        i += 1;
                    }
                    repeat[last - k] = ((i - k) as i32).min(rep_limit);
                    lt = k;
                    rt = i - 1;
                }
            }
        }
        // Step 3: the longest repetition each next token would extend.
        let mut max_repeat: HashMap<u32, i32> = HashMap::new();
        for (i, &len) in repeat.iter().enumerate().take(n - 1) {
            if len >= allowed {
                let token = self.rat(n - 2 - i);
                let e = max_repeat.entry(token).or_insert(len);
                if *e < len {
                    *e = len;
                }
            }
        }
        // Step 4: the penalties.
        let max_exponent =
            if self.base > 1.000_001 { (FLOAT_MAX_LOG / self.base.ln()) as i32 } else { 0 };
        for d in &mut cur.data {
            let Some(&len) = max_repeat.get(&d.id) else { continue };
            let single = self.breakers.get(&d.id).is_some_and(|s| s.iter().any(Vec::is_empty));
            if single {
                continue;
            }
            let mut exponent = len - allowed;
            if max_exponent > 0 && exponent > max_exponent {
                exponent = max_exponent;
            }
            // `std::pow(float, int)` is double's pow; the product is rounded to float.
            let penalty =
                f64::from(self.multiplier) * f64::from(self.base).powf(f64::from(exponent));
            d.logit -= penalty as f32;
        }
        cur.sorted = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// llama.cpp's test-sampling.cpp DRY cases: the token extending a repeat is penalized by
    /// `multiplier · base^(len − allowed)`; a breaker stops the match.
    #[test]
    fn repeats_are_penalized_and_breakers_stop_them() {
        let run = |dry: &mut Dry, history: &[u32], n: usize| {
            for &t in history {
                dry.accept(t);
            }
            let mut c = Candidates::from_logits(&vec![0.0; n]);
            dry.apply(&mut c);
            c.data.iter().map(|d| d.logit).collect::<Vec<f32>>()
        };
        // History 0 1 2 0 1: next 2 would repeat "0 1 2" (length 2 before it).
        let mut d = Dry::with_token_breakers(1.0, 2.0, 1, 8, &[]);
        let l = run(&mut d, &[0, 1, 2, 0, 1], 4);
        assert_eq!(l, vec![0.0, 0.0, -2.0, 0.0]);
        // "5 0 1" repeats (length 3): the next 2 gets base^(3 - 1); a breaker (token 0) one
        // token back caps the repetition at 1, so 2 gets base^0.
        let mut d = Dry::with_token_breakers(1.0, 2.0, 1, 8, &[]);
        assert_eq!(run(&mut d, &[5, 0, 1, 2, 5, 0, 1], 6)[2], -4.0);
        let mut d = Dry::with_token_breakers(1.0, 2.0, 1, 8, &[vec![0]]);
        let l = run(&mut d, &[5, 0, 1, 2, 5, 0, 1], 6);
        assert_eq!(l[2], -1.0);
        // Off: multiplier 0.
        let mut d = Dry::with_token_breakers(0.0, 2.0, 1, 8, &[]);
        assert_eq!(run(&mut d, &[0, 1, 2, 0, 1], 4), vec![0.0; 4]);
    }
}
