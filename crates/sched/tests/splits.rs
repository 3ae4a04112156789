//! The scheduler on seed 002's two-layer graph and variations: where nodes go, how many splits
//! and copies, and the same bits as the CPU alone.

mod common;

use common::*;
use tessera_backend::Bindings;
use tessera_backend_cpu::SimDevice;
use tessera_sched::{EvalPhase, SchedError, Scheduler};
use tessera_tensor::graph::{Context, Graph, TensorId};
use tessera_tensor::DType;

/// Seed 002's graph: `add_3 = w2 · (w0 · inp + w1) + w3`, 4 rows of 8 values.
struct TwoLayer {
    ctx: Context,
    inp: TensorId,
    w: [TensorId; 4],
    mm0: TensorId,
    add1: TensorId,
    mm2: TensorId,
    out: TensorId,
}

fn two_layer(batch: usize) -> TwoLayer {
    let mut ctx = Context::new();
    let inp = ctx.new_tensor(DType::F32, &[8, batch]).unwrap();
    ctx.set_name(inp, "inp");
    ctx.set_input(inp);
    let w0 = ctx.new_tensor(DType::F32, &[8, 8]).unwrap();
    let w1 = ctx.new_tensor(DType::F32, &[8]).unwrap();
    let w2 = ctx.new_tensor(DType::F32, &[8, 8]).unwrap();
    let w3 = ctx.new_tensor(DType::F32, &[8]).unwrap();
    for (i, w) in [w0, w1, w2, w3].iter().enumerate() {
        ctx.set_name(*w, &format!("weight_{i}"));
    }
    let mm0 = ctx.mul_mat(w0, inp).unwrap();
    ctx.set_name(mm0, "mul_mat_0");
    let add1 = ctx.add(mm0, w1).unwrap();
    ctx.set_name(add1, "add_1");
    let mm2 = ctx.mul_mat(w2, add1).unwrap();
    ctx.set_name(mm2, "mul_mat_2");
    let out = ctx.add(mm2, w3).unwrap();
    ctx.set_name(out, "add_3");
    ctx.set_output(out);
    TwoLayer { ctx, inp, w: [w0, w1, w2, w3], mm0, add1, mm2, out }
}

/// Runs the graph with weights placed as `places` on `sched`; returns (output, schedule text,
/// splits, copies, backend of each node in [mm0, add1, mm2, out]).
fn run(
    sched: &mut Scheduler,
    batch: usize,
    places: [Place; 4],
) -> (Vec<f32>, usize, usize, [Option<usize>; 4]) {
    let mut g = two_layer(batch);
    let mut b = Bindings::new();
    for (i, (&w, place)) in g.w.iter().zip(places).enumerate() {
        let n = g.ctx.get(w).n_elements();
        bind_weight(&g.ctx, &mut b, w, place, &values(n, i as u64 + 1));
    }
    let graph = Graph::build(&g.ctx, &[g.out]);
    let s = sched.alloc_graph(&mut g.ctx, &graph, &mut b).unwrap();
    b.set_f32(&g.ctx, g.inp, &values(8 * batch, 99)).unwrap();
    sched.compute(&g.ctx, &s, &b).unwrap();
    let out = b.get_f32(&g.ctx, g.out).unwrap();
    let of = [g.mm0, g.add1, g.mm2, g.out].map(|id| s.backend_of(id));
    (out, s.n_splits(), s.n_copies(), of)
}

const SEED_002: [Place; 4] = [Place::Host, Place::Host, Place::Sim, Place::Sim];

#[test]
fn seed_002_two_layers_split_in_two_with_one_copy() {
    let (want, n_splits, n_copies, _) = run(&mut cpu_only(), 4, [Place::Host; 4]);
    assert_eq!((n_splits, n_copies), (1, 0));
    let mut sched = sim_and_cpu(SimDevice::new(0, 1));
    let (got, n_splits, n_copies, of) = run(&mut sched, 4, SEED_002);
    // CPU: mul_mat_0, add_1 (their weights are host); SIM0: mul_mat_2, add_3; add_1 copied.
    assert_eq!(of, [Some(1), Some(1), Some(0), Some(0)]);
    assert_eq!((n_splits, n_copies), (2, 1));
    assert_eq!(bits(&got), bits(&want));
}

