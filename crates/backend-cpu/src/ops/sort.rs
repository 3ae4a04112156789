//! ARGSORT: the indexes that sort each row (`ggml_compute_forward_argsort_f32`), which a
//! mixture-of-experts router takes the top of.

use super::rowio::{load, row_at, with_rows};
use crate::{ComputeParams, TensorRef};

/// Writes, for this thread's share of `a`'s rows, the I32 indexes that sort the row (largest
/// first when `descending`). Equal values keep their index order (ggml's `std::sort` leaves
/// ties in an order of its own; a router's probabilities tie only by accident).
pub(crate) fn argsort(p: &ComputeParams, dst: &TensorRef, a: &TensorRef, descending: bool) {
    let n = a.ne[0];
    let mut idx: Vec<usize> = Vec::with_capacity(n);
    with_rows([n, 0, 0, 0], |[x, _, _, _]| {
        for r in p.split(a.n_rows()) {
            let (i1, i2, i3, src) = row_at(a, r);
            // SAFETY: row r of a holds ne[0] elements at nb[0] strides.
            unsafe { load(src, a.dtype, a.nb[0], x) };
            idx.clear();
            idx.extend(0..n);
            if descending {
                idx.sort_by(|&i, &j| x[j].partial_cmp(&x[i]).unwrap_or(std::cmp::Ordering::Equal));
            } else {
                idx.sort_by(|&i, &j| x[i].partial_cmp(&x[j]).unwrap_or(std::cmp::Ordering::Equal));
            }
            // SAFETY: dst has a row at the same coordinates (same shape, I32).
            let d = unsafe { dst.row_ptr(i1, i2, i3) };
            for (j, &i) in idx.iter().enumerate() {
                // SAFETY: element j < ne[0] of this thread's dst row.
                unsafe { d.add(j * dst.nb[0]).cast::<i32>().write_unaligned(i as i32) };
            }
        }
    });
}
