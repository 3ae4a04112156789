//! Batches of tokens to decode (llama.cpp's `llama_batch`): token, position, sequence, and
//! whether its logits are wanted; or, instead of tokens, embeddings (an image's, from a
//! multimodal projector) entering the model where the token embeddings would.

use crate::{LlamaError, Result};

/// Tokens to decode, each with its position, sequence and logits flag.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Batch {
    /// Token ids (ignored, 0, in an embeddings batch).
    pub tokens: Vec<u32>,
    /// Embeddings, `n_embd` values a token, instead of token ids (llama.cpp's `batch.embd`);
    /// empty in a token batch.
    pub embd: Vec<f32>,
    /// Positions.
    pub pos: Vec<i32>,
    /// Sequence of each token.
    pub seq_id: Vec<u32>,
    /// Whether each token's logits are kept.
    pub logits: Vec<bool>,
    /// M-RoPE's other positions of each token of an embeddings batch (height, width, extra:
    /// an image's grid), `pos` being its time; empty: a text token's `(pos, pos, 0)`.
    pub mrope: Vec<[i32; 3]>,
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

    /// `values` (`n_embd` a token, as many tokens as whole rows) of sequence `seq` at positions
    /// `start..`, no logits (llama.cpp's image batches: what follows them is sampled).
    pub fn from_embeddings(values: &[f32], n_embd: usize, start: i32, seq: u32) -> Self {
        let n = values.len() / n_embd.max(1);
        let mut b = Batch::new();
        for i in 0..n {
            b.add(0, start + i as i32, seq, false);
        }
        b.embd = values[..n * n_embd].to_vec();
        b
    }

    /// An image's embeddings (`n_embd` a token, row by row over a grid `width` wide) for an
    /// M-RoPE model at time `t`: token `(y, x)` at positions `(t, t + y, t + x, 0)`, as mtmd
    /// places them (llama.cpp's `mtmd_image_tokens_get_decoder_pos`).
    pub fn from_image_grid(values: &[f32], n_embd: usize, width: usize, t: i32, seq: u32) -> Self {
        let mut b = Batch::from_embeddings(values, n_embd, t, seq);
        let w = width.max(1);
        b.pos.iter_mut().for_each(|p| *p = t);
        b.mrope = (0..b.len()).map(|i| [t + (i / w) as i32, t + (i % w) as i32, 0]).collect();
        b
    }

    /// The (height, width) of each token's M-RoPE positions: `mrope`'s, else `(pos, pos)`.
    pub fn grid_pos(&self, i: usize) -> [i32; 2] {
        match self.mrope.get(i) {
            Some(m) => [m[0], m[1]],
            None => [self.pos[i], self.pos[i]],
        }
    }

    /// Whether the batch carries embeddings instead of token ids.
    pub fn is_embd(&self) -> bool {
        !self.embd.is_empty()
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

    /// Checks lengths, token ids (or the embeddings' size and values against `n_embd`),
    /// sequence ids and positions.
    pub fn validate(&self, n_vocab: usize, n_embd: usize, max_seq: usize) -> Result<()> {
        let n = self.tokens.len();
        if n == 0 {
            return Err(LlamaError::Batch("no tokens".into()));
        }
        if self.pos.len() != n || self.seq_id.len() != n || self.logits.len() != n {
            return Err(LlamaError::Batch(
                "tokens, positions, sequences and flags differ in length".into(),
            ));
        }
        if self.is_embd() {
            if self.embd.len() != n * n_embd {
                return Err(LlamaError::Batch(format!(
                    "{} embedding values for {n} tokens of the model's width {n_embd}",
                    self.embd.len()
                )));
            }
            if let Some(i) = self.embd.iter().position(|v| !v.is_finite()) {
                return Err(LlamaError::Batch(format!(
                    "embedding value {i} (token {}) is not finite",
                    i / n_embd
                )));
            }
        } else if let Some((i, t)) =
            self.tokens.iter().enumerate().find(|(_, &t)| t as usize >= n_vocab)
        {
            return Err(LlamaError::Batch(format!(
                "token {t} at {i} is outside the vocabulary of {n_vocab}"
            )));
        }
        if !self.mrope.is_empty() && (self.mrope.len() != n || !self.is_embd()) {
            return Err(LlamaError::Batch(format!(
                "{} M-RoPE positions for {n} tokens (embeddings batches only)",
                self.mrope.len()
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
