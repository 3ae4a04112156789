//! A slot reading a prompt with images: when it reaches an image its cache does not hold, the
//! image is encoded (the server's [`Vision`](crate::vision::Vision)) and its embeddings
//! decoded in the slot's sequence on their own, before the step's shared batch (llama-server
//! evaluates image chunks alone too), with causal attention off where the projector's images
//! attend both ways (Gemma 3). An image the slot's cache already holds (the same hash after
//! the same tokens) is neither encoded nor decoded again.

use super::job::Event;
use super::worker::{Active, Worker};
use crate::error::ApiError;
use crate::vision::{placeholder_ids, PromptImage};
use std::time::Instant;
use tessera_llama::Batch;

impl Worker<'_> {
    /// Decodes the images that slots reading their prompts (those `this_step` selects) have
    /// reached, as long as the cache has room; a slot whose image fails is answered with the
    /// error and freed.
    pub(super) fn decode_images(&mut self, this_step: &dyn Fn(&Active) -> bool) {
        let Some(vision) = self.vision.clone() else { return };
        for i in 0..self.slots.len() {
            let reached = |a: &Active| match this_step(a) && a.next.is_none() {
                true => a.job.images.at(a.n_past).cloned(),
                false => None,
            };
            while let Some(img) = self.slots[i].active.as_ref().and_then(reached) {
                if self.make_room(img.n_tokens) < img.n_tokens {
                    // Cells free up as other replies end; a prompt that can never get them is
                    // refused by the step (nothing else to decode).
                    break;
                }
                let pos = self.pos_of(i, self.slots[i].cache.len());
                if let Err(e) = self.decode_image(i, &img, pos, vision.as_ref()) {
                    tracing::warn!(slot = i, error = %e.message, "image failed");
                    let s = &mut self.slots[i];
                    if let Some(a) = s.active.take() {
                        let _ = a.job.events.send(Event::Failed(e));
                    }
                    self.ctx.kv_cache_mut().seq_rm(Some(s.seq), pos, -1);
                    let busy = self.slots.iter().filter(|s| s.active.is_some()).count();
                    self.metrics.set_busy(busy);
                    break;
                }
            }
        }
    }

    /// Encodes `img` and decodes its embeddings at slot `i`'s next position, `pos`.
    fn decode_image(
        &mut self,
        i: usize,
        img: &PromptImage,
        pos: i32,
        vision: &dyn crate::vision::Vision,
    ) -> Result<(), ApiError> {
        let fail = |m: String| ApiError::new(500, "server_error", m);
        let t0 = Instant::now();
        let embd = vision.encode(img).map_err(|e| fail(format!("encoding an image: {e}")))?;
        let n_embd = vision.n_embd();
        if embd.len() != img.n_tokens * n_embd {
            return Err(fail(format!(
                "the encoder gave {} values for an image of {} cells {n_embd} wide",
                embd.len(),
                img.n_tokens
            )));
        }
        let t_enc = t0.elapsed();
        let seq = self.slots[i].seq;
        // An M-RoPE model places the image as its grid (mtmd's decoder positions).
        let batch = match img.grid {
            Some((w, _)) if self.model.hparams.rope_sections.is_some() => {
                Batch::from_image_grid(&embd, n_embd, w, pos, seq)
            }
            _ => Batch::from_embeddings(&embd, n_embd, pos, seq),
        };
        let non_causal = vision.non_causal();
        if non_causal {
            self.ctx.set_causal_attn(false);
        }
        let r = self.ctx.decode(&batch);
        if non_causal {
            self.ctx.set_causal_attn(true);
        }
        r.map_err(|e| fail(format!("decoding an image: {e}")))?;
        let dt = t0.elapsed().as_secs_f64();
        self.metrics.add_step(img.n_tokens, 0, dt);
        let s = &mut self.slots[i];
        s.cache.extend(placeholder_ids(img.hash, img.n_tokens));
        if let Some(a) = s.active.as_mut() {
            a.n_past += img.n_tokens;
        }
        tracing::debug!(
            slot = i,
            cells = img.n_tokens,
            encode_ms = format!("{:.1}", t_enc.as_secs_f64() * 1e3),
            total_ms = format!("{:.1}", dt * 1e3),
            "image decoded"
        );
        Ok(())
    }
}
