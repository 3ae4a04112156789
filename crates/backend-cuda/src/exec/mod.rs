//! The executor: a graph is planned node by node ([`crate::plan`]), resolved once (every
//! launch's function handle, device addresses and scratch address, modules loaded), and only
//! then queued on the GPU's stream, with no lookup, lock or allocation between launches.
//! `CudaBackend::graph_compute` returns once the launches are queued; reads of the results
//! wait for the stream.
//!
//! - Fused windows ([`crate::plan::fusion_windows`], the kinds there are kernels for): the
//!   fused kernel is launched at the window's first node and the window's other nodes are
//!   skipped.
//! - A list of launches equal to the previous one is replayed from a captured CUDA graph
//!   ([`graphs`]).
//! - A batched product's cuBLAS call (`gemm.rs`) is queued on the same stream, between the
//!   kernels that convert its inputs and those that read its output.
//! - `fused.rs` resolves the fused windows and MUL_MAT_ID's int8 path.
//! - `nodes.rs` gives each node's launches (kernels, arguments, launch shape) for the kernel
//!   its plan chose; `args.rs` holds the arguments between resolving and launching.
//!
//! Scratch memory is one arena per backend: the gate/up kernels' row counters (zeroed once),
//! the int8 products' Q8_1 activations, one region
//! per distinct input ([`crate::plan::share_q8_1`]: quantized once, read by every product of
//! it), then one region for the largest need of a single node (nodes run in stream order, so
//! they share it). It grows only between graphs, after the stream has drained, so its
//! addresses hold while a resolved graph lives.

mod args;
mod experts;
mod fused;
mod gemm;
mod graphs;
mod nodes;

use crate::gpu::Gpu;
use crate::plan::{
    early_launches, fused_windows, pdl, plan_node, q8_writers, share_q8_1, FastPath, Kernel,
    NodePlan, Paths, Window, ROW_COUNTERS,
};
use crate::CudaError;
use args::Arg;
use cudarc::driver::{result, sys, CudaFunction, LaunchConfig, PushKernelArg};
use nodes::{Pending, Resolver};
use std::collections::{HashMap, HashSet};
use tessera_backend::{BackendError, Bindings};
use tessera_tensor::graph::{Context, Graph, TensorId};

/// Launches `launches` one by one on the GPU's stream.
fn launch_all(gpu: &Gpu, launches: &[Launch]) -> Result<(), CudaError> {
    for l in launches {
        let Some(func) = &l.func else {
            gemm::call(gpu, &l.args)?;
            continue;
        };
        if l.early {
            launch_early(gpu, func, l)?;
            continue;
        }
        let mut b = gpu.stream.launch_builder(func);
        for a in &l.args {
            match a {
                Arg::T(t) => b.arg(t),
                Arg::Ptr(p) => b.arg(p),
                Arg::I32(x) => b.arg(x),
                Arg::I64(x) => b.arg(x),
                Arg::F32(x) => b.arg(x),
            };
        }
        // SAFETY: every address is inside a buffer of this device (checked when resolved) or
        // the scratch arena (sized by the plan), with the shape and strides the kernels index
        // within; scalars match the kernels' parameter types in order.
        unsafe { b.launch(l.cfg) }.map_err(|e| CudaError::Driver(format!("{}: {e:?}", l.entry)))?;
    }
    Ok(())
}

/// The most arguments a kernel takes (rope_kv_store_op has 22).
const MAX_ARGS: usize = 32;

