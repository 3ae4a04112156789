//! The CUDA test matrix reaches every path the CUDA plan can choose: for each weight type the
//! backend reads, every matrix-product path ([`possible_paths`]) is the plan of at least one
//! MUL_MAT case (the int8 one with one column and with several), so a run of the matrix on a GPU checks each fast path and the generic kernel
//! behind it. Runs on the CPU side (the plan is a pure function).

use std::collections::BTreeSet;
use tessera_backend_cuda::plan::{
    fusion_windows, plan_node, possible_paths, AttnPath, Capability, FusionKind, Kernel,
    MatmulPath, Paths,
};
use tessera_backend_cuda::types::{readable, TYPES};
use tessera_tensor::graph::{Graph, Op};
use tessera_testmatrix::{cases, Builder};

#[test]
fn every_cuda_matmul_path_is_reached_by_a_case() {
    let cap = Capability { arch: 90 };
    let mut hit = BTreeSet::new();
    for case in cases::all().iter().filter(|c| c.op() == "MUL_MAT") {
        let mut b = Builder::new();
        let out = case.spec.build(&mut b).unwrap();
        let ctx = &b.ctx;
        assert_eq!(ctx.get(out).op, Op::MulMat, "{}", case.name());
        let w = ctx.get(ctx.get(out).src[0].unwrap()).dtype;
        let cols = ctx.get(ctx.get(out).src[1].unwrap()).ne[1];
        if let Ok(p) = plan_node(ctx, out, cap, Paths::all()) {
            let Kernel::MulMat(path) = p.kernel else { panic!("{}: {:?}", case.name(), p.kernel) };
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

/// A case runs the window the CUDA backend fuses (RMS_NORM then MUL), so the fused kernel is
/// checked against the f64 reference on a GPU.
#[test]
fn the_fused_window_is_reached_by_a_case() {
    let hits = cases::all()
        .iter()
        .filter(|case| {
            let mut b = Builder::new();
            let out = case.spec.build(&mut b).unwrap();
            let graph = Graph::build(&b.ctx, &[out]);
            !fusion_windows(&b.ctx, graph.nodes(), &[FusionKind::RmsNormMul]).is_empty()
        })
        .count();
    assert!(hits >= 2, "{hits} cases reach RMS_NORM+MUL");
}

/// Cases reach the decode attention path with one chunk and with several, and the generic one.
#[test]
fn every_attention_path_is_reached_by_a_case() {
    let cap = Capability { arch: 90 };
    let mut seen = BTreeSet::new();
    for case in cases::all().iter().filter(|c| c.op() == "FLASH_ATTN_EXT") {
        let mut b = Builder::new();
        let out = case.spec.build(&mut b).unwrap();
        if let Ok(p) = plan_node(&b.ctx, out, cap, Paths::all()) {
            seen.insert(match p.kernel {
                Kernel::FlashAttn(AttnPath::Generic) => "generic",
                Kernel::FlashAttn(AttnPath::Vec { splits: 1 }) => "vec, one chunk",
                Kernel::FlashAttn(AttnPath::Vec { .. }) => "vec, chunks merged",
                k => panic!("{}: {k:?}", case.name()),
            });
        }
    }
    assert_eq!(seen.len(), 3, "{seen:?}");
}