#[test]
fn a_refused_op_goes_back_to_the_cpu_with_its_weight_copied() {
    let want = run(&mut cpu_only(), 4, [Place::Host; 4]).0;
    let mut sched = sim_and_cpu(SimDevice::new(0, 1).refusing_ops(&["ADD"]));
    let (got, n_splits, n_copies, of) = run(&mut sched, 4, SEED_002);
    assert_eq!(of, [Some(1), Some(1), Some(0), Some(1)]);
    // CPU | SIM0 (add_1 in) | CPU (mul_mat_2 and weight_3 in).
    assert_eq!((n_splits, n_copies), (3, 3));
    assert_eq!(bits(&got), bits(&want));
}

#[test]
fn large_batches_are_offloaded_with_their_host_weights() {
    let want = run(&mut cpu_only(), 32, [Place::Host; 4]).0;
    let mut sched = sim_and_cpu(SimDevice::new(0, 1));
    let (got, n_splits, _, of) = run(&mut sched, 32, [Place::Host; 4]);
    assert_eq!(of[0], Some(0), "a 32-row product goes to the device that asks for it");
    assert_eq!(of[2], Some(0));
    assert_eq!(bits(&got), bits(&want));
    assert!(n_splits >= 1);
    // A 4-row batch is not worth it: everything stays on the CPU.
    let (_, n_splits, n_copies, of) = run(&mut sched, 4, [Place::Host; 4]);
    assert_eq!(of, [Some(1); 4]);
    assert_eq!((n_splits, n_copies), (1, 0));
}

#[test]
fn one_copy_serves_every_later_split_on_the_same_backend() {
    // x (CPU) is read by two device splits with a CPU split between them.
    let mut ctx = Context::new();
    let x = ctx.new_tensor(DType::F32, &[8, 2]).unwrap();
    ctx.set_name(x, "x");
    ctx.set_input(x);
    let w = ctx.new_tensor(DType::F32, &[8, 8]).unwrap();
    let a = ctx.mul_mat(w, x).unwrap(); // SIM0 (weight there)
    let b1 = ctx.unary(a, tessera_tensor::graph::UnaryOp::Tanh).unwrap(); // refused: CPU
    let c = ctx.add(b1, x).unwrap(); // SIM0 again, reads x
    ctx.set_output(c);
    let graph = Graph::build(&ctx, &[c]);
    let mut sched = sim_and_cpu(SimDevice::new(0, 1).refusing_ops(&["TANH"]));
    let mut bind = Bindings::new();
    bind_weight(&ctx, &mut bind, w, Place::Sim, &values(64, 3));
    let s = sched.alloc_graph(&mut ctx, &graph, &mut bind).unwrap();
    bind.set_f32(&ctx, x, &values(16, 4)).unwrap();
    sched.compute(&ctx, &s, &bind).unwrap();
    assert_eq!(s.n_splits(), 3);
    // x once onto SIM0, a back to the CPU, tanh onto SIM0: three copies, x not twice.
    assert_eq!(s.n_copies(), 3);
    let text = s.describe(&ctx);
    assert_eq!(text.matches("SIM0#x#0").count(), 2, "{text}");
    assert!(text.contains("## SPLIT #0: SIM0 # 1 inputs: [x"), "{text}");

    let mut ctx2 = Context::new();
    let x2 = ctx2.new_tensor(DType::F32, &[8, 2]).unwrap();
    let w2 = ctx2.new_tensor(DType::F32, &[8, 8]).unwrap();
    let a2 = ctx2.mul_mat(w2, x2).unwrap();
    let b2 = ctx2.unary(a2, tessera_tensor::graph::UnaryOp::Tanh).unwrap();
    let c2 = ctx2.add(b2, x2).unwrap();
    let g2 = Graph::build(&ctx2, &[c2]);
    let mut bind2 = Bindings::new();
    bind_weight(&ctx2, &mut bind2, w2, Place::Host, &values(64, 3));
    let mut cpu = cpu_only();
    let s2 = cpu.alloc_graph(&mut ctx2, &g2, &mut bind2).unwrap();
    bind2.set_f32(&ctx2, x2, &values(16, 4)).unwrap();
    cpu.compute(&ctx2, &s2, &bind2).unwrap();
    assert_eq!(bits(&bind.get_f32(&ctx, c).unwrap()), bits(&bind2.get_f32(&ctx2, c2).unwrap()));
}