/// Launches `l` with programmatic stream serialization ([`crate::plan::early_launches`]): its
/// blocks may start before the previous kernel's end; the kernel waits for it in
/// `pdl_start()`.
fn launch_early(gpu: &Gpu, func: &CudaFunction, l: &Launch) -> Result<(), CudaError> {
    let err = |e: cudarc::driver::DriverError| CudaError::Driver(format!("{}: {e:?}", l.entry));
    let mut params = [std::ptr::null_mut::<std::ffi::c_void>(); MAX_ARGS];
    if l.args.len() > MAX_ARGS {
        return Err(CudaError::Driver(format!("{}: {} arguments", l.entry, l.args.len())));
    }
    for (p, a) in params.iter_mut().zip(&l.args) {
        *p = a.param();
    }
    // SAFETY: a plain-data union, all zeros before the one field set.
    let mut value: sys::CUlaunchAttributeValue = unsafe { std::mem::zeroed() };
    value.programmaticStreamSerializationAllowed = 1;
    let mut attr = sys::CUlaunchAttribute {
        id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
        pad: [0; 4],
        value,
    };
    let cfg = sys::CUlaunchConfig {
        gridDimX: l.cfg.grid_dim.0,
        gridDimY: l.cfg.grid_dim.1,
        gridDimZ: l.cfg.grid_dim.2,
        blockDimX: l.cfg.block_dim.0,
        blockDimY: l.cfg.block_dim.1,
        blockDimZ: l.cfg.block_dim.2,
        sharedMemBytes: l.cfg.shared_mem_bytes,
        hStream: gpu.stream.cu_stream(),
        attrs: &mut attr,
        numAttrs: 1,
    };
    gpu.bind()?;
    // SAFETY: as `launch_all`'s launches (addresses inside this device's buffers or the
    // scratch arena, scalars of the kernels' parameter types in order); `params` points at
    // the arguments in `l.args`, alive for the call, which copies them; the stream and the
    // function belong to this context, bound above.
    unsafe {
        sys::cuLaunchKernelEx(&cfg, func.cu_function(), params.as_mut_ptr(), std::ptr::null_mut())
    }
    .result()
    .map_err(err)
}

/// One launch, resolved.
struct Launch {
    entry: &'static str,
    /// The kernel; `None` for a cuBLAS product ([`gemm::ENTRY`]).
    func: Option<CudaFunction>,
    cfg: LaunchConfig,
    args: Vec<Arg>,
    /// Launched early (programmatic dependent launch: [`crate::plan::early_launches`]).
    early: bool,
}

/// The arena's first bytes: the gate/up kernels' group counters ([`ROW_COUNTERS`] u32,
/// zeroed when the arena is allocated; every launch leaves them zero).
const COUNTERS: usize = ROW_COUNTERS * 4;

/// Device memory the kernels use between their inputs and outputs (see the module docs).
#[derive(Debug, Default)]
struct Scratch {
    ptr: sys::CUdeviceptr,
    size: usize,
}

/// The last graph's resolved launches, kept while the context's, graph's and bindings'
/// versions and the scratch arena's address hold: a decoded token's graph, computed again with
/// its inputs rewritten in place, is queued without planning or resolving a node.
struct Resolved {
    key: (u64, u64, u64),
    scratch: sys::CUdeviceptr,
    /// Early launches were still allowed when it was resolved (see `Executor::pdl_off`).
    pdl_allowed: bool,
    launches: Vec<Launch>,
}

/// Plans, resolves and queues graphs on one GPU (see the module docs).
pub(crate) struct Executor {
    paths: Paths,
    scratch: Scratch,
    graphs: graphs::Graphs,
    /// The last plan summary logged (a new one is logged when it changes).
    logged: String,
    /// The last count of fused windows logged (likewise).
    logged_fused: String,
    resolved: Option<Resolved>,
    /// A capture with early launches failed (a driver without programmatic edges in graphs):
    /// no more early launches on this backend.
    pdl_off: bool,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("paths", &self.paths)
            .field("scratch", &self.scratch)
            .field("graphs", &self.graphs)
            .finish()
    }
}

impl Executor {
    /// An executor taking the fast paths `paths` allows.
    pub(crate) fn new(paths: Paths) -> Executor {
        Executor {
            paths,
            scratch: Scratch::default(),
            graphs: graphs::Graphs::default(),
            logged: String::new(),
            logged_fused: String::new(),
            resolved: None,
            pdl_off: false,
        }
    }

    /// The fast paths allowed.
    pub(crate) fn paths(&self) -> Paths {
        self.paths
    }

    /// The plan of every node of `graph`: the first the backend does not run is the error.
    pub(crate) fn plan(
        &self,
        gpu: &Gpu,
        ctx: &Context,
        graph: &Graph,
    ) -> Result<Vec<(TensorId, NodePlan)>, BackendError> {
        let cap = gpu.capability();
        graph
            .nodes()
            .iter()
            .map(|&node| {
                plan_node(ctx, node, cap, self.paths).map(|p| (node, p)).map_err(|why| {
                    let d = ctx.get(node);
                    BackendError::Unsupported {
                        backend: gpu.name.clone(),
                        op: d.op.name(),
                        name: d.name.clone(),
                        detail: why,
                    }
                })
            })
            .collect()
    }

