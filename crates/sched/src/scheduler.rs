//! [`Scheduler`]: backends in priority order, one graph allocator over their buffer types,
//! `alloc_graph` (passes, splits, memory) and `compute` (copies, then each split on its
//! backend, with events between them).

use crate::assign::{assign, Backends};
use crate::split::{split_graph, Schedule};
use crate::{Result, SchedError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tessera_alloc::GraphAllocator;
use tessera_backend::{Backend, Bindings, BufferType, Event};
use tessera_tensor::graph::{Context, Flags, Graph, TensorId};

/// How a [`Scheduler`] works (`ggml_backend_sched_new`'s flags).
#[derive(Debug, Clone, Copy)]
pub struct SchedParams {
    /// Copy slots per split input (1..=4): with more than one, evaluation N+1 copies its inputs
    /// into other memory than evaluation N reads, waiting only on the events of the slot it
    /// reuses (pipeline parallelism). Synchronous backends gain nothing from it.
    pub n_copies: usize,
    /// Let higher-priority backends take ops whose weights are in host memory when their
    /// `offload_op` asks (llama.cpp's `op_offload`, on by default).
    pub op_offload: bool,
    /// Copy split inputs buffer to buffer where the buffers can (device to device, or one
    /// transfer to or from host memory: `Buffer::copy_to`); `false` stages every copy through
    /// a host buffer (`read`, then `write`), for comparison.
    pub direct_copies: bool,
}

impl Default for SchedParams {
    fn default() -> Self {
        SchedParams { n_copies: 1, op_offload: true, direct_copies: true }
    }
}

/// How the split inputs were copied so far ([`Scheduler::copy_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CopyStats {
    /// Copied buffer to buffer (`Buffer::copy_to`).
    pub direct: usize,
    /// Staged through host memory (`read`, then `write`).
    pub staged: usize,
}

/// Asked of an [`EvalCallback`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvalPhase {
    /// Before computing: does the callback want to see this node? (Computation pauses after
    /// every node it asks for.)
    Ask,
    /// After computing a node the callback asked for: its value can be read through the
    /// bindings; return `false` to stop the evaluation.
    Observe,
}

/// llama.cpp's `cb_eval`: called with [`EvalPhase::Ask`] for each node before it is computed,
/// and with [`EvalPhase::Observe`] once each node it asked for is done.
pub type EvalCallback = Box<dyn FnMut(EvalPhase, &Context, TensorId, &Bindings) -> bool + Send>;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Runs one graph across several backends (ggml's `ggml_backend_sched`). See the crate docs.
pub struct Scheduler {
    backends: Vec<Box<dyn Backend>>,
    bufts: Vec<Arc<dyn BufferType>>,
    galloc: GraphAllocator,
    params: SchedParams,
    pinned: Vec<(TensorId, usize)>,
    cur_copy: usize,
    /// `events[backend][slot]`: recorded after the backend's last split that read that slot.
    events: Vec<Vec<Option<Box<dyn Event>>>>,
    eval_cb: Option<EvalCallback>,
    staging: Vec<u8>,
    copies: CopyStats,
    id: u64,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("backends", &self.backends.iter().map(|b| b.name()).collect::<Vec<_>>())
            .field("params", &self.params)
            .finish()
    }
}

impl Scheduler {
    /// A scheduler over `backends`, highest priority first; the last must compute in host
    /// memory (the CPU), where graph inputs are placed.
    pub fn new(backends: Vec<Box<dyn Backend>>, params: SchedParams) -> Result<Self> {
        let Some(last) = backends.last() else {
            return Err(SchedError::Backends("at least one backend is needed".into()));
        };
        if !last.buffer_type().is_host() {
            return Err(SchedError::Backends(format!(
                "the last backend must compute in host memory (the CPU); {} does not",
                last.name()
            )));
        }
        if !(1..=4).contains(&params.n_copies) {
            return Err(SchedError::Backends(format!(
                "n_copies is {}, must be 1 to 4",
                params.n_copies
            )));
        }
        let bufts: Vec<Arc<dyn BufferType>> = backends.iter().map(|b| b.buffer_type()).collect();
        let galloc = GraphAllocator::new_multi(bufts.clone())?;
        let events =
            backends.iter().map(|_| (0..params.n_copies).map(|_| None).collect()).collect();
        Ok(Scheduler {
            backends,
            bufts,
            galloc,
            params,
            pinned: Vec::new(),
            cur_copy: 0,
            events,
            eval_cb: None,
            staging: Vec::new(),
            copies: CopyStats::default(),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        })
    }

