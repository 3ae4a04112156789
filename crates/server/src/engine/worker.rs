//! The engine thread's loop in generation mode: each step assigns waiting jobs to free slots,
//! decodes one batch (the next token of every generating slot, then prompt chunks), and
//! advances every slot that produced logits by one sampling step, streaming its text.

use super::budget::ThinkBudget;
use super::job::{Event, Finished, Job, SlotInfo, Timings, Work};
use super::lora::LoraScales;
use super::prompt_cache::PromptCache;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crossbeam::channel::{Receiver, RecvTimeoutError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tessera_llama::sampling::SeqSampler;
use tessera_llama::{Batch, LlamaContext, LoraAdapter, Model, TextStream};

pub(super) struct Active {
    pub(super) job: Job,
    /// When the slot took the request, and when it sampled its first token.
    pub(super) t_start: Instant,
    pub(super) t_first: Option<Instant>,
    /// The stop string that ended the reply, if one did.
    pub(super) stop_word: Option<String>,
    /// Prompt tokens already in the cache.
    pub(super) n_past: usize,
    pub(super) n_cached: usize,
    /// The request's sampling step (its chain, the banned and forced tokens).
    pub(super) sampler: SeqSampler,
    /// The token sampled last, to decode next.
    pub(super) next: Option<u32>,
    pub(super) n_gen: usize,
    /// The reply's text: whole characters, stop strings held back and cut.
    pub(super) stream: TextStream,
    /// Tokens the context shifts kept (`None`: never shifted); past them, the cached cells
    /// are not the prompt's and are dropped at the end.
    pub(super) shifted_keep: Option<usize>,
    /// Proposals decoded after `next` in this step, to verify.
    pub(super) draft: Vec<u32>,
    /// Tokens proposed and kept over the request.
    pub(super) n_drafted: usize,
    pub(super) n_accepted: usize,
}

pub(super) struct Slot {
    pub(super) seq: u32,
    /// Tokens whose K/V the cache holds for this slot's sequence, in position order.
    pub(super) cache: Vec<u32>,
    /// The LoRA scales the cached tokens were computed with.
    pub(super) cache_lora: LoraScales,
    pub(super) active: Option<Active>,
    pub(super) last_used: u64,
}

impl Slot {
    fn new(seq: u32) -> Self {
        Slot { seq, cache: Vec::new(), cache_lora: Vec::new(), active: None, last_used: 0 }
    }
}

pub(super) struct Worker<'m> {
    pub(super) model: &'m Model,
    pub(super) ctx: LlamaContext<'m>,
    pub(super) slots: Vec<Slot>,
    /// Cells in the cache: what one request may use.
    pub(super) n_ctx: usize,
    pub(super) n_batch: usize,
    pub(super) metrics: Arc<Metrics>,
    pub(super) clock: u64,
    /// Published for `GET /slots`.
    pub(super) info: Arc<Mutex<Vec<SlotInfo>>>,
    /// `--cache-ram`: prompts saved to host memory (none when 0).
    pub(super) host: Option<PromptCache>,
    /// The LoRA adapters jobs' scales refer to.
    pub(super) loras: Vec<Arc<LoraAdapter>>,
    /// Steps taken: which of several LoRA scale sets decodes next.
    pub(super) n_steps: usize,
    /// `--context-shift`.
    pub(super) context_shift: bool,
    /// Speculative decoding, if the server does it.
    pub(super) spec: Option<super::spec::SlotSpec<'m>>,
    /// The vision encoder, when prompts may hold images.
    pub(super) vision: Option<Arc<dyn crate::vision::Vision>>,
}

impl<'m> Worker<'m> {
    /// A worker over `ctx` with one slot per entry of `info`.
    pub(super) fn new(
        model: &'m Model,
        ctx: LlamaContext<'m>,
        n_ctx: usize,
        n_batch: usize,
        metrics: Arc<Metrics>,
        info: Arc<Mutex<Vec<SlotInfo>>>,
        host: Option<PromptCache>,
    ) -> Self {
        let n_slots = info.lock().unwrap_or_else(|e| e.into_inner()).len();
        let slots = (0..n_slots).map(|i| Slot::new(i as u32)).collect();
        Worker {
            model,
            ctx,
            slots,
            n_ctx,
            n_batch,
            metrics,
            clock: 0,
            info,
            host,
            loras: Vec::new(),
            n_steps: 0,
            context_shift: false,
            spec: None,
            vision: None,
        }
    }

