//! llama-server's host-RAM prompt cache (`--cache-ram`): when a slot's cached tokens are about
//! to be dropped (the slot takes a request with another beginning, or idle cells are evicted
//! for room), their K/V are copied to host memory first; a later request whose prompt shares
//! a longer prefix with a saved state than with any slot gets that prefix put back into its
//! slot's cells instead of computing it again.
//!
//! States are kept least-recently-used first out, within a byte budget. A saved state that is
//! a prefix of a newly saved one is dropped (the new one serves every prompt the old did); a
//! state that an entry already covers is not saved twice.

use tessera_llama::SeqState;

/// What the cache holds: anything that knows its size (a [`SeqState`] in the server).
pub(crate) trait HasSize {
    /// Host bytes held.
    fn n_bytes(&self) -> usize;
}

impl HasSize for SeqState {
    fn n_bytes(&self) -> usize {
        SeqState::n_bytes(self)
    }
}

/// Fewer cached tokens than this are not worth a copy.
pub(crate) const MIN_TOKENS: usize = 8;

struct Entry<S> {
    /// The LoRA scales the state was computed with: it serves only prompts run with them.
    lora: Vec<f32>,
    tokens: Vec<u32>,
    state: S,
    last_used: u64,
}

/// Saved prompt states within a byte budget.
pub(crate) struct PromptCache<S = SeqState> {
    limit: usize,
    entries: Vec<Entry<S>>,
    clock: u64,
}

pub(super) fn common(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl<S: HasSize> PromptCache<S> {
    /// A cache holding at most `limit` bytes of states.
    pub(crate) fn new(limit: usize) -> Self {
        PromptCache { limit, entries: Vec::new(), clock: 0 }
    }

    /// Bytes of the states held.
    pub(crate) fn bytes(&self) -> usize {
        self.entries.iter().map(|e| e.state.n_bytes()).sum()
    }

    /// States held.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether a held state of LoRA scales `lora` already starts with all of `tokens`.
    pub(crate) fn covers(&self, lora: &[f32], tokens: &[u32]) -> bool {
        self.entries.iter().any(|e| e.lora == lora && e.tokens.starts_with(tokens))
    }

    /// Keeps `state` (the K/V of `tokens` with LoRA scales `lora`), dropping states it extends
    /// and then the least recently used until it fits; false (nothing kept) when it alone
    /// exceeds the budget.
    pub(crate) fn insert(&mut self, lora: &[f32], tokens: Vec<u32>, state: S) -> bool {
        let size = state.n_bytes();
        if size > self.limit {
            return false;
        }
        self.entries.retain(|e| e.lora != lora || !tokens.starts_with(&e.tokens));
        while self.bytes() + size > self.limit {
            let Some(lru) = (0..self.entries.len()).min_by_key(|&i| self.entries[i].last_used)
            else {
                break;
            };
            self.entries.swap_remove(lru);
        }
        self.clock += 1;
        self.entries.push(Entry { lora: lora.to_vec(), tokens, state, last_used: self.clock });
        true
    }

    /// The held state of LoRA scales `lora` sharing the longest prefix with `prompt`, and that
    /// prefix's length (marked as just used).
    pub(crate) fn best(&mut self, lora: &[f32], prompt: &[u32]) -> Option<(&S, usize)> {
        let (i, n) = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.lora == lora)
            .map(|(i, e)| (i, common(&e.tokens, prompt)))
            .max_by_key(|&(i, n)| (n, self.entries[i].last_used))?;
        self.clock += 1;
        self.entries[i].last_used = self.clock;
        Some((&self.entries[i].state, n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl HasSize for usize {
        fn n_bytes(&self) -> usize {
            *self
        }
    }

    #[test]
    fn longest_prefix_wins_and_extended_states_replace_their_prefixes() {
        let mut c = PromptCache::<usize>::new(100);
        assert!(c.insert(&[], vec![1, 2, 3], 10));
        assert!(c.insert(&[], vec![1, 2, 3, 4, 5], 20));
        assert_eq!(c.len(), 1, "the longer state replaces its prefix");
        assert!(c.insert(&[], vec![7, 8], 10));
        assert_eq!(c.best(&[], &[1, 2, 3, 4, 9]).map(|(s, n)| (*s, n)), Some((20, 4)));
        assert_eq!(c.best(&[], &[7, 8, 9]).map(|(s, n)| (*s, n)), Some((10, 2)));
        assert!(
            c.covers(&[], &[1, 2])
                && c.covers(&[], &[1, 2, 3, 4, 5])
                && !c.covers(&[], &[1, 2, 3, 4, 5, 6])
        );
        assert_eq!(c.bytes(), 30);
        // A state computed with LoRA scales serves only prompts run with the same.
        assert!(c.insert(&[0.5], vec![1, 2, 3, 4, 5, 6], 10));
        assert_eq!(c.len(), 3, "another LoRA's state replaces nothing");
        assert_eq!(c.best(&[], &[1, 2, 3, 4, 5, 6]).map(|(s, n)| (*s, n)), Some((20, 5)));
        assert_eq!(c.best(&[0.5], &[1, 2, 3, 4, 5, 6]).map(|(s, n)| (*s, n)), Some((10, 6)));
        assert!(!c.covers(&[0.25], &[1]) && c.covers(&[0.5], &[1]));
    }

    #[test]
    fn the_least_recently_used_go_first_and_oversized_states_are_not_kept() {
        let mut c = PromptCache::<usize>::new(50);
        c.insert(&[], vec![1], 20);
        c.insert(&[], vec![2], 20);
        c.best(&[], &[1]); // 1 is now the most recently used
        c.insert(&[], vec![3], 20);
        assert!(c.covers(&[], &[1]) && !c.covers(&[], &[2]) && c.covers(&[], &[3]));
        assert!(!c.insert(&[], vec![4], 51));
        assert_eq!(c.len(), 2);
        assert_eq!(c.bytes(), 40);
    }
}
