//! One sequence's sampling step, the one both [`crate::Generator`] (`tessera run`) and the
//! server's slots take: the logits with the banned tokens set to −∞ and an optional mask
//! applied (a grammar's: [`TokenMask`]), then a forced token if one is queued (the forced end
//! of a reasoning budget) or the chain's draw, then the token into the chain's history (the
//! penalties see it) and into the mask (the grammar advances).
//!
//! The chain itself is borrowed or owned ([`SeqSampler<C>`] with `C` a [`SamplerChain`] or a
//! `&mut` one), so a conversation can keep one chain, and its history, across turns.

use super::SamplerChain;
use std::borrow::BorrowMut;
use std::collections::VecDeque;
use std::convert::Infallible;

/// Which tokens may come next (a grammar), and the token that came. Masked tokens get −∞.
pub trait TokenMask {
    /// Why the mask cannot go on (the grammar failed).
    type Error;
    /// Sets the logits of the tokens that may not come next to −∞.
    fn mask(&mut self, logits: &mut [f32]) -> Result<(), Self::Error>;
    /// Advances past `token`, which was chosen.
    fn accept(&mut self, token: u32) -> Result<(), Self::Error>;
}

/// No mask: every token may come.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoMask;

impl TokenMask for NoMask {
    type Error = Infallible;
    fn mask(&mut self, _: &mut [f32]) -> Result<(), Infallible> {
        Ok(())
    }
    fn accept(&mut self, _: u32) -> Result<(), Infallible> {
        Ok(())
    }
}

/// A chosen token and the logits it was chosen from (bans and mask applied: what
/// log-probabilities are reported over).
#[derive(Debug, Clone, Copy)]
pub struct Sampled<'s> {
    /// The token.
    pub token: u32,
    /// It was forced ([`SeqSampler::force`]), not drawn.
    pub forced: bool,
    /// The logits after the bans and the mask.
    pub logits: &'s [f32],
}

/// One sequence's sampler: the chain, the tokens never sampled, the tokens to force next
/// (module docs).
pub struct SeqSampler<C = SamplerChain> {
    chain: C,
    banned: Vec<u32>,
    forced: VecDeque<u32>,
    /// The edited logits, reused from step to step.
    scratch: Vec<f32>,
}

impl<C: BorrowMut<SamplerChain>> SeqSampler<C> {
    /// A step over `chain`, nothing banned or forced.
    pub fn new(chain: C) -> Self {
        SeqSampler { chain, banned: Vec::new(), forced: VecDeque::new(), scratch: Vec::new() }
    }

    /// Never samples `tokens` (llama.cpp's `--ignore-eos` bans the end-of-generation tokens).
    pub fn ban(&mut self, tokens: impl IntoIterator<Item = u32>) {
        self.banned.extend(tokens);
    }

    /// Adds `tokens` to the chain's history without sampling (a prompt: llama.cpp's penalties
    /// see the prompt).
    pub fn history(&mut self, tokens: &[u32]) {
        let chain = self.chain.borrow_mut();
        for &t in tokens {
            chain.accept(t);
        }
    }

    /// Queues `tokens` to be taken, in order, instead of drawing.
    pub fn force(&mut self, tokens: impl IntoIterator<Item = u32>) {
        self.forced.extend(tokens);
    }

    /// The chain.
    pub fn chain(&self) -> &SamplerChain {
        self.chain.borrow()
    }

    /// Takes the step without a mask.
    pub fn sample<'s>(&'s mut self, logits: &'s [f32]) -> Sampled<'s> {
        match self.sample_masked::<NoMask>(logits, None) {
            Ok(s) => s,
            Err(never) => match never {},
        }
    }

    /// Takes `argmax`, the step's logits' argmax computed elsewhere (a context's argmax
    /// outputs), as the step's token where [`sample`](Self::sample) would have chosen it: a
    /// forced token first, else with nothing banned and a chain that is a plain argmax. `None`,
    /// changing nothing, where the step needs the logits themselves.
    pub fn take_argmax(&mut self, argmax: u32) -> Option<u32> {
        let chain = self.chain.borrow_mut();
        let token = match self.forced.pop_front() {
            Some(t) => t,
            None if self.banned.is_empty() && chain.is_argmax_only() => argmax,
            None => return None,
        };
        chain.accept(token);
        Some(token)
    }

