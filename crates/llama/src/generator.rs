//! One sequence's generate-and-sample loop, as llama.cpp's `llama-cli` and `llama-simple` run
//! it: decode the prompt, then sample a token from the last logits, hand it to the sampler's
//! history, decode it at the next position, and again.
//!
//! [`Generator`] owns the positions and the logits row to sample from, so a caller's loop is
//! only its own stopping rules (a token budget, the context's size, an interrupt) and what it
//! does with each token: [`crate::TextStream`] turns them into UTF-8-complete text, applies
//! stop strings and says when an end-of-generation token ends the reply. `tessera run` and
//! its `-cnv` conversation use both; `tessera serve` uses the text half and the sampling step
//! ([`crate::sampling::SeqSampler`]), its decoding being one batch for all of its slots.

use crate::sampling::{NoMask, SamplerChain, SeqSampler, TokenMask};
use crate::{Batch, LlamaContext, Result};

/// Generates one sequence of a context (module docs).
pub struct Generator<'a, 'm> {
    ctx: &'a mut LlamaContext<'m>,
    /// The sampling step (bans included) over the caller's chain.
    sampler: SeqSampler<&'a mut SamplerChain>,
    /// The sequence's id in the context.
    seq: u32,
    /// Tokens of the sequence in the cache: the next token's position.
    pos: usize,
    /// The row of the last decoded batch whose logits the next sample reads (`None` before
    /// anything was decoded).
    last: Option<usize>,
}

impl<'a, 'm> Generator<'a, 'm> {
    /// A generator for sequence `seq` of `ctx`, which holds `pos` of its tokens already (0 for
    /// a new sequence), sampling with `sampler`.
    pub fn new(
        ctx: &'a mut LlamaContext<'m>,
        sampler: &'a mut SamplerChain,
        seq: u32,
        pos: usize,
    ) -> Self {
        Generator { ctx, sampler: SeqSampler::new(sampler), seq, pos, last: None }
    }

    /// Never samples `tokens` (as llama.cpp's `--ignore-eos` with the end-of-generation
    /// tokens).
    pub fn ban(mut self, tokens: impl IntoIterator<Item = u32>) -> Self {
        self.sampler.ban(tokens);
        self
    }

    /// Evaluates `tokens` at the sequence's next positions: they join the sampler's history
    /// (penalties see the prompt, as llama.cpp's) and the next sample reads the logits of the
    /// last of them. An empty or too long batch is the context's error.
    pub fn prompt(&mut self, tokens: &[u32]) -> Result<()> {
        self.ctx.decode(&Batch::from_tokens(tokens, self.pos as i32, self.seq))?;
        self.sampler.history(tokens);
        self.pos += tokens.len();
        self.last = Some(tokens.len() - 1);
        Ok(())
    }

    /// Samples the next token from the logits of the last evaluated token and adds it to the
    /// sampler's history; the caller decides whether to [`feed`](Self::feed) it back. With the
    /// context's argmax outputs ([`LlamaContext::set_argmax_outputs`]) the computed argmax is
    /// the token where the step is a plain argmax (nothing banned, a greedy chain).
    ///
    /// # Panics
    /// Before anything was evaluated ([`prompt`](Self::prompt) first), and with argmax outputs
    /// where the step needs the logits (bans, another chain).
    pub fn sample(&mut self) -> u32 {
        let last = self.last.expect("Generator::sample before any prompt was evaluated");
        if let Some(argmax) = self.ctx.argmax_ith(last) {
            return self
                .sampler
                .take_argmax(argmax)
                .expect("argmax outputs with a sampler that needs the logits");
        }
        let logits = self.ctx.logits_ith(last).expect("the last token of a batch has logits");
        self.sampler.sample(logits).token
    }

    /// [`sample`](Self::sample) with `mask` (a grammar) restricting the tokens and told the
    /// token chosen; its error stops the step.
    ///
    /// # Panics
    /// Before anything was evaluated ([`prompt`](Self::prompt) first).
    pub fn sample_masked<M: TokenMask>(&mut self, mask: &mut M) -> Result<u32, M::Error> {
        let last = self.last.expect("Generator::sample before any prompt was evaluated");
        let logits = self.ctx.logits_ith(last).expect("the last token of a batch has logits");
        Ok(self.sampler.sample_masked(logits, Some(mask))?.token)
    }

