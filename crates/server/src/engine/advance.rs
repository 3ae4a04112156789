//! After a step, each slot that produced logits samples (llama.cpp's sampler chain, a grammar,
//! bans and forced tokens through its `SeqSampler`) and streams the token; a slot that decoded
//! proposals after its token (speculation) samples row by row and keeps the proposals it
//! sampled itself, the rejected ones' cells removed (llama.cpp's
//! `common_sampler_sample_and_accept_n`).

use super::job::{Event, Logprob};
use super::worker::Worker;
use crate::chat::constrain::GrammarMask;
use crate::error::ApiError;
use std::time::Instant;
use tessera_llama::StreamEnd;

/// What sampling one row gave.
enum Row {
    /// A token, streamed; the reply goes on.
    Token(u32),
    /// The reply ends, for this reason.
    Done(&'static str),
    /// The reply failed (already told to the client).
    Failed,
}

fn log_softmax_top(logits: &[f32], tok: u32, n: usize) -> (f32, Vec<(u32, f32)>) {
    let m = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let lse = m + logits.iter().map(|&l| ((l - m) as f64).exp()).sum::<f64>().ln() as f32;
    let mut top: Vec<(u32, f32)> = Vec::new();
    if n > 0 {
        let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
        let k = n.min(idx.len());
        idx.select_nth_unstable_by(k - 1, |&a, &b| {
            logits[b as usize].total_cmp(&logits[a as usize])
        });
        idx.truncate(k);
        idx.sort_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]));
        top = idx.into_iter().map(|i| (i, logits[i as usize] - lse)).collect();
    }
    (logits[tok as usize] - lse, top)
}

impl Worker<'_> {
    /// After a step: records the tokens slot `i` added to the cache and, if it produced
    /// logits (at batch row `out`), samples its next token and streams the text, then goes on
    /// through the proposals it decoded after it while it samples them itself; a finish
    /// reason when it is done.
    pub(super) fn advance(
        &mut self,
        i: usize,
        added: &[u32],
        out: Option<usize>,
    ) -> Option<&'static str> {
        let slot = &mut self.slots[i];
        slot.cache.extend_from_slice(added);
        let a = slot.active.as_mut()?;
        if a.next.is_none() {
            a.n_past += added.len();
        }
        let draft = std::mem::take(&mut a.draft);
        let mut row = out?;
        let mut kept = 0;
        let result = loop {
            match self.sample_row(i, row) {
                Row::Token(t) if draft.get(kept) == Some(&t) => {
                    // Sampled as proposed: its cell stays, and the next row follows it.
                    self.slots[i].cache.push(t);
                    kept += 1;
                    row += 1;
                }
                Row::Token(_) => break None,
                Row::Done(reason) => break Some(reason),
                Row::Failed => break None,
            }
        };
        if !draft.is_empty() {
            let p = self.pos_of(i, self.slots[i].cache.len());
            let slot = &mut self.slots[i];
            self.ctx.kv_cache_mut().seq_rm(Some(slot.seq), p, -1);
            if let Some(a) = slot.active.as_mut() {
                a.n_drafted += draft.len();
                a.n_accepted += kept;
            }
            self.metrics.add_spec(draft.len(), kept);
        }
        result
    }

    /// Samples slot `i`'s next token from batch row `row` and streams it.
    fn sample_row(&mut self, i: usize, row: usize) -> Row {
        let vocab = &self.model.vocab;
        let slot = &mut self.slots[i];
        let Some(a) = slot.active.as_mut() else { return Row::Failed };
        let raw = self.ctx.logits_ith(row).expect("asked for");
        if a.next.is_none() {
            a.t_first = Some(Instant::now());
            a.sampler.history(&a.job.prompt);
        }
        let mut grammar = a.job.matcher.as_mut().map(|matcher| GrammarMask { matcher, vocab });
        let (tok, logits) = match a.sampler.sample_masked(raw, grammar.as_mut()) {
            Ok(s) => (s.token, s.logits),
            Err(e) => {
                let msg = format!("constrained decoding failed: {e}");
                let _ = a.job.events.send(Event::Failed(ApiError::new(500, "server_error", msg)));
                slot.active = None;
                return Row::Failed;
            }
        };
        let logprob = a.job.logprobs.map(|n| {
            let (lp, top) = log_softmax_top(logits, tok, n);
            let piece = |t: u32| {
                let b = vocab.token_to_piece(t, false);
                (String::from_utf8_lossy(&b).into_owned(), b)
            };
            let (token, bytes) = piece(tok);
            let top = top
                .into_iter()
                .map(|(t, l)| {
                    let (s, b) = piece(t);
                    (s, b, l)
                })
                .collect();
            Logprob { token, bytes, logprob: lp, top }
        });
        if vocab.is_eog(tok) {
            return Row::Done("stop");
        }
        a.n_gen += 1;
        a.next = Some(tok);
        let piece = vocab.token_to_piece(tok, a.job.preserved.contains(&tok));
        if let Some(end) =
            a.job.think_budget.as_mut().and_then(|b| b.on_token(&String::from_utf8_lossy(&piece)))
        {
            tracing::debug!(slot = i, "reasoning budget spent: closing the thoughts");
            a.sampler.force(end);
        }
        let chunk = a.stream.push_bytes(&piece);
        let _ = a.job.events.send(Event::Token { text: chunk.text, logprob });
        if let Some(StreamEnd::Stop(s)) = chunk.end {
            a.stop_word = Some(s);
            return Row::Done("stop");
        }
        // With --context-shift, a full slot shifts before its next step instead.
        let full = slot.cache.len() + 1 >= self.n_ctx && !self.context_shift;
        if a.job.max_tokens.is_some_and(|m| a.n_gen >= m) || full {
            return Row::Done("length");
        }
        Row::Token(tok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_softmax_is_normalized() {
        let logits = [1.0f32, 2.0, 3.0, 0.5];
        let (lp, top) = log_softmax_top(&logits, 2, 2);
        let total: f64 = logits.iter().map(|&l| ((l - 3.0) as f64).exp()).sum();
        assert!((lp as f64 - (-(total.ln()))).abs() < 1e-5);
        assert_eq!(top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![2, 1]);
    }
}
