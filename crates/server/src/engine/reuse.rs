//! What a slot keeps between requests: evicting its cells (saved to the host prompt cache
//! first, where `--cache-ram` allows) and giving a new prompt the longest cached prefix it can
//! find, in its own cells, another slot's, or the host cache.

use super::prompt_cache::{common, MIN_TOKENS};
use super::worker::{Slot, Worker};
use crate::vision::Images;

impl Worker<'_> {
    /// Drops slot `i`'s cells (saved to host memory first, where `--cache-ram` allows).
    pub(super) fn evict(&mut self, i: usize) {
        self.save_slot(i);
        let s = &mut self.slots[i];
        self.ctx.kv_cache_mut().seq_rm(Some(s.seq), 0, i32::MAX);
        s.cache.clear();
    }

    /// Before slot `i`'s cached tokens are dropped: copies them to the host cache (when there
    /// is one, they are worth it and no saved state already covers them).
    pub(super) fn save_slot(&mut self, i: usize) {
        let Some(host) = self.host.as_mut() else { return };
        let s = &self.slots[i];
        if s.cache.len() < MIN_TOKENS || host.covers(&s.cache_lora, &s.cache) {
            return;
        }
        let t0 = std::time::Instant::now();
        // All the sequence's cells (its cache), whatever their positions.
        match self.ctx.seq_save(s.seq, i32::MAX) {
            Ok(state) => {
                let bytes = state.n_bytes();
                if host.insert(&s.cache_lora, s.cache.clone(), state) {
                    tracing::debug!(
                        slot = i,
                        tokens = s.cache.len(),
                        bytes,
                        ms = format!("{:.1}", t0.elapsed().as_secs_f64() * 1e3),
                        "prompt saved to the host cache"
                    );
                }
            }
            Err(e) => {
                tracing::warn!(slot = i, error = %e, "saving a prompt to the host cache failed")
            }
        }
        self.metrics.set_prompt_cache(host.len(), host.bytes());
    }

    /// Makes idle slot `i` hold the longest prefix of `prompt` it can get without computing
    /// it: its own cached tokens, another slot's (shared cells), or a state saved in the host
    /// cache (copied back); drops the rest of its cache (saved first). Returns the tokens
    /// kept: at most all but the last, which must be evaluated for its logits. Only cells
    /// computed with LoRA scales `lora` serve.
    pub(super) fn reuse_prefix(
        &mut self,
        i: usize,
        prompt: &[u32],
        images: &Images,
        lora: &[f32],
    ) -> usize {
        // An image's cells serve whole or not at all.
        let limit = prompt.len() - 1;
        let usable = |n: usize| images.floor(n.min(limit));
        let common =
            |s: &Slot| if s.cache_lora == lora { usable(common(&s.cache, prompt)) } else { 0 };
        let own = common(&self.slots[i]);
        // Another slot (idle or busy) may hold a longer prefix: share its cells (the cache is
        // unified; cells carry every sequence that reads them).
        let donor = (0..self.slots.len())
            .filter(|&j| j != i)
            .map(|j| (common(&self.slots[j]), j))
            .filter(|&(n, _)| n > own)
            .max();
        let best_slot = donor.map_or(own, |(n, _)| n);
        let from_host = self
            .host
            .as_mut()
            .and_then(|h| h.best(lora, prompt))
            .map(|(_, n)| usable(n))
            .filter(|&n| n > best_slot);
        if own < self.slots[i].cache.len() {
            self.save_slot(i);
        }
        let seq = self.slots[i].seq;
        if let Some(n) = from_host {
            self.ctx.kv_cache_mut().seq_rm(Some(seq), -1, -1);
            self.slots[i].cache.clear();
            self.make_room(n);
            let t0 = std::time::Instant::now();
            // Making room may have saved (and so replaced or evicted) states: look again.
            let Some((state, again)) = self.host.as_mut().and_then(|h| h.best(lora, prompt)) else {
                return 0;
            };
            let n = usable(n.min(again));
            match self.ctx.seq_restore(seq, state, images.pos(n)) {
                Ok(()) => {
                    self.slots[i].cache = prompt[..n].to_vec();
                    tracing::debug!(
                        slot = i,
                        tokens = n,
                        ms = format!("{:.1}", t0.elapsed().as_secs_f64() * 1e3),
                        "prompt prefix restored from the host cache"
                    );
                    return n;
                }
                Err(e) => {
                    tracing::debug!(slot = i, error = %e, "no room to restore a saved prompt");
                    return 0;
                }
            }
        }
        let kv = self.ctx.kv_cache_mut();
        if let Some((n, j)) = donor {
            kv.seq_rm(Some(seq), -1, -1);
            kv.seq_cp(self.slots[j].seq, seq, 0, images.pos(n));
            self.slots[i].cache = prompt[..n].to_vec();
            tracing::debug!(
                slot = i,
                from = j,
                cells = n,
                "prompt prefix shared from another slot"
            );
            return n;
        }
        kv.seq_rm(Some(seq), images.pos(own), -1);
        self.slots[i].cache.truncate(own);
        own
    }
}
