//! One CUDA graph per repeated step: a graph whose resolved launches (kernels, launch shapes,
//! every argument: addresses, shapes, scalars) equal the previous graph's is replayed from a
//! captured CUDA graph instead of being launched kernel by kernel. Everything a kernel reads
//! besides its arguments is device memory, read afresh at every replay (the token, its
//! position, the mask), and the KV cache's view grows in steps of 256 cells, so a decode step
//! replays until the cache crosses the next step.
//!
//! A list is captured the second time it comes among the last few (a step may be split
//! into several graphs by the scheduler, each repeating); prompt graphs, which change, are
//! never captured. A few captured graphs are kept, the least recently replayed dropped first.
//! Lists with a cuBLAS call (batched products) are launched directly. A failed capture turns
//! graphs off for the backend with a warning;
//! `TESSERA_CUDA_PATHS=-graphs` turns them off.

use super::args::Arg;
use super::Launch;
use crate::gpu::Gpu;
use crate::CudaError;
use cudarc::driver::{sys, CudaGraph};

/// A launch as the replay check compares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LaunchKey {
    entry: &'static str,
    early: bool,
    grid: (u32, u32, u32),
    block: (u32, u32, u32),
    shared: u32,
    args: Vec<u64>,
}

impl LaunchKey {
    pub(crate) fn of(l: &Launch) -> LaunchKey {
        LaunchKey { early: l.early, ..LaunchKey::new(l.entry, &l.cfg, &l.args) }
    }

    fn new(entry: &'static str, cfg: &cudarc::driver::LaunchConfig, list: &[Arg]) -> LaunchKey {
        let mut args = Vec::with_capacity(list.len() * 2);
        for a in list {
            match a {
                Arg::T(t) => {
                    args.push(t.p);
                    args.extend(t.ne.iter().chain(&t.nb).map(|&x| x as u64));
                    args.push(t.dtype as u64);
                }
                Arg::Ptr(p) => args.push(*p),
                Arg::I32(x) => args.push(*x as u32 as u64),
                Arg::I64(x) => args.push(*x as u64),
                Arg::F32(x) => args.push(u64::from(x.to_bits())),
            }
        }
        LaunchKey {
            entry,
            early: false,
            grid: cfg.grid_dim,
            block: cfg.block_dim,
            shared: cfg.shared_mem_bytes,
            args,
        }
    }
}

/// A captured graph, owned by one backend (`G`: cudarc's graph; `()` in the tests of the
/// replay rule).
struct Captured<G> {
    key: Vec<LaunchKey>,
    graph: G,
}

// SAFETY: the graph handles are used only through the backend that owns them, which the
// `Backend` trait hands out by `&mut` (never from two threads at once); CUDA graph objects may
// be used from any thread when access is serialized.
unsafe impl Send for Captured<CudaGraph> {}

impl<G> std::fmt::Debug for Captured<G> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Captured({} launches)", self.key.len())
    }
}

/// Captured graphs kept, and lists remembered for capture, per backend.
const KEEP: usize = 8;

/// What to do with a list of launches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    /// Replay the captured graph of the list (now the most recently used, last).
    Replay,
    /// Capture it (it was seen lately).
    Capture,
    /// Launch it kernel by kernel (and remember it).
    Direct,
}

/// The replay state of one backend (see the module docs).
pub(crate) struct Graphs<G = CudaGraph> {
    /// The last lists launched directly (newest last): captured if one comes again.
    seen: Vec<Vec<LaunchKey>>,
    /// Captured graphs, the most recently replayed last.
    captured: Vec<Captured<G>>,
    /// A capture failed: no more graphs on this backend.
    off: bool,
    /// Replays and captures, for the logs.
    pub(crate) replays: u64,
    pub(crate) captures: u64,
}

impl<G> std::fmt::Debug for Graphs<G> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graphs")
            .field("captured", &self.captured)
            .field("seen", &self.seen.len())
            .field("off", &self.off)
            .field("replays", &self.replays)
            .finish()
    }
}

impl<G> Default for Graphs<G> {
    fn default() -> Self {
        Graphs { seen: Vec::new(), captured: Vec::new(), off: false, replays: 0, captures: 0 }
    }
}

impl<G> Graphs<G> {
    /// The rule (module docs): a captured list is replayed (and moved last), a list seen lately
    /// is captured (and forgotten as seen), another is launched directly and remembered.
    fn decide(&mut self, key: &[LaunchKey]) -> Action {
        if let Some(i) = self.captured.iter().position(|c| c.key == key) {
            let c = self.captured.remove(i);
            self.captured.push(c);
            return Action::Replay;
        }
        if let Some(i) = self.seen.iter().position(|k| k == key) {
            self.seen.remove(i);
            return Action::Capture;
        }
        if self.seen.len() == KEEP {
            self.seen.remove(0);
        }
        self.seen.push(key.to_vec());
        Action::Direct
    }

    /// Keeps a captured graph (dropping the least recently replayed beyond [`KEEP`]).
    fn keep(&mut self, key: Vec<LaunchKey>, graph: G) {
        if self.captured.len() == KEEP {
            self.captured.remove(0);
        }
        self.captured.push(Captured { key, graph });
    }

    /// Whether a failed capture turned graphs off.
    pub(crate) fn is_off(&self) -> bool {
        self.off
    }

    /// Graphs on again after a failed capture (its cause, early launches, removed).
    pub(crate) fn turn_on(&mut self) {
        self.off = false;
    }

