//! Page-locked host memory for large device-to-host reads (a step's logits: 513 KB a token
//! on a 128k vocabulary). A copy into pageable memory goes through the driver's own staging in
//! pieces, several times slower than one DMA into page-locked memory, and on the decode path it
//! is waited for every token; llama.cpp reads its logits into the device's pinned host buffer
//! type for the same reason. Reads of at least [`STAGED_MIN`] bytes are copied into one kept
//! page-locked block (grown as needed), then into the caller's slice; smaller ones (a step's
//! inputs, a token id) go straight, as before. Where page-locked memory cannot be had, every
//! read goes straight (after one warning).

use cudarc::driver::{result, CudaContext, CudaStream};
use std::sync::{Arc, Mutex};

/// The smallest read that goes through the page-locked block.
pub(crate) const STAGED_MIN: usize = 64 << 10;

/// The kept block (none yet: null).
struct Block {
    ptr: *mut u8,
    size: usize,
    /// Allocation failed once: no more tries.
    failed: bool,
}

// SAFETY: the block is plain host memory owned by this value, used only under the mutex.
unsafe impl Send for Block {}

/// Page-locked host memory of one GPU's context (see the module docs).
pub(crate) struct Staging {
    ctx: Arc<CudaContext>,
    /// The stream the reads are queued on (the GPU's one stream).
    stream: Arc<CudaStream>,
    block: Mutex<Block>,
}

impl std::fmt::Debug for Staging {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let size = self.block.lock().map(|b| b.size).unwrap_or(0);
        f.debug_struct("Staging").field("size", &size).finish()
    }
}

impl Staging {
    /// No block yet (allocated on the first large read).
    pub(crate) fn new(ctx: Arc<CudaContext>, stream: Arc<CudaStream>) -> Staging {
        Staging {
            ctx,
            stream,
            block: Mutex::new(Block { ptr: std::ptr::null_mut(), size: 0, failed: false }),
        }
    }

    /// Reads `out.len()` bytes at device address `src` into `out` through the block: queues
    /// the copy on the stream and drains it before the block is read. Returns `false`, having
    /// done nothing, where the read is small or no block can be had: the caller reads straight.
    pub(crate) fn read(&self, src: u64, out: &mut [u8]) -> Result<bool, String> {
        if out.len() < STAGED_MIN {
            return Ok(false);
        }
        let mut b = self.block.lock().map_err(|_| "staging block lock poisoned".to_string())?;
        if b.size < out.len() {
            if b.failed {
                return Ok(false);
            }
            release(&self.ctx, &mut b);
            let size = out.len().next_power_of_two();
            self.ctx.bind_to_thread().map_err(|e| format!("{e:?}"))?;
            // SAFETY: a fresh page-locked allocation of `size` bytes in this context, owned by
            // the block and freed once (`release`).
            match unsafe { result::malloc_host(size, 0) } {
                Ok(p) => *b = Block { ptr: p.cast(), size, failed: false },
                Err(e) => {
                    tracing::warn!(size, error = ?e, "no page-locked host memory: large reads go through pageable memory");
                    b.failed = true;
                    return Ok(false);
                }
            }
        }
        // SAFETY: the block holds at least out.len() bytes (above) and is not read or freed
        // until the stream has drained (below), all under the lock.
        let staged = unsafe { std::slice::from_raw_parts_mut(b.ptr, out.len()) };
        // SAFETY: `src` .. + len lies in a live device allocation (the caller checked the
        // range); `staged` is page-locked host memory of that length.
        unsafe { result::memcpy_dtoh_async(staged, src, self.stream.cu_stream()) }
            .map_err(|e| format!("{e:?}"))?;
        self.stream.synchronize().map_err(|e| format!("stream synchronize: {e:?}"))?;
        out.copy_from_slice(staged);
        Ok(true)
    }
}

/// Frees block `b` of context `ctx`, if any.
fn release(ctx: &CudaContext, b: &mut Block) {
    if !b.ptr.is_null() && ctx.bind_to_thread().is_ok() {
        // SAFETY: allocated by malloc_host in this context; nothing reads it (reads hold the
        // lock and drain the stream before they return).
        let _ = unsafe { result::free_host(b.ptr.cast()) };
    }
    b.ptr = std::ptr::null_mut();
    b.size = 0;
}

impl Drop for Staging {
    fn drop(&mut self) {
        if let Ok(b) = self.block.get_mut() {
            release(&self.ctx, b);
        }
    }
}
