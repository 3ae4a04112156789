//! The engine thread's loop in generation mode: each step assigns waiting jobs to free slots,
//! decodes one batch (the next token of every generating slot, then prompt chunks), and
//! advances every slot that produced logits by one sampling step, streaming its text.

use super::budget::ThinkBudget;
use super::job::{Event, Finished, Job, Logprob, SlotInfo, Timings, Work};
use super::lora::LoraScales;
use super::prompt_cache::PromptCache;
use crate::chat::constrain::GrammarMask;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crossbeam::channel::{Receiver, RecvTimeoutError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tessera_llama::sampling::SeqSampler;
use tessera_llama::{Batch, LlamaContext, LoraAdapter, Model, StreamEnd, TextStream};

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
            self.reuse_prefix(i, &job.prompt, &job.lora)
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
        tracing::debug!(slot = i, prompt = job.prompt.len(), cached = keep, "request assigned");
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
        for (i, s) in self.slots.iter().enumerate() {
            let Some(a) = s.active.as_ref().filter(|a| this_step(a)) else { continue };
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
        let applied = self.loras.iter().cloned().zip(lora.iter().copied()).collect();
        if let Err(e) = self.ctx.set_loras(applied) {
            tracing::error!(error = %e, "applying the LoRA adapters failed");
            self.fail_all(ApiError::new(500, "server_error", format!("LoRA: {e}")));
            return;
        }
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

    /// After a step: records the tokens slot `i` added to the cache and, if it produced
    /// logits, samples its next token and streams the text; a finish reason when it is done.
    pub(super) fn advance(
        &mut self,
        i: usize,
        added: &[u32],
        out: Option<usize>,
    ) -> Option<&'static str> {
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
            a.sampler.history(&a.job.prompt);
        }
        let mut grammar = a.job.matcher.as_mut().map(|matcher| GrammarMask { matcher, vocab });
        let (tok, logits) = match a.sampler.sample_masked(raw, grammar.as_mut()) {
            Ok(s) => (s.token, s.logits),
            Err(e) => {
                let msg = format!("constrained decoding failed: {e}");
                let _ = a.job.events.send(Event::Failed(ApiError::new(500, "server_error", msg)));
                slot.active = None;
                return None;
            }
        };
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
            a.sampler.force(end);
        }
        let chunk = a.stream.push_bytes(&piece);
        let _ = a.job.events.send(Event::Token { text: chunk.text, logprob });
        if let Some(StreamEnd::Stop(s)) = chunk.end {
            a.stop_word = Some(s);
            return Some("stop");
        }
        // With --context-shift, a full slot shifts before its next step instead.
        let full = slot.cache.len() + 1 >= self.n_ctx && !self.context_shift;
        (a.job.max_tokens.is_some_and(|m| a.n_gen >= m) || full).then_some("length")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(super) fn log_softmax_is_normalized() {
        let logits = [1.0f32, 2.0, 3.0, 0.5];
        let (lp, top) = log_softmax_top(&logits, 2, 2);
        let total: f64 = logits.iter().map(|&l| ((l - 3.0) as f64).exp()).sum();
        assert!((lp as f64 - (-(total.ln()))).abs() < 1e-5);
        assert_eq!(top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![2, 1]);
    }
}
