//! [`CudaDevice`] and [`CudaBackend`]: the `tessera_backend` traits on an NVIDIA GPU.

use crate::buffer::CudaBufferType;
use crate::gpu::Gpu;
use crate::ops::{supports, Launcher};
use crate::CudaError;
use cudarc::driver::result;
use std::sync::Arc;
use tessera_backend::{
    op_batch_size, Backend, BackendError, Bindings, Buffer, BufferType, Device, DeviceKind, Result,
};
use tessera_tensor::graph::{Context, Graph, TensorId};

/// A CUDA GPU as a [`Device`], named `CUDA{ordinal}`.
#[derive(Debug, Clone)]
pub struct CudaDevice {
    gpu: Arc<Gpu>,
}

impl CudaDevice {
    /// Opens GPU `ordinal`: an error, never a panic, where there is no driver, library or
    /// device.
    pub fn new(ordinal: usize) -> std::result::Result<CudaDevice, CudaError> {
        Ok(CudaDevice { gpu: Arc::new(Gpu::open(ordinal)?) })
    }

    /// Every GPU the driver reports (none, without a driver).
    pub fn all() -> Vec<CudaDevice> {
        let n = crate::device::device_count().unwrap_or(0);
        (0..n).filter_map(|i| CudaDevice::new(i).ok()).collect()
    }

    /// The device's backend, typed.
    pub fn backend(&self) -> CudaBackend {
        CudaBackend { gpu: self.gpu.clone() }
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

/// A stream on one GPU that computes graphs.
#[derive(Debug)]
pub struct CudaBackend {
    gpu: Arc<Gpu>,
}

impl Backend for CudaBackend {
    fn name(&self) -> &str {
        &self.gpu.name
    }
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        Arc::new(CudaBufferType { gpu: self.gpu.clone() })
    }
    fn supports_op(&self, ctx: &Context, node: TensorId) -> bool {
        supports(ctx, node)
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
        for &node in graph.nodes() {
            if !supports(ctx, node) {
                let d = ctx.get(node);
                return Err(BackendError::Unsupported {
                    backend: self.gpu.name.clone(),
                    op: d.op.name(),
                    name: d.name.clone(),
                    detail: format!("{} {}", d.dtype, d.shape_str()),
                });
            }
        }
        self.gpu.bind().map_err(|e| backend_error(&self.gpu, e))?;
        let launcher = Launcher { gpu: &self.gpu, ctx, bindings };
        for &node in graph.nodes() {
            if !ctx.get(node).op.is_view() {
                launcher.node(node).map_err(|e| backend_error(&self.gpu, e))?;
            }
        }
        self.synchronize()
    }
    fn synchronize(&mut self) -> Result<()> {
        self.gpu
            .stream
            .synchronize()
            .map_err(|e| backend_error(&self.gpu, CudaError::Driver(format!("{e:?}"))))
    }
}
