//! The batching engine: one thread owns the model's context; `-np` slots share its KV cache
//! (slot `i` is sequence `i`). Every step decodes one batch holding the next token of every
//! generating slot and prompt chunks of slots still reading their prompt (llama-server's
//! continuous batching), then samples each slot that produced logits and streams the text.
//!
//! The cache is unified, as llama-server's: one request may use all of `-c`. When a step
//! needs more cells than are free, the cached tokens of idle slots go first (least recently
//! used first); a generating request that still finds no cell ends with `length`; a prompt
//! that cannot advance while nothing generates (the cache full of other prompts) fails with
//! 503, so the engine always progresses.
//!
//! A slot keeps its cells after a request: the next request routed to it (the idle slot whose
//! cached tokens share the longest prefix with the new prompt) evaluates only what differs
//! (the prompt cache). A request whose client went away is dropped at the next step.

use crate::error::{ApiError, ServerError};
use crate::metrics::Metrics;
use crossbeam::channel::{self, Sender, TrySendError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tessera_llama::{ContextParams, LlamaContext, Model, Pooling};

mod advance;
mod budget;
mod embed;
mod images;
mod job;
mod lora;
mod prompt_cache;
mod reuse;
mod shift;
mod spec;
mod worker;

pub use budget::ThinkBudget;
pub use job::{EmbedJob, Event, Finished, Job, Logprob, SlotInfo, Timings, Work};
pub use lora::{LoraScales, LoraTable};
use prompt_cache::PromptCache;
pub use spec::{SpecConfig, SpecRequest, SpecSource};
use worker::Worker;

/// How the engine runs.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// KV cells in all, shared by the slots (one request may use them all).
    pub n_ctx: usize,
    /// Slots (`-np`).
    pub n_parallel: usize,
    /// CPU threads.
    pub n_threads: usize,
    /// Flash attention.
    pub flash_attn: bool,
    /// The KV cache's (K, V) types.
    pub cache_types: (tessera_llama::DType, tessera_llama::DType),
    /// Most tokens per decode step (prompt chunks fill what generating slots leave).
    pub n_batch: usize,
    /// Requests waiting for a slot before new ones get 503.
    pub queue: usize,
    /// Batch-invariant arithmetic (`--deterministic`): a request's tokens do not depend on
    /// what shares its steps.
    pub deterministic: bool,
    /// `--embedding`: compute embeddings pooled this way instead of generating.
    pub embeddings: Option<Pooling>,
    /// `--cache-ram` in bytes: host memory for prompts dropped from the slots (0: none).
    pub cache_ram: usize,
    /// The LoRA adapters a job's scales refer to (`Job::lora`), in id order.
    pub loras: Vec<Arc<tessera_llama::LoraAdapter>>,
    /// `--context-shift`: a reply that fills the context drops older tokens and goes on
    /// (else it ends with `length`).
    pub context_shift: bool,
    /// Speculative decoding, if any.
    pub spec: Option<SpecConfig>,
    /// The vision encoder, when prompts may hold images.
    pub vision: Option<crate::vision::VisionHandle>,
}

/// A handle on the engine thread.
pub struct Engine {
    tx: Sender<Work>,
    pooling: Option<Pooling>,
    stop: Arc<AtomicBool>,
    abort: Arc<AtomicBool>,
    slots: Arc<Mutex<Vec<SlotInfo>>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Tokens one request may use: the whole cache (it is unified).
    pub n_ctx: usize,
    /// Slots (`-np`): requests decoded together.
    pub n_slots: usize,
    /// Requests that may wait at once (`--queue`): a request with more prompts than this is
    /// refused whatever the load.
    pub queue_capacity: usize,
}

