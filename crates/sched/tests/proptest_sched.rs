//! Random graphs, random weight placements and random sets of ops the device refuses: the
//! scheduler never puts a node on a backend that refuses it, never lets a backend read memory
//! it cannot reach, and gives the bits of the CPU alone.

mod common;

use common::*;
use proptest::prelude::*;
use tessera_backend::Bindings;
use tessera_backend_cpu::SimDevice;
use tessera_tensor::graph::{Context, Graph, TensorId, UnaryOp};
use tessera_tensor::DType;

const REFUSABLE: [&str; 9] =
    ["MUL_MAT", "ADD", "MUL", "SCALE", "RMS_NORM", "SILU", "TANH", "SOFT_MAX", "CONT"];

#[derive(Debug, Clone)]
struct Spec {
    rows: usize,
    /// (is a matrix, on the device)
    weights: Vec<(bool, bool)>,
    /// (op kind, operand picks)
    steps: Vec<(u8, usize, usize)>,
    refuse: Vec<bool>,
    extra_output: bool,
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        1usize..40,
        prop::collection::vec((any::<bool>(), prop::bool::weighted(0.75)), 2..6),
        prop::collection::vec((0u8..8, any::<usize>(), any::<usize>()), 3..20),
        prop::collection::vec(prop::bool::weighted(0.3), REFUSABLE.len()),
        any::<bool>(),
    )
        .prop_map(|(rows, weights, steps, refuse, extra_output)| Spec {
            rows,
            weights,
            steps,
            refuse,
            extra_output,
        })
}

/// Builds the graph; returns (ctx, input, weights, outputs).
fn build(s: &Spec) -> (Context, TensorId, Vec<TensorId>, Vec<TensorId>) {
    let mut ctx = Context::new();
    let x = ctx.new_tensor(DType::F32, &[8, s.rows]).unwrap();
    ctx.set_name(x, "x");
    ctx.set_input(x);
    let mut mats = Vec::new();
    let mut vecs = Vec::new();
    let mut ws = Vec::new();
    for (i, &(is_mat, _)) in s.weights.iter().enumerate() {
        let w = ctx.new_tensor(DType::F32, if is_mat { &[8, 8][..] } else { &[8][..] }).unwrap();
        ctx.set_name(w, &format!("w{i}"));
        if is_mat {
            mats.push(w);
        } else {
            vecs.push(w);
        }
        ws.push(w);
    }
    let mut acts = vec![x];
    for (i, &(kind, p, q)) in s.steps.iter().enumerate() {
        // Mostly a chain (so most steps reach the output), sometimes a skip connection.
        let t = acts[acts.len() - 1 - p % acts.len().min(3)];
        let u = acts[q % acts.len()];
        let out = match kind {
            0 if !mats.is_empty() => ctx.mul_mat(mats[q % mats.len()], t).unwrap(),
            0 | 1 => ctx.add(t, u).unwrap(),
            2 if !vecs.is_empty() => ctx.mul(t, vecs[q % vecs.len()]).unwrap(),
            2 => ctx.mul(t, u).unwrap(),
            3 => ctx.scale(t, 0.5, 0.25).unwrap(),
            4 => ctx.rms_norm(t, 1e-5).unwrap(),
            5 => ctx.unary(t, if q % 2 == 0 { UnaryOp::Silu } else { UnaryOp::Tanh }).unwrap(),
            6 => ctx.soft_max(t, None, 0.7, 0.0).unwrap(),
            _ => {
                let tt = ctx.transpose(t).unwrap();
                let c = ctx.cont(tt, None).unwrap();
                let back = ctx.transpose(c).unwrap();
                ctx.cont(back, None).unwrap()
            }
        };
        ctx.set_name(out, &format!("n{i}"));
        acts.push(out);
    }
    let last = *acts.last().unwrap();
    ctx.set_output(last);
    let mut outputs = vec![last];
    if s.extra_output && acts.len() > 2 {
        let mid = acts[acts.len() / 2];
        if mid != x && mid != last {
            ctx.set_output(mid);
            outputs.push(mid);
        }
    }
    (ctx, x, ws, outputs)
}

fn run(s: &Spec, with_device: bool) -> Vec<Vec<u32>> {
    let (mut ctx, x, ws, outputs) = build(s);
    let mut b = Bindings::new();
    for (i, (&w, &(_, on_dev))) in ws.iter().zip(&s.weights).enumerate() {
        let place = if with_device && on_dev { Place::Sim } else { Place::Host };
        bind_weight(&ctx, &mut b, w, place, &values(ctx.get(w).n_elements(), i as u64 + 7));
    }
    let graph = Graph::build(&ctx, &outputs);
    let mut sched = if with_device {
        let refused: Vec<&str> =
            REFUSABLE.iter().zip(&s.refuse).filter(|(_, &r)| r).map(|(n, _)| *n).collect();
        sim_and_cpu(SimDevice::new(0, 1).refusing_ops(&refused))
    } else {
        cpu_only()
    };
    let schedule = sched.alloc_graph(&mut ctx, &graph, &mut b).unwrap();
    // Every node on a backend that takes it, reading only memory that backend reaches.
    for split in schedule.splits() {
        let be = sched.backend(split.backend);
        for &node in split.graph.nodes() {
            let d = ctx.get(node);
            if d.op.is_view() {
                continue;
            }
            assert!(be.supports_op(&ctx, node), "{} on {}", d.name, be.name());
            for src in d.sources().chain([node]) {
                let st = b.storage(&ctx, src).expect("bound");
                assert!(
                    be.supports_buffer(&*st.buffer),
                    "{} on {} reads {} in {}",
                    d.name,
                    be.name(),
                    ctx.get(src).name,
                    st.buffer.name()
                );
            }
        }
    }
    b.set_f32(&ctx, x, &values(8 * s.rows, 1234)).unwrap();
    sched.compute(&ctx, &schedule, &b).unwrap();
    outputs.iter().map(|&o| bits(&b.get_f32(&ctx, o).unwrap())).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    #[test]
    fn scheduled_graphs_give_the_cpu_bits(s in spec()) {
        prop_assert_eq!(run(&s, true), run(&s, false));
    }
}
