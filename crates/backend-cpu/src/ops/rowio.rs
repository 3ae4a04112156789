//! Reading and writing rows of any layout as f32: the shared plumbing of the element-wise kernels.
//!
//! Kernels load the rows they need into per-thread f32 scratch, compute there, and store the
//! result converted to the destination type. Loads copy out of the tensor before any store, so a
//! destination that shares memory with a source (in-place ops) is handled without aliasing
//! references.

use crate::TensorRef;
use std::cell::RefCell;
use tessera_tensor::quant as float;
use tessera_tensor::quant;
use tessera_tensor::DType;

thread_local! {
    /// Per-thread f32 scratch rows (index = slot), grown on demand and kept by the pool's
    /// long-lived threads.
    static SCRATCH: RefCell<[Vec<f32>; 4]> = const { RefCell::new([Vec::new(), Vec::new(), Vec::new(), Vec::new()]) };
}

/// Runs `f` with four f32 scratch rows of at least `n[k]` floats each.
pub fn with_rows<R>(n: [usize; 4], f: impl FnOnce([&mut [f32]; 4]) -> R) -> R {
    SCRATCH.with(|cell| {
        let mut rows = cell.borrow_mut();
        for (v, &len) in rows.iter_mut().zip(&n) {
            if v.len() < len {
                v.resize(len, 0.0);
            }
        }
        let [a, b, c, d] = &mut *rows;
        f([&mut a[..n[0]], &mut b[..n[1]], &mut c[..n[2]], &mut d[..n[3]]])
    })
}

/// Loads `out.len()` elements of `dtype`, `stride` bytes apart from `src`, as f32.
///
/// # Safety
/// `src` must point to `out.len()` readable elements of `dtype` (F32, F16, BF16 or I32), each
/// `stride` bytes after the previous; no alignment is needed.
pub unsafe fn load(src: *const u8, dtype: DType, stride: usize, out: &mut [f32]) {
    let n = out.len();
    match dtype {
        DType::F32 if stride == 4 => {
            // SAFETY: n packed f32 at src (caller), copied into a separate owned slice.
            unsafe { std::ptr::copy_nonoverlapping(src, out.as_mut_ptr().cast(), n * 4) }
        }
        DType::F32 => {
            for (i, o) in out.iter_mut().enumerate() {
                // SAFETY: element i is readable (caller).
                *o = unsafe { src.add(i * stride).cast::<f32>().read_unaligned() };
            }
        }
        DType::F16 => {
            for (i, o) in out.iter_mut().enumerate() {
                // SAFETY: element i is readable (caller).
                let h = unsafe { src.add(i * stride).cast::<u16>().read_unaligned() };
                *o = float::f16_to_f32(h);
            }
        }
        DType::BF16 => {
            for (i, o) in out.iter_mut().enumerate() {
                // SAFETY: element i is readable (caller).
                let h = unsafe { src.add(i * stride).cast::<u16>().read_unaligned() };
                *o = float::bf16_to_f32(h);
            }
        }
        DType::I32 => {
            for (i, o) in out.iter_mut().enumerate() {
                // SAFETY: element i is readable (caller).
                *o = unsafe { src.add(i * stride).cast::<i32>().read_unaligned() } as f32;
            }
        }
        other => unreachable!("load of {other}: kernels only call it for plain float types"),
    }
}

/// Stores `vals` as `dtype` at `dst`, elements `stride` bytes apart.
///
/// # Safety
/// `dst` must point to `vals.len()` writable elements of `dtype` (F32, F16 or BF16), `stride`
/// bytes apart, that no other thread writes.
pub unsafe fn store(dst: *mut u8, dtype: DType, stride: usize, vals: &[f32]) {
    match dtype {
        DType::F32 if stride == 4 => {
            // SAFETY: room for vals.len() packed f32 at dst (caller); vals is owned scratch.
            unsafe { std::ptr::copy_nonoverlapping(vals.as_ptr().cast(), dst, vals.len() * 4) }
        }
        DType::F32 => {
            for (i, v) in vals.iter().enumerate() {
                // SAFETY: element i is writable (caller).
                unsafe { dst.add(i * stride).cast::<f32>().write_unaligned(*v) };
            }
        }
        DType::F16 => {
            for (i, v) in vals.iter().enumerate() {
                // SAFETY: element i is writable (caller).
                unsafe { dst.add(i * stride).cast::<u16>().write_unaligned(float::f32_to_f16(*v)) };
            }
        }
        DType::BF16 => {
            for (i, v) in vals.iter().enumerate() {
                // SAFETY: element i is writable (caller).
                unsafe {
                    dst.add(i * stride).cast::<u16>().write_unaligned(float::f32_to_bf16(*v))
                };
            }
        }
        other => unreachable!("store of {other}: kernels only call it for plain float types"),
    }
}

