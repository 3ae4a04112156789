//! `CpuBackend` (ggml's CPU backend: `ggml_graph_plan` + `ggml_graph_compute`) and `CpuDevice`.
//!
//! `graph_compute` resolves every node to memory once (tensor ids to host addresses through
//! the bindings), checks that the kernels take every node, sizes the shared work buffer (the
//! plan), then has every pool thread walk the node list with a barrier after each node.

use crate::ops::{self, Node};
use crate::pool::ThreadPool;
use crate::{ComputeParams, SimdLevel, TensorRef};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tessera_backend::{
    Backend, BackendError, Bindings, Buffer, BufferType, Device, DeviceKind, HostBufferType, Result,
};
use tessera_tensor::graph::{Context, Graph, TensorId, MAX_SRC};

/// A 64-byte aligned chunk of the work buffer.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// The CPU backend: a persistent thread pool, a SIMD level and a work buffer kept between
/// graphs.
pub struct CpuBackend {
    pool: ThreadPool,
    simd: SimdLevel,
    pin: bool,
    work: Vec<Line>,
    abort: Arc<AtomicBool>,
    batch_invariant: bool,
    /// [`Backend::set_prefer_batched`]'s hint.
    prefer_batched: bool,
    /// The last graph's resolved nodes, reused while its versions hold (see `graph_compute`).
    resolved: Option<Resolved>,
}

/// A graph's nodes with their tensors' addresses and its work size, and what they were
/// resolved from: the context's, graph's and bindings' versions, the thread count and the
/// batch-invariant setting (work sizes depend on both).
struct Resolved {
    key: (u64, u64, u64, usize, bool),
    nodes: Vec<ops::Node>,
    wsize: usize,
}

// SAFETY: the nodes' addresses point into buffers held by the `Bindings` whose version is in
// `key`; they are read only when a call passes bindings of that version, which (versions are
// never reused) is that same live object, still holding those buffers. The backend is used by
// one thread at a time (`&mut self`).
unsafe impl Send for Resolved {}

impl std::fmt::Debug for CpuBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuBackend")
            .field("threads", &self.pool.n_threads())
            .field("simd", &self.simd)
            .finish()
    }
}

impl CpuBackend {
    /// A backend with `n_threads` threads (at least 1) and the SIMD level of
    /// [`SimdLevel::from_env`].
    ///
    /// # Panics
    /// If the OS refuses to start the threads.
    pub fn new(n_threads: usize) -> Self {
        Self::with_options(n_threads, false).expect("starting the CPU backend's threads")
    }

    /// A backend with `n_threads` threads, pinned to cores when `pin` is set.
    pub fn with_options(n_threads: usize, pin: bool) -> Result<Self> {
        let abort = Arc::new(AtomicBool::new(false));
        let pool =
            ThreadPool::new(n_threads, pin, abort.clone()).map_err(|e| BackendError::Alloc {
                buffer_type: "CPU threads".into(),
                size: n_threads,
                reason: e.to_string(),
            })?;
        Ok(CpuBackend {
            pool,
            simd: SimdLevel::from_env(),
            pin,
            work: Vec::new(),
            abort,
            batch_invariant: false,
            prefer_batched: false,
            resolved: None,
        })
    }

    /// Number of threads.
    pub fn n_threads(&self) -> usize {
        self.pool.n_threads()
    }

    /// Restarts the pool with `n` threads (`ggml_backend_cpu_set_n_threads`).
    pub fn set_n_threads(&mut self, n: usize) -> Result<()> {
        if n.max(1) != self.pool.n_threads() {
            let pool = ThreadPool::new(n, self.pin, self.abort.clone()).map_err(|e| {
                BackendError::Alloc {
                    buffer_type: "CPU threads".into(),
                    size: n,
                    reason: e.to_string(),
                }
            })?;
            self.pool = pool;
        }
        Ok(())
    }

    /// The SIMD level kernels use.
    pub fn simd_level(&self) -> SimdLevel {
        self.simd
    }

