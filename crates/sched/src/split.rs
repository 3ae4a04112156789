//! Pass 5: cutting the node list into splits (runs of nodes on one backend) and adding a copy
//! for every source a split's backend cannot read; the result is a [`Schedule`].
//!
//! A new split starts where the backend changes, or where a node on the same backend reads a
//! weight from memory the backend cannot reach (so the copies of offloaded weights can share
//! memory). Each source stored where the split's backend cannot read it gets a copy on that
//! backend, a [`Op::Dup`](tessera_tensor::graph::Op::Dup) node named
//! `"{backend}#{source}#{copy}"` with the source's layout, and the node is rewired to read the
//! copy. A copy made for one split serves every later split on the same backend (it is made
//! once per graph evaluation). With `n_copies` > 1 every input has one copy per slot; each
//! evaluation uses the slot after the previous one's.

use crate::assign::{readable, Assignment, Backends};
use crate::Result;
use std::collections::HashMap;
use std::fmt::Write as _;
use tessera_backend::{Bindings, BufferUsage};
use tessera_tensor::graph::{Context, Graph, TensorId};

/// A source a split copies onto its backend before computing.
#[derive(Debug, Clone)]
pub struct SplitInput {
    /// The tensor as the graph computed or stored it.
    pub src: TensorId,
    /// Its copy on the split's backend, one per copy slot; the graph reads the slot in use.
    pub copies: Vec<TensorId>,
}

/// A run of nodes computed by one backend.
#[derive(Debug, Clone)]
pub struct Split {
    /// Index of the backend (in the scheduler's priority order).
    pub backend: usize,
    /// Sources copied onto the backend first.
    pub inputs: Vec<SplitInput>,
    /// The nodes, in execution order (views included; backends skip them).
    pub graph: Graph,
}

/// How one graph runs across the backends: the backend of every tensor, the splits, their
/// input copies. Made by [`Scheduler::alloc_graph`](crate::Scheduler::alloc_graph); run by
/// [`Scheduler::compute`](crate::Scheduler::compute).
#[derive(Debug, Clone)]
pub struct Schedule {
    pub(crate) backend_of: Vec<Option<usize>>,
    pub(crate) backend_names: Vec<String>,
    pub(crate) splits: Vec<Split>,
    /// Every node in execution order, input copies (of the slot in use) first in each split:
    /// what the allocator plans.
    pub(crate) flat: Graph,
    pub(crate) copy_slot: usize,
    pub(crate) scheduler_id: u64,
}

impl Schedule {
    /// The splits, in execution order.
    pub fn splits(&self) -> &[Split] {
        &self.splits
    }

    /// Number of splits (`ggml_backend_sched_get_n_splits`).
    pub fn n_splits(&self) -> usize {
        self.splits.len()
    }

    /// Number of tensors copied between backends per evaluation
    /// (`ggml_backend_sched_get_n_copies` counts slots; this counts copies).
    pub fn n_copies(&self) -> usize {
        self.splits.iter().map(|s| s.inputs.len()).sum()
    }

    /// The backend `id` was placed on (nodes: where it is computed; leafs: where it is stored).
    pub fn backend_of(&self, id: TensorId) -> Option<usize> {
        self.backend_of.get(id.index()).copied().flatten()
    }

    /// The buffer id (backend) the allocator places `id` in: its backend, or the last
    /// (the CPU) for a tensor the passes left to nobody.
    pub(crate) fn buffer_id(&self, id: TensorId) -> usize {
        self.backend_of(id).unwrap_or(self.backend_names.len() - 1)
    }

    /// The name of backend `b`.
    pub fn backend_name(&self, b: usize) -> &str {
        &self.backend_names[b]
    }

    /// The copy slot this evaluation uses.
    pub fn copy_slot(&self) -> usize {
        self.copy_slot
    }

    /// How many nodes each backend computes (views not counted), by backend index.
    pub fn nodes_per_backend(&self, ctx: &Context) -> Vec<usize> {
        let mut n = vec![0; self.backend_names.len()];
        for s in &self.splits {
            n[s.backend] += s.graph.nodes().iter().filter(|&&id| !ctx.get(id).op.is_view()).count();
        }
        n
    }

    /// The splits in ggml's `print_assignments` form: one header per split with its inputs,
    /// one line per node with its backend and its sources' backends.
    pub fn describe(&self, ctx: &Context) -> String {
        let mut s = String::new();
        let name = |id: TensorId| {
            let n = &ctx.get(id).name;
            if n.is_empty() {
                format!("#{}", id.index())
            } else {
                n.clone()
            }
        };
        let kib = |id: TensorId| ctx.get(id).n_bytes().div_ceil(1024);
        for (i, sp) in self.splits.iter().enumerate() {
            let _ = write!(
                s,
                "## SPLIT #{i}: {} # {} inputs",
                self.backend_names[sp.backend],
                sp.inputs.len()
            );
            for inp in &sp.inputs {
                let _ = write!(s, ": [{} ({:>5}K)]", name(inp.src), kib(inp.src));
            }
            s.push('\n');
            for &id in sp.graph.nodes() {
                let d = ctx.get(id);
                if d.op.is_view() {
                    continue;
                }
                let b = self.backend_of(id).map_or("NULL", |b| self.backend_names[b].as_str());
                let _ = write!(
                    s,
                    "node #{:>4} ({:>14}): {:>25} ({:>5}K) [{:>5}]:",
                    id.index(),
                    d.op.name(),
                    name(id),
                    kib(id),
                    b
                );
                for src in d.sources() {
                    let sb =
                        self.backend_of(src).map_or("NULL", |b| self.backend_names[b].as_str());
                    let _ = write!(s, " {:>20} ({:>5}K) [{:>5}]", name(src), kib(src), sb);
                }
                s.push('\n');
            }
        }
        s
    }

