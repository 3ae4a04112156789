//! Running prepared cases on a backend: storage with guard bytes around every tensor, inputs
//! written, the graph computed, then guards, inputs and the output checked.
//!
//! Everything goes through the `Backend` and `Buffer` traits (allocation from the backend's own
//! buffer type, `write`/`read` for data), so a device backend runs the same matrix as the CPU.

use crate::case::{prepare, Case, Prepared};
use crate::compare::{compare, Mismatch};
use crate::image::{read_values, storage_of};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};
use tessera_backend::{Backend, Bindings};
use tessera_tensor::graph::TensorId;

/// One backend configuration the matrix runs under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Worker threads.
    pub threads: usize,
    /// Backend-specific variant: the SIMD level for the CPU (`scalar`, `avx2`, `avx512`).
    pub variant: String,
    /// The graph's tensors placed by the graph allocator (`tessera-alloc`, as a model's graph
    /// is: intermediates share memory and run in place where ggml's rules allow) instead of a
    /// guarded slot each: kernels, fused ones above all, are checked against their outputs
    /// overwriting their inputs.
    pub allocated: bool,
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/t{}{}",
            self.variant,
            self.threads,
            if self.allocated { "/alloc" } else { "" }
        )
    }
}

/// Makes a backend for a configuration (or says why it cannot, e.g. AVX-512 on a CPU without).
pub type Factory<'a> = dyn FnMut(&Config) -> Result<Box<dyn Backend>, String> + 'a;

/// Why a run failed.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// The output differs from the reference.
    Mismatch(Mismatch),
    /// Bytes outside every tensor changed: an out-of-bounds write.
    Guard {
        /// Offset in the buffer of the first changed byte.
        offset: usize,
        /// Changed bytes in that gap.
        count: usize,
        /// The tensor the gap follows (or "start of buffer").
        after: String,
    },
    /// An input tensor the graph does not write was changed.
    InputModified {
        /// Its name.
        tensor: String,
        /// First changed byte, relative to the tensor.
        offset: usize,
    },
    /// `graph_compute` returned an error.
    Compute(String),
    /// The backend panicked.
    Panic(String),
    /// The case or its storage could not be set up.
    Setup(String),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Mismatch(m) => m.fmt(f),
            Failure::Guard { offset, count, after } => {
                write!(
                    f,
                    "guard bytes overwritten: {count} byte(s) from offset {offset}, after {after}"
                )
            }
            Failure::InputModified { tensor, offset } => {
                write!(f, "input '{tensor}' modified (first at byte {offset})")
            }
            Failure::Compute(e) => write!(f, "compute error: {e}"),
            Failure::Panic(e) => write!(f, "panicked: {e}"),
            Failure::Setup(e) => write!(f, "setup: {e}"),
        }
    }
}

/// The result of one case under one configuration.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Within tolerance; the NMSE.
    Pass(f64),
    /// Failed.
    Fail(Failure),
    /// `supports_op` said no for this op.
    Unsupported(&'static str),
    /// The configuration could not start.
    Skipped(String),
}

/// Bytes of guard between and around tensors (at least the buffer type's alignment).
pub const GUARD: usize = 64;

/// The byte written at buffer offset `i` outside every tensor.
pub fn guard_byte(i: usize) -> u8 {
    ((i as u32 ^ 0x5a).wrapping_mul(0x9e37_79b1) >> 24) as u8
}

/// Where each storage root of a prepared case lives in one buffer.
#[derive(Debug)]
struct Layout {
    /// (root, offset, bytes), by offset.
    slots: Vec<(TensorId, usize, usize)>,
    size: usize,
}

impl Layout {
    fn new(p: &Prepared, align: usize) -> Layout {
        let (align, guard) = (align.max(1), GUARD.max(align));
        let up = |x: usize| x.div_ceil(align) * align;
        let mut cursor = 0;
        let mut slots = Vec::new();
        for id in p.roots() {
            let offset = up(cursor + guard);
            let len = p.ctx.get(id).n_bytes();
            slots.push((id, offset, len));
            cursor = offset + len;
        }
        Layout { slots, size: up(cursor + guard) }
    }

    fn offset(&self, id: TensorId) -> usize {
        self.slots.iter().find(|s| s.0 == id).expect("every root has a slot").1
    }

