//! The matrix must be able to fail: fake backends with one deliberate bug each are caught by the
//! NMSE check, the guard bytes, the NaN check or the input check, while a correct backend (the
//! reference itself behind the `Backend` trait) passes every case of the catalog.

use std::collections::BTreeSet;
use std::sync::Arc;
use tessera_backend::{Backend, BufferType, HostBufferType, Result as BResult};
use tessera_tensor::graph::{Context, Graph, Op, TensorId};
use tessera_tensor::DType;
use tessera_testmatrix::cases::{self, BinOp, Binary, MulMat};
use tessera_testmatrix::image::{storage_of, Image};
use tessera_testmatrix::reference::eval_graph;
use tessera_testmatrix::{
    filter_cases, run_config, Case, Config, Failure, Mismatch, Outcome, PreparedSet, Report,
};

/// What the fake backend gets wrong.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    None,
    /// ADD computed as SUB.
    AddAsSub,
    /// Every result multiplied by `1 + eps`.
    Scaled(f64),
    /// Writes `n` bytes past the end of each result.
    WritePast(usize),
    /// Writes the byte before each result.
    WriteBefore,
    /// Leaves the last element of each result unwritten.
    SkipLast,
    /// Overwrites the first byte of the first input.
    ClobberInput,
    /// `supports_op` is false for MUL_MAT.
    NoMulMat,
    /// Panics in MUL_MAT.
    PanicInMulMat,
}

/// The reference evaluator behind the `Backend` trait, plus one fault.
struct FakeBackend {
    fault: Fault,
}

impl Backend for FakeBackend {
    fn name(&self) -> &str {
        "FAKE"
    }
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        Arc::new(HostBufferType)
    }
    fn supports_op(&self, ctx: &Context, node: TensorId) -> bool {
        !(self.fault == Fault::NoMulMat && ctx.get(node).op == Op::MulMat)
    }
    fn graph_compute(
        &mut self,
        ctx: &Context,
        graph: &Graph,
        bindings: &tessera_backend::Bindings,
    ) -> BResult<()> {
        let ids: Vec<TensorId> = graph.leafs().iter().chain(graph.nodes()).copied().collect();
        let roots: BTreeSet<TensorId> = ids.iter().map(|&i| storage_of(ctx, i).0).collect();
        let mut img = Image::new();
        for &r in &roots {
            let s = bindings.storage(ctx, r).expect("bound");
            let mut bytes = vec![0u8; ctx.get(r).n_bytes()];
            s.buffer.read(s.offset, &mut bytes)?;
            img.insert(r, bytes);
        }
        if self.fault == Fault::PanicInMulMat
            && graph.nodes().iter().any(|&n| ctx.get(n).op == Op::MulMat)
        {
            panic!("deliberate panic in MUL_MAT");
        }
        let written: Vec<TensorId> =
            graph.nodes().iter().filter(|&&n| !ctx.get(n).op.is_view()).copied().collect();
        eval_graph(ctx, graph, &mut img);
        for &n in &written {
            let (root, _) = storage_of(ctx, n);
            let s = bindings.storage(ctx, root).expect("bound");
            let mut bytes = img.root(root).expect("computed").to_vec();
            let node = ctx.get(n);
            if self.fault == Fault::AddAsSub && node.op == Op::Add {
                // The reference computed a + b; a - b = 2a - (a + b), broadcasting included.
                let a = img.read(ctx, node.src[0].expect("src0"));
                let sum = img.read(ctx, n);
                let diff: Vec<f64> = a.iter().zip(&sum).map(|(x, s)| 2.0 * x - s).collect();
                let mut fixed = img.clone();
                fixed.write(ctx, n, &diff);
                bytes = fixed.root(root).expect("computed").to_vec();
            }
            if let Fault::Scaled(eps) = self.fault {
                let v: Vec<f64> = img.read(ctx, n).iter().map(|x| x * (1.0 + eps)).collect();
                let mut fixed = img.clone();
                fixed.write(ctx, n, &v);
                bytes = fixed.root(root).unwrap().to_vec();
            }
            let len = bytes.len();
            if self.fault == Fault::SkipLast && node.dtype == DType::F32 {
                bytes.truncate(len - 4);
            }
            s.buffer.write(s.offset, &bytes)?;
            match self.fault {
                Fault::WritePast(k) => s.buffer.write(s.offset + len, &vec![0u8; k])?,
                Fault::WriteBefore => s.buffer.write(s.offset - 1, &[0u8])?,
                _ => {}
            }
        }
        if self.fault == Fault::ClobberInput {
            let leaf = graph.leafs()[0];
            let s = bindings.storage(ctx, leaf).expect("bound");
            let mut b = [0u8];
            s.buffer.read(s.offset, &mut b)?;
            s.buffer.write(s.offset, &[!b[0]])?;
        }
        Ok(())
    }
}

