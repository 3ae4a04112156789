//! Passes 1 to 4 of `ggml_backend_sched_split_graph`: which backend computes each node and
//! holds each tensor. The split pass ([`crate::split`]) then cuts the node list where the
//! backend changes.
//!
//! 1. **From pre-allocated data**: a tensor already stored (weights, KV cache, or a view of
//!    them) goes to the highest-priority backend that reads its buffer and runs its op; a graph
//!    input goes to the last backend (the CPU); a node reading a weight runs where the weight
//!    is (not ROPE or FLASH_ATTN_EXT: their small tensors must not decide), unless the weight
//!    is in host memory and a higher-priority backend's `offload_op` asks for the node.
//! 2. **Expand**: assignments spread to unassigned neighbours along the node list, first those
//!    of non-CPU backends (down, then up), then any (down, then up), wherever the backend
//!    supports the node. View nodes are skipped.
//! 3. **Upgrade**: an unassigned node goes to the backend that supports it and can read the most
//!    of its sources; an assigned node moves to a higher-priority backend with the same buffer
//!    type that supports it and reads all its sources.
//! 4. **Sources and views**: a view takes its source's backend; an unassigned source takes its
//!    consumer's.

use crate::{Result, SchedError};
use std::sync::Arc;
use tessera_backend::{Backend, Bindings, BufferType, BufferUsage};
use tessera_tensor::graph::{Context, Flags, Graph, Op, TensorId};

/// What the passes ask of the backends.
pub(crate) struct Backends<'a> {
    pub(crate) list: &'a [Box<dyn Backend>],
    pub(crate) bufts: &'a [Arc<dyn BufferType>],
    pub(crate) op_offload: bool,
}

impl Backends<'_> {
    fn n(&self) -> usize {
        self.list.len()
    }

    /// Whether backend `b` can compute `id` (leafs and views need no kernel).
    pub(crate) fn supports_op(&self, ctx: &Context, b: usize, id: TensorId) -> bool {
        let op = ctx.get(id).op;
        op == Op::None || op.is_view() || self.list[b].supports_op(ctx, id)
    }
}

/// Whether backend `b` can read `t`: where it is stored, or where it will be (its assigned
/// backend's buffer type, or its view source's).
pub(crate) fn readable(
    ctx: &Context,
    bindings: &Bindings,
    be: &Backends<'_>,
    a: &Assignment,
    t: TensorId,
    b: usize,
) -> bool {
    if let Some(s) = bindings.storage(ctx, t) {
        return be.list[b].supports_buffer(&*s.buffer);
    }
    let owner = a.get(t).or_else(|| ctx.get(t).view_src.and_then(|v| a.get(v)));
    owner.is_some_and(|o| o == b || be.list[b].supports_buffer_type(&*be.bufts[o]))
}

/// The backend of every tensor of one graph, by tensor index (`None`: not decided).
pub(crate) struct Assignment {
    pub(crate) of: Vec<Option<usize>>,
}

impl Assignment {
    pub(crate) fn get(&self, id: TensorId) -> Option<usize> {
        self.of.get(id.index()).copied().flatten()
    }

    fn set(&mut self, id: TensorId, b: usize) {
        if self.of.len() <= id.index() {
            self.of.resize(id.index() + 1, None);
        }
        self.of[id.index()] = Some(b);
    }
}

struct Passes<'a> {
    ctx: &'a Context,
    bindings: &'a Bindings,
    be: &'a Backends<'a>,
    a: Assignment,
}

