//! `tessera run -cnv`: a conversation in the terminal, as llama-cli's conversation mode.
//!
//! Each turn renders the whole conversation through the model's chat template and evaluates
//! only the text past what the KV cache already holds: the cache keeps the history, so a turn
//! costs its own tokens (plus the end-of-turn marker of the previous reply), not the whole
//! chat again. What the cache holds is tracked as text (`in_cache`), a prefix of every later
//! rendering; where a template rewrites earlier turns (some trim replies), the turn falls back
//! to tokenizing the whole rendering and keeping the longest common run of cached tokens
//! (llama-server's prompt cache), dropping the cells after it.
//!
//! Ctrl-C while a reply streams stops that reply and keeps the session (the partial reply stays
//! in the history, as llama-cli keeps it); Ctrl-C at the prompt, Ctrl-D or `/exit` ends it.
//! `/clear` starts over, `/regen` asks for the last reply again, `/help` lists the commands;
//! with `--mmproj`, `/image FILE` adds an image to the next message (as llama-mtmd-cli).
//! On a terminal the prompt has line editing and history (rustyline: arrows, Ctrl-R);
//! from a pipe, lines are read as they are.

use crate::common::Streamer;
use anyhow::{anyhow, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;
use tessera_llama::sampling::SamplerChain;
use tessera_llama::speculative;
use tessera_llama::{Generator, LlamaContext, Model};
use tessera_server::chat::constrain::GrammarMask;

mod repl;
pub use repl::run;

/// Set while a reply is being generated: Ctrl-C then only stops the reply.
static GENERATING: AtomicBool = AtomicBool::new(false);
/// Set by Ctrl-C during a reply; the generation loop checks it every token.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Installs the Ctrl-C handler: during a reply it stops the reply, otherwise it ends the
/// program (as at llama-cli's prompt).
fn install_interrupt_handler() -> Result<()> {
    ctrlc::set_handler(|| {
        if GENERATING.load(Ordering::SeqCst) {
            INTERRUPTED.store(true, Ordering::SeqCst);
        } else {
            eprintln!();
            std::process::exit(130);
        }
    })
    .map_err(|e| anyhow!("installing the Ctrl-C handler: {e}"))
}

/// The state of one conversation.
pub struct Conversation<'m> {
    model: &'m Model,
    ctx: LlamaContext<'m>,
    template: String,
    messages: Vec<(String, String)>,
    /// The rendered conversation text the KV cache holds (a prefix of the next rendering).
    in_cache: String,
    /// Tokens in the KV cache (positions 0..n_past).
    n_past: usize,
    /// Those tokens.
    cached: Vec<u32>,
    /// Tokens a reply may have at most (-1 in llama-cli: until end of generation).
    n_predict: usize,
    /// A grammar every reply follows (`--grammar`, `--json-schema`): a fresh matcher per reply,
    /// as llama-cli resets its grammar each turn.
    grammar: Option<crate::grammar_args::Compiled>,
    /// `--context-shift` with its `--keep`: a full context drops the oldest turns' tokens
    /// after the kept ones instead of ending the conversation.
    shift_keep: Option<i64>,
    /// Whether the cache lost tokens to a shift (its tokens are no longer a rendering's).
    shifted: bool,
    /// Speculative decoding's proposals (`--spec-type`, `-md`), if asked for.
    spec: Option<tessera_llama::speculative::Speculator<'m>>,
    /// The projector (`--mmproj`) and the images (`--image`, `/image`) waiting for the next
    /// message.
    vision: Option<crate::mtmd_args::Vision>,
    /// Whether images are in the cache (their turns cannot be rendered again).
    has_media: bool,
}

/// What one turn did, for the line printed after the reply.
pub struct TurnStats {
    /// Prompt tokens evaluated for this turn (only the new ones).
    pub n_eval: usize,
    /// Tokens generated.
    pub n_gen: usize,
    /// Generation speed.
    pub tokens_per_s: f64,
    /// Whether Ctrl-C cut the reply.
    pub interrupted: bool,
    /// Whether the context filled up during the reply.
    pub context_full: bool,
    /// Context shifts during the turn.
    pub n_shifts: usize,
    /// Speculation's counts during the turn.
    pub spec: tessera_llama::speculative::SpecStats,
}