    /// The buffer's initial bytes: guards, input data, and 0xFF (NaN) in results.
    fn initial(&self, p: &Prepared) -> Vec<u8> {
        let mut bytes: Vec<u8> = (0..self.size).map(guard_byte).collect();
        for &(id, off, len) in &self.slots {
            let dst = &mut bytes[off..off + len];
            match p.inputs.iter().find(|(i, _)| *i == id) {
                Some((_, data)) => dst.copy_from_slice(data),
                None => dst.fill(0xff),
            }
        }
        bytes
    }

    /// The first gap whose guard bytes changed.
    fn check_guards(&self, p: &Prepared, after: &[u8]) -> Option<Failure> {
        let mut start = 0;
        let mut prev = "start of buffer".to_string();
        let ends = self.slots.iter().map(|&(id, off, len)| (Some(id), off, off + len));
        for (id, gap_end, next_start) in ends.chain(std::iter::once((None, self.size, self.size))) {
            let changed: Vec<usize> =
                (start..gap_end).filter(|&i| after[i] != guard_byte(i)).collect();
            if let Some(&offset) = changed.first() {
                return Some(Failure::Guard { offset, count: changed.len(), after: prev });
            }
            if let Some(id) = id {
                prev = format!("'{}' (#{})", p.ctx.get(id).name, id.index());
            }
            start = next_start;
        }
        None
    }
}

fn panic_message(e: &(dyn std::any::Any + Send)) -> String {
    e.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| e.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic".into())
}

/// The first node `backend` does not run, as the case's outcome.
fn unsupported(backend: &dyn Backend, p: &Prepared) -> Option<Outcome> {
    let node = p.graph.nodes().iter().find(|&&n| !backend.supports_op(&p.ctx, n))?;
    Some(Outcome::Unsupported(p.ctx.get(*node).op.name()))
}

/// The case's output, read from `bytes` at `base`, against its reference.
fn verdict(p: &Prepared, bytes: &[u8], base: usize) -> Outcome {
    let got = read_values(p.ctx.get(p.out), bytes, base);
    match compare(&got, &p.expected, p.tolerance) {
        Ok(err) => Outcome::Pass(err),
        Err(m) => Outcome::Fail(Failure::Mismatch(m)),
    }
}

/// Runs one prepared case on `backend` and checks everything.
pub fn run_case(backend: &mut dyn Backend, p: &Prepared) -> Outcome {
    if let Some(unsupported) = unsupported(backend, p) {
        return unsupported;
    }
    let buft = backend.buffer_type();
    let layout = Layout::new(p, buft.alignment());
    let setup = |e: &dyn fmt::Display| Outcome::Fail(Failure::Setup(e.to_string()));
    let buffer = match buft.alloc(layout.size) {
        Ok(b) => b,
        Err(e) => return setup(&e),
    };
    if let Err(e) = buffer.write(0, &layout.initial(p)) {
        return setup(&e);
    }
    let mut bindings = Bindings::new();
    for &(id, off, _) in &layout.slots {
        if let Err(e) = bindings.bind(&p.ctx, id, buffer.clone(), off) {
            return setup(&e);
        }
    }
    if let Err(e) =
        backend.graph_compute(&p.ctx, &p.graph, &bindings).and_then(|()| backend.synchronize())
    {
        return Outcome::Fail(Failure::Compute(e.to_string()));
    }
    let mut after = vec![0u8; layout.size];
    if let Err(e) = buffer.read(0, &mut after) {
        return setup(&e);
    }
    if let Some(f) = layout.check_guards(p, &after) {
        return Outcome::Fail(f);
    }
    for (id, data) in &p.inputs {
        if p.written.contains(id) {
            continue;
        }
        let off = layout.offset(*id);
        if let Some(i) = (0..data.len()).find(|&i| after[off + i] != data[i]) {
            let tensor = p.ctx.get(*id).name.clone();
            return Outcome::Fail(Failure::InputModified { tensor, offset: i });
        }
    }
    let (root, base) = storage_of(&p.ctx, p.out);
    verdict(p, &after, layout.offset(root) + base)
}

