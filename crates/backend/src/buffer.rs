//! Buffer types and buffers (`ggml_backend_buffer_type_i`, `ggml_backend_buffer_i`).

use crate::{BackendError, Result};
use std::fmt::Debug;
use std::ptr::NonNull;
use std::sync::Arc;
use tessera_tensor::graph::TensorDesc;

/// What a buffer holds; schedulers use it to place ops next to their weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BufferUsage {
    /// Anything.
    #[default]
    Any,
    /// Model weights.
    Weights,
    /// Graph intermediates.
    Compute,
}

/// A kind of memory a backend can allocate (host RAM, device memory, ...).
pub trait BufferType: Send + Sync + Debug {
    /// Name, e.g. `"CPU"`.
    fn name(&self) -> &str;
    /// Allocates a buffer of `size` bytes (zeroed for host memory).
    fn alloc(&self, size: usize) -> Result<Arc<dyn Buffer>>;
    /// Alignment of every tensor offset in buffers of this type.
    fn alignment(&self) -> usize {
        64
    }
    /// Largest single buffer this type can allocate.
    fn max_size(&self) -> usize {
        usize::MAX
    }
    /// Bytes a tensor needs in this buffer type (may exceed `n_bytes` for padded layouts).
    fn alloc_size(&self, desc: &TensorDesc) -> usize {
        desc.n_bytes()
    }
    /// Whether the memory is host memory that the CPU can read and write directly.
    fn is_host(&self) -> bool {
        false
    }
    /// For a device's extra (weight) buffer types ([`Device::extra_buffer_types`]): whether
    /// this type would hold weight `desc` (ggml asks the buffer type's `supports_op` of the
    /// product that reads the weight). A loader offers every weight to the types in order and
    /// keeps it in the first that says yes; a device's own buffer type takes anything.
    ///
    /// [`Device::extra_buffer_types`]: crate::Device::extra_buffer_types
    fn supports_weight(&self, _desc: &TensorDesc) -> bool {
        true
    }
    /// Whether buffers of this type store `desc` in the file's layout (byte for byte), so
    /// that ops other than the products this type is for (an embedding's GET_ROWS) can read
    /// it. A type that rearranges bytes does it in [`Buffer::set_tensor`].
    fn keeps_layout(&self, _desc: &TensorDesc) -> bool {
        true
    }
}

/// A block of memory of some buffer type. Reads and writes go through `&self`: a buffer is shared
/// by every tensor placed in it, and which bytes belong to whom is the allocator's business.
pub trait Buffer: Send + Sync + Debug {
    /// Name of the buffer type.
    fn name(&self) -> &str;
    /// Size in bytes.
    fn size(&self) -> usize;
    /// Whether the memory is host memory (then [`Buffer::host_ptr`] is `Some`).
    fn is_host(&self) -> bool {
        self.host_ptr().is_some()
    }
    /// Whether writes are refused (memory-mapped weights).
    fn is_read_only(&self) -> bool {
        false
    }
    /// Start of the memory, for host buffers: kernels read and write through it, within the
    /// ranges the allocator assigned to the tensors they compute.
    fn host_ptr(&self) -> Option<NonNull<u8>> {
        None
    }
    /// Start of the memory in its device's own address space, for that device's backend (a
    /// CUDA device pointer; for the CPU-backed simulated device, RAM the host must not treat
    /// as its own). `None` for host buffers, whose memory is [`Buffer::host_ptr`].
    fn device_ptr(&self) -> Option<NonNull<u8>> {
        None
    }
    /// Copies `data` to `offset`.
    fn write(&self, offset: usize, data: &[u8]) -> Result<()>;
    /// Copies `out.len()` bytes from `offset` into `out`.
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<()>;
    /// Stores the whole of tensor `desc` at `offset` from `data`, its bytes in the file's
    /// layout (`ggml_backend_tensor_set`): a buffer type that keeps tensors in a layout of its
    /// own (the CPU's interleaved weights) rearranges them here. The default is a plain
    /// [`Buffer::write`].
    fn set_tensor(&self, desc: &TensorDesc, offset: usize, data: &[u8]) -> Result<()> {
        let _ = desc;
        self.write(offset, data)
    }
    /// Reads the whole of tensor `desc` at `offset` into `out`, in the file's layout
    /// (`ggml_backend_tensor_get`): the inverse of [`Buffer::set_tensor`]. The default is a
    /// plain [`Buffer::read`].
    fn get_tensor(&self, desc: &TensorDesc, offset: usize, out: &mut [u8]) -> Result<()> {
        let _ = desc;
        self.read(offset, out)
    }
    /// Sets every byte to `value`.
    fn clear(&self, value: u8) -> Result<()>;
    /// What the buffer holds.
    fn usage(&self) -> BufferUsage {
        BufferUsage::Any
    }
    /// Says what the buffer holds (`ggml_backend_buffer_set_usage`): a loader marks the device
    /// buffers it fills with weights, so schedulers run weight ops beside them. Buffers whose
    /// usage is fixed ignore it.
    fn set_usage(&self, _usage: BufferUsage) {}
    /// This buffer as `Any`, for buffer types that copy directly between their own buffers
    /// (device to device); `None` by default.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }
    /// Copies `len` bytes at `offset` into `dst` at `dst_offset` without staging them through
    /// a temporary host copy, where this buffer knows how (`ggml_backend_buffer_cpy_tensor`):
    /// `Ok(true)` when copied, `Ok(false)` when the caller must stage (`read`, then `write`).
    /// The default handles either side being host memory ([`copy_via_host`]); device buffers
    /// add copies between their own kind.
    fn copy_to(
        &self,
        offset: usize,
        dst: &dyn Buffer,
        dst_offset: usize,
        len: usize,
    ) -> Result<bool> {
        copy_via_host(self, offset, dst, dst_offset, len)
    }
}

