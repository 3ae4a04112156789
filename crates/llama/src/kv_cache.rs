//! The KV cache (llama.cpp's `llama_kv_cache`): per-layer K and V tensors preallocated in one
//! host buffer, and cells that record each slot's position and sequences.
//!
//! A micro-batch takes free cells from a ring head (`find_slot`); the attention reads the
//! first `n_kv` cells (a multiple of 256, as llama.cpp pads) and the mask hides empty cells,
//! other sequences, the future (causal) and, for sliding-window layers, cells `n_swa` or more
//! positions back. One cache serves the sliding-window layers too: llama.cpp's default
//! (`swa_full`) keeps a full-size SWA cache, which holds exactly the same cells.

use crate::hparams::HParams;
use crate::{LlamaError, Result};
use std::sync::Arc;
use tessera_alloc::alloc_tensors;
use tessera_backend::{Bindings, Buffer, BufferType, HostBufferType};
use tessera_tensor::graph::{Context, TensorId};
use tessera_tensor::DType;

/// Largest number of sequences (cells record sequences as bits of a `u64`).
pub const MAX_SEQ: usize = 64;

/// One slot of the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cell {
    /// Position of the token stored here; -1 when empty.
    pub pos: i32,
    /// Sequences the cell belongs to (bit `s` for sequence `s`).
    pub seqs: u64,
    /// M-RoPE's (height, width) positions of the token (an image's grid; a text token's are
    /// its position twice): among cells of one time, the causal mask orders by them.
    pub grid: [i32; 2],
}

impl Cell {
    const EMPTY: Cell = Cell { pos: -1, seqs: 0, grid: [-1, -1] };

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.seqs == 0
    }
}

mod state;
pub use state::SeqState;

/// Which free cells a micro-batch's tokens take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CellOrder {
    /// Each sequence's new tokens go after the cells it holds where there is room (else the
    /// first free cell from the ring head): a sequence's cells stay in position order whatever
    /// shares the cache, so a request gets the bits it gets alone (the server's batching).
    #[default]
    BySequence,
    /// llama.cpp's `find_slot`: the first free cells from the ring head, which removals and
    /// shifts move back to the first cell they free (so a shifted context fills the hole it
    /// left, as llama.cpp's does, and attention sums the cells in llama.cpp's order).
    RingHead,
}

/// The cache: cells plus the K/V tensors of every layer.
pub struct KvCache {
    cells: Vec<Cell>,
    /// Per cell, how far its position moved since K was last rotated (llama.cpp's
    /// `shift`); applied by the next decode's K-shift.
    shift: Vec<i32>,
    has_shift: bool,
    head: usize,
    /// How a micro-batch's cells are chosen.
    pub order: CellOrder,
    /// The tensors per layer (ids in the context the cache was created in).
    pub layers: Vec<LayerCache>,
    /// Whether V is stored transposed (the non-flash-attention path).
    pub v_trans: bool,
    /// Whether a token is kept from the cells after its own position (llama.cpp's
    /// `causal_attn`, switched off for an image's tokens by `llama_set_causal_attn`).
    pub causal: bool,
    _buffers: Vec<Arc<dyn Buffer>>,
}

impl std::fmt::Debug for KvCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvCache")
            .field("size", &self.cells.len())
            .field("used", &self.used())
            .finish()
    }
}

impl KvCache {
    /// Adds K and V tensors of `size` cells for every layer to `ctx`, allocates and zeroes
    /// them in one host buffer and binds them in `bindings`.
    pub fn new(
        ctx: &mut Context,
        bindings: &mut Bindings,
        hp: &HParams,
        size: usize,
        types: (DType, DType),
        v_trans: bool,
    ) -> Result<KvCache> {
        let host: Arc<dyn BufferType> = Arc::new(HostBufferType);
        Self::new_placed(ctx, bindings, hp, size, types, v_trans, &|_| host.clone())
    }