fn run(cases: Vec<Case>, fault: Fault) -> Vec<Outcome> {
    let set = PreparedSet::new(&cases);
    let config = Config { threads: 1, variant: "fake".into(), allocated: false };
    let mut factory = |_: &Config| Ok(Box::new(FakeBackend { fault }) as Box<dyn Backend>);
    run_config(&set, &config, &mut factory).outcomes
}

fn add_case() -> Case {
    Case::new(Binary {
        op: BinOp::Add,
        dtype: DType::F32,
        ne: [16, 10, 4, 3],
        nr: [2, 1, 1, 1],
        perm1: false,
    })
}

#[test]
fn a_correct_backend_passes_the_whole_catalog() {
    let cases = cases::all();
    let set = PreparedSet::new(&cases);
    let mut factory =
        |_: &Config| Ok(Box::new(FakeBackend { fault: Fault::None }) as Box<dyn Backend>);
    let runs = vec![run_config(
        &set,
        &Config { threads: 1, variant: "fake".into(), allocated: false },
        &mut factory,
    )];
    let report = Report { set: &set, runs };
    let text = report.render(20);
    assert_eq!(report.failed(), 0, "{text}");
    assert!(text.contains("MUL_MAT") && text.contains("TOTAL"), "{text}");
}

#[test]
fn add_computed_as_sub_is_caught_by_nmse() {
    let out = run(vec![add_case()], Fault::AddAsSub);
    assert!(matches!(out[0], Outcome::Fail(Failure::Mismatch(Mismatch::Nmse { .. }))), "{out:?}");
}

#[test]
fn small_errors_fail_tight_thresholds_and_pass_loose_ones() {
    // A relative error of 1e-3 is an NMSE of 1e-6: over ADD's 1e-7, under MUL_MAT's 5e-4.
    let mm = Case::new(MulMat::new(DType::F32, 16, 4, 256));
    let out = run(vec![add_case(), mm], Fault::Scaled(1e-3));
    assert!(matches!(out[0], Outcome::Fail(Failure::Mismatch(Mismatch::Nmse { .. }))), "{out:?}");
    assert!(matches!(out[1], Outcome::Pass(e) if e > 5e-7 && e < 5e-4), "{out:?}");
}

#[test]
fn writes_past_or_before_an_output_are_caught_by_the_guards() {
    for fault in [Fault::WritePast(1), Fault::WritePast(64), Fault::WriteBefore] {
        let out = run(vec![add_case()], fault);
        assert!(
            matches!(out[0], Outcome::Fail(Failure::Guard { count: 1.., .. })),
            "{fault:?}: {out:?}"
        );
    }
}

#[test]
fn unwritten_elements_are_caught_as_nan() {
    let out = run(vec![add_case()], Fault::SkipLast);
    assert!(matches!(out[0], Outcome::Fail(Failure::Mismatch(Mismatch::NaN { .. }))), "{out:?}");
}

#[test]
fn writes_into_inputs_are_caught() {
    let out = run(vec![add_case()], Fault::ClobberInput);
    assert!(matches!(out[0], Outcome::Fail(Failure::InputModified { .. })), "{out:?}");
}

#[test]
fn unsupported_ops_are_counted_not_failed_and_panics_are_contained() {
    let cases = || vec![Case::new(MulMat::new(DType::Q4_0, 16, 1, 256)), add_case()];
    let out = run(cases(), Fault::NoMulMat);
    assert_eq!(out[0], Outcome::Unsupported("MUL_MAT"));
    assert!(matches!(out[1], Outcome::Pass(_)));
    let out = run(cases(), Fault::PanicInMulMat);
    assert!(
        matches!(&out[0], Outcome::Fail(Failure::Panic(m)) if m.contains("deliberate")),
        "{out:?}"
    );
    assert!(matches!(out[1], Outcome::Pass(_)), "the backend is remade after a panic: {out:?}");
}

#[test]
fn filters_take_regexes_or_substrings() {
    let n = |p: &str| filter_cases(cases::all(), Some(p)).len();
    let all = cases::all();
    let mm = all.iter().filter(|c| c.op() == "MUL_MAT").count();
    assert_eq!(n("^mul_mat$"), mm);
    assert!(n("q4_K") > 0 && n("q4_K") < all.len());
    // An unanchored regex matches the op or the name anywhere (ROPE_SET_ROWS too).
    let either = |c: &tessera_testmatrix::Case| {
        let s = format!("{} {}", c.op(), c.name()).to_lowercase();
        s.contains("rope") || s.contains("soft_max")
    };
    assert_eq!(n("rope|soft_max"), all.iter().filter(|c| either(c)).count());
    assert!(n("rope|soft_max") > all.iter().filter(|c| c.op() == "ROPE").count());
    assert_eq!(n("(unclosed"), 0);
    assert_eq!(filter_cases(cases::all(), None).len(), all.len());
}