    /// Forces a SIMD level (lowered to what the CPU has), e.g. to test every path.
    pub fn set_simd_level(&mut self, level: SimdLevel) {
        self.simd = level.min(SimdLevel::detect());
    }

    /// A flag that stops the current and later graphs at the next node boundary when set
    /// (ggml's abort callback); `graph_compute` then returns [`BackendError::Aborted`]. Clear
    /// it to compute again.
    pub fn abort_flag(&self) -> Arc<AtomicBool> {
        self.abort.clone()
    }

    /// Bytes of work buffer currently held.
    pub fn work_size(&self) -> usize {
        self.work.len() * 64
    }
}

/// `id` resolved to its host address, type, shape and strides.
fn resolve(ctx: &Context, bindings: &Bindings, id: TensorId) -> Result<TensorRef> {
    let desc = ctx.get(id);
    let storage = bindings
        .storage(ctx, id)
        .ok_or_else(|| BackendError::Unbound { name: desc.name.clone(), index: id.index() })?;
    let base = storage.buffer.host_ptr().ok_or_else(|| BackendError::Unsupported {
        backend: "CPU".into(),
        op: desc.op.name(),
        name: desc.name.clone(),
        detail: format!("tensor is in a non-host buffer ({})", storage.buffer.name()),
    })?;
    tessera_backend::check_range(
        storage.buffer.name(),
        "tensor",
        storage.offset,
        desc.n_bytes(),
        storage.buffer.size(),
    )?;
    Ok(TensorRef {
        data: base.as_ptr().wrapping_add(storage.offset),
        dtype: desc.dtype,
        ne: desc.ne,
        nb: desc.nb,
        repacked: crate::is_repacked(&*storage.buffer),
    })
}

/// A node with placeholder addresses, for [`Backend::supports_op`] (types and strides only).
fn describe(ctx: &Context, id: TensorId) -> Node {
    let as_ref = |id: TensorId| {
        let d = ctx.get(id);
        TensorRef::new(std::ptr::null_mut(), d.dtype, d.ne, d.nb)
    };
    let desc = ctx.get(id);
    let mut src = [None; MAX_SRC];
    for (s, id) in src.iter_mut().zip(desc.src) {
        *s = id.map(as_ref);
    }
    Node { op: desc.op, dst: as_ref(id), src }
}

impl Backend for CpuBackend {
    fn name(&self) -> &str {
        "CPU"
    }

    fn buffer_type(&self) -> Arc<dyn BufferType> {
        Arc::new(HostBufferType)
    }

    fn supports_op(&self, ctx: &Context, node: TensorId) -> bool {
        ops::supports(&describe(ctx, node))
    }

    /// Host memory, and the CPU device's repacked weights (not host memory to other backends).
    fn supports_buffer(&self, buffer: &dyn Buffer) -> bool {
        buffer.is_host() || crate::is_repacked(buffer)
    }

    fn supports_buffer_type(&self, buft: &dyn BufferType) -> bool {
        buft.is_host() || buft.name() == crate::REPACK_NAME
    }

    fn set_n_threads(&mut self, n: usize) -> Result<()> {
        CpuBackend::set_n_threads(self, n)
    }

    fn set_batch_invariant(&mut self, on: bool) -> Result<()> {
        self.batch_invariant = on;
        Ok(())
    }

    fn set_prefer_batched(&mut self, on: bool) -> Result<()> {
        self.prefer_batched = on;
        Ok(())
    }

    fn graph_compute(&mut self, ctx: &Context, graph: &Graph, bindings: &Bindings) -> Result<()> {
        // A graph computed again unchanged (a decoded token's, with its inputs rewritten in
        // place) keeps its resolved nodes: no lookups per node and token.
        let key = (
            ctx.version(),
            graph.version(),
            bindings.version(),
            self.pool.n_threads(),
            self.batch_invariant,
        );
        let resolved = match self.resolved.take() {
            Some(r) if r.key == key => r,
            _ => {
                let (nodes, wsize) = self.resolve_graph(ctx, graph, bindings)?;
                Resolved { key, nodes, wsize }
            }
        };
        let result = self.compute_nodes(&resolved.nodes, resolved.wsize);
        self.resolved = Some(resolved);
        result
    }
}