    /// [`new`](Self::new) with each layer's K and V in memory of the buffer type `layer_buft`
    /// gives for it (llama.cpp keeps an offloaded layer's cache on its device); layers sharing
    /// a buffer type (by name) share buffers.
    pub fn new_placed(
        ctx: &mut Context,
        bindings: &mut Bindings,
        hp: &HParams,
        size: usize,
        (type_k, type_v): (DType, DType),
        v_trans: bool,
        layer_buft: &dyn Fn(usize) -> Arc<dyn BufferType>,
    ) -> Result<KvCache> {
        let mut layers = Vec::with_capacity(hp.n_layer);
        for il in 0..hp.n_layer {
            let check = |t: DType, width: usize, what: &str| -> Result<()> {
                if width % t.block_size() != 0 || !tessera_tensor::quant::can_quantize(t) {
                    return Err(LlamaError::TensorType {
                        name: format!("cache_{what}_l{il}"),
                        dtype: t,
                        reason: format!("cannot hold rows of {width} values"),
                    });
                }
                Ok(())
            };
            check(type_k, hp.n_embd_k_gqa(il), "k")?;
            check(type_v, hp.n_embd_v_gqa(il), "v")?;
            let k = ctx.new_tensor(type_k, &[hp.n_embd_k_gqa(il), size])?;
            ctx.set_name(k, &format!("cache_k_l{il}"));
            let v = ctx.new_tensor(type_v, &[hp.n_embd_v_gqa(il), size])?;
            ctx.set_name(v, &format!("cache_v_l{il}"));
            layers.push(LayerCache { k, v });
        }
        let mut groups: Vec<(Arc<dyn BufferType>, Vec<TensorId>)> = Vec::new();
        for (il, l) in layers.iter().enumerate() {
            let buft = layer_buft(il);
            match groups.iter_mut().find(|(b, _)| b.name() == buft.name()) {
                Some((_, ids)) => ids.extend([l.k, l.v]),
                None => groups.push((buft, vec![l.k, l.v])),
            }
        }
        let mut buffers = Vec::new();
        for (buft, ids) in &groups {
            buffers.extend(alloc_tensors(buft, ctx, ids.iter().copied(), bindings)?);
        }
        Ok(KvCache {
            cells: vec![Cell::EMPTY; size],
            shift: vec![0; size],
            has_shift: false,
            head: 0,
            order: CellOrder::default(),
            causal: true,
            layers,
            v_trans,
            _buffers: buffers,
        })
    }

    /// Number of cells.
    pub fn size(&self) -> usize {
        self.cells.len()
    }

    /// Cells in use.
    pub fn used(&self) -> usize {
        self.cells.iter().filter(|c| !c.is_empty()).count()
    }

    /// The cells.
    pub fn cells(&self) -> &[Cell] {
        &self.cells
    }

    /// Finds `n` free cells starting at the ring head (they need not be contiguous).
    pub fn find_slot(&self, n: usize) -> Result<Vec<usize>> {
        self.find_slot_for(&vec![0; n])
    }

    /// Finds a free cell for each token of sequences `seqs`, each after every cell its
    /// sequence already holds where the cache has room there: a sequence's cells then stay in
    /// position order, so attention sums its cells in the same order whatever other
    /// sequences share the cache (a request gets the bits it would get alone). Where no cell
    /// is free past them, the first free cell from the ring head.
    pub fn find_slot_for(&self, seqs: &[u32]) -> Result<Vec<usize>> {
        let n = seqs.len();
        let size = self.cells.len();
        let free = size - self.used();
        if n > free {
            return Err(LlamaError::ContextFull { needed: n, free, size });
        }
        if self.order == CellOrder::RingHead {
            return Ok(self.ring_head_cells(n));
        }
        let mut taken = vec![false; size];
        // The cell after the last one each sequence holds (or was given in this call).
        let mut after: std::collections::HashMap<u32, usize> = std::collections::HashMap::new();
        let mut out = Vec::with_capacity(n);
        for &s in seqs {
            let start = *after.entry(s).or_insert_with(|| {
                self.cells
                    .iter()
                    .rposition(|c| c.seqs & (1u64 << s) != 0)
                    .map_or(self.head, |i| i + 1)
            });
            let ordered = (start..size).find(|&i| self.cells[i].is_empty() && !taken[i]);
            let cell = match ordered {
                Some(c) => c,
                None => (0..size)
                    .map(|k| (self.head + k) % size)
                    .find(|&i| self.cells[i].is_empty() && !taken[i])
                    .expect("counted free cells"),
            };
            taken[cell] = true;
            after.insert(s, cell + 1);
            out.push(cell);
        }
        Ok(out)
    }

