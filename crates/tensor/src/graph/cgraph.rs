//! `Graph`: the nodes to compute, in execution order (`ggml_build_forward_expand`).

use super::context::Context;
use super::desc::{Flags, TensorId};
use super::op::Op;
use std::fmt::Write as _;

/// A computation graph over a [`Context`]: every tensor reachable from the outputs, nodes (ops to
/// run) in a valid execution order, leafs (tensors with no op: weights, inputs, constants), and
/// how many nodes use each tensor.
#[derive(Debug, Clone, Default)]
pub struct Graph {
    nodes: Vec<TensorId>,
    leafs: Vec<TensorId>,
    use_counts: Vec<u32>,
    visited: Vec<bool>,
    /// Changes with every expansion (fresh in a clone).
    version: crate::Version,
}

impl Graph {
    /// An empty graph.
    pub fn new() -> Self {
        Self::default()
    }

    /// The graph's version: equal versions are the same nodes (see [`crate::Version`]).
    pub fn version(&self) -> u64 {
        self.version.get()
    }

    /// A graph computing `outputs` (each expanded in turn, as `ggml_build_forward_expand`).
    pub fn build(ctx: &Context, outputs: &[TensorId]) -> Graph {
        let mut g = Graph::new();
        for &o in outputs {
            g.expand(ctx, o);
        }
        g
    }

    /// The graph of `outputs` with the `pins` it needs expanded first, in order: each pin comes
    /// right after what it depends on, so pins of one input (a decoder block's Q, K and V
    /// products) follow one another in the node list, where [`build`](Self::build) puts each
    /// just before its first reader and a backend could not run them as one launch. Pins the
    /// outputs do not need are left out; the nodes are [`build`](Self::build)'s, in another
    /// valid order.
    pub fn build_with_pins(ctx: &Context, pins: &[TensorId], outputs: &[TensorId]) -> Graph {
        let plain = Graph::build(ctx, outputs);
        if pins.is_empty() {
            return plain;
        }
        let mut g = Graph::new();
        for &p in pins.iter().filter(|p| plain.visited.get(p.index()).copied().unwrap_or(false)) {
            if ctx.get(p).op != Op::None {
                g.expand(ctx, p);
            }
        }
        for &o in outputs {
            g.expand(ctx, o);
        }
        g
    }

    /// Adds `out` and everything it depends on that is not in the graph yet: a post-order
    /// depth-first walk over the sources, left to right, so every node comes after its sources.
    pub fn expand(&mut self, ctx: &Context, out: TensorId) {
        self.version.bump();
        if self.visited.len() < ctx.len() {
            self.visited.resize(ctx.len(), false);
            self.use_counts.resize(ctx.len(), 0);
        }
        // Iterative DFS: (tensor, next source slot to visit).
        let mut stack = vec![(out, 0usize)];
        if self.visited[out.index()] {
            return;
        }
        self.visited[out.index()] = true;
        while let Some((id, slot)) = stack.pop() {
            let desc = ctx.get(id);
            if let Some(src) =
                desc.src.iter().skip(slot).position(Option::is_some).map(|p| slot + p)
            {
                stack.push((id, src + 1));
                let s = desc.src[src].expect("position found a source");
                if !self.visited[s.index()] {
                    self.visited[s.index()] = true;
                    stack.push((s, 0));
                }
                continue;
            }
            if desc.op == Op::None && !desc.flags.contains(Flags::PARAM) {
                self.leafs.push(id);
            } else {
                self.nodes.push(id);
                for s in desc.sources() {
                    self.use_counts[s.index()] += 1;
                }
            }
        }
    }

    /// A graph whose nodes are exactly `nodes`, in that order (a scheduler's split, or its
    /// flattened graph with input copies); every source of a node that is not itself one of
    /// `nodes` becomes a leaf, in the order first met. The caller vouches for the order: each
    /// node after the nodes it reads.
    pub fn from_nodes(ctx: &Context, nodes: &[TensorId]) -> Graph {
        let mut g = Graph {
            nodes: nodes.to_vec(),
            leafs: Vec::new(),
            use_counts: vec![0; ctx.len()],
            visited: vec![false; ctx.len()],
            version: crate::Version::fresh(),
        };
        for &id in nodes {
            g.visited[id.index()] = true;
        }
        for &id in nodes {
            let desc = ctx.get(id);
            for s in desc.sources().chain(desc.view_src) {
                if !g.visited[s.index()] {
                    g.visited[s.index()] = true;
                    g.leafs.push(s);
                }
            }
            for s in desc.sources() {
                g.use_counts[s.index()] += 1;
            }
        }
        g
    }

    /// Nodes in execution order.
    pub fn nodes(&self) -> &[TensorId] {
        &self.nodes
    }

    /// Leafs, in the order they were reached.
    pub fn leafs(&self) -> &[TensorId] {
        &self.leafs
    }

    /// How many graph nodes use `id` as a source.
    pub fn use_count(&self, id: TensorId) -> u32 {
        self.use_counts.get(id.index()).copied().unwrap_or(0)
    }

    /// Whether `id` is in the graph.
    pub fn contains(&self, id: TensorId) -> bool {
        self.visited.get(id.index()).copied().unwrap_or(false)
    }

    /// The graph in Graphviz DOT (`ggml_graph_dump_dot`): nodes as records with op, type and
    /// shape; leafs as ellipses; edges from sources to consumers.
    pub fn to_dot(&self, ctx: &Context) -> String {
        self.to_dot_colored(ctx, &|_| None)
    }

    /// [`to_dot`](Graph::to_dot) with each node filled with the colour `color` gives it (a
    /// Graphviz colour name; `None`: light blue for outputs, white for the rest), e.g. by the
    /// backend a scheduler placed it on.
    pub fn to_dot_colored(
        &self,
        ctx: &Context,
        color: &dyn Fn(TensorId) -> Option<String>,
    ) -> String {
        let mut s = String::from("digraph G {\n  newrank = true;\n  rankdir = TB;\n");
        let label = |id: TensorId| {
            let t = ctx.get(id);
            let name = if t.name.is_empty() {
                format!("#{}", id.index())
            } else {
                t.name.replace('"', "'")
            };
            format!("{name} | {} | {} {:?}", t.op.name(), t.dtype, t.ne)
        };
        for &id in &self.leafs {
            let _ = writeln!(s, "  t{} [shape=ellipse, label=\"{}\"];", id.index(), label(id));
        }
        for &id in &self.nodes {
            let color = color(id).unwrap_or_else(|| {
                if ctx.get(id).flags.contains(Flags::OUTPUT) { "lightblue" } else { "white" }
                    .to_string()
            });
            let _ = writeln!(
                s,
                "  t{} [shape=record, style=filled, fillcolor={color}, label=\"{}\"];",
                id.index(),
                label(id)
            );
            for (slot, src) in ctx.get(id).src.iter().enumerate() {
                if let Some(src) = src {
                    let _ =
                        writeln!(s, "  t{} -> t{} [label=\"src{slot}\"];", src.index(), id.index());
                }
            }
        }
        s.push_str("}\n");
        s
    }
}
