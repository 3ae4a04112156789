//! The CUDA test matrix reaches every path the CUDA plan can choose: for each weight type the
//! backend reads, every matrix-product path ([`possible_paths`]) is the plan of at least one
//! MUL_MAT case (the int8 one with one column and with several), so a run of the matrix on a
//! GPU checks each fast path and the generic kernel behind it; the same for the attention paths
//! and the fused window. Runs on the CPU side (the plan is a pure function).

use std::collections::BTreeSet;
use tessera_backend_cuda::plan::{
    fused_windows, fusion_windows, plan_node, possible_moe_paths, possible_paths, q8_writers,
    share_q8_1, Capability, FusionKind, Kernel, MatmulPath, NodePlan, Paths,
};
use tessera_backend_cuda::types::{readable, TYPES};
use tessera_tensor::graph::{Context, Graph, Op, TensorId};
use tessera_testmatrix::{cases, Builder, Case};

/// Every case of op `op` (all ops: `None`), built: its name, tensors, output and pins.
fn built_pinned(op: Option<&str>) -> Vec<(String, Context, TensorId, Vec<TensorId>)> {
    let keep = |c: &Case| op.is_none_or(|o| c.op() == o);
    cases::all()
        .iter()
        .filter(|c| keep(c))
        .map(|case| {
            let mut b = Builder::new();
            let out = case.spec.build(&mut b).unwrap();
            (case.name(), b.ctx, out, b.pins)
        })
        .collect()
}

/// The graph of every case of op `op` (all ops: `None`): its tensors and output.
fn built(op: Option<&str>) -> Vec<(String, Context, TensorId)> {
    built_pinned(op).into_iter().map(|(name, ctx, out, _)| (name, ctx, out)).collect()
}

#[test]
fn every_cuda_matmul_path_is_reached_by_a_case() {
    let cap = Capability { arch: 90, cublas: true };
    let mut hit = BTreeSet::new();
    for (name, ctx, out) in built(Some("MUL_MAT")) {
        let ctx = &ctx;
        assert_eq!(ctx.get(out).op, Op::MulMat, "{name}");
        let w = ctx.get(ctx.get(out).src[0].unwrap()).dtype;
        let cols = ctx.get(ctx.get(out).src[1].unwrap()).ne[1];
        if let Ok(p) = plan_node(ctx, out, cap, Paths::all()) {
            let Kernel::MulMat(path) = p.kernel else { panic!("{name}: {:?}", p.kernel) };
            hit.insert((w.name(), path.name()));
            if path == MatmulPath::Mmvq && cols > 1 {
                hit.insert((w.name(), "mmvq, several columns"));
            }
        }
    }
    let mut missing = Vec::new();
    for row in TYPES.iter().filter(|r| readable(r.dtype)) {
        for path in possible_paths(row.dtype) {
            if !hit.contains(&(row.dtype.name(), path.name())) {
                missing.push(format!("{} x {path}", row.dtype));
            }
        }
        if row.mmvq.is_some() && !hit.contains(&(row.dtype.name(), "mmvq, several columns")) {
            missing.push(format!("{} x mmvq with 2-8 columns", row.dtype));
        }
    }
    assert!(missing.is_empty(), "no test-matrix case reaches: {}", missing.join(", "));
}

