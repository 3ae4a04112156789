//! A simulated accelerator: a second device that computes with the CPU kernels but keeps its
//! tensors in memory of its own, which the CPU backend cannot read (and which cannot read host
//! memory). It exists so that everything a multi-device run needs (the scheduler's splits and
//! input copies, weights and KV cache placed per layer, `-ngl`) is exercised and checked bit
//! for bit on machines without a GPU: results on it are the CPU's, so any difference is the
//! scheduler's or the placement's fault.
//!
//! - [`SimBufferType`] / [`SimBuffer`]: "device" memory. `is_host()` is false and `host_ptr()`
//!   is `None`, so the CPU backend refuses it (its kernels resolve only host pointers); the
//!   bytes are reachable through `read`/`write` (the host<->device copies) and `device_ptr`.
//! - [`SimBackend`]: a [`CpuBackend`] behind a gate. `supports_buffer` accepts only its own
//!   device's buffers, `supports_op` refuses the ops it was told to refuse (to force splits),
//!   `offload_op` asks for large batches as CUDA does (batch >= 32), and `graph_compute`
//!   rejects any tensor in memory it cannot reach before computing anything.
//! - [`SimDevice`]: the [`Device`] (kind [`DeviceKind::Simulated`]), named `SIM0`, `SIM1`, ...

use crate::CpuBackend;
use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::Arc;
use tessera_backend::{
    check_range, copy_via_host, op_batch_size, Backend, BackendError, Bindings, Buffer, BufferType,
    BufferUsage, Device, DeviceKind, HostBuffer, Result, UsageCell, HOST_ALIGNMENT,
};
use tessera_tensor::graph::{Context, Graph, TensorDesc, TensorId};

/// Which ops a simulated device refuses (by the node's descriptor).
pub type RefuseFn = Arc<dyn Fn(&TensorDesc) -> bool + Send + Sync>;

/// The memory of simulated device `name`.
#[derive(Debug, Clone)]
pub struct SimBufferType {
    name: String,
}

impl SimBufferType {
    /// The buffer type of the device called `name`.
    pub fn new(name: &str) -> Self {
        SimBufferType { name: name.to_string() }
    }
}

impl BufferType for SimBufferType {
    fn name(&self) -> &str {
        &self.name
    }
    fn alloc(&self, size: usize) -> Result<Arc<dyn Buffer>> {
        Ok(Arc::new(SimBuffer {
            name: self.name.clone(),
            mem: HostBuffer::new(size, BufferUsage::Any)?,
            usage: UsageCell::default(),
        }))
    }
    fn alignment(&self) -> usize {
        HOST_ALIGNMENT
    }
}

/// A block of a simulated device's memory.
#[derive(Debug)]
pub struct SimBuffer {
    name: String,
    mem: HostBuffer,
    usage: UsageCell,
}

impl Buffer for SimBuffer {
    fn name(&self) -> &str {
        &self.name
    }
    fn size(&self) -> usize {
        self.mem.size()
    }
    fn is_host(&self) -> bool {
        false
    }
    fn device_ptr(&self) -> Option<NonNull<u8>> {
        self.mem.host_ptr()
    }
    fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.mem.write(offset, data)
    }
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.mem.read(offset, out)
    }
    fn clear(&self, value: u8) -> Result<()> {
        self.mem.clear(value)
    }
    fn usage(&self) -> BufferUsage {
        self.usage.get()
    }
    fn set_usage(&self, usage: BufferUsage) {
        self.usage.set(usage);
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
    /// Into another simulated device's memory directly (a peer copy), as a GPU copies between
    /// its own buffers or to a peer; to and from host memory through its pointer.
    fn copy_to(
        &self,
        offset: usize,
        dst: &dyn Buffer,
        dst_offset: usize,
        len: usize,
    ) -> Result<bool> {
        match dst.as_any().and_then(|a| a.downcast_ref::<SimBuffer>()) {
            Some(d) => {
                // Both memories are host memory underneath: one write from this one's bytes.
                check_range(&self.name, "copy", offset, len, self.mem.size())?;
                copy_via_host(&self.mem, offset, &d.mem, dst_offset, len)
            }
            None => copy_via_host(self, offset, dst, dst_offset, len),
        }
    }
}

