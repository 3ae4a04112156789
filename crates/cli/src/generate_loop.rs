//! One-shot generation's loop (`tessera run` without a conversation): sample, print, evaluate,
//! with llama.cpp's context shift and speculative decoding where asked for.

use crate::common::Streamer;
use anyhow::{anyhow, bail, Result};
use tessera_llama::speculative::{self, SpecStats, Speculator};
use tessera_llama::{Generator, Vocab};
use tessera_server::chat::constrain::{GrammarMask, Matcher};

/// What bounds the loop.
pub struct Limits {
    /// Most tokens to generate.
    pub n_predict: usize,
    /// The context's cells.
    pub n_ctx: usize,
    /// With `--context-shift`: the tokens a shift keeps.
    pub shift_keep: Option<usize>,
    /// `--keep` as given (for the error that says it keeps everything).
    pub keep_arg: i64,
}

/// What the loop did.
#[derive(Default)]
pub struct Outcome {
    /// Tokens generated.
    pub n_gen: usize,
    /// Context shifts.
    pub n_shifts: usize,
    /// Speculation's counts.
    pub spec: SpecStats,
}

/// Generates after the evaluated prompt `history` (the tokens in the sequence's cache),
/// printing each token to `out` until an end-of-generation token, the limit or a full
/// context.
pub fn generate(
    generator: &mut Generator,
    vocab: &Vocab,
    out: &mut Streamer,
    matcher: Option<&mut Matcher>,
    mut spec: Option<&mut Speculator>,
    mut history: Vec<u32>,
    lim: &Limits,
) -> Result<Outcome> {
    let mut o = Outcome::default();
    let mut mask = matcher.map(|matcher| GrammarMask { matcher, vocab });
    let grammar = |e| anyhow!("grammar: {e}");
    let mut next: Option<u32> = None;
    while o.n_gen < lim.n_predict && generator.pos() < lim.n_ctx {
        let tok = match (next.take(), mask.as_mut()) {
            (Some(t), _) => t,
            (None, None) => generator.sample(),
            (None, Some(m)) => generator.sample_masked(m).map_err(grammar)?,
        };
        if out.push_token(vocab, tok) {
            break;
        }
        o.n_gen += 1;
        if let Some(keep) = lim.shift_keep.filter(|_| generator.pos() + 1 >= lim.n_ctx) {
            // As llama.cpp: the token that would fill the last cell first shifts the context.
            let n = generator.shift(keep);
            if n == 0 {
                out.finish();
                bail!(
                    "the context is full and --keep {} keeps all {} of its tokens: nothing to \
                     drop (a smaller --keep, or a larger -c)",
                    lim.keep_arg,
                    generator.pos()
                );
            }
            history.drain(keep..keep + n);
            o.n_shifts += 1;
        }
        // Proposals, within the limit and the context (the batch holds `tok` too).
        let room = lim.n_ctx.saturating_sub(generator.pos() + 2);
        let n_max = (lim.n_predict - o.n_gen).min(room);
        let step = speculative::step(
            spec.as_deref_mut(),
            generator,
            &history,
            tok,
            n_max,
            mask.as_mut(),
            &mut o.spec,
        );
        history.push(tok);
        let Some(got) = step.map_err(|e| anyhow!("{e}"))?.map_err(grammar)? else { continue };
        let kept = &got[..got.len() - 1];
        history.extend_from_slice(kept);
        for &t in kept {
            if out.push_token(vocab, t) {
                return Ok(o);
            }
            o.n_gen += 1;
            if o.n_gen >= lim.n_predict {
                return Ok(o);
            }
        }
        next = got.last().copied();
    }
    Ok(o)
}
