//! [`CudaDevice`] and [`CudaBackend`]: the `tessera_backend` traits on an NVIDIA GPU.

use crate::buffer::CudaBufferType;
use crate::exec::Executor;
use crate::gpu::Gpu;
use crate::plan::{plan_node, Paths};
use crate::CudaError;
use cudarc::driver::result;
use std::sync::Arc;
use tessera_backend::{
    op_batch_size, Backend, BackendError, Bindings, Buffer, BufferType, Device, DeviceKind, Event,
    Result,
};
use tessera_tensor::graph::{Context, Graph, TensorId};

/// A CUDA GPU as a [`Device`], named `CUDA{ordinal}`.
#[derive(Debug, Clone)]
pub struct CudaDevice {
    gpu: Arc<Gpu>,
    /// The fast paths its backends may take (`TESSERA_CUDA_PATHS`).
    paths: Paths,
}

impl CudaDevice {
    /// Opens GPU `ordinal`: an error, never a panic, where there is no driver, library or
    /// device, or where `TESSERA_CUDA_PATHS` names an unknown path.
    pub fn new(ordinal: usize) -> std::result::Result<CudaDevice, CudaError> {
        let paths = Paths::from_env()?;
        let gpu = Arc::new(Gpu::open(ordinal)?);
        if paths != Paths::all() {
            tracing::info!(device = %gpu.name, paths = %paths.describe(), "CUDA fast paths limited");
        }
        Ok(CudaDevice { gpu, paths })
    }

    /// Every GPU the driver reports (none, without a driver).
    pub fn all() -> Vec<CudaDevice> {
        let n = crate::device::device_count().unwrap_or(0);
        (0..n).filter_map(|i| CudaDevice::new(i).ok()).collect()
    }

    /// The device's backend, typed.
    pub fn backend(&self) -> CudaBackend {
        CudaBackend { gpu: self.gpu.clone(), exec: Executor::new(self.paths) }
    }
}

fn backend_error(gpu: &Gpu, e: CudaError) -> BackendError {
    BackendError::Kernel { backend: gpu.name.clone(), message: e.to_string() }
}

impl Device for CudaDevice {
    fn name(&self) -> &str {
        &self.gpu.name
    }
    fn description(&self) -> String {
        format!("{} (sm_{})", self.gpu.info.name, self.gpu.info.arch())
    }
    fn kind(&self) -> DeviceKind {
        DeviceKind::Gpu
    }
    fn memory(&self) -> (u64, u64) {
        if self.gpu.bind().is_err() {
            return (0, 0);
        }
        result::mem_get_info().map_or((0, 0), |(free, total)| (free as u64, total as u64))
    }
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        Arc::new(CudaBufferType { gpu: self.gpu.clone() })
    }
    fn init_backend(&self) -> Result<Box<dyn Backend>> {
        Ok(Box::new(self.backend()))
    }
}

/// Computes graphs on one GPU's stream: each graph planned, resolved once and queued
/// ([`crate::exec`]); `graph_compute` returns once the work is queued, and reads of the
/// results wait for it (they are queued on the same stream).
#[derive(Debug)]
pub struct CudaBackend {
    gpu: Arc<Gpu>,
    exec: Executor,
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        self.exec.release(&self.gpu);
    }
}

/// A point in the GPU's stream (`cuEventRecord`).
struct GpuEvent {
    gpu: String,
    event: cudarc::driver::CudaEvent,
}

impl Event for GpuEvent {
    fn is_complete(&self) -> bool {
        self.event.is_complete()
    }
    fn synchronize(&self) -> Result<()> {
        self.event.synchronize().map_err(|e| BackendError::Kernel {
            backend: self.gpu.clone(),
            message: format!("waiting for an event: {e:?}"),
        })
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> &str {
        &self.gpu.name
    }
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        Arc::new(CudaBufferType { gpu: self.gpu.clone() })
    }
    fn supports_op(&self, ctx: &Context, node: TensorId) -> bool {
        plan_node(ctx, node, self.gpu.capability(), self.exec.paths()).is_ok()
    }
    fn supports_buffer(&self, buffer: &dyn Buffer) -> bool {
        !buffer.is_host() && buffer.device_ptr().is_some() && buffer.name() == self.gpu.name
    }
    fn supports_buffer_type(&self, buft: &dyn BufferType) -> bool {
        !buft.is_host() && buft.name() == self.gpu.name
    }
    fn offload_op(&self, ctx: &Context, node: TensorId) -> bool {
        op_batch_size(ctx.get(node)) >= 32
    }
    fn graph_compute(&mut self, ctx: &Context, graph: &Graph, bindings: &Bindings) -> Result<()> {
        self.gpu.bind().map_err(|e| backend_error(&self.gpu, e))?;
        self.exec.run(&self.gpu, ctx, graph, bindings)
    }
    fn synchronize(&mut self) -> Result<()> {
        self.gpu
            .stream
            .synchronize()
            .map_err(|e| backend_error(&self.gpu, CudaError::Driver(format!("{e:?}"))))
    }
    fn record_event(&mut self) -> Result<Box<dyn Event>> {
        let event = self
            .gpu
            .stream
            .record_event(None)
            .map_err(|e| backend_error(&self.gpu, CudaError::Driver(format!("{e:?}"))))?;
        Ok(Box::new(GpuEvent { gpu: self.gpu.name.clone(), event }))
    }
}