/// Cases run every window the CUDA backend fuses (RMS_NORM then MUL, with the residual ADD
/// before them, and the gate/up products on the int8 path with their GLU), so each fused
/// kernel is checked against the f64 reference on a GPU.
#[test]
fn the_fused_windows_are_reached_by_cases() {
    let cap = Capability { arch: 90, cublas: true };
    // The cases of `cases` with a `kind` window the executor would fuse (a gate/up window only
    // with both products on the int8 path).
    let reaching = |cases: &[(String, Context, TensorId)], kind: FusionKind| {
        cases
            .iter()
            .filter(|(_, ctx, out)| {
                let graph = Graph::build(ctx, &[*out]);
                fusion_windows(ctx, graph.nodes(), &[kind]).iter().any(|w| {
                    kind != FusionKind::GateUpGlu
                        || w.nodes[..2].iter().all(|&n| {
                            plan_node(ctx, n, cap, Paths::all())
                                .is_ok_and(|p| p.kernel == Kernel::MulMat(MatmulPath::Mmvq))
                        })
                })
            })
            .count()
    };
    let all = built(None);
    let hits = reaching(&all, FusionKind::RmsNormMul);
    assert!(hits >= 2, "{hits} cases reach RMS_NORM+MUL");
    // The residual ADD before them, its sum read again (stored by the fused kernel).
    let residual = reaching(&all, FusionKind::AddRmsNormMul);
    assert!(residual >= 2, "{residual} cases reach ADD+RMS_NORM+MUL");
    let gate_up = reaching(&built(Some("FFN_GLU")), FusionKind::GateUpGlu);
    assert!(gate_up >= 4, "{gate_up} cases reach the fused gate/up products");
}

/// The plans of a pinned case's nodes, in the graph's order, and the graph.
fn planned(ctx: &Context, out: TensorId, pins: &[TensorId]) -> Vec<(TensorId, NodePlan)> {
    let cap = Capability { arch: 90, cublas: true };
    let graph = Graph::build_with_pins(ctx, pins, &[out]);
    graph.nodes().iter().map(|&n| (n, plan_node(ctx, n, cap, Paths::all()).unwrap())).collect()
}

/// The decode windows beyond the norms and gate/up: Q, K and V as one launch (two and three
/// products of one column, by int8-path weights), a norm writing its products' Q8_1 blocks
/// (with and without the residual ADD, the strided path's width too), K's RoPE into the cache,
/// a step's attention inputs (Q's and K's RoPE, K's and V's stores) as one launch, and the
/// attention merge writing its output projection's Q8_1 blocks, and a gate/up kernel writing
/// its down projection's.
#[test]
fn the_decode_windows_are_reached_by_cases() {
    // The sizes of the windows of `kind` the CUDA kernels take in the cases of `op`.
    let windows = |op: &str, kind: FusionKind| {
        let mut sizes = Vec::new();
        for (_, ctx, out, pins) in built_pinned(Some(op)) {
            let plans = planned(&ctx, out, &pins);
            let taken = fused_windows(&ctx, &plans);
            sizes.extend(taken.iter().filter(|w| w.kind == kind).map(|w| w.nodes.len()));
        }
        sizes
    };
    // (Biased groups: the products then their ADDs, 4 or 6 nodes.)
    let groups = windows("MUL_MAT_GROUP", FusionKind::ProductGroup);
    assert!(groups.iter().filter(|&&n| n == 3).count() >= 4, "groups of three: {groups:?}");
    assert!(groups.contains(&2), "no group of two: {groups:?}");
    assert!(groups.contains(&6) && groups.contains(&4), "no group with biases: {groups:?}");
    let rope = windows("ROPE_SET_ROWS", FusionKind::RopeSetRows);
    assert!(rope.len() >= 2, "{} cases reach RoPE into the cache", rope.len());
    let step = windows("ROPE_KV_STORE", FusionKind::AttnInputs);
    assert!(step.len() >= 2, "{} cases reach a step's attention inputs", step.len());
    // A fused norm, or an attention's chunk merge, whose output int8 products read: the kernel
    // writes their blocks (the executor's own choice of writers).
    let writers = |op: &str| {
        let mut n = 0;
        for (_, ctx, out, pins) in built_pinned(Some(op)) {
            let plans = planned(&ctx, out, &pins);
            let (mut q8, _) = share_q8_1(&ctx, &plans);
            n += q8_writers(&ctx, &plans, &fused_windows(&ctx, &plans), &mut q8).len();
        }
        n
    };
    let folded = writers("NORM_MUL_MAT");
    assert!(folded >= 4, "{folded} cases reach a norm writing its products' Q8_1 blocks");
    let merged = writers("ATTN_MUL_MAT");
    assert!(merged >= 2, "{merged} cases reach an attention merge writing Q8_1 blocks");
    let glus = writers("FFN_GLU");
    assert!(glus >= 3, "{glus} cases reach a gate/up kernel writing Q8_1 blocks");
}

