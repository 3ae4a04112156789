//! Device memory: [`CudaBufferType`] and [`CudaBuffer`] (`ggml_backend_cuda_buffer_type`).
//!
//! A buffer is one `cuMemAlloc` block owned by the buffer (freed on drop). Reads, writes,
//! clears and copies are queued on the GPU's stream, the one the backend computes on, and
//! waited for (but small writes): a read sees every kernel queued before it, and a write (the
//! next step's inputs) lands only after the kernels queued before it that read the old bytes. Large reads (the
//! logits) go through page-locked host memory (`staging.rs`).

use crate::gpu::Gpu;
use cudarc::driver::{result, sys};
use std::ptr::NonNull;
use std::sync::Arc;
use tessera_backend::{
    check_range, copy_via_host, BackendError, Buffer, BufferType, BufferUsage, Result, UsageCell,
};

/// Alignment of tensors in device buffers (ggml-cuda uses 128).
pub const CUDA_ALIGNMENT: usize = 128;

/// The memory of one CUDA device.
#[derive(Debug, Clone)]
pub struct CudaBufferType {
    pub(crate) gpu: Arc<Gpu>,
}

impl BufferType for CudaBufferType {
    fn name(&self) -> &str {
        &self.gpu.name
    }
    fn alloc(&self, size: usize) -> Result<Arc<dyn Buffer>> {
        let fail = |reason: String| BackendError::Alloc {
            buffer_type: self.gpu.name.clone(),
            size,
            reason,
        };
        self.gpu.bind().map_err(|e| fail(e.to_string()))?;
        // SAFETY: the device's context is current on this thread (bound above); the block is
        // freed once, by the buffer's Drop.
        let ptr =
            unsafe { result::malloc_sync(size.max(1)) }.map_err(|e| fail(format!("{e:?}")))?;
        let buffer = CudaBuffer { gpu: self.gpu.clone(), ptr, size, usage: UsageCell::default() };
        buffer.clear(0)?;
        Ok(Arc::new(buffer))
    }
    fn alignment(&self) -> usize {
        CUDA_ALIGNMENT
    }
}

/// A block of device memory.
#[derive(Debug)]
pub struct CudaBuffer {
    gpu: Arc<Gpu>,
    ptr: sys::CUdeviceptr,
    size: usize,
    usage: UsageCell,
}

impl CudaBuffer {
    fn driver_error(&self, what: &str, e: impl std::fmt::Debug) -> BackendError {
        BackendError::Kernel { backend: self.gpu.name.clone(), message: format!("{what}: {e:?}") }
    }
}

impl CudaBuffer {
    /// Waits for everything queued on the GPU's stream (this buffer's copy among it).
    fn wait(&self) -> Result<()> {
        self.gpu.stream.synchronize().map_err(|e| self.driver_error("stream synchronize", e))
    }
}

impl Drop for CudaBuffer {
    fn drop(&mut self) {
        // No queued kernel may still read the block.
        if self.gpu.stream.synchronize().is_ok() && self.gpu.bind().is_ok() {
            // SAFETY: `ptr` came from malloc_sync in this context and is freed only here.
            let _ = unsafe { result::free_sync(self.ptr) };
        }
    }
}

impl Buffer for CudaBuffer {
    fn name(&self) -> &str {
        &self.gpu.name
    }
    fn size(&self) -> usize {
        self.size
    }
    fn is_host(&self) -> bool {
        false
    }
    fn device_ptr(&self) -> Option<NonNull<u8>> {
        NonNull::new(self.ptr as usize as *mut u8)
    }
    fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        check_range(&self.gpu.name, "write", offset, data.len(), self.size)?;
        if data.is_empty() {
            return Ok(());
        }
        self.gpu.bind().map_err(|e| self.driver_error("bind", e))?;
        let stream = self.gpu.stream.cu_stream();
        // SAFETY: the range was checked against the allocation; `data` is a live host slice
        // of pageable memory (no buffer of this crate's hands out page-locked memory), which
        // the driver has copied into its own staging when the call returns (CUDA's API
        // synchronization rules), so it may be reused at once.
        unsafe { result::memcpy_htod_async(self.ptr + offset as u64, data, stream) }
            .map_err(|e| self.driver_error("host to device copy", e))?;
        // A step's inputs (small) are not waited for: the copy is ordered on the stream before
        // the kernels queued after it, and a stream synchronisation per input was a fixed cost
        // of every decoded token. Large writes (weights) wait, so a failure shows at load.
        if data.len() < crate::staging::STAGED_MIN {
            return Ok(());
        }
        self.wait()
    }
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        check_range(&self.gpu.name, "read", offset, out.len(), self.size)?;
        if out.is_empty() {
            return Ok(());
        }
        self.gpu.bind().map_err(|e| self.driver_error("bind", e))?;
        let stream = self.gpu.stream.cu_stream();
        let src = self.ptr + offset as u64;
        let staged = self.gpu.staging.read(src, out).map_err(|e| BackendError::Kernel {
            backend: self.gpu.name.clone(),
            message: format!("read: {e}"),
        })?;
        if staged {
            return Ok(());
        }
        // SAFETY: as in `write`, with `out` writable until the stream drained.
        unsafe { result::memcpy_dtoh_async(out, src, stream) }
            .map_err(|e| self.driver_error("device to host copy", e))?;
        self.wait()
    }
    fn clear(&self, value: u8) -> Result<()> {
        self.gpu.bind().map_err(|e| self.driver_error("bind", e))?;
        let stream = self.gpu.stream.cu_stream();
        // SAFETY: the whole allocation, which this buffer owns.
        unsafe { result::memset_d8_async(self.ptr, value, self.size.max(1), stream) }
            .map_err(|e| self.driver_error("memset", e))?;
        self.wait()
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
    /// Into another buffer of the same GPU with one device-to-device copy; to and from host
    /// memory with one transfer.
    fn copy_to(
        &self,
        offset: usize,
        dst: &dyn Buffer,
        dst_offset: usize,
        len: usize,
    ) -> Result<bool> {
        let Some(d) = dst.as_any().and_then(|a| a.downcast_ref::<CudaBuffer>()) else {
            return copy_via_host(self, offset, dst, dst_offset, len);
        };
        if !Arc::ptr_eq(&self.gpu, &d.gpu) {
            return copy_via_host(self, offset, dst, dst_offset, len);
        }
        check_range(&self.gpu.name, "copy", offset, len, self.size)?;
        check_range(&d.gpu.name, "copy", dst_offset, len, d.size)?;
        if len == 0 {
            return Ok(true);
        }
        self.gpu.bind().map_err(|e| self.driver_error("bind", e))?;
        let stream = self.gpu.stream.cu_stream();
        // SAFETY: both ranges lie in live allocations of this context (checked above).
        unsafe {
            result::memcpy_dtod_async(
                d.ptr + dst_offset as u64,
                self.ptr + offset as u64,
                len,
                stream,
            )
        }
        .map_err(|e| self.driver_error("device to device copy", e))?;
        self.wait()?;
        Ok(true)
    }
}