/// A simulated buffer seen as host memory by the kernels of the backend that owns it.
#[derive(Debug)]
struct Alias {
    ptr: NonNull<u8>,
    size: usize,
    _owner: Arc<dyn Buffer>,
}

// SAFETY: `ptr` points into `_owner`'s memory, which lives as long as this alias; concurrent
// access to disjoint ranges is the `Buffer` contract, as for `HostBuffer`.
unsafe impl Send for Alias {}
// SAFETY: as above.
unsafe impl Sync for Alias {}

impl Buffer for Alias {
    fn name(&self) -> &str {
        self._owner.name()
    }
    fn size(&self) -> usize {
        self.size
    }
    fn host_ptr(&self) -> Option<NonNull<u8>> {
        Some(self.ptr)
    }
    fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self._owner.write(offset, data)
    }
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self._owner.read(offset, out)
    }
    fn clear(&self, value: u8) -> Result<()> {
        self._owner.clear(value)
    }
}

/// The backend of a simulated device: CPU kernels over the device's own memory.
pub struct SimBackend {
    name: String,
    cpu: CpuBackend,
    refuse: RefuseFn,
    offload_min_batch: Option<usize>,
}

impl std::fmt::Debug for SimBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimBackend").field("name", &self.name).field("cpu", &self.cpu).finish()
    }
}

impl SimBackend {
    /// The CPU backend that does the arithmetic (threads, SIMD level).
    pub fn cpu_mut(&mut self) -> &mut CpuBackend {
        &mut self.cpu
    }

    fn owns(&self, buffer: &dyn Buffer) -> bool {
        !buffer.is_host() && buffer.device_ptr().is_some() && buffer.name() == self.name
    }

    /// `bindings` for the tensors `graph` touches, with this device's buffers seen as host
    /// memory; an error for any tensor in memory the device cannot reach.
    fn translate(&self, ctx: &Context, graph: &Graph, bindings: &Bindings) -> Result<Bindings> {
        let mut out = Bindings::new();
        let mut aliases: HashMap<usize, Arc<dyn Buffer>> = HashMap::new();
        let mut bind = |id: TensorId, consumer: TensorId| -> Result<()> {
            let base = ctx.get(id).view_src.unwrap_or(id);
            if out.is_bound(ctx, base) {
                return Ok(());
            }
            let desc = ctx.get(consumer);
            let storage = bindings.storage(ctx, base).ok_or_else(|| BackendError::Unbound {
                name: ctx.get(base).name.clone(),
                index: base.index(),
            })?;
            if !self.owns(&*storage.buffer) {
                return Err(BackendError::Unsupported {
                    backend: self.name.clone(),
                    op: desc.op.name(),
                    name: desc.name.clone(),
                    detail: format!(
                        "{} is in a {} buffer, which this device cannot read",
                        ctx.get(base).name,
                        storage.buffer.name()
                    ),
                });
            }
            let key = Arc::as_ptr(&storage.buffer).cast::<u8>() as usize;
            let alias = aliases.entry(key).or_insert_with(|| {
                let owner = storage.buffer.clone();
                let ptr = owner.device_ptr().expect("owned buffers have a device pointer");
                Arc::new(Alias { ptr, size: owner.size(), _owner: owner })
            });
            out.bind(ctx, base, alias.clone(), storage.offset)
        };
        for &node in graph.nodes() {
            let desc = ctx.get(node);
            if desc.op.is_view() {
                continue;
            }
            bind(node, node)?;
            for s in desc.sources() {
                bind(s, node)?;
            }
        }
        Ok(out)
    }
}

impl Backend for SimBackend {
    fn name(&self) -> &str {
        &self.name
    }

    fn buffer_type(&self) -> Arc<dyn BufferType> {
        Arc::new(SimBufferType::new(&self.name))
    }