/// Loads a row of `out.len()` elements of `dtype` starting at `src`, dequantizing block types
/// (whose rows are always packed).
///
/// # Safety
/// As [`load`] for plain types; for block types `src` must hold the packed row's bytes.
pub unsafe fn load_row(src: *const u8, dtype: DType, stride: usize, out: &mut [f32]) {
    if dtype.block_size() == 1 && !matches!(dtype, DType::F64 | DType::I8 | DType::I16 | DType::I64)
    {
        // SAFETY: forwarded contract.
        unsafe { load(src, dtype, stride, out) }
    } else {
        let bytes = dtype.type_size() * out.len() / dtype.block_size();
        // SAFETY: the packed row is `bytes` readable bytes (caller).
        let row = unsafe { std::slice::from_raw_parts(src, bytes) };
        quant::dequantize_row(dtype, row, out).expect("kernels are only given dequantizable rows");
    }
}

/// Stores a row of `vals` as `dtype` at `dst`, quantizing block types (whose rows must be
/// packed: `stride` is ignored for them).
///
/// # Safety
/// As [`store`] for plain types; for block types `dst` must be the packed row's writable bytes.
pub unsafe fn store_row(dst: *mut u8, dtype: DType, stride: usize, vals: &[f32]) {
    if matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        // SAFETY: forwarded contract.
        unsafe { store(dst, dtype, stride, vals) }
    } else {
        let bytes = dtype.type_size() * vals.len() / dtype.block_size();
        // SAFETY: the packed row is `bytes` writable bytes owned by this thread (caller).
        let row = unsafe { std::slice::from_raw_parts_mut(dst, bytes) };
        quant::quantize_row(dtype, vals, row).expect("kernels are only given quantizable rows");
    }
}

/// Stores rows of one destination type as ggml's CPU does (`type_traits_cpu[dtype].from_float`):
/// with the CPU's own quantizer where it differs from the reference one (Q8_0 at AVX2 and
/// above: x86's `quantize_row_q8_0`), else as [`store_row`]. SET_ROWS (a quantized KV cache)
/// and CPY both quantize through it, as ggml's do.
#[derive(Clone, Copy)]
pub struct RowStore {
    dtype: DType,
    quantize: Option<crate::matmul::FromF32>,
}

impl RowStore {
    /// The store into `dtype` at level `simd`.
    pub fn new(dtype: DType, simd: crate::SimdLevel) -> Self {
        RowStore { dtype, quantize: crate::matmul::cpu_from_float(dtype, simd) }
    }

    /// Stores `vals` at `dst` (element stride `stride` for plain types).
    ///
    /// # Safety
    /// As [`store_row`].
    pub unsafe fn store(&self, dst: *mut u8, stride: usize, vals: &[f32]) {
        match self.quantize {
            // SAFETY: the packed row of vals.len() values at dst is writable (caller).
            Some(q) => unsafe { q(vals.as_ptr(), dst, vals.len()) },
            // SAFETY: forwarded contract.
            None => unsafe { store_row(dst, self.dtype, stride, vals) },
        }
    }
}

/// Reads an integer index (I32 or I64) at `p`.
///
/// # Safety
/// `p` must point to a readable element of `dtype`.
pub unsafe fn read_index(p: *const u8, dtype: DType) -> i64 {
    match dtype {
        // SAFETY: caller.
        DType::I64 => unsafe { p.cast::<i64>().read_unaligned() },
        // SAFETY: caller.
        _ => i64::from(unsafe { p.cast::<i32>().read_unaligned() }),
    }
}

/// Flat row `r` of `t` as `(i1, i2, i3)`, and its address.
pub fn row_at(t: &TensorRef, r: usize) -> (usize, usize, usize, *mut u8) {
    let (i1, i2, i3) = t.row_coords(r);
    let p = t.data.wrapping_add(i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3]);
    (i1, i2, i3, p)
}