    /// Drops the captured graphs (before the memory they refer to is freed).
    pub(crate) fn clear(&mut self) {
        self.captured.clear();
        self.seen.clear();
    }
}

impl Graphs<CudaGraph> {
    /// Queues `launches` on the GPU's stream: a replay of a captured graph of the same list, a
    /// capture when the list was seen lately, else `direct`.
    pub(crate) fn queue(
        &mut self,
        gpu: &Gpu,
        launches: &[Launch],
        direct: impl Fn(&[Launch]) -> Result<(), CudaError>,
    ) -> Result<(), CudaError> {
        // cuBLAS calls are not captured (a batch's products; batches rarely repeat).
        if self.off || launches.is_empty() || launches.iter().any(|l| l.func.is_none()) {
            return direct(launches);
        }
        let key: Vec<LaunchKey> = launches.iter().map(LaunchKey::of).collect();
        match self.decide(&key) {
            Action::Direct => direct(launches),
            Action::Replay => {
                self.replays += 1;
                let c = self.captured.last().expect("decide moved it last");
                c.graph
                    .launch()
                    .map_err(|e| CudaError::Driver(format!("replaying a CUDA graph: {e:?}")))
            }
            Action::Capture => match capture(gpu, launches, &direct) {
                Ok(graph) => {
                    self.captures += 1;
                    tracing::debug!(
                        launches = launches.len(),
                        captures = self.captures,
                        replays = self.replays,
                        "captured a CUDA graph"
                    );
                    let launched = graph
                        .launch()
                        .map_err(|e| CudaError::Driver(format!("launching a CUDA graph: {e:?}")));
                    self.keep(key, graph);
                    launched
                }
                Err(e) => {
                    tracing::warn!(error = %e, "CUDA graph capture failed: graphs off for this backend");
                    self.off = true;
                    self.captured.clear();
                    direct(launches)
                }
            },
        }
    }
}

/// Captures `launches` (queued by `direct` between the capture's begin and end) into a graph.
fn capture(
    gpu: &Gpu,
    launches: &[Launch],
    direct: &impl Fn(&[Launch]) -> Result<(), CudaError>,
) -> Result<CudaGraph, CudaError> {
    let driver =
        |what: &str, e: cudarc::driver::DriverError| CudaError::Driver(format!("{what}: {e:?}"));
    gpu.stream
        .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .map_err(|e| driver("beginning a capture", e))?;
    let queued = direct(launches);
    // The capture is ended whatever happened, so the stream is usable again.
    let ended = gpu.stream.end_capture(sys::CUgraphInstantiate_flags(0));
    queued?;
    ended
        .map_err(|e| driver("ending a capture", e))?
        .ok_or_else(|| CudaError::Driver("the capture made no graph".into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::args::{grid_for, TensorArg};

    /// Two launches are the same only with the same kernel, shape and every argument.
    #[test]
    fn keys_compare_every_argument() {
        let t = TensorArg { p: 4096, ne: [64, 1, 1, 1], nb: [4, 256, 256, 256], dtype: 0, pad: 0 };
        let args = vec![Arg::T(t), Arg::Ptr(8192), Arg::I32(3), Arg::F32(0.5)];
        let key = |entry, n: usize, args: &[Arg]| LaunchKey::new(entry, &grid_for(n), args);
        let base = key("unary_op", 64, &args);
        assert_eq!(base, key("unary_op", 64, &args));
        assert_ne!(base, key("binary_op", 64, &args), "another kernel");
        assert_ne!(base, key("unary_op", 100_000, &args), "another grid");
        let moved = TensorArg { p: 4100, ..t };
        let changed: [Vec<Arg>; 4] = [
            vec![Arg::T(moved), Arg::Ptr(8192), Arg::I32(3), Arg::F32(0.5)],
            vec![
                Arg::T(TensorArg { ne: [64, 2, 1, 1], ..t }),
                Arg::Ptr(8192),
                Arg::I32(3),
                Arg::F32(0.5),
            ],
            vec![Arg::T(t), Arg::Ptr(8192), Arg::I32(4), Arg::F32(0.5)],
            vec![Arg::T(t), Arg::Ptr(8192), Arg::I32(3), Arg::F32(-0.5)],
        ];
        for c in changed {
            assert_ne!(base, key("unary_op", 64, &c), "{c:?}");
        }
    }

    /// A step split into two alternating lists gets both captured on their second coming and
    /// replayed after; a list seen once is never captured.
    #[test]
    fn alternating_lists_are_captured_and_replayed() {
        let list = |n: i32| vec![LaunchKey::new("unary_op", &grid_for(64), &[Arg::I32(n)])];
        let (a, b, prompt) = (list(1), list(2), list(3));
        let mut g: Graphs<()> = Graphs::default();
        let mut step = |k: &[LaunchKey]| {
            let act = g.decide(k);
            if act == Action::Capture {
                g.keep(k.to_vec(), ());
            }
            act
        };
        use Action::*;
        let got: Vec<Action> =
            [&prompt, &a, &b, &a, &b, &a, &b, &a].iter().map(|k| step(k)).collect();
        assert_eq!(got, [Direct, Direct, Direct, Capture, Capture, Replay, Replay, Replay]);
        // Lists seen once, more than KEEP of them, push the oldest out of memory.
        let mut g: Graphs<()> = Graphs::default();
        for n in 0..=KEEP as i32 {
            assert_eq!(g.decide(&list(100 + n)), Direct);
        }
        assert_eq!(g.decide(&list(100)), Direct, "forgotten");
        assert_eq!(g.decide(&list(100 + KEEP as i32)), Capture);
    }
}