    /// How the split inputs were copied since the scheduler was made.
    pub fn copy_stats(&self) -> CopyStats {
        self.copies
    }

    /// Number of backends.
    pub fn n_backends(&self) -> usize {
        self.backends.len()
    }

    /// Backend `i` (priority order).
    pub fn backend(&self, i: usize) -> &dyn Backend {
        &*self.backends[i]
    }

    /// Backend `i`, to change its settings (threads).
    pub fn backend_mut(&mut self, i: usize) -> &mut dyn Backend {
        &mut *self.backends[i]
    }

    /// The buffer type each backend computes in, by backend index.
    pub fn buffer_types(&self) -> &[Arc<dyn BufferType>] {
        &self.bufts
    }

    /// The index of the backend called `name`.
    pub fn backend_index(&self, name: &str) -> Option<usize> {
        self.backends.iter().position(|b| b.name() == name)
    }

    /// Puts `id` on backend `b` in later schedules (`ggml_backend_sched_set_tensor_backend`);
    /// the passes start from these.
    pub fn set_tensor_backend(&mut self, id: TensorId, b: usize) {
        self.pinned.retain(|&(t, _)| t != id);
        self.pinned.push((id, b));
    }

    /// Forgets every [`set_tensor_backend`](Scheduler::set_tensor_backend).
    pub fn reset_pins(&mut self) {
        self.pinned.clear();
    }

    /// Installs (or removes) the eval callback.
    pub fn set_eval_callback(&mut self, cb: Option<EvalCallback>) {
        self.eval_cb = cb;
    }

    /// Bytes of compute memory held per backend.
    pub fn buffer_sizes(&self) -> Vec<usize> {
        self.galloc.buffer_sizes()
    }

    /// Places every node of `graph` on a backend, cuts splits, adds the input copies to `ctx`
    /// (rewiring their readers), and plans and binds memory for every tensor not already in
    /// `bindings` (`ggml_backend_sched_alloc_graph`). Set the graph inputs after this, then
    /// [`compute`](Scheduler::compute).
    pub fn alloc_graph(
        &mut self,
        ctx: &mut Context,
        graph: &Graph,
        bindings: &mut Bindings,
    ) -> Result<Schedule> {
        let schedule = self.split(ctx, graph, bindings)?;
        self.galloc.alloc_graph_n(ctx, &schedule.flat, bindings, &|id| schedule.buffer_id(id))?;
        tracing::debug!(
            splits = schedule.n_splits(),
            copies = schedule.n_copies(),
            "graph scheduled"
        );
        Ok(schedule)
    }

    /// Sizes the compute buffers for the worst graph to come (`ggml_backend_sched_reserve`),
    /// scheduling a copy of `ctx` so the caller's context is untouched.
    pub fn reserve(&mut self, ctx: &Context, graph: &Graph, bindings: &Bindings) -> Result<()> {
        let mut ctx = ctx.clone();
        let schedule = self.split(&mut ctx, graph, bindings)?;
        self.galloc.reserve_n(&ctx, &schedule.flat, bindings, &|id| schedule.buffer_id(id))?;
        Ok(())
    }

    /// Passes 1-5 without memory: the schedule `alloc_graph` would make.
    pub fn split(
        &mut self,
        ctx: &mut Context,
        graph: &Graph,
        bindings: &Bindings,
    ) -> Result<Schedule> {
        let be = Backends {
            list: &self.backends,
            bufts: &self.bufts,
            op_offload: self.params.op_offload,
        };
        let a = assign(ctx, graph, bindings, &be, &self.pinned)?;
        let (splits, backend_of, flat) =
            split_graph(ctx, graph, bindings, &be, a, self.params.n_copies, self.cur_copy)?;
        Ok(Schedule {
            backend_of,
            backend_names: self.backends.iter().map(|b| b.name().to_string()).collect(),
            splits,
            flat,
            copy_slot: self.cur_copy,
            scheduler_id: self.id,
        })
    }

