//! llama-server's context shift (`--context-shift`): before a step, a generating slot whose
//! cached tokens fill the context keeps its first `n_keep` tokens (the request's, after the
//! BOS), drops the next `n_discard` (the request's, or half of the rest) and moves the rest
//! back over them; the next decode rotates their K (the K-shift), and the reply goes on.
//!
//! Cells another slot shares (a common prompt prefix) would move for it too, so an idle
//! sharer's cache is evicted first, and a slot sharing cells with a running request ends with
//! `length` as without a shift.

use super::worker::Worker;

impl Worker<'_> {
    /// Shifts every generating slot whose next token would not fit (with `--context-shift`).
    pub(super) fn shift_full_slots(&mut self) {
        if !self.context_shift {
            return;
        }
        for i in 0..self.slots.len() {
            let s = &self.slots[i];
            let full = s.cache.len() + 1 >= self.n_ctx;
            if full && s.active.as_ref().is_some_and(|a| a.next.is_some()) && !self.shift(i) {
                self.finish(i, "length");
            }
        }
    }

    /// Shifts slot `i`'s context as llama-server does; false when it cannot.
    fn shift(&mut self, i: usize) -> bool {
        let add_bos = usize::from(self.model.vocab.add_bos());
        let n_ctx = self.n_ctx;
        let slot = &self.slots[i];
        let Some(a) = slot.active.as_ref() else { return false };
        let n_keep = usize::try_from(a.job.n_keep).unwrap_or(a.job.prompt.len()) + add_bos;
        let n_keep = n_keep.min(n_ctx.saturating_sub(4));
        let n_left = slot.cache.len().saturating_sub(n_keep);
        let n_discard = match a.job.n_discard {
            0 => n_left / 2,
            n => n,
        }
        .min(n_left.saturating_sub(1));
        if n_discard == 0 {
            tracing::warn!(slot = i, n_keep, "context shift: nothing to drop; the reply ends");
            return false;
        }
        let (seq, from) = (slot.seq, (n_keep + n_discard) as i32);
        // Other sequences holding the cells that move.
        let mut sharers = 0u64;
        for c in self.ctx.kv_cache().cells() {
            if c.seqs & (1u64 << seq) != 0 && c.pos >= from {
                sharers |= c.seqs & !(1u64 << seq);
            }
        }
        for j in 0..self.slots.len() {
            if sharers & (1u64 << self.slots[j].seq) == 0 {
                continue;
            }
            if self.slots[j].active.is_some() {
                tracing::warn!(
                    slot = i,
                    other = j,
                    "context shift: the cells to move are shared with a running request; the \
                     reply ends"
                );
                return false;
            }
            self.evict(j);
        }
        let end = self.slots[i].cache.len() as i32;
        let kv = self.ctx.kv_cache_mut();
        kv.seq_rm(Some(seq), n_keep as i32, from);
        kv.seq_add(seq, from, end, -(n_discard as i32));
        // Rotated now, so the cache's state is whole again (saving a prompt reads it).
        if let Err(e) = self.ctx.apply_shift() {
            tracing::error!(slot = i, error = %e, "context shift failed");
            return false;
        }
        let slot = &mut self.slots[i];
        slot.cache.drain(n_keep..n_keep + n_discard);
        if let Some(a) = slot.active.as_mut() {
            a.shifted_keep = Some(a.shifted_keep.map_or(n_keep, |k| k.min(n_keep)));
        }
        tracing::info!(slot = i, n_keep, n_left, n_discard, "context shift");
        true
    }
}