    /// Plans, resolves and queues `graph` on the GPU's stream (not waiting for it).
    pub(crate) fn run(
        &mut self,
        gpu: &Gpu,
        ctx: &Context,
        graph: &Graph,
        bindings: &Bindings,
    ) -> Result<(), BackendError> {
        let t0 = std::time::Instant::now();
        let kernel_err = |e: CudaError| BackendError::Kernel {
            backend: gpu.name.clone(),
            message: e.to_string(),
        };
        let key = (ctx.version(), graph.version(), bindings.version());
        if let Some(r) = self.resolved.take() {
            if r.key == key && r.scratch == self.scratch.ptr && r.pdl_allowed != self.pdl_off {
                let queued = self.launch(gpu, &r.launches);
                self.resolved = Some(r);
                tracing::trace!("graph: queued again in {} us", t0.elapsed().as_micros());
                return queued.map_err(kernel_err);
            }
        }
        let plans = self.plan(gpu, ctx, graph)?;
        if tracing::enabled!(tracing::Level::DEBUG) {
            let s = crate::plan::summary(plans.iter().map(|(_, p)| p));
            if s != self.logged {
                tracing::debug!(device = %gpu.name, "plan: {s}");
                self.logged = s;
            }
        }
        let planned = t0.elapsed();
        // (Whether these launches may start early: a failed capture below can turn that off.)
        let pdl_allowed = !self.pdl_off;
        let launches = self.resolve(gpu, ctx, &plans, bindings).map_err(kernel_err)?;
        self.launch(gpu, &launches).map_err(kernel_err)?;
        let queued = launches.len();
        self.resolved = Some(Resolved { key, scratch: self.scratch.ptr, pdl_allowed, launches });
        tracing::trace!(
            nodes = plans.len(),
            launches = queued,
            "graph: planned in {} us, resolved and queued in {} us",
            planned.as_micros(),
            (t0.elapsed() - planned).as_micros()
        );
        Ok(())
    }