#[test]
fn eval_callback_sees_asked_nodes_and_can_stop() {
    use std::sync::{Arc, Mutex};
    type Seen = Vec<(String, Vec<f32>)>;
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let mut sched = sim_and_cpu(SimDevice::new(0, 1));
    let sink = seen.clone();
    sched.set_eval_callback(Some(Box::new(move |phase, ctx, id, b| {
        let name = ctx.get(id).name.clone();
        match phase {
            EvalPhase::Ask => {
                sink.lock().unwrap().push((format!("ask {name}"), vec![]));
                name == "add_1" || name == "mul_mat_2"
            }
            EvalPhase::Observe => {
                sink.lock().unwrap().push((name.clone(), b.get_f32(ctx, id).unwrap()));
                name != "mul_mat_2"
            }
        }
    })));
    let mut g = two_layer(4);
    let mut b = Bindings::new();
    for (i, (&w, place)) in g.w.iter().zip(SEED_002).enumerate() {
        let n = g.ctx.get(w).n_elements();
        bind_weight(&g.ctx, &mut b, w, place, &values(n, i as u64 + 1));
    }
    let graph = Graph::build(&g.ctx, &[g.out]);
    let s = sched.alloc_graph(&mut g.ctx, &graph, &mut b).unwrap();
    b.set_f32(&g.ctx, g.inp, &values(32, 99)).unwrap();
    sched.compute(&g.ctx, &s, &b).unwrap();
    let seen = seen.lock().unwrap();
    let names: Vec<&str> = seen.iter().map(|(n, _)| n.as_str()).collect();
    // The evaluation stopped after mul_mat_2: add_3 was never reached.
    assert_eq!(names, ["ask mul_mat_0", "ask add_1", "add_1", "ask mul_mat_2", "mul_mat_2"]);
    // The device tensor was readable.
    assert_eq!(seen[4].1.len(), 32);
}

#[test]
fn schedules_print_and_export_dot() {
    let mut g = two_layer(4);
    let mut b = Bindings::new();
    for (i, (&w, place)) in g.w.iter().zip(SEED_002).enumerate() {
        let n = g.ctx.get(w).n_elements();
        bind_weight(&g.ctx, &mut b, w, place, &values(n, i as u64 + 1));
    }
    let graph = Graph::build(&g.ctx, &[g.out]);
    let mut sched = sim_and_cpu(SimDevice::new(0, 1));
    let s = sched.split(&mut g.ctx, &graph, &b).unwrap();
    let text = s.describe(&g.ctx);
    assert!(text.starts_with("## SPLIT #0: CPU # 0 inputs\n"), "{text}");
    assert!(text.contains("## SPLIT #1: SIM0 # 1 inputs: [add_1"), "{text}");
    assert_eq!(s.nodes_per_backend(&g.ctx), vec![2, 2]);
    let dot = s.to_dot(&g.ctx);
    assert!(dot.contains("lightgreen") && dot.contains("SIM0#add_1#0"), "{dot}");
}

#[test]
fn bad_setups_are_typed_errors() {
    // The CPU must come last.
    let backends: Vec<Box<dyn tessera_backend::Backend>> = vec![
        Box::new(tessera_backend_cpu::CpuBackend::new(1)),
        Box::new(SimDevice::new(0, 1).backend().unwrap()),
    ];
    let e = Scheduler::new(backends, Default::default()).unwrap_err();
    assert!(matches!(e, SchedError::Backends(_)), "{e}");
    assert!(Scheduler::new(vec![], Default::default()).is_err());
    // A weight in device memory with no device backend to read it.
    let mut g = two_layer(4);
    let mut b = Bindings::new();
    for (i, (&w, place)) in g.w.iter().zip(SEED_002).enumerate() {
        let n = g.ctx.get(w).n_elements();
        bind_weight(&g.ctx, &mut b, w, place, &values(n, i as u64 + 1));
    }
    let graph = Graph::build(&g.ctx, &[g.out]);
    let e = cpu_only().alloc_graph(&mut g.ctx, &graph, &mut b).unwrap_err();
    assert!(matches!(e, SchedError::Stranded { .. }), "{e}");
    assert!(e.to_string().contains("weight_2"), "{e}");
}