    fn supports_op(&self, ctx: &Context, node: TensorId) -> bool {
        !(self.refuse)(ctx.get(node)) && self.cpu.supports_op(ctx, node)
    }

    fn supports_buffer(&self, buffer: &dyn Buffer) -> bool {
        self.owns(buffer)
    }

    fn supports_buffer_type(&self, buft: &dyn BufferType) -> bool {
        !buft.is_host() && buft.name() == self.name
    }

    fn set_n_threads(&mut self, n: usize) -> Result<()> {
        self.cpu.set_n_threads(n)
    }

    fn set_batch_invariant(&mut self, on: bool) -> Result<()> {
        self.cpu.set_batch_invariant(on)
    }

    fn set_prefer_batched(&mut self, on: bool) -> Result<()> {
        self.cpu.set_prefer_batched(on)
    }

    fn offload_op(&self, ctx: &Context, node: TensorId) -> bool {
        self.offload_min_batch.is_some_and(|min| op_batch_size(ctx.get(node)) >= min)
    }

    fn graph_compute(&mut self, ctx: &Context, graph: &Graph, bindings: &Bindings) -> Result<()> {
        for &node in graph.nodes() {
            if !ctx.get(node).op.is_view() && (self.refuse)(ctx.get(node)) {
                let d = ctx.get(node);
                return Err(BackendError::Unsupported {
                    backend: self.name.clone(),
                    op: d.op.name(),
                    name: d.name.clone(),
                    detail: "refused by this simulated device".into(),
                });
            }
        }
        let local = self.translate(ctx, graph, bindings)?;
        self.cpu.graph_compute(ctx, graph, &local)
    }
}

/// A simulated accelerator (see the module docs).
#[derive(Clone)]
pub struct SimDevice {
    name: String,
    n_threads: usize,
    refuse: RefuseFn,
    offload_min_batch: Option<usize>,
}

impl std::fmt::Debug for SimDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimDevice").field("name", &self.name).finish()
    }
}

impl SimDevice {
    /// Device `SIM{index}`, computing with `n_threads` threads, refusing nothing, asking for
    /// batches of 32+ rows in `offload_op` as CUDA does.
    pub fn new(index: usize, n_threads: usize) -> Self {
        SimDevice {
            name: format!("SIM{index}"),
            n_threads: n_threads.max(1),
            refuse: Arc::new(|_| false),
            offload_min_batch: Some(32),
        }
    }

    /// Refuses the nodes `refuse` says yes to (its backend's `supports_op` is false for them).
    pub fn refusing(mut self, refuse: RefuseFn) -> Self {
        self.refuse = refuse;
        self
    }

    /// Refuses every op named in `ops` (ggml's names: `"GET_ROWS"`, `"SOFT_MAX"`, ...).
    pub fn refusing_ops(self, ops: &[&str]) -> Self {
        let ops: Vec<String> = ops.iter().map(|s| s.to_string()).collect();
        self.refusing(Arc::new(move |d: &TensorDesc| ops.iter().any(|o| o == d.op.name())))
    }

    /// Batches from which `offload_op` asks for host-weight ops (`None`: never).
    pub fn offload_min_batch(mut self, min: Option<usize>) -> Self {
        self.offload_min_batch = min;
        self
    }

    /// The device's backend, typed.
    pub fn backend(&self) -> Result<SimBackend> {
        Ok(SimBackend {
            name: self.name.clone(),
            cpu: CpuBackend::with_options(self.n_threads, false)?,
            refuse: self.refuse.clone(),
            offload_min_batch: self.offload_min_batch,
        })
    }
}

impl Device for SimDevice {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> String {
        "simulated accelerator (CPU kernels, memory of its own)".into()
    }
    fn kind(&self) -> DeviceKind {
        DeviceKind::Simulated
    }
    fn memory(&self) -> (u64, u64) {
        (0, 0)
    }
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        Arc::new(SimBufferType::new(&self.name))
    }
    fn init_backend(&self) -> Result<Box<dyn Backend>> {
        Ok(Box::new(self.backend()?))
    }
}
