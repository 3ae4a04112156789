//! The CPU's repacked weights as an extra buffer type of the CPU device (ggml-cpu's
//! `CPU_REPACK` buffer type, which llama.cpp finds through the device registry and offers its
//! weights before the plain host memory).
//!
//! The buffer type owns the two facts that make a weight "repacked":
//! - **the rule** ([`RepackBufferType::supports_weight`]): which weights llama.cpp's CPU
//!   backend, built for the device's SIMD level, moves into its repack buffer (Q4_0, Q4_K,
//!   IQ4_NL and MXFP4 from AVX2, Q2_K from AVX-512; matrices or expert stacks whose rows come
//!   in eights);
//! - **the layout** ([`RepackBuffer::set_tensor`]): eight rows interleaved (ggml's
//!   `block_q4_0x8` family), so a group of eight rows is one memory stream; reading a tensor
//!   back ([`RepackBuffer::get_tensor`]) gives the file's layout again.
//!
//! The CPU backend recognises its buffers ([`is_repacked`]) and gives matrix products with
//! their weights the repacked kernels' arithmetic. To every other backend the memory is not
//! host memory (`is_host()` is false, as ggml's repack buffer type is not host): a scheduler
//! keeps the products with these weights on the CPU and never copies their bytes away.

use crate::SimdLevel;
use std::ptr::NonNull;
use std::sync::Arc;
use tessera_backend::{BackendError, Buffer, BufferType, BufferUsage, HostBuffer, Result};
use tessera_tensor::graph::TensorDesc;
use tessera_tensor::DType;

/// The name of the buffer type and its buffers, as llama.cpp's.
pub const REPACK_NAME: &str = "CPU_REPACK";

/// The bytes a repacked weight holds in the CPU's repacked buffer ([`RepackBufferType`]),
/// from its bytes in the file's layout (`rows` rows of `k` values of `dtype`): `Some` with the
/// rows rearranged where the CPU backend keeps that type's repacked weights in a layout of
/// its own (Q4_0, IQ4_NL, MXFP4, Q4_K and Q2_K: eight rows interleaved, as llama.cpp's
/// `block_q4_0x8` family, so a group of eight rows is one memory stream), `None` for other
/// types or where `bytes` is not `rows` whole rows of a multiple of eight. Only matrix
/// products read a rearranged weight (an embedding's GET_ROWS reads the file's layout).
pub fn repack_layout(dtype: DType, bytes: &[u8], rows: usize, k: usize) -> Option<Vec<u8>> {
    relayout(dtype, bytes, rows, k, true)
}

/// The file's layout back from [`repack_layout`]'s (same conditions).
pub fn plain_layout(dtype: DType, bytes: &[u8], rows: usize, k: usize) -> Option<Vec<u8>> {
    relayout(dtype, bytes, rows, k, false)
}

/// [`repack_layout`] (`interleave`) or [`plain_layout`].
fn relayout(
    dtype: DType,
    bytes: &[u8],
    rows: usize,
    k: usize,
    interleave: bool,
) -> Option<Vec<u8>> {
    #[cfg(target_arch = "x86_64")]
    {
        // Both give `None` for a type not stored interleaved (and for shapes not in eights).
        use crate::matmul::interleaved;
        if interleave {
            interleaved::interleave(dtype, bytes, rows, k)
        } else {
            interleaved::deinterleave(dtype, bytes, rows, k)
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (dtype, bytes, rows, k, interleave);
        None
    }
}

/// Whether [`repack_layout`] rearranges repacked weights of `dtype`.
pub fn repack_rearranges(dtype: DType) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        crate::matmul::interleaved::interleaves(dtype)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = dtype;
        false
    }
}

/// Whether llama.cpp's CPU backend, built for `level`, would repack a 2-D weight of type
/// `dtype` with `rows` rows into its CPU_REPACK buffer (its default on x86; `--no-repack`
/// turns it off): the rule of [`RepackBufferType`], whose weights' products follow the
/// repacked kernels' arithmetic. False off x86.
pub fn repack_applies(dtype: DType, rows: usize, level: SimdLevel) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        crate::matmul::interleaved::repacks(dtype, rows, level)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (dtype, rows, level);
        false
    }
}