impl CpuBackend {
    /// Every node of `graph` with its tensors' addresses, and the work size they need.
    fn resolve_graph(
        &self,
        ctx: &Context,
        graph: &Graph,
        bindings: &Bindings,
    ) -> Result<(Vec<ops::Node>, usize)> {
        let mut nodes = Vec::with_capacity(graph.nodes().len());
        let mut wsize = 0usize;
        for &id in graph.nodes() {
            let desc = ctx.get(id);
            if ops::is_noop(&desc.op) {
                continue;
            }
            let mut node = describe(ctx, id);
            if !ops::supports(&node) {
                return Err(BackendError::Unsupported {
                    backend: "CPU".into(),
                    op: desc.op.name(),
                    name: desc.name.clone(),
                    detail: format!(
                        "dst {} from {}",
                        desc.dtype,
                        desc.sources()
                            .map(|s| ctx.get(s).dtype.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                });
            }
            node.dst = resolve(ctx, bindings, id)?;
            for (slot, sid) in node.src.iter_mut().zip(desc.src) {
                if let Some(sid) = sid {
                    *slot = Some(resolve(ctx, bindings, sid)?);
                }
            }
            wsize = wsize.max(ops::work_size(&node, self.pool.n_threads(), self.batch_invariant));
            nodes.push(node);
        }
        Ok((nodes, wsize))
    }

    /// Runs resolved nodes on the pool, with a work buffer of at least `wsize` bytes.
    fn compute_nodes(&mut self, nodes: &[ops::Node], wsize: usize) -> Result<()> {
        if nodes.is_empty() {
            return Ok(());
        }
        if self.work.len() * 64 < wsize {
            self.work.resize(wsize.div_ceil(64), Line([0; 64]));
        }
        if self.abort.load(Ordering::SeqCst) {
            return Err(BackendError::Aborted);
        }
        let wdata = self.work.as_mut_ptr().cast::<u8>();
        let wbytes = self.work.len() * 64;
        let (nth, simd, abort) = (self.pool.n_threads(), self.simd, &*self.abort);
        let (batch_invariant, prefer_batched) = (self.batch_invariant, self.prefer_batched);
        let pool = &self.pool;
        let wptr = SendPtr(wdata);
        // A few rows looked up (the token embeddings of a model whose layers run on a GPU):
        // the calling thread alone, without waking the pool (on a 16-core host that wake-up
        // was 0.16-0.39 ms a decoded token). GET_ROWS splits by rows, so its bits do not depend
        // on the thread count.
        let nth = if tiny_lookup(nodes) { 1 } else { nth };
        let job = |ith: usize| {
            let p = ComputeParams {
                ith,
                nth,
                wdata: wptr.get(),
                wsize: wbytes,
                sync: pool.sync(),
                simd,
                batch_invariant,
                prefer_batched,
            };
            for (i, node) in nodes.iter().enumerate() {
                ops::compute(&p, node);
                if i + 1 < nodes.len() && nth > 1 {
                    p.sync.barrier();
                }
                if abort.load(Ordering::Relaxed) {
                    break;
                }
            }
        };
        let result = if nth == 1 { pool.run_alone(&job) } else { pool.run(&job) };
        match result {
            Err(msg) => {
                self.abort.store(false, Ordering::SeqCst);
                Err(BackendError::Kernel { backend: "CPU".into(), message: msg })
            }
            Ok(()) if self.abort.load(Ordering::SeqCst) => Err(BackendError::Aborted),
            Ok(()) => Ok(()),
        }
    }
}

/// Whether a graph is only GET_ROWS of at most 64k values in all (see `graph_compute`); a
/// model's graph fails at its first node that is not a lookup.
fn tiny_lookup(nodes: &[ops::Node]) -> bool {
    nodes.iter().all(|n| matches!(n.op, tessera_tensor::graph::Op::GetRows))
        && nodes.iter().map(|n| n.dst.ne.iter().product::<usize>()).sum::<usize>() <= 1 << 16
}

/// The work buffer's address, shared by the pool's threads (each node's kernel decides who
/// writes which part).
#[derive(Clone, Copy)]
struct SendPtr(*mut u8);

impl SendPtr {
    fn get(self) -> *mut u8 {
        self.0
    }
}

// SAFETY: the pointer is only dereferenced by kernels, which split the buffer between threads
// and meet at barriers before reading another thread's part.
unsafe impl Sync for SendPtr {}
// SAFETY: as above.
unsafe impl Send for SendPtr {}

/// The host CPU as a [`Device`]: the one place that decides the SIMD level its kernels run at
/// (its backends compute at it, and its repacked buffer type follows llama.cpp's rule for
/// it), so the level a model was loaded for is the level it computes at.
#[derive(Debug, Clone, Copy)]
pub struct CpuDevice {
    level: SimdLevel,
}

impl Default for CpuDevice {
    /// [`CpuDevice::from_env`].
    fn default() -> Self {
        Self::from_env()
    }
}

impl CpuDevice {
    /// The CPU at the level `TESSERA_SIMD` asks for, else the best it has
    /// ([`SimdLevel::from_env`]).
    pub fn from_env() -> Self {
        CpuDevice { level: SimdLevel::from_env() }
    }

    /// The CPU at `level`, lowered to what it has.
    pub fn new(level: SimdLevel) -> Self {
        CpuDevice { level: level.min(SimdLevel::detect()) }
    }

    /// [`CpuDevice::from_env`] as the shared device a model loader takes
    /// (`tessera_llama::LoadParams::host`).
    pub fn shared() -> Arc<dyn Device> {
        Arc::new(Self::from_env())
    }

    /// The SIMD level its kernels run at.
    pub fn simd_level(&self) -> SimdLevel {
        self.level
    }

    fn meminfo(key: &str) -> Option<u64> {
        let text = std::fs::read_to_string("/proc/meminfo").ok()?;
        let line = text.lines().find(|l| l.starts_with(key))?;
        let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb * 1024)
    }
}

impl Device for CpuDevice {
    fn name(&self) -> &str {
        "CPU"
    }