    /// Evaluates sampled token `tok` at the next position, so the next sample follows it.
    pub fn feed(&mut self, tok: u32) -> Result<()> {
        self.ctx.decode(&Batch::from_tokens(&[tok], self.pos as i32, self.seq))?;
        self.pos += 1;
        self.last = Some(0);
        Ok(())
    }

    /// Evaluates `tok` (sampled, not yet evaluated) and the proposals `draft` after it in one
    /// batch, then samples at each position in turn (llama.cpp's
    /// `common_sampler_sample_and_accept_n`): the proposals are kept up to the first one the
    /// chain does not sample, and the token it samples there ends the list returned (kept
    /// proposals, then that token, which is not evaluated: the next `tok`). The rejected
    /// proposals' cells are removed. See [`crate::speculative`].
    pub fn speculate(&mut self, tok: u32, draft: &[u32]) -> Result<Vec<u32>> {
        match self.speculate_masked::<NoMask>(tok, draft, None)? {
            Ok(v) => Ok(v),
            Err(never) => match never {},
        }
    }

    /// [`speculate`](Self::speculate) with `mask` (a grammar) restricting every sample and told
    /// each token kept; its error (the inner one) stops the step.
    pub fn speculate_masked<M: TokenMask>(
        &mut self,
        tok: u32,
        draft: &[u32],
        mut mask: Option<&mut M>,
    ) -> Result<Result<Vec<u32>, M::Error>> {
        let start = self.pos;
        let mut batch = Batch::new();
        for (i, &t) in std::iter::once(&tok).chain(draft).enumerate() {
            batch.add(t, (start + i) as i32, self.seq, true);
        }
        self.ctx.decode_verification(&batch)?;
        let mut out = Vec::with_capacity(draft.len() + 1);
        for i in 0..=draft.len() {
            let logits = self.ctx.logits_ith(i).expect("every token of the batch has logits");
            let t = match self.sampler.sample_masked(logits, mask.as_deref_mut()) {
                Ok(s) => s.token,
                Err(e) => return Ok(Err(e)),
            };
            out.push(t);
            if draft.get(i) != Some(&t) {
                break;
            }
        }
        let kept = out.len() - 1;
        self.pos = start + 1 + kept;
        self.ctx.kv_cache_mut().seq_rm(Some(self.seq), self.pos as i32, -1);
        self.last = Some(kept);
        Ok(Ok(out))
    }

    /// Drops the sequence's cells from position `pos` on (tokens speculation evaluated that a
    /// reply ends before): the next token is evaluated there ([`feed`](Self::feed) or
    /// [`prompt`](Self::prompt)) before anything is sampled again.
    pub fn rewind(&mut self, pos: usize) {
        if pos < self.pos {
            self.ctx.kv_cache_mut().seq_rm(Some(self.seq), pos as i32, -1);
            self.pos = pos;
            self.last = None;
        }
    }

    /// Shifts the context as llama.cpp's tools do when it is full: the first `n_keep` tokens
    /// stay, half of the rest are dropped, and the tail moves back over them (its K rotated by
    /// the next decode's K-shift). Returns how many were dropped (0 when `n_keep` leaves
    /// nothing to drop).
    pub fn shift(&mut self, n_keep: usize) -> usize {
        let n_left = self.pos.saturating_sub(n_keep);
        let n_discard = n_left / 2;
        if n_discard == 0 {
            return 0;
        }
        let (keep, drop, end) = (n_keep as i32, n_discard as i32, self.pos as i32);
        let kv = self.ctx.kv_cache_mut();
        kv.seq_rm(Some(self.seq), keep, keep + drop);
        kv.seq_add(self.seq, keep + drop, end, -drop);
        self.pos -= n_discard;
        n_discard
    }

    /// Tokens of the sequence in the cache (the next position).
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// The context (for its schedule and timings between steps).
    pub fn context(&self) -> &LlamaContext<'m> {
        self.ctx
    }
}