    /// Every launch of the planned nodes, resolved (fused windows taken, modules loaded).
    fn resolve(
        &mut self,
        gpu: &Gpu,
        ctx: &Context,
        plans: &[(TensorId, NodePlan)],
        bindings: &Bindings,
    ) -> Result<Vec<Launch>, CudaError> {
        // The int8 products' shared activations first, then one region for the largest need
        // of a single node.
        let (mut q8, q8_bytes) = share_q8_1(ctx, plans);
        let own = plans.iter().map(|(_, p)| p.scratch).max().unwrap_or(0);
        self.reserve(gpu, COUNTERS + q8_bytes + own)?;
        let base = self.scratch.ptr + COUNTERS as u64;
        let resolver = Resolver {
            gpu,
            ctx,
            bindings,
            scratch: base,
            own: base + q8_bytes as u64,
            counters: self.scratch.ptr,
            paths: self.paths,
        };
        // Windows a fused kernel takes: launched at their first node, the rest skipped.
        let windows =
            if self.paths.allows(FastPath::Fused) { fused_windows(ctx, plans) } else { Vec::new() };
        let mut first: HashMap<TensorId, &Window> = HashMap::new();
        let mut skip: HashSet<TensorId> = HashSet::new();
        for w in &windows {
            first.insert(w.nodes[0], w);
            skip.extend(w.nodes[1..].iter().copied());
        }
        // The fused norms and the attention merges whose output int8 products read write
        // their Q8_1 blocks too.
        let q8_out: HashMap<TensorId, u64> = if self.paths.allows(FastPath::Fused) {
            let writers = q8_writers(ctx, plans, &windows, &mut q8);
            writers.into_iter().map(|(node, offset)| (node, base + offset as u64)).collect()
        } else {
            HashMap::new()
        };
        if tracing::enabled!(tracing::Level::DEBUG) {
            let mut kinds: std::collections::BTreeMap<String, usize> = Default::default();
            for w in first.values() {
                *kinds.entry(format!("{:?}", w.kind)).or_default() += 1;
            }
            let mut parts: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} x{n}")).collect();
            let windows = q8_out.keys().filter(|n| first.contains_key(*n)).count();
            parts.push(format!("norms and gate/up writing Q8_1 x{windows}"));
            parts.push(format!("attention merges writing Q8_1 x{}", q8_out.len() - windows));
            let line = parts.join(", ");
            if line != self.logged_fused {
                tracing::debug!(device = %gpu.name, "fused windows: {line}");
                self.logged_fused = line;
            }
        }
        let mut pending: Vec<Pending> = Vec::new();
        for ((node, plan), q8) in plans.iter().zip(q8) {
            if skip.contains(node) {
                continue;
            }
            if let Some(w) = first.get(node) {
                pending.extend(resolver.fused(w, q8, q8_out.get(node).copied())?);
            } else if plan.kernel != Kernel::Nothing {
                pending.extend(resolver.node(*node, plan, q8, q8_out.get(node).copied())?);
            }
        }
        gpu.precompile(pending.iter().map(|p| p.entry));
        let mut functions: HashMap<&'static str, CudaFunction> = HashMap::new();
        let mut launches = Vec::with_capacity(pending.len());
        for p in pending {
            let func = match functions.get(p.entry) {
                _ if p.entry == gemm::ENTRY => None,
                Some(f) => Some(f.clone()),
                None => {
                    let f = gpu.function(p.entry)?;
                    functions.insert(p.entry, f.clone());
                    Some(f)
                }
            };
            launches.push(Launch { entry: p.entry, func, cfg: p.cfg, args: p.args, early: false });
        }
        let on = pdl(gpu.capability(), self.paths) && !self.pdl_off;
        let kernels: Vec<bool> = launches.iter().map(|l| l.func.is_some()).collect();
        for (l, early) in launches.iter_mut().zip(early_launches(on, &kernels)) {
            l.early = early;
        }
        Ok(launches)
    }

    /// Queues resolved launches: replayed from a captured CUDA graph where `graphs` says so,
    /// else one by one.
    fn launch(&mut self, gpu: &Gpu, launches: &[Launch]) -> Result<(), CudaError> {
        let direct = |launches: &[Launch]| launch_all(gpu, launches);
        if !self.paths.allows(FastPath::Graphs) {
            return direct(launches);
        }
        let queued = self.graphs.queue(gpu, launches, direct);
        if self.graphs.is_off() && launches.iter().any(|l| l.early) {
            // Graphs matter more than early launches: without programmatic edges in the
            // driver's graphs, launch every kernel as usual and capture again.
            tracing::warn!(
                "CUDA graph capture with programmatic dependent launch failed: early launches \
                 off for this backend, graphs on again"
            );
            self.pdl_off = true;
            self.graphs.turn_on();
        }
        queued
    }

    /// Makes the arena at least `need` bytes: a larger one only after the stream drained, so
    /// no queued kernel reads the old one.
    fn reserve(&mut self, gpu: &Gpu, need: usize) -> Result<(), CudaError> {
        if need <= self.scratch.size {
            return Ok(());
        }
        gpu.stream.synchronize().map_err(|e| CudaError::Driver(format!("{e:?}")))?;
        self.release(gpu);
        let size = need.next_power_of_two().max(1 << 16);
        gpu.bind()?;
        // SAFETY: the context is current (bound above); freed once, in `release`.
        let ptr = unsafe { result::malloc_sync(size) }
            .map_err(|e| CudaError::Driver(format!("scratch of {size} bytes: {e:?}")))?;
        // Queued on the backend's own stream, so every kernel queued after it sees the zeros
        // (the synchronous memset runs on the legacy default stream, which a non-blocking
        // stream does not wait for).
        // SAFETY: the first COUNTERS bytes of the arena just allocated (size >= 64 KiB).
        unsafe { result::memset_d8_async(ptr, 0, COUNTERS, gpu.stream.cu_stream()) }
            .map_err(|e| CudaError::Driver(format!("zeroing the row counters: {e:?}")))?;
        self.scratch = Scratch { ptr, size };
        Ok(())
    }

    /// Frees the arena (the stream drained first) and the captured graph that refers to it.
    pub(crate) fn release(&mut self, gpu: &Gpu) {
        self.graphs.clear();
        self.resolved = None;
        if self.scratch.size == 0 {
            return;
        }
        if gpu.stream.synchronize().is_ok() && gpu.bind().is_ok() {
            // SAFETY: allocated by `reserve` in this context; no queued kernel reads it (the
            // stream drained above); freed once (the size is reset below).
            let _ = unsafe { result::free_sync(self.scratch.ptr) };
        }
        self.scratch = Scratch::default();
    }
}
