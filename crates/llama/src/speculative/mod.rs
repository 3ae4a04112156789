//! Speculative decoding (llama.cpp's `common/speculative`): a cheap source proposes the next
//! few tokens, the model checks them all in one batch, and every proposal it would have
//! produced itself is kept, so one step can yield several tokens.
//!
//! Two sources, under llama.cpp's current names (`--spec-type`):
//! - [`NgramSimple`] (`ngram-simple`): the tokens that followed the last occurrence of the
//!   current n-gram in the sequence's own history (prompt and reply), for edits, refactors and
//!   quotes, where most tokens are copies; no second model.
//! - [`DraftModel`] (`draft-simple`, `-md`): a small model with the same vocabulary proposes
//!   greedily while its top probability (among its 10 best, as llama.cpp's draft sampler)
//!   stays at least `p_min`, up to `n_max` tokens; fewer than `n_min` are dropped.
//!
//! Verification is llama.cpp's `common_sampler_sample_and_accept_n`
//! ([`Generator::speculate`](crate::Generator::speculate)): the model's sampler chain samples
//! at every position of the batch (the last sampled token, then the proposals) and the
//! proposals are kept up to the first one it did not sample, whose place takes the token it
//! sampled. Each kept token is thus drawn exactly as plain decoding would draw it (same
//! chain, same random stream), so the output's distribution is the model's; where the
//! batch's logits equal one-token steps' (`ContextParams::batch_invariant`), the tokens are
//! plain decoding's, greedy or seeded. The rejected proposals' cells are removed (`seq_rm`).

mod draft_model;
mod ngram;

pub use draft_model::{check_vocabs, DraftModel};
pub use ngram::NgramSimple;

use crate::sampling::TokenMask;
use crate::{Generator, Result};

/// Counts of a speculative run, as llama.cpp reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpecStats {
    /// Verification steps that had proposals.
    pub n_steps: usize,
    /// Tokens proposed.
    pub n_drafted: usize,
    /// Proposals the model kept.
    pub n_accepted: usize,
}

impl SpecStats {
    /// Kept proposals over proposals (0 when none were made).
    pub fn acceptance(&self) -> f64 {
        if self.n_drafted == 0 {
            0.0
        } else {
            self.n_accepted as f64 / self.n_drafted as f64
        }
    }
}

/// A source of proposals.
pub enum Speculator<'m> {
    /// llama.cpp's `ngram-simple`.
    Ngram(NgramSimple),
    /// llama.cpp's `draft-simple`: a draft model.
    Draft(Box<DraftModel<'m>>),
}

impl Speculator<'_> {
    /// Up to `n_max` tokens proposed to follow `history` (the tokens in the model's cache, in
    /// order) and `last` (sampled, not yet evaluated).
    pub fn draft(&mut self, history: &[u32], last: u32, n_max: usize) -> Result<Vec<u32>> {
        match self {
            Speculator::Ngram(n) => {
                let mut d = n.draft(history, last);
                d.truncate(n_max);
                Ok(d)
            }
            Speculator::Draft(m) => m.draft(history, last, n_max),
        }
    }

    /// llama.cpp's name of the source.
    pub fn name(&self) -> &'static str {
        match self {
            Speculator::Ngram(_) => "ngram-simple",
            Speculator::Draft(_) => "draft-simple",
        }
    }
}

/// One decoding step of `g` with speculation, for a caller's generation loop: `tok` (sampled,
/// not yet evaluated) follows `history` (the tokens in `g`'s cache, in order). With proposals
/// from `spec` (at most `n_max`), they are verified with `tok` in one batch
/// ([`Generator::speculate_masked`]) and counted into `stats`, and the kept proposals come
/// back followed by the token sampled after them (not evaluated: the next `tok`); with none
/// (no `spec`, `n_max` 0, or nothing proposed), `tok` is evaluated alone and `None` comes back
/// (sample the next token). The inner error is `mask`'s.
pub fn step<M: TokenMask>(
    spec: Option<&mut Speculator<'_>>,
    g: &mut Generator<'_, '_>,
    history: &[u32],
    tok: u32,
    n_max: usize,
    mask: Option<&mut M>,
    stats: &mut SpecStats,
) -> Result<Result<Option<Vec<u32>>, M::Error>> {
    let draft = match spec {
        Some(s) if n_max > 0 => s.draft(history, tok, n_max)?,
        _ => Vec::new(),
    };
    if draft.is_empty() {
        g.feed(tok)?;
        return Ok(Ok(None));
    }
    let got = match g.speculate_masked(tok, &draft, mask)? {
        Ok(got) => got,
        Err(e) => return Ok(Err(e)),
    };
    stats.n_steps += 1;
    stats.n_drafted += draft.len();
    stats.n_accepted += got.len() - 1;
    Ok(Ok(Some(got)))
}