    /// Takes the step over `logits`, masked by `mask` if given (module docs); the mask's
    /// error stops it before a token is chosen, or after the chain took it.
    pub fn sample_masked<'s, M: TokenMask>(
        &'s mut self,
        logits: &'s [f32],
        mut mask: Option<&mut M>,
    ) -> Result<Sampled<'s>, M::Error> {
        let SeqSampler { chain, banned, forced, scratch } = self;
        let edited = !banned.is_empty() || mask.is_some();
        if edited {
            scratch.clear();
            scratch.extend_from_slice(logits);
            for &t in banned.iter() {
                if let Some(v) = scratch.get_mut(t as usize) {
                    *v = f32::NEG_INFINITY;
                }
            }
            if let Some(m) = mask.as_deref_mut() {
                m.mask(scratch)?;
            }
        }
        let view: &'s [f32] = if edited { scratch } else { logits };
        let chain = chain.borrow_mut();
        let (token, was_forced) = match forced.pop_front() {
            Some(t) => (t, true),
            None => (chain.sample(view), false),
        };
        chain.accept(token);
        if let Some(m) = mask {
            m.accept(token)?;
        }
        Ok(Sampled { token, forced: was_forced, logits: view })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mask allowing only the even tokens, failing once told to accept `fail_at`.
    struct Even {
        seen: Vec<u32>,
        fail_at: u32,
    }

    impl TokenMask for Even {
        type Error = String;
        fn mask(&mut self, logits: &mut [f32]) -> Result<(), String> {
            for (i, l) in logits.iter_mut().enumerate() {
                if i % 2 == 1 {
                    *l = f32::NEG_INFINITY;
                }
            }
            Ok(())
        }
        fn accept(&mut self, token: u32) -> Result<(), String> {
            self.seen.push(token);
            if token == self.fail_at {
                return Err(format!("no rule takes {token}"));
            }
            Ok(())
        }
    }

    #[test]
    fn bans_mask_and_forced_tokens() {
        let logits = [0.0f32, 5.0, 1.0, 4.0, 2.0];
        let mut s = SeqSampler::new(SamplerChain::greedy());
        assert_eq!(s.sample(&logits).token, 1);
        s.ban([1]);
        let got = s.sample(&logits);
        assert_eq!(got.token, 3);
        assert_eq!(got.logits[1], f32::NEG_INFINITY);
        let mut even = Even { seen: Vec::new(), fail_at: 99 };
        assert_eq!(s.sample_masked(&logits, Some(&mut even)).unwrap().token, 4);
        s.force([2, 0]);
        let got = s.sample_masked(&logits, Some(&mut even)).unwrap();
        assert!(got.forced && got.token == 2);
        assert_eq!(s.sample(&logits).token, 0);
        assert!(!s.sample(&logits).forced);
        assert_eq!(even.seen, vec![4, 2]);
        let mut failing = Even { seen: Vec::new(), fail_at: 4 };
        assert_eq!(s.sample_masked(&logits, Some(&mut failing)).unwrap_err(), "no rule takes 4");
    }

    /// An argmax computed elsewhere is taken only where `sample` would take it: a greedy
    /// chain with nothing banned; a forced token still comes first; otherwise `None`.
    #[test]
    fn an_outside_argmax_only_for_a_plain_greedy_step() {
        use crate::sampling::{Penalties, SamplerChain};
        let mut s = SeqSampler::new(SamplerChain::greedy());
        assert_eq!(s.take_argmax(7), Some(7));
        s.force([3]);
        assert_eq!(s.take_argmax(7), Some(3), "the forced token first");
        assert_eq!(s.take_argmax(7), Some(7));
        s.ban([9]);
        assert_eq!(s.take_argmax(7), None, "bans need the logits");
        let mut p = SeqSampler::new(SamplerChain::new().push(Penalties::new(64, 1.0, 0.0, 10.0)));
        assert_eq!(p.take_argmax(7), None, "another chain needs the logits");
    }

    #[test]
    fn history_reaches_the_penalties() {
        use crate::sampling::{Penalties, SamplerChain};
        // A presence penalty large enough to move the argmax off a token seen before.
        let chain = || SamplerChain::new().push(Penalties::new(64, 1.0, 0.0, 10.0));
        let logits = [3.0f32, 2.0, 1.0];
        let mut fresh = SeqSampler::new(chain());
        assert_eq!(fresh.sample(&logits).token, 0);
        let mut c = chain();
        let mut seen = SeqSampler::new(&mut c);
        seen.history(&[0]);
        assert_eq!(seen.sample(&logits).token, 1);
    }
}
