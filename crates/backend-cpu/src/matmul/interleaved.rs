//! Repacked Q4_0, IQ4_NL, MXFP4, Q4_K and Q2_K weights with eight rows interleaved in memory,
//! as llama.cpp's CPU_REPACK buffer holds them (`block_q4_0x8`, `block_iq4_nlx8`,
//! `block_mxfp4x8`, `block_q4_Kx8`, `block_q2_Kx8`; the layout here is Tessera's own), and their
//! products (the Q8_0 family's group kernels in `arch/x86/interleaved.rs`, Q4_K's in
//! `arch/x86/interleaved_k.rs`, Q2_K's in `arch/x86/interleaved_q2k.rs`).
//!
//! # Why a layout of its own
//!
//! The repacked chain (`arch/x86/repack.rs`) needs, per weight row and block, the exact integer
//! `Σ q·y` of its products. Read from the file's layout, eight rows make eight memory streams
//! and each row's sum ends in a horizontal reduction. Interleaved, a group of eight rows is
//! one stream, and each 32-bit lane of a register holds four bytes of one row: one
//! multiply-add with four activation bytes broadcast to every lane adds to all eight rows'
//! sums at once, lane `r` ending with row `r`'s exact sum. No horizontal sums, no shuffles;
//! the output is lane `r`'s f32 chain (Q4_0: `acc = fma(f32(Σ q·y), f32(dx)·f32(dy), acc)`
//! over the blocks in order; IQ4_NL and MXFP4 the same), which is the repacked chain exactly (same bits as
//! `arch/x86/repack.rs`'s one-row kernels, tests).
//!
//! # The layout
//!
//! Rows `8g..8g+8` keep the bytes they had (`8 · row_size` from `8g · row_size`), so a range
//! of whole groups is a range of bytes. Within a group, block `i` of the eight rows takes the
//! eight rows' bytes of that block (`8 · block size` at `8 · block size · i`): first each
//! scale field as eight consecutive values in row order (Q4_0: `d`; Q4_K and Q2_K: `d`, then
//! `dmin`, which Q2_K's file block keeps at its end; MXFP4: its one-byte exponent `e`), then
//! the rest of each row's block as 4-byte words, word `w` of row `r` at
//! `8·field bytes + 32·w + 4·r`: 32 bytes per word index, one lane per row.
//!
//! For Q4_0, IQ4_NL and MXFP4 the four words are their 16 bytes of nibbles: a byte's low nibble is
//! value `j`, its high nibble value `j + 16`, so word `c` gives the values `4c..4c+4` (low
//! nibbles) and `16+4c..16+4c+4` (high) of every row. Q4_0's products take the nibbles
//! unsigned (`0..16`) and take `8·Σy` off each block's sums (the activation block's sum, found
//! once per product). IQ4_NL's nibbles index `kvalues_iq4nl` (one byte shuffle): with VNNI the
//! table biased to unsigned (`+128`), `128·Σy` taken off the same way; with AVX2 the signed
//! values through the sign trick (`|q|` times `y` with `q`'s signs: pair sums fit `maddubs`),
//! summed in i32. MXFP4 is IQ4_NL with its own table (`kvalues_mxfp4`) and its scales the eight
//! rows' E8M0 exponents, each as half its power of two.

use super::arch::x86::interleaved::{block_sums, run_tile};
use super::arch::x86::interleaved_k::WeightGroups;
use super::layouts::{Shape, GROUP, MAX_ROWS};
use super::{row_targets, Activations};
use crate::{ComputeParams, TensorRef};
use std::cell::RefCell;
use tessera_tensor::DType;

/// The interleaved shape of `dtype`, where its repacked weights are stored interleaved (the
/// type table's [`Repack::shape`](super::types::Repack::shape)).
fn shape(dtype: DType) -> Option<Shape> {
    Some(repack_of(dtype)?.shape)
}

/// Whether llama.cpp (built for `level`) would repack a 2-D weight of type `dtype` with `rows`
/// rows (`ggml_repack_get_optimal_repack_type` on x86): the type table names the types and
/// the level each needs (Q4_0, Q4_K, IQ4_NL and MXFP4 with AVX2, Q2_K with AVX-512), and the
/// row count must be divisible by 8.
pub(crate) fn repacks(dtype: DType, rows: usize, level: crate::SimdLevel) -> bool {
    repack_of(dtype).is_some_and(|r| level >= r.level) && rows % 8 == 0
}

/// The type table's repacking of `dtype`.
fn repack_of(dtype: DType) -> Option<super::types::Repack> {
    super::types::row(dtype)?.x86.repack
}

/// Whether the repacked weights of `dtype` are stored interleaved ([`interleave`]) rather
/// than in the file's layout.
pub(crate) fn interleaves(dtype: DType) -> bool {
    shape(dtype).is_some()
}