/// Runs one prepared case on `backend` with its tensors placed by the graph allocator (see
/// [`Config::allocated`]): every result filled with 0xFF (NaN) first, the inputs written where
/// it put them, the output checked against the reference.
pub fn run_case_allocated(backend: &mut dyn Backend, p: &Prepared) -> Outcome {
    if let Some(unsupported) = unsupported(backend, p) {
        return unsupported;
    }
    let setup = |e: &dyn fmt::Display| Outcome::Fail(Failure::Setup(e.to_string()));
    let mut alloc = tessera_alloc::GraphAllocator::new(backend.buffer_type());
    let mut bindings = Bindings::new();
    if let Err(e) = alloc.alloc_graph(&p.ctx, &p.graph, &mut bindings) {
        return setup(&e);
    }
    // Results NaN first, then the inputs (the allocator may place a result where an input
    // lies, to be overwritten only after the input's last reader).
    let is_input = |id: TensorId| p.inputs.iter().any(|(i, _)| *i == id);
    for id in p.roots().into_iter().filter(|&id| !is_input(id)) {
        if let Err(e) = bindings.set(&p.ctx, id, &vec![0xff; p.ctx.get(id).n_bytes()]) {
            return setup(&e);
        }
    }
    for (id, data) in &p.inputs {
        if let Err(e) = bindings.set(&p.ctx, *id, data) {
            return setup(&e);
        }
    }
    if let Err(e) =
        backend.graph_compute(&p.ctx, &p.graph, &bindings).and_then(|()| backend.synchronize())
    {
        return Outcome::Fail(Failure::Compute(e.to_string()));
    }
    // (Writes outside a tensor are the guarded layout's check: here memory is shared.)
    let (root, base) = storage_of(&p.ctx, p.out);
    let mut bytes = vec![0u8; p.ctx.get(root).n_bytes()];
    if let Err(e) = bindings.read(&p.ctx, root, &mut bytes) {
        return setup(&e);
    }
    verdict(p, &bytes, base)
}

/// Runs `run_case` (or [`run_case_allocated`]) catching panics.
fn run_guarded(backend: &mut dyn Backend, p: &Prepared, allocated: bool) -> Outcome {
    let run =
        |b: &mut dyn Backend| if allocated { run_case_allocated(b, p) } else { run_case(b, p) };
    catch_unwind(AssertUnwindSafe(|| run(backend)))
        .unwrap_or_else(|e| Outcome::Fail(Failure::Panic(panic_message(e.as_ref()))))
}

/// Cases prepared once (graph, inputs, reference output), to run under many configurations.
#[derive(Debug)]
pub struct PreparedSet {
    /// (op, type column, full name) of each case.
    pub names: Vec<(&'static str, String, String)>,
    /// The prepared case, or why it could not be built.
    pub cases: Vec<Result<Prepared, String>>,
    /// Time spent building inputs and references.
    pub elapsed: Duration,
}

impl PreparedSet {
    /// Prepares `cases`.
    pub fn new(cases: &[Case]) -> PreparedSet {
        let start = Instant::now();
        let names = cases.iter().map(|c| (c.op(), c.dtype(), c.name())).collect();
        let cases = cases.iter().map(|c| prepare(c).map_err(|e| e.to_string())).collect();
        PreparedSet { names, cases, elapsed: start.elapsed() }
    }
}

/// The outcomes of every case under one configuration.
#[derive(Debug, Clone)]
pub struct ConfigRun {
    /// The configuration.
    pub config: Config,
    /// One outcome per case, in case order.
    pub outcomes: Vec<Outcome>,
    /// Wall time.
    pub elapsed: Duration,
}

/// Runs every case of `set` under `config`, with a backend from `factory` (made again after a
/// panic, whose backend may be left in any state).
pub fn run_config(set: &PreparedSet, config: &Config, factory: &mut Factory<'_>) -> ConfigRun {
    let start = Instant::now();
    let mut backend = match factory(config) {
        Ok(b) => Some(b),
        Err(e) => {
            let outcomes = set.cases.iter().map(|_| Outcome::Skipped(e.clone())).collect();
            return ConfigRun { config: config.clone(), outcomes, elapsed: start.elapsed() };
        }
    };
    let mut outcomes = Vec::with_capacity(set.cases.len());
    for case in &set.cases {
        let p = match case {
            Ok(p) => p,
            Err(e) => {
                outcomes.push(Outcome::Fail(Failure::Setup(e.clone())));
                continue;
            }
        };
        let outcome = match backend.as_mut() {
            Some(b) => run_guarded(b.as_mut(), p, config.allocated),
            None => Outcome::Skipped("backend lost after a panic".into()),
        };
        if matches!(outcome, Outcome::Fail(Failure::Panic(_))) {
            backend = factory(config).ok();
        }
        outcomes.push(outcome);
    }
    ConfigRun { config: config.clone(), outcomes, elapsed: start.elapsed() }
}
