//! A tensor resolved for a kernel: where its first element is, type, shape and byte strides.

use tessera_tensor::DType;

/// A tensor as kernels see it: a raw pointer to element (0,0,0,0), its type, `ne` and `nb`.
///
/// Kernels index with the byte strides, exactly as ggml's do, so views, permutations and
/// broadcasting need no copies.
#[derive(Debug, Clone, Copy)]
pub struct TensorRef {
    /// First byte of the tensor.
    pub data: *mut u8,
    /// Element type.
    pub dtype: DType,
    /// Elements per dimension.
    pub ne: [usize; 4],
    /// Byte strides.
    pub nb: [usize; 4],
    /// A weight in the CPU's repacked buffer ([`RepackBufferType`](crate::RepackBufferType)):
    /// matrix products with it take the repacked kernels' arithmetic (`matmul::repack`).
    pub repacked: bool,
}

// SAFETY: a TensorRef is an address plus metadata; the graph executor guarantees that threads
// write disjoint parts of a node's output and only read sources that are complete.
unsafe impl Send for TensorRef {}
// SAFETY: as above.
unsafe impl Sync for TensorRef {}

impl TensorRef {
    /// A plain (not repacked) tensor at `data`.
    pub fn new(data: *mut u8, dtype: DType, ne: [usize; 4], nb: [usize; 4]) -> TensorRef {
        TensorRef { data, dtype, ne, nb, repacked: false }
    }

    /// Number of rows (`ne[1] * ne[2] * ne[3]`).
    pub fn n_rows(&self) -> usize {
        self.ne[1] * self.ne[2] * self.ne[3]
    }

    /// Number of elements.
    pub fn n_elements(&self) -> usize {
        self.ne.iter().product()
    }

    /// Bytes in one row of `ne[0]` elements.
    pub fn row_size(&self) -> usize {
        self.dtype.type_size() * self.ne[0] / self.dtype.block_size()
    }

    /// Whether the elements of each row are packed.
    pub fn rows_contiguous(&self) -> bool {
        self.nb[0] == self.dtype.type_size()
    }

    /// Whether the whole tensor is packed in order.
    pub fn is_contiguous(&self) -> bool {
        let mut next = self.row_size();
        if !self.rows_contiguous() && self.ne[0] > 1 {
            return false;
        }
        for i in 1..4 {
            if self.ne[i] != 1 {
                if self.nb[i] != next {
                    return false;
                }
                next *= self.ne[i];
            }
        }
        true
    }

    /// Splits a flat row index into `(i1, i2, i3)`.
    pub fn row_coords(&self, row: usize) -> (usize, usize, usize) {
        let i1 = row % self.ne[1];
        let i2 = (row / self.ne[1]) % self.ne[2];
        let i3 = row / (self.ne[1] * self.ne[2]);
        (i1, i2, i3)
    }

    /// Address of row `(i1, i2, i3)`.
    ///
    /// # Safety
    /// The indexes must be within `ne` and the tensor's storage must be live.
    pub unsafe fn row_ptr(&self, i1: usize, i2: usize, i3: usize) -> *mut u8 {
        // SAFETY: within the tensor's storage by the caller's contract.
        unsafe { self.data.add(i1 * self.nb[1] + i2 * self.nb[2] + i3 * self.nb[3]) }
    }

    /// Address of element `(i0, i1, i2, i3)` of a non-quantized tensor.
    ///
    /// # Safety
    /// As [`TensorRef::row_ptr`], and `i0 < ne[0]`.
    pub unsafe fn elem_ptr(&self, i0: usize, i1: usize, i2: usize, i3: usize) -> *mut u8 {
        // SAFETY: within the tensor's storage by the caller's contract.
        unsafe { self.row_ptr(i1, i2, i3).add(i0 * self.nb[0]) }
    }
}