/// The usage of a buffer a loader marks ([`Buffer::usage`] / [`Buffer::set_usage`] for device
/// buffers): weights or anything.
#[derive(Debug, Default)]
pub struct UsageCell(std::sync::atomic::AtomicBool);

impl UsageCell {
    /// What the buffer holds: [`BufferUsage::Weights`] once marked so, else `Any`.
    pub fn get(&self) -> BufferUsage {
        if self.0.load(std::sync::atomic::Ordering::Relaxed) {
            BufferUsage::Weights
        } else {
            BufferUsage::Any
        }
    }
    /// Marks the buffer (only `Weights` is remembered, as the schedulers ask only that).
    pub fn set(&self, usage: BufferUsage) {
        self.0.store(usage == BufferUsage::Weights, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The copy of [`Buffer::copy_to`] where `src` or `dst` is host memory: one `write` from `src`'s
/// bytes, or one `read` into `dst`'s; `Ok(false)` where neither side is host memory.
pub fn copy_via_host(
    src: &(impl Buffer + ?Sized),
    offset: usize,
    dst: &dyn Buffer,
    dst_offset: usize,
    len: usize,
) -> Result<bool> {
    check_range(src.name(), "copy", offset, len, src.size())?;
    check_range(dst.name(), "copy", dst_offset, len, dst.size())?;
    if let Some(p) = src.host_ptr() {
        // SAFETY: the range lies in `src`'s memory (checked above), which lives as long as
        // `src`; no live tensor is written there while the scheduler copies it (the
        // allocator's invariant), so reading it as a slice is sound.
        let bytes = unsafe { std::slice::from_raw_parts(p.as_ptr().add(offset), len) };
        dst.write(dst_offset, bytes)?;
        return Ok(true);
    }
    if let (Some(q), false) = (dst.host_ptr(), dst.is_read_only()) {
        // SAFETY: the range lies in `dst`'s memory (checked above); nothing else reads or
        // writes those bytes during the copy (the allocator's invariant: they belong to the
        // one tensor being copied into).
        let out = unsafe { std::slice::from_raw_parts_mut(q.as_ptr().add(dst_offset), len) };
        src.read(offset, out)?;
        return Ok(true);
    }
    Ok(false)
}

/// Checks that `[offset, offset + len)` lies in a buffer of `size` bytes.
pub fn check_range(
    buffer: &str,
    what: &'static str,
    offset: usize,
    len: usize,
    size: usize,
) -> Result<()> {
    if offset.checked_add(len).is_none_or(|end| end > size) {
        return Err(BackendError::OutOfBounds {
            buffer: buffer.to_string(),
            what,
            offset,
            len,
            size,
        });
    }
    Ok(())
}