/// The CPU's repacked weight memory for one SIMD level (see the module docs).
#[derive(Debug, Clone, Copy)]
pub struct RepackBufferType {
    level: SimdLevel,
}

impl RepackBufferType {
    /// The buffer type of a CPU device computing at `level`.
    pub fn new(level: SimdLevel) -> Self {
        RepackBufferType { level }
    }
}

/// Rows of `desc`, if it is a matrix or a stack of them (MUL_MAT's or MUL_MAT_ID's weight).
fn matrix_rows(desc: &TensorDesc) -> Option<usize> {
    (desc.ne[3] == 1 && desc.ne[1] > 1).then_some(desc.ne[1])
}

impl BufferType for RepackBufferType {
    fn name(&self) -> &str {
        REPACK_NAME
    }
    fn alloc(&self, size: usize) -> Result<Arc<dyn Buffer>> {
        Ok(Arc::new(RepackBuffer { mem: HostBuffer::new(size, BufferUsage::Weights)? }))
    }
    fn alignment(&self) -> usize {
        tessera_backend::HOST_ALIGNMENT
    }
    fn supports_weight(&self, desc: &TensorDesc) -> bool {
        matrix_rows(desc).is_some_and(|rows| repack_applies(desc.dtype, rows, self.level))
    }
    fn keeps_layout(&self, desc: &TensorDesc) -> bool {
        !repack_rearranges(desc.dtype)
    }
}

/// A buffer of [`RepackBufferType`]: host memory only the CPU backend reads.
#[derive(Debug)]
pub struct RepackBuffer {
    mem: HostBuffer,
}

/// Whether `buffer` is one of the CPU's repacked-weight buffers.
pub fn is_repacked(buffer: &dyn Buffer) -> bool {
    buffer.as_any().is_some_and(|a| a.is::<RepackBuffer>())
}

impl RepackBuffer {
    fn refuse(&self, what: &str) -> BackendError {
        BackendError::Setting {
            backend: REPACK_NAME.into(),
            what: format!(
                "{what}: weights in the CPU's repacked layout stay with the CPU backend \
                 (a scheduler must not copy them to another device)"
            ),
        }
    }
}

impl Buffer for RepackBuffer {
    fn name(&self) -> &str {
        REPACK_NAME
    }
    fn size(&self) -> usize {
        self.mem.size()
    }
    /// Not host memory to other backends (ggml's repack buffer type is not host either): only
    /// the CPU backend reads it, through [`Buffer::host_ptr`].
    fn is_host(&self) -> bool {
        false
    }
    fn host_ptr(&self) -> Option<NonNull<u8>> {
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
        BufferUsage::Weights
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
    /// Rearranges a weight of an interleaved type from the file's layout; other types are
    /// written as they are.
    fn set_tensor(&self, desc: &TensorDesc, offset: usize, data: &[u8]) -> Result<()> {
        if !repack_rearranges(desc.dtype) {
            return self.write(offset, data);
        }
        let rows = desc.ne[1] * desc.ne[2] * desc.ne[3];
        match repack_layout(desc.dtype, data, rows, desc.ne[0]) {
            Some(v) => self.write(offset, &v),
            None => Err(self.refuse(&format!(
                "{} ({}, {rows} rows of {}) is not whole groups of eight rows",
                desc.name, desc.dtype, desc.ne[0]
            ))),
        }
    }
    /// The file's layout back from the interleaved one.
    fn get_tensor(&self, desc: &TensorDesc, offset: usize, out: &mut [u8]) -> Result<()> {
        self.read(offset, out)?;
        if repack_rearranges(desc.dtype) {
            let rows = desc.ne[1] * desc.ne[2] * desc.ne[3];
            let plain = plain_layout(desc.dtype, out, rows, desc.ne[0])
                .ok_or_else(|| self.refuse(&format!("{} is not whole groups", desc.name)))?;
            out.copy_from_slice(&plain);
        }
        Ok(())
    }
    fn copy_to(&self, _: usize, dst: &dyn Buffer, _: usize, _: usize) -> Result<bool> {
        Err(self.refuse(&format!("a copy to {}", dst.name())))
    }
}
