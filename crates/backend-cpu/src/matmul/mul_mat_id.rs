//! The expert product: ggml's CPU `MUL_MAT_ID` (`ggml_compute_forward_mul_mat_id`), the matrix
//! product of mixture-of-experts layers.
//!
//! `dst[:, e, t] = src0[:, :, ids[e, t]] · src1[:, e % ne11, t]`. As in ggml, every activation
//! row is converted once to the weight type's dot type, the (slot, token) pairs are grouped
//! by the expert they name, and each expert's matrix is multiplied by its rows. Which
//! arithmetic an expert's rows get follows llama.cpp, per expert:
//! - weights in the CPU's repacked layout: the repacked GEMV chain, row by row (llama.cpp's
//!   repack buffer runs MUL_MAT_ID that way whatever the batch);
//! - otherwise the tiled K-quant path where the type has one and 8 or more rows were routed
//!   to the expert (its batch floor is per expert), else the one-row dot product
//!   (`ggml_vec_dot_*`, never llamafile's tinyBLAS, which MUL_MAT_ID does not call).
//!
//! Each thread takes a contiguous range of every expert's weight rows, so the experts need no
//! barrier between them and no output is written by two threads.

use super::{effective, kernel, Activations, Kernel, VecDot};
use crate::{ComputeParams, SimdLevel, TensorRef};
use std::cell::RefCell;
use tessera_tensor::DType;

/// Whether the expert product takes weights of type `src0`: the types with a dot product
/// (the dequantizing fallback of MUL_MAT has no expert form), F32 activations.
pub(crate) fn supports(src0: DType, src1: DType) -> bool {
    src1 == DType::F32 && matches!(kernel(src0, SimdLevel::Scalar), Kernel::Dot { .. })
}

/// The one-row dot ggml's MUL_MAT_ID calls for `src0` at `simd`: the type's `vec_dot`
/// (never tinyBLAS's orders), and its activation type.
fn one_row_dot(dtype: DType, simd: SimdLevel) -> (DType, VecDot) {
    let Kernel::Dot { vdt, dot, .. } = kernel(dtype, simd) else {
        unreachable!("supports() admits only types with a dot kernel")
    };
    (vdt, super::ggml_vec_dot(dtype, simd).unwrap_or(dot))
}

/// A gathered row: a converted activation row and the output row it fills.
type RowPair = (*const u8, *mut f32);

/// A routed row: (expert slot, token).
type SlotToken = (u32, u32);

thread_local! {
    /// Per-thread (slot, token) pairs grouped by expert, and the gathered row pointers.
    static GROUPS: RefCell<(Vec<Vec<SlotToken>>, Vec<RowPair>)> = RefCell::default();
}

/// Computes this thread's share of `dst = MUL_MAT_ID(src0, src1, ids)`. Called by all `p.nth`
/// threads at once; they meet at one barrier (after converting src1 into `p.wdata`, which must
/// hold [`work_size`](super::work_size) bytes: src1's rows converted, as for MUL_MAT).
///
/// Shapes: src0 `[K, M, n_expert]` with packed rows, src1 F32 `[K, ne11, n_tokens]`, ids I32
/// `[n_used, n_tokens]` (any strides) with `n_used % ne11 == 0`, dst F32 `[M, n_used,
/// n_tokens]` with packed rows. Panics on an expert id out of range (a graph input bug).
pub(crate) fn mul_mat_id(
    p: &ComputeParams,
    dst: &TensorRef,
    src0: &TensorRef,
    src1: &TensorRef,
    ids: &TensorRef,
) {
    let simd = effective(p.simd);
    let (vdt, dot) = one_row_dot(src0.dtype, simd);
    let (k, m, n_expert) = (src0.ne[0], src0.ne[1], src0.ne[2]);
    assert_eq!(k, src1.ne[0], "mul_mat_id: inner dimensions differ");
    assert!(src0.ne[3] == 1 && src1.ne[3] == 1, "mul_mat_id: 4-D operands");
    let act = Activations::prepare(p, src1, vdt, simd);
    #[cfg(target_arch = "x86_64")]
    let vnni = simd >= SimdLevel::Avx512 && super::cpu_vnni();
    #[cfg(target_arch = "x86_64")]
    let repacked = src0.repacked
        && simd >= SimdLevel::Avx2
        && super::interleaved::interleaves(src0.dtype)
        && m % 8 == 0;
    GROUPS.with(|cell| {
        let (groups, pairs) = &mut *cell.borrow_mut();
        groups.resize_with(n_expert, Vec::new);
        groups.iter_mut().for_each(Vec::clear);
        let (n_used, n_tokens) = (ids.ne[0], ids.ne[1]);
        for t in 0..n_tokens {
            for slot in 0..n_used {
                // SAFETY: (slot, t) is an element of the I32 ids tensor.
                let e = unsafe {
                    ids.data.add(slot * ids.nb[0] + t * ids.nb[1]).cast::<i32>().read_unaligned()
                };
                assert!(
                    (0..n_expert as i64).contains(&i64::from(e)),
                    "MUL_MAT_ID: expert id {e} out of range 0..{n_expert} (slot {slot}, token {t})"
                );
                groups[e as usize].push((slot as u32, t as u32));
            }
        }
        let ne11 = src1.ne[1];
        for (e, rows) in groups.iter().enumerate() {
            if rows.is_empty() {
                continue;
            }
            pairs.clear();
            pairs.extend(rows.iter().map(|&(slot, t)| {
                let (slot, t) = (slot as usize, t as usize);
                let y = act.row(slot % ne11 + t * ne11);
                let out = dst.data.wrapping_add(slot * dst.nb[1] + t * dst.nb[2]).cast::<f32>();
                (y, out)
            }));
            // Expert e's matrix as a 2-D weight.
            let w = TensorRef {
                data: src0.data.wrapping_add(e * src0.nb[2]),
                ne: [k, m, 1, 1],
                nb: [src0.nb[0], src0.nb[1], src0.nb[1] * m, src0.nb[1] * m],
                ..*src0
            };
            #[cfg(target_arch = "x86_64")]
            if repacked {
                super::interleaved::gemv_gathered(p, &w, pairs, vnni);
                continue;
            }
            #[cfg(target_arch = "x86_64")]
            if simd >= SimdLevel::Avx2
                && !p.batch_invariant
                && super::kquant_tiled::applies_to_expert(src0.dtype, pairs.len())
            {
                super::kquant_tiled::mul_mat_gathered(p, &w, pairs, vnni);
                continue;
            }
            dot_rows(p, &w, pairs, dot);
        }
    });
}

/// This thread's contiguous range of `w`'s rows against every gathered pair, one dot each
/// (each weight row read once while the pairs take it in turn).
fn dot_rows(p: &ComputeParams, w: &TensorRef, pairs: &[RowPair], dot: VecDot) {
    let (k, nr0, nb01) = (w.ne[0], w.ne[1], w.nb[1]);
    let share = |i: usize| nr0 * i / p.nth;
    for r in share(p.ith)..share(p.ith + 1) {
        let x = w.data.cast_const().wrapping_add(r * nb01);
        for &(y, out) in pairs {
            // SAFETY: row r of the expert's matrix (k values, packed), a converted activation
            // row of the kernel's dot type, a level the CPU runs (`effective`); the output row
            // holds nr0 values and this thread owns value r of every output row.
            unsafe { out.add(r).write(dot(k, x, y)) };
        }
    }
}