    /// Serves `rx` until `stop` (running requests finish) or the queue closes.
    pub(super) fn run(&mut self, rx: &Receiver<Work>, stop: &AtomicBool, abort: &AtomicBool) {
        loop {
            if abort.load(Ordering::SeqCst) {
                if self.slots.iter().any(|s| s.active.is_some()) {
                    tracing::warn!("shutdown deadline: ending the running requests");
                }
                self.fail_all(ApiError::shutting_down());
                while let Ok(work) = rx.try_recv() {
                    work.fail(ApiError::shutting_down());
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
                    other => other.fail(ApiError::not_embedding()),
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
    pub(super) fn publish(&self) {
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
    pub(super) fn assign(&mut self, job: Job) {
        let common = |s: &Slot| match s.cache_lora == job.lora {
            true => s.cache.iter().zip(&job.prompt).take_while(|(a, b)| a == b).count(),
            false => 0,
        };
        let Some(i) = (0..self.slots.len())
            .filter(|&i| self.slots[i].active.is_none())
            .max_by_key(|&i| (common(&self.slots[i]), u64::MAX - self.slots[i].last_used))
        else {
            return;
        };
        let keep = if job.cache_prompt {
            self.reuse_prefix(i, &job.prompt, &job.images, &job.lora)
        } else {
            // `cache_prompt: false`: the whole prompt is evaluated again.
            self.evict(i);
            0
        };
        let slot = &mut self.slots[i];
        slot.cache_lora = job.lora.clone();
        self.clock += 1;
        slot.last_used = self.clock;
        let mut job = job;
        let mut sampler = SeqSampler::new(std::mem::take(&mut job.sampler));
        if job.ignore_eos && job.matcher.is_none() {
            // With a grammar, the grammar decides where the reply may end.
            sampler.ban(self.model.vocab.eog_tokens());
        }
        tracing::debug!(
            slot = i,
            prompt = job.prompt.len(),
            images = job.images.0.len(),
            cached = keep,
            "request assigned"
        );
        sampler.force(job.think_budget.as_mut().and_then(ThinkBudget::start).unwrap_or_default());
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
            n_gen: 0,
            stream,
            shifted_keep: None,
            draft: Vec::new(),
            n_drafted: 0,
            n_accepted: 0,
        });
        self.metrics.set_busy(self.slots.iter().filter(|s| s.active.is_some()).count());
    }

    pub(super) fn finish(&mut self, i: usize, reason: &'static str) {
        let slot = &mut self.slots[i];
        let Some(mut a) = slot.active.take() else { return };
        if let Some(keep) = a.shifted_keep {
            // Past the kept tokens, the cells were computed in a context that is gone: no later
            // prompt may reuse them.
            self.ctx.kv_cache_mut().seq_rm(Some(slot.seq), keep as i32, -1);
            slot.cache.truncate(keep);
        }
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
            draft_n: a.n_drafted,
            draft_n_accepted: a.n_accepted,
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
        let _ = a.job.events.send(Event::Done(Finished {
            finish_reason: reason,
            prompt_tokens: a.job.prompt.len(),
            cached_tokens: a.n_cached,
            completion_tokens: a.n_gen,
            timings,
            stop_word: a.stop_word.take(),
        }));
        self.metrics.set_busy(self.slots.iter().filter(|s| s.active.is_some()).count());
    }

    pub(super) fn fail_all(&mut self, e: ApiError) {
        for s in &mut self.slots {
            if let Some(a) = s.active.take() {
                let _ = a.job.events.send(Event::Failed(e.clone()));
                self.ctx.kv_cache_mut().seq_rm(Some(s.seq), 0, i32::MAX);
                s.cache.clear();
            }
        }
        self.metrics.set_busy(0);
    }

    /// The position of slot `i`'s `n`-th cached cell under its request's images (an M-RoPE
    /// image advances fewer positions than it takes cells); `n` itself without a request.
    pub(super) fn pos_of(&self, i: usize, n: usize) -> i32 {
        match &self.slots[i].active {
            Some(a) => a.job.images.pos(n),
            None => n as i32,
        }
    }

    pub(super) fn step(&mut self) {
        self.shift_full_slots();
        // Clients that went away free their slots now.
        for s in &mut self.slots {
            if s.active.as_ref().is_some_and(|a| a.job.events.is_closed()) {
                tracing::debug!(slot = s.seq, "client gone; slot freed");
                s.active = None;
            }
        }
        self.metrics.set_busy(self.slots.iter().filter(|s| s.active.is_some()).count());
        // Slots run with other LoRA scales wait: the sets present take turns, one per step.
        let mut sets: Vec<&LoraScales> = Vec::new();
        for a in self.slots.iter().filter_map(|s| s.active.as_ref()) {
            if !sets.contains(&&a.job.lora) {
                sets.push(&a.job.lora);
            }
        }
        let Some(&lora) = sets.get(self.n_steps % sets.len().max(1)) else { return };
        let lora = lora.clone();
        self.n_steps += 1;
        let this_step = |a: &Active| a.job.lora == lora;
        let applied = self.loras.iter().cloned().zip(lora.iter().copied()).collect();
        if let Err(e) = self.ctx.set_loras(applied) {
            tracing::error!(error = %e, "applying the LoRA adapters failed");
            self.fail_all(ApiError::new(500, "server_error", format!("LoRA: {e}")));
            return;
        }
        // Images the reading slots reached go first, each alone (engine/images.rs).
        self.decode_images(&this_step);
        // Room: what this step would take, capped by the batch size.
        let generating = self
            .slots
            .iter()
            .filter(|s| s.active.as_ref().is_some_and(|a| this_step(a) && a.next.is_some()))
            .count();
        let reading: usize = self
            .slots
            .iter()
            .filter_map(|s| s.active.as_ref().filter(|a| this_step(a) && a.next.is_none()))
            .map(|a| a.job.prompt.len() - a.n_past)
            .sum();
        let mut free = self.make_room((generating + reading).min(self.n_batch.max(generating)));
        let mut batch = Batch::new();
        // (slot, tokens added, batch index of its logits)
        let mut plan: Vec<(usize, Vec<u32>, Option<usize>)> = Vec::new();
        let mut no_room = Vec::new();
        let mut budget = self.n_batch;
        let mut verifying = false;
        for i in 0..self.slots.len() {
            let s = &self.slots[i];
            let Some(a) = s.active.as_ref().filter(|a| this_step(a)) else { continue };
            if let Some(t) = a.next {
                if free == 0 {
                    no_room.push(i);
                    continue;
                }
                free -= 1;
                budget = budget.saturating_sub(1);
                // Proposals after `t` (speculation): within the free cells and the step's room.
                let draft = self.propose(i, t, budget.min(free));
                let s = &self.slots[i];
                let p0 = self.pos_of(i, s.cache.len());
                batch.add(t, p0, s.seq, true);
                let row = batch.len() - 1;
                for (k, &d) in draft.iter().enumerate() {
                    batch.add(d, p0 + 1 + k as i32, s.seq, true);
                }
                free -= draft.len();
                budget -= draft.len();
                verifying |= !draft.is_empty();
                if let Some(a) = self.slots[i].active.as_mut() {
                    a.draft = draft;
                }
                plan.push((i, vec![t], Some(row)));
            }
        }
        for i in no_room {
            tracing::warn!(slot = i, "the KV cache is full: the reply ends here (raise -c)");
            self.finish(i, "length");
        }
        budget = budget.min(free);
        let mut newest_reader: Option<usize> = None;
        for (i, s) in self.slots.iter().enumerate() {
            let Some(a) = s.active.as_ref().filter(|a| this_step(a)) else { continue };
            if a.next.is_some() {
                continue;
            }
            if newest_reader.is_none_or(|j| self.slots[j].last_used < s.last_used) {
                newest_reader = Some(i);
            }
            if budget == 0 {
                continue;
            }
            // Text up to the next image (decoded alone, first thing in a later step).
            let image = a.job.images.next_start(a.n_past).unwrap_or(usize::MAX);
            let end = (a.n_past + budget).min(a.job.prompt.len()).min(image);
            if end == a.n_past {
                continue;
            }
            let chunk = a.job.prompt[a.n_past..end].to_vec();
            let last = end == a.job.prompt.len();
            let p0 = a.job.images.pos(s.cache.len());
            for (k, &t) in chunk.iter().enumerate() {
                let is_last = last && k + 1 == chunk.len();
                batch.add(t, p0 + k as i32, s.seq, is_last);
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
        // A step that checks proposals takes the batched kernels (LlamaContext::decode_verification).
        let decoded = match verifying {
            true => self.ctx.decode_verification(&batch),
            false => self.ctx.decode(&batch),
        };
        if let Err(e) = decoded {
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
        // Proposals count as generated once kept (Metrics::add_spec).
        let n_draft: usize = plan
            .iter()
            .filter_map(|p| self.slots[p.0].active.as_ref())
            .map(|a| a.draft.len())
            .sum();
        self.metrics.add_step(n_prompt, batch.len() - n_prompt - n_draft, dt);
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
    pub(super) fn cells_accounted(&self) -> usize {
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
    pub(super) fn make_room(&mut self, want: usize) -> usize {
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
}