/// Where byte `i` of row `r`'s block goes in the group's interleaved block.
fn place(sh: Shape, r: usize, i: usize) -> usize {
    let fields = sh.at..sh.at + sh.head_bytes();
    if fields.contains(&i) {
        let f = i - sh.at;
        GROUP * sh.field * (f / sh.field) + sh.field * r + f % sh.field
    } else {
        // The byte's place among the bytes that are not fields.
        let j = if i < sh.at { i } else { i - sh.head_bytes() };
        GROUP * sh.head_bytes() + 32 * (j / 4) + 4 * r + j % 4
    }
}

/// Moves every byte of `rows` rows of `k` values between the file's layout (`plain`) and the
/// interleaved one: `f(plain index, interleaved index, length)` for each run of bytes that
/// stays together (a scale field, a 4-byte word).
fn for_each_run(sh: Shape, rows: usize, k: usize, mut f: impl FnMut(usize, usize, usize)) {
    let nb = k / sh.values;
    let row = nb * sh.bytes;
    let fields_end = sh.at + sh.head_bytes();
    for g in 0..rows / GROUP {
        let base = g * GROUP * row;
        for b in 0..nb {
            let gb = base + b * GROUP * sh.bytes;
            for r in 0..GROUP {
                let pb = base + r * row + b * sh.bytes;
                for i in (sh.at..fields_end).step_by(sh.field) {
                    f(pb + i, gb + place(sh, r, i), sh.field);
                }
                for i in (0..sh.at).step_by(4).chain((fields_end..sh.bytes).step_by(4)) {
                    f(pb + i, gb + place(sh, r, i), 4);
                }
            }
        }
    }
}

/// The shape, when `len` bytes are `rows` whole rows of `k` values of `dtype` in groups of
/// eight.
fn checked(dtype: DType, len: usize, rows: usize, k: usize) -> Option<Shape> {
    let sh = shape(dtype)?;
    let whole = rows % GROUP == 0 && k % sh.values == 0;
    let words = sh.at % 4 == 0 && (sh.bytes - sh.head_bytes()) % 4 == 0;
    (whole && words && len == rows * (k / sh.values) * sh.bytes).then_some(sh)
}

/// The interleaved layout (module docs) of `rows` rows of `k` values of `dtype`, given in
/// the file's layout. `None` for a type not stored interleaved, unless `rows` is a multiple
/// of 8, `k` of the block size and `src` exactly that many rows.
pub(crate) fn interleave(dtype: DType, src: &[u8], rows: usize, k: usize) -> Option<Vec<u8>> {
    let sh = checked(dtype, src.len(), rows, k)?;
    let mut out = vec![0u8; src.len()];
    for_each_run(sh, rows, k, |p, i, n| out[i..i + n].copy_from_slice(&src[p..p + n]));
    Some(out)
}

/// The file's layout back from [`interleave`]'s (same conditions).
pub(crate) fn deinterleave(dtype: DType, src: &[u8], rows: usize, k: usize) -> Option<Vec<u8>> {
    let sh = checked(dtype, src.len(), rows, k)?;
    let mut out = vec![0u8; src.len()];
    for_each_run(sh, rows, k, |p, i, n| out[p..p + n].copy_from_slice(&src[i..i + n]));
    Some(out)
}

/// The bytes from one group of eight interleaved rows of `src0` to the next, and this
/// thread's contiguous range of groups.
fn my_groups(p: &ComputeParams, src0: &TensorRef) -> (usize, std::ops::Range<usize>) {
    let nr0 = src0.ne[1];
    assert!(nr0 % GROUP == 0, "interleaved weights: {nr0} rows, not groups of eight");
    let groups = nr0 / GROUP;
    let share = |i: usize| groups * i / p.nth;
    (GROUP * src0.nb[1], share(p.ith)..share(p.ith + 1))
}

