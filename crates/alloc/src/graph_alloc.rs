//! [`GraphAllocator`]: plans a graph, keeps one set of buffers per buffer type, and binds the
//! graph's tensors into them (ggml's `ggml_gallocr`).

use crate::error::{AllocError, Result};
use crate::plan::{plan_graph, Plan, PoolSpec};
use std::sync::{Arc, Weak};
use tessera_backend::{Bindings, Buffer, BufferType};
use tessera_tensor::graph::{Context, Graph, TensorId};

/// The memory of one distinct buffer type: its chunks' buffers.
#[derive(Debug)]
struct Pool {
    buft: Arc<dyn BufferType>,
    /// One buffer per chunk of the virtual buffer.
    buffers: Vec<Arc<dyn Buffer>>,
}

/// Plans where every tensor of a graph lives, with reuse, and binds them into buffers it owns.
///
/// One allocator serves one or more buffer types (buffer ids `0..n`); each distinct type gets
/// its own memory, made of up to [`MAX_CHUNKS`](crate::MAX_CHUNKS) buffers of at most the
/// type's `max_size`. Typical use:
///
/// 1. bind the weights (e.g. with [`alloc_tensors`](crate::alloc_tensors)),
/// 2. [`reserve_bound`](GraphAllocator::reserve_bound) the worst-case graph (largest batch), which
///    sizes and allocates the buffers,
/// 3. [`alloc_graph`](GraphAllocator::alloc_graph) each graph to run: the graph is planned again
///    (cheap: one pass over the nodes) and bound into the same buffers, which grow only if this
///    graph needs more than any before.
///
/// Buffers are never shrunk. Tensors bound to this allocator's buffers by an earlier call count
/// as unbound, so a graph can be allocated again with the same [`Bindings`]; their bytes are
/// overwritten by later graphs, so read outputs before allocating the next graph.
#[derive(Debug)]
pub struct GraphAllocator {
    /// Buffer id to pool index (buffer ids sharing one buffer type share memory).
    pool_of: Vec<usize>,
    pools: Vec<Pool>,
    /// Buffers replaced by larger ones; bindings may still point into them.
    retired: Vec<Weak<dyn Buffer>>,
    last_plan: Option<Plan>,
    n_buffer_allocs: usize,
}

fn same_buffer(a: &Arc<dyn Buffer>, b: &Arc<dyn Buffer>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}

impl GraphAllocator {
    /// An allocator for one buffer type (every tensor gets buffer id 0).
    pub fn new(buft: Arc<dyn BufferType>) -> Self {
        GraphAllocator {
            pool_of: vec![0],
            pools: vec![Pool { buft, buffers: Vec::new() }],
            retired: Vec::new(),
            last_plan: None,
            n_buffer_allocs: 0,
        }
    }

    /// An allocator for several buffer types, buffer id `i` being `bufts[i]` (`ggml_gallocr_new_n`).
    /// Ids given the same buffer type (the same `Arc`) share one memory.
    pub fn new_multi(bufts: Vec<Arc<dyn BufferType>>) -> Result<Self> {
        if bufts.is_empty() {
            return Err(AllocError::NoBufferTypes);
        }
        let mut pools: Vec<Pool> = Vec::new();
        let mut pool_of = Vec::with_capacity(bufts.len());
        for buft in bufts {
            let same = |p: &Pool| std::ptr::addr_eq(Arc::as_ptr(&p.buft), Arc::as_ptr(&buft));
            match pools.iter().position(same) {
                Some(i) => pool_of.push(i),
                None => {
                    pool_of.push(pools.len());
                    pools.push(Pool { buft, buffers: Vec::new() });
                }
            }
        }
        Ok(GraphAllocator {
            pool_of,
            pools,
            retired: Vec::new(),
            last_plan: None,
            n_buffer_allocs: 0,
        })
    }

    /// Number of buffer ids.
    pub fn n_buffer_ids(&self) -> usize {
        self.pool_of.len()
    }

    /// The buffer type of buffer id `buffer_id`.
    ///
    /// # Panics
    /// If `buffer_id` is out of range.
    pub fn buffer_type(&self, buffer_id: usize) -> &Arc<dyn BufferType> {
        &self.pools[self.pool_of[buffer_id]].buft
    }

    /// Whether `buffer` is one of this allocator's (current or replaced) buffers.
    pub fn owns(&self, buffer: &Arc<dyn Buffer>) -> bool {
        self.pools.iter().flat_map(|p| &p.buffers).any(|b| same_buffer(b, buffer))
            || self
                .retired
                .iter()
                .any(|w| w.strong_count() > 0 && std::ptr::addr_eq(w.as_ptr(), Arc::as_ptr(buffer)))
    }

    /// Plans `graph` without allocating anything: every tensor is in buffer id 0 (or as `assign`
    /// says), tensors bound in `bindings` (to buffers not this allocator's) are left alone.
    pub fn plan(
        &self,
        ctx: &Context,
        graph: &Graph,
        bindings: &Bindings,
        assign: Option<&dyn Fn(TensorId) -> usize>,
    ) -> Result<Plan> {
        let specs: Vec<PoolSpec<'_>> =
            self.pools.iter().map(|p| PoolSpec { buft: &p.buft }).collect();
        let is_bound =
            |id: TensorId| bindings.storage(ctx, id).is_some_and(|s| !self.owns(&s.buffer));
        let zero = |_: TensorId| 0;
        plan_graph(ctx, graph, &specs, &self.pool_of, assign.unwrap_or(&zero), &is_bound)
    }

