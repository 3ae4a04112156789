//! The bump allocator for tensors that live as long as their buffer: weights, KV cache
//! (ggml's `ggml_tallocr` and `ggml_backend_alloc_ctx_tensors_from_buft`).

use crate::error::{AllocError, Result};
use std::sync::Arc;
use tessera_backend::{Bindings, Buffer, BufferType};
use tessera_tensor::graph::{Context, TensorId};

/// Places tensors one after another at aligned offsets in one buffer; nothing is ever freed.
#[derive(Debug, Clone)]
pub struct LinearAllocator {
    buffer: Arc<dyn Buffer>,
    buft: Option<Arc<dyn BufferType>>,
    alignment: usize,
    offset: usize,
}

fn pad(size: usize, alignment: usize) -> usize {
    size.div_ceil(alignment) * alignment
}

impl LinearAllocator {
    /// Places tensors in `buffer`, at offsets that are multiples of `alignment`; each takes its
    /// `n_bytes`.
    pub fn new(buffer: Arc<dyn Buffer>, alignment: usize) -> Self {
        LinearAllocator { buffer, buft: None, alignment: alignment.max(1), offset: 0 }
    }

    /// Allocates a buffer of `size` bytes of `buft` and places tensors in it with the type's
    /// alignment and per-tensor `alloc_size`.
    pub fn with_buffer_type(buft: Arc<dyn BufferType>, size: usize) -> Result<Self> {
        let buffer = buft.alloc(size)?;
        Ok(LinearAllocator {
            buffer,
            alignment: buft.alignment().max(1),
            buft: Some(buft),
            offset: 0,
        })
    }

    /// Bytes `id` takes here, padded to the alignment.
    pub fn size_of(&self, ctx: &Context, id: TensorId) -> usize {
        let d = ctx.get(id);
        let size = self.buft.as_ref().map_or_else(|| d.n_bytes(), |b| b.alloc_size(d));
        pad(size, self.alignment)
    }

    /// Binds `id` at the next free offset and returns that offset (`ggml_tallocr_alloc`).
    pub fn alloc(&mut self, ctx: &Context, id: TensorId, bindings: &mut Bindings) -> Result<usize> {
        let d = ctx.get(id);
        if d.is_view() {
            return Err(AllocError::View { name: d.name.clone(), index: id.index() });
        }
        let size = self.size_of(ctx, id);
        if size > self.remaining() {
            return Err(AllocError::OutOfSpace {
                buffer: self.buffer.name().to_string(),
                name: d.name.clone(),
                needed: size,
                available: self.remaining(),
            });
        }
        let offset = self.offset;
        bindings.bind(ctx, id, self.buffer.clone(), offset)?;
        self.offset += size;
        Ok(offset)
    }

    /// The next free offset (bytes used so far).
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Bytes left in the buffer.
    pub fn remaining(&self) -> usize {
        self.buffer.size().saturating_sub(self.offset)
    }

    /// The buffer tensors are placed in.
    pub fn buffer(&self) -> &Arc<dyn Buffer> {
        &self.buffer
    }
}

/// Bytes [`alloc_tensors`] would allocate for `ids` in `buft`, as one buffer (ignoring the
/// buffer type's `max_size`).
pub fn tensors_size(
    buft: &dyn BufferType,
    ctx: &Context,
    ids: impl IntoIterator<Item = TensorId>,
) -> usize {
    let align = buft.alignment().max(1);
    ids.into_iter()
        .filter(|&id| !ctx.get(id).is_view())
        .map(|id| pad(buft.alloc_size(ctx.get(id)), align))
        .sum()
}