/// Computes this thread's share of `dst = src0 · src1ᵀ` for interleaved weights (2-D, rows
/// a multiple of 8): contiguous ranges of groups per thread; each range in pieces of four
/// groups that every tile of up to four activation rows reads while they are in cache.
/// Q4_K's activation rows `0..ne11 − ne11 % 4` take the GEMM chain, the rest the GEMV chain
/// (llama.cpp's split); Q4_0's and IQ4_NL's two chains are one.
/// `vnni`: the CPU has AVX-512 VNNI and the level allows it (else AVX2).
pub(super) fn mul_mat(
    p: &ComputeParams,
    dst: &TensorRef,
    src0: &TensorRef,
    act: &Activations,
    vnni: bool,
) {
    thread_local! {
        /// Per-thread bias of every activation row's blocks (Q4_0, IQ4_NL with VNNI).
        static SUMS: RefCell<Vec<i32>> = const { RefCell::new(Vec::new()) };
    }
    let k = src0.ne[0];
    let (gstride, mine) = my_groups(p, src0);
    let groups = |x, count| WeightGroups { x, n: k, stride: gstride, count };
    if mine.is_empty() {
        return;
    }
    let src1 = &act.src1;
    let n1 = src1.n_rows();
    // Tiles of activation rows, `tile(t) = (first row, rows, GEMM chain)`: in one plane, the
    // rows 0..full (llama.cpp's GEMM rows, a multiple of four) in fours, then the rest; over
    // several planes one row at a time, its chain by its row in the plane.
    // In batch-invariant mode every row takes the GEMV chain, the one a row alone takes.
    let ne11 = src1.ne[1];
    let full = if p.batch_invariant { 0 } else { ne11 - ne11 % 4 };
    let one_plane = src1.ne[2] * src1.ne[3] == 1;
    let ntiles = if one_plane { full / MAX_ROWS + (n1 - full).div_ceil(MAX_ROWS) } else { n1 };
    let tile = |t: usize| {
        if !one_plane {
            (t, 1, src1.row_coords(t).0 < full)
        } else if t < full / MAX_ROWS {
            (MAX_ROWS * t, MAX_ROWS, true)
        } else {
            let r0 = full + MAX_ROWS * (t - full / MAX_ROWS);
            (r0, MAX_ROWS.min(n1 - r0), false)
        }
    };
    let dtype = src0.dtype;
    let kernels = repack_of(dtype).expect("an interleaved type").groups;
    let bias = kernels.bias(vnni);
    SUMS.with(|cell| {
        let mut sums = cell.borrow_mut();
        sums.clear();
        if let Some(m) = bias {
            for r in 0..n1 {
                // SAFETY: the converted Q8_0 activation row r of k values; AVX2 (the caller).
                unsafe { block_sums(k, act.row(r), m, &mut sums) };
            }
        }
        let piece = if n1 <= MAX_ROWS { mine.len() } else { 4 };
        for g0 in mine.clone().step_by(piece) {
            let g1 = (g0 + piece).min(mine.end);
            // The weight is 2-D (`repack::applies`): every activation row reads the same one.
            let x = src0.data.cast_const().wrapping_add(g0 * gstride);
            for (r0, rows, gemm) in (0..ntiles).map(tile) {
                let mut ys = [std::ptr::null(); MAX_ROWS];
                let mut sy = [std::ptr::null(); MAX_ROWS];
                let mut outs = [std::ptr::null_mut(); MAX_ROWS];
                for j in 0..rows {
                    ys[j] = act.row(r0 + j);
                    if bias.is_some() {
                        sy[j] = sums[(r0 + j) * (k / 32)..].as_ptr();
                    }
                    outs[j] = row_targets(dst, src0, src1, r0 + j).1.wrapping_add(GROUP * g0);
                }
                let (ys, outs) = (&ys[..rows], &outs[..rows]);
                // SAFETY: groups g0..g1 of the 2-D interleaved weight (k values per row);
                // converted activation rows r0.. of the weight's dot type (and their block
                // bias); dst rows r0.. hold nr0 values and this thread owns the columns of its
                // groups; the caller checked the CPU.
                unsafe { run_tile(kernels, vnni, gemm, groups(x, g1 - g0), ys, &sy[..rows], outs) };
            }
        }
    });
}

