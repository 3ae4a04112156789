//! The engine thread in embeddings mode (`--embedding`): waiting inputs packed into shared
//! batches (up to `-np` sequences and `-b` tokens, or one longer input alone), each
//! sequence's rows pooled (`--pooling`), its cells freed. The endpoints are in
//! [`crate::api::embeddings`].

use super::job::{EmbedJob, Work};
use crate::error::ApiError;
use crate::metrics::Metrics;
use crossbeam::channel::{Receiver, RecvTimeoutError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_llama::{Batch, LlamaContext, Pooling};

/// The engine thread's loop in embeddings mode.
pub(crate) struct EmbedWorker<'m> {
    pub(crate) ctx: LlamaContext<'m>,
    pub(crate) pooling: Pooling,
    /// Sequences per batch (`-np`).
    pub(crate) n_seq: usize,
    /// Tokens per batch (`-b`); a longer input goes alone.
    pub(crate) n_batch: usize,
    pub(crate) metrics: Arc<Metrics>,
}

/// Refuses a generation job sent to an embeddings engine (the handlers check first).
fn refuse_generation(w: Work) -> Option<EmbedJob> {
    match w {
        Work::Embed(j) => Some(j),
        other => {
            other.fail(ApiError::not_generating());
            None
        }
    }
}

impl EmbedWorker<'_> {
    pub(crate) fn run(&mut self, rx: &Receiver<Work>, stop: &AtomicBool, abort: &AtomicBool) {
        loop {
            let first = match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(w) => w,
                Err(RecvTimeoutError::Timeout) if stop.load(Ordering::SeqCst) => return,
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => return,
            };
            let mut jobs: Vec<EmbedJob> = refuse_generation(first).into_iter().collect();
            while let Ok(w) = rx.try_recv() {
                jobs.extend(refuse_generation(w));
            }
            self.metrics.set_queue(0);
            if abort.load(Ordering::SeqCst) {
                for j in jobs {
                    let _ = j.reply.send(Err(ApiError::shutting_down()));
                }
                continue;
            }
            self.metrics.set_busy(1);
            self.serve(jobs);
            self.metrics.set_busy(0);
        }
    }

    /// Embeds every input of `jobs`, packing inputs of all of them into shared batches.
    fn serve(&mut self, jobs: Vec<EmbedJob>) {
        let mut out: Vec<Result<Vec<Vec<f32>>, ApiError>> =
            jobs.iter().map(|j| Ok(vec![Vec::new(); j.inputs.len()])).collect();
        let items: Vec<(usize, usize)> = jobs
            .iter()
            .enumerate()
            .flat_map(|(j, job)| (0..job.inputs.len()).map(move |i| (j, i)))
            .collect();
        let n_ctx = self.ctx.params().n_ctx;
        let mut k = 0;
        while k < items.len() {
            // One batch: inputs while they fit (the first always does: handlers checked it).
            let (mut batch, mut members, mut n_tok) = (Batch::new(), Vec::new(), 0);
            while let Some(&(j, i)) = items.get(k) {
                let toks = &jobs[j].inputs[i];
                let fits = n_tok + toks.len() <= self.n_batch.min(n_ctx);
                if !members.is_empty() && (members.len() == self.n_seq || !fits) {
                    break;
                }
                let seq = members.len() as u32;
                let first = batch.len();
                for (p, &t) in toks.iter().enumerate() {
                    batch.add(t, p as i32, seq, self.pooling.wants_row(p, toks.len()));
                }
                members.push((j, i, first));
                n_tok += toks.len();
                k += 1;
            }
            let t0 = Instant::now();
            let decoded = self.ctx.decode(&batch);
            self.metrics.add_step(batch.len(), 0, t0.elapsed().as_secs_f64());
            for &(j, i, first) in &members {
                let Ok(vectors) = &mut out[j] else { continue };
                if let Err(e) = &decoded {
                    tracing::error!(error = %e, "embedding decode failed");
                    let msg = format!("computing the embeddings failed: {e}");
                    out[j] = Err(ApiError::new(500, "server_error", msg));
                    continue;
                }
                let n = jobs[j].inputs[i].len();
                let mut rows = Vec::new();
                for t in first..first + n {
                    rows.extend_from_slice(self.ctx.embeddings_ith(t).unwrap_or_default());
                }
                vectors[i] = self.pooling.pool(&rows, self.ctx.model().hparams.n_embd);
            }
            self.ctx.kv_cache_mut().clear();
        }
        for (job, res) in jobs.into_iter().zip(out) {
            let n_tok: usize = job.inputs.iter().map(Vec::len).sum();
            tracing::info!(inputs = job.inputs.len(), tokens = n_tok, "embeddings done");
            let _ = job.reply.send(res);
        }
    }
}