    /// llama.cpp's `find_slot` (not contiguous): `n` free cells scanning from the head,
    /// restarting from 0 when many cells are free before it.
    fn ring_head_cells(&self, n: usize) -> Vec<usize> {
        let size = self.cells.len();
        let mut head = self.head;
        if head > self.used() + 2 * n {
            head = 0;
        }
        (0..size).map(|k| (head + k) % size).filter(|&i| self.cells[i].is_empty()).take(n).collect()
    }

    /// Stores tokens' positions, sequences and M-RoPE grid positions in `slots`, and moves the
    /// head past them.
    pub fn apply(&mut self, slots: &[usize], pos: &[i32], seqs: &[u32], grid: &[[i32; 2]]) {
        for (((&s, &p), &q), &g) in slots.iter().zip(pos).zip(seqs).zip(grid) {
            self.cells[s] = Cell { pos: p, seqs: 1u64 << q, grid: g };
            self.shift[s] = 0;
        }
        if let Some(&last) = slots.last() {
            self.head = (last + 1) % self.cells.len();
        }
    }

    /// Empties the given cells (undoing [`apply`](Self::apply) after a failed compute).
    pub fn release(&mut self, slots: &[usize]) {
        for &s in slots {
            self.cells[s] = Cell::EMPTY;
            self.shift[s] = 0;
        }
    }

    /// Removes sequence `seq` (all sequences when `None`) from the cells with positions in
    /// `[p0, p1)` (`llama_memory_seq_rm`); as there, a negative `p0` means 0 and a negative
    /// `p1` the end.
    pub fn seq_rm(&mut self, seq: Option<u32>, p0: i32, p1: i32) {
        let mask = seq.map_or(u64::MAX, |s| 1u64 << s);
        let p0 = p0.max(0);
        let p1 = if p1 < 0 { i32::MAX } else { p1 };
        let mut first_freed = None;
        for (i, c) in self.cells.iter_mut().enumerate() {
            if !c.is_empty() && c.pos >= p0 && c.pos < p1 && c.seqs & mask != 0 {
                c.seqs &= !mask;
                if c.seqs == 0 {
                    *c = Cell::EMPTY;
                    self.shift[i] = 0;
                    first_freed.get_or_insert(i);
                }
            }
        }
        self.head = match self.order {
            CellOrder::BySequence => 0,
            // llama.cpp: the head moves back to the first freed cell, never forward.
            CellOrder::RingHead => first_freed.map_or(self.head, |f| f.min(self.head)),
        };
    }

    /// Adds `delta` to the positions of sequence `seq`'s cells in `[p0, p1)`
    /// (`llama_memory_seq_add`; negative bounds are open): cells moved below position 0 are
    /// emptied, and the next decode first rotates the moved cells' K by `delta` (the K-shift),
    /// so they read as if computed at their new positions. A cell shared with other sequences
    /// moves for them too, as in llama.cpp.
    pub fn seq_add(&mut self, seq: u32, p0: i32, p1: i32, delta: i32) {
        let p0 = p0.max(0);
        let p1 = if p1 < 0 { i32::MAX } else { p1 };
        if delta == 0 || p0 == p1 {
            return;
        }
        let mut first_freed = None;
        for (i, c) in self.cells.iter_mut().enumerate() {
            if c.seqs & (1u64 << seq) != 0 && c.pos >= p0 && c.pos < p1 {
                c.pos += delta;
                self.shift[i] += delta;
                self.has_shift = true;
                if c.pos < 0 {
                    *c = Cell::EMPTY;
                    self.shift[i] = 0;
                    first_freed.get_or_insert(i);
                }
            }
        }
        self.head = first_freed.unwrap_or(0);
    }

    /// Whether positions moved since K was last rotated ([`seq_add`](Self::seq_add)).
    pub fn has_shift(&self) -> bool {
        self.has_shift
    }

    /// Each cell's pending position change (0 for empty cells), for the K-shift.
    pub(crate) fn shifts(&self) -> Vec<i32> {
        self.cells.iter().zip(&self.shift).map(|(c, &d)| if c.is_empty() { 0 } else { d }).collect()
    }

