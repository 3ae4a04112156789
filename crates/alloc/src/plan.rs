//! Planning: where every tensor of one graph goes (ggml's `ggml_gallocr_alloc_graph_impl`).
//!
//! The planner walks the graph once, in execution order, with one [`DynAllocator`] per pool of
//! memory, and records a [`Placement`] (pool chunk and offset) for every tensor that needs
//! storage. No memory is touched: [`GraphAllocator`](crate::GraphAllocator) turns the plan into
//! buffers and bindings.

use crate::dyn_alloc::{Address, DynAllocator};
use crate::error::{AllocError, Result};
use std::sync::Arc;
use tessera_backend::BufferType;
use tessera_tensor::graph::{Context, Flags, Graph, TensorDesc, TensorId};

/// Where one tensor's bytes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// The buffer id the tensor was assigned to (0 for a single-buffer allocator).
    pub buffer_id: usize,
    /// The chunk (one backend buffer) of that buffer id's memory.
    pub chunk: usize,
    /// Byte offset in the chunk; a multiple of the buffer type's alignment.
    pub offset: usize,
    /// Bytes reserved for the tensor: the buffer type's `alloc_size`, rounded up to the
    /// alignment.
    pub size: usize,
}

/// The plan for one graph: a placement for every tensor that needs storage from the allocator
/// (not views, not tensors bound beforehand), and the chunk sizes each pool needs.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    placements: Vec<Option<Placement>>,
    inplace: Vec<Option<TensorId>>,
    planned: Vec<TensorId>,
    pool_chunks: Vec<Vec<usize>>,
}

impl Plan {
    /// Where `id` goes; `None` for views, tensors bound beforehand, and tensors not in the graph.
    pub fn placement(&self, id: TensorId) -> Option<Placement> {
        self.placements.get(id.index()).copied().flatten()
    }

    /// For a node computed in place: the tensor whose memory it took over (the storage of the
    /// source that died at this node; for a view source, the view's own source).
    pub fn inplace_source(&self, id: TensorId) -> Option<TensorId> {
        self.inplace.get(id.index()).copied().flatten()
    }

    /// How many nodes were placed over a dying source's memory.
    pub fn n_inplace(&self) -> usize {
        self.inplace.iter().flatten().count()
    }

    /// Every placed tensor with its placement, in the order they were placed.
    pub fn placements(&self) -> impl Iterator<Item = (TensorId, Placement)> + '_ {
        self.planned.iter().map(|&id| (id, self.placements[id.index()].expect("planned")))
    }

    /// The size each chunk of pool `pool` must have (high-water marks).
    pub(crate) fn pool_chunk_sizes(&self, pool: usize) -> &[usize] {
        &self.pool_chunks[pool]
    }

    /// Bytes the plan needs across all pools: the sum of every chunk's high-water mark.
    pub fn total_bytes(&self) -> usize {
        self.pool_chunks.iter().flatten().sum()
    }
}

/// One pool of memory: a buffer type shared by one or more buffer ids.
pub(crate) struct PoolSpec<'a> {
    pub(crate) buft: &'a Arc<dyn BufferType>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Not looked at yet.
    Unplanned,
    /// Storage provided from outside (bound beforehand); never placed nor freed.
    External,
    /// Placed and holding its bytes.
    Live,
    /// Its bytes were freed, or handed to an in-place node.
    Dead,
}

/// Per-tensor bookkeeping while planning (ggml's `hash_node`).
struct Planner<'a> {
    ctx: &'a Context,
    pools: &'a [PoolSpec<'a>],
    pool_of: &'a [usize],
    assign: &'a dyn Fn(TensorId) -> usize,
    is_bound: &'a dyn Fn(TensorId) -> bool,
    allocs: Vec<DynAllocator>,
    state: Vec<State>,
    /// Nodes still to run that use the tensor as a source.
    n_children: Vec<u32>,
    /// Views of the tensor (it is their `view_src`) that are still used.
    n_views: Vec<u32>,
    /// Never freed nor donated: graph inputs and outputs, and sources of views that are.
    keep: Vec<bool>,
    plan: Plan,
}

