//! Shared test helpers: buffer types with knobs, and the allocator invariant as a checker.

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tessera_alloc::GraphAllocator;
use tessera_backend::{Bindings, Buffer, BufferType, HostBufferType};
use tessera_tensor::graph::{Context, Flags, Graph, TensorId};

/// Host memory with a chosen alignment and max size, counting allocations.
#[derive(Debug, Default)]
pub struct TestBufferType {
    pub alignment: usize,
    pub max_size: usize,
    pub allocs: AtomicUsize,
}

impl TestBufferType {
    pub fn new(alignment: usize, max_size: usize) -> Arc<Self> {
        Arc::new(TestBufferType { alignment, max_size, allocs: AtomicUsize::new(0) })
    }
    pub fn allocs(&self) -> usize {
        self.allocs.load(Ordering::Relaxed)
    }
}

impl BufferType for TestBufferType {
    fn name(&self) -> &str {
        "TEST"
    }
    fn alloc(&self, size: usize) -> tessera_backend::Result<Arc<dyn Buffer>> {
        self.allocs.fetch_add(1, Ordering::Relaxed);
        HostBufferType.alloc(size)
    }
    fn alignment(&self) -> usize {
        self.alignment
    }
    fn max_size(&self) -> usize {
        self.max_size
    }
    fn is_host(&self) -> bool {
        true
    }
}

/// What a checked allocation exercised.
#[derive(Debug, Default, Clone, Copy)]
pub struct Stats {
    pub nodes: usize,
    pub placed: usize,
    pub inplace: usize,
    pub views: usize,
    pub external: usize,
    pub shared_pairs: usize,
    pub max_chunks: usize,
}

fn root(ctx: &Context, id: TensorId) -> TensorId {
    ctx.get(id).view_src.unwrap_or(id)
}