    /// Marks the pending shifts applied.
    pub(crate) fn clear_shift(&mut self) {
        self.shift.iter_mut().for_each(|d| *d = 0);
        self.has_shift = false;
    }

    /// Adds sequence `dst` to the cells of sequence `src` with positions in `[p0, p1)`
    /// (`llama_memory_seq_cp`): the two share those cells (no data moves), so `dst` can
    /// continue from `src`'s prefix. Negative bounds are open, as in [`seq_rm`](Self::seq_rm).
    pub fn seq_cp(&mut self, src: u32, dst: u32, p0: i32, p1: i32) {
        let p0 = p0.max(0);
        let p1 = if p1 < 0 { i32::MAX } else { p1 };
        for c in &mut self.cells {
            if c.seqs & (1u64 << src) != 0 && c.pos >= p0 && c.pos < p1 {
                c.seqs |= 1u64 << dst;
            }
        }
    }

    /// Cells holding sequence `seq`.
    pub fn seq_cells(&self, seq: u32) -> usize {
        self.cells.iter().filter(|c| c.seqs & (1u64 << seq) != 0).count()
    }

    /// Empties every cell.
    pub fn clear(&mut self) {
        self.clear_shift();
        self.cells.fill(Cell::EMPTY);
        self.head = 0;
    }

    /// The largest position stored for `seq`, if any.
    pub fn seq_pos_max(&self, seq: u32) -> Option<i32> {
        self.cells.iter().filter(|c| c.seqs & (1u64 << seq) != 0).map(|c| c.pos).max()
    }

    /// Cells the attention must read: past the last used cell, padded to 256 (llama.cpp's
    /// `get_n_kv`), at most the whole cache.
    pub fn n_kv(&self) -> usize {
        let used_max = self.cells.iter().rposition(|c| !c.is_empty()).map_or(0, |i| i + 1);
        self.cells.len().min(256.max(used_max.next_multiple_of(256)))
    }

    /// The attention mask for tokens at `pos` of sequences `seqs`: `[n_kv, n_tokens]`, 0
    /// where token i may attend cell j, -inf elsewhere (cells of other sequences and, when
    /// causal, after its position); `n_swa > 0` also hides cells `n_swa` or more positions
    /// back. With `grid` (M-RoPE: each token's (height, width)), a cell of the token's own
    /// position is after it when its grid position is (llama.cpp's `is_2d_gt`).
    pub fn mask(
        &self,
        n_kv: usize,
        (pos, grid): (&[i32], Option<&[[i32; 2]]>),
        seqs: &[u32],
        n_swa: usize,
    ) -> Vec<f32> {
        let mut m = vec![f32::NEG_INFINITY; n_kv * pos.len()];
        for (i, (&p1, &s)) in pos.iter().zip(seqs).enumerate() {
            let row = &mut m[i * n_kv..(i + 1) * n_kv];
            let later = |c: &Cell| match grid {
                Some(g) if c.pos == p1 => {
                    let [y1, x1] = g[i];
                    c.grid[0] > y1 || (c.grid[0] == y1 && c.grid[1] > x1)
                }
                _ => c.pos > p1,
            };
            for (j, c) in self.cells[..n_kv].iter().enumerate() {
                let visible = c.seqs & (1u64 << s) != 0
                    && (!self.causal || !later(c))
                    && (n_swa == 0 || i64::from(p1) - i64::from(c.pos) < n_swa as i64);
                if visible {
                    row[j] = 0.0;
                }
            }
        }
        m
    }

    /// The inputs of a micro-batch of `n_tok` tokens reading `n_kv` cells, added to `ctx`
    /// (see [`KvInputs`]): the masks' type and V's index layout follow the cache's own layout.
    pub fn new_inputs(
        &self,
        ctx: &mut Context,
        hp: &HParams,
        n_tok: usize,
        n_kv: usize,
    ) -> Result<KvInputs> {
        // Flash attention (V in rows) reads an F16 mask; MUL_MAT + SOFT_MAX an F32 one.
        let mask_type = if self.v_trans { DType::F32 } else { DType::F16 };
        let n_v = if self.v_trans { n_tok * hp.n_embd_v_gqa(0) } else { n_tok };
        Ok(KvInputs {
            mask: graph_input(ctx, mask_type, &[n_kv, n_tok], "kq_mask")?,
            mask_swa: match hp.n_swa {
                0 => None,
                _ => Some(graph_input(ctx, mask_type, &[n_kv, n_tok], "kq_mask_swa")?),
            },
            k_idxs: graph_input(ctx, DType::I64, &[n_tok], "k_idxs")?,
            v_idxs: graph_input(ctx, DType::I64, &[n_v], "v_idxs")?,
        })
    }