/// Allocates buffers of `buft` for every tensor of `ids` that is not a view and not yet bound,
/// and binds them one after another (`ggml_backend_alloc_ctx_tensors_from_buft`). Tensors are
/// split over several buffers where they would exceed the type's `max_size`. Returns the
/// buffers (none if nothing needed storage).
pub fn alloc_tensors(
    buft: &Arc<dyn BufferType>,
    ctx: &Context,
    ids: impl IntoIterator<Item = TensorId>,
    bindings: &mut Bindings,
) -> Result<Vec<Arc<dyn Buffer>>> {
    let align = buft.alignment().max(1);
    let max = buft.max_size();
    let todo: Vec<(TensorId, usize)> = ids
        .into_iter()
        .filter(|&id| !ctx.get(id).is_view() && !bindings.is_bound(ctx, id))
        .map(|id| (id, pad(buft.alloc_size(ctx.get(id)), align)))
        .collect();
    // Group into runs that fit max_size (a tensor larger than max_size gets a buffer alone).
    let mut groups: Vec<(usize, usize, usize)> = Vec::new(); // (start, end, bytes)
    let mut start = 0;
    let mut bytes = 0usize;
    for (i, &(_, size)) in todo.iter().enumerate() {
        if i > start && bytes.saturating_add(size) > max {
            groups.push((start, i, bytes));
            start = i;
            bytes = 0;
        }
        bytes += size;
    }
    if start < todo.len() {
        groups.push((start, todo.len(), bytes));
    }
    let mut buffers = Vec::with_capacity(groups.len());
    for (start, end, bytes) in groups {
        let mut la = LinearAllocator::with_buffer_type(buft.clone(), bytes)?;
        for &(id, _) in &todo[start..end] {
            la.alloc(ctx, id, bindings)?;
        }
        buffers.push(la.buffer.clone());
    }
    Ok(buffers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_backend::HostBufferType;
    use tessera_tensor::DType;

    #[test]
    fn places_tensors_one_after_another() {
        let mut ctx = Context::new();
        let a = ctx.new_tensor(DType::F32, &[3]).unwrap(); // 12 bytes
        let b = ctx.new_tensor(DType::F32, &[16]).unwrap(); // 64 bytes
        let v = ctx.view(b, &[4], &[], 0).unwrap();
        let buft: Arc<dyn BufferType> = Arc::new(HostBufferType);
        let mut la = LinearAllocator::with_buffer_type(buft, 192).unwrap();
        let mut bind = Bindings::new();
        assert_eq!(la.alloc(&ctx, a, &mut bind).unwrap(), 0);
        assert_eq!(la.alloc(&ctx, b, &mut bind).unwrap(), 64);
        assert_eq!(la.offset(), 128);
        assert!(matches!(la.alloc(&ctx, v, &mut bind), Err(AllocError::View { .. })));
        let c = ctx.new_tensor(DType::F32, &[32]).unwrap();
        assert!(matches!(
            la.alloc(&ctx, c, &mut bind),
            Err(AllocError::OutOfSpace { needed: 128, available: 64, .. })
        ));
        assert_eq!(bind.storage(&ctx, v).unwrap().offset, 64);
    }

    #[derive(Debug)]
    struct Small;
    impl BufferType for Small {
        fn name(&self) -> &str {
            "small"
        }
        fn alloc(&self, size: usize) -> tessera_backend::Result<Arc<dyn Buffer>> {
            HostBufferType.alloc(size)
        }
        fn max_size(&self) -> usize {
            256
        }
    }

    #[test]
    fn alloc_tensors_splits_by_max_size_and_skips_bound() {
        let mut ctx = Context::new();
        let ids: Vec<_> = (0..5).map(|_| ctx.new_tensor(DType::F32, &[32]).unwrap()).collect();
        let big = ctx.new_tensor(DType::F32, &[128]).unwrap();
        let buft: Arc<dyn BufferType> = Arc::new(Small);
        let mut bind = Bindings::new();
        let pre = HostBufferType.alloc(128).unwrap();
        bind.bind(&ctx, ids[0], pre.clone(), 0).unwrap();
        let all = ids.iter().copied().chain([big]);
        assert_eq!(tensors_size(buft.as_ref(), &ctx, all.clone()), 5 * 128 + 512);
        let bufs = alloc_tensors(&buft, &ctx, all, &mut bind).unwrap();
        // 4 tensors of 128 bytes in 256-byte buffers, then the 512-byte one alone.
        let sizes: Vec<_> = bufs.iter().map(|b| b.size()).collect();
        assert_eq!(sizes, vec![256, 256, 512]);
        assert!(Arc::ptr_eq(&bind.storage(&ctx, ids[0]).unwrap().buffer, &pre));
        assert_eq!(bind.storage(&ctx, ids[2]).unwrap().offset, 128);
        assert_eq!(bind.storage(&ctx, big).unwrap().offset, 0);
    }
}