impl<'m> Conversation<'m> {
    /// A new conversation on `ctx` (empty KV cache); `system` becomes the first message.
    pub fn new(
        model: &'m Model,
        ctx: LlamaContext<'m>,
        system: Option<&str>,
        n_predict: usize,
    ) -> Result<Self> {
        let template = model
            .chat_template
            .clone()
            .ok_or_else(|| anyhow!("the model has no chat template (tokenizer.chat_template)"))?;
        let messages =
            system.map(|s| vec![("system".to_string(), s.to_string())]).unwrap_or_default();
        Ok(Conversation {
            model,
            ctx,
            template,
            messages,
            in_cache: String::new(),
            n_past: 0,
            cached: Vec::new(),
            n_predict,
            grammar: None,
            shift_keep: None,
            shifted: false,
            spec: None,
            vision: None,
            has_media: false,
        })
    }

    /// Images come in through `vision` (`--mmproj`; its `--image` files go with the first
    /// message).
    pub fn with_vision(mut self, vision: Option<crate::mtmd_args::Vision>) -> Self {
        self.vision = vision;
        self
    }

    /// Queues an image for the next message (`/image FILE`); returns its size.
    pub fn add_image(&mut self, path: &std::path::Path) -> Result<(usize, usize)> {
        match self.vision.as_mut() {
            Some(v) => v.push_image(path),
            None => Err(anyhow!("/image needs the model's projector: start with --mmproj FILE")),
        }
    }

    /// Whether images are in the cache.
    pub fn has_media(&self) -> bool {
        self.has_media
    }

    /// Replies are decoded speculatively with `spec`'s proposals.
    pub fn with_speculator(
        mut self,
        spec: Option<tessera_llama::speculative::Speculator<'m>>,
    ) -> Self {
        self.spec = spec;
        self
    }

    /// With `--context-shift`: when the context is full, the first tokens (`keep` of the
    /// system prompt after the BOS, -1 all of it) stay and half of the rest is dropped, as
    /// llama.cpp's conversation does, so the conversation goes on.
    pub fn with_context_shift(mut self, keep: Option<i64>) -> Self {
        self.shift_keep = keep;
        self
    }

    /// Tokens a shift keeps: `--keep N` of the system prompt's tokens (after the BOS), all of
    /// them for -1 or more than it has.
    fn n_keep(&self, keep: i64) -> usize {
        let add_bos = usize::from(self.model.vocab.add_bos());
        let system: Vec<(&str, &str)> = self
            .messages
            .iter()
            .take_while(|(r, _)| r == "system")
            .map(|(r, c)| (r.as_str(), c.as_str()))
            .collect();
        let n_system = match system.is_empty() {
            true => add_bos,
            false => tessera_llama::chat::apply(&self.template, &system, false, &self.model.vocab)
                .map_or(add_bos, |t| self.model.vocab.tokenize(&t, true, true).len()),
        };
        match usize::try_from(keep) {
            Ok(k) if k + add_bos <= n_system => k + add_bos,
            _ => n_system,
        }
    }

    /// Every reply follows `grammar`.
    pub fn with_grammar(mut self, grammar: Option<crate::grammar_args::Compiled>) -> Self {
        self.grammar = grammar;
        self
    }

    fn render(&self, add_generation_prompt: bool) -> Result<String> {
        let msgs: Vec<(&str, &str)> =
            self.messages.iter().map(|(r, c)| (r.as_str(), c.as_str())).collect();
        tessera_llama::chat::apply(&self.template, &msgs, add_generation_prompt, &self.model.vocab)
            .map_err(|e| anyhow!("{e}"))
    }

    /// Tokens of the KV cache in use.
    pub fn n_past(&self) -> usize {
        self.n_past
    }

    /// Context size.
    pub fn n_ctx(&self) -> usize {
        self.ctx.params().n_ctx
    }

    /// Forgets every turn (the system prompt stays) and empties the KV cache.
    pub fn clear(&mut self) {
        self.shifted = false;
        self.messages.retain(|(r, _)| r == "system");
        self.has_media = false;
        self.ctx.kv_cache_mut().seq_rm(None, 0, -1);
        self.cached.clear();
        self.n_past = 0;
        self.in_cache.clear();
    }

