//! The activations (src1) as the dot kernels read them: converted once to the weight type's
//! dot type into the work buffer (every thread its share, then a barrier), or used in place.

use super::convert;
use crate::{ComputeParams, SimdLevel, TensorRef};
use std::cell::RefCell;
use std::sync::atomic::Ordering;
use tessera_tensor::DType;

/// Whether src1 must be converted into the work buffer before the dots: its type is not the
/// dot type, or its elements are not packed within rows.
pub(super) fn needs_conversion(src1: &TensorRef, vdt: DType) -> bool {
    src1.dtype != vdt || !src1.rows_contiguous()
}

/// Bytes of one src1 row once converted to `vdt`.
pub(super) fn converted_row_size(vdt: DType, ne10: usize) -> usize {
    vdt.type_size() * (ne10 / vdt.block_size())
}

/// Where the dot kernels find src1 row `(i11, i12, i13)`.
pub(super) struct Activations {
    /// The work buffer (converted rows, packed) or src1 itself.
    pub(super) base: *const u8,
    /// src1's shape and strides.
    pub(super) src1: TensorRef,
    /// Whether `base` is the work buffer.
    pub(super) converted: bool,
    /// Bytes per converted row.
    pub(super) row_size: usize,
}

impl Activations {
    /// Converts this thread's share of src1 to `vdt` into the work buffer where it is not
    /// usable as it is, sets the chunk counter to `p.nth`, and meets the other threads at the
    /// barrier: every row is ready when this returns.
    pub(super) fn prepare(
        p: &ComputeParams,
        src1: &TensorRef,
        vdt: DType,
        simd: SimdLevel,
    ) -> Activations {
        let convert = needs_conversion(src1, vdt);
        let row_size = converted_row_size(vdt, src1.ne[0]);
        if convert {
            assert!(p.wsize >= row_size * src1.n_rows(), "matmul: work buffer too small");
            convert_src1(p, src1, vdt, row_size, simd);
        }
        if p.ith == 0 {
            p.sync.chunk_counter().store(p.nth, Ordering::Relaxed);
        }
        p.sync.barrier();
        Activations {
            base: if convert { p.wdata.cast_const() } else { src1.data.cast_const() },
            src1: *src1,
            converted: convert,
            row_size,
        }
    }

    /// Address of src1 row `r` (a flat row index over dims 1..3).
    pub(super) fn row(&self, r: usize) -> *const u8 {
        if self.converted {
            self.base.wrapping_add(r * self.row_size)
        } else {
            let (i1, i2, i3) = self.src1.row_coords(r);
            let nb = &self.src1.nb;
            self.base.wrapping_add(i1 * nb[1] + i2 * nb[2] + i3 * nb[3])
        }
    }
}

thread_local! {
    /// Per-thread f32 scratch: src1 slices gathered before conversion.
    static GATHER: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on `n` floats of a per-thread scratch buffer.
pub(super) fn with_scratch<R>(
    key: &'static std::thread::LocalKey<RefCell<Vec<f32>>>,
    n: usize,
    f: impl FnOnce(&mut [f32]) -> R,
) -> R {
    key.with(|cell| {
        let mut v = cell.borrow_mut();
        if v.len() < n {
            v.resize(n, 0.0);
        }
        f(&mut v[..n])
    })
}

/// This thread's share of converting src1 into the work buffer: the (row, block) pairs of
/// src1 are split evenly over the threads, so one long row is shared as well as many short.
pub(super) fn convert_src1(
    p: &ComputeParams,
    src1: &TensorRef,
    vdt: DType,
    row_size: usize,
    simd: SimdLevel,
) {
    let from = convert::from_f32(vdt, simd);
    let (bs, ts) = (vdt.block_size(), vdt.type_size());
    let blocks = src1.ne[0] / bs;
    let total = blocks * src1.n_rows();
    let share = |i: usize| ((total as u128 * i as u128) / p.nth as u128) as usize;
    let (mut at, end) = (share(p.ith), share(p.ith + 1));
    let direct = src1.dtype == DType::F32 && src1.rows_contiguous();
    while at < end {
        let (row, b0) = (at / blocks, at % blocks);
        let nblk = (blocks - b0).min(end - at);
        let (i1, i2, i3) = src1.row_coords(row);
        let n = nblk * bs;
        let out = p.wdata.wrapping_add(row * row_size + b0 * ts);
        // SAFETY: (i1, i2, i3) is a row of src1.
        let src = unsafe { src1.row_ptr(i1, i2, i3) }.wrapping_add(b0 * bs * src1.nb[0]);
        if direct {
            // SAFETY: `src` holds n packed f32 of this row; `out` is this thread's part of the
            // work buffer (checked to hold every converted row); the level runs on this CPU.
            unsafe { from(src.cast(), out, n) };
        } else {
            with_scratch(&GATHER, n, |buf| {
                gather_f32(src, src1.dtype, src1.nb[0], buf);
                // SAFETY: `buf` holds n f32; `out` as above.
                unsafe { from(buf.as_ptr(), out, n) };
            });
        }
        at += nblk;
    }
}

/// Reads `buf.len()` F32/F16/BF16 elements `stride` bytes apart from `src` as f32.
pub(super) fn gather_f32(src: *const u8, dtype: DType, stride: usize, buf: &mut [f32]) {
    for (i, v) in buf.iter_mut().enumerate() {
        let at = src.wrapping_add(i * stride);
        // SAFETY: element i of the slice `convert_src1` computed, inside src1.
        *v = unsafe {
            match dtype {
                DType::F16 => half::f16::from_bits(at.cast::<u16>().read_unaligned()).to_f32(),
                DType::BF16 => f32::from_bits(u32::from(at.cast::<u16>().read_unaligned()) << 16),
                _ => at.cast::<f32>().read_unaligned(),
            }
        };
    }
}