impl Passes<'_> {
    /// The highest-priority backend that reads `t`'s buffer and runs `op`
    /// (`ggml_backend_sched_backend_from_buffer`); `None` if `t` is not stored yet.
    fn backend_from_buffer(&self, t: TensorId, op: TensorId) -> Option<usize> {
        let s = self.bindings.storage(self.ctx, t)?;
        (0..self.be.n()).find(|&b| {
            self.be.list[b].supports_buffer(&*s.buffer) && self.be.supports_op(self.ctx, b, op)
        })
    }

    fn buffer_supported(&self, t: TensorId, b: usize) -> bool {
        readable(self.ctx, self.bindings, self.be, &self.a, t, b)
    }

    /// Pass 1 for one tensor (`ggml_backend_sched_backend_id_from_cur`).
    fn backend_from_cur(&self, id: TensorId) -> Result<Option<usize>> {
        let ctx = self.ctx;
        let desc = ctx.get(id);
        if let Some(b) = self.backend_from_buffer(id, id) {
            return Ok(Some(b));
        }
        if let Some(s) = self.bindings.storage(ctx, id) {
            return Err(SchedError::Stranded {
                name: desc.name.clone(),
                buffer: s.buffer.name().to_string(),
                op: desc.op.name(),
            });
        }
        if desc.flags.contains(Flags::INPUT) {
            return Ok(Some(self.be.n() - 1));
        }
        if matches!(desc.op, Op::Rope(_) | Op::FlashAttnExt { .. }) {
            return Ok(None);
        }
        for src in desc.sources() {
            let Some(s) = self.bindings.storage(ctx, src) else { continue };
            if s.buffer.usage() != BufferUsage::Weights {
                continue;
            }
            let src_b = self.backend_from_buffer(src, id);
            let last = self.be.n() - 1;
            if self.be.op_offload && src_b == Some(last) && s.buffer.is_host() {
                if let Some(b) = (0..last).find(|&b| {
                    self.be.supports_op(ctx, b, id) && self.be.list[b].offload_op(ctx, id)
                }) {
                    return Ok(Some(b));
                }
            }
            return Ok(src_b);
        }
        Ok(None)
    }

    fn pass1(&mut self, graph: &Graph) -> Result<()> {
        for &leaf in graph.leafs() {
            if self.a.get(leaf).is_none() {
                if let Some(b) = self.backend_from_cur(leaf)? {
                    self.a.set(leaf, b);
                }
            }
        }
        for &node in graph.nodes() {
            if self.a.get(node).is_some() {
                continue;
            }
            if let Some(b) = self.backend_from_cur(node)? {
                self.a.set(node, b);
            }
            for src in self.ctx.get(node).sources() {
                if self.a.get(src).is_none() {
                    if let Some(b) = self.backend_from_cur(src)? {
                        self.a.set(src, b);
                    }
                }
            }
        }
        Ok(())
    }

    /// One sweep of pass 2 over `order`; `skip_cpu`: the last backend's assignments do not
    /// spread (the "GPU" sweeps).
    fn expand(&mut self, order: &[TensorId], skip_cpu: bool) {
        let last = self.be.n() - 1;
        let mut cur: Option<usize> = None;
        for &node in order {
            if self.ctx.get(node).op.is_view() {
                continue;
            }
            match self.a.get(node) {
                Some(b) => cur = if skip_cpu && b == last { None } else { Some(b) },
                None => {
                    if let Some(b) = cur {
                        if self.be.supports_op(self.ctx, b, node) {
                            self.a.set(node, b);
                        }
                    }
                }
            }
        }
    }

    fn pass2(&mut self, graph: &Graph) {
        let down: Vec<TensorId> = graph.nodes().to_vec();
        let up: Vec<TensorId> = down.iter().rev().copied().collect();
        self.expand(&down, true);
        self.expand(&up, true);
        self.expand(&down, false);
        self.expand(&up, false);
    }

    fn pass3(&mut self, graph: &Graph) -> Result<()> {
        let ctx = self.ctx;
        for &node in graph.nodes() {
            let desc = ctx.get(node);
            if desc.op.is_view() {
                continue;
            }
            match self.a.get(node) {
                None => {
                    let mut best: Option<(usize, usize)> = None;
                    for b in 0..self.be.n() {
                        if !self.be.supports_op(ctx, b, node) {
                            continue;
                        }
                        let n = desc
                            .sources()
                            .filter(|&s| {
                                let known = self.a.get(s).is_some()
                                    || ctx.get(s).view_src.is_some_and(|v| self.a.get(v).is_some());
                                known && self.buffer_supported(s, b)
                            })
                            .count();
                        if best.is_none_or(|(_, bn)| n > bn) {
                            best = Some((b, n));
                        }
                    }
                    match best {
                        Some((b, _)) => self.a.set(node, b),
                        None => {
                            return Err(SchedError::Unsupported {
                                op: desc.op.name(),
                                name: desc.name.clone(),
                                index: node.index(),
                            })
                        }
                    }
                }
                Some(cur) => {
                    let same = |b: usize| {
                        std::ptr::addr_eq(
                            Arc::as_ptr(&self.be.bufts[b]),
                            Arc::as_ptr(&self.be.bufts[cur]),
                        ) || self.be.bufts[b].name() == self.be.bufts[cur].name()
                    };
                    if let Some(b) = (0..cur).find(|&b| {
                        same(b)
                            && self.be.supports_op(ctx, b, node)
                            && desc.sources().all(|s| self.buffer_supported(s, b))
                    }) {
                        self.a.set(node, b);
                    }
                }
            }
        }
        Ok(())
    }

    fn pass4(&mut self, graph: &Graph) {
        let ctx = self.ctx;
        for &node in graph.nodes() {
            let desc = ctx.get(node);
            let mut cur = self.a.get(node);
            if cur.is_none() {
                if let Some(b) = desc.view_src.and_then(|v| self.a.get(v)) {
                    self.a.set(node, b);
                    cur = Some(b);
                }
            }
            for src in desc.sources() {
                if self.a.get(src).is_some() {
                    continue;
                }
                let b = match ctx.get(src).view_src {
                    Some(v) => self.a.get(v),
                    None => cur,
                };
                if let Some(b) = b {
                    self.a.set(src, b);
                }
            }
        }
    }
}

/// Runs passes 1 to 4 over `graph`, starting from the user's `pinned` assignments.
pub(crate) fn assign(
    ctx: &Context,
    graph: &Graph,
    bindings: &Bindings,
    be: &Backends<'_>,
    pinned: &[(TensorId, usize)],
) -> Result<Assignment> {
    let mut p = Passes { ctx, bindings, be, a: Assignment { of: vec![None; ctx.len()] } };
    for &(id, b) in pinned {
        p.a.set(id, b);
    }
    p.pass1(graph)?;
    p.pass2(graph);
    p.pass3(graph)?;
    p.pass4(graph);
    // A view node whose source is unassigned (a view of a view of an input) and leafs nobody
    // placed: the node's backend, or the last one.
    for &node in graph.nodes() {
        if p.a.get(node).is_none() {
            let b = ctx.get(node).view_src.and_then(|v| p.a.get(v)).unwrap_or(be.n() - 1);
            p.a.set(node, b);
        }
    }
    Ok(p.a)
}
