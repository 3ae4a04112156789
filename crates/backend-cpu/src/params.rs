//! What every kernel is handed: which thread it is, the shared work buffer, and the means to
//! synchronize with the other threads working on the same node.

use crate::simd::SimdLevel;
use std::sync::atomic::AtomicUsize;

/// Synchronization shared by the threads computing a graph.
pub trait ThreadSync: Sync {
    /// Blocks until all `nth` threads have called it (ggml's `ggml_barrier`).
    fn barrier(&self);
    /// A counter for dynamic chunk scheduling (mul_mat's `current_chunk`). Thread 0 resets it
    /// before a barrier; then threads claim chunks with `fetch_add`.
    fn chunk_counter(&self) -> &AtomicUsize;
}

/// Per-thread parameters of one node's computation (ggml's `ggml_compute_params`).
#[derive(Clone, Copy)]
pub struct ComputeParams<'a> {
    /// This thread's index, `0..nth`.
    pub ith: usize,
    /// Number of threads working on the node.
    pub nth: usize,
    /// The shared scratch buffer (sized by the plan, 64-byte aligned).
    pub wdata: *mut u8,
    /// Its size in bytes.
    pub wsize: usize,
    /// Barrier and chunk counter.
    pub sync: &'a dyn ThreadSync,
    /// The SIMD level kernels must use.
    pub simd: SimdLevel,
    /// Kernels chosen per row, never by the batch's size: a row gets the bits it gets alone
    /// (no tiled attention, no tiled K-quant order, F16/BF16 through the one-column dots).
    pub batch_invariant: bool,
    /// Batched algorithms from 2 rows ([`tessera_backend::Backend::set_prefer_batched`]): the
    /// tiled attention below its 64 rows. Ignored in batch-invariant mode.
    pub prefer_batched: bool,
}

impl ComputeParams<'_> {
    /// The half-open range of `0..n` that this thread handles when work is split evenly.
    pub fn split(&self, n: usize) -> std::ops::Range<usize> {
        let per = n.div_ceil(self.nth);
        let start = (self.ith * per).min(n);
        start..(start + per).min(n)
    }
}