    /// Fills `inp` for tokens at `pos` of sequences `seqs`, whose K and V go to cells
    /// `slots`, reading the first `n_kv` cells.
    #[allow(clippy::too_many_arguments)]
    pub fn set_inputs(
        &self,
        inp: &KvInputs,
        ctx: &Context,
        bindings: &Bindings,
        hp: &HParams,
        n_kv: usize,
        (pos, grid): (&[i32], &[[i32; 2]]),
        seqs: &[u32],
        slots: &[usize],
    ) -> Result<()> {
        let grid = hp.rope_sections.map(|_| grid);
        let set_mask = |id: TensorId, n_swa: usize| -> Result<()> {
            let m = self.mask(n_kv, (pos, grid), seqs, n_swa);
            if self.v_trans {
                Ok(bindings.set_f32(ctx, id, &m)?)
            } else {
                let bytes: Vec<u8> =
                    m.iter().flat_map(|&x| half::f16::from_f32(x).to_le_bytes()).collect();
                Ok(bindings.set(ctx, id, &bytes)?)
            }
        };
        set_mask(inp.mask, 0)?;
        if let Some(id) = inp.mask_swa {
            set_mask(id, hp.n_swa)?;
        }
        let i64_bytes =
            |v: &mut dyn Iterator<Item = i64>| v.flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        bindings.set(ctx, inp.k_idxs, &i64_bytes(&mut slots.iter().map(|&s| s as i64)))?;
        if self.v_trans {
            // V transposed: channel c of cell s at c * kv_size + s.
            let (ev, kv_size) = (hp.n_embd_v_gqa(0), self.size());
            let mut it = slots.iter().flat_map(|&s| (0..ev).map(move |c| (c * kv_size + s) as i64));
            bindings.set(ctx, inp.v_idxs, &i64_bytes(&mut it))?;
        } else {
            bindings.set(ctx, inp.v_idxs, &i64_bytes(&mut slots.iter().map(|&s| s as i64)))?;
        }
        Ok(())
    }
}

/// One layer's KV cache tensors (in the base context).
#[derive(Debug, Clone, Copy)]
pub struct LayerCache {
    /// `[n_embd_k_gqa, kv_size]`.
    pub k: TensorId,
    /// `[n_embd_v_gqa, kv_size]`, or the same bytes holding V transposed (`v_trans`).
    pub v: TensorId,
}

/// The graph inputs through which a micro-batch's attention reaches the cache: which cells
/// each token sees (the masks) and where its K and V are written (row indexes for SET_ROWS).
/// The cache makes them ([`KvCache::new_inputs`]) and fills them ([`KvCache::set_inputs`]), so
/// its layout (V in rows, or transposed per channel without flash attention) is decided in
/// one place; the graph builder reads the cache through them.
#[derive(Debug, Clone, Copy)]
pub struct KvInputs {
    /// `[n_kv, n_tokens]`: 0 where a token may attend a cell, -inf elsewhere.
    pub mask: TensorId,
    /// The same for sliding-window layers (where the model has them).
    pub mask_swa: Option<TensorId>,
    /// I64 `[n_tokens]`: the cache rows the batch's K goes to.
    pub k_idxs: TensorId,
    /// I64 cache indexes for V: `[n_tokens]`, or `[n_tokens · n_embd_v_gqa]` when transposed.
    pub v_idxs: TensorId,
}

/// A graph input tensor `name` of `dtype` and shape `ne`, added to `ctx`.
pub(crate) fn graph_input(
    ctx: &mut Context,
    dtype: DType,
    ne: &[usize],
    name: &str,
) -> Result<TensorId> {
    let id = ctx.new_tensor(dtype, ne)?;
    ctx.set_name(id, name);
    Ok(ctx.set_input(id))
}