    /// Sizes the buffers for `graph`, the worst case to come (`ggml_gallocr_reserve`): plans it
    /// with no tensor bound (weights and all are counted) and grows every buffer that is too
    /// small. See [`reserve_bound`](GraphAllocator::reserve_bound) to leave bound weights out.
    pub fn reserve(&mut self, ctx: &Context, graph: &Graph) -> Result<()> {
        self.reserve_bound(ctx, graph, &Bindings::new())
    }

    /// [`reserve`](GraphAllocator::reserve), leaving out the tensors already bound in `bindings`.
    pub fn reserve_bound(
        &mut self,
        ctx: &Context,
        graph: &Graph,
        bindings: &Bindings,
    ) -> Result<()> {
        self.reserve_n(ctx, graph, bindings, &|_| 0)
    }

    /// [`reserve_bound`](GraphAllocator::reserve_bound) with tensors spread over buffer ids by
    /// `assign` (`ggml_gallocr_reserve_n`): a view's storage follows its source's id.
    pub fn reserve_n(
        &mut self,
        ctx: &Context,
        graph: &Graph,
        bindings: &Bindings,
        assign: &dyn Fn(TensorId) -> usize,
    ) -> Result<()> {
        let plan = self.plan(ctx, graph, bindings, Some(assign))?;
        self.ensure_buffers(&plan)?;
        self.last_plan = Some(plan);
        Ok(())
    }

    /// Plans `graph` and binds every tensor that needs storage into this allocator's buffers,
    /// growing them if the graph needs more than reserved (`ggml_gallocr_alloc_graph`). Tensors
    /// already bound elsewhere (weights, KV cache) are left alone; views need no binding.
    pub fn alloc_graph(
        &mut self,
        ctx: &Context,
        graph: &Graph,
        bindings: &mut Bindings,
    ) -> Result<()> {
        self.alloc_graph_n(ctx, graph, bindings, &|_| 0)
    }

    /// [`alloc_graph`](GraphAllocator::alloc_graph) with tensors spread over buffer ids by
    /// `assign`.
    pub fn alloc_graph_n(
        &mut self,
        ctx: &Context,
        graph: &Graph,
        bindings: &mut Bindings,
        assign: &dyn Fn(TensorId) -> usize,
    ) -> Result<()> {
        let plan = self.plan(ctx, graph, bindings, Some(assign))?;
        self.ensure_buffers(&plan)?;
        for (id, pl) in plan.placements() {
            let buffer = &self.pools[self.pool_of[pl.buffer_id]].buffers[pl.chunk];
            bindings.bind(ctx, id, buffer.clone(), pl.offset)?;
        }
        self.last_plan = Some(plan);
        Ok(())
    }

    /// Allocates the chunks the plan needs that are missing or too small; keeps the rest.
    fn ensure_buffers(&mut self, plan: &Plan) -> Result<()> {
        self.retired.retain(|w| w.strong_count() > 0);
        for (p, pool) in self.pools.iter_mut().enumerate() {
            for (c, &need) in plan.pool_chunk_sizes(p).iter().enumerate() {
                if pool.buffers.get(c).is_some_and(|b| b.size() >= need) {
                    continue;
                }
                let buffer = pool.buft.alloc(need)?;
                self.n_buffer_allocs += 1;
                if c < pool.buffers.len() {
                    let old = std::mem::replace(&mut pool.buffers[c], buffer);
                    self.retired.push(Arc::downgrade(&old));
                } else {
                    pool.buffers.push(buffer);
                }
            }
        }
        Ok(())
    }

    /// The plan of the last [`reserve`](GraphAllocator::reserve) or
    /// [`alloc_graph`](GraphAllocator::alloc_graph).
    pub fn last_plan(&self) -> Option<&Plan> {
        self.last_plan.as_ref()
    }

    /// Bytes of the buffers allocated for each buffer id (`ggml_gallocr_get_buffer_size`); an id
    /// sharing its buffer type with a lower id reports 0, so the sum counts memory once.
    pub fn buffer_sizes(&self) -> Vec<usize> {
        (0..self.pool_of.len())
            .map(|id| {
                let p = self.pool_of[id];
                if self.pool_of[..id].contains(&p) {
                    0
                } else {
                    self.pools[p].buffers.iter().map(|b| b.size()).sum()
                }
            })
            .collect()
    }

    /// Bytes the last planned graph needed across all buffers (its high-water marks); at most the
    /// sum of [`buffer_sizes`](GraphAllocator::buffer_sizes).
    pub fn peak_bytes(&self) -> usize {
        self.last_plan.as_ref().map_or(0, Plan::total_bytes)
    }

    /// The chunk buffers of buffer id `buffer_id`.
    ///
    /// # Panics
    /// If `buffer_id` is out of range.
    pub fn buffers(&self, buffer_id: usize) -> &[Arc<dyn Buffer>] {
        &self.pools[self.pool_of[buffer_id]].buffers
    }

    /// How many buffers this allocator has allocated so far (each chunk counts; a grown chunk
    /// counts again).
    pub fn n_buffer_allocs(&self) -> usize {
        self.n_buffer_allocs
    }
}