    /// Drops the last reply and its question; returns the question, to ask again (`None`
    /// before the first reply).
    pub fn take_last_turn(&mut self) -> Option<String> {
        let n = self.messages.len();
        if n < 2 || self.messages[n - 1].0 != "assistant" || self.messages[n - 2].0 != "user" {
            return None;
        }
        self.messages.pop();
        let (_, question) = self.messages.pop()?;
        // The next rendering is no longer an extension of the cached text: the turn keeps
        // the longest common run of cached tokens (the history before the question).
        self.in_cache.clear();
        Some(question)
    }

    /// One turn: the user's `text`, the reply streamed to `out` token by token.
    pub fn turn(
        &mut self,
        text: &str,
        sampler: &mut SamplerChain,
        out: &mut Streamer,
    ) -> Result<TurnStats> {
        // Waiting images take markers before the text, as llama-mtmd-cli puts them.
        let text = match self.vision.as_ref().filter(|v| v.has_images()) {
            Some(v) => v.with_markers(text),
            None => text.to_string(),
        };
        self.messages.push(("user".into(), text));
        // From here on Ctrl-C stops this turn (during the prompt too), not the program.
        INTERRUPTED.store(false, Ordering::SeqCst);
        GENERATING.store(true, Ordering::SeqCst);
        let result = self.turn_inner(sampler, out);
        GENERATING.store(false, Ordering::SeqCst);
        result
    }

