//! Host memory: the CPU buffer type, and read-only buffers over memory someone else owns (a GGUF
//! file's mapping), wrapped without copying.

use crate::buffer::{check_range, Buffer, BufferType, BufferUsage};
use crate::{BackendError, Result};
use std::cell::UnsafeCell;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

/// Alignment of host buffers and of tensors in them (a cache line; enough for AVX-512).
pub const HOST_ALIGNMENT: usize = 64;

#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Line([u8; HOST_ALIGNMENT]);

/// The host (CPU) buffer type: zeroed, 64-byte aligned RAM.
#[derive(Debug, Clone, Copy, Default)]
pub struct HostBufferType;

impl BufferType for HostBufferType {
    fn name(&self) -> &str {
        "CPU"
    }
    fn alloc(&self, size: usize) -> Result<Arc<dyn Buffer>> {
        Ok(Arc::new(HostBuffer::new(size, BufferUsage::Any)?))
    }
    fn alignment(&self) -> usize {
        HOST_ALIGNMENT
    }
    fn is_host(&self) -> bool {
        true
    }
}

/// A block of host RAM.
pub struct HostBuffer {
    // Owned storage; only ever accessed through `ptr` after construction.
    _mem: UnsafeCell<Vec<Line>>,
    ptr: NonNull<u8>,
    size: usize,
    usage: AtomicU8,
}

// SAFETY: the buffer is plain memory. Concurrent access to disjoint ranges is the contract of the
// `Buffer` trait (the allocator guarantees live tensors do not overlap); `write`/`read`/`clear`
// copy through the raw pointer without creating references to the whole block.
unsafe impl Send for HostBuffer {}
// SAFETY: as above.
unsafe impl Sync for HostBuffer {}

impl std::fmt::Debug for HostBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostBuffer")
            .field("size", &self.size)
            .field("usage", &self.usage())
            .finish()
    }
}

impl HostBuffer {
    /// A zeroed buffer of `size` bytes.
    pub fn new(size: usize, usage: BufferUsage) -> Result<Self> {
        let lines = size.div_ceil(HOST_ALIGNMENT).max(1);
        let mut v: Vec<Line> = Vec::new();
        v.try_reserve_exact(lines).map_err(|e| BackendError::Alloc {
            buffer_type: "CPU".into(),
            size,
            reason: e.to_string(),
        })?;
        v.resize(lines, Line([0; HOST_ALIGNMENT]));
        let mem = UnsafeCell::new(v);
        // SAFETY: we hold the only reference to the vector; the pointer stays valid while `_mem`
        // lives (the vector is never resized again).
        let ptr = unsafe { NonNull::new_unchecked((*mem.get()).as_mut_ptr().cast::<u8>()) };
        Ok(HostBuffer { _mem: mem, ptr, size, usage: AtomicU8::new(usage_code(usage)) })
    }
}

impl Buffer for HostBuffer {
    fn name(&self) -> &str {
        "CPU"
    }
    fn size(&self) -> usize {
        self.size
    }
    fn host_ptr(&self) -> Option<NonNull<u8>> {
        Some(self.ptr)
    }
    fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        check_range("CPU", "write", offset, data.len(), self.size)?;
        // SAFETY: the range is inside the allocation (checked above); `data` cannot overlap our
        // memory unless the caller aliases it deliberately, and `copy` tolerates overlap.
        unsafe { std::ptr::copy(data.as_ptr(), self.ptr.as_ptr().add(offset), data.len()) };
        Ok(())
    }
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        check_range("CPU", "read", offset, out.len(), self.size)?;
        // SAFETY: the range is inside the allocation (checked above).
        unsafe { std::ptr::copy(self.ptr.as_ptr().add(offset), out.as_mut_ptr(), out.len()) };
        Ok(())
    }
    fn clear(&self, value: u8) -> Result<()> {
        // SAFETY: `size` bytes from `ptr` are ours.
        unsafe { std::ptr::write_bytes(self.ptr.as_ptr(), value, self.size) };
        Ok(())
    }
    fn usage(&self) -> BufferUsage {
        match self.usage.load(Ordering::Relaxed) {
            1 => BufferUsage::Weights,
            2 => BufferUsage::Compute,
            _ => BufferUsage::Any,
        }
    }
    fn set_usage(&self, usage: BufferUsage) {
        self.usage.store(usage_code(usage), Ordering::Relaxed);
    }
}

fn usage_code(usage: BufferUsage) -> u8 {
    match usage {
        BufferUsage::Any => 0,
        BufferUsage::Weights => 1,
        BufferUsage::Compute => 2,
    }
}

/// A read-only buffer over bytes owned elsewhere (e.g. a GGUF file's memory mapping): weights are
/// used in place, never copied (`ggml_backend_cpu_buffer_from_ptr`, "CPU_Mapped").
pub struct MappedBuffer<D: AsRef<[u8]> + Send + Sync + 'static> {
    data: Arc<D>,
}

impl<D: AsRef<[u8]> + Send + Sync + 'static> MappedBuffer<D> {
    /// Wraps `data`.
    pub fn new(data: Arc<D>) -> Self {
        MappedBuffer { data }
    }
}

impl<D: AsRef<[u8]> + Send + Sync + 'static> std::fmt::Debug for MappedBuffer<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedBuffer").field("size", &self.data.as_ref().as_ref().len()).finish()
    }
}

impl<D: AsRef<[u8]> + Send + Sync + 'static> Buffer for MappedBuffer<D> {
    fn name(&self) -> &str {
        "CPU_Mapped"
    }
    fn size(&self) -> usize {
        self.data.as_ref().as_ref().len()
    }
    fn is_read_only(&self) -> bool {
        true
    }
    fn host_ptr(&self) -> Option<NonNull<u8>> {
        NonNull::new(self.data.as_ref().as_ref().as_ptr().cast_mut())
    }
    fn write(&self, _: usize, _: &[u8]) -> Result<()> {
        Err(BackendError::ReadOnly { buffer: "CPU_Mapped".into() })
    }
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        let bytes = self.data.as_ref().as_ref();
        check_range("CPU_Mapped", "read", offset, out.len(), bytes.len())?;
        out.copy_from_slice(&bytes[offset..offset + out.len()]);
        Ok(())
    }
    fn clear(&self, _: u8) -> Result<()> {
        Err(BackendError::ReadOnly { buffer: "CPU_Mapped".into() })
    }
    fn usage(&self) -> BufferUsage {
        BufferUsage::Weights
    }
}