    /// The CPU's model name, the SIMD level its kernels run at and their family:
    /// `AMD EPYC 7B13 | SIMD: avx2 | kernels: AVX2 (...)`.
    fn description(&self) -> String {
        let name = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|t| {
                t.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split(':').nth(1))
                    .map(|s| s.trim().to_string())
            })
            .unwrap_or_else(|| std::env::consts::ARCH.to_string());
        let vnni = self.level == SimdLevel::Avx512 && crate::has_vnni();
        format!(
            "{name} | SIMD: {}{} | kernels: {}",
            self.level,
            if vnni { "+vnni" } else { "" },
            crate::kernel_family(self.level, vnni)
        )
    }

    fn kind(&self) -> DeviceKind {
        DeviceKind::Cpu
    }

    fn memory(&self) -> (u64, u64) {
        (Self::meminfo("MemAvailable:").unwrap_or(0), Self::meminfo("MemTotal:").unwrap_or(0))
    }

    fn buffer_type(&self) -> Arc<dyn BufferType> {
        Arc::new(HostBufferType)
    }

    /// The repacked weight layout ([`RepackBufferType`](crate::RepackBufferType)), where
    /// llama.cpp's CPU backend has one at this level (from AVX2).
    fn extra_buffer_types(&self) -> Vec<Arc<dyn BufferType>> {
        if cfg!(target_arch = "x86_64") && self.level >= SimdLevel::Avx2 {
            vec![Arc::new(crate::RepackBufferType::new(self.level))]
        } else {
            Vec::new()
        }
    }

    fn init_backend(&self) -> Result<Box<dyn Backend>> {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut b = CpuBackend::with_options(n, false)?;
        b.set_simd_level(self.level);
        Ok(Box::new(b))
    }
}