/// Cases reach both decode attention paths (tensor cores, SIMT) with one chunk and with
/// several, both prompt ones (tensor cores, tiles), and the generic one.
#[test]
fn every_attention_path_is_reached_by_a_case() {
    let cap = Capability { arch: 90, cublas: true };
    let mut seen = BTreeSet::new();
    for (name, ctx, out) in built(Some("FLASH_ATTN_EXT")) {
        if let Ok(p) = plan_node(&ctx, out, cap, Paths::all()) {
            // Each path, the decode ones with one chunk and with several merged.
            let Kernel::FlashAttn(path) = p.kernel else { panic!("{name}: {:?}", p.kernel) };
            seen.insert((path.name(), path.splits() > 1));
        }
    }
    assert_eq!(seen.len(), 7, "{seen:?}");
}

/// The mixture-of-experts ops and attention sinks have cases the CUDA plan takes, so a GPU
/// run of the matrix checks their kernels against the f64 reference.
#[test]
fn moe_ops_and_sinks_are_reached_by_cases() {
    let cap = Capability { arch: 90, cublas: true };
    let planned = |op: &str, want: &dyn Fn(&Context, TensorId, Kernel) -> bool| {
        built(Some(op))
            .iter()
            .filter(|(_, ctx, out)| {
                plan_node(ctx, *out, cap, Paths::all()).is_ok_and(|p| want(ctx, *out, p.kernel))
            })
            .count()
    };
    let any = |_: &Context, _: TensorId, _: Kernel| true;
    for op in ["MUL_MAT_ID", "ARGSORT", "ADD_ID", "SWIGLU_OAI", "CLAMP"] {
        assert!(planned(op, &any) > 0, "no {op} case runs on CUDA");
    }
    let sinks = |slot: usize| {
        move |ctx: &Context, out: TensorId, _: Kernel| ctx.get(out).src[slot].is_some()
    };
    assert!(planned("SOFT_MAX", &sinks(2)) > 0, "no SOFT_MAX case with sinks runs on CUDA");
    assert!(planned("FLASH_ATTN_EXT", &sinks(4)) >= 2, "FLASH_ATTN_EXT with sinks");
}

/// Every expert-product path the plan can take for a type is the plan of a MUL_MAT_ID case
/// (the int8 one for the types with MMVQ, the generic one for the floats).
#[test]
fn every_cuda_expert_path_is_reached_by_a_case() {
    let cap = Capability { arch: 90, cublas: true };
    let mut hit = BTreeSet::new();
    for (name, ctx, out) in built(Some("MUL_MAT_ID")) {
        let w = ctx.get(ctx.get(out).src[0].unwrap()).dtype;
        if let Ok(p) = plan_node(&ctx, out, cap, Paths::all()) {
            let Kernel::MulMatId(path) = p.kernel else { panic!("{name}: {:?}", p.kernel) };
            hit.insert((w.name(), path.name()));
        }
    }
    let mut missing = Vec::new();
    for row in TYPES.iter().filter(|r| readable(r.dtype)) {
        let paths = possible_moe_paths(row.dtype);
        // The generic kernel of a type with the int8 path: the matrix's generic-only run.
        let want = if paths.len() > 1 { &paths[1..] } else { &paths[..] };
        for path in want {
            if !hit.contains(&(row.dtype.name(), path.name())) {
                missing.push(format!("{} x {}", row.dtype, path.name()));
            }
        }
    }
    assert!(missing.is_empty(), "no MUL_MAT_ID case reaches: {}", missing.join(", "));
}
