//! Backends (streams that run graphs), devices and events (`ggml_backend_i`,
//! `ggml_backend_device_i`, `ggml_backend_event`).

use crate::bindings::Bindings;
use crate::buffer::{Buffer, BufferType};
use crate::Result;
use std::sync::Arc;
use tessera_tensor::graph::{Context, Graph, TensorId};

/// Something that computes whole graphs: the CPU thread pool, a CUDA stream. A backend is handed
/// graphs, never lone ops, and knows nothing of other backends.
pub trait Backend: Send {
    /// Name, e.g. `"CPU"`.
    fn name(&self) -> &str;

    /// The buffer type this backend computes in.
    fn buffer_type(&self) -> Arc<dyn BufferType>;

    /// Whether the backend can compute `node` with its types and shapes.
    fn supports_op(&self, ctx: &Context, node: TensorId) -> bool;

    /// Whether the backend can read tensors stored in `buffer`.
    fn supports_buffer(&self, buffer: &dyn Buffer) -> bool {
        buffer.is_host()
    }

    /// Whether the backend can read tensors in buffers of type `buft` (`supports_buft`): what
    /// a scheduler asks of tensors it has not allocated yet.
    fn supports_buffer_type(&self, buft: &dyn BufferType) -> bool {
        buft.is_host()
    }

    /// Whether running `node` here is worth copying its host-resident weights (GPU backends say
    /// yes for large batches).
    fn offload_op(&self, _ctx: &Context, _node: TensorId) -> bool {
        false
    }

    /// Computes every node of `graph` in order; every tensor of the graph must be bound.
    fn graph_compute(&mut self, ctx: &Context, graph: &Graph, bindings: &Bindings) -> Result<()>;

    /// Sets how many CPU threads the backend computes with, where it uses any (a no-op
    /// otherwise).
    fn set_n_threads(&mut self, _n: usize) -> Result<()> {
        Ok(())
    }

    /// Batch-invariant arithmetic: every output row computed with the bits it gets alone,
    /// whatever else is in the batch (kernels are chosen per row, never by the batch's size),
    /// at some cost in speed. Off by default (the reference implementation's kernel choices).
    /// A backend that cannot guarantee it refuses to turn it on.
    fn set_batch_invariant(&mut self, on: bool) -> Result<()> {
        if on {
            return Err(crate::BackendError::Setting {
                backend: self.name().to_string(),
                what: "batch-invariant arithmetic is not available on this backend".into(),
            });
        }
        Ok(())
    }

    /// Batched kernels for batches of every size: where the reference implementation changes
    /// algorithm at a batch size (ggml's CPU flash attention tiles from 64 query rows), take the
    /// batched algorithm from 2 rows. For batches whose rows share their work (speculative
    /// decoding's verification), it is faster; the results may differ from the reference's in
    /// the last bits, as results already do between batch sizes. A hint: backends without such
    /// a choice ignore it, and batch-invariant arithmetic
    /// ([`set_batch_invariant`](Self::set_batch_invariant)) takes precedence.
    fn set_prefer_batched(&mut self, _on: bool) -> Result<()> {
        Ok(())
    }

    /// Waits for queued work (a no-op for synchronous backends).
    fn synchronize(&mut self) -> Result<()> {
        Ok(())
    }

    /// Marks the current point of the backend's queue.
    fn record_event(&mut self) -> Result<Box<dyn Event>> {
        Ok(Box::new(CompletedEvent))
    }
}

/// Rows in one batch of `node` (ggml-cuda's `get_op_batch_size`): what a GPU backend's
/// [`Backend::offload_op`] weighs (GET_ROWS never, MUL_MAT by its columns, MUL_MAT_ID and
/// ROPE by their tokens, the rest by rows).
pub fn op_batch_size(node: &tessera_tensor::graph::TensorDesc) -> usize {
    use tessera_tensor::graph::Op;
    match node.op {
        Op::GetRows => 0,
        Op::MulMat => node.ne[1],
        // Tokens: `[n_out, n_used, n_tokens]` and `[head_dim, n_head, n_tokens]`.
        Op::MulMatId | Op::Rope(_) => node.ne[2],
        _ => node.ne[1] * node.ne[2] * node.ne[3],
    }
}

/// A point in a backend's queue that others can wait for.
pub trait Event: Send {
    /// Whether the work before the event is done.
    fn is_complete(&self) -> bool;
    /// Blocks until it is.
    fn synchronize(&self) -> Result<()>;
}

/// The event of a synchronous backend: always complete.
#[derive(Debug, Clone, Copy)]
pub struct CompletedEvent;

impl Event for CompletedEvent {
    fn is_complete(&self) -> bool {
        true
    }
    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
}

/// What kind of device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    /// The host CPU.
    Cpu,
    /// A discrete or integrated GPU.
    Gpu,
    /// A simulated accelerator: memory of its own, computed by host code (for tests and for
    /// checking multi-device runs without the hardware).
    Simulated,
}

/// A physical device: its memory, its buffer types, and a way to start backends on it.
pub trait Device: Send + Sync {
    /// Short name (`"CPU"`, `"CUDA0"`).
    fn name(&self) -> &str;
    /// Human description (CPU model, GPU name).
    fn description(&self) -> String;
    /// Kind of device.
    fn kind(&self) -> DeviceKind;
    /// (free, total) memory in bytes.
    fn memory(&self) -> (u64, u64);
    /// The device's own buffer type.
    fn buffer_type(&self) -> Arc<dyn BufferType>;
    /// Buffer types for weights, in the order a loader offers them a weight before the
    /// device's own (ggml's `ggml_backend_dev_get_extra_bufts`, what llama.cpp's
    /// `make_cpu_buft_list` asks): the CPU's repacked layout, for one. Each says which weights
    /// it takes ([`BufferType::supports_weight`]) and may store them in a layout of its own
    /// ([`Buffer::set_tensor`]); the device's backend reads them. None by default.
    ///
    /// [`Buffer::set_tensor`]: crate::Buffer::set_tensor
    fn extra_buffer_types(&self) -> Vec<Arc<dyn BufferType>> {
        Vec::new()
    }
    /// Starts a backend (stream) on the device.
    fn init_backend(&self) -> Result<Box<dyn Backend>>;
}

/// The devices known to a program, in priority order (the CPU last, as ggml requires).
#[derive(Default)]
pub struct Registry {
    devices: Vec<Arc<dyn Device>>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }
    /// Adds a device.
    pub fn add(&mut self, device: Arc<dyn Device>) {
        self.devices.push(device);
    }
    /// The devices, in the order added.
    pub fn devices(&self) -> &[Arc<dyn Device>] {
        &self.devices
    }
    /// The device called `name`.
    pub fn by_name(&self, name: &str) -> Option<&Arc<dyn Device>> {
        self.devices.iter().find(|d| d.name() == name)
    }
}
