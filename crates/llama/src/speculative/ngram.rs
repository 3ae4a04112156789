//! llama.cpp's `ngram-simple` proposals (`common_ngram_simple_draft`).

/// Proposes the `size_m` tokens that followed the latest earlier occurrence of the last
/// `size_n` tokens (the history's last `size_n - 1` and the token just sampled).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NgramSimple {
    /// The n-gram looked up (llama.cpp's `--spec-ngram-simple-size-n`, default 12).
    pub size_n: usize,
    /// Most tokens proposed (`--spec-ngram-simple-size-m`, default 48).
    pub size_m: usize,
}

impl Default for NgramSimple {
    fn default() -> Self {
        NgramSimple { size_n: 12, size_m: 48 }
    }
}

impl NgramSimple {
    /// The proposals after `tokens` (the history) and `sampled`: empty when the history is
    /// shorter than `size_n + size_m + 1`, when the n-gram does not occur earlier (position 0
    /// does not count, as in llama.cpp), or when fewer than `size_n` tokens follow it.
    pub fn draft(&self, tokens: &[u32], sampled: u32) -> Vec<u32> {
        let (n, m, len) = (self.size_n, self.size_m, tokens.len());
        if n == 0 || len <= n + m + 1 {
            return Vec::new();
        }
        let mut pattern: Vec<u32> = tokens[len - n + 1..].to_vec();
        pattern.push(sampled);
        // Backwards from the latest start that is not the current n-gram itself.
        let Some(at) = (1..len - n).rev().find(|&j| tokens[j..j + n] == pattern[..]) else {
            return Vec::new();
        };
        let copy = m.min(len - (at + n));
        if copy < n {
            return Vec::new();
        }
        tokens[at + n..at + n + copy].to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tokens_after_the_latest_earlier_match_are_proposed() {
        let g = NgramSimple { size_n: 2, size_m: 3 };
        // History 0 1 2 3 4 1 2 5 6 7 9 9 1, sampled 2: "1 2" occurs at 5 (latest) and 1.
        let h = [0, 1, 2, 3, 4, 1, 2, 5, 6, 7, 9, 9, 1];
        assert_eq!(g.draft(&h, 2), vec![5, 6, 7]);
        // No earlier "9 8": nothing.
        assert!(g.draft(&h[..12], 8).is_empty());
        // Too short a history.
        assert!(g.draft(&h[..6], 2).is_empty());
        // A match at position 0 does not count (llama.cpp skips it).
        let h = [1, 2, 5, 6, 7, 8, 9, 1];
        assert!(g.draft(&h, 2).is_empty());
        // Fewer than size_n tokens after the match: nothing.
        let g = NgramSimple { size_n: 3, size_m: 4 };
        let h = [0, 9, 9, 9, 9, 9, 9, 9, 4, 5];
        assert!(g.draft(&h, 6).is_empty());
    }
}