/// This thread's share of one 2-D interleaved matrix (rows a multiple of 8) against gathered
/// activation rows: `pairs[i] = (converted activation row, its output row)`, every pair on the
/// GEMV chain. llama.cpp's repacked MUL_MAT_ID multiplies each row alone by that chain, whose
/// results do not depend on the rows beside it, so here they go in fours. Contiguous ranges
/// of groups per thread, as [`mul_mat`]. `vnni` as for [`mul_mat`].
pub(super) fn gemv_gathered(
    p: &ComputeParams,
    src0: &TensorRef,
    pairs: &[(*const u8, *mut f32)],
    vnni: bool,
) {
    let k = src0.ne[0];
    let (gstride, mine) = my_groups(p, src0);
    let groups = |x, count| WeightGroups { x, n: k, stride: gstride, count };
    if mine.is_empty() {
        return;
    }
    let dtype = src0.dtype;
    let kernels = repack_of(dtype).expect("an interleaved type").groups;
    let bias = kernels.bias(vnni);
    let x = src0.data.cast_const().wrapping_add(mine.start * gstride);
    let mut sums = Vec::new();
    for tile in pairs.chunks(MAX_ROWS) {
        let rows = tile.len();
        let mut ys = [std::ptr::null(); MAX_ROWS];
        let mut sy = [std::ptr::null(); MAX_ROWS];
        let mut outs = [std::ptr::null_mut(); MAX_ROWS];
        sums.clear();
        if let Some(m) = bias {
            for &(y, _) in tile {
                // SAFETY: a converted Q8_0 activation row of k values; AVX2 (the caller).
                unsafe { block_sums(k, y, m, &mut sums) };
            }
        }
        for (j, &(y, out)) in tile.iter().enumerate() {
            ys[j] = y;
            if bias.is_some() {
                sy[j] = sums[j * (k / 32)..].as_ptr();
            }
            outs[j] = out.wrapping_add(GROUP * mine.start);
        }
        let (ys, outs) = (&ys[..rows], &outs[..rows]);
        // SAFETY: this thread's groups of the 2-D interleaved weight (k values per row);
        // converted activation rows of its dot type (and their block bias); each output row
        // holds nr0 values and this thread owns the columns of its groups; the caller checked
        // the CPU.
        unsafe { run_tile(kernels, vnni, false, groups(x, mine.len()), ys, &sy[..rows], outs) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matmul::layouts::QK_BYTES;

    #[test]
    fn interleave_round_trips_and_places_bytes() {
        let (rows, k) = (16, 64);
        let src: Vec<u8> = (0..rows * k / 32 * QK_BYTES).map(|i| (i * 7 % 251) as u8).collect();
        let il = interleave(DType::Q4_0, &src, rows, k).unwrap();
        assert_eq!(deinterleave(DType::Q4_0, &il, rows, k).unwrap(), src);
        // Group 1, block 1, row 3: its scale, and its nibble bytes 4..8 in chunk 1.
        let row = k / 32 * QK_BYTES;
        let b = 8 * row + 3 * row + QK_BYTES;
        let o = 8 * row + GROUP * QK_BYTES;
        assert_eq!(il[o + 6..o + 8], src[b..b + 2]);
        assert_eq!(il[o + 16 + 32 + 12..o + 16 + 32 + 16], src[b + 2 + 4..b + 2 + 8]);
        assert!(interleave(DType::Q4_0, &src[1..], rows, k).is_none());
        assert!(interleave(DType::Q4_0, &src, 12, k).is_none());
        assert!(interleave(DType::Q8_0, &src, rows, k).is_none());
        // IQ4_NL: Q4_0's shape.
        assert_eq!(interleave(DType::IQ4_NL, &src, rows, k).unwrap(), il);
        // MXFP4: the eight one-byte exponents, then the nibble words.
        let src: Vec<u8> = (0..rows * k / 32 * 17).map(|i| (i * 11 % 251) as u8).collect();
        let il = interleave(DType::MXFP4, &src, rows, k).unwrap();
        assert_eq!(deinterleave(DType::MXFP4, &il, rows, k).unwrap(), src);
        // Group 1, block 1, row 3: its exponent, and its nibble bytes 4..8 (chunk 1).
        let row = k / 32 * 17;
        let (b, o) = (8 * row + 3 * row + 17, 8 * row + 8 * 17);
        assert_eq!(il[o + 3], src[b]);
        assert_eq!(il[o + 8 + 32 + 12..o + 8 + 32 + 16], src[b + 1 + 4..b + 1 + 8]);
        // Q4_K: d and dmin of each row, then its scales and codes as 4-byte words.
        let (rows, k) = (8, 512);
        let src: Vec<u8> = (0..rows * 2 * 144).map(|i| (i * 13 % 251) as u8).collect();
        let il = interleave(DType::Q4_K, &src, rows, k).unwrap();
        assert_eq!(deinterleave(DType::Q4_K, &il, rows, k).unwrap(), src);
        // Row 5, block 1: dmin, then code bytes 36..40 (word 3 + 9).
        let (b, o) = (5 * 288 + 144, 8 * 144);
        assert_eq!(il[o + 16 + 10..o + 16 + 12], src[b + 2..b + 4]);
        assert_eq!(il[o + 32 + 32 * 12 + 20..o + 32 + 32 * 12 + 24], src[b + 16 + 36..b + 16 + 40]);
        // Q2_K: d and dmin (at the end of its block) first, then its scales and codes as words.
        let src: Vec<u8> = (0..rows * 2 * 84).map(|i| (i * 17 % 251) as u8).collect();
        let il = interleave(DType::Q2_K, &src, rows, k).unwrap();
        assert_eq!(deinterleave(DType::Q2_K, &il, rows, k).unwrap(), src);
        // Row 6, block 1: dmin; scale bytes 4..8 (word 1); code bytes 8..12 (word 6).
        let (b, o) = (6 * 168 + 84, 8 * 84);
        assert_eq!(il[o + 16 + 12..o + 16 + 14], src[b + 82..b + 84]);
        assert_eq!(il[o + 32 + 32 + 24..o + 32 + 32 + 28], src[b + 4..b + 8]);
        assert_eq!(il[o + 32 + 32 * 6 + 24..o + 32 + 32 * 6 + 28], src[b + 24..b + 28]);
    }
}
