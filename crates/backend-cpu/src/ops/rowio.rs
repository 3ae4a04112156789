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
