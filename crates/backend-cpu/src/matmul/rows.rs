//! The loops of products with few activation rows: matrix-vector products (`matvec_rows`,
//! and `matvec` with the VNNI kernels) and 2+ rows reading each weight row once (`few_rows`,
//! `few_rows_vnni`). Which one runs is [`super::plan`]'s choice.

use super::activations::Activations;
use super::{for_each_claimed, types, vnni_few, vnni_matvec, VecDot, VecDot4};
use crate::{ComputeParams, TensorRef};
use std::cell::RefCell;

/// A matrix-vector product (src1 one row) with the VNNI kernels of the Q8_0 and Q4_1
/// families: this thread prepares the activation row's per-block data once, then runs its
/// share of the rows.
pub(super) fn matvec(
    p: &ComputeParams,
    dst: &TensorRef,
    src0: &TensorRef,
    act: &Activations,
    mv: vnni_matvec::Matvec,
) {
    thread_local! {
        /// Per-thread activation block data for [`vnni_matvec`].
        static AUX: RefCell<Vec<vnni_matvec::BlockAux>> = const { RefCell::new(Vec::new()) };
    }
    let (k, nb01) = (src0.ne[0], src0.nb[1]);
    let y = act.row(0);
    let out = dst.data.cast::<f32>();
    AUX.with(|cell| {
        let mut aux = cell.borrow_mut();
        // SAFETY: `y` is the converted row (Q8_0 or Q8_1, the kernel's) of k values; the
        // caller checked the CPU.
        unsafe { mv.prepare(k, y, &mut aux) };
        // One contiguous range per thread, not ggml's 64-row chunks claimed in turn: each
        // thread's prefetching then runs ahead into rows it will read itself (tg128, 2
        // threads, medians of 3 interleaved runs: SmolLM2 134 -> 149 t/s, Qwen2.5-0.5B
        // 46.5 -> 47.5, Gemma-3-270M 66 -> 76).
        let nr0 = src0.ne[1];
        let share = |i: usize| nr0 * i / p.nth;
        let rows0 = share(p.ith)..share(p.ith + 1);
        // SAFETY: dst row 0 holds ne0 = src0 rows f32 values; this thread owns `rows0`.
        let out =
            unsafe { std::slice::from_raw_parts_mut(out.wrapping_add(rows0.start), rows0.len()) };
        let x = src0.data.cast_const().wrapping_add(rows0.start * nb01);
        // SAFETY: src0 rows `rows0` (packed, k values each, checked by `check_shapes`),
        // the row `aux` was prepared from, and a CPU with AVX-512 VNNI.
        unsafe { mv.run(k, x, nb01, y, &aux, out) };
    });
}

/// A product of a 2-D weight with 2-7 activation rows through the one- and four-row dots:
/// one contiguous range of weight rows per thread (as [`matvec`]); each weight row, prefetched
/// as in [`matvec_rows`], is multiplied by the activation rows four at a time where the type
/// has a four-row kernel (its unpacking shared by the four), else one at a time while the row
/// is in cache: the weights are read from memory once. The two kernels give the same bits.
pub(super) fn few_rows(
    p: &ComputeParams,
    dst: &TensorRef,
    src0: &TensorRef,
    act: &Activations,
    (dot, dot4): (VecDot, Option<VecDot4>),
) {
    let (k, nb01, row) = (src0.ne[0], src0.nb[1], src0.row_size());
    let nr0 = src0.ne[1];
    let n1 = act.src1.ne[1];
    let share = |i: usize| nr0 * i / p.nth;
    // Groups of four activation rows; three left over make a last group that repeats its
    // last row (that fourth result is dropped): one four-row call instead of three single ones.
    // One or two left over stay single: padding those measured slower (Qwen2.5 at the AVX2
    // level, Zen 4, 2 threads, tg64: 3 sequences 66-68 -> 78-86 t/s, 7: 88 -> 96; padding 2
    // and 5 sequences: 67 -> 58 and 98 -> 75).
    let four = match (dot4.is_some(), n1 % 4) {
        (false, _) => 0,
        (true, 3) => n1,
        (true, rest) => n1 - rest,
    };
    let out = |r1: usize| dst.data.wrapping_add(r1 * dst.nb[1]).cast::<f32>();
    for r in share(p.ith)..share(p.ith + 1) {
        let xr = src0.data.cast_const().wrapping_add(r * nb01);
        prefetch_row(xr, row);
        if let Some(dot4) = dot4 {
            for r1 in (0..four).step_by(4) {
                let ys = std::array::from_fn(|j| act.row((r1 + j).min(four - 1)));
                // SAFETY: row r of the 2-D src0 (k values, packed), converted activation rows
                // r1..r1 + 4 (clamped to the last), a level the CPU runs.
                let got = unsafe { dot4(k, xr, ys) };
                for (j, v) in got.into_iter().enumerate().take(four - r1) {
                    // SAFETY: dst row r1 + j < four <= n1 has ne0 = nr0 values; this thread
                    // owns row r.
                    unsafe { out(r1 + j).add(r).write(v) };
                }
            }
        }
        for r1 in four..n1 {
            // SAFETY: row r of the 2-D src0 (k values, packed), converted activation row r1,
            // a level the CPU runs; dst row r1 has ne0 values and this thread owns row r.
            unsafe { out(r1).add(r).write(dot(k, xr, act.row(r1))) };
        }
    }
}