    fn turn_inner(&mut self, sampler: &mut SamplerChain, out: &mut Streamer) -> Result<TurnStats> {
        let full = match self.render(true) {
            Ok(f) => f,
            Err(e) => {
                self.messages.pop();
                return Err(e);
            }
        };
        // An empty `in_cache` over a used cache means the history was rewritten (/regen).
        let extends = self.n_past == 0 || !self.in_cache.is_empty();
        let mut n_media = 0;
        let tokens = if extends && full.starts_with(&self.in_cache) {
            let delta = &full[self.in_cache.len()..];
            match self.vision.as_mut().filter(|v| v.has_images()) {
                // The images and the text before the last one evaluated here.
                Some(v) => {
                    let first = self.n_past == 0;
                    let e = match v.eval(
                        &mut self.ctx,
                        self.model,
                        delta,
                        self.n_past,
                        first,
                        &mut |_| {},
                    ) {
                        Ok(e) => e,
                        Err(err) => {
                            self.messages.pop();
                            return Err(err);
                        }
                    };
                    n_media = e.n_past - self.n_past;
                    self.n_past = e.n_past;
                    self.cached.extend_from_slice(&e.cached);
                    self.has_media = true;
                    e.last
                }
                None => self.model.vocab.tokenize(delta, self.n_past == 0, true),
            }
        } else if self.has_media {
            self.messages.pop();
            return Err(anyhow!(
                "earlier turns hold images and the history would have to be rendered again \
                 (/regen, or a template that rewrites earlier turns); /clear starts over"
            ));
        } else if self.shifted {
            self.messages.pop();
            return Err(anyhow!(
                "the turns before the last context shift are gone from the cache, so the \
                 history cannot be rendered again (/regen, or a template that rewrites earlier \
                 turns); /clear starts over"
            ));
        } else {
            // The template renders the history differently from what the cache holds (some
            // trim replies): keep the longest common run of tokens, drop the cells after it.
            let all = self.model.vocab.tokenize(&full, true, true);
            let mut keep = all.iter().zip(&self.cached).take_while(|(a, b)| a == b).count();
            keep = keep.min(all.len().saturating_sub(1));
            self.ctx.kv_cache_mut().seq_rm(Some(0), keep as i32, -1);
            self.cached.truncate(keep);
            self.n_past = keep;
            all[keep..].to_vec()
        };
        let n_ctx = self.n_ctx();
        let n_keep = self.shift_keep.map(|k| self.n_keep(k));
        let model = self.model;
        let mut generator = Generator::new(&mut self.ctx, sampler, 0, self.n_past);
        let mut n_shifts = 0;
        // Room for the turn's prompt: shifted out of older turns where allowed.
        while let Some(keep) = n_keep.filter(|_| generator.pos() + tokens.len() >= n_ctx) {
            let n = generator.shift(keep);
            if n == 0 {
                break;
            }
            self.cached.drain(keep..keep + n);
            self.shifted = true;
            n_shifts += 1;
        }
        self.n_past = generator.pos();
        if self.n_past + tokens.len() >= n_ctx {
            self.messages.pop();
            return Err(anyhow!(
                "the context is full: this turn needs {} tokens and {} of {n_ctx} are used; \
                 /exit and start again with a larger context (-c)",
                tokens.len(),
                self.n_past
            ));
        }
        if tokens.is_empty() {
            self.messages.pop();
            return Err(anyhow!("nothing to evaluate: the template rendered no new text"));
        }
        let mut matcher = self.grammar.as_ref().map(|g| g.matcher()).transpose()?;
        let mut mask = matcher.as_mut().map(|matcher| GrammarMask { matcher, vocab: &model.vocab });
        generator.prompt(&tokens).map_err(|e| anyhow!("{e}"))?;
        self.cached.extend_from_slice(&tokens);
        self.in_cache = full;

        let t0 = Instant::now();
        let mut reply: Vec<u8> = Vec::new();
        let mut n_gen = 0;
        let mut context_full = false;
        let mut interrupted = false;
        let mut spec = speculative::SpecStats::default();
        // A token sampled by a verification step, not yet evaluated.
        let mut pending: Option<u32> = None;
        let result = loop {
            if INTERRUPTED.load(Ordering::SeqCst) {
                interrupted = true;
                break Ok(());
            }
            if n_gen >= self.n_predict {
                break Ok(());
            }
            if generator.pos() >= n_ctx {
                context_full = true;
                break Ok(());
            }
            let tok = match (pending.take(), mask.as_mut()) {
                (Some(t), _) => t,
                (None, None) => generator.sample(),
                (None, Some(m)) => match generator.sample_masked(m) {
                    Ok(t) => t,
                    Err(e) => break Err(anyhow!("grammar: {e}")),
                },
            };
            if model.vocab.is_eog(tok) {
                break Ok(());
            }
            let piece = model.vocab.token_to_piece(tok, false);
            out.push(&piece);
            reply.extend_from_slice(&piece);
            n_gen += 1;
            if let Some(keep) = n_keep.filter(|_| generator.pos() + 1 >= n_ctx) {
                // As llama.cpp: the token that would fill the last cell first shifts.
                let n = generator.shift(keep);
                if n == 0 {
                    context_full = true;
                    break Ok(());
                }
                self.cached.drain(keep..keep + n);
                self.shifted = true;
                n_shifts += 1;
            }
            // Speculation: proposals within the reply's budget and the context.
            let room = n_ctx.saturating_sub(generator.pos() + 2);
            let n_max = (self.n_predict - n_gen).min(room);
            let start = generator.pos();
            let step = speculative::step(
                self.spec.as_mut(),
                &mut generator,
                &self.cached,
                tok,
                n_max,
                mask.as_mut(),
                &mut spec,
            );
            self.cached.push(tok);
            let got = match step {
                Ok(Ok(Some(got))) => got,
                Ok(Ok(None)) => continue,
                Ok(Err(e)) => break Err(anyhow!("grammar: {e}")),
                Err(e) => break Err(anyhow!("{e}")),
            };
            let kept = &got[..got.len() - 1];
            let mut stop = false;
            for (k, &t) in kept.iter().enumerate() {
                let over = n_gen >= self.n_predict || INTERRUPTED.load(Ordering::SeqCst);
                if over || model.vocab.is_eog(t) {
                    // The reply ends here: the cells from this token on are not its.
                    generator.rewind(start + 1 + k);
                    interrupted |= INTERRUPTED.load(Ordering::SeqCst);
                    stop = true;
                    break;
                }
                let piece = model.vocab.token_to_piece(t, false);
                out.push(&piece);
                reply.extend_from_slice(&piece);
                n_gen += 1;
                self.cached.push(t);
            }
            if stop {
                break Ok(());
            }
            pending = got.last().copied();
        };
        // The generator kept the position: the prompt and every token fed back.
        self.n_past = generator.pos();
        out.finish();
        let elapsed = t0.elapsed().as_secs_f64();
        result?;

        // The reply joins the history; the cache holds its text up to where generation stopped
        // (the end-of-turn marker is evaluated with the next turn).
        let reply = String::from_utf8_lossy(&reply).into_owned();
        self.in_cache.push_str(&reply);
        self.messages.push(("assistant".into(), reply));
        Ok(TurnStats {
            n_eval: n_media + tokens.len(),
            n_gen,
            tokens_per_s: if elapsed > 0.0 { n_gen as f64 / elapsed } else { 0.0 },
            interrupted,
            context_full,
            n_shifts,
            spec,
        })
    }
}
