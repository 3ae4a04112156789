//! `llama_sampler_logit_bias`: fixed amounts added to the logits of chosen tokens, the first
//! step of llama.cpp's common chain (its `--logit-bias`, llama-server's `logit_bias`).

use super::{Candidates, Sampler};

/// Adds `bias` to the logit of `token` for every `(token, bias)` pair (a token named twice
/// gets both). A bias of −∞ bans the token.
#[derive(Debug, Clone, Default)]
pub struct LogitBias {
    /// The pairs, in the order given.
    pub bias: Vec<(u32, f32)>,
}

impl Sampler for LogitBias {
    fn name(&self) -> &'static str {
        "logit-bias"
    }
    fn apply(&mut self, cur: &mut Candidates) {
        if self.bias.is_empty() {
            return;
        }
        let mut moved = Vec::new();
        for &(tok, b) in &self.bias {
            // Candidates not yet reordered sit at their id's index, as llama.cpp's fast path.
            match cur.data.get_mut(tok as usize) {
                Some(d) if d.id == tok => d.logit += b,
                _ => moved.push((tok, b)),
            }
        }
        for (tok, b) in moved {
            if let Some(d) = cur.data.iter_mut().find(|d| d.id == tok) {
                d.logit += b;
            }
        }
        cur.sorted = false;
    }
}
