//! Batches of tokens to decode (llama.cpp's `llama_batch`): token, position, sequence, and
//! whether its logits are wanted.

use crate::{LlamaError, Result};

/// Tokens to decode, each with its position, sequence and logits flag.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batch {
    /// Token ids.
    pub tokens: Vec<u32>,
    /// Positions.
    pub pos: Vec<i32>,
    /// Sequence of each token.
    pub seq_id: Vec<u32>,
    /// Whether each token's logits are kept.
    pub logits: Vec<bool>,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// `tokens` of sequence `seq` at positions `start..`, logits for the last one only (what a
    /// prompt or a generated token needs).
    pub fn from_tokens(tokens: &[u32], start: i32, seq: u32) -> Self {
        let mut b = Batch::new();
        for (i, &t) in tokens.iter().enumerate() {
            b.add(t, start + i as i32, seq, i + 1 == tokens.len());
        }
        b
    }

    /// Appends a token.
    pub fn add(&mut self, token: u32, pos: i32, seq: u32, logits: bool) {
        self.tokens.push(token);
        self.pos.push(pos);
        self.seq_id.push(seq);
        self.logits.push(logits);
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Checks lengths, token ids, sequence ids and positions.
    pub fn validate(&self, n_vocab: usize, max_seq: usize) -> Result<()> {
        let n = self.tokens.len();
        if n == 0 {
            return Err(LlamaError::Batch("no tokens".into()));
        }
        if self.pos.len() != n || self.seq_id.len() != n || self.logits.len() != n {
            return Err(LlamaError::Batch(
                "tokens, positions, sequences and flags differ in length".into(),
            ));
        }
        if let Some((i, t)) = self.tokens.iter().enumerate().find(|(_, &t)| t as usize >= n_vocab) {
            return Err(LlamaError::Batch(format!(
                "token {t} at {i} is outside the vocabulary of {n_vocab}"
            )));
        }
        if let Some(s) = self.seq_id.iter().find(|&&s| s as usize >= max_seq) {
            return Err(LlamaError::Batch(format!("sequence id {s} (at most {})", max_seq - 1)));
        }
        if let Some(p) = self.pos.iter().find(|&&p| p < 0) {
            return Err(LlamaError::Batch(format!("negative position {p}")));
        }
        Ok(())
    }
}