/// Weight rows per block in [`few_rows_vnni`] when the activation rows take several passes:
/// the block stays in L1/L2 while every pass reads it.
pub(super) const FEW_ROWS_BLOCK: usize = 32;

/// Chunks of weight rows per thread in [`few_rows_vnni`].
pub(super) const FEW_ROWS_CHUNKS: usize = 8;

/// A product of a 2-D weight with 2 or more activation rows through the VNNI few-rows kernels
/// ([`vnni_few`]): the activation rows in passes of at most [`vnni_few::MAX_ROWS`] (sizes as
/// even as can be), each prepared once per thread; chunks of weight rows claimed in turn
/// ([`FEW_ROWS_CHUNKS`] per thread), in blocks of [`FEW_ROWS_BLOCK`] rows that every pass
/// reads while they are in cache (one pass: the whole chunk at once), each weight block
/// unpacked once per pass for all its rows.
pub(super) fn few_rows_vnni(
    p: &ComputeParams,
    dst: &TensorRef,
    src0: &TensorRef,
    act: &Activations,
) {
    thread_local! {
        /// Per-thread prepared activation rows for [`vnni_few`], one per pass.
        static SCRATCH: RefCell<Vec<vnni_few::Scratch>> = RefCell::default();
    }
    let (k, nb01) = (src0.ne[0], src0.nb[1]);
    let nr0 = src0.ne[1];
    let n1 = act.src1.ne[1];
    let passes = n1.div_ceil(vnni_few::MAX_ROWS);
    let pass_rows = |c: usize| n1 * c / passes..n1 * (c + 1) / passes;
    // Passes have n1 / passes rows or one more: one kernel for each size, no allocation on
    // this (decoding) path.
    let x86 = &types::row(src0.dtype).expect("planned for a few-rows type").x86;
    let (kernels, mv) = (x86.vnni_few, x86.vnni_matvec);
    let kernel = |rows: usize| {
        let few = kernels.zip(mv).and_then(|(k, mv)| vnni_few::Few::new(k, mv, rows));
        few.expect("checked by mul_mat")
    };
    let (short, long) = (kernel(n1 / passes), kernel(n1.div_ceil(passes)));
    let few = |c: usize| if pass_rows(c).len() == n1 / passes { short } else { long };
    SCRATCH.with(|cell| {
        let mut scratch = cell.borrow_mut();
        if scratch.len() < passes {
            scratch.resize_with(passes, Default::default);
        }
        for c in 0..passes {
            let mut ys = [std::ptr::null(); vnni_few::MAX_ROWS];
            for (y, r1) in ys.iter_mut().zip(pass_rows(c)) {
                *y = act.row(r1);
            }
            // SAFETY: the converted activation rows (the kernel's Q8_0 or Q8_1) of k values,
            // unchanged during this product; a CPU with AVX-512 VNNI (the caller).
            unsafe { few(c).prepare(k, &ys[..pass_rows(c).len()], &mut scratch[c]) };
        }
        // Chunks of weight rows claimed in turn (the first one per thread fixed), so a thread
        // that falls behind (a shared, noisy host) does fewer of them instead of making the
        // other wait at the next barrier.
        let chunk = nr0.div_ceil(FEW_ROWS_CHUNKS * p.nth).next_multiple_of(FEW_ROWS_BLOCK);
        for_each_claimed(p, nr0.div_ceil(chunk), |current| {
            let rows0 = chunk * current..(chunk * (current + 1)).min(nr0);
            let block = if passes == 1 { rows0.len().max(1) } else { FEW_ROWS_BLOCK };
            for start in rows0.clone().step_by(block) {
                let end = (start + block).min(rows0.end);
                let x = src0.data.cast_const().wrapping_add(start * nb01);
                for c in 0..passes {
                    let mut outs = [std::ptr::null_mut(); vnni_few::MAX_ROWS];
                    for (o, r1) in outs.iter_mut().zip(pass_rows(c)) {
                        *o =
                            dst.data.wrapping_add(r1 * dst.nb[1]).cast::<f32>().wrapping_add(start);
                    }
                    let outs = &outs[..pass_rows(c).len()];
                    // SAFETY: src0 rows start..end (packed, k values each: `check_shapes`); the
                    // pass's rows prepared above by the same kernel; dst row r1 holds ne0 = nr0
                    // values and this thread owns rows0 (so start..end) of every row; a CPU with
                    // AVX-512 VNNI (the caller).
                    unsafe { few(c).run(x, nb01, end - start, outs, &scratch[c]) };
                }
            }
        });
    });
}