/// Checks, after `alloc.alloc_graph(ctx, graph, bindings)`, that
/// - every tensor of the graph has storage; the ones in `external` kept theirs and got no plan;
/// - views have no placement and resolve into their source's bytes;
/// - every placed tensor is aligned, lies inside its buffer, and is bound where planned;
/// - no two placed tensors alive at the same time overlap, except a node computed in place
///   over a source (storage) that dies at that node: the node starts where that source
///   starts, with the same layout, inside the source's storage.
///
/// Liveness, from the graph alone: a storage owner `r` lives from the node computing it (from
/// the start for leafs and for anything flagged INPUT, including through a view) to the last
/// node that uses `r` or a view of `r` as a source, or is such a view; to the end if `r` or a
/// view of it is flagged INPUT or OUTPUT, or has no consumer in the graph.
pub fn check(
    ctx: &Context,
    graph: &Graph,
    alloc: &GraphAllocator,
    bindings: &Bindings,
    external: &HashMap<TensorId, (usize, usize)>,
) -> Result<Stats, String> {
    let plan = alloc.last_plan().ok_or("no plan")?;
    let n = graph.nodes().len() as i64;
    let pos: HashMap<TensorId, i64> =
        graph.nodes().iter().enumerate().map(|(i, &id)| (id, i as i64)).collect();
    let all: Vec<TensorId> = graph.leafs().iter().chain(graph.nodes()).copied().collect();
    let mut stats = Stats { nodes: graph.nodes().len(), ..Stats::default() };

    let buffer_key = |b: &Arc<dyn Buffer>| Arc::as_ptr(b) as *const u8 as usize;
    for &id in &all {
        let d = ctx.get(id);
        let s = bindings.storage(ctx, id).ok_or(format!("#{} has no storage", id.index()))?;
        if let Some(v) = d.view_src {
            stats.views += 1;
            if plan.placement(id).is_some() {
                return Err(format!("view #{} got a placement", id.index()));
            }
            let rs = bindings.storage(ctx, v).ok_or("view source unbound")?;
            if buffer_key(&rs.buffer) != buffer_key(&s.buffer)
                || s.offset != rs.offset + d.view_offs
            {
                return Err(format!("view #{} does not resolve into its source", id.index()));
            }
            continue;
        }
        if let Some(&(key, offset)) = external.get(&id) {
            stats.external += 1;
            if plan.placement(id).is_some() || buffer_key(&s.buffer) != key || s.offset != offset {
                return Err(format!("pre-bound #{} was moved", id.index()));
            }
            continue;
        }
        let pl = plan.placement(id).ok_or(format!("#{} not placed", id.index()))?;
        let bufs = alloc.buffers(pl.buffer_id);
        let buf = bufs.get(pl.chunk).ok_or("placement in a missing chunk")?;
        if buffer_key(buf) != buffer_key(&s.buffer) || s.offset != pl.offset {
            return Err(format!("#{} bound elsewhere than planned", id.index()));
        }
        let align = alloc.buffer_type(pl.buffer_id).alignment();
        if pl.offset % align != 0 || pl.size < d.n_bytes() || pl.offset + pl.size > buf.size() {
            return Err(format!("#{} misplaced: {pl:?} in {} bytes", id.index(), buf.size()));
        }
        stats.placed += 1;
        stats.max_chunks = stats.max_chunks.max(bufs.len());
    }

    // Liveness of every placed storage owner.
    let mut start: HashMap<TensorId, i64> = HashMap::new();
    let mut end: HashMap<TensorId, i64> = HashMap::new();
    for &id in &all {
        let r = root(ctx, id);
        if plan.placement(r).is_none() {
            continue;
        }
        let d = ctx.get(id);
        let s = start.entry(r).or_insert(*pos.get(&r).unwrap_or(&-1));
        let s0 = *s;
        if d.flags.contains(Flags::INPUT) {
            *s = -1;
        }
        let e = end.entry(r).or_insert(s0);
        if d.flags.contains(Flags::INPUT)
            || d.flags.contains(Flags::OUTPUT)
            || graph.use_count(id) == 0
        {
            *e = n;
        }
        if let Some(&p) = pos.get(&id) {
            // A node uses the roots of its sources; a view node also uses its own root.
            if d.view_src.is_some() {
                *e = (*e).max(p);
            }
            for src in d.sources() {
                let rs = root(ctx, src);
                if plan.placement(rs).is_some() {
                    let e = end.entry(rs).or_insert(p);
                    *e = (*e).max(p);
                }
            }
        }
    }
    let owners: Vec<TensorId> = start.keys().copied().collect();
    for (i, &a) in owners.iter().enumerate() {
        for &b in &owners[i + 1..] {
            let (pa, pb) = (plan.placement(a).unwrap(), plan.placement(b).unwrap());
            let (ba, bb) =
                (&alloc.buffers(pa.buffer_id)[pa.chunk], &alloc.buffers(pb.buffer_id)[pb.chunk]);
            if buffer_key(ba) != buffer_key(bb)
                || pa.offset + pa.size <= pb.offset
                || pb.offset + pb.size <= pa.offset
            {
                continue;
            }
            let (sa, ea, sb, eb) = (start[&a], end[&a], start[&b], end[&b]);
            if ea < sb || eb < sa {
                stats.shared_pairs += 1;
                continue;
            }
            // The one allowed sharing: `late` computed in place over `early`, which dies there.
            let (early, late) = if sa <= sb { (a, b) } else { (b, a) };
            let (pe, pl) = (plan.placement(early).unwrap(), plan.placement(late).unwrap());
            let dl = ctx.get(late);
            let ok = pos.get(&late) == Some(&start[&late])
                && end[&early] == start[&late]
                && dl.op.can_inplace()
                && pl.offset == pe.offset
                && pl.size <= pe.size
                && dl.sources().any(|s| {
                    // An in-place kernel writes each element over the one it reads: the donor
                    // source must have the node's layout and start where the node starts.
                    let ds = ctx.get(s);
                    root(ctx, s) == early
                        && (ds.dtype, ds.ne, ds.nb) == (dl.dtype, dl.ne, dl.nb)
                        && bindings.storage(ctx, s).map(|st| st.offset)
                            == bindings.storage(ctx, late).map(|st| st.offset)
                });
            if !ok {
                return Err(format!(
                    "#{} [{sa}, {ea}] {pa:?} and #{} [{sb}, {eb}] {pb:?} overlap while alive",
                    a.index(),
                    b.index()
                ));
            }
        }
    }
    stats.inplace = plan.n_inplace();
    Ok(stats)
}