#[test]
fn copy_slots_rotate_and_keep_the_bits() {
    use tessera_backend::Backend;
    let backends: Vec<Box<dyn Backend>> = vec![
        Box::new(SimDevice::new(0, 1).backend().unwrap()),
        Box::new(tessera_backend_cpu::CpuBackend::new(1)),
    ];
    let params = tessera_sched::SchedParams { n_copies: 2, ..Default::default() };
    let mut sched = Scheduler::new(backends, params).unwrap();
    let want = run(&mut cpu_only(), 4, [Place::Host; 4]).0;
    let mut slots = Vec::new();
    for _ in 0..3 {
        let mut g = two_layer(4);
        let mut b = Bindings::new();
        for (i, (&w, place)) in g.w.iter().zip(SEED_002).enumerate() {
            let n = g.ctx.get(w).n_elements();
            bind_weight(&g.ctx, &mut b, w, place, &values(n, i as u64 + 1));
        }
        let graph = Graph::build(&g.ctx, &[g.out]);
        let s = sched.alloc_graph(&mut g.ctx, &graph, &mut b).unwrap();
        slots.push(s.copy_slot());
        // Two copies of add_1 exist (one per slot); the graph reads the slot in use.
        let input = &s.splits()[1].inputs[0];
        assert_eq!(input.copies.len(), 2);
        assert_eq!(g.ctx.get(g.mm2).src[1], Some(input.copies[s.copy_slot()]));
        b.set_f32(&g.ctx, g.inp, &values(32, 99)).unwrap();
        sched.compute(&g.ctx, &s, &b).unwrap();
        assert_eq!(bits(&b.get_f32(&g.ctx, g.out).unwrap()), bits(&want));
    }
    assert_eq!(slots, [0, 1, 0]);
    let bad = tessera_sched::SchedParams { n_copies: 5, ..Default::default() };
    assert!(Scheduler::new(vec![Box::new(tessera_backend_cpu::CpuBackend::new(1))], bad).is_err());
}

/// Between two simulated devices the split input goes buffer to buffer (a peer copy, no host
/// staging), and from the CPU with one write from host memory; the results are the staged
/// copies' and the CPU alone's, bit for bit.
#[test]
fn device_to_device_copies_skip_host_staging() {
    let want = run(&mut cpu_only(), 4, [Place::Host; 4]).0;
    let two_sims = |direct: bool| {
        let backends: Vec<Box<dyn tessera_backend::Backend>> = vec![
            Box::new(SimDevice::new(0, 1).backend().unwrap()),
            Box::new(SimDevice::new(1, 1).backend().unwrap()),
            Box::new(tessera_backend_cpu::CpuBackend::new(1)),
        ];
        let params = tessera_sched::SchedParams { direct_copies: direct, ..Default::default() };
        Scheduler::new(backends, params).unwrap()
    };
    // weight_0, weight_1 on SIM0 and weight_2, weight_3 on SIM1: add_1 goes SIM0 -> SIM1, the
    // input from the CPU to SIM0.
    let places = [Place::Sim, Place::Sim, Place::Sim1, Place::Sim1];
    let mut direct = two_sims(true);
    let (got, n_splits, n_copies, of) = run(&mut direct, 4, places);
    assert_eq!(of, [Some(0), Some(0), Some(1), Some(1)]);
    assert_eq!((n_splits, n_copies), (2, 2));
    assert_eq!(bits(&got), bits(&want));
    assert_eq!(direct.copy_stats(), tessera_sched::CopyStats { direct: 2, staged: 0 });
    let mut staged = two_sims(false);
    let (got, ..) = run(&mut staged, 4, places);
    assert_eq!(bits(&got), bits(&want));
    assert_eq!(staged.copy_stats(), tessera_sched::CopyStats { direct: 0, staged: 2 });
}