    /// Runs a schedule from [`alloc_graph`](Scheduler::alloc_graph): for each split, copies its
    /// inputs onto its backend (graph inputs synchronously; others after the event of the
    /// slot's previous use), computes it, and records an event. Returns once every backend is
    /// done; the next evaluation uses the next copy slot.
    pub fn compute(
        &mut self,
        ctx: &Context,
        schedule: &Schedule,
        bindings: &Bindings,
    ) -> Result<()> {
        if schedule.scheduler_id != self.id {
            return Err(SchedError::Mismatch("made by another scheduler".into()));
        }
        let slot = schedule.copy_slot;
        let timed = tracing::enabled!(tracing::Level::TRACE);
        for split in &schedule.splits {
            let b = split.backend;
            let t0 = std::time::Instant::now();
            for input in &split.inputs {
                let copy = input.copies[slot];
                if ctx.get(input.src).flags.contains(Flags::INPUT) {
                    self.backends[b].synchronize()?;
                } else if let Some(ev) = &self.events[b][slot] {
                    ev.synchronize()?;
                } else {
                    self.backends[b].synchronize()?;
                }
                if let Some(sb) = schedule.backend_of(input.src).filter(|&sb| sb != b) {
                    self.backends[sb].synchronize()?;
                }
                let direct = self.params.direct_copies;
                if copy_tensor(ctx, bindings, input.src, copy, &mut self.staging, direct)? {
                    self.copies.direct += 1;
                } else {
                    self.copies.staged += 1;
                }
            }
            match self.eval_cb.as_mut() {
                None => self.backends[b].graph_compute(ctx, &split.graph, bindings)?,
                Some(cb) => {
                    if !compute_observed(&mut *self.backends[b], cb, ctx, &split.graph, bindings)? {
                        break;
                    }
                }
            }
            self.events[b][slot] = Some(self.backends[b].record_event()?);
            if timed {
                tracing::trace!(
                    backend = self.backends[b].name(),
                    inputs = split.inputs.len(),
                    nodes = split.graph.nodes().len(),
                    "split: copies and queueing {} us",
                    t0.elapsed().as_micros()
                );
            }
        }
        let t0 = std::time::Instant::now();
        for be in &mut self.backends {
            be.synchronize()?;
        }
        if timed {
            tracing::trace!("compute: final wait {} us", t0.elapsed().as_micros());
        }
        self.cur_copy = (self.cur_copy + 1) % self.params.n_copies;
        Ok(())
    }

    /// [`alloc_graph`](Scheduler::alloc_graph) then [`compute`](Scheduler::compute), for graphs
    /// whose inputs are already set (`ggml_backend_sched_graph_compute`).
    pub fn graph_compute(
        &mut self,
        ctx: &mut Context,
        graph: &Graph,
        bindings: &mut Bindings,
    ) -> Result<Schedule> {
        let s = self.alloc_graph(ctx, graph, bindings)?;
        self.compute(ctx, &s, bindings)?;
        Ok(s)
    }
}

/// Copies `src`'s bytes (its whole span) into `dst`'s storage: buffer to buffer where `direct`
/// and the buffers can (`true`), else through `staging` (`false`).
fn copy_tensor(
    ctx: &Context,
    bindings: &Bindings,
    src: TensorId,
    dst: TensorId,
    staging: &mut Vec<u8>,
    direct: bool,
) -> Result<bool> {
    let unbound = |id: TensorId| tessera_backend::BackendError::Unbound {
        name: ctx.get(id).name.clone(),
        index: id.index(),
    };
    let s = bindings.storage(ctx, src).ok_or_else(|| unbound(src))?;
    let d = bindings.storage(ctx, dst).ok_or_else(|| unbound(dst))?;
    let n = ctx.get(src).n_bytes();
    if direct && s.buffer.copy_to(s.offset, &*d.buffer, d.offset, n)? {
        return Ok(true);
    }
    staging.resize(n, 0);
    s.buffer.read(s.offset, &mut staging[..n])?;
    d.buffer.write(d.offset, &staging[..n])?;
    Ok(false)
}

/// A split computed in pieces, pausing after each node the callback asks for; `false` when the
/// callback asked to stop.
fn compute_observed(
    backend: &mut dyn Backend,
    cb: &mut EvalCallback,
    ctx: &Context,
    graph: &Graph,
    bindings: &Bindings,
) -> Result<bool> {
    let nodes = graph.nodes();
    let mut start = 0;
    while start < nodes.len() {
        let mut end = start;
        while end < nodes.len() && !cb(EvalPhase::Ask, ctx, nodes[end], bindings) {
            end += 1;
        }
        let stop = end.min(nodes.len() - 1);
        backend.graph_compute(ctx, &Graph::from_nodes(ctx, &nodes[start..=stop]), bindings)?;
        if end < nodes.len() && !cb(EvalPhase::Observe, ctx, nodes[end], bindings) {
            return Ok(false);
        }
        start = stop + 1;
    }
    Ok(true)
}
