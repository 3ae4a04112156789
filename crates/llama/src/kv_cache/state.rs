//! Saving and restoring a sequence's cells (llama.cpp's `llama_state_seq_get_data` and
//! `_set_data`): the server's host prompt cache and slot sharing copy K/V out and back.

use super::KvCache;
use crate::{LlamaError, Result};
use tessera_backend::Bindings;
use tessera_tensor::graph::{Context, TensorId};

/// A sequence's cached tokens copied out of the cache (llama.cpp's
/// `llama_state_seq_get_data`): their positions and, per layer, their K rows and V values,
/// to be put back later ([`KvCache::seq_restore`]) into the same or another sequence.
#[derive(Clone)]
pub struct SeqState {
    /// Positions of the saved cells, ascending.
    pub pos: Vec<i32>,
    /// Per layer: K rows, then V (rows, or per-channel runs when V is transposed), of the
    /// saved cells in position order.
    layers: Vec<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for SeqState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SeqState")
            .field("cells", &self.pos.len())
            .field("bytes", &self.n_bytes())
            .finish()
    }
}

impl SeqState {
    /// Host memory it holds.
    pub fn n_bytes(&self) -> usize {
        self.layers.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>() + self.pos.len() * 4
    }

    /// Cells saved.
    pub fn len(&self) -> usize {
        self.pos.len()
    }

    /// Whether nothing was saved.
    pub fn is_empty(&self) -> bool {
        self.pos.is_empty()
    }
}

impl KvCache {
    /// Copies out the cells of sequence `seq` with positions below `p1` (see [`SeqState`]);
    /// `ctx` and `bindings` are those the cache was created in.
    pub fn seq_save(
        &self,
        ctx: &Context,
        bindings: &Bindings,
        seq: u32,
        p1: i32,
    ) -> Result<SeqState> {
        if self.has_shift {
            return Err(LlamaError::BadValue {
                key: "seq_save".into(),
                reason: "positions were shifted and K not yet rotated: decode (or \
                         LlamaContext::apply_shift) first"
                    .into(),
            });
        }
        let mut cells: Vec<usize> = (0..self.cells.len())
            .filter(|&i| self.cells[i].seqs & (1u64 << seq) != 0 && self.cells[i].pos < p1)
            .collect();
        cells.sort_by_key(|&i| self.cells[i].pos);
        let pos = cells.iter().map(|&i| self.cells[i].pos).collect();
        let mut layers = Vec::with_capacity(self.layers.len());
        for l in &self.layers {
            let (ks, krow) = self.storage(ctx, bindings, l.k)?;
            let (vs, vrow) = self.storage(ctx, bindings, l.v)?;
            let mut k = vec![0u8; cells.len() * krow];
            for (j, &c) in cells.iter().enumerate() {
                ks.buffer.read(ks.offset + c * krow, &mut k[j * krow..(j + 1) * krow])?;
            }
            let v = if self.v_trans {
                // Element (channel ch, cell c) at ch * size + c: read the whole tensor once.
                let es = ctx.get(l.v).dtype.type_size();
                let channels = vrow / es;
                let mut all = vec![0u8; ctx.get(l.v).n_bytes()];
                vs.buffer.read(vs.offset, &mut all)?;
                let size = self.cells.len();
                let mut v = Vec::with_capacity(cells.len() * vrow);
                for ch in 0..channels {
                    for &c in &cells {
                        let at = (ch * size + c) * es;
                        v.extend_from_slice(&all[at..at + es]);
                    }
                }
                v
            } else {
                let mut v = vec![0u8; cells.len() * vrow];
                for (j, &c) in cells.iter().enumerate() {
                    vs.buffer.read(vs.offset + c * vrow, &mut v[j * vrow..(j + 1) * vrow])?;
                }
                v
            };
            layers.push((k, v));
        }
        Ok(SeqState { pos, layers })
    }

    /// Puts the saved cells with positions below `p1` back as sequence `seq`, which must hold
    /// nothing (it fails with [`LlamaError::ContextFull`] when too few cells are free, changing
    /// nothing). The state must come from a cache of the same shape and types.
    pub fn seq_restore(
        &mut self,
        ctx: &Context,
        bindings: &Bindings,
        seq: u32,
        state: &SeqState,
        p1: i32,
    ) -> Result<()> {
        let n = state.pos.iter().take_while(|&&p| p < p1).count();
        if state.layers.len() != self.layers.len() {
            return Err(LlamaError::BadValue {
                key: "seq_restore".into(),
                reason: format!(
                    "{} layers saved, the cache has {}",
                    state.layers.len(),
                    self.layers.len()
                ),
            });
        }
        let cells = self.find_slot_for(&vec![seq; n])?;
        let total = state.pos.len();
        for (l, (k, v)) in self.layers.iter().zip(&state.layers) {
            let (ks, krow) = self.storage(ctx, bindings, l.k)?;
            let (vs, vrow) = self.storage(ctx, bindings, l.v)?;
            if k.len() != total * krow || v.len() != total * vrow {
                return Err(LlamaError::BadValue {
                    key: "seq_restore".into(),
                    reason: "the saved rows do not fit this cache's types".into(),
                });
            }
            for (j, &c) in cells.iter().enumerate() {
                ks.buffer.write(ks.offset + c * krow, &k[j * krow..(j + 1) * krow])?;
            }
            if self.v_trans {
                let es = ctx.get(l.v).dtype.type_size();
                let size = self.cells.len();
                for ch in 0..vrow / es {
                    for (j, &c) in cells.iter().enumerate() {
                        let from = (ch * total + j) * es;
                        vs.buffer.write(vs.offset + (ch * size + c) * es, &v[from..from + es])?;
                    }
                }
            } else {
                for (j, &c) in cells.iter().enumerate() {
                    vs.buffer.write(vs.offset + c * vrow, &v[j * vrow..(j + 1) * vrow])?;
                }
            }
        }
        let seqs = vec![seq; n];
        // A restored prefix ends before any image still being decoded: a cell's grid
        // positions only order cells of one time, which a restored cell never shares with a
        // later token.
        let grid: Vec<[i32; 2]> = state.pos[..n].iter().map(|&p| [p, p]).collect();
        self.apply(&cells, &state.pos[..n], &seqs, &grid);
        Ok(())
    }

    /// A cache tensor's storage and the bytes of one cell's row.
    fn storage(
        &self,
        ctx: &Context,
        bindings: &Bindings,
        id: TensorId,
    ) -> Result<(tessera_backend::Storage, usize)> {
        let d = ctx.get(id);
        let s = bindings.storage(ctx, id).ok_or_else(|| LlamaError::BadValue {
            key: d.name.clone(),
            reason: "the cache tensor has no storage in these bindings".into(),
        })?;
        Ok((s, d.n_bytes() / self.cells.len()))
    }
}
