//! What the engine is sent and what it answers: a generation [`Job`] and the [`Event`]s that
//! stream back, llama-server's [`Timings`], and what `GET /slots` shows of a slot.

use crate::error::ApiError;
use tessera_llama::sampling::SamplerChain;
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::oneshot;

/// One token's log-probability and the most likely alternatives.
#[derive(Debug, Clone)]
pub struct Logprob {
    /// The token's text.
    pub token: String,
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// Natural log of its probability under the model.
    pub logprob: f32,
    /// The `n` most likely tokens: (text, bytes, logprob).
    pub top: Vec<(String, Vec<u8>, f32)>,
}

/// What a request hears back.
#[derive(Debug, Clone)]
pub enum Event {
    /// A token was generated; `text` is what may be shown now (held back while it could be
    /// the start of a stop string, or an incomplete character).
    Token {
        /// Text to append.
        text: String,
        /// Log-probabilities, when asked for.
        logprob: Option<Logprob>,
    },
    /// Finished.
    Done(Finished),
    /// Failed.
    Failed(ApiError),
}

/// How a request ended: what [`Event::Done`] carries.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    /// `stop` or `length`.
    pub finish_reason: &'static str,
    /// Tokens in the prompt.
    pub prompt_tokens: usize,
    /// Of those, how many came from the slot's cache.
    pub cached_tokens: usize,
    /// Tokens generated.
    pub completion_tokens: usize,
    /// llama-server's `timings`.
    pub timings: Timings,
    /// The stop string that ended the reply (`finish_reason` is then `stop`).
    pub stop_word: Option<String>,
}

/// How long a request took, llama-server's `timings` object.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Timings {
    /// Prompt tokens reused from the slot's cache.
    pub cache_n: usize,
    /// Prompt tokens evaluated.
    pub prompt_n: usize,
    /// Milliseconds from the slot taking the request to the first sampled token.
    pub prompt_ms: f64,
    /// Tokens generated.
    pub predicted_n: usize,
    /// Milliseconds from the first sampled token to the end.
    pub predicted_ms: f64,
    /// Tokens proposed by speculation.
    pub draft_n: usize,
    /// Proposals kept.
    pub draft_n_accepted: usize,
}

impl Timings {
    /// The JSON object llama-server puts in its replies.
    pub fn json(&self) -> serde_json::Value {
        let per_tok = |ms: f64, n: usize| if n > 0 { ms / n as f64 } else { 0.0 };
        let per_sec = |ms: f64, n: usize| if ms > 0.0 { n as f64 * 1e3 / ms } else { 0.0 };
        let mut t = serde_json::json!({
            "cache_n": self.cache_n,
            "prompt_n": self.prompt_n,
            "prompt_ms": self.prompt_ms,
            "prompt_per_token_ms": per_tok(self.prompt_ms, self.prompt_n),
            "prompt_per_second": per_sec(self.prompt_ms, self.prompt_n),
            "predicted_n": self.predicted_n,
            "predicted_ms": self.predicted_ms,
            "predicted_per_token_ms": per_tok(self.predicted_ms, self.predicted_n),
            "predicted_per_second": per_sec(self.predicted_ms, self.predicted_n),
        });
        // As llama-server: present once something was proposed.
        if self.draft_n > 0 {
            t["draft_n"] = self.draft_n.into();
            t["draft_n_accepted"] = self.draft_n_accepted.into();
        }
        t
    }
}

/// What `GET /slots` shows of one slot.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SlotInfo {
    /// The slot's index (its KV sequence).
    pub id: usize,
    /// Serving a request now.
    pub is_processing: bool,
    /// Tokens whose K/V the cache holds for this slot.
    pub n_cached: usize,
    /// The current (or last) request's prompt tokens.
    pub n_prompt: usize,
    /// Tokens the current (or last) request has generated.
    pub n_decoded: usize,
}

/// A request for the engine.
pub struct Job {
    /// Prompt tokens (at least one, fewer than a slot's context).
    pub prompt: Vec<u32>,
    /// Most tokens to generate.
    pub max_tokens: Option<usize>,
    /// The request's sampler chain (its logit bias first, its seed drawn).
    pub sampler: SamplerChain,
    /// Reuse the slot's cached prefix of the prompt (llama-server's `cache_prompt`).
    pub cache_prompt: bool,
    /// Stop strings.
    pub stop: Vec<String>,
    /// Log-probabilities (top `n`).
    pub logprobs: Option<usize>,
    /// Where events go; dropped receiver = client gone.
    pub events: UnboundedSender<Event>,
    /// Structured output: tokens the grammar forbids are masked before sampling.
    pub matcher: Option<llguidance::Matcher>,
    /// Never sample end-of-generation tokens (llama-server's `ignore_eos`).
    pub ignore_eos: bool,
    /// The reasoning budget: the end of thinking is forced once it is spent.
    pub think_budget: Option<crate::engine::ThinkBudget>,
    /// Special tokens the reply shows as text (a harmony template's markers,
    /// [`crate::chat::harmony::PRESERVED`]); others stay hidden.
    pub preserved: Vec<u32>,
    /// The scale of each LoRA adapter (the server's, in id order; empty without adapters).
    pub lora: crate::engine::LoraScales,
    /// Prompt tokens a context shift keeps after the BOS (-1: the whole prompt).
    pub n_keep: i64,
    /// Tokens a context shift drops (0: half of those after the kept ones).
    pub n_discard: usize,
    /// The request's speculation settings (`speculative.*`).
    pub spec: crate::engine::SpecRequest,
    /// The prompt's images (their positions hold placeholder ids, [`crate::vision`]).
    pub images: crate::vision::Images,
}

/// What the engine thread is sent: a generation, or inputs to embed (`--embedding`).
pub enum Work {
    /// Generate a reply.
    Generate(Box<Job>),
    /// Embed inputs.
    Embed(EmbedJob),
}

impl Work {
    /// Answers the work with `e` instead of doing it.
    pub fn fail(self, e: ApiError) {
        match self {
            Work::Generate(job) => {
                let _ = job.events.send(Event::Failed(e));
            }
            Work::Embed(job) => {
                let _ = job.reply.send(Err(e));
            }
        }
    }
}

/// Inputs to embed, and where the vectors go.
pub struct EmbedJob {
    /// Token ids of each input (each non-empty, within the context).
    pub inputs: Vec<Vec<u32>>,
    /// One pooled, unnormalized vector per input (with pooling `none`, every token's row
    /// back to back), or the failure.
    pub reply: oneshot::Sender<Result<Vec<Vec<f32>>, ApiError>>,
}
