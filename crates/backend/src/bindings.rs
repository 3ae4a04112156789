//! Where each tensor's bytes are: (buffer, offset) per tensor, set by an allocator or by hand.
//! Views have no storage of their own: they resolve through `view_src` plus `view_offs`.

use crate::buffer::{check_range, Buffer};
use crate::{BackendError, Result};
use std::sync::Arc;
use tessera_tensor::graph::{Context, TensorId};
use tessera_tensor::DType;

/// A tensor's storage: a buffer and the byte offset of the tensor's first element in it.
#[derive(Debug, Clone)]
pub struct Storage {
    /// The buffer.
    pub buffer: Arc<dyn Buffer>,
    /// Byte offset in the buffer.
    pub offset: usize,
}

/// Storage of the tensors of one [`Context`], indexed by tensor id.
#[derive(Debug, Clone, Default)]
pub struct Bindings {
    slots: Vec<Option<Storage>>,
    /// Changes with every binding made or cleared (fresh in a clone).
    version: tessera_tensor::Version,
}

fn unbound(ctx: &Context, id: TensorId) -> BackendError {
    BackendError::Unbound { name: ctx.get(id).name.clone(), index: id.index() }
}

impl Bindings {
    /// No tensor bound.
    pub fn new() -> Self {
        Self::default()
    }

    /// Places tensor `id` (not a view) at `offset` in `buffer`, checking that all its bytes fit.
    pub fn bind(
        &mut self,
        ctx: &Context,
        id: TensorId,
        buffer: Arc<dyn Buffer>,
        offset: usize,
    ) -> Result<()> {
        let desc = ctx.get(id);
        if desc.view_src.is_some() {
            return Err(BackendError::OutOfBounds {
                buffer: buffer.name().to_string(),
                what: "bind (views take their source's storage)",
                offset,
                len: desc.n_bytes(),
                size: buffer.size(),
            });
        }
        check_range(buffer.name(), "bind", offset, desc.n_bytes(), buffer.size())?;
        if self.slots.len() <= id.index() {
            self.slots.resize(id.index() + 1, None);
        }
        self.version.bump();
        self.slots[id.index()] = Some(Storage { buffer, offset });
        Ok(())
    }

    /// The bindings' version: equal versions are the same bindings (see
    /// [`tessera_tensor::Version`]); writing tensors' data does not change it.
    pub fn version(&self) -> u64 {
        self.version.get()
    }

    /// Removes every binding.
    pub fn clear(&mut self) {
        self.version.bump();
        self.slots.clear();
    }

    /// The storage of `id`, resolving views to their source's buffer.
    pub fn storage(&self, ctx: &Context, id: TensorId) -> Option<Storage> {
        let desc = ctx.get(id);
        match desc.view_src {
            Some(src) => {
                let s = self.slots.get(src.index())?.as_ref()?;
                Some(Storage { buffer: s.buffer.clone(), offset: s.offset + desc.view_offs })
            }
            None => self.slots.get(id.index())?.clone(),
        }
    }

    /// Whether `id` (or, for a view, its source) has storage.
    pub fn is_bound(&self, ctx: &Context, id: TensorId) -> bool {
        self.storage(ctx, id).is_some()
    }

    fn contiguous_storage(&self, ctx: &Context, id: TensorId, len: usize) -> Result<Storage> {
        let desc = ctx.get(id);
        let s = self.storage(ctx, id).ok_or_else(|| unbound(ctx, id))?;
        if !desc.is_contiguous() || len != desc.n_bytes() {
            return Err(BackendError::DataSize {
                name: desc.name.clone(),
                expected: desc.n_bytes(),
                actual: len,
            });
        }
        Ok(s)
    }

    /// Writes a contiguous tensor's bytes (`ggml_backend_tensor_set`).
    pub fn set(&self, ctx: &Context, id: TensorId, data: &[u8]) -> Result<()> {
        let s = self.contiguous_storage(ctx, id, data.len())?;
        s.buffer.set_tensor(ctx.get(id), s.offset, data)
    }

    /// Reads a contiguous tensor's bytes (`ggml_backend_tensor_get`).
    pub fn get(&self, ctx: &Context, id: TensorId) -> Result<Vec<u8>> {
        let mut out = vec![0u8; ctx.get(id).n_bytes()];
        self.read(ctx, id, &mut out)?;
        Ok(out)
    }

    /// Reads a contiguous tensor's bytes into `out`, which must be its size: a caller that
    /// reads every step keeps one buffer (no allocation, no fresh pages to fault in per read).
    pub fn read(&self, ctx: &Context, id: TensorId, out: &mut [u8]) -> Result<()> {
        let s = self.contiguous_storage(ctx, id, out.len())?;
        s.buffer.get_tensor(ctx.get(id), s.offset, out)
    }

    /// Appends an F32 tensor's values to `out`, read straight into its memory (keep `out`
    /// between calls, so a step's logits cost no allocation and no second copy).
    pub fn append_f32(&self, ctx: &Context, id: TensorId, out: &mut Vec<f32>) -> Result<()> {
        self.expect_type(ctx, id, DType::F32)?;
        let (start, n) = (out.len(), ctx.get(id).n_elements());
        out.resize(start + n, 0.0);
        let fresh = &mut out[start..];
        // SAFETY: `fresh` is n initialized f32 values, viewed as their 4n bytes (u8 has no
        // alignment and every byte pattern is some f32, so any bytes written keep it valid);
        // the view ends before `fresh` is used again.
        let bytes =
            unsafe { std::slice::from_raw_parts_mut(fresh.as_mut_ptr().cast::<u8>(), n * 4) };
        let read = self.read(ctx, id, bytes);
        if read.is_err() {
            out.truncate(start);
            return read;
        }
        // The buffers hold little-endian values (ggml's layout).
        if cfg!(target_endian = "big") {
            for v in &mut out[start..] {
                *v = f32::from_bits(u32::from_le(v.to_bits()));
            }
        }
        Ok(())
    }

    /// Writes an F32 tensor's values.
    pub fn set_f32(&self, ctx: &Context, id: TensorId, values: &[f32]) -> Result<()> {
        self.expect_type(ctx, id, DType::F32)?;
        self.set(ctx, id, &values.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>())
    }

    /// Writes an I32 tensor's values.
    pub fn set_i32(&self, ctx: &Context, id: TensorId, values: &[i32]) -> Result<()> {
        self.expect_type(ctx, id, DType::I32)?;
        self.set(ctx, id, &values.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>())
    }

    /// Reads an F32 tensor's values.
    pub fn get_f32(&self, ctx: &Context, id: TensorId) -> Result<Vec<f32>> {
        let mut out = Vec::new();
        self.append_f32(ctx, id, &mut out)?;
        Ok(out)
    }

    fn expect_type(&self, ctx: &Context, id: TensorId, dtype: DType) -> Result<()> {
        let d = ctx.get(id).dtype;
        if d != dtype {
            return Err(tessera_tensor::TensorError::OpType {
                op: "tensor access",
                dtype: d,
                reason: format!("expected {dtype}"),
            }
            .into());
        }
        Ok(())
    }
}
