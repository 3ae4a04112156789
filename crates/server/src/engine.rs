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

use crate::api::ApiError;
use crate::metrics::Metrics;
use crate::ServerError;
use crossbeam::channel::{self, Receiver, RecvTimeoutError, Sender, TrySendError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tessera_llama::sampling::SamplerChain;
use tessera_llama::{Batch, ContextParams, LlamaContext, Model, Pooling, StreamEnd, TextStream};

pub use crate::job::{Event, Job, Logprob, SlotInfo, Timings, Work};

mod budget;
mod prompt_cache;
pub use budget::ThinkBudget;
use prompt_cache::PromptCache;

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
                let params = ContextParams {
                    n_ctx: cfg.n_ctx,
                    n_threads: cfg.n_threads,
                    flash_attn: cfg.flash_attn,
                    n_ubatch: cfg.n_batch.min(512),
                    batch_invariant: cfg.deterministic,
                    embeddings: cfg.embeddings.is_some(),
                    ..ContextParams::default()
                };
                let ctx = match LlamaContext::new(&model, params) {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                let n_ctx = ctx.params().n_ctx;
                let _ = ready_tx.send(Ok(n_ctx));
                if let Some(pooling) = cfg.embeddings {
                    let mut w = crate::embed::EmbedWorker {
                        ctx,
                        pooling,
                        n_seq: n_parallel,
                        n_batch: cfg.n_batch.max(1),
                        metrics,
                    };
                    return w.run(&rx, &stop2, &abort2);
                }
                let mut w = Worker {
                    model: &model,
                    ctx,
                    slots: (0..n_parallel).map(|i| Slot::new(i as u32)).collect(),
                    n_ctx,
                    n_batch: cfg.n_batch.max(1),
                    metrics,
                    clock: 0,
                    info: slots2,
                    host: (cfg.cache_ram > 0).then(|| PromptCache::new(cfg.cache_ram)),
                };
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
            return Err(crate::embed::not_generating());
        }
        self.send(Work::Generate(Box::new(job)))
    }

    /// Queues inputs to embed; 503 when the queue is full, 501 on a generating server.
    pub fn submit_embed(&self, job: crate::embed::EmbedJob) -> Result<(), ApiError> {
        if self.pooling.is_none() {
            return Err(crate::embed::not_embedding());
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
            TrySendError::Disconnected(_) => shutting_down(),
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

/// The 503 of a server shutting down.
pub(crate) fn shutting_down() -> ApiError {
    ApiError::new(503, "server_error", "the server is shutting down").with_code("shutting_down")
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shutdown();
    }
}

struct Active {
    job: Job,
    /// When the slot took the request, and when it sampled its first token.
    t_start: Instant,
    t_first: Option<Instant>,
    /// The stop string that ended the reply, if one did.
    stop_word: Option<String>,
    /// Prompt tokens already in the cache.
    n_past: usize,
    n_cached: usize,
    sampler: SamplerChain,
    /// The token sampled last, to decode next.
    next: Option<u32>,
    /// Tokens to emit instead of sampling (the forced end of thinking).
    forced: std::collections::VecDeque<u32>,
    n_gen: usize,
    /// The reply's text: whole characters, stop strings held back and cut.
    stream: TextStream,
}

struct Slot {
    seq: u32,
    /// Tokens whose K/V the cache holds for this slot's sequence, in position order.
    cache: Vec<u32>,
    active: Option<Active>,
    last_used: u64,
}

impl Slot {
    fn new(seq: u32) -> Self {
        Slot { seq, cache: Vec::new(), active: None, last_used: 0 }
    }
}

struct Worker<'m> {
    model: &'m Model,
    ctx: LlamaContext<'m>,
    slots: Vec<Slot>,
    /// Cells in the cache: what one request may use.
    n_ctx: usize,
    n_batch: usize,
    metrics: Arc<Metrics>,
    clock: u64,
    /// Published for `GET /slots`.
    info: Arc<Mutex<Vec<SlotInfo>>>,
    /// `--cache-ram`: prompts saved to host memory (none when 0).
    host: Option<PromptCache>,
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
    fn run(&mut self, rx: &Receiver<Work>, stop: &AtomicBool, abort: &AtomicBool) {
        loop {
            if abort.load(Ordering::SeqCst) {
                if self.slots.iter().any(|s| s.active.is_some()) {
                    tracing::warn!("shutdown deadline: ending the running requests");
                }
                self.fail_all(shutting_down());
                while let Ok(work) = rx.try_recv() {
                    work.fail(shutting_down());
                }
                self.publish();
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            // Take new jobs while slots are free: without waiting while others decode, with a
            // short wait (to notice a stop) when idle.
            while self.slots.iter().any(|s| s.active.is_none()) {
                let decoding = self.slots.iter().any(|s| s.active.is_some());
                let job = if decoding {
                    match rx.try_recv() {
                        Ok(j) => j,
                        Err(_) => break,
                    }
                } else {
                    match rx.recv_timeout(Duration::from_millis(50)) {
                        Ok(j) => j,
                        Err(RecvTimeoutError::Timeout) if stop.load(Ordering::SeqCst) => return,
                        Err(RecvTimeoutError::Timeout) => break,
                        Err(RecvTimeoutError::Disconnected) => return,
                    }
                };
                match job {
                    Work::Generate(job) => self.assign(*job),
                    other => other.fail(crate::embed::not_embedding()),
                }
            }
            self.metrics.set_queue(rx.len());
            if self.slots.iter().any(|s| s.active.is_some()) {
                self.step();
            }
            self.publish();
        }
    }

    /// Copies the slots' state where `GET /slots` reads it.
    fn publish(&self) {
        let mut info = self.info.lock().unwrap_or_else(|e| e.into_inner());
        for (s, i) in self.slots.iter().zip(info.iter_mut()) {
            i.n_cached = s.cache.len();
            i.is_processing = s.active.is_some();
            if let Some(a) = &s.active {
                i.n_prompt = a.job.prompt.len();
                i.n_decoded = a.n_gen;
            }
        }
    }

    /// Puts a job on the idle slot sharing the longest prefix with its prompt (the least
    /// recently used among equals) and drops the cached tokens past that prefix.
    fn assign(&mut self, job: Job) {
        let common = |s: &Slot| s.cache.iter().zip(&job.prompt).take_while(|(a, b)| a == b).count();
        let Some(i) = (0..self.slots.len())
            .filter(|&i| self.slots[i].active.is_none())
            .max_by_key(|&i| (common(&self.slots[i]), u64::MAX - self.slots[i].last_used))
        else {
            return;
        };
        let keep = if job.cache_prompt {
            self.reuse_prefix(i, &job.prompt)
        } else {
            // `cache_prompt: false`: the whole prompt is evaluated again.
            self.evict(i);
            0
        };
        let slot = &mut self.slots[i];
        self.clock += 1;
        slot.last_used = self.clock;
        let mut job = job;
        let sampler = std::mem::take(&mut job.sampler);
        tracing::debug!(slot = i, prompt = job.prompt.len(), cached = keep, "request assigned");
        let forced = job.think_budget.as_mut().and_then(ThinkBudget::start).unwrap_or_default();
        let stream = TextStream::new(job.stop.clone());
        slot.active = Some(Active {
            job,
            t_start: Instant::now(),
            t_first: None,
            stop_word: None,
            n_past: keep,
            n_cached: keep,
            sampler,
            next: None,
            forced: forced.into(),
            n_gen: 0,
            stream,
        });
        self.metrics.set_busy(self.slots.iter().filter(|s| s.active.is_some()).count());
    }

    fn finish(&mut self, i: usize, reason: &'static str) {
        let slot = &mut self.slots[i];
        let Some(mut a) = slot.active.take() else { return };
        // `/slots` shows the slot idle before the client hears the end.
        if let Some(info) = self.info.lock().unwrap_or_else(|e| e.into_inner()).get_mut(i) {
            *info = SlotInfo {
                id: i,
                is_processing: false,
                n_cached: slot.cache.len(),
                n_prompt: a.job.prompt.len(),
                n_decoded: a.n_gen,
            };
        }
        // Whatever was held back for a possible stop string is text after all.
        let rest = a.stream.flush();
        if !rest.is_empty() {
            let _ = a.job.events.send(Event::Token { text: rest, logprob: None });
        }
        let now = Instant::now();
        let t_first = a.t_first.unwrap_or(now);
        let timings = Timings {
            cache_n: a.n_cached,
            prompt_n: a.job.prompt.len() - a.n_cached,
            prompt_ms: (t_first - a.t_start).as_secs_f64() * 1e3,
            predicted_n: a.n_gen,
            predicted_ms: (now - t_first).as_secs_f64() * 1e3,
        };
        tracing::info!(
            slot = i,
            prompt = a.job.prompt.len(),
            cached = a.n_cached,
            prompt_ms = format!("{:.1}", timings.prompt_ms),
            generated = a.n_gen,
            gen_tok_s = format!("{:.1}", a.n_gen as f64 * 1e3 / timings.predicted_ms.max(1e-9)),
            finish = reason,
            "request done"
        );
        let _ = a.job.events.send(Event::Done {
            finish_reason: reason,
            prompt_tokens: a.job.prompt.len(),
            cached_tokens: a.n_cached,
            completion_tokens: a.n_gen,
            timings,
            stop_word: a.stop_word.take(),
        });
        self.metrics.set_busy(self.slots.iter().filter(|s| s.active.is_some()).count());
    }

    fn fail_all(&mut self, e: ApiError) {
        for s in &mut self.slots {
            if let Some(a) = s.active.take() {
                let _ = a.job.events.send(Event::Failed(e.clone()));
                self.ctx.kv_cache_mut().seq_rm(Some(s.seq), 0, i32::MAX);
                s.cache.clear();
            }
        }
        self.metrics.set_busy(0);
    }

    fn step(&mut self) {
        // Clients that went away free their slots now.
        for s in &mut self.slots {
            if s.active.as_ref().is_some_and(|a| a.job.events.is_closed()) {
                tracing::debug!(slot = s.seq, "client gone; slot freed");
                s.active = None;
            }
        }
        self.metrics.set_busy(self.slots.iter().filter(|s| s.active.is_some()).count());
        // Room: what this step would take, capped by the batch size.
        let generating = self
            .slots
            .iter()
            .filter(|s| s.active.as_ref().is_some_and(|a| a.next.is_some()))
            .count();
        let reading: usize = self
            .slots
            .iter()
            .filter_map(|s| s.active.as_ref().filter(|a| a.next.is_none()))
            .map(|a| a.job.prompt.len() - a.n_past)
            .sum();
        let mut free = self.make_room((generating + reading).min(self.n_batch.max(generating)));
        let mut batch = Batch::new();
        // (slot, tokens added, batch index of its logits)
        let mut plan: Vec<(usize, Vec<u32>, Option<usize>)> = Vec::new();
        let mut no_room = Vec::new();
        let mut budget = self.n_batch;
        for (i, s) in self.slots.iter().enumerate() {
            let Some(a) = &s.active else { continue };
            if let Some(t) = a.next {
                if free == 0 {
                    no_room.push(i);
                    continue;
                }
                free -= 1;
                batch.add(t, s.cache.len() as i32, s.seq, true);
                plan.push((i, vec![t], Some(batch.len() - 1)));
                budget = budget.saturating_sub(1);
            }
        }
        for i in no_room {
            tracing::warn!(slot = i, "the KV cache is full: the reply ends here (raise -c)");
            self.finish(i, "length");
        }
        budget = budget.min(free);
        let mut newest_reader: Option<usize> = None;
        for (i, s) in self.slots.iter().enumerate() {
            let Some(a) = &s.active else { continue };
            if a.next.is_some() {
                continue;
            }
            if newest_reader.is_none_or(|j| self.slots[j].last_used < s.last_used) {
                newest_reader = Some(i);
            }
            if budget == 0 {
                continue;
            }
            let end = (a.n_past + budget).min(a.job.prompt.len());
            let chunk = a.job.prompt[a.n_past..end].to_vec();
            let last = end == a.job.prompt.len();
            for (k, &t) in chunk.iter().enumerate() {
                let is_last = last && k + 1 == chunk.len();
                batch.add(t, (s.cache.len() + k) as i32, s.seq, is_last);
            }
            budget -= chunk.len();
            plan.push((i, chunk, last.then(|| batch.len() - 1)));
        }
        if batch.is_empty() {
            // Only prompts, and no cell for any of them: nothing will free one, so the
            // newest request gives its cells back to the others.
            if let Some(i) = newest_reader {
                let s = &mut self.slots[i];
                if let Some(a) = s.active.take() {
                    tracing::warn!(
                        slot = i,
                        "the KV cache is full of other prompts: request refused"
                    );
                    let e = ApiError::new(
                        503,
                        "server_error",
                        "the KV cache is full with other requests' prompts; retry later, or \
                         raise -c",
                    )
                    .with_code("context_full");
                    let _ = a.job.events.send(Event::Failed(e));
                }
                self.ctx.kv_cache_mut().seq_rm(Some(s.seq), 0, i32::MAX);
                s.cache.clear();
            }
            return;
        }
        let t0 = Instant::now();
        if let Err(e) = self.ctx.decode(&batch) {
            tracing::error!(error = %e, "decode failed");
            self.fail_all(ApiError::new(500, "server_error", format!("decoding failed: {e}")));
            return;
        }
        let dt = t0.elapsed().as_secs_f64();
        let n_prompt: usize = plan
            .iter()
            .filter(|p| self.slots[p.0].active.as_ref().is_some_and(|a| a.next.is_none()))
            .map(|p| p.1.len())
            .sum();
        self.metrics.add_step(n_prompt, batch.len() - n_prompt, dt);
        for (i, added, out) in plan {
            if let Some(reason) = self.advance(i, &added, out) {
                self.finish(i, reason);
            }
        }
        self.metrics.set_kv_used(self.ctx.kv_cache().used(), self.ctx.kv_cache().size());
        self.metrics.set_kv_in_slots(self.cells_accounted());
    }

    /// Cells every sequence holding them accounts for (a slot's cache covers positions
    /// `0..len`): equal to the cells in use unless a cell leaked (shared cells count once).
    fn cells_accounted(&self) -> usize {
        self.ctx
            .kv_cache()
            .cells()
            .iter()
            .filter(|c| !c.is_empty())
            .filter(|c| {
                (0..self.slots.len()).all(|s| {
                    c.seqs & (1u64 << self.slots[s].seq) == 0
                        || (c.pos as usize) < self.slots[s].cache.len()
                })
            })
            .count()
    }

    /// Frees cells until `want` are free, dropping idle slots' cached tokens, least recently
    /// used first; returns the free cells.
    fn make_room(&mut self, want: usize) -> usize {
        let kv = self.ctx.kv_cache();
        let mut free = kv.size() - kv.used();
        while free < want {
            let Some(i) = (0..self.slots.len())
                .filter(|&i| self.slots[i].active.is_none() && !self.slots[i].cache.is_empty())
                .min_by_key(|&i| self.slots[i].last_used)
            else {
                break;
            };
            tracing::debug!(
                slot = i,
                cells = self.slots[i].cache.len(),
                "evicting an idle slot's cache"
            );
            self.evict(i);
            let kv = self.ctx.kv_cache();
            free = kv.size() - kv.used();
        }
        free
    }

    /// After a step: records the tokens slot `i` added to the cache and, if it produced
    /// logits, samples its next token and streams the text; a finish reason when it is done.
    fn advance(&mut self, i: usize, added: &[u32], out: Option<usize>) -> Option<&'static str> {
        let vocab = &self.model.vocab;
        let slot = &mut self.slots[i];
        slot.cache.extend_from_slice(added);
        let a = slot.active.as_mut()?;
        if a.next.is_none() {
            a.n_past += added.len();
        }
        let raw = self.ctx.logits_ith(out?).expect("asked for");
        if a.next.is_none() {
            a.t_first = Some(Instant::now());
            for &t in &a.job.prompt {
                a.sampler.accept(t);
            }
        }
        let masked;
        let logits = match a.job.matcher.as_mut() {
            None if !a.job.ignore_eos => raw,
            None => {
                let mut l = raw.to_vec();
                for t in vocab.eog_tokens() {
                    if let Some(v) = l.get_mut(t as usize) {
                        *v = f32::NEG_INFINITY;
                    }
                }
                masked = l;
                &masked[..]
            }
            Some(m) => {
                let mut l = raw.to_vec();
                if let Err(e) = crate::constrain::mask_logits(m, &mut l) {
                    let msg =
                        format!("constrained decoding failed: {}", crate::constrain::short(&e));
                    let _ =
                        a.job.events.send(Event::Failed(ApiError::new(500, "server_error", msg)));
                    slot.active = None;
                    return None;
                }
                masked = l;
                &masked[..]
            }
        };
        let tok = match a.forced.pop_front() {
            Some(t) => t,
            None => a.sampler.sample(logits),
        };
        a.sampler.accept(tok);
        if let Some(m) = a.job.matcher.as_mut() {
            if !vocab.is_eog(tok) {
                if let Err(e) = m.consume_token(tok) {
                    let msg =
                        format!("constrained decoding failed: {}", crate::constrain::short(&e));
                    let _ =
                        a.job.events.send(Event::Failed(ApiError::new(500, "server_error", msg)));
                    slot.active = None;
                    return None;
                }
            }
        }
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
            return Some("stop");
        }
        a.n_gen += 1;
        a.next = Some(tok);
        let piece = vocab.token_to_piece(tok, a.job.preserved.contains(&tok));
        if let Some(end) =
            a.job.think_budget.as_mut().and_then(|b| b.on_token(&String::from_utf8_lossy(&piece)))
        {
            tracing::debug!(slot = i, "reasoning budget spent: closing the thoughts");
            a.forced.extend(end);
        }
        let chunk = a.stream.push_bytes(&piece);
        let _ = a.job.events.send(Event::Token { text: chunk.text, logprob });
        if let Some(StreamEnd::Stop(s)) = chunk.end {
            a.stop_word = Some(s);
            return Some("stop");
        }
        let full = slot.cache.len() + 1 >= self.n_ctx;
        (a.job.max_tokens.is_some_and(|m| a.n_gen >= m) || full).then_some("length")
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
