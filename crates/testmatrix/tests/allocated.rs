//! The allocated layout (`--layouts alloc`, [`Config::allocated`]): the graph allocator places
//! a case's tensors as it places a model's, so a result can take its source's memory. The
//! residual norm cases really run their ADD in place (what broke the CUDA backend's first fused
//! norm: its second pass read the sources the in-place sum had overwritten), and a correct
//! backend passes every case in that layout.

use std::collections::HashMap;
use std::sync::Arc;
use tessera_alloc::GraphAllocator;
use tessera_backend::{Backend, Bindings, BufferType, HostBufferType, Result as BResult};
use tessera_tensor::graph::{Context, Graph, Op, TensorId};
use tessera_testmatrix::image::{storage_of, Image};
use tessera_testmatrix::reference::eval_graph;
use tessera_testmatrix::{cases, prepare, run_config, Config, PreparedSet, Report};

#[test]
fn the_residual_norm_cases_add_in_place() {
    let mut checked = 0;
    for case in
        cases::all().iter().filter(|c| c.op() == "NORM_MUL_MAT" && c.dtype().contains("add"))
    {
        let p = prepare(case).unwrap();
        let alloc = GraphAllocator::new(Arc::new(HostBufferType));
        let plan = alloc.plan(&p.ctx, &p.graph, &Bindings::new(), None).unwrap();
        let at: HashMap<TensorId, usize> =
            plan.placements().map(|(id, pl)| (id, pl.offset)).collect();
        let add = *p.graph.nodes().iter().find(|&&n| p.ctx.get(n).op == Op::Add).unwrap();
        let src = p.ctx.get(add).src[0].unwrap();
        assert_eq!(at[&add], at[&src], "{}: the residual ADD in place", case.name());
        checked += 1;
    }
    assert!(checked >= 2, "{checked} residual cases");
}

/// The f64 reference behind the `Backend` trait, node by node through memory (a node reads
/// what the buffers hold when it runs, as a real backend does, so shared memory counts).
struct Reference;

impl Backend for Reference {
    fn name(&self) -> &str {
        "REFERENCE"
    }
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        Arc::new(HostBufferType)
    }
    fn supports_op(&self, _: &Context, _: TensorId) -> bool {
        true
    }
    fn graph_compute(&mut self, ctx: &Context, graph: &Graph, bindings: &Bindings) -> BResult<()> {
        for &n in graph.nodes() {
            if ctx.get(n).op.is_view() {
                continue;
            }
            let one = Graph::from_nodes(ctx, &[n]);
            let mut img = Image::new();
            let roots: std::collections::BTreeSet<TensorId> =
                one.leafs().iter().chain([&n]).map(|&i| storage_of(ctx, i).0).collect();
            for &r in &roots {
                let s = bindings.storage(ctx, r).expect("bound");
                let mut bytes = vec![0u8; ctx.get(r).n_bytes()];
                s.buffer.read(s.offset, &mut bytes)?;
                img.insert(r, bytes);
            }
            eval_graph(ctx, &one, &mut img);
            let root = storage_of(ctx, n).0;
            let s = bindings.storage(ctx, root).expect("bound");
            s.buffer.write(s.offset, img.root(root).expect("computed"))?;
        }
        Ok(())
    }
    fn synchronize(&mut self) -> BResult<()> {
        Ok(())
    }
}

#[test]
fn a_correct_backend_passes_every_case_in_the_allocated_layout() {
    let cases = cases::all();
    let set = PreparedSet::new(&cases);
    let mut factory = |_: &Config| Ok(Box::new(Reference) as Box<dyn Backend>);
    let config = Config { threads: 1, variant: "reference".into(), allocated: true };
    let report = Report { set: &set, runs: vec![run_config(&set, &config, &mut factory)] };
    let text = report.render(20);
    assert_eq!(report.failed(), 0, "{text}");
}