/// Prefetches the `row` bytes [`vnni_matvec::PREFETCH`] past the weight row at `x`, a cache
/// line at a time, so the memory stream keeps ahead of the one-row kernels.
#[inline(always)]
pub(super) fn prefetch_row(x: *const u8, row: usize) {
    let ahead = x.wrapping_add(vnni_matvec::PREFETCH);
    for off in (0..row).step_by(64) {
        // SAFETY: a prefetch is a hint: it never faults, whatever the address.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                ahead.wrapping_add(off).cast(),
            )
        };
    }
}

/// Rows (bytes) shorter than this are prefetched ahead in [`matvec_rows`]: the window then
/// spans more than one row, which the hardware prefetcher, following one row's stream, does
/// not see coming. Longer rows stream well on their own, and there prefetching cost time
/// (gpt-oss's 2880-wide Q8_0 rows, 3060 bytes: decode 6-17% faster without it; Zen 3, AVX2,
/// 2 threads), while SmolLM2's 360-byte Q4_1 rows gain 8-36% from it.
pub(super) const PREFETCH_ROWS_UNDER: usize = 2048;

/// A matrix-vector product (one activation row, a 2-D weight) with a one-row kernel: the
/// threads claim chunks of 64 rows from the shared counter (ggml's chunk size for one
/// activation row), so a thread slowed by a busy core takes fewer, and before each short row a
/// thread prefetches the weight bytes [`vnni_matvec::PREFETCH`] ahead of it, so the memory
/// stream the product waits on stays ahead of the arithmetic. Every output is `dot`'s, so the
/// bits are the chunked loop's.
pub(super) fn matvec_rows(
    p: &ComputeParams,
    dst: &TensorRef,
    src0: &TensorRef,
    act: &Activations,
    dot: VecDot,
) {
    const CHUNK: usize = 64;
    let (k, nb01, row) = (src0.ne[0], src0.nb[1], src0.row_size());
    let nr0 = src0.ne[1];
    let y = act.row(0);
    let out = dst.data.cast::<f32>();
    for_each_claimed(p, nr0.div_ceil(CHUNK), |c| {
        for r in CHUNK * c..(CHUNK * (c + 1)).min(nr0) {
            let x = src0.data.cast_const().wrapping_add(r * nb01);
            if row < PREFETCH_ROWS_UNDER {
                prefetch_row(x, row);
            }
            // SAFETY: row r of the 2-D src0 (k values, packed: `check_shapes`), the converted
            // activation row, and a level the CPU runs (`effective`); dst row 0 has ne0 = nr0
            // values and this thread owns row r (its chunk).
            unsafe { out.add(r).write(dot(k, x, y)) };
        }
    });
}
