//! Speculative decoding per slot (llama-server's): a generating slot's next token joins the
//! step's batch with the tokens proposed after it, each with logits; after the step the slot
//! samples row by row ([`Worker::advance`](super::worker::Worker)) and keeps the proposals it
//! sampled itself, the rejected ones' cells removed. Proposals come from the server's source
//! (`--spec-type ngram-simple`, or a draft model with `-md`, one draft context per slot), up
//! to the request's `speculative.n_max`, the context's room and the step's.

use super::worker::Worker;
use crate::error::ApiError;
use crate::json::{opt_int, opt_num};
use serde_json::{Map, Value};
use std::sync::Arc;
use tessera_llama::speculative::{DraftModel, NgramSimple};
use tessera_llama::Model;

/// The server's speculation (`--spec-type`, `-md`, `--spec-draft-*`, `--spec-ngram-simple-*`).
#[derive(Clone)]
pub struct SpecConfig {
    /// Where proposals come from.
    pub source: SpecSource,
    /// Most tokens proposed per step (a request's `speculative.n_max` overrides it).
    pub n_max: usize,
    /// Fewer proposals are dropped (`speculative.n_min`).
    pub n_min: usize,
    /// A draft model stops where its top probability falls below this (`speculative.p_min`).
    pub p_min: f32,
}

impl std::fmt::Debug for SpecConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpecConfig")
            .field("source", &self.source.name())
            .field("n_max", &self.n_max)
            .finish()
    }
}

/// A source of proposals.
#[derive(Clone)]
pub enum SpecSource {
    /// llama.cpp's `ngram-simple`.
    Ngram(NgramSimple),
    /// llama.cpp's `draft-simple`: this draft model (its vocabulary checked against the
    /// model's).
    Draft(Arc<Model>),
}

impl SpecSource {
    /// llama.cpp's name.
    pub fn name(&self) -> &'static str {
        match self {
            SpecSource::Ngram(_) => "ngram-simple",
            SpecSource::Draft(_) => "draft-simple",
        }
    }
}

/// A request's `speculative.*` fields.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpecRequest {
    /// `speculative.type` as asked (`none`, `ngram-simple` or `draft-simple`), if given.
    pub kind: Option<String>,
    /// `speculative.n_max`.
    pub n_max: Option<usize>,
    /// `speculative.n_min`.
    pub n_min: Option<usize>,
    /// `speculative.p_min`.
    pub p_min: Option<f32>,
    /// `speculative.ngram_size_n` / `ngram_size_m`.
    pub ngram: (Option<usize>, Option<usize>),
}

impl SpecRequest {
    /// Reads the fields (llama-server's names); a type other than `none`, `ngram-simple` or
    /// `draft-simple` is refused by name (whether the server has that source is checked when
    /// the job starts).
    pub fn parse(o: &Map<String, Value>) -> Result<SpecRequest, ApiError> {
        let kind = match o.get("speculative.type") {
            None | Some(Value::Null) => None,
            Some(Value::String(t))
                if ["none", "ngram-simple", "draft-simple"].contains(&t.as_str()) =>
            {
                Some(t.clone())
            }
            Some(other) => {
                return Err(ApiError::field(
                    "speculative.type",
                    format!("{other}: tessera serve has none, ngram-simple and draft-simple"),
                ))
            }
        };
        // ngram-simple takes every match (llama.cpp's ignores min_hits too): only 1 means that.
        opt_int(o, "speculative.ngram_min_hits", 1, 1)?;
        let n = |k: &str, lo: i64, hi: i64| -> Result<Option<usize>, ApiError> {
            Ok(opt_int(o, k, lo, hi)?.map(|v| v as usize))
        };
        Ok(SpecRequest {
            kind,
            n_max: n("speculative.n_max", 0, 1024)?,
            n_min: n("speculative.n_min", 0, 1024)?,
            p_min: opt_num(o, "speculative.p_min", 0.0, 1.0)?.map(|p| p as f32),
            ngram: (
                n("speculative.ngram_size_n", 1, 1024)?,
                n("speculative.ngram_size_m", 1, 1024)?,
            ),
        })
    }
}

impl SpecRequest {
    /// `speculative.type: "none"`: no speculation for this request.
    pub fn off(&self) -> bool {
        self.kind.as_deref() == Some("none")
    }
}

/// The engine's per-slot speculation state: the source, and a draft context per slot.
pub(super) struct SlotSpec<'m> {
    pub(super) cfg: SpecConfig,
    pub(super) drafts: Vec<DraftModel<'m>>,
}

impl Worker<'_> {
    /// Up to `room` tokens proposed after slot `i`'s sampled token `tok` (its cache holds the
    /// tokens before it), as its request allows.
    pub(super) fn propose(&mut self, i: usize, tok: u32, room: usize) -> Vec<u32> {
        let Some(spec) = self.spec.as_mut() else { return Vec::new() };
        let slot = &self.slots[i];
        let Some(a) = slot.active.as_ref() else { return Vec::new() };
        let r = &a.job.spec;
        if r.off() {
            return Vec::new();
        }
        // As llama-server: the context's room (and 2 spare), the reply's budget.
        let mut n_max = r.n_max.unwrap_or(spec.cfg.n_max).min(room);
        n_max = n_max.min(self.n_ctx.saturating_sub(slot.cache.len() + 2));
        if let Some(m) = a.job.max_tokens {
            n_max = n_max.min(m.saturating_sub(a.n_gen + 1));
        }
        if n_max == 0 {
            return Vec::new();
        }
        let n_min = r.n_min.unwrap_or(spec.cfg.n_min);
        let mut draft = match &spec.cfg.source {
            SpecSource::Ngram(g) => {
                let g = NgramSimple {
                    size_n: r.ngram.0.unwrap_or(g.size_n),
                    size_m: r.ngram.1.unwrap_or(g.size_m),
                };
                g.draft(&slot.cache, tok)
            }
            SpecSource::Draft(_) => {
                let d = &mut spec.drafts[i];
                d.p_min = r.p_min.unwrap_or(spec.cfg.p_min);
                d.n_max = n_max;
                d.n_min = 0;
                match d.draft(&slot.cache, tok, n_max) {
                    Ok(v) => v,
                    Err(e) => {
                        tracing::warn!(slot = i, error = %e, "the draft model failed; no proposals");
                        Vec::new()
                    }
                }
            }
        };
        draft.truncate(n_max);
        if draft.len() < n_min {
            draft.clear();
        }
        draft
    }
}
