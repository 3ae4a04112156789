//! Row movers: GET_ROWS (with dequantization), SET_ROWS (with quantization) and CONCAT.
//!
//! Indexes come from tensors a model fills at run time; one out of range is a bug in the
//! caller's data, so the kernel stops with a message naming it (the pool turns that into an
//! error) rather than reading or writing outside the tensor.

use super::rowio::{load_row, read_index, row_at, store_row, with_rows, RowStore};
use crate::{ComputeParams, TensorRef};
use tessera_tensor::DType;

/// `dst[:, i10, i11, i12] = a[:, idx[i10, i11, i12], i11, i12]` (`ggml_compute_forward_get_rows`).
pub(crate) fn get_rows(p: &ComputeParams, dst: &TensorRef, a: &TensorRef, idx: &TensorRef) {
    let ne0 = a.ne[0];
    with_rows([ne0, 0, 0, 0], |[x, _, _, _]| {
        for r in p.split(dst.n_rows()) {
            let (i10, i11, i12, d) = row_at(dst, r);
            // SAFETY: idx has shape [ne10, ne11, ne12] = dst's dims 1..3.
            let at = unsafe { idx.data.add(i10 * idx.nb[0] + i11 * idx.nb[1] + i12 * idx.nb[2]) };
            // SAFETY: an element of idx (I32, checked by supports).
            let row = unsafe { read_index(at, DType::I32) };
            assert!(
                (0..a.ne[1] as i64).contains(&row),
                "GET_ROWS: index {row} out of range 0..{} (at [{i10}, {i11}, {i12}])",
                a.ne[1]
            );
            // SAFETY: row is in range (checked), i11/i12 are in range of a (builder's shape rule).
            let src = unsafe { a.row_ptr(row as usize, i11, i12) };
            if a.dtype == DType::I32 {
                for j in 0..ne0 {
                    // SAFETY: element j of the I32 rows of a and dst.
                    unsafe {
                        let v = src.add(j * a.nb[0]).cast::<i32>().read_unaligned();
                        d.add(j * dst.nb[0]).cast::<i32>().write_unaligned(v);
                    }
                }
                continue;
            }
            // SAFETY: a row of a; dst's row r belongs to this thread.
            unsafe {
                load_row(src, a.dtype, a.nb[0], x);
                store_row(d, dst.dtype, dst.nb[0], x);
            }
        }
    });
}

/// `dst[:, idx[i1, i2, i3], i2, i3] = b[:, i1, i2, i3]`, converted to dst's type (the index
/// tensor broadcast over dims 2 and 3), `ggml_compute_forward_set_rows`.
pub(crate) fn set_rows(p: &ComputeParams, dst: &TensorRef, b: &TensorRef, idx: &TensorRef) {
    let out = RowStore::new(dst.dtype, p.simd);
    with_rows([b.ne[0], 0, 0, 0], |[x, _, _, _]| {
        for r in p.split(b.n_rows()) {
            let (i1, i2, i3, src) = row_at(b, r);
            let (j2, j3) = (i2 % idx.ne[1], i3 % idx.ne[2]);
            // SAFETY: (i1, j2, j3) is inside idx (i1 < ne01 = idx.ne[0] by the builder).
            let at = unsafe { idx.data.add(i1 * idx.nb[0] + j2 * idx.nb[1] + j3 * idx.nb[2]) };
            // SAFETY: an I32/I64 element (supports).
            let row = unsafe { read_index(at, idx.dtype) };
            assert!(
                (0..dst.ne[1] as i64).contains(&row),
                "SET_ROWS: index {row} out of range 0..{} (source row [{i1}, {i2}, {i3}])",
                dst.ne[1]
            );
            // SAFETY: b's row r; the dst row is in range (checked) with i2, i3 within dst.
            unsafe {
                load_row(src, b.dtype, b.nb[0], x);
                out.store(dst.row_ptr(row as usize, i2, i3), dst.nb[0], x);
            }
        }
    });
}

/// `a` and `b` joined along `dim` (plain types), `ggml_compute_forward_concat`.
pub(crate) fn concat(p: &ComputeParams, dst: &TensorRef, a: &TensorRef, b: &TensorRef, dim: usize) {
    let ts = dst.dtype.type_size();
    for r in p.split(dst.n_rows()) {
        let (i1, i2, i3, d) = row_at(dst, r);
        for i0 in 0..dst.ne[0] {
            let mut i = [i0, i1, i2, i3];
            let src = if i[dim] < a.ne[dim] {
                a
            } else {
                i[dim] -= a.ne[dim];
                b
            };
            let off = i[0] * src.nb[0] + i[1] * src.nb[1] + i[2] * src.nb[2] + i[3] * src.nb[3];
            // SAFETY: `i` is inside the source it was taken from; the dst element belongs to
            // this thread's row; the two never overlap (dst is a new tensor).
            unsafe { std::ptr::copy_nonoverlapping(src.data.add(off), d.add(i0 * dst.nb[0]), ts) };
        }
    }
}