/// The storage owner of `id`: its `view_src` for a view, else itself.
pub(crate) fn root(desc: &TensorDesc, id: TensorId) -> TensorId {
    desc.view_src.unwrap_or(id)
}

fn same_layout(a: &TensorDesc, b: &TensorDesc) -> bool {
    a.dtype == b.dtype && a.ne == b.ne && a.nb == b.nb
}

/// Plans `graph`. `pools` are the distinct memories, `pool_of` maps buffer ids to them,
/// `assign` gives each tensor's buffer id, `is_bound` says which tensors already have storage.
pub(crate) fn plan_graph(
    ctx: &Context,
    graph: &Graph,
    pools: &[PoolSpec<'_>],
    pool_of: &[usize],
    assign: &dyn Fn(TensorId) -> usize,
    is_bound: &dyn Fn(TensorId) -> bool,
) -> Result<Plan> {
    let n = ctx.len();
    let mut p = Planner {
        ctx,
        pools,
        pool_of,
        assign,
        is_bound,
        allocs: pools
            .iter()
            .map(|s| DynAllocator::new(s.buft.alignment(), s.buft.max_size()))
            .collect(),
        state: vec![State::Unplanned; n],
        n_children: vec![0; n],
        n_views: vec![0; n],
        keep: vec![false; n],
        plan: Plan {
            placements: vec![None; n],
            inplace: vec![None; n],
            planned: Vec::new(),
            pool_chunks: Vec::new(),
        },
    };
    p.run(graph)?;
    p.plan.pool_chunks = p.allocs.iter().map(DynAllocator::chunk_sizes).collect();
    Ok(p.plan)
}

impl Planner<'_> {
    fn run(&mut self, graph: &Graph) -> Result<()> {
        let ctx = self.ctx;
        // Inputs and outputs keep their storage for the whole graph; so does the source of a
        // view that is an input or output (the view's bytes are the source's).
        for &id in graph.leafs().iter().chain(graph.nodes()) {
            let d = ctx.get(id);
            if d.flags.contains(Flags::INPUT) || d.flags.contains(Flags::OUTPUT) {
                self.keep[root(d, id).index()] = true;
            }
        }
        // Leafs first: weights and constants without storage, and inputs.
        for &leaf in graph.leafs() {
            self.allocate(leaf, false)?;
        }
        // Count consumers and views; place graph inputs up front so nothing is placed over them
        // before they are read.
        for &node in graph.nodes() {
            let d = ctx.get(node);
            if let Some(v) = d.view_src {
                self.n_views[v.index()] += 1;
            }
            if d.flags.contains(Flags::INPUT) {
                self.allocate(node, false)?;
            }
            for src in d.sources() {
                self.n_children[src.index()] += 1;
                if ctx.get(src).flags.contains(Flags::INPUT) {
                    self.allocate(src, false)?;
                }
            }
        }
        for &node in graph.nodes() {
            let d = ctx.get(node);
            for src in d.sources() {
                self.allocate(src, false)?;
            }
            self.allocate(node, true)?;
            for src in d.sources() {
                self.release(src);
            }
        }
        Ok(())
    }

    /// One consumer of `parent` has run: free it (or, for a view, its source) once nothing uses
    /// it any more.
    fn release(&mut self, parent: TensorId) {
        let i = parent.index();
        self.n_children[i] -= 1;
        if self.n_children[i] != 0 || self.n_views[i] != 0 {
            return;
        }
        match self.ctx.get(parent).view_src {
            Some(v) => {
                self.n_views[v.index()] -= 1;
                if self.n_views[v.index()] == 0 && self.n_children[v.index()] == 0 {
                    self.free(v);
                }
            }
            None => self.free(parent),
        }
    }

    fn free(&mut self, id: TensorId) {
        let i = id.index();
        if self.state[i] != State::Live || self.keep[i] {
            return;
        }
        let pl = self.plan.placements[i].expect("live tensors are placed");
        let pool = self.pool_of[pl.buffer_id];
        self.allocs[pool].free(Address { chunk: pl.chunk, offset: pl.offset }, pl.size);
        self.state[i] = State::Dead;
    }

    fn buffer_id(&self, id: TensorId) -> Result<usize> {
        let b = (self.assign)(id);
        if b >= self.pool_of.len() {
            let d = self.ctx.get(id);
            return Err(AllocError::BufferId {
                name: d.name.clone(),
                index: id.index(),
                buffer_id: b,
                n_buffers: self.pool_of.len(),
            });
        }
        Ok(b)
    }

    /// Gives `id` storage unless it has some: views borrow their source's (which is placed
    /// first), bound tensors keep theirs, in-place ops take a dying source's, the rest get fresh
    /// bytes. `inplace` is set only for the node about to run in the main walk: consumer counts
    /// are complete and current only there (ggml also tries it for inputs placed up front, while
    /// the counts are still being gathered, and may then overwrite a leaf still in use).
    fn allocate(&mut self, id: TensorId, inplace: bool) -> Result<()> {
        let d = self.ctx.get(id);
        if let Some(v) = d.view_src {
            return self.allocate(v, false);
        }
        if self.state[id.index()] != State::Unplanned {
            return Ok(());
        }
        if (self.is_bound)(id) {
            self.state[id.index()] = State::External;
            return Ok(());
        }
        let buffer_id = self.buffer_id(id)?;
        let pool = self.pool_of[buffer_id];
        let buft = self.pools[pool].buft;
        let size = self.allocs[pool].aligned_size(buft.alloc_size(d));
        self.state[id.index()] = State::Live;
        if inplace && d.op.can_inplace() {
            if let Some(donor) = self.inplace_donor(id, pool, size) {
                let dp = self.plan.placements[donor.index()].expect("live donor is placed");
                if dp.size > size {
                    let tail = Address { chunk: dp.chunk, offset: dp.offset + size };
                    self.allocs[pool].free(tail, dp.size - size);
                }
                self.state[donor.index()] = State::Dead;
                self.plan.inplace[id.index()] = Some(donor);
                self.place(id, Placement { buffer_id, size, ..dp });
                return Ok(());
            }
        }
        let addr = self.allocs[pool].alloc(size).ok_or_else(|| AllocError::AddressSpace {
            buffer_type: buft.name().to_string(),
            size,
            chunks: self.allocs[pool].n_chunks(),
        })?;
        self.place(id, Placement { buffer_id, chunk: addr.chunk, offset: addr.offset, size });
        Ok(())
    }

    fn place(&mut self, id: TensorId, pl: Placement) {
        self.plan.placements[id.index()] = Some(pl);
        self.plan.planned.push(id);
    }

    /// A source of `node` whose storage `node` may take over: it dies here (this node is its
    /// last consumer and no view of it is still used), it is ours, in the same pool, not kept,
    /// and laid out exactly as `node`. A view source qualifies when it starts its source's
    /// storage and is that storage's last user. Returns the storage owner.
    fn inplace_donor(&self, node: TensorId, pool: usize, size: usize) -> Option<TensorId> {
        let nd = self.ctx.get(node);
        nd.sources().find_map(|p| {
            let pd = self.ctx.get(p);
            if self.n_children[p.index()] != 1 || self.n_views[p.index()] != 0 {
                return None;
            }
            if !same_layout(nd, pd) {
                return None;
            }
            let r = root(pd, p);
            let ri = r.index();
            if self.state[ri] != State::Live || self.keep[ri] {
                return None;
            }
            let rp = self.plan.placements[ri].expect("live tensors are placed");
            if self.pool_of[rp.buffer_id] != pool || rp.size < size {
                return None;
            }
            if r != p && (pd.view_offs != 0 || self.n_views[ri] != 1 || self.n_children[ri] != 0) {
                return None;
            }
            Some(r)
        })
    }
}