impl Engine {
    /// Starts the engine thread over `model`; fails if the context cannot be made.
    pub fn start(
        model: Arc<Model>,
        cfg: EngineConfig,
        metrics: Arc<Metrics>,
    ) -> crate::Result<Engine> {
        if cfg.n_parallel == 0 || cfg.n_parallel > tessera_llama::MAX_SEQ {
            return Err(ServerError::Config(format!(
                "-np {}: the slot count must be 1 to {}",
                cfg.n_parallel,
                tessera_llama::MAX_SEQ
            )));
        }
        let n_parallel = cfg.n_parallel;
        let (tx, rx) = channel::bounded::<Work>(cfg.queue.max(1));
        let pooling = cfg.embeddings;
        let stop = Arc::new(AtomicBool::new(false));
        let abort = Arc::new(AtomicBool::new(false));
        let slots = Arc::new(Mutex::new(
            (0..n_parallel).map(|id| SlotInfo { id, ..SlotInfo::default() }).collect(),
        ));
        let (abort2, slots2) = (abort.clone(), slots.clone());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<usize, String>>();
        let stop2 = stop.clone();
        let thread =
            std::thread::Builder::new().name("tessera-engine".into()).spawn(move || {
                // A projector whose images attend both ways needs each image in one ubatch.
                let image_rows = match &cfg.vision {
                    Some(v) if v.0.non_causal() => v.0.max_tokens(),
                    _ => 0,
                };
                let params = ContextParams {
                    n_ctx: cfg.n_ctx,
                    n_threads: cfg.n_threads,
                    flash_attn: cfg.flash_attn,
                    type_k: cfg.cache_types.0,
                    type_v: cfg.cache_types.1,
                    n_ubatch: cfg.n_batch.min(512).max(image_rows),
                    batch_invariant: cfg.deterministic,
                    embeddings: cfg.embeddings.is_some(),
                    ..ContextParams::default()
                };
                // A draft model's contexts (one per slot) borrow it as the worker does the model.
                let draft_model = match cfg.spec.as_ref().map(|s| &s.source) {
                    Some(spec::SpecSource::Draft(m)) => Some(m.clone()),
                    _ => None,
                };
                let ctx = match LlamaContext::new(&model, params.clone()) {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                let mut drafts = Vec::new();
                if let Some(dm) = draft_model.as_deref() {
                    for _ in 0..n_parallel {
                        match LlamaContext::new(dm, params.clone()) {
                            Ok(c) => drafts
                                .push(tessera_llama::speculative::DraftModel::new(c, 0, 0, 0.0)),
                            Err(e) => {
                                let _ = ready_tx.send(Err(format!("the draft model: {e}")));
                                return;
                            }
                        }
                    }
                }
                let n_ctx = ctx.params().n_ctx;
                let _ = ready_tx.send(Ok(n_ctx));
                if let Some(pooling) = cfg.embeddings {
                    let mut w = embed::EmbedWorker {
                        ctx,
                        pooling,
                        n_seq: n_parallel,
                        n_batch: cfg.n_batch.max(1),
                        metrics,
                    };
                    return w.run(&rx, &stop2, &abort2);
                }
                let host = (cfg.cache_ram > 0).then(|| PromptCache::new(cfg.cache_ram));
                let mut w =
                    Worker::new(&model, ctx, n_ctx, cfg.n_batch.max(1), metrics, slots2, host);
                w.loras = cfg.loras;
                w.context_shift = cfg.context_shift;
                w.spec = cfg.spec.map(|cfg| spec::SlotSpec { cfg, drafts });
                w.vision = cfg.vision.map(|v| v.0);
                w.run(&rx, &stop2, &abort2);
            })?;
        let n_ctx = ready_rx
            .recv()
            .map_err(|_| ServerError::Context("the engine thread ended at start".into()))?
            .map_err(ServerError::Context)?;
        Ok(Engine {
            tx,
            pooling,
            stop,
            abort,
            slots,
            thread: Some(thread),
            n_ctx,
            n_slots: n_parallel,
            queue_capacity: cfg.queue.max(1),
        })
    }

    /// What each slot is doing (`GET /slots`).
    pub fn slots(&self) -> Vec<SlotInfo> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Ends every running and waiting request now with a 503 (the shutdown deadline passed,
    /// or a second signal came); later requests are refused the same way.
    pub fn abort(&self) {
        self.abort.store(true, Ordering::SeqCst);
    }

    /// With `--embedding`, the pooling of the embeddings it computes (it then generates
    /// nothing).
    pub fn pooling(&self) -> Option<Pooling> {
        self.pooling
    }

    /// Queues a generation; 503 when the queue is full, 501 on an embeddings server.
    pub fn submit(&self, job: Job) -> Result<(), ApiError> {
        if self.pooling.is_some() {
            return Err(ApiError::not_generating());
        }
        self.send(Work::Generate(Box::new(job)))
    }

    /// Queues inputs to embed; 503 when the queue is full, 501 on a generating server.
    pub fn submit_embed(&self, job: EmbedJob) -> Result<(), ApiError> {
        if self.pooling.is_none() {
            return Err(ApiError::not_embedding());
        }
        self.send(Work::Embed(job))
    }

    fn send(&self, work: Work) -> Result<(), ApiError> {
        self.tx.try_send(work).map_err(|e| match e {
            TrySendError::Full(_) => ApiError::new(
                503,
                "server_error",
                "the server is busy: too many requests are waiting; retry later",
            )
            .with_code("server_busy"),
            TrySendError::Disconnected(_) => ApiError::shutting_down(),
        })
    }

    /// Requests waiting for a slot.
    pub fn queued(&self) -> usize {
        self.tx.len()
    }

    /// Lets running requests finish, then stops the thread.
    pub fn shutdown(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shutdown();
    }
}
