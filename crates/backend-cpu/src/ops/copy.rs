//! CPY, CONT and DUP (`ggml_compute_forward_dup`): elements copied in logical order from a
//! source of any layout into a destination of any layout and type, converting between F32, F16
//! and BF16 or quantizing as ggml's CPU does ([`RowStore`]); a quantized source is copied block
//! for block into its own type.

use super::rowio::{load, load_row, row_at, with_rows, RowStore};
use crate::{ComputeParams, TensorRef};
use tessera_tensor::{quant, DType};

fn plain(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F16 | DType::BF16)
}

/// Whether [`copy`] takes this pair.
pub(crate) fn supports(dst: &TensorRef, src: &TensorRef) -> bool {
    if src.dtype.block_size() > 1 {
        return dst.dtype == src.dtype && dst.ne[0] == src.ne[0];
    }
    plain(src.dtype)
        && (plain(dst.dtype) || (quant::can_quantize(dst.dtype) && dst.rows_contiguous()))
}

/// Copies `src` into `dst` (same element count), each thread a share of dst's rows.
pub(crate) fn copy(p: &ComputeParams, dst: &TensorRef, src: &TensorRef) {
    let ne0 = dst.ne[0];
    if src.dtype.block_size() > 1 {
        // Same type, same row length: whole rows of blocks.
        let bytes = src.row_size();
        for r in p.split(dst.n_rows()) {
            let (_, _, _, d) = row_at(dst, r);
            let (_, _, _, s) = row_at(src, r);
            // SAFETY: row r of each tensor holds `bytes` packed bytes; dst's row is this
            // thread's and is a different tensor's storage.
            unsafe { std::ptr::copy(s, d, bytes) };
        }
        return;
    }
    let out = RowStore::new(dst.dtype, p.simd);
    with_rows([ne0, 0, 0, 0], |[x, _, _, _]| {
        for r in p.split(dst.n_rows()) {
            let (_, _, _, d) = row_at(dst, r);
            if src.ne[0] == ne0 {
                let (_, _, _, s) = row_at(src, r);
                // SAFETY: flat row r of src has ne0 elements too.
                unsafe { load(s, src.dtype, src.nb[0], x) };
            } else {
                // Rows of different lengths: walk the flat element index through src's shape.
                for (j, v) in x.iter_mut().enumerate() {
                    let k = r * ne0 + j;
                    let i0 = k % src.ne[0];
                    let (_, _, _, s) = row_at(src, k / src.ne[0]);
                    // SAFETY: element i0 of src's row k / ne00 (k < the element count).
                    unsafe {
                        load_row(
                            s.add(i0 * src.nb[0]),
                            src.dtype,
                            src.nb[0],
                            std::slice::from_mut(v),
                        )
                    };
                }
            }
            // SAFETY: dst's row r belongs to this thread.
            unsafe { out.store(d, dst.nb[0], x) };
        }
    });
}