    /// The flattened graph in Graphviz DOT, each node filled with its backend's colour.
    pub fn to_dot(&self, ctx: &Context) -> String {
        const COLORS: [&str; 6] =
            ["lightgreen", "lightsalmon", "lightyellow", "plum", "lightcyan", "wheat"];
        let n = self.backend_names.len();
        self.flat.to_dot_colored(ctx, &|id| {
            self.backend_of(id).map(|b| if b == n - 1 { "white" } else { COLORS[b % 6] }.into())
        })
    }
}

/// Pass 5: cuts `graph` into splits and adds the input copies to `ctx`, rewiring the nodes
/// that read them.
pub(crate) fn split_graph(
    ctx: &mut Context,
    graph: &Graph,
    bindings: &Bindings,
    be: &Backends<'_>,
    mut a: Assignment,
    n_copies: usize,
    copy_slot: usize,
) -> Result<(Vec<Split>, Vec<Option<usize>>, Graph)> {
    struct Open {
        backend: usize,
        inputs: Vec<SplitInput>,
        nodes: Vec<TensorId>,
    }
    let nodes = graph.nodes();
    let first = nodes.iter().find(|&&n| !ctx.get(n).op.is_view());
    let Some(&first) = first else {
        let b = be.list.len() - 1;
        let split = Split { backend: b, inputs: Vec::new(), graph: Graph::from_nodes(ctx, nodes) };
        let flat = Graph::from_nodes(ctx, nodes);
        return Ok((vec![split], a.of, flat));
    };
    let mut splits: Vec<Open> = Vec::new();
    let mut cur = Open { backend: a.get(first).expect("assigned"), inputs: vec![], nodes: vec![] };
    // (source, backend) -> its copies on that backend.
    let mut copies: HashMap<(TensorId, usize), Vec<TensorId>> = HashMap::new();
    let readable =
        |ctx: &Context, a: &Assignment, t: TensorId, b: usize| readable(ctx, bindings, be, a, t, b);
    for &node in nodes {
        if ctx.get(node).op.is_view() {
            cur.nodes.push(node);
            continue;
        }
        let nb = a.get(node).expect("every node is assigned");
        let mut new_split = false;
        if nb == cur.backend && !cur.inputs.is_empty() {
            new_split = ctx.get(node).sources().any(|s| {
                bindings.storage(ctx, s).is_some_and(|st| st.buffer.usage() == BufferUsage::Weights)
                    && a.get(s) != Some(cur.backend)
                    && !readable(ctx, &a, s, cur.backend)
            });
        }
        if nb != cur.backend || new_split {
            let done =
                std::mem::replace(&mut cur, Open { backend: nb, inputs: vec![], nodes: vec![] });
            if !done.nodes.is_empty() || !done.inputs.is_empty() {
                splits.push(done);
            }
        }
        let srcs: Vec<(usize, TensorId)> = ctx
            .get(node)
            .src
            .iter()
            .enumerate()
            .filter_map(|(slot, s)| s.map(|s| (slot, s)))
            .collect();
        for (slot, src) in srcs {
            let sb = a.get(src);
            if sb == Some(cur.backend) || readable(ctx, &a, src, cur.backend) {
                continue;
            }
            let key = (src, cur.backend);
            let copy = match copies.entry(key) {
                std::collections::hash_map::Entry::Occupied(e) => e.get()[copy_slot],
                std::collections::hash_map::Entry::Vacant(e) => {
                    let src_name = ctx.get(src).name.clone();
                    let mut list = Vec::with_capacity(n_copies);
                    for c in 0..n_copies {
                        let id = ctx.dup_layout(src);
                        let name = format!("{}#{}#{c}", be.list[cur.backend].name(), src_name);
                        ctx.set_name(id, &name);
                        list.push(id);
                        if a.of.len() <= id.index() {
                            a.of.resize(id.index() + 1, None);
                        }
                        a.of[id.index()] = Some(cur.backend);
                    }
                    cur.inputs.push(SplitInput { src, copies: list.clone() });
                    e.insert(list)[copy_slot]
                }
            };
            ctx.redirect_src(node, slot, copy).map_err(tessera_backend::BackendError::from)?;
        }
        cur.nodes.push(node);
    }
    splits.push(cur);

    let mut flat_nodes = Vec::new();
    let mut out = Vec::with_capacity(splits.len());
    for sp in splits {
        for inp in &sp.inputs {
            flat_nodes.push(inp.copies[copy_slot]);
        }
        flat_nodes.extend_from_slice(&sp.nodes);
        out.push(Split {
            backend: sp.backend,
            inputs: sp.inputs,
            graph: Graph::from_nodes(ctx, &sp.nodes),
        });
    }
    let flat = Graph::from_nodes(ctx, &flat_nodes);
    Ok((out, a.of, flat))
}
